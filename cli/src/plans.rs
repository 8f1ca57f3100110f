//! Finding and checking the plan a command works on: compiled from a `.coll` program, or
//! loaded from a JSON plan or MSCCL-IR XML; and rendering a plan in a `--format`.
//!
//! Invariant: a plan loaded from a file is never dumped or run before it has passed the
//! deadlock simulation, the race check, the symbolic replay against its collective and the
//! resource limits
//! ([`Ctx::verify_plan`]), in that order.

use crate::args::MachineArgs;
use crate::output::Ctx;
use crate::{EXIT_FAILURE, EXIT_USAGE};
use coll_compiler::dump::Format;
use coll_compiler::plan::{Plan, ValidPlan};
use coll_lang::builtins::CollectiveKind;
use std::path::Path;

/// The `--format` that writes MSCCL-IR XML.
pub const MSCCL_XML: &str = "msccl-xml";

/// Whether `path` is a plan (`.json`) or MSCCL-IR (`.xml`) rather than a `.coll` program.
pub fn is_plan_file(path: &Path) -> bool {
    path.extension().is_some_and(|x| x == "json" || x == "xml")
}

/// Renders a plan in a `--format` name: the dump formats, or MSCCL-IR XML.
pub fn render_plan(
    plan: &Plan,
    format: &str,
    steps: &dyn Fn(u32, u32, u32) -> Option<u32>,
) -> Result<String, String> {
    if format == MSCCL_XML {
        return coll_compiler::msccl::export(plan).map_err(|e| e.to_string());
    }
    let format = Format::from_name(format).unwrap_or(Format::Text);
    Ok(coll_compiler::dump::render(plan, format, steps))
}

/// What [`Ctx::plan_for`] needs to find and check a plan.
#[derive(Debug)]
pub struct PlanInput<'a> {
    pub file: &'a Path,
    pub ranks: Option<usize>,
    pub machine: &'a MachineArgs,
    /// For XML that declares both placements: which one.
    pub inplace: bool,
}

impl Ctx<'_> {
    /// Loads and validates a JSON plan or imports MSCCL-IR XML: every placement the file
    /// declares (one plan, or two for XML marked both in place and out of place). A
    /// `--ranks` that disagrees with the file is a usage error. MSCCL-IR says nothing of
    /// transports, so with `--topo` an imported plan takes each connection's kind from that
    /// topology (over the network between the nodes of a cluster); a JSON plan keeps its own.
    pub fn load_plans(
        &mut self,
        path: &Path,
        ranks: Option<usize>,
        topo: Option<&str>,
    ) -> Result<Vec<ValidPlan>, u8> {
        let bytes = self.read_plan(path).ok_or(EXIT_FAILURE)?;
        // Checked strictly first: the lossy decoder checks byte by byte, several times
        // slower on the 100 MB of a large plan, and only invalid text needs it.
        let text = match std::str::from_utf8(&bytes) {
            Ok(text) => std::borrow::Cow::Borrowed(text),
            Err(_) => String::from_utf8_lossy(&bytes),
        };
        let loaded = if path.extension().is_some_and(|x| x == "xml") {
            coll_compiler::msccl::import_all(&text, &path.display().to_string()).map_err(|e| {
                match e {
                    // The message already names the file (and line).
                    coll_compiler::msccl::MscclError::Syntax { .. }
                    | coll_compiler::msccl::MscclError::Invalid { .. } => format!("error: {e}"),
                    _ => format!("error: {}: {e}", path.display()),
                }
            })
        } else {
            ValidPlan::from_json(&text)
                .map(|p| vec![p])
                .map_err(|e| format!("error: {}: {e}", path.display()))
        };
        let plans = loaded.map_err(|msg| {
            let _ = writeln!(self.err, "{msg}");
            EXIT_FAILURE
        })?;
        let n = plans.first().map_or(0, |p| p.ranks as usize);
        if let Some(r) = ranks.filter(|&r| r != n) {
            let _ = writeln!(
                self.err,
                "error: --ranks {r} but {} has {n} ranks",
                path.display()
            );
            return Err(EXIT_USAGE);
        }
        let (true, Some(spec)) = (path.extension().is_some_and(|x| x == "xml"), topo) else {
            return Ok(plans);
        };
        let counted = format!("{} has {n} ranks", path.display());
        let topology = self.topology_counted(n, Some(spec), &counted)?;
        plans
            .into_iter()
            .map(|p| coll_compiler::msccl::on_topology(p, &topology))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| {
                let _ = writeln!(self.err, "error: {}: {e}", path.display());
                EXIT_FAILURE
            })
    }

    /// The checks a loaded plan gets before it is dumped or run: the deadlock simulation
    /// first (a stuck plan is better explained by its cycle than by the replay's "never
    /// runs"), then the race check (the replay follows one interleaving, which proves
    /// the others only if conflicting accesses are ordered), then the symbolic replay, then
    /// the resource limits. `several`: the file
    /// declares both placements, so messages say which one failed.
    pub fn verify_plan(
        &mut self,
        path: &Path,
        plan: &Plan,
        machine: &MachineArgs,
        root: u32,
        several: bool,
    ) -> Result<(coll_compiler::check::Schedule, coll_compiler::verify::Proof), u8> {
        let options = machine.options();
        let checked = coll_compiler::check::simulate(plan, options.slots)
            .map_err(|d| d.to_string())
            .and_then(|s| {
                coll_compiler::check::check_races(plan)
                    .map(|()| s)
                    .map_err(|e| e.to_string())
            })
            .and_then(|s| {
                coll_compiler::replay::replay(plan, root)
                    .map(|p| (s, p))
                    .map_err(|e| e.to_string())
            })
            .and_then(|sp| {
                coll_compiler::check::check_resources(plan, &options.limits)
                    .map(|_| sp)
                    .map_err(|e| e.to_string())
            });
        checked.map_err(|e| {
            let placement = match (several, plan.inplace) {
                (false, _) => "",
                (true, true) => " (in place)",
                (true, false) => " (out of place)",
            };
            let _ = writeln!(self.err, "error: {}{placement}: {e}", path.display());
            EXIT_FAILURE
        })
    }

    /// The root a rooted collective of `plan` runs with: `--root` must name one of its
    /// ranks (exit 1, as when compiling a `.coll` file). Collectives without a root ignore
    /// it, as NCCL does, and get 0.
    pub fn root_for(&mut self, plan: &Plan, root: usize) -> Result<u32, u8> {
        let rooted = matches!(
            plan.collective.0,
            CollectiveKind::Broadcast | CollectiveKind::Reduce | CollectiveKind::Custom
        );
        if !rooted {
            return Ok(0);
        }
        match u32::try_from(root) {
            Ok(r) if r < plan.ranks => Ok(r),
            _ => {
                let _ = writeln!(
                    self.err,
                    "error: rank {root} is out of range: there are {} ranks (given with --root {root})",
                    plan.ranks
                );
                Err(EXIT_FAILURE)
            }
        }
    }

    /// The plan to run or bench: compiled from `.coll` (for root 0: the executor relabels
    /// ranks for another root) or loaded from JSON or MSCCL-IR XML, validated, replayed (for
    /// root 0, as the executor runs it) and checked for deadlock. For XML that declares both
    /// placements, the one `input.inplace` asks for.
    pub fn plan_for(&mut self, input: &PlanInput<'_>) -> Result<ValidPlan, u8> {
        if is_plan_file(input.file) {
            let mut plans =
                self.load_plans(input.file, input.ranks, input.machine.topo.as_deref())?;
            let i = plans
                .iter()
                .position(|p| p.inplace == input.inplace)
                .unwrap_or(0);
            let several = plans.len() > 1;
            let plan = plans.swap_remove(i);
            self.verify_plan(input.file, &plan, input.machine, 0, several)?;
            return Ok(plan);
        }
        let Some(n) = input.ranks else {
            let _ = writeln!(self.err, "error: --ranks N is required to run a .coll file");
            return Err(EXIT_USAGE);
        };
        let topo = self.topology(n, input.machine.topo.as_deref())?;
        let m = self.load(input.file).ok_or(EXIT_FAILURE)?;
        let mut options = input.machine.options();
        options.elaborate.root = 0;
        // Executed plans read the input in place of copying it, where the collective allows.
        if input.machine.placement.is_none() {
            options.elaborate.out_of_place =
                coll_compiler::elaborate::placement::convertible(&m.summary);
        }
        match coll_compiler::compile(&m, &topo, &options) {
            Ok(c) => Ok(c.into_plan()),
            Err(d) => {
                self.report(&d);
                Err(EXIT_FAILURE)
            }
        }
    }
}
