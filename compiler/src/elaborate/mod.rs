//! Elaboration: a checked program, a rank count and the facts of a topology become the list
//! of chunk operations it performs, in program order, each with the span of the statement
//! that produced it.
//!
//! Invariants of [`Elaborated`]: every [`Loc`] names a buffer of [`Elaborated::buffers`], a
//! non-empty rank range inside `0..n` and chunks `index..index + count` inside that buffer's
//! per-rank chunk count; every buffer has at least one chunk (a scratch buffer declared with
//! none is dropped, and nothing refers to it); a [`ChunkOp`] has at most one side with
//! several ranks, and a `copy` has a single source rank; no one-to-one `reduce` has the same
//! chunk (after in-place aliasing) as source and destination; no op writes `input` of an
//! out-of-place collective. Errors name
//! the offending code and, in notes, the values of the enclosing loop variables and calls.

mod eval;
pub mod ir;
pub mod placement;
mod resolve;

use crate::error::CompileError;
use crate::ids::RankId;
use coll_lang::ast::{HeaderItemKind, Item};
use coll_lang::builtins::CollectiveKind;
use coll_lang::{Diagnostic, Diagnostics, Module, Span};
pub use ir::{BufId, OpKind, Protocol, Via};
use std::collections::BTreeMap;

/// What elaboration needs to know about the machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Facts {
    /// Rank count.
    pub n: usize,
    pub nodes: usize,
    pub gpus_per_node: usize,
    /// Topology families it belongs to (`nvswitch`, `hgx`, `cluster`, `ring`).
    pub families: Vec<String>,
    /// Every GPU sits on an NVSwitch (switch-group channels are possible).
    pub has_switch: bool,
    /// Ranks can reach each other over a network.
    pub has_net: bool,
    /// How the topology was named (`nvswitch:8`), for messages.
    pub topology: String,
}

impl Facts {
    /// The facts of a topology.
    pub fn from_topology(t: &crate::topology::Topology) -> Facts {
        Facts {
            n: t.num_ranks(),
            nodes: t.nodes(),
            gpus_per_node: t.gpus_per_node(),
            families: t.families().iter().map(|f| f.name().to_string()).collect(),
            has_switch: t.has_switch(),
            has_net: t
                .devices()
                .any(|(_, d)| matches!(d, crate::topology::Device::NetSwitch)),
            topology: t.name().to_string(),
        }
    }

    /// `n` GPUs on one NVSwitch: the default topology.
    pub fn nvswitch(n: usize) -> Facts {
        Facts {
            n,
            nodes: 1,
            gpus_per_node: n,
            families: vec!["nvswitch".to_string()],
            has_switch: true,
            has_net: false,
            topology: format!("nvswitch:{n}"),
        }
    }
}

/// Default of [`Options::cell_limit`].
pub const DEFAULT_CELL_LIMIT: u64 = 1 << 25;
/// Default of [`Options::op_limit`]: 2^22 operations, twice what the largest shipped
/// algorithms produce at 1024 ranks (ring and all-pairs allreduce, 2.1 million each). At
/// the limit, elaboration alone takes under 4 s and 0.25 GB in an unoptimised build; a
/// whole check needs about [`BYTES_PER_OP`] per operation (1.3 GB).
pub const DEFAULT_OP_LIMIT: usize = 1 << 22;
/// Default of [`Options::step_limit`]: 2^24 steps, about 4 s in an unoptimised build; three
/// times what the most stepping shipped algorithm needs at 1024 ranks (all-pairs
/// allreduce, 5.3 million), and 4 per operation at [`DEFAULT_OP_LIMIT`].
pub const DEFAULT_STEP_LIMIT: u64 = 1 << 24;
/// Peak memory of `coll check` per elaborated operation, about (ring allreduce at 512 to
/// 2048 ranks, release build, 2026-11-24): what the op limit's error quotes.
pub const BYTES_PER_OP: u64 = 320;

/// What checking `ops` operations needs, about, for messages: `~1.3 GB`, `~12 MB`.
pub fn memory_estimate(ops: u64) -> String {
    let bytes = ops.saturating_mul(BYTES_PER_OP) as f64;
    if bytes >= 1e8 {
        format!("~{:.1} GB", bytes / 1e9)
    } else {
        format!("~{:.0} MB", (bytes / 1e6).max(1.0))
    }
}

/// Bounds that keep elaboration finite.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// The root of rooted collectives (broadcast, reduce) and the value of `root`.
    pub root: usize,
    /// Statements and loop iterations executed, at most ([`DEFAULT_STEP_LIMIT`]): stops an
    /// endless loop that produces no operations.
    pub step_limit: u64,
    /// Chunk operations produced, at most ([`DEFAULT_OP_LIMIT`]): every later stage keeps
    /// state per operation, so this bounds the memory of a compile.
    pub op_limit: usize,
    /// Nested calls, at most.
    pub call_depth_limit: usize,
    /// Chunks of all buffers over all ranks, at most: elaboration and the checks after it
    /// keep state per chunk of every rank, so the header's `chunks` and scratch sizes are
    /// bounded by this before anything of that size is allocated. The default, 2^25, holds
    /// an alltoall with `chunks n` at 256 ranks.
    pub cell_limit: u64,
    /// Record the loop variables and calls active when operation `i` is produced
    /// ([`Elaborated::captured_context`]); used to explain a failed proof.
    pub capture_op: Option<usize>,
    /// Replaces the header's `instances` (at least 1): a setting the per-size tuning tries
    /// without editing the program.
    pub instances: Option<u32>,
    /// Compile an in-place program as an out-of-place plan ([`placement`]), which runs both
    /// placements of a call without staging copies.
    pub out_of_place: bool,
    /// Values of the header's `param`s by name, replacing their defaults; a name the
    /// program does not declare is an error ([`CompileError::UnknownParam`]).
    pub params: BTreeMap<String, i64>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            root: 0,
            step_limit: DEFAULT_STEP_LIMIT,
            op_limit: DEFAULT_OP_LIMIT,
            call_depth_limit: 200,
            cell_limit: DEFAULT_CELL_LIMIT,
            capture_op: None,
            instances: None,
            out_of_place: false,
            params: BTreeMap::new(),
        }
    }
}

/// A half-open range of ranks `start..end`; one rank is `r..r+1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RankRange {
    pub start: u32,
    pub end: u32,
}

impl RankRange {
    pub fn one(r: u32) -> RankRange {
        RankRange {
            start: r,
            end: r + 1,
        }
    }

    pub fn len(self) -> u32 {
        self.end - self.start
    }

    pub fn is_empty(self) -> bool {
        self.end <= self.start
    }

    pub fn is_multi(self) -> bool {
        self.len() > 1
    }

    pub fn ranks(self) -> impl Iterator<Item = RankId> {
        (self.start..self.end).map(RankId)
    }
}

/// Chunks `index..index + count` of `buffer` on each rank of `ranks`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Loc {
    pub buffer: BufId,
    pub ranks: RankRange,
    pub index: u32,
}

/// One `copy` or `reduce` of `count` consecutive chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkOp {
    pub kind: OpKind,
    pub src: Loc,
    pub dst: Loc,
    pub count: u32,
    pub via: Option<Via>,
    pub protocol: Option<Protocol>,
    /// `u16::MAX` when not given.
    pub channel: u16,
    /// 0 when not given.
    pub pipeline: u16,
    /// The statement that produced it.
    pub span: Span,
}

/// One `expect` of a custom collective's `ensure` block: `dst` must end holding the
/// combination of the `input` chunks named by `srcs`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expect {
    pub dst: Loc,
    pub count: u32,
    pub srcs: Vec<Loc>,
    pub span: Span,
}

/// A buffer and its size in chunks per rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buffer {
    pub name: String,
    pub chunks: u64,
}

/// A program elaborated for one rank count and topology.
#[derive(Clone, Debug)]
pub struct Elaborated {
    pub kind: CollectiveKind,
    pub name: String,
    pub inplace: bool,
    /// Made out of place from an in-place program ([`placement`]).
    pub from_in_place: bool,
    pub n: u32,
    pub root: u32,
    /// The chunk factor `k` (`chunks` in the header).
    pub chunk_factor: u64,
    /// `input`, `output`, then scratch buffers, indexed by [`BufId`].
    pub buffers: Vec<Buffer>,
    pub ops: Vec<ChunkOp>,
    pub expects: Vec<Expect>,
    pub instances: u32,
    pub pipeline: u32,
    pub protocol: Protocol,
    pub channel: Option<u32>,
    pub topology: String,
    /// Span of the header's name, for errors about the whole program.
    pub header_span: Span,
    /// See [`Options::capture_op`].
    pub captured_context: Option<String>,
    /// Statements and loop iterations run ([`Options::step_limit`] bounds them).
    pub steps: u64,
}

/// Elaborates a checked module for the given machine.
pub fn elaborate(
    module: &Module,
    facts: &Facts,
    options: &Options,
) -> Result<Elaborated, Diagnostics<CompileError>> {
    elaborate_with(module, facts, options, None)
}

/// Takes the program's header (an [`Elaborated`] without ops) and its next
/// [`STREAM_BLOCK`] ops ([`elaborate_streaming`]).
pub type OpSink<'a> = dyn FnMut(&Elaborated, &[ChunkOp]) + 'a;

/// Ops [`elaborate_streaming`] hands over at a time: 3.4 MB at 52 bytes an op.
pub const STREAM_BLOCK: usize = 1 << 16;

/// [`elaborate`], handing `sink` each block of [`STREAM_BLOCK`] ops as soon as it is made,
/// so that the proof can run beside elaboration. The ops handed over are the result's first
/// ones, in order; nothing is handed over where they would not be (a program made out of
/// place, or one with an empty scratch buffer, whose ops are changed at the end), and the
/// ops after the last full block only come with the result.
pub fn elaborate_streaming(
    module: &Module,
    facts: &Facts,
    options: &Options,
    sink: &mut OpSink<'_>,
) -> Result<Elaborated, Diagnostics<CompileError>> {
    elaborate_with(module, facts, options, Some(sink))
}

fn elaborate_with(
    module: &Module,
    facts: &Facts,
    options: &Options,
    sink: Option<&mut OpSink<'_>>,
) -> Result<Elaborated, Diagnostics<CompileError>> {
    let fail = |d: Diagnostic<CompileError>| Diagnostics {
        file: module.file.clone(),
        list: vec![d],
    };
    let header = module
        .program
        .items
        .iter()
        .find_map(|i| match i {
            Item::Collective(h) => Some(h),
            _ => None,
        })
        .ok_or_else(|| {
            fail(Diagnostic::new(
                CompileError::Internal("no header".into()),
                module.program.span,
            ))
        })?;
    check_topology(header, facts).map_err(fail)?;
    let ir =
        resolve::resolve(&module.program).map_err(|(e, span)| fail(Diagnostic::new(e, span)))?;
    let summary = &module.summary;
    eval::run(
        &ir,
        eval::Setup {
            kind: summary.kind,
            name: summary.name.clone(),
            inplace: summary.inplace,
            facts,
            options,
            header_span: header.name.span,
        },
        sink.filter(|_| !options.out_of_place),
    )
    .map_err(fail)
    .and_then(|mut e| {
        if options.out_of_place {
            placement::make_out_of_place(&mut e).map_err(|d| fail(*d))?;
        }
        Ok(e)
    })
}

/// The header's `topology` and `needs` against the machine.
fn check_topology(
    header: &coll_lang::ast::Header,
    facts: &Facts,
) -> Result<(), Diagnostic<CompileError>> {
    for item in &header.items {
        match &item.kind {
            HeaderItemKind::Topology(names) => {
                let ok = names
                    .iter()
                    .any(|t| t.name == "any" || facts.families.contains(&t.name));
                if !ok {
                    let listed: Vec<&str> = names.iter().map(|t| t.name.as_str()).collect();
                    return Err(Diagnostic::new(
                        CompileError::UnsupportedTopology {
                            topology: facts.topology.clone(),
                        },
                        item.span,
                    )
                    .with_label(format!("supports {}", listed.join(", ")))
                    .with_note(format!(
                        "`{}` is {}",
                        facts.topology,
                        if facts.families.is_empty() {
                            "none of nvswitch, hgx, cluster, ring".to_string()
                        } else {
                            facts.families.join(", ")
                        }
                    )));
                }
            }
            HeaderItemKind::Needs(caps) => {
                for cap in caps {
                    let have = match cap.name.as_str() {
                        "switch" => facts.has_switch,
                        "net" => facts.has_net,
                        _ => true,
                    };
                    if !have {
                        return Err(Diagnostic::new(
                            CompileError::MissingCapability {
                                capability: cap.name.clone(),
                                topology: facts.topology.clone(),
                            },
                            cap.span,
                        )
                        .with_label("needed here"));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The defaults hold every shipped algorithm at 1024 ranks with room to spare: at most
    /// half the op limit and a third of the step limit (README "Limits" promises 1024).
    #[test]
    fn shipped_algorithms_at_1024_ranks_fit_the_default_limits() {
        let paths = crate::check::testing::shipped_algorithms();
        assert!(paths.len() >= 15, "{paths:?}");
        let n = 1024;
        let cluster =
            crate::topology::Topology::preset(&format!("cluster:{}x8", n / 8)).expect("a preset");
        let mut most = (0, 0);
        for path in paths {
            let text = std::fs::read(&path).expect("readable");
            let m = coll_lang::load_bytes("a.coll", text).expect("valid");
            let needs_net = m.file.text().contains("needs net");
            let facts = if needs_net {
                Facts::from_topology(&cluster)
            } else {
                Facts::nvswitch(n)
            };
            let e = elaborate(&m, &facts, &Options::default())
                .unwrap_or_else(|d| panic!("{}: {}", path.display(), d.render()));
            assert!(
                e.ops.len() <= DEFAULT_OP_LIMIT / 2 && e.steps <= DEFAULT_STEP_LIMIT / 3,
                "{}: {} ops, {} steps",
                path.display(),
                e.ops.len(),
                e.steps
            );
            most = (most.0.max(e.ops.len()), most.1.max(e.steps));
        }
        // Ring and all-pairs allreduce: 2 (n - 1) n operations; all-pairs steps the most.
        assert_eq!(most, (2 * 1023 * 1024, 5_273_600));
    }
}
