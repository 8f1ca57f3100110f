//! Runs a plan on the GPUs with generated data and checks it against the reference, as the
//! CPU harness does: what `coll run --backend cuda` and the GPU checks under `bench/` use.

use super::CudaExecutor;
use super::device::{DeviceBuffer, user_buffer};
use crate::dtype::{DType, Element, ReduceOp};
use crate::error::ExecError;
use crate::harness::Report;
use crate::reference::{check, fill};
use coll_compiler::plan::Plan;
use coll_lang::builtins::CollectiveKind;
use half::{bf16, f16};
use std::time::{Duration, Instant};

/// How to run on GPUs.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuRun {
    pub count: u64,
    pub op: ReduceOp,
    pub root: u32,
    pub timeout: Duration,
    /// GPU ordinals to spread the ranks over.
    pub gpus: Vec<usize>,
    /// Calls timed after the first (the first is reported apart).
    pub iters: u32,
}

/// A checked GPU run, with setup and first-call times.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuReport {
    pub report: Report,
    pub first_call: Duration,
    pub setup: super::SetupReport,
}

/// Loads `plan`, runs it and checks every element.
pub fn run_checked(plan: Plan, dtype: DType, o: &GpuRun) -> Result<GpuReport, ExecError> {
    match dtype {
        DType::F32 => typed::<f32>(plan, o),
        DType::F16 => typed::<f16>(plan, o),
        DType::Bf16 => typed::<bf16>(plan, o),
        DType::I32 => typed::<i32>(plan, o),
        DType::F64 => typed::<f64>(plan, o),
        DType::I64 => typed::<i64>(plan, o),
        DType::U8 => typed::<u8>(plan, o),
    }
}

fn typed<T: Element>(plan: Plan, o: &GpuRun) -> Result<GpuReport, ExecError> {
    let n = plan.ranks;
    let kind = plan.collective.0;
    let reduces = matches!(
        kind,
        CollectiveKind::AllReduce | CollectiveKind::ReduceScatter | CollectiveKind::Reduce
    );
    if o.op == ReduceOp::Avg && !reduces {
        return Err(ExecError::Unsupported {
            op: "avg".into(),
            collective: kind.name().into(),
        });
    }
    if o.root >= n {
        return Err(ExecError::Root {
            root: o.root,
            ranks: n,
        });
    }
    let count = o.count;
    let c = count as usize;
    let in_elems = plan.buffer_elements(0, count);
    let out_elems = plan.buffer_elements(1, count);
    let inplace = plan.inplace;
    let esize = std::mem::size_of::<T>() as u64;
    let exec = CudaExecutor::new(plan, &o.gpus, T::DTYPE, count)?;
    // Rooted plans are lowered for root 0: user rank q plays position (q - root) mod n.
    let rooted = matches!(kind, CollectiveKind::Broadcast | CollectiveKind::Reduce);
    let shift = if rooted { o.root } else { 0 };
    let user_of = |p: u32| (p + shift) % n;
    let inputs: Vec<Vec<T>> = (0..n).map(|q| fill(o.op, n, q, in_elems)).collect();
    // Device buffers per plan position.
    let mut bufs: Vec<(DeviceBuffer, Option<DeviceBuffer>)> = Vec::with_capacity(n as usize);
    for p in 0..n {
        let gpu = exec
            .gpu(exec.rank_gpu(p))
            .ok_or_else(|| ExecError::Gpu("rank without GPU".into()))?;
        let q = user_of(p) as usize;
        if inplace {
            let size = in_elems.max(out_elems);
            let buf = user_buffer(gpu, size * esize)?;
            let at = if kind == CollectiveKind::AllGather {
                p as u64 * count * esize
            } else {
                0
            };
            gpu.upload(buf.ptr() + at, super::as_bytes(&inputs[q]))?;
            bufs.push((buf, None));
        } else {
            let input = user_buffer(gpu, in_elems * esize)?;
            gpu.upload(input.ptr(), super::as_bytes(&inputs[q]))?;
            let output = user_buffer(gpu, out_elems * esize)?;
            bufs.push((input, Some(output)));
        }
    }
    let ptrs: Vec<(u64, u64)> = bufs
        .iter()
        .map(|(a, b)| (a.ptr(), b.as_ref().map_or(a.ptr(), DeviceBuffer::ptr)))
        .collect();
    // In place, the input is consumed by the first call: time the first call, then restore
    // inputs before each timed call so every call computes the same thing.
    let t = Instant::now();
    exec.launch(&ptrs, count, o.op, o.timeout)?;
    exec.finish()?;
    let first_call = t.elapsed();
    let mut elapsed = first_call;
    if o.iters > 0 && !inplace {
        let t = Instant::now();
        for _ in 0..o.iters {
            exec.launch(&ptrs, count, o.op, o.timeout)?;
        }
        exec.finish()?;
        elapsed = t.elapsed() / o.iters;
    }
    // Read back and check.
    let mut outputs: Vec<Vec<T>> = vec![Vec::new(); n as usize];
    for p in 0..n {
        let gpu = exec
            .gpu(exec.rank_gpu(p))
            .ok_or_else(|| ExecError::Gpu("rank without GPU".into()))?;
        let q = user_of(p) as usize;
        let (a, b) = &bufs[p as usize];
        let mut out = vec![T::zero(); out_elems as usize];
        match (inplace, kind) {
            (true, CollectiveKind::ReduceScatter) => {
                let mut whole = vec![T::zero(); in_elems as usize];
                a.read(gpu, super::as_bytes_mut(&mut whole))?;
                out = whole
                    .get(p as usize * c..p as usize * c + c)
                    .map(<[T]>::to_vec)
                    .unwrap_or_default();
            }
            (true, _) => {
                let mut whole = vec![T::zero(); in_elems.max(out_elems) as usize];
                a.read(gpu, super::as_bytes_mut(&mut whole))?;
                out.copy_from_slice(&whole[..out_elems as usize]);
            }
            (false, _) => {
                if let Some(b) = b {
                    b.read(gpu, super::as_bytes_mut(&mut out))?;
                }
            }
        }
        outputs[q] = out;
    }
    let (wrong, checked) = check(kind, &inputs, &outputs, count, o.op, o.root);
    Ok(GpuReport {
        report: Report {
            elapsed,
            wrong,
            checked,
        },
        first_call,
        setup: exec.setup.clone(),
    })
}
