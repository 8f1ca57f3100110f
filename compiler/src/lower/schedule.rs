//! Order from data dependences (the scheduler's step 1): the folded ops of every rank become
//! *units* — one transfer (a send and its receive; with `split`, each alone), every op of
//! one switch group, or one local op — ordered by a list schedule over their DAG instead of
//! the program's order.
//!
//! The DAG: `u -> v` when an op of `u` and a later op of `v` on the same rank conflict on a
//! chunk (read after write, write after read, write after write), in every chunk numbering
//! the lowering orders by (the plan's, and the in-place one of a plan made out of place
//! from an in-place program, whose copies onto themselves there are skipped, as step 5
//! skips them); and split, when `u` is a send and `v` the receive of its message, or `v`
//! follows `u` on one connection side (rank, peer, channel, direction). Split orders exist
//! because folding may leave both ranks of an exchange sending before they receive, which
//! no order of whole transfers can express (their DAG has a cycle); whole transfers keep a
//! receive next to its send, which chains of forwarding ranks need. Messages are matched as
//! the k-th send and the k-th receive of one connection, which emission and folding keep in
//! the same order at both ends.
//!
//! Priority is the critical path to a sink, counting the units that use a connection (a
//! round each in the deadlock simulation) and not local ops, ties going to the longer tail
//! of units. The list schedule gives each round every ready unit, highest priority first,
//! at most one per connection side per round; a local op runs in the round its inputs are
//! ready, a unit after one that uses a connection in the round after it. Each rank then
//! takes its ops by round: local ops, then the transfers it only sends in, then those it
//! receives in (units of one round have no hazards among them), so a block that sends and
//! receives does not hold a ready send behind a receive of the same round.
//!
//! Invariants: each rank's result is a topological order of the DAG, so on every rank the
//! order of conflicting accesses is the one folding left, and every connection side keeps
//! its order (no two units of a round share a side), so both ends of a connection agree on
//! its messages. A cycle gives no order: the caller keeps the program's.

use super::{Chunks, Lowering, ROp};
use rustc_hash::FxHashMap as HashMap;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A dependence order of units.
#[derive(Debug)]
pub(super) struct Order {
    /// Per rank, per op, its unit.
    unit: Vec<Vec<u32>>,
    /// Position of each unit in the new global order.
    pos: Vec<u32>,
    /// The round of the list schedule each unit runs in (a local op: the round whose
    /// transfers it precedes).
    round: Vec<u32>,
    /// Rounds the list schedule took (transfers only: local ops take none).
    pub rounds: u32,
}

/// The unit of every op of every rank (see the module docs), how many there are, and the
/// edges that order them besides hazards: with `split`, each send before its receive and
/// the ops of one connection side in their order (without, a send and its receive share a
/// unit).
#[allow(clippy::type_complexity)]
fn units(ranks: &[Vec<ROp>], split: bool) -> (Vec<Vec<u32>>, u32, Vec<(u32, u32)>) {
    const UNSET: u32 = u32::MAX;
    let mut next = 0u32;
    let mut new_unit = || {
        next += 1;
        next - 1
    };
    let mut of_group: HashMap<u32, u32> = HashMap::default();
    let mut edges: Vec<(u32, u32)> = Vec::new();
    // Per connection (from, to, channel): the units of its plain sends, in order.
    let mut sends: HashMap<(u32, u32, u32), Vec<u32>> = HashMap::default();
    let plain_recv = |op: &ROp| op.group.is_none() && op.recv.is_some();
    let mut unit: Vec<Vec<u32>> = Vec::with_capacity(ranks.len());
    for (r, ops) in ranks.iter().enumerate() {
        let mut mine = Vec::with_capacity(ops.len());
        for op in ops {
            let u = match op.group {
                Some(g) => *of_group.entry(g).or_insert_with(&mut new_unit),
                None if plain_recv(op) => UNSET,
                None => new_unit(),
            };
            if let (None, Some((q, _))) = (op.group, op.send) {
                sends.entry((r as u32, q, op.channel)).or_default().push(u);
            }
            mine.push(u);
        }
        unit.push(mine);
    }
    // The k-th plain receive of a connection gets the k-th plain send's message.
    let mut taken: HashMap<(u32, u32, u32), usize> = HashMap::default();
    for (r, ops) in ranks.iter().enumerate() {
        for (i, op) in ops.iter().enumerate() {
            let Some((p, _)) = op.recv.filter(|_| plain_recv(op)) else {
                continue;
            };
            let key = (p, r as u32, op.channel);
            let k = taken.entry(key).or_default();
            let send = sends.get(&key).and_then(|list| list.get(*k)).copied();
            *k += 1;
            unit[r][i] = match send {
                Some(s) if !split => s,
                Some(s) => {
                    let u = new_unit();
                    edges.push((s, u));
                    u
                }
                // Not in a plan emission made; a unit alone keeps it well defined.
                None => new_unit(),
            };
        }
    }
    // Split, each connection side in its order (whole transfers keep both ends at one
    // position, so any order of them agrees at both ends).
    let mut last: HashMap<(u32, u32, u32, bool), u32> = HashMap::default();
    for (r, ops) in ranks.iter().enumerate().filter(|_| split) {
        for (op, &u) in ops.iter().zip(&unit[r]) {
            let sides = [
                op.send.map(|(q, _)| (r as u32, q, op.channel, true)),
                op.recv.map(|(p, _)| (r as u32, p, op.channel, false)),
            ];
            for side in sides.into_iter().flatten() {
                if let Some(prev) = last.insert(side, u).filter(|&p| p != u) {
                    edges.push((prev, u));
                }
            }
        }
    }
    (unit, next, edges)
}

/// The hazard DAG over units: successor lists (an edge may repeat).
struct Dag {
    succ: Vec<Vec<u32>>,
    indeg: Vec<u32>,
}

/// Adds the hazard edges of one rank's ops, in their order, under one chunk numbering.
fn rank_edges(
    ops: &[ROp],
    unit: &[u32],
    chunks: &Chunks<'_>,
    skip_self_copies: bool,
    edges: &mut Vec<(u32, u32)>,
) {
    let total = chunks.total as usize;
    let mut writer: Vec<u32> = vec![u32::MAX; total];
    let mut readers: Vec<Vec<u32>> = vec![Vec::new(); total];
    for (op, &u) in ops.iter().zip(unit) {
        if skip_self_copies && chunks.copies_onto_itself(op) {
            continue;
        }
        for s in op.reads() {
            for c in chunks.ids(s, op.count) {
                let c = c as usize;
                if writer[c] != u32::MAX && writer[c] != u {
                    edges.push((writer[c], u));
                }
                if readers[c].last() != Some(&u) {
                    readers[c].push(u);
                }
            }
        }
        if let Some(d) = op.writes() {
            for c in chunks.ids(d, op.count) {
                let c = c as usize;
                if writer[c] != u32::MAX && writer[c] != u {
                    edges.push((writer[c], u));
                }
                for &r in &readers[c] {
                    if r != u {
                        edges.push((r, u));
                    }
                }
                readers[c].clear();
                writer[c] = u;
            }
        }
    }
}

impl Dag {
    fn new(
        l: &Lowering<'_>,
        ranks: &[Vec<ROp>],
        unit: &[Vec<u32>],
        units: u32,
        extra: Vec<(u32, u32)>,
    ) -> Dag {
        debug_assert_eq!(ranks.len(), unit.len());
        let total: usize = ranks.iter().map(Vec::len).sum();
        let per_rank = crate::par::map_ref(crate::par::worth(total), ranks, |r, ops| {
            let unit = &unit[r];
            let mut edges = Vec::new();
            let plan_view = Chunks::new(l, r as u32, l.e.inplace);
            rank_edges(ops, unit, &plan_view, false, &mut edges);
            if l.e.from_in_place {
                let in_place = Chunks::new(l, r as u32, true);
                rank_edges(ops, unit, &in_place, true, &mut edges);
            }
            edges.sort_unstable();
            edges.dedup();
            edges
        });
        let mut succ: Vec<Vec<u32>> = vec![Vec::new(); units as usize];
        let mut indeg = vec![0u32; units as usize];
        for (a, b) in per_rank.into_iter().flatten().chain(extra) {
            succ[a as usize].push(b);
            indeg[b as usize] += 1;
        }
        Dag { succ, indeg }
    }

    /// A topological order of the units, or `None` on a cycle.
    fn topological(&self) -> Option<Vec<u32>> {
        let mut indeg = self.indeg.clone();
        let mut stack: Vec<u32> = (0..indeg.len() as u32)
            .filter(|&u| indeg[u as usize] == 0)
            .rev()
            .collect();
        let mut out = Vec::with_capacity(indeg.len());
        while let Some(u) = stack.pop() {
            out.push(u);
            for &v in &self.succ[u as usize] {
                indeg[v as usize] -= 1;
                if indeg[v as usize] == 0 {
                    stack.push(v);
                }
            }
        }
        (out.len() == indeg.len()).then_some(out)
    }
}

/// What a unit is made of: whether it moves data between ranks, and the connection sides
/// its ops use.
#[derive(Clone, Default)]
struct UnitInfo {
    transfer: bool,
    /// (rank, peer, channel, sends)
    sides: Vec<u32>,
}

/// The dependence order of the units of `ranks` (folded ops of every rank), or `None` when
/// the hazards form a cycle.
pub(super) fn dependence_order(l: &Lowering<'_>, ranks: &[Vec<ROp>], split: bool) -> Option<Order> {
    let (unit, units, extra) = units(ranks, split);
    let n = units as usize;
    let mut info: Vec<UnitInfo> = vec![UnitInfo::default(); n];
    // Connection sides (rank, peer, channel, sends) by dense id.
    let mut side_id: HashMap<(u32, u32, u32, bool), u32> = HashMap::default();
    for (r, ops) in ranks.iter().enumerate() {
        for (op, &u) in ops.iter().zip(&unit[r]) {
            let i = &mut info[u as usize];
            let sides = [
                op.send.map(|(q, _)| (r as u32, q, op.channel, true)),
                op.recv.map(|(p, _)| (r as u32, p, op.channel, false)),
            ];
            for side in sides.into_iter().flatten() {
                let next = side_id.len() as u32;
                i.transfer = true;
                i.sides.push(*side_id.entry(side).or_insert(next));
            }
        }
    }
    let dag = Dag::new(l, ranks, &unit, units, extra);
    let topo = dag.topological()?;
    // Priority: (critical path in rounds, tail length in units), from the sinks back.
    let mut prio = vec![0u64; n];
    for &u in topo.iter().rev() {
        let (mut cp, mut tail) = (0u64, 0u64);
        for &v in &dag.succ[u as usize] {
            cp = cp.max(prio[v as usize] >> 32);
            tail = tail.max(prio[v as usize] & 0xffff_ffff);
        }
        let w = u64::from(info[u as usize].transfer);
        prio[u as usize] = ((cp + w) << 32) | (tail + 1).min(0xffff_ffff);
    }

    let mut indeg = dag.indeg.clone();
    let mut pos = vec![u32::MAX; n];
    let mut round = vec![0u32; n];
    let mut next_pos = 0u32;
    let mut locals: Vec<u32> = Vec::new();
    let mut heap: BinaryHeap<(u64, Reverse<u32>)> = BinaryHeap::new();
    let mut later: Vec<u32> = Vec::new();
    for u in 0..units {
        if indeg[u as usize] == 0 {
            if info[u as usize].transfer {
                heap.push((prio[u as usize], Reverse(u)));
            } else {
                locals.push(u);
            }
        }
    }
    locals.reverse();
    // The round each side was last used in (`u32::MAX`: never).
    let mut used: Vec<u32> = vec![u32::MAX; side_id.len()];
    let mut t = 0u32;
    let mut done = 0usize;
    let mut last_round = 0u32;
    loop {
        // Local ops take no round: run every one ready now, and what they make ready.
        while let Some(u) = locals.pop() {
            pos[u as usize] = next_pos;
            round[u as usize] = t;
            next_pos += 1;
            done += 1;
            for &v in &dag.succ[u as usize] {
                let v = v as usize;
                indeg[v] -= 1;
                if indeg[v] == 0 {
                    if info[v].transfer {
                        heap.push((prio[v], Reverse(v as u32)));
                    } else {
                        locals.push(v as u32);
                    }
                }
            }
        }
        if heap.is_empty() && later.is_empty() {
            break;
        }
        // This round's transfers, highest priority first, one per connection side.
        let mut deferred: Vec<(u64, Reverse<u32>)> = Vec::new();
        let mut finished: Vec<u32> = Vec::new();
        while let Some((p, Reverse(u))) = heap.pop() {
            let sides = &info[u as usize].sides;
            if sides.iter().any(|&s| used[s as usize] == t) {
                deferred.push((p, Reverse(u)));
                continue;
            }
            for &s in sides {
                used[s as usize] = t;
            }
            pos[u as usize] = next_pos;
            round[u as usize] = t;
            next_pos += 1;
            done += 1;
            last_round = t + 1;
            finished.push(u);
        }
        heap.extend(deferred);
        for u in finished {
            for &v in &dag.succ[u as usize] {
                let v = v as usize;
                indeg[v] -= 1;
                if indeg[v] == 0 {
                    later.push(v as u32);
                }
            }
        }
        t += 1;
        for v in std::mem::take(&mut later) {
            if info[v as usize].transfer {
                heap.push((prio[v as usize], Reverse(v)));
            } else {
                locals.push(v);
            }
        }
        locals.sort_unstable_by(|a, b| b.cmp(a));
    }
    if done != n {
        return None;
    }
    Some(Order {
        unit,
        pos,
        round,
        rounds: last_round,
    })
}

/// Per op of one rank, its place in the order: (round, class, position), where class is
/// 0 for a local op, 1 for a transfer the rank only sends in, 2 for one it receives in.
/// Transfers of one round have no hazards among them and use distinct connection sides,
/// so a rank may run them in any order; sends first keeps a block that both sends and
/// receives from waiting on a receive while it could already send (a ring's pass of one
/// chunk behind the arrival of another).
fn rank_keys(order: &Order, ops: &[ROp], unit: &[u32]) -> Vec<(u32, u8, u32)> {
    let mut receives: HashMap<u32, bool> = HashMap::default();
    for (op, &u) in ops.iter().zip(unit) {
        *receives.entry(u).or_default() |= op.recv.is_some();
    }
    ops.iter()
        .zip(unit)
        .map(|(op, &u)| {
            let class = if receives.get(&u).copied().unwrap_or(false) {
                2
            } else {
                u8::from(op.send.is_some() || op.group.is_some())
            };
            (order.round[u as usize], class, order.pos[u as usize])
        })
        .collect()
}

/// Whether the order leaves every rank's ops where they are.
pub(super) fn is_identity(order: &Order, ranks: &[Vec<ROp>]) -> bool {
    ranks
        .iter()
        .zip(&order.unit)
        .all(|(ops, unit)| rank_keys(order, ops, unit).windows(2).all(|w| w[0] <= w[1]))
}

/// Puts each rank's ops in the order's global order (ops of one unit keep their order),
/// sends before receives within a round ([`rank_keys`]).
pub(super) fn apply(order: &Order, ranks: &mut [Vec<ROp>]) {
    for (ops, unit) in ranks.iter_mut().zip(&order.unit) {
        let keys = rank_keys(order, ops, unit);
        let mut keyed: Vec<((u32, u8, u32), ROp)> = keys.into_iter().zip(ops.drain(..)).collect();
        keyed.sort_by_key(|&(k, _)| k);
        ops.extend(keyed.into_iter().map(|(_, op)| op));
    }
}

/// The most transfers on one chain of hazards, from the [`levels`] of `ranks`' ops, or
/// `None` without transfers. No schedule takes fewer rounds than one more than that in the
/// deadlock simulation: a message arrives a round after it is sent at the earliest, and
/// an op it feeds runs no earlier than that round (a fused forward), any other op of its
/// rank later still; local ops, which take a round there too, are not counted.
pub(super) fn longest_chain(ranks: &[Vec<ROp>], levels: &[Vec<u32>]) -> Option<u32> {
    ranks
        .iter()
        .zip(levels)
        .flat_map(|(ops, level)| {
            ops.iter()
                .zip(level)
                .filter(|(op, _)| op.recv.is_some())
                .map(|(_, &l)| l + 1)
        })
        .max()
}

/// The earliest round each op's unit can run in when connections are never busy: per rank,
/// per op, the length in transfers of the longest chain of hazards before it (the DAG of
/// whole transfers, or of sends and receives apart when that one has a cycle: a send then
/// counts no round of its own, its receive one). `None` when both have a cycle.
pub(super) fn levels(l: &Lowering<'_>, ranks: &[Vec<ROp>]) -> Option<Vec<Vec<u32>>> {
    for split in [false, true] {
        let (unit, units, extra) = units(ranks, split);
        let dag = Dag::new(l, ranks, &unit, units, extra);
        let Some(topo) = dag.topological() else {
            continue;
        };
        // A unit takes a round when it receives (a split send runs in its receive's round).
        let mut receives = vec![false; units as usize];
        for (ops, unit) in ranks.iter().zip(&unit) {
            for (op, &u) in ops.iter().zip(unit) {
                receives[u as usize] |= op.recv.is_some();
            }
        }
        let mut level = vec![0u32; units as usize];
        for &u in &topo {
            let next = level[u as usize] + u32::from(receives[u as usize]);
            for &v in &dag.succ[u as usize] {
                level[v as usize] = level[v as usize].max(next);
            }
        }
        return Some(
            unit.iter()
                .map(|us| us.iter().map(|&u| level[u as usize]).collect())
                .collect(),
        );
    }
    None
}
