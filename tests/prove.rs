//! Every shipped algorithm is proved for every rank count it supports: a sample in the
//! normal run, all of 2..=64 (hierarchical ones: every cluster of 1..=8 nodes of 2..=8 GPUs)
//! under `--ignored`. A rank count the algorithm's `ranks` predicate rejects is skipped;
//! every other failure fails the test.

use coll_compiler::elaborate::{Facts, Options};
use coll_compiler::error::CompileError;
use coll_lang::Module;

const SAMPLE: &[usize] = &[
    2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17, 24, 31, 32, 33, 48, 63, 64,
];
/// Nodes × GPUs per node for algorithms that only run on clusters.
const SAMPLE_GRID: &[(usize, usize)] = &[
    (1, 2),
    (2, 2),
    (2, 3),
    (3, 4),
    (2, 8),
    (4, 4),
    (5, 6),
    (8, 8),
];

fn algorithms() -> Vec<Module> {
    coll_tests::coll_files("algorithms")
        .iter()
        .map(|p| {
            let file = coll_tests::source(p);
            coll_lang::load(file).unwrap_or_else(|d| panic!("{}", d.render()))
        })
        .collect()
}

/// Proves `m` on topology `spec`; `Ok(false)` when the algorithm does not support its rank
/// count.
fn prove(m: &Module, spec: &str) -> Result<bool, String> {
    let topo = coll_compiler::topology::Topology::parse(spec).map_err(|e| e.to_string())?;
    let facts = Facts::from_topology(&topo);
    match coll_compiler::prove(m, &facts, &Options::default()) {
        Ok(_) => Ok(true),
        Err(d) if matches!(d.list[0].kind, CompileError::UnsupportedRanks { .. }) => Ok(false),
        Err(d) => Err(d.render()),
    }
}

fn prove_all(ns: &[usize], grid: &[(usize, usize)]) {
    let mut failures = Vec::new();
    for m in algorithms() {
        let mut proved = 0;
        for spec in coll_tests::machines(&m, ns, grid) {
            match prove(&m, &spec) {
                Ok(true) => proved += 1,
                Ok(false) => {}
                Err(e) => failures.push(format!("{} on {spec}:\n{e}", m.file.name())),
            }
        }
        if proved == 0 {
            failures.push(format!(
                "{}: supports none of the machines tried",
                m.file.name()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn algorithms_prove_for_sampled_rank_counts() {
    prove_all(SAMPLE, SAMPLE_GRID);
}

#[test]
#[ignore = "full range: cargo test -- --ignored"]
fn algorithms_prove_for_every_rank_count_to_64() {
    let ns: Vec<usize> = (2..=64).collect();
    let grid: Vec<(usize, usize)> = (1..=8).flat_map(|n| (2..=8).map(move |g| (n, g))).collect();
    prove_all(&ns, &grid);
}

#[test]
fn ring_without_its_allgather_fails_naming_the_line() {
    let path = coll_tests::root().join("algorithms/allreduce_ring.coll");
    let text = std::fs::read_to_string(path).expect("ring exists");
    // Drop the last top-level `for` loop (the allgather phase).
    let cut = text.rfind("\nfor ").expect("two loops");
    let broken = format!("{}\n", &text[..cut]);
    let m = coll_lang::load(coll_lang::SourceFile::new("ring_broken.coll", broken))
        .expect("still a valid program");
    let d = coll_compiler::prove(&m, &Facts::nvswitch(8), &Options::default())
        .expect_err("must not prove");
    let first = &d.list[0];
    assert!(
        matches!(first.kind, CompileError::Postcondition { .. }),
        "{}",
        d.render()
    );
    let rendered = d.render();
    assert!(rendered.contains("ring_broken.coll:"), "{rendered}");
    assert!(
        rendered.contains("reduce input[r]"),
        "points at the last write: {rendered}"
    );
    assert!(rendered.contains("expected: input[0..8]"), "{rendered}");
}
