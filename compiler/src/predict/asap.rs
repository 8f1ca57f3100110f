//! Schedules for the model when none is given: the as-soon-as-possible steps of a plan's ops
//! ([`asap`]), until the deadlock simulator's rounds are used.
//!
//! Invariant of a [`Schedule`]: per rank and block, `base` says where its ops' steps start in
//! `steps` and how many there are; an op on a wait cycle has no step.

use crate::dump::transfers;
use crate::plan::Plan;

/// A schedule: a step per op.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// Per rank and block: where its ops start in `steps`, and how many there are.
    base: Vec<Vec<(usize, usize)>>,
    steps: Vec<Option<u32>>,
}

impl Schedule {
    /// The step of op `(rank, block, op)`; `None` for ops that never run (or do not exist).
    pub fn step(&self, rank: u32, block: u32, op: u32) -> Option<u32> {
        let (start, len) = *self.base.get(rank as usize)?.get(block as usize)?;
        if op as usize >= len {
            return None;
        }
        self.steps.get(start + op as usize).copied().flatten()
    }

    /// Number of steps (the last step + 1).
    pub fn len(&self) -> u32 {
        self.steps
            .iter()
            .flatten()
            .map(|&s| s + 1)
            .max()
            .unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Ops that never run: on a dependency cycle or waiting for one.
    pub fn unscheduled(&self) -> usize {
        self.steps.iter().filter(|s| s.is_none()).count()
    }
}

/// The as-soon-as-possible schedule: an op runs one step after the latest of the op before
/// it in its block, its deps, and (for a receiving op) the sending ops it pairs with, one
/// per receive peer of its block (a transfer happens in the sender's step, every transfer of
/// an op of several send peers in the same one; the receiver handles the data in the next).
/// Ops on a wait cycle (a deadlock) get no step.
pub fn asap(plan: &Plan) -> Schedule {
    let mut base = Vec::with_capacity(plan.gpus.len());
    let mut total = 0usize;
    for gpu in &plan.gpus {
        let mut b = Vec::with_capacity(gpu.blocks.len());
        for block in &gpu.blocks {
            b.push((total, block.ops.len()));
            total += block.ops.len();
        }
        base.push(b);
    }
    let index = |r: u32, b: u32, o: u32| -> Option<usize> {
        let (start, len) = *base.get(r as usize)?.get(b as usize)?;
        ((o as usize) < len).then_some(start + o as usize)
    };
    // Predecessor edges, as successor lists for Kahn's algorithm.
    let mut succ: Vec<Vec<usize>> = vec![Vec::new(); total];
    let mut indeg = vec![0u32; total];
    let mut edge = |from: Option<usize>, to: Option<usize>| {
        if let (Some(f), Some(t)) = (from, to) {
            succ[f].push(t);
            indeg[t] += 1;
        }
    };
    for (at, _, op) in crate::dump::ops(plan) {
        let me = index(at.rank, at.block, at.op);
        if at.op > 0 {
            edge(index(at.rank, at.block, at.op - 1), me);
        }
        for d in &op.deps {
            edge(index(at.rank, d.block(), d.op()), me);
        }
    }
    for t in transfers(plan) {
        edge(
            index(t.from.rank, t.from.block, t.from.op),
            index(t.to.rank, t.to.block, t.to.op),
        );
    }
    let mut steps: Vec<Option<u32>> = vec![None; total];
    let mut earliest = vec![0u32; total];
    let mut ready: Vec<usize> = (0..total).filter(|&i| indeg[i] == 0).collect();
    while let Some(i) = ready.pop() {
        steps[i] = Some(earliest[i]);
        for &j in &succ[i] {
            earliest[j] = earliest[j].max(earliest[i].saturating_add(1));
            indeg[j] -= 1;
            if indeg[j] == 0 {
                ready.push(j);
            }
        }
    }
    Schedule { base, steps }
}
