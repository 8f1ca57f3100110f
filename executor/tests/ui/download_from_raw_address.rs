// Copying from a device address is unsafe: safe code reads through a handle.
use coll_executor::cuda::device::Gpu;

fn main() -> Result<(), coll_executor::ExecError> {
    let gpu = Gpu::open(0)?;
    let mut out = [0f32; 4];
    gpu.download(0x7f00_0000_0000, &mut out)
}
