//! The cost model against the measurements recorded on 2 × H200
//! (`bench/results/2026-11-28-h200x2-model-fit-cta128/auto-*.md`, written by `bash
//! bench/gpu_model_fit.sh fit`) and on 4 × H200 (`bench/results/2026-11-28-h200x4-tuned/`,
//! by `bash bench/gpu_x4.sh tuned`): every shipped algorithm of each collective, as written
//! and with 16 instances, from 64 KiB to 1 GiB, fitted together as `coll bench --auto` fits
//! them, each size costed in the protocol the GPU executor runs a call of that size in.
//!
//! What this holds: the fit of every candidate within 20% at every size but the few recorded
//! in [`GAPS`], which are no further off than recorded; with a latency factor per protocol,
//! as `coll bench --auto` also fits, every candidate but those in [`PROTOCOL_GAPS`]. And the
//! protocol matters: costing every size as bulk fits worse for every collective.
//!
//! The plans costed are the ones the compiler chooses now; at n = 2 they were the measured
//! ones (build dd01fba with 128 CTAs per block, allreduce at 01e2df3). A scheduler change
//! that picks another plan at n = 2 for a shipped algorithm makes this record stale: measure
//! again (`bench/gpu_model_fit.sh fit`).

use coll_compiler::CompileOptions;
use coll_compiler::elaborate::{Options, Protocol};
use coll_compiler::gpu::protocol::{ChunkShape, LlLimits};
use coll_compiler::predict::{self, Compiled, Model};
use coll_lang::builtins::CollectiveKind;
use coll_tests::compiled_with;
use std::path::{Path, PathBuf};

/// The measurements were f32 calls.
const ESIZE: u64 = 4;

/// Candidates whose worst error under their collective's fit exceeds 20%, with that error as
/// measured (2026-11-28). `allreduce_allpairs` at n = 2 sends its whole 1 MiB buffer as one
/// message, over LL's 512 KiB, so its 1 MiB call runs bulk (18.3 µs) where every other
/// allreduce runs LL (16.2–16.6 µs); the fit's one latency factor serves LL's 0.6 µs and
/// Simple's 3.4 µs of protocol latency alike, and under it the lone bulk call at 1 MiB is
/// 32% slower than predicted. `broadcast_ring x16` at 64 KiB: 16 blocks of a 4 KiB LL
/// message each took 10.9 µs where the fit says 8.2.
const GAPS: &[(&str, f64)] = &[
    ("allreduce_allpairs", 0.317),
    ("allreduce_allpairs x16", 0.212),
    ("broadcast_ring x16", 0.247),
];

/// The same with a latency factor for bulk calls and one for LL calls. The allreduce fit then
/// puts LL calls' factor at 0 and 8 µs in the fixed part (an eager LL call of 64 KiB–1 MiB
/// costs about its host launch whatever its hops) and fits every allreduce candidate; the
/// other collectives' LL calls all have one predicted fixed part, so theirs do not change.
/// Only this one is left.
const PROTOCOL_GAPS: &[(&str, f64)] = &[("broadcast_ring x16", 0.247)];

/// One measured candidate: its column label, and time by size.
struct Column {
    label: String,
    times: Vec<(u64, f64)>,
}

/// A record of `coll bench --auto` tables on one machine, `auto-<collective>.md` in `dir`.
struct Record {
    dir: &'static str,
    /// Ranks (GPUs) of the measurements.
    n: usize,
    /// Candidates left out of the fit: their plan has changed since they were measured.
    stale: &'static [&'static str],
}

/// The smallest size fitted, as `coll bench --auto` fits (`tuning::FIT_MIN_BYTES`).
const FIT_MIN: u64 = 64 << 10;

/// The measured table of `auto-<collective>.md` from [`FIT_MIN`]: a header row naming each
/// candidate (`NAME (µs)` or `NAME x16 (µs)`), then one row per size.
fn measured(record: &Record, collective: &str) -> Vec<Column> {
    let path = repo()
        .join(record.dir)
        .join(format!("auto-{collective}.md"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let rows: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| l.starts_with('|'))
        .map(|l| l.trim_matches('|').split('|').map(str::trim).collect())
        .collect();
    let header = &rows[0];
    let names = &header[1..header.len() - 1];
    let mut cols: Vec<Column> = names
        .iter()
        .map(|h| Column {
            label: h.trim_end_matches(" (µs)").to_string(),
            times: Vec::new(),
        })
        .collect();
    for row in &rows[2..] {
        let size: u64 = row[0].parse().expect("a size");
        if size < FIT_MIN {
            continue;
        }
        for (col, cell) in cols.iter_mut().zip(&row[1..]) {
            col.times.push((size, cell.parse().expect("a time")));
        }
    }
    cols.retain(|c| !record.stale.contains(&c.label.as_str()));
    assert!(
        !cols.is_empty() && cols.iter().all(|c| c.times.len() >= 5),
        "{collective}"
    );
    cols
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// One measured size of one candidate, with the model's prediction for it costed both ways.
struct Point {
    label: String,
    size: u64,
    /// The prediction costed in bulk and in LL.
    bulk: predict::Time,
    ll: predict::Time,
    /// Whether the executor ran a call of this size in LL (its rule at its default limits).
    ran_ll: bool,
    measured: f64,
}

impl Point {
    /// `(predicted fixed part, predicted transfer part, measured, whether costed in LL)`:
    /// costed in the protocol the call ran in (`by_size`), or in bulk.
    fn row(&self, by_size: bool) -> (f64, f64, f64, bool) {
        let ll = by_size && self.ran_ll;
        let parts = if ll { self.ll } else { self.bulk };
        (parts.latency_us, parts.transfer_us, self.measured, ll)
    }
}

/// Every measured size of every candidate of `collective`.
fn points(record: &Record, collective: &str) -> Vec<Point> {
    let kind = CollectiveKind::from_name(collective).expect("a collective");
    let n = record.n;
    let mut out = Vec::new();
    for col in measured(record, collective) {
        let (file, instances) = match col.label.strip_suffix(" x16") {
            Some(f) => (f, Some(16)),
            None => (col.label.as_str(), None),
        };
        let options = CompileOptions {
            elaborate: Options {
                instances,
                ..Options::default()
            },
            ..CompileOptions::default()
        };
        let path = repo().join("algorithms").join(format!("{file}.coll"));
        let c = compiled_with(&path, n, &options).expect("compiles");
        let plan = c.plan();
        let topo =
            coll_compiler::topology::Topology::parse(&format!("nvswitch:{n}")).expect("a preset");
        let costed = |p| {
            let model = Model {
                protocol: Some(p),
                ..Model::default()
            };
            let steps = |r, b, o| c.schedule.round_of(r, b, o);
            Compiled::new(plan, &topo, &steps, &model).expect("costed")
        };
        let (bulk, ll) = (costed(Protocol::Simple), costed(Protocol::Ll));
        let shape = ChunkShape::of(plan);
        for &(size, t) in &col.times {
            let count = predict::nccl_count(kind, size, n as u32) / ESIZE;
            out.push(Point {
                label: col.label.clone(),
                size,
                bulk: bulk.parts(size),
                ll: ll.parts(size),
                ran_ll: LlLimits::default().uses_ll(shape, ESIZE, count),
                measured: t,
            });
        }
    }
    out
}

/// The machine's fit of `points` (each size costed in the protocol it ran in, `by_size`,
/// else in bulk; `by_protocol`: with a latency factor for bulk calls and one for LL calls)
/// and each candidate's worst relative error under it, with that size.
fn fit(
    points: &[Point],
    by_size: bool,
    by_protocol: bool,
) -> (predict::ProtocolCalibration, Vec<(String, f64, u64)>) {
    let rows: Vec<(f64, f64, f64, bool)> = points.iter().map(|p| p.row(by_size)).collect();
    let f: predict::ProtocolCalibration = if by_protocol {
        predict::calibrate_by_protocol(&rows).expect("a fit")
    } else {
        let one: Vec<(f64, f64, f64)> = rows.iter().map(|&(x, y, t, _)| (x, y, t)).collect();
        predict::calibrate(&one).expect("a fit").into()
    };
    let mut worst: Vec<(String, f64, u64)> = Vec::new();
    for (p, &(lat, xfer, t, ll)) in points.iter().zip(&rows) {
        let parts = predict::Time {
            latency_us: lat,
            transfer_us: xfer,
        };
        let e = (f.time_us(parts, ll) - t).abs() / t;
        match worst.iter_mut().find(|w| w.0 == p.label) {
            Some(w) if e > w.1 => *w = (p.label.clone(), e, p.size),
            Some(_) => {}
            None => worst.push((p.label.clone(), e, p.size)),
        }
    }
    (f, worst)
}

/// Each of `worst` within 20%, or within its entry of `gaps` (half a point of slack); what
/// misses goes to `failures`, every line to `report`.
fn hold(
    worst: &[(String, f64, u64)],
    gaps: &[(&str, f64)],
    report: &mut String,
    failures: &mut Vec<String>,
) {
    for (label, e, size) in worst {
        *report += &format!("  {label}: worst {:.1}% at {size} B\n", e * 100.0);
        let bound = gaps
            .iter()
            .find(|g| g.0 == label)
            .map_or(0.20, |g| g.1 + 0.005);
        if *e > bound {
            failures.push(format!(
                "{label}: {:.1}% at {size} B, bound {:.1}%",
                e * 100.0,
                bound * 100.0
            ));
        }
    }
}

/// What the fits of `record` leave, per collective, against `gaps` (one latency factor) and
/// `protocol_gaps` (a factor per protocol): the report, and what misses its bound.
fn fits(
    record: &Record,
    gaps: &[(&str, f64)],
    protocol_gaps: &[(&str, f64)],
) -> (String, Vec<String>) {
    let protocol_helps = record.n == 2;
    let mut report = String::new();
    let mut failures = Vec::new();
    for collective in [
        "allreduce",
        "allgather",
        "reducescatter",
        "alltoall",
        "broadcast",
    ] {
        let points = points(record, collective);
        let (f, worst) = fit(&points, true, false);
        let (bulk, _) = fit(&points, false, false);
        let (rms, rms_bulk) = (f.rel_rms, bulk.rel_rms);
        report += &format!("{collective}: rms {rms:.3} (all bulk {rms_bulk:.3})\n");
        if protocol_helps && rms >= rms_bulk {
            failures.push(format!(
                "{collective}: costing each size in its protocol fits no better ({rms:.3} against {rms_bulk:.3})"
            ));
        }
        hold(&worst, gaps, &mut report, &mut failures);
        let (f, worst) = fit(&points, true, true);
        report += &format!(
            "{collective}, a latency factor per protocol: {:.2} µs + {:.2} x bulk latency + {:.2} x LL latency + {:.2} x transfer, rms {:.3}\n",
            f.fixed_us, f.latency, f.latency_ll, f.transfer, f.rel_rms
        );
        hold(&worst, protocol_gaps, &mut report, &mut failures);
    }
    (report, failures)
}

#[test]
fn the_model_fits_every_candidate_within_20_percent_but_the_gaps_recorded() {
    let record = Record {
        dir: "bench/results/2026-11-28-h200x2-model-fit-cta128",
        n: 2,
        stale: &[],
    };
    let (report, failures) = fits(&record, GAPS, PROTOCOL_GAPS);
    eprintln!("{report}");
    assert!(failures.is_empty(), "{}\n{report}", failures.join("\n"));
}

/// At n = 4 (`bench/results/2026-11-28-h200x4-tuned/auto-*.md`, 256 KiB to 1 GiB by 8) the
/// model fits reducescatter and alltoall within 8%, and every other collective worse than at
/// n = 2: these are the candidates over 20%, with their worst error as measured (2026-11-28).
/// Most miss at 2 MiB, the largest calls that run LL (measured slower than LL's cost), or at
/// 1 GiB; `allgather_rd` at 128 MiB. Costing each size in its protocol does not help
/// allgather and makes broadcast fit worse (rms 0.199 against 0.155 all bulk), so that is
/// not held here. `allreduce_nvls` is left out: its plan at n = 4 changed (a head's
/// receives in one op) after these measurements.
const GAPS_N4: &[(&str, f64)] = &[
    ("allreduce_allpairs x16", 0.305),
    ("allreduce_rhd", 0.209),
    ("allreduce_rhd x16", 0.392),
    ("allreduce_ring", 0.348),
    ("allreduce_ring x16", 0.341),
    ("allreduce_tree", 0.365),
    ("allreduce_tree x16", 0.338),
    ("allgather_rd", 0.466),
    ("allgather_rd x16", 0.262),
    ("allgather_ring", 0.254),
    ("allgather_ring x16", 0.241),
    ("broadcast_ring", 0.342),
    ("broadcast_ring x16", 0.348),
    ("broadcast_tree", 0.244),
    ("broadcast_tree x16", 0.306),
];

/// [`GAPS_N4`] with a latency factor per protocol.
const PROTOCOL_GAPS_N4: &[(&str, f64)] = &[
    ("allreduce_allpairs x16", 0.333),
    ("allreduce_rhd x16", 0.414),
    ("allreduce_ring", 0.298),
    ("allreduce_ring x16", 0.291),
    ("allreduce_tree x16", 0.281),
    ("allgather_rd", 0.474),
    ("allgather_rd x16", 0.256),
    ("broadcast_ring", 0.234),
    ("broadcast_ring x16", 0.236),
    ("broadcast_tree", 0.230),
    ("broadcast_tree x16", 0.270),
];

#[test]
fn the_model_at_four_ranks_fits_reducescatter_and_alltoall_and_no_worse_than_recorded() {
    let record = Record {
        dir: "bench/results/2026-11-28-h200x4-tuned",
        n: 4,
        stale: &["allreduce_nvls", "allreduce_nvls x16"],
    };
    let (report, failures) = fits(&record, GAPS_N4, PROTOCOL_GAPS_N4);
    eprintln!("{report}");
    assert!(failures.is_empty(), "{}\n{report}", failures.join("\n"));
}
