//! Parse -> elaborate -> symbolic proof for ring allreduce at n = 8, 128, 1024 (the goal:
//! n = 1024 well under 1 s; MSCCLang needs 0.13 s at n = 8, 30 s at n = 128).
//!
//! `cargo bench --bench verify` (from the workspace root). Prints a markdown table: median
//! of several runs per stage, and the operation count.

use coll_compiler::elaborate::{Facts, Options};
use std::time::{Duration, Instant};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let files = [
        "allreduce_ring",
        "allgather_ring",
        "alltoall",
        "allreduce_tree",
    ];
    println!("| algorithm | n | ops | parse + check | elaborate | verify | total |");
    println!("|---|---|---|---|---|---|---|");
    for name in files {
        let path = root.join("algorithms").join(format!("{name}.coll"));
        let bytes = std::fs::read(&path).expect("algorithm exists");
        for n in [8usize, 128, 1024] {
            let runs = if n >= 1024 { 5 } else { 21 };
            let (mut t_load, mut t_elab, mut t_verify, mut t_total) =
                (vec![], vec![], vec![], vec![]);
            let mut ops = 0;
            for _ in 0..runs {
                let t0 = Instant::now();
                let module = coll_lang::load_bytes(name, bytes.clone()).expect("valid");
                let t1 = Instant::now();
                let e = coll_compiler::elaborate::elaborate(
                    &module,
                    &Facts::nvswitch(n),
                    &Options::default(),
                )
                .expect("elaborates");
                let t2 = Instant::now();
                coll_compiler::verify::verify(&e, &module.file).expect("proves");
                let t3 = Instant::now();
                ops = e.ops.len();
                t_load.push(t1 - t0);
                t_elab.push(t2 - t1);
                t_verify.push(t3 - t2);
                t_total.push(t3 - t0);
            }
            println!(
                "| {name} | {n} | {ops} | {} | {} | {} | {} |",
                ms(median(t_load)),
                ms(median(t_elab)),
                ms(median(t_verify)),
                ms(median(t_total))
            );
        }
    }
}
