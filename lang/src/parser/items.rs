//! The top level: the `collective` header and its items, functions, and the recovering
//! lists that resynchronise after an error.

use super::*;

impl<'a> Parser<'a> {
    // ----- top level -----

    pub(super) fn function(&self, start: In<'a>) -> PResult<'a, Function> {
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

    pub(super) fn param(&self, i: In<'a>) -> PResult<'a, Param> {
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

    pub(super) fn header(&self, start: In<'a>) -> PResult<'a, Header> {
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

    pub(super) fn header_item(&self, i: In<'a>) -> PResult<'a, HeaderItem> {
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
            "param" => {
                let (i, (name, _, default)) =
                    nom::combinator::cut((|i| self.ident(i), self.sym("="), |i| self.expr(i)))
                        .parse(i)?;
                (i, HeaderItemKind::Param { name, default })
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

    pub(super) fn top_item(&self, i: In<'a>) -> PResult<'a, Item> {
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

    pub(super) fn top_items(&self, i: In<'a>) -> Vec<Item> {
        let (rest, items) = self.recovering_list(i, false, |i| self.top_item(i));
        if !rest.is_empty() && self.diags.borrow().is_empty() {
            // Only a stray `}` stops the top-level list.
            self.report(PError::expected(rest, "`collective`, `fn` or a statement"));
        }
        items
    }

    /// Parses items until `}` (when `in_block`) or the end, reporting each failure and
    /// resuming after it.
    pub(super) fn recovering_list<T>(
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
    pub(super) fn resync(&self, mut i: In<'a>) -> In<'a> {
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

    pub(super) fn report(&self, e: PError<'a>) {
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
