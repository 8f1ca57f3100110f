//! Statements and blocks, dispatched on their first word.

use super::*;

impl<'a> Parser<'a> {
    // ----- statements -----

    pub(super) fn block(&self, i: In<'a>) -> PResult<'a, Block> {
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

    pub(super) fn stmt(&self, i: In<'a>) -> PResult<'a, Stmt> {
        let (start, word) = self.peek_word(i)?;
        // `copy = 2;`: a variable named like a statement keyword (see `builtins::KEYWORDS`).
        let assigns = word.is_some_and(|w| self.sym("=")(&start[w.len()..]).is_ok());
        let (i, kind) = match word {
            Some("copy" | "reduce") if assigns => self.assign_or_call(start)?,
            Some(w @ ("break" | "continue")) => {
                let span = self.span(start, &start[w.len()..]);
                return self.fail(
                    start,
                    Diagnostic::new(
                        ErrorKind::Unsupported {
                            what: w.to_string(),
                        },
                        span,
                    )
                    .with_label("not supported")
                    .with_note(
                        "loops always run to their end: put the rest of the body under an `if`, \
                         or use a `while` loop whose condition says when to stop",
                    ),
                );
            }
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

    pub(super) fn semi(&self, i: In<'a>) -> PResult<'a, Span> {
        nom::combinator::cut(self.sym(";")).parse(i)
    }

    pub(super) fn let_stmt(&self, i: In<'a>) -> PResult<'a, StmtKind> {
        let (i, _) = self.kw("let")(i)?;
        let (i, (name, _, value)) =
            nom::combinator::cut((|i| self.ident(i), self.sym("="), |i| self.expr(i))).parse(i)?;
        let (i, _) = self.semi(i)?;
        Ok((i, StmtKind::Let { name, value }))
    }

    pub(super) fn assign_or_call(&self, start: In<'a>) -> PResult<'a, StmtKind> {
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

    pub(super) fn transfer(&self, i: In<'a>, op: TransferOp) -> PResult<'a, StmtKind> {
        let (i, _) = self.kw(op.keyword())(i)?;
        let (i, (srcs, _, dst)) = nom::combinator::cut((
            nom::multi::separated_list1(self.sym(","), |i| self.expr(i)),
            self.sym("->"),
            |i| self.expr(i),
        ))
        .parse(i)?;
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
                srcs,
                dst,
                via,
                hints,
            },
        ))
    }

    /// Adds alternatives to an "expected" error raised at `at`, when they were possible there.
    pub(super) fn add_expected(
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

    pub(super) fn hint(&self, i: In<'a>) -> PResult<'a, Hint> {
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

    pub(super) fn for_stmt(&self, i: In<'a>) -> PResult<'a, StmtKind> {
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

    pub(super) fn while_stmt(&self, i: In<'a>) -> PResult<'a, StmtKind> {
        let (i, _) = self.kw("while")(i)?;
        let (i, (cond, body)) =
            nom::combinator::cut((|i| self.expr(i), |i| self.block(i))).parse(i)?;
        Ok((i, StmtKind::While { cond, body }))
    }

    pub(super) fn if_stmt(&self, i: In<'a>) -> PResult<'a, StmtKind> {
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

    pub(super) fn return_stmt(&self, i: In<'a>) -> PResult<'a, StmtKind> {
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

    pub(super) fn expect_stmt(&self, i: In<'a>) -> PResult<'a, StmtKind> {
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
}
