//! Blocks of several peers on the CPU executor: every element checked against the naive
//! reference ([`crate::reference`]) for the shipped fixture and hand-built 4-rank plans, the
//! documented combine order checked bit for bit on inputs where the order shows, plans that
//! move the same data on the same connections but compute the wrong thing caught, and the
//! all-or-nothing rule of an op on several connections.

use super::*;
use crate::dtype::DType;
use crate::harness::run_checked;
use crate::reference;

/// The shipped fixture: rank 0 receives from ranks 1 and 2 in one `rrcs` and sends the sum
/// back to both.
fn head_of_three() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/inputs/plans/ok_head_several_peers_3.json"
    );
    std::fs::read_to_string(path).expect("the fixture ships")
}

/// An in-place allreduce of one chunk per rank with the given `gpus` (JSON of each rank).
fn allreduce(name: &str, gpus: &[&str]) -> String {
    let gpus: Vec<String> = gpus
        .iter()
        .enumerate()
        .map(|(r, blocks)| format!(r#"{{"rank": {r}, "blocks": [{blocks}]}}"#))
        .collect();
    format!(
        r#"{{"version": 1, "name": "{name}", "collective": "allreduce", "inplace": true,
            "ranks": {}, "topology": "nvswitch:{}", "protocol": "simple", "chunk_factor": 1,
            "buffers": [{{"name": "input", "chunks": 1}}, {{"name": "output", "chunks": 1}}],
            "sources": ["hand.coll:1:1"], "gpus": [{}]}}"#,
        gpus.len(),
        gpus.len(),
        gpus.join(",")
    )
}

/// A leaf of `peer`: sends its input, receives the result.
const LEAF_OF_0: &str = r#"{"id": 0, "channel": 0, "send_peer": 0, "recv_peer": 0, "ops": [
    {"op": "s", "src": [0, 0], "n": 1, "at": 0}, {"op": "r", "dst": [0, 0], "n": 1, "at": 0}]}"#;
const LEAF_OF_1: &str = r#"{"id": 0, "channel": 0, "send_peer": 1, "recv_peer": 1, "ops": [
    {"op": "s", "src": [0, 0], "n": 1, "at": 0}, {"op": "r", "dst": [0, 0], "n": 1, "at": 0}]}"#;

/// Rank 0 receives from ranks 3, 1 and 2 (in that order: not the ranks' order, so that the
/// documented order and the reference's differ) in one `rrcs` and sends the sum to all three.
fn star_of_three() -> String {
    allreduce(
        "star_of_three",
        &[
            r#"{"id": 0, "channel": 0, "recv_peer": 3, "recv_also": [1, 2],
                "send_peer": 1, "send_also": [2, 3], "ops": [
                {"op": "rrcs", "src": [0, 0], "dst": [0, 0], "n": 1, "at": 0}]}"#,
            LEAF_OF_0,
            LEAF_OF_0,
            LEAF_OF_0,
        ],
    )
}

/// The root of [`tree`] as it should be: receive, add its own, store, send back.
const RIGHT_ROOT: &str = r#"{"op": "rrcs", "src": [0, 0], "dst": [0, 0], "n": 1, "at": 0}"#;

/// A tree: leaves 3 and 2 send to the middle, rank 1, which combines both with its own in one
/// `rrs` to the root, rank 0; the root adds its own (`root_op`, JSON: [`RIGHT_ROOT`] is
/// right) and sends the sum back down, the middle passing it to both leaves in one `rcs`.
fn tree(root_op: &str) -> String {
    let root =
        format!(r#"{{"id": 0, "channel": 0, "recv_peer": 1, "send_peer": 1, "ops": [{root_op}]}}"#);
    allreduce(
        "tree_of_four",
        &[
            &root,
            r#"{"id": 0, "channel": 0, "recv_peer": 3, "recv_also": [2], "send_peer": 0, "ops": [
                {"op": "rrs", "src": [0, 0], "n": 1, "at": 0}]},
               {"id": 1, "channel": 0, "recv_peer": 0, "send_peer": 2, "send_also": [3], "ops": [
                {"op": "rcs", "dst": [0, 0], "n": 1, "at": 0, "deps": [[0, 0]]}]}"#,
            LEAF_OF_1,
            LEAF_OF_1,
        ],
    )
}

fn executor(json: &str) -> CpuExecutor {
    CpuExecutor::new(ValidPlan::from_json(json).expect("a valid plan"), 2)
}

fn options(count: u64, op: ReduceOp) -> RunOptions {
    RunOptions {
        count,
        op,
        timeout: Duration::from_secs(20),
        ..RunOptions::default()
    }
}

/// Runs `json` in place and out of place at counts 1, 7, 1000 and 1237 (a prime), in f32 and
/// i32, for every reduction; the failures in words.
fn matrix(json: &str) -> Vec<String> {
    let exec = executor(json);
    let n = u64::from(exec.plan().ranks);
    let mut failures = Vec::new();
    for count in [1, 7, 1000, 1237] {
        for dtype in [DType::F32, DType::I32] {
            for op in ReduceOp::ALL {
                for inplace in [true, false] {
                    let what = format!("count {count} {dtype} {op} inplace={inplace}");
                    match run_checked(&exec, dtype, &options(count, op), inplace) {
                        Ok(r) if r.wrong == Some(0) && r.checked == n * count => {}
                        Ok(r) => failures.push(format!(
                            "{what}: #wrong {:?} of {} checked",
                            r.wrong, r.checked
                        )),
                        Err(e) => failures.push(format!("{what}: {e}")),
                    }
                }
            }
        }
    }
    failures
}

#[test]
fn head_of_three_matches_the_reference() {
    let failures = matrix(&head_of_three());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_block_receiving_from_three_matches_the_reference() {
    let failures = matrix(&star_of_three());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_tree_with_a_middle_of_two_matches_the_reference() {
    let failures = matrix(&tree(RIGHT_ROOT));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// f32 values of very different magnitudes, so that sums of them round differently in
/// different orders.
fn uneven(rank: u32, len: usize) -> Vec<f32> {
    let mut h = 0x9e37_79b9_u32.wrapping_mul(rank + 1);
    (0..len)
        .map(|_| {
            h ^= h << 13;
            h ^= h >> 17;
            h ^= h << 5;
            let mantissa = (h % 2001) as f32 - 1000.0;
            mantissa * 2f32.powi((h >> 16) as i32 % 28 - 4)
        })
        .collect()
}

/// The left fold of `xs[order[0]] + xs[order[1]] + ...`, element by element.
fn fold(xs: &[Vec<f32>], order: &[usize]) -> Vec<f32> {
    let mut acc = xs[order[0]].clone();
    for &k in &order[1..] {
        acc.iter_mut().zip(&xs[k]).for_each(|(a, b)| *a += *b);
    }
    acc
}

/// Every ordering of `0..n`.
fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![Vec::new()];
    }
    let mut out = Vec::new();
    for p in permutations(n - 1) {
        for at in 0..=p.len() {
            let mut q = p.clone();
            q.insert(at, n - 1);
            out.push(q);
        }
    }
    out
}

/// The bits of `v`, to compare floats exactly (`-0.0` is not `0.0`).
fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Runs `exec` in place on `inputs` with sum; every rank's output.
fn run_sum(exec: &CpuExecutor, inputs: &[Vec<f32>]) -> Vec<Vec<f32>> {
    let mut bufs = inputs.to_vec();
    let count = inputs[0].len() as u64;
    exec.run_in_place(&mut bufs, &options(count, ReduceOp::Sum))
        .expect("runs");
    bufs
}

#[test]
fn receives_combine_in_the_documented_order() {
    let len = 4096;
    let inputs: Vec<Vec<f32>> = (0..4).map(|r| uneven(r, len)).collect();

    // The star: `x0 (+) m(3) (+) m(1) (+) m(2)`.
    let documented = fold(&inputs, &[0, 3, 1, 2]);
    // The inputs tell every other order apart (the first two swapped are the same sum).
    for p in permutations(4) {
        let same = p[2..] == [1, 2] && (p[..2] == [0, 3] || p[..2] == [3, 0]);
        if !same {
            assert_ne!(
                fold(&inputs, &p),
                documented,
                "order {p:?} is not told apart"
            );
        }
    }
    for (r, out) in run_sum(&executor(&star_of_three()), &inputs)
        .iter()
        .enumerate()
    {
        assert!(bits(out) == bits(&documented), "rank {r} of the star");
    }

    // The tree: `x0 (+) (x1 (+) m(3) (+) m(2))`.
    let middle = fold(&inputs, &[1, 3, 2]);
    let documented: Vec<f32> = inputs[0].iter().zip(&middle).map(|(a, b)| a + b).collect();
    let other_middle = fold(&inputs, &[1, 2, 3]);
    let other: Vec<f32> = inputs[0]
        .iter()
        .zip(&other_middle)
        .map(|(a, b)| a + b)
        .collect();
    assert_ne!(documented, other, "the middle's order is not told apart");
    assert_ne!(documented, fold(&inputs, &[0, 1, 2, 3]));
    for (r, out) in run_sum(&executor(&tree(RIGHT_ROOT)), &inputs)
        .iter()
        .enumerate()
    {
        assert!(bits(out) == bits(&documented), "rank {r} of the tree");
    }
}

/// Outputs of `json` against the reference at `count`, out of place: wrong elements per rank.
fn wrong_per_rank(json: &str, count: u64) -> Vec<usize> {
    let exec = executor(json);
    let n = exec.plan().ranks;
    let inputs: Vec<Vec<i32>> = (0..n)
        .map(|r| reference::fill(ReduceOp::Sum, n, r, count))
        .collect();
    let outputs = exec
        .run(&inputs, &options(count, ReduceOp::Sum))
        .expect("runs");
    let expected = reference::expected(exec.plan().collective.0, &inputs, count, ReduceOp::Sum, 0)
        .expect("allreduce has a reference");
    outputs
        .iter()
        .zip(&expected)
        .map(|(out, exp)| {
            let exp = exp.as_deref().unwrap_or(&[]);
            out.iter().zip(exp).filter(|(a, b)| a != b).count() + out.len().abs_diff(exp.len())
        })
        .collect()
}

#[test]
fn wrong_plans_on_the_same_connections_are_caught() {
    let count = 1000;
    // The right plans first, so the comparison below is a real one.
    assert_eq!(wrong_per_rank(&head_of_three(), count), [0, 0, 0]);
    assert_eq!(wrong_per_rank(&tree(RIGHT_ROOT), count), [0, 0, 0, 0]);

    // Rank 0 reduces and sends but does not store: its peers get the sum, it keeps its input.
    let no_store = head_of_three().replace(
        r#""op":"rrcs","src":[0,0],"dst":[0,0]"#,
        r#""op":"rrs","src":[0,0]"#,
    );
    assert_ne!(no_store, head_of_three(), "the fixture's op was replaced");
    let wrong = wrong_per_rank(&no_store, count);
    assert_eq!(&wrong[1..], [0, 0], "the peers get the sum");
    assert!(wrong[0] > 0, "rank 0 keeps its input: {wrong:?}");

    // The root stores and sends back what it received without adding its own input: every
    // rank misses rank 0's contribution (wherever it is not zero).
    let forward = r#"{"op": "rcs", "dst": [0, 0], "n": 1, "at": 0}"#;
    let wrong = wrong_per_rank(&tree(forward), count);
    assert!(wrong.iter().all(|&w| w > 0), "{wrong:?}");
}

/// A rank of `plan` with one slot per connection, and its world, for stepping by hand.
fn by_hand<'a>(
    plan: &'a Plan,
    o: &'a RunOptions,
    signals: &'a [Signal],
    rank: u32,
    input: &[f32],
) -> (Rank<'a, f32>, World<'a, f32>) {
    (
        Rank::new(plan, rank, o, input),
        World::new(plan, 1, signals, None),
    )
}

#[test]
fn an_op_runs_only_when_every_connection_is_ready() {
    let exec = executor(&head_of_three());
    let plan = exec.plan();
    let o = options(3, ReduceOp::Sum);
    let signals: Vec<Signal> = (0..3).map(|_| Signal::default()).collect();
    let (mut rank, world) = by_hand(plan, &o, &signals, 0, &[1.0, 2.0, 3.0]);
    let block = &plan.gpus[0].blocks[0];

    // Only rank 1's message: nothing runs, nothing is taken, rank 2 is named.
    world.put((1, 0, 0), vec![10.0, 20.0, 30.0]);
    assert!(!rank.step(0, block, &world).expect("no error"));
    assert!(world.arrived((1, 0, 0)));
    let (_, waiting) = rank.blocked(&plan.gpus[0], &world);
    assert_eq!(waiting, "waiting to receive from rank 2 on channel 0");

    // Both messages, but the connection to rank 2 is full (one slot): still nothing taken.
    world.put((2, 0, 0), vec![100.0, 200.0, 300.0]);
    world.put((0, 2, 0), vec![0.0; 3]);
    assert!(!rank.step(0, block, &world).expect("no error"));
    assert!(world.arrived((1, 0, 0)) && world.arrived((2, 0, 0)));
    let (_, waiting) = rank.blocked(&plan.gpus[0], &world);
    assert_eq!(waiting, "waiting for room to send to rank 2 on channel 0");

    // Room again: the op runs, takes both, stores the sum and sends it to both.
    assert_eq!(world.take((0, 2, 0)), Some(vec![0.0; 3]));
    assert!(rank.step(0, block, &world).expect("no error"));
    assert!(!world.arrived((1, 0, 0)) && !world.arrived((2, 0, 0)));
    let sum = vec![111.0, 222.0, 333.0];
    assert_eq!(world.take((0, 1, 0)), Some(sum.clone()));
    assert_eq!(world.take((0, 2, 0)), Some(sum.clone()));
    assert_eq!(rank.output(), sum);
}

#[test]
fn a_message_of_the_wrong_length_from_a_further_peer_is_an_error() {
    let exec = executor(&head_of_three());
    let plan = exec.plan();
    let o = options(3, ReduceOp::Sum);
    let signals: Vec<Signal> = (0..3).map(|_| Signal::default()).collect();
    let (mut rank, world) = by_hand(plan, &o, &signals, 0, &[1.0, 2.0, 3.0]);
    world.put((1, 0, 0), vec![10.0, 20.0, 30.0]);
    world.put((2, 0, 0), vec![100.0, 200.0]);
    let err = rank
        .step(0, &plan.gpus[0].blocks[0], &world)
        .expect_err("a short message");
    assert!(matches!(err, ExecError::ChunkSize { .. }), "{err}");
}

#[test]
fn a_stalled_further_peer_times_out() {
    let exec = executor(&head_of_three());
    let o = RunOptions {
        count: 16,
        timeout: Duration::from_millis(300),
        stall: Some(2),
        ..RunOptions::default()
    };
    let err = run_checked(&exec, DType::F32, &o, true).expect_err("rank 2 never sends");
    let msg = err.to_string();
    assert!(matches!(err, ExecError::Timeout { .. }), "{msg}");
    // Rank 0 waits for rank 2; rank 1 waits for rank 0, which cannot send.
    assert!(
        msg.contains("waiting to receive from rank 2") || msg.contains("from rank 0"),
        "{msg}"
    );
}

#[test]
fn a_receive_combines_its_source_first() {
    // bf16 `min` keeps its left operand of two equal ones: `-0.0 min 0.0` is `-0.0` and
    // `0.0 min -0.0` is `0.0`, so the sign of the result shows which came first.
    use half::bf16;
    let exec = executor(&head_of_three());
    let o = options(1, ReduceOp::Min);
    for (x0, expected) in [(bf16::NEG_ZERO, bf16::NEG_ZERO), (bf16::ZERO, bf16::ZERO)] {
        let mut bufs = vec![vec![x0], vec![bf16::ZERO], vec![bf16::NEG_ZERO]];
        exec.run_in_place(&mut bufs, &o).expect("runs");
        for (r, out) in bufs.iter().enumerate() {
            assert_eq!(
                out[0].to_bits(),
                expected.to_bits(),
                "rank {r} with rank 0 holding {x0}"
            );
        }
    }
}
