//! One-shot allreduce calls (`executor/src/cuda/oneshot.rs`) on real GPUs: the one-shot
//! plans run their small calls as one exchange, in both placements and with every kind of
//! operator, between calls of the interpreter and in CUDA graphs, each checked against the
//! reference with fresh inputs (a line left from an earlier call would show), across a clean
//! call and the flags' wrap (the counters started near them), and run on the interpreter when
//! the one-shot is off.

use super::*;

const ONESHOT: &str = include_str!("../../algorithms/allreduce_oneshot.coll");

/// Largest count of the load: past the one-shot's 64 KiB of f32, so some calls interpret.
const MAX: u64 = 40_000;

/// Inputs of call `call`: the reference's fill, moved by the call's number.
fn inputs(op: ReduceOp, n: u32, count: u64, call: u64) -> Vec<Vec<f32>> {
    (0..n)
        .map(|q| {
            let mut v: Vec<f32> = fill(op, n, q, count);
            if op != ReduceOp::Prod {
                v.iter_mut().for_each(|x| *x += (call % 7) as f32);
            }
            v
        })
        .collect()
}

struct Buffers {
    send: Vec<DeviceBuffer>,
    recv: Vec<DeviceBuffer>,
}

impl Buffers {
    fn new(exec: &CudaExecutor, n: u32) -> Buffers {
        let mut b = Buffers {
            send: Vec::new(),
            recv: Vec::new(),
        };
        for q in 0..n {
            let gpu = exec.rank_device(q).expect("GPU");
            b.send.push(ok(user_buffer(gpu, MAX * 4)));
            b.recv.push(ok(user_buffer(gpu, MAX * 4)));
        }
        b
    }

    /// Writes `ins` into the send buffers (`in_place`: into the receive buffers) and clears
    /// the receive buffers first.
    fn load(&self, exec: &CudaExecutor, ins: &[Vec<f32>], in_place: bool) {
        for (q, x) in ins.iter().enumerate() {
            let gpu = exec.rank_device(q as u32).expect("GPU");
            ok(self.recv[q].clear(gpu));
            let to = if in_place {
                &self.recv[q]
            } else {
                &self.send[q]
            };
            ok(to.write(gpu, x));
            ok(gpu.synchronize());
        }
    }

    fn bufs(&self, in_place: bool) -> Vec<RankBuffers<'_>> {
        if in_place {
            return self.recv.iter().map(RankBuffers::InPlace).collect();
        }
        (self.send.iter().zip(&self.recv))
            .map(|(send, recv)| RankBuffers::OutOfPlace { send, recv })
            .collect()
    }

    fn wrong(&self, exec: &CudaExecutor, ins: &[Vec<f32>], count: u64, op: ReduceOp) -> u64 {
        let kind = coll_lang::builtins::CollectiveKind::AllReduce;
        let want = expected(kind, ins, count, op, 0).expect("allreduce has a reference");
        let outs: Vec<Vec<f32>> = (0..ins.len())
            .map(|q| read(exec, q as u32, &self.recv[q], count))
            .collect();
        count_wrong(&outs, &want)
    }
}

#[test]
fn one_shot_calls_match_the_reference_between_interpreted_ones() {
    let Some(gpus) = gpus(
        "one_shot_calls_match_the_reference_between_interpreted_ones",
        1,
    ) else {
        return;
    };
    // At least two ranks; two on one GPU when there is only one.
    let n = gpus.len().max(2) as u32;
    // 16 384 f32 is the one-shot's largest call; 40 000 runs on the interpreter.
    let counts = [
        1u64, 16_384, 3, 40_000, 16_383, 1_000, 7, 16_384, 2, 40_000, 5,
    ];
    let ops = [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Avg, ReduceOp::Prod];
    for (name, src) in [("oneshot", ONESHOT), ("allpairs", ALLPAIRS)] {
        let exec = ok(CudaExecutor::new(
            plan(name, src, n as usize),
            &gpus,
            DType::F32,
            MAX,
        ));
        let b = Buffers::new(&exec, n);
        let mut call = 0u64;
        for round in 0..3 {
            for &count in &counts {
                let op = ops[(call % 4) as usize];
                let in_place = (call + round).is_multiple_of(3);
                let ins = inputs(op, n, count, call);
                b.load(&exec, &ins, in_place);
                let info = ok(exec.launch(&b.bufs(in_place), count, op));
                ok(exec.finish());
                ok(exec.check_error());
                assert_eq!(info.oneshot, count * 4 <= 64 << 10, "{name} count {count}");
                let wrong = b.wrong(&exec, &ins, count, op);
                assert_eq!(
                    wrong, 0,
                    "{name} call {call}: {op:?} of {count}, in place {in_place}"
                );
                call += 1;
            }
        }
    }
}

#[test]
fn one_shot_calls_replay_from_graphs_and_turn_off() {
    let Some(gpus) = gpus("one_shot_calls_replay_from_graphs_and_turn_off", 1) else {
        return;
    };
    let n = gpus.len().max(2) as u32;
    let count = 1_000u64;
    let exec = ok(CudaExecutor::new(
        plan("oneshot", ONESHOT, n as usize),
        &gpus,
        DType::F32,
        MAX,
    ));
    let streams = caller_streams(&exec, gpus.len());
    let refs: Vec<&CudaStream> = streams.iter().map(|s| s.as_ref()).collect();
    let b = Buffers::new(&exec, n);
    let bufs = b.bufs(false);
    // SAFETY: the graphs are dropped at the end of this test, before the executor and the
    // buffers the call uses.
    let graphs = ok(unsafe {
        device::capture(&streams, || {
            exec.enqueue(&refs, &bufs, count, ReduceOp::Sum).map(drop)
        })
    });
    // Each replay with new inputs, around eager calls of both sizes: the counters carry over.
    for call in 0..6u64 {
        let ins = inputs(ReduceOp::Sum, n, count, call);
        b.load(&exec, &ins, false);
        ok(device::launch_graphs(&graphs));
        streams.iter().for_each(|s| s.synchronize().expect("sync"));
        ok(exec.check_error());
        assert_eq!(
            b.wrong(&exec, &ins, count, ReduceOp::Sum),
            0,
            "replay {call}"
        );
        let big = if call % 2 == 0 { 20_000 } else { 5 };
        let ins = inputs(ReduceOp::Sum, n, big, call + 1);
        b.load(&exec, &ins, false);
        ok(exec.enqueue(&refs, &bufs, big, ReduceOp::Sum));
        streams.iter().for_each(|s| s.synchronize().expect("sync"));
        assert_eq!(
            b.wrong(&exec, &ins, big, ReduceOp::Sum),
            0,
            "eager {big} after {call}"
        );
    }
    drop(graphs);
    // Off: the same plan runs every call on the interpreter.
    let mut o = LoadOptions::new(DType::F32, MAX);
    o.settings.oneshot_max = 0;
    let off = ok(CudaExecutor::load(
        plan("oneshot", ONESHOT, n as usize),
        &gpus,
        &o,
    ));
    let b = Buffers::new(&off, n);
    let ins = inputs(ReduceOp::Sum, n, count, 3);
    b.load(&off, &ins, false);
    let info = ok(off.launch(&b.bufs(false), count, ReduceOp::Sum));
    ok(off.finish());
    ok(off.check_error());
    assert!(!info.oneshot);
    assert_eq!(b.wrong(&off, &ins, count, ReduceOp::Sum), 0, "one-shot off");
}

#[test]
fn one_shot_calls_cross_a_clean_call_and_the_flags_wrap() {
    let Some(gpus) = gpus("one_shot_calls_cross_a_clean_call_and_the_flags_wrap", 1) else {
        return;
    };
    let n = gpus.len().max(2) as u32;
    // Counters 2^21 - 6: calls 2^21 - 2 and 2^21 - 1 are clean (every line rewritten);
    // 2^32 - 7: the flag (counter mod 2^32 - 1, plus 1) comes round to 1.
    for epoch in [(1u64 << 21) - 6, (1u64 << 32) - 7] {
        let mut o = LoadOptions::new(DType::F32, MAX);
        o.settings.ll_epoch = epoch;
        let exec = ok(CudaExecutor::load(
            plan("oneshot", ONESHOT, n as usize),
            &gpus,
            &o,
        ));
        let b = Buffers::new(&exec, n);
        for (call, count) in [
            16_384u64, 3, 1_000, 16_384, 7, 2, 16_384, 5, 12_000, 1, 16_384, 4,
        ]
        .into_iter()
        .enumerate()
        {
            let ins = inputs(ReduceOp::Sum, n, count, call as u64);
            b.load(&exec, &ins, false);
            let info = ok(exec.launch(&b.bufs(false), count, ReduceOp::Sum));
            ok(exec.finish());
            ok(exec.check_error());
            assert!(info.oneshot);
            let wrong = b.wrong(&exec, &ins, count, ReduceOp::Sum);
            assert_eq!(wrong, 0, "epoch {epoch} call {call}: {count} elements");
        }
    }
}
