//! The `coll` command line: `check`, `fmt`, `compile` and `run`. Inputs are `.coll`
//! programs, JSON plans (`.json`) or MSCCL-IR XML (`.xml`, imported by
//! [`coll_compiler::msccl`]); plans and XML are validated, replayed symbolically and checked
//! for deadlock before anything is dumped or run.
//!
//! Exit codes (DESIGN.md): 0 success; 1 invalid input, failed checks or an internal error;
//! 2 usage errors. Diagnostics go to standard error, results to standard output. Panics are
//! caught in [`main`] and reported as internal errors, never as a Rust backtrace.

use crate::cpu::{CpuExecutor, RunOptions};
use crate::dtype::{DType, ReduceOp};
use crate::harness;
use crate::shipped;
use crate::{bootstrap, procs};
use clap::{Args, Parser, Subcommand};
use codespan_reporting::term::termcolor::{ColorChoice, NoColor, StandardStream, WriteColor};
use coll_compiler::check::Limits;
use coll_compiler::dump::Format;
use coll_compiler::elaborate::Options;
use coll_compiler::lower::LowerOptions;
use coll_compiler::plan::Plan;
use coll_compiler::topology::Topology;
use coll_compiler::{CompileOptions, predict};
use coll_lang::builtins::CollectiveKind;
use coll_lang::{Diagnostics, SourceFile};
use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

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
    /// Compile a `.coll` file (or check a JSON plan or MSCCL-IR XML) into per-rank schedules
    /// and dump them.
    Compile(CompileArgs),
    /// Run a `.coll` file, JSON plan or MSCCL-IR XML on generated data and check every
    /// element.
    Run(RunArgs),
    /// The nccl-tests sweep on the GPUs (and NCCL beside it with --vs-nccl).
    Bench(BenchArgs),
}

#[derive(Debug, Args)]
struct BenchArgs {
    /// A `.coll` program or a `.json` plan (or `--auto`).
    #[arg(value_name = "FILE", required_unless_present = "auto")]
    file: Option<PathBuf>,
    /// Measure every shipped algorithm of `--collective` over the sweep, keep the fastest per
    /// size in a tuning table (`--tune-file`) and fit the cost model to the measurements.
    #[arg(long, requires = "collective", conflicts_with = "file")]
    auto: bool,
    /// The collective to tune (with --auto).
    #[arg(long, value_name = "KIND", value_parser = parse_collective)]
    collective: Option<CollectiveKind>,
    /// Where --auto writes the table (default: beside the kernel cache, named by collective,
    /// rank count and topology).
    #[arg(long, value_name = "FILE")]
    tune_file: Option<PathBuf>,
    /// With --auto: instance counts to try besides each algorithm as written (a setting:
    /// `instances N` replicates the program over N channels); empty to try none.
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "16")]
    try_instances: Vec<u32>,
    /// Rank count (required for `.coll`).
    #[arg(long, value_name = "N")]
    ranks: Option<usize>,
    #[command(flatten)]
    machine: MachineArgs,
    /// Executor (`cuda`).
    #[arg(long, value_name = "B", default_value = "cuda", value_parser = ["cuda"])]
    backend: String,
    /// Smallest size in bytes (nccl-tests' -b).
    #[arg(short = 'b', long = "minbytes", default_value = "8", value_parser = parse_size)]
    min_bytes: u64,
    /// Largest size in bytes (-e).
    #[arg(short = 'e', long = "maxbytes", default_value = "1G", value_parser = parse_size)]
    max_bytes: u64,
    /// Size factor between steps (-f).
    #[arg(short = 'f', long = "stepfactor", default_value_t = 2)]
    factor: u64,
    /// Timed iterations per size (-n).
    #[arg(short = 'n', long = "iters", default_value_t = 20)]
    iters: u32,
    /// Warm-up iterations per size (-w).
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 5)]
    warmup: u32,
    /// Check calls per size (-c; 0 skips the check).
    #[arg(short = 'c', long = "check", default_value_t = 1)]
    check: u32,
    #[arg(long, value_name = "D", default_value = "f32", value_parser = parse_dtype)]
    dtype: DType,
    #[arg(long = "op", value_name = "OP", default_value = "sum", value_parser = parse_op)]
    reduce: ReduceOp,
    /// Run NCCL on the same buffers with the same timing, side by side.
    #[arg(long)]
    vs_nccl: bool,
    /// Capture the -n timed calls of each size in a CUDA graph (one per GPU) and launch it
    /// LAUNCHES times (default 10), as nccl-tests' -G; NCCL (--vs-nccl) is captured the same
    /// way. The check call also runs through a graph.
    #[arg(long, value_name = "LAUNCHES", num_args = 0..=1, default_missing_value = "10", value_parser = clap::value_parser!(u32).range(1..))]
    graph: Option<u32>,
    /// Also write the results as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write a Chrome trace (chrome://tracing, Perfetto) of one call at the largest size, the
    /// last of -n back-to-back calls (in graphs with --graph): per rank and thread block, each
    /// op's start and end from the GPU's timer, and its SM cycles.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// GPU ordinals (default: every GPU).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    gpus: Vec<usize>,
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    timeout: f64,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// A `.coll` program, a `.json` plan or MSCCL-IR `.xml`.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Rank count (required for `.coll`; for a plan it must match the plan's).
    #[arg(long, value_name = "N")]
    ranks: Option<usize>,
    #[command(flatten)]
    machine: MachineArgs,
    /// NCCL's count: elements per rank for allreduce, broadcast and reduce, per rank's
    /// contribution for allgather and reducescatter, per peer for alltoall. Suffixes K, M, G
    /// are powers of 1024.
    #[arg(long, value_name = "ELEMS", default_value = "1M", value_parser = parse_size)]
    count: u64,
    /// Element type: f32, f64, f16, bf16, i32, i64, u8.
    #[arg(long, value_name = "D", default_value = "f32", value_parser = parse_dtype)]
    dtype: DType,
    /// Reduction: sum, prod, min, max, avg.
    #[arg(long = "op", value_name = "OP", default_value = "sum", value_parser = parse_op)]
    reduce: ReduceOp,
    /// Run in place (output overwrites input, NCCL's layout).
    #[arg(long)]
    inplace: bool,
    /// Fail when a rank makes no progress for this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    timeout: f64,
    /// Executor: `cpu` (reference, threads) or `cuda` (the GPUs of this machine).
    #[arg(long, value_name = "B", default_value = "cpu", value_parser = ["cpu", "cuda"])]
    backend: String,
    /// GPU ordinals for `--backend cuda`, comma-separated (default: every GPU). Ranks are
    /// spread over them in order; several ranks may share one GPU.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    gpus: Vec<usize>,
    /// Timed calls after the first, for `--backend cuda` and multi-process runs (the first
    /// call is reported apart).
    #[arg(long, value_name = "N", default_value_t = 0)]
    iters: u32,
    /// Fault injection: rank R never runs, to test that the others time out.
    #[arg(long, value_name = "R")]
    inject_stall: Option<u32>,
    /// Start N processes on this machine, each running a contiguous block of the ranks,
    /// linked by remote channels (`--net`); as if started by a launcher. Under mpirun, srun
    /// or torchrun leave it out: the launcher's variables say how many processes there are.
    #[arg(long, value_name = "N")]
    procs: Option<u32>,
    /// Remote channels between processes: `tcp`, or `rdma` (ibverbs, cargo feature `rdma`).
    #[arg(long, value_name = "NET", default_value = "tcp", value_parser = crate::procs::NETS)]
    net: String,
}

/// What [`Ctx::plan_for`] needs to find and check a plan.
struct PlanInput<'a> {
    file: &'a Path,
    ranks: Option<usize>,
    machine: &'a MachineArgs,
    /// For XML that declares both placements: which one.
    inplace: bool,
}

/// The `--format` that writes MSCCL-IR XML.
pub const MSCCL_XML: &str = "msccl-xml";

/// Whether `path` is a plan (`.json`) or MSCCL-IR (`.xml`) rather than a `.coll` program.
fn is_plan_file(path: &Path) -> bool {
    path.extension().is_some_and(|x| x == "json" || x == "xml")
}

/// Renders a plan in a `--format` name: the dump formats, or MSCCL-IR XML.
fn render_plan(
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

/// What a run's summary line names of its plan (taken before the plan moves into an
/// executor).
struct RunOf {
    name: String,
    kind: CollectiveKind,
    ranks: u32,
    topo: String,
}

impl RunOf {
    fn of(plan: &Plan) -> RunOf {
        RunOf {
            name: plan.name.clone(),
            kind: plan.collective.0,
            ranks: plan.ranks,
            topo: plan.topology.clone(),
        }
    }
}

/// The one-line result of a checked run of `args`: time, nccl-tests bandwidths and `#wrong`;
/// `placed` and `on` say how and where it ran.
fn summary(p: &RunOf, args: &RunArgs, placed: &str, on: &str, r: &harness::Report) -> String {
    let (kind, n) = (p.kind, p.ranks);
    let bytes = predict::size_of_count(kind, args.count, n) as f64 * args.dtype.size() as f64;
    let secs = r.elapsed.as_secs_f64().max(1e-9);
    let algbw = bytes / secs / 1e9;
    let wrong = r
        .wrong
        .map_or("n/a (custom collective: no reference)".to_string(), |w| {
            w.to_string()
        });
    format!(
        "{} ({}, {n} ranks, {}): count {} {} {} {placed} on {on}: {:.3} ms, algbw {algbw:.2} GB/s, busbw {:.2} GB/s, #wrong {wrong}",
        p.name,
        kind.name(),
        p.topo,
        args.count,
        args.dtype,
        args.reduce,
        secs * 1e3,
        algbw * predict::bus_factor(kind, n)
    )
}

/// A progress bar drawn with `template` on a terminal only: logs and pipes get the table
/// alone.
fn progress_bar(template: &str) -> indicatif::ProgressBar {
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

/// The sweep `coll bench` runs for `args` on `gpus`.
fn bench_config(args: &BenchArgs, gpus: &[usize]) -> crate::cuda::bench::BenchConfig {
    crate::cuda::bench::BenchConfig {
        min_bytes: args.min_bytes,
        max_bytes: args.max_bytes,
        factor: args.factor,
        iters: args.iters,
        warmup: args.warmup,
        check: args.check,
        dtype: args.dtype,
        op: args.reduce,
        root: args.machine.root as u32,
        gpus: gpus.to_vec(),
        vs_nccl: args.vs_nccl,
        timeout: Duration::from_secs_f64(args.timeout.max(0.001)),
        trace: args.trace.is_some(),
        graph: args.graph,
    }
}

pub use crate::size::parse_size;

fn parse_collective(s: &str) -> Result<CollectiveKind, String> {
    CollectiveKind::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = CollectiveKind::ALL.iter().map(|k| k.name()).collect();
        format!("unknown collective `{s}`; one of {}", names.join(", "))
    })
}

fn parse_dtype(s: &str) -> Result<DType, String> {
    DType::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = DType::ALL.iter().map(|d| d.name()).collect();
        format!("unknown dtype `{s}`; one of {}", names.join(", "))
    })
}

fn parse_op(s: &str) -> Result<ReduceOp, String> {
    ReduceOp::from_name(s)
        .ok_or_else(|| format!("unknown op `{s}`; one of sum, prod, min, max, avg"))
}

/// How to build and check schedules.
#[derive(Clone, Debug, Args)]
struct MachineArgs {
    /// Topology: a preset (nvswitch:N, hgx-h200:N, cluster:NxG, ring:N), a .json/.xml
    /// file, or `auto` (this machine's GPUs as CUDA reports them). Default: nvswitch:N.
    #[arg(long, value_name = "T")]
    topo: Option<String>,
    /// Root rank of rooted collectives.
    #[arg(long, value_name = "R", default_value_t = 0)]
    root: usize,
    /// Stop elaborating after this many statements and loop iterations (a guard against
    /// endless loops).
    #[arg(long, value_name = "STEPS", default_value_t = Options::default().step_limit)]
    step_limit: u64,
    /// Slots per connection assumed by the deadlock check.
    #[arg(long, value_name = "S", default_value_t = coll_compiler::DEFAULT_SLOTS, value_parser = clap::value_parser!(u32).range(1..))]
    slots: u32,
    /// Thread blocks per rank, at most.
    #[arg(long, value_name = "B", default_value_t = Limits::default().max_blocks)]
    max_blocks: u32,
    /// Ops per thread block, at most.
    #[arg(long, value_name = "OPS", default_value_t = Limits::default().max_ops_per_block)]
    max_ops_per_block: u32,
    /// Do not fuse receives with the sends that forward them.
    #[arg(long)]
    no_fuse: bool,
    /// Keep every block in program order (no send hoisting).
    #[arg(long)]
    no_hoist: bool,
    /// Keep every local copy the program makes (no copy folding).
    #[arg(long)]
    no_fold: bool,
    /// Replicate the program over N channels (replaces the header's `instances`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    instances: Option<u32>,
    /// How an in-place algorithm becomes a plan: `out-of-place` compiles it as an
    /// out-of-place plan, which reads the input where it stands instead of copying it first
    /// and still runs in-place calls without staging (allreduce, broadcast, reduce,
    /// allgather); `as-written` keeps the header's. Default: `out-of-place` where it applies
    /// for `run` and `bench`, `as-written` for `compile` and `check`.
    #[arg(long, value_name = "P", value_parser = ["as-written", "out-of-place"])]
    placement: Option<String>,
}

impl MachineArgs {
    fn options(&self) -> CompileOptions {
        CompileOptions {
            elaborate: Options {
                root: self.root,
                step_limit: self.step_limit,
                out_of_place: self.placement.as_deref() == Some("out-of-place"),
                instances: self.instances,
                ..Options::default()
            },
            lower: LowerOptions {
                hoist_sends: !self.no_hoist,
                fuse: !self.no_fuse,
                fold_copies: !self.no_fold,
            },
            slots: self.slots,
            limits: Limits {
                max_blocks: self.max_blocks,
                max_ops_per_block: self.max_ops_per_block,
                ..Limits::default()
            },
        }
    }
}

#[derive(Debug, Args)]
struct CompileArgs {
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
    /// Output format: text, json (our plan), dot, svg, or msccl-xml (MSCCL-IR for MSCCL's
    /// runtime).
    #[arg(long, value_name = "F", default_value = "text", value_parser = ["text", "json", "dot", "svg", MSCCL_XML])]
    format: String,
    /// Write the output to this file instead of standard output.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
    /// Also print the predicted time and bus bandwidth for sizes 8 B .. 1 GiB.
    #[arg(long)]
    predict: bool,
}

#[derive(Debug, Args)]
struct CheckArgs {
    /// Files to check: `.coll` programs, `.json` plans or MSCCL-IR `.xml` (plans and XML
    /// are always validated, replayed symbolically and checked for deadlock).
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
    let mut ctx = Ctx { out, err, argv };
    match cli.command {
        Command::Check(a) => ctx.check(&a),
        Command::Compile(a) => ctx.compile(&a),
        Command::Run(a) => ctx.run(&a),
        Command::Bench(a) => ctx.bench(&a),
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
fn machine(n: usize, topo: Option<&str>) -> Result<Topology, MachineError> {
    let spec = topo.map_or_else(|| format!("nvswitch:{n}"), str::to_string);
    if spec == "auto" {
        let t = crate::cuda::topo::local_topology().map_err(|e| Invalid(e.to_string()))?;
        if t.num_ranks() != n {
            return Err(Usage(format!(
                "--ranks {n} but --topo auto found {} GPUs on this machine ({}); several ranks \
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
            "--ranks {n} but topology `{spec}` has {} ranks",
            t.num_ranks()
        )));
    }
    Ok(t)
}

struct Ctx<'a> {
    out: &'a mut dyn Write,
    err: &'a mut dyn WriteColor,
    /// The command line as given (`coll run --procs` starts copies of it).
    argv: Vec<OsString>,
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
        if args.ranks.is_none() && args.machine.topo.is_some() {
            let _ = writeln!(self.err, "error: --topo needs --ranks");
            return EXIT_USAGE;
        }
        let topo = match args.ranks {
            Some(n) => match self.topology(n, args.machine.topo.as_deref()) {
                Ok(t) => Some(t),
                Err(code) => return code,
            },
            None => None,
        };
        let options = args.machine.options();
        let mut failed = 0;
        for path in &args.files {
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
                }
                Err(d) => {
                    self.report(&d);
                    failed += 1;
                }
            }
        }
        self.finish(failed, args.files.len())
    }

    /// The topology for `n` ranks; errors are reported and give the exit code.
    fn topology(&mut self, n: usize, topo: Option<&str>) -> Result<Topology, u8> {
        match machine(n, topo) {
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

    /// Loads and validates a JSON plan or imports MSCCL-IR XML: every placement the file
    /// declares (one plan, or two for XML marked both in place and out of place). A
    /// `--ranks` that disagrees with the file is a usage error.
    fn load_plans(&mut self, path: &Path, ranks: Option<usize>) -> Result<Vec<Plan>, u8> {
        let bytes = self.read(path).ok_or(EXIT_FAILURE)?;
        let text = String::from_utf8_lossy(&bytes);
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
            Plan::from_json(&text)
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
        Ok(plans)
    }

    /// The checks a loaded plan gets before it is dumped or run: the deadlock simulation
    /// first (a stuck plan is better explained by its cycle than by the replay's "never
    /// runs"), then the symbolic replay, then the resource limits. `several`: the file
    /// declares both placements, so messages say which one failed.
    fn verify_plan(
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

    /// `coll check` of a JSON plan or MSCCL-IR XML: load, validate, and verify every
    /// placement it declares.
    fn check_plan_file(
        &mut self,
        path: &Path,
        ranks: Option<usize>,
        machine: &MachineArgs,
    ) -> Result<(), u8> {
        let plans = self.load_plans(path, ranks)?;
        let several = plans.len() > 1;
        let mut summary = Vec::new();
        for plan in &plans {
            let (schedule, proof) =
                self.verify_plan(path, plan, machine, machine.root as u32, several)?;
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

    /// The plan for `run`: see [`plan_for`](Self::plan_for).
    fn plan_for_run(&mut self, args: &RunArgs) -> Result<Plan, u8> {
        self.plan_for(&PlanInput {
            file: &args.file,
            ranks: args.ranks,
            machine: &args.machine,
            inplace: args.inplace,
        })
    }

    /// The plan to run or bench: compiled from `.coll` (for root 0: the executor relabels
    /// ranks for another root) or loaded from JSON or MSCCL-IR XML, validated, replayed (for
    /// root 0, as the executor runs it) and checked for deadlock. For XML that declares both
    /// placements, the one `input.inplace` asks for.
    fn plan_for(&mut self, input: &PlanInput<'_>) -> Result<Plan, u8> {
        if is_plan_file(input.file) {
            let mut plans = self.load_plans(input.file, input.ranks)?;
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
            Ok(c) => Ok(c.lowered.plan),
            Err(d) => {
                self.report(&d);
                Err(EXIT_FAILURE)
            }
        }
    }

    fn run(&mut self, args: &RunArgs) -> u8 {
        let plan = match self.plan_for_run(args) {
            Ok(p) => p,
            Err(code) => return code,
        };
        if !args.timeout.is_finite() || args.timeout <= 0.0 {
            let _ = writeln!(
                self.err,
                "error: --timeout must be a positive number of seconds"
            );
            return EXIT_USAGE;
        }
        let launch = match bootstrap::launch_from_env(|k| std::env::var(k).ok()) {
            Ok(l) => l,
            Err(e) => {
                let _ = writeln!(self.err, "error: {e}");
                return EXIT_USAGE;
            }
        };
        if let Some(p) = args.procs {
            if let Some(l) = &launch {
                if l.size != p {
                    let _ = writeln!(
                        self.err,
                        "error: --procs {p} but {} started {} processes; leave --procs out under a launcher",
                        l.launcher, l.size
                    );
                    return EXIT_USAGE;
                }
            } else {
                return self.spawn_procs(args, &plan, p);
            }
        }
        if args.backend == "cuda" {
            return self.run_cuda(args, plan, launch.as_ref());
        }
        let of = RunOf::of(&plan);
        let exec = match CpuExecutor::new(plan, args.machine.slots) {
            Ok(e) => e,
            Err(e) => {
                let _ = writeln!(self.err, "error: {}: {e}", args.file.display());
                return EXIT_FAILURE;
            }
        };
        let o = RunOptions {
            count: args.count,
            op: args.reduce,
            root: args.machine.root as u32,
            timeout: Duration::from_secs_f64(args.timeout),
            stall: args.inject_stall,
        };
        let placement = if args.inplace {
            "in-place"
        } else {
            "out-of-place"
        };
        let (result, on) = match &launch {
            None => (
                harness::run_checked(&exec, args.dtype, &o, args.inplace),
                "cpu".to_string(),
            ),
            Some(l) => match procs::run_share(
                &exec,
                l,
                &args.net,
                args.dtype,
                &o,
                args.inplace,
                args.iters,
            ) {
                Ok(share) => {
                    let Some(total) = share.total else {
                        // Process 0 prints the summary; the others say only what went wrong.
                        return match share.local.wrong {
                            Some(w) if w > 0 => EXIT_FAILURE,
                            _ => EXIT_OK,
                        };
                    };
                    let calls = if share.iters > 0 {
                        format!(
                            "; first call {:.3} ms, then the mean of {} calls",
                            share.first.unwrap_or_default().as_secs_f64() * 1e3,
                            share.iters
                        )
                    } else {
                        String::new()
                    };
                    let on = format!(
                        "cpu, {} processes over {} (setup {:.1} ms{calls})",
                        l.size,
                        share.backend,
                        share.setup.as_secs_f64() * 1e3
                    );
                    (Ok(total), on)
                }
                Err(e) => {
                    // One write per line: the processes of a run share the terminal.
                    let _ = self.err.write_all(format!("error: {e}\n").as_bytes());
                    return EXIT_FAILURE;
                }
            },
        };
        match result {
            Ok(report) => {
                let line = summary(&of, args, placement, &on, &report);
                let _ = writeln!(self.out, "{line}");
                match report.wrong {
                    Some(0) => EXIT_OK,
                    Some(_) => EXIT_FAILURE,
                    None => EXIT_OK,
                }
            }
            Err(e) => {
                let _ = writeln!(self.err, "error: {e}");
                EXIT_FAILURE
            }
        }
    }

    /// `coll run --procs N`: starts N copies of this command line as one multi-process run.
    fn spawn_procs(&mut self, args: &RunArgs, plan: &Plan, procs: u32) -> u8 {
        if procs == 0 || procs > plan.ranks {
            let _ = writeln!(
                self.err,
                "error: --procs {procs} must be between 1 and the rank count ({})",
                plan.ranks
            );
            return EXIT_USAGE;
        }
        // The processes fail on their own after the timeout without progress; this limit only
        // keeps a process stuck outside any wait (a bug) from outliving the run: setup, the
        // gathering of results and every call each get a whole timeout, plus a minute.
        let limit = Duration::from_secs_f64(args.timeout * f64::from(3 + args.iters) + 60.0);
        match procs::spawn_local(procs, &procs::child_args(&self.argv), limit) {
            Ok(code) => code,
            Err(e) => {
                let _ = writeln!(self.err, "error: {e}");
                EXIT_FAILURE
            }
        }
    }

    /// `coll bench --auto`: measures every shipped algorithm of the collective, keeps the
    /// fastest per size on disk and prints the choice with its evidence.
    fn bench_auto(&mut self, args: &BenchArgs) -> u8 {
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
            crate::cuda::device::Gpu::open(gpus[0]).map_or_else(|_| "GPU".into(), |g| g.name())
        );
        let cfg = crate::cuda::bench::BenchConfig {
            vs_nccl: false,
            trace: false,
            ..bench_config(args, &gpus)
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
        let tuned =
            crate::cuda::autotune::tune(kind, &topo, &machine, &cfg, &settings, &mut progress);
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
            crate::cuda::bench::sizes(args.min_bytes, args.max_bytes, args.factor).len(),
            args.min_bytes,
            args.max_bytes
        );
        for t in &tuned.tried {
            if let Err(why) = &t.outcome {
                let _ = writeln!(
                    self.out,
                    "# left out {}: {why}",
                    crate::shipped::label(&t.file, &t.settings)
                );
            }
        }
        let measured: Vec<(
            &crate::cuda::autotune::Tried,
            &crate::cuda::bench::BenchReport,
        )> = tuned
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
            .map(|(t, _)| {
                let stem = t
                    .file
                    .trim_start_matches("algorithms/")
                    .trim_end_matches(".coll");
                match t.settings.strip_prefix("instances=") {
                    Some(i) => format!("{stem} x{i}"),
                    None => stem.to_string(),
                }
            })
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
                    crate::shipped::label(&c.entry.algorithm, &c.entry.settings)
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
                "# model fit {}: measured = {:.2} x predicted latency + {:.2} x predicted transfer (relative RMS error {:.0}%)",
                f.algorithm,
                f.latency,
                f.transfer,
                f.rel_rms * 100.0
            );
        }
        let path = args
            .tune_file
            .clone()
            .unwrap_or_else(|| crate::cuda::autotune::default_path(kind, n as u32, topo.name()));
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

    /// `coll compile --auto`: predicts every shipped algorithm of the collective and picks
    /// the fastest, printing the ranking and why.
    fn auto(&mut self, args: &CompileArgs) -> u8 {
        let (Some(kind), Some(size), Some(n)) = (args.collective, args.size, args.ranks) else {
            let _ = writeln!(
                self.err,
                "error: --auto needs --collective, --size and --ranks"
            );
            return EXIT_USAGE;
        };
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
            let rendered = match render_plan(plan, &args.format, &|_, _, _| None) {
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

    fn bench(&mut self, args: &BenchArgs) -> u8 {
        let Some(file) = &args.file else {
            return self.bench_auto(args);
        };
        // Both placements are measured; for XML with both, the out-of-place plan.
        let input = PlanInput {
            file,
            ranks: args.ranks,
            machine: &args.machine,
            inplace: false,
        };
        let plan = match self.plan_for(&input) {
            Ok(p) => p,
            Err(code) => return code,
        };
        let gpus = match self.pick_gpus("coll bench", &args.gpus) {
            Ok(g) => g,
            Err(code) => return code,
        };
        let kind = plan.collective.0;
        let (name, n, topo, inplace) = (
            plan.name.clone(),
            plan.ranks,
            plan.topology.clone(),
            plan.inplace,
        );
        let cfg = bench_config(args, &gpus);
        let bar = progress_bar("{bar:30} {pos}/{len} sizes, {elapsed} {msg}");
        let mut progress = |i: usize, of: usize| {
            bar.set_length(of as u64);
            bar.set_position(i as u64);
        };
        let result = crate::cuda::bench::bench(plan, &cfg, &mut progress);
        bar.finish_and_clear();
        let report = match result {
            Ok(r) => r,
            Err(e) => {
                let _ = writeln!(self.err, "error: {e}");
                return EXIT_FAILURE;
            }
        };
        let _ = writeln!(
            self.out,
            "# coll bench: {name} ({}, {n} ranks, {topo}, written {}) on GPUs {gpus:?}; calls {}",
            kind.name(),
            if inplace { "in place" } else { "out of place" },
            match args.graph {
                Some(l) => format!(
                    "captured in CUDA graphs ({} calls a graph, {l} launches a size)",
                    args.iters.max(1)
                ),
                None => format!(
                    "eager (stream-ordered launches, {})",
                    match report.launch_threads {
                        1 => "one GPU after another".to_string(),
                        t => format!("from {t} host threads at once"),
                    }
                ),
            }
        );
        let other = if inplace {
            "out-of-place calls copy the input to where the plan runs first"
        } else if report.alias_safe {
            "in-place calls run on the aliased buffers (proven safe)"
        } else {
            "in-place calls stage the input first (aliasing is not provably safe)"
        };
        let _ = writeln!(
            self.out,
            "# setup: kernel compile {:.1} ms (0 = from cache), plan load {:.1} ms, first call {:.3} ms (second {:.3} ms); GPU memory: plan allocations {:?} B (reported beforehand {:?} B), kernel module {:?} B; {other}",
            report.compile_ms,
            report.load_ms,
            report.first_call_ms,
            report.second_call_ms,
            report.allocated_bytes,
            report.reported_bytes,
            report.module_bytes
        );
        let per_size: Vec<String> = report
            .rows
            .iter()
            .map(|r| {
                let off = crate::cuda::direct::CallDirect::Off;
                let direct = match (r.direct_out != off, r.direct_in != off) {
                    (true, true) => "+direct",
                    (true, false) => "+direct-oop",
                    (false, true) => "+direct-ip",
                    (false, false) => "",
                };
                let ce = match (r.ce_out, r.ce_in) {
                    (true, true) => "+ce",
                    (true, false) => "+ce-oop",
                    (false, true) => "+ce-ip",
                    (false, false) => "",
                };
                format!("{} {}{direct}{ce}", r.size, r.protocol.name())
            })
            .collect();
        let _ = writeln!(
            self.out,
            "# protocol: LL for calls whose largest message is at most {} B and whose larger buffer is at most {} B, bulk above (+direct: some messages stored straight into the receiver's buffer, +ce: every message moved by the copy engines, no kernel; -oop/-ip: out-of-place or in-place calls only); per size: {}",
            report.ll_max,
            report.ll_max.saturating_mul(crate::cuda::LL_CALL_FACTOR),
            per_size.join(", ")
        );
        let d = report.direct;
        let _ = writeln!(
            self.out,
            "# direct: of {} messages per iteration, {} skip staging in bulk out-of-place calls and {} in in-place calls{} (the sender stores into the receiver's buffer; COLL_GPU_DIRECT=0 turns it off)",
            d.messages,
            d.apart,
            d.aliased,
            if d.swaps > 0 {
                format!(
                    ", {} of them as swaps (each side exchanging half in place)",
                    d.swaps
                )
            } else {
                String::new()
            }
        );
        if let (Some(c), Some(a), Some(b)) = (
            report.graph_capture_ms,
            report.graph_first_launch_ms,
            report.graph_second_launch_ms,
        ) {
            let _ = writeln!(
                self.out,
                "# graph of one call: capture and instantiate {c:.3} ms, first launch {a:.3} ms, second {b:.3} ms"
            );
        }
        if let Some(gbs) = report.store_ceiling_gbs {
            let _ = writeln!(
                self.out,
                "# SM-store ceiling in this run: {gbs:.1} GB/s per direction (every SM of each GPU storing 16-byte words into the other's memory, both directions at once; {:.0}% of NVLink's 478 GB/s)",
                gbs / 478.0 * 100.0
            );
        }
        if let Some(w) = report.one_way {
            let _ = writeln!(
                self.out,
                "# one direction, GPU 0 -> 1 (what a collective with one sender per link can get): GPU 0's SMs storing {:.1} GB/s, GPU 1's SMs loading {:.1} GB/s, both at once on halves {:.1} GB/s",
                w.push, w.pull, w.push_pull
            );
        }
        if let Some(v) = &report.nccl_version {
            let _ = writeln!(
                self.out,
                "# NCCL {v} (NCCL_NVLS_ENABLE={}): init {:.1} ms, first call {:.3} ms, GPU memory {:?} B",
                std::env::var("NCCL_NVLS_ENABLE").unwrap_or_default(),
                report.nccl_init_ms.unwrap_or(0.0),
                report.nccl_first_call_ms.unwrap_or(0.0),
                report.nccl_bytes.clone().unwrap_or_default()
            );
        } else if args.vs_nccl {
            let _ = writeln!(
                self.out,
                "# NCCL not run: it needs one rank per GPU ({n} ranks on {} GPUs)",
                gpus.len()
            );
        }
        let _ = write!(
            self.out,
            "{}",
            crate::cuda::bench::table(
                kind,
                args.dtype,
                args.reduce,
                args.machine.root as u32,
                &report
            )
        );
        // Where the host bounds eager calls: its time to enqueue one against the call's.
        let host: Vec<String> = report
            .rows
            .iter()
            .filter_map(|r| {
                let coll = r.out_of_place.host_us?;
                let mut notes: Vec<String> = Vec::new();
                if let Some((p, e)) = r.out_of_place.host_split_us {
                    notes.push(format!("prepare {p:.2}, GPUs' parts {e:.2}"));
                }
                if let Some(h) = r.nccl_out_of_place.as_ref().and_then(|t| t.host_us) {
                    notes.push(format!("NCCL {h:.2}"));
                }
                let notes = if notes.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", notes.join("; "))
                };
                Some(format!("{} {coll:.2}{notes}", r.size))
            })
            .collect();
        if !host.is_empty() {
            let _ = writeln!(
                self.out,
                "# host time to enqueue one eager call, out of place, µs (a call's time near it is bound by the host; coll's own split: resolving the call, then enqueueing every GPU's part): {}",
                host.join(", ")
            );
        }
        if let (Some(path), Some(trace)) = (&args.trace, &report.trace_json)
            && let Err(e) = std::fs::write(path, trace)
        {
            let _ = writeln!(self.err, "error: cannot write {}: {e}", path.display());
            return EXIT_FAILURE;
        }
        if let Some(path) = &args.json {
            let text = serde_json::to_string_pretty(&report).unwrap_or_default();
            if let Err(e) = std::fs::write(path, text) {
                let _ = writeln!(self.err, "error: cannot write {}: {e}", path.display());
                return EXIT_FAILURE;
            }
        }
        if crate::cuda::bench::any_wrong(&report) {
            let _ = writeln!(self.err, "error: wrong elements");
            return EXIT_FAILURE;
        }
        EXIT_OK
    }

    /// The GPUs to use: those asked for (`--gpus`), or every one the driver sees; the error
    /// (no GPU: exit 1; a GPU that does not exist: usage, exit 2) is reported here.
    fn pick_gpus(&mut self, what: &str, asked: &[usize]) -> Result<Vec<usize>, u8> {
        let found = crate::cuda::device::device_count();
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

    fn run_cuda(&mut self, args: &RunArgs, plan: Plan, launch: Option<&bootstrap::Launch>) -> u8 {
        let gpus = match self.pick_gpus("--backend cuda", &args.gpus) {
            Ok(g) => g,
            Err(code) => return code,
        };
        let of = RunOf::of(&plan);
        let placed = if args.inplace || plan.inplace {
            "in-place"
        } else {
            "out-of-place"
        };
        let mut o = crate::cuda::run::GpuRun {
            count: args.count,
            op: args.reduce,
            root: args.machine.root as u32,
            timeout: Duration::from_secs_f64(args.timeout),
            gpus: gpus.clone(),
            iters: args.iters,
            // `--inplace` asks for NCCL's in-place layout; without it the plan's own placement.
            inplace: args.inplace.then_some(true),
        };
        // One process driving every GPU, or this process's share of a multi-process run
        // (where process 0 reports for all, and connecting is part of its setup).
        let (report, setup, first_call, on, connect, copy_engines) = match launch {
            None => match crate::cuda::run::run_checked(plan, args.dtype, &o) {
                Ok(r) => (
                    r.report,
                    r.setup,
                    r.first_call,
                    format!("{} GPU(s) {gpus:?}", gpus.len()),
                    None,
                    r.copy_engines,
                ),
                Err(e) => {
                    let _ = writeln!(self.err, "error: {e}");
                    return EXIT_FAILURE;
                }
            },
            Some(l) => {
                // Without --gpus each process picks its GPU by its place on the machine.
                o.gpus = args.gpus.clone();
                match procs::run_share_cuda(plan, l, &args.net, args.dtype, &o) {
                    Ok((share, setup)) => {
                        let Some(total) = share.total else {
                            return match share.local.wrong {
                                Some(w) if w > 0 => EXIT_FAILURE,
                                _ => EXIT_OK,
                            };
                        };
                        (
                            total,
                            setup,
                            share.first.unwrap_or_default(),
                            format!(
                                "{} processes, one GPU each, IPC and {} proxy",
                                l.size, share.backend
                            ),
                            Some(share.setup),
                            false,
                        )
                    }
                    Err(e) => {
                        // One write per line: the processes of a run share the terminal.
                        let _ = self.err.write_all(format!("error: {e}\n").as_bytes());
                        return EXIT_FAILURE;
                    }
                }
            }
        };
        let line = summary(&of, args, placed, &on, &report);
        let _ = writeln!(self.out, "{line}");
        let (head, slowest) = match connect {
            Some(c) => (
                format!(
                    "setup (process 0): connect {:.1} ms, ",
                    c.as_secs_f64() * 1e3
                ),
                " (slowest process)",
            ),
            None => ("setup: ".to_string(), ""),
        };
        let _ = writeln!(
            self.out,
            "{head}kernel {} {:.1} ms, plan load {:.1} ms, first call {:.3} ms{slowest}; GPU memory allocated {:?} bytes, plan reported {:?}; direct messages in bulk calls: {} of {} out of place, {} in place{}; calls enqueued from {} host thread(s)",
            if setup.from_cache {
                "from cache"
            } else {
                "compiled in"
            },
            setup.compile.as_secs_f64() * 1e3,
            setup.load.as_secs_f64() * 1e3,
            first_call.as_secs_f64() * 1e3,
            setup.allocated_bytes,
            setup.reported_bytes,
            setup.direct.apart,
            setup.direct.messages,
            setup.direct.aliased,
            if copy_engines {
                " (these calls: every message on the copy engines)"
            } else {
                ""
            },
            setup.launch_threads,
        );
        match report.wrong {
            Some(0) | None => EXIT_OK,
            Some(_) => EXIT_FAILURE,
        }
    }

    fn compile(&mut self, args: &CompileArgs) -> u8 {
        if args.auto {
            return self.auto(args);
        }
        let Some(file) = args.file.clone() else {
            let _ = writeln!(self.err, "error: FILE or --auto is required");
            return EXIT_USAGE;
        };
        let options = args.machine.options();
        let is_plan = is_plan_file(&file);
        let (plan, topo, schedule) = if is_plan {
            let plans = match self.load_plans(&file, args.ranks) {
                Ok(p) => p,
                Err(code) => return code,
            };
            let several = plans.len() > 1;
            let mut schedules = Vec::new();
            for plan in &plans {
                let root = args.machine.root as u32;
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
            (plan, topo, schedule)
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
                Ok(c) => (c.lowered.plan, topo, c.schedule),
                Err(d) => {
                    self.report(&d);
                    return EXIT_FAILURE;
                }
            }
        };
        let format = Format::from_name(&args.format);
        let steps = |r: u32, b: u32, o: u32| schedule.round_of(r, b, o);
        let rendered = match render_plan(&plan, &args.format, &steps) {
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
            None if !args.predict || format != Some(Format::Text) => {
                let _ = write!(self.out, "{rendered}");
            }
            None => {}
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
