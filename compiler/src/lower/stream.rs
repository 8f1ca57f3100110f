//! The program as written, lowered a few ranks at a time: for plans over
//! [`CANDIDATE_OP_LIMIT`] ops (and [`Scheduling::AsWritten`]), where `choose.rs` would
//! lower only that candidate, the ops of a batch of [`BATCH`] neighbouring ranks are
//! emitted from a list of the program ops they take part in, then each rank's are folded
//! and scheduled on their own, so the per-rank ops never exist for all ranks at once (ring
//! allreduce at n = 1024: 4.2 million of them, 369 MB, before this path). Batches run in
//! parallel; each frees its list and its emitted ops as it goes.
//!
//! Invariant: the result is the plan, note, simulation and warnings that `emit.rs`,
//! `fold.rs`, `hints.rs` and `choose.rs` make for the same program, op for op. Each rank
//! gets its ops in the order emission gives them (instances, pipelined regions, pieces,
//! program order: a rank's subsequence of the whole emission), with the source index and
//! switch-group id emission would give them. Anything this path does not reproduce
//! exactly (an emission error, a deadlock, which `choose.rs` answers by lowering again, a
//! folded plan small enough for other candidates) returns `None`, and the caller lowers
//! the usual way, which reports it.

use super::hints::{self, Found};
use super::{LowerOptions, Lowered, ScheduleContext};
use super::{Lowering, Peers, ROp, Scheduling, hints::Warning, routes_from};
use super::{choose, choose::CANDIDATE_OP_LIMIT};
use crate::elaborate::{ChunkOp, OpKind as TransferKind, Via as ViaHint};
use crate::layout::alias;
use crate::plan::{OpKind, RankPlan, Slice, Via};
use crate::{check, par};
use coll_lang::Span;
use rustc_hash::FxHashSet as HashSet;

/// A run of consecutive program ops with one pipeline depth (emission's step 1).
struct Region {
    /// One past its last op (it starts where the one before ends).
    end: usize,
    /// Pieces each op is emitted in, one after the other.
    pipeline: u64,
    /// Switch-group units of one piece of the region.
    groups_per_piece: u64,
    /// Switch-group units of one instance before the region.
    groups_before: u64,
}

/// Where emission's numbering stands at each program op.
struct Index {
    regions: Vec<Region>,
    /// Switch-group units of one instance.
    groups_per_instance: u64,
    /// Per op, the switch-group units of one piece before it in its region; empty when the
    /// program has no switch-group op.
    groups_before_op: Vec<u64>,
}

/// Ranks emitted together: their program ops are read in one ascending pass, most of them
/// shared by neighbouring ranks (a ring's op touches ranks r and r + 1), instead of once per
/// rank from all over the program (a cache miss each, a quarter of the lowering's time at
/// n = 1024). A batch reads a run of about `BATCH` consecutive ops per step of a ring, then
/// jumps (a cache and TLB miss): 16 ranks make half the jumps of 8, measured a few percent
/// faster at n = 1024. Their emitted ops are alive together: about 5 MB for ring allreduce
/// at n = 1024, per thread.
const BATCH: u32 = 16;

/// One rank's share of the streamed lowering.
struct RankOut {
    plan: RankPlan,
    folded: usize,
    warnings: Found,
}

/// The ranks of `within` an op touches: every source and destination, each once.
fn touched(op: &ChunkOp, within: std::ops::Range<u32>) -> impl Iterator<Item = u32> {
    let (sr, dr) = (op.src.ranks, op.dst.ranks);
    let (first, second) = if sr.is_multi() { (sr, dr) } else { (dr, sr) };
    let clip = move |a: u32, b: u32| a.max(within.start)..b.min(within.end);
    let extra =
        clip(second.start, second.end).filter(move |r| !(first.start..first.end).contains(r));
    clip(first.start, first.end).chain(extra)
}

/// Calls `f` with the batch of each rank `op` touches (a batch once or more); `None` where
/// `f` gives it. Inlined into its one caller, which runs it for every program op.
#[inline(always)]
fn for_batches(op: &ChunkOp, mut f: impl FnMut(usize) -> Option<()>) -> Option<()> {
    let (sr, dr) = (op.src.ranks, op.dst.ranks);
    // One rank on each side (most ops): no iterator over the ranks.
    let one = |r: crate::elaborate::RankRange| r.end.checked_sub(r.start) == Some(1);
    if one(sr) && one(dr) {
        f((sr.start / BATCH) as usize)?;
        return f((dr.start / BATCH) as usize);
    }
    for r in touched(op, 0..u32::MAX) {
        f((r / BATCH) as usize)?;
    }
    Some(())
}

impl Lowering<'_> {
    /// Emission units (one per op and piece, or one per chunk when chunks are cut) of `op`.
    fn units(&self, op: &ChunkOp) -> u64 {
        if self.pieces == 1 {
            1
        } else {
            u64::from(op.count)
        }
    }

    /// For each batch of [`BATCH`] ranks, the indices of the program ops its ranks take
    /// part in, ascending: a list per batch, so that each is freed as soon as its ranks are
    /// lowered.
    fn ops_by_batch(&self) -> Option<Vec<Vec<u32>>> {
        let e = self.e;
        u32::try_from(e.ops.len()).ok()?;
        let batches = e.n.div_ceil(BATCH) as usize;
        // One pass over the program (memory-bound; counting first took a second one). The
        // ops a batch's ranks expect (`expected_ops`: at least one per program op they take
        // part in, for most programs) size its list: room reserved and never written is
        // never faulted in.
        let mut lists: Vec<Vec<u32>> = (0..batches)
            .map(|b| {
                let ranks = self.expected.iter().skip(b * BATCH as usize);
                let sum: usize = ranks.take(BATCH as usize).sum();
                Vec::with_capacity(sum.min(e.ops.len()))
            })
            .collect();
        for (j, op) in e.ops.iter().enumerate() {
            for_batches(op, |b| {
                let list = lists.get_mut(b)?;
                if list.last() != Some(&(j as u32)) {
                    list.push(j as u32);
                }
                Some(())
            })?;
        }
        Some(lists)
    }

    /// In one pass over the program (each is memory-bound: about 20 ms for ring allreduce
    /// at n = 1024): the index, the statements with a channel hint
    /// ([`hints::hinted_statements`]), and the spans emission numbers as sources, in the
    /// order it numbers them ([`Lowering::number_sources`]).
    fn index(&self) -> (Index, HashSet<Span>, Vec<Span>) {
        let e = self.e;
        let mut groups_before_op = Vec::new();
        // Whether an op of several ranks (a switch group) came yet: before the first, every
        // op has none of its units before it, and `groups_before_op` is filled in then.
        let mut multi = false;
        let mut regions = Vec::new();
        let mut groups_per_instance = 0u64;
        let mut hinted = HashSet::default();
        let (mut seen, mut sources) = (HashSet::default(), Vec::new());
        let mut last_source = None;
        let numbered = e.instances > 0;
        let mut begin = 0;
        while begin < e.ops.len() {
            let p = self.pipeline_of(&e.ops[begin]);
            let mut end = begin + 1;
            while end < e.ops.len() && self.pipeline_of(&e.ops[end]) == p {
                end += 1;
            }
            let mut in_piece = 0u64;
            for (j, op) in e.ops[begin..end].iter().enumerate() {
                let this = op.src.ranks.is_multi() || op.dst.ranks.is_multi();
                if this && !multi {
                    multi = true;
                    groups_before_op.resize(begin + j, 0);
                }
                if multi {
                    groups_before_op.push(in_piece);
                }
                let units = self.units(op);
                if this {
                    in_piece += units;
                }
                if op.channel != u16::MAX {
                    hinted.insert(op.span);
                }
                // Consecutive ops mostly share a span.
                if numbered && units > 0 && last_source != Some(op.span) {
                    last_source = Some(op.span);
                    if seen.insert(op.span) {
                        sources.push(op.span);
                    }
                }
            }
            regions.push(Region {
                end,
                pipeline: p,
                groups_per_piece: in_piece,
                groups_before: groups_per_instance,
            });
            groups_per_instance += p * in_piece;
            begin = end;
        }
        let index = Index {
            regions,
            groups_per_instance,
            groups_before_op,
        };
        (index, hinted, sources)
    }

    /// Emission's source numbering, made up front from [`Lowering::index`]'s order: sources
    /// are numbered in the order their spans first appear, and the first instance emits
    /// every op (with a unit) in program order.
    fn number_sources(&mut self, order: &[Span]) {
        for &span in order {
            self.source(span);
        }
    }

    /// The route's kind, as [`Lowering::via`] finds it; `None` where that reports an error.
    fn via_of(&self, op: &ChunkOp, from: u32, to: u32) -> Option<Via> {
        let from_routes = self.routes.get(from as usize)?.as_ref()?;
        let via = from_routes
            .get(to as usize)
            .copied()
            .flatten()
            .or_else(|| {
                routes_from(self.topo, from, &Peers::Few([to].into_iter().collect()))
                    .get(to as usize)
                    .copied()
                    .flatten()
            })?;
        let fits = match op.via {
            None => true,
            Some(ViaHint::Switch) => via == Via::Switch,
            Some(ViaHint::NvLink) => matches!(via, Via::Nvlink | Via::Switch),
            Some(ViaHint::Net) => via == Via::Net,
        };
        fits.then_some(via)
    }

    /// Rank `r`'s ops of one emission unit, in the order [`Lowering::emit_unit`] pushes
    /// them; `None` where emission reports an error. `via`: the route from the op's source
    /// to its destination, where the caller looked it up for an op of one rank each side
    /// (both of its ranks, and each of its pieces, take that one route).
    // Always inlined: a call with its nine arguments cost a fifth of its time (its two
    // callers are the loops of `emit_batch`); `#[inline]` alone left it a call.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn unit_for(
        &self,
        r: u32,
        op: &ChunkOp,
        at: (u64, u64),
        count: u32,
        channel: u32,
        source: u32,
        group: Option<u32>,
        via: Option<Via>,
        out: &mut Vec<ROp>,
    ) -> Option<()> {
        let e = self.e;
        let route = |from: u32, to: u32| via.or_else(|| self.via_of(op, from, to));
        let src = Slice(op.src.buffer.0, at.0);
        let dst = Slice(op.dst.buffer.0, at.1);
        // A local copy or reduce belongs to no switch group; the transfers do.
        let base = ROp::local(
            OpKind::Copy,
            (src, dst),
            count,
            channel,
            source,
            op.protocol,
        );
        let k = e.chunk_factor * self.pieces;
        let at_r = |a: Slice| alias(e.kind, e.inplace, k, a.0 as usize, u64::from(r), a.1);
        // Only a rank's own copy or reduce asks (most units are transfers).
        let same = || at_r(src) == at_r(dst);
        let send = |to: u32, via: Via| ROp {
            kind: OpKind::Send,
            dst: None,
            send: Some((to, via)),
            group,
            ..base
        };
        let recv = |kind: OpKind, from: u32, via: Via| ROp {
            kind,
            src: (kind == OpKind::RecvReduceCopy).then_some(dst),
            recv: Some((from, via)),
            group,
            ..base
        };
        let (sr, dr) = (op.src.ranks, op.dst.ranks);
        if sr.is_multi() {
            let d = dr.start;
            let d_in = (sr.start..sr.end).contains(&d);
            if r == d {
                if d_in && !same() {
                    out.push(base.clone());
                }
                let mut first_received = !d_in;
                for s in (sr.start..sr.end).filter(|&s| s != d) {
                    let kind = if first_received {
                        first_received = false;
                        OpKind::Recv
                    } else {
                        OpKind::RecvReduceCopy
                    };
                    out.push(recv(kind, s, self.via_of(op, s, d)?));
                }
            } else if (sr.start..sr.end).contains(&r) {
                out.push(send(d, self.via_of(op, r, d)?));
            }
            return Some(());
        }
        let s = sr.start;
        let reduce = op.kind == TransferKind::Reduce;
        let recv_kind = || {
            if reduce {
                OpKind::RecvReduceCopy
            } else {
                OpKind::Recv
            }
        };
        // One rank each side, two ranks (most units): a send or a receive, without the
        // loop over destinations below.
        if dr.end.checked_sub(dr.start) == Some(1) && dr.start != s {
            let d = dr.start;
            if r == s {
                out.push(send(d, route(s, d)?));
            } else if r == d {
                out.push(recv(recv_kind(), s, route(s, d)?));
            }
            return Some(());
        }
        if r == s {
            for d in dr.start..dr.end {
                if d == s {
                    if !same() {
                        let kind = if reduce { OpKind::Reduce } else { OpKind::Copy };
                        out.push(ROp {
                            kind,
                            ..base.clone()
                        });
                    }
                } else {
                    out.push(send(d, route(s, d)?));
                }
            }
        } else if (dr.start..dr.end).contains(&r) {
            out.push(recv(recv_kind(), s, route(s, r)?));
        }
        Some(())
    }

    /// The ops of ranks `ranks` as emission gives them (steps 1 and 2, before folding),
    /// from `mine`, the program ops they take part in.
    fn emit_batch(
        &self,
        index: &Index,
        ranks: std::ops::Range<u32>,
        mine: &[u32],
    ) -> Option<Vec<Vec<ROp>>> {
        let e = self.e;
        let mut outs: Vec<Vec<ROp>> = ranks
            .clone()
            .map(|r| Vec::with_capacity(self.expected.get(r as usize).copied().unwrap_or(0)))
            .collect();
        let mut last: Option<(Span, u32)> = None;
        let part = self.depth;
        let g = self.pieces;
        for instance in 0..e.instances {
            let instance_groups = u64::from(instance) * index.groups_per_instance;
            // The regions this rank has ops in, each with its ops.
            let mut from = 0;
            while let Some(&first) = mine.get(from) {
                let at = index.regions.partition_point(|g| g.end <= first as usize);
                let region = index.regions.get(at)?;
                let to = from + mine[from..].partition_point(|&j| (j as usize) < region.end);
                let p = region.pipeline;
                let size = part / p;
                for piece in 0..p {
                    let piece_groups =
                        instance_groups + region.groups_before + piece * region.groups_per_piece;
                    for &j in &mine[from..to] {
                        let op = &e.ops[j as usize];
                        let source = match last {
                            Some((s, i)) if s == op.span => i,
                            _ => {
                                let i = *self.source_of.get(&op.span)?;
                                last = Some((op.span, i));
                                i
                            }
                        };
                        let multi = op.src.ranks.is_multi() || op.dst.ranks.is_multi();
                        let first_group = multi.then(|| {
                            piece_groups
                                + index.groups_before_op.get(j as usize).copied().unwrap_or(0)
                        });
                        let group = |o: u64| first_group.map(|f| (f + o) as u32);
                        let base_channel = if op.channel == u16::MAX {
                            e.channel.unwrap_or(0)
                        } else {
                            u32::from(op.channel)
                        };
                        let channel = base_channel + instance * self.channels_per_instance;
                        // The batch's ranks the op touches, as `touched` gives them; most ops
                        // have one rank each side, taken without its iterators. At most
                        // `BATCH` of one side and the other side's rank: an op of several
                        // ranks each side is an elaboration error.
                        let mut list = [0u32; BATCH as usize + 1];
                        let mut len = 0;
                        let mut via = None;
                        let (sr, dr) = (op.src.ranks, op.dst.ranks);
                        if sr.end.checked_sub(sr.start) == Some(1)
                            && dr.end.checked_sub(dr.start) == Some(1)
                        {
                            let (s, d) = (sr.start, dr.start);
                            for r in [Some(d), Some(s).filter(|&s| s != d)].into_iter().flatten() {
                                if ranks.contains(&r) {
                                    list[len] = r;
                                    len += 1;
                                }
                            }
                            // Looked up once for both ranks: each of them would look up this
                            // route (and fail, where it does) in `unit_for`.
                            if s != d && len > 0 {
                                via = Some(self.via_of(op, s, d)?);
                            }
                        } else {
                            for r in touched(op, ranks.clone()) {
                                *list.get_mut(len)? = r;
                                len += 1;
                            }
                        }
                        for &r in &list[..len] {
                            let out = outs.get_mut((r - ranks.start) as usize)?;
                            if g == 1 {
                                let at = (u64::from(op.src.index), u64::from(op.dst.index));
                                self.unit_for(
                                    r,
                                    op,
                                    at,
                                    op.count,
                                    channel,
                                    source,
                                    group(0),
                                    via,
                                    out,
                                )?;
                                continue;
                            }
                            let at = |index: u32, o: u64| {
                                u64::from(index + o as u32) * g
                                    + u64::from(instance) * part
                                    + piece * size
                            };
                            for o in 0..u64::from(op.count) {
                                let at = (at(op.src.index, o), at(op.dst.index, o));
                                self.unit_for(
                                    r,
                                    op,
                                    at,
                                    size as u32,
                                    channel,
                                    source,
                                    group(o),
                                    via,
                                    out,
                                )?;
                            }
                        }
                    }
                }
                from = to;
            }
        }
        Some(outs)
    }

    /// Steps 1 to 5 of the program as written for the ranks of batch `batch`, whose program
    /// ops are `mine`.
    fn lower_batch(
        &self,
        index: &Index,
        batch: u32,
        mine: Vec<u32>,
        options: &LowerOptions,
        max_blocks: u32,
        hinted: &HashSet<Span>,
    ) -> Option<Vec<RankOut>> {
        let first = batch.checked_mul(BATCH)?;
        let ranks = first..first.saturating_add(BATCH).min(self.e.n);
        let emitted = self.emit_batch(index, ranks.clone(), &mine)?;
        drop(mine);
        ranks
            .zip(emitted)
            .map(|(r, mut ops)| self.lower_rank(r, &mut ops, options, max_blocks, hinted))
            .collect()
    }

    /// Steps 2b to 5 of rank `r`'s emitted ops `ops` (folding changes them).
    fn lower_rank(
        &self,
        r: u32,
        ops: &mut Vec<ROp>,
        options: &LowerOptions,
        max_blocks: u32,
        hinted: &HashSet<Span>,
    ) -> Option<RankOut> {
        if options.fold_copies {
            // Whether a group keeps its id depends on every member rank
            // (`fold::ungroup_disagreeing`), which this path never sees together: a rank
            // whose folding changes what a group op reads goes the usual way.
            let group_reads = |ops: &[ROp]| -> Vec<Option<Slice>> {
                ops.iter()
                    .filter(|o| o.group.is_some())
                    .map(ROp::reads_src)
                    .collect()
            };
            let before = group_reads(ops);
            self.fold_rank(r, ops, options.hoist_sends);
            if !before.is_empty() && group_reads(ops) != before {
                return None;
            }
        }
        let mut warnings = Found::new();
        if !hinted.is_empty() {
            hints::rank_warnings(self, r, ops, hinted, &mut warnings);
        }
        let folded = ops.len();
        let plan = self
            .schedule_rank(r, ops, options, super::Packing::FirstFit, max_blocks)
            .ok()?;
        Some(RankOut {
            plan,
            folded,
            warnings,
        })
    }

    /// The program as written, rank by rank (see the module docs); `None` when the caller
    /// must lower it the usual way.
    pub(super) fn lower_streamed(
        &mut self,
        options: &LowerOptions,
        ctx: &ScheduleContext,
    ) -> Option<Lowered> {
        let rescheduling = options.scheduling != Scheduling::AsWritten;
        let expected: usize = self.expected.iter().sum();
        // `expected` bounds the folded ops from above: at most that many means `choose.rs`
        // may try other candidates.
        if rescheduling && expected <= CANDIDATE_OP_LIMIT {
            return None;
        }
        // Independent passes over the program's ops (memory-bound: about 30 ms each for
        // ring allreduce at n = 1024), on both cores: the proof runs beside elaboration.
        let this = &*self;
        let big = par::worth(expected);
        let (by_batch, (index, hinted, sources)) =
            par::join(big, || this.ops_by_batch(), || this.index());
        let by_batch = by_batch?;
        self.number_sources(&sources);
        let this = &*self;
        let max_blocks = ctx.limits.max_blocks;
        let batches: Vec<Option<Vec<RankOut>>> = par::map(big, by_batch, |b, mine| {
            this.lower_batch(&index, b as u32, mine, options, max_blocks, &hinted)
        });
        drop(index);
        let mut gpus = Vec::with_capacity(this.e.n as usize);
        let mut folded = 0usize;
        let mut found = Found::new();
        for batch in batches {
            for out in batch? {
                folded += out.folded;
                for (key, w) in out.warnings {
                    found.entry(key).or_insert(w);
                }
                gpus.push(out.plan);
            }
        }
        if rescheduling && folded <= CANDIDATE_OP_LIMIT {
            return None;
        }
        let mut plan = self.assemble(gpus, options.fold_copies);
        // Both only read the plan: the validation `compile` needs runs beside the
        // simulation (tens of milliseconds each at n = 1024).
        let (sim, valid) = par::join(
            big,
            || check::simulate(&plan, ctx.slots),
            || plan.validate().is_ok(),
        );
        let sim = sim.ok()?;
        let blocks: u32 = plan.gpus.iter().map(|g| g.blocks.len() as u32).sum();
        plan.schedule = Some(choose::as_written_note(
            rescheduling,
            folded,
            options.hoist_sends,
            sim.rounds,
            blocks,
        ));
        let mut lowered = self.finish(plan, Some(sim));
        lowered.validated = valid;
        lowered.warnings = found.into_values().collect::<Vec<Warning>>();
        Some(lowered)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{LowerOptions, Lowering, ScheduleContext, Scheduling, choose, hints};
    use crate::elaborate::{Facts, Options, elaborate};
    use crate::topology::Topology;

    /// Lowers `src` for `n` ranks on an NVSwitch both streamed and the usual way (every
    /// rank's ops emitted, then `choose.rs`) with `slots` per connection, checks that the
    /// two agree on the plan, its note, spans, simulation and warnings, and returns the
    /// plan's switch-group ops and the warnings' count. `None` when the streamed lowering
    /// declines.
    fn streamed_and_usual(
        src: &str,
        n: usize,
        scheduling: Scheduling,
        slots: u32,
    ) -> Option<(usize, usize)> {
        let m = coll_lang::load_bytes("t.coll", src.as_bytes().to_vec()).expect("valid");
        let topo = Topology::preset(&format!("nvswitch:{n}")).expect("preset");
        let e =
            elaborate(&m, &Facts::from_topology(&topo), &Options::default()).expect("elaborates");
        let options = LowerOptions {
            scheduling,
            ..LowerOptions::default()
        };
        let ctx = ScheduleContext {
            slots,
            ..ScheduleContext::default()
        };
        let mut l = Lowering::new(&e, &topo, &m.file).expect("sets up");
        let streamed = l.lower_streamed(&options, &ctx)?;
        let mut l = Lowering::new(&e, &topo, &m.file).expect("sets up");
        let folded = l.emit_folded(&options, options.hoist_sends).expect("emits");
        let warnings = hints::warnings(&l, &folded);
        let usual = choose::choose(&mut l, folded, &options, &ctx).expect("lowers");
        assert_eq!(streamed.plan, usual.plan);
        assert_eq!(streamed.spans, usual.spans);
        assert_eq!(streamed.simulated, usual.simulated);
        assert_eq!(streamed.warnings, warnings);
        let groups = streamed
            .plan
            .gpus
            .iter()
            .flat_map(|g| &g.blocks)
            .flat_map(|b| &b.ops)
            .filter(|o| o.group.is_some())
            .count();
        Some((groups, warnings.len()))
    }

    const RING: &str = "collective allreduce ring(n) { chunks n; inplace; }\n\
        for s in 0..n - 1 { for r in 0..n { reduce input[r][(r - s - 1) % n] -> input[(r + 1) % n]; } }\n\
        for s in 0..n - 1 { for r in 0..n { copy input[r][(r - s) % n] -> input[(r + 1) % n]; } }\n";

    /// Over `CANDIDATE_OP_LIMIT` ops the program as written is streamed, and its note says
    /// why no other candidate was tried; under it, the candidates are tried as before.
    #[test]
    fn a_large_ring_is_streamed_as_the_usual_path_lowers_it() {
        assert_eq!(
            streamed_and_usual(RING, 200, Scheduling::Choose, 2),
            Some((0, 0))
        );
        assert_eq!(streamed_and_usual(RING, 8, Scheduling::Choose, 2), None);
    }

    /// Instances, mixed pipeline depths, a channel hint that cannot fuse (a warning), and
    /// one-to-many copies through the switch (group ids), asked for as written. With two
    /// slots the copies deadlock after hoisting: the streamed lowering declines, and the
    /// usual path lowers them again without hoisting.
    #[test]
    fn pieces_groups_and_warnings_match_the_usual_path() {
        let hinted = "collective allreduce t(n) { chunks n; inplace; instances 2; }\n\
            for s in 0..n - 1 { for r in 0..n { reduce input[r][(r - s - 1) % n] -> input[(r + 1) % n] with pipeline 2; } }\n\
            for s in 0..n - 1 { for r in 0..n { copy input[r][(r - s) % n] -> input[(r + 1) % n] with channel s % 2; } }\n";
        assert_eq!(
            streamed_and_usual(hinted, 8, Scheduling::AsWritten, 2),
            Some((0, 1))
        );
        let switch = "collective allgather t(n) { chunks 1; pipeline 3; }\n\
            for r in 0..n { copy input[r][0] -> output[*][r] via switch; }\n";
        let (groups, warnings) =
            streamed_and_usual(switch, 8, Scheduling::AsWritten, 64).expect("streamed");
        assert_eq!((groups > 0, warnings), (true, 0));
        assert_eq!(
            streamed_and_usual(switch, 8, Scheduling::AsWritten, 2),
            None
        );
    }
}
