//! Checking and costing one candidate schedule (`evaluate`, `cost`), and the choice among
//! those that passed (`pick`): the rules of `choose.rs`'s module docs, with the tolerances
//! that decide when the model cannot tell two candidates apart.

use super::Lowering;
use super::choose::PREDICT_SIZES;
use super::note::ScheduleContext;
use crate::check;
use crate::plan::Plan;
use crate::predict;

/// A lowered candidate that passed every check.
pub(super) struct Passed {
    pub(super) plan: Plan,
    pub(super) sim: check::Schedule,
    pub(super) blocks: u32,
    pub(super) predicted: Vec<f64>,
}

/// Predicted times of a candidate at [`PREDICT_SIZES`], µs.
pub(super) fn cost(p: &Passed, l: &Lowering<'_>) -> Result<Vec<f64>, String> {
    let steps = |r: u32, b: u32, o: u32| p.sim.round_of(r, b, o);
    let c = predict::Compiled::new(&p.plan, l.topo, &steps, &predict::Model::default())
        .map_err(|e| format!("cannot predict: {e}"))?;
    Ok(PREDICT_SIZES.iter().map(|&s| c.at(s).time_us).collect())
}

/// Validates, simulates and checks one candidate; `race`: also the race check; `alone`:
/// it is the only candidate, so only the simulation runs (`compile` validates and checks
/// the resources of the plan it gets anyway). An error says whether the candidate
/// deadlocked, and why it failed.
pub(super) fn evaluate(
    plan: Plan,
    ctx: &ScheduleContext,
    race: bool,
    alone: bool,
) -> Result<Passed, (bool, String)> {
    if !alone {
        plan.validate()
            .map_err(|e| (false, format!("invalid plan: {e}")))?;
    }
    let sim = check::simulate(&plan, ctx.slots).map_err(|d| (true, format!("deadlock: {d}")))?;
    if !alone {
        check::check_resources(&plan, &ctx.limits).map_err(|e| (false, e.to_string()))?;
        if race {
            check::check_races(&plan).map_err(|e| (false, format!("race: {e}")))?;
        }
    }
    let blocks = plan.gpus.iter().map(|g| g.blocks.len() as u32).sum();
    Ok(Passed {
        plan,
        sim,
        blocks,
        predicted: Vec::new(),
    })
}

/// How much slower at one size a later tier's candidate may be than the choice so far, as
/// a share, when it is faster by more than that at another. The model shares links among
/// the ops of a simulated round, and regrouping ops into rounds moves its time by a few
/// tenths of a percent where a GPU, which has no rounds, would not notice (all-to-all in two
/// steps at n = 64: 0.05% slower at 1 GiB for a quarter faster at 8 B and 1 MiB).
pub(super) const TIER_TOLERANCE: f64 = 0.005;

/// Scores (sums of time ratios) closer than this are the same when the candidates' rounds
/// differ, and the one in fewer rounds wins: the model shares links among the ops of a
/// simulated round, so a plan that spreads one step over more rounds may gain a point or
/// two at one size (Bruck's all-to-all at n = 8: 6 rounds 1.5% faster at 1 MiB than 4)
/// that a GPU, which has no rounds, would not see.
pub(super) const SAME_SCORE: f64 = 0.02;

/// Predicted times closer than this share are the same: below the model's resolution
/// (blocks that reduce side by side share the GPU's memory, and their 8 B steps differ by
/// a few parts in a million), where fewer rounds then decide.
const SAME_TIME: f64 = 1e-4;

/// The best candidate (see the module docs), by index. Candidates compete in tiers
/// (`tier`: 0 for the first ones, then the compiler's channels and local ops apart, then a
/// channel per chunk, transfers cut into chunks, blocks of several peers): the best of a tier replaces the choice so far only when it is
/// predicted no slower at any size (and faster at one, or in fewer rounds), so that adding
/// a tier never makes a plan slower at some size for a gain at another.
pub(super) fn pick(passed: &[Option<Passed>], tier: &[u8]) -> Option<usize> {
    let only = |want: u8| -> Vec<Option<&Passed>> {
        passed
            .iter()
            .enumerate()
            .map(|(i, p)| p.as_ref().filter(|_| tier.get(i).copied() == Some(want)))
            .collect()
    };
    let mut chosen: Option<usize> = None;
    for t in 0..=tier.iter().copied().max().unwrap_or(0) {
        let Some(base) = chosen.and_then(|c| passed[c].as_ref()) else {
            chosen = best_of(&only(t)).or(chosen);
            continue;
        };
        // The candidates of this tier no slower than the choice so far at any size (within
        // the tolerance), then the best of those.
        let within = |p: &Passed, tolerance: f64| {
            p.predicted.len() == base.predicted.len()
                && p.predicted
                    .iter()
                    .zip(&base.predicted)
                    .all(|(t, b)| *t <= b * (1.0 + tolerance))
        };
        let dominating: Vec<Option<&Passed>> = only(t)
            .into_iter()
            .map(|p| p.filter(|p| within(p, TIER_TOLERANCE)))
            .collect();
        let Some(n) = best_of(&dominating) else {
            continue;
        };
        let Some(p) = passed[n].as_ref() else {
            continue;
        };
        let faster_by = |margin: f64| {
            p.predicted
                .iter()
                .zip(&base.predicted)
                .any(|(t, b)| *t < b * (1.0 - margin))
        };
        // A loss within the tolerance only for a gain beyond it; no loss at all for any
        // gain, or, equal everywhere, for fewer rounds.
        let no_loss = within(p, SAME_TIME);
        if faster_by(TIER_TOLERANCE)
            || (no_loss && (faster_by(SAME_TIME) || p.sim.rounds < base.sim.rounds))
        {
            chosen = Some(n);
        }
    }
    chosen
}

/// The best of `passed` by the smallest sum of time ratios, then rounds, then blocks.
fn best_of(passed: &[Option<&Passed>]) -> Option<usize> {
    let sizes = PREDICT_SIZES.len();
    let best_at: Vec<f64> = (0..sizes)
        .map(|s| {
            passed
                .iter()
                .flatten()
                .filter_map(|p| p.predicted.get(s).copied())
                .fold(f64::INFINITY, f64::min)
        })
        .collect();
    let score = |p: &Passed| -> f64 {
        p.predicted
            .iter()
            .zip(&best_at)
            .map(|(t, b)| if *b > 0.0 { t / b } else { 1.0 })
            .sum()
    };
    let mut best: Option<(usize, f64, (u32, u32))> = None;
    for (i, p) in passed.iter().enumerate() {
        let Some(p) = p else { continue };
        let s = score(p);
        let size = (p.sim.rounds, p.blocks);
        let better = match best {
            None => true,
            Some((_, bs, bsize)) if size.0 != bsize.0 => {
                // Fewer rounds within the model's resolution of the score win.
                let (fewer, more) = if size.0 < bsize.0 { (s, bs) } else { (bs, s) };
                let tie = fewer <= more + SAME_SCORE;
                if tie { size.0 < bsize.0 } else { s < bs }
            }
            Some((_, bs, bsize)) => s < bs - 1e-9 || (s <= bs + 1e-9 && size < bsize),
        };
        if better {
            best = Some((i, s, size));
        }
    }
    best.map(|(i, _, _)| i)
}
