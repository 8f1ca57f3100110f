//! `coll-compiler`: topology graph, elaboration of a checked program for `n` ranks,
//! symbolic verification, lowering to per-rank schedules, checks, the plan format and dumps.
//!
//! Not written yet: the front end ([`coll_lang`]) is what exists today. This crate is where
//! the next stages land, each as its own module.
#![forbid(unsafe_code)]

pub use coll_lang as lang;
