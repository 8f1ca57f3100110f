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
mod tests;
