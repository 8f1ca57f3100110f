//! `coll bench --suite` and `--summary` without a GPU: the shipped suite file parses and
//! every case's program compiles for its rank count; bad suite files are refused naming
//! `file:line:col` or the case; unknown tags and cases are usage errors; record lines keep
//! their format; the summary of a fixed record file is the expected table; and without a GPU
//! the suite stops with the usual "no GPU" error.

use coll_cli::bench::record::{self, Machine, Placement, Record, Setup};
use coll_cli::bench::suite::Suite;
use coll_cli::run_captured;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
}

fn coll(args: &[&str]) -> (u8, String, String) {
    run_captured(std::iter::once("coll").chain(args.iter().copied()))
}

fn suite_path() -> PathBuf {
    root().join("bench/suite.toml")
}

/// A file under the test target's scratch directory.
fn scratch(name: &str, text: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&p, text).expect("write scratch file");
    p
}

#[test]
fn the_shipped_suite_parses_and_every_case_compiles() {
    let suite = Suite::load(&suite_path()).expect("bench/suite.toml parses");
    assert!(suite.cases.len() >= 20, "{} cases", suite.cases.len());
    let targets = suite.select(&["targets".into()], &[]).expect("targets tag");
    let names: Vec<&str> = targets.iter().map(|c| c.name.as_str()).collect();
    for want in [
        "allreduce-large",
        "allreduce-small-eager-allpairs",
        "allreduce-small-graph-ring",
        "allgather",
        "reducescatter",
        "alltoall",
        "broadcast",
        "first-32M",
        "first-1G",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    assert!(targets.iter().all(|c| !c.targets.is_empty()));
    // Each distinct (program, ranks, instances) once: compiling is what takes the time.
    let mut seen = Vec::new();
    for c in &suite.cases {
        let key = (c.file.clone(), c.ranks, c.instances, c.topo.clone());
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let file = root().join(&c.file);
        assert!(
            file.is_file(),
            "case {}: {} does not exist",
            c.name,
            file.display()
        );
        let (file, ranks) = (file.display().to_string(), c.ranks.to_string());
        let mut args = vec!["check", &file, "--ranks", &ranks];
        let instances = c.instances.map(|i| i.to_string());
        if let Some(i) = &instances {
            args.extend(["--instances", i]);
        }
        if let Some(t) = &c.topo {
            args.extend(["--topo", t]);
        }
        let (code, _, err) = coll(&args);
        assert_eq!(code, 0, "case {}: {err}", c.name);
    }
}

#[test]
fn bad_suite_files_are_refused_where_they_are_wrong() {
    let good = "[[case]]\nname = \"a\"\nfile = \"algorithms/allreduce_ring.coll\"\nranks = 2\nsizes = { min = 8, max = \"1M\" }\n";
    let p = scratch("misspelt.toml", &good.replace("ranks", "rank"));
    let (code, _, err) = coll(&["bench", "--suite", &p.display().to_string()]);
    assert_eq!(code, 1, "{err}");
    let at = format!("{}:4:1: unknown field `rank`", p.display());
    assert!(err.contains(&at), "expected `{at}` in:\n{err}");

    let p = scratch(
        "mistyped.toml",
        &good.replace("ranks = 2", "ranks = \"two\""),
    );
    let (code, _, err) = coll(&["bench", "--suite", &p.display().to_string()]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!("{}:4:9: invalid type", p.display())),
        "{err}"
    );

    let p = scratch(
        "badtarget.toml",
        &format!("{good}targets = [\"ratio >= 1.1 for 1M..\"]\n"),
    );
    let (code, _, err) = coll(&["bench", "--suite", &p.display().to_string()]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "{}: case `a`: target `ratio >= 1.1 for 1M..`: `` is not a size",
            p.display()
        )),
        "{err}"
    );

    let (code, _, err) = coll(&["bench", "--suite", "no/such/suite.toml"]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot read no/such/suite.toml"), "{err}");
}

#[test]
fn unknown_tags_and_cases_are_usage_errors() {
    let suite = suite_path().display().to_string();
    let (code, _, err) = coll(&["bench", "--suite", &suite, "--tag", "x3"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no case has tag `x3`; tags: "), "{err}");
    assert!(err.contains("targets"), "{err}");
    let (code, _, err) = coll(&["bench", "--suite", &suite, "--case", "allreduce-huge"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("no case `allreduce-huge`; cases: allreduce-large, "),
        "{err}"
    );
    // The selection options belong to --suite.
    let (code, _, err) = coll(&["bench", "algorithms/allreduce_ring.coll", "--tag", "small"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--suite"), "{err}");
    let (code, _, err) = coll(&["bench", "--summary", "r.jsonl", "--record", "s.jsonl"]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err, "error: --tag, --case and --record need --suite\n");
    let (code, _, err) = coll(&["bench", "--summary", "r.jsonl", "--suite", &suite]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot be used with"), "{err}");
}

#[test]
fn without_a_gpu_the_suite_says_so() {
    if coll_executor::cuda::device::device_count() > 0 {
        eprintln!("a GPU is present: the no-GPU path is not exercised here");
        return;
    }
    let suite = suite_path().display().to_string();
    let rec = Path::new(env!("CARGO_TARGET_TMPDIR")).join("never.jsonl");
    let _ = std::fs::remove_file(&rec);
    let (code, out, err) = coll(&[
        "bench",
        "--suite",
        &suite,
        "--tag",
        "targets",
        "--record",
        &rec.display().to_string(),
    ]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        err,
        "error: coll bench --suite: no GPU found (no CUDA driver, or no device visible)\n"
    );
    assert_eq!(out, "");
    assert!(!rec.exists(), "nothing measured, nothing recorded");
}

fn sample() -> Record {
    Record {
        commit: "d3d5fac".into(),
        date: "2026-11-22T10:00:00Z".into(),
        machine: Machine {
            name: "h200x2".into(),
            gpu: "NVIDIA H200".into(),
            gpus: 2,
            driver: Some("580.159.04".into()),
            nccl: Some("2.28.3".into()),
        },
        case: "allreduce-large".into(),
        group: None,
        file: "algorithms/allreduce_ring.coll".into(),
        collective: "allreduce".into(),
        ranks: 2,
        instances: Some(16),
        dtype: "f32".into(),
        op: "sum".into(),
        root: 0,
        mode: "eager".into(),
        size: 33554432,
        count: 8388608,
        placement: Placement::InPlace,
        time_us: 112.5,
        algbw: 298.25,
        busbw: 298.25,
        wrong: Some(0),
        protocol: "bulk".into(),
        direct: true,
        copy_engines: false,
        nccl_time_us: Some(140.625),
        nccl_algbw: Some(238.6),
        nccl_busbw: Some(238.6),
        ratio: Some(1.25),
        nccl_best: None,
        nccl_default_us: None,
        nccl_symmetric_us: None,
        nccl_zero_cta_us: None,
        setup: Setup {
            load_ms: 290.5,
            first_call_ms: 0.25,
            second_call_ms: 0.125,
            allocated_bytes: 153092096,
            reported_bytes: 151122176,
            nccl_init_ms: Some(467.0),
            nccl_bytes: Some(899678208),
            ceiling_gbs: Some(363.25),
            launch_floor_us: Some(6.25),
        },
        targets: vec!["ratio >= 1.15 for 32M..256M".into()],
    }
}

#[test]
fn record_lines_round_trip_in_their_documented_format() {
    let r = sample();
    let line = r.to_line();
    assert_eq!(
        line,
        r#"{"commit":"d3d5fac","date":"2026-11-22T10:00:00Z","machine":{"name":"h200x2","gpu":"NVIDIA H200","gpus":2,"driver":"580.159.04","nccl":"2.28.3"},"case":"allreduce-large","group":null,"file":"algorithms/allreduce_ring.coll","collective":"allreduce","ranks":2,"instances":16,"dtype":"f32","op":"sum","root":0,"mode":"eager","size":33554432,"count":8388608,"placement":"in-place","time_us":112.5,"algbw":298.25,"busbw":298.25,"wrong":0,"protocol":"bulk","direct":true,"copy_engines":false,"nccl_time_us":140.625,"nccl_algbw":238.6,"nccl_busbw":238.6,"ratio":1.25,"setup":{"load_ms":290.5,"first_call_ms":0.25,"second_call_ms":0.125,"allocated_bytes":153092096,"reported_bytes":151122176,"nccl_init_ms":467.0,"nccl_bytes":899678208,"ceiling_gbs":363.25,"launch_floor_us":6.25},"targets":["ratio >= 1.15 for 32M..256M"]}"#
    );
    let back = record::parse("r.jsonl", &format!("{line}\n\n{line}\n")).expect("parses");
    assert_eq!(back, vec![r.clone(), r.clone()]);
    // Appending keeps earlier lines.
    let p = Path::new(env!("CARGO_TARGET_TMPDIR")).join("append.jsonl");
    let _ = std::fs::remove_file(&p);
    record::append(&p, std::slice::from_ref(&r)).expect("append");
    record::append(&p, std::slice::from_ref(&r)).expect("append again");
    assert_eq!(record::read(&p).expect("reads"), vec![r.clone(), r]);
}

#[test]
fn the_summary_judges_the_latest_commit_per_machine() {
    let fixture = root().join("cli/tests/fixtures/records.jsonl");
    let (code, out, err) = coll(&["bench", "--summary", &fixture.display().to_string()]);
    assert_eq!(code, 0, "{err}");
    let want = "\
## h200x2 (2 × NVIDIA H200, driver 580.159.04, NCCL 2.28.3): commit d3d5fac, 2026-11-22T11:05:00Z

| case | target | measured | holds |
|---|---|---|---|
| allreduce-large | ratio >= 1.15 for 32M..64M | 32 MiB 1.25 (1.31), 64 MiB 1.37 (1.35) | yes |
| allreduce-large | busbw >= 0.95 ceiling for 64M..64M out-of-place | 64 MiB 363.6 GB/s vs 363.3 | yes |
| allreduce-large | memory <= 0.25 nccl | 153 vs NCCL 900 MB | yes |
| small-eager (fastest of small-eager-allpairs, small-eager-ring) | ratio >= 2 for 8..4K out-of-place | 8 B 2.20 small-eager-ring, 4 KiB 2.03 small-eager-allpairs | yes |
| alltoall | ratio >= 1.1 | 1 GiB 1.16 (0.95) | out of place only |
| first-32M | first_call <= 2 steady | 32 MiB 389.0 vs 113.1 µs steady (3.44×) | **no** |
| sweep | – | busbw 49.9–52.4 GB/s | – |

6 cases, 4 of 6 targets hold; #wrong 1 over every checked size (wrong in sweep)

## h200x4 (2 × NVIDIA H200, driver 580.159.04, NCCL 2.28.3): commit 52a107d, 2026-11-20T08:00:00Z

| case | target | measured | holds |
|---|---|---|---|
| allreduce-large | ratio >= 1.15 | 32 MiB 0.93 (0.93) | **no** |

1 case, 0 of 1 targets hold; #wrong 0 over every checked size

";
    assert_eq!(out, want, "got:\n{out}");
    let (code, _, err) = coll(&["bench", "--summary", "no/such.jsonl"]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot read no/such.jsonl"), "{err}");
    let bad = scratch("bad.jsonl", "{\"commit\": \"x\"}\n");
    let (code, _, err) = coll(&["bench", "--summary", &bad.display().to_string()]);
    assert_eq!(code, 1);
    assert!(
        err.contains(&format!("{}:1:", bad.display())) && err.contains("missing field"),
        "{err}"
    );
}
