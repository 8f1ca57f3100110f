//! The GPU executor's stream-ordered API on real GPUs: calls on the caller's streams, the
//! same call captured in CUDA graphs and replayed between eager calls, both placements of
//! every kind of plan (direct, aliased, staged, rooted), several ranks per GPU, blocks of
//! several peers, LL128 between two GPUs, copy-engine calls eager and captured, one-shot
//! allreduces (`gpu/oneshot.rs`).
//!
//! Two modes. By default, without a GPU every GPU test prints why it skips and passes, so CI
//! (no GPU) stays green. With `COLL_REQUIRE_GPU=1` in the environment, as on a GPU machine,
//! whatever the tests need and miss (the CUDA driver, a device, as many GPUs as the test
//! uses, NVRTC) FAILS the test with the reason, so a run there can never pass by skipping.
//! The load errors that need no GPU are checked everywhere. For a GPU machine without a
//! toolchain, this binary is built elsewhere (`cargo test --release -p coll-tests --test gpu
//! --no-run`), copied there and run by `bench/gpu_stream.sh`. The algorithms are compiled into the binary, so it needs
//! no checkout where it runs.

use coll_cli::bench::{BenchConfig, any_wrong, bench};
use coll_compiler::plan::ValidPlan;
use coll_compiler::topology::Topology;
use coll_compiler::{CompileOptions, compile};
use coll_executor::ExecError;
use coll_executor::cuda::cudarc::driver::CudaStream;
use coll_executor::cuda::device::{self, DeviceBuffer, user_buffer};
use coll_executor::cuda::{CudaExecutor, GpuSettings, LoadOptions, RankBuffers, Threshold};
use coll_executor::dtype::{DType, ReduceOp};
use coll_executor::reference::{count_wrong, expected, fill, in_place_layout};
use coll_tests::gpu_gate::{Found, gpus, missing};
use std::sync::Arc;
use std::time::Duration;

const RING: &str = include_str!("../algorithms/allreduce_ring.coll");
const ALLGATHER: &str = include_str!("../algorithms/allgather_ring.coll");
const ALLTOALL: &str = include_str!("../algorithms/alltoall.coll");
const REDUCESCATTER: &str = include_str!("../algorithms/reducescatter_ring.coll");
const BROADCAST: &str = include_str!("../algorithms/broadcast_ring.coll");
const ALLPAIRS: &str = include_str!("../algorithms/allreduce_allpairs.coll");

#[path = "gpu/oneshot.rs"]
mod oneshot;

fn plan(name: &str, src: &str, n: usize) -> ValidPlan {
    let m = coll_lang::load_bytes(name, src.as_bytes().to_vec())
        .unwrap_or_else(|_| panic!("{name} parses"));
    let topo = Topology::parse(&format!("nvswitch:{n}")).expect("preset");
    compile(&m, &topo, &CompileOptions::default())
        .unwrap_or_else(|_| panic!("{name} compiles for {n} ranks"))
        .into_plan()
}

#[test]
fn a_missing_gpu_skips_unless_required() {
    let none = Found {
        driver: false,
        gpus: 0,
        nvrtc: false,
    };
    assert_eq!(
        missing(&none, 1, false),
        Ok(Some("no GPU: no CUDA driver (libcuda.so)".into()))
    );
    assert_eq!(
        missing(&none, 1, true),
        Err("COLL_REQUIRE_GPU=1, but no GPU: no CUDA driver (libcuda.so)".into())
    );
    let no_device = Found {
        driver: true,
        ..none
    };
    assert_eq!(
        missing(&no_device, 1, true),
        Err("COLL_REQUIRE_GPU=1, but no GPU: the CUDA driver sees no device".into())
    );
    let one = Found {
        driver: true,
        gpus: 1,
        nvrtc: false,
    };
    assert_eq!(
        missing(&one, 2, true),
        Err("COLL_REQUIRE_GPU=1, but 1 GPUs, and the test needs 2".into())
    );
    assert_eq!(
        missing(&one, 1, false),
        Ok(None),
        "NVRTC only when required"
    );
    let e = missing(&one, 1, true).expect_err("NVRTC is required");
    assert!(e.contains("NVRTC (libnvrtc.so) not found"), "{e}");
    let all = Found { nvrtc: true, ..one };
    assert_eq!(missing(&all, 1, true), Ok(None));
}

/// A stream of the caller's own (cudarc's) on each of `gpus`, as an application has them.
fn new_streams(gpus: &[usize]) -> Vec<Arc<CudaStream>> {
    use coll_executor::cuda::cudarc::driver::CudaContext;
    gpus.iter()
        .map(|&d| {
            CudaContext::new(d)
                .and_then(|c| c.new_stream())
                .expect("stream")
        })
        .collect()
}

fn ok<T>(r: Result<T, ExecError>) -> T {
    r.unwrap_or_else(|e| panic!("GPU error: {e}"))
}

#[test]
fn load_errors_need_no_gpu() {
    let ring = plan("ring", RING, 2);
    let root = CudaExecutor::load(
        ring.clone(),
        &[0],
        &LoadOptions {
            root: 2,
            ..LoadOptions::new(DType::F32, 16)
        },
    );
    assert!(
        matches!(root, Err(ExecError::Root { root: 2, ranks: 2 })),
        "{root:?}"
    );
    let none = CudaExecutor::new(ring, &[], DType::F32, 16);
    assert!(matches!(none, Err(ExecError::Gpu(ref m)) if m.contains("no GPU")));
    // A tuning table for another rank count, or one without the collective, is refused
    // before any GPU is touched.
    let m = |algorithm: &str, bytes: u64, time_us: f64| coll_executor::tuning::Measurement {
        collective: coll_lang::builtins::CollectiveKind::AllReduce,
        algorithm: algorithm.into(),
        settings: String::new(),
        bytes,
        time_us,
    };
    let table = coll_executor::tuning::build(
        "test",
        2,
        "nvswitch:2",
        &[m("algorithms/allreduce_ring.coll", 8, 20.0)],
    );
    let four = Topology::parse("nvswitch:4").expect("preset");
    let two = Topology::parse("nvswitch:2").expect("preset");
    let kind = coll_lang::builtins::CollectiveKind::AllReduce;
    let opts = LoadOptions::new(DType::F32, 16);
    let e =
        coll_executor::cuda::tuned::TunedExecutor::load(table.clone(), kind, &four, &[0], &opts)
            .expect_err("2-rank table on 4 ranks");
    assert!(
        e.to_string()
            .contains("table is for 2 ranks, the topology has 4"),
        "{e}"
    );
    let other = coll_lang::builtins::CollectiveKind::AllGather;
    let e = coll_executor::cuda::tuned::TunedExecutor::load(table, other, &two, &[0], &opts)
        .expect_err("no allgather entry");
    assert!(e.to_string().contains("no entry for allgather"), "{e}");
}

/// Rank q's output, the first `len` elements of `buf`, read back from its GPU.
fn read(exec: &CudaExecutor, q: u32, buf: &DeviceBuffer, len: u64) -> Vec<f32> {
    let gpu = exec.rank_device(q).expect("rank's GPU");
    let mut out = vec![0f32; len as usize];
    ok(buf.read(gpu, &mut out));
    out
}

/// A new stream of each of the executor's `gpus` GPUs, as a caller's own.
fn caller_streams(exec: &CudaExecutor, gpus: usize) -> Vec<Arc<CudaStream>> {
    (0..gpus)
        .map(|i| {
            exec.gpu(i)
                .expect("GPU")
                .context()
                .new_stream()
                .expect("caller stream")
        })
        .collect()
}

#[test]
fn calls_on_the_callers_streams_replay_from_graphs() {
    let Some(gpus) = gpus("calls_on_the_callers_streams_replay_from_graphs", 1) else {
        return;
    };
    // At least two ranks; two on one GPU when there is only one.
    let n = gpus.len().max(2) as u32;
    let count = 4099u64;
    let exec = ok(CudaExecutor::new(
        plan("ring", RING, n as usize),
        &gpus,
        DType::F32,
        count,
    ));
    let streams = caller_streams(&exec, gpus.len());
    let refs: Vec<&CudaStream> = streams.iter().map(|s| s.as_ref()).collect();
    let inputs: Vec<Vec<f32>> = (0..n).map(|q| fill(ReduceOp::Sum, n, q, count)).collect();
    let want = expected(
        coll_lang::builtins::CollectiveKind::AllReduce,
        &inputs,
        count,
        ReduceOp::Sum,
        0,
    )
    .expect("allreduce has a reference");
    let mut send: Vec<DeviceBuffer> = Vec::new();
    let mut recv: Vec<DeviceBuffer> = Vec::new();
    for q in 0..n {
        let gpu = exec.rank_device(q).expect("GPU");
        let s = ok(user_buffer(gpu, count * 4));
        ok(s.write(gpu, &inputs[q as usize]));
        send.push(s);
        recv.push(ok(user_buffer(gpu, count * 4)));
        ok(gpu.synchronize());
    }
    let wrong = |exec: &CudaExecutor| -> u64 {
        let outs: Vec<Vec<f32>> = (0..n)
            .map(|q| read(exec, q, &recv[q as usize], count))
            .collect();
        count_wrong(&outs, &want)
    };
    let sync = || streams.iter().for_each(|s| s.synchronize().expect("sync"));
    let out_of_place: Vec<RankBuffers<'_>> = send
        .iter()
        .zip(&recv)
        .map(|(send, recv)| RankBuffers::OutOfPlace { send, recv })
        .collect();

    // Eager, on the caller's streams.
    ok(exec.enqueue(&refs, &out_of_place, count, ReduceOp::Sum));
    sync();
    ok(exec.check_error());
    assert_eq!(wrong(&exec), 0, "eager call");

    // A call of no elements returns at once, as NCCL's does: no kernel, and the calls after
    // it (below) still find every channel's counters where the last real call left them.
    let empty = ok(exec.enqueue(&refs, &out_of_place, 0, ReduceOp::Sum));
    assert_eq!(
        (empty.count, empty.ctas_per_block, empty.staged_because),
        (0, 0, Some("empty call"))
    );

    // Captured once (the capture fails if the call did any host work), replayed three times
    // around an eager call: the device counters carry over between them.
    for (q, r) in recv.iter().enumerate() {
        ok(r.clear(exec.rank_device(q as u32).expect("GPU")));
    }
    for i in 0..gpus.len() {
        ok(exec.gpu(i).expect("GPU").synchronize());
    }
    // SAFETY: the graphs are dropped at the end of this test, before the executor and the
    // buffers the call uses.
    let graphs = ok(unsafe {
        device::capture(&streams, || {
            exec.enqueue(&refs, &out_of_place, count, ReduceOp::Sum)
                .map(drop)
        })
    });
    ok(device::launch_graphs(&graphs));
    ok(exec.enqueue(&refs, &out_of_place, count, ReduceOp::Sum));
    ok(device::launch_graphs(&graphs));
    ok(device::launch_graphs(&graphs));
    sync();
    ok(exec.check_error());
    assert_eq!(wrong(&exec), 0, "graph replays");

    // In place, in a graph: the plan's own placement.
    let kind = coll_lang::builtins::CollectiveKind::AllReduce;
    for q in 0..n {
        let gpu = exec.rank_device(q).expect("GPU");
        let lay = in_place_layout(kind, q, count, count, count);
        ok(recv[q as usize].write_at(gpu, lay.input_at * 4, &inputs[q as usize]));
        ok(gpu.synchronize());
    }
    let in_place: Vec<RankBuffers<'_>> = recv.iter().map(RankBuffers::InPlace).collect();
    // SAFETY: as above.
    let graphs = ok(unsafe {
        device::capture(&streams, || {
            exec.enqueue(&refs, &in_place, count, ReduceOp::Sum)
                .map(drop)
        })
    });
    ok(device::launch_graphs(&graphs));
    sync();
    ok(exec.check_error());
    assert_eq!(wrong(&exec), 0, "in-place graph");

    // A stream of another GPU, or a buffer too small, is refused before anything runs.
    if gpus.len() > 1 {
        let swapped: Vec<&CudaStream> = refs.iter().rev().copied().collect();
        assert!(
            exec.enqueue(&swapped, &out_of_place, count, ReduceOp::Sum)
                .is_err()
        );
    }
    assert!(
        exec.enqueue(&refs, &out_of_place, count + 1, ReduceOp::Sum)
            .is_err()
    );
}

fn sweep(gpus: &[usize], graph: Option<u32>) -> BenchConfig {
    BenchConfig {
        min_bytes: 8,
        max_bytes: 4 << 20,
        factor: 64,
        iters: 3,
        warmup: 1,
        check: 1,
        dtype: DType::F32,
        op: ReduceOp::Sum,
        root: 0,
        gpus: gpus.to_vec(),
        vs_nccl: false,
        // The environment's knobs (the GPU scripts set some), with a shorter timeout.
        settings: GpuSettings {
            timeout: Duration::from_secs(20),
            ..GpuSettings::from_lookup(|k| std::env::var(k).ok()).expect("valid COLL_* variables")
        },
        trace: false,
        graph,
    }
}

#[test]
fn both_placements_of_every_kind_of_plan_check() {
    let Some(gpus) = gpus("both_placements_of_every_kind_of_plan_check", 1) else {
        return;
    };
    let n = gpus.len().max(2);
    // In-place plan (copies for out-of-place calls), aliased out-of-place plans, a staged
    // one, a rooted one on a root other than 0 (avg on a reduction too).
    // All-pairs: what small allreduces run at n = 2, a send and a receive-reduce per rank.
    let cases: [(&str, &str, u32, ReduceOp); 7] = [
        ("ring", RING, 0, ReduceOp::Sum),
        ("allpairs", ALLPAIRS, 0, ReduceOp::Sum),
        ("ring", RING, 0, ReduceOp::Avg),
        ("allgather", ALLGATHER, 0, ReduceOp::Sum),
        ("alltoall", ALLTOALL, 0, ReduceOp::Sum),
        ("reducescatter", REDUCESCATTER, 0, ReduceOp::Max),
        ("broadcast", BROADCAST, (n - 1) as u32, ReduceOp::Sum),
    ];
    for (name, src, root, op) in cases {
        for graph in [None, Some(2)] {
            let c = BenchConfig {
                root,
                op,
                ..sweep(&gpus, graph)
            };
            let r = ok(bench(plan(name, src, n), &c, &mut |_, _| {}));
            assert!(
                !any_wrong(&r),
                "{name} root {root} {op:?} graph {graph:?}: {r:?}"
            );
            assert!(r.rows.iter().all(|x| x.in_place.wrong == Some(0)));
        }
    }
}

#[test]
fn several_ranks_per_gpu_in_graphs() {
    let Some(gpus) = gpus("several_ranks_per_gpu_in_graphs", 1) else {
        return;
    };
    let n = 4 * gpus.len().min(2);
    let r = ok(bench(
        plan("ring", RING, n),
        &sweep(&gpus[..gpus.len().min(2)], Some(2)),
        &mut |_, _| {},
    ));
    assert!(!any_wrong(&r), "{r:?}");
}

/// The typed facade on cudarc's own allocations (the stream-ordered pool) and the caller's
/// streams: allreduce out of place and in place, allgather, every element checked, and the
/// calls it refuses before enqueueing anything.
#[test]
fn comm_calls_run_on_cudarc_buffers() {
    use coll_executor::api::Program;
    use coll_executor::cuda::Comm;
    use coll_executor::cuda::cudarc::driver::CudaSlice;
    use coll_executor::cuda::direct::CallDirect;

    let Some(gpus) = gpus("comm_calls_run_on_cudarc_buffers", 1) else {
        return;
    };
    let g = gpus.len();
    let n = g.max(2) as u32;
    let topo = format!("nvswitch:{n}");
    let ring = Program::from_source("allreduce_ring.coll", RING)
        .and_then(|p| p.compile(n, &topo))
        .unwrap_or_else(|e| panic!("{e}"));
    let gather = Program::from_source("allgather_ring.coll", ALLGATHER)
        .and_then(|p| p.compile(n, &topo))
        .unwrap_or_else(|e| panic!("{e}"));
    // Large enough for the bulk protocol, odd so the last slice is short.
    let count: usize = (4 << 20) + 3;
    let comm = ok(Comm::<f32>::new(ring, &gpus, count as u64));
    let streams = new_streams(&gpus);
    let on: Vec<&CudaStream> = streams.iter().map(|s| s.as_ref()).collect();
    let stream_of = |q: u32| &streams[q as usize * g / n as usize];
    let input = |q: u32| -> Vec<f32> { (0..count).map(|i| (q as usize + i % 7) as f32).collect() };
    let sum = |i: usize| (n as usize * (i % 7) + (n * (n - 1) / 2) as usize) as f32;
    let wrong = |q: u32, out: &CudaSlice<f32>, want: &dyn Fn(usize) -> f32| -> usize {
        let host = stream_of(q).clone_dtoh(out).expect("read back");
        host.iter()
            .enumerate()
            .filter(|&(i, &v)| v != want(i))
            .count()
    };

    let send: Vec<CudaSlice<f32>> = comm
        .ranks()
        .iter()
        .map(|&q| stream_of(q).clone_htod(&input(q)).expect("upload"))
        .collect();
    let mut recv: Vec<CudaSlice<f32>> = comm
        .ranks()
        .iter()
        .map(|&q| stream_of(q).alloc_zeros::<f32>(count).expect("alloc"))
        .collect();
    let info = ok(comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &on));
    for (&q, out) in comm.ranks().iter().zip(&recv) {
        assert_eq!(wrong(q, out, &sum), 0, "allreduce, rank {q} ({info})");
    }
    ok(comm.executor().check_error());
    // Pool memory is shared with every peer at load: a plan with direct messages uses them.
    if comm.executor().direct_count().apart > 0 {
        assert_ne!(info.direct, CallDirect::Off, "{info}");
    }
    assert_eq!(info.count, count as u64);

    // In place, NCCL's layout: the input where the output goes.
    let mut bufs: Vec<CudaSlice<f32>> = comm
        .ranks()
        .iter()
        .map(|&q| stream_of(q).clone_htod(&input(q)).expect("upload"))
        .collect();
    let info = ok(comm.in_place(&mut bufs, count as u64, ReduceOp::Sum, 0, &on));
    for (&q, out) in comm.ranks().iter().zip(&bufs) {
        assert_eq!(
            wrong(q, out, &sum),
            0,
            "in-place allreduce, rank {q} ({info})"
        );
    }

    // Refused before anything runs: another collective, a short buffer, a missing stream.
    let err = |r: Result<_, ExecError>| r.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        err(comm.all_gather(&send, &mut recv, &on)).contains("computes allreduce, not allgather")
    );
    let mut short: Vec<CudaSlice<f32>> = comm
        .ranks()
        .iter()
        .map(|&q| stream_of(q).alloc_zeros::<f32>(count - 1).expect("alloc"))
        .collect();
    assert!(
        err(comm.all_reduce(&send, &mut short, ReduceOp::Sum, &on))
            .contains("the receive buffer holds")
    );
    assert!(
        err(comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &on[..g - 1])).contains("streams")
    );

    // Allgather: rank q's slice of every output is q's input.
    let per = 1 << 20;
    let comm = ok(Comm::<f32>::new(gather, &gpus, per as u64));
    let send: Vec<CudaSlice<f32>> = comm
        .ranks()
        .iter()
        .map(|&q| {
            stream_of(q)
                .clone_htod(&vec![q as f32 + 1.0; per])
                .expect("upload")
        })
        .collect();
    let mut recv: Vec<CudaSlice<f32>> = comm
        .ranks()
        .iter()
        .map(|&q| {
            stream_of(q)
                .alloc_zeros::<f32>(per * n as usize)
                .expect("alloc")
        })
        .collect();
    let info = ok(comm.all_gather(&send, &mut recv, &on));
    for (&q, out) in comm.ranks().iter().zip(&recv) {
        assert_eq!(
            wrong(q, out, &|i| (i / per) as f32 + 1.0),
            0,
            "allgather, rank {q} ({info})"
        );
    }
    ok(comm.executor().check_error());
}

/// A communicator made inside a CUDA-graph capture (the first call of a size that needs a new
/// executor, as a library serving NCCL's API meets it when an application captures before
/// any eager call): its load does no work on the capturing streams and breaks no capture,
/// and the captured call replays with every element right.
#[test]
fn a_comm_made_inside_a_capture_replays() {
    captured_allreduce_replays("a_comm_made_inside_a_capture_replays", true);
}

/// The typed API's call on cudarc buffers captured in a graph: the executor's own stream
/// puts the context in cudarc's multi-stream bookkeeping, whose event waits must not reach
/// the capturing stream; replayed twice, every element right.
#[test]
fn a_comm_made_before_a_capture_replays() {
    captured_allreduce_replays("a_comm_made_before_a_capture_replays", false);
}

/// A ring allreduce on cudarc buffers captured on the caller's streams, its communicator
/// made inside the capture (`made_inside`) or before it, replayed twice and read back.
fn captured_allreduce_replays(test: &str, made_inside: bool) {
    use coll_executor::api::Program;
    use coll_executor::cuda::Comm;
    use coll_executor::cuda::cudarc::driver::CudaSlice;

    let Some(gpus) = gpus(test, 1) else {
        return;
    };
    let g = gpus.len();
    let n = g.max(2) as u32;
    let ring = Program::from_source("allreduce_ring.coll", RING)
        .and_then(|p| p.compile(n, &format!("nvswitch:{n}")))
        .unwrap_or_else(|e| panic!("{e}"));
    let count: usize = (1 << 20) + 5;
    let streams = new_streams(&gpus);
    let on: Vec<&CudaStream> = streams.iter().map(|s| s.as_ref()).collect();
    let stream_of = |q: u32| &streams[q as usize * g / n as usize];
    let input = |q: u32| -> Vec<f32> { (0..count).map(|i| (q as usize + i % 5) as f32).collect() };
    let sum = |i: usize| (n as usize * (i % 5) + (n * (n - 1) / 2) as usize) as f32;
    let send: Vec<CudaSlice<f32>> = (0..n)
        .map(|q| stream_of(q).clone_htod(&input(q)).expect("upload"))
        .collect();
    let mut recv: Vec<CudaSlice<f32>> = (0..n)
        .map(|q| stream_of(q).alloc_zeros::<f32>(count).expect("alloc"))
        .collect();
    streams.iter().for_each(|s| s.synchronize().expect("sync"));

    let mut made: Option<Comm<f32>> = if made_inside {
        None
    } else {
        Some(ok(Comm::<f32>::new(ring.clone(), &gpus, count as u64)))
    };
    // SAFETY: the graphs are dropped below, after their last launch has finished and before
    // the communicator and the buffers the captured call uses.
    let graphs = ok(unsafe {
        device::capture(&streams, || {
            if made.is_none() {
                made = Some(Comm::<f32>::new(ring, &gpus, count as u64)?);
            }
            let comm = made.as_ref().expect("made above");
            comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &on)
                .map(|_| ())
        })
    });
    let comm = made.expect("the communicator was made");
    for _ in 0..2 {
        ok(device::launch_graphs(&graphs));
    }
    streams.iter().for_each(|s| s.synchronize().expect("sync"));
    ok(comm.executor().check_error());
    for (q, out) in recv.iter().enumerate() {
        let host = stream_of(q as u32).clone_dtoh(out).expect("read back");
        let wrong = host
            .iter()
            .enumerate()
            .filter(|&(i, &v)| v != sum(i))
            .count();
        assert_eq!(
            wrong, 0,
            "rank {q}: replayed allreduce, communicator made inside the capture: {made_inside}"
        );
    }
    drop(graphs);
}

/// The fixture of a block of several peers: rank 0's one block receives from ranks 1 and 2,
/// combines both with its own chunk, and sends the sum to both (`rrcs` on two connections
/// each way).
const HEAD_OF_THREE: &str = include_str!("inputs/plans/ok_head_several_peers_3.json");

/// An allreduce on 4 ranks whose rank 0 has a block of 3 receive peers (one `rrc` that sums
/// ranks 1-3's chunks into its own) and a block of 3 send peers (one `s` of the sum to all
/// three, after the first block's op): each side of a connection in a block of its own, and
/// a dependency across them.
const FAN_OF_FOUR: &str = r#"{
  "buffers": [{"chunks": 1, "name": "input"}, {"chunks": 1, "name": "output"}],
  "chunk_factor": 1,
  "collective": "allreduce",
  "inplace": true,
  "name": "fan_of_four",
  "protocol": "simple",
  "ranks": 4,
  "sources": ["fan.coll:1:1", "fan.coll:2:1", "fan.coll:3:1"],
  "topology": "nvswitch:4",
  "version": 1,
  "gpus": [
    {"rank": 0, "blocks": [
      {"channel": 0, "id": 0, "recv_also": [2, 3], "recv_peer": 1, "recv_via": "switch", "ops": [
        {"op": "rrc", "src": [0, 0], "dst": [0, 0], "n": 1, "at": 0}
      ]},
      {"channel": 0, "id": 1, "send_also": [2, 3], "send_peer": 1, "send_via": "switch", "ops": [
        {"op": "s", "src": [0, 0], "n": 1, "deps": [[0, 0]], "at": 1}
      ]}
    ]},
    {"rank": 1, "blocks": [
      {"channel": 0, "id": 0, "recv_peer": 0, "recv_via": "switch", "send_peer": 0, "send_via": "switch", "ops": [
        {"op": "s", "src": [0, 0], "n": 1, "at": 0},
        {"op": "r", "dst": [0, 0], "n": 1, "at": 2}
      ]}
    ]},
    {"rank": 2, "blocks": [
      {"channel": 0, "id": 0, "recv_peer": 0, "recv_via": "switch", "send_peer": 0, "send_via": "switch", "ops": [
        {"op": "s", "src": [0, 0], "n": 1, "at": 0},
        {"op": "r", "dst": [0, 0], "n": 1, "at": 2}
      ]}
    ]},
    {"rank": 3, "blocks": [
      {"channel": 0, "id": 0, "recv_peer": 0, "recv_via": "switch", "send_peer": 0, "send_via": "switch", "ops": [
        {"op": "s", "src": [0, 0], "n": 1, "at": 0},
        {"op": "r", "dst": [0, 0], "n": 1, "at": 2}
      ]}
    ]}
  ]
}"#;

/// The shipped NVLS-style allreduce, whose lowering (at the time of writing) merges the head
/// rank's receives and sends into blocks of several peers.
const NVLS: &str = include_str!("../algorithms/allreduce_nvls.coll");

/// Plans with blocks of several peers (`send_also`, `recv_also`) on the CUDA executor, every
/// rank on one GPU: f32 sum at odd counts from 7 to 354 571 elements (one slice to many
/// sub-CTAs), both placements, eager and in graphs, all in bulk and all in LL, each checked
/// against the reference. None of the two hand-written plans' messages may go direct (every
/// one has an end in a block of several peers); the compiled NVLS allreduce on 4 ranks runs
/// beside them as the compiler lowers it.
#[test]
fn blocks_of_several_peers_run_in_bulk_and_ll_on_one_gpu() {
    use coll_executor::cuda::Protocol;
    use coll_executor::cuda::direct::CallDirect;

    // The plans are checked with or without a GPU.
    let plans: Vec<(&str, ValidPlan)> = [
        ("head_of_three", HEAD_OF_THREE),
        ("fan_of_four", FAN_OF_FOUR),
    ]
    .into_iter()
    .map(|(name, json)| {
        let plan = ValidPlan::from_json(json).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            plan.gpus
                .iter()
                .flat_map(|g| &g.blocks)
                .any(|b| b.several_peers()),
            "{name}"
        );
        (name, plan)
    })
    .collect();
    let Some(gpus) = gpus("blocks_of_several_peers_run_in_bulk_and_ll_on_one_gpu", 1) else {
        return;
    };
    let hand_written = plans.len();
    let mut plans = plans;
    plans.push(("nvls", plan("nvls", NVLS, 4)));
    for (i, (name, plan)) in plans.iter().enumerate() {
        // ll_max 0: bulk only; u64::MAX: LL at every size (the lines' slicing allows any).
        for (protocol, ll_max) in [(Protocol::Bulk, 0), (Protocol::Ll, u64::MAX)] {
            for graph in [None, Some(2)] {
                let base = sweep(&gpus[..1], graph);
                let c = BenchConfig {
                    // 7 x 37^k elements of 4 bytes: 7, 259, 9 583 and 354 571, all odd.
                    min_bytes: 28,
                    max_bytes: 4 << 20,
                    factor: 37,
                    settings: GpuSettings {
                        ll_max: Threshold::Bytes(ll_max),
                        ..base.settings.clone()
                    },
                    ..base
                };
                let what = format!("{name} {protocol:?} graph {graph:?}");
                let r = ok(bench(plan.clone(), &c, &mut |_, _| {}));
                assert_eq!(r.rows.len(), 4, "{what}");
                assert!(!any_wrong(&r), "{what}: {r:?}");
                for row in &r.rows {
                    assert_eq!(row.count % 2, 1, "{what}");
                    assert_eq!(row.protocol, protocol, "{what}: count {}", row.count);
                    assert_eq!(
                        row.out_of_place.wrong,
                        Some(0),
                        "{what}: count {}",
                        row.count
                    );
                    assert_eq!(row.in_place.wrong, Some(0), "{what}: count {}", row.count);
                    if i < hand_written {
                        assert_eq!(
                            (row.direct_out, row.direct_in),
                            (CallDirect::Off, CallDirect::Off),
                            "{what}: count {}",
                            row.count
                        );
                    }
                    assert!(!row.ce_out && !row.ce_in, "{what}");
                }
            }
        }
    }
}

/// LL128 with every call above LL's limits in it (`ll_max` 0, `ll128_max` unbounded): the
/// five shipped rings and alltoall on two GPUs, f32 sum at odd counts from 7 to 354 571
/// elements, both placements, eager and in graphs, once with the flags crossing their 63-bit
/// wrap, every element checked. Only between GPUs that CUDA says are NVLinked (native
/// atomics): elsewhere, and with both ranks on one GPU, the same calls run in bulk.
/// [`sweep`] over 7 x 37^k elements of 4 bytes (7, 259, 9 583 and 354 571, all odd) with the
/// settings `set` makes of the sweep's.
fn odd_sweep(
    gpus: &[usize],
    graph: Option<u32>,
    root: u32,
    set: impl FnOnce(GpuSettings) -> GpuSettings,
) -> BenchConfig {
    let base = sweep(gpus, graph);
    BenchConfig {
        min_bytes: 28,
        max_bytes: 4 << 20,
        factor: 37,
        root,
        settings: set(base.settings.clone()),
        ..base
    }
}

#[test]
fn ll128_runs_between_nvlinked_gpus_and_bulk_elsewhere() {
    use coll_executor::cuda::Protocol;
    let Some(gpus) = gpus("ll128_runs_between_nvlinked_gpus_and_bulk_elsewhere", 1) else {
        return;
    };
    let gpus = &gpus[..gpus.len().min(2)];
    let nvlinked = coll_executor::cuda::topo::local_peers()
        .is_ok_and(|p| p.len() >= 2 && coll_executor::cuda::topo::nvlink_everywhere(&p));
    let want = if gpus.len() == 2 && nvlinked {
        Protocol::Ll128
    } else {
        Protocol::Bulk
    };
    let cases: [(&str, &str, u32); 5] = [
        ("ring", RING, 0),
        ("allgather", ALLGATHER, 0),
        ("alltoall", ALLTOALL, 0),
        ("reducescatter", REDUCESCATTER, 0),
        ("broadcast", BROADCAST, 1),
    ];
    for (name, src, root) in cases {
        for (graph, epoch) in [(None, 0), (Some(2), 0), (None, (1u64 << 63) - 3)] {
            let c = odd_sweep(gpus, graph, root, |s| GpuSettings {
                ll_max: Threshold::Bytes(0),
                ll128_max: Threshold::Bytes(u64::MAX),
                ll_epoch: epoch,
                ..s
            });
            let what = format!(
                "{name} on {} GPU(s), graph {graph:?}, epoch {epoch}",
                gpus.len()
            );
            let r = ok(bench(plan(name, src, 2), &c, &mut |_, _| {}));
            assert_eq!(r.rows.len(), 4, "{what}");
            assert!(!any_wrong(&r), "{what}: {r:?}");
            for row in &r.rows {
                assert_eq!(row.protocol, want, "{what}: count {}", row.count);
                assert_eq!(
                    row.out_of_place.wrong,
                    Some(0),
                    "{what}: count {}",
                    row.count
                );
                assert_eq!(row.in_place.wrong, Some(0), "{what}: count {}", row.count);
            }
        }
    }
}

#[test]
fn copy_engine_calls_run_eager_and_from_graphs() {
    // Eager copy-engine calls order the GPUs with events, captured ones with barrier kernels
    // (their GPUs' streams are captured apart): both must give every element, at odd counts,
    // in both placements, with the kernel's calls of the same executor in between (the
    // bench's checks and warm-ups).
    use coll_executor::cuda::CeMin;
    let Some(gpus) = gpus("copy_engine_calls_run_eager_and_from_graphs", 1) else {
        return;
    };
    let gpus = &gpus[..gpus.len().min(2)];
    let cases: [(&str, &str, u32); 3] = [
        ("alltoall", ALLTOALL, 0),
        ("allgather", ALLGATHER, 0),
        ("broadcast", BROADCAST, 1),
    ];
    for (name, src, root) in cases {
        for graph in [None, Some(2)] {
            let c = odd_sweep(gpus, graph, root, |s| GpuSettings {
                ll_max: Threshold::Bytes(0),
                ll128_max: Threshold::Bytes(0),
                ce_min: CeMin::From(1),
                ..s
            });
            let what = format!("{name} on {} GPU(s), graph {graph:?}", gpus.len());
            let r = ok(bench(plan(name, src, 2), &c, &mut |_, _| {}));
            assert_eq!(r.rows.len(), 4, "{what}");
            assert!(!any_wrong(&r), "{what}: {r:?}");
            for row in &r.rows {
                assert!(row.ce_out, "{what}: count {} ran the kernel", row.count);
                assert_eq!(
                    (row.out_of_place.wrong, row.in_place.wrong),
                    (Some(0), Some(0)),
                    "{what}: count {}",
                    row.count
                );
            }
        }
    }
}
