//! AST -> [`Ir`]: resolves every name once, following the checker's scoping rules (the body's
//! top level is one scope, each block opens one, a loop variable lives in its body, functions
//! see program-wide names, functions and the body's top-level `let`s). The body is resolved
//! before the function bodies so that its top-level slots are known. The input has passed
//! [`coll_lang::check`]; anything it should have rejected becomes an internal error, never a
//! panic.

use super::ir::*;
use crate::error::CompileError;
use coll_lang::Span;
use coll_lang::ast::{self, ExprKind, HeaderItemKind, Item, Selector, StmtKind};
use coll_lang::builtins::Builtin;
use std::collections::HashMap;

type Result<T> = std::result::Result<T, (CompileError, Span)>;

fn internal<T>(what: &str, span: Span) -> Result<T> {
    Err((CompileError::Internal(what.to_string()), span))
}

#[derive(Clone, Copy)]
enum Global {
    Const(Constant),
    Buffer(BufId),
}

/// Per frame: scopes of name -> slot, the slot count and loop-variable names.
#[derive(Default)]
struct Frame<'a> {
    scopes: Vec<HashMap<&'a str, Slot>>,
    slots: usize,
    names: SlotNames,
}

impl<'a> Frame<'a> {
    fn new() -> Self {
        Frame {
            scopes: vec![HashMap::new()],
            slots: 0,
            names: Vec::new(),
        }
    }

    fn define(&mut self, name: &'a str, loop_var: bool) -> Slot {
        let slot = Slot(u32::try_from(self.slots).unwrap_or(u32::MAX));
        self.slots += 1;
        self.names.push(loop_var.then(|| name.to_string()));
        if let Some(scope) = self.scopes.last_mut() {
            scope.insert(name, slot);
        }
        slot
    }

    fn lookup(&self, name: &str) -> Option<Slot> {
        self.scopes.iter().rev().find_map(|s| s.get(name).copied())
    }
}

struct Resolver<'a> {
    ir: Ir,
    globals: HashMap<&'a str, Global>,
    functions: HashMap<&'a str, FnId>,
    frame: Frame<'a>,
    /// The body's top-level `let`s, which function bodies read as [`Expr::TopLevel`].
    top: HashMap<&'a str, Slot>,
    /// Resolving a function body (the only code that sees `top`).
    in_function: bool,
}

/// Resolves a checked program.
pub fn resolve(program: &ast::Program) -> Result<Ir> {
    let mut r = Resolver {
        ir: Ir::default(),
        globals: HashMap::new(),
        functions: HashMap::new(),
        frame: Frame::new(),
        top: HashMap::new(),
        in_function: false,
    };
    let header = program
        .items
        .iter()
        .find_map(|i| match i {
            Item::Collective(h) => Some(h),
            _ => None,
        })
        .ok_or((CompileError::Internal("no header".into()), program.span))?;
    let Some(rank_name) = header.params.first() else {
        return internal("header without a rank-count parameter", header.span);
    };
    r.globals
        .insert(&rank_name.name, Global::Const(Constant::RankCount));
    r.globals.insert("nodes", Global::Const(Constant::Nodes));
    r.globals
        .insert("gpus_per_node", Global::Const(Constant::GpusPerNode));
    r.globals.insert("root", Global::Const(Constant::Root));
    r.globals.insert("input", Global::Buffer(BufId::INPUT));
    r.globals.insert("output", Global::Buffer(BufId::OUTPUT));
    for item in &header.items {
        if let HeaderItemKind::Param { name, .. } = &item.kind {
            let id = u32::try_from(r.ir.params.len()).unwrap_or(u32::MAX);
            r.globals
                .insert(&name.name, Global::Const(Constant::Param(id)));
            // Default resolved below, with the other header expressions.
            r.ir.params.push(Param {
                name: name.name.clone(),
                default: ExprId(0),
                span: name.span,
            });
        }
        if let HeaderItemKind::Scratch { name, .. } = &item.kind {
            let id = BufId(u32::try_from(2 + r.ir.scratch.len()).unwrap_or(u32::MAX));
            r.globals.insert(&name.name, Global::Buffer(id));
            // Size resolved below, once functions are known.
            r.ir.scratch.push(Scratch {
                name: name.name.clone(),
                size: ExprId(0),
                span: item.span,
            });
        }
    }
    // Functions first, so calls resolve before definitions (nested ones are rejected by the
    // checker but declared too).
    let mut fns: Vec<&ast::Function> = Vec::new();
    for item in &program.items {
        match item {
            Item::Function(f) => fns.push(f),
            Item::Stmt(s) => collect_nested_fns(s, &mut fns),
            Item::Collective(_) => {}
        }
    }
    for f in &fns {
        let id = FnId(u32::try_from(r.ir.functions.len()).unwrap_or(u32::MAX));
        r.functions.insert(&f.name.name, id);
        r.ir.functions.push(Function {
            name: f.name.name.clone(),
            params: Vec::new(),
            param_names: f.params.iter().map(|p| p.name.name.clone()).collect(),
            returns_value: f.ret.is_some(),
            body: Vec::new(),
            slots: 0,
            span: f.name.span,
        });
        r.ir.function_slot_names.push(Vec::new());
    }
    // Header expressions: a frame with no variables.
    r.frame = Frame::new();
    let (mut scratch_i, mut param_i) = (0, 0);
    for item in &header.items {
        match &item.kind {
            HeaderItemKind::Param { default, .. } => {
                let id = r.expr(default)?;
                if let Some(p) = r.ir.params.get_mut(param_i) {
                    p.default = id;
                }
                param_i += 1;
            }
            HeaderItemKind::Chunks(e) => r.ir.chunks = Some(r.expr(e)?),
            HeaderItemKind::Ranks(e) => r.ir.ranks = Some(r.expr(e)?),
            HeaderItemKind::Scratch { size, .. } => {
                let id = r.expr(size)?;
                if let Some(s) = r.ir.scratch.get_mut(scratch_i) {
                    s.size = id;
                }
                scratch_i += 1;
            }
            HeaderItemKind::Hint(h) => {
                let hint = r.hint(h)?;
                r.ir.header_hints.push((hint, h.span));
            }
            HeaderItemKind::Ensure(b) => {
                r.frame = Frame::new();
                r.ir.ensure = r.block(b)?;
                let frame = std::mem::take(&mut r.frame);
                r.ir.ensure_slots = frame.slots;
                r.ir.ensure_slot_names = frame.names;
                r.frame = Frame::new();
            }
            _ => {}
        }
    }
    // The body: top-level statements in order, in one scope.
    r.frame = Frame::new();
    let mut body = Vec::new();
    for item in &program.items {
        if let Item::Stmt(s) = item
            && let Some(id) = r.stmt(s)?
        {
            body.push(id);
        }
    }
    r.ir.body = body;
    let frame = std::mem::take(&mut r.frame);
    r.ir.body_slots = frame.slots;
    r.ir.body_slot_names = frame.names;
    r.top = frame.scopes.into_iter().next().unwrap_or_default();
    r.in_function = true;
    for (i, f) in fns.iter().enumerate() {
        r.frame = Frame::new();
        let params: Vec<Slot> = f
            .params
            .iter()
            .map(|p| r.frame.define(&p.name.name, true))
            .collect();
        let body = r.block(&f.body)?;
        let frame = std::mem::take(&mut r.frame);
        let func = &mut r.ir.functions[i];
        func.params = params;
        func.body = body;
        func.slots = frame.slots;
        r.ir.function_slot_names[i] = frame.names;
    }
    Ok(r.ir)
}

fn collect_nested_fns<'a>(s: &'a ast::Stmt, out: &mut Vec<&'a ast::Function>) {
    let mut blocks: Vec<&ast::Block> = Vec::new();
    match &s.kind {
        StmtKind::Function(f) => {
            out.push(f);
            blocks.push(&f.body);
        }
        StmtKind::For { body, .. } | StmtKind::While { body, .. } => blocks.push(body),
        StmtKind::If { then, els, .. } => {
            blocks.push(then);
            let mut e = els.as_ref();
            while let Some(x) = e {
                match x {
                    ast::Else::Block(b) => {
                        blocks.push(b);
                        e = None;
                    }
                    ast::Else::If(s) => {
                        collect_nested_fns(s, out);
                        e = None;
                    }
                }
            }
        }
        _ => {}
    }
    for b in blocks {
        for s in &b.stmts {
            collect_nested_fns(s, out);
        }
    }
}

impl<'a> Resolver<'a> {
    fn push_expr(&mut self, e: Expr, span: Span) -> ExprId {
        self.ir.exprs.push((e, span));
        ExprId(u32::try_from(self.ir.exprs.len() - 1).unwrap_or(u32::MAX))
    }

    fn push_stmt(&mut self, s: Stmt, span: Span) -> StmtId {
        self.ir.stmts.push((s, span));
        StmtId(u32::try_from(self.ir.stmts.len() - 1).unwrap_or(u32::MAX))
    }

    fn block(&mut self, b: &'a ast::Block) -> Result<Vec<StmtId>> {
        self.scoped(|r| {
            let mut out = Vec::with_capacity(b.stmts.len());
            for s in &b.stmts {
                if let Some(id) = r.stmt(s)? {
                    out.push(id);
                }
            }
            Ok(out)
        })
    }

    fn scoped<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        self.frame.scopes.push(HashMap::new());
        let out = f(self);
        self.frame.scopes.pop();
        out
    }

    fn stmt(&mut self, s: &'a ast::Stmt) -> Result<Option<StmtId>> {
        let stmt = match &s.kind {
            StmtKind::Let { name, value } => {
                let v = self.expr(value)?;
                let slot = self.frame.define(&name.name, false);
                Stmt::Let(slot, v)
            }
            StmtKind::Assign { name, value } => {
                let v = self.expr(value)?;
                let Some(slot) = self.frame.lookup(&name.name) else {
                    return internal("assignment to an unknown variable", name.span);
                };
                Stmt::Assign(slot, v)
            }
            StmtKind::Transfer {
                op,
                srcs,
                dst,
                via,
                hints,
            } => {
                let srcs = srcs
                    .iter()
                    .map(|e| self.expr(e))
                    .collect::<Result<Vec<_>>>()?;
                let dst = self.expr(dst)?;
                let via = match via {
                    Some(v) => Some(
                        Via::from_name(&v.name)
                            .ok_or((CompileError::Internal("bad via".into()), v.span))?,
                    ),
                    None => None,
                };
                let hints = hints
                    .iter()
                    .map(|h| self.hint(h))
                    .collect::<Result<Vec<_>>>()?;
                Stmt::Transfer {
                    op: *op,
                    srcs,
                    dst,
                    via,
                    hints,
                }
            }
            StmtKind::For {
                var,
                start,
                end,
                step,
                body,
            } => {
                let start = self.expr(start)?;
                let end = self.expr(end)?;
                let step = step.as_ref().map(|s| self.expr(s)).transpose()?;
                let (var, body) = self.scoped(|r| {
                    let var = r.frame.define(&var.name, true);
                    let body = r.block(body)?;
                    Ok((var, body))
                })?;
                Stmt::For {
                    var,
                    start,
                    end,
                    step,
                    body,
                }
            }
            StmtKind::While { cond, body } => {
                let cond = self.expr(cond)?;
                let body = self.block(body)?;
                Stmt::While { cond, body }
            }
            StmtKind::If { cond, then, els } => {
                let cond = self.expr(cond)?;
                let then = self.block(then)?;
                let els = match els {
                    None => Vec::new(),
                    Some(ast::Else::Block(b)) => self.block(b)?,
                    Some(ast::Else::If(s)) => self.stmt(s)?.into_iter().collect(),
                };
                Stmt::If { cond, then, els }
            }
            StmtKind::Return(v) => Stmt::Return(v.as_ref().map(|e| self.expr(e)).transpose()?),
            StmtKind::Assert(e) => Stmt::Assert(self.expr(e)?),
            StmtKind::Expect { dst, srcs } => {
                let dst = self.expr(dst)?;
                let srcs = srcs
                    .iter()
                    .map(|e| self.expr(e))
                    .collect::<Result<Vec<_>>>()?;
                Stmt::Expect { dst, srcs }
            }
            StmtKind::Call(e) => match &e.kind {
                ExprKind::Call { func, args } => {
                    let args = args
                        .iter()
                        .map(|a| self.expr(a))
                        .collect::<Result<Vec<_>>>()?;
                    let Some(&id) = self.functions.get(func.name.as_str()) else {
                        return internal("call of an unknown procedure", func.span);
                    };
                    Stmt::Call(id, args)
                }
                _ => return internal("call statement without a call", e.span),
            },
            // Defined at the top level by `resolve`.
            StmtKind::Function(_) => return Ok(None),
        };
        Ok(Some(self.push_stmt(stmt, s.span)))
    }

    fn hint(&mut self, h: &'a ast::Hint) -> Result<Hint> {
        Ok(match h.name.name.as_str() {
            "channel" => Hint::Channel(self.expr(&h.value)?),
            "pipeline" => Hint::Pipeline(self.expr(&h.value)?),
            "instances" => Hint::Instances(self.expr(&h.value)?),
            "protocol" => match &h.value.kind {
                ExprKind::Name(id) => Hint::Protocol(
                    Protocol::from_name(&id.name)
                        .ok_or((CompileError::Internal("bad protocol".into()), id.span))?,
                ),
                _ => return internal("protocol value is not a name", h.value.span),
            },
            _ => return internal("unknown hint", h.name.span),
        })
    }

    fn sel(&mut self, s: &'a Selector) -> Result<Sel> {
        Ok(match s {
            Selector::One(e) => Sel::One(self.expr(e)?),
            Selector::All(_) => Sel::All,
            Selector::Range(a, b) => Sel::Range(self.expr(a)?, self.expr(b)?),
        })
    }

    fn expr(&mut self, e: &'a ast::Expr) -> Result<ExprId> {
        coll_lang::parser::grow(|| self.expr_inner(e))
    }

    fn expr_inner(&mut self, e: &'a ast::Expr) -> Result<ExprId> {
        let out = match &e.kind {
            ExprKind::Int(v) => Expr::Int(*v),
            ExprKind::Bool(b) => Expr::Bool(*b),
            ExprKind::Paren(inner) => return self.expr(inner),
            ExprKind::Name(id) => self.name(id)?,
            ExprKind::Unary(op, x) => {
                let x = self.expr(x)?;
                Expr::Unary(*op, x)
            }
            ExprKind::Binary(op, a, b) => {
                let a = self.expr(a)?;
                let b = self.expr(b)?;
                Expr::Binary(*op, a, b)
            }
            ExprKind::Call { func, args } => {
                let args = args
                    .iter()
                    .map(|a| self.expr(a))
                    .collect::<Result<Vec<_>>>()?;
                if let Some(&id) = self.functions.get(func.name.as_str()) {
                    Expr::Call(id, args)
                } else if let Some(b) = Builtin::from_name(&func.name) {
                    Expr::Builtin(b, args)
                } else {
                    return internal("call of an unknown function", func.span);
                }
            }
            ExprKind::Chunk(c) => {
                let buf = self.name(&c.buffer)?;
                let buffer = self.push_expr(buf, c.buffer.span);
                let ranks = self.sel(&c.ranks)?;
                let index = c.index.as_ref().map(|s| self.sel(s)).transpose()?;
                Expr::Chunk {
                    buffer,
                    ranks,
                    index,
                }
            }
            ExprKind::If { cond, then, els } => Expr::If {
                cond: self.expr(cond)?,
                then: self.expr(then)?,
                els: self.expr(els)?,
            },
            ExprKind::Table(items) => Expr::Table(
                items
                    .iter()
                    .map(|x| self.expr(x))
                    .collect::<Result<Vec<_>>>()?,
            ),
        };
        Ok(self.push_expr(out, e.span))
    }

    fn name(&mut self, id: &ast::Ident) -> Result<Expr> {
        if let Some(slot) = self.frame.lookup(&id.name) {
            return Ok(Expr::Local(slot));
        }
        match self.globals.get(id.name.as_str()) {
            Some(Global::Const(c)) => Ok(Expr::Const(*c)),
            Some(Global::Buffer(b)) => Ok(Expr::Buffer(*b)),
            None => match self.top.get(id.name.as_str()) {
                Some(&slot) if self.in_function => Ok(Expr::TopLevel(slot, id.name.clone())),
                _ => internal("unknown name", id.span),
            },
        }
    }
}
