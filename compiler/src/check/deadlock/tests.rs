//! Tests of the deadlock simulation.

use super::*;
use crate::check::testing::{Builder, ring};
use crate::plan::OpKind::{Copy, Recv, RecvReduceCopySend, RecvReduceSend, Send};

fn deadlock(plan: &Plan, slots: u32) -> Deadlock {
    match simulate(plan, slots) {
        Ok(s) => panic!("expected a deadlock, got a schedule of {} rounds", s.rounds),
        Err(d) => d,
    }
}

fn schedule(plan: &Plan, slots: u32) -> Schedule {
    match simulate(plan, slots) {
        Ok(s) => s,
        Err(d) => panic!("unexpected {d}"),
    }
}

#[test]
fn ping_pong_runs_in_four_rounds() {
    let mut b = Builder::new(2);
    let b0 = b.block(0, 0, Some(1), Some(1));
    let b1 = b.block(1, 0, Some(0), Some(0));
    b.op(0, b0, Send, &[]);
    b.op(0, b0, Recv, &[]);
    b.op(1, b1, Recv, &[]);
    b.op(1, b1, Send, &[]);
    let s = schedule(&b.build(), 1);
    assert_eq!(s.step, vec![vec![vec![0, 3]], vec![vec![1, 2]]]);
    assert_eq!(s.rounds, 4);
    assert_eq!(s.ops_per_round(), vec![1, 1, 1, 1]);
    assert_eq!(
        s.by_round()[2],
        vec![OpRef {
            rank: 1,
            block: 0,
            op: 1
        }]
    );
    assert_eq!(s.round_of(0, 0, 1), Some(3));
    assert_eq!(s.round_of(0, 1, 0), None);
}

#[test]
fn empty_plan_takes_no_rounds() {
    let mut b = Builder::new(2);
    b.block(0, 0, None, None);
    let s = schedule(&b.build(), 1);
    assert_eq!(s.rounds, 0);
    assert!(s.by_round().is_empty());
}

#[test]
fn crossed_receives_deadlock() {
    let mut b = Builder::new(2);
    let b0 = b.block(0, 0, Some(1), Some(1));
    let b1 = b.block(1, 0, Some(0), Some(0));
    b.op(0, b0, Recv, &[]); // t.coll:1:1
    b.op(0, b0, Send, &[]);
    b.op(1, b1, Recv, &[]); // t.coll:3:1
    b.op(1, b1, Send, &[]);
    let d = deadlock(&b.build(), 8);
    assert!(d.closed);
    assert_eq!(d.round, 0);
    assert_eq!(
        d.cycle
            .iter()
            .map(|w| (w.rank, w.block, w.op, w.waits_for))
            .collect::<Vec<_>>(),
        vec![
            (
                0,
                0,
                0,
                WaitReason::Recv {
                    peer: 1,
                    channel: 0
                }
            ),
            (
                1,
                0,
                0,
                WaitReason::Recv {
                    peer: 0,
                    channel: 0
                }
            ),
        ]
    );
    assert_eq!(
        d.to_string(),
        "deadlock with 8 slots per connection: \
             rank 0, block 0, op 0 (t.coll:1:1) waits to receive from rank 1 on channel 0 -> \
             rank 1, block 0, op 0 (t.coll:3:1) waits to receive from rank 0 on channel 0 -> \
             back to the start"
    );
}

#[test]
fn cycle_through_deps_of_one_rank() {
    let mut b = Builder::new(1);
    let b0 = b.block(0, 0, None, None);
    let b1 = b.block(0, 0, None, None);
    b.op(0, b0, Copy, &[]);
    b.op(0, b0, Copy, &[(b1, 1)]); // t.coll:2:1
    b.op(0, b1, Copy, &[(b0, 0)]);
    b.op(0, b1, Copy, &[(b0, 1)]); // t.coll:4:1
    let d = deadlock(&b.build(), 1);
    assert!(d.closed);
    assert_eq!(d.round, 2);
    assert_eq!(
        d.to_string(),
        "deadlock with 1 slot per connection: \
             rank 0, block 0, op 1 (t.coll:2:1) waits for block 1, op 1 -> \
             rank 0, block 1, op 1 (t.coll:4:1) waits for block 0, op 1 -> \
             back to the start"
    );
}

#[test]
fn deps_order_blocks_of_a_rank() {
    let mut b = Builder::new(1);
    let b0 = b.block(0, 0, None, None);
    let b1 = b.block(0, 0, None, None);
    b.op(0, b0, Copy, &[(b1, 1)]);
    b.op(0, b1, Copy, &[]);
    b.op(0, b1, Copy, &[]);
    let s = schedule(&b.build(), 1);
    // A dep must have run in an earlier round.
    assert_eq!(s.step, vec![vec![vec![2], vec![0, 1]]]);
}

/// Rank 0 sends twice on channel 0, then (after its second send) once on channel 1;
/// rank 1 receives on channel 0 only after its channel 1 receive.
fn two_sends_before_the_peer_listens() -> Plan {
    let mut b = Builder::new(2);
    let s0 = b.block(0, 0, Some(1), None);
    let s1 = b.block(0, 1, Some(1), None);
    let r0 = b.block(1, 0, None, Some(0));
    let r1 = b.block(1, 1, None, Some(0));
    b.op(0, s0, Send, &[]);
    b.op(0, s0, Send, &[]); // t.coll:2:1
    b.op(0, s1, Send, &[(s0, 1)]); // t.coll:3:1
    b.op(1, r0, Recv, &[(r1, 0)]); // t.coll:4:1
    b.op(1, r0, Recv, &[]);
    b.op(1, r1, Recv, &[]); // t.coll:6:1
    b.build()
}

#[test]
fn one_slot_deadlocks_where_two_do_not() {
    let plan = two_sends_before_the_peer_listens();
    let s = schedule(&plan, 2);
    assert_eq!(
        s.step,
        vec![vec![vec![0, 1], vec![2]], vec![vec![4, 5], vec![3]]]
    );
    assert_eq!(s.rounds, 6);

    let d = deadlock(&plan, 1);
    assert!(d.closed);
    assert_eq!(
        d.to_string(),
        "deadlock with 1 slot per connection: \
             rank 0, block 0, op 1 (t.coll:2:1) waits for a free slot to send to rank 1 \
             on channel 0 -> \
             rank 1, block 0, op 0 (t.coll:4:1) waits for block 1, op 0 -> \
             rank 1, block 1, op 0 (t.coll:6:1) waits to receive from rank 0 on channel 1 -> \
             rank 0, block 1, op 0 (t.coll:3:1) waits for block 0, op 1 -> \
             back to the start"
    );
}

#[test]
fn fused_ring_needs_two_slots() {
    let plan = ring(4);
    let s = schedule(&plan, 2);
    assert_eq!(s.rounds, 7);
    assert!(s.ops_per_round().iter().all(|&c| c == 4));
    // With one slot, each rank's first recv-reduce-send waits for its successor to drain
    // a slot, and the successor waits the same way.
    let d = deadlock(&plan, 1);
    assert!(d.closed);
    assert_eq!(d.cycle.len(), 4);
    for (i, w) in d.cycle.iter().enumerate() {
        let i = i as u32;
        assert_eq!((w.rank, w.block, w.op), (i, 0, 1));
        assert_eq!(
            w.waits_for,
            WaitReason::SlotFull {
                peer: (i + 1) % 4,
                channel: 0
            }
        );
    }
}

#[test]
fn cycle_through_a_dep_and_two_connections() {
    let mut b = Builder::new(2);
    let a = b.block(0, 0, Some(1), None);
    let c = b.block(0, 0, None, Some(1));
    let d = b.block(1, 0, Some(0), Some(0));
    b.op(0, a, Send, &[(c, 0)]);
    b.op(0, a, Send, &[]);
    b.op(0, c, Recv, &[]);
    b.op(1, d, Recv, &[]);
    b.op(1, d, RecvReduceSend, &[]);
    // Rank 0's first send waits only on its dep, which waits for rank 1's send, which
    // waits for rank 0's first send.
    let dl = deadlock(&b.build(), 2);
    assert_eq!(
        dl.cycle.iter().map(|w| w.waits_for).collect::<Vec<_>>(),
        vec![
            WaitReason::Dep { block: 1, op: 0 },
            WaitReason::Recv {
                peer: 1,
                channel: 0
            },
            WaitReason::Recv {
                peer: 0,
                channel: 0
            },
        ]
    );
}

#[test]
fn invalid_plans_report_blocked_heads_without_panicking() {
    let mut b = Builder::new(2);
    let x = b.block(0, 0, Some(1), None);
    b.op(0, x, Send, &[]);
    b.op(0, x, Send, &[]);
    let mut plan = b.unchecked();
    // No receiver: the second send finds the only slot full, and no one drains it.
    let d = deadlock(&plan, 1);
    assert!(!d.closed);
    assert_eq!(d.cycle.len(), 1);
    assert!(
        d.to_string()
            .contains("these ops are blocked: rank 0, block 0, op 1")
    );
    // A dep on a block that does not exist, and a receive without a peer.
    let op = &mut plan.gpus[0].blocks[0].ops[0];
    op.deps = op
        .deps
        .iter()
        .copied()
        .chain([crate::plan::Dep(7, 0)])
        .collect();
    plan.gpus[0].blocks[0].recv_peer = None;
    plan.gpus[0].blocks[0].send_peer = None;
    let d = deadlock(&plan, 1);
    assert_eq!(d.cycle[0].waits_for, WaitReason::Dep { block: 7, op: 0 });
    plan.gpus[0].blocks[0].ops[0].deps = Box::default();
    let d = deadlock(&plan, 1);
    assert_eq!(d.cycle[0].waits_for, WaitReason::Unconnected);

    // Two blocks receiving on one connection: both are woken, and both take the message.
    let mut b = Builder::new(2);
    let x = b.block(0, 0, Some(1), None);
    let y = b.block(1, 0, None, Some(0));
    let z = b.block(1, 0, None, Some(0));
    b.op(0, x, Send, &[]);
    b.op(0, x, Send, &[]);
    b.op(1, y, Recv, &[]);
    b.op(1, z, Recv, &[]);
    let s = schedule(&b.unchecked(), 1);
    assert_eq!(s.step, vec![vec![vec![0, 2]], vec![vec![1], vec![1]]]);
}

/// A plan fixture of tests/inputs/plans, validated.
fn fixture(name: &str) -> Plan {
    let path = format!(
        "{}/../tests/inputs/plans/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    crate::plan::ValidPlan::from_json(&text)
        .map(crate::plan::ValidPlan::into_inner)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Rank 0 is the head of `n - 1` leaves: one block receives from every leaf, reduces, and
/// sends the sum back to all of them in one op; each leaf sends, then receives.
fn star(n: u32) -> Plan {
    let mut b = Builder::new(n);
    let head = b.block(0, 0, Some(1), Some(1));
    b.op(0, head, RecvReduceCopySend, &[]);
    for leaf in 1..n {
        let x = b.block(leaf, 0, Some(0), Some(0));
        b.op(leaf, x, Send, &[]);
        b.op(leaf, x, Recv, &[]);
    }
    let mut plan = b.unchecked();
    plan.gpus[0].blocks[0].send_also = (2..n).collect();
    plan.gpus[0].blocks[0].recv_also = (2..n).collect();
    plan.validate().unwrap_or_else(|e| panic!("star({n}): {e}"));
    plan
}

#[test]
fn several_peer_head_runs_in_three_rounds() {
    // Leaves send in round 0, the head takes both messages and answers both in round 1,
    // leaves receive in round 2.
    let s = schedule(&fixture("ok_head_several_peers_3.json"), 1);
    assert_eq!(
        s.step,
        vec![vec![vec![1]], vec![vec![0, 2]], vec![vec![0, 2]]]
    );
    assert_eq!(s.rounds, 3);
    // However many leaves: one message from each, one to each, in the same three rounds.
    for n in [3, 9, 64] {
        let s = schedule(&star(n), 1);
        assert_eq!(s.rounds, 3, "star({n})");
        assert_eq!(s.round_of(0, 0, 0), Some(1));
        assert_eq!(s.ops_per_round(), vec![n - 1, 1, n - 1]);
    }
}

#[test]
fn several_peer_head_waits_for_every_peer() {
    // Rank 2 receives before it sends: the head has rank 1's message but not rank 2's.
    let mut plan = fixture("ok_head_several_peers_3.json");
    plan.gpus[2].blocks[0].ops.swap(0, 1);
    plan.validate().unwrap_or_else(|e| panic!("{e}"));
    let d = deadlock(&plan, 4);
    assert!(d.closed);
    assert_eq!(
        d.cycle
            .iter()
            .map(|w| (w.rank, w.block, w.op, w.waits_for))
            .collect::<Vec<_>>(),
        vec![
            (
                0,
                0,
                0,
                WaitReason::Recv {
                    peer: 2,
                    channel: 0
                }
            ),
            (
                2,
                0,
                0,
                WaitReason::Recv {
                    peer: 0,
                    channel: 0
                }
            ),
        ]
    );
    assert_eq!(
        d.to_string(),
        "deadlock with 4 slots per connection: \
             rank 0, block 0, op 0 (head.coll:1:1) waits to receive from rank 2 on channel 0 -> \
             rank 2, block 0, op 0 (head.coll:2:1) waits to receive from rank 0 on channel 0 -> \
             back to the start"
    );

    // Rank 2 never sends (the plan no longer validates): the head still waits for it, and
    // the report names the head and the peer it waits for.
    let mut plan = fixture("ok_head_several_peers_3.json");
    plan.gpus[2].blocks[0].ops.remove(0);
    assert!(plan.validate().is_err());
    let d = deadlock(&plan, 1);
    let head = d
        .cycle
        .iter()
        .find(|w| (w.rank, w.block, w.op) == (0, 0, 0))
        .unwrap_or_else(|| panic!("the head is not named: {d}"));
    assert_eq!(
        head.waits_for,
        WaitReason::Recv {
            peer: 2,
            channel: 0
        }
    );
    assert!(
        d.to_string()
            .contains("rank 0, block 0, op 0 (head.coll:1:1) waits to receive from rank 2"),
        "{d}"
    );
}

#[test]
fn several_peer_send_waits_for_a_slot_on_every_connection() {
    // Rank 0 sends twice to ranks 1 and 2; rank 1 receives at once, rank 2 after two copies.
    let mut b = Builder::new(3);
    let x = b.block(0, 0, Some(1), None);
    b.op(0, x, Send, &[]);
    b.op(0, x, Send, &[]);
    let y = b.block(1, 0, None, Some(0));
    b.op(1, y, Recv, &[]);
    b.op(1, y, Recv, &[]);
    let z = b.block(2, 0, None, Some(0));
    b.op(2, z, Copy, &[]);
    b.op(2, z, Copy, &[]);
    b.op(2, z, Recv, &[]);
    b.op(2, z, Recv, &[]);
    let mut plan = b.unchecked();
    plan.gpus[0].blocks[0].send_also = vec![2];
    plan.validate().unwrap_or_else(|e| panic!("{e}"));
    // With one slot, the second send waits for rank 2's first receive (round 2), though
    // rank 1's slot is free from round 1 on.
    let s = schedule(&plan, 1);
    assert_eq!(
        s.step,
        vec![vec![vec![0, 3]], vec![vec![1, 4]], vec![vec![0, 1, 2, 4]]]
    );
    let s = schedule(&plan, 2);
    assert_eq!(
        s.step,
        vec![vec![vec![0, 1]], vec![vec![1, 2]], vec![vec![0, 1, 2, 3]]]
    );
    // No slots: the send waits for its first connection, and names it.
    let d = deadlock(&plan, 0);
    assert_eq!(
        d.cycle[0].waits_for,
        WaitReason::SlotFull {
            peer: 1,
            channel: 0
        }
    );
}

#[test]
fn ring_simulation_scales() {
    let n = if cfg!(debug_assertions) { 256 } else { 1024 };
    let plan = ring(n);
    let start = std::time::Instant::now();
    let s = schedule(&plan, 2);
    let took = start.elapsed();
    // 2n - 1 ops per rank, one per round.
    assert_eq!(s.rounds, 2 * n - 1);
    assert_eq!(s.round_of(n - 1, 0, 2 * n - 2), Some(2 * n - 2));
    if !cfg!(debug_assertions) {
        assert!(took.as_secs_f64() < 0.5, "ring n = {n} took {took:?}");
    }
}

/// The full-size ring in a debug build (a few seconds); release runs it above.
#[test]
#[ignore]
fn ring_1024() {
    let plan = ring(1024);
    let start = std::time::Instant::now();
    let s = schedule(&plan, 8);
    eprintln!(
        "ring n = 1024: {} rounds in {:?}",
        s.rounds,
        start.elapsed()
    );
    assert_eq!(s.rounds, 2047);
}

/// Every shipped algorithm compiled for `n` ranks (on a cluster of 8-GPU nodes where it
/// needs a network), `name` with its plan.
fn shipped(n: u32) -> Vec<(String, Plan)> {
    let paths = crate::check::testing::shipped_algorithms();
    let options = crate::CompileOptions {
        limits: crate::check::Limits {
            max_blocks: 1024,
            ..Default::default()
        },
        ..Default::default()
    };
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read(&path).expect("readable");
            let m = coll_lang::load_bytes("a.coll", text).expect("valid");
            let name = if m.file.text().contains("needs net") {
                format!("cluster:{}x8", n / 8)
            } else {
                format!("nvswitch:{n}")
            };
            let topo = crate::topology::Topology::preset(&name).expect("a preset");
            let c = crate::compile(&m, &topo, &options)
                .unwrap_or_else(|d| panic!("{}: {}", path.display(), d.render()));
            (path.display().to_string(), (*c.lowered.plan).clone())
        })
        .collect()
}

/// The rounds on several threads are the serial loop's: the same schedule, or the same
/// deadlock, for every shipped algorithm, a ring whose one slot deadlocks, rings of
/// fewer ranks than parts, and heads of several peers; in any number of parts.
#[test]
fn rounds_on_several_threads_are_the_serial_rounds() {
    let mut plans = shipped(16);
    plans.extend([
        (
            "crossed".to_string(),
            fixture("crossed_send_recv_deadlock.json"),
        ),
        (
            "three sends".to_string(),
            fixture("deadlock_three_sends_two_slots.json"),
        ),
        ("ring(64)".to_string(), ring(64)),
        ("ring(3)".to_string(), ring(3)),
        ("star(9)".to_string(), star(9)),
        (
            "two sends before the peer listens".to_string(),
            two_sends_before_the_peer_listens(),
        ),
    ]);
    let mut deadlocks = 0;
    for (name, plan) in &plans {
        for slots in [1, 2, 8] {
            let serial = simulate_in(plan, slots, Some(1));
            deadlocks += usize::from(serial.is_err());
            for parts in [2, 3, 7] {
                assert_eq!(
                    simulate_in(plan, slots, Some(parts)),
                    serial,
                    "{name}, {slots} slots, {parts} parts"
                );
            }
        }
    }
    assert!(deadlocks >= 2, "{deadlocks}");
}
