//! `coll compile --explain`: why a plan's blocks exist and what bounds its schedule.
//!
//! Three parts: the scheduler's record ([`ScheduleNote`]: the candidates with their rounds,
//! blocks and predicted times, and its notes); per rank and block, the connection sides it
//! serves and why they share it (first-fit packing, merged for fusion, merged to fit the
//! block limit); and the critical path of the deadlock simulation, walked back from the last
//! op through whatever made each op wait: the op before it in its block, a dep, the message
//! it receives, or the receive that freed the slot it sends into — the one that finished
//! last, which is the round before, in a synchronous simulation.
//!
//! [`explain_costs`] adds the cost model's view: at the smallest and largest of the sizes
//! candidates are compared at, the chain of ops that bounds the predicted time, each with
//! when it began and ended and what it waited for, so a chain of store-and-forward hops, a
//! block busy with other work or a shared link shows where the predicted time goes.
//!
//! The text is stable (no timings of this machine) so it can be snapshot-tested.

use super::choose::{Channels, PREDICT_SIZES, Packing, ScheduleNote};
use crate::check::Schedule;
use crate::dump::{peer_list, slice_name, source_name};
use crate::ids::RankId;
use crate::plan::{Block, Op, Plan, Via};
use crate::predict::{self, LoadOf, PredictError};
use crate::topology::Topology;
use rustc_hash::FxHashMap as HashMap;
use std::fmt::Write;

/// The explanation of `plan`, whose deadlock simulation with `slots` slots is `sim`.
pub fn explain(plan: &Plan, sim: &Schedule, slots: u32) -> String {
    let mut out = String::new();
    match &plan.schedule {
        Some(note) => candidates(note, &mut out),
        None => {
            out.push_str("schedule: not recorded (a plan from a file, or no candidate passed)\n")
        }
    }
    blocks(plan, &mut out);
    critical_path(plan, sim, slots, &mut out);
    out
}

/// What a candidate's blocks add to their packing's name.
fn several(peers: bool) -> &'static str {
    if peers { " with several peers" } else { "" }
}

fn candidates(note: &ScheduleNote, out: &mut String) {
    let _ = writeln!(
        out,
        "schedule: {} order, {} blocks{}, {} channels, {}, {} rounds",
        note.order.name(),
        note.packing.name(),
        several(note.several_peers),
        note.channels.name(),
        if note.hoisted {
            "sends hoisted"
        } else {
            "no hoisting"
        },
        note.rounds
    );
    out.push_str(
        "candidates (predicted by the alpha-beta model, ops timed as a dataflow with links shared \
         as in the simulated rounds; the smallest sum of time ratios to the best at each size \
         wins):\n",
    );
    out.push_str(
        "| channels | order | blocks by | rounds | blocks | 8 B (µs) | 1 MiB (µs) | 1 GiB (µs) | |\n",
    );
    out.push_str("|---|---|---|---:|---:|---:|---:|---:|---|\n");
    for c in &note.candidates {
        let us = |i: usize| {
            c.predicted_ns
                .get(i)
                .map_or("-".to_string(), |&ns| format!("{:.2}", ns as f64 / 1000.0))
        };
        let opt = |x: Option<u32>| x.map_or("-".to_string(), |v| v.to_string());
        let what = if c.chosen {
            "chosen".to_string()
        } else {
            c.rejected.clone().unwrap_or_default()
        };
        let _ = writeln!(
            out,
            "| {} | {} | {}{} | {} | {} | {} | {} | {} | {} |",
            c.channels.name(),
            c.order.name(),
            c.packing.name(),
            several(c.several_peers),
            opt(c.rounds),
            opt(c.blocks),
            us(0),
            us(1),
            us(2),
            what.replace('\n', " ")
        );
    }
    for n in &note.notes {
        let _ = writeln!(out, "note: {n}");
    }
}

/// Why one block exists.
fn block_reason(block: &Block, packing: Option<Packing>, channels: Channels) -> String {
    let fused = block
        .ops
        .iter()
        .filter(|o| o.kind.receives() && o.kind.sends())
        .count();
    // Every peer, as the text dump shows them (`send -> 1, 2`).
    let mut sides = Vec::new();
    if block.send_peer.is_some() {
        sides.push(format!("send -> {}", peer_list(block.send_peers())));
    }
    if block.recv_peer.is_some() {
        sides.push(format!("recv <- {}", peer_list(block.recv_peers())));
    }
    let both = sides.len() == 2;
    let mut why = if sides.is_empty() {
        "local ops only".to_string()
    } else {
        sides.join(", ")
    };
    why.push_str(match (packing, both) {
        (_, false) if sides.is_empty() => "",
        (Some(Packing::FirstFit) | None, true) => ": first fit (both sides were free)",
        (Some(Packing::FirstFit) | None, false) => ": first fit",
        (Some(_), false) => ": its own connection side",
        (Some(_), true) if fused > 0 => {
            ": merged so receives fuse with the sends that forward them"
        }
        (Some(_), true) => ": merged to stay within the block limit",
    });
    if both && fused > 0 {
        let _ = write!(why, " ({fused} fused)");
    }
    if block.several_peers() {
        why.push_str(
            "; several peers: each send goes to all of them, each receive combines one message \
             from each",
        );
    }
    // The compiler's channels are numbered above every hinted one, so a channel here may
    // be either where the schedule chose them.
    if block.channel > 0 {
        let _ = write!(
            why,
            "; channel {} from a `with channel` or an instance{}",
            block.channel,
            match channels {
                Channels::Program => "",
                Channels::Compiler | Channels::Renamed => ", or the compiler's channels",
                Channels::Chunks | Channels::Split => ", or the channel of its chunk",
            }
        );
    }
    why
}

fn blocks(plan: &Plan, out: &mut String) {
    let packing = plan.schedule.as_ref().map(|s| s.packing);
    let channels = plan
        .schedule
        .as_ref()
        .map_or(Channels::Program, |s| s.channels);
    out.push_str("blocks:\n");
    for g in &plan.gpus {
        let _ = writeln!(out, "rank {}", g.rank);
        for (bi, b) in g.blocks.iter().enumerate() {
            let _ = writeln!(
                out,
                "  block {bi}  channel {}  {} op{}  {}",
                b.channel,
                b.ops.len(),
                if b.ops.len() == 1 { "" } else { "s" },
                block_reason(b, packing, channels)
            );
        }
    }
}

/// The cost model's critical path of `plan` on `topo` for the deadlock simulation `sim`
/// (which says what shares a link or memory), at the smallest and the largest size the
/// scheduler compares candidates at: each op on the path with when it began and ended, what
/// held it back, and how many ops of its step share its link or memory.
pub fn explain_costs(plan: &Plan, topo: &Topology, sim: &Schedule) -> Result<String, PredictError> {
    let steps = |r: u32, b: u32, o: u32| sim.round_of(r, b, o);
    let model = predict::Compiled::new(plan, topo, &steps, &predict::Model::default())?;
    let mut out = String::new();
    for size in [PREDICT_SIZES[0], PREDICT_SIZES[PREDICT_SIZES.len() - 1]] {
        let path = model.critical_path(size);
        let total = model.at(size).time_us;
        let _ = writeln!(
            out,
            "predicted critical path at {} (dataflow model: each op begins when what it waits \
             for has ended; {total:.2} µs, {} ops):",
            size_name(size),
            path.len()
        );
        if let Some(b) = model.busiest(size)
            && b.time.total() >= total - 1e-9
            && path.last().is_none_or(|p| b.time.total() > p.end_us + 1e-9)
        {
            let what = match b.of {
                LoadOf::Link { link, forward } => match topo.link(link) {
                    Some((a, z, _)) => {
                        let (a, z) = if forward { (a, z) } else { (z, a) };
                        let name = |d| topo.device(d).map_or("?".to_string(), |d| d.to_string());
                        format!("the link from {} to {}", name(a), name(z))
                    }
                    None => "a link".to_string(),
                },
                LoadOf::Memory { rank } => format!("the memory of rank {rank}'s GPU"),
            };
            let _ = writeln!(
                out,
                "bounded by {what}: {} transfers or local ops, {:.2} µs at its full bandwidth, \
                 longer than the path below",
                b.items,
                b.time.total()
            );
        }
        out.push_str(
            "| begins (µs) | ends (µs) | op | waited for (how many ops share its link or memory) |\n",
        );
        out.push_str("|---:|---:|---|---|\n");
        for p in path {
            let at = (p.op.rank, p.op.block, p.op.op);
            // The route the model costed (a hand-written plan may not say its connection's).
            // Every peer a send of a block of several peers goes to, each with its route.
            let peers: Vec<String> = op_at(plan, at)
                .filter(|(_, op)| op.kind.sends())
                .map(|(b, _)| {
                    b.send_peers()
                        .map(|q| match topo.route(RankId(p.op.rank), RankId(q)) {
                            Some(r) => format!("{q} ({})", Via::from(r.kind)),
                            None => q.to_string(),
                        })
                        .collect()
                })
                .unwrap_or_default();
            let peer = match peers.len() {
                0 => String::new(),
                1 => format!(" to rank {}", peers.join("")),
                _ => format!(" to ranks {}", peers.join(", ")),
            };
            // The peer goes before the source comment that ends the op's description.
            let op = describe(plan, at);
            let op = match op.split_once("  # ") {
                Some((what, source)) => format!("{what}{peer}  # {source}"),
                None => format!("{op}{peer}"),
            };
            let _ = writeln!(
                out,
                "| {:.2} | {:.2} | {op} | {} ({}) |",
                p.begin_us,
                p.end_us,
                p.waited.describe(),
                p.sharing
            );
        }
    }
    Ok(out)
}

/// `8 B`, `1 GiB`: a size as the candidates table heads it.
fn size_name(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

type At = (u32, u32, u32);

fn op_at(plan: &Plan, (r, b, o): At) -> Option<(&Block, &Op)> {
    let block = plan.gpus.get(r as usize)?.blocks.get(b as usize)?;
    Some((block, block.ops.get(o as usize)?))
}

fn describe(plan: &Plan, at: At) -> String {
    let Some((_, op)) = op_at(plan, at) else {
        return format!("rank {} block {} op {}", at.0, at.1, at.2);
    };
    let data = op
        .src
        .or(op.dst)
        .map(|s| format!(" {}", slice_name(plan, s, op.count)))
        .unwrap_or_default();
    format!(
        "rank {} block {} op {}  {}{data}  # {}",
        at.0,
        at.1,
        at.2,
        op.kind.long_name(),
        source_name(plan, op)
    )
}

fn critical_path(plan: &Plan, sim: &Schedule, slots: u32, out: &mut String) {
    // Sends and receives of each connection (from, to, channel), in block order, and each
    // op's index among them.
    let mut sends: HashMap<(u32, u32, u32), Vec<At>> = HashMap::default();
    let mut recvs: HashMap<(u32, u32, u32), Vec<At>> = HashMap::default();
    let mut index: HashMap<(At, bool), usize> = HashMap::default();
    for g in &plan.gpus {
        for (bi, b) in g.blocks.iter().enumerate() {
            for (oi, op) in b.ops.iter().enumerate() {
                let at = (g.rank, bi as u32, oi as u32);
                // A block's k-th send is the k-th on each of its connections (one per
                // peer), so the index is the same on all of them.
                if op.kind.sends() {
                    for q in b.send_peers() {
                        let list = sends.entry((g.rank, q, b.channel)).or_default();
                        index.insert((at, true), list.len());
                        list.push(at);
                    }
                }
                if op.kind.receives() {
                    for p in b.recv_peers() {
                        let list = recvs.entry((p, g.rank, b.channel)).or_default();
                        index.insert((at, false), list.len());
                        list.push(at);
                    }
                }
            }
        }
    }
    let round = |at: At| sim.round_of(at.0, at.1, at.2);
    let Some((last, _)) = sim.iter().max_by_key(|&(r, t)| (t, std::cmp::Reverse(r))) else {
        out.push_str("critical path: no ops\n");
        return;
    };
    let mut path: Vec<(At, String)> = Vec::new();
    let mut at = (last.rank, last.block, last.op);
    while let Some(((block, op), t)) = op_at(plan, at).zip(round(at)) {
        // Every cause with its round; the latest one held the op back (ties: a message,
        // then a slot, then a dep, then block order).
        let mut causes: Vec<(u32, u8, At, String)> = Vec::new();
        let mut add = |c: At, rank: u8, what: String| {
            if let Some(t) = round(c) {
                causes.push((t, rank, c, what));
            }
        };
        // A head of several peers waits for the message from every recv peer and a slot
        // to every send peer: each is a cause, named by its peer when there are several.
        if op.kind.receives() {
            let k = index.get(&(at, false)).copied();
            let many = !block.recv_also.is_empty();
            for p in block.recv_peers() {
                if let Some(&s) = k.and_then(|k| sends.get(&(p, at.0, block.channel))?.get(k)) {
                    let what = if many {
                        format!("the message it receives from rank {p}")
                    } else {
                        "the message it receives".into()
                    };
                    add(s, 3, what);
                }
            }
        }
        if op.kind.sends() {
            let k = index.get(&(at, true)).copied();
            let many = !block.send_also.is_empty();
            for q in block.send_peers() {
                let freed = k
                    .and_then(|k| k.checked_sub(slots as usize))
                    .and_then(|j| recvs.get(&(at.0, q, block.channel))?.get(j));
                if let Some(&r) = freed {
                    let what = if many {
                        format!("a free slot to rank {q} ({slots} per connection)")
                    } else {
                        format!("a free slot ({slots} per connection)")
                    };
                    add(r, 2, what);
                }
            }
        }
        for d in &op.deps {
            add((at.0, d.block(), d.op()), 1, "a dep".into());
        }
        if at.2 > 0 {
            add(
                (at.0, at.1, at.2 - 1),
                0,
                "the op before it in its block".into(),
            );
        }
        let cause = causes
            .into_iter()
            .filter(|&(ct, ..)| ct < t)
            .max_by_key(|&(ct, rank, ..)| (ct, rank));
        match cause {
            Some((_, _, c, what)) => {
                path.push((at, what));
                at = c;
            }
            None => {
                path.push((at, "nothing: it runs first".into()));
                break;
            }
        }
    }
    path.reverse();
    let _ = writeln!(
        out,
        "critical path ({} rounds; each op with what it waited for):",
        sim.rounds
    );
    for (at, why) in path {
        let t = round(at).map_or("?".to_string(), |t| t.to_string());
        let _ = writeln!(
            out,
            "  round {t:>3}  {}  (waited for {why})",
            describe(plan, at)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dump::fixture;

    #[test]
    fn a_head_of_several_peers_names_every_peer() {
        let plan = fixture::head_of_three();
        let sim = crate::check::simulate(&plan, 1).unwrap_or_else(|e| panic!("{e}"));
        let text = explain(&plan, &sim, 1);
        assert!(
            text.contains(
                "send -> 1, 2, recv <- 1, 2: first fit (both sides were free) (1 fused); several \
                 peers: each send goes to all of them, each receive combines one message from \
                 each"
            ),
            "{text}"
        );
        // Both leaves send in round 0; of the head's two messages the walk names one, by its
        // peer.
        assert!(
            text.contains(
                "round   1  rank 0 block 0 op 0  recv-reduce-copy-send input[0..1]  \
                 # head.coll:1:1  (waited for the message it receives from rank 2)"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "op 1  recv input[0..1]  # head.coll:2:1  (waited for the message it receives)"
            ),
            "{text}"
        );
    }
}
