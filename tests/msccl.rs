//! MSCCL interop: hand-written MSCCL-IR fixtures in `inputs/msccl/` import, validate, replay,
//! are deadlock-free and run on the CPU executor with no wrong element (`*_missing_step.xml`
//! copies, each with one step removed, fail naming the gpu, thread block and step); XML
//! import errors name the element, attribute and `line:col`; export then import gives an
//! equivalent plan, for the fixtures and for every shipped algorithm; damaged XML never
//! panics.

use coll_cli::run_captured;
use coll_compiler::msccl::{self, MscclError};
use coll_compiler::plan::{BufferDecl, Dep, Plan, Slice, ValidPlan};
use coll_compiler::topology::Topology;
use coll_compiler::{CompileOptions, DEFAULT_SLOTS, check, dump, replay};
use coll_executor::cpu::{CpuExecutor, RunOptions};
use coll_executor::dtype::{DType, ReduceOp};
use coll_executor::harness::run_checked;
use coll_lang::builtins::CollectiveKind;
use coll_tests::display_name;
use std::path::{Path, PathBuf};

fn coll(args: &[&str]) -> (u8, String, String) {
    let mut argv = vec!["coll"];
    argv.extend_from_slice(args);
    run_captured(argv)
}

/// The XML fixtures, sorted: `(ok, broken)`.
fn fixtures() -> (Vec<PathBuf>, Vec<PathBuf>) {
    let dir = coll_tests::root().join("tests/inputs/msccl");
    let mut all: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "xml"))
        .collect();
    all.sort();
    all.into_iter().partition(|p| !is_broken(p))
}

fn is_broken(p: &Path) -> bool {
    p.file_stem()
        .is_some_and(|s| s.to_string_lossy().ends_with("_missing_step"))
}

/// The fixture as the CLI sees it from the test crate's folder.
fn rel(path: &Path) -> String {
    let name = display_name(path);
    name.strip_prefix("tests/").unwrap_or(&name).to_string()
}

fn import(path: &Path) -> ValidPlan {
    let text = std::fs::read_to_string(path).expect("readable fixture");
    msccl::import(&text, &display_name(path))
        .unwrap_or_else(|e| panic!("{} should import: {e}", display_name(path)))
}

/// The plan with what MSCCL-IR cannot carry normalised away: names, topology, sources,
/// the scheduler's note, channel kinds, switch groups, protocol overrides; scratch buffers laid end to end in one
/// as export does; dependencies on one block reduced to the latest and sorted.
fn canonical(plan: &Plan) -> Plan {
    let mut p = plan.clone();
    let mut base = vec![0u64; p.buffers.len()];
    let mut scratch = 0;
    for (b, decl) in p.buffers.iter().enumerate().skip(2) {
        base[b] = scratch;
        scratch += decl.chunks;
    }
    p.buffers.truncate(2);
    for b in &mut p.buffers {
        b.name.clear();
    }
    if scratch > 0 {
        p.buffers.push(BufferDecl {
            name: String::new(),
            chunks: scratch,
        });
    }
    p.name.clear();
    p.topology.clear();
    p.sources.clear();
    p.schedule = None;
    let remap = |s: Slice| {
        if s.buffer() >= 2 {
            Slice(2, base[s.buffer() as usize] + s.offset())
        } else {
            s
        }
    };
    for gpu in &mut p.gpus {
        for block in &mut gpu.blocks {
            block.send_via = None;
            block.recv_via = None;
            block.protocol = None;
            for op in &mut block.ops {
                op.source = 0;
                op.group = None;
                op.src = op.src.map(remap);
                op.dst = op.dst.map(remap);
                let mut latest: std::collections::BTreeMap<u32, u32> = Default::default();
                for d in &op.deps {
                    let e = latest.entry(d.block()).or_insert(d.op());
                    *e = (*e).max(d.op());
                }
                op.deps = latest.into_iter().map(|(b, o)| Dep(b, o)).collect();
            }
        }
    }
    p
}

/// Runs `plan` on the CPU over a few dtypes, ops, counts that do not divide into chunks, in
/// and out of place; every element must match the reference.
fn run_matrix(plan: &ValidPlan, what: &str) {
    let exec = CpuExecutor::new(plan.clone(), DEFAULT_SLOTS);
    let reduces = matches!(
        plan.collective.0,
        CollectiveKind::AllReduce | CollectiveKind::ReduceScatter | CollectiveKind::Reduce
    );
    let cases = [
        (DType::F32, ReduceOp::Sum, 1000),
        (DType::F64, ReduceOp::Max, 1003),
        (DType::Bf16, ReduceOp::Min, 77),
        (DType::I32, ReduceOp::Prod, 5),
        (DType::U8, ReduceOp::Sum, 0),
        (DType::F16, ReduceOp::Avg, 9),
        (DType::I64, ReduceOp::Sum, 1),
    ];
    for (dtype, op, count) in cases {
        if op == ReduceOp::Avg && !reduces {
            continue;
        }
        for inplace in [false, true] {
            let o = RunOptions {
                count,
                op,
                ..RunOptions::default()
            };
            let report = run_checked(&exec, dtype, &o, inplace).unwrap_or_else(|e| {
                panic!("{what}: {dtype} {op} count {count} inplace {inplace}: {e}")
            });
            assert_eq!(
                report.wrong,
                Some(0),
                "{what}: {dtype} {op} count {count} inplace {inplace}"
            );
        }
    }
}

#[test]
fn every_fixture_has_a_broken_copy() {
    let (ok, broken) = fixtures();
    assert_eq!(ok.len(), 5, "{ok:?}");
    for p in &ok {
        let stem = p.file_stem().unwrap_or_default().to_string_lossy();
        let copy = p.with_file_name(format!("{stem}_missing_step.xml"));
        assert!(broken.contains(&copy), "{} has no broken copy", p.display());
    }
    assert_eq!(broken.len(), ok.len());
}

/// Each fixture imports, replays to its collective, is deadlock-free and computes the right
/// values on the CPU; its import is snapshotted as a text dump.
#[test]
fn ok_fixtures_verify_and_run() {
    let (ok, _) = fixtures();
    for path in &ok {
        let name = display_name(path);
        let plan = import(path);
        replay::replay(&plan, 0).unwrap_or_else(|e| panic!("{name}: {e}"));
        check::simulate(&plan, DEFAULT_SLOTS).unwrap_or_else(|d| panic!("{name}: {d}"));
        run_matrix(&plan, &name);
        let stem = path.file_stem().unwrap_or_default().to_string_lossy();
        insta::assert_snapshot!(format!("import_{stem}"), dump::text(&plan));
    }
}

#[test]
fn fixtures_through_the_cli() {
    let (ok, _) = fixtures();
    for path in &ok {
        let file = rel(path);
        let (code, out, err) = coll(&["check", &file]);
        assert_eq!(code, 0, "{file}: {err}");
        assert!(out.starts_with(&format!("{file}: ok (")), "{out}");
        let (code, out, err) = coll(&["check", &file, "--ranks", "4"]);
        assert_eq!(code, 0, "{file}: {err}{out}");
        let (code, _, err) = coll(&["check", &file, "--ranks", "3"]);
        assert_eq!(
            code, 2,
            "{file}: a different --ranks is a usage error: {err}"
        );
        assert!(err.contains("--ranks 3"), "{err}");
        let (code, out, err) = coll(&["compile", &file]);
        assert_eq!(code, 0, "{file}: {err}");
        assert!(out.starts_with("plan "), "{out}");
        for inplace in [false, true] {
            let mut args = vec!["run", &file, "--count", "1001", "--dtype", "i32"];
            if inplace {
                args.push("--inplace");
            }
            let (code, out, err) = coll(&args);
            assert_eq!(code, 0, "{file}: {err}{out}");
            assert!(out.contains("#wrong 0"), "{out}");
        }
    }
}

/// The MSCCL import's acceptance line: `coll run ring.xml --count 1000003` reports 0 wrong.
#[test]
fn ring_xml_runs_a_million_and_three() {
    let file = "inputs/msccl/allreduce_ring_4.xml";
    let (code, out, err) = coll(&["run", file, "--count", "1000003"]);
    assert_eq!(code, 0, "{err}{out}");
    assert!(out.contains("count 1000003"), "{out}");
    assert!(out.trim_end().ends_with("#wrong 0"), "{out}");
}

/// Each broken copy is rejected by `coll check` (exit 1) with a message naming the gpu,
/// thread block and step of the XML.
#[test]
fn broken_fixtures_name_gpu_tb_and_step() {
    insta::glob!("inputs/msccl/*_missing_step.xml", |path| {
        let file = rel(path);
        for cmd in ["check", "compile", "run"] {
            let (code, out, err) = coll(&[cmd, &file]);
            assert_eq!(code, 1, "{cmd} {file} should fail:\n{out}{err}");
            assert!(out.is_empty(), "{out}");
            let named = err
                .split(": gpu ")
                .nth(1)
                .is_some_and(|rest| rest.contains(" tb ") && rest.contains(" step "));
            assert!(named, "{cmd} {file}: no gpu/tb/step in\n{err}");
        }
        let (_, _, err) = coll(&["check", &file]);
        insta::assert_snapshot!(err);
    });
}

/// export(import(x)) imports to the same plan (sources aside), and exporting again gives the
/// same bytes.
#[test]
fn fixtures_round_trip() {
    let (ok, _) = fixtures();
    for path in &ok {
        let name = display_name(path);
        let plan = import(path);
        let xml = msccl::export(&plan).unwrap_or_else(|e| panic!("{name}: {e}"));
        let again =
            msccl::import(&xml, "exported.xml").unwrap_or_else(|e| panic!("{name}: {e}\n{xml}"));
        assert_eq!(canonical(&again), canonical(&plan), "{name}:\n{xml}");
        // Same names, so the dumps agree but for the sources.
        let strip = |p: &Plan| {
            let mut p = p.clone();
            p.sources.iter_mut().for_each(String::clear);
            dump::text(&p)
        };
        assert_eq!(strip(&again), strip(&plan), "{name}");
        let xml2 = msccl::export(&again).expect("exports again");
        assert_eq!(xml2, xml, "{name}: export is not a fixpoint");
    }
}

/// Every shipped algorithm at n = 4 exports, imports back to an equivalent plan (copy-sends
/// split into a send and a copy), and that plan replays, is deadlock-free and runs.
#[test]
fn shipped_algorithms_round_trip() {
    for path in coll_tests::coll_files("algorithms") {
        let m =
            coll_lang::load(coll_tests::source(&path)).unwrap_or_else(|d| panic!("{}", d.render()));
        let spec = if coll_tests::cluster_only(&m) {
            "cluster:2x2".to_string()
        } else {
            "nvswitch:4".to_string()
        };
        let topo = Topology::parse(&spec).expect("a preset");
        // MSCCL-IR's thread blocks have one peer a side, so the export lowers without blocks
        // of several peers, as `coll compile --format msccl-xml` does.
        let mut options = CompileOptions::default();
        options.lower.several_peers = false;
        let c = coll_compiler::compile(&m, &topo, &options)
            .unwrap_or_else(|d| panic!("{}", d.render()));
        let plan = &c.lowered.plan;
        let name = display_name(&path);
        if plan.collective.0 == coll_lang::builtins::CollectiveKind::SendRecv {
            // MSCCL-IR has no sendrecv collective: the export says so instead of guessing.
            let err = msccl::export(plan).expect_err("no sendrecv in MSCCL-IR");
            assert!(err.to_string().contains("no sendrecv"), "{err}");
            continue;
        }
        let xml = msccl::export(plan).unwrap_or_else(|e| panic!("{name}: {e}"));
        let back = msccl::import(&xml, &name).unwrap_or_else(|e| panic!("{name}: {e}\n{xml}"));
        // MSCCL-IR has no copy-send: the export writes each as a send and a copy.
        let split = plan.with_copy_sends_split();
        assert_eq!(canonical(&back), canonical(&split), "{name}:\n{xml}");
        replay::replay(&back, 0).unwrap_or_else(|e| panic!("{name}: {e}"));
        check::simulate(&back, DEFAULT_SLOTS).unwrap_or_else(|d| panic!("{name}: {d}"));
        let exec = CpuExecutor::new(back, DEFAULT_SLOTS);
        let o = RunOptions {
            count: 1003,
            ..RunOptions::default()
        };
        let report = run_checked(&exec, DType::F32, &o, false).expect("runs");
        assert_eq!(report.wrong, Some(0), "{name}");
    }
}

/// `coll compile FILE.coll --format msccl-xml -o F`, then `coll check F` and `coll run F`.
#[test]
fn compile_to_msccl_xml_through_the_cli() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("ring.xml");
    let out = out.to_str().expect("utf-8 temp path");
    let (code, stdout, err) = coll(&[
        "compile",
        "../algorithms/allreduce_ring.coll",
        "--ranks",
        "8",
        "--format",
        "msccl-xml",
        "-o",
        out,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(stdout.is_empty(), "{stdout}");
    let xml = std::fs::read_to_string(out).expect("written");
    assert!(
        xml.starts_with("<algo name=\"ring\" proto=\"Simple\""),
        "{xml}"
    );
    assert!(xml.contains("ngpus=\"8\""), "{xml}");
    let (code, stdout, err) = coll(&["check", out]);
    assert_eq!(code, 0, "{err}");
    assert!(
        stdout.contains("ok (allreduce `ring` replayed for n = 8"),
        "{stdout}"
    );
    let (code, stdout, err) = coll(&["run", out, "--count", "100003", "--dtype", "f16"]);
    assert_eq!(code, 0, "{err}{stdout}");
    assert!(stdout.contains("#wrong 0"), "{stdout}");
    // To standard output without -o; XML in, XML out.
    let (code, again, err) = coll(&["compile", out, "--format", "msccl-xml"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(again, xml);
    // A .coll file still needs --ranks.
    let (code, _, err) = coll(&[
        "compile",
        "../algorithms/allreduce_ring.coll",
        "--format",
        "msccl-xml",
    ]);
    assert_eq!(code, 2, "{err}");
}

/// The text dump of the ring fixture exported: what MSCCL's runtime gets.
#[test]
fn export_of_the_ring_is_stable() {
    let plan = import(&coll_tests::root().join("tests/inputs/msccl/allreduce_ring_4.xml"));
    let xml = msccl::export(&plan).expect("exports");
    insta::assert_snapshot!(xml);
}

fn xml_err(xml: &str) -> String {
    match msccl::import(xml, "t.xml") {
        Ok(p) => panic!("should fail:\n{xml}\nimported:\n{}", dump::text(&p)),
        Err(e) => e.to_string(),
    }
}

/// A two-gpu broadcast: gpu 0's thread block 0 runs `step0` (a send) and block 1 copies its
/// input to its output; gpu 1's block 0 runs `step1` (a receive).
fn two_gpu(step0: &str, step1: &str) -> String {
    format!(
        r#"<algo name="t" proto="Simple" nchannels="1" nchunksperloop="1" ngpus="2" coll="broadcast" inplace="0">
  <gpu id="0" i_chunks="1" o_chunks="1" s_chunks="0">
    <tb id="0" send="1" recv="-1" chan="0">
      {step0}
    </tb>
    <tb id="1" send="-1" recv="-1" chan="0">
      <step s="0" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
  <gpu id="1" i_chunks="1" o_chunks="1" s_chunks="0">
    <tb id="0" send="-1" recv="0" chan="0">
      {step1}
    </tb>
  </gpu>
</algo>
"#
    )
}

const SEND: &str = r#"<step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>"#;
const RECV: &str = r#"<step s="0" type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>"#;

#[test]
fn the_small_algorithm_is_fine() {
    let plan = msccl::import(&two_gpu(SEND, RECV), "t.xml").expect("imports");
    replay::replay(&plan, 0).expect("a broadcast from 0");
}

/// Bad XML gives a message naming the element, the attribute and line:col.
#[test]
fn bad_xml_messages() {
    let cases: Vec<(&str, String)> = vec![
        ("not_xml", "<algo name=\"t\"".to_string()),
        (
            "unclosed_element",
            two_gpu(SEND, RECV).replace("    </tb>\n  </gpu>\n</algo>", "  </gpu>\n</algo>"),
        ),
        ("wrong_root", "<algorithm/>".to_string()),
        (
            "missing_attribute",
            two_gpu(SEND, RECV).replace(" proto=\"Simple\"", ""),
        ),
        (
            "unknown_type",
            two_gpu(&SEND.replace("\"s\"", "\"sx\""), RECV),
        ),
        (
            "bad_buffer",
            two_gpu(&SEND.replace("srcbuf=\"i\"", "srcbuf=\"input\""), RECV),
        ),
        (
            "peer_out_of_range",
            two_gpu(SEND, RECV).replace("send=\"1\"", "send=\"2\""),
        ),
        (
            "own_peer",
            two_gpu(SEND, RECV).replace("send=\"1\"", "send=\"0\""),
        ),
        (
            "offset_out_of_range",
            two_gpu(&SEND.replace("srcoff=\"0\"", "srcoff=\"1\""), RECV),
        ),
        (
            "negative_offset",
            two_gpu(SEND, &RECV.replace("dstoff=\"0\"", "dstoff=\"-1\"")),
        ),
        (
            "count_too_large",
            two_gpu(&SEND.replace("cnt=\"1\"", "cnt=\"72\""), RECV),
        ),
        (
            "not_an_integer",
            two_gpu(&SEND.replace("cnt=\"1\"", "cnt=\"one\""), RECV),
        ),
        (
            "step_numbering",
            two_gpu(&SEND.replace("s=\"0\"", "s=\"1\""), RECV),
        ),
        (
            "send_without_peer",
            two_gpu(SEND, &RECV.replace("\"r\"", "\"s\"")),
        ),
        (
            "missing_gpu",
            two_gpu(SEND, RECV).replace("ngpus=\"2\"", "ngpus=\"3\""),
        ),
        (
            "duplicate_gpu",
            two_gpu(SEND, RECV).replace("<gpu id=\"1\"", "<gpu id=\"0\""),
        ),
        (
            "tb_gap",
            two_gpu(SEND, RECV).replace("<tb id=\"1\"", "<tb id=\"2\""),
        ),
        (
            "channel_out_of_range",
            two_gpu(SEND, RECV).replace(
                "chan=\"0\">\n      <step s=\"0\" type=\"s\"",
                "chan=\"1\">\n      <step s=\"0\" type=\"s\"",
            ),
        ),
        (
            "unknown_collective",
            two_gpu(SEND, RECV).replace("coll=\"broadcast\"", "coll=\"gather\""),
        ),
        (
            "unknown_protocol",
            two_gpu(SEND, RECV).replace("proto=\"Simple\"", "proto=\"LL64\""),
        ),
        (
            "chunks_do_not_divide",
            two_gpu(SEND, RECV)
                .replace("coll=\"broadcast\"", "coll=\"allgather\"")
                .replace("nchunksperloop=\"1\"", "nchunksperloop=\"3\""),
        ),
        (
            "i_chunks_inconsistent",
            two_gpu(SEND, RECV).replace(
                "i_chunks=\"1\" o_chunks=\"1\" s_chunks=\"0\">\n    <tb id=\"0\" send=\"-1\"",
                "i_chunks=\"2\" o_chunks=\"1\" s_chunks=\"0\">\n    <tb id=\"0\" send=\"-1\"",
            ),
        ),
        (
            "dep_on_missing_block",
            two_gpu(
                SEND,
                &RECV.replace("depid=\"-1\" deps=\"-1\"", "depid=\"3\" deps=\"0\""),
            ),
        ),
        (
            "dep_on_missing_step",
            two_gpu(
                &SEND.replace("depid=\"-1\" deps=\"-1\"", "depid=\"1\" deps=\"4\""),
                RECV,
            ),
        ),
        (
            "dep_never_signalled",
            two_gpu(
                &SEND.replace("depid=\"-1\" deps=\"-1\"", "depid=\"1\" deps=\"0\""),
                RECV,
            ),
        ),
        (
            "nop_without_dependency",
            two_gpu(
                &format!(
                    "<step s=\"0\" type=\"nop\" srcbuf=\"i\" srcoff=\"-1\" dstbuf=\"o\" dstoff=\"-1\" cnt=\"0\" depid=\"-1\" deps=\"-1\" hasdep=\"0\"/>\n      {}",
                    SEND.replace("s=\"0\"", "s=\"1\"")
                ),
                RECV,
            ),
        ),
        (
            "nop_then_step_without_dependency",
            two_gpu(
                &format!(
                    "<step s=\"0\" type=\"nop\" srcbuf=\"i\" srcoff=\"-1\" dstbuf=\"o\" dstoff=\"-1\" cnt=\"0\" depid=\"1\" deps=\"0\" hasdep=\"0\"/>\n      {}",
                    SEND.replace("s=\"0\"", "s=\"1\"")
                ),
                RECV,
            ),
        ),
        ("unmatched_send", two_gpu(SEND, "")),
    ];
    for (name, xml) in cases {
        let msg = xml_err(&xml);
        assert!(msg.contains("t.xml:"), "{name}: {msg}");
        insta::assert_snapshot!(format!("bad_xml_{name}"), msg);
    }
}

/// How dependencies resolve: a wait for a step is a wait for the first step at or after it
/// with hasdep="1" (the runtime's flags), a nop adds its dependency to the next real step,
/// and a wait on the block's own earlier step is dropped.
#[test]
fn dependencies_resolve_like_the_runtime() {
    let xml = r#"<algo name="t" proto="Simple" nchannels="1" nchunksperloop="1" ngpus="2" coll="broadcast" inplace="0">
  <gpu id="0" i_chunks="1" o_chunks="1" s_chunks="1">
    <tb id="0" send="1" recv="-1" chan="0">
      <step s="0" type="nop" srcbuf="i" srcoff="-1" dstbuf="o" dstoff="-1" cnt="0" depid="1" deps="0" hasdep="0"/>
      <step s="1" type="s" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="1" deps="1" hasdep="0"/>
    </tb>
    <tb id="1" send="-1" recv="-1" chan="0">
      <step s="0" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="cpy" srcbuf="i" srcoff="0" dstbuf="s" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="1"/>
    </tb>
  </gpu>
  <gpu id="1" i_chunks="1" o_chunks="1" s_chunks="0">
    <tb id="0" send="-1" recv="0" chan="0">
      <step s="0" type="r" srcbuf="i" srcoff="-1" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="1"/>
      <step s="1" type="cpy" srcbuf="o" srcoff="0" dstbuf="i" dstoff="0" cnt="1" depid="0" deps="0" hasdep="0"/>
    </tb>
  </gpu>
</algo>
"#;
    let plan = msccl::import(xml, "t.xml").unwrap_or_else(|e| panic!("{e}"));
    let send = &plan.gpus[0].blocks[0].ops[0];
    // The nop's wait for tb 1 step 0 (hasdep 0) is a wait for step 1; merged with the step's own.
    assert_eq!(send.deps[..], [Dep(1, 1)], "{}", dump::text(&plan));
    assert!(plan.sources[send.source as usize].ends_with("t.xml:5:7: gpu 0 tb 0 step 1"));
    // Waiting for its own block's earlier step is program order.
    assert!(plan.gpus[1].blocks[0].ops[1].deps.is_empty());
    assert_eq!(plan.buffers.len(), 3);
    assert_eq!(plan.buffers[2].name, "scratch");
    replay::replay(&plan, 0).expect("a broadcast");
    // Waiting for a later step of its own block never ends.
    let stuck = xml.replace(
        r#"<step s="0" type="r" srcbuf="i" srcoff="-1" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1""#,
        r#"<step s="0" type="r" srcbuf="i" srcoff="-1" dstbuf="o" dstoff="0" cnt="1" depid="0" deps="0""#,
    );
    insta::assert_snapshot!("dep_on_itself", xml_err(&stuck));
}

#[test]
fn placements_and_spellings() {
    let both = two_gpu(SEND, RECV).replace("inplace=\"0\"", "inplace=\"1\" outofplace=\"1\"");
    let plans = msccl::import_all(&both, "t.xml").expect("imports");
    assert_eq!(
        plans.iter().map(|p| p.inplace).collect::<Vec<_>>(),
        vec![false, true]
    );
    let only = two_gpu(SEND, RECV).replace("inplace=\"0\"", "inplace=\"1\"");
    let plans = msccl::import_all(&only, "t.xml").expect("imports");
    assert_eq!(plans.len(), 1);
    assert!(plans[0].inplace);
    // LL128 runs as simple here; msccl-tools' reduce_scatter spelling is read.
    let ll128 = two_gpu(SEND, RECV).replace("proto=\"Simple\"", "proto=\"LL128\"");
    assert!(msccl::import(&ll128, "t.xml").is_ok());
    let plan =
        import(&coll_tests::root().join("tests/inputs/msccl/allreduce_ring_4_outofplace.xml"));
    assert_eq!(plan.protocol.name(), "ll");
    assert_eq!(plan.chunk_factor, 8);
}

#[test]
fn export_refuses_what_msccl_cannot_run() {
    let mut plan =
        import(&coll_tests::root().join("tests/inputs/msccl/allreduce_ring_4.xml")).into_inner();
    let mut sendrecv = plan.clone();
    sendrecv.collective = coll_compiler::plan::Collective(CollectiveKind::SendRecv);
    let e = msccl::export(&sendrecv).expect_err("no sendrecv in MSCCL");
    assert!(matches!(e, MscclError::Export { .. }), "{e}");
    insta::assert_snapshot!("export_sendrecv", e.to_string());
    // Counts of 100 chunks: MSCCL's steps move at most 71.
    plan.chunk_factor *= 100;
    for b in &mut plan.buffers {
        b.chunks *= 100;
    }
    for op in plan
        .gpus
        .iter_mut()
        .flat_map(|g| &mut g.blocks)
        .flat_map(|b| &mut b.ops)
    {
        op.count *= 100;
        op.src = op.src.map(|s| Slice(s.buffer(), s.offset() * 100));
        op.dst = op.dst.map(|s| Slice(s.buffer(), s.offset() * 100));
    }
    replay::replay(&plan, 0).expect("still an allreduce");
    let e = msccl::export(&plan).expect_err("counts too large");
    insta::assert_snapshot!("export_count_too_large", e.to_string());
}

/// Replaces the `which`-th integer in `text` with `value`, deletes the `which`-th line, or
/// cuts the text short.
fn mutate(text: &str, kind: u8, which: usize, value: i64) -> String {
    match kind % 3 {
        0 => {
            let mut out = String::with_capacity(text.len());
            let mut count = 0;
            let mut rest = text;
            while let Some(i) = rest.find(|c: char| c.is_ascii_digit()) {
                let end = rest[i..]
                    .find(|c: char| !c.is_ascii_digit())
                    .map_or(rest.len(), |e| i + e);
                out.push_str(&rest[..i]);
                if count == which {
                    out.push_str(&value.to_string());
                } else {
                    out.push_str(&rest[i..end]);
                }
                count += 1;
                rest = &rest[end..];
            }
            out.push_str(rest);
            out
        }
        1 => {
            let lines: Vec<&str> = text.lines().collect();
            let drop = which % lines.len().max(1);
            lines
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != drop)
                .map(|(_, l)| *l)
                .collect::<Vec<_>>()
                .join("\n")
        }
        _ => text.chars().take(which % text.len().max(1)).collect(),
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// Damaged XML never makes the import, the checks, export or the executor panic.
    #[test]
    fn mutated_xml_never_panics(file in 0usize..5, kind in 0u8..3, which in 0usize..600, value in -3i64..80) {
        let (ok, _) = fixtures();
        let path = &ok[file % ok.len()];
        let text = std::fs::read_to_string(path).expect("readable fixture");
        let xml = mutate(&text, kind, which, value);
        if let Ok(plans) = msccl::import_all(&xml, "m.xml") {
            for plan in plans {
                let _ = replay::replay(&plan, 0);
                let _ = check::simulate(&plan, DEFAULT_SLOTS);
                let _ = dump::text(&plan);
                let _ = msccl::export(&plan);
                let exec = CpuExecutor::new(plan, DEFAULT_SLOTS);
                let o = RunOptions {
                    count: 7,
                    timeout: std::time::Duration::from_millis(50),
                    ..RunOptions::default()
                };
                let _ = run_checked(&exec, DType::F32, &o, false);
            }
        }
    }
}

/// MSCCL-IR says nothing of transports: imported alone, every connection is through an
/// NVSwitch; put on a cluster, the connections between its nodes go over the network and
/// the others stay on the switch, in the library and through `coll compile --topo`; a
/// topology too small for the plan is an error naming both.
#[test]
fn imported_plans_take_their_connections_from_the_topology() {
    use coll_compiler::plan::Via;
    let path = coll_tests::root().join("tests/inputs/msccl/allreduce_ring_4.xml");
    let plan = import(&path);
    let vias = |p: &Plan| {
        let mut v = Vec::new();
        for g in &p.gpus {
            for b in &g.blocks {
                if let (Some(q), Some(via)) = (b.send_peer, b.send_via) {
                    v.push((g.rank, q, via));
                }
                if let (Some(q), Some(via)) = (b.recv_peer, b.recv_via) {
                    v.push((q, g.rank, via));
                }
            }
        }
        v
    };
    assert!(vias(&plan).iter().all(|&(.., v)| v == Via::Switch));
    let topo = Topology::parse("cluster:2x2").expect("a preset");
    let on = msccl::on_topology(plan.clone(), &topo).expect("fits");
    assert_eq!(on.topology, "cluster:2x2");
    let seen = vias(&on);
    assert!(!seen.is_empty());
    for (from, to, via) in seen {
        let want = if from / 2 == to / 2 {
            Via::Switch
        } else {
            Via::Net
        };
        assert_eq!(via, want, "{from} -> {to}");
    }
    let small = Topology::parse("nvswitch:2").expect("a preset");
    let e = msccl::on_topology(plan, &small).expect_err("too small");
    assert!(
        e.to_string().contains("nvswitch:2 has 2 ranks, the plan 4"),
        "{e}"
    );
    // The CLI's text dump says so too.
    let (code, out, err) = coll(&["compile", &rel(&path), "--topo", "cluster:2x2"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("(net)"), "{out}");
    let (code, out, err) = coll(&["compile", &rel(&path)]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("(net)"), "{out}");
    // `coll check` of the file on a topology needs no --ranks (the file has its count); a
    // topology of another size is an error naming both counts.
    let (code, out, err) = coll(&["check", &rel(&path), "--topo", "cluster:2x2"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(": ok"), "{out}");
    let (code, _, err) = coll(&["check", &rel(&path), "--topo", "cluster:2x4"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("allreduce_ring_4.xml has 4 ranks but topology `cluster:2x4` has 8 ranks"),
        "{err}"
    );
    let (code, _, err) = coll(&[
        "check",
        "../algorithms/allreduce_ring.coll",
        "--topo",
        "nvswitch:4",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--topo needs --ranks for .coll files"),
        "{err}"
    );
}
