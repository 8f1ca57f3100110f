// A region borrows its arena: the arena cannot be dropped while the region is in use.
use coll_executor::cuda::device::{Arena, Gpu};

fn main() -> Result<(), coll_executor::ExecError> {
    let gpu = Gpu::open(0)?;
    let arena = Arena::new(&gpu, 1024)?;
    let region = arena.take(16)?;
    drop(arena);
    region.write(&gpu, &[1u32; 4])
}
