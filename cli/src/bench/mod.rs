//! `coll bench`: the nccl-tests sweep of a plan on the GPUs ([`sweep`]), with NCCL beside it
//! in its configurations and NCCL-best per size (`--vs-nccl`, [`nccl`], [`table`]) and the
//! link ceilings of the same run ([`ceiling`]); or, with `--auto`, every shipped algorithm of a collective measured and the
//! fastest per size kept in a tuning table ([`auto`]); or, with `--suite`, the cases of a
//! suite file ([`suite`]), recorded as JSON lines ([`record`]) and judged against their
//! targets ([`target`]) by `--summary` ([`summary`]); or, with `--overlap`, the collective
//! beside a GEMM on the same GPUs, coll against NCCL ([`overlap`]); or, with `--tuned`, the
//! per-size choice of a tuning table, each run of sizes on the plan that serves it
//! ([`tuned`]).
//!
//! The output is nccl-tests' table preceded by `#` lines that say how the calls ran (setup
//! costs, protocol and direct messages per size, NCCL's setup); a wrong element in any
//! checked call makes the exit code 1.

pub mod auto;
pub mod ceiling;
pub mod nccl;
pub mod overlap;
pub mod record;
pub mod suite;
pub mod summary;
pub mod sweep;
pub mod table;
pub mod target;
pub mod tuned;

pub use sweep::{BenchConfig, BenchReport, any_wrong, bench};

use crate::args::{MachineArgs, parse_collective, parse_dtype, parse_op, parse_size};
use crate::output::{Ctx, progress_bar};
use crate::plans::PlanInput;
use crate::{EXIT_FAILURE, EXIT_OK, EXIT_USAGE};
use clap::Args;
use coll_executor::cuda::direct::CallDirect;
use coll_executor::dtype::{DType, ReduceOp};
use coll_lang::builtins::CollectiveKind;
use std::path::PathBuf;
use sweep::First;

/// The arguments of `coll bench`.
#[derive(Clone, Debug, Args)]
pub struct BenchArgs {
    /// A `.coll` program or a `.json` plan (or `--auto`, `--suite`, `--summary`, `--tuned`).
    #[arg(value_name = "FILE", required_unless_present_any = ["auto", "suite", "summary", "tuned"])]
    file: Option<PathBuf>,
    /// Run the cases of a suite file (bench/suite.toml) in order, each as `coll bench FILE`
    /// with the case's options would; --gpus and --timeout apply to every case, the sweep's
    /// other options are the cases' own.
    #[arg(long, value_name = "SUITE", conflicts_with_all = ["file", "auto", "summary"])]
    suite: Option<PathBuf>,
    /// With --suite: only the cases with this tag (repeatable: any of them).
    #[arg(long = "tag", value_name = "T")]
    tags: Vec<String>,
    /// With --suite: only the case of this name (repeatable).
    #[arg(long = "case", value_name = "NAME")]
    cases: Vec<String>,
    /// With --suite: append one JSON line per case, size and placement to this file.
    #[arg(long, value_name = "FILE.jsonl")]
    record: Option<PathBuf>,
    /// Print, per machine, the latest commit's figures of a record file and whether each
    /// case's targets hold, as Markdown.
    #[arg(long, value_name = "FILE.jsonl", conflicts_with_all = ["file", "auto"])]
    summary: Option<PathBuf>,
    /// With --summary: a case run several times in the latest commit counts as the median
    /// of its runs per size and placement (NCCL's eager time swings from one process to the
    /// next) instead of its latest run.
    #[arg(long, requires = "summary")]
    medians: bool,
    /// Measure every shipped algorithm of `--collective` over the sweep (as written, with
    /// each of `--try-instances`, and with its blocks of several peers, `peers=several`, where
    /// that is another plan), keep the fastest per size in a tuning table (`--tune-file`) and
    /// fit the cost model to the measurements.
    #[arg(long, requires = "collective", conflicts_with = "file")]
    auto: bool,
    /// Measure the per-size choice of a tuning table (`--auto`'s, as the NCCL library and
    /// the tuned executor serve calls from it): each run of sweep sizes that one entry
    /// serves is swept on that entry's plan, as `coll bench` of it would, one table each.
    #[arg(long, value_name = "TABLE.json", conflicts_with_all = ["file", "auto", "suite", "summary", "overlap"])]
    tuned: Option<PathBuf>,
    /// The collective to tune (with --auto), or to measure from a table that has several
    /// (with --tuned).
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
    /// Run NCCL beside coll with the same timing, as nccl-tests does (buffers from
    /// ncclMemAlloc), unregistered, as symmetric windows and (allgather, alltoall) with the
    /// zero-CTA policy; ratios are against the fastest of them (NCCL-best).
    #[arg(long)]
    vs_nccl: bool,
    /// Run the collective beside a bf16 GEMM of about 2 ms on every GPU (cuBLAS; without it
    /// an SM-saturating kernel), then NCCL's the same way (default, the efficiency CTA
    /// policy, zero-CTA for allgather and alltoall): per size the GEMM alone, the
    /// collective alone, the pair, the GEMM's slowdown and the pair against NCCL-best's.
    #[arg(long, requires = "file", conflicts_with_all = ["auto", "suite", "summary", "graph", "trace", "vs_nccl"])]
    overlap: bool,
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
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_TIMEOUT)]
    timeout: f64,
}

/// `--timeout`'s default, seconds.
const DEFAULT_TIMEOUT: f64 = 30.0;

/// The sweep `coll bench` runs for `args` on `gpus`.
fn bench_config(
    args: &BenchArgs,
    gpus: &[usize],
    settings: coll_executor::cuda::GpuSettings,
) -> BenchConfig {
    BenchConfig {
        min_bytes: args.min_bytes,
        max_bytes: args.max_bytes,
        factor: args.factor,
        iters: args.iters,
        warmup: args.warmup,
        check: args.check,
        dtype: args.dtype,
        op: args.reduce,
        // Never truncated: a root past u32 fails at load, naming the rank count.
        root: u32::try_from(args.machine.root).unwrap_or(u32::MAX),
        gpus: gpus.to_vec(),
        vs_nccl: args.vs_nccl,
        settings,
        trace: args.trace.is_some(),
        graph: args.graph,
    }
}

impl Ctx<'_> {
    /// Runs `coll bench`; returns the exit code.
    pub fn bench(&mut self, args: &BenchArgs) -> u8 {
        if let Some(path) = &args.suite {
            return self.bench_suite(args, path);
        }
        if !args.tags.is_empty() || !args.cases.is_empty() || args.record.is_some() {
            let _ = writeln!(self.err, "error: --tag, --case and --record need --suite");
            return EXIT_USAGE;
        }
        if let Some(path) = &args.summary {
            return self.bench_summary(path, args.medians);
        }
        if let Some(path) = &args.tuned {
            return self.bench_tuned(args, path);
        }
        self.bench_file(args, &mut None)
    }

    /// `coll bench FILE` (or `--auto` without one); `kept` receives the sweep when it ran.
    fn bench_file(&mut self, args: &BenchArgs, kept: &mut Option<suite::Ran>) -> u8 {
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
        self.bench_plan(args, plan, kept)
    }

    /// [`Ctx::bench_file`] once the plan is compiled: the sweep of `plan` on the GPUs.
    fn bench_plan(
        &mut self,
        args: &BenchArgs,
        plan: coll_compiler::plan::ValidPlan,
        kept: &mut Option<suite::Ran>,
    ) -> u8 {
        let root = match self.root_for(&plan, args.machine.root) {
            Ok(r) => r,
            Err(code) => return code,
        };
        let gpus = match self.pick_gpus("coll bench", &args.gpus) {
            Ok(g) => g,
            Err(code) => return code,
        };
        let first = match First::from_var(self.env.get(sweep::FIRST_VAR)) {
            Ok(f) => f,
            Err(e) => {
                let _ = writeln!(self.err, "error: {e}");
                return EXIT_FAILURE;
            }
        };
        let kind = plan.collective.0;
        let (name, n, topo, inplace) = (
            plan.name.clone(),
            plan.ranks,
            plan.topology.clone(),
            plan.inplace,
        );
        let settings = match self.gpu_settings(args.timeout) {
            Ok(s) => s,
            Err(code) => return code,
        };
        if args.overlap {
            return self.bench_overlap(args, plan, gpus, settings);
        }
        let cfg = bench_config(args, &gpus, settings);
        let bar = progress_bar("{bar:30} {pos}/{len} sizes, {elapsed} {msg}");
        let mut progress = |i: usize, of: usize| {
            bar.set_length(of as u64);
            bar.set_position(i as u64);
        };
        let result = sweep::bench_probed(plan, &cfg, first, &mut progress);
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
        self.setup_lines(&report, inplace);
        self.link_lines(&report);
        if let Some(v) = &report.nccl_version {
            let _ = writeln!(
                self.out,
                "# NCCL {v} ({}={}): init {:.1} ms, first call {:.3} ms, GPU memory {:?} B",
                nccl::NVLS_VAR,
                self.env.get(nccl::NVLS_VAR).unwrap_or_default(),
                report.nccl_init_ms.unwrap_or(0.0),
                report.nccl_first_call_ms.unwrap_or(0.0),
                report.nccl_bytes.clone().unwrap_or_default()
            );
            let _ = writeln!(
                self.out,
                "# NCCL as nccl-tests runs it: buffers from ncclMemAlloc, unregistered (default), registered as symmetric windows (symmetric, -R 2), and for allgather and alltoall a communicator with the zero-CTA policy on those windows (zero-cta, copy engines); NCCL-best per size is the fastest, and every ratio is against it"
            );
            for note in &report.nccl_notes {
                let _ = writeln!(self.out, "# NCCL {note}");
            }
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
            table::table(kind, args.dtype, args.reduce, root, &report)
        );
        self.host_line(&report);
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
        let wrong = any_wrong(&report);
        *kept = Some(suite::Ran {
            collective: kind,
            report,
        });
        if wrong {
            let _ = writeln!(self.err, "error: wrong elements");
            return EXIT_FAILURE;
        }
        EXIT_OK
    }

    /// `coll bench FILE --overlap` ([`overlap`]).
    fn bench_overlap(
        &mut self,
        args: &BenchArgs,
        plan: coll_compiler::plan::ValidPlan,
        gpus: Vec<usize>,
        settings: coll_executor::cuda::GpuSettings,
    ) -> u8 {
        let (name, kind, n) = (plan.name.clone(), plan.collective.0, plan.ranks);
        let cfg = overlap::OverlapConfig {
            sizes: sweep::sizes(args.min_bytes, args.max_bytes, args.factor),
            iters: args.iters,
            warmup: args.warmup,
            dtype: args.dtype,
            op: args.reduce,
            root: u32::try_from(args.machine.root).unwrap_or(u32::MAX),
            gpus: gpus.clone(),
            settings,
        };
        let report = match overlap::run(plan, &cfg) {
            Ok(r) => r,
            Err(e) => {
                let _ = writeln!(self.err, "error: {e}");
                return EXIT_FAILURE;
            }
        };
        let g = &report.gemm;
        let _ = writeln!(
            self.out,
            "# coll bench --overlap: {name} ({}, {n} ranks, {}) on GPUs {gpus:?} beside {} of M={} N={} K={} per GPU ({:.3} ms alone{}); {} iterations after {} warm-ups; NCCL {} ({}={})",
            kind.name(),
            args.dtype.name(),
            g.engine,
            g.shape.0,
            g.shape.1,
            g.shape.2,
            g.alone_ms,
            if g.engine.starts_with("cuBLAS") {
                ""
            } else {
                "; for the kernel: CTAs, threads, rounds"
            },
            args.iters.max(1),
            args.warmup,
            nccl::version()
                .map(|v| v.1)
                .unwrap_or_else(|e| e.to_string()),
            nccl::NVLS_VAR,
            self.env.get(nccl::NVLS_VAR).unwrap_or_default()
        );
        for note in &report.notes {
            let _ = writeln!(self.out, "# {note}");
        }
        let _ = write!(self.out, "{}", overlap::table(&report));
        if let Some(path) = &args.json {
            let text = serde_json::to_string_pretty(&report).unwrap_or_default();
            if let Err(e) = std::fs::write(path, text) {
                let _ = writeln!(self.err, "error: cannot write {}: {e}", path.display());
                return EXIT_FAILURE;
            }
        }
        EXIT_OK
    }

    /// The `#` lines on how the calls were set up and served: setup costs and memory, the
    /// protocol and direct messages per size, the direct-message count, graph costs.
    fn setup_lines(&mut self, report: &BenchReport, inplace: bool) {
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
                let off = CallDirect::Off;
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
                if r.oneshot {
                    return format!("{} one-shot", r.size);
                }
                format!("{} {}{direct}{ce}", r.size, r.protocol.name())
            })
            .collect();
        let _ = writeln!(
            self.out,
            "# protocol: LL for calls whose largest message is at most {} B and whose larger buffer is at most {} B, LL128 (ll128) or bulk above (one-shot: a one-shot allreduce's call, no interpreter; +direct: some messages stored straight into the receiver's buffer, +ce: every message moved by the copy engines, no kernel; -oop/-ip: out-of-place or in-place calls only); per size: {}",
            report.ll_max,
            report
                .ll_max
                .saturating_mul(coll_executor::cuda::LL_CALL_FACTOR),
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
    }

    /// The `#` lines of the link ceilings measured in the run (or why they were not).
    fn link_lines(&mut self, report: &BenchReport) {
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
        if let Some(us) = report.launch_floor_us {
            let _ = writeln!(
                self.out,
                "# launch floor in this run: {us:.2} µs per eager call (an empty kernel on every GPU, enqueued as coll enqueues a call's GPUs)"
            );
        }
        if let Some(why) = &report.ceiling_error {
            let _ = writeln!(self.out, "# link ceilings not measured: {why}");
        }
    }

    /// Where the host bounds eager calls: its time to enqueue one against the call's.
    fn host_line(&mut self, report: &BenchReport) {
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Line {
        #[command(flatten)]
        args: BenchArgs,
    }

    fn parse(args: &[&str]) -> Result<BenchArgs, String> {
        Line::try_parse_from(std::iter::once("coll bench").chain(args.iter().copied()))
            .map(|l| l.args)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn overlap_takes_a_file_and_the_sweep_sizes() {
        let a = parse(&[
            "algorithms/allreduce_ring.coll",
            "--ranks",
            "2",
            "--overlap",
            "-b",
            "64M",
            "-e",
            "1G",
            "-f",
            "4",
            "--dtype",
            "bf16",
        ])
        .expect("parses");
        assert!(a.overlap && !a.vs_nccl);
        assert_eq!((a.min_bytes, a.max_bytes, a.factor), (64 << 20, 1 << 30, 4));
        assert_eq!(
            sweep::sizes(a.min_bytes, a.max_bytes, a.factor),
            [64 << 20, 256 << 20, 1 << 30]
        );
        assert_eq!(a.dtype, DType::Bf16);
        for other in ["--vs-nccl", "--graph", "--auto"] {
            let e = parse(&["x.coll", "--overlap", other]).expect_err(other);
            assert!(e.contains("cannot be used with"), "{other}: {e}");
        }
        let e = parse(&["--overlap", "--suite", "s.toml"]).expect_err("no file");
        assert!(e.contains("cannot be used with"), "{e}");
        let e = parse(&["--overlap"]).expect_err("no file");
        assert!(e.contains("required"), "{e}");
        assert!(!parse(&["x.coll", "--vs-nccl"]).expect("parses").overlap);
    }
}
