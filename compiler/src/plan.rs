//! The plan: the contract between the compiler and every executor, written as versioned JSON.
//!
//! A plan is size-independent: buffers, offsets and counts are in *plan chunks*, and an
//! executor resolves them for any element count with [`Plan::elements`]: a buffer is a row
//! of *slices* of [`Plan::chunk_factor`] chunks each, a slice holds `count` elements (NCCL's
//! count: elements per rank for allreduce, broadcast and reduce, per rank's contribution for
//! allgather and reducescatter, per peer for alltoall), and the chunks of a slice differ in
//! size by at most one element; a plan whose moves join chunks of different sizes runs
//! padded at the counts where they differ ([`sizes`] says when and how). dtype, reduction and
//! root are given at run time. Per rank, the plan holds thread blocks ([`Block`]); a block
//! runs its ops in order; an op may also wait for ops of other blocks of the same rank
//! ([`Op::deps`]). Cross-rank data moves over *connections*: sends of block `b` on rank `r`
//! with `send_peer = q` and channel `c` are received, in the same order and with the same
//! counts, by the one block of rank `q` with `recv_peer = r` and channel `c`. A block may
//! have several peers on a side ([`Block::send_also`], [`Block::recv_also`]): each of its
//! sends then goes out on every one of its send connections, and each of its receives takes
//! one message from every one of its receive connections and combines them.
//!
//! Invariants checked by [`Plan::validate`], once, where a plan enters ([`ValidPlan`]): the
//! version is [`PLAN_VERSION`]; ranks are `0..ranks` in order; buffer indices, offsets and
//! counts are inside the buffers; peers are other ranks in range; an op that sends needs a
//! block with a send peer, one that receives a block with a recv peer; the further peers of
//! a block are distinct other ranks, given only beside a first one, and a block with several
//! receive peers receives only by reducing kinds; every connection has at most one block per side and its sends and receives pair up one to one with equal
//! counts; deps name existing ops of other blocks of the same rank; source indices are in
//! range; a schedule note has exactly one chosen candidate; [`Plan::chunk_factor`] and the chunks of all buffers over all ranks are at most
//! [`MAX_PLAN_CELLS`], checked first, so that no executor sizes anything from an unchecked
//! count.

pub mod sizes;
mod validate;

pub use sizes::{chunk_range, chunk_start};

use crate::elaborate::Protocol;
use coll_lang::builtins::CollectiveKind;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Plan chunks of all buffers over all ranks (and [`Plan::chunk_factor`]), at most: replay,
/// the checks and the CPU executor keep state per chunk of every rank, so a plan (JSON or
/// imported MSCCL-IR) claiming more is refused before anything of that size is allocated.
/// 2^27 is four times what elaboration accepts by default
/// ([`crate::elaborate::DEFAULT_CELL_LIMIT`]), leaving room for pipelining.
pub const MAX_PLAN_CELLS: u64 = 1 << 27;

/// The format version this build reads and writes.
pub const PLAN_VERSION: u32 = 1;

/// A compiled schedule for every rank.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    pub version: u32,
    /// The algorithm's name in its header.
    pub name: String,
    pub collective: Collective,
    pub inplace: bool,
    pub ranks: u32,
    /// The topology it was lowered for (a preset spec or a file name).
    pub topology: String,
    /// Default protocol; blocks may override it.
    pub protocol: Protocol,
    /// Plan chunks per slice (see the module docs).
    pub chunk_factor: u64,
    /// Per-rank buffers in plan chunks: `input`, `output`, then scratch buffers.
    pub buffers: Vec<BufferDecl>,
    /// Source locations ops point at: `file:line:col`, or `gpu/tb/step` for imported XML.
    pub sources: Vec<String>,
    pub gpus: Vec<RankPlan>,
    /// What the compiler's scheduler did (chosen candidate, every candidate, notes);
    /// absent in plans from other sources and older builds, which load unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<crate::lower::ScheduleNote>,
}

/// The collective, serialised by name (`"allreduce"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Collective(pub CollectiveKind);

impl Serialize for Collective {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.name())
    }
}

impl<'de> Deserialize<'de> for Collective {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        CollectiveKind::from_name(&s)
            .map(Collective)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown collective `{s}`")))
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BufferDecl {
    pub name: String,
    /// Plan chunks per rank.
    pub chunks: u64,
}

/// One rank's blocks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RankPlan {
    pub rank: u32,
    pub blocks: Vec<Block>,
}

/// How a connection reaches its peer, from the topology's route.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    /// A direct NVLink between the two GPUs.
    Nvlink,
    /// Through an NVSwitch (peer memory), or a switch group for `via switch` transfers.
    Switch,
    /// Over PCIe (host bridge or PCIe switch).
    Pcie,
    /// Across the network through NICs.
    Net,
}

impl From<crate::topology::RouteKind> for Via {
    /// The connection kind of a topology route.
    fn from(kind: crate::topology::RouteKind) -> Via {
        match kind {
            crate::topology::RouteKind::Direct => Via::Nvlink,
            crate::topology::RouteKind::Switch => Via::Switch,
            crate::topology::RouteKind::Pcie => Via::Pcie,
            crate::topology::RouteKind::Net => Via::Net,
        }
    }
}

impl Via {
    pub fn name(self) -> &'static str {
        match self {
            Via::Nvlink => "nvlink",
            Via::Switch => "switch",
            Via::Pcie => "pcie",
            Via::Net => "net",
        }
    }
}

/// A thread block: one CTA of the interpreter kernel, running its ops in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Block {
    pub id: u32,
    pub channel: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_peer: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recv_peer: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_via: Option<Via>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recv_via: Option<Via>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<Protocol>,
    /// A block of several peers (as an MSCCL++ thread block serving several channels): every
    /// send of the block goes to `send_peer` and to each of these as well, the same message
    /// on each connection. Empty unless `send_peer` is set; `send_via` is the route to all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub send_also: Vec<u32>,
    /// Every receive of the block takes one message from `recv_peer` and one from each of
    /// these, and combines them in that order: `src (+) m(recv_peer) (+) m(recv_also[0]) ...`
    /// (so only the reducing receives may have several peers). Empty unless `recv_peer` is
    /// set; `recv_via` is the route from all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recv_also: Vec<u32>,
    pub ops: Vec<Op>,
}

impl RankPlan {
    /// How many peers each of the rank's receiving blocks takes messages from, in block
    /// order: `[n - 1]` for a rank whose receives are one op of every other rank.
    pub fn receive_fan_in(&self) -> Vec<usize> {
        self.blocks
            .iter()
            .filter(|b| b.recv_peer.is_some())
            .map(|b| b.recv_peers().count())
            .collect()
    }
}

impl Block {
    /// Every peer the block's sends go to: `send_peer`, then `send_also`.
    pub fn send_peers(&self) -> impl Iterator<Item = u32> + '_ {
        self.send_peer
            .into_iter()
            .chain(self.send_also.iter().copied())
    }

    /// Every peer the block's receives take a message from, in the order they combine.
    pub fn recv_peers(&self) -> impl Iterator<Item = u32> + '_ {
        self.recv_peer
            .into_iter()
            .chain(self.recv_also.iter().copied())
    }

    /// Whether the block has more than one peer on either side.
    pub fn several_peers(&self) -> bool {
        !self.send_also.is_empty() || !self.recv_also.is_empty()
    }
}

/// A block without its ops, as [`Plan::write_json`] writes it: the fields of [`Block`] in
/// the order of their names, which is how the JSON of a plan has always listed them.
#[derive(Serialize)]
struct BlockHead {
    channel: u32,
    id: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    protocol: Option<Protocol>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    recv_also: Vec<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    recv_peer: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    recv_via: Option<Via>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    send_also: Vec<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    send_peer: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    send_via: Option<Via>,
}

impl BlockHead {
    fn of(b: &Block) -> BlockHead {
        BlockHead {
            channel: b.channel,
            id: b.id,
            protocol: b.protocol,
            recv_also: b.recv_also.clone(),
            recv_peer: b.recv_peer,
            recv_via: b.recv_via,
            send_also: b.send_also.clone(),
            send_peer: b.send_peer,
            send_via: b.send_via,
        }
    }
}

/// What an op does. Names follow MSCCL-IR.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OpKind {
    /// Send `src` to the send peer.
    #[serde(rename = "s")]
    Send,
    /// Receive into `dst`.
    #[serde(rename = "r")]
    Recv,
    /// Receive, combine with `src`, store in `dst`.
    #[serde(rename = "rrc")]
    RecvReduceCopy,
    /// Receive into `dst` and send the same data on.
    #[serde(rename = "rcs")]
    RecvCopySend,
    /// Receive, combine with `src`, send the result on (nothing stored).
    #[serde(rename = "rrs")]
    RecvReduceSend,
    /// Receive, combine with `src`, store in `dst` and send the result on.
    #[serde(rename = "rrcs")]
    RecvReduceCopySend,
    /// Local copy `src` -> `dst`.
    #[serde(rename = "cpy")]
    Copy,
    /// Local `dst = dst (+) src`.
    #[serde(rename = "re")]
    Reduce,
    /// Send `src` to the send peer and copy it to `dst` (the lowering fuses a copy into an
    /// earlier send of the same chunks; MSCCL-IR has no such op, so the export splits it).
    #[serde(rename = "cs")]
    CopySend,
}

impl OpKind {
    pub const ALL: [OpKind; 9] = [
        OpKind::Send,
        OpKind::Recv,
        OpKind::RecvReduceCopy,
        OpKind::RecvCopySend,
        OpKind::RecvReduceSend,
        OpKind::RecvReduceCopySend,
        OpKind::Copy,
        OpKind::Reduce,
        OpKind::CopySend,
    ];

    pub fn name(self) -> &'static str {
        match self {
            OpKind::Send => "s",
            OpKind::Recv => "r",
            OpKind::RecvReduceCopy => "rrc",
            OpKind::RecvCopySend => "rcs",
            OpKind::RecvReduceSend => "rrs",
            OpKind::RecvReduceCopySend => "rrcs",
            OpKind::Copy => "cpy",
            OpKind::Reduce => "re",
            OpKind::CopySend => "cs",
        }
    }

    pub fn from_name(s: &str) -> Option<OpKind> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }

    /// Human name for dumps and messages.
    pub fn long_name(self) -> &'static str {
        match self {
            OpKind::Send => "send",
            OpKind::Recv => "recv",
            OpKind::RecvReduceCopy => "recv-reduce",
            OpKind::RecvCopySend => "recv-copy-send",
            OpKind::RecvReduceSend => "recv-reduce-send",
            OpKind::RecvReduceCopySend => "recv-reduce-copy-send",
            OpKind::Copy => "copy",
            OpKind::Reduce => "reduce",
            OpKind::CopySend => "copy-send",
        }
    }

    pub fn sends(self) -> bool {
        matches!(
            self,
            OpKind::Send
                | OpKind::CopySend
                | OpKind::RecvCopySend
                | OpKind::RecvReduceSend
                | OpKind::RecvReduceCopySend
        )
    }

    pub fn receives(self) -> bool {
        matches!(
            self,
            OpKind::Recv
                | OpKind::RecvReduceCopy
                | OpKind::RecvCopySend
                | OpKind::RecvReduceSend
                | OpKind::RecvReduceCopySend
        )
    }

    /// Whether `src` is read.
    pub fn needs_src(self) -> bool {
        matches!(
            self,
            OpKind::Send
                | OpKind::RecvReduceCopy
                | OpKind::RecvReduceSend
                | OpKind::RecvReduceCopySend
                | OpKind::Copy
                | OpKind::Reduce
                | OpKind::CopySend
        )
    }

    /// Whether `dst` is written.
    pub fn needs_dst(self) -> bool {
        !matches!(self, OpKind::Send | OpKind::RecvReduceSend)
    }

    /// Whether the op combines data (needs a reduction operator).
    pub fn reduces(self) -> bool {
        matches!(
            self,
            OpKind::RecvReduceCopy
                | OpKind::RecvReduceSend
                | OpKind::RecvReduceCopySend
                | OpKind::Reduce
        )
    }
}

/// `count` plan chunks of a buffer from `offset`: serialised `[buffer, offset]`.
///
/// Packed to 4-byte alignment: 12 bytes, 16 as an `Option` (24 unpacked), 16 bytes less
/// in every [`Op`] (a plan of 2 million ops: 34 MB). Its fields are read by
/// value (`s.1`, `let Slice(b, o) = s`); a reference to the offset is not allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(C, packed(4))]
pub struct Slice(pub u32, pub u64);

// The sizes the docs of [`Slice`] and [`Op::deps`] state.
const _: () = assert!(std::mem::size_of::<Option<Slice>>() == 16);
const _: () = assert!(std::mem::size_of::<Op>() == 72);

impl Slice {
    pub fn buffer(self) -> u32 {
        self.0
    }

    pub fn offset(self) -> u64 {
        self.1
    }
}

/// A dependency on op `op` of block `block` of the same rank: serialised `[block, op]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Dep(pub u32, pub u32);

impl Dep {
    pub fn block(self) -> u32 {
        self.0
    }

    pub fn op(self) -> u32 {
        self.1
    }
}

/// One instruction of a block.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Op {
    #[serde(rename = "op")]
    pub kind: OpKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src: Option<Slice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst: Option<Slice>,
    /// Plan chunks moved.
    #[serde(rename = "n")]
    pub count: u32,
    /// Ops of other blocks of this rank that must finish first. A boxed slice rather than
    /// a `Vec`: 16 bytes instead of 24 in every op, most of which have none (with the packed
    /// [`Slice`], an op is 72 bytes instead of 96).
    #[serde(default, skip_serializing_if = "no_deps")]
    pub deps: Box<[Dep]>,
    /// Index into [`Plan::sources`].
    #[serde(rename = "at")]
    pub source: u32,
    /// Ops lowered from one switch-group transfer share a group id, so an executor may run
    /// them as one multicast/load-reduce.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<u32>,
}

/// Whether an op waits for no other op (its `deps` are left out of the JSON).
fn no_deps(deps: &[Dep]) -> bool {
    deps.is_empty()
}

/// A problem found when loading or validating a plan; each names where it is.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("plan is not valid JSON for format version {PLAN_VERSION}: {0}")]
    Json(String),
    #[error(
        "plan format version {found} is not supported (this build reads version {PLAN_VERSION})"
    )]
    Version { found: u32 },
    #[error("{at}: {what}")]
    Invalid { at: String, what: String },
    #[error("{at}: {what} has no matching {missing} on rank {peer}")]
    Unmatched {
        at: String,
        what: String,
        missing: String,
        peer: u32,
    },
}

/// Where in a plan something is: `rank 3, block 1, op 7 (ring.coll:12:9)`.
pub fn location(plan: &Plan, rank: u32, block: u32, op: Option<u32>) -> String {
    let mut s = format!("rank {rank}, block {block}");
    if let Some(i) = op {
        s.push_str(&format!(", op {i}"));
        let src = plan
            .gpus
            .get(rank as usize)
            .and_then(|g| g.blocks.get(block as usize))
            .and_then(|b| b.ops.get(i as usize))
            .and_then(|o| plan.sources.get(o.source as usize));
        if let Some(src) = src {
            s.push_str(&format!(" ({src})"));
        }
    }
    s
}

impl Plan {
    /// The same schedule with every [`OpKind::CopySend`] written as a send followed by a
    /// copy in its block (for formats without the fused op); deps on a split op wait for
    /// both parts.
    pub fn with_copy_sends_split(&self) -> Plan {
        let mut plan = self.clone();
        for rank in &mut plan.gpus {
            // Per block, the new index of each old op (its last part).
            let mut moved: Vec<Vec<u32>> = Vec::with_capacity(rank.blocks.len());
            for block in &mut rank.blocks {
                let mut ops = Vec::with_capacity(block.ops.len());
                let mut at = Vec::with_capacity(block.ops.len());
                for op in block.ops.drain(..) {
                    if op.kind == OpKind::CopySend {
                        ops.push(Op {
                            kind: OpKind::Send,
                            dst: None,
                            ..op.clone()
                        });
                        ops.push(Op {
                            kind: OpKind::Copy,
                            deps: Box::default(),
                            ..op
                        });
                    } else {
                        ops.push(op);
                    }
                    at.push(ops.len() as u32 - 1);
                }
                block.ops = ops;
                moved.push(at);
            }
            for block in &mut rank.blocks {
                for op in &mut block.ops {
                    for d in &mut op.deps {
                        if let Some(&o) = moved.get(d.0 as usize).and_then(|m| m.get(d.1 as usize))
                        {
                            d.1 = o;
                        }
                    }
                }
            }
        }
        plan
    }

    /// Parses a JSON plan without validating it: [`ValidPlan::from_json`] is the way in for
    /// a plan that will run.
    fn parse_json(text: &str) -> Result<Plan, PlanError> {
        // An old or future plan gets the version's message, whether or not the rest parses.
        // The version alone is read only when the whole plan does not parse: reading it
        // first cost a second pass over the text (100 MB for two million ops).
        #[derive(Deserialize)]
        struct Header {
            version: u32,
        }
        match serde_json::from_str::<Plan>(text) {
            Ok(plan) if plan.version != PLAN_VERSION => Err(PlanError::Version {
                found: plan.version,
            }),
            Ok(plan) => Ok(plan),
            Err(e) => match serde_json::from_str::<Header>(text) {
                Ok(h) if h.version != PLAN_VERSION => Err(PlanError::Version { found: h.version }),
                _ => Err(PlanError::Json(e.to_string())),
            },
        }
    }

    /// Pretty JSON, one op per line, so a plan diffs and reads well.
    pub fn to_json(&self) -> String {
        let mut out = Vec::new();
        // Writing to a Vec cannot fail, and serde_json writes UTF-8 only.
        let _ = self.write_json(&mut out);
        String::from_utf8(out)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }

    /// [`Plan::to_json`], written to `w` as it is made: a plan of two million ops is
    /// 100 MB of JSON, written without holding it (or a JSON tree of it) in memory.
    pub fn write_json(&self, w: &mut impl std::io::Write) -> std::io::Result<()> {
        // serde_json's pretty printer puts every field on its own line; plans are large,
        // so ops are written compactly, one per line.
        let mut head = serde_json::json!({
            "version": self.version,
            "name": self.name,
            "collective": self.collective,
            "inplace": self.inplace,
            "ranks": self.ranks,
            "topology": self.topology,
            "protocol": self.protocol,
            "chunk_factor": self.chunk_factor,
            "buffers": self.buffers,
            "sources": self.sources,
        });
        if let (Some(note), Some(obj)) = (&self.schedule, head.as_object_mut()) {
            obj.insert(
                "schedule".into(),
                serde_json::to_value(note).unwrap_or_default(),
            );
        }
        let head = serde_json::to_string_pretty(&head).unwrap_or_default();
        w.write_all(head.trim_end().trim_end_matches('}').trim_end().as_bytes())?;
        w.write_all(b",\n  \"gpus\": [")?;
        for (g, gpu) in self.gpus.iter().enumerate() {
            w.write_all(if g == 0 { b"\n" } else { b",\n" })?;
            write!(w, "    {{\"rank\": {}, \"blocks\": [", gpu.rank)?;
            for (b, block) in gpu.blocks.iter().enumerate() {
                w.write_all(if b == 0 { b"\n" } else { b",\n" })?;
                let head = serde_json::to_string(&BlockHead::of(block)).unwrap_or_default();
                w.write_all(b"      ")?;
                w.write_all(head.trim_end_matches('}').as_bytes())?;
                w.write_all(if head.len() > 2 { b", " } else { b"" })?;
                w.write_all(b"\"ops\": [")?;
                for (i, op) in block.ops.iter().enumerate() {
                    w.write_all(if i == 0 { b"\n" } else { b",\n" })?;
                    w.write_all(b"        ")?;
                    serde_json::to_writer(&mut *w, op).map_err(std::io::Error::other)?;
                }
                w.write_all(if block.ops.is_empty() {
                    b"]}"
                } else {
                    b"\n      ]}"
                })?;
            }
            w.write_all(if gpu.blocks.is_empty() {
                b"]}"
            } else {
                b"\n    ]}"
            })?;
        }
        w.write_all(b"\n  ]\n}\n")
    }

    /// Ops of every rank that send, per iteration (a send of a block of several peers is one
    /// op and one message per peer).
    pub fn sending_ops(&self) -> usize {
        self.gpus
            .iter()
            .flat_map(|g| &g.blocks)
            .flat_map(|b| &b.ops)
            .filter(|op| op.kind.sends())
            .count()
    }

    /// Number of ops in all blocks of all ranks.
    pub fn op_count(&self) -> usize {
        self.gpus
            .iter()
            .flat_map(|g| &g.blocks)
            .map(|b| b.ops.len())
            .sum()
    }
}

impl fmt::Display for Via {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A plan that passed [`Plan::validate`]: the only form executors accept, so a plan is
/// validated once, where it enters (compiled, read from JSON, imported), never again on the
/// way to a GPU.
///
/// Invariant: the plan inside passed [`Plan::validate`] and has not changed since. Outside
/// this crate a `ValidPlan` is built only by [`ValidPlan::new`] and [`ValidPlan::from_json`];
/// inside it also by `ValidPlan::validated`, for a plan the caller has just validated
/// ([`crate::Compiled::plan`], [`crate::msccl::import`]). It gives no mutable access; the
/// plan is shared (an `Arc`), so a compile's plan is held once, by both the lowering's record
/// and this, and whoever changes the record's copies it first (`Arc::make_mut`).
#[derive(Clone, Debug, PartialEq)]
pub struct ValidPlan(std::sync::Arc<Plan>);

impl ValidPlan {
    /// Validates `plan` (every invariant in the module docs).
    pub fn new(plan: Plan) -> Result<ValidPlan, PlanError> {
        plan.validate()?;
        Ok(ValidPlan(std::sync::Arc::new(plan)))
    }

    /// Reads and validates a JSON plan. A plan of another [`PLAN_VERSION`] is
    /// [`PlanError::Version`], whatever else it holds.
    pub fn from_json(text: &str) -> Result<ValidPlan, PlanError> {
        ValidPlan::new(Plan::parse_json(text)?)
    }

    /// Wraps a plan that the caller has just validated (or derived from a valid plan in a way
    /// [`Plan::validate`] does not look at), so that it is not validated twice.
    pub(crate) fn validated(plan: Plan) -> ValidPlan {
        ValidPlan(std::sync::Arc::new(plan))
    }

    /// [`validated`](Self::validated) for a plan shared with its maker.
    pub(crate) fn validated_shared(plan: std::sync::Arc<Plan>) -> ValidPlan {
        ValidPlan(plan)
    }

    /// The plan, to inspect or to change: a changed plan must be validated again.
    pub fn into_inner(self) -> Plan {
        std::sync::Arc::unwrap_or_clone(self.0)
    }
}

impl std::ops::Deref for ValidPlan {
    type Target = Plan;
    fn deref(&self) -> &Plan {
        &self.0
    }
}

impl AsRef<Plan> for ValidPlan {
    fn as_ref(&self) -> &Plan {
        &self.0
    }
}
