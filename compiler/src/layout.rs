//! Where a buffer's chunks live. In-place collectives alias `input` and `output` as MSCCL
//! lays them out: allgather's input is the rank's slice of output, reducescatter's output is
//! the rank's slice of input, the others share one buffer. Scratch buffers never alias.

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
