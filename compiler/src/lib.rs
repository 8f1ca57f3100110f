//! `coll-compiler`: topology graph, elaboration of a checked program for `n` ranks,
//! symbolic verification, lowering to per-rank schedules, checks, the plan format and dumps.
//!
//! Stages, each a module: [`topology`] (the machine), [`elaborate`] (program + n + topology
//! -> chunk operations in program order, each with its source span), [`verify`] (symbolic
//! proof that the operations compute the declared collective).
#![forbid(unsafe_code)]

pub mod ids;
pub mod topology;

pub use coll_lang as lang;
