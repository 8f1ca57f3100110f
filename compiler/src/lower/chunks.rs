//! Physical chunk ids of one rank, for the lowering's conflict, liveness and dependence
//! computations.
//!
//! Invariant: ids are `0..total`; two slices touch the same memory of the rank exactly when
//! they share an id (input and output resolved through the collective's aliasing when
//! `inplace`).

use super::{Lowering, ROp};
use crate::layout::alias;
use crate::plan::{OpKind, Slice};
use coll_lang::builtins::CollectiveKind;

/// Physical chunk ids of one rank (aliasing resolved), for conflicts and liveness.
pub(super) struct Chunks<'a> {
    l: &'a Lowering<'a>,
    rank: u64,
    /// First id of each physical buffer.
    base: Vec<u64>,
    /// Ids are `0..total`.
    pub(super) total: u64,
    /// Whether `input` and `output` alias as in an in-place call.
    inplace: bool,
}

impl<'a> Chunks<'a> {
    pub(super) fn new(l: &'a Lowering<'a>, rank: u32, inplace: bool) -> Self {
        let mut base = Vec::with_capacity(l.e.buffers.len());
        let mut acc = 0;
        for b in &l.e.buffers {
            base.push(acc);
            acc += b.chunks * l.pieces;
        }
        Chunks {
            l,
            rank: u64::from(rank),
            base,
            total: acc,
            inplace,
        }
    }

    pub(super) fn id(&self, s: Slice, o: u64) -> u64 {
        let k = self.l.e.chunk_factor * self.l.pieces;
        let (b, i) = alias(
            self.l.e.kind,
            self.inplace,
            k,
            s.0 as usize,
            self.rank,
            s.1 + o,
        );
        self.base.get(b).copied().unwrap_or(0) + i
    }

    pub(super) fn ids(&self, s: Slice, count: u32) -> impl Iterator<Item = u64> + '_ {
        (0..u64::from(count)).map(move |o| self.id(s, o))
    }

    pub(super) fn overlap(&self, a: Slice, an: u32, b: Option<Slice>, bn: u32) -> bool {
        let Some(b) = b else { return false };
        // One chunk, the common case, without collecting.
        if bn == 1 {
            let c = self.id(b, 0);
            return self.ids(a, an).any(|x| x == c);
        }
        let bs: Vec<u64> = self.ids(b, bn).collect();
        self.ids(a, an).any(|c| bs.contains(&c))
    }

    /// Whether `op` is a copy whose source and destination are the same chunks here (in an
    /// in-place numbering: the input copies of a plan made out of place).
    pub(super) fn copies_onto_itself(&self, op: &ROp) -> bool {
        op.kind == OpKind::Copy
            && op
                .src
                .zip(op.dst)
                .is_some_and(|(s, d)| self.ids(s, op.count).eq(self.ids(d, op.count)))
    }

    /// Ids from here on are scratch.
    pub(super) fn scratch_from(&self) -> u64 {
        self.base.get(2).copied().unwrap_or(self.total)
    }

    /// Whether chunk `c` must hold its value when the plan ends: `input` and `output`, but
    /// scratch and the output of a reduce's other ranks, which the collective leaves
    /// undefined.
    pub(super) fn live_at_end(&self, c: u64) -> bool {
        let output = self.base.get(1).copied().unwrap_or(0)..self.scratch_from();
        let undefined = self.l.e.kind == CollectiveKind::Reduce
            && self.rank != u64::from(self.l.e.root)
            && output.contains(&c);
        c < self.scratch_from() && !undefined
    }

    /// For each op that reads `src` (a send), whether those chunks are dead right after it:
    /// the next access overwrites them without reading, or nothing touches them again and
    /// they are scratch.
    pub(super) fn dead_after(&self, ops: &[ROp]) -> Vec<bool> {
        self.dead_after_where(ops, &vec![true; ops.len()])
    }

    /// [`Chunks::dead_after`] counting only the ops `keep` marks.
    pub(super) fn dead_after_where(&self, ops: &[ROp], keep: &[bool]) -> Vec<bool> {
        #[derive(Clone, Copy, PartialEq)]
        enum Next {
            Read,
            Write,
        }
        let mut next: Vec<Option<Next>> = vec![None; self.total as usize];
        let mut dead = vec![false; ops.len()];
        for (i, op) in ops.iter().enumerate().rev() {
            if !keep[i] {
                continue;
            }
            if let Some(s) = op.src {
                dead[i] = self.ids(s, op.count).all(|c| match next[c as usize] {
                    Some(Next::Write) => true,
                    Some(Next::Read) => false,
                    None => !self.live_at_end(c),
                });
            }
            if let Some(d) = op.writes() {
                for c in self.ids(d, op.count) {
                    next[c as usize] = Some(Next::Write);
                }
            }
            // A local reduce reads its destination as well as its source.
            for s in op.reads() {
                for c in self.ids(s, op.count) {
                    next[c as usize] = Some(Next::Read);
                }
            }
        }
        dead
    }
}
