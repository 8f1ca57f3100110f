//! The canonical layout of a parsed file, keeping every comment.
//!
//! [`format()`] prints a [`Program`] in one fixed layout: four-space indentation, one item,
//! header item or statement per line, `{` at the end of the line that opens it, `}` alone on
//! its line (`} else {`, `} else if c {`), an empty block as `{}`, one space around binary
//! operators, none inside brackets or around `..`. Integer literals are printed as written
//! (hex and `_` kept). The user's parentheses are kept; parentheses are added only where the
//! tree would otherwise read back differently (a hand-built tree), never for a parsed one.
//! (A negative [`ExprKind::Int`], which the parser never builds, prints as `-5` and reads
//! back as a negation.)
//!
//! Blank lines: between two consecutive elements of one list (items, header items,
//! statements, and the comments between them) one blank line is printed when the source
//! had at least one blank line between them, and none otherwise; never right after a `{`,
//! never before a `}`, never at the start or the end of the file.
//!
//! Comments (from [`comments::scan`]) keep their source order. An own-line comment is
//! printed on its own line at the current indentation, before the first node that starts
//! after it (or before the `}` that follows it, or at the end of the file). Any other
//! comment is appended, after one space, to the last line printed; if that line ends in a
//! `//` comment it goes on its own line instead. A comment inside a node (an expression,
//! a signature) is printed after the node's line; one in the head of a block (between
//! `if` and `{`, between `}` and `else`) is printed after the line that opens the block,
//! or after the whole statement when the block prints as `{}`. Block comments
//! are printed verbatim except that whitespace at their line ends is dropped; `//` comments
//! lose their trailing whitespace.
//!
//! Invariants (tested below): the output ends with exactly one `\n` and has no trailing
//! whitespace; `format` is idempotent; parsing the output gives the
//! same tree up to spans and parentheses the tree needed (see [`crate::dump`]); every
//! comment of the input appears in the output, as a comment, once.

use crate::ast::*;
use crate::comments::{self, Comment, comment_len};
use crate::parser::{grow, int_literal};
use crate::source::Span;

/// Prints `program` (parsed from `text`) in the canonical layout.
///
/// `text` supplies the comments, the blank lines and the spelling of integer literals; for
/// a tree that was not parsed from any text, pass `""`.
pub fn format(text: &str, program: &Program) -> String {
    let mut p = Printer {
        text,
        comments: comments::scan(text),
        next: 0,
        cursor: 0,
        indent: 0,
        lines: Vec::new(),
        pending_blank: false,
    };
    p.list(&program.items, Item::span, Printer::item);
    p.comments_before(usize::MAX, false);
    p.finish()
}

/// One output line (a multi-line block comment is one `Line` with `\n`s inside).
struct Line {
    text: String,
    /// Ends in a `//` comment: nothing may be appended.
    closed: bool,
    /// Ends with the `{` that opens a block: no blank line may follow.
    opens: bool,
}

struct Printer<'a> {
    text: &'a str,
    comments: Vec<Comment>,
    /// The first comment not printed yet.
    next: usize,
    /// Source offset up to which everything has been printed (for blank-line detection).
    cursor: usize,
    indent: usize,
    lines: Vec<Line>,
    /// Print a blank line before the next new line (unless it follows a `{`).
    pending_blank: bool,
}

fn start(span: Span) -> usize {
    span.start as usize
}

fn end(span: Span) -> usize {
    span.end as usize
}

impl<'a> Printer<'a> {
    fn finish(self) -> String {
        let mut out = String::new();
        for line in &self.lines {
            out.push_str(&line.text);
            out.push('\n');
        }
        out
    }

    // ----- lines, blank lines and comments -----

    /// Starts a new line at the current indentation.
    fn new_line(&mut self, text: &str) {
        let blank = std::mem::take(&mut self.pending_blank);
        if blank && self.lines.last().is_some_and(|l| !l.opens) {
            self.lines.push(Line {
                text: String::new(),
                closed: false,
                opens: false,
            });
        }
        self.lines.push(Line {
            text: format!("{}{}", "    ".repeat(self.indent), text),
            closed: false,
            opens: false,
        });
    }

    /// Continues the last line, or starts one when there is none or it is closed.
    fn append(&mut self, text: &str) {
        match self.lines.last_mut() {
            Some(line) if !line.closed => line.text.push_str(text),
            _ => self.new_line(text.trim_start()),
        }
    }

    /// Asks for a blank line before the next line when the source has a whitespace-only
    /// line between the end of what was printed and `start`.
    fn blank_if_gap(&mut self, start: usize) {
        if self.cursor > start {
            return;
        }
        let Some(gap) = self.text.get(self.cursor..start) else {
            return;
        };
        let parts: Vec<&str> = gap.split('\n').collect();
        if parts.len() > 2
            && parts[1..parts.len() - 1]
                .iter()
                .any(|l| l.trim().is_empty())
        {
            self.pending_blank = true;
        }
    }

    /// Prints every comment that starts before `pos`. `inside`: they lie inside the node
    /// just printed, so they get no blank line before them.
    fn comments_before(&mut self, pos: usize, inside: bool) {
        while let Some(&c) = self.comments.get(self.next) {
            if start(c.span) >= pos {
                break;
            }
            self.next += 1;
            let text = normalize_comment(self.text.get(c.span.range()).unwrap_or(""), c.line);
            let trailing = !c.own_line && self.lines.last().is_some_and(|l| !l.closed);
            if trailing {
                self.append(" ");
                self.append(&text);
            } else {
                if !inside {
                    self.blank_if_gap(start(c.span));
                }
                self.new_line(&text);
            }
            if c.line
                && let Some(last) = self.lines.last_mut()
            {
                last.closed = true;
            }
            self.cursor = self.cursor.max(end(c.span));
        }
    }

    /// Whether a comment not yet printed starts strictly between `open` and `close`.
    fn comment_between(&self, open: usize, close: usize) -> bool {
        self.comments[self.next.min(self.comments.len())..]
            .iter()
            .take_while(|c| start(c.span) < close)
            .any(|c| start(c.span) > open)
    }

    /// The offset of the first `{` at or after `from` outside comments.
    fn find_open_brace(&self, from: usize) -> Option<usize> {
        let mut i = from;
        while let Some(rest) = self.text.get(i..) {
            let c = rest.chars().next()?;
            if c == '{' {
                return Some(i);
            }
            match comment_len(rest) {
                Some(len) => i += len.unwrap_or_else(|l| l),
                None => i += c.len_utf8(),
            }
        }
        None
    }

    /// Prints a list of nodes, each preceded by the comments before it and, where the
    /// source had one, a blank line; comments inside a node follow it.
    fn list<T>(&mut self, nodes: &[T], span: impl Fn(&T) -> Span, print: impl Fn(&mut Self, &T)) {
        for node in nodes {
            let sp = span(node);
            self.comments_before(start(sp), false);
            self.blank_if_gap(start(sp));
            self.cursor = self.cursor.max(start(sp));
            print(self, node);
            self.comments_before(end(sp), true);
            self.cursor = self.cursor.max(end(sp));
        }
    }

    /// Prints `head{}`, or `head{`, the nodes one level deeper and `}`. `open` and `close`
    /// are the offsets of the braces; `append` continues the last line (`} else {`).
    #[allow(clippy::too_many_arguments)]
    fn braced<T>(
        &mut self,
        head: &str,
        append: bool,
        open: usize,
        close: usize,
        nodes: &[T],
        span: impl Fn(&T) -> Span,
        print: impl Fn(&mut Self, &T),
    ) {
        let empty = nodes.is_empty() && !self.comment_between(open, close);
        let text = format!("{head}{}", if empty { "{}" } else { "{" });
        if append {
            self.append(&text);
        } else {
            self.new_line(&text);
        }
        if empty {
            return;
        }
        if let Some(line) = self.lines.last_mut() {
            line.opens = true;
        }
        self.indent += 1;
        self.cursor = self.cursor.max(open + 1);
        self.list(nodes, span, print);
        self.comments_before(close, false);
        self.indent -= 1;
        self.pending_blank = false;
        self.new_line("}");
        self.cursor = self.cursor.max(close + 1);
    }

    fn block(&mut self, head: &str, append: bool, b: &Block) {
        let close = end(b.span).saturating_sub(1).max(start(b.span));
        self.braced(
            head,
            append,
            start(b.span),
            close,
            &b.stmts,
            |s| s.span,
            Printer::stmt,
        );
    }

    // ----- items -----

    fn item(&mut self, item: &Item) {
        match item {
            Item::Collective(h) => self.header(h),
            Item::Function(f) => self.function(f),
            Item::Stmt(s) => self.stmt(s),
        }
    }

    fn header(&mut self, h: &Header) {
        let head = format!(
            "collective {} {}({}) ",
            h.kind.name,
            h.name.name,
            join_names(&h.params)
        );
        let close = end(h.span).saturating_sub(1);
        let open = self
            .find_open_brace(end(h.name.span))
            .filter(|&o| o <= close)
            .unwrap_or(close);
        self.braced(
            &head,
            false,
            open,
            close,
            &h.items,
            |i| i.span,
            Printer::header_item,
        );
    }

    fn header_item(&mut self, item: &HeaderItem) {
        let line = match &item.kind {
            HeaderItemKind::Chunks(e) => format!("chunks {};", self.expr_str(e)),
            HeaderItemKind::InPlace => "inplace;".to_string(),
            HeaderItemKind::OutOfPlace => "outofplace;".to_string(),
            HeaderItemKind::Ranks(e) => format!("ranks {};", self.expr_str(e)),
            HeaderItemKind::Topology(names) => format!("topology {};", join_names(names)),
            HeaderItemKind::Needs(names) => format!("needs {};", join_names(names)),
            HeaderItemKind::Scratch { name, size } => {
                format!("scratch {}[{}];", name.name, self.expr_str(size))
            }
            HeaderItemKind::Param { name, default } => {
                format!("param {} = {};", name.name, self.expr_str(default))
            }
            HeaderItemKind::Hint(h) => format!("{};", self.hint(h)),
            HeaderItemKind::Ensure(b) => return self.block("ensure ", false, b),
        };
        self.new_line(&line);
    }

    fn function(&mut self, f: &Function) {
        let params: Vec<String> = f
            .params
            .iter()
            .map(|p| match &p.ty {
                Some(t) => format!("{}: {}", p.name.name, t.name.name),
                None => p.name.name.clone(),
            })
            .collect();
        let ret = match &f.ret {
            Some(t) => format!(" -> {}", t.name.name),
            None => String::new(),
        };
        let head = format!("fn {}({}){ret} ", f.name.name, params.join(", "));
        self.block(&head, false, &f.body);
    }

    // ----- statements -----

    fn stmt(&mut self, s: &Stmt) {
        grow(|| self.stmt_inner(s));
    }

    fn stmt_inner(&mut self, s: &Stmt) {
        let line = match &s.kind {
            StmtKind::Let { name, value } => {
                format!("let {} = {};", name.name, self.expr_str(value))
            }
            StmtKind::Assign { name, value } => {
                format!("{} = {};", name.name, self.expr_str(value))
            }
            StmtKind::Transfer {
                op,
                srcs,
                dst,
                via,
                hints,
            } => {
                let srcs: Vec<String> = srcs.iter().map(|e| self.expr_str(e)).collect();
                let mut line = format!(
                    "{} {} -> {}",
                    op.keyword(),
                    srcs.join(", "),
                    self.expr_str(dst)
                );
                if let Some(k) = via {
                    line.push_str(" via ");
                    line.push_str(&k.name);
                }
                if !hints.is_empty() {
                    let hints: Vec<String> = hints.iter().map(|h| self.hint(h)).collect();
                    line.push_str(" with ");
                    line.push_str(&hints.join(", "));
                }
                line.push(';');
                line
            }
            StmtKind::For {
                var,
                start,
                end,
                step,
                body,
            } => {
                let mut head = format!(
                    "for {} in {}..{} ",
                    var.name,
                    self.expr_str(start),
                    self.expr_str(end)
                );
                if let Some(step) = step {
                    head.push_str(&format!("step {} ", self.expr_str(step)));
                }
                return self.block(&head, false, body);
            }
            StmtKind::While { cond, body } => {
                let head = format!("while {} ", self.expr_str(cond));
                return self.block(&head, false, body);
            }
            StmtKind::If { cond, then, els } => return self.if_chain(false, cond, then, els),
            StmtKind::Return(None) => "return;".to_string(),
            StmtKind::Return(Some(e)) => format!("return {};", self.expr_str(e)),
            StmtKind::Assert(e) => format!("assert {};", self.expr_str(e)),
            StmtKind::Expect { dst, srcs } => {
                let mut d = String::new();
                // The destination is read above comparisons, and `==` follows it.
                self.expr(dst, 5, BinOp::Eq.precedence(), &mut d);
                let srcs: Vec<String> = srcs.iter().map(|e| self.expr_str(e)).collect();
                format!("expect {d} == {};", srcs.join(", "))
            }
            StmtKind::Call(e) => format!("{};", self.expr_str(e)),
            StmtKind::Function(f) => return self.function(f),
        };
        self.new_line(&line);
    }

    /// `if c {...}` and its `else` branches; `append` continues the last line (`} else `).
    fn if_chain(&mut self, append: bool, cond: &Expr, then: &Block, els: &Option<Else>) {
        let head = format!(
            "{}if {} ",
            if append { " else " } else { "" },
            self.expr_str(cond)
        );
        self.block(&head, append, then);
        match els {
            None => {}
            Some(Else::Block(b)) => self.block(" else ", true, b),
            Some(Else::If(s)) => match &s.kind {
                StmtKind::If { cond, then, els } => {
                    grow(|| self.if_chain(true, cond, then, els));
                }
                // Not produced by the parser; print it as the only statement of a block.
                _ => {
                    let b = Block {
                        stmts: vec![(**s).clone()],
                        span: s.span,
                    };
                    self.block(" else ", true, &b);
                }
            },
        }
    }

    fn hint(&self, h: &Hint) -> String {
        format!("{} {}", h.name.name, self.expr_str(&h.value))
    }

    // ----- expressions -----

    fn expr_str(&self, e: &Expr) -> String {
        let mut out = String::new();
        self.expr(e, 0, 0, &mut out);
        out
    }

    /// Prints `e` where the parser reads an expression of precedence at least `min` and
    /// where the next token may be a binary operator of precedence `next` (0: none) that
    /// must not become part of `e`. Adds parentheses exactly when `e` would not read back
    /// as itself there.
    fn expr(&self, e: &Expr, min: u8, next: u8, out: &mut String) {
        grow(|| self.expr_inner(e, min, next, out));
    }

    fn expr_inner(&self, e: &Expr, min: u8, next: u8, out: &mut String) {
        if needs_parens(e, min, next) {
            out.push('(');
            self.expr(e, 0, 0, out);
            out.push(')');
            return;
        }
        match &e.kind {
            ExprKind::Int(v) => out.push_str(&self.int_text(e.span, *v)),
            ExprKind::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            ExprKind::Name(id) => out.push_str(&id.name),
            ExprKind::Unary(op, x) => {
                let prec = match op {
                    UnOp::Not => NOT_PRECEDENCE + 1,
                    UnOp::Neg | UnOp::BitNot => UNARY_PRECEDENCE,
                };
                let mut operand = String::new();
                self.expr(x, prec, next, &mut operand);
                out.push_str(op.symbol());
                // `not x`, and `- -x` rather than `--x`.
                if *op == UnOp::Not || (*op == UnOp::Neg && operand.starts_with('-')) {
                    out.push(' ');
                }
                out.push_str(&operand);
            }
            ExprKind::Binary(op, l, r) => {
                let p = op.precedence();
                // Comparisons do not chain: `a < b == c` is an error, not `(a < b) == c`.
                let chained = op.is_comparison()
                    && matches!(&l.kind, ExprKind::Binary(lop, ..) if lop.is_comparison());
                if chained {
                    out.push('(');
                    self.expr(l, 0, 0, out);
                    out.push(')');
                } else {
                    self.expr(l, p, p, out);
                }
                out.push(' ');
                out.push_str(op.symbol());
                out.push(' ');
                self.expr(r, p + 1, next, out);
            }
            ExprKind::Call { func, args } => {
                out.push_str(&func.name);
                out.push('(');
                for (k, a) in args.iter().enumerate() {
                    if k > 0 {
                        out.push_str(", ");
                    }
                    self.expr(a, 0, 0, out);
                }
                out.push(')');
            }
            ExprKind::Chunk(c) => {
                out.push_str(&c.buffer.name);
                self.selector(&c.ranks, out);
                if let Some(index) = &c.index {
                    self.selector(index, out);
                }
            }
            ExprKind::Paren(x) => {
                out.push('(');
                self.expr(x, 0, 0, out);
                out.push(')');
            }
            ExprKind::If { cond, then, els } => {
                out.push_str("if ");
                self.expr(cond, 0, 0, out);
                out.push_str(" then ");
                self.expr(then, 0, 0, out);
                out.push_str(" else ");
                self.expr(els, 0, 0, out);
            }
            ExprKind::Table(items) => {
                out.push('[');
                for (k, x) in items.iter().enumerate() {
                    if k > 0 {
                        out.push_str(", ");
                    }
                    self.expr(x, 0, 0, out);
                }
                out.push(']');
            }
        }
    }

    fn selector(&self, s: &Selector, out: &mut String) {
        out.push('[');
        match s {
            Selector::One(e) => self.expr(e, 0, 0, out),
            Selector::All(_) => out.push('*'),
            Selector::Range(a, b) => {
                self.expr(a, 0, 0, out);
                out.push_str("..");
                self.expr(b, 0, 0, out);
            }
        }
        out.push(']');
    }

    /// The literal as written in the source when the span holds it, else decimal.
    fn int_text(&self, span: Span, v: i64) -> String {
        match self.text.get(span.range()) {
            Some(s) if literal_value(s) == Some(v) => s.to_string(),
            _ => v.to_string(),
        }
    }
}

/// Whether `e` needs parentheses where an expression of precedence `min` is read and a
/// binary operator of precedence `next` may follow. A binary expression must bind at least
/// as tightly as both; `not` takes everything of comparison precedence or tighter to its
/// right, so it must not be followed by such an operator. Prefix `-` and `~` and primaries
/// fit everywhere.
fn needs_parens(e: &Expr, min: u8, next: u8) -> bool {
    match &e.kind {
        ExprKind::Binary(op, ..) => {
            let p = op.precedence();
            p < min || p < next
        }
        ExprKind::Unary(UnOp::Not, _) => next > NOT_PRECEDENCE,
        // Its `else` branch would take in any operator that follows.
        ExprKind::If { .. } => next > 0,
        _ => false,
    }
}

/// The value of an integer literal as the parser reads it, `None` if `s` is not one.
fn literal_value(s: &str) -> Option<i64> {
    if !s.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let digits: String = s.chars().filter(|&c| c != '_').collect();
    let well_formed = match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(h) => !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit()),
        None => digits.chars().all(|c| c.is_ascii_digit()),
    };
    if !well_formed {
        return None;
    }
    int_literal(s).ok()
}

/// A comment as printed: `//` comments lose trailing whitespace, block comments lose the
/// whitespace at the end of each of their lines.
fn normalize_comment(text: &str, line: bool) -> String {
    if line {
        text.trim_end().to_string()
    } else {
        text.split('\n')
            .map(str::trim_end)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

#[cfg(test)]
mod tests {
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
        let doc = include_str!("../LANGUAGE.md");
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
}
