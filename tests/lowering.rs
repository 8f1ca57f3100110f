//! The lowering's rewrites (copy folding, fusion into recv-copy-send, recv-reduce-send and
//! copy-send, send hoisting) against the plain lowering, differentially. Random programs of
//! copies and reduces (group transfers among them) between `input`, `output` and two scratch
//! buffers on three ranks, over several instances and pipeline pieces, are elaborated (not
//! proved: they compute no collective), lowered both ways and run on the CPU executor with
//! the same inputs. Every rank's output must be identical; the rewritten plan may not
//! deadlock where the plain one does not (the check falls back to no hoisting first, as
//! `compile` does); and the rewritten plan exported as MSCCL-IR and read back (copy-sends
//! split) computes the same. About half the programs have copies to fold. A second property
//! compiles random in-place programs out of place; a third lowers every candidate schedule
//! of the scheduler on its own (dependence order, blocks per connection side), which the
//! cost model's choice alone would not all reach; a fourth puts random `with channel` hints
//! on the statements and checks that some candidate always passes the deadlock simulation.
//! A run of 20 000 cases found a copy fused into the send after it that deadlocked; 1 000
//! of each property run here, 400 of the third's (each lowers and runs 60 schedules).
//! `PROPTEST_CASES` sets them all.

#[path = "common/programs.rs"]
mod programs;

use coll_compiler::elaborate;
use coll_compiler::lower::{self, Channels, LowerOptions, Order, Packing, Scheduling};
use coll_compiler::plan::ValidPlan;
use coll_compiler::topology::Topology;
use coll_compiler::{DEFAULT_SLOTS, msccl};
use coll_executor::cpu::{CpuExecutor, RunOptions};
use coll_executor::dtype::ReduceOp;
use coll_executor::reference::fill;
use programs::{N, elaborated, lowered, program, rewritten};
use proptest::prelude::*;
use std::time::Duration;

/// Runs `plan` on 24 elements per rank, every rank's output.
fn execute(plan: ValidPlan) -> Result<Vec<Vec<i32>>, String> {
    let exec = CpuExecutor::new(plan, DEFAULT_SLOTS);
    // A multiple of every chunk factor generated (2 chunks × 3 instances × 2 pieces), so
    // chunks are equal and an op may move one chunk into another.
    let count = 24;
    let (elems, _) = exec.sizes(count);
    let inputs: Vec<Vec<i32>> = (0..N).map(|r| fill(ReduceOp::Sum, N, r, elems)).collect();
    let o = RunOptions {
        count,
        op: ReduceOp::Sum,
        root: 0,
        timeout: Duration::from_secs(10),
        stall: None,
    };
    exec.run(&inputs, &o).map_err(|e| e.to_string())
}

/// [`lowered`], then [`execute`].
fn run(
    e: &elaborate::Elaborated,
    topo: &Topology,
    file: &coll_lang::SourceFile,
    options: &LowerOptions,
) -> Result<Option<Vec<Vec<i32>>>, String> {
    lowered(e, topo, file, options)?.map(execute).transpose()
}

const PLAIN: LowerOptions = LowerOptions {
    hoist_sends: false,
    fuse: false,
    fold_copies: false,
    scheduling: Scheduling::AsWritten,
    several_peers: false,
    split_transfers: false,
};

fn config() -> ProptestConfig {
    config_of(1000)
}

/// `cases` cases unless `PROPTEST_CASES` says how many.
fn config_of(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(cases),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn rewrites_keep_every_output(src in program(false)) {
        let (e, file, topo) = elaborated(&src, &Default::default())?;
        let Some(want) = run(&e, &topo, &file, &PLAIN).map_err(TestCaseError::fail)? else {
            return Ok(());
        };
        let plan = rewritten(&e, &topo, &file, &src)?;
        // MSCCL-IR has no copy-send: the export splits it, and the plan it reads back
        // computes the same.
        if let Ok(xml) = msccl::export(&plan) {
            let back = msccl::import(&xml, "prop.xml")
                .map_err(|m| TestCaseError::fail(format!("{m}\n{xml}\n{src}")))?;
            let via_xml = execute(back).map_err(|m| TestCaseError::fail(format!("{m}\n{src}")))?;
            prop_assert_eq!(&via_xml, &want, "outputs differ through MSCCL-IR for\n{}", src);
        }
        let got = execute(plan).map_err(|m| TestCaseError::fail(format!("{m}\n{src}")))?;
        prop_assert_eq!(got, want, "outputs differ for\n{}", src);
    }

    /// An in-place program compiled out of place, with every rewrite, computes what the
    /// plain in-place plan computes (both called out of place, the in-place plan through
    /// the executor's input copy).
    #[test]
    fn out_of_place_conversion_keeps_every_output(src in program(true)) {
        let (e, file, topo) = elaborated(&src, &Default::default())?;
        let Some(want) = run(&e, &topo, &file, &PLAIN).map_err(TestCaseError::fail)? else {
            return Ok(());
        };
        let converted = elaborate::Options { out_of_place: true, ..Default::default() };
        let (e2, file2, topo2) = elaborated(&src, &converted)?;
        prop_assert!(!e2.inplace);
        let plan = rewritten(&e2, &topo2, &file2, &src)?;
        let got = execute(plan).map_err(|m| TestCaseError::fail(format!("{m}\n{src}")))?;
        prop_assert_eq!(got, want, "outputs differ for\n{}", src);
    }
}

proptest! {
    #![proptest_config(config_of(400))]

    /// Every candidate schedule on its own computes what the plain lowering computes
    /// ([`every_candidate`]), of out-of-place programs and of in-place ones made out of
    /// place.
    #[test]
    fn every_candidate_keeps_every_output(
        (src, out_of_place) in any::<bool>().prop_flat_map(|p| (program(p), Just(p))),
    ) {
        let (e, file, topo) = elaborated(&src, &Default::default())?;
        let Some(want) = run(&e, &topo, &file, &PLAIN).map_err(TestCaseError::fail)? else {
            return Ok(());
        };
        let placed = elaborate::Options { out_of_place, ..Default::default() };
        let (e, file, topo) = elaborated(&src, &placed)?;
        every_candidate(&e, &topo, &file, &src, &want)?;
    }
}

/// `src` with `with channel h - 1` on its k-th transfer statement where `hints[k]` (cycled)
/// is `h > 0`.
fn with_hints(src: &str, hints: &[u8]) -> String {
    let mut out = String::new();
    let mut k = 0;
    for line in src.lines() {
        let transfer = line.starts_with("copy") || line.starts_with("reduce");
        match line.strip_suffix(';').filter(|_| transfer) {
            Some(stmt) => {
                let h = hints[k % hints.len()];
                k += 1;
                if h > 0 {
                    out.push_str(&format!("{stmt} with channel {};\n", h - 1));
                } else {
                    out.push_str(line);
                    out.push('\n');
                }
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(config())]

    /// Channel hints never force a deadlock: whatever channels the statements ask for, the
    /// choice finds a candidate that passes the deadlock simulation, with 2 slots and with
    /// 1. (The program as written without hoisting keeps every connection's messages in
    /// program order at both ends and runs one statement after another, which completes on
    /// any channels; the choice falls back to it when hoisting deadlocks.) So a hinted
    /// program never fails for a deadlock its hints made, and no hint needs dropping.
    #[test]
    fn channel_hints_never_force_a_deadlock(
        (src, hints) in (any::<bool>().prop_flat_map(program), prop::collection::vec(0..4u8, 14)),
    ) {
        let src = with_hints(&src, &hints);
        let (e, file, topo) = elaborated(&src, &Default::default())?;
        for slots in [1, 2] {
            let ctx = lower::ScheduleContext { slots, ..Default::default() };
            let lowered = lower::lower_with(&e, &topo, &file, &LowerOptions::default(), &ctx)
                .map_err(|d| TestCaseError::fail(format!("{}\n{src}", d.kind)))?;
            prop_assert!(
                lowered.simulated.is_some(),
                "no candidate passed with {} slots for\n{}", slots, src
            );
        }
    }
}

/// Each candidate schedule (channels, dependence order, blocks) alone computes
/// `want`: the choice alone would test only those the cost model picks. A candidate that
/// fails a check is replaced by the program as written, which the note then names.
fn every_candidate(
    e: &elaborate::Elaborated,
    topo: &Topology,
    file: &coll_lang::SourceFile,
    src: &str,
    want: &[Vec<i32>],
) -> Result<(), TestCaseError> {
    let orders = [Order::Program, Order::Dependence, Order::DependenceSplit];
    let packings = [
        Packing::FirstFit,
        Packing::PerConnection,
        Packing::PerConnectionEcho,
        Packing::LocalApart,
    ];
    let all = [
        Channels::Program,
        Channels::Compiler,
        Channels::Chunks,
        Channels::Split,
        Channels::Renamed,
    ]
    .into_iter()
    .flat_map(|c| orders.into_iter().map(move |o| (c, o)))
    .flat_map(|(c, o)| packings.into_iter().map(move |p| (c, o, p)));
    for (channels, order, packing) in all {
        let options = LowerOptions {
            scheduling: Scheduling::Only(channels, order, packing),
            ..LowerOptions::default()
        };
        let Some(plan) = lowered(e, topo, file, &options).map_err(TestCaseError::fail)? else {
            continue;
        };
        let note = plan.schedule.clone();
        if note.is_none_or(|n| (n.channels, n.order, n.packing) != (channels, order, packing)) {
            continue;
        }
        let got = execute(plan).map_err(|m| TestCaseError::fail(format!("{m}\n{src}")))?;
        prop_assert_eq!(
            &got[..],
            want,
            "outputs differ for {} channels, {} order, {} blocks:\n{}",
            channels.name(),
            order.name(),
            packing.name(),
            src
        );
    }
    Ok(())
}

/// A send (to rank 2) of a scratch copy of rank 0's input, after rank 0 received (from rank
/// 1, in another block: rank 0 sends to rank 1 first) into that input: out of place, propagation could let the send read
/// `input` directly, but in an in-place call that chunk has been overwritten by then, so the
/// plan would need staging. Propagation forgets a
/// copy whose source changes in the in-place view too, and the plan runs in place directly.
#[test]
fn plans_made_out_of_place_read_the_same_in_place() {
    let src = "collective allreduce t(n) {\n    chunks 1;\n    inplace;\n    ranks n >= 3;\n    topology any;\n    scratch a[1];\n    scratch b[1];\n}\n\ncopy input[0][0] -> b[0][0];\ncopy a[0][0] -> a[1][0];\ncopy input[1][0] -> input[0][0];\ncopy b[0][0] -> input[2][0];\n";
    let converted = elaborate::Options {
        out_of_place: true,
        ..Default::default()
    };
    let (e, file, topo) = elaborated(src, &converted).expect("elaborates");
    let plan = rewritten(&e, &topo, &file, src).expect("lowers");
    assert!(
        coll_executor::cuda::placement::in_place_safe(&plan),
        "{}",
        coll_compiler::dump::text(&plan)
    );
    let (e, file, topo) = elaborated(src, &Default::default()).expect("elaborates");
    let want = run(&e, &topo, &file, &PLAIN)
        .expect("runs")
        .expect("no deadlock");
    assert_eq!(execute(plan).expect("runs"), want);
}

/// NVLS allreduce made out of place: every member of a switch group reads the input where it
/// stands (copy propagation rewrites group members' sources alike on every rank), so the
/// input copy the conversion makes is dropped, the groups stay whole, and the plan still computes the allreduce in both placements. (It kept the copy
/// before, and ran 1.5 to 2 times the in-place plan's time at 256 KiB to 1 MiB on 2 x H200.)
#[test]
fn switch_groups_read_the_input_directly_out_of_place() {
    let path = coll_tests::root().join("algorithms/allreduce_nvls.coll");
    for n in [2, 4, 8] {
        let c = coll_tests::compiled_with(&path, n, &coll_tests::out_of_place()).expect("compiles");
        let plan = c.plan();
        let ops: Vec<_> = coll_compiler::dump::ops(plan).map(|(_, _, o)| o).collect();
        let text = coll_compiler::dump::text(plan);
        assert!(
            ops.iter()
                .all(|o| o.kind != coll_compiler::plan::OpKind::Copy),
            "n = {n}: a local copy remains\n{text}"
        );
        assert!(
            ops.iter().all(|o| o.group.is_some()),
            "n = {n}: a group was dissolved\n{text}"
        );
        // Every op contributes the input (buffer 0), but a head adding to its running sum.
        assert!(
            ops.iter()
                .filter(|o| o.src != o.dst)
                .filter_map(|o| o.src)
                .all(|s| s.0 == 0),
            "n = {n}\n{text}"
        );
        coll_tests::exact_in_both_placements(c, &format!("nvls out of place at n = {n}"));
    }
}

/// All-pairs at N ranks: every rank's receive fuses with the reduce that reads it, including
/// the ranks whose own send comes between the two in program order (it moves above the
/// receive), and the plan computes what the plain one does.
#[test]
fn receives_fuse_with_their_reduce_past_the_ranks_own_send() {
    let src = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../algorithms/allreduce_allpairs.coll"
    ))
    .expect("shipped");
    let (e, file, topo) = elaborated(&src, &Default::default()).expect("elaborates");
    let plan = rewritten(&e, &topo, &file, &src).expect("lowers");
    for (r, rp) in plan.gpus.iter().enumerate() {
        let fused = rp
            .blocks
            .iter()
            .flat_map(|b| &b.ops)
            .filter(|o| o.kind == coll_compiler::plan::OpKind::RecvReduceCopy)
            .count();
        assert!(
            fused >= 1,
            "rank {r}:\n{}",
            coll_compiler::dump::text(&plan)
        );
    }
    let want = run(&e, &topo, &file, &PLAIN)
        .expect("runs")
        .expect("no deadlock");
    assert_eq!(execute(plan).expect("runs"), want);
}

/// A program on `N` ranks of the differential tests' header (two chunks per buffer, scratch
/// `a` and `b`), out of place, with `body` as its statements.
fn small(body: &str) -> String {
    format!(
        "collective allreduce t(n) {{\n    chunks 2;\n    outofplace;\n    ranks n >= 1;\n    topology any;\n    scratch a[2];\n    scratch b[2];\n}}\n\n{body}"
    )
}

/// Rank `r`'s ops of `plan` that copy locally from buffer `from` to buffer `to`, and the
/// destinations of its receives from rank `peer`, by buffer name.
fn copies_and_receives(
    plan: &coll_compiler::plan::Plan,
    r: usize,
    from: &str,
    to: &str,
    peer: u32,
) -> (usize, Vec<(String, u64)>) {
    use coll_compiler::plan::{OpKind, Slice};
    let name = |s: Slice| {
        let Slice(b, o) = s;
        (plan.buffers[b as usize].name.clone(), o)
    };
    let rp = &plan.gpus[r];
    let mut copies = 0;
    let mut received = Vec::new();
    for b in &rp.blocks {
        for o in &b.ops {
            let (src, dst) = (o.src.map(name), o.dst.map(name));
            if matches!(o.kind, OpKind::Copy | OpKind::CopySend)
                && src.as_ref().is_some_and(|s| s.0 == from)
                && dst.as_ref().is_some_and(|d| d.0 == to)
            {
                copies += 1;
            }
            if o.kind.receives() && b.recv_peer == Some(peer) {
                received.extend(dst);
            }
        }
    }
    (copies, received)
}

/// The plan of `src` with every rewrite and hoisting (asserted), and the plain lowering's
/// outputs, which it must compute.
fn hoisted_and_plain(src: &str) -> (ValidPlan, Vec<Vec<i32>>) {
    let (e, file, topo) = elaborated(src, &Default::default()).expect("elaborates");
    let plan = lowered(&e, &topo, &file, &LowerOptions::default())
        .expect("lowers")
        .expect("no deadlock with hoisting");
    assert!(plan.schedule.as_ref().is_some_and(|n| n.hoisted), "{src}");
    let want = run(&e, &topo, &file, &PLAIN)
        .expect("runs")
        .expect("no deadlock");
    (plan, want)
}

/// Rank 1 receives into scratch `a` (from rank 0) and copies it into `output[1][0]`, but
/// sends the chunk's earlier value (received from rank 2) to rank 2 in between, as Bruck's
/// all-to-all unpacks a step's receive after sending what the position held. The send moves
/// above the receive, the receive lands in `output` and the copy is gone; without hoisting
/// the copy stays. Both plans compute what the plain lowering computes.
#[test]
fn a_copy_forwards_into_its_receive_past_a_send_of_its_destination() {
    let src = small(
        "copy input[2][0] -> output[1][0];\ncopy input[0][0] -> a[1][0];\ncopy output[1][0] -> b[2][0];\ncopy a[1][0] -> output[1][0];\ncopy b[2][0] -> output[2][1];\n",
    );
    let (plan, want) = hoisted_and_plain(&src);
    let dump = coll_compiler::dump::text(&plan);
    let (copies, received) = copies_and_receives(&plan, 1, "a", "output", 0);
    assert_eq!(copies, 0, "{dump}");
    assert_eq!(received, [("output".to_string(), 0)], "{dump}");
    assert_eq!(execute(plan).expect("runs"), want);

    let (e, file, topo) = elaborated(&src, &Default::default()).expect("elaborates");
    let no_hoist = LowerOptions {
        hoist_sends: false,
        ..LowerOptions::default()
    };
    let plan = lowered(&e, &topo, &file, &no_hoist)
        .expect("lowers")
        .expect("no deadlock");
    let dump = coll_compiler::dump::text(&plan);
    let (copies, received) = copies_and_receives(&plan, 1, "a", "output", 0);
    assert_eq!(copies, 1, "{dump}");
    assert_eq!(received, [("a".to_string(), 0)], "{dump}");
    assert_eq!(execute(plan).expect("runs"), want);
}

/// As above, but the send of the copy's destination would pass another send to rank 2, of
/// a chunk rank 1 receives after the receive into `a`: that send cannot move above that
/// receive, and the first may not pass it (messages keep their order on a connection), so
/// the copy stays. The same when the send itself reads a chunk written after the receive.
#[test]
fn a_copy_stays_when_the_send_in_the_way_cannot_move() {
    let past_a_send = small(
        "copy input[2][0] -> output[1][0];\ncopy input[0][0] -> a[1][0];\ncopy input[0][1] -> a[1][1];\ncopy a[1][1] -> b[2][1];\ncopy output[1][0] -> b[2][0];\ncopy a[1][0] -> output[1][0];\ncopy b[2][0] -> output[2][1];\ncopy b[2][1] -> output[2][0];\n",
    );
    let past_a_write = small(
        "copy input[2][0..2] -> output[1];\ncopy input[0][0] -> a[1][0];\ncopy input[2][1] -> output[1][1];\ncopy output[1][0..2] -> b[2];\ncopy a[1][0] -> output[1][0];\ncopy b[2][0..2] -> output[2];\n",
    );
    for src in [past_a_send, past_a_write] {
        let (plan, want) = hoisted_and_plain(&src);
        let dump = coll_compiler::dump::text(&plan);
        let (copies, received) = copies_and_receives(&plan, 1, "a", "output", 0);
        assert_eq!(copies, 1, "{src}\n{dump}");
        assert!(received.contains(&("a".to_string(), 0)), "{src}\n{dump}");
        assert_eq!(execute(plan).expect("runs"), want, "{src}");
    }
}
