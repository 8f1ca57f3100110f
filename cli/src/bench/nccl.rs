//! NCCL through cudarc, for `coll bench --vs-nccl`: one process, one rank per GPU, the same
//! buffers and streams as coll's executor, group calls as nccl-tests makes them.
//!
//! Invariant: a [`Nccl`] owns one communicator per GPU, created by `ncclCommInitAll` and
//! destroyed on drop. NCCL reads its settings from the process environment when it
//! initialises; this module never writes it: the `coll` binary switches NVLink multicast off
//! ([`NVLS_VAR`]) at start, as on every machine measured (2 × H200 on an NVSwitch, NVLink
//! multicast off), and a program that calls [`Nccl::init`] itself says what it wants there
//! before it starts any thread.

use coll_executor::ExecError;
use coll_executor::cuda::device::Gpu;
use coll_executor::dtype::{DType, ReduceOp};
use coll_lang::builtins::CollectiveKind;
use cudarc::nccl::{result, sys};
use std::ffi::c_void;

/// NCCL's switch for NVLink multicast (NVLS), which it would pick on an NVSwitch machine;
/// `0` turns it off.
pub const NVLS_VAR: &str = "NCCL_NVLS_ENABLE";

fn nccl_err(what: &str, e: impl std::fmt::Debug) -> ExecError {
    ExecError::Gpu(format!("NCCL {what}: {e:?}"))
}

/// What [`Nccl::init`] and [`version`] say when NCCL cannot be loaded.
pub const NO_NCCL: &str = "NCCL (libnccl.so.2) not found: put its lib directory on \
    LD_LIBRARY_PATH (e.g. from `pip install nvidia-nccl-cu12`)";

/// Whether the NCCL library can be loaded (cudarc panics on its first use otherwise).
pub fn present() -> bool {
    // SAFETY: loading NCCL runs only its library initialisers, as any program using it does.
    unsafe { sys::is_culib_present() }
}

/// NCCL's version as an integer (e.g. 22803) and as text.
pub fn version() -> Result<(i32, String), ExecError> {
    if !present() {
        return Err(ExecError::Gpu(NO_NCCL.into()));
    }
    let v = result::get_nccl_version().map_err(|e| nccl_err("version", e))?;
    Ok((v, format!("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100)))
}

/// One communicator per GPU.
#[derive(Debug)]
pub struct Nccl {
    comms: Vec<sys::ncclComm_t>,
}

// SAFETY: NCCL communicators may be used from any thread as long as calls on one are not
// concurrent; `Nccl` only makes calls through `&mut self`-free methods from one thread.
unsafe impl Send for Nccl {}

impl Nccl {
    /// Creates communicators over `ordinals` (rank i on GPU `ordinals[i]`).
    pub fn init(ordinals: &[usize]) -> Result<Nccl, ExecError> {
        if !present() {
            return Err(ExecError::Gpu(NO_NCCL.into()));
        }
        let devs: Vec<i32> = ordinals.iter().map(|&o| o as i32).collect();
        let mut comms = vec![std::ptr::null_mut(); devs.len()];
        // SAFETY: `comms` has room for one communicator per device in `devs`.
        unsafe { result::comm_init_all(comms.as_mut_ptr(), devs.len() as i32, devs.as_ptr()) }
            .map_err(|e| nccl_err("ncclCommInitAll", e))?;
        Ok(Nccl { comms })
    }

    /// Enqueues one collective on every GPU's stream (a group call); `bufs[r]` is rank r's
    /// (send, receive) device pointers, `gpus[r]` its GPU.
    ///
    /// # Safety
    /// `gpus` are the GPUs of [`init`](Self::init)'s ordinals, in order; each pointer of
    /// `bufs[r]` is live device memory of `gpus[r]`, as large as NCCL's `kind` needs for
    /// `count` elements of `dtype` (for alltoall `count` per peer on both sides), and stays
    /// alive and otherwise untouched until the call has run on `gpus[r]`'s stream.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn launch(
        &self,
        gpus: &[&Gpu],
        kind: CollectiveKind,
        bufs: &[(u64, u64)],
        count: usize,
        dtype: DType,
        op: ReduceOp,
        root: u32,
    ) -> Result<(), ExecError> {
        let dt = match dtype {
            DType::F32 => sys::ncclDataType_t::ncclFloat32,
            DType::F64 => sys::ncclDataType_t::ncclFloat64,
            DType::F16 => sys::ncclDataType_t::ncclFloat16,
            DType::Bf16 => sys::ncclDataType_t::ncclBfloat16,
            DType::I32 => sys::ncclDataType_t::ncclInt32,
            DType::I64 => sys::ncclDataType_t::ncclInt64,
            DType::U8 => sys::ncclDataType_t::ncclUint8,
        };
        let rop = match op {
            ReduceOp::Sum => sys::ncclRedOp_t::ncclSum,
            ReduceOp::Prod => sys::ncclRedOp_t::ncclProd,
            ReduceOp::Min => sys::ncclRedOp_t::ncclMin,
            ReduceOp::Max => sys::ncclRedOp_t::ncclMax,
            ReduceOp::Avg => sys::ncclRedOp_t::ncclAvg,
        };
        let n = self.comms.len();
        if gpus.len() != n || bufs.len() != n {
            return Err(ExecError::Gpu(format!(
                "NCCL {}: {} GPUs and {} buffer pairs for {n} communicators",
                kind.name(),
                gpus.len(),
                bufs.len()
            )));
        }
        let esize = dtype.size() as u64;
        result::group_start().map_err(|e| nccl_err("group start", e))?;
        let enqueued = self.comms.iter().enumerate().try_for_each(|(r, comm)| {
            let (s, d) = bufs[r];
            let stream = gpus[r].stream().cu_stream() as sys::cudaStream_t;
            let (sp, dp) = (s as *const c_void, d as *mut c_void);
            // SAFETY: the pointers are live device memory of rank r's GPU, sized for `count`
            // elements as NCCL defines the collective (this function's contract), the
            // communicator belongs to that GPU, and the group is closed after the loop.
            let res = unsafe {
                match kind {
                    CollectiveKind::AllReduce => {
                        result::all_reduce(sp, dp, count, dt, rop, *comm, stream).map(|_| ())
                    }
                    CollectiveKind::AllGather => {
                        result::all_gather(sp, dp, count, dt, *comm, stream).map(|_| ())
                    }
                    CollectiveKind::ReduceScatter => {
                        result::reduce_scatter(sp, dp, count, dt, rop, *comm, stream).map(|_| ())
                    }
                    CollectiveKind::Broadcast => {
                        result::broadcast(sp, dp, count, dt, root as i32, *comm, stream).map(|_| ())
                    }
                    CollectiveKind::Reduce => {
                        result::reduce(sp, dp, count, dt, rop, root as i32, *comm, stream)
                            .map(|_| ())
                    }
                    CollectiveKind::SendRecv => {
                        let to = (r + 1) % n;
                        let from = (r + n - 1) % n;
                        result::send(sp, count, dt, to as i32, *comm, stream)
                            .and_then(|_| result::recv(dp, count, dt, from as i32, *comm, stream))
                            .map(|_| ())
                    }
                    CollectiveKind::AllToAll => {
                        // As nccl-tests: grouped sends and receives of `count` per peer.
                        let mut out = Ok(());
                        for q in 0..n {
                            let off = q as u64 * count as u64 * esize;
                            out = out
                                .and_then(|_| {
                                    result::send(
                                        (s + off) as *const c_void,
                                        count,
                                        dt,
                                        q as i32,
                                        *comm,
                                        stream,
                                    )
                                    .map(|_| ())
                                })
                                .and_then(|_| {
                                    result::recv(
                                        (d + off) as *mut c_void,
                                        count,
                                        dt,
                                        q as i32,
                                        *comm,
                                        stream,
                                    )
                                    .map(|_| ())
                                });
                        }
                        out
                    }
                    CollectiveKind::Custom => Ok(()),
                }
            };
            res.map_err(|e| nccl_err(kind.name(), e))
        });
        // The group is closed whatever failed, so the next call starts a group of its own.
        let ended = result::group_end()
            .map(|_| ())
            .map_err(|e| nccl_err("group end", e));
        enqueued.and(ended)
    }
}

impl Drop for Nccl {
    fn drop(&mut self) {
        for c in &self.comms {
            // SAFETY: each communicator came from ncclCommInitAll and is destroyed once;
            // callers synchronise their streams before dropping.
            let _ = unsafe { result::comm_destroy(*c) };
        }
    }
}
