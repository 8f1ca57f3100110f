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
//!   ignored. Connections go through an NVSwitch: the plan's topology is `nvswitch:N`.
//!
//! Every op's source is `file:line:col: gpu G tb T step S`, so validation, replay and
//! deadlock messages name the step in the XML. Errors in the XML itself name the element,
//! the attribute and `line:col`; nothing in the input can make the import panic.
//!
//! [`export`] writes the inverse: one `<tb>` per block (blocks already have one send peer,
//! one receive peer and one channel), one `<step>` per op with its first dependency in
//! `depid`/`deps` and each further one in a `nop` step just before it, `hasdep="1"` on
//! every step another waits for, scratch buffers laid end to end in `s`, and
//! `minBytes="0" maxBytes="0"` (no size limit in msccl-executor-nccl).

use crate::elaborate::Protocol;
use crate::plan::{
    self, Block, BufferDecl, Collective, Dep, Op, OpKind, PLAN_VERSION, Plan, PlanError, RankPlan,
    Slice, ValidPlan, Via,
};
use coll_lang::builtins::CollectiveKind;
use roxmltree::{Document, Node};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

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
    Some(match kind {
        CollectiveKind::AllReduce => "allreduce",
        CollectiveKind::AllGather => "allgather",
        CollectiveKind::ReduceScatter => "reducescatter",
        CollectiveKind::AllToAll => "alltoall",
        CollectiveKind::Broadcast => "broadcast",
        CollectiveKind::Reduce => "reduce",
        CollectiveKind::Custom => "custom",
        CollectiveKind::SendRecv => return None,
    })
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

/// A step as written, before nops are folded and dependencies resolved.
#[derive(Clone, Debug)]
struct RawStep<'a, 'i> {
    node: Node<'a, 'i>,
    /// `None` for `nop`.
    kind: Option<OpKind>,
    src: (u32, i64),
    dst: (u32, i64),
    cnt: i64,
    /// `(depid, deps)` when `depid >= 0`.
    dep: Option<(u64, u64)>,
    hasdep: bool,
}

#[derive(Clone, Debug)]
struct RawBlock<'a, 'i> {
    node: Node<'a, 'i>,
    send: Option<u32>,
    recv: Option<u32>,
    chan: u32,
    steps: Vec<RawStep<'a, 'i>>,
}

/// A `<gpu>`: its element, `i_chunks`/`o_chunks`/`s_chunks` and blocks.
type RawGpu<'a, 'i> = (Node<'a, 'i>, [u64; 3], Vec<RawBlock<'a, 'i>>);

struct Reader<'a, 'i> {
    doc: &'a Document<'i>,
    file: &'a str,
}

type R<T> = Result<T, MscclError>;

impl<'a, 'i> Reader<'a, 'i> {
    fn at(&self, byte: usize, element: &str, attribute: Option<&str>, what: String) -> MscclError {
        let p = self.doc.text_pos_at(byte);
        MscclError::Invalid {
            file: self.file.to_string(),
            line: p.row,
            col: p.col,
            element: element.to_string(),
            attribute: attribute.map(str::to_string),
            what,
        }
    }

    /// An error about `node` itself.
    fn node_err(&self, node: Node, element: &str, what: String) -> MscclError {
        self.at(node.range().start, element, None, what)
    }

    /// An error about attribute `attr` of `node` (at the attribute when present).
    fn attr_err(&self, node: Node, element: &str, attr: &str, what: String) -> MscclError {
        let byte = node
            .attributes()
            .find(|a| a.name() == attr)
            .map_or(node.range().start, |a| a.range().start);
        self.at(byte, element, Some(attr), what)
    }

    fn req<'n>(&self, node: Node<'n, 'i>, element: &str, attr: &str) -> R<&'n str> {
        node.attribute(attr).ok_or_else(|| {
            self.node_err(
                node,
                element,
                format!(
                    "attribute `{attr}` is missing (MSCCL's runtime requires it on <{}>)",
                    node.tag_name().name()
                ),
            )
        })
    }

    fn int(&self, node: Node, element: &str, attr: &str, text: &str) -> R<i64> {
        let t = text.trim();
        let digits = t.strip_prefix('-').unwrap_or(t);
        let parsed = if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            t.parse::<i64>().ok()
        } else {
            None
        };
        parsed.ok_or_else(|| {
            self.attr_err(node, element, attr, format!("`{text}` is not an integer"))
        })
    }

    fn req_int(&self, node: Node, element: &str, attr: &str) -> R<i64> {
        let text = self.req(node, element, attr)?;
        self.int(node, element, attr, text)
    }

    /// A required integer in `lo..=hi`; `why` explains the range.
    fn ranged(&self, node: Node, element: &str, attr: &str, lo: i64, hi: i64, why: &str) -> R<i64> {
        let v = self.req_int(node, element, attr)?;
        if v < lo || v > hi {
            return Err(self.attr_err(node, element, attr, format!("{v} is out of range: {why}")));
        }
        Ok(v)
    }

    fn flag(&self, node: Node, element: &str, attr: &str) -> R<Option<bool>> {
        match node.attribute(attr) {
            None => Ok(None),
            Some(t) => match self.int(node, element, attr, t)? {
                0 => Ok(Some(false)),
                1 => Ok(Some(true)),
                v => Err(self.attr_err(node, element, attr, format!("{v} is not 0 or 1"))),
            },
        }
    }

    fn req_flag(&self, node: Node, element: &str, attr: &str) -> R<bool> {
        self.req(node, element, attr)?;
        Ok(self.flag(node, element, attr)?.unwrap_or(false))
    }

    fn children<'n>(node: Node<'n, 'i>, tag: &'static str) -> impl Iterator<Item = Node<'n, 'i>> {
        node.children()
            .filter(move |c| c.is_element() && c.tag_name().name() == tag)
    }

    /// The whole algorithm: the plan and whether it also declares the other placement.
    fn algo(&self) -> R<(Plan, bool)> {
        let root = self.doc.root_element();
        let el = "<algo>";
        if root.tag_name().name() != "algo" {
            return Err(self.node_err(
                root,
                &format!("<{}>", root.tag_name().name()),
                "the root element of MSCCL-IR is <algo>".into(),
            ));
        }
        let name = self.req(root, el, "name")?.to_string();
        let proto = self.req(root, el, "proto")?;
        let protocol = match proto {
            "Simple" => Protocol::Simple,
            "LL" => Protocol::Ll,
            // coll has no LL128 protocol yet; what the algorithm computes does not depend
            // on the protocol.
            "LL128" => Protocol::Simple,
            other => {
                return Err(self.attr_err(
                    root,
                    el,
                    "proto",
                    format!("unknown protocol `{other}` (MSCCL's are Simple, LL and LL128)"),
                ));
            }
        };
        let ngpus = self.ranged(root, el, "ngpus", 1, 65536, "ngpus is at least 1")?;
        let n = ngpus as u64;
        let nchannels = self.ranged(
            root,
            el,
            "nchannels",
            1,
            MAX_CHANNELS as i64,
            &format!("MSCCL's runtime has 1 to {MAX_CHANNELS} channels"),
        )?;
        let ncpl = self.ranged(
            root,
            el,
            "nchunksperloop",
            1,
            plan::MAX_PLAN_CELLS as i64,
            &format!(
                "a loop has 1 to {} chunks (coll's limit on plan chunks)",
                plan::MAX_PLAN_CELLS
            ),
        )? as u64;
        let coll = self.req(root, el, "coll")?;
        let kind = collective_from_name(coll).ok_or_else(|| {
            self.attr_err(
                root,
                el,
                "coll",
                format!(
                    "collective `{coll}` is not supported (allreduce, allgather, reducescatter, alltoall, broadcast, reduce, custom)"
                ),
            )
        })?;
        let inplace = self.req_flag(root, el, "inplace")?;
        let outofplace = self.flag(root, el, "outofplace")?;
        for attr in ["minBytes", "maxBytes"] {
            if let Some(t) = root.attribute(attr) {
                let v = self.int(root, el, attr, t)?;
                if v < 0 {
                    return Err(self.attr_err(root, el, attr, format!("{v} is negative")));
                }
            }
        }
        let m = size_multiplier(kind, n);
        if !ncpl.is_multiple_of(m) {
            return Err(self.attr_err(
                root,
                el,
                "nchunksperloop",
                format!(
                    "{ncpl} chunks do not divide among {n} ranks: MSCCL's {coll} cuts {n} × count elements into nchunksperloop chunks, so it must be a multiple of ngpus"
                ),
            ));
        }
        let k = ncpl / m;
        let expected = buffer_sizes(kind, n, k);

        // The gpus, by id.
        let mut gpus: Vec<Option<RawGpu>> = vec![None; n as usize];
        for g in Self::children(root, "gpu") {
            let ge = "<gpu>";
            let id = self.ranged(
                g,
                ge,
                "id",
                0,
                ngpus - 1,
                &format!("gpu ids are 0..{} (ngpus = {ngpus})", ngpus - 1),
            )? as u32;
            let gel = format!("gpu {id}");
            if gpus[id as usize].is_some() {
                return Err(self.attr_err(g, &gel, "id", format!("gpu {id} appears twice")));
            }
            let mut decl = [0u64; 3];
            for (i, attr) in ["i_chunks", "o_chunks", "s_chunks"].into_iter().enumerate() {
                decl[i] = self.ranged(
                    g,
                    &gel,
                    attr,
                    0,
                    plan::MAX_PLAN_CELLS as i64,
                    &format!(
                        "chunk counts are 0 to {} (coll's limit on plan chunks)",
                        plan::MAX_PLAN_CELLS
                    ),
                )? as u64;
            }
            if let Some((ein, eout)) = expected {
                for (i, attr, want) in [(0, "i_chunks", ein), (1, "o_chunks", eout)] {
                    if decl[i] != 0 && decl[i] != want {
                        return Err(self.attr_err(
                            g,
                            &gel,
                            attr,
                            format!(
                                "{} chunks, but a {coll} with nchunksperloop = {ncpl} on {n} gpus has {want} (or 0 when unused)",
                                decl[i]
                            ),
                        ));
                    }
                }
            }
            let blocks = self.blocks(g, id, n, nchannels as u64, &decl)?;
            gpus[id as usize] = Some((g, decl, blocks));
        }
        let mut gpus_ok = Vec::with_capacity(gpus.len());
        for (i, g) in gpus.into_iter().enumerate() {
            match g {
                Some(g) => gpus_ok.push(g),
                None => {
                    return Err(self.node_err(
                        root,
                        el,
                        format!("there is no <gpu id=\"{i}\"> (ngpus = {ngpus})"),
                    ));
                }
            }
        }

        let (in_chunks, out_chunks) = expected.unwrap_or_else(|| {
            (
                gpus_ok.iter().map(|g| g.1[0]).max().unwrap_or(0),
                gpus_ok.iter().map(|g| g.1[1]).max().unwrap_or(0),
            )
        });
        let scratch = gpus_ok.iter().map(|g| g.1[2]).max().unwrap_or(0);
        let mut buffers = vec![
            BufferDecl {
                name: "input".into(),
                chunks: in_chunks,
            },
            BufferDecl {
                name: "output".into(),
                chunks: out_chunks,
            },
        ];
        if scratch > 0 {
            buffers.push(BufferDecl {
                name: "scratch".into(),
                chunks: scratch,
            });
        }
        let mut sources = Vec::new();
        let mut rank_plans = Vec::with_capacity(gpus_ok.len());
        for (gid, (_, _, blocks)) in gpus_ok.iter().enumerate() {
            rank_plans.push(self.resolve(gid as u32, blocks, &mut sources)?);
        }
        let both = inplace && outofplace == Some(true);
        let plan = Plan {
            version: PLAN_VERSION,
            name,
            collective: Collective(kind),
            inplace: inplace && !both,
            ranks: n as u32,
            topology: format!("nvswitch:{n}"),
            protocol,
            chunk_factor: k,
            buffers,
            sources,
            gpus: rank_plans,
            schedule: None,
        };
        Ok((plan, both))
    }

    /// The `<tb>` elements of gpu `id`, by block id, with their raw steps.
    fn blocks(
        &self,
        g: Node<'a, 'i>,
        id: u32,
        n: u64,
        nchannels: u64,
        decl: &[u64; 3],
    ) -> R<Vec<RawBlock<'a, 'i>>> {
        let mut by_id: BTreeMap<u64, RawBlock> = BTreeMap::new();
        for tb in Self::children(g, "tb") {
            let gel = format!("gpu {id} tb");
            let t = self.ranged(
                tb,
                &gel,
                "id",
                0,
                i64::from(i32::MAX),
                "thread block ids are not negative",
            )? as u64;
            let tel = format!("gpu {id} tb {t}");
            if by_id.contains_key(&t) {
                return Err(self.attr_err(
                    tb,
                    &tel,
                    "id",
                    format!("thread block {t} appears twice on gpu {id}"),
                ));
            }
            let peer = |attr: &str| -> R<Option<u32>> {
                let p = self.ranged(
                    tb,
                    &tel,
                    attr,
                    -1,
                    n as i64 - 1,
                    &format!("a peer is -1 (none) or a gpu in 0..{}", n - 1),
                )?;
                if p == i64::from(id) {
                    return Err(self.attr_err(
                        tb,
                        &tel,
                        attr,
                        format!("gpu {id} cannot be its own peer"),
                    ));
                }
                Ok(u32::try_from(p).ok())
            };
            let send = peer("send")?;
            let recv = peer("recv")?;
            let chan = self.ranged(
                tb,
                &tel,
                "chan",
                0,
                nchannels as i64 - 1,
                &format!("chan must be below nchannels = {nchannels}"),
            )? as u32;
            let mut steps = Vec::new();
            for (pos, st) in Self::children(tb, "step").enumerate() {
                steps.push(self.step(st, id, t, pos, send, recv, decl)?);
            }
            if steps.len() > MAX_STEPS {
                return Err(self.node_err(
                    tb,
                    &tel,
                    format!(
                        "{} steps; MSCCL's runtime holds at most {MAX_STEPS} per thread block",
                        steps.len()
                    ),
                ));
            }
            by_id.insert(
                t,
                RawBlock {
                    node: tb,
                    send,
                    recv,
                    chan,
                    steps,
                },
            );
        }
        let mut blocks = Vec::with_capacity(by_id.len());
        for (i, (t, b)) in by_id.into_iter().enumerate() {
            if t != i as u64 {
                return Err(self.attr_err(
                    b.node,
                    &format!("gpu {id} tb {t}"),
                    "id",
                    format!("thread block {i} is missing on gpu {id}: ids must be 0, 1, 2, ... without gaps"),
                ));
            }
            blocks.push(b);
        }
        Ok(blocks)
    }

    #[allow(clippy::too_many_arguments)]
    fn step(
        &self,
        st: Node<'a, 'i>,
        gpu: u32,
        tb: u64,
        pos: usize,
        send: Option<u32>,
        recv: Option<u32>,
        decl: &[u64; 3],
    ) -> R<RawStep<'a, 'i>> {
        let el = format!("gpu {gpu} tb {tb} step {pos}");
        let s = self.req_int(st, &el, "s")?;
        if s != pos as i64 {
            return Err(self.attr_err(
                st,
                &el,
                "s",
                format!(
                    "step {s} is at position {pos}: MSCCL's runtime numbers steps by position, so steps must be numbered 0, 1, 2, ... for dependencies to mean what they say"
                ),
            ));
        }
        let ty = self.req(st, &el, "type")?;
        let kind = match ty {
            "nop" => None,
            t => Some(OpKind::from_name(t).ok_or_else(|| {
                self.attr_err(
                    st,
                    &el,
                    "type",
                    format!("unknown step type `{t}` (s, r, rcs, rrs, rrc, rrcs, cpy, re, nop)"),
                )
            })?),
        };
        let buf = |attr: &str| -> R<u32> {
            match self.req(st, &el, attr)? {
                "i" => Ok(0),
                "o" => Ok(1),
                "s" => Ok(2),
                b => Err(self.attr_err(st, &el, attr, format!("unknown buffer `{b}` (i, o or s)"))),
            }
        };
        let srcbuf = buf("srcbuf")?;
        let dstbuf = buf("dstbuf")?;
        let srcoff = self.req_int(st, &el, "srcoff")?;
        let dstoff = self.req_int(st, &el, "dstoff")?;
        let cnt = self.req_int(st, &el, "cnt")?;
        let depid = self.req_int(st, &el, "depid")?;
        let deps = self.req_int(st, &el, "deps")?;
        let hasdep = self.req_flag(st, &el, "hasdep")?;
        let dep = match depid {
            -1 => None,
            d if d < -1 => {
                return Err(self.attr_err(
                    st,
                    &el,
                    "depid",
                    format!("{d} is neither -1 (none) nor a thread block"),
                ));
            }
            d if d as u64 > MAX_DEP_BLOCK => {
                return Err(self.attr_err(
                    st,
                    &el,
                    "depid",
                    format!("thread block {d}: MSCCL's runtime stores dependencies on blocks 0..{MAX_DEP_BLOCK}"),
                ));
            }
            d => {
                if deps < 0 {
                    return Err(self.attr_err(
                        st,
                        &el,
                        "deps",
                        format!("{deps} is not a step, but depid names thread block {d}"),
                    ));
                }
                Some((d as u64, deps as u64))
            }
        };
        if let Some(kind) = kind {
            if cnt < 1 || cnt as u64 >= MAX_COUNT {
                return Err(self.attr_err(
                    st,
                    &el,
                    "cnt",
                    format!(
                        "{cnt} chunks: a step moves 1 to {} chunks in MSCCL's runtime",
                        MAX_COUNT - 1
                    ),
                ));
            }
            if kind.sends() && send.is_none() {
                return Err(self.attr_err(
                    st,
                    &el,
                    "type",
                    format!("`{ty}` sends, but thread block {tb} has no send peer (send=\"-1\")"),
                ));
            }
            if kind.receives() && recv.is_none() {
                return Err(self.attr_err(
                    st,
                    &el,
                    "type",
                    format!(
                        "`{ty}` receives, but thread block {tb} has no recv peer (recv=\"-1\")"
                    ),
                ));
            }
            let names = ["i", "o", "s"];
            let sizes = ["i_chunks", "o_chunks", "s_chunks"];
            for (used, b, off, battr, oattr) in [
                (kind.needs_src(), srcbuf, srcoff, "srcbuf", "srcoff"),
                (kind.needs_dst(), dstbuf, dstoff, "dstbuf", "dstoff"),
            ] {
                if !used {
                    continue;
                }
                if off < 0 {
                    return Err(self.attr_err(
                        st,
                        &el,
                        oattr,
                        format!("offset {off}: `{ty}` uses `{battr}`, so it needs a chunk index"),
                    ));
                }
                let have = decl[b as usize];
                // In i128: an offset near 2^63 must neither overflow nor wrap inside.
                let end = i128::from(off) + i128::from(cnt);
                if end > i128::from(have) {
                    return Err(self.attr_err(
                        st,
                        &el,
                        oattr,
                        format!(
                            "chunks {off}..{end} are outside `{}`, which has {} on gpu {gpu} ({} = {have})",
                            names[b as usize],
                            count(have as usize, "chunk"),
                            sizes[b as usize]
                        ),
                    ));
                }
                if off as u64 > MAX_OFFSET {
                    return Err(self.attr_err(
                        st,
                        &el,
                        oattr,
                        format!("offset {off} does not fit MSCCL's 16-bit offsets"),
                    ));
                }
            }
        }
        Ok(RawStep {
            node: st,
            kind,
            src: (srcbuf, srcoff),
            dst: (dstbuf, dstoff),
            cnt,
            dep,
            hasdep,
        })
    }

    /// Folds nops, resolves dependencies and builds the rank's blocks.
    fn resolve(&self, gpu: u32, blocks: &[RawBlock], sources: &mut Vec<String>) -> R<RankPlan> {
        // Op index of each real step, per block.
        let op_of: Vec<Vec<Option<u32>>> = blocks
            .iter()
            .map(|b| {
                let mut next = 0u32;
                b.steps
                    .iter()
                    .map(|s| {
                        s.kind.map(|_| {
                            next += 1;
                            next - 1
                        })
                    })
                    .collect()
            })
            .collect();
        // The op whose completion satisfies a wait for step `s` of block `t`: the first real
        // step at or after `s` with hasdep = 1 (the runtime's flags).
        let signal = |t: usize, s: usize| -> Option<(usize, u32)> {
            (s..blocks[t].steps.len()).find_map(|j| {
                let st = &blocks[t].steps[j];
                if st.kind.is_some() && st.hasdep {
                    op_of[t][j].map(|o| (j, o))
                } else {
                    None
                }
            })
        };
        let mut out = Vec::with_capacity(blocks.len());
        for (t, b) in blocks.iter().enumerate() {
            let mut ops = Vec::new();
            let mut pending: Vec<(Node, (u64, u64))> = Vec::new();
            // (dst, src buffer, count, chain length) of a fusable `re` just before.
            let mut fusable: Option<((u32, i64), u32, i64, usize)> = None;
            for (j, st) in b.steps.iter().enumerate() {
                let el = format!("gpu {gpu} tb {t} step {j}");
                let Some(kind) = st.kind else {
                    let Some(dep) = st.dep else {
                        return Err(self.attr_err(
                            st.node,
                            &el,
                            "depid",
                            "a nop step without a dependency does nothing, and MSCCL's runtime then numbers the steps after it one lower than written".into(),
                        ));
                    };
                    pending.push((st.node, dep));
                    continue;
                };
                if !pending.is_empty() && st.dep.is_none() {
                    return Err(self.attr_err(
                        st.node,
                        &el,
                        "depid",
                        "this step follows nop steps but has no dependency of its own; MSCCL's runtime refuses such a chain".into(),
                    ));
                }
                // The runtime fuses consecutive `re` steps into the same destination and
                // runs them with the last one's count.
                if kind == OpKind::Reduce {
                    match fusable {
                        Some((dst, srcbuf, cnt, len))
                            if dst == st.dst && srcbuf == st.src.0 && st.dep.is_none() =>
                        {
                            if cnt != st.cnt {
                                return Err(self.attr_err(
                                    st.node,
                                    &el,
                                    "cnt",
                                    format!(
                                        "MSCCL's runtime fuses this re step with the one before (same destination and source buffer, no dependency) and runs both with cnt {}, but the one before has cnt {cnt}",
                                        st.cnt
                                    ),
                                ));
                            }
                            fusable = (!st.hasdep && len + 1 < MAX_REDUCE_FUSION).then_some((
                                dst,
                                srcbuf,
                                cnt,
                                len + 1,
                            ));
                        }
                        _ => {
                            fusable = (!st.hasdep).then_some((st.dst, st.src.0, st.cnt, 1));
                        }
                    }
                } else {
                    fusable = None;
                }
                let me = op_of[t][j].unwrap_or(0);
                let mut deps: BTreeMap<u32, u32> = BTreeMap::new();
                for (node, (dt, ds)) in pending.drain(..).chain(st.dep.map(|d| (st.node, d))) {
                    let del = if node == st.node {
                        el.clone()
                    } else {
                        let k = b.steps.iter().position(|x| x.node == node).unwrap_or(j);
                        format!("gpu {gpu} tb {t} step {k}")
                    };
                    let Some(target) = blocks.get(dt as usize) else {
                        return Err(self.attr_err(
                            node,
                            &del,
                            "depid",
                            format!(
                                "gpu {gpu} has no thread block {dt} (it has {})",
                                count(blocks.len(), "thread block")
                            ),
                        ));
                    };
                    if ds as usize >= target.steps.len() {
                        return Err(self.attr_err(
                            node,
                            &del,
                            "deps",
                            format!(
                                "thread block {dt} of gpu {gpu} has no step {ds} (it has {})",
                                count(target.steps.len(), "step")
                            ),
                        ));
                    }
                    let Some((sj, op)) = signal(dt as usize, ds as usize) else {
                        return Err(self.attr_err(
                            node,
                            &del,
                            "deps",
                            format!(
                                "waits for step {ds} of thread block {dt}, but no step of that block at or after {ds} has hasdep=\"1\": MSCCL's runtime would wait forever"
                            ),
                        ));
                    };
                    if dt as usize == t {
                        if op < me {
                            // Program order already guarantees it.
                            continue;
                        }
                        return Err(self.attr_err(
                            node,
                            &del,
                            "deps",
                            format!("waits for step {sj} of its own thread block, which cannot run before it: MSCCL's runtime would wait forever"),
                        ));
                    }
                    let e = deps.entry(dt as u32).or_insert(op);
                    *e = (*e).max(op);
                }
                let p = self.doc.text_pos_at(st.node.range().start);
                sources.push(format!(
                    "{}:{}:{}: gpu {gpu} tb {t} step {j}",
                    self.file, p.row, p.col
                ));
                let slice = |(b, off): (u32, i64)| Slice(b, off.max(0) as u64);
                ops.push(Op {
                    kind,
                    src: kind.needs_src().then(|| slice(st.src)),
                    dst: kind.needs_dst().then(|| slice(st.dst)),
                    count: st.cnt as u32,
                    deps: deps.into_iter().map(|(b, o)| Dep(b, o)).collect(),
                    source: (sources.len() - 1) as u32,
                    group: None,
                });
            }
            // Trailing nops wait for nothing: the runtime drops them too.
            out.push(Block {
                id: t as u32,
                channel: b.chan,
                send_peer: b.send,
                recv_peer: b.recv,
                send_via: b.send.map(|_| Via::Switch),
                recv_via: b.recv.map(|_| Via::Switch),
                protocol: None,
                ops,
            });
        }
        Ok(RankPlan {
            rank: gpu,
            blocks: out,
        })
    }
}

/// Writes `plan` as MSCCL-IR XML (see the module docs). The plan must be valid.
pub fn export(plan: &Plan) -> Result<String, MscclError> {
    plan.validate().map_err(MscclError::Plan)?;
    // MSCCL-IR has no copy-send.
    let split;
    let plan = if plan
        .gpus
        .iter()
        .flat_map(|g| &g.blocks)
        .flat_map(|b| &b.ops)
        .any(|o| o.kind == OpKind::CopySend)
    {
        split = plan.with_copy_sends_split();
        &split
    } else {
        plan
    };
    let fail = |at: String, what: String| MscclError::Export { at, what };
    let kind = plan.collective.0;
    let coll = collective_name(kind).ok_or_else(|| {
        fail(
            "plan".into(),
            format!("MSCCL has no {} collective", kind.name()),
        )
    })?;
    let n = u64::from(plan.ranks);
    let k = plan.chunk_factor;
    let ncpl = k * size_multiplier(kind, n);
    let proto = match plan.protocol {
        Protocol::Simple => "Simple",
        Protocol::Ll => "LL",
    };
    // Scratch buffers end to end in `s`.
    let mut base = vec![0u64; plan.buffers.len()];
    let mut scratch = 0u64;
    for (b, decl) in plan.buffers.iter().enumerate().skip(2) {
        base[b] = scratch;
        scratch += decl.chunks;
    }
    if let Some((ein, eout)) = buffer_sizes(kind, n, k) {
        let (hin, hout) = (plan.buffers[0].chunks, plan.buffers[1].chunks);
        if (hin, hout) != (ein, eout) {
            return Err(fail(
                "plan".into(),
                format!(
                    "input and output hold {hin} and {hout} chunks; a {} with chunk factor {k} on {n} ranks has {ein} and {eout}",
                    kind.name()
                ),
            ));
        }
    }
    let mut nchannels = 1u64;
    for (r, gpu) in plan.gpus.iter().enumerate() {
        let mut per_channel: BTreeMap<u32, usize> = BTreeMap::new();
        for (b, block) in gpu.blocks.iter().enumerate() {
            let at = || plan::location(plan, r as u32, b as u32, None);
            if u64::from(block.channel) >= MAX_CHANNELS {
                return Err(fail(
                    at(),
                    format!(
                        "channel {}: MSCCL has channels 0..{}",
                        block.channel,
                        MAX_CHANNELS - 1
                    ),
                ));
            }
            nchannels = nchannels.max(u64::from(block.channel) + 1);
            *per_channel.entry(block.channel).or_default() += 1;
            if let Some(p) = block.protocol
                && p != plan.protocol
            {
                return Err(fail(
                    at(),
                    format!(
                        "uses protocol {} but the plan {}: MSCCL-IR has one protocol per algorithm",
                        p.name(),
                        plan.protocol.name()
                    ),
                ));
            }
        }
        if let Some((c, &m)) = per_channel.iter().find(|(_, m)| **m > 32) {
            return Err(fail(
                format!("rank {r}"),
                format!("{m} blocks on channel {c}: MSCCL's runtime allows 32 per channel"),
            ));
        }
    }
    let place = |b: u32, off: u64| -> (&'static str, u64) {
        match b {
            0 => ("i", off),
            1 => ("o", off),
            _ => ("s", base.get(b as usize).copied().unwrap_or(0) + off),
        }
    };
    let mut x = String::new();
    let _ = writeln!(
        x,
        "<algo name=\"{}\" proto=\"{proto}\" nchannels=\"{nchannels}\" nchunksperloop=\"{ncpl}\" ngpus=\"{n}\" coll=\"{coll}\" inplace=\"{}\" outofplace=\"{}\" minBytes=\"0\" maxBytes=\"0\">",
        crate::dump::xml_escape(&plan.name),
        u8::from(plan.inplace),
        u8::from(!plan.inplace),
    );
    for (r, gpu) in plan.gpus.iter().enumerate() {
        let _ = writeln!(
            x,
            "  <gpu id=\"{r}\" i_chunks=\"{}\" o_chunks=\"{}\" s_chunks=\"{scratch}\">",
            plan.buffers[0].chunks, plan.buffers[1].chunks
        );
        // XML step of each op: its index plus the nops inserted before it.
        let steps: Vec<Vec<u64>> = gpu
            .blocks
            .iter()
            .map(|b| {
                let mut at = 0u64;
                b.ops
                    .iter()
                    .map(|o| {
                        at += o.deps.len().saturating_sub(1) as u64;
                        at += 1;
                        at - 1
                    })
                    .collect()
            })
            .collect();
        let waited: BTreeSet<(u32, u32)> = gpu
            .blocks
            .iter()
            .flat_map(|b| {
                b.ops
                    .iter()
                    .flat_map(|o| o.deps.iter().map(|d| (d.block(), d.op())))
            })
            .collect();
        for (b, block) in gpu.blocks.iter().enumerate() {
            let peer = |p: Option<u32>| p.map_or(-1, i64::from);
            let _ = writeln!(
                x,
                "    <tb id=\"{b}\" send=\"{}\" recv=\"{}\" chan=\"{}\">",
                peer(block.send_peer),
                peer(block.recv_peer),
                block.channel
            );
            let total = steps[b].last().map_or(0, |s| s + 1);
            if total as usize > MAX_STEPS {
                return Err(fail(
                    plan::location(plan, r as u32, b as u32, None),
                    format!(
                        "{total} steps (nops included); MSCCL's runtime holds at most {MAX_STEPS} per thread block"
                    ),
                ));
            }
            let mut s = 0u64;
            for (i, op) in block.ops.iter().enumerate() {
                let at = || plan::location(plan, r as u32, b as u32, Some(i as u32));
                let dep_step = |d: &Dep| -> Result<(u32, u64), MscclError> {
                    if u64::from(d.block()) > MAX_DEP_BLOCK {
                        return Err(fail(
                            at(),
                            format!(
                                "depends on block {}: MSCCL's runtime names blocks 0..{MAX_DEP_BLOCK} in dependencies",
                                d.block()
                            ),
                        ));
                    }
                    Ok((d.block(), steps[d.block() as usize][d.op() as usize]))
                };
                for d in op.deps.iter().skip(1) {
                    let (db, ds) = dep_step(d)?;
                    let _ = writeln!(
                        x,
                        "      <step s=\"{s}\" type=\"nop\" srcbuf=\"i\" srcoff=\"-1\" dstbuf=\"o\" dstoff=\"-1\" cnt=\"0\" depid=\"{db}\" deps=\"{ds}\" hasdep=\"0\"/>"
                    );
                    s += 1;
                }
                let (depid, deps) = match op.deps.first() {
                    Some(d) => {
                        let (db, ds) = dep_step(d)?;
                        (i64::from(db), ds as i64)
                    }
                    None => (-1, -1),
                };
                if u64::from(op.count) >= MAX_COUNT {
                    return Err(fail(
                        at(),
                        format!(
                            "moves {} chunks; a step of MSCCL's runtime moves at most {}",
                            op.count,
                            MAX_COUNT - 1
                        ),
                    ));
                }
                // The side the op does not use mirrors the one it does, as MSCCLang writes it
                // when both ends use the same place.
                let (src, dst) = match (op.src, op.dst) {
                    (Some(a), Some(b)) => (a, b),
                    (Some(a), None) => (a, a),
                    (None, Some(b)) => (b, b),
                    (None, None) => return Err(fail(at(), "has neither src nor dst".into())),
                };
                let (sb, so) = place(src.buffer(), src.offset());
                let (db, dof) = place(dst.buffer(), dst.offset());
                if so.max(dof) > MAX_OFFSET {
                    return Err(fail(
                        at(),
                        format!("offset {} does not fit MSCCL's 16-bit offsets", so.max(dof)),
                    ));
                }
                let hasdep = u8::from(waited.contains(&(b as u32, i as u32)));
                let _ = writeln!(
                    x,
                    "      <step s=\"{s}\" type=\"{}\" srcbuf=\"{sb}\" srcoff=\"{so}\" dstbuf=\"{db}\" dstoff=\"{dof}\" cnt=\"{}\" depid=\"{depid}\" deps=\"{deps}\" hasdep=\"{hasdep}\"/>",
                    op.kind.name(),
                    op.count
                );
                s += 1;
                // The runtime fuses a `re` into the one before when both write the same place
                // from the same buffer and nothing waits between them, and runs the fused
                // steps with the last one's count.
                if i > 0 && op.kind == OpKind::Reduce && op.deps.is_empty() {
                    let prev = &block.ops[i - 1];
                    let key = |o: &Op| {
                        (
                            o.dst.map(|d| place(d.buffer(), d.offset())),
                            o.src.map(|d| place(d.buffer(), 0).0),
                        )
                    };
                    if prev.kind == OpKind::Reduce
                        && !waited.contains(&(b as u32, i as u32 - 1))
                        && key(prev) == key(op)
                        && prev.count != op.count
                    {
                        return Err(fail(
                            at(),
                            format!(
                                "MSCCL's runtime fuses this reduce with the one before (same destination and source buffer) and runs both with {} chunks, but the one before moves {}",
                                op.count, prev.count
                            ),
                        ));
                    }
                }
            }
            x.push_str("    </tb>\n");
        }
        x.push_str("  </gpu>\n");
    }
    x.push_str("</algo>\n");
    Ok(x)
}

/// `1 step`, `3 steps`.
fn count(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}
