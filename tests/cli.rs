//! The `coll` command line, driven in-process: exit codes, messages naming `path:line:col`,
//! and hostile inputs (non-UTF-8, empty, 10 MB, 100 000 levels of nesting).

use coll_cli::run_captured;
use std::path::{Path, PathBuf};

const HEADER: &str = "collective allreduce big(n) {\n    chunks n;\n    inplace;\n}\n";

fn coll(args: &[&str]) -> (u8, String, String) {
    let mut argv = vec!["coll"];
    argv.extend_from_slice(args);
    run_captured(argv)
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("write temp file");
    p
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

/// Asserts exit 1 and that standard error names `path:line:col`.
fn assert_rejected_at(path: &Path, line_col: &str, needle: &str) -> String {
    let (code, _, err) = coll(&["check", s(path)]);
    assert_eq!(code, 1, "stderr: {err}");
    let at = format!("{}:{line_col}", path.display());
    assert!(err.contains(&at), "expected `{at}` in:\n{err}");
    assert!(err.contains(needle), "expected `{needle}` in:\n{err}");
    err
}

#[test]
fn shipped_algorithms_check() {
    let files = coll_tests::coll_files("algorithms");
    let mut args = vec!["check".to_string()];
    args.extend(files.iter().map(|p| p.display().to_string()));
    let argv: Vec<&str> = std::iter::once("coll")
        .chain(args.iter().map(String::as_str))
        .collect();
    let (code, out, err) = run_captured(argv);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), files.len(), "{out}");
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(coll(&[]).0, 2);
    assert_eq!(coll(&["check"]).0, 2);
    assert_eq!(coll(&["frobnicate", "x.coll"]).0, 2);
    assert_eq!(coll(&["fmt", "--write", "--check", "x.coll"]).0, 2);
    // `coll kernels` needs an architecture and takes only known element types.
    let (code, _, err) = coll(&["kernels"]);
    assert_eq!(code, 2);
    assert!(err.contains("--arch <ARCH>"), "{err}");
    let (code, _, err) = coll(&["kernels", "--arch", "sm_90", "--dtype", "f8"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown dtype `f8`"), "{err}");
    let (code, out, _) = coll(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("check") && out.contains("fmt"));
}

#[test]
fn missing_file_is_exit_1() {
    let (code, _, err) = coll(&["check", "no/such/file.coll"]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot read no/such/file.coll"), "{err}");
}

#[test]
fn non_utf8_names_the_byte() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut bytes = HEADER.as_bytes().to_vec();
    bytes.extend_from_slice(b"let x = 1;\nlet y\xff = 2;\n");
    let p = write(dir.path(), "bad.coll", &bytes);
    assert_rejected_at(&p, "6:6", "not valid UTF-8");
}

#[test]
fn empty_file_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = write(dir.path(), "empty.coll", b"");
    assert_rejected_at(&p, "1:1", "file is empty");
    let p = write(dir.path(), "blank.coll", b"  \n// only a comment\n");
    assert_rejected_at(&p, "3:1", "file is empty");
}

fn big_body(target: usize) -> String {
    let mut text = String::from(HEADER);
    let mut k = 0;
    while text.len() < target {
        text.push_str(&format!(
            "for i{k} in 0..n {{\n    reduce input[i{k}][(i{k} + {k}) % n] -> input[(i{k} + 1) % n];\n}}\n"
        ));
        k += 1;
    }
    text
}

#[test]
fn ten_megabytes_valid_parses() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = big_body(10 << 20);
    let p = write(dir.path(), "big.coll", text.as_bytes());
    let (code, out, err) = coll(&["check", s(&p)]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("ok (allreduce `big`)"));
}

#[test]
fn ten_megabytes_invalid_names_the_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut text = big_body(5 << 20);
    let line = text.lines().count() + 1;
    text.push_str("let broken = ;\n");
    text.push_str(&big_body(5 << 20)[HEADER.len()..]);
    let p = write(dir.path(), "big_bad.coll", text.as_bytes());
    assert_rejected_at(
        &p,
        &format!("{line}:14"),
        "expected an expression, found `;`",
    );
}

#[test]
fn ten_megabytes_of_garbage_is_bounded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let garbage: Vec<u8> = (0..10u32 << 20)
        .map(|i| b"}{)(;=+*/ \n#@!abc123"[(i.wrapping_mul(2_654_435_761) >> 27) as usize % 20])
        .collect();
    let p = write(dir.path(), "garbage.coll", &garbage);
    let (code, _, err) = coll(&["check", s(&p)]);
    assert_eq!(code, 1);
    assert!(
        err.contains(&format!("{}:1:", p.display())),
        "{}",
        &err[..err.len().min(2000)]
    );
    assert!(err.lines().count() < 2000, "diagnostics are capped");
}

#[test]
fn hundred_thousand_levels_of_nesting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let deep = 100_000;
    let too_deep = "nesting deeper than 256 levels";
    let cases = [
        (
            "parens.coll",
            format!(
                "{HEADER}let x = {}1{};\n",
                "(".repeat(deep),
                ")".repeat(deep)
            ),
            "5:",
            too_deep,
        ),
        (
            "unary.coll",
            format!("{HEADER}let x = {}1;\n", "-".repeat(deep)),
            "5:",
            too_deep,
        ),
        (
            "nots.coll",
            format!("{HEADER}let x = {}true;\n", "not ".repeat(deep)),
            "5:",
            too_deep,
        ),
        (
            "chain.coll",
            format!("{HEADER}let x = 1{};\n", " + 1".repeat(deep)),
            "5:",
            too_deep,
        ),
        (
            "blocks.coll",
            format!(
                "{HEADER}{}{}",
                "if true {\n".repeat(deep),
                "}\n".repeat(deep)
            ),
            "261:",
            too_deep,
        ),
        (
            "comments.coll",
            format!("{HEADER}{}x{}\n", "/*".repeat(deep), "*/".repeat(deep - 1)),
            "5:1",
            "unterminated block comment",
        ),
    ];
    for (name, text, at, needle) in cases {
        let p = write(dir.path(), name, text.as_bytes());
        let err = assert_rejected_at(&p, at, needle);
        assert!(
            err.lines().count() < 200,
            "{name}: one error, not one per level"
        );
    }
}

#[test]
fn several_files_some_bad() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = write(
        dir.path(),
        "good.coll",
        format!("{HEADER}let x = 1;\n").as_bytes(),
    );
    let bad = write(
        dir.path(),
        "bad.coll",
        format!("{HEADER}let x = ;\nlet y = 1 +;\n").as_bytes(),
    );
    let (code, out, err) = coll(&["check", s(&good), s(&bad)]);
    assert_eq!(code, 1);
    assert!(out.contains("good.coll: ok"));
    assert!(
        err.contains("bad.coll:5:9") && err.contains("bad.coll:6:12"),
        "{err}"
    );
    assert!(err.contains("1 of 2 files failed"));
}

#[test]
fn fmt_check_write_and_print() {
    let dir = tempfile::tempdir().expect("tempdir");
    let messy = "collective   allreduce r(n){chunks n;inplace;}\nfor s in 0..n{copy input[s][0]->input[(s+1)%n];}\n";
    let p = write(dir.path(), "messy.coll", messy.as_bytes());
    let (code, _, err) = coll(&["fmt", "--check", s(&p)]);
    assert_eq!(code, 1);
    assert!(
        err.contains(&format!("{}:1: not formatted", p.display())),
        "{err}"
    );
    let (code, printed, _) = coll(&["fmt", s(&p)]);
    assert_eq!(code, 0);
    assert_eq!(
        std::fs::read_to_string(&p).expect("read"),
        messy,
        "plain fmt only prints"
    );
    let (code, out, _) = coll(&["fmt", "--write", s(&p)]);
    assert_eq!(code, 0);
    assert!(out.contains("formatted"));
    let written = std::fs::read_to_string(&p).expect("read");
    assert_eq!(written, printed);
    assert_eq!(coll(&["fmt", "--check", s(&p)]).0, 0);
    let (_, again, _) = coll(&["fmt", s(&p)]);
    assert_eq!(again, written, "idempotent");
}

#[test]
fn fmt_rejects_invalid_input_like_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = write(
        dir.path(),
        "bad.coll",
        format!("{HEADER}let x = ;\n").as_bytes(),
    );
    let (c1, _, e1) = coll(&["check", s(&p)]);
    let (c2, _, e2) = coll(&["fmt", "--write", s(&p)]);
    assert_eq!((c1, c2), (1, 1));
    assert_eq!(e1, e2);
}

#[test]
fn check_with_ranks_proves_on_the_named_topology() {
    let ring = coll_tests::root().join("algorithms/allreduce_ring.coll");
    let ring = ring.to_str().expect("utf-8 path");
    let (code, out, err) = coll(&["check", ring, "--ranks", "8", "--topo", "cluster:2x4"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("proved for n = 8 on cluster:2x4"), "{out}");
    // A rank count the topology contradicts is a usage error; an unknown topology is bad input.
    assert_eq!(
        coll(&["check", ring, "--ranks", "8", "--topo", "cluster:2x2"]).0,
        2
    );
    let (code, _, err) = coll(&["check", ring, "--ranks", "8", "--topo", "nvswich:8"]);
    assert_eq!(code, 1);
    assert!(err.contains("did you mean \"nvswitch:8\""), "{err}");
    // --topo without --ranks is a usage error.
    assert_eq!(coll(&["check", ring, "--topo", "nvswitch:8"]).0, 2);
    // An NVLS algorithm on a topology without a switch names its header line.
    let nvls = coll_tests::root().join("algorithms/allreduce_nvls.coll");
    let (code, _, err) = coll(&[
        "check",
        nvls.to_str().expect("utf-8"),
        "--ranks",
        "4",
        "--topo",
        "ring:4",
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("allreduce_nvls.coll:7:5"), "{err}");
}

#[test]
fn run_rejects_a_plan_with_a_send_removed_before_running() {
    let plan = coll_tests::root().join("tests/inputs/plans/bad_send_removed.json");
    let (code, out, err) = coll(&["run", s(&plan), "--count", "100"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.is_empty(), "nothing ran: {out}");
    assert!(err.contains("rank 1, block 0, op 4"), "{err}");
    assert!(err.contains("has no matching send on rank 0"), "{err}");
}

#[test]
fn run_reports_and_exits_by_correctness() {
    let ring = coll_tests::root().join("algorithms/allreduce_ring.coll");
    let (code, out, err) = coll(&[
        "run",
        s(&ring),
        "--ranks",
        "4",
        "--count",
        "4K",
        "--dtype",
        "bf16",
        "--op",
        "max",
        "--inplace",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("count 4096 bf16 max in-place on cpu") && out.contains("#wrong 0"),
        "{out}"
    );
    // Usage errors: a bad dtype, a count that is not a size, a .coll without --ranks.
    assert_eq!(
        coll(&["run", s(&ring), "--ranks", "4", "--dtype", "f8"]).0,
        2
    );
    assert_eq!(
        coll(&["run", s(&ring), "--ranks", "4", "--count", "12Q"]).0,
        2
    );
    assert_eq!(coll(&["run", s(&ring)]).0, 2);
    // avg has no meaning for a collective without a reduction.
    let ag = coll_tests::root().join("algorithms/allgather_ring.coll");
    let (code, _, err) = coll(&["run", s(&ag), "--ranks", "4", "--op", "avg"]);
    assert_eq!(code, 1);
    assert!(err.contains("not defined for allgather"), "{err}");
}

#[test]
fn stalled_rank_fails_the_run_within_the_timeout() {
    let ring = coll_tests::root().join("algorithms/allreduce_ring.coll");
    let start = std::time::Instant::now();
    let (code, _, err) = coll(&[
        "run",
        s(&ring),
        "--ranks",
        "4",
        "--count",
        "1K",
        "--inject-stall",
        "1",
        "--timeout",
        "0.3",
    ]);
    assert_eq!(code, 1);
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
    assert!(
        err.contains("allreduce_ring.coll:") && err.contains("without progress"),
        "{err}"
    );
}

#[test]
fn gpu_commands_say_why_without_a_gpu() {
    if coll_executor::cuda::device::device_count() > 0 {
        eprintln!("a GPU is present: the no-GPU path is not exercised here");
        return;
    }
    let ring = coll_tests::root().join("algorithms/allreduce_ring.coll");
    let (code, _, err) = coll(&["run", s(&ring), "--ranks", "2", "--backend", "cuda"]);
    assert_eq!(code, 1);
    assert!(err.contains("no GPU found"), "{err}");
    let (code, _, err) = coll(&["bench", s(&ring), "--ranks", "2"]);
    assert_eq!(code, 1);
    assert!(err.contains("no GPU found"), "{err}");
    // --graph takes an optional launch count, at least 1.
    let (code, _, err) = coll(&["bench", s(&ring), "--ranks", "2", "--graph"]);
    assert_eq!(code, 1);
    assert!(err.contains("no GPU found"), "{err}");
    let (code, _, _) = coll(&["bench", s(&ring), "--ranks", "2", "--graph", "0"]);
    assert_eq!(code, 2);
    let (code, _, err) = coll(&["check", s(&ring), "--ranks", "2", "--topo", "auto"]);
    assert_eq!(code, 1);
    assert!(err.contains("--topo auto: no GPU found"), "{err}");
    // --auto tunes a collective instead of running a file: it needs --collective, and no
    // FILE.
    let auto = [
        "bench",
        "--auto",
        "--collective",
        "allreduce",
        "--ranks",
        "2",
    ];
    let (code, _, err) = coll(&auto);
    assert_eq!(code, 1);
    assert!(err.contains("coll bench --auto: no GPU found"), "{err}");
    let (code, _, err) = coll(&["bench", "--auto", "--ranks", "2"]);
    assert_eq!(code, 2);
    assert!(err.contains("--collective"), "{err}");
    let (code, _, err) = coll(&["bench", s(&ring), "--auto", "--collective", "allreduce"]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot be used with"), "{err}");

    // --tuned measures a table's per-size choice: the table is read and checked against the
    // options before the GPUs are looked for.
    let dir = tempfile::tempdir().expect("tempdir");
    let table = dir.path().join("tuning.json");
    let (code, _, err) = coll(&["bench", "--tuned", s(&table)]);
    assert_eq!(code, 1);
    assert!(
        err.contains(&format!("error: {}", table.display())),
        "{err}"
    );
    let measured = |bytes, time_us| coll_executor::tuning::Measurement {
        collective: coll_lang::builtins::CollectiveKind::AllReduce,
        algorithm: "algorithms/allreduce_ring.coll".into(),
        settings: String::new(),
        bytes,
        time_us,
    };
    coll_executor::tuning::build("2 x H200", 2, "nvswitch:2", &[measured(8, 7.0)])
        .save(&table)
        .expect("saved");
    let (code, _, err) = coll(&["bench", "--tuned", s(&table)]);
    assert_eq!(code, 1);
    assert!(err.contains("coll bench --tuned: no GPU found"), "{err}");
    let (code, _, err) = coll(&["bench", "--tuned", s(&table), "--ranks", "4"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("the table is for 2 ranks, --ranks says 4"),
        "{err}"
    );
    let (code, _, err) = coll(&["bench", "--tuned", s(&table), "--collective", "allgather"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("the table has no allgather entries (it has: allreduce)"),
        "{err}"
    );
    let (code, _, err) = coll(&["bench", s(&ring), "--tuned", s(&table)]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot be used with"), "{err}");
}

#[test]
fn compile_auto_writes_the_chosen_plan_in_the_format_asked_and_refuses_a_format_without_o() {
    let auto = [
        "compile",
        "--auto",
        "--collective",
        "allreduce",
        "--size",
        "1M",
        "--ranks",
        "8",
    ];
    let (code, out, err) = coll(&auto);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("| algorithm | time (µs) | busbw (GB/s) |"),
        "{out}"
    );
    let chose = out
        .lines()
        .find(|l| l.starts_with("chose algorithms/allreduce_"))
        .unwrap_or_else(|| panic!("no choice in:\n{out}"))
        .to_string();

    // The ranking is a table of its own: a format has nothing to apply to without -o.
    let mut json = auto.to_vec();
    json.extend(["--format", "json"]);
    let (code, out, err) = coll(&json);
    assert_eq!(code, 2, "{out}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("error: --format json with --auto needs -o FILE"),
        "{err}"
    );

    // With -o, the chosen plan is written in that format.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("chosen.json");
    json.extend(["-o", s(&path)]);
    let (code, out, err) = coll(&json);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&chose), "{out}");
    let text = std::fs::read_to_string(&path).expect("the plan was written");
    let plan = coll_compiler::plan::ValidPlan::from_json(&text).expect("a valid JSON plan");
    assert_eq!(plan.ranks, 8);
    assert_eq!(
        plan.collective.0,
        coll_lang::builtins::CollectiveKind::AllReduce
    );
    assert!(
        chose.starts_with(&format!("chose algorithms/allreduce_{}.coll:", plan.name)),
        "{chose} but the plan is `{}`",
        plan.name
    );
    let xml = dir.path().join("chosen.xml");
    let mut msccl = auto.to_vec();
    msccl.extend(["--format", "msccl-xml", "-o", s(&xml)]);
    let (code, _, err) = coll(&msccl);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&xml).expect("the XML was written");
    assert!(text.trim_start().starts_with("<algo "), "{text}");
}

/// `--predict` sweeps one plan's sizes; `--auto` ranks many plans at one size, so asking for
/// both is a usage error naming the two options, and nothing is printed to standard output.
#[test]
fn compile_auto_refuses_predict() {
    let args = [
        "compile",
        "--auto",
        "--collective",
        "allreduce",
        "--size",
        "1M",
        "--ranks",
        "8",
        "--predict",
    ];
    let (code, out, err) = coll(&args);
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("cannot be used with"), "{err}");
    assert!(
        err.contains("'--predict'") && err.contains("'--auto"),
        "{err}"
    );
    // Each option alone is accepted: the refusal is the pair.
    let (code, _, err) = coll(&args[..args.len() - 1]);
    assert_eq!(code, 0, "{err}");
    let ring = coll_tests::root().join("algorithms/allreduce_ring.coll");
    let (code, out, err) = coll(&["compile", s(&ring), "--ranks", "4", "--predict"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("predicted for allreduce `ring`"), "{out}");
}

#[test]
fn a_long_unknown_name_gets_no_suggestion_and_returns_quickly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let name = "q".repeat(200_000);
    let text = format!("{HEADER}let {name}r = 1;\nlet y = {name};\n");
    let p = write(dir.path(), "long.coll", text.as_bytes());
    let err = assert_rejected_at(&p, "6:9", "unknown name `qqq");
    assert!(
        !err.contains("did you mean"),
        "{}",
        &err[..err.len().min(500)]
    );
}

#[test]
fn errors_past_the_cap_are_counted_not_reported() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut text = String::from(HEADER);
    for i in 0..20_000 {
        text.push_str(&format!("let x{i} = y{i};\n"));
    }
    let p = write(dir.path(), "many.coll", text.as_bytes());
    let err = assert_rejected_at(&p, "5:", "unknown name `y0`");
    assert!(
        err.contains("too many errors: 50 shown, and 19950 more"),
        "{}",
        &err[err.len().saturating_sub(1000)..]
    );
    assert!(
        err.contains(": 51 errors"),
        "{}",
        &err[err.len().saturating_sub(300)..]
    );
}

#[test]
fn a_source_over_16_mib_is_refused_before_reading() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("huge.coll");
    // Sparse: the file claims 16 MiB + 1 without the test writing it.
    let f = std::fs::File::create(&p).expect("create");
    f.set_len(coll_lang::limits::MAX_SOURCE_BYTES + 1)
        .expect("set_len");
    let (code, _, err) = coll(&["check", s(&p)]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "cannot read {}: 16777217 bytes is over the limit of 16777216 bytes (16 MiB)",
            p.display()
        )),
        "{err}"
    );
}

#[cfg(unix)]
#[test]
fn special_files_are_refused_by_name() {
    let (code, _, err) = coll(&["check", "/dev/zero"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("cannot read /dev/zero: a character device, not a regular file"),
        "{err}"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, _, err) = coll(&["check", s(dir.path())]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("a directory, not a regular file"), "{err}");
    // A FIFO with no writer would block `open` forever.
    let fifo = dir.path().join("pipe.coll");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    let (code, _, err) = coll(&["check", s(&fifo)]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "cannot read {}: a FIFO, not a regular file",
            fifo.display()
        )),
        "{err}"
    );
}

#[test]
fn a_huge_chunks_header_is_refused_before_elaborating() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = "collective allreduce big(n) {\n    chunks 100000000;\n    inplace;\n}\n";
    let p = write(dir.path(), "chunks.coll", text.as_bytes());
    let (code, _, err) = coll(&["check", s(&p), "--ranks", "8"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(
            "chunks of all buffers over 8 ranks must be at most 33554432, found 1600000000"
        ),
        "{err}"
    );
    assert!(err.contains(&format!("{}:2:12", p.display())), "{err}");
}

#[test]
fn plans_claiming_too_many_chunks_are_refused_before_use() {
    use coll_compiler::plan::{MAX_PLAN_CELLS, ValidPlan};
    let text = std::fs::read_to_string("inputs/plans/ok_ring_allreduce_3.json").expect("fixture");
    let good = ValidPlan::from_json(&text).expect("valid").into_inner();
    let mut bad = good.clone();
    bad.buffers[0].chunks = 1 << 28;
    let e = ValidPlan::from_json(&bad.to_json()).expect_err("2^28 chunks per rank");
    assert_eq!(
        e.to_string(),
        format!(
            "plan: buffers of {} plan chunks over 3 ranks are over the limit of {MAX_PLAN_CELLS}",
            3 * ((1u64 << 28) + good.buffers[1].chunks)
        )
    );
    let mut bad = good;
    bad.chunk_factor = 1 << 32;
    let e = ValidPlan::new(bad).expect_err("chunk_factor 2^32");
    assert_eq!(
        e.to_string(),
        "plan: chunk_factor 4294967296 is over the limit of 134217728 plan chunks"
    );
}

#[test]
fn msccl_chunks_per_loop_is_bounded() {
    let text = std::fs::read_to_string("inputs/msccl/allgather_ring_4.xml").expect("fixture");
    let re = with_attr(&text, "nchunksperloop=\"", "268435456");
    let e = coll_compiler::msccl::import(&re, "big.xml").expect_err("2^28 chunks per loop");
    let msg = e.to_string();
    assert!(
        msg.contains("nchunksperloop")
            && msg.contains("268435456 is out of range: a loop has 1 to 134217728 chunks"),
        "{msg}"
    );
}

/// `text` with the digits after the first `key` replaced by `value`.
fn with_attr(text: &str, key: &str, value: &str) -> String {
    let at = text.find(key).expect("key present") + key.len();
    let end = at + text[at..].find('"').expect("closing quote");
    format!("{}{value}{}", &text[..at], &text[end..])
}

#[test]
fn run_flags_out_of_range_are_usage_errors() {
    let ring = "../algorithms/allreduce_ring.coll";
    for (flag, value, needle) in [
        (
            "--count",
            "9223372036854775808",
            "over the limit of 1099511627776 (1T) elements",
        ),
        ("--timeout", "1e300", "is not a number of seconds above 0"),
        ("--ranks", "0", "is not a rank count from 1 to 65536"),
        ("--ranks", "100000", "is not a rank count from 1 to 65536"),
    ] {
        let mut argv = vec!["run", ring, flag, value];
        if flag != "--ranks" {
            argv.extend(["--ranks", "4"]);
        }
        let (code, _, err) = coll(&argv);
        assert_eq!(code, 2, "{flag} {value}: {err}");
        assert!(err.contains(needle), "{flag} {value}: {err}");
    }
}

#[test]
fn cpu_runs_that_cannot_fit_are_refused_with_an_estimate() {
    let ring = "../algorithms/allreduce_ring.coll";
    // Refused before compiling: 8 ranks of 1 Gi f32 elements in and out.
    let (code, _, err) = coll(&["run", ring, "--ranks", "8", "--count", "1G"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(
            "error: a CPU run needs ~68.7 GB for 8 ranks at count 1073741824, over the limit of 17.2 GB: lower --count or --ranks"
        ),
        "{err}"
    );
    let (code, _, err) = coll(&["run", ring, "--ranks", "4096"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("~34.4 GB for 4096 ranks at count 1048576"),
        "{err}"
    );
    // Refused after compiling, before allocating: an allgather's output is n times larger.
    let ag = "../algorithms/allgather_ring.coll";
    let (code, _, err) = coll(&["run", ag, "--ranks", "32", "--count", "4M"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("for 32 ranks at count 4194304, over the limit"),
        "{err}"
    );
}
