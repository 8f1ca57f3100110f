//! `coll-compiler`: topology graph, elaboration of a checked program for `n` ranks,
//! symbolic verification, lowering to per-rank schedules, checks, the plan format and dumps.
//!
//! Stages, each a module: [`topology`] (the machine), [`elaborate`] (program + n + topology
//! -> chunk operations in program order, each with its source span), [`verify`] (symbolic
//! proof that the operations compute the declared collective), [`lower`] (per-rank blocks of
//! ops: the [`plan`]), [`replay`] (symbolic proof of a plan), [`check`] (deadlock freedom and
//! resources), [`dump`] (text, JSON, DOT, SVG) and [`predict`] (an alpha-beta cost model).
//! [`compile`] runs them all. [`msccl`] imports MSCCL-IR XML as plans and exports plans as
//! MSCCL-IR XML. [`embed`] runs [`compile`] from a build script and embeds the checked plans
//! in the binary ([`include_programs!`]).
#![forbid(unsafe_code)]

pub mod check;
pub mod dump;
pub mod elaborate;
pub mod embed;
pub mod error;
pub mod gpu;
pub mod ids;
pub mod layout;
pub mod lower;
pub mod msccl;
mod par;
pub mod plan;
pub mod predict;
pub mod replay;
pub mod topology;
pub mod verify;

pub use coll_lang as lang;

/// Elaborates a checked module for a machine and proves it computes its collective.
pub fn prove(
    module: &coll_lang::Module,
    facts: &elaborate::Facts,
    options: &elaborate::Options,
) -> Result<(elaborate::Elaborated, verify::Proof), coll_lang::Diagnostics<error::CompileError>> {
    let e = elaborate::elaborate(module, facts, options)?;
    match verify::verify_detailed(&e) {
        Ok(proof) => Ok((e, proof)),
        Err(failure) => Err(proof_failure(module, facts, options, &e, failure)),
    }
}

/// Elaborates, proving the ops on another thread as they are made where there are more
/// than a block of them ([`elaborate::elaborate_streaming`]), then runs `then` on the result
/// beside the rest of the proof: the proof uses the core elaboration leaves idle, and its
/// end (the last ops, the final check, freeing its state: tens of milliseconds at n =
/// 1024) overlaps the start of `then`. Small programs are proved beside `then` instead.
///
/// The prover is handed copies of the blocks only while it keeps up (at most
/// [`PROVER_BACKLOG`] ops waiting): once it falls behind (elaboration on several threads
/// hands over a loop's blocks at once), it reads the rest from the result, so the copies
/// never hold more than that.
fn elaborate_prove_and<T: Send>(
    module: &coll_lang::Module,
    facts: &elaborate::Facts,
    options: &elaborate::Options,
    then: impl FnOnce(&elaborate::Elaborated) -> T + Send,
) -> ProvedAnd<T> {
    elaborate_prove_with(module, facts, options, PROVER_BACKLOG, then)
}

/// [`elaborate_prove_and`] with at most `backlog` ops copied to the prover and not yet
/// proved.
fn elaborate_prove_with<T: Send>(
    module: &coll_lang::Module,
    facts: &elaborate::Facts,
    options: &elaborate::Options,
    backlog: usize,
    then: impl FnOnce(&elaborate::Elaborated) -> T + Send,
) -> ProvedAnd<T> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{OnceLock, mpsc};
    /// What the prover is sent: copies of the next ops, then word that the result (in
    /// `done`) holds the rest and the postcondition (never sent where elaboration fails).
    enum ToProver {
        Ops(Vec<elaborate::ChunkOp>),
        End,
    }
    let done: OnceLock<elaborate::Elaborated> = OnceLock::new();
    // Ops the prover has applied.
    let proved = AtomicUsize::new(0);
    let outcome = std::thread::scope(|scope| {
        let mut prover = None;
        // Ops handed over as copies; once a block is not, none after it is.
        let mut sent = 0;
        let mut copying = true;
        let (done, proved) = (&done, &proved);
        let mut sink = |header: &elaborate::Elaborated, ops: &[elaborate::ChunkOp]| {
            let (to_prover, _) = prover.get_or_insert_with(|| {
                let (to_prover, received) = mpsc::channel::<ToProver>();
                let header = header.clone();
                let running = scope.spawn(move || {
                    // Made here: a state of a cell per chunk of every rank (32 MB at n =
                    // 1024) takes tens of milliseconds to fill.
                    let mut proof = verify::Streamed::new(header);
                    let mut at = 0;
                    for message in received {
                        match message {
                            ToProver::Ops(block) => {
                                proof.apply(&block);
                                at += block.len();
                                proved.store(at, Ordering::Relaxed);
                            }
                            ToProver::End => {
                                let e: &elaborate::Elaborated = done.get()?;
                                proof.apply(e.ops.get(at..).unwrap_or_default());
                                return Some(proof.finish_proved(e.expects.clone()));
                            }
                        }
                    }
                    None
                });
                (to_prover, running)
            });
            copying = copying && sent + ops.len() - proved.load(Ordering::Relaxed) <= backlog;
            if copying {
                // Sending fails only where the prover panicked, which joining it reports.
                let _ = to_prover.send(ToProver::Ops(ops.to_vec()));
                sent += ops.len();
            }
        };
        let elaborated = elaborate::elaborate_streaming(module, facts, options, &mut sink);
        // An elaboration error drops the prover's channel: it stops, and the scope waits.
        let elaborated = elaborated?;
        let elaborated = done.get_or_init(|| elaborated);
        let Some((to_prover, running)) = prover else {
            return Ok(par::join(
                par::worth(elaborated.ops.len()),
                || verify::verify_detailed(elaborated),
                || then(elaborated),
            ));
        };
        let _ = to_prover.send(ToProver::End);
        drop(to_prover);
        let then = then(elaborated);
        let proof = match running.join() {
            Ok(Some(Ok(proof))) => Ok(proof),
            // Explained with the ops, which the prover does not have.
            Ok(Some(Err(failed))) => failed.finish(elaborated),
            // The end was sent, so the prover got it.
            Ok(None) => verify::verify_detailed(elaborated),
            Err(panic) => std::panic::resume_unwind(panic),
        };
        Ok((proof, then))
    });
    let (proof, then) = outcome?;
    match done.into_inner() {
        Some(elaborated) => Ok((elaborated, proof, then)),
        None => Err(coll_lang::Diagnostics {
            file: module.file.clone(),
            list: vec![coll_lang::Diagnostic::new(
                error::CompileError::Internal("elaboration left no result".into()),
                coll_lang::Span::default(),
            )],
        }),
    }
}

/// What [`elaborate_prove_and`] gives: the elaborated program, its proof (or why it
/// failed) and what `then` made of it.
type ProvedAnd<T> = Result<
    (
        elaborate::Elaborated,
        Result<verify::Proof, verify::Failure>,
        T,
    ),
    coll_lang::Diagnostics<error::CompileError>,
>;

/// Ops copied to the prover and not yet proved, at most ([`elaborate_prove_and`]): four
/// blocks, 14 MB.
const PROVER_BACKLOG: usize = 4 * elaborate::STREAM_BLOCK;

/// A failed proof as a diagnostic, with the loop iteration that made the op to blame.
fn proof_failure(
    module: &coll_lang::Module,
    facts: &elaborate::Facts,
    options: &elaborate::Options,
    e: &elaborate::Elaborated,
    failure: verify::Failure,
) -> coll_lang::Diagnostics<error::CompileError> {
    let mut d = failure.diagnostic;
    // Elaboration is deterministic: run it again to learn which loop iteration produced
    // the operation to blame.
    // Ops a conversion to out of place put first are not the program's.
    let prologue = if e.from_in_place {
        e.n as usize * e.buffers[0].chunks as usize
    } else {
        0
    };
    if let Some(op) = failure.op.and_then(|op| op.checked_sub(prologue)) {
        let again = elaborate::Options {
            capture_op: Some(op),
            ..options.clone()
        };
        if let Some(context) = elaborate::elaborate(module, facts, &again)
            .ok()
            .and_then(|e| e.captured_context)
        {
            d.notes.insert(0, format!("at this point: {context}"));
        }
    }
    coll_lang::Diagnostics {
        file: module.file.clone(),
        list: vec![d],
    }
}

/// Everything [`compile`] needs besides the program and the machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileOptions {
    pub elaborate: elaborate::Options,
    pub lower: lower::LowerOptions,
    /// Slots per connection the deadlock check assumes (executors use at least this many).
    pub slots: u32,
    pub limits: check::Limits,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            elaborate: elaborate::Options::default(),
            lower: lower::LowerOptions::default(),
            slots: DEFAULT_SLOTS,
            limits: check::Limits::default(),
        }
    }
}

/// Slots per connection: two let a ring of fused ops stream (one message in flight while
/// the next is written).
pub const DEFAULT_SLOTS: u32 = 2;

/// A program compiled for a machine: proved, lowered, checked.
///
/// Invariant: `valid` is the plan [`compile`] lowered and validated, equal to
/// `lowered.plan` as `compile` returned it. The two share one plan (an `Arc`, so a large
/// plan is held once); `lowered.plan` stays a field to read for dumps, and to change for
/// experiments only through `Arc::make_mut`, which copies it, so what [`Compiled::plan`]
/// hands to executors cannot have changed since it was validated.
#[derive(Clone, Debug)]
pub struct Compiled {
    pub elaborated: elaborate::Elaborated,
    pub proof: verify::Proof,
    pub lowered: lower::Lowered,
    pub schedule: check::Schedule,
    pub resources: check::Resources,
    valid: plan::ValidPlan,
}

impl Compiled {
    /// The validated plan, for an executor; equal to `lowered.plan` as [`compile`] returned
    /// it. No second validation: [`compile`] has just run it.
    pub fn plan(&self) -> &plan::ValidPlan {
        &self.valid
    }

    /// [`plan`](Self::plan), without the rest.
    pub fn into_plan(self) -> plan::ValidPlan {
        self.valid
    }

    /// [`plan`](Self::plan) and the deadlock simulation's schedule, without the rest.
    pub fn into_plan_and_schedule(self) -> (plan::ValidPlan, check::Schedule) {
        (self.valid, self.schedule)
    }
}

/// Elaborates, proves, lowers and checks a program for a topology. Every failure is a
/// diagnostic pointing at the `.coll` code that caused it.
pub fn compile(
    module: &coll_lang::Module,
    topo: &topology::Topology,
    options: &CompileOptions,
) -> Result<Compiled, coll_lang::Diagnostics<error::CompileError>> {
    let facts = elaborate::Facts::from_topology(topo);
    let ctx = lower::ScheduleContext {
        slots: options.slots,
        limits: options.limits.clone(),
    };
    // The lowering only reads the elaborated ops: it runs beside the proof's end (a failed
    // proof is the error, whatever the lowering made).
    let lower =
        |e: &elaborate::Elaborated| lower::lower_with(e, topo, &module.file, &options.lower, &ctx);
    let (elaborated, proved, lowered) =
        elaborate_prove_and(module, &facts, &options.elaborate, lower)?;
    let proof =
        proved.map_err(|f| proof_failure(module, &facts, &options.elaborate, &elaborated, f))?;
    let fail = |d: coll_lang::Diagnostic<error::CompileError>| coll_lang::Diagnostics {
        file: module.file.clone(),
        list: vec![d],
    };
    let internal = |what: String| {
        fail(coll_lang::Diagnostic::new(
            error::CompileError::Internal(what),
            elaborated.header_span,
        ))
    };
    let mut lowered = lowered.map_err(|d| fail(*d))?;
    if !lowered.validated {
        lowered
            .plan
            .validate()
            .map_err(|e| internal(format!("lowering produced an invalid plan: {e}")))?;
    }
    // An internal cross-check of the lowering (the program itself is already proved), as
    // a debug assertion: every test runs it; release builds skip its cost.
    if cfg!(debug_assertions) {
        replay::replay(&lowered.plan, elaborated.root).map_err(|e| {
            internal(format!(
                "the lowered plan does not compute the collective: {e}"
            ))
        })?;
    }
    // The lowering simulated the plan it chose (and lowered again without send hoisting
    // when that deadlocked, noting it in the plan); only a plan no candidate of which
    // passed is simulated here, to report its deadlock.
    let schedule = match lowered.simulated.take() {
        Some(s) => s,
        None => check::simulate(&lowered.plan, options.slots)
            .map_err(|deadlock| fail(deadlock_diagnostic(&lowered, &deadlock)))?,
    };
    let resources = check::check_resources(&lowered.plan, &options.limits).map_err(|e| {
        fail(
            coll_lang::Diagnostic::new(
                error::CompileError::Resource(e.to_string()),
                elaborated.header_span,
            )
            .with_label("in this algorithm")
            .with_note(
                "raise the limit, use fewer channels or instances, or restructure the algorithm",
            ),
        )
    })?;
    // Validated above; the checks since only read it.
    let valid = plan::ValidPlan::validated_shared(std::sync::Arc::clone(&lowered.plan));
    Ok(Compiled {
        elaborated,
        proof,
        lowered,
        schedule,
        resources,
        valid,
    })
}

/// A deadlock as a diagnostic on the source lines of the ops in the cycle.
fn deadlock_diagnostic(
    lowered: &lower::Lowered,
    d: &check::Deadlock,
) -> coll_lang::Diagnostic<error::CompileError> {
    let plan = &lowered.plan;
    let span_of = |w: &check::Waiter| {
        plan.gpus
            .get(w.rank as usize)
            .and_then(|g| g.blocks.get(w.block as usize))
            .and_then(|b| b.ops.get(w.op as usize))
            .and_then(|o| lowered.spans.get(o.source as usize))
            .copied()
            .unwrap_or_default()
    };
    let mut diag = coll_lang::Diagnostic::new(
        error::CompileError::Deadlock { slots: d.slots },
        d.cycle.first().map(span_of).unwrap_or_default(),
    );
    for (i, w) in d.cycle.iter().enumerate() {
        let text = format!(
            "rank {} block {} op {} {}",
            w.rank, w.block, w.op, w.waits_for
        );
        if i == 0 {
            diag = diag.with_label(text);
        } else {
            diag = diag.with_secondary(span_of(w), text);
        }
    }
    diag.with_note(format!("cycle: {d}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Over a block of ops ([`elaborate::STREAM_BLOCK`]) the proof runs beside elaboration:
    /// it makes the same ops, proves what the proof after elaboration proves, and fails
    /// where it fails, with the same diagnostic (the op to blame and its loop context).
    #[test]
    fn the_proof_beside_elaboration_is_the_proof_after_it() {
        let ring = |reduce_steps: &str, copy_steps: &str| {
            format!(
                "collective allreduce ring(n) {{ chunks n; inplace; }}\n\
                 for s in 0..{reduce_steps} {{ for r in 0..n {{ reduce input[r][(r - s - 1) % n] -> input[(r + 1) % n]; }} }}\n\
                 for s in 0..{copy_steps} {{ for r in 0..n {{ copy input[r][(r - s) % n] -> input[(r + 1) % n]; }} }}\n"
            )
        };
        // 2 × 299 × 300 ops: the first block is handed over, a second one ends mid-way.
        let n = 300;
        let topo = topology::Topology::preset(&format!("nvswitch:{n}")).expect("a preset");
        let facts = elaborate::Facts::from_topology(&topo);
        let options = CompileOptions::default();
        let both = |src: String| {
            let m = coll_lang::load_bytes("ring.coll", src.into_bytes()).expect("valid");
            let beside = compile(&m, &topo, &options);
            let after = prove(&m, &facts, &options.elaborate);
            (beside, after)
        };
        let (beside, after) = both(ring("n - 1", "n - 1"));
        let (beside, (e, proof)) = (beside.expect("compiles"), after.expect("proves"));
        assert!(e.ops.len() > elaborate::STREAM_BLOCK);
        assert_eq!(beside.elaborated.ops, e.ops);
        assert_eq!(beside.proof, proof);
        // A reduce of a contribution already there, in the second block (op 89,700); a
        // chunk left short of the ring, found at the end.
        for src in [ring("n", "n - 1"), ring("n - 1", "n - 2")] {
            let (beside, after) = both(src);
            let (beside, after) = (
                beside.expect_err("fails").render(),
                after.expect_err("fails").render(),
            );
            assert!(beside.contains("at this point: with s = "), "{beside}");
            assert_eq!(beside, after);
        }
    }

    /// A prover that falls behind (here at once: no copies, or one block of them) reads the
    /// rest from the result, and proves, or fails, as the proof after elaboration does.
    #[test]
    fn a_prover_behind_reads_the_rest_from_the_result() {
        let n = 300;
        let facts = elaborate::Facts::nvswitch(n);
        let options = elaborate::Options::default();
        // 2 × 299 × 300 ops; the second fails in its second block, the third at the end.
        for (reduce_steps, copy_steps) in [("n - 1", "n - 1"), ("n", "n - 1"), ("n - 1", "n - 2")] {
            let src = format!(
                "collective allreduce ring(n) {{ chunks n; inplace; }}\n\
                 for s in 0..{reduce_steps} {{ for r in 0..n {{ reduce input[r][(r - s - 1) % n] -> input[(r + 1) % n]; }} }}\n\
                 for s in 0..{copy_steps} {{ for r in 0..n {{ copy input[r][(r - s) % n] -> input[(r + 1) % n]; }} }}\n"
            );
            let m = coll_lang::load_bytes("ring.coll", src.into_bytes()).expect("valid");
            let e = elaborate::elaborate(&m, &facts, &options).expect("elaborates");
            let after = format!("{:?}", verify::verify_detailed(&e));
            for backlog in [0, elaborate::STREAM_BLOCK] {
                let (beside, proof, ()) =
                    elaborate_prove_with(&m, &facts, &options, backlog, |_| ())
                        .expect("elaborates");
                assert_eq!(beside.ops, e.ops);
                assert_eq!(format!("{proof:?}"), after, "backlog {backlog}");
            }
        }
    }

    /// A custom collective of exactly one block of ops: its `ensure` runs with a full block
    /// made, and hands nothing over again.
    #[test]
    fn ensure_after_a_full_block_proves() {
        let src = "collective custom pair_sum(n) {\n\
            chunks 128;\n\
            ensure { for r in 0..n { for c in 0..128 {\n\
                expect output[r][c] == input[r][c], input[(r + 1) % n][c];\n\
            } } }\n\
            }\n\
            for c in 0..128 { for r in 0..n {\n\
                copy input[r][c] -> output[r][c];\n\
                reduce input[(r + 1) % n][c] -> output[r][c];\n\
            } }\n";
        let m = coll_lang::load_bytes("pair.coll", src.as_bytes().to_vec()).expect("valid");
        // What `compile` runs before lowering (lowering 256 ranks took 20 s of the tests).
        let facts = elaborate::Facts::nvswitch(256);
        let options = elaborate::Options::default();
        let (e, _, ()) = elaborate_prove_and(&m, &facts, &options, |_| ()).expect("proves");
        assert_eq!(e.ops.len(), elaborate::STREAM_BLOCK);
    }
}
