//! The exported C functions: NCCL's API (`nccl.h` of NCCL 2.28), each a thin wrapper that
//! checks its pointers, runs the library's Rust under one boundary function and returns an
//! `ncclResult_t`.
//!
//! Invariants: no panic crosses into C (the boundary turns one into `ncclInternalError`);
//! every failure is logged at `WARN` and its text kept for `ncclGetLastError`; pointers from
//! C are checked for null before use and handles are looked up ([`crate::comm::get`]), so a
//! bad handle is an error, not undefined behaviour; the caller's current CUDA context is the
//! same on return as on entry.
#![allow(non_snake_case, clippy::missing_safety_doc)]

mod calls;
mod memory;
mod queries;

pub use calls::*;
pub use memory::*;
pub use queries::*;

use crate::abi::{Config, DataType, NcclResult, RawConfig, RedOp, UniqueId, VERSION_CODE};
use crate::clique::CurrentContext;
use crate::comm::{self, Comm};
use crate::error::{Error, Result};
use crate::global::{Global, global};
use crate::group::{self, PendingInit};
use crate::id::CollId;
use crate::route::{self, Spec, check_real};
use crate::settings::LogLevel;
use crate::split;
use coll_lang::builtins::CollectiveKind;
use cudarc::driver::{result, sys};
use std::cell::RefCell;
use std::ffi::{CString, c_char, c_int, c_void};
use std::net::{IpAddr, ToSocketAddrs};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

thread_local! {
    /// The text of this thread's last error, for `ncclGetLastError`.
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last(message: &str) {
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = text);
}

/// Runs `f` as the body of API function `what`: errors logged and kept, panics caught.
fn boundary(what: &str, f: impl FnOnce(&'static Global) -> Result<()>) -> c_int {
    let r = catch_unwind(AssertUnwindSafe(|| {
        let g = global()?;
        f(g).map_err(|e| (Some(g), e))
    }));
    let (g, e) = match r {
        Ok(Ok(())) => return NcclResult::Success as c_int,
        Ok(Err((g, e))) => (g, e),
        Err(_) => (
            None,
            Error::internal(format!("{what}: a bug in coll's NCCL library (panic)")),
        ),
    };
    let line = format!("{what}: {}", e.message);
    set_last(&line);
    match g.or_else(|| global().ok()) {
        Some(g) => g.log.line(LogLevel::Warn, &line),
        None => eprintln!("coll NCCL WARN {line}"),
    }
    e.code as c_int
}

impl From<Error> for (Option<&'static Global>, Error) {
    fn from(e: Error) -> Self {
        (None, e)
    }
}

fn nonnull<T>(p: *const T, what: &str) -> Result<()> {
    if p.is_null() {
        Err(Error::argument(format!("{what} is NULL")))
    } else {
        Ok(())
    }
}

fn cuda(what: &str, e: cudarc::driver::DriverError) -> Error {
    Error::new(NcclResult::UnhandledCudaError, format!("{what}: {e:?}"))
}

/// The CUDA context current on this thread and its device, making device 0's primary
/// context current when the caller has none yet (as the CUDA runtime would).
fn current_device() -> Result<(usize, i32)> {
    result::init().map_err(|e| cuda("cuInit", e))?;
    let ctx = match result::ctx::get_current().map_err(|e| cuda("cuCtxGetCurrent", e))? {
        Some(c) => c,
        None => {
            let dev = result::device::get(0).map_err(|e| cuda("cuDeviceGet", e))?;
            // SAFETY: retaining device 0's primary context, which the process then keeps.
            let c = unsafe { result::primary_ctx::retain(dev) }.map_err(|e| cuda("retain", e))?;
            // SAFETY: a live primary context.
            unsafe { result::ctx::set_current(c) }.map_err(|e| cuda("cuCtxSetCurrent", e))?;
            c
        }
    };
    let mut dev: sys::CUdevice = 0;
    // SAFETY: writes one device id for the current context.
    unsafe { sys::cuCtxGetDevice(&mut dev) }
        .result()
        .map_err(|e| cuda("cuCtxGetDevice", e))?;
    Ok((ctx as usize, dev))
}

/// The address other processes reach this one at (see `COLL_NET_HOST` in [`crate::settings`]).
fn this_host(g: &Global) -> IpAddr {
    if let Some(h) = g.settings.net_host {
        return h;
    }
    let toward = |addr: &str| {
        addr.to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .and_then(|a| coll_executor::net::local_ip_toward(a).ok())
    };
    g.settings
        .master_addr
        .as_deref()
        .and_then(|m| toward(&format!("{m}:29500")))
        .or_else(|| toward("192.0.2.1:9"))
        .unwrap_or(IpAddr::from([127, 0, 0, 1]))
}

/// A fresh id, embedding the real NCCL's when it is in use; `listen`: with a bootstrap
/// listener for communicators spread over processes.
fn new_id(g: &Global, listen: bool) -> Result<CollId> {
    let real_id = if g.settings.forward {
        match g.real() {
            Ok(real) => real.unique_id()?,
            Err(e) => {
                g.log.once(
                    LogLevel::Info,
                    "no real for id",
                    &format!("no real NCCL: {e}"),
                );
                None
            }
        }
    } else {
        None
    };
    let mut id = CollId::new(real_id, None).map_err(|e| Error::system(e.to_string()))?;
    if listen {
        id.addr = Some(crate::bootstrap::listen(id.secret, this_host(g))?);
    }
    Ok(id)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGetVersion(version: *mut c_int) -> c_int {
    boundary("ncclGetVersion", |_| {
        nonnull(version, "version")?;
        // SAFETY: checked non-null; the caller gives a writable int.
        unsafe { *version = VERSION_CODE };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclGetErrorString(result: c_int) -> *const c_char {
    NcclResult::text(result).as_ptr()
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclGetLastError(_comm: *mut c_void) -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGetUniqueId(unique_id: *mut UniqueId) -> c_int {
    boundary("ncclGetUniqueId", |g| {
        nonnull(unique_id, "uniqueId")?;
        let id = new_id(g, true)?.encode();
        // SAFETY: checked non-null; the caller gives room for one id.
        unsafe { unique_id.write(id) };
        Ok(())
    })
}

/// Creates rank `rank`'s communicator of `nranks` on the current device; completed at the
/// end of the group (now, outside one).
fn init_rank(
    g: &'static Global,
    out: *mut *mut c_void,
    nranks: c_int,
    id: &UniqueId,
    rank: c_int,
    config: Config,
) -> Result<()> {
    nonnull(out, "comm")?;
    if nranks < 1 || rank < 0 || rank >= nranks {
        return Err(Error::argument(format!("rank {rank} of {nranks} ranks")));
    }
    let id = CollId::decode(id).map_err(|e| Error::argument(e.to_string()))?;
    let (ctx, device) = current_device()?;
    let comm = Arc::new(Comm::new(
        rank as u32,
        nranks as u32,
        device,
        ctx,
        config,
        id,
    ));
    let handle = comm::register(Arc::clone(&comm));
    // SAFETY: checked non-null; the caller gives room for one handle.
    unsafe { *out = handle };
    let grouped = group::in_group();
    if !grouped {
        group::start(g)?;
    }
    group::add_init(PendingInit { comm });
    if !grouped {
        group::end(g)?;
    }
    Ok(())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitRank(
    comm: *mut *mut c_void,
    nranks: c_int,
    comm_id: UniqueId,
    rank: c_int,
) -> c_int {
    boundary("ncclCommInitRank", |g| {
        init_rank(g, comm, nranks, &comm_id, rank, Config::default())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitRankConfig(
    comm: *mut *mut c_void,
    nranks: c_int,
    comm_id: UniqueId,
    rank: c_int,
    config: *mut RawConfig,
) -> c_int {
    boundary("ncclCommInitRankConfig", |g| {
        // SAFETY: NCCL's contract: null or an initialised config of its stated size.
        let config = unsafe { Config::read(config) }.map_err(|e| Error::argument(e.to_string()))?;
        init_rank(g, comm, nranks, &comm_id, rank, config)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitAll(
    comms: *mut *mut c_void,
    ndev: c_int,
    devlist: *const c_int,
) -> c_int {
    boundary("ncclCommInitAll", |g| {
        nonnull(comms, "comms")?;
        if ndev < 1 {
            return Err(Error::argument(format!("ndev {ndev}")));
        }
        result::init().map_err(|e| cuda("cuInit", e))?;
        let _restore = CurrentContext::save()?;
        let id = new_id(g, false)?;
        group::start(g)?;
        let mut outcome = Ok(());
        for i in 0..ndev {
            let dev = if devlist.is_null() {
                i
            } else {
                // SAFETY: a non-null devlist holds ndev ints (the API's contract).
                unsafe { *devlist.add(i as usize) }
            };
            let ctx = (|| {
                let d = result::device::get(dev).map_err(|e| cuda("cuDeviceGet", e))?;
                // SAFETY: retains device `dev`'s primary context for the communicator.
                unsafe { result::primary_ctx::retain(d) }.map_err(|e| cuda("retain", e))
            })();
            let ctx = match ctx {
                Ok(c) => c,
                Err(e) => {
                    outcome = Err(e);
                    break;
                }
            };
            let comm = Arc::new(Comm::new(
                i as u32,
                ndev as u32,
                dev,
                ctx as usize,
                Config::default(),
                id,
            ));
            let handle = comm::register(Arc::clone(&comm));
            // SAFETY: `comms` holds ndev handles (the API's contract).
            unsafe { *comms.add(i as usize) = handle };
            group::add_init(PendingInit { comm });
        }
        if let Err(e) = &outcome {
            group::fail(e.clone());
        }
        group::end(g)
    })
}

fn not_served(what: &str) -> Error {
    Error::usage(format!("{what} is not supported by coll's NCCL library"))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitRankScalable(
    _newcomm: *mut *mut c_void,
    _nranks: c_int,
    _myrank: c_int,
    _n_id: c_int,
    _comm_ids: *mut UniqueId,
    _config: *mut RawConfig,
) -> c_int {
    boundary("ncclCommInitRankScalable", |_| {
        Err(not_served("ncclCommInitRankScalable"))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommSplit(
    comm: *mut c_void,
    color: c_int,
    key: c_int,
    newcomm: *mut *mut c_void,
    config: *mut RawConfig,
) -> c_int {
    boundary("ncclCommSplit", |g| {
        nonnull(newcomm, "newcomm")?;
        let parent = comm::get(comm)?;
        parent.usable()?;
        // SAFETY: NCCL's contract: null or an initialised config of its stated size.
        let config = unsafe { Config::read(config) }.map_err(|e| Error::argument(e.to_string()))?;
        // SAFETY: checked non-null; NCCL's contract keeps it writable until the split
        // completes.
        let call = unsafe { split::SplitCall::new(parent, color, key, config, newcomm) };
        // Inside a group the child is formed at its end, with the other ranks' splits.
        if group::in_group() {
            group::add_split(call);
            return Ok(());
        }
        let _restore = CurrentContext::save()?;
        split::run(g, vec![call])
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommShrink(
    _comm: *mut c_void,
    _exclude: *mut c_int,
    _exclude_count: c_int,
    _newcomm: *mut *mut c_void,
    _config: *mut RawConfig,
    _flags: c_int,
) -> c_int {
    boundary("ncclCommShrink", |_| Err(not_served("ncclCommShrink")))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommFinalize(comm: *mut c_void) -> c_int {
    boundary("ncclCommFinalize", |g| {
        let c = comm::get(comm)?;
        if let Some(real) = c.real()
            && let Some(f) = g.real_if_loaded().and_then(|l| l.comm_finalize)
        {
            // SAFETY: the rank's live real communicator.
            check_real("ncclCommFinalize", unsafe { f(real.0) })?;
        }
        Ok(())
    })
}

/// Destroys or aborts a communicator (and its real one).
fn close(g: &Global, handle: *mut c_void, abort: bool) -> Result<()> {
    let c = comm::unregister(handle)?;
    g.log.line(LogLevel::Info, &route::summary());
    let _restore = CurrentContext::save()?;
    if abort {
        // Stops the kernels in flight first, so that freeing the clique below (which waits
        // for its GPUs) returns at once; a failed abort still frees, as NCCL's does.
        if let Err(e) = c.abort() {
            g.log
                .line(LogLevel::Warn, &format!("ncclCommAbort: {}", e.message));
        }
    }
    if let Some(real) = c.real()
        && let Some(lib) = g.real_if_loaded()
    {
        let (name, f) = if abort {
            ("ncclCommAbort", lib.comm_abort)
        } else {
            ("ncclCommDestroy", lib.comm_destroy)
        };
        if let Some(f) = f {
            // SAFETY: the rank's live real communicator, closed once (it left LIVE above).
            check_real(name, unsafe { f(real.0) })?;
        }
    }
    // The clique (and its executors) goes when its last communicator does.
    drop(c);
    Ok(())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommDestroy(comm: *mut c_void) -> c_int {
    boundary("ncclCommDestroy", |g| close(g, comm, false))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommAbort(comm: *mut c_void) -> c_int {
    boundary("ncclCommAbort", |g| {
        if comm.is_null() {
            return Ok(());
        }
        close(g, comm, true)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGroupStart() -> c_int {
    boundary("ncclGroupStart", group::start)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGroupEnd() -> c_int {
    boundary("ncclGroupEnd", group::end)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGroupSimulateEnd(_sim_info: *mut c_void) -> c_int {
    boundary("ncclGroupSimulateEnd", |_| {
        Err(not_served("ncclGroupSimulateEnd"))
    })
}

/// Runs (or, inside a group, queues) one call on `comm`.
fn submit(g: &'static Global, comm: *mut c_void, spec: Spec) -> Result<()> {
    let c = comm::get(comm)?;
    c.usable()?;
    if spec.root >= c.nranks
        && matches!(
            spec.kind,
            CollectiveKind::Broadcast | CollectiveKind::Reduce | CollectiveKind::SendRecv
        )
    {
        return Err(Error::argument(format!(
            "root or peer {} of a communicator of {} ranks",
            spec.root, c.nranks
        )));
    }
    // Nothing moves: NCCL returns at once, and so does coll (every rank's count is the same).
    if spec.count == 0 {
        return Ok(());
    }
    if group::in_group() {
        group::add_call(c, spec);
        return Ok(());
    }
    let _restore = CurrentContext::save()?;
    route::run(g, vec![(c, spec)])
}

/// The checked element type and operator of a call.
fn types(datatype: c_int, op: c_int) -> Result<(DataType, RedOp)> {
    let dt = DataType::from_raw(datatype)
        .ok_or_else(|| Error::argument(format!("datatype {datatype}")))?;
    let op = RedOp::from_raw(op).ok_or_else(|| Error::argument(format!("reduction op {op}")))?;
    Ok((dt, op))
}
