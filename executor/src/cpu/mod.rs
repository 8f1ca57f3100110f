//! The CPU reference executor: one thread per rank, bounded FIFO queues as connections,
//! real typed data. It runs every op kind the compiler emits and is the numeric reference the
//! GPU executors are compared with.
//!
//! Invariants: the plan passed validation where it entered ([`ValidPlan`]), so its buffer
//! indices, offsets, peers and deps are in range; a rank's thread owns that rank's buffers;
//! data moves between ranks only as messages on connections (`rank -> peer`, channel), each
//! holding at most `slots` messages, in order. A block has one connection per peer
//! ([`Block::send_peers`], [`Block::recv_peers`]); only its rank's thread takes from its
//! receive connections and puts on its send connections, so a message seen is still there
//! when taken, and room seen is still there when used. A rank runs the head op of each of
//! its blocks when its deps are done, a message has arrived on *every* receive connection
//! of the block (receives) and *every* send connection has room (sends); it then takes one
//! message from each, combines them in the documented order (`src (+) m(recv_peer) (+)
//! m(recv_also[0]) (+) ...`, left to right, so floating-point results are those of that
//! order), and puts the same message on each send connection. Nothing is taken or put
//! before the whole op can run, so a block never holds a message it has not consumed. When
//! no block can move a rank sleeps until a peer signals, and after `timeout` without
//! progress it fails naming the op it waits at, the peer it waits for and its source line.
//! The first error stops every rank.
//!
//! Counts: a call runs exact at its count, or, where the plan joins chunks of different
//! sizes at that count, padded ([`coll_compiler::plan::sizes`]): each rank's input is copied
//! into a zeroed padded input, the plan runs at the padded count, and each output chunk is
//! copied back out of the padded output. Every op and message of a run then moves equal
//! sizes; a message of another length can only come from a peer process that resolved the
//! call differently, and is an error ([`ExecError::ChunkSize`]).

mod padded;

use crate::dtype::{Element, ReduceOp, reduce_into};
use crate::error::ExecError;
use crate::net::mesh::{Failure, Mesh, Placement};
use crate::sync::{Signal, lock};
use coll_compiler::layout::alias;
use coll_compiler::plan::sizes::Padding;
use coll_compiler::plan::{self, Block, OpKind, Plan, Slice, ValidPlan};
use coll_lang::builtins::CollectiveKind;
use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How to run a plan.
#[derive(Clone, Debug, PartialEq)]
pub struct RunOptions {
    /// NCCL's count (see [`Plan::elements`]).
    pub count: u64,
    pub op: ReduceOp,
    /// Root of rooted collectives. A plan lowered for root 0 runs for root `r` with ranks
    /// relabelled by `r` (rank `q` plays `(q - r) mod n`).
    pub root: u32,
    /// Fail after this long without progress on a rank.
    pub timeout: Duration,
    /// Fault injection: this rank never runs (tests that peers time out).
    pub stall: Option<u32>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            count: 0,
            op: ReduceOp::Sum,
            root: 0,
            timeout: Duration::from_secs(30),
            stall: None,
        }
    }
}

/// A plan ready to run on CPU threads.
#[derive(Debug)]
pub struct CpuExecutor {
    plan: Arc<Plan>,
    slots: usize,
    /// The counts at which the plan runs padded ([`Padding::of`] the plan).
    padding: Padding,
}

impl CpuExecutor {
    /// An executor for `plan` with `slots` messages per connection (at least one). The plan
    /// was validated where it entered ([`ValidPlan`]), so nothing here can fail.
    pub fn new(plan: ValidPlan, slots: u32) -> CpuExecutor {
        let plan = plan.into_inner();
        CpuExecutor {
            padding: Padding::of(&plan),
            plan: Arc::new(plan),
            slots: slots.max(1) as usize,
        }
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The count a call of `count` runs at: `count`, or its padded count where the plan
    /// runs padded ([`Padding::run_count`]).
    pub fn run_count(&self, count: u64) -> u64 {
        self.padding.run_count(count)
    }

    /// Elements of each rank's input and output buffers at `count`.
    pub fn sizes(&self, count: u64) -> (u64, u64) {
        (
            self.plan.buffer_elements(0, count),
            self.plan.buffer_elements(1, count),
        )
    }

    /// Runs the collective out of place: `inputs[r]` is rank r's input; returns every rank's
    /// output.
    pub fn run<T: Element>(
        &self,
        inputs: &[Vec<T>],
        o: &RunOptions,
    ) -> Result<Vec<Vec<T>>, ExecError> {
        let n = self.plan.ranks;
        if inputs.len() != n as usize {
            return Err(ExecError::RankCount {
                expected: n,
                got: inputs.len(),
            });
        }
        let signals: Vec<Signal> = (0..n).map(|_| Signal::default()).collect();
        let local: Vec<(u32, &[T])> = (0..n).zip(inputs.iter().map(Vec::as_slice)).collect();
        self.run_ranks(&local, o, &signals, None)
    }

    /// Runs this process's share of a multi-process run out of place: the ranks
    /// [`Placement`] gives process `mesh.me()`, `inputs` in their order; returns their
    /// outputs. Ranks in other processes are reached through the mesh. Ends at a barrier, so
    /// the next call's messages cannot meet this one's. On failure the other processes are
    /// told, so they stop instead of timing out.
    pub fn run_part<T: Element>(
        &self,
        mesh: &mut Mesh,
        inputs: &[Vec<T>],
        o: &RunOptions,
    ) -> Result<Vec<Vec<T>>, ExecError> {
        let n = self.plan.ranks;
        let place = Placement::new(n, mesh.procs()).ok_or(ExecError::Procs {
            procs: mesh.procs(),
            ranks: n,
        })?;
        let mine = place.ranks_of(mesh.me());
        if inputs.len() != mine.len() {
            return Err(ExecError::RankCount {
                expected: mine.len() as u32,
                got: inputs.len(),
            });
        }
        let local: Vec<(u32, &[T])> = mine.zip(inputs.iter().map(Vec::as_slice)).collect();
        let shift = self.shift(o);
        let result = self.run_ranks(&local, o, mesh.signals(), Some(Net { mesh, place, shift }));
        let outputs = match result {
            Ok(x) => x,
            Err(e) => {
                mesh.abort(&e.to_string());
                return Err(e);
            }
        };
        mesh.barrier(&[], o.timeout).map_err(|f| ExecError::Peer {
            at: format!("process {} ({})", mesh.me(), place.describe(mesh.me())),
            waiting: "at the end-of-call barrier".into(),
            reason: f.describe(Some(&place)),
        })?;
        Ok(outputs)
    }

    /// Rooted plans are lowered for root 0: rank q plays position (q - root) mod n.
    fn shift(&self, o: &RunOptions) -> u32 {
        let rooted = matches!(
            self.plan.collective.0,
            CollectiveKind::Broadcast | CollectiveKind::Reduce
        );
        if rooted { o.root } else { 0 }
    }

    /// Runs the physical ranks in `local` (rank, input) on threads of this process.
    fn run_ranks<T: Element>(
        &self,
        local: &[(u32, &[T])],
        o: &RunOptions,
        signals: &[Signal],
        net: Option<Net<'_>>,
    ) -> Result<Vec<Vec<T>>, ExecError> {
        let plan = &*self.plan;
        let n = plan.ranks;
        if o.root >= n {
            return Err(ExecError::Root {
                root: o.root,
                ranks: n,
            });
        }
        let kind = plan.collective.0;
        let reduces = matches!(
            kind,
            CollectiveKind::AllReduce | CollectiveKind::ReduceScatter | CollectiveKind::Reduce
        );
        if o.op == ReduceOp::Avg && !reduces {
            return Err(ExecError::Unsupported {
                op: o.op.name().into(),
                collective: kind.name().into(),
            });
        }
        let (in_elems, _) = self.sizes(o.count);
        for (r, input) in local {
            if input.len() as u64 != in_elems {
                return Err(ExecError::InputSize {
                    rank: *r,
                    expected: in_elems,
                    got: input.len() as u64,
                });
            }
        }
        let run = self.padding.run_count(o.count);
        let mut out = if run == o.count {
            self.run_threads(local, o, signals, net)?
        } else {
            // Padded: each input chunk at the start of its padded chunk, the rest zero.
            let inputs: Vec<&[T]> = local.iter().map(|&(_, input)| input).collect();
            let padded = padded::pad_inputs(plan, o.count, &inputs);
            let local: Vec<(u32, &[T])> = local
                .iter()
                .zip(&padded)
                .map(|(&(q, _), p)| (q, p.as_slice()))
                .collect();
            let at = RunOptions {
                count: run,
                ..o.clone()
            };
            let outs = self.run_threads(&local, &at, signals, net)?;
            padded::unpad_outputs(plan, o.count, &outs)
        };
        if o.op == ReduceOp::Avg {
            for (&(q, _), buf) in local.iter().zip(out.iter_mut()) {
                if kind != CollectiveKind::Reduce || q == o.root {
                    buf.iter_mut().for_each(|x| *x = x.div_n(n));
                }
            }
        }
        Ok(out)
    }

    /// Runs the ranks in `local` at `o.count` on threads, every op and message of equal
    /// sizes at that count; the outputs before any averaging.
    fn run_threads<T: Element>(
        &self,
        local: &[(u32, &[T])],
        o: &RunOptions,
        signals: &[Signal],
        net: Option<Net<'_>>,
    ) -> Result<Vec<Vec<T>>, ExecError> {
        let plan = &*self.plan;
        let n = plan.ranks;
        let shift = self.shift(o);
        let position = |q: u32| (q + n - shift) % n;
        let world = World::new(plan, self.slots, signals, net);
        let abort = AtomicBool::new(false);
        let first_error: Mutex<Option<ExecError>> = Mutex::new(None);
        let mut outputs: Vec<Option<Vec<T>>> = local.iter().map(|_| None).collect();
        std::thread::scope(|scope| {
            let handles: Vec<_> = local
                .iter()
                .map(|&(q, input)| {
                    let p = position(q);
                    let world = &world;
                    let abort = &abort;
                    let first_error = &first_error;
                    scope.spawn(move || {
                        if o.stall == Some(q) {
                            // Never run; wait until the others give up.
                            while !abort.load(Ordering::Acquire) && world.failure().is_none() {
                                std::thread::sleep(Duration::from_millis(5));
                            }
                            return None;
                        }
                        let mut rank = Rank::new(plan, p, o, input);
                        match rank.run(world, abort) {
                            Ok(()) => Some(rank.output()),
                            Err(e) => {
                                let mut slot = lock(first_error);
                                if slot.is_none() {
                                    *slot = Some(e);
                                }
                                abort.store(true, Ordering::Release);
                                world.wake_all();
                                None
                            }
                        }
                    })
                })
                .collect();
            for (i, h) in handles.into_iter().enumerate() {
                match h.join() {
                    Ok(out) => outputs[i] = out,
                    Err(_) => {
                        let mut slot = lock(&first_error);
                        if slot.is_none() {
                            *slot = Some(ExecError::Worker {
                                rank: local[i].0,
                                what: "panicked".into(),
                            });
                        }
                    }
                }
            }
        });
        if let Some(e) = lock(&first_error).take() {
            return Err(e);
        }
        Ok(outputs.into_iter().map(Option::unwrap_or_default).collect())
    }

    /// Runs in place, NCCL's way: `bufs[r]` holds rank r's input where the collective
    /// expects it (allgather: at `r * count` of an output-sized buffer; reducescatter: the
    /// whole input, the result landing at `r * count`; others: the buffer itself) and ends
    /// holding the output.
    pub fn run_in_place<T: Element>(
        &self,
        bufs: &mut [Vec<T>],
        o: &RunOptions,
    ) -> Result<(), ExecError> {
        self.in_place(bufs, 0, o, |inputs| self.run(inputs, o))
    }

    /// [`CpuExecutor::run_in_place`] for this process's share of a multi-process run (see
    /// [`CpuExecutor::run_part`]): `bufs` are the buffers of this process's ranks, in order.
    pub fn run_part_in_place<T: Element>(
        &self,
        mesh: &mut Mesh,
        bufs: &mut [Vec<T>],
        o: &RunOptions,
    ) -> Result<(), ExecError> {
        let first = Placement::new(self.plan.ranks, mesh.procs())
            .map_or(0, |p| p.ranks_of(mesh.me()).start);
        self.in_place(bufs, first, o, |inputs| self.run_part(mesh, inputs, o))
    }

    /// NCCL's in-place layout around an out-of-place `run`; `bufs[i]` belongs to rank
    /// `first + i`.
    fn in_place<T: Element>(
        &self,
        bufs: &mut [Vec<T>],
        first: u32,
        o: &RunOptions,
        run: impl FnOnce(&[Vec<T>]) -> Result<Vec<Vec<T>>, ExecError>,
    ) -> Result<(), ExecError> {
        let kind = self.plan.collective.0;
        let (in_elems, out_elems) = self.sizes(o.count);
        let c = o.count as usize;
        let first = first as usize;
        let inputs: Vec<Vec<T>> = bufs
            .iter()
            .enumerate()
            .map(|(i, b)| match kind {
                CollectiveKind::AllGather => b
                    .get((first + i) * c..(first + i) * c + c)
                    .map(<[T]>::to_vec)
                    .unwrap_or_default(),
                _ => b.iter().take(in_elems as usize).copied().collect(),
            })
            .collect();
        let outputs = run(&inputs)?;
        for (i, (b, out)) in bufs.iter_mut().zip(outputs).enumerate() {
            let r = first + i;
            match kind {
                CollectiveKind::ReduceScatter => {
                    if let Some(dst) = b.get_mut(r * c..r * c + c) {
                        dst.copy_from_slice(&out[..c.min(out.len())]);
                    }
                }
                _ => {
                    b.resize(out_elems as usize, T::zero());
                    b.copy_from_slice(&out);
                }
            }
        }
        Ok(())
    }
}

/// One connection `rank -> peer` on a channel, as this process sees it.
enum Conn<T> {
    /// Both ends in this process: a bounded FIFO of messages.
    Local(Mutex<VecDeque<Vec<T>>>),
    /// The receiver lives in process `proc`: messages go to the proxy, which counts them
    /// against the credits the receiver returned.
    Out { proc: u32 },
    /// The sender lives in process `proc`: messages come from the proxy's inbox, and each one
    /// taken returns a credit.
    In { proc: u32 },
}

/// The remote side of a multi-process run.
struct Net<'a> {
    mesh: &'a Mesh,
    place: Placement,
    /// Plan position -> physical rank (rooted collectives are relabelled).
    shift: u32,
}

impl Net<'_> {
    /// The process that runs plan position `p`.
    fn owner(&self, p: u32) -> u32 {
        self.place.owner((p + self.shift) % self.place.ranks)
    }
}

/// The connections and signals of the ranks this process runs.
struct World<'a, T> {
    conns: HashMap<(u32, u32, u32), Conn<T>>,
    signals: &'a [Signal],
    slots: usize,
    net: Option<Net<'a>>,
}

impl<'a, T> World<'a, T> {
    fn new(plan: &Plan, slots: usize, signals: &'a [Signal], net: Option<Net<'a>>) -> Self {
        let mut conns = HashMap::new();
        let here = |r: u32| net.as_ref().is_none_or(|n| n.owner(r) == n.mesh.me());
        let owner = |r: u32| net.as_ref().map_or(0, |n| n.owner(r));
        for (r, gpu) in plan.gpus.iter().enumerate() {
            let r = r as u32;
            // Every connection has exactly one sending block, so listing the send side of
            // each block lists every connection once, several-peer blocks included.
            for b in &gpu.blocks {
                for q in b.send_peers() {
                    let conn = match (here(r), here(q)) {
                        (true, true) => Conn::Local(Mutex::new(VecDeque::with_capacity(slots))),
                        (true, false) => Conn::Out { proc: owner(q) },
                        (false, true) => Conn::In { proc: owner(r) },
                        (false, false) => continue,
                    };
                    conns.insert((r, q, b.channel), conn);
                }
            }
        }
        World {
            conns,
            signals,
            slots,
            net,
        }
    }

    fn wake_all(&self) {
        self.signals.iter().for_each(Signal::notify);
    }

    fn wake(&self, rank: u32) {
        if let Some(s) = self.signals.get(rank as usize) {
            s.notify();
        }
    }

    fn failure(&self) -> Option<Failure> {
        self.net.as_ref().and_then(|n| n.mesh.failure())
    }
}

impl<T: Element> World<'_, T> {
    /// Whether connection `key` has room for one more message.
    fn room(&self, key: (u32, u32, u32)) -> bool {
        match self.conns.get(&key) {
            Some(Conn::Local(q)) => lock(q).len() < self.slots,
            Some(Conn::Out { .. }) => self
                .net
                .as_ref()
                .is_some_and(|n| n.mesh.in_flight(key.0, key.1, key.2) < self.slots as u64),
            _ => false,
        }
    }

    /// Whether a message of connection `key` has arrived (to be taken by this rank only).
    fn arrived(&self, key: (u32, u32, u32)) -> bool {
        match self.conns.get(&key) {
            Some(Conn::Local(q)) => !lock(q).is_empty(),
            Some(Conn::In { .. }) => self
                .net
                .as_ref()
                .is_some_and(|n| n.mesh.arrived(key.0, key.1, key.2)),
            _ => false,
        }
    }

    /// Takes the next message of connection `key` and frees its slot.
    fn take(&self, key: (u32, u32, u32)) -> Option<Vec<T>> {
        let (from, to, channel) = key;
        match self.conns.get(&key)? {
            Conn::Local(q) => {
                let m = lock(q).pop_front()?;
                // A slot freed: the sender may go on.
                self.wake(from);
                Some(m)
            }
            Conn::In { proc } => {
                let net = self.net.as_ref()?;
                let bytes = net.mesh.take(from, to, channel)?;
                net.mesh.credit(*proc, from, to, channel);
                Some(bytemuck::pod_collect_to_vec::<u8, T>(&bytes))
            }
            Conn::Out { .. } => None,
        }
    }

    /// Puts a message on connection `key` (room was checked).
    fn put(&self, key: (u32, u32, u32), msg: Vec<T>) {
        let (from, to, channel) = key;
        match self.conns.get(&key) {
            Some(Conn::Local(q)) => {
                lock(q).push_back(msg);
                self.wake(to);
            }
            Some(Conn::Out { proc }) => {
                if let Some(net) = &self.net {
                    let bytes = bytemuck::cast_slice::<T, u8>(&msg).to_vec();
                    net.mesh.send_data(*proc, from, to, channel, bytes);
                }
            }
            _ => {}
        }
    }
}

/// `acc[i] = first[i] (op) acc[i]`: [`reduce_into`] with the operands the other way round, so
/// that a receive combines `src (+) m` in the documented order, not `m (+) src` (the same for
/// most values, but not for every float: `min` and `max` of `-0.0` and `0.0`, NaNs).
fn reduce_after<T: Element>(op: ReduceOp, first: &[T], acc: &mut [T]) {
    let pairs = acc.iter_mut().zip(first);
    match op.combine() {
        ReduceOp::Sum | ReduceOp::Avg => pairs.for_each(|(a, f)| *a = f.add(*a)),
        ReduceOp::Prod => pairs.for_each(|(a, f)| *a = f.mul(*a)),
        ReduceOp::Min => pairs.for_each(|(a, f)| *a = f.min_of(*a)),
        ReduceOp::Max => pairs.for_each(|(a, f)| *a = f.max_of(*a)),
    }
}

/// One rank's state while running.
struct Rank<'a, T> {
    plan: &'a Plan,
    /// The rank position this thread plays in the plan.
    rank: u32,
    o: &'a RunOptions,
    /// Physical buffers (aliasing resolved), in elements.
    bufs: Vec<Vec<T>>,
    /// Ops done per block.
    done: Vec<usize>,
}

impl<'a, T: Element> Rank<'a, T> {
    fn new(plan: &'a Plan, rank: u32, o: &'a RunOptions, input: &[T]) -> Self {
        let count = o.count;
        let mut bufs: Vec<Vec<T>> = (0..plan.buffers.len())
            .map(|b| vec![T::zero(); plan.buffer_elements(b, count) as usize])
            .collect();
        // The user's input goes where the plan expects it (aliasing included).
        let k = plan.chunk_factor;
        let in_chunks = plan.buffers.first().map_or(0, |b| b.chunks);
        let kind = plan.collective.0;
        for j in 0..in_chunks {
            let (pb, pc) = alias(kind, plan.inplace, k, 0, u64::from(rank), j);
            let from = plan.elements(count, j, 1);
            let to = plan.elements(count, pc, 1);
            if let (Some(src), Some(dst)) = (
                input.get(from.start as usize..from.end as usize),
                bufs.get_mut(pb)
                    .and_then(|b| b.get_mut(to.start as usize..to.end as usize)),
            ) && src.len() == dst.len()
            {
                dst.copy_from_slice(src);
            }
        }
        Rank {
            plan,
            rank,
            o,
            bufs,
            done: vec![0; plan.gpus.get(rank as usize).map_or(0, |g| g.blocks.len())],
        }
    }

    /// The output buffer (read through aliasing).
    fn output(&self) -> Vec<T> {
        let plan = self.plan;
        let count = self.o.count;
        let out_chunks = plan.buffers.get(1).map_or(0, |b| b.chunks);
        let mut out = vec![T::zero(); plan.buffer_elements(1, count) as usize];
        for i in 0..out_chunks {
            let (pb, pc) = alias(
                plan.collective.0,
                plan.inplace,
                plan.chunk_factor,
                1,
                u64::from(self.rank),
                i,
            );
            let from = plan.elements(count, pc, 1);
            let to = plan.elements(count, i, 1);
            if let (Some(src), Some(dst)) = (
                self.bufs
                    .get(pb)
                    .and_then(|b| b.get(from.start as usize..from.end as usize)),
                out.get_mut(to.start as usize..to.end as usize),
            ) && src.len() == dst.len()
            {
                dst.copy_from_slice(src);
            }
        }
        out
    }

    /// Physical buffer and element range of `count` plan chunks at `s`.
    fn range(&self, s: Slice, chunks: u32) -> (usize, Range<usize>) {
        let p = self.plan;
        let (pb, pc) = alias(
            p.collective.0,
            p.inplace,
            p.chunk_factor,
            s.buffer() as usize,
            u64::from(self.rank),
            s.offset(),
        );
        let r = p.elements(self.o.count, pc, u64::from(chunks));
        (pb, r.start as usize..r.end as usize)
    }

    fn read(&self, s: Slice, chunks: u32) -> &[T] {
        let (b, r) = self.range(s, chunks);
        self.bufs.get(b).and_then(|x| x.get(r)).unwrap_or(&[])
    }

    fn write(&mut self, s: Slice, chunks: u32) -> &mut [T] {
        let (b, r) = self.range(s, chunks);
        self.bufs
            .get_mut(b)
            .and_then(|x| x.get_mut(r))
            .unwrap_or(&mut [])
    }

    fn at(&self, b: usize, i: usize) -> String {
        plan::location(self.plan, self.rank, b as u32, Some(i as u32))
    }

    fn size_error(&self, b: usize, i: usize, src: usize, dst: usize) -> ExecError {
        ExecError::ChunkSize {
            at: self.at(b, i),
            src: src as u64,
            dst: dst as u64,
            count: self.o.count,
        }
    }

    fn run(&mut self, world: &World<T>, abort: &AtomicBool) -> Result<(), ExecError> {
        let plan = self.plan;
        let Some(gpu) = plan.gpus.get(self.rank as usize) else {
            return Ok(());
        };
        let Some(me) = world.signals.get(self.rank as usize) else {
            return Ok(());
        };
        let mut last_progress = Instant::now();
        loop {
            let seen = me.generation();
            let mut progressed = false;
            let mut finished = true;
            for (b, block) in gpu.blocks.iter().enumerate() {
                while self.step(b, block, world)? {
                    progressed = true;
                }
                finished &= self.done[b] == block.ops.len();
            }
            if finished {
                return Ok(());
            }
            if abort.load(Ordering::Acquire) {
                return Ok(());
            }
            if progressed {
                last_progress = Instant::now();
                continue;
            }
            if let Some(f) = world.failure() {
                let (at, waiting) = self.blocked(gpu, world);
                return Err(ExecError::Peer {
                    at,
                    waiting,
                    reason: f.describe(world.net.as_ref().map(|n| &n.place)),
                });
            }
            let waited = last_progress.elapsed();
            if waited >= self.o.timeout {
                let (at, waiting) = self.blocked(gpu, world);
                return Err(ExecError::Timeout {
                    at,
                    waiting,
                    waited,
                });
            }
            me.wait_past(seen, self.o.timeout - waited, || {
                abort.load(Ordering::Acquire)
            });
        }
    }

    /// The first blocked op (`rank r, block b, op i (file:line:col)`) and what it waits for:
    /// of several peers, the first whose message has not arrived or whose connection is full.
    fn blocked(&self, gpu: &plan::RankPlan, world: &World<T>) -> (String, String) {
        let me = self.rank;
        for (b, block) in gpu.blocks.iter().enumerate() {
            let i = self.done[b];
            let Some(op) = block.ops.get(i) else { continue };
            let waiting = if let Some(d) = op.deps.iter().find(|d| {
                self.done
                    .get(d.block() as usize)
                    .is_none_or(|&x| x <= d.op() as usize)
            }) {
                format!("waiting for block {} op {}", d.block(), d.op())
            } else {
                // A missing message first, then a full connection: of several peers, the one
                // the op waits for.
                let c = block.channel;
                let missing = block
                    .recv_peers()
                    .find(|&p| op.kind.receives() && !world.arrived((p, me, c)));
                let full = block
                    .send_peers()
                    .find(|&q| op.kind.sends() && !world.room((me, q, c)));
                match (missing, full) {
                    (Some(p), _) => format!("waiting to receive from rank {p} on channel {c}"),
                    (None, Some(q)) => {
                        format!("waiting for room to send to rank {q} on channel {c}")
                    }
                    // Ready now (a peer moved since the rank last looked): its first peer.
                    (None, None) if op.kind.receives() => format!(
                        "waiting to receive from rank {} on channel {c}",
                        block.recv_peer.unwrap_or(0)
                    ),
                    (None, None) => format!(
                        "waiting for room to send to rank {} on channel {c}",
                        block.send_peer.unwrap_or(0)
                    ),
                }
            };
            return (self.at(b, i), waiting);
        }
        (format!("rank {}", self.rank), "with no blocked op".into())
    }

    /// Runs the head op of block `b` if it can; returns whether it did.
    fn step(&mut self, b: usize, block: &Block, world: &World<T>) -> Result<bool, ExecError> {
        let i = self.done[b];
        let Some(op) = block.ops.get(i) else {
            return Ok(false);
        };
        if !op.deps.iter().all(|d| {
            self.done
                .get(d.block() as usize)
                .is_some_and(|&x| x > d.op() as usize)
        }) {
            return Ok(false);
        }
        let me = self.rank;
        let c = block.channel;
        // All or nothing: the op runs only when every send connection has room and every
        // receive connection has a message, so no message is taken by an op that then waits.
        if op.kind.sends()
            && (block.send_peer.is_none() || !block.send_peers().all(|q| world.room((me, q, c))))
        {
            return Ok(false);
        }
        let messages: Vec<Vec<T>> = if op.kind.receives() {
            if block.recv_peer.is_none() || !block.recv_peers().all(|p| world.arrived((p, me, c))) {
                return Ok(false);
            }
            let mut ms = Vec::with_capacity(1 + block.recv_also.len());
            for p in block.recv_peers() {
                // Only this thread takes from the connection, so what arrived is still there.
                let m = world.take((p, me, c)).ok_or_else(|| ExecError::Worker {
                    rank: me,
                    what: format!(
                        "{}: a message from rank {p} on channel {c} vanished before it was taken",
                        self.at(b, i)
                    ),
                })?;
                ms.push(m);
            }
            ms
        } else {
            Vec::new()
        };
        let combine = self.o.op;
        let n = op.count;
        let mut messages = messages.into_iter();
        let to_send: Option<Vec<T>> = match (op.kind, messages.next()) {
            (OpKind::Send, _) => Some(op.src.map(|s| self.read(s, n).to_vec()).unwrap_or_default()),
            // A copying receive has one recv peer (validation refuses several).
            (OpKind::Recv | OpKind::RecvCopySend, Some(msg)) => {
                if let Some(d) = op.dst {
                    let dst = self.write(d, n);
                    if dst.len() != msg.len() {
                        let len = dst.len();
                        return Err(self.size_error(b, i, msg.len(), len));
                    }
                    dst.copy_from_slice(&msg);
                }
                (op.kind == OpKind::RecvCopySend).then_some(msg)
            }
            (
                OpKind::RecvReduceCopy | OpKind::RecvReduceSend | OpKind::RecvReduceCopySend,
                Some(first),
            ) => {
                // `src (+) m(recv_peer) (+) m(recv_also[0]) (+) ...`, left to right: the
                // documented order, which fixes the rounding of floating-point results. The
                // first message's buffer holds the running result (no copy of `src`).
                let mut msg = first;
                let src = op.src.map(|s| self.read(s, n)).unwrap_or(&[]);
                if src.len() != msg.len() {
                    return Err(self.size_error(b, i, msg.len(), src.len()));
                }
                reduce_after(combine, src, &mut msg);
                for m in messages {
                    if m.len() != msg.len() {
                        return Err(self.size_error(b, i, m.len(), msg.len()));
                    }
                    reduce_into(combine, &mut msg, &m);
                }
                if let Some(d) = op.dst.filter(|_| op.kind.needs_dst()) {
                    let dst = self.write(d, n);
                    if dst.len() != msg.len() {
                        let len = dst.len();
                        return Err(self.size_error(b, i, msg.len(), len));
                    }
                    dst.copy_from_slice(&msg);
                }
                op.kind.sends().then_some(msg)
            }
            (OpKind::Copy | OpKind::Reduce | OpKind::CopySend, _) => {
                let (Some(s), Some(d)) = (op.src, op.dst) else {
                    return Ok(false);
                };
                let src = self.read(s, n).to_vec();
                let dst = self.write(d, n);
                if dst.len() != src.len() {
                    let len = dst.len();
                    return Err(self.size_error(b, i, src.len(), len));
                }
                if op.kind == OpKind::Reduce {
                    reduce_into(combine, dst, &src);
                } else {
                    dst.copy_from_slice(&src);
                }
                // A copy-send sends what it copied.
                (op.kind == OpKind::CopySend).then_some(src)
            }
            // Receiving kinds always have a message here.
            (_, None) => return Ok(false),
        };
        // The same message on every send connection: copies to the further peers, the
        // message itself to the first.
        if let (Some(msg), Some(q)) = (to_send, block.send_peer) {
            for &also in &block.send_also {
                world.put((me, also, c), msg.clone());
            }
            world.put((me, q, c), msg);
        }
        self.done[b] += 1;
        Ok(true)
    }
}

#[cfg(test)]
mod tests;
