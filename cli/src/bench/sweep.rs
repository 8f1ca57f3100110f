//! The nccl-tests sweep of `coll bench` for a plan on the GPUs, out of place and in place,
//! and the same sweep through NCCL on the same buffers with the same timing (`--vs-nccl`),
//! beside the link ceilings ([`super::ceiling`]) measured in the same run.
//!
//! Timing follows nccl-tests: `warmup` calls, then `iters` back-to-back calls and one
//! synchronisation, divided by `iters`; algbw = S / t and busbw = algbw × the collective's
//! factor. With `graph` (nccl-tests' `-G`), the `iters` calls are captured into one CUDA
//! graph per GPU, which is launched `graph` times; the time per call is the total over
//! `iters × graph`. Buffers are nccl-tests': a send buffer and a receive buffer per rank, the
//! receive buffer doubling as the in-place buffer in NCCL's layout
//! ([`in_place_layout`]). The check call re-fills the inputs first (in-place calls overwrite
//! them), runs once (as a graph of one call with `graph`) and compares every element with
//! the reference for `root`.

use super::ceiling::{LinkProbe, OneWay};
use super::nccl::{self, CtaPolicy, MemBuffers, Nccl, NcclConfig};
use super::record::Placement;
use coll_compiler::plan::ValidPlan;
use coll_compiler::predict::{bus_factor, nccl_count};
use coll_executor::ExecError;
use coll_executor::cuda::device::{DeviceBuffer, Gpu, capture, launch_graphs, user_buffer};
use coll_executor::cuda::direct::CallDirect;
use coll_executor::cuda::{
    CudaExecutor, DirectCount, HostSplit, LoadOptions, Protocol, RankBuffers,
};
use coll_executor::dtype::{DType, Element, ReduceOp};
use coll_executor::reference::{count_wrong, expected, fill, in_place_layout};
use coll_lang::builtins::CollectiveKind;
use cudarc::driver::CudaStream;
use half::{bf16, f16};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The environment variable of the first-call probe ([`First`]).
pub const FIRST_VAR: &str = "COLL_BENCH_FIRST";

/// What runs between loading the plan and the first call, a probe of what the first call
/// pays for (`bench/gpu_first.sh`, through [`FIRST_VAR`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum First {
    /// Nothing: the first call is the first thing after loading.
    #[default]
    Plain,
    /// Every SM of every GPU stores into its neighbour's memory for a while first
    /// ([`LinkProbe::store_ceiling`] over 64 MiB, 20 times).
    Heat,
    /// One untimed call at the largest size first.
    Bulk,
}

impl First {
    /// The probe [`FIRST_VAR`] names (`heat`, `bulk`; unset: [`First::Plain`]).
    pub fn from_var(value: Option<&str>) -> Result<First, ExecError> {
        match value {
            None => Ok(First::Plain),
            Some("heat") => Ok(First::Heat),
            Some("bulk") => Ok(First::Bulk),
            Some(other) => Err(ExecError::Env {
                var: FIRST_VAR.into(),
                value: other.into(),
                why: "expected `heat` or `bulk`".into(),
            }),
        }
    }
}

/// What to sweep.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchConfig {
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub factor: u64,
    pub iters: u32,
    pub warmup: u32,
    /// Check calls per size (0: no check).
    pub check: u32,
    pub dtype: DType,
    pub op: ReduceOp,
    pub root: u32,
    pub gpus: Vec<usize>,
    pub vs_nccl: bool,
    /// The executor's settings, the call timeout among them.
    pub settings: coll_executor::cuda::GpuSettings,
    /// Record the last of `iters` back-to-back calls at the largest size (eager or in a graph,
    /// as the sweep) as a Chrome trace.
    pub trace: bool,
    /// Capture the timed calls in CUDA graphs and launch them this many times (None: eager
    /// calls).
    pub graph: Option<u32>,
}

/// One placement's measurement at one size (time in µs, bandwidths in GB/s).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Timing {
    pub time_us: f64,
    pub algbw: f64,
    pub busbw: f64,
    /// Wrong elements of the check call (None: not checked).
    pub wrong: Option<u64>,
    /// Eager calls: the host's time per call to enqueue them (the timed loop before its
    /// final synchronisation). Near `time_us`, the host bounds the call rate.
    pub host_us: Option<f64>,
    /// Eager coll calls: the mean [`HostSplit`] over the timed loop's calls (as
    /// `host_us`, warm-up left out), µs: resolving the call, and enqueueing every GPU's part.
    pub host_split_us: Option<(f64, f64)>,
}

/// One size: coll and NCCL, out of place and in place.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Row {
    pub size: u64,
    pub count: u64,
    /// The protocol coll's calls of this size used (NCCL picks its own).
    pub protocol: Protocol,
    /// Which direct messages the out-of-place and the in-place calls used.
    pub direct_out: CallDirect,
    pub direct_in: CallDirect,
    /// Whether the out-of-place and the in-place calls ran on the copy engines
    /// ([`coll_executor::cuda::copy_engine`]).
    pub ce_out: bool,
    pub ce_in: bool,
    /// Whether the calls ran as one-shot allreduces ([`coll_executor::cuda::oneshot`]).
    #[serde(default)]
    pub oneshot: bool,
    pub out_of_place: Timing,
    pub in_place: Timing,
    /// NCCL's default configuration ([`NcclConfig::Default`]).
    pub nccl_out_of_place: Option<Timing>,
    pub nccl_in_place: Option<Timing>,
    /// NCCL on symmetric windows ([`NcclConfig::Symmetric`]; None: not run).
    pub nccl_symmetric_out_of_place: Option<Timing>,
    pub nccl_symmetric_in_place: Option<Timing>,
    /// NCCL with the zero-CTA policy ([`NcclConfig::ZeroCta`]; None: not run).
    pub nccl_zero_cta_out_of_place: Option<Timing>,
    pub nccl_zero_cta_in_place: Option<Timing>,
}

/// The whole sweep.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct BenchReport {
    pub rows: Vec<Row>,
    /// "eager" or "graph".
    pub mode: String,
    /// Graph launches per size and calls per graph (graph mode).
    pub graph_launches: Option<u32>,
    pub calls_per_graph: Option<u32>,
    pub compile_ms: f64,
    pub load_ms: f64,
    /// The first call after load (eager, smallest size, out of place), host-timed to its end
    /// (synchronised, error record read), and the second call timed the same way.
    pub first_call_ms: f64,
    pub second_call_ms: f64,
    /// Graph mode: capturing and instantiating a one-call graph, its first launch and its
    /// second, host-timed to their ends.
    pub graph_capture_ms: Option<f64>,
    pub graph_first_launch_ms: Option<f64>,
    pub graph_second_launch_ms: Option<f64>,
    pub allocated_bytes: Vec<u64>,
    pub reported_bytes: Vec<u64>,
    pub module_bytes: Vec<u64>,
    /// Calls whose largest message is at most this many bytes use LL.
    pub ll_max: u64,
    /// Messages that skip staging in bulk calls, per placement.
    pub direct: DirectCount,
    /// Host threads that enqueue each call's GPU parts at once.
    pub launch_threads: usize,
    /// Whether in-place calls of an out-of-place plan run on aliased buffers (true) or
    /// through staging (false); always true for in-place plans.
    pub alias_safe: bool,
    pub nccl_version: Option<String>,
    pub nccl_init_ms: Option<f64>,
    pub nccl_first_call_ms: Option<f64>,
    pub nccl_bytes: Option<Vec<u64>>,
    /// Why an NCCL configuration did not run or stopped (`#` lines of the output).
    pub nccl_notes: Vec<String>,
    /// With `vs_nccl` on two or more GPUs: the SM-store ceiling in the same run, GB/s per
    /// direction ([`LinkProbe::store_ceiling`] over 256 MiB).
    pub store_ceiling_gbs: Option<f64>,
    /// With `vs_nccl` on two or more GPUs: one direction of the link from GPU 0 to GPU 1
    /// ([`LinkProbe::one_way`] over 256 MiB).
    pub one_way: Option<OneWay>,
    /// With `vs_nccl`: the launch floor of an eager call on these GPUs in the same run, µs
    /// ([`LinkProbe::launch_floor`] with the executor's launch threads).
    pub launch_floor_us: Option<f64>,
    /// With `vs_nccl`: why the ceilings above could not be measured, if they could not.
    pub ceiling_error: Option<String>,
    /// Chrome-trace JSON of one call at the largest size (with `trace`): the last of `iters`
    /// back-to-back calls.
    #[serde(skip)]
    pub trace_json: Option<String>,
}

/// Sizes `min, min×f, ...` up to `max` (nccl-tests' -b -e -f).
pub fn sizes(min: u64, max: u64, factor: u64) -> Vec<u64> {
    let mut v = Vec::new();
    let mut s = min.max(1);
    while s <= max {
        v.push(s);
        s = s.saturating_mul(factor.max(2));
    }
    v
}

/// Runs the sweep; `progress(i, of)` is called before each size.
pub fn bench(
    plan: ValidPlan,
    c: &BenchConfig,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<BenchReport, ExecError> {
    bench_probed(plan, c, First::Plain, progress)
}

/// [`bench()`] with `first` run between loading and the first call.
pub fn bench_probed(
    plan: ValidPlan,
    c: &BenchConfig,
    first: First,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<BenchReport, ExecError> {
    match c.dtype {
        DType::F32 => typed::<f32>(plan, c, first, progress),
        DType::F16 => typed::<f16>(plan, c, first, progress),
        DType::Bf16 => typed::<bf16>(plan, c, first, progress),
        DType::I32 => typed::<i32>(plan, c, first, progress),
        DType::F64 => typed::<f64>(plan, c, first, progress),
        DType::I64 => typed::<i64>(plan, c, first, progress),
        DType::U8 => typed::<u8>(plan, c, first, progress),
    }
}

/// What the NCCL passes of a sweep found besides their timings.
#[derive(Debug, Default)]
struct NcclRun {
    version: Option<String>,
    init_ms: Option<f64>,
    first_ms: Option<f64>,
    bytes: Option<Vec<u64>>,
    notes: Vec<String>,
}

/// Out of place or in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Out,
    In,
}

/// Per user rank: the send buffer and the receive buffer (also the in-place buffer).
struct Bufs {
    send: Vec<DeviceBuffer>,
    recv: Vec<DeviceBuffer>,
}

impl Bufs {
    fn ranks(&self, place: Place) -> Vec<RankBuffers<'_>> {
        self.send
            .iter()
            .zip(&self.recv)
            .map(|(send, recv)| match place {
                Place::Out => RankBuffers::OutOfPlace { send, recv },
                Place::In => RankBuffers::InPlace(recv),
            })
            .collect()
    }

    /// Per rank: (send, receive) base addresses.
    fn bases(&self) -> Vec<(u64, u64)> {
        self.send
            .iter()
            .zip(&self.recv)
            .map(|(s, r)| (s.ptr(), r.ptr()))
            .collect()
    }
}

/// NCCL's (sendbuff, recvbuff) per rank at `count`, in the buffers of `bases` (per rank:
/// send, receive), the receive buffer doubling as the in-place buffer.
fn raw(
    kind: CollectiveKind,
    esize: u64,
    bases: &[(u64, u64)],
    place: Place,
    count: u64,
    (in_elems, out_elems): (u64, u64),
) -> Vec<(u64, u64)> {
    bases
        .iter()
        .enumerate()
        .map(|(q, &(s, r))| match place {
            Place::Out => (s, r),
            Place::In => {
                let lay = in_place_layout(kind, q as u32, count, in_elems, out_elems);
                (r + lay.input_at * esize, r + lay.output_at * esize)
            }
        })
        .collect()
}

/// A measurement of `bytes` (nccl-tests' size) by `kind` over `n` ranks: seconds per call and
/// the host's, as [`time_calls`] gives them.
fn timing_of(
    kind: CollectiveKind,
    n: u32,
    bytes: f64,
    (secs, host): (f64, Option<f64>),
    wrong: Option<u64>,
) -> Timing {
    let algbw = bytes / secs / 1e9;
    Timing {
        time_us: secs * 1e6,
        algbw,
        busbw: algbw * bus_factor(kind, n),
        wrong,
        host_us: host.map(|h| h * 1e6),
        host_split_us: None,
    }
}

/// Synchronises coll's streams.
fn sync(gpus: &[&Gpu]) -> Result<(), ExecError> {
    gpus.iter().try_for_each(|g| g.synchronize())
}

/// Seconds per call of `call`, eager or through graphs, as the module docs say, and for
/// eager calls the host's seconds per call to enqueue them.
fn time_calls(
    streams: &[Arc<CudaStream>],
    gpus: &[&Gpu],
    c: &BenchConfig,
    call: &dyn Fn() -> Result<(), ExecError>,
) -> Result<(f64, Option<f64>), ExecError> {
    let iters = c.iters.max(1);
    match c.graph {
        None => {
            for _ in 0..c.warmup {
                call()?;
            }
            sync(gpus)?;
            let t = Instant::now();
            for _ in 0..iters {
                call()?;
            }
            let host = t.elapsed().as_secs_f64() / f64::from(iters);
            sync(gpus)?;
            Ok((t.elapsed().as_secs_f64() / f64::from(iters), Some(host)))
        }
        Some(launches) => {
            let launches = launches.max(1);
            sync(gpus)?;
            // SAFETY: the graphs are dropped at the end of this function, while the caller
            // still holds the executor and buffers that `call` uses.
            let graphs = unsafe { capture(streams, || (0..iters).try_for_each(|_| call())) }?;
            if c.warmup > 0 {
                launch_graphs(&graphs)?;
            }
            sync(gpus)?;
            let t = Instant::now();
            for _ in 0..launches {
                launch_graphs(&graphs)?;
            }
            sync(gpus)?;
            Ok((
                t.elapsed().as_secs_f64() / f64::from(iters * launches),
                None,
            ))
        }
    }
}

fn typed<T: Element>(
    plan: ValidPlan,
    c: &BenchConfig,
    first: First,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<BenchReport, ExecError> {
    let n = plan.ranks;
    let kind = plan.collective.0;
    let esize = std::mem::size_of::<T>() as u64;
    let list = sizes(c.min_bytes, c.max_bytes, c.factor);
    let count_of = |size: u64| nccl_count(kind, size / esize, n);
    let max_count = list.iter().map(|&s| count_of(s)).max().unwrap_or(0).max(1);
    let in_max = plan.buffer_elements(0, max_count);
    let out_max = plan.buffer_elements(1, max_count);
    let load = LoadOptions {
        root: c.root,
        settings: c.settings.clone(),
        both_placements: true,
        ..LoadOptions::new(T::DTYPE, max_count)
    };
    let exec = CudaExecutor::load(plan.clone(), &c.gpus, &load)?;
    let gpu_of_rank = |q: u32| {
        exec.rank_device(q)
            .ok_or_else(|| ExecError::Gpu("rank without GPU".into()))
    };
    let all_gpus: Vec<&Gpu> = (0..c.gpus.len()).filter_map(|i| exec.gpu(i)).collect();
    let streams = exec.streams();
    // Buffers at the largest size; inputs filled once (the fill depends only on the index).
    let inputs: Vec<Vec<T>> = (0..n).map(|q| fill(c.op, n, q, in_max)).collect();
    let mut bufs = Bufs {
        send: Vec::with_capacity(n as usize),
        recv: Vec::with_capacity(n as usize),
    };
    for q in 0..n {
        let gp = gpu_of_rank(q)?;
        bufs.send.push(user_buffer(gp, in_max * esize)?);
        bufs.recv
            .push(user_buffer(gp, in_max.max(out_max) * esize)?);
    }
    let sizes_at = |count: u64| {
        (
            plan.buffer_elements(0, count),
            plan.buffer_elements(1, count),
        )
    };
    let coll_bases = bufs.bases();
    // The inputs into the buffers of `bases` (coll's, or NCCL's own).
    let upload_to = |bases: &[(u64, u64)], place: Place, count: u64| -> Result<(), ExecError> {
        let (i, _) = sizes_at(count);
        for (q, &(send, _)) in raw(kind, esize, bases, place, count, sizes_at(count))
            .iter()
            .enumerate()
        {
            // SAFETY: `raw` gives addresses in rank q's live buffers of `bases` (coll's, or
            // NCCL's from ncclMemAlloc), each sized for the largest count.
            unsafe { gpu_of_rank(q as u32)?.upload(send, &inputs[q][..i as usize]) }?;
        }
        Ok(())
    };
    let upload = |place: Place, count: u64| upload_to(&coll_bases, place, count);
    let wrong_after = |place: Place, count: u64| -> Result<u64, ExecError> {
        let (i, o) = sizes_at(count);
        let mut outs: Vec<Vec<T>> = Vec::with_capacity(n as usize);
        for (q, &(_, recv)) in raw(kind, esize, &coll_bases, place, count, (i, o))
            .iter()
            .enumerate()
        {
            let mut out = vec![T::zero(); o as usize];
            // SAFETY: as in `upload`.
            unsafe { gpu_of_rank(q as u32)?.download(recv, &mut out) }?;
            outs.push(out);
        }
        let ins: Vec<&[T]> = inputs.iter().map(|v| &v[..i as usize]).collect();
        Ok(expected(kind, &ins, count, c.op, c.root).map_or(0, |e| count_wrong(&outs, &e)))
    };
    let call = |place: Place, count: u64| exec.launch(&bufs.ranks(place), count, c.op);

    // The first call, apart from the steady state.
    let first_count = list.first().map_or(1, |&s| count_of(s));
    upload(Place::Out, first_count)?;
    // A pageable upload returns before its DMA ends: wait, or the first call's time would
    // include it.
    sync(&all_gpus)?;
    match first {
        First::Plain => {}
        First::Heat => {
            LinkProbe::open(&c.gpus)?.store_ceiling(64 << 20, 20)?;
        }
        First::Bulk => {
            let last = count_of(list.last().copied().unwrap_or(0));
            call(Place::Out, last)?;
            exec.finish()?;
        }
    }
    let single = || -> Result<f64, ExecError> {
        let t = Instant::now();
        call(Place::Out, first_count)?;
        exec.finish()?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    };
    let first_call_ms = single()?;
    let second_call_ms = single()?;
    // A graph's first launch against its second.
    let (mut graph_capture_ms, mut graph_first, mut graph_second) = (None, None, None);
    if c.graph.is_some() {
        let t = Instant::now();
        // SAFETY: the graphs are dropped in this block, before the executor and buffers.
        let graphs = unsafe { capture(&streams, || call(Place::Out, first_count).map(drop)) }?;
        graph_capture_ms = Some(t.elapsed().as_secs_f64() * 1e3);
        for slot in [&mut graph_first, &mut graph_second] {
            let t = Instant::now();
            launch_graphs(&graphs)?;
            exec.finish()?;
            *slot = Some(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    // The yardstick of the comparison: what plain stores between the GPUs reach, measured
    // now, on the same machine state as the sweep (and after the first calls, so that loading
    // the copy kernel does not stand between the plan and its first call). Without it (no
    // NVRTC to compile the copy kernel, say) the comparison still runs, and the report says
    // why it is missing.
    let (store_ceiling_gbs, one_way, launch_floor_us, ceiling_error) = if c.vs_nccl {
        match LinkProbe::open(&c.gpus) {
            Ok(p) => (
                p.store_ceiling(256 << 20, 10)?,
                p.one_way(256 << 20, 10)?,
                Some(p.launch_floor(500, c.settings.launch_threads)?),
                None,
            ),
            Err(e) => (None, None, None, Some(e.to_string())),
        }
    } else {
        (None, None, None, None)
    };
    let ranks_gpus: Vec<&Gpu> = (0..n).map(gpu_of_rank).collect::<Result<_, _>>()?;
    let mut rows = Vec::with_capacity(list.len());
    for (si, &size) in list.iter().enumerate() {
        progress(si, list.len());
        let count = count_of(size);
        let bytes = coll_compiler::predict::size_of_count(kind, count, n) as f64 * esize as f64;
        let timing = |measured, wrong| timing_of(kind, n, bytes, measured, wrong);
        // The timing, and what the last call did (direct, copy engines).
        let measure =
            |place: Place| -> Result<(Timing, Option<coll_executor::cuda::CallInfo>), ExecError> {
                upload(place, count)?;
                let splits = std::cell::RefCell::new(Vec::new());
                let last = std::cell::RefCell::new(None);
                let secs = time_calls(&streams, &all_gpus, c, &|| {
                    let info = call(place, count)?;
                    splits.borrow_mut().push(info.host);
                    *last.borrow_mut() = Some(info);
                    Ok(())
                })?;
                exec.finish()?;
                // The timed loop's calls only: a warm-up call after a synchronisation also wakes
                // the parked launch threads, which host_us does not count either.
                let splits = splits.into_inner();
                let timed = &splits[splits.len().saturating_sub(c.iters.max(1) as usize)..];
                let host_split_us = (c.graph.is_none() && !timed.is_empty()).then(|| {
                    let mean = |f: fn(&HostSplit) -> Duration| {
                        timed.iter().map(|h| f(h).as_secs_f64() * 1e6).sum::<f64>()
                            / timed.len() as f64
                    };
                    (mean(|h| h.prepare), mean(|h| h.enqueue))
                });
                // Check: fresh inputs, one call (through a graph in graph mode), every element.
                let mut wrong = None;
                if c.check > 0 {
                    upload(place, count)?;
                    sync(&all_gpus)?;
                    if c.graph.is_some() {
                        // SAFETY: as the first call's graphs.
                        let graphs = unsafe { capture(&streams, || call(place, count).map(drop)) }?;
                        launch_graphs(&graphs)?;
                    } else {
                        call(place, count)?;
                    }
                    exec.finish()?;
                    wrong = Some(wrong_after(place, count)?);
                }
                let timing = Timing {
                    host_split_us,
                    ..timing(secs, wrong)
                };
                Ok((timing, last.into_inner()))
            };
        let used = |info: &Option<coll_executor::cuda::CallInfo>| {
            info.as_ref()
                .map_or((Default::default(), false), |i| (i.direct, i.copy_engines))
        };
        let (out_of_place, info) = measure(Place::Out)?;
        let oneshot = info.as_ref().is_some_and(|i| i.oneshot);
        let (direct_out, ce_out) = used(&info);
        let (in_place, info) = measure(Place::In)?;
        let (direct_in, ce_in) = used(&info);
        rows.push(Row {
            size,
            count,
            protocol: exec.call_config(count).protocol,
            direct_out,
            direct_in,
            ce_out,
            ce_in,
            oneshot,
            ..Row::new(size, count, out_of_place, in_place)
        });
    }
    // NCCL as nccl-tests measures it, when asked and possible (one rank per GPU), after
    // coll's sweep: its own buffers from ncclMemAlloc, in each configuration in turn.
    let mut nccl = NcclRun::default();
    if c.vs_nccl && n as usize == c.gpus.len() && kind != CollectiveKind::Custom {
        let mem = MemBuffers::alloc(&ranks_gpus, in_max * esize, in_max.max(out_max) * esize)?;
        let bases = mem.bases().to_vec();
        let before: Vec<u64> = ranks_gpus
            .iter()
            .map(|x| x.free_bytes())
            .collect::<Result<_, _>>()?;
        let t = Instant::now();
        let mut comm = Nccl::init(&c.gpus)?;
        nccl.init_ms = Some(t.elapsed().as_secs_f64() * 1e3);
        let np = raw(
            kind,
            esize,
            &bases,
            Place::Out,
            first_count,
            sizes_at(first_count),
        );
        let t = Instant::now();
        // SAFETY: `ranks_gpus` are the GPUs of `c.gpus` in order (one rank per GPU), and
        // `np` are addresses in each rank's ncclMemAlloc buffers on its GPU, sized for the
        // largest count; `mem` outlives `comm` and the call is synchronised below.
        unsafe {
            comm.launch(
                &ranks_gpus,
                kind,
                &np,
                first_count as usize,
                T::DTYPE,
                c.op,
                c.root,
            )
        }?;
        sync(&ranks_gpus)?;
        nccl.first_ms = Some(t.elapsed().as_secs_f64() * 1e3);
        let after: Vec<u64> = ranks_gpus
            .iter()
            .map(|x| x.free_bytes())
            .collect::<Result<_, _>>()?;
        nccl.bytes = Some(
            before
                .iter()
                .zip(&after)
                .map(|(b, a)| b.saturating_sub(*a))
                .collect(),
        );
        let version = nccl::version().ok();
        nccl.version = version.as_ref().map(|v| v.1.clone());
        // One configuration over every size, out of place and in place.
        let pass = |comm: &Nccl, config: NcclConfig, rows: &mut [Row]| -> Result<(), ExecError> {
            for row in rows.iter_mut() {
                let count = row.count;
                let bytes =
                    coll_compiler::predict::size_of_count(kind, count, n) as f64 * esize as f64;
                for (place, placement) in [
                    (Place::Out, Placement::OutOfPlace),
                    (Place::In, Placement::InPlace),
                ] {
                    let np = raw(kind, esize, &bases, place, count, sizes_at(count));
                    // SAFETY: as for the first NCCL call: every rank's ncclMemAlloc buffers,
                    // on its GPU, sized for the largest count, alive past every launch and
                    // synchronised by `time_calls`.
                    let nccl_call = || unsafe {
                        comm.launch(
                            &ranks_gpus,
                            kind,
                            &np,
                            count as usize,
                            T::DTYPE,
                            c.op,
                            c.root,
                        )
                    };
                    upload_to(&bases, place, count)?;
                    let secs = time_calls(&streams, &all_gpus, c, &nccl_call)?;
                    *row.nccl_mut(config, placement) = Some(timing_of(kind, n, bytes, secs, None));
                }
            }
            Ok(())
        };
        pass(&comm, NcclConfig::Default, &mut rows)?;
        // The others may be refused (an older NCCL, a shape without symmetric kernels) or
        // fail: then NCCL-best is what did run, and the output says why.
        let mut optional = |config: NcclConfig, comm: &mut Nccl, rows: &mut [Row]| {
            let ran = comm.register_symmetric(&mem).and_then(|()| {
                let timed = pass(comm, config, rows);
                // Deregistered whatever the pass did, so no window outlives its use.
                timed.and(comm.deregister())
            });
            if let Err(e) = ran {
                for row in rows.iter_mut() {
                    *row.nccl_mut(config, Placement::OutOfPlace) = None;
                    *row.nccl_mut(config, Placement::InPlace) = None;
                }
                nccl.notes.push(format!("{} not run: {e}", config.name()));
            }
        };
        optional(NcclConfig::Symmetric, &mut comm, &mut rows);
        if matches!(kind, CollectiveKind::AllGather | CollectiveKind::AllToAll) {
            match version {
                Some((v, text)) if v < nccl::ZERO_CTA_SINCE => nccl.notes.push(format!(
                    "zero-cta not run: NCCL {text} has no zero-CTA policy (2.28 and later)"
                )),
                _ => match Nccl::init_policy(&ranks_gpus, CtaPolicy::Zero) {
                    Ok(mut zero) => optional(NcclConfig::ZeroCta, &mut zero, &mut rows),
                    Err(e) => nccl.notes.push(format!("zero-cta not run: {e}")),
                },
            }
        }
        // Communicators go before the memory they registered.
        drop(comm);
        drop(mem);
    }
    let mut trace_json = None;
    if c.trace
        && let Some(&size) = list.last()
    {
        let count = count_of(size);
        // The last of a timed loop's worth of back-to-back calls, eager or in graphs as the
        // sweep ran them, so that the trace shows the steady state: a lone call after a
        // synchronisation would also show the idle GPUs' start and parked launch threads.
        let traced = || {
            exec.launch_traced(&bufs.ranks(Place::Out), count, c.op, true)
                .map(drop)
        };
        sync(&all_gpus)?;
        if c.graph.is_some() {
            let calls = || (0..c.iters.max(1)).try_for_each(|_| traced());
            // SAFETY: as the first call's graphs.
            let graphs = unsafe { capture(&streams, calls) }?;
            launch_graphs(&graphs)?;
        } else {
            (0..c.iters.max(1)).try_for_each(|_| traced())?;
        }
        exec.finish()?;
        trace_json = Some(exec.trace()?);
    }
    Ok(BenchReport {
        rows,
        mode: if c.graph.is_some() { "graph" } else { "eager" }.into(),
        graph_launches: c.graph,
        calls_per_graph: c.graph.map(|_| c.iters.max(1)),
        trace_json,
        compile_ms: exec.setup.compile.as_secs_f64() * 1e3,
        load_ms: exec.setup.load.as_secs_f64() * 1e3,
        first_call_ms,
        second_call_ms,
        graph_capture_ms,
        graph_first_launch_ms: graph_first,
        graph_second_launch_ms: graph_second,
        allocated_bytes: exec.setup.allocated_bytes.clone(),
        reported_bytes: exec.setup.reported_bytes.clone(),
        module_bytes: exec.setup.module_bytes.clone(),
        ll_max: exec.ll_max(),
        direct: exec.direct_count(),
        launch_threads: exec.setup.launch_threads,
        alias_safe: exec.alias_safe(),
        store_ceiling_gbs,
        one_way,
        launch_floor_us,
        ceiling_error,
        nccl_version: nccl.version,
        nccl_init_ms: nccl.init_ms,
        nccl_first_call_ms: nccl.first_ms,
        nccl_bytes: nccl.bytes,
        nccl_notes: nccl.notes,
    })
}

/// Whether any checked call had a wrong element.
pub fn any_wrong(r: &BenchReport) -> bool {
    r.rows.iter().any(|x| {
        [&x.out_of_place, &x.in_place]
            .iter()
            .any(|t| t.wrong.is_some_and(|w| w > 0))
    })
}
