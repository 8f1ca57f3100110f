//! Crafted cases, one or more for every bound `coll` promises (README "Limits"): source size,
//! error caps, "did you mean" bounds, nesting, cell limits of programs, plans and MSCCL-IR,
//! the race and buffer-size checks of plans, and the numeric flags of the command line. Big
//! inputs are generated here rather than committed. The small committed ones under
//! `tests/inputs/hostile/`, and every other input file of the test suite, run as they are.

use crate::runner::{Case, INPUT};
use std::path::Path;

fn coll(name: &str, args: &[&str], src: impl Into<Vec<u8>>) -> Case {
    Case::new(format!("crafted/{name}"), args, Some(("coll", src.into())))
}

fn file(name: &str, ext: &'static str, args: &[&str], bytes: impl Into<Vec<u8>>) -> Case {
    Case::new(format!("crafted/{name}"), args, Some((ext, bytes.into())))
}

fn cli(name: &str, args: &[&str]) -> Case {
    Case::new(format!("crafted/cli/{name}"), args, None)
}

const HEADER: &str = "collective allreduce big(n) {\n    chunks n;\n    inplace;\n}\n";

fn ring() -> String {
    std::fs::read_to_string(coll_tests::root().join("algorithms/allreduce_ring.coll"))
        .expect("the ring algorithm")
}

fn fixture(rel: &str) -> String {
    std::fs::read_to_string(coll_tests::root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// A plan compiled by the suite, with one top-level field or one buffer's size replaced.
fn plan_with(plan: &serde_json::Value, edit: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
    let mut v = plan.clone();
    edit(&mut v);
    serde_json::to_vec(&v).expect("a Value serialises")
}

/// Every crafted case; `plan` is the 4-rank ring allreduce as a JSON plan.
pub fn cases(plan: &serde_json::Value) -> Vec<Case> {
    let ring_path = coll_tests::root().join("algorithms/allreduce_ring.coll");
    let ring_path = ring_path.to_str().expect("a UTF-8 workspace path");
    let bcast = coll_tests::root().join("algorithms/broadcast_ring.coll");
    let bcast = bcast.to_str().expect("a UTF-8 workspace path");
    let check = ["check", INPUT];
    let check4 = ["check", INPUT, "--ranks", "4"];
    let mut v = vec![
        // Source size: 16 MiB and one byte, refused by its size; 10 MB of repeated programs,
        // read and refused as duplicate headers with capped diagnostics.
        coll("source_over_16mib", &check, vec![b' '; (16 << 20) + 1]),
        coll("ten_mb_of_programs", &check4, ring().repeat(10_000_000 / ring().len() + 1)),
        coll("ten_mb_of_programs_fmt", &["fmt", INPUT], ring().repeat(10_000_000 / ring().len() + 1)),
        coll("directory_as_source", &["check", "."], ""),
        // Names: one unknown identifier of 200 KB; 20 000 chained lets; "did you mean" over
        // 5000 candidates of 64 characters with a near miss of 64 and of 65.
        coll(
            "identifier_200kb",
            &check4,
            format!("{HEADER}copy input[0][{}] -> input[1];\n", "q".repeat(200_000)),
        ),
        coll("let_chain_20000", &check4, {
            let mut s = format!("{HEADER}let y0 = 1;\n");
            for i in 1..20_000 {
                s.push_str(&format!("let y{i} = y{};\n", i - 1));
            }
            s
        }),
        coll("let_unknown_20000", &check4, {
            let mut s = HEADER.to_string();
            for i in 0..20_000 {
                s.push_str(&format!("let x{i} = y{i};\n"));
            }
            s
        }),
        coll("did_you_mean_5000_candidates", &check4, {
            let mut s = HEADER.to_string();
            for i in 0..5000 {
                s.push_str(&format!("let {}{i:04} = 1;\n", "a".repeat(60)));
            }
            s.push_str(&format!("let z = {}0000x;\nlet w = {}0000;\n", "a".repeat(60), "a".repeat(59)));
            s
        }),
        // Error caps: 100 000 syntax errors and 100 000 type errors.
        coll("syntax_errors_100000", &check, format!("{HEADER}{}", "let = ;\n".repeat(100_000))),
        coll("type_errors_100000", &check, format!("{HEADER}{}", "copy input[x][0] -> input[1];\n".repeat(100_000))),
        // Nesting.
        coll("parens_1000000", &check, format!("{HEADER}let x = {}1{};\n", "(".repeat(1_000_000), ")".repeat(1_000_000))),
                coll("unary_minus_1000000", &check, format!("{HEADER}let x = {}1;\n", "-".repeat(1_000_000))),
        coll("binary_chain_1000000", &check4, format!("{HEADER}let x = 1{};\n", " + 1".repeat(1_000_000))),
        // Cell limits of programs.
        coll("chunks_100000000", &check4, ring().replace("chunks n;", "chunks 100000000;")),
        coll("chunks_n_pow_4_at_64", &["check", INPUT, "--ranks", "64"], ring().replace("chunks n;", "chunks n * n * n * n;")),
        coll("chunks_2_pow_62", &check4, ring().replace("chunks n;", "chunks 1 << 62;")),
        coll("chunks_negative", &check4, ring().replace("chunks n;", "chunks 0 - 5;")),
        coll("instances_1000000", &check4, ring().replace("chunks n;", "chunks n;\n    instances 1000000;")),
        coll("instances_65536_flag", &["check", INPUT, "--ranks", "4", "--instances", "65536"], ring()),
        coll("pipeline_1000000", &check4, ring().replace("chunks n;", "chunks n;\n    pipeline 1000000;")),
                        coll("shift_by_64", &check4, format!("{HEADER}let x = 1 << 64;\nlet y = 1 << 9223372036854775807;\n")),
        coll("recursion", &check4, format!("{HEADER}fn f(k) -> int {{ return f(k + 1); }}\nlet x = f(0);\n")),
        // Plan size limits.
        file("plan_chunk_factor_2_pow_32", "json", &check, plan_with(plan, |v| v["chunk_factor"] = (1u64 << 32).into())),
        file("plan_chunk_factor_2_pow_63", "json", &["run", INPUT, "--count", "1"], plan_with(plan, |v| v["chunk_factor"] = (1u64 << 63).into())),
        file("plan_chunk_factor_0", "json", &["run", INPUT, "--count", "1"], plan_with(plan, |v| v["chunk_factor"] = 0.into())),
        file("plan_buffer_2_pow_28", "json", &check, plan_with(plan, |v| v["buffers"][0]["chunks"] = (1u64 << 28).into())),
        file("plan_buffer_2_pow_63", "json", &["run", INPUT, "--count", "1"], plan_with(plan, |v| v["buffers"][1]["chunks"] = (1u64 << 63).into())),
        file("plan_ranks_65537", "json", &check, plan_with(plan, |v| v["ranks"] = 65537.into())),
        file("plan_input_too_small", "json", &["run", INPUT, "--count", "3"], plan_with(plan, |v| v["buffers"][0]["chunks"] = 1.into())),
        file("plan_sources_1000000", "json", &check, plan_with(plan, |v| {
            v["sources"] = vec![serde_json::Value::from("x.coll:1:1"); 1_000_000].into()
        })),
        file("plan_deep_nesting", "json", &check, format!("{}1{}", "[".repeat(1_000_000), "]".repeat(1_000_000))),
        file("plan_empty", "json", &check, ""),
        file("plan_not_utf8", "json", &check, b"{\"version\": 1, \"name\": \"\xff\"}".to_vec()),
        // MSCCL-IR size limits and entity tricks.
        file(
            "msccl_nchunksperloop_268435456",
            "xml",
            &check,
            fixture("tests/inputs/msccl/allreduce_ring_4.xml").replace("nchunksperloop=\"4\"", "nchunksperloop=\"268435456\""),
        ),
        file(
            "msccl_i_chunks_2_pow_40",
            "xml",
            &check,
            fixture("tests/inputs/msccl/allreduce_ring_4.xml").replacen("i_chunks=\"4\"", "i_chunks=\"1099511627776\"", 1),
        ),
        file(
            "msccl_ngpus_1000000",
            "xml",
            &check,
            fixture("tests/inputs/msccl/allreduce_ring_4.xml").replace("ngpus=\"4\"", "ngpus=\"1000000\""),
        ),
        file(
            "msccl_200000_unknown_attributes",
            "xml",
            &check,
            fixture("tests/inputs/msccl/allreduce_ring_4.xml").replacen(
                "<algo ",
                &format!("<algo {}", (0..200_000).map(|i| format!("u{i}=\"1\" ")).collect::<String>()),
                1,
            ),
        ),
        file(
            "msccl_100000_steps",
            "xml",
            &check,
            fixture("tests/inputs/msccl/allreduce_ring_4.xml").replacen(
                "<step s=\"0\"",
                &("<step s=\"0\" type=\"nop\" srcbuf=\"i\" srcoff=\"-1\" dstbuf=\"o\" dstoff=\"-1\" cnt=\"0\" depid=\"-1\" deps=\"-1\" hasdep=\"0\"/>\n".repeat(100_000) + "<step s=\"0\""),
                1,
            ),
        ),
        file(
            "msccl_billion_laughs",
            "xml",
            &check,
            format!(
                "<?xml version=\"1.0\"?>\n<!DOCTYPE algo [\n<!ENTITY a \"aaaaaaaaaa\">\n{}]>\n{}",
                (b'b'..=b'k')
                    .map(|c| format!("<!ENTITY {} \"{}\">\n", c as char, format!("&{};", (c - 1) as char).repeat(10)))
                    .collect::<String>(),
                fixture("tests/inputs/msccl/allreduce_ring_4.xml").replacen("name=\"allreduce_ring_4\"", "name=\"&k;\"", 1)
            ),
        ),
        // Command-line bounds.
        cli("count_2_pow_63", &["run", ring_path, "--ranks", "2", "--count", "9223372036854775808"]),
        cli("count_1t_over_memory", &["run", ring_path, "--ranks", "2", "--count", "1099511627776"]),
        cli("timeout_1e300", &["run", ring_path, "--ranks", "2", "--timeout", "1e300"]),
        cli("timeout_tiny", &["run", ring_path, "--ranks", "2", "--count", "1", "--timeout", "1e-300"]),
        cli("ranks_4096_run", &["run", ring_path, "--ranks", "4096"]),
        cli("ranks_65537", &["check", ring_path, "--ranks", "65537"]),
        cli("ranks_0", &["check", ring_path, "--ranks", "0"]),
        cli("root_2_pow_32_plus_1_check", &["check", bcast, "--ranks", "4", "--root", "4294967297"]),
        cli("root_2_pow_32_plus_1_run", &["run", bcast, "--ranks", "4", "--root", "4294967297", "--count", "8"]),
        cli("root_2_pow_32_plus_1_allreduce", &["check", ring_path, "--ranks", "4", "--root", "4294967297"]),
        cli("inject_stall_99", &["run", ring_path, "--ranks", "4", "--inject-stall", "99"]),
        cli("inject_stall_times_out", &["run", ring_path, "--ranks", "4", "--count", "8", "--inject-stall", "2", "--timeout", "0.2"]),
        cli("iters_2_pow_64", &["run", ring_path, "--ranks", "2", "--count", "1", "--iters", "18446744073709551616"]),
        cli("topo_cluster_huge", &["check", ring_path, "--ranks", "4", "--topo", "cluster:4294967296x4294967296"]),
        cli("topo_unknown", &["check", ring_path, "--ranks", "4", "--topo", "zz:4"]),
        cli("topo_missing_file", &["check", ring_path, "--ranks", "4", "--topo", "no/such/topo.json"]),
        cli("auto_size_huge", &["compile", "--auto", "--collective", "allreduce", "--size", "99999999999G", "--ranks", "4"]),
        cli("auto_ranks_65536", &["compile", "--auto", "--collective", "alltoall", "--size", "1K", "--ranks", "65536"]),
        cli("instances_2_pow_32", &["check", ring_path, "--ranks", "4", "--instances", "4294967296"]),
    ];
    // Every other input file of the test suite, as it is.
    for dir in [
        "tests/inputs/hostile",
        "tests/inputs/err",
        "tests/inputs/fail",
        "tests/inputs/ok",
        "tests/inputs/fold",
        "tests/inputs/race",
        "tests/inputs/plans",
    ] {
        v.extend(inputs_of(dir));
    }
    for topo in files_of("tests/inputs/topo") {
        let t = topo.to_str().expect("a UTF-8 workspace path").to_string();
        let name = format!(
            "corpus/topo/{}",
            topo.file_name()
                .map(|s| s.to_string_lossy())
                .unwrap_or_default()
        );
        v.push(Case::new(
            name,
            &["check", ring_path, "--ranks", "4", "--topo", &t],
            None,
        ));
    }
    v
}

fn files_of(dir: &str) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(coll_tests::root().join(dir))
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    files
}

/// `check` (and for sources `check --ranks 4`) of every file in `dir`.
fn inputs_of(dir: &str) -> Vec<Case> {
    let mut out = Vec::new();
    for p in files_of(dir) {
        let Some(ext) = p.extension().and_then(|e| e.to_str()) else {
            continue;
        };
        let ext: &'static str = match ext {
            "coll" => "coll",
            "json" => "json",
            "xml" => "xml",
            _ => continue,
        };
        let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let stem = Path::new(dir)
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let file = p
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        out.push(Case::new(
            format!("corpus/{stem}/{file}"),
            &["check", INPUT],
            Some((ext, bytes.clone())),
        ));
        // A source's own `// check: ARGS` line (the arguments its test uses), else 4 ranks.
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let given = text.lines().find_map(|l| l.strip_prefix("// check: "));
        let more: Vec<&str> = match (ext, given) {
            ("coll", Some(args)) => ["check", INPUT]
                .into_iter()
                .chain(args.split_whitespace())
                .collect(),
            ("coll", None) => vec!["check", INPUT, "--ranks", "4"],
            _ => vec!["run", INPUT, "--count", "5", "--timeout", "5"],
        };
        out.push(Case::new(
            format!("corpus/{stem}/{file}/more"),
            &more,
            Some((ext, bytes.clone())),
        ));
    }
    out
}

/// Inputs at the compiler's work limits (ops, steps, rank count, excerpt width), once
/// bugs: each is run by a test of `hostile.rs` of its own, which also checks the error it
/// gives, so they are not among [`cases`].
pub fn limit_cases() -> Vec<Case> {
    let check = ["check", INPUT];
    let check4 = ["check", INPUT, "--ranks", "4"];
    let ring_path = coll_tests::root().join("algorithms/allreduce_ring.coll");
    let ring_path = ring_path.to_str().expect("a UTF-8 workspace path");
    vec![
        cli("ranks_4096_check", &["check", ring_path, "--ranks", "4096"]),
        coll(
            "default_step_limit",
            &check4,
            fixture("tests/inputs/fail/step_limit.coll"),
        ),
        coll(
            "chunks_2_pow_63_alltoall",
            &check4,
            fixture("algorithms/alltoall.coll").replace("chunks 1;", "chunks 9223372036854775807;"),
        ),
        coll(
            "loop_10_pow_12",
            &check4,
            format!("{HEADER}for i in 0..1000000000000 {{ copy input[0][0] -> input[1]; }}\n"),
        ),
        coll(
            "nested_loops_10_pow_18",
            &check4,
            format!(
                "{HEADER}for a in 0..1000000 {{ for b in 0..1000000 {{ for c in 0..1000000 {{ copy input[0][0] -> input[1]; }} }} }}\n"
            ),
        ),
        coll(
            "unclosed_braces_1000000",
            &check,
            format!("{HEADER}{}", "for i in 0..1 {".repeat(1_000_000)),
        ),
    ]
}
