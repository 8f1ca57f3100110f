//! `coll bench`: the nccl-tests sweep for a plan on the GPUs, and the same sweep through NCCL
//! on the same buffers with the same timing (`--vs-nccl`).
//!
//! Timing follows nccl-tests: `warmup` calls, then `iters` back-to-back calls and one
//! synchronisation, divided by `iters`; algbw = S / t and busbw = algbw × the collective's
//! factor. The check call re-fills the inputs first (in-place calls overwrite them), runs
//! once and compares every element with the reference.

use super::device::{DeviceBuffer, Gpu, user_buffer};
use super::nccl::Nccl;
use super::{CudaExecutor, gpu_of};
use crate::dtype::{DType, Element, ReduceOp};
use crate::error::ExecError;
use crate::reference::{count_wrong, expected, fill};
use coll_compiler::plan::Plan;
use coll_compiler::predict::{bus_factor, nccl_count};
use coll_lang::builtins::CollectiveKind;
use half::{bf16, f16};
use std::time::{Duration, Instant};

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
    pub timeout: Duration,
    /// Record one call at the largest size as a Chrome trace.
    pub trace: bool,
}

/// One size's measurements (times in µs, bandwidths in GB/s).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Row {
    pub size: u64,
    pub count: u64,
    pub time_us: f64,
    pub algbw: f64,
    pub busbw: f64,
    pub wrong: Option<u64>,
    pub nccl_time_us: Option<f64>,
    pub nccl_busbw: Option<f64>,
}

/// The whole sweep.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct BenchReport {
    pub rows: Vec<Row>,
    pub compile_ms: f64,
    pub load_ms: f64,
    pub first_call_ms: f64,
    pub allocated_bytes: Vec<u64>,
    pub reported_bytes: Vec<u64>,
    pub module_bytes: Vec<u64>,
    pub nccl_version: Option<String>,
    pub nccl_init_ms: Option<f64>,
    pub nccl_first_call_ms: Option<f64>,
    pub nccl_bytes: Option<Vec<u64>>,
    /// Chrome-trace JSON of one call at the largest size (with `trace`).
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
    plan: Plan,
    c: &BenchConfig,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<BenchReport, ExecError> {
    match c.dtype {
        DType::F32 => typed::<f32>(plan, c, progress),
        DType::F16 => typed::<f16>(plan, c, progress),
        DType::Bf16 => typed::<bf16>(plan, c, progress),
        DType::I32 => typed::<i32>(plan, c, progress),
        DType::F64 => typed::<f64>(plan, c, progress),
        DType::I64 => typed::<i64>(plan, c, progress),
        DType::U8 => typed::<u8>(plan, c, progress),
    }
}

fn typed<T: Element>(
    plan: Plan,
    c: &BenchConfig,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<BenchReport, ExecError> {
    let n = plan.ranks;
    let kind = plan.collective.0;
    let esize = std::mem::size_of::<T>() as u64;
    let list = sizes(c.min_bytes, c.max_bytes, c.factor);
    let max_count = list
        .iter()
        .map(|&s| nccl_count(kind, s / esize, n))
        .max()
        .unwrap_or(0)
        .max(1);
    let inplace = plan.inplace;
    let in_max = plan.buffer_elements(0, max_count);
    let out_max = plan.buffer_elements(1, max_count);
    let exec = CudaExecutor::new(plan.clone(), &c.gpus, T::DTYPE, max_count)?;
    let g = c.gpus.len() as u32;
    let gpu = |r: u32| {
        exec.gpu(gpu_of(r, n, g) as usize)
            .ok_or_else(|| ExecError::Gpu("rank without GPU".into()))
    };
    // Buffers at the largest size; inputs filled once (the fill depends only on the index).
    let inputs: Vec<Vec<T>> = (0..n).map(|r| fill(c.op, n, r, in_max)).collect();
    let mut bufs: Vec<(DeviceBuffer, DeviceBuffer)> = Vec::with_capacity(n as usize);
    for r in 0..n {
        let gp = gpu(r)?;
        let input = user_buffer(gp, in_max.max(out_max) * esize)?;
        let output = user_buffer(gp, out_max.max(in_max) * esize)?;
        bufs.push((input, output));
    }
    let ptrs: Vec<(u64, u64)> = bufs
        .iter()
        .map(|(i, o)| (i.ptr(), if inplace { i.ptr() } else { o.ptr() }))
        .collect();
    let upload = |count: u64| -> Result<(), ExecError> {
        let len = plan.buffer_elements(0, count) as usize;
        for r in 0..n {
            let gp = gpu(r)?;
            let at = if inplace && kind == CollectiveKind::AllGather {
                u64::from(r) * count * esize
            } else {
                0
            };
            gp.upload(
                bufs[r as usize].0.ptr() + at,
                super::as_bytes(&inputs[r as usize][..len]),
            )?;
        }
        Ok(())
    };
    // The first call, apart from the steady state.
    upload(list.first().map_or(1, |&s| nccl_count(kind, s / esize, n)))?;
    let t = Instant::now();
    exec.launch(
        &ptrs,
        nccl_count(kind, list.first().copied().unwrap_or(8) / esize, n),
        c.op,
        c.timeout,
    )?;
    exec.finish()?;
    let first_call_ms = t.elapsed().as_secs_f64() * 1e3;
    // NCCL on the same buffers, when asked and possible (one rank per GPU).
    let mut nccl = None;
    let (mut nccl_version, mut nccl_init_ms, mut nccl_first, mut nccl_bytes) =
        (None, None, None, None);
    if c.vs_nccl && n == g && kind != CollectiveKind::Custom {
        let gpus: Vec<&Gpu> = (0..n).map(gpu).collect::<Result<_, _>>()?;
        let before: Vec<u64> = gpus
            .iter()
            .map(|x| x.free_bytes())
            .collect::<Result<_, _>>()?;
        let t = Instant::now();
        let comm = Nccl::init(&c.gpus)?;
        nccl_init_ms = Some(t.elapsed().as_secs_f64() * 1e3);
        let count = nccl_count(kind, list.first().copied().unwrap_or(8) / esize, n) as usize;
        let t = Instant::now();
        comm.launch(
            &gpus,
            kind,
            &nccl_ptrs(&bufs),
            count,
            T::DTYPE,
            c.op,
            c.root,
        )?;
        for x in &gpus {
            x.synchronize()?;
        }
        nccl_first = Some(t.elapsed().as_secs_f64() * 1e3);
        let after: Vec<u64> = gpus
            .iter()
            .map(|x| x.free_bytes())
            .collect::<Result<_, _>>()?;
        nccl_bytes = Some(
            before
                .iter()
                .zip(&after)
                .map(|(b, a)| b.saturating_sub(*a))
                .collect(),
        );
        nccl_version = super::nccl::version().ok().map(|v| v.1);
        nccl = Some(comm);
    }
    let mut rows = Vec::with_capacity(list.len());
    for (i, &size) in list.iter().enumerate() {
        progress(i, list.len());
        let count = nccl_count(kind, size / esize, n);
        for _ in 0..c.warmup {
            exec.launch(&ptrs, count, c.op, c.timeout)?;
        }
        exec.finish()?;
        let t = Instant::now();
        for _ in 0..c.iters.max(1) {
            exec.launch(&ptrs, count, c.op, c.timeout)?;
        }
        exec.finish()?;
        let secs = t.elapsed().as_secs_f64() / f64::from(c.iters.max(1));
        let bytes = coll_compiler::predict::size_of_count(kind, count, n) as f64 * esize as f64;
        let algbw = bytes / secs / 1e9;
        // Check: fresh inputs, one call, every element.
        let mut wrong = None;
        if c.check > 0 {
            upload(count)?;
            exec.launch(&ptrs, count, c.op, c.timeout)?;
            exec.finish()?;
            let in_len = plan.buffer_elements(0, count) as usize;
            let out_len = plan.buffer_elements(1, count) as usize;
            let mut outs: Vec<Vec<T>> = Vec::with_capacity(n as usize);
            for r in 0..n {
                let gp = gpu(r)?;
                let mut out = vec![T::zero(); out_len];
                let src = if inplace {
                    bufs[r as usize].0.ptr()
                } else {
                    bufs[r as usize].1.ptr()
                };
                if inplace && kind == CollectiveKind::ReduceScatter {
                    let mut whole = vec![T::zero(); in_len];
                    gp.download(src, super::as_bytes_mut(&mut whole))?;
                    let cc = count as usize;
                    out = whole[r as usize * cc..r as usize * cc + cc].to_vec();
                } else {
                    gp.download(src, super::as_bytes_mut(&mut out))?;
                }
                outs.push(out);
            }
            let ins: Vec<Vec<T>> = inputs.iter().map(|v| v[..in_len].to_vec()).collect();
            wrong = expected(kind, &ins, count, c.op, 0).map(|e| count_wrong(&outs, &e));
        }
        let (mut nt, mut nb) = (None, None);
        if let Some(comm) = &nccl {
            let gpus: Vec<&Gpu> = (0..n).map(gpu).collect::<Result<_, _>>()?;
            let np = nccl_ptrs(&bufs);
            for _ in 0..c.warmup {
                comm.launch(&gpus, kind, &np, count as usize, T::DTYPE, c.op, c.root)?;
            }
            for x in &gpus {
                x.synchronize()?;
            }
            let t = Instant::now();
            for _ in 0..c.iters.max(1) {
                comm.launch(&gpus, kind, &np, count as usize, T::DTYPE, c.op, c.root)?;
            }
            for x in &gpus {
                x.synchronize()?;
            }
            let s = t.elapsed().as_secs_f64() / f64::from(c.iters.max(1));
            nt = Some(s * 1e6);
            nb = Some(bytes / s / 1e9 * bus_factor(kind, n));
        }
        rows.push(Row {
            size,
            count,
            time_us: secs * 1e6,
            algbw,
            busbw: algbw * bus_factor(kind, n),
            wrong,
            nccl_time_us: nt,
            nccl_busbw: nb,
        });
    }
    let mut trace_json = None;
    if c.trace
        && let Some(&size) = list.last()
    {
        let count = nccl_count(kind, size / esize, n);
        exec.launch_traced(&ptrs, count, c.op, c.timeout, true)?;
        exec.finish()?;
        trace_json = Some(exec.trace()?);
    }
    Ok(BenchReport {
        rows,
        trace_json,
        compile_ms: exec.setup.compile.as_secs_f64() * 1e3,
        load_ms: exec.setup.load.as_secs_f64() * 1e3,
        first_call_ms,
        allocated_bytes: exec.setup.allocated_bytes.clone(),
        reported_bytes: exec.setup.reported_bytes.clone(),
        module_bytes: exec.setup.module_bytes.clone(),
        nccl_version,
        nccl_init_ms,
        nccl_first_call_ms: nccl_first,
        nccl_bytes,
    })
}

/// NCCL's out-of-place buffers: each rank's input and output.
fn nccl_ptrs(bufs: &[(DeviceBuffer, DeviceBuffer)]) -> Vec<(u64, u64)> {
    bufs.iter().map(|(i, o)| (i.ptr(), o.ptr())).collect()
}

/// The nccl-tests-style table.
pub fn table(
    kind: CollectiveKind,
    dtype: DType,
    op: ReduceOp,
    root: u32,
    r: &BenchReport,
) -> String {
    let mut s = String::new();
    let nccl = r.rows.iter().any(|x| x.nccl_time_us.is_some());
    s.push_str("|      size |     count | type | redop | root |  time (us) | algbw (GB/s) | busbw (GB/s) | #wrong |");
    if nccl {
        s.push_str(" NCCL time (us) | NCCL busbw | ratio |");
    }
    s.push('\n');
    s.push_str("|----------:|----------:|------|-------|-----:|-----------:|-------------:|-------------:|-------:|");
    if nccl {
        s.push_str("---------------:|-----------:|------:|");
    }
    s.push('\n');
    let root = if matches!(kind, CollectiveKind::Broadcast | CollectiveKind::Reduce) {
        root.to_string()
    } else {
        "-1".into()
    };
    for x in &r.rows {
        s.push_str(&format!(
            "| {:>9} | {:>9} | {:<4} | {:<5} | {:>4} | {:>10.2} | {:>12.2} | {:>12.2} | {:>6} |",
            x.size,
            x.count,
            dtype.name(),
            op.name(),
            root,
            x.time_us,
            x.algbw,
            x.busbw,
            x.wrong.map_or("n/a".into(), |w| w.to_string())
        ));
        if nccl {
            match (x.nccl_time_us, x.nccl_busbw) {
                (Some(t), Some(b)) => s.push_str(&format!(
                    " {:>14.2} | {:>10.2} | {:>5.2} |",
                    t,
                    b,
                    t / x.time_us.max(1e-9)
                )),
                _ => s.push_str("              - |          - |     - |"),
            }
        }
        s.push('\n');
    }
    s
}
