//! The parser: `.coll` text to [`crate::ast::Program`], built on nom 8 over `&str`.
//!
//! Positions are byte offsets computed from how much input remains, so every node gets an
//! exact [`Span`]. Statements are dispatched on their first word and commit (`cut`) after
//! it, so a failure reports what was expected at the furthest point reached. After an error
//! the parser resynchronises at the next `;` or `}` of the same nesting level and goes on,
//! so one file yields several diagnostics. Nesting (parentheses, unary operators, blocks,
//! and the depth of the expression tree) is bounded by [`MAX_DEPTH`], so hostile input ends
//! in a diagnostic, never a stack overflow.

use crate::ast::*;
use crate::builtins::{HEADER_HINTS, HEADER_ITEMS, is_keyword};
use crate::comments::comment_len;
use crate::diagnostic::{Diagnostic, ErrorKind, did_you_mean};
use crate::source::Span;
use nom::bytes::complete::{take_while, take_while1};
use nom::error::ParseError;
use nom::{IResult, Parser as _};
use std::cell::{Cell, RefCell};

/// Deepest nesting of expressions and blocks accepted.
pub const MAX_DEPTH: usize = 256;
/// Diagnostics reported per file before giving up.
pub const MAX_ERRORS: usize = 50;

/// A parse failure at a position, with what was expected there.
#[derive(Clone, Debug)]
pub struct PError<'a> {
    at: &'a str,
    expected: Vec<&'static str>,
    /// A specific error that replaces the generic "expected ..." message.
    /// Boxed so the error type (returned everywhere) stays small.
    custom: Option<Box<Diagnostic>>,
}

impl<'a> PError<'a> {
    fn expected(at: &'a str, what: &'static str) -> Self {
        PError {
            at,
            expected: vec![what],
            custom: None,
        }
    }
}

impl<'a> ParseError<&'a str> for PError<'a> {
    fn from_error_kind(at: &'a str, _: nom::error::ErrorKind) -> Self {
        PError {
            at,
            expected: Vec::new(),
            custom: None,
        }
    }

    fn append(_: &'a str, _: nom::error::ErrorKind, other: Self) -> Self {
        other
    }

    /// Keeps the error that got furthest; merges expectations at the same place.
    fn or(mut self, other: Self) -> Self {
        match self.at.len().cmp(&other.at.len()) {
            std::cmp::Ordering::Less => self,
            std::cmp::Ordering::Greater => other,
            std::cmp::Ordering::Equal => {
                if self.custom.is_some() {
                    return self;
                }
                if other.custom.is_some() {
                    return other;
                }
                for e in other.expected {
                    if !self.expected.contains(&e) {
                        self.expected.push(e);
                    }
                }
                self
            }
        }
    }
}

type In<'a> = &'a str;
type PResult<'a, T> = IResult<In<'a>, T, PError<'a>>;

/// Parses a whole file. Returns every diagnostic found when the file is not valid.
pub fn parse(text: &str) -> Result<Program, Vec<Diagnostic>> {
    let p = Parser {
        src: text,
        depth: Cell::new(0),
        diags: RefCell::new(Vec::new()),
    };
    let items = p.top_items(text);
    let diags = p.diags.into_inner();
    if diags.is_empty() {
        Ok(Program {
            items,
            span: Span::new(0, text.len()),
        })
    } else {
        Err(diags)
    }
}

struct Parser<'a> {
    src: &'a str,
    depth: Cell<usize>,
    diags: RefCell<Vec<Diagnostic>>,
}

/// Restores the nesting depth when a nested parse returns.
struct DepthGuard<'p> {
    depth: &'p Cell<usize>,
}

impl Drop for DepthGuard<'_> {
    fn drop(&mut self) {
        self.depth.set(self.depth.get() - 1);
    }
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Operators and punctuation, longest first so `->` is never read as `-`.
const PUNCT: &[&str] = &[
    "->", "==", "!=", "<=", ">=", "<<", ">>", "..", "+", "-", "*", "/", "%", "&", "|", "^", "~",
    "<", ">", "=", "(", ")", "[", "]", "{", "}", ";", ",", ":",
];

impl<'a> Parser<'a> {
    fn off(&self, i: In<'a>) -> usize {
        self.src.len() - i.len()
    }

    fn span(&self, from: In<'a>, to: In<'a>) -> Span {
        Span::new(self.off(from), self.off(to))
    }

    fn fail<T>(&self, at: In<'a>, diag: Diagnostic) -> PResult<'a, T> {
        Err(nom::Err::Failure(PError {
            at,
            expected: Vec::new(),
            custom: Some(Box::new(diag)),
        }))
    }

    fn enter(&self, at: In<'a>) -> Result<DepthGuard<'_>, nom::Err<PError<'a>>> {
        let d = self.depth.get() + 1;
        if d > MAX_DEPTH {
            let off = self.off(at);
            return Err(nom::Err::Failure(PError {
                at,
                expected: Vec::new(),
                custom: Some(Box::new(
                    Diagnostic::new(
                        ErrorKind::TooDeep { limit: MAX_DEPTH },
                        Span::new(off, off + 1),
                    )
                    .with_label("too deep here"),
                )),
            }));
        }
        self.depth.set(d);
        Ok(DepthGuard { depth: &self.depth })
    }

    // ----- lexical -----

    /// Skips whitespace and comments.
    fn ws(&self, mut i: In<'a>) -> PResult<'a, ()> {
        loop {
            let (rest, _) = take_while(char::is_whitespace).parse(i)?;
            i = rest;
            match comment_len(i) {
                None => return Ok((i, ())),
                Some(Ok(len)) => i = &i[len..],
                Some(Err(_)) => {
                    let off = self.off(i);
                    return self.fail(
                        i,
                        Diagnostic::new(ErrorKind::UnterminatedComment, Span::new(off, off + 2))
                            .with_label("comment starts here")
                            .with_note("block comments nest: every `/*` needs its own `*/`"),
                    );
                }
            }
        }
    }

    /// A punctuation token, matched whole (so `-` does not match `->`).
    fn sym(&self, s: &'static str) -> impl Fn(In<'a>) -> PResult<'a, Span> + '_ {
        move |i| {
            let (i, _) = self.ws(i)?;
            match Self::punct_at(i) {
                Some(p) if p == s => {
                    let rest = &i[s.len()..];
                    Ok((rest, self.span(i, rest)))
                }
                _ => Err(nom::Err::Error(PError::expected(i, quoted(s)))),
            }
        }
    }

    fn punct_at(i: In<'a>) -> Option<&'static str> {
        PUNCT.iter().copied().find(|p| i.starts_with(p))
    }

    /// The next word (identifier or keyword) without consuming it.
    fn peek_word(&self, i: In<'a>) -> PResult<'a, Option<&'a str>> {
        let (i, _) = self.ws(i)?;
        if !i.starts_with(is_ident_start) {
            return Ok((i, None));
        }
        let end = i.find(|c: char| !is_ident_char(c)).unwrap_or(i.len());
        Ok((i, Some(&i[..end])))
    }

    fn kw(&self, k: &'static str) -> impl Fn(In<'a>) -> PResult<'a, Span> + '_ {
        move |i| {
            let (i, w) = self.peek_word(i)?;
            if w == Some(k) {
                let rest = &i[k.len()..];
                Ok((rest, self.span(i, rest)))
            } else {
                Err(nom::Err::Error(PError::expected(i, quoted(k))))
            }
        }
    }

    /// Any word, keywords included (used where keywords are just names, like `reduce`).
    fn word(&self, i: In<'a>) -> PResult<'a, Ident> {
        let (i, _) = self.ws(i)?;
        let (rest, w) = take_while1(is_ident_char)
            .parse(i)
            .map_err(|_: nom::Err<PError<'a>>| nom::Err::Error(PError::expected(i, "a name")))?;
        if !w.starts_with(is_ident_start) {
            return Err(nom::Err::Error(PError::expected(i, "a name")));
        }
        Ok((
            rest,
            Ident {
                name: w.to_string(),
                span: self.span(i, rest),
            },
        ))
    }

    fn ident(&self, i: In<'a>) -> PResult<'a, Ident> {
        let (rest, id) = self.word(i)?;
        if is_keyword(&id.name) {
            let (i, _) = self.ws(i)?;
            return Err(nom::Err::Error(PError::expected(i, "a name")));
        }
        Ok((rest, id))
    }

    fn int(&self, i: In<'a>) -> PResult<'a, i64> {
        let (i, _) = self.ws(i)?;
        let (rest, text) = if let Some(hex) = i.strip_prefix("0x").or_else(|| i.strip_prefix("0X"))
        {
            let (rest, _) = take_while1(|c: char| c.is_ascii_hexdigit() || c == '_')
                .parse(hex)
                .map_err(|_: nom::Err<PError<'a>>| {
                    nom::Err::Failure(PError::expected(hex, "hexadecimal digits"))
                })?;
            (rest, &i[..i.len() - rest.len()])
        } else {
            let (rest, _) = take_while1(|c: char| c.is_ascii_digit() || c == '_').parse(i)?;
            if !i.starts_with(|c: char| c.is_ascii_digit()) {
                return Err(nom::Err::Error(PError::expected(i, "a number")));
            }
            (rest, &i[..i.len() - rest.len()])
        };
        match int_literal(text) {
            Ok(v) => Ok((rest, v)),
            Err(_) => self.fail(
                i,
                Diagnostic::new(
                    ErrorKind::IntegerTooLarge(text.to_string()),
                    self.span(i, rest),
                )
                .with_label("too large")
                .with_note(format!("the largest integer is {}", i64::MAX)),
            ),
        }
    }

    // ----- expressions -----

    fn expr(&self, i: In<'a>) -> PResult<'a, Expr> {
        self.expr_bp(i, 0).map(|(i, (e, _))| (i, e))
    }

    /// Precedence climbing. Returns the expression and the depth of its tree.
    fn expr_bp(&self, start: In<'a>, min: u8) -> PResult<'a, (Expr, usize)> {
        let _guard = self.enter(start)?;
        // Debug builds spend kilobytes of stack per level; grow it on the heap instead of
        // bounding nesting by whatever stack the caller's thread has.
        grow(|| self.expr_bp_inner(start, min))
    }

    fn expr_bp_inner(&self, start: In<'a>, min: u8) -> PResult<'a, (Expr, usize)> {
        let (mut i, (mut lhs, mut depth)) = self.unary(start)?;
        let mut last_cmp: Option<Span> = None;
        loop {
            let (at, _) = self.ws(i)?;
            let Some(op) = Self::binop_at(at) else { break };
            let prec = op.precedence();
            if prec < min {
                break;
            }
            debug_assert!(at.starts_with(op.symbol()));
            let after = &at[op.symbol().len()..];
            let op_span = self.span(at, after);
            if op.is_comparison() {
                if let Some(first) = last_cmp {
                    return self.fail(
                        at,
                        Diagnostic::new(ErrorKind::ChainedComparison, op_span)
                            .with_label("second comparison")
                            .with_secondary(first, "first comparison")
                            .with_note("write `a < b and b < c`"),
                    );
                }
                last_cmp = Some(op_span);
            }
            let (rest, (rhs, rdepth)) =
                nom::combinator::cut(|i| self.expr_bp(i, prec + 1)).parse(after)?;
            depth = depth.max(rdepth) + 1;
            if depth > MAX_DEPTH {
                return self.fail(
                    at,
                    Diagnostic::new(ErrorKind::TooDeep { limit: MAX_DEPTH }, op_span)
                        .with_label("expression too long or deep here"),
                );
            }
            let span = lhs.span.to(rhs.span);
            lhs = Expr {
                kind: ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)),
                span,
            };
            i = rest;
        }
        Ok((i, (lhs, depth)))
    }

    fn binop_at(i: In<'a>) -> Option<BinOp> {
        if let Some(p) = Self::punct_at(i) {
            return Some(match p {
                "==" => BinOp::Eq,
                "!=" => BinOp::Ne,
                "<=" => BinOp::Le,
                ">=" => BinOp::Ge,
                "<<" => BinOp::Shl,
                ">>" => BinOp::Shr,
                "+" => BinOp::Add,
                "-" => BinOp::Sub,
                "*" => BinOp::Mul,
                "/" => BinOp::Div,
                "%" => BinOp::Rem,
                "&" => BinOp::BitAnd,
                "|" => BinOp::BitOr,
                "^" => BinOp::BitXor,
                "<" => BinOp::Lt,
                ">" => BinOp::Gt,
                _ => return None,
            });
        }
        let end = i.find(|c: char| !is_ident_char(c)).unwrap_or(i.len());
        match &i[..end] {
            "and" => Some(BinOp::And),
            "or" => Some(BinOp::Or),
            _ => None,
        }
    }

    fn unary(&self, i: In<'a>) -> PResult<'a, (Expr, usize)> {
        let (start, _) = self.ws(i)?;
        let op = if let Ok((rest, _)) = self.kw("not")(start) {
            Some((UnOp::Not, rest, NOT_PRECEDENCE + 1))
        } else if let Ok((rest, _)) = self.sym("-")(start) {
            Some((UnOp::Neg, rest, UNARY_PRECEDENCE))
        } else if let Ok((rest, _)) = self.sym("~")(start) {
            Some((UnOp::BitNot, rest, UNARY_PRECEDENCE))
        } else {
            None
        };
        match op {
            Some((op, rest, prec)) => {
                let (rest, (operand, depth)) =
                    nom::combinator::cut(|i| self.expr_bp(i, prec)).parse(rest)?;
                let span = self.span(start, rest);
                Ok((
                    rest,
                    (
                        Expr {
                            kind: ExprKind::Unary(op, Box::new(operand)),
                            span,
                        },
                        depth + 1,
                    ),
                ))
            }
            None => self.primary(start),
        }
    }

    fn primary(&self, i: In<'a>) -> PResult<'a, (Expr, usize)> {
        let (i, _) = self.ws(i)?;
        let leaf = |kind, rest| {
            Ok((
                rest,
                (
                    Expr {
                        kind,
                        span: self.span(i, rest),
                    },
                    1,
                ),
            ))
        };
        if i.starts_with(|c: char| c.is_ascii_digit()) {
            let (rest, v) = self.int(i)?;
            return leaf(ExprKind::Int(v), rest);
        }
        if let Ok((rest, _)) = self.sym("(")(i) {
            let (rest, (inner, depth)) =
                nom::combinator::cut(|i| self.expr_bp(i, 0)).parse(rest)?;
            let (rest, _) = nom::combinator::cut(self.sym(")")).parse(rest)?;
            return Ok((
                rest,
                (
                    Expr {
                        kind: ExprKind::Paren(Box::new(inner)),
                        span: self.span(i, rest),
                    },
                    depth + 1,
                ),
            ));
        }
        match self.peek_word(i)?.1 {
            Some("true") => return leaf(ExprKind::Bool(true), &i[4..]),
            Some("false") => return leaf(ExprKind::Bool(false), &i[5..]),
            _ => {}
        }
        let (rest, name) = self
            .ident(i)
            .map_err(|_| nom::Err::Error(PError::expected(i, "an expression")))?;
        if let Ok((after, _)) = self.sym("(")(rest) {
            let (rest, args) = nom::combinator::cut(|i| self.args(i)).parse(after)?;
            let span = self.span(i, rest);
            return Ok((
                rest,
                (
                    Expr {
                        kind: ExprKind::Call { func: name, args },
                        span,
                    },
                    2,
                ),
            ));
        }
        if self.sym("[")(rest).is_ok() {
            let (rest, chunk) = self.chunk_ref(i, name, rest)?;
            return Ok((
                rest,
                (
                    Expr {
                        kind: ExprKind::Chunk(Box::new(chunk)),
                        span: self.span(i, rest),
                    },
                    2,
                ),
            ));
        }
        leaf(ExprKind::Name(name), rest)
    }

    /// Arguments after `(`, through `)`.
    fn args(&self, i: In<'a>) -> PResult<'a, Vec<Expr>> {
        if let Ok((rest, _)) = self.sym(")")(i) {
            return Ok((rest, Vec::new()));
        }
        let (i, args) = nom::multi::separated_list1(self.sym(","), |i| self.expr(i)).parse(i)?;
        let (i, _) = self.sym(")")(i)
            .map_err(|_| nom::Err::Failure(self.expected_at(i, &["`,`", "`)`"])))?;
        Ok((i, args))
    }

    fn expected_at(&self, i: In<'a>, what: &[&'static str]) -> PError<'a> {
        let at = self.ws(i).map_or(i, |(i, _)| i);
        PError {
            at,
            expected: what.to_vec(),
            custom: None,
        }
    }

    /// `[ranks]` and optionally `[index]` after a buffer name.
    fn chunk_ref(&self, start: In<'a>, buffer: Ident, i: In<'a>) -> PResult<'a, ChunkRef> {
        let (i, _) = self.sym("[")(i)?;
        let (i, ranks) = nom::combinator::cut(|i| self.selector(i)).parse(i)?;
        let (i, _) = nom::combinator::cut(self.sym("]")).parse(i)?;
        let (i, index) = match self.sym("[")(i) {
            Ok((i, _)) => {
                let (i, sel) = nom::combinator::cut(|i| self.selector(i)).parse(i)?;
                let (i, _) = nom::combinator::cut(self.sym("]")).parse(i)?;
                (i, Some(sel))
            }
            Err(_) => (i, None),
        };
        Ok((
            i,
            ChunkRef {
                buffer,
                ranks,
                index,
                span: self.span(start, i),
            },
        ))
    }

    fn selector(&self, i: In<'a>) -> PResult<'a, Selector> {
        if let Ok((rest, span)) = self.sym("*")(i) {
            return Ok((rest, Selector::All(span)));
        }
        let (i, a) = self.expr(i)?;
        match self.sym("..")(i) {
            Ok((i, _)) => {
                let (i, b) = nom::combinator::cut(|i| self.expr(i)).parse(i)?;
                Ok((i, Selector::Range(a, b)))
            }
            Err(_) => Ok((i, Selector::One(a))),
        }
    }

    // ----- statements -----

    fn block(&self, i: In<'a>) -> PResult<'a, Block> {
        let (i, _) = self.ws(i)?;
        let start = i;
        let (i, _) = self.sym("{")(i)?;
        let _guard = self.enter(start)?;
        let (i, stmts) = grow(|| self.recovering_list(i, true, |i| self.stmt(i)));
        // The list stops only at `}` or at the end of the file.
        let (i, _) = self.sym("}")(i).map_err(|_| {
            let open = self.span(start, &start[1..]);
            let end = self.src.len();
            nom::Err::Failure(PError {
                at: i,
                expected: Vec::new(),
                custom: Some(Box::new(
                    Diagnostic::new(
                        ErrorKind::Syntax {
                            expected: "`}`".to_string(),
                            found: "end of file".to_string(),
                        },
                        Span::new(end, end),
                    )
                    .with_label("expected `}`")
                    .with_secondary(open, "this `{` is never closed"),
                )),
            })
        })?;
        Ok((
            i,
            Block {
                stmts,
                span: self.span(start, i),
            },
        ))
    }

    fn stmt(&self, i: In<'a>) -> PResult<'a, Stmt> {
        let (start, word) = self.peek_word(i)?;
        let (i, kind) = match word {
            Some("let") => self.let_stmt(start)?,
            Some("copy") => self.transfer(start, TransferOp::Copy)?,
            Some("reduce") => self.transfer(start, TransferOp::Reduce)?,
            Some("for") => self.for_stmt(start)?,
            Some("while") => self.while_stmt(start)?,
            Some("if") => self.if_stmt(start)?,
            Some("return") => self.return_stmt(start)?,
            Some("assert") => {
                let (i, _) = self.kw("assert")(start)?;
                let (i, cond) = nom::combinator::cut(|i| self.expr(i)).parse(i)?;
                (self.semi(i)?.0, StmtKind::Assert(cond))
            }
            Some("expect") => self.expect_stmt(start)?,
            Some("fn") => {
                let (i, f) = self.function(start)?;
                (i, StmtKind::Function(Box::new(f)))
            }
            Some(w) if !is_keyword(w) => self.assign_or_call(start)?,
            _ => return Err(nom::Err::Error(PError::expected(start, "a statement"))),
        };
        Ok((
            i,
            Stmt {
                kind,
                span: self.span(start, i),
            },
        ))
    }

    fn semi(&self, i: In<'a>) -> PResult<'a, Span> {
        nom::combinator::cut(self.sym(";")).parse(i)
    }

    fn let_stmt(&self, i: In<'a>) -> PResult<'a, StmtKind> {
        let (i, _) = self.kw("let")(i)?;
        let (i, (name, _, value)) =
            nom::combinator::cut((|i| self.ident(i), self.sym("="), |i| self.expr(i))).parse(i)?;
        let (i, _) = self.semi(i)?;
        Ok((i, StmtKind::Let { name, value }))
    }

    fn assign_or_call(&self, start: In<'a>) -> PResult<'a, StmtKind> {
        let (after_name, name) = self.ident(start)?;
        if let Ok((i, _)) = self.sym("=")(after_name) {
            let (i, value) = nom::combinator::cut(|i| self.expr(i)).parse(i)?;
            let (i, _) = self.semi(i)?;
            return Ok((i, StmtKind::Assign { name, value }));
        }
        if self.sym("(")(after_name).is_err() {
            let at = self.ws(after_name)?.0;
            return Err(nom::Err::Failure(PError {
                at,
                expected: vec!["`=`", "`(`"],
                custom: None,
            }));
        }
        let (i, call) = self.expr(start)?;
        if !matches!(call.kind, ExprKind::Call { .. }) {
            let (at, _) = self.ws(i)?;
            return Err(nom::Err::Failure(PError::expected(at, "`;`")));
        }
        let (i, _) = self.semi(i)?;
        Ok((i, StmtKind::Call(call)))
    }

    fn transfer(&self, i: In<'a>, op: TransferOp) -> PResult<'a, StmtKind> {
        let (i, _) = self.kw(op.keyword())(i)?;
        let (i, (src, _, dst)) =
            nom::combinator::cut((|i| self.expr(i), self.sym("->"), |i| self.expr(i))).parse(i)?;
        let (i, via) = match self.kw("via")(i) {
            Ok((i, _)) => {
                let (i, k) = nom::combinator::cut(|i| self.word(i)).parse(i)?;
                (i, Some(k))
            }
            Err(_) => (i, None),
        };
        let (i, hints) = match self.kw("with")(i) {
            Ok((i, _)) => {
                nom::combinator::cut(nom::multi::separated_list1(self.sym(","), |i| self.hint(i)))
                    .parse(i)?
            }
            Err(_) => (i, Vec::new()),
        };
        let (i, _) = self.semi(i).map_err(|e| {
            self.add_expected(
                e,
                i,
                &["`via`", "`with`"],
                via.is_none() && hints.is_empty(),
            )
        })?;
        Ok((
            i,
            StmtKind::Transfer {
                op,
                src,
                dst,
                via,
                hints,
            },
        ))
    }

    /// Adds alternatives to an "expected" error raised at `at`, when they were possible there.
    fn add_expected(
        &self,
        e: nom::Err<PError<'a>>,
        at: In<'a>,
        more: &[&'static str],
        applies: bool,
    ) -> nom::Err<PError<'a>> {
        let at = self.ws(at).map_or(at, |(i, _)| i);
        e.map(|mut pe| {
            if applies && pe.custom.is_none() && pe.at.len() == at.len() {
                pe.expected.extend_from_slice(more);
            }
            pe
        })
    }

    fn hint(&self, i: In<'a>) -> PResult<'a, Hint> {
        let (start, _) = self.ws(i)?;
        let (i, name) = self.word(start)?;
        let (i, value) = nom::combinator::cut(|i| self.expr(i)).parse(i)?;
        Ok((
            i,
            Hint {
                name,
                value,
                span: self.span(start, i),
            },
        ))
    }

    fn for_stmt(&self, i: In<'a>) -> PResult<'a, StmtKind> {
        let (i, _) = self.kw("for")(i)?;
        let (i, (var, _, start, _, end)) = nom::combinator::cut((
            |i| self.ident(i),
            self.kw("in"),
            |i| self.expr(i),
            self.sym(".."),
            |i| self.expr(i),
        ))
        .parse(i)?;
        let (i, step) = match self.kw("step")(i) {
            Ok((i, _)) => {
                let (i, s) = nom::combinator::cut(|i| self.expr(i)).parse(i)?;
                (i, Some(s))
            }
            Err(_) => (i, None),
        };
        let (i, body) = nom::combinator::cut(|i| self.block(i))
            .parse(i)
            .map_err(|e| self.add_expected(e, i, &["`step`"], step.is_none()))?;
        Ok((
            i,
            StmtKind::For {
                var,
                start,
                end,
                step,
                body,
            },
        ))
    }

    fn while_stmt(&self, i: In<'a>) -> PResult<'a, StmtKind> {
        let (i, _) = self.kw("while")(i)?;
        let (i, (cond, body)) =
            nom::combinator::cut((|i| self.expr(i), |i| self.block(i))).parse(i)?;
        Ok((i, StmtKind::While { cond, body }))
    }

    fn if_stmt(&self, i: In<'a>) -> PResult<'a, StmtKind> {
        let (i, _) = self.kw("if")(i)?;
        let (i, (cond, then)) =
            nom::combinator::cut((|i| self.expr(i), |i| self.block(i))).parse(i)?;
        let (i, els) = match self.kw("else")(i) {
            Ok((i, _)) => {
                let (at, word) = self.peek_word(i)?;
                if word == Some("if") {
                    let _guard = self.enter(at)?;
                    let (i, kind) = self.if_stmt(at)?;
                    let stmt = Stmt {
                        kind,
                        span: self.span(at, i),
                    };
                    (i, Some(Else::If(Box::new(stmt))))
                } else {
                    let (i, b) = nom::combinator::cut(|i| self.block(i))
                        .parse(i)
                        .map_err(|e| self.add_expected(e, i, &["`if`"], true))?;
                    (i, Some(Else::Block(b)))
                }
            }
            Err(_) => (i, None),
        };
        Ok((i, StmtKind::If { cond, then, els }))
    }

    fn return_stmt(&self, i: In<'a>) -> PResult<'a, StmtKind> {
        let (i, _) = self.kw("return")(i)?;
        if let Ok((i, _)) = self.sym(";")(i) {
            return Ok((i, StmtKind::Return(None)));
        }
        let (i, value) = nom::combinator::cut(|i| self.expr(i))
            .parse(i)
            .map_err(|e| self.add_expected(e, i, &["`;`"], true))?;
        let (i, _) = self.semi(i)?;
        Ok((i, StmtKind::Return(Some(value))))
    }

    fn expect_stmt(&self, i: In<'a>) -> PResult<'a, StmtKind> {
        let (i, _) = self.kw("expect")(i)?;
        // Above comparisons, so the `==` that follows is ours.
        let (i, (dst, _)) = nom::combinator::cut(|i| self.expr_bp(i, 5)).parse(i)?;
        let (i, _) = nom::combinator::cut(self.sym("==")).parse(i)?;
        let (i, srcs) =
            nom::combinator::cut(nom::multi::separated_list1(self.sym(","), |i| self.expr(i)))
                .parse(i)?;
        let (i, _) = self.semi(i)?;
        Ok((i, StmtKind::Expect { dst, srcs }))
    }

    // ----- top level -----

    fn function(&self, start: In<'a>) -> PResult<'a, Function> {
        let (i, _) = self.kw("fn")(start)?;
        let (i, (name, _)) = nom::combinator::cut((|i| self.ident(i), self.sym("("))).parse(i)?;
        let (i, params) = if let Ok((i, _)) = self.sym(")")(i) {
            (i, Vec::new())
        } else {
            let (i, ps) = nom::combinator::cut(nom::multi::separated_list1(self.sym(","), |i| {
                self.param(i)
            }))
            .parse(i)?;
            let (i, _) = self.sym(")")(i)
                .map_err(|_| nom::Err::Failure(self.expected_at(i, &["`,`", "`)`"])))?;
            (i, ps)
        };
        let (i, ret) = match self.sym("->")(i) {
            Ok((i, _)) => {
                let (i, t) = nom::combinator::cut(|i| self.word(i)).parse(i)?;
                (i, Some(TypeName { name: t }))
            }
            Err(_) => (i, None),
        };
        let (i, body) = nom::combinator::cut(|i| self.block(i))
            .parse(i)
            .map_err(|e| self.add_expected(e, i, &["`->`"], ret.is_none()))?;
        Ok((
            i,
            Function {
                name,
                params,
                ret,
                body,
                span: self.span(start, i),
            },
        ))
    }

    fn param(&self, i: In<'a>) -> PResult<'a, Param> {
        let (start, _) = self.ws(i)?;
        let (i, name) = self.ident(start)?;
        let (i, ty) = match self.sym(":")(i) {
            Ok((i, _)) => {
                let (i, t) = nom::combinator::cut(|i| self.word(i)).parse(i)?;
                (i, Some(TypeName { name: t }))
            }
            Err(_) => (i, None),
        };
        Ok((
            i,
            Param {
                name,
                ty,
                span: self.span(start, i),
            },
        ))
    }

    fn header(&self, start: In<'a>) -> PResult<'a, Header> {
        let (i, _) = self.kw("collective")(start)?;
        let (i, (kind, name, _)) =
            nom::combinator::cut((|i| self.word(i), |i| self.ident(i), self.sym("("))).parse(i)?;
        let (i, params) = if let Ok((i, _)) = self.sym(")")(i) {
            (i, Vec::new())
        } else {
            let (i, ps) = nom::combinator::cut(nom::multi::separated_list1(self.sym(","), |i| {
                self.ident(i)
            }))
            .parse(i)?;
            let (i, _) = self.sym(")")(i)
                .map_err(|_| nom::Err::Failure(self.expected_at(i, &["`,`", "`)`"])))?;
            (i, ps)
        };
        let (i, _) = nom::combinator::cut(self.sym("{")).parse(i)?;
        let (i, items) = self.recovering_list(i, true, |i| self.header_item(i));
        let (i, _) = nom::combinator::cut(self.sym("}")).parse(i)?;
        Ok((
            i,
            Header {
                kind,
                name,
                params,
                items,
                span: self.span(start, i),
            },
        ))
    }

    fn header_item(&self, i: In<'a>) -> PResult<'a, HeaderItem> {
        let (start, word) = self.peek_word(i)?;
        let Some(word) = word else {
            return Err(nom::Err::Error(PError::expected(start, "a header item")));
        };
        let (i, kw) = self.word(start)?;
        let (i, kind) = match word {
            "chunks" => {
                let (i, e) = nom::combinator::cut(|i| self.expr(i)).parse(i)?;
                (i, HeaderItemKind::Chunks(e))
            }
            "ranks" => {
                let (i, e) = nom::combinator::cut(|i| self.expr(i)).parse(i)?;
                (i, HeaderItemKind::Ranks(e))
            }
            "inplace" => (i, HeaderItemKind::InPlace),
            "outofplace" => (i, HeaderItemKind::OutOfPlace),
            "topology" | "needs" => {
                let (i, names) =
                    nom::combinator::cut(nom::multi::separated_list1(self.sym(","), |i| {
                        self.word(i)
                    }))
                    .parse(i)?;
                if word == "topology" {
                    (i, HeaderItemKind::Topology(names))
                } else {
                    (i, HeaderItemKind::Needs(names))
                }
            }
            "scratch" => {
                let (i, (name, _, size, _)) = nom::combinator::cut((
                    |i| self.ident(i),
                    self.sym("["),
                    |i| self.expr(i),
                    self.sym("]"),
                ))
                .parse(i)?;
                (i, HeaderItemKind::Scratch { name, size })
            }
            "ensure" => {
                let (i, b) = nom::combinator::cut(|i| self.block(i)).parse(i)?;
                return Ok((
                    i,
                    HeaderItem {
                        kind: HeaderItemKind::Ensure(b),
                        span: self.span(start, i),
                    },
                ));
            }
            w if HEADER_HINTS.contains(&w) => {
                let (i, value) = nom::combinator::cut(|i| self.expr(i)).parse(i)?;
                let span = self.span(start, i);
                (
                    i,
                    HeaderItemKind::Hint(Hint {
                        name: kw,
                        value,
                        span,
                    }),
                )
            }
            _ => {
                let mut d = Diagnostic::new(
                    ErrorKind::UnknownHeaderItem {
                        name: word.to_string(),
                    },
                    kw.span,
                )
                .with_label("not a header item");
                let all = HEADER_ITEMS.iter().chain(HEADER_HINTS).copied();
                if let Some(s) = did_you_mean(word, all) {
                    d = d.with_note(s);
                }
                return self.fail(start, d);
            }
        };
        let (i, _) = self.semi(i)?;
        Ok((
            i,
            HeaderItem {
                kind,
                span: self.span(start, i),
            },
        ))
    }

    fn top_item(&self, i: In<'a>) -> PResult<'a, Item> {
        let (start, word) = self.peek_word(i)?;
        match word {
            Some("collective") => self.header(start).map(|(i, h)| (i, Item::Collective(h))),
            Some("fn") => self.function(start).map(|(i, f)| (i, Item::Function(f))),
            _ => self
                .stmt(start)
                .map(|(i, s)| (i, Item::Stmt(s)))
                .map_err(|e| {
                    e.map(|mut pe| {
                        if pe.at.len() == start.len() && pe.custom.is_none() {
                            pe.expected = vec!["`collective`", "`fn`", "a statement"];
                        }
                        pe
                    })
                }),
        }
    }

    fn top_items(&self, i: In<'a>) -> Vec<Item> {
        let (rest, items) = self.recovering_list(i, false, |i| self.top_item(i));
        if !rest.is_empty() && self.diags.borrow().is_empty() {
            // Only a stray `}` stops the top-level list.
            self.report(PError::expected(rest, "`collective`, `fn` or a statement"));
        }
        items
    }

    /// Parses items until `}` (when `in_block`) or the end, reporting each failure and
    /// resuming after it.
    fn recovering_list<T>(
        &self,
        mut i: In<'a>,
        in_block: bool,
        item: impl Fn(In<'a>) -> PResult<'a, T>,
    ) -> (In<'a>, Vec<T>) {
        let mut out = Vec::new();
        loop {
            match self.ws(i) {
                Ok((rest, _)) => i = rest,
                Err(nom::Err::Error(e) | nom::Err::Failure(e)) => {
                    self.report(e);
                    return ("", out);
                }
                Err(nom::Err::Incomplete(_)) => return ("", out),
            }
            if i.is_empty() || (i.starts_with('}') && (in_block || self.depth.get() == 0)) {
                if i.starts_with('}') && !in_block {
                    // A stray `}` at the top level.
                    self.report(PError::expected(i, "`collective`, `fn` or a statement"));
                    i = &i[1..];
                    continue;
                }
                return (i, out);
            }
            match item(i) {
                Ok((rest, x)) => {
                    out.push(x);
                    i = rest;
                }
                Err(nom::Err::Error(e) | nom::Err::Failure(e)) => {
                    let at = e.at;
                    self.report(e);
                    if self.diags.borrow().len() >= MAX_ERRORS {
                        return ("", out);
                    }
                    let resumed = self.resync(at);
                    i = if resumed.len() >= i.len() {
                        // No progress: skip one character.
                        let mut chars = i.chars();
                        chars.next();
                        chars.as_str()
                    } else {
                        resumed
                    };
                }
                Err(nom::Err::Incomplete(_)) => return ("", out),
            }
        }
    }

    /// Skips to just after the next `;` or balanced `{...}` at the current level, or to
    /// the `}` that closes the enclosing block.
    fn resync(&self, mut i: In<'a>) -> In<'a> {
        let mut depth = 0usize;
        while let Some(c) = i.chars().next() {
            if let Some(len) = comment_len(i) {
                i = &i[len.unwrap_or_else(|l| l)..];
                continue;
            }
            match c {
                ';' if depth == 0 => return &i[1..],
                '{' => depth += 1,
                '}' if depth == 0 => return i,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        return &i[1..];
                    }
                }
                _ => {}
            }
            i = &i[c.len_utf8()..];
        }
        i
    }

    fn report(&self, e: PError<'a>) {
        let mut diags = self.diags.borrow_mut();
        if diags.len() >= MAX_ERRORS {
            return;
        }
        // An unterminated comment swallows the rest of the file; what is then missing at
        // the end is a consequence, not a second mistake.
        let at_end = e.at.trim_start().is_empty();
        if at_end
            && e.custom.is_none()
            && diags
                .iter()
                .any(|d| d.kind == ErrorKind::UnterminatedComment)
        {
            return;
        }
        let diag = match e.custom {
            Some(d) => *d,
            None => {
                let at = self.ws(e.at).map_or(e.at, |(i, _)| i);
                let (found, len) = describe(at);
                let off = self.off(at);
                let mut expected = e.expected;
                expected.dedup();
                let expected = if expected.is_empty() {
                    "something else".to_string()
                } else {
                    join_alternatives(&expected)
                };
                let kind = ErrorKind::Syntax {
                    expected: expected.clone(),
                    found: found.clone(),
                };
                // When the token found is on a later line, what is missing belongs at the
                // end of the previous token, as in `let x = 1` followed by `}`.
                let before = &self.src[..off];
                let prev_end = before.trim_end().len();
                if prev_end > 0 && before[prev_end..].contains('\n') {
                    Diagnostic::new(kind, Span::new(prev_end, prev_end))
                        .with_label(format!("expected {expected} after this"))
                        .with_secondary(Span::new(off, off + len), format!("found {found}"))
                } else {
                    Diagnostic::new(kind, Span::new(off, off + len))
                        .with_label(format!("expected {expected}"))
                }
            }
        };
        diags.push(diag);
        if diags.len() == MAX_ERRORS {
            let last = diags[MAX_ERRORS - 1].span;
            diags.push(Diagnostic::new(ErrorKind::TooManyErrors(MAX_ERRORS), last));
        }
    }
}

/// Runs `f` with at least 128 KiB of stack left, switching to a fresh heap segment if not.
pub fn grow<R>(f: impl FnOnce() -> R) -> R {
    stacker::maybe_grow(128 * 1024, 2 * 1024 * 1024, f)
}

fn quoted(s: &'static str) -> &'static str {
    // Static strings for every token we ever expect, so errors stay allocation-free.
    match s {
        "->" => "`->`",
        "==" => "`==`",
        "!=" => "`!=`",
        "<=" => "`<=`",
        ">=" => "`>=`",
        "<<" => "`<<`",
        ">>" => "`>>`",
        ".." => "`..`",
        "+" => "`+`",
        "-" => "`-`",
        "*" => "`*`",
        "/" => "`/`",
        "%" => "`%`",
        "&" => "`&`",
        "|" => "`|`",
        "^" => "`^`",
        "~" => "`~`",
        "<" => "`<`",
        ">" => "`>`",
        "=" => "`=`",
        "(" => "`(`",
        ")" => "`)`",
        "[" => "`[`",
        "]" => "`]`",
        "{" => "`{`",
        "}" => "`}`",
        ";" => "`;`",
        "," => "`,`",
        ":" => "`:`",
        "collective" => "`collective`",
        "fn" => "`fn`",
        "let" => "`let`",
        "for" => "`for`",
        "in" => "`in`",
        "step" => "`step`",
        "while" => "`while`",
        "if" => "`if`",
        "else" => "`else`",
        "return" => "`return`",
        "assert" => "`assert`",
        "copy" => "`copy`",
        "reduce" => "`reduce`",
        "via" => "`via`",
        "with" => "`with`",
        "expect" => "`expect`",
        "not" => "`not`",
        _ => "a token",
    }
}

/// The value of an integer literal's text: `_` separators are ignored, `0x`/`0X` starts a
/// hexadecimal one. Fails when the value does not fit an `i64` (or the text is not digits).
pub(crate) fn int_literal(text: &str) -> Result<i64, std::num::ParseIntError> {
    let digits: String = text.chars().filter(|&c| c != '_').collect();
    match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(h) => i64::from_str_radix(h, 16),
        None => digits.parse::<i64>(),
    }
}

/// What the text at a position looks like, for "found ..." and the caret's length.
fn describe(at: &str) -> (String, usize) {
    let Some(c) = at.chars().next() else {
        return ("end of file".to_string(), 0);
    };
    if is_ident_char(c) {
        let end = at.find(|c: char| !is_ident_char(c)).unwrap_or(at.len());
        let w = &at[..end];
        let what = if is_keyword(w) { "keyword" } else { "" };
        let shown = if end > 40 { &w[..40] } else { w };
        let text = if what.is_empty() {
            format!("`{shown}`")
        } else {
            format!("{what} `{shown}`")
        };
        return (text, end);
    }
    if let Some(p) = Parser::punct_at(at) {
        return (format!("`{p}`"), p.len());
    }
    if c.is_control() {
        return (format!("character U+{:04X}", c as u32), c.len_utf8());
    }
    (format!("`{c}`"), c.len_utf8())
}

fn join_alternatives(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => (*one).to_string(),
        [rest @ .., last] => format!("{} or {}", rest.join(", "), last),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrow_is_not_minus() {
        let p = parse("collective allreduce r(n) { chunks 1; }\ncopy input[0][0] -> input[1];\n")
            .expect("parses");
        assert_eq!(p.items.len(), 2);
    }

    #[test]
    fn recovers_after_errors() {
        let errs =
            parse("collective allreduce r(n) { chunks 1; }\nlet = 1;\nlet y = ;\nlet z = 3;\n")
                .expect_err("two errors");
        assert_eq!(errs.len(), 2, "{errs:?}");
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let src = format!("let x = {}1{};", "(".repeat(100_000), ")".repeat(100_000));
        let errs = parse(&src).expect_err("too deep");
        assert!(matches!(errs[0].kind, ErrorKind::TooDeep { .. }));
        let src = format!("let x = 1{};", " + 1".repeat(100_000));
        assert!(parse(&src).is_err());
        let src = format!("let x = {}1;", "- ".repeat(100_000));
        assert!(parse(&src).is_err());
    }
}
