//! The `collective` header: its kind, rank-count name, items and their expressions.

use super::*;

impl<'a> Checker<'a> {
    // ----- header -----

    pub(super) fn header(&mut self, h: &'a Header) -> HeaderInfo<'a> {
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
            params: Vec::new(),
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
            if !matches!(
                item.kind,
                HeaderItemKind::Scratch { .. } | HeaderItemKind::Param { .. }
            ) {
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
                HeaderItemKind::Param { name, default } => {
                    // The default sees the names before it, never the parameter itself.
                    let t = self.expr(default);
                    self.want(t, Type::Int, default.span, "a parameter is an int");
                    if self.define_global(name, Type::Int, VarKind::ProgramParam, "parameter") {
                        info.params.push(name);
                    }
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
    pub(super) fn name_list(
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
    pub(super) fn hint_value(&mut self, h: &'a Hint) {
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

    pub(super) fn define_scratch(&mut self, s: &'a Ident) {
        self.define_global(s, Type::Buffer, VarKind::Buffer, "scratch buffer");
    }

    /// Defines a program-wide name (a scratch buffer or a parameter) unless it clashes with
    /// one; returns whether it was defined.
    pub(super) fn define_global(
        &mut self,
        s: &'a Ident,
        ty: Type,
        kind: VarKind,
        what: &str,
    ) -> bool {
        if let Some(prev) = self.globals.get(s.name.as_str()) {
            let mut d = Diagnostic::new(
                ErrorKind::Duplicate {
                    name: s.name.clone(),
                },
                s.span,
            );
            d = match (prev.def, prev.kind) {
                (Some(def), VarKind::RankCount) => d
                    .with_label(format!("{what} named like the rank count"))
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
            return false;
        }
        // Parameters are defined before the buffers are.
        if BUFFERS.contains(&s.name.as_str()) {
            self.report(
                Diagnostic::new(
                    ErrorKind::Duplicate {
                        name: s.name.clone(),
                    },
                    s.span,
                )
                .with_label(format!("`{}` is a built-in buffer", s.name)),
            );
            return false;
        }
        self.globals.insert(
            &s.name,
            Var {
                ty: Some(ty),
                kind,
                def: Some(s.span),
            },
        );
        true
    }
}
