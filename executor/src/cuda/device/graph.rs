//! Streams ordered by events ([`Event`]) and CUDA graphs ([`capture`], [`Graph`]): how a
//! call's work beside the call's stream joins it, and how calls are recorded once and
//! replayed; and [`CaptureTolerant`], under which an executor loads while the application
//! captures.
//!
//! Invariants: an `Event` and a `Graph` belong to one context and are destroyed in it on
//! drop; a graph replays device addresses fixed at capture, so every buffer captured work
//! touches outlives the graph (the contract of [`capture`]).

use super::gpu::Gpu;
use super::gpu_err;
use crate::error::ExecError;
use cudarc::driver::{CudaContext, CudaStream, result, sys};
use std::sync::Arc;

/// A CUDA event for ordering two streams, of one GPU or of two (timing off); destroyed on
/// drop.
pub struct Event {
    ev: sys::CUevent,
    ctx: Arc<CudaContext>,
}

// SAFETY: a CUevent is a driver handle, valid from any thread of the process; a call's part
// for one GPU records and waits on its events from one thread at a time.
unsafe impl Send for Event {}
// SAFETY: as Send: `&Event` only records and waits, which the driver allows from any thread.
unsafe impl Sync for Event {}

impl Event {
    pub fn new(gpu: &Gpu) -> Result<Event, ExecError> {
        gpu.bind()?;
        let ev = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
            .map_err(|e| gpu_err("cuEventCreate", e))?;
        Ok(Event {
            ev,
            ctx: gpu.ctx.clone(),
        })
    }

    /// Makes `waiter` wait for what `stream` has enqueued so far.
    ///
    /// # Safety
    /// `stream` and `waiter` are live streams of this event's context.
    pub unsafe fn order(
        &self,
        stream: sys::CUstream,
        waiter: sys::CUstream,
    ) -> Result<(), ExecError> {
        // SAFETY: `stream` is a live stream of this event's context (contract).
        unsafe { self.record(stream) }?;
        // SAFETY: `record` made this event's context current; `waiter` is a live stream of it.
        unsafe { self.wait_current(waiter) }
    }

    /// Marks what `stream` has enqueued so far; a later [`Event::wait`] waits for it.
    ///
    /// # Safety
    /// `stream` is a live stream of this event's context.
    pub unsafe fn record(&self, stream: sys::CUstream) -> Result<(), ExecError> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| gpu_err("cannot bind the context", e))?;
        // SAFETY: a live event of the current context and a live stream of it (contract).
        unsafe { result::event::record(self.ev, stream) }.map_err(|e| gpu_err("cuEventRecord", e))
    }

    /// Makes `waiter`, a stream of `gpu` (this event's GPU or another), wait for the work
    /// the last [`Event::record`] marked.
    ///
    /// # Safety
    /// `waiter` is a live stream of `gpu`'s context.
    pub unsafe fn wait(&self, gpu: &Gpu, waiter: sys::CUstream) -> Result<(), ExecError> {
        gpu.bind()?;
        // SAFETY: `gpu`'s context is current and `waiter` a live stream of it (contract).
        unsafe { self.wait_current(waiter) }
    }

    /// [`Event::wait`] for a stream of the current context.
    ///
    /// # Safety
    /// `waiter` is a live stream of the current context.
    unsafe fn wait_current(&self, waiter: sys::CUstream) -> Result<(), ExecError> {
        // SAFETY: a live event (of any context: the driver orders across devices) and a live
        // stream of the current context (contract).
        unsafe {
            result::stream::wait_event(
                waiter,
                self.ev,
                sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )
        }
        .map_err(|e| gpu_err("cuStreamWaitEvent", e))
    }
}

/// Whether `stream` is capturing work into a CUDA graph.
///
/// # Safety
/// `stream` is a live stream.
pub unsafe fn capturing(stream: sys::CUstream) -> Result<bool, ExecError> {
    // SAFETY: a live stream (contract).
    let status = unsafe { result::stream::is_capturing(stream) }
        .map_err(|e| gpu_err("cuStreamIsCapturing", e))?;
    Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Event({:p})", self.ev)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: the event was created in this context and is not used after this.
            let _ = unsafe { result::event::destroy(self.ev) };
        }
    }
}

/// While alive, the calling thread's CUDA calls that an open stream capture would refuse
/// (`cuMemAlloc`, module loads, IPC mappings: none of them stream work) are allowed, so an
/// executor can load inside an application's capture, as the first call of a new size in a
/// captured region needs. Restores the thread's previous mode on drop.
///
/// Sound because what runs under it allocates and maps memory that lives as long as the
/// executor, and enqueues work only on the executor's own streams (never capturing): nothing
/// of it belongs in the captured graph, and nothing the graph replays depends on it being
/// redone.
#[derive(Debug)]
pub struct CaptureTolerant {
    previous: sys::CUstreamCaptureMode,
}

impl CaptureTolerant {
    pub fn enter() -> Result<CaptureTolerant, ExecError> {
        // cudarc panics on a driver call when the library cannot be loaded.
        if !super::driver_present() {
            return Err(ExecError::Gpu(
                "the CUDA driver (libcuda.so) cannot be loaded".into(),
            ));
        }
        let mut mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: `mode` is a valid, writable mode for the driver to swap with the thread's.
        unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) }
            .result()
            .map_err(|e| gpu_err("cuThreadExchangeStreamCaptureMode", e))?;
        Ok(CaptureTolerant { previous: mode })
    }
}

impl Drop for CaptureTolerant {
    fn drop(&mut self) {
        let mut mode = self.previous;
        // SAFETY: as in `enter`; this puts back the mode the thread had before.
        let _ = unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) };
    }
}

/// A captured CUDA graph, instantiated, with the stream it was captured from (where it is
/// launched). Destroyed on drop.
pub struct Graph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    stream: Arc<CudaStream>,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Graph({:p})", self.exec)
    }
}

impl Graph {
    /// Enqueues one replay on the stream the graph was captured from (what it touches is
    /// alive: the contract of [`capture`], which made it).
    pub fn launch(&self) -> Result<(), ExecError> {
        self.stream
            .context()
            .bind_to_thread()
            .map_err(|e| gpu_err("cannot bind the context", e))?;
        // SAFETY: `exec` is this graph's live executable and `stream` a live stream of the
        // context it was captured in.
        unsafe { result::graph::launch(self.exec, self.stream.cu_stream()) }
            .map_err(|e| gpu_err("cuGraphLaunch", e))
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        if self.stream.context().bind_to_thread().is_err() {
            return;
        }
        // SAFETY: both handles were made by `capture` for this graph and are destroyed only
        // here; a launched graph's pending work keeps what it needs alive in the driver.
        unsafe {
            if !self.exec.is_null() {
                let _ = result::graph::exec_destroy(self.exec);
            }
            if !self.graph.is_null() {
                let _ = result::graph::destroy(self.graph);
            }
        }
    }
}

/// Captures what `body` enqueues on `streams` into one CUDA graph per stream (as nccl-tests'
/// `-G` does: each GPU's stream is its own graph, and the graphs are launched together),
/// instantiated and uploaded so that the first launch costs what later ones do. Every
/// capture is ended before any graph is instantiated: instantiating is not allowed while a
/// capture of the same thread is open. A failed `body` still ends every capture, leaving
/// the streams usable.
///
/// # Safety
/// A graph replays the device addresses its work was captured with, with no borrow to keep
/// them alive: every buffer the work `body` enqueues reads or writes (the caller's, and the
/// executor's own state, i.e. the executor) stays allocated until the returned graphs are
/// dropped and their last launch has finished.
pub unsafe fn capture(
    streams: &[Arc<CudaStream>],
    body: impl FnOnce() -> Result<(), ExecError>,
) -> Result<Vec<Graph>, ExecError> {
    let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    let mut begun = 0;
    let mut outcome = Ok(());
    for s in streams {
        if let Err(e) = s.begin_capture(mode) {
            outcome = Err(gpu_err("cuStreamBeginCapture", e));
            break;
        }
        begun += 1;
    }
    if outcome.is_ok() {
        outcome = body();
    }
    let mut graphs = Vec::with_capacity(begun);
    for s in &streams[..begun] {
        let ended = s
            .context()
            .bind_to_thread()
            // SAFETY: a live stream of the current context, capturing since the loop above.
            .and_then(|_| unsafe { result::stream::end_capture(s.cu_stream()) });
        match ended {
            Ok(g) => graphs.push(Graph {
                graph: g,
                exec: std::ptr::null_mut(),
                stream: s.clone(),
            }),
            Err(e) => {
                if outcome.is_ok() {
                    outcome = Err(gpu_err("cuStreamEndCapture", e));
                }
            }
        }
    }
    outcome?;
    for g in &mut graphs {
        if g.graph.is_null() {
            return Err(ExecError::Gpu("the captured graph is empty".into()));
        }
        g.stream
            .context()
            .bind_to_thread()
            .map_err(|e| gpu_err("cannot bind the context", e))?;
        // SAFETY: `graph` is the live graph just captured in this (current) context.
        g.exec = unsafe { result::graph::instantiate(g.graph, sys::CUgraphInstantiate_flags(0)) }
            .map_err(|e| gpu_err("cuGraphInstantiate", e))?;
        // SAFETY: the executable just made and its capture stream, both live.
        unsafe { result::graph::upload(g.exec, g.stream.cu_stream()) }
            .map_err(|e| gpu_err("cuGraphUpload", e))?;
    }
    Ok(graphs)
}

/// Launches one graph per GPU (from [`capture`]), each on the stream it was captured from.
pub fn launch_graphs(graphs: &[Graph]) -> Result<(), ExecError> {
    graphs.iter().try_for_each(Graph::launch)
}
