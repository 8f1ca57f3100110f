//! The GPU executor: plans run by one interpreter kernel ([`kernel.cu`](kernel.cu)),
//! compiled by NVRTC at run time and cached on disk, one CTA per (rank, thread block), over
//! peer-mapped memory between the GPUs of one process.
//!
//! Layers, as cudarc's: [`device`] wraps the driver calls this module needs in small RAII
//! types (every `unsafe` block lives there, each with a `// SAFETY:` comment); this module
//! encodes plans into device instruction arrays and drives the calls.
//!
//! Invariants: every allocation is made when a plan is loaded ([`CudaExecutor::new`]); a call
//! only writes the per-rank buffer table, clears the progress counters and launches (all on
//! the GPUs' streams, so it can be captured in a CUDA graph). Connection counters are absolute
//! and persist across calls. A rank lives on GPU `rank * gpus / ranks` (consecutive ranks
//! share a GPU when there are more ranks than GPUs); all CTAs of a GPU must fit on it at once,
//! because they wait for each other.

pub mod bench;
pub mod device;
pub mod nccl;
pub mod proxy;
pub mod run;
pub mod topo;

use crate::dtype::{DType, ReduceOp};
use crate::error::ExecError;
use coll_compiler::plan::{OpKind, Plan};
use coll_lang::builtins::CollectiveKind;
use device::{Arena, DeviceBuffer, Gpu, GpuKernels, Kernels, region_size};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The interpreter kernel's source.
pub const KERNEL_SOURCE: &str = include_str!("kernel.cu");

/// Staging per connection: `SLOTS` slots of `SLOT_BYTES`.
pub const SLOT_BYTES: u32 = 512 * 1024;
pub const SLOTS: u32 = 4;
/// Threads per CTA.
pub const THREADS: u32 = 512;
const MAX_BUFFERS: usize = 8;

// Mirrors of the kernel's structs (repr(C), same field order and sizes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct DOp {
    kind: u8,
    src_buf: u8,
    dst_buf: u8,
    ndeps: u8,
    count: u32,
    src_off: u64,
    dst_off: u64,
    dep_start: u32,
    pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct DBlock {
    rank_slot: u32,
    block: u32,
    op_start: u32,
    nops: u32,
    prog_base: u32,
    send_conn: i32,
    recv_conn: i32,
    sub: u32,
    nsub: u32,
    pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct DConn {
    slots: u64,
    sent: u64,
    acked: u64,
    pos: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct RankCtx {
    base: [u64; MAX_BUFFERS],
    shift: [u64; MAX_BUFFERS],
    rank: u32,
    pad: u32,
}

/// What setting a plan up cost, reported apart from the calls.
#[derive(Clone, Debug, PartialEq)]
pub struct SetupReport {
    /// NVRTC compile time (zero when the kernel came from the disk cache).
    pub compile: Duration,
    pub from_cache: bool,
    /// Everything else: contexts, peer access, allocations, instruction upload.
    pub load: Duration,
    /// Bytes coll allocated on each GPU beyond the user's buffers (cuMemGetInfo before and
    /// after setup).
    pub allocated_bytes: Vec<u64>,
    /// What the plan says it needs per GPU, computed before allocating: staging + scratch +
    /// instructions (allocated in one piece, so the two agree up to the driver's 2 MiB
    /// allocation granularity).
    pub reported_bytes: Vec<u64>,
    /// Memory the kernel module took on each GPU when it was loaded.
    pub module_bytes: Vec<u64>,
}

/// Per GPU: its device state and the arrays of its kernel.
struct GpuPlan {
    gpu: Gpu,
    kernels: GpuKernels,
    blocks: DeviceBuffer,
    ops: DeviceBuffer,
    deps: DeviceBuffer,
    conns: DeviceBuffer,
    ranks: DeviceBuffer,
    progress: DeviceBuffer,
    error: DeviceBuffer,
    out_elems: DeviceBuffer,
    /// Start and end (GPU global timer, ns) of every op of this GPU, when tracing.
    trace: DeviceBuffer,
    /// (rank, block, op) of each entry of `ops`, to read the trace back.
    op_index: Vec<(u32, u32, u32)>,
    /// The GPU's one allocation, which every region above lives in (set after setup, since
    /// connections take regions of other GPUs' arenas).
    _arena: Option<Arena>,
    scratch: HashMap<u32, Vec<u64>>,
    nblocks: u32,
    /// Ranks on this GPU, in slot order.
    local_ranks: Vec<u32>,
}

/// A plan loaded onto the GPUs of this process.
pub struct CudaExecutor {
    plan: Plan,
    gpus: Vec<GpuPlan>,
    dtype: DType,
    max_count: u64,
    /// Sub-CTAs per plan block.
    nsub: u32,
    /// Chunks of the plan's largest op ([`widest_op`]), fixed at load.
    widest: u64,
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

/// Bytes each of `g` GPUs needs for `plan` at counts up to `max_count` of `esize`-byte
/// elements: staging slots and flags of the connections it ends, scratch of its ranks, and
/// the instruction arrays — exactly the regions [`CudaExecutor::new`] takes, in the same
/// sizes.
pub fn arena_sizes(plan: &Plan, g: u32, esize: u64, max_count: u64, nsub: u32) -> Vec<u64> {
    let s = u64::from(nsub.max(1));
    let n = plan.ranks;
    let mut need = vec![0u64; g as usize];
    let mut ends = vec![0u64; g as usize];
    for (r, rp) in plan.gpus.iter().enumerate() {
        let here = gpu_of(r as u32, n, g) as usize;
        for b in &rp.blocks {
            if let Some(q) = b.send_peer {
                let there = gpu_of(q, n, g) as usize;
                need[there] += s * (region_size(u64::from(SLOTS * SLOT_BYTES)) + region_size(8));
                need[here] += s * region_size(8);
            }
            ends[here] += s * (u64::from(b.send_peer.is_some()) + u64::from(b.recv_peer.is_some()));
        }
    }
    for (gi, slot) in need.iter_mut().enumerate() {
        let local: Vec<&coll_compiler::plan::RankPlan> = plan
            .gpus
            .iter()
            .enumerate()
            .filter(|(r, _)| gpu_of(*r as u32, n, g) as usize == gi)
            .map(|(_, rp)| rp)
            .collect();
        for _ in &local {
            for b in 2..plan.buffers.len() {
                *slot += region_size(plan.buffer_elements(b, max_count) * esize);
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
        *slot += region_size(blocks * std::mem::size_of::<DBlock>() as u64)
            + region_size(ops * std::mem::size_of::<DOp>() as u64)
            + region_size(deps * 8)
            + region_size(ends[gi] * std::mem::size_of::<DConn>() as u64)
            + region_size(nl * std::mem::size_of::<RankCtx>() as u64)
            + region_size(blocks.max(1) * 4)
            + region_size(24)
            + region_size(nl * 8)
            + region_size(ops.max(1) * 16);
    }
    need
}

/// Most sub-CTAs per plan block. One CTA moves ~10 GB/s over H200 NVLink and the bandwidth
/// grew linearly up to 32 (bench/results/2026-11-21-h200x2-split.md); each costs its own
/// staging (`SLOTS * SLOT_BYTES` per connection).
pub const MAX_SPLIT: u32 = 64;

/// Sub-CTAs per plan block: as many as fit the GPU with the most blocks (one CTA per SM),
/// at most `cap` ([`MAX_SPLIT`] unless the user pins it).
pub fn split_factor(plan: &Plan, g: u32, sms: u32, cap: u32) -> u32 {
    let n = plan.ranks;
    let mut per_gpu = vec![0u32; g.max(1) as usize];
    for (r, rp) in plan.gpus.iter().enumerate() {
        per_gpu[gpu_of(r as u32, n, g) as usize] += rp.blocks.len() as u32;
    }
    let most = per_gpu.into_iter().max().unwrap_or(1).max(1);
    (sms / most).min(cap).max(1)
}

/// How the kernel cuts every chunk into per-iteration slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slicing {
    /// Iterations of each block's op list; iteration `l` runs on sub-CTA `l % nsub`.
    pub iters: u64,
    /// Slice widths are multiples of this many elements.
    pub align: u64,
}

/// Chunks in the largest op of `plan` (at least 1): what one message must carry.
pub fn widest_op(plan: &Plan) -> u64 {
    plan.gpus
        .iter()
        .flat_map(|g| &g.blocks)
        .flat_map(|b| &b.ops)
        .map(|o| u64::from(o.count))
        .max()
        .unwrap_or(1)
        .max(1)
}

/// The [`Slicing`] of a plan with chunk factor `k` whose largest op carries `widest` chunks
/// ([`widest_op`]), at `count` elements of `esize` bytes with `nsub` sub-CTAs.
pub fn slicing(k: u64, widest: u64, esize: u64, nsub: u32, count: u64) -> Slicing {
    let chunk = count.div_ceil(k.max(1));
    let widest = widest.max(1);
    let slot_elems = (u64::from(SLOT_BYTES) / esize.max(1)).max(1);
    let mut align = (128 / esize.max(1)).max(1);
    while align > 1 && 2 * widest * align > slot_elems {
        align /= 2;
    }
    // A slice is at most ceil(chunk / iters) rounded up to `align`, i.e. below
    // chunk / iters + align: leave `align` elements of room per chunk of the widest op.
    let fit = (widest * chunk)
        .div_ceil(slot_elems.saturating_sub(widest * align).max(1))
        .max(1);
    // Give every sub-CTA a slice once a chunk is worth splitting (64 KiB per sub-CTA).
    let worth = (chunk * esize) / (64 * 1024);
    Slicing {
        iters: fit.max(worth.min(u64::from(nsub))),
        align,
    }
}

/// The GPU of rank `r` of `n` on `g` GPUs.
pub fn gpu_of(r: u32, n: u32, g: u32) -> u32 {
    (u64::from(r) * u64::from(g) / u64::from(n.max(1))) as u32
}

fn kind_code(k: OpKind) -> u8 {
    match k {
        OpKind::Send => 0,
        OpKind::Recv => 1,
        OpKind::RecvReduceCopy => 2,
        OpKind::RecvCopySend => 3,
        OpKind::RecvReduceSend => 4,
        OpKind::RecvReduceCopySend => 5,
        OpKind::Copy => 6,
        OpKind::Reduce => 7,
    }
}

impl CudaExecutor {
    /// Loads `plan` onto GPUs `ordinals` for element type `dtype` and counts up to
    /// `max_count`: compiles (or loads from cache) the kernel, enables peer access, allocates
    /// staging, flags, scratch and instruction arrays.
    pub fn new(
        plan: Plan,
        ordinals: &[usize],
        dtype: DType,
        max_count: u64,
    ) -> Result<CudaExecutor, ExecError> {
        plan.validate()?;
        let g = ordinals.len() as u32;
        if g == 0 {
            return Err(ExecError::Gpu("no GPU given".into()));
        }
        if plan.buffers.len() > MAX_BUFFERS {
            return Err(ExecError::Gpu(format!(
                "at most {MAX_BUFFERS} buffers per rank on GPUs"
            )));
        }
        let n = plan.ranks;
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
        // Module memory (code, constants, the driver's local-memory reserve) apart from the
        // plan's own allocations.
        let free_before = free_at(&gpus)?;
        let module_bytes: Vec<u64> = free_start
            .iter()
            .zip(&free_before)
            .map(|(a, b)| a.saturating_sub(*b))
            .collect();
        let esize = dtype.size() as u64;

        // Connections: (from, to, channel) -> staging on the receiver, `sent` there, `acked`
        // on the sender.
        struct ConnMem {
            slots: u64,
            sent: u64,
            acked: u64,
        }
        // What each GPU needs, computed before anything is allocated: one arena per GPU.
        // `COLL_GPU_SPLIT` caps the split, as NCCL_MAX_NCHANNELS caps NCCL's channels; it
        // never exceeds one CTA per SM, since the CTAs wait on each other and must all be
        // resident at once.
        let cap = std::env::var("COLL_GPU_SPLIT")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(MAX_SPLIT);
        let nsub = split_factor(&plan, g, gpus[0].sm_count()?, cap);
        let widest = widest_op(&plan);
        let reported = arena_sizes(&plan, g, esize, max_count, nsub);
        let arenas: Vec<Arena> = gpus
            .iter()
            .zip(&reported)
            .map(|(gp, &bytes)| Arena::new(gp, bytes))
            .collect::<Result<_, _>>()?;
        let mut conn_mem: HashMap<(u32, u32, u32, u32), ConnMem> = HashMap::new();
        for (r, gpu_plan) in plan.gpus.iter().enumerate() {
            for b in &gpu_plan.blocks {
                let Some(q) = b.send_peer else { continue };
                let (sg, rg) = (gpu_of(r as u32, n, g) as usize, gpu_of(q, n, g) as usize);
                for sub in 0..nsub {
                    let slots = arenas[rg].take(u64::from(SLOTS * SLOT_BYTES))?;
                    let sent = arenas[rg].take(8)?;
                    let acked = arenas[sg].take(8)?;
                    conn_mem.insert(
                        (r as u32, q, b.channel, sub),
                        ConnMem {
                            slots: slots.ptr(),
                            sent: sent.ptr(),
                            acked: acked.ptr(),
                        },
                    );
                }
            }
        }

        let mut out = Vec::with_capacity(gpus.len());
        for (gi, gpu) in gpus.into_iter().enumerate() {
            let local_ranks: Vec<u32> =
                (0..n).filter(|&r| gpu_of(r, n, g) as usize == gi).collect();
            let mut blocks = Vec::new();
            let mut ops = Vec::new();
            let mut deps: Vec<u32> = Vec::new();
            let mut conns: Vec<DConn> = Vec::new();
            let mut scratch: HashMap<u32, Vec<u64>> = HashMap::new();
            let mut op_index: Vec<(u32, u32, u32)> = Vec::new();
            for (slot, &r) in local_ranks.iter().enumerate() {
                let rp = &plan.gpus[r as usize];
                // This rank's block 0, sub 0, in the block array (and progress array).
                let prog_base = blocks.len() as u32;
                for b in &rp.blocks {
                    let op_start = ops.len() as u32;
                    for (oi, op) in b.ops.iter().enumerate() {
                        op_index.push((r, b.id, oi as u32));
                        let (src_buf, src_off) =
                            op.src.map_or((0, 0), |s| (s.buffer() as u8, s.offset()));
                        let (dst_buf, dst_off) =
                            op.dst.map_or((0, 0), |s| (s.buffer() as u8, s.offset()));
                        ops.push(DOp {
                            kind: kind_code(op.kind),
                            src_buf,
                            dst_buf,
                            ndeps: op.deps.len().min(255) as u8,
                            count: op.count,
                            src_off,
                            dst_off,
                            dep_start: (deps.len() / 2) as u32,
                            pad: 0,
                        });
                        for d in &op.deps {
                            deps.push(d.block());
                            deps.push(d.op());
                        }
                    }
                    for sub in 0..nsub {
                        // One entry per end of a connection this sub-CTA uses.
                        let mut end_of = |key: (u32, u32, u32, u32)| -> Result<i32, ExecError> {
                            let m = conn_mem
                                .get(&key)
                                .ok_or_else(|| ExecError::Gpu("missing connection".into()))?;
                            conns.push(DConn {
                                slots: m.slots,
                                sent: m.sent,
                                acked: m.acked,
                                pos: 0,
                            });
                            Ok(conns.len() as i32 - 1)
                        };
                        let send_conn = match b.send_peer {
                            Some(q) => end_of((r, q, b.channel, sub))?,
                            None => -1,
                        };
                        let recv_conn = match b.recv_peer {
                            Some(p) => end_of((p, r, b.channel, sub))?,
                            None => -1,
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
                            pad: 0,
                        });
                    }
                }
                // Scratch buffers of this rank, for the largest count.
                let mut ptrs = Vec::new();
                for b in 2..plan.buffers.len() {
                    let bytes = plan.buffer_elements(b, max_count) * esize;
                    ptrs.push(arenas[gi].take(bytes)?.ptr());
                }
                scratch.insert(r, ptrs);
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
            let blocks_dev = arena.take_with(&gpu, as_bytes(&blocks))?;
            let ops_dev = arena.take_with(&gpu, as_bytes(&ops))?;
            let deps_dev = arena.take_with(&gpu, as_bytes(&deps))?;
            let conns_dev = arena.take_with(&gpu, as_bytes(&conns))?;
            let ranks_dev =
                arena.take((local_ranks.len().max(1) * std::mem::size_of::<RankCtx>()) as u64)?;
            let progress = arena.take((blocks.len().max(1) * 4) as u64)?;
            let error = arena.take(24)?;
            let out_elems = arena.take((local_ranks.len().max(1) * 8) as u64)?;
            let trace = arena.take((ops.len().max(1) * 16) as u64)?;
            let kernels = kernels.for_gpu(gi);
            let nblocks = blocks.len() as u32;
            out.push(GpuPlan {
                gpu,
                kernels,
                blocks: blocks_dev,
                ops: ops_dev,
                deps: deps_dev,
                conns: conns_dev,
                ranks: ranks_dev,
                progress,
                error,
                out_elems,
                trace,
                op_index,
                _arena: None,
                scratch,
                nblocks,
                local_ranks,
            });
        }
        for (gp, arena) in out.iter_mut().zip(arenas) {
            gp._arena = Some(arena);
            gp.gpu.synchronize()?;
        }
        let allocated: Vec<u64> = out
            .iter()
            .zip(&free_before)
            .map(|(gp, before)| {
                gp.gpu
                    .free_bytes()
                    .map(|after| before.saturating_sub(after))
            })
            .collect::<Result<_, _>>()?;
        let load = start.elapsed().saturating_sub(compile);
        Ok(CudaExecutor {
            plan,
            gpus: out,
            dtype,
            max_count,
            nsub,
            widest,
            setup: SetupReport {
                compile,
                from_cache,
                load,
                allocated_bytes: allocated,
                reported_bytes: reported,
                module_bytes,
            },
        })
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The GPU index (into the ordinals given to [`new`](Self::new)) of each rank.
    pub fn rank_gpu(&self, r: u32) -> usize {
        gpu_of(r, self.plan.ranks, self.gpus.len() as u32) as usize
    }

    pub fn gpu(&self, i: usize) -> Option<&Gpu> {
        self.gpus.get(i).map(|g| &g.gpu)
    }

    /// Enqueues one call on every GPU's stream: `bufs[r]` is rank r's (input, output) device
    /// pointers (equal for in-place plans). Nothing waits; [`finish`](Self::finish) syncs.
    pub fn launch(
        &self,
        bufs: &[(u64, u64)],
        count: u64,
        op: ReduceOp,
        timeout: Duration,
    ) -> Result<(), ExecError> {
        self.launch_traced(bufs, count, op, timeout, false)
    }

    /// [`launch`](Self::launch), recording every op's start and end when `trace` is set
    /// (read them with [`trace`](Self::trace) after [`finish`](Self::finish)).
    pub fn launch_traced(
        &self,
        bufs: &[(u64, u64)],
        count: u64,
        op: ReduceOp,
        timeout: Duration,
        trace: bool,
    ) -> Result<(), ExecError> {
        let plan = &self.plan;
        let n = plan.ranks;
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
        let k = plan.chunk_factor;
        let kind = plan.collective.0;
        let slicing = self.slicing(count);
        for gp in &self.gpus {
            let mut ctxs = Vec::with_capacity(gp.local_ranks.len());
            let mut outs = Vec::with_capacity(gp.local_ranks.len());
            for &r in &gp.local_ranks {
                let (input, output) = bufs[r as usize];
                let mut c = RankCtx {
                    rank: r,
                    ..RankCtx::default()
                };
                c.base[0] = input;
                c.base[1] = output;
                if plan.inplace {
                    match kind {
                        // Input is the rank's slice of output.
                        CollectiveKind::AllGather => {
                            c.base[0] = output;
                            c.shift[0] = u64::from(r) * k;
                        }
                        // Output is the rank's slice of input.
                        CollectiveKind::ReduceScatter => {
                            c.base[1] = input;
                            c.shift[1] = u64::from(r) * k;
                        }
                        _ => c.base[1] = input,
                    }
                }
                for (i, p) in gp.scratch.get(&r).into_iter().flatten().enumerate() {
                    c.base[2 + i] = *p;
                }
                ctxs.push(c);
                outs.push(plan.buffer_elements(1, count));
            }
            gp.ranks.write(&gp.gpu, as_bytes(&ctxs))?;
            gp.out_elems.write(&gp.gpu, as_bytes(&outs))?;
            gp.progress.clear(&gp.gpu)?;
            let cycles = (timeout.as_secs_f64() * 2.0e9) as u64;
            gp.kernels.launch_main(
                &gp.gpu,
                self.dtype,
                op,
                gp.nblocks,
                THREADS,
                [
                    gp.blocks.ptr(),
                    gp.ops.ptr(),
                    gp.deps.ptr(),
                    gp.conns.ptr(),
                    gp.ranks.ptr(),
                    gp.progress.ptr(),
                ],
                count,
                k,
                slicing,
                SLOT_BYTES,
                SLOTS,
                gp.error.ptr(),
                cycles,
                if trace { gp.trace.ptr() } else { 0 },
            )?;
            if op == ReduceOp::Avg {
                gp.kernels.launch_scale(
                    &gp.gpu,
                    self.dtype,
                    gp.ranks.ptr(),
                    gp.local_ranks.len() as u32,
                    gp.out_elems.ptr(),
                    n,
                )?;
            }
        }
        Ok(())
    }

    /// How each block's op list is repeated at `count`: enough iterations that the largest
    /// op's slice of its chunks fits one slot once every slice width is rounded up to the
    /// alignment (128 bytes, less where an op carries so many chunks that it would not fit).
    pub fn slicing(&self, count: u64) -> Slicing {
        slicing(
            self.plan.chunk_factor,
            self.widest,
            self.dtype.size() as u64,
            self.nsub,
            count,
        )
    }

    /// The last traced call as Chrome-trace JSON (chrome://tracing, Perfetto): one process per
    /// rank, one thread per block, each op a span named by its kind and source line.
    pub fn trace(&self) -> Result<String, ExecError> {
        let mut spans: Vec<(u32, u32, u32, u64, u64)> = Vec::new();
        for gp in &self.gpus {
            let mut t = vec![0u64; gp.op_index.len() * 2];
            gp.trace.read(&gp.gpu, as_bytes_mut(&mut t))?;
            for (i, &(r, b, o)) in gp.op_index.iter().enumerate() {
                spans.push((r, b, o, t[2 * i], t[2 * i + 1]));
            }
        }
        let t0 = spans
            .iter()
            .map(|s| s.3)
            .filter(|&x| x > 0)
            .min()
            .unwrap_or(0);
        let mut events = Vec::new();
        for r in 0..self.plan.ranks {
            events.push(serde_json::json!({
                "name": "process_name", "ph": "M", "pid": r,
                "args": {"name": format!("rank {r} (GPU {})", self.rank_gpu(r))}
            }));
        }
        for (r, b, o, start, end) in spans {
            let Some(op) = self
                .plan
                .gpus
                .get(r as usize)
                .and_then(|g| g.blocks.get(b as usize))
                .and_then(|x| x.ops.get(o as usize))
            else {
                continue;
            };
            let source = self
                .plan
                .sources
                .get(op.source as usize)
                .cloned()
                .unwrap_or_default();
            events.push(serde_json::json!({
                "name": format!("{} {}", op.kind.long_name(), source),
                "cat": "op",
                "ph": "X",
                "pid": r,
                "tid": b,
                "ts": start.saturating_sub(t0) as f64 / 1e3,
                "dur": end.saturating_sub(start) as f64 / 1e3,
                "args": {"op": o, "chunks": op.count, "source": source},
            }));
        }
        Ok(serde_json::to_string_pretty(
            &serde_json::json!({ "traceEvents": events, "displayTimeUnit": "ns" }),
        )
        .unwrap_or_default())
    }

    /// Waits for every GPU and reports a rank that timed out, naming its op and source line.
    pub fn finish(&self) -> Result<(), ExecError> {
        for gp in &self.gpus {
            gp.gpu.synchronize()?;
        }
        for gp in &self.gpus {
            let mut rec = [0u32; 6];
            gp.error.read(&gp.gpu, as_bytes_mut(&mut rec))?;
            if rec[0] != 0 {
                let what = match rec[4] {
                    1 => "waiting for a dependency",
                    2 => "waiting to receive",
                    _ => "waiting for room to send",
                };
                return Err(ExecError::Timeout {
                    at: coll_compiler::plan::location(&self.plan, rec[1], rec[2], Some(rec[3])),
                    waiting: what.into(),
                    waited: Duration::ZERO,
                });
            }
        }
        Ok(())
    }
}

/// The bytes of plain data (numbers and the repr(C) instruction structs) for copying to and
/// from the device.
pub(crate) fn as_bytes<T: Copy>(v: &[T]) -> &[u8] {
    // SAFETY: callers pass numbers or repr(C) structs of integers; their bytes are only
    // copied, and the slice covers exactly the values' memory.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

/// Mutable bytes of plain numbers, to read device data back into.
pub(crate) fn as_bytes_mut<T: Copy>(v: &mut [T]) -> &mut [u8] {
    // SAFETY: callers pass numeric element types (or u32 records), for which every bit
    // pattern the device writes is a valid value.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coll_compiler::topology::Topology;
    use coll_compiler::{CompileOptions, compile};

    fn ring(n: usize) -> Plan {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../algorithms/allreduce_ring.coll"
        );
        let m =
            coll_lang::load_bytes(path, std::fs::read(path).expect("ring ships")).expect("valid");
        let topo = Topology::parse(&format!("nvswitch:{n}")).expect("preset");
        compile(&m, &topo, &CompileOptions::default())
            .expect("compiles")
            .lowered
            .plan
    }

    #[test]
    fn arena_holds_staging_scratch_and_instructions() {
        // Ring on 2 GPUs: each GPU ends one incoming connection (4 slots + a flag) and one
        // outgoing (a flag), and holds one block of 3 ops.
        let sizes = arena_sizes(&ring(2), 2, 4, 1 << 20, 1);
        let staging = region_size(u64::from(SLOTS * SLOT_BYTES)) + 2 * region_size(8);
        for s in &sizes {
            assert!(*s > staging && *s < staging + 64 * 1024, "{sizes:?}");
        }
        // Eight ranks on two GPUs: four connections end on each.
        let sizes = arena_sizes(&ring(8), 2, 4, 1 << 20, 1);
        assert!(sizes.iter().all(|&s| s > 4 * staging), "{sizes:?}");
    }

    #[test]
    fn blocks_split_to_fill_the_sms_up_to_the_cap() {
        // Ring: one block per rank. 2 ranks on 2 GPUs of 132 SMs: capped.
        assert_eq!(split_factor(&ring(2), 2, 132, MAX_SPLIT), MAX_SPLIT);
        // 8 ranks on one GPU of 20 SMs: 8 blocks there, 20 / 8 = 2 CTAs each.
        assert_eq!(split_factor(&ring(8), 1, 20, MAX_SPLIT), 2);
        // A pinned cap wins below the SM bound, never above it.
        assert_eq!(split_factor(&ring(2), 2, 132, 8), 8);
        assert_eq!(split_factor(&ring(8), 1, 20, 100), 2);
        // More blocks than SMs still runs each block once.
        assert_eq!(split_factor(&ring(8), 1, 4, MAX_SPLIT), 1);
        assert_eq!(split_factor(&ring(2), 2, 132, 0), 1);
    }

    #[test]
    fn arena_grows_with_the_split() {
        // Every sub-CTA has its own staging and flags: 16 subs need at least 16 times the
        // staging of one.
        let one = arena_sizes(&ring(2), 2, 4, 1 << 20, 1);
        let many = arena_sizes(&ring(2), 2, 4, 1 << 20, 16);
        let staging = region_size(u64::from(SLOTS * SLOT_BYTES)) + 2 * region_size(8);
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
    fn slices_fit_a_slot_and_stay_aligned() {
        let plan = ring(2);
        let k = plan.chunk_factor;
        for esize in [1u64, 2, 4, 8] {
            let slot = u64::from(SLOT_BYTES) / esize;
            // 1 GiB once gave odd widths (130 945 f32): every slice after the first unaligned.
            for count in [1u64, 4099, 1_000_003, 1 << 22, (1 << 30) / esize, 3 << 26] {
                let sl = slicing(k, widest_op(&plan), esize, 16, count);
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
            }
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
