//! One rank of a CPU run ([`Rank`]): its buffers, and the loop that runs the head op of each
//! of its blocks once its deps, messages and room are there (the invariants are `mod.rs`'s).

use super::RunOptions;
use super::world::World;
use crate::dtype::{Element, ReduceOp, reduce_into};
use crate::error::ExecError;
use coll_compiler::layout::alias;
use coll_compiler::plan::{self, Block, OpKind, Plan, Slice};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// `acc[i] = first[i] (op) acc[i]`: [`reduce_into`] with the operands the other way round, so
/// that a receive combines `src (+) m` in the documented order, not `m (+) src` (the same for
/// most values, but not for every float: `min` and `max` of `-0.0` and `0.0`, NaNs).
pub(super) fn reduce_after<T: Element>(op: ReduceOp, first: &[T], acc: &mut [T]) {
    let pairs = acc.iter_mut().zip(first);
    match op.combine() {
        ReduceOp::Sum | ReduceOp::Avg => pairs.for_each(|(a, f)| *a = f.add(*a)),
        ReduceOp::Prod => pairs.for_each(|(a, f)| *a = f.mul(*a)),
        ReduceOp::Min => pairs.for_each(|(a, f)| *a = f.min_of(*a)),
        ReduceOp::Max => pairs.for_each(|(a, f)| *a = f.max_of(*a)),
    }
}

/// One rank's state while running.
pub(super) struct Rank<'a, T> {
    pub(super) plan: &'a Plan,
    /// The rank position this thread plays in the plan.
    pub(super) rank: u32,
    pub(super) o: &'a RunOptions,
    /// Physical buffers (aliasing resolved), in elements.
    pub(super) bufs: Vec<Vec<T>>,
    /// Ops done per block.
    pub(super) done: Vec<usize>,
}

impl<'a, T: Element> Rank<'a, T> {
    pub(super) fn new(plan: &'a Plan, rank: u32, o: &'a RunOptions, input: &[T]) -> Self {
        let count = o.count;
        let mut bufs: Vec<Vec<T>> = (0..plan.buffers.len())
            .map(|b| vec![T::zero(); plan.buffer_elements(b, count) as usize])
            .collect();
        // The user's input goes where the plan expects it (aliasing included).
        let k = plan.chunk_factor;
        let in_chunks = plan.buffers.first().map_or(0, |b| b.chunks);
        let kind = plan.collective.0;
        for j in 0..in_chunks {
            let (pb, pc) = alias(kind, plan.inplace, k, 0, u64::from(rank), j);
            let from = plan.elements(count, j, 1);
            let to = plan.elements(count, pc, 1);
            if let (Some(src), Some(dst)) = (
                input.get(from.start as usize..from.end as usize),
                bufs.get_mut(pb)
                    .and_then(|b| b.get_mut(to.start as usize..to.end as usize)),
            ) && src.len() == dst.len()
            {
                dst.copy_from_slice(src);
            }
        }
        Rank {
            plan,
            rank,
            o,
            bufs,
            done: vec![0; plan.gpus.get(rank as usize).map_or(0, |g| g.blocks.len())],
        }
    }

    /// The output buffer (read through aliasing).
    pub(super) fn output(&self) -> Vec<T> {
        let plan = self.plan;
        let count = self.o.count;
        let out_chunks = plan.buffers.get(1).map_or(0, |b| b.chunks);
        let mut out = vec![T::zero(); plan.buffer_elements(1, count) as usize];
        for i in 0..out_chunks {
            let (pb, pc) = alias(
                plan.collective.0,
                plan.inplace,
                plan.chunk_factor,
                1,
                u64::from(self.rank),
                i,
            );
            let from = plan.elements(count, pc, 1);
            let to = plan.elements(count, i, 1);
            if let (Some(src), Some(dst)) = (
                self.bufs
                    .get(pb)
                    .and_then(|b| b.get(from.start as usize..from.end as usize)),
                out.get_mut(to.start as usize..to.end as usize),
            ) && src.len() == dst.len()
            {
                dst.copy_from_slice(src);
            }
        }
        out
    }

    /// Physical buffer and element range of `count` plan chunks at `s`.
    pub(super) fn range(&self, s: Slice, chunks: u32) -> (usize, Range<usize>) {
        let p = self.plan;
        let (pb, pc) = alias(
            p.collective.0,
            p.inplace,
            p.chunk_factor,
            s.buffer() as usize,
            u64::from(self.rank),
            s.offset(),
        );
        let r = p.elements(self.o.count, pc, u64::from(chunks));
        (pb, r.start as usize..r.end as usize)
    }

    pub(super) fn read(&self, s: Slice, chunks: u32) -> &[T] {
        let (b, r) = self.range(s, chunks);
        self.bufs.get(b).and_then(|x| x.get(r)).unwrap_or(&[])
    }

    pub(super) fn write(&mut self, s: Slice, chunks: u32) -> &mut [T] {
        let (b, r) = self.range(s, chunks);
        self.bufs
            .get_mut(b)
            .and_then(|x| x.get_mut(r))
            .unwrap_or(&mut [])
    }

    pub(super) fn at(&self, b: usize, i: usize) -> String {
        plan::location(self.plan, self.rank, b as u32, Some(i as u32))
    }

    pub(super) fn size_error(&self, b: usize, i: usize, src: usize, dst: usize) -> ExecError {
        ExecError::ChunkSize {
            at: self.at(b, i),
            src: src as u64,
            dst: dst as u64,
            count: self.o.count,
        }
    }

    pub(super) fn run(&mut self, world: &World<T>, abort: &AtomicBool) -> Result<(), ExecError> {
        let plan = self.plan;
        let Some(gpu) = plan.gpus.get(self.rank as usize) else {
            return Ok(());
        };
        let Some(me) = world.signals.get(self.rank as usize) else {
            return Ok(());
        };
        let mut last_progress = Instant::now();
        loop {
            let seen = me.generation();
            let mut progressed = false;
            let mut finished = true;
            for (b, block) in gpu.blocks.iter().enumerate() {
                while self.step(b, block, world)? {
                    progressed = true;
                }
                finished &= self.done[b] == block.ops.len();
            }
            if finished {
                return Ok(());
            }
            if abort.load(Ordering::Acquire) {
                return Ok(());
            }
            if progressed {
                last_progress = Instant::now();
                continue;
            }
            if let Some(f) = world.failure() {
                let (at, waiting) = self.blocked(gpu, world);
                return Err(ExecError::Peer {
                    at,
                    waiting,
                    reason: f.describe(world.net.as_ref().map(|n| &n.place)),
                });
            }
            let waited = last_progress.elapsed();
            if waited >= self.o.timeout {
                let (at, waiting) = self.blocked(gpu, world);
                return Err(ExecError::Timeout {
                    at,
                    waiting,
                    waited,
                });
            }
            me.wait_past(seen, self.o.timeout - waited, || {
                abort.load(Ordering::Acquire)
            });
        }
    }

    /// The first blocked op (`rank r, block b, op i (file:line:col)`) and what it waits for:
    /// of several peers, the first whose message has not arrived or whose connection is full.
    pub(super) fn blocked(&self, gpu: &plan::RankPlan, world: &World<T>) -> (String, String) {
        let me = self.rank;
        for (b, block) in gpu.blocks.iter().enumerate() {
            let i = self.done[b];
            let Some(op) = block.ops.get(i) else { continue };
            let waiting = if let Some(d) = op.deps.iter().find(|d| {
                self.done
                    .get(d.block() as usize)
                    .is_none_or(|&x| x <= d.op() as usize)
            }) {
                format!("waiting for block {} op {}", d.block(), d.op())
            } else {
                // A missing message first, then a full connection: of several peers, the one
                // the op waits for.
                let c = block.channel;
                let missing = block
                    .recv_peers()
                    .find(|&p| op.kind.receives() && !world.arrived((p, me, c)));
                let full = block
                    .send_peers()
                    .find(|&q| op.kind.sends() && !world.room((me, q, c)));
                match (missing, full) {
                    (Some(p), _) => format!("waiting to receive from rank {p} on channel {c}"),
                    (None, Some(q)) => {
                        format!("waiting for room to send to rank {q} on channel {c}")
                    }
                    // Ready now (a peer moved since the rank last looked): its first peer.
                    (None, None) if op.kind.receives() => format!(
                        "waiting to receive from rank {} on channel {c}",
                        block.recv_peer.unwrap_or(0)
                    ),
                    (None, None) => format!(
                        "waiting for room to send to rank {} on channel {c}",
                        block.send_peer.unwrap_or(0)
                    ),
                }
            };
            return (self.at(b, i), waiting);
        }
        (format!("rank {}", self.rank), "with no blocked op".into())
    }

    /// Runs the head op of block `b` if it can; returns whether it did.
    pub(super) fn step(
        &mut self,
        b: usize,
        block: &Block,
        world: &World<T>,
    ) -> Result<bool, ExecError> {
        let i = self.done[b];
        let Some(op) = block.ops.get(i) else {
            return Ok(false);
        };
        if !op.deps.iter().all(|d| {
            self.done
                .get(d.block() as usize)
                .is_some_and(|&x| x > d.op() as usize)
        }) {
            return Ok(false);
        }
        let me = self.rank;
        let c = block.channel;
        // All or nothing: the op runs only when every send connection has room and every
        // receive connection has a message, so no message is taken by an op that then waits.
        if op.kind.sends()
            && (block.send_peer.is_none() || !block.send_peers().all(|q| world.room((me, q, c))))
        {
            return Ok(false);
        }
        let messages: Vec<Vec<T>> = if op.kind.receives() {
            if block.recv_peer.is_none() || !block.recv_peers().all(|p| world.arrived((p, me, c))) {
                return Ok(false);
            }
            let mut ms = Vec::with_capacity(1 + block.recv_also.len());
            for p in block.recv_peers() {
                // Only this thread takes from the connection, so what arrived is still there.
                let m = world.take((p, me, c)).ok_or_else(|| ExecError::Worker {
                    rank: me,
                    what: format!(
                        "{}: a message from rank {p} on channel {c} vanished before it was taken",
                        self.at(b, i)
                    ),
                })?;
                ms.push(m);
            }
            ms
        } else {
            Vec::new()
        };
        let combine = self.o.op;
        let n = op.count;
        let mut messages = messages.into_iter();
        let to_send: Option<Vec<T>> = match (op.kind, messages.next()) {
            (OpKind::Send, _) => Some(op.src.map(|s| self.read(s, n).to_vec()).unwrap_or_default()),
            // A copying receive has one recv peer (validation refuses several).
            (OpKind::Recv | OpKind::RecvCopySend, Some(msg)) => {
                if let Some(d) = op.dst {
                    let dst = self.write(d, n);
                    if dst.len() != msg.len() {
                        let len = dst.len();
                        return Err(self.size_error(b, i, msg.len(), len));
                    }
                    dst.copy_from_slice(&msg);
                }
                (op.kind == OpKind::RecvCopySend).then_some(msg)
            }
            (
                OpKind::RecvReduceCopy | OpKind::RecvReduceSend | OpKind::RecvReduceCopySend,
                Some(first),
            ) => {
                // `src (+) m(recv_peer) (+) m(recv_also[0]) (+) ...`, left to right: the
                // documented order, which fixes the rounding of floating-point results. The
                // first message's buffer holds the running result (no copy of `src`).
                let mut msg = first;
                let src = op.src.map(|s| self.read(s, n)).unwrap_or(&[]);
                if src.len() != msg.len() {
                    return Err(self.size_error(b, i, msg.len(), src.len()));
                }
                reduce_after(combine, src, &mut msg);
                for m in messages {
                    if m.len() != msg.len() {
                        return Err(self.size_error(b, i, m.len(), msg.len()));
                    }
                    reduce_into(combine, &mut msg, &m);
                }
                if let Some(d) = op.dst.filter(|_| op.kind.needs_dst()) {
                    let dst = self.write(d, n);
                    if dst.len() != msg.len() {
                        let len = dst.len();
                        return Err(self.size_error(b, i, msg.len(), len));
                    }
                    dst.copy_from_slice(&msg);
                }
                op.kind.sends().then_some(msg)
            }
            (OpKind::Copy | OpKind::Reduce | OpKind::CopySend, _) => {
                let (Some(s), Some(d)) = (op.src, op.dst) else {
                    return Ok(false);
                };
                let src = self.read(s, n).to_vec();
                let dst = self.write(d, n);
                if dst.len() != src.len() {
                    let len = dst.len();
                    return Err(self.size_error(b, i, src.len(), len));
                }
                if op.kind == OpKind::Reduce {
                    reduce_into(combine, dst, &src);
                } else {
                    dst.copy_from_slice(&src);
                }
                // A copy-send sends what it copied.
                (op.kind == OpKind::CopySend).then_some(src)
            }
            // Receiving kinds always have a message here.
            (_, None) => return Ok(false),
        };
        // The same message on every send connection: copies to the further peers, the
        // message itself to the first.
        if let (Some(msg), Some(q)) = (to_send, block.send_peer) {
            for &also in &block.send_also {
                world.put((me, also, c), msg.clone());
            }
            world.put((me, q, c), msg);
        }
        self.done[b] += 1;
        Ok(true)
    }
}
