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
