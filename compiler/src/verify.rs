//! Symbolic verification: runs the chunk operations on *contents* instead of data and proves
//! that every buffer ends as the declared collective requires.
//!
//! A chunk's content is the set of contributions combined into it, each contribution being
//! one chunk of one rank's original `input`, keyed `index * n + rank`. Sets are kept as
//! sorted, disjoint, non-adjacent half-open key intervals ([`Contents`]); "chunk `i` of every
//! rank" is the single interval `i*n .. i*n+n`, so the structured algorithms stay at one or
//! two intervals per chunk and n = 1024 is cheap.
//!
//! Semantics (program order): `copy` replaces the destination with the source's content;
//! one-to-one and one-to-many `reduce` add the source to each destination; many-to-one
//! `reduce` stores the combination of the sources (the destination's own content counts only
//! when it is one of the sources, as a switch's load-reduce does). Rejected: reading a chunk
//! nothing was written to, combining a contribution that is already there (a one-to-one
//! `reduce` of a chunk onto itself among them), and a final state that differs from the
//! postcondition. In-place collectives alias `input` and `output` as
//! MSCCL lays them out: allgather's input is the rank's slice of output, reducescatter's
//! output is the rank's slice of input, the others share one buffer.

use crate::elaborate::{BufId, ChunkOp, Elaborated, Expect, Loc, OpKind};
use crate::error::CompileError;
use coll_lang::builtins::CollectiveKind;
use coll_lang::{Diagnostic, Diagnostics, SourceFile, Span};
use smallvec::SmallVec;

/// A set of contribution keys as sorted half-open intervals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Contents(SmallVec<[(u32, u32); 2]>);

impl Contents {
    pub fn single(key: u64) -> Contents {
        Contents::interval(key, key + 1)
    }

    pub fn interval(lo: u64, hi: u64) -> Contents {
        Contents(SmallVec::from_slice(&[(key32(lo), key32(hi))]))
    }

    pub fn is_interval(&self, lo: u64, hi: u64) -> bool {
        self.0.len() == 1 && self.0[0] == (key32(lo), key32(hi))
    }

    pub fn len(&self) -> u64 {
        self.0.iter().map(|(a, b)| u64::from(b - a)).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn contains(&self, key: u64) -> bool {
        let k = key32(key);
        self.0.iter().any(|&(a, b)| a <= k && k < b)
    }

    /// Adds `other`; on overlap returns the first key present in both.
    pub fn union_disjoint(&self, other: &Contents) -> Result<Contents, u64> {
        // Inline until the result itself needs more than two intervals: reserving for both
        // inputs put most two-interval results of a ring on the heap (16 MB left resident
        // at n = 1024).
        let mut out: SmallVec<[(u32, u32); 2]> = SmallVec::new();
        let (mut i, mut j) = (0, 0);
        let (a, b) = (&self.0, &other.0);
        while i < a.len() || j < b.len() {
            let next = if j >= b.len() || (i < a.len() && a[i].0 <= b[j].0) {
                i += 1;
                a[i - 1]
            } else {
                j += 1;
                b[j - 1]
            };
            match out.last_mut() {
                Some(last) if next.0 < last.1 => return Err(u64::from(next.0)),
                Some(last) if next.0 == last.1 => last.1 = next.1,
                _ => out.push(next),
            }
        }
        Ok(Contents(out))
    }

    /// Human-readable, e.g. `input[0..8][2]` or `input[3][0] + input[5][1]`.
    pub fn describe(&self, n: u64) -> String {
        let mut terms = Vec::new();
        let mut total = 0usize;
        for &(lo, hi) in &self.0 {
            let (lo, hi) = (u64::from(lo), u64::from(hi));
            let mut k = lo;
            while k < hi {
                let index = k / n;
                let first = k % n;
                let end = hi.min((index + 1) * n);
                let last = end - 1 - index * n;
                total += 1;
                if terms.len() < 6 {
                    terms.push(if first == last {
                        format!("input[{first}][{index}]")
                    } else {
                        format!("input[{first}..{}][{index}]", last + 1)
                    });
                }
                k = end;
            }
        }
        if terms.is_empty() {
            return "nothing".to_string();
        }
        let mut s = terms.join(" + ");
        if total > terms.len() {
            s.push_str(&format!(" + … ({} terms in all)", total));
        }
        s
    }
}

/// Keys fit 32 bits: elaboration bounds `n * input chunks` below 2^32.
fn key32(k: u64) -> u32 {
    u32::try_from(k).unwrap_or(u32::MAX)
}

/// What a successful proof covered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proof {
    pub ops: usize,
    pub chunks_checked: u64,
}

const NO_WRITER: u32 = u32::MAX;

/// One chunk of [`State`]: what it holds, whether anything was written to it, and the op
/// that last wrote it, side by side: ops touch cells all over the state (32 MB for ring
/// allreduce at n = 1024), and a write is then one place in memory, not two.
#[derive(Clone, Debug)]
struct Cell {
    contents: Contents,
    written: bool,
    writer: u32,
}

impl Cell {
    fn unwritten() -> Cell {
        Cell {
            contents: Contents::default(),
            written: false,
            writer: NO_WRITER,
        }
    }

    fn get(&self) -> Option<&Contents> {
        self.written.then_some(&self.contents)
    }
}

/// Physical storage: `input` and `output` may alias (in-place).
#[derive(Debug)]
struct State {
    n: u64,
    /// Per physical buffer: a cell per `rank * chunks + index`.
    cells: Vec<Vec<Cell>>,
    chunks: Vec<u64>,
}

struct Verifier<'a> {
    e: &'a Elaborated,
    state: &'a mut State,
}

/// Proves `e` correct, or explains the first way it is not.
pub fn verify(e: &Elaborated, file: &SourceFile) -> Result<Proof, Diagnostics<CompileError>> {
    verify_detailed(e).map_err(|f| Diagnostics {
        file: file.clone(),
        list: vec![f.diagnostic],
    })
}

/// Why a proof failed, and the operation to blame (the failing one, or the last write of
/// a wrong chunk), so callers can add the loop context that produced it.
#[derive(Clone, Debug)]
pub struct Failure {
    pub diagnostic: Diagnostic<CompileError>,
    pub op: Option<usize>,
}

/// [`verify`] with the operation to blame.
pub fn verify_detailed(e: &Elaborated) -> Result<Proof, Failure> {
    let mut state = State::new(e);
    let mut v = Verifier {
        e,
        state: &mut state,
    };
    v.run().map_err(|(d, op)| failure(e, d, op))
}

fn failure(e: &Elaborated, d: Diagnostic<CompileError>, op: Option<usize>) -> Failure {
    Failure {
        diagnostic: d.with_note(format!("verifying for n = {} on {}", e.n, e.topology)),
        op,
    }
}

/// [`verify_detailed`] fed the ops a block at a time as elaboration makes them
/// ([`crate::elaborate::elaborate_streaming`]), so that the proof runs beside it.
#[derive(Debug)]
pub struct Streamed {
    /// The program's header: an [`Elaborated`] without ops.
    header: Elaborated,
    state: State,
    /// Ops applied (or, after a failure, passed over) so far.
    applied: usize,
    /// The first op that failed, and why.
    failed: Option<(Diagnostic<CompileError>, usize)>,
}

impl Streamed {
    pub fn new(header: Elaborated) -> Streamed {
        Streamed {
            state: State::new(&header),
            header,
            applied: 0,
            failed: None,
        }
    }

    /// Applies the next ops in program order; after a failure, only counts them.
    pub fn apply(&mut self, ops: &[ChunkOp]) {
        if self.failed.is_none() {
            let mut v = Verifier {
                e: &self.header,
                state: &mut self.state,
            };
            for (j, op) in ops.iter().enumerate() {
                let i = self.applied + j;
                if let Err(d) = v.apply(i, op) {
                    self.failed = Some((*d, i));
                    break;
                }
            }
        }
        self.applied += ops.len();
    }

    /// The proof of `e`, whose ops were all applied, in order: what [`verify_detailed`]
    /// returns for it.
    pub fn finish(mut self, e: &Elaborated) -> Result<Proof, Failure> {
        if let Some((d, i)) = self.failed {
            return Err(failure(e, d, Some(i)));
        }
        let v = Verifier {
            e,
            state: &mut self.state,
        };
        let checked = v.check_final().map_err(|(d, op)| failure(e, *d, op))?;
        Ok(Proof {
            ops: e.ops.len(),
            chunks_checked: checked,
        })
    }

    /// [`Streamed::finish`] where the proof holds, without the program's ops (which only
    /// explain a failure), so that it can end on the thread that applied them; the state
    /// is freed there too. `expects` is the postcondition, known only once elaboration
    /// ends. Where the proof fails, `self` is handed back for [`Streamed::finish`].
    pub fn finish_proved(mut self, expects: Vec<Expect>) -> Result<Proof, Box<Streamed>> {
        if self.failed.is_some() {
            return Err(Box::new(self));
        }
        self.header.expects = expects;
        let v = Verifier {
            e: &self.header,
            state: &mut self.state,
        };
        match v.check_final() {
            Ok(checked) => Ok(Proof {
                ops: self.applied,
                chunks_checked: checked,
            }),
            Err(_) => Err(Box::new(self)),
        }
    }
}

type R<T> = Result<T, Box<Diagnostic<CompileError>>>;

impl State {
    fn new(e: &Elaborated) -> State {
        let n = u64::from(e.n);
        let chunks: Vec<u64> = e.buffers.iter().map(|b| b.chunks).collect();
        // In place, `input` and `output` are one physical buffer: the other gets no cells
        // (never indexed, and 32 MB for ring allreduce at n = 1024).
        let physical =
            |b: usize| crate::layout::alias(e.kind, e.inplace, e.chunk_factor, b, 0, 0).0 == b;
        let cells = chunks
            .iter()
            .enumerate()
            .map(|(b, &c)| {
                let len = if physical(b) { (n * c) as usize } else { 0 };
                vec![Cell::unwritten(); len]
            })
            .collect();
        let mut s = State { n, cells, chunks };
        let k_in = s.chunks[0];
        for r in 0..n {
            for i in 0..k_in {
                let (b, at) = s.phys(e, BufId::INPUT, r, i);
                let cell = &mut s.cells[b][at];
                cell.contents = Contents::single(i * n + r);
                cell.written = true;
            }
        }
        s
    }

    /// The physical buffer and cell of `buffer[rank][index]`.
    fn phys(&self, e: &Elaborated, buffer: BufId, rank: u64, index: u64) -> (usize, usize) {
        let (b, i) = crate::layout::alias(
            e.kind,
            e.inplace,
            e.chunk_factor,
            buffer.index(),
            rank,
            index,
        );
        (b, (rank * self.chunks[b] + i) as usize)
    }
}

impl<'a> Verifier<'a> {
    fn run(&mut self) -> Result<Proof, (Diagnostic<CompileError>, Option<usize>)> {
        let e = self.e;
        for (i, op) in e.ops.iter().enumerate() {
            self.apply(i, op).map_err(|d| (*d, Some(i)))?;
        }
        let checked = self.check_final().map_err(|(d, op)| (*d, op))?;
        Ok(Proof {
            ops: e.ops.len(),
            chunks_checked: checked,
        })
    }

    fn name(&self, b: BufId) -> String {
        self.e
            .buffers
            .get(b.index())
            .map_or_else(|| "buffer".to_string(), |x| x.name.clone())
    }

    /// The physical cell of chunk `off` of `loc` on `rank`, which must have been written:
    /// read it with [`Verifier::contents`] (no copy of the contents for what only reads).
    /// Inlined into `apply`, which reads every chunk of every op (`#[inline]` alone left it
    /// a call); the error out of line.
    #[inline(always)]
    fn read(&self, op: &ChunkOp, loc: Loc, rank: u64, off: u64) -> R<(usize, usize)> {
        let index = u64::from(loc.index) + off;
        let (b, at) = self.state.phys(self.e, loc.buffer, rank, index);
        match self.state.cells[b][at].written {
            true => Ok((b, at)),
            false => self.uninitialised_read(op, loc, rank, index),
        }
    }

    /// [`Verifier::read`]'s error.
    #[cold]
    #[inline(never)]
    fn uninitialised_read(
        &self,
        op: &ChunkOp,
        loc: Loc,
        rank: u64,
        index: u64,
    ) -> R<(usize, usize)> {
        Err(Box::new(
            Diagnostic::new(
                CompileError::UninitialisedRead {
                    buffer: self.name(loc.buffer),
                    rank: rank as u32,
                    chunk: index,
                },
                op.span,
            )
            .with_label("reads it here")
            .with_note(format!("the operation: {}", describe_op(self.e, op)))
            .with_note(format!(
                "nothing before this {} writes {}[{rank}][{index}]",
                op.kind.keyword(),
                self.name(loc.buffer)
            )),
        ))
    }

    fn contents(&self, (b, at): (usize, usize)) -> &Contents {
        &self.state.cells[b][at].contents
    }

    /// Inlined into `apply`, which writes every chunk of every op (`#[inline]` alone left
    /// it a call).
    #[inline(always)]
    fn write(&mut self, i: usize, loc: Loc, rank: u64, off: u64, c: Contents) {
        let (b, at) = self
            .state
            .phys(self.e, loc.buffer, rank, u64::from(loc.index) + off);
        self.state.cells[b][at] = Cell {
            contents: c,
            written: true,
            writer: i as u32,
        };
    }

    fn twice(
        &self,
        op: &ChunkOp,
        key: u64,
        dst: Loc,
        rank: u64,
        off: u64,
        why: String,
    ) -> Box<Diagnostic<CompileError>> {
        let n = self.state.n;
        let index = u64::from(dst.index) + off;
        Box::new(
            Diagnostic::new(
                CompileError::ReducedTwice {
                    contribution: format!("input[{}][{}]", key % n, key / n),
                    buffer: self.name(dst.buffer),
                    rank: rank as u32,
                    chunk: index,
                },
                op.span,
            )
            .with_label("combined again here")
            .with_note(format!("the operation: {}", describe_op(self.e, op)))
            .with_note(why)
            .with_note("every rank's contribution may be combined into a chunk only once"),
        )
    }

    fn apply(&mut self, i: usize, op: &ChunkOp) -> R<()> {
        for off in 0..u64::from(op.count) {
            let src_multi = op.src.ranks.is_multi();
            match op.kind {
                OpKind::Copy => {
                    let src = self.read(op, op.src, u64::from(op.src.ranks.start), off)?;
                    for d in op.dst.ranks.start..op.dst.ranks.end {
                        let dst = self.state.phys(
                            self.e,
                            op.dst.buffer,
                            u64::from(d),
                            u64::from(op.dst.index) + off,
                        );
                        if dst != src {
                            let c = self.contents(src).clone();
                            self.write(i, op.dst, u64::from(d), off, c);
                        }
                    }
                }
                OpKind::Reduce if src_multi => {
                    let d = u64::from(op.dst.ranks.start);
                    let mut acc = Contents::default();
                    for s in op.src.ranks.start..op.src.ranks.end {
                        let c = self.read(op, op.src, u64::from(s), off)?;
                        acc = acc.union_disjoint(self.contents(c)).map_err(|k| {
                            let name = self.name(op.src.buffer);
                            let index = u64::from(op.src.index) + off;
                            // The earlier source that already holds the contribution.
                            let earlier = (op.src.ranks.start..s).find(|&p| {
                                self.read(op, op.src, u64::from(p), off)
                                    .is_ok_and(|c| self.contents(c).contains(k))
                            });
                            let why = match earlier {
                                Some(p) => format!(
                                    "two sources of this group reduce hold it: {name}[{p}][{index}] and {name}[{s}][{index}]"
                                ),
                                None => format!("{name}[{s}][{index}] holds it a second time"),
                            };
                            self.twice(op, k, op.dst, d, off, why)
                        })?;
                    }
                    self.write(i, op.dst, d, off, acc);
                }
                OpKind::Reduce => {
                    let src = self.read(op, op.src, u64::from(op.src.ranks.start), off)?;
                    for d in op.dst.ranks.start..op.dst.ranks.end {
                        let d = u64::from(d);
                        let dst = self.read(op, op.dst, d, off)?;
                        if dst == src {
                            if op.dst.ranks.is_multi() {
                                // A rank's own chunk in a one-to-many reduce: already there.
                                continue;
                            }
                            // Elaboration rejects these; ops from elsewhere (imports) may not.
                            return Err(Box::new(
                                Diagnostic::new(
                                    CompileError::ReduceOntoItself {
                                        buffer: self.name(op.dst.buffer),
                                        rank: d as u32,
                                        chunk: u64::from(op.dst.index) + off,
                                    },
                                    op.span,
                                )
                                .with_label("source and destination are the same chunk")
                                .with_note(format!("the operation: {}", describe_op(self.e, op))),
                            ));
                        }
                        let sum = self
                            .contents(dst)
                            .union_disjoint(self.contents(src))
                            .map_err(|k| {
                                let why = format!(
                                    "{}[{d}][{}] already holds it",
                                    self.name(op.dst.buffer),
                                    u64::from(op.dst.index) + off
                                );
                                self.twice(op, k, op.dst, d, off, why)
                            })?;
                        self.write(i, op.dst, d, off, sum);
                    }
                }
            }
        }
        Ok(())
    }

    /// Compares every constrained chunk with the postcondition.
    fn check_final(&self) -> Result<u64, (Box<Diagnostic<CompileError>>, Option<usize>)> {
        let e = self.e;
        let n = self.state.n;
        let k = e.chunk_factor;
        let root = u64::from(e.root);
        let mut checks: Vec<(BufId, u64, u64, Contents, Span)> = Vec::new();
        let mut failures = 0u64;
        let mut first: Option<(Box<Diagnostic<CompileError>>, Option<usize>)> = None;
        let mut checked = 0u64;
        let mut expect = |s: &Self, buf: BufId, r: u64, i: u64, want: (u64, u64)| {
            checked += 1;
            let (b, at) = s.state.phys(e, buf, r, i);
            if s.state.cells[b][at]
                .get()
                .is_some_and(|c| c.is_interval(want.0, want.1))
            {
                return;
            }
            failures += 1;
            if first.is_none() {
                first = Some(s.postcondition_error(
                    buf,
                    r,
                    i,
                    &Contents::interval(want.0, want.1),
                    None,
                ));
            }
        };
        match e.kind {
            CollectiveKind::Custom => {
                for x in &e.expects {
                    for off in 0..u64::from(x.count) {
                        let mut want = Contents::default();
                        for src in &x.srcs {
                            for s in src.ranks.start..src.ranks.end {
                                let key = (u64::from(src.index) + off) * n + u64::from(s);
                                want = want
                                    .union_disjoint(&Contents::single(key))
                                    .unwrap_or_else(|_| want.clone());
                            }
                        }
                        for d in x.dst.ranks.start..x.dst.ranks.end {
                            checks.push((
                                x.dst.buffer,
                                u64::from(d),
                                u64::from(x.dst.index) + off,
                                want.clone(),
                                x.span,
                            ));
                        }
                    }
                }
            }
            kind => for_each_expected(kind, n, k, root, |r, i, lo, hi| {
                expect(self, BufId::OUTPUT, r, i, (lo, hi))
            }),
        }
        for (buf, r, i, want, span) in &checks {
            checked += 1;
            let (b, at) = self.state.phys(e, *buf, *r, *i);
            if self.state.cells[b][at].get() != Some(want) {
                failures += 1;
                if first.is_none() {
                    first = Some(self.postcondition_error(*buf, *r, *i, want, Some(*span)));
                }
            }
        }
        match first {
            None => Ok(checked),
            Some((mut d, op)) => {
                if failures > 1 {
                    d.notes
                        .push(format!("{} more chunks are wrong", failures - 1));
                }
                Err((d, op))
            }
        }
    }

    fn postcondition_error(
        &self,
        buf: BufId,
        r: u64,
        i: u64,
        want: &Contents,
        required: Option<Span>,
    ) -> (Box<Diagnostic<CompileError>>, Option<usize>) {
        let e = self.e;
        let n = self.state.n;
        let (b, at) = self.state.phys(e, buf, r, i);
        let have = self.state.cells[b][at]
            .get()
            .map_or_else(|| "nothing (never written)".to_string(), |c| c.describe(n));
        let kind = CompileError::Postcondition {
            collective: e.kind.name().to_string(),
            buffer: self.name(buf),
            rank: r as u32,
            chunk: i,
        };
        let writer = self.state.cells[b][at].writer;
        let blamed = e.ops.get(writer as usize).map(|_| writer as usize);
        let mut d = match e.ops.get(writer as usize) {
            Some(op) => Diagnostic::new(kind, op.span)
                .with_label("last written here")
                .with_note(format!(
                    "the last write was op {writer} of {}: {}",
                    e.ops.len(),
                    describe_op(e, op)
                )),
            None => Diagnostic::new(kind, e.header_span)
                .with_label(format!("no operation writes {}[{r}][{i}]", self.name(buf))),
        };
        if let Some(span) = required {
            d = d.with_secondary(span, "required here");
        }
        d = d
            .with_note(format!("expected: {}", want.describe(n)))
            .with_note(format!("found:    {have}"));
        (Box::new(d), blamed)
    }
}

/// An operation as the program would write it with the loop variables substituted, e.g.
/// `reduce input[1][2] -> input[2][2]`.
pub fn describe_op(e: &Elaborated, op: &ChunkOp) -> String {
    let loc = |l: Loc| {
        let name = e
            .buffers
            .get(l.buffer.index())
            .map_or("buffer", |b| b.name.as_str());
        let ranks = if l.ranks.is_multi() {
            format!("{}..{}", l.ranks.start, l.ranks.end)
        } else {
            l.ranks.start.to_string()
        };
        let index = if op.count > 1 {
            format!("{}..{}", l.index, l.index + op.count)
        } else {
            l.index.to_string()
        };
        format!("{name}[{ranks}][{index}]")
    };
    format!("{} {} -> {}", op.kind.keyword(), loc(op.src), loc(op.dst))
}

/// Calls `f(rank, output chunk, lo, hi)` for every output chunk the built-in collective
/// `kind` constrains: it must hold exactly the contribution keys `lo..hi` (keys are
/// `input chunk * n + rank`; `k` chunks per slice). Custom collectives state their own.
pub fn for_each_expected(
    kind: CollectiveKind,
    n: u64,
    k: u64,
    root: u64,
    mut f: impl FnMut(u64, u64, u64, u64),
) {
    let mut all = |r: u64, out: u64, i: u64| f(r, out, i * n, i * n + n);
    match kind {
        CollectiveKind::AllReduce => {
            for r in 0..n {
                for i in 0..k {
                    all(r, i, i);
                }
            }
        }
        CollectiveKind::ReduceScatter => {
            for r in 0..n {
                for j in 0..k {
                    all(r, j, r * k + j);
                }
            }
        }
        CollectiveKind::Reduce => {
            for j in 0..k {
                all(root, j, j);
            }
        }
        _ => {
            let one = |q: u64, i: u64| (i * n + q, i * n + q + 1);
            for r in 0..n {
                match kind {
                    CollectiveKind::AllGather => {
                        for q in 0..n {
                            for j in 0..k {
                                let (lo, hi) = one(q, j);
                                f(r, q * k + j, lo, hi);
                            }
                        }
                    }
                    CollectiveKind::AllToAll => {
                        for q in 0..n {
                            for j in 0..k {
                                let (lo, hi) = one(q, r * k + j);
                                f(r, q * k + j, lo, hi);
                            }
                        }
                    }
                    CollectiveKind::Broadcast => {
                        for j in 0..k {
                            let (lo, hi) = one(root, j);
                            f(r, j, lo, hi);
                        }
                    }
                    CollectiveKind::SendRecv => {
                        for j in 0..k {
                            let (lo, hi) = one((r + n - 1) % n, j);
                            f(r, j, lo, hi);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elaborate::{Facts, Options, elaborate};

    fn elaborated(src: &str, n: usize) -> Elaborated {
        let m = coll_lang::load_bytes("t.coll", src.as_bytes().to_vec()).expect("valid");
        elaborate(&m, &Facts::nvswitch(n), &Options::default()).expect("elaborates")
    }

    /// Elaboration rejects `reduce X -> X`; the proof does too, for operations that come
    /// from elsewhere, while a one-to-many reduce still skips the source rank's own chunk.
    #[test]
    fn a_one_to_one_reduce_onto_itself_is_rejected() {
        let src = "collective allreduce t(n) { chunks 1; inplace; }\n\
                   reduce input[0][0] -> input[1][0];\ncopy input[1][0] -> input[*][0] via switch;\n";
        let mut e = elaborated(src, 2);
        verify_detailed(&e).expect("valid as written");
        e.ops[0].dst = e.ops[0].src;
        let f = verify_detailed(&e).expect_err("onto itself");
        assert_eq!(f.op, Some(0));
        assert_eq!(
            f.diagnostic.kind,
            CompileError::ReduceOntoItself {
                buffer: "input".into(),
                rank: 0,
                chunk: 0,
            }
        );
        // One-to-many from rank 1 to ranks 0..2: rank 1's own chunk is left alone.
        let src = "collective allreduce t(n) { chunks 1; inplace; }\n\
                   reduce input[1][0] -> input[0..2][0] via switch;\ncopy input[0][0] -> input[1][0];\n";
        verify_detailed(&elaborated(src, 2)).expect("valid");
    }
}
