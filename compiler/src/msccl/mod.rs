//! MSCCL-IR XML: [`import`] turns an algorithm written for MSCCL's runtime into a [`Plan`]
//! (which the caller then validates, replays symbolically and checks for deadlock like any
//! plan), and [`export`] writes a plan as XML that MSCCL's runtime loads.
//!
//! The format, as MSCCL's runtime reads it (microsoft/msccl `src/graph/topo.cc` and its
//! successor Azure/msccl-executor-nccl `src/misc/msccl/msccl_parser.cc`, with the interpreter
//! in `msccl_interpreter.h` / `src/device/msccl_kernel.cu`):
//!
//! ```xml
//! <algo name proto nchannels nchunksperloop ngpus coll inplace [outofplace minBytes maxBytes]>
//!   <gpu id i_chunks o_chunks s_chunks>
//!     <tb id send recv chan>
//!       <step s type srcbuf srcoff dstbuf dstoff cnt depid deps hasdep/>
//! ```
//!
//! How each part maps to the plan:
//! - `<gpu id>` is rank `id`; `<tb id>` is block `id` (ids `0..m` without gaps, in any
//!   order); `send`/`recv` are the block's peers (`-1`: none); `chan` its channel.
//! - A `<step>` of type `s r rcs rrs rrc rrcs cpy re` is an op of the same name. Offsets
//!   and `cnt` are in MSCCL chunks; which of `srcbuf/srcoff` and `dstbuf/dstoff` an op reads
//!   and writes is what the runtime's interpreter does with them: `s` and `rrs` read src,
//!   `r` and `rcs` write dst, `rrc`, `rrcs`, `cpy` and `re` read src and write dst (`re`:
//!   dst = dst (+) src). The unused side is ignored (MSCCLang writes the peer's location
//!   there). Buffers `i`, `o`, `s` are the plan's buffers 0 (input), 1 (output) and 2
//!   (`scratch`).
//! - Chunks: the runtime cuts `count × m` elements into `nchunksperloop` chunks, where `m`
//!   is the rank count for allgather, reducescatter and alltoall and 1 otherwise (`count`
//!   being NCCL's count). A plan's slice of `count` elements holds `chunk_factor` chunks, so
//!   `chunk_factor = nchunksperloop / m`, and the buffers hold what the collective needs
//!   (allgather: input `k`, output `n·k`; reducescatter the reverse; alltoall `n·k` each;
//!   the others `k` each; custom: the largest `i_chunks`/`o_chunks`). A gpu's `i_chunks`
//!   and `o_chunks` must be 0 (unused, as MSCCLang writes for the aliased buffer of an
//!   in-place algorithm) or exactly that size; `s_chunks` sizes its scratch (the plan's
//!   scratch buffer is the largest).
//! - In place: `inplace="1"` aliases input and output as MSCCL does ([`crate::layout`]):
//!   allgather's `i` is the rank's slice of `o` (`i[c]` is `o[rank·k + c]`),
//!   reducescatter's `o` the rank's slice of `i`, the others share one buffer. An algorithm
//!   marked both `inplace="1"` and `outofplace="1"` must work both ways: [`import_all`]
//!   gives both readings.
//! - Dependencies: a step waits for `depid`/`deps` (thread block, step; `-1`: none). A
//!   `nop` step adds its dependency to the next real step of its block, which must then
//!   have a dependency of its own (the runtime refuses the XML otherwise), and is folded
//!   away. The runtime implements a wait for step `S` of block `T` as "until `T`'s flag
//!   reaches `S`", and a block raises its flag only after steps with `hasdep="1"`; so a
//!   dependency resolves to the first step of `T` at or after `S` that has `hasdep="1"`
//!   (normally `S` itself). A wait on the waiting block's own earlier step is implied by
//!   program order and dropped.
//! - Steps are numbered by position: `s` must be 0, 1, 2, ... in each block, since the
//!   runtime counts positions and dependencies name them.
//! - The runtime's load-time limits are errors here too (an XML it refuses is silently
//!   replaced by NCCL's own algorithm at run time): `cnt` below [`MAX_COUNT`], at most
//!   [`MAX_STEPS`] steps per block, channels below [`MAX_CHANNELS`], offsets in 16 bits.
//! - `proto` is `Simple`, `LL` or `LL128` (imported as `simple`: coll has no LL128 yet).
//!   `minBytes`/`maxBytes`/`nthreads` do not change what the algorithm computes and are
//!   ignored. Connections go through an NVSwitch: the plan's topology is `nvswitch:N`, until
//!   [`on_topology`] puts the plan on another topology and takes each connection's kind from it
//!   (one kind per block side: the routes to every peer of a block of several must agree).
//!
//! Every op's source is `file:line:col: gpu G tb T step S`, so validation, replay and
//! deadlock messages name the step in the XML. Errors in the XML itself name the element,
//! the attribute and `line:col`; nothing in the input can make the import panic.
//!
//! [`export`] writes the inverse: one `<tb>` per block (a block has one channel, and at most
//! one send peer and one receive peer: a block of several peers, [`Plan`]'s `send_also` or
//! `recv_also`, has no MSCCL-IR form and is an [`MscclError::Export`] naming it), one
//! `<step>` per op with its first dependency in
//! `depid`/`deps` and each further one in a `nop` step just before it, `hasdep="1"` on
//! every step another waits for, scratch buffers laid end to end in `s`, and
//! `minBytes="0" maxBytes="0"` (no size limit in msccl-executor-nccl).

use crate::elaborate::Protocol;
use crate::ids::RankId;
use crate::plan::{
    self, Block, BufferDecl, Collective, Dep, Op, OpKind, PLAN_VERSION, Plan, PlanError, RankPlan,
    Slice, ValidPlan, Via,
};
use crate::topology::Topology;
use coll_lang::builtins::CollectiveKind;
use roxmltree::{Document, Node};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

mod export;
pub use export::export;
mod read;
use read::Reader;

/// Steps per thread block MSCCL's runtime holds (`MSCCL_MAX_NUM_STEPS`).
pub const MAX_STEPS: usize = 256;
/// A step's `cnt` must be below this (`MSCCL_MAX_COUNT`).
pub const MAX_COUNT: u64 = 72;
/// Channels (`MAXCHANNELS`); `chan` must be below it.
pub const MAX_CHANNELS: u64 = 32;
/// Offsets are `int16_t` in the runtime.
pub const MAX_OFFSET: u64 = i16::MAX as u64;
/// Dependencies name thread blocks as `int8_t`.
pub const MAX_DEP_BLOCK: u64 = i8::MAX as u64;
/// Consecutive `re` steps the runtime fuses into one (`MSCCL_MAX_REDUCE_FUSION`).
pub const MAX_REDUCE_FUSION: usize = 16;

/// Attributes one element may have (MSCCL's have at most 12). The XML parser compares each
/// attribute with every earlier one of its element, so an element with `n` attributes costs
/// `n²` comparisons: 200 000 of them took minutes. More than this is refused first.
pub const MAX_ATTRIBUTES: usize = 64;

/// Why an XML file cannot be imported or a plan exported.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MscclError {
    /// The text is not well-formed XML.
    #[error("{file}:{line}:{col}: not well-formed XML: {message}")]
    Syntax {
        file: String,
        line: u32,
        col: u32,
        message: String,
    },
    /// An element or attribute is missing or wrong.
    #[error("{file}:{line}:{col}: {element}{}: {what}", attribute.as_ref().map(|a| format!(", attribute `{a}`")).unwrap_or_default())]
    Invalid {
        file: String,
        line: u32,
        col: u32,
        /// `<algo>`, `gpu 1`, `gpu 1 tb 0`, `gpu 1 tb 0 step 3`.
        element: String,
        attribute: Option<String>,
        what: String,
    },
    /// The imported plan fails [`Plan::validate`] (the message names the step through the
    /// op's source), or the plan to export does.
    #[error("{0}")]
    Plan(PlanError),
    /// An imported plan does not fit the topology it is to run on ([`on_topology`]).
    #[error("{0}")]
    Topology(String),
    /// The plan cannot be written in a form MSCCL's runtime accepts.
    #[error("cannot write as MSCCL-IR: {at}: {what}")]
    Export { at: String, what: String },
}

/// Imports MSCCL-IR XML as a validated plan. `name` (the file name) prefixes messages and
/// op sources. For an algorithm marked both in place and out of place this is the
/// out-of-place reading; [`import_all`] gives both.
pub fn import(xml: &str, name: &str) -> Result<ValidPlan, MscclError> {
    let mut plans = import_all(xml, name)?;
    Ok(plans.remove(0))
}

/// Every placement the XML declares, out of place first: one plan, or two when it says
/// both `inplace="1"` and `outofplace="1"`. Each is validated.
pub fn import_all(xml: &str, name: &str) -> Result<Vec<ValidPlan>, MscclError> {
    bound_attributes(xml, name)?;
    let doc = Document::parse(xml).map_err(|e| {
        let p = e.pos();
        let full = e.to_string();
        let suffix = format!(" at {}:{}", p.row, p.col);
        MscclError::Syntax {
            file: name.to_string(),
            line: p.row,
            col: p.col,
            message: full.strip_suffix(&suffix).unwrap_or(&full).to_string(),
        }
    })?;
    let r = Reader {
        doc: &doc,
        file: name,
    };
    let (plan, both) = r.algo()?;
    plan.validate().map_err(MscclError::Plan)?;
    let other = both.then(|| Plan {
        inplace: true,
        ..plan.clone()
    });
    // Validated just above; the in-place reading differs only in `inplace`, which validation
    // does not look at.
    Ok(std::iter::once(plan)
        .chain(other)
        .map(ValidPlan::validated)
        .collect())
}

/// `plan`, imported MSCCL-IR, on `topo`: each connection's kind ([`crate::plan::Via`]) is the
/// topology's route between its two ranks, as MSCCL's runtime picks a transport from the
/// machine, and the plan names the topology. MSCCL-IR says nothing of transports, so the
/// import alone marks every connection as through an NVSwitch (its default `nvswitch:n`);
/// a plan run or costed on another topology (a cluster, whose nodes meet over the network)
/// needs this. An error when the topology has too few ranks, no route between two ranks
/// that a block connects, or routes of different kinds to (or from) the peers of a block of
/// several peers, which has one `send_via` and one `recv_via`.
pub fn on_topology(plan: ValidPlan, topo: &Topology) -> Result<ValidPlan, MscclError> {
    let mut plan = plan.into_inner();
    if (plan.ranks as usize) > topo.num_ranks() {
        return Err(MscclError::Topology(format!(
            "{} has {} ranks, the plan {}",
            topo.name(),
            topo.num_ranks(),
            plan.ranks
        )));
    }
    let route = |from: u32, to: u32| {
        topo.route(RankId(from), RankId(to))
            .map(|r| Via::from(r.kind))
            .ok_or_else(|| {
                MscclError::Topology(format!(
                    "{} has no route from rank {from} to rank {to}",
                    topo.name()
                ))
            })
    };
    // A block has one `send_via` and one `recv_via` for all its peers, so the routes to (or
    // from) every peer of a block of several must be of one kind.
    let one_kind = |rank: u32, block: u32, role: &str, routes: &[(u32, Via)]| {
        let Some(&(first, via)) = routes.first() else {
            return Ok(None);
        };
        match routes.iter().find(|&&(_, v)| v != via) {
            None => Ok(Some(via)),
            Some(&(other, v)) => Err(MscclError::Topology(format!(
                "rank {rank}, block {block} {role} ranks {first} and {other}, but on {} the \
                 first route is {via} and the second {v}: a block's peers share one route kind",
                topo.name()
            ))),
        }
    };
    for g in &mut plan.gpus {
        let r = g.rank;
        for b in &mut g.blocks {
            let sends = b
                .send_peers()
                .map(|q| Ok((q, route(r, q)?)))
                .collect::<Result<Vec<_>, MscclError>>()?;
            let recvs = b
                .recv_peers()
                .map(|p| Ok((p, route(p, r)?)))
                .collect::<Result<Vec<_>, MscclError>>()?;
            if let Some(via) = one_kind(r, b.id, "sends to", &sends)? {
                b.send_via = Some(via);
            }
            if let Some(via) = one_kind(r, b.id, "receives from", &recvs)? {
                b.recv_via = Some(via);
            }
        }
    }
    plan.topology = topo.name().to_string();
    // Validation does not look at connection kinds or the topology's name.
    Ok(ValidPlan::validated(plan))
}

/// Refuses an element with more than [`MAX_ATTRIBUTES`] attributes, in one linear pass
/// before the parser sees it. Every attribute has an `=` outside quotes in its tag, so the
/// `=` signs of a tag bound its attributes; comments and CDATA are skipped, declarations
/// (`<!DOCTYPE`, `<?xml`) are not counted.
fn bound_attributes(xml: &str, name: &str) -> Result<(), MscclError> {
    let b = xml.as_bytes();
    let mut i = 0;
    while let Some(p) = xml.get(i..).and_then(|rest| rest.find('<')) {
        let start = i + p;
        let rest = &xml[start..];
        let skip_to = |end: &str| rest.find(end).map_or(xml.len(), |e| start + e + end.len());
        if rest.starts_with("<!--") {
            i = skip_to("-->");
            continue;
        }
        if rest.starts_with("<![CDATA[") {
            i = skip_to("]]>");
            continue;
        }
        let (mut quote, mut eqs, mut j) = (None, 0usize, start + 1);
        while let Some(&c) = b.get(j) {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, b'"' | b'\'') => quote = Some(c),
                (None, b'=') => eqs += 1,
                (None, b'>') => break,
                _ => {}
            }
            j += 1;
        }
        if eqs > MAX_ATTRIBUTES && !rest.starts_with("<!") && !rest.starts_with("<?") {
            let element: String = rest[1..]
                .chars()
                .take_while(|c| !c.is_whitespace() && *c != '>' && *c != '/')
                .take(64)
                .collect();
            let before = &xml[..start];
            let line = before.matches('\n').count() + 1;
            let col = before[before.rfind('\n').map_or(0, |n| n + 1)..]
                .chars()
                .count()
                + 1;
            return Err(MscclError::Invalid {
                file: name.to_string(),
                line: u32::try_from(line).unwrap_or(u32::MAX),
                col: u32::try_from(col).unwrap_or(u32::MAX),
                element: format!("<{element}>"),
                attribute: None,
                what: format!("has more than {MAX_ATTRIBUTES} attributes"),
            });
        }
        i = j + 1;
    }
    Ok(())
}

/// The collective's name in MSCCL-IR, as msccl-executor-nccl reads it (`reduce_scatter`,
/// msccl-tools' spelling, is accepted on import too).
fn collective_name(kind: CollectiveKind) -> Option<&'static str> {
    (kind != CollectiveKind::SendRecv).then(|| kind.name())
}

fn collective_from_name(s: &str) -> Option<CollectiveKind> {
    Some(match s {
        "allreduce" => CollectiveKind::AllReduce,
        "allgather" => CollectiveKind::AllGather,
        "reducescatter" | "reduce_scatter" => CollectiveKind::ReduceScatter,
        "alltoall" => CollectiveKind::AllToAll,
        "broadcast" => CollectiveKind::Broadcast,
        "reduce" => CollectiveKind::Reduce,
        "custom" => CollectiveKind::Custom,
        _ => return None,
    })
}

/// The runtime's `sizeMultiplier`: NCCL's count times this is the element count the
/// `nchunksperloop` chunks cover.
pub fn size_multiplier(kind: CollectiveKind, n: u64) -> u64 {
    match kind {
        CollectiveKind::AllGather | CollectiveKind::ReduceScatter | CollectiveKind::AllToAll => n,
        _ => 1,
    }
}

/// Input and output chunks of a rank for chunk factor `k` (`None` for custom collectives,
/// whose sizes the XML gives).
fn buffer_sizes(kind: CollectiveKind, n: u64, k: u64) -> Option<(u64, u64)> {
    Some(match kind {
        CollectiveKind::AllGather => (k, n * k),
        CollectiveKind::ReduceScatter => (n * k, k),
        CollectiveKind::AllToAll => (n * k, n * k),
        CollectiveKind::Custom => return None,
        _ => (k, k),
    })
}

/// `1 step`, `3 steps`.
fn count(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// tests/inputs/plans/ok_head_several_peers_3.json: rank 0's one block receives from and
    /// sends to ranks 1 and 2.
    fn head_of_three() -> ValidPlan {
        let path = format!(
            "{}/../tests/inputs/plans/ok_head_several_peers_3.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        ValidPlan::from_json(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn a_block_of_several_peers_is_not_exported() {
        let e = export(&head_of_three()).expect_err("several peers");
        assert!(matches!(e, MscclError::Export { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "cannot write as MSCCL-IR: rank 0, block 0: has send peers 1, 2 and recv peers 1, \
             2: an MSCCL-IR thread block has at most one of each, so a block of several peers \
             cannot be written"
        );
        // One side of several peers is enough to refuse.
        let mut plan = head_of_three().into_inner();
        plan.gpus[0].blocks[0].send_also.clear();
        plan.gpus[2].blocks[0].ops.truncate(1);
        let e = export(&plan).expect_err("several recv peers");
        assert!(
            e.to_string()
                .contains("has send peers 1 and recv peers 1, 2: an MSCCL-IR thread block"),
            "{e}"
        );
    }

    #[test]
    fn the_routes_of_a_block_of_several_peers_are_of_one_kind() {
        let topo = Topology::parse("nvswitch:3").unwrap_or_else(|e| panic!("{e}"));
        let on = on_topology(head_of_three(), &topo).unwrap_or_else(|e| panic!("{e}"));
        let head = &on.gpus[0].blocks[0];
        assert_eq!(
            (head.send_via, head.recv_via),
            (Some(Via::Switch), Some(Via::Switch))
        );
        // On two nodes of two GPUs rank 1 is on rank 0's node and rank 2 is not.
        let topo = Topology::parse("cluster:2x2").unwrap_or_else(|e| panic!("{e}"));
        let e = on_topology(head_of_three(), &topo).expect_err("mixed routes");
        assert!(matches!(e, MscclError::Topology(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            "rank 0, block 0 sends to ranks 1 and 2, but on cluster:2x2 the first route is \
             switch and the second net: a block's peers share one route kind"
        );
    }
}
