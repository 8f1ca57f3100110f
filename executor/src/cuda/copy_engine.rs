//! Copy-engine calls: a large bulk call whose every op only copies data that is final when
//! the call starts (an all-to-all, a sendrecv, a broadcast or an all-gather of two ranks)
//! runs as plain device-to-device copies between the ranks' buffers, moved by the GPUs' copy
//! engines instead of an interpreter kernel's stores. On 2 × H200 a copy engine moves 390–396
//! GB/s over NVLink per direction where every SM storing reaches 362–367, and the two at once
//! reach less than the copy engine alone (`bench/ce_sm.cu`, `bench/NOTES.md` section 27).
//!
//! Which plans qualify, their copies ([`CeCopy`]) and a call's copies in bytes ([`extents`])
//! are analyses of the plan, made in [`coll_compiler::gpu::copy_engine`] and re-exported
//! here. The executor enqueues each GPU's extents between two barriers of the kernel's
//! `coll_barrier`, so no copy starts before every rank has reached the call and the call
//! ends only when every copy is done.

pub use coll_compiler::gpu::copy_engine::{CeCopy, Extent, ce_copies, extents, one_peer_gpu};
