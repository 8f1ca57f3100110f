//! `coll bench --auto`: measures every shipped algorithm of a collective on this machine over
//! a size sweep, keeps the fastest per size in a [`TuningTable`] on disk, and fits the cost
//! model to each candidate's measurements.
//!
//! Every candidate's every size is checked (`check` calls); a candidate with a wrong element
//! is excluded from the table and reported, never chosen.

use super::bench::{BenchConfig, BenchReport, any_wrong, bench};
use crate::error::ExecError;
use crate::shipped;
use crate::tuning::{Fit, Measurement, TuningTable, build};
use coll_compiler::predict::{self, Compiled, Model};
use coll_compiler::topology::Topology;
use coll_lang::builtins::CollectiveKind;
use std::path::PathBuf;

/// One candidate's outcome.
#[derive(Debug)]
pub struct Tried {
    /// `algorithms/<file>`.
    pub file: String,
    /// The setting it was compiled with (empty: as written).
    pub settings: String,
    /// The sweep, or why the candidate could not run (or ran wrong).
    pub outcome: Result<BenchReport, String>,
}

/// Everything `--auto` found.
#[derive(Debug)]
pub struct Tuned {
    pub table: TuningTable,
    pub tried: Vec<Tried>,
}

/// Where a table for `kind` on `n` ranks of `topo` is kept by default (beside the kernel
/// cache).
pub fn default_path(kind: CollectiveKind, n: u32, topo: &str) -> PathBuf {
    let topo: String = topo
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    super::device::cache_dir().join(format!("tuning-{}-{n}-{topo}.json", kind.name()))
}

/// Sweeps every shipped `kind` algorithm that compiles for `topo` with `cfg` (out-of-place
/// times decide), as written and with each of `settings` ([`shipped::options_for`], e.g.
/// `instances=16`), builds the table and the model fits. `progress(what, i, of)` is called
/// before each candidate.
pub fn tune(
    kind: CollectiveKind,
    topo: &Topology,
    machine: &str,
    cfg: &BenchConfig,
    settings: &[String],
    progress: &mut dyn FnMut(&str, usize, usize),
) -> Result<Tuned, ExecError> {
    let size = cfg.max_bytes;
    let mut candidates: Vec<(String, String, Result<coll_compiler::plan::Plan, String>)> =
        Vec::new();
    for c in shipped::candidates(kind, topo, size) {
        let Some(plan) = c.plan else { continue };
        for s in settings {
            candidates.push((
                c.file.clone(),
                s.clone(),
                shipped::plan_of(&c.file, topo, s),
            ));
        }
        candidates.push((c.file, String::new(), Ok(plan)));
    }
    candidates.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    let mut measurements = Vec::new();
    let mut fits = Vec::new();
    let mut tried = Vec::new();
    let total = candidates.len();
    for (i, (file, setting, plan)) in candidates.into_iter().enumerate() {
        let label = shipped::label(&file, &setting);
        progress(&label, i, total);
        let plan = match plan {
            Ok(p) => p,
            Err(why) => {
                tried.push(Tried {
                    file,
                    settings: setting,
                    outcome: Err(why),
                });
                continue;
            }
        };
        let schedule = predict::asap(&plan);
        let model = Compiled::new(
            &plan,
            topo,
            &|r, b, o| schedule.step(r, b, o),
            &Model::default(),
        )
        .ok();
        let outcome = match bench(plan, cfg, &mut |_, _| {}) {
            Ok(r) if any_wrong(&r) => Err("wrong elements in its check calls".to_string()),
            Ok(r) => Ok(r),
            Err(e) => Err(e.to_string()),
        };
        if let Ok(r) = &outcome {
            let mut points = Vec::new();
            for row in &r.rows {
                measurements.push(Measurement {
                    collective: kind,
                    algorithm: file.clone(),
                    settings: setting.clone(),
                    bytes: row.size,
                    time_us: row.out_of_place.time_us,
                });
                if let Some(m) = &model {
                    let (lat, xfer) = m.parts(row.size);
                    points.push((lat, xfer, row.out_of_place.time_us));
                }
            }
            if let Some(f) = predict::calibrate(&points) {
                fits.push(Fit {
                    algorithm: label.clone(),
                    latency: f.latency,
                    transfer: f.transfer,
                    rel_rms: f.rel_rms,
                });
            }
        }
        tried.push(Tried {
            file,
            settings: setting,
            outcome,
        });
    }
    let mut table = build(machine, topo.num_ranks() as u32, topo.name(), &measurements);
    table.calibration = fits;
    Ok(Tuned { table, tried })
}
