//! Copy-engine calls: a large bulk call whose every op only copies data that is final when
//! the call starts (an all-to-all, a sendrecv, a broadcast or an all-gather of two ranks)
//! runs as plain device-to-device copies between the ranks' buffers, moved by the GPUs' copy
//! engines instead of an interpreter kernel's stores. On 2 × H200 a copy engine moves 390–396
//! GB/s over NVLink per direction where every SM storing reaches 362–367, and the two at once
//! reach less than the copy engine alone (`bench/ce_sm.cu`, `bench/NOTES.md`, Copy engines).
//!
//! Which plans qualify, their copies ([`CeCopy`]) and a call's copies in bytes ([`extents`])
//! are analyses of the plan, made in [`coll_compiler::gpu::copy_engine`] and re-exported
//! here. No copy may start before every rank has reached the call, and the call ends only
//! when every copy is done: eager calls order the GPUs' streams with events
//! (`enqueue_joined`: each GPU's copies wait for every other GPU's `ready`, and each GPU's
//! stream for every other's `copied`), which cost 13-15 µs a call on 2 × H200 where the
//! kernel's `coll_barrier` before and after the copies cost 21 (`bench/ce_call.cu`,
//! bench/results/2026-11-29-h200x2-ce-events.md); calls captured into CUDA graphs, whose
//! GPUs' streams are captured apart, keep the barriers (`enqueue_ce`), which count calls in
//! device memory and so hold at every replay.

pub use coll_compiler::gpu::copy_engine::{CeCopy, Extent, ce_copies, extents, one_peer_gpu};

use super::BarrierArgs;
use super::call::GpuCall;
use super::device;
use crate::error::ExecError;
use cudarc::driver::{CudaStream, sys};
use std::sync::Arc;

/// A plan's copy-engine calls: its copies with `input` and `output` apart and aliased
/// (`None`: the plan has none, or they are off), and the least call that uses them, eager and
/// captured into a CUDA graph (0: never).
#[derive(Clone, Debug, Default)]
pub struct CeCalls {
    pub apart: Option<Vec<CeCopy>>,
    pub aliased: Option<Vec<CeCopy>>,
    pub min: u64,
    pub min_captured: u64,
}

/// A GPU's second stream for copy-engine calls: local copies run on it beside the peer
/// copies on the call's stream (one stream would run them one after the other), forked
/// from and joined to the call's stream by the two events (graph capture follows both).
pub(super) struct CeStreams {
    pub(super) aux: Arc<CudaStream>,
    pub(super) fork: device::Event,
    pub(super) join: device::Event,
    /// What the GPU's stream held when an eager call reached it, and when its copies were
    /// done ([`enqueue_joined`]).
    pub(super) ready: device::Event,
    pub(super) copied: device::Event,
    /// The GPU's barrier, whole but for its timeout, which each call sets.
    pub(super) barrier: BarrierArgs,
}

/// One GPU's part of a copy-engine call ([`copy_engine`]): the barrier, the copies of its
/// ranks (local ones on the second stream, beside the peer copies on `stream`), the barrier
/// again.
///
/// The barriers give up after `cycles` GPU clock cycles.
///
/// # Safety
/// `stream` is a live stream of `g.gpu`; every extent lies in live device memory of this
/// call that the GPU can reach.
pub(super) unsafe fn enqueue_ce(
    g: &GpuCall<'_>,
    stream: sys::CUstream,
    ext: &[Extent],
    cycles: u64,
) -> Result<(), ExecError> {
    let ce = streams_of(g)?;
    let barrier = BarrierArgs {
        timeout: cycles,
        ..ce.barrier
    };
    // SAFETY: the barrier holds every GPU's live count word (in its arena, set at load) and
    // this GPU's error record.
    unsafe { g.kernels.launch_barrier(g.gpu, stream, &barrier) }?;
    // SAFETY: as this function's.
    unsafe { enqueue_copies(g, ce, stream, ext) }?;
    // SAFETY: as the first barrier.
    unsafe { g.kernels.launch_barrier(g.gpu, stream, &barrier) }
}

/// Every GPU's part of an eager copy-engine call ([`copy_engine`]), ordered by events: each
/// GPU's stream marks `ready`; each GPU's copies wait for every other GPU's `ready` and mark
/// `copied`; each GPU's stream waits for every other GPU's `copied`. Enqueued from one
/// thread, GPU by GPU in each step, since a wait orders after the event's last record.
///
/// # Safety
/// As [`enqueue_ce`], for every part; no part's stream is capturing (a graph's GPUs are
/// captured apart, and an event recorded outside a capture cannot order it).
pub(super) unsafe fn enqueue_joined(
    parts: &[GpuCall<'_>],
    ext: &[Extent],
) -> Result<(), ExecError> {
    let ces = parts
        .iter()
        .map(streams_of)
        .collect::<Result<Vec<_>, _>>()?;
    // Makes part `i`'s stream wait for event `which` of every other part.
    let wait_others = |i: usize, which: fn(&CeStreams) -> &device::Event| {
        let g = &parts[i];
        for (j, other) in ces.iter().enumerate() {
            if j != i {
                // SAFETY: the part's stream is a live stream of its GPU (contract).
                unsafe { which(other).wait(g.gpu, g.stream.0) }?;
            }
        }
        Ok::<(), ExecError>(())
    };
    for (g, ce) in parts.iter().zip(&ces) {
        // SAFETY: the part's stream is a live stream of its GPU (contract).
        unsafe { ce.ready.record(g.stream.0) }?;
    }
    for (i, (g, ce)) in parts.iter().zip(&ces).enumerate() {
        wait_others(i, |c| &c.ready)?;
        // SAFETY: as this function's.
        unsafe { enqueue_copies(g, ce, g.stream.0, ext) }?;
        // SAFETY: as the first record.
        unsafe { ce.copied.record(g.stream.0) }?;
    }
    (0..parts.len()).try_for_each(|i| wait_others(i, |c| &c.copied))
}

/// A part's copy-engine streams and events: every GPU of an executor with copy-engine calls
/// has them (made at load).
fn streams_of<'a>(g: &GpuCall<'a>) -> Result<&'a CeStreams, ExecError> {
    g.ce.ok_or_else(|| ExecError::Gpu("a copy-engine call on a GPU without its stream".into()))
}

/// The copies of one GPU's ranks in `ext`: local ones on the GPU's second stream, forked from
/// and joined to `stream`, beside the peer copies on `stream`.
///
/// # Safety
/// As [`enqueue_ce`].
unsafe fn enqueue_copies(
    g: &GpuCall<'_>,
    ce: &CeStreams,
    stream: sys::CUstream,
    ext: &[Extent],
) -> Result<(), ExecError> {
    let mine = ext.iter().filter(|e| g.local_ranks.contains(&e.from));
    let (local, peer): (Vec<&Extent>, Vec<_>) = mine.partition(|e| g.local_ranks.contains(&e.to));
    let aux = ce.aux.cu_stream();
    if !local.is_empty() {
        // SAFETY: `stream` (contract) and `aux` are live streams of this GPU.
        unsafe { ce.fork.order(stream, aux) }?;
        for e in &local {
            // SAFETY: the extent per this function's contract, on this GPU's stream.
            unsafe { g.gpu.copy_async(aux, e.dst, e.src, e.bytes) }?;
        }
    }
    for e in &peer {
        // SAFETY: as above; peer access covers the other GPU's buffers.
        unsafe { g.gpu.copy_async(stream, e.dst, e.src, e.bytes) }?;
    }
    if !local.is_empty() {
        // SAFETY: as the fork above.
        unsafe { ce.join.order(aux, stream) }?;
    }
    Ok(())
}
