//! Ring allreduce and ring allgather for 4 ranks on the CPU executor, from plans proved when
//! this package was built: `build.rs` checks `algorithms/allreduce_ring.coll` and
//! `algorithms/allgather_ring.coll` with `coll_compiler::embed` (a wrong line fails the
//! build there), and the binary carries their plans, so it reads no `.coll` file and runs
//! no compiler. Every element is compared with a direct computation; a wrong one makes the
//! exit code 1.
//!
//! `cargo run -p coll-example-embedded`

use coll_compiler::plan::ValidPlan;
use coll_executor::cpu::{CpuExecutor, RunOptions};
use coll_executor::dtype::ReduceOp;
use std::process::ExitCode;

// ALLREDUCE_RING, ALLGATHER_RING and COLL_PROGRAMS.
coll_compiler::include_programs!();

const RANKS: u32 = 4;
/// Elements per rank: odd, so the chunks differ in size.
const COUNT: u64 = 100_003;

fn main() -> ExitCode {
    let mut failed = false;
    for (program, run) in [
        (
            ALLREDUCE_RING,
            allreduce as fn(ValidPlan, u64) -> Result<usize, String>,
        ),
        (ALLGATHER_RING, allgather),
    ] {
        let counts: Vec<String> = program.ranks().map(|n| n.to_string()).collect();
        let result = program
            .plan(RANKS)
            .map_err(|e| e.to_string())
            .and_then(|plan| {
                let what = format!("{} `{}`", plan.collective.0.name(), plan.name);
                run(plan, COUNT).map(|wrong| (what, wrong))
            });
        match result {
            Ok((what, wrong)) => {
                println!(
                    "{what} from {} (embedded for {} ranks): {RANKS} ranks, {COUNT} f32 per \
                     rank on cpu, #wrong {wrong}",
                    program.file(),
                    counts.join(", ")
                );
                failed |= wrong > 0;
            }
            Err(e) => {
                eprintln!("{}: {e}", program.file());
                failed = true;
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn executor(plan: ValidPlan) -> CpuExecutor {
    CpuExecutor::new(plan, coll_compiler::DEFAULT_SLOTS)
}

fn options(count: u64) -> RunOptions {
    RunOptions {
        count,
        op: ReduceOp::Sum,
        ..RunOptions::default()
    }
}

/// Runs an allreduce plan on `count` elements per rank; returns how many are wrong.
fn allreduce(plan: ValidPlan, count: u64) -> Result<usize, String> {
    let n = u64::from(plan.ranks);
    let exec = executor(plan);
    // Rank r contributes r + i % 5 to element i: small integers, so f32 sums are exact.
    let inputs: Vec<Vec<f32>> = (0..n)
        .map(|r| (0..count).map(|i| (r + i % 5) as f32).collect())
        .collect();
    let outputs = exec
        .run(&inputs, &options(count))
        .map_err(|e| e.to_string())?;
    Ok(outputs
        .iter()
        .flat_map(|rank| rank.iter().enumerate())
        .filter(|&(i, &v)| v != (0..n).map(|r| (r + i as u64 % 5) as f32).sum::<f32>())
        .count())
}

/// Runs an allgather plan on `count` elements per rank; returns how many are wrong.
fn allgather(plan: ValidPlan, count: u64) -> Result<usize, String> {
    let n = u64::from(plan.ranks);
    let exec = executor(plan);
    let value = |r: u64, i: u64| (r * 1000 + i % 1000) as f32;
    let inputs: Vec<Vec<f32>> = (0..n)
        .map(|r| (0..count).map(|i| value(r, i)).collect())
        .collect();
    let outputs = exec
        .run(&inputs, &options(count))
        .map_err(|e| e.to_string())?;
    // Every rank's output is every rank's input, in rank order.
    Ok(outputs
        .iter()
        .map(|out| {
            let expected = (0..n).flat_map(|r| (0..count).map(move |i| value(r, i)));
            let missing = (n * count).abs_diff(out.len() as u64) as usize;
            missing + out.iter().zip(expected).filter(|(v, e)| *v != e).count()
        })
        .sum())
}

#[cfg(test)]
mod tests {
    use super::*;
    use coll_compiler::topology::Topology;
    use coll_compiler::{CompileOptions, compile, lang};

    #[test]
    fn both_programs_are_embedded_for_their_rank_counts() {
        let files: Vec<&str> = COLL_PROGRAMS.iter().map(|p| p.file()).collect();
        assert_eq!(
            files,
            [
                "../../algorithms/allreduce_ring.coll",
                "../../algorithms/allgather_ring.coll"
            ]
        );
        for p in COLL_PROGRAMS {
            assert_eq!(p.ranks().collect::<Vec<_>>(), [2, 4, 8], "{}", p.file());
        }
    }

    /// The embedded plans are what compiling the embedded source gives now.
    #[test]
    fn embedded_plans_equal_compiling_the_source() {
        for p in COLL_PROGRAMS {
            let module = lang::load_bytes(p.file(), p.source().as_bytes().to_vec())
                .expect("the embedded source loads");
            for n in p.ranks() {
                let topo = Topology::parse(&format!("nvswitch:{n}")).expect("preset");
                let direct = compile(&module, &topo, &CompileOptions::default())
                    .expect("the embedded source compiles")
                    .into_plan();
                assert_eq!(
                    p.plan(n).expect("embedded plan"),
                    direct,
                    "{} n = {n}",
                    p.file()
                );
            }
        }
    }

    #[test]
    fn a_rank_count_not_embedded_is_refused_by_name() {
        let err = ALLREDUCE_RING
            .plan(3)
            .expect_err("3 ranks were not embedded");
        assert_eq!(
            err.to_string(),
            "../../algorithms/allreduce_ring.coll has no embedded plan for 3 ranks; it has \
             plans for 2, 4, 8 ranks"
        );
    }

    #[test]
    fn every_embedded_plan_runs_correctly() {
        for n in ALLREDUCE_RING.ranks() {
            let plan = ALLREDUCE_RING.plan(n).expect("plan");
            assert_eq!(allreduce(plan, 1001).expect("runs"), 0, "allreduce n = {n}");
        }
        for n in ALLGATHER_RING.ranks() {
            let plan = ALLGATHER_RING.plan(n).expect("plan");
            assert_eq!(allgather(plan, 1001).expect("runs"), 0, "allgather n = {n}");
        }
    }

    /// The checks above can fail: each collective's plan is wrong for the other's check.
    #[test]
    fn a_wrong_result_is_counted() {
        let ring = ALLREDUCE_RING.plan(2).expect("plan");
        let gather = ALLGATHER_RING.plan(2).expect("plan");
        // Allreduce leaves 10 sums where the allgather check expects 20 inputs: at least
        // the 10 missing ones per rank are counted.
        assert!(allgather(ring, 10).expect("runs") >= 2 * 10);
        assert!(allreduce(gather, 10).expect("runs") > 0);
    }
}
