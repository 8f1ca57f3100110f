//! The hostile-input suite: `coll` run as an attacker and a careless user would, on generated
//! mutants of every shipped algorithm, of JSON plans, of MSCCL-IR files and of topology
//! files, and on crafted inputs for every bound the README's "Limits" promises. Every case is one `coll` process
//! (`target/<profile>/coll`) under a 4 GiB address-space limit and a 10 s hang bound; it
//! passes when it exits 0, 1 or 2 without a panic or an internal error (see
//! `hostile/runner.rs`). All failures are collected and reported together.
//!
//! Cases are generated from a fixed seed (`hostile/seeded.rs`), so a run is reproducible:
//!
//! - `cargo test -p coll-tests --test hostile` runs [`hostile_sample`]: every crafted and
//!   corpus case and every 10th generated one, about 2 800 cases in 20-60 s on a 2-core
//!   machine with the test profile CI builds.
//! - `cargo test -p coll-tests --test hostile -- --ignored hostile_full` runs all of them,
//!   about 25 000 cases (6 400 `.coll`, 8 000 plan, 8 000 MSCCL-IR and 2 400 topology
//!   mutants, 340 crafted and corpus cases) in 2.5 minutes (test profile; 5 with a dev build).
//! - Set `HOSTILE_CASE=<part of a case name>` to run only the matching cases (with either
//!   test), and `HOSTILE_KEEP=<folder>` to keep each case's input there and print its
//!   command, to reproduce one by hand: `HOSTILE_CASE=plan/alltoall-3/17
//!   HOSTILE_KEEP=/tmp/h cargo test -p coll-tests --test hostile -- --ignored hostile_full
//!   --nocapture`.
//!
//! The `coll` binary must be built first; `cargo test --workspace` does that (coll-cli's
//! own tests need it), a focused run needs `cargo build -p coll-cli --bin coll`.
//!
//! Bugs found by the suite are kept as regression tests at the end, each naming its input
//! and, for the compiler's work limits, the error it must give.

// `sh`, `ulimit -v` and exit signals: the suite runs where CI does, on Unix.
#![cfg(unix)]

#[path = "hostile/coll_src.rs"]
mod coll_src;
#[path = "hostile/crafted.rs"]
mod crafted;
#[path = "hostile/msccl_xml.rs"]
mod msccl_xml;
#[path = "hostile/plan_json.rs"]
mod plan_json;
#[path = "hostile/runner.rs"]
mod runner;
#[path = "hostile/seeded.rs"]
mod seeded;
#[path = "hostile/topo.rs"]
mod topo;

use runner::Case;
use std::path::PathBuf;

/// Mutants per base in the full suite: 16 algorithms, 8 plans, 10 MSCCL-IR fixtures, 12
/// topology files (of 14; two are broken JSON on purpose and run only as they are).
const FULL_PER_ALGORITHM: usize = 400;
const FULL_PER_PLAN: usize = 1000;
const FULL_PER_XML: usize = 800;
const FULL_PER_TOPO: usize = 200;
/// The sample runs every `SAMPLE_STRIDE`-th generated case (and every crafted one).
const SAMPLE_STRIDE: usize = 10;
/// Generated cases are made and run a window of indices at a time, so that the suite holds
/// the inputs of one window at once, not those of all 25 000 cases.
const WINDOW: usize = 25;

fn workers() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 8))
}

/// Runs every crafted and corpus case and every `stride`-th generated one (1: all of them),
/// in a fixed order, and asserts that none failed.
fn run_suite(stride: usize) -> runner::Report {
    let only = std::env::var("HOSTILE_CASE").ok();
    let keep = std::env::var_os("HOSTILE_KEEP").map(PathBuf::from);
    if let Some(k) = &keep {
        std::fs::create_dir_all(k).expect("the HOSTILE_KEEP folder");
    }
    let bases = plan_json::bases(&runner::coll_binary());
    let mut report = runner::Report::default();
    let mut batch = |cases: Vec<Case>| {
        let cases: Vec<Case> = cases
            .into_iter()
            .filter(|c| only.as_deref().is_none_or(|o| c.name.contains(o)))
            .collect();
        if !cases.is_empty() {
            report.absorb(runner::run_all(&cases, workers(), keep.as_deref()));
        }
    };
    batch(crafted::cases(&bases[0].1));
    let most = FULL_PER_ALGORITHM
        .max(FULL_PER_PLAN)
        .max(FULL_PER_XML)
        .max(FULL_PER_TOPO);
    for start in (0..most).step_by(WINDOW) {
        let w = start..start + WINDOW;
        let mut v = coll_src::cases(FULL_PER_ALGORITHM, stride, &w);
        v.extend(plan_json::cases(&bases, FULL_PER_PLAN, stride, &w));
        v.extend(msccl_xml::cases(FULL_PER_XML, stride, &w));
        v.extend(topo::cases(FULL_PER_TOPO, stride, &w));
        batch(v);
    }
    report.failures.sort_by(|a, b| a.name.cmp(&b.name));
    report.known.sort();
    eprintln!("{}", report.summary());
    assert!(report.cases > 0, "no case matches HOSTILE_CASE={only:?}");
    assert!(
        report.failures.is_empty(),
        "{} of {} hostile cases failed:\n{}",
        report.failures.len(),
        report.cases,
        report.describe_failures()
    );
    report
}

#[test]
fn hostile_sample() {
    run_suite(SAMPLE_STRIDE);
}

#[test]
#[ignore = "the whole suite, about 25 000 processes: run with --ignored"]
fn hostile_full() {
    let report = run_suite(1);
    if std::env::var_os("HOSTILE_CASE").is_none() {
        let n = |f: &str| report.cases_by_family.get(f).copied().unwrap_or(0);
        assert!(
            n("coll") >= 300 && n("plan") >= 1000 && n("xml") >= 1000,
            "{report:?}"
        );
    }
}

/// The runner itself: the address-space limit holds in the child (a CPU run of 2 × 300M
/// floats, within coll's own 16 GiB bound, needs more than 4 GiB and aborts), the abort is
/// reported as a failure, and an ordinary success is not.
#[test]
fn runner_reports_an_abort_past_the_address_space_limit() {
    let ring = coll_tests::root().join("algorithms/allreduce_ring.coll");
    let ring = ring.to_str().expect("a UTF-8 workspace path");
    let cases = [
        // Filling gigabytes before the allocation that fails takes seconds, more on a
        // loaded machine: this case's bound is generous, so only the abort can end it.
        Case::new(
            "self/over_limit",
            &["run", ring, "--ranks", "2", "--count", "300M"],
            None,
        )
        .with_bound(std::time::Duration::from_secs(120)),
        Case::new("self/ok", &["check", ring], None),
    ];
    let report = runner::run_all(&cases, 2, None);
    assert_eq!(report.exits, [1, 0, 0], "{}", report.summary());
    assert_eq!(report.failures.len(), 1, "{}", report.summary());
    assert_eq!(report.failures[0].name, "self/over_limit");
    assert_eq!(report.failures[0].reason, "killed by signal 6");
    assert!(
        report.failures[0]
            .stderr_head
            .contains("memory allocation of"),
        "{}",
        report.failures[0].stderr_head
    );
}

/// An op offset near 2^64 once wrapped the bounds check of plan validation (an overflow
/// panic in a debug build, a plan past its buffer in a release one).
#[test]
fn plan_offset_near_2_pow_64_is_refused() {
    let bases = plan_json::bases(&runner::coll_binary());
    let mut v = bases[0].1.clone();
    v["gpus"][0]["blocks"][0]["ops"][0]["src"] = serde_json::json!([0, u64::MAX]);
    let plan: coll_compiler::plan::Plan = serde_json::from_value(v).expect("a well-typed plan");
    let err = plan
        .validate()
        .expect_err("offset past the buffer")
        .to_string();
    assert_eq!(
        err,
        "rank 0, block 0, op 0 (algorithms/allreduce_ring.coll:15:9): src chunks 18446744073709551615..18446744073709551616 are outside `input` (4 chunks)"
    );
}

/// 200 000 attributes on one element once took minutes: the XML parser compares each
/// attribute with every earlier one of its element.
#[test]
fn msccl_element_with_200000_attributes_is_refused() {
    let xml =
        std::fs::read_to_string(coll_tests::root().join("tests/inputs/msccl/allreduce_ring_4.xml"))
            .expect("the fixture");
    let many: String = (0..200_000).map(|i| format!("u{i}=\"1\" ")).collect();
    let xml = xml.replacen("<gpu id=\"1\"", &format!("<gpu {many}id=\"1\""), 1);
    let err = coll_compiler::msccl::import(&xml, "many.xml")
        .map(|_| ())
        .expect_err("too many attributes")
        .to_string();
    assert_eq!(err, "many.xml:18:3: <gpu>: has more than 64 attributes");
}

/// Runs the case `name` of [`crafted::limit_cases`] on its own, asserts that it passes
/// with exit 1 (a clear error, no internal one) and that its standard error holds each of
/// `says`; returns the standard error.
fn limit_case(name: &str, says: &[&str]) -> String {
    let cases: Vec<Case> = crafted::limit_cases()
        .into_iter()
        .filter(|c| c.name == format!("crafted/{name}"))
        .collect();
    assert_eq!(cases.len(), 1, "{name}");
    let (outcome, took, stderr) = runner::run_single(&cases[0]);
    match outcome {
        Ok(code) => assert_eq!(code, 1, "{name}: exit {code}\n{stderr}"),
        Err(f) => panic!("{name}: {} in {took:?}\n{}", f.reason, f.stderr_head),
    }
    for s in says {
        assert!(stderr.contains(s), "{name}: no `{s}` in\n{stderr}");
    }
    stderr
}

/// `chunks n` at 4096 ranks is inside the cell limit (2^24 of 2^25 cells), but ring
/// allreduce has 33.5 million operations there, which would need over 10 GB to check; it
/// once grew past 7 GB before dying under the 4 GiB limit. Now it stops at the op limit, in
/// seconds and well under 1 GB, naming the flag that raises it.
#[test]
fn check_at_4096_ranks_stops_at_the_op_limit() {
    limit_case(
        "cli/ranks_4096_check",
        &[
            "error: more than 4194304 chunk operations",
            "elaborating for n = 4096 on nvswitch:4096",
            "~1.3 GB at this limit; raise it with `--op-limit OPS`",
        ],
    );
}

/// `for i in 0..1000000000000 { copy input[0][0] -> input[1]; }` once elaborated op after
/// op until memory ran out.
#[test]
fn loop_of_10_pow_12_iterations_stops_at_the_op_limit() {
    limit_case(
        "loop_10_pow_12",
        &[
            "error: more than 4194304 chunk operations",
            "with i = 4194304",
            "raise it with `--op-limit OPS`",
        ],
    );
}

/// Three nested loops of 10^6 iterations each: the same bound as
/// [`loop_of_10_pow_12_iterations_stops_at_the_op_limit`].
#[test]
fn nested_loops_of_10_pow_18_iterations_stop_at_the_op_limit() {
    limit_case(
        "nested_loops_10_pow_18",
        &[
            "error: more than 4194304 chunk operations",
            "with a = 0, b = 4, c = 194304",
        ],
    );
}

/// 1 000 000 × `for i in 0..1 {` on one 15 MB line, never closed: each of the 50
/// diagnostics once showed the whole line as its excerpt (output and time grew as 50 × the
/// line's length). Excerpts are now cut to 120 characters around the label, with the exact
/// location.
#[test]
fn unclosed_braces_on_a_15_mb_line_give_short_excerpts() {
    let stderr = limit_case(
        "unclosed_braces_1000000",
        &[
            "error: nesting deeper than 256 levels",
            ":5:3849\n",
            "error: expected `}`, found end of file",
            ":5:15000001\n",
            "this `{` is never closed",
        ],
    );
    assert!(stderr.len() < 64 << 10, "{} bytes", stderr.len());
    let excerpt = "5 │ …for i in 0..1 {for i in 0..1 {";
    assert!(stderr.contains(excerpt), "{stderr}");
}

/// `chunks 9223372036854775807;` in an alltoall: `n * k` in
/// `CollectiveKind::buffer_chunks` once overflowed before the cell limit was checked (an
/// internal error); the product now saturates and the size limit refuses it.
#[test]
fn alltoall_with_chunks_2_pow_63_is_refused_by_the_size_limit() {
    limit_case(
        "chunks_2_pow_63_alltoall",
        &[
            "error: `input` in chunks per rank must be at most 536870911, found 18446744073709551615",
        ],
    );
}

/// `while x > 1 { depth = depth + 1; }` (tests/inputs/fail/step_limit.coll) without
/// `--step-limit`: the default limit once took 197 s to end it in a debug build on a loaded
/// 2-core machine; 2^24 steps take a few seconds.
#[test]
fn an_endless_loop_stops_at_the_default_step_limit() {
    limit_case(
        "default_step_limit",
        &[
            "error: elaboration exceeded 16777216 steps; is there an endless loop?",
            "raise it with `--step-limit STEPS`",
        ],
    );
}

/// A step offset near 2^63 once overflowed the bounds check of MSCCL-IR import (an
/// overflow panic in a debug build).
#[test]
fn msccl_offset_near_2_pow_63_is_refused() {
    let xml =
        std::fs::read_to_string(coll_tests::root().join("tests/inputs/msccl/allreduce_ring_4.xml"))
            .expect("the fixture");
    let xml = xml.replacen("srcoff=\"3\"", "srcoff=\"9223372036854775807\"", 1);
    let err = coll_compiler::msccl::import(&xml, "far.xml")
        .map(|_| ())
        .expect_err("offset past the buffer")
        .to_string();
    assert!(
        err.contains("chunks 9223372036854775807..9223372036854775808 are outside `i`"),
        "{err}"
    );
}
