//! Dumps of a plan for people and tools: stable text ([`text()`]), the versioned JSON
//! ([`Plan::to_json`]), Graphviz ([`dot()`]) and an SVG timeline ([`svg()`]).
//!
//! Invariants of every dump:
//! - it is a pure function of its inputs: the same plan (and step function) gives the same
//!   bytes, so dumps can be snapshot-tested; nothing reads the clock, the environment or
//!   the file system, and source locations are printed exactly as the plan holds them;
//! - it never panics, whatever the plan: a plan that fails [`Plan::validate`] (dangling
//!   buffer index, unmatched send) still dumps, with the faulty part shown as such, since
//!   a dump is often what someone looks at to understand why a plan was rejected.
//!
//! [`transfers`] pairs sends with receives the way executors do (per connection, in order);
//! the DOT and SVG dumps and the cost model ([`crate::predict`]) all draw on it.

mod dot;
mod svg;
mod text;

#[cfg(test)]
pub(crate) mod fixture;

pub use dot::dot;
/// XML escaping shared by the SVG dump and the MSCCL-IR export.
pub(crate) use svg::escape as xml_escape;
pub use svg::{MAX_RANKS as SVG_MAX_RANKS, MAX_STEPS as SVG_MAX_STEPS, svg};
pub use text::text;

use crate::plan::{Block, Op, Plan, Slice, Via};
use std::collections::BTreeMap;
use std::fmt;

/// The dump formats `coll compile --emit` offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// [`text()`]: stable, aligned, for people and snapshots.
    Text,
    /// [`Plan::to_json`]: the versioned plan executors read.
    Json,
    /// [`dot()`]: Graphviz.
    Dot,
    /// [`svg()`]: a per-rank timeline picture.
    Svg,
}

impl Format {
    pub const ALL: [Format; 4] = [Format::Text, Format::Json, Format::Dot, Format::Svg];

    /// `text`, `json`, `dot`, `svg`: also the usual file extension.
    pub fn name(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Json => "json",
            Format::Dot => "dot",
            Format::Svg => "svg",
        }
    }

    /// The format of a name; `txt` is accepted for `text` so a file extension works too.
    pub fn from_name(s: &str) -> Option<Format> {
        match s {
            "txt" => Some(Format::Text),
            _ => Self::ALL.into_iter().find(|f| f.name() == s),
        }
    }

    /// The names, for usage messages: `text, json, dot, svg`.
    pub fn names() -> String {
        Self::ALL.map(Format::name).join(", ")
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Renders `plan` in `format`. `steps` gives the step of op `(rank, block, op)` for the SVG
/// timeline and is ignored by the other formats.
pub fn render(plan: &Plan, format: Format, steps: &dyn Fn(u32, u32, u32) -> Option<u32>) -> String {
    match format {
        Format::Text => text(plan),
        Format::Json => plan.to_json(),
        Format::Dot => dot(plan),
        Format::Svg => svg(plan, steps),
    }
}

/// An op of a plan: rank, block, index in the block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpRef {
    pub rank: u32,
    pub block: u32,
    pub op: u32,
}

impl fmt::Display for OpRef {
    /// `r2 b1:4`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{} b{}:{}", self.rank, self.block, self.op)
    }
}

/// One cross-rank data movement: the `k`-th sending op of a connection paired with its
/// `k`-th receiving op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transfer {
    pub from: OpRef,
    pub to: OpRef,
    pub channel: u32,
    /// How the connection goes: the sending block's `send_via`, else the receiving block's
    /// `recv_via` (lowering sets both alike; either may be missing in hand-written plans).
    pub via: Option<Via>,
    /// Plan chunks moved (the sending op's count).
    pub count: u32,
}

/// Every transfer of `plan`, ordered by sending op (and, for a block of several peers, by
/// its send peers in [`Block::send_peers`] order: one transfer per peer). Sends are paired
/// with receives per connection `(from, to, channel)` in block order, as [`Plan::validate`]
/// requires and as executors run them; a send or receive without a partner (an invalid plan)
/// is left out.
pub fn transfers(plan: &Plan) -> Vec<Transfer> {
    // (from, to, channel) -> the receiving block; the first one wins when a broken plan
    // has two, matching what validation reports.
    let mut receivers: BTreeMap<(u32, u32, u32), (u32, &Block)> = BTreeMap::new();
    for (r, gpu) in plan.gpus.iter().enumerate() {
        for (b, block) in gpu.blocks.iter().enumerate() {
            for p in block.recv_peers() {
                receivers
                    .entry((p, r as u32, block.channel))
                    .or_insert((b as u32, block));
            }
        }
    }
    let mut out = Vec::new();
    for (r, gpu) in plan.gpus.iter().enumerate() {
        for (b, block) in gpu.blocks.iter().enumerate() {
            // Per send peer: its receiving block and that block's receiving ops, in order.
            let peers: Vec<(u32, u32, &Block, Vec<u32>)> = block
                .send_peers()
                .filter_map(|q| {
                    let &(rb, rblock) = receivers.get(&(r as u32, q, block.channel))?;
                    let recvs = rblock
                        .ops
                        .iter()
                        .enumerate()
                        .filter(|(_, o)| o.kind.receives())
                        .map(|(i, _)| i as u32)
                        .collect();
                    Some((q, rb, rblock, recvs))
                })
                .collect();
            let sends = block.ops.iter().enumerate().filter(|(_, o)| o.kind.sends());
            for (k, (si, sop)) in sends.enumerate() {
                for (q, rb, rblock, recvs) in &peers {
                    let Some(&ri) = recvs.get(k) else { continue };
                    out.push(Transfer {
                        from: OpRef {
                            rank: r as u32,
                            block: b as u32,
                            op: si as u32,
                        },
                        to: OpRef {
                            rank: *q,
                            block: *rb,
                            op: ri,
                        },
                        channel: block.channel,
                        via: block.send_via.or(rblock.recv_via),
                        count: sop.count,
                    });
                }
            }
        }
    }
    out
}

/// A block's peers on one side as dumps show them: `1`, or `1, 2` for a block of several
/// peers (in the plan's order, which for receives is the order they combine in).
pub fn peer_list(peers: impl Iterator<Item = u32>) -> String {
    peers.map(|p| p.to_string()).collect::<Vec<_>>().join(", ")
}

/// Every op with its place, in rank, block, op order.
pub fn ops(plan: &Plan) -> impl Iterator<Item = (OpRef, &Block, &Op)> {
    plan.gpus.iter().enumerate().flat_map(|(r, gpu)| {
        gpu.blocks.iter().enumerate().flat_map(move |(b, block)| {
            block.ops.iter().enumerate().map(move |(i, op)| {
                (
                    OpRef {
                        rank: r as u32,
                        block: b as u32,
                        op: i as u32,
                    },
                    block,
                    op,
                )
            })
        })
    })
}

/// `input[12..14]`: `count` plan chunks of a buffer from the slice's offset. A buffer index
/// outside the plan prints as `buffer7`, so broken plans still dump.
pub fn slice_name(plan: &Plan, s: Slice, count: u32) -> String {
    let mut out = String::new();
    write_slice_name(plan, s, count, &mut out);
    out
}

/// [`slice_name`], appended to `out`.
pub(crate) fn write_slice_name(plan: &Plan, s: Slice, count: u32, out: &mut String) {
    use std::fmt::Write;
    let end = s.offset().saturating_add(u64::from(count));
    let _ = match plan.buffers.get(s.buffer() as usize) {
        Some(b) => write!(out, "{}[{}..{}]", b.name, s.offset(), end),
        None => write!(out, "buffer{}[{}..{}]", s.buffer(), s.offset(), end),
    };
}

/// The source location of an op as the plan holds it, or `source #k?` when out of range.
pub fn source_name(plan: &Plan, op: &Op) -> String {
    let mut out = String::new();
    write_source_name(plan, op, &mut out);
    out
}

/// [`source_name`], appended to `out`.
pub(crate) fn write_source_name(plan: &Plan, op: &Op, out: &mut String) {
    use std::fmt::Write;
    match plan.sources.get(op.source as usize) {
        Some(s) => out.push_str(s),
        None => {
            let _ = write!(out, "source #{}?", op.source);
        }
    }
}

/// How to colour an op: what it does, in five classes people tell apart at a glance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpClass {
    /// Only sends.
    Send,
    /// Only receives (stores what arrives).
    Recv,
    /// Receives and combines, sends nothing on (`rrc`).
    Reduce,
    /// Receives and sends on in one op (`rcs`, `rrs`, `rrcs`).
    Fused,
    /// Local copy or reduce, no peer.
    Local,
}

impl OpClass {
    pub const ALL: [OpClass; 5] = [
        OpClass::Send,
        OpClass::Recv,
        OpClass::Reduce,
        OpClass::Fused,
        OpClass::Local,
    ];

    pub fn of(kind: crate::plan::OpKind) -> OpClass {
        match (kind.receives(), kind.sends()) {
            (true, true) => OpClass::Fused,
            (false, true) => OpClass::Send,
            (true, false) if kind.reduces() => OpClass::Reduce,
            (true, false) => OpClass::Recv,
            (false, false) => OpClass::Local,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            OpClass::Send => "send",
            OpClass::Recv => "recv",
            OpClass::Reduce => "recv-reduce",
            OpClass::Fused => "fused",
            OpClass::Local => "local",
        }
    }

    /// Fill colour (a colour-blind-safe palette: Okabe-Ito).
    pub fn colour(self) -> &'static str {
        match self {
            OpClass::Send => "#56B4E9",
            OpClass::Recv => "#F0E442",
            OpClass::Reduce => "#E69F00",
            OpClass::Fused => "#CC79A7",
            OpClass::Local => "#BBBBBB",
        }
    }
}

/// Line colour of a transfer by channel kind; `None` (no via recorded) is grey.
pub fn via_colour(via: Option<Via>) -> &'static str {
    match via {
        Some(Via::Nvlink) => "#009E73",
        Some(Via::Switch) => "#0072B2",
        Some(Via::Pcie) => "#D55E00",
        Some(Via::Net) => "#B2182B",
        None => "#777777",
    }
}

/// The via kinds in legend order, with `None` last.
pub(crate) const VIAS: [Option<Via>; 5] = [
    Some(Via::Nvlink),
    Some(Via::Switch),
    Some(Via::Pcie),
    Some(Via::Net),
    None,
];

pub(crate) fn via_name(via: Option<Via>) -> &'static str {
    via.map_or("unknown", Via::name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_names_round_trip() {
        for f in Format::ALL {
            assert_eq!(Format::from_name(f.name()), Some(f));
        }
        assert_eq!(Format::from_name("txt"), Some(Format::Text));
        assert_eq!(Format::from_name("xml"), None);
        assert_eq!(Format::names(), "text, json, dot, svg");
    }

    #[test]
    fn transfers_pair_in_order_per_connection() {
        let plan = fixture::ring3();
        let t = transfers(&plan);
        let sends = ops(&plan).filter(|(_, _, o)| o.kind.sends()).count();
        assert_eq!(t.len(), sends);
        // Rank 0's first send lands in rank 1's first receive.
        assert_eq!(
            t[0].to,
            OpRef {
                rank: 1,
                block: 0,
                op: 1
            }
        );
        assert!(t.iter().all(|x| x.via == Some(Via::Switch)));
    }

    #[test]
    fn a_send_of_several_peers_is_a_transfer_to_each() {
        let plan = fixture::head_of_three();
        let t: Vec<(String, String)> = transfers(&plan)
            .iter()
            .map(|x| (x.from.to_string(), x.to.to_string()))
            .collect();
        let pairs = [
            ("r0 b0:0", "r1 b0:1"),
            ("r0 b0:0", "r2 b0:1"),
            ("r1 b0:0", "r0 b0:0"),
            ("r2 b0:0", "r0 b0:0"),
        ];
        assert_eq!(
            t,
            pairs.map(|(a, b)| (a.to_string(), b.to_string())).to_vec()
        );
        assert_eq!(peer_list(plan.gpus[0].blocks[0].recv_peers()), "1, 2");
    }

    #[test]
    fn broken_plans_still_name_things() {
        let mut plan = fixture::ring3();
        plan.buffers.truncate(1);
        assert_eq!(slice_name(&plan, Slice(1, 2), 3), "buffer1[2..5]");
        let mut op = plan.gpus[0].blocks[0].ops[0].clone();
        op.source = 99;
        assert_eq!(source_name(&plan, &op), "source #99?");
    }
}
