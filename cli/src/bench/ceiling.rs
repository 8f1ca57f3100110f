//! Link ceilings: what plain SM stores (and loads) between GPUs reach, the yardstick that
//! `coll bench --vs-nccl` prints beside its sweep. A copy kernel of this module's own
//! ([`SOURCE`], compiled by NVRTC for each GPU's architecture) moves 16-byte words from one
//! GPU's memory into another's, every SM of the launching GPU at it: no protocol, no flags,
//! so the most any store-based transfer between the two can carry. And the launch floor of
//! eager calls ([`LinkProbe::launch_floor`]): an empty kernel on every GPU per call, enqueued
//! as coll enqueues a call's GPUs, the least an eager call of one kernel per GPU can take.
//!
//! Invariants: a [`LinkProbe`] holds its own handles to the GPUs (their primary contexts,
//! shared with any executor of this process, so peer access is enabled once for both) and
//! the kernel loaded on each; every measurement allocates its buffers itself, sized for the
//! words it copies, and frees them only after synchronising every GPU, so no launched copy
//! outlives or overruns its memory.

use coll_executor::ExecError;
use coll_executor::cuda::device::{
    DeviceBuffer, Gpu, NO_NVRTC, driver_present, enable_peer_access, nvrtc_present, user_buffer,
};
use coll_executor::cuda::settings::DEFAULT_SPIN;
use coll_executor::cuda::{LaunchMode, launch_threads};
use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};
use std::time::Instant;

/// The copy kernel: every thread of the grid copies 16-byte words, grid-strided, from `src`
/// to `dst` with one plain load and one plain store each.
pub const SOURCE: &str = r#"
extern "C" __global__ void coll_link_copy(uint4* dst, const uint4* src, unsigned long long words) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < words; i += stride)
        dst[i] = src[i];
}
extern "C" __global__ void coll_link_empty() {}
"#;

/// The kernel's entry point in [`SOURCE`].
pub const ENTRY: &str = "coll_link_copy";

/// The empty kernel of [`SOURCE`], the launch floor's ([`LinkProbe::launch_floor`]).
pub const EMPTY: &str = "coll_link_empty";

/// Threads per CTA, and CTAs per SM: enough loads in flight to fill a link.
const THREADS: u32 = 512;
const CTAS_PER_SM: u32 = 4;

/// Warm-up rounds before each timed measurement.
const WARMUP: u32 = 2;

/// One direction of the link from GPU 0 to GPU 1, GB/s, as the SMs fill it
/// ([`LinkProbe::one_way`]).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct OneWay {
    /// GPU 0's SMs store into GPU 1's memory.
    pub push: f64,
    /// GPU 1's SMs load from GPU 0's memory.
    pub pull: f64,
    /// Both at once, half of the data each.
    pub push_pull: f64,
}

/// One copy of a measurement: GPU `gpu` (an index into the probe's GPUs) copies `words`
/// 16-byte words from `src` to `dst`.
#[derive(Clone, Copy, Debug)]
struct Job {
    gpu: usize,
    dst: u64,
    src: u64,
    words: u64,
}

/// The copy kernel loaded on a set of GPUs, with peer access between all of them.
pub struct LinkProbe {
    gpus: Vec<Gpu>,
    kernels: Vec<CudaFunction>,
    /// [`EMPTY`] on each GPU.
    empties: Vec<CudaFunction>,
    /// CTAs each GPU launches: [`CTAS_PER_SM`] per SM.
    grids: Vec<u32>,
}

impl std::fmt::Debug for LinkProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ordinals: Vec<usize> = self.gpus.iter().map(Gpu::ordinal).collect();
        write!(f, "LinkProbe({ordinals:?})")
    }
}

fn nvrtc_err(e: impl std::fmt::Debug) -> ExecError {
    ExecError::Gpu(format!(
        "NVRTC could not compile the link-copy kernel: {e:?}"
    ))
}

fn driver_err(what: &str, e: impl std::fmt::Debug) -> ExecError {
    ExecError::Gpu(format!("{what} (link-copy kernel): {e:?}"))
}

impl LinkProbe {
    /// Opens the GPUs `ordinals`, enables peer access between them and loads the copy kernel
    /// on each (compiled once per architecture).
    pub fn open(ordinals: &[usize]) -> Result<LinkProbe, ExecError> {
        if !driver_present() {
            return Err(ExecError::Gpu("no CUDA driver".into()));
        }
        if !nvrtc_present() {
            return Err(ExecError::Gpu(NO_NVRTC.into()));
        }
        let gpus: Vec<Gpu> = ordinals
            .iter()
            .map(|&o| Gpu::open(o))
            .collect::<Result<_, _>>()?;
        enable_peer_access(&gpus)?;
        let mut ptx_of: Vec<(String, cudarc::nvrtc::Ptx)> = Vec::new();
        let (mut kernels, mut empties, mut grids) = (Vec::new(), Vec::new(), Vec::new());
        for gpu in &gpus {
            let arch = gpu.arch()?;
            let ptx = match ptx_of.iter().find(|(a, _)| *a == arch) {
                Some((_, p)) => p.clone(),
                None => {
                    let opts = cudarc::nvrtc::CompileOptions {
                        options: vec![format!(
                            "--gpu-architecture={}",
                            arch.replace("sm_", "compute_")
                        )],
                        ..Default::default()
                    };
                    let p =
                        cudarc::nvrtc::compile_ptx_with_opts(SOURCE, opts).map_err(nvrtc_err)?;
                    ptx_of.push((arch, p.clone()));
                    p
                }
            };
            let module = gpu
                .context()
                .load_module(ptx)
                .map_err(|e| driver_err("cannot load the module", e))?;
            kernels.push(
                module
                    .load_function(ENTRY)
                    .map_err(|e| driver_err("no entry", e))?,
            );
            empties.push(
                module
                    .load_function(EMPTY)
                    .map_err(|e| driver_err("no empty entry", e))?,
            );
            grids.push(gpu.sm_count()?.max(1) * CTAS_PER_SM);
        }
        Ok(LinkProbe {
            gpus,
            kernels,
            empties,
            grids,
        })
    }

    /// The launch floor of eager calls, µs per call: `reps` calls (after 20 untimed) each
    /// launching the empty kernel (one thread) on every GPU's stream, the GPUs' launches at
    /// once on coll's launch threads ([`launch_threads::for_gpus`] with `mode`, as a call of
    /// an executor with those settings enqueues its GPUs), then every GPU synchronised: what
    /// an eager call of one kernel per GPU costs before it does anything.
    pub fn launch_floor(&self, reps: u32, mode: LaunchMode) -> Result<f64, ExecError> {
        let threads = launch_threads::for_gpus(self.gpus.len(), mode, DEFAULT_SPIN)?;
        let one = |i: usize| -> Result<(), ExecError> {
            let (Some(gpu), Some(empty)) = (self.gpus.get(i), self.empties.get(i)) else {
                return Err(ExecError::Gpu(format!("no GPU {i} in the probe")));
            };
            let cfg = LaunchConfig {
                grid_dim: (1, 1, 1),
                block_dim: (1, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut launch = gpu.stream().launch_builder(empty);
            // SAFETY: `empty` is EMPTY of SOURCE, loaded in this GPU's context, and takes no
            // arguments and touches no memory.
            unsafe { launch.launch(cfg) }.map_err(|e| driver_err("cuLaunchKernel", e))?;
            Ok(())
        };
        let call = || match &threads {
            Some(l) => l.run(self.gpus.len(), one),
            None => (0..self.gpus.len()).try_for_each(one),
        };
        Ok(self.timed(20, reps, call)? * 1e6)
    }

    /// Seconds per `round` over `reps` rounds (at least one) after `warmup` untimed ones,
    /// every GPU synchronised before the clock starts and before it stops.
    fn timed(
        &self,
        warmup: u32,
        reps: u32,
        round: impl Fn() -> Result<(), ExecError>,
    ) -> Result<f64, ExecError> {
        let sync = || self.gpus.iter().try_for_each(Gpu::synchronize);
        for _ in 0..warmup {
            round()?;
        }
        sync()?;
        let t = Instant::now();
        for _ in 0..reps.max(1) {
            round()?;
        }
        sync()?;
        Ok(t.elapsed().as_secs_f64() / f64::from(reps.max(1)))
    }

    /// The SM-store ceiling between the GPUs, GB/s per direction: every GPU copies `bytes`
    /// into the next GPU's memory (in ordinal order, around), all GPUs at once, `reps` times
    /// after two warm-ups. `None` with fewer than two GPUs. Allocates `2 * bytes` per GPU
    /// for the measurement and frees it after.
    pub fn store_ceiling(&self, bytes: u64, reps: u32) -> Result<Option<f64>, ExecError> {
        let g = self.gpus.len();
        if g < 2 || bytes < 16 {
            return Ok(None);
        }
        let words = bytes / 16;
        let mut bufs: Vec<DeviceBuffer> = Vec::with_capacity(2 * g);
        let mut jobs = Vec::with_capacity(g);
        for i in 0..g {
            let src = user_buffer(&self.gpus[i], words * 16)?;
            let dst = user_buffer(&self.gpus[(i + 1) % g], words * 16)?;
            jobs.push(Job {
                gpu: i,
                dst: dst.ptr(),
                src: src.ptr(),
                words,
            });
            bufs.extend([src, dst]);
        }
        let rate = self.rate(&jobs, words * 16, reps).map(Some);
        drop(bufs);
        rate
    }

    /// What one direction of the link from the first GPU to the second carries when the SMs
    /// fill it ([`OneWay`]), over `bytes`, `reps` times after two warm-ups: the yardstick of
    /// a collective with one sender per link, as broadcast on 2 GPUs. `None` with fewer than
    /// two GPUs.
    pub fn one_way(&self, bytes: u64, reps: u32) -> Result<Option<OneWay>, ExecError> {
        if self.gpus.len() < 2 || bytes < 32 {
            return Ok(None);
        }
        let words = bytes / 16;
        let src = user_buffer(&self.gpus[0], words * 16)?;
        let dst = user_buffer(&self.gpus[1], words * 16)?;
        let (s, d) = (src.ptr(), dst.ptr());
        let half = words / 2;
        let moved = words * 16;
        let job = |gpu, dst, src, words| Job {
            gpu,
            dst,
            src,
            words,
        };
        let one_way = OneWay {
            push: self.rate(&[job(0, d, s, words)], moved, reps)?,
            pull: self.rate(&[job(1, d, s, words)], moved, reps)?,
            push_pull: self.rate(
                &[
                    job(0, d, s, half),
                    job(1, d + half * 16, s + half * 16, words - half),
                ],
                moved,
                reps,
            )?,
        };
        drop((src, dst));
        Ok(Some(one_way))
    }

    /// GB/s of `jobs` run together, each the copy kernel on its GPU's stream with every SM,
    /// `bytes` moved per round: two warm-up rounds, then `reps` timed. The callers' buffers
    /// cover every job's words and outlive this call, which synchronises before returning
    /// (on success and on error alike).
    fn rate(&self, jobs: &[Job], bytes: u64, reps: u32) -> Result<f64, ExecError> {
        let round = || -> Result<(), ExecError> {
            for j in jobs {
                let (Some(gpu), Some(kernel), Some(&grid)) = (
                    self.gpus.get(j.gpu),
                    self.kernels.get(j.gpu),
                    self.grids.get(j.gpu),
                ) else {
                    return Err(ExecError::Gpu(format!("no GPU {} in the probe", j.gpu)));
                };
                let cfg = LaunchConfig {
                    grid_dim: (grid, 1, 1),
                    block_dim: (THREADS, 1, 1),
                    shared_mem_bytes: 0,
                };
                let mut launch = gpu.stream().launch_builder(kernel);
                launch.arg(&j.dst).arg(&j.src).arg(&j.words);
                // SAFETY: `kernel` is ENTRY of SOURCE, loaded in this GPU's context, and takes
                // (uint4*, const uint4*, unsigned long long): the three 8-byte arguments given.
                // `dst` and `src` are 16-byte aligned allocations (cuMemAlloc) of at least
                // `16 * words` bytes on GPUs of this probe, which enabled peer access between
                // all of them; the callers keep them alive until `sync` below has run.
                unsafe { launch.launch(cfg) }.map_err(|e| driver_err("cuLaunchKernel", e))?;
            }
            Ok(())
        };
        let per = self.timed(WARMUP, reps, round);
        // Whatever failed, nothing launched may still run when the callers free the buffers.
        let settled = self.gpus.iter().try_for_each(Gpu::synchronize_all);
        let per = per?;
        settled?;
        Ok(bytes as f64 / per.max(1e-12) / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coll_executor::cuda::device::kernel_resources;

    /// The kernels compile through ptxas for sm_90 (the H200's) and keep within a
    /// 512-thread CTA's registers (.ci/run puts NVRTC on the library path for this test).
    #[test]
    fn the_copy_kernel_compiles_for_sm_90() {
        if !nvrtc_present() {
            eprintln!("the_copy_kernel_compiles_for_sm_90: skipped: no NVRTC");
            return;
        }
        let entries = kernel_resources(SOURCE, "sm_90").expect("compiles");
        let copy = entries
            .iter()
            .find(|e| e.name == ENTRY)
            .unwrap_or_else(|| panic!("{ENTRY} in {entries:?}"));
        assert!(copy.registers <= 65536 / THREADS, "{copy:?}");
        assert_eq!(copy.spill_stores, 0, "{copy:?}");
        // The launch floor's empty kernel beside it.
        assert!(entries.iter().any(|e| e.name == EMPTY), "{entries:?}");
    }
}
