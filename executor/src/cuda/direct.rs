//! Direct receives: the receives whose data the sender may store straight into the
//! receiver's `input` or `output`, with no staging slot between them and no copy out of it
//! by the receiver (bulk calls of one process, where every rank's buffers are known at
//! launch; NCCL's P2P transport does the same between the GPUs of one process).
//!
//! A receive R of rank q into `input` or `output` qualifies when every other op of q that
//! touches (reads or writes) an element R writes starts only after R has finished, by block
//! order or dependencies. Then nothing of q looks at those elements from the start of the
//! call until R is done, so the sender may fill them at any time once q's part of the call
//! has begun (the kernel's `ready` handshake; the stream's earlier work is done by then).
//! Iterations cut every chunk into disjoint slices, so the order within one iteration is
//! enough, as in [`placement::in_place_safe`](super::placement::in_place_safe).
//!
//! Two analyses, because a call's `input` and `output` are either distinct memory or alias
//! as in NCCL's in-place layout (in-place plans always, out-of-place plans in in-place
//! calls). The aliased one sees every conflict the distinct one does, and more: its
//! receives are a subset of the distinct one's.
//!
//! Invariant: a receive is in [`DirectOps::recvs`] exactly when the op that sends it is in
//! [`DirectOps::sends`]: the two ends of a message agree on whether it goes through a slot.
//! The k-th sending op of the sender's block for a connection (r -> q, channel) is paired
//! with the k-th receiving op of the receiver's block, as the kernel's position counters pair
//! them, and only when both cut their chunks alike (same count and position in the slice), so
//! every chunk's slice has the same length on both sides.

use super::placement::happens_before;
use coll_compiler::layout::alias;
use coll_compiler::plan::{OpKind, Plan, RankPlan};
use std::collections::{HashMap, HashSet};

/// An op of the plan: (rank, block, op index).
pub type OpAt = (u32, u32, u32);

/// Where a direct send's data goes: the receiver's buffer (0 input, 1 output) and its
/// receive's first chunk there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    pub buffer: u8,
    pub offset: u64,
}

/// The messages of a plan that may skip staging, by their two ends.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DirectOps {
    /// Sending ops whose message goes straight into the receiver's buffer.
    pub sends: HashMap<OpAt, Target>,
    /// Receiving ops whose data the sender has already stored in place.
    pub recvs: HashSet<OpAt>,
}

/// The direct messages of `plan` when its `input` and `output` are distinct memory
/// (`aliased` false) or alias as in NCCL's in-place layout (`aliased` true).
pub fn direct_ops(plan: &Plan, aliased: bool) -> DirectOps {
    let aliased = aliased || plan.inplace;
    let mut out = DirectOps::default();
    for (r, rp) in plan.gpus.iter().enumerate() {
        let r = r as u32;
        for b in &rp.blocks {
            let Some(q) = b.send_peer else { continue };
            let Some(rq) = plan.gpus.get(q as usize) else {
                continue;
            };
            let Some(rb) = rq
                .blocks
                .iter()
                .find(|x| x.recv_peer == Some(r) && x.channel == b.channel)
            else {
                continue;
            };
            let sends = b.ops.iter().enumerate().filter(|(_, o)| o.kind.sends());
            let recvs = rb.ops.iter().enumerate().filter(|(_, o)| o.kind.receives());
            for ((si, s), (ri, rop)) in sends.zip(recvs) {
                let Some(dst) = rop.dst else { continue };
                // What the message is cut from: the source, or for a receive-and-forward
                // the chunks it received into.
                let cut = if s.kind.needs_src() { s.src } else { s.dst };
                let alike = cut.is_some_and(|src| {
                    s.count == rop.count
                        && src.offset() % plan.chunk_factor == dst.offset() % plan.chunk_factor
                });
                if !alike || !unobserved(plan, aliased, q, rq, rb.id, ri as u32) {
                    continue;
                }
                out.sends.insert(
                    (r, b.id, si as u32),
                    Target {
                        buffer: dst.buffer() as u8,
                        offset: dst.offset(),
                    },
                );
                out.recvs.insert((q, rb.id, ri as u32));
            }
        }
    }
    out
}

/// Whether receive `op` of block `block` on rank `rank` may be stored by its sender at any
/// time during the call: a plain receive (or receive-and-forward) into `input` or `output`
/// whose elements no other op of the rank touches before it has finished.
fn unobserved(plan: &Plan, aliased: bool, rank: u32, rp: &RankPlan, block: u32, op: u32) -> bool {
    let Some(r) = rp
        .blocks
        .iter()
        .find(|b| b.id == block)
        .and_then(|b| b.ops.get(op as usize))
    else {
        return false;
    };
    let Some(dst) = r.dst else { return false };
    if !matches!(r.kind, OpKind::Recv | OpKind::RecvCopySend) || dst.buffer() > 1 {
        return false;
    }
    let kind = plan.collective.0;
    let k = plan.chunk_factor;
    let phys = |buffer: u32, index: u64| {
        alias(kind, aliased, k, buffer as usize, u64::from(rank), index)
    };
    let written: HashSet<(usize, u64)> = (0..u64::from(r.count))
        .map(|c| phys(dst.buffer(), dst.offset() + c))
        .collect();
    let before = happens_before(rp);
    for b in &rp.blocks {
        for (oi, x) in b.ops.iter().enumerate() {
            let oi = oi as u32;
            if (b.id, oi) == (block, op) || before(block, op, b.id, oi) {
                continue;
            }
            for c in 0..u64::from(x.count) {
                let src = x.src.filter(|_| x.kind.needs_src());
                let dst = x.dst.filter(|_| x.kind.needs_dst());
                let from = src.map(|s| phys(s.buffer(), s.offset() + c));
                let to = dst.map(|d| phys(d.buffer(), d.offset() + c));
                // A copy onto itself is skipped by the kernel: it touches nothing.
                if x.kind == OpKind::Copy && from.is_some() && from == to {
                    continue;
                }
                if from.is_some_and(|p| written.contains(&p))
                    || to.is_some_and(|p| written.contains(&p))
                {
                    return false;
                }
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use coll_compiler::topology::Topology;
    use coll_compiler::{CompileOptions, compile};

    fn plan(file: &str, n: usize) -> Plan {
        let path = format!("{}/../algorithms/{file}", env!("CARGO_MANIFEST_DIR"));
        let m = coll_lang::load_bytes(&path, std::fs::read(&path).expect("ships")).expect("valid");
        let topo = Topology::parse(&format!("nvswitch:{n}")).expect("preset");
        compile(&m, &topo, &CompileOptions::default())
            .expect("compiles")
            .lowered
            .plan
    }

    /// Receiving ops of the plan, by kind name.
    fn recvs_by_kind(p: &Plan, set: &HashSet<OpAt>) -> Vec<(String, usize)> {
        let mut m: std::collections::BTreeMap<String, usize> = Default::default();
        for (r, rp) in p.gpus.iter().enumerate() {
            for b in &rp.blocks {
                for (oi, o) in b.ops.iter().enumerate() {
                    if set.contains(&(r as u32, b.id, oi as u32)) {
                        *m.entry(o.kind.name().to_string()).or_default() += 1;
                    }
                }
            }
        }
        m.into_iter().collect()
    }

    #[test]
    fn every_alltoall_receive_is_direct_out_of_place_and_none_in_place() {
        let p = plan("alltoall.coll", 4);
        let d = direct_ops(&p, false);
        // Each rank receives one chunk from each of its 3 peers, into its output.
        assert_eq!(recvs_by_kind(&p, &d.recvs), vec![("r".to_string(), 12)]);
        assert_eq!(d.sends.len(), 12);
        // In place, rank q's output chunk p is its input chunk p, which q sends to p: the
        // send reads it while p may already be storing there.
        assert!(direct_ops(&p, true).recvs.is_empty());
    }

    #[test]
    fn broadcast_ring_receives_are_direct_in_place() {
        let p = plan("broadcast_ring.coll", 4);
        let d = direct_ops(&p, true);
        // Ranks 1 and 2 receive and forward, rank 3 only receives.
        let kinds = recvs_by_kind(&p, &d.recvs);
        assert!(!kinds.is_empty(), "{kinds:?}");
        let total: usize = kinds.iter().map(|k| k.1).sum();
        let all: usize = p
            .gpus
            .iter()
            .flat_map(|g| &g.blocks)
            .flat_map(|b| &b.ops)
            .filter(|o| o.kind.receives())
            .count();
        assert_eq!(total, all, "{kinds:?}");
    }

    #[test]
    fn ring_allreduce_has_no_direct_receive() {
        // In place, every chunk a rank gathers into was read earlier in the call by its
        // reduce-scatter half (rank 0 sends input[3] first and receives it last): a sender
        // storing at any time could overwrite it before that read.
        let p = plan("allreduce_ring.coll", 4);
        assert_eq!(direct_ops(&p, true), DirectOps::default());
    }

    #[test]
    fn allgather_ring_gathers_directly_out_of_place() {
        let p = plan("allgather_ring.coll", 4);
        let d = direct_ops(&p, false);
        let all = p
            .gpus
            .iter()
            .flat_map(|g| &g.blocks)
            .flat_map(|b| &b.ops)
            .filter(|o| o.kind.receives())
            .count();
        assert_eq!(d.recvs.len(), all);
        assert_eq!(d.sends.len(), all);
        // Every send targets the receiver's output.
        assert!(d.sends.values().all(|t| t.buffer == 1));
    }

    #[test]
    fn the_aliased_analysis_never_adds_a_receive() {
        for f in ["alltoall.coll", "allgather_ring.coll", "reducescatter_ring.coll", "sendrecv.coll"] {
            let p = plan(f, 4);
            let apart = direct_ops(&p, false);
            let alias = direct_ops(&p, true);
            assert!(alias.recvs.is_subset(&apart.recvs), "{f}");
        }
    }
}
