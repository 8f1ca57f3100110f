//! The context every subcommand runs in ([`Ctx`]: its output streams, the command line and
//! the environment) and the reporting they share: diagnostics, unreadable files, topologies,
//! GPUs, progress bars.
//!
//! Invariant: results go to `out`, every error and diagnostic to `err`; a helper that
//! reports an error returns the exit code the command then returns ([`crate::EXIT_FAILURE`]
//! for bad input, [`crate::EXIT_USAGE`] for a wrong command line).

use crate::{EXIT_FAILURE, EXIT_OK, EXIT_USAGE, Env};
use codespan_reporting::term::termcolor::WriteColor;
use coll_compiler::topology::Topology;
use coll_lang::Diagnostics;
use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::path::Path;

/// Where a command writes, and what it was started with.
pub struct Ctx<'a> {
    pub out: &'a mut dyn Write,
    pub err: &'a mut dyn WriteColor,
    /// The command line as given (`coll run --procs` starts copies of it).
    pub argv: Vec<OsString>,
    pub env: &'a Env,
}

impl std::fmt::Debug for Ctx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx").field("argv", &self.argv).finish()
    }
}

/// Why a machine description was refused: usage (exit 2) or invalid input (exit 1).
enum MachineError {
    Usage(String),
    Invalid(String),
}
use MachineError::{Invalid, Usage};

/// The machine for `--ranks N [--topo T]`: a preset or a topology file (bad files are
/// invalid input, exit 1); a rank count that disagrees with the topology is a usage error.
/// `counted` says where the rank count comes from, for the messages (`--ranks 4`, or a
/// plan file's own count).
fn machine(n: usize, topo: Option<&str>, counted: &str) -> Result<Topology, MachineError> {
    let spec = topo.map_or_else(|| format!("nvswitch:{n}"), str::to_string);
    if spec == "auto" {
        let t = coll_executor::cuda::topo::local_topology().map_err(|e| Invalid(e.to_string()))?;
        if t.num_ranks() != n {
            return Err(Usage(format!(
                "{counted} but --topo auto found {} GPUs on this machine ({}); several ranks \
                 per GPU need a preset such as --topo nvswitch:{n}",
                t.num_ranks(),
                t.name()
            )));
        }
        return Ok(t);
    }
    let t = Topology::parse(&spec).map_err(|e| Invalid(format!("topology `{spec}`: {e}")))?;
    if t.num_ranks() != n {
        return Err(Usage(format!(
            "{counted} but topology `{spec}` has {} ranks",
            t.num_ranks()
        )));
    }
    Ok(t)
}

/// A progress bar drawn with `template` on a terminal only: logs and pipes get the table
/// alone.
pub fn progress_bar(template: &str) -> indicatif::ProgressBar {
    let bar = if std::io::stderr().is_terminal() {
        indicatif::ProgressBar::new(0)
    } else {
        indicatif::ProgressBar::hidden()
    };
    if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar
}

impl Ctx<'_> {
    /// The GPU settings of this command: its environment's `COLL_*` variables, `--timeout`
    /// (seconds) on top; a variable that does not parse is a usage error, reported here.
    pub fn gpu_settings(&mut self, timeout: f64) -> Result<coll_executor::cuda::GpuSettings, u8> {
        match coll_executor::cuda::GpuSettings::from_lookup(|k| self.env.lookup(k)) {
            Ok(s) => Ok(coll_executor::cuda::GpuSettings {
                timeout: std::time::Duration::from_secs_f64(timeout.max(0.001)),
                ..s
            }),
            Err(e) => {
                let _ = writeln!(self.err, "error: {e}");
                Err(EXIT_USAGE)
            }
        }
    }

    /// Renders every diagnostic with its source excerpt, then the file's error count.
    pub fn report<K: std::fmt::Display>(&mut self, diags: &Diagnostics<K>) {
        for d in &diags.list {
            if d.render_to(&diags.file, &mut self.err).is_err() {
                let _ = writeln!(self.err, "{}", d.short(&diags.file));
            }
        }
        let n = diags.list.len();
        let _ = writeln!(
            self.err,
            "{}: {n} error{}",
            diags.file.name(),
            if n == 1 { "" } else { "s" }
        );
    }

    /// Reads a file as a source (a regular file within
    /// [`coll_lang::limits::MAX_SOURCE_BYTES`]); failures are reported and give `None`.
    /// Prints the lowering's warnings (hints it could not honour) on stderr, each with its
    /// `path:line:col` (stdout may carry a plan).
    pub fn warnings(&mut self, m: &coll_lang::Module, c: &coll_compiler::Compiled) {
        for w in &c.lowered.warnings {
            let _ = writeln!(
                self.err,
                "warning: {}: {}",
                m.file.location(w.span),
                w.message
            );
        }
    }

    pub fn read(&mut self, path: &Path) -> Option<Vec<u8>> {
        match coll_lang::read_source(path) {
            Ok(bytes) => Some(bytes),
            Err(e) => {
                let _ = writeln!(self.err, "error: {e}");
                None
            }
        }
    }

    /// Reads a plan file (JSON or MSCCL-IR), within
    /// [`coll_lang::limits::MAX_PLAN_FILE_BYTES`]; failures are reported and give `None`.
    pub fn read_plan(&mut self, path: &Path) -> Option<Vec<u8>> {
        let limit = coll_lang::limits::MAX_PLAN_FILE_BYTES;
        match coll_lang::read_limited(path, limit, "a plan file") {
            Ok(bytes) => Some(bytes),
            Err(e) => {
                let _ = writeln!(self.err, "error: {e}");
                None
            }
        }
    }

    /// Reads, parses and checks a `.coll` file; diagnostics are reported and give `None`.
    pub fn load(&mut self, path: &Path) -> Option<coll_lang::Module> {
        let bytes = self.read(path)?;
        match coll_lang::load_bytes(&path.display().to_string(), bytes) {
            Ok(m) => Some(m),
            Err(d) => {
                self.report(&d);
                None
            }
        }
    }

    /// The topology for `n` ranks; errors are reported and give the exit code.
    pub fn topology(&mut self, n: usize, topo: Option<&str>) -> Result<Topology, u8> {
        self.topology_counted(n, topo, &format!("--ranks {n}"))
    }

    /// [`Ctx::topology`] for a rank count that `counted` names (a plan file's own).
    pub fn topology_counted(
        &mut self,
        n: usize,
        topo: Option<&str>,
        counted: &str,
    ) -> Result<Topology, u8> {
        match machine(n, topo, counted) {
            Ok(t) => Ok(t),
            Err(Usage(msg)) => {
                let _ = writeln!(self.err, "error: {msg}");
                Err(EXIT_USAGE)
            }
            Err(Invalid(msg)) => {
                let _ = writeln!(self.err, "error: {msg}");
                Err(EXIT_FAILURE)
            }
        }
    }

    /// The exit code of a command over `total` files of which `failed` failed.
    pub fn finish(&mut self, failed: usize, total: usize) -> u8 {
        if failed == 0 {
            EXIT_OK
        } else {
            let _ = writeln!(self.err, "error: {failed} of {total} files failed");
            EXIT_FAILURE
        }
    }

    /// The GPUs to use: those asked for (`--gpus`), or every one the driver sees; the error
    /// (no GPU: exit 1; a GPU that does not exist: usage, exit 2) is reported here.
    pub fn pick_gpus(&mut self, what: &str, asked: &[usize]) -> Result<Vec<usize>, u8> {
        let found = coll_executor::cuda::device::device_count();
        if found == 0 {
            let _ = writeln!(
                self.err,
                "error: {what}: no GPU found (no CUDA driver, or no device visible)"
            );
            return Err(EXIT_FAILURE);
        }
        if let Some(bad) = asked.iter().find(|&&g| g >= found) {
            let _ = writeln!(self.err, "error: GPU {bad} does not exist ({found} found)");
            return Err(EXIT_USAGE);
        }
        Ok(if asked.is_empty() {
            (0..found).collect()
        } else {
            asked.to_vec()
        })
    }
}
