//! Unit tests of the formatter: canonical layout, comments kept, and parentheses exactly
//! where a tree needs them to read back as itself.

use super::*;
use crate::dump::dump;
use crate::parser::parse;
use crate::source::SourceFile;

fn parsed(src: &str) -> Program {
    match parse(src) {
        Ok(p) => p,
        Err(e) => panic!("does not parse: {e:?}\n---\n{src}"),
    }
}

fn tree(src: &str) -> String {
    dump(&SourceFile::new("t", src), &parsed(src), false)
}

/// Formats `src` and checks every invariant of the module doc.
fn fmt(src: &str) -> String {
    let out = format(src, &parsed(src));
    assert!(
        out.ends_with('\n') && !out.ends_with("\n\n"),
        "ending:\n{out}"
    );
    assert!(!out.starts_with('\n'), "leading blank line:\n{out}");
    let again = format(&out, &parsed(&out));
    assert_eq!(again, out, "not idempotent; first output:\n{out}");
    assert_eq!(tree(&out), tree(src), "tree changed; output:\n{out}");
    let before = comments::scan(src);
    let after = comments::scan(&out);
    assert_eq!(before.len(), after.len(), "comment count; output:\n{out}");
    for (b, a) in before.iter().zip(&after) {
        let b = normalize_comment(&src[b.span.range()], b.line);
        assert_eq!(b, &out[a.span.range()], "comment changed; output:\n{out}");
    }
    for line in out.lines() {
        assert_eq!(line, line.trim_end(), "trailing whitespace:\n{out}");
    }
    out
}

const EVERYTHING: &str = "\
// Every construct.
collective custom everything(n) {
    chunks 2 * n;
    inplace;
    outofplace;
    ranks n >= 2 and is_pow2(n);
    topology nvswitch, hgx;
    needs switch, net;
    scratch tmp[n + 1];
    scratch other[0x1F];
    instances 2;
    pipeline 1_000;
    protocol ll;
    channel 3;
    ensure {
        for r in 0..n {
            expect output[r][0] == input[*][0], input[0..n][1];
        }
    }
}

fn parent(r, c: chunk, b: buffer, ok: bool) -> int {
    return (r - 1) / 2;
}

fn nothing() {
    return;
}

let x = -1 + ~2 * 3;
x = not x == 1 or x < 2 and true != false;
copy input[0][0] -> input[1];
reduce input[*][1] -> input[1][1] via switch;
copy input[0..2][0..1] -> scratch_buf[x] via nvlink with channel 1, pipeline 2, protocol ll;
for s in n - 1..0 step -1 {
    if s % 2 == 0 {
        assert s >= 0;
    } else if s << 1 > 4 | 1 {
        nothing();
    } else {
        while false {}
    }
    fn inner() {}
}
if true {}
";

#[test]
fn everything_is_already_canonical() {
    assert_eq!(fmt(EVERYTHING), EVERYTHING);
}

const MESSY: &str = "collective   allreduce ring ( n ){chunks n;inplace ;ranks n>=2;}\n\
        for s in 0 .. n-1 step 2{ for r in 0..n { reduce input [r][(r-s-1)%n]->input[(r+1)%n] ; } }\n\
        fn f(a,b:bool)->int{if b{return a;}else if not b{return -a;}else{return 0x1f;}}\n\
        f ( 1 , true );";

#[test]
fn the_reference_example_is_canonical() {
    let doc = include_str!("../../LANGUAGE.md");
    let start = doc.find("```\n// Ring allreduce").expect("example") + 4;
    let len = doc[start..].find("```").expect("end");
    let example = &doc[start..start + len];
    assert_eq!(fmt(example), example);
}

#[test]
fn messy_layout_becomes_canonical() {
    let src = MESSY;
    let want = "\
collective allreduce ring(n) {
    chunks n;
    inplace;
    ranks n >= 2;
}
for s in 0..n - 1 step 2 {
    for r in 0..n {
        reduce input[r][(r - s - 1) % n] -> input[(r + 1) % n];
    }
}
fn f(a, b: bool) -> int {
    if b {
        return a;
    } else if not b {
        return -a;
    } else {
        return 0x1f;
    }
}
f(1, true);
";
    assert_eq!(fmt(src), want);
}

#[test]
fn comments_anywhere_survive() {
    // Comments inserted at random places between tokens of a program using every
    // construct: every invariant of `fmt` must hold.
    let kinds = [
        " /* c */",
        " // c\n",
        "\n// c\n",
        "\n\n/* c\n   more */\n",
        "\n  /* c */  ",
    ];
    let mut rng = Rng(11);
    for base in [EVERYTHING, MESSY] {
        // Whitespace and punctuation (every insertion starts with whitespace), outside
        // the comment on the first line of EVERYTHING.
        let from = if base.starts_with("//") {
            base.find('\n').unwrap_or(0)
        } else {
            0
        };
        let spaces: Vec<usize> = base
            .char_indices()
            .filter(|&(i, c)| (c.is_whitespace() || ";,{}()[]".contains(c)) && i >= from)
            .map(|(i, _)| i)
            .collect();
        for _ in 0..300 {
            let mut src = base.to_string();
            let mut at: Vec<usize> = (0..1 + rng.below(3))
                .map(|_| spaces[rng.below(spaces.len() as u64) as usize])
                .collect();
            at.sort_unstable();
            for &i in at.iter().rev() {
                src.insert_str(i, kinds[rng.below(kinds.len() as u64) as usize]);
            }
            fmt(&src);
        }
    }
}

#[test]
fn blank_lines_are_kept_once_and_never_after_open_or_before_close() {
    let src = "\n\ncollective allreduce r(n) {\n\n    chunks 1;\n\n\n    inplace;\n\n}\n\n\n\
                   let a = 1;\nlet b = 2;\n\n\nfor i in 0..n {\n\n    a = i;\n\n}\n\n";
    let want = "collective allreduce r(n) {\n    chunks 1;\n\n    inplace;\n}\n\n\
                    let a = 1;\nlet b = 2;\n\nfor i in 0..n {\n    a = i;\n}\n";
    assert_eq!(fmt(src), want);
}

#[test]
fn comments_in_odd_places() {
    let src = "\
/* leading */ collective allreduce r(n) { // after open
    chunks /* in item */ n;
    // before close
}
let x = 1 + /* inside */ 2; // trailing
let y = f(
    // own line inside an expression
    x,
    2 // line comment inside
);
if x { /* after brace */
    x = 2;
    // before close of then
} // between brace and else
else /* between else and if */ if y {
    /* alone */
} /* own line before else */
else {}
for i in 0..n /* head */ { x = i; } /* after */ /* again */
while x {
    x = 0; /* a /* nested */ block */
}
// end";
    let want = "\
/* leading */
collective allreduce r(n) { // after open
    chunks n; /* in item */
    // before close
}
let x = 1 + 2; /* inside */ // trailing
let y = f(x, 2);
// own line inside an expression
// line comment inside
if x { /* after brace */
    x = 2;
    // before close of then
} else if y { // between brace and else
    /* between else and if */
    /* alone */
} else {} /* own line before else */
for i in 0..n { /* head */
    x = i;
} /* after */ /* again */
while x {
    x = 0; /* a /* nested */ block */
}
// end
";
    assert_eq!(fmt(src), want);
}

#[test]
fn line_comment_is_never_followed_on_its_line() {
    let src = "collective allreduce r(n) { chunks 1; }\nlet x = 1 // a\n + 2; /* b */ /* c\n  d */ let z = 3;\n";
    let want = "collective allreduce r(n) {\n    chunks 1;\n}\nlet x = 1 + 2; // a\n/* b */ /* c\n  d */\nlet z = 3;\n";
    assert_eq!(fmt(src), want);
}

#[test]
fn blank_lines_around_comments() {
    let src = "collective allreduce r(n) {\n    chunks 1;\n}\n\n\n// about a\n\nlet a = 1;\n// about b\nlet b = 2; // b\n\n// c1\n\n\n// c2\nlet c = 3;\n\n// trailing own line\n\n";
    let want = "collective allreduce r(n) {\n    chunks 1;\n}\n\n// about a\n\nlet a = 1;\n// about b\nlet b = 2; // b\n\n// c1\n\n// c2\nlet c = 3;\n\n// trailing own line\n";
    assert_eq!(fmt(src), want);
}

#[test]
fn empty_blocks_and_comment_only_blocks() {
    let src = "collective allreduce r(n) {}\nfn f() {   }\nfn g() { // why\n}\nwhile true {\n\n  /* later */\n\n}\n";
    let want = "collective allreduce r(n) {}\nfn f() {}\nfn g() { // why\n}\nwhile true {\n    /* later */\n}\n";
    assert_eq!(fmt(src), want);
}

#[test]
fn header_only_files() {
    assert_eq!(
        fmt("collective allgather g(n){chunks 1;}"),
        "collective allgather g(n) {\n    chunks 1;\n}\n"
    );
    assert_eq!(
        fmt("collective allgather g(n){chunks 1;} // end"),
        "collective allgather g(n) {\n    chunks 1;\n} // end\n"
    );
    assert_eq!(
        fmt("collective x y(a, b) /* no items */ {}"),
        "collective x y(a, b) {} /* no items */\n"
    );
    assert_eq!(fmt("// only a comment"), "// only a comment\n");
}

#[test]
fn integer_literals_are_kept() {
    let src = "collective allreduce r(n) { chunks 0x1F; }\nlet a = 1_000 + 0X_ff + 007;\n";
    let out = fmt(src);
    assert!(out.contains("chunks 0x1F;"), "{out}");
    assert!(out.contains("let a = 1_000 + 0X_ff + 007;"), "{out}");
}

#[test]
fn new_forms_are_canonical() {
    let src = "collective allreduce t(n) {\n    param trees = 2;\n    chunks trees;\n}\n\n\
                   let perm = [0, 2, 1, 3];\nlet e = [];\nlet x = if n > 2 then perm[1] else -1;\n\
                   reduce input[0][0], input[1][0] -> output[2][0];\n";
    assert_eq!(fmt(src), src);
    assert_eq!(
        fmt("let x=[ 1 ,2 ];\nreduce a[0][0] ,b[0][0]->c[0][0];\nlet y=if a then[1]else[ ];\n"),
        "let x = [1, 2];\nreduce a[0][0], b[0][0] -> c[0][0];\nlet y = if a then [1] else [];\n"
    );
}

#[test]
fn parentheses_are_kept_as_written() {
    let src = "let a = ((1)) + (2 * 3) - (-(x));\nlet b = not (a == b);\n";
    assert_eq!(fmt(src), src);
}

#[test]
fn precedence_corner_cases_round_trip() {
    let src = "\
let a = a + not b and c;
let b = a == not b == c;
let c = -not a;
let d = - -a - -1;
let e = not not a;
let f = a - b - c;
let g = a or b and c or d;
expect (not a) == b;
expect -a[0] == b, c;
";
    assert_eq!(fmt(src), src);
}

#[test]
fn crlf_and_tabs() {
    let src = "collective allreduce r(n) {\r\n\tchunks 1; // x  \r\n}\r\n\r\nlet a = 1;\r\n";
    let want = "collective allreduce r(n) {\n    chunks 1; // x\n}\n\nlet a = 1;\n";
    assert_eq!(fmt(src), want);
}

#[test]
fn deep_nesting_does_not_overflow() {
    // Blocks and parentheses share the parser's nesting limit.
    let depth = 120;
    let mut src = String::new();
    for _ in 0..depth {
        src.push_str("if a {\n");
    }
    src.push_str(&format!(
        "let x = {}1{};\n",
        "(".repeat(120),
        ")".repeat(120)
    ));
    src.push_str(&"}\n".repeat(depth));
    let out = fmt(&src);
    assert!(out.contains(&format!(
        "{}let x = {}1",
        "    ".repeat(depth),
        "(".repeat(120)
    )));
    let long = format!("let x = 1{};\n", " + 1".repeat(250));
    assert_eq!(fmt(&long), long);
}

// ----- hand-built trees -----

fn sp() -> Span {
    Span::default()
}

fn ex(kind: ExprKind) -> Expr {
    Expr { kind, span: sp() }
}

fn name(s: &str) -> Ident {
    Ident {
        name: s.to_string(),
        span: sp(),
    }
}

fn bin(op: BinOp, l: Expr, r: Expr) -> Expr {
    ex(ExprKind::Binary(op, Box::new(l), Box::new(r)))
}

fn un(op: UnOp, x: Expr) -> Expr {
    ex(ExprKind::Unary(op, Box::new(x)))
}

fn ite(c: Expr, a: Expr, b: Expr) -> Expr {
    ex(ExprKind::If {
        cond: Box::new(c),
        then: Box::new(a),
        els: Box::new(b),
    })
}

fn program(stmts: Vec<StmtKind>) -> Program {
    Program {
        items: stmts
            .into_iter()
            .map(|kind| Item::Stmt(Stmt { kind, span: sp() }))
            .collect(),
        span: sp(),
    }
}

/// Formats a hand-built tree and checks it reads back as the same tree.
fn round_trip_built(p: &Program) -> String {
    let out = format("", p);
    let back = parsed(&out);
    let empty = SourceFile::new("t", "");
    assert_eq!(
        dump(&empty, &back, false),
        dump(&empty, p, false),
        "output:\n{out}"
    );
    assert_eq!(format(&out, &back), out);
    out
}

#[test]
fn hand_built_trees_get_the_parentheses_they_need() {
    let [a, b, c] = ["a", "b", "c"].map(|s| ex(ExprKind::Name(name(s))));
    let cases = vec![
        (
            bin(BinOp::Mul, bin(BinOp::Add, a.clone(), b.clone()), c.clone()),
            "(a + b) * c",
        ),
        (
            bin(BinOp::Sub, a.clone(), bin(BinOp::Sub, b.clone(), c.clone())),
            "a - (b - c)",
        ),
        (
            bin(BinOp::Eq, bin(BinOp::Lt, a.clone(), b.clone()), c.clone()),
            "(a < b) == c",
        ),
        (
            bin(BinOp::Eq, un(UnOp::Not, a.clone()), b.clone()),
            "(not a) == b",
        ),
        (
            bin(BinOp::And, un(UnOp::Not, a.clone()), b.clone()),
            "not a and b",
        ),
        (
            un(UnOp::Neg, bin(BinOp::Add, a.clone(), b.clone())),
            "-(a + b)",
        ),
        (
            bin(BinOp::Add, ite(a.clone(), b.clone(), c.clone()), a.clone()),
            "(if a then b else c) + a",
        ),
        (
            bin(BinOp::Add, a.clone(), ite(a.clone(), b.clone(), c.clone())),
            "a + if a then b else c",
        ),
        (
            ite(a.clone(), ite(b.clone(), c.clone(), a.clone()), b.clone()),
            "if a then if b then c else a else b",
        ),
        (
            bin(
                BinOp::Mul,
                un(UnOp::Neg, un(UnOp::Not, a.clone())),
                b.clone(),
            ),
            "-(not a) * b",
        ),
        (
            un(UnOp::Not, bin(BinOp::Or, a.clone(), b.clone())),
            "not (a or b)",
        ),
        (
            bin(BinOp::Add, a.clone(), un(UnOp::Not, b.clone())),
            "a + not b",
        ),
        (
            bin(
                BinOp::BitAnd,
                bin(BinOp::Add, a.clone(), un(UnOp::Not, b.clone())),
                c.clone(),
            ),
            "a + (not b) & c",
        ),
        (ex(ExprKind::Int(31)), "31"),
    ];
    for (e, want) in cases {
        let p = program(vec![StmtKind::Let {
            name: name("x"),
            value: e,
        }]);
        assert_eq!(round_trip_built(&p), format!("let x = {want};\n"));
    }
    let p = program(vec![StmtKind::Expect {
        dst: un(UnOp::Not, a.clone()),
        srcs: vec![bin(BinOp::Eq, a.clone(), b.clone())],
    }]);
    assert_eq!(round_trip_built(&p), "expect (not a) == a == b;\n");
}

/// A small deterministic generator (no dependency needed).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

const OPS: [BinOp; 18] = [
    BinOp::Or,
    BinOp::And,
    BinOp::Eq,
    BinOp::Ne,
    BinOp::Lt,
    BinOp::Le,
    BinOp::Gt,
    BinOp::Ge,
    BinOp::BitOr,
    BinOp::BitXor,
    BinOp::BitAnd,
    BinOp::Shl,
    BinOp::Shr,
    BinOp::Add,
    BinOp::Sub,
    BinOp::Mul,
    BinOp::Div,
    BinOp::Rem,
];

fn random_expr(rng: &mut Rng, depth: u32) -> Expr {
    if depth == 0 || rng.below(5) == 0 {
        return match rng.below(3) {
            0 => ex(ExprKind::Int(rng.below(100) as i64)),
            1 => ex(ExprKind::Bool(rng.below(2) == 0)),
            _ => ex(ExprKind::Name(name("v"))),
        };
    }
    match rng.below(10) {
        0 => un(
            [UnOp::Neg, UnOp::BitNot, UnOp::Not][rng.below(3) as usize],
            random_expr(rng, depth - 1),
        ),
        1 => ex(ExprKind::Paren(Box::new(random_expr(rng, depth - 1)))),
        2 => ex(ExprKind::Call {
            func: name("f"),
            args: vec![random_expr(rng, depth - 1), random_expr(rng, depth - 1)],
        }),
        _ => bin(
            OPS[rng.below(OPS.len() as u64) as usize],
            random_expr(rng, depth - 1),
            random_expr(rng, depth - 1),
        ),
    }
}

#[test]
fn random_hand_built_expressions_round_trip() {
    let mut rng = Rng(7);
    for _ in 0..2000 {
        let e = random_expr(&mut rng, 5);
        let dst = random_expr(&mut rng, 3);
        let p = program(vec![
            StmtKind::Let {
                name: name("x"),
                value: e,
            },
            StmtKind::Expect {
                dst,
                srcs: vec![random_expr(&mut rng, 3)],
            },
        ]);
        round_trip_built(&p);
    }
}
