//! `coll run`: one checked call (or `1 + --iters`) of a plan on nccl-tests-style data, on the
//! CPU reference executor or the GPUs, in this process, across processes a launcher started,
//! or across `--procs N` processes it starts itself ([`crate::procs`]). Every element of
//! every rank is compared with a naive reference; one summary line says time, bandwidths and
//! `#wrong`, and a wrong element makes the exit code 1.

use crate::args::{MachineArgs, parse_dtype, parse_op};
use crate::limits;
use crate::output::Ctx;
use crate::plans::PlanInput;
use crate::procs;
use crate::{EXIT_FAILURE, EXIT_OK, EXIT_USAGE};
use clap::Args;
use coll_compiler::plan::{Plan, ValidPlan};
use coll_compiler::predict;
use coll_executor::bootstrap;
use coll_executor::cpu::{CpuExecutor, RunOptions};
use coll_executor::dtype::{DType, ReduceOp};
use coll_executor::harness;
use coll_lang::builtins::CollectiveKind;
use std::path::PathBuf;
use std::time::Duration;

/// The arguments of `coll run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// A `.coll` program, a `.json` plan or MSCCL-IR `.xml`.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Rank count (required for `.coll`; for a plan it must match the plan's).
    #[arg(long, value_name = "N", value_parser = limits::parse_ranks)]
    ranks: Option<usize>,
    #[command(flatten)]
    machine: MachineArgs,
    /// NCCL's count: elements per rank for allreduce, broadcast and reduce, per rank's
    /// contribution for allgather and reducescatter, per peer for alltoall. Suffixes K, M, G
    /// are powers of 1024.
    #[arg(long, value_name = "ELEMS", default_value = "1M", value_parser = limits::parse_count)]
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
    #[arg(long, value_name = "SECS", default_value_t = 30.0, value_parser = limits::parse_timeout)]
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
    #[arg(long, value_name = "NET", default_value = "tcp", value_parser = procs::NETS)]
    net: String,
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

impl Ctx<'_> {
    /// Runs `coll run`; returns the exit code.
    pub fn run(&mut self, args: &RunArgs) -> u8 {
        let input = PlanInput {
            file: &args.file,
            ranks: args.ranks,
            machine: &args.machine,
            inplace: args.inplace,
        };
        // A CPU run that cannot fit is refused before compiling (the lower bound) and
        // before allocating (the plan's buffers).
        let cpu = args.backend == "cpu" && args.procs.is_none();
        if cpu && let Some(n) = args.ranks {
            let at_least = limits::cpu_run_bytes_at_least(
                n,
                args.count,
                args.dtype.size() as u64,
                args.inplace,
            );
            if let Some(msg) = limits::cpu_run_refusal(at_least, n as u64, args.count) {
                let _ = writeln!(self.err, "error: {msg}");
                return EXIT_USAGE;
            }
        }
        let plan = match self.plan_for(&input) {
            Ok(p) => p,
            Err(code) => return code,
        };
        let root = match self.root_for(&plan, args.machine.root) {
            Ok(r) => r,
            Err(code) => return code,
        };
        if let Some(r) = args.inject_stall.filter(|&r| r >= plan.ranks) {
            let _ = writeln!(
                self.err,
                "error: --inject-stall {r} names no rank: the plan has {} ranks",
                plan.ranks
            );
            return EXIT_USAGE;
        }
        if !args.timeout.is_finite() || args.timeout <= 0.0 {
            let _ = writeln!(
                self.err,
                "error: --timeout must be a positive number of seconds"
            );
            return EXIT_USAGE;
        }
        let env = self.env;
        let launch = match bootstrap::launch_from_env(|k| env.lookup(k)) {
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
            return self.run_cuda(args, plan, root, launch.as_ref());
        }
        let need = limits::cpu_run_bytes(&plan, args.count, args.dtype.size() as u64);
        if launch.is_none()
            && let Some(msg) = limits::cpu_run_refusal(need, u64::from(plan.ranks), args.count)
        {
            let _ = writeln!(self.err, "error: {msg}");
            return EXIT_USAGE;
        }
        let of = RunOf::of(&plan);
        let exec = CpuExecutor::new(plan, args.machine.slots);
        let o = RunOptions {
            count: args.count,
            op: args.reduce,
            root,
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
            Some(l) => {
                let share = procs::run_share(
                    &exec,
                    args.machine.slots,
                    l,
                    procs::Net {
                        name: &args.net,
                        env,
                    },
                    args.dtype,
                    &o,
                    args.inplace,
                    args.iters,
                );
                match share {
                    Ok(share) => {
                        let Some(total) = share.total else {
                            // Process 0 prints the summary; the others say only what went
                            // wrong.
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
                }
            }
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

    fn run_cuda(
        &mut self,
        args: &RunArgs,
        plan: ValidPlan,
        root: u32,
        launch: Option<&bootstrap::Launch>,
    ) -> u8 {
        let gpus = match self.pick_gpus("--backend cuda", &args.gpus) {
            Ok(g) => g,
            Err(code) => return code,
        };
        let settings = match self.gpu_settings(args.timeout) {
            Ok(s) => s,
            Err(code) => return code,
        };
        let of = RunOf::of(&plan);
        let placed = if args.inplace || plan.inplace {
            "in-place"
        } else {
            "out-of-place"
        };
        let mut o = coll_executor::cuda::run::GpuRun {
            count: args.count,
            op: args.reduce,
            root,
            settings,
            gpus: gpus.clone(),
            iters: args.iters,
            // `--inplace` asks for NCCL's in-place layout; without it the plan's own placement.
            inplace: args.inplace.then_some(true),
        };
        // One process driving every GPU, or this process's share of a multi-process run
        // (where process 0 reports for all, and connecting is part of its setup).
        let (report, setup, first_call, on, connect, copy_engines) = match launch {
            None => match coll_executor::cuda::run::run_checked(plan, args.dtype, &o) {
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
                let net = procs::Net {
                    name: &args.net,
                    env: self.env,
                };
                let local = procs::local_rank(self.env);
                match procs::run_share_cuda(plan, l, net, local, args.dtype, &o) {
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
            "{head}kernel {:?} {} {:.1} ms, plan load {:.1} ms, first call {:.3} ms{slowest}; GPU memory allocated {:?} bytes, plan reported {:?}; direct messages in bulk calls: {} of {} out of place, {} in place{}; calls enqueued from {} host thread(s)",
            setup.kernel_images,
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
}
