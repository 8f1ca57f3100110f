//! `coll bench --tuned TABLE`: the per-size choice of a tuning table (what `--auto` wrote, and
//! what the NCCL library and the tuned executor serve calls from) measured as it serves:
//! the sweep's sizes are cut into runs of consecutive sizes that one table entry serves, and
//! each run is swept on that entry's plan (the shipped algorithm compiled with the entry's
//! settings) exactly as `coll bench` of that plan would, with `--vs-nccl`, `--graph` and the
//! checks as given. Each run prints its own table under a `# tuned:` line naming the plan and
//! the evidence for it.
//!
//! Invariant of [`runs`]: the runs partition the sweep's sizes in order, every size in
//! exactly one run, and consecutive runs are served by different entries' plans.

use super::BenchArgs;
use super::sweep::sizes;
use crate::output::Ctx;
use crate::{EXIT_FAILURE, EXIT_OK, EXIT_USAGE};
use coll_executor::shipped;
use coll_executor::tuning::TuningTable;
use coll_lang::builtins::CollectiveKind;
use std::path::Path;

/// Consecutive sweep sizes served by one plan.
#[derive(Debug, PartialEq)]
pub struct Run {
    /// `algorithms/<file>`.
    pub algorithm: String,
    /// The entry's settings (empty: as written).
    pub settings: String,
    /// The run's sizes, ascending, each a step of the sweep.
    pub sizes: Vec<u64>,
    /// Why the table serves the first size with it ([`coll_executor::tuning::Choice::why`]).
    pub why: String,
}

/// The runs of `swept` (ascending) for `kind` in `table`, or why a size has no entry.
pub fn runs(table: &TuningTable, kind: CollectiveKind, swept: &[u64]) -> Result<Vec<Run>, String> {
    let mut out: Vec<Run> = Vec::new();
    for &size in swept {
        let choice = table
            .choose(kind, size)
            .ok_or_else(|| format!("the table has no {} entry for {size} B", kind.name()))?;
        let e = choice.entry;
        match out.last_mut() {
            Some(run) if run.algorithm == e.algorithm && run.settings == e.settings => {
                run.sizes.push(size);
            }
            _ => out.push(Run {
                algorithm: e.algorithm.clone(),
                settings: e.settings.clone(),
                sizes: vec![size],
                why: choice.why(),
            }),
        }
    }
    Ok(out)
}

/// The collective `table` is measured for: `asked`, else its only one.
fn collective_of(
    table: &TuningTable,
    asked: Option<CollectiveKind>,
) -> Result<CollectiveKind, String> {
    let kinds = table.collectives();
    if let Some(k) = asked {
        return if kinds.contains(&k.name()) {
            Ok(k)
        } else {
            Err(format!(
                "the table has no {} entries (it has: {})",
                k.name(),
                kinds.join(", ")
            ))
        };
    }
    match kinds.as_slice() {
        [one] => CollectiveKind::from_name(one)
            .ok_or_else(|| format!("the table names an unknown collective `{one}`")),
        [] => Err("the table has no entries".to_string()),
        many => Err(format!(
            "the table has entries for {}: say which with --collective",
            many.join(", ")
        )),
    }
}

impl Ctx<'_> {
    /// `coll bench --tuned TABLE`; returns the exit code (the worst of the runs').
    pub(super) fn bench_tuned(&mut self, args: &BenchArgs, path: &Path) -> u8 {
        let table = match TuningTable::load(path) {
            Ok(t) => t,
            Err(e) => {
                let _ = writeln!(self.err, "error: {e}");
                return EXIT_FAILURE;
            }
        };
        let kind = match collective_of(&table, args.collective) {
            Ok(k) => k,
            Err(why) => {
                let _ = writeln!(self.err, "error: {}: {why}", path.display());
                return EXIT_USAGE;
            }
        };
        let n = table.ranks as usize;
        if let Some(asked) = args.ranks
            && asked != n
        {
            let _ = writeln!(
                self.err,
                "error: {}: the table is for {n} ranks, --ranks says {asked}",
                path.display()
            );
            return EXIT_USAGE;
        }
        let topo_name = args.machine.topo.as_deref().unwrap_or(&table.topology);
        let topo = match self.topology(n, Some(topo_name)) {
            Ok(t) => t,
            Err(code) => return code,
        };
        let swept = sizes(args.min_bytes, args.max_bytes, args.factor);
        let runs = match runs(&table, kind, &swept) {
            Ok(r) => r,
            Err(why) => {
                let _ = writeln!(self.err, "error: {}: {why}", path.display());
                return EXIT_FAILURE;
            }
        };
        // Once here rather than once per run: a machine without GPUs fails before any.
        if let Err(code) = self.pick_gpus("coll bench --tuned", &args.gpus) {
            return code;
        }
        let mut code = EXIT_OK;
        for run in runs {
            let (Some(&lo), Some(&hi)) = (run.sizes.first(), run.sizes.last()) else {
                continue;
            };
            let label = shipped::label(&run.algorithm, &run.settings);
            let _ = writeln!(
                self.out,
                "# tuned ({}, measured on {}): {lo}..{hi} B served by {label}; the table: {}",
                path.display(),
                table.machine,
                run.why
            );
            let plan = match shipped::plan_of(&run.algorithm, &topo, &run.settings) {
                Ok(p) => p,
                Err(why) => {
                    let _ = writeln!(self.err, "error: {label}: {why}");
                    code = code.max(EXIT_FAILURE);
                    continue;
                }
            };
            let mut one = args.clone();
            one.tuned = None;
            one.min_bytes = lo;
            one.max_bytes = hi;
            code = code.max(self.bench_plan(&one, plan, &mut None));
        }
        code
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coll_executor::tuning::{Measurement, build};

    fn measured(algorithm: &str, settings: &str, times: &[(u64, f64)]) -> Vec<Measurement> {
        times
            .iter()
            .map(|&(bytes, time_us)| Measurement {
                collective: CollectiveKind::AllReduce,
                algorithm: algorithm.to_string(),
                settings: settings.to_string(),
                bytes,
                time_us,
            })
            .collect()
    }

    #[test]
    fn sizes_are_cut_where_the_serving_plan_changes() {
        // Measured at 8 B, 64 KiB, 16 MiB and 1 GiB: allpairs wins to 64 KiB (so serves up to
        // the next measured size), the ring at 16 MiB, the ring x16 at 1 GiB.
        let mut m = measured(
            "algorithms/allreduce_allpairs.coll",
            "",
            &[(8, 5.0), (64 << 10, 9.0), (16 << 20, 900.0), (1 << 30, 9e4)],
        );
        m.extend(measured(
            "algorithms/allreduce_ring.coll",
            "",
            &[(8, 7.0), (64 << 10, 10.0), (16 << 20, 80.0), (1 << 30, 5e3)],
        ));
        m.extend(measured(
            "algorithms/allreduce_ring.coll",
            "instances=16",
            &[(8, 9.0), (64 << 10, 12.0), (16 << 20, 85.0), (1 << 30, 4e3)],
        ));
        let table = build("4 x H200", 4, "nvswitch:4", &m);
        let swept = sizes(8, 1 << 30, 8);
        let r = runs(&table, CollectiveKind::AllReduce, &swept).expect("covered");
        let got: Vec<(&str, &str, u64, u64)> = r
            .iter()
            .map(|r| {
                (
                    r.algorithm.as_str(),
                    r.settings.as_str(),
                    r.sizes[0],
                    *r.sizes.last().unwrap_or(&0),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("algorithms/allreduce_allpairs.coll", "", 8, 2 << 20),
                ("algorithms/allreduce_ring.coll", "", 16 << 20, 128 << 20),
                (
                    "algorithms/allreduce_ring.coll",
                    "instances=16",
                    1 << 30,
                    1 << 30
                ),
            ]
        );
        // Every size once, in order.
        let all: Vec<u64> = r.iter().flat_map(|r| r.sizes.clone()).collect();
        assert_eq!(all, swept);
        assert!(
            r[0].why.contains("fastest measured for 0..=16777215 B"),
            "{}",
            r[0].why
        );
        assert!(r[2].why.contains("(instances=16)"), "{}", r[2].why);
        let e = runs(&table, CollectiveKind::AllGather, &swept).expect_err("none");
        assert_eq!(e, "the table has no allgather entry for 8 B");
    }

    #[test]
    fn the_collective_is_the_tables_own_unless_asked() {
        let mut m = measured("algorithms/allreduce_ring.coll", "", &[(8, 7.0)]);
        let table = build("m", 2, "nvswitch:2", &m);
        assert_eq!(collective_of(&table, None), Ok(CollectiveKind::AllReduce));
        let e = collective_of(&table, Some(CollectiveKind::AllGather)).expect_err("absent");
        assert_eq!(e, "the table has no allgather entries (it has: allreduce)");
        m.push(Measurement {
            collective: CollectiveKind::AllGather,
            algorithm: "algorithms/allgather_ring.coll".into(),
            settings: String::new(),
            bytes: 8,
            time_us: 6.0,
        });
        let both = build("m", 2, "nvswitch:2", &m);
        let e = collective_of(&both, None).expect_err("two");
        assert_eq!(
            e,
            "the table has entries for allreduce, allgather: say which with --collective"
        );
        assert_eq!(
            collective_of(&both, Some(CollectiveKind::AllGather)),
            Ok(CollectiveKind::AllGather)
        );
    }
}
