//! Shared helpers for the integration tests: where the workspace is, and how files are named
//! in snapshots (relative to the workspace, `/`-separated, so no absolute path leaks in).

use std::path::{Path, PathBuf};

pub mod gpu_gate;

/// The workspace root (the parent of this crate).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
}

/// `path` relative to the workspace root with `/` separators.
pub fn display_name(path: &Path) -> String {
    let root = root().canonicalize().unwrap_or_else(|_| root());
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let rel = path.strip_prefix(&root).unwrap_or(&path);
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// Reads a source file named by its workspace-relative path.
pub fn source(path: &Path) -> coll_lang::SourceFile {
    let bytes =
        std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    match coll_lang::decode(&display_name(path), bytes) {
        Ok(f) => f,
        Err(d) => d.file,
    }
}

/// Every `*.coll` file directly in `dir` (workspace-relative), sorted.
pub fn coll_files(dir: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
        .unwrap_or_else(|e| panic!("cannot list {dir}: {e}"))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "coll"))
        .collect();
    v.sort();
    v
}

/// Whether an algorithm only runs on clusters (its header names `cluster` and no single-node
/// topology).
pub fn cluster_only(m: &coll_lang::Module) -> bool {
    let t = &m.summary.topologies;
    t.iter().any(|x| x == "cluster")
        && !t
            .iter()
            .any(|x| matches!(x.as_str(), "any" | "nvswitch" | "hgx" | "ring"))
}

/// The preset a test compiles `m` for at `n` ranks: `nvswitch:n`, or for algorithms that only
/// run on clusters two nodes (one for n = 2); `None` for an odd `n` there.
pub fn preset(m: &coll_lang::Module, n: usize) -> Option<String> {
    if !cluster_only(m) {
        return Some(format!("nvswitch:{n}"));
    }
    if !n.is_multiple_of(2) {
        return None;
    }
    let nodes = if n == 2 { 1 } else { 2 };
    Some(format!("cluster:{nodes}x{}", n / nodes))
}

/// The topologies to test `m` on: `nvswitch:n` for each `n` of `ns`, or for algorithms that
/// only run on clusters, `cluster:NxG` for each `(N, G)` of `grid`.
pub fn machines(m: &coll_lang::Module, ns: &[usize], grid: &[(usize, usize)]) -> Vec<String> {
    if cluster_only(m) {
        grid.iter()
            .map(|(n, g)| format!("cluster:{n}x{g}"))
            .collect()
    } else {
        ns.iter().map(|n| format!("nvswitch:{n}")).collect()
    }
}

/// Compile options that make an in-place algorithm an out-of-place plan, as
/// `--placement out-of-place` does.
pub fn out_of_place() -> coll_compiler::CompileOptions {
    let mut o = coll_compiler::CompileOptions::default();
    o.elaborate.out_of_place = true;
    o
}

/// Compiles an algorithm for `n` ranks on `nvswitch:n` with default options; `None` when its
/// `ranks` predicate rejects `n`. Any other failure fails the test.
pub fn compiled(path: &Path, n: usize) -> Option<coll_compiler::Compiled> {
    compiled_with(path, n, &coll_compiler::CompileOptions::default())
}

/// [`compiled`] with `options`.
pub fn compiled_with(
    path: &Path,
    n: usize,
    options: &coll_compiler::CompileOptions,
) -> Option<coll_compiler::Compiled> {
    let file = source(path);
    let m = coll_lang::load(file).unwrap_or_else(|d| panic!("{}", d.render()));
    let spec = preset(&m, n)?;
    let topo = coll_compiler::topology::Topology::parse(&spec).expect("a preset");
    match coll_compiler::compile(&m, &topo, options) {
        Ok(c) => Some(c),
        Err(d)
            if matches!(
                d.list[0].kind,
                coll_compiler::error::CompileError::UnsupportedRanks { .. }
            ) =>
        {
            None
        }
        Err(d) => panic!("{} at n = {n}:\n{}", m.file.name(), d.render()),
    }
}

/// Runs a compiled allreduce (or any collective whose reference the harness knows) on the CPU executor at a count no chunk divides, out of place
/// and in place, every element checked against the reference.
pub fn exact_in_both_placements(c: coll_compiler::Compiled, what: &str) {
    use coll_executor::cpu::{CpuExecutor, RunOptions};
    use coll_executor::dtype::DType;
    use coll_executor::harness::run_checked;
    let exec = CpuExecutor::new(c.into_plan(), coll_compiler::DEFAULT_SLOTS);
    for inplace in [false, true] {
        let o = RunOptions {
            count: 1003,
            ..RunOptions::default()
        };
        let r = run_checked(&exec, DType::F32, &o, inplace)
            .unwrap_or_else(|e| panic!("{what} in place {inplace}: {e}"));
        assert_eq!(r.wrong, Some(0), "{what} in place {inplace}");
    }
}

/// The Rust examples of `README.md`, compiled by `cargo test` as doc tests so that they keep
/// to the API (they are `no_run`: their paths are relative to the repository root and one
/// needs GPUs).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
