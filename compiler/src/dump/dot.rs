//! The Graphviz dump: one cluster per rank (a sub-cluster per block), one node per op, and
//! three kinds of edges: block order (solid, black), dependencies (dashed, grey, from the
//! op waited on to the op that waits) and transfers (bold, from a sending op to the
//! receiving op it pairs with, coloured by channel kind, see [`super::via_colour`]).
//!
//! Invariants: node ids are generated (`r{rank}_b{block}_o{op}`), never taken from the
//! plan, and every string taken from the plan (names, sources) goes through [`escape`], so
//! the output is valid DOT whatever the plan holds. Edges to ops that do not exist (a
//! dependency in a broken plan) are left out rather than creating stray nodes.

use super::{
    OpClass, OpRef, VIAS, peer_list, slice_name, source_name, transfers, via_colour, via_name,
};
use crate::plan::{Op, Plan};
use std::fmt::Write;

/// The Graphviz (DOT) dump of `plan` (see the module docs).
pub fn dot(plan: &Plan) -> String {
    let mut out = String::new();
    let legend: Vec<String> = VIAS
        .iter()
        .filter(|v| v.is_some())
        .map(|&v| format!("{} {}", colour_word(via_colour(v)), via_name(v)))
        .collect();
    let title = format!(
        "{}: {}, {} ranks, {}\nsolid: block order; dashed: dependency; bold: transfer ({})",
        plan.name,
        plan.collective.0.name(),
        plan.ranks,
        plan.topology,
        legend.join(", ")
    );
    let _ = writeln!(out, "digraph plan {{");
    let _ = writeln!(
        out,
        "  graph [label=\"{}\", labelloc=t, fontname=\"Helvetica\", newrank=true];",
        escape(&title)
    );
    out.push_str(
        "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=10];\n",
    );
    out.push_str("  edge [fontname=\"Helvetica\", fontsize=9];\n");

    for (r, gpu) in plan.gpus.iter().enumerate() {
        let _ = writeln!(out, "  subgraph cluster_r{r} {{");
        let _ = writeln!(out, "    label=\"rank {r}\";");
        for (b, block) in gpu.blocks.iter().enumerate() {
            let mut label = format!("block {b}  channel {}", block.channel);
            // Every peer, as the text dump shows them.
            if block.send_peer.is_some() {
                let _ = write!(label, "  send -> {}", peer_list(block.send_peers()));
            }
            if block.recv_peer.is_some() {
                let _ = write!(label, "  recv <- {}", peer_list(block.recv_peers()));
            }
            let _ = writeln!(out, "    subgraph cluster_r{r}_b{b} {{");
            let _ = writeln!(
                out,
                "      label=\"{}\"; style=rounded; color=\"#999999\";",
                escape(&label)
            );
            for (i, op) in block.ops.iter().enumerate() {
                let id = OpRef {
                    rank: r as u32,
                    block: b as u32,
                    op: i as u32,
                };
                let _ = writeln!(
                    out,
                    "      {} [label=\"{}\", fillcolor=\"{}\", tooltip=\"{}\"];",
                    node(id),
                    escape(&node_label(plan, i, op)),
                    OpClass::of(op.kind).colour(),
                    escape(&format!("{} {}", id, source_name(plan, op)))
                );
            }
            for i in 1..block.ops.len() {
                let _ = writeln!(
                    out,
                    "      {} -> {};",
                    node(OpRef {
                        rank: r as u32,
                        block: b as u32,
                        op: i as u32 - 1
                    }),
                    node(OpRef {
                        rank: r as u32,
                        block: b as u32,
                        op: i as u32
                    })
                );
            }
            out.push_str("    }\n");
        }
        out.push_str("  }\n");
    }

    for (r, gpu) in plan.gpus.iter().enumerate() {
        for (b, block) in gpu.blocks.iter().enumerate() {
            for (i, op) in block.ops.iter().enumerate() {
                for d in &op.deps {
                    let exists = gpu
                        .blocks
                        .get(d.block() as usize)
                        .is_some_and(|x| (d.op() as usize) < x.ops.len());
                    if !exists {
                        continue;
                    }
                    let _ = writeln!(
                        out,
                        "  {} -> {} [style=dashed, color=\"#888888\"];",
                        node(OpRef {
                            rank: r as u32,
                            block: d.block(),
                            op: d.op()
                        }),
                        node(OpRef {
                            rank: r as u32,
                            block: b as u32,
                            op: i as u32
                        })
                    );
                }
            }
        }
    }

    for t in transfers(plan) {
        let _ = writeln!(
            out,
            "  {} -> {} [color=\"{}\", penwidth=2, tooltip=\"{}\"];",
            node(t.from),
            node(t.to),
            via_colour(t.via),
            escape(&format!(
                "{} -> {}, channel {}, {} chunks, via {}",
                t.from,
                t.to,
                t.channel,
                t.count,
                via_name(t.via)
            ))
        );
    }
    out.push_str("}\n");
    out
}

fn node(id: OpRef) -> String {
    format!("r{}_b{}_o{}", id.rank, id.block, id.op)
}

/// `2 copy` over `input[0..1] -> tmp[0..1]` (what a receive-only op fills is its dst).
fn node_label(plan: &Plan, i: usize, op: &Op) -> String {
    let src = op.src.map(|s| slice_name(plan, s, op.count));
    let dst = op.dst.map(|s| slice_name(plan, s, op.count));
    let chunks = match (src, dst) {
        (Some(s), Some(d)) => format!("{s} -> {d}"),
        (Some(s), None) => s,
        (None, Some(d)) => format!("-> {d}"),
        (None, None) => format!("{} chunks", op.count),
    };
    let mut label = format!("{i} {}\n{chunks}", op.kind.long_name());
    if let Some(g) = op.group {
        let _ = write!(label, "\ngroup {g}");
    }
    label
}

/// A colour's name for the legend in the title.
fn colour_word(hex: &str) -> &'static str {
    match hex {
        "#009E73" => "green",
        "#0072B2" => "blue",
        "#D55E00" => "orange",
        "#B2182B" => "red",
        _ => "grey",
    }
}

/// Escapes text for a DOT double-quoted string. Backslashes are doubled because Graphviz
/// reads `\n`, `\l`, `\N` inside labels as escapes; line breaks become `\n` (centred).
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dump::fixture;

    #[test]
    fn edges_of_ring3() {
        let d = dot(&fixture::ring3());
        assert!(d.starts_with("digraph plan {\n") && d.ends_with("}\n"));
        // One cluster per rank.
        for r in 0..3 {
            assert!(d.contains(&format!("subgraph cluster_r{r} {{")));
        }
        // Block order.
        assert!(d.contains("      r0_b0_o0 -> r0_b0_o1;\n"));
        assert!(d.contains("      r2_b1_o0 -> r2_b1_o1;\n"));
        // Dependencies, dashed, from the op waited on.
        assert!(d.contains("  r0_b0_o2 -> r0_b1_o0 [style=dashed"));
        assert!(d.contains("  r1_b0_o4 -> r1_b1_o1 [style=dashed"));
        // Transfers: rank r's k-th send lands in rank r+1's k-th receive, in switch blue.
        assert!(d.contains("  r0_b0_o0 -> r1_b0_o1 [color=\"#0072B2\""));
        assert!(d.contains("  r2_b0_o3 -> r0_b0_o4 [color=\"#0072B2\""));
        assert_eq!(d.matches("penwidth=2").count(), 12);
        // Labels: kind and chunks; the group shows.
        assert!(d.contains("label=\"1 reduce\\ntmp[0..1] -> output[0..1]\\ngroup 1\""));
    }

    #[test]
    fn blocks_of_several_peers_show_every_peer_and_transfer() {
        let d = dot(&fixture::head_of_three());
        assert!(
            d.contains("label=\"block 0  channel 0  send -> 1, 2  recv <- 1, 2\";"),
            "{d}"
        );
        // Rank 0's one op sends to both leaves, and receives from both.
        for edge in [
            "  r0_b0_o0 -> r1_b0_o1 [",
            "  r0_b0_o0 -> r2_b0_o1 [",
            "  r1_b0_o0 -> r0_b0_o0 [",
            "  r2_b0_o0 -> r0_b0_o0 [",
        ] {
            assert!(d.contains(edge), "{edge}\n{d}");
        }
        assert_eq!(d.matches("penwidth=2").count(), 4);
    }

    #[test]
    fn labels_are_escaped() {
        let mut plan = fixture::ring3();
        plan.name = "a \"quoted\" \\ name".into();
        plan.sources[0] = "dir\\x.coll:1:1\n\"".into();
        plan.buffers[2].name = "t\"mp".into();
        let d = dot(&plan);
        assert!(d.contains("a \\\"quoted\\\" \\\\ name"));
        assert!(d.contains("dir\\\\x.coll:1:1\\n\\\""));
        assert!(d.contains("t\\\"mp[0..1]"));
        // Every line is balanced in unescaped quotes.
        for line in d.lines() {
            let mut quotes = 0;
            let mut escaped = false;
            for c in line.chars() {
                match (escaped, c) {
                    (true, _) => escaped = false,
                    (false, '\\') => escaped = true,
                    (false, '"') => quotes += 1,
                    _ => {}
                }
            }
            assert_eq!(quotes % 2, 0, "{line}");
        }
    }

    #[test]
    fn dangling_deps_are_skipped() {
        let mut plan = fixture::ring3();
        let op = &mut plan.gpus[0].blocks[1].ops[0];
        op.deps = op
            .deps
            .iter()
            .copied()
            .chain([crate::plan::Dep(9, 9)])
            .collect();
        assert!(!dot(&plan).contains("r0_b9_o9"));
    }
}
