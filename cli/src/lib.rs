//! `coll-cli`: the `coll` command line — `check`, `fmt`, `compile`, `run`, `bench` and
//! `kernels` — as a
//! library, so that tests drive it in-process ([`run_captured`]); `src/main.rs` is the
//! binary. Inputs are `.coll` programs, JSON plans (`.json`) or MSCCL-IR XML (`.xml`,
//! imported by [`coll_compiler::msccl`]); plans and XML are validated, replayed symbolically
//! and checked for deadlock before anything is dumped or run.
//!
//! One module per subcommand ([`check`], [`fmt`], [`compile`], [`mod@run`], [`mod@bench`],
//! [`kernels`]); the
//! options several share and their value parsers are in [`args`], the plan loading and
//! checking they share in [`plans`], the output context in [`output`]; [`procs`] drives
//! multi-process runs.
//!
//! Exit codes: 0 success; 1 invalid input, failed checks or an internal error; 2 usage
//! errors — scripts tell a wrong command line from a wrong algorithm by the code alone.
//! Diagnostics go to standard error, results to standard output. Panics are caught in
//! [`main`] and reported as internal errors, never as a Rust backtrace.
//!
//! The library never reads the process environment: the binary reads it once at start into
//! an [`Env`], which every command consults instead (in-process runs get an empty one).

pub mod args;
pub mod bench;
pub mod check;
pub mod compile;
pub mod env;
pub mod fmt;
pub mod kernels;
pub mod limits;
pub mod output;
pub mod plans;
pub mod procs;
pub mod run;

pub use env::Env;

use clap::{Parser, Subcommand};
use codespan_reporting::term::termcolor::{ColorChoice, NoColor, StandardStream, WriteColor};
use output::Ctx;
use std::ffi::OsString;
use std::io::{IsTerminal, Write};
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
    Check(check::CheckArgs),
    /// Print `.coll` files in the canonical layout (or rewrite / verify them).
    Fmt(fmt::FmtArgs),
    /// Compile a `.coll` file (or check a JSON plan or MSCCL-IR XML) into per-rank schedules
    /// and dump them.
    Compile(compile::CompileArgs),
    /// Run a `.coll` file, JSON plan or MSCCL-IR XML on generated data and check every
    /// element.
    Run(run::RunArgs),
    /// The nccl-tests sweep on the GPUs (and NCCL beside it with --vs-nccl).
    // Boxed: the largest arguments by far, which the others should not all carry.
    Bench(Box<bench::BenchArgs>),
    /// Compile the GPU kernel for given architectures into the kernel cache ahead of time
    /// (NVRTC only, no GPU), so that fresh processes find it there (a build of coll with
    /// COLL_EMBED_KERNELS=DIR carries DIR's images in the binary).
    Kernels(kernels::KernelsArgs),
}

/// Entry point of the binary: the command line `args` (program name first) and the
/// environment `env` it was started with; real streams, colours when standard error is a
/// terminal and `NO_COLOR` is unset.
pub fn main(args: impl IntoIterator<Item = OsString>, env: &Env) -> ExitCode {
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
    let color = if std::io::stderr().is_terminal() && env.get("NO_COLOR").is_none() {
        ColorChoice::Auto
    } else {
        ColorChoice::Never
    };
    let args: Vec<OsString> = args.into_iter().collect();
    let code = std::panic::catch_unwind(|| {
        let mut out = std::io::stdout().lock();
        let mut err = StandardStream::stderr(color);
        run(args, env, &mut out, &mut err)
    })
    .unwrap_or(EXIT_FAILURE);
    ExitCode::from(code)
}

/// Runs one command line (program name first) in environment `env` with the given output
/// streams; returns the exit code.
pub fn run(
    args: impl IntoIterator<Item = impl Into<OsString> + Clone>,
    env: &Env,
    out: &mut dyn Write,
    err: &mut dyn WriteColor,
) -> u8 {
    let argv: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let cli = match Cli::try_parse_from(&argv) {
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
    let mut ctx = Ctx {
        out,
        err,
        argv,
        env,
    };
    match cli.command {
        Command::Check(a) => ctx.check(&a),
        Command::Compile(a) => ctx.compile(&a),
        Command::Run(a) => ctx.run(&a),
        Command::Bench(a) => ctx.bench(&a),
        Command::Fmt(a) => ctx.fmt(&a),
        Command::Kernels(a) => ctx.kernels(&a),
    }
}

/// Runs a command line with an empty [`Env`] (as if no launcher had started it and none of
/// the command line's variables were set) and captures its output as plain text: `(code,
/// stdout, stderr)`.
pub fn run_captured<I, S>(args: I) -> (u8, String, String)
where
    I: IntoIterator<Item = S>,
    S: Into<OsString> + Clone,
{
    run_captured_in(args, &Env::default())
}

/// [`run_captured`] in environment `env`.
pub fn run_captured_in<I, S>(args: I, env: &Env) -> (u8, String, String)
where
    I: IntoIterator<Item = S>,
    S: Into<OsString> + Clone,
{
    let mut out = Vec::new();
    let mut err = NoColor::new(Vec::new());
    let code = run(args, env, &mut out, &mut err);
    (
        code,
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(err.get_ref()).into_owned(),
    )
}
