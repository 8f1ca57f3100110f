// Clearing device memory by address is unsafe: safe code clears a handle.
use coll_executor::cuda::device::Gpu;

fn main() -> Result<(), coll_executor::ExecError> {
    let gpu = Gpu::open(0)?;
    gpu.zero(0x7f00_0000_0000, 1 << 20)
}
