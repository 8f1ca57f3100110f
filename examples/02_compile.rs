//! Compile a `.coll` file for a topology, print the per-rank schedules and the predicted
//! bus bandwidth at a few sizes.
//!
//! `cargo run --example compile -- algorithms/allreduce_ring.coll 8 nvswitch:8`

use coll_compiler::topology::Topology;
use coll_compiler::{CompileOptions, compile, dump, predict};
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .unwrap_or_else(|| "algorithms/allreduce_ring.coll".into());
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(4);
    let spec = args.next().unwrap_or_else(|| format!("nvswitch:{n}"));
    let topo = match Topology::parse(&spec) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let module = match std::fs::read(&path)
        .map_err(|e| e.to_string())
        .and_then(|b| coll_lang::load_bytes(&path, b).map_err(|d| d.render()))
    {
        Ok(m) => m,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let compiled = match compile(&module, &topo, &CompileOptions::default()) {
        Ok(c) => c,
        Err(d) => {
            eprint!("{}", d.render());
            return ExitCode::FAILURE;
        }
    };
    let plan = &compiled.lowered.plan;
    print!("{}", dump::text(plan));
    let steps = |r, b, o| compiled.schedule.round_of(r, b, o);
    let sizes = [8, 1 << 20, 1 << 30];
    match predict::predict_sweep_with(plan, &topo, &sizes, &steps, &predict::Model::default()) {
        Ok(rows) => print!("{}", predict::table(&rows)),
        Err(e) => eprintln!("no prediction: {e}"),
    }
    ExitCode::SUCCESS
}
