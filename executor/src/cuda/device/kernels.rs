//! The interpreter kernel on the GPUs: one element type's entries compiled by NVRTC for each
//! GPU's architecture (or read from the image cached on disk, `nvrtc.rs`), loaded
//! as a module per GPU, looked up once ([`TypedKernels`]) and launched by the `unsafe fn`s
//! below, whose `# Safety` sections say what the device addresses in their arguments must be.
//!
//! Invariants: every entry [`entry_names_of`] lists for the loaded element type is in every
//! loaded module ([`entry_names`] is every type's, what the source holds with none selected); a
//! [`TypedKernels`] holds the functions of one GPU's module, launched only on that GPU's
//! streams; each launch's parameter array matches its entry's parameters in number, order
//! and layout (the repr(C) argument structs of [`crate::cuda`]).

use super::gpu::Gpu;
use super::gpu_err;
use super::nvrtc;
use crate::dtype::{DType, ReduceOp};
use crate::error::ExecError;
use cudarc::driver::{CudaFunction, result, sys};
use std::ffi::c_void;
use std::time::{Duration, Instant};

/// The compiled kernels on every GPU.
pub struct Kernels {
    per_gpu: Vec<Vec<(String, CudaFunction)>>,
}

/// One GPU's kernels.
pub struct GpuKernels {
    funcs: Vec<(String, CudaFunction)>,
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

const DTYPES: [&str; 7] = ["f32", "f16", "bf16", "i32", "f64", "i64", "u8"];
const OPS: [&str; 4] = ["sum", "prod", "min", "max"];

/// The entries a load of `dtype` compiles and loads (the source's `-DCOLL_DTYPE_<T>`):
/// its interpreter per operator and protocol, its avg scaling, and the barrier.
pub fn entry_names_of(dtype: DType) -> Vec<String> {
    let d = dtype_name(dtype);
    let mut names: Vec<String> = OPS
        .iter()
        .flat_map(|o| [format!("coll_{d}_{o}"), format!("coll_{d}_{o}_ll")])
        .collect();
    names.push(format!("coll_{d}_scale"));
    names.push("coll_barrier".into());
    names
}

/// What [`Kernels::load_all`] compiled or read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelLoad {
    /// NVRTC's time (zero when every image came from the disk cache).
    pub compile: Duration,
    pub from_cache: bool,
    /// Per architecture: the image loaded, e.g. `cubin sm_90 f32`.
    pub images: Vec<String>,
}

/// Every entry of the kernel source with no element type selected: the interpreter per element type,
/// operator and protocol (bulk, `_ll`), the avg scaling per element type, and the barrier
/// of copy-engine calls.
pub fn entry_names() -> Vec<String> {
    let mut names: Vec<String> = DTYPES
        .iter()
        .flat_map(|d| {
            OPS.iter()
                .flat_map(move |o| [format!("coll_{d}_{o}"), format!("coll_{d}_{o}_ll")])
                .chain(std::iter::once(format!("coll_{d}_scale")))
        })
        .collect();
    names.push("coll_barrier".into());
    names
}

fn dtype_name(d: DType) -> &'static str {
    d.name()
}

fn op_name(o: ReduceOp) -> &'static str {
    match o.combine() {
        ReduceOp::Sum | ReduceOp::Avg => "sum",
        ReduceOp::Prod => "prod",
        ReduceOp::Min => "min",
        ReduceOp::Max => "max",
    }
}

impl Kernels {
    /// Compiles `dtype`'s entries of the source for each GPU's architecture with NVRTC (once
    /// per architecture), or reads the image cached in `cache_dir` (`None`: no disk cache,
    /// every load compiles), and loads it on each GPU.
    pub fn load_all(
        gpus: &[Gpu],
        source: &str,
        dtype: DType,
        cache_dir: Option<&std::path::Path>,
    ) -> Result<(Kernels, KernelLoad), ExecError> {
        let mut load = KernelLoad {
            compile: Duration::ZERO,
            from_cache: true,
            images: Vec::new(),
        };
        let mut images: Vec<(String, nvrtc::Image)> = Vec::new();
        let mut per_gpu = Vec::with_capacity(gpus.len());
        for gpu in gpus {
            let arch = gpu.arch()?;
            let img = match images.iter().find(|(a, _)| *a == arch) {
                Some((_, img)) => img.clone(),
                None => {
                    let t = Instant::now();
                    let (img, cached) = nvrtc::image(source, &arch, dtype, cache_dir)?;
                    if !cached {
                        load.compile += t.elapsed();
                        load.from_cache = false;
                    }
                    let what = format!("{} {}", img.describe(), dtype.name());
                    load.images.push(what);
                    images.push((arch, img.clone()));
                    img
                }
            };
            let module = gpu
                .ctx
                .load_module(img.to_ptx())
                .map_err(|e| gpu_err("cannot load the kernel module", e))?;
            let mut funcs = Vec::new();
            for name in entry_names_of(dtype) {
                let f = module
                    .load_function(&name)
                    .map_err(|e| gpu_err(&format!("kernel {name}"), e))?;
                funcs.push((name, f));
            }
            per_gpu.push(funcs);
        }
        Ok((Kernels { per_gpu }, load))
    }

    pub fn for_gpu(&self, i: usize) -> GpuKernels {
        GpuKernels {
            funcs: self.per_gpu.get(i).cloned().unwrap_or_default(),
        }
    }
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
        let d = dtype_name(dtype);
        let get = |o: &str| self.find(&format!("coll_{d}_{o}")).cloned();
        Ok(TypedKernels {
            dtype,
            main: [get(OPS[0])?, get(OPS[1])?, get(OPS[2])?, get(OPS[3])?],
            main_ll: [
                get(&format!("{}_ll", OPS[0]))?,
                get(&format!("{}_ll", OPS[1]))?,
                get(&format!("{}_ll", OPS[2]))?,
                get(&format!("{}_ll", OPS[3]))?,
            ],
            scale: get("scale")?,
            barrier: self.find("coll_barrier")?.clone(),
        })
    }
}

/// One GPU's kernels for one element type: the interpreter per operator, and the avg scaling.
pub struct TypedKernels {
    dtype: DType,
    /// In the order of `OPS`: bulk calls' entries, and LL calls'.
    main: [CudaFunction; 4],
    main_ll: [CudaFunction; 4],
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
        for f in self.main.iter().chain(std::iter::once(&self.scale)) {
            // SAFETY: a function of a module loaded in this (current) context.
            let r = unsafe { sys::cuFuncLoad(f.cu_function()) };
            if r != sys::cudaError_enum::CUDA_SUCCESS {
                return Err(gpu_err("cuFuncLoad", r));
            }
        }
        Ok(())
    }

    fn main_for(&self, op: ReduceOp, ll: bool) -> &CudaFunction {
        let name = op_name(op);
        let i = OPS.iter().position(|o| *o == name).unwrap_or(0);
        if ll { &self.main_ll[i] } else { &self.main[i] }
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
        let f = self.main_for(op, mode.proto == 1);
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
    #[test]
    fn every_entry_is_named_once() {
        let names = entry_names();
        // Per type: bulk and LL per operator, the scale; then the barrier.
        assert_eq!(names.len(), DTYPES.len() * (2 * OPS.len() + 1) + 1);
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len());
        assert!(names.contains(&"coll_bf16_max".to_string()));
        assert!(names.contains(&"coll_f32_scale".to_string()));
        assert!(names.contains(&"coll_barrier".to_string()));
        assert!(!names.iter().any(|n| n.contains("ceiling")));
    }

    #[test]
    fn a_load_of_one_type_names_its_entries_and_the_barrier() {
        let f32s = entry_names_of(DType::F32);
        assert_eq!(f32s.len(), 2 * OPS.len() + 2);
        assert!(f32s.contains(&"coll_f32_min_ll".to_string()));
        assert!(f32s.contains(&"coll_f32_scale".to_string()));
        assert!(f32s.contains(&"coll_barrier".to_string()));
        assert!(!f32s.iter().any(|n| n.contains("f64")));
        // Every type's load together names every entry of the source.
        let mut union: Vec<String> = DType::ALL.iter().flat_map(|&d| entry_names_of(d)).collect();
        union.sort();
        union.dedup();
        let mut all = entry_names();
        all.sort();
        assert_eq!(union, all);
    }
}
