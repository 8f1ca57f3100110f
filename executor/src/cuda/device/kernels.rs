//! The interpreter kernel on the GPUs: one element type's entries compiled by NVRTC for each
//! GPU's architecture as independent units ([`KernelUnit`], named in `units.rs`, compiled at
//! once on threads, or read from the images cached on disk, `nvrtc.rs`), each unit loaded as
//! a module of its own per GPU, its functions looked up once ([`TypedKernels`]) and launched
//! by the `unsafe fn`s below, whose `# Safety` sections say what the device addresses in
//! their arguments must be.
//!
//! Invariants: the units of a load ([`units_of`]) hold every entry
//! [`entry_names_of`](super::entry_names_of) lists for its element type, each in exactly one
//! unit ([`unit_of_entry`](super::unit_of_entry) says which), except that a load for a plan
//! that never reduces leaves out the interpreters of every operator but sum, which then
//! serves every operator (with no reducing op, the operator changes nothing the interpreter
//! does), and one for a plan with no block of several peers leaves out every interpreter's
//! `_multi` twin (for GPUs with such a block, launched under
//! [`MODE_SEVERAL`](crate::cuda::abi::MODE_SEVERAL)), which is in a unit of its own;
//! [`entry_names`](super::entry_names) is every type's, what the source holds with no define.
//! A [`TypedKernels`] holds functions of one GPU's modules only, launched only on that GPU's
//! streams, and every function a call may launch is loaded with the plan, before any call is
//! enqueued (nothing compiles or loads a module during a graph capture); each launch's
//! parameter array matches its entry's parameters in number, order and layout (the repr(C)
//! argument structs of [`crate::cuda`]).

use super::gpu::Gpu;
use super::gpu_err;
use super::nvrtc::{self, UnitSource};
use super::units::{
    KernelUnit, OPS, dtype_name, interp_entries, ll128_entry, oneshot_entry, op_name, units_of,
};
use crate::cuda::abi::Proto;
use crate::dtype::{DType, ReduceOp};
use crate::error::ExecError;
use cudarc::driver::{CudaFunction, result, sys};
use std::ffi::c_void;
use std::time::Duration;

/// The compiled kernels on every GPU.
pub struct Kernels {
    per_gpu: Vec<GpuKernels>,
}

/// One GPU's kernels.
#[derive(Clone)]
pub struct GpuKernels {
    funcs: Vec<(String, CudaFunction)>,
    /// Whether the interpreters of every operator were loaded, rather than sum's alone.
    reduces: bool,
    /// Whether the `_multi` twins were loaded (the plan has a block of several peers).
    several: bool,
}

impl std::fmt::Debug for Kernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Kernels({} GPUs)", self.per_gpu.len())
    }
}

impl std::fmt::Debug for GpuKernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GpuKernels({})", self.funcs.len())
    }
}

/// What [`CompiledKernels::compile`] compiled or read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelLoad {
    /// NVRTC's wall time, every unit's compile together (zero when every image came from
    /// the disk cache).
    pub compile: Duration,
    pub from_cache: bool,
    /// Per architecture: the images loaded and how, e.g. `cubin sm_90 f32: 13 units, 13
    /// compiled on 13 threads in 0.95 s (slowest f32-max-bulk 0.94 s, serial 8.10 s)`, or
    /// `cubin sm_90 f32: 13 units from cache`.
    pub images: Vec<String>,
}

/// For the setup report: what one architecture's load compiled and read.
fn describe(dtype: DType, units: &[KernelUnit], got: &nvrtc::UnitImages) -> String {
    let image = got
        .units
        .first()
        .map_or_else(String::new, |u| u.image.describe());
    let n = units.len();
    let compiled: Vec<(String, Duration)> = units
        .iter()
        .zip(&got.units)
        .filter(|(_, g)| !g.from_cache)
        .map(|(u, g)| (u.name(), g.compile))
        .collect();
    let head = format!("{image} {}: {n} units", dtype.name());
    // A load takes all of its units built in, or none (`nvrtc::builtin`).
    if got.units.iter().all(|u| u.builtin) {
        return format!("{head} built into the binary");
    }
    let Some((slowest, slow)) = compiled.iter().max_by_key(|(_, t)| *t) else {
        // Read after waiting for another process that was compiling them (the cache's
        // per-unit locks), or there from the start.
        return if got.wall.is_zero() {
            format!("{head} from cache")
        } else {
            format!(
                "{head} from cache, after {:.2} s waiting for another process's compile",
                got.wall.as_secs_f64()
            )
        };
    };
    let serial: Duration = compiled.iter().map(|(_, t)| *t).sum();
    let cached = n - compiled.len();
    format!(
        "{head}, {} compiled on {} thread{} in {:.2} s \
         (slowest {slowest} {:.2} s, serial {:.2} s){}",
        compiled.len(),
        got.threads,
        if got.threads == 1 { "" } else { "s" },
        got.wall.as_secs_f64(),
        slow.as_secs_f64(),
        serial.as_secs_f64(),
        if cached > 0 {
            format!(", {cached} from cache")
        } else {
            String::new()
        }
    )
}

/// Threads a load compiles its units on: one per unit, up to the cores this process may
/// use.
fn compile_threads(units: usize) -> usize {
    std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(units)
        .max(1)
}

/// A kernel's units compiled (or read from the cache) for some architectures, not yet loaded
/// on any GPU: NVRTC needs no context, so this can run while the GPUs' contexts start.
#[derive(Debug)]
pub struct CompiledKernels {
    dtype: DType,
    reduces: bool,
    several: bool,
    units: Vec<KernelUnit>,
    per_arch: Vec<(String, nvrtc::UnitImages)>,
    load: KernelLoad,
}

impl CompiledKernels {
    /// Compiles `dtype`'s units of the source ([`units_of`]; every operator's unless the
    /// plan never `reduces`, the `_multi` twins only where it has a block of `several`
    /// peers) for each distinct architecture of `arches` with NVRTC (the
    /// units at once on threads), or reads the images cached in `cache_dir` (`None`: no
    /// disk cache, every load compiles).
    pub fn compile(
        arches: &[String],
        source: &str,
        dtype: DType,
        reduces: bool,
        several: bool,
        cache_dir: Option<&std::path::Path>,
    ) -> Result<CompiledKernels, ExecError> {
        let units = units_of(dtype, reduces, several);
        let sources: Vec<UnitSource> = units.iter().map(KernelUnit::source).collect();
        let mut load = KernelLoad {
            compile: Duration::ZERO,
            from_cache: true,
            images: Vec::new(),
        };
        let mut per_arch: Vec<(String, nvrtc::UnitImages)> = Vec::new();
        for arch in arches {
            if per_arch.iter().any(|(a, _)| a == arch) {
                continue;
            }
            let threads = compile_threads(sources.len());
            let got = match nvrtc::builtin(source, arch, &sources) {
                Some(got) => got,
                None => nvrtc::images(source, arch, &sources, cache_dir, threads)?,
            };
            load.compile += got.wall;
            load.from_cache &= got.units.iter().all(|u| u.from_cache);
            load.images.push(describe(dtype, &units, &got));
            per_arch.push((arch.clone(), got));
        }
        Ok(CompiledKernels {
            dtype,
            reduces,
            several,
            units,
            per_arch,
            load,
        })
    }

    /// Loads each unit as a module on each GPU, from the images of its architecture.
    pub fn load(&self, gpus: &[Gpu]) -> Result<Kernels, ExecError> {
        let mut per_gpu = Vec::with_capacity(gpus.len());
        for gpu in gpus {
            let arch = gpu.arch()?;
            let (_, images) = self
                .per_arch
                .iter()
                .find(|(a, _)| *a == arch)
                .ok_or_else(|| {
                    ExecError::Gpu(format!(
                        "the {} kernel was not compiled for {arch}",
                        self.dtype.name()
                    ))
                })?;
            let mut funcs = Vec::new();
            for (unit, img) in self.units.iter().zip(&images.units) {
                let module = gpu.ctx.load_module(img.image.to_ptx()).map_err(|e| {
                    gpu_err(&format!("cannot load the kernel module {}", unit.name()), e)
                })?;
                for name in unit.entries() {
                    let f = module
                        .load_function(&name)
                        .map_err(|e| gpu_err(&format!("kernel {name}"), e))?;
                    funcs.push((name, f));
                }
            }
            per_gpu.push(GpuKernels {
                funcs,
                reduces: self.reduces,
                several: self.several,
            });
        }
        Ok(Kernels { per_gpu })
    }

    /// What was compiled or read.
    pub fn report(&self) -> &KernelLoad {
        &self.load
    }
}

impl Kernels {
    pub fn for_gpu(&self, i: usize) -> GpuKernels {
        self.per_gpu.get(i).cloned().unwrap_or(GpuKernels {
            funcs: Vec::new(),
            reduces: true,
            several: false,
        })
    }
}

/// The entry that serves operator `OPS[op]` (`ll`: the low-latency protocol's; `multi`: the
/// twin for blocks of several peers) of a load of `dtype`: its own, or sum's where the load
/// did not compile the others (`reduces` false).
fn served_by(dtype: DType, op: usize, ll: bool, multi: bool, reduces: bool) -> String {
    let [plain, twin] = interp_entries(dtype_name(dtype), serving_op(op, reduces), ll);
    if multi { twin } else { plain }
}

/// The operator whose entries serve operator `OPS[op]`: itself, or sum where the load did
/// not compile the others (`reduces` false), whose interpreters then serve every operator.
fn serving_op(op: usize, reduces: bool) -> &'static str {
    if reduces {
        OPS.get(op).copied().unwrap_or("sum")
    } else {
        OPS[0]
    }
}

/// The LL128 entry that serves operator `OPS[op]`, as [`served_by`].
fn served_by_ll128(dtype: DType, op: usize, reduces: bool) -> String {
    ll128_entry(dtype_name(dtype), serving_op(op, reduces))
}

impl GpuKernels {
    fn find(&self, name: &str) -> Result<&CudaFunction, ExecError> {
        self.funcs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, f)| f)
            .ok_or_else(|| ExecError::Gpu(format!("no kernel {name}")))
    }

    /// The kernels of one element type, looked up once (a call indexes them by operator).
    pub fn typed(&self, dtype: DType) -> Result<TypedKernels, ExecError> {
        let get = |op: usize, ll: bool, multi: bool| {
            self.find(&served_by(dtype, op, ll, multi, self.reduces))
                .cloned()
        };
        let four = |ll: bool, multi: bool| -> Result<[CudaFunction; 4], ExecError> {
            Ok([
                get(0, ll, multi)?,
                get(1, ll, multi)?,
                get(2, ll, multi)?,
                get(3, ll, multi)?,
            ])
        };
        let ll128 = |op: usize| {
            self.find(&served_by_ll128(dtype, op, self.reduces))
                .cloned()
        };
        let oneshot = |op: usize| {
            self.find(&oneshot_entry(
                dtype_name(dtype),
                serving_op(op, self.reduces),
            ))
            .cloned()
        };
        Ok(TypedKernels {
            dtype,
            main: four(false, false)?,
            main_ll: four(true, false)?,
            main_ll128: [ll128(0)?, ll128(1)?, ll128(2)?, ll128(3)?],
            oneshot: [oneshot(0)?, oneshot(1)?, oneshot(2)?, oneshot(3)?],
            multi: self.several.then(|| four(false, true)).transpose()?,
            multi_ll: self.several.then(|| four(true, true)).transpose()?,
            scale: self
                .find(&format!("coll_{}_scale", dtype_name(dtype)))?
                .clone(),
            barrier: self.find("coll_barrier")?.clone(),
        })
    }
}

/// One GPU's kernels for one element type: the interpreter per operator, and the avg scaling.
pub struct TypedKernels {
    dtype: DType,
    /// In the order of `OPS`: bulk calls' entries, LL calls' and LL128 calls'.
    main: [CudaFunction; 4],
    main_ll: [CudaFunction; 4],
    main_ll128: [CudaFunction; 4],
    /// The one-shot allreduce per operator (`kernel/oneshot.cuh`).
    oneshot: [CudaFunction; 4],
    /// Their `_multi` twins, for GPUs with a block of several peers
    /// ([`MODE_SEVERAL`](crate::cuda::abi::MODE_SEVERAL)): loaded only for a plan that has
    /// one.
    multi: Option<[CudaFunction; 4]>,
    multi_ll: Option<[CudaFunction; 4]>,
    scale: CudaFunction,
    /// The barrier of copy-engine calls.
    barrier: CudaFunction,
}

impl std::fmt::Debug for TypedKernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TypedKernels({})", self.dtype.name())
    }
}

impl TypedKernels {
    /// Loads the kernels now rather than at their first launch (CUDA loads module functions
    /// lazily by default), so the first call costs what later ones do.
    pub fn preload(&self, gpu: &Gpu) -> Result<(), ExecError> {
        gpu.bind()?;
        // Every entry a call may launch, the LL ones and the barrier too: a function loaded
        // lazily at its first launch would load it in the middle of a call (or of a graph
        // capture).
        let all = self
            .main
            .iter()
            .chain(&self.main_ll)
            .chain(&self.main_ll128)
            .chain(&self.oneshot);
        let all = all.chain(self.multi.iter().flatten());
        let all = all.chain(self.multi_ll.iter().flatten());
        for f in all.chain([&self.scale, &self.barrier]) {
            // SAFETY: a function of a module loaded in this (current) context.
            let r = unsafe { sys::cuFuncLoad(f.cu_function()) };
            if r != sys::cudaError_enum::CUDA_SUCCESS {
                return Err(gpu_err("cuFuncLoad", r));
            }
        }
        Ok(())
    }

    /// The entry of a call in protocol `proto` (a [`Proto`] code) on a GPU with (`multi`) or
    /// without a block of several peers.
    fn main_for(&self, op: ReduceOp, proto: u32, multi: bool) -> Result<&CudaFunction, ExecError> {
        let name = op_name(op);
        let i = OPS.iter().position(|o| *o == name).unwrap_or(0);
        if proto == Proto::Ll128.code() {
            // The host never runs LL128 with a block of several peers (setup::ll128_allowed).
            return if multi {
                Err(ExecError::Gpu(
                    "an LL128 call on a GPU with a block of several peers".into(),
                ))
            } else {
                Ok(&self.main_ll128[i])
            };
        }
        let ll = proto != Proto::Bulk.code();
        let twins = if ll { &self.multi_ll } else { &self.multi };
        match (ll, multi) {
            (false, false) => Ok(&self.main[i]),
            (true, false) => Ok(&self.main_ll[i]),
            (_, true) => twins.as_ref().map(|t| &t[i]).ok_or_else(|| {
                ExecError::Gpu(
                    "a call on a GPU with a block of several peers, but the kernels were \
                     loaded for a plan without one"
                        .into(),
                )
            }),
        }
    }

    /// Enqueues the interpreter on `blocks` CTAs on `stream`.
    ///
    /// # Safety
    /// `stream` is a live stream of `gpu`'s context; `ptrs`, `done`, `error` and `trace` (or
    /// 0) are this executor's live device arrays for this GPU; every nonzero pointer in
    /// `args` is device memory of at least the plan's buffer size at `count`, accessible from
    /// `gpu`, alive and not written by other work until the call has run; `blocks` is the
    /// GPU's plan blocks times `mode.active`, with `0 < mode.active <= mode.nsub`, so every
    /// CTA runs an entry of the block array.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn launch_main(
        &self,
        gpu: &Gpu,
        stream: sys::CUstream,
        op: ReduceOp,
        blocks: u32,
        threads: u32,
        ptrs: [u64; 6],
        done: u64,
        args: &crate::cuda::CallArgs,
        slicer: &crate::cuda::Slicer,
        slot_bytes: u32,
        slots: u32,
        error: u64,
        timeout_cycles: u64,
        trace: u64,
        mode: &crate::cuda::CallMode,
    ) -> Result<(), ExecError> {
        // The `_multi` twin only where a block of this GPU has several peers: the plain
        // entries have no several-peer path, and no cost of one (`kernel/entries.cu`).
        let multi = mode.flags & crate::cuda::abi::MODE_SEVERAL != 0;
        let f = self.main_for(op, mode.proto, multi)?;
        let mut md = *mode;
        let [mut a0, mut a1, mut a2, mut a3, mut a4, mut a5] = ptrs;
        let mut call = *args;
        let mut sl = *slicer;
        let (mut dn, mut sb, mut ns, mut e, mut t, mut tr) =
            (done, slot_bytes, slots, error, timeout_cycles, trace);
        let mut params: [*mut c_void; 15] = [
            (&mut a0 as *mut u64).cast(),
            (&mut a1 as *mut u64).cast(),
            (&mut a2 as *mut u64).cast(),
            (&mut a3 as *mut u64).cast(),
            (&mut a4 as *mut u64).cast(),
            (&mut a5 as *mut u64).cast(),
            (&mut dn as *mut u64).cast(),
            (&mut call as *mut crate::cuda::CallArgs).cast(),
            (&mut sl as *mut crate::cuda::Slicer).cast(),
            (&mut sb as *mut u32).cast(),
            (&mut ns as *mut u32).cast(),
            (&mut e as *mut u64).cast(),
            (&mut t as *mut u64).cast(),
            (&mut tr as *mut u64).cast(),
            (&mut md as *mut crate::cuda::CallMode).cast(),
        ];
        if blocks == 0 {
            return Ok(());
        }
        gpu.bind()?;
        // SAFETY: the function comes from a module loaded in this GPU's context; `params`
        // points at 15 live values whose types match the kernel's parameters in order (6
        // device pointers, the finished-CTA counter, CallArgs by value (repr(C), the kernel's
        // layout), Slicer by value (repr(C), the kernel's layout), slot bytes and slots as
        // u32, the error record pointer, the timeout, the trace pointer or 0, CallMode by
        // value (repr(C), the kernel's layout)); the driver copies them before returning.
        // Stream and pointers: this function's contract.
        unsafe {
            result::launch_kernel(
                f.cu_function(),
                (blocks, 1, 1),
                (threads, 1, 1),
                0,
                stream,
                &mut params,
            )
        }
        .map_err(|e| gpu_err("cuLaunchKernel", e))
    }

    /// Enqueues the division of every local rank's output by `n` (avg) on `stream`.
    ///
    /// # Safety
    /// `stream` is a live stream of `gpu`'s context; the first `nranks` output pointers of
    /// `args` are device memory of at least `out_elems` elements, accessible from `gpu`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn launch_scale(
        &self,
        gpu: &Gpu,
        stream: sys::CUstream,
        args: &crate::cuda::CallArgs,
        nranks: u32,
        out_elems: u64,
        n: u32,
    ) -> Result<(), ExecError> {
        let f = &self.scale;
        let mut call = *args;
        let (mut nr, mut oe, mut nn) = (nranks, out_elems, n);
        let mut params: [*mut c_void; 4] = [
            (&mut call as *mut crate::cuda::CallArgs).cast(),
            (&mut nr as *mut u32).cast(),
            (&mut oe as *mut u64).cast(),
            (&mut nn as *mut u32).cast(),
        ];
        gpu.bind()?;
        // SAFETY: as in `launch_main`: a function of this context and 4 live parameters of
        // the kernel's types (CallArgs by value, local rank count, output elements, n).
        unsafe {
            result::launch_kernel(
                f.cu_function(),
                (264, 1, 1),
                (256, 1, 1),
                0,
                stream,
                &mut params,
            )
        }
        .map_err(|e| gpu_err("cuLaunchKernel (scale)", e))
    }
}

impl TypedKernels {
    /// Enqueues a one-shot allreduce (`kernel/oneshot.cuh`) for the `local` ranks of this GPU:
    /// [`ONESHOT_CTAS`](crate::cuda::abi::ONESHOT_CTAS) CTAs of
    /// [`ONESHOT_THREADS`](crate::cuda::abi::ONESHOT_THREADS) threads per rank, every call
    /// alike (the kernel's invariants rest on it).
    ///
    /// # Safety
    /// `stream` is a live stream of `gpu`'s context; `args.inbox` holds every rank's live
    /// one-shot region as `gpu` addresses it, each of `args.nranks` parts of `args.lines`
    /// lines per parity and its counters; the first `local` inputs and outputs are device
    /// memory of `args.count` elements accessible from `gpu`, alive until the call has run;
    /// `args.err` is this GPU's error record.
    pub unsafe fn launch_oneshot(
        &self,
        gpu: &Gpu,
        stream: sys::CUstream,
        op: ReduceOp,
        local: u32,
        args: &crate::cuda::OneShotArgs,
    ) -> Result<(), ExecError> {
        use crate::cuda::abi::{ONESHOT_CTAS, ONESHOT_THREADS};
        let name = op_name(op);
        let f = &self.oneshot[OPS.iter().position(|o| *o == name).unwrap_or(0)];
        let mut a = *args;
        let mut params: [*mut c_void; 1] = [(&mut a as *mut crate::cuda::OneShotArgs).cast()];
        if local == 0 {
            return Ok(());
        }
        gpu.bind()?;
        // SAFETY: a function of this context and one live parameter of the kernel's type
        // (OneShotArgs by value, the same layout); the pointers in it per the contract.
        unsafe {
            result::launch_kernel(
                f.cu_function(),
                (local * ONESHOT_CTAS as u32, 1, 1),
                (ONESHOT_THREADS as u32, 1, 1),
                0,
                stream,
                &mut params,
            )
        }
        .map_err(|e| gpu_err("cuLaunchKernel (one-shot)", e))
    }

    /// Enqueues a copy-engine call's barrier (the kernel's `coll_barrier`): one thread.
    ///
    /// # Safety
    /// `stream` is a live stream of `gpu`'s context; every pointer in `args` is a live 8-byte
    /// word this GPU can read (`mine` its own, to write), `args.err` its error record.
    pub unsafe fn launch_barrier(
        &self,
        gpu: &Gpu,
        stream: sys::CUstream,
        args: &crate::cuda::BarrierArgs,
    ) -> Result<(), ExecError> {
        let mut a = *args;
        let mut params: [*mut c_void; 1] = [(&mut a as *mut crate::cuda::BarrierArgs).cast()];
        gpu.bind()?;
        // SAFETY: a function of this context and one live parameter of the kernel's type
        // (BarrierArgs by value, the same layout); the pointers in it per the contract.
        unsafe {
            result::launch_kernel(
                self.barrier.cu_function(),
                (1, 1, 1),
                (1, 1, 1),
                0,
                stream,
                &mut params,
            )
        }
        .map_err(|e| gpu_err("cuLaunchKernel (barrier)", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::device::units::unit_of_entry;
    #[test]
    fn a_plan_that_never_reduces_loads_sum_for_every_operator() {
        let units = units_of(DType::Bf16, false, true);
        let names: Vec<String> = units.iter().map(KernelUnit::name).collect();
        assert_eq!(
            names,
            [
                "bf16-sum-bulk",
                "bf16-sum-ll",
                "bf16-sum-bulk-multi",
                "bf16-sum-ll-multi",
                "bf16-sum-ll128",
                "bf16-aux"
            ]
        );
        for op in 0..OPS.len() {
            for (ll, multi) in [(false, false), (true, false), (false, true), (true, true)] {
                let e = served_by(DType::Bf16, op, ll, multi, false);
                assert!(unit_of_entry(&units, &e).is_some(), "{e}");
            }
            let e = served_by_ll128(DType::Bf16, op, false);
            assert_eq!(e, "coll_bf16_sum_ll128");
            assert!(unit_of_entry(&units, &e).is_some(), "{e}");
        }
        assert_eq!(served_by_ll128(DType::Bf16, 2, true), "coll_bf16_min_ll128");
        assert_eq!(
            served_by(DType::Bf16, 2, true, false, false),
            "coll_bf16_sum_ll"
        );
        assert_eq!(
            served_by(DType::Bf16, 2, true, false, true),
            "coll_bf16_min_ll"
        );
        assert_eq!(
            served_by(DType::Bf16, 3, false, false, true),
            "coll_bf16_max"
        );
        assert_eq!(
            served_by(DType::Bf16, 3, true, true, true),
            "coll_bf16_max_ll_multi"
        );
        assert_eq!(
            served_by(DType::Bf16, 1, false, true, false),
            "coll_bf16_sum_multi"
        );
    }

    #[test]
    fn the_setup_report_says_units_threads_and_times() {
        let units = units_of(DType::F32, true, false);
        let image = |from_cache: bool, ms: u64| nvrtc::UnitImage {
            image: nvrtc::Image {
                cubin: true,
                arch: "sm_90".into(),
                gpu_arch: "sm_90".into(),
                bytes: Vec::new(),
            },
            from_cache,
            builtin: false,
            compile: Duration::from_millis(ms),
        };
        let cold = nvrtc::UnitImages {
            units: (0..units.len() as u64)
                .map(|i| image(false, 100 + 10 * i))
                .collect(),
            threads: 9,
            wall: Duration::from_millis(200),
        };
        assert_eq!(
            describe(DType::F32, &units, &cold),
            "cubin sm_90 f32: 13 units, 13 compiled on 9 threads in 0.20 s \
             (slowest f32-aux 0.22 s, serial 2.08 s)"
        );
        let warm = nvrtc::UnitImages {
            units: units.iter().map(|_| image(true, 0)).collect(),
            threads: 0,
            wall: Duration::ZERO,
        };
        assert_eq!(
            describe(DType::F32, &units, &warm),
            "cubin sm_90 f32: 13 units from cache"
        );
        let mut part = warm.clone();
        part.units[3] = image(false, 500);
        part.threads = 1;
        part.wall = Duration::from_millis(510);
        assert_eq!(
            describe(DType::F32, &units, &part),
            "cubin sm_90 f32: 13 units, 1 compiled on 1 thread in 0.51 s \
             (slowest f32-prod-ll 0.50 s, serial 0.50 s), 12 from cache"
        );
        let mut builtin = warm.clone();
        for u in &mut builtin.units {
            u.builtin = true;
        }
        assert_eq!(
            describe(DType::F32, &units, &builtin),
            "cubin sm_90 f32: 13 units built into the binary"
        );
    }
}
