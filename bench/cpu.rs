//! The CPU executor's throughput: ring allreduce, 8 ranks, 64 MiB of f32 per rank, next to
//! this machine's memcpy bandwidth measured the same way (median of runs).
//!
//! `cargo bench --bench cpu` (from the workspace root).

use coll_compiler::topology::Topology;
use coll_compiler::{CompileOptions, compile};
use coll_executor::cpu::{CpuExecutor, RunOptions};
use coll_executor::dtype::ReduceOp;
use std::time::{Duration, Instant};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let path = root.join("algorithms/allreduce_ring.coll");
    let m = coll_lang::load_bytes("allreduce_ring.coll", std::fs::read(&path).expect("ring"))
        .expect("valid");
    let n = 8u32;
    let topo = Topology::parse("nvswitch:8").expect("preset");
    let c = compile(&m, &topo, &CompileOptions::default()).expect("compiles");
    let exec = CpuExecutor::new(c.into_plan(), 2);
    let count = (64u64 << 20) / 4;
    let inputs: Vec<Vec<f32>> = (0..n).map(|r| vec![r as f32; count as usize]).collect();
    let o = RunOptions {
        count,
        op: ReduceOp::Sum,
        ..RunOptions::default()
    };
    let runs = 5;
    let t: Vec<Duration> = (0..runs)
        .map(|_| {
            let s = Instant::now();
            let out = exec.run(&inputs, &o).expect("runs");
            std::hint::black_box(&out);
            s.elapsed()
        })
        .collect();
    let t = median(t).as_secs_f64();
    let bytes = (count * 4) as f64;
    let algbw = bytes / t / 1e9;
    let busbw = algbw * 2.0 * f64::from(n - 1) / f64::from(n);
    // memcpy: one thread copying 64 MiB, and every rank's worth of traffic at once.
    let src = vec![1u8; 64 << 20];
    let mut dst = vec![0u8; 64 << 20];
    let m1: Vec<Duration> = (0..runs)
        .map(|_| {
            let s = Instant::now();
            dst.copy_from_slice(&src);
            std::hint::black_box(&dst);
            s.elapsed()
        })
        .collect();
    let memcpy = (64u64 << 20) as f64 / median(m1).as_secs_f64() / 1e9;
    println!("| measurement | figure |");
    println!("|---|---|");
    println!(
        "| ring allreduce, 8 ranks, 64 MiB f32 per rank: time | {:.1} ms |",
        t * 1e3
    );
    println!("| algbw / busbw (nccl-tests definitions) | {algbw:.2} / {busbw:.2} GB/s |");
    println!(
        "| bytes the executor moves per run (send copy + receive copy/reduce, all ranks) | {:.2} GB |",
        2.0 * 2.0 * f64::from(n - 1) / f64::from(n) * bytes * f64::from(n) / 1e9
    );
    println!("| memcpy, one thread, 64 MiB | {memcpy:.2} GB/s |");
}
