//! Name resolution and type checking: a parsed [`Program`] to a [`Summary`], or every error
//! found, in source order.
//!
//! Rules (see `LANGUAGE.md`):
//! - A file has exactly one `collective` header with a known kind and one parameter, the
//!   rank-count name (an `int` that cannot be assigned). Items other than `scratch` appear at
//!   most once; `chunks` is required; `ensure` belongs to `custom` collectives, which need it.
//! - Scopes, innermost first: blocks (a `for` variable lives in its body's scope, parameters
//!   in the function body's scope), then globals. Header expressions see the rank-count name
//!   and the constants; function bodies, `ensure` and the body also see the buffers (`input`,
//!   `output`, scratch names). Functions see globals, never the body's variables. A `let` may
//!   shadow a name of an outer scope but not one of its own scope. Functions live in their
//!   own namespace (user functions plus built-ins); they may be called before they are
//!   defined and may not redefine a built-in or each other.
//! - Every expression has one of the types `int`, `bool`, `buffer`, `chunk`; there are no
//!   conversions. An expression whose checking failed (here or in an operand) has no type
//!   (`None` here), and nothing is reported against it again, so one mistake gives one
//!   diagnostic. Calls keep their declared result type and chunk references are chunks
//!   whatever is wrong inside them, since that is what the writer meant.
//! - A chunk reference may leave out its index only as a transfer's destination.
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
    topologies: Vec<String>,
    needs: Vec<String>,
    ensures: Vec<&'a Block>,
}

const TYPE_NAMES: [&str; 4] = ["int", "bool", "buffer", "chunk"];

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

        self.frames = vec![HashMap::new()];
        self.ctx = Ctx::default();
        for item in &p.items {
            if let Item::Stmt(s) = item {
                self.stmt(s);
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
            needs_switch: info.needs.iter().any(|n| n == "switch"),
            needs_net: info.needs.iter().any(|n| n == "net"),
            topologies: if info.topologies.is_empty() {
                vec!["any".to_string()]
            } else {
                info.topologies
            },
        })
    }

    // ----- header -----

    fn header(&mut self, h: &'a Header) -> HeaderInfo<'a> {
        let kind = CollectiveKind::from_name(&h.kind.name);
        if kind.is_none() {
            let mut d = Diagnostic::new(
                ErrorKind::UnknownCollective {
                    name: h.kind.name.clone(),
                },
                h.kind.span,
            )
            .with_label("not a collective kind");
            let names = CollectiveKind::ALL.map(|k| k.name());
            d = with_suggestion(d, &h.kind.name, names);
            self.report(d.with_note(format!("collectives: {}", names.join(", "))));
        }

        let ranks = h.params.first();
        match h.params.len() {
            1 => {}
            0 => {
                // Uses of the rank count cannot resolve; don't report each one.
                self.lenient = true;
                self.report(
                    Diagnostic::new(ErrorKind::HeaderParams { found: 0 }, h.name.span)
                        .with_label("needs the rank-count name")
                        .with_note(format!("write `{}(n)`", h.name.name)),
                );
            }
            found => {
                let extra = h.params[1..]
                    .iter()
                    .fold(h.params[1].span, |s, p| s.to(p.span));
                self.report(
                    Diagnostic::new(ErrorKind::HeaderParams { found }, extra)
                        .with_label("extra parameters")
                        .with_note("the only parameter names the rank count"),
                );
            }
        }
        if let Some(r) = ranks {
            let clash = if CONSTANTS.contains(&r.name.as_str()) {
                Some("a built-in constant")
            } else if BUFFERS.contains(&r.name.as_str()) {
                Some("a built-in buffer")
            } else {
                None
            };
            match clash {
                Some(what) => self.report(
                    Diagnostic::new(
                        ErrorKind::Duplicate {
                            name: r.name.clone(),
                        },
                        r.span,
                    )
                    .with_label(format!("`{}` is {what}", r.name))
                    .with_note("name the rank count something else, e.g. `n`"),
                ),
                None => {
                    self.globals.insert(
                        &r.name,
                        Var {
                            ty: Some(Type::Int),
                            kind: VarKind::RankCount,
                            def: Some(r.span),
                        },
                    );
                }
            }
        }

        let mut info = HeaderInfo {
            kind,
            ranks,
            inplace: false,
            scratch: Vec::new(),
            topologies: Vec::new(),
            needs: Vec::new(),
            ensures: Vec::new(),
        };
        // First keyword span of each item, for duplicates; and the first placement item.
        let mut seen: HashMap<&'a str, Span> = HashMap::new();
        let mut placement: Option<(&'a str, Span)> = None;
        let mut has_chunks = false;
        for item in &h.items {
            let kw_name = item.kind.keyword();
            let kw = keyword_span(item);
            if !matches!(item.kind, HeaderItemKind::Scratch { .. }) {
                match seen.get(kw_name) {
                    Some(&first) => self.report(
                        Diagnostic::new(
                            ErrorKind::DuplicateHeaderItem {
                                item: kw_name.to_string(),
                            },
                            kw,
                        )
                        .with_label("given again here")
                        .with_secondary(first, "first given here"),
                    ),
                    None => {
                        seen.insert(kw_name, kw);
                    }
                }
            }
            match &item.kind {
                HeaderItemKind::Chunks(e) => {
                    has_chunks = true;
                    let t = self.expr(e);
                    self.want(t, Type::Int, e.span, "the chunk count must be an int");
                }
                HeaderItemKind::InPlace | HeaderItemKind::OutOfPlace => {
                    match placement {
                        Some((first, span)) if first != kw_name => self.report(
                            Diagnostic::new(ErrorKind::ConflictingPlacement, kw)
                                .with_label(format!("`{kw_name}` here"))
                                .with_secondary(span, format!("`{first}` here"))
                                .with_note("keep one of them; `outofplace` is the default"),
                        ),
                        Some(_) => {}
                        None => placement = Some((kw_name, kw)),
                    }
                    if placement.is_some_and(|(first, _)| first == kw_name) {
                        info.inplace = matches!(item.kind, HeaderItemKind::InPlace);
                    }
                }
                HeaderItemKind::Ranks(e) => {
                    let t = self.expr(e);
                    self.want(
                        t,
                        Type::Bool,
                        e.span,
                        "`ranks` takes a condition on the rank count",
                    );
                }
                HeaderItemKind::Topology(names) => {
                    self.name_list(names, TOPOLOGIES, ("topology", "topologies"), |name| {
                        ErrorKind::UnknownTopology { name }
                    });
                    info.topologies = names.iter().map(|n| n.name.clone()).collect();
                }
                HeaderItemKind::Needs(names) => {
                    self.name_list(
                        names,
                        CAPABILITIES,
                        ("capability", "capabilities"),
                        |name| ErrorKind::UnknownCapability { name },
                    );
                    info.needs = names.iter().map(|n| n.name.clone()).collect();
                }
                HeaderItemKind::Scratch { name, size } => {
                    let t = self.expr(size);
                    self.want(
                        t,
                        Type::Int,
                        size.span,
                        "a scratch size is a number of chunks",
                    );
                    info.scratch.push(name);
                }
                HeaderItemKind::Hint(hint) => self.hint_value(hint),
                HeaderItemKind::Ensure(b) => {
                    if let Some(k) = kind.filter(|&k| k != CollectiveKind::Custom) {
                        self.report(
                            Diagnostic::new(
                                ErrorKind::UnexpectedPostcondition {
                                    kind: k.name().to_string(),
                                },
                                kw,
                            )
                            .with_label("not allowed here")
                            .with_secondary(h.kind.span, "this collective's result is fixed"),
                        );
                    }
                    info.ensures.push(b);
                }
            }
        }
        if !has_chunks {
            self.report(
                Diagnostic::new(ErrorKind::MissingChunks, h.name.span)
                    .with_label("this header has no `chunks`")
                    .with_note("add `chunks E;`: the number of chunks per rank"),
            );
        }
        if kind == Some(CollectiveKind::Custom) && info.ensures.is_empty() {
            self.report(
                Diagnostic::new(ErrorKind::MissingPostcondition, h.kind.span)
                    .with_label("no `ensure` block in this header")
                    .with_note(
                        "state the result, e.g. `ensure { expect output[0][0] == input[1][0]; }`",
                    ),
            );
        }
        info
    }

    /// Checks a `topology` or `needs` list against its table.
    fn name_list(
        &mut self,
        names: &'a [Ident],
        table: &[&'static str],
        (one, many): (&str, &str),
        err: impl Fn(String) -> ErrorKind,
    ) {
        let mut seen: HashMap<&str, Span> = HashMap::new();
        for n in names {
            if !table.contains(&n.name.as_str()) {
                let d =
                    Diagnostic::new(err(n.name.clone()), n.span).with_label(format!("not a {one}"));
                let d = with_suggestion(d, &n.name, table.iter().copied());
                self.report(d.with_note(format!("{many}: {}", table.join(", "))));
            } else if let Some(&first) = seen.get(n.name.as_str()) {
                self.report(
                    Diagnostic::new(
                        ErrorKind::Duplicate {
                            name: n.name.clone(),
                        },
                        n.span,
                    )
                    .with_label("listed again")
                    .with_secondary(first, "first listed here"),
                );
            } else {
                seen.insert(&n.name, n.span);
            }
        }
    }

    /// Checks a hint's value: `protocol` takes a protocol name, the others an int with a
    /// lower bound (checked here only for literals; elaboration checks the rest).
    fn hint_value(&mut self, h: &'a Hint) {
        let name = h.name.name.as_str();
        if name == "protocol" {
            match &h.value.kind {
                ExprKind::Name(p) if PROTOCOLS.contains(&p.name.as_str()) => {}
                kind => {
                    let shown = show(&h.value);
                    let mut d =
                        Diagnostic::new(ErrorKind::UnknownProtocol { name: shown }, h.value.span)
                            .with_label("not a protocol");
                    if let ExprKind::Name(p) = kind {
                        d = with_suggestion(d, &p.name, PROTOCOLS.iter().copied());
                    }
                    self.report(d.with_note("protocols: simple, ll"));
                }
            }
            return;
        }
        let t = self.expr(&h.value);
        self.want(t, Type::Int, h.value.span, format!("`{name}` takes an int"));
        let min = if name == "channel" { 0 } else { 1 };
        if let Some(value) = literal_int(&h.value).filter(|&v| v < min) {
            self.report(
                Diagnostic::new(
                    ErrorKind::HintOutOfRange {
                        name: name.to_string(),
                        min,
                        value,
                    },
                    h.value.span,
                )
                .with_label(format!("must be at least {min}")),
            );
        }
    }

    fn define_scratch(&mut self, s: &'a Ident) {
        if let Some(prev) = self.globals.get(s.name.as_str()) {
            let mut d = Diagnostic::new(
                ErrorKind::Duplicate {
                    name: s.name.clone(),
                },
                s.span,
            );
            d = match (prev.def, prev.kind) {
                (Some(def), VarKind::RankCount) => d
                    .with_label("scratch buffer named like the rank count")
                    .with_secondary(def, "rank count named here"),
                (Some(def), _) => d
                    .with_label("defined again here")
                    .with_secondary(def, "first defined here"),
                (None, VarKind::Buffer) => {
                    d.with_label(format!("`{}` is a built-in buffer", s.name))
                }
                (None, _) => d.with_label(format!("`{}` is a built-in constant", s.name)),
            };
            self.report(d);
            return;
        }
        self.globals.insert(
            &s.name,
            Var {
                ty: Some(Type::Buffer),
                kind: VarKind::Buffer,
                def: Some(s.span),
            },
        );
    }

    // ----- functions -----

    fn declare_fn(&mut self, f: &'a Function) {
        let params = f
            .params
            .iter()
            .map(|p| match &p.ty {
                Some(t) => self.type_name(t),
                None => Some(Type::Int),
            })
            .collect();
        let ret = match &f.ret {
            Some(t) => Ret::Value(self.type_name(t)),
            None => Ret::Nothing,
        };
        let name = f.name.name.as_str();
        if Builtin::from_name(name).is_some() {
            self.report(
                Diagnostic::new(
                    ErrorKind::Duplicate {
                        name: name.to_string(),
                    },
                    f.name.span,
                )
                .with_label(format!("`{name}` is a built-in function"))
                .with_note("choose another name"),
            );
        } else if let Some(&first) = self.by_name.get(name) {
            let first = self.funcs[first].def.name.span;
            self.report(
                Diagnostic::new(
                    ErrorKind::Duplicate {
                        name: name.to_string(),
                    },
                    f.name.span,
                )
                .with_label("defined again here")
                .with_secondary(first, "first defined here"),
            );
        } else {
            self.by_name.insert(name, self.funcs.len());
        }
        self.funcs.push(FnInfo {
            def: f,
            params,
            ret,
            transfer: None,
            calls: Vec::new(),
            effect: None,
        });
    }

    fn type_name(&mut self, t: &TypeName) -> Option<Type> {
        let ty = Type::from_name(&t.name.name);
        if ty.is_none() {
            let d = Diagnostic::new(
                ErrorKind::UnknownType {
                    name: t.name.name.clone(),
                },
                t.name.span,
            )
            .with_label("not a type");
            let d = with_suggestion(d, &t.name.name, TYPE_NAMES);
            self.report(d.with_note("types: int, bool, buffer, chunk"));
        }
        ty
    }

    fn function_body(&mut self, i: usize) {
        let f = self.funcs[i].def;
        let params = self.funcs[i].params.clone();
        self.frames = vec![HashMap::new()];
        self.ctx = Ctx {
            func: Some(i),
            ensure: false,
        };
        for (p, ty) in f.params.iter().zip(params) {
            self.define(&p.name, ty, VarKind::Param);
        }
        // The body shares the parameters' scope: `let` cannot redefine a parameter.
        self.stmts(&f.body.stmts);
        self.ctx = Ctx::default();
        if matches!(self.funcs[i].ret, Ret::Value(_)) && !always_returns(&f.body.stmts) {
            self.report(
                Diagnostic::new(
                    ErrorKind::MissingReturn {
                        name: f.name.name.clone(),
                    },
                    f.name.span,
                )
                .with_label("some path through this function returns nothing")
                .with_note("loops may run zero times; end the function with `return`"),
            );
        }
    }

    /// Propagates "performs a transfer" along calls until nothing changes.
    fn compute_effects(&mut self) {
        for f in &mut self.funcs {
            f.effect = f.transfer;
        }
        let mut changed = true;
        while changed {
            changed = false;
            for i in 0..self.funcs.len() {
                if self.funcs[i].effect.is_some() {
                    continue;
                }
                let found = self.funcs[i].calls.iter().find_map(|c| {
                    let j = *self.by_name.get(c)?;
                    self.funcs[j].effect
                });
                if found.is_some() {
                    self.funcs[i].effect = found;
                    changed = true;
                }
            }
        }
    }

    // ----- scopes -----

    fn lookup(&self, name: &str) -> Option<Var> {
        self.frames
            .iter()
            .rev()
            .find_map(|f| f.get(name))
            .or_else(|| self.globals.get(name))
            .copied()
    }

    fn define(&mut self, id: &'a Ident, ty: Option<Type>, kind: VarKind) {
        let var = Var {
            ty,
            kind,
            def: Some(id.span),
        };
        // Shadowing the rank count, a constant or a buffer would silently change what
        // every later use means, so program-wide names are never redefined.
        if let Some(global) = self.globals.get(id.name.as_str()) {
            let mut d = Diagnostic::new(
                ErrorKind::Duplicate {
                    name: id.name.clone(),
                },
                id.span,
            )
            .with_label("already a program-wide name");
            if let Some(def) = global.def {
                d = d.with_secondary(def, "defined here");
            }
            self.report(d.with_note(
                "the rank count, `nodes`, `gpus_per_node`, `root` and buffers cannot be redefined",
            ));
            return;
        }
        let Some(frame) = self.frames.last_mut() else {
            return;
        };
        // Later uses most likely mean the newer definition, so it replaces the old one.
        if let Some(prev) = frame.insert(&id.name, var) {
            let what = match prev.kind {
                VarKind::Loop => "loop variable defined here",
                VarKind::Param => "parameter defined here",
                _ => "first defined here",
            };
            let mut d = Diagnostic::new(
                ErrorKind::Duplicate {
                    name: id.name.clone(),
                },
                id.span,
            )
            .with_label("defined again in the same scope");
            if let Some(def) = prev.def {
                d = d.with_secondary(def, what);
            }
            self.report(d.with_note("use a new name, or assign with `x = ...`"));
        }
    }

    /// Variable names visible here, sorted so suggestions are deterministic.
    fn names_in_scope(&self) -> Vec<&'a str> {
        let mut names: Vec<&'a str> = self
            .frames
            .iter()
            .flat_map(|f| f.keys().copied())
            .chain(self.globals.keys().copied())
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    fn function_names(&self) -> Vec<&'a str> {
        let mut names: Vec<&'a str> = Builtin::ALL
            .iter()
            .map(|b| b.name())
            .chain(self.by_name.keys().copied())
            .collect();
        names.sort_unstable();
        names
    }

    fn is_function(&self, name: &str) -> bool {
        Builtin::from_name(name).is_some() || self.by_name.contains_key(name)
    }

    fn unknown_name(&mut self, id: &Ident) {
        if self.lenient {
            return;
        }
        if self.full() {
            self.omitted += 1;
            return;
        }
        let mut d = Diagnostic::new(
            ErrorKind::UnknownName {
                name: id.name.clone(),
            },
            id.span,
        )
        .with_label("not found in this scope");
        if self.is_function(&id.name) {
            d = d.with_note(format!(
                "`{0}` is a function; call it as `{0}(...)`",
                id.name
            ));
        } else {
            match did_you_mean(&id.name, self.names_in_scope()) {
                Some(s) => d = d.with_note(s),
                None if self.ctx.func.is_some() => {
                    d = d.with_note(
                        "functions see globals and their parameters, not the body's variables",
                    );
                }
                None => {}
            }
        }
        self.report(d);
    }

    // ----- statements -----

    fn stmts(&mut self, stmts: &'a [Stmt]) {
        for s in stmts {
            self.stmt(s);
        }
    }

    /// Checks a block in a new scope, optionally starting with a loop variable.
    fn block(&mut self, b: &'a Block, var: Option<&'a Ident>) {
        grow(|| {
            self.frames.push(HashMap::new());
            if let Some(v) = var {
                self.define(v, Some(Type::Int), VarKind::Loop);
            }
            self.stmts(&b.stmts);
            self.frames.pop();
        });
    }

    fn not_in_ensure(&mut self, span: Span, what: &str) {
        self.report(
            Diagnostic::new(
                ErrorKind::NotAllowedInEnsure {
                    what: what.to_string(),
                },
                span,
            )
            .with_label("not allowed in a postcondition")
            .with_note("`ensure` only states what the buffers hold at the end, with `expect`"),
        );
    }

    fn stmt(&mut self, s: &'a Stmt) {
        match &s.kind {
            StmtKind::Let { name, value } => {
                // The value is checked first: `let x = x + 1;` reads an outer `x`.
                let t = self.expr(value);
                self.define(name, t, VarKind::Let);
            }
            StmtKind::Assign { name, value } => self.assign(name, value),
            StmtKind::Transfer {
                op,
                src,
                dst,
                via,
                hints,
            } => self.transfer(s, *op, src, dst, via.as_ref(), hints),
            StmtKind::For {
                var,
                start,
                end,
                step,
                body,
            } => {
                for e in [Some(start), Some(end), step.as_ref()]
                    .into_iter()
                    .flatten()
                {
                    let t = self.expr(e);
                    self.want(t, Type::Int, e.span, "loop bounds and steps are ints");
                }
                self.block(body, Some(var));
            }
            StmtKind::While { cond, body } => {
                let t = self.expr(cond);
                self.want(t, Type::Bool, cond.span, "a `while` condition is a bool");
                self.block(body, None);
            }
            StmtKind::If { cond, then, els } => {
                let t = self.expr(cond);
                self.want(t, Type::Bool, cond.span, "an `if` condition is a bool");
                self.block(then, None);
                match els {
                    Some(Else::Block(b)) => self.block(b, None),
                    Some(Else::If(s)) => grow(|| self.stmt(s)),
                    None => {}
                }
            }
            StmtKind::Return(value) => self.return_stmt(s, value.as_ref()),
            StmtKind::Assert(cond) => {
                let t = self.expr(cond);
                self.want(t, Type::Bool, cond.span, "`assert` takes a condition");
            }
            StmtKind::Expect { dst, srcs } => {
                if !self.ctx.ensure {
                    self.report(
                        Diagnostic::new(ErrorKind::ExpectOutsideEnsure, keyword_at(s, "expect"))
                            .with_label("outside `ensure`")
                            .with_note("a `custom` header states its result in `ensure { ... }`"),
                    );
                }
                for e in std::iter::once(dst).chain(srcs) {
                    let t = self.expr(e);
                    self.want(t, Type::Chunk, e.span, "`expect` relates chunks");
                }
            }
            StmtKind::Call(call) => {
                if let ExprKind::Call { func, args } = &call.kind {
                    if self.ctx.ensure {
                        self.not_in_ensure(call.span, &format!("{}(...)", func.name));
                        for a in args {
                            self.expr(a);
                        }
                    } else {
                        self.call(call.span, func, args, Use::Stmt);
                    }
                } else {
                    // The parser only builds call statements from calls; check it anyway.
                    self.expr(call);
                }
            }
            StmtKind::Function(f) => self.report(
                Diagnostic::new(
                    ErrorKind::NestedFunction,
                    Span::new(f.span.start as usize, f.name.span.end as usize),
                )
                .with_label("defined inside a block")
                .with_note("move it to the top level of the file"),
            ),
        }
    }

    fn assign(&mut self, name: &'a Ident, value: &'a Expr) {
        let t = self.expr(value);
        let Some(var) = self.lookup(&name.name) else {
            self.unknown_name(name);
            return;
        };
        if let Some(why) = var.kind.not_assignable() {
            let mut d = Diagnostic::new(
                ErrorKind::NotAssignable {
                    name: name.name.clone(),
                    why: why.to_string(),
                },
                name.span,
            )
            .with_label("cannot be assigned");
            if let Some(def) = var.def {
                d = d.with_secondary(def, "defined here");
            }
            self.report(d.with_note("only variables declared with `let` can be assigned"));
            return;
        }
        if let (Some(want), Some(found)) = (var.ty, t)
            && want != found
        {
            let mut d = mismatch(want.name(), found.name(), value.span).with_label(format!(
                "`{}` holds {}",
                name.name,
                want.name()
            ));
            if let Some(def) = var.def {
                d = d.with_secondary(def, format!("declared {} here", want.name()));
            }
            self.report(d);
        }
    }

    fn return_stmt(&mut self, s: &'a Stmt, value: Option<&'a Expr>) {
        let t = value.map(|v| self.expr(v));
        let Some(i) = self.ctx.func else {
            self.report(
                Diagnostic::new(ErrorKind::ReturnOutsideFunction, keyword_at(s, "return"))
                    .with_label("not inside a function"),
            );
            return;
        };
        let f = self.funcs[i].def;
        match (self.funcs[i].ret, value, t) {
            (Ret::Nothing, Some(v), Some(found)) => self.report(
                mismatch("nothing", found.map_or("a value", Type::name), v.span)
                    .with_label(format!("`{}` returns nothing", f.name.name))
                    .with_secondary(f.name.span, "declared without `-> TYPE`"),
            ),
            (Ret::Value(want), None, _) => self.report(
                mismatch(want.map_or("a value", Type::name), "nothing", s.span)
                    .with_label("`return` without a value")
                    .with_secondary(f.name.span, "this function returns a value"),
            ),
            (Ret::Value(Some(want)), Some(v), Some(Some(found))) if want != found => self.report(
                mismatch(want.name(), found.name(), v.span)
                    .with_label(format!("`{}` returns {}", f.name.name, want.name()))
                    .with_secondary(f.name.span, "return type declared here"),
            ),
            _ => {}
        }
    }

    fn transfer(
        &mut self,
        s: &'a Stmt,
        op: TransferOp,
        src: &'a Expr,
        dst: &'a Expr,
        via: Option<&'a Ident>,
        hints: &'a [Hint],
    ) {
        if self.ctx.ensure {
            self.not_in_ensure(keyword_at(s, op.keyword()), op.keyword());
        }
        if let Some(i) = self.ctx.func {
            self.funcs[i].transfer.get_or_insert(s.span);
        }
        let ts = self.expr(src);
        self.want(
            ts,
            Type::Chunk,
            src.span,
            format!("`{}` moves chunks", op.keyword()),
        );
        let td = match &strip_parens(dst).kind {
            ExprKind::Chunk(c) => self.chunk(c, true),
            _ => self.expr(dst),
        };
        self.want(
            td,
            Type::Chunk,
            dst.span,
            format!("`{}` moves chunks", op.keyword()),
        );

        // Shapes are known here only for references written out; others at elaboration.
        let multi = |e: &Expr| match &strip_parens(e).kind {
            ExprKind::Chunk(c) => c.ranks.is_multi(),
            _ => false,
        };
        if multi(src) && multi(dst) {
            self.report(
                Diagnostic::new(ErrorKind::ManyToMany, dst.span)
                    .with_label("several destination ranks")
                    .with_secondary(src.span, "several source ranks")
                    .with_note("a group transfer is many-to-one (`reduce`) or one-to-many"),
            );
        } else if op == TransferOp::Copy && multi(src) {
            self.report(
                Diagnostic::new(ErrorKind::CopyManyToOne, src.span)
                    .with_label("several source ranks"),
            );
        }

        if let Some(k) = via
            && !CHANNEL_KINDS.contains(&k.name.as_str())
        {
            let d = Diagnostic::new(
                ErrorKind::UnknownChannelKind {
                    name: k.name.clone(),
                },
                k.span,
            )
            .with_label("not a channel kind");
            let d = with_suggestion(d, &k.name, CHANNEL_KINDS.iter().copied());
            self.report(d.with_note("channel kinds: switch, nvlink, net"));
        }

        let mut seen: HashMap<&str, Span> = HashMap::new();
        for h in hints {
            let name = h.name.name.as_str();
            if name == "instances" {
                self.report(
                    Diagnostic::new(
                        ErrorKind::HintNotAllowedHere {
                            name: name.to_string(),
                        },
                        h.name.span,
                    )
                    .with_label("only in the header")
                    .with_note("write `instances E;` in the `collective` header"),
                );
                continue;
            }
            if !TRANSFER_HINTS.contains(&name) {
                let d = Diagnostic::new(
                    ErrorKind::UnknownHint {
                        name: name.to_string(),
                    },
                    h.name.span,
                )
                .with_label("not a transfer hint");
                let d = with_suggestion(d, name, TRANSFER_HINTS.iter().copied());
                self.report(d.with_note("transfer hints: channel, pipeline, protocol"));
                continue;
            }
            match seen.get(name) {
                Some(&first) => self.report(
                    Diagnostic::new(
                        ErrorKind::DuplicateHint {
                            name: name.to_string(),
                        },
                        h.name.span,
                    )
                    .with_label("given again here")
                    .with_secondary(first, "first given here"),
                ),
                None => {
                    seen.insert(name, h.name.span);
                }
            }
            self.hint_value(h);
        }
    }

    // ----- expressions -----

    /// Reports a mismatch unless `found` is unknown (already reported) or right. Returns
    /// whether it is known and right.
    fn want(
        &mut self,
        found: Option<Type>,
        want: Type,
        span: Span,
        label: impl Into<String>,
    ) -> bool {
        match found {
            Some(found) if found != want => {
                self.report(mismatch(want.name(), found.name(), span).with_label(label));
                false
            }
            Some(_) => true,
            None => false,
        }
    }

    /// The type of an expression used as a value; `None` after an error.
    fn expr(&mut self, e: &'a Expr) -> Option<Type> {
        grow(|| self.expr_inner(e))
    }

    fn expr_inner(&mut self, e: &'a Expr) -> Option<Type> {
        match &e.kind {
            ExprKind::Int(_) => Some(Type::Int),
            ExprKind::Bool(_) => Some(Type::Bool),
            ExprKind::Name(id) => match self.lookup(&id.name) {
                Some(v) => v.ty,
                None => {
                    self.unknown_name(id);
                    None
                }
            },
            ExprKind::Paren(inner) => self.expr(inner),
            ExprKind::Unary(op, x) => {
                let t = self.expr(x);
                let want = if *op == UnOp::Not {
                    Type::Bool
                } else {
                    Type::Int
                };
                let sym = op.symbol();
                let good = self.want(t, want, x.span, format!("`{sym}` takes {}", want.name()));
                good.then_some(want)
            }
            ExprKind::Binary(op, l, r) => self.binary(*op, l, r),
            ExprKind::Call { func, args } => self.call(e.span, func, args, Use::Value),
            ExprKind::Chunk(c) => self.chunk(c, false),
        }
    }

    fn binary(&mut self, op: BinOp, l: &'a Expr, r: &'a Expr) -> Option<Type> {
        let tl = self.expr(l);
        let tr = self.expr(r);
        let sym = op.symbol();
        match op {
            BinOp::Or | BinOp::And => {
                let a = self.want(tl, Type::Bool, l.span, format!("`{sym}` takes bools"));
                let b = self.want(tr, Type::Bool, r.span, format!("`{sym}` takes bools"));
                (a && b).then_some(Type::Bool)
            }
            BinOp::Eq | BinOp::Ne => {
                let comparable = |t: Option<Type>| !matches!(t, Some(Type::Buffer | Type::Chunk));
                for (t, e) in [(tl, l), (tr, r)] {
                    if let Some(t @ (Type::Buffer | Type::Chunk)) = t {
                        self.report(
                            mismatch("int or bool", t.name(), e.span)
                                .with_label(format!("`{sym}` compares ints or bools")),
                        );
                    }
                }
                let (Some(a), Some(b)) = (tl, tr) else {
                    return None;
                };
                if !comparable(tl) || !comparable(tr) {
                    return None;
                }
                if a != b {
                    self.report(
                        mismatch(a.name(), b.name(), r.span)
                            .with_label(format!("compared with {}", a.name()))
                            .with_secondary(l.span, format!("this is {}", a.name())),
                    );
                    return None;
                }
                Some(Type::Bool)
            }
            _ => {
                let a = self.want(tl, Type::Int, l.span, format!("`{sym}` takes ints"));
                let b = self.want(tr, Type::Int, r.span, format!("`{sym}` takes ints"));
                let result = if op.is_comparison() {
                    Type::Bool
                } else {
                    Type::Int
                };
                (a && b).then_some(result)
            }
        }
    }

    fn call(&mut self, span: Span, func: &'a Ident, args: &'a [Expr], used: Use) -> Option<Type> {
        let arg_types: Vec<Option<Type>> = args.iter().map(|a| self.expr(a)).collect();
        let name = func.name.as_str();
        let (params, ret, user) = if let Some(b) = Builtin::from_name(name) {
            (
                vec![Some(Type::Int); b.arity()],
                Ret::Value(Some(b.returns())),
                None,
            )
        } else if let Some(&i) = self.by_name.get(name) {
            (self.funcs[i].params.clone(), self.funcs[i].ret, Some(i))
        } else {
            let mut d = Diagnostic::new(
                ErrorKind::UnknownFunction {
                    name: name.to_string(),
                },
                func.span,
            )
            .with_label("no such function");
            if self.lookup(name).is_some() {
                d = d.with_note(format!("`{name}` is a variable, not a function"));
            } else if !self.full() {
                d = with_suggestion(d, name, self.function_names());
            }
            self.report(d);
            return None;
        };
        if let Some(i) = self.ctx.func {
            self.funcs[i].calls.push(name);
        }
        if let Some(i) = user
            && self.ctx.ensure
            && let Some(at) = self.funcs[i].effect
        {
            self.report(
                Diagnostic::new(
                    ErrorKind::NotAllowedInEnsure {
                        what: format!("{name}(...)"),
                    },
                    span,
                )
                .with_label(format!("`{name}` copies or reduces chunks"))
                .with_secondary(at, "transfer here"),
            );
        }

        if params.len() != args.len() {
            let mut d = Diagnostic::new(
                ErrorKind::Arity {
                    name: name.to_string(),
                    expected: params.len(),
                    found: args.len(),
                },
                span,
            )
            .with_label(format!(
                "expected {} argument{}",
                params.len(),
                if params.len() == 1 { "" } else { "s" }
            ));
            if let Some(i) = user {
                d = d.with_secondary(self.funcs[i].def.name.span, "defined here");
            }
            self.report(d);
        }
        // With the wrong number of arguments, positions do not say which parameter is meant.
        let positional = if params.len() == args.len() {
            params.as_slice()
        } else {
            &[]
        };
        for (k, (p, (a, t))) in positional
            .iter()
            .zip(args.iter().zip(arg_types))
            .enumerate()
        {
            if let (Some(p), Some(t)) = (*p, t)
                && p != t
            {
                let which = match user {
                    Some(i) => self.funcs[i].def.params.get(k).map_or_else(
                        || format!("argument {} of `{name}`", k + 1),
                        |q| format!("parameter `{}` of `{name}`", q.name.name),
                    ),
                    None => format!("argument {} of `{name}`", k + 1),
                };
                self.report(
                    mismatch(p.name(), t.name(), a.span)
                        .with_label(format!("{which} is {}", p.name())),
                );
            }
        }

        match (used, ret) {
            (Use::Value, Ret::Nothing) => {
                let mut d = Diagnostic::new(
                    ErrorKind::NoValue {
                        name: name.to_string(),
                    },
                    span,
                )
                .with_label("used as a value");
                if let Some(i) = user {
                    d = d.with_secondary(self.funcs[i].def.name.span, "declared without `-> TYPE`");
                }
                self.report(d);
                None
            }
            (Use::Value, Ret::Value(t)) => t,
            (Use::Stmt, Ret::Value(_)) => {
                self.report(
                    Diagnostic::new(
                        ErrorKind::UnusedValue {
                            name: name.to_string(),
                        },
                        span,
                    )
                    .with_label("the result is dropped")
                    .with_note("use it, e.g. `let x = ...;`"),
                );
                None
            }
            (Use::Stmt, Ret::Nothing) => None,
        }
    }

    /// A chunk reference; `dst` allows leaving out the index.
    fn chunk(&mut self, c: &'a ChunkRef, dst: bool) -> Option<Type> {
        let b = &c.buffer;
        match self.lookup(&b.name) {
            None => self.unknown_name(b),
            Some(v) => {
                self.want(v.ty, Type::Buffer, b.span, "only a buffer can be indexed");
            }
        }
        self.selector(&c.ranks, "a rank");
        match &c.index {
            Some(s) => self.selector(s, "a chunk index"),
            None if dst => {}
            None => self.report(
                Diagnostic::new(
                    ErrorKind::MissingIndex {
                        buffer: b.name.clone(),
                    },
                    c.span,
                )
                .with_label("no chunk index")
                .with_note("only a transfer's destination may leave out the index"),
            ),
        }
        // The syntax makes it a chunk whatever went wrong inside.
        Some(Type::Chunk)
    }

    fn selector(&mut self, s: &'a Selector, what: &str) {
        match s {
            Selector::All(_) => {}
            Selector::One(e) => {
                let t = self.expr(e);
                self.want(t, Type::Int, e.span, format!("{what} is an int"));
            }
            Selector::Range(a, b) => {
                for e in [a, b] {
                    let t = self.expr(e);
                    self.want(t, Type::Int, e.span, "range ends are ints");
                }
            }
        }
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
    })
}

#[cfg(test)]
mod tests {
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
        let e = errors(
            "collective allreduce t(n) { chunks 1; instances 0; pipeline -(1); channel -1; }",
        );
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
    fn functions_do_not_see_body_variables() {
        let src = format!("{H}let secret = 1;\nfn f() -> int {{ return secret; }}");
        assert_eq!(
            errors(&src),
            one(ErrorKind::UnknownName { name: s("secret") }, "secret")
        );
        // But they see globals.
        ok(&format!(
            "{H}fn f(r) -> int {{ return (r + root + nodes) % n; }}\n\
                     fn g(r) {{ copy input[r][0] -> output[f(r)]; }}"
        ));
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
            body_errors(
                "expect output[0][0] == input[0][0];\nfn f() { expect output[0][0] == 1; }"
            ),
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
}
