//! Rewrite 3 of copy folding, destination forwarding (see the parent module's docs), in one
//! pass over a rank's ops in program order, with sends moved above a receive where they stand
//! in the way.
//!
//! The pass keeps, per chunk, the op that last wrote it, the last read, the last access other
//! than a plain send's read, and the plain sends that read it since then; per op, a position
//! key. An op at index `j` starts at key `2j + 2`; a send moved just above op `i` takes key
//! `2i + 1`, so sorting by key (ties in index order) gives the new program order, applied
//! once at the end of the pass. The sending ops, ordered by key, give the sends between two
//! keys in `O(log ops)` each, so no forwarding rescans the ops it passes. Each forwarding
//! updates what it changes: its writer now writes `C`, whose chunks record it, and the moved
//! sends' reads now come before it. What it cannot know, the writer `B` held before, it
//! leaves over-approximated (an access recorded later than it was, a writer more recent),
//! which only refuses forwardings and moves. Invariant: every recorded key is at or after
//! the access it stands for, and ops sorted by key are in a valid program order: messages
//! keep their order on every connection, and every read sees the write it saw before.

use super::super::{Chunks, ROp};
use crate::plan::{OpKind, Slice};
use std::collections::BTreeSet;

/// How many sends one forwarding moves at most: a bound on the work of one that fails
/// (a step of Bruck's all-to-all at n = 1024 has at most n / 4 = 256 sends, all to one peer).
const HOIST_REACH: usize = 256;

/// What the pass knows of one rank's ops up to the op it is at (keys: 0 for none).
struct State {
    /// Per chunk: the op (index) that wrote it last.
    last_writer: Vec<Option<usize>>,
    /// Per chunk: the key of its last read.
    last_read: Vec<usize>,
    /// Per chunk: the key of its last access but a plain send's read.
    last_other: Vec<usize>,
    /// Per chunk: the plain sends (indices) that read it since `last_other`.
    sends_since: Vec<Vec<usize>>,
    /// Per chunk of the in-place numbering (when there is one): its last writer.
    alias_writer: Vec<Option<usize>>,
    /// Per op: its position key.
    key: Vec<usize>,
    /// Per plain send: the latest op before it that wrote what it reads, in either
    /// numbering.
    wrote_before: Vec<Option<usize>>,
    /// The ops that send, by key (then index).
    sends: BTreeSet<(usize, usize)>,
}

/// Whether `op` is a send that may move (not a member of a switch group).
fn plain_send(op: &ROp) -> bool {
    op.kind == OpKind::Send && op.group.is_none()
}

/// Rewrite 3, one pass; whether anything changed. `in_place`: the in-place numbering of a
/// plan made out of place (a moved send must not pass a write of its data there either);
/// `hoist`: sends may move.
pub(super) fn forward_destinations(
    ops: &mut [ROp],
    chunks: &Chunks<'_>,
    in_place: Option<&Chunks<'_>>,
    hoist: bool,
    keep: &mut [bool],
) -> bool {
    let total = chunks.total as usize;
    let n = ops.len();
    let dead = chunks.dead_after_where(ops, keep);
    let mut st = State {
        last_writer: vec![None; total],
        last_read: vec![0; total],
        last_other: vec![0; total],
        sends_since: vec![Vec::new(); total],
        alias_writer: vec![None; in_place.map_or(0, |v| v.total as usize)],
        key: (0..n).map(|j| 2 * j + 2).collect(),
        wrote_before: vec![None; n],
        sends: (0..n)
            .filter(|&j| keep[j] && ops[j].kind.sends())
            .map(|j| (2 * j + 2, j))
            .collect(),
    };
    let mut changed = false;
    let mut moved = false;
    for j in 0..n {
        if !keep[j] {
            continue;
        }
        let op = &ops[j];
        if op.kind == OpKind::Copy
            && op.group.is_none()
            && dead[j]
            && let (Some(b), Some(c)) = (op.src, op.dst)
            && let Some((i, movers)) = st.forwardable(ops, chunks, j, b, c, hoist)
        {
            let count = op.count;
            for &m in &movers {
                st.sends.remove(&(st.key[m], m));
                st.key[m] = 2 * i + 1;
                st.sends.insert((st.key[m], m));
            }
            moved |= !movers.is_empty();
            // `i` now writes C, after every other access to it (the movers read it before).
            let at = st.key[i];
            for x in chunks.ids(c, count) {
                let x = x as usize;
                st.last_writer[x] = Some(i);
                st.last_read[x] = st.last_read[x].min(at);
                st.last_other[x] = st.last_other[x].max(at);
                st.sends_since[x].clear();
            }
            if let Some(v) = in_place {
                for a in v.ids(c, count) {
                    let w = &mut st.alias_writer[a as usize];
                    *w = (*w).max(Some(i));
                }
            }
            ops[i].dst = Some(c);
            keep[j] = false;
            changed = true;
            continue;
        }
        st.record(ops, chunks, in_place, j);
    }
    if moved {
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&j| st.key[j]);
        permute(ops, &order);
        permute(keep, &order);
    }
    changed
}

impl State {
    /// Notes op `j`'s accesses, at its key.
    fn record(
        &mut self,
        ops: &[ROp],
        chunks: &Chunks<'_>,
        in_place: Option<&Chunks<'_>>,
        j: usize,
    ) {
        let op = &ops[j];
        let k = self.key[j];
        let send = plain_send(op);
        if send {
            let mut w = None;
            for s in op.reads() {
                for x in chunks.ids(s, op.count) {
                    w = w.max(self.last_writer[x as usize]);
                }
                for a in in_place.into_iter().flat_map(|v| v.ids(s, op.count)) {
                    w = w.max(self.alias_writer[a as usize]);
                }
            }
            self.wrote_before[j] = w;
        }
        for s in op.reads() {
            for x in chunks.ids(s, op.count) {
                let x = x as usize;
                self.last_read[x] = k;
                if send {
                    self.sends_since[x].push(j);
                } else {
                    self.last_other[x] = k;
                    self.sends_since[x].clear();
                }
            }
        }
        if let Some(d) = op.writes() {
            for x in chunks.ids(d, op.count) {
                let x = x as usize;
                self.last_writer[x] = Some(j);
                self.last_other[x] = k;
                self.sends_since[x].clear();
            }
            for a in in_place.into_iter().flat_map(|v| v.ids(d, op.count)) {
                self.alias_writer[a as usize] = Some(j);
            }
        }
    }

    /// For the copy `j` of `b` to `c`: the op that wrote all of `b` in one piece and may
    /// write `c` instead, and the sends (in program order) that must first move above it
    /// (see the module docs).
    fn forwardable(
        &self,
        ops: &[ROp],
        chunks: &Chunks<'_>,
        j: usize,
        b: Slice,
        c: Slice,
        hoist: bool,
    ) -> Option<(usize, Vec<usize>)> {
        let count = ops[j].count;
        if chunks.overlap(b, count, Some(c), count) {
            return None;
        }
        let i = self.last_writer[chunks.id(b, 0) as usize]?;
        let w = &ops[i];
        let kinds = [OpKind::Recv, OpKind::RecvReduceCopy, OpKind::Copy];
        let whole = w.count == count
            && w.group.is_none()
            && kinds.contains(&w.kind)
            && w.dst
                .is_some_and(|d| chunks.ids(d, count).eq(chunks.ids(b, count)));
        if !whole {
            return None;
        }
        let at = self.key[i];
        let b_ok = chunks
            .ids(b, count)
            .all(|x| self.last_writer[x as usize] == Some(i) && self.last_read[x as usize] <= at);
        // Only plain sends may read C after the writer; they become the movers.
        if !b_ok
            || chunks
                .ids(c, count)
                .any(|x| self.last_other[x as usize] >= at)
        {
            return None;
        }
        let readers = chunks
            .ids(c, count)
            .flat_map(|x| self.sends_since[x as usize].iter().copied())
            .filter(|&m| self.key[m] > at);
        let Some(last) = readers.map(|m| self.key[m]).max() else {
            return Some((i, Vec::new()));
        };
        if !hoist {
            return None;
        }
        // Every send up to the last reader moves, in its order, so no send passes another;
        // none may pass a write of its data.
        let movers: Vec<usize> = self
            .sends
            .range((at + 1, 0)..=(last, usize::MAX))
            .take(HOIST_REACH + 1)
            .map(|&(_, m)| m)
            .collect();
        let ok = movers.len() <= HOIST_REACH
            && movers
                .iter()
                .all(|&m| plain_send(&ops[m]) && self.wrote_before[m].is_none_or(|w| w < i));
        ok.then_some((i, movers))
    }
}

/// Reorders `v` so that `v[k]` becomes the old `v[order[k]]` (`order` a permutation), by
/// following its cycles.
fn permute<T>(v: &mut [T], order: &[usize]) {
    let mut done = vec![false; v.len()];
    for start in 0..v.len() {
        if done[start] {
            continue;
        }
        let mut k = start;
        loop {
            done[k] = true;
            let from = order[k];
            if from == start {
                break;
            }
            v.swap(k, from);
            k = from;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::permute;

    #[test]
    fn permute_follows_cycles() {
        let mut v = vec!['a', 'b', 'c', 'd', 'e'];
        permute(&mut v, &[2, 0, 1, 4, 3]);
        assert_eq!(v, vec!['c', 'a', 'b', 'e', 'd']);
    }
}
