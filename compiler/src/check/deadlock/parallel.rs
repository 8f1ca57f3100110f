//! The simulation's rounds on several threads, for large plans: the same rounds, schedule
//! and end state as the serial loop of [`super::simulate`].
//!
//! The blocks are cut into parts at rank boundaries (a dep never leaves its rank, so every
//! dep wait stays inside a part), one thread per part; a thread alone changes its blocks,
//! and the message counts of a connection are changed by its one sending block (`sent`)
//! and its one receiving block (`received`): this path is taken only for plans where every
//! connection has at most one block on each side ([`plan_fits`]), which every valid plan
//! does. Each count carries the round it last changed in, and each block the round its
//! last op ran in, so a part decides and runs its candidates one after another and still
//! judges every head by the state at the start of the round (a count or head changed in
//! this round is taken back by one), as the serial loop does by deciding every candidate
//! before running any. Wakes of another part's blocks are handed over at the end of a round;
//! all parts end each round together (a barrier), and stop together when none has a
//! candidate left.

use super::{BlockState, Sim, Wait, head_waits};
use crate::plan::Plan;
use std::cmp::Reverse;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};

/// Ops a plan needs before its rounds are split: below it, the rounds are too short for
/// their barrier.
const PARALLEL_OPS: usize = 1 << 17;

/// Blocks per part, at least.
const BLOCKS_PER_PART: usize = 64;

/// Most parts.
const MAX_PARTS: usize = 8;

/// A round that never was: the stamp of a count not yet changed, or of a block not yet run.
const NEVER: u32 = u32::MAX;

/// How many parts to simulate `plan` in: 1 (the serial loop) for small plans and for plans
/// with a connection of several blocks on one side (only invalid plans have them).
pub(super) fn parts(sim: &Sim<'_>) -> usize {
    if sim.ops.len() < PARALLEL_OPS || !plan_fits(sim) {
        return 1;
    }
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    threads
        .min(MAX_PARTS)
        .min(sim.blocks.len() / BLOCKS_PER_PART)
        .min(sim.base.len())
        .max(1)
}

/// Whether every connection has at most one sending and one receiving block.
pub(super) fn plan_fits(sim: &Sim<'_>) -> bool {
    sim.conns
        .iter()
        .all(|c| c.senders.len() <= 1 && c.receivers.len() <= 1)
}

/// A message count and the round it last changed in, in one word (count high, round low).
struct Count(AtomicU64);

impl Count {
    fn new() -> Count {
        Count(AtomicU64::new(u64::from(NEVER)))
    }

    fn get(&self) -> (u64, u32) {
        let v = self.0.load(Ordering::Relaxed);
        (v >> 32, v as u32)
    }

    /// The count at the start of round `r`.
    fn at_start(&self, r: u32) -> u64 {
        let (count, last) = self.get();
        count - u64::from(last == r)
    }

    /// One more, in round `r` (only the connection's one block on that side adds).
    fn add(&self, r: u32) {
        let (count, _) = self.get();
        self.0
            .store(((count + 1) << 32) | u64::from(r), Ordering::Relaxed);
    }
}

/// What every part reads.
struct Shared<'s, 'p> {
    sim: &'s SimView<'s, 'p>,
    sent: Vec<Count>,
    received: Vec<Count>,
    /// The first global block of each part, and the end of the last.
    bounds: Vec<usize>,
    /// Per round parity, per part: the wakes it made of other parts' blocks.
    outboxes: [Vec<Mutex<Vec<usize>>>; 2],
    /// Per round modulo 3: whether any part has a candidate for the next round.
    busy: [AtomicBool; 3],
    barrier: Barrier,
}

/// The parts of the simulation that stay as they are during the rounds.
struct SimView<'s, 'p> {
    plan: &'p Plan,
    slots: u32,
    ops: &'s [super::OpInfo],
    base: &'s [usize],
    conns: &'s [super::Conn],
}

/// One part: its blocks (global `first..`), their rounds, and its candidates.
struct Part<'s> {
    first: usize,
    blocks: &'s mut [BlockState],
    steps: &'s mut [Vec<u32>],
    current: Vec<usize>,
    next: Vec<usize>,
    outbox: Vec<usize>,
    /// One more than the last round an op of this part ran in.
    rounds: u32,
}

/// Runs the rounds of `sim` in `parts` parts until no block is a candidate, and leaves the
/// state as the serial loop would; returns the rounds the plan took (see
/// [`super::Schedule::rounds`]). `steps` are the rounds per global block.
pub(super) fn run(sim: &mut Sim<'_>, steps: &mut [Vec<u32>], parts: usize) -> u32 {
    let Sim {
        plan,
        slots,
        blocks,
        ops,
        base,
        conns,
        ..
    } = sim;
    let view = SimView {
        plan,
        slots: *slots,
        ops,
        base,
        conns,
    };
    // Part boundaries at the rank whose blocks start nearest each share of the ops.
    let total = view.ops.len();
    let mut bounds = vec![0];
    let mut rank = 0;
    for p in 1..parts {
        let want = total * p / parts;
        while rank + 1 < view.base.len() && first_op(blocks, view.base[rank + 1]) <= want {
            rank += 1;
        }
        let at = view.base.get(rank).copied().unwrap_or(blocks.len());
        if at > bounds.last().copied().unwrap_or(0) && at < blocks.len() {
            bounds.push(at);
        }
    }
    bounds.push(blocks.len());
    let shared = Shared {
        sim: &view,
        sent: view.conns.iter().map(|_| Count::new()).collect(),
        received: view.conns.iter().map(|_| Count::new()).collect(),
        outboxes: [0, 1].map(|_| (1..bounds.len()).map(|_| Mutex::new(Vec::new())).collect()),
        busy: [0, 1, 2].map(|_| AtomicBool::new(false)),
        barrier: Barrier::new(bounds.len() - 1),
        bounds,
    };
    let mut list = Vec::new();
    let (mut blocks_left, mut steps_left) = (&mut blocks[..], steps);
    for w in shared.bounds.windows(2) {
        let len = w[1] - w[0];
        let (b, rest) = blocks_left.split_at_mut(len);
        let (s, rest_steps) = steps_left.split_at_mut(len.min(steps_left.len()));
        blocks_left = rest;
        steps_left = rest_steps;
        // Every block with ops is a candidate of round 0 (`next` becomes `current`).
        let next = (w[0]..w[1]).filter(|&g| b[g - w[0]].len > 0).collect();
        list.push(Part {
            first: w[0],
            blocks: b,
            steps: s,
            current: Vec::new(),
            next,
            outbox: Vec::new(),
            rounds: 0,
        });
    }
    let shared = &shared;
    let rounds = std::thread::scope(|scope| {
        let mut list = list.into_iter().enumerate();
        let mine = list.next();
        let others: Vec<_> = list
            .map(|(i, mut part)| {
                scope.spawn(move || {
                    part.run(shared, i);
                    part.rounds
                })
            })
            .collect();
        let mut rounds = mine.map_or(0, |(i, mut part)| {
            part.run(shared, i);
            part.rounds
        });
        // A part indexes only its own blocks and the plan's connections, so none panics
        // (one that did would leave the others waiting at the barrier).
        for h in others {
            match h.join() {
                Ok(r) => rounds = rounds.max(r),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        rounds
    });
    let counts: Vec<(u64, u64)> = (0..shared.sent.len())
        .map(|c| (shared.sent[c].get().0, shared.received[c].get().0))
        .collect();
    for (conn, (sent, received)) in conns.iter_mut().zip(counts) {
        conn.sent = sent;
        conn.received = received;
    }
    rounds
}

fn first_op(blocks: &[BlockState], g: usize) -> usize {
    blocks.get(g).map_or(usize::MAX, |b| b.first_op)
}

impl Part<'_> {
    fn owns(&self, g: usize) -> bool {
        g >= self.first && g - self.first < self.blocks.len()
    }

    fn wake(&mut self, g: usize) {
        if !self.owns(g) {
            self.outbox.push(g);
            return;
        }
        let b = &mut self.blocks[g - self.first];
        if !b.queued && b.head < b.len {
            b.queued = true;
            self.next.push(g);
        }
    }

    fn run(&mut self, sh: &Shared<'_, '_>, index: usize) {
        let mut r: u32 = 0;
        loop {
            if r > 0 {
                let parity = ((r - 1) % 2) as usize;
                for (q, outbox) in sh.outboxes[parity].iter().enumerate() {
                    if q == index {
                        continue;
                    }
                    let woken: Vec<usize> = outbox
                        .lock()
                        .map(|o| o.iter().copied().filter(|&g| self.owns(g)).collect())
                        .unwrap_or_default();
                    for g in woken {
                        self.wake(g);
                    }
                }
            }
            std::mem::swap(&mut self.current, &mut self.next);
            self.next.clear();
            // Cleared before any decision: a wake during this round, even of a block not
            // yet decided, makes it a candidate of the next.
            for i in 0..self.current.len() {
                let g = self.current[i];
                self.blocks[g - self.first].queued = false;
            }
            let mut ran = false;
            for i in 0..self.current.len() {
                let g = self.current[i];
                ran |= self.decide_and_run(sh, g, r);
            }
            if ran {
                self.rounds = r + 1;
            }
            if !self.next.is_empty() || !self.outbox.is_empty() {
                sh.busy[(r % 3) as usize].store(true, Ordering::Relaxed);
            }
            if let Some(slot) = sh.outboxes[(r % 2) as usize].get(index)
                && let Ok(mut o) = slot.lock()
            {
                *o = std::mem::take(&mut self.outbox);
            }
            if index == 0 {
                // Read last two rounds ago: every part has read it by now.
                sh.busy[((r + 1) % 3) as usize].store(false, Ordering::Relaxed);
            }
            sh.barrier.wait();
            if !sh.busy[(r % 3) as usize].load(Ordering::Relaxed) {
                return;
            }
            r = r.saturating_add(1);
        }
    }

    /// Decides block `g`'s head by the state at the start of round `r` and runs it if it
    /// can run: whether it ran.
    fn decide_and_run(&mut self, sh: &Shared<'_, '_>, g: usize, r: u32) -> bool {
        let l = g - self.first;
        if self.blocks[l].head >= self.blocks[l].len {
            return false;
        }
        let Some((k, wait)) = self.first_wait(sh, l, r) else {
            let head = self.blocks[l].head as usize;
            if let Some(at) = self.steps.get_mut(l).and_then(|s| s.get_mut(head)) {
                *at = r;
            }
            self.run_head(sh, l, r);
            return true;
        };
        self.blocks[l].checked = k;
        if let Wait::Dep {
            op,
            global: Some(d),
            ..
        } = wait
            && self.owns(d)
        {
            let dep = &self.blocks[d - self.first];
            if dep.ran_in == r && dep.head > op {
                // Done in this round, after the dep's own wakes: the next round sees it.
                self.wake(g);
            } else {
                self.blocks[d - self.first]
                    .dep_waiters
                    .push(Reverse((op, g)));
            }
        }
        false
    }

    /// [`Sim::first_wait`] from the block's checked conditions on, judged at the start of
    /// round `r`.
    fn first_wait(&self, sh: &Shared<'_, '_>, l: usize, r: u32) -> Option<(usize, Wait)> {
        let view = sh.sim;
        let b = &self.blocks[l];
        let slots = u64::from(view.slots);
        head_waits(
            view.plan,
            view.ops,
            b,
            b.checked,
            |block, op| {
                let global = super::global_block(view.plan, view.base, b.rank, block);
                let done = global.filter(|&x| self.owns(x)).is_some_and(|x| {
                    let x = &self.blocks[x - self.first];
                    x.head - u32::from(x.ran_in == r) > op
                });
                (global, done)
            },
            |c| sh.sent[c].at_start(r) > sh.received[c].get().0,
            |c| {
                sh.sent[c]
                    .get()
                    .0
                    .saturating_sub(sh.received[c].at_start(r))
                    < slots
            },
        )
    }

    /// [`Sim::run_head`] in round `r`.
    fn run_head(&mut self, sh: &Shared<'_, '_>, l: usize, r: u32) {
        let view = sh.sim;
        let g = self.first + l;
        let (head, op) = {
            let b = &self.blocks[l];
            match view.ops.get(b.first_op + b.head as usize) {
                Some(&op) => (b.head, op),
                None => return,
            }
        };
        if op.receives() {
            for j in 0..self.blocks[l].recv.len() {
                let c = self.blocks[l].recv[j];
                sh.received[c].add(r);
                if let Some(&s) = view.conns[c].senders.first() {
                    self.wake(s);
                }
            }
        }
        if op.sends() {
            for j in 0..self.blocks[l].send.len() {
                let c = self.blocks[l].send[j];
                sh.sent[c].add(r);
                if let Some(&to) = view.conns[c].receivers.first() {
                    self.wake(to);
                }
            }
        }
        let b = &mut self.blocks[l];
        b.head = head + 1;
        b.ran_in = r;
        b.checked = 0;
        while let Some(waiter) = self.blocks[l].done_waiter(head) {
            self.wake(waiter);
        }
        self.wake(g);
    }
}
