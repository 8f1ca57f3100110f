//! The GPU executor: plans run by one interpreter kernel ([`KERNEL_SOURCE`], from
//! `kernel/`, whose ABI with the host is [`abi`], generated from `kernel/abi.h`),
//! compiled by NVRTC at run time and cached on disk, one CTA per (rank, thread block), over
//! peer-mapped memory between the GPUs of one process — or, in a multi-process run
//! ([`LoadOptions::group`]), one GPU per process, peers' memory mapped through CUDA IPC and
//! connections across a network hop staged in host memory and moved by the host proxy
//! ([`proxy`]).
//!
//! Layers, as cudarc's: [`device`] wraps the driver calls this module needs in small RAII
//! types; [`placement`] turns a call's buffers into the plan's `input` and `output`;
//! [`config`] cuts a call into protocol, slices and CTAs; [`launch_threads`] enqueues a
//! call's GPUs at once; this module encodes plans into device instruction arrays and
//! enqueues calls.
//!
//! # Calls are stream-ordered
//! [`CudaExecutor::enqueue`] (and [`CudaExecutor::enqueue_raw`] for streams and pointers
//! from elsewhere, e.g. a framework's allocator) enqueues one call on the caller's streams,
//! one per GPU, and returns at once. The contract, as NCCL's:
//! - GPU `i`'s part of the call runs on `streams[i]` after the work enqueued there before it,
//!   and work enqueued there after it sees its results. Nothing waits on the host.
//! - The parts on different GPUs wait for each other inside the kernel (peer flags), so every
//!   GPU's stream must reach the call: never make one GPU's stream wait for later work of
//!   another's.
//! - Calls of one executor run in the order they were enqueued, one at a time on each GPU:
//!   enqueue them from one thread, and on one stream per GPU (or streams ordered by events).
//!   The executor's device state (connection counters, progress words) carries over from
//!   one call to the next.
//! - A call does no host synchronisation, allocation or host-to-device copy: kernel launches
//!   and device-to-device copies only, so it can be captured in a CUDA graph
//!   ([`device::capture`]) and replayed; each replay is one more call in that order.
//! - Errors found on the device (a wait that timed out) are read by
//!   [`CudaExecutor::check_error`] once the streams are synchronised.
//!
//! # Protocols
//! Each call moves its messages with one of two protocols ([`Protocol`]), chosen from the size
//! of its largest message ([`call_config`]): bulk (staging slots, a fence and a `sent`
//! counter per message) for large calls, LL (16-byte lines of 8 bytes of data and two copies
//! of a flag, the message's sequence number, polled by the receiver: no fence, no counter
//! round trip) up to [`GpuSettings::ll_max`] bytes per message, [`LL_MAX_BYTES`] unless set
//! (or `COLL_GPU_LL_MAX`), on calls whose larger user buffer is at most [`LL_CALL_FACTOR`]
//! times that (a large call of many small messages, as many instances make, streams better
//! in bulk). Both share each connection's position and acknowledgment
//! counters, so calls of either follow each other freely; `kernel/common.cuh` states the
//! protocol's invariants. A call runs as many CTAs per plan block as it has slices, and
//! small LL calls run with fewer threads per CTA ([`CallConfig`]). Plans with connections
//! the host proxy forwards (across the network in a multi-process run) stay bulk; the
//! processes of a group must see the same threshold (a mismatch times out, naming the op).
//!
//! In bulk calls of one process, messages that [`direct`] proves safe skip the slots: the
//! sender stores them into the receiver's `input`/`output` (every rank's pointers travel in
//! [`CallArgs`]) once the receiver's `ready` word, next to `acked` in the sender's memory,
//! says how far it may ([`GpuSettings::direct`], `COLL_GPU_DIRECT`; swaps of a pair's chunks in
//! place, [`GpuSettings::swaps`], `COLL_GPU_SWAP`). Only when every rank's
//! buffers are memory its peers reach: `cuMemAlloc` allocations of its GPU, which peer access
//! covers, or its GPU's default stream-ordered pool, whose access every peer is granted at
//! load (checked per call; the [`CallInfo`] every call returns says what it used, and why a
//! call stayed in the slots). Such a call whose plan only copies data final at its start,
//! from [`GpuSettings::ce_min`] bytes on, runs no kernel but copies on the copy engines
//! between two barriers ([`copy_engine`]; [`CallInfo::copy_engines`]).
//!
//! A call's parts on different GPUs are enqueued at once, GPU 0's on the caller's thread and
//! the others' on [`launch_threads`] threads; the call returns once all are enqueued.
//!
//! Invariants: every allocation is made when a plan is loaded ([`CudaExecutor::load`]), the
//! LL lines of every connection included, and loading ends with a warm-up call, so the first
//! user call costs what later ones do.
//! Connection counters are absolute and persist across calls; progress counters are cleared
//! by the kernel itself at the end of each call; copy-engine barrier counts (beside each GPU's
//! finished-CTA count) are equal on every GPU between calls, since every GPU runs both
//! barriers of every copy-engine call. A plan rank (position) `p` runs on the GPU of
//! user rank `(p + root) % n` for rooted collectives (plans are lowered for root 0), of `p`
//! otherwise; user rank `q` lives on GPU `q * gpus / ranks` (consecutive ranks share a GPU
//! when there are more ranks than GPUs). All CTAs of a GPU must fit on it at once, because
//! they wait for each other.

// The driver types of the stream-ordered API (streams, graphs), at the version coll uses.
pub use cudarc;

pub mod abi;
pub mod comm;
pub mod config;
pub mod copy_engine;
pub mod device;
pub mod launch_threads;
pub mod proxy;
pub mod run;
pub mod settings;
pub mod topo;
pub mod trace;
pub mod tuned;

// The plan analyses the GPU path runs on, which live with the plan in the compiler.
pub use coll_compiler::gpu::{direct, placement};
pub use comm::Comm;

pub use config::{
    CallConfig, CallLimits, ChunkPos, ChunkShape, MAX_SPLIT, Protocol, Slicer, Slicing,
    call_config, ll_fits, slicing, slicing_ll, split_factor, widest_op,
};
pub use settings::{CeMin, GpuSettings, LaunchMode, SettingsError};

use crate::dtype::{DType, ReduceOp};
use crate::error::ExecError;
use crate::net::mesh::Mesh;
use crate::reference::in_place_layout;
use coll_compiler::plan::Plan;
use coll_compiler::plan::Via;
use coll_lang::builtins::CollectiveKind;
use cudarc::driver::{CudaStream, sys};
use device::{Arena, DeviceBuffer, Gpu, Kernels, Span, TypedKernels, region_size};
use placement::CallShape;
use proxy::{NetEnd, Proxy, Side};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The interpreter kernel's source: its files in a fixed order, the ABI header first, each
/// after a `#line` so that NVRTC's messages name the file and line. The files end in a
/// newline, so each `#line` starts a line.
pub const KERNEL_SOURCE: &str = concat!(
    "#line 1 \"abi.h\"\n",
    include_str!("kernel/abi.h"),
    "#line 1 \"common.cuh\"\n",
    include_str!("kernel/common.cuh"),
    "#line 1 \"bulk.cuh\"\n",
    include_str!("kernel/bulk.cuh"),
    "#line 1 \"ll.cuh\"\n",
    include_str!("kernel/ll.cuh"),
    "#line 1 \"entries.cu\"\n",
    include_str!("kernel/entries.cu"),
);

/// Staging per connection and sub-CTA: `SLOTS` slots of `SLOT_BYTES`. Two slots, the
/// deadlock check's assumption ([`coll_compiler::DEFAULT_SLOTS`]), keep one message in flight
/// while the next is written; with a connection split over many sub-CTAs there are many in
/// flight anyway. Four cost twice the memory (287 against 153 MB per GPU for the 16-instance
/// ring on 2 GPUs) for no clear bandwidth (bench/results/2026-11-22-h200x2-slots.md).
pub const SLOT_BYTES: u32 = 512 * 1024;
pub const SLOTS: u32 = 2;
/// Bytes of one connection's staging: the slots, then one message length per slot (which
/// the host proxy reads for connections it forwards).
pub const STAGING_BYTES: u64 = (SLOTS * SLOT_BYTES) as u64 + 8 * SLOTS as u64;
/// Threads per CTA: the kernel's bound ([`abi::MAX_THREADS`]), which its register use fits.
pub const THREADS: u32 = abi::MAX_THREADS as u32;
/// LL staging per connection and sub-CTA: `LL_SLOTS` slots of `LL_SLOT_BYTES` of 16-byte
/// lines, each line carrying 8 bytes of data.
pub const LL_SLOT_BYTES: u32 = 16 * 1024;
/// A power of two (the kernel masks and shifts by it), at most 1024 (so a line the sender's
/// clean rounds refresh can never be taken for a message after the 32-bit flag wraps).
pub const LL_SLOTS: u32 = 8;
const _: () = assert!(
    LL_SLOTS.is_power_of_two()
        && LL_SLOTS <= 1024
        && LL_SLOT_BYTES.is_multiple_of(abi::LL_LINE_BYTES as u32)
);
/// Data one sub-CTA carries per LL message before a call is spread over more sub-CTAs: one
/// CTA's NVLink stores move only a few GB/s of lines, so messages spread wide (1 KiB was the
/// best of 1-16 KiB on 2 x H200, bench/NOTES.md); [`GpuSettings::ll_sub_bytes`] overrides it.
pub const LL_SUB_BYTES: u64 = 1024;
/// Bulk data one sub-CTA must get before a chunk is cut over more sub-CTAs ([`slicing`]);
/// [`GpuSettings::bulk_sub_bytes`] overrides it.
pub const BULK_SUB_BYTES: u64 = 64 * 1024;
/// Calls whose largest message is at most this many bytes use LL ([`call_config`]). Measured
/// on 2 x H200 (bench/results/2026-11-22-h200x2-ll.md): LL and bulk meet at 1 MiB messages
/// (2 MiB ring allreduce calls on 2 ranks); LL is 25% faster at 512 KiB messages.
pub const LL_MAX_BYTES: u64 = 512 * 1024;
/// Calls whose larger user buffer (input or output, per rank) exceeds this many times the
/// message threshold (4 MiB by default) use bulk whatever their message size: LL sends a
/// flag with every 8 bytes of data, so on calls this large its bandwidth costs more than its
/// latency saves. One knob (`COLL_GPU_LL_MAX`) moves both limits. Measured on 4 x H200
/// (bench/results/2026-11-22-h200x4.md, raw log 2026-11-22-h200x4/proto.md): ring
/// allreduce with 16 instances has 512 KiB messages up to 32 MiB calls on 4 ranks, and LL
/// was 1.15x faster than bulk at 4 MiB but 0.93x at 8 MiB and 0.61x at 32 MiB; with 1
/// instance, and on 2 ranks, the two met at 2-4 MiB.
pub const LL_CALL_FACTOR: u64 = 8;
/// The least copy-engine call where each GPU copies to one other GPU ([`CeMin::Auto`]).
/// From 64 MiB on, copy-engine calls were faster for broadcast, allgather and sendrecv and
/// within 1% for alltoall; below, the kernel (`bench/NOTES.md` section 27).
pub const CE_MIN_BYTES: u64 = 64 << 20;

// The kernel's ABI: the structs the host hands it and reads back, and its numbers.
pub use abi::{BarrierArgs, CallArgs, CallMode, MAX_DIRECT, MAX_LOCAL};
use abi::{
    CallCounters, DBlock, DConn, DDep, DOp, ErrorRec, Fault, MODE_ALIASED, MODE_DIRECT,
    MODE_PROGRESS, OpCode, Proto, RankCtx, TraceRec,
};
use std::mem::offset_of;

/// What setting a plan up cost, reported apart from the calls.
#[derive(Clone, Debug, PartialEq)]
pub struct SetupReport {
    /// NVRTC compile time (zero when the kernel came from the disk cache).
    pub compile: Duration,
    pub from_cache: bool,
    /// Everything else: contexts, peer access, allocations, instruction upload, the warm-up
    /// call.
    pub load: Duration,
    /// Bytes coll allocated on each GPU beyond the user's buffers (cuMemGetInfo before and
    /// after setup).
    pub allocated_bytes: Vec<u64>,
    /// What the plan says it needs per GPU, computed before allocating: staging + scratch +
    /// instructions (+ placement staging, [`placement`]); allocated in one piece, so the two
    /// agree up to the driver's 2 MiB allocation granularity.
    pub reported_bytes: Vec<u64>,
    /// Memory the kernel module took on each GPU when it was loaded.
    pub module_bytes: Vec<u64>,
    /// Messages that skip staging in bulk calls ([`direct`]).
    pub direct: DirectCount,
    /// Host threads that enqueue each call's GPU parts at once ([`launch_threads`]): 1 when the
    /// caller's thread enqueues every GPU in turn.
    pub launch_threads: usize,
}

/// How to load a plan.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    pub dtype: DType,
    /// The largest NCCL count any call will use: buffers are sized for it.
    pub max_count: u64,
    /// The root of rooted collectives (broadcast, reduce); ignored for the others. Plans are
    /// lowered for root 0, so user rank `root` plays plan rank 0.
    pub root: u32,
    /// Whether calls may use the placement the plan was not written for (in place for an
    /// out-of-place plan and the reverse); some plans then need a staging buffer per rank
    /// ([`placement::staging_elems`]), allocated and reported with the rest.
    pub both_placements: bool,
    /// Several processes, one GPU each, share the plan (see [`CudaExecutor::load`]); `None`
    /// drives every GPU of the plan from this process.
    pub group: Option<Arc<Mesh>>,
    /// The executor's knobs and the call timeout, resolved ([`settings`]).
    pub settings: GpuSettings,
}

impl LoadOptions {
    /// Options for `dtype` and `max_count` with [`GpuSettings::default`].
    pub fn new(dtype: DType, max_count: u64) -> LoadOptions {
        LoadOptions {
            dtype,
            max_count,
            root: 0,
            both_placements: true,
            group: None,
            settings: GpuSettings::default(),
        }
    }
}

/// One rank's buffers for a call of [`CudaExecutor::enqueue`], as NCCL takes them.
#[derive(Clone, Copy, Debug)]
pub enum RankBuffers<'a> {
    /// Separate send and receive buffers.
    OutOfPlace {
        send: &'a DeviceBuffer,
        recv: &'a DeviceBuffer,
    },
    /// One buffer in NCCL's in-place layout ([`in_place_layout`]).
    InPlace(&'a DeviceBuffer),
}

/// Which GPU each plan rank runs on (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spread {
    pub ranks: u32,
    pub gpus: u32,
    /// Plan rank `p` is user rank `(p + rotate) % ranks`.
    pub rotate: u32,
}

impl Spread {
    pub fn new(plan: &Plan, gpus: u32, root: u32) -> Spread {
        let rooted = matches!(
            plan.collective.0,
            CollectiveKind::Broadcast | CollectiveKind::Reduce
        );
        Spread {
            ranks: plan.ranks,
            gpus: gpus.max(1),
            rotate: if rooted { root % plan.ranks.max(1) } else { 0 },
        }
    }

    /// The user rank plan rank `p` plays.
    pub fn user(&self, p: u32) -> u32 {
        (p + self.rotate) % self.ranks.max(1)
    }

    /// The GPU (index into the executor's GPUs) of plan rank `p`.
    pub fn gpu(&self, p: u32) -> u32 {
        gpu_of(self.user(p), self.ranks, self.gpus)
    }
}

/// How many of a plan's messages (sending ops, per iteration) skip staging in bulk calls,
/// for each placement of a call ([`direct`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DirectCount {
    /// With `input` and `output` apart (out-of-place calls of out-of-place plans).
    pub apart: usize,
    /// With them aliased (in-place plans, in-place calls).
    pub aliased: usize,
    /// Every sending op of the plan.
    pub messages: usize,
    /// Of `aliased`, the sends that swap halves with their receiver's send.
    pub swaps: usize,
}

/// A shipped algorithm compiled for `n` ranks on `nvswitch:n` (unit tests).
#[cfg(test)]
pub(crate) fn shipped_plan(file: &str, n: usize) -> Plan {
    let path = format!("{}/../algorithms/{file}", env!("CARGO_MANIFEST_DIR"));
    let m = coll_lang::load_bytes(&path, std::fs::read(&path).expect("ships")).expect("valid");
    let topo = coll_compiler::topology::Topology::parse(&format!("nvswitch:{n}")).expect("preset");
    coll_compiler::compile(&m, &topo, &coll_compiler::CompileOptions::default())
        .expect("compiles")
        .lowered
        .plan
}

/// Per GPU: its device state and the arrays of its kernel.
struct GpuPlan {
    gpu: Gpu,
    kernels: TypedKernels,
    // Regions of `arena`, which this struct keeps alive beside them.
    blocks: Span,
    ops: Span,
    deps: Span,
    conns: Span,
    ranks: Span,
    progress: Span,
    /// CTAs of the current call that finished (the last one clears `progress`).
    done: Span,
    error: Span,
    /// Start and end (GPU global timer, ns) of every op of this GPU, when tracing.
    trace: Span,
    /// (rank, block, op) of each entry of `ops`, to read the trace back.
    op_index: Vec<(u32, u32, u32)>,
    /// The GPU's one allocation, which every region above lives in (set after setup, since
    /// connections take regions of other GPUs' arenas).
    arena: Option<Arena>,
    /// Plan blocks on this GPU (`nblocks / nsub`): a call launches `active` CTAs for each.
    plan_blocks: u32,
    /// Whether any op on this GPU waits on another block's progress.
    needs_progress: bool,
    /// Plan ranks on this GPU, in slot order.
    local_ranks: Vec<u32>,
    /// Copy-engine calls' second stream and its events, when the plan has such calls.
    ce: Option<CeStreams>,
}

impl GpuPlan {
    /// The region `span` of this GPU's arena, to read back.
    fn region(&self, span: Span) -> Result<device::Region<'_>, ExecError> {
        self.arena
            .as_ref()
            .ok_or_else(|| ExecError::Gpu("a GPU without its arena".into()))?
            .region(span)
    }
}

/// A GPU's second stream for copy-engine calls: local copies run on it beside the peer
/// copies on the call's stream (one stream would run them one after the other), forked
/// from and joined to the call's stream by the two events (graph capture follows both).
struct CeStreams {
    aux: Arc<CudaStream>,
    fork: device::Event,
    join: device::Event,
    /// The GPU's barrier, whole but for its timeout, which each call sets.
    barrier: BarrierArgs,
}

/// Where the host's time in one call went ([`CallInfo::host`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HostSplit {
    /// Resolving the call: its checks, placement, protocol and direct messages.
    pub prepare: Duration,
    /// Every GPU's part, all at once with launch threads: its kernel arguments, launches and
    /// copies, until the last part is enqueued.
    pub enqueue: Duration,
}

/// What one call did, returned by every enqueueing function: which plan and protocol served
/// it, whether its messages went straight into the receivers' buffers or through coll's
/// staging slots, whether the copy engines moved it, and where the host's time went.
#[derive(Clone, Debug, PartialEq)]
pub struct CallInfo {
    /// The plan's name (its `.coll` algorithm).
    pub algorithm: String,
    pub collective: CollectiveKind,
    /// NCCL's count of the call.
    pub count: u64,
    pub protocol: Protocol,
    /// CTAs per plan block.
    pub ctas_per_block: u32,
    /// Which set of direct messages the call used ([`direct::CallDirect::Off`]: every
    /// message through the slots).
    pub direct: direct::CallDirect,
    /// Why a bulk call of a plan with direct messages stayed in the slots, when it did.
    pub staged_because: Option<&'static str>,
    /// Whether the copy engines moved the call, with no interpreter kernel.
    pub copy_engines: bool,
    pub host: HostSplit,
}

impl std::fmt::Display for CallInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}, count {}): {}, {} CTA(s) per block, ",
            self.algorithm,
            self.collective.name(),
            self.count,
            self.protocol.name(),
            self.ctas_per_block
        )?;
        match (self.copy_engines, self.direct, self.staged_because) {
            (true, _, _) => write!(f, "copy engines"),
            (false, direct::CallDirect::Off, Some(why)) => write!(f, "staged ({why})"),
            (false, direct::CallDirect::Off, None) => write!(f, "staged"),
            (false, direct::CallDirect::Apart, _) => write!(f, "direct"),
            (false, direct::CallDirect::Aliased, _) => write!(f, "direct, in place"),
        }
    }
}

/// One GPU's part of a call: what [`CudaExecutor::enqueue_raw`] hands to the thread that
/// enqueues it ([`launch_threads`]).
struct GpuCall<'a> {
    gpu: &'a Gpu,
    kernels: &'a TypedKernels,
    stream: StreamHandle,
    /// Blocks, ops, deps, connections, ranks, progress: the kernel's first six arguments.
    arrays: [u64; 6],
    done: u64,
    error: u64,
    /// 0 when the call is not traced.
    trace: u64,
    plan_blocks: u32,
    needs_progress: bool,
    local_ranks: &'a [u32],
    ce: Option<&'a CeStreams>,
}

/// A stream handle the launch threads may use.
#[derive(Clone, Copy)]
struct StreamHandle(sys::CUstream);

// SAFETY: a CUstream is a driver handle, valid from any thread of the process; the driver
// serialises work enqueued on one stream, and each call's part for a stream runs on one
// thread.
unsafe impl Sync for StreamHandle {}
unsafe impl Send for StreamHandle {}

/// A plan loaded onto the GPUs of this process.
pub struct CudaExecutor {
    plan: Plan,
    gpus: Vec<GpuPlan>,
    spread: Spread,
    dtype: DType,
    max_count: u64,
    /// Sub-CTAs per plan block.
    nsub: u32,
    /// Chunks of the plan's largest op and user buffer, fixed at load.
    shape: ChunkShape,
    /// [`GpuSettings::ll_max`] as it applies to this plan, and the data per sub-CTA.
    ll: CallLimits,
    /// Added to every LL message number ([`GpuSettings::ll_epoch`]).
    ll_epoch: u64,
    timeout: Duration,
    /// [`placement::in_place_safe`] of the plan.
    alias_safe: bool,
    /// Copy-engine calls ([`copy_engine`]): the copies with `input` and `output` apart and
    /// aliased (`None`: the plan has none), and the least call that uses them.
    ce_apart: Option<Vec<copy_engine::CeCopy>>,
    ce_aliased: Option<Vec<copy_engine::CeCopy>>,
    ce_min: u64,
    /// Per plan rank: its placement staging buffer, when the plan needs one.
    staging: Vec<Option<u64>>,
    /// The index in the spread of each GPU this process drives (all of them without a
    /// group; this process's one in a group).
    local_gis: Vec<usize>,
    /// Other processes' arenas, mapped (a group only); unmapped after the GPUs are synced.
    _remote_arenas: Vec<Arena>,
    /// The host proxy of connections across the network (a group only).
    _proxy: Option<Proxy>,
    /// Threads that enqueue GPUs 1.. of a call while the caller enqueues GPU 0 (none for one
    /// GPU, or with [`GpuSettings::launch_threads`] off).
    launch_threads: Option<launch_threads::LaunchThreads>,
    pub setup: SetupReport,
}

impl std::fmt::Debug for CudaExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaExecutor")
            .field("plan", &self.plan.name)
            .field("gpus", &self.gpus.len())
            .finish()
    }
}

/// Bytes each GPU needs for `plan` spread as `spread`, at counts up to `max_count` of
/// `esize`-byte elements: staging slots, LL lines and flags of the connections it ends, scratch and
/// placement staging (`staging_elems` per rank) of its ranks, and the instruction arrays —
/// exactly the regions [`CudaExecutor::load`] takes, in the same sizes.
pub fn arena_sizes(
    plan: &Plan,
    spread: &Spread,
    esize: u64,
    max_count: u64,
    nsub: u32,
    staging_elems: u64,
) -> Vec<u64> {
    let s = u64::from(nsub.max(1));
    let g = spread.gpus as usize;
    let mut need = vec![0u64; g];
    let mut ends = vec![0u64; g];
    for (r, rp) in plan.gpus.iter().enumerate() {
        let here = spread.gpu(r as u32) as usize;
        for b in &rp.blocks {
            if let Some(q) = b.send_peer {
                let there = spread.gpu(q) as usize;
                need[there] += s
                    * (region_size(STAGING_BYTES)
                        + region_size(u64::from(LL_SLOTS * LL_SLOT_BYTES))
                        + region_size(8));
                // `acked` and `ready`.
                need[here] += s * region_size(16);
            }
            ends[here] += s * (u64::from(b.send_peer.is_some()) + u64::from(b.recv_peer.is_some()));
        }
    }
    for (gi, slot) in need.iter_mut().enumerate() {
        let local: Vec<&coll_compiler::plan::RankPlan> = plan
            .gpus
            .iter()
            .enumerate()
            .filter(|(r, _)| spread.gpu(*r as u32) as usize == gi)
            .map(|(_, rp)| rp)
            .collect();
        for _ in &local {
            for b in 2..plan.buffers.len() {
                *slot += region_size(plan.buffer_elements(b, max_count) * esize);
            }
            if staging_elems > 0 {
                *slot += region_size(staging_elems * esize);
            }
        }
        let blocks: u64 = s * local.iter().map(|rp| rp.blocks.len() as u64).sum::<u64>();
        let ops: u64 = local
            .iter()
            .flat_map(|rp| &rp.blocks)
            .map(|b| b.ops.len() as u64)
            .sum();
        let deps: u64 = local
            .iter()
            .flat_map(|rp| &rp.blocks)
            .flat_map(|b| &b.ops)
            .map(|o| o.deps.len() as u64)
            .sum();
        let nl = local.len().max(1) as u64;
        let size = |n: u64, one: usize| region_size(n * one as u64);
        *slot += size(blocks, size_of::<DBlock>())
            + size(ops, size_of::<DOp>())
            + size(deps, size_of::<DDep>())
            + size(ends[gi], size_of::<DConn>())
            + size(nl, size_of::<RankCtx>())
            + region_size(blocks.max(1) * 4)
            + size(1, size_of::<CallCounters>())
            + size(1, size_of::<ErrorRec>())
            + size(ops.max(1), size_of::<TraceRec>());
    }
    need
}

/// The GPU of rank `r` of `n` on `g` GPUs.
pub fn gpu_of(r: u32, n: u32, g: u32) -> u32 {
    (u64::from(r) * u64::from(g) / u64::from(n.max(1))) as u32
}

/// Every process's arena, in spread order, for a group: this process's allocated, the
/// others' mapped through CUDA IPC where a connection of this process's ranks uses them
/// through peer memory, counted only otherwise. Handles travel in one all-gather, with each
/// process's split and arena size, which must agree (they fix every region's offset).
fn group_arenas(
    mesh: &Mesh,
    gpu: &Gpu,
    plan: &Plan,
    spread: &Spread,
    reported: &[u64],
    nsub: u32,
    timeout: Duration,
) -> Result<Vec<Arena>, ExecError> {
    let me = mesh.me() as usize;
    let own = Arena::new(gpu, reported[me])?;
    let mut payload = nsub.to_le_bytes().to_vec();
    payload.extend_from_slice(&reported[me].to_le_bytes());
    payload.extend_from_slice(&own.ipc_handle()?);
    let all = mesh
        .barrier(&payload, timeout)
        .map_err(|f| ExecError::Gpu(format!("exchanging IPC handles: {f}")))?;
    // Which processes' memory this one's ranks reach by peer stores and loads.
    let mut reach = vec![false; all.len()];
    for (r, rp) in plan.gpus.iter().enumerate() {
        let here = spread.gpu(r as u32) as usize;
        for b in &rp.blocks {
            for (peer, via) in [(b.send_peer, b.send_via), (b.recv_peer, b.recv_via)] {
                let Some(peer) = peer else { continue };
                let there = spread.gpu(peer) as usize;
                if via != Some(Via::Net) && (here == me) != (there == me) {
                    reach[if here == me { there } else { here }] = true;
                }
            }
        }
    }
    let mut own = Some(own);
    let mut arenas = Vec::with_capacity(all.len());
    for (p, blob) in all.iter().enumerate() {
        let word = |at: usize, len: usize| blob.get(at..at + len);
        let (Some(split), Some(size), Some(handle)) = (word(0, 4), word(4, 8), word(12, 64)) else {
            return Err(ExecError::Gpu(format!(
                "process {p} sent a malformed IPC handle ({} bytes)",
                blob.len()
            )));
        };
        let split = u32::from_le_bytes(split.try_into().unwrap_or_default());
        let size = u64::from_le_bytes(size.try_into().unwrap_or_default());
        if split != nsub || size != reported[p] {
            return Err(ExecError::Gpu(format!(
                "process {p} laid the plan out with {split} CTAs per block and {size} bytes,                  this one with {nsub} and {}: the GPUs or COLL_GPU_SPLIT differ between processes",
                reported[p]
            )));
        }
        arenas.push(if p == me {
            own.take()
                .ok_or_else(|| ExecError::Gpu("own arena used twice".into()))?
        } else if reach[p] {
            // SAFETY: process p allocated its arena of `size` bytes (checked above to be
            // what this process computes for it) and keeps it for as long as its executor
            // lives; the group's processes make and finish their calls together, so nothing
            // runs through this mapping once its exporter has dropped its arena.
            let mapping = unsafe { device::IpcMapping::open(gpu, handle, size) }?;
            Arena::mapped(gpu, mapping, size)?
        } else {
            Arena::unmapped(gpu, size)
        });
    }
    Ok(arenas)
}

impl CudaExecutor {
    /// [`load`](Self::load) with the default options for `dtype` and `max_count`.
    pub fn new(
        plan: coll_compiler::plan::ValidPlan,
        ordinals: &[usize],
        dtype: DType,
        max_count: u64,
    ) -> Result<CudaExecutor, ExecError> {
        Self::load(plan, ordinals, &LoadOptions::new(dtype, max_count))
    }

    /// Loads `plan` onto GPUs `ordinals`: compiles (or loads from cache) the kernel, enables
    /// peer access, allocates staging, flags, scratch and instruction arrays in one piece per
    /// GPU, loads the kernel's functions and makes one warm-up call, so that the first user
    /// call finds everything in place.
    pub fn load(
        plan: coll_compiler::plan::ValidPlan,
        ordinals: &[usize],
        o: &LoadOptions,
    ) -> Result<CudaExecutor, ExecError> {
        let plan = plan.into_inner();
        let g = ordinals.len() as u32;
        if g == 0 {
            return Err(ExecError::Gpu("no GPU given".into()));
        }
        if plan.buffers.len() > abi::MAX_BUFFERS {
            return Err(ExecError::Gpu(format!(
                "at most {} buffers per rank on GPUs",
                abi::MAX_BUFFERS
            )));
        }
        // The kernel holds chunk positions in 32 bits (ChunkPos).
        let k = u32::try_from(plan.chunk_factor).map_err(|_| {
            ExecError::Gpu(format!(
                "a chunk factor of {} is above the GPU kernel's {}",
                plan.chunk_factor,
                u32::MAX
            ))
        })?;
        let n = plan.ranks;
        if o.root >= n {
            return Err(ExecError::Root {
                root: o.root,
                ranks: n,
            });
        }
        // In a group this process drives one GPU of `procs`, one per process: the plan is
        // spread over all of them, and `local_gis` says which are this process's.
        let (virtual_gpus, local_gis): (u32, Vec<usize>) = match &o.group {
            Some(m) => {
                if g != 1 {
                    return Err(ExecError::Gpu(format!(
                        "a process of a multi-process run drives one GPU, not {g}"
                    )));
                }
                if m.procs() > n {
                    return Err(ExecError::Procs {
                        procs: m.procs(),
                        ranks: n,
                    });
                }
                (m.procs(), vec![m.me() as usize])
            }
            None => (g, (0..g as usize).collect()),
        };
        let spread = Spread::new(&plan, virtual_gpus, o.root);
        let most_local = (0..virtual_gpus)
            .map(|gi| (0..n).filter(|&p| spread.gpu(p) == gi).count())
            .max()
            .unwrap_or(0);
        if most_local > MAX_LOCAL {
            return Err(ExecError::Gpu(format!(
                "{most_local} ranks on one GPU; at most {MAX_LOCAL} (use more GPUs)"
            )));
        }
        let set = &o.settings;
        // Connections the host proxy forwards carry bulk slots only, and every connection of
        // a call uses the call's protocol: such plans stay bulk. Every process of a group
        // decides this from the plan alone, so they agree.
        let proxied = o.group.is_some()
            && plan.gpus.iter().enumerate().any(|(r, rp)| {
                rp.blocks.iter().any(|b| {
                    b.send_via == Some(Via::Net)
                        && b.send_peer
                            .is_some_and(|q| spread.gpu(q) != spread.gpu(r as u32))
                })
            });
        let ll_max = if proxied { 0 } else { set.ll_max };
        let start = Instant::now();
        let gpus: Vec<Gpu> = ordinals
            .iter()
            .map(|&o| Gpu::open(o))
            .collect::<Result<_, _>>()?;
        device::enable_peer_access(&gpus)?;
        let free_at = |gpus: &[Gpu]| -> Result<Vec<u64>, ExecError> {
            gpus.iter().map(|x| x.free_bytes()).collect()
        };
        let free_start = free_at(&gpus)?;
        let (kernels, compile, from_cache) = Kernels::load_all(&gpus, KERNEL_SOURCE)?;
        let typed: Vec<TypedKernels> = (0..gpus.len())
            .map(|gi| kernels.for_gpu(gi).typed(o.dtype))
            .collect::<Result<_, _>>()?;
        for (k, gpu) in typed.iter().zip(&gpus) {
            k.preload(gpu)?;
        }
        // Module memory (code, constants, the driver's local-memory reserve) apart from the
        // plan's own allocations.
        let free_before = free_at(&gpus)?;
        let module_bytes: Vec<u64> = free_start
            .iter()
            .zip(&free_before)
            .map(|(a, b)| a.saturating_sub(*b))
            .collect();
        let esize = o.dtype.size() as u64;
        let max_count = o.max_count;
        let alias_safe = placement::in_place_safe(&plan);
        let staging_elems = if o.both_placements {
            placement::staging_elems(&plan, max_count, alias_safe)
        } else {
            0
        };

        // Connections: (from, to, channel, sub) -> staging and LL lines on the receiver,
        // `sent` there, `acked` on the sender.
        struct ConnMem {
            slots: u64,
            sent: u64,
            acked: u64,
            ll: u64,
        }
        // What each GPU needs, computed before anything is allocated: one arena per GPU.
        let nsub = split_factor(&plan, &spread, gpus[0].sm_count()?, set.split_cap);
        let shape = ChunkShape::of(&plan);
        let reported = arena_sizes(&plan, &spread, esize, max_count, nsub, staging_elems);
        let arenas: Vec<Arena> = match &o.group {
            None => gpus
                .iter()
                .zip(&reported)
                .map(|(gp, &bytes)| Arena::new(gp, bytes))
                .collect::<Result<_, _>>()?,
            Some(mesh) => {
                group_arenas(mesh, &gpus[0], &plan, &spread, &reported, nsub, set.timeout)?
            }
        };
        let mut conn_mem: HashMap<(u32, u32, u32, u32), ConnMem> = HashMap::new();
        for (r, gpu_plan) in plan.gpus.iter().enumerate() {
            for b in &gpu_plan.blocks {
                let Some(q) = b.send_peer else { continue };
                let (sg, rg) = (spread.gpu(r as u32) as usize, spread.gpu(q) as usize);
                for sub in 0..nsub {
                    let slots = arenas[rg].take(STAGING_BYTES)?;
                    // Zeroed, as the arena is: flag 0 is no message's.
                    let ll = arenas[rg].take(u64::from(LL_SLOTS * LL_SLOT_BYTES))?;
                    let sent = arenas[rg].take(8)?;
                    // `acked`, then `ready`.
                    let acked = arenas[sg].take(16)?;
                    conn_mem.insert(
                        (r as u32, q, b.channel, sub),
                        ConnMem {
                            slots: slots.ptr(),
                            sent: sent.ptr(),
                            acked: acked.ptr(),
                            ll: ll.ptr(),
                        },
                    );
                }
            }
        }

        // Connections that cross the network between processes go through the host proxy:
        // their ends here live in pinned host memory (see [`proxy`]).
        let mut net_ends: Vec<NetEnd> = Vec::new();
        // (connection, side) -> the kernel's (slots, sent, acked) for that end.
        type EndKey = ((u32, u32, u32, u32), Side);
        let mut net_view: HashMap<EndKey, (u64, u64, u64)> = HashMap::new();
        if let Some(mesh) = &o.group {
            let me = mesh.me();
            for (r, rp) in plan.gpus.iter().enumerate() {
                let r = r as u32;
                for b in &rp.blocks {
                    let Some(q) = b.send_peer else { continue };
                    let (sp, tp) = (spread.gpu(r), spread.gpu(q));
                    if b.send_via != Some(Via::Net) || sp == tp {
                        continue;
                    }
                    for sub in 0..nsub {
                        let key = (r, q, b.channel * MAX_SPLIT + sub);
                        for (side, here, there) in [(Side::Send, sp, tp), (Side::Recv, tp, sp)] {
                            if here == me {
                                let end = NetEnd::new(&gpus[0], side, key, there)?;
                                net_view.insert(((r, q, b.channel, sub), side), end.kernel_view());
                                net_ends.push(end);
                            }
                        }
                    }
                }
            }
        }

        // Messages the sender may store straight into the receiver's buffers: one process
        // only (another's buffers change with every call), for either placement of a call.
        // Release counts travel in 16 bits.
        let small_blocks = plan
            .gpus
            .iter()
            .flat_map(|g| &g.blocks)
            .all(|b| b.ops.len() < abi::RELEASE_AT_START as usize);
        let direct_on = set.direct && o.group.is_none() && n as usize <= MAX_DIRECT;
        let (apart, aliased) = if direct_on && small_blocks {
            direct::direct_ops_both(&plan, set.swaps)
        } else {
            Default::default()
        };
        // Copy-engine calls: only where messages may go direct (one process, every buffer
        // known at the call).
        let (ce_apart, ce_aliased) = if direct_on {
            (
                copy_engine::ce_copies(&plan, false),
                copy_engine::ce_copies(&plan, true),
            )
        } else {
            (None, None)
        };
        // By default only where each GPU copies to one other GPU, as measured; a GPU copying
        // to several took longer than the kernel (bench/NOTES.md section 27): those run on
        // the copy engines only when asked.
        let one_peer = [&ce_apart, &ce_aliased].iter().all(|set| {
            set.as_deref()
                .is_none_or(|c| copy_engine::one_peer_gpu(c, spread.gpus, |r| spread.gpu(r)))
        });
        let ce_min = set.ce_min.bytes(one_peer);
        let (ce_apart, ce_aliased) = if ce_min > 0 {
            (ce_apart, ce_aliased)
        } else {
            (None, None)
        };
        // In-place plans alias always: their two sets are the same.
        let direct_count = DirectCount {
            apart: apart.sends.len(),
            aliased: aliased.sends.len(),
            swaps: aliased.swaps.len(),
            messages: plan.sending_ops(),
        };
        let direct_flags = |at: direct::OpAt| -> (u32, u64) {
            let mut f = 0;
            let mut off = 0;
            // A send's target is its receive's first chunk, the same in both sets.
            if let Some(t) = apart.sends.get(&at).or(aliased.sends.get(&at)) {
                if t.buffer == 1 {
                    f |= abi::DOP_DIRECT_TO_OUTPUT;
                }
                off = t.offset;
            }
            if apart.sends.contains_key(&at) {
                f |= abi::DOP_DIRECT_SEND_APART;
            }
            if aliased.sends.contains_key(&at) {
                f |= abi::DOP_DIRECT_SEND_ALIASED;
            }
            for (set, bit) in [
                (&apart, abi::DOP_SWAP_APART),
                (&aliased, abi::DOP_SWAP_ALIASED),
            ] {
                if let Some(&half) = set.swaps.get(&at) {
                    f |= bit;
                    if half == direct::Half::Second {
                        f |= abi::DOP_SWAP_SECOND;
                    }
                }
            }
            if apart.recvs.contains_key(&at) {
                f |= abi::DOP_DIRECT_RECV_APART;
            }
            if aliased.recvs.contains_key(&at) {
                f |= abi::DOP_DIRECT_RECV_ALIASED;
            }
            (f, off)
        };
        let mut staging = vec![None; n as usize];
        let mut out = Vec::with_capacity(gpus.len());
        for (li, (gpu, kernels)) in gpus.into_iter().zip(typed).enumerate() {
            let gi = local_gis[li];
            let local_ranks: Vec<u32> = (0..n).filter(|&p| spread.gpu(p) as usize == gi).collect();
            let mut blocks = Vec::new();
            let mut ops = Vec::new();
            let mut deps: Vec<DDep> = Vec::new();
            let mut conns: Vec<DConn> = Vec::new();
            let mut ctxs: Vec<RankCtx> = Vec::new();
            let mut op_index: Vec<(u32, u32, u32)> = Vec::new();
            for (slot, &r) in local_ranks.iter().enumerate() {
                let rp = &plan.gpus[r as usize];
                // This rank's block 0, sub 0, in the block array (and progress array).
                let prog_base = blocks.len() as u32;
                // (block, op) pairs some op of another block waits on.
                let awaited: std::collections::HashSet<(u32, u32)> = rp
                    .blocks
                    .iter()
                    .flat_map(|b| {
                        b.ops.iter().flat_map(move |op| {
                            op.deps
                                .iter()
                                .filter(move |d| d.block() != b.id)
                                .map(|d| (d.block(), d.op()))
                        })
                    })
                    .collect();
                for b in &rp.blocks {
                    let op_start = ops.len() as u32;
                    // Direct releases of this block, per placement: at call start, or per
                    // iteration before the first op and after each.
                    let tables = [apart.releases(r, b), aliased.releases(r, b)];
                    let half = |t: &direct::ReleaseTable, j: Option<usize>| match (t, j) {
                        (None, _) => abi::RELEASE_AT_START,
                        (Some((start, _)), None) => *start,
                        (Some((_, after)), Some(j)) => after.get(j).copied().unwrap_or(0),
                    };
                    let packed = |j: Option<usize>| {
                        half(&tables[0], j) | (half(&tables[1], j) << abi::REL_ALIASED_SHIFT)
                    };
                    for (oi, op) in b.ops.iter().enumerate() {
                        op_index.push((r, b.id, oi as u32));
                        let (src_buf, src_off) =
                            op.src.map_or((0, 0), |s| (s.buffer() as u8, s.offset()));
                        let (dst_buf, dst_off) =
                            op.dst.map_or((0, 0), |s| (s.buffer() as u8, s.offset()));
                        let (dflags, peer_off) = direct_flags((r, b.id, oi as u32));
                        let pos = |off: u64| {
                            ChunkPos::of(off, u64::from(k)).ok_or_else(|| {
                                ExecError::Gpu(format!(
                                    "rank {r} block {} op {oi}: chunk {off} is beyond the GPU \
                                     kernel's 32-bit slice index",
                                    b.id
                                ))
                            })
                        };
                        ops.push(DOp {
                            kind: OpCode::from(op.kind).code(),
                            src_buf,
                            dst_buf,
                            ndeps: op.deps.len().min(255) as u8,
                            count: op.count,
                            src: pos(src_off)?,
                            dst: pos(dst_off)?,
                            dep_start: deps.len() as u32,
                            flags: if awaited.contains(&(b.id, oi as u32)) {
                                abi::DOP_AWAITED
                            } else {
                                0
                            } | dflags,
                            peer: pos(peer_off)?,
                            rel: packed(Some(oi)),
                            pad: 0,
                        });
                        deps.extend(op.deps.iter().map(|d| DDep {
                            block: d.block(),
                            op: d.op(),
                        }));
                    }
                    for sub in 0..nsub {
                        // One entry per end of a connection this sub-CTA uses.
                        let mut end_of = |key: (u32, u32, u32, u32),
                                          side: Side|
                         -> Result<i32, ExecError> {
                            // Proxied ends have no LL lines: calls of plans with any stay
                            // bulk ([`CudaExecutor::ll_max`]).
                            // Nor `ready`: such connections never go direct.
                            let (slots, sent, acked, ll, ready) = match net_view.get(&(key, side)) {
                                Some(&(slots, sent, acked)) => (slots, sent, acked, 0, 0),
                                None => conn_mem
                                    .get(&key)
                                    .map(|m| (m.slots, m.sent, m.acked, m.ll, m.acked + 8))
                                    .ok_or_else(|| ExecError::Gpu("missing connection".into()))?,
                            };
                            conns.push(DConn {
                                slots,
                                sent,
                                acked,
                                pos: 0,
                                ll,
                                seen: 0,
                                ready,
                                peer: key.1,
                                pad: 0,
                            });
                            Ok(conns.len() as i32 - 1)
                        };
                        let send_conn = match b.send_peer {
                            Some(q) => end_of((r, q, b.channel, sub), Side::Send)?,
                            None => abi::NO_CONN,
                        };
                        let recv_conn = match b.recv_peer {
                            Some(p) => end_of((p, r, b.channel, sub), Side::Recv)?,
                            None => abi::NO_CONN,
                        };
                        blocks.push(DBlock {
                            rank_slot: slot as u32,
                            block: b.id,
                            op_start,
                            nops: b.ops.len() as u32,
                            prog_base,
                            send_conn,
                            recv_conn,
                            sub,
                            nsub,
                            nrecv: b.ops.iter().filter(|o| o.kind.receives()).count() as u32,
                            rel_start: packed(None),
                        });
                    }
                }
                // Scratch buffers of this rank, for the largest count; `input` and `output`
                // come with each call.
                let mut c = RankCtx {
                    rank: r,
                    ..RankCtx::default()
                };
                for b in 2..plan.buffers.len() {
                    let bytes = plan.buffer_elements(b, max_count) * esize;
                    c.base[b] = arenas[gi].take(bytes)?.ptr();
                }
                ctxs.push(c);
                if staging_elems > 0 {
                    staging[r as usize] = Some(arenas[gi].take(staging_elems * esize)?.ptr());
                }
            }
            if blocks.len() as u32 > gpu.sm_count()? {
                return Err(ExecError::Gpu(format!(
                    "GPU {} would run {} thread blocks but has {} multiprocessors; they must all run at once",
                    gpu.ordinal(),
                    blocks.len(),
                    gpu.sm_count()?
                )));
            }
            let arena = &arenas[gi];
            let blocks_dev = arena.take_with(&gpu, &blocks)?.span();
            let ops_dev = arena.take_with(&gpu, &ops)?.span();
            let deps_dev = arena.take_with(&gpu, &deps)?.span();
            let conns_dev = arena.take_with(&gpu, &conns)?.span();
            let ranks_dev = arena.take_with(&gpu, &ctxs)?.span();
            let progress = arena.take((blocks.len().max(1) * 4) as u64)?.span();
            let done = arena.take(size_of::<CallCounters>() as u64)?.span();
            let error = arena.take(size_of::<ErrorRec>() as u64)?.span();
            let trace = arena
                .take((ops.len().max(1) * size_of::<TraceRec>()) as u64)?
                .span();
            let nblocks = blocks.len() as u32;
            let needs_progress = ops.iter().any(|o| o.ndeps > 0);
            let ce = if ce_apart.is_some() || ce_aliased.is_some() {
                Some(CeStreams {
                    aux: gpu.new_stream()?,
                    fork: device::Event::new(&gpu)?,
                    join: device::Event::new(&gpu)?,
                    // Every GPU's count word is filled in once all GPUs have theirs.
                    barrier: BarrierArgs {
                        mine: done.ptr() + offset_of!(CallCounters, barriers) as u64,
                        all: [0; MAX_DIRECT],
                        n: 0,
                        rank: local_ranks.first().copied().unwrap_or(0),
                        timeout: 0,
                        err: error.ptr(),
                    },
                })
            } else {
                None
            };
            out.push(GpuPlan {
                gpu,
                kernels,
                blocks: blocks_dev,
                ops: ops_dev,
                deps: deps_dev,
                conns: conns_dev,
                ranks: ranks_dev,
                progress,
                done,
                error,
                trace,
                op_index,
                arena: None,
                plan_blocks: nblocks / nsub.max(1),
                needs_progress,
                local_ranks,
                ce,
            });
        }
        // Copy-engine barriers wait on every GPU's count word (one process: all GPUs here).
        let mut words = [0u64; MAX_DIRECT];
        for (w, gp) in words.iter_mut().zip(&out) {
            *w = gp.done.ptr() + offset_of!(CallCounters, barriers) as u64;
        }
        let ngpus = out.len() as u32;
        for ce in out.iter_mut().filter_map(|gp| gp.ce.as_mut()) {
            ce.barrier.all = words;
            ce.barrier.n = ngpus;
        }
        let mut arenas: Vec<Option<Arena>> = arenas.into_iter().map(Some).collect();
        for (gp, &gi) in out.iter_mut().zip(&local_gis) {
            let arena = arenas[gi]
                .take()
                .ok_or_else(|| ExecError::Gpu("an arena used twice".into()))?;
            // What was reported is what was taken, to the byte (LL lines included).
            if arena.used() != arena.capacity() {
                return Err(ExecError::Gpu(format!(
                    "GPU {}: the plan reported {} bytes but took {}",
                    gp.gpu.ordinal(),
                    arena.capacity(),
                    arena.used()
                )));
            }
            gp.arena = Some(arena);
            gp.gpu.synchronize()?;
        }
        // Other processes' arenas stay mapped for as long as this executor lives.
        let remote_arenas: Vec<Arena> = arenas.into_iter().flatten().collect();
        let proxy = o
            .group
            .as_ref()
            .filter(|_| !net_ends.is_empty())
            .map(|mesh| Proxy::start(net_ends, Arc::clone(mesh)));
        let allocated: Vec<u64> = out
            .iter()
            .zip(&free_before)
            .map(|(gp, before)| {
                gp.gpu
                    .free_bytes()
                    .map(|after| before.saturating_sub(after))
            })
            .collect::<Result<_, _>>()?;
        let reported_here: Vec<u64> = local_gis.iter().map(|&gi| reported[gi]).collect();
        let launch_threads =
            launch_threads::for_gpus(out.len(), set.launch_threads, set.launch_spin)?;
        let exec = CudaExecutor {
            plan,
            gpus: out,
            spread,
            dtype: o.dtype,
            max_count,
            nsub,
            shape,
            ll: CallLimits {
                sub_bytes: set.ll_sub_bytes,
                bulk_sub_bytes: set.bulk_sub_bytes,
                ..CallLimits::new(ll_max)
            },
            ll_epoch: set.ll_epoch,
            timeout: set.timeout,
            alias_safe,
            ce_apart,
            ce_aliased,
            ce_min,
            staging,
            local_gis,
            _remote_arenas: remote_arenas,
            _proxy: proxy,
            setup: SetupReport {
                compile,
                from_cache,
                load: Duration::ZERO,
                allocated_bytes: allocated,
                reported_bytes: reported_here,
                module_bytes,
                direct: direct_count,
                launch_threads: 1 + launch_threads.as_ref().map_or(0, |l| l.workers()),
            },
            launch_threads,
        };
        // Warm-up: an empty call runs the kernel once on every GPU (the driver's first-launch
        // work) and moves every connection's counters through one handshake.
        // Dummy pointers in the plan's own placement (equal send and receive pointers would
        // read as an in-place call, which an out-of-place plan may only take with staging).
        let dummy = if exec.plan.inplace {
            (0, 0)
        } else {
            (0, device::REGION_ALIGN)
        };
        let null: Vec<(u64, u64)> = vec![dummy; n as usize];
        let own: Vec<sys::CUstream> = exec
            .gpus
            .iter()
            .map(|g| g.gpu.stream().cu_stream())
            .collect();
        // SAFETY: coll's own live streams, one per GPU in order; with count 0 no element is
        // read or written, so the null buffers are never dereferenced.
        unsafe { exec.enqueue_inner(&own, &null, 0, ReduceOp::Sum, false) }?;
        exec.finish()?;
        let mut exec = exec;
        exec.setup.load = start.elapsed().saturating_sub(compile);
        Ok(exec)
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The GPU index (into the ordinals given to [`load`](Self::load)) of user rank `q`: where
    /// its buffers must live. `None` for a rank that runs in another process (a group).
    pub fn rank_gpu(&self, q: u32) -> Option<usize> {
        let g = gpu_of(q, self.plan.ranks, self.spread.gpus) as usize;
        self.local_gis.iter().position(|&x| x == g)
    }

    /// The GPU user rank `q` runs on, when this process drives it ([`rank_gpu`](Self::rank_gpu)).
    pub fn rank_device(&self, q: u32) -> Option<&Gpu> {
        self.rank_gpu(q).and_then(|i| self.gpu(i))
    }

    /// The user ranks whose GPU this process drives, in order (all of them without a group).
    pub fn local_users(&self) -> Vec<u32> {
        (0..self.plan.ranks)
            .filter(|&q| self.rank_gpu(q).is_some())
            .collect()
    }

    pub fn gpu(&self, i: usize) -> Option<&Gpu> {
        self.gpus.get(i).map(|g| &g.gpu)
    }

    /// coll's own stream on every GPU, in order: what [`launch`](Self::launch) uses.
    pub fn streams(&self) -> Vec<Arc<CudaStream>> {
        self.gpus.iter().map(|g| g.gpu.stream().clone()).collect()
    }

    /// Changes the timeout of later calls (a call captured in a graph keeps its own).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Whether in-place calls of this out-of-place plan run on the aliased buffers directly
    /// ([`placement::in_place_safe`]); otherwise they go through staging.
    pub fn alias_safe(&self) -> bool {
        self.alias_safe
    }

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

    /// The root rooted collectives were loaded for ([`LoadOptions::root`]).
    pub fn root(&self) -> u32 {
        self.spread.rotate
    }

    /// A call's buffer sizes at NCCL's `count`, in elements.
    pub fn call_shape(&self, count: u64) -> CallShape {
        CallShape {
            count,
            esize: self.dtype.size() as u64,
            in_elems: self.plan.buffer_elements(0, count),
            out_elems: self.plan.buffer_elements(1, count),
        }
    }

    /// The one place calls are enqueued: per GPU, the placement copies before the kernel,
    /// the kernel, the avg scaling, the copies after it; all on `streams[gpu]`.
    ///
    /// # Safety
    /// As [`enqueue_raw`](Self::enqueue_raw).
    unsafe fn enqueue_inner(
        &self,
        streams: &[sys::CUstream],
        bufs: &[(u64, u64)],
        count: u64,
        op: ReduceOp,
        trace: bool,
    ) -> Result<CallInfo, ExecError> {
        let started = Instant::now();
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
        let shape = self.call_shape(count);
        // Resolve every rank before enqueueing anything, so a refused call enqueues nothing.
        // Ranks of other processes (a group) are their business: left out.
        let calls: Vec<placement::RankCall> = (0..n)
            .map(|p| {
                let q = self.spread.user(p);
                if !self.local_gis.contains(&(self.spread.gpu(p) as usize)) {
                    return Ok(placement::RankCall::default());
                }
                placement::rank_call(
                    plan,
                    q,
                    &shape,
                    bufs[q as usize],
                    self.alias_safe,
                    self.staging[p as usize],
                )
            })
            .collect::<Result<_, _>>()?;
        let cfg = self.call_config(count);
        // The call's slicing for the kernel, the same for every GPU's part (the chunk factor
        // fits 32 bits, checked at load).
        let slicer = Slicer::new(count, plan.chunk_factor as u32, cfg.slicing);
        let cycles = (self.timeout.as_secs_f64() * 2.0e9) as u64;
        let (mode_direct, direct, staged_because) =
            self.direct_mode(&calls, &shape, cfg.protocol)?;
        // A copy-engine call instead of the kernel: its copies, in bytes, per GPU below.
        let extents = self.ce_copies_for(mode_direct, &shape, trace).map(|c| {
            let bufs: Vec<(u64, u64)> = calls.iter().map(|c| (c.input, c.output)).collect();
            copy_engine::extents(c, plan.chunk_factor, count, shape.esize, &bufs)
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
                local_ranks: &gp.local_ranks,
                ce: gp.ce.as_ref(),
            })
            .collect();
        let (nsub, ll_epoch) = (self.nsub.max(1), self.ll_epoch);
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
                if let Some(cp) = c.before {
                    // A small call's input copy costs a launch of its own (1-2 us); the
                    // kernel does it instead where each sub-CTA can copy exactly what it
                    // touches: one block per rank (placement copies the whole input).
                    let whole = cp.dst == c.input && cp.bytes == shape.in_elems * shape.esize;
                    if cfg.protocol == Protocol::Ll
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
                unsafe { enqueue_ce(g, stream, ext, cycles) }?;
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
                        SLOT_BYTES,
                        SLOTS,
                        g.error,
                        cycles,
                        g.trace,
                        &CallMode {
                            proto: Proto::from(cfg.protocol).code(),
                            active: cfg.active,
                            nsub,
                            flags: if g.needs_progress { MODE_PROGRESS } else { 0 } | mode_direct,
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
                if let Some(cp) = calls[p as usize].after {
                    // SAFETY: from this rank's staging region to the caller's receive buffer
                    // of `out_elems` (contract), after the kernel on the same stream.
                    unsafe { g.gpu.copy_async(stream, cp.dst, cp.src, cp.bytes) }?;
                }
            }
            Ok(())
        };
        let prepared = Instant::now();
        let r = match &self.launch_threads {
            Some(l) => l.run(parts.len(), part),
            None => (0..parts.len()).try_for_each(part),
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
    /// least [`GpuSettings::ce_min`] bytes, not traced (a trace records the kernel's ops).
    fn ce_copies_for(
        &self,
        mode_direct: u32,
        shape: &placement::CallShape,
        trace: bool,
    ) -> Option<&[copy_engine::CeCopy]> {
        let bytes = shape.in_elems.max(shape.out_elems) * shape.esize;
        if mode_direct == 0 || trace || self.ce_min == 0 || bytes < self.ce_min {
            return None;
        }
        let set = if mode_direct & MODE_ALIASED != 0 {
            &self.ce_aliased
        } else {
            &self.ce_apart
        };
        set.as_deref()
    }

    /// How each block's op list is repeated at `count`, in the protocol the call uses:
    /// enough iterations that the largest op's slice of its chunks fits one slot once every
    /// slice width is rounded up to the alignment ([`slicing`], [`slicing_ll`]).
    pub fn slicing(&self, count: u64) -> Slicing {
        self.call_config(count).slicing
    }

    /// How a call of `count` runs: its protocol (what serves the call, for logs), slicing,
    /// CTAs per plan block and threads per CTA ([`call_config`]).
    pub fn call_config(&self, count: u64) -> CallConfig {
        call_config(
            self.shape,
            self.dtype.size() as u64,
            self.nsub,
            count,
            self.ll,
        )
    }

    /// How many messages skip staging in bulk calls ([`direct`]); all zero in a group or
    /// with direct messages turned off.
    pub fn direct_count(&self) -> DirectCount {
        self.setup.direct
    }

    /// Calls whose largest message is at most this many bytes use LL.
    pub fn ll_max(&self) -> u64 {
        self.ll.max
    }

    /// The last traced call as Chrome-trace JSON (chrome://tracing, Perfetto): one process per
    /// rank, one thread per block, each op a span named by its kind and source line
    /// ([`trace::chrome_json`]).
    pub fn trace(&self) -> Result<String, ExecError> {
        let mut records: Vec<trace::Record> = Vec::new();
        for gp in &self.gpus {
            let mut t = vec![TraceRec::default(); gp.op_index.len()];
            gp.region(gp.trace)?.read(&gp.gpu, &mut t)?;
            records.extend(gp.op_index.iter().copied().zip(t));
        }
        Ok(trace::chrome_json(&self.plan, &self.spread, &records))
    }

    /// Waits for coll's own streams, then [`check_error`](Self::check_error).
    pub fn finish(&self) -> Result<(), ExecError> {
        for gp in &self.gpus {
            gp.gpu.synchronize()?;
        }
        self.check_error()
    }

    /// Reports a rank that timed out in an earlier call, naming its op and source line. Call
    /// it once the streams the calls went to are synchronised.
    pub fn check_error(&self) -> Result<(), ExecError> {
        for gp in &self.gpus {
            let mut rec = ErrorRec::default();
            gp.region(gp.error)?
                .read(&gp.gpu, std::slice::from_mut(&mut rec))?;
            if rec.failed != 0 {
                let fault = Fault::from_code(rec.what);
                if fault == Some(Fault::Barrier) {
                    return Err(ExecError::Timeout {
                        at: format!("rank {} (a copy-engine call)", rec.rank),
                        waiting: "waiting for the other GPUs at the call's barrier".into(),
                        waited: self.timeout,
                    });
                }
                let what = match fault {
                    Some(Fault::Dep) => "waiting for a dependency",
                    Some(Fault::Recv) => "waiting to receive",
                    Some(Fault::Ready) => {
                        "waiting for the receiver to release its buffer (direct send)"
                    }
                    Some(Fault::SendSlot | Fault::Barrier) | None => "waiting for room to send",
                };
                return Err(ExecError::Timeout {
                    at: coll_compiler::plan::location(
                        &self.plan,
                        rec.rank,
                        rec.block,
                        Some(rec.op),
                    ),
                    waiting: what.into(),
                    waited: self.timeout,
                });
            }
        }
        Ok(())
    }
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
unsafe fn enqueue_ce(
    g: &GpuCall<'_>,
    stream: sys::CUstream,
    ext: &[copy_engine::Extent],
    cycles: u64,
) -> Result<(), ExecError> {
    let ce = g
        .ce
        .ok_or_else(|| ExecError::Gpu("a copy-engine call on a GPU without its stream".into()))?;
    let barrier = BarrierArgs {
        timeout: cycles,
        ..ce.barrier
    };
    let mine = ext.iter().filter(|e| g.local_ranks.contains(&e.from));
    let (local, peer): (Vec<&copy_engine::Extent>, Vec<_>) =
        mine.partition(|e| g.local_ranks.contains(&e.to));
    // SAFETY: the barrier holds every GPU's live count word (in its arena, set at load) and
    // this GPU's error record.
    unsafe { g.kernels.launch_barrier(g.gpu, stream, &barrier) }?;
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
    // SAFETY: as the first barrier.
    unsafe { g.kernels.launch_barrier(g.gpu, stream, &barrier) }
}

impl Drop for CudaExecutor {
    fn drop(&mut self) {
        // Calls may still run on the caller's streams: wait for every GPU before the arenas
        // (staging, flags, instructions) are freed under them.
        for gp in &self.gpus {
            let _ = gp.gpu.synchronize_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coll_compiler::topology::Topology;
    use coll_compiler::{CompileOptions, compile};

    fn ring(n: usize) -> Plan {
        ring_x(n, None)
    }

    /// The shipped ring on `n` ranks, with the header's instances or `instances`.
    fn ring_x(n: usize, instances: Option<u32>) -> Plan {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../algorithms/allreduce_ring.coll"
        );
        let m =
            coll_lang::load_bytes(path, std::fs::read(path).expect("ring ships")).expect("valid");
        let topo = Topology::parse(&format!("nvswitch:{n}")).expect("preset");
        let mut o = CompileOptions::default();
        o.elaborate.instances = instances;
        compile(&m, &topo, &o).expect("compiles").lowered.plan
    }

    fn spread(p: &Plan, g: u32) -> Spread {
        Spread::new(p, g, 0)
    }

    /// What one connection end takes per sub-CTA on the receiving GPU and the sending one
    /// together: bulk slots, LL lines and the two counters.
    fn staging() -> u64 {
        region_size(u64::from(SLOTS * SLOT_BYTES))
            + region_size(u64::from(LL_SLOTS * LL_SLOT_BYTES))
            + region_size(8)
            + region_size(16)
    }

    #[test]
    fn arena_holds_staging_scratch_and_instructions() {
        // Ring on 2 GPUs: each GPU ends one incoming connection (the bulk slots, the LL slots, a
        // flag) and one outgoing (a flag), and holds one block of 3 ops.
        let sizes = arena_sizes(&ring(2), &spread(&ring(2), 2), 4, 1 << 20, 1, 0);
        let staging = staging();
        for s in &sizes {
            assert!(*s > staging && *s < staging + 64 * 1024, "{sizes:?}");
        }
        // Eight ranks on two GPUs: four connections end on each.
        let sizes = arena_sizes(&ring(8), &spread(&ring(8), 2), 4, 1 << 20, 1, 0);
        assert!(sizes.iter().all(|&s| s > 4 * staging), "{sizes:?}");
    }

    #[test]
    fn blocks_split_to_fill_the_sms_up_to_the_cap() {
        // Ring: one block per rank. 2 ranks on 2 GPUs of 132 SMs: capped.
        assert_eq!(
            split_factor(&ring(2), &spread(&ring(2), 2), 132, MAX_SPLIT),
            MAX_SPLIT
        );
        // 8 ranks on one GPU of 20 SMs: 8 blocks there, 20 / 8 = 2 CTAs each.
        assert_eq!(
            split_factor(&ring(8), &spread(&ring(8), 1), 20, MAX_SPLIT),
            2
        );
        // A pinned cap wins below the SM bound, never above it.
        assert_eq!(split_factor(&ring(2), &spread(&ring(2), 2), 132, 8), 8);
        assert_eq!(split_factor(&ring(8), &spread(&ring(8), 1), 20, 100), 2);
        // More blocks than SMs still runs each block once.
        assert_eq!(
            split_factor(&ring(8), &spread(&ring(8), 1), 4, MAX_SPLIT),
            1
        );
        assert_eq!(split_factor(&ring(2), &spread(&ring(2), 2), 132, 0), 1);
    }

    #[test]
    fn arena_grows_with_the_split() {
        // Every sub-CTA has its own staging and flags: 16 subs need at least 16 times the
        // staging of one.
        let one = arena_sizes(&ring(2), &spread(&ring(2), 2), 4, 1 << 20, 1, 0);
        let many = arena_sizes(&ring(2), &spread(&ring(2), 2), 4, 1 << 20, 16, 0);
        let staging = staging();
        for (a, b) in one.iter().zip(&many) {
            assert!(*b >= *a + 15 * staging, "{one:?} -> {many:?}");
        }
    }

    /// The kernel's `chunk_start` and `slice_of`, to check the host's slicing against.
    fn kernel_slice(count: u64, k: u64, c: u64, l: u64, sl: Slicing) -> (u64, u64) {
        let start = |c: u64| (c / k) * count + (c % k) * (count / k) + (c % k).min(count % k);
        let (s, e) = (start(c), start(c + 1));
        let w = (e - s).div_ceil(sl.iters).div_ceil(sl.align) * sl.align;
        ((s + l * w).min(e), (s + (l + 1) * w).min(e))
    }

    #[test]
    fn the_kernels_division_free_pieces_are_the_slices() {
        // Slicer does the divisions once per call on the host; its pieces must be exactly
        // the slices the host plans with, for every chunk and iteration.
        for k in [1u64, 2, 3, 7, 8, 64] {
            for count in [0u64, 1, 5, 63, 64, 4099, 1_000_003, 1 << 33] {
                for (iters, align) in [(1, 1), (1, 32), (3, 1), (8, 4), (16, 3), (5, 128)] {
                    let sl = Slicing { iters, align };
                    let s = Slicer::new(count, k as u32, sl);
                    for c in 0..3 * k {
                        let pos = ChunkPos::of(c, k).expect("small chunk");
                        for l in 0..iters {
                            assert_eq!(
                                s.piece(pos, l),
                                kernel_slice(count, k, c, l, sl),
                                "count {count} k {k} {sl:?} chunk {c} iteration {l}"
                            );
                        }
                    }
                }
            }
        }
        assert_eq!(ChunkPos::of(17, 8), Some(ChunkPos { slice: 2, pos: 1 }));
        assert_eq!(ChunkPos::of(8 << 32, 8), None);
    }

    #[test]
    fn slices_fit_a_slot_and_stay_aligned() {
        let plan = ring(2);
        let k = plan.chunk_factor;
        for esize in [1u64, 2, 4, 8] {
            let slot = u64::from(SLOT_BYTES) / esize;
            // 1 GiB once gave odd widths (130 945 f32): every slice after the first unaligned.
            for count in [1u64, 4099, 1_000_003, 1 << 22, (1 << 30) / esize, 3 << 26] {
                let sl = slicing(k, widest_op(&plan), esize, 16, count, BULK_SUB_BYTES);
                assert_eq!((sl.align * esize) % 16, 0, "{sl:?}");
                let mut covered = 0;
                for c in 0..k {
                    for l in 0..sl.iters {
                        let (lo, hi) = kernel_slice(count, k, c, l, sl);
                        assert!(hi - lo <= slot, "count {count} esize {esize}: {sl:?}");
                        if count % (k * 16) == 0 {
                            assert_eq!((lo * esize) % 16, 0, "count {count}: {sl:?} l {l}");
                        }
                        covered += hi - lo;
                    }
                }
                assert_eq!(covered, count, "{sl:?}");
                assert!(
                    sl.iters <= 16 || sl.iters.is_multiple_of(16),
                    "uneven rounds: {sl:?}"
                );
            }
        }
        // A chunk of exactly 8 slots takes 8 iterations, one round of 8 sub-CTAs (it took
        // 9, two rounds, with the first and widest slice on one sub-CTA).
        let chunk = 8 * u64::from(SLOT_BYTES) / 4;
        assert_eq!(slicing(32, 1, 4, 8, 32 * chunk, BULK_SUB_BYTES).iters, 8);
        // Beyond a round, full rounds: 17 slots' worth on 8 sub-CTAs is 24 iterations.
        assert_eq!(
            slicing(32, 1, 4, 8, 32 * (chunk * 17 / 8), BULK_SUB_BYTES).iters,
            24
        );
    }

    #[test]
    fn ll_lines_are_part_of_the_arena() {
        // Per sub-CTA of every connection, the receiver holds LL_SLOTS slots of lines: the
        // 16 sub-CTAs of the 2-rank ring add exactly 15 more connection ends than one, each
        // with its LL slots (and the instruction arrays grow by a few hundred bytes).
        let r = ring(2);
        let one = arena_sizes(&r, &spread(&r, 2), 4, 1 << 20, 1, 0);
        let many = arena_sizes(&r, &spread(&r, 2), 4, 1 << 20, 16, 0);
        for (a, b) in one.iter().zip(&many) {
            let grown = b - a;
            assert!(
                grown >= 15 * staging() && grown < 15 * staging() + 16 * 1024,
                "{one:?} -> {many:?}"
            );
        }
        // LL costs an eighth of bulk staging.
        assert_eq!(
            u64::from(SLOTS * SLOT_BYTES) / u64::from(LL_SLOTS * LL_SLOT_BYTES),
            8
        );
    }

    #[test]
    fn small_calls_use_ll_and_large_ones_bulk() {
        let r = ring(2);
        let sh = ChunkShape::of(&r);
        let w = sh.widest;
        // f32 ring allreduce on 2 ranks: the largest message is half the call.
        let at =
            |bytes: u64, ll_max: u64| call_config(sh, 4, 64, bytes / 4, CallLimits::new(ll_max));
        assert_eq!(at(8, LL_MAX_BYTES).protocol, Protocol::Ll);
        assert_eq!(at(64 << 10, LL_MAX_BYTES).message_bytes, 32 << 10);
        assert_eq!(at(2 * LL_MAX_BYTES, LL_MAX_BYTES).protocol, Protocol::Ll);
        assert_eq!(
            at(2 * LL_MAX_BYTES + 8, LL_MAX_BYTES).protocol,
            Protocol::Bulk
        );
        assert_eq!(at(1 << 30, LL_MAX_BYTES).protocol, Protocol::Bulk);
        // 0 turns LL off; a huge threshold uses it at every size.
        assert_eq!(at(8, 0).protocol, Protocol::Bulk);
        assert_eq!(at(1 << 30, u64::MAX).protocol, Protocol::Ll);
        // Tiny calls: one CTA of one warp per block; 64 KiB: 32 CTAs of 1 KiB of data, a line
        // per thread.
        let tiny = at(8, LL_MAX_BYTES);
        assert_eq!((tiny.active, tiny.threads, tiny.slicing.iters), (1, 32, 1));
        let mid = at(64 << 10, LL_MAX_BYTES);
        assert_eq!((mid.active, mid.threads), (32, 128));
        // Bulk keeps its full CTAs.
        assert_eq!(at(1 << 30, LL_MAX_BYTES).threads, THREADS);
        // An op too wide for LL lines (a line per chunk lost to padding) stays bulk.
        assert!(ll_fits(w, 8));
        assert!(!ll_fits(1024, 4));
        assert_eq!(
            call_config(
                ChunkShape { widest: 1024, ..sh },
                4,
                64,
                8,
                CallLimits::new(u64::MAX)
            )
            .protocol,
            Protocol::Bulk
        );
        // More bytes per sub-CTA spread a call over fewer, with more threads each.
        let narrow = call_config(
            sh,
            4,
            64,
            (64 << 10) / 4,
            CallLimits {
                sub_bytes: 4096,
                ..CallLimits::new(LL_MAX_BYTES)
            },
        );
        assert_eq!((narrow.active, narrow.threads), (8, 512));
    }

    #[test]
    fn large_calls_use_bulk_even_when_their_messages_are_small() {
        // 16 instances of the ring on 4 ranks: 64 chunks, so a 32 MiB call has 512 KiB
        // messages, small enough for LL, yet LL moved it at 0.61x bulk's speed.
        let sh = ChunkShape::of(&ring_x(4, Some(16)));
        let at = |bytes: u64| call_config(sh, 4, 64, bytes / 4, CallLimits::new(LL_MAX_BYTES));
        let big = at(32 << 20);
        assert!(big.message_bytes <= LL_MAX_BYTES, "{big:?}");
        assert_eq!(big.protocol, Protocol::Bulk);
        let cap = LL_CALL_FACTOR * LL_MAX_BYTES;
        assert_eq!(cap, 4 << 20);
        assert_eq!(at(cap).protocol, Protocol::Ll);
        assert_eq!(at(cap + 64 * 4).protocol, Protocol::Bulk);
        // The one knob moves both limits: COLL_GPU_LL_MAX=1G uses LL for a 1 GiB call.
        let ll = |bytes: u64| call_config(sh, 4, 64, bytes / 4, CallLimits::new(1 << 30)).protocol;
        assert_eq!(ll(1 << 30), Protocol::Ll);
    }

    #[test]
    fn ll_slices_fit_a_slot_of_lines_and_stay_aligned() {
        let plan = ring(2);
        let k = plan.chunk_factor;
        let lines = u64::from(LL_SLOT_BYTES / 16);
        for esize in [1u64, 2, 4, 8] {
            for widest in [1u64, 3, 8, 64] {
                for count in [0u64, 1, 3, 4099, 65_537, 1 << 20, 3 << 22] {
                    for nsub in [1u32, 7, 64] {
                        let sh = ChunkShape {
                            k,
                            widest,
                            user_chunks: k,
                        };
                        let c = call_config(sh, esize, nsub, count, CallLimits::new(u64::MAX));
                        let sl = c.slicing;
                        assert_eq!(c.protocol, Protocol::Ll);
                        assert!(c.active >= 1 && c.active <= nsub, "{c:?}");
                        assert!(c.threads.is_power_of_two() && (32..=THREADS).contains(&c.threads));
                        assert_eq!((sl.align * esize) % 8, 0, "{sl:?} esize {esize}");
                        let mut covered = 0;
                        for l in 0..sl.iters {
                            // The widest message of iteration l: `widest` chunks, each
                            // starting on a fresh line.
                            let mut need = 0;
                            for c in 0..k {
                                let (lo, hi) = kernel_slice(count, k, c, l, sl);
                                if count % (k * 8) == 0 {
                                    assert_eq!((lo * esize) % 8, 0, "count {count}: {sl:?}");
                                }
                                need = need.max(((hi - lo) * esize).div_ceil(8));
                                covered += hi - lo;
                            }
                            assert!(
                                widest * need <= lines,
                                "esize {esize} widest {widest} count {count}: {sl:?}"
                            );
                        }
                        assert_eq!(covered, count, "{sl:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn rooted_plans_rotate_onto_the_roots_gpu() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../algorithms/broadcast_ring.coll"
        );
        let m = coll_lang::load_bytes(path, std::fs::read(path).expect("ships")).expect("valid");
        let topo = Topology::parse("nvswitch:4").expect("preset");
        let b = compile(&m, &topo, &CompileOptions::default())
            .expect("compiles")
            .lowered
            .plan;
        // Root 2 on 4 GPUs: plan rank 0 (the root's part) runs where user rank 2 lives.
        let s = Spread::new(&b, 4, 2);
        assert_eq!((0..4).map(|p| s.user(p)).collect::<Vec<_>>(), [2, 3, 0, 1]);
        assert_eq!((0..4).map(|p| s.gpu(p)).collect::<Vec<_>>(), [2, 3, 0, 1]);
        // Unrooted collectives ignore the root.
        let r = ring(4);
        assert_eq!(Spread::new(&r, 4, 2).rotate, 0);
    }

    #[test]
    fn placement_staging_is_part_of_the_arena() {
        let r = ring(2);
        let sp = spread(&r, 2);
        let without = arena_sizes(&r, &sp, 4, 1 << 20, 1, 0);
        let with = arena_sizes(&r, &sp, 4, 1 << 20, 1, 1 << 20);
        for (a, b) in without.iter().zip(&with) {
            assert_eq!(*b, *a + region_size(4 << 20), "{without:?} -> {with:?}");
        }
    }

    #[test]
    fn ranks_spread_over_gpus_in_order() {
        assert_eq!(
            (0..8).map(|r| gpu_of(r, 8, 2)).collect::<Vec<_>>(),
            [0, 0, 0, 0, 1, 1, 1, 1]
        );
        assert_eq!(
            (0..3).map(|r| gpu_of(r, 3, 3)).collect::<Vec<_>>(),
            [0, 1, 2]
        );
    }
}
