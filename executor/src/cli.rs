//! The `coll` command line: `check` and `fmt` (compile, run and bench come with the compiler
//! and executors).
//!
//! Exit codes (DESIGN.md): 0 success; 1 invalid input, failed checks or an internal error;
//! 2 usage errors. Diagnostics go to standard error, results to standard output. Panics are
//! caught in [`main`] and reported as internal errors, never as a Rust backtrace.

use clap::{Args, Parser, Subcommand};
use codespan_reporting::term::termcolor::{ColorChoice, NoColor, StandardStream, WriteColor};
use coll_compiler::elaborate::{Facts, Options};
use coll_compiler::topology::Topology;
use coll_lang::{Diagnostics, SourceFile};
use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Success.
pub const EXIT_OK: u8 = 0;
/// Invalid input, a failed check or verification, a wrong result, a timeout.
pub const EXIT_FAILURE: u8 = 1;
/// The command line itself is wrong.
pub const EXIT_USAGE: u8 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "coll",
    version,
    about = "Write, check, compile and run collective communication algorithms",
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Parse and type-check `.coll` files.
    Check(CheckArgs),
    /// Print `.coll` files in the canonical layout (or rewrite / verify them).
    Fmt(FmtArgs),
}

#[derive(Debug, Args)]
struct CheckArgs {
    /// Files to check.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Elaborate for this many ranks and prove the collective (without it: parse and
    /// type-check only).
    #[arg(long, value_name = "N")]
    ranks: Option<usize>,
    /// Topology: a preset (nvswitch:N, hgx-h200:N, cluster:NxG, ring:N) or a .json/.xml
    /// file. Default: nvswitch:N.
    #[arg(long, value_name = "T", requires = "ranks")]
    topo: Option<String>,
    /// Root rank of rooted collectives.
    #[arg(long, value_name = "R", default_value_t = 0, requires = "ranks")]
    root: usize,
    /// Stop elaborating after this many statements and loop iterations (a guard against
    /// endless loops).
    #[arg(long, value_name = "STEPS", default_value_t = Options::default().step_limit, requires = "ranks")]
    step_limit: u64,
}

#[derive(Debug, Args)]
struct FmtArgs {
    /// Files to format.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Rewrite the files in place.
    #[arg(long, conflicts_with = "check")]
    write: bool,
    /// Print nothing but the files that are not formatted; exit 1 if any.
    #[arg(long)]
    check: bool,
}

/// Entry point of the binary: real streams, colours when standard error is a terminal.
pub fn main() -> ExitCode {
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_string());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("coll: internal error: {msg}{at}\nThis is a bug in coll; please report it.");
    }));
    let color = if std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none() {
        ColorChoice::Auto
    } else {
        ColorChoice::Never
    };
    let code = std::panic::catch_unwind(|| {
        let mut out = std::io::stdout().lock();
        let mut err = StandardStream::stderr(color);
        run(std::env::args_os(), &mut out, &mut err)
    })
    .unwrap_or(EXIT_FAILURE);
    ExitCode::from(code)
}

/// Runs one command line with the given output streams; returns the exit code.
pub fn run(
    args: impl IntoIterator<Item = impl Into<OsString> + Clone>,
    out: &mut dyn Write,
    err: &mut dyn WriteColor,
) -> u8 {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_USAGE } else { EXIT_OK };
            let text = e.render().to_string();
            let _ = if e.use_stderr() {
                write!(err, "{text}")
            } else {
                write!(out, "{text}")
            };
            return code;
        }
    };
    let mut ctx = Ctx { out, err };
    match cli.command {
        Command::Check(a) => ctx.check(&a),
        Command::Fmt(a) => ctx.fmt(&a),
    }
}

/// Runs a command line and captures its output as plain text: `(code, stdout, stderr)`.
pub fn run_captured<I, S>(args: I) -> (u8, String, String)
where
    I: IntoIterator<Item = S>,
    S: Into<OsString> + Clone,
{
    let mut out = Vec::new();
    let mut err = NoColor::new(Vec::new());
    let code = run(args, &mut out, &mut err);
    (
        code,
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(err.get_ref()).into_owned(),
    )
}

/// Why a machine description was refused: usage (exit 2) or invalid input (exit 1).
enum MachineError {
    Usage(String),
    Invalid(String),
}
use MachineError::{Invalid, Usage};

/// The machine for `--ranks N [--topo T]`: a preset or a topology file (bad files are
/// invalid input, exit 1); a rank count that disagrees with the topology is a usage error.
fn machine(n: usize, topo: Option<&str>) -> Result<Facts, MachineError> {
    let spec = topo.map_or_else(|| format!("nvswitch:{n}"), str::to_string);
    let t = Topology::parse(&spec).map_err(|e| Invalid(format!("topology `{spec}`: {e}")))?;
    if t.num_ranks() != n {
        return Err(Usage(format!(
            "--ranks {n} but topology `{spec}` has {} ranks",
            t.num_ranks()
        )));
    }
    Ok(Facts::from_topology(&t))
}

struct Ctx<'a> {
    out: &'a mut dyn Write,
    err: &'a mut dyn WriteColor,
}

impl Ctx<'_> {
    fn report<K: std::fmt::Display>(&mut self, diags: &Diagnostics<K>) {
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

    /// Reads a file as a source; I/O failures are reported and give `None`.
    fn read(&mut self, path: &Path) -> Option<Vec<u8>> {
        match std::fs::read(path) {
            Ok(bytes) => Some(bytes),
            Err(e) => {
                let _ = writeln!(self.err, "error: cannot read {}: {e}", path.display());
                None
            }
        }
    }

    fn load(&mut self, path: &Path) -> Option<coll_lang::Module> {
        let bytes = self.read(path)?;
        match coll_lang::load_bytes(&path.display().to_string(), bytes) {
            Ok(m) => Some(m),
            Err(d) => {
                self.report(&d);
                None
            }
        }
    }

    fn check(&mut self, args: &CheckArgs) -> u8 {
        let machine = match args.ranks {
            Some(n) => match machine(n, args.topo.as_deref()) {
                Ok(m) => Some(m),
                Err(Usage(msg)) => {
                    let _ = writeln!(self.err, "error: {msg}");
                    return EXIT_USAGE;
                }
                Err(Invalid(msg)) => {
                    let _ = writeln!(self.err, "error: {msg}");
                    return EXIT_FAILURE;
                }
            },
            None => None,
        };
        let options = Options {
            root: args.root,
            step_limit: args.step_limit,
            ..Options::default()
        };
        let mut failed = 0;
        for path in &args.files {
            let Some(m) = self.load(path) else {
                failed += 1;
                continue;
            };
            let what = format!("{} `{}`", m.summary.kind.name(), m.summary.name);
            let Some(facts) = &machine else {
                let _ = writeln!(self.out, "{}: ok ({what})", path.display());
                continue;
            };
            match coll_compiler::prove(&m, facts, &options) {
                Ok((e, proof)) => {
                    let _ = writeln!(
                        self.out,
                        "{}: ok ({what} proved for n = {} on {}: {} chunk operations, {} chunks checked)",
                        path.display(),
                        e.n,
                        facts.topology,
                        proof.ops,
                        proof.chunks_checked
                    );
                }
                Err(d) => {
                    self.report(&d);
                    failed += 1;
                }
            }
        }
        self.finish(failed, args.files.len())
    }

    fn finish(&mut self, failed: usize, total: usize) -> u8 {
        if failed == 0 {
            EXIT_OK
        } else {
            let _ = writeln!(self.err, "error: {failed} of {total} files failed");
            EXIT_FAILURE
        }
    }

    fn fmt(&mut self, args: &FmtArgs) -> u8 {
        let mut failed = 0;
        let several = args.files.len() > 1;
        for path in &args.files {
            let Some(m) = self.load(path) else {
                failed += 1;
                continue;
            };
            let formatted = coll_lang::fmt::format(m.file.text(), &m.program);
            let same = formatted == m.file.text();
            if args.check {
                if !same {
                    failed += 1;
                    self.explain_unformatted(&m.file, &formatted);
                }
            } else if args.write {
                if !same {
                    if let Err(e) = std::fs::write(path, &formatted) {
                        let _ = writeln!(self.err, "error: cannot write {}: {e}", path.display());
                        failed += 1;
                    } else {
                        let _ = writeln!(self.out, "formatted {}", path.display());
                    }
                }
            } else {
                if several {
                    let _ = writeln!(self.out, "==> {} <==", path.display());
                }
                let _ = write!(self.out, "{formatted}");
            }
        }
        self.finish(failed, args.files.len())
    }

    /// Names the first line that differs from the canonical layout.
    fn explain_unformatted(&mut self, file: &SourceFile, formatted: &str) {
        let mut have = file.text().lines();
        let mut want = formatted.lines();
        let mut line = 1;
        loop {
            match (have.next(), want.next()) {
                (Some(a), Some(b)) if a == b => line += 1,
                (None, None) => {
                    // Same lines: only the final newline differs.
                    let _ = writeln!(
                        self.err,
                        "{}:{line}: not formatted: a file ends with exactly one newline",
                        file.name()
                    );
                    return;
                }
                (a, b) => {
                    let _ = writeln!(
                        self.err,
                        "{}:{line}: not formatted\n  found:    {}\n  expected: {}",
                        file.name(),
                        a.map_or("<end of file>".to_string(), |s| format!("{s:?}")),
                        b.map_or("<end of file>".to_string(), |s| format!("{s:?}")),
                    );
                    return;
                }
            }
        }
    }
}
