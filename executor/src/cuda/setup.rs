//! The steps of [`CudaExecutor::load`](super::CudaExecutor::load) that touch the GPUs or the
//! group: checking where the plan's ranks go, opening contexts with peer access and the
//! kernel module, allocating every GPU's arena (this process's own, and a multi-process
//! group's through CUDA IPC), taking the layout's regions from them, the host proxy's
//! connection ends, and uploading each GPU's program.
//!
//! Invariants: arenas are allocated at their layout's totals ([`super::layout`]) and carved
//! only by [`claim`], which takes every region at the offset the layout gave it (checked),
//! connection regions on every arena and the rest on this process's own; in a group every
//! process checks that the others laid the plan out with the same split and arena sizes,
//! since those fix every region's offset.

use super::device::{self, Arena, CompiledKernels, Gpu, Region, Span, TypedKernels};
use super::encode::{Addrs, ConnAddrs, DirectSets, NetViews, Program};
use super::layout::{GpuLayout, Layout, Place};
use super::proxy::{self, NetEnd, Side};
use super::topo;
use super::{
    BarrierArgs, CallLimits, CeStreams, DirectCount, GpuPlan, KERNEL_SOURCE, LoadOptions,
    MAX_DIRECT, MAX_LOCAL, Spread, abi, copy_engine, direct, placement,
};
use crate::dtype::DType;
use crate::error::ExecError;
use crate::net::mesh::Mesh;
use coll_compiler::plan::{Plan, Via};
use std::mem::offset_of;
use std::path::Path;
use std::time::Duration;

/// Checks what the plan asks of the GPUs and where its ranks go: the spread over every GPU
/// of the run, and which of them (indices into the spread) this process drives.
pub(super) fn spread(
    plan: &Plan,
    ordinals: &[usize],
    o: &LoadOptions,
) -> Result<(Spread, Vec<usize>), ExecError> {
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
    // A block side's connection ends fit the kernel's table (MAX_BLOCK_CONNS).
    for (r, rp) in plan.gpus.iter().enumerate() {
        for b in &rp.blocks {
            super::encode::block_ends(r as u32, b)?;
        }
    }
    // The kernel holds chunk positions in 32 bits (ChunkPos).
    if u32::try_from(plan.chunk_factor).is_err() {
        return Err(ExecError::Gpu(format!(
            "a chunk factor of {} is above the GPU kernel's {}",
            plan.chunk_factor,
            u32::MAX
        )));
    }
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
    let spread = Spread::new(plan, virtual_gpus, o.root);
    let most_local = (0..virtual_gpus)
        .map(|gi| (0..n).filter(|&p| spread.gpu(p) == gi).count())
        .max()
        .unwrap_or(0);
    if most_local > MAX_LOCAL {
        return Err(ExecError::Gpu(format!(
            "{most_local} ranks on one GPU; at most {MAX_LOCAL} (use more GPUs)"
        )));
    }
    Ok((spread, local_gis))
}

/// Whether the plan has connections the host proxy forwards (across the network between the
/// processes of a group). Those carry bulk slots only, and every connection of a call uses
/// the call's protocol, so such plans stay bulk; every process decides this from the plan
/// alone, so they agree.
pub(super) fn proxied(plan: &Plan, spread: &Spread, group: bool) -> bool {
    group
        && plan.gpus.iter().enumerate().any(|(r, rp)| {
            rp.blocks.iter().any(|b| {
                b.send_via == Some(Via::Net)
                    && b.send_peers()
                        .any(|q| spread.gpu(q) != spread.gpu(r as u32))
            })
        })
}

/// The GPUs of this process with peer access among them and the kernel loaded.
pub(super) struct Opened {
    pub gpus: Vec<Gpu>,
    pub kernels: Vec<TypedKernels>,
    /// NVRTC's wall time, whether every unit of the kernel came from the disk cache, and
    /// what was loaded (units, threads and times per architecture, [`device::KernelLoad`]).
    pub compile: Duration,
    pub from_cache: bool,
    pub images: Vec<String>,
    /// What the kernel module took on each GPU.
    pub module_bytes: Vec<u64>,
    /// Free memory on each GPU once the module was loaded, before the plan's allocations.
    pub free_before: Vec<u64>,
    /// The first GPU's multiprocessors, which bound the CTAs per plan block.
    pub sms: u32,
}

/// Opens GPUs `ordinals` with peer access among them, compiles (or reads from `cache_dir`)
/// the kernel's `dtype` entries only, those of every operator only where `plan` reduces,
/// and loads them now rather than at their first launch: every entry a call of the plan can
/// launch is loaded before any call is enqueued, since loading a module is not one of the
/// things a graph capture may see.
pub(super) fn open(
    ordinals: &[usize],
    dtype: DType,
    plan: &Plan,
    cache_dir: Option<&Path>,
) -> Result<Opened, ExecError> {
    // NVRTC needs only the architectures, which the driver gives without a context: the
    // kernel compiles on its own thread while the contexts start and peer access is set.
    let arches = ordinals
        .iter()
        .map(|&o| device::arch_of(o))
        .collect::<Result<Vec<_>, _>>()?;
    let reduces = reduces(plan);
    // The `_multi` twins only for a plan with a block of several peers.
    let several = plan
        .gpus
        .iter()
        .flat_map(|g| &g.blocks)
        .any(|b| b.several_peers());
    let (opened, compiled) = std::thread::scope(|s| {
        let compiling = s.spawn(|| {
            CompiledKernels::compile(&arches, KERNEL_SOURCE, dtype, reduces, several, cache_dir)
        });
        let opened = open_gpus(ordinals);
        let compiled = compiling
            .join()
            .unwrap_or_else(|_| Err(ExecError::Gpu("the kernel compile panicked".into())));
        (opened, compiled)
    });
    let (gpus, free_start) = opened?;
    let compiled = compiled?;
    let all = compiled.load(&gpus)?;
    let loaded = compiled.report().clone();
    let kernels: Vec<TypedKernels> = (0..gpus.len())
        .map(|gi| all.for_gpu(gi).typed(dtype))
        .collect::<Result<_, _>>()?;
    for (k, gpu) in kernels.iter().zip(&gpus) {
        k.preload(gpu)?;
    }
    // Module memory (code, constants, the driver's local-memory reserve) apart from the
    // plan's own allocations.
    let free_before = free_at(&gpus)?;
    let module_bytes = free_start
        .iter()
        .zip(&free_before)
        .map(|(a, b)| a.saturating_sub(*b))
        .collect();
    let sms = gpus
        .first()
        .ok_or_else(|| ExecError::Gpu("no GPU given".into()))?
        .sm_count()?;
    Ok(Opened {
        sms,
        gpus,
        kernels,
        compile: loaded.compile,
        from_cache: loaded.from_cache,
        images: loaded.images,
        module_bytes,
        free_before,
    })
}

/// Opens GPUs `ordinals` with peer access among them; with each one's free memory then.
fn open_gpus(ordinals: &[usize]) -> Result<(Vec<Gpu>, Vec<u64>), ExecError> {
    let gpus: Vec<Gpu> = ordinals
        .iter()
        .map(|&o| Gpu::open(o))
        .collect::<Result<_, _>>()?;
    device::enable_peer_access(&gpus)?;
    let free = free_at(&gpus)?;
    Ok((gpus, free))
}

fn free_at(gpus: &[Gpu]) -> Result<Vec<u64>, ExecError> {
    gpus.iter().map(|x| x.free_bytes()).collect()
}

/// Whether some op of `plan` reduces: only then does a call's operator change what the
/// interpreter does, and its load needs the interpreters of every operator.
pub(super) fn reduces(plan: &Plan) -> bool {
    plan.gpus
        .iter()
        .flat_map(|g| &g.blocks)
        .flat_map(|b| &b.ops)
        .any(|op| op.kind.reduces())
}

/// Every arena of the spread, at its layout's total: this process's GPUs' own, or in a
/// group every process's ([`group_arenas`]); with the LL128 message threshold every process
/// of the call uses: `ll128_max`, this process's ([`limits`]), or in a group the least of
/// every process's, so that all run each call in one protocol even where they see different
/// GPUs.
#[allow(clippy::too_many_arguments)]
pub(super) fn arenas(
    gpus: &[Gpu],
    layout: &Layout,
    plan: &Plan,
    spread: &Spread,
    group: Option<&Mesh>,
    nsub: u32,
    ll128_max: u64,
    timeout: Duration,
) -> Result<(Vec<Arena>, u64), ExecError> {
    let totals = layout.totals();
    match (group, gpus.first()) {
        (None, _) => Ok((
            gpus.iter()
                .zip(&totals)
                .map(|(gp, &bytes)| Arena::new(gp, bytes))
                .collect::<Result<_, _>>()?,
            ll128_max,
        )),
        (Some(mesh), Some(gpu)) => {
            group_arenas(mesh, gpu, plan, spread, &totals, nsub, ll128_max, timeout)
        }
        (Some(_), None) => Err(ExecError::Gpu("no GPU given".into())),
    }
}

/// Every process's arena, in spread order, for a group: this process's allocated, the
/// others' mapped through CUDA IPC where a connection of this process's ranks uses them
/// through peer memory, counted only otherwise. Handles travel in one all-gather, with each
/// process's split and arena size, which must agree (they fix every region's offset), and
/// its LL128 threshold, of which the least is returned.
#[allow(clippy::too_many_arguments)]
fn group_arenas(
    mesh: &Mesh,
    gpu: &Gpu,
    plan: &Plan,
    spread: &Spread,
    reported: &[u64],
    nsub: u32,
    ll128_max: u64,
    timeout: Duration,
) -> Result<(Vec<Arena>, u64), ExecError> {
    let me = mesh.me() as usize;
    let own = Arena::new(gpu, reported[me])?;
    let mut payload = nsub.to_le_bytes().to_vec();
    payload.extend_from_slice(&reported[me].to_le_bytes());
    payload.extend_from_slice(&own.ipc_handle()?);
    payload.extend_from_slice(&ll128_max.to_le_bytes());
    let mut agreed = ll128_max;
    let all = mesh
        .barrier(&payload, timeout)
        .map_err(|f| ExecError::Gpu(format!("exchanging IPC handles: {f}")))?;
    // Which processes' memory this one's ranks reach by peer stores and loads.
    let mut reach = vec![false; all.len()];
    for (r, rp) in plan.gpus.iter().enumerate() {
        let here = spread.gpu(r as u32) as usize;
        for b in &rp.blocks {
            // Every peer of the block: `send_via` (`recv_via`) is the route to all of a side.
            let sends = b.send_peers().map(|q| (q, b.send_via));
            let recvs = b.recv_peers().map(|q| (q, b.recv_via));
            for (peer, via) in sends.chain(recvs) {
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
        let (Some(split), Some(size), Some(handle), Some(theirs)) =
            (word(0, 4), word(4, 8), word(12, 64), word(76, 8))
        else {
            return Err(ExecError::Gpu(format!(
                "process {p} sent a malformed IPC handle ({} bytes)",
                blob.len()
            )));
        };
        let split = u32::from_le_bytes(split.try_into().unwrap_or_default());
        let size = u64::from_le_bytes(size.try_into().unwrap_or_default());
        agreed = agreed.min(u64::from_le_bytes(theirs.try_into().unwrap_or_default()));
        let expected = reported.get(p).copied();
        if split != nsub || Some(size) != expected {
            return Err(ExecError::Gpu(format!(
                "process {p} laid the plan out with {split} CTAs per block and {size} bytes, \
                 this one with {nsub} and {}: the GPUs, COLL_GPU_SPLIT or COLL_GPU_SLOT_BYTES \
                 differ between processes",
                expected.unwrap_or(0)
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
    Ok((arenas, agreed))
}

/// Where one GPU of this process keeps its program and words.
pub(super) struct GpuRegions {
    pub blocks: Span,
    pub ops: Span,
    pub deps: Span,
    pub conns: Span,
    pub ctxs: Span,
    pub progress: Span,
    pub counters: Span,
    pub error: Span,
    pub trace: Span,
}

/// The regions of every arena, taken.
pub(super) struct Claimed {
    /// Connections' and scratch buffers' device addresses, for the encoder (`net` empty).
    pub addrs: Addrs,
    /// Per plan rank: its placement staging buffer, when the plan needs one.
    pub staging: Vec<Option<u64>>,
    /// Per GPU this process drives, in `local_gis` order.
    pub gpus: Vec<GpuRegions>,
    /// Per plan rank: its one-shot region as this process addresses it (0: none, or its
    /// arena is not mapped here).
    pub oneshot: Vec<u64>,
}

/// Takes the region `p` of `arena`, which must be the arena's next.
fn take<'a>(arena: &'a Arena, p: Place, what: &str) -> Result<Region<'a>, ExecError> {
    if arena.used() != p.at {
        return Err(ExecError::Gpu(format!(
            "the {what} region is laid out at byte {} but its arena is at byte {}",
            p.at,
            arena.used()
        )));
    }
    arena.take(p.bytes)
}

/// Takes every region of `layout` from `arenas` (in spread order) in the layout's order:
/// connections' and one-shot regions on every arena, the rest on those of `local_gis`, whose arenas then are
/// used to the byte.
pub(super) fn claim(
    arenas: &[Arena],
    layout: &Layout,
    local_gis: &[usize],
) -> Result<Claimed, ExecError> {
    let arena = |gi: usize| {
        arenas
            .get(gi)
            .ok_or_else(|| ExecError::Gpu(format!("no arena for GPU {gi} of the spread")))
    };
    let mut addrs = Addrs::default();
    for c in &layout.conns {
        let (recv, send) = (arena(c.recv_gpu)?, arena(c.send_gpu)?);
        // Zeroed, as the arena is: flag 0 is no message's.
        let slots = take(recv, c.slots, "slots")?.ptr();
        let ll = take(recv, c.ll, "LL lines")?.ptr();
        let sent = take(recv, c.sent, "sent")?.ptr();
        // `acked`, then `ready`.
        let acked = take(send, c.acked, "acked")?.ptr();
        addrs.conns.insert(
            c.key,
            ConnAddrs {
                slots,
                sent,
                acked,
                ll,
            },
        );
    }
    let mut oneshot = Vec::with_capacity(layout.oneshot.len());
    for o in &layout.oneshot {
        oneshot.push(match *o {
            Some((gi, p)) => {
                let a = arena(gi)?;
                let ptr = take(a, p, "one-shot region")?.ptr();
                if a.addresses() { ptr } else { 0 }
            }
            None => 0,
        });
    }
    let mut staging = vec![None; layout.gpus.iter().map(|g| g.ranks.len()).sum()];
    let mut gpus = Vec::with_capacity(local_gis.len());
    for &gi in local_gis {
        let (a, g): (&Arena, &GpuLayout) = (
            arena(gi)?,
            layout
                .gpus
                .get(gi)
                .ok_or_else(|| ExecError::Gpu(format!("no layout for GPU {gi}")))?,
        );
        for r in &g.ranks {
            let mut base = [0u64; abi::MAX_BUFFERS];
            for &(b, p) in &r.scratch {
                let ptr = take(a, p, "scratch")?.ptr();
                if let Some(slot) = base.get_mut(b) {
                    *slot = ptr;
                }
            }
            addrs.scratch.insert(r.rank, base);
            if let Some(p) = r.staging {
                let ptr = take(a, p, "placement staging")?.ptr();
                if let Some(slot) = staging.get_mut(r.rank as usize) {
                    *slot = Some(ptr);
                }
            }
        }
        let span = |p: Place, what: &str| take(a, p, what).map(|r| r.span());
        gpus.push(GpuRegions {
            blocks: span(g.blocks, "blocks")?,
            ops: span(g.ops, "ops")?,
            deps: span(g.deps, "deps")?,
            conns: span(g.conns, "connections")?,
            ctxs: span(g.ctxs, "ranks")?,
            progress: span(g.progress, "progress")?,
            counters: span(g.counters, "counters")?,
            error: span(g.error, "error record")?,
            trace: span(g.trace, "trace")?,
        });
        if a.used() != g.total || a.capacity() < g.total {
            return Err(ExecError::Gpu(format!(
                "GPU {gi}: the layout has {} bytes but the arena took {} of {}",
                g.total,
                a.used(),
                a.capacity()
            )));
        }
    }
    Ok(Claimed {
        addrs,
        staging,
        gpus,
        oneshot,
    })
}

/// The ends in this process of connections that cross the network between the processes of
/// a group, in pinned host memory ([`super::proxy`]), with the kernel's view of each; none
/// without a group.
pub(super) fn net_ends(
    plan: &Plan,
    spread: &Spread,
    nsub: u32,
    slot_bytes: u32,
    group: Option<&Mesh>,
    gpus: &[Gpu],
) -> Result<(Vec<NetEnd>, NetViews), ExecError> {
    let mut ends = Vec::new();
    let mut view = NetViews::new();
    let (Some(mesh), Some(gpu)) = (group, gpus.first()) else {
        return Ok((ends, view));
    };
    let me = mesh.me();
    for (r, rp) in plan.gpus.iter().enumerate() {
        let r = r as u32;
        // Every connection of a block of several send peers too, each an end of its own.
        for (b, q) in rp
            .blocks
            .iter()
            .flat_map(|b| b.send_peers().map(move |q| (b, q)))
        {
            let (sp, tp) = (spread.gpu(r), spread.gpu(q));
            if b.send_via != Some(Via::Net) || sp == tp {
                continue;
            }
            for sub in 0..nsub {
                let key = (r, q, proxy::wire_channel(b.channel, sub));
                for (side, here, there) in [(Side::Send, sp, tp), (Side::Recv, tp, sp)] {
                    if here == me {
                        let end = NetEnd::new(gpu, side, key, there, slot_bytes)?;
                        view.insert(((r, q, b.channel, sub), side), end.kernel_view());
                        ends.push(end);
                    }
                }
            }
        }
    }
    Ok((ends, view))
}

/// What the plan lets calls skip: direct messages and copy-engine calls.
pub(super) struct Analysis {
    pub direct: DirectSets,
    pub count: DirectCount,
    pub ce: copy_engine::CeCalls,
}

/// The direct messages and copy-engine calls of `plan` under `o`'s settings.
pub(super) fn analyse(plan: &Plan, spread: &Spread, o: &LoadOptions) -> Analysis {
    let set = &o.settings;
    // Messages the sender may store straight into the receiver's buffers: one process only
    // (another's buffers change with every call), for either placement of a call. Release
    // counts travel in 16 bits.
    let small_blocks = plan
        .gpus
        .iter()
        .flat_map(|g| &g.blocks)
        .all(|b| b.ops.len() < abi::RELEASE_AT_START as usize);
    let direct_on = set.direct && o.group.is_none() && plan.ranks as usize <= MAX_DIRECT;
    let (apart, aliased) = if direct_on && small_blocks {
        direct::direct_ops_both(plan, set.swaps)
    } else {
        Default::default()
    };
    // Copy-engine calls: only where messages may go direct (one process, every buffer known
    // at the call), and never for a plan with a block of several peers: its sends reach
    // every peer and its receives combine several messages, which the copy list (one copy
    // per message, receives that only store) does not stand for.
    let several = plan
        .gpus
        .iter()
        .flat_map(|g| &g.blocks)
        .any(|b| b.several_peers());
    let (ce_apart, ce_aliased) = if direct_on && !several {
        (
            copy_engine::ce_copies(plan, false),
            copy_engine::ce_copies(plan, true),
        )
    } else {
        (None, None)
    };
    // By default only where each GPU copies to one other GPU, as measured; a GPU copying to
    // several took longer than the kernel (bench/NOTES.md, Copy engines): those run on the
    // copy engines only when asked.
    let one_peer = [&ce_apart, &ce_aliased].iter().all(|set| {
        set.as_deref()
            .is_none_or(|c| copy_engine::one_peer_gpu(c, spread.gpus, |r| spread.gpu(r)))
    });
    let min = set.ce_min.bytes(one_peer);
    let ce = if min > 0 {
        copy_engine::CeCalls {
            apart: ce_apart,
            aliased: ce_aliased,
            min,
            min_captured: set.ce_min.bytes_captured(one_peer),
        }
    } else {
        copy_engine::CeCalls::default()
    };
    // In-place plans alias always: their two sets are the same.
    let count = DirectCount {
        apart: apart.sends.len(),
        aliased: aliased.sends.len(),
        swaps: aliased.swaps.len(),
        messages: plan.sending_ops(),
    };
    Analysis {
        direct: DirectSets { apart, aliased },
        count,
        ce,
    }
}

/// Encodes (`encode(gi)`) and uploads the program of each GPU this process drives into its
/// arena, links the copy-engine barriers (with `ce`, one stream and two events more per GPU)
/// and waits for the uploads; returns the GPUs' state and the other processes' arenas.
pub(super) fn upload_all(
    opened: (Vec<Gpu>, Vec<TypedKernels>),
    claimed: Vec<GpuRegions>,
    arenas: Vec<Arena>,
    local_gis: &[usize],
    ce: bool,
    encode: impl Fn(usize) -> Result<Program, ExecError>,
) -> Result<(Vec<GpuPlan>, Vec<Arena>), ExecError> {
    let mut arenas: Vec<Option<Arena>> = arenas.into_iter().map(Some).collect();
    let mut gpus = Vec::with_capacity(local_gis.len());
    let parts = opened.0.into_iter().zip(opened.1).zip(claimed);
    for (((gpu, kernels), at), &gi) in parts.zip(local_gis) {
        let prog = encode(gi)?;
        let arena = arenas.get_mut(gi).and_then(Option::take);
        let arena = arena.ok_or_else(|| ExecError::Gpu("an arena used twice".into()))?;
        gpus.push(upload(gpu, kernels, arena, at, prog, ce)?);
    }
    link_barriers(&mut gpus);
    for gp in &gpus {
        gp.gpu.synchronize()?;
    }
    Ok((gpus, arenas.into_iter().flatten().collect()))
}

/// Uploads `prog` into the regions of `arena` (GPU `gpu`'s) and assembles the GPU's state;
/// with `ce`, the copy-engine stream and events too.
fn upload(
    gpu: Gpu,
    kernels: TypedKernels,
    arena: Arena,
    at: GpuRegions,
    prog: Program,
    ce: bool,
) -> Result<GpuPlan, ExecError> {
    let sms = gpu.sm_count()?;
    if prog.blocks.len() as u32 > sms {
        return Err(ExecError::Gpu(format!(
            "GPU {} would run {} thread blocks but has {sms} multiprocessors; they must all run at once",
            gpu.ordinal(),
            prog.blocks.len(),
        )));
    }
    arena.region(at.blocks)?.write(&gpu, &prog.blocks)?;
    arena.region(at.ops)?.write(&gpu, &prog.ops)?;
    arena.region(at.deps)?.write(&gpu, &prog.deps)?;
    arena.region(at.conns)?.write(&gpu, &prog.conns)?;
    arena.region(at.ctxs)?.write(&gpu, &prog.ctxs)?;
    let ce = if ce {
        Some(CeStreams {
            aux: gpu.new_stream()?,
            fork: device::Event::new(&gpu)?,
            join: device::Event::new(&gpu)?,
            ready: device::Event::new(&gpu)?,
            copied: device::Event::new(&gpu)?,
            // Every GPU's count word is filled in once all GPUs have theirs.
            barrier: BarrierArgs {
                mine: at.counters.ptr() + offset_of!(abi::CallCounters, barriers) as u64,
                all: [0; MAX_DIRECT],
                n: 0,
                rank: prog.local_ranks.first().copied().unwrap_or(0),
                timeout: 0,
                err: at.error.ptr(),
            },
        })
    } else {
        None
    };
    Ok(GpuPlan {
        gpu,
        kernels,
        blocks: at.blocks,
        ops: at.ops,
        deps: at.deps,
        conns: at.conns,
        ranks: at.ctxs,
        progress: at.progress,
        done: at.counters,
        error: at.error,
        trace: at.trace,
        op_index: prog.op_index,
        arena,
        plan_blocks: prog.plan_blocks,
        needs_progress: prog.needs_progress,
        several: prog.several,
        local_ranks: prog.local_ranks,
        ce,
    })
}

/// Points every GPU's copy-engine barrier at every GPU's count word (one process: all GPUs
/// are here).
fn link_barriers(gpus: &mut [GpuPlan]) {
    let mut words = [0u64; MAX_DIRECT];
    for (w, gp) in words.iter_mut().zip(gpus.iter()) {
        *w = gp.done.ptr() + offset_of!(abi::CallCounters, barriers) as u64;
    }
    let n = gpus.len() as u32;
    for ce in gpus.iter_mut().filter_map(|gp| gp.ce.as_mut()) {
        ce.barrier.all = words;
        ce.barrier.n = n;
    }
}

/// The placement staging elements per rank a load with `o` needs ([`placement`]).
pub(super) fn staging_elems(plan: &Plan, o: &LoadOptions, alias_safe: bool) -> u64 {
    if o.both_placements {
        placement::staging_elems(plan, o.max_count, alias_safe)
    } else {
        0
    }
}

/// Bytes coll allocated on each GPU of `gpus` since `free_before` was measured.
pub(super) fn allocated(gpus: &[GpuPlan], free_before: &[u64]) -> Result<Vec<u64>, ExecError> {
    gpus.iter()
        .zip(free_before)
        .map(|(gp, before)| {
            gp.gpu
                .free_bytes()
                .map(|after| before.saturating_sub(after))
        })
        .collect()
}

/// The LL and LL128 thresholds and data per sub-CTA of calls ([`CallLimits`]): plans with
/// connections the host proxy forwards stay bulk ([`proxied`]); LL128 only where
/// [`ll128_allowed`].
pub(super) fn limits(plan: &Plan, spread: &Spread, o: &LoadOptions) -> CallLimits {
    let set = &o.settings;
    let proxied = proxied(plan, spread, o.group.is_some());
    let ll128_max = set
        .ll128_max
        .or_auto(|| super::config::ll128_auto_max(plan.ranks, plan.collective.0));
    let ll128 = !proxied && ll128_max > 0 && ll128_allowed(plan, spread, &topo::local_peers());
    let mut limits = CallLimits {
        sub_bytes: set.ll_sub_bytes,
        ll128_sub_bytes: set.ll128_sub_bytes,
        bulk_sub_bytes: set.bulk_sub_bytes,
        ..CallLimits::new(0)
    };
    limits.agree_ll128(plan, set, if ll128 { ll128_max } else { 0 }, proxied);
    limits
}

/// Whether calls of `plan` may use LL128: its readers trust a line's data once they see its
/// flag, which holds where a warp's 128-byte store crosses NVLink whole (as NCCL runs LL128
/// only there), so every connection must join two different GPUs and every GPU this process
/// sees must reach every other with native atomics (NVLink; `peers` is what CUDA says, an
/// error or a single visible GPU says no). Blocks of several peers have no LL128 path
/// (`kernel/multi.cuh`).
pub(super) fn ll128_allowed(
    plan: &Plan,
    spread: &Spread,
    peers: &Result<Vec<Vec<topo::PeerLink>>, ExecError>,
) -> bool {
    let nvlink = peers
        .as_ref()
        .is_ok_and(|p| p.len() >= 2 && topo::nvlink_everywhere(p));
    nvlink
        && plan.gpus.iter().enumerate().all(|(r, rp)| {
            rp.blocks.iter().all(|b| {
                !b.several_peers()
                    && b.send_peers()
                        .all(|q| spread.gpu(q) != spread.gpu(r as u32))
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::shipped_plan;
    use topo::PeerLink;

    fn peers(g: usize, access: bool, native_atomics: bool) -> Vec<Vec<PeerLink>> {
        vec![
            vec![
                PeerLink {
                    access,
                    native_atomics
                };
                g
            ];
            g
        ]
    }

    #[test]
    fn ll128_only_between_nvlinked_gpus_and_never_with_blocks_of_several_peers() {
        let ring = shipped_plan("allreduce_ring.coll", 2);
        let on = |plan: &Plan, gpus: u32, p: Result<Vec<Vec<PeerLink>>, ExecError>| {
            ll128_allowed(plan, &Spread::new(plan, gpus, 0), &p)
        };
        assert!(on(&ring, 2, Ok(peers(2, true, true))));
        // Every visible GPU must be NVLinked, not only the plan's.
        assert!(on(&ring, 2, Ok(peers(8, true, true))));
        // PCIe (no native atomics), no peer access, nothing known: no.
        assert!(!on(&ring, 2, Ok(peers(2, true, false))));
        assert!(!on(&ring, 2, Ok(peers(2, false, true))));
        assert!(!on(&ring, 2, Err(ExecError::Gpu("no driver".into()))));
        // A process that sees one GPU cannot tell what joins it to the others.
        assert!(!on(&ring, 2, Ok(peers(1, true, true))));
        // Two ranks on one GPU: their connection never crosses NVLink.
        assert!(!on(&ring, 1, Ok(peers(2, true, true))));
        // The head of nvls receives from several peers in one block.
        let nvls = shipped_plan("allreduce_nvls.coll", 4);
        assert!(
            nvls.gpus
                .iter()
                .flat_map(|g| &g.blocks)
                .any(|b| b.several_peers())
        );
        assert!(!on(&nvls, 4, Ok(peers(4, true, true))));
        assert!(on(
            &shipped_plan("allreduce_ring.coll", 4),
            4,
            Ok(peers(4, true, true))
        ));
    }
}
