//! Name resolution and type checking (stub; being written).
use crate::ast::Program;
use crate::builtins::CollectiveKind;
use crate::diagnostic::Diagnostic;

/// What the checker learned about a valid program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub kind: CollectiveKind,
    pub name: String,
    pub inplace: bool,
}

pub fn check(_program: &Program) -> Result<Summary, Vec<Diagnostic>> {
    todo!()
}
