//! `coll bench FILE --overlap`: a collective beside a compute kernel on the same GPUs, the
//! way training overlaps gradient exchange with the next layer's GEMM.
//!
//! On every GPU a bf16 GEMM of about [`GEMM_TARGET_MS`] runs on a stream of its own
//! (cuBLAS through cudarc, sized by measuring it first; without cuBLAS, an
//! SM-saturating kernel of this module, [`SPIN_SOURCE`], compiled by NVRTC). Per size, each
//! contender's collective runs on the GPU's main stream: coll's plan, then NCCL as
//! nccl-tests allocates (ncclMemAlloc) with its default configuration, with the efficiency
//! CTA policy, and for allgather and alltoall with the zero-CTA policy on symmetric windows.
//! Timed on the GPUs with events: the GEMM alone, the collective alone, and the pair, both
//! started together (the GEMM's stream waits on an event of the main stream, then the GEMM
//! is enqueued, then the collective): the pair's time runs from that event to the later of
//! the two ends, the GEMM's time in the pair to its own end; each is the largest over the
//! GPUs, averaged over the iterations.
//!
//! Invariants: every buffer a launch reads or writes is allocated before the first launch
//! and freed only after every GPU is synchronised (NCCL's communicators before their
//! memory); a contender that cannot be set up (an older NCCL, a policy it lacks) is left out
//! with a note, never aborting the others.

use super::nccl::{CtaPolicy, MemBuffers, Nccl};
use coll_compiler::plan::ValidPlan;
use coll_compiler::predict::nccl_count;
use coll_executor::ExecError;
use coll_executor::cuda::device::{DeviceBuffer, Gpu, NO_NVRTC, nvrtc_present, user_buffer};
use coll_executor::cuda::{CudaExecutor, LoadOptions, RankBuffers};
use coll_executor::dtype::{DType, ReduceOp};
use coll_lang::builtins::CollectiveKind;
use cudarc::cublas::{result as blas, sys as blas_sys};
use cudarc::driver::{CudaEvent, CudaFunction, CudaStream, LaunchConfig, PushKernelArg, sys};
use std::sync::Arc;

/// The GEMM's time alone the sizing aims at, ms.
pub const GEMM_TARGET_MS: f64 = 2.0;

/// The fallback compute kernel: every thread runs `iters` rounds of dependent FMAs on
/// registers (all SMs busy, no memory traffic), and stores only if the result is a value it
/// cannot be, so the loop is kept.
pub const SPIN_SOURCE: &str = r#"
extern "C" __global__ void coll_spin(float* out, unsigned int iters) {
    float a = threadIdx.x * 1e-3f, b = blockIdx.x * 1e-3f;
    for (unsigned int i = 0; i < iters; ++i) {
        a = fmaf(a, 0.9999f, 1e-4f);
        b = fmaf(b, 1.0001f, -1e-4f);
    }
    if (a + b == -1.0f) out[0] = a;
}
"#;

/// What `--overlap` runs.
#[derive(Clone, Debug)]
pub struct OverlapConfig {
    /// nccl-tests' sizes (bytes).
    pub sizes: Vec<u64>,
    pub iters: u32,
    pub warmup: u32,
    pub dtype: DType,
    pub op: ReduceOp,
    pub root: u32,
    pub gpus: Vec<usize>,
    pub settings: coll_executor::cuda::GpuSettings,
}

/// The compute side as sized and measured alone.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct GemmInfo {
    /// `cuBLAS bf16 GEMM` or the fallback kernel, with why.
    pub engine: String,
    /// M, N, K of the GEMM (the kernel: CTAs, threads, rounds).
    pub shape: (u64, u64, u64),
    /// Time alone, ms.
    pub alone_ms: f64,
}

/// One contender at one size, ms.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct OverlapRow {
    pub size: u64,
    /// `coll`, `NCCL default`, `NCCL efficiency`, `NCCL zero-CTA`.
    pub who: String,
    pub gemm_alone_ms: f64,
    pub collective_alone_ms: f64,
    pub pair_ms: f64,
    pub gemm_in_pair_ms: f64,
}

impl OverlapRow {
    /// The GEMM's time in the pair over its time alone.
    pub fn slowdown(&self) -> f64 {
        self.gemm_in_pair_ms / self.gemm_alone_ms.max(1e-12)
    }

    fn is_nccl(&self) -> bool {
        self.who.starts_with("NCCL")
    }
}

/// The whole run.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct OverlapReport {
    pub gemm: GemmInfo,
    pub rows: Vec<OverlapRow>,
    /// Contenders left out, and why.
    pub notes: Vec<String>,
}

/// The table: per size and contender, the GEMM alone, the collective alone, the pair, the
/// GEMM in the pair, its slowdown, and the pair's time over NCCL-best's pair (the fastest
/// NCCL pair at that size; below 1: coll's pair is faster).
pub fn table(r: &OverlapReport) -> String {
    let mut s = String::from(
        "|      size | who             | GEMM alone (ms) | collective alone (ms) | pair (ms) | GEMM in pair (ms) | GEMM slowdown | pair / NCCL-best pair |\n\
         |----------:|-----------------|----------------:|----------------------:|----------:|------------------:|--------------:|----------------------:|\n",
    );
    for x in &r.rows {
        let best = r
            .rows
            .iter()
            .filter(|y| y.size == x.size && y.is_nccl())
            .map(|y| y.pair_ms)
            .fold(f64::INFINITY, f64::min);
        let vs = if best.is_finite() {
            format!("{:.2}", x.pair_ms / best.max(1e-12))
        } else {
            "-".into()
        };
        s.push_str(&format!(
            "| {:>9} | {:<15} | {:>15.3} | {:>21.3} | {:>9.3} | {:>17.3} | {:>12.2}x | {vs:>21} |\n",
            x.size,
            x.who,
            x.gemm_alone_ms,
            x.collective_alone_ms,
            x.pair_ms,
            x.gemm_in_pair_ms,
            x.slowdown(),
        ));
    }
    s
}

fn driver_err(what: &str, e: impl std::fmt::Debug) -> ExecError {
    ExecError::Gpu(format!("{what} (overlap benchmark): {e:?}"))
}

fn blas_err(what: &str, e: impl std::fmt::Debug) -> ExecError {
    ExecError::Gpu(format!("cuBLAS {what}: {e:?}"))
}

/// The compute work of one GPU, enqueued on its own stream.
enum Work {
    /// A cuBLAS handle bound to the stream, and A (M×K), B (K×N), C (M×N), column-major.
    Gemm {
        handle: blas_sys::cublasHandle_t,
        a: DeviceBuffer,
        b: DeviceBuffer,
        c: DeviceBuffer,
    },
    /// The spin kernel and the word it may store to.
    Spin {
        func: CudaFunction,
        out: DeviceBuffer,
        ctas: u32,
    },
}

/// Per GPU: its compute stream and work; the shape all GPUs use.
struct Compute {
    streams: Vec<Arc<CudaStream>>,
    work: Vec<Work>,
    /// GEMM: (M, N, K); spin: (CTAs, threads, rounds).
    shape: (u64, u64, u64),
    engine: String,
}

/// Threads per CTA of the spin kernel, and CTAs per SM (a full SM of 2048 threads).
const SPIN_THREADS: u32 = 256;
const SPIN_CTAS_PER_SM: u32 = 8;
/// The GEMM's M and N; K is sized to the target, at most [`MAX_K`].
const GEMM_MN: u64 = 8192;
const MAX_K: u64 = 32768;

impl Compute {
    /// cuBLAS when it loads, else the spin kernel (saying why in `engine`).
    fn open(gpus: &[&Gpu]) -> Result<Compute, ExecError> {
        let streams: Vec<Arc<CudaStream>> = gpus
            .iter()
            .map(|g| g.new_stream())
            .collect::<Result<_, _>>()?;
        // SAFETY: loading cuBLAS runs only its library initialisers.
        if unsafe { blas_sys::is_culib_present() } {
            let mut work = Vec::with_capacity(gpus.len());
            for (g, stream) in gpus.iter().zip(&streams) {
                g.context()
                    .bind_to_thread()
                    .map_err(|e| driver_err("binding the GPU", e))?;
                let handle = blas::create_handle().map_err(|e| blas_err("cublasCreate", e))?;
                // SAFETY: `handle` was just created; the stream is live (held in `streams`).
                unsafe { blas::set_stream(handle, stream.cu_stream() as blas_sys::cudaStream_t) }
                    .map_err(|e| blas_err("cublasSetStream", e))?;
                // Zeroed inputs: the time does not depend on the values.
                let a = DeviceBuffer::zeroed(g, GEMM_MN * MAX_K * 2)?;
                let b = DeviceBuffer::zeroed(g, MAX_K * GEMM_MN * 2)?;
                let c = DeviceBuffer::zeroed(g, GEMM_MN * GEMM_MN * 2)?;
                work.push(Work::Gemm { handle, a, b, c });
            }
            return Ok(Compute {
                streams,
                work,
                shape: (GEMM_MN, GEMM_MN, 8192),
                engine: "cuBLAS bf16 GEMM (cublasGemmEx, fp32 accumulate)".into(),
            });
        }
        if !nvrtc_present() {
            return Err(ExecError::Gpu(format!(
                "neither cuBLAS (libcublas) nor NVRTC found: {NO_NVRTC}"
            )));
        }
        let mut work = Vec::with_capacity(gpus.len());
        let mut ctas = 0;
        for g in gpus {
            let arch = g.arch()?;
            let opts = cudarc::nvrtc::CompileOptions {
                options: vec![format!(
                    "--gpu-architecture={}",
                    arch.replace("sm_", "compute_")
                )],
                ..Default::default()
            };
            let ptx = cudarc::nvrtc::compile_ptx_with_opts(SPIN_SOURCE, opts).map_err(|e| {
                ExecError::Gpu(format!("NVRTC could not compile the spin kernel: {e:?}"))
            })?;
            let module = g
                .context()
                .load_module(ptx)
                .map_err(|e| driver_err("cannot load the spin kernel", e))?;
            let func = module
                .load_function("coll_spin")
                .map_err(|e| driver_err("no spin entry", e))?;
            ctas = g.sm_count()?.max(1) * SPIN_CTAS_PER_SM;
            work.push(Work::Spin {
                func,
                out: DeviceBuffer::zeroed(g, 4)?,
                ctas,
            });
        }
        Ok(Compute {
            streams,
            work,
            shape: (u64::from(ctas), u64::from(SPIN_THREADS), 1 << 16),
            engine: "an SM-saturating FMA kernel of coll's own (cuBLAS, libcublas.so, not found: put its lib directory on LD_LIBRARY_PATH for the GEMM)".into(),
        })
    }

    /// Enqueues GPU `i`'s work on its compute stream.
    fn enqueue(&self, i: usize) -> Result<(), ExecError> {
        let stream = &self.streams[i];
        match &self.work[i] {
            Work::Gemm { handle, a, b, c } => {
                let (m, n, k) = self.shape;
                let (alpha, beta) = (1.0f32, 0.0f32);
                stream
                    .context()
                    .bind_to_thread()
                    .map_err(|e| driver_err("binding the GPU", e))?;
                // SAFETY: A holds M×K, B K×N and C M×N bf16 elements (allocated for the
                // largest K, `shape` never exceeds it), column-major with leading dimensions
                // M, K, M; alpha and beta are host f32s, as CUBLAS_COMPUTE_32F reads them.
                unsafe {
                    blas::gemm_ex(
                        *handle,
                        blas_sys::cublasOperation_t::CUBLAS_OP_N,
                        blas_sys::cublasOperation_t::CUBLAS_OP_N,
                        m as i32,
                        n as i32,
                        k as i32,
                        (&alpha as *const f32).cast(),
                        a.ptr() as *const std::ffi::c_void,
                        blas_sys::cudaDataType::CUDA_R_16BF,
                        m as i32,
                        b.ptr() as *const std::ffi::c_void,
                        blas_sys::cudaDataType::CUDA_R_16BF,
                        k as i32,
                        (&beta as *const f32).cast(),
                        c.ptr() as *mut std::ffi::c_void,
                        blas_sys::cudaDataType::CUDA_R_16BF,
                        m as i32,
                        blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                        blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                    )
                }
                .map_err(|e| blas_err("cublasGemmEx", e))
            }
            Work::Spin { func, out, ctas } => {
                let cfg = LaunchConfig {
                    grid_dim: (*ctas, 1, 1),
                    block_dim: (SPIN_THREADS, 1, 1),
                    shared_mem_bytes: 0,
                };
                let (ptr, rounds) = (out.ptr(), self.shape.2 as u32);
                let mut launch = stream.launch_builder(func);
                launch.arg(&ptr).arg(&rounds);
                // SAFETY: the kernel takes (float*, unsigned int); `ptr` is a live 4-byte
                // buffer of this GPU, the only address it may store to.
                unsafe { launch.launch(cfg) }
                    .map(drop)
                    .map_err(|e| driver_err("spin kernel launch", e))
            }
        }
    }

    /// Sizes the work to [`GEMM_TARGET_MS`] from one measurement (GEMM: K; spin: rounds).
    fn size_to_target(&mut self, gpus: &[&Gpu]) -> Result<f64, ExecError> {
        let t = self.alone(gpus, 3)?;
        let scale = GEMM_TARGET_MS / t.max(1e-6);
        self.shape.2 = match self.work.first() {
            Some(Work::Gemm { .. }) => {
                ((self.shape.2 as f64 * scale / 256.0).round() as u64 * 256).clamp(256, MAX_K)
            }
            _ => ((self.shape.2 as f64 * scale).round() as u64).clamp(1, u64::from(u32::MAX)),
        };
        self.alone(gpus, 5)
    }

    /// The work alone on every GPU at once, ms: the largest GPU's, averaged over `reps` after
    /// one warm-up.
    fn alone(&self, gpus: &[&Gpu], reps: u32) -> Result<f64, ExecError> {
        (0..self.streams.len()).try_for_each(|i| self.enqueue(i))?;
        sync_all(gpus, &self.streams)?;
        let mut total = 0.0;
        for _ in 0..reps.max(1) {
            let mut starts = Vec::with_capacity(self.streams.len());
            for (i, s) in self.streams.iter().enumerate() {
                starts.push(event(s)?);
                self.enqueue(i)?;
            }
            let ends: Vec<CudaEvent> = self.streams.iter().map(event).collect::<Result<_, _>>()?;
            total += max_elapsed(&starts, &ends)?;
        }
        Ok(total / f64::from(reps.max(1)))
    }
}

impl Drop for Compute {
    fn drop(&mut self) {
        for w in &self.work {
            if let Work::Gemm { handle, .. } = w {
                // SAFETY: each handle was created by `open` and is destroyed once, after the
                // caller synchronised its streams.
                let _ = unsafe { blas::destroy_handle(*handle) };
            }
        }
    }
}

/// A timing event recorded on `s` now.
fn event(s: &Arc<CudaStream>) -> Result<CudaEvent, ExecError> {
    s.record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(|e| driver_err("cuEventRecord", e))
}

/// The largest of the per-GPU spans start[i] -> end[i], ms.
fn max_elapsed(starts: &[CudaEvent], ends: &[CudaEvent]) -> Result<f64, ExecError> {
    starts.iter().zip(ends).try_fold(0.0f64, |m, (a, b)| {
        a.elapsed_ms(b)
            .map(|t| m.max(f64::from(t)))
            .map_err(|e| driver_err("cuEventElapsedTime", e))
    })
}

fn sync_all(gpus: &[&Gpu], streams: &[Arc<CudaStream>]) -> Result<(), ExecError> {
    gpus.iter().try_for_each(|g| g.synchronize())?;
    streams
        .iter()
        .try_for_each(|s| s.synchronize().map_err(|e| driver_err("stream sync", e)))
}

/// A contender's figures at one size: (collective alone, pair, GEMM in pair), ms.
fn measure(
    gpus: &[&Gpu],
    compute: &Compute,
    c: &OverlapConfig,
    call: &dyn Fn() -> Result<(), ExecError>,
) -> Result<(f64, f64, f64), ExecError> {
    let main: Vec<Arc<CudaStream>> = gpus.iter().map(|g| g.stream().clone()).collect();
    for _ in 0..c.warmup {
        call()?;
    }
    sync_all(gpus, &compute.streams)?;
    let iters = c.iters.max(1);
    let (mut alone, mut pair, mut gemm) = (0.0, 0.0, 0.0);
    for _ in 0..iters {
        let starts: Vec<CudaEvent> = main.iter().map(event).collect::<Result<_, _>>()?;
        call()?;
        let ends: Vec<CudaEvent> = main.iter().map(event).collect::<Result<_, _>>()?;
        alone += max_elapsed(&starts, &ends)?;
        sync_all(gpus, &compute.streams)?;
        // Together: the compute stream waits on the main stream's start, the GEMM goes first.
        let starts: Vec<CudaEvent> = main.iter().map(event).collect::<Result<_, _>>()?;
        for (i, s) in compute.streams.iter().enumerate() {
            s.wait(&starts[i])
                .map_err(|e| driver_err("cuStreamWaitEvent", e))?;
            compute.enqueue(i)?;
        }
        call()?;
        let coll_ends: Vec<CudaEvent> = main.iter().map(event).collect::<Result<_, _>>()?;
        let gemm_ends: Vec<CudaEvent> = compute
            .streams
            .iter()
            .map(event)
            .collect::<Result<_, _>>()?;
        let g = max_elapsed(&starts, &gemm_ends)?;
        pair += g.max(max_elapsed(&starts, &coll_ends)?);
        gemm += g;
        sync_all(gpus, &compute.streams)?;
    }
    let n = f64::from(iters);
    Ok((alone / n, pair / n, gemm / n))
}

/// Runs the overlap benchmark of `plan` as the module docs say.
pub fn run(plan: ValidPlan, c: &OverlapConfig) -> Result<OverlapReport, ExecError> {
    let n = plan.ranks;
    let kind = plan.collective.0;
    if n as usize != c.gpus.len() || kind == CollectiveKind::Custom {
        return Err(ExecError::Gpu(format!(
            "--overlap needs one rank per GPU and a standard collective ({n} ranks of {} on {} GPUs)",
            kind.name(),
            c.gpus.len()
        )));
    }
    let esize = c.dtype.size() as u64;
    let count_of = |size: u64| nccl_count(kind, size / esize, n);
    let max_count = c
        .sizes
        .iter()
        .map(|&s| count_of(s))
        .max()
        .unwrap_or(1)
        .max(1);
    let (in_max, out_max) = (
        plan.buffer_elements(0, max_count),
        plan.buffer_elements(1, max_count),
    );
    let load = LoadOptions {
        root: c.root,
        settings: c.settings.clone(),
        ..LoadOptions::new(c.dtype, max_count)
    };
    let exec = CudaExecutor::load(plan.clone(), &c.gpus, &load)?;
    let gpus: Vec<&Gpu> = (0..n)
        .map(|q| {
            exec.rank_device(q)
                .ok_or_else(|| ExecError::Gpu("rank without GPU".into()))
        })
        .collect::<Result<_, _>>()?;
    let (send_bytes, recv_bytes) = (in_max * esize, in_max.max(out_max) * esize);
    let mut send = Vec::with_capacity(gpus.len());
    let mut recv = Vec::with_capacity(gpus.len());
    for g in &gpus {
        send.push(user_buffer(g, send_bytes)?);
        recv.push(user_buffer(g, recv_bytes)?);
    }
    let ranks: Vec<RankBuffers<'_>> = send
        .iter()
        .zip(&recv)
        .map(|(send, recv)| RankBuffers::OutOfPlace { send, recv })
        .collect();
    let mut compute = Compute::open(&gpus)?;
    let alone_ms = compute.size_to_target(&gpus)?;
    let gemm = GemmInfo {
        engine: compute.engine.clone(),
        shape: compute.shape,
        alone_ms,
    };
    // NCCL's contenders, each set up or left out with a note.
    let mut notes = Vec::new();
    let mem = MemBuffers::alloc(&gpus, send_bytes, recv_bytes)?;
    // Defined inputs for NCCL too (coll's buffers come zeroed).
    for (g, &(sp, rp)) in gpus.iter().zip(mem.bases()) {
        // SAFETY: `sp` and `rp` are this GPU's ncclMemAlloc buffers of exactly these sizes.
        unsafe {
            g.zero(sp, send_bytes)?;
            g.zero(rp, recv_bytes)?;
        }
    }
    let mut nccls: Vec<(String, Nccl)> = Vec::new();
    match Nccl::init(&c.gpus) {
        Ok(comm) => nccls.push(("NCCL default".into(), comm)),
        Err(e) => notes.push(format!("NCCL default left out: {e}")),
    }
    match Nccl::init_policy(&gpus, CtaPolicy::Efficiency) {
        Ok(comm) => nccls.push(("NCCL efficiency".into(), comm)),
        Err(e) => notes.push(format!("NCCL efficiency left out: {e}")),
    }
    if matches!(kind, CollectiveKind::AllGather | CollectiveKind::AllToAll) {
        let zero = Nccl::init_policy(&gpus, CtaPolicy::Zero).and_then(|mut z| {
            z.register_symmetric(&mem)?;
            Ok(z)
        });
        match zero {
            Ok(comm) => nccls.push(("NCCL zero-CTA".into(), comm)),
            Err(e) => notes.push(format!("NCCL zero-CTA left out: {e}")),
        }
    }
    let mut rows = Vec::new();
    for &size in &c.sizes {
        let count = count_of(size);
        let coll_call = || exec.launch(&ranks, count, c.op).map(drop);
        let (a, p, g) = measure(&gpus, &compute, c, &coll_call)?;
        exec.finish()?;
        let row = |who: &str, (a, p, g): (f64, f64, f64)| OverlapRow {
            size,
            who: who.into(),
            gemm_alone_ms: alone_ms,
            collective_alone_ms: a,
            pair_ms: p,
            gemm_in_pair_ms: g,
        };
        rows.push(row("coll", (a, p, g)));
        let bufs = mem.bases().to_vec();
        for (who, comm) in &nccls {
            // SAFETY: `gpus` are the GPUs of `c.gpus` in order (one rank per GPU); `bufs` are
            // each rank's ncclMemAlloc buffers on its GPU, sized for the largest count (send
            // and receive apart: out of place), alive until after `nccls` is dropped, and
            // every launch is synchronised by `measure`.
            let call = || unsafe {
                comm.launch(&gpus, kind, &bufs, count as usize, c.dtype, c.op, c.root)
            };
            match measure(&gpus, &compute, c, &call) {
                Ok(m) => rows.push(row(who, m)),
                Err(e) => notes.push(format!("{who} at {size} B failed: {e}")),
            }
        }
    }
    sync_all(&gpus, &compute.streams)?;
    // Communicators before the memory they registered; the compute before the buffers.
    drop(nccls);
    drop(mem);
    drop(compute);
    Ok(OverlapReport { gemm, rows, notes })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(size: u64, who: &str, pair_ms: f64, gemm_in_pair_ms: f64) -> OverlapRow {
        OverlapRow {
            size,
            who: who.into(),
            gemm_alone_ms: 2.0,
            collective_alone_ms: 1.5,
            pair_ms,
            gemm_in_pair_ms,
        }
    }

    #[test]
    fn pairs_are_compared_with_the_fastest_nccl_pair() {
        let r = OverlapReport {
            gemm: GemmInfo {
                engine: "cuBLAS".into(),
                shape: (8192, 8192, 8192),
                alone_ms: 2.0,
            },
            rows: vec![
                row(64 << 20, "coll", 2.7, 2.5),
                row(64 << 20, "NCCL default", 3.2, 3.0),
                row(64 << 20, "NCCL efficiency", 3.0, 2.6),
                row(1 << 30, "coll", 5.0, 3.0),
            ],
            notes: Vec::new(),
        };
        assert_eq!(r.rows[0].slowdown(), 1.25);
        let text = table(&r);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 6, "{text}");
        let cells =
            |l: &str| -> Vec<String> { l.split('|').map(|c| c.trim().to_string()).collect() };
        // coll's pair 2.7 against NCCL-best's 3.0 (the efficiency policy's).
        assert_eq!(
            cells(lines[2])[1..9],
            [
                "67108864", "coll", "2.000", "1.500", "2.700", "2.500", "1.25x", "0.90"
            ]
        );
        assert_eq!(cells(lines[3])[8], "1.07");
        assert_eq!(cells(lines[4])[8], "1.00");
        // No NCCL at 1 GiB: nothing to compare with.
        assert_eq!(cells(lines[5])[8], "-");
    }
}
