//! Calls made inside CUDA-graph captures through coll's NCCL library: a communicator whose
//! first calls are captured loads its executors inside the capture, and the graphs replay
//! right, also after a larger call loaded another executor.

use super::*;

/// Captures one group of allreduces (one per rank) in CUDA graphs, one per GPU's stream.
fn capture_allreduce(
    comms: &[*mut c_void],
    streams: &[Arc<CudaStream>],
    ranks: &[Rank],
    count: usize,
) -> Vec<coll_executor::cuda::device::Graph> {
    use coll_executor::ExecError;
    // The pointers are taken before the capture: cudarc's bookkeeping waits on the buffers'
    // events, which a capturing stream must not.
    let bufs: Vec<(*mut c_void, *mut c_void)> = ranks
        .iter()
        .map(|k| (ptr(&k.send, &k.stream), ptr(&k.recv, &k.stream)))
        .collect();
    for s in streams {
        s.synchronize().expect("sync");
    }
    let on: Vec<Arc<CudaStream>> = if Arc::ptr_eq(&streams[0], &streams[1]) {
        vec![streams[0].clone()]
    } else {
        streams.to_vec()
    };
    // SAFETY: the graphs are dropped before the buffers and communicators (the callers
    // keep `ranks` and `comms` alive past the graphs' last launch).
    unsafe {
        coll_executor::cuda::device::capture(&on, || {
            let check = |what: &str, rc: c_int| {
                if rc == 0 {
                    Ok(())
                } else {
                    Err(ExecError::Gpu(format!("{what}: {rc}: {}", last_error())))
                }
            };
            check("ncclGroupStart", ncclGroupStart())?;
            for (r, &(s, d)) in bufs.iter().enumerate() {
                let st = streams[r].cu_stream() as *mut c_void;
                check(
                    "ncclAllReduce",
                    ncclAllReduce(s, d, count, FLOAT, SUM, comms[r], st),
                )?;
            }
            check("ncclGroupEnd", ncclGroupEnd())
        })
    }
    .unwrap_or_else(|e| panic!("capture of allreduce x {count}: {e}"))
}

/// Launches `graphs` and checks every rank's allreduce of `count` elements.
fn replay_and_check(
    graphs: &[coll_executor::cuda::device::Graph],
    streams: &[Arc<CudaStream>],
    ranks: &[Rank],
    count: usize,
    what: &str,
) {
    for k in ranks {
        // SAFETY: the receive buffer's own `count` f32s, on its stream.
        unsafe {
            result::memset_d8_async(
                ptr(&k.recv, &k.stream) as u64,
                0,
                count * 4,
                k.stream.cu_stream(),
            )
        }
        .expect("clear");
        k.stream.synchronize().expect("sync");
    }
    coll_executor::cuda::device::launch_graphs(graphs).expect("launch");
    for s in streams {
        s.synchronize().expect("sync");
    }
    for (r, k) in ranks.iter().enumerate() {
        let got = k.stream.clone_dtoh(&k.recv).expect("download");
        let want = expected("allreduce", r, count, 0);
        let wrong = got.iter().zip(&want).filter(|(a, b)| a != b).count();
        assert_eq!(wrong, 0, "{what}: rank {r}: {wrong} wrong elements");
    }
}

/// An application that captures before any eager call (the first call of a communicator,
/// and later a larger one, are made inside CUDA-graph captures): the executors coll loads
/// for them load inside the capture, the graphs replay right, and the first graph still
/// replays right after the larger call loaded another executor.
#[test]
fn first_calls_inside_graph_captures_replay() {
    let Some((comms, ctxs)) = two_ranks("nccl_first_calls_in_captures") else {
        return;
    };
    let shared = Arc::ptr_eq(&ctxs[0], &ctxs[1]) || ctxs[0].ordinal() == ctxs[1].ordinal();
    let first = ctxs[0].new_stream().expect("stream");
    let streams: Vec<Arc<CudaStream>> = if shared {
        vec![first.clone(), first]
    } else {
        vec![first, ctxs[1].new_stream().expect("stream")]
    };
    let make = |count: usize| -> Vec<Rank> {
        (0..N)
            .map(|r| {
                let stream = streams[r].clone();
                let host: Vec<f32> = (0..count).map(|j| value(r, j)).collect();
                let send = stream.clone_htod(&host).expect("upload");
                let recv = stream.alloc_zeros::<f32>(count).expect("alloc");
                stream.synchronize().expect("sync");
                Rank { stream, send, recv }
            })
            .collect()
    };
    let small_count = (1 << 16) + 3;
    let small = make(small_count);
    let g_small = capture_allreduce(&comms, &streams, &small, small_count);
    replay_and_check(
        &g_small,
        &streams,
        &small,
        small_count,
        "first call, captured",
    );
    // Larger than the executor loaded above was sized for: another load, inside a capture.
    let large_count = (1 << 22) + 1;
    let large = make(large_count);
    let g_large = capture_allreduce(&comms, &streams, &large, large_count);
    replay_and_check(
        &g_large,
        &streams,
        &large,
        large_count,
        "larger call, captured",
    );
    replay_and_check(
        &g_small,
        &streams,
        &small,
        small_count,
        "first graph, replayed later",
    );
    drop(g_small);
    drop(g_large);
    for c in comms {
        // SAFETY: live handles, destroyed once, after their graphs.
        ok("ncclCommDestroy", unsafe { ncclCommDestroy(c) });
    }
}
