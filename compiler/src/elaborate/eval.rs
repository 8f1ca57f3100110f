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
use std::rc::Rc;

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

#[derive(Clone, Debug, PartialEq)]
enum Value {
    Int(i64),
    Bool(bool),
    Buffer(BufId),
    Chunk(ChunkVal),
    /// Shared, since a table is read far more often than built; at most
    /// [`coll_lang::limits::MAX_TABLE_LEN`] elements (the parser bounds literals).
    Table(Rc<[i64]>),
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
    /// Values of the header's `param`s, set in order before the other header expressions.
    params: Vec<i64>,
    /// The chunk factor (`chunks`), once the header has run.
    k: u64,
    /// The body's variables once it has run, for functions called from `ensure`.
    body_vars: Vec<Value>,
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
        params: Vec::new(),
        k: 1,
        body_vars: Vec::new(),
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

        self.set_params()?;

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
        self.k = k;
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
            // Zero is allowed: a scratch buffer some rank counts do not need. Every reference
            // to it is out of range, and it is dropped from the result below.
            let size =
                self.at_least(&format!("the size of scratch `{}`", s.name), size, 0, span)?;
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
        self.body_vars = self
            .frames
            .first_mut()
            .map_or_else(Vec::new, |f| std::mem::take(&mut f.vars));

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

        let (buffers, ops, expects) = drop_empty_buffers(
            std::mem::take(&mut self.buffers),
            std::mem::take(&mut self.ops),
            std::mem::take(&mut self.expects),
        );
        Ok(Elaborated {
            kind: setup.kind,
            name: setup.name.clone(),
            inplace: setup.inplace,
            from_in_place: false,
            n: self.n,
            root: self.root,
            chunk_factor: k,
            buffers,
            ops,
            expects,
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
                        .map(|(slot, name)| format!("{name} = {}", show(&frame.vars[slot.index()])))
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
                    Some(format!("{name} = {}", show(&frame.vars[slot.index()])))
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

    /// Sets the header's `param`s in order: the caller's value where given, else the
    /// default (which may read the parameters before it). A value for a name the program
    /// does not declare is an error listing the declared ones.
    fn set_params(&mut self) -> R<()> {
        let ir = self.ir;
        let given = &self.setup.options.params;
        if let Some(name) = given
            .keys()
            .find(|k| !ir.params.iter().any(|p| &p.name == *k))
        {
            let names: Vec<&str> = ir.params.iter().map(|p| p.name.as_str()).collect();
            let declared = if names.is_empty() {
                "the program declares no parameters".to_string()
            } else {
                format!("the program declares {}", names.join(", "))
            };
            let mut e = self
                .error(
                    CompileError::UnknownParam {
                        name: name.clone(),
                        declared,
                    },
                    self.setup.header_span,
                )
                .with_label("parameters are declared with `param NAME = DEFAULT;` in this header");
            if let Some(s) = coll_lang::diagnostic::did_you_mean(name, names) {
                e = e.with_note(s);
            }
            return Err(e.into());
        }
        for p in &ir.params {
            let v = match given.get(&p.name) {
                Some(&v) => v,
                None => self.int(p.default)?,
            };
            self.params.push(v);
        }
        Ok(())
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
                srcs,
                dst,
                via,
                hints,
            } => {
                // Every operand once, in source order, then one op per source.
                let mut vals = Vec::with_capacity(srcs.len());
                for &e in srcs {
                    vals.push((self.chunk(e)?, ir.expr(e).1));
                }
                let d = (self.chunk(*dst)?, ir.expr(*dst).1);
                for s in vals {
                    self.transfer(*op, s, d, *via, hints, span)?;
                }
            }
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

    /// One chunk operation from evaluated operands (with their spans).
    fn transfer(
        &mut self,
        op: TransferOp,
        (s, src_span): (ChunkVal, Span),
        (d, dst_span): (ChunkVal, Span),
        via: Option<Via>,
        hints: &[Hint],
        span: Span,
    ) -> R<()> {
        let ir = self.ir;
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
        if op == TransferOp::Reduce && !s.ranks.is_multi() && !d.ranks.is_multi() {
            self.reduce_onto_itself(s.loc(s_index), d.loc(d_index), src_span, dst_span, span)?;
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

    /// A one-to-one `reduce` whose source and destination are the same chunk (by name, or
    /// through the in-place aliasing of `input` and `output`) would add a chunk's value to
    /// itself: an error, as every combination of a contribution already held is.
    fn reduce_onto_itself(
        &self,
        s: Loc,
        d: Loc,
        src_span: Span,
        dst_span: Span,
        span: Span,
    ) -> R<()> {
        let setup = self.setup;
        let k = self.k;
        let phys = |l: Loc| {
            crate::layout::alias(
                setup.kind,
                setup.inplace,
                k,
                l.buffer.index(),
                u64::from(l.ranks.start),
                u64::from(l.index),
            )
        };
        if s.ranks.start != d.ranks.start || phys(s) != phys(d) {
            return Ok(());
        }
        let ir = self.ir;
        let mut e = self
            .error(
                CompileError::ReduceOntoItself {
                    buffer: ir.buffer_name(d.buffer).to_string(),
                    rank: d.ranks.start,
                    chunk: u64::from(d.index),
                },
                span,
            )
            .with_label("source and destination are the same chunk");
        if s.buffer != d.buffer {
            e = e
                .with_secondary(
                    src_span,
                    format!(
                        "{}[{}][{}]",
                        ir.buffer_name(s.buffer),
                        s.ranks.start,
                        s.index
                    ),
                )
                .with_secondary(
                    dst_span,
                    format!(
                        "{}[{}][{}]",
                        ir.buffer_name(d.buffer),
                        d.ranks.start,
                        d.index
                    ),
                )
                .with_note("in place, `input` and `output` share storage, so these are one chunk");
        }
        Err(e
            .with_note("combining what a chunk already holds counts it twice; a `reduce` needs another chunk as its source")
            .into())
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
                .and_then(|f| f.vars.get(slot.index()).cloned())
                .unwrap_or(Value::Unit),
            Expr::TopLevel(slot, name) => {
                let vars = match self.mode {
                    Mode::Body => self.frames.first().map(|f| &f.vars),
                    Mode::Ensure => Some(&self.body_vars),
                    // Header expressions run before the body.
                    Mode::Header => None,
                };
                match vars.and_then(|v| v.get(slot.index())) {
                    Some(Value::Unit) | None => {
                        return Err(self
                            .error(CompileError::ReadBeforeLet { name: name.clone() }, span)
                            .with_label("read here")
                            .with_note(match self.mode {
                                Mode::Header => "the header is evaluated before the body, so a function called there sees none of its variables",
                                _ => "a function reads the body's top-level variables as they are when it is called",
                            })
                            .into());
                    }
                    Some(v) => v.clone(),
                }
            }
            Expr::Const(c) => Value::Int(match c {
                Constant::RankCount => i64::from(self.n),
                Constant::Nodes => to_i64(self.setup.facts.nodes),
                Constant::GpusPerNode => to_i64(self.setup.facts.gpus_per_node),
                Constant::Root => i64::from(self.root),
                Constant::Param(i) => match self.params.get(*i as usize) {
                    Some(&v) => v,
                    None => {
                        return Err(self.error(
                            CompileError::Internal("a parameter read before it is set".into()),
                            span,
                        ));
                    }
                },
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
            Expr::If { cond, then, els } => {
                let branch = if self.bool(*cond)? { *then } else { *els };
                return self.eval(branch);
            }
            Expr::Table(items) => {
                let mut t = Vec::with_capacity(items.len());
                for &x in items {
                    t.push(self.int(x)?);
                }
                Value::Table(t.into())
            }
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
                let buf = match self.eval(*buffer)? {
                    Value::Buffer(b) => b,
                    Value::Table(t) => return self.table_index(&t, *ranks, index.is_some(), span),
                    _ => {
                        return Err(self.error(
                            CompileError::Internal("not a buffer".into()),
                            ir.expr(*buffer).1,
                        ));
                    }
                };
                let ranks = self.rank_sel(*ranks)?;
                let index = match index {
                    Some(s) => Some(self.index_sel(buf, *s, span)?),
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

    /// `t[i]`: the element, or an error naming the index and the table's length.
    fn table_index(&mut self, t: &[i64], ranks: Sel, second: bool, span: Span) -> R<Value> {
        let (Sel::One(e), false) = (ranks, second) else {
            return Err(self.error(
                CompileError::Internal("a table read with a selector".into()),
                span,
            ));
        };
        let i = self.int(e)?;
        match usize::try_from(i).ok().and_then(|u| t.get(u)) {
            Some(&v) => Ok(Value::Int(v)),
            None => Err(self
                .error(
                    CompileError::TableIndexOutOfRange {
                        index: i,
                        len: t.len(),
                    },
                    span,
                )
                .with_label(format!("index {i}"))
                .into()),
        }
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

    /// `span` is the whole reference's, for `*` of an empty buffer.
    fn index_sel(&mut self, buf: BufId, s: Sel, span: Span) -> R<(u32, u32)> {
        let ir = self.ir;
        Ok(match s {
            Sel::All if self.chunks_of(buf) == 0 => {
                return Err(self.error(
                    CompileError::IndexOutOfRange {
                        buffer: self.ir.buffer_name(buf).to_string(),
                        index: 0,
                        chunks: 0,
                    },
                    span,
                ));
            }
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

/// Removes the buffers of zero chunks (scratch ones only: `input` and `output` hold at least
/// one) and renumbers the others in `ops` and `expects`, so every buffer of the result has a
/// chunk. Nothing refers to an empty buffer: every reference to one is out of range.
fn drop_empty_buffers(
    buffers: Vec<Buffer>,
    mut ops: Vec<ChunkOp>,
    mut expects: Vec<Expect>,
) -> (Vec<Buffer>, Vec<ChunkOp>, Vec<Expect>) {
    if buffers.iter().all(|b| b.chunks > 0) {
        return (buffers, ops, expects);
    }
    let mut renumber = Vec::with_capacity(buffers.len());
    let mut kept = Vec::with_capacity(buffers.len());
    for b in buffers {
        renumber.push(BufId(u32::try_from(kept.len()).unwrap_or(u32::MAX)));
        if b.chunks > 0 {
            kept.push(b);
        }
    }
    let fix = |l: &mut Loc| {
        if let Some(&to) = renumber.get(l.buffer.index()) {
            l.buffer = to;
        }
    };
    for op in &mut ops {
        fix(&mut op.src);
        fix(&mut op.dst);
    }
    for x in &mut expects {
        fix(&mut x.dst);
        x.srcs.iter_mut().for_each(fix);
    }
    (kept, ops, expects)
}

fn to_i64(x: usize) -> i64 {
    i64::try_from(x).unwrap_or(i64::MAX)
}

fn show(v: &Value) -> String {
    match v {
        Value::Int(i) => i.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Buffer(b) => format!("buffer {}", b.0),
        Value::Chunk(c) => format!(
            "chunk of buffer {} ranks {}..{}",
            c.buffer.0, c.ranks.start, c.ranks.end
        ),
        Value::Table(t) => format!("a table of {} elements", t.len()),
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
