//! Lowering: the proved chunk operations of a program become per-rank schedules — thread
//! blocks of send / recv / recv-reduce / fused / local ops with explicit dependencies — the
//! [`Plan`].
//!
//! Steps, in order:
//! 1. *Granularity.* `instances` replicate the program over more channels and `pipeline`
//!    splits chunks into pieces, so a plan chunk is `1 / (instances × lcm(pipelines))` of a
//!    program chunk. Runs of consecutive transfers with the same pipeline depth are emitted
//!    piece-major, so piece 0 travels the whole chain while piece 1 follows (pieces of
//!    different index never overlap in memory, which makes the reordering safe).
//! 2. *Per-rank ops.* A transfer between ranks becomes a send on one and a recv (or
//!    recv-reduce) on the other over the topology's route; one on a rank is a local copy or
//!    reduce; switch-group forms become one pair per member rank, sharing a group id. Then
//!    *copy folding* (`fold.rs`) removes the local copies a rank can do without; a scratch
//!    buffer no op touches any more is dropped from the plan. Last, the *order*: each
//!    rank's folded ops stay in program order, or (a candidate) follow a list schedule of
//!    the hazard DAG of transfers and local ops (`schedule.rs`): critical path first, every
//!    ready transfer in the earliest round its connection sides are free.
//! 3. *Blocks* (`blocks.rs`). A block has at most one send peer, one recv peer and one
//!    channel (as in MSCCL), and a connection (rank, peer, channel) belongs to one block per
//!    side, so its messages stay in order. First fit: new connections join the first block
//!    of their channel with that side free, which gives rings one block per rank per
//!    channel. Per connection (candidates): each side its own block, receive and send sides
//!    merged where receives fuse with the sends that forward them.
//! 4. *Hoisting and fusion.* A send whose data was produced in its own block moves up past
//!    receives and local ops that do not write its data, so it follows the receive that
//!    produced it; adjacent receive + send of the same chunks fuse into recv-copy-send,
//!    recv-reduce-copy-send, or recv-reduce-send when the stored result is dead; a copy
//!    joins an earlier send of the same chunks in its block as one copy-send.
//! 5. *Dependencies.* Per rank, in the order of step 2, an op waits for the last writer of
//!    what it reads (RAW), and a writer for the last writer and the readers since (WAW,
//!    WAR), when those are in other blocks; only the latest op per block is kept. A plan
//!    made out of place from an in-place program computes them as if `input` and `output`
//!    aliased, so an in-place call of it is ordered too.
//! 6. *Choice* (`choose.rs`). Steps 3 to 5 run for every candidate (channels × order ×
//!    blocks; the compiler's channels, `channels.rs`, give unhinted independent transfers
//!    between a pair connections of their own, applied before step 2's order); each
//!    must pass the deadlock simulation, the resource limits and (if not the program as
//!    written) the race check; the cost model picks one and [`Plan::schedule`] records
//!    why. `explain.rs` prints that record, the blocks and the critical path.
//!
//! Invariant: the plan computes what the program computes. Folding keeps every value that
//! is read or ends in `input` or `output` (see `fold.rs`); every reordering in steps 1, 2
//! and 4 swaps only ops that touch disjoint chunks (step 2's order is a topological order
//! of the hazards, in which a connection's messages keep one order at both ends: a send
//! and its receive stay together, or each connection side keeps its order), so the order
//! of conflicting accesses on each rank is the program's, and both ends of every
//! connection agree on its messages. Scratch renaming moves a value to another version of
//! its scratch chunk, never what an op reads (see `rename.rs`).
//!
//! Files: `emit.rs` steps 1 and 2, `fold.rs` folding, `channels.rs` the compiler's
//! channels, `split.rs` transfers cut into chunks and `rename.rs` scratch renaming (both
//! for candidates of step 6), `schedule.rs` the order of step 2, `blocks.rs` step 3,
//! `rank_plan.rs` steps 3 to 5 for one rank, this file the plan's assembly, `copy_send.rs` step 4c, `hints.rs` the warnings
//! about channel hints, `choose.rs` step 6, `chunks.rs` the chunk numbering they share,
//! `explain.rs` the explanation, `stream.rs` steps 1 to 5 rank by rank for the program as
//! written when it is the only candidate (large plans), from the program's ops by rank.

use crate::elaborate::{ChunkOp, Elaborated, Protocol};
use crate::error::CompileError;
use crate::par;
use crate::plan::{self, BufferDecl, OpKind, Plan, RankPlan, Slice, Via};
use crate::topology::Topology;
use coll_lang::{Diagnostic, SourceFile, Span};
use rustc_hash::FxHashMap as HashMap;

mod blocks;
mod channels;
mod choose;
mod chunks;
mod copy_send;
mod emit;
mod explain;
mod fold;
mod hints;
mod merge_peers;
mod note;
mod peers;
mod pick;
mod rank_plan;
mod rename;
mod schedule;
mod split;
mod stream;
use blocks::BlockB;
use chunks::Chunks;
use peers::{Peers, expected_ops, routes_from};

pub use choose::{
    CANDIDATE_OP_LIMIT, Candidate, Channels, Order, PREDICT_SIZES, Packing, ScheduleContext,
    ScheduleNote,
};
pub use explain::{explain, explain_costs};
pub use hints::Warning;

/// Switches for the optimisations, so a failing plan can be compared with a plain one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LowerOptions {
    pub hoist_sends: bool,
    pub fuse: bool,
    /// Remove the local copies a rank can do without (`fold.rs`).
    pub fold_copies: bool,
    /// Which schedules to try (`choose.rs`).
    pub scheduling: Scheduling,
    /// Also try blocks of several peers (`merge_peers.rs`); off for formats whose blocks
    /// have one peer a side (MSCCL-IR).
    pub several_peers: bool,
    /// Also try transfers cut into chunks (`split.rs`); off to see a program's transfers
    /// as written (the ports' check of their moves against the originals').
    pub split_transfers: bool,
}

/// Which candidate schedules the lowering tries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheduling {
    /// The program as written: program order, first-fit blocks.
    AsWritten,
    /// Every candidate; the cost model chooses.
    Choose,
    /// This candidate alone (to test or compare it), or the program as written where it
    /// fails a check (or, for the compiler's channels, where they change nothing).
    Only(Channels, Order, Packing),
    /// This candidate with its blocks of several peers (`merge_peers.rs`), which the cost
    /// model may not choose (it has no per-op cost, what a latency-bound plan saves); the
    /// candidate unmerged where no merge applies or the merged plan fails a check (the plan's
    /// schedule note says which).
    OnlyMerged(Channels, Order, Packing),
}

impl Default for LowerOptions {
    fn default() -> Self {
        LowerOptions {
            hoist_sends: true,
            fuse: true,
            fold_copies: true,
            scheduling: Scheduling::Choose,
            several_peers: true,
            split_transfers: true,
        }
    }
}

/// A plan and, parallel to [`Plan::sources`], the spans the sources came from.
#[derive(Clone, Debug)]
pub struct Lowered {
    /// Shared with [`crate::Compiled::plan`]'s validated plan: change it through
    /// `Arc::make_mut`, which copies it first.
    pub plan: std::sync::Arc<Plan>,
    pub spans: Vec<Span>,
    /// The deadlock simulation of `plan` with the context's slots, when the choice among
    /// candidates ran it (it did unless no candidate passed).
    pub simulated: Option<crate::check::Schedule>,
    /// `with channel` hints the lowering cannot honour (`hints.rs`), in source order.
    pub warnings: Vec<Warning>,
    /// Whether `plan` passed [`Plan::validate`] already (the streamed lowering checks it
    /// beside the simulation), so that callers need not check it again.
    pub validated: bool,
}

/// Pieces a chunk may be cut into at most (instances × pipeline).
pub const MAX_PIECES: u64 = 1024;

type Diag = Box<Diagnostic<CompileError>>;

/// Per op of a rank, the ops (indices in its list) that last wrote its source before it,
/// ascending: one flat list with each op's start, as `u32` (`schedule_rank` checks that op
/// indices fit). A small vector per op took 32 bytes each, written, read and dropped one by
/// one over a rank's thousands of ops; most have one writer or none.
struct Writers {
    /// Where each op's writers start in `flat`; one more entry than ops.
    start: Vec<usize>,
    flat: Vec<u32>,
}

impl Writers {
    /// The writers of op `i`.
    fn of(&self, i: usize) -> &[u32] {
        &self.flat[self.start[i]..self.start[i + 1]]
    }
}

/// One op of one rank before it is placed in a block.
#[derive(Clone, Debug)]
struct ROp {
    kind: OpKind,
    src: Option<Slice>,
    dst: Option<Slice>,
    count: u32,
    send: Option<(u32, Via)>,
    recv: Option<(u32, Via)>,
    channel: u32,
    source: u32,
    group: Option<u32>,
    protocol: Option<Protocol>,
}

impl ROp {
    /// A local copy or reduce (`kind`) of `count` chunks from `src` to `dst`: no peer, and
    /// no switch group (only transfers belong to one).
    fn local(
        kind: OpKind,
        (src, dst): (Slice, Slice),
        count: u32,
        channel: u32,
        source: u32,
        protocol: Option<Protocol>,
    ) -> ROp {
        ROp {
            kind,
            src: Some(src),
            dst: Some(dst),
            count,
            send: None,
            recv: None,
            channel,
            source,
            group: None,
            protocol,
        }
    }

    /// The chunks it reads as its source.
    fn reads_src(&self) -> Option<Slice> {
        self.src.filter(|_| self.kind.needs_src())
    }

    /// The chunks it writes.
    fn writes(&self) -> Option<Slice> {
        self.dst.filter(|_| self.kind.needs_dst())
    }

    /// Everything it reads: its source, and its destination when it is a local reduce.
    fn reads(&self) -> impl Iterator<Item = Slice> {
        let dst = self.dst.filter(|_| self.kind == OpKind::Reduce);
        self.reads_src().into_iter().chain(dst)
    }
}

/// Lowers an elaborated (and proved) program for a topology, choosing among candidate
/// schedules with the default slots and limits ([`lower_with`]).
pub fn lower(
    e: &Elaborated,
    topo: &Topology,
    file: &SourceFile,
    options: &LowerOptions,
) -> Result<Lowered, Box<Diagnostic<CompileError>>> {
    lower_with(e, topo, file, options, &ScheduleContext::default())
}

/// Lowers an elaborated (and proved) program for a topology: emits and folds every rank's
/// ops, then lowers the candidate schedules and keeps the best that passes the checks with
/// `ctx`'s slots and limits (`choose.rs`), recording the choice in [`Plan::schedule`].
pub fn lower_with(
    e: &Elaborated,
    topo: &Topology,
    file: &SourceFile,
    options: &LowerOptions,
    ctx: &ScheduleContext,
) -> Result<Lowered, Box<Diagnostic<CompileError>>> {
    // Scratch renaming needs folding (to drop the versions no op touches) and cut
    // transfers (`rename.rs`); its versions join the program's buffers for every candidate
    // (and for the streamed lowering, which touches none of them).
    let renaming = options.fold_copies
        && options.split_transfers
        && options.scheduling != Scheduling::AsWritten;
    // Both only read the program: looking for versions runs beside the set-up for the
    // program as it is, which most programs (those without versions) keep.
    let (versions, plain) = par::join(
        par::worth(e.ops.len()),
        || renaming.then(|| rename::versions(e)).flatten(),
        || Lowering::new(e, topo, file),
    );
    let renamed = versions.map(|v| rename::with_versions(e, &v));
    let mut l = match renamed.as_ref() {
        Some((with_versions, of)) => {
            let mut l = Lowering::new(with_versions, topo, file)?;
            l.versions = of.clone();
            l
        }
        None => plain?,
    };
    if let Some(lowered) = l.lower_streamed(options, ctx) {
        return Ok(lowered);
    }
    l.lower_candidates(options, ctx)
}

struct Lowering<'a> {
    e: &'a Elaborated,
    topo: &'a Topology,
    file: &'a SourceFile,
    /// Plan chunks per program chunk (`instances × pipeline`).
    pieces: u64,
    /// Pieces of one instance's part of a chunk (`lcm` of the pipeline depths).
    depth: u64,
    channels_per_instance: u32,
    ranks: Vec<Vec<ROp>>,
    /// Ops emission gives each rank, at most (`expected_ops`).
    expected: Vec<usize>,
    sources: Vec<String>,
    spans: Vec<Span>,
    source_of: HashMap<Span, u32>,
    /// Routes from each rank, computed on first use (one Dijkstra per source rank).
    routes: Vec<Option<Vec<Option<Via>>>>,
    /// The last span given a source index: consecutive ops mostly share one.
    last_source: Option<(Span, u32)>,
    groups: u32,
    /// For each buffer, the buffers that are its versions for scratch renaming
    /// (`rename.rs`); empty unless the program's buffers were given versions.
    versions: Vec<Vec<u32>>,
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

impl<'a> Lowering<'a> {
    fn new(e: &'a Elaborated, topo: &'a Topology, file: &'a SourceFile) -> Result<Self, Diag> {
        let pipe = |op: &ChunkOp| {
            if op.pipeline > 0 {
                u64::from(op.pipeline)
            } else {
                u64::from(e.pipeline)
            }
        };
        // One pass over the program's ops for both (each pass is memory-bound).
        let depth_and_channels = || {
            let mut depth = u64::from(e.pipeline.max(1));
            let mut max_channel = 0;
            for op in &e.ops {
                max_channel = max_channel.max(if op.channel == u16::MAX {
                    e.channel.unwrap_or(0)
                } else {
                    u32::from(op.channel)
                });
                let p = pipe(op);
                depth = depth / gcd(depth, p) * p;
                if depth * u64::from(e.instances) > MAX_PIECES {
                    return Err(Box::new(
                        Diagnostic::new(
                            CompileError::TooLarge {
                                what: "instances × pipeline depths (pieces per chunk)".into(),
                                max: MAX_PIECES,
                                value: depth * u64::from(e.instances),
                            },
                            op.span,
                        )
                        .with_label("this pipeline depth makes it too many"),
                    ));
                }
            }
            Ok((depth, max_channel))
        };
        // The ops each rank expects, counted beside the pass above for chunks in one piece
        // (most programs), again where the pass finds them cut into several.
        let big = par::worth(e.ops.len());
        let (found, counted) = par::join(big, depth_and_channels, || expected_ops(e, 1));
        let (depth, max_channel) = found?;
        let pieces = depth * u64::from(e.instances);
        let (expected, peers) = if pieces == 1 {
            counted
        } else {
            expected_ops(e, pieces)
        };
        // Every sender's routes up front, in parallel: to each peer when it has few (a
        // ring's rank has one), else to every rank at once.
        let routes = par::map_ref(big, &peers, |r, p| {
            let sends = !matches!(p, Peers::Few(list) if list.is_empty());
            sends.then(|| routes_from(topo, r as u32, p))
        });
        Ok(Lowering {
            e,
            topo,
            file,
            pieces,
            depth,
            channels_per_instance: max_channel + 1,
            ranks: vec![Vec::new(); e.n as usize],
            expected,
            sources: Vec::new(),
            spans: Vec::new(),
            source_of: HashMap::default(),
            routes,
            last_source: None,
            groups: 0,
            versions: Vec::new(),
        })
    }

    /// Folds every rank's ops and chooses among the candidate schedules (`choose.rs`).
    fn lower_candidates(
        &mut self,
        options: &LowerOptions,
        ctx: &ScheduleContext,
    ) -> Result<Lowered, Diag> {
        let folded = self.emit_folded(options, options.hoist_sends)?;
        let warnings = hints::warnings(self, &folded);
        let mut lowered = choose::choose(self, folded, options, ctx)?;
        lowered.warnings = warnings;
        Ok(lowered)
    }

    /// Steps 1 and 2: every rank's ops, copies folded (`hoist`: folding may move sends as
    /// hoisting would). Starts afresh, so a lowering can be redone without hoisting.
    fn emit_folded(&mut self, options: &LowerOptions, hoist: bool) -> Result<Vec<Vec<ROp>>, Diag> {
        let per_rank = self.emit_fresh()?;
        Ok(if options.fold_copies {
            self.fold_ranks(per_rank, hoist)
        } else {
            per_rank
        })
    }

    /// Every rank's ops as emitted (steps 1 and 2 before folding), from scratch.
    fn emit_fresh(&mut self) -> Result<Vec<Vec<ROp>>, Diag> {
        // Reserved up front: growing two million ops by doubling copied each rank's list
        // about twice and left up to half of it unused.
        self.ranks = self
            .expected
            .iter()
            .map(|&c| Vec::with_capacity(c))
            .collect();
        self.groups = 0;
        self.emit_all()?;
        Ok(std::mem::take(&mut self.ranks))
    }

    /// Copy folding of every rank's ops, ranks in parallel (they fold independently), then
    /// the switch groups they may have left disagreeing dissolved (`fold.rs`).
    fn fold_ranks(&self, ranks: Vec<Vec<ROp>>, hoist: bool) -> Vec<Vec<ROp>> {
        let total: usize = ranks.iter().map(Vec::len).sum();
        let mut folded = par::map(par::worth(total), ranks, |r, mut ops| {
            self.fold_rank(r as u32, &mut ops, hoist);
            ops
        });
        fold::ungroup_disagreeing(&mut folded);
        folded
    }

    /// Copy folding of rank `r`'s ops (`fold.rs`).
    fn fold_rank(&self, r: u32, ops: &mut Vec<ROp>, hoist: bool) {
        let chunks = Chunks::new(self, r, self.e.inplace);
        let in_place = self.e.from_in_place.then(|| Chunks::new(self, r, true));
        fold::fold_copies(ops, &chunks, in_place.as_ref(), hoist);
    }

    /// Steps 1 and 2 for the candidates with scratch renamed: every rank's ops with
    /// transfers cut into chunks (`split.rs`), scratch renamed (`rename.rs`), then copies
    /// folded. `None` when the program has no versions or renaming changes nothing.
    fn emit_renamed(&mut self, hoist: bool) -> Result<Option<Vec<Vec<ROp>>>, Diag> {
        if self.versions.iter().all(Vec::is_empty) {
            return Ok(None);
        }
        let emitted = self.emit_fresh()?;
        let cut = split::split_transfers(&emitted).unwrap_or(emitted);
        let mut changed = false;
        let renamed: Vec<Vec<ROp>> = cut
            .into_iter()
            .map(|ops| match rename::rename_rank(&ops, &self.versions) {
                Some(r) => {
                    changed = true;
                    r
                }
                None => ops,
            })
            .collect();
        if !changed {
            return Ok(None);
        }
        Ok(Some(self.fold_ranks(renamed, hoist)))
    }

    /// Steps 3 to 5 for every rank's (folded, ordered) ops: the plan, or why the packing
    /// does not fit in `max_blocks`.
    fn build(
        &self,
        ranks: Vec<Vec<ROp>>,
        options: &LowerOptions,
        hoist: bool,
        packing: Packing,
        max_blocks: u32,
    ) -> Result<Plan, String> {
        let options = LowerOptions {
            hoist_sends: hoist,
            ..options.clone()
        };
        // Ranks are scheduled independently: in parallel, unless the plan is small (see
        // `par`) or large. Then one thread frees each rank's ops into the allocator arena
        // its plan is then taken from; threads of their own each took theirs from another
        // arena, which held on to the freed ops: ring allreduce at n = 1024 peaked at 670
        // MB instead of 475 MB and spent more time in page faults than the second core
        // saved (2026-11-24).
        let total: usize = ranks.iter().map(Vec::len).sum();
        let parallel = par::worth(total) && total <= choose::CANDIDATE_OP_LIMIT;
        let gpus: Vec<RankPlan> = par::try_map(parallel, ranks, |r, ops| {
            self.schedule_rank(r as u32, &ops, &options, packing, max_blocks)
        })?;
        Ok(self.assemble(gpus, options.fold_copies))
    }

    /// The plan of every rank's blocks (`fold_copies`: scratch buffers no op touches are
    /// dropped).
    fn assemble(&self, gpus: Vec<RankPlan>, fold_copies: bool) -> Plan {
        let e = self.e;
        let mut plan = Plan {
            version: plan::PLAN_VERSION,
            name: e.name.clone(),
            collective: plan::Collective(e.kind),
            inplace: e.inplace,
            ranks: e.n,
            topology: self.topo.name().to_string(),
            protocol: e.protocol,
            chunk_factor: e.chunk_factor * self.pieces,
            buffers: e
                .buffers
                .iter()
                .map(|b| BufferDecl {
                    name: b.name.clone(),
                    chunks: b.chunks * self.pieces,
                })
                .collect(),
            sources: self.sources.clone(),
            gpus,
            schedule: None,
        };
        if fold_copies {
            drop_unused_scratch(&mut plan);
        }
        plan
    }

    /// The result of lowering: `plan` with the spans of its sources.
    fn finish(&self, plan: Plan, simulated: Option<crate::check::Schedule>) -> Lowered {
        Lowered {
            plan: std::sync::Arc::new(plan),
            spans: self.spans.clone(),
            simulated,
            warnings: Vec::new(),
            validated: false,
        }
    }

    /// An internal error of the lowering, on the program's header.
    fn internal(&self, what: String) -> Diag {
        Box::new(Diagnostic::new(
            CompileError::Internal(what),
            self.e.header_span,
        ))
    }
}

/// Removes scratch buffers no op touches (folding can leave a program's accumulator unused),
/// so the plan neither allocates nor reports them; later buffers move down.
fn drop_unused_scratch(plan: &mut Plan) {
    if plan.buffers.len() <= 2 {
        return;
    }
    // Ranks in parallel: this reads every op of the plan.
    let buffers = plan.buffers.len();
    let ops = plan.op_count();
    let per_rank = par::map_ref(par::worth(ops), &plan.gpus, |_, g| {
        let mut used = vec![false; buffers];
        for op in g.blocks.iter().flat_map(|b| &b.ops) {
            for s in [op.src, op.dst].into_iter().flatten() {
                if let Some(u) = used.get_mut(s.0 as usize) {
                    *u = true;
                }
            }
        }
        used
    });
    let mut used = vec![false; buffers];
    for rank in per_rank {
        for (u, r) in used.iter_mut().zip(rank) {
            *u |= r;
        }
    }
    // New index of each buffer; input and output always stay.
    let mut new_index = Vec::with_capacity(used.len());
    let mut next = 0u32;
    for (i, &u) in used.iter().enumerate() {
        new_index.push(next);
        if u || i < 2 {
            next += 1;
        }
    }
    if next as usize == plan.buffers.len() {
        return;
    }
    let mut i = 0;
    plan.buffers.retain(|_| {
        i += 1;
        used[i - 1] || i <= 2
    });
    for op in plan
        .gpus
        .iter_mut()
        .flat_map(|g| &mut g.blocks)
        .flat_map(|b| &mut b.ops)
    {
        for s in [&mut op.src, &mut op.dst].into_iter().flatten() {
            s.0 = new_index[s.0 as usize];
        }
    }
}
