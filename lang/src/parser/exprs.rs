//! Expressions: precedence climbing, primaries, calls and chunk references.

use super::*;

impl<'a> Parser<'a> {
    // ----- expressions -----

    pub(super) fn expr(&self, i: In<'a>) -> PResult<'a, Expr> {
        self.expr_bp(i, 0).map(|(i, (e, _))| (i, e))
    }

    /// Precedence climbing. Returns the expression and the depth of its tree.
    pub(super) fn expr_bp(&self, start: In<'a>, min: u8) -> PResult<'a, (Expr, usize)> {
        let _guard = self.enter(start)?;
        // Debug builds spend kilobytes of stack per level; grow it on the heap instead of
        // bounding nesting by whatever stack the caller's thread has.
        grow(|| self.expr_bp_inner(start, min))
    }

    pub(super) fn expr_bp_inner(&self, start: In<'a>, min: u8) -> PResult<'a, (Expr, usize)> {
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

    pub(super) fn binop_at(i: In<'a>) -> Option<BinOp> {
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

    pub(super) fn unary(&self, i: In<'a>) -> PResult<'a, (Expr, usize)> {
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

    pub(super) fn primary(&self, i: In<'a>) -> PResult<'a, (Expr, usize)> {
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
        if let Ok((rest, _)) = self.sym("[")(i) {
            return self.table(i, rest);
        }
        if self.peek_word(i)?.1 == Some("if") {
            return self.if_expr(i);
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

    /// A table literal after its `[` (at `start`), through `]`: at most
    /// [`MAX_TABLE_LEN`] ints, counted while parsing so a huge literal stops early.
    fn table(&self, start: In<'a>, mut i: In<'a>) -> PResult<'a, (Expr, usize)> {
        let mut items = Vec::new();
        let mut depth = 0;
        if let Ok((rest, _)) = self.sym("]")(i) {
            i = rest;
        } else {
            loop {
                if items.len() == MAX_TABLE_LEN {
                    let at = self.ws(i)?.0;
                    let off = self.off(at);
                    return self.fail(
                        at,
                        Diagnostic::new(
                            ErrorKind::TableTooLong {
                                limit: MAX_TABLE_LEN,
                            },
                            Span::new(off, off + 1),
                        )
                        .with_label("one element too many here")
                        .with_secondary(self.span(start, &start[1..]), "the table starts here"),
                    );
                }
                let (rest, (e, d)) = nom::combinator::cut(|i| self.expr_bp(i, 0)).parse(i)?;
                depth = depth.max(d);
                items.push(e);
                if let Ok((rest, _)) = self.sym(",")(rest) {
                    i = rest;
                    continue;
                }
                let (rest, _) = self.sym("]")(rest)
                    .map_err(|_| nom::Err::Failure(self.expected_at(rest, &["`,`", "`]`"])))?;
                i = rest;
                break;
            }
        }
        Ok((
            i,
            (
                Expr {
                    kind: ExprKind::Table(items),
                    span: self.span(start, i),
                },
                depth + 1,
            ),
        ))
    }

    /// `if COND then A else B`. `then` is a keyword only here; the `else` branch extends as
    /// far as an expression can, as in the statement form.
    fn if_expr(&self, start: In<'a>) -> PResult<'a, (Expr, usize)> {
        let (i, _) = self.kw("if")(start)?;
        let (i, ((cond, d1), _, (then, d2), _, (els, d3))) = nom::combinator::cut((
            |i| self.expr_bp(i, 0),
            self.kw("then"),
            |i| self.expr_bp(i, 0),
            self.kw("else"),
            |i| self.expr_bp(i, 0),
        ))
        .parse(i)?;
        let depth = d1.max(d2).max(d3) + 1;
        if depth > MAX_DEPTH {
            let off = self.off(start);
            return self.fail(
                start,
                Diagnostic::new(
                    ErrorKind::TooDeep { limit: MAX_DEPTH },
                    Span::new(off, off + 2),
                )
                .with_label("expression too long or deep here"),
            );
        }
        Ok((
            i,
            (
                Expr {
                    kind: ExprKind::If {
                        cond: Box::new(cond),
                        then: Box::new(then),
                        els: Box::new(els),
                    },
                    span: self.span(start, i),
                },
                depth,
            ),
        ))
    }

    /// Arguments after `(`, through `)`.
    pub(super) fn args(&self, i: In<'a>) -> PResult<'a, Vec<Expr>> {
        if let Ok((rest, _)) = self.sym(")")(i) {
            return Ok((rest, Vec::new()));
        }
        let (i, args) = nom::multi::separated_list1(self.sym(","), |i| self.expr(i)).parse(i)?;
        let (i, _) = self.sym(")")(i)
            .map_err(|_| nom::Err::Failure(self.expected_at(i, &["`,`", "`)`"])))?;
        Ok((i, args))
    }

    pub(super) fn expected_at(&self, i: In<'a>, what: &[&'static str]) -> PError<'a> {
        let at = self.ws(i).map_or(i, |(i, _)| i);
        PError {
            at,
            expected: what.to_vec(),
            custom: None,
        }
    }

    /// `[ranks]` and optionally `[index]` after a buffer name.
    pub(super) fn chunk_ref(
        &self,
        start: In<'a>,
        buffer: Ident,
        i: In<'a>,
    ) -> PResult<'a, ChunkRef> {
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

    pub(super) fn selector(&self, i: In<'a>) -> PResult<'a, Selector> {
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
}
