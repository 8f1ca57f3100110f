//! The back end: text dumps of every shipped algorithm for several rank counts, plans that
//! survive a JSON round trip (in the library and through `coll compile`), SVG and DOT dumps
//! that parse, the cost model's table, and hand-written JSON plans in `inputs/plans/` that
//! `coll compile` accepts (`ok_*`) or rejects (everything else) with a snapshotted message;
//! copy folding on the fixtures of `inputs/fold/`, and in-place algorithms compiled out of
//! place; the scheduler's `--explain` (the rest of the scheduler's tests: `schedule.rs`).

use coll_cli::run_captured;
use coll_compiler::plan::{Plan, ValidPlan};
use coll_compiler::topology::Topology;
use coll_compiler::{CompileOptions, DEFAULT_SLOTS, check, dump, replay};
use coll_tests::{compiled, compiled_with, display_name, source};
use std::collections::BTreeSet;
use std::path::Path;

/// Rank counts every algorithm is dumped for.
const SIZES: [usize; 4] = [2, 3, 4, 8];

fn coll(args: &[&str]) -> (u8, String, String) {
    let mut argv = vec!["coll"];
    argv.extend_from_slice(args);
    run_captured(argv)
}

/// A workspace file as the CLI sees it from the test crate's folder (tests run there), so
/// paths in plans and messages stay relative.
fn cli_path(path: &Path) -> String {
    format!("../{}", display_name(path))
}

/// Snapshots must not depend on where the workspace is or on a terminal.
fn assert_portable(what: &str, text: &str) {
    let root = coll_tests::root();
    let root = root.canonicalize().unwrap_or(root);
    assert!(
        !text.contains(&*root.to_string_lossy()),
        "{what} contains an absolute path:\n{text}"
    );
    assert!(
        !text.contains('\u{1b}'),
        "{what} contains terminal escapes:\n{text}"
    );
}

#[test]
fn text_dumps_of_shipped_algorithms() {
    insta::glob!("../algorithms", "*.coll", |path| {
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut dumped = 0;
        for n in SIZES {
            let Some(c) = compiled(path, n) else {
                continue;
            };
            let text = dump::text(&c.lowered.plan);
            assert_portable(&format!("{stem} at n = {n}"), &text);
            insta::assert_snapshot!(format!("{stem}_n{n}"), text);
            dumped += 1;
        }
        assert!(dumped > 0, "{stem} supports none of {SIZES:?}");
    });
}

#[test]
fn plans_reload_identical() {
    for path in coll_tests::coll_files("algorithms") {
        for n in [4, 8] {
            let Some(c) = compiled(&path, n) else {
                continue;
            };
            let plan: &Plan = &c.lowered.plan;
            let json = plan.to_json();
            let again = ValidPlan::from_json(&json).unwrap_or_else(|e| {
                panic!(
                    "{} at n = {n}: the plan does not reload: {e}",
                    path.display()
                )
            });
            assert_eq!(&*again, plan, "{} at n = {n}", path.display());
            assert_eq!(dump::text(&again), dump::text(plan));
            assert_eq!(again.to_json(), json, "writing a reloaded plan changes it");
        }
    }

    // The same through the command line: .coll -> JSON file -> text.
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("p.json");
    let json = json.to_str().expect("utf-8 temp path");
    for path in coll_tests::coll_files("algorithms") {
        let file = cli_path(&path);
        let m = coll_lang::load(source(&path)).expect("valid");
        let topo = if coll_tests::cluster_only(&m) {
            "cluster:2x2"
        } else {
            "nvswitch:4"
        };
        let (code, out, err) = coll(&[
            "compile", &file, "--ranks", "4", "--topo", topo, "--format", "json", "-o", json,
        ]);
        assert_eq!(code, 0, "{file}: {err}");
        assert!(
            out.is_empty(),
            "-o writes nothing to standard output: {out}"
        );
        let (code, from_plan, err) = coll(&["compile", json, "--format", "text"]);
        assert_eq!(code, 0, "{file} reloaded: {err}");
        let (code, from_source, err) = coll(&["compile", &file, "--ranks", "4", "--topo", topo]);
        assert_eq!(code, 0, "{file}: {err}");
        assert_eq!(from_plan, from_source, "{file}");
        assert!(from_source.starts_with("plan "), "{from_source}");
    }
}

#[test]
fn every_algorithm_has_svg_and_dot() {
    let n = 4;
    for path in coll_tests::coll_files("algorithms") {
        let name = display_name(&path);
        let Some(c) = compiled(&path, n) else {
            continue;
        };
        let plan = &c.lowered.plan;
        let steps = |r: u32, b: u32, o: u32| c.schedule.round_of(r, b, o);
        let svg = dump::svg(plan, &steps);
        let doc = roxmltree::Document::parse(&svg)
            .unwrap_or_else(|e| panic!("{name}: the SVG is not XML: {e}\n{svg}"));
        assert_eq!(doc.root_element().tag_name().name(), "svg", "{name}");
        assert!(svg.starts_with("<svg"), "{name}: {svg}");
        assert_eq!(
            svg,
            dump::render(plan, dump::Format::Svg, &steps),
            "{name}: render and svg differ"
        );

        let dot = dump::dot(plan);
        assert!(dot.starts_with("digraph"), "{name}: {dot}");
        assert!(dot.trim_end().ends_with('}'), "{name}: {dot}");
        for r in 0..n {
            assert!(
                dot.contains(&format!("label=\"rank {r}\"")),
                "{name}: the DOT dump does not show rank {r}:\n{dot}"
            );
        }
    }
}

#[test]
fn predict_is_monotonic_and_sane() {
    let (code, out, err) = coll(&[
        "compile",
        "../algorithms/allreduce_ring.coll",
        "--ranks",
        "8",
        "--predict",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.is_empty(), "{err}");
    // Rows of the table: `| size | time | algbw | busbw |`, after the header and the rule.
    let rows: Vec<[f64; 4]> = out
        .lines()
        .filter(|l| l.starts_with('|') && !l.contains("size") && !l.contains("---"))
        .map(|l| {
            let cells: Vec<f64> = l
                .split('|')
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(|c| {
                    c.parse()
                        .unwrap_or_else(|_| panic!("not a number: {c} in {l}"))
                })
                .collect();
            cells
                .try_into()
                .unwrap_or_else(|c| panic!("4 columns expected: {c:?}"))
        })
        .collect();
    assert_eq!(rows.len(), 28, "8 B .. 1 GiB:\n{out}");
    assert_eq!(rows[0][0], 8.0);
    assert_eq!(rows[27][0], (1u64 << 30) as f64);
    for w in rows.windows(2) {
        assert_eq!(w[1][0], 2.0 * w[0][0], "sizes double:\n{out}");
        assert!(w[1][1] >= w[0][1], "time decreases:\n{out}");
    }
    for [size, time, algbw, busbw] in &rows {
        assert!(time.is_finite() && *time > 0.0, "{out}");
        assert!(algbw.is_finite() && *algbw >= 0.0, "{out}");
        // allreduce: busbw = algbw × 2(n - 1)/n, to the table's two decimals.
        assert!(
            (busbw - algbw * 14.0 / 8.0).abs() <= 0.02,
            "busbw at {size} B:\n{out}"
        );
    }
    // Large messages reach a bandwidth-bound regime: the last doubling almost doubles time.
    let ratio = rows[27][1] / rows[26][1];
    assert!(ratio > 1.8 && ratio <= 2.0, "{ratio}\n{out}");
}

/// `ok_*` plans compile and their text dump is snapshotted; every other plan exits 1 and
/// its standard error is snapshotted.
#[test]
fn plan_fixtures() {
    insta::glob!("inputs/plans/*.json", |path| {
        let name = display_name(path);
        let rel = name.strip_prefix("tests/").unwrap_or(&name).to_string();
        let (code, out, err) = coll(&["compile", &rel, "--format", "text"]);
        let ok = path
            .file_name()
            .is_some_and(|f| f.to_string_lossy().starts_with("ok_"));
        if ok {
            assert_eq!(code, 0, "{name} should compile:\n{err}");
            assert!(err.is_empty(), "{err}");
            assert_portable(&name, &out);
            insta::assert_snapshot!(out);
        } else {
            assert_eq!(code, 1, "{name} should be rejected:\n{out}{err}");
            assert!(
                out.is_empty(),
                "{name}: a rejected plan prints nothing:\n{out}"
            );
            assert!(err.contains(&rel), "the message names the file: {err}");
            assert_portable(&name, &err);
            insta::assert_snapshot!(err);
        }
    });
}

/// The compile path hands executors the plan it lowered and validated, equal to
/// `lowered.plan`; changing `lowered.plan` afterwards (it is shared: `Arc::make_mut` copies
/// it) does not change what it hands over.
#[test]
fn compiled_plans_are_handed_over_as_lowered() {
    let mut seen = 0;
    for path in coll_tests::coll_files("algorithms") {
        let Some(c) = compiled(&path, 4) else {
            continue;
        };
        assert_eq!(**c.plan(), *c.lowered.plan, "{}", path.display());
        let mut edited = c.clone();
        std::sync::Arc::make_mut(&mut edited.lowered.plan).gpus[1]
            .blocks
            .clear();
        assert_eq!(edited.plan(), c.plan(), "{}", path.display());
        assert!(ValidPlan::new(std::sync::Arc::unwrap_or_clone(edited.lowered.plan)).is_err());
        let lowered = (*c.lowered.plan).clone();
        assert_eq!(c.into_plan().into_inner(), lowered, "{}", path.display());
        seen += 1;
    }
    assert!(seen > 10, "only {seen} algorithms compiled for 4 ranks");
}

/// A `ValidPlan` cannot be had for an invalid plan, from memory or from JSON: the error
/// names the rank, block and op at fault and what is wrong there.
#[test]
fn invalid_plans_are_refused_by_location() {
    let text = std::fs::read_to_string("inputs/plans/ok_ring_allreduce_3.json").expect("fixture");
    let good = ValidPlan::from_json(&text)
        .expect("a valid plan")
        .into_inner();

    let mut bad = good.clone();
    bad.gpus[2].blocks[0].send_peer = Some(2);
    let e = ValidPlan::new(bad.clone()).expect_err("a block that sends to itself");
    assert_eq!(
        e.to_string(),
        "rank 2, block 0: send peer 2 is not another rank in 0..3"
    );
    let e = ValidPlan::from_json(&bad.to_json()).expect_err("the same plan as JSON");
    assert_eq!(
        e.to_string(),
        "rank 2, block 0: send peer 2 is not another rank in 0..3"
    );

    let mut bad = good.clone();
    bad.gpus[0].blocks[0].ops[0].count = 2;
    let e = ValidPlan::new(bad).expect_err("a send past the end of its buffer");
    assert_eq!(
        e.to_string(),
        "rank 0, block 0, op 0 (algorithms/allreduce_ring.coll:15:9): src chunks 2..4 are \
         outside `input` (3 chunks)"
    );

    let mut bad = good.clone();
    bad.version += 1;
    let e = ValidPlan::from_json(&bad.to_json()).expect_err("a future version");
    assert_eq!(
        e.to_string(),
        "plan format version 2 is not supported (this build reads version 1)"
    );
    // A future plan whose fields this build does not know: still the version's message;
    // a plan of this version that does not parse: the parser's.
    let e = ValidPlan::from_json(r#"{"version": 2, "blocks_v2": []}"#).expect_err("future");
    assert_eq!(
        e.to_string(),
        "plan format version 2 is not supported (this build reads version 1)"
    );
    let e = ValidPlan::from_json(r#"{"version": 1, "blocks_v2": []}"#).expect_err("broken");
    let e = e.to_string();
    assert!(
        e.starts_with("plan is not valid JSON for format version 1: unknown field `blocks_v2`"),
        "a parse error: {e}"
    );
    assert_eq!(
        ValidPlan::new(good.clone()).map(ValidPlan::into_inner),
        Ok(good)
    );
}

/// Each `*deadlock*` plan is structurally valid and the deadlock check, run on it directly,
/// names a closed cycle through both of its ranks (the CLI may report such a plan through
/// the symbolic replay first, which runs before the deadlock check).
#[test]
fn deadlock_plans_are_valid_and_cycle_through_both_ranks() {
    insta::glob!("inputs/plans/*deadlock*.json", |path| {
        let name = display_name(path);
        let text = std::fs::read_to_string(path).expect("readable fixture");
        let plan = ValidPlan::from_json(&text)
            .unwrap_or_else(|e| panic!("{name} should be a valid plan: {e}"));
        let d = match check::simulate(&plan, DEFAULT_SLOTS) {
            Ok(s) => panic!("{name} completes in {} rounds", s.rounds),
            Err(d) => d,
        };
        assert!(d.closed, "{name}: {d}");
        let ranks: BTreeSet<u32> = d.cycle.iter().map(|w| w.rank).collect();
        assert_eq!(ranks, BTreeSet::from([0, 1]), "{name}: {d}");
        insta::assert_snapshot!(d.to_string());
    });
}

#[test]
fn fail_fixtures_are_front_end_valid_and_formatted() {
    for path in coll_tests::coll_files("tests/inputs/fail") {
        let file = source(&path);
        let m = coll_lang::load(file.clone()).unwrap_or_else(|d| {
            panic!(
                "{} must pass the front end (coll check without --ranks):\n{}",
                file.name(),
                d.render()
            )
        });
        assert_eq!(
            coll_lang::fmt::format(file.text(), &m.program),
            file.text(),
            "{} is not in canonical layout",
            file.name()
        );
    }
}

/// Hoisting moves the send of `acc` above the local copy that reads `acc`; fusion then turns
/// the receive-reduce before it into a recv-reduce-send that stores nothing, because liveness
/// is computed in program order (where the copy came first). The copy then reads a stale
/// `acc` and the lowered plan misses every remote contribution on rank 0.
#[test]
fn hoisted_send_keeps_a_value_read_by_the_copy_it_passed() {
    let text = "\
collective allreduce accumulate(n) {
    chunks 1;
    inplace;
    scratch acc[1];
}

copy input[0][0] -> acc[0][0];
for r in 1..n {
    reduce input[r][0] -> acc[0][0];
}
for r in 0..n {
    copy acc[0][0] -> input[r];
}
";
    let m = coll_lang::load(coll_lang::SourceFile::new(
        "accumulate.coll",
        text.to_string(),
    ))
    .unwrap_or_else(|d| panic!("{}", d.render()));
    let topo = Topology::parse("nvswitch:2").expect("a preset");
    let c = coll_compiler::compile(&m, &topo, &CompileOptions::default())
        .unwrap_or_else(|d| panic!("{}", d.render()));
    replay::replay(&c.lowered.plan, 0).expect("the lowered plan computes the allreduce");
}

/// `instances` set from the options (what `coll bench --auto` tries) gives the plan the
/// header would: the ring with 16 instances equals `bench/variants/allreduce_ring_x16.coll`
/// op for op.
#[test]
fn instances_from_the_options_match_the_header() {
    let topo = Topology::parse("nvswitch:4").expect("a preset");
    let plan = |p: &str, options: &CompileOptions| -> Plan {
        let m = coll_lang::load(source(&coll_tests::root().join(p)))
            .unwrap_or_else(|d| panic!("{}", d.render()));
        coll_compiler::compile(&m, &topo, options)
            .unwrap_or_else(|d| panic!("{}", d.render()))
            .into_plan()
            .into_inner()
    };
    let mut options = CompileOptions::default();
    options.elaborate.instances = Some(16);
    let set = plan("algorithms/allreduce_ring.coll", &options);
    let written = plan(
        "bench/variants/allreduce_ring_x16.coll",
        &CompileOptions::default(),
    );
    assert_eq!(set.chunk_factor, written.chunk_factor);
    assert_eq!(set.chunk_factor, 16 * 4);
    let ops = |p: &Plan| -> Vec<String> {
        p.gpus
            .iter()
            .flat_map(|g| &g.blocks)
            .flat_map(|b| &b.ops)
            .map(|o| format!("{:?} {:?} {:?} {}", o.kind, o.src, o.dst, o.count))
            .collect()
    };
    assert_eq!(ops(&set), ops(&written));
    // Without the override the header's value stands.
    let plain = plan("algorithms/allreduce_ring.coll", &CompileOptions::default());
    assert_eq!(plain.chunk_factor, 4);
}

fn copies(plan: &Plan) -> usize {
    plan.gpus
        .iter()
        .flat_map(|g| &g.blocks)
        .flat_map(|b| &b.ops)
        .filter(|o| o.kind == coll_compiler::plan::OpKind::Copy)
        .count()
}

fn no_fold() -> CompileOptions {
    let mut o = CompileOptions::default();
    o.lower.fold_copies = false;
    o
}

/// Each fixture of `inputs/fold/` says in its comment what folding must and must not do; its
/// folded dump at n = 3 is snapshotted for review. It compiles at 2, 3 and 4 ranks (debug
/// builds replay every folded plan symbolically, so a wrong fold fails here), and folding
/// never adds a copy.
#[test]
fn copy_folding_fixtures() {
    insta::glob!("inputs/fold/*.coll", |path| {
        let name = display_name(path);
        for n in [2, 3, 4] {
            let folded = compiled(path, n).unwrap_or_else(|| panic!("{name} supports {n}"));
            let plain = compiled_with(path, n, &no_fold()).expect("compiles unfolded");
            let (f, p) = (copies(&folded.lowered.plan), copies(&plain.lowered.plan));
            assert!(f <= p, "{name} at n = {n}: {f} copies folded, {p} without");
            if n == 3 {
                let text = dump::text(&folded.lowered.plan);
                assert_portable(&name, &text);
                insta::assert_snapshot!(text);
            }
        }
    });
}

/// Every in-place algorithm compiles out of place where its collective allows it (all but
/// reducescatter and custom ones, which `inputs/fail/out_of_place_*` cover); its dump at
/// n = 4 is snapshotted. The allreduce algorithms that never combine locally need no copy
/// at all: each reads its input where a copy would have been read.
#[test]
fn in_place_algorithms_compile_out_of_place() {
    let options = coll_tests::out_of_place();
    insta::glob!("../algorithms", "*.coll", |path| {
        let m = coll_lang::load(source(path)).expect("valid");
        if !m.summary.inplace {
            return;
        }
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let c = compiled_with(path, 4, &options).unwrap_or_else(|| panic!("{stem} supports 4"));
        let plan = &c.lowered.plan;
        assert!(!plan.inplace, "{stem}");
        if [
            "allreduce_ring",
            "allreduce_rhd",
            "allreduce_tree",
            "allreduce_hier",
        ]
        .contains(&stem.as_str())
        {
            assert_eq!(copies(plan), 0, "{stem}:\n{}", dump::text(plan));
        }
        let text = dump::text(plan);
        assert_portable(&stem, &text);
        insta::assert_snapshot!(format!("{stem}_out_of_place_n4"), text);
    });
}

/// `coll compile --explain` of two shipped algorithms: the candidates with their rounds,
/// blocks and predicted times, why each block exists, and the critical path with source
/// lines.
#[test]
fn explain_of_shipped_algorithms() {
    for (file, n, topo, name) in [
        ("allreduce_tree.coll", "4", "nvswitch:4", "explain_tree_n4"),
        ("allreduce_hier.coll", "4", "cluster:2x2", "explain_hier_n4"),
    ] {
        let path = format!("../algorithms/{file}");
        let (code, out, err) = coll(&["compile", &path, "--ranks", n, "--topo", topo, "--explain"]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("| chosen |"), "{out}");
        assert!(out.contains(&format!("# ../algorithms/{file}:")), "{out}");
        assert_portable(name, &out);
        insta::assert_snapshot!(name, out);
    }
    // The explanation goes to standard output, so a plan in another format must go to -o.
    let (code, _, err) = coll(&[
        "compile",
        "../algorithms/allreduce_ring.coll",
        "--ranks",
        "4",
        "--explain",
        "--format",
        "json",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.starts_with("error: --explain with --format json needs -o FILE"),
        "{err}"
    );
}
