//! Loops, and one large loop run on several threads.
//!
//! A `for` loop of the body whose iterations share no state (its body assigns no variable
//! declared outside it, and functions cannot assign the body's) makes the same operations
//! whichever thread runs an iteration, as long as they are put back in iteration order. So
//! when the first iteration shows that the rest are worth it ([`SPLIT_STEPS`]), the
//! remaining iterations are cut into consecutive pieces: this interpreter runs the first
//! (handing its operations to the sink as always), a copy of it on another thread runs each
//! other piece, and the pieces' operations, postconditions and steps are appended in order.
//!
//! Nothing of the serial run's result or errors changes: a piece is taken only when it ran
//! without error and the steps and operations before it plus its own stay within the
//! limits; otherwise this interpreter runs that piece itself, serially, and meets the error
//! (with its context, and at the same step and operation count) as a serial run would. Only
//! the interpreter that runs the body splits (not its copies, not inside a call, not while a
//! failed proof's context is being captured), so pieces never nest.

use super::*;
use std::sync::atomic::{AtomicBool, Ordering};

/// Steps the iterations after the first must take, by the first's count, before they are
/// split: below it, starting a thread costs about as much as it saves.
const SPLIT_STEPS: u64 = 1 << 16;

/// Most pieces a loop is cut into.
const MAX_PIECES: usize = 16;

/// What a copy of the interpreter needs to run a piece of a loop on another thread.
struct Seed {
    frames: Vec<Frame>,
    loop_spans: Vec<Span>,
    buffers: Vec<Buffer>,
    params: Vec<i64>,
    root: u32,
    k: u64,
    steps: u64,
    ops_before: usize,
    /// Ops the piece is expected to make.
    ops: usize,
}

/// What a piece made.
struct Piece {
    ops: Vec<ChunkOp>,
    expects: Vec<Expect>,
    /// Steps it took.
    steps: u64,
}

/// One loop: its variable, span and body.
#[derive(Clone, Copy)]
pub(super) struct Loop<'a> {
    pub var: Slot,
    pub span: Span,
    pub body: &'a [StmtId],
    /// The step between iterations (not 0).
    pub step: i64,
    /// The bound the variable stops at.
    pub end: i64,
}

impl Loop<'_> {
    /// Iterations left from `i` on.
    fn left(&self, i: i64) -> u64 {
        let (i, end, step) = (i128::from(i), i128::from(self.end), i128::from(self.step));
        let span = if step > 0 { end - i } else { i - end };
        if span <= 0 {
            return 0;
        }
        let n = (span + step.abs() - 1) / step.abs();
        u64::try_from(n).unwrap_or(u64::MAX)
    }
}

impl<'a> Interp<'a, '_> {
    /// Runs loop `l` from its first value `i`.
    pub(super) fn run_for(&mut self, l: Loop<'a>, i: i64) -> R<Flow> {
        let (before, made) = (self.steps, self.ops.len());
        let next = match self.iterations(l, i, 1)? {
            (Flow::Normal, Some(next)) => next,
            (flow, _) => return Ok(flow),
        };
        if self.may_split() {
            let left = l.left(next);
            let first = self.steps - before;
            if first.saturating_mul(left) >= SPLIT_STEPS && splittable(self.ir, l) {
                let per_iteration = (self.ops.len() - made) as u64;
                return self.split(l, next, left, per_iteration);
            }
        }
        Ok(self.iterations(l, next, u64::MAX)?.0)
    }

    /// Runs at most `max` iterations of `l` from value `i`: the flow, and the next value
    /// while the loop goes on.
    fn iterations(&mut self, l: Loop<'a>, mut i: i64, max: u64) -> R<(Flow, Option<i64>)> {
        let mut done = 0;
        while done < max {
            if (l.step > 0 && i >= l.end) || (l.step < 0 && i <= l.end) {
                return Ok((Flow::Normal, None));
            }
            if self.cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
                return Err(self.error(CompileError::Internal("cancelled".into()), l.span));
            }
            self.set(l.var, Value::Int(i));
            self.tick(l.span)?;
            if let Flow::Return(v) = self.block(l.body)? {
                return Ok((Flow::Return(v), None));
            }
            done += 1;
            match i.checked_add(l.step) {
                Some(next) => i = next,
                None => return Ok((Flow::Normal, None)),
            }
        }
        Ok((Flow::Normal, Some(i)))
    }

    fn may_split(&self) -> bool {
        self.cancel.is_none()
            && !self.splitting
            && self.mode == Mode::Body
            && self.frames.len() == 1
            && self.setup.options.capture_op.is_none()
    }

    /// Runs the `left` iterations of `l` from value `next` in pieces (module docs); the
    /// first made `per_iteration` ops, which sizes each piece's list (within the op limit).
    fn split(&mut self, l: Loop<'a>, next: i64, left: u64, per_iteration: u64) -> R<Flow> {
        let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
        let pieces = threads
            .min(MAX_PIECES)
            .min(usize::try_from(left).unwrap_or(usize::MAX));
        if pieces < 2 {
            return Ok(self.iterations(l, next, u64::MAX)?.0);
        }
        // Piece p runs `count` iterations from `start`; every value is inside the loop.
        let per = left / pieces as u64;
        let extra = left % pieces as u64;
        let mut starts = Vec::with_capacity(pieces);
        let mut at = next;
        for p in 0..pieces as u64 {
            let count = per + u64::from(p < extra);
            starts.push((at, count));
            at = at.wrapping_add((count as i64).wrapping_mul(l.step));
        }
        let room = |count: u64, made: usize| {
            let limit = self.setup.options.op_limit.saturating_sub(made);
            usize::try_from(per_iteration.saturating_mul(count)).map_or(limit, |n| n.min(limit))
        };
        self.ops.reserve(room(left, self.ops.len()));
        let cancel = AtomicBool::new(false);
        self.splitting = true;
        #[cfg(test)]
        SPLITS.with(|s| s.set(s.get() + 1));
        let (ir, codes, setup) = (self.ir, self.codes, self.setup);
        let result = std::thread::scope(|scope| {
            let handles: Vec<_> = starts[1..]
                .iter()
                .map(|&(start, count)| {
                    let seed = self.seed(room(count, self.ops.len()));
                    let cancel = &cancel;
                    scope.spawn(move || seed.run(ir, codes, setup, cancel, l, start, count))
                })
                .collect();
            let result = self.pieces(l, &starts, handles);
            if result.is_err() {
                cancel.store(true, Ordering::Relaxed);
            }
            result
        });
        self.splitting = false;
        result
    }

    /// Runs the first piece here, then takes each other piece's result in order, or runs
    /// the piece here where its result cannot be taken.
    fn pieces(
        &mut self,
        l: Loop<'a>,
        starts: &[(i64, u64)],
        handles: Vec<std::thread::ScopedJoinHandle<'_, Option<Piece>>>,
    ) -> R<Flow> {
        let (start, count) = starts[0];
        self.iterations(l, start, count)?;
        for (&(start, count), handle) in starts[1..].iter().zip(handles) {
            let options = self.setup.options;
            match handle.join().ok().flatten() {
                Some(p)
                    if self.steps.saturating_add(p.steps) <= options.step_limit
                        && self.ops.len().saturating_add(p.ops.len()) <= options.op_limit =>
                {
                    self.take(p)
                }
                _ => {
                    self.iterations(l, start, count)?;
                }
            }
        }
        Ok(Flow::Normal)
    }

    /// Appends a piece's results, handing the sink each block of ops it completes.
    fn take(&mut self, p: Piece) {
        let from = self.ops.len();
        self.ops.extend_from_slice(&p.ops);
        drop(p.ops);
        self.expects.extend(p.expects);
        self.steps += p.steps;
        let block = super::super::STREAM_BLOCK;
        if let (Some(sink), Some(header)) = (self.sink.as_mut(), &self.header) {
            let mut end = (from / block + 1) * block;
            while end <= self.ops.len() {
                sink(header, &self.ops[end - block..end]);
                end += block;
            }
        }
    }

    /// A copy for a piece that will make about `ops` ops.
    fn seed(&self, ops: usize) -> Seed {
        Seed {
            frames: self.frames.clone(),
            loop_spans: self.loop_spans.clone(),
            buffers: self.buffers.clone(),
            params: self.params.clone(),
            root: self.root,
            k: self.k,
            steps: self.steps,
            ops_before: self.ops.len(),
            ops,
        }
    }
}

impl Seed {
    /// Runs `count` iterations of `l` from value `start` in a copy of the interpreter;
    /// `None` on any error (the piece is then run again where the error can be reported).
    #[allow(clippy::too_many_arguments)]
    fn run<'a>(
        self,
        ir: &'a Ir,
        codes: &'a [Option<Box<[exprs::IntOp]>>],
        setup: &'a Setup<'a>,
        cancel: &'a AtomicBool,
        l: Loop<'a>,
        start: i64,
        count: u64,
    ) -> Option<Piece> {
        let mut it = Interp::new(ir, codes, setup, None);
        it.cancel = Some(cancel);
        it.frames = self.frames;
        it.loop_spans = self.loop_spans;
        it.buffers = self.buffers;
        it.params = self.params;
        it.root = self.root;
        it.k = self.k;
        it.steps = self.steps;
        it.ops_before = self.ops_before;
        it.ops.reserve(self.ops);
        it.mode = Mode::Body;
        it.iterations(l, start, count).ok()?;
        Some(Piece {
            ops: it.ops,
            expects: it.expects,
            steps: it.steps - self.steps,
        })
    }
}

/// Whether `l`'s iterations share no state: its body assigns only variables declared inside
/// it (its own variable included), and returns nothing.
fn splittable(ir: &Ir, l: Loop<'_>) -> bool {
    fn walk(ir: &Ir, stmts: &[StmtId], declared: &mut Vec<Slot>, assigned: &mut Vec<Slot>) -> bool {
        stmts.iter().all(|&s| match &ir.stmt(s).0 {
            Stmt::Let(slot, _) => {
                declared.push(*slot);
                true
            }
            Stmt::Assign(slot, _) => {
                assigned.push(*slot);
                true
            }
            Stmt::For { var, body, .. } => {
                declared.push(*var);
                walk(ir, body, declared, assigned)
            }
            Stmt::While { body, .. } => walk(ir, body, declared, assigned),
            Stmt::If { then, els, .. } => {
                walk(ir, then, declared, assigned) && walk(ir, els, declared, assigned)
            }
            Stmt::Return(_) => false,
            Stmt::Transfer { .. } | Stmt::Assert(_) | Stmt::Expect { .. } | Stmt::Call(..) => true,
        })
    }
    let mut declared = vec![l.var];
    let mut assigned = Vec::new();
    walk(ir, l.body, &mut declared, &mut assigned) && assigned.iter().all(|a| declared.contains(a))
}

#[cfg(test)]
thread_local! {
    /// Loops split by this thread, for tests.
    static SPLITS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
mod tests {
    use crate::elaborate::{Options, elaborate};
    use coll_lang::Diagnostics;

    /// A reduce-scatter ring at 256 ranks whose outer loop runs `stmt` for every rank, then
    /// `last` on a line of its own. `let d = c + 1;` leaves the loop splittable; `c = c +
    /// 1;` (padded to the same length, so every span is the same) does not.
    fn ring(stmt: &str, last: &str) -> String {
        format!(
            "collective allreduce ring(n) {{ chunks n; inplace; }}\n\
             let c = 0;\n\
             for s in 0..n - 1 {{\n    for r in 0..n {{ {stmt} reduce input[r][(r - s - 1) % n] -> input[(r + 1) % n]; }}\n    {last}\n}}\n"
        )
    }

    const SPLIT: &str = "let d = c + 1;";
    const SERIAL: &str = "c = c + 1;    ";

    /// Elaborates `src` at 256 ranks: the result, and how many loops were split.
    fn run(src: &str, options: &Options) -> (Result<crate::elaborate::Elaborated, String>, usize) {
        let m = coll_lang::load_bytes("ring.coll", src.as_bytes().to_vec()).expect("valid");
        let before = super::SPLITS.with(|s| s.get());
        let e = elaborate(&m, &crate::elaborate::Facts::nvswitch(256), options)
            .map_err(|d: Diagnostics<_>| d.render());
        (e, super::SPLITS.with(|s| s.get()) - before)
    }

    fn threads() -> usize {
        std::thread::available_parallelism().map_or(1, |t| t.get())
    }

    /// Split or not, a loop makes the same ops, in order, in the same steps.
    #[test]
    fn a_split_loop_makes_what_the_serial_loop_makes() {
        let options = Options::default();
        let (split, splits) = run(&ring("", SPLIT), &options);
        let (serial, none) = run(&ring("", SERIAL), &options);
        let (split, serial) = (split.expect("elaborates"), serial.expect("elaborates"));
        assert_eq!(none, 0);
        assert_eq!(splits, usize::from(threads() > 1));
        assert_eq!(split.ops.len(), 255 * 256);
        assert_eq!(split.ops, serial.ops);
        assert_eq!(split.steps, serial.steps);
    }

    /// An error in a piece another thread ran, at the op limit or the step limit inside it,
    /// is reported as the serial loop reports it: same place, context and counts.
    #[test]
    fn errors_in_a_split_loop_are_the_serial_loops() {
        let cases = [
            // s = 200 is in the second half of the iterations.
            ("assert s < 200 or r < 3;", Options::default()),
            (
                "",
                Options {
                    op_limit: 50_000,
                    ..Options::default()
                },
            ),
            (
                "",
                Options {
                    step_limit: 100_000,
                    ..Options::default()
                },
            ),
        ];
        for (stmt, options) in cases {
            let (split, _) = run(&ring(stmt, SPLIT), &options);
            let (serial, _) = run(&ring(stmt, SERIAL), &options);
            let (split, serial) = (split.expect_err("fails"), serial.expect_err("fails"));
            assert!(split.contains("at this point: with s = "), "{split}");
            assert_eq!(split, serial);
        }
    }
}
