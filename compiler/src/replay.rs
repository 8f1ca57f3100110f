//! Symbolic replay of a plan: runs every rank's blocks on contribution sets (as
//! [`crate::verify`] does for the program) and checks the final buffers against the
//! collective. It proves a plan correct on its own — a lowered plan, a hand-edited JSON plan
//! or an imported MSCCL-IR one — independently of the source it came from.
//!
//! Before replaying, input and output must have the sizes the collective defines, and after
//! it at least one output chunk must have been checked (a plan of chunk factor 0 moves
//! nothing, and would otherwise prove any collective vacuously).
//!
//! Order: blocks run their ops in order; an op waits for its deps and, if it receives, for a
//! message on each of its block's receive connections (connections are unbounded FIFO queues
//! here; bounded slots are [`crate::check`]'s concern). A send puts the same data on every
//! send connection of its block; a reducing receive of a block of several recv peers combines
//! `src (+) m(recv_peer) (+) m(recv_also[0]) (+) ...`, one message from each, in that order.
//! Any order that respects these gives the same result, because conflicting accesses of a
//! rank are ordered by deps or by block order.

use crate::layout::alias;
use crate::plan::{self, OpKind, Plan, PlanError};
use crate::verify::{Contents, Proof, for_each_expected};
use coll_lang::builtins::CollectiveKind;
use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;

/// Replays `plan` with `root` as the root of rooted collectives. Custom collectives carry no
/// postcondition in a plan, so only their reads and reductions are checked.
pub fn replay(plan: &Plan, root: u32) -> Result<Proof, PlanError> {
    let n = u64::from(plan.ranks);
    let k = plan.chunk_factor;
    let kind = plan.collective.0;
    sizes(plan)?;
    let chunks: Vec<u64> = plan.buffers.iter().map(|b| b.chunks).collect();
    let phys = |rank: u64, b: u32, i: u64| {
        let (pb, pi) = alias(kind, plan.inplace, k, b as usize, rank, i);
        (pb, pi)
    };
    // cells[rank][buffer][chunk]
    let mut cells: Vec<Vec<Vec<Option<Contents>>>> = (0..n)
        .map(|_| chunks.iter().map(|&c| vec![None; c as usize]).collect())
        .collect();
    for r in 0..n {
        for i in 0..chunks[0] {
            let (b, at) = phys(r, 0, i);
            if let Some(cell) = cells[r as usize]
                .get_mut(b)
                .and_then(|v| v.get_mut(at as usize))
            {
                *cell = Some(Contents::single(i * n + r));
            }
        }
    }
    let mut queues: HashMap<(u32, u32, u32), VecDeque<Vec<Contents>>> = HashMap::default();
    let mut done: Vec<Vec<usize>> = plan.gpus.iter().map(|g| vec![0; g.blocks.len()]).collect();
    let total = plan.op_count();
    let mut finished = 0usize;
    let err = |r: u32, b: u32, i: usize, what: String| PlanError::Invalid {
        at: plan::location(plan, r, b, Some(i as u32)),
        what,
    };
    // In-place aliasing can move a chunk past the end of a buffer declared too small.
    let outside = |r: u32, b: u32, i: usize, buffer: u32, chunk: u64| {
        err(
            r,
            b,
            i,
            format!(
                "chunk {chunk} of `{}` lies outside its buffer once input and output are aliased in place",
                plan.buffers
                    .get(buffer as usize)
                    .map_or("?", |d| d.name.as_str())
            ),
        )
    };
    loop {
        let mut progress = false;
        for (r, gpu) in plan.gpus.iter().enumerate() {
            for (b, block) in gpu.blocks.iter().enumerate() {
                while let Some(op) = block.ops.get(done[r][b]) {
                    let i = done[r][b];
                    let ready = op.deps.iter().all(|d| {
                        done[r]
                            .get(d.block() as usize)
                            .is_some_and(|&x| x > d.op() as usize)
                    });
                    let inbox = |p: u32| (p, r as u32, block.channel);
                    // A receive needs a message on every receive connection of its block.
                    let arrived = block.recv_peer.is_some()
                        && block
                            .recv_peers()
                            .all(|p| queues.get(&inbox(p)).is_some_and(|q| !q.is_empty()));
                    if !ready || (op.kind.receives() && !arrived) {
                        break;
                    }
                    let (r32, b32) = (r as u32, b as u32);
                    let read = |cells: &Vec<Vec<Vec<Option<Contents>>>>, s: plan::Slice, o: u64| {
                        let (pb, pi) = phys(r as u64, s.buffer(), s.offset() + o);
                        let Some(cell) = cells[r].get(pb).and_then(|c| c.get(pi as usize)) else {
                            return Err(outside(r32, b32, i, s.buffer(), s.offset() + o));
                        };
                        cell.clone().ok_or_else(|| {
                            err(
                                r32,
                                b32,
                                i,
                                format!(
                                    "reads {}[{}] before anything was written to it",
                                    plan.buffers[s.buffer() as usize].name,
                                    s.offset() + o
                                ),
                            )
                        })
                    };
                    // One message per receive peer, in the order they combine.
                    let received: Vec<Vec<Contents>> = if op.kind.receives() {
                        block
                            .recv_peers()
                            .filter_map(|p| queues.get_mut(&inbox(p)).and_then(VecDeque::pop_front))
                            .collect()
                    } else {
                        Vec::new()
                    };
                    if received.len() > 1 && !op.kind.reduces() {
                        return Err(err(
                            r32,
                            b32,
                            i,
                            format!(
                                "{} takes {} messages but does not combine them",
                                op.kind.long_name(),
                                received.len()
                            ),
                        ));
                    }
                    let short = || err(r32, b32, i, "message shorter than the receive".into());
                    let combine = |a: &Contents, b: &Contents| {
                        a.union_disjoint(b).map_err(|key| {
                            err(
                                r32,
                                b32,
                                i,
                                format!(
                                    "contribution input[{}][{}] would be combined twice",
                                    key % n,
                                    key / n
                                ),
                            )
                        })
                    };
                    let mut out: Vec<Contents> = Vec::with_capacity(op.count as usize);
                    for o in 0..u64::from(op.count) {
                        let msg = |m: &Vec<Contents>| m.get(o as usize).cloned();
                        let value = match op.kind {
                            OpKind::Send => read(
                                &cells,
                                op.src
                                    .ok_or_else(|| err(r32, b32, i, "send without src".into()))?,
                                o,
                            )?,
                            OpKind::Recv | OpKind::RecvCopySend => {
                                received.first().and_then(msg).ok_or_else(short)?
                            }
                            OpKind::Copy | OpKind::CopySend => read(
                                &cells,
                                op.src
                                    .ok_or_else(|| err(r32, b32, i, "copy without src".into()))?,
                                o,
                            )?,
                            OpKind::RecvReduceCopy
                            | OpKind::RecvReduceSend
                            | OpKind::RecvReduceCopySend
                            | OpKind::Reduce => {
                                let local = read(
                                    &cells,
                                    op.src.or(op.dst).ok_or_else(|| {
                                        err(r32, b32, i, "reduce without src".into())
                                    })?,
                                    o,
                                )?;
                                if op.kind == OpKind::Reduce {
                                    let d = op.dst.ok_or_else(|| {
                                        err(r32, b32, i, "reduce without dst".into())
                                    })?;
                                    combine(&local, &read(&cells, d, o)?)?
                                } else {
                                    // src (+) m(recv_peer) (+) m(recv_also[0]) (+) ...
                                    if received.is_empty() {
                                        return Err(short());
                                    }
                                    let mut acc = local;
                                    for m in &received {
                                        acc = combine(&acc, &msg(m).ok_or_else(short)?)?;
                                    }
                                    acc
                                }
                            }
                        };
                        out.push(value);
                    }
                    if let Some(d) = op.dst.filter(|_| op.kind.needs_dst()) {
                        for (o, v) in out.iter().enumerate() {
                            let at = d.offset() + o as u64;
                            let (pb, pi) = phys(r as u64, d.buffer(), at);
                            let Some(cell) =
                                cells[r].get_mut(pb).and_then(|c| c.get_mut(pi as usize))
                            else {
                                return Err(outside(r32, b32, i, d.buffer(), at));
                            };
                            *cell = Some(v.clone());
                        }
                    }
                    if op.kind.sends() {
                        if block.send_peer.is_none() {
                            return Err(err(r32, b32, i, "sends without a send peer".into()));
                        }
                        // The same data on every send connection (moved to the last).
                        let mut peers = block.send_peers().peekable();
                        while let Some(q) = peers.next() {
                            let data = if peers.peek().is_some() {
                                out.clone()
                            } else {
                                std::mem::take(&mut out)
                            };
                            queues
                                .entry((r32, q, block.channel))
                                .or_default()
                                .push_back(data);
                        }
                    }
                    done[r][b] += 1;
                    finished += 1;
                    progress = true;
                }
            }
        }
        if finished == total {
            break;
        }
        if !progress {
            let stuck = plan
                .gpus
                .iter()
                .enumerate()
                .find_map(|(r, g)| {
                    g.blocks
                        .iter()
                        .enumerate()
                        .find(|(b, bl)| done[r][*b] < bl.ops.len())
                        .map(|(b, _)| (r, b))
                })
                .unwrap_or((0, 0));
            return Err(err(
                stuck.0 as u32,
                stuck.1 as u32,
                done[stuck.0][stuck.1],
                "can never run: it waits for a message or a dependency that never comes".into(),
            ));
        }
    }
    // The postcondition.
    let mut checked = 0u64;
    let mut first: Option<PlanError> = None;
    for_each_expected(kind, n, k, u64::from(root), |r, i, lo, hi| {
        checked += 1;
        let (pb, pi) = phys(r, 1, i);
        // A chunk outside the (aliased) buffer holds nothing: the plan's buffers are smaller
        // than the collective needs.
        let cell = cells[r as usize]
            .get(pb)
            .and_then(|c| c.get(pi as usize))
            .and_then(Option::as_ref);
        let ok = cell.is_some_and(|c| c.is_interval(lo, hi));
        if !ok && first.is_none() {
            let have = cell.map_or_else(|| "nothing".to_string(), |c| c.describe(n));
            first = Some(PlanError::Invalid {
                at: format!("rank {r}"),
                what: format!(
                    "output[{i}] does not hold the {} result: expected {}, found {have}",
                    kind.name(),
                    Contents::interval(lo, hi).describe(n)
                ),
            });
        }
    });
    if checked == 0 && kind != CollectiveKind::Custom {
        // A postcondition over no chunk holds vacuously; an executor would move nothing.
        return Err(PlanError::Invalid {
            at: format!("plan `{}`", plan.name),
            what: format!(
                "checks no output chunk (chunk factor {k}), so it computes no {} at all",
                kind.name()
            ),
        });
    }
    match first {
        Some(e) => Err(e),
        None => Ok(Proof {
            ops: total,
            chunks_checked: checked,
        }),
    }
}

/// Input and output must hold the chunks the collective defines for the plan's rank count
/// and chunk factor (as lowering declares them); a larger buffer would make an executor
/// allocate and move memory the collective does not have.
fn sizes(plan: &Plan) -> Result<(), PlanError> {
    let kind = plan.collective.0;
    if kind == CollectiveKind::Custom {
        return Ok(());
    }
    let (input, output) = kind.buffer_chunks(u64::from(plan.ranks), plan.chunk_factor);
    for (b, want) in [input, output].into_iter().enumerate() {
        let Some(buf) = plan.buffers.get(b) else {
            continue;
        };
        if buf.chunks != want {
            return Err(PlanError::Invalid {
                at: format!("buffer `{}`", buf.name),
                what: format!(
                    "has {} chunks per rank, but {} on {} ranks with chunk factor {} needs {want}",
                    buf.chunks,
                    kind.name(),
                    plan.ranks,
                    plan.chunk_factor
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::testing::Builder;
    use crate::plan::Slice;

    /// Buffers of another size than the collective needs give an error naming the buffer,
    /// never a panic (found by the plan mutation property test).
    #[test]
    fn buffers_of_the_wrong_size_are_errors() {
        // An allreduce whose chunk factor says 8 chunks but whose buffers hold 4.
        let mut b = Builder::new(2);
        b.chunk_factor(8);
        let plan = b.build();
        let e = replay(&plan, 0).expect_err("input too small");
        assert_eq!(
            e.to_string(),
            "buffer `input`: has 4 chunks per rank, but allreduce on 2 ranks with chunk factor \
             8 needs 8"
        );
        // An in-place allgather whose output is too small for rank 1's input slice.
        let mut b = Builder::new(2);
        b.chunk_factor(4);
        let blk = b.block(1, 0, None, None);
        b.op_with(
            1,
            blk,
            OpKind::Copy,
            Some(Slice(0, 0)),
            Some(Slice(1, 0)),
            1,
            &[],
        );
        let mut plan = b.build();
        plan.collective = crate::plan::Collective(CollectiveKind::AllGather);
        plan.inplace = true;
        let e = replay(&plan, 0).expect_err("output too small");
        assert_eq!(
            e.to_string(),
            "buffer `output`: has 4 chunks per rank, but allgather on 2 ranks with chunk factor \
             4 needs 8"
        );
        // An oversized input: the executor would allocate what the collective does not have.
        let mut b = Builder::new(4);
        b.chunk_factor(4);
        let mut plan = b.build();
        plan.buffers[0].chunks = 4000;
        let e = replay(&plan, 0).expect_err("input too large");
        assert!(
            e.to_string().starts_with("buffer `input`: has 4000 chunks"),
            "{e}"
        );
    }

    /// A plan of chunk factor 0 and no ops has nothing to check: it is not a proof.
    #[test]
    fn a_plan_that_checks_nothing_is_an_error() {
        let mut b = Builder::new(2);
        b.chunk_factor(0);
        let mut plan = b.build();
        plan.buffers[0].chunks = 0;
        plan.buffers[1].chunks = 0;
        let e = replay(&plan, 0).expect_err("nothing checked");
        assert_eq!(
            e.to_string(),
            "plan `test`: checks no output chunk (chunk factor 0), so it computes no allreduce \
             at all"
        );
    }

    /// The head of three (tests/inputs/plans): rank 0 combines one message from each leaf
    /// and sends the sum to both.
    fn head_of_three() -> Plan {
        let path = format!(
            "{}/../tests/inputs/plans/ok_head_several_peers_3.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        crate::plan::ValidPlan::from_json(&text)
            .map(crate::plan::ValidPlan::into_inner)
            .unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn a_block_of_several_peers_combines_and_sends_to_every_peer() {
        let proof = replay(&head_of_three(), 0).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(proof.ops, 5);
        // Without rank 2's message the head's sum lacks rank 2's contribution.
        let mut plan = head_of_three();
        plan.gpus[0].blocks[0].recv_also.clear();
        plan.gpus[2].blocks[0].ops.remove(0);
        let e = replay(&plan, 0).expect_err("rank 2 not combined");
        assert!(
            e.to_string()
                .starts_with("rank 0: output[0] does not hold the allreduce result"),
            "{e}"
        );
        // Without the send to rank 2, rank 2 keeps its own contribution only.
        let mut plan = head_of_three();
        plan.gpus[0].blocks[0].send_also.clear();
        plan.gpus[2].blocks[0].ops.truncate(1);
        let e = replay(&plan, 0).expect_err("rank 2 gets no sum");
        assert!(
            e.to_string()
                .starts_with("rank 2: output[0] does not hold the allreduce result"),
            "{e}"
        );
    }
}
