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
    /// Per logical buffer, the id of its chunk 0 on this rank: aliasing maps a buffer's
    /// chunks to consecutive physical chunks, so a slice's ids are one range from there
    /// (ids are computed for every chunk of every op of every rank: this keeps them an add).
    first: Vec<u64>,
    /// Ids are `0..total`.
    pub(super) total: u64,
}

impl<'a> Chunks<'a> {
    pub(super) fn new(l: &'a Lowering<'a>, rank: u32, inplace: bool) -> Self {
        let mut base = Vec::with_capacity(l.e.buffers.len());
        let mut acc = 0;
        for b in &l.e.buffers {
            base.push(acc);
            acc += b.chunks * l.pieces;
        }
        let k = l.e.chunk_factor * l.pieces;
        let first = (0..l.e.buffers.len())
            .map(|b| {
                let (p, i) = alias(l.e.kind, inplace, k, b, u64::from(rank), 0);
                base.get(p).copied().unwrap_or(0) + i
            })
            .collect();
        Chunks {
            l,
            rank: u64::from(rank),
            base,
            first,
            total: acc,
        }
    }

    pub(super) fn id(&self, s: Slice, o: u64) -> u64 {
        self.first.get(s.0 as usize).copied().unwrap_or(0) + s.1 + o
    }

    /// The ids of `count` chunks from `s`: consecutive.
    pub(super) fn ids(&self, s: Slice, count: u32) -> std::ops::Range<u64> {
        let at = self.id(s, 0);
        at..at + u64::from(count)
    }

    /// Sets `table[c] = v` for each of the `count` chunks `c` from `s`: one chunk (most ops)
    /// without the range loop. Every id is below the table's length (a table per chunk).
    pub(super) fn set_each<T: Copy>(&self, table: &mut [T], s: Slice, count: u32, v: T) {
        let r = self.ids(s, count);
        match &mut table[r.start as usize..r.end as usize] {
            [one] => *one = v,
            many => many.fill(v),
        }
    }

    pub(super) fn overlap(&self, a: Slice, an: u32, b: Option<Slice>, bn: u32) -> bool {
        let Some(b) = b else { return false };
        self.touches(a, an, &self.ids(b, bn))
    }

    /// [`Chunks::overlap`] with ids `b` of the other slice, computed once by a caller that
    /// compares many slices with it.
    pub(super) fn touches(&self, a: Slice, an: u32, b: &std::ops::Range<u64>) -> bool {
        let a = self.ids(a, an);
        a.start < b.end && b.start < a.end && !a.is_empty() && !b.is_empty()
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
        self.live_at_end_test()(c)
    }

    /// [`Chunks::live_at_end`] with its bounds looked up once, for loops over many chunks.
    fn live_at_end_test(&self) -> impl Fn(u64) -> bool + use<> {
        let scratch = self.scratch_from();
        let output = self.base.get(1).copied().unwrap_or(0)..scratch;
        let partial =
            self.l.e.kind == CollectiveKind::Reduce && self.rank != u64::from(self.l.e.root);
        move |c| c < scratch && !(partial && output.contains(&c))
    }

    /// For each op that reads `src` (a send), whether those chunks are dead right after it:
    /// the next access overwrites them without reading, or nothing touches them again and
    /// they are scratch.
    pub(super) fn dead_after(&self, ops: &[ROp]) -> Vec<bool> {
        self.dead_after_of(ops, None)
    }

    /// [`Chunks::dead_after`] counting only the ops `keep` marks.
    pub(super) fn dead_after_where(&self, ops: &[ROp], keep: &[bool]) -> Vec<bool> {
        self.dead_after_of(ops, Some(keep))
    }

    /// [`Chunks::dead_after`] counting only the ops `keep` marks, every op without it.
    fn dead_after_of(&self, ops: &[ROp], keep: Option<&[bool]>) -> Vec<bool> {
        #[derive(Clone, Copy, PartialEq)]
        enum Next {
            Read,
            Write,
        }
        // Slices of `next` rather than per-chunk lookups, each slice's ids computed once:
        // this runs over every op of every rank.
        let mut next: Vec<Option<Next>> = vec![None; self.total as usize];
        let mut dead = vec![false; ops.len()];
        let range = |s: Slice, count: u32| {
            let r = self.ids(s, count);
            r.start as usize..r.end as usize
        };
        // Most ops move one chunk: set it without a call to `memset`.
        let set = |next: &mut [Option<Next>], r: std::ops::Range<usize>, to: Next| match next
            .get_mut(r)
        {
            Some([one]) => *one = Some(to),
            Some(many) => many.fill(Some(to)),
            None => {}
        };
        let live_at_end = self.live_at_end_test();
        let is_dead = |n: &Option<Next>, c: u64| match n {
            Some(Next::Write) => true,
            Some(Next::Read) => false,
            None => !live_at_end(c),
        };
        for (i, op) in ops.iter().enumerate().rev() {
            if keep.is_some_and(|k| !k[i]) {
                continue;
            }
            let src = op.src.map(|s| range(s, op.count));
            if let Some(r) = &src
                && let Some(cells) = next.get(r.clone())
            {
                dead[i] = match cells {
                    [one] => is_dead(one, r.start as u64),
                    _ => cells
                        .iter()
                        .zip(r.start as u64..)
                        .all(|(n, c)| is_dead(n, c)),
                };
            }
            if let Some(d) = op.dst {
                let r = range(d, op.count);
                // What `ROp::writes` and `ROp::reads` give, without their iterator chains:
                // a local reduce reads its destination as well as its source.
                if op.kind.needs_dst() {
                    set(&mut next, r.clone(), Next::Write);
                }
                if op.kind == OpKind::Reduce {
                    set(&mut next, r, Next::Read);
                }
            }
            if let Some(r) = src.filter(|_| op.kind.needs_src()) {
                set(&mut next, r, Next::Read);
            }
        }
        dead
    }
}

#[cfg(test)]
mod tests {
    use super::super::Lowering;
    use super::Chunks;
    use crate::elaborate::{Facts, Options, elaborate};
    use crate::layout::alias;
    use crate::plan::Slice;
    use crate::topology::Topology;
    use coll_lang::builtins::CollectiveKind;

    /// A slice's ids are the physical chunks `layout::alias` gives each of its chunks (so
    /// consecutive), for every collective in both placements and for scratch, and two
    /// slices overlap exactly when they share an id.
    #[test]
    fn ids_are_the_aliased_chunks_and_overlaps_share_one() {
        let n = 4u32;
        let topo = Topology::preset(&format!("nvswitch:{n}")).expect("a preset");
        let facts = Facts::from_topology(&topo);
        let collectives = CollectiveKind::ALL
            .into_iter()
            .filter(|k| !matches!(k, CollectiveKind::SendRecv | CollectiveKind::Custom));
        for kind in collectives.map(CollectiveKind::name) {
            for placement in ["inplace", "outofplace"] {
                let src = format!(
                    "collective {kind} t(n) {{ chunks 2; {placement}; scratch tmp[3]; }}\n"
                );
                let m = coll_lang::load_bytes("t.coll", src.into_bytes()).expect("valid");
                let e = elaborate(&m, &facts, &Options::default()).expect("elaborates");
                let l = Lowering::new(&e, &topo, &m.file).expect("sets up");
                let k = e.chunk_factor * l.pieces;
                for rank in 0..n {
                    let chunks = Chunks::new(&l, rank, e.inplace);
                    let base: Vec<u64> = e
                        .buffers
                        .iter()
                        .scan(0, |acc, b| {
                            let at = *acc;
                            *acc += b.chunks * l.pieces;
                            Some(at)
                        })
                        .collect();
                    let mut slices = Vec::new();
                    for (b, buffer) in e.buffers.iter().enumerate() {
                        for i in 0..buffer.chunks * l.pieces {
                            let (p, at) = alias(e.kind, e.inplace, k, b, u64::from(rank), i);
                            let s = Slice(b as u32, i);
                            assert_eq!(chunks.id(s, 0), base[p] + at, "{kind} {placement}");
                            slices.push(s);
                        }
                    }
                    for &a in &slices {
                        for &b in &slices {
                            let share = chunks.ids(a, 2).any(|x| chunks.ids(b, 1).any(|y| x == y));
                            assert_eq!(chunks.overlap(a, 2, Some(b), 1), share);
                        }
                    }
                }
            }
        }
    }
}
