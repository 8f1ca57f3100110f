//! One-shot eligibility: whether a plan is a one-shot allreduce, in which every rank sends its
//! whole input, as it stands when the call starts, to every other rank, and nothing else
//! crosses between ranks. An executor may then run small calls of it as one exchange of
//! every rank's input with every other rank and a local combination, in a kernel of its own
//! rather than by interpreting the plan's ops: the data that moves is the plan's, and the
//! result is the allreduce the plan was proved to compute (combined in rank order, the same
//! order on every rank; the plan may combine in another).
//!
//! A plan qualifies when it is an allreduce of at least two ranks; every message's sending
//! op is a `send` (or `copy-send`) from the rank's `input` with no dependencies and no op before it in its
//! block writing `input`; and the messages from each rank to each other rank carry each chunk
//! of its `input` exactly once.

use super::{messages, op_at};
use crate::plan::{OpKind, Plan};
use coll_lang::builtins::CollectiveKind;
use std::collections::HashMap;

/// Whether `plan` is a one-shot allreduce (see the module docs).
pub fn is_oneshot(plan: &Plan) -> bool {
    let n = plan.ranks;
    if plan.collective.0 != CollectiveKind::AllReduce || n < 2 {
        return false;
    }
    let Some(chunks) = plan.buffers.first().map(|b| b.chunks) else {
        return false;
    };
    // Per (sender, receiver): the input chunks its messages carry, each counted.
    let mut carried: HashMap<(u32, u32), Vec<u32>> = HashMap::new();
    for (s, r) in messages(plan) {
        let Some(op) = op_at(plan, s) else {
            return false;
        };
        let Some(src) = op.src.filter(|x| x.buffer() == 0) else {
            return false;
        };
        let sends_input = matches!(op.kind, OpKind::Send | OpKind::CopySend);
        if !sends_input || !op.deps.is_empty() || writes_input_before(plan, s) {
            return false;
        }
        let seen = carried
            .entry((s.0, r.0))
            .or_insert_with(|| vec![0; chunks as usize]);
        for c in src.offset()..src.offset() + u64::from(op.count) {
            match seen.get_mut(c as usize) {
                Some(k) => *k += 1,
                None => return false,
            }
        }
    }
    let pairs = u64::from(n) * u64::from(n - 1);
    carried.len() as u64 == pairs && carried.values().all(|v| v.iter().all(|&k| k == 1))
}

/// Whether an op before op `at` in its block writes the rank's `input`.
fn writes_input_before(plan: &Plan, at: super::direct::OpAt) -> bool {
    let Some(block) = plan
        .gpus
        .get(at.0 as usize)
        .and_then(|rp| rp.blocks.iter().find(|b| b.id == at.1))
    else {
        return true;
    };
    block
        .ops
        .iter()
        .take(at.2 as usize)
        .any(|o| o.kind.needs_dst() && o.dst.is_some_and(|d| d.buffer() == 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::testing::{shipped_files, try_shipped};

    #[test]
    fn the_one_shot_allreduces_qualify_and_nothing_else() {
        for n in [2, 3, 4, 8] {
            for file in shipped_files() {
                for oop in [false, true] {
                    let Some(plan) = try_shipped(&file, n, oop) else {
                        continue;
                    };
                    let want = matches!(
                        file.as_str(),
                        "allreduce_oneshot.coll" | "allreduce_allpairs.coll"
                    );
                    assert_eq!(is_oneshot(&plan), want, "{file} n = {n} out of place {oop}");
                }
            }
        }
    }

    #[test]
    fn a_plan_that_sends_what_it_combined_does_not_qualify() {
        // Ring allreduce at n = 2 sends its input chunks, but a chunk combined at the peer comes
        // back: its second send reads what an earlier op wrote.
        let plan = try_shipped("allreduce_ring.coll", 2, false).expect("compiles");
        assert!(!is_oneshot(&plan));
    }
}
