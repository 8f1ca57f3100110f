//! Parser (stub).
use crate::ast::Program;
use crate::diagnostic::Diagnostic;
pub fn parse(_text: &str) -> Result<Program, Vec<Diagnostic>> {
    todo!()
}
