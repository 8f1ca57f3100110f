//! Thin safe types over the CUDA driver calls the GPU executor needs (cudarc's `sys` and
//! `result` layers, loaded at run time so the crate builds without CUDA). The `unsafe` blocks
//! of the GPU executor are here (and the driver queries of `topo`), each with its reason;
//! the enqueueing functions that take caller-given streams and pointers are `unsafe fn`s
//! whose contract their callers in `super` discharge.
//!
//! Invariants: a [`DeviceBuffer`] owns one `cuMemAlloc` allocation of its GPU (plain device
//! memory, not the stream-ordered pool, so peer GPUs can map it) and frees it on drop; every
//! driver call first makes its GPU's context current on the calling thread; nothing that
//! enqueues a call (launches, device-to-device copies) synchronises or touches host memory,
//! so a call can be captured in a CUDA graph.

use crate::dtype::{DType, ReduceOp};
use crate::error::ExecError;
use cudarc::driver::{CudaContext, CudaFunction, CudaStream, result, sys};
use cudarc::nvrtc::{CompileOptions, Ptx};
use std::ffi::c_void;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) fn gpu_err(what: &str, e: impl std::fmt::Debug) -> ExecError {
    ExecError::Gpu(format!("{what}: {e:?}"))
}

/// One GPU: its primary context and the stream calls are enqueued on.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    ordinal: usize,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Gpu({})", self.ordinal)
    }
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceBuffer({:#x}, {} bytes)", self.ptr, self.bytes)
    }
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

mod sealed {
    pub trait Sealed {}
}

/// The element types whose bytes may be copied to and from the device as they are: plain
/// numbers, with no padding and no invalid bit patterns (sealed: only these).
pub trait Plain: Copy + sealed::Sealed {}

macro_rules! plain {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl Plain for $t {}
    )*};
}
plain!(f32, f64, half::f16, half::bf16, i32, i64, u8, u32, u64);

/// Whether the CUDA driver library can be loaded (cudarc panics on first use otherwise).
pub fn driver_present() -> bool {
    ["libcuda.so.1", "libcuda.so"].into_iter().any(|name| {
        // SAFETY: loading the system's CUDA driver runs its initialisers, exactly what any
        // CUDA program does at start; the handle is dropped at once.
        unsafe { libloading::Library::new(name) }.is_ok()
    })
}

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

/// Number of GPUs the driver sees (0 when there is no driver).
pub fn device_count() -> usize {
    if !driver_present() {
        return 0;
    }
    CudaContext::device_count().map_or(0, |n| n.max(0) as usize)
}

impl Gpu {
    pub fn open(ordinal: usize) -> Result<Gpu, ExecError> {
        let ctx = CudaContext::new(ordinal).map_err(|e| gpu_err("cannot open the GPU", e))?;
        let stream = ctx
            .new_stream()
            .map_err(|e| gpu_err("cannot create a stream", e))?;
        Ok(Gpu {
            ctx,
            stream,
            ordinal,
        })
    }

    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// coll's own stream on this GPU: where setup work and the blocking paths
    /// ([`CudaExecutor::launch`](super::CudaExecutor::launch)) enqueue.
    /// A new stream of this GPU (non-blocking), for work beside the call's stream.
    pub fn new_stream(&self) -> Result<Arc<CudaStream>, ExecError> {
        self.ctx
            .new_stream()
            .map_err(|e| gpu_err("cuStreamCreate", e))
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// Whether `stream` belongs to this GPU's context.
    pub fn owns_stream(&self, stream: &CudaStream) -> bool {
        stream.context().cu_ctx() == self.ctx.cu_ctx()
    }

    /// Whether `buf` was allocated on this GPU.
    pub fn owns(&self, buf: &DeviceBuffer) -> bool {
        buf.ctx.cu_ctx() == self.ctx.cu_ctx()
    }

    /// Waits for all work on this GPU, on any stream (before memory the work uses is freed).
    pub fn synchronize_all(&self) -> Result<(), ExecError> {
        self.ctx
            .synchronize()
            .map_err(|e| gpu_err("context synchronize", e))
    }

    /// Enqueues a device-to-device copy of `bytes` from `src` to `dst` on `stream`.
    ///
    /// # Safety
    /// `stream` is a live stream of this GPU's context; `src` and `dst` are device memory
    /// this GPU can access, each `bytes` long, alive until the copy has run.
    pub unsafe fn copy_async(
        &self,
        stream: sys::CUstream,
        dst: u64,
        src: u64,
        bytes: u64,
    ) -> Result<(), ExecError> {
        if bytes == 0 {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: the caller guarantees the stream and both ranges (this function's contract).
        unsafe { result::memcpy_dtod_async(dst, src, bytes as usize, stream) }
            .map_err(|e| gpu_err("cuMemcpyDtoDAsync", e))
    }

    fn bind(&self) -> Result<(), ExecError> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| gpu_err("cannot bind the context", e))
    }

    pub fn free_bytes(&self) -> Result<u64, ExecError> {
        self.bind()?;
        self.ctx
            .mem_get_info()
            .map(|(free, _)| free as u64)
            .map_err(|e| gpu_err("cuMemGetInfo", e))
    }

    /// Whether device pointer `ptr` lies in a cudaMalloc/cuMemAlloc allocation on this
    /// GPU: memory every GPU whose context has peer access to this one can load and store.
    /// Stream-ordered pools (cudaMallocAsync), virtual-memory mappings (cuMemMap), managed
    /// and host memory answer false: their peer access is set per allocation or not at all.
    pub fn owns_legacy_allocation(&self, ptr: u64) -> Result<bool, ExecError> {
        self.bind()?;
        let mut attrs = [
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        ];
        // Wide and zeroed: the driver writes a boolean and an int.
        let (mut legacy, mut ordinal) = (0u64, u64::MAX);
        let mut data: [*mut std::ffi::c_void; 2] = [
            (&mut legacy as *mut u64).cast(),
            (&mut ordinal as *mut u64).cast(),
        ];
        // SAFETY: two attributes into two values we own, each large enough for its answer;
        // for a pointer CUDA does not know the driver writes defaults and still succeeds.
        let r =
            unsafe { sys::cuPointerGetAttributes(2, attrs.as_mut_ptr(), data.as_mut_ptr(), ptr) };
        Ok(r == sys::cudaError_enum::CUDA_SUCCESS
            && legacy & 0xff != 0
            && ordinal as u32 as usize == self.ordinal)
    }

    pub fn sm_count(&self) -> Result<u32, ExecError> {
        self.ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map(|v| v.max(0) as u32)
            .map_err(|e| gpu_err("device attribute", e))
    }

    pub fn arch(&self) -> Result<String, ExecError> {
        let (major, minor) = self
            .ctx
            .compute_capability()
            .map_err(|e| gpu_err("compute capability", e))?;
        Ok(format!("sm_{major}{minor}"))
    }

    pub fn name(&self) -> String {
        self.ctx.name().unwrap_or_else(|_| "GPU".into())
    }

    pub fn synchronize(&self) -> Result<(), ExecError> {
        self.stream
            .synchronize()
            .map_err(|e| gpu_err("stream synchronize", e))
    }

    /// Allocates `bytes` of plain device memory.
    pub fn alloc(&self, bytes: u64) -> Result<u64, ExecError> {
        self.bind()?;
        // SAFETY: the context is current on this thread; the returned pointer is owned by
        // the caller (a DeviceBuffer) and freed exactly once.
        unsafe { result::malloc_sync(bytes as usize) }.map_err(|e| gpu_err("cuMemAlloc", e))
    }

    /// Copies host bytes into device memory at `dst`, ordered on this GPU's stream.
    pub fn upload(&self, dst: u64, bytes: &[u8]) -> Result<(), ExecError> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: `dst` is a live allocation of at least `bytes.len()` bytes on this GPU (the
        // callers write within their buffers); the copy is synchronous with respect to the
        // host slice (pageable memory), so `bytes` may be dropped after the call.
        unsafe { result::memcpy_htod_async(dst, bytes, self.stream.cu_stream()) }
            .map_err(|e| gpu_err("cuMemcpyHtoDAsync", e))
    }

    /// Copies device bytes at `src` to the host, after the stream's earlier work.
    pub fn download(&self, src: u64, out: &mut [u8]) -> Result<(), ExecError> {
        if out.is_empty() {
            return Ok(());
        }
        self.synchronize()?;
        self.bind()?;
        // SAFETY: `src` is a live allocation of at least `out.len()` bytes on this GPU and the
        // stream has finished every earlier write to it.
        unsafe { result::memcpy_dtoh_sync(out, src) }.map_err(|e| gpu_err("cuMemcpyDtoH", e))
    }

    /// Copies elements into device memory at `dst` (see [`upload`](Self::upload)).
    pub fn upload_elems<T: Plain>(&self, dst: u64, data: &[T]) -> Result<(), ExecError> {
        self.upload(dst, super::as_bytes(data))
    }

    /// Reads elements from device memory at `src` (see [`download`](Self::download)).
    pub fn download_elems<T: Plain>(&self, src: u64, out: &mut [T]) -> Result<(), ExecError> {
        self.download(src, super::as_bytes_mut(out))
    }

    /// Sets `bytes` bytes at `dst` to zero, ordered on the stream.
    pub fn zero(&self, dst: u64, bytes: u64) -> Result<(), ExecError> {
        self.bind()?;
        // SAFETY: `dst` is a live allocation of at least `bytes` bytes on this GPU.
        unsafe { result::memset_d8_async(dst, 0, bytes as usize, self.stream.cu_stream()) }
            .map_err(|e| gpu_err("cuMemsetD8Async", e))
    }
}

/// Plain device memory: an allocation freed on drop, or a region of an [`Arena`]'s.
pub struct DeviceBuffer {
    ptr: u64,
    bytes: u64,
    ctx: Arc<CudaContext>,
    /// Whether this buffer owns its allocation (regions of an arena do not).
    owner: bool,
}

/// One allocation per GPU carved into regions: what a plan needs is allocated in one piece,
/// so the memory coll takes equals what it reports (up to the driver's granularity).
pub struct Arena {
    buf: DeviceBuffer,
    used: std::cell::Cell<u64>,
    /// For another process's arena: the mapping that keeps it reachable.
    _mapping: Option<IpcMapping>,
}

/// Regions start on this alignment (vector loads need 16; 256 keeps them apart in cache).
pub const REGION_ALIGN: u64 = 256;

/// The bytes a region of `bytes` takes in an arena.
pub fn region_size(bytes: u64) -> u64 {
    bytes.max(1).div_ceil(REGION_ALIGN) * REGION_ALIGN
}

impl Arena {
    pub fn new(gpu: &Gpu, capacity: u64) -> Result<Arena, ExecError> {
        Ok(Arena {
            buf: DeviceBuffer::zeroed(gpu, capacity.max(1))?,
            used: std::cell::Cell::new(0),
            _mapping: None,
        })
    }

    /// Another process's arena of `capacity` bytes, mapped into `gpu`'s context: regions
    /// taken from it address that process's memory (every process carves arenas in the same
    /// order, so a region here is the same region there).
    pub fn mapped(gpu: &Gpu, mapping: IpcMapping, capacity: u64) -> Arena {
        Arena {
            buf: DeviceBuffer {
                ptr: mapping.ptr(),
                bytes: capacity.max(1),
                ctx: gpu.ctx.clone(),
                owner: false,
            },
            used: std::cell::Cell::new(0),
            _mapping: Some(mapping),
        }
    }

    /// Bookkeeping only, for another process's arena this one never touches: regions are
    /// counted (so later regions of mapped arenas line up) but address nothing.
    pub fn unmapped(gpu: &Gpu, capacity: u64) -> Arena {
        Arena {
            buf: DeviceBuffer {
                ptr: 0,
                bytes: capacity.max(1),
                ctx: gpu.ctx.clone(),
                owner: false,
            },
            used: std::cell::Cell::new(0),
            _mapping: None,
        }
    }

    /// The whole allocation (for its IPC handle).
    pub fn buffer(&self) -> &DeviceBuffer {
        &self.buf
    }

    /// A zeroed region of `bytes`.
    pub fn take(&self, bytes: u64) -> Result<DeviceBuffer, ExecError> {
        let size = region_size(bytes);
        let at = self.used.get();
        if at + size > self.buf.bytes {
            return Err(ExecError::Gpu(format!(
                "arena of {} bytes is too small (needs {} more)",
                self.buf.bytes,
                at + size - self.buf.bytes
            )));
        }
        self.used.set(at + size);
        Ok(DeviceBuffer {
            ptr: self.buf.ptr + at,
            bytes: bytes.max(1),
            ctx: self.buf.ctx.clone(),
            owner: false,
        })
    }

    /// A region holding `data`.
    pub fn take_with(&self, gpu: &Gpu, data: &[u8]) -> Result<DeviceBuffer, ExecError> {
        let r = self.take(data.len() as u64)?;
        gpu.upload(r.ptr, data)?;
        Ok(r)
    }

    pub fn capacity(&self) -> u64 {
        self.buf.bytes
    }

    /// Bytes of regions taken so far.
    pub fn used(&self) -> u64 {
        self.used.get()
    }
}

impl std::fmt::Debug for Arena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Arena({} of {} bytes)", self.used.get(), self.buf.bytes)
    }
}

impl DeviceBuffer {
    pub fn zeroed(gpu: &Gpu, bytes: u64) -> Result<DeviceBuffer, ExecError> {
        let bytes = bytes.max(1);
        let ptr = gpu.alloc(bytes)?;
        let buf = DeviceBuffer {
            ptr,
            bytes,
            ctx: gpu.ctx.clone(),
            owner: true,
        };
        gpu.zero(ptr, bytes)?;
        Ok(buf)
    }

    pub fn from_bytes(gpu: &Gpu, data: &[u8]) -> Result<DeviceBuffer, ExecError> {
        let buf = DeviceBuffer::zeroed(gpu, data.len() as u64)?;
        gpu.upload(buf.ptr, data)?;
        Ok(buf)
    }

    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn write(&self, gpu: &Gpu, data: &[u8]) -> Result<(), ExecError> {
        if data.len() as u64 > self.bytes {
            return Err(ExecError::Gpu("write past a device buffer".into()));
        }
        gpu.upload(self.ptr, data)
    }

    pub fn read(&self, gpu: &Gpu, out: &mut [u8]) -> Result<(), ExecError> {
        if out.len() as u64 > self.bytes {
            return Err(ExecError::Gpu("read past a device buffer".into()));
        }
        gpu.download(self.ptr, out)
    }

    pub fn clear(&self, gpu: &Gpu) -> Result<(), ExecError> {
        gpu.zero(self.ptr, self.bytes)
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.owner && self.ctx.bind_to_thread().is_ok() {
            // SAFETY: `ptr` came from cuMemAlloc in this context and is freed only here; the
            // owner outlives every kernel that used it (the executor syncs before dropping).
            let _ = unsafe { result::free_sync(self.ptr) };
        }
    }
}

/// Lets every GPU read and write every other's memory (NVLink peer access).
pub fn enable_peer_access(gpus: &[Gpu]) -> Result<(), ExecError> {
    for a in gpus {
        for b in gpus {
            if a.ordinal == b.ordinal {
                continue;
            }
            let mut can = 0i32;
            // SAFETY: plain query with valid device handles and an out-parameter we own.
            let r = unsafe {
                sys::cuDeviceCanAccessPeer(&mut can, a.ctx.cu_device(), b.ctx.cu_device())
            };
            if r != sys::cudaError_enum::CUDA_SUCCESS || can == 0 {
                return Err(ExecError::Gpu(format!(
                    "GPU {} cannot access GPU {} (no peer access)",
                    a.ordinal, b.ordinal
                )));
            }
            a.bind()?;
            // SAFETY: a's context is current; b's context is alive for the call.
            let r = unsafe { sys::cuCtxEnablePeerAccess(b.ctx.cu_ctx(), 0) };
            if r != sys::cudaError_enum::CUDA_SUCCESS
                && r != sys::cudaError_enum::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
            {
                return Err(ExecError::Gpu(format!(
                    "cuCtxEnablePeerAccess {}->{}: {r:?}",
                    a.ordinal, b.ordinal
                )));
            }
        }
    }
    Ok(())
}

/// The compiled kernels on every GPU.
pub struct Kernels {
    per_gpu: Vec<Vec<(String, CudaFunction)>>,
}

/// One GPU's kernels.
pub struct GpuKernels {
    funcs: Vec<(String, CudaFunction)>,
}

pub fn cache_dir() -> std::path::PathBuf {
    std::env::var_os("COLL_CACHE_DIR")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cache/coll")))
        .unwrap_or_else(|| std::env::temp_dir().join("coll-cache"))
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
/// operator and protocol (bulk, `_ll`), the avg scaling per element type, and the
/// store-ceiling probe.
pub fn entry_names() -> Vec<String> {
    let mut names: Vec<String> = DTYPES
        .iter()
        .flat_map(|d| {
            OPS.iter()
                .flat_map(move |o| [format!("coll_{d}_{o}"), format!("coll_{d}_{o}_ll")])
                .chain(std::iter::once(format!("coll_{d}_scale")))
        })
        .collect();
    names.push("coll_store_ceiling".into());
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
    /// Compiles the source for each GPU's architecture with NVRTC, or reads the PTX cached on
    /// disk; returns the kernels, the compile time and whether everything came from cache.
    pub fn load_all(gpus: &[Gpu], source: &str) -> Result<(Kernels, Duration, bool), ExecError> {
        let mut compile = Duration::ZERO;
        let mut all_cached = true;
        let mut per_gpu = Vec::with_capacity(gpus.len());
        for gpu in gpus {
            let arch = gpu.arch()?;
            let path = cache_dir().join(format!("kernel-{:016x}-{arch}.ptx", hash(source)));
            let ptx = match std::fs::read_to_string(&path) {
                Ok(text) => Ptx::from_src(text),
                Err(_) => {
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
                        gpu_err("NVRTC could not compile the interpreter kernel", e)
                    })?;
                    compile += t.elapsed();
                    let _ = std::fs::create_dir_all(cache_dir());
                    // Written aside and renamed: processes of one run may compile at once,
                    // and none may read half a file.
                    let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
                    if std::fs::write(&tmp, ptx.to_src()).is_ok() {
                        let _ = std::fs::rename(&tmp, &path);
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
            ceiling: self.find("coll_store_ceiling")?.clone(),
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
    /// Plain 16-byte peer stores, for the SM-store ceiling.
    ceiling: CudaFunction,
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

    /// Enqueues `n16` 16-byte copies from `src` to `dst` on `grid` CTAs of 512 threads.
    ///
    /// # Safety
    /// `stream` is a live stream of `gpu`'s context; `src` and `dst` are 16-byte aligned
    /// device memory of at least `16 * n16` bytes, both accessible from `gpu` (`dst` may be a
    /// peer's, with peer access enabled), alive until the copy has run.
    pub unsafe fn launch_ceiling(
        &self,
        gpu: &Gpu,
        stream: sys::CUstream,
        dst: u64,
        src: u64,
        n16: u64,
        grid: u32,
    ) -> Result<(), ExecError> {
        let (mut d, mut s, mut n) = (dst, src, n16);
        let mut params: [*mut c_void; 3] = [
            (&mut d as *mut u64).cast(),
            (&mut s as *mut u64).cast(),
            (&mut n as *mut u64).cast(),
        ];
        gpu.bind()?;
        // SAFETY: a function of this context taking (uint4*, const uint4*, u64), given 3 live
        // parameters of those sizes; the memory contract is the caller's.
        unsafe {
            result::launch_kernel(
                self.ceiling.cu_function(),
                (grid.max(1), 1, 1),
                (512, 1, 1),
                0,
                stream,
                &mut params,
            )
        }
        .map_err(|e| gpu_err("cuLaunchKernel (store ceiling)", e))
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
        args: &super::CallArgs,
        slicer: &super::Slicer,
        slot_bytes: u32,
        slots: u32,
        error: u64,
        timeout_cycles: u64,
        trace: u64,
        mode: &super::CallMode,
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
            (&mut call as *mut super::CallArgs).cast(),
            (&mut sl as *mut super::Slicer).cast(),
            (&mut sb as *mut u32).cast(),
            (&mut ns as *mut u32).cast(),
            (&mut e as *mut u64).cast(),
            (&mut t as *mut u64).cast(),
            (&mut tr as *mut u64).cast(),
            (&mut md as *mut super::CallMode).cast(),
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
        args: &super::CallArgs,
        nranks: u32,
        out_elems: u64,
        n: u32,
    ) -> Result<(), ExecError> {
        let f = &self.scale;
        let mut call = *args;
        let (mut nr, mut oe, mut nn) = (nranks, out_elems, n);
        let mut params: [*mut c_void; 4] = [
            (&mut call as *mut super::CallArgs).cast(),
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
        args: &super::BarrierArgs,
    ) -> Result<(), ExecError> {
        let mut a = *args;
        let mut params: [*mut c_void; 1] = [(&mut a as *mut super::BarrierArgs).cast()];
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

/// A CUDA event for ordering two streams of one GPU (timing off); destroyed on drop.
pub struct Event {
    ev: sys::CUevent,
    ctx: Arc<CudaContext>,
}

// SAFETY: a CUevent is a driver handle, valid from any thread of the process; a call's part
// for one GPU records and waits on its events from one thread at a time.
unsafe impl Send for Event {}
unsafe impl Sync for Event {}

impl Event {
    pub fn new(gpu: &Gpu) -> Result<Event, ExecError> {
        gpu.bind()?;
        let ev = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
            .map_err(|e| gpu_err("cuEventCreate", e))?;
        Ok(Event {
            ev,
            ctx: gpu.ctx.clone(),
        })
    }

    /// Makes `waiter` wait for what `stream` has enqueued so far.
    ///
    /// # Safety
    /// `stream` and `waiter` are live streams of this event's context.
    pub unsafe fn order(
        &self,
        stream: sys::CUstream,
        waiter: sys::CUstream,
    ) -> Result<(), ExecError> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| gpu_err("cannot bind the context", e))?;
        // SAFETY: a live event of the current context and live streams (the contract).
        unsafe { result::event::record(self.ev, stream) }
            .map_err(|e| gpu_err("cuEventRecord", e))?;
        // SAFETY: as above.
        unsafe {
            result::stream::wait_event(
                waiter,
                self.ev,
                sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )
        }
        .map_err(|e| gpu_err("cuStreamWaitEvent", e))
    }
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Event({:p})", self.ev)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: the event was created in this context and is not used after this.
            let _ = unsafe { result::event::destroy(self.ev) };
        }
    }
}

/// A captured CUDA graph, instantiated, with the stream it was captured from (where it is
/// launched). Destroyed on drop.
pub struct Graph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    stream: Arc<CudaStream>,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Graph({:p})", self.exec)
    }
}

impl Graph {
    /// Enqueues one replay on the stream the graph was captured from.
    pub fn launch(&self) -> Result<(), ExecError> {
        self.stream
            .context()
            .bind_to_thread()
            .map_err(|e| gpu_err("cannot bind the context", e))?;
        // SAFETY: `exec` is this graph's live executable and `stream` a live stream of the
        // context it was captured in.
        unsafe { result::graph::launch(self.exec, self.stream.cu_stream()) }
            .map_err(|e| gpu_err("cuGraphLaunch", e))
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        if self.stream.context().bind_to_thread().is_err() {
            return;
        }
        // SAFETY: both handles were made by `capture` for this graph and are destroyed only
        // here; a launched graph's pending work keeps what it needs alive in the driver.
        unsafe {
            if !self.exec.is_null() {
                let _ = result::graph::exec_destroy(self.exec);
            }
            if !self.graph.is_null() {
                let _ = result::graph::destroy(self.graph);
            }
        }
    }
}

/// Captures what `body` enqueues on `streams` into one CUDA graph per stream (as nccl-tests'
/// `-G` does: each GPU's stream is its own graph, and the graphs are launched together),
/// instantiated and uploaded so that the first launch costs what later ones do. Every
/// capture is ended before any graph is instantiated: instantiating is not allowed while a
/// capture of the same thread is open. A failed `body` still ends every capture, leaving
/// the streams usable.
pub fn capture(
    streams: &[Arc<CudaStream>],
    body: impl FnOnce() -> Result<(), ExecError>,
) -> Result<Vec<Graph>, ExecError> {
    let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    let mut begun = 0;
    let mut outcome = Ok(());
    for s in streams {
        if let Err(e) = s.begin_capture(mode) {
            outcome = Err(gpu_err("cuStreamBeginCapture", e));
            break;
        }
        begun += 1;
    }
    if outcome.is_ok() {
        outcome = body();
    }
    let mut graphs = Vec::with_capacity(begun);
    for s in &streams[..begun] {
        let ended = s
            .context()
            .bind_to_thread()
            // SAFETY: a live stream of the current context, capturing since the loop above.
            .and_then(|_| unsafe { result::stream::end_capture(s.cu_stream()) });
        match ended {
            Ok(g) => graphs.push(Graph {
                graph: g,
                exec: std::ptr::null_mut(),
                stream: s.clone(),
            }),
            Err(e) => {
                if outcome.is_ok() {
                    outcome = Err(gpu_err("cuStreamEndCapture", e));
                }
            }
        }
    }
    outcome?;
    for g in &mut graphs {
        if g.graph.is_null() {
            return Err(ExecError::Gpu("the captured graph is empty".into()));
        }
        g.stream
            .context()
            .bind_to_thread()
            .map_err(|e| gpu_err("cannot bind the context", e))?;
        // SAFETY: `graph` is the live graph just captured in this (current) context.
        g.exec = unsafe { result::graph::instantiate(g.graph, sys::CUgraphInstantiate_flags(0)) }
            .map_err(|e| gpu_err("cuGraphInstantiate", e))?;
        // SAFETY: the executable just made and its capture stream, both live.
        unsafe { result::graph::upload(g.exec, g.stream.cu_stream()) }
            .map_err(|e| gpu_err("cuGraphUpload", e))?;
    }
    Ok(graphs)
}

/// Launches one graph per GPU (from [`capture`]), each on the stream it was captured from.
pub fn launch_graphs(graphs: &[Graph]) -> Result<(), ExecError> {
    graphs.iter().try_for_each(Graph::launch)
}

/// Device memory for a rank's user buffers (what `coll run`/`coll bench` allocate).
pub fn user_buffer(gpu: &Gpu, bytes: u64) -> Result<DeviceBuffer, ExecError> {
    DeviceBuffer::zeroed(gpu, bytes)
}

/// Bytes of a CUDA IPC memory handle.
pub const IPC_HANDLE_BYTES: usize = 64;

/// A handle another process can open to map `buf`'s allocation (cuIpcGetMemHandle). Only
/// owning buffers have one: IPC maps whole allocations.
pub fn ipc_handle(gpu: &Gpu, buf: &DeviceBuffer) -> Result<[u8; IPC_HANDLE_BYTES], ExecError> {
    if !buf.owner {
        return Err(ExecError::Gpu(
            "an IPC handle needs a whole allocation, not a region".into(),
        ));
    }
    gpu.bind()?;
    let mut h = sys::CUipcMemHandle_st {
        reserved: [0; IPC_HANDLE_BYTES],
    };
    // SAFETY: `h` is a valid out-parameter; `buf.ptr` is the base of a live cuMemAlloc
    // allocation of the current context.
    unsafe { sys::cuIpcGetMemHandle(&mut h, buf.ptr) }
        .result()
        .map_err(|e| gpu_err("cuIpcGetMemHandle", e))?;
    Ok(h.reserved.map(|c| c as u8))
}

/// Another process's allocation mapped into this GPU's context (cuIpcOpenMemHandle);
/// unmapped on drop. The exporting process must keep the allocation alive meanwhile (the
/// executors hold both until every call has finished).
pub struct IpcMapping {
    ptr: u64,
    ctx: Arc<CudaContext>,
}

impl std::fmt::Debug for IpcMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IpcMapping({:#x})", self.ptr)
    }
}

impl IpcMapping {
    pub fn open(gpu: &Gpu, handle: &[u8]) -> Result<IpcMapping, ExecError> {
        let raw: [u8; IPC_HANDLE_BYTES] = handle
            .try_into()
            .map_err(|_| ExecError::Gpu(format!("an IPC handle of {} bytes", handle.len())))?;
        let h = sys::CUipcMemHandle_st {
            reserved: raw.map(|b| b as std::ffi::c_char),
        };
        gpu.bind()?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: `ptr` is a valid out-parameter; the driver validates the handle and fails
        // (rather than mapping garbage) when it names no live allocation.
        unsafe {
            sys::cuIpcOpenMemHandle_v2(
                &mut ptr,
                h,
                sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32,
            )
        }
        .result()
        .map_err(|e| gpu_err("cuIpcOpenMemHandle", e))?;
        Ok(IpcMapping {
            ptr,
            ctx: gpu.ctx.clone(),
        })
    }

    pub fn ptr(&self) -> u64 {
        self.ptr
    }
}

impl Drop for IpcMapping {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: `ptr` came from cuIpcOpenMemHandle in this context and is closed only
            // here, after the kernels that used it (the executor syncs before dropping).
            let _ = unsafe { sys::cuIpcCloseMemHandle(self.ptr) };
        }
    }
}

/// Pinned host memory mapped into the GPU's address space (cuMemHostAlloc with
/// DEVICEMAP): the kernel reads and writes it over PCIe, the host proxy through `host`.
/// Zeroed at allocation; freed on drop.
pub struct HostMapped {
    host: *mut u8,
    dev: u64,
    bytes: usize,
    ctx: Arc<CudaContext>,
}

// SAFETY: the memory is plain pinned host memory owned by this value; threads touch it only
// through volatile reads and writes of words that one side writes and the other reads.
unsafe impl Send for HostMapped {}
// SAFETY: as above; no `&mut` access is handed out.
unsafe impl Sync for HostMapped {}

impl std::fmt::Debug for HostMapped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostMapped({} bytes at {:#x})", self.bytes, self.dev)
    }
}

impl HostMapped {
    pub fn new(gpu: &Gpu, bytes: usize) -> Result<HostMapped, ExecError> {
        let bytes = bytes.max(8);
        gpu.bind()?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: `p` is a valid out-parameter; the context is current.
        unsafe {
            sys::cuMemHostAlloc(
                &mut p,
                bytes,
                sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE,
            )
        }
        .result()
        .map_err(|e| gpu_err("cuMemHostAlloc", e))?;
        let mut dev: sys::CUdeviceptr = 0;
        // SAFETY: `p` is the pinned allocation just made with DEVICEMAP.
        let mapped = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dev, p, 0) }.result();
        let m = HostMapped {
            host: p.cast(),
            dev,
            bytes,
            ctx: gpu.ctx.clone(),
        };
        mapped.map_err(|e| gpu_err("cuMemHostGetDevicePointer", e))?;
        // SAFETY: `host` points to `bytes` writable bytes that nothing else uses yet.
        unsafe { std::ptr::write_bytes(m.host, 0, bytes) };
        Ok(m)
    }

    /// The device address of byte 0 (what the kernel is given).
    pub fn dev(&self) -> u64 {
        self.dev
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Reads the 64-bit word at byte `at` as the GPU last published it.
    pub fn load(&self, at: usize) -> u64 {
        assert!(
            at.is_multiple_of(8) && at + 8 <= self.bytes,
            "word {at} out of range"
        );
        // SAFETY: in bounds and 8-aligned (checked; the allocation is page-aligned); the GPU
        // writes this word with volatile stores after a system fence.
        unsafe { std::ptr::read_volatile(self.host.add(at).cast::<u64>()) }
    }

    /// Publishes `v` at byte `at` for the GPU, after every earlier write of this thread.
    pub fn store(&self, at: usize, v: u64) {
        assert!(
            at.is_multiple_of(8) && at + 8 <= self.bytes,
            "word {at} out of range"
        );
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        // SAFETY: in bounds and aligned (checked); the GPU only reads this word.
        unsafe { std::ptr::write_volatile(self.host.add(at).cast::<u64>(), v) };
    }

    /// Copies `len` bytes at `at` out (data the GPU wrote before publishing a counter).
    pub fn read(&self, at: usize, out: &mut Vec<u8>, len: usize) {
        assert!(at + len <= self.bytes, "read of {len} at {at} out of range");
        out.clear();
        out.resize(len, 0);
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        // SAFETY: in bounds (checked); the GPU finished these bytes before it published the
        // counter the caller read, and does not touch them until the slot is acknowledged.
        unsafe { std::ptr::copy_nonoverlapping(self.host.add(at), out.as_mut_ptr(), len) };
    }

    /// Copies `data` in at `at` (before publishing a counter the GPU waits on).
    pub fn write(&self, at: usize, data: &[u8]) {
        assert!(
            at + data.len() <= self.bytes,
            "write of {} at {at} out of range",
            data.len()
        );
        // SAFETY: in bounds (checked); the GPU reads these bytes only after the counter that
        // the caller publishes next.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.host.add(at), data.len()) };
    }
}

impl Drop for HostMapped {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: `host` came from cuMemHostAlloc and is freed only here, after every
            // kernel and proxy that used it stopped (the executor syncs and joins first).
            let _ = unsafe { sys::cuMemFreeHost(self.host.cast()) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptxas_resources_are_read_per_entry() {
        // As NVRTC 12.9's log prints them for sm_90.
        let log = "ptxas info    : 1 bytes gmem
ptxas info    : Compiling entry function 'coll_store_ceiling' for 'sm_90'
ptxas info    : Function properties for coll_store_ceiling
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
                    name: "coll_store_ceiling".into(),
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
        // Per type: bulk and LL per operator, the scale; then the ceiling and the barrier.
        assert_eq!(names.len(), DTYPES.len() * (2 * OPS.len() + 1) + 2);
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len());
        assert!(names.contains(&"coll_bf16_max".to_string()));
        assert!(names.contains(&"coll_f32_scale".to_string()));
        assert!(names.contains(&"coll_barrier".to_string()));
    }
}
