//! `coll-lang`: the `.coll` language front end.
//!
//! Pipeline: bytes -> [`SourceFile`] (UTF-8 checked) -> [`parser::parse`] -> [`ast::Program`]
//! -> [`check::check`] (names and types) -> a [`check::Summary`]. Every failure is a
//! [`Diagnostic`] with a span; [`Diagnostics::render`] prints them with excerpts.
//! [`fmt::format`] prints the canonical layout, keeping comments; [`dump::dump`] prints the
//! tree for snapshots.
#![forbid(unsafe_code)]

pub mod ast;
pub mod builtins;
pub mod check;
pub mod comments;
pub mod diagnostic;
pub mod dump;
pub mod fmt;
pub mod parser;
pub mod source;

pub use diagnostic::{Diagnostic, Diagnostics, ErrorKind};
pub use source::{SourceFile, Span};

/// A parsed and checked file.
#[derive(Clone, Debug)]
pub struct Module {
    pub file: SourceFile,
    pub program: ast::Program,
    pub summary: check::Summary,
}

/// Turns raw bytes into a source file, reporting the first invalid UTF-8 byte.
pub fn decode(name: &str, bytes: Vec<u8>) -> Result<SourceFile, Diagnostics> {
    match String::from_utf8(bytes) {
        Ok(text) => Ok(SourceFile::new(name, text)),
        Err(e) => {
            let valid = e.utf8_error().valid_up_to();
            let bytes = e.into_bytes();
            // Keep the valid prefix (and the rest lossily) so the excerpt can show the place.
            let text = String::from_utf8_lossy(&bytes).into_owned();
            let file = SourceFile::new(name, text);
            let diag = Diagnostic::new(ErrorKind::InvalidUtf8, Span::new(valid, valid + 1))
                .with_label(format!("invalid byte 0x{:02x} here", bytes[valid]))
                .with_note("coll reads source files as UTF-8");
            Err(Diagnostics {
                file,
                list: vec![diag],
            })
        }
    }
}

/// Parses only (no name or type checks).
pub fn parse(file: &SourceFile) -> Result<ast::Program, Diagnostics> {
    parser::parse(file.text()).map_err(|list| Diagnostics {
        file: file.clone(),
        list,
    })
}

/// Parses and checks a source file.
pub fn load(file: SourceFile) -> Result<Module, Diagnostics> {
    let program = parse(&file)?;
    match check::check(&program) {
        Ok(summary) => Ok(Module {
            file,
            program,
            summary,
        }),
        Err(list) => Err(Diagnostics { file, list }),
    }
}

/// Reads, decodes, parses and checks `bytes` named `name`.
pub fn load_bytes(name: &str, bytes: Vec<u8>) -> Result<Module, Diagnostics> {
    load(decode(name, bytes)?)
}
