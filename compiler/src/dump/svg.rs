//! The SVG timeline: ranks as lanes (rows), schedule steps as columns, each op a small
//! rounded box coloured by what it does ([`OpClass`]), each transfer an arrow from the
//! sending op's box to the receiving op's box coloured by channel kind (nvlink, switch,
//! pcie, net), dependencies between blocks of a rank as faint dashed lines, with a legend,
//! rank labels on the left and step numbers on top. Hovering a box or an arrow shows its
//! details and source line (SVG `<title>` elements).
//!
//! Where an op goes: its step comes from the caller (the deadlock simulator's schedule;
//! anything that maps `(rank, block, op)` to a step works). Ops of one rank at one step
//! stack within the rank's lane, in block order.
//!
//! Invariants:
//! - the output is one standalone SVG document (`xmlns` set, every text escaped with
//!   [`escape`]), whatever the plan holds;
//! - its size is bounded whatever the plan's size: at most [`MAX_RANKS`] lanes,
//!   [`MAX_STEPS`] columns, [`MAX_STACK`] boxes per rank and step, and [`MAX_BOXES`]
//!   boxes in all (hence at most that many arrows); whatever is left out is counted in a
//!   note at the bottom of the picture, so a cut picture never passes for a whole one;
//! - an arrow is drawn exactly when both of its ops are drawn.

use super::{OpClass, OpRef, VIAS, ops, slice_name, source_name, transfers, via_colour, via_name};
use crate::plan::{Op, OpKind, Plan, Slice};
use std::collections::BTreeMap;
use std::fmt::Write;

/// Lanes drawn at most: ranks past this are left out (and said so).
pub const MAX_RANKS: u32 = 64;
/// Columns drawn at most: ops at later steps are left out (and said so).
pub const MAX_STEPS: u32 = 200;
/// Boxes drawn at most per rank and step; the rest show as `+k`.
pub const MAX_STACK: usize = 3;
/// Boxes drawn at most in all (a box is ~400 bytes; 64 lanes × 200 steps × 3 would make
/// ~15 MB of SVG, this ~7 MB).
pub const MAX_BOXES: usize = 16_384;

const LEFT: f64 = 76.0;
const RIGHT: f64 = 16.0;
// The 20 px between boxes keeps arrows between neighbouring steps visibly slanted.
const COL_W: f64 = 72.0;
const BOX_W: f64 = 52.0;
const BOX_H: f64 = 24.0;
const SLOT_H: f64 = 30.0;
const LANE_PAD: f64 = 8.0;
const LANES_TOP: f64 = 96.0;
const MIN_WIDTH: f64 = 720.0;

/// Where a drawn op's box is (top-left corner).
#[derive(Clone, Copy)]
struct Placed {
    x: f64,
    y: f64,
    step: u32,
}

/// The SVG timeline of `plan`; `steps(rank, block, op)` gives each op's step (`None`: the
/// op never runs in that schedule; it is not drawn and the note at the bottom counts it).
pub fn svg(plan: &Plan, steps: &dyn Fn(u32, u32, u32) -> Option<u32>) -> String {
    let lanes = plan.ranks.min(plan.gpus.len() as u32).min(MAX_RANKS);

    // Pass 1: where every op goes, and what is left out.
    let mut cells: BTreeMap<(u32, u32), usize> = BTreeMap::new(); // (rank, step) -> ops
    let mut stacked: BTreeMap<OpRef, (u32, usize)> = BTreeMap::new(); // op -> (step, slot)
    let mut last_step: Option<u32> = None;
    let (mut unscheduled, mut late, mut over_stack, mut over_total) = (0u64, 0u64, 0u64, 0u64);
    let mut hidden_ranks_ops = 0u64;
    for (at, _, _) in ops(plan) {
        let Some(step) = steps(at.rank, at.block, at.op) else {
            unscheduled += 1;
            continue;
        };
        last_step = Some(last_step.map_or(step, |s| s.max(step)));
        if at.rank >= lanes {
            hidden_ranks_ops += 1;
            continue;
        }
        if step >= MAX_STEPS {
            late += 1;
            continue;
        }
        let n = cells.entry((at.rank, step)).or_insert(0);
        *n += 1;
        if *n > MAX_STACK {
            over_stack += 1;
        } else if stacked.len() >= MAX_BOXES {
            over_total += 1;
        } else {
            stacked.insert(at, (step, *n - 1));
        }
    }
    let cols = stacked.values().map(|&(s, _)| s + 1).max().unwrap_or(1);
    let mut slots = vec![1usize; lanes as usize];
    for (&(r, _), &n) in &cells {
        if let Some(s) = slots.get_mut(r as usize) {
            *s = (*s).max(n.min(MAX_STACK));
        }
    }
    let mut lane_top = Vec::with_capacity(lanes as usize + 1);
    let mut y = LANES_TOP;
    for &s in &slots {
        lane_top.push(y);
        y += s as f64 * SLOT_H + LANE_PAD;
    }
    let lanes_bottom = y;
    let placed: BTreeMap<OpRef, Placed> = stacked
        .iter()
        .filter_map(|(&at, &(step, slot))| {
            let top = *lane_top.get(at.rank as usize)?;
            Some((
                at,
                Placed {
                    x: LEFT + f64::from(step) * COL_W + (COL_W - BOX_W) / 2.0,
                    y: top + LANE_PAD / 2.0 + slot as f64 * SLOT_H + (SLOT_H - BOX_H) / 2.0,
                    step,
                },
            ))
        })
        .collect();

    let all_transfers = transfers(plan);
    let drawn_transfers: Vec<_> = all_transfers
        .iter()
        .filter_map(|t| Some((t, *placed.get(&t.from)?, *placed.get(&t.to)?)))
        .collect();

    // Notes about what is not shown.
    let mut notes = Vec::new();
    if lanes < plan.ranks {
        notes.push(format!(
            "showing ranks 0..{} of {} ({hidden_ranks_ops} ops of later ranks left out)",
            lanes.saturating_sub(1),
            plan.ranks
        ));
    }
    if late > 0 {
        notes.push(format!(
            "showing steps 0..{} of {} ({late} later ops left out)",
            MAX_STEPS - 1,
            last_step.map_or(0, |s| s + 1)
        ));
    }
    if over_stack > 0 {
        notes.push(format!(
            "{over_stack} ops left out where a rank has more than {MAX_STACK} ops in one step (marked +k)"
        ));
    }
    if over_total > 0 {
        notes.push(format!("{over_total} ops left out past {MAX_BOXES} boxes"));
    }
    if unscheduled > 0 {
        notes.push(format!(
            "{unscheduled} ops have no step in this schedule and are not shown"
        ));
    }
    let hidden_arrows = all_transfers.len() - drawn_transfers.len();
    if hidden_arrows > 0 {
        notes.push(format!(
            "{hidden_arrows} of {} transfers not drawn (an end is not shown)",
            all_transfers.len()
        ));
    }

    let width = (LEFT + f64::from(cols) * COL_W + RIGHT).max(MIN_WIDTH);
    let height = lanes_bottom + 12.0 + notes.len() as f64 * 16.0 + 8.0;

    // Pass 2: draw.
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\">"
    );
    let title = format!(
        "{} \u{2014} {}, n = {}, {}",
        plan.name,
        plan.collective.0.name(),
        plan.ranks,
        plan.topology
    );
    let _ = writeln!(out, "<title>{}</title>", escape(&title));
    out.push_str(
        "<style>\
text{font-family:Helvetica,Arial,sans-serif;fill:#222}\
.t{font-size:15px;font-weight:bold}.l{font-size:11px}.s{font-size:9px;fill:#666}\
.k{font-size:9px;text-anchor:middle}.c{font-size:8px;text-anchor:middle}\
.op rect{stroke:#333;stroke-width:.6}.xfer{stroke-width:1.4;opacity:.85}\
.n{font-size:11px;fill:#B2182B}\
.dep{stroke:#555;stroke-width:.8;stroke-dasharray:3 2;opacity:.6}\
</style>\n",
    );
    out.push_str("<defs>\n");
    for v in VIAS {
        let _ = writeln!(
            out,
            "<marker id=\"ah-{}\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" orient=\"auto\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"{}\"/></marker>",
            via_name(v),
            via_colour(v)
        );
    }
    out.push_str("</defs>\n");
    let _ = writeln!(
        out,
        "<rect x=\"0\" y=\"0\" width=\"{width}\" height=\"{height}\" fill=\"#ffffff\"/>"
    );
    let _ = writeln!(
        out,
        "<text class=\"t\" x=\"12\" y=\"22\">{}</text>",
        escape(&title)
    );

    // Legend: op classes, then channel kinds.
    let _ = writeln!(out, "<text class=\"l\" x=\"12\" y=\"46\">ops</text>");
    for (i, c) in OpClass::ALL.into_iter().enumerate() {
        let x = LEFT + i as f64 * 110.0;
        let _ = writeln!(
            out,
            "<rect x=\"{x}\" y=\"36\" width=\"18\" height=\"12\" rx=\"3\" fill=\"{}\" stroke=\"#333\" stroke-width=\".6\"/><text class=\"l\" x=\"{}\" y=\"46\">{}</text>",
            c.colour(),
            x + 24.0,
            c.name()
        );
    }
    let _ = writeln!(out, "<text class=\"l\" x=\"12\" y=\"66\">transfers</text>");
    for (i, v) in VIAS.into_iter().filter(|v| v.is_some()).enumerate() {
        let x = LEFT + i as f64 * 110.0;
        let _ = writeln!(
            out,
            "<line class=\"xfer\" x1=\"{x}\" y1=\"62\" x2=\"{}\" y2=\"62\" stroke=\"{}\" marker-end=\"url(#ah-{})\"/><text class=\"l\" x=\"{}\" y=\"66\">{}</text>",
            x + 18.0,
            via_colour(v),
            via_name(v),
            x + 24.0,
            via_name(v)
        );
    }

    // Lanes, rank labels, step numbers and grid.
    for (r, &top) in lane_top.iter().enumerate() {
        let h = slots.get(r).map_or(1, |&s| s) as f64 * SLOT_H + LANE_PAD;
        let fill = if r % 2 == 0 { "#f4f6f8" } else { "#ffffff" };
        let _ = writeln!(
            out,
            "<rect x=\"0\" y=\"{top}\" width=\"{width}\" height=\"{h}\" fill=\"{fill}\"/><text class=\"l\" x=\"12\" y=\"{}\">rank {r}</text>",
            top + h / 2.0 + 4.0
        );
    }
    let every = match cols {
        0..=40 => 1,
        41..=100 => 5,
        _ => 10,
    };
    for s in 0..cols {
        let x = LEFT + f64::from(s) * COL_W;
        let _ = writeln!(
            out,
            "<line x1=\"{x}\" y1=\"{}\" x2=\"{x}\" y2=\"{lanes_bottom}\" stroke=\"#dde1e5\" stroke-width=\".5\"/>",
            LANES_TOP - 8.0
        );
        if s % every == 0 {
            let _ = writeln!(
                out,
                "<text class=\"s\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{s}</text>",
                x + COL_W / 2.0,
                LANES_TOP - 12.0
            );
        }
    }
    let _ = writeln!(
        out,
        "<text class=\"s\" x=\"12\" y=\"{}\">step</text>",
        LANES_TOP - 12.0
    );

    // Dependencies on other blocks of the rank: faint dashed lines from
    // box centre to box centre, drawn first so the boxes hide their ends.
    for (at, _, op) in ops(plan) {
        let Some(b) = placed.get(&at) else { continue };
        for d in &op.deps {
            let from = OpRef {
                rank: at.rank,
                block: d.block(),
                op: d.op(),
            };
            let Some(a) = placed.get(&from) else { continue };
            let _ = writeln!(
                out,
                "<line class=\"dep\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>",
                a.x + BOX_W / 2.0,
                a.y + BOX_H / 2.0,
                b.x + BOX_W / 2.0,
                b.y + BOX_H / 2.0
            );
        }
    }

    // Boxes.
    for (at, block, op) in ops(plan) {
        let Some(p) = placed.get(&at) else { continue };
        // Every peer the op moves data with: `to rank 1`, or `to ranks 1, 2` in a block of
        // several peers (where `; ` then parts the two sides, as the lists hold commas).
        let side = |on: bool, word: &str, peers: Vec<u32>| match peers.as_slice() {
            _ if !on => None,
            [] => None,
            [q] => Some(format!("{word} rank {q}")),
            _ => Some(format!(
                "{word} ranks {}",
                super::peer_list(peers.iter().copied())
            )),
        };
        let peers = [
            side(op.kind.sends(), "to", block.send_peers().collect()),
            side(op.kind.receives(), "from", block.recv_peers().collect()),
        ];
        let parts = if block.several_peers() { "; " } else { ", " };
        let mut tip = format!(
            "rank {}, block {}, op {} (step {}, channel {})\n{}",
            at.rank,
            at.block,
            at.op,
            p.step,
            block.channel,
            operands(plan, op)
        );
        let peers: Vec<String> = peers.into_iter().flatten().collect();
        if !peers.is_empty() {
            let _ = write!(tip, "\n{}", peers.join(parts));
        }
        if !op.deps.is_empty() {
            let deps: Vec<String> = op
                .deps
                .iter()
                .map(|d| format!("b{}:{}", d.block(), d.op()))
                .collect();
            let _ = write!(tip, "\nafter {}", deps.join(", "));
        }
        if let Some(g) = op.group {
            let _ = write!(tip, "\ngroup {g}");
        }
        let _ = write!(tip, "\n{}", source_name(plan, op));
        let chunks = short_chunks(plan, op);
        let fit = if chunks.chars().count() > 11 {
            format!(
                " textLength=\"{}\" lengthAdjust=\"spacingAndGlyphs\"",
                BOX_W - 4.0
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "<g class=\"op\"><title>{}</title><rect x=\"{}\" y=\"{}\" width=\"{BOX_W}\" height=\"{BOX_H}\" rx=\"5\" fill=\"{}\"/><text class=\"k\" x=\"{}\" y=\"{}\">{}</text><text class=\"c\" x=\"{}\" y=\"{}\"{fit}>{}</text></g>",
            escape(&tip),
            p.x,
            p.y,
            OpClass::of(op.kind).colour(),
            p.x + BOX_W / 2.0,
            p.y + 10.0,
            short_kind(op.kind),
            p.x + BOX_W / 2.0,
            p.y + 20.0,
            escape(&chunks)
        );
    }
    // `+k` where ops of a cell did not fit.
    for (&(r, step), &n) in &cells {
        if n <= MAX_STACK || step >= MAX_STEPS {
            continue;
        }
        let Some(&top) = lane_top.get(r as usize) else {
            continue;
        };
        let _ = writeln!(
            out,
            "<text class=\"n\" x=\"{}\" y=\"{}\">+{}</text>",
            LEFT + f64::from(step) * COL_W + 2.0,
            top + 10.0,
            n - MAX_STACK
        );
    }

    // Arrows, above the boxes so a short hop stays visible.
    for (t, a, b) in &drawn_transfers {
        let (x1, y1, x2, y2) = if b.x >= a.x + BOX_W {
            (a.x + BOX_W, a.y + BOX_H / 2.0, b.x, b.y + BOX_H / 2.0)
        } else if b.x + BOX_W <= a.x {
            (a.x, a.y + BOX_H / 2.0, b.x + BOX_W, b.y + BOX_H / 2.0)
        } else if b.y > a.y {
            (a.x + BOX_W / 2.0, a.y + BOX_H, b.x + BOX_W / 2.0, b.y)
        } else {
            (a.x + BOX_W / 2.0, a.y, b.x + BOX_W / 2.0, b.y + BOX_H)
        };
        let tip = format!(
            "rank {} b{}:{} (step {}) -> rank {} b{}:{} (step {})\n{} chunks, channel {}, via {}",
            t.from.rank,
            t.from.block,
            t.from.op,
            a.step,
            t.to.rank,
            t.to.block,
            t.to.op,
            b.step,
            t.count,
            t.channel,
            via_name(t.via)
        );
        let _ = writeln!(
            out,
            "<line class=\"xfer\" x1=\"{x1}\" y1=\"{y1}\" x2=\"{x2}\" y2=\"{y2}\" stroke=\"{}\" marker-end=\"url(#ah-{})\"><title>{}</title></line>",
            via_colour(t.via),
            via_name(t.via),
            escape(&tip)
        );
    }

    for (i, note) in notes.iter().enumerate() {
        let _ = writeln!(
            out,
            "<text class=\"n\" x=\"12\" y=\"{}\">{}</text>",
            lanes_bottom + 18.0 + i as f64 * 16.0,
            escape(note)
        );
    }
    out.push_str("</svg>\n");
    out
}

/// A box's first line: the kind, short enough for the box.
fn short_kind(kind: OpKind) -> &'static str {
    match kind {
        OpKind::Send | OpKind::Recv | OpKind::Copy | OpKind::Reduce => kind.long_name(),
        _ => kind.name(),
    }
}

/// A box's second line: the chunks an op writes (or sends), `in 2..3`; `input` and `output`
/// abbreviate to `in` and `out`, scratch names to four characters.
fn short_chunks(plan: &Plan, op: &Op) -> String {
    let Some(s) = op.dst.or(op.src) else {
        return format!("{} ch", op.count);
    };
    let name = match plan
        .buffers
        .get(s.buffer() as usize)
        .map(|b| b.name.as_str())
    {
        Some("input") => "in".to_string(),
        Some("output") => "out".to_string(),
        Some(other) => other.chars().take(4).collect(),
        None => format!("b{}", s.buffer()),
    };
    let Slice(_, off) = s;
    format!("{name} {off}..{}", off.saturating_add(u64::from(op.count)))
}

/// `recv-reduce-copy-send input[0..1] -> input[0..1]`.
fn operands(plan: &Plan, op: &Op) -> String {
    let mut s = op.kind.long_name().to_string();
    if let Some(src) = op.src {
        let _ = write!(s, " {}", slice_name(plan, src, op.count));
    }
    if let Some(dst) = op.dst {
        let _ = write!(s, " -> {}", slice_name(plan, dst, op.count));
    }
    s
}

/// Escapes text for XML content and double- or single-quoted attributes. Characters XML 1.0
/// forbids (most C0 controls) become U+FFFD so the document always parses.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' | '\t' => out.push(c),
            c if (c as u32) < 0x20 => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dump::fixture;
    use crate::plan::Via;

    /// The stand-in schedule: an op's step is its index in its block.
    fn by_index(_: u32, _: u32, op: u32) -> Option<u32> {
        Some(op)
    }

    fn parse(svg: &str) -> roxmltree::Document<'_> {
        match roxmltree::Document::parse(svg) {
            Ok(d) => d,
            Err(e) => panic!("not XML: {e}\n{svg}"),
        }
    }

    fn count_class(doc: &roxmltree::Document<'_>, tag: &str, class: &str) -> usize {
        doc.descendants()
            .filter(|n| n.has_tag_name(tag) && n.attribute("class") == Some(class))
            .count()
    }

    /// Transfer arrows: legend lines have no `<title>`; transfer arrows do.
    fn transfer_arrows(doc: &roxmltree::Document<'_>) -> usize {
        doc.descendants()
            .filter(|n| {
                n.has_tag_name("line")
                    && n.attribute("class") == Some("xfer")
                    && n.children().any(|c| c.has_tag_name("title"))
            })
            .count()
    }

    #[test]
    fn ring3_is_xml_with_an_arrow_per_send() {
        let plan = fixture::ring3();
        let s = svg(&plan, &by_index);
        let doc = parse(&s);
        let root = doc.root_element();
        assert!(root.has_tag_name(("http://www.w3.org/2000/svg", "svg")));
        let sends = plan
            .gpus
            .iter()
            .flat_map(|g| &g.blocks)
            .flat_map(|b| &b.ops)
            .filter(|o| o.kind.sends())
            .count();
        assert_eq!(transfer_arrows(&doc), sends);
        assert_eq!(count_class(&doc, "g", "op"), plan.op_count());
        // Title, legend, hover text with the source line, rank labels.
        assert!(s.contains("ring \u{2014} allreduce, n = 3, nvswitch:3"));
        assert!(s.contains(">switch</text>") && s.contains(">fused</text>"));
        assert!(s.contains("after b0:4, b0:3\ngroup 1\nring.coll:11:3</title>"));
        assert!(s.contains(">rank 2</text>"));
        assert!(!s.contains("class=\"n\""), "nothing is left out");
    }

    #[test]
    fn blocks_of_several_peers_draw_a_transfer_per_peer() {
        let plan = fixture::head_of_three();
        let s = svg(&plan, &by_index);
        let doc = parse(&s);
        assert_eq!(transfer_arrows(&doc), 4);
        assert!(s.contains("\nto ranks 1, 2; from ranks 1, 2\n"), "{s}");
        assert!(s.contains("\nto rank 0\n"), "{s}");
    }

    #[test]
    fn eight_ranks_read_well() {
        let plan = fixture::ring_allreduce(8, Via::Nvlink);
        let s = svg(&plan, &by_index);
        let doc = parse(&s);
        let width: f64 = doc
            .root_element()
            .attribute("width")
            .and_then(|w| w.parse().ok())
            .unwrap_or(0.0);
        // 15 steps of 72 px plus margins: fits a screen.
        assert!(width <= 1200.0, "{width}");
        assert_eq!(
            s.matches("marker-end=\"url(#ah-nvlink)\"><title>").count(),
            8 * 14
        );
    }

    #[test]
    fn big_plans_are_capped_and_say_so() {
        let plan = fixture::ring_allreduce(100, Via::Switch);
        let s = svg(&plan, &by_index);
        let doc = parse(&s);
        assert!(s.contains("showing ranks 0..63 of 100"));
        assert!(!s.contains("showing steps")); // 198 steps fit
        assert_eq!(count_class(&doc, "g", "op"), 64 * 199);
        assert!(s.len() < 8 << 20, "{} bytes", s.len());

        let plan = fixture::ring_allreduce(120, Via::Switch);
        let s = svg(&plan, &by_index);
        assert!(s.contains("showing steps 0..199 of 239 (2496 later ops"));
        parse(&s);

        // Two ops per rank and step: 64 × 399 boxes are more than MAX_BOXES.
        let plan = fixture::ring_allreduce(200, Via::Switch);
        let s = svg(&plan, &|_, _, op| Some(op / 2));
        let doc = parse(&s);
        assert_eq!(count_class(&doc, "g", "op"), MAX_BOXES);
        assert!(s.contains(&format!(
            "{} ops left out past 16384 boxes",
            64 * 399 - MAX_BOXES
        )));
        assert!(s.len() < 10 << 20, "{} bytes", s.len());
    }

    #[test]
    fn odd_schedules_and_names() {
        let mut plan = fixture::ring3();
        plan.name = "<a & \"b\">\u{1}".into();
        // Everything at step 0: stacks past MAX_STACK on rank 0; rank 2 never runs.
        let s = svg(&plan, &|r, _, _| (r < 2).then_some(0));
        parse(&s);
        assert!(s.contains("&lt;a &amp; &quot;b&quot;&gt;\u{FFFD}"));
        assert!(s.contains(">+4</text>"));
        assert!(s.contains("7 ops have no step"));
        assert!(s.contains("transfers not drawn"));
    }
}
