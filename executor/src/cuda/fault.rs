//! What went wrong on the device: after a call, each GPU's error record (written by the
//! first wait of the call that timed out, [`ErrorRec`]) is read back and turned into an
//! error naming the rank, block, op and `.coll` source line, or the copy-engine barrier.
//! While calls run, [`CudaExecutor::poll_error`] copies the records out on a stream of
//! coll's own and [`CudaExecutor::abort`] writes them, so neither waits for the calls.
//!
//! Invariants: a record with `failed == 0` means no wait of this GPU failed since the
//! executor was loaded; the first failure is kept (later ones do not overwrite it), so the
//! error names the wait that gave up first, not the ones that failed after it. The host
//! writes only the `failed` word, and only `ERR_ABORTED` ([`Aborter`]); once it has, every
//! wait of every kernel of the executor gives up, the first one records its place with
//! [`Fault::Aborted`], and the executor refuses every later call: an aborted executor is
//! not reusable.

use super::CudaExecutor;
use super::abi::{ERR_ABORTED, ErrorRec, Fault};
use super::device::{Gpu, HostMapped};
use crate::error::{AbortCause, ExecError};
use crate::sync::lock;
use cudarc::driver::{CudaContext, CudaStream, sys};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Byte offset in [`AbortGpu::pinned`] of the copy of the error record [`Aborter::poll`]
/// reads (the word at 0 holds `ERR_ABORTED`, the value an abort copies in).
const SNAPSHOT_AT: usize = 64;

/// One GPU's part of an [`Aborter`].
struct AbortGpu {
    ctx: Arc<CudaContext>,
    /// A non-blocking stream of coll's own, ordered after nothing the calls enqueue.
    stream: Arc<CudaStream>,
    /// The device address of the GPU's [`ErrorRec`].
    record: u64,
    /// Pinned memory: `ERR_ABORTED` at 0 (the source of the abort's copy, so the copy engine
    /// moves it with no kernel, which could wait behind the running ones), the record's
    /// snapshot at [`SNAPSHOT_AT`].
    pinned: HostMapped,
    /// The GPU's first plan rank, named when no wait recorded the abort.
    first_rank: u32,
}

/// What stops an executor's calls in flight: shared with the host proxy, which aborts when a
/// peer process fails, and with [`AbortHandle`]s. Invariants: `cause` is set once, before
/// any record is written; records are written only while `open`, which the executor clears
/// (under the same lock) before it frees them, so a handle or proxy that outlives the
/// executor writes nothing.
pub struct Aborter {
    gpus: Vec<AbortGpu>,
    cause: OnceLock<AbortCause>,
    open: Mutex<bool>,
    /// Serialises polls, which share each GPU's snapshot memory.
    polling: Mutex<()>,
}

impl std::fmt::Debug for Aborter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Aborter")
            .field("gpus", &self.gpus.len())
            .field("cause", &self.cause.get())
            .finish()
    }
}

fn driver(what: &str, r: sys::CUresult) -> Result<(), ExecError> {
    r.result().map_err(|e| super::device::gpu_err(what, e))
}

impl Aborter {
    /// For GPUs `gpus`, each with its error record at `records[i]` and its first plan rank.
    pub(super) fn new(gpus: &[(&Gpu, u64, u32)]) -> Result<Aborter, ExecError> {
        let mut out = Vec::with_capacity(gpus.len());
        for &(gpu, record, first_rank) in gpus {
            let pinned = HostMapped::new(gpu, SNAPSHOT_AT + std::mem::size_of::<ErrorRec>())?;
            pinned.store(0, u64::from(ERR_ABORTED));
            out.push(AbortGpu {
                ctx: Arc::clone(gpu.context()),
                stream: gpu.new_stream()?,
                record,
                pinned,
                first_rank,
            });
        }
        Ok(Aborter {
            gpus: out,
            cause: OnceLock::new(),
            open: Mutex::new(true),
            polling: Mutex::new(()),
        })
    }

    /// Why the executor was aborted, once it was.
    pub fn cause(&self) -> Option<&AbortCause> {
        self.cause.get()
    }

    /// Writes `ERR_ABORTED` into every GPU's error record (the first cause is kept; a second
    /// abort writes again, which changes nothing). Returns once the writes are enqueued, not
    /// run: they run on the copy engines beside the kernels, whose waits then give up.
    pub fn abort(&self, cause: AbortCause) -> Result<(), ExecError> {
        let _ = self.cause.set(cause);
        let open = lock(&self.open);
        if !*open {
            return Ok(());
        }
        let mut first = Ok(());
        for g in &self.gpus {
            let r = g
                .ctx
                .bind_to_thread()
                .map_err(|e| super::device::gpu_err("cannot bind the context", e))
                .and_then(|()| {
                    // SAFETY: the record is 4-aligned device memory of this context, alive
                    // while `open` is set (held): the executor clears it, then synchronises
                    // every GPU (this copy included), before freeing the record; the source is
                    // our pinned word and the stream ours, both alive as long as `self`.
                    driver("cuMemcpyAsync (abort)", unsafe {
                        sys::cuMemcpyAsync(g.record, g.pinned.dev(), 4, g.stream.cu_stream())
                    })
                });
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    /// Makes later aborts write nothing: the executor is about to free the records.
    pub(super) fn close(&self) {
        *lock(&self.open) = false;
    }

    /// Every GPU's error record as it is now, copied out on the aborter's own streams: waits
    /// for those copies only, never for the calls.
    fn snapshot(&self) -> Result<Vec<(ErrorRec, u32)>, ExecError> {
        let _one = lock(&self.polling);
        let mut recs = Vec::with_capacity(self.gpus.len());
        for g in &self.gpus {
            g.ctx
                .bind_to_thread()
                .map_err(|e| super::device::gpu_err("cannot bind the context", e))?;
            let bytes = std::mem::size_of::<ErrorRec>();
            // SAFETY: only the executor polls, so the record is alive (it is freed after the
            // executor is gone); the snapshot range lies inside the pinned allocation (sized
            // for it), which only this poll writes (`polling` is held); the stream is ours.
            driver("cuMemcpyAsync (poll)", unsafe {
                sys::cuMemcpyAsync(
                    g.pinned.dev() + SNAPSHOT_AT as u64,
                    g.record,
                    bytes,
                    g.stream.cu_stream(),
                )
            })?;
            g.stream
                .synchronize()
                .map_err(|e| super::device::gpu_err("stream synchronize (poll)", e))?;
            let words: [u64; 3] = std::array::from_fn(|i| g.pinned.load(SNAPSHOT_AT + 8 * i));
            recs.push((bytemuck::cast(words), g.first_rank));
        }
        Ok(recs)
    }
}

/// Aborts an executor from any thread, while its owner's thread enqueues and waits
/// ([`CudaExecutor::abort_handle`]); harmless once the executor is gone.
#[derive(Clone, Debug)]
pub struct AbortHandle(Arc<Aborter>);

impl AbortHandle {
    /// [`CudaExecutor::abort`].
    pub fn abort(&self) -> Result<(), ExecError> {
        self.0.abort(AbortCause::Caller)
    }

    /// Whether the executor was aborted (by a handle, its owner or a peer's failure).
    pub fn aborted(&self) -> bool {
        self.0.cause().is_some()
    }
}

// The snapshot is read as three aligned words, after the abort word.
const _: () = assert!(
    std::mem::size_of::<ErrorRec>() == 24 && SNAPSHOT_AT >= 8 && SNAPSHOT_AT.is_multiple_of(8)
);

impl CudaExecutor {
    /// Waits for coll's own streams, then [`check_error`](Self::check_error).
    pub fn finish(&self) -> Result<(), ExecError> {
        for gp in &self.gpus {
            gp.gpu.synchronize()?;
        }
        self.check_error()
    }

    /// Reports a rank that timed out in an earlier call, naming its op and source line, or
    /// that the executor was aborted. Call it once the streams the calls went to are
    /// synchronised ([`poll_error`](Self::poll_error) does not need that).
    pub fn check_error(&self) -> Result<(), ExecError> {
        for gp in &self.gpus {
            let mut rec = ErrorRec::default();
            gp.region(gp.error)?
                .read(&gp.gpu, std::slice::from_mut(&mut rec))?;
            let first = gp.local_ranks.first().copied().unwrap_or(0);
            if let Some(e) = self.fault_error(&rec, first) {
                return Err(e);
            }
        }
        self.refuse_aborted()
    }

    /// What [`check_error`](Self::check_error) would report, now, without waiting for any
    /// call: the error records are copied out on a stream of coll's own. A timeout or an
    /// abort shows here while the kernel that met it may still be running (the other waits
    /// of an aborted call give up within microseconds). `Ok` while nothing failed.
    pub fn poll_error(&self) -> Result<(), ExecError> {
        for (rec, first) in self.abort.snapshot()? {
            // A record whose `failed` is set before its `what` is being written: the next
            // poll sees it whole. An abort's record may have no `what` yet; the cause says.
            if (rec.failed == ERR_ABORTED || rec.what != 0)
                && let Some(e) = self.fault_error(&rec, first)
            {
                return Err(e);
            }
        }
        self.refuse_aborted()
    }

    /// Stops every call of this executor: every wait of every call in flight on any GPU, and
    /// of calls already enqueued behind them, gives up at once, and the calls' errors
    /// ([`check_error`](Self::check_error), [`poll_error`](Self::poll_error)) say
    /// [`ExecError::Aborted`]; the host proxy stops forwarding and tells the group's other
    /// processes. Returns once the abort is enqueued on streams of coll's own
    /// (microseconds), whatever the calls' streams are doing. The executor is not reusable:
    /// every later call is refused with the same error; drop it (which waits for its
    /// kernels, now quick to end). From another thread (the executor is not `Sync`: its
    /// calls are enqueued from one thread), use an [`abort_handle`](Self::abort_handle).
    pub fn abort(&self) -> Result<(), ExecError> {
        self.abort.abort(AbortCause::Caller)
    }

    /// A handle that aborts this executor from any thread ([`abort`](Self::abort)).
    pub fn abort_handle(&self) -> AbortHandle {
        AbortHandle(Arc::clone(&self.abort))
    }

    /// Whether [`abort`](Self::abort) was called, or a peer process failed.
    pub fn aborted(&self) -> bool {
        self.abort.cause().is_some()
    }

    /// `Err(Aborted)` once the executor was aborted: what a call gets instead of running.
    pub(super) fn refuse_aborted(&self) -> Result<(), ExecError> {
        match self.abort.cause() {
            None => Ok(()),
            Some(cause) => {
                let rank = self
                    .gpus
                    .first()
                    .and_then(|g| g.local_ranks.first().copied())
                    .unwrap_or(0);
                Err(ExecError::Aborted {
                    rank,
                    at: format!("rank {rank}"),
                    cause: cause.clone(),
                })
            }
        }
    }

    /// The error a GPU's record reports, if any; `first` is the GPU's first plan rank.
    fn fault_error(&self, rec: &ErrorRec, first: u32) -> Option<ExecError> {
        if rec.failed == 0 {
            return None;
        }
        let fault = Fault::from_code(rec.what);
        let at = |rank: u32| {
            if rec.block == super::abi::ERR_NO_BLOCK {
                format!("rank {rank} (a copy-engine call)")
            } else if rec.block == super::abi::ERR_ONESHOT {
                format!("rank {rank} (a one-shot call)")
            } else {
                coll_compiler::plan::location(&self.plan, rank, rec.block, Some(rec.op))
            }
        };
        if rec.failed == ERR_ABORTED {
            // Without a cause, the record was aborted by a process that is gone (or a
            // previous executor's memory): say so rather than guess.
            let cause = self.abort.cause().cloned().unwrap_or(AbortCause::Caller);
            let (rank, at) = if fault == Some(Fault::Aborted) {
                (rec.rank, at(rec.rank))
            } else {
                (first, format!("rank {first}"))
            };
            return Some(ExecError::Aborted { rank, at, cause });
        }
        Some(timeout_error(fault, rec.rank, at(rec.rank), self.timeout))
    }
}

/// The timeout a fault recorded at `at` (by plan rank `rank`) reports.
fn timeout_error(fault: Option<Fault>, rank: u32, at: String, waited: Duration) -> ExecError {
    let waiting = match fault {
        Some(Fault::Barrier) => {
            return ExecError::Timeout {
                at: format!("rank {rank} (a copy-engine call)"),
                waiting: "waiting for the other GPUs at the call's barrier".into(),
                waited,
            };
        }
        Some(Fault::Dep) => "waiting for a dependency",
        Some(Fault::Recv) => "waiting to receive",
        Some(Fault::Ready) => "waiting for the receiver to release its buffer (direct send)",
        Some(Fault::SendSlot | Fault::Aborted) | None => "waiting for room to send",
    };
    ExecError::Timeout {
        at,
        waiting: waiting.into(),
        waited,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_say_what_the_wait_was_for() {
        let t = Duration::from_secs(3);
        let e = timeout_error(Some(Fault::Recv), 1, "rank 1, block 0, op 2".into(), t);
        assert_eq!(
            e.to_string(),
            "rank 1, block 0, op 2 waited 3s without progress (waiting to receive); a peer \
             stopped answering or the schedule is stuck"
        );
        let e = timeout_error(Some(Fault::Barrier), 4, String::new(), t);
        assert!(
            e.to_string()
                .starts_with("rank 4 (a copy-engine call) waited 3s without progress"),
            "{e}"
        );
    }
}
