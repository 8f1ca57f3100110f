//! The CPU executor, numerically: every shipped algorithm × rank counts × dtypes × reduction
//! ops × in/out-of-place, each element checked against the naive reference. A sampled
//! matrix runs in the normal test command; the full one under `--ignored`. Also the faults:
//! a stalled rank fails the run within the timeout naming the op and its line. In-place
//! algorithms compiled out of place, and the copy-folding fixtures, in both placements.

use coll_compiler::topology::Topology;
use coll_compiler::{CompileOptions, compile};
use coll_executor::cpu::{CpuExecutor, RunOptions};
use coll_executor::dtype::{DType, ReduceOp};
use coll_executor::error::ExecError;
use coll_executor::harness::run_checked;
use coll_lang::Module;
use std::time::Duration;

const RANKS: &[usize] = &[2, 3, 4, 5, 8, 16];

fn algorithms() -> Vec<Module> {
    coll_tests::coll_files("algorithms")
        .iter()
        .map(|p| {
            coll_lang::load(coll_tests::source(p)).unwrap_or_else(|d| panic!("{}", d.render()))
        })
        .collect()
}

/// The plan of `m` for `n` ranks on the first topology its header accepts, or `None` when it
/// does not support `n`.
fn plan(m: &Module, n: usize) -> Option<CpuExecutor> {
    plan_with(m, n, &CompileOptions::default())
}

/// [`plan`] with `options`.
fn plan_with(m: &Module, n: usize, options: &CompileOptions) -> Option<CpuExecutor> {
    // Hierarchical algorithms run on cluster:2x2, 2x4 and 4x4 (n = 4, 8, 16).
    let grid: &[(usize, usize)] = match n {
        4 => &[(2, 2)],
        8 => &[(2, 4)],
        16 => &[(4, 4)],
        _ => &[],
    };
    for spec in coll_tests::machines(m, &[n], grid) {
        let Ok(topo) = Topology::parse(&spec) else {
            continue;
        };
        if topo.num_ranks() != n {
            continue;
        }
        if let Ok(c) = compile(m, &topo, options) {
            return Some(CpuExecutor::new(
                c.into_plan(),
                coll_compiler::DEFAULT_SLOTS,
            ));
        }
    }
    None
}

/// Runs the matrix; `keep(i)` selects which combinations (numbered in order) run.
fn matrix(keep: impl Fn(usize) -> bool) {
    let mut failures = Vec::new();
    let mut runs = 0;
    let mut i = 0;
    for m in algorithms() {
        let mut supported = 0;
        for &n in RANKS {
            let Some(exec) = plan(&m, n) else { continue };
            supported += 1;
            let reduces = matches!(
                exec.plan().collective.0,
                coll_lang::builtins::CollectiveKind::AllReduce
                    | coll_lang::builtins::CollectiveKind::ReduceScatter
                    | coll_lang::builtins::CollectiveKind::Reduce
            );
            for dtype in DType::ALL {
                for op in ReduceOp::ALL {
                    for inplace in [false, true] {
                        i += 1;
                        if !keep(i) {
                            continue;
                        }
                        // Counts that do not divide into the chunks, and the empty case.
                        let count = if i % 17 == 0 {
                            0
                        } else {
                            1000 + n as u64 + (i % 7) as u64
                        };
                        let o = RunOptions {
                            count,
                            op,
                            root: (i % n) as u32,
                            timeout: Duration::from_secs(20),
                            stall: None,
                        };
                        runs += 1;
                        let what = format!(
                            "{} n={n} {dtype} {op} count={count} inplace={inplace}",
                            m.file.name()
                        );
                        match run_checked(&exec, dtype, &o, inplace) {
                            Ok(r) if r.wrong == Some(0) => {}
                            Ok(r) => failures.push(format!("{what}: #wrong {:?}", r.wrong)),
                            Err(ExecError::Unsupported { .. })
                                if op == ReduceOp::Avg && !reduces => {}
                            Err(e) => failures.push(format!("{what}: {e}")),
                        }
                    }
                }
            }
        }
        assert!(
            supported > 0,
            "{} supports none of {RANKS:?}",
            m.file.name()
        );
    }
    assert!(
        failures.is_empty(),
        "{} of {runs} runs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(runs > 0);
}

#[test]
fn sampled_matrix_is_exact() {
    // About one combination in nine, spread over every algorithm, n, dtype and op.
    matrix(|i| i % 9 == 0);
}

#[test]
#[ignore = "full matrix: cargo test -- --ignored"]
fn full_matrix_is_exact() {
    matrix(|_| true);
}

/// Runs `exec` in both placements for a few counts, dtypes and ops; the failures in words.
fn exact_both_ways(exec: &CpuExecutor, what: &str) -> Vec<String> {
    let mut failures = Vec::new();
    let n = exec.plan().ranks as usize;
    for (i, (dtype, op)) in [
        (DType::F32, ReduceOp::Sum),
        (DType::I32, ReduceOp::Max),
        (DType::Bf16, ReduceOp::Sum),
    ]
    .into_iter()
    .enumerate()
    {
        for inplace in [false, true] {
            let o = RunOptions {
                count: 997 + i as u64,
                op,
                root: (i % n) as u32,
                timeout: Duration::from_secs(20),
                stall: None,
            };
            match run_checked(exec, dtype, &o, inplace) {
                Ok(r) if r.wrong == Some(0) => {}
                Ok(r) => failures.push(format!(
                    "{what} {dtype} {op} inplace={inplace}: #wrong {:?}",
                    r.wrong
                )),
                Err(e) => failures.push(format!("{what} {dtype} {op} inplace={inplace}: {e}")),
            }
        }
    }
    failures
}

/// In-place algorithms compiled out of place (`--placement out-of-place`) give exact results called
/// out of place and in place, at every rank count they support.
#[test]
fn out_of_place_plans_of_in_place_algorithms_are_exact() {
    let options = coll_tests::out_of_place();
    let mut failures = Vec::new();
    let mut runs = 0;
    for m in algorithms().iter().filter(|m| m.summary.inplace) {
        for &n in &[2, 3, 4, 8] {
            let Some(exec) = plan_with(m, n, &options) else {
                continue;
            };
            assert!(!exec.plan().inplace, "{}", m.file.name());
            runs += 1;
            failures.extend(exact_both_ways(&exec, &format!("{} n={n}", m.file.name())));
        }
    }
    assert!(runs >= 30, "only {runs} plans");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The copy-folding fixtures of `inputs/fold/` give exact results in both placements.
#[test]
fn folded_fixtures_are_exact() {
    let mut failures = Vec::new();
    for path in coll_tests::coll_files("tests/inputs/fold") {
        let m = coll_lang::load(coll_tests::source(&path)).expect("valid fixture");
        for n in [2, 3, 4] {
            let exec = plan(&m, n).expect("supports n");
            failures.extend(exact_both_ways(&exec, &format!("{} n={n}", m.file.name())));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn stalled_rank_times_out_naming_the_line() {
    let m = algorithms()
        .into_iter()
        .find(|m| m.file.name().ends_with("allreduce_ring.coll"))
        .expect("ring ships");
    let exec = plan(&m, 4).expect("ring supports 4");
    let o = RunOptions {
        count: 64,
        timeout: Duration::from_millis(300),
        stall: Some(2),
        ..RunOptions::default()
    };
    let start = std::time::Instant::now();
    let err = run_checked(&exec, DType::F32, &o, false).expect_err("a stalled rank cannot finish");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "fails within the timeout, not a hang"
    );
    let msg = err.to_string();
    assert!(matches!(err, ExecError::Timeout { .. }), "{msg}");
    // Whichever rank gives up first names its op and the line that produced it.
    assert!(msg.contains("algorithms/allreduce_ring.coll:"), "{msg}");
    assert!(msg.contains("rank ") && msg.contains("waited"), "{msg}");
}

#[test]
fn ring_with_a_million_and_three_elements_is_exact() {
    let (code, out, err) = coll_cli::run_captured([
        "coll",
        "run",
        &coll_tests::root()
            .join("algorithms/allreduce_ring.coll")
            .to_string_lossy(),
        "--ranks",
        "8",
        "--count",
        "1000003",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("#wrong 0"), "{out}");
}

#[test]
fn wrong_inputs_are_errors_not_panics() {
    let m = &algorithms()[0];
    let exec = plan(m, 4).expect("supports 4");
    let o = RunOptions {
        count: 10,
        ..RunOptions::default()
    };
    assert!(matches!(
        exec.run::<f32>(&[], &o),
        Err(ExecError::RankCount { .. })
    ));
    let short = vec![vec![0.0f32; 3]; 4];
    assert!(matches!(
        exec.run(&short, &o),
        Err(ExecError::InputSize { .. })
    ));
    let bad_root = RunOptions { root: 9, ..o };
    let (inputs, _) = exec.sizes(10);
    let ok = vec![vec![0.0f32; inputs as usize]; 4];
    assert!(matches!(
        exec.run(&ok, &bad_root),
        Err(ExecError::Root { .. })
    ));
}

/// Runs `exec` split over `procs` processes played by threads, linked over TCP on loopback
/// (the whole remote path: proxy, frames, credits), two calls in a row; the reports of every
/// process combined (the worst call's #wrong).
fn run_over_tcp(
    exec: &CpuExecutor,
    procs: u32,
    dtype: DType,
    o: &RunOptions,
    inplace: bool,
) -> Result<coll_executor::harness::Report, String> {
    let meshes =
        coll_executor::net::mesh::loopback(procs, exec.plan().ranks, Duration::from_secs(10))
            .map_err(|e| e.to_string())?;
    let reports: Vec<Result<_, ExecError>> = std::thread::scope(|s| {
        let handles: Vec<_> = meshes
            .into_iter()
            .map(|mut mesh| {
                // Two calls on one mesh: state carried across calls (credits) must not
                // leak from one call into the next.
                s.spawn(move || {
                    let first = coll_executor::harness::run_checked_part(
                        exec, &mut mesh, dtype, o, inplace,
                    )?;
                    let second = coll_executor::harness::run_checked_part(
                        exec, &mut mesh, dtype, o, inplace,
                    )?;
                    Ok(coll_executor::harness::Report {
                        wrong: first.wrong.zip(second.wrong).map(|(a, b)| a.max(b)),
                        ..second
                    })
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("process thread"))
            .collect()
    });
    let reports = reports
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    Ok(coll_executor::harness::Report::combine(&reports))
}

/// Every shipped algorithm at 4 and 8 ranks, split over 2 and 3 processes (uneven blocks),
/// dtypes, ops and in/out of place varying, exact on every element; the same numbers as the
/// single-process run.
#[test]
fn every_algorithm_is_exact_split_over_processes() {
    let mut failures = Vec::new();
    let mut runs = 0;
    let mut i = 0usize;
    for m in algorithms() {
        for n in [4, 8] {
            let Some(exec) = plan(&m, n) else { continue };
            let reduces = matches!(
                exec.plan().collective.0,
                coll_lang::builtins::CollectiveKind::AllReduce
                    | coll_lang::builtins::CollectiveKind::ReduceScatter
                    | coll_lang::builtins::CollectiveKind::Reduce
            );
            for procs in [2, 3] {
                i += 1;
                let dtype = DType::ALL[i % DType::ALL.len()];
                let op = ReduceOp::ALL[i % ReduceOp::ALL.len()];
                if op == ReduceOp::Avg && !reduces {
                    continue;
                }
                let inplace = i.is_multiple_of(2);
                let o = RunOptions {
                    count: 997 + i as u64,
                    op,
                    root: (i as u32) % n as u32,
                    timeout: Duration::from_secs(20),
                    ..RunOptions::default()
                };
                runs += 1;
                let what = format!(
                    "{} n={n} procs={procs} {dtype} {} inplace={inplace} root={}",
                    m.file.name(),
                    op.name(),
                    o.root
                );
                let single = run_checked(&exec, dtype, &o, inplace);
                match (run_over_tcp(&exec, procs, dtype, &o, inplace), single) {
                    (Ok(r), Ok(s)) if r.wrong == s.wrong && r.checked == s.checked => {
                        if r.wrong.is_some_and(|w| w > 0) {
                            failures.push(format!("{what}: #wrong {:?}", r.wrong));
                        }
                    }
                    (a, b) => failures.push(format!("{what}: {a:?} vs single process {b:?}")),
                }
            }
        }
    }
    assert!(runs >= 40, "only {runs} runs");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The plan of `tests/inputs/plans/ok_head_several_peers_3.json`: rank 0's one block receives
/// from ranks 1 and 2, combines both with its own in one `rrcs` and sends the sum to both.
fn head_of_three() -> CpuExecutor {
    let path = coll_tests::root().join("tests/inputs/plans/ok_head_several_peers_3.json");
    let text = std::fs::read_to_string(&path).expect("the fixture ships");
    let plan = coll_compiler::plan::ValidPlan::from_json(&text).expect("a valid plan");
    CpuExecutor::new(plan, coll_compiler::DEFAULT_SLOTS)
}

/// Runs `exec` split over `procs` processes (threads over TCP on loopback), each granting
/// its peers only `grant`; the reports of every process combined.
fn run_over_tcp_granting(
    exec: &CpuExecutor,
    procs: u32,
    grant: &coll_executor::net::mesh::Grant,
    dtype: DType,
    o: &RunOptions,
) -> Result<coll_executor::harness::Report, String> {
    let meshes =
        coll_executor::net::mesh::loopback_granting(procs, exec.plan().ranks, grant, o.timeout)
            .map_err(|e| e.to_string())?;
    let reports: Vec<Result<_, ExecError>> = std::thread::scope(|s| {
        let handles: Vec<_> = meshes
            .into_iter()
            .map(|mut mesh| {
                s.spawn(move || {
                    coll_executor::harness::run_checked_part(exec, &mut mesh, dtype, o, true)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("process thread"))
            .collect()
    });
    let reports = reports
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    Ok(coll_executor::harness::Report::combine(&reports))
}

/// A block of several peers, in place, at counts 1, 7, 1000 and 1237 (a prime), f32 and
/// i32, sum, max and prod: exact against the reference in one process and split over 2 and
/// 3 processes that grant only the plan's connections ([`Grant::for_plan`], which must list
/// every receive peer of a block). A grant of only each block's first receive peer fails the
/// split run, so the check sees the grant.
///
/// [`Grant::for_plan`]: coll_executor::net::mesh::Grant::for_plan
#[test]
fn several_peer_blocks_are_exact_in_one_process_and_over_tcp() {
    use coll_executor::net::mesh::Grant;
    let exec = head_of_three();
    let slots = u64::from(coll_compiler::DEFAULT_SLOTS);
    let mut failures = Vec::new();
    for count in [1u64, 7, 1000, 1237] {
        // Messages of one chunk: `count` elements of 4 bytes.
        let grant = Grant::for_plan(exec.plan(), slots, count * 4);
        for dtype in [DType::F32, DType::I32] {
            for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Prod] {
                let o = RunOptions {
                    count,
                    op,
                    timeout: Duration::from_secs(20),
                    ..RunOptions::default()
                };
                let what = format!("count {count} {dtype} {op}");
                match run_checked(&exec, dtype, &o, true) {
                    Ok(r) if r.wrong == Some(0) && r.checked == 3 * count => {}
                    Ok(r) => failures.push(format!("{what}: #wrong {:?}", r.wrong)),
                    Err(e) => failures.push(format!("{what}: {e}")),
                }
                for procs in [2, 3] {
                    match run_over_tcp_granting(&exec, procs, &grant, dtype, &o) {
                        Ok(r) if r.wrong == Some(0) && r.checked == 3 * count => {}
                        Ok(r) => {
                            failures.push(format!("{what} procs={procs}: #wrong {:?}", r.wrong))
                        }
                        Err(e) => failures.push(format!("{what} procs={procs}: {e}")),
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // Only the first receive peer of each block granted: rank 2's message to rank 0 is
    // outside the grant, and the run fails instead of finishing.
    let first_only = Grant {
        conns: Some([(1, 0, 0), (0, 1, 0), (0, 2, 0)].into()),
        ..Grant::for_plan(exec.plan(), slots, 64)
    };
    let o = RunOptions {
        count: 16,
        timeout: Duration::from_secs(5),
        ..RunOptions::default()
    };
    let err = run_over_tcp_granting(&exec, 3, &first_only, DType::F32, &o)
        .expect_err("a connection outside the grant");
    assert!(err.contains("process"), "{err}");
}
