//! Memory: `ncclMemAlloc` gives `cuMemAlloc` memory, which coll's executor sends into
//! directly; registrations and windows are accepted (coll needs neither to go direct) and
//! passed on to the real NCCL beside coll, so forwarded calls keep their benefit.
//!
//! Invariant: a registration or window handle is a key of the table of registrations until it is
//! deregistered; a handle not there is refused.

use super::{boundary, cuda, nonnull};
use crate::comm::{self, RealComm};
use crate::error::{Error, Result};
use crate::route::check_real;
use coll_executor::sync::lock;
use cudarc::driver::result;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclMemAlloc(ptr: *mut *mut c_void, size: usize) -> c_int {
    boundary("ncclMemAlloc", |_| {
        nonnull(ptr, "ptr")?;
        result::init().map_err(|e| cuda("cuInit", e))?;
        // SAFETY: allocates on the caller's current context (its device), as NCCL does.
        let p = unsafe { result::malloc_sync(size.max(1)) }.map_err(|e| cuda("cuMemAlloc", e))?;
        // SAFETY: checked non-null; the caller gives room for one pointer.
        unsafe { *ptr = p as *mut c_void };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclMemFree(ptr: *mut c_void) -> c_int {
    boundary("ncclMemFree", |_| {
        if ptr.is_null() {
            return Ok(());
        }
        // SAFETY: NCCL's contract: a pointer ncclMemAlloc returned, not yet freed.
        unsafe { result::free_sync(ptr as u64) }.map_err(|e| cuda("cuMemFree", e))
    })
}

/// A registration or window: the real NCCL's, when it made one.
#[derive(Debug)]
struct Registered {
    real: Option<(RealComm, usize)>,
    window: bool,
}

static HANDLES: LazyLock<Mutex<HashMap<usize, Registered>>> = LazyLock::new(Default::default);
static NEXT: AtomicUsize = AtomicUsize::new(1);

fn keep(r: Registered) -> *mut c_void {
    // Handles are small non-null integers, never dereferenced.
    let h = NEXT.fetch_add(1, Ordering::Relaxed);
    lock(&HANDLES).insert(h, r);
    h as *mut c_void
}

fn take(handle: *mut c_void, window: bool) -> Result<Registered> {
    let mut handles = lock(&HANDLES);
    match handles.get(&(handle as usize)) {
        Some(r) if r.window == window => Ok(handles.remove(&(handle as usize)).expect("present")),
        _ => Err(Error::argument(format!(
            "{handle:?} is not a live registration"
        ))),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommRegister(
    comm: *const c_void,
    buff: *mut c_void,
    size: usize,
    handle: *mut *mut c_void,
) -> c_int {
    boundary("ncclCommRegister", |g| {
        nonnull(handle, "handle")?;
        let c = comm::get(comm)?;
        let mut real = None;
        if let (Some(rc), Some(f)) = (c.real(), g.real_if_loaded().and_then(|l| l.comm_register)) {
            let mut h: *mut c_void = std::ptr::null_mut();
            // SAFETY: the caller's buffer under NCCL's contract, on the real communicator.
            check_real("ncclCommRegister", unsafe { f(rc.0, buff, size, &mut h) })?;
            real = Some((rc, h as usize));
        }
        // SAFETY: checked non-null.
        unsafe {
            *handle = keep(Registered {
                real,
                window: false,
            })
        };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommDeregister(comm: *const c_void, handle: *mut c_void) -> c_int {
    boundary("ncclCommDeregister", |g| {
        comm::get(comm)?;
        let r = take(handle, false)?;
        if let (Some((rc, h)), Some(f)) =
            (r.real, g.real_if_loaded().and_then(|l| l.comm_deregister))
        {
            // SAFETY: the real registration made above, released once.
            check_real("ncclCommDeregister", unsafe { f(rc.0, h as *mut c_void) })?;
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommWindowRegister(
    comm: *mut c_void,
    buff: *mut c_void,
    size: usize,
    win: *mut *mut c_void,
    flags: c_int,
) -> c_int {
    boundary("ncclCommWindowRegister", |g| {
        nonnull(win, "win")?;
        let c = comm::get(comm)?;
        let mut real = None;
        if let (Some(rc), Some(f)) = (
            c.real(),
            g.real_if_loaded().and_then(|l| l.comm_window_register),
        ) {
            let mut h: *mut c_void = std::ptr::null_mut();
            // SAFETY: the caller's buffer under NCCL's contract, on the real communicator.
            check_real("ncclCommWindowRegister", unsafe {
                f(rc.0, buff, size, &mut h, flags)
            })?;
            real = Some((rc, h as usize));
        }
        // SAFETY: checked non-null.
        unsafe { *win = keep(Registered { real, window: true }) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommWindowDeregister(comm: *mut c_void, win: *mut c_void) -> c_int {
    boundary("ncclCommWindowDeregister", |g| {
        comm::get(comm)?;
        let r = take(win, true)?;
        if let (Some((rc, h)), Some(f)) = (
            r.real,
            g.real_if_loaded().and_then(|l| l.comm_window_deregister),
        ) {
            // SAFETY: the real window made above, released once.
            check_real("ncclCommWindowDeregister", unsafe {
                f(rc.0, h as *mut c_void)
            })?;
        }
        Ok(())
    })
}
