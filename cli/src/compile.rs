//! `coll compile`: the per-rank schedules of a `.coll` program (or of a checked JSON plan
//! or MSCCL-IR XML) as a text dump, JSON plan, Graphviz graph, SVG timeline or MSCCL-IR
//! XML, with predicted times or the scheduler's reasons (`--explain`) on request; `--auto`
//! ranks the shipped algorithms of a collective by predicted time and picks the fastest.

use crate::args::{MachineArgs, parse_collective, parse_size};
use crate::output::Ctx;
use crate::plans::{MSCCL_XML, is_plan_file, render_plan};
use crate::{EXIT_FAILURE, EXIT_OK, EXIT_USAGE};
use clap::Args;
use coll_compiler::dump::Format;
use coll_compiler::predict;
use coll_executor::shipped;
use coll_lang::builtins::CollectiveKind;
use std::path::PathBuf;

/// `--format` when none is given.
const DEFAULT_FORMAT: &str = "text";

/// The arguments of `coll compile`.
#[derive(Debug, Args)]
pub struct CompileArgs {
    /// A `.coll` program, or a `.json` plan or MSCCL-IR `.xml` to check and dump (not with
    /// --auto).
    #[arg(
        value_name = "FILE",
        required_unless_present = "auto",
        conflicts_with = "auto"
    )]
    file: Option<PathBuf>,
    /// Choose the shipped algorithm with the best predicted time for --collective at --size
    /// on this topology, and say why.
    #[arg(long, requires_all = ["collective", "size", "ranks"])]
    auto: bool,
    /// The collective to choose an algorithm for (with --auto).
    #[arg(long, value_name = "KIND", value_parser = parse_collective)]
    collective: Option<CollectiveKind>,
    /// Message size in bytes as nccl-tests counts it (with --auto); K, M, G suffixes.
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    size: Option<u64>,
    /// Rank count (required for `.coll`; for a plan it must match the plan's).
    #[arg(long, value_name = "N")]
    ranks: Option<usize>,
    #[command(flatten)]
    machine: MachineArgs,
    /// Output format: text (the default), json (our plan), dot, svg, or msccl-xml (MSCCL-IR
    /// for MSCCL's runtime). With --auto: the format of the chosen plan written to -o (and
    /// then -o is required).
    #[arg(long, value_name = "F", value_parser = ["text", "json", "dot", "svg", MSCCL_XML])]
    format: Option<String>,
    /// Write the output to this file instead of standard output (with --auto: the chosen
    /// plan).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
    /// Also print the predicted time and bus bandwidth for sizes 8 B .. 1 GiB (not with
    /// --auto, whose ranking is already a prediction, at --size).
    // A conflict, not silently ignored: with --auto there is no one plan to sweep.
    #[arg(long, conflicts_with = "auto")]
    predict: bool,
    /// Print why each block exists and what bounds the schedule (the scheduler's
    /// candidates, per rank and block the connection sides it serves, the critical path
    /// of the deadlock simulation with source lines, and the cost model's critical path at
    /// 8 B and 1 GiB, each op with when it begins and ends and what it waited for) instead of
    /// the text dump (another --format needs -o).
    #[arg(long, conflicts_with = "auto")]
    explain: bool,
}

impl CompileArgs {
    fn format(&self) -> &str {
        self.format.as_deref().unwrap_or(DEFAULT_FORMAT)
    }
}

impl Ctx<'_> {
    /// Runs `coll compile`; returns the exit code.
    pub fn compile(&mut self, args: &CompileArgs) -> u8 {
        if args.auto {
            return self.auto(args);
        }
        let Some(file) = args.file.clone() else {
            let _ = writeln!(self.err, "error: FILE or --auto is required");
            return EXIT_USAGE;
        };
        if args.explain && args.output.is_none() && args.format() != DEFAULT_FORMAT {
            let _ = writeln!(
                self.err,
                "error: --explain with --format {} needs -o FILE: the explanation is printed, \
                 and the plan in that format only written to -o",
                args.format()
            );
            return EXIT_USAGE;
        }
        let mut options = args.machine.options();
        // MSCCL-IR's thread blocks have one send and one receive peer.
        if args.format() == MSCCL_XML {
            options.lower.several_peers = false;
        }
        let is_plan = is_plan_file(&file);
        let (plan, topo, schedule) = if is_plan {
            let plans = match self.load_plans(&file, args.ranks, args.machine.topo.as_deref()) {
                Ok(p) => p,
                Err(code) => return code,
            };
            let several = plans.len() > 1;
            let mut schedules = Vec::new();
            for plan in &plans {
                let root = match self.root_for(plan, args.machine.root) {
                    Ok(r) => r,
                    Err(code) => return code,
                };
                match self.verify_plan(&file, plan, &args.machine, root, several) {
                    Ok((s, _)) => schedules.push(s),
                    Err(code) => return code,
                }
            }
            let (Some(plan), Some(schedule)) =
                (plans.into_iter().next(), schedules.into_iter().next())
            else {
                return EXIT_FAILURE;
            };
            let n = plan.ranks as usize;
            let spec = args
                .machine
                .topo
                .clone()
                .unwrap_or_else(|| plan.topology.clone());
            let topo = match self.topology(n, Some(&spec)) {
                Ok(t) => t,
                Err(code) => return code,
            };
            (plan.into_inner(), topo, schedule)
        } else {
            let Some(n) = args.ranks else {
                let _ = writeln!(
                    self.err,
                    "error: --ranks N is required to compile a .coll file"
                );
                return EXIT_USAGE;
            };
            let topo = match self.topology(n, args.machine.topo.as_deref()) {
                Ok(t) => t,
                Err(code) => return code,
            };
            let Some(m) = self.load(&file) else {
                return EXIT_FAILURE;
            };
            match coll_compiler::compile(&m, &topo, &options) {
                Ok(c) => {
                    self.warnings(&m, &c);
                    let (plan, schedule) = c.into_plan_and_schedule();
                    (plan.into_inner(), topo, schedule)
                }
                Err(d) => {
                    self.report(&d);
                    return EXIT_FAILURE;
                }
            }
        };
        let format = Format::from_name(args.format());
        let steps = |r: u32, b: u32, o: u32| schedule.round_of(r, b, o);
        // A JSON plan for a file is written as it is made: at n = 1024 it is 100 MB, which
        // rendering first held in memory beside the plan.
        let streamed = format == Some(Format::Json) && !args.explain && !args.predict;
        if let (true, Some(path)) = (streamed, &args.output) {
            let written = std::fs::File::create(path).and_then(|f| {
                let mut w = std::io::BufWriter::new(f);
                plan.write_json(&mut w)?;
                std::io::Write::flush(&mut w)
            });
            if let Err(e) = written {
                let _ = writeln!(self.err, "error: cannot write {}: {e}", path.display());
                return EXIT_FAILURE;
            }
            return EXIT_OK;
        }
        let rendered = match render_plan(&plan, args.format(), &steps) {
            Ok(r) => r,
            Err(e) => {
                let _ = writeln!(self.err, "error: {}: {e}", file.display());
                return EXIT_FAILURE;
            }
        };
        match &args.output {
            Some(path) => {
                if let Err(e) = std::fs::write(path, &rendered) {
                    let _ = writeln!(self.err, "error: cannot write {}: {e}", path.display());
                    return EXIT_FAILURE;
                }
            }
            None if !(args.predict || args.explain) || format != Some(Format::Text) => {
                let _ = write!(self.out, "{rendered}");
            }
            None => {}
        }
        if args.explain {
            let slots = options.slots;
            let _ = write!(
                self.out,
                "{}",
                coll_compiler::lower::explain(&plan, &schedule, slots)
            );
            match coll_compiler::lower::explain_costs(&plan, &topo, &schedule) {
                Ok(text) => {
                    let _ = write!(self.out, "{text}");
                }
                Err(e) => {
                    let _ = writeln!(self.err, "error: cannot predict: {e}");
                    return EXIT_FAILURE;
                }
            }
        }
        if args.predict {
            let sizes = predict::sweep_sizes(predict::SWEEP_MIN, predict::SWEEP_MAX);
            match predict::predict_sweep_with(
                &plan,
                &topo,
                &sizes,
                &steps,
                &predict::Model::default(),
            ) {
                Ok(rows) => {
                    let _ = writeln!(
                        self.out,
                        "predicted for {} `{}` on {} (alpha-beta model, nccl-tests sizes and bus factors):",
                        plan.collective.0.name(),
                        plan.name,
                        topo.name()
                    );
                    let _ = write!(self.out, "{}", predict::table(&rows));
                }
                Err(e) => {
                    let _ = writeln!(self.err, "error: cannot predict: {e}");
                    return EXIT_FAILURE;
                }
            }
        }
        EXIT_OK
    }

    /// `coll compile --auto`: predicts every shipped algorithm of the collective and picks
    /// the fastest, printing the ranking and why; with `-o`, writes the chosen plan there in
    /// `--format`. A `--format` without `-o` has nothing to apply to (the ranking is a table
    /// of its own), so it is a usage error rather than silently ignored.
    fn auto(&mut self, args: &CompileArgs) -> u8 {
        let (Some(kind), Some(size), Some(n)) = (args.collective, args.size, args.ranks) else {
            let _ = writeln!(
                self.err,
                "error: --auto needs --collective, --size and --ranks"
            );
            return EXIT_USAGE;
        };
        if let (Some(format), None) = (&args.format, &args.output) {
            let _ = writeln!(
                self.err,
                "error: --format {format} with --auto needs -o FILE: --auto prints its ranking, \
                 and writes the chosen plan in that format only to -o"
            );
            return EXIT_USAGE;
        }
        let topo = match self.topology(n, args.machine.topo.as_deref()) {
            Ok(t) => t,
            Err(code) => return code,
        };
        let list = shipped::candidates(kind, &topo, size);
        let _ = writeln!(
            self.out,
            "{} on {} ({n} ranks) at {size} B (nccl-tests size), alpha-beta predictions:",
            kind.name(),
            topo.name()
        );
        let _ = writeln!(self.out, "| algorithm | time (µs) | busbw (GB/s) |");
        let _ = writeln!(self.out, "|---|---:|---:|");
        for c in &list {
            if let Ok(p) = &c.outcome {
                let _ = writeln!(
                    self.out,
                    "| {} | {:.2} | {:.2} |",
                    c.file, p.time_us, p.busbw_gbs
                );
            }
        }
        for c in &list {
            if let Err(why) = &c.outcome {
                let _ = writeln!(self.out, "cannot run {}: {why}", c.file);
            }
        }
        let Some(best) = list.first().filter(|c| c.outcome.is_ok()) else {
            let _ = writeln!(
                self.err,
                "error: no shipped {} algorithm runs on {} with {n} ranks",
                kind.name(),
                topo.name()
            );
            return EXIT_FAILURE;
        };
        let (Ok(p), Some(plan)) = (&best.outcome, &best.plan) else {
            return EXIT_FAILURE;
        };
        let why = match list
            .get(1)
            .and_then(|c| c.outcome.as_ref().ok().map(|q| (c, q)))
        {
            Some((c, q)) => format!(
                "lowest predicted time: {:.2} µs against {:.2} µs for {} ({:.1}x)",
                p.time_us,
                q.time_us,
                c.file,
                q.time_us / p.time_us.max(1e-9)
            ),
            None => "the only one that runs here".to_string(),
        };
        let _ = writeln!(self.out, "chose {}: {why}", best.file);
        if let Some(path) = &args.output {
            // MSCCL-IR's thread blocks have one peer a side: the chosen algorithm again
            // without blocks of several peers.
            let one_peer;
            let plan = if args.format() == MSCCL_XML
                && plan
                    .gpus
                    .iter()
                    .any(|g| g.blocks.iter().any(|b| b.several_peers()))
            {
                one_peer = match shipped::plan_of(&best.file, &topo, "peers=one") {
                    Ok(p) => p,
                    Err(e) => {
                        let _ = writeln!(self.err, "error: {e}");
                        return EXIT_FAILURE;
                    }
                };
                &one_peer
            } else {
                plan
            };
            let rendered = match render_plan(plan, args.format(), &|_, _, _| None) {
                Ok(r) => r,
                Err(e) => {
                    let _ = writeln!(self.err, "error: {e}");
                    return EXIT_FAILURE;
                }
            };
            if let Err(e) = std::fs::write(path, rendered) {
                let _ = writeln!(self.err, "error: cannot write {}: {e}", path.display());
                return EXIT_FAILURE;
            }
        }
        EXIT_OK
    }
}
