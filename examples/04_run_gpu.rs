//! Run ring allreduce on the GPUs of this machine from Rust: compile the `.coll` program,
//! load it as a typed communicator, and call it on cudarc buffers and streams of our own, as
//! one would call NCCL. With one GPU, both ranks share it.
//!
//! `cargo run --release --example run_gpu [-- COUNT]`

use coll_executor::api::Program;
use coll_executor::cuda::cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use coll_executor::cuda::device::{device_count, driver_present};
use coll_executor::cuda::{Comm, GpuSettings, LoadOptions};
use coll_executor::dtype::{DType, ReduceOp};
use std::error::Error;
use std::process::ExitCode;
use std::sync::Arc;

fn main() -> ExitCode {
    match run() {
        Ok(0) => ExitCode::SUCCESS,
        Ok(wrong) => {
            eprintln!("{wrong} wrong elements");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<usize, Box<dyn Error>> {
    let count: usize = match std::env::args().nth(1) {
        Some(c) => c.parse()?,
        None => 1 << 24,
    };
    if !driver_present() || device_count() == 0 {
        return Err("no CUDA GPU here".into());
    }
    let gpus = device_count();
    let ranks = gpus.max(2) as u32;
    let topology = format!("nvswitch:{ranks}");
    let plan = Program::from_file("algorithms/allreduce_ring.coll")?.compile(ranks, &topology)?;
    let devices: Vec<usize> = (0..gpus).collect();
    // The library reads no environment: a program passes its own. Here the COLL_* variables
    // and the kernel's disk cache (COLL_CACHE_DIR, else ~/.cache/coll), so a second run skips
    // the kernel's NVRTC compile.
    let options = LoadOptions {
        settings: GpuSettings::from_lookup(|k| std::env::var(k).ok())?,
        ..LoadOptions::new(DType::F32, count as u64)
    };
    let comm = Comm::<f32>::with_options(plan, &devices, options)?;

    // Our own streams and buffers, one stream per GPU, one pair of buffers per rank on its
    // rank's GPU (cudarc's default allocator: the stream-ordered pool).
    let streams: Vec<Arc<CudaStream>> = devices
        .iter()
        .map(|&d| CudaContext::new(d).and_then(|c| c.new_stream()))
        .collect::<Result<_, _>>()?;
    let stream_of = |q: u32| &streams[q as usize * gpus / ranks as usize];
    let mut send: Vec<CudaSlice<f32>> = Vec::new();
    let mut recv: Vec<CudaSlice<f32>> = Vec::new();
    for &q in comm.ranks() {
        // Rank q contributes q + i % 7 to element i: every sum is exact in f32.
        let data: Vec<f32> = (0..count).map(|i| (q as usize + i % 7) as f32).collect();
        send.push(stream_of(q).clone_htod(&data)?);
        recv.push(stream_of(q).alloc_zeros::<f32>(count)?);
    }
    let on: Vec<&CudaStream> = streams.iter().map(|s| s.as_ref()).collect();
    let info = comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &on)?;
    println!("{info}");

    let mut wrong = 0;
    let n = ranks as usize;
    for (&q, out) in comm.ranks().iter().zip(&recv) {
        let host = stream_of(q).clone_dtoh(out)?;
        wrong += host
            .iter()
            .enumerate()
            .filter(|&(i, &v)| v != (n * (i % 7) + n * (n - 1) / 2) as f32)
            .count();
    }
    comm.executor().check_error()?;
    println!("{n} ranks on {gpus} GPU(s), {count} f32 each: {wrong} wrong");
    Ok(wrong)
}
