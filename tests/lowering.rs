//! The lowering's rewrites (copy folding, fusion into recv-copy-send, recv-reduce-send and
//! copy-send, send hoisting) against the plain lowering, differentially. Random programs of
//! copies and reduces (group transfers among them) between `input`, `output` and two scratch
//! buffers on three ranks, over several instances and pipeline pieces, are elaborated (not
//! proved: they compute no collective), lowered both ways and run on the CPU executor with
//! the same inputs. Every rank's output must be identical; the rewritten plan may not
//! deadlock where the plain one does not (the check falls back to no hoisting first, as
//! `compile` does); and the rewritten plan exported as MSCCL-IR and read back (copy-sends
//! split) computes the same. About half the programs have copies to fold. A second property
//! compiles random in-place programs out of place. A run of 20 000 cases found a copy fused
//! into the send after it that deadlocked; 1 000 of each property run here.

use coll_compiler::elaborate::{self, Facts};
use coll_compiler::lower::{self, LowerOptions};
use coll_compiler::plan::Plan;
use coll_compiler::topology::Topology;
use coll_compiler::{DEFAULT_SLOTS, check, msccl};
use coll_executor::cpu::{CpuExecutor, RunOptions};
use coll_executor::dtype::ReduceOp;
use coll_executor::reference::fill;
use proptest::prelude::*;
use std::time::Duration;

const N: u32 = 3;

/// One statement: `copy|reduce SRC[r][i] -> DST[q][j]`, a two-chunk range, or a group
/// transfer (many-to-one reduce, one-to-many copy); an in-place program may also write
/// `input`.
fn statement(inplace: bool) -> impl Strategy<Value = String> {
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
        .prop_filter("a chunk onto itself", |(_, s, r, i, d, q, j, _)| {
            !(s == d && r == q && i == j)
        })
        .prop_map(|(reduce, s, r, i, d, q, j, form)| {
            let op = if reduce { "reduce" } else { "copy" };
            match form {
                0 if !(s == d && r == q) => format!("{op} {s}[{r}][0..2] -> {d}[{q}];"),
                // Group forms (switch-group ops, which folding leaves alone).
                1 if reduce && s != d => format!("reduce {s}[*][{i}] -> {d}[{q}][{j}];"),
                1 if !reduce && s != d => format!("copy {s}[{r}][{i}] -> {d}[*][{j}];"),
                _ => format!("{op} {s}[{r}][{i}] -> {d}[{q}][{j}];"),
            }
        })
}

/// A program of 1 to 13 statements, replicated over 1 to 3 instances and cut into 1 or 2
/// pipeline pieces, so that ops move parts of chunks too.
fn program(inplace: bool) -> impl Strategy<Value = String> {
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
fn elaborated(
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
fn lowered(
    e: &elaborate::Elaborated,
    topo: &Topology,
    file: &coll_lang::SourceFile,
    options: &LowerOptions,
) -> Result<Option<Plan>, String> {
    let plan = lower::lower(e, topo, file, options)
        .map_err(|d| d.kind.to_string())?
        .plan;
    plan.validate().map_err(|e| e.to_string())?;
    Ok(check::simulate(&plan, DEFAULT_SLOTS)
        .is_ok()
        .then_some(plan))
}

/// Runs `plan` on 24 elements per rank, every rank's output.
fn execute(plan: Plan) -> Result<Vec<Vec<i32>>, String> {
    let exec = CpuExecutor::new(plan, DEFAULT_SLOTS).map_err(|e| e.to_string())?;
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

/// The plan with every rewrite, as `compile` makes it (without hoisting when that
/// deadlocks); an error when it deadlocks either way.
fn rewritten(
    e: &elaborate::Elaborated,
    topo: &Topology,
    file: &coll_lang::SourceFile,
    src: &str,
) -> Result<Plan, TestCaseError> {
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

const PLAIN: LowerOptions = LowerOptions {
    hoist_sends: false,
    fuse: false,
    fold_copies: false,
};

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 1000,
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
