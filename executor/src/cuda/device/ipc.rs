//! CUDA IPC between the processes of one machine: a process exports an allocation as a
//! handle ([`DeviceBuffer::ipc_handle`](super::DeviceBuffer::ipc_handle)), the others map
//! it into their GPU's context ([`IpcMapping`]).
//!
//! Invariants: an `IpcMapping` is the whole exported allocation, at least `bytes()` long,
//! mapped into one context until it is dropped; the exporter keeps the allocation until then
//! (the contract of [`IpcMapping::open`]).

use super::gpu::Gpu;
use super::gpu_err;
use crate::error::ExecError;
use cudarc::driver::{CudaContext, sys};
use std::sync::Arc;

/// Bytes of a CUDA IPC memory handle.
pub const IPC_HANDLE_BYTES: usize = 64;

/// Another process's allocation mapped into this GPU's context (cuIpcOpenMemHandle);
/// unmapped on drop.
pub struct IpcMapping {
    ptr: u64,
    bytes: u64,
    ctx: Arc<CudaContext>,
}

impl std::fmt::Debug for IpcMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IpcMapping({:#x}, {} bytes)", self.ptr, self.bytes)
    }
}

impl IpcMapping {
    /// Maps the allocation `handle` names, of `bytes` bytes, into `gpu`'s context. Fails
    /// when the driver reports a smaller allocation.
    ///
    /// # Safety
    /// The allocation is at least `bytes` long (checked too where the driver reports the
    /// size of a mapping), and the exporting process keeps it (does not free it, and does not
    /// exit) until this mapping is dropped and all work enqueued through it has finished:
    /// the driver leaves an allocation freed under a mapping undefined.
    pub unsafe fn open(gpu: &Gpu, handle: &[u8], bytes: u64) -> Result<IpcMapping, ExecError> {
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
        // Every allocation has a byte (`Arena::new` allocates at least one).
        let bytes = bytes.max(1);
        // Owned from here: an error below unmaps it.
        let m = IpcMapping {
            ptr,
            bytes,
            ctx: gpu.ctx.clone(),
        };
        let (mut base, mut size): (sys::CUdeviceptr, usize) = (0, 0);
        // SAFETY: two out-parameters we own; `ptr` is the mapping just made in this
        // (current) context.
        let known = unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, ptr) };
        // IPC maps whole allocations, so `ptr` is the base; measured from it all the same.
        let size = (size as u64).saturating_sub(ptr.saturating_sub(base));
        if known == sys::cudaError_enum::CUDA_SUCCESS && size < bytes {
            return Err(ExecError::Gpu(format!(
                "an IPC mapping of {size} bytes, where {bytes} were expected"
            )));
        }
        Ok(m)
    }

    /// The device address of byte 0 in this context.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Bytes mapped (what [`open`](Self::open) was told, checked where the driver says).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub(super) fn context(&self) -> &CudaContext {
        &self.ctx
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
