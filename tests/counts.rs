//! A proved plan runs at every element count: every shipped algorithm and the programs of
//! `inputs/plans/*.coll` that move chunks to other indices (through scratch and through the
//! user's own buffers), at n = 2, 3, 4, 8, with and without copy folding, on the CPU executor
//! at counts `k * m + r` for every remainder `r` of the chunk factor `k` and at every count
//! below `k` (0 and 1 included), each element checked against the naive reference. Where a
//! plan joins chunks of different sizes it runs padded (`coll_compiler::plan::sizes`); the
//! test programs do, and that path is also run split over processes.

use coll_compiler::plan::sizes::Padding;
use coll_compiler::topology::Topology;
use coll_compiler::{CompileOptions, compile};
use coll_executor::cpu::{CpuExecutor, RunOptions};
use coll_executor::dtype::{DType, ReduceOp};
use coll_executor::harness::{Report, run_checked, run_checked_part};
use coll_lang::Module;
use coll_lang::builtins::CollectiveKind;
use std::path::Path;
use std::time::Duration;

const RANKS: &[usize] = &[2, 3, 4, 8];

fn load(path: &Path) -> Module {
    coll_lang::load(coll_tests::source(path)).unwrap_or_else(|d| panic!("{}", d.render()))
}

/// The programs of `inputs/plans/` that move chunks to other indices.
fn moving_programs() -> Vec<Module> {
    coll_tests::coll_files("tests/inputs/plans")
        .iter()
        .map(|p| load(p))
        .collect()
}

/// `m` compiled for `n` ranks on its test preset, copies folded or not; `None` when it does
/// not support `n`.
fn executor(m: &Module, n: usize, fold: bool) -> Option<CpuExecutor> {
    let topo = Topology::parse(&coll_tests::preset(m, n)?).ok()?;
    let mut options = CompileOptions::default();
    options.lower.fold_copies = fold;
    let c = compile(m, &topo, &options).ok()?;
    Some(CpuExecutor::new(
        c.into_plan(),
        coll_compiler::DEFAULT_SLOTS,
    ))
}

/// The counts a plan of chunk factor `k` runs at: every count below `k`, and `3k + r` for
/// every remainder `r`.
fn counts(k: u64) -> Vec<u64> {
    (0..k).chain((0..k).map(|r| 3 * k + r)).collect()
}

fn reduces(exec: &CpuExecutor) -> bool {
    matches!(
        exec.plan().collective.0,
        CollectiveKind::AllReduce | CollectiveKind::ReduceScatter | CollectiveKind::Reduce
    )
}

/// Runs `exec` at every count of [`counts`], dtypes, ops, roots and placements varying with
/// the count; the failures in words. `padded` counts the runs that ran padded.
fn every_count(exec: &CpuExecutor, what: &str, padded: &mut usize) -> Vec<String> {
    let plan = exec.plan();
    let n = plan.ranks;
    let ops: &[ReduceOp] = if reduces(exec) {
        &ReduceOp::ALL
    } else {
        &[ReduceOp::Sum]
    };
    let mut failures = Vec::new();
    for (i, count) in counts(plan.chunk_factor).into_iter().enumerate() {
        let dtype = DType::ALL[i % DType::ALL.len()];
        let op = ops[i % ops.len()];
        let inplace = i % 2 == 1;
        let o = RunOptions {
            count,
            op,
            root: i as u32 % n,
            timeout: Duration::from_secs(20),
            stall: None,
        };
        if exec.run_count(count) != count {
            *padded += 1;
        }
        let what = format!("{what} count={count} {dtype} {op} inplace={inplace}");
        match run_checked(exec, dtype, &o, inplace) {
            Ok(r) if r.wrong == Some(0) => {}
            Ok(r) => failures.push(format!("{what}: #wrong {:?}", r.wrong)),
            Err(e) => failures.push(format!("{what}: {e}")),
        }
    }
    failures
}

/// Every shipped algorithm at every count, folded and not. None of them moves a chunk to
/// another class, so none runs padded: the ordinary case costs nothing extra.
#[test]
fn every_shipped_algorithm_is_exact_at_every_count() {
    let mut failures = Vec::new();
    let mut plans = 0;
    let mut padded = 0;
    for path in coll_tests::coll_files("algorithms") {
        let m = load(&path);
        let mut supported = 0;
        for &n in RANKS {
            for fold in [true, false] {
                let Some(exec) = executor(&m, n, fold) else {
                    continue;
                };
                supported += 1;
                plans += 1;
                assert!(
                    !Padding::of(exec.plan()).ever(),
                    "{} n={n} fold={fold} joins chunks of different classes",
                    m.file.name()
                );
                let what = format!("{} n={n} fold={fold}", m.file.name());
                failures.extend(every_count(&exec, &what, &mut padded));
            }
        }
        assert!(
            supported > 0,
            "{} supports none of {RANKS:?}",
            m.file.name()
        );
    }
    assert!(plans >= 80, "only {plans} plans");
    assert_eq!(padded, 0);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The programs that move chunks to other indices, at every count, folded and not: they run
/// padded exactly where their chunks differ in size, and are exact everywhere.
#[test]
fn programs_moving_chunks_to_other_indices_are_exact_at_every_count() {
    let programs = moving_programs();
    assert!(programs.len() >= 2);
    let mut failures = Vec::new();
    let mut padded = 0;
    for m in &programs {
        for &n in RANKS {
            for fold in [true, false] {
                let exec = executor(m, n, fold)
                    .unwrap_or_else(|| panic!("{} supports n={n}", m.file.name()));
                let plan = exec.plan();
                let k = plan.chunk_factor;
                let padding = Padding::of(plan);
                if !fold {
                    // Unfolded, every program keeps its moves to other classes.
                    assert!(padding.ever(), "{} n={n}", m.file.name());
                }
                // Exact at multiples of k; padded only where the analysis says.
                for count in counts(k) {
                    let run = exec.run_count(count);
                    if count % k == 0 || !padding.needed(count) {
                        assert_eq!(run, count, "{} n={n} count={count}", m.file.name());
                    } else {
                        assert_eq!(run, count.div_ceil(k) * k);
                    }
                }
                let what = format!("{} n={n} fold={fold}", m.file.name());
                failures.extend(every_count(&exec, &what, &mut padded));
            }
        }
    }
    // 4 of the 6 counts of the allgather unfolded, 2 of 4 of the allreduce either way, per n.
    assert_eq!(padded, 4 * (4 + 2 + 2), "padded runs");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The allreduce through swapped scratch slots pads at odd counts (chunk factor 2 at n = 4)
/// and runs exact at even ones; its scratch bytes grow by the padded input and output.
#[test]
fn the_swap_pads_at_odd_counts_only() {
    let m = moving_programs()
        .into_iter()
        .find(|m| m.file.name().ends_with("scratch_swap_allreduce.coll"))
        .expect("the swap program");
    let exec = executor(&m, 4, true).expect("supports 4");
    let plan = exec.plan();
    assert_eq!(plan.chunk_factor, 2);
    assert_eq!(
        Padding::of(plan).mismatched(),
        std::slice::from_ref(&(1..2))
    );
    assert_eq!(exec.run_count(1001), 1002);
    assert_eq!(exec.run_count(1000), 1000);
    assert_eq!(exec.run_count(1), 2);
    assert_eq!(exec.run_count(0), 0);
    // `acc` holds 2 chunks: at 1001, two of 501 elements, then the padded input and output
    // of 1002 elements each.
    assert_eq!(plan.scratch_bytes(1001, 4), (2 * 501 + 2 * 1002) * 4);
    assert_eq!(plan.scratch_bytes(1000, 4), 2 * 500 * 4);
}

/// Padded runs split over processes (threads linked over TCP on loopback) give the numbers
/// of the single-process run.
#[test]
fn padded_runs_are_exact_split_over_processes() {
    let mut failures = Vec::new();
    for m in moving_programs() {
        let exec = executor(&m, 4, false).expect("supports 4");
        for (i, count) in [7u64, 1, 0, 12].into_iter().enumerate() {
            let o = RunOptions {
                count,
                op: ReduceOp::Sum,
                timeout: Duration::from_secs(20),
                ..RunOptions::default()
            };
            let inplace = i % 2 == 0;
            let meshes = coll_executor::net::mesh::loopback(2, 4, Duration::from_secs(10))
                .expect("loopback mesh");
            let reports: Vec<Report> = std::thread::scope(|s| {
                let handles: Vec<_> = meshes
                    .into_iter()
                    .map(|mut mesh| {
                        let (exec, o) = (&exec, &o);
                        s.spawn(move || {
                            run_checked_part(exec, &mut mesh, DType::I32, o, inplace).expect("runs")
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("process thread"))
                    .collect()
            });
            let split = Report::combine(&reports);
            let single = run_checked(&exec, DType::I32, &o, inplace).expect("runs");
            if split.wrong != Some(0) || split.checked != single.checked {
                failures.push(format!(
                    "{} count={count}: split {:?} of {:?}, single {:?} of {:?}",
                    m.file.name(),
                    split.wrong,
                    split.checked,
                    single.wrong,
                    single.checked
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
