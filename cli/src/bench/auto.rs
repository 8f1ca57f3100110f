//! `coll bench --auto`: measures every shipped algorithm of a collective on this machine over
//! a size sweep, keeps the fastest per size in a [`TuningTable`] on disk, and fits the cost
//! model to each candidate's measurements, each size costed in the protocol its calls ran
//! (the executor chooses LL or bulk per call by size; the plan's protocol is not what ran).
//!
//! Every candidate's every size is checked (`check` calls); a candidate with a wrong element
//! is excluded from the table and reported, never chosen.

use super::sweep::{BenchConfig, BenchReport, any_wrong, bench, sizes};
use super::{BenchArgs, bench_config};
use crate::output::{Ctx, progress_bar};
use crate::{EXIT_FAILURE, EXIT_OK, EXIT_USAGE};
use coll_compiler::elaborate::Protocol;
use coll_compiler::predict::{self, Compiled, Model};
use coll_compiler::topology::Topology;
use coll_executor::ExecError;
use coll_executor::cuda::config::Protocol as CallProtocol;
use coll_executor::shipped;
use coll_executor::tuning::{
    FIT_MIN_BYTES, Fit, Measurement, ModelFit, TuningTable, WorstError, build,
};
use coll_lang::builtins::CollectiveKind;
use std::io::Write;
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

/// Where a table for `kind` on `n` ranks of `topo` is kept by default: beside the kernel
/// cache (`cache_dir`, [`coll_executor::cuda::GpuSettings::cache_dir`]), else in the
/// temporary directory.
pub fn default_path(
    kind: CollectiveKind,
    n: u32,
    topo: &str,
    cache_dir: Option<&std::path::Path>,
) -> PathBuf {
    let topo: String = topo
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    cache_dir
        .map_or_else(std::env::temp_dir, std::path::Path::to_path_buf)
        .join(format!("tuning-{}-{n}-{topo}.json", kind.name()))
}

/// One candidate to measure: `algorithms/<file>`, its setting (empty: as written) and its
/// plan, or why it has none.
pub type Planned = (
    String,
    String,
    Result<coll_compiler::plan::ValidPlan, String>,
);

/// What `--auto` measures of `kind` on `topo`, by file and setting: every shipped algorithm
/// that compiles there (predicted at `size` bytes) as written, with each of `settings`
/// ([`shipped::options_for`], e.g. `instances=16`), and with its blocks of several peers
/// ([`shipped::SEVERAL_PEERS`]) where that plan has them and is not the plan as written: the
/// cost model may not choose a merged plan it costs slower (the one-shot allreduce's), while
/// a plan with the same ops, or with nothing merged, would be measured twice or under a
/// setting it does not have.
pub fn candidates(
    kind: CollectiveKind,
    topo: &Topology,
    size: u64,
    settings: &[String],
) -> Vec<Planned> {
    let mut out: Vec<Planned> = Vec::new();
    for c in shipped::candidates(kind, topo, size) {
        let Some(plan) = c.plan else { continue };
        for s in settings {
            out.push((
                c.file.clone(),
                s.clone(),
                shipped::plan_of(&c.file, topo, s),
            ));
        }
        match shipped::plan_of(&c.file, topo, shipped::SEVERAL_PEERS) {
            Ok(p)
                if !p.schedule.as_ref().is_some_and(|n| n.several_peers)
                    || shipped::same_ops(&p, &plan) => {}
            merged => out.push((c.file.clone(), shipped::SEVERAL_PEERS.to_string(), merged)),
        }
        out.push((c.file, String::new(), Ok(plan)));
    }
    out.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    out
}

/// A candidate's column in `--auto`'s table: the file's stem, and its setting in short
/// (`x16` for `instances=16`, `several` for its blocks of several peers).
pub fn column(file: &str, settings: &str) -> String {
    let stem = file
        .trim_start_matches("algorithms/")
        .trim_end_matches(".coll");
    match settings {
        "" => stem.to_string(),
        shipped::SEVERAL_PEERS => format!("{stem} several"),
        s => match s.strip_prefix("instances=") {
            Some(i) if !i.contains(',') => format!("{stem} x{i}"),
            _ => format!("{stem} ({s})"),
        },
    }
}

/// Sweeps the [`candidates`] of `kind` on `topo` with `cfg` (out-of-place times decide),
/// builds the table and the model fits. `progress(what, i, of)` is called before each
/// candidate.
pub fn tune(
    kind: CollectiveKind,
    topo: &Topology,
    machine: &str,
    cfg: &BenchConfig,
    settings: &[String],
    progress: &mut dyn FnMut(&str, usize, usize),
) -> Result<Tuned, ExecError> {
    let candidates = candidates(kind, topo, cfg.max_bytes, settings);
    let mut measurements = Vec::new();
    let mut fits = Vec::new();
    // Every candidate's sizes from FIT_MIN_BYTES, for the whole-machine fits.
    let mut all_points: Vec<FitPoint> = Vec::new();
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
        // Costed on the deadlock simulation's rounds, as the scheduler costs its candidates,
        // once per protocol: each size is fitted with the protocol its calls ran in (the
        // executor picks one per call by size and reads no protocol hint).
        let models = coll_compiler::check::simulate(&plan, coll_compiler::DEFAULT_SLOTS)
            .ok()
            .and_then(|sim| {
                let costed = |p| {
                    let model = Model {
                        protocol: Some(p),
                        ..Model::default()
                    };
                    Compiled::new(&plan, topo, &|r, b, o| sim.round_of(r, b, o), &model).ok()
                };
                Some((costed(Protocol::Simple)?, costed(Protocol::Ll)?))
            });
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
                // The model has no LL128 costs: those rows stay out of its fit.
                let model = models.as_ref().and_then(|(bulk, ll)| match row.protocol {
                    CallProtocol::Bulk => Some(bulk),
                    CallProtocol::Ll => Some(ll),
                    CallProtocol::Ll128 => None,
                });
                if let Some(m) = model {
                    let parts = m.parts(row.size);
                    points.push((
                        parts.latency_us,
                        parts.transfer_us,
                        row.out_of_place.time_us,
                    ));
                    if row.size >= FIT_MIN_BYTES {
                        all_points.push(FitPoint {
                            label: label.clone(),
                            bytes: row.size,
                            parts,
                            measured: row.out_of_place.time_us,
                            ll: row.protocol == CallProtocol::Ll,
                        });
                    }
                }
            }
            if let Some(f) = predict::calibrate(&points) {
                fits.push(Fit {
                    algorithm: label.clone(),
                    fixed_us: f.fixed_us,
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
    table.model_fit = model_fit(&all_points, false);
    table.model_fit_by_protocol = model_fit(&all_points, true);
    Ok(Tuned { table, tried })
}

/// One measured size of one candidate, as the whole-machine fit takes it.
struct FitPoint {
    label: String,
    bytes: u64,
    /// The model's prediction, costed in the protocol the call ran.
    parts: predict::Time,
    measured: f64,
    /// Whether the call ran LL.
    ll: bool,
}

/// One calibration for every candidate's points together (`by_protocol`: with the predicted
/// fixed part weighed apart for bulk and LL calls), and each candidate's largest relative
/// error under it; `None` when the points cannot be fitted.
fn model_fit(points: &[FitPoint], by_protocol: bool) -> Option<ModelFit> {
    let (fit, latency_ll): (predict::ProtocolCalibration, Option<f64>) = if by_protocol {
        let rows: Vec<_> = points
            .iter()
            .map(|p| (p.parts.latency_us, p.parts.transfer_us, p.measured, p.ll))
            .collect();
        let f = predict::calibrate_by_protocol(&rows)?;
        (f, Some(f.latency_ll))
    } else {
        let rows: Vec<_> = points
            .iter()
            .map(|p| (p.parts.latency_us, p.parts.transfer_us, p.measured))
            .collect();
        (predict::calibrate(&rows)?.into(), None)
    };
    let mut worst: Vec<WorstError> = Vec::new();
    for p in points {
        if p.measured <= 0.0 {
            continue;
        }
        let err = (fit.time_us(p.parts, p.ll) - p.measured).abs() / p.measured;
        match worst.iter_mut().find(|w| w.algorithm == p.label) {
            Some(w) if w.rel_err >= err => {}
            Some(w) => {
                w.rel_err = err;
                w.bytes = p.bytes;
            }
            None => worst.push(WorstError {
                algorithm: p.label.clone(),
                rel_err: err,
                bytes: p.bytes,
            }),
        }
    }
    Some(ModelFit {
        fixed_us: fit.fixed_us,
        latency: fit.latency,
        transfer: fit.transfer,
        latency_ll,
        rel_rms: fit.rel_rms,
        worst,
    })
}

impl Ctx<'_> {
    /// `coll bench --auto`: measures every shipped algorithm of the collective, keeps the
    /// fastest per size on disk and prints the choice with its evidence.
    pub(super) fn bench_auto(&mut self, args: &BenchArgs) -> u8 {
        let (Some(kind), Some(n)) = (args.collective, args.ranks) else {
            let _ = writeln!(self.err, "error: --auto needs --collective and --ranks");
            return EXIT_USAGE;
        };
        let topo = match self.topology(n, args.machine.topo.as_deref()) {
            Ok(t) => t,
            Err(code) => return code,
        };
        let gpus = match self.pick_gpus("coll bench --auto", &args.gpus) {
            Ok(g) => g,
            Err(code) => return code,
        };
        let machine = format!(
            "{} x {}",
            gpus.len(),
            coll_executor::cuda::device::Gpu::open(gpus[0])
                .map_or_else(|_| "GPU".into(), |g| g.name())
        );
        let settings = match self.gpu_settings(args.timeout) {
            Ok(s) => s,
            Err(code) => return code,
        };
        let cfg = BenchConfig {
            vs_nccl: false,
            trace: false,
            ..bench_config(args, &gpus, settings)
        };
        let bar = progress_bar("{bar:30} {pos}/{len} algorithms, {elapsed} {msg}");
        // Without a terminal (a batch job), a line per candidate on standard error instead,
        // so a run cut short still shows how far it got.
        let quiet_bar = bar.is_hidden();
        let started = std::time::Instant::now();
        let err = &mut self.err;
        let mut progress = |file: &str, i: usize, of: usize| {
            bar.set_length(of as u64);
            bar.set_position(i as u64);
            bar.set_message(file.to_string());
            if quiet_bar {
                let _ = writeln!(
                    err,
                    "# [{:.0} s] candidate {} of {of}: {file}",
                    started.elapsed().as_secs_f64(),
                    i + 1
                );
            }
        };
        let settings: Vec<String> = args
            .try_instances
            .iter()
            .map(|i| format!("instances={i}"))
            .collect();
        let tuned = tune(kind, &topo, &machine, &cfg, &settings, &mut progress);
        bar.finish_and_clear();
        let tuned = match tuned {
            Ok(t) => t,
            Err(e) => {
                let _ = writeln!(self.err, "error: {e}");
                return EXIT_FAILURE;
            }
        };
        let _ = writeln!(
            self.out,
            "# coll bench --auto: {} on {} ({n} ranks), {machine}, {} sizes {}..{} B, out-of-place times decide",
            kind.name(),
            topo.name(),
            sizes(args.min_bytes, args.max_bytes, args.factor).len(),
            args.min_bytes,
            args.max_bytes
        );
        for t in &tuned.tried {
            if let Err(why) = &t.outcome {
                let _ = writeln!(
                    self.out,
                    "# left out {}: {why}",
                    shipped::label(&t.file, &t.settings)
                );
            }
        }
        let measured: Vec<(&Tried, &BenchReport)> = tuned
            .tried
            .iter()
            .filter_map(|t| t.outcome.as_ref().ok().map(|r| (t, r)))
            .collect();
        if measured.is_empty() {
            let _ = writeln!(
                self.err,
                "error: no shipped {} algorithm ran on {} ranks",
                kind.name(),
                n
            );
            return EXIT_FAILURE;
        }
        // One row per size: every candidate's time, and who serves.
        let names: Vec<String> = measured
            .iter()
            .map(|(t, _)| column(&t.file, &t.settings))
            .collect();
        let _ = writeln!(
            self.out,
            "| size (B) | {} | serves |",
            names.join(" (µs) | ") + " (µs)"
        );
        let _ = writeln!(self.out, "|---:|{}---|", "---:|".repeat(names.len()));
        if let Some((_, first)) = measured.first() {
            for (i, row) in first.rows.iter().enumerate() {
                let times: Vec<String> = measured
                    .iter()
                    .map(|(_, r)| {
                        r.rows
                            .get(i)
                            .map_or("-".into(), |x| format!("{:.2}", x.out_of_place.time_us))
                    })
                    .collect();
                let serves = tuned.table.choose(kind, row.size).map_or("-".into(), |c| {
                    shipped::label(&c.entry.algorithm, &c.entry.settings)
                });
                let _ = writeln!(
                    self.out,
                    "| {} | {} | {serves} |",
                    row.size,
                    times.join(" | ")
                );
            }
        }
        for e in &tuned.table.entries {
            if let Some(c) = tuned.table.choose(kind, e.min_bytes) {
                let _ = writeln!(self.out, "# {}", c.why());
            }
        }
        for f in &tuned.table.calibration {
            let _ = writeln!(
                self.out,
                "# model fit {}: measured = {:.2} µs + {:.2} x predicted latency + {:.2} x predicted transfer (relative RMS error {:.0}%)",
                f.algorithm,
                f.fixed_us,
                f.latency,
                f.transfer,
                f.rel_rms * 100.0
            );
        }
        if let Some(m) = &tuned.table.model_fit {
            let within = m.worst.iter().filter(|w| w.rel_err <= 0.2).count();
            let _ = writeln!(
                self.out,
                "# model fit, every candidate together from {} KiB: measured = {:.2} µs + {:.2} x predicted latency + {:.2} x predicted transfer (relative RMS error {:.0}%); {within} of {} candidates within 20% at every size",
                FIT_MIN_BYTES >> 10,
                m.fixed_us,
                m.latency,
                m.transfer,
                m.rel_rms * 100.0,
                m.worst.len()
            );
            for w in &m.worst {
                let _ = writeln!(
                    self.out,
                    "# model fit, worst error of {}: {:.0}% at {} B",
                    w.algorithm,
                    w.rel_err * 100.0,
                    w.bytes
                );
            }
        }
        if let Some(m) = &tuned.table.model_fit_by_protocol {
            let within = m.worst.iter().filter(|w| w.rel_err <= 0.2).count();
            let _ = writeln!(
                self.out,
                "# model fit, a latency factor per protocol: measured = {:.2} µs + {:.2} x predicted latency of bulk calls + {:.2} x of LL calls + {:.2} x predicted transfer (relative RMS error {:.0}%); {within} of {} candidates within 20% at every size",
                m.fixed_us,
                m.latency,
                m.latency_ll.unwrap_or(m.latency),
                m.transfer,
                m.rel_rms * 100.0,
                m.worst.len()
            );
            for w in m.worst.iter().filter(|w| w.rel_err > 0.2) {
                let _ = writeln!(
                    self.out,
                    "# model fit per protocol, worst error of {}: {:.0}% at {} B",
                    w.algorithm,
                    w.rel_err * 100.0,
                    w.bytes
                );
            }
        }
        let path = args.tune_file.clone().unwrap_or_else(|| {
            let cache = cfg.settings.cache_dir.as_deref();
            default_path(kind, n as u32, topo.name(), cache)
        });
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        match tuned.table.save(&path) {
            Ok(()) => {
                let _ = writeln!(self.out, "# table written to {}", path.display());
                EXIT_OK
            }
            Err(e) => {
                let _ = writeln!(self.err, "error: {e}");
                EXIT_FAILURE
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Allreduce at 4 ranks: the one-shot is measured with its blocks of several peers too;
    /// NVLS is not (the model already chooses its merged plan), nor the ring or all-pairs
    /// (nothing of theirs merges: the setting would measure another unmerged plan under its
    /// name). Candidates are there as written and with each setting, each once.
    #[test]
    fn auto_tries_several_peers_where_that_is_another_plan() {
        let topo = Topology::parse("nvswitch:4").expect("a preset");
        let x16 = ["instances=16".to_string()];
        let got = candidates(CollectiveKind::AllReduce, &topo, 1 << 20, &x16);
        let with = |file: &str, setting: &str| {
            got.iter()
                .find(|(f, s, _)| f == &format!("algorithms/{file}") && s == setting)
        };
        let several = with("allreduce_oneshot.coll", shipped::SEVERAL_PEERS)
            .and_then(|(_, _, p)| p.as_ref().ok())
            .expect("the one-shot with peers=several is a candidate");
        assert!(several.schedule.as_ref().is_some_and(|n| n.several_peers));
        for file in [
            "allreduce_ring.coll",
            "allreduce_nvls.coll",
            "allreduce_allpairs.coll",
        ] {
            assert!(with(file, shipped::SEVERAL_PEERS).is_none(), "{file}");
        }
        for file in [
            "allreduce_ring.coll",
            "allreduce_nvls.coll",
            "allreduce_oneshot.coll",
        ] {
            assert!(with(file, "").is_some_and(|c| c.2.is_ok()), "{file}");
            assert!(with(file, "instances=16").is_some(), "{file}");
        }
        let labels: Vec<String> = got.iter().map(|(f, s, _)| shipped::label(f, s)).collect();
        let mut sorted = labels.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(labels.len(), sorted.len(), "each once: {labels:?}");
    }

    #[test]
    fn columns_name_settings_in_short() {
        let f = "algorithms/allreduce_oneshot.coll";
        assert_eq!(column(f, ""), "allreduce_oneshot");
        assert_eq!(column(f, "instances=16"), "allreduce_oneshot x16");
        assert_eq!(column(f, "peers=several"), "allreduce_oneshot several");
        assert_eq!(
            column(f, "peers=several,instances=4"),
            "allreduce_oneshot (peers=several,instances=4)"
        );
    }

    fn point(label: &str, bytes: u64, lat: f64, xfer: f64, measured: f64, ll: bool) -> FitPoint {
        FitPoint {
            label: label.to_string(),
            bytes,
            parts: predict::Time {
                latency_us: lat,
                transfer_us: xfer,
            },
            measured,
            ll,
        }
    }

    /// The whole-machine fit recovers the factors every candidate shares, and names the
    /// candidate and size the model misses most.
    #[test]
    fn one_fit_for_every_candidate_names_the_worst_miss() {
        let measured = |lat: f64, xfer: f64| 2.0 * lat + 1.5 * xfer;
        let mut points = Vec::new();
        for (i, bytes) in [64u64 << 10, 1 << 20, 64 << 20, 1 << 30]
            .into_iter()
            .enumerate()
        {
            let (lat, xfer) = (10.0, 10f64.powi(i as i32));
            points.push(point("ring", bytes, lat, xfer, measured(lat, xfer), false));
            // The tree is 30% slower than the model at 64 MiB, exact elsewhere.
            let miss = if bytes == 64 << 20 { 1.3 } else { 1.0 };
            points.push(point(
                "tree",
                bytes,
                20.0,
                xfer,
                measured(20.0, xfer) * miss,
                false,
            ));
        }
        let fit = model_fit(&points, false).expect("a fit");
        assert!(fit.fixed_us >= 0.0, "{fit:?}");
        assert!((fit.transfer - 1.5).abs() < 0.3, "{fit:?}");
        assert_eq!(fit.latency_ll, None);
        let names: Vec<&str> = fit.worst.iter().map(|w| w.algorithm.as_str()).collect();
        assert_eq!(names, ["ring", "tree"]);
        let tree = &fit.worst[1];
        assert_eq!(tree.bytes, 64 << 20, "{fit:?}");
        assert!(
            tree.rel_err > 0.15 && tree.rel_err > fit.worst[0].rel_err,
            "{fit:?}"
        );
        assert_eq!(model_fit(&points[..1], false), None);
    }

    /// Calls that ran LL at a fixed cost whatever their hops, and bulk calls paying per hop:
    /// the fit with a latency factor per protocol finds both and fits every candidate, where
    /// the one-factor fit leaves an error.
    #[test]
    fn the_fit_per_protocol_weighs_ll_hops_apart() {
        let mut points = Vec::new();
        for (label, hops) in [("ring", 3.0), ("allpairs", 2.0)] {
            for (bytes, xfer, ll) in [
                (64u64 << 10, 0.4, true),
                (1 << 20, 6.0, true),
                (64 << 20, 140.0, false),
                (1 << 30, 2200.0, false),
            ] {
                let lat = hops * if ll { 2.0 } else { 4.8 };
                let t = 8.0 + if ll { 0.0 } else { 1.5 * lat } + 1.3 * xfer;
                points.push(point(label, bytes, lat, xfer, t, ll));
            }
        }
        let split = model_fit(&points, true).expect("a fit");
        assert!(
            split.latency_ll.is_some_and(|a| a.abs() < 1e-6),
            "{split:?}"
        );
        assert!((split.latency - 1.5).abs() < 1e-6, "{split:?}");
        assert!(split.worst.iter().all(|w| w.rel_err < 1e-6), "{split:?}");
        let one = model_fit(&points, false).expect("a fit");
        assert!(one.rel_rms > split.rel_rms + 0.01, "{one:?}");
    }
}
