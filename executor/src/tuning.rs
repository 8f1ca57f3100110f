//! The per-size choice of algorithm, from measurements: which shipped plan (and settings)
//! serves a call of a given collective and size on this machine, as a table kept on disk.
//!
//! A table is built from timed runs of every candidate at a sweep of sizes ([`build`]): at
//! each measured size the fastest wins, and neighbouring sizes with the same winner merge into
//! one range. Between two measured sizes the smaller one's winner serves; below the first and
//! above the last, the nearest. Every lookup says which entry served and why ([`Choice`]),
//! so a caller can log it: there is no silent fallback.
//!
//! Invariants of a [`TuningTable`]: entries of one collective are sorted by `min_bytes`, do
//! not overlap, and cover `0..=u64::MAX` without gaps (checked on load).

use coll_lang::builtins::CollectiveKind;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The table format's version; a table of another version is refused, not guessed at.
pub const TUNING_VERSION: u32 = 1;

/// One timed run of one candidate.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    pub collective: CollectiveKind,
    /// The algorithm file, e.g. `algorithms/allreduce_ring.coll`.
    pub algorithm: String,
    /// Settings it ran with, in words (`instances=16`, `peers=several`: what
    /// [`crate::shipped::options_for`] reads), empty for defaults.
    pub settings: String,
    /// nccl-tests' size S.
    pub bytes: u64,
    pub time_us: f64,
}

/// Who serves one size range of one collective.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub collective: String,
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub algorithm: String,
    #[serde(default)]
    pub settings: String,
    /// The winner's time at the measured size that opened this range, µs.
    pub time_us: f64,
    /// The runner-up's time there, when there was one (how close the choice was).
    #[serde(default)]
    pub runner_up_us: Option<f64>,
}

/// A per-size choice for one machine and rank count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TuningTable {
    pub version: u32,
    /// What it was measured on, in words (GPU model and count).
    pub machine: String,
    pub ranks: u32,
    pub topology: String,
    pub entries: Vec<Entry>,
    /// How each candidate's measurements compare with the cost model
    /// ([`coll_compiler::predict::calibrate`]).
    #[serde(default)]
    pub calibration: Vec<Fit>,
    /// One calibration for every candidate together, from [`FIT_MIN_BYTES`] up, and how far
    /// each candidate's measurements are from it: whether the model, with two factors for
    /// the whole machine, predicts every algorithm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_fit: Option<ModelFit>,
    /// The same with the predicted fixed part weighed apart for bulk and LL calls
    /// ([`ModelFit::latency_ll`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_fit_by_protocol: Option<ModelFit>,
}

/// The smallest size the whole-machine fit ([`ModelFit`]) takes: below it a call's time is
/// the launch and synchronisation the model has no term for.
pub const FIT_MIN_BYTES: u64 = 64 << 10;

/// The cost model fitted to every candidate of a table at once ([`TuningTable::model_fit`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelFit {
    /// Measured ≈ `fixed_us` + `latency` × predicted fixed part + `transfer` × predicted
    /// transfer part.
    pub fixed_us: f64,
    pub latency: f64,
    pub transfer: f64,
    /// When set, the factor of the predicted fixed part of calls that ran LL, `latency`
    /// then weighing bulk calls' alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ll: Option<f64>,
    /// Relative RMS error over every point.
    pub rel_rms: f64,
    /// Per candidate, the largest relative error of the fit at any of its sizes, and that
    /// size.
    pub worst: Vec<WorstError>,
}

/// A candidate's largest relative error under a [`ModelFit`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorstError {
    pub algorithm: String,
    pub rel_err: f64,
    pub bytes: u64,
}

/// One candidate's calibration of the cost model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fit {
    pub algorithm: String,
    /// Measured ≈ `fixed_us` + `latency` × predicted fixed part + `transfer` × predicted
    /// transfer part.
    #[serde(default)]
    pub fixed_us: f64,
    pub latency: f64,
    pub transfer: f64,
    /// Relative RMS error left after the fit.
    pub rel_rms: f64,
}

/// The entry that serves a call, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Choice<'a> {
    pub entry: &'a Entry,
    pub bytes: u64,
}

impl Choice<'_> {
    /// One line for a log: what serves and on what evidence.
    pub fn why(&self) -> String {
        let e = self.entry;
        let margin = e
            .runner_up_us
            .map(|r| format!(", runner-up {r:.1} µs"))
            .unwrap_or_default();
        format!(
            "{} of {} B: {}, fastest measured for {}..={} B ({:.1} µs{margin})",
            e.collective,
            self.bytes,
            crate::shipped::label(&e.algorithm, &e.settings),
            e.min_bytes,
            e.max_bytes,
            e.time_us
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TuningError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: not a tuning table: {what}")]
    Format { path: String, what: String },
    #[error("{path}: tuning table version {found}; this coll reads version {TUNING_VERSION}")]
    Version { path: String, found: u32 },
}

/// The table for `measurements`: per collective and measured size the fastest, merged into
/// ranges (see the module docs).
pub fn build(
    machine: &str,
    ranks: u32,
    topology: &str,
    measurements: &[Measurement],
) -> TuningTable {
    let mut entries = Vec::new();
    for kind in CollectiveKind::ALL {
        let mut sizes: Vec<u64> = measurements
            .iter()
            .filter(|m| m.collective == kind && m.time_us.is_finite())
            .map(|m| m.bytes)
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        let mut mine: Vec<Entry> = Vec::new();
        for (i, &size) in sizes.iter().enumerate() {
            let mut at: Vec<&Measurement> = measurements
                .iter()
                .filter(|m| m.collective == kind && m.bytes == size && m.time_us.is_finite())
                .collect();
            at.sort_by(|a, b| a.time_us.total_cmp(&b.time_us));
            let Some(best) = at.first() else { continue };
            let min_bytes = if i == 0 { 0 } else { size };
            let max_bytes = sizes.get(i + 1).map_or(u64::MAX, |next| next - 1);
            match mine.last_mut() {
                Some(last)
                    if last.algorithm == best.algorithm && last.settings == best.settings =>
                {
                    last.max_bytes = max_bytes;
                }
                _ => mine.push(Entry {
                    collective: kind.name().to_string(),
                    min_bytes,
                    max_bytes,
                    algorithm: best.algorithm.clone(),
                    settings: best.settings.clone(),
                    time_us: best.time_us,
                    runner_up_us: at.get(1).map(|m| m.time_us),
                }),
            }
        }
        entries.extend(mine);
    }
    TuningTable {
        version: TUNING_VERSION,
        machine: machine.to_string(),
        ranks,
        topology: topology.to_string(),
        entries,
        calibration: Vec::new(),
        model_fit: None,
        model_fit_by_protocol: None,
    }
}

impl TuningTable {
    /// The collectives the table has entries for, each once, in the order they first appear.
    pub fn collectives(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for e in &self.entries {
            if !out.contains(&e.collective.as_str()) {
                out.push(&e.collective);
            }
        }
        out
    }

    /// The entry serving `kind` at `bytes`, or `None` when the table has none for `kind`.
    pub fn choose(&self, kind: CollectiveKind, bytes: u64) -> Option<Choice<'_>> {
        self.entries
            .iter()
            .find(|e| e.collective == kind.name() && e.min_bytes <= bytes && bytes <= e.max_bytes)
            .map(|entry| Choice { entry, bytes })
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    pub fn save(&self, path: &Path) -> Result<(), TuningError> {
        std::fs::write(path, self.to_json() + "\n").map_err(|source| TuningError::Io {
            path: path.display().to_string(),
            source,
        })
    }

    /// Reads a table and checks its version and ranges.
    pub fn load(path: &Path) -> Result<TuningTable, TuningError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| TuningError::Io {
            path: name.clone(),
            source,
        })?;
        TuningTable::parse(&name, &text)
    }

    pub fn parse(name: &str, text: &str) -> Result<TuningTable, TuningError> {
        let format = |what: String| TuningError::Format {
            path: name.to_string(),
            what,
        };
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format(e.to_string()))?;
        let found = v
            .get("version")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| format("no `version`".into()))?;
        if found != u64::from(TUNING_VERSION) {
            return Err(TuningError::Version {
                path: name.to_string(),
                found: found.min(u64::from(u32::MAX)) as u32,
            });
        }
        let t: TuningTable = serde_json::from_value(v).map_err(|e| format(e.to_string()))?;
        for kind in CollectiveKind::ALL {
            let mut next = 0u64;
            let mut any = false;
            for e in t.entries.iter().filter(|e| e.collective == kind.name()) {
                any = true;
                if e.min_bytes != next || e.max_bytes < e.min_bytes {
                    return Err(format(format!(
                        "{} entry {}..={} B does not start where the last ended ({next} B)",
                        e.collective, e.min_bytes, e.max_bytes
                    )));
                }
                next = e.max_bytes.wrapping_add(1);
            }
            if any && next != 0 {
                return Err(format(format!(
                    "{} entries stop at {} B instead of covering every size",
                    kind.name(),
                    next.wrapping_sub(1)
                )));
            }
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(algo: &str, bytes: u64, time_us: f64) -> Measurement {
        Measurement {
            collective: CollectiveKind::AllReduce,
            algorithm: algo.into(),
            settings: String::new(),
            bytes,
            time_us,
        }
    }

    #[test]
    fn the_fastest_wins_and_runs_merge() {
        let ms = [
            m("ring", 8, 30.0),
            m("allpairs", 8, 12.0),
            m("ring", 1024, 31.0),
            m("allpairs", 1024, 14.0),
            m("ring", 1 << 20, 40.0),
            m("allpairs", 1 << 20, 90.0),
            m("ring", 1 << 30, 3000.0),
            m("allpairs", 1 << 30, 9000.0),
        ];
        let t = build("2 x H200", 2, "nvswitch:2", &ms);
        let rows: Vec<(u64, u64, &str)> = t
            .entries
            .iter()
            .map(|e| (e.min_bytes, e.max_bytes, e.algorithm.as_str()))
            .collect();
        assert_eq!(
            rows,
            [(0, (1 << 20) - 1, "allpairs"), (1 << 20, u64::MAX, "ring")]
        );
        let c = t.choose(CollectiveKind::AllReduce, 4096).expect("covered");
        assert_eq!(c.entry.algorithm, "allpairs");
        assert!(
            c.why().contains(
                "allpairs, fastest measured for 0..=1048575 B (12.0 µs, runner-up 30.0 µs)"
            ),
            "{}",
            c.why()
        );
        assert_eq!(
            t.choose(CollectiveKind::AllReduce, 1 << 40)
                .map(|c| c.entry.algorithm.as_str()),
            Some("ring")
        );
        assert!(t.choose(CollectiveKind::AllGather, 8).is_none());
        // Two entries of one collective: named once.
        assert_eq!(t.collectives(), ["allreduce"]);
        // Round trip through the file format.
        let back = TuningTable::parse("t.json", &t.to_json()).expect("valid");
        assert_eq!(back, t);
    }

    #[test]
    fn bad_tables_are_refused_naming_the_problem() {
        let t = build(
            "x",
            2,
            "nvswitch:2",
            &[m("ring", 8, 1.0), m("tree", 64, 0.5)],
        );
        let mut gap = t.clone();
        gap.entries[1].min_bytes += 1;
        let e = TuningTable::parse("gap.json", &gap.to_json()).expect_err("gap");
        assert!(
            e.to_string()
                .contains("gap.json: not a tuning table: allreduce entry 65..="),
            "{e}"
        );
        let mut short = t.clone();
        short.entries[1].max_bytes = 1000;
        let e = TuningTable::parse("short.json", &short.to_json()).expect_err("short");
        assert!(e.to_string().contains("stop at 1000 B"), "{e}");
        let newer = t.to_json().replace("\"version\": 1", "\"version\": 9");
        let e = TuningTable::parse("v.json", &newer).expect_err("version");
        assert!(
            e.to_string()
                .contains("version 9; this coll reads version 1"),
            "{e}"
        );
        let e = TuningTable::parse("junk.json", "[1, 2").expect_err("junk");
        assert!(
            e.to_string().starts_with("junk.json: not a tuning table"),
            "{e}"
        );
    }
}
