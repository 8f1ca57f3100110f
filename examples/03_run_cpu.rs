//! Compile ring allreduce for 8 ranks and run it on the CPU executor with real data, then
//! check every element against a direct computation.
//!
//! `cargo run --release --example run_cpu`

use coll_compiler::topology::Topology;
use coll_compiler::{CompileOptions, compile};
use coll_executor::cpu::{CpuExecutor, RunOptions};
use coll_executor::dtype::ReduceOp;
use std::process::ExitCode;

fn main() -> ExitCode {
    let path = "algorithms/allreduce_ring.coll";
    let n = 8;
    let result = std::fs::read(path)
        .map_err(|e| e.to_string())
        .and_then(|b| coll_lang::load_bytes(path, b).map_err(|d| d.render()))
        .and_then(|m| {
            let topo = Topology::parse("nvswitch:8").map_err(|e| e.to_string())?;
            compile(&m, &topo, &CompileOptions::default()).map_err(|d| d.render())
        })
        .map(|c| CpuExecutor::new(c.into_plan(), 2))
        .and_then(|exec| {
            let count = 1_000_003u64;
            // Rank r contributes r + i % 5 to element i.
            let inputs: Vec<Vec<f32>> = (0..n)
                .map(|r| (0..count).map(|i| (r + i % 5) as f32).collect())
                .collect();
            let o = RunOptions {
                count,
                op: ReduceOp::Sum,
                ..RunOptions::default()
            };
            let out = exec.run(&inputs, &o).map_err(|e| e.to_string())?;
            let wrong = out
                .iter()
                .flat_map(|rank| rank.iter().enumerate())
                .filter(|&(i, &v)| v != (0..n).map(|r| (r + i as u64 % 5) as f32).sum::<f32>())
                .count();
            Ok(wrong)
        });
    match result {
        Ok(0) => {
            println!("ring allreduce, 8 ranks, 1000003 f32: every element correct");
            ExitCode::SUCCESS
        }
        Ok(w) => {
            println!("{w} wrong elements");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
