//! Typed handles to device memory, through which safe code reads and writes it.
//!
//! - [`DeviceBuffer`]: one `cuMemAlloc` allocation of one GPU, owned, freed on drop.
//! - [`Arena`]: one allocation per GPU that a plan's regions are carved from, in order; its
//!   memory is this process's own (a `DeviceBuffer`), another process's mapped through CUDA
//!   IPC ([`IpcMapping`]), or none at all (another process's arena this one only counts, so
//!   later regions line up with that process's).
//! - [`Region`]: `bytes` of an arena at an offset, borrowing the arena, so it cannot outlive
//!   the memory it names.
//! - [`Span`]: where a region lies, without the borrow, for structs that keep the arena
//!   alive beside it (the executor's per-GPU state); [`Arena::region`] turns it back into a
//!   `Region`, checked against the arena.
//!
//! Invariants: a handle's `ptr() .. ptr() + bytes()` lies inside one live allocation of its
//! context, except a region of an unmapped arena (one only counted), which addresses nothing
//! and refuses every access; every safe read, write and clear checks its range against the
//! handle, and the GPU it is given against the handle's context, before it reaches the
//! driver.

use super::gpu::Gpu;
use super::gpu_err;
use super::ipc::{IPC_HANDLE_BYTES, IpcMapping};
use crate::error::ExecError;
use cudarc::driver::{CudaContext, result, sys};
use std::sync::Arc;

/// Plain device memory: one `cuMemAlloc` allocation of one GPU (not the stream-ordered pool,
/// so peer GPUs can map it), freed on drop.
pub struct DeviceBuffer {
    ptr: u64,
    bytes: u64,
    ctx: Arc<CudaContext>,
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceBuffer({:#x}, {} bytes)", self.ptr, self.bytes)
    }
}

/// Device memory for a rank's user buffers (what `coll run`/`coll bench` allocate).
pub fn user_buffer(gpu: &Gpu, bytes: u64) -> Result<DeviceBuffer, ExecError> {
    DeviceBuffer::zeroed(gpu, bytes)
}

/// Checks that `len` bytes at offset `at` fit a handle of `bytes` bytes.
fn check_range(what: &str, at: u64, len: u64, bytes: u64) -> Result<(), ExecError> {
    match at.checked_add(len) {
        Some(end) if end <= bytes => Ok(()),
        _ => Err(ExecError::Gpu(format!(
            "{what} of {len} bytes at offset {at} past a device buffer of {bytes} bytes"
        ))),
    }
}

/// Checks that `gpu` is the GPU of the context a handle's memory lives in.
fn check_gpu(gpu: &Gpu, ctx: &CudaContext) -> Result<(), ExecError> {
    if gpu.is_context(ctx) {
        Ok(())
    } else {
        Err(ExecError::Gpu(format!(
            "a device buffer of another GPU used through GPU {}",
            gpu.ordinal()
        )))
    }
}

impl DeviceBuffer {
    /// `bytes` (at least 1) of zeroed device memory on `gpu`.
    pub fn zeroed(gpu: &Gpu, bytes: u64) -> Result<DeviceBuffer, ExecError> {
        let bytes = bytes.max(1);
        let ptr = gpu.alloc(bytes)?;
        // Owned from here, so an error below still frees it.
        let buf = DeviceBuffer {
            ptr,
            bytes,
            ctx: gpu.ctx.clone(),
        };
        buf.clear(gpu)?;
        Ok(buf)
    }

    /// A buffer holding `data` (at least 1 byte, zeroed past it).
    pub fn from_slice<T: bytemuck::NoUninit>(
        gpu: &Gpu,
        data: &[T],
    ) -> Result<DeviceBuffer, ExecError> {
        let buf = DeviceBuffer::zeroed(gpu, std::mem::size_of_val(data) as u64)?;
        buf.write(gpu, data)?;
        Ok(buf)
    }

    /// The device address of byte 0, for kernel arguments.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub(super) fn context(&self) -> &CudaContext {
        &self.ctx
    }

    /// Copies `data` to the start of the buffer (see [`write_at`](Self::write_at)).
    pub fn write<T: bytemuck::NoUninit>(&self, gpu: &Gpu, data: &[T]) -> Result<(), ExecError> {
        self.write_at(gpu, 0, data)
    }

    /// Copies `data` to byte `at` of the buffer, ordered on `gpu`'s stream; fails when it
    /// does not fit or `gpu` is not the buffer's.
    pub fn write_at<T: bytemuck::NoUninit>(
        &self,
        gpu: &Gpu,
        at: u64,
        data: &[T],
    ) -> Result<(), ExecError> {
        check_gpu(gpu, &self.ctx)?;
        check_range(
            "a write",
            at,
            std::mem::size_of_val(data) as u64,
            self.bytes,
        )?;
        // SAFETY: the range lies inside this live allocation of `gpu`'s context (checked).
        unsafe { gpu.upload(self.ptr + at, data) }
    }

    /// Reads the start of the buffer into `out` (see [`read_at`](Self::read_at)).
    pub fn read<T: bytemuck::Pod>(&self, gpu: &Gpu, out: &mut [T]) -> Result<(), ExecError> {
        self.read_at(gpu, 0, out)
    }

    /// Reads from byte `at` of the buffer into `out`, after the work enqueued on `gpu`'s
    /// stream; fails when it does not fit or `gpu` is not the buffer's.
    pub fn read_at<T: bytemuck::Pod>(
        &self,
        gpu: &Gpu,
        at: u64,
        out: &mut [T],
    ) -> Result<(), ExecError> {
        check_gpu(gpu, &self.ctx)?;
        check_range("a read", at, std::mem::size_of_val(out) as u64, self.bytes)?;
        // SAFETY: the range lies inside this live allocation of `gpu`'s context (checked).
        unsafe { gpu.download(self.ptr + at, out) }
    }

    /// Zeroes the whole buffer, ordered on `gpu`'s stream.
    pub fn clear(&self, gpu: &Gpu) -> Result<(), ExecError> {
        check_gpu(gpu, &self.ctx)?;
        // SAFETY: the whole of this live allocation of `gpu`'s context.
        unsafe { gpu.zero(self.ptr, self.bytes) }
    }

    /// A handle another process can open to map this allocation (cuIpcGetMemHandle).
    pub fn ipc_handle(&self) -> Result<[u8; IPC_HANDLE_BYTES], ExecError> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| gpu_err("cannot bind the context", e))?;
        let mut h = sys::CUipcMemHandle_st {
            reserved: [0; IPC_HANDLE_BYTES],
        };
        // SAFETY: `h` is a valid out-parameter; `ptr` is the base of a live cuMemAlloc
        // allocation of the current context.
        unsafe { sys::cuIpcGetMemHandle(&mut h, self.ptr) }
            .result()
            .map_err(|e| gpu_err("cuIpcGetMemHandle", e))?;
        Ok(h.reserved.map(|c| c as u8))
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: `ptr` came from cuMemAlloc in this context and is freed only here; the
            // owner outlives every kernel that used it (the executor syncs before dropping).
            let _ = unsafe { result::free_sync(self.ptr) };
        }
    }
}

/// Regions start on this alignment (vector loads need 16; 256 keeps them apart in cache).
pub const REGION_ALIGN: u64 = 256;

/// The bytes a region of `bytes` takes in an arena.
pub fn region_size(bytes: u64) -> u64 {
    bytes.max(1).div_ceil(REGION_ALIGN) * REGION_ALIGN
}

/// What an arena's regions address.
enum ArenaMemory {
    /// This process's allocation.
    Owned(DeviceBuffer),
    /// Another process's allocation, mapped into this context; at least `capacity` bytes
    /// (checked when the arena is made); held for its drop, which unmaps it.
    Mapped { _mapping: IpcMapping },
    /// Another process's arena this one never touches: its regions are counted so that later
    /// regions of mapped arenas line up, and address nothing.
    Unmapped,
}

/// One allocation per GPU carved into regions: what a plan needs is allocated in one piece,
/// so the memory coll takes equals what it reports (up to the driver's granularity).
pub struct Arena {
    memory: ArenaMemory,
    /// The device address of byte 0 (0 for an unmapped arena).
    base: u64,
    capacity: u64,
    ctx: Arc<CudaContext>,
    used: std::cell::Cell<u64>,
}

impl std::fmt::Debug for Arena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.memory {
            ArenaMemory::Owned(_) => "owned",
            ArenaMemory::Mapped { .. } => "mapped",
            ArenaMemory::Unmapped => "unmapped",
        };
        write!(
            f,
            "Arena({kind}, {} of {} bytes)",
            self.used.get(),
            self.capacity
        )
    }
}

impl Arena {
    /// A zeroed arena of `capacity` bytes (at least 1) on `gpu`.
    pub fn new(gpu: &Gpu, capacity: u64) -> Result<Arena, ExecError> {
        let buf = DeviceBuffer::zeroed(gpu, capacity)?;
        Ok(Arena {
            base: buf.ptr(),
            capacity: buf.bytes(),
            ctx: gpu.ctx.clone(),
            memory: ArenaMemory::Owned(buf),
            used: std::cell::Cell::new(0),
        })
    }

    /// Another process's arena of `capacity` bytes, mapped into `gpu`'s context: regions
    /// taken from it address that process's memory (every process carves arenas in the same
    /// order, so a region here is the same region there). Fails when the mapping is smaller
    /// than `capacity` or was opened on another GPU.
    pub fn mapped(gpu: &Gpu, mapping: IpcMapping, capacity: u64) -> Result<Arena, ExecError> {
        let capacity = capacity.max(1);
        check_gpu(gpu, mapping.context())?;
        if mapping.bytes() < capacity {
            return Err(ExecError::Gpu(format!(
                "a mapped arena of {} bytes, where the plan needs {capacity}",
                mapping.bytes()
            )));
        }
        Ok(Arena {
            base: mapping.ptr(),
            capacity,
            ctx: gpu.ctx.clone(),
            memory: ArenaMemory::Mapped { _mapping: mapping },
            used: std::cell::Cell::new(0),
        })
    }

    /// Bookkeeping only, for another process's arena this one never touches: regions are
    /// counted (so later regions of mapped arenas line up) but address nothing, and every
    /// read, write or clear of them fails.
    pub fn unmapped(gpu: &Gpu, capacity: u64) -> Arena {
        Arena {
            memory: ArenaMemory::Unmapped,
            base: 0,
            capacity: capacity.max(1),
            ctx: gpu.ctx.clone(),
            used: std::cell::Cell::new(0),
        }
    }

    /// Whether its regions address memory this process may touch (its own arena, or another
    /// process's mapped one).
    pub fn addresses(&self) -> bool {
        !matches!(self.memory, ArenaMemory::Unmapped)
    }

    /// The IPC handle of this process's arena, for the other processes of a group to map.
    pub fn ipc_handle(&self) -> Result<[u8; IPC_HANDLE_BYTES], ExecError> {
        match &self.memory {
            ArenaMemory::Owned(buf) => buf.ipc_handle(),
            _ => Err(ExecError::Gpu(
                "an IPC handle of another process's arena".into(),
            )),
        }
    }

    /// The next `bytes` (at least 1) of the arena, on [`REGION_ALIGN`]; zero until written,
    /// as the arena is allocated zeroed and every region is taken once.
    pub fn take(&self, bytes: u64) -> Result<Region<'_>, ExecError> {
        let size = region_size(bytes);
        let at = self.used.get();
        let end = at.checked_add(size).filter(|&e| e <= self.capacity);
        let Some(end) = end else {
            return Err(ExecError::Gpu(format!(
                "arena of {} bytes is too small (needs {} more)",
                self.capacity,
                at.saturating_add(size) - self.capacity
            )));
        };
        self.used.set(end);
        Ok(Region {
            arena: self,
            at,
            bytes: bytes.max(1),
        })
    }

    /// A region holding `data`.
    pub fn take_with<T: bytemuck::NoUninit>(
        &self,
        gpu: &Gpu,
        data: &[T],
    ) -> Result<Region<'_>, ExecError> {
        let r = self.take(std::mem::size_of_val(data) as u64)?;
        r.write(gpu, data)?;
        Ok(r)
    }

    /// The region `span` names, which [`Region::span`] took from this arena: fails when it
    /// lies outside the arena or came from another one.
    pub fn region(&self, span: Span) -> Result<Region<'_>, ExecError> {
        let inside = span
            .at
            .checked_add(span.bytes)
            .is_some_and(|e| e <= self.used.get());
        if !inside || span.ptr != self.base.wrapping_add(span.at) {
            return Err(ExecError::Gpu(format!(
                "a region of {} bytes at {:#x} is not one of this arena's",
                span.bytes, span.ptr
            )));
        }
        Ok(Region {
            arena: self,
            at: span.at,
            bytes: span.bytes,
        })
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes of regions taken so far.
    pub fn used(&self) -> u64 {
        self.used.get()
    }
}

/// `bytes` of an [`Arena`] at an offset: borrows the arena, so it cannot outlive it.
#[derive(Clone, Copy)]
pub struct Region<'a> {
    arena: &'a Arena,
    at: u64,
    bytes: u64,
}

impl std::fmt::Debug for Region<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Region({:#x}, {} bytes)", self.ptr(), self.bytes)
    }
}

impl Region<'_> {
    /// The device address of byte 0, for kernel arguments and the executor's tables (of a
    /// unmapped arena's region: an offset from 0, which nothing here dereferences).
    pub fn ptr(&self) -> u64 {
        self.arena.base.wrapping_add(self.at)
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Where this region lies, without the borrow ([`Arena::region`] gives it back).
    pub fn span(&self) -> Span {
        Span {
            at: self.at,
            bytes: self.bytes,
            ptr: self.ptr(),
        }
    }

    /// The region's address after checking that `len` bytes at `at` fit it, its arena has
    /// memory, and `gpu` is the arena's GPU.
    fn checked(&self, gpu: &Gpu, what: &str, at: u64, len: u64) -> Result<u64, ExecError> {
        if matches!(self.arena.memory, ArenaMemory::Unmapped) {
            return Err(ExecError::Gpu(format!(
                "{what} of a region of another process's arena, which is not mapped here"
            )));
        }
        check_gpu(gpu, &self.arena.ctx)?;
        check_range(what, at, len, self.bytes)?;
        Ok(self.ptr() + at)
    }

    /// Copies `data` to the start of the region, ordered on `gpu`'s stream.
    pub fn write<T: bytemuck::NoUninit>(&self, gpu: &Gpu, data: &[T]) -> Result<(), ExecError> {
        let dst = self.checked(gpu, "a write", 0, std::mem::size_of_val(data) as u64)?;
        // SAFETY: inside the arena's live allocation (own or mapped, at least `capacity`
        // bytes), which the borrow of the arena keeps alive; on `gpu`'s context (checked).
        unsafe { gpu.upload(dst, data) }
    }

    /// Reads the start of the region into `out`, after the work enqueued on `gpu`'s stream.
    pub fn read<T: bytemuck::Pod>(&self, gpu: &Gpu, out: &mut [T]) -> Result<(), ExecError> {
        let src = self.checked(gpu, "a read", 0, std::mem::size_of_val(out) as u64)?;
        // SAFETY: as in `write`.
        unsafe { gpu.download(src, out) }
    }

    /// Zeroes the region, ordered on `gpu`'s stream.
    pub fn clear(&self, gpu: &Gpu) -> Result<(), ExecError> {
        let dst = self.checked(gpu, "a clear", 0, self.bytes)?;
        // SAFETY: as in `write`.
        unsafe { gpu.zero(dst, self.bytes) }
    }
}

/// Where a [`Region`] lies in its arena (offset, length, device address), without borrowing
/// it: for structs that keep the arena alive beside the addresses they hand to kernels.
/// Reading or writing it goes back through [`Arena::region`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    at: u64,
    bytes: u64,
    ptr: u64,
}

impl Span {
    /// The device address of byte 0, for kernel arguments.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}
