//! Random programs for the differential tests (`tests/lowering.rs`, `tests/direct.rs`):
//! copies and reduces (group transfers among them) between `input`, `output` and two scratch
//! buffers on `N` ranks, over several instances and pipeline pieces, elaborated and lowered
//! as `compile` does. Included by path (`#[path = "common/programs.rs"] mod programs;`),
//! since proptest is only a dev-dependency of the tests crate.

use coll_compiler::elaborate::{self, Facts};
use coll_compiler::lower::{self, LowerOptions};
use coll_compiler::plan::ValidPlan;
use coll_compiler::topology::Topology;
use coll_compiler::{DEFAULT_SLOTS, check};
use proptest::prelude::*;

pub const N: u32 = 3;

/// One statement: `copy|reduce SRC[r][i] -> DST[q][j]`, a two-chunk range, or a group
/// transfer (many-to-one reduce, one-to-many copy); an in-place program may also write
/// `input`.
pub fn statement(inplace: bool) -> impl Strategy<Value = String> {
    let src = prop::sample::select(vec!["input", "output", "a", "b"]);
    let dst = if inplace {
        prop::sample::select(vec!["input", "output", "a", "b"])
    } else {
        prop::sample::select(vec!["output", "a", "b"])
    };
    (
        any::<bool>(),
        src,
        0..N,
        0..2u32,
        dst,
        0..N,
        0..2u32,
        0..6u8,
    )
        // In place, allreduce's `input` and `output` are one buffer.
        .prop_filter("a chunk onto itself", move |(_, s, r, i, d, q, j, _)| {
            !(same(inplace, s, d) && r == q && i == j)
        })
        .prop_map(move |(reduce, s, r, i, d, q, j, form)| {
            let op = if reduce { "reduce" } else { "copy" };
            match form {
                0 if !(same(inplace, s, d) && r == q) => {
                    format!("{op} {s}[{r}][0..2] -> {d}[{q}];")
                }
                // Group forms (switch-group ops, which folding leaves alone).
                1 if reduce && s != d => format!("reduce {s}[*][{i}] -> {d}[{q}][{j}];"),
                1 if !reduce && s != d => format!("copy {s}[{r}][{i}] -> {d}[*][{j}];"),
                _ => format!("{op} {s}[{r}][{i}] -> {d}[{q}][{j}];"),
            }
        })
}

/// Whether buffers `s` and `d` are the same storage.
fn same(inplace: bool, s: &str, d: &str) -> bool {
    s == d || (inplace && matches!((s, d), ("input", "output") | ("output", "input")))
}

/// A program of 1 to 13 statements, replicated over 1 to 3 instances and cut into 1 or 2
/// pipeline pieces, so that ops move parts of chunks too.
pub fn program(inplace: bool) -> impl Strategy<Value = String> {
    let placement = if inplace { "inplace" } else { "outofplace" };
    (prop::collection::vec(statement(inplace), 1..14), 1..4u32, 1..3u32).prop_map(
        move |(body, instances, pipeline)| {
            format!(
                "collective allreduce t(n) {{\n    chunks 2;\n    {placement};\n    ranks n >= 1;\n    topology any;\n    instances {instances};\n    pipeline {pipeline};\n    scratch a[2];\n    scratch b[2];\n}}\n\n{}\n",
                body.join("\n")
            )
        },
    )
}

/// The program `src` elaborated for `N` ranks, and its file and machine.
pub fn elaborated(
    src: &str,
    options: &elaborate::Options,
) -> Result<(elaborate::Elaborated, coll_lang::SourceFile, Topology), TestCaseError> {
    let file = coll_lang::SourceFile::new("prop.coll", src.to_string());
    let module = coll_lang::load(file.clone())
        .map_err(|d| TestCaseError::fail(format!("{}\n{src}", d.render())))?;
    let topo = Topology::parse(&format!("nvswitch:{N}")).expect("a preset");
    let e = elaborate::elaborate(&module, &Facts::from_topology(&topo), options)
        .map_err(|d| TestCaseError::fail(format!("{}\n{src}", d.render())))?;
    Ok((e, file, topo))
}

/// Lowers `e` with `options`; `None` when the plan deadlocks with the slots the executors
/// use.
pub fn lowered(
    e: &elaborate::Elaborated,
    topo: &Topology,
    file: &coll_lang::SourceFile,
    options: &LowerOptions,
) -> Result<Option<ValidPlan>, String> {
    let plan = lower::lower(e, topo, file, options)
        .map_err(|d| d.kind.to_string())?
        .plan;
    let plan = ValidPlan::new(std::sync::Arc::unwrap_or_clone(plan)).map_err(|e| e.to_string())?;
    Ok(check::simulate(&plan, DEFAULT_SLOTS)
        .is_ok()
        .then_some(plan))
}

/// The plan with every rewrite, as `compile` makes it (without hoisting when that
/// deadlocks); an error when it deadlocks either way.
pub fn rewritten(
    e: &elaborate::Elaborated,
    topo: &Topology,
    file: &coll_lang::SourceFile,
    src: &str,
) -> Result<ValidPlan, TestCaseError> {
    let fail = |m: String| TestCaseError::fail(format!("{m}\n{src}"));
    if let Some(p) = lowered(e, topo, file, &LowerOptions::default()).map_err(fail)? {
        return Ok(p);
    }
    let no_hoist = LowerOptions {
        hoist_sends: false,
        ..LowerOptions::default()
    };
    lowered(e, topo, file, &no_hoist)
        .map_err(fail)?
        .ok_or_else(|| fail("the rewritten plan deadlocks, the plain one does not".into()))
}
