//! `coll-compiler`: topology graph, elaboration of a checked program for `n` ranks,
//! symbolic verification, lowering to per-rank schedules, checks, the plan format and dumps.
//!
//! Stages, each a module: [`topology`] (the machine), [`elaborate`] (program + n + topology
//! -> chunk operations in program order, each with its source span), [`verify`] (symbolic
//! proof that the operations compute the declared collective).
#![forbid(unsafe_code)]

pub mod check;
pub mod dump;
pub mod elaborate;
pub mod error;
pub mod ids;
pub mod layout;
pub mod lower;
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
        Err(failure) => {
            let mut d = failure.diagnostic;
            // Elaboration is deterministic: run it again to learn which loop iteration
            // produced the operation to blame.
            if let Some(op) = failure.op {
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
            Err(coll_lang::Diagnostics {
                file: module.file.clone(),
                list: vec![d],
            })
        }
    }
}
