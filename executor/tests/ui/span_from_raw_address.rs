// A span (a region's place, kept without the borrow) cannot be made up from an address:
// only a region gives one, and an arena checks it before it writes through it.
use coll_executor::cuda::device::{Arena, Gpu, Span};

fn main() -> Result<(), coll_executor::ExecError> {
    let gpu = Gpu::open(0)?;
    let arena = Arena::new(&gpu, 1024)?;
    let forged = Span {
        at: 0,
        bytes: 1 << 20,
        ptr: 0x7f00_0000_0000,
    };
    arena.region(forged)?.write(&gpu, &[1u8; 16])
}
