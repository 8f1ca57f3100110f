//! One GPU ([`Gpu`]): its primary context and coll's own stream on it, the driver queries the
//! executor makes, and the raw copies every typed handle of [`super::memory`] ends in.
//!
//! Invariants: a `Gpu` binds its context to the calling thread before every driver call it
//! makes; the functions that take device addresses are `unsafe fn`s, whose `# Safety`
//! sections say what the address must be.

use super::memory::DeviceBuffer;
use super::{as_bytes, as_bytes_mut, gpu_err};
use crate::error::ExecError;
use cudarc::driver::{CudaContext, CudaStream, result, sys};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether the CUDA driver library can be loaded (cudarc panics on first use otherwise).
pub fn driver_present() -> bool {
    ["libcuda.so.1", "libcuda.so"].into_iter().any(|name| {
        // SAFETY: loading the system's CUDA driver runs its initialisers, exactly what any
        // CUDA program does at start; the handle is dropped at once.
        unsafe { libloading::Library::new(name) }.is_ok()
    })
}

/// Number of GPUs the driver sees (0 when there is no driver).
pub fn device_count() -> usize {
    if !driver_present() {
        return 0;
    }
    CudaContext::device_count().map_or(0, |n| n.max(0) as usize)
}

/// The real architecture of GPU `ordinal`, as NVRTC names it (`sm_90`), read without
/// creating a context (which takes longer), so the kernel can compile while contexts start.
pub fn arch_of(ordinal: usize) -> Result<String, ExecError> {
    let dev = device_of(ordinal)?;
    let attr = |a| {
        // SAFETY: `dev` came from cuDeviceGet above.
        unsafe { result::device::get_attribute(dev, a) }
            .map_err(|e| gpu_err("compute capability", e))
    };
    let major = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    Ok(format!("sm_{major}{minor}"))
}

/// The model name of GPU `ordinal` as the driver reports it (`NVIDIA H200`), read without
/// creating a context (which would hold memory on a GPU this process may never use).
pub fn name_of(ordinal: usize) -> Result<String, ExecError> {
    result::device::get_name(device_of(ordinal)?).map_err(|e| gpu_err("device name", e))
}

/// The UUID of GPU `ordinal`, which names one physical GPU whatever `CUDA_VISIBLE_DEVICES`
/// each process sees, read without creating a context.
pub fn uuid_of(ordinal: usize) -> Result<[u8; 16], ExecError> {
    let id =
        result::device::get_uuid(device_of(ordinal)?).map_err(|e| gpu_err("device UUID", e))?;
    Ok(id.bytes.map(|b| b as u8))
}

/// The driver's handle of GPU `ordinal`, the driver initialised.
fn device_of(ordinal: usize) -> Result<sys::CUdevice, ExecError> {
    if !driver_present() {
        return Err(ExecError::Gpu(
            "the CUDA driver (libcuda.so) cannot be loaded".into(),
        ));
    }
    result::init().map_err(|e| gpu_err("cuInit", e))?;
    let ordinal = i32::try_from(ordinal)
        .map_err(|_| ExecError::Gpu(format!("no GPU with ordinal {ordinal}")))?;
    result::device::get(ordinal).map_err(|e| gpu_err("cannot open the GPU", e))
}

/// One GPU: its primary context and the stream calls are enqueued on.
pub struct Gpu {
    pub(super) ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    ordinal: usize,
    /// Whether every peer GPU of the executor was granted access to this GPU's default
    /// memory pool ([`enable_peer_access`]): then the pool's memory (cudarc's allocations,
    /// `cudaMallocAsync`) is as reachable from the peers as `cuMemAlloc` memory.
    pool_shared: AtomicBool,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Gpu({})", self.ordinal)
    }
}

impl Gpu {
    pub fn open(ordinal: usize) -> Result<Gpu, ExecError> {
        let ctx = CudaContext::new(ordinal).map_err(|e| gpu_err("cannot open the GPU", e))?;
        // cudarc synchronises the whole context when an object's first stream is made (its
        // earlier allocations on the default stream carried no events). This object is new
        // and has made nothing, so that wait is needless, and harmful: a first call (an
        // executor's load) would wait for all of the caller's work on the GPU, hang behind a
        // stream waiting on something later, and break a CUDA graph capture in progress.
        // SAFETY: `ctx` is this function's own new object: no slice of it exists to miss
        // event tracking, and tracking is on again before it is shared.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream();
        // SAFETY: as above; nothing was allocated while tracking was off.
        unsafe { ctx.enable_event_tracking() };
        let stream = stream.map_err(|e| gpu_err("cannot create a stream", e))?;
        Ok(Gpu {
            ctx,
            stream,
            ordinal,
            pool_shared: AtomicBool::new(false),
        })
    }

    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// A new stream of this GPU (non-blocking), for work beside the call's stream.
    pub fn new_stream(&self) -> Result<Arc<CudaStream>, ExecError> {
        self.ctx
            .new_stream()
            .map_err(|e| gpu_err("cuStreamCreate", e))
    }

    /// coll's own stream on this GPU: where setup work, host copies and the blocking paths
    /// ([`CudaExecutor::launch`](crate::cuda::CudaExecutor::launch)) enqueue.
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
        self.is_context(buf.context())
    }

    pub(super) fn is_context(&self, ctx: &CudaContext) -> bool {
        ctx.cu_ctx() == self.ctx.cu_ctx()
    }

    /// Waits for all work on this GPU, on any stream (before memory the work uses is freed).
    pub fn synchronize_all(&self) -> Result<(), ExecError> {
        self.ctx
            .synchronize()
            .map_err(|e| gpu_err("context synchronize", e))
    }

    /// Waits for the work enqueued on coll's own stream ([`stream`](Self::stream)).
    pub fn synchronize(&self) -> Result<(), ExecError> {
        self.stream
            .synchronize()
            .map_err(|e| gpu_err("stream synchronize", e))
    }

    pub(super) fn bind(&self) -> Result<(), ExecError> {
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

    pub fn sm_count(&self) -> Result<u32, ExecError> {
        self.ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map(|v| v.max(0) as u32)
            .map_err(|e| gpu_err("device attribute", e))
    }

    /// The real architecture, as NVRTC names it (`sm_90`).
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

    /// Whether device address `addr` lies in a cudaMalloc/cuMemAlloc allocation on this
    /// GPU: memory every GPU whose context has peer access to this one can load and store.
    /// Stream-ordered pools (cudaMallocAsync), virtual-memory mappings (cuMemMap), managed
    /// and host memory answer false: their peer access is set per allocation or not at all.
    ///
    /// Safe for any `addr`: the driver only looks the address up in its tables (an address
    /// it does not know gets the attributes' defaults) and never dereferences it. Crate
    /// private all the same, as every function that takes a device address.
    pub(crate) fn owns_legacy_allocation(&self, addr: u64) -> Result<bool, ExecError> {
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
        // for an address CUDA does not know the driver writes defaults and still succeeds.
        let r =
            unsafe { sys::cuPointerGetAttributes(2, attrs.as_mut_ptr(), data.as_mut_ptr(), addr) };
        Ok(r == sys::cudaError_enum::CUDA_SUCCESS
            && legacy & 0xff != 0
            && ordinal as u32 as usize == self.ordinal)
    }

    /// Whether the executor's other GPUs may load and store at `addr`: memory of this GPU
    /// that is either a `cuMemAlloc` allocation (peer access covers it) or in this GPU's
    /// default memory pool once every peer was granted access to that pool. Other memory
    /// (another pool, a virtual-memory mapping without peer access) is not.
    ///
    /// Safe for any `addr`, as [`owns_legacy_allocation`](Self::owns_legacy_allocation).
    pub(crate) fn peers_reach(&self, addr: u64) -> Result<bool, ExecError> {
        if self.owns_legacy_allocation(addr)? {
            return Ok(true);
        }
        if !self.pool_shared.load(Ordering::Acquire) {
            return Ok(false);
        }
        let Some(pool) = self.default_pool()? else {
            return Ok(false);
        };
        self.bind()?;
        let mut attrs = [
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        ];
        let (mut handle, mut ordinal): (sys::CUmemoryPool, u64) = (std::ptr::null_mut(), u64::MAX);
        let mut data: [*mut std::ffi::c_void; 2] = [
            (&mut handle as *mut sys::CUmemoryPool).cast(),
            (&mut ordinal as *mut u64).cast(),
        ];
        // SAFETY: two attributes into two values we own, each large enough for its answer (a
        // pool handle, an int); an address CUDA does not know gets the defaults (no pool).
        let r =
            unsafe { sys::cuPointerGetAttributes(2, attrs.as_mut_ptr(), data.as_mut_ptr(), addr) };
        Ok(r == sys::cudaError_enum::CUDA_SUCCESS
            && !handle.is_null()
            && handle == pool
            && ordinal as u32 as usize == self.ordinal)
    }

    /// This GPU's default memory pool, `None` where the driver has none (no stream-ordered
    /// allocator).
    fn default_pool(&self) -> Result<Option<sys::CUmemoryPool>, ExecError> {
        self.bind()?;
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: a query into a handle we own, for this context's device.
        let r = unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, self.ctx.cu_device()) };
        Ok((r == sys::cudaError_enum::CUDA_SUCCESS && !pool.is_null()).then_some(pool))
    }

    /// Grants `peer` read and write access to this GPU's default memory pool; `false` where
    /// the driver has no pool or refuses.
    fn share_pool_with(&self, peer: &Gpu) -> Result<bool, ExecError> {
        let Some(pool) = self.default_pool()? else {
            return Ok(false);
        };
        let desc = sys::CUmemAccessDesc {
            location: sys::CUmemLocation {
                type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: peer.ordinal as i32,
            },
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: one access descriptor we own, for a pool of this context's device.
        let r = unsafe { sys::cuMemPoolSetAccess(pool, &desc, 1) };
        Ok(r == sys::cudaError_enum::CUDA_SUCCESS)
    }

    /// Allocates `bytes` (at least 1) of plain device memory, owned by the caller.
    pub(super) fn alloc(&self, bytes: u64) -> Result<u64, ExecError> {
        self.bind()?;
        // SAFETY: the context is current on this thread; the returned address is owned by
        // the caller (a DeviceBuffer), which frees it exactly once.
        unsafe { result::malloc_sync(bytes.max(1) as usize) }.map_err(|e| gpu_err("cuMemAlloc", e))
    }

    /// Copies `data` into device memory at `dst`, ordered on this GPU's stream. The copy is
    /// from pageable memory, so `data` is staged before this returns and may be dropped.
    ///
    /// # Safety
    /// `dst .. dst + size_of_val(data)` is device memory this GPU can access (its own, or a
    /// peer's or another process's mapped into its context), allocated until the copy has
    /// run, and nothing else relies on its contents meanwhile.
    pub unsafe fn upload<T: bytemuck::NoUninit>(
        &self,
        dst: u64,
        data: &[T],
    ) -> Result<(), ExecError> {
        let bytes = as_bytes(data);
        if bytes.is_empty() {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: the destination range is the caller's (this function's contract); the
        // stream is this GPU's own, alive as long as `self`.
        unsafe { result::memcpy_htod_async(dst, bytes, self.stream.cu_stream()) }
            .map_err(|e| gpu_err("cuMemcpyHtoDAsync", e))
    }

    /// Copies device memory at `src` into `out`, after the work enqueued on this GPU's
    /// stream (which it waits for).
    ///
    /// # Safety
    /// `src .. src + size_of_val(out)` is device memory this GPU can access, allocated until
    /// this returns.
    pub unsafe fn download<T: bytemuck::Pod>(
        &self,
        src: u64,
        out: &mut [T],
    ) -> Result<(), ExecError> {
        let bytes = as_bytes_mut(out);
        if bytes.is_empty() {
            return Ok(());
        }
        self.synchronize()?;
        self.bind()?;
        // SAFETY: the source range is the caller's (this function's contract) and the stream
        // has finished every earlier write to it; every byte pattern is a valid `T` (Pod).
        unsafe { result::memcpy_dtoh_sync(bytes, src) }.map_err(|e| gpu_err("cuMemcpyDtoH", e))
    }

    /// Sets `bytes` bytes at `dst` to zero, ordered on this GPU's stream.
    ///
    /// # Safety
    /// As [`upload`](Self::upload), for `dst .. dst + bytes`.
    pub unsafe fn zero(&self, dst: u64, bytes: u64) -> Result<(), ExecError> {
        if bytes == 0 {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: the range is the caller's (this function's contract).
        unsafe { result::memset_d8_async(dst, 0, bytes as usize, self.stream.cu_stream()) }
            .map_err(|e| gpu_err("cuMemsetD8Async", e))
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
}

/// Lets every GPU read and write every other's memory (NVLink peer access), and grants every
/// GPU access to every other's default memory pool, so buffers from stream-ordered
/// allocators (cudarc's, PyTorch's `cudaMallocAsync` backend) can take direct messages too.
pub fn enable_peer_access(gpus: &[Gpu]) -> Result<(), ExecError> {
    for a in gpus {
        // Pool memory is shared only where every peer got access; else it stays staged.
        let mut shared = true;
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
            shared &= a.share_pool_with(b)?;
        }
        a.pool_shared.store(shared, Ordering::Release);
    }
    Ok(())
}
