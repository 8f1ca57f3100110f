//! `coll check`: parse and type-check `.coll` files, and with `--ranks` also elaborate,
//! prove, lower and check their schedules; JSON plans and MSCCL-IR XML are always
//! validated, checked for deadlock and races, and replayed symbolically against their
//! collective (buffer sizes included).

use crate::EXIT_USAGE;
use crate::args::MachineArgs;
use crate::output::Ctx;
use crate::plans::is_plan_file;
use clap::Args;
use std::path::{Path, PathBuf};

/// The arguments of `coll check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Files to check: `.coll` programs, `.json` plans or MSCCL-IR `.xml` (plans and XML
    /// are always validated, checked for deadlock and races, and replayed symbolically).
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Elaborate `.coll` files for this many ranks, prove the collective, lower it and check
    /// the schedules (without it: parse and type-check only). For plans and XML it must
    /// match the file's rank count.
    #[arg(long, value_name = "N")]
    ranks: Option<usize>,
    #[command(flatten)]
    machine: MachineArgs,
}

impl Ctx<'_> {
    /// Runs `coll check`; returns the exit code.
    pub fn check(&mut self, args: &CheckArgs) -> u8 {
        // A plan or MSCCL-IR file has its rank count; a `.coll` file is elaborated for one.
        let programs = args.files.iter().any(|p| !is_plan_file(p));
        if args.ranks.is_none() && args.machine.topo.is_some() && programs {
            let _ = writeln!(self.err, "error: --topo needs --ranks for .coll files");
            return EXIT_USAGE;
        }
        let topo = match args.ranks.filter(|_| programs) {
            Some(n) => match self.topology(n, args.machine.topo.as_deref()) {
                Ok(t) => Some(t),
                Err(code) => return code,
            },
            None => None,
        };
        let options = args.machine.options();
        let mut failed = 0;
        for (i, path) in args.files.iter().enumerate() {
            if is_plan_file(path) {
                match self.check_plan_file(path, args.ranks, &args.machine) {
                    Ok(()) => {}
                    Err(EXIT_USAGE) => return EXIT_USAGE,
                    Err(_) => failed += 1,
                }
                continue;
            }
            let Some(m) = self.load(path) else {
                failed += 1;
                continue;
            };
            let what = format!("{} `{}`", m.summary.kind.name(), m.summary.name);
            let Some(topo) = &topo else {
                let _ = writeln!(self.out, "{}: ok ({what})", path.display());
                continue;
            };
            match coll_compiler::compile(&m, topo, &options) {
                Ok(c) => {
                    self.warnings(&m, &c);
                    let plan = &c.lowered.plan;
                    let _ = writeln!(
                        self.out,
                        "{}: ok ({what} proved for n = {} on {}: {} chunk operations, {} chunks checked; \
                         {} ops in {} blocks, deadlock-free in {} rounds with {} slot{})",
                        path.display(),
                        c.elaborated.n,
                        topo.name(),
                        c.proof.ops,
                        c.proof.chunks_checked,
                        plan.op_count(),
                        plan.gpus.iter().map(|g| g.blocks.len()).sum::<usize>(),
                        c.schedule.rounds,
                        options.slots,
                        if options.slots == 1 { "" } else { "s" }
                    );
                    // The last file's compile is left for the process's exit to reclaim at
                    // once: freeing its millions of ops one by one takes tens of
                    // milliseconds at n = 1024 (a few percent of the check).
                    if i + 1 == args.files.len() {
                        std::mem::forget(c);
                    }
                }
                Err(d) => {
                    self.report(&d);
                    failed += 1;
                }
            }
        }
        self.finish(failed, args.files.len())
    }

    /// `coll check` of a JSON plan or MSCCL-IR XML: load, validate, and verify every
    /// placement it declares.
    fn check_plan_file(
        &mut self,
        path: &Path,
        ranks: Option<usize>,
        machine: &MachineArgs,
    ) -> Result<(), u8> {
        let plans = self.load_plans(path, ranks, machine.topo.as_deref())?;
        let several = plans.len() > 1;
        let mut summary = Vec::new();
        for plan in &plans {
            let root = self.root_for(plan, machine.root)?;
            let (schedule, proof) = self.verify_plan(path, plan, machine, root, several)?;
            summary.push((plan.inplace, schedule.rounds, proof.chunks_checked));
        }
        let Some(plan) = plans.first() else {
            return Ok(());
        };
        let placements: Vec<&str> = summary
            .iter()
            .map(|s| if s.0 { "in place" } else { "out of place" })
            .collect();
        let slots = machine.slots;
        let _ = writeln!(
            self.out,
            "{}: ok ({} `{}` replayed for n = {} {}: {} chunks checked; {} ops in {} blocks, deadlock-free in {} rounds with {slots} slot{})",
            path.display(),
            plan.collective.0.name(),
            plan.name,
            plan.ranks,
            placements.join(" and "),
            summary.iter().map(|s| s.2).sum::<u64>(),
            plan.op_count(),
            plan.gpus.iter().map(|g| g.blocks.len()).sum::<usize>(),
            summary.iter().map(|s| s.1).max().unwrap_or(0),
            if slots == 1 { "" } else { "s" }
        );
        Ok(())
    }
}
