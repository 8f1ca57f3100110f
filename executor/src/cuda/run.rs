//! Runs a plan on the GPUs with generated data and checks it against the reference, as the
//! CPU harness does: what `coll run --backend cuda` and the GPU checks under `bench/` use.
//! Calls go through the stream-ordered API on coll's own streams, then wait.

use super::device::{DeviceBuffer, user_buffer};
use super::{CudaExecutor, LoadOptions, RankBuffers};
use crate::dtype::{DType, Element, ReduceOp};
use crate::error::ExecError;
use crate::harness::Report;
use crate::net::mesh::{Mesh, Placement};
use crate::reference::{check_ranks, fill, in_place_layout};
use coll_compiler::plan::ValidPlan;
use half::{bf16, f16};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How to run on GPUs.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuRun {
    pub count: u64,
    pub op: ReduceOp,
    pub root: u32,
    /// The executor's settings, the call timeout among them.
    pub settings: super::GpuSettings,
    /// GPU ordinals to spread the ranks over.
    pub gpus: Vec<usize>,
    /// Calls timed after the first (the first is reported apart).
    pub iters: u32,
    /// The calls' placement: in place (NCCL's layout) or not; `None` is the plan's own. The
    /// other placement than the plan's is adapted with device copies ([`super::placement`]).
    pub inplace: Option<bool>,
}

/// A checked GPU run, with setup and first-call times.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuReport {
    pub report: Report,
    pub first_call: Duration,
    pub setup: super::SetupReport,
    /// Whether the calls ran on the copy engines ([`super::copy_engine`]).
    pub copy_engines: bool,
}

/// Loads `plan`, runs it in its own placement and checks every element.
pub fn run_checked(plan: ValidPlan, dtype: DType, o: &GpuRun) -> Result<GpuReport, ExecError> {
    dispatch(plan, dtype, o, None)
}

/// [`run_checked`] for this process's share of a multi-process run, on the one GPU
/// `o.gpus` names: the report covers this process's ranks. Ends at a barrier, so no process
/// frees memory another still writes.
pub fn run_checked_group(
    plan: ValidPlan,
    dtype: DType,
    o: &GpuRun,
    mesh: Arc<Mesh>,
) -> Result<GpuReport, ExecError> {
    dispatch(plan, dtype, o, Some(mesh))
}

fn dispatch(
    plan: ValidPlan,
    dtype: DType,
    o: &GpuRun,
    group: Option<Arc<Mesh>>,
) -> Result<GpuReport, ExecError> {
    match dtype {
        DType::F32 => typed::<f32>(plan, o, group),
        DType::F16 => typed::<f16>(plan, o, group),
        DType::Bf16 => typed::<bf16>(plan, o, group),
        DType::I32 => typed::<i32>(plan, o, group),
        DType::F64 => typed::<f64>(plan, o, group),
        DType::I64 => typed::<i64>(plan, o, group),
        DType::U8 => typed::<u8>(plan, o, group),
    }
}

/// A wait that timed out on the GPU, told with what the mesh knows: when another process
/// died or failed meanwhile, the error names it (the kernel itself only saw silence).
fn blame(e: ExecError, mesh: Option<&Mesh>, place: Option<&Placement>) -> ExecError {
    let Some(f) = mesh.and_then(Mesh::failure) else {
        return e;
    };
    let reason = f.describe(place);
    match e {
        ExecError::Timeout { at, waiting, .. } => ExecError::Peer {
            at,
            waiting,
            reason,
        },
        other => ExecError::Gpu(format!("{other}; meanwhile {reason}")),
    }
}

fn typed<T: Element>(
    plan: ValidPlan,
    o: &GpuRun,
    group: Option<Arc<Mesh>>,
) -> Result<GpuReport, ExecError> {
    let n = plan.ranks;
    let kind = plan.collective.0;
    let count = o.count;
    let in_elems = plan.buffer_elements(0, count);
    let out_elems = plan.buffer_elements(1, count);
    let inplace = o.inplace.unwrap_or(plan.inplace);
    let esize = std::mem::size_of::<T>() as u64;
    // Which ranks each process runs (a group only), to name them in errors.
    let place = group.as_ref().and_then(|m| Placement::new(n, m.procs()));
    let load = LoadOptions {
        root: o.root,
        settings: o.settings.clone(),
        // Staging for the other placement only when the calls use it.
        both_placements: inplace != plan.inplace,
        group: group.clone(),
        ..LoadOptions::new(T::DTYPE, count)
    };
    let exec = CudaExecutor::load(plan, &o.gpus, &load)?;
    let inputs: Vec<Vec<T>> = (0..n).map(|q| fill(o.op, n, q, in_elems)).collect();
    // The ranks this process runs (all of them in one process).
    let users = exec.local_users();
    // Device buffers per user rank, on the GPU that rank runs on.
    let mut bufs: Vec<(DeviceBuffer, Option<DeviceBuffer>)> = Vec::with_capacity(users.len());
    for &q in &users {
        let gpu = exec
            .rank_device(q)
            .ok_or_else(|| ExecError::Gpu("rank without GPU".into()))?;
        let data = &inputs[q as usize];
        if inplace {
            let lay = in_place_layout(kind, q, count, in_elems, out_elems);
            let buf = user_buffer(gpu, lay.len * esize)?;
            buf.write_at(gpu, lay.input_at * esize, data)?;
            bufs.push((buf, None));
        } else {
            let input = user_buffer(gpu, in_elems * esize)?;
            input.write(gpu, data)?;
            let output = user_buffer(gpu, out_elems * esize)?;
            bufs.push((input, Some(output)));
        }
    }
    let ranks: Vec<RankBuffers<'_>> = bufs
        .iter()
        .map(|(a, b)| match b {
            Some(recv) => RankBuffers::OutOfPlace { send: a, recv },
            None => RankBuffers::InPlace(a),
        })
        .collect();
    // A pageable upload returns before its DMA ends: wait, or the first call's time would
    // include it.
    for i in 0..o.gpus.len() {
        if let Some(g) = exec.gpu(i) {
            g.synchronize()?;
        }
    }
    // Every process of a group waits here for the others (one process: no-op).
    let meet = |what: &str| -> Result<(), ExecError> {
        match &group {
            Some(mesh) => mesh
                .barrier(&[], o.settings.timeout)
                .map(drop)
                .map_err(|f| {
                    ExecError::Gpu(format!(
                        "waiting for the other processes to {what}: {}",
                        f.describe(place.as_ref())
                    ))
                }),
            None => Ok(()),
        }
    };
    // Every process starts its first call together, or the first call would time how much
    // later the slowest process finished loading.
    meet("load")?;
    let t = Instant::now();
    let info = exec.launch(&ranks, count, o.op)?;
    exec.finish()
        .map_err(|e| blame(e, group.as_deref(), place.as_ref()))?;
    let first_call = t.elapsed();
    // Read back and check the first call (in place, later calls start from its output).
    let mut outputs: Vec<Vec<T>> = Vec::with_capacity(users.len());
    for (i, &q) in users.iter().enumerate() {
        let gpu = exec
            .rank_device(q)
            .ok_or_else(|| ExecError::Gpu("rank without GPU".into()))?;
        let (a, b) = &bufs[i];
        let mut out = vec![T::zero(); out_elems as usize];
        match b {
            Some(recv) => recv.read(gpu, &mut out)?,
            None => {
                let at = in_place_layout(kind, q, count, in_elems, out_elems).output_at * esize;
                a.read_at(gpu, at, &mut out)?;
            }
        }
        outputs.push(out);
    }
    // Later calls are timed only: in place their data is the last call's result, which moves
    // exactly as much.
    let mut elapsed = first_call;
    if o.iters > 0 {
        // Together again: reading back the first call takes each process its own time (1 GiB
        // took seconds on a fresh machine), and the others' timed calls would wait for it.
        meet("read back")?;
        let t = Instant::now();
        for _ in 0..o.iters {
            exec.launch(&ranks, count, o.op)?;
        }
        exec.finish()
            .map_err(|e| blame(e, group.as_deref(), place.as_ref()))?;
        elapsed = t.elapsed() / o.iters;
    }
    let first = users.first().copied().unwrap_or(0);
    let (wrong, checked) = check_ranks(kind, &inputs, first, &outputs, count, o.op, o.root);
    meet("finish")?;
    Ok(GpuReport {
        report: Report {
            elapsed,
            wrong,
            checked,
        },
        first_call,
        setup: exec.setup.clone(),
        copy_engines: info.copy_engines,
    })
}
