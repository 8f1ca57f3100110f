//! [`Comm`]: a validated plan loaded onto the GPUs of this process, called as NCCL's
//! collectives are, with cudarc's typed device slices on the caller's streams.
//!
//! ```no_run
//! use coll_executor::api::Program;
//! use coll_executor::cuda::{Comm, LoadOptions};
//! use coll_executor::cuda::cudarc::driver::CudaContext;
//! use coll_executor::dtype::ReduceOp;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let plan = Program::from_file("algorithms/allreduce_ring.coll")?.compile(2, "nvswitch:2")?;
//! let count: usize = 1 << 20;
//! let comm = Comm::<f32>::new(plan, &[0, 1], count as u64)?;
//! let streams: Vec<_> = (0..2)
//!     .map(|d| CudaContext::new(d).and_then(|c| c.new_stream()))
//!     .collect::<Result<_, _>>()?;
//! let send: Vec<_> = streams
//!     .iter()
//!     .map(|s| s.clone_htod(&vec![1.0f32; count]))
//!     .collect::<Result<_, _>>()?;
//! let mut recv: Vec<_> = streams
//!     .iter()
//!     .map(|s| s.alloc_zeros::<f32>(count))
//!     .collect::<Result<_, _>>()?;
//! let on: Vec<&_> = streams.iter().map(|s| s.as_ref()).collect();
//! let info = comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &on)?;
//! println!("{info}");
//! # Ok(())
//! # }
//! ```
//!
//! Invariants: a `Comm<T>` holds one [`CudaExecutor`] loaded for `T`'s dtype, so every call's
//! element type is the one its kernels were compiled for; every call checks, before it
//! enqueues anything, that the plan computes the collective asked for, that each buffer and
//! stream lives on the GPU of its rank, and that each buffer holds what NCCL's count asks
//! of it. Buffers are passed through cudarc's `DevicePtr`/`DevicePtrMut`, so the call's stream
//! waits for the buffers' earlier writes (and reads, for the outputs) on other streams, and
//! later work on other streams waits for the call, as with any cudarc operation.

use super::{CallInfo, CudaExecutor, LoadOptions};
use crate::dtype::{Element, ReduceOp};
use crate::error::ExecError;
use crate::reference::in_place_layout;
use coll_compiler::plan::ValidPlan;
use coll_lang::builtins::CollectiveKind;
use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, SyncOnDrop, sys};
use std::marker::PhantomData;

/// A plan on the GPUs of this process, for elements of type `T` (see the module docs).
pub struct Comm<T: Element> {
    exec: CudaExecutor,
    /// The CUDA device ordinal of each of the executor's GPUs, in order.
    ordinals: Vec<usize>,
    /// The user ranks this process drives, in order: the i-th buffer of a call is theirs.
    ranks: Vec<u32>,
    _elem: PhantomData<fn() -> T>,
}

impl<T: Element> std::fmt::Debug for Comm<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Comm")
            .field("plan", &self.exec.plan().name)
            .field("dtype", &T::DTYPE)
            .field("devices", &self.ordinals)
            .finish()
    }
}

impl<T: Element> Comm<T> {
    /// Loads `plan` onto the CUDA devices `devices` (user rank `q` of `n` on device
    /// `devices[q * devices.len() / n]`) for calls of up to `max_count` elements (NCCL's
    /// count), with the default settings ([`GpuSettings::default`](super::GpuSettings): no
    /// kernel disk cache, so each process compiles the kernel once; a program that wants the
    /// environment's `COLL_*` settings and cache passes
    /// `GpuSettings::from_lookup(|k| std::env::var(k).ok())` to [`with_options`](Self::with_options)).
    pub fn new(plan: ValidPlan, devices: &[usize], max_count: u64) -> Result<Comm<T>, ExecError> {
        Self::with_options(plan, devices, LoadOptions::new(T::DTYPE, max_count))
    }

    /// [`new`](Self::new) with explicit options; their `dtype` must be `T`'s.
    pub fn with_options(
        plan: ValidPlan,
        devices: &[usize],
        options: LoadOptions,
    ) -> Result<Comm<T>, ExecError> {
        if options.dtype != T::DTYPE {
            return Err(ExecError::Gpu(format!(
                "a Comm of {} elements cannot load kernels for {}",
                T::DTYPE.name(),
                options.dtype.name()
            )));
        }
        let exec = CudaExecutor::load(plan, devices, &options)?;
        let ranks = exec.local_users();
        Ok(Comm {
            exec,
            ordinals: devices.to_vec(),
            ranks,
            _elem: PhantomData,
        })
    }

    /// The executor underneath, for what the typed calls do not cover (traces, CUDA graph
    /// helpers, setup figures).
    pub fn executor(&self) -> &CudaExecutor {
        &self.exec
    }

    /// The user ranks whose buffers a call takes, in the order it takes them.
    pub fn ranks(&self) -> &[u32] {
        &self.ranks
    }

    /// The device ordinal of each stream a call takes, in order.
    pub fn devices(&self) -> &[usize] {
        &self.ordinals
    }

    /// NCCL's allreduce: every rank's `recv` becomes the reduction of every rank's `send`
    /// (`count` = `send[i].len()`).
    pub fn all_reduce<S: DevicePtr<T>, R: DevicePtrMut<T>>(
        &self,
        send: &[S],
        recv: &mut [R],
        op: ReduceOp,
        streams: &[&CudaStream],
    ) -> Result<CallInfo, ExecError> {
        self.out_of_place(CollectiveKind::AllReduce, None, send, recv, op, streams)
    }

    /// NCCL's allgather: `recv` (n × count) gathers every rank's `send` (count) in rank order.
    pub fn all_gather<S: DevicePtr<T>, R: DevicePtrMut<T>>(
        &self,
        send: &[S],
        recv: &mut [R],
        streams: &[&CudaStream],
    ) -> Result<CallInfo, ExecError> {
        self.out_of_place(
            CollectiveKind::AllGather,
            None,
            send,
            recv,
            ReduceOp::Sum,
            streams,
        )
    }

    /// NCCL's reducescatter: rank r's `recv` (count) is slice r of the reduction of every
    /// rank's `send` (n × count).
    pub fn reduce_scatter<S: DevicePtr<T>, R: DevicePtrMut<T>>(
        &self,
        send: &[S],
        recv: &mut [R],
        op: ReduceOp,
        streams: &[&CudaStream],
    ) -> Result<CallInfo, ExecError> {
        self.out_of_place(CollectiveKind::ReduceScatter, None, send, recv, op, streams)
    }

    /// NCCL's alltoall: slice j of rank i's `send` goes to slice i of rank j's `recv`
    /// (`count` elements per peer, n × count per buffer).
    pub fn all_to_all<S: DevicePtr<T>, R: DevicePtrMut<T>>(
        &self,
        send: &[S],
        recv: &mut [R],
        streams: &[&CudaStream],
    ) -> Result<CallInfo, ExecError> {
        self.out_of_place(
            CollectiveKind::AllToAll,
            None,
            send,
            recv,
            ReduceOp::Sum,
            streams,
        )
    }

    /// NCCL's broadcast: every rank's `recv` becomes `root`'s `send`. Plans are loaded for
    /// one root ([`LoadOptions::root`]); another root is an error.
    pub fn broadcast<S: DevicePtr<T>, R: DevicePtrMut<T>>(
        &self,
        send: &[S],
        recv: &mut [R],
        root: u32,
        streams: &[&CudaStream],
    ) -> Result<CallInfo, ExecError> {
        let kind = CollectiveKind::Broadcast;
        self.out_of_place(kind, Some(root), send, recv, ReduceOp::Sum, streams)
    }

    /// NCCL's reduce: `root`'s `recv` becomes the reduction of every rank's `send`.
    pub fn reduce<S: DevicePtr<T>, R: DevicePtrMut<T>>(
        &self,
        send: &[S],
        recv: &mut [R],
        op: ReduceOp,
        root: u32,
        streams: &[&CudaStream],
    ) -> Result<CallInfo, ExecError> {
        self.out_of_place(CollectiveKind::Reduce, Some(root), send, recv, op, streams)
    }

    /// The in-place form of any collective, in NCCL's layout: `bufs[i]` holds rank i's
    /// input where NCCL's in-place call has it (allgather: at `rank × count`; the others: at
    /// the start) and receives its output there (reducescatter: at `rank × count`).
    /// `count` is NCCL's count; `root` is for broadcast and reduce (else ignored).
    pub fn in_place<B: DevicePtrMut<T>>(
        &self,
        bufs: &mut [B],
        count: u64,
        op: ReduceOp,
        root: u32,
        streams: &[&CudaStream],
    ) -> Result<CallInfo, ExecError> {
        let kind = self.exec.plan().collective.0;
        self.check_root(kind, Some(root))?;
        self.check_shape(bufs.len(), streams)?;
        let shape = self.exec.call_shape(count);
        let es = T::DTYPE.size() as u64;
        let mut ptrs = vec![(0, 0); self.exec.plan().ranks as usize];
        let mut guards: Vec<SyncOnDrop<'_>> = Vec::with_capacity(bufs.len());
        for ((&q, b), s) in self
            .ranks
            .iter()
            .zip(bufs.iter_mut())
            .zip(self.rank_streams(streams))
        {
            self.check_device(q, "in-place", b.stream().context().ordinal())?;
            let lay = in_place_layout(kind, q, count, shape.in_elems, shape.out_elems);
            check_len(q, "in-place", b.len(), lay.len)?;
            let (p, g) = b.device_ptr_mut(s);
            ptrs[q as usize] = (p + lay.input_at * es, p + lay.output_at * es);
            guards.push(g);
        }
        // SAFETY: the streams were checked to belong to the executor's GPUs in order, each
        // pointer to lie in a live buffer of its rank's GPU large enough for `count`; the
        // buffers are borrowed until the guards record the call's end on the streams, and
        // cudarc frees them only after the events they hold have completed (in a capture,
        // what the graph replays stays alive by `device::capture`'s contract).
        let info = unsafe { self.exec.enqueue_raw(&raw(streams), &ptrs, count, op) };
        drop(guards);
        info
    }

    fn out_of_place<S: DevicePtr<T>, R: DevicePtrMut<T>>(
        &self,
        kind: CollectiveKind,
        root: Option<u32>,
        send: &[S],
        recv: &mut [R],
        op: ReduceOp,
        streams: &[&CudaStream],
    ) -> Result<CallInfo, ExecError> {
        let planned = self.exec.plan().collective.0;
        if planned != kind {
            return Err(ExecError::Gpu(format!(
                "the plan {} computes {}, not {}",
                self.exec.plan().name,
                planned.name(),
                kind.name()
            )));
        }
        self.check_root(kind, root)?;
        self.check_shape(send.len(), streams)?;
        if recv.len() != send.len() {
            return Err(ExecError::RankCount {
                expected: self.ranks.len() as u32,
                got: recv.len(),
            });
        }
        let n = u64::from(self.exec.plan().ranks);
        // NCCL's count, from the buffers: per peer for alltoall, the output's for
        // reducescatter, the input's otherwise.
        let count = match (kind, send.first(), recv.first()) {
            (_, None, _) | (_, _, None) => 0,
            (CollectiveKind::AllToAll, Some(s), _) => s.len() as u64 / n.max(1),
            (CollectiveKind::ReduceScatter, _, Some(r)) => r.len() as u64,
            (_, Some(s), _) => s.len() as u64,
        };
        let shape = self.exec.call_shape(count);
        let mut ptrs = vec![(0, 0); n as usize];
        let mut guards: Vec<SyncOnDrop<'_>> = Vec::with_capacity(2 * send.len());
        let streamed = self.rank_streams(streams);
        for (((&q, s), r), st) in self
            .ranks
            .iter()
            .zip(send)
            .zip(recv.iter_mut())
            .zip(streamed)
        {
            self.check_device(q, "send", s.stream().context().ordinal())?;
            self.check_device(q, "receive", r.stream().context().ordinal())?;
            check_len(q, "send", s.len(), shape.in_elems)?;
            check_len(q, "receive", r.len(), shape.out_elems)?;
            let (sp, sg) = s.device_ptr(st);
            let (rp, rg) = r.device_ptr_mut(st);
            // Distinct cudarc allocations never overlap, so the call runs out of place.
            ptrs[q as usize] = (sp, rp);
            guards.push(sg);
            guards.push(rg);
        }
        // SAFETY: as in `in_place`: streams and buffers checked to belong to their GPUs,
        // buffers large enough for `count`, borrowed until the call is recorded on the
        // streams.
        let info = unsafe { self.exec.enqueue_raw(&raw(streams), &ptrs, count, op) };
        drop(guards);
        info
    }

    fn check_root(&self, kind: CollectiveKind, root: Option<u32>) -> Result<(), ExecError> {
        let rooted = matches!(kind, CollectiveKind::Broadcast | CollectiveKind::Reduce);
        match root {
            Some(r) if rooted && r != self.exec.root() => Err(ExecError::Gpu(format!(
                "root {r}: this Comm's plan was loaded for root {} (LoadOptions::root)",
                self.exec.root()
            ))),
            _ => Ok(()),
        }
    }

    fn check_shape(&self, bufs: usize, streams: &[&CudaStream]) -> Result<(), ExecError> {
        if bufs != self.ranks.len() {
            return Err(ExecError::RankCount {
                expected: self.ranks.len() as u32,
                got: bufs,
            });
        }
        if streams.len() != self.ordinals.len() {
            return Err(ExecError::Gpu(format!(
                "{} streams for {} GPUs: one per GPU, in the order of the devices given",
                streams.len(),
                self.ordinals.len()
            )));
        }
        for (i, (s, &d)) in streams.iter().zip(&self.ordinals).enumerate() {
            if s.context().ordinal() != d {
                return Err(ExecError::Gpu(format!(
                    "stream {i} belongs to device {}, not device {d}",
                    s.context().ordinal()
                )));
            }
        }
        Ok(())
    }

    /// The stream of each local rank's GPU, in rank order.
    /// Per rank, the stream whose cudarc bookkeeping its buffers go through: the caller's,
    /// except while the caller's stream is capturing a graph. cudarc orders a buffer's uses
    /// across streams with events, and waiting in a capture on an event recorded outside it
    /// invalidates the capture; a context has several streams (and so that bookkeeping) as
    /// soon as an executor is loaded on it, whatever the application did. In a capture the
    /// graph's own order is the buffers' order, so their pointers are taken on coll's own
    /// stream of that GPU, which never captures.
    fn rank_streams<'s>(&'s self, streams: &[&'s CudaStream]) -> Vec<&'s CudaStream> {
        self.ranks
            .iter()
            .filter_map(|&q| {
                let i = self.exec.rank_gpu(q)?;
                let caller = streams.get(i).copied()?;
                let capturing = !matches!(
                    caller.capture_status(),
                    Ok(sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
                );
                match self.exec.gpu(i) {
                    Some(gpu) if capturing => Some(gpu.stream().as_ref()),
                    _ => Some(caller),
                }
            })
            .collect()
    }

    fn check_device(&self, q: u32, what: &str, device: usize) -> Result<(), ExecError> {
        let want = self
            .exec
            .rank_gpu(q)
            .and_then(|i| self.ordinals.get(i).copied());
        match want {
            Some(d) if d == device => Ok(()),
            Some(d) => Err(ExecError::Gpu(format!(
                "rank {q}: the {what} buffer is on device {device}, but the rank runs on device {d}"
            ))),
            None => Err(ExecError::Gpu(format!("rank {q} runs in another process"))),
        }
    }
}

fn check_len(q: u32, what: &str, have: usize, need: u64) -> Result<(), ExecError> {
    if (have as u64) < need {
        return Err(ExecError::Gpu(format!(
            "rank {q}: the {what} buffer holds {have} elements; the call needs {need}"
        )));
    }
    Ok(())
}

fn raw(streams: &[&CudaStream]) -> Vec<sys::CUstream> {
    streams.iter().map(|s| s.cu_stream()).collect()
}
