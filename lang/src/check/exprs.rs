//! Expressions: types of operators, calls and chunk references.

use super::*;

impl<'a> Checker<'a> {
    // ----- expressions -----

    /// Reports a mismatch unless `found` is unknown (already reported) or right. Returns
    /// whether it is known and right.
    pub(super) fn want(
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
    pub(super) fn expr(&mut self, e: &'a Expr) -> Option<Type> {
        grow(|| self.expr_inner(e))
    }

    pub(super) fn expr_inner(&mut self, e: &'a Expr) -> Option<Type> {
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
            ExprKind::If { cond, then, els } => {
                let tc = self.expr(cond);
                self.want(tc, Type::Bool, cond.span, "the condition is a bool");
                let (ta, tb) = (self.expr(then), self.expr(els));
                match (ta, tb) {
                    (Some(a), Some(b)) if a != b => {
                        self.report(
                            mismatch(a.name(), b.name(), els.span)
                                .with_label(format!("this is {}", b.name()))
                                .with_secondary(then.span, format!("this is {}", a.name()))
                                .with_note("both branches of `if ... then ... else` have one type"),
                        );
                        None
                    }
                    (Some(a), Some(_)) => Some(a),
                    _ => None,
                }
            }
            ExprKind::Table(items) => {
                let mut good = true;
                for x in items {
                    let t = self.expr(x);
                    good &= self.want(t, Type::Int, x.span, "a table holds ints");
                }
                good.then_some(Type::Table)
            }
        }
    }

    /// `t[i]` where `t` is a table: one int index, no second selector.
    fn table_index(&mut self, c: &'a ChunkRef) -> Option<Type> {
        match (&c.ranks, &c.index) {
            (Selector::One(e), None) => {
                let t = self.expr(e);
                self.want(t, Type::Int, e.span, "a table index is an int")
                    .then_some(Type::Int)
            }
            _ => {
                self.report(
                    Diagnostic::new(
                        ErrorKind::TableIndex {
                            name: c.buffer.name.clone(),
                        },
                        c.span,
                    )
                    .with_label(format!("`{}` is a table", c.buffer.name))
                    .with_note("a table index is one int: no `*`, range or second index"),
                );
                None
            }
        }
    }

    pub(super) fn binary(&mut self, op: BinOp, l: &'a Expr, r: &'a Expr) -> Option<Type> {
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
                let comparable =
                    |t: Option<Type>| !matches!(t, Some(Type::Buffer | Type::Chunk | Type::Table));
                for (t, e) in [(tl, l), (tr, r)] {
                    if let Some(t @ (Type::Buffer | Type::Chunk | Type::Table)) = t {
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

    pub(super) fn call(
        &mut self,
        span: Span,
        func: &'a Ident,
        args: &'a [Expr],
        used: Use,
    ) -> Option<Type> {
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
    pub(super) fn chunk(&mut self, c: &'a ChunkRef, dst: bool) -> Option<Type> {
        let b = &c.buffer;
        match self.lookup(&b.name) {
            Some(Var {
                ty: Some(Type::Table),
                ..
            }) => return self.table_index(c),
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

    pub(super) fn selector(&mut self, s: &'a Selector, what: &str) {
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
