//! Embedding: checked plans equal what `compile` gives, failures name their `.coll` line,
//! and the run-time side refuses what was not embedded.

use super::*;
use crate::topology::Topology;

/// The compiler crate's directory: `../algorithms/...` names a shipped algorithm from it.
fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

const RING: &str = "../algorithms/allreduce_ring.coll";

/// Ring allreduce without its allgather half: the proof fails at the reduce (line 9, col 9).
const HALF_RING: &str = "\
collective allreduce ring(n) {
    chunks n;
    inplace;
    ranks n >= 2;
}

for s in 0..n - 1 {
    for r in 0..n {
        reduce input[r][(r - s - 1) % n] -> input[(r + 1) % n];
    }
}
";

/// What `coll check FILE --ranks N` compiles: the file named as given, `nvswitch:N`, the
/// default options.
fn direct_plan(dir: &Path, file: &str, n: u32) -> Plan {
    let bytes = std::fs::read(dir.join(file)).expect("read");
    let module = coll_lang::load_bytes(file, bytes).expect("load");
    let topo = Topology::parse(&format!("nvswitch:{n}")).expect("topology");
    compile(&module, &topo, &CompileOptions::default())
        .expect("compile")
        .into_plan()
        .into_inner()
}

fn rejected(r: Result<Vec<Checked>, EmbedError>) -> Vec<Failure> {
    match r {
        Err(EmbedError::Rejected(f)) => f,
        other => panic!("expected rejected programs, got {other:?}"),
    }
}

fn dir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).expect("write");
    }
    dir
}

/// A constant as the generated file defines it, from owned strings.
fn leak(c: &Checked) -> EmbeddedProgram {
    let plans: Vec<(u32, &'static str)> = c
        .plans
        .iter()
        .map(|(n, p)| (*n, &*Box::leak(p.to_json().into_boxed_str())))
        .collect();
    EmbeddedProgram::new(
        Box::leak(c.file.clone().into_boxed_str()),
        Box::leak(c.source.clone().into_boxed_str()),
        Box::leak(plans.into_boxed_slice()),
    )
}

#[test]
fn good_program_plans_equal_compile_and_round_trip() {
    let programs = Programs::new().program(RING).ranks([8, 2, 4, 2]);
    let checked = programs.check(crate_dir()).expect("ring checks");
    assert_eq!(checked.len(), 1);
    let c = &checked[0];
    assert_eq!(c.name, "ALLREDUCE_RING");
    assert_eq!(c.what, "allreduce `ring`");
    assert_eq!(
        c.source,
        std::fs::read_to_string(crate_dir().join(RING)).expect("read")
    );
    let counts: Vec<u32> = c.plans.iter().map(|(n, _)| *n).collect();
    assert_eq!(counts, [2, 4, 8]);
    for (n, plan) in &c.plans {
        assert_eq!(*plan, direct_plan(crate_dir(), RING, *n), "n = {n}");
        assert_eq!(plan.ranks, *n);
        assert_eq!(plan.topology, format!("nvswitch:{n}"));
    }

    let embedded = leak(c);
    assert_eq!(embedded.file(), RING);
    assert_eq!(embedded.ranks().collect::<Vec<_>>(), [2, 4, 8]);
    for (n, plan) in &c.plans {
        assert_eq!(*embedded.plan(*n).expect("embedded plan"), *plan);
    }

    // The generated file holds the same JSON, and the constant and the list.
    let out = tempfile::tempdir().expect("tempdir");
    let path = programs.try_emit_to(crate_dir(), out.path()).expect("emit");
    assert_eq!(path, out.path().join(GENERATED_FILE));
    let code = std::fs::read_to_string(&path).expect("generated file");
    assert!(code.contains("pub const ALLREDUCE_RING: ::coll_compiler::embed::EmbeddedProgram"));
    for (n, plan) in &c.plans {
        assert!(
            code.contains(&format!("({n}, {:?}),", plan.to_json())),
            "n = {n}"
        );
    }
    assert!(code.contains(
        "pub const COLL_PROGRAMS: &[::coll_compiler::embed::EmbeddedProgram] = &[ALLREDUCE_RING];"
    ));
}

#[test]
fn unknown_rank_count_is_refused_by_name() {
    let checked = Programs::new()
        .program(RING)
        .ranks([2, 4])
        .check(crate_dir())
        .expect("ring checks");
    let embedded = leak(&checked[0]);
    let err = embedded.plan(3).expect_err("3 ranks were not embedded");
    assert!(matches!(
        &err,
        EmbedError::UnknownRanks { ranks: 3, available, .. } if *available == [2, 4]
    ));
    assert_eq!(
        err.to_string(),
        "../algorithms/allreduce_ring.coll has no embedded plan for 3 ranks; it has plans for 2, 4 ranks"
    );
}

#[test]
fn invalid_embedded_json_is_a_plan_error() {
    let bad = EmbeddedProgram::new("x.coll", "", &[(2, "{\"version\": 1}")]);
    let err = bad.plan(2).expect_err("not a plan");
    assert!(matches!(err, EmbedError::Plan { ranks: 2, .. }));
    assert!(err.to_string().starts_with(
        "the embedded plan of x.coll for 2 ranks does not load: plan is not valid JSON"
    ));
}

#[test]
fn failed_proof_names_the_line_for_each_rank_count() {
    let dir = dir_with(&[("half.coll", HALF_RING)]);
    // (For 2 ranks the first wrong chunk is one nothing writes: that names the header.)
    let programs = Programs::new().program("half.coll").ranks([4, 8]);
    let failures = rejected(programs.check(dir.path()));
    assert_eq!(failures.len(), 2);
    for (f, n) in failures.iter().zip([4, 8]) {
        assert_eq!(f.file, "half.coll");
        assert_eq!(f.target, Some((n, format!("nvswitch:{n}"))));
        assert_eq!(f.lines.len(), 1);
        assert!(
            f.lines[0].starts_with("half.coll:9:9: error: output[")
                && f.lines[0].ends_with("does not hold the allreduce result"),
            "{}",
            f.lines[0]
        );
        assert!(f.rendered.contains("┌─ half.coll:9:9"), "{}", f.rendered);
        assert!(
            f.rendered
                .contains("9 │         reduce input[r][(r - s - 1) % n] -> input[(r + 1) % n];"),
            "{}",
            f.rendered
        );
        assert!(
            f.rendered
                .contains(&format!("verifying for n = {n} on nvswitch:{n}"))
        );
        // The proof already names the target: no second note.
        assert!(!f.rendered.contains("embedding for"), "{}", f.rendered);
    }
    // Nothing is written when a check fails.
    let out = tempfile::tempdir().expect("tempdir");
    let err = programs
        .try_emit_to(dir.path(), out.path())
        .expect_err("rejected");
    assert!(!out.path().join(GENERATED_FILE).exists());
    assert_eq!(err.lines().len(), 2);
    assert!(err.to_string().ends_with("coll embedding: 2 checks failed"));
}

#[test]
fn syntax_errors_are_reported_once_with_their_place() {
    let broken = "collective allreduce ring(n) {\n    chunks n;\n    inplace;\n}\n\nlet c = ;\n";
    let dir = dir_with(&[("broken.coll", broken)]);
    let failures = rejected(Programs::new().program("broken.coll").check(dir.path()));
    assert_eq!(failures.len(), 1);
    let f = &failures[0];
    assert_eq!(f.target, None);
    assert_eq!(
        f.lines,
        ["broken.coll:6:9: error: expected an expression, found `;`"]
    );
    assert!(f.rendered.contains("6 │ let c = ;"), "{}", f.rendered);
}

#[test]
fn every_failing_program_is_reported_and_good_ones_do_not_hide_them() {
    let dir = dir_with(&[("half.coll", HALF_RING)]);
    let failures = rejected(
        Programs::new()
            .program("half.coll")
            .ranks([2])
            .program("missing.coll")
            .check(dir.path()),
    );
    assert_eq!(failures.len(), 2);
    assert_eq!(failures[0].file, "half.coll");
    assert_eq!(failures[1].file, "missing.coll");
    assert!(
        failures[1].lines[0].starts_with("cannot read missing.coll: "),
        "{:?}",
        failures[1].lines
    );
}

#[test]
fn default_ranks_keep_those_the_header_admits() {
    let four = HALF_RING.replace("ranks n >= 2;", "ranks n >= 4;");
    let ring = std::fs::read_to_string(crate_dir().join(RING)).expect("read");
    let ring4 = ring.replace("ranks n >= 2;", "ranks n >= 4;");
    assert_ne!(ring, ring4, "the shipped ring's header changed");
    let three = ring.replace("ranks n >= 2;", "ranks n == 3;");
    let dir = dir_with(&[
        ("ring4.coll", &ring4),
        ("ring3.coll", &three),
        ("half4.coll", &four),
    ]);

    let checked = Programs::new()
        .program("ring4.coll")
        .check(dir.path())
        .expect("ring for 4 and 8");
    let counts: Vec<u32> = checked[0].plans.iter().map(|(n, _)| *n).collect();
    assert_eq!(counts, [4, 8]);

    // None of the defaults: the header's `ranks` is named, with what was tried.
    let failures = rejected(Programs::new().program("ring3.coll").check(dir.path()));
    assert_eq!(failures.len(), 1);
    assert_eq!(
        failures[0].lines,
        ["ring3.coll:6:11: error: the algorithm does not support rank count n = 8"]
    );
    assert!(
        failures[0]
            .rendered
            .contains("embedding tries 2, 4, 8 ranks unless `.ranks(...)` names others"),
        "{}",
        failures[0].rendered
    );

    // A refused default is skipped, but a real failure at an admitted one is not.
    let failures = rejected(Programs::new().program("half4.coll").check(dir.path()));
    let targets: Vec<u32> = failures
        .iter()
        .filter_map(|f| f.target.as_ref())
        .map(|t| t.0)
        .collect();
    assert_eq!(targets, [4, 8]);

    // Named counts are never skipped.
    let failures = rejected(
        Programs::new()
            .program("ring4.coll")
            .ranks([2, 4])
            .check(dir.path()),
    );
    assert_eq!(failures.len(), 1);
    assert_eq!(
        failures[0].lines,
        ["ring4.coll:6:11: error: the algorithm does not support rank count n = 2"]
    );
    // Elaboration says which target it was at; the embedding adds nothing.
    assert!(
        failures[0]
            .rendered
            .contains("= elaborating for n = 2 on nvswitch:2"),
        "{}",
        failures[0].rendered
    );
    assert!(!failures[0].rendered.contains("embedding for"));
}

#[test]
fn options_apply_and_later_failures_name_their_target() {
    let tight = CompileOptions {
        limits: crate::check::Limits {
            max_ops_per_block: 3,
            ..crate::check::Limits::default()
        },
        ..CompileOptions::default()
    };
    let failures = rejected(
        Programs::new()
            .program(RING)
            .ranks([2, 4])
            .options(tight)
            .check(crate_dir()),
    );
    // Two ranks need 2 ops per block, four need 7.
    assert_eq!(failures.len(), 1);
    let f = &failures[0];
    assert_eq!(f.target, Some((4, "nvswitch:4".to_string())));
    assert_eq!(
        f.lines,
        [
            "../algorithms/allreduce_ring.coll:3:22: error: rank 0, block 0 (starting at \
             ../algorithms/allreduce_ring.coll:15:9) has 7 ops; the limit is 3 (--max-ops-per-block)"
        ]
    );
    // The resource check does not say which target it was at: the embedding does.
    assert!(
        f.rendered.contains("= embedding for n = 4 on nvswitch:4"),
        "{}",
        f.rendered
    );
}

#[test]
fn topology_template_and_fixed_topologies() {
    let checked = Programs::new()
        .program(RING)
        .ranks([3])
        .topology("ring:{n}")
        .check(crate_dir())
        .expect("ring on ring:3");
    assert_eq!(checked[0].plans[0].1.topology, "ring:3");
    assert_eq!(checked[0].topology, "ring:{n}");

    // No `{n}`: the topology fixes the rank count.
    let checked = Programs::new()
        .program(RING)
        .topology("cluster:2x2")
        .check(crate_dir())
        .expect("ring on cluster:2x2");
    let counts: Vec<u32> = checked[0].plans.iter().map(|(n, _)| *n).collect();
    assert_eq!(counts, [4]);

    let failures = rejected(
        Programs::new()
            .program(RING)
            .ranks([2])
            .topology("cluster:2x2")
            .check(crate_dir()),
    );
    assert_eq!(
        failures[0].lines,
        ["../algorithms/allreduce_ring.coll: 2 ranks but topology `cluster:2x2` has 4 ranks"]
    );

    // A topology file is relative to the package, and fixes the rank count too.
    let topo = std::fs::read_to_string(crate_dir().join("../tests/inputs/topo/custom_ring4.json"))
        .expect("read");
    let ring = std::fs::read_to_string(crate_dir().join(RING)).expect("read");
    let dir = dir_with(&[("ring.coll", &ring)]);
    std::fs::create_dir(dir.path().join("topo")).expect("mkdir");
    std::fs::write(dir.path().join("topo/four.json"), topo).expect("write");
    let checked = Programs::new()
        .program("ring.coll")
        .topology("topo/four.json")
        .check(dir.path())
        .expect("ring on the file's topology");
    let counts: Vec<u32> = checked[0].plans.iter().map(|(n, _)| *n).collect();
    assert_eq!(counts, [4]);
    let failures = rejected(
        Programs::new()
            .program("ring.coll")
            .topology("topo/none.json")
            .check(dir.path()),
    );
    assert_eq!(failures.len(), 1);
    assert!(
        failures[0].lines[0].starts_with("ring.coll: topology `topo/none.json`: "),
        "{:?}",
        failures[0].lines
    );

    let failures = rejected(
        Programs::new()
            .program(RING)
            .topology("nowhere:{n}")
            .check(crate_dir()),
    );
    assert_eq!(failures.len(), 3);
    assert!(
        failures[0].lines[0]
            .starts_with("../algorithms/allreduce_ring.coll: topology `nowhere:2`: "),
        "{:?}",
        failures[0].lines
    );
}

#[test]
fn builder_misuse_is_a_usage_error() {
    let err = Programs::new()
        .ranks([2])
        .program(RING)
        .check(crate_dir())
        .expect_err("ranks before program");
    assert_eq!(
        err.to_string(),
        "coll embedding: `ranks` applies to the program named last, but no program was named"
    );

    let err = Programs::new()
        .check(crate_dir())
        .expect_err("nothing named");
    assert_eq!(err.to_string(), "coll embedding: no program was named");

    let err = Programs::new()
        .program(RING)
        .program("other/allreduce-ring.coll")
        .check(crate_dir())
        .expect_err("same constant");
    assert_eq!(
        err.to_string(),
        "coll embedding: other/allreduce-ring.coll would be the constant `ALLREDUCE_RING`, as \
         ../algorithms/allreduce_ring.coll is; rename one of them"
    );

    let err = Programs::new()
        .program("coll-programs.coll")
        .check(crate_dir())
        .expect_err("the list's name");
    assert!(err.to_string().contains("`COLL_PROGRAMS`"), "{err}");

    let err = Programs::new()
        .program(RING)
        .ranks([])
        .check(crate_dir())
        .expect_err("no counts");
    assert_eq!(
        err.to_string(),
        "coll embedding: `ranks` of ../algorithms/allreduce_ring.coll names no rank count"
    );
}

#[test]
fn constant_names() {
    assert_eq!(
        const_name(Path::new("a/allreduce_ring.coll")),
        "ALLREDUCE_RING"
    );
    assert_eq!(const_name(Path::new("ring-v2.x.coll")), "RING_V2_X");
    assert_eq!(const_name(Path::new("05ring.coll")), "COLL_05RING");
    assert_eq!(const_name(Path::new("_.coll")), "COLL__");
    assert_eq!(const_name(Path::new("ringé.coll")), "RING_");
}

#[test]
fn inputs_are_the_programs_and_topology_files() {
    let dir = Path::new("/pkg");
    let programs = Programs::new()
        .program("a.coll")
        .program("b.coll")
        .ranks([2, 4])
        .topology("topo/t{n}.json");
    assert_eq!(
        programs.inputs(dir),
        [
            PathBuf::from("/pkg/a.coll"),
            PathBuf::from("/pkg/b.coll"),
            PathBuf::from("/pkg/topo/t2.json"),
            PathBuf::from("/pkg/topo/t4.json"),
        ]
    );
}
