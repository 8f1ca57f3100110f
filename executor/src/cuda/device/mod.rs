//! Thin safe types over the CUDA driver calls the GPU executor needs, in cudarc's layering:
//! its `sys` and `result` layers (loaded at run time, so the crate builds without CUDA)
//! wrapped in small RAII types, one concern per module:
//!
//! - [`gpu`](Gpu): a GPU's context and stream, driver queries, peer access, and the raw
//!   copies (`unsafe fn`s) that every typed handle below ends in;
//! - [`memory`](DeviceBuffer): owned allocations ([`DeviceBuffer`]), arenas ([`Arena`]) and
//!   the regions that borrow them ([`Region`], [`Span`]);
//! - [`ipc`](IpcMapping): another process's allocation mapped through CUDA IPC;
//! - [`host`](HostMapped): pinned host memory the GPU reads and writes;
//! - [`nvrtc`](kernel_resources): NVRTC, the kernel images built into the binary
//!   ([`builtin_images`]) and the disk cache of compiled ones;
//! - [`kernels`](Kernels): the kernel module and its launches;
//! - [`graph`](capture): events between streams, and CUDA graphs.
//!
//! The `unsafe` blocks of the GPU executor are here (and the driver queries of `topo`), each
//! with its reason.
//!
//! Invariants: no safe public function takes a device address. Safe code reaches device
//! memory only through a handle that owns or borrows it ([`DeviceBuffer`], [`Region`]),
//! whose reads, writes and clears check their range and GPU; what takes a raw address
//! (copies, kernel launches, event and IPC calls, graph capture, which fixes addresses for
//! later replays) is an `unsafe fn` whose `# Safety` section states what the address must
//! be. Host data crosses as bytes only through `bytemuck` (`NoUninit` to the device, `Pod`
//! back), so no padding or invalid bit pattern is ever copied. Every driver call first makes
//! its GPU's context current on the calling thread; nothing that enqueues a call's work
//! (launches, device-to-device copies) synchronises or touches host memory, so a call can be
//! captured in a CUDA graph.
//!
//! # What safe code cannot do
//!
//! Each case below must fail to compile with the error code its fence names (rustdoc checks
//! both, under `cargo test`); nothing runs, so no GPU or CUDA is needed.
//!
//! Copying to, copying from or clearing a device address is unsafe: safe code goes through a
//! handle.
//! ```compile_fail,E0133
//! use coll_executor::cuda::device::{DeviceBuffer, Gpu};
//! fn main() -> Result<(), coll_executor::ExecError> {
//!     let gpu = Gpu::open(0)?;
//!     let buf = DeviceBuffer::zeroed(&gpu, 16)?;
//!     gpu.upload(buf.ptr() + 4096, &[1u32; 4])
//! }
//! ```
//! ```compile_fail,E0133
//! use coll_executor::cuda::device::Gpu;
//! fn main() -> Result<(), coll_executor::ExecError> {
//!     let gpu = Gpu::open(0)?;
//!     let mut out = [0f32; 4];
//!     gpu.download(0x7f00_0000_0000, &mut out)
//! }
//! ```
//! ```compile_fail,E0133
//! use coll_executor::cuda::device::Gpu;
//! fn main() -> Result<(), coll_executor::ExecError> {
//!     let gpu = Gpu::open(0)?;
//!     gpu.zero(0x7f00_0000_0000, 1 << 20)
//! }
//! ```
//! A captured graph replays device addresses with no borrow to keep them alive, so capturing
//! is unsafe.
//! ```compile_fail,E0133
//! use coll_executor::cuda::device::{Gpu, capture};
//! fn main() -> Result<(), coll_executor::ExecError> {
//!     let gpu = Gpu::open(0)?;
//!     let graphs = capture(&[gpu.stream().clone()], || Ok(()))?;
//!     drop(graphs);
//!     Ok(())
//! }
//! ```
//! A region borrows its arena: the arena cannot be dropped while the region is in use, nor
//! can the region leave the scope the arena lives in.
//! ```compile_fail,E0505
//! use coll_executor::cuda::device::{Arena, Gpu};
//! fn main() -> Result<(), coll_executor::ExecError> {
//!     let gpu = Gpu::open(0)?;
//!     let arena = Arena::new(&gpu, 1024)?;
//!     let region = arena.take(16)?;
//!     drop(arena);
//!     region.write(&gpu, &[1u32; 4])
//! }
//! ```
//! ```compile_fail,E0515
//! use coll_executor::cuda::device::{Arena, Gpu, Region};
//! fn scratch(gpu: &Gpu) -> Result<Region<'static>, coll_executor::ExecError> {
//!     let arena = Arena::new(gpu, 1024)?;
//!     arena.take(16)
//! }
//! fn main() {
//!     let gpu = Gpu::open(0).ok();
//!     let _ = gpu.as_ref().map(scratch);
//! }
//! ```
//! A span (a region's place, kept without the borrow) cannot be made up from an address: only
//! a region gives one, and an arena checks it before writing through it.
//! ```compile_fail,E0451
//! use coll_executor::cuda::device::{Arena, Gpu, Span};
//! fn main() -> Result<(), coll_executor::ExecError> {
//!     let gpu = Gpu::open(0)?;
//!     let arena = Arena::new(&gpu, 1024)?;
//!     let forged = Span { at: 0, bytes: 1 << 20, ptr: 0x7f00_0000_0000 };
//!     arena.region(forged)?.write(&gpu, &[1u8; 16])
//! }
//! ```

mod gpu;
mod graph;
mod host;
mod ipc;
mod kernels;
mod memory;
mod nvrtc;
mod units;

#[cfg(test)]
mod builtin_gen;

/// Kernel images built into the binary (`builtin_gen.rs` says how).
mod builtin {
    include!(concat!(env!("OUT_DIR"), "/builtin_kernels.rs"));
}

/// The names (cache file names, `kernel-<hash>-<arch>-<unit>.cubin`) of the kernel images
/// built into this binary: empty unless it was built with `COLL_EMBED_KERNELS`.
pub fn builtin_images() -> impl Iterator<Item = &'static str> {
    builtin::BUILTIN.iter().map(|(name, _)| *name)
}

/// The built-in image with cache file name `name`, if this binary carries it.
fn builtin_image(name: &str) -> Option<&'static [u8]> {
    builtin::BUILTIN
        .binary_search_by(|(n, _)| (*n).cmp(name))
        .ok()
        .map(|i| builtin::BUILTIN[i].1)
}

pub use gpu::{Gpu, arch_of, device_count, driver_present, enable_peer_access, name_of, uuid_of};
pub use graph::{CaptureTolerant, Event, Graph, capture, capturing, launch_graphs};
pub use host::HostMapped;
pub use ipc::{IPC_HANDLE_BYTES, IpcMapping};
pub use kernels::{CompiledKernels, GpuKernels, KernelLoad, Kernels, TypedKernels};
pub use memory::{Arena, DeviceBuffer, REGION_ALIGN, Region, Span, region_size, user_buffer};
pub use nvrtc::{
    Image, KernelResources, NO_NVRTC, UnitImage, UnitImages, UnitSource, cache_path, dtype_define,
    images, kernel_resources, kernel_resources_with, load_nvrtc, nvrtc_present, parse_ptxas_log,
};
pub use units::{
    KernelUnit, UnitPart, entry_names, entry_names_of, prebuild, prebuilt, unit_of_entry, units_of,
};

use crate::error::ExecError;

/// What a failed driver call returns: cudarc's error or the raw `CUresult`.
pub(crate) trait DriverFailure {
    fn cu_result(self) -> cudarc::driver::sys::CUresult;
}

impl DriverFailure for cudarc::driver::DriverError {
    fn cu_result(self) -> cudarc::driver::sys::CUresult {
        self.0
    }
}

impl DriverFailure for cudarc::driver::sys::CUresult {
    fn cu_result(self) -> cudarc::driver::sys::CUresult {
        self
    }
}

/// A driver call's failure as [`ExecError::Driver`], keeping the driver's `CUresult`.
pub(crate) fn gpu_err(what: &str, e: impl DriverFailure) -> ExecError {
    let code = e.cu_result();
    ExecError::Driver {
        what: what.to_string(),
        code: code as u32,
        name: format!("{code:?}"),
    }
}

/// The bytes of `v`, to copy to the device (no padding: `NoUninit`). Casting to bytes
/// cannot fail (`u8` has size and alignment 1), so bytemuck's panicking form is safe here.
fn as_bytes<T: bytemuck::NoUninit>(v: &[T]) -> &[u8] {
    bytemuck::cast_slice(v)
}

/// The bytes of `v`, to copy device data into (every bit pattern valid: `Pod`).
fn as_bytes_mut<T: bytemuck::Pod>(v: &mut [T]) -> &mut [u8] {
    bytemuck::cast_slice_mut(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_cross_as_their_bytes() {
        let v = [1.5f32, -2.0];
        let b = as_bytes(&v);
        assert_eq!(b.len(), 8);
        assert_eq!(&b[..4], &1.5f32.to_ne_bytes());
        let h = [half::f16::from_f32(1.0)];
        assert_eq!(as_bytes(&h), &h[0].to_bits().to_ne_bytes());
        let b16 = [half::bf16::from_f32(-3.0)];
        assert_eq!(as_bytes(&b16), &b16[0].to_bits().to_ne_bytes());
        let mut out = [0u64; 2];
        as_bytes_mut(&mut out)[8..].copy_from_slice(&7u64.to_ne_bytes());
        assert_eq!(out, [0, 7]);
    }

    #[test]
    fn zero_sized_elements_have_no_bytes() {
        assert!(as_bytes(&[(); 3]).is_empty());
    }

    #[test]
    fn regions_round_to_their_alignment() {
        assert_eq!(region_size(0), REGION_ALIGN);
        assert_eq!(region_size(1), REGION_ALIGN);
        assert_eq!(region_size(REGION_ALIGN), REGION_ALIGN);
        assert_eq!(region_size(REGION_ALIGN + 1), 2 * REGION_ALIGN);
    }
}
