//! NCCL's group semantics: between `ncclGroupStart` and the matching `ncclGroupEnd`, inits
//! and calls are collected per thread and carried out together at the end, so one thread
//! can drive several GPUs' communicators.
//!
//! Invariants: the group depth is per thread and never negative (an unmatched end is an
//! error); pending work is carried out at the outermost end in the order it was given, inits
//! first, then splits ([`crate::split`]), then calls. Nothing reaches the real NCCL before that end, so its groups need not mirror ours:
//! real inits complete in a group of their own ([`crate::init`]) and the calls forwarded at
//! one end go in one real group ([`crate::route::run`]).

use crate::comm::Comm;
use crate::error::{Error, Result};
use crate::global::Global;
use crate::route::{self, Spec};
use crate::split::SplitCall;
use std::cell::RefCell;
use std::sync::Arc;

/// A communicator's initialisation, completed at the group's end.
#[derive(Debug)]
pub struct PendingInit {
    pub comm: Arc<Comm>,
}

#[derive(Debug, Default)]
struct Group {
    depth: u32,
    inits: Vec<PendingInit>,
    calls: Vec<(Arc<Comm>, Spec)>,
    splits: Vec<SplitCall>,
    /// The first error of a call inside the group, returned by its end.
    error: Option<Error>,
}

thread_local! {
    static GROUP: RefCell<Group> = RefCell::new(Group::default());
}

/// Whether this thread is inside a group.
pub fn in_group() -> bool {
    GROUP.with(|g| g.borrow().depth > 0)
}

pub fn start(_global: &Global) -> Result<()> {
    GROUP.with(|g| g.borrow_mut().depth += 1);
    Ok(())
}

/// Queues an init for the group's end.
pub fn add_init(init: PendingInit) {
    GROUP.with(|g| g.borrow_mut().inits.push(init));
}

/// Queues a split for the group's end.
pub fn add_split(split: SplitCall) {
    GROUP.with(|g| g.borrow_mut().splits.push(split));
}

/// Queues a call for the group's end.
pub fn add_call(comm: Arc<Comm>, spec: Spec) {
    GROUP.with(|g| g.borrow_mut().calls.push((comm, spec)));
}

/// Remembers the first error of the group.
pub fn fail(e: Error) {
    GROUP.with(|g| {
        g.borrow_mut().error.get_or_insert(e);
    });
}

pub fn end(global: &'static Global) -> Result<()> {
    let work = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Err(Error::usage("ncclGroupEnd without ncclGroupStart"));
        }
        g.depth -= 1;
        if g.depth > 0 {
            return Ok(None);
        }
        Ok(Some((
            std::mem::take(&mut g.inits),
            std::mem::take(&mut g.splits),
            std::mem::take(&mut g.calls),
            g.error.take(),
        )))
    })?;
    let Some((inits, splits, calls, error)) = work else {
        return Ok(());
    };
    let mut outcome = match error {
        Some(e) => Err(e),
        None => Ok(()),
    };
    if outcome.is_ok() && !inits.is_empty() {
        outcome = crate::init::complete(global, inits);
    }
    if outcome.is_ok() && !splits.is_empty() {
        outcome = crate::split::run(global, splits);
    }
    if outcome.is_ok() && !calls.is_empty() {
        outcome = route::run(global, calls);
    }
    outcome
}
