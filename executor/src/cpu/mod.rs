//! The CPU reference executor: one thread per rank, bounded FIFO queues as connections,
//! real typed data. It runs every op kind the compiler emits and is the numeric reference the
//! GPU executors are compared with.
//!
//! Invariants: the plan passed validation where it entered ([`ValidPlan`]), so its buffer
//! indices, offsets, peers and deps are in range; a rank's thread owns that rank's buffers;
//! data moves between ranks only as messages on connections (`rank -> peer`, channel), each
//! holding at most `slots` messages, in order. A block has one connection per peer
//! ([`Block::send_peers`](coll_compiler::plan::Block::send_peers),
//! [`Block::recv_peers`](coll_compiler::plan::Block::recv_peers)); only its rank's thread
//! takes from its receive connections and puts on its send connections, so a message seen
//! is still there when taken, and room seen is still there when used. A rank runs the head op of each of
//! its blocks when its deps are done, a message has arrived on *every* receive connection
//! of the block (receives) and *every* send connection has room (sends); it then takes one
//! message from each, combines them in the documented order (`src (+) m(recv_peer) (+)
//! m(recv_also[0]) (+) ...`, left to right, so floating-point results are those of that
//! order), and puts the same message on each send connection. Nothing is taken or put
//! before the whole op can run, so a block never holds a message it has not consumed. When
//! no block can move a rank sleeps until a peer signals, and after `timeout` without
//! progress it fails naming the op it waits at, the peer it waits for and its source line.
//! The first error stops every rank. `world.rs` holds the connections, `rank.rs` a rank's
//! buffers and its loop.
//!
//! Counts: a call runs exact at its count, or, where the plan joins chunks of different
//! sizes at that count, padded ([`coll_compiler::plan::sizes`]): each rank's input is copied
//! into a zeroed padded input, the plan runs at the padded count, and each output chunk is
//! copied back out of the padded output. Every op and message of a run then moves equal
//! sizes; a message of another length can only come from a peer process that resolved the
//! call differently, and is an error ([`ExecError::ChunkSize`]).

mod padded;
mod rank;
mod world;

use rank::Rank;
use world::{Net, World};

use crate::dtype::{Element, ReduceOp};
use crate::error::ExecError;
use crate::net::mesh::{Mesh, Placement};
use crate::sync::{Signal, lock};
use coll_compiler::plan::sizes::Padding;
use coll_compiler::plan::{Plan, ValidPlan};
use coll_lang::builtins::CollectiveKind;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

#[cfg(test)]
mod tests;
