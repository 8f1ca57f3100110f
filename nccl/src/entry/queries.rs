//! Questions about a communicator, its asynchronous errors, and reduction operators.

use super::{boundary, nonnull};
use crate::comm;
use crate::error::Error;
use crate::route::check_real;
use std::ffi::{c_int, c_void};

fn write<T>(out: *mut T, v: T, what: &str) -> crate::error::Result<()> {
    nonnull(out, what)?;
    // SAFETY: checked non-null; the caller gives room for one value.
    unsafe { out.write(v) };
    Ok(())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommCount(comm: *const c_void, count: *mut c_int) -> c_int {
    boundary("ncclCommCount", |_| {
        let c = comm::get(comm)?;
        write(count, c.nranks as c_int, "count")
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommCuDevice(comm: *const c_void, device: *mut c_int) -> c_int {
    boundary("ncclCommCuDevice", |_| {
        let c = comm::get(comm)?;
        write(device, c.device, "device")
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommUserRank(comm: *const c_void, rank: *mut c_int) -> c_int {
    boundary("ncclCommUserRank", |_| {
        let c = comm::get(comm)?;
        write(rank, c.rank as c_int, "rank")
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommGetAsyncError(
    comm: *mut c_void,
    async_error: *mut c_int,
) -> c_int {
    boundary("ncclCommGetAsyncError", |g| {
        let c = comm::get(comm)?;
        // The device's records are read with coll's own contexts bound: restore the caller's.
        let _restore = crate::clique::CurrentContext::save()?;
        let found = c.async_error();
        if let Some(e) = &found {
            // What ncclGetLastError says: the rank, op and source line of the fault.
            super::set_last(&format!("ncclCommGetAsyncError: {}", e.message));
        }
        let mut code = found.map_or(0, |e| e.code as c_int);
        if code == 0
            && let Some(real) = c.real()
            && let Some(f) = g.real_if_loaded().and_then(|l| l.comm_get_async_error)
        {
            // SAFETY: the rank's live real communicator; writes one int.
            check_real("ncclCommGetAsyncError", unsafe { f(real.0, &mut code) })?;
        }
        write(async_error, code, "asyncError")
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclRedOpCreatePreMulSum(
    op: *mut c_int,
    scalar: *mut c_void,
    datatype: c_int,
    residence: c_int,
    comm: *mut c_void,
) -> c_int {
    boundary("ncclRedOpCreatePreMulSum", |g| {
        nonnull(op, "op")?;
        let c = comm::get(comm)?;
        // The operator lives in the real NCCL, and calls using it are forwarded there.
        let real = c.real().ok_or_else(|| {
            Error::usage(
                "ncclRedOpCreatePreMulSum needs the real NCCL beside coll (COLL_NCCL_FORWARD=1)",
            )
        })?;
        let f = g
            .real()?
            .red_op_create_pre_mul_sum
            .ok_or_else(|| Error::usage("the real NCCL has no ncclRedOpCreatePreMulSum"))?;
        // SAFETY: the caller's arguments under NCCL's contract, on the rank's real
        // communicator; `op` was checked non-null.
        check_real("ncclRedOpCreatePreMulSum", unsafe {
            f(op, scalar, datatype, residence, real.0)
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclRedOpDestroy(op: c_int, comm: *mut c_void) -> c_int {
    boundary("ncclRedOpDestroy", |g| {
        let c = comm::get(comm)?;
        let real = c
            .real()
            .ok_or_else(|| Error::argument(format!("operator {op} was not created here")))?;
        let f = g
            .real()?
            .red_op_destroy
            .ok_or_else(|| Error::usage("the real NCCL has no ncclRedOpDestroy"))?;
        // SAFETY: an operator of the rank's real communicator, as created above.
        check_real("ncclRedOpDestroy", unsafe { f(op, real.0) })
    })
}

/// NCCL's device API (2.28): not served; a program that asks is told so.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclDevCommCreate(
    _comm: *mut c_void,
    _reqs: *const c_void,
    _out: *mut c_void,
) -> c_int {
    boundary("ncclDevCommCreate", |_| {
        Err(super::not_served("ncclDevCommCreate (the device API)"))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclDevCommDestroy(_comm: *mut c_void, _dev_comm: *const c_void) -> c_int {
    boundary("ncclDevCommDestroy", |_| {
        Err(super::not_served("ncclDevCommDestroy (the device API)"))
    })
}
