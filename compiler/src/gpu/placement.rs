//! How one call's buffers become the plan's `input` and `output`, whatever placement the plan
//! was written for.
//!
//! A call passes, per rank, NCCL's (send, recv) pointers; it is in place when they follow
//! NCCL's in-place layout ([`in_place_layout`]). A plan is written either in place or out of
//! place, and a call of the other placement is adapted with copies ordered with the call (on
//! a GPU, stream-ordered device-to-device copies), never with host work:
//! - in-place plan, out-of-place call: the send data is copied to where the plan expects it
//!   (inside `recv`, or a staging buffer when `recv` cannot hold the plan's buffer), the plan
//!   runs in place there, and a staged result is copied into `recv`;
//! - out-of-place plan, in-place call: the plan runs on the aliased pointers directly when
//!   [`in_place_safe`] proves that aliasing cannot change its result; otherwise the send data
//!   is first copied to a staging buffer the plan reads instead.
//!
//! Invariant: the staging a plan may need is known before any call ([`staging_elems`]), so an
//! executor allocates it with everything else when the plan is loaded. Addresses are numbers
//! in the caller's address space, only compared and offset here.

use crate::layout::{InPlaceLayout, alias, in_place_layout};
use crate::plan::{OpKind, Plan, RankPlan, Slice};
use std::collections::HashMap;

/// Why a call cannot be placed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// The call's placement differs from the plan's in a way only staging can bridge.
    #[error(
        "rank {rank}: an {} call of this {} plan needs staging, and the plan was loaded without it",
        placement_name(*call_in_place),
        placement_name(*plan_in_place)
    )]
    NoStaging {
        rank: u32,
        call_in_place: bool,
        plan_in_place: bool,
    },
}

fn placement_name(in_place: bool) -> &'static str {
    if in_place { "in-place" } else { "out-of-place" }
}

/// A stream-ordered copy of `bytes` from address `src` to `dst`, made before or after the
/// plan runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallCopy {
    pub dst: u64,
    pub src: u64,
    pub bytes: u64,
}

/// What one rank does in one call: copies before the plan runs, the base addresses of the
/// `input` and `output` it runs on, copies after it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RankCall {
    pub before: Option<CallCopy>,
    pub input: u64,
    pub output: u64,
    pub after: Option<CallCopy>,
}

/// The sizes a call of `count` resolves to, in elements of `esize` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallShape {
    pub count: u64,
    pub esize: u64,
    pub in_elems: u64,
    pub out_elems: u64,
}

/// NCCL's in-place layout for rank `rank` of a call of `shape`.
fn layout(plan: &Plan, rank: u32, shape: &CallShape) -> InPlaceLayout {
    in_place_layout(
        plan.collective.0,
        rank,
        shape.count,
        shape.in_elems,
        shape.out_elems,
    )
}

/// Whether (send, recv) of rank `rank` follow NCCL's in-place layout.
pub fn is_in_place(plan: &Plan, rank: u32, shape: &CallShape, send: u64, recv: u64) -> bool {
    follows(&layout(plan, rank, shape), shape.esize, send, recv)
}

/// Whether (send, recv) sit as `lay` puts input and output in one buffer.
fn follows(lay: &InPlaceLayout, esize: u64, send: u64, recv: u64) -> bool {
    // send - input_at == recv - output_at, without underflow.
    send.wrapping_add(lay.output_at * esize) == recv.wrapping_add(lay.input_at * esize)
}

/// Whether an in-place plan can keep its one buffer inside `recv` for an out-of-place call:
/// the buffer is exactly the output (allgather, allreduce, broadcast, ...). Otherwise
/// (reducescatter, whose buffer is the larger input) it needs staging.
fn fits_recv(plan: &Plan, count: u64) -> bool {
    let (i, o) = (
        plan.buffer_elements(0, count),
        plan.buffer_elements(1, count),
    );
    let lay = in_place_layout(plan.collective.0, 0, count, i, o);
    lay.output_at == 0 && lay.len <= o
}

/// Staging elements per rank the plan needs at `count` so that calls of both placements run
/// (0 when none): see the module docs.
pub fn staging_elems(plan: &Plan, count: u64, safe: bool) -> u64 {
    let (i, o) = (
        plan.buffer_elements(0, count),
        plan.buffer_elements(1, count),
    );
    if plan.inplace {
        if fits_recv(plan, count) {
            0
        } else {
            in_place_layout(plan.collective.0, 0, count, i, o).len
        }
    } else if safe {
        0
    } else {
        i
    }
}

/// Resolves rank `rank`'s (send, recv) for one call. `safe` is [`in_place_safe`] of the plan;
/// `staging` the rank's staging buffer, when the plan was loaded with one.
pub fn rank_call(
    plan: &Plan,
    rank: u32,
    shape: &CallShape,
    (send, recv): (u64, u64),
    safe: bool,
    staging: Option<u64>,
) -> Result<RankCall, PlacementError> {
    let es = shape.esize;
    let lay = layout(plan, rank, shape);
    let inplace_call = follows(&lay, es, send, recv);
    let copy = |dst: u64, src: u64, elems: u64| {
        (elems > 0 && dst != src).then_some(CallCopy {
            dst,
            src,
            bytes: elems * es,
        })
    };
    let need_staging = || {
        staging.ok_or(PlacementError::NoStaging {
            rank,
            call_in_place: inplace_call,
            plan_in_place: plan.inplace,
        })
    };
    Ok(match (plan.inplace, inplace_call) {
        // The call matches the plan, or aliasing is proven harmless.
        (true, true) | (false, false) => RankCall {
            input: send,
            output: recv,
            ..RankCall::default()
        },
        (false, true) if safe => RankCall {
            input: send,
            output: recv,
            ..RankCall::default()
        },
        // The plan reads a copy of the input, so its writes to the aliased output cannot
        // disturb what it still has to read.
        (false, true) => {
            let s = need_staging()?;
            RankCall {
                before: copy(s, send, shape.in_elems),
                input: s,
                output: recv,
                after: None,
            }
        }
        (true, false) if fits_recv(plan, shape.count) => {
            let at = recv + lay.input_at * es;
            RankCall {
                before: copy(at, send, shape.in_elems),
                input: at,
                output: recv + lay.output_at * es,
                after: None,
            }
        }
        (true, false) => {
            let s = need_staging()?;
            let out = s + lay.output_at * es;
            RankCall {
                before: copy(s + lay.input_at * es, send, shape.in_elems),
                input: s + lay.input_at * es,
                output: out,
                after: copy(recv, out, shape.out_elems),
            }
        }
    })
}

/// Whether an out-of-place plan computes the same result when its input and output alias as
/// in NCCL's in-place layout, so an in-place call can run it without staging.
///
/// Every op reads and writes only its own rank's buffers (data between ranks goes through
/// staging slots), so a hazard is local to a rank: an access through `input` and a write
/// through `output` that land on the same physical chunk. The plan is safe when, for every
/// such pair, the input access happens before the output write by block order or
/// dependencies (conservatively ignoring orderings through other ranks), or both are the
/// same op touching the same element positions (each element is read before it is written
/// by the same thread), and nothing is ever written through `input` where `output` lands.
/// A copy that aliasing turns into a copy onto itself (as the input copies of an in-place
/// program compiled out of place) writes nothing a reader could tell apart; writes through
/// `output` are ordered among themselves by the plan in either placement.
/// Slices of different iterations are disjoint, so the per-iteration order is enough.
pub fn in_place_safe(plan: &Plan) -> bool {
    if plan.inplace {
        return true;
    }
    let kind = plan.collective.0;
    let k = plan.chunk_factor;
    for (r, rp) in plan.gpus.iter().enumerate() {
        let r = r as u64;
        // Physical chunk -> accesses.
        let mut at: HashMap<(usize, u64), Vec<Access>> = HashMap::new();
        for b in &rp.blocks {
            for (oi, op) in b.ops.iter().enumerate() {
                let phys = |s: Slice, c: u32| {
                    alias(
                        kind,
                        true,
                        k,
                        s.buffer() as usize,
                        r,
                        s.offset() + u64::from(c),
                    )
                };
                let mut touch = |s: Slice, write: bool| {
                    let buf = s.buffer() as usize;
                    if buf > 1 {
                        return;
                    }
                    for c in 0..op.count {
                        let ph = phys(s, c);
                        // A copy onto the same place in an in-place call stores the values
                        // that are already there: no reader can see a difference.
                        let onto_itself = write
                            && matches!(op.kind, OpKind::Copy | OpKind::CopySend)
                            && op.src.is_some_and(|from| phys(from, c) == ph);
                        if onto_itself {
                            continue;
                        }
                        at.entry(ph).or_default().push(Access {
                            block: b.id,
                            op: oi as u32,
                            via_input: buf == 0,
                            write,
                            chunk: c,
                            // A reduce reads its destination: through `output` it expects
                            // the output's value, which aliasing would replace.
                            reads_dst: op.kind == OpKind::Reduce,
                        });
                    }
                };
                if op.kind.needs_src()
                    && let Some(s) = op.src
                {
                    touch(s, false);
                }
                if op.kind.needs_dst()
                    && let Some(d) = op.dst
                {
                    touch(d, true);
                }
            }
        }
        let before = happens_before(rp);
        for list in at.values() {
            let touched_by_output = list.iter().any(|a| !a.via_input);
            for a in list.iter().filter(|a| a.via_input) {
                if a.write && touched_by_output {
                    return false;
                }
                for w in list.iter().filter(|w| !w.via_input && w.write) {
                    let same =
                        a.block == w.block && a.op == w.op && a.chunk == w.chunk && !w.reads_dst;
                    if !same && !before(a.block, a.op, w.block, w.op) {
                        return false;
                    }
                }
            }
        }
    }
    true
}

/// One access of a rank's op to a physical chunk.
struct Access {
    block: u32,
    op: u32,
    via_input: bool,
    write: bool,
    /// Which chunk of the op (ops move `count` consecutive chunks).
    chunk: u32,
    reads_dst: bool,
}

/// The happens-before relation of one rank's ops from block order and dependencies:
/// `f(b1, o1, b2, o2)` is whether op o1 of block b1 finishes before op o2 of block b2 starts.
pub fn happens_before(rp: &RankPlan) -> impl Fn(u32, u32, u32, u32) -> bool + use<'_> {
    // Index every op; edges: next op of the same block, and dep -> op.
    let mut index: HashMap<(u32, u32), usize> = HashMap::new();
    for b in &rp.blocks {
        for oi in 0..b.ops.len() {
            let i = index.len();
            index.insert((b.id, oi as u32), i);
        }
    }
    let nops = index.len();
    let mut succ: Vec<Vec<usize>> = vec![Vec::new(); nops];
    for b in &rp.blocks {
        for (oi, op) in b.ops.iter().enumerate() {
            let me = index[&(b.id, oi as u32)];
            if oi + 1 < b.ops.len() {
                succ[me].push(index[&(b.id, oi as u32 + 1)]);
            }
            for d in &op.deps {
                if let Some(&from) = index.get(&(d.block(), d.op())) {
                    succ[from].push(me);
                }
            }
        }
    }
    // Reachability from every op (plans are small: ops per rank in the hundreds).
    let reach: Vec<Vec<bool>> = (0..nops)
        .map(|s| {
            let mut seen = vec![false; nops];
            let mut stack = succ[s].clone();
            while let Some(x) = stack.pop() {
                if !seen[x] {
                    seen[x] = true;
                    stack.extend(succ[x].iter().copied());
                }
            }
            seen
        })
        .collect();
    move |b1, o1, b2, o2| match (index.get(&(b1, o1)), index.get(&(b2, o2))) {
        (Some(&a), Some(&b)) => reach[a][b],
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{shipped_files, shipped_plan as plan, try_shipped};
    use super::*;

    fn shape(p: &Plan, count: u64) -> CallShape {
        CallShape {
            count,
            esize: 4,
            in_elems: p.buffer_elements(0, count),
            out_elems: p.buffer_elements(1, count),
        }
    }

    #[test]
    fn happens_before_follows_block_order_and_dependencies() {
        let ring = plan("allreduce_ring.coll", 4);
        let rp = &ring.gpus[0];
        let b = rp.blocks[0].id;
        let before = happens_before(rp);
        assert!(before(b, 0, b, 1) && before(b, 0, b, 5));
        assert!(!before(b, 1, b, 0));
        assert!(!before(b, 0, b, 0), "no op comes before itself");
        assert!(!before(b, 0, b + 100, 0), "unknown ops are unordered");
        // Every dependency orders its op, and so what follows it in the op's block.
        let mut deps = 0;
        for name in shipped_files() {
            let Some(p) = try_shipped(&name, 4, true) else {
                continue;
            };
            for rp in &p.gpus {
                let before = happens_before(rp);
                for blk in &rp.blocks {
                    for (oi, op) in blk.ops.iter().enumerate() {
                        for d in &op.deps {
                            let last = blk.ops.len() as u32 - 1;
                            assert!(before(d.block(), d.op(), blk.id, oi as u32), "{name}");
                            assert!(before(d.block(), d.op(), blk.id, last), "{name}");
                            assert!(!before(blk.id, oi as u32, d.block(), d.op()), "{name}");
                            deps += 1;
                        }
                    }
                }
            }
        }
        assert!(deps > 0);
    }

    #[test]
    fn aliasing_is_proven_harmless_only_where_it_is() {
        // Allgather ring: a rank's own chunk is copied onto itself, the rest touches output
        // only, so an in-place call can run it directly.
        assert!(in_place_safe(&plan("allgather_ring.coll", 4)));
        // Direct all-to-all: rank q receives rank r's chunk into slot r, which is q's own
        // input chunk for r, unordered with the send of that chunk.
        assert!(!in_place_safe(&plan("alltoall.coll", 4)));
        assert!(in_place_safe(&plan("allreduce_ring.coll", 4)));
        // Reduce-scatter ring: the only write to the output is the last receive-reduce,
        // which reads the aliased input chunk element by element in the same op.
        assert!(in_place_safe(&plan("reducescatter_ring.coll", 4)));
        // Shift: one block sends its chunk (into the peer's staging) before it receives.
        assert!(in_place_safe(&plan("sendrecv.coll", 4)));
    }

    /// In-place algorithms compiled out of place keep the in-place orderings in their
    /// dependencies, so an in-place call runs them without staging.
    #[test]
    fn in_place_algorithms_made_out_of_place_run_in_place_calls_directly() {
        let mut checked = 0;
        for name in shipped_files() {
            for n in [2, 3, 4, 8] {
                let Some(p) = try_shipped(&name, n, true) else {
                    continue;
                };
                if !p.inplace && plan(&name, n).inplace {
                    assert!(in_place_safe(&p), "{name} at n = {n}");
                    checked += 1;
                }
            }
        }
        assert!(checked >= 30, "{checked}");
    }

    #[test]
    fn calls_of_the_other_placement_are_adapted_with_copies() {
        let ring = plan("allreduce_ring.coll", 2);
        let s = shape(&ring, 1000);
        // In place: the buffer itself, no copy.
        let c = rank_call(&ring, 1, &s, (0x1000, 0x1000), true, None).expect("ok");
        assert_eq!(
            (c.input, c.output, c.before, c.after),
            (0x1000, 0x1000, None, None)
        );
        // Out of place: send copied into recv, run there.
        let c = rank_call(&ring, 1, &s, (0x1000, 0x9000), true, None).expect("ok");
        assert_eq!(
            c.before,
            Some(CallCopy {
                dst: 0x9000,
                src: 0x1000,
                bytes: 4000
            })
        );
        assert_eq!((c.input, c.output, c.after), (0x9000, 0x9000, None));
        assert_eq!(staging_elems(&ring, 1000, true), 0);

        // Allgather ring (out of place) called in place: rank 1's input is its output slot.
        let ag = plan("allgather_ring.coll", 2);
        let s = shape(&ag, 100);
        let recv = 0x10000;
        let send = recv + 100 * 4;
        assert!(is_in_place(&ag, 1, &s, send, recv));
        let c = rank_call(&ag, 1, &s, (send, recv), true, None).expect("ok");
        assert_eq!((c.input, c.output, c.before), (send, recv, None));

        // All-to-all called in place: staged, and refused without staging.
        let a2a = plan("alltoall.coll", 2);
        let s = shape(&a2a, 100);
        assert_eq!(staging_elems(&a2a, 100, false), 200);
        assert_eq!(
            rank_call(&a2a, 0, &s, (recv, recv), false, None),
            Err(PlacementError::NoStaging {
                rank: 0,
                call_in_place: true,
                plan_in_place: false
            })
        );
        let c = rank_call(&a2a, 0, &s, (recv, recv), false, Some(0x900000)).expect("ok");
        assert_eq!(
            c.before,
            Some(CallCopy {
                dst: 0x900000,
                src: recv,
                bytes: 800
            })
        );
        assert_eq!((c.input, c.output), (0x900000, recv));
    }
}
