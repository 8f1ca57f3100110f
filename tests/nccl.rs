//! coll's NCCL library on GPUs, called as a C program calls NCCL: every collective of one
//! single-process communicator (two ranks: one per GPU, or both on GPU 0 where there is one
//! GPU) checked element by element, a call coll forwards, handles and errors; point-to-point
//! calls (a ring shift, one direction, to self) in several types and counts checked byte by
//! byte; split communicators (two 1-rank ones, one 2-rank one with the keys reversed, no
//! color) with collectives on them; the executor cache held at `COLL_NCCL_MAX_EXECUTORS`
//! while more edge sets than that cycle; a communicator of 4 processes split by parity, by
//! reversed keys and with no color; first calls (and a larger one) made inside CUDA-graph
//! captures, replayed; kernels compiled ahead of first calls, and a clean exit during it;
//! the real NCCL's communicator made at the first forwarded call (refused inside a capture)
//! or at init. Tests that need their own environment or several
//! processes run this binary again as child processes ([`run_processes`]). GPU tests
//! skip without a GPU and fail with `COLL_REQUIRE_GPU=1` ([`coll_tests::gpu_gate`]).
//! The file runs past 800 lines because those child processes run this same binary by test
//! name: the tests they run and the helpers they share stay in this file; the graph-capture
//! tests, which start no process, are in `nccl/capture.rs`, a module of the same binary.
//!
//! The library is used through its Rust crate (the same functions the shared library
//! exports), so the test needs nothing but the test binary; `bench/gpu_nccl.sh` also loads
//! the built `libnccl.so.2` into a C program.

use coll_executor::cuda::cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, result};
use coll_tests::gpu_gate::gpus;
use nccl::abi::UniqueId;
use nccl::entry::*;
use std::ffi::{CStr, c_int, c_void};
use std::sync::Arc;

#[path = "nccl/capture.rs"]
mod capture;

const N: usize = 2;
const FLOAT: c_int = 7;
const UINT32: c_int = 3;
const SUM: c_int = 0;

fn last_error() -> String {
    // SAFETY: ncclGetLastError returns this thread's NUL-terminated text.
    unsafe { CStr::from_ptr(ncclGetLastError(std::ptr::null_mut())) }
        .to_string_lossy()
        .into_owned()
}

fn ok(what: &str, r: c_int) {
    assert_eq!(r, 0, "{what}: {}", last_error());
}

/// Rank r's input element j.
fn value(r: usize, j: usize) -> f32 {
    ((r * 31 + j * 7) % 97) as f32
}

struct Rank {
    stream: Arc<CudaStream>,
    send: CudaSlice<f32>,
    recv: CudaSlice<f32>,
}

fn ptr(s: &CudaSlice<f32>, stream: &CudaStream) -> *mut c_void {
    let (p, _sync) = s.device_ptr(stream);
    p as *mut c_void
}

/// What rank r's receive buffer holds after `kind` of `count` (NCCL's count).
fn expected(kind: &str, r: usize, count: usize, root: usize) -> Vec<f32> {
    let sum = |j: usize| (0..N).map(|q| value(q, j)).sum::<f32>();
    match kind {
        "allreduce" => (0..count).map(sum).collect(),
        "allgather" => (0..N * count)
            .map(|j| value(j / count, j % count))
            .collect(),
        "reducescatter" => (0..count).map(|i| sum(r * count + i)).collect(),
        "alltoall" => (0..N * count)
            .map(|j| value(j / count, r * count + j % count))
            .collect(),
        "broadcast" => (0..count).map(|j| value(root, j)).collect(),
        "reduce" if r == root => (0..count).map(sum).collect(),
        _ => Vec::new(),
    }
}

#[test]
fn a_single_process_communicator_runs_every_collective_on_coll() {
    let Some(found) = gpus("nccl_collectives", 1) else {
        return;
    };
    let devs: Vec<c_int> = if found.len() >= N {
        vec![0, 1]
    } else {
        vec![0, 0]
    };
    let ctxs: Vec<Arc<CudaContext>> = devs
        .iter()
        .map(|&d| CudaContext::new(d as usize).expect("context"))
        .collect();
    let before = result::ctx::get_current().expect("current context");
    let mut comms = vec![std::ptr::null_mut::<c_void>(); N];
    // SAFETY: room for N handles; devs holds N ordinals.
    ok("ncclCommInitAll", unsafe {
        ncclCommInitAll(comms.as_mut_ptr(), N as c_int, devs.as_ptr())
    });
    for (r, &c) in comms.iter().enumerate() {
        let (mut rank, mut count, mut dev) = (-1, -1, -1);
        // SAFETY: live handles, one int each.
        unsafe {
            ok("rank", ncclCommUserRank(c, &mut rank));
            ok("count", ncclCommCount(c, &mut count));
            ok("device", ncclCommCuDevice(c, &mut dev));
        }
        assert_eq!((rank, count, dev), (r as c_int, N as c_int, devs[r]));
    }
    // An odd count: chunks of unequal size.
    let count = (1 << 16) + 3;
    for kind in [
        "allreduce",
        "allgather",
        "reducescatter",
        "alltoall",
        "broadcast",
        "reduce",
    ] {
        let root = 1;
        let (ins, outs) = match kind {
            "allgather" => (count, N * count),
            "reducescatter" => (N * count, count),
            "alltoall" => (N * count, N * count),
            _ => (count, count),
        };
        let ranks: Vec<Rank> = (0..N)
            .map(|r| {
                let stream = ctxs[r].new_stream().expect("stream");
                let host: Vec<f32> = (0..ins).map(|j| value(r, j)).collect();
                let send = stream.clone_htod(&host).expect("upload");
                let recv = stream.alloc_zeros::<f32>(outs).expect("alloc");
                Rank { stream, send, recv }
            })
            .collect();
        // SAFETY: NCCL's contract: live device buffers of each rank's GPU, sized for the
        // call, on that rank's stream, kept until the streams are synchronised below.
        unsafe {
            ok("ncclGroupStart", ncclGroupStart());
            for (r, k) in ranks.iter().enumerate() {
                let (s, d, st) = (
                    ptr(&k.send, &k.stream),
                    ptr(&k.recv, &k.stream),
                    k.stream.cu_stream() as *mut c_void,
                );
                let rc = match kind {
                    "allreduce" => ncclAllReduce(s, d, count, FLOAT, SUM, comms[r], st),
                    "allgather" => ncclAllGather(s, d, count, FLOAT, comms[r], st),
                    "reducescatter" => ncclReduceScatter(s, d, count, FLOAT, SUM, comms[r], st),
                    "alltoall" => ncclAlltoAll(s, d, count, FLOAT, comms[r], st),
                    "broadcast" => ncclBroadcast(s, d, count, FLOAT, root as c_int, comms[r], st),
                    _ => ncclReduce(s, d, count, FLOAT, SUM, root as c_int, comms[r], st),
                };
                ok(kind, rc);
            }
            ok("ncclGroupEnd", ncclGroupEnd());
        }
        for (r, k) in ranks.iter().enumerate() {
            k.stream.synchronize().expect("sync");
            let got = k.stream.clone_dtoh(&k.recv).expect("download");
            let want = expected(kind, r, count, root);
            if kind == "reduce" && r != root {
                continue;
            }
            let wrong = got.iter().zip(&want).filter(|(a, b)| a != b).count();
            assert_eq!(wrong, 0, "{kind}: rank {r}: {wrong} wrong elements");
        }
    }
    assert_eq!(
        result::ctx::get_current().expect("current context"),
        before,
        "the caller's current context survives"
    );
    // uint32 is not reduced by coll: forwarded to the real NCCL where one runs beside coll
    // (two GPUs), else refused with the reason.
    let streams: Vec<Arc<CudaStream>> = ctxs
        .iter()
        .map(|c| c.new_stream().expect("stream"))
        .collect();
    let bufs: Vec<CudaSlice<u32>> = streams
        .iter()
        .map(|s| s.clone_htod(&[1u32; 16]).expect("upload"))
        .collect();
    // SAFETY: live 16-element buffers, each on its rank's GPU and stream, kept until the
    // streams are synchronised below.
    let rc = unsafe {
        ncclGroupStart();
        for r in 0..N {
            let (p, _s) = bufs[r].device_ptr(&streams[r]);
            let p = p as *mut c_void;
            let rc = ncclAllReduce(
                p,
                p,
                16,
                UINT32,
                SUM,
                comms[r],
                streams[r].cu_stream() as *mut c_void,
            );
            assert_eq!(rc, 0, "a call inside a group is queued: {}", last_error());
        }
        ncclGroupEnd()
    };
    if devs[0] == devs[1] {
        assert_eq!(rc, 5, "ncclInvalidUsage");
        let e = last_error();
        assert!(e.contains("coll does not reduce uint32"), "{e}");
    } else {
        assert_eq!(rc, 0, "forwarded to the real NCCL: {}", last_error());
        for (s, b) in streams.iter().zip(&bufs) {
            s.synchronize().expect("sync");
            assert_eq!(s.clone_dtoh(b).expect("download"), vec![2u32; 16]);
        }
    }
    for s in &streams {
        s.synchronize().expect("sync");
    }
    for c in comms {
        // SAFETY: live handles, destroyed once.
        ok("ncclCommDestroy", unsafe { ncclCommDestroy(c) });
    }
}

#[test]
fn bad_handles_and_arguments_are_errors_not_crashes() {
    let mut v = 0;
    // SAFETY: a writable int.
    ok("ncclGetVersion", unsafe { ncclGetVersion(&mut v) });
    assert_eq!(v, 22803);
    // SAFETY: a made-up handle is looked up, never dereferenced.
    let rc = unsafe { ncclCommCount(0x1234 as *const c_void, &mut v) };
    assert_eq!(rc, 4, "ncclInvalidArgument");
    assert!(
        last_error().contains("is not a live communicator"),
        "{}",
        last_error()
    );
    // SAFETY: null out-pointer, checked by the library.
    assert_eq!(unsafe { ncclGetVersion(std::ptr::null_mut()) }, 4);
    // SAFETY: an unmatched group end is refused.
    assert_eq!(unsafe { ncclGroupEnd() }, 5);
    assert!(last_error().contains("ncclGroupEnd without ncclGroupStart"));
    let foreign = UniqueId::from_bytes(&[0; 128]);
    let mut comm = std::ptr::null_mut();
    // SAFETY: a handle slot; the id is checked before anything else happens.
    let rc = unsafe { ncclCommInitRank(&mut comm, 2, foreign, 0) };
    assert_eq!(rc, 4);
    assert!(
        last_error().contains("not made by ncclGetUniqueId"),
        "{}",
        last_error()
    );
    // SAFETY: NCCL's error strings are static.
    let s = unsafe { CStr::from_ptr(ncclGetErrorString(5)) };
    assert!(s.to_string_lossy().starts_with("invalid usage"));
}

const DOUBLE: c_int = 8;

fn bptr(s: &CudaSlice<u8>, stream: &CudaStream) -> *mut c_void {
    let (p, _sync) = s.device_ptr(stream);
    p as *mut c_void
}

/// Rank r's byte i of a point-to-point buffer.
fn byte(r: usize, i: usize) -> u8 {
    ((r * 101 + i * 13 + i / 251) % 256) as u8
}

/// Two ranks of one single-process communicator (one per GPU, or both on GPU 0), their
/// contexts and the devices they run on.
fn two_ranks(name: &str) -> Option<(Vec<*mut c_void>, Vec<Arc<CudaContext>>)> {
    let found = gpus(name, 1)?;
    let devs: Vec<c_int> = if found.len() >= N {
        vec![0, 1]
    } else {
        vec![0, 0]
    };
    let ctxs: Vec<Arc<CudaContext>> = devs
        .iter()
        .map(|&d| CudaContext::new(d as usize).expect("context"))
        .collect();
    let mut comms = vec![std::ptr::null_mut::<c_void>(); N];
    // SAFETY: room for N handles; devs holds N ordinals.
    ok("ncclCommInitAll", unsafe {
        ncclCommInitAll(comms.as_mut_ptr(), N as c_int, devs.as_ptr())
    });
    Some((comms, ctxs))
}

/// One rank's point-to-point call of a test: (send to, receive from), either optional.
type P2pPlan = [(Option<usize>, Option<usize>); N];

/// Runs `plan` on every rank in one group with `count` elements of `esize` bytes (type
/// `dtype`) and checks every receive byte by byte against its sender's input, and every
/// buffer no one writes as untouched.
fn p2p_round(
    comms: &[*mut c_void],
    ctxs: &[Arc<CudaContext>],
    plan: &P2pPlan,
    dtype: c_int,
    esize: usize,
    count: usize,
) {
    let bytes = count * esize;
    let streams: Vec<Arc<CudaStream>> = ctxs
        .iter()
        .map(|c| c.new_stream().expect("stream"))
        .collect();
    let sends: Vec<CudaSlice<u8>> = (0..N)
        .map(|r| {
            let host: Vec<u8> = (0..bytes).map(|i| byte(r, i)).collect();
            streams[r].clone_htod(&host).expect("upload")
        })
        .collect();
    let recvs: Vec<CudaSlice<u8>> = (0..N)
        .map(|r| streams[r].alloc_zeros::<u8>(bytes).expect("alloc"))
        .collect();
    // SAFETY: NCCL's contract: live device buffers of each rank's GPU of `bytes`, on that
    // rank's stream, kept until the streams are synchronised below.
    unsafe {
        ok("ncclGroupStart", ncclGroupStart());
        for (r, &(to, from)) in plan.iter().enumerate() {
            let st = streams[r].cu_stream() as *mut c_void;
            if let Some(to) = to {
                let s = bptr(&sends[r], &streams[r]);
                ok(
                    "ncclSend",
                    ncclSend(s, count, dtype, to as c_int, comms[r], st),
                );
            }
            if let Some(from) = from {
                let d = bptr(&recvs[r], &streams[r]);
                ok(
                    "ncclRecv",
                    ncclRecv(d, count, dtype, from as c_int, comms[r], st),
                );
            }
        }
        ok("ncclGroupEnd", ncclGroupEnd());
    }
    for (r, &(_, from)) in plan.iter().enumerate() {
        streams[r].synchronize().expect("sync");
        let got = streams[r].clone_dtoh(&recvs[r]).expect("download");
        let want: Vec<u8> = match from {
            Some(q) => (0..bytes).map(|i| byte(q, i)).collect(),
            None => vec![0; bytes],
        };
        let wrong = got.iter().zip(&want).filter(|(a, b)| a != b).count();
        assert_eq!(
            wrong, 0,
            "{plan:?} dtype {dtype} count {count}: rank {r}: {wrong} wrong bytes"
        );
        let sent = streams[r].clone_dtoh(&sends[r]).expect("download");
        assert!(
            sent.iter().enumerate().all(|(i, &b)| b == byte(r, i)),
            "rank {r}'s send buffer is untouched"
        );
    }
}

#[test]
fn point_to_point_calls_run_on_coll() {
    let Some((comms, ctxs)) = two_ranks("nccl_p2p") else {
        return;
    };
    // (type, element size): floats, integers, and types coll does not reduce, which it
    // still moves.
    let types = [
        (FLOAT, 4),
        (0, 1),
        (6, 2),
        (9, 2),
        (DOUBLE, 8),
        (5, 8),
        (UINT32, 4),
    ];
    let ring: P2pPlan = [(Some(1), Some(1)), (Some(0), Some(0))];
    let one_way: P2pPlan = [(Some(1), None), (None, Some(0))];
    let back: P2pPlan = [(None, Some(1)), (Some(0), None)];
    let to_self: P2pPlan = [(Some(0), Some(0)), (Some(1), Some(1))];
    for (dtype, esize) in types {
        for count in [1, 7, (1 << 16) + 3] {
            for plan in [&ring, &one_way, &back, &to_self] {
                p2p_round(&comms, &ctxs, plan, dtype, esize, count);
            }
        }
    }
    let summary = nccl::route::summary();
    let served = summary
        .split("; forwarded")
        .next()
        .expect("the served part");
    for kind in ["send float", "recv float", "send uint64", "recv bfloat16"] {
        assert!(served.contains(kind), "{kind}: {summary}");
    }
    for c in comms {
        // SAFETY: live handles, destroyed once.
        ok("ncclCommDestroy", unsafe { ncclCommDestroy(c) });
    }
}

/// The rank and size of a communicator.
fn rank_count(c: *mut c_void) -> (c_int, c_int) {
    let (mut rank, mut count) = (-1, -1);
    // SAFETY: a live handle, one int each.
    unsafe {
        ok("rank", ncclCommUserRank(c, &mut rank));
        ok("count", ncclCommCount(c, &mut count));
    }
    (rank, count)
}

/// Splits both ranks of `comms` in one group with (color, key) per parent rank.
fn split(comms: &[*mut c_void], how: [(c_int, c_int); N]) -> Vec<*mut c_void> {
    let mut children = vec![std::ptr::null_mut::<c_void>(); N];
    // SAFETY: live parent handles; one handle slot each, kept until the group's end.
    unsafe {
        ok("ncclGroupStart", ncclGroupStart());
        for (r, (color, key)) in how.into_iter().enumerate() {
            ok(
                "ncclCommSplit",
                ncclCommSplit(comms[r], color, key, &mut children[r], std::ptr::null_mut()),
            );
        }
        ok("ncclGroupEnd", ncclGroupEnd());
    }
    children
}

/// Allgathers `count` floats over the children of parent ranks `members` (in child-rank
/// order of the parent ranks they are): every child's output, each parent rank r
/// contributing value(r, j).
fn allgather(
    children: &[*mut c_void],
    ctxs: &[Arc<CudaContext>],
    members: &[usize],
    count: usize,
) -> Vec<Vec<f32>> {
    let m = members.len();
    let ranks: Vec<Rank> = members
        .iter()
        .map(|&r| {
            let stream = ctxs[r].new_stream().expect("stream");
            let host: Vec<f32> = (0..count).map(|j| value(r, j)).collect();
            let send = stream.clone_htod(&host).expect("upload");
            let recv = stream.alloc_zeros::<f32>(m * count).expect("alloc");
            Rank { stream, send, recv }
        })
        .collect();
    // SAFETY: live buffers of each rank's GPU, sized for the call, on its stream, kept
    // until the streams are synchronised below.
    unsafe {
        ok("ncclGroupStart", ncclGroupStart());
        for (k, &r) in ranks.iter().zip(members) {
            ok(
                "ncclAllGather",
                ncclAllGather(
                    ptr(&k.send, &k.stream),
                    ptr(&k.recv, &k.stream),
                    count,
                    FLOAT,
                    children[r],
                    k.stream.cu_stream() as *mut c_void,
                ),
            );
        }
        ok("ncclGroupEnd", ncclGroupEnd());
    }
    ranks
        .iter()
        .map(|k| {
            k.stream.synchronize().expect("sync");
            k.stream.clone_dtoh(&k.recv).expect("download")
        })
        .collect()
}

#[test]
fn split_communicators_run_on_coll() {
    let Some((comms, ctxs)) = two_ranks("nccl_split") else {
        return;
    };
    let count = 1001;
    // Two 1-rank children: each gathers only its own input.
    let alone = split(&comms, [(0, 0), (1, 0)]);
    for r in 0..N {
        assert_eq!(rank_count(alone[r]), (0, 1), "parent rank {r}");
        let out = allgather(&alone, &ctxs, &[r], count);
        let want: Vec<f32> = (0..count).map(|j| value(r, j)).collect();
        assert_eq!(out[0], want, "parent rank {r} alone");
    }
    // One 2-rank child with the keys reversed: parent rank 1 is child rank 0.
    let swapped = split(&comms, [(7, 1), (7, 0)]);
    assert_eq!(rank_count(swapped[0]), (1, 2));
    assert_eq!(rank_count(swapped[1]), (0, 2));
    let out = allgather(&swapped, &ctxs, &[1, 0], count);
    let want: Vec<f32> = [1, 0]
        .iter()
        .flat_map(|&r| (0..count).map(move |j| value(r, j)))
        .collect();
    for (k, o) in out.iter().enumerate() {
        let wrong = o.iter().zip(&want).filter(|(a, b)| a != b).count();
        assert_eq!(wrong, 0, "child rank {k}: {wrong} wrong elements");
    }
    // An allreduce on the child sums both parents' inputs.
    let streams: Vec<Arc<CudaStream>> = ctxs
        .iter()
        .map(|c| c.new_stream().expect("stream"))
        .collect();
    let bufs: Vec<CudaSlice<f32>> = (0..N)
        .map(|r| {
            let host: Vec<f32> = (0..count).map(|j| value(r, j)).collect();
            streams[r].clone_htod(&host).expect("upload")
        })
        .collect();
    // SAFETY: live buffers of each rank's GPU, on its stream, kept until synchronised.
    unsafe {
        ok("ncclGroupStart", ncclGroupStart());
        for r in 0..N {
            let p = ptr(&bufs[r], &streams[r]);
            let st = streams[r].cu_stream() as *mut c_void;
            ok(
                "ncclAllReduce",
                ncclAllReduce(p, p, count, FLOAT, SUM, swapped[r], st),
            );
        }
        ok("ncclGroupEnd", ncclGroupEnd());
    }
    for r in 0..N {
        streams[r].synchronize().expect("sync");
        let got = streams[r].clone_dtoh(&bufs[r]).expect("download");
        let want: Vec<f32> = (0..count).map(|j| value(0, j) + value(1, j)).collect();
        assert_eq!(got, want, "allreduce on the child, parent rank {r}");
    }
    // No color: that rank gets no communicator.
    let none = split(&comms, [(3, 0), (-1, 0)]);
    assert!(none[1].is_null());
    assert_eq!(rank_count(none[0]), (0, 1));
    for c in alone
        .into_iter()
        .chain(swapped)
        .chain([none[0]])
        .chain(comms)
    {
        // SAFETY: live handles, destroyed once.
        ok("ncclCommDestroy", unsafe { ncclCommDestroy(c) });
    }
}

/// Holds `stream` back until the returned word (pinned host memory of GPU `dev`) is set to 1.
fn hold_stream(
    dev: usize,
    stream: &CudaStream,
) -> (
    coll_executor::cuda::device::Gpu,
    coll_executor::cuda::device::HostMapped,
) {
    let gpu = coll_executor::cuda::device::Gpu::open(dev).expect("GPU");
    let gate = coll_tests::gpu_gate::hold_stream(&gpu, stream);
    (gpu, gate)
}

#[test]
fn comm_abort_returns_at_once_while_a_call_is_stalled() {
    let Some((comms, ctxs)) = two_ranks("nccl_abort") else {
        return;
    };
    let async_error = |c: *mut c_void| {
        let mut code = -1;
        // SAFETY: a live handle and one int.
        ok("ncclCommGetAsyncError", unsafe {
            ncclCommGetAsyncError(c, &mut code)
        });
        code
    };
    assert_eq!(async_error(comms[0]), 0, "ncclSuccess before any call");
    let count = 1 << 16;
    let ranks: Vec<Rank> = (0..N)
        .map(|r| {
            let stream = ctxs[r].new_stream().expect("stream");
            let host: Vec<f32> = (0..count).map(|j| value(r, j)).collect();
            let send = stream.clone_htod(&host).expect("upload");
            let recv = stream.alloc_zeros::<f32>(count).expect("alloc");
            Rank { stream, send, recv }
        })
        .collect();
    let call = || {
        // SAFETY: NCCL's contract: live device buffers of each rank's GPU, sized for the
        // call, on that rank's stream, kept until the streams are synchronised below.
        unsafe {
            ok("ncclGroupStart", ncclGroupStart());
            for (r, k) in ranks.iter().enumerate() {
                let (s, d, st) = (
                    ptr(&k.send, &k.stream),
                    ptr(&k.recv, &k.stream),
                    k.stream.cu_stream() as *mut c_void,
                );
                ok(
                    "ncclAllReduce",
                    ncclAllReduce(s, d, count, FLOAT, SUM, comms[r], st),
                );
            }
            ok("ncclGroupEnd", ncclGroupEnd());
        }
    };
    // A first call loads the executor, which allocates and frees device memory: that waits
    // for work already on the GPU (the driver's implicit synchronisation), so it runs before
    // a stream is held.
    call();
    for k in &ranks {
        k.stream.synchronize().expect("sync");
    }
    // Rank 1 never reaches the call until released: rank 0's kernel spins (one GPU each),
    // or the one kernel of both waits behind rank 1's stream (both on GPU 0).
    let (_gpu, gate) = hold_stream(ctxs[1].ordinal(), &ranks[1].stream);
    call();
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(async_error(comms[0]), 0, "a call still waiting is no error");
    let start = std::time::Instant::now();
    // SAFETY: a live handle, closed once.
    ok("ncclCommAbort", unsafe { ncclCommAbort(comms[0]) });
    let took = start.elapsed();
    assert!(
        took < std::time::Duration::from_secs(1),
        "ncclCommAbort took {took:?}"
    );
    // The other communicator shares the aborted executors: its fault shows at once, with
    // the text ncclGetLastError gives.
    let code = async_error(comms[1]);
    assert_eq!(code, 5, "ncclInvalidUsage: {}", last_error());
    let e = last_error();
    assert!(
        e.starts_with("ncclCommGetAsyncError: rank ") && e.contains("the call was aborted"),
        "{e}"
    );
    gate.store(0, 1);
    for k in &ranks {
        k.stream.synchronize().expect("sync");
    }
    let start = std::time::Instant::now();
    // SAFETY: a live handle, closed once.
    ok("ncclCommAbort", unsafe { ncclCommAbort(comms[1]) });
    assert!(start.elapsed() < std::time::Duration::from_secs(1));
}

/// Set in the processes a test starts from this test binary: which of them this one is.
const ROLE: &str = "COLL_NCCL_TEST_ROLE";

/// This process's index when a test started it ([`run_processes`]), else `None`.
fn role() -> Option<usize> {
    std::env::var(ROLE).ok()?.trim().parse().ok()
}

/// Runs test `name` of this binary again in `procs` processes, process `p` with [`ROLE`]
/// `p` and `env` added to this environment (`COLL_REQUIRE_GPU` passes on), and fails with
/// every process's output when one fails or runs past `limit`.
fn run_processes(name: &str, procs: usize, env: &[(&str, String)], limit: std::time::Duration) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let exe = std::env::current_exe().expect("this test binary");
    let mut children: Vec<(std::process::Child, std::path::PathBuf)> = (0..procs)
        .map(|p| {
            let log = dir.path().join(format!("process-{p}.log"));
            let out = std::fs::File::create(&log).expect("a log file");
            let err = out.try_clone().expect("a log file");
            let mut cmd = std::process::Command::new(&exe);
            cmd.args(["--exact", name, "--nocapture", "--test-threads", "1"])
                .env(ROLE, p.to_string())
                .env("COLL_NCCL_TEST_DIR", dir.path())
                .stdout(out)
                .stderr(err);
            for (k, v) in env {
                cmd.env(k, v);
            }
            (cmd.spawn().expect("a test process"), log)
        })
        .collect();
    let start = std::time::Instant::now();
    let mut codes: Vec<Option<std::process::ExitStatus>> = vec![None; procs];
    while codes.iter().any(Option::is_none) && start.elapsed() < limit {
        for (p, (child, _)) in children.iter_mut().enumerate() {
            if codes[p].is_none() {
                codes[p] = child.try_wait().expect("wait for a test process");
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let mut report = String::new();
    for (p, (child, log)) in children.iter_mut().enumerate() {
        if codes[p].is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let text = std::fs::read_to_string(log).unwrap_or_default();
        report.push_str(&format!("--- process {p}: {:?}\n{text}\n", codes[p]));
    }
    let passed = codes.iter().all(|c| c.is_some_and(|c| c.success()));
    assert!(
        passed,
        "{name}: a process failed or ran past {limit:?}:\n{report}"
    );
    // The processes ran the test, not nothing: each prints this line at its end.
    for p in 0..procs {
        assert!(
            report.contains(&format!("{name}: process {p} done")),
            "{name}: process {p} did not finish its part:\n{report}"
        );
    }
}

/// The clique behind a coll-served communicator.
fn clique_of(c: *mut c_void) -> Arc<nccl::clique::Clique> {
    let comm = nccl::comm::get(c).expect("a live communicator");
    match comm.backend().expect("initialised") {
        nccl::comm::Backend::Coll { clique, .. } => Arc::clone(clique),
        other => panic!("not served by coll: {other:?}"),
    }
}

/// More distinct point-to-point edge sets and types than `COLL_NCCL_MAX_EXECUTORS` allows
/// executors, twice over: every result right, and the cache never above its bound (the
/// second pass reloads what the first evicted).
#[test]
fn executors_stay_within_their_bound() {
    const NAME: &str = "executors_stay_within_their_bound";
    const BOUND: usize = 3;
    if role().is_none() {
        if gpus(NAME, 1).is_some() {
            let env = [("COLL_NCCL_MAX_EXECUTORS", BOUND.to_string())];
            run_processes(NAME, 1, &env, std::time::Duration::from_secs(300));
        }
        return;
    }
    let Some((comms, ctxs)) = two_ranks(NAME) else {
        return;
    };
    let global = nccl::global::global().expect("the library's settings");
    assert_eq!(global.settings.max_executors, BOUND);
    let clique = clique_of(comms[0]);
    let ring: P2pPlan = [(Some(1), Some(1)), (Some(0), Some(0))];
    let one_way: P2pPlan = [(Some(1), None), (None, Some(0))];
    let back: P2pPlan = [(None, Some(1)), (Some(0), None)];
    let to_self: P2pPlan = [(Some(0), Some(0)), (Some(1), Some(1))];
    let mut most = 0;
    for pass in 0..2 {
        // Element sizes 4 and 1: executors differ by type as well as by edge set.
        for (dtype, esize) in [(FLOAT, 4), (0, 1)] {
            for plan in [&ring, &one_way, &back, &to_self] {
                p2p_round(&comms, &ctxs, plan, dtype, esize, 1000 + pass);
                let held = clique.cached_executors();
                assert!(held <= BOUND, "{held} executors cached, bound {BOUND}");
                most = most.max(held);
            }
        }
    }
    assert_eq!(most, BOUND, "8 distinct executors fill the cache");
    assert_eq!(clique.cached_executors(), BOUND);
    for c in comms {
        // SAFETY: live handles, destroyed once.
        ok("ncclCommDestroy", unsafe { ncclCommDestroy(c) });
    }
    println!("{NAME}: process 0 done");
}

/// Process `p`'s rank-`p` communicator of `n` ranks over processes: rank 0 makes the id
/// and hands it to the others through a file in the test's directory.
fn init_over_processes(p: usize, n: usize) -> *mut c_void {
    let dir = std::path::PathBuf::from(std::env::var("COLL_NCCL_TEST_DIR").expect("a directory"));
    let path = dir.join("id");
    let id = if p == 0 {
        let mut id = UniqueId::from_bytes(&[0; nccl::abi::UNIQUE_ID_BYTES]);
        // SAFETY: room for one id.
        ok("ncclGetUniqueId", unsafe { ncclGetUniqueId(&mut id) });
        // Written whole, then renamed: the others never read half an id.
        let tmp = dir.join("id.tmp");
        std::fs::write(&tmp, id.bytes()).expect("write the id");
        std::fs::rename(&tmp, &path).expect("publish the id");
        id
    } else {
        let start = std::time::Instant::now();
        loop {
            if let Ok(b) = std::fs::read(&path) {
                let b: [u8; nccl::abi::UNIQUE_ID_BYTES] = b.try_into().expect("a whole id");
                break UniqueId::from_bytes(&b);
            }
            assert!(
                start.elapsed() < std::time::Duration::from_secs(60),
                "rank 0 published no id"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    let mut comm = std::ptr::null_mut();
    // SAFETY: one handle slot; the id rank 0 made; this thread's current context is the
    // rank's device.
    ok("ncclCommInitRank", unsafe {
        ncclCommInitRank(&mut comm, n as c_int, id, p as c_int)
    });
    comm
}

/// One rank's `ncclCommSplit` (no group: one rank per process).
fn split_one(comm: *mut c_void, color: c_int, key: c_int) -> *mut c_void {
    let mut child = std::ptr::null_mut();
    // SAFETY: a live parent; one handle slot.
    ok("ncclCommSplit", unsafe {
        ncclCommSplit(comm, color, key, &mut child, std::ptr::null_mut())
    });
    child
}

/// One rank's in-place allreduce (`gather` false) or allgather of `input` on `comm`: its
/// output.
fn collective_one(
    comm: *mut c_void,
    ctx: &Arc<CudaContext>,
    input: &[f32],
    gather: bool,
) -> Vec<f32> {
    let n = rank_count(comm).1 as usize;
    let stream = ctx.new_stream().expect("stream");
    let send = stream.clone_htod(input).expect("upload");
    let outs = if gather { n * input.len() } else { input.len() };
    let recv = stream.alloc_zeros::<f32>(outs).expect("alloc");
    let st = stream.cu_stream() as *mut c_void;
    // SAFETY: live buffers of this rank's GPU, sized for the call, on its stream, kept
    // until it is synchronised below.
    let rc = unsafe {
        if gather {
            ncclAllGather(
                ptr(&send, &stream),
                ptr(&recv, &stream),
                input.len(),
                FLOAT,
                comm,
                st,
            )
        } else {
            let p = ptr(&send, &stream);
            ncclAllReduce(p, p, input.len(), FLOAT, SUM, comm, st)
        }
    };
    ok(
        if gather {
            "ncclAllGather"
        } else {
            "ncclAllReduce"
        },
        rc,
    );
    stream.synchronize().expect("sync");
    stream
        .clone_dtoh(if gather { &recv } else { &send })
        .expect("download")
}

/// A communicator of 4 ranks in 4 processes (on the machine's GPUs in turn, so several
/// share one where there are fewer), split by coll alone (`COLL_NCCL_FORWARD=0`: no real
/// NCCL): by rank parity, then into one color with the keys reversed, then with one rank
/// in no color; every child's ranks, an allreduce on each and an allgather that shows the
/// reversed order, and the parent's calls before and after the splits.
#[test]
fn split_across_processes_runs_on_coll() {
    const NAME: &str = "split_across_processes_runs_on_coll";
    const PROCS: usize = 4;
    let Some(p) = role() else {
        if gpus(NAME, 1).is_some() {
            let env = [("COLL_NCCL_FORWARD", "0".to_string())];
            run_processes(NAME, PROCS, &env, std::time::Duration::from_secs(400));
        }
        return;
    };
    let Some(found) = gpus(NAME, 1) else {
        return;
    };
    let ctx = CudaContext::new(found[p % found.len()]).expect("context");
    let parent = init_over_processes(p, PROCS);
    assert_eq!(rank_count(parent), (p as c_int, PROCS as c_int));
    let count = 4099;
    let input: Vec<f32> = (0..count).map(|j| value(p, j)).collect();
    let sum_of = |ranks: &[usize]| -> Vec<f32> {
        (0..count)
            .map(|j| ranks.iter().map(|&r| value(r, j)).sum())
            .collect()
    };
    // The parent serves calls before and after its splits: the splits' exchanges and its
    // plans' loads share its mesh and must stay in step.
    let got = collective_one(parent, &ctx, &input, false);
    assert_eq!(got, sum_of(&[0, 1, 2, 3]), "parent allreduce, rank {p}");
    // Parity: children {0, 2} and {1, 3}, ranked by parent rank.
    let parity = split_one(parent, (p % 2) as c_int, p as c_int);
    assert_eq!(rank_count(parity), ((p / 2) as c_int, 2));
    clique_of(parity);
    let got = collective_one(parity, &ctx, &input, false);
    assert_eq!(
        got,
        sum_of(&[p % 2, p % 2 + 2]),
        "parity allreduce, rank {p}"
    );
    // One color, keys reversed: parent rank p is child rank 3 - p.
    let reversed = split_one(parent, 0, (PROCS - 1 - p) as c_int);
    assert_eq!(
        rank_count(reversed),
        ((PROCS - 1 - p) as c_int, PROCS as c_int)
    );
    clique_of(reversed);
    let got = collective_one(reversed, &ctx, &input, false);
    assert_eq!(got, sum_of(&[0, 1, 2, 3]), "reversed allreduce, rank {p}");
    let got = collective_one(reversed, &ctx, &input, true);
    let want: Vec<f32> = (0..PROCS)
        .flat_map(|k| (0..count).map(move |j| value(PROCS - 1 - k, j)))
        .collect();
    assert_eq!(got, want, "reversed allgather, rank {p}");
    // Rank 3 in no color: a null handle; the others a 3-rank child.
    let some = split_one(parent, if p == 3 { -1 } else { 5 }, 0);
    if p == 3 {
        assert!(some.is_null());
    } else {
        assert_eq!(rank_count(some), (p as c_int, 3));
        let got = collective_one(some, &ctx, &input, false);
        assert_eq!(got, sum_of(&[0, 1, 2]), "3-rank allreduce, rank {p}");
    }
    let got = collective_one(parent, &ctx, &input, true);
    let want: Vec<f32> = (0..PROCS)
        .flat_map(|k| (0..count).map(move |j| value(k, j)))
        .collect();
    assert_eq!(got, want, "parent allgather after the splits, rank {p}");
    let children = [parity, reversed, some];
    for c in children
        .into_iter()
        .filter(|c| !c.is_null())
        .chain([parent])
    {
        // SAFETY: live handles, destroyed once.
        ok("ncclCommDestroy", unsafe { ncclCommDestroy(c) });
    }
    println!("{NAME}: process {p} done");
}

/// A communicator's init compiles the kernels of `COLL_NCCL_PREBUILD`'s element types into
/// the kernel cache in the background, with no call made; and a process that exits at once
/// after init, while that compile runs, exits cleanly (the exit waits for the element type
/// in progress, then stops it).
#[test]
fn kernels_are_compiled_ahead_of_first_calls() {
    const NAME: &str = "kernels_are_compiled_ahead_of_first_calls";
    const EARLY: &str = "COLL_NCCL_TEST_EXIT_AT_ONCE";
    let units_in = |dir: &std::path::Path, dtype: &str| {
        std::fs::read_dir(dir).map_or(0, |d| {
            d.flatten()
                .filter(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    n.contains(&format!("-{dtype}-")) && n.ends_with(".cubin")
                })
                .count()
        })
    };
    if role().is_none() {
        if gpus(NAME, 1).is_some() {
            let dir = tempfile::tempdir().expect("a cache directory");
            let cache = dir.path().to_string_lossy().into_owned();
            let env = [
                ("COLL_CACHE_DIR", cache.clone()),
                ("COLL_NCCL_PREBUILD", "i32,f64".to_string()),
            ];
            run_processes(NAME, 1, &env, std::time::Duration::from_secs(300));
            assert_eq!(units_in(dir.path(), "i32"), 9);
            assert_eq!(units_in(dir.path(), "f64"), 9);
            let dir = tempfile::tempdir().expect("a cache directory");
            let env = [
                ("COLL_CACHE_DIR", dir.path().to_string_lossy().into_owned()),
                ("COLL_NCCL_PREBUILD", "f16,bf16,i64,u8".to_string()),
                (EARLY, "1".to_string()),
            ];
            run_processes(NAME, 1, &env, std::time::Duration::from_secs(300));
        }
        return;
    }
    if std::env::var(EARLY).is_ok() {
        // No GPU gate in this process: it loads NVRTC before the library does, which would
        // hide the order of exit handlers a C program meets (the parent checked the GPU).
        let _ctx = CudaContext::new(0).expect("context");
        let devs: [c_int; N] = [0; N];
        let mut comms = [std::ptr::null_mut::<c_void>(); N];
        // SAFETY: room for N handles; devs holds N ordinals.
        ok("ncclCommInitAll", unsafe {
            ncclCommInitAll(comms.as_mut_ptr(), N as c_int, devs.as_ptr())
        });
        for c in comms {
            // SAFETY: live handles, destroyed once.
            ok("ncclCommDestroy", unsafe { ncclCommDestroy(c) });
        }
        println!("{NAME}: process 0 done");
        return;
    }
    let Some((comms, _ctxs)) = two_ranks(NAME) else {
        return;
    };
    let dir = std::path::PathBuf::from(std::env::var("COLL_CACHE_DIR").expect("set"));
    let start = std::time::Instant::now();
    while units_in(&dir, "i32") + units_in(&dir, "f64") < 18 {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(200),
            "the kernels were not compiled ahead: {} of 18 units",
            units_in(&dir, "i32") + units_in(&dir, "f64")
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    for c in comms {
        // SAFETY: live handles, destroyed once.
        ok("ncclCommDestroy", unsafe { ncclCommDestroy(c) });
    }
    println!("{NAME}: process 0 done");
}

/// The real NCCL's communicator beside a single-process one coll serves is made at the
/// first call forwarded to it (`COLL_NCCL_REAL_INIT=lazy`, the default), not at init: a
/// job whose calls coll serves never pays NCCL's init. That first call is refused inside a
/// CUDA-graph capture, naming the way out, and made outside one it is forwarded and right.
/// With `eager`, the communicator is there from init. One rank, on GPU 0 (the real NCCL
/// refuses two ranks on one GPU).
#[test]
fn the_real_communicator_waits_for_the_first_forwarded_call() {
    const NAME: &str = "the_real_communicator_waits_for_the_first_forwarded_call";
    if role().is_none() {
        if gpus(NAME, 1).is_some() {
            let limit = std::time::Duration::from_secs(300);
            run_processes(NAME, 1, &[], limit);
            run_processes(NAME, 1, &[("COLL_NCCL_REAL_INIT", "eager".into())], limit);
        }
        return;
    }
    let global = nccl::global::global().expect("the library's settings");
    let lazy = global.settings.real_init == nccl::settings::RealInit::Lazy;
    let ctx = CudaContext::new(0).expect("context");
    let mut comm = std::ptr::null_mut::<c_void>();
    let dev: [c_int; 1] = [0];
    // SAFETY: room for one handle; one device ordinal.
    ok("ncclCommInitAll", unsafe {
        ncclCommInitAll(&mut comm, 1, dev.as_ptr())
    });
    let c = nccl::comm::get(comm).expect("a live communicator");
    assert_eq!(
        c.real().is_none(),
        lazy,
        "a real communicator from init only when eager"
    );
    let stream = ctx.new_stream().expect("stream");
    let buf = stream.clone_htod(&[7u32; 16]).expect("upload");
    let p = {
        let (p, _sync) = buf.device_ptr(&stream);
        p as *mut c_void
    };
    let st = stream.cu_stream() as *mut c_void;
    if lazy {
        // SAFETY: nothing is captured (the call is refused); the graph is dropped at once.
        let graphs = unsafe {
            coll_executor::cuda::device::capture(std::slice::from_ref(&stream), || {
                // SAFETY: a live 16-element buffer of GPU 0, on its stream.
                let rc = ncclAllReduce(p, p, 16, UINT32, SUM, comm, st);
                assert_eq!(rc, 5, "ncclInvalidUsage");
                let e = last_error();
                assert!(
                    e.contains("inside a CUDA-graph capture")
                        && e.contains("COLL_NCCL_REAL_INIT=eager"),
                    "{e}"
                );
                Ok(())
            })
        }
        .expect("the capture ends");
        drop(graphs);
        assert!(c.real().is_none(), "not made inside the capture");
    }
    // SAFETY: as above, outside any capture.
    ok("a forwarded allreduce", unsafe {
        ncclAllReduce(p, p, 16, UINT32, SUM, comm, st)
    });
    stream.synchronize().expect("sync");
    // One rank: the sum is its own data.
    assert_eq!(stream.clone_dtoh(&buf).expect("download"), vec![7u32; 16]);
    assert!(c.real().is_some(), "made by the first forwarded call");
    drop(c);
    // SAFETY: a live handle, destroyed once.
    ok("ncclCommDestroy", unsafe { ncclCommDestroy(comm) });
    println!("{NAME}: process 0 done");
}
