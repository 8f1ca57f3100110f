//! The interpreter kernel on the GPUs: compiled by NVRTC for each GPU's architecture (or
//! read from the PTX cached on disk), loaded as a module per GPU, its entries looked up once
//! per element type ([`TypedKernels`]) and launched by the `unsafe fn`s below, whose
//! `# Safety` sections say what the device addresses in their arguments must be.
//!
//! Invariants: every entry [`entry_names`] lists is in every loaded module; a
//! [`TypedKernels`] holds the functions of one GPU's module, launched only on that GPU's
//! streams; each launch's parameter array matches its entry's parameters in number, order
//! and layout (the repr(C) argument structs of [`crate::cuda`]).

use super::gpu::Gpu;
use super::gpu_err;
use crate::dtype::{DType, ReduceOp};
use crate::error::ExecError;
use cudarc::driver::{CudaFunction, result, sys};
use cudarc::nvrtc::{CompileOptions, Ptx};
use std::ffi::c_void;
use std::time::{Duration, Instant};

/// Whether NVRTC can be loaded: coll compiles its kernel with it the first time on each GPU
/// architecture (cudarc panics on first use otherwise).
pub fn nvrtc_present() -> bool {
    // SAFETY: loading NVRTC runs only its library initialisers, as any program using it does.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// What [`Kernels::load_all`] says when NVRTC is missing.
pub const NO_NVRTC: &str = "NVRTC (libnvrtc.so) not found: coll compiles its kernel with it \
    the first time on each GPU architecture; install the CUDA toolkit's NVRTC (or `pip install \
    nvidia-cuda-nvrtc-cu12`) and put its lib directory on LD_LIBRARY_PATH";

/// What ptxas gave one kernel entry ([`kernel_resources`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelResources {
    pub name: String,
    pub registers: u32,
    pub stack_bytes: u32,
    pub spill_stores: u32,
    pub spill_loads: u32,
}

/// Compiles `source` for `arch` (a real one, e.g. `sm_90`) with NVRTC through ptxas, as the
/// driver would at load, and returns each entry's resources: no GPU needed, only NVRTC.
/// A kernel whose registers times its CTA size exceed the SM's register file cannot launch.
pub fn kernel_resources(source: &str, arch: &str) -> Result<Vec<KernelResources>, ExecError> {
    use cudarc::nvrtc::result as nvrtc;
    if !nvrtc_present() {
        return Err(ExecError::Gpu(NO_NVRTC.into()));
    }
    let fail = |what: &str, e: cudarc::nvrtc::result::NvrtcError| {
        ExecError::Gpu(format!("NVRTC: {what}: {e:?}"))
    };
    let src = std::ffi::CString::new(source)
        .map_err(|_| ExecError::Gpu("the kernel source holds a NUL byte".into()))?;
    let prog = nvrtc::create_program(&src, None).map_err(|e| fail("create", e))?;
    let opts = [
        format!("--gpu-architecture={arch}"),
        "-std=c++17".into(),
        "--ptxas-options=-v".into(),
    ];
    // SAFETY: `prog` is the live program created above, destroyed once below after its
    // log has been read.
    let compiled = unsafe { nvrtc::compile_program(prog, &opts) };
    // SAFETY: as above.
    let log = unsafe { nvrtc::get_program_log(prog) };
    // SAFETY: as above; not used after this.
    let _ = unsafe { nvrtc::destroy_program(prog) };
    let log: Vec<u8> = log
        .map_err(|e| fail("log", e))?
        .into_iter()
        .map(|c| c as u8)
        .take_while(|&c| c != 0)
        .collect();
    let log = String::from_utf8_lossy(&log).into_owned();
    compiled.map_err(|e| {
        ExecError::Gpu(format!(
            "NVRTC could not compile the kernel ({e:?}):\n{log}"
        ))
    })?;
    Ok(parse_ptxas_log(&log))
}

/// Each entry's resources from ptxas' verbose log (entries in the order compiled).
pub fn parse_ptxas_log(log: &str) -> Vec<KernelResources> {
    let number_before = |line: &str, word: &str| -> u32 {
        let words: Vec<&str> = line.split([' ', ',']).filter(|w| !w.is_empty()).collect();
        words
            .windows(2)
            .find(|w| w[1] == word)
            .and_then(|w| w[0].parse().ok())
            .unwrap_or(0)
    };
    let mut out: Vec<KernelResources> = Vec::new();
    for line in log.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            out.push(KernelResources {
                name: rest.split('\'').next().unwrap_or("").to_string(),
                registers: 0,
                stack_bytes: 0,
                spill_stores: 0,
                spill_loads: 0,
            });
        } else if let Some(k) = out.last_mut() {
            if line.contains("bytes stack frame") {
                k.stack_bytes = number_before(line, "bytes");
                let after_stores = line.split("stack frame").nth(1).unwrap_or("");
                k.spill_stores = number_before(after_stores, "bytes");
                k.spill_loads = number_before(
                    after_stores.split("spill stores").nth(1).unwrap_or(""),
                    "bytes",
                );
            } else if line.contains(" registers") {
                k.registers = number_before(line, "registers");
            }
        }
    }
    out
}

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

fn hash(s: &str) -> u64 {
    // FNV-1a: a stable key for the cache file name.
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

const DTYPES: [&str; 7] = ["f32", "f16", "bf16", "i32", "f64", "i64", "u8"];
const OPS: [&str; 4] = ["sum", "prod", "min", "max"];

/// Every entry of the kernel source that coll loads: the interpreter per element type,
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
    /// Compiles the source for each GPU's architecture with NVRTC, or reads the PTX cached in
    /// `cache_dir` (`None`: no disk cache, every load compiles); returns the kernels, the
    /// compile time and whether everything came from cache.
    pub fn load_all(
        gpus: &[Gpu],
        source: &str,
        cache_dir: Option<&std::path::Path>,
    ) -> Result<(Kernels, Duration, bool), ExecError> {
        let mut compile = Duration::ZERO;
        let mut all_cached = true;
        let mut per_gpu = Vec::with_capacity(gpus.len());
        for gpu in gpus {
            let arch = gpu.arch()?;
            let path =
                cache_dir.map(|d| d.join(format!("kernel-{:016x}-{arch}.ptx", hash(source))));
            let cached = path.as_ref().and_then(|p| std::fs::read_to_string(p).ok());
            let ptx = match cached {
                Some(text) => Ptx::from_src(text),
                None => {
                    all_cached = false;
                    if !nvrtc_present() {
                        return Err(ExecError::Gpu(NO_NVRTC.into()));
                    }
                    let t = Instant::now();
                    let opts = CompileOptions {
                        options: vec![
                            format!("--gpu-architecture={}", arch.replace("sm_", "compute_")),
                            "-std=c++17".into(),
                        ],
                        ..Default::default()
                    };
                    let ptx = cudarc::nvrtc::compile_ptx_with_opts(source, opts).map_err(|e| {
                        ExecError::Gpu(format!(
                            "NVRTC could not compile the interpreter kernel: {e:?}"
                        ))
                    })?;
                    compile += t.elapsed();
                    if let (Some(dir), Some(path)) = (cache_dir, &path) {
                        // A cache that cannot be written costs the next load a compile, no
                        // more: its errors are ignored.
                        let _ = std::fs::create_dir_all(dir);
                        // Written aside and renamed: processes of one run may compile at
                        // once, and none may read half a file.
                        let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
                        if std::fs::write(&tmp, ptx.to_src()).is_ok() {
                            let _ = std::fs::rename(&tmp, path);
                        }
                    }
                    ptx
                }
            };
            let module = gpu
                .ctx
                .load_module(ptx)
                .map_err(|e| gpu_err("cannot load the kernel module", e))?;
            let mut funcs = Vec::new();
            for name in entry_names() {
                let f = module
                    .load_function(&name)
                    .map_err(|e| gpu_err(&format!("kernel {name}"), e))?;
                funcs.push((name, f));
            }
            per_gpu.push(funcs);
        }
        Ok((Kernels { per_gpu }, compile, all_cached))
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
    fn ptxas_resources_are_read_per_entry() {
        // As NVRTC 12.9's log prints them for sm_90.
        let log = "ptxas info    : 1 bytes gmem
ptxas info    : Compiling entry function 'coll_barrier' for 'sm_90'
ptxas info    : Function properties for coll_barrier
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 14 registers, used 0 barriers
ptxas info    : Compile time = 6.058 ms
ptxas info    : Compiling entry function 'coll_u8_max' for 'sm_90'
ptxas info    : Function properties for coll_u8_max
ptxas         .     8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 128 registers, used 1 barriers, 8 bytes cumulative stack size, 148 bytes smem
";
        let k = parse_ptxas_log(log);
        assert_eq!(
            k,
            vec![
                KernelResources {
                    name: "coll_barrier".into(),
                    registers: 14,
                    stack_bytes: 0,
                    spill_stores: 0,
                    spill_loads: 0,
                },
                KernelResources {
                    name: "coll_u8_max".into(),
                    registers: 128,
                    stack_bytes: 8,
                    spill_stores: 4,
                    spill_loads: 12,
                },
            ]
        );
    }

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
}
