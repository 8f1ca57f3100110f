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
pub mod limits;
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

/// Why a source file could not be read; each message names the path.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read {path}: {what}, not a regular file")]
    NotAFile { path: String, what: &'static str },
    #[error(
        "cannot read {path}: {size} bytes is over the limit of {limit} bytes ({} MiB) for {what}",
        limit >> 20
    )]
    TooLarge {
        path: String,
        size: u64,
        limit: u64,
        what: &'static str,
    },
}

/// Reads a source file of at most [`limits::MAX_SOURCE_BYTES`]. Anything but a regular file
/// (a FIFO, a character device such as `/dev/zero`, a directory) is refused before it is
/// opened, since reading it could block forever or never end; the read itself stops one
/// byte past the limit, so a file that grows meanwhile is refused too.
pub fn read_source(path: &std::path::Path) -> Result<Vec<u8>, ReadError> {
    read_limited(path, limits::MAX_SOURCE_BYTES, "a source file")
}

/// [`read_source`] with another limit, for `what` (named in the error).
pub fn read_limited(
    path: &std::path::Path,
    limit: u64,
    what: &'static str,
) -> Result<Vec<u8>, ReadError> {
    use std::io::Read;
    let name = || path.display().to_string();
    let io = |source| ReadError::Io {
        path: name(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_file() {
        return Err(ReadError::NotAFile {
            path: name(),
            what: file_kind(&meta.file_type()),
        });
    }
    if meta.len() > limit {
        return Err(ReadError::TooLarge {
            path: name(),
            size: meta.len(),
            limit,
            what,
        });
    }
    let file = std::fs::File::open(path).map_err(io)?;
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge {
            path: name(),
            size: bytes.len() as u64,
            limit,
            what,
        });
    }
    Ok(bytes)
}

fn file_kind(t: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if t.is_dir() { "a directory" } else { "special" }
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
