//! The scheduler: rounds and predicted times against the program as written and without
//! `with channel` hints, its notes in the plan, send-first exchanges, hint warnings naming
//! their line, every shipped algorithm and port at 32 ranks, the compiler's channels and
//! local blocks on the ports, and the dependences' lower bound over every candidate.

use coll_cli::run_captured;
use coll_compiler::error::CompileError;
use coll_compiler::lower::{Channels, Scheduling};
use coll_compiler::plan::ValidPlan;
use coll_compiler::topology::Topology;
use coll_compiler::{CompileOptions, check};
use coll_lang::SourceFile;
use coll_tests::{compiled, display_name, source};

/// The program with its `with channel` hints removed.
fn without_channel_hints(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(" with channel ") {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let end = rest.find(';').unwrap_or(rest.len());
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// The scheduler makes the shipped algorithms' `with channel` hints unnecessary, and never
/// takes more rounds than the program as written (program order, first-fit blocks): with
/// and without hints, at 2, 4, 8 and 16 ranks, the program without hints is predicted no
/// slower at any of the sizes the scheduler compares than with them (within
/// [`MODEL_RESOLUTION`]).
#[test]
fn schedules_need_no_channel_hints_and_beat_the_program_as_written() {
    let mut stripped_any = 0;
    for path in coll_tests::coll_files("algorithms") {
        stripped_any += usize::from(hints_are_unneeded(&path, &[2, 4, 8, 16]));
    }
    assert!(
        stripped_any >= 5,
        "only {stripped_any} algorithms have hints"
    );
}

/// The same at 64 ranks for the all-to-alls, whose ranks there have more connection sides
/// than blocks: the local copy still gets a block of its own without its hint, and the
/// two-step version keeps the compiler's channels, which the hints reproduce.
#[test]
fn all_to_alls_need_no_channel_hints_at_64_ranks() {
    for name in ["alltoall", "alltoall_2step"] {
        let path = coll_tests::root().join(format!("algorithms/{name}.coll"));
        assert!(hints_are_unneeded(&path, &[64]), "{name} has no hints");
    }
}

/// How much slower than with hints a plan without them may be predicted: the scheduler's
/// tolerance between candidates. Hints that put transfers of one link in blocks side by side
/// let the model bound them by the link's whole load, one latency below the same transfers
/// one after another in one block (2251.12 against 2255.92 µs for `allreduce_nvls` at
/// n = 2 and 1 GiB); the GPU pays that latency either way.
const MODEL_RESOLUTION: f64 = 0.005;

/// Where the scheduler does not yet find without hints what the hints give, and by how much
/// at most (file name, rank count, share slower at some size). None now: `allreduce_tree`
/// at n = 8, 0.8% slower without its hints before blocks of several peers, is now faster
/// without them (7 rounds against 11: each node takes both children in one op, which the
/// hints' channel per child keeps apart). A gap added here that grows fails.
const KNOWN_GAPS: [(&str, usize, f64); 0] = [];

/// Checks [`schedules_need_no_channel_hints_and_beat_the_program_as_written`]'s claims for
/// one algorithm at the rank counts `ns` its topology preset takes; whether it had hints.
fn hints_are_unneeded(path: &std::path::Path, ns: &[usize]) -> bool {
    use coll_compiler::lower::PREDICT_SIZES;
    let as_written = {
        let mut o = CompileOptions::default();
        o.lower.scheduling = Scheduling::AsWritten;
        o
    };
    let file = source(path);
    let bare = SourceFile::new(file.name(), without_channel_hints(file.text()));
    let stripped = bare.text() != file.text();
    let hinted = coll_lang::load(file).unwrap_or_else(|d| panic!("{}", d.render()));
    let bare = coll_lang::load(bare).unwrap_or_else(|d| panic!("{}", d.render()));
    for &n in ns {
        let Some(spec) = coll_tests::preset(&hinted, n) else {
            continue;
        };
        let topo = Topology::parse(&spec).expect("a preset");
        let compile = |m: &coll_lang::Module, o: &CompileOptions| {
            coll_compiler::compile(m, &topo, o)
                .unwrap_or_else(|d| panic!("{} at n = {n}:\n{}", path.display(), d.render()))
        };
        // Rounds, and predicted µs at each size on the simulated rounds.
        let measure = |m: &coll_lang::Module, o: &CompileOptions| {
            let c = compile(m, o);
            let steps = |r: u32, b: u32, op: u32| c.schedule.round_of(r, b, op);
            let model = coll_compiler::predict::Compiled::new(
                &c.lowered.plan,
                &topo,
                &steps,
                &coll_compiler::predict::Model::default(),
            )
            .expect("predicts");
            let times: Vec<f64> = PREDICT_SIZES.iter().map(|&s| model.at(s).time_us).collect();
            (c.schedule.rounds, times)
        };
        let what = format!("{} at n = {n} on {spec}", path.display());
        let (written, _) = measure(&hinted, &as_written);
        let (chosen, with_hints) = measure(&hinted, &CompileOptions::default());
        let (_, without) = measure(&bare, &CompileOptions::default());
        assert!(
            chosen <= written,
            "{what}: {chosen} rounds, as written {written}"
        );
        let name = path.file_name().and_then(|f| f.to_str()).unwrap_or("");
        let tolerance = KNOWN_GAPS
            .iter()
            .find(|g| g.0 == name && g.1 == n)
            .map_or(MODEL_RESOLUTION, |g| g.2);
        for ((t, h), size) in without.iter().zip(&with_hints).zip(PREDICT_SIZES) {
            assert!(
                *t <= h * (1.0 + tolerance),
                "{what}: {t} µs at {size} B without hints, {h} with"
            );
        }
    }
    stripped
}

/// A schedule note must mark exactly one candidate chosen; a plan without one (every plan
/// written before the scheduler recorded its choice) loads as it did.
#[test]
fn schedule_notes_are_validated() {
    let c = compiled(&coll_tests::root().join("algorithms/allreduce_rhd.coll"), 4)
        .expect("rhd runs on 4 ranks");
    let mut plan = (*c.lowered.plan).clone();
    let note = plan
        .schedule
        .as_mut()
        .expect("compile records its schedule");
    assert_eq!(note.rounds, c.schedule.rounds);
    assert_eq!(note.candidates.iter().filter(|c| c.chosen).count(), 1);
    let k = note.candidates.len();
    assert!(k > 1, "{note:?}");
    for cand in &mut note.candidates {
        cand.chosen = true;
    }
    let err = plan
        .validate()
        .expect_err("every candidate chosen")
        .to_string();
    assert_eq!(
        err,
        format!("schedule: {k} of {k} candidates are marked chosen, not one")
    );
    let mut plain = (*c.lowered.plan).clone();
    plain.schedule = None;
    let json = plain.to_json();
    assert!(!json.contains("\"schedule\""));
    assert_eq!(
        ValidPlan::from_json(&json).expect("loads").into_inner(),
        plain
    );
}

/// All-pairs allreduce exchanges: after folding, both ranks of a pair send before they
/// receive, so whole transfers cannot be ordered (the note says their DAG has a cycle) and
/// only the order with sends and receives apart is tried besides the program's.
#[test]
fn exchanges_that_send_first_are_ordered_with_sends_and_receives_apart() {
    let c = compiled(
        &coll_tests::root().join("algorithms/allreduce_allpairs.coll"),
        4,
    )
    .expect("allpairs runs on 4 ranks");
    let note = c.lowered.plan.schedule.as_ref().expect("a schedule note");
    assert!(
        note.notes
            .iter()
            .any(|n| n.starts_with("dependence order: its DAG has a cycle")),
        "{:?}",
        note.notes
    );
    let tried = |o: coll_compiler::lower::Order| {
        note.candidates
            .iter()
            .filter(|c| c.order == o && c.channels == Channels::Program && c.rounds.is_some())
            .count()
    };
    assert_eq!(tried(coll_compiler::lower::Order::Dependence), 0);
    assert_eq!(tried(coll_compiler::lower::Order::DependenceSplit), 4);
    assert!(note.rounds <= 4, "{note:?}");
}

/// `with channel` hints the lowering cannot honour are warnings naming the statement's
/// `path:line:col`, on stderr of both `coll check` and `coll compile`, and the program
/// still compiles.
#[test]
fn unhonoured_channel_hints_are_warnings_naming_their_line() {
    let path = coll_tests::root().join("tests/inputs/warn/channel_hints.coll");
    let p = path.display().to_string();
    let want = format!(
        "warning: {p}:19:9: `with channel` cannot be honoured together with fusion: rank 0 \
         receives on channel 0 and forwards the same chunks on channel 1 (a block serves one \
         channel), so the receive and the send run as two ops in two blocks; give both \
         statements the same channel\n"
    );
    let (code, out, err) = run_captured(["coll", "check", &p, "--ranks", "4"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(": ok (allgather `hinted_ring`"), "{out}");
    assert_eq!(err, want);
    let (code, _, err) = run_captured(["coll", "compile", &p, "--ranks", "4", "-o", "/dev/null"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(err, want);
    // Without the hints, no warning.
    let file = SourceFile::new(
        "plain.coll",
        std::fs::read_to_string(&path)
            .expect("read the input")
            .replace(" with channel 2", "")
            .replace(" with channel 1", ""),
    );
    let m = coll_lang::load(file).unwrap_or_else(|d| panic!("{}", d.render()));
    let topo = Topology::parse("nvswitch:4").expect("a preset");
    let c = coll_compiler::compile(&m, &topo, &CompileOptions::default()).expect("compiles");
    assert_eq!(c.lowered.warnings, Vec::new());
}

/// No shipped algorithm warns about its own hints at 2 to 16 ranks. The tree's nodes forward
/// each receive to two children: one forward fuses with the receive on its channel, the other
/// runs apart on another channel whatever the hint says, which is no hint left unhonoured.
#[test]
fn shipped_algorithms_give_no_warnings() {
    let mut compiled = 0;
    for path in coll_tests::coll_files("algorithms") {
        let m = coll_lang::load(source(&path)).unwrap_or_else(|d| panic!("{}", d.render()));
        if coll_tests::cluster_only(&m) {
            continue;
        }
        for n in [2u32, 3, 4, 5, 8, 16] {
            let topo = Topology::parse(&format!("nvswitch:{n}")).expect("a preset");
            let Ok(c) = coll_compiler::compile(&m, &topo, &CompileOptions::default()) else {
                continue;
            };
            assert_eq!(
                c.lowered.warnings,
                Vec::new(),
                "{} at {n} ranks",
                path.display()
            );
            compiled += 1;
        }
    }
    assert!(compiled >= 60, "only {compiled} compiled");
}

/// No shipped algorithm or port of a published one fails at n = 32 for want of thread
/// blocks: each compiles with the default limits (108 blocks per rank), on 4 nodes of 8
/// where it needs a cluster, and its plan fits them. (Ports that support only other rank
/// counts are skipped, and counted.)
#[test]
fn every_shipped_algorithm_and_port_compiles_at_32_ranks() {
    let limit = check::Limits::default().max_blocks as usize;
    let algorithms = coll_tests::coll_files("algorithms");
    let ports = coll_tests::coll_files("bench/ports");
    assert!(algorithms.len() >= 16 && ports.len() >= 18);
    let mut skipped = Vec::new();
    for path in algorithms.iter().chain(&ports) {
        let m = coll_lang::load(source(path)).unwrap_or_else(|d| panic!("{}", d.render()));
        let spec = if coll_tests::cluster_only(&m) {
            "cluster:4x8"
        } else {
            "nvswitch:32"
        };
        let topo = Topology::parse(spec).expect("a preset");
        let c = match coll_compiler::compile(&m, &topo, &CompileOptions::default()) {
            Ok(c) => c,
            Err(d) if matches!(d.list[0].kind, CompileError::UnsupportedRanks { .. }) => {
                skipped.push(display_name(path));
                continue;
            }
            Err(d) => panic!("{} on {spec}:\n{}", path.display(), d.render()),
        };
        let most = c
            .lowered
            .plan
            .gpus
            .iter()
            .map(|g| g.blocks.len())
            .max()
            .unwrap_or(0);
        assert!(most <= limit, "{}: {most} blocks", path.display());
        assert_eq!(c.elaborated.n, 32);
    }
    assert_eq!(skipped, ["bench/ports/allreduce_ndv2.coll"]);
}

/// The candidates added for the ports: the hierarchical allreduce port's chunks each travel
/// on a channel of their own, so every hand-off between its phases fuses with the receive
/// before it (9 rounds at n = 8, its original 10; the compiler's channels take 11 at best,
/// predicted the same at 8 B and 17% slower at 1 GiB, where the fused hand-offs stream; 33
/// with one channel),
/// and the all-pairs
/// allreduce port's reductions run in blocks of their own (11 rounds, as its original; 18
/// in the blocks of its receives).
#[test]
fn ports_take_the_compilers_channels_and_local_blocks() {
    use coll_compiler::lower::Packing;
    let at_with = |file: &str, spec: &str, params: &[(&str, i64)]| {
        let path = coll_tests::root().join("bench/ports").join(file);
        let m = coll_lang::load(source(&path)).unwrap_or_else(|d| panic!("{}", d.render()));
        let topo = Topology::parse(spec).expect("a preset");
        let mut options = CompileOptions::default();
        for &(name, value) in params {
            options.elaborate.params.insert(name.to_string(), value);
        }
        let c = coll_compiler::compile(&m, &topo, &options)
            .unwrap_or_else(|d| panic!("{}", d.render()));
        let note = c.lowered.plan.schedule.clone().expect("a schedule note");
        (c.schedule.rounds, note)
    };
    let at = |file: &str, spec: &str| at_with(file, spec, &[]);
    let (rounds, note) = at("hierarchical_allreduce.coll", "cluster:2x4");
    assert_eq!(note.channels, Channels::Chunks, "{note:?}");
    assert_eq!(rounds, 9);
    let chosen = note
        .candidates
        .iter()
        .find(|c| c.chosen)
        .expect("a chosen candidate");
    let best_compiler = note
        .candidates
        .iter()
        .filter(|c| c.channels == Channels::Compiler && c.rejected.is_none())
        .min_by_key(|c| c.predicted_ns.iter().sum::<u64>())
        .expect("the compiler's channels passed");
    assert_eq!(best_compiler.rounds, Some(11), "{note:?}");
    // No slower at any size than the compiler's channels' best, within the tolerance the
    // scheduler allows a later tier for a gain beyond it elsewhere.
    for (a, b) in chosen.predicted_ns.iter().zip(&best_compiler.predicted_ns) {
        assert!(
            *a as f64 <= *b as f64 * (1.0 + MODEL_RESOLUTION),
            "{note:?}"
        );
    }
    assert!(
        chosen.predicted_ns[2] < best_compiler.predicted_ns[2],
        "{note:?}"
    );
    let one_channel = note
        .candidates
        .iter()
        .filter(|c| c.channels == Channels::Program)
        .filter_map(|c| c.rounds)
        .min();
    assert_eq!(one_channel, Some(33), "{note:?}");
    let (rounds, note) = at("allreduce_a100_allpairs.coll", "nvswitch:8");
    assert_eq!(note.packing, Packing::LocalApart, "{note:?}");
    assert_eq!(rounds, 11);
    // The two-tree allreduce: each root's receive forwards at once to the child with the
    // deeper subtree (7 rounds, the original 8; 9 when it forwarded to a leaf first).
    let (rounds, note) = at_with(
        "allreduce_binomial_tree.coll",
        "nvswitch:8",
        &[("trees", 2)],
    );
    assert_eq!(note.packing, Packing::PerConnectionEcho, "{note:?}");
    assert_eq!(rounds, 7);
}

/// Out of place, a head whose first receive adds a peer's chunk to its own input into its
/// output takes that receive into its block of several peers too (`merge_peers.rs`): the
/// NVLS-shaped allreduces and the double binary tree lose a round or more (as run by `coll
/// bench` and `coll run`, which compile in-place programs out of place), and the plans still
/// compute their collective on the CPU executor in both placements.
#[test]
fn heads_take_their_first_receive_into_one_op_out_of_place() {
    for (file, spec, rounds) in [
        ("algorithms/allreduce_nvls.coll", "nvswitch:4", 3),
        ("algorithms/allreduce_nvls.coll", "nvswitch:8", 3),
        ("bench/ports/allreduce_mscclpp_nvls.coll", "nvswitch:8", 3),
        (
            "bench/ports/allreduce_double_binary_tree.coll",
            "nvswitch:4",
            5,
        ),
        (
            "bench/ports/allreduce_double_binary_tree.coll",
            "nvswitch:8",
            7,
        ),
        ("bench/ports/allreduce_ndv2.coll", "nvswitch:8", 5),
    ] {
        let path = coll_tests::root().join(file);
        let m = coll_lang::load(source(&path)).unwrap_or_else(|d| panic!("{}", d.render()));
        let topo = Topology::parse(spec).expect("a preset");
        let mut options = CompileOptions::default();
        options.elaborate.out_of_place = true;
        let c = coll_compiler::compile(&m, &topo, &options)
            .unwrap_or_else(|d| panic!("{}", d.render()));
        let what = format!("{file} on {spec}");
        assert_eq!(c.schedule.rounds, rounds, "{what}");
        let note = c.lowered.plan.schedule.clone().expect("a schedule note");
        assert!(note.several_peers, "{what}: {note:?}");
        coll_tests::exact_in_both_placements(c, &what);
    }
}

/// A candidate asked for with its blocks of several peers (`--schedule
/// ...,several-peers`) is lowered merged even where the cost model would not choose it: the
/// one-shot allreduce, each rank adding every peer's input to its own in one op, in 2 rounds
/// against the chain of receive-reduces the model chooses; it still computes its collective
/// on the CPU executor in both placements.
#[test]
fn a_candidate_asked_for_with_several_peers_is_lowered_merged() {
    use coll_compiler::lower::{Order, Packing};
    let path = coll_tests::root().join("algorithms/allreduce_oneshot.coll");
    let m = coll_lang::load(source(&path)).unwrap_or_else(|d| panic!("{}", d.render()));
    for n in [2, 4, 8] {
        let topo = Topology::parse(&format!("nvswitch:{n}")).expect("a preset");
        let chosen = coll_compiler::compile(&m, &topo, &CompileOptions::default())
            .unwrap_or_else(|d| panic!("{}", d.render()));
        let mut options = CompileOptions::default();
        options.lower.scheduling =
            Scheduling::OnlyMerged(Channels::Program, Order::Program, Packing::PerConnection);
        let c = coll_compiler::compile(&m, &topo, &options)
            .unwrap_or_else(|d| panic!("{}", d.render()));
        let note = c.lowered.plan.schedule.clone().expect("a schedule note");
        // At n = 2 there is one peer and nothing to merge: the candidate as it is.
        assert_eq!(note.several_peers, n > 2, "n = {n}: {note:?}");
        assert_eq!(c.schedule.rounds, 2, "n = {n}");
        assert_eq!(
            chosen.schedule.rounds, n as u32,
            "n = {n}: the chain as written"
        );
        // Every rank's receives are one op of n - 1 peers.
        for (r, rank) in c.plan().gpus.iter().enumerate() {
            let heads = rank.receive_fan_in();
            assert_eq!(heads, [n - 1], "n = {n}, rank {r}");
        }
        coll_tests::exact_in_both_placements(c, &format!("oneshot n = {n}"));
    }
}

/// The dependences' bound in the schedule notes is a lower bound: no candidate of any
/// shipped algorithm or port at n = 8 takes fewer rounds than it gives. Where the rounds
/// stay above it, the ports results say why (Bruck's all-to-all: see `bench/ports/README.md`).
#[test]
fn the_dependence_bound_holds_for_every_candidate() {
    // The bound of the program's ops, or with `prefix`, of another family's.
    let bound_with = |note: &coll_compiler::lower::ScheduleNote, prefix: &str| -> Option<u32> {
        let line = note.notes.iter().find_map(|n| {
            n.strip_prefix(prefix)?
                .strip_prefix("dependences: the longest chain of hazards holds ")
        })?;
        let k: u32 = line
            .split(' ')
            .next()
            .and_then(|k| k.parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        Some(k + 1)
    };
    let bound_of = |note: &coll_compiler::lower::ScheduleNote| -> u32 {
        bound_with(note, "").unwrap_or_else(|| panic!("no bound in {:?}", note.notes))
    };
    let mut bounds = std::collections::HashMap::new();
    let files = coll_tests::coll_files("algorithms")
        .into_iter()
        .chain(coll_tests::coll_files("bench/ports"));
    for path in files {
        let m = coll_lang::load(source(&path)).unwrap_or_else(|d| panic!("{}", d.render()));
        let spec = if coll_tests::cluster_only(&m) {
            "cluster:2x4"
        } else {
            "nvswitch:8"
        };
        let topo = Topology::parse(spec).expect("a preset");
        let Ok(c) = coll_compiler::compile(&m, &topo, &CompileOptions::default()) else {
            continue;
        };
        let note = c.lowered.plan.schedule.clone().expect("a schedule note");
        let bound = bound_of(&note);
        // Scratch renaming removes hazards: its candidates have a bound of their own.
        let renamed = bound_with(&note, "with scratch renamed, ");
        let bound_for = |channels| match channels {
            Channels::Renamed => renamed.unwrap_or_else(|| panic!("no bound in {note:?}")),
            _ => bound,
        };
        if !note.several_peers {
            assert!(
                c.schedule.rounds >= bound_for(note.channels),
                "{}: {note:?}",
                path.display()
            );
        }
        // Blocks of several peers are not bound by it: two receives into one chunk, a
        // hazard apart, are one op there.
        for cand in note.candidates.iter().filter(|c| !c.several_peers) {
            if let Some(r) = cand.rounds {
                let b = bound_for(cand.channels);
                assert!(r >= b, "{}: {cand:?} under {b}", path.display());
            }
        }
        bounds.insert(display_name(&path), (bound, c.schedule.rounds));
    }
    // The textbook counts (k steps, k + 1 rounds) of the 2D torus and the NVLS port. The
    // torus reaches its own with transfers cut into chunks (its hand-offs between rows and
    // columns pass on part of a shard); the NVLS port and the double binary tree reach
    // theirs (3, and 2 log2 n + 1) only with blocks of several peers, under the one-peer
    // bound.
    assert_eq!(bounds["bench/ports/allreduce_torus2d.coll"], (9, 9));
    assert_eq!(bounds["bench/ports/allreduce_mscclpp_nvls.coll"], (3, 3));
    assert_eq!(
        bounds["bench/ports/allreduce_double_binary_tree.coll"],
        (9, 7)
    );
    // Bruck's all-to-all reaches the bound of its renamed ops, under the program's.
    assert_eq!(bounds["bench/ports/alltoall_bruck.coll"], (7, 4));
    assert!(bounds.len() >= 30, "{}", bounds.len());
}

/// Every candidate with a channel per chunk of the hierarchical allreduce port computes the
/// allreduce on the CPU executor, in both placements, and the best of them reaches the
/// dependences' bound (9 rounds at n = 8: each hand-off between phases fused, the network
/// peer's send back included, which blocks merging a receive with a send back to its peer
/// do).
#[test]
fn a_channel_per_chunk_runs_and_reaches_the_bound() {
    use coll_compiler::lower::{Channels, Order, Packing, Scheduling};
    use coll_executor::cpu::{CpuExecutor, RunOptions};
    use coll_executor::dtype::DType;
    use coll_executor::harness::run_checked;
    let path = coll_tests::root().join("bench/ports/hierarchical_allreduce.coll");
    let m = coll_lang::load(source(&path)).unwrap_or_else(|d| panic!("{}", d.render()));
    let topo = Topology::parse("cluster:2x4").expect("a preset");
    let mut rounds = Vec::new();
    for order in [Order::Program, Order::Dependence, Order::DependenceSplit] {
        for packing in [
            Packing::FirstFit,
            Packing::PerConnection,
            Packing::PerConnectionEcho,
            Packing::LocalApart,
        ] {
            let mut options = CompileOptions::default();
            options.lower.scheduling = Scheduling::Only(Channels::Chunks, order, packing);
            let c = coll_compiler::compile(&m, &topo, &options)
                .unwrap_or_else(|d| panic!("{}", d.render()));
            let note = c.lowered.plan.schedule.clone().expect("a schedule note");
            assert_eq!(
                (note.channels, note.order, note.packing),
                (Channels::Chunks, order, packing),
                "{note:?}"
            );
            rounds.push(c.schedule.rounds);
            let exec = CpuExecutor::new(c.into_plan(), coll_compiler::DEFAULT_SLOTS);
            let o = RunOptions {
                count: 1003,
                ..RunOptions::default()
            };
            for inplace in [false, true] {
                let r = run_checked(&exec, DType::F32, &o, inplace)
                    .unwrap_or_else(|e| panic!("{order:?} {packing:?} in place {inplace}: {e}"));
                assert_eq!(r.wrong, Some(0), "{order:?} {packing:?} in place {inplace}");
            }
        }
    }
    assert_eq!(rounds.iter().min(), Some(&9), "{rounds:?}");
}

/// Where hoisting deadlocks, the plan is lowered again without it but keeps the sends copy
/// folding moved: Bruck's all-to-all then receives straight into its work buffer instead of
/// unpacking each message with a copy, and still computes the all-to-all. With whole
/// transfers, so that scratch renaming (which also removes the unpacking) is not tried.
#[test]
fn a_deadlock_after_hoisting_keeps_the_sends_folding_moved() {
    use coll_executor::cpu::{CpuExecutor, RunOptions};
    use coll_executor::dtype::DType;
    use coll_executor::harness::run_checked;
    let path = coll_tests::root().join("bench/ports/alltoall_bruck.coll");
    // Local copies that read the receive buffer `inbox`.
    let unpacking = |c: &coll_compiler::Compiled| {
        let plan = &c.lowered.plan;
        let inbox = plan
            .buffers
            .iter()
            .position(|b| b.name == "inbox")
            .expect("an inbox buffer");
        ops_of(plan)
            .filter(|o| o.kind == coll_compiler::plan::OpKind::Copy)
            .filter(|o| o.src.is_some_and(|s| s.buffer() as usize == inbox))
            .count()
    };
    let mut whole = CompileOptions::default();
    whole.lower.split_transfers = false;
    for n in [8, 16] {
        let c = coll_tests::compiled_with(&path, n, &whole).expect("compiles");
        let note = c.lowered.plan.schedule.clone().expect("a schedule note");
        assert!(
            note.notes.iter().any(|t| t.contains(
                "deadlocks after hoisting sends: lowered again without hoisting, keeping the sends copy folding moved"
            )),
            "{note:?}"
        );
        let mut options = whole.clone();
        options.lower.hoist_sends = false;
        let unmoved = coll_tests::compiled_with(&path, n, &options).expect("compiles");
        assert!(
            unpacking(&c) < unpacking(&unmoved),
            "n = {n}: {} copies out of inbox, {} without moved sends",
            unpacking(&c),
            unpacking(&unmoved)
        );
        let exec = CpuExecutor::new(c.into_plan(), coll_compiler::DEFAULT_SLOTS);
        let o = RunOptions {
            count: 1003,
            ..RunOptions::default()
        };
        let r =
            run_checked(&exec, DType::F32, &o, false).unwrap_or_else(|e| panic!("n = {n}: {e}"));
        assert_eq!(r.wrong, Some(0), "n = {n}");
    }
}

/// The worked example of LANGUAGE.md ("From program to schedule") says what the compiler
/// does with its program: every line of output it quotes is what `--explain` prints for the
/// program it shows (named `rd.coll`, as the guide runs it), so the guide cannot drift from
/// the scheduler.
#[test]
fn the_language_guides_worked_example_is_what_the_compiler_does() {
    let guide =
        std::fs::read_to_string(coll_tests::root().join("lang/LANGUAGE.md")).expect("LANGUAGE.md");
    let example = &guide[guide
        .find("### Worked example")
        .expect("a worked example section")..];
    let example = &example[..example.find("\n## ").expect("a section after it")];
    // Its fenced blocks: the program first, then quoted output.
    let blocks: Vec<&str> = example.split("```\n").skip(1).step_by(2).collect();
    assert!(blocks.len() >= 3, "{} blocks", blocks.len());
    let file = coll_lang::decode("rd.coll", blocks[0].as_bytes().to_vec())
        .unwrap_or_else(|d| panic!("{}", d.render()));
    let m = coll_lang::load(file).unwrap_or_else(|d| panic!("{}", d.render()));
    let topo = Topology::parse("nvswitch:4").expect("a preset");
    let options = CompileOptions::default();
    let c =
        coll_compiler::compile(&m, &topo, &options).unwrap_or_else(|d| panic!("{}", d.render()));
    let plan = c.lowered.plan.clone();
    let explained = coll_compiler::lower::explain(&plan, &c.schedule, options.slots);
    let lines: Vec<&str> = explained.lines().collect();
    let mut quoted = 0;
    for block in &blocks[1..] {
        for line in block.lines() {
            assert!(
                lines.contains(&line),
                "the guide quotes a line --explain does not print:\n{line}\n\n{explained}"
            );
            quoted += 1;
        }
    }
    assert!(quoted >= 9, "{quoted} lines quoted");
    // What the prose says: 6 rounds as written, 3 chosen with transfers cut into chunks, no
    // hint.
    assert_eq!(c.schedule.rounds, 3);
    let note = plan.schedule.as_ref().expect("a schedule note");
    assert_eq!(note.channels, Channels::Split, "{note:?}");
    assert!(!blocks[0].contains("channel"), "the example has no hint");
}

/// Blocks of several peers take the double binary tree and the NVLS head-node allreduce to
/// their textbook counts (k steps, k + 1 rounds): a tree node takes both children's data in
/// one op and sends to both in one, a head takes every peer's contribution in one op and
/// sends the sum to all in one. The chosen plans say so, compute the allreduce on the CPU
/// executor in both placements, and the MSCCL-IR export, whose blocks have one peer a side,
/// lowers without them.
#[test]
fn blocks_of_several_peers_reach_the_textbook_rounds() {
    let cases = [
        ("allreduce_double_binary_tree.coll", 8, 7),
        ("allreduce_double_binary_tree.coll", 16, 9),
        ("allreduce_mscclpp_nvls.coll", 4, 3),
        ("allreduce_mscclpp_nvls.coll", 8, 3),
    ];
    for (file, n, rounds) in cases {
        let path = coll_tests::root().join("bench/ports").join(file);
        let m = coll_lang::load(source(&path)).unwrap_or_else(|d| panic!("{}", d.render()));
        let topo = Topology::parse(&format!("nvswitch:{n}")).expect("a preset");
        let c = coll_compiler::compile(&m, &topo, &CompileOptions::default())
            .unwrap_or_else(|d| panic!("{}", d.render()));
        let note = c.lowered.plan.schedule.clone().expect("a schedule note");
        assert!(note.several_peers, "{file} n = {n}: {note:?}");
        assert_eq!(c.schedule.rounds, rounds, "{file} n = {n}");
        let several = blocks_of(&c.lowered.plan)
            .filter(|b| b.several_peers())
            .count();
        assert!(several > 0, "{file} n = {n}");
        coll_tests::exact_in_both_placements(c, &format!("{file} n = {n}"));
        let mut one_peer = CompileOptions::default();
        one_peer.lower.several_peers = false;
        let c = coll_compiler::compile(&m, &topo, &one_peer)
            .unwrap_or_else(|d| panic!("{}", d.render()));
        assert!(
            blocks_of(&c.lowered.plan).all(|b| !b.several_peers()),
            "{file} n = {n}"
        );
        assert!(c.schedule.rounds > rounds, "{file} n = {n}");
        coll_compiler::msccl::export(c.plan()).unwrap_or_else(|e| panic!("{file} n = {n}: {e}"));
    }
}

/// Transfers cut into chunks take the 2D torus to its textbook count at n = 8 (8 steps, 9
/// rounds; 11 with whole transfers): its hand-off from rows to columns passes on one chunk
/// of the shard it received, and the one back to rows sends the chunk it received with the
/// one it held. Cut, each forwarded chunk's receive fuses with its send. The chosen plan
/// computes the allreduce on the CPU executor at a count no chunk divides, in both
/// placements, and `--whole-transfers` keeps every transfer whole.
#[test]
fn transfers_cut_into_chunks_take_the_torus_to_its_textbook_rounds() {
    let path = coll_tests::root().join("bench/ports/allreduce_torus2d.coll");
    let m = coll_lang::load(source(&path)).unwrap_or_else(|d| panic!("{}", d.render()));
    let topo = Topology::parse("nvswitch:8").expect("a preset");
    let c = coll_compiler::compile(&m, &topo, &CompileOptions::default())
        .unwrap_or_else(|d| panic!("{}", d.render()));
    let note = c.lowered.plan.schedule.clone().expect("a schedule note");
    assert_eq!(note.channels, Channels::Split, "{note:?}");
    assert_eq!(c.schedule.rounds, 9);
    // Every transfer moves one chunk (the program's move a shard of two at a time).
    let counts = |c: &coll_compiler::Compiled| -> std::collections::BTreeSet<u32> {
        ops_of(&c.lowered.plan)
            .filter(|o| o.kind.sends() || o.kind.receives())
            .map(|o| o.count)
            .collect()
    };
    assert_eq!(counts(&c).into_iter().collect::<Vec<_>>(), [1]);
    coll_tests::exact_in_both_placements(c, "the 2D torus at n = 8");
    let mut whole = CompileOptions::default();
    whole.lower.split_transfers = false;
    let c = coll_compiler::compile(&m, &topo, &whole).unwrap_or_else(|d| panic!("{}", d.render()));
    assert_ne!(
        c.lowered.plan.schedule.as_ref().map(|s| s.channels),
        Some(Channels::Split)
    );
    assert!(counts(&c).contains(&2), "{:?}", counts(&c));
    assert_eq!(c.schedule.rounds, 11);
}

/// Scratch renaming takes Bruck's all-to-all to its textbook rounds (log2 n steps, one round
/// more): the port refills its work buffer's positions at every step, so as written a
/// position's receive waits for that position's send and its longest chain of hazards holds
/// 2 log2 n transfers. Renamed, each receive lands in a version of its own and forwards as
/// it arrives, the unpacking and final copies fold away, and the predicted 8 B time is log2 n
/// message latencies. The plan keeps only the versions it uses, computes the all-to-all on
/// the CPU executor at a count no chunk divides, and without renaming (`--no-fold`, which
/// renaming needs) the rounds are what they were.
#[test]
fn scratch_renaming_takes_bruck_to_its_textbook_rounds() {
    let path = coll_tests::root().join("bench/ports/alltoall_bruck.coll");
    let m = coll_lang::load(source(&path)).unwrap_or_else(|d| panic!("{}", d.render()));
    for (n, steps, before) in [(8u32, 3, 12), (16, 4, 20)] {
        let topo = Topology::parse(&format!("nvswitch:{n}")).expect("a preset");
        let c = coll_compiler::compile(&m, &topo, &CompileOptions::default())
            .unwrap_or_else(|d| panic!("{}", d.render()));
        let note = c.lowered.plan.schedule.clone().expect("a schedule note");
        assert_eq!(note.channels, Channels::Renamed, "n = {n}: {note:?}");
        assert_eq!(c.schedule.rounds, steps + 1, "n = {n}");
        // 8 B: one message latency per step, that of the one-step all-to-all.
        let at_8 = |plan: &coll_compiler::plan::Plan| {
            coll_compiler::predict::predict_sweep(plan, &topo, &[8]).expect("costed")[0].time_us
        };
        let one_step = compiled(
            &coll_tests::root().join("algorithms/alltoall.coll"),
            n as usize,
        )
        .expect("alltoall.coll runs at n ranks");
        let per_step = at_8(&one_step.lowered.plan);
        let bruck = at_8(&c.lowered.plan);
        assert!(
            (bruck / (f64::from(steps) * per_step) - 1.0).abs() < 1e-4,
            "n = {n}: {bruck} µs against {steps} × {per_step}"
        );
        let names: Vec<&str> = c
            .lowered
            .plan
            .buffers
            .iter()
            .map(|b| b.name.as_str())
            .collect();
        assert!(names.iter().any(|b| b.contains('\'')), "n = {n}: {names:?}");
        // Every version the plan declares is one some op uses.
        for (i, b) in c.lowered.plan.buffers.iter().enumerate().skip(2) {
            let used = ops_of(&c.lowered.plan).any(|o| {
                [o.src, o.dst]
                    .into_iter()
                    .flatten()
                    .any(|s| s.0 as usize == i)
            });
            assert!(used, "n = {n}: buffer {} unused", b.name);
        }
        exact_all_to_all(c, &format!("Bruck's all-to-all at n = {n}"));
        let mut plain = CompileOptions::default();
        plain.lower.fold_copies = false;
        let c =
            coll_compiler::compile(&m, &topo, &plain).unwrap_or_else(|d| panic!("{}", d.render()));
        assert_ne!(
            c.lowered.plan.schedule.as_ref().map(|s| s.channels),
            Some(Channels::Renamed)
        );
        assert!(
            c.schedule.rounds >= before,
            "n = {n}: {}",
            c.schedule.rounds
        );
    }
}

/// Runs a compiled all-to-all on the CPU executor at a count no chunk divides, every element
/// checked against the reference.
fn exact_all_to_all(c: coll_compiler::Compiled, what: &str) {
    use coll_executor::cpu::{CpuExecutor, RunOptions};
    use coll_executor::dtype::DType;
    use coll_executor::harness::run_checked;
    let exec = CpuExecutor::new(c.into_plan(), coll_compiler::DEFAULT_SLOTS);
    let o = RunOptions {
        count: 1003,
        ..RunOptions::default()
    };
    let r = run_checked(&exec, DType::F32, &o, false).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(r.wrong, Some(0), "{what}");
}

/// Every block of every rank of `plan`.
fn blocks_of(
    plan: &coll_compiler::plan::Plan,
) -> impl Iterator<Item = &coll_compiler::plan::Block> {
    plan.gpus.iter().flat_map(|g| &g.blocks)
}

/// Every op of every block of `plan`.
fn ops_of(plan: &coll_compiler::plan::Plan) -> impl Iterator<Item = &coll_compiler::plan::Op> {
    blocks_of(plan).flat_map(|b| &b.ops)
}
