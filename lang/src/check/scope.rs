//! Function signatures and bodies, and name scopes: definition, lookup, suggestions.

use super::*;

impl<'a> Checker<'a> {
    // ----- functions -----

    pub(super) fn declare_fn(&mut self, f: &'a Function) {
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
        if matches!(name, "copy" | "reduce") {
            // `copy(...)` at the start of a statement reads as a transfer.
            self.report(
                Diagnostic::new(
                    ErrorKind::StatementKeywordAsFunction {
                        name: name.to_string(),
                    },
                    f.name.span,
                )
                .with_label("starts a statement")
                .with_note("choose another name; variables may be called so, functions not"),
            );
        } else if Builtin::from_name(name).is_some() {
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

    pub(super) fn type_name(&mut self, t: &TypeName) -> Option<Type> {
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
            self.report(d.with_note("types: int, bool, buffer, chunk, table"));
        }
        ty
    }

    pub(super) fn function_body(&mut self, i: usize) {
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
    pub(super) fn compute_effects(&mut self) {
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

    pub(super) fn lookup(&self, name: &str) -> Option<Var> {
        self.frames
            .iter()
            .rev()
            .find_map(|f| f.get(name))
            .or_else(|| self.globals.get(name))
            .or_else(|| self.ctx.func.and_then(|_| self.top.get(name)))
            .copied()
    }

    pub(super) fn define(&mut self, id: &'a Ident, ty: Option<Type>, kind: VarKind) {
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
    pub(super) fn names_in_scope(&self) -> Vec<&'a str> {
        let mut names: Vec<&'a str> = self
            .frames
            .iter()
            .flat_map(|f| f.keys().copied())
            .chain(self.globals.keys().copied())
            .chain(
                self.ctx
                    .func
                    .map(|_| self.top.keys().copied())
                    .into_iter()
                    .flatten(),
            )
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    pub(super) fn function_names(&self) -> Vec<&'a str> {
        let mut names: Vec<&'a str> = Builtin::ALL
            .iter()
            .map(|b| b.name())
            .chain(self.by_name.keys().copied())
            .collect();
        names.sort_unstable();
        names
    }

    pub(super) fn is_function(&self, name: &str) -> bool {
        Builtin::from_name(name).is_some() || self.by_name.contains_key(name)
    }

    pub(super) fn unknown_name(&mut self, id: &Ident) {
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
                        "functions see globals, the body's top-level `let`s and their parameters, not variables inside the body's blocks",
                    );
                }
                None => {}
            }
        }
        self.report(d);
    }
}
