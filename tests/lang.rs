//! Snapshots of the front end: the parsed tree of every shipped algorithm and every valid
//! fixture, the rendered diagnostics of every invalid fixture, and the formatter's promises
//! on all of them.

use coll_tests::{display_name, source};
use std::path::Path;

fn parsed_tree(path: &Path) -> String {
    let file = source(path);
    match coll_lang::load(file.clone()) {
        Ok(m) => coll_lang::dump::dump(&m.file, &m.program, true),
        Err(d) => panic!("{} should be valid:\n{}", display_name(path), d.render()),
    }
}

#[test]
fn algorithms_parse() {
    insta::glob!("../algorithms", "*.coll", |path| {
        insta::assert_snapshot!(parsed_tree(path));
    });
}

#[test]
fn ok_inputs_parse() {
    insta::glob!("inputs/ok/*.coll", |path| {
        insta::assert_snapshot!(parsed_tree(path));
    });
}

#[test]
fn err_inputs_diagnose() {
    insta::glob!("inputs/err/*.coll", |path| {
        let bytes = std::fs::read(path).expect("readable fixture");
        let name = display_name(path);
        let diags = match coll_lang::load_bytes(&name, bytes) {
            Ok(_) => panic!("{name} should be rejected"),
            Err(d) => d,
        };
        // The first line of each fixture says which error it is about.
        let rendered = diags.render();
        assert!(
            rendered.contains(&format!("{name}:")),
            "diagnostic does not name the file: {rendered}"
        );
        insta::assert_snapshot!(rendered);
    });
}

#[test]
fn shipped_and_ok_files_are_formatted_and_round_trip() {
    let mut files = coll_tests::coll_files("algorithms");
    files.extend(coll_tests::coll_files("tests/inputs/ok"));
    assert!(
        files.len() >= 6,
        "expected the shipped algorithms and fixtures"
    );
    for path in files {
        let file = source(&path);
        let program = coll_lang::parse(&file).expect("valid");
        let formatted = coll_lang::fmt::format(file.text(), &program);
        assert_eq!(
            formatted,
            file.text(),
            "{} is not in canonical layout",
            file.name()
        );
        let again = coll_lang::parse(&coll_lang::SourceFile::new("again", formatted.clone()))
            .expect("formatted output parses");
        assert_eq!(
            coll_lang::dump::dump(&file, &program, false),
            coll_lang::dump::dump(&file, &again, false),
        );
    }
}

/// The arguments a fixture asks for on its first line: `// check: --ranks 4 --topo ring:4`.
fn directive(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .next()
        .and_then(|l| l.strip_prefix("// check:"))
        .map(|args| args.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Runs `coll check FILE ARGS...` from the test crate's folder, so paths in the output are
/// relative (`inputs/fail/x.coll`).
fn coll_check(path: &Path, args: &[String]) -> (u8, String, String) {
    let name = display_name(path);
    let rel = name.strip_prefix("tests/").unwrap_or(&name).to_string();
    let mut argv = vec!["coll".to_string(), "check".to_string(), rel];
    argv.extend(args.iter().cloned());
    coll_cli::run_captured(argv)
}

#[test]
fn fail_inputs_diagnose() {
    insta::glob!("inputs/fail/*.coll", |path| {
        let args = directive(path);
        assert!(
            args.iter().any(|a| a == "--ranks"),
            "{}: first line must be `// check: --ranks N ...`",
            display_name(path)
        );
        let (code, out, err) = coll_check(path, &args);
        assert_eq!(
            code,
            1,
            "{} should fail to prove:\n{out}{err}",
            display_name(path)
        );
        insta::assert_snapshot!(err);
    });
}

/// The fixtures written with the newer forms (parameters, conditionals, top-level `let`s read
/// by functions, tables, several sources in one `reduce`, statement keywords as names, an
/// empty scratch buffer) compile through the API, with parameters set there, and run exactly
/// on the CPU executor: every element of every rank checked against the naive reference.
#[test]
fn new_forms_run_exactly() {
    use coll_executor::api::Program;
    use coll_executor::cpu::{CpuExecutor, RunOptions};
    use coll_executor::dtype::{DType, ReduceOp};
    type Case<'a> = (&'a str, &'a [(&'a str, i64)], &'a [u32], u64);
    // (fixture, parameters, rank counts, the chunk factor they give at the first count)
    let cases: &[Case] = &[
        ("param_two_way_rings", &[], &[2, 3, 5], 4),
        ("param_two_way_rings", &[("rings", 3)], &[4, 2], 12),
        ("table_ring_order", &[], &[4], 1),
        ("nary_reduce_tree", &[], &[2, 5, 8], 1),
        ("keywords_as_names", &[], &[3], 2),
        ("scratch_zero_size", &[], &[3], 1),
    ];
    for &(name, params, ranks, chunks) in cases {
        let path = coll_tests::root().join(format!("tests/inputs/ok/{name}.coll"));
        let mut program = Program::from_file(&path).expect("valid fixture");
        for &(p, v) in params {
            program = program.param(p, v);
        }
        for (i, &n) in ranks.iter().enumerate() {
            // Copies kept, so that the scratch buffer after the empty one stays in the plan.
            let mut options = coll_compiler::CompileOptions::default();
            options.lower.fold_copies = false;
            let topo =
                coll_compiler::topology::Topology::parse(&format!("nvswitch:{n}")).expect("preset");
            let plan = program
                .compile_for(&topo, &options)
                .unwrap_or_else(|e| panic!("{name} n={n} {params:?}: {e}"));
            if i == 0 {
                assert_eq!(plan.chunk_factor, chunks, "{name} {params:?}");
            }
            if name == "scratch_zero_size" {
                // The empty buffer is gone and the one after it renumbered.
                let names: Vec<&str> = plan.buffers.iter().map(|b| b.name.as_str()).collect();
                assert_eq!(names, ["input", "output", "staging"]);
            }
            let exec = CpuExecutor::new(plan, coll_compiler::DEFAULT_SLOTS);
            for (inplace, op, root) in [(false, ReduceOp::Sum, 0), (true, ReduceOp::Max, n - 1)] {
                let o = RunOptions {
                    count: 1000 + u64::from(n),
                    op,
                    root,
                    timeout: std::time::Duration::from_secs(20),
                    stall: None,
                };
                let r = coll_executor::harness::run_checked(&exec, DType::F32, &o, inplace)
                    .unwrap_or_else(|e| panic!("{name} n={n}: {e}"));
                assert_eq!(
                    r.wrong,
                    Some(0),
                    "{name} n={n} {params:?} {op} in place {inplace}"
                );
            }
        }
    }
}

/// A parameter the program does not declare is an error through the API (naming the
/// declared ones) and on the command line, and a value that is not a 64-bit integer is a
/// usage error; a declared one changes the plan `coll run` runs.
#[test]
fn params_from_the_api_and_the_command_line() {
    use coll_executor::api::Program;
    let path = coll_tests::root().join("tests/inputs/ok/param_two_way_rings.coll");
    let err = Program::from_file(&path)
        .expect("valid")
        .param("ring", 3)
        .compile(4, "nvswitch:4")
        .expect_err("unknown parameter");
    let msg = err.to_string();
    assert!(
        msg.contains("unknown parameter `ring`: the program declares rings")
            && msg.contains("did you mean `rings`?")
            && msg.contains("param_two_way_rings.coll:3:22"),
        "{msg}"
    );

    // Relative to the test crate's folder, where tests run.
    let file = "inputs/ok/param_two_way_rings.coll";
    let run = |extra: &[&str]| {
        let mut argv = vec!["coll", "run", file, "--ranks", "4", "--count", "1003"];
        argv.extend_from_slice(extra);
        coll_cli::run_captured(argv)
    };
    let (code, out, err) = run(&["--param", "rings=3"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("#wrong 0"), "{out}");
    let (code, _, err) = run(&["--param", "rings=3", "--param", "trees=1"]);
    assert_eq!(code, 1);
    assert!(err.contains("unknown parameter `trees`"), "{err}");
    let (code, _, err) = run(&["--param", "rings=99999999999999999999"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("99999999999999999999 is out of range"),
        "{err}"
    );
    let (code, _, err) = run(&["--param", "rings=two"]);
    assert_eq!(code, 2);
    assert!(err.contains("`two` is not an integer"), "{err}");
}
