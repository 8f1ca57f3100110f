//! Aborting the GPU executor's calls in flight, and seeing their faults without waiting for
//! their streams: a call in which one rank is held back (its stream waits on a word of pinned
//! host memory, cuStreamWaitValue32) so the other rank's kernel spins; then `abort()` from
//! another thread, or a short timeout, must show in `poll_error` while the held stream is
//! still not synchronised, and end the spinning kernel at once.
//!
//! Two ranks, one per GPU, or on one GPU opened twice (two streams of one device) where
//! there is one. GPU tests skip without a GPU and fail with `COLL_REQUIRE_GPU=1`
//! ([`coll_tests::gpu_gate`]).

use coll_compiler::plan::ValidPlan;
use coll_compiler::topology::Topology;
use coll_compiler::{CompileOptions, compile};
use coll_executor::cuda::cudarc::driver::CudaStream;
use coll_executor::cuda::device::{HostMapped, user_buffer};
use coll_executor::cuda::{CudaExecutor, GpuSettings, LoadOptions, RankBuffers};
use coll_executor::dtype::{DType, ReduceOp};
use coll_executor::{AbortCause, ExecError};
use coll_tests::gpu_gate::gpus;
use std::sync::Arc;
use std::time::{Duration, Instant};

const RING: &str = include_str!("../algorithms/allreduce_ring.coll");
const COUNT: u64 = 1 << 16;

fn ring() -> ValidPlan {
    let m = coll_lang::load_bytes("allreduce_ring.coll", RING.as_bytes().to_vec()).expect("parses");
    let topo = Topology::parse("nvswitch:2").expect("preset");
    compile(&m, &topo, &CompileOptions::default())
        .expect("compiles")
        .into_plan()
}

fn ok<T>(r: Result<T, ExecError>) -> T {
    r.unwrap_or_else(|e| panic!("GPU error: {e}"))
}

/// A two-rank ring executor with `timeout`, and a stream of its own per GPU.
fn load(found: &[usize], timeout: Duration) -> (CudaExecutor, Vec<Arc<CudaStream>>) {
    let ordinals = if found.len() >= 2 {
        vec![found[0], found[1]]
    } else {
        vec![found[0], found[0]]
    };
    let o = LoadOptions {
        settings: GpuSettings {
            timeout,
            ..GpuSettings::default()
        },
        ..LoadOptions::new(DType::F32, COUNT)
    };
    let exec = ok(CudaExecutor::load(ring(), &ordinals, &o));
    let streams = (0..2)
        .map(|i| ok(exec.gpu(i).expect("GPU").new_stream()))
        .collect();
    (exec, streams)
}

/// Holds `stream` of GPU `gi` back until the returned word is set to 1.
fn hold(exec: &CudaExecutor, gi: usize, stream: &CudaStream) -> HostMapped {
    coll_tests::gpu_gate::hold_stream(exec.gpu(gi).expect("GPU"), stream)
}

/// Enqueues an allreduce of both ranks, rank 1's stream held back; the buffers and the gate.
fn held_call(
    exec: &CudaExecutor,
    streams: &[Arc<CudaStream>],
) -> (Vec<coll_executor::cuda::device::DeviceBuffer>, HostMapped) {
    let bytes = COUNT * 4;
    let bufs: Vec<_> = (0..2u32)
        .flat_map(|q| {
            let gpu = exec.rank_device(q).expect("local rank");
            [ok(user_buffer(gpu, bytes)), ok(user_buffer(gpu, bytes))]
        })
        .collect();
    let gate = hold(exec, 1, &streams[1]);
    let ranks = [
        RankBuffers::OutOfPlace {
            send: &bufs[0],
            recv: &bufs[1],
        },
        RankBuffers::OutOfPlace {
            send: &bufs[2],
            recv: &bufs[3],
        },
    ];
    let refs: Vec<&CudaStream> = streams.iter().map(|s| s.as_ref()).collect();
    ok(exec.enqueue(&refs, &ranks, COUNT, ReduceOp::Sum));
    (bufs, gate)
}

/// Lets the held stream go and waits for both.
fn release(gate: &HostMapped, streams: &[Arc<CudaStream>]) {
    gate.store(0, 1);
    for s in streams {
        s.synchronize().expect("sync");
    }
}

#[test]
fn abort_ends_a_call_in_flight_and_poll_sees_it_without_syncing() {
    let Some(found) = gpus("abort_in_flight", 1) else {
        return;
    };
    let (exec, streams) = load(&found, Duration::from_secs(60));
    let (_bufs, gate) = held_call(&exec, &streams);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        exec.poll_error(),
        Ok(()),
        "rank 0 waits, nothing failed yet"
    );
    assert!(!exec.aborted());
    let start = Instant::now();
    let handle = exec.abort_handle();
    let aborter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        handle.abort()
    });
    // Rank 0's kernel gives up once the abort lands, though rank 1 never came.
    streams[0].synchronize().expect("sync rank 0");
    let waited = start.elapsed();
    ok(aborter.join().expect("abort thread"));
    assert!(
        waited < Duration::from_secs(2),
        "rank 0 ended {waited:?} after the call, not at the abort"
    );
    // Rank 1's stream is still held: the poll must not wait for it.
    let polled = Instant::now();
    let e = exec.poll_error().expect_err("aborted");
    assert!(polled.elapsed() < Duration::from_secs(1));
    let ExecError::Aborted { rank, at, cause } = &e else {
        panic!("not an abort: {e}");
    };
    assert!(*rank < 2, "{e}");
    assert!(at.starts_with(&format!("rank {rank}")), "{e}");
    assert_eq!(*cause, AbortCause::Caller);
    assert!(
        e.to_string().contains("the call was aborted by its owner"),
        "{e}"
    );
    release(&gate, &streams);
    assert!(matches!(exec.check_error(), Err(ExecError::Aborted { .. })));
    // Not reusable: a later call is refused with the same error, and enqueues nothing.
    let bytes = COUNT * 4;
    let a = ok(user_buffer(exec.rank_device(0).expect("rank 0"), bytes));
    let b = ok(user_buffer(exec.rank_device(1).expect("rank 1"), bytes));
    let refs: Vec<&CudaStream> = streams.iter().map(|s| s.as_ref()).collect();
    let again = exec.enqueue(
        &refs,
        &[RankBuffers::InPlace(&a), RankBuffers::InPlace(&b)],
        COUNT,
        ReduceOp::Sum,
    );
    assert!(matches!(again, Err(ExecError::Aborted { .. })), "{again:?}");
}

#[test]
fn a_timeout_shows_in_poll_while_the_streams_are_not_synchronised() {
    let Some(found) = gpus("abort_timeout_poll", 1) else {
        return;
    };
    let (exec, streams) = load(&found, Duration::from_secs(1));
    let (_bufs, gate) = held_call(&exec, &streams);
    // Rank 0's wait gives up after about a second; rank 1's stream stays held throughout.
    let start = Instant::now();
    let e = loop {
        match exec.poll_error() {
            Ok(()) => {
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "no timeout seen after 10 s"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => break e,
        }
    };
    assert!(start.elapsed() >= Duration::from_millis(500), "{e}");
    let ExecError::Timeout { at, waiting, .. } = &e else {
        panic!("not a timeout: {e}");
    };
    assert!(at.starts_with("rank 0, block "), "{e}");
    assert!(
        at.contains("allreduce_ring.coll:"),
        "names the source line: {e}"
    );
    assert!(!waiting.is_empty());
    assert!(!exec.aborted(), "a timeout is not an abort");
    release(&gate, &streams);
    assert!(matches!(exec.check_error(), Err(ExecError::Timeout { .. })));
}
