//! Unit tests of the checker: one per rule, asserting the diagnostics' kinds and places.
//! One file of over 800 lines on purpose: the tests share a few helpers and read as one
//! catalogue of the rules, in the order `LANGUAGE.md` gives them.

use super::*;
use crate::parser::parse;

const H: &str = "collective allreduce t(n) { chunks 1; }\n";

fn run(src: &str) -> Result<Summary, Vec<Diagnostic>> {
    let p = parse(src).unwrap_or_else(|e| panic!("parse failed: {e:?}"));
    check(&p)
}

/// Every error as (kind, the source text under its primary span).
fn errors(src: &str) -> Vec<(ErrorKind, String)> {
    match run(src) {
        Ok(s) => panic!("expected errors, got {s:?}"),
        Err(ds) => ds
            .iter()
            .map(|d| (d.kind.clone(), src[d.span.range()].to_string()))
            .collect(),
    }
}

/// The errors of a body placed after a valid header.
fn body_errors(body: &str) -> Vec<(ErrorKind, String)> {
    errors(&format!("{H}{body}"))
}

fn ok(src: &str) -> Summary {
    run(src).unwrap_or_else(|e| panic!("unexpected errors: {e:#?}"))
}

fn one(kind: ErrorKind, text: &str) -> Vec<(ErrorKind, String)> {
    vec![(kind, text.to_string())]
}

fn s(x: &str) -> String {
    x.to_string()
}

fn mm(expected: &str, found: &str) -> ErrorKind {
    ErrorKind::TypeMismatch {
        expected: s(expected),
        found: s(found),
    }
}

fn notes(src: &str) -> Vec<String> {
    run(src)
        .expect_err("errors")
        .into_iter()
        .flat_map(|d| d.notes)
        .collect()
}

#[test]
fn valid_program_using_every_feature() {
    let src = r#"
// everything at once
collective allgather everything(n) {
    chunks 2 * max(1, n / 4);
    inplace;
    ranks n >= 2 and is_pow2(n);
    topology nvswitch, hgx;
    needs switch, net;
    scratch tmp[n];
    scratch acc[(n + 1) * 2];
    instances 2;
    pipeline 1;
    protocol ll;
    channel 0;
}

fn parent(r) -> int { return (r - 1) / 2; }
fn pick(b: bool, x: int, y: int) -> int {
    if b { return x; } else if x > y { return y; } else { return x + y; }
}
fn send(buf: buffer, c: chunk, r: int) {
    copy c -> buf[r];
    if r == 0 { return; }
}
fn first(buf: buffer) -> chunk { return buf[0][0]; }
fn flag() -> bool { return not (1 == 2) or true != false; }

let k = 0;
k = k + parent(3) * pick(flag(), 1, 2);
for r in 0..n step 1 {
    let c = input[r][0];
    send(output, c, (r + 1) % n);
    copy input[r][0..2] -> output[r][r * 2];
    reduce tmp[0..n][1] -> acc[r][0] via switch with protocol simple, channel 1, pipeline 2;
    copy input[r][0] -> output[*][0] via switch;
    reduce input[*][0] -> (output[0]) via nvlink;
    copy first(input) -> output[r];
}
let i = n;
while i > 1 { i = i >> 1; assert i >= 1; }
for j in n - 1..-1 step -1 {
    let x = -j + ~j & 0x0f | j ^ 3 << 1;
    if x < 0 { k = k + 1; } else if x <= 1 { } else { k = abs(x) % 2; }
}
let l = log2(n) + ceil_log2(n) + min(node(0), local(0)) + rank(nodes - 1, gpus_per_node - 1) + root;
"#;
    let sum = ok(src);
    assert_eq!(
        sum,
        Summary {
            kind: CollectiveKind::AllGather,
            name: s("everything"),
            inplace: true,
            ranks_name: s("n"),
            scratch: vec![s("tmp"), s("acc")],
            needs_switch: true,
            needs_net: true,
            topologies: vec![s("nvswitch"), s("hgx")],
            params: vec![],
        }
    );
}

#[test]
fn defaults_in_summary() {
    let sum = ok("collective broadcast b(m) { chunks m; }\ncopy input[root][0] -> input[*];");
    assert!(!sum.inplace);
    assert_eq!(sum.ranks_name, "m");
    assert_eq!(sum.topologies, vec![s("any")]);
    assert!(!sum.needs_switch && !sum.needs_net);
}

#[test]
fn valid_custom_with_ensure() {
    ok(r#"
collective custom shift(n) {
    chunks 1;
    ensure {
        let off = 1;
        for r in 0..n {
            if r >= 0 { off = off + 0; }
            assert off == 1;
            expect output[(r + off) % n][0] == input[r][0];
        }
        expect output[0][0] == input[*][0], input[0][0];
        let i = 0;
        while i < 0 { i = i + 1; }
        let p = helper(1);
    }
}
fn helper(x) -> int { return x; }
for r in 0..n { copy input[r][0] -> output[(r + 1) % n]; }
"#);
}

// ----- header -----

#[test]
fn missing_header() {
    let src = "fn f() {}\nlet x = n + 1;\n";
    assert_eq!(errors(src), one(ErrorKind::MissingHeader, ""));
    let d = &run(src).expect_err("error")[0];
    assert_eq!(d.span, Span::new(0, 0));
    // Only comments: no items at all.
    assert_eq!(errors("// nothing\n"), one(ErrorKind::EmptyFile, ""));
    // Not reported as missing when it comes later.
    ok("let x = n;\ncollective allreduce a(n) { chunks 1; }\n");
}

#[test]
fn missing_header_still_reports_other_errors() {
    let e = errors("let x = 1 + true;\n");
    assert_eq!(e[0].0, ErrorKind::MissingHeader);
    assert_eq!(e[1], (mm("int", "bool"), s("true")));
}

#[test]
fn duplicate_header() {
    let src = format!("{H}collective allgather u(n) {{ chunks 1; }}\n");
    assert_eq!(
        errors(&src),
        one(ErrorKind::DuplicateHeader, "collective allgather u")
    );
    let d = &run(&src).expect_err("error")[0];
    assert_eq!(&src[d.labels[0].span.range()], "collective allreduce t");
}

#[test]
fn unknown_collective() {
    let src = "collective allreduse t(n) { chunks 1; }";
    assert_eq!(
        errors(src),
        one(
            ErrorKind::UnknownCollective {
                name: s("allreduse")
            },
            "allreduse"
        )
    );
    assert!(notes(src).contains(&s("did you mean `allreduce`?")));
}

#[test]
fn header_params() {
    assert_eq!(
        errors("collective allreduce t() { chunks n; }\nlet x = n;"),
        one(ErrorKind::HeaderParams { found: 0 }, "t")
    );
    assert_eq!(
        errors("collective allreduce t(n, m, k) { chunks n; }"),
        one(ErrorKind::HeaderParams { found: 3 }, "m, k")
    );
}

#[test]
fn rank_count_named_like_a_builtin() {
    assert_eq!(
        errors("collective allreduce t(root) { chunks 1; }"),
        one(ErrorKind::Duplicate { name: s("root") }, "root")
    );
    assert_eq!(
        errors("collective allreduce t(input) { chunks 1; }"),
        one(ErrorKind::Duplicate { name: s("input") }, "input")
    );
}

#[test]
fn duplicate_header_items() {
    let src = "collective allreduce t(n) { chunks 1; pipeline 2; chunks 2; pipeline 3; }";
    let e = errors(src);
    let dup = |item: &str| ErrorKind::DuplicateHeaderItem { item: s(item) };
    assert_eq!(
        e,
        vec![
            (dup("chunks"), s("chunks")),
            (dup("pipeline"), s("pipeline"))
        ]
    );
    let d = &run(src).expect_err("errors")[0];
    assert_eq!(d.labels[0].span, Span::new(28, 34));
    assert_eq!(
        errors("collective allreduce t(n) { chunks 1; inplace; inplace; }"),
        one(dup("inplace"), "inplace")
    );
}

#[test]
fn missing_chunks() {
    assert_eq!(
        errors("collective allreduce ring(n) { inplace; }"),
        one(ErrorKind::MissingChunks, "ring")
    );
}

#[test]
fn conflicting_placement() {
    let src = "collective allreduce t(n) { chunks 1; outofplace; inplace; }";
    assert_eq!(errors(src), one(ErrorKind::ConflictingPlacement, "inplace"));
    let d = &run(src).expect_err("errors")[0];
    assert_eq!(&src[d.labels[0].span.range()], "outofplace");
}

#[test]
fn header_expression_types() {
    let e = errors(
        "collective allreduce t(n) { chunks n > 1; ranks n + 1; scratch s[true]; \
             pipeline false; instances n == 1; channel true; }",
    );
    assert_eq!(
        e,
        vec![
            (mm("int", "bool"), s("n > 1")),
            (mm("bool", "int"), s("n + 1")),
            (mm("int", "bool"), s("true")),
            (mm("int", "bool"), s("false")),
            (mm("int", "bool"), s("n == 1")),
            (mm("int", "bool"), s("true")),
        ]
    );
}

#[test]
fn header_expressions_see_rank_count_constants_and_functions_not_buffers() {
    ok(
        "collective allreduce t(n) { chunks f(n) + nodes + root; ranks g(gpus_per_node); }\n\
            fn f(x) -> int { return x; }\nfn g(x) -> bool { return x > 0; }",
    );
    assert_eq!(
        errors("collective allreduce t(n) { chunks input; }"),
        one(ErrorKind::UnknownName { name: s("input") }, "input")
    );
    assert_eq!(
        errors("collective allreduce t(n) { chunks 1; scratch a[1]; scratch b[a]; }"),
        one(ErrorKind::UnknownName { name: s("a") }, "a")
    );
}

#[test]
fn hint_out_of_range() {
    let range = |name: &str, min, value| ErrorKind::HintOutOfRange {
        name: s(name),
        min,
        value,
    };
    let e =
        errors("collective allreduce t(n) { chunks 1; instances 0; pipeline -(1); channel -1; }");
    assert_eq!(
        e,
        vec![
            (range("instances", 1, 0), s("0")),
            (range("pipeline", 1, -1), s("-(1)")),
            (range("channel", 0, -1), s("-1")),
        ]
    );
    // Not literals: left to elaboration.
    ok("collective allreduce t(n) { chunks 1; instances n - 8; pipeline 1 - 1; channel 0; }");
    assert_eq!(
        body_errors("copy input[0][0] -> output[1] with pipeline 0, channel (-2);"),
        vec![
            (range("pipeline", 1, 0), s("0")),
            (range("channel", 0, -2), s("(-2)")),
        ]
    );
}

#[test]
fn unknown_protocol() {
    let src = "collective allreduce t(n) { chunks 1; protocol simpel; }";
    assert_eq!(
        errors(src),
        one(ErrorKind::UnknownProtocol { name: s("simpel") }, "simpel")
    );
    assert!(notes(src).contains(&s("did you mean `simple`?")));
    assert_eq!(
        errors("collective allreduce t(n) { chunks 1; protocol 1 + 2; }"),
        one(ErrorKind::UnknownProtocol { name: s("1 + 2") }, "1 + 2")
    );
    // A bare name only: parentheses are not a protocol name.
    assert_eq!(
        body_errors("copy input[0][0] -> output[1] with protocol (ll);"),
        one(ErrorKind::UnknownProtocol { name: s("(ll)") }, "(ll)")
    );
}

#[test]
fn unknown_topology_and_capability() {
    let src = "collective allreduce t(n) { chunks 1; topology ring, nvswich; needs swtch; }";
    assert_eq!(
        errors(src),
        vec![
            (
                ErrorKind::UnknownTopology { name: s("nvswich") },
                s("nvswich")
            ),
            (
                ErrorKind::UnknownCapability { name: s("swtch") },
                s("swtch")
            ),
        ]
    );
    let n = notes(src);
    assert!(n.contains(&s("did you mean `nvswitch`?")), "{n:?}");
    assert!(n.contains(&s("did you mean `switch`?")), "{n:?}");
    assert_eq!(
        errors("collective allreduce t(n) { chunks 1; topology ring, ring; }"),
        one(ErrorKind::Duplicate { name: s("ring") }, "ring")
    );
}

#[test]
fn postconditions() {
    assert_eq!(
        errors("collective allreduce t(n) { chunks 1; ensure { } }"),
        one(
            ErrorKind::UnexpectedPostcondition {
                kind: s("allreduce")
            },
            "ensure"
        )
    );
    assert_eq!(
        errors("collective custom t(n) { chunks 1; }"),
        one(ErrorKind::MissingPostcondition, "custom")
    );
}

#[test]
fn scratch_names() {
    let src = "collective allreduce t(n) { chunks 1; scratch a[1]; scratch a[2]; \
                   scratch output[1]; scratch n[1]; scratch root[1]; }";
    let dup = |x: &str| (ErrorKind::Duplicate { name: s(x) }, s(x));
    assert_eq!(
        errors(src),
        vec![dup("a"), dup("output"), dup("n"), dup("root")]
    );
    let ds = run(src).expect_err("errors");
    assert_eq!(&src[ds[0].labels[0].span.range()], "a");
    assert_eq!(ds[0].labels[0].span.start, 46);
}

// ----- scopes -----

#[test]
fn duplicate_let_in_same_scope_and_shadowing() {
    let src = format!("{H}let x = 1;\nlet x = 2;\n");
    assert_eq!(
        errors(&src),
        one(ErrorKind::Duplicate { name: s("x") }, "x")
    );
    let d = &run(&src).expect_err("errors")[0];
    assert_eq!(d.labels[0].message, "first defined here");
    assert_eq!(d.labels[0].span.start as usize, H.len() + 4);
    // Shadowing in an inner block is fine; redefining a program-wide name is not.
    ok(&format!(
        "{H}let x = 1;\nif true {{ let x = true; assert x; }}"
    ));
    assert_eq!(
        body_errors("let n = 3;\nfn f(root) {}"),
        vec![
            (ErrorKind::Duplicate { name: s("n") }, s("n")),
            (ErrorKind::Duplicate { name: s("root") }, s("root")),
        ]
    );
    // The loop variable shares its body's scope.
    assert_eq!(
        body_errors("for i in 0..n { let i = 2; }"),
        one(ErrorKind::Duplicate { name: s("i") }, "i")
    );
}

#[test]
fn top_level_statements_share_one_scope_across_functions() {
    ok(&format!("{H}let a = 1;\nfn f() {{}}\nlet b = a + 1;"));
    // Blocks end their scope.
    assert_eq!(
        body_errors("if true { let y = 1; }\nlet z = y;"),
        one(ErrorKind::UnknownName { name: s("y") }, "y")
    );
}

#[test]
fn functions_see_top_level_lets_but_not_block_variables() {
    // A top-level `let`, even one written after the function, is readable; not assignable.
    ok(&format!(
        "{H}fn f() -> int {{ return width + 1; }}\nlet width = 2;\nlet w = f();"
    ));
    let src = format!("{H}let width = 1;\nfn f() {{ width = 2; }}");
    assert_eq!(
        errors(&src),
        one(
            ErrorKind::NotAssignable {
                name: s("width"),
                why: s("functions only read the body's top-level variables"),
            },
            "width"
        )
    );
    // A function's own `let` and parameters shadow it.
    ok(&format!(
        "{H}let k = true;\nfn f(k) -> int {{ return k; }}\nfn g() -> int {{ let k = 3; return k; }}"
    ));
    // Variables of the body's blocks stay invisible.
    let src = format!("{H}if true {{ let secret = 1; }}\nfn f() -> int {{ return secret; }}");
    assert_eq!(
        errors(&src),
        one(ErrorKind::UnknownName { name: s("secret") }, "secret")
    );
    // And they see globals.
    ok(&format!(
        "{H}fn f(r) -> int {{ return (r + root + nodes) % n; }}\n\
                     fn g(r) {{ copy input[r][0] -> output[f(r)]; }}"
    ));
}

#[test]
fn params_are_program_wide_ints() {
    let sum = ok(
        "collective allreduce t(n) { param trees = 2; chunks trees * n; param w = trees + 1; }\n\
             fn f() -> int { return trees + w; }\nlet x = f();",
    );
    assert_eq!(sum.params, vec![s("trees"), s("w")]);
    assert_eq!(
        errors("collective allreduce t(n) { param p = true; chunks 1; }\n"),
        one(mm("int", "bool"), "true")
    );
    assert_eq!(
        errors("collective allreduce t(n) { chunks 1; param n = 1; param input = 2; }\n"),
        vec![
            (ErrorKind::Duplicate { name: s("n") }, s("n")),
            (ErrorKind::Duplicate { name: s("input") }, s("input")),
        ]
    );
    assert_eq!(
        errors("collective allreduce t(n) { chunks 1; param p = 1; }\np = 2;"),
        one(
            ErrorKind::NotAssignable {
                name: s("p"),
                why: s("it is a program parameter, set with `--param`"),
            },
            "p"
        )
    );
}

#[test]
fn conditional_expressions() {
    ok(&format!(
        "{H}let a = if n > 2 then n - 1 else 0;\nlet b = 1 + (if a == 0 then 2 else 3) * 2;\n\
             let c = if true then input[0][0] else output[0][0];"
    ));
    assert_eq!(
        body_errors("let a = if 1 then 2 else 3;"),
        one(mm("bool", "int"), "1")
    );
    assert_eq!(
        body_errors("let a = if true then 2 else false;"),
        one(mm("int", "bool"), "false")
    );
}

#[test]
fn tables() {
    ok(&format!(
        "{H}let perm = [0, 2, 1, 3];\nlet x = perm[1] + perm[perm[0]];\nperm = [];\n\
             fn at(t: table, i) -> int {{ return t[i]; }}\nlet y = at(perm, 2);"
    ));
    assert_eq!(
        body_errors("let t = [1, true];"),
        one(mm("int", "bool"), "true")
    );
    assert_eq!(
        body_errors("let t = [1, 2];\nlet x = t[0][1];\nlet y = t[*];"),
        vec![
            (ErrorKind::TableIndex { name: s("t") }, s("t[0][1]")),
            (ErrorKind::TableIndex { name: s("t") }, s("t[*]")),
        ]
    );
    assert_eq!(
        body_errors("let t = [1, 2];\nlet b = t == t;"),
        vec![
            (mm("int or bool", "table"), s("t")),
            (mm("int or bool", "table"), s("t")),
        ]
    );
}

#[test]
fn several_sources() {
    ok(&format!(
        "{H}reduce input[0][0], input[1][0], input[2][0] -> output[3][0];"
    ));
    assert_eq!(
        body_errors("copy input[0][0], input[1][0], input[2][0] -> output[3][0];"),
        one(ErrorKind::CopySeveralSources, "input[1][0], input[2][0]")
    );
    assert_eq!(
        body_errors("reduce input[0][0], 1 -> output[3][0];"),
        one(mm("chunk", "int"), "1")
    );
}

#[test]
fn statement_keywords_as_names() {
    ok(&format!(
        "{H}let step = 2;\nlet copy = step + 1;\ncopy = copy * 2;\nlet reduce = copy;\n\
             for step in 0..n step step {{ copy input[step][0] -> output[(step + 1) % n]; }}\n\
             fn f(copy) -> int {{ return copy; }}"
    ));
    assert_eq!(
        errors(&format!(
            "{H}fn copy(x) {{}}\nfn reduce() -> int {{ return 1; }}"
        )),
        vec![
            (
                ErrorKind::StatementKeywordAsFunction { name: s("copy") },
                s("copy")
            ),
            (
                ErrorKind::StatementKeywordAsFunction { name: s("reduce") },
                s("reduce")
            ),
        ]
    );
}

#[test]
fn duplicate_params() {
    let e = body_errors("fn f(a, b: bool, a) {}\nfn g(a) { let a = 1; }");
    assert_eq!(
        e,
        vec![
            (ErrorKind::Duplicate { name: s("a") }, s("a")),
            (ErrorKind::Duplicate { name: s("a") }, s("a")),
        ]
    );
}

#[test]
fn unknown_names_and_functions() {
    let src = format!("{H}let count = 1;\nlet y = cont + 1;\nlet z = mn(1, 2);\n");
    assert_eq!(
        errors(&src),
        vec![
            (ErrorKind::UnknownName { name: s("cont") }, s("cont")),
            (ErrorKind::UnknownFunction { name: s("mn") }, s("mn")),
        ]
    );
    let n = notes(&src);
    assert!(n.contains(&s("did you mean `count`?")), "{n:?}");
    assert!(n.contains(&s("did you mean `min`?")), "{n:?}");
}

#[test]
fn variables_and_functions_confused() {
    let src = format!("{H}let x = 1;\nlet y = x(2);\nlet z = min + 1;\n");
    assert_eq!(
        errors(&src),
        vec![
            (ErrorKind::UnknownFunction { name: s("x") }, s("x")),
            (ErrorKind::UnknownName { name: s("min") }, s("min")),
        ]
    );
    let n = notes(&src);
    assert!(n.contains(&s("`x` is a variable, not a function")), "{n:?}");
    assert!(
        n.contains(&s("`min` is a function; call it as `min(...)`")),
        "{n:?}"
    );
}

#[test]
fn assignments() {
    let not = |name: &str, why: &str| ErrorKind::NotAssignable {
        name: s(name),
        why: s(why),
    };
    let e = body_errors(
        "for i in 0..n { i = 1; }\nfn f(p) { p = 1; }\nn = 1;\nroot = 2;\ninput = output;\n\
             let x = 1;\nx = true;\nq = 1;\nlet b = input;\nb = output;",
    );
    assert_eq!(
        e,
        vec![
            (not("i", "it is a loop variable"), s("i")),
            (not("p", "it is a function parameter"), s("p")),
            (not("n", "it is the rank count"), s("n")),
            (not("root", "it is a built-in constant"), s("root")),
            (not("input", "it is a buffer"), s("input")),
            (mm("int", "bool"), s("true")),
            (ErrorKind::UnknownName { name: s("q") }, s("q")),
        ]
    );
    // Assigning an outer `let` from an inner block is fine.
    ok(&format!(
        "{H}let acc = 0;\nfor i in 0..n {{ acc = acc + i; }}"
    ));
}

// ----- types -----

#[test]
fn operator_types() {
    let e = body_errors(
        "let a = 1 + true;\nlet b = not 1;\nlet c = -true;\nlet d = 1 == false;\n\
             let e = input[0][0] != 1;\nlet f = 1 < true;\nlet g = true and 1;\nlet h = ~false;\n\
             let i = (1 << 2) - (true | 1);",
    );
    assert_eq!(
        e,
        vec![
            (mm("int", "bool"), s("true")),
            (mm("bool", "int"), s("1")),
            (mm("int", "bool"), s("true")),
            (mm("int", "bool"), s("false")),
            (mm("int or bool", "chunk"), s("input[0][0]")),
            (mm("int", "bool"), s("true")),
            (mm("bool", "int"), s("1")),
            (mm("int", "bool"), s("false")),
            (mm("int", "bool"), s("true")),
        ]
    );
    // Result types are the operator's: `1 < 2` is a bool.
    assert_eq!(
        body_errors("let x = (1 < 2) + 1;"),
        one(mm("int", "bool"), "(1 < 2)")
    );
    ok(&format!(
        "{H}let x = (1 < 2) == (true or false) and 1 != 2;"
    ));
}

#[test]
fn condition_and_bound_types() {
    let e = body_errors(
        "if 1 { }\nwhile n { }\nassert 0;\nfor i in true..n step false { }\nif true { } else if 2 { }",
    );
    assert_eq!(
        e,
        vec![
            (mm("bool", "int"), s("1")),
            (mm("bool", "int"), s("n")),
            (mm("bool", "int"), s("0")),
            (mm("int", "bool"), s("true")),
            (mm("int", "bool"), s("false")),
            (mm("bool", "int"), s("2")),
        ]
    );
}

#[test]
fn errors_do_not_cascade() {
    let e = body_errors(
        "let x = y + 1;\nlet z = x + true;\nif nope { }\nlet w = (zz * 2) == false;\n\
             let c = f(1);\nlet d = c + 1;",
    );
    assert_eq!(
        e,
        vec![
            (ErrorKind::UnknownName { name: s("y") }, s("y")),
            (mm("int", "bool"), s("true")),
            (ErrorKind::UnknownName { name: s("nope") }, s("nope")),
            (ErrorKind::UnknownName { name: s("zz") }, s("zz")),
            (ErrorKind::UnknownFunction { name: s("f") }, s("f")),
        ]
    );
    // A badly typed operation has no type either.
    assert_eq!(
        body_errors(
            "fn g(c: chunk) {}
g(not input[0][0]);
let b = (1 + true) == false;"
        ),
        vec![
            (mm("bool", "chunk"), s("input[0][0]")),
            (mm("int", "bool"), s("true")),
        ]
    );
    // With the wrong number of arguments, their types are not compared by position.
    assert_eq!(
        body_errors(
            "fn h(a: bool, b: chunk) {}
h(1);"
        ),
        one(
            ErrorKind::Arity {
                name: s("h"),
                expected: 2,
                found: 1
            },
            "h(1)"
        )
    );
    // An unknown parameter type does not cascade into its uses.
    assert_eq!(
        body_errors("fn g(x: integer) -> int { return x + 1; }\nlet v = g(true);"),
        one(ErrorKind::UnknownType { name: s("integer") }, "integer")
    );
}

// ----- calls -----

#[test]
fn arity() {
    let ar = |name: &str, expected, found| ErrorKind::Arity {
        name: s(name),
        expected,
        found,
    };
    assert_eq!(
        body_errors("let a = min(1);\nlet b = log2(1, 2);\nfn f(x, y) {}\nf(1);"),
        vec![
            (ar("min", 2, 1), s("min(1)")),
            (ar("log2", 1, 2), s("log2(1, 2)")),
            (ar("f", 2, 1), s("f(1)")),
        ]
    );
}

#[test]
fn argument_types() {
    let e = body_errors(
        "fn f(b: bool, c: chunk, buf: buffer) {}\nf(1, input[0][0], output);\n\
             f(true, 3, input[0][0]);\nlet x = abs(true);",
    );
    assert_eq!(
        e,
        vec![
            (mm("bool", "int"), s("1")),
            (mm("chunk", "int"), s("3")),
            (mm("buffer", "chunk"), s("input[0][0]")),
            (mm("int", "bool"), s("true")),
        ]
    );
}

#[test]
fn no_value_and_unused_value() {
    let e = body_errors(
        "fn v() {}\nfn r() -> int { return 1; }\nlet x = v() + 1;\nr();\nmax(1, 2);\nv();",
    );
    assert_eq!(
        e,
        vec![
            (ErrorKind::NoValue { name: s("v") }, s("v()")),
            (ErrorKind::UnusedValue { name: s("r") }, s("r()")),
            (ErrorKind::UnusedValue { name: s("max") }, s("max(1, 2)")),
        ]
    );
}

// ----- functions -----

#[test]
fn unknown_types() {
    let src = format!("{H}fn f(a: it, b: chunk) -> bol {{ return true; }}");
    assert_eq!(
        errors(&src),
        vec![
            (ErrorKind::UnknownType { name: s("it") }, s("it")),
            (ErrorKind::UnknownType { name: s("bol") }, s("bol")),
        ]
    );
    let n = notes(&src);
    assert!(n.contains(&s("did you mean `int`?")), "{n:?}");
    assert!(n.contains(&s("did you mean `bool`?")), "{n:?}");
}

#[test]
fn return_types() {
    let e = body_errors(
        "fn a() -> int { return true; }\nfn b() -> bool { return; }\nfn c() { return 1; }\n\
             fn d() { return; }\nfn e() -> chunk { return input[0][0]; }",
    );
    assert_eq!(
        e,
        vec![
            (mm("int", "bool"), s("true")),
            (mm("bool", "nothing"), s("return;")),
            (mm("nothing", "int"), s("1")),
        ]
    );
    assert_eq!(
        body_errors("return 1;\nif true { return; }"),
        vec![
            (ErrorKind::ReturnOutsideFunction, s("return")),
            (ErrorKind::ReturnOutsideFunction, s("return")),
        ]
    );
}

#[test]
fn missing_return() {
    let mr = |name: &str| (ErrorKind::MissingReturn { name: s(name) }, s(name));
    let e = body_errors(
        "fn a(x) -> int { if x > 0 { return 1; } }\n\
             fn b(x) -> int { for i in 0..x { return i; } }\n\
             fn c(x) -> int { while true { return 1; } }\n\
             fn d(x) -> int { if x > 0 { return 1; } else if x < 0 { return 2; } }\n\
             fn e(x) -> int { let y = 1; }",
    );
    assert_eq!(e, vec![mr("a"), mr("b"), mr("c"), mr("d"), mr("e")]);
    ok(&format!(
        "{H}fn a(x) -> int {{ if x > 0 {{ return 1; }} else if x < 0 {{ return 2; }} else {{ return 3; }} }}\n\
             fn b(x) -> int {{ for i in 0..x {{ }} return 0; }}\n\
             fn c(x) -> int {{ if x > 0 {{ return 1; }} return 0; }}\n\
             fn d(x) -> int {{ if true {{ if x > 0 {{ return 1; }} else {{ return 0; }} }} else {{ return 2; }} }}"
    ));
}

#[test]
fn nested_function() {
    let src = format!(
        "{H}if true {{\n    fn inner(x) -> int {{ return x + true; }}\n}}\nlet y = inner(1);"
    );
    assert_eq!(
        errors(&src),
        vec![
            (ErrorKind::NestedFunction, s("fn inner")),
            (mm("int", "bool"), s("true")),
        ]
    );
}

#[test]
fn duplicate_functions() {
    let src = format!("{H}fn f() {{}}\nfn f(x) {{}}\nfn min(a, b) -> int {{ return a; }}");
    assert_eq!(
        errors(&src),
        vec![
            (ErrorKind::Duplicate { name: s("f") }, s("f")),
            (ErrorKind::Duplicate { name: s("min") }, s("min")),
        ]
    );
    let ds = run(&src).expect_err("errors");
    assert_eq!(ds[0].labels[0].message, "first defined here");
    assert_eq!(ds[0].labels[0].span.start as usize, H.len() + 3);
}

#[test]
fn functions_may_be_called_before_definition() {
    ok(&format!(
        "{H}later(1);\nfn later(x) {{ let y = sooner(x); }}\nfn sooner(x) -> int {{ return x; }}"
    ));
}

// ----- chunks and transfers -----

#[test]
fn chunk_references() {
    let e = body_errors(
        "let a = inpt[0][0];\nlet x = 1;\nlet b = x[0][0];\nlet c = input[true][0];\n\
             let d = input[0][0..false];\nlet e = input[0];\ncopy input[0][0] -> output[true];",
    );
    assert_eq!(
        e,
        vec![
            (ErrorKind::UnknownName { name: s("inpt") }, s("inpt")),
            (mm("buffer", "int"), s("x")),
            (mm("int", "bool"), s("true")),
            (mm("int", "bool"), s("false")),
            (
                ErrorKind::MissingIndex { buffer: s("input") },
                s("input[0]")
            ),
            (mm("int", "bool"), s("true")),
        ]
    );
    assert!(notes(&format!("{H}let a = inpt[0][0];")).contains(&s("did you mean `input`?")));
    // Buffers as values, parameters and `let`s.
    ok(&format!(
        "{H}fn f(b: buffer) -> chunk {{ return b[0][*]; }}\nlet b = output;\nlet c = b[0..n][1];\ncopy f(input) -> b[0];"
    ));
}

#[test]
fn missing_index_outside_destinations() {
    let e = body_errors(
        "copy input[0] -> output[1];\nassert input[0] == 1;\nfn f(c: chunk) {}\nf(input[0]);",
    );
    let mi = (
        ErrorKind::MissingIndex { buffer: s("input") },
        s("input[0]"),
    );
    assert_eq!(
        e,
        vec![
            mi.clone(),
            mi.clone(),
            (mm("int or bool", "chunk"), s("input[0]")),
            mi
        ]
    );
}

#[test]
fn transfer_operands_are_chunks() {
    let e = body_errors(
        "copy 3 -> output[0];\nreduce input[0][0] -> true;\nlet b = input;\ncopy b -> output[0][0];",
    );
    assert_eq!(
        e,
        vec![
            (mm("chunk", "int"), s("3")),
            (mm("chunk", "bool"), s("true")),
            (mm("chunk", "buffer"), s("b")),
        ]
    );
}

#[test]
fn group_transfer_shapes() {
    let e = body_errors(
        "reduce input[*][0] -> output[0..2][0];\ncopy input[0..n][0] -> output[0];\n\
             copy (input[*][0]) -> (output[*]);",
    );
    assert_eq!(
        e,
        vec![
            (ErrorKind::ManyToMany, s("output[0..2][0]")),
            (ErrorKind::CopyManyToOne, s("input[0..n][0]")),
            (ErrorKind::ManyToMany, s("(output[*])")),
        ]
    );
    ok(&format!(
        "{H}reduce input[*][0] -> output[0] via switch;\ncopy input[0][0] -> output[1..n] via switch;\n\
             let c = input[*][0];\ncopy c -> output[0];"
    ));
}

#[test]
fn channel_kinds() {
    let src = format!("{H}copy input[0][0] -> output[1] via nvlnk;");
    assert_eq!(
        errors(&src),
        one(ErrorKind::UnknownChannelKind { name: s("nvlnk") }, "nvlnk")
    );
    assert!(notes(&src).contains(&s("did you mean `nvlink`?")));
}

#[test]
fn transfer_hints() {
    let src = format!(
        "{H}copy input[0][0] -> output[1] with instances 2, pipelin 2, channel 1, channel 2, protocol fast, pipeline true;"
    );
    assert_eq!(
        errors(&src),
        vec![
            (
                ErrorKind::HintNotAllowedHere {
                    name: s("instances")
                },
                s("instances")
            ),
            (ErrorKind::UnknownHint { name: s("pipelin") }, s("pipelin")),
            (
                ErrorKind::DuplicateHint { name: s("channel") },
                s("channel")
            ),
            (ErrorKind::UnknownProtocol { name: s("fast") }, s("fast")),
            (mm("int", "bool"), s("true")),
        ]
    );
    assert!(notes(&src).contains(&s("did you mean `pipeline`?")));
}

// ----- ensure -----

#[test]
fn ensure_allows_only_control_flow_and_expect() {
    let src = r#"collective custom t(n) {
    chunks 1;
    ensure {
        copy input[0][0] -> output[1];
        for r in 0..n { reduce input[r][0] -> output[0]; }
        side(1);
        let x = moves(1);
        return;
        expect output[0][0] == 1, input[0][0];
    }
}
fn side(x) {}
fn moves(x) -> int { return helper(x); }
fn helper(x) -> int { copy input[0][0] -> output[x]; return x; }
"#;
    let nie = |what: &str| ErrorKind::NotAllowedInEnsure { what: s(what) };
    assert_eq!(
        errors(src),
        vec![
            (nie("copy"), s("copy")),
            (nie("reduce"), s("reduce")),
            (nie("side(...)"), s("side(1)")),
            (nie("moves(...)"), s("moves(1)")),
            (ErrorKind::ReturnOutsideFunction, s("return")),
            (mm("chunk", "int"), s("1")),
        ]
    );
    let ds = run(src).expect_err("errors");
    let at = &ds[3].labels[0];
    assert_eq!(&src[at.span.range()], "copy input[0][0] -> output[x];");
}

#[test]
fn expect_outside_ensure() {
    assert_eq!(
        body_errors("expect output[0][0] == input[0][0];\nfn f() { expect output[0][0] == 1; }"),
        vec![
            (ErrorKind::ExpectOutsideEnsure, s("expect")),
            (ErrorKind::ExpectOutsideEnsure, s("expect")),
            (mm("chunk", "int"), s("1")),
        ]
    );
}

// ----- robustness -----

#[test]
fn diagnostics_are_in_source_order() {
    // Function bodies are checked before the body, but errors come out sorted.
    let src = format!("{H}let a = true + 1;\nfn f() -> int {{ return false; }}\nlet b = x;");
    let starts: Vec<u32> = run(&src)
        .expect_err("errors")
        .iter()
        .map(|d| d.span.start)
        .collect();
    assert_eq!(starts.len(), 3);
    assert!(starts.windows(2).all(|w| w[0] <= w[1]), "{starts:?}");
}

#[test]
fn every_diagnostic_has_a_label() {
    let src = format!(
        "{H}let a = true + 1;\nfn f(x: foo) -> int {{ }}\nlet b = x;\ncopy 1 -> output[*] via q with z 1;\nf();"
    );
    for d in run(&src).expect_err("errors") {
        assert!(!d.label.is_empty(), "{d:?}");
    }
}

#[test]
fn deep_nesting_does_not_overflow() {
    let depth = 250;
    let expr = format!("{}1{}", "(".repeat(depth), ")".repeat(depth));
    ok(&format!("{H}let x = {expr} + 1;"));
    let blocks = format!(
        "{}let y = 1;{}",
        "if true { ".repeat(depth),
        " }".repeat(depth)
    );
    ok(&format!("{H}{blocks}"));
    let fun = format!(
        "{H}fn f() -> int {{ {}return 1;{} }}",
        "if true { ".repeat(depth),
        " } else { return 0; }".repeat(depth)
    );
    ok(&fun);
    let negs = format!(
        "{H}copy input[0][0] -> output[1] with channel {}1;",
        "-".repeat(depth)
    );
    assert!(run(&negs).is_ok());
}
