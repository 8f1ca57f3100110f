//! Deadlock freedom: simulates every rank of a plan at once with a bounded number of slots
//! per connection, and either gives the round each op runs in or names a cycle of ops that
//! wait for each other.
//!
//! Semantics. Every block runs its ops in order; only its *head* (first unfinished op) can
//! run. The head is runnable in a round when, judged by the state at the start of that round:
//! - every dep (an op of another block of the same rank) has completed, that is, ran in an
//!   earlier round;
//! - if it receives: each of its receiving connections (every peer of
//!   [`plan::Block::recv_peers`] -> this rank, the block's channel) holds a message sent in
//!   an earlier round and not yet received;
//! - if it sends: each of its sending connections (this rank -> every peer of
//!   [`plan::Block::send_peers`], the block's channel) holds fewer than `slots` messages sent
//!   but not yet received.
//!
//! Running it takes one message from every receiving connection and puts one on every
//! sending connection (a block of several peers sends the same message to each).
//! Fused ops (`rcs`, `rrs`, `rrcs`) receive and send in the same step, so they need both.
//! Rounds are synchronous: every runnable head runs, then the effects (messages sent and
//! received, ops completed) apply together. A receive frees its slot only at the end of its
//! round, so a ring of fused ops needs `slots >= 2` to move one step per round (with one slot
//! every rank waits for its successor to drain a slot that the successor can only drain by
//! sending into its own full slot: a real deadlock for a one-slot executor). `slots = 0` makes
//! every send wait forever.
//!
//! Cost. Only blocks whose state may have changed are examined in a round: a block becomes a
//! candidate when it ran in the previous round, when an op it waits for as a dep completes,
//! when a message arrives on any of its receiving connections, or when a slot frees on any of
//! its sending connections. Invariant: every unfinished block that is not a candidate is
//! blocked, and the event that could unblock it will make it a candidate. A head's
//! conditions (its deps, then its receiving connections, then its sending ones) are checked
//! in order from the first one not yet seen to hold: in a valid plan a condition that holds
//! keeps holding until the head runs (deps stay complete, and only the block itself receives
//! from its receiving connections and sends on its sending ones), so each condition of each
//! op is found to hold once, however often a block of many peers is woken. So a simulation
//! costs O(ops + deps + messages) (times a log for dep waits), where a message is one op's
//! data on one connection (at most one per op in a plan of single-peer blocks), not
//! O(rounds x blocks); ring allreduce at n = 1024 (two million ops, 2047 rounds) takes about
//! 0.1 s in a release build.
//!
//! Deadlock. When no block is a candidate and some are unfinished, each unfinished head waits
//! for an unfinished block: the block of an unfinished dep, the sending block of an empty
//! receiving connection, or the receiving block of a full sending connection (in a validated
//! plan these exist and are unfinished, because sends and receives pair up per connection:
//! the k-th receive of an empty connection waits for the k-th send, which has not run, and a
//! full connection holds a message its receiver has yet to take). A head of several peers may
//! wait on several of these; the walk takes the first, in the order above. Following one such
//! edge from block to block must close a cycle, which [`Deadlock`] lists in order, starting at
//! its lowest (rank, block). On a plan that fails [`Plan::validate`] the walk may reach
//! nothing (a dep or peer that does not exist); then the deadlock lists every blocked head
//! instead, and `closed` is false. Simulation never panics on such plans (whose rounds only
//! describe the invalid plan: with two blocks on one side of a connection, a condition seen
//! to hold may fail again before the head runs).

mod parallel;

use crate::plan::{self, Plan};
use rustc_hash::FxHashMap as HashMap;
use smallvec::SmallVec;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;

/// The round each op ran in, from a successful [`simulate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// `[rank][block][op]` -> the round (from 0) the op ran in.
    pub step: Vec<Vec<Vec<u32>>>,
    /// Rounds the whole plan took: one more than the last op's round, 0 for a plan without
    /// ops.
    pub rounds: u32,
}

/// One op of a plan, by position.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpRef {
    pub rank: u32,
    pub block: u32,
    pub op: u32,
}

impl Schedule {
    /// The round op `op` of block `block` of rank `rank` ran in.
    pub fn round_of(&self, rank: u32, block: u32, op: u32) -> Option<u32> {
        self.step
            .get(rank as usize)?
            .get(block as usize)?
            .get(op as usize)
            .copied()
    }

    /// The ops of each round, in (rank, block, op) order: one pass over the schedule.
    pub fn by_round(&self) -> Vec<Vec<OpRef>> {
        let mut rounds = vec![Vec::new(); self.rounds as usize];
        for (op_ref, round) in self.iter() {
            if let Some(list) = rounds.get_mut(round as usize) {
                list.push(op_ref);
            }
        }
        rounds
    }

    /// How many ops ran in each round.
    pub fn ops_per_round(&self) -> Vec<u32> {
        let mut counts = vec![0u32; self.rounds as usize];
        for (_, round) in self.iter() {
            if let Some(c) = counts.get_mut(round as usize) {
                *c += 1;
            }
        }
        counts
    }

    /// Every op with its round, in (rank, block, op) order.
    pub fn iter(&self) -> impl Iterator<Item = (OpRef, u32)> + '_ {
        self.step.iter().enumerate().flat_map(|(rank, blocks)| {
            blocks.iter().enumerate().flat_map(move |(block, ops)| {
                ops.iter().enumerate().map(move |(op, &round)| {
                    (
                        OpRef {
                            rank: rank as u32,
                            block: block as u32,
                            op: op as u32,
                        },
                        round,
                    )
                })
            })
        })
    }
}

/// What a blocked head waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WaitReason {
    /// Op `op` of block `block` of the same rank, a dep, has not completed.
    Dep { block: u32, op: u32 },
    /// No message has arrived from rank `peer` on channel `channel`.
    Recv { peer: u32, channel: u32 },
    /// Every slot of the connection to rank `peer` on channel `channel` holds a message the
    /// peer has not received.
    SlotFull { peer: u32, channel: u32 },
    /// Only in plans that fail [`Plan::validate`]: the op sends or receives in a block
    /// without a peer for it.
    Unconnected,
}

/// A blocked head op and what it waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiter {
    pub rank: u32,
    pub block: u32,
    pub op: u32,
    pub waits_for: WaitReason,
    /// [`plan::location`] of the op: `rank 0, block 1, op 3 (ring.coll:12:9)`.
    pub at: String,
}

/// No op can run and some have not: the ops that wait for each other.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deadlock {
    /// A cycle of the wait-for graph in order: each waiter waits for the block of the next,
    /// the last for the block of the first. When `closed` is false, every blocked head
    /// instead (in rank, block order).
    pub cycle: Vec<Waiter>,
    /// Whether `cycle` is a cycle (always, for a plan that passes [`Plan::validate`]).
    pub closed: bool,
    /// The slots per connection simulated.
    pub slots: u32,
    /// The first round in which nothing could run.
    pub round: u32,
}

impl fmt::Display for WaitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            WaitReason::Dep { block, op } => write!(f, "waits for block {block}, op {op}"),
            WaitReason::Recv { peer, channel } => {
                write!(f, "waits to receive from rank {peer} on channel {channel}")
            }
            WaitReason::SlotFull { peer, channel } => write!(
                f,
                "waits for a free slot to send to rank {peer} on channel {channel}"
            ),
            WaitReason::Unconnected => {
                f.write_str("sends or receives in a block without a peer for it")
            }
        }
    }
}

impl fmt::Display for Waiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.at, self.waits_for)
    }
}

impl fmt::Display for Deadlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = if self.slots == 1 { "" } else { "s" };
        write!(f, "deadlock with {} slot{s} per connection: ", self.slots)?;
        if self.closed {
            for w in &self.cycle {
                write!(f, "{w} -> ")?;
            }
            f.write_str("back to the start")
        } else {
            // Without a cycle to show, list a few blocked heads; the rest are in `cycle`.
            const SHOWN: usize = 8;
            f.write_str("these ops are blocked: ")?;
            for (i, w) in self.cycle.iter().take(SHOWN).enumerate() {
                if i > 0 {
                    f.write_str("; ")?;
                }
                write!(f, "{w}")?;
            }
            if self.cycle.len() > SHOWN {
                write!(f, "; and {} more", self.cycle.len() - SHOWN)?;
            }
            Ok(())
        }
    }
}

impl std::error::Error for Deadlock {}

/// Why a head cannot run, in the simulator's indices.
#[derive(Clone, Copy, Debug)]
enum Wait {
    /// A dep; `global` is the dep's block, `None` when it does not exist.
    Dep {
        block: u32,
        op: u32,
        global: Option<usize>,
    },
    Recv(Option<usize>),
    Send(Option<usize>),
}

#[derive(Debug)]
struct BlockState {
    rank: u32,
    block: u32,
    /// Index of the head op; `len` when finished.
    head: u32,
    /// Index of the block's op 0 in [`Sim::ops`].
    first_op: usize,
    len: u32,
    /// The block's connections, one per peer, in the order of the plan's peers.
    send: SmallVec<[usize; 1]>,
    recv: SmallVec<[usize; 1]>,
    /// Conditions of the head (deps, then receiving, then sending connections) already seen
    /// to hold: they hold until the head runs (module docs), so they are not checked again.
    checked: usize,
    /// Whether the block is in the next round's candidates.
    queued: bool,
    /// Blocks waiting for an op of this block as a dep: (op, waiting block), least op first,
    /// so completing an op wakes exactly those whose op is now done.
    dep_waiters: BinaryHeap<Reverse<(u32, usize)>>,
    /// The round the block's last op ran in (`u32::MAX` before its first): set and read
    /// only by the rounds on several threads ([`parallel`]).
    ran_in: u32,
}

impl BlockState {
    /// A block waiting for an op up to `op` of this one, taken off the list: once `op` has
    /// completed, each in turn.
    fn done_waiter(&mut self, op: u32) -> Option<usize> {
        match self.dep_waiters.peek() {
            Some(&Reverse((waited, waiter))) if waited <= op => {
                self.dep_waiters.pop();
                Some(waiter)
            }
            _ => None,
        }
    }
}

#[derive(Debug)]
struct Conn {
    from: u32,
    to: u32,
    channel: u32,
    /// The blocks on each side: one each in a valid plan (none where a side is missing);
    /// an invalid plan may have more, and all of them are woken.
    senders: SmallVec<[usize; 1]>,
    receivers: SmallVec<[usize; 1]>,
    sent: u64,
    received: u64,
}

/// What the simulation needs of an op, packed in a byte: the plan's ops are large and
/// visited in an order that defeats the cache, so each is read once, in order, into this
/// table. Deps stay in the plan (read where [`OpInfo::DEPS`] says there are some): copying
/// them cost 16 bytes an op, 33 MB for ring allreduce at n = 1024, most of them for none.
#[derive(Clone, Copy, Debug)]
struct OpInfo(u8);

impl OpInfo {
    const RECEIVES: u8 = 1;
    const SENDS: u8 = 2;
    const DEPS: u8 = 4;

    fn of(op: &plan::Op) -> OpInfo {
        let flag = |on: bool, bit: u8| if on { bit } else { 0 };
        OpInfo(
            flag(op.kind.receives(), Self::RECEIVES)
                | flag(op.kind.sends(), Self::SENDS)
                | flag(!op.deps.is_empty(), Self::DEPS),
        )
    }

    fn receives(self) -> bool {
        self.0 & Self::RECEIVES != 0
    }

    fn sends(self) -> bool {
        self.0 & Self::SENDS != 0
    }

    fn has_deps(self) -> bool {
        self.0 & Self::DEPS != 0
    }
}

struct Sim<'p> {
    plan: &'p Plan,
    slots: u32,
    blocks: Vec<BlockState>,
    /// Every op, block by block in rank order.
    ops: Vec<OpInfo>,
    /// Rank -> global index of its block 0.
    base: Vec<usize>,
    conns: Vec<Conn>,
    next: Vec<usize>,
}

/// Simulates `plan` with `slots` slots per connection (see the module docs).
///
/// Returns the round of every op, or the ops that wait for each other in a cycle.
pub fn simulate(plan: &Plan, slots: u32) -> Result<Schedule, Deadlock> {
    simulate_in(plan, slots, None)
}

/// [`simulate`], its rounds on `parts` threads where given (1: the serial loop), else as
/// many as [`parallel::parts`] finds worth it.
fn simulate_in(plan: &Plan, slots: u32, parts: Option<usize>) -> Result<Schedule, Deadlock> {
    let mut sim = Sim::new(plan, slots);
    // Rounds per global block, moved into the per-rank nesting at the end (no copy: a
    // plan's rounds are 4 bytes an op, 8 MB at two million).
    let mut steps: Vec<Vec<u32>> = plan
        .gpus
        .iter()
        .flat_map(|g| &g.blocks)
        .map(|b| vec![0u32; b.ops.len()])
        .collect();
    let mut current: Vec<usize> = (0..sim.blocks.len())
        .filter(|&g| sim.blocks[g].len > 0)
        .collect();
    let mut runnable = Vec::new();
    let mut round: u32 = 0;
    let mut rounds: u32 = 0;
    // A forced count still needs a plan the parallel rounds can take (`parts` checks that).
    let parts = match parts {
        Some(p) if parallel::plan_fits(&sim) => p,
        Some(_) => 1,
        None => parallel::parts(&sim),
    };
    if parts > 1 {
        rounds = parallel::run(&mut sim, &mut steps, parts);
        current.clear();
    }
    loop {
        while !current.is_empty() {
            // Decide from the state at the start of the round; registering a dep wait
            // changes no state another decision reads.
            runnable.clear();
            for &g in &current {
                sim.blocks[g].queued = false;
                if sim.blocks[g].head >= sim.blocks[g].len {
                    continue;
                }
                let Some((k, wait)) = sim.first_wait(g, sim.blocks[g].checked) else {
                    runnable.push(g);
                    continue;
                };
                sim.blocks[g].checked = k;
                // Waits on connections are woken by the peer's send or receive.
                if let Wait::Dep {
                    op,
                    global: Some(d),
                    ..
                } = wait
                {
                    sim.blocks[d].dep_waiters.push(Reverse((op, g)));
                }
            }
            for &g in &runnable {
                let b = &sim.blocks[g];
                if let Some(at) = steps.get_mut(g).and_then(|s| s.get_mut(b.head as usize)) {
                    *at = round;
                }
                sim.run_head(g);
            }
            if !runnable.is_empty() {
                rounds = round + 1;
            }
            round = round.saturating_add(1);
            current.clear();
            std::mem::swap(&mut current, &mut sim.next);
        }
        let stuck: Vec<usize> = (0..sim.blocks.len())
            .filter(|&g| sim.blocks[g].head < sim.blocks[g].len)
            .collect();
        if stuck.is_empty() {
            let mut steps = steps.into_iter();
            let step = plan
                .gpus
                .iter()
                .map(|g| steps.by_ref().take(g.blocks.len()).collect())
                .collect();
            return Ok(Schedule { step, rounds });
        }
        if stuck.iter().all(|&g| sim.wait(g).is_some()) {
            return Err(sim.deadlock(&stuck, rounds));
        }
        // A runnable block that was never woken breaks the worklist's invariant; carry on
        // from a full rescan rather than report a false deadlock.
        debug_assert!(false, "deadlock simulation missed a wake-up");
        current = stuck;
    }
}

/// The first condition of block `b`'s head (its op in `ops`, the simulation's table), from condition `from`
/// on (deps, then receiving connections, then sending ones, numbered from 0), that does
/// not hold, with its number; `None` if they all hold. `dep(block, op)` is the global index
/// of block `block` of `b`'s rank and whether its op `op` has completed; `has_message(c)`
/// and `has_room(c)` judge connection `c`: the serial loop and the rounds on several
/// threads ([`parallel`]) judge them by the state at the start of the round, each its own
/// way. Inlined into both loops: it runs once per op a round, and its closures then inline
/// with it.
#[inline(always)]
fn head_waits(
    plan: &Plan,
    ops: &[OpInfo],
    b: &BlockState,
    from: usize,
    dep: impl Fn(u32, u32) -> (Option<usize>, bool),
    has_message: impl Fn(usize) -> bool,
    has_room: impl Fn(usize) -> bool,
) -> Option<(usize, Wait)> {
    if b.head >= b.len {
        return None;
    }
    let op = *ops.get(b.first_op + b.head as usize)?;
    let deps = if op.has_deps() {
        plan.gpus
            .get(b.rank as usize)
            .and_then(|gpu| gpu.blocks.get(b.block as usize))
            .and_then(|block| block.ops.get(b.head as usize))
            .map_or(&[][..], |o| &o.deps[..])
    } else {
        &[]
    };
    for (k, d) in deps.iter().enumerate().skip(from.min(deps.len())) {
        let (global, done) = dep(d.block(), d.op());
        if !done {
            let wait = Wait::Dep {
                block: d.block(),
                op: d.op(),
                global,
            };
            return Some((k, wait));
        }
    }
    let mut base = deps.len();
    if op.receives() {
        if b.recv.is_empty() {
            return Some((base, Wait::Recv(None)));
        }
        let start = from.saturating_sub(base).min(b.recv.len());
        for (i, &c) in b.recv.iter().enumerate().skip(start) {
            if !has_message(c) {
                return Some((base + i, Wait::Recv(Some(c))));
            }
        }
        base += b.recv.len();
    }
    if op.sends() {
        if b.send.is_empty() {
            return Some((base, Wait::Send(None)));
        }
        let start = from.saturating_sub(base).min(b.send.len());
        for (i, &c) in b.send.iter().enumerate().skip(start) {
            if !has_room(c) {
                return Some((base + i, Wait::Send(Some(c))));
            }
        }
    }
    None
}

/// The global index of `rank`'s block `block` (`base`: each rank's block 0), or `None` where
/// the plan has no such block.
fn global_block(plan: &Plan, base: &[usize], rank: u32, block: u32) -> Option<usize> {
    let first = *base.get(rank as usize)?;
    let count = plan.gpus.get(rank as usize)?.blocks.len();
    (block < count as u32).then_some(first + block as usize)
}

impl<'p> Sim<'p> {
    fn new(plan: &'p Plan, slots: u32) -> Sim<'p> {
        let mut blocks = Vec::new();
        let mut base = Vec::with_capacity(plan.gpus.len());
        let mut conns: Vec<Conn> = Vec::new();
        let mut conn_ids: HashMap<(u32, u32, u32), usize> = HashMap::default();
        let mut conn = |from: u32, to: u32, channel: u32| {
            *conn_ids.entry((from, to, channel)).or_insert_with(|| {
                conns.push(Conn {
                    from,
                    to,
                    channel,
                    senders: SmallVec::new(),
                    receivers: SmallVec::new(),
                    sent: 0,
                    received: 0,
                });
                conns.len() - 1
            })
        };
        let mut ops = Vec::with_capacity(plan.op_count());
        for (r, gpu) in plan.gpus.iter().enumerate() {
            let r = r as u32;
            base.push(blocks.len());
            for (b, block) in gpu.blocks.iter().enumerate() {
                let send: SmallVec<[usize; 1]> = block
                    .send_peers()
                    .map(|q| conn(r, q, block.channel))
                    .collect();
                let recv: SmallVec<[usize; 1]> = block
                    .recv_peers()
                    .map(|p| conn(p, r, block.channel))
                    .collect();
                let first_op = ops.len();
                ops.extend(block.ops.iter().map(OpInfo::of));
                blocks.push(BlockState {
                    rank: r,
                    block: b as u32,
                    head: 0,
                    first_op,
                    len: u32::try_from(block.ops.len()).unwrap_or(u32::MAX),
                    send,
                    recv,
                    checked: 0,
                    queued: false,
                    dep_waiters: BinaryHeap::new(),
                    ran_in: u32::MAX,
                });
            }
        }
        for (g, block) in blocks.iter().enumerate() {
            for &c in &block.send {
                conns[c].senders.push(g);
            }
            for &c in &block.recv {
                conns[c].receivers.push(g);
            }
        }
        Sim {
            plan,
            slots,
            blocks,
            ops,
            base,
            conns,
            next: Vec::new(),
        }
    }

    fn global(&self, rank: u32, block: u32) -> Option<usize> {
        global_block(self.plan, &self.base, rank, block)
    }

    /// The first reason block `g`'s head cannot run now, or `None` if it can.
    fn wait(&self, g: usize) -> Option<Wait> {
        self.first_wait(g, 0).map(|(_, w)| w)
    }

    /// The first condition of block `g`'s head, from condition `from` on (deps, then
    /// receiving connections, then sending ones, numbered from 0), that does not hold now,
    /// with its number; `None` if they all hold. Costs one step per condition looked at.
    fn first_wait(&self, g: usize, from: usize) -> Option<(usize, Wait)> {
        let b = &self.blocks[g];
        let slots = u64::from(self.slots);
        head_waits(
            self.plan,
            &self.ops,
            b,
            from,
            |block, op| {
                let global = self.global(b.rank, block);
                (global, global.is_some_and(|x| self.blocks[x].head > op))
            },
            |c| self.conns[c].sent > self.conns[c].received,
            // Saturating: in an invalid plan two blocks may receive one message.
            |c| self.conns[c].sent.saturating_sub(self.conns[c].received) < slots,
        )
    }

    fn wake(&mut self, g: usize) {
        let b = &mut self.blocks[g];
        if !b.queued && b.head < b.len {
            b.queued = true;
            self.next.push(g);
        }
    }

    /// Runs block `g`'s head, which [`Sim::wait`] found runnable, and wakes every block
    /// whose wait this may end.
    fn run_head(&mut self, g: usize) {
        let (head, op) = {
            let b = &self.blocks[g];
            if b.head >= b.len {
                return;
            }
            (b.head, self.ops[b.first_op + b.head as usize])
        };
        // One message from every receiving connection, one onto every sending connection.
        if op.receives() {
            for j in 0..self.blocks[g].recv.len() {
                let c = self.blocks[g].recv[j];
                self.conns[c].received += 1;
                for i in 0..self.conns[c].senders.len() {
                    let s = self.conns[c].senders[i];
                    self.wake(s);
                }
            }
        }
        if op.sends() {
            for j in 0..self.blocks[g].send.len() {
                let c = self.blocks[g].send[j];
                self.conns[c].sent += 1;
                for i in 0..self.conns[c].receivers.len() {
                    let r = self.conns[c].receivers[i];
                    self.wake(r);
                }
            }
        }
        self.blocks[g].head = head + 1;
        self.blocks[g].checked = 0;
        while let Some(waiter) = self.blocks[g].done_waiter(head) {
            self.wake(waiter);
        }
        self.wake(g);
    }

    /// The wait as reported, and the block it waits for (if any).
    fn reason(&self, wait: Wait) -> (WaitReason, Option<usize>) {
        match wait {
            Wait::Dep { block, op, global } => (WaitReason::Dep { block, op }, global),
            Wait::Recv(Some(c)) => {
                let c = &self.conns[c];
                (
                    WaitReason::Recv {
                        peer: c.from,
                        channel: c.channel,
                    },
                    c.senders.first().copied(),
                )
            }
            Wait::Send(Some(c)) => {
                let c = &self.conns[c];
                (
                    WaitReason::SlotFull {
                        peer: c.to,
                        channel: c.channel,
                    },
                    c.receivers.first().copied(),
                )
            }
            Wait::Recv(None) | Wait::Send(None) => (WaitReason::Unconnected, None),
        }
    }

    fn waiter(&self, g: usize, waits_for: WaitReason) -> Waiter {
        let b = &self.blocks[g];
        Waiter {
            rank: b.rank,
            block: b.block,
            op: b.head,
            waits_for,
            at: plan::location(self.plan, b.rank, b.block, Some(b.head)),
        }
    }

    /// Builds the report once nothing can run; `stuck` are the unfinished blocks, in order.
    fn deadlock(&self, stuck: &[usize], round: u32) -> Deadlock {
        let mut waits: HashMap<usize, (WaitReason, Option<usize>)> = HashMap::default();
        for &g in stuck {
            if let Some(w) = self.wait(g) {
                waits.insert(g, self.reason(w));
            }
        }
        // Follow one wait edge per block from the first stuck block until a block repeats.
        let mut path: Vec<usize> = Vec::new();
        let mut seen: HashMap<usize, usize> = HashMap::default();
        let mut at = stuck.first().copied();
        let mut cycle: Option<Vec<usize>> = None;
        while let Some(g) = at {
            if let Some(&i) = seen.get(&g) {
                cycle = Some(path[i..].to_vec());
                break;
            }
            seen.insert(g, path.len());
            path.push(g);
            at = waits.get(&g).and_then(|&(_, next)| next);
        }
        match cycle {
            Some(mut c) => {
                // Start at the lowest (rank, block) so the message is stable.
                if let Some(min) = c
                    .iter()
                    .enumerate()
                    .min_by_key(|&(_, &g)| g)
                    .map(|(i, _)| i)
                {
                    c.rotate_left(min);
                }
                Deadlock {
                    cycle: c
                        .iter()
                        .filter_map(|&g| waits.get(&g).map(|&(w, _)| self.waiter(g, w)))
                        .collect(),
                    closed: true,
                    slots: self.slots,
                    round,
                }
            }
            None => Deadlock {
                cycle: stuck
                    .iter()
                    .filter_map(|&g| waits.get(&g).map(|&(w, _)| self.waiter(g, w)))
                    .collect(),
                closed: false,
                slots: self.slots,
                round,
            },
        }
    }
}

#[cfg(test)]
mod tests;
