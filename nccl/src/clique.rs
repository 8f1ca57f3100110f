//! A clique: the ranks of one communicator that live in this process, and the calls they
//! make together.
//!
//! coll's executor runs one call for all of a process's ranks at once (each rank's messages
//! may go straight into a peer's buffer, so every buffer of the call must be known), while
//! NCCL's API takes one call per communicator: from one thread inside a group, or from one
//! thread per GPU. So each rank's call is *deposited* in a batch, the n-th call of every
//! member going to batch n; the deposit that completes a batch runs it, and every member's
//! caller returns once its batch has been enqueued (its work is then on its stream, as NCCL
//! promises when a call returns).
//!
//! A group's point-to-point calls on one member are one deposit (its send and receive,
//! [`Part`]); their batch runs the plan of the edge set the members' parts name
//! ([`crate::p2p`]), compiled once per set.
//!
//! Executors are cached per (plan, element type, root), at most `COLL_NCCL_MAX_EXECUTORS`
//! of them ([`crate::settings`]; [`Lru`]): loading one past the bound frees the least
//! recently used one. No call is using it then: a clique's batches run one at a time, so
//! the only other holders are an abort or an error poll of that moment (another thread,
//! e.g. a framework's watchdog), whose own drop of its hold then frees it. Freeing is safe
//! while its calls are still queued on the callers' streams: the executor's drop waits for
//! its GPUs before it frees their memory ([`CudaExecutor`]'s `Drop`), so the call that
//! evicts waits until they drain; the drop happens outside the cache's lock. An executor
//! that served a call captured in a CUDA graph is *pinned*: it stays, past the bound, for
//! as long as the clique lives, since the graph may replay it at any time. An executor
//! evicted (or replaced by a larger one) by a call that is being captured is not freed
//! then: its drop waits for every GPU, a context-wide synchronisation that would invalidate
//! the capture, so it waits in `deferred` until the next call made outside a capture.
//!
//! Across processes the executors of a communicator are loaded together (their loads
//! exchange memory handles over the mesh). Every process sees the same calls in the same
//! order (NCCL's contract) and the choice of what to evict depends on nothing else (not on
//! other threads' holds), so each evicts and reloads the same executors at the same calls
//! and the loads stay in step, as long as the processes capture the same calls into graphs.
//!
//! Invariants: batch `n` holds at most one call per member and runs once, when it holds
//! all of them; the calls of one batch agree on collective, count, type, operator and root
//! (else every member gets the same error); at most `max_executors` unpinned executors are
//! cached once a load returns (see above), each reloaded larger when a call needs more
//! than it was sized for; the calling thread's current CUDA context is the same after
//! every function here as before.

use crate::cache::Lru;
use crate::error::{Error, Result};
use crate::log::Log;
use crate::p2p::{self, Edges, Part};
use crate::rounds::{Rounds, Unmet};
use crate::select::{Selector, bytes_of};
use crate::settings::LogLevel;
use coll_compiler::plan::ValidPlan;
use coll_executor::cuda::{CudaExecutor, GpuSettings, LoadOptions};
use coll_executor::dtype::{DType, ReduceOp};
use coll_executor::net::mesh::Mesh;
use coll_executor::sync::lock;
use coll_lang::builtins::CollectiveKind;
use cudarc::driver::{result, sys};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One local rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    pub rank: u32,
    /// Its CUDA device ordinal.
    pub device: i32,
}

/// One rank's call, as the executor takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call {
    pub kind: CollectiveKind,
    /// Device addresses of NCCL's sendbuff and recvbuff.
    pub send: u64,
    pub recv: u64,
    pub count: u64,
    /// The element type the executor runs (a same-size stand-in for collectives that only
    /// move data).
    pub dtype: DType,
    pub op: ReduceOp,
    pub root: u32,
    /// The caller's `cudaStream_t` (a `CUstream`), as an address.
    pub stream: usize,
    /// A point-to-point call's part (kind `SendRecv`): its send and receive of the group;
    /// `send` and `recv` then hold its one buffer where it has only one of them.
    pub p2p: Option<Part>,
}

impl Call {
    fn agrees(&self, o: &Call) -> bool {
        self.kind == o.kind
            && self.count == o.count
            && self.dtype == o.dtype
            && self.op == o.op
            && self.root == o.root
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ExecKey {
    label: String,
    dtype: DType,
    root: u32,
}

struct Loaded {
    exec: CudaExecutor,
    max_count: u64,
}

/// A cached executor: shared by the cache and the threads using it.
struct Cached {
    loaded: Mutex<Loaded>,
    /// How logs name its plan.
    label: String,
    /// It served a call captured in a CUDA graph: never freed while the clique lives.
    /// Outside the executor's lock, so the cache reads it without waiting.
    pinned: AtomicBool,
}

type Shared = Arc<Cached>;

/// The local ranks of one communicator.
pub struct Clique {
    pub nranks: u32,
    pub members: Vec<Member>,
    /// Distinct devices, in order of first use: the executor's GPUs.
    ordinals: Vec<usize>,
    selector: Selector,
    gpu: GpuSettings,
    log: Arc<Log>,
    /// The processes of a communicator spread over several.
    mesh: Option<Arc<Mesh>>,
    execs: Mutex<Lru<ExecKey, Shared>>,
    /// Pinned executors a larger one replaced: kept for the graphs that replay them.
    retired: Mutex<Vec<Shared>>,
    /// Unpinned executors let go of during a captured call, freed at the next call that is
    /// not captured (module docs).
    deferred: Mutex<Vec<Shared>>,
    /// Point-to-point plans per edge set, as many as executors (host memory, recompiled
    /// in milliseconds when needed again).
    p2p_plans: Mutex<Lru<Edges, Arc<ValidPlan>>>,
    /// The members' `ncclCommSplit` rounds.
    pub splits: crate::split::Rendezvous,
    /// The members' calls, a batch per round.
    batches: Rounds<Call, Result<()>>,
    /// How long a member waits for the others' calls.
    timeout: Duration,
}

impl std::fmt::Debug for Clique {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clique")
            .field("nranks", &self.nranks)
            .field("members", &self.members)
            .finish_non_exhaustive()
    }
}

/// The GPU index each member's rank must have: the executor spreads ranks over its GPUs
/// in contiguous blocks ([`coll_executor::cuda::gpu_of`]).
fn spread_matches(members: &[Member], ordinals: &[usize], nranks: u32) -> bool {
    members.iter().all(|m| {
        let want = coll_executor::cuda::gpu_of(m.rank, nranks, ordinals.len() as u32) as usize;
        ordinals.get(want).is_some_and(|&o| o as i32 == m.device)
    })
}

impl Clique {
    /// A clique of `members`, this process's ranks of a communicator of `nranks` (the
    /// processes of one spread over several linked by `mesh`), keeping at most
    /// `max_executors` executors.
    pub fn new(
        nranks: u32,
        mut members: Vec<Member>,
        selector: Selector,
        gpu: GpuSettings,
        log: Arc<Log>,
        mesh: Option<Arc<Mesh>>,
        max_executors: usize,
    ) -> Result<Clique> {
        members.sort_by_key(|m| m.rank);
        let mut ordinals: Vec<usize> = Vec::new();
        for m in &members {
            let d = usize::try_from(m.device)
                .map_err(|_| Error::argument(format!("rank {}: device {}", m.rank, m.device)))?;
            if !ordinals.contains(&d) {
                ordinals.push(d);
            }
        }
        // Spread over processes, the executor places the ranks (one GPU per process).
        if mesh.is_none() && !spread_matches(&members, &ordinals, nranks) {
            return Err(Error::usage(format!(
                "ranks on devices {:?}: coll runs ranks that share a GPU only in contiguous, \
                 equal blocks",
                members.iter().map(|m| m.device).collect::<Vec<_>>()
            )));
        }
        let timeout = gpu.timeout;
        Ok(Clique {
            nranks,
            batches: Rounds::new(members.len()),
            splits: crate::split::Rendezvous::new(members.len()),
            members,
            ordinals,
            selector,
            gpu,
            log,
            mesh,
            execs: Mutex::new(Lru::new(max_executors)),
            retired: Mutex::new(Vec::new()),
            deferred: Mutex::new(Vec::new()),
            p2p_plans: Mutex::new(Lru::new(max_executors)),
            timeout,
        })
    }

    /// Whether some of the communicator's ranks live in other processes.
    pub fn spread(&self) -> bool {
        (self.members.len() as u32) < self.nranks
    }

    /// The processes of a communicator spread over several (`None` when all live here).
    pub fn mesh(&self) -> Option<&Arc<Mesh>> {
        self.mesh.as_ref()
    }

    /// How many executors the cache holds now (pinned ones a larger one replaced not
    /// counted).
    pub fn cached_executors(&self) -> usize {
        lock(&self.execs).len()
    }

    pub fn member_of(&self, rank: u32) -> Option<usize> {
        self.members.iter().position(|m| m.rank == rank)
    }

    /// Whether coll has a plan for `kind` at this size (else the caller forwards it).
    pub fn serves(&self, kind: CollectiveKind, count: u64, esize: u64) -> Result<()> {
        let bytes = bytes_of(kind, count, esize, self.nranks);
        self.selector
            .choose(kind, bytes)
            .map(|_| ())
            .map_err(|e| Error::usage(e.to_string()))
    }

    /// Deposits member `m`'s next call; returns its batch, to [`wait`](Self::wait) for.
    /// The deposit that completes the batch runs it.
    pub fn deposit(&self, m: usize, call: Call) -> u64 {
        self.batches.deposit(m, call, |calls| self.run(&calls))
    }

    /// Waits until batch `seq` has run; its outcome.
    pub fn wait(&self, seq: u64) -> Result<()> {
        match self.batches.wait(seq, self.timeout) {
            Ok(outcome) => outcome,
            Err(Unmet::Gone) => Err(Error::internal(format!("batch {seq} is gone"))),
            Err(Unmet::Aborted) => Err(Error::usage(format!(
                "call {seq}: the communicator was aborted (ncclCommAbort) while this rank \
                 waited for the others' calls"
            ))),
            Err(Unmet::Missing(missing)) => {
                let missing: Vec<u32> = missing.iter().map(|&i| self.members[i].rank).collect();
                Err(Error::usage(format!(
                    "call {seq}: ranks {missing:?} of this process made no matching call within \
                     {:?}; a thread driving several GPUs must group their calls \
                     (ncclGroupStart/End)",
                    self.timeout
                )))
            }
        }
    }

    /// Runs one complete batch (one call per member, in member order).
    fn run(&self, calls: &[Call]) -> Result<()> {
        let first = calls[0];
        if let Some(other) = calls.iter().find(|c| !c.agrees(&first)) {
            return Err(Error::argument(format!(
                "the ranks of one call disagree: {first:?} and {other:?}"
            )));
        }
        if first.kind == CollectiveKind::SendRecv {
            return self.run_p2p(calls);
        }
        let esize = first.dtype.size() as u64;
        let bytes = bytes_of(first.kind, first.count, esize, self.nranks);
        let choice = self
            .selector
            .choose(first.kind, bytes)
            .map_err(|e| Error::usage(e.to_string()))?;
        // Formatted only where it can be written: this runs on every call.
        if self.log.enabled(LogLevel::Info) {
            self.log.once(
                LogLevel::Info,
                &format!("choice {} {}", first.kind.name(), choice.why),
                &choice.why,
            );
        }
        let key = ExecKey {
            label: choice.label.clone(),
            dtype: first.dtype,
            root: first.root,
        };
        let captured = self.captured(calls)?;
        let loaded = self.executor(&key, &choice.plan, first.count, captured)?;
        self.enqueue(calls, &key.label, &loaded, captured)
    }

    /// Runs a batch of point-to-point calls with the plan of their edge set.
    fn run_p2p(&self, calls: &[Call]) -> Result<()> {
        let first = calls[0];
        let parts: Vec<(u32, Part)> = calls
            .iter()
            .zip(&self.members)
            .map(|(c, m)| (m.rank, c.p2p.unwrap_or_default()))
            .collect();
        let whole = !self.spread();
        let edges = p2p::edges_of(self.nranks, &parts, whole).map_err(Error::argument)?;
        let plan = self.p2p_plan(&edges)?;
        let key = ExecKey {
            label: p2p::label(&edges),
            dtype: first.dtype,
            root: 0,
        };
        let captured = self.captured(calls)?;
        let loaded = self.executor(&key, &plan, first.count, captured)?;
        self.enqueue(calls, &key.label, &loaded, captured)
    }

    /// The plan of point-to-point `edges` on this communicator, compiled once per set.
    pub fn p2p_plan(&self, edges: &[(u32, u32)]) -> Result<Arc<ValidPlan>> {
        if let Some(p) = lock(&self.p2p_plans).get(edges) {
            return Ok(Arc::clone(p));
        }
        let plan = p2p::plan(self.selector.topology(), edges).map_err(|e| {
            Error::usage(format!(
                "no plan for point-to-point calls {}: {e}",
                p2p::label(edges)
            ))
        })?;
        let plan = Arc::new(plan);
        // Whatever goes is freed when its last user lets go of it.
        let out = lock(&self.p2p_plans).insert(edges.to_vec(), Arc::clone(&plan), |_| true);
        drop(out);
        Ok(plan)
    }

    /// Enqueues one batch on its callers' streams with the loaded executor; `captured`: some
    /// stream of it is capturing ([`Self::captured`]).
    fn enqueue(&self, calls: &[Call], label: &str, cached: &Cached, captured: bool) -> Result<()> {
        let first = calls[0];
        let loaded = lock(&cached.loaded);
        let mut bufs = vec![(0u64, 0u64); self.nranks as usize];
        for (c, m) in calls.iter().zip(&self.members) {
            bufs[m.rank as usize] = (c.send, c.recv);
        }
        // One stream per GPU: the first member's there; others on that GPU join it.
        let mut streams: Vec<sys::CUstream> = Vec::with_capacity(self.ordinals.len());
        let mut joined: Vec<(sys::CUstream, sys::CUstream)> = Vec::new();
        for &o in &self.ordinals {
            let on: Vec<sys::CUstream> = calls
                .iter()
                .zip(&self.members)
                .filter(|(_, m)| m.device as usize == o)
                .map(|(c, _)| c.stream as sys::CUstream)
                .collect();
            let Some(&main) = on.first() else {
                return Err(Error::internal(format!("no member on GPU {o}")));
            };
            streams.push(main);
            for &s in &on[1..] {
                if s != main {
                    joined.push((s, main));
                }
            }
        }
        let _ctx = CurrentContext::save()?;
        if captured && !cached.pinned.swap(true, Ordering::Relaxed) {
            self.log.line(
                LogLevel::Info,
                &format!("{label}: captured in a CUDA graph, kept while the communicator lives"),
            );
        }
        for &(s, main) in &joined {
            // SAFETY: both are callers' live streams of one member GPU (the NCCL contract).
            unsafe { join(s, main) }?;
        }
        // SAFETY: each stream is its member's caller's live stream on the member's GPU (the
        // NCCL contract of the call), one per executor GPU in order; each buffer pair is
        // that member's sendbuff/recvbuff, device memory of its GPU sized as NCCL's call
        // needs for `count`, which the caller keeps alive until the call has run on its
        // stream (the NCCL contract).
        let info = unsafe {
            loaded
                .exec
                .enqueue_raw(&streams, &bufs, first.count, first.op)
        }?;
        for &(s, main) in &joined {
            // SAFETY: as above.
            unsafe { join(main, s) }?;
        }
        if self.log.enabled(LogLevel::Trace) {
            self.log.line(
                LogLevel::Trace,
                &format!(
                    "{} count {} {} by {}: {:?}",
                    first.kind.name(),
                    first.count,
                    first.dtype.name(),
                    label,
                    info
                ),
            );
        }
        Ok(())
    }

    /// Aborts every executor of the clique: the waits of their calls in flight give up at
    /// once, and they refuse later calls ([`CudaExecutor::abort`]).
    pub fn abort(&self) -> Result<()> {
        // Members waiting for the others' calls (made from several threads, no group) give
        // up now.
        self.batches.abort();
        self.splits.abort();
        let execs = self.all_executors();
        // A hold that outlived its eviction frees the executor in the loop below, whose
        // drop binds its GPUs' contexts to this thread: restored after the loop (only
        // with executors, which mean a CUDA driver).
        let _ctx = (!execs.is_empty()).then(CurrentContext::save).transpose()?;
        let mut first = Ok(());
        for l in execs {
            if let Err(e) = lock(&l.loaded).exec.abort()
                && first.is_ok()
            {
                first = Err(e.into());
            }
        }
        first
    }

    /// The first error an executor's device recorded, without waiting for any stream
    /// ([`CudaExecutor::poll_error`]).
    pub fn poll_error(&self) -> Result<()> {
        let execs = self.all_executors();
        // As in `abort`: this thread may free an evicted executor.
        let _ctx = (!execs.is_empty()).then(CurrentContext::save).transpose()?;
        for l in execs {
            lock(&l.loaded).exec.poll_error()?;
        }
        Ok(())
    }

    /// Every executor: the cache's and the pinned ones it no longer holds.
    fn all_executors(&self) -> Vec<Shared> {
        let mut all: Vec<Shared> = lock(&self.execs).values().cloned().collect();
        all.extend(lock(&self.retired).iter().cloned());
        all.extend(lock(&self.deferred).iter().cloned());
        all
    }

    /// Whether any of a batch's streams is capturing into a CUDA graph.
    fn captured(&self, calls: &[Call]) -> Result<bool> {
        let _ctx = CurrentContext::save()?;
        for c in calls {
            // SAFETY: each call's stream is its caller's live stream (the NCCL contract).
            if unsafe { capturing(c.stream as sys::CUstream) }? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The executor for `key`, loaded (or reloaded larger) for at least `count`; a load
    /// past the bound frees the least recently used executor no one is using, unless the
    /// call is `captured` (module docs).
    fn executor(
        &self,
        key: &ExecKey,
        plan: &ValidPlan,
        count: u64,
        captured: bool,
    ) -> Result<Shared> {
        if !captured {
            let deferred = std::mem::take(&mut *lock(&self.deferred));
            if !deferred.is_empty() {
                // Their drops bind their GPUs' contexts: the caller's is restored after.
                let _ctx = CurrentContext::save()?;
                drop(deferred);
            }
        }
        if let Some(l) = lock(&self.execs).get(key)
            && lock(&l.loaded).max_count >= count
        {
            return Ok(Arc::clone(l));
        }
        // Sized for the next power of two (at least 1 Mi elements), so growing calls reload
        // a logarithmic number of times.
        let max_count = count.max(1 << 20).next_power_of_two();
        let options = LoadOptions {
            root: key.root,
            settings: self.gpu.clone(),
            group: self.mesh.clone(),
            ..LoadOptions::new(key.dtype, max_count)
        };
        let _ctx = CurrentContext::save()?;
        let exec = CudaExecutor::load(plan.clone(), &self.ordinals, &options)?;
        self.log.line(
            LogLevel::Info,
            &format!(
                "loaded {} for {} x {} on GPUs {:?} ({:?})",
                key.label,
                max_count,
                key.dtype.name(),
                self.ordinals,
                exec.setup
            ),
        );
        let cached = Arc::new(Cached {
            loaded: Mutex::new(Loaded { exec, max_count }),
            label: key.label.clone(),
            pinned: AtomicBool::new(false),
        });
        let (out, bound, held) = {
            let mut execs = lock(&self.execs);
            let out = execs.insert(key.clone(), Arc::clone(&cached), |c| {
                !c.pinned.load(Ordering::Relaxed)
            });
            (out, execs.bound(), execs.len())
        };
        // Dropped here, outside the cache's lock: each drop waits for its GPUs (or, where
        // an abort or error poll holds it at this moment, that thread's drop does).
        for old in out {
            if old.pinned.load(Ordering::Relaxed) {
                lock(&self.retired).push(old);
                continue;
            }
            if captured {
                self.log.line(
                    LogLevel::Info,
                    &format!(
                        "{}: let go of during a captured call, freed after it",
                        old.label
                    ),
                );
                lock(&self.deferred).push(old);
                continue;
            }
            self.log.line(
                LogLevel::Info,
                &format!(
                    "freed {}: {held} executors cached, COLL_NCCL_MAX_EXECUTORS={bound}",
                    old.label
                ),
            );
            drop(old);
        }
        Ok(cached)
    }
}

/// Whether `stream` is capturing into a CUDA graph.
///
/// # Safety
/// `stream` is a live stream.
pub(crate) unsafe fn capturing(stream: sys::CUstream) -> Result<bool> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: a live stream (the contract); writes one status.
    unsafe { sys::cuStreamIsCapturing(stream, &mut status) }
        .result()
        .map_err(|e| {
            Error::new(
                crate::abi::NcclResult::UnhandledCudaError,
                format!("cuStreamIsCapturing: {e:?}"),
            )
        })?;
    Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
}

/// Makes stream `after` wait for the work enqueued so far on stream `before`.
///
/// # Safety
/// Both are live streams of the current context's device.
pub unsafe fn join(before: sys::CUstream, after: sys::CUstream) -> Result<()> {
    let event =
        result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING).map_err(|e| {
            Error::new(
                crate::abi::NcclResult::UnhandledCudaError,
                format!("cuEventCreate: {e:?}"),
            )
        })?;
    // SAFETY: `event` was just created; both streams are live (the contract).
    let r = unsafe {
        result::event::record(event, before).and_then(|()| {
            result::stream::wait_event(after, event, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)
        })
    };
    // SAFETY: the event is ours; destroying it after the wait was enqueued is allowed (the
    // driver releases it once the wait no longer needs it).
    let _ = unsafe { result::event::destroy(event) };
    r.map_err(|e| {
        Error::new(
            crate::abi::NcclResult::UnhandledCudaError,
            format!("stream join: {e:?}"),
        )
    })
}

/// The calling thread's current CUDA context, restored on drop: the executor binds its
/// GPUs' primary contexts to the thread, and the caller's (the CUDA runtime's current
/// device) must survive that.
#[derive(Debug)]
pub struct CurrentContext(Option<sys::CUcontext>);

impl CurrentContext {
    pub fn save() -> Result<CurrentContext> {
        result::ctx::get_current().map(CurrentContext).map_err(|e| {
            Error::new(
                crate::abi::NcclResult::UnhandledCudaError,
                format!("cuCtxGetCurrent: {e:?}"),
            )
        })
    }
}

impl Drop for CurrentContext {
    fn drop(&mut self) {
        if let Some(ctx) = self.0 {
            // SAFETY: the context was current on this thread when saved, and primary
            // contexts (which the runtime and coll use) stay alive while the process runs.
            let _ = unsafe { result::ctx::set_current(ctx) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::Settings;
    use coll_compiler::topology::Topology;

    fn clique(n: u32) -> Clique {
        let settings = Settings::from_lookup(|_| None).expect("defaults");
        let topo = Topology::parse(&format!("nvswitch:{n}")).expect("preset");
        let members = (0..n)
            .map(|rank| Member {
                rank,
                device: rank as i32,
            })
            .collect();
        Clique::new(
            n,
            members,
            Selector::new(topo, &settings, None).expect("selector"),
            GpuSettings::default(),
            Arc::new(Log::new(LogLevel::Warn)),
            None,
            settings.max_executors,
        )
        .expect("a clique")
    }

    /// A member waiting for the others' calls (no group, one thread per GPU) is woken by
    /// an abort instead of waiting out the timeout.
    #[test]
    fn abort_wakes_a_member_waiting_for_the_others() {
        let c = Arc::new(clique(2));
        let call = Call {
            kind: CollectiveKind::AllReduce,
            send: 0x1000,
            recv: 0x2000,
            count: 4,
            dtype: DType::F32,
            op: ReduceOp::Sum,
            root: 0,
            stream: 0,
            p2p: None,
        };
        let seq = c.deposit(0, call);
        let waiter = {
            let c = Arc::clone(&c);
            std::thread::spawn(move || {
                let t = std::time::Instant::now();
                (c.wait(seq), t.elapsed())
            })
        };
        std::thread::sleep(Duration::from_millis(100));
        c.abort().expect("no executor to abort");
        let (r, took) = waiter.join().expect("the waiter");
        let e = r.expect_err("aborted").to_string();
        assert!(e.contains("call 0: the communicator was aborted"), "{e}");
        assert!(took < Duration::from_secs(5), "woke after {took:?}");
    }

    #[test]
    fn point_to_point_plans_are_compiled_once_per_edge_set() {
        let c = clique(4);
        let ring: Edges = (0..4).map(|r| (r, (r + 1) % 4)).collect();
        let a = c.p2p_plan(&ring).expect("a plan");
        let b = c.p2p_plan(&ring).expect("a plan");
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.collective.0, CollectiveKind::Custom);
        assert_eq!(a.ranks, 4);
        let other = c.p2p_plan(&[(2, 3)]).expect("a plan");
        assert!(!Arc::ptr_eq(&a, &other));
        // A batch's parts name the same set as the group did.
        let parts: Vec<(u32, Part)> = (0..4)
            .map(|r| {
                (
                    r,
                    Part {
                        send_to: Some((r + 1) % 4),
                        recv_from: Some((r + 3) % 4),
                    },
                )
            })
            .collect();
        assert_eq!(p2p::edges_of(4, &parts, true), Ok(ring));
    }
}
