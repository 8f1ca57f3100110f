//! Pinned host memory mapped into a GPU's address space ([`HostMapped`]), where the host
//! proxy and the kernel exchange the messages of connections across the network.
//!
//! Invariants: the memory is `bytes()` long, zeroed at allocation, freed on drop; the host
//! touches it only through aligned volatile words ([`HostMapped::load`],
//! [`HostMapped::store`]) and byte copies whose ranges the GPU leaves alone meanwhile (the
//! contract of [`HostMapped::read`] and [`HostMapped::write`]).

use super::gpu::Gpu;
use super::gpu_err;
use crate::error::ExecError;
use cudarc::driver::{CudaContext, sys};
use std::ffi::c_void;
use std::sync::Arc;

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
// through volatile words and through copies whose callers promise no concurrent writer.
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
            at.is_multiple_of(8) && at.checked_add(8).is_some_and(|e| e <= self.bytes),
            "word {at} out of range"
        );
        // SAFETY: in bounds and 8-aligned (checked; the allocation is page-aligned); the GPU
        // writes this word with volatile stores after a system fence.
        unsafe { std::ptr::read_volatile(self.host.add(at).cast::<u64>()) }
    }

    /// Publishes `v` at byte `at` for the GPU, after every earlier write of this thread.
    pub fn store(&self, at: usize, v: u64) {
        assert!(
            at.is_multiple_of(8) && at.checked_add(8).is_some_and(|e| e <= self.bytes),
            "word {at} out of range"
        );
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        // SAFETY: in bounds and aligned (checked); the GPU only reads this word.
        unsafe { std::ptr::write_volatile(self.host.add(at).cast::<u64>(), v) };
    }

    /// Copies `len` bytes at `at` out (data the GPU wrote before publishing a counter).
    ///
    /// # Safety
    /// Neither the GPU nor another thread writes these bytes during the copy (the GPU
    /// finished them before it published the counter the caller read, and does not touch
    /// them again until the caller acknowledges the slot).
    pub unsafe fn read(&self, at: usize, out: &mut Vec<u8>, len: usize) {
        assert!(
            at.checked_add(len).is_some_and(|e| e <= self.bytes),
            "read of {len} at {at} out of range"
        );
        out.clear();
        out.resize(len, 0);
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        // SAFETY: in bounds (checked); no concurrent writer (the contract).
        unsafe { std::ptr::copy_nonoverlapping(self.host.add(at), out.as_mut_ptr(), len) };
    }

    /// Copies `data` in at `at` (before publishing a counter the GPU waits on).
    ///
    /// # Safety
    /// Neither the GPU nor another thread reads or writes these bytes during the copy (the
    /// GPU reads them only after the counter the caller publishes next).
    pub unsafe fn write(&self, at: usize, data: &[u8]) {
        assert!(
            at.checked_add(data.len()).is_some_and(|e| e <= self.bytes),
            "write of {} at {at} out of range",
            data.len()
        );
        // SAFETY: in bounds (checked); no concurrent access (the contract).
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
