//! CUDA IPC between the processes of one machine: a process exports an allocation as a
//! handle ([`DeviceBuffer::ipc_handle`](super::DeviceBuffer::ipc_handle)), the others map
//! it into their GPU's context ([`IpcMapping`]).
//!
//! Invariants: an `IpcMapping` is the whole exported allocation, `bytes()` long (the driver's
//! answer, not the exporter's word), mapped into one context until it is dropped; the
//! exporter keeps the allocation until then (the contract of [`IpcMapping::open`]).

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
    /// Maps the allocation `handle` names into `gpu`'s context.
    ///
    /// # Safety
    /// The exporting process keeps the allocation (does not free it, and does not exit)
    /// until this mapping is dropped and every work enqueued through it has finished: the
    /// driver leaves an allocation freed under a mapping undefined.
    pub unsafe fn open(gpu: &Gpu, handle: &[u8]) -> Result<IpcMapping, ExecError> {
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
        // Owned from here: an error below unmaps it.
        let mut m = IpcMapping {
            ptr,
            bytes: 0,
            ctx: gpu.ctx.clone(),
        };
        let (mut base, mut bytes): (sys::CUdeviceptr, usize) = (0, 0);
        // SAFETY: two out-parameters we own; `ptr` is the mapping just made in this
        // (current) context.
        unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut bytes, ptr) }
            .result()
            .map_err(|e| gpu_err("cuMemGetAddressRange", e))?;
        // IPC maps whole allocations, so `ptr` is the base; measured from it all the same.
        m.bytes = (bytes as u64).saturating_sub(ptr.saturating_sub(base));
        Ok(m)
    }

    /// The device address of byte 0 in this context.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Bytes mapped, as the driver reports the allocation.
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
