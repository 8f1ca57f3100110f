//! A readable dump of the whole syntax tree, for snapshot tests.
//!
//! One node per line, children indented by two spaces. Items, header items and statements
//! end in ` @line:col` (the start of their span) when `spans` is set. Expressions are
//! compact S-expressions on one line: `(int 3)`, `(true)`, `(name x)`, `(+ a b)`,
//! `(neg x)`, `(bitnot x)`, `(not x)`, `(call f a b)`,
//! `(chunk input [(name r)] [(range (int 0) (int 2))])` with `[*]` for every rank and
//! `(index omitted)` for a left-out index (a table read `t[i]` dumps as a chunk reference:
//! the parser does not know types), `(if c a b)` for a conditional, `(table a b)` for a
//! table literal.
//!
//! Invariants: every field of every node appears (an absent optional one as `(none)`, an
//! empty block as `(empty)`), so two trees with the same dump are equal up to spans and
//! parentheses. Parentheses are transparent (the inner expression is dumped) and integers
//! are dumped by value, so `dump(parse(fmt(x)), false) == dump(parse(x), false)` is the
//! formatter's round-trip property.

use crate::ast::*;
use crate::parser::grow;
use crate::source::{SourceFile, Span};
use std::fmt::Write as _;

/// Dumps `program`, parsed from `file`; `spans` adds `@line:col` to statements and items.
pub fn dump(file: &SourceFile, program: &Program, spans: bool) -> String {
    let mut d = Dumper {
        file,
        spans,
        out: String::new(),
    };
    for item in &program.items {
        d.item(item, 0);
    }
    d.out
}

struct Dumper<'a> {
    file: &'a SourceFile,
    spans: bool,
    out: String,
}

impl Dumper<'_> {
    /// One line at `depth`, with the location of `span` when spans are on.
    fn line(&mut self, depth: usize, text: &str, span: Option<Span>) {
        for _ in 0..depth {
            self.out.push_str("  ");
        }
        self.out.push_str(text);
        if let (true, Some(span)) = (self.spans, span) {
            let _ = write!(self.out, " @{}", self.file.line_col(span.start as usize));
        }
        self.out.push('\n');
    }

    /// `label EXPR` at `depth`.
    fn field(&mut self, depth: usize, label: &str, e: &Expr) {
        let text = format!("{label} {}", expr(e));
        self.line(depth, &text, None);
    }

    /// `label` then the statements one level deeper, or `label (empty)`.
    fn block(&mut self, depth: usize, label: &str, b: &Block) {
        if b.stmts.is_empty() {
            self.line(depth, &format!("{label} (empty)"), None);
            return;
        }
        self.line(depth, label, None);
        for s in &b.stmts {
            self.stmt(s, depth + 1);
        }
    }

    fn item(&mut self, item: &Item, depth: usize) {
        match item {
            Item::Collective(h) => self.header(h, depth),
            Item::Function(f) => self.function(f, depth),
            Item::Stmt(s) => self.stmt(s, depth),
        }
    }

    fn header(&mut self, h: &Header, depth: usize) {
        let text = format!(
            "collective {} {}({})",
            h.kind.name,
            h.name.name,
            join_names(&h.params)
        );
        self.line(depth, &text, Some(h.span));
        if h.items.is_empty() {
            self.line(depth + 1, "(empty)", None);
        }
        for item in &h.items {
            self.header_item(item, depth + 1);
        }
    }

    fn header_item(&mut self, item: &HeaderItem, depth: usize) {
        let at = Some(item.span);
        match &item.kind {
            HeaderItemKind::Chunks(e) => {
                self.line(depth, "chunks", at);
                self.line(depth + 1, &expr(e), None);
            }
            HeaderItemKind::InPlace => self.line(depth, "inplace", at),
            HeaderItemKind::OutOfPlace => self.line(depth, "outofplace", at),
            HeaderItemKind::Ranks(e) => {
                self.line(depth, "ranks", at);
                self.line(depth + 1, &expr(e), None);
            }
            HeaderItemKind::Topology(names) => {
                self.line(depth, &format!("topology {}", join_names(names)), at);
            }
            HeaderItemKind::Needs(names) => {
                self.line(depth, &format!("needs {}", join_names(names)), at);
            }
            HeaderItemKind::Scratch { name, size } => {
                self.line(depth, &format!("scratch {}", name.name), at);
                self.field(depth + 1, "size", size);
            }
            HeaderItemKind::Param { name, default } => {
                self.line(depth, &format!("param {}", name.name), at);
                self.field(depth + 1, "default", default);
            }
            HeaderItemKind::Hint(h) => {
                self.line(depth, &format!("hint {}", h.name.name), at);
                self.line(depth + 1, &expr(&h.value), None);
            }
            HeaderItemKind::Ensure(b) => {
                self.line(depth, "ensure", at);
                self.block(depth + 1, "body", b);
            }
        }
    }

    fn function(&mut self, f: &Function, depth: usize) {
        self.line(depth, &format!("fn {}", f.name.name), Some(f.span));
        if f.params.is_empty() {
            self.line(depth + 1, "params (none)", None);
        } else {
            self.line(depth + 1, "params", None);
            for p in &f.params {
                let text = match &p.ty {
                    Some(t) => format!("{}: {}", p.name.name, t.name.name),
                    None => format!("{}: (none)", p.name.name),
                };
                self.line(depth + 2, &text, None);
            }
        }
        let ret = match &f.ret {
            Some(t) => format!("returns {}", t.name.name),
            None => "returns (none)".to_string(),
        };
        self.line(depth + 1, &ret, None);
        self.block(depth + 1, "body", &f.body);
    }

    fn stmt(&mut self, s: &Stmt, depth: usize) {
        grow(|| self.stmt_inner(s, depth, ""));
    }

    /// `prefix` is `"else "` for the `if` of an `else if`.
    fn stmt_inner(&mut self, s: &Stmt, depth: usize, prefix: &str) {
        let at = Some(s.span);
        let d = depth + 1;
        match &s.kind {
            StmtKind::Let { name, value } => {
                self.line(depth, &format!("let {}", name.name), at);
                self.line(d, &expr(value), None);
            }
            StmtKind::Assign { name, value } => {
                self.line(depth, &format!("assign {}", name.name), at);
                self.line(d, &expr(value), None);
            }
            StmtKind::Transfer {
                op,
                srcs,
                dst,
                via,
                hints,
            } => {
                self.line(depth, op.keyword(), at);
                for src in srcs {
                    self.field(d, "src", src);
                }
                self.field(d, "dst", dst);
                let via = via.as_ref().map_or("(none)", |k| k.name.as_str());
                self.line(d, &format!("via {via}"), None);
                if hints.is_empty() {
                    self.line(d, "hints (none)", None);
                } else {
                    self.line(d, "hints", None);
                    for h in hints {
                        self.field(d + 1, &h.name.name, &h.value);
                    }
                }
            }
            StmtKind::For {
                var,
                start,
                end,
                step,
                body,
            } => {
                self.line(depth, &format!("for {}", var.name), at);
                self.field(d, "start", start);
                self.field(d, "end", end);
                match step {
                    Some(e) => self.field(d, "step", e),
                    None => self.line(d, "step (none)", None),
                }
                self.block(d, "body", body);
            }
            StmtKind::While { cond, body } => {
                self.line(depth, "while", at);
                self.field(d, "cond", cond);
                self.block(d, "body", body);
            }
            StmtKind::If { cond, then, els } => {
                self.line(depth, &format!("{prefix}if"), at);
                self.field(d, "cond", cond);
                self.block(d, "then", then);
                match els {
                    None => self.line(d, "else (none)", None),
                    Some(Else::Block(b)) => self.block(d, "else", b),
                    Some(Else::If(s)) => grow(|| self.stmt_inner(s, d, "else ")),
                }
            }
            StmtKind::Return(value) => {
                self.line(depth, "return", at);
                match value {
                    Some(e) => self.line(d, &expr(e), None),
                    None => self.line(d, "(none)", None),
                }
            }
            StmtKind::Assert(e) => {
                self.line(depth, "assert", at);
                self.line(d, &expr(e), None);
            }
            StmtKind::Expect { dst, srcs } => {
                self.line(depth, "expect", at);
                self.field(d, "dst", dst);
                for e in srcs {
                    self.field(d, "src", e);
                }
            }
            StmtKind::Call(e) => {
                self.line(depth, "call", at);
                self.line(d, &expr(e), None);
            }
            StmtKind::Function(f) => self.function(f, depth),
        }
    }
}

/// The S-expression of `e`.
pub fn expr(e: &Expr) -> String {
    let mut out = String::new();
    write_expr(e, &mut out);
    out
}

fn write_expr(e: &Expr, out: &mut String) {
    grow(|| match &e.kind {
        ExprKind::Int(v) => {
            let _ = write!(out, "(int {v})");
        }
        ExprKind::Bool(b) => out.push_str(if *b { "(true)" } else { "(false)" }),
        ExprKind::Name(id) => {
            let _ = write!(out, "(name {})", id.name);
        }
        ExprKind::Unary(op, x) => {
            out.push_str(match op {
                UnOp::Neg => "(neg ",
                UnOp::BitNot => "(bitnot ",
                UnOp::Not => "(not ",
            });
            write_expr(x, out);
            out.push(')');
        }
        ExprKind::Binary(op, l, r) => {
            let _ = write!(out, "({} ", op.symbol());
            write_expr(l, out);
            out.push(' ');
            write_expr(r, out);
            out.push(')');
        }
        ExprKind::Call { func, args } => {
            let _ = write!(out, "(call {}", func.name);
            for a in args {
                out.push(' ');
                write_expr(a, out);
            }
            out.push(')');
        }
        ExprKind::Chunk(c) => {
            let _ = write!(out, "(chunk {} ", c.buffer.name);
            write_selector(&c.ranks, out);
            out.push(' ');
            match &c.index {
                Some(s) => write_selector(s, out),
                None => out.push_str("(index omitted)"),
            }
            out.push(')');
        }
        ExprKind::Paren(x) => write_expr(x, out),
        ExprKind::If { cond, then, els } => {
            out.push_str("(if");
            for x in [cond, then, els] {
                out.push(' ');
                write_expr(x, out);
            }
            out.push(')');
        }
        ExprKind::Table(items) => {
            out.push_str("(table");
            for x in items {
                out.push(' ');
                write_expr(x, out);
            }
            out.push(')');
        }
    });
}

fn write_selector(s: &Selector, out: &mut String) {
    out.push('[');
    match s {
        Selector::One(e) => write_expr(e, out),
        Selector::All(_) => out.push('*'),
        Selector::Range(a, b) => {
            out.push_str("(range ");
            write_expr(a, out);
            out.push(' ');
            write_expr(b, out);
            out.push(')');
        }
    }
    out.push(']');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::parse;

    fn dumped(src: &str, spans: bool) -> String {
        let file = SourceFile::new("t.coll", src);
        let program = parse(src).expect("parses");
        dump(&file, &program, spans)
    }

    #[test]
    fn header_and_loop_with_spans() {
        let src = "\
collective allreduce ring(n) {
    chunks n;
    inplace;
    topology ring, any;
    scratch tmp[2];
    pipeline 4;
    ensure {}
}

for s in 0..n - 1 {
    copy input[s][0] -> input[(s + 1) % n] via nvlink with channel 1;
}
";
        let want = "\
collective allreduce ring(n) @1:1
  chunks @2:5
    (name n)
  inplace @3:5
  topology ring, any @4:5
  scratch tmp @5:5
    size (int 2)
  hint pipeline @6:5
    (int 4)
  ensure @7:5
    body (empty)
for s @10:1
  start (int 0)
  end (- (name n) (int 1))
  step (none)
  body
    copy @11:5
      src (chunk input [(name s)] [(int 0)])
      dst (chunk input [(% (+ (name s) (int 1)) (name n))] (index omitted))
      via nvlink
      hints
        channel (int 1)
";
        assert_eq!(dumped(src, true), want);
    }

    #[test]
    fn functions_conditionals_and_the_rest() {
        let src = "\
collective custom c(n) {}
fn f(a, b: bool) -> int {
    if b { return a; } else if not b { return -~a; } else {}
    while a < 0x10 { a = a * 2; }
    fn g() { return; }
}
assert f(1, true) == 2 and is_pow2(n);
expect output[*][0..2] == input[0][1], input[1];
reduce input[*][0] -> input[0][0] via switch;
nop();
";
        let want = "\
collective custom c(n)
  (empty)
fn f
  params
    a: (none)
    b: bool
  returns int
  body
    if
      cond (name b)
      then
        return
          (name a)
      else if
        cond (not (name b))
        then
          return
            (neg (bitnot (name a)))
        else (empty)
    while
      cond (< (name a) (int 16))
      body
        assign a
          (* (name a) (int 2))
    fn g
      params (none)
      returns (none)
      body
        return
          (none)
assert
  (and (== (call f (int 1) (true)) (int 2)) (call is_pow2 (name n)))
expect
  dst (chunk output [*] [(range (int 0) (int 2))])
  src (chunk input [(int 0)] [(int 1)])
  src (chunk input [(int 1)] (index omitted))
reduce
  src (chunk input [*] [(int 0)])
  dst (chunk input [(int 0)] [(int 0)])
  via switch
  hints (none)
call
  (call nop)
";
        assert_eq!(dumped(src, false), want);
    }

    #[test]
    fn parentheses_are_transparent() {
        let a = dumped("let x = ((1 + 2)) * (x);", false);
        let b = dumped("let x = (1 + 2) * x;", false);
        assert_eq!(a, b);
        assert_eq!(a, "let x\n  (* (+ (int 1) (int 2)) (name x))\n");
        assert_ne!(a, dumped("let x = 1 + 2 * x;", false));
    }

    #[test]
    fn columns_count_characters() {
        let src = "/* é */ let x = 1;\n";
        assert_eq!(dumped(src, true), "let x @1:9\n  (int 1)\n");
    }

    #[test]
    fn deep_trees_do_not_overflow() {
        let src = format!("let x = 1{};", " + 1".repeat(250));
        assert!(dumped(&src, false).len() > 250 * 8);
    }
}
