//! The record of a suite run (`coll bench --suite --record FILE.jsonl`): one JSON object per
//! line, one line per case, size and placement, appended; `bench/README.md` lists the
//! fields.
//!
//! Invariants: a line is self-contained (commit, date, machine, the case as run and its
//! targets travel with every figure), so a summary needs nothing but the file; a case's lines
//! of one run share one `date` (UTC, `YYYY-MM-DDTHH:MM:SSZ`, which sorts as text); the NCCL
//! figures and `ratio` (NCCL's time over coll's) are present exactly when NCCL ran, and are
//! NCCL-best's (the fastest configuration at that size and placement, [`super::table`]);
//! the raw configurations' times (`nccl_default_us`, `nccl_symmetric_us`,
//! `nccl_zero_cta_us`) and `nccl_best` are left out where they did not run, and older
//! records, which lack them, read as if none had (their `nccl_*` are the default
//! configuration's).

use super::nccl::NcclConfig;
use super::suite::{Case, Ran};
use crate::Env;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::Path;

/// The variable that names the commit a record is filed under, where the binary runs (it
/// wins over the commit baked in at build time).
pub const COMMIT_VAR: &str = "COLL_COMMIT";
/// The variable that names the machine (`h200x2`); default: the GPU's model and count.
pub const MACHINE_VAR: &str = "COLL_MACHINE";
/// The variable that gives the driver's version (what `nvidia-smi` reports; the CUDA driver
/// API gives only the CUDA version it supports).
pub const DRIVER_VAR: &str = "COLL_DRIVER";

/// Out of place or in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    OutOfPlace,
    InPlace,
}

/// Where a record was measured.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    /// A short label (`h200x2`): [`MACHINE_VAR`], or the GPU model and count.
    pub name: String,
    /// The GPU model (of the first GPU used).
    pub gpu: String,
    /// GPUs on the machine.
    pub gpus: usize,
    pub driver: Option<String>,
    pub nccl: Option<String>,
}

impl Machine {
    /// `h200x2 (2 × NVIDIA H200, driver 580.159.04, NCCL 2.28.3)`.
    pub fn describe(&self) -> String {
        let mut s = format!("{} ({} × {}", self.name, self.gpus, self.gpu);
        if let Some(d) = &self.driver {
            s.push_str(&format!(", driver {d}"));
        }
        if let Some(n) = &self.nccl {
            s.push_str(&format!(", NCCL {n}"));
        }
        s.push(')');
        s
    }
}

/// The case's setup figures, the same on each of its lines.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Setup {
    pub load_ms: f64,
    /// The first call after load (smallest size, out of place) and the second.
    pub first_call_ms: f64,
    pub second_call_ms: f64,
    /// The plan's GPU allocations and what it reported beforehand, largest GPU, bytes.
    pub allocated_bytes: u64,
    pub reported_bytes: u64,
    pub nccl_init_ms: Option<f64>,
    /// NCCL's GPU memory, largest GPU, bytes.
    pub nccl_bytes: Option<u64>,
    /// The SM-store ceiling of the run, GB/s per direction.
    pub ceiling_gbs: Option<f64>,
    /// The launch floor of an eager call in the run, µs (records before it have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_floor_us: Option<f64>,
}

/// One line of a record file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Short commit id of the build (`unknown` when neither baked in nor given).
    pub commit: String,
    pub date: String,
    pub machine: Machine,
    pub case: String,
    /// The case's group ([`Case::group`]).
    pub group: Option<String>,
    pub file: String,
    pub collective: String,
    pub ranks: usize,
    pub instances: Option<u32>,
    pub dtype: String,
    pub op: String,
    pub root: usize,
    /// `eager` or `graph`.
    pub mode: String,
    pub size: u64,
    pub count: u64,
    pub placement: Placement,
    pub time_us: f64,
    pub algbw: f64,
    pub busbw: f64,
    /// Wrong elements of the check call (None: not checked).
    pub wrong: Option<u64>,
    /// `ll`, `ll128`, `bulk` or `oneshot`.
    pub protocol: String,
    /// Some messages stored straight into the receiver's buffer.
    pub direct: bool,
    /// Every message moved by the copy engines.
    pub copy_engines: bool,
    /// NCCL-best's figures.
    pub nccl_time_us: Option<f64>,
    pub nccl_algbw: Option<f64>,
    pub nccl_busbw: Option<f64>,
    /// NCCL-best's time over coll's.
    pub ratio: Option<f64>,
    /// Which configuration NCCL-best is (`default`, `symmetric`, `zero-cta`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_best: Option<String>,
    /// Each configuration's time, µs, where it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_default_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_symmetric_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_zero_cta_us: Option<f64>,
    pub setup: Setup,
    /// The case's targets as written.
    pub targets: Vec<String>,
}

/// Why a record file could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}:{line}:{col}: {message}")]
    Line {
        path: String,
        line: usize,
        col: usize,
        message: String,
    },
}

impl Record {
    /// The lines of one case's sweep, all stamped `date`.
    pub fn of_case(
        case: &Case,
        ran: &Ran,
        machine: &Machine,
        commit: &str,
        date: &str,
    ) -> Vec<Record> {
        let r = &ran.report;
        let max = |v: &[u64]| v.iter().copied().max().unwrap_or(0);
        let setup = Setup {
            load_ms: r.load_ms,
            first_call_ms: r.first_call_ms,
            second_call_ms: r.second_call_ms,
            allocated_bytes: max(&r.allocated_bytes),
            reported_bytes: max(&r.reported_bytes),
            nccl_init_ms: r.nccl_init_ms,
            nccl_bytes: r.nccl_bytes.as_deref().map(max),
            ceiling_gbs: r.store_ceiling_gbs,
            launch_floor_us: r.launch_floor_us,
        };
        let machine = Machine {
            nccl: r.nccl_version.clone().or_else(|| machine.nccl.clone()),
            ..machine.clone()
        };
        let mut out = Vec::with_capacity(r.rows.len() * 2);
        for row in &r.rows {
            let off = coll_executor::cuda::direct::CallDirect::Off;
            let placements = [
                (
                    Placement::OutOfPlace,
                    &row.out_of_place,
                    row.direct_out != off,
                    row.ce_out,
                ),
                (
                    Placement::InPlace,
                    &row.in_place,
                    row.direct_in != off,
                    row.ce_in,
                ),
            ];
            for (placement, t, direct, copy_engines) in placements {
                let best = row.nccl_best(placement);
                let nccl = best.map(|b| b.1);
                let raw = |c: NcclConfig| row.nccl(c, placement).map(|n| n.time_us);
                out.push(Record {
                    commit: commit.to_string(),
                    date: date.to_string(),
                    machine: machine.clone(),
                    case: case.name.clone(),
                    group: case.group.clone(),
                    file: case.file.display().to_string(),
                    collective: ran.collective.name().to_string(),
                    ranks: case.ranks,
                    instances: case.instances,
                    dtype: case.dtype.clone(),
                    op: case.op.clone(),
                    root: case.root,
                    mode: r.mode.clone(),
                    size: row.size,
                    count: row.count,
                    placement,
                    time_us: t.time_us,
                    algbw: t.algbw,
                    busbw: t.busbw,
                    wrong: t.wrong,
                    protocol: if row.oneshot {
                        "oneshot".to_string()
                    } else {
                        row.protocol.name().to_string()
                    },
                    direct,
                    copy_engines,
                    nccl_time_us: nccl.map(|n| n.time_us),
                    nccl_algbw: nccl.map(|n| n.algbw),
                    nccl_busbw: nccl.map(|n| n.busbw),
                    ratio: super::table::ratio(row, placement),
                    nccl_best: best.map(|b| b.0.name().to_string()),
                    nccl_default_us: raw(NcclConfig::Default),
                    nccl_symmetric_us: raw(NcclConfig::Symmetric),
                    nccl_zero_cta_us: raw(NcclConfig::ZeroCta),
                    setup: setup.clone(),
                    targets: case.targets.clone(),
                });
            }
        }
        out
    }

    /// The record as one line of JSON, without the newline.
    pub fn to_line(&self) -> String {
        // A struct of strings, numbers and options always serialises.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Appends `records` to `path` (created if missing), one line each.
pub fn append(path: &Path, records: &[Record]) -> Result<(), RecordError> {
    let err = |source| RecordError::Write {
        path: path.display().to_string(),
        source,
    };
    let mut text = String::new();
    for r in records {
        text.push_str(&r.to_line());
        text.push('\n');
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(err)?;
    f.write_all(text.as_bytes()).map_err(err)
}

/// The records of `text` (the file `path`, for messages); blank lines are skipped.
pub fn parse(path: &str, text: &str) -> Result<Vec<Record>, RecordError> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| RecordError::Line {
                path: path.to_string(),
                line: i + 1,
                col: e.column(),
                message: e.to_string(),
            })
        })
        .collect()
}

/// Reads the record file `path`.
pub fn read(path: &Path) -> Result<Vec<Record>, RecordError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| RecordError::Read {
        path: name.clone(),
        source,
    })?;
    parse(&name, &text)
}

/// The commit records are filed under: [`COMMIT_VAR`], else the one baked in at build time,
/// else `unknown`.
pub fn commit(env: &Env) -> String {
    let c = env
        .get(COMMIT_VAR)
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .unwrap_or(env!("COLL_BUILD_COMMIT"));
    if c.is_empty() {
        "unknown".into()
    } else {
        c.to_string()
    }
}

/// This machine as a record names it: the first of `gpus`' model, the GPU count, the driver
/// from [`DRIVER_VAR`], NCCL's version if it loads.
pub fn machine(env: &Env, gpus: &[usize]) -> Machine {
    let gpu = gpus
        .first()
        .and_then(|&g| cudarc::driver::CudaContext::new(g).ok())
        .and_then(|c| c.name().ok())
        .unwrap_or_else(|| "GPU".into());
    let count = coll_executor::cuda::device::device_count();
    let name = env
        .get(MACHINE_VAR)
        .filter(|m| !m.is_empty())
        .map_or_else(|| machine_label(&gpu, count), str::to_string);
    Machine {
        name,
        gpu,
        gpus: count,
        driver: env.lookup(DRIVER_VAR).filter(|d| !d.is_empty()),
        nccl: super::nccl::version().ok().map(|v| v.1),
    }
}

/// `NVIDIA H200`, 2 -> `h200x2`: the model (the first word of the name with a digit in
/// it, up to a `-`), lower case, and the count.
pub fn machine_label(gpu: &str, count: usize) -> String {
    let model: String = gpu
        .split_whitespace()
        .find(|w| w.chars().any(|c| c.is_ascii_digit()))
        .and_then(|w| w.split('-').next())
        .unwrap_or("gpu")
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect::<String>()
        .to_ascii_lowercase();
    format!("{model}x{count}")
}

/// Now, UTC, as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    utc(secs)
}

/// `secs` after the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ` (proleptic Gregorian calendar).
pub fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Days to a civil date, counting in 400-year eras that start on 1 March.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn dates_are_utc_calendar_dates() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_795_350_896), "2026-11-22T12:34:56Z");
    }

    #[test]
    fn machines_are_labelled_by_model_and_count() {
        assert_eq!(machine_label("NVIDIA H200", 2), "h200x2");
        assert_eq!(machine_label("NVIDIA H100 80GB HBM3", 8), "h100x8");
        assert_eq!(machine_label("Tesla V100-SXM2-16GB", 4), "v100x4");
        assert_eq!(machine_label("", 1), "gpux1");
    }

    #[test]
    fn the_commit_comes_from_the_environment_first() {
        let env: Env = [(COMMIT_VAR, "abc1234")].into_iter().collect();
        assert_eq!(commit(&env), "abc1234");
        let baked = env!("COLL_BUILD_COMMIT");
        let want = if baked.is_empty() { "unknown" } else { baked };
        assert_eq!(commit(&Env::default()), want);
    }

    #[test]
    fn bad_lines_are_located() {
        let e = parse("r.jsonl", "\n{\"commit\": 1}\n").expect_err("not a record");
        let text = e.to_string();
        assert!(text.starts_with("r.jsonl:2:"), "{text}");
        assert!(text.contains("invalid type"), "{text}");
    }

    /// The lines of `case_toml`'s case over rows of made-up NCCL figures: coll 10 µs out of
    /// place at 32 MiB; NCCL default 20 µs, symmetric 11 µs.
    pub(crate) fn lines_of(case_toml: &str, nccl: &[(NcclConfig, f64)]) -> Vec<Record> {
        let suite = super::super::suite::Suite::parse("s.toml", case_toml).expect("suite");
        let ran = Ran {
            collective: coll_lang::builtins::CollectiveKind::AllGather,
            report: super::super::table::tests::report(vec![super::super::table::tests::row(
                32 << 20,
                10.0,
                nccl,
            )]),
        };
        let machine = Machine {
            name: "h200x2".into(),
            gpu: "NVIDIA H200".into(),
            gpus: 2,
            driver: None,
            nccl: None,
        };
        Record::of_case(
            &suite.cases[0],
            &ran,
            &machine,
            "abc1234",
            "2026-11-24T10:00:00Z",
        )
    }

    pub(crate) const CASE: &str = r#"
[[case]]
name = "allgather"
file = "algorithms/allgather_ring.coll"
ranks = 2
sizes = { min = "32M", max = "32M" }
nccl = true
targets = ["ratio >= 1.1 for 32M..1G"]
"#;

    #[test]
    fn records_carry_nccl_best_and_the_raw_configurations() {
        use NcclConfig::*;
        let lines = lines_of(CASE, &[(Default, 20.0), (Symmetric, 11.0)]);
        assert_eq!(lines.len(), 2);
        let oop = &lines[0];
        assert_eq!(oop.placement, Placement::OutOfPlace);
        assert_eq!(oop.nccl_time_us, Some(11.0));
        assert_eq!(oop.ratio, Some(1.1));
        assert_eq!(oop.nccl_best.as_deref(), Some("symmetric"));
        assert_eq!(
            (
                oop.nccl_default_us,
                oop.nccl_symmetric_us,
                oop.nccl_zero_cta_us
            ),
            (Some(20.0), Some(11.0), None)
        );
        assert_eq!(oop.machine.nccl.as_deref(), Some("2.28.3"));
        // In place: coll 11, NCCL-best 12.
        assert_eq!(lines[1].nccl_time_us, Some(12.0));
        // The line carries the raw columns, but not the ones that did not run.
        let text = oop.to_line();
        assert!(
            text.contains(
                r#""nccl_best":"symmetric","nccl_default_us":20.0,"nccl_symmetric_us":11.0,"setup""#
            ),
            "{text}"
        );
        let back = parse("r.jsonl", &text).expect("reads back");
        assert_eq!(back[0].nccl_best.as_deref(), Some("symmetric"));
        assert_eq!(
            (
                back[0].nccl_default_us,
                back[0].nccl_symmetric_us,
                back[0].nccl_zero_cta_us
            ),
            (Some(20.0), Some(11.0), None)
        );
        // Without NCCL, no NCCL figure at all.
        let bare = &lines_of(CASE, &[])[0];
        assert_eq!(
            (bare.nccl_time_us, bare.ratio, bare.nccl_best.clone()),
            (None, None, None)
        );
    }

    #[test]
    fn older_records_without_the_raw_columns_still_read() {
        let r = &lines_of(CASE, &[(NcclConfig::Default, 20.0)])[0];
        let mut v: serde_json::Value = serde_json::from_str(&r.to_line()).expect("json");
        let o = v.as_object_mut().expect("object");
        for k in [
            "nccl_best",
            "nccl_default_us",
            "nccl_symmetric_us",
            "nccl_zero_cta_us",
        ] {
            o.remove(k);
        }
        let old = serde_json::to_string(&v).expect("json");
        assert!(!old.contains("nccl_default_us"), "{old}");
        let back = parse("old.jsonl", &old).expect("an older line reads");
        assert_eq!(back[0].nccl_time_us, Some(20.0));
        assert_eq!(back[0].ratio, Some(2.0));
        assert_eq!(
            (back[0].nccl_best.clone(), back[0].nccl_default_us),
            (None, None)
        );
    }
}
