//! The text dump: a stable, aligned listing of a plan for people and snapshot tests.
//!
//! Layout: a header (one `key  value` line each; `schedule` only for plans that record
//! the scheduler's choice), then per rank its blocks, each with a
//! line naming its channel, peers, channel kinds and protocol override, then one line per
//! op: index, kind, `src -> dst` in plan chunks, deps, group id, and `# source` last.
//! Columns are aligned within a block (aligning across the whole plan would let one long
//! scratch name widen every line of a 1000-rank dump); a column no op of the block uses is
//! left out. No line ends in spaces, and the text ends in one newline.

use super::{write_slice_name, write_source_name};
use crate::plan::{Block, Plan};
use std::fmt::Write;

/// The text dump of `plan` (see the module docs).
pub fn text(plan: &Plan) -> String {
    let mut out = String::new();
    header(plan, &mut out);
    for (r, gpu) in plan.gpus.iter().enumerate() {
        out.push('\n');
        // The rank as stored, so a misnumbered rank in a broken plan shows as such.
        if gpu.rank as usize == r {
            let _ = writeln!(out, "rank {r}");
        } else {
            let _ = writeln!(out, "rank {r} (says rank {})", gpu.rank);
        }
        if gpu.blocks.is_empty() {
            out.push_str("  (no blocks)\n");
        }
        for block in &gpu.blocks {
            block_lines(plan, block, &mut out);
        }
    }
    out
}

fn header(plan: &Plan, out: &mut String) {
    let buffers: Vec<String> = plan
        .buffers
        .iter()
        .map(|b| format!("{} {}", b.name, b.chunks))
        .collect();
    let place = if plan.inplace {
        "in-place"
    } else {
        "out-of-place"
    };
    let mut rows = vec![
        (
            "plan",
            format!("{} (format version {})", plan.name, plan.version),
        ),
        (
            "collective",
            format!("{}, {place}", plan.collective.0.name()),
        ),
        ("ranks", plan.ranks.to_string()),
        ("topology", plan.topology.clone()),
        ("protocol", plan.protocol.name().to_string()),
        ("chunk factor", plan.chunk_factor.to_string()),
        (
            "buffers",
            format!("{} (chunks per rank)", buffers.join(", ")),
        ),
    ];
    if let Some(s) = &plan.schedule {
        let tried = s.candidates.iter().filter(|c| c.rounds.is_some()).count();
        rows.push((
            "schedule",
            format!(
                "{} order, {} blocks{}{}, {}, {} rounds ({tried} of {} candidates passed)",
                s.order.name(),
                s.packing.name(),
                if s.several_peers {
                    " with several peers"
                } else {
                    ""
                },
                s.channels.describe(),
                if s.hoisted {
                    "sends hoisted"
                } else {
                    "no hoisting"
                },
                s.rounds,
                s.candidates.len()
            ),
        ));
    }
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in rows {
        let _ = writeln!(out, "{k:<width$}  {v}");
    }
}

fn block_lines(plan: &Plan, block: &Block, out: &mut String) {
    let mut head = format!("  block {}  channel {}", block.id, block.channel);
    let via = |v: Option<crate::plan::Via>| v.map(|v| format!(" ({v})")).unwrap_or_default();
    // Every peer, `send -> 1, 2` for a block of several (receives combine in that order).
    if block.send_peer.is_some() {
        let peers = super::peer_list(block.send_peers());
        let _ = write!(head, "  send -> {peers}{}", via(block.send_via));
    }
    if block.recv_peer.is_some() {
        let peers = super::peer_list(block.recv_peers());
        let _ = write!(head, "  recv <- {peers}{}", via(block.recv_via));
    }
    if let Some(p) = block.protocol {
        let _ = write!(head, "  protocol {}", p.name());
    }
    out.push_str(&head);
    out.push('\n');
    if block.ops.is_empty() {
        out.push_str("    (no ops)\n");
        return;
    }

    // Columns: index, kind, src, arrow, dst, deps, group; the source goes last, unpadded.
    // Every cell of the block is written into one string and kept as its range there: a
    // string per cell cost a dump of ring allreduce at n = 1024 (2 million ops) about 16
    // million allocations.
    const COLS: usize = 8;
    let mut text = String::new();
    let mut rows: Vec<[std::ops::Range<usize>; COLS]> = Vec::with_capacity(block.ops.len());
    let mut width = [0usize; COLS];
    for (i, op) in block.ops.iter().enumerate() {
        let mut cells: [std::ops::Range<usize>; COLS] = Default::default();
        let mut cell = |c: usize, text: &mut String, write: &mut dyn FnMut(&mut String)| {
            let start = text.len();
            write(text);
            width[c] = width[c].max(columns(&text[start..]));
            cells[c] = start..text.len();
        };
        cell(0, &mut text, &mut |t| {
            let _ = write!(t, "{i}");
        });
        cell(1, &mut text, &mut |t| t.push_str(op.kind.long_name()));
        cell(2, &mut text, &mut |t| {
            if let Some(s) = op.src {
                write_slice_name(plan, s, op.count, t);
            }
        });
        cell(3, &mut text, &mut |t| {
            if op.dst.is_some() {
                t.push_str("->");
            }
        });
        cell(4, &mut text, &mut |t| {
            if let Some(s) = op.dst {
                write_slice_name(plan, s, op.count, t);
            }
        });
        cell(5, &mut text, &mut |t| {
            for (k, d) in op.deps.iter().enumerate() {
                let _ = write!(
                    t,
                    "{}b{}:{}",
                    if k == 0 { "after " } else { ", " },
                    d.block(),
                    d.op()
                );
            }
        });
        cell(6, &mut text, &mut |t| {
            if let Some(g) = op.group {
                let _ = write!(t, "group {g}");
            }
        });
        cell(7, &mut text, &mut |t| write_source_name(plan, op, t));
        rows.push(cells);
    }
    let pad = |out: &mut String, n: usize| out.extend(std::iter::repeat_n(' ', n));
    for cells in rows {
        out.push_str("    ");
        let [padded @ .., source] = &cells;
        for (c, (cell, &w)) in padded.iter().zip(&width).enumerate() {
            if w == 0 {
                continue; // no op of this block uses the column
            }
            let cell = &text[cell.clone()];
            let gap = w - columns(cell);
            if c == 0 {
                // Right-aligned, so op 10 lines up under op 9.
                pad(out, gap);
                out.push_str(cell);
            } else {
                out.push_str(cell);
                pad(out, gap);
            }
            // `src -> dst` reads as one phrase: single spaces around the arrow.
            let tight = (c == 2 && width[3] > 0) || c == 3;
            out.push_str(if tight { " " } else { "  " });
        }
        out.push_str("# ");
        out.push_str(&text[source.clone()]);
        out.push('\n');
    }
}

/// The columns `s` takes: its characters (names are mostly ASCII, counted by length).
fn columns(s: &str) -> usize {
    if s.is_ascii() {
        s.len()
    } else {
        s.chars().count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dump::fixture;

    #[test]
    fn ring3_exact() {
        let expected = "\
plan          ring (format version 1)
collective    allreduce, in-place
ranks         3
topology      nvswitch:3
protocol      simple
chunk factor  3
buffers       input 3, output 3, tmp 1 (chunks per rank)

rank 0
  block 0  channel 0  send -> 1 (switch)  recv <- 2 (switch)
    0  send                   input[2..3]                 # ring.coll:5:5
    1  recv-reduce-send       input[1..2]                 # ring.coll:5:5
    2  recv-reduce-copy-send  input[0..1] -> input[0..1]  # ring.coll:5:5
    3  recv-copy-send                     -> input[2..3]  # ring.coll:8:5
    4  recv                               -> input[1..2]  # ring.coll:8:5
  block 1  channel 1  protocol ll
    0  copy    input[0..1] -> tmp[0..1]     after b0:2                 # ring.coll:11:3
    1  reduce  tmp[0..1]   -> output[0..1]  after b0:4, b0:3  group 1  # ring.coll:11:3

rank 1
  block 0  channel 0  send -> 2 (switch)  recv <- 0 (switch)
    0  send                   input[0..1]                 # ring.coll:5:5
    1  recv-reduce-send       input[2..3]                 # ring.coll:5:5
    2  recv-reduce-copy-send  input[1..2] -> input[1..2]  # ring.coll:5:5
    3  recv-copy-send                     -> input[0..1]  # ring.coll:8:5
    4  recv                               -> input[2..3]  # ring.coll:8:5
  block 1  channel 1
    0  copy    input[1..2] -> tmp[0..1]     after b0:2        # ring.coll:11:3
    1  reduce  tmp[0..1]   -> output[1..2]  after b0:4, b0:3  # ring.coll:11:3

rank 2
  block 0  channel 0  send -> 0 (switch)  recv <- 1 (switch)
    0  send                   input[1..2]                 # ring.coll:5:5
    1  recv-reduce-send       input[0..1]                 # ring.coll:5:5
    2  recv-reduce-copy-send  input[2..3] -> input[2..3]  # ring.coll:5:5
    3  recv-copy-send                     -> input[1..2]  # ring.coll:8:5
    4  recv                               -> input[0..1]  # ring.coll:8:5
  block 1  channel 1
    0  copy    input[2..3] -> tmp[0..1]     after b0:2        # ring.coll:11:3
    1  reduce  tmp[0..1]   -> output[2..3]  after b0:4, b0:3  # ring.coll:11:3
";
        let got = text(&fixture::ring3());
        assert_eq!(got, expected, "got:\n{got}");
    }

    #[test]
    fn blocks_of_several_peers_show_every_peer() {
        let t = text(&fixture::head_of_three());
        assert!(
            t.contains(
                "rank 0\n  block 0  channel 0  send -> 1, 2 (switch)  recv <- 1, 2 (switch)\n"
            ),
            "{t}"
        );
        assert!(
            t.contains("rank 1\n  block 0  channel 0  send -> 0 (switch)  recv <- 0 (switch)\n"),
            "{t}"
        );
    }

    #[test]
    fn stable_and_tidy() {
        let plan = fixture::ring_allreduce(8, crate::plan::Via::Nvlink);
        let a = text(&plan);
        assert_eq!(a, text(&plan));
        assert!(a.lines().all(|l| l == l.trim_end()));
        assert!(a.ends_with("]  # ring.coll:8:5\n"));
    }

    #[test]
    fn broken_plans_dump() {
        let mut plan = fixture::ring3();
        plan.gpus[1].rank = 7;
        plan.gpus[2].blocks.clear();
        plan.gpus[0].blocks[1].ops.clear();
        plan.gpus[0].blocks[0].ops[0].source = 40;
        plan.buffers.truncate(2);
        let t = text(&plan);
        assert!(t.contains("rank 1 (says rank 7)"), "{t}");
        assert!(t.contains("rank 2\n  (no blocks)"), "{t}");
        assert!(t.contains("protocol ll\n    (no ops)"), "{t}");
        assert!(t.contains("# source #40?"), "{t}");
        assert!(t.contains("buffer2[0..1]"), "{t}");
    }
}
