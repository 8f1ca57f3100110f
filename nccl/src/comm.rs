//! Communicators: what an `ncclComm_t` handle stands for, and the table of live ones.
//!
//! A handle given to C is the address of an `Arc<Comm>` kept in a table of live ones; every call looks
//! its handle up there, so a destroyed or made-up handle is an `ncclInvalidArgument`, never
//! a dangling dereference.
//!
//! Invariants: a communicator's backend is set once, when its initialisation completes
//! (at the end of the group that created it); a coll-served communicator may carry a real
//! NCCL communicator beside it (for calls coll forwards), made in the same group or, when
//! all of its ranks live in this process, at its first forwarded call ([`RealBeside`]); an
//! aborted communicator refuses every later call.

use crate::abi::Config;
use crate::clique::Clique;
use crate::error::{Error, Result};
use crate::id::CollId;
use crate::real::RawComm;
use coll_executor::sync::lock;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, LazyLock, Mutex, OnceLock};

/// A real NCCL communicator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RealComm(pub RawComm);

// SAFETY: an NCCL communicator is an opaque handle that NCCL allows to be used from any
// thread (calls on one communicator are serialised by the caller, as NCCL requires).
unsafe impl Send for RealComm {}
// SAFETY: as above; the handle itself is never written through.
unsafe impl Sync for RealComm {}

/// The real NCCL communicators beside one clique's communicators in this process, one per
/// member (by the clique's member index), for the calls coll forwards: made at init, or,
/// for a clique all of whose ranks live in this process, at the first forwarded call
/// (`COLL_NCCL_REAL_INIT`), by whoever forwards it ([`crate::init::make_later`]).
///
/// Invariant: once made (or failed), the outcome never changes; a failure is every later
/// forwarded call's error.
#[derive(Debug)]
pub struct RealBeside {
    made: OnceLock<std::result::Result<Vec<Option<RealComm>>, Error>>,
    /// How to make them when first needed; `None`: made at init (or never: no forwarding).
    later: Option<Later>,
}

/// What making a clique's real communicators later takes.
#[derive(Debug)]
pub struct Later {
    pub nranks: u32,
    /// Per member: its rank and the CUDA context current at its init.
    pub members: Vec<(u32, usize)>,
    /// The real NCCL's id the unique id carries, else a fresh one is made (all ranks are
    /// here, so none needs to be told it). Always the carried one where the ranks are spread
    /// over processes: every process must make its share from the same id.
    pub id: Option<crate::abi::UniqueId>,
}

impl RealBeside {
    /// Communicators made already (`None` for a member without one).
    pub fn made(reals: Vec<Option<RealComm>>) -> Arc<RealBeside> {
        let made = OnceLock::new();
        let _ = made.set(Ok(reals));
        Arc::new(RealBeside { made, later: None })
    }

    /// Communicators to make at the first forwarded call.
    pub fn later(later: Later) -> Arc<RealBeside> {
        Arc::new(RealBeside {
            made: OnceLock::new(),
            later: Some(later),
        })
    }

    /// Member `member`'s real communicator, if made.
    pub fn get(&self, member: usize) -> Option<RealComm> {
        match self.made.get() {
            Some(Ok(v)) => v.get(member).copied().flatten(),
            _ => None,
        }
    }

    /// Whether they are still to be made.
    pub fn pending(&self) -> bool {
        self.later.is_some() && self.made.get().is_none()
    }

    /// Member `member`'s real communicator, made now with `make` (for every member at
    /// once) if it is still to be made; `None` where there is none.
    pub fn get_or_make(
        &self,
        member: usize,
        make: impl FnOnce(&Later) -> Result<Vec<Option<RealComm>>>,
    ) -> Result<Option<RealComm>> {
        let outcome = match &self.later {
            Some(later) => self.made.get_or_init(|| make(later)),
            None => match self.made.get() {
                Some(o) => o,
                None => return Ok(None),
            },
        };
        match outcome {
            Ok(v) => Ok(v.get(member).copied().flatten()),
            Err(e) => Err(e.clone()),
        }
    }
}

/// Who serves a communicator.
#[derive(Debug)]
pub enum Backend {
    /// coll, as member `member` of `clique`; `real` for what coll forwards.
    Coll {
        clique: Arc<Clique>,
        member: usize,
        real: Arc<RealBeside>,
    },
    /// The real NCCL for everything (a communicator shape coll does not serve).
    Real(RealComm),
}

#[derive(Debug, Default)]
struct Status {
    async_error: Option<Error>,
    aborted: bool,
}

/// One rank's communicator.
#[derive(Debug)]
pub struct Comm {
    pub rank: u32,
    pub nranks: u32,
    /// Its CUDA device.
    pub device: i32,
    /// The CUDA context current when it was created (the device the caller had set).
    pub ctx: usize,
    pub config: Config,
    pub id: CollId,
    backend: OnceLock<std::result::Result<Backend, Error>>,
    status: Mutex<Status>,
}

impl Comm {
    pub fn new(
        rank: u32,
        nranks: u32,
        device: i32,
        ctx: usize,
        config: Config,
        id: CollId,
    ) -> Comm {
        Comm {
            rank,
            nranks,
            device,
            ctx,
            config,
            id,
            backend: OnceLock::new(),
            status: Mutex::new(Status::default()),
        }
    }

    /// Completes initialisation (once; later calls are ignored).
    pub fn set_backend(&self, b: std::result::Result<Backend, Error>) {
        let _ = self.backend.set(b);
    }

    /// Its backend, or why initialisation failed or is not complete.
    pub fn backend(&self) -> Result<&Backend> {
        match self.backend.get() {
            Some(Ok(b)) => Ok(b),
            Some(Err(e)) => Err(e.clone()),
            None => Err(Error::usage(format!(
                "rank {}: the communicator's initialisation has not completed (its group has \
                 not ended)",
                self.rank
            ))),
        }
    }

    /// The real NCCL communicator, where there is one (made: a lazy one before the first
    /// forwarded call is none).
    pub fn real(&self) -> Option<RealComm> {
        match self.backend.get() {
            Some(Ok(Backend::Coll { real, member, .. })) => real.get(*member),
            Some(Ok(Backend::Real(r))) => Some(*r),
            _ => None,
        }
    }

    /// Refuses a call on an aborted communicator.
    pub fn usable(&self) -> Result<()> {
        if lock(&self.status).aborted {
            return Err(Error::usage(format!(
                "rank {}: the communicator was aborted",
                self.rank
            )));
        }
        Ok(())
    }

    /// Refuses later calls, and stops the calls in flight of every executor of its clique
    /// (the clique's other communicators' calls too: they share the executors); returns
    /// once the abort is enqueued, whatever the kernels are doing.
    pub fn abort(&self) -> Result<()> {
        lock(&self.status).aborted = true;
        match self.backend.get() {
            Some(Ok(Backend::Coll { clique, .. })) => clique.abort(),
            _ => Ok(()),
        }
    }

    /// Records an error that surfaced after its call returned.
    pub fn set_async_error(&self, e: Error) {
        lock(&self.status).async_error.get_or_insert(e);
    }

    /// The first error that surfaced after its call returned: one recorded before, or one
    /// the clique's executors' devices recorded (a timeout, an abort, a peer's failure),
    /// found without waiting for any stream (and recorded from then on).
    pub fn async_error(&self) -> Option<Error> {
        if let Some(e) = lock(&self.status).async_error.clone() {
            return Some(e);
        }
        if let Some(Ok(Backend::Coll { clique, .. })) = self.backend.get()
            && let Err(e) = clique.poll_error()
        {
            self.set_async_error(e.clone());
            return Some(e);
        }
        None
    }
}

/// Live communicators by handle.
static LIVE: LazyLock<Mutex<HashMap<usize, Arc<Comm>>>> = LazyLock::new(Default::default);

/// Makes `comm` live and returns its handle.
pub fn register(comm: Arc<Comm>) -> *mut c_void {
    let handle = Arc::as_ptr(&comm) as usize;
    lock(&LIVE).insert(handle, comm);
    handle as *mut c_void
}

/// The communicator of a handle.
pub fn get(handle: *const c_void) -> Result<Arc<Comm>> {
    lock(&LIVE)
        .get(&(handle as usize))
        .cloned()
        .ok_or_else(|| Error::argument(format!("{handle:?} is not a live communicator")))
}

/// Removes a handle; its communicator.
pub fn unregister(handle: *const c_void) -> Result<Arc<Comm>> {
    lock(&LIVE)
        .remove(&(handle as usize))
        .ok_or_else(|| Error::argument(format!("{handle:?} is not a live communicator")))
}
