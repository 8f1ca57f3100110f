//! An alpha-beta cost model: predicts a plan's time on a topology for a message size, and
//! the algbw/busbw that nccl-tests would print for it, so algorithms can be ranked before
//! any GPU is touched.
//!
//! # Size
//! Sizes are nccl-tests' `S`, the `size` column and `-b`/`-e` (bytes): allreduce,
//! broadcast, reduce, sendrecv (and custom): the per-rank buffer (`count × elemsize`);
//! allgather: the total output; reducescatter: the total input; alltoall: the total per
//! rank. [`nccl_count`] turns `S` into NCCL's count in 1-byte elements, as nccl-tests does
//! (rounding down for the collectives that divide by `n`), and op bytes come from
//! [`Plan::elements`] with that count, so remainders split exactly as executors split them.
//!
//! # Model
//! Each op is timed as a dataflow (`predict/dataflow.rs`): it begins when the op before it in its
//! block and its deps have ended, a receiving op ends when its message has arrived, and a
//! fused op forwards its message as it streams in, a pipeline round at a time. What an op costs:
//! - a *transfer* is charged to its sending op (the receiving op only stores or combines
//!   what arrives, overlapped with the transfer, as NCCL's fused primitives do), one per
//!   message: an op of a block of several send peers ([`crate::plan::Block::send_also`])
//!   makes one transfer to each, all starting when it begins, each on its own route, and
//!   ends when the last has ended (so it pays one `α` per round, not one per peer):
//!   `t = α + bytes / β` with
//!   - `α = route latency + protocol latency` (the sending block's protocol, else the
//!     plan's: Simple 3.4 µs, LL 0.6 µs, NCCL's NVLink per-step figures);
//!   - `β = min over the route's links ℓ of bw(ℓ) / users(ℓ, direction, s) × eff`, where
//!     `users` counts the transfers of the sending op's step `s` in the schedule crossing `ℓ`
//!     in the same direction (so a GPU sending to `k` peers at once, from `k` blocks or one
//!     block of `k` send peers, gives each `1/k` of its uplink, and `k` senders into one GPU
//!     share its downlink), and `eff` is 1 for Simple and 0.36 for LL (half of each 16-byte
//!     LL line is flags, and LL lines move slower than bulk stores: [`Model::ll_efficiency`]);
//! - a receiving op takes one message per receive peer of its block and ends no earlier
//!   than the last to arrive; one combining `k > 1` messages (a reducing receive of a block
//!   of several receive peers) also reads each once, local work costed as `k` reductions
//!   of its bytes (`k × bytes / local bandwidth`, shared as a local op's), which streams
//!   alongside the messages (`predict/dataflow.rs`) and counts in its GPU memory's load;
//! - a *local* op (copy, reduce) costs `bytes / (1500 GB/s / k)` (a device-memory copy:
//!   read and write of HBM at a third of H200's 4.8 TB/s, a bit above the 394 GB/s copy
//!   engine figure because SMs do these copies), where `k` counts the local ops of its step
//!   on the same GPU, which share its memory;
//! - `T` is the latest end of any op, or, if longer, the busiest link direction's or GPU
//!   memory's whole load at its full bandwidth (plus one latency): the rounds decide who
//!   shares a link, and ops of different rounds that overlap in time would otherwise each
//!   get all of it ([`Compiled::busiest`]; every transfer of an op of several send peers
//!   loads the links of its own route, and every combine its GPU's memory).
//!
//! The schedule's steps (`steps(rank, block, op)`; [`asap`] gives one until the deadlock
//! simulator's is used) only say which ops share a link or memory; the time does not add up
//! synchronous steps, so a round in which only receives complete costs what waiting for
//! those messages costs, and a chain of fused forwards costs one transfer and a pipeline
//! round ([`Model::pipeline_bytes`]) per hop, not a transfer per hop.
//!
//! What it does not see: link sharing comes from the rounds, so ops of one round that the
//! dataflow runs one after another (a dep between them) are still charged as sharing a
//! link, and ops of different rounds that overlap are bounded only through the busiest
//! link. Sharing by overlap in time (re-timing with each transfer's bandwidth divided by the
//! mean number of transfers on its link during it) was tried: it changed 2-rank choices on
//! differences of 3–4% at 1 MiB, below what the model is known to resolve, so it waits for a
//! calibration against runs on 4 and more GPUs.
//!
//! Then `algbw = S / T` and `busbw = algbw × factor` ([`bus_factor`]: allreduce `2(n-1)/n`;
//! allgather, reducescatter, alltoall `(n-1)/n`; broadcast, reduce, sendrecv, custom 1).
//!
//! Switch-group transfers (ops sharing a group id) are costed pairwise, as the GPU executor
//! runs them (peer loads/stores; the measured machine, 2 × H200 on an NVSwitch, has NVLink
//! multicast off).
//!
//! The critical path ([`Compiled::critical_path`]) names, for an op receiving several
//! messages, the one it waited for: the last to arrive ([`Waited`], [`Arrived`]); an op of
//! one message is explained in the same words as before blocks of several peers.
//!
//! Invariants: a prediction never panics on any plan or topology; [`Compiled`] holds
//! everything that does not depend on the size, so a sweep resolves routes, link sharing
//! and steps once; time is non-decreasing in size for a fixed plan (every term is); messages
//! are paired as [`crate::dump::transfers`] pairs them (per connection, for every peer of a
//! block), and a plan whose blocks have one peer each is costed exactly as before blocks of
//! several peers existed (same items in the same order, same arithmetic).

use crate::dump::OpRef;
use crate::elaborate::Protocol;
use crate::ids::LinkId;
use crate::plan::{Plan, chunk_start};
use crate::topology::Topology;
use coll_lang::builtins::CollectiveKind;
use std::fmt::Write;

/// The smallest size of the default sweep (nccl-tests' usual `-b 8`).
pub const SWEEP_MIN: u64 = 8;
/// The largest size of the default sweep (`-e 1G`).
pub const SWEEP_MAX: u64 = 1 << 30;

/// The model's figures. [`Model::default`] is what [`predict`] uses.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Model {
    /// Per-transfer protocol latency of Simple, µs (NCCL's NVLink figure).
    pub simple_latency_us: f64,
    /// Per-transfer protocol latency of LL, µs.
    pub ll_latency_us: f64,
    /// Share of the link bandwidth LL carries as data: half of each 16-byte line is flags,
    /// and the GPU executor's LL lines move slower than its bulk stores besides (a CTA stores
    /// about 3 GB/s of lines). 0.36 is the fit to 2 × H200 (2026-11-28): LL calls of every
    /// shipped algorithm, 64 KiB to 4 MiB, took 1.4 times the transfer time per byte of
    /// bulk calls at 0.5 (`bench/results/2026-11-28-h200x2-model-fit.md`).
    pub ll_efficiency: f64,
    /// Bandwidth of local copies and reductions, GB/s.
    pub local_bandwidth_gbs: f64,
    /// Fixed cost of a local op, µs. Zero: within a running kernel an op is dispatched in
    /// well under the transfer latencies above.
    pub local_latency_us: f64,
    /// What a fused op forwards at a time as a message streams in, at most: the GPU
    /// executor cuts a message into slices of at most one 512 KiB staging slot that take
    /// turns on up to 64 sub-CTAs, each forwarding its slice once it has landed, so a message
    /// streams through in rounds of up to 32 MiB (and one smaller than that is forwarded
    /// whole once it has arrived). A fused op's tail after its message has arrived is one
    /// latency and this many bytes (`predict/dataflow.rs`).
    pub pipeline_bytes: u64,
    /// Every transfer costed as this protocol, whatever the plan and its blocks say: the GPU
    /// executor runs a whole call in one protocol, chosen by the call's size, and reads no
    /// protocol hint (`coll bench --auto` fits each measured size with the protocol it ran).
    /// `None`: each block's protocol, else the plan's.
    pub protocol: Option<Protocol>,
}

impl Default for Model {
    fn default() -> Self {
        Model {
            simple_latency_us: 3.4,
            ll_latency_us: 0.6,
            ll_efficiency: 0.36,
            local_bandwidth_gbs: 1500.0,
            local_latency_us: 0.0,
            pipeline_bytes: 32 << 20,
            protocol: None,
        }
    }
}

impl Model {
    fn protocol(&self, p: Protocol) -> (f64, f64) {
        match p {
            Protocol::Simple => (self.simple_latency_us, 1.0),
            Protocol::Ll => (self.ll_latency_us, self.ll_efficiency),
        }
    }
}

/// One predicted point, in nccl-tests' terms.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prediction {
    /// nccl-tests' `S` actually moved: the requested size rounded down to what the count
    /// can express (see the module docs).
    pub size_bytes: u64,
    /// NCCL's count, in 1-byte elements.
    pub count: u64,
    pub time_us: f64,
    pub algbw_gbs: f64,
    pub busbw_gbs: f64,
}

/// Why a plan cannot be costed on a topology.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PredictError {
    #[error("the plan has {plan} ranks but topology `{topology}` has {available}")]
    Ranks {
        plan: u32,
        topology: String,
        available: usize,
    },
    #[error("topology `{topology}` has no route from rank {from} to rank {to}")]
    NoRoute {
        topology: String,
        from: u32,
        to: u32,
    },
    #[error("{at}: the schedule gives this op no step (it never runs)")]
    Unscheduled { at: String },
}

/// The schedule argument: the step of op `(rank, block, op)`, `None` if it never runs.
pub type Steps<'a> = &'a dyn Fn(u32, u32, u32) -> Option<u32>;

/// What one transfer or local op costs, minus the size.
#[derive(Clone, Copy, Debug)]
struct Item {
    /// Fixed part, µs.
    latency_us: f64,
    /// Effective bandwidth, GB/s (= bytes per ns, i.e. 1e3 bytes per µs).
    bandwidth_gbs: f64,
    /// Plan chunks `[offset, offset + count)`.
    offset: u64,
    count: u64,
    /// How many items of its step share its bandwidth (its busiest link, or its GPU's
    /// memory), itself included.
    sharing: u32,
}

impl Item {
    /// The cost for NCCL count `count` of a plan split in `k`, with the model's pipeline
    /// round `slot_bytes` for a fused op's tail.
    fn cost(&self, count: u64, k: u64, slot_bytes: u64) -> dataflow::Cost {
        let bytes = chunk_start(count, k, self.offset.saturating_add(self.count))
            .saturating_sub(chunk_start(count, k, self.offset));
        // GB/s is 1e3 bytes per µs.
        let per_byte = 1.0 / (self.bandwidth_gbs * 1e3);
        dataflow::Cost {
            latency_us: self.latency_us,
            transfer_us: bytes as f64 * per_byte,
            slot_us: bytes.min(slot_bytes) as f64 * per_byte,
        }
    }
}

/// One op on the path that bounds a prediction ([`Compiled::critical_path`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PathOp {
    pub op: OpRef,
    /// When it began and ended, µs from the call's start.
    pub begin_us: f64,
    pub end_us: f64,
    /// What held it back: the op before it on the path, and how.
    pub waited: Waited,
    /// How many items of its step share its link or memory, itself included (1 for an op
    /// with nothing to cost, such as a plain receive; for an op with several transfers or a
    /// combine, the most any of them shares with).
    pub sharing: u32,
}

/// Why an op on the critical path began or ended when it did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waited {
    /// Nothing: it began at once.
    Nothing,
    /// The op before it on the path, the one before it in its block, had to end.
    Block,
    /// The op before it on the path, one of its deps (in another block), had to end.
    Dep,
    /// It receives the message of the op before it on the path (the last of its messages
    /// to arrive).
    Message(Arrived),
    /// It forwards that message as it streams in, and began with its first bytes (the last
    /// of its messages to begin arriving).
    FirstBytes(Arrived),
    /// It forwards that message, and ended one pipeline round after the message did (the
    /// last of its messages to arrive).
    ForwardedEnd(Arrived),
}

/// Which of an op's messages held it back ([`Waited`]): the one from rank `from`, of the
/// `of` messages it receives (one per receive peer of its block).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arrived {
    pub from: u32,
    pub of: u32,
}

impl Waited {
    /// For `--explain`: what the op waited for. For an op receiving one message the words
    /// are fixed (snapshots of plans hold them); one receiving several names the message.
    pub fn describe(self) -> std::borrow::Cow<'static, str> {
        match self {
            Waited::Nothing => "nothing: it begins at once".into(),
            Waited::Block => "the op before it in its block".into(),
            Waited::Dep => "a dep".into(),
            Waited::Message(a) if a.of > 1 => format!(
                "the last of its {} messages to arrive (from rank {})",
                a.of, a.from
            )
            .into(),
            Waited::FirstBytes(a) if a.of > 1 => format!(
                "the first bytes of the last of its {} messages to begin (from rank {}), \
                 which it forwards",
                a.of, a.from
            )
            .into(),
            Waited::ForwardedEnd(a) if a.of > 1 => format!(
                "the end of the last of its {} messages to arrive (from rank {}), which it \
                 forwards",
                a.of, a.from
            )
            .into(),
            Waited::Message(_) => "the message it receives".into(),
            Waited::FirstBytes(_) => "the first bytes of the message it forwards".into(),
            Waited::ForwardedEnd(_) => "the end of the message it forwards".into(),
        }
    }
}

/// A plan costed on a topology for a schedule, ready to evaluate at any size.
#[derive(Clone, Debug)]
pub struct Compiled {
    collective: CollectiveKind,
    ranks: u32,
    chunk_factor: u64,
    pipeline_bytes: u64,
    /// Every transfer (charged to its sending op), local op and combine of several messages,
    /// with its step's sharing.
    items: Vec<Item>,
    /// The ops as a dataflow, costs indexing `items`.
    graph: dataflow::Graph,
    /// What each link direction and each GPU's memory carries in all, whatever the rounds:
    /// the dataflow shares bandwidth only among the ops of one round, and ops of different
    /// rounds that overlap in time still cannot move more than the link does.
    loads: Vec<Load>,
}

/// Everything one link direction or one GPU's memory carries: items with the bandwidth
/// each would get alone (GB/s).
#[derive(Clone, Debug)]
struct Load {
    of: LoadOf,
    items: Vec<(u32, f64)>,
}

/// What a link's or memory's load is the load of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadOf {
    /// A link, in the direction from its first end to its second (`forward`) or back.
    Link { link: LinkId, forward: bool },
    /// The memory of plan rank `rank`'s GPU, which its local copies and reductions share.
    Memory { rank: u32 },
}

/// The busiest link or memory at one size ([`Compiled::busiest`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Busiest {
    pub of: LoadOf,
    /// Transfers or local ops it carries.
    pub items: usize,
    /// The least latency among them, and all their bytes at its full bandwidth: no plan
    /// moves its data through it faster.
    pub time: Time,
}

impl Compiled {
    /// The link direction or GPU memory whose whole load takes longest at `size_bytes`.
    pub fn busiest(&self, size_bytes: u64) -> Option<Busiest> {
        let count = nccl_count(self.collective, size_bytes, self.ranks);
        let k = self.chunk_factor;
        let mut best: Option<Busiest> = None;
        for load in &self.loads {
            let mut time = Time {
                latency_us: f64::INFINITY,
                transfer_us: 0.0,
            };
            for &(i, bw) in &load.items {
                let Some(it) = self.items.get(i as usize) else {
                    continue;
                };
                let alone = Item {
                    bandwidth_gbs: bw,
                    ..*it
                };
                let c = alone.cost(count, k, self.pipeline_bytes);
                time.latency_us = time.latency_us.min(c.latency_us);
                time.transfer_us += c.transfer_us;
            }
            if !time.latency_us.is_finite() {
                continue;
            }
            if best.is_none_or(|b| time.total() > b.time.total()) {
                best = Some(Busiest {
                    of: load.of,
                    items: load.items.len(),
                    time,
                });
            }
        }
        best
    }

    /// Every op timed at nccl-tests size `size_bytes`.
    fn timed(&self, size_bytes: u64) -> dataflow::Timed {
        self.graph.time(self.costs_at(size_bytes))
    }

    /// What each item (by index) costs at nccl-tests size `size_bytes`.
    fn costs_at(&self, size_bytes: u64) -> impl Fn(u32) -> dataflow::Cost + '_ {
        let count = nccl_count(self.collective, size_bytes, self.ranks);
        let k = self.chunk_factor;
        move |i| {
            self.items
                .get(i as usize)
                .map_or(dataflow::Cost::default(), |it| {
                    it.cost(count, k, self.pipeline_bytes)
                })
        }
    }

    /// The prediction for nccl-tests size `size_bytes` (see the module docs).
    pub fn at(&self, size_bytes: u64) -> Prediction {
        let count = nccl_count(self.collective, size_bytes, self.ranks);
        let s = size_of_count(self.collective, count, self.ranks);
        let time_us = self.parts(size_bytes).total();
        let algbw_gbs = if time_us > 0.0 {
            s as f64 / (time_us * 1e3)
        } else {
            0.0
        };
        Prediction {
            size_bytes: s,
            count,
            time_us,
            algbw_gbs,
            busbw_gbs: algbw_gbs * bus_factor(self.collective, self.ranks),
        }
    }

    /// The prediction at `size_bytes` split into its fixed part and its size-proportional
    /// part, µs (summed along the path that bounds it): their total is [`Compiled::at`]'s
    /// time; [`calibrate`] fits the two.
    pub fn parts(&self, size_bytes: u64) -> Time {
        let path = self
            .graph
            .last(self.costs_at(size_bytes))
            .map_or(Time::ZERO, |(_, t)| t);
        match self.busiest(size_bytes) {
            Some(b) if b.time.total() > path.total() => b.time,
            _ => path,
        }
    }

    /// The ops that bound the dataflow at `size_bytes`, first to last: each began when the
    /// one before it let it ([`PathOp::waited`]), and the last ends at the plan's time unless
    /// the busiest link or memory takes longer ([`Compiled::busiest`]).
    /// Where a plan pays shows here: a chain of store-and-forward hops, a block busy with
    /// other work, a slow link shared.
    pub fn critical_path(&self, size_bytes: u64) -> Vec<PathOp> {
        let timed = self.timed(size_bytes);
        timed
            .critical_path()
            .into_iter()
            .filter_map(|n| {
                let node = self.graph.nodes.get(n as usize)?;
                // The message from sending node `s`: its rank, of how many this op receives.
                let arrived = |s: u32| Arrived {
                    from: self
                        .graph
                        .nodes
                        .get(s as usize)
                        .map_or(u32::MAX, |p| p.at.rank),
                    of: u32::try_from(node.from.len()).unwrap_or(u32::MAX),
                };
                let waited = match timed.why[n as usize] {
                    dataflow::Why::First => Waited::Nothing,
                    dataflow::Why::Waited(w) => {
                        let before = self.graph.nodes.get(w as usize).map(|p| p.at);
                        let in_block = OpRef {
                            op: node.at.op.wrapping_sub(1),
                            ..node.at
                        };
                        if before == Some(in_block) {
                            Waited::Block
                        } else {
                            Waited::Dep
                        }
                    }
                    dataflow::Why::Message(s) => Waited::Message(arrived(s)),
                    dataflow::Why::StreamStart(s) => Waited::FirstBytes(arrived(s)),
                    dataflow::Why::StreamEnd(s) => Waited::ForwardedEnd(arrived(s)),
                };
                let sharing = node
                    .costs
                    .iter()
                    .chain(&node.combine)
                    .filter_map(|&c| self.items.get(c as usize))
                    .map(|it| it.sharing)
                    .max()
                    .unwrap_or(1);
                Some(PathOp {
                    op: node.at,
                    begin_us: timed.begin[n as usize].total(),
                    end_us: timed.end[n as usize].total(),
                    waited,
                    sharing,
                })
            })
            .collect()
    }
}

/// Predicts `plan` on `topo` at nccl-tests size `size_bytes` for the schedule `steps`, with
/// the default [`Model`].
pub fn predict(
    plan: &Plan,
    topo: &Topology,
    size_bytes: u64,
    steps: Steps<'_>,
) -> Result<Prediction, PredictError> {
    Ok(Compiled::new(plan, topo, steps, &Model::default())?.at(size_bytes))
}

/// Predicts `plan` on `topo` at each size, with the [`asap`] schedule and the default model.
pub fn predict_sweep(
    plan: &Plan,
    topo: &Topology,
    sizes: &[u64],
) -> Result<Vec<Prediction>, PredictError> {
    let schedule = asap(plan);
    predict_sweep_with(
        plan,
        topo,
        sizes,
        &|r, b, o| schedule.step(r, b, o),
        &Model::default(),
    )
}

/// [`predict_sweep`] with a given schedule and model.
pub fn predict_sweep_with(
    plan: &Plan,
    topo: &Topology,
    sizes: &[u64],
    steps: Steps<'_>,
    model: &Model,
) -> Result<Vec<Prediction>, PredictError> {
    let c = Compiled::new(plan, topo, steps, model)?;
    // Each size is a pass over every op: sizes side by side (a ring at n = 1024 has two
    // million ops and a sweep 28 sizes).
    let ops = plan.op_count();
    let parallel = crate::par::worth(ops.saturating_mul(sizes.len()));
    Ok(crate::par::map_ref(parallel, sizes, |_, &s| c.at(s)))
}

/// Powers of two from `min` to `max` (both rounded up to a power of two, `min` at least 1),
/// as nccl-tests' `-f 2` steps: [`SWEEP_MIN`]..=[`SWEEP_MAX`] gives 8 B .. 1 GiB.
pub fn sweep_sizes(min: u64, max: u64) -> Vec<u64> {
    let mut out = Vec::new();
    // No power of two fits in a u64 above 2^63: then the sweep is empty.
    let Some(mut s) = min.max(1).checked_next_power_of_two() else {
        return out;
    };
    while s <= max {
        out.push(s);
        match s.checked_mul(2) {
            Some(n) => s = n,
            None => break,
        }
    }
    out
}

/// NCCL's count (1-byte elements) for nccl-tests size `size_bytes` over `n` ranks.
pub fn nccl_count(c: CollectiveKind, size_bytes: u64, n: u32) -> u64 {
    match c {
        CollectiveKind::AllGather | CollectiveKind::ReduceScatter | CollectiveKind::AllToAll => {
            size_bytes / u64::from(n.max(1))
        }
        _ => size_bytes,
    }
}

/// nccl-tests' `S` for a count: the inverse of [`nccl_count`] on the sizes it can express.
pub fn size_of_count(c: CollectiveKind, count: u64, n: u32) -> u64 {
    match c {
        CollectiveKind::AllGather | CollectiveKind::ReduceScatter | CollectiveKind::AllToAll => {
            count.saturating_mul(u64::from(n))
        }
        _ => count,
    }
}

/// nccl-tests' busbw factor: busbw = algbw × factor.
pub fn bus_factor(c: CollectiveKind, n: u32) -> f64 {
    let n = f64::from(n.max(1));
    match c {
        CollectiveKind::AllReduce => 2.0 * (n - 1.0) / n,
        CollectiveKind::AllGather | CollectiveKind::ReduceScatter | CollectiveKind::AllToAll => {
            (n - 1.0) / n
        }
        CollectiveKind::Broadcast
        | CollectiveKind::Reduce
        | CollectiveKind::SendRecv
        | CollectiveKind::Custom => 1.0,
    }
}

/// Predictions as a markdown table: size, time, algbw, busbw, numbers right-aligned.
pub fn table(rows: &[Prediction]) -> String {
    let head = ["size (B)", "time (µs)", "algbw (GB/s)", "busbw (GB/s)"];
    let cells: Vec<[String; 4]> = rows
        .iter()
        .map(|p| {
            [
                p.size_bytes.to_string(),
                format!("{:.2}", p.time_us),
                format!("{:.2}", p.algbw_gbs),
                format!("{:.2}", p.busbw_gbs),
            ]
        })
        .collect();
    let mut w = head.map(|h| h.chars().count());
    for row in &cells {
        for (w, c) in w.iter_mut().zip(row) {
            *w = (*w).max(c.len());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, row: &[String; 4]| {
        out.push('|');
        for (c, &w) in row.iter().zip(&w) {
            let _ = write!(out, " {c:>w$} |");
        }
        out.push('\n');
    };
    line(&mut out, &head.map(str::to_string));
    out.push('|');
    for &w in &w {
        let _ = write!(out, "{}:|", "-".repeat(w + 1));
    }
    out.push('\n');
    for row in &cells {
        line(&mut out, row);
    }
    out
}

mod asap;
mod build;
mod calibrate;
mod dataflow;
pub use asap::{Schedule, asap};
pub use calibrate::{Calibration, ProtocolCalibration, calibrate, calibrate_by_protocol};
pub use dataflow::Time;

#[cfg(test)]
mod tests;
