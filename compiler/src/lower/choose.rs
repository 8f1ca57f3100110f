//! Candidate schedules and the choice among them, recorded in the plan as a
//! [`ScheduleNote`].
//!
//! Candidates are {the program's channels, the compiler's channels, a channel per chunk
//! (`channels.rs`), a channel per chunk after transfers are cut into chunks (`split.rs`),
//! the compiler's channels after transfers are cut and scratch renamed (`rename.rs`); each
//! only when it differs from those before and applies} × {program
//! order, dependence order of whole transfers, the same with sends and receives apart
//! (`schedule.rs`)} × {first-fit blocks, blocks per connection side, the same merging
//! echoes, per connection side with local ops apart (`blocks.rs`)}. Each must validate,
//! pass the deadlock simulation with the compile's slots and the resource limits; those that are not the program as
//! written (program order, first-fit) must also pass the race check. The survivors are
//! costed by the alpha-beta model ([`crate::predict`]: ops timed as a dataflow, links and
//! memory shared as in the simulated rounds) at [`PREDICT_SIZES`]; the one with the
//! smallest sum of time ratios to the best candidate at each size wins, ties (sums within
//! [`pick::SAME_SCORE`](super::pick::SAME_SCORE) where the rounds differ) going to fewer rounds, then fewer blocks, then
//! the earlier
//! candidate (the program's channels first, then program order first). Candidates added
//! later compete in tiers: those with the compiler's channels or local ops apart, then
//! those with a channel per chunk, then those with transfers cut into chunks, then those
//! with scratch renamed, then blocks of several peers. Each tier is compared so among itself, and its best
//! replaces the choice of the tiers before only when it is predicted no slower at every
//! size (and faster at one, or in fewer rounds), or at most [`pick::TIER_TOLERANCE`](super::pick::TIER_TOLERANCE) slower at
//! some size for more than that faster at another, so a tier never trades a real loss at
//! one size for a gain at another. The program as written is always a candidate and the
//! fallback, so the chosen plan is never predicted slower than it.
//!
//! The notes also give a lower bound of every candidate's rounds: one more than the
//! transfers on the longest chain of hazards (`schedule::longest_chain`), which separates
//! what the order and packing lose from what the dependences impose. Blocks of several
//! peers are not bound by it: two receives into one chunk, a hazard apart, become one op.
//!
//! When the program-order, first-fit plan deadlocks after send hoisting, every candidate is
//! lowered again without hoisting inside blocks but with the sends copy folding moved, and
//! if that deadlocks too, without either (moving sends earlier is the only rewrite that can
//! starve a bounded connection); the notes say which.
//!
//! The last tier merges blocks into blocks of several peers (`merge_peers.rs`) in every
//! candidate that passed, and in the program with a channel per chunk kept for that alone;
//! a merged plan must also replay to the collective's result.
//!
//! Over [`CANDIDATE_OP_LIMIT`] ops only the program as written is lowered (its outcome is
//! known there: nothing else is tried), which keeps a ring at n = 1024 as fast as before;
//! transfers are cut into chunks only up to [`SPLIT_OP_LIMIT`] ops.
//!
//! What the choice records, and the candidates' names, are in `note.rs`.

pub use super::note::{Candidate, Channels, Order, Packing, ScheduleContext, ScheduleNote};
use super::pick::{Passed, cost, evaluate, pick};
use super::{LowerOptions, Lowered, Lowering, ROp, Scheduling};
use super::{channels, merge_peers, schedule, split};
use crate::plan::Plan;
use rustc_hash::FxHashSet as HashSet;

/// Message sizes (nccl-tests bytes) the candidates are compared at: latency-bound,
/// middle, bandwidth-bound.
pub const PREDICT_SIZES: [u64; 3] = [8, 1 << 20, 1 << 30];

/// Ops over all ranks above which only the program as written is lowered. The other
/// candidates need two dependence DAGs, up to eight more lowerings, simulations and race
/// checks: on the development machine (2 shared cores, 2026-11-24) ring allreduce at
/// n = 128 (65 024 ops, every candidate the same plan) takes 0.13 s instead of 0.03 s,
/// at n = 256 it would take 0.58 s instead of 0.12 s.
pub const CANDIDATE_OP_LIMIT: usize = 1 << 16;

/// Ops over all ranks, once cut into chunks, above which transfers are not cut
/// ([`Channels::Split`]). Cutting multiplies a program's ops by its chunks per transfer, and
/// each of the twelve candidates it adds is simulated and race-checked: recursive
/// halving-doubling at n = 64 (16 128 ops cut, 1 536 whole) checked in 1.3 s instead of
/// 0.06 s with no limit (development machine, 2026-11-25).
pub const SPLIT_OP_LIMIT: usize = 1 << 13;

const ORDERS: [Order; 3] = [Order::Program, Order::Dependence, Order::DependenceSplit];
const PACKINGS: [Packing; 4] = [
    Packing::FirstFit,
    Packing::PerConnection,
    Packing::PerConnectionEcho,
    Packing::LocalApart,
];

/// Every rank's ops.
type RankOps = Vec<Vec<ROp>>;

/// Every candidate: channels, then order, then packing (earlier wins ties). The first is
/// the program as written.
fn candidates() -> Vec<(Channels, Order, Packing)> {
    let mut out = Vec::with_capacity(3 * ORDERS.len() * PACKINGS.len());
    for ch in [
        Channels::Program,
        Channels::Compiler,
        Channels::Chunks,
        Channels::Split,
        Channels::Renamed,
    ] {
        for o in ORDERS {
            for p in PACKINGS {
                out.push((ch, o, p));
            }
        }
    }
    out
}

/// The sources (statements) of the program whose transfers carry a channel hint: every
/// one when the header names a default channel.
fn hinted_sources(l: &Lowering<'_>) -> HashSet<u32> {
    l.e.ops
        .iter()
        .filter(|op| op.channel != u16::MAX || l.e.channel.is_some())
        .filter_map(|op| l.source_of.get(&op.span).copied())
        .collect()
}

/// Lowers every candidate of the folded ops `folded` (see the module docs) and returns the
/// chosen plan with its note, and its simulation when it ran.
pub(super) fn choose(
    l: &mut Lowering<'_>,
    folded: Vec<Vec<ROp>>,
    options: &LowerOptions,
    ctx: &ScheduleContext,
) -> Result<Lowered, super::Diag> {
    let full = candidates();
    let hinted = hinted_sources(l);
    // Notes that outlive a second pass without hoisting.
    let mut kept_notes = Vec::new();
    let mut folded = folded;
    let mut hoist = options.hoist_sends;
    // Whether `folded` has sends copy folding moved while `hoist` is off.
    let mut moved_by_folding = false;
    loop {
        let mut notes = kept_notes.clone();
        let total: usize = folded.iter().map(Vec::len).sum();
        let rescheduling = options.scheduling != Scheduling::AsWritten;
        let few = total <= CANDIDATE_OP_LIMIT && rescheduling;
        let wanted = |c: (Channels, Order, Packing)| match options.scheduling {
            Scheduling::Only(ch, o, p) | Scheduling::OnlyMerged(ch, o, p) => (ch, o, p) == c,
            _ => true,
        };
        // Blocks of several peers are tried (`merge_peers.rs`), and whether the channels
        // per chunk are there only for them.
        let several =
            few && options.several_peers && !matches!(options.scheduling, Scheduling::Only(..));
        // Channels per chunk tried only with blocks of several peers.
        let mut merge_only: Option<RankOps> = None;
        // The earliest round of each op, for the compiler's channels and the bound.
        let levels = if few {
            schedule::levels(l, &folded)
        } else {
            None
        };
        // The folded ops with the compiler's channels, when wanted and different.
        let mut bases: Vec<(Channels, RankOps)> = Vec::new();
        if let Some(levels) = levels
            .as_ref()
            .filter(|_| full.iter().any(|&c| c.0 == Channels::Compiler && wanted(c)))
        {
            match channels::assign(l, &folded, levels, &hinted, channels::MAX_PER_PAIR) {
                Some(lists) => bases.push((Channels::Compiler, lists)),
                None => notes.push(
                    "channels by the compiler: no pair of ranks has independent unhinted \
                     transfers at one level, the same as the program's channels; not tried"
                        .into(),
                ),
            }
        }
        if let Some(levels) = levels
            .as_ref()
            .filter(|_| full.iter().any(|&c| c.0 == Channels::Chunks && wanted(c)))
        {
            match channels::by_chunk(l, &folded, levels, &hinted, false) {
                // Both change only the channels of the same ops.
                Some(lists)
                    if bases.iter().any(|(_, b)| {
                        b.iter()
                            .flatten()
                            .zip(lists.iter().flatten())
                            .all(|(x, y)| x.channel == y.channel)
                    }) =>
                {
                    notes.push(
                        "a channel per chunk: the same as the compiler's channels; not tried"
                            .into(),
                    )
                }
                Some(lists) => bases.push((Channels::Chunks, lists)),
                None => {
                    // Without that conflict, a channel per chunk is still what lets a head
                    // node's blocks take several peers (`merge_peers.rs`).
                    if several && folded.len() > 2 {
                        merge_only = channels::by_chunk(l, &folded, levels, &hinted, true);
                    }
                    notes.push(
                        "a channel per chunk: no receive side passes its messages on to \
                         different peers; not tried"
                            .into(),
                    )
                }
            }
        }
        // Transfers cut into chunks, each on its chunk's channel (`split.rs`).
        if few
            && options.split_transfers
            && full.iter().any(|&c| c.0 == Channels::Split && wanted(c))
        {
            match split::split_transfers(&folded) {
                Some(cut) if cut.iter().map(Vec::len).sum::<usize>() <= SPLIT_OP_LIMIT => {
                    let by_chunk = schedule::levels(l, &cut)
                        .and_then(|levels| channels::by_chunk(l, &cut, &levels, &hinted, true));
                    bases.push((Channels::Split, by_chunk.unwrap_or(cut)));
                }
                Some(_) => notes.push(format!(
                    "transfers cut into chunks: over {SPLIT_OP_LIMIT} ops; not tried"
                )),
                // Every transfer moves one chunk: the candidates would be those of a channel
                // per chunk.
                None => {}
            }
        }
        // The same with scratch renamed (`rename.rs`), from the ops before folding, and the
        // longest chain of hazards left there.
        let mut renamed_bound = None;
        if few
            && options.split_transfers
            && full.iter().any(|&c| c.0 == Channels::Renamed && wanted(c))
        {
            match l.emit_renamed(hoist || moved_by_folding)? {
                Some(ops) if ops.iter().map(Vec::len).sum::<usize>() <= SPLIT_OP_LIMIT => {
                    let levels = schedule::levels(l, &ops);
                    renamed_bound = levels
                        .as_ref()
                        .and_then(|levels| schedule::longest_chain(&ops, levels));
                    let assigned = levels.and_then(|levels| {
                        channels::assign(l, &ops, &levels, &hinted, channels::RENAMED_PER_PAIR)
                    });
                    bases.push((Channels::Renamed, assigned.unwrap_or(ops)));
                }
                Some(_) => notes.push(format!(
                    "scratch renamed: over {SPLIT_OP_LIMIT} ops; not tried"
                )),
                None => {}
            }
        }
        // The candidates of this compile: those of the compiler's channels only when they
        // differ from the program's.
        let mut all: Vec<(Channels, Order, Packing)> = full
            .iter()
            .copied()
            .filter(|c| c.0 == Channels::Program || bases.iter().any(|(b, _)| *b == c.0))
            .collect();
        // The folded ops in each dependence order wanted (`schedule.rs`), and the orders
        // that leave them as they are.
        let mut ordered: Vec<((Channels, Order), RankOps)> = Vec::new();
        let mut unchanged: Vec<(Channels, Order)> = Vec::new();
        if few {
            let program = [(Channels::Program, &folded)];
            let others = bases.iter().map(|(c, l)| (*c, l));
            for (ch, base) in program.into_iter().chain(others) {
                for (order, split) in [(Order::Dependence, false), (Order::DependenceSplit, true)] {
                    if !all.iter().any(|&c| c.0 == ch && c.1 == order && wanted(c)) {
                        continue;
                    }
                    let prefix = match ch {
                        Channels::Program => String::new(),
                        Channels::Compiler => "with the compiler's channels, ".into(),
                        Channels::Chunks => "with a channel per chunk, ".into(),
                        Channels::Split => "with transfers cut into chunks, ".into(),
                        Channels::Renamed => "with scratch renamed, ".into(),
                    };
                    let Some(o) = schedule::dependence_order(l, base, split) else {
                        notes.push(format!(
                            "{prefix}{} order: its DAG has a cycle (an exchange both of whose \
                             ranks send first), not tried",
                            order.name()
                        ));
                        continue;
                    };
                    let same = schedule::is_identity(&o, base);
                    notes.push(format!(
                        "{prefix}{} order: the list schedule of its DAG takes {} steps{}",
                        order.name(),
                        o.rounds,
                        if same {
                            "; the same as program order"
                        } else {
                            ""
                        }
                    ));
                    if same {
                        unchanged.push((ch, order));
                    } else {
                        let mut lists = base.clone();
                        schedule::apply(&o, &mut lists);
                        ordered.push(((ch, order), lists));
                    }
                }
            }
            if let Some(k) = levels
                .as_ref()
                .and_then(|levels| schedule::longest_chain(&folded, levels))
            {
                notes.push(format!(
                    "dependences: the longest chain of hazards holds {k} transfers, so no \
                     schedule of one-peer blocks takes fewer than {} rounds (a round more than \
                     its steps)",
                    k + 1
                ));
            }
            if let Some(k) = renamed_bound {
                notes.push(format!(
                    "with scratch renamed, dependences: the longest chain of hazards holds {k} \
                     transfers, so no such schedule of one-peer blocks takes fewer than {} rounds",
                    k + 1
                ));
            }
        } else if !rescheduling {
            notes.push(
                "asked for the program as written: program order and first-fit blocks only".into(),
            );
        } else {
            notes.push(format!(
                "{total} ops, over the {CANDIDATE_OP_LIMIT} for which other candidates are tried: \
                 program order and first-fit blocks only"
            ));
        }
        let mut records: Vec<Candidate> = Vec::new();
        let mut passed: Vec<Option<Passed>> = Vec::new();
        // The plans of candidates that failed a check, to recognise them again.
        let mut rejected: Vec<Option<Plan>> = Vec::new();
        // The earlier candidate each one is the same plan as.
        let mut same_as: Vec<Option<usize>> = Vec::new();
        let mut baseline_failed = false;
        for (i, &(channels, order, packing)) in all.iter().enumerate() {
            records.push(Candidate {
                order,
                packing,
                channels,
                several_peers: false,
                rounds: None,
                blocks: None,
                predicted_ns: Vec::new(),
                rejected: None,
                chosen: false,
            });
            passed.push(None);
            rejected.push(None);
            same_as.push(None);
            let base = match channels {
                Channels::Program => Some(&folded),
                Channels::Compiler | Channels::Chunks | Channels::Split | Channels::Renamed => {
                    bases.iter().find(|(c, _)| *c == channels).map(|(_, l)| l)
                }
            };
            let lists = match order {
                Order::Program if i == 0 && !few => Some(std::mem::take(&mut folded)),
                _ if i > 0 && !wanted((channels, order, packing)) => None,
                _ if base.is_none() => None,
                _ if unchanged.contains(&(channels, order)) => {
                    let j = all
                        .iter()
                        .position(|&c| c == (channels, Order::Program, packing));
                    same_as[i] = j.map(|j| same_as[j].unwrap_or(j));
                    None
                }
                Order::Program if few => base.cloned(),
                _ => ordered
                    .iter()
                    .find(|(k, _)| *k == (channels, order))
                    .map(|(_, lists)| lists.clone()),
            };
            let Some(lists) = lists else {
                records[i].rejected = Some("not tried".into());
                continue;
            };
            let built = l
                .build(lists, options, hoist, packing, ctx.limits.max_blocks)
                .map_err(|why| (false, why));
            // A plan an earlier candidate made already (a ring's orders and packings
            // mostly agree) is not checked again: the earlier one stands for it.
            if let Ok(plan) = &built {
                same_as[i] = (0..i).find(|&j| {
                    passed[j].as_ref().map(|p| &p.plan).or(rejected[j].as_ref()) == Some(plan)
                });
                if same_as[i].is_some() {
                    continue;
                }
            }
            let mut kept = None;
            let outcome = built.and_then(|plan| {
                if few {
                    kept = Some(plan.clone());
                }
                evaluate(plan, ctx, i > 0, !few)
            });
            match outcome {
                Ok(p) => {
                    records[i].rounds = Some(p.sim.rounds);
                    records[i].blocks = Some(p.blocks);
                    passed[i] = Some(p);
                }
                Err((deadlock, why)) => {
                    baseline_failed |= i == 0 && deadlock;
                    records[i].rejected = Some(why);
                    rejected[i] = kept;
                }
            }
        }
        // After a deadlock, first without hoisting inside blocks but with the sends copy
        // folding moved (Bruck's all-to-all: its unpacking copies fold only so), then
        // without either.
        if baseline_failed && hoist {
            kept_notes.push(
                "program order with first-fit blocks deadlocks after hoisting sends: lowered again without hoisting, keeping the sends copy folding moved"
                    .into(),
            );
            hoist = false;
            moved_by_folding = true;
            continue;
        }
        if baseline_failed && moved_by_folding {
            kept_notes.push(
                "that deadlocks too: lowered again without the sends copy folding moved".into(),
            );
            moved_by_folding = false;
            folded = l.emit_folded(options, false)?;
            continue;
        }
        // Blocks of several peers (`merge_peers.rs`): every candidate that passed, and the
        // channels per chunk kept for this, with their merges made, are the last tier.
        let mut merged = vec![false; all.len()];
        if several {
            // Asked for one candidate merged: that one's merges alone.
            let asked = |c: (Channels, Order, Packing)| {
                !matches!(options.scheduling, Scheduling::OnlyMerged(..)) || wanted(c)
            };
            let mut found: Vec<((Channels, Order, Packing), Plan)> = (0..all.len())
                .filter(|&i| asked(all[i]))
                .filter_map(|i| {
                    let p = passed[i].as_ref()?;
                    merge_peers::merge_peers(&p.plan).map(|m| (all[i], m))
                })
                .collect();
            if let Some(base) = merge_only.take() {
                let chunked = chunk_plans(l, base, options, hoist, ctx);
                found.extend(
                    chunked
                        .iter()
                        .filter(|(c, _)| asked(*c))
                        .filter_map(|(c, p)| merge_peers::merge_peers(p).map(|m| (*c, m))),
                );
            }
            let mut tried: Vec<Plan> = Vec::new();
            for (c, plan) in found {
                if tried.contains(&plan) {
                    continue;
                }
                tried.push(plan.clone());
                let (channels, order, packing) = c;
                let mut record = Candidate {
                    order,
                    packing,
                    channels,
                    several_peers: true,
                    rounds: None,
                    blocks: None,
                    predicted_ns: Vec::new(),
                    rejected: None,
                    chosen: false,
                };
                let outcome = crate::replay::replay(&plan, l.e.root)
                    .map_err(|e| (false, format!("does not compute the collective: {e}")))
                    .and_then(|_| evaluate(plan, ctx, true, false));
                match outcome {
                    Ok(p) => {
                        record.rounds = Some(p.sim.rounds);
                        record.blocks = Some(p.blocks);
                        passed.push(Some(p));
                    }
                    Err((_, why)) => {
                        record.rejected = Some(why);
                        passed.push(None);
                    }
                }
                records.push(record);
                all.push(c);
                merged.push(true);
                same_as.push(None);
                rejected.push(None);
            }
        }
        // Cost the survivors when there is a choice.
        if passed.iter().flatten().count() > 1 {
            for (i, slot) in passed.iter_mut().enumerate() {
                let Some(p) = slot else { continue };
                match cost(p, l) {
                    Ok(times) => {
                        records[i].predicted_ns =
                            times.iter().map(|t| (t * 1000.0).round() as u64).collect();
                        p.predicted = times;
                    }
                    Err(why) => {
                        records[i].rejected = Some(why);
                        *slot = None;
                    }
                }
            }
        }
        for i in 0..records.len() {
            if let Some(j) = same_as[i] {
                let (c, o, p) = all[j];
                records[i].rounds = records[j].rounds;
                records[i].blocks = records[j].blocks;
                records[i].predicted_ns = records[j].predicted_ns.clone();
                records[i].rejected = Some(format!(
                    "the same plan as {} order, {} blocks{}{}",
                    o.name(),
                    p.name(),
                    c.describe(),
                    if merged[j] { ", several peers" } else { "" }
                ));
            }
        }
        let best = match options.scheduling {
            // The asked candidate when it passed (merged, for `OnlyMerged`, when that passed
            // too: merged plans come last), else the program as written.
            Scheduling::Only(..) | Scheduling::OnlyMerged(..) => passed
                .iter()
                .enumerate()
                .rev()
                .find_map(|(i, p)| p.as_ref().map(|_| i)),
            _ => {
                let tier: Vec<u8> = all
                    .iter()
                    .zip(&merged)
                    .map(|(&(c, _, p), &several)| match c {
                        _ if several => 5,
                        Channels::Program if p != Packing::LocalApart => 0,
                        Channels::Program | Channels::Compiler => 1,
                        Channels::Chunks => 2,
                        Channels::Split => 3,
                        Channels::Renamed => 4,
                    })
                    .collect();
                pick(&passed, &tier)
            }
        };
        let Some(best) = best else {
            // Nothing passed: the program as written, which `compile` checks again and
            // reports with its deadlock or resource error.
            let lists = l.emit_folded(options, hoist)?;
            let plan = l
                .build(lists, options, hoist, Packing::FirstFit, u32::MAX)
                .map_err(|why| l.internal(why))?;
            return Ok(l.finish(plan, None));
        };
        records[best].chosen = true;
        let Some(p) = passed.swap_remove(best) else {
            return Err(l.internal("the chosen candidate has no plan".into()));
        };
        let mut plan = p.plan;
        plan.schedule = Some(ScheduleNote {
            order: all[best].1,
            packing: all[best].2,
            channels: all[best].0,
            several_peers: merged[best],
            hoisted: hoist,
            rounds: p.sim.rounds,
            candidates: records,
            notes,
        });
        return Ok(l.finish(plan, Some(p.sim)));
    }
}

/// The note [`choose`] writes when it lowers only the program as written (asked for, or
/// `total` folded ops over [`CANDIDATE_OP_LIMIT`]) and that passed the deadlock simulation
/// in `rounds` rounds with `blocks` blocks: for `stream.rs`, which lowers that case rank by
/// rank.
pub(super) fn as_written_note(
    rescheduling: bool,
    total: usize,
    hoisted: bool,
    rounds: u32,
    blocks: u32,
) -> ScheduleNote {
    let note = if rescheduling {
        format!(
            "{total} ops, over the {CANDIDATE_OP_LIMIT} for which other candidates are tried: \
             program order and first-fit blocks only"
        )
    } else {
        "asked for the program as written: program order and first-fit blocks only".into()
    };
    let candidates = candidates()
        .into_iter()
        .filter(|c| c.0 == Channels::Program)
        .enumerate()
        .map(|(i, (channels, order, packing))| Candidate {
            order,
            packing,
            channels,
            several_peers: false,
            rounds: (i == 0).then_some(rounds),
            blocks: (i == 0).then_some(blocks),
            predicted_ns: Vec::new(),
            rejected: (i > 0).then(|| "not tried".into()),
            chosen: i == 0,
        })
        .collect();
    ScheduleNote {
        order: Order::Program,
        packing: Packing::FirstFit,
        channels: Channels::Program,
        several_peers: false,
        hoisted,
        rounds,
        candidates,
        notes: vec![note],
    }
}

/// The plans of `base` (ops with a channel per chunk) in every order and packing, for blocks
/// of several peers alone (unchecked: only their merged plans are candidates), with what they
/// are.
fn chunk_plans(
    l: &Lowering<'_>,
    base: RankOps,
    options: &LowerOptions,
    hoist: bool,
    ctx: &ScheduleContext,
) -> Vec<((Channels, Order, Packing), Plan)> {
    let mut out = Vec::new();
    for order in ORDERS {
        let lists = match order {
            Order::Program => Some(base.clone()),
            Order::Dependence | Order::DependenceSplit => {
                let split = order == Order::DependenceSplit;
                schedule::dependence_order(l, &base, split).map(|o| {
                    let mut lists = base.clone();
                    schedule::apply(&o, &mut lists);
                    lists
                })
            }
        };
        let Some(lists) = lists else { continue };
        for packing in PACKINGS {
            let Ok(plan) = l.build(
                lists.clone(),
                options,
                hoist,
                packing,
                ctx.limits.max_blocks,
            ) else {
                continue;
            };
            // Only their merged plans are candidates, and those are checked in full.
            if !out.iter().any(|(_, p)| *p == plan) {
                out.push(((Channels::Chunks, order, packing), plan));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plan's JSON names orders and packings as `--explain` and the text dump print
    /// them.
    #[test]
    fn json_names_are_the_printed_names() {
        for (c, o, p) in candidates() {
            assert_eq!(serde_json::to_value(c).ok(), Some(c.name().into()));
            assert_eq!(serde_json::to_value(o).ok(), Some(o.name().into()));
            assert_eq!(serde_json::to_value(p).ok(), Some(p.name().into()));
        }
    }
}
