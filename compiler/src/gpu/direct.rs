//! Direct receives: the receives whose data the sender may store straight into the
//! receiver's `input` or `output`, with no staging slot between them and no copy out of it
//! by the receiver (for calls where every rank's buffers are known when the call starts, as
//! in the GPU executor's bulk calls of one process; NCCL's P2P transport does the same
//! between the GPUs of one process).
//!
//! A receive R of rank q into `input` or `output` qualifies when every other op of q that
//! touches (reads or writes) an element R writes is ordered before or after R on q (block
//! order, dependencies), and the ones before can be waited for by R's own block: its
//! [`Release`] is the op of R's block after which nothing of q looks at those elements until
//! R is done ([`Release::Start`] when nothing does at all). The receiving block tells the
//! sender how far it may store (the GPU executor: a `ready` word per connection): at call
//! start, when every direct receive of the block is released at the start (the stream's
//! earlier work, which may still read those buffers, is done by then), else per iteration
//! as the block passes each release. Iterations cut every chunk into disjoint slices, so the order within one
//! iteration is enough, as in [`placement::in_place_safe`](super::placement::in_place_safe).
//!
//! A sender waiting for a release must not wait on itself: in a block released per iteration
//! every direct receive's release op (the block's first op for one released at the start) must
//! finish before its sender's op starts waiting, by the plan's own order (block order,
//! dependencies, and each send before its receive completes), so the wait adds no edge to
//! the schedule the plan was proved deadlock-free with.
//!
//! Two analyses, because a call's `input` and `output` are either distinct memory or alias
//! as in NCCL's in-place layout (in-place plans always, out-of-place plans in in-place
//! calls).
//!
//! Swaps (aliased placement only): in NCCL's in-place layout a pair exchange such as an
//! in-place all-to-all's has rank a send chunk X and receive the peer's data into X, while b
//! does the same with its chunk Y. Neither receive can be released before its own rank's
//! send has read X (or Y), and each send would wait for the other's release: staged, every
//! byte also passes through a slot. A swap needs neither: once both ranks are in the call,
//! each side exchanges half of every slice in place (loads its own half of X and the peer's of
//! Y, stores each into the other's place), then publishes `sent`; each receive waits for the
//! peer's half, and its own rank's half is done because its send runs first in the same block.
//! A pair qualifies when both messages are plain sends and receives of `input` or `output`,
//! each rank's send and receive cover the same elements in the same order and sit in one
//! block (send first), and every other op of either rank that touches those elements runs
//! after the rank's receive, so nothing reads or writes them between the call's start and
//! the receive ([`DirectOps::swaps`]; both receives are [`Release::Start`]).
//!
//! Blocks of several peers ([`Block::several_peers`]): no message with an end in such a block
//! goes direct, either way. Its sends write every message into each of its connections'
//! slots and its receives combine one message from each connection, which executors run on
//! a path of their own (the GPU executor's `run_block_multi`) that has no direct stores; its
//! messages still order the plan's ops (`Order`).
//!
//! Invariant: a receive is in [`DirectOps::recvs`] exactly when the op that sends it is in
//! [`DirectOps::sends`]: the two ends of a message agree on whether it goes through a slot.
//! The k-th sending op of the sender's block for a connection (r -> q, channel) is paired
//! with the k-th receiving op of the receiver's block, as executors' position counters pair
//! them, and goes direct only when both cut their chunks alike (same count and position in
//! the slice), so every chunk's slice has the same length on both sides.

use super::placement::happens_before;
use super::{Ends, messages, op_at, phys};
use crate::plan::{Block, Op, OpKind, Plan, RankPlan, Slice};
use std::collections::{HashMap, HashSet, VecDeque};

/// An op of the plan: (rank, block, op index).
pub type OpAt = (u32, u32, u32);

/// Where a direct send's data goes: the receiver's buffer (0 input, 1 output) and its
/// receive's first chunk there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    pub buffer: u8,
    pub offset: u64,
}

impl Target {
    /// The target of a send whose receive writes `dst`.
    fn of(dst: Slice) -> Target {
        Target {
            buffer: dst.buffer() as u8,
            offset: dst.offset(),
        }
    }
}

/// From when a direct receive's elements may be stored by its sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// From the start: nothing else on the rank touches them before the receive is done.
    Start,
    /// Once op `j` of the receive's block has finished (in each iteration).
    After(u32),
}

/// The messages of a plan that may skip staging, by their two ends.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DirectOps {
    /// Sending ops whose message goes straight into the receiver's buffer.
    pub sends: HashMap<OpAt, Target>,
    /// Receiving ops whose data the sender has already stored in place, and from when.
    pub recvs: HashMap<OpAt, Release>,
    /// Direct sends that swap with their receiver's send (see the module docs), each with the
    /// half of every slice its side exchanges; both ends of a swap are in `sends`.
    pub swaps: HashMap<OpAt, Half>,
}

/// Which half of a slice one side of a swap exchanges: the lower rank the first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Half {
    First,
    Second,
}

/// How a receiving block publishes its releases: `None` when at call start (every direct
/// receive of the block is [`Release::Start`], or it has none); else, per iteration, how many
/// of its receives are released before its first op, and after each op.
pub type ReleaseTable = Option<(u32, Vec<u32>)>;

impl DirectOps {
    /// The release table of `block` of `rank` (see [`ReleaseTable`]). Receives that are not
    /// direct count as released (their senders never wait for it), so the counts are the
    /// longest prefix of the block's receives, in order, whose releases have passed.
    pub fn releases(&self, rank: u32, block: &Block) -> ReleaseTable {
        let recvs: Vec<Option<Release>> = block
            .ops
            .iter()
            .enumerate()
            .filter(|(_, o)| o.kind.receives())
            .map(|(i, _)| self.recvs.get(&(rank, block.id, i as u32)).copied())
            .collect();
        if !recvs.iter().any(|r| matches!(r, Some(Release::After(_)))) {
            return None;
        }
        // Past op `j` (None: before the first op), which receives are released.
        let passed = |r: &Option<Release>, j: Option<u32>| match r {
            None | Some(Release::Start) => true,
            Some(Release::After(k)) => j.is_some_and(|j| j >= *k),
        };
        let prefix = |j: Option<u32>| recvs.iter().take_while(|r| passed(r, j)).count() as u32;
        Some((
            prefix(None),
            (0..block.ops.len() as u32)
                .map(|j| prefix(Some(j)))
                .collect(),
        ))
    }
}

/// Which of a plan's direct messages a call uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub enum CallDirect {
    #[default]
    /// None: LL calls (their lines carry data and flag together), calls of several
    /// processes, plans with none.
    Off,
    /// The set for `input` and `output` apart.
    Apart,
    /// The set for them aliased as in NCCL's in-place layout.
    Aliased,
}

/// Which set a call uses: `allowed` says whether any may (a bulk call of one process whose
/// plan has some); then the aliased set for in-place plans, and whenever any rank's `input`
/// (`in_bytes` from the first of its `bufs` pair) and `output` (`out_bytes` from the second)
/// overlap, since placement only lets them overlap in the in-place layout; else the set for
/// distinct buffers. The aliased set is the smaller, so a call whose ranks differ uses it.
pub fn call_direct(
    allowed: bool,
    inplace_plan: bool,
    bufs: &[(u64, u64)],
    in_bytes: u64,
    out_bytes: u64,
) -> CallDirect {
    if !allowed {
        return CallDirect::Off;
    }
    let overlap = |&(i, o): &(u64, u64)| {
        let (ie, oe) = (i.saturating_add(in_bytes), o.saturating_add(out_bytes));
        i < oe && o < ie
    };
    if inplace_plan || bufs.iter().any(overlap) {
        CallDirect::Aliased
    } else {
        CallDirect::Apart
    }
}

/// The direct messages of `plan` when its `input` and `output` are distinct memory
/// (`aliased` false) or alias as in NCCL's in-place layout (`aliased` true).
pub fn direct_ops(plan: &Plan, aliased: bool) -> DirectOps {
    let (apart, alias) = direct_ops_both(plan, true);
    if aliased { alias } else { apart }
}

/// [`direct_ops`] for both placements, (apart, aliased), with swaps or without: the plan's
/// messages, each rank's order of its own ops and the order across ranks are worked out once
/// for the two.
pub fn direct_ops_both(plan: &Plan, swaps: bool) -> (DirectOps, DirectOps) {
    let pairs = messages(plan);
    let before: Vec<_> = plan.gpus.iter().map(happens_before).collect();
    let order = Order::new(plan, &pairs);
    let candidates = one_peer_messages(plan, &pairs);
    let run = |aliased| analyse(plan, aliased, swaps, &candidates, &before, &order);
    (run(false), run(true))
}

/// The messages of `pairs` whose two ends are in blocks of one peer a side: only those may go
/// direct (see the module docs).
fn one_peer_messages(plan: &Plan, pairs: &[Ends]) -> Vec<Ends> {
    let one_peer = |at: OpAt| {
        plan.gpus
            .get(at.0 as usize)
            .and_then(|rp| rp.blocks.iter().find(|b| b.id == at.1))
            .is_some_and(|b| !b.several_peers())
    };
    pairs
        .iter()
        .copied()
        .filter(|&(s, r)| one_peer(s) && one_peer(r))
        .collect()
}

fn analyse(
    plan: &Plan,
    aliased: bool,
    swaps: bool,
    pairs: &[Ends],
    before: &[impl Fn(u32, u32, u32, u32) -> bool],
    order: &Order,
) -> DirectOps {
    let aliased = aliased || plan.inplace;
    // (send, receive, target, release) of every message that may go direct by its data.
    let mut cand: Vec<(OpAt, OpAt, Target, Release)> = Vec::new();
    for &(s, r) in pairs {
        let (Some(sop), Some(rop)) = (op_at(plan, s), op_at(plan, r)) else {
            continue;
        };
        let Some(dst) = rop.dst else { continue };
        // What the message is cut from: the source, or for a receive-and-forward the chunks
        // it received into.
        let cut = if sop.kind.needs_src() {
            sop.src
        } else {
            sop.dst
        };
        let alike = cut.is_some_and(|src| {
            sop.count == rop.count
                && src.offset() % plan.chunk_factor == dst.offset() % plan.chunk_factor
        });
        if !alike {
            continue;
        }
        let Some(rel) = release(plan, aliased, r, &before[r.0 as usize]) else {
            continue;
        };
        cand.push((s, r, Target::of(dst), rel));
    }
    // Blocks released per iteration: every sender must find its release op before it in the
    // plan's order. Dropping a receive can only move its block to call-start releases, which
    // need no such check, so one pass over the final modes is enough for safety.
    loop {
        let per_iteration = per_iteration(&cand);
        let kept = cand.len();
        cand.retain(|&(s, r, _, rel)| {
            if !per_iteration.contains(&(r.0, r.1)) {
                return true;
            }
            let j = match rel {
                Release::Start => 0,
                Release::After(j) => j,
            };
            (r.0, r.1, j) != r && order.reaches((r.0, r.1, j), s)
        });
        if cand.len() == kept {
            break;
        }
    }
    let mut out = DirectOps::default();
    if aliased && swaps {
        // Swaps, in blocks that release at call start (a per-iteration block's sender would
        // wait for a release the swap's own send gives only at its end).
        let per_iteration = per_iteration(&cand);
        let taken: HashSet<OpAt> = cand.iter().flat_map(|c| [c.0, c.1]).collect();
        for pair in swap_pairs(plan, pairs, before) {
            let free = |&(s, r, _): &(OpAt, OpAt, Target)| {
                !taken.contains(&s) && !taken.contains(&r) && !per_iteration.contains(&(r.0, r.1))
            };
            if !pair.iter().all(free) {
                continue;
            }
            for ((s, r, target), half) in pair.into_iter().zip([Half::First, Half::Second]) {
                cand.push((s, r, target, Release::Start));
                out.swaps.insert(s, half);
            }
        }
    }
    for (s, r, t, rel) in cand {
        out.sends.insert(s, t);
        out.recvs.insert(r, rel);
    }
    out
}

/// The blocks among `cand`'s receives that release per iteration (some receive after an op).
fn per_iteration(cand: &[(OpAt, OpAt, Target, Release)]) -> HashSet<(u32, u32)> {
    cand.iter()
        .filter(|c| matches!(c.3, Release::After(_)))
        .map(|c| (c.1.0, c.1.1))
        .collect()
}

/// The pairs of messages that may swap (see the module docs), each as (send, receive, the
/// send's target), the lower rank's first: in
/// the aliased placement, rank a sends X to b and receives b's data into X, b sends Y to a and
/// receives into Y, each send before its receive in one block, and every other op of a or b
/// that touches X or Y runs after that rank's receive (`before`: each rank's
/// [`happens_before`]).
fn swap_pairs(
    plan: &Plan,
    pairs: &[Ends],
    before: &[impl Fn(u32, u32, u32, u32) -> bool],
) -> Vec<[(OpAt, OpAt, Target); 2]> {
    let k = plan.chunk_factor;
    let by_send: HashMap<OpAt, OpAt> = pairs.iter().copied().collect();
    let mut out = Vec::new();
    for &(s, r) in pairs {
        let (a, b) = (s.0, r.0);
        if a >= b {
            continue;
        }
        // b's send in the receive's block, before it, whose receive is in a's sending block.
        let Some((s2, r2)) = (0..r.2).find_map(|j| {
            let s2 = (b, r.1, j);
            let r2 = *by_send.get(&s2)?;
            (r2.0 == a && r2.1 == s.1 && r2.2 > s.2).then_some((s2, r2))
        }) else {
            continue;
        };
        let ops = [s, r, s2, r2].map(|at| op_at(plan, at));
        let [Some(so), Some(ro), Some(so2), Some(ro2)] = ops else {
            continue;
        };
        let plain = so.kind == OpKind::Send
            && so2.kind == OpKind::Send
            && ro.kind == OpKind::Recv
            && ro2.kind == OpKind::Recv;
        let n = so.count;
        if !plain || [ro.count, so2.count, ro2.count] != [n; 3] {
            continue;
        }
        let (Some(x), Some(xr), Some(y), Some(yr)) = (so.src, ro2.dst, so2.src, ro.dst) else {
            continue;
        };
        if [x, xr, y, yr].iter().any(|sl| sl.buffer() > 1) {
            continue;
        }
        // Each side's send and receive cover the same elements, cut alike.
        let phys = |rank, sl, c| phys(plan, true, rank, sl, c);
        let same = |rank, p: Slice, q: Slice| {
            p.offset() % k == q.offset() % k
                && (0..u64::from(n)).all(|c| phys(rank, p, c) == phys(rank, q, c))
        };
        if !same(a, x, xr) || !same(b, y, yr) || x.offset() % k != yr.offset() % k {
            continue;
        }
        let alone = |rank: u32, sl, send: OpAt, recv: OpAt| {
            let set: HashSet<(usize, u64)> = (0..u64::from(n)).map(|c| phys(rank, sl, c)).collect();
            let Some(after) = before.get(rank as usize) else {
                return false;
            };
            untouched(plan, rank, &set, &|b, o| {
                (rank, b, o) == send || (rank, b, o) == recv || after(recv.1, recv.2, b, o)
            })
        };
        if alone(a, x, s, r2) && alone(b, y, s2, r) {
            out.push([(s, r, Target::of(yr)), (s2, r2, Target::of(xr))]);
        }
    }
    out
}

/// Whether no op (block, op) of `rank` but those `except` picks reads or writes an element
/// of `set` (physical, in the aliased placement).
fn untouched(
    plan: &Plan,
    rank: u32,
    set: &HashSet<(usize, u64)>,
    except: &dyn Fn(u32, u32) -> bool,
) -> bool {
    let Some(rp) = plan.gpus.get(rank as usize) else {
        return false;
    };
    rp.blocks.iter().all(|b| {
        b.ops.iter().enumerate().all(|(oi, x)| {
            except(b.id, oi as u32) || !op_touches(plan, true, rank, x, &|p| set.contains(&p))
        })
    })
}

/// Whether op `x` of `rank` reads or writes an element (physical, for the placement) that
/// `hit` picks; a copy onto itself touches nothing (the kernel skips it).
fn op_touches(
    plan: &Plan,
    aliased: bool,
    rank: u32,
    x: &Op,
    hit: &dyn Fn((usize, u64)) -> bool,
) -> bool {
    (0..u64::from(x.count)).any(|c| {
        let src = x.src.filter(|_| x.kind.needs_src());
        let dst = x.dst.filter(|_| x.kind.needs_dst());
        let from = src.map(|s| phys(plan, aliased, rank, s, c));
        let to = dst.map(|d| phys(plan, aliased, rank, d, c));
        if x.kind == OpKind::Copy && from.is_some() && from == to {
            return false;
        }
        from.is_some_and(&hit) || to.is_some_and(&hit)
    })
}

/// The plan's order across ranks: op a finishes before op b waits to store (b's deps and
/// its own receive are satisfied by then), by block order, dependencies, and a send finishing
/// before its receive does.
struct Order {
    index: HashMap<OpAt, usize>,
    succ: Vec<Vec<usize>>,
}

impl Order {
    fn new(plan: &Plan, pairs: &[Ends]) -> Order {
        let mut index = HashMap::new();
        for (r, rp) in plan.gpus.iter().enumerate() {
            for b in &rp.blocks {
                for oi in 0..b.ops.len() {
                    let n = index.len();
                    index.insert((r as u32, b.id, oi as u32), n);
                }
            }
        }
        let mut succ = vec![Vec::new(); index.len()];
        let mut edge = |a: OpAt, b: OpAt| {
            if let (Some(&x), Some(&y)) = (index.get(&a), index.get(&b)) {
                succ[x].push(y);
            }
        };
        for (r, rp) in plan.gpus.iter().enumerate() {
            let r = r as u32;
            for b in &rp.blocks {
                for (oi, op) in b.ops.iter().enumerate() {
                    let oi = oi as u32;
                    if oi > 0 {
                        edge((r, b.id, oi - 1), (r, b.id, oi));
                    }
                    for d in &op.deps {
                        edge((r, d.block(), d.op()), (r, b.id, oi));
                    }
                }
            }
        }
        for &(s, r) in pairs {
            edge(s, r);
        }
        Order { index, succ }
    }

    /// Whether `a` finishes before `b` waits to store (a path of at least one edge).
    fn reaches(&self, a: OpAt, b: OpAt) -> bool {
        let (Some(&from), Some(&to)) = (self.index.get(&a), self.index.get(&b)) else {
            return false;
        };
        let mut seen = vec![false; self.succ.len()];
        let mut queue: VecDeque<usize> = self.succ[from].iter().copied().collect();
        while let Some(x) = queue.pop_front() {
            if x == to {
                return true;
            }
            if !seen[x] {
                seen[x] = true;
                queue.extend(self.succ[x].iter().copied());
            }
        }
        false
    }
}

/// From when receive `at` may be stored by its sender (see the module docs): `None` when it
/// is not a plain receive (or receive-and-forward) into `input` or `output`, or when an op of
/// its rank that touches its elements before it cannot be waited for by its block.
/// `before` is the rank's [`happens_before`], made once per rank by the caller.
fn release(
    plan: &Plan,
    aliased: bool,
    at: OpAt,
    before: &impl Fn(u32, u32, u32, u32) -> bool,
) -> Option<Release> {
    let (rank, block, op) = at;
    let rp: &RankPlan = plan.gpus.get(rank as usize)?;
    let rb = rp.blocks.iter().find(|b| b.id == block)?;
    let r = rb.ops.get(op as usize)?;
    let dst = r.dst?;
    if !matches!(r.kind, OpKind::Recv | OpKind::RecvCopySend) || dst.buffer() > 1 {
        return None;
    }
    let written: HashSet<(usize, u64)> = (0..u64::from(r.count))
        .map(|c| phys(plan, aliased, rank, dst, c))
        .collect();
    // The last op of the receive's block that must have finished first.
    let mut need: Option<u32> = None;
    for b in &rp.blocks {
        for (oi, x) in b.ops.iter().enumerate() {
            let oi = oi as u32;
            if (b.id, oi) == (block, op) || before(block, op, b.id, oi) {
                continue;
            }
            if !op_touches(plan, aliased, rank, x, &|p| written.contains(&p)) {
                continue;
            }
            // Ordered before the receive (else the plan races); which op of the receive's
            // block is the first to start after it has finished?
            let j = if b.id == block {
                (oi < op).then_some(oi)?
            } else {
                (0..op).find(|&j| before(b.id, oi, block, j))?
            };
            need = Some(need.map_or(j, |n| n.max(j)));
        }
    }
    Some(need.map_or(Release::Start, Release::After))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(file: &str, n: usize) -> Plan {
        super::super::testing::shipped_plan(file, n)
    }

    /// Receiving ops of the plan.
    fn receives(p: &Plan) -> usize {
        p.gpus
            .iter()
            .flat_map(|g| &g.blocks)
            .flat_map(|b| &b.ops)
            .filter(|o| o.kind.receives())
            .count()
    }

    /// Receiving ops of the plan, by kind name.
    fn recvs_by_kind(p: &Plan, set: &HashMap<OpAt, Release>) -> Vec<(String, usize)> {
        let mut m: std::collections::BTreeMap<String, usize> = Default::default();
        for (r, rp) in p.gpus.iter().enumerate() {
            for b in &rp.blocks {
                for (oi, o) in b.ops.iter().enumerate() {
                    if set.contains_key(&(r as u32, b.id, oi as u32)) {
                        *m.entry(o.kind.name().to_string()).or_default() += 1;
                    }
                }
            }
        }
        m.into_iter().collect()
    }

    #[test]
    fn every_remote_message_of_the_pairwise_alltoall_swaps_in_place() {
        for n in [2usize, 3, 4, 8] {
            let p = super::super::testing::variant_plan("alltoall_pairs.coll", n);
            let remote = n * (n - 1);
            // Out of place every receive is direct and nothing swaps.
            let d = direct_ops(&p, false);
            assert_eq!((d.recvs.len(), d.sends.len()), (remote, remote), "n = {n}");
            assert!(d.swaps.is_empty());
            // In place each pair's two messages share a block on both ranks: all swap.
            let a = direct_ops(&p, true);
            assert_eq!(a.swaps.len(), remote, "n = {n}");
            assert!(a.recvs.values().all(|r| *r == Release::Start));
        }
    }

    #[test]
    fn every_alltoall_receive_is_direct_out_of_place_and_pairs_in_one_block_swap_in_place() {
        let p = plan("alltoall.coll", 4);
        let d = direct_ops(&p, false);
        // Each rank receives one chunk from each of its 3 peers, into its output.
        assert_eq!(recvs_by_kind(&p, &d.recvs), vec![("r".to_string(), 12)]);
        assert_eq!(d.sends.len(), 12);
        assert!(d.swaps.is_empty());
        // In place, rank q's output chunk p is its input chunk p, which q sends to p: the
        // receive is released only once that send is done, while p's send to q would wait
        // for it, and q's for p's: a cycle, so no message goes direct by release. Ranks two
        // apart send to and receive from each other in one block (shift 2 both ways): those
        // swap. Shifts 1 and 3 put the two directions of a pair in different blocks.
        let a = direct_ops(&p, true);
        let mut swaps: Vec<(u32, u32, Half)> = a
            .swaps
            .iter()
            .map(|(&(r, b, o), &h)| {
                let blk = p.gpus[r as usize].blocks.iter().find(|x| x.id == b);
                let peer = blk.and_then(|x| x.send_peer).expect("a send has a peer");
                assert_eq!(o, 0, "the swap is its block's first op");
                (r, peer, h)
            })
            .collect();
        swaps.sort_by_key(|s| (s.0, s.1));
        assert_eq!(
            swaps,
            vec![
                (0, 2, Half::First),
                (1, 3, Half::First),
                (2, 0, Half::Second),
                (3, 1, Half::Second)
            ]
        );
        assert_eq!(a.sends.len(), 4);
        assert_eq!(a.recvs.len(), 4);
        assert!(a.recvs.values().all(|r| *r == Release::Start));
        // Each swap's receive is the other rank's message, in the sender's own block.
        for &(r, b, _) in a.swaps.keys() {
            assert!(a.recvs.contains_key(&(r, b, 1)), "rank {r} block {b}");
        }
    }

    #[test]
    fn two_rank_exchanges_swap_in_place_with_the_lower_rank_on_the_first_half() {
        for f in ["alltoall.coll", "sendrecv.coll"] {
            let p = plan(f, 2);
            let a = direct_ops(&p, true);
            let mut swaps: Vec<(u32, Half)> = a.swaps.iter().map(|(k, &h)| (k.0, h)).collect();
            swaps.sort_by_key(|s| s.0);
            assert_eq!(swaps, vec![(0, Half::First), (1, Half::Second)], "{f}");
            // Both messages of the pair are direct, released at the start.
            assert_eq!(a.sends.len(), 2, "{f}");
            assert_eq!(a.recvs.len(), 2, "{f}");
            assert!(a.recvs.values().all(|r| *r == Release::Start), "{f}");
            // Turned off, the pair goes through slots as before.
            let (_, off) = direct_ops_both(&p, false);
            assert_eq!(off, DirectOps::default(), "{f}");
            // Out of place nothing swaps: the messages go direct as plain stores.
            let apart = direct_ops(&p, false);
            assert!(apart.swaps.is_empty(), "{f}");
            assert_eq!(apart.sends.len(), 2, "{f}");
        }
    }

    /// A 2-rank all-to-all whose exchange loop is preceded by `before` and followed by
    /// `after`, lowered with every copy kept and unfused (so an extra copy stays an op of its
    /// own); sends are hoisted, so each rank sends before it receives.
    fn exchange_with(before: &str, after: &str) -> Plan {
        let src = format!(
            "collective alltoall touched(n) {{ chunks 1; outofplace; ranks n == 2; topology any; \
             scratch keep[1]; }}\n\
             for r in 0..n {{ copy input[r][r] -> output[r][r]; }}\n{before}\n\
             for r in 0..n {{ let q = 1 - r; copy input[r][q] -> output[q][r]; }}\n{after}\n"
        );
        let m = coll_lang::load_bytes("touched.coll", src.into_bytes()).expect("valid");
        let topo = crate::topology::Topology::parse("nvswitch:2").expect("preset");
        let mut o = crate::CompileOptions::default();
        o.lower.fold_copies = false;
        o.lower.fuse = false;
        o.lower.scheduling = crate::lower::Scheduling::AsWritten;
        crate::compile(&m, &topo, &o)
            .expect("compiles")
            .into_plan()
            .into_inner()
    }

    /// The kinds of the ops of rank `r`'s first block.
    fn kinds(p: &Plan, r: usize) -> Vec<OpKind> {
        p.gpus[r].blocks[0].ops.iter().map(|o| o.kind).collect()
    }

    #[test]
    fn a_read_of_the_exchanged_chunk_before_the_receive_rules_the_swap_out() {
        // Rank 0 copies the chunk it sends before it receives into it: the peer may have
        // swapped its half in by then.
        let p = exchange_with("copy input[0][1] -> keep[0][0];", "");
        use OpKind::{Copy, Recv, Send};
        assert_eq!(kinds(&p, 0), [Send, Copy, Copy, Recv]);
        assert_eq!(kinds(&p, 1), [Send, Copy, Recv]);
        assert!(direct_ops(&p, true).swaps.is_empty());
        // Reading it after the receive (rank 1 keeps what it received) is ordered after both
        // halves: the pair still swaps.
        let p = exchange_with("", "copy output[1][0] -> keep[1][0];");
        assert_eq!(kinds(&p, 1), [Send, Copy, Recv, Copy]);
        assert_eq!(direct_ops(&p, true).swaps.len(), 2);
    }

    #[test]
    fn no_swap_where_another_op_reads_the_exchanged_chunk() {
        // These exchange within one block at n = 2, but receive with a reduction or into
        // chunks their sends did not read: no pair of plain sends and receives to swap.
        for f in [
            "reducescatter_ring.coll",
            "allreduce_ring.coll",
            "allgather_ring.coll",
        ] {
            let p = plan(f, 2);
            assert!(direct_ops(&p, true).swaps.is_empty(), "{f}");
        }
    }

    #[test]
    fn broadcast_ring_receives_are_direct_in_place() {
        let p = plan("broadcast_ring.coll", 4);
        let d = direct_ops(&p, true);
        // Ranks 1 and 2 receive and forward, rank 3 only receives.
        let kinds = recvs_by_kind(&p, &d.recvs);
        assert!(!kinds.is_empty(), "{kinds:?}");
        let total: usize = kinds.iter().map(|k| k.1).sum();
        let all = receives(&p);
        assert_eq!(total, all, "{kinds:?}");
    }

    #[test]
    fn ring_allreduce_in_place_gathers_directly_after_its_reads() {
        // In place, every chunk a rank gathers into was read earlier in the call by its
        // reduce-scatter half (rank 0 sends input[3] first and receives it fifth), so each
        // gathering receive is released after that read, and its sender reaches it later in
        // the ring's own order.
        let p = plan("allreduce_ring.coll", 4);
        let d = direct_ops(&p, true);
        assert_eq!(
            recvs_by_kind(&p, &d.recvs),
            vec![("r".to_string(), 4), ("rcs".to_string(), 8)]
        );
        assert_eq!(d.sends.len(), 12);
        // Rank 0: ops 4, 5, 6 gather input[3], input[2], input[1], read by ops 0, 1, 2.
        for (op, after) in [(4, 0), (5, 1), (6, 2)] {
            assert_eq!(d.recvs.get(&(0, 0, op)), Some(&Release::After(after)));
        }
        // Per iteration: the block's 6 receives; the first three (reduce-scatter) are not
        // direct, so they count as released from the start.
        let block = &p.gpus[0].blocks[0];
        assert_eq!(d.releases(0, block), Some((3, vec![4, 5, 6, 6, 6, 6, 6])));
    }

    #[test]
    fn allgather_ring_gathers_directly_out_of_place() {
        let p = plan("allgather_ring.coll", 4);
        let d = direct_ops(&p, false);
        let all = receives(&p);
        assert_eq!(d.recvs.len(), all);
        assert_eq!(d.sends.len(), all);
        // Every send targets the receiver's output.
        assert!(d.sends.values().all(|t| t.buffer == 1));
    }

    #[test]
    fn no_message_of_a_block_of_several_peers_goes_direct() {
        // Rank 0's one block receives from ranks 1 and 2 and sends to both: every message of
        // the plan has an end there, so none goes direct in either placement, with swaps or
        // without.
        let path = format!(
            "{}/../tests/inputs/plans/ok_head_several_peers_3.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let p = crate::plan::ValidPlan::from_json(&text)
            .unwrap_or_else(|e| panic!("{e}"))
            .into_inner();
        assert!(!messages(&p).is_empty());
        assert!(one_peer_messages(&p, &messages(&p)).is_empty());
        for swaps in [false, true] {
            let (apart, aliased) = direct_ops_both(&p, swaps);
            assert_eq!(apart, DirectOps::default(), "swaps {swaps}");
            assert_eq!(aliased, DirectOps::default(), "swaps {swaps}");
        }
        // Without the block's further peers, ranks 1 and 2 would reach it as blocks of one
        // peer: the same filter keeps rank 0's messages with rank 1.
        let mut one = p.clone();
        one.gpus[0].blocks[0].send_also.clear();
        one.gpus[0].blocks[0].recv_also.clear();
        let kept = one_peer_messages(&one, &messages(&one));
        assert_eq!(kept.len(), 2, "{kept:?}");
        assert!(kept.iter().all(|(s, r)| s.0 != 2 && r.0 != 2), "{kept:?}");
    }

    #[test]
    fn a_call_uses_the_aliased_set_when_any_rank_overlaps() {
        let apart = [(0x1000, 0x9000), (0x20000, 0x30000)];
        assert_eq!(
            call_direct(true, false, &apart, 0x1000, 0x1000),
            CallDirect::Apart
        );
        // Rank 1 in place (allgather's layout: the input is a slice of the output).
        let mixed = [(0x1000, 0x9000), (0x30400, 0x30000)];
        assert_eq!(
            call_direct(true, false, &mixed, 0x400, 0x1000),
            CallDirect::Aliased
        );
        // Touching ends do not overlap.
        let touching = [(0x1000, 0x2000)];
        assert_eq!(
            call_direct(true, false, &touching, 0x1000, 0x1000),
            CallDirect::Apart
        );
        // In-place plans always alias; nothing goes direct when not allowed.
        assert_eq!(
            call_direct(true, true, &apart, 0x1000, 0x1000),
            CallDirect::Aliased
        );
        assert_eq!(
            call_direct(false, false, &apart, 0x1000, 0x1000),
            CallDirect::Off
        );
    }

    #[test]
    fn the_aliased_analysis_never_adds_a_receive() {
        for f in [
            "alltoall.coll",
            "allgather_ring.coll",
            "reducescatter_ring.coll",
            "sendrecv.coll",
        ] {
            let p = plan(f, 4);
            let apart = direct_ops(&p, false);
            let alias = direct_ops(&p, true);
            assert!(
                alias.recvs.keys().all(|k| apart.recvs.contains_key(k)),
                "{f}"
            );
        }
    }
}
