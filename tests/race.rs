//! The race check ([`coll_compiler::check::check_races`]): every shipped algorithm's compiled
//! plan is race-free at several rank counts and both placements; the hostile plans of
//! `inputs/race/` (a compiled plan with one dependency removed, MSCCL-IR with one dependency
//! weakened), which the one-interleaving replay accepts, are rejected by `coll check`,
//! `coll compile` and `coll run` with exit 1 and a message naming both racing ops. Plans
//! that write nothing or whose buffers have other sizes than the collective's fail too, and
//! `coll run` refuses a `--root` or `--inject-stall` that names no rank.

use coll_cli::run_captured;
use coll_compiler::error::CompileError;
use coll_compiler::topology::Topology;
use coll_compiler::{CompileOptions, check, replay};
use coll_tests::{display_name, source};
use std::path::Path;

fn coll(args: &[&str]) -> (u8, String, String) {
    let mut argv = vec!["coll"];
    argv.extend_from_slice(args);
    run_captured(argv)
}

/// Races the check must find: the fixture (as the CLI names it from the test crate's folder)
/// and the two ops.
const HOSTILE: [(&str, &str, &str); 2] = [
    (
        "inputs/race/allreduce_hier_dep_removed.json",
        "rank 1, block 0, op 1 (algorithms/allreduce_hier.coll:31:13)",
        "rank 1, block 1, op 0 (algorithms/allreduce_hier.coll:42:13)",
    ),
    (
        "inputs/race/alltoall_4_dep_weakened.xml",
        "rank 0, block 2, op 1 (inputs/race/alltoall_4_dep_weakened.xml:22:7: gpu 0 tb 2 step 1)",
        "rank 0, block 3, op 3 (inputs/race/alltoall_4_dep_weakened.xml:30:7: gpu 0 tb 3 step 5)",
    ),
];

fn compile(path: &Path, n: usize, options: &CompileOptions) -> Option<coll_compiler::Compiled> {
    let m = coll_lang::load(source(path)).unwrap_or_else(|d| panic!("{}", d.render()));
    let spec = coll_tests::preset(&m, n)?;
    let topo = Topology::parse(&spec).expect("a preset");
    match coll_compiler::compile(&m, &topo, options) {
        Ok(c) => Some(c),
        Err(d) if matches!(d.list[0].kind, CompileError::UnsupportedRanks { .. }) => None,
        Err(d) => panic!("{} at n = {n}:\n{}", display_name(path), d.render()),
    }
}

/// The scheduler orders every conflicting pair: no shipped algorithm races, in place or out
/// of place, up to 32 ranks.
#[test]
fn shipped_algorithms_are_race_free() {
    let mut checked = 0;
    for path in coll_tests::coll_files("algorithms") {
        for options in [CompileOptions::default(), coll_tests::out_of_place()] {
            for n in [2, 3, 4, 8, 32] {
                let Some(c) = compile(&path, n, &options) else {
                    continue;
                };
                check::check_races(&c.lowered.plan).unwrap_or_else(|e| {
                    panic!("{} at n = {n}: {e}", display_name(&path));
                });
                checked += 1;
            }
        }
    }
    assert!(checked > 80, "only {checked} plans checked");
}

/// The hostile fixtures pass the replay of one interleaving and the deadlock check, so only
/// the race check catches them.
#[test]
fn hostile_plans_pass_the_replay_but_race() {
    for (file, first, second) in HOSTILE {
        let text = std::fs::read_to_string(file).expect("fixture");
        let plan = if file.ends_with(".xml") {
            coll_compiler::msccl::import(&text, file).expect("imports")
        } else {
            coll_compiler::plan::ValidPlan::from_json(&text).expect("valid")
        };
        replay::replay(&plan, 0).unwrap_or_else(|e| panic!("{file}: {e}"));
        check::simulate(&plan, coll_compiler::DEFAULT_SLOTS)
            .unwrap_or_else(|d| panic!("{file}: {d}"));
        let e = check::check_races(&plan).expect_err("races");
        let check::RaceError::Race {
            first: a,
            second: b,
            ..
        } = &e
        else {
            panic!("{file}: not a race: {e}");
        };
        assert_eq!((a.at.as_str(), b.at.as_str()), (first, second), "{file}");
    }
}

/// `coll check`, `compile` and `run` of a racing plan fail with exit 1 naming both ops.
#[test]
fn hostile_plans_fail_through_the_cli() {
    for (file, first, second) in HOSTILE {
        for cmd in ["check", "compile", "run"] {
            let (code, out, err) = coll(&[cmd, file]);
            assert_eq!(code, 1, "{cmd} {file} should fail:\n{out}{err}");
            assert!(out.is_empty(), "{cmd} {file}: {out}");
            assert!(
                err.contains(&format!("{first} and {second} race on ")),
                "{cmd} {file}: {err}"
            );
        }
        let (_, _, err) = coll(&["check", file]);
        let name = Path::new(file)
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        insta::assert_snapshot!(name, err);
    }
}

/// Plans the collective's postcondition cannot hold for: one that writes nothing (chunk
/// factor 0, no ops) and one whose input is larger than the collective's. `check`,
/// `compile` and `run` fail with exit 1 naming the plan or the buffer and both sizes.
#[test]
fn empty_and_mis_sized_plans_fail() {
    let cases = [
        (
            "inputs/race/chunk_factor_0_no_ops.json",
            "plan `nothing`: checks no output chunk (chunk factor 0), so it computes no \
             allreduce at all",
        ),
        (
            "inputs/race/oversized_input.json",
            "buffer `input`: has 4000 chunks per rank, but allreduce on 3 ranks with chunk \
             factor 3 needs 3",
        ),
    ];
    for (file, msg) in cases {
        for cmd in ["check", "compile", "run"] {
            let (code, out, err) = coll(&[cmd, file]);
            assert_eq!(code, 1, "{cmd} {file} should fail:\n{out}{err}");
            assert_eq!(err, format!("error: {file}: {msg}\n") + &tail(cmd), "{cmd}");
        }
    }
}

/// What follows a failed plan's message: `check` counts the failed files.
fn tail(cmd: &str) -> String {
    if cmd == "check" {
        "error: 1 of 1 files failed\n".to_string()
    } else {
        String::new()
    }
}

/// `--root` beyond the ranks of a rooted collective fails on `run` as on `check` (never
/// truncated to a rank), and `--inject-stall` of no rank is a usage error.
#[test]
fn out_of_range_root_and_stall_are_errors() {
    let bcast = "../algorithms/broadcast_ring.coll";
    let (code, _, err) = coll(&["check", bcast, "--ranks", "4", "--root", "4294967297"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("rank 4294967297 is out of range: there are 4 ranks"),
        "{err}"
    );
    let (code, out, err) = coll(&[
        "run",
        bcast,
        "--ranks",
        "4",
        "--root",
        "4294967297",
        "--count",
        "64",
    ]);
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(
        err,
        "error: rank 4294967297 is out of range: there are 4 ranks (given with --root \
         4294967297)\n"
    );
    // `bench` refuses it before looking for GPUs, and `compile` of a JSON plan as `check` does.
    let (code, out, err) = coll(&["bench", bcast, "--ranks", "4", "--root", "4294967297"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("rank 4294967297 is out of range: there are 4 ranks"),
        "{err}"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let json = dir.path().join("bcast.json");
    let json = json.to_str().expect("utf-8 path");
    let (code, _, err) = coll(&[
        "compile", bcast, "--ranks", "4", "--format", "json", "-o", json,
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = coll(&["compile", json, "--root", "4294967297"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("rank 4294967297 is out of range: there are 4 ranks"),
        "{err}"
    );
    // A valid root still runs, and collectives without a root ignore it, as NCCL does.
    let (code, out, err) = coll(&["run", bcast, "--ranks", "4", "--root", "3", "--count", "64"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("#wrong 0"), "{out}");
    let ring = "../algorithms/allreduce_ring.coll";
    let (code, out, err) = coll(&["run", ring, "--ranks", "4", "--root", "9", "--count", "64"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("#wrong 0"), "{out}");
    let (code, out, err) = coll(&["run", ring, "--ranks", "4", "--inject-stall", "4"]);
    assert_eq!(code, 2, "{out}{err}");
    assert_eq!(
        err,
        "error: --inject-stall 4 names no rank: the plan has 4 ranks\n"
    );
}
