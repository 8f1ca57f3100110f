//! Where a buffer's chunks and elements live when a call's `input` and `output` alias.
//!
//! In-place collectives alias `input` and `output` as NCCL and MSCCL lay them out:
//! allgather's input is the rank's slice of output, reducescatter's output is the rank's slice
//! of input, the others share one buffer. Scratch buffers never alias. [`alias`] says it in
//! plan chunks (for analyses of a plan), [`in_place_layout`] in elements of a call's one
//! buffer (for executors placing a call).
//!
//! Invariant: the two agree. A chunk that [`alias`] maps to physical chunk `p` starts, in
//! [`in_place_layout`]'s buffer, at the element where chunk `p` of that buffer starts
//! ([`chunk_start`](crate::plan::chunk_start)), for every count and chunk factor.

use coll_lang::builtins::CollectiveKind;

/// The physical buffer and chunk of chunk `index` of buffer `buffer` (0 input, 1 output,
/// then scratch) on `rank`, with `k` chunks per slice (see the plan docs).
pub fn alias(
    kind: CollectiveKind,
    inplace: bool,
    k: u64,
    buffer: usize,
    rank: u64,
    index: u64,
) -> (usize, u64) {
    if !inplace || buffer > 1 {
        return (buffer, index);
    }
    match (kind, buffer) {
        (CollectiveKind::AllGather, 0) => (1, rank * k + index),
        (CollectiveKind::AllGather, _) => (1, index),
        (CollectiveKind::ReduceScatter, 1) => (0, rank * k + index),
        (CollectiveKind::ReduceScatter, _) => (0, index),
        _ => (0, index),
    }
}

/// Where a rank's input and output sit in its one buffer for an in-place call, as NCCL
/// defines in-place (all offsets and lengths in elements).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InPlaceLayout {
    /// Elements of the buffer.
    pub len: u64,
    /// Where the rank's input starts.
    pub input_at: u64,
    /// Where the rank's output starts.
    pub output_at: u64,
}

/// NCCL's in-place layout for rank `rank` at `count` (`in_elems`/`out_elems` are the
/// collective's per-rank buffer sizes): allgather's input is the rank's slice of the output
/// (`sendbuff == recvbuff + rank * count`), reducescatter's output is the rank's slice of the
/// input (`recvbuff == sendbuff + rank * count`), every other collective has input and output
/// at the start of one buffer. Every in-place path (CPU harness, GPU runs, benchmarks, the
/// placement of a call) uses this one function.
pub fn in_place_layout(
    kind: CollectiveKind,
    rank: u32,
    count: u64,
    in_elems: u64,
    out_elems: u64,
) -> InPlaceLayout {
    let slice = u64::from(rank) * count;
    match kind {
        CollectiveKind::AllGather => InPlaceLayout {
            len: out_elems,
            input_at: slice,
            output_at: 0,
        },
        CollectiveKind::ReduceScatter => InPlaceLayout {
            len: in_elems,
            input_at: 0,
            output_at: slice,
        },
        _ => InPlaceLayout {
            len: in_elems.max(out_elems),
            input_at: 0,
            output_at: 0,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::chunk_start;

    #[test]
    fn in_place_layouts_follow_nccl() {
        let ag = in_place_layout(CollectiveKind::AllGather, 3, 10, 10, 40);
        assert_eq!((ag.len, ag.input_at, ag.output_at), (40, 30, 0));
        let rs = in_place_layout(CollectiveKind::ReduceScatter, 2, 10, 40, 10);
        assert_eq!((rs.len, rs.input_at, rs.output_at), (40, 0, 20));
        let ar = in_place_layout(CollectiveKind::AllReduce, 2, 10, 10, 10);
        assert_eq!((ar.len, ar.input_at, ar.output_at), (10, 0, 0));
    }

    #[test]
    fn chunk_aliasing_and_the_element_layout_agree() {
        let n = 4u64;
        for kind in [
            CollectiveKind::AllGather,
            CollectiveKind::ReduceScatter,
            CollectiveKind::AllReduce,
            CollectiveKind::AllToAll,
        ] {
            // Chunks of `input` and `output` per rank, in slices of k chunks.
            let slices = |buffer: usize| match (kind, buffer) {
                (CollectiveKind::AllGather, 0) | (CollectiveKind::ReduceScatter, 1) => 1,
                (CollectiveKind::AllReduce, _) => 1,
                _ => n,
            };
            for (count, k) in [(10u64, 1u64), (11, 2), (7, 3)] {
                let elems = |b| chunk_start(count, k, slices(b) * k);
                for rank in 0..n {
                    let lay = in_place_layout(kind, rank as u32, count, elems(0), elems(1));
                    for buffer in [0usize, 1] {
                        let at = if buffer == 0 {
                            lay.input_at
                        } else {
                            lay.output_at
                        };
                        for c in 0..slices(buffer) * k {
                            let (_, p) = alias(kind, true, k, buffer, rank, c);
                            assert_eq!(
                                at + chunk_start(count, k, c),
                                chunk_start(count, k, p),
                                "{kind:?} count {count} k {k} rank {rank} buffer {buffer} chunk {c}"
                            );
                            assert!(chunk_start(count, k, p + 1) <= lay.len);
                        }
                    }
                }
            }
        }
    }
}
