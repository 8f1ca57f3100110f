//! The interpreter: runs the resolved program for one machine and records chunk operations.
//!
//! Arithmetic is checked (overflow, division by zero and bad shifts are errors); `/` and `%`
//! are Euclidean. Work is bounded by [`Options`]: steps, operations and call depth. Every
//! error carries the span of the code that failed and notes with the loop variables and
//! calls active at that moment.

use super::ir::*;
use super::{Buffer, ChunkOp, Elaborated, Expect, Facts, Loc, Options, RankRange};
use crate::error::CompileError;
use coll_lang::ast::{BinOp, TransferOp, UnOp};
use coll_lang::builtins::{Builtin, CollectiveKind};
use coll_lang::{Diagnostic, Span};

pub(super) struct Setup<'a> {
    pub kind: CollectiveKind,
    pub name: String,
    pub inplace: bool,
    pub facts: &'a Facts,
    pub options: &'a Options,
    pub header_span: Span,
}

type Diag = Diagnostic<CompileError>;
type R<T> = Result<T, Box<Diag>>;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Value {
    Int(i64),
    Bool(bool),
    Buffer(BufId),
    Chunk(ChunkVal),
    Unit,
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct ChunkVal {
    buffer: BufId,
    ranks: RankRange,
    /// `(start, count)`; `None` when the index was left out (a destination).
    index: Option<(u32, u32)>,
}

impl ChunkVal {
    /// The location of this chunk's buffer and ranks at `index`.
    fn loc(&self, index: u32) -> Loc {
        Loc {
            buffer: self.buffer,
            ranks: self.ranks,
            index,
        }
    }
}

enum Flow {
    Normal,
    Return(Value),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Header,
    Body,
    Ensure,
}

/// One activation: its variables and where its loop-variable names live.
struct Frame {
    vars: Vec<Value>,
    /// `None` for the body/header/ensure frame, else the function.
    func: Option<FnId>,
    /// Loop slots active in this frame, outermost first.
    loops: Vec<Slot>,
}

struct Interp<'a> {
    ir: &'a Ir,
    setup: &'a Setup<'a>,
    n: u32,
    root: u32,
    buffers: Vec<Buffer>,
    frames: Vec<Frame>,
    mode: Mode,
    steps: u64,
    /// Spans of the loops running now, innermost last.
    loop_spans: Vec<Span>,
    captured: Option<String>,
    ops: Vec<ChunkOp>,
    expects: Vec<Expect>,
}

pub(super) fn run(ir: &Ir, setup: Setup<'_>) -> Result<Elaborated, Diag> {
    let facts = setup.facts;
    let n = u32::try_from(facts.n).unwrap_or(u32::MAX);
    let mut it = Interp {
        ir,
        setup: &setup,
        n,
        root: 0,
        buffers: Vec::new(),
        frames: vec![Frame {
            vars: Vec::new(),
            func: None,
            loops: Vec::new(),
        }],
        mode: Mode::Header,
        steps: 0,
        loop_spans: Vec::new(),
        captured: None,
        ops: Vec::new(),
        expects: Vec::new(),
    };
    it.execute().map_err(|d| *d)
}

impl<'a> Interp<'a> {
    fn execute(&mut self) -> R<Elaborated> {
        let ir = self.ir;
        let setup = self.setup;
        let facts = setup.facts;
        if facts.n == 0 {
            return Err(self.error(
                CompileError::UnsupportedRanks {
                    n: 0,
                    what: "no algorithm runs on".into(),
                },
                setup.header_span,
            ));
        }
        let rooted = matches!(
            setup.kind,
            CollectiveKind::Broadcast | CollectiveKind::Reduce | CollectiveKind::Custom
        );
        if rooted && setup.options.root >= facts.n {
            return Err(self
                .error(
                    CompileError::RankOutOfRange {
                        rank: i64::try_from(setup.options.root).unwrap_or(i64::MAX),
                        n: facts.n,
                    },
                    setup.header_span,
                )
                .with_note(format!(
                    "the root was given with --root {}",
                    setup.options.root
                ))
                .into());
        }
        // Collectives without a root ignore it, as NCCL does.
        self.root = if rooted {
            u32::try_from(setup.options.root).unwrap_or(u32::MAX)
        } else {
            0
        };

        // Header: which rank counts, buffer sizes, hints.
        if let Some(ranks) = ir.ranks
            && !self.bool(ranks)?
        {
            return Err(self
                .error(
                    CompileError::UnsupportedRanks {
                        n: facts.n,
                        what: "the algorithm does not support".into(),
                    },
                    ir.expr(ranks).1,
                )
                .with_label("false for this rank count")
                .into());
        }
        let Some(chunks) = ir.chunks else {
            return Err(self.error(
                CompileError::Internal("no chunks".into()),
                setup.header_span,
            ));
        };
        let k = self.int(chunks)?;
        let chunks_span = ir.expr(chunks).1;
        let k = self.at_least("`chunks`", k, 1, chunks_span)?;
        let (in_chunks, out_chunks) = setup.kind.buffer_chunks(u64::from(self.n), k);
        self.buffers = vec![
            Buffer {
                name: "input".into(),
                chunks: in_chunks,
            },
            Buffer {
                name: "output".into(),
                chunks: out_chunks,
            },
        ];
        let mut spans = vec![chunks_span, chunks_span];
        for s in &ir.scratch {
            let size = self.int(s.size)?;
            let span = ir.expr(s.size).1;
            let size =
                self.at_least(&format!("the size of scratch `{}`", s.name), size, 1, span)?;
            self.buffers.push(Buffer {
                name: s.name.clone(),
                chunks: size,
            });
            spans.push(span);
        }
        // Contribution keys (`index * n + rank`) and cell counts stay within 32 bits.
        let limit = u64::from(u32::MAX) / 2 / u64::from(self.n.max(1));
        for (b, span) in self.buffers.iter().zip(spans) {
            if b.chunks > limit {
                return Err(self.error(
                    CompileError::TooLarge {
                        what: format!("`{}` in chunks per rank", b.name),
                        max: limit,
                        value: b.chunks,
                    },
                    span,
                ));
            }
        }
        let cells = self.buffers.iter().fold(0u64, |a, b| {
            a.saturating_add(b.chunks.saturating_mul(u64::from(self.n)))
        });
        let cell_limit = self.setup.options.cell_limit;
        if cells > cell_limit {
            return Err(self
                .error(
                    CompileError::TooLarge {
                        what: format!("chunks of all buffers over {} ranks", self.n),
                        max: cell_limit,
                        value: cells,
                    },
                    chunks_span,
                )
                .with_label("too many chunks for this rank count")
                .with_note(
                    "every chunk of every rank is tracked; lower `chunks`, the scratch sizes or the rank count",
                )
                .into());
        }
        let (mut instances, mut pipeline, mut protocol, mut channel) =
            (1, 1, Protocol::Simple, None);
        for (hint, span) in &ir.header_hints {
            match *hint {
                Hint::Instances(e) => instances = self.hint_int("instances", e, 1, *span)?,
                Hint::Pipeline(e) => pipeline = self.hint_int("pipeline", e, 1, *span)?,
                Hint::Channel(e) => channel = Some(self.hint_int("channel", e, 0, *span)?),
                Hint::Protocol(p) => protocol = p,
            }
        }
        if let Some(i) = self.setup.options.instances {
            instances = i.max(1);
        }

        // The body.
        self.mode = Mode::Body;
        self.frames = vec![Frame {
            vars: vec![Value::Unit; ir.body_slots],
            func: None,
            loops: Vec::new(),
        }];
        self.block(&ir.body)?;

        // The postcondition of a custom collective.
        if !ir.ensure.is_empty() {
            self.mode = Mode::Ensure;
            self.frames = vec![Frame {
                vars: vec![Value::Unit; ir.ensure_slots],
                func: None,
                loops: Vec::new(),
            }];
            self.block(&ir.ensure)?;
        }

        Ok(Elaborated {
            kind: setup.kind,
            name: setup.name.clone(),
            inplace: setup.inplace,
            from_in_place: false,
            n: self.n,
            root: self.root,
            chunk_factor: k,
            buffers: std::mem::take(&mut self.buffers),
            ops: std::mem::take(&mut self.ops),
            expects: std::mem::take(&mut self.expects),
            instances,
            pipeline,
            protocol,
            channel,
            topology: facts.topology.clone(),
            header_span: setup.header_span,
            captured_context: self.captured.take(),
        })
    }

    // ----- errors -----

    /// A diagnostic with the loop variables and calls active now as notes.
    fn error(&self, kind: CompileError, span: Span) -> Box<Diag> {
        let mut d = Diagnostic::new(kind, span);
        if let Some(context) = self.context() {
            d = d.with_note(format!("at this point: {context}"));
        }
        d = d.with_note(format!(
            "elaborating for n = {} on {}",
            self.n, self.setup.facts.topology
        ));
        Box::new(d)
    }

    /// The calls and loop variables active now, outermost first, e.g.
    /// `with s = 2, r = 5; in parent(r = 5)`. Deep recursion is elided in the middle.
    fn context(&self) -> Option<String> {
        let mut context = Vec::new();
        for frame in &self.frames {
            let names = match frame.func {
                Some(f) => {
                    let func = &self.ir.functions[f.index()];
                    let args: Vec<String> = func
                        .params
                        .iter()
                        .zip(&func.param_names)
                        .map(|(slot, name)| format!("{name} = {}", show(frame.vars[slot.index()])))
                        .collect();
                    context.push(format!("in {}({})", func.name, args.join(", ")));
                    self.ir.function_slot_names.get(f.index())
                }
                None if self.mode == Mode::Ensure => Some(&self.ir.ensure_slot_names),
                None => Some(&self.ir.body_slot_names),
            };
            let loops: Vec<String> = frame
                .loops
                .iter()
                .filter_map(|slot| {
                    let name = names?.get(slot.index())?.as_ref()?;
                    Some(format!("{name} = {}", show(frame.vars[slot.index()])))
                })
                .collect();
            if !loops.is_empty() {
                context.push(format!("with {}", loops.join(", ")));
            }
        }
        const KEEP: usize = 4;
        if context.len() > 2 * KEEP + 1 {
            let hidden = context.len() - 2 * KEEP;
            context.splice(KEEP..context.len() - KEEP, [format!("… {hidden} more …")]);
        }
        (!context.is_empty()).then(|| context.join("; "))
    }

    fn at_least(&self, what: &str, v: i64, min: i64, span: Span) -> R<u64> {
        if v < min {
            return Err(self.error(
                CompileError::TooSmall {
                    what: what.to_string(),
                    min,
                    value: v,
                },
                span,
            ));
        }
        u64::try_from(v).map_err(|_| self.error(CompileError::Internal("negative".into()), span))
    }

    fn hint_int(&mut self, name: &str, e: ExprId, min: i64, span: Span) -> R<u32> {
        let v = self.int(e)?;
        let limit = u16::MAX - 1;
        if v > i64::from(limit) {
            return Err(self.error(
                CompileError::TooLarge {
                    what: format!("the `{name}` hint"),
                    max: u64::from(limit),
                    value: v as u64,
                },
                span,
            ));
        }
        let v = self.at_least(&format!("the `{name}` hint"), v, min, span)?;
        Ok(u32::try_from(v).unwrap_or(u32::MAX))
    }

    fn tick(&mut self, span: Span) -> R<()> {
        self.steps += 1;
        if self.steps > self.setup.options.step_limit {
            let (at, label) = match self.loop_spans.last() {
                Some(&l) => (l, "still running here"),
                None => (span, "the last statement run"),
            };
            return Err(self
                .error(
                    CompileError::StepLimit {
                        limit: self.setup.options.step_limit,
                    },
                    at,
                )
                .with_label(label)
                .into());
        }
        Ok(())
    }

    // ----- statements -----

    fn frame(&mut self) -> &mut Frame {
        // There is always at least one frame while running.
        let last = self.frames.len() - 1;
        &mut self.frames[last]
    }

    fn set(&mut self, slot: Slot, v: Value) {
        if let Some(x) = self.frame().vars.get_mut(slot.index()) {
            *x = v;
        }
    }

    fn block(&mut self, stmts: &[StmtId]) -> R<Flow> {
        for &s in stmts {
            if let Flow::Return(v) = self.stmt(s)? {
                return Ok(Flow::Return(v));
            }
        }
        Ok(Flow::Normal)
    }

    fn stmt(&mut self, id: StmtId) -> R<Flow> {
        let ir = self.ir;
        let (stmt, span) = ir.stmt(id);
        let span = *span;
        self.tick(span)?;
        match stmt {
            Stmt::Let(slot, e) | Stmt::Assign(slot, e) => {
                let v = self.eval(*e)?;
                self.set(*slot, v);
            }
            Stmt::Transfer {
                op,
                src,
                dst,
                via,
                hints,
            } => self.transfer(*op, *src, *dst, *via, hints, span)?,
            Stmt::For {
                var,
                start,
                end,
                step,
                body,
            } => {
                let a = self.int(*start)?;
                let b = self.int(*end)?;
                let s = match step {
                    Some(e) => self.int(*e)?,
                    None => 1,
                };
                if s == 0 {
                    let at = step.map_or(span, |e| ir.expr(e).1);
                    return Err(self.error(CompileError::ZeroStep, at));
                }
                self.frame().loops.push(*var);
                self.loop_spans.push(span);
                let mut i = a;
                let result = loop {
                    if (s > 0 && i >= b) || (s < 0 && i <= b) {
                        break Ok(Flow::Normal);
                    }
                    self.set(*var, Value::Int(i));
                    if let Err(e) = self.tick(span) {
                        break Err(e);
                    }
                    match self.block(body) {
                        Ok(Flow::Normal) => {}
                        other => break other,
                    }
                    match i.checked_add(s) {
                        Some(next) => i = next,
                        None => break Ok(Flow::Normal),
                    }
                };
                if result.is_ok() {
                    self.frame().loops.pop();
                    self.loop_spans.pop();
                }
                return result;
            }
            Stmt::While { cond, body } => {
                self.loop_spans.push(span);
                loop {
                    if !self.bool(*cond)? {
                        break;
                    }
                    self.tick(span)?;
                    if let Flow::Return(v) = self.block(body)? {
                        self.loop_spans.pop();
                        return Ok(Flow::Return(v));
                    }
                }
                self.loop_spans.pop();
            }
            Stmt::If { cond, then, els } => {
                let branch = if self.bool(*cond)? { then } else { els };
                return self.block(branch);
            }
            Stmt::Return(v) => {
                let v = match v {
                    Some(e) => self.eval(*e)?,
                    None => Value::Unit,
                };
                return Ok(Flow::Return(v));
            }
            Stmt::Assert(e) => {
                if !self.bool(*e)? {
                    return Err(self.error(CompileError::AssertionFailed, ir.expr(*e).1));
                }
            }
            Stmt::Expect { dst, srcs } => self.expect(*dst, srcs, span)?,
            Stmt::Call(f, args) => {
                self.call(*f, args, span)?;
            }
        }
        Ok(Flow::Normal)
    }

    fn transfer(
        &mut self,
        op: TransferOp,
        src: ExprId,
        dst: ExprId,
        via: Option<Via>,
        hints: &[Hint],
        span: Span,
    ) -> R<()> {
        let ir = self.ir;
        let s = self.chunk(src)?;
        let d = self.chunk(dst)?;
        let src_span = ir.expr(src).1;
        let dst_span = ir.expr(dst).1;
        let Some((s_index, s_count)) = s.index else {
            return Err(self.error(CompileError::MissingIndex, src_span));
        };
        let (d_index, d_count) = d.index.unwrap_or((s_index, s_count));
        if s_count != d_count {
            return Err(self
                .error(
                    CompileError::CountMismatch {
                        src: u64::from(s_count),
                        dst: u64::from(d_count),
                    },
                    src_span,
                )
                .with_label(format!("{s_count} chunk{}", plural(s_count)))
                .with_secondary(dst_span, format!("{d_count} chunk{}", plural(d_count)))
                .into());
        }
        // A destination that left out its index takes the source's, which must fit.
        if d.index.is_none() {
            let last = i64::from(d_index) + i64::from(d_count) - 1;
            self.check_index(d.buffer, last, dst_span).map_err(|e| {
                Box::new(e.with_note(format!(
                    "the destination leaves out its index, so it takes the source's: {}",
                    show_range(d_index, d_count)
                )))
            })?;
        }
        if s.ranks.is_multi() && d.ranks.is_multi() {
            return Err(self
                .error(CompileError::GroupOnBothSides, src_span)
                .with_label(format!("ranks {}..{}", s.ranks.start, s.ranks.end))
                .with_secondary(
                    dst_span,
                    format!("ranks {}..{}", d.ranks.start, d.ranks.end),
                )
                .into());
        }
        if op == TransferOp::Copy && s.ranks.is_multi() {
            return Err(self
                .error(CompileError::CopyFromGroup, src_span)
                .with_label(format!("ranks {}..{}", s.ranks.start, s.ranks.end))
                .into());
        }
        if d.buffer == BufId::INPUT && !self.setup.inplace {
            return Err(self
                .error(CompileError::WriteToInput, dst_span)
                .with_label("written here")
                .with_note(
                    "declare `inplace;` in the header, or write to `output` or a scratch buffer",
                )
                .into());
        }
        let (mut channel, mut pipeline, mut protocol) = (u16::MAX, 0, None);
        for h in hints {
            match *h {
                Hint::Channel(e) => {
                    channel = self.hint_int("channel", e, 0, ir.expr(e).1)? as u16;
                }
                Hint::Pipeline(e) => {
                    pipeline = self.hint_int("pipeline", e, 1, ir.expr(e).1)? as u16;
                }
                Hint::Protocol(p) => protocol = Some(p),
                Hint::Instances(e) => {
                    return Err(self.error(
                        CompileError::Internal("instances on a transfer".into()),
                        ir.expr(e).1,
                    ));
                }
            }
        }
        if self.ops.len() >= self.setup.options.op_limit {
            return Err(self.error(
                CompileError::OpLimit {
                    limit: self.setup.options.op_limit,
                },
                span,
            ));
        }
        if self.setup.options.capture_op == Some(self.ops.len()) {
            self.captured = self.context();
        }
        self.ops.push(ChunkOp {
            kind: op,
            src: s.loc(s_index),
            dst: d.loc(d_index),
            count: s_count,
            via,
            protocol,
            channel,
            pipeline,
            span,
        });
        Ok(())
    }

    fn expect(&mut self, dst: ExprId, srcs: &[ExprId], span: Span) -> R<()> {
        let ir = self.ir;
        let d = self.chunk(dst)?;
        let Some((d_index, d_count)) = d.index else {
            return Err(self.error(CompileError::MissingIndex, ir.expr(dst).1));
        };
        let mut locs = Vec::with_capacity(srcs.len());
        for &e in srcs {
            let s = self.chunk(e)?;
            let e_span = ir.expr(e).1;
            if s.buffer != BufId::INPUT {
                return Err(self.error(
                    CompileError::ExpectSourceNotInput {
                        buffer: ir.buffer_name(s.buffer).to_string(),
                    },
                    e_span,
                ));
            }
            let Some((s_index, s_count)) = s.index else {
                return Err(self.error(CompileError::MissingIndex, e_span));
            };
            if s_count != d_count {
                return Err(self.error(
                    CompileError::CountMismatch {
                        src: u64::from(s_count),
                        dst: u64::from(d_count),
                    },
                    span,
                ));
            }
            locs.push(s.loc(s_index));
        }
        self.expects.push(Expect {
            dst: d.loc(d_index),
            count: d_count,
            srcs: locs,
            span,
        });
        Ok(())
    }

    fn call(&mut self, f: FnId, args: &[ExprId], span: Span) -> R<Value> {
        let ir = self.ir;
        let func = &ir.functions[f.index()];
        if self.frames.len() > self.setup.options.call_depth_limit {
            return Err(self.error(
                CompileError::RecursionLimit {
                    limit: self.setup.options.call_depth_limit,
                },
                span,
            ));
        }
        let mut vars = vec![Value::Unit; func.slots];
        for (slot, &a) in func.params.iter().zip(args) {
            let v = self.eval(a)?;
            if let Some(x) = vars.get_mut(slot.index()) {
                *x = v;
            }
        }
        self.frames.push(Frame {
            vars,
            func: Some(f),
            loops: Vec::new(),
        });
        let flow = coll_lang::parser::grow(|| self.block(&func.body))?;
        self.frames.pop();
        match flow {
            Flow::Return(v) => Ok(v),
            Flow::Normal if func.returns_value => Err(self.error(
                CompileError::NoReturnValue {
                    name: func.name.clone(),
                },
                span,
            )),
            Flow::Normal => Ok(Value::Unit),
        }
    }

    // ----- expressions -----

    fn int(&mut self, e: ExprId) -> R<i64> {
        match self.eval(e)? {
            Value::Int(v) => Ok(v),
            other => Err(self.error(
                CompileError::Internal(format!("expected an int, found {other:?}")),
                self.ir.expr(e).1,
            )),
        }
    }

    fn bool(&mut self, e: ExprId) -> R<bool> {
        match self.eval(e)? {
            Value::Bool(v) => Ok(v),
            other => Err(self.error(
                CompileError::Internal(format!("expected a bool, found {other:?}")),
                self.ir.expr(e).1,
            )),
        }
    }

    fn chunk(&mut self, e: ExprId) -> R<ChunkVal> {
        match self.eval(e)? {
            Value::Chunk(c) => Ok(c),
            other => Err(self.error(
                CompileError::Internal(format!("expected a chunk, found {other:?}")),
                self.ir.expr(e).1,
            )),
        }
    }

    fn eval(&mut self, id: ExprId) -> R<Value> {
        let ir = self.ir;
        let (e, span) = ir.expr(id);
        let span = *span;
        Ok(match e {
            Expr::Int(v) => Value::Int(*v),
            Expr::Bool(b) => Value::Bool(*b),
            Expr::Local(slot) => self
                .frames
                .last()
                .and_then(|f| f.vars.get(slot.index()).copied())
                .unwrap_or(Value::Unit),
            Expr::Const(c) => Value::Int(match c {
                Constant::RankCount => i64::from(self.n),
                Constant::Nodes => to_i64(self.setup.facts.nodes),
                Constant::GpusPerNode => to_i64(self.setup.facts.gpus_per_node),
                Constant::Root => i64::from(self.root),
            }),
            Expr::Buffer(b) => Value::Buffer(*b),
            Expr::Unary(op, x) => match op {
                UnOp::Not => Value::Bool(!self.bool(*x)?),
                UnOp::BitNot => Value::Int(!self.int(*x)?),
                UnOp::Neg => {
                    let v = self.int(*x)?;
                    Value::Int(v.checked_neg().ok_or_else(|| {
                        self.error(CompileError::Overflow { op: "-".into() }, span)
                    })?)
                }
            },
            Expr::Binary(op, a, b) => self.binary(*op, *a, *b, span)?,
            Expr::Builtin(b, args) => self.builtin(*b, args, span)?,
            Expr::Call(f, args) => {
                let v = self.call(*f, args, span)?;
                if v == Value::Unit {
                    return Err(self.error(
                        CompileError::Internal("a procedure used as a value".into()),
                        span,
                    ));
                }
                v
            }
            Expr::Chunk {
                buffer,
                ranks,
                index,
            } => {
                let Value::Buffer(buf) = self.eval(*buffer)? else {
                    return Err(self.error(
                        CompileError::Internal("not a buffer".into()),
                        ir.expr(*buffer).1,
                    ));
                };
                let ranks = self.rank_sel(*ranks)?;
                let index = match index {
                    Some(s) => Some(self.index_sel(buf, *s)?),
                    None => None,
                };
                Value::Chunk(ChunkVal {
                    buffer: buf,
                    ranks,
                    index,
                })
            }
        })
    }

    fn binary(&mut self, op: BinOp, a: ExprId, b: ExprId, span: Span) -> R<Value> {
        // Short-circuit first.
        match op {
            BinOp::And => return Ok(Value::Bool(self.bool(a)? && self.bool(b)?)),
            BinOp::Or => return Ok(Value::Bool(self.bool(a)? || self.bool(b)?)),
            BinOp::Eq | BinOp::Ne => {
                let x = self.eval(a)?;
                let y = self.eval(b)?;
                return Ok(Value::Bool((x == y) == (op == BinOp::Eq)));
            }
            _ => {}
        }
        let x = self.int(a)?;
        let y = self.int(b)?;
        let overflow = |s: &Self| {
            s.error(
                CompileError::Overflow {
                    op: op.symbol().into(),
                },
                span,
            )
        };
        Ok(match op {
            BinOp::Lt => Value::Bool(x < y),
            BinOp::Le => Value::Bool(x <= y),
            BinOp::Gt => Value::Bool(x > y),
            BinOp::Ge => Value::Bool(x >= y),
            BinOp::Add => Value::Int(x.checked_add(y).ok_or_else(|| overflow(self))?),
            BinOp::Sub => Value::Int(x.checked_sub(y).ok_or_else(|| overflow(self))?),
            BinOp::Mul => Value::Int(x.checked_mul(y).ok_or_else(|| overflow(self))?),
            BinOp::Div | BinOp::Rem => {
                if y == 0 {
                    let at = self.ir.expr(b).1;
                    return Err(self
                        .error(CompileError::DivisionByZero, at)
                        .with_label("this is zero")
                        .into());
                }
                let r = if op == BinOp::Div {
                    x.checked_div_euclid(y)
                } else {
                    x.checked_rem_euclid(y)
                };
                Value::Int(r.ok_or_else(|| overflow(self))?)
            }
            BinOp::BitAnd => Value::Int(x & y),
            BinOp::BitOr => Value::Int(x | y),
            BinOp::BitXor => Value::Int(x ^ y),
            BinOp::Shl | BinOp::Shr => {
                if !(0..64).contains(&y) {
                    return Err(self.error(CompileError::BadShift { amount: y }, self.ir.expr(b).1));
                }
                if op == BinOp::Shl {
                    let v = x << y;
                    if v >> y != x {
                        return Err(overflow(self));
                    }
                    Value::Int(v)
                } else {
                    Value::Int(x >> y)
                }
            }
            BinOp::And | BinOp::Or | BinOp::Eq | BinOp::Ne => {
                return Err(self.error(CompileError::Internal("unreachable operator".into()), span));
            }
        })
    }

    fn builtin(&mut self, b: Builtin, args: &[ExprId], span: Span) -> R<Value> {
        let mut v = [0i64; 2];
        for (slot, &a) in v.iter_mut().zip(args) {
            *slot = self.int(a)?;
        }
        let [x, y] = v;
        let positive = |s: &Self, x: i64| {
            if x > 0 {
                Ok(())
            } else {
                Err(s.error(
                    CompileError::NotPositive {
                        function: b.name().into(),
                        value: x,
                    },
                    span,
                ))
            }
        };
        let facts = self.setup.facts;
        let gpn = to_i64(facts.gpus_per_node.max(1));
        let out_of_range = |s: &Self, arg: i64, why: String| {
            s.error(
                CompileError::BuiltinOutOfRange {
                    function: b.name().into(),
                    arg,
                    why,
                },
                span,
            )
        };
        Ok(match b {
            Builtin::Log2 => {
                positive(self, x)?;
                Value::Int(63 - i64::from(x.leading_zeros()))
            }
            Builtin::CeilLog2 => {
                positive(self, x)?;
                let f = 63 - i64::from(x.leading_zeros());
                Value::Int(if x & (x - 1) == 0 { f } else { f + 1 })
            }
            Builtin::Min => Value::Int(x.min(y)),
            Builtin::Max => Value::Int(x.max(y)),
            Builtin::Abs => Value::Int(
                x.checked_abs()
                    .ok_or_else(|| self.error(CompileError::Overflow { op: "abs".into() }, span))?,
            ),
            Builtin::IsPow2 => Value::Bool(x > 0 && x & (x - 1) == 0),
            Builtin::Node | Builtin::Local => {
                if !(0..i64::from(self.n)).contains(&x) {
                    return Err(out_of_range(self, x, format!("there are {} ranks", self.n)));
                }
                Value::Int(if b == Builtin::Node { x / gpn } else { x % gpn })
            }
            Builtin::Rank => {
                let nodes = to_i64(facts.nodes);
                if !(0..nodes).contains(&x) {
                    return Err(out_of_range(self, x, format!("there are {nodes} nodes")));
                }
                if !(0..gpn).contains(&y) {
                    return Err(out_of_range(
                        self,
                        y,
                        format!("there are {gpn} GPUs per node"),
                    ));
                }
                Value::Int(x * gpn + y)
            }
        })
    }

    fn rank(&self, v: i64, span: Span) -> R<u32> {
        if (0..i64::from(self.n)).contains(&v) {
            Ok(v as u32)
        } else {
            Err(self.error(
                CompileError::RankOutOfRange {
                    rank: v,
                    n: self.n as usize,
                },
                span,
            ))
        }
    }

    fn rank_sel(&mut self, s: Sel) -> R<RankRange> {
        let ir = self.ir;
        Ok(match s {
            Sel::All => RankRange {
                start: 0,
                end: self.n,
            },
            Sel::One(e) => {
                let v = self.int(e)?;
                RankRange::one(self.rank(v, ir.expr(e).1)?)
            }
            Sel::Range(a, b) => {
                let (start, last) = self.sel_bounds(a, b, Self::rank)?;
                RankRange {
                    start,
                    end: last + 1,
                }
            }
        })
    }

    /// Evaluates the ends of `a..b`, rejects an empty range, then checks the
    /// first and last elements (`a`, then `b - 1`) with `check`.
    fn sel_bounds(
        &mut self,
        a: ExprId,
        b: ExprId,
        check: impl Fn(&Self, i64, Span) -> R<u32>,
    ) -> R<(u32, u32)> {
        let ir = self.ir;
        let (x, y) = (self.int(a)?, self.int(b)?);
        if x >= y {
            return Err(self.error(
                CompileError::BadRange { start: x, end: y },
                ir.expr(a).1.to(ir.expr(b).1),
            ));
        }
        let first = check(self, x, ir.expr(a).1)?;
        let last = check(self, y - 1, ir.expr(b).1)?;
        Ok((first, last))
    }

    fn chunks_of(&self, buf: BufId) -> u64 {
        self.buffers.get(buf.index()).map_or(0, |b| b.chunks)
    }

    fn check_index(&self, buf: BufId, v: i64, span: Span) -> R<u32> {
        let chunks = self.chunks_of(buf);
        if v >= 0 && (v as u64) < chunks {
            Ok(v as u32)
        } else {
            Err(self.error(
                CompileError::IndexOutOfRange {
                    buffer: self.ir.buffer_name(buf).to_string(),
                    index: v,
                    chunks,
                },
                span,
            ))
        }
    }

    fn index_sel(&mut self, buf: BufId, s: Sel) -> R<(u32, u32)> {
        let ir = self.ir;
        Ok(match s {
            Sel::All => (0, u32::try_from(self.chunks_of(buf)).unwrap_or(u32::MAX)),
            Sel::One(e) => {
                let v = self.int(e)?;
                (self.check_index(buf, v, ir.expr(e).1)?, 1)
            }
            Sel::Range(a, b) => {
                let (start, last) =
                    self.sel_bounds(a, b, |this, v, span| this.check_index(buf, v, span))?;
                (start, last - start + 1)
            }
        })
    }
}

fn to_i64(x: usize) -> i64 {
    i64::try_from(x).unwrap_or(i64::MAX)
}

fn show(v: Value) -> String {
    match v {
        Value::Int(i) => i.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Buffer(b) => format!("buffer {}", b.0),
        Value::Chunk(c) => format!(
            "chunk of buffer {} ranks {}..{}",
            c.buffer.0, c.ranks.start, c.ranks.end
        ),
        Value::Unit => "nothing".into(),
    }
}

fn plural(n: u32) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn show_range(start: u32, count: u32) -> String {
    if count == 1 {
        start.to_string()
    } else {
        format!("{start}..{}", start + count)
    }
}
