//! Analyses of a plan that an executor moving data between GPUs needs before it runs a call:
//! pure functions of the plan (and, for one call, of its count and buffer addresses), with
//! no device, so schedulers and every executor can use them and they are tested on any
//! machine.
//!
//! - [`placement`]: how a call's buffers become the plan's `input` and `output` whatever
//!   placement the plan was written for, whether an out-of-place plan may run on aliased
//!   buffers ([`placement::in_place_safe`]), and the staging it needs otherwise.
//! - [`direct`]: which messages the sender may store straight into the receiver's buffers,
//!   skipping staging slots, from when each receiver releases them, and which pairs swap in
//!   place.
//! - [`copy_engine`]: which calls consist only of copies of data final at the call's start,
//!   so that copy engines can move them instead of a kernel, and those copies in bytes.
//! - [`protocol`]: which protocol (LL or bulk) a call of a given size runs in.
//! - [`oneshot`]: which allreduces send every rank's whole input to every other rank, so that
//!   an executor may run their small calls as one exchange and a local combination.
//!
//! Vocabulary and invariants shared by the three:
//! - An op is named by [`direct::OpAt`], (rank, block id, op index). A message pairs the k-th
//!   sending op of a connection's sending block with the k-th receiving op of its receiving
//!   block, as [`Plan::validate`] checks and executors count them.
//! - Elements are compared by physical position: [`alias`] maps a slice's chunk to the
//!   buffer and chunk it occupies, with `input` and `output` apart or aliased in NCCL's
//!   in-place layout ([`in_place_layout`](crate::layout::in_place_layout)); in-place plans
//!   are always aliased.
//! - Executors cut every chunk into the same slices in every iteration of a call, and
//!   different iterations touch disjoint elements, so orders among one iteration's ops
//!   (block order and dependencies, [`placement::happens_before`]) decide every hazard.
//! - Nothing here reads memory: addresses are plain numbers an executor hands in and gets
//!   back.

pub mod copy_engine;
pub mod direct;
pub mod oneshot;
pub mod placement;
pub mod protocol;

use crate::layout::alias;
use crate::plan::{Op, Plan, Slice};
use direct::OpAt;

/// A message by its two ends: (sending op, receiving op).
pub(crate) type Ends = (OpAt, OpAt);

/// Where chunk `c` of slice `s` of `rank` lies, as a physical (buffer, chunk), with `input`
/// and `output` apart or aliased in NCCL's in-place layout.
pub(crate) fn phys(plan: &Plan, aliased: bool, rank: u32, s: Slice, c: u64) -> (usize, u64) {
    alias(
        plan.collective.0,
        aliased,
        plan.chunk_factor,
        s.buffer() as usize,
        u64::from(rank),
        s.offset() + c,
    )
}

/// Op `at` of the plan, if there is one.
pub(crate) fn op_at(plan: &Plan, at: OpAt) -> Option<&Op> {
    plan.gpus
        .get(at.0 as usize)?
        .blocks
        .iter()
        .find(|b| b.id == at.1)?
        .ops
        .get(at.2 as usize)
}

/// Every message of the plan as (sending op, receiving op): per connection, the k-th sending
/// op of the sender's block with the k-th receiving op of the receiver's. A block of several
/// peers has a connection per peer, so one of its sending ops is in a message per send peer
/// (in [`crate::plan::Block::send_peers`] order), and one of its receiving ops in a message
/// per recv peer.
pub(crate) fn messages(plan: &Plan) -> Vec<Ends> {
    let mut out = Vec::new();
    for (r, rp) in plan.gpus.iter().enumerate() {
        let r = r as u32;
        for b in &rp.blocks {
            for q in b.send_peers() {
                let Some(rb) = plan.gpus.get(q as usize).and_then(|rq| {
                    rq.blocks
                        .iter()
                        .find(|x| x.channel == b.channel && x.recv_peers().any(|p| p == r))
                }) else {
                    continue;
                };
                let sends = b.ops.iter().enumerate().filter(|(_, o)| o.kind.sends());
                let recvs = rb.ops.iter().enumerate().filter(|(_, o)| o.kind.receives());
                for ((si, _), (ri, _)) in sends.zip(recvs) {
                    out.push(((r, b.id, si as u32), (q, rb.id, ri as u32)));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_of_a_block_of_several_peers_go_to_every_peer() {
        let path = format!(
            "{}/../tests/inputs/plans/ok_head_several_peers_3.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let plan = crate::plan::ValidPlan::from_json(&text).unwrap_or_else(|e| panic!("{e}"));
        let mut m = messages(&plan);
        m.sort();
        // Rank 0's one op receives from ranks 1 and 2 and sends to both.
        assert_eq!(
            m,
            vec![
                ((0, 0, 0), (1, 0, 1)),
                ((0, 0, 0), (2, 0, 1)),
                ((1, 0, 0), (0, 0, 0)),
                ((2, 0, 0), (0, 0, 0)),
            ]
        );
    }
}

/// Plans of the shipped algorithms (`algorithms/*.coll`) for the analyses' tests.
#[cfg(test)]
pub(crate) mod testing {
    use crate::plan::Plan;
    use crate::topology::Topology;
    use crate::{CompileOptions, compile};
    use std::path::PathBuf;

    fn algorithms() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../algorithms")
    }

    /// Every shipped algorithm's file name, sorted.
    pub(crate) fn shipped_files() -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(algorithms())
            .expect("algorithms/ ships")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|f| f.ends_with(".coll"))
            .collect();
        v.sort();
        v
    }

    /// Shipped algorithm `file` for `nvswitch:n`, as written (`out_of_place` false) or made
    /// out of place where its collective allows (as `coll run` compiles it); `None` when it
    /// does not compile for that machine.
    pub(crate) fn try_shipped(file: &str, n: usize, out_of_place: bool) -> Option<Plan> {
        try_file(&algorithms().join(file), n, out_of_place)
    }

    /// [`try_shipped`] of the file at `path`.
    fn try_file(path: &std::path::Path, n: usize, out_of_place: bool) -> Option<Plan> {
        let text = std::fs::read(path).expect("the algorithm's file exists");
        let m = coll_lang::load_bytes(&path.display().to_string(), text).expect("valid");
        let topo = Topology::parse(&format!("nvswitch:{n}")).expect("preset");
        let mut o = CompileOptions::default();
        o.elaborate.out_of_place =
            out_of_place && crate::elaborate::placement::convertible(&m.summary);
        compile(&m, &topo, &o)
            .ok()
            .map(|c| c.into_plan().into_inner())
    }

    /// Shipped algorithm `file` as written, compiled for `nvswitch:n`.
    pub(crate) fn shipped_plan(file: &str, n: usize) -> Plan {
        try_shipped(file, n, false).expect("compiles")
    }

    /// A variant kept for measurement (`bench/variants/FILE`) as written, for `nvswitch:n`.
    pub(crate) fn variant_plan(file: &str, n: usize) -> Plan {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../bench/variants");
        try_file(&path.join(file), n, false).expect("compiles")
    }
}
