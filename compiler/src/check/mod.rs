//! Checks of a lowered plan before anything runs: [`deadlock`] simulates every rank with
//! bounded connection slots and proves the plan finishes (or names the ops that wait for
//! each other in a cycle); [`race`] proves that conflicting accesses of a rank are ordered
//! by block order, deps or messages, so any interleaving gives the replayed result;
//! [`mod@resources`] counts what each rank needs (thread blocks, ops
//! per block, connections, scratch and staging bytes) and compares it with the limits.
//!
//! All expect a plan that passes [`crate::plan::Plan::validate`]; on one that does not they
//! still return without panicking, with results that only describe the invalid plan.

pub mod deadlock;
pub mod race;
pub mod resources;

#[cfg(test)]
pub(crate) mod testing;

pub use deadlock::{Deadlock, OpRef, Schedule, WaitReason, Waiter, simulate};
pub use race::{RaceError, RaceOp, check_races};
pub use resources::{
    Fraction, Limits, RankResources, ResourceError, Resources, ScratchNeed, check_resources,
    resources,
};
