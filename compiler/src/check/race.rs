//! Race check: proves that every two ops of a rank that touch the same chunk, at least one
//! of them writing it, are ordered by happens-before, so every interleaving an executor may
//! pick gives the result the symbolic replay ([`crate::replay`]) computes for one.
//!
//! Happens-before over a plan is the transitive closure of: program order within a block
//! (a block runs its ops in order), explicit deps (`[block, op]` of the same rank), and
//! message causality (the k-th send on a connection `(from, to, channel)` happens before
//! the k-th receive on it completes, and so before every later op of the receiving block).
//! A block of several peers has one connection per peer: each of its sends is the k-th send
//! on every one of them, and each of its receives completes only after the matching send of
//! every receive peer, so an op gets one message edge per peer.
//! Ops of different ranks never conflict (each rank has its own buffers), but messages can
//! order two ops of one rank through other ranks.
//!
//! Accesses: `src` is read, `dst` written; a local reduce also reads `dst`, and a receive
//! that reduces without `src` combines with `dst`. Input and output are compared after the
//! in-place aliasing of the collective ([`crate::layout::alias`]).
//!
//! Reachability is computed per rank `p` as vector clocks over `p`'s blocks, propagated
//! through the ops of every rank in topological order: `clock[x][b]` is one more than the
//! last op of block `b` of rank `p` that happens before or is `x`. Memory is the op count
//! times the largest block count of a rank, time that times the count of ranks with more
//! than one block (a rank of one block is ordered by program order alone).

use crate::layout::alias;
use crate::plan::{self, OpKind, Plan};
use rustc_hash::FxHashMap as HashMap;
use std::collections::{BTreeMap, VecDeque};

/// One op of a plan by position, with where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaceOp {
    pub rank: u32,
    pub block: u32,
    pub op: u32,
    /// `rank r, block b, op i (file:line:col)`.
    pub at: String,
}

/// Why a plan's ops are not ordered enough.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RaceError {
    /// Two unordered ops of one rank touch the same chunk, one of them writing it.
    #[error(
        "{} and {} race on {buffer}[{chunk}]: {what}, and no block order, dep or message orders them",
        first.at, second.at
    )]
    Race {
        first: RaceOp,
        second: RaceOp,
        /// The buffer's name (after in-place aliasing) and the chunk in it.
        buffer: String,
        chunk: u64,
        what: &'static str,
    },
    /// Ops that wait for themselves through deps and messages: no order exists.
    #[error("{}: can never run: it waits, through deps and messages, for itself", at.at)]
    Cycle { at: RaceOp },
}

/// An op's position as a node index: ranks, then blocks, then ops, in order.
struct Nodes {
    /// `first[r][b]`: the node of op 0 of block `b` of rank `r`.
    first: Vec<Vec<usize>>,
    /// `(rank, block, op)` of each node.
    pos: Vec<(u32, u32, u32)>,
}

impl Nodes {
    fn new(plan: &Plan) -> Nodes {
        let mut first = Vec::with_capacity(plan.gpus.len());
        let mut pos = Vec::with_capacity(plan.op_count());
        for (r, g) in plan.gpus.iter().enumerate() {
            let mut f = Vec::with_capacity(g.blocks.len());
            for (b, blk) in g.blocks.iter().enumerate() {
                f.push(pos.len());
                pos.extend((0..blk.ops.len()).map(|i| (r as u32, b as u32, i as u32)));
            }
            first.push(f);
        }
        Nodes { first, pos }
    }

    fn node(&self, plan: &Plan, rank: u32, block: u32, op: u32) -> Option<usize> {
        let len = plan
            .gpus
            .get(rank as usize)?
            .blocks
            .get(block as usize)?
            .ops
            .len();
        ((op as usize) < len).then(|| self.first[rank as usize][block as usize] + op as usize)
    }
}

fn race_op(plan: &Plan, (rank, block, op): (u32, u32, u32)) -> RaceOp {
    RaceOp {
        rank,
        block,
        op,
        at: plan::location(plan, rank, block, Some(op)),
    }
}

/// Checks that every conflicting pair of ops of a rank is ordered (see the module docs).
/// Expects a plan that passes [`Plan::validate`]; on one that does not it still returns
/// without panicking (references to missing ops are ignored).
pub fn check_races(plan: &Plan) -> Result<(), RaceError> {
    let nodes = Nodes::new(plan);
    let preds = Adjacency::from_edges(nodes.pos.len(), |edge| {
        happens_before_edges(plan, &nodes, edge)
    });
    let order = topological(&preds).map_err(|x| RaceError::Cycle {
        at: race_op(plan, nodes.pos[x]),
    })?;
    for (p, g) in plan.gpus.iter().enumerate() {
        let width = g.blocks.len();
        // A rank of one block runs its ops in order, so every two of them are ordered: its
        // clocks (a pass over every op of the plan) would find nothing. Ring plans have one
        // block per rank, so this is what keeps a plan of ring allreduce at n = 1024 at a
        // second instead of minutes.
        if width <= 1 {
            continue;
        }
        let clocks = clocks(&nodes, &preds, &order, p as u32, width);
        let hb = |a: usize, b: usize| {
            let (_, ab, ai) = nodes.pos[a];
            clocks[b * width + ab as usize] > ai
        };
        check_rank(plan, &nodes, p as u32, &hb)?;
    }
    Ok(())
}

/// Calls `edge(from, to)` for every direct happens-before edge: program order, deps and
/// messages (see the module docs).
fn happens_before_edges(plan: &Plan, nodes: &Nodes, edge: &mut dyn FnMut(usize, usize)) {
    // Sends and receives per connection, in block order.
    let mut sends: HashMap<(u32, u32, u32), Vec<usize>> = HashMap::default();
    let mut recvs: HashMap<(u32, u32, u32), Vec<usize>> = HashMap::default();
    for (x, &(r, b, i)) in nodes.pos.iter().enumerate() {
        let block = &plan.gpus[r as usize].blocks[b as usize];
        let op = &block.ops[i as usize];
        if i > 0 {
            edge(x - 1, x);
        }
        for d in &op.deps {
            if let Some(y) = nodes.node(plan, r, d.block(), d.op()) {
                edge(y, x);
            }
        }
        // A send puts a message on every send connection of its block, and a receive takes
        // one from every receive connection: one edge per message.
        if op.kind.sends() {
            for q in block.send_peers() {
                sends.entry((r, q, block.channel)).or_default().push(x);
            }
        }
        if op.kind.receives() {
            for p in block.recv_peers() {
                recvs.entry((p, r, block.channel)).or_default().push(x);
            }
        }
    }
    for (conn, s) in &sends {
        if let Some(rs) = recvs.get(conn) {
            for (&from, &to) in s.iter().zip(rs) {
                edge(from, to);
            }
        }
    }
}

/// A graph's edges grouped by node: `of(x)` lists the nodes `x` has an edge from (or to).
/// One list for all nodes: a plan has millions of nodes, and a vector each cost two
/// allocations and about 70 bytes per node for each direction.
struct Adjacency {
    /// `list[start[x]..start[x + 1]]` are node `x`'s neighbours.
    start: Vec<usize>,
    list: Vec<usize>,
}

impl Adjacency {
    /// For each node `to` of `n`, the nodes `from` of the edges `(from, to)` that `edges`
    /// gives (it is called twice and must give the same edges both times), in that order.
    fn from_edges(n: usize, edges: impl Fn(&mut dyn FnMut(usize, usize))) -> Adjacency {
        let mut start = vec![0usize; n + 1];
        edges(&mut |_, to| start[to + 1] += 1);
        for x in 0..n {
            start[x + 1] += start[x];
        }
        let mut list = vec![0usize; start[n]];
        let mut next = start.clone();
        edges(&mut |from, to| {
            list[next[to]] = from;
            next[to] += 1;
        });
        Adjacency { start, list }
    }

    fn of(&self, x: usize) -> &[usize] {
        &self.list[self.start[x]..self.start[x + 1]]
    }

    fn len(&self) -> usize {
        self.start.len() - 1
    }

    /// The same edges the other way round.
    fn reversed(&self) -> Adjacency {
        Adjacency::from_edges(self.len(), |edge| {
            for x in 0..self.len() {
                for &y in self.of(x) {
                    edge(x, y);
                }
            }
        })
    }
}

/// A topological order of the nodes, or a node on a cycle.
fn topological(preds: &Adjacency) -> Result<Vec<usize>, usize> {
    let succs = preds.reversed();
    let mut indegree: Vec<usize> = (0..preds.len()).map(|x| preds.of(x).len()).collect();
    let mut ready: VecDeque<usize> = (0..preds.len()).filter(|&x| indegree[x] == 0).collect();
    let mut order = Vec::with_capacity(preds.len());
    while let Some(x) = ready.pop_front() {
        order.push(x);
        for &s in succs.of(x) {
            indegree[s] -= 1;
            if indegree[s] == 0 {
                ready.push_back(s);
            }
        }
    }
    match (0..preds.len()).find(|&x| indegree[x] > 0) {
        Some(x) => Err(x),
        None => Ok(order),
    }
}

/// Vector clocks of every node over the `width` blocks of rank `p`, row-major.
fn clocks(nodes: &Nodes, preds: &Adjacency, order: &[usize], p: u32, width: usize) -> Vec<u32> {
    let mut clocks = vec![0u32; nodes.pos.len() * width];
    for &x in order {
        for &y in preds.of(x) {
            for b in 0..width {
                let v = clocks[y * width + b];
                let c = &mut clocks[x * width + b];
                *c = (*c).max(v);
            }
        }
        let (r, b, i) = nodes.pos[x];
        if r == p {
            clocks[x * width + b as usize] = i + 1;
        }
    }
    clocks
}

/// One access of an op to a physical chunk range.
struct Access {
    node: usize,
    buffer: usize,
    start: u64,
    count: u64,
    write: bool,
}

fn accesses(plan: &Plan, nodes: &Nodes, p: u32) -> Vec<Access> {
    let kind = plan.collective.0;
    let mut out = Vec::new();
    let Some(g) = plan.gpus.get(p as usize) else {
        return out;
    };
    for (b, blk) in g.blocks.iter().enumerate() {
        for (i, op) in blk.ops.iter().enumerate() {
            let node = nodes.first[p as usize][b] + i;
            let mut add = |s: Option<plan::Slice>, write: bool| {
                if let Some(s) = s {
                    // Aliasing shifts a whole buffer, so a range stays a range.
                    let (buffer, start) = alias(
                        kind,
                        plan.inplace,
                        plan.chunk_factor,
                        s.buffer() as usize,
                        u64::from(p),
                        s.offset(),
                    );
                    out.push(Access {
                        node,
                        buffer,
                        start,
                        count: u64::from(op.count),
                        write,
                    });
                }
            };
            if op.kind.needs_src() {
                add(op.src, false);
            }
            let reads_dst = op.kind == OpKind::Reduce || (op.kind.reduces() && op.src.is_none());
            if reads_dst {
                add(op.dst, false);
            }
            if op.kind.needs_dst() {
                add(op.dst, true);
            }
        }
    }
    out
}

/// Finds the first unordered conflicting pair of rank `p`, by buffer, chunk and op order.
fn check_rank(
    plan: &Plan,
    nodes: &Nodes,
    p: u32,
    hb: &dyn Fn(usize, usize) -> bool,
) -> Result<(), RaceError> {
    // (buffer, chunk) -> accesses, in op order.
    let mut cells: BTreeMap<(usize, u64), Vec<(usize, bool)>> = BTreeMap::new();
    for a in accesses(plan, nodes, p) {
        for c in a.start..a.start.saturating_add(a.count) {
            cells
                .entry((a.buffer, c))
                .or_default()
                .push((a.node, a.write));
        }
    }
    for ((buffer, chunk), list) in &cells {
        for (j, &(x, wx)) in list.iter().enumerate() {
            for &(y, wy) in &list[j + 1..] {
                if x == y || !(wx || wy) || hb(x, y) || hb(y, x) {
                    continue;
                }
                let (a, b) = (x.min(y), x.max(y));
                let what = if wx && wy {
                    "both write it"
                } else {
                    "one writes what the other reads"
                };
                return Err(RaceError::Race {
                    first: race_op(plan, nodes.pos[a]),
                    second: race_op(plan, nodes.pos[b]),
                    buffer: plan
                        .buffers
                        .get(*buffer)
                        .map_or_else(|| format!("buffer {buffer}"), |d| d.name.clone()),
                    chunk: *chunk,
                    what,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::testing::{Builder, ring};
    use crate::plan::Slice;

    #[test]
    fn the_ring_is_race_free() {
        for n in [2, 3, 8] {
            check_races(&ring(n)).unwrap_or_else(|e| panic!("ring {n}: {e}"));
        }
    }

    /// Two blocks of one rank writing the same chunk race unless a dep orders them.
    #[test]
    fn unordered_writes_race_and_a_dep_orders_them() {
        let mut b = Builder::new(1);
        let b0 = b.block(0, 0, None, None);
        let b1 = b.block(0, 1, None, None);
        b.op(0, b0, OpKind::Copy, &[]);
        b.op(0, b1, OpKind::Copy, &[]);
        let e = check_races(&b.build()).expect_err("race");
        assert_eq!(
            e.to_string(),
            "rank 0, block 0, op 0 (t.coll:1:1) and rank 0, block 1, op 0 (t.coll:2:1) race on \
             output[0]: both write it, and no block order, dep or message orders them"
        );
        let mut b = Builder::new(1);
        let b0 = b.block(0, 0, None, None);
        let b1 = b.block(0, 1, None, None);
        b.op(0, b0, OpKind::Copy, &[]);
        b.op(0, b1, OpKind::Copy, &[(0, 0)]);
        check_races(&b.build()).expect("ordered by the dep");
        // Reads of the same chunk never race.
        let mut b = Builder::new(1);
        let b0 = b.block(0, 0, None, None);
        let b1 = b.block(0, 1, None, None);
        b.op_with(
            0,
            b0,
            OpKind::Copy,
            Some(Slice(0, 0)),
            Some(Slice(1, 0)),
            1,
            &[],
        );
        b.op_with(
            0,
            b1,
            OpKind::Copy,
            Some(Slice(0, 0)),
            Some(Slice(1, 1)),
            1,
            &[],
        );
        check_races(&b.build()).expect("disjoint writes, shared reads");
    }

    /// A message round trip orders two ops of rank 0 in different blocks: block 0 writes
    /// output[0] and sends to rank 1, rank 1 sends back, block 1 of rank 0 receives and
    /// then reads output[0].
    #[test]
    fn messages_order_ops_through_other_ranks() {
        let build = || {
            let mut b = Builder::new(2);
            let a0 = b.block(0, 0, Some(1), None);
            let a1 = b.block(0, 0, None, Some(1));
            let c = b.block(1, 0, Some(0), Some(0));
            b.op_with(
                0,
                a0,
                OpKind::Copy,
                Some(Slice(0, 0)),
                Some(Slice(1, 0)),
                1,
                &[],
            );
            b.op_with(0, a0, OpKind::Send, Some(Slice(0, 1)), None, 1, &[]);
            b.op_with(1, c, OpKind::RecvCopySend, None, Some(Slice(1, 0)), 1, &[]);
            b.op_with(0, a1, OpKind::Recv, None, Some(Slice(1, 1)), 1, &[]);
            b.op_with(
                0,
                a1,
                OpKind::Copy,
                Some(Slice(1, 0)),
                Some(Slice(1, 2)),
                1,
                &[],
            );
            b.build()
        };
        check_races(&build()).expect("ordered through rank 1");
        // Swap the write and the send on rank 0: now nothing orders the write of
        // output[0] before block 1's read of it.
        let mut plan = build();
        plan.gpus[0].blocks[0].ops.swap(0, 1);
        let e = check_races(&plan).expect_err("race");
        assert!(
            e.to_string().starts_with(
                "rank 0, block 0, op 1 (t.coll:1:1) and rank 0, block 1, op 1 (t.coll:5:1) race \
                 on output[0]: one writes what the other reads"
            ),
            "{e}"
        );
    }

    /// Rank 0 sends `input[0]` to ranks 1 and 2 from block 0, and block 1 combines their
    /// messages into `input[0]`; only rank 2 answers what it received (rank 1 sends first),
    /// so only the edges of the also-peers order the send before the overwrite. Block 0 then
    /// overwrites `input[0]` again, after block 1 by a dep.
    fn head_ordered_through_an_also_peer() -> Plan {
        let mut b = Builder::new(3);
        let tx = b.block(0, 0, Some(1), None);
        let rx = b.block(0, 0, None, Some(1));
        b.op_with(0, tx, OpKind::Send, Some(Slice(0, 0)), None, 1, &[]);
        b.op_with(
            0,
            rx,
            OpKind::RecvReduceCopy,
            Some(Slice(0, 0)),
            Some(Slice(0, 0)),
            1,
            &[],
        );
        b.op_with(
            0,
            tx,
            OpKind::Copy,
            Some(Slice(0, 1)),
            Some(Slice(0, 0)),
            1,
            &[(rx, 0)],
        );
        let one = b.block(1, 0, Some(0), Some(0));
        b.op_with(1, one, OpKind::Send, Some(Slice(0, 0)), None, 1, &[]);
        b.op_with(1, one, OpKind::Recv, None, Some(Slice(1, 0)), 1, &[]);
        let two = b.block(2, 0, Some(0), Some(0));
        b.op_with(
            2,
            two,
            OpKind::RecvCopySend,
            None,
            Some(Slice(1, 0)),
            1,
            &[],
        );
        let mut plan = b.unchecked();
        plan.gpus[0].blocks[tx as usize].send_also = vec![2];
        plan.gpus[0].blocks[rx as usize].recv_also = vec![2];
        plan.validate().unwrap_or_else(|e| panic!("{e}"));
        plan
    }

    #[test]
    fn several_peer_messages_order_ops() {
        check_races(&head_ordered_through_an_also_peer()).expect("ordered through rank 2");
        // Without the dep, block 0's copy overwrites input[0], which block 1's receive reads.
        let mut plan = head_ordered_through_an_also_peer();
        plan.gpus[0].blocks[0].ops[1].deps = Box::default();
        let e = check_races(&plan).expect_err("race");
        assert_eq!(
            e.to_string(),
            "rank 0, block 0, op 1 (t.coll:3:1) and rank 0, block 1, op 0 (t.coll:2:1) race on \
             input[0]: one writes what the other reads, and no block order, dep or message \
             orders them"
        );
        // Rank 2 sends before it receives: nothing orders the send of input[0] before the
        // receive that overwrites it.
        let mut plan = head_ordered_through_an_also_peer();
        let ops = &mut plan.gpus[2].blocks[0].ops;
        ops[0].kind = OpKind::Send;
        ops[0].src = Some(Slice(0, 0));
        ops[0].dst = None;
        let recv = crate::plan::Op {
            kind: OpKind::Recv,
            src: None,
            dst: Some(Slice(1, 0)),
            ..ops[0].clone()
        };
        ops.push(recv);
        plan.validate().unwrap_or_else(|e| panic!("{e}"));
        let e = check_races(&plan).expect_err("race");
        assert!(
            e.to_string().starts_with(
                "rank 0, block 0, op 0 (t.coll:1:1) and rank 0, block 1, op 0 (t.coll:2:1) race \
                 on input[0]: one writes what the other reads"
            ),
            "{e}"
        );
    }
}
