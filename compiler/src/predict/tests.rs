//! Tests of the cost model.

use super::*;
use crate::dump::{OpClass, fixture};
use crate::ids::RankId;
use crate::plan::{Block, Dep, Op, OpKind, Slice, ValidPlan, Via};

fn topo(spec: &str) -> Topology {
    match Topology::preset(spec) {
        Ok(t) => t,
        Err(e) => panic!("{e}"),
    }
}

fn sweep(plan: &Plan, spec: &str) -> Vec<Prediction> {
    match predict_sweep(plan, &topo(spec), &sweep_sizes(SWEEP_MIN, SWEEP_MAX)) {
        Ok(v) => v,
        Err(e) => panic!("{e}"),
    }
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * b.abs()
}

/// The ring allreduce fixture of `n` ranks over `via`, its ASAP steps, and the model of it
/// on the topology `spec`.
fn ring_model(n: u32, via: Via, spec: &str) -> (Plan, Schedule, Compiled) {
    let plan = fixture::ring_allreduce(n, via);
    let s = asap(&plan);
    let c = Compiled::new(
        &plan,
        &topo(spec),
        &|r, b, o| s.step(r, b, o),
        &Model::default(),
    )
    .expect("costs");
    (plan, s, c)
}

#[test]
fn parts_add_up_to_the_prediction() {
    let (_, _, c) = ring_model(8, Via::Switch, "nvswitch:8");
    for size in [8u64, 4096, 1 << 20, 1 << 30] {
        let parts = c.parts(size);
        assert!(close(parts.total(), c.at(size).time_us, 1e-9), "{size}");
    }
    // Latency dominates small sizes, transfer large ones.
    assert!(c.parts(8).latency_us > 100.0 * c.parts(8).transfer_us);
    assert!(c.parts(1 << 30).transfer_us > 20.0 * c.parts(1 << 30).latency_us);
}

/// The ring's time is its blocks' work in order: each rank's one block sends 2(n - 1)
/// chunks one after another, each a latency and a chunk over the link, so the dataflow
/// gives what the synchronous rounds give.
#[test]
fn a_ring_costs_its_steps_in_order() {
    let n = 4u32;
    let (_, _, c) = ring_model(n, Via::Switch, "nvswitch:4");
    let hop_latency = Topology::preset("nvswitch:4")
        .ok()
        .and_then(|t| t.route(RankId(0), RankId(1)))
        .map(|r| r.latency_us)
        .expect("a route");
    let steps = f64::from(2 * (n - 1));
    let parts = c.parts(8);
    assert!(
        close(
            parts.latency_us,
            steps * (hop_latency + Model::default().simple_latency_us),
            1e-9
        ),
        "{parts:?}"
    );
}

/// The critical path ends at the plan's time, runs forward in time, and says what each op
/// waited for; a ring's path is its chunks' hops, each op waiting for a message or its block.
#[test]
fn the_critical_path_ends_at_the_prediction() {
    let (plan, _, c) = ring_model(4, Via::Switch, "nvswitch:4");
    for size in [8u64, 1 << 20, 1 << 30] {
        let path = c.critical_path(size);
        let last = path.last().expect("a path");
        assert!(close(last.end_us, c.at(size).time_us, 1e-9), "{size}");
        assert_eq!(path[0].waited, Waited::Nothing);
        assert_eq!(path[0].begin_us, 0.0);
        for w in path.windows(2) {
            assert!(w[0].end_us <= w[1].end_us + 1e-9, "{w:?}");
            assert_ne!(w[1].waited, Waited::Nothing, "{w:?}");
        }
        for p in &path {
            assert!(p.begin_us <= p.end_us, "{p:?}");
            assert!(
                plan.gpus[p.op.rank as usize].blocks[p.op.block as usize]
                    .ops
                    .len()
                    > p.op.op as usize
            );
            // A ring step: every rank sends one message, each on links of its own.
            assert_eq!(p.sharing, 1, "{p:?}");
        }
    }
}

/// A chunk forwarded along a chain of fused ops streams: at 1 GiB it costs about one
/// transfer, where store and forward (the same chain with receives apart from sends) costs
/// a transfer per hop.
#[test]
fn a_forwarded_chunk_streams_through_fused_ops() {
    let t = topo("nvswitch:4");
    let chain = fixture::chain_broadcast(4, true);
    let apart = fixture::chain_broadcast(4, false);
    for p in [&chain, &apart] {
        p.validate().expect("a valid plan");
    }
    let at = |p: &Plan| {
        let s = asap(p);
        match Compiled::new(p, &t, &|r, b, o| s.step(r, b, o), &Model::default()) {
            Ok(c) => c.at(1 << 30).time_us,
            Err(e) => panic!("{e}"),
        }
    };
    let (fused, stored) = (at(&chain), at(&apart));
    assert!(
        stored > 2.5 * fused,
        "fused {fused} µs, store and forward {stored} µs"
    );
}

/// Transfers of different rounds that overlap in time share their link: two sends from two
/// blocks on one link, scheduled in different rounds, each get all of it in their round, but
/// the plan cannot end before the link has carried both.
#[test]
fn a_busy_link_bounds_transfers_of_different_rounds() {
    let plan = fixture::two_channel_sends();
    plan.validate().expect("a valid plan");
    let t = topo("nvswitch:2");
    // Each block's op in a round of its own: the rounds share nothing.
    let c = match Compiled::new(&plan, &t, &|_, b, _| Some(b), &Model::default()) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    let size = 1 << 30;
    let path = c.critical_path(size);
    let busiest = c.busiest(size).expect("a link carries something");
    assert_eq!(busiest.items, 2);
    assert!(matches!(busiest.of, LoadOf::Link { .. }), "{busiest:?}");
    let one = path.last().expect("a path").end_us;
    // Both chunks over the link take about twice one chunk's transfer.
    assert!(busiest.time.total() > 1.9 * one, "{busiest:?} {one}");
    assert!(close(c.at(size).time_us, busiest.time.total(), 1e-12));
    assert!(close(c.parts(size).total(), busiest.time.total(), 1e-12));
    // At 8 B one transfer's latency is nearly all of it: the link's load adds a few bytes.
    assert!(close(
        c.at(8).time_us,
        c.critical_path(8).last().expect("a path").end_us,
        1e-3
    ));
}

#[test]
fn calibration_recovers_known_factors() {
    // Measurements made as 2.5 × latency + 1.25 × transfer, with ±1% noise.
    let parts = [
        (40.0, 0.1),
        (40.0, 10.0),
        (40.0, 1000.0),
        (40.0, 20000.0),
        (20.0, 5.0),
    ];
    let noise = [1.01, 0.99, 1.0, 1.005, 0.995];
    let points: Vec<(f64, f64, f64)> = parts
        .iter()
        .zip(noise)
        .map(|(&(x, y), e)| (x, y, (2.5 * x + 1.25 * y) * e))
        .collect();
    let c = calibrate(&points).expect("two parts to fit");
    assert!(close(c.latency, 2.5, 0.05), "{c:?}");
    assert!(close(c.transfer, 1.25, 0.02), "{c:?}");
    assert!(c.fixed_us < 2.0, "{c:?}");
    assert!(c.rel_rms < 0.02, "{c:?}");
    let parts = Time {
        latency_us: 40.0,
        transfer_us: 1000.0,
    };
    assert!(close(c.time_us(parts), 1350.0, 1e-2));
    // One point, or points that cannot separate the parts, give nothing.
    assert_eq!(calibrate(&points[..1]), None);
    // Pure latency: the transfer factor is not made negative.
    let flat = calibrate(&[(10.0, 1.0, 30.0), (10.0, 2.0, 30.0), (10.0, 3.0, 30.0)]).expect("fits");
    assert!(
        flat.transfer >= 0.0 && flat.latency >= 0.0 && flat.fixed_us >= 0.0,
        "{flat:?}"
    );
    assert!(flat.rel_rms < 1e-9, "{flat:?}");
}

/// A cost every call pays whatever the plan (a kernel launch) is the fit's fixed term, and
/// with it the factors of the plan's parts come out as they were made.
#[test]
fn calibration_finds_the_cost_of_every_call() {
    let points: Vec<(f64, f64, f64)> = [(10.0, 0.5), (20.0, 4.0), (10.0, 100.0), (30.0, 5000.0)]
        .iter()
        .map(|&(x, y)| (x, y, 8.0 + 1.5 * x + 1.8 * y))
        .collect();
    let c = calibrate(&points).expect("fits");
    assert!(close(c.fixed_us, 8.0, 1e-6), "{c:?}");
    assert!(close(c.latency, 1.5, 1e-6), "{c:?}");
    assert!(close(c.transfer, 1.8, 1e-6), "{c:?}");
    assert!(c.rel_rms < 1e-9, "{c:?}");
    // Two points fit, with every factor non-negative.
    let two = calibrate(&points[..2]).expect("fits");
    assert!(
        two.fixed_us >= 0.0 && two.latency >= 0.0 && two.transfer >= 0.0,
        "{two:?}"
    );
}

#[test]
fn sizes_are_powers_of_two() {
    let s = sweep_sizes(SWEEP_MIN, SWEEP_MAX);
    assert_eq!(s.len(), 28);
    assert_eq!((s[0], s[27]), (8, 1 << 30));
    assert_eq!(sweep_sizes(5, 40), vec![8, 16, 32]);
    assert_eq!(sweep_sizes(0, 2), vec![1, 2]);
    assert_eq!(sweep_sizes(u64::MAX, u64::MAX), Vec::<u64>::new());
    assert_eq!(sweep_sizes(1 << 63, u64::MAX), vec![1 << 63]);
}

#[test]
fn asap_of_a_ring_is_one_op_per_step() {
    let plan = fixture::ring_allreduce(8, Via::Switch);
    let s = asap(&plan);
    for r in 0..8 {
        for o in 0..15 {
            assert_eq!(s.step(r, 0, o), Some(o), "rank {r} op {o}");
        }
        assert_eq!(s.step(r, 0, 15), None);
    }
    assert_eq!(s.step(8, 0, 0), None);
    assert_eq!((s.len(), s.unscheduled()), (15, 0));
}

#[test]
fn asap_follows_deps_and_leaves_cycles_out() {
    let plan = fixture::ring3();
    let s = asap(&plan);
    // Copy after b0:2, reduce after b0:4 (and the copy).
    assert_eq!(s.step(0, 1, 0), Some(3));
    assert_eq!(s.step(0, 1, 1), Some(5));
    let mut cyclic = fixture::ring3();
    cyclic.gpus[0].blocks[0].ops[0].deps = Box::new([Dep(1, 1)]);
    let s = asap(&cyclic);
    assert_eq!(s.step(0, 0, 0), None);
    assert!(s.unscheduled() > 0);
    let e = predict(&cyclic, &topo("nvswitch:3"), 1024, &|r, b, o| {
        s.step(r, b, o)
    });
    assert!(
        matches!(&e, Err(PredictError::Unscheduled { at }) if at.starts_with("rank 0, block 0, op 0")),
        "{e:?}"
    );
}

#[test]
fn ring_allreduce_on_nvswitch_8() {
    let plan = fixture::ring_allreduce(8, Via::Switch);
    let rows = sweep(&plan, "nvswitch:8");
    // Monotonic in size.
    for w in rows.windows(2) {
        assert!(w[1].time_us >= w[0].time_us, "{w:?}");
        assert!(w[1].busbw_gbs >= w[0].busbw_gbs, "{w:?}");
    }
    // Small sizes: 14 transfer steps of α = 2 × 0.7 (GPU-switch-GPU) + 3.4 µs.
    let alpha = 2.0 * 0.7 + 3.4;
    assert!(close(rows[0].time_us, 14.0 * alpha, 1e-3), "{:?}", rows[0]);
    assert!(
        rows[7].time_us < 1.01 * rows[0].time_us,
        "1 KiB is latency-bound"
    );
    // 1 GiB: busbw approaches the 478 GB/s link.
    let last = rows[rows.len() - 1];
    assert_eq!(last.size_bytes, 1 << 30);
    assert!(close(last.busbw_gbs, 478.0, 0.03), "{last:?}");
    assert!(last.busbw_gbs < 478.0);
    // The closed form: t = 2(n-1)(α + S/(nβ)).
    let expect = 14.0 * (alpha + (1u64 << 30) as f64 / 8.0 / 478e3);
    assert!(close(last.time_us, expect, 1e-9), "{last:?} vs {expect}");
    assert!(close(last.algbw_gbs * 14.0 / 8.0, last.busbw_gbs, 1e-12));
}

#[test]
fn ll_trades_bandwidth_for_latency() {
    let mut plan = fixture::ring_allreduce(8, Via::Switch);
    let simple = sweep(&plan, "nvswitch:8");
    plan.protocol = Protocol::Ll;
    let ll = sweep(&plan, "nvswitch:8");
    assert!(ll[0].time_us < simple[0].time_us / 2.0);
    // At 1 GiB LL carries `ll_efficiency` of the 478 GB/s link as data.
    let last = ll[ll.len() - 1];
    assert!(close(last.busbw_gbs, 0.36 * 478.0, 0.03), "{last:?}");
}

#[test]
fn senders_share_their_uplink() {
    // Rank 0 sends one chunk to each of 1 and 2 in the same step, from two blocks.
    let mut plan = fixture::ring_allreduce(3, Via::Switch);
    let send = plan.gpus[0].blocks[0].ops[0].clone();
    let mut recv = plan.gpus[0].blocks[0].ops[4].clone();
    recv.dst = send.src;
    let block = |id, send_peer, recv_peer, op: &crate::plan::Op| Block {
        id,
        channel: 0,
        send_peer,
        recv_peer,
        send_via: Some(Via::Switch),
        recv_via: Some(Via::Switch),
        protocol: None,
        send_also: Vec::new(),
        recv_also: Vec::new(),
        ops: vec![op.clone()],
    };
    plan.gpus[0].blocks = vec![
        block(0, Some(1), None, &send),
        block(1, Some(2), None, &send),
    ];
    plan.gpus[1].blocks = vec![block(0, None, Some(0), &recv)];
    plan.gpus[2].blocks = vec![block(0, None, Some(0), &recv)];
    assert_eq!(plan.validate(), Ok(()));
    let t = topo("nvswitch:3");
    let size = 3 << 20;
    let p = match predict_sweep(&plan, &t, &[size]) {
        Ok(v) => v[0],
        Err(e) => panic!("{e}"),
    };
    let chunk = (size / 3) as f64;
    assert!(
        close(p.time_us, 1.4 + 3.4 + chunk / (239.0 * 1e3), 1e-9),
        "{p:?}"
    );
}

#[test]
fn local_ops_cost_copy_bandwidth() {
    let plan = fixture::ring3();
    let t = topo("nvswitch:3");
    let s = asap(&plan);
    let with = predict(&plan, &t, 3 << 30, &|r, b, o| s.step(r, b, o));
    let ring = fixture::ring_allreduce(3, Via::Switch);
    let without = predict_sweep(&ring, &t, &[3 << 30]);
    let (Ok(with), Ok(without)) = (with, without) else {
        panic!("both plans fit");
    };
    // The copy runs alongside transfer step 3 (hidden); the reduce alone at step 5.
    let reduce = (1u64 << 30) as f64 / 1500e3;
    assert!(close(with.time_us, without[0].time_us + reduce, 1e-9));
}

#[test]
fn local_ops_of_one_gpu_in_one_step_share_its_memory() {
    let plan = fixture::ring3();
    let Some(local) = plan
        .gpus
        .iter()
        .flat_map(|g| &g.blocks)
        .flat_map(|b| &b.ops)
        .find(|o| OpClass::of(o.kind) == OpClass::Local)
        .cloned()
    else {
        panic!("the fixture has a local op");
    };
    let block = |id, op: &crate::plan::Op| Block {
        id,
        channel: 0,
        send_peer: None,
        recv_peer: None,
        send_via: None,
        recv_via: None,
        protocol: None,
        send_also: Vec::new(),
        recv_also: Vec::new(),
        ops: vec![op.clone()],
    };
    let mut one = plan.clone();
    for g in &mut one.gpus {
        g.blocks.clear();
    }
    one.gpus[0].blocks = vec![block(0, &local)];
    let mut two = one.clone();
    two.gpus[0].blocks.push(block(1, &local));
    let mut apart = one.clone();
    apart.gpus[1].blocks = vec![block(0, &local)];
    let t = topo("nvswitch:3");
    let at = |p: &Plan| match Compiled::new(p, &t, &|_, _, _| Some(0), &Model::default()) {
        Ok(c) => c.at(3 << 30).time_us,
        Err(e) => panic!("{e}"),
    };
    // Side by side on one GPU, two copies take twice as long as one; on two GPUs, as long.
    assert!(at(&one) > 0.0);
    assert!(
        close(at(&two), 2.0 * at(&one), 1e-9),
        "{} {}",
        at(&two),
        at(&one)
    );
    assert!(close(at(&apart), at(&one), 1e-9));
}

#[test]
fn counts_and_factors_follow_nccl_tests() {
    use CollectiveKind::*;
    assert_eq!(nccl_count(AllGather, 1000, 8), 125);
    assert_eq!(nccl_count(AllGather, 1001, 8), 125);
    assert_eq!(size_of_count(AllGather, 125, 8), 1000);
    assert_eq!(nccl_count(AllReduce, 1001, 8), 1001);
    assert_eq!(nccl_count(AllToAll, 8, 0), 8);
    assert!(close(bus_factor(AllReduce, 8), 1.75, 1e-12));
    assert!(close(bus_factor(ReduceScatter, 4), 0.75, 1e-12));
    assert!(close(bus_factor(Broadcast, 4), 1.0, 1e-12));
}

#[test]
fn errors_name_the_problem() {
    let plan = fixture::ring_allreduce(8, Via::Switch);
    let e = predict_sweep(&plan, &topo("nvswitch:4"), &[8]);
    assert_eq!(
        e.map_err(|e| e.to_string()),
        Err("the plan has 8 ranks but topology `nvswitch:4` has 4".to_string())
    );
}

#[test]
fn table_is_aligned() {
    let plan = fixture::ring_allreduce(4, Via::Switch);
    let rows = match predict_sweep(&plan, &topo("nvswitch:4"), &[8, 1 << 30]) {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    let t = table(&rows);
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines.len(), 4);
    assert!(lines[0].starts_with("|   size (B) | time (µs) |"), "{t}");
    assert!(lines[1].starts_with("|-----------:|"), "{t}");
    assert!(lines[3].starts_with("| 1073741824 |"), "{t}");
    let widths: Vec<usize> = lines.iter().map(|l| l.chars().count()).collect();
    assert!(widths.iter().all(|&w| w == widths[0]), "{t}");
}

/// The fixture of a head of three ranks (`tests/inputs/plans/ok_head_several_peers_3.json`):
/// ranks 1 and 2 send their chunk to rank 0, whose one block of two receive and two send
/// peers combines both and sends the sum back to both (one `rrcs`).
fn head_of_three() -> Plan {
    let text = include_str!("../../../tests/inputs/plans/ok_head_several_peers_3.json");
    match ValidPlan::from_json(text) {
        Ok(p) => p.into_inner(),
        Err(e) => panic!("{e}"),
    }
}

/// An op of one chunk at `src`/`dst` (`[buffer, offset]`), waiting for `deps`.
fn op(kind: OpKind, src: Option<(u32, u64)>, dst: Option<(u32, u64)>, deps: &[Dep]) -> Op {
    Op {
        kind,
        src: src.map(|(b, o)| Slice(b, o)),
        dst: dst.map(|(b, o)| Slice(b, o)),
        count: 1,
        deps: deps.into(),
        source: 0,
        group: None,
    }
}

/// A block over the switch on `channel`: `send` and `recv` list its peers on each side
/// (the first is its peer, the rest its further peers).
fn peers_block(id: u32, channel: u32, send: &[u32], recv: &[u32], ops: Vec<Op>) -> Block {
    let via = |p: &[u32]| (!p.is_empty()).then_some(Via::Switch);
    Block {
        id,
        channel,
        send_peer: send.first().copied(),
        recv_peer: recv.first().copied(),
        send_via: via(send),
        recv_via: via(recv),
        protocol: None,
        send_also: send.iter().skip(1).copied().collect(),
        recv_also: recv.iter().skip(1).copied().collect(),
        ops,
    }
}

/// `plan` with rank 0's blocks replaced, validated.
fn with_head(plan: &Plan, blocks: Vec<Block>) -> Plan {
    let mut p = plan.clone();
    p.gpus[0].blocks = blocks;
    assert_eq!(p.validate(), Ok(()));
    p
}

/// `plan` costed on `spec` with its ASAP steps.
fn asap_model(plan: &Plan, spec: &str) -> Compiled {
    let s = asap(plan);
    match Compiled::new(
        plan,
        &topo(spec),
        &|r, b, o| s.step(r, b, o),
        &Model::default(),
    ) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    }
}

/// α of one transfer between two GPUs of an NVSwitch: the route's two hops and Simple's
/// latency.
const SWITCH_ALPHA: f64 = 2.0 * 0.7 + 3.4;
/// One NVSwitch port's bandwidth each way, GB/s (= 1e3 bytes per µs).
const PORT_GBS: f64 = 478.0;

/// A head receiving from two peers at once (one op of a block of two receive peers) against
/// the same head receiving from one, then from the other (two ops of two blocks).
///
/// At 8 B the head of several peers pays one α per round: the peers' messages come in
/// together, and the sum goes back to both together (2α); the head of single-peer blocks
/// must end its receive from rank 1 before its second block combines rank 2's message
/// and sends the sum to rank 2, and only then sends it to rank 1 (3α).
///
/// At 1 GiB neither beats the bytes through rank 0's switch port: both peers' messages
/// (2 GiB) share its ingress, as they do in the single-peer plan (sent in one round too),
/// so the receive costs no less than the same bytes received one after the other. What we
/// find beyond that: the several-peer head is about twice as fast (≈ 4.6 ms against
/// ≈ 9.0 ms), not within a few percent, because its fused op forwards the sum to both peers
/// as the messages stream in, its egress (a direction of its own) busy while its ingress
/// is; the single-peer head can send the sum to rank 1 only once the sum is whole. The
/// receive alone (the same plans without the sends back) is within a few percent: the
/// combine of two messages adds its last pipeline round (≈ 1%) to the same ingress-bound
/// arrival.
#[test]
fn a_head_of_several_peers_pays_one_alpha_per_round_and_shares_its_port() {
    let several = head_of_three();
    let ch = 0;
    let one_after_the_other = with_head(
        &several,
        vec![
            peers_block(
                0,
                ch,
                &[1],
                &[1],
                vec![
                    op(OpKind::RecvReduceCopy, Some((0, 0)), Some((0, 0)), &[]),
                    op(OpKind::Send, Some((0, 0)), None, &[Dep(1, 0)]),
                ],
            ),
            peers_block(
                1,
                ch,
                &[2],
                &[2],
                vec![op(
                    OpKind::RecvReduceCopySend,
                    Some((0, 0)),
                    Some((0, 0)),
                    &[Dep(0, 0)],
                )],
            ),
        ],
    );
    let (a, b) = (
        asap_model(&several, "nvswitch:3"),
        asap_model(&one_after_the_other, "nvswitch:3"),
    );
    // 8 B: one α per round, not per peer.
    assert!(
        a.at(8).time_us < b.at(8).time_us,
        "{:?} {:?}",
        a.at(8),
        b.at(8)
    );
    assert!(
        close(a.parts(8).latency_us, 2.0 * SWITCH_ALPHA, 1e-9),
        "{:?}",
        a.parts(8)
    );
    assert!(
        close(b.parts(8).latency_us, 3.0 * SWITCH_ALPHA, 1e-9),
        "{:?}",
        b.parts(8)
    );

    // 1 GiB: two messages of 1 GiB into one port take at least 2 GiB at its bandwidth.
    let size = 1u64 << 30;
    let port = 2.0 * size as f64 / (PORT_GBS * 1e3);
    let (ta, tb) = (a.at(size).time_us, b.at(size).time_us);
    assert!(ta >= port, "{ta} µs, the port alone {port} µs");
    assert!(close(ta, port, 0.05), "{ta} µs, the port alone {port} µs");
    let busiest = a.busiest(size).expect("links carry the messages");
    assert_eq!(busiest.items, 2, "{busiest:?}");
    // Streaming both ways: about half of receiving, then sending.
    assert!(
        ta < 0.55 * tb && tb >= 2.0 * port,
        "{ta} µs against {tb} µs"
    );

    // The receive alone, without the sends back.
    let rrc = |deps: &[Dep]| op(OpKind::RecvReduceCopy, Some((0, 0)), Some((0, 0)), deps);
    let mut senders = several.clone();
    for g in &mut senders.gpus[1..] {
        g.blocks = vec![peers_block(
            0,
            ch,
            &[0],
            &[],
            vec![op(OpKind::Send, Some((0, 0)), None, &[])],
        )];
    }
    let ra = with_head(
        &senders,
        vec![peers_block(0, ch, &[], &[1, 2], vec![rrc(&[])])],
    );
    let rb = with_head(
        &senders,
        vec![
            peers_block(0, ch, &[], &[1], vec![rrc(&[])]),
            peers_block(1, ch, &[], &[2], vec![rrc(&[Dep(0, 0)])]),
        ],
    );
    let (ra, rb) = (asap_model(&ra, "nvswitch:3"), asap_model(&rb, "nvswitch:3"));
    assert!(
        close(ra.at(8).time_us, SWITCH_ALPHA, 1e-3),
        "{:?}",
        ra.at(8)
    );
    assert!(
        close(rb.at(8).time_us, SWITCH_ALPHA, 1e-3),
        "{:?}",
        rb.at(8)
    );
    let (ra, rb) = (ra.at(size).time_us, rb.at(size).time_us);
    assert!(rb >= port && ra >= rb, "{ra} µs against {rb} µs");
    assert!(close(ra, rb, 0.03), "{ra} µs against {rb} µs");
}

/// The busiest link counts every transfer of an op of several send peers: two blocks of
/// rank 0 each send a chunk to ranks 1 and 2 at once, in rounds of their own. Each round
/// gives each transfer half of rank 0's uplink; the rounds overlap in time, so the uplink's
/// four transfers bound the plan.
#[test]
fn the_busiest_link_counts_every_transfer_of_a_send_to_several_peers() {
    let head = head_of_three();
    let send = |id, ch| {
        peers_block(
            id,
            ch,
            &[1, 2],
            &[],
            vec![op(OpKind::Send, Some((0, 0)), None, &[])],
        )
    };
    let recv = |id, ch, buf| {
        peers_block(
            id,
            ch,
            &[],
            &[0],
            vec![op(OpKind::Recv, None, Some((buf, 0)), &[])],
        )
    };
    let mut plan = head.clone();
    for g in &mut plan.gpus[1..] {
        g.blocks = vec![recv(0, 0, 0), recv(1, 1, 1)];
    }
    let two = with_head(&plan, vec![send(0, 0), send(1, 1)]);
    let mut one_block = two.clone();
    one_block.gpus[0].blocks.truncate(1);
    for g in &mut one_block.gpus[1..] {
        g.blocks.truncate(1);
    }
    assert_eq!(one_block.validate(), Ok(()));

    let t = topo("nvswitch:3");
    let uplink = t
        .route(RankId(0), RankId(1))
        .and_then(|r| {
            let (&l, &from) = (r.links.first()?, r.devices.first()?);
            let (a, _, _) = t.link(l)?;
            Some(LoadOf::Link {
                link: l,
                forward: a == from,
            })
        })
        .expect("a route through the switch");
    let size = 1u64 << 30;
    let chunk = size as f64 / (PORT_GBS * 1e3);

    // One op to two peers: both transfers on the uplink, each at half of it.
    let c = match Compiled::new(&one_block, &t, &|_, b, _| Some(b), &Model::default()) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    let busiest = c.busiest(size).expect("a link carries something");
    assert_eq!((busiest.of, busiest.items), (uplink, 2), "{busiest:?}");
    assert!(
        close(busiest.time.total(), SWITCH_ALPHA + 2.0 * chunk, 1e-9),
        "{busiest:?}"
    );
    assert!(
        close(c.at(size).time_us, SWITCH_ALPHA + 2.0 * chunk, 1e-9),
        "{:?}",
        c.at(size)
    );

    // Two such ops in rounds of their own: the dataflow gives each round all of the
    // uplink's half per transfer, but the uplink carries all four.
    let c = match Compiled::new(&two, &t, &|_, b, _| Some(b), &Model::default()) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    let path = c.critical_path(size);
    let busiest = c.busiest(size).expect("a link carries something");
    assert_eq!((busiest.of, busiest.items), (uplink, 4), "{busiest:?}");
    assert!(
        close(busiest.time.total(), SWITCH_ALPHA + 4.0 * chunk, 1e-9),
        "{busiest:?}"
    );
    let one = path.last().expect("a path").end_us;
    assert!(close(one, SWITCH_ALPHA + 2.0 * chunk, 1e-9), "{one}");
    assert!(close(c.at(size).time_us, busiest.time.total(), 1e-12));
}

/// The critical path through a receive of several messages names the last to arrive:
/// rank 2 copies its chunk before sending it, so its message comes after rank 1's. An op
/// of one message keeps its words.
#[test]
fn the_critical_path_names_the_last_message_to_arrive() {
    let mut plan = head_of_three();
    plan.gpus[2].blocks[0]
        .ops
        .insert(0, op(OpKind::Copy, Some((0, 0)), Some((1, 0)), &[]));
    assert_eq!(plan.validate(), Ok(()));
    let c = asap_model(&plan, "nvswitch:3");
    let path = c.critical_path(1 << 30);
    let at_head = path
        .iter()
        .find(|p| p.op.rank == 0)
        .expect("the head is on the path");
    let last = Arrived { from: 2, of: 2 };
    assert!(
        matches!(at_head.waited, Waited::FirstBytes(a) | Waited::ForwardedEnd(a) if a == last),
        "{path:?}"
    );
    assert!(
        at_head.waited.describe().contains("of its 2 messages"),
        "{path:?}"
    );
    assert!(
        at_head.waited.describe().contains("from rank 2"),
        "{path:?}"
    );
    // The peers' receives wait for one message each, described as ever.
    let end = path.last().expect("a path");
    assert_eq!(end.waited, Waited::Message(Arrived { from: 0, of: 1 }));
    assert_eq!(end.waited.describe(), "the message it receives");
    let copy = path.first().expect("a path");
    assert_eq!(
        copy.op,
        OpRef {
            rank: 2,
            block: 0,
            op: 0
        }
    );
}

/// With a latency factor per protocol the fit recovers each, where one factor for both
/// cannot: LL calls whose hops cost nothing beyond a fixed launch, bulk calls paying 2 × α.
#[test]
fn calibration_by_protocol_weighs_each_protocols_latency_apart() {
    let points: Vec<(f64, f64, f64, bool)> = [
        (2.0, 0.5, true),
        (4.0, 2.0, true),
        (6.0, 8.0, true),
        (4.8, 10.0, false),
        (9.6, 40.0, false),
        (9.6, 2000.0, false),
    ]
    .iter()
    .map(|&(x, y, ll)| (x, y, 8.0 + if ll { 0.0 } else { 2.0 * x } + 1.4 * y, ll))
    .collect();
    let c = calibrate_by_protocol(&points).expect("fits");
    assert!(close(c.fixed_us, 8.0, 1e-6), "{c:?}");
    assert!(close(c.latency, 2.0, 1e-6), "{c:?}");
    assert!(c.latency_ll.abs() < 1e-6, "{c:?}");
    assert!(close(c.transfer, 1.4, 1e-6), "{c:?}");
    assert!(c.rel_rms < 1e-9, "{c:?}");
    let t = Time {
        latency_us: 4.0,
        transfer_us: 10.0,
    };
    assert!(close(c.time_us(t, true), 22.0, 1e-6));
    assert!(close(c.time_us(t, false), 30.0, 1e-6));
    // The same points under one latency factor leave an error behind.
    let one: Vec<(f64, f64, f64)> = points.iter().map(|&(x, y, t, _)| (x, y, t)).collect();
    assert!(calibrate(&one).expect("fits").rel_rms > 0.01);
}
