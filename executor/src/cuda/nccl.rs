//! NCCL through cudarc, for `coll bench --vs-nccl`: one process, one rank per GPU, the same
//! buffers and streams as coll's executor, group calls as nccl-tests makes them.
//!
//! Invariant: a [`Nccl`] owns one communicator per GPU, created by `ncclCommInitAll` and
//! destroyed on drop; NVLink multicast (NVLS) is switched off in the environment before NCCL
//! reads it, as the lent machines require.

use super::device::Gpu;
use crate::dtype::{DType, ReduceOp};
use crate::error::ExecError;
use coll_lang::builtins::CollectiveKind;
use cudarc::nccl::{result, sys};
use std::ffi::c_void;

fn nccl_err(what: &str, e: impl std::fmt::Debug) -> ExecError {
    ExecError::Gpu(format!("NCCL {what}: {e:?}"))
}

/// NCCL's version as an integer (e.g. 22803) and as text.
pub fn version() -> Result<(i32, String), ExecError> {
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
        // NCCL would choose NVLS on an NVSwitch machine; never on the lent ones.
        if std::env::var_os("NCCL_NVLS_ENABLE").is_none() {
            // SAFETY: set before NCCL starts its threads; coll's own threads do not read the
            // environment.
            unsafe { std::env::set_var("NCCL_NVLS_ENABLE", "0") };
        }
        let devs: Vec<i32> = ordinals.iter().map(|&o| o as i32).collect();
        let mut comms = vec![std::ptr::null_mut(); devs.len()];
        // SAFETY: `comms` has room for one communicator per device in `devs`.
        unsafe { result::comm_init_all(comms.as_mut_ptr(), devs.len() as i32, devs.as_ptr()) }
            .map_err(|e| nccl_err("ncclCommInitAll", e))?;
        Ok(Nccl { comms })
    }

    /// Enqueues one collective on every GPU's stream (a group call); `bufs[r]` is rank r's
    /// (send, receive) device pointers.
    #[allow(clippy::too_many_arguments)]
    pub fn launch(
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
        let esize = dtype.size() as u64;
        result::group_start().map_err(|e| nccl_err("group start", e))?;
        for (r, comm) in self.comms.iter().enumerate() {
            let (s, d) = bufs[r];
            let stream = gpus[r].stream().cu_stream() as sys::cudaStream_t;
            let (sp, dp) = (s as *const c_void, d as *mut c_void);
            // SAFETY: the pointers are live device allocations of rank r's GPU, sized for
            // `count` elements as NCCL defines the collective (the caller allocates them),
            // the communicator belongs to that GPU, and the group is closed below.
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
            res.map_err(|e| nccl_err(kind.name(), e))?;
        }
        result::group_end().map_err(|e| nccl_err("group end", e))?;
        Ok(())
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
