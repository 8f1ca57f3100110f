//! Options that several subcommands share ([`MachineArgs`]: the topology and how to compile
//! and check for it) and the value parsers of their arguments. A value that does not parse
//! is a usage error (exit 2) naming what is accepted.

use clap::Args;
use coll_compiler::CompileOptions;
use coll_compiler::check::Limits;
use coll_compiler::elaborate::Options;
use coll_compiler::lower::{LowerOptions, Scheduling};
use coll_executor::dtype::{DType, ReduceOp};
use coll_lang::builtins::CollectiveKind;

pub use coll_executor::size::parse_size;

/// A collective by name (`allreduce`, `alltoall`, ...).
pub fn parse_collective(s: &str) -> Result<CollectiveKind, String> {
    CollectiveKind::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = CollectiveKind::ALL.iter().map(|k| k.name()).collect();
        format!("unknown collective `{s}`; one of {}", names.join(", "))
    })
}

/// An element type by name (`f32`, `bf16`, ...).
pub fn parse_dtype(s: &str) -> Result<DType, String> {
    DType::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = DType::ALL.iter().map(|d| d.name()).collect();
        format!("unknown dtype `{s}`; one of {}", names.join(", "))
    })
}

/// A reduction by name (`sum`, `prod`, `min`, `max`, `avg`).
pub fn parse_op(s: &str) -> Result<ReduceOp, String> {
    ReduceOp::from_name(s)
        .ok_or_else(|| format!("unknown op `{s}`; one of sum, prod, min, max, avg"))
}

/// `CHANNELS,ORDER,PACKING[,several-peers]` for `--schedule`: one candidate as the table of
/// `coll compile --explain` names it, e.g. `renamed,dependence,per-connection`, and with
/// `several-peers` its blocks of several peers (the "with several peers" rows).
pub fn parse_schedule(s: &str) -> Result<Scheduling, String> {
    let usage = || {
        format!(
            "`{s}` is not CHANNELS,ORDER,PACKING[,several-peers] as `coll compile --explain` \
             names them (channels program, compiler, chunks, split or renamed; order program, \
             dependence or dependence-split; blocks first-fit, per-connection, \
             per-connection-echo or local-apart), e.g. `renamed,dependence,per-connection`"
        )
    };
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    let (c, o, p, merged) = match parts[..] {
        [c, o, p] => (c, o, p, false),
        [c, o, p, "several-peers"] => (c, o, p, true),
        _ => return Err(usage()),
    };
    // The names are the plan JSON's, which serde reads.
    let name = |n: &str| serde_json::Value::String(n.to_string());
    let channels = serde_json::from_value(name(c)).map_err(|_| usage())?;
    let order = serde_json::from_value(name(o)).map_err(|_| usage())?;
    let packing = serde_json::from_value(name(p)).map_err(|_| usage())?;
    Ok(if merged {
        Scheduling::OnlyMerged(channels, order, packing)
    } else {
        Scheduling::Only(channels, order, packing)
    })
}

/// `NAME=V` for `--param`: `V` an integer that fits 64 bits (decimal, with an optional `-`).
pub fn parse_param(s: &str) -> Result<(String, i64), String> {
    let Some((name, value)) = s.split_once('=') else {
        return Err(format!("`{s}` is not NAME=VALUE, e.g. `--param trees=2`"));
    };
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("`{s}` names no parameter"));
    }
    let value = value.trim();
    match value.parse::<i64>() {
        Ok(v) => Ok((name.to_string(), v)),
        Err(e)
            if matches!(
                e.kind(),
                std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow
            ) =>
        {
            Err(format!(
                "parameter `{name}`: {value} is out of range: parameters are 64-bit signed integers"
            ))
        }
        Err(_) => Err(format!("parameter `{name}`: `{value}` is not an integer")),
    }
}

/// How to build and check schedules.
#[derive(Clone, Debug, Args)]
pub struct MachineArgs {
    /// Topology: a preset (nvswitch:N, hgx-h200:N, cluster:NxG, ring:N), a .json/.xml
    /// file, or `auto` (this machine's GPUs as CUDA reports them). Default: nvswitch:N.
    #[arg(long, value_name = "T")]
    pub topo: Option<String>,
    /// Root rank of rooted collectives.
    #[arg(long, value_name = "R", default_value_t = 0)]
    pub root: usize,
    /// Set a parameter the program declares with `param NAME = DEFAULT;` (repeatable; the
    /// last value given for a name wins).
    #[arg(long = "param", value_name = "NAME=V", value_parser = parse_param)]
    pub params: Vec<(String, i64)>,
    /// Stop elaborating after this many statements and loop iterations (a guard against
    /// endless loops).
    #[arg(long, value_name = "STEPS", default_value_t = Options::default().step_limit)]
    pub step_limit: u64,
    /// Most chunk operations a program may produce (checking and lowering keep a few hundred
    /// bytes per operation).
    #[arg(long, value_name = "OPS", default_value_t = Options::default().op_limit)]
    pub op_limit: usize,
    /// Most chunks of all buffers over all ranks (`chunks` times the rank count, summed over
    /// buffers).
    #[arg(long, value_name = "CELLS", default_value_t = Options::default().cell_limit)]
    pub cell_limit: u64,
    /// Slots per connection assumed by the deadlock check.
    #[arg(long, value_name = "S", default_value_t = coll_compiler::DEFAULT_SLOTS, value_parser = clap::value_parser!(u32).range(1..))]
    pub slots: u32,
    /// Thread blocks per rank, at most.
    #[arg(long, value_name = "B", default_value_t = Limits::default().max_blocks)]
    pub max_blocks: u32,
    /// Ops per thread block, at most.
    #[arg(long, value_name = "OPS", default_value_t = Limits::default().max_ops_per_block)]
    pub max_ops_per_block: u32,
    /// Do not fuse receives with the sends that forward them.
    #[arg(long)]
    pub no_fuse: bool,
    /// Keep every block in program order (no send hoisting).
    #[arg(long)]
    pub no_hoist: bool,
    /// Keep every local copy the program makes (no copy folding).
    #[arg(long)]
    pub no_fold: bool,
    /// Give every block one peer a side: no blocks that take several peers' data, or send
    /// to several peers, in one op (MSCCL-IR exports never have them).
    #[arg(long)]
    pub one_peer_blocks: bool,
    /// Keep each transfer one message: no schedules with transfers of several chunks cut
    /// into transfers of one (and so no scratch renaming, which needs them cut).
    #[arg(long)]
    pub whole_transfers: bool,
    /// Lower only this candidate schedule, CHANNELS,ORDER,PACKING as the table of
    /// `--explain` names it (e.g. `renamed,dependence,per-connection`), with `,several-peers`
    /// its blocks of several peers, to run or compare it; the program as written where it
    /// fails a check or does not apply (the plan's schedule says which).
    #[arg(long, value_name = "C,O,P[,several-peers]", value_parser = parse_schedule)]
    pub schedule: Option<Scheduling>,
    /// Replicate the program over N channels (replaces the header's `instances`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub instances: Option<u32>,
    /// How an in-place algorithm becomes a plan: `out-of-place` compiles it as an
    /// out-of-place plan, which reads the input where it stands instead of copying it first
    /// and still runs in-place calls without staging (allreduce, broadcast, reduce,
    /// allgather); `as-written` keeps the header's. Default: `out-of-place` where it applies
    /// for `run` and `bench`, `as-written` for `compile` and `check`.
    #[arg(long, value_name = "P", value_parser = ["as-written", "out-of-place"])]
    pub placement: Option<String>,
}

impl MachineArgs {
    /// The compiler's options for these arguments.
    pub fn options(&self) -> CompileOptions {
        CompileOptions {
            elaborate: Options {
                root: self.root,
                step_limit: self.step_limit,
                op_limit: self.op_limit,
                cell_limit: self.cell_limit,
                out_of_place: self.placement.as_deref() == Some("out-of-place"),
                instances: self.instances,
                params: self.params.iter().cloned().collect(),
                ..Options::default()
            },
            lower: LowerOptions {
                hoist_sends: !self.no_hoist,
                fuse: !self.no_fuse,
                fold_copies: !self.no_fold,
                several_peers: !self.one_peer_blocks,
                split_transfers: !self.whole_transfers,
                scheduling: self.schedule.unwrap_or(Scheduling::Choose),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_parsers_name_what_they_accept() {
        assert_eq!(parse_collective("alltoall"), Ok(CollectiveKind::AllToAll));
        let e = parse_collective("allsum").expect_err("unknown");
        assert!(
            e.starts_with("unknown collective `allsum`; one of ") && e.contains("allreduce"),
            "{e}"
        );
        assert_eq!(parse_dtype("bf16"), Ok(DType::Bf16));
        use coll_compiler::lower::{Channels, Order, Packing};
        assert_eq!(
            parse_schedule("renamed, dependence-split,local-apart"),
            Ok(Scheduling::Only(
                Channels::Renamed,
                Order::DependenceSplit,
                Packing::LocalApart
            ))
        );
        assert_eq!(
            parse_schedule("program,program,per-connection,several-peers"),
            Ok(Scheduling::OnlyMerged(
                Channels::Program,
                Order::Program,
                Packing::PerConnection
            ))
        );
        for bad in [
            "renamed,dependence",
            "renamed,program,first-fit,x",
            "split,sideways,first-fit",
        ] {
            let e = parse_schedule(bad).expect_err("not a schedule");
            assert!(
                e.starts_with(&format!("`{bad}` is not CHANNELS,ORDER,PACKING"))
                    && e.ends_with("e.g. `renamed,dependence,per-connection`"),
                "{e}"
            );
        }
        let e = parse_dtype("f8").expect_err("unknown");
        assert!(
            e.starts_with("unknown dtype `f8`; one of f32") && e.contains("u8"),
            "{e}"
        );
        assert_eq!(parse_param("trees=-3"), Ok(("trees".to_string(), -3)));
        assert_eq!(
            parse_param("trees=9223372036854775808"),
            Err("parameter `trees`: 9223372036854775808 is out of range: parameters are 64-bit signed integers".to_string())
        );
        assert_eq!(
            parse_param("trees=2.5"),
            Err("parameter `trees`: `2.5` is not an integer".to_string())
        );
        assert!(parse_param("trees").is_err());
        assert_eq!(parse_op("avg"), Ok(ReduceOp::Avg));
        assert_eq!(
            parse_op("mean"),
            Err("unknown op `mean`; one of sum, prod, min, max, avg".to_string())
        );
    }

    #[test]
    fn limit_flags_reach_the_compiler_options() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            machine: MachineArgs,
        }
        let parse = |args: &[&str]| {
            <Cli as clap::Parser>::try_parse_from(
                std::iter::once("coll").chain(args.iter().copied()),
            )
            .expect("valid flags")
            .machine
            .options()
            .elaborate
        };
        let defaults = parse(&[]);
        assert_eq!(
            (defaults.op_limit, defaults.step_limit, defaults.cell_limit),
            (1 << 22, 1 << 24, 1 << 25)
        );
        let raised = parse(&[
            "--op-limit",
            "9000000",
            "--step-limit",
            "7",
            "--cell-limit",
            "5",
        ]);
        assert_eq!(
            (raised.op_limit, raised.step_limit, raised.cell_limit),
            (9_000_000, 7, 5)
        );
    }
}
