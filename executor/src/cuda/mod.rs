//! The GPU executor: plans run by one interpreter kernel ([`KERNEL_SOURCE`], from
//! `kernel/`, whose ABI with the host is [`abi`], generated from `kernel/abi.h`),
//! compiled by NVRTC at run time (the plan's element type only, to machine code for the GPU)
//! and cached on disk, one CTA per (rank, thread block), over
//! peer-mapped memory between the GPUs of one process — or, in a multi-process run
//! ([`LoadOptions::group`]), one GPU per process, peers' memory mapped through CUDA IPC and
//! connections across a network hop staged in host memory and moved by the host proxy
//! ([`proxy`]).
//!
//! Layers, as cudarc's: [`device`] wraps the driver calls this module needs in small RAII
//! types; [`placement`] turns a call's buffers into the plan's `input` and `output`;
//! [`config`] cuts a call into protocol, slices and CTAs; [`launch_threads`] enqueues a
//! call's GPUs at once. Loading ([`CudaExecutor::load`]) is a sequence of steps, each in its
//! own module: [`layout`] places every region of every GPU's arena before anything is
//! allocated, `setup` opens the GPUs, allocates the arenas and takes the layout's regions,
//! [`encode`] turns the plan into each GPU's instruction arrays. Calls are enqueued by
//! `call` (the kernel) and [`copy_engine`] (copy-engine calls); [`fault`] turns the device's
//! error record into errors naming the `.coll` line, and aborts calls in flight
//! ([`CudaExecutor::abort`]).
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
//!   [`CudaExecutor::check_error`] once the streams are synchronised, or by
//!   [`CudaExecutor::poll_error`] at any time.
//! - [`CudaExecutor::abort`], from any thread, makes every wait of the calls in flight give
//!   up at once; so does a peer process's failure in a group (the host proxy watches the
//!   mesh). An aborted executor refuses every later call.
//!
//! # Protocols
//! Each call moves its messages with one of three protocols ([`Protocol`]), chosen from the size
//! of its largest message ([`call_config`]): bulk (staging slots, a fence and a `sent`
//! counter per message) for large calls, LL (16-byte lines of 8 bytes of data and two copies
//! of a flag, the message's sequence number, polled by the receiver: no fence, no counter
//! round trip) up to [`GpuSettings::ll_max`] bytes per message (unless set, or
//! `COLL_GPU_LL_MAX`: [`config::ll_auto_max`], [`LL_MAX_BYTES`] or from 4 ranks where LL128
//! serves [`LL_MAX_BYTES_BESIDE_LL128`]), on calls whose larger user buffer is at most
//! [`LL_CALL_FACTOR`] times that (a large call of many small messages, as many instances make,
//! streams better in bulk). Between the two, LL128 (128-byte lines of 120 bytes of data and a
//! flag, polled by the receiver's warps) serves calls up to [`GpuSettings::ll128_max`] bytes
//! per message ([`config::ll128_auto_max`]: by the plan's rank count, never for alltoall)
//! where every connection joins two GPUs over NVLink and no block has several peers
//! ([`config::CallLimits::ll128`]). All three share each connection's position and
//! acknowledgment counters, so calls of any follow each other freely; `kernel/common.cuh`
//! states the protocol's invariants. A call runs as many CTAs per plan block as it has slices, and
//! small LL calls run with fewer threads per CTA ([`CallConfig`]). Plans with connections
//! the host proxy forwards (across the network in a multi-process run) stay bulk; the
//! processes of a group must see the same LL threshold (a mismatch times out, naming the
//! op); LL128's they agree at load, each taking the least of theirs (one that sees a single
//! GPU cannot tell NVLink from PCIe and offers none).
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
//! between two barriers ([`copy_engine`]; [`CallInfo::copy_engines`]). A plan that is a
//! one-shot allreduce (every rank sends its whole input to every other rank) runs its calls
//! of at most [`GpuSettings::oneshot_max`] bytes as one exchange of LL lines in a kernel of
//! its own, with no interpreter ([`oneshot`]; [`CallInfo::oneshot`]).
//!
//! Blocks of several peers (a plan block with `send_also` or `recv_also`) run in either
//! protocol: each of their sends goes into the slot of every send connection, each receive
//! combines one message from every receive connection. The kernel runs such a block on a
//! simple interpreter of its own (`kernel/multi.cuh`), in `_multi` twins of the entries that
//! a GPU holding such a block launches ([`abi::MODE_SEVERAL`]), so the entries every other
//! GPU launches are the tuned single-peer ones unchanged; none of their messages goes direct
//! ([`direct`]), and plans with any never run on the copy engines. A block side may have at
//! most [`abi::MAX_BLOCK_CONNS`] peers.
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
mod call;
pub mod comm;
pub mod config;
pub mod copy_engine;
pub mod device;
pub mod encode;
pub mod fault;
pub mod launch_threads;
pub mod layout;
pub mod oneshot;
pub mod proxy;
pub mod run;
pub mod settings;
mod setup;
pub mod topo;
pub mod trace;
pub mod tuned;

// The plan analyses the GPU path runs on, which live with the plan in the compiler.
pub use coll_compiler::gpu::{direct, placement};
pub use comm::Comm;

pub use config::{
    CallConfig, CallLimits, ChunkPos, ChunkShape, LlLimits, MAX_SPLIT, Protocol, Slicer, Slicing,
    call_config, ll_fits, ll128_fits, slicing, slicing_ll, slicing_ll128, split_factor, widest_op,
};
pub use settings::{CeMin, GpuSettings, LaunchMode, SettingsError, SlotSize, Threshold};

use crate::dtype::{DType, ReduceOp};
use crate::error::ExecError;
use crate::net::mesh::Mesh;
use coll_compiler::plan::Plan;
use coll_lang::builtins::CollectiveKind;
use copy_engine::CeStreams;
use cudarc::driver::{CudaStream, sys};
use device::{Arena, DeviceBuffer, Gpu, Span, TypedKernels};
use layout::Layout;
use placement::CallShape;
use proxy::Proxy;
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
    "#line 1 \"multi.cuh\"\n",
    include_str!("kernel/multi.cuh"),
    "#line 1 \"oneshot.cuh\"\n",
    include_str!("kernel/oneshot.cuh"),
    "#line 1 \"entries.cu\"\n",
    include_str!("kernel/entries.cu"),
);

/// Staging per connection and sub-CTA: `SLOTS` slots of at most `SLOT_BYTES` (a plan's own
/// size is [`config::slot_bytes`]). Two slots, the deadlock check's assumption
/// ([`coll_compiler::DEFAULT_SLOTS`]), keep one message in flight while the next is written;
/// with a connection split over many sub-CTAs there are many in flight anyway. Four cost
/// twice the memory (287 against 153 MB per GPU for the 16-instance ring on 2 GPUs) for no
/// clear bandwidth (bench/results/2026-11-22-h200x2-slots.md).
pub const SLOT_BYTES: u32 = 512 * 1024;
pub const SLOTS: u32 = 2;
/// The least slot [`GpuSettings::slot_bytes`] may set: a slice of the widest op must fit one,
/// 16-byte aligned.
pub const SLOT_BYTES_MIN: u32 = 4096;
/// Bulk slots a GPU holds before [`config::slot_bytes`] halves them: 64 MiB, what the
/// 16-instance rings on 2 GPUs (128 CTAs a GPU) hold with slots of 256 KiB. Halving cost
/// those rings 0.3-1% from 32 MiB to 1 GiB and saved 67 MB a GPU (170 to 103 MB);
/// halving again (128 KiB) cost reducescatter 4-7% from 256 MiB
/// (bench/results/2026-11-29-h200x2-staging.md).
pub const SLOT_BUDGET_BYTES: u64 = 64 << 20;
/// Bytes of one connection's staging with slots of `slot_bytes`: the slots, then one message
/// length per slot (which the host proxy reads for connections it forwards).
pub const fn staging_bytes(slot_bytes: u32) -> u64 {
    (SLOTS as u64) * (slot_bytes as u64) + 8 * SLOTS as u64
}
/// Threads per CTA: the kernel's bound ([`abi::MAX_THREADS`]), which its register use fits.
pub const THREADS: u32 = abi::MAX_THREADS as u32;
/// LL staging per connection and sub-CTA: `LL_SLOTS` slots of `LL_SLOT_BYTES` of 16-byte
/// lines, each line carrying 8 bytes of data, then as many LL128 slots of 128-byte lines. The LL limits live with the rule that reads them
/// (`coll_compiler::gpu::protocol`), which the cost model shares, so the model costs each call
/// in the protocol it runs in.
pub use coll_compiler::gpu::protocol::{LL_CALL_FACTOR, LL_MAX_BYTES, LL_SLOT_BYTES};
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
/// best of 1-16 KiB on 2 x H200, bench/NOTES.md, Protocols: LL and bulk); [`GpuSettings::ll_sub_bytes`] overrides it.
pub const LL_SUB_BYTES: u64 = 1024;
/// Calls beyond LL's limits whose largest message is at most this many bytes, and whose larger
/// user buffer is at most [`LL_CALL_FACTOR`] times that, use LL128 in plans of fewer than 4
/// ranks where the plan allows it ([`config::ll128_auto_max`], [`config::CallLimits::ll128`]).
/// Measured on 2 x H200 against bulk (bench/results/2026-11-28-h200x2-ll128.md), calls just
/// above LL's limits gain most: with 1-MiB messages allreduce 2 MiB 1.29x, allgather 2 MiB
/// 1.18x, reducescatter 2 MiB 1.10x, broadcast 1 MiB 1.28x; with 2-MiB messages broadcast and
/// allreduce still gained (1.24x, 1.12x) but reducescatter lost (0.94x), and from 16 MiB calls
/// every collective lost.
pub const LL128_MAX_BYTES: u64 = 1 << 20;
/// [`LL128_MAX_BYTES`] for plans of 4 ranks or more: a ring's steps there are more and each
/// bulk step's handshake costs more, so LL128 pays up to larger messages. Measured on 4 x H200
/// (bench/results/2026-11-29-h200x4-ll128.md) with 2- and 4-MiB messages: allreduce ring 8 and
/// 16 MiB 1.24x and 1.10x, allgather and reducescatter 1.12-1.13x and 1.02x, broadcast ring
/// (16 pieces) 16-32 MiB 1.33x and 1.12x; 8-MiB messages lost (0.95-0.98x).
pub const LL128_MAX_BYTES_WIDE: u64 = 4 << 20;
/// LL's message threshold in plans of 4 ranks or more whose calls may run LL128 (else
/// [`LL_MAX_BYTES`]): there LL128's calls took 17-25 us from 512 KiB up, where LL's 2 MiB
/// ring calls took 19.5-29 (bench/results/2026-11-29-h200x4-ll128.md): with 512-KiB
/// messages allreduce, allgather and reducescatter rings were 1.12-1.17x faster in LL128,
/// and a 4 MiB broadcast ring 1.16x; with 256-KiB messages LL was as fast or faster.
pub const LL_MAX_BYTES_BESIDE_LL128: u64 = 256 << 10;
/// One-shot allreduce calls ([`oneshot`]) of at most this many bytes, where the plan is one;
/// [`GpuSettings::oneshot_max`] overrides it. 64 KiB: what one launch of 16 CTAs of 512
/// threads carries with a line per thread.
pub const ONESHOT_MAX_BYTES: u64 = 64 * 1024;
/// Data one sub-CTA carries per LL128 message before a call is spread over more sub-CTAs;
/// [`GpuSettings::ll128_sub_bytes`] overrides it (4-32 KiB measured alike on 2 x H200).
pub const LL128_SUB_BYTES: u64 = 8 * 1024;
/// Bulk data one sub-CTA must get before a chunk is cut over more sub-CTAs ([`slicing`]);
/// [`GpuSettings::bulk_sub_bytes`] overrides it.
pub const BULK_SUB_BYTES: u64 = 64 * 1024;
/// The least copy-engine call where each GPU copies to one other GPU ([`CeMin::Auto`]).
/// Since eager calls order the GPUs with events instead of barrier kernels, copy-engine
/// calls of alltoall, broadcast and allgather (16 instances, 2 GPUs) were 2-7% faster than
/// the kernel from 32 MiB and 4-13% slower at 16 MiB
/// (bench/results/2026-11-29-h200x2-ce-events.md).
pub const CE_MIN_BYTES: u64 = 32 << 20;
/// [`CE_MIN_BYTES`] for calls captured into CUDA graphs, whose copies the barrier kernels
/// order: at 32 MiB such an alltoall took 72 µs against the kernel's 64 (nccl-tests `-G`,
/// bench/results/2026-11-29-h200x2-nccl-library.md); from 64 MiB the copy engines were
/// faster (bench/NOTES.md, Copy engines).
pub const CE_MIN_CAPTURED_BYTES: u64 = 64 << 20;

// The kernel's ABI: the structs the host hands it and reads back, and its numbers.
pub use abi::{BarrierArgs, CallArgs, CallMode, MAX_DIRECT, MAX_LOCAL, OneShotArgs};
use abi::{MODE_ALIASED, MODE_DIRECT, MODE_PROGRESS, MODE_SEVERAL, Proto, TraceRec};

/// What setting a plan up cost, reported apart from the calls.
#[derive(Clone, Debug, PartialEq)]
pub struct SetupReport {
    /// NVRTC compile time (zero when the kernel came from the disk cache).
    pub compile: Duration,
    pub from_cache: bool,
    /// The kernel images loaded, one per GPU architecture: the plan's element type's entries
    /// only, as machine code (`cubin sm_90 f32`), or PTX the driver JIT-compiles where NVRTC
    /// cannot emit the GPU's architecture (`ptx compute_90 (driver JIT for sm_100: ...) f32`).
    pub kernel_images: Vec<String>,
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
    /// One buffer in NCCL's in-place layout ([`crate::reference::in_place_layout`]).
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

/// A plan of `tests/inputs/plans/`, validated (unit tests).
#[cfg(test)]
pub(crate) fn fixture_plan(file: &str) -> Plan {
    let path = format!(
        "{}/../tests/inputs/plans/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    coll_compiler::plan::ValidPlan::from_json(&text)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .into_inner()
}

/// A shipped algorithm compiled for `n` ranks on `nvswitch:n` (unit tests).
#[cfg(test)]
pub(crate) fn shipped_plan(file: &str, n: usize) -> Plan {
    let path = format!("{}/../algorithms/{file}", env!("CARGO_MANIFEST_DIR"));
    let m = coll_lang::load_bytes(&path, std::fs::read(&path).expect("ships")).expect("valid");
    let topo = coll_compiler::topology::Topology::parse(&format!("nvswitch:{n}")).expect("preset");
    coll_compiler::compile(&m, &topo, &coll_compiler::CompileOptions::default())
        .expect("compiles")
        .into_plan()
        .into_inner()
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
    /// The GPU's one allocation, which every region above lives in.
    arena: Arena,
    /// Plan blocks on this GPU (`nblocks / nsub`): a call launches `active` CTAs for each.
    plan_blocks: u32,
    /// Whether any op on this GPU waits on another block's progress.
    needs_progress: bool,
    /// Whether a block on this GPU has several peers: its calls launch the kernel's `_multi`
    /// entries ([`abi::MODE_SEVERAL`]).
    several: bool,
    /// Plan ranks on this GPU, in slot order.
    local_ranks: Vec<u32>,
    /// Copy-engine calls' second stream and its events, when the plan has such calls.
    ce: Option<CeStreams>,
}

impl GpuPlan {
    /// The region `span` of this GPU's arena, to read back.
    fn region(&self, span: Span) -> Result<device::Region<'_>, ExecError> {
        self.arena.region(span)
    }
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
    /// Whether the call ran as a one-shot allreduce ([`oneshot`]), with no interpreter.
    pub oneshot: bool,
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
        if self.oneshot {
            return write!(f, "one-shot");
        }
        match (self.copy_engines, self.direct, self.staged_because) {
            (true, _, _) => write!(f, "copy engines"),
            (false, direct::CallDirect::Off, Some(why)) => write!(f, "staged ({why})"),
            (false, direct::CallDirect::Off, None) => write!(f, "staged"),
            (false, direct::CallDirect::Apart, _) => write!(f, "direct"),
            (false, direct::CallDirect::Aliased, _) => write!(f, "direct (in-place set)"),
        }
    }
}

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
    /// Copy-engine calls ([`copy_engine`]).
    ce: copy_engine::CeCalls,
    /// One-shot calls ([`oneshot`]), when the plan is a one-shot allreduce and they may run.
    oneshot: Option<oneshot::OneShot>,
    /// Per plan rank: its placement staging buffer, when the plan needs one; padded calls
    /// use it as their padded staging (it is sized for both, [`layout`]).
    staging: Vec<Option<u64>>,
    /// The counts at which the plan runs padded ([`coll_compiler::plan::sizes`]).
    padding: coll_compiler::plan::sizes::Padding,
    /// The index in the spread of each GPU this process drives (all of them without a
    /// group; this process's one in a group).
    local_gis: Vec<usize>,
    /// Other processes' arenas, mapped (a group only); unmapped after the GPUs are synced.
    _remote_arenas: Vec<Arena>,
    /// The host proxy of connections across the network, and the watch of the group's
    /// processes that aborts when one fails (a group only).
    _proxy: Option<Proxy>,
    /// Stops the calls in flight ([`abort`](Self::abort)); dropped after the GPUs are synced.
    abort: Arc<fault::Aborter>,
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

/// The GPU of rank `r` of `n` on `g` GPUs.
pub fn gpu_of(r: u32, n: u32, g: u32) -> u32 {
    (u64::from(r) * u64::from(g) / u64::from(n.max(1))) as u32
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
    /// peer access, lays out and allocates staging, flags, scratch and instruction arrays in
    /// one piece per GPU ([`layout`]), encodes and uploads each GPU's program ([`encode`])
    /// and makes one warm-up call, so that the first user call finds everything in place.
    /// Works inside an application's stream capture too ([`device::CaptureTolerant`]): none
    /// of it is stream work of the caller's.
    pub fn load(
        plan: coll_compiler::plan::ValidPlan,
        ordinals: &[usize],
        o: &LoadOptions,
    ) -> Result<CudaExecutor, ExecError> {
        let plan = plan.into_inner();
        // Arguments are checked before the driver is touched: their errors need no GPU.
        let (spread, local_gis) = setup::spread(&plan, ordinals, o)?;
        let _tolerant = device::CaptureTolerant::enter()?;
        let set = &o.settings;
        let start = Instant::now();
        let opened = setup::open(ordinals, o.dtype, &plan, set.cache_dir.as_deref())?;
        let nsub = split_factor(&plan, &spread, opened.sms, set.split_cap);
        let slot_bytes = config::slot_bytes(&plan, &spread, nsub, set.slot_bytes);
        let alias_safe = placement::in_place_safe(&plan);
        let staging_elems = setup::staging_elems(&plan, o, alias_safe);
        let esize = o.dtype.size() as u64;
        let oneshot_lines = oneshot::region_lines(&plan, set, esize, o.max_count);
        let layout = Layout::new(
            &plan,
            &spread,
            nsub,
            slot_bytes,
            esize,
            o.max_count,
            staging_elems,
            oneshot_lines,
        );
        let group = o.group.as_deref();
        let mut ll = setup::limits(&plan, &spread, o);
        ll.slot_bytes = slot_bytes;
        let (arenas, ll128_max) = setup::arenas(
            &opened.gpus,
            &layout,
            &plan,
            &spread,
            group,
            nsub,
            ll.ll128.max,
            set.timeout,
        )?;
        ll.agree_ll128(
            &plan,
            set,
            ll128_max,
            setup::proxied(&plan, &spread, group.is_some()),
        );
        let mut claimed = setup::claim(&arenas, &layout, &local_gis)?;
        let (net_ends, net) =
            setup::net_ends(&plan, &spread, nsub, slot_bytes, group, &opened.gpus)?;
        claimed.addrs.net = net;
        let analysis = setup::analyse(&plan, &spread, o);
        let most_local = local_gis
            .iter()
            .map(|&gi| layout.gpus.get(gi).map_or(0, |g| g.ranks.len()))
            .max()
            .unwrap_or(0);
        let oneshot = oneshot::OneShot::new(
            std::mem::take(&mut claimed.oneshot),
            oneshot_lines,
            most_local,
            opened.sms,
        );
        let with_ce = analysis.ce.apart.is_some() || analysis.ce.aliased.is_some();
        let encode =
            |gi| encode::program(&plan, &spread, gi, nsub, &analysis.direct, &claimed.addrs);
        let local = (opened.gpus, opened.kernels);
        let (gpus, remote_arenas) =
            setup::upload_all(local, claimed.gpus, arenas, &local_gis, with_ce, encode)?;
        let records = gpus
            .iter()
            .map(|g| {
                let first = g.local_ranks.first().copied().unwrap_or(0);
                Ok((&g.gpu, g.region(g.error)?.ptr(), first))
            })
            .collect::<Result<Vec<_>, ExecError>>()?;
        let abort = Arc::new(fault::Aborter::new(&records)?);
        let proxy = (o.group.as_ref()).map(|mesh| {
            let place = crate::net::mesh::Placement::new(plan.ranks, mesh.procs());
            Proxy::start(net_ends, Arc::clone(mesh), Arc::clone(&abort), place)
        });
        let launch_threads =
            launch_threads::for_gpus(gpus.len(), set.launch_threads, set.launch_spin)?;
        let setup = SetupReport {
            compile: opened.compile,
            from_cache: opened.from_cache,
            kernel_images: opened.images,
            load: Duration::ZERO,
            allocated_bytes: setup::allocated(&gpus, &opened.free_before)?,
            reported_bytes: local_gis.iter().map(|&gi| layout.gpus[gi].total).collect(),
            module_bytes: opened.module_bytes,
            direct: analysis.count,
            launch_threads: 1 + launch_threads.as_ref().map_or(0, |l| l.workers()),
        };
        let mut exec = CudaExecutor {
            shape: ChunkShape::of(&plan),
            padding: coll_compiler::plan::sizes::Padding::of(&plan),
            ll,
            plan,
            gpus,
            spread,
            dtype: o.dtype,
            max_count: o.max_count,
            nsub,
            ll_epoch: set.ll_epoch,
            timeout: set.timeout,
            alias_safe,
            ce: analysis.ce,
            oneshot,
            staging: claimed.staging,
            local_gis,
            // Other processes' arenas stay mapped for as long as this executor lives.
            _remote_arenas: remote_arenas,
            _proxy: proxy,
            abort,
            setup,
            launch_threads,
        };
        if let Some(os) = &exec.oneshot {
            os.start_counters(&exec.gpus, exec.plan.ranks, set.ll_epoch)?;
        }
        exec.warm_up()?;
        exec.setup.load = start.elapsed().saturating_sub(exec.setup.compile);
        Ok(exec)
    }

    /// An empty call: runs the kernel once on every GPU (the driver's first-launch work) and
    /// moves every connection's counters through one handshake.
    fn warm_up(&self) -> Result<(), ExecError> {
        // Dummy pointers in the plan's own placement (equal send and receive pointers would
        // read as an in-place call, which an out-of-place plan may only take with staging).
        let dummy = if self.plan.inplace {
            (0, 0)
        } else {
            (0, device::REGION_ALIGN)
        };
        let null: Vec<(u64, u64)> = vec![dummy; self.plan.ranks as usize];
        let own: Vec<sys::CUstream> = self
            .gpus
            .iter()
            .map(|g| g.gpu.stream().cu_stream())
            .collect();
        // SAFETY: coll's own live streams, one per GPU in order; with count 0 no element is
        // read or written, so the null buffers are never dereferenced.
        unsafe { self.enqueue_inner(&own, &null, 0, ReduceOp::Sum, false) }?;
        self.finish()
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
        self.ll.protocol.max
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
}

impl Drop for CudaExecutor {
    fn drop(&mut self) {
        // Calls may still run on the caller's streams: wait for every GPU before the arenas
        // (staging, flags, instructions) are freed under them. Aborts from handles and the
        // proxy stop first, so nothing writes the error records after that wait.
        self.abort.close();
        for gp in &self.gpus {
            let _ = gp.gpu.synchronize_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rooted_plans_rotate_onto_the_roots_gpu() {
        let b = shipped_plan("broadcast_ring.coll", 4);
        // Root 2 on 4 GPUs: plan rank 0 (the root's part) runs where user rank 2 lives.
        let s = Spread::new(&b, 4, 2);
        assert_eq!((0..4).map(|p| s.user(p)).collect::<Vec<_>>(), [2, 3, 0, 1]);
        assert_eq!((0..4).map(|p| s.gpu(p)).collect::<Vec<_>>(), [2, 3, 0, 1]);
        // Unrooted collectives ignore the root.
        let r = shipped_plan("allreduce_ring.coll", 4);
        assert_eq!(Spread::new(&r, 4, 2).rotate, 0);
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
