//! A traced call as Chrome-trace JSON (chrome://tracing, Perfetto): one process per rank, one
//! thread per block, each op a span named by its kind and source line, from the records the
//! kernel writes when a call is traced.
//!
//! Invariant: a record is the kernel's [`TraceRec`] (its ABI, [`super::abi`]): the op's start
//! and end on the GPU's global timer (ns), its start and end on its SM's cycle counter, then
//! the cycle counter where the op's first iteration had waited for its inputs and room, moved
//! thread 0's part, and passed the barrier after it. Thread 0 of sub-CTA 0 writes it; an op
//! that never ran keeps zeros.

use super::Spread;
use super::abi::TraceRec;
use coll_compiler::plan::Plan;

/// One op's record: (rank, block, op) and what the kernel wrote.
pub type Record = ((u32, u32, u32), TraceRec);

/// The Chrome-trace JSON of `records` of a call of `plan` spread as `spread`. Times are
/// relative to the earliest start; records naming no op of the plan are left out.
pub fn chrome_json(plan: &Plan, spread: &Spread, records: &[Record]) -> String {
    let op_of = |(r, b, o): (u32, u32, u32)| {
        plan.gpus
            .get(r as usize)
            .and_then(|g| g.blocks.get(b as usize))
            .and_then(|x| x.ops.get(o as usize))
    };
    let t0 = records
        .iter()
        .filter(|s| op_of(s.0).is_some())
        .map(|s| s.1.ns[0])
        .filter(|&x| x > 0)
        .min()
        .unwrap_or(0);
    let mut events = Vec::new();
    for r in 0..plan.ranks {
        events.push(serde_json::json!({
            "name": "process_name", "ph": "M", "pid": r,
            "args": {"name": format!("rank {r} (GPU {})", spread.gpu(r))}
        }));
    }
    for &((r, b, o), e) in records {
        let [start, end] = e.ns;
        let [c_start, c_end] = e.cycles;
        let [waited, moved, passed] = e.phase;
        let Some(op) = op_of((r, b, o)) else {
            continue;
        };
        let source = plan
            .sources
            .get(op.source as usize)
            .cloned()
            .unwrap_or_default();
        events.push(serde_json::json!({
            "name": format!("{} {}", op.kind.long_name(), source),
            "cat": "op",
            "ph": "X",
            "pid": r,
            "tid": b,
            "ts": start.saturating_sub(t0) as f64 / 1e3,
            "dur": end.saturating_sub(start) as f64 / 1e3,
            // The SM's clock over the op: cycles per ns tells a slow clock from a long path
            // (the same span at 1.98 GHz, the H200's boost, is 1.98 cycles a ns). Where the
            // first iteration's cycles went, for thread 0: waiting for its inputs and room,
            // moving its part (an LL receive's poll included), and the barrier after it.
            "args": {"op": o, "chunks": op.count, "source": source,
                     "cycles": c_end.wrapping_sub(c_start),
                     "first_iteration_cycles": {"wait": waited.wrapping_sub(c_start),
                                                "move": moved.wrapping_sub(waited),
                                                "barrier": passed.wrapping_sub(moved)}},
        }));
    }
    serde_json::to_string_pretty(
        &serde_json::json!({ "traceEvents": events, "displayTimeUnit": "ns" }),
    )
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_are_relative_to_the_first_start_with_cycles_and_phases() {
        let plan = crate::cuda::shipped_plan("allreduce_ring.coll", 2);
        let spread = Spread::new(&plan, 2, 0);
        // Rank 1's op 0 starts first (global timer 1 000 ns), for 1.5 us; its cycles: 3 000
        // over the op, then waiting 200, moving 2 000, the barrier 100.
        let rec = |start: u64| TraceRec {
            ns: [start, start + 1500],
            cycles: [10_000, 13_000],
            phase: [10_200, 12_200, 12_300],
            pad: 0,
        };
        let records = [
            ((0, 0, 1), rec(3_000)),
            ((1, 0, 0), rec(1_000)),
            ((9, 0, 0), rec(1)),
        ];
        let v: serde_json::Value =
            serde_json::from_str(&chrome_json(&plan, &spread, &records)).expect("JSON");
        let ev = v["traceEvents"].as_array().expect("events");
        // Two process names, then the two ops of the plan (rank 9 names none).
        assert_eq!(ev.len(), 4);
        assert_eq!(ev[1]["args"]["name"], "rank 1 (GPU 1)");
        let (a, b) = (&ev[2], &ev[3]);
        assert_eq!((a["pid"].as_u64(), a["ts"].as_f64()), (Some(0), Some(2.0)));
        assert_eq!((b["pid"].as_u64(), b["ts"].as_f64()), (Some(1), Some(0.0)));
        assert_eq!(b["dur"].as_f64(), Some(1.5));
        assert_eq!(b["args"]["cycles"].as_u64(), Some(3000));
        let p = &b["args"]["first_iteration_cycles"];
        assert_eq!(
            (
                p["wait"].as_u64(),
                p["move"].as_u64(),
                p["barrier"].as_u64()
            ),
            (Some(200), Some(2000), Some(100))
        );
        assert!(
            a["name"]
                .as_str()
                .is_some_and(|n| n.contains("allreduce_ring.coll:")),
            "{a}"
        );
    }
}
