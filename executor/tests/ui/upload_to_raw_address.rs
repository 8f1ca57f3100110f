// Copying to a device address is unsafe: safe code writes through a handle.
use coll_executor::cuda::device::{DeviceBuffer, Gpu};

fn main() -> Result<(), coll_executor::ExecError> {
    let gpu = Gpu::open(0)?;
    let buf = DeviceBuffer::zeroed(&gpu, 16)?;
    gpu.upload(buf.ptr() + 4096, &[1u32; 4])
}
