//! Errors of loading and running plans. Each names where it happened: the rank, block and op
//! of the plan and the source line the op came from.

use coll_compiler::gpu::placement::PlacementError;
use coll_compiler::plan::PlanError;
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    #[error("invalid plan: {0}")]
    Plan(#[from] PlanError),
    #[error(
        "{at} waited {waited:?} without progress ({waiting}); a peer stopped answering or the schedule is stuck"
    )]
    Timeout {
        /// `rank r, block b, op i (file:line:col)`.
        at: String,
        waiting: String,
        waited: Duration,
    },
    /// An op met data of another size than its chunks: a peer process resolved the call for
    /// another plan or count (within one process, every op moves equal sizes at the count it
    /// runs at, [`coll_compiler::plan::sizes`]).
    #[error(
        "{at}: {src} elements arrived for chunks of {dst} elements at count {count}; the sending process runs another plan or count"
    )]
    ChunkSize {
        at: String,
        src: u64,
        dst: u64,
        count: u64,
    },
    #[error("rank {rank}: expected {expected} input elements, got {got}")]
    InputSize { rank: u32, expected: u64, got: u64 },
    #[error("expected buffers for {expected} ranks, got {got}")]
    RankCount { expected: u32, got: usize },
    #[error("`{op}` is not defined for {collective} (no reduction to average)")]
    Unsupported { op: String, collective: String },
    #[error("root {root} is out of range: there are {ranks} ranks")]
    Root { root: u32, ranks: u32 },
    #[error("{at} was {waiting} when {reason}")]
    Peer {
        /// `rank r, block b, op i (file:line:col)`, or the process at a barrier.
        at: String,
        waiting: String,
        /// The process that failed, its ranks, and how.
        reason: String,
    },
    /// The executor was aborted ([`crate::cuda::CudaExecutor::abort`], or a peer process
    /// failed) while a call waited, or before the call was made: the executor takes no more
    /// calls.
    #[error("{at}: the call was aborted {cause}")]
    Aborted {
        /// The rank whose wait gave up first (the GPU's first rank when none was waiting).
        rank: u32,
        /// `rank r, block b, op i (file:line:col)`, or `rank r` alone.
        at: String,
        cause: AbortCause,
    },
    #[error("{procs} processes for {ranks} ranks: each process needs at least one rank")]
    Procs { procs: u32, ranks: u32 },
    #[error("GPU: {0}")]
    Gpu(String),
    /// A CUDA driver call that failed, with the driver's own code (`CUresult`), so a caller
    /// can tell an illegal address (700) from an out-of-memory (2) without parsing text.
    #[error("GPU: {what}: {name} (CUresult {code})")]
    Driver {
        /// The call and what it was for.
        what: String,
        /// The `CUresult` value.
        code: u32,
        /// Its name, e.g. `CUDA_ERROR_ILLEGAL_ADDRESS`.
        name: String,
    },
    #[error("environment variable {var}={value:?}: {why}")]
    Env {
        var: String,
        value: String,
        why: String,
    },
    /// A program that does not parse, check, prove or lower: the diagnostics, rendered with
    /// `path:line:col` and an excerpt of the source.
    #[error("{0}")]
    Compile(String),
    #[error("{path}: {what}")]
    Io { path: String, what: String },
    #[error("rank {rank}: a worker thread failed: {what}")]
    Worker { rank: u32, what: String },
    /// A call whose buffers the loaded plan cannot be placed on.
    #[error(transparent)]
    Placement(#[from] PlacementError),
}

/// Why an executor was aborted ([`ExecError::Aborted`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AbortCause {
    /// Its owner called `abort` (e.g. `ncclCommAbort`).
    #[error("by its owner")]
    Caller,
    /// Another process of the group failed: it died, broke the protocol or aborted (the
    /// mesh's description, naming the process and its ranks).
    #[error("because {0}")]
    Peer(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_placement_error_keeps_its_type_and_message() {
        let e: ExecError = PlacementError::NoStaging {
            rank: 3,
            call_in_place: true,
            plan_in_place: false,
        }
        .into();
        assert!(matches!(
            e,
            ExecError::Placement(PlacementError::NoStaging { rank: 3, .. })
        ));
        assert_eq!(
            e.to_string(),
            "rank 3: an in-place call of this out-of-place plan needs staging, and the plan was \
             loaded without it"
        );
    }

    #[test]
    fn an_abort_names_the_rank_and_why() {
        let e = ExecError::Aborted {
            rank: 1,
            at: "rank 1, block 0, op 2 (ring.coll:7:5)".into(),
            cause: AbortCause::Peer("process 1 (rank 1) died: it closed its connection".into()),
        };
        assert_eq!(
            e.to_string(),
            "rank 1, block 0, op 2 (ring.coll:7:5): the call was aborted because process 1 \
             (rank 1) died: it closed its connection"
        );
        let e = ExecError::Aborted {
            rank: 0,
            at: "rank 0".into(),
            cause: AbortCause::Caller,
        };
        assert_eq!(e.to_string(), "rank 0: the call was aborted by its owner");
    }
}
