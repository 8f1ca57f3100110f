// A region cannot be handed out of the scope its arena lives in.
use coll_executor::cuda::device::{Arena, Gpu, Region};

fn scratch(gpu: &Gpu) -> Result<Region<'static>, coll_executor::ExecError> {
    let arena = Arena::new(gpu, 1024)?;
    arena.take(16)
}

fn main() {
    let gpu = Gpu::open(0).ok();
    let _ = gpu.as_ref().map(scratch);
}
