// A captured graph replays device addresses with no borrow to keep them alive: capturing
// is unsafe.
use coll_executor::cuda::device::{Gpu, capture};

fn main() -> Result<(), coll_executor::ExecError> {
    let gpu = Gpu::open(0)?;
    let graphs = capture(&[gpu.stream().clone()], || Ok(()))?;
    drop(graphs);
    Ok(())
}
