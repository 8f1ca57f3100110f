//! Copy folding: local copies a rank can do without, removed before its ops are placed in
//! blocks (step 2b of the lowering).
//!
//! Algorithms copy for clarity: seed a scratch accumulator with the input, then reduce into
//! it; accumulate in scratch, then copy the result out. Each such copy costs a pass over the
//! data on the GPU. Four rewrites, on one rank's ops in program order, remove them:
//! 1. *Copy propagation.* An op that reads chunks holding an unchanged copy of a contiguous
//!    run of other chunks reads the originals instead.
//! 2. *Dead copies.* A copy none of whose destination chunks is read before being overwritten
//!    (or, for scratch, ever again) is dropped.
//! 3. *Destination forwarding.* A copy `B -> C` whose data the op before it wrote to `B` in
//!    one piece (a receive, a receive-reduce or a copy) is dropped, and that op writes `C`
//!    directly, when nothing in between touches `C` or reads `B` and `B` is dead after.
//!    Sends in between that read `C` (a rank sending what a position held before a receive
//!    refills it, as in Bruck's all-to-all) first move above that op, as send hoisting would
//!    move them, when nothing they pass writes their data or sends but each other
//!    (`fold/forward.rs`, one pass in program order with no rescans).
//! 4. *Receive-reduce fusion.* A receive into chunks `S` that a later local reduce `S -> Y`
//!    reads, and nothing else, becomes a receive-reduce `Y -> Y` where the receive was, when
//!    nothing in between touches `S` or `Y`: the message is added to `Y` as it arrives
//!    instead of landing in `S` and being read back (one pass over the data fewer, often a
//!    scratch buffer fewer, and on GPUs one op's fixed cost fewer). Sends in between that
//!    only read `Y` (a rank sending its own data after receiving a peer's) first move above
//!    the receive, as send hoisting would move them, when nothing they pass writes their
//!    data or sends.
//!
//! Copies that remain and follow each other over consecutive chunks are merged into one.
//!
//! Invariant: after folding, every chunk that is read, and every chunk of `input` and
//! `output` at the end, holds the value it held in program order before folding; the
//! order of messages on every connection is unchanged (only local copies and reduces are
//! removed, sends move only past ops that neither send nor write their data, and only
//! sources, destinations and the receive kind of other ops change). Ops of a switch group
//! take part in rewrite 1 only (their sources may read the originals; nothing else of them
//! changes): the members of a group must agree on what they read, so that an executor may
//! run them as one load-reduce, and where folding leaves them disagreeing
//! ([`ungroup_disagreeing`], over every rank's ops) the group is dissolved into the plain
//! transfers it already is. The plan replay run by every debug build checks the result.

use super::{Chunks, ROp};
use crate::plan::{OpKind, Slice};

mod forward;

/// Folds the copies of one rank's ops in place. `in_place` is the numbering of a plan made
/// out of place from an in-place program as an in-place call sees it (`input` and `output`
/// one buffer): propagation then also forgets a copy whose source changes there, so that
/// such a plan reads the same values in both placements.
/// `hoist`: rewrites 3 and 4 may move sends earlier, as send hoisting does (off where
/// hoisting is: a plan lowered again without it because it deadlocked).
pub(super) fn fold_copies(
    ops: &mut Vec<ROp>,
    chunks: &Chunks<'_>,
    in_place: Option<&Chunks<'_>>,
    hoist: bool,
) {
    let copies = ops.iter().any(|o| o.kind == OpKind::Copy);
    let reduces = ops.iter().any(|o| o.kind == OpKind::Reduce);
    if !copies && !reduces {
        return;
    }
    let mut keep = vec![true; ops.len()];
    if copies {
        propagate(ops, chunks, in_place);
        keep = live_copies(ops, chunks);
        // A forwarding drops a copy, which may leave the source of an earlier copy dead:
        // passes repeat until none applies.
        for _ in 0..8 {
            if !forward::forward_destinations(ops, chunks, in_place, hoist, &mut keep) {
                break;
            }
        }
    }
    if reduces {
        fuse_receive_reduces(ops, chunks, in_place, hoist, &mut keep);
    }
    let mut i = 0;
    ops.retain(|_| {
        i += 1;
        keep[i - 1]
    });
    merge_adjacent_copies(ops);
}

/// Clears the group id of every switch group whose members, after folding, read different
/// chunks (a rank-local rewrite 1 can change one member's source and not another's, as in a
/// program that overwrites a chunk on some ranks only); each member stays the send, receive
/// or receive-reduce it is. Members that agree (every member contributing the same logical
/// buffer and offset, as emission makes them) keep it. A head's ops that add to what they
/// already hold (source and destination one chunk: the running sum of a load-reduce
/// lowered peer by peer) contribute nothing of their own and are not compared.
pub(super) fn ungroup_disagreeing(ranks: &mut [Vec<ROp>]) {
    use rustc_hash::FxHashMap as HashMap;
    // Per group: the one source its members contribute, or `None` once two differ.
    let mut read: HashMap<u32, Option<Slice>> = HashMap::default();
    for op in ranks.iter().flatten() {
        if let (Some(g), Some(s)) = (op.group, op.reads_src())
            && op.dst != Some(s)
        {
            read.entry(g)
                .and_modify(|seen| {
                    if *seen != Some(s) {
                        *seen = None;
                    }
                })
                .or_insert(Some(s));
        }
    }
    if read.values().all(Option::is_some) {
        return;
    }
    for op in ranks.iter_mut().flatten() {
        if op.group.is_some_and(|g| read.get(&g) == Some(&None)) {
            op.group = None;
        }
    }
}

/// Consecutive copies of consecutive chunks become one (the copies a conversion to out of
/// place makes are per chunk, so that folding can drop each on its own).
fn merge_adjacent_copies(ops: &mut Vec<ROp>) {
    let mut out: Vec<ROp> = Vec::with_capacity(ops.len());
    for op in ops.drain(..) {
        if let Some(last) = out.last_mut()
            && last.kind == OpKind::Copy
            && op.kind == OpKind::Copy
            && last.group.is_none()
            && op.group.is_none()
            && last.channel == op.channel
            && last.protocol == op.protocol
            && let (Some(ls), Some(ld), Some(s), Some(d)) = (last.src, last.dst, op.src, op.dst)
            && s == Slice(ls.0, ls.1 + u64::from(last.count))
            && d == Slice(ld.0, ld.1 + u64::from(last.count))
            && ls.0 != ld.0
        {
            last.count += op.count;
            continue;
        }
        out.push(op);
    }
    *ops = out;
}

/// Rewrite 1. `origin[c]` is the chunk (logical buffer and offset, and its physical id)
/// that chunk `c` holds an unchanged copy of; a write to either end forgets it, in the plan's
/// numbering and in `in_place`'s (where a copy onto itself changes nothing).
fn propagate(ops: &mut [ROp], chunks: &Chunks<'_>, in_place: Option<&Chunks<'_>>) {
    let total = chunks.total as usize;
    let mut origin: Vec<Option<(u32, u64, u64)>> = vec![None; total];
    // Physical chunk -> chunks that may name it as origin (checked when cleared).
    let mut copies_of: Vec<Vec<u64>> = vec![Vec::new(); total];
    // The same in the in-place numbering: an origin's id there, and the reverse lists.
    let alias_total = in_place.map_or(0, |v| v.total as usize);
    let mut origin_alias: Vec<Option<u64>> = vec![None; total];
    let mut copies_of_alias: Vec<Vec<u64>> = vec![Vec::new(); alias_total];
    for op in ops.iter_mut() {
        if let Some(s) = op.reads_src()
            && let Some(from) = contiguous_origin(&origin, chunks, s, op.count)
        {
            op.src = Some(from);
        }
        let Some(d) = op.writes() else { continue };
        for c in chunks.ids(d, op.count) {
            origin[c as usize] = None;
            for x in std::mem::take(&mut copies_of[c as usize]) {
                if origin[x as usize].is_some_and(|(_, _, p)| p == c) {
                    origin[x as usize] = None;
                }
            }
        }
        if let Some(v) = in_place
            && !v.copies_onto_itself(op)
        {
            for a in v.ids(d, op.count) {
                for x in std::mem::take(&mut copies_of_alias[a as usize]) {
                    if origin_alias[x as usize] == Some(a) {
                        origin[x as usize] = None;
                        origin_alias[x as usize] = None;
                    }
                }
            }
        }
        if op.kind == OpKind::Copy
            && op.group.is_none()
            && let Some(s) = op.src
            && !chunks.overlap(s, op.count, Some(d), op.count)
        {
            for t in 0..u64::from(op.count) {
                let (c, p) = (chunks.id(d, t), chunks.id(s, t));
                origin[c as usize] = Some((s.0, s.1 + t, p));
                copies_of[p as usize].push(c);
                if let Some(v) = in_place {
                    let a = v.id(s, t);
                    origin_alias[c as usize] = Some(a);
                    copies_of_alias[a as usize].push(c);
                }
            }
        }
    }
}

/// The slice `s` (of `count` chunks) is an unchanged copy of, when it is one of a contiguous
/// run of one buffer.
fn contiguous_origin(
    origin: &[Option<(u32, u64, u64)>],
    chunks: &Chunks<'_>,
    s: Slice,
    count: u32,
) -> Option<Slice> {
    let (b, o, _) = origin[chunks.id(s, 0) as usize]?;
    for t in 1..u64::from(count) {
        let (bt, ot, _) = origin[chunks.id(s, t) as usize]?;
        if bt != b || ot != o + t {
            return None;
        }
    }
    Some(Slice(b, o))
}

/// Rewrite 2: which ops stay (`false` for a dead copy); what is live at the end is
/// [`Chunks::live_at_end`].
fn live_copies(ops: &[ROp], chunks: &Chunks<'_>) -> Vec<bool> {
    let mut live: Vec<bool> = (0..chunks.total).map(|c| chunks.live_at_end(c)).collect();
    let mut keep = vec![true; ops.len()];
    for (i, op) in ops.iter().enumerate().rev() {
        let dst = op.writes();
        if op.kind == OpKind::Copy
            && op.group.is_none()
            && let Some(d) = dst
            && chunks.ids(d, op.count).all(|c| !live[c as usize])
        {
            keep[i] = false;
            continue;
        }
        if let Some(d) = dst {
            for c in chunks.ids(d, op.count) {
                live[c as usize] = false;
            }
        }
        // Everything it reads (a local reduce's destination too) is live before it.
        for s in op.reads() {
            for c in chunks.ids(s, op.count) {
                live[c as usize] = true;
            }
        }
    }
    keep
}

/// How far back from a reduce rewrite 4 looks for the receive it reads (plans of thousands
/// of ops per rank would otherwise cost a quadratic scan).
const FUSE_REACH: usize = 256;

/// Rewrite 4 (see the module docs), in program order; `keep` marks the ops still there.
fn fuse_receive_reduces(
    ops: &mut [ROp],
    chunks: &Chunks<'_>,
    in_place: Option<&Chunks<'_>>,
    hoist: bool,
    keep: &mut [bool],
) {
    let dead = chunks.dead_after_where(ops, keep);
    for j in 0..ops.len() {
        let op = &ops[j];
        if !keep[j] || !dead[j] || op.kind != OpKind::Reduce || op.group.is_some() {
            continue;
        }
        let (Some(s), Some(y), k) = (op.src, op.dst, op.count) else {
            continue;
        };
        // Both numberings: a plan made out of place must read the same in place.
        let views = std::iter::once(chunks).chain(in_place);
        let apart = |v: &Chunks<'_>| !v.overlap(s, k, Some(y), k);
        if !views.clone().all(apart) {
            continue;
        }
        let touches = |o: &ROp| {
            views.clone().any(|v| {
                o.reads()
                    .chain(o.writes())
                    .any(|x| v.overlap(x, o.count, Some(s), k) || v.overlap(x, o.count, Some(y), k))
            })
        };
        // Sends that only read Y between the receive and the reduce (a rank's own send of its
        // data, written after its receive): they may run before the receive instead.
        let reads_only_y = |o: &ROp| {
            o.kind == OpKind::Send
                && o.group.is_none()
                && views
                    .clone()
                    .all(|v| o.reads().all(|x| !v.overlap(x, o.count, Some(s), k)))
        };
        // The nearest earlier op that touches S or Y, past such sends, must be a plain
        // receive of all of S.
        let mut movers = Vec::new();
        let mut found = None;
        for m in (j.saturating_sub(FUSE_REACH)..j).rev() {
            if !keep[m] || !touches(&ops[m]) {
                continue;
            }
            if reads_only_y(&ops[m]) {
                movers.push(m);
                continue;
            }
            found = Some(m);
            break;
        }
        let Some(i) = found else {
            continue;
        };
        let r = &ops[i];
        let whole = r.kind == OpKind::Recv
            && r.group.is_none()
            && r.count == k
            && r.dst.is_some_and(|d| chunks.ids(d, k).eq(chunks.ids(s, k)));
        if !whole
            || (!hoist && !movers.is_empty())
            || !movers
                .iter()
                .all(|&m| hoistable(ops, keep, views.clone(), &movers, i, m))
        {
            continue;
        }
        let r = &mut ops[i];
        r.kind = OpKind::RecvReduceCopy;
        r.src = Some(y);
        r.dst = Some(y);
        keep[j] = false;
        // The sends go just above the receive, in their order: the receive no longer leaves
        // Y as they read it.
        movers.reverse();
        for (n, &m) in movers.iter().enumerate() {
            ops[i + n..=m].rotate_right(1);
            keep[i + n..=m].rotate_right(1);
        }
    }
}

/// Whether send `m` may run just before op `i < m`, as send hoisting would move it: no op
/// in between writes what it reads, and none sends but the other `movers`, which move with it
/// in their order (messages keep their order on every connection).
fn hoistable<'a>(
    ops: &[ROp],
    keep: &[bool],
    views: impl Iterator<Item = &'a Chunks<'a>> + Clone,
    movers: &[usize],
    i: usize,
    m: usize,
) -> bool {
    let send = &ops[m];
    (i..m).filter(|&x| keep[x]).all(|x| {
        let o = &ops[x];
        (!o.kind.sends() || movers.contains(&x))
            && o.writes().is_none_or(|w| {
                views.clone().all(|v| {
                    send.reads()
                        .all(|r| !v.overlap(w, o.count, Some(r), send.count))
                })
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Via;

    /// A member of switch group `group`: a send of `src` to rank `to`.
    fn member(src: Slice, to: u32, group: Option<u32>) -> ROp {
        ROp {
            kind: OpKind::Send,
            src: Some(src),
            dst: None,
            count: 1,
            send: Some((to, Via::Switch)),
            recv: None,
            channel: 0,
            source: 0,
            group,
            protocol: None,
        }
    }

    fn groups(ranks: &[Vec<ROp>]) -> Vec<Vec<Option<u32>>> {
        ranks
            .iter()
            .map(|ops| ops.iter().map(|o| o.group).collect())
            .collect()
    }

    #[test]
    fn a_group_whose_members_read_different_chunks_is_dissolved_and_no_other() {
        let mut ranks = vec![
            // Group 0: both members read input chunk 1. Group 1: one reads the input, the
            // other the output (folding rewrote one rank's source only).
            vec![
                member(Slice(0, 1), 1, Some(0)),
                member(Slice(0, 0), 1, Some(1)),
            ],
            vec![
                member(Slice(0, 1), 0, Some(0)),
                member(Slice(1, 0), 0, Some(1)),
            ],
        ];
        ungroup_disagreeing(&mut ranks);
        assert_eq!(groups(&ranks), [vec![Some(0), None], vec![Some(0), None]]);
        // What the ops move is untouched.
        assert_eq!(ranks[1][1].src, Some(Slice(1, 0)));
    }
}
