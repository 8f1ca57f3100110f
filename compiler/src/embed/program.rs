//! The run-time side of embedding: a program's source and its checked plans, as constants in
//! the file a build script wrote.
//!
//! Invariants of [`EmbeddedProgram`]: `plans` is sorted by rank count with one entry per
//! count, and each entry is the JSON of a plan that [`crate::compile`] produced for that
//! count from `source` and that passed every check `coll check FILE --ranks N` runs. The
//! JSON is still validated again when read ([`EmbeddedProgram::plan`]): the constant could
//! have been written by hand, or by another version of this crate.

use super::EmbedError;
use crate::plan::ValidPlan;

/// One `.coll` program checked at build time, with its plan for each rank count it was
/// proved for. The constants of `coll_programs.rs` are of this type (see
/// [`crate::include_programs`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EmbeddedProgram {
    file: &'static str,
    source: &'static str,
    plans: &'static [(u32, &'static str)],
}

impl EmbeddedProgram {
    /// A program named `file` (the path given to
    /// [`Programs::program`](super::Programs::program)) with its `source` and, per rank
    /// count, its plan as JSON. `plans` must be sorted by rank count, one entry per count;
    /// the generated file always writes them so, and [`EmbeddedProgram::plan`] finds a count
    /// by binary search.
    pub const fn new(
        file: &'static str,
        source: &'static str,
        plans: &'static [(u32, &'static str)],
    ) -> EmbeddedProgram {
        EmbeddedProgram {
            file,
            source,
            plans,
        }
    }

    /// The path of the `.coll` file as the build script named it.
    pub fn file(&self) -> &'static str {
        self.file
    }

    /// The program's text as it was checked.
    pub fn source(&self) -> &'static str {
        self.source
    }

    /// The rank counts there is a plan for, ascending.
    pub fn ranks(&self) -> impl Iterator<Item = u32> + use<> {
        let plans = self.plans;
        plans.iter().map(|&(n, _)| n)
    }

    /// The plan's JSON for `ranks`, as the build script wrote it.
    pub fn plan_json(&self, ranks: u32) -> Result<&'static str, EmbedError> {
        self.plans
            .binary_search_by_key(&ranks, |&(n, _)| n)
            .ok()
            .and_then(|i| self.plans.get(i))
            .map(|&(_, json)| json)
            .ok_or_else(|| EmbedError::UnknownRanks {
                program: self.file.to_string(),
                ranks,
                available: self.ranks().collect(),
            })
    }

    /// The plan for `ranks`, read and validated ([`ValidPlan::from_json`]), ready for an
    /// executor. A rank count the program was not embedded for is
    /// [`EmbedError::UnknownRanks`].
    pub fn plan(&self, ranks: u32) -> Result<ValidPlan, EmbedError> {
        let json = self.plan_json(ranks)?;
        ValidPlan::from_json(json).map_err(|source| EmbedError::Plan {
            program: self.file.to_string(),
            ranks,
            source,
        })
    }
}
