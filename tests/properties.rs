//! Properties of the front end over generated and mutated sources, for a bounded number of
//! cases (cargo-fuzz needs a nightly toolchain these machines lack):
//! - nothing panics, whatever the bytes;
//! - `fmt` is idempotent, keeps every comment, and `parse(fmt(x))` equals `parse(x)` up to
//!   spans (compared through the span-free tree dump, where parentheses are transparent).

use coll_lang::SourceFile;
use proptest::prelude::*;

/// Formats `text` if it parses and checks the formatter's promises; returns whether it parsed.
fn check_fmt_promises(text: &str) -> Result<bool, TestCaseError> {
    let file = SourceFile::new("prop.coll", text);
    let Ok(program) = coll_lang::parse(&file) else {
        return Ok(false);
    };
    let formatted = coll_lang::fmt::format(text, &program);
    let file2 = SourceFile::new("prop.coll", formatted.clone());
    let again = match coll_lang::parse(&file2) {
        Ok(p) => p,
        Err(d) => {
            return Err(TestCaseError::fail(format!(
                "formatted output does not parse:\n{}\n--- input ---\n{text}\n--- output ---\n{formatted}",
                d.render()
            )));
        }
    };
    prop_assert_eq!(
        coll_lang::dump::dump(&file, &program, false),
        coll_lang::dump::dump(&file2, &again, false),
        "parse(fmt(x)) != parse(x)\n--- input ---\n{}\n--- output ---\n{}",
        text,
        formatted
    );
    prop_assert_eq!(
        coll_lang::fmt::format(&formatted, &again),
        formatted.clone(),
        "fmt is not idempotent"
    );
    for c in coll_lang::comments::scan(text) {
        // The formatter drops trailing whitespace, inside block comments too.
        let body = file
            .slice(c.span)
            .lines()
            .map(str::trim_end)
            .collect::<Vec<_>>()
            .join("\n");
        let body = body.trim_end();
        prop_assert!(
            formatted.contains(body),
            "comment {:?} lost:\n{}",
            body,
            formatted
        );
    }
    // The checker must not panic either, valid or not.
    let _ = coll_lang::check::check(&program);
    Ok(true)
}

// ----- generators of syntactically valid programs -----

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("n".to_string()),
        Just("x".to_string()),
        Just("r".to_string()),
        Just("nodes".to_string()),
        "[a-z][a-z0-9_]{0,6}"
            .prop_filter("not a keyword", |s| { !coll_lang::builtins::is_keyword(s) }),
    ]
}

fn literal() -> impl Strategy<Value = String> {
    prop_oneof![
        (0i64..1000).prop_map(|v| v.to_string()),
        (0i64..0xffff).prop_map(|v| format!("0x{v:X}")),
        Just("1_000".to_string()),
        Just("true".to_string()),
        Just("false".to_string()),
    ]
}

fn expr() -> BoxedStrategy<String> {
    let leaf = prop_oneof![literal(), name()];
    leaf.prop_recursive(4, 24, 3, |inner| {
        let op = prop_oneof![
            Just("+"),
            Just("-"),
            Just("*"),
            Just("/"),
            Just("%"),
            Just("&"),
            Just("|"),
            Just("^"),
            Just("<<"),
            Just(">>"),
            Just("and"),
            Just("or"),
        ];
        let cmp = prop_oneof![
            Just("=="),
            Just("!="),
            Just("<"),
            Just("<="),
            Just(">"),
            Just(">=")
        ];
        prop_oneof![
            (inner.clone(), op.clone(), inner.clone()).prop_map(|(a, o, b)| format!("{a} {o} {b}")),
            (inner.clone(), op, inner.clone()).prop_map(|(a, o, b)| format!("({a} {o} {b})")),
            (inner.clone(), cmp, inner.clone()).prop_map(|(a, o, b)| format!("({a} {o} {b})")),
            inner.clone().prop_map(|a| format!("-{a}")),
            inner.clone().prop_map(|a| format!("~{a}")),
            inner.clone().prop_map(|a| format!("(not {a})")),
            inner.clone().prop_map(|a| format!("(/* inside */ {a})")),
            (name(), prop::collection::vec(inner.clone(), 0..3))
                .prop_map(|(f, args)| format!("{f}({})", args.join(", "))),
            chunk(inner),
        ]
    })
    .boxed()
}

fn selector(e: impl Strategy<Value = String> + Clone) -> impl Strategy<Value = String> {
    prop_oneof![
        e.clone(),
        Just("*".to_string()),
        (e.clone(), e).prop_map(|(a, b)| format!("{a}..{b}")),
    ]
}

fn chunk(e: impl Strategy<Value = String> + Clone + 'static) -> BoxedStrategy<String> {
    (
        prop_oneof![Just("input"), Just("output"), Just("tmp")],
        selector(e.clone()),
        selector(e),
    )
        .prop_map(|(b, r, i)| format!("{b}[{r}][{i}]"))
        .boxed()
}

fn comment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just(String::new()),
        Just("// a line comment\n".to_string()),
        Just("/* block /* nested */ */ ".to_string()),
        Just("\n\n// after a blank line\n".to_string()),
    ]
}

fn stmt() -> impl Strategy<Value = String> {
    let simple = prop_oneof![
        (name(), expr()).prop_map(|(n, e)| format!("let {n} = {e};")),
        (name(), expr()).prop_map(|(n, e)| format!("{n} = {e};")),
        (
            prop_oneof![Just("copy"), Just("reduce")],
            chunk(expr()),
            chunk(expr()),
            prop_oneof![Just(""), Just(" via switch"), Just(" via nvlink")],
            prop_oneof![
                Just(""),
                Just(" with channel 1"),
                Just(" with pipeline 2, protocol ll")
            ],
        )
            .prop_map(|(op, s, d, via, with)| format!("{op} {s} -> {d}{via}{with};")),
        expr().prop_map(|e| format!("assert {e};")),
        expr().prop_map(|e| format!("return {e};")),
        Just("return;".to_string()),
        (name(), prop::collection::vec(expr(), 0..3))
            .prop_map(|(f, a)| format!("{f}({});", a.join(", "))),
        (chunk(expr()), prop::collection::vec(chunk(expr()), 1..3))
            .prop_map(|(d, s)| format!("expect {d} == {};", s.join(", "))),
    ];
    (
        comment(),
        simple,
        comment().prop_map(|c| c.replace('\n', " ")),
    )
        .prop_map(|(c, s, t)| {
            // A trailing `//` comment must end its line.
            let t = t.trim_start();
            let t = if t.starts_with("//") {
                format!(" {t}\n")
            } else {
                format!(" {t}")
            };
            format!("{c}{s}{t}")
        })
        .prop_recursive(3, 16, 4, |inner| {
            let block = prop::collection::vec(inner, 0..4).prop_map(|v| v.join("\n"));
            prop_oneof![
                (name(), expr(), expr(), block.clone())
                    .prop_map(|(v, a, b, body)| format!("for {v} in {a}..{b} {{\n{body}\n}}")),
                (name(), expr(), expr(), expr(), block.clone()).prop_map(|(v, a, b, s, body)| {
                    format!("for {v} in {a}..{b} step {s} {{ {body} }}")
                }),
                (expr(), block.clone()).prop_map(|(c, b)| format!("while {c} {{\n{b}\n}}")),
                (expr(), block.clone(), block.clone())
                    .prop_map(|(c, a, b)| format!("if {c} {{ {a} }} else {{\n{b}\n}}")),
                (expr(), expr(), block.clone(), block)
                    .prop_map(|(c, d, a, b)| format!("if {c} {{\n{a}\n}} else if {d} {{ {b} }}")),
            ]
        })
}

fn program() -> impl Strategy<Value = String> {
    let header_item = prop_oneof![
        expr().prop_map(|e| format!("chunks {e};")),
        Just("inplace;".to_string()),
        Just("outofplace;".to_string()),
        expr().prop_map(|e| format!("ranks {e};")),
        Just("topology nvswitch, cluster;".to_string()),
        Just("needs switch;".to_string()),
        expr().prop_map(|e| format!("scratch tmp[{e}];")),
        expr().prop_map(|e| format!("pipeline {e};")),
        Just("protocol ll;".to_string()),
        stmt().prop_map(|s| format!("ensure {{ {s} }}")),
    ];
    let function = (
        name(),
        prop::collection::vec(
            (
                name(),
                prop_oneof![Just(""), Just(": int"), Just(": chunk")],
            ),
            0..3,
        ),
        prop_oneof![Just(""), Just(" -> int"), Just(" -> bool")],
        prop::collection::vec(stmt(), 0..3),
    )
        .prop_map(|(f, ps, ret, body)| {
            let ps: Vec<String> = ps.into_iter().map(|(p, t)| format!("{p}{t}")).collect();
            format!("fn {f}({}){ret} {{\n{}\n}}", ps.join(", "), body.join("\n"))
        });
    (
        comment(),
        prop_oneof![Just("allreduce"), Just("custom"), Just("alltoall")],
        prop::collection::vec(header_item, 0..5),
        prop::collection::vec(prop_oneof![stmt(), function], 0..6),
        comment(),
    )
        .prop_map(|(c, kind, items, body, tail)| {
            format!(
                "{c}collective {kind} gen(n) {{ {} }}\n{}\n{tail}",
                items.join("\n"),
                body.join("\n\n")
            )
        })
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn generated_programs_round_trip(src in program()) {
        let parsed = check_fmt_promises(&src)?;
        prop_assert!(parsed, "generator produced an invalid program:\n{}\n{}", src,
            coll_lang::parse(&SourceFile::new("gen", src.clone())).err().map(|d| d.render()).unwrap_or_default());
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(file) = coll_lang::decode("bytes.coll", bytes) {
            check_fmt_promises(file.text())?;
        }
    }

    #[test]
    fn mutated_sources_never_panic(
        which in any::<prop::sample::Index>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0usize..4, "[-+*/%(){}\\[\\];,.<>=a-z0-9 \n]{0,4}"), 1..6),
    ) {
        let mut files = coll_tests::coll_files("algorithms");
        files.extend(coll_tests::coll_files("tests/inputs/ok"));
        prop_assume!(!files.is_empty());
        let mut text = std::fs::read_to_string(which.get(&files)).expect("readable");
        for (at, delete, insert) in edits {
            let mut pos = at.index(text.len() + 1);
            while !text.is_char_boundary(pos) {
                pos -= 1;
            }
            let mut end = (pos + delete).min(text.len());
            while !text.is_char_boundary(end) {
                end += 1;
            }
            text.replace_range(pos..end, &insert);
        }
        check_fmt_promises(&text)?;
    }
}

// ----- plans: mutated JSON never makes the loader, checks or executor panic -----

fn ring_plan_json() -> String {
    let path = coll_tests::root().join("algorithms/allreduce_ring.coll");
    let m = coll_lang::load(coll_tests::source(&path)).expect("ring is valid");
    let topo = coll_compiler::topology::Topology::parse("nvswitch:3").expect("preset");
    let c = coll_compiler::compile(&m, &topo, &coll_compiler::CompileOptions::default())
        .expect("ring compiles");
    c.lowered.plan.to_json()
}

/// Replaces the `which`-th number in the JSON text with `value`, or deletes the `which`-th
/// op line, or cuts the text.
fn mutate_plan(text: &str, kind: u8, which: usize, value: i64) -> String {
    match kind % 3 {
        0 => {
            let mut count = 0;
            let mut out = String::with_capacity(text.len());
            let mut chars = text.char_indices().peekable();
            while let Some((i, c)) = chars.next() {
                if c.is_ascii_digit() && !text[..i].ends_with(|p: char| p.is_ascii_alphanumeric()) {
                    let mut end = i + 1;
                    while let Some(&(j, d)) = chars.peek() {
                        if d.is_ascii_digit() {
                            end = j + 1;
                            chars.next();
                        } else {
                            break;
                        }
                    }
                    if count == which {
                        out.push_str(&value.to_string());
                    } else {
                        out.push_str(&text[i..end]);
                    }
                    count += 1;
                } else {
                    out.push(c);
                }
            }
            out
        }
        1 => {
            let lines: Vec<&str> = text.lines().collect();
            let ops: Vec<usize> = (0..lines.len())
                .filter(|&i| lines[i].contains("\"op\""))
                .collect();
            let drop = ops.get(which % ops.len().max(1)).copied();
            lines
                .iter()
                .enumerate()
                .filter(|(i, _)| Some(*i) != drop)
                .map(|(_, l)| *l)
                .collect::<Vec<_>>()
                .join("\n")
                .replace(",\n        ]", "\n        ]")
        }
        _ => text.chars().take(which % text.len().max(1)).collect(),
    }
}

proptest! {
    #![proptest_config(config(96))]

    #[test]
    fn mutated_plans_never_panic(kind in any::<u8>(), which in 0usize..400, value in -3i64..40) {
        let text = mutate_plan(&ring_plan_json(), kind, which, value);
        if let Ok(plan) = coll_compiler::plan::ValidPlan::from_json(&text) {
            let _ = coll_compiler::replay::replay(&plan, 0);
            let _ = coll_compiler::check::simulate(&plan, 2);
            let _ = coll_compiler::check::check_resources(&plan, &Default::default());
            let _ = coll_compiler::dump::text(&plan);
            let exec = coll_executor::cpu::CpuExecutor::new(plan, 2);
            let o = coll_executor::cpu::RunOptions {
                count: 7,
                timeout: std::time::Duration::from_millis(50),
                ..Default::default()
            };
            let _ = coll_executor::harness::run_checked(&exec, coll_executor::dtype::DType::F32, &o, false);
        }
    }
}
