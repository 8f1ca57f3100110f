//! Statements: blocks, assignments, returns and transfers.

use super::*;

impl<'a> Checker<'a> {
    // ----- statements -----

    pub(super) fn stmts(&mut self, stmts: &'a [Stmt]) {
        for s in stmts {
            self.stmt(s);
        }
    }

    /// Checks a block in a new scope, optionally starting with a loop variable.
    pub(super) fn block(&mut self, b: &'a Block, var: Option<&'a Ident>) {
        grow(|| {
            self.frames.push(HashMap::new());
            if let Some(v) = var {
                self.define(v, Some(Type::Int), VarKind::Loop);
            }
            self.stmts(&b.stmts);
            self.frames.pop();
        });
    }

    pub(super) fn not_in_ensure(&mut self, span: Span, what: &str) {
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

    pub(super) fn stmt(&mut self, s: &'a Stmt) {
        match &s.kind {
            StmtKind::Let { name, value } => {
                // The value is checked first: `let x = x + 1;` reads an outer `x`.
                let t = self.expr(value);
                self.define(name, t, VarKind::Let);
            }
            StmtKind::Assign { name, value } => self.assign(name, value),
            StmtKind::Transfer {
                op,
                srcs,
                dst,
                via,
                hints,
            } => self.transfer(s, *op, srcs, dst, via.as_ref(), hints),
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

    pub(super) fn assign(&mut self, name: &'a Ident, value: &'a Expr) {
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

    pub(super) fn return_stmt(&mut self, s: &'a Stmt, value: Option<&'a Expr>) {
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

    pub(super) fn transfer(
        &mut self,
        s: &'a Stmt,
        op: TransferOp,
        srcs: &'a [Expr],
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
        for src in srcs {
            let ts = self.expr(src);
            self.want(
                ts,
                Type::Chunk,
                src.span,
                format!("`{}` moves chunks", op.keyword()),
            );
        }
        if let (TransferOp::Copy, [first, second, ..]) = (op, srcs) {
            let last = srcs.last().map_or(second.span, |e| e.span);
            self.report(
                Diagnostic::new(ErrorKind::CopySeveralSources, second.span.to(last))
                    .with_label("more sources")
                    .with_secondary(first.span, "the first source")
                    .with_note("a chunk takes one value; `reduce a, b -> d` adds several to `d`"),
            );
        }
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
        for src in srcs {
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
}
