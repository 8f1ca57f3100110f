//! Enqueueing calls: the checked paths ([`CudaExecutor::enqueue`], [`CudaExecutor::launch`])
//! and the raw one ([`CudaExecutor::enqueue_raw`]) end in one place, which resolves the call
//! (placement, protocol and slicing, direct messages, copy engines) before enqueueing
//! anything and then enqueues every GPU's part at once ([`super::launch_threads`]). Every path
//! returns the call's [`CallInfo`].
//!
//! Invariants: a refused call enqueues nothing (every check and every rank's placement is
//! resolved first); a GPU's part touches only its own stream, its executor's regions and the
//! call's buffers; parts share nothing mutable, so they may run on any thread.
//!
//! Counts: a call whose count makes the plan join chunks of different sizes runs padded
//! ([`coll_compiler::plan::sizes`]): the kernel runs at the padded count on each rank's
//! padded staging (in the plan's own placement, so without placement copies), the user's
//! input chunks copied in before it and the output chunks copied out after it, on the
//! same stream. Every other call runs at its own count on the user's buffers.

use super::device::{Gpu, TypedKernels};
use super::{
    CallArgs, CallInfo, CallMode, CeStreams, CudaExecutor, HostSplit, LL_SLOT_BYTES, LL_SLOTS,
    MODE_ALIASED, MODE_DIRECT, MODE_PROGRESS, MODE_SEVERAL, Proto, Protocol, RankBuffers, SLOTS,
    Slicer, copy_engine, direct, placement,
};
use crate::dtype::ReduceOp;
use crate::error::ExecError;
use crate::reference::in_place_layout;
use coll_compiler::plan::sizes::{Strided, pad_copies, padded_staging};
use coll_lang::builtins::CollectiveKind;
use cudarc::driver::{CudaStream, sys};
use std::time::Instant;

/// One GPU's part of a call: what [`CudaExecutor::enqueue_raw`] hands to the thread that
/// enqueues it ([`super::launch_threads`]).
pub(super) struct GpuCall<'a> {
    pub(super) gpu: &'a Gpu,
    pub(super) kernels: &'a TypedKernels,
    pub(super) stream: StreamHandle,
    /// Blocks, ops, deps, connections, ranks, progress: the kernel's first six arguments.
    pub(super) arrays: [u64; 6],
    pub(super) done: u64,
    pub(super) error: u64,
    /// 0 when the call is not traced.
    pub(super) trace: u64,
    pub(super) plan_blocks: u32,
    pub(super) needs_progress: bool,
    /// Whether a block of this GPU has several peers (the kernel's `_multi` entries).
    pub(super) several: bool,
    pub(super) local_ranks: &'a [u32],
    pub(super) ce: Option<&'a CeStreams>,
}

/// A stream handle the launch threads may use.
#[derive(Clone, Copy)]
pub(super) struct StreamHandle(pub(super) sys::CUstream);

// SAFETY: a CUstream is a driver handle, valid from any thread of the process; the driver
// serialises work enqueued on one stream, and each call's part for a stream runs on one
// thread.
unsafe impl Sync for StreamHandle {}
unsafe impl Send for StreamHandle {}

impl CudaExecutor {
    /// Enqueues one call on `streams` (one per GPU, in the order of the ordinals given to
    /// [`load`](Self::load)) with rank `q`'s buffers in `bufs[q]`, each on GPU
    /// [`rank_gpu(q)`](Self::rank_gpu), and returns without waiting. The ordering contract is
    /// in the module docs. Every stream and buffer is checked to belong to the right GPU, and
    /// every buffer to be large enough for `count`.
    pub fn enqueue(
        &self,
        streams: &[&CudaStream],
        bufs: &[RankBuffers<'_>],
        count: u64,
        op: ReduceOp,
    ) -> Result<CallInfo, ExecError> {
        self.enqueue_checked(streams, bufs, count, op, false)
    }

    /// Enqueues one call with raw streams and device pointers: `bufs[q]` is user rank q's
    /// NCCL (sendbuff, recvbuff); it is in place when they follow NCCL's in-place layout
    /// ([`in_place_layout`]). Same contract as [`enqueue`](Self::enqueue), unchecked.
    /// Messages go straight into another rank's buffers ([`direct`]) only when every rank's
    /// buffers are cudaMalloc/cuMemAlloc memory of its own GPU or memory of its GPU's default
    /// stream-ordered pool (whose access the executor granted every peer at load), checked
    /// per bulk call; memory of other pools or virtual-memory mappings keeps every message in
    /// coll's slots, which only its own GPU touches ([`CallInfo::staged_because`] says so).
    ///
    /// # Safety
    /// `streams[i]` is a live stream of the context of GPU `ordinals[i]` (the primary
    /// context, which coll uses); `bufs[q]` are device memory that GPU `rank_gpu(q)` can
    /// access, at least as large as the collective needs at `count` (NCCL's sizes), alive and
    /// not freed until the call has run on its stream.
    pub unsafe fn enqueue_raw(
        &self,
        streams: &[sys::CUstream],
        bufs: &[(u64, u64)],
        count: u64,
        op: ReduceOp,
    ) -> Result<CallInfo, ExecError> {
        // SAFETY: this function's contract is `enqueue_inner`'s, passed on by the caller.
        unsafe { self.enqueue_inner(streams, bufs, count, op, false) }
    }

    /// [`enqueue`](Self::enqueue) on coll's own streams ([`streams`](Self::streams));
    /// [`finish`](Self::finish) waits for it.
    pub fn launch(
        &self,
        bufs: &[RankBuffers<'_>],
        count: u64,
        op: ReduceOp,
    ) -> Result<CallInfo, ExecError> {
        self.launch_traced(bufs, count, op, false)
    }

    /// [`launch`](Self::launch), recording every op's start and end when `trace` is set
    /// (read them with [`trace`](Self::trace) after [`finish`](Self::finish)).
    pub fn launch_traced(
        &self,
        bufs: &[RankBuffers<'_>],
        count: u64,
        op: ReduceOp,
        trace: bool,
    ) -> Result<CallInfo, ExecError> {
        let own = self.streams();
        let refs: Vec<&CudaStream> = own.iter().map(|s| s.as_ref()).collect();
        self.enqueue_checked(&refs, bufs, count, op, trace)
    }

    fn enqueue_checked(
        &self,
        streams: &[&CudaStream],
        bufs: &[RankBuffers<'_>],
        count: u64,
        op: ReduceOp,
        trace: bool,
    ) -> Result<CallInfo, ExecError> {
        if streams.len() != self.gpus.len() {
            return Err(ExecError::Gpu(format!(
                "{} streams for {} GPUs: one per GPU",
                streams.len(),
                self.gpus.len()
            )));
        }
        for (i, (s, gp)) in streams.iter().zip(&self.gpus).enumerate() {
            if !gp.gpu.owns_stream(s) {
                return Err(ExecError::Gpu(format!(
                    "stream {i} does not belong to GPU {}",
                    gp.gpu.ordinal()
                )));
            }
        }
        let n = self.plan.ranks;
        // Every rank's buffers, or (in a multi-process run) this process's ranks' in order.
        let users = self.local_users();
        let ranks: Vec<u32> = if bufs.len() == n as usize {
            (0..n).collect()
        } else if bufs.len() == users.len() {
            users
        } else {
            return Err(ExecError::RankCount {
                expected: users.len() as u32,
                got: bufs.len(),
            });
        };
        let shape = self.call_shape(count);
        let es = shape.esize;
        let kind = self.plan.collective.0;
        let mut ptrs = vec![(0, 0); n as usize];
        for (&q, b) in ranks.iter().zip(bufs) {
            let Some(gp) = self.rank_gpu(q).and_then(|i| self.gpus.get(i)) else {
                return Err(ExecError::Gpu(format!(
                    "rank {q} runs in another process: pass only this process's ranks"
                )));
            };
            let gpu = &gp.gpu;
            let small = |what: &str, have: u64, need: u64| {
                ExecError::Gpu(format!(
                    "rank {q}: the {what} buffer holds {have} bytes; count {count} needs {need}"
                ))
            };
            let foreign = || {
                ExecError::Gpu(format!(
                    "rank {q}: a buffer is not on GPU {}, where the rank runs",
                    gpu.ordinal()
                ))
            };
            match *b {
                RankBuffers::OutOfPlace { send, recv } => {
                    if !gpu.owns(send) || !gpu.owns(recv) {
                        return Err(foreign());
                    }
                    if send.bytes() < shape.in_elems * es {
                        return Err(small("send", send.bytes(), shape.in_elems * es));
                    }
                    if recv.bytes() < shape.out_elems * es {
                        return Err(small("receive", recv.bytes(), shape.out_elems * es));
                    }
                    ptrs[q as usize] = (send.ptr(), recv.ptr());
                }
                RankBuffers::InPlace(buf) => {
                    if !gpu.owns(buf) {
                        return Err(foreign());
                    }
                    let lay = in_place_layout(kind, q, count, shape.in_elems, shape.out_elems);
                    if buf.bytes() < lay.len * es {
                        return Err(small("in-place", buf.bytes(), lay.len * es));
                    }
                    ptrs[q as usize] = (
                        buf.ptr() + lay.input_at * es,
                        buf.ptr() + lay.output_at * es,
                    );
                }
            }
        }
        let raw: Vec<sys::CUstream> = streams.iter().map(|s| s.cu_stream()).collect();
        // SAFETY: each stream was checked to belong to its GPU's context and is borrowed, so
        // alive; each buffer was checked to be on its rank's GPU and large enough for
        // `count`, and is a DeviceBuffer, whose drop (cuMemFree) waits for the device's
        // outstanding work before the memory is released.
        unsafe { self.enqueue_inner(&raw, &ptrs, count, op, trace) }
    }

    /// The one place calls are enqueued: per GPU, the placement copies before the kernel,
    /// the kernel, the avg scaling, the copies after it; all on `streams[gpu]`.
    ///
    /// # Safety
    /// As [`enqueue_raw`](Self::enqueue_raw).
    pub(super) unsafe fn enqueue_inner(
        &self,
        streams: &[sys::CUstream],
        bufs: &[(u64, u64)],
        count: u64,
        op: ReduceOp,
        trace: bool,
    ) -> Result<CallInfo, ExecError> {
        let started = Instant::now();
        // An aborted executor's kernels would give up at their first wait: refuse instead.
        self.refuse_aborted()?;
        let plan = &self.plan;
        let n = plan.ranks;
        let kind = plan.collective.0;
        if streams.len() != self.gpus.len() {
            return Err(ExecError::Gpu(format!(
                "{} streams for {} GPUs: one per GPU",
                streams.len(),
                self.gpus.len()
            )));
        }
        if bufs.len() != n as usize {
            return Err(ExecError::RankCount {
                expected: n,
                got: bufs.len(),
            });
        }
        if count > self.max_count {
            return Err(ExecError::Gpu(format!(
                "count {count} is above the {} the plan was loaded for",
                self.max_count
            )));
        }
        let reduces = matches!(
            kind,
            CollectiveKind::AllReduce | CollectiveKind::ReduceScatter | CollectiveKind::Reduce
        );
        if op == ReduceOp::Avg && !reduces {
            return Err(ExecError::Unsupported {
                op: "avg".into(),
                collective: kind.name().into(),
            });
        }
        // Nothing to move: NCCL returns at once, and so does coll, with no kernel and no copy.
        // Every rank of a call has the same count, so every GPU (and every process) skips it
        // alike and no channel's counters move on one side only.
        if count == 0 {
            return Ok(CallInfo {
                algorithm: plan.name.clone(),
                collective: kind,
                count,
                protocol: Protocol::Ll,
                ctas_per_block: 0,
                direct: direct::CallDirect::Off,
                staged_because: Some("empty call"),
                copy_engines: false,
                oneshot: false,
                host: HostSplit {
                    prepare: started.elapsed(),
                    enqueue: std::time::Duration::ZERO,
                },
            });
        }
        // A one-shot allreduce runs small calls in a kernel of its own, on the callers' buffers.
        let bytes = count.saturating_mul(self.dtype.size() as u64);
        if let Some(os) = self
            .oneshot
            .as_ref()
            .filter(|os| !trace && os.serves(bytes))
        {
            // SAFETY: this function's contract; `count` was checked against the loaded one.
            return unsafe { self.enqueue_oneshot(os, streams, bufs, count, op, started) };
        }
        // The count the kernel runs at: `count`, or its padded count (module docs).
        let run = self.padding.run_count(count);
        let padded = run != count;
        let shape = self.call_shape(run);
        // Resolve every rank before enqueueing anything, so a refused call enqueues nothing.
        // Ranks of other processes (a group) are their business: left out.
        let calls: Vec<placement::RankCall> = (0..n)
            .map(|p| {
                let q = self.spread.user(p);
                if !self.local_gis.contains(&(self.spread.gpu(p) as usize)) {
                    return Ok(placement::RankCall::default());
                }
                let staging = self.staging[p as usize];
                let user = bufs[q as usize];
                if !padded {
                    return Ok(placement::rank_call(
                        plan,
                        q,
                        &shape,
                        user,
                        self.alias_safe,
                        staging,
                    )?);
                }
                let s = staging.ok_or_else(|| {
                    ExecError::Gpu(format!(
                        "rank {q}: count {count} runs padded, and the plan was loaded without \
                         padded staging"
                    ))
                })?;
                let at = padded_staging(plan, q, run);
                let es = shape.esize;
                let padded_bufs = (s + at.input_at * es, s + at.output_at * es);
                Ok(placement::rank_call(
                    plan,
                    q,
                    &shape,
                    padded_bufs,
                    self.alias_safe,
                    None,
                )?)
            })
            .collect::<Result<_, ExecError>>()?;
        // Padded: the copies of each rank's input chunks into its padded input, and of its
        // padded output chunks back out (element offsets from the buffers' starts).
        let (pad_in, pad_out): (Vec<Strided>, Vec<Strided>) = if padded {
            let chunks = |b: usize| plan.buffers.get(b).map_or(0, |x| x.chunks);
            (
                pad_copies(count, plan.chunk_factor, chunks(0)),
                pad_copies(count, plan.chunk_factor, chunks(1))
                    .into_iter()
                    .map(Strided::reversed)
                    .collect(),
            )
        } else {
            (Vec::new(), Vec::new())
        };
        // Per plan rank, the caller's (send, recv) the padded copies read and write.
        let user_bufs: Vec<(u64, u64)> =
            (0..n).map(|p| bufs[self.spread.user(p) as usize]).collect();
        let cfg = self.call_config(run);
        // The call's slicing for the kernel, the same for every GPU's part (the chunk factor
        // fits 32 bits, checked at load).
        let slicer = Slicer::new(run, plan.chunk_factor as u32, cfg.slicing);
        let cycles = (self.timeout.as_secs_f64() * 2.0e9) as u64;
        let (mode_direct, direct, staged_because) =
            self.direct_mode(&calls, &shape, cfg.protocol)?;
        // A copy-engine call instead of the kernel: its copies, in bytes, per GPU below.
        // SAFETY: the caller's streams are live (contract).
        let (ce, capturing) = unsafe { self.ce_copies_for(mode_direct, &shape, trace, streams) };
        let extents = ce.map(|c| {
            let bufs: Vec<(u64, u64)> = calls.iter().map(|c| (c.input, c.output)).collect();
            copy_engine::extents(c, plan.chunk_factor, run, shape.esize, &bufs)
        });
        // What each GPU's part needs, taken here so the parts can run on other threads
        // (`GpuPlan` holds the arena's bookkeeping, which is not shared).
        let parts: Vec<GpuCall<'_>> = self
            .gpus
            .iter()
            .zip(streams)
            .map(|(gp, &stream)| GpuCall {
                gpu: &gp.gpu,
                kernels: &gp.kernels,
                stream: StreamHandle(stream),
                arrays: [
                    gp.blocks.ptr(),
                    gp.ops.ptr(),
                    gp.deps.ptr(),
                    gp.conns.ptr(),
                    gp.ranks.ptr(),
                    gp.progress.ptr(),
                ],
                done: gp.done.ptr(),
                error: gp.error.ptr(),
                trace: if trace { gp.trace.ptr() } else { 0 },
                plan_blocks: gp.plan_blocks,
                needs_progress: gp.needs_progress,
                several: gp.several,
                local_ranks: &gp.local_ranks,
                ce: gp.ce.as_ref(),
            })
            .collect();
        let (nsub, ll_epoch, slot_bytes) = (self.nsub.max(1), self.ll_epoch, self.ll.slot_bytes);
        let part = |i: usize| -> Result<(), ExecError> {
            let g = &parts[i];
            let stream = g.stream.0;
            let mut args = CallArgs::default();
            if mode_direct != 0 {
                for (p, c) in calls.iter().enumerate() {
                    args.peer_in[p] = c.input;
                    args.peer_out[p] = c.output;
                }
            }
            for (slot, &p) in g.local_ranks.iter().enumerate() {
                let c = &calls[p as usize];
                args.input[slot] = c.input;
                args.output[slot] = c.output;
                let (send, _) = user_bufs[p as usize];
                for cp in &pad_in {
                    for (from, to) in cp.row_offsets() {
                        // SAFETY: `stream` is this GPU's (contract); each row reads inside
                        // the caller's send buffer of `in_elems` at `count` (contract) and
                        // writes inside this rank's staging region, sized for the padded
                        // input and output of `max_count >= count` ([`super::layout`]).
                        unsafe {
                            g.gpu.copy_async(
                                stream,
                                c.input + to * shape.esize,
                                send + from * shape.esize,
                                cp.len * shape.esize,
                            )
                        }?;
                    }
                }
                if let Some(cp) = c.before {
                    // A small call's input copy costs a launch of its own (1-2 us); the
                    // kernel does it instead where each sub-CTA can copy exactly what it
                    // touches: one block per rank (placement copies the whole input).
                    let whole = cp.dst == c.input && cp.bytes == shape.in_elems * shape.esize;
                    if cfg.protocol != Protocol::Bulk
                        && whole
                        && plan.gpus[p as usize].blocks.len() == 1
                    {
                        args.pre[slot] = cp.src;
                        continue;
                    }
                    // SAFETY: `stream` is this GPU's (contract); the copy reads the caller's
                    // send buffer of `in_elems` (contract) and writes inside its receive
                    // buffer or this rank's staging region, sized for `max_count >= count`.
                    unsafe { g.gpu.copy_async(stream, cp.dst, cp.src, cp.bytes) }?;
                }
            }
            if let Some(ext) = &extents {
                // SAFETY: `stream` is this GPU's (contract); the extents lie in the callers'
                // buffers of this call (contract) or this executor's staging regions, sized
                // for `max_count >= count`; the barrier words are the GPUs' live regions.
                unsafe { copy_engine::enqueue_ce(g, stream, ext, cycles) }?;
            } else {
                // SAFETY: the instruction arrays, counters, error record and trace are this
                // GPU's live regions; `args` holds the caller's buffers (contract) or staging
                // regions of this executor; `stream` is this GPU's (contract).
                unsafe {
                    g.kernels.launch_main(
                        g.gpu,
                        stream,
                        op,
                        g.plan_blocks * cfg.active,
                        cfg.threads,
                        g.arrays,
                        g.done,
                        &args,
                        &slicer,
                        slot_bytes,
                        SLOTS,
                        g.error,
                        cycles,
                        g.trace,
                        &CallMode {
                            proto: Proto::from(cfg.protocol).code(),
                            active: cfg.active,
                            nsub,
                            flags: if g.needs_progress { MODE_PROGRESS } else { 0 }
                                | if g.several { MODE_SEVERAL } else { 0 }
                                | mode_direct,
                            ll_slot_bytes: LL_SLOT_BYTES,
                            ll_slots: LL_SLOTS,
                            ll_epoch,
                            in_chunks: plan.buffers.first().map_or(0, |b| b.chunks as u32),
                            pad: 0,
                        },
                    )
                }?;
            }
            if op == ReduceOp::Avg {
                // SAFETY: as the launch above; the outputs hold `out_elems` elements.
                unsafe {
                    g.kernels.launch_scale(
                        g.gpu,
                        stream,
                        &args,
                        g.local_ranks.len() as u32,
                        shape.out_elems,
                        n,
                    )
                }?;
            }
            for &p in g.local_ranks {
                let c = &calls[p as usize];
                if let Some(cp) = c.after {
                    // SAFETY: from this rank's staging region to the caller's receive buffer
                    // of `out_elems` (contract), after the kernel on the same stream.
                    unsafe { g.gpu.copy_async(stream, cp.dst, cp.src, cp.bytes) }?;
                }
                let (_, recv) = user_bufs[p as usize];
                for cp in &pad_out {
                    for (from, to) in cp.row_offsets() {
                        // SAFETY: from this rank's padded output (its staging region, sized
                        // at load) to inside the caller's receive buffer of `out_elems` at
                        // `count` (contract), after the kernel on the same stream.
                        unsafe {
                            g.gpu.copy_async(
                                stream,
                                recv + to * shape.esize,
                                c.output + from * shape.esize,
                                cp.len * shape.esize,
                            )
                        }?;
                    }
                }
            }
            Ok(())
        };
        // An eager copy-engine call with nothing but its copies is ordered by events instead
        // of the barrier kernels ([`copy_engine::enqueue_joined`]).
        let joined = extents.as_ref().filter(|_| {
            !capturing
                && op != ReduceOp::Avg
                && pad_in.is_empty()
                && pad_out.is_empty()
                && calls
                    .iter()
                    .all(|c| c.before.is_none() && c.after.is_none())
        });
        let prepared = Instant::now();
        let r = match (joined, &self.launch_threads) {
            // SAFETY: as the barrier path's (`part`): the extents lie in the callers' buffers
            // of this call, the streams are the GPUs' own and none is capturing.
            (Some(ext), _) => unsafe { copy_engine::enqueue_joined(&parts, ext) },
            (None, Some(l)) => l.run(parts.len(), part),
            (None, None) => (0..parts.len()).try_for_each(part),
        };
        r?;
        Ok(CallInfo {
            algorithm: plan.name.clone(),
            collective: kind,
            count,
            protocol: cfg.protocol,
            ctas_per_block: cfg.active,
            direct,
            staged_because,
            copy_engines: extents.is_some(),
            oneshot: false,
            host: HostSplit {
                prepare: prepared - started,
                enqueue: prepared.elapsed(),
            },
        })
    }

    /// The [`CallMode`] flags of direct messages for a call ([`direct::call_direct`]): none
    /// unless every rank's `input` and `output` are memory every GPU of the executor may store
    /// into (`Gpu::peers_reach`: cuMemAlloc memory, or its GPU's shared default pool).
    fn direct_mode(
        &self,
        calls: &[placement::RankCall],
        shape: &placement::CallShape,
        protocol: Protocol,
    ) -> Result<(u32, direct::CallDirect, Option<&'static str>), ExecError> {
        let off = |why| Ok((0, direct::CallDirect::Off, Some(why)));
        if protocol != Protocol::Bulk {
            // LL calls never go direct: their lines carry data and flag together. Small calls
            // are bound by the host, so they skip the buffer list below.
            return off("LL protocol");
        }
        if shape.count == 0 {
            return off("empty call");
        }
        if self.setup.direct.apart == 0 {
            return off(if self.local_gis.len() < self.spread.gpus as usize {
                "several processes"
            } else {
                "no message of the plan qualifies, or direct messages are off"
            });
        }
        let bufs: Vec<(u64, u64)> = calls.iter().map(|c| (c.input, c.output)).collect();
        // Senders store into these buffers from other GPUs: only memory that peer access
        // covers (a bulk call is long enough for the 2n driver queries not to matter).
        let reachable = || -> Result<bool, ExecError> {
            for (p, &(i, o)) in bufs.iter().enumerate() {
                let Some(gp) = self
                    .gpus
                    .iter()
                    .find(|g| g.local_ranks.contains(&(p as u32)))
                else {
                    return Ok(false);
                };
                if !gp.gpu.peers_reach(i)? || !gp.gpu.peers_reach(o)? {
                    return Ok(false);
                }
            }
            Ok(true)
        };
        if !reachable()? {
            return off("a buffer is neither cuMemAlloc memory nor its GPU's default pool");
        }
        let chosen = direct::call_direct(
            true,
            self.plan.inplace,
            &bufs,
            shape.in_elems * shape.esize,
            shape.out_elems * shape.esize,
        );
        Ok(match chosen {
            direct::CallDirect::Off => (0, chosen, None),
            direct::CallDirect::Apart => (MODE_DIRECT, chosen, None),
            direct::CallDirect::Aliased => (MODE_DIRECT | MODE_ALIASED, chosen, None),
        })
    }

    /// The copies of a copy-engine call ([`copy_engine`]), when this call is one: a direct
    /// call (bulk, one process, plain buffers) whose placement's set of copies exists, at
    /// least [`GpuSettings::ce_min`] bytes (its rule's for calls captured into a CUDA graph),
    /// not traced (a trace records the kernel's ops); and whether some stream of `streams` is
    /// capturing, asked only of a call the copy engines may serve (false for the others).
    /// A stream whose capture state cannot be read counts as capturing.
    ///
    /// # Safety
    /// Every stream of `streams` is live.
    unsafe fn ce_copies_for(
        &self,
        mode_direct: u32,
        shape: &placement::CallShape,
        trace: bool,
        streams: &[sys::CUstream],
    ) -> (Option<&[copy_engine::CeCopy]>, bool) {
        let bytes = shape.in_elems.max(shape.out_elems) * shape.esize;
        let may = |m: u64| m > 0 && bytes >= m;
        if mode_direct == 0 || trace || !(may(self.ce.min) || may(self.ce.min_captured)) {
            return (None, false);
        }
        let capturing = streams
            .iter()
            // SAFETY: live streams (contract).
            .any(|&s| !matches!(unsafe { super::device::capturing(s) }, Ok(false)));
        let min = if capturing {
            self.ce.min_captured
        } else {
            self.ce.min
        };
        if !may(min) {
            return (None, capturing);
        }
        let set = if mode_direct & MODE_ALIASED != 0 {
            &self.ce.aliased
        } else {
            &self.ce.apart
        };
        (set.as_deref(), capturing)
    }
}
