//! Blocks of several peers (a candidate of `choose.rs`): blocks of one rank that receive
//! into the same chunks one peer after another, or send the same chunks to one peer after
//! another, become one block that does it in one op, as a tree node takes both children's
//! data in one step and a head node multicasts in one.
//!
//! Two rewrites of a lowered plan, repeated on each rank until neither applies:
//! - *Receives.* Block `A` only receives, every op of it a receive-reduce (`rrc`) of a
//!   message onto chunks of the rank (`src`, in place or not: a head's first receive adds
//!   its peer's chunk to its own input and stores the sum in its output), and block `B` of
//!   the same channel, route and protocol has exactly as many receiving ops. When the `i`-th
//!   op of `A` writes the chunks the `i`-th receiving op of `B` reduces from (`src`), `B`'s op
//!   waits for it and everything else that waits for it also waits for `B`'s op, that op of
//!   `B` takes both messages and `A`'s source: `B`'s receive peers become `A`'s then its own
//!   and its `src` becomes `A`'s, so the sum is formed in the same order (`src(A) (+) m(A) (+)
//!   m(B)`), bit for bit. `A` goes. (When `B`'s op stores nothing, `A`'s partial sum is no
//!   longer stored either: the replay below refuses the merge if anything needed it. The
//!   merged op reads `A`'s source later than `A` did: the race check below refuses the merge
//!   if anything wrote it in between.)
//! - *Sends.* Block `D2` only sends, every op a plain send, and block `D1` of the same
//!   channel, route and protocol has exactly as many sending ops. When the `i`-th op of `D2`
//!   sends the chunks the `i`-th sending op of `D1` sends (its source, or for a
//!   receive-and-forward the chunks it stored) and waits for that op and nothing else, `D1`'s
//!   op sends to both: `D2`'s peers join `D1`'s after its own. `D2` goes.
//!
//! Why it preserves the plan's meaning: the op that absorbs another runs after it in
//! happens-before (it waited for it), everything else that waited for the absorbed receive
//! runs after both (so no op saw the chunks between the two), and the absorbed send read what the absorbing op
//! sends, with no op between them (its only dep). Deps on an absorbed op move to the op that
//! absorbed it, which ends no earlier; the absorbed op's own deps join it. The result goes
//! through every check a candidate does (validation, the deadlock simulation, resources,
//! races) and through the replay of the collective's result.
//!
//! Invariant: block ids stay `0, 1, ...` and every dep names the op it named, renumbered.

use crate::plan::{Block, Dep, OpKind, Plan, RankPlan, Slice};

/// The plan with every merge of the module docs made, or `None` when none applies.
pub(super) fn merge_peers(plan: &Plan) -> Option<Plan> {
    // Most candidates have nothing to merge: the plan is copied only once one rank does.
    let first = plan.gpus.iter().position(|rank| find(rank).is_some())?;
    let mut out = plan.clone();
    for rank in &mut out.gpus[first..] {
        while let Some(m) = find(rank) {
            apply(rank, m);
        }
    }
    Some(out)
}

/// One merge: block `from` goes into block `into`; `at[i]` is the op of `into` that absorbs
/// op `i` of `from`.
struct Merge {
    from: usize,
    into: usize,
    at: Vec<u32>,
    /// Receives (`from`'s recv peers go first) or sends (`from`'s send peers go last).
    receives: bool,
}

/// Ops of every block that depend on each op, as `(block, op)`.
fn dependents(rank: &RankPlan) -> Vec<Vec<Vec<(u32, u32)>>> {
    let mut out: Vec<Vec<Vec<(u32, u32)>>> = rank
        .blocks
        .iter()
        .map(|b| vec![Vec::new(); b.ops.len()])
        .collect();
    for (bi, b) in rank.blocks.iter().enumerate() {
        for (oi, op) in b.ops.iter().enumerate() {
            for d in &op.deps {
                if let Some(list) = out
                    .get_mut(d.block() as usize)
                    .and_then(|x| x.get_mut(d.op() as usize))
                {
                    list.push((bi as u32, oi as u32));
                }
            }
        }
    }
    out
}

/// Whether two blocks may share one block's connections: the same channel, routes and
/// protocol.
fn alike(a: &Block, b: &Block, receives: bool) -> bool {
    a.channel == b.channel
        && a.protocol == b.protocol
        && if receives {
            a.recv_via == b.recv_via
        } else {
            a.send_via == b.send_via
        }
}

/// The first merge that applies on `rank`, if any.
fn find(rank: &RankPlan) -> Option<Merge> {
    let deps_on = dependents(rank);
    let n = rank.blocks.len();
    for from in 0..n {
        for into in 0..n {
            if from == into {
                continue;
            }
            if let Some(at) = receive_merge(rank, &deps_on, from, into) {
                return Some(Merge {
                    from,
                    into,
                    at,
                    receives: true,
                });
            }
            if let Some(at) = send_merge(rank, from, into) {
                return Some(Merge {
                    from,
                    into,
                    at,
                    receives: false,
                });
            }
        }
    }
    None
}

/// The ops of `into` that absorb `from`'s receives, when the receive rewrite applies.
fn receive_merge(
    rank: &RankPlan,
    deps_on: &[Vec<Vec<(u32, u32)>>],
    from: usize,
    into: usize,
) -> Option<Vec<u32>> {
    let (a, b) = (&rank.blocks[from], &rank.blocks[into]);
    if a.send_peer.is_some() || a.recv_peer.is_none() || b.recv_peer.is_none() {
        return None;
    }
    if a.ops.is_empty() || !alike(a, b, true) {
        return None;
    }
    let at: Vec<u32> = (0..b.ops.len() as u32)
        .filter(|&i| b.ops[i as usize].kind.receives())
        .collect();
    if at.len() != a.ops.len() {
        return None;
    }
    for (i, (op, &j)) in a.ops.iter().zip(&at).enumerate() {
        let bop = &b.ops[j as usize];
        let onto_own = op.kind == OpKind::RecvReduceCopy && op.src.is_some() && op.dst.is_some();
        let me = Dep(from as u32, i as u32);
        // Whatever else waited for it also waits for the absorbing op (or an op of `into`
        // after it), so it is ordered after the merged op as it was after both.
        let after_b = deps_on[from][i].iter().all(|&(cb, co)| {
            (cb as usize == into && co >= j)
                || rank.blocks[cb as usize].ops[co as usize]
                    .deps
                    .iter()
                    .any(|d| d.block() as usize == into && d.op() >= j)
        });
        let only_b = deps_on[from][i].contains(&(into as u32, j)) && after_b;
        if !onto_own
            || !bop.kind.reduces()
            || bop.src != op.dst
            || bop.count != op.count
            || !bop.deps.contains(&me)
            || !only_b
            // A dep of the absorbed op on `into` itself would be on the absorbing op or
            // after it: a cycle no deadlock-free plan has, refused rather than dropped.
            || op.deps.iter().any(|d| d.block() as usize == into && d.op() >= j)
        {
            return None;
        }
    }
    Some(at)
}

/// The chunks a sending op sends, when they are chunks of the rank (not a sum formed on the
/// way, as `rrs` sends).
fn sent(op: &crate::plan::Op) -> Option<Slice> {
    match op.kind {
        OpKind::Send | OpKind::CopySend => op.src,
        OpKind::RecvCopySend | OpKind::RecvReduceCopySend => op.dst,
        _ => None,
    }
}

/// The ops of `into` that absorb `from`'s sends, when the send rewrite applies.
fn send_merge(rank: &RankPlan, from: usize, into: usize) -> Option<Vec<u32>> {
    let (d2, d1) = (&rank.blocks[from], &rank.blocks[into]);
    if d2.recv_peer.is_some() || d2.send_peer.is_none() || d1.send_peer.is_none() {
        return None;
    }
    if d2.ops.is_empty() || !alike(d2, d1, false) {
        return None;
    }
    let at: Vec<u32> = (0..d1.ops.len() as u32)
        .filter(|&i| d1.ops[i as usize].kind.sends())
        .collect();
    if at.len() != d2.ops.len() {
        return None;
    }
    for (op, &j) in d2.ops.iter().zip(&at) {
        let dop = &d1.ops[j as usize];
        if op.kind != OpKind::Send
            || sent(dop).is_none()
            || op.src != sent(dop)
            || op.count != dop.count
            || op.deps[..] != [Dep(into as u32, j)]
        {
            return None;
        }
    }
    Some(at)
}

/// Makes merge `m` on `rank` (see the module docs).
fn apply(rank: &mut RankPlan, m: Merge) {
    let gone = rank.blocks[m.from].clone();
    let into = m.into as u32;
    // The absorbing ops take over the absorbed ops' deps (those on `into` itself are
    // earlier in its order, so already implied).
    for (i, op) in gone.ops.iter().enumerate() {
        let target = &mut rank.blocks[m.into].ops[m.at[i] as usize];
        let me = Dep(m.from as u32, i as u32);
        let mut deps: Vec<Dep> = target.deps.iter().copied().filter(|&d| d != me).collect();
        deps.extend(op.deps.iter().copied().filter(|d| d.block() != into));
        target.deps = latest_per_block(deps);
        if m.receives {
            // The absorbed receive's operand (its own `dst`, which the target reduced from,
            // when it was in place).
            target.src = op.src;
        }
    }
    {
        let b = &mut rank.blocks[m.into];
        if m.receives {
            let mut peers: Vec<u32> = gone.recv_peers().collect();
            peers.extend(b.recv_peers());
            b.recv_peer = peers.first().copied();
            b.recv_also = peers.get(1..).map(<[u32]>::to_vec).unwrap_or_default();
        } else {
            b.send_also.extend(gone.send_peers());
        }
    }
    rank.blocks.remove(m.from);
    let from = m.from as u32;
    // Renumber: deps on the absorbed block name the absorbing ops, and blocks after the
    // removed one move down by one.
    let moved = |b: u32| if b > from { b - 1 } else { b };
    for (id, b) in rank.blocks.iter_mut().enumerate() {
        b.id = id as u32;
        for op in &mut b.ops {
            let deps: Vec<Dep> = op
                .deps
                .iter()
                .map(|&d| {
                    if d.block() == from {
                        Dep(moved(into), m.at[d.op() as usize])
                    } else {
                        Dep(moved(d.block()), d.op())
                    }
                })
                .filter(|d| d.block() != id as u32)
                .collect();
            op.deps = latest_per_block(deps);
        }
    }
}

/// Deps with only the latest op of each block (waiting for it waits for those before it),
/// in block order.
fn latest_per_block(mut deps: Vec<Dep>) -> Box<[Dep]> {
    deps.sort_unstable();
    let mut out: Vec<Dep> = Vec::with_capacity(deps.len());
    for d in deps {
        match out.last_mut() {
            Some(last) if last.block() == d.block() => *last = d,
            _ => out.push(d),
        }
    }
    out.into_boxed_slice()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Op, ValidPlan};

    fn fixture(name: &str) -> Plan {
        let path = format!(
            "{}/../tests/inputs/plans/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        ValidPlan::from_json(&text)
            .map(ValidPlan::into_inner)
            .unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// The head of three made the long way: rank 0 receives rank 1's chunk in one block and
    /// rank 2's (after it) in another that sends the sum to rank 2, and a third block sends
    /// the sum to rank 1.
    fn head_one_peer_at_a_time() -> Plan {
        let mut plan = fixture("ok_head_several_peers_3.json");
        let op = |kind, src: Option<Slice>, dst: Option<Slice>, deps: &[Dep], at| Op {
            kind,
            src,
            dst,
            count: 1,
            deps: deps.into(),
            source: at,
            group: None,
        };
        let x = Some(Slice(0, 0));
        let template = plan.gpus[0].blocks[0].clone();
        let block = |id, send: Option<u32>, recv: Option<u32>, ops| Block {
            id,
            send_peer: send,
            recv_peer: recv,
            send_via: send.and(template.send_via),
            recv_via: recv.and(template.recv_via),
            send_also: Vec::new(),
            recv_also: Vec::new(),
            ops,
            ..template.clone()
        };
        plan.gpus[0].blocks = vec![
            block(
                0,
                None,
                Some(1),
                vec![op(OpKind::RecvReduceCopy, x, x, &[], 0)],
            ),
            block(
                1,
                Some(2),
                Some(2),
                vec![op(OpKind::RecvReduceCopySend, x, x, &[Dep(0, 0)], 0)],
            ),
            block(
                2,
                Some(1),
                None,
                vec![op(OpKind::Send, x, None, &[Dep(1, 0)], 1)],
            ),
        ];
        plan
    }

    /// `plan` merged, both rewrites applied and the result valid, with rank 0's blocks (its
    /// head) checked to be one.
    fn merged_head(plan: &Plan) -> (Plan, Vec<Block>) {
        plan.validate().expect("the long way is a valid plan");
        let merged = merge_peers(plan).expect("both rewrites apply");
        merged.validate().expect("the merged plan is valid");
        let head = merged.gpus[0].blocks.clone();
        assert_eq!(head.len(), 1, "{head:#?}");
        (merged, head)
    }

    #[test]
    fn a_head_of_one_peer_at_a_time_becomes_one_block_of_several_peers() {
        let plan = head_one_peer_at_a_time();
        let (merged, head) = merged_head(&plan);
        // Rank 1's message is combined first, as the long way added it first.
        assert_eq!(head[0].recv_peers().collect::<Vec<_>>(), [1, 2]);
        assert_eq!(head[0].send_peers().collect::<Vec<_>>(), [2, 1]);
        assert_eq!(head[0].ops.len(), 1);
        assert_eq!(head[0].ops[0].kind, OpKind::RecvReduceCopySend);
        assert!(head[0].ops[0].deps.is_empty());
        // The other ranks are untouched.
        assert_eq!(merged.gpus[1..], plan.gpus[1..]);
    }

    #[test]
    fn a_first_receive_onto_other_chunks_is_absorbed_with_its_source() {
        // Out of place: the head adds rank 1's chunk to its input (buffer 0) into its output
        // (buffer 1), then rank 2's to the output; merged, one op adds both to the input.
        let mut plan = head_one_peer_at_a_time();
        let (input, output) = (Some(Slice(0, 0)), Some(Slice(1, 0)));
        plan.gpus[0].blocks[0].ops[0].dst = output;
        plan.gpus[0].blocks[1].ops[0].src = output;
        plan.gpus[0].blocks[1].ops[0].dst = output;
        plan.gpus[0].blocks[2].ops[0].src = output;
        let (_, head) = merged_head(&plan);
        assert_eq!(head[0].recv_peers().collect::<Vec<_>>(), [1, 2]);
        assert_eq!((head[0].ops[0].src, head[0].ops[0].dst), (input, output));
        // A first receive that only stores its message (no operand of the rank's) is not
        // one: the merged op would have nothing to add the messages to.
        let mut plain = plan.clone();
        plain.gpus[0].blocks[0].ops[0].kind = OpKind::Recv;
        plain.gpus[0].blocks[0].ops[0].src = None;
        let kept = merge_peers(&plain);
        assert!(
            kept.as_ref()
                .is_none_or(|k| k.gpus[0].blocks.iter().all(|b| b.recv_also.is_empty())),
            "{kept:#?}"
        );
    }

    #[test]
    fn a_receive_another_op_waits_for_is_not_absorbed() {
        let mut plan = head_one_peer_at_a_time();
        // The sending block waits for the first receive alone, not for the second: it may
        // see the chunk between the two receives, so they stay apart.
        plan.gpus[0].blocks[2].ops[0].deps = vec![Dep(0, 0)].into();
        assert_eq!(merge_peers(&plan), None);
        // Waiting for both, it sees the chunk after the merged op, as after both.
        plan.gpus[0].blocks[2].ops[0].deps = vec![Dep(0, 0), Dep(1, 0)].into();
        let merged = merge_peers(&plan).expect("the receives merge");
        merged.validate().expect("valid");
        assert_eq!(
            merged.gpus[0].blocks[0].recv_peers().collect::<Vec<_>>(),
            [1, 2]
        );
    }

    #[test]
    fn a_send_of_other_chunks_is_not_absorbed() {
        let mut plan = head_one_peer_at_a_time();
        plan.buffers[0].chunks = 2;
        plan.buffers[1].chunks = 2;
        plan.gpus[0].blocks[2].ops[0].src = Some(Slice(0, 1));
        let merged = merge_peers(&plan).expect("the receives still merge");
        assert!(
            merged.gpus[0].blocks.iter().all(|b| b.send_also.is_empty()),
            "{merged:#?}"
        );
    }

    #[test]
    fn deps_are_renumbered_after_a_block_goes() {
        let deps = latest_per_block(vec![Dep(2, 1), Dep(0, 3), Dep(2, 4), Dep(0, 1)]);
        assert_eq!(&deps[..], [Dep(0, 3), Dep(2, 4)]);
    }
}
