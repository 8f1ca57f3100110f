//! Order from data dependences (the scheduler's step 1): the folded per-rank ops of every
//! rank become *units* — one transfer (a send and its matching receive, or every pair of one
//! switch group), or one local op — ordered by a list schedule over their hazard DAG instead
//! of the program's order.
//!
//! The DAG: `u -> v` when an op of `u` and a later op of `v` on the same rank conflict on a
//! chunk (read after write, write after read, write after write), in every chunk numbering
//! the lowering orders by (the plan's, and the in-place one of a plan made out of place from
//! an in-place program, whose copies onto themselves there are skipped, as step 5 skips
//! them). Priority is the critical path to a sink: a transfer weighs one round, a local op
//! nothing, ties going to the longer tail of ops. The list schedule gives each round every
//! ready unit, highest priority first, at most one op per connection side (rank, peer,
//! channel, direction) per round; a local op runs in the round its inputs are ready.
//!
//! Invariants: the result is a topological order of the DAG, so on every rank the order of
//! conflicting accesses is the one folding left, and a unit's send and receive keep one
//! global position, so every connection carries its messages in the same order at both
//! ends. A cycle (which folding's moved sends could in principle make) gives no order: the
//! caller keeps the program's.

use super::{Chunks, Lowering, ROp};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// A dependence order of units.
#[derive(Debug)]
pub(super) struct Order {
    /// Position of each unit in the new global order (`u32::MAX` for a unit without ops).
    pub pos: Vec<u32>,
    /// Rounds the list schedule took (transfers only: local ops take none).
    pub rounds: u32,
}

/// The hazard DAG over units: successor lists (an edge may repeat).
struct Dag {
    succ: Vec<Vec<u32>>,
    indeg: Vec<u32>,
}

/// Adds the hazard edges of one rank's ops, in their order, under one chunk numbering.
fn rank_edges(
    ops: &[ROp],
    chunks: &Chunks<'_>,
    skip_self_copies: bool,
    edges: &mut Vec<(u32, u32)>,
) {
    let total = chunks.total as usize;
    let mut writer: Vec<u32> = vec![u32::MAX; total];
    let mut readers: Vec<Vec<u32>> = vec![Vec::new(); total];
    for op in ops {
        if skip_self_copies && chunks.copies_onto_itself(op) {
            continue;
        }
        let u = op.unit;
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
    fn new(l: &Lowering<'_>, ranks: &[Vec<ROp>], units: u32) -> Dag {
        use rayon::prelude::*;
        let per_rank: Vec<Vec<(u32, u32)>> = ranks
            .par_iter()
            .enumerate()
            .map(|(r, ops)| {
                let mut edges = Vec::new();
                rank_edges(
                    ops,
                    &Chunks::new(l, r as u32, l.e.inplace),
                    false,
                    &mut edges,
                );
                if l.e.from_in_place {
                    rank_edges(ops, &Chunks::new(l, r as u32, true), true, &mut edges);
                }
                edges.sort_unstable();
                edges.dedup();
                edges
            })
            .collect();
        let mut succ: Vec<Vec<u32>> = vec![Vec::new(); units as usize];
        let mut indeg = vec![0u32; units as usize];
        for (a, b) in per_rank.into_iter().flatten() {
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
    sides: Vec<(u32, u32, u32, bool)>,
}

/// The dependence order of the units of `ranks` (folded ops of every rank), or `None` when
/// the hazards form a cycle.
pub(super) fn dependence_order(l: &Lowering<'_>, ranks: &[Vec<ROp>], units: u32) -> Option<Order> {
    let n = units as usize;
    let mut info: Vec<UnitInfo> = vec![UnitInfo::default(); n];
    for (r, ops) in ranks.iter().enumerate() {
        for op in ops {
            let i = &mut info[op.unit as usize];
            if let Some((q, _)) = op.send {
                i.transfer = true;
                i.sides.push((r as u32, q, op.channel, true));
            }
            if let Some((p, _)) = op.recv {
                i.transfer = true;
                i.sides.push((r as u32, p, op.channel, false));
            }
        }
    }
    let dag = Dag::new(l, ranks, units);
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
    let mut used: HashMap<(u32, u32, u32, bool), u32> = HashMap::new();
    let mut t = 0u32;
    let mut done = 0usize;
    let mut last_round = 0u32;
    loop {
        // Local ops take no round: run every one ready now, and what they make ready.
        while let Some(u) = locals.pop() {
            pos[u as usize] = next_pos;
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
            if sides.iter().any(|s| used.get(s) == Some(&t)) {
                deferred.push((p, Reverse(u)));
                continue;
            }
            for &s in sides {
                used.insert(s, t);
            }
            pos[u as usize] = next_pos;
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
        pos,
        rounds: last_round,
    })
}

/// Puts each rank's ops in the order's global order (ops of one unit keep their order).
pub(super) fn apply(order: &Order, ranks: &mut [Vec<ROp>]) {
    for ops in ranks {
        ops.sort_by_key(|o| order.pos[o.unit as usize]);
    }
}
