//! Name resolution and type checking: a parsed [`Program`] to a [`Summary`], or every error
//! found, in source order.
//!
//! Rules (see `LANGUAGE.md`):
//! - A file has exactly one `collective` header with a known kind and one parameter, the
//!   rank-count name (an `int` that cannot be assigned). Items other than `scratch` and
//!   `param` appear at most once (those once per name); `chunks` is required; `ensure`
//!   belongs to `custom` collectives, which need it. A `param` is a program-wide `int` that
//!   cannot be assigned, visible to the header items after it, functions and the body.
//! - Scopes, innermost first: blocks (a `for` variable lives in its body's scope, parameters
//!   in the function body's scope), then globals. Header expressions see the rank-count name,
//!   the constants and the `param`s before them; function bodies, `ensure` and the body also
//!   see the buffers (`input`, `output`, scratch names). Functions also read (never assign)
//!   the `let`s of the body's top level, wherever they stand in the file; the body is checked
//!   first so their types are known. A `let` may shadow a name of an outer scope but not one
//!   of its own scope. Functions live in their own namespace (user functions plus built-ins);
//!   they may be called before they are defined and may not redefine a built-in or each other.
//! - Every expression has one of the types `int`, `bool`, `buffer`, `chunk`, `table`; there
//!   are no conversions. An expression whose checking failed (here or in an operand) has no
//!   type (`None` here), and nothing is reported against it again, so one mistake gives one
//!   diagnostic. Calls keep their declared result type and chunk references are chunks
//!   whatever is wrong inside them, since that is what the writer meant. `NAME[i]` where
//!   `NAME` is a table is an `int` (one index, nothing else); both branches of
//!   `if c then a else b` have one type.
//! - A chunk reference may leave out its index only as a transfer's destination. Only a
//!   `reduce` takes several sources.
//! - `ensure` holds control flow and `expect` only; it may not call functions that copy or
//!   reduce (directly or through other functions). `expect` appears only there.
//!
//! Without a header (or without a rank-count parameter) the rank-count name is unknown, so
//! unknown names are not reported: they would mostly repeat the missing header.
use crate::ast::*;
use crate::builtins::{
    BUFFERS, Builtin, CAPABILITIES, CHANNEL_KINDS, CONSTANTS, CollectiveKind, PROTOCOLS,
    TOPOLOGIES, TRANSFER_HINTS, Type,
};
use crate::diagnostic::{Diagnostic, ErrorKind, did_you_mean};
use crate::parser::{MAX_ERRORS, grow};
use crate::source::Span;
use std::collections::HashMap;

/// What the checker learned about a valid program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub kind: CollectiveKind,
    pub name: String,
    pub inplace: bool,
    /// The header's rank-count name (conventionally `n`).
    pub ranks_name: String,
    /// Scratch buffer names in header order.
    pub scratch: Vec<String>,
    /// `needs switch;`
    pub needs_switch: bool,
    /// `needs net;`
    pub needs_net: bool,
    /// Topologies from `topology`, as written; `["any"]` when the item is absent.
    pub topologies: Vec<String>,
    /// Names of the header's `param` items, in header order.
    pub params: Vec<String>,
}

/// Checks names and types of a whole program. On failure, returns the first [`MAX_ERRORS`]
/// errors found, sorted by where they start, then one [`ErrorKind::MoreErrors`] counting the
/// rest if there were more.
pub fn check(program: &Program) -> Result<Summary, Vec<Diagnostic>> {
    let mut c = Checker::default();
    let summary = c.program(program);
    let mut diags = c.diags;
    match summary {
        Some(s) if diags.is_empty() => Ok(s),
        _ => {
            if diags.is_empty() {
                // A missing summary always comes with a diagnostic; stay an error regardless.
                diags.push(
                    Diagnostic::new(ErrorKind::MissingHeader, Span::new(0, 0))
                        .with_label("expected a `collective` header"),
                );
            }
            // Stable: diagnostics starting at the same place keep the order they were found.
            diags.sort_by_key(|d| d.span.start);
            if c.omitted > 0 {
                let last = diags.last().map_or(Span::new(0, 0), |d| d.span);
                diags.push(
                    Diagnostic::new(
                        ErrorKind::MoreErrors {
                            shown: diags.len(),
                            more: c.omitted,
                        },
                        last,
                    )
                    .with_note("fix the errors shown and check again"),
                );
            }
            Err(diags)
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum VarKind {
    Let,
    Loop,
    Param,
    RankCount,
    Constant,
    Buffer,
    /// A header `param`.
    ProgramParam,
    /// A `let` of the body's top level, as a function body sees it.
    TopLevel,
}

impl VarKind {
    /// Why a name of this kind cannot be assigned, for the message.
    fn not_assignable(self) -> Option<&'static str> {
        match self {
            VarKind::Let => None,
            VarKind::Loop => Some("it is a loop variable"),
            VarKind::Param => Some("it is a function parameter"),
            VarKind::RankCount => Some("it is the rank count"),
            VarKind::Constant => Some("it is a built-in constant"),
            VarKind::Buffer => Some("it is a buffer"),
            VarKind::ProgramParam => Some("it is a program parameter, set with `--param`"),
            VarKind::TopLevel => Some("functions only read the body's top-level variables"),
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Var {
    /// `None` when the definition already failed to check.
    ty: Option<Type>,
    kind: VarKind,
    /// Where it was defined; `None` for built-ins.
    def: Option<Span>,
}

/// What a function gives back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ret {
    Nothing,
    /// `None` when the written type name is unknown (already reported).
    Value(Option<Type>),
}

#[derive(Debug)]
struct FnInfo<'a> {
    def: &'a Function,
    params: Vec<Option<Type>>,
    ret: Ret,
    /// The first `copy`/`reduce` written directly in the body.
    transfer: Option<Span>,
    /// Names of the functions its body calls.
    calls: Vec<&'a str>,
    /// A transfer it performs directly or through calls; set once all bodies are checked.
    effect: Option<Span>,
}

/// Where the statements being checked are.
#[derive(Clone, Copy, Debug, Default)]
struct Ctx {
    /// Index into `Checker::funcs` of the enclosing function.
    func: Option<usize>,
    ensure: bool,
}

/// How a call's result is used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Use {
    Value,
    Stmt,
}

#[derive(Debug, Default)]
struct Checker<'a> {
    /// At most [`MAX_ERRORS`], in the order found.
    diags: Vec<Diagnostic>,
    /// Diagnostics found after `diags` was full.
    omitted: usize,
    globals: HashMap<&'a str, Var>,
    /// Local scopes, innermost last.
    frames: Vec<HashMap<&'a str, Var>>,
    /// Every function definition (duplicates and nested ones included) in source order.
    funcs: Vec<FnInfo<'a>>,
    /// The definition a name resolves to: the first one.
    by_name: HashMap<&'a str, usize>,
    /// The `let`s of the body's top level, which function bodies may read.
    top: HashMap<&'a str, Var>,
    /// Suppresses unknown-name errors when the rank-count name is missing.
    lenient: bool,
    ctx: Ctx,
}

/// What the header pass hands to the rest of the check.
struct HeaderInfo<'a> {
    kind: Option<CollectiveKind>,
    ranks: Option<&'a Ident>,
    inplace: bool,
    scratch: Vec<&'a Ident>,
    params: Vec<&'a Ident>,
    topologies: Vec<String>,
    needs: Vec<String>,
    ensures: Vec<&'a Block>,
}

const TYPE_NAMES: [&str; 5] = ["int", "bool", "buffer", "chunk", "table"];

impl<'a> Checker<'a> {
    /// Keeps the first [`MAX_ERRORS`] diagnostics and counts the rest.
    fn report(&mut self, d: Diagnostic) {
        if self.full() {
            self.omitted += 1;
        } else {
            self.diags.push(d);
        }
    }

    /// Whether further diagnostics are only counted, so building them (notes with
    /// suggestions) can be skipped.
    fn full(&self) -> bool {
        self.diags.len() >= MAX_ERRORS
    }

    fn program(&mut self, p: &'a Program) -> Option<Summary> {
        let headers: Vec<&'a Header> = p
            .items
            .iter()
            .filter_map(|i| match i {
                Item::Collective(h) => Some(h),
                _ => None,
            })
            .collect();

        // Signatures first, so calls may precede definitions. Nested functions are declared
        // too (and reported where they stand), so their calls do not add errors.
        let mut fns: Vec<&'a Function> = Vec::new();
        for item in &p.items {
            match item {
                Item::Function(f) => {
                    fns.push(f);
                    nested_in_block(&f.body, &mut fns);
                }
                Item::Stmt(s) => nested_in_stmt(s, &mut fns),
                Item::Collective(h) => {
                    for it in &h.items {
                        if let HeaderItemKind::Ensure(b) = &it.kind {
                            nested_in_block(b, &mut fns);
                        }
                    }
                }
            }
        }
        fns.sort_by_key(|f| f.span.start);
        for f in fns {
            self.declare_fn(f);
        }

        for &c in CONSTANTS {
            self.globals.insert(
                c,
                Var {
                    ty: Some(Type::Int),
                    kind: VarKind::Constant,
                    def: None,
                },
            );
        }

        let info = match headers.first() {
            Some(h) => Some(self.header(h)),
            None if p.items.is_empty() => {
                // Nothing but whitespace and comments.
                let end = p.span.end as usize;
                self.report(
                    Diagnostic::new(ErrorKind::EmptyFile, Span::new(end, end))
                        .with_label("nothing here")
                        .with_note("a file starts with `collective KIND NAME(n) { chunks E; }`"),
                );
                None
            }
            None => {
                let at = p.items.first().map_or(0, |i| i.span().start as usize);
                self.report(
                    Diagnostic::new(ErrorKind::MissingHeader, Span::new(at, at))
                        .with_label("expected a `collective` header")
                        .with_note("a file needs `collective KIND NAME(n) { chunks E; }`"),
                );
                None
            }
        };
        for h in headers.iter().skip(1) {
            let first = headers[0];
            self.report(
                Diagnostic::new(ErrorKind::DuplicateHeader, head_span(h))
                    .with_label("second header")
                    .with_secondary(head_span(first), "first header here")
                    .with_note("a file describes exactly one collective"),
            );
        }
        if info.is_none() {
            self.lenient = true;
        }

        // Buffers become visible after the header's own expressions were checked.
        for &b in BUFFERS {
            self.globals.insert(
                b,
                Var {
                    ty: Some(Type::Buffer),
                    kind: VarKind::Buffer,
                    def: None,
                },
            );
        }
        if let Some(info) = &info {
            for s in &info.scratch {
                self.define_scratch(s);
            }
        }

        // The body before the functions, so that they know its top-level variables.
        self.frames = vec![HashMap::new()];
        self.ctx = Ctx::default();
        for item in &p.items {
            if let Item::Stmt(s) = item {
                self.stmt(s);
            }
        }
        self.top = self.frames.pop().unwrap_or_default();
        for v in self.top.values_mut() {
            v.kind = VarKind::TopLevel;
        }

        for i in 0..self.funcs.len() {
            self.function_body(i);
        }
        self.compute_effects();

        if let Some(info) = &info {
            for b in &info.ensures {
                self.frames = vec![HashMap::new()];
                self.ctx = Ctx {
                    func: None,
                    ensure: true,
                };
                self.stmts(&b.stmts);
            }
        }

        let info = info?;
        let h = headers.first()?;
        Some(Summary {
            kind: info.kind?,
            name: h.name.name.clone(),
            inplace: info.inplace,
            ranks_name: info.ranks?.name.clone(),
            scratch: info.scratch.iter().map(|s| s.name.clone()).collect(),
            params: info.params.iter().map(|s| s.name.clone()).collect(),
            needs_switch: info.needs.iter().any(|n| n == "switch"),
            needs_net: info.needs.iter().any(|n| n == "net"),
            topologies: if info.topologies.is_empty() {
                vec!["any".to_string()]
            } else {
                info.topologies
            },
        })
    }
}

// ----- helpers -----

fn mismatch(expected: &str, found: &str, span: Span) -> Diagnostic {
    Diagnostic::new(
        ErrorKind::TypeMismatch {
            expected: expected.to_string(),
            found: found.to_string(),
        },
        span,
    )
}

fn with_suggestion<'c>(
    d: Diagnostic,
    name: &str,
    candidates: impl IntoIterator<Item = &'c str>,
) -> Diagnostic {
    // Any one-letter name is one edit from any other: suggesting `n` for `x` is noise.
    if name.chars().count() < 2 {
        return d;
    }
    match did_you_mean(name, candidates) {
        Some(s) => d.with_note(s),
        None => d,
    }
}

/// `collective KIND NAME`, the part of a header that names it.
fn head_span(h: &Header) -> Span {
    Span::new(h.span.start as usize, h.name.span.end as usize)
}

/// The keyword that starts a header item.
fn keyword_span(item: &HeaderItem) -> Span {
    match &item.kind {
        HeaderItemKind::Hint(h) => h.name.span,
        k => {
            let start = item.span.start as usize;
            Span::new(start, start + k.keyword().len())
        }
    }
}

/// The keyword that starts a statement (`kw` is what the parser matched there).
fn keyword_at(s: &Stmt, kw: &str) -> Span {
    let start = s.span.start as usize;
    Span::new(start, (start + kw.len()).min(s.span.end as usize))
}

fn strip_parens(mut e: &Expr) -> &Expr {
    while let ExprKind::Paren(inner) = &e.kind {
        e = inner;
    }
    e
}

/// The value of an integer literal, possibly negated or parenthesized.
fn literal_int(e: &Expr) -> Option<i64> {
    match &e.kind {
        ExprKind::Int(v) => Some(*v),
        ExprKind::Paren(x) => grow(|| literal_int(x)),
        ExprKind::Unary(UnOp::Neg, x) => grow(|| literal_int(x))?.checked_neg(),
        _ => None,
    }
}

/// Whether every path through `stmts` reaches a `return`: one of them is a `return`, or an
/// `if` whose every branch always returns. Loops may run zero times, so they never count.
fn always_returns(stmts: &[Stmt]) -> bool {
    stmts.iter().any(stmt_returns)
}

fn stmt_returns(s: &Stmt) -> bool {
    grow(|| match &s.kind {
        StmtKind::Return(_) => true,
        StmtKind::If {
            then,
            els: Some(els),
            ..
        } => {
            always_returns(&then.stmts)
                && match els {
                    Else::Block(b) => always_returns(&b.stmts),
                    Else::If(s) => stmt_returns(s),
                }
        }
        _ => false,
    })
}

/// Collects functions defined inside blocks (reported as errors, but still declared).
fn nested_in_block<'a>(b: &'a Block, out: &mut Vec<&'a Function>) {
    grow(|| {
        for s in &b.stmts {
            nested_in_stmt(s, out);
        }
    });
}

fn nested_in_stmt<'a>(s: &'a Stmt, out: &mut Vec<&'a Function>) {
    match &s.kind {
        StmtKind::Function(f) => {
            out.push(f);
            nested_in_block(&f.body, out);
        }
        StmtKind::For { body, .. } | StmtKind::While { body, .. } => nested_in_block(body, out),
        StmtKind::If { then, els, .. } => {
            nested_in_block(then, out);
            match els {
                Some(Else::Block(b)) => nested_in_block(b, out),
                Some(Else::If(s)) => grow(|| nested_in_stmt(s, out)),
                None => {}
            }
        }
        _ => {}
    }
}

/// A short rendering of an expression, for messages.
fn show(e: &Expr) -> String {
    grow(|| match &e.kind {
        ExprKind::Int(v) => v.to_string(),
        ExprKind::Bool(b) => b.to_string(),
        ExprKind::Name(id) => id.name.clone(),
        ExprKind::Unary(UnOp::Not, x) => format!("not {}", show(x)),
        ExprKind::Unary(op, x) => format!("{}{}", op.symbol(), show(x)),
        ExprKind::Binary(op, l, r) => format!("{} {} {}", show(l), op.symbol(), show(r)),
        ExprKind::Call { func, args } => {
            let args: Vec<String> = args.iter().map(show).collect();
            format!("{}({})", func.name, args.join(", "))
        }
        ExprKind::Chunk(c) => {
            let sel = |s: &Selector| match s {
                Selector::One(e) => show(e),
                Selector::All(_) => "*".to_string(),
                Selector::Range(a, b) => format!("{}..{}", show(a), show(b)),
            };
            match &c.index {
                Some(i) => format!("{}[{}][{}]", c.buffer.name, sel(&c.ranks), sel(i)),
                None => format!("{}[{}]", c.buffer.name, sel(&c.ranks)),
            }
        }
        ExprKind::Paren(x) => format!("({})", show(x)),
        ExprKind::If { cond, then, els } => {
            format!("if {} then {} else {}", show(cond), show(then), show(els))
        }
        ExprKind::Table(items) => {
            let items: Vec<String> = items.iter().map(show).collect();
            format!("[{}]", items.join(", "))
        }
    })
}

mod exprs;
mod header;
mod scope;
mod stmts;
#[cfg(test)]
mod tests;
