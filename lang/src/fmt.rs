//! The canonical layout (placeholder until the formatter lands).
use crate::ast::Program;
pub fn format(text: &str, _program: &Program) -> String {
    text.to_string()
}
