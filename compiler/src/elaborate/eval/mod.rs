//! The interpreter: runs the resolved program for one machine and records chunk operations.
//!
//! Arithmetic is checked (overflow, division by zero and bad shifts are errors); `/` and `%`
//! are Euclidean. Work is bounded by [`Options`]: steps, operations and call depth. Every
//! error carries the span of the code that failed and notes with the loop variables and
//! calls active at that moment.
//!
//! Order: the header's `param`s first (the caller's values from [`Options::params`], else
//! their defaults), then `ranks`, `chunks`, scratch sizes and hints, then the body, then
//! `ensure`. A function reads the body's top-level variables as they are when it runs
//! (`ensure` sees their final values); one whose `let` has not run yet is an error. Tables
//! are immutable and shared ([`Arc`]); an index outside one is an error naming index and
//! length. A large loop may run on several threads ([`split`]), with the same result.

use super::ir::*;
use super::{Buffer, ChunkOp, Elaborated, Expect, Facts, Loc, Options, RankRange};
use crate::error::CompileError;
use coll_lang::ast::{BinOp, TransferOp, UnOp};
use coll_lang::builtins::{Builtin, CollectiveKind};
use coll_lang::{Diagnostic, Span};
use smallvec::SmallVec;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

mod exprs;
mod split;
mod transfer;

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
    Table(Arc<[i64]>),
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
#[derive(Clone)]
struct Frame {
    vars: Vec<Value>,
    /// `None` for the body/header/ensure frame, else the function.
    func: Option<FnId>,
    /// Loop slots active in this frame, outermost first.
    loops: Vec<Slot>,
}

struct Interp<'a, 's> {
    /// Takes the ops in blocks as they are made ([`super::elaborate_streaming`]).
    sink: Option<&'s mut super::OpSink<'s>>,
    /// The result's header, for `sink`: set before the body runs when there is one.
    header: Option<Elaborated>,
    ir: &'a Ir,
    /// [`exprs::int_codes`] of `ir`.
    codes: &'a [Option<Box<[exprs::IntOp]>>],
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
    /// Ops made before this interpreter's first, by the one it runs a piece of a loop for
    /// ([`split`]): counted against the op limit.
    ops_before: usize,
    /// Running a piece of a loop for another interpreter: stop (with an error) when set.
    cancel: Option<&'a AtomicBool>,
    /// A loop is being split: no other splits until it ends.
    splitting: bool,
}

pub(super) fn run(
    ir: &Ir,
    setup: Setup<'_>,
    sink: Option<&mut super::OpSink<'_>>,
) -> Result<Elaborated, Diag> {
    let codes = exprs::int_codes(ir);
    let mut it = Interp::new(
        ir,
        &codes,
        &setup,
        // Shortens the closure's lifetime to the borrow's (not through an `Option`).
        match sink {
            Some(s) => Some(s),
            None => None,
        },
    );
    it.execute().map_err(|d| *d)
}

impl<'a, 's> Interp<'a, 's> {
    fn new(
        ir: &'a Ir,
        codes: &'a [Option<Box<[exprs::IntOp]>>],
        setup: &'a Setup<'a>,
        sink: Option<&'s mut super::OpSink<'s>>,
    ) -> Interp<'a, 's> {
        Interp {
            sink,
            header: None,
            ir,
            codes,
            setup,
            n: u32::try_from(setup.facts.n).unwrap_or(u32::MAX),
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
            ops_before: 0,
            cancel: None,
            splitting: false,
        }
    }

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
                    "every chunk of every rank is tracked; lower `chunks`, the scratch sizes or the rank count, or raise the limit with `--cell-limit CELLS`",
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

        // Everything of the result but what the body and the postcondition make.
        let head = Elaborated {
            kind: setup.kind,
            name: setup.name.clone(),
            inplace: setup.inplace,
            from_in_place: false,
            n: self.n,
            root: self.root,
            chunk_factor: k,
            buffers: Vec::new(),
            ops: Vec::new(),
            expects: Vec::new(),
            instances,
            pipeline,
            protocol,
            channel,
            topology: facts.topology.clone(),
            header_span: setup.header_span,
            captured_context: None,
            steps: 0,
        };
        // Ops handed over as they are made must be the result's: not when empty buffers
        // are dropped at the end, which renumbers the others.
        if self.sink.is_some() && self.buffers.iter().all(|b| b.chunks > 0) {
            self.header = Some(Elaborated {
                buffers: self.buffers.clone(),
                ..head.clone()
            });
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
            buffers,
            ops,
            expects,
            captured_context: self.captured.take(),
            steps: self.steps,
            ..head
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

    #[inline]
    fn tick(&mut self, span: Span) -> R<()> {
        self.steps += 1;
        if self.steps > self.setup.options.step_limit {
            return Err(self.step_limit_error(span));
        }
        Ok(())
    }

    /// Apart from [`Interp::tick`], which runs for every statement and iteration, so that
    /// it stays a count and a comparison inline.
    #[cold]
    #[inline(never)]
    fn step_limit_error(&self, span: Span) -> Box<Diag> {
        let (at, label) = match self.loop_spans.last() {
            Some(&l) => (l, "still running here"),
            None => (span, "the last statement run"),
        };
        self.error(
            CompileError::StepLimit {
                limit: self.setup.options.step_limit,
            },
            at,
        )
        .with_label(label)
        .with_note("the step limit stops endless loops; raise it with `--step-limit STEPS`")
        .into()
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
                // Every operand once, in source order, then one op per source. Inline: a
                // heap list per transfer was a tenth of elaboration's time.
                let mut vals: SmallVec<[(ChunkVal, Span); 2]> = SmallVec::new();
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
                let l = split::Loop {
                    var: *var,
                    span,
                    body,
                    step: s,
                    end: b,
                };
                let result = self.run_for(l, a);
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
