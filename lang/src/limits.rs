//! Every size the front end accepts from its input, in one place, so that a small hostile
//! file ends in a clear error instead of exhausting memory or time.
//!
//! - [`MAX_SOURCE_BYTES`]: a source file larger than this is refused before it is read in
//!   full ([`crate::read_source`]); [`MAX_PLAN_FILE_BYTES`] likewise for a plan (JSON or
//!   MSCCL-IR) read by the command line ([`crate::read_limited`]).
//! - [`MAX_DEPTH`]: nesting of expressions and blocks (parser).
//! - [`MAX_ERRORS`]: diagnostics kept per file, by the parser and by the checker; the rest
//!   are counted in one closing "and N more" diagnostic.
//! - [`MAX_TABLE_LEN`]: elements of a table literal (parser), so a table is small whatever
//!   the file holds, and every value built from one stays small at elaboration.
//! - [`MAX_SUGGEST_LEN`], [`MAX_SUGGEST_CANDIDATES`]: "did you mean" compares names of at
//!   most this many characters against at most this many candidates, so its cost per
//!   diagnostic is bounded whatever the file holds.
//! - [`MAX_EXCERPT_CHARS`]: a diagnostic shows at most this many characters of a source
//!   line, so its size does not grow with the line's.

pub use crate::parser::{MAX_DEPTH, MAX_ERRORS};

/// Largest source file read: 16 MiB. Every shipped algorithm is under 100 KB.
pub const MAX_SOURCE_BYTES: u64 = 16 << 20;
/// Largest plan file (JSON or MSCCL-IR XML) read: 512 MiB. Ring allreduce at 1024 ranks,
/// about two million ops, is a 100 MB JSON plan; the plan's own size limits (cells, ops)
/// apply once it is parsed.
pub const MAX_PLAN_FILE_BYTES: u64 = 512 << 20;
/// Longest name (in characters) "did you mean" compares; longer ones get no suggestion.
pub const MAX_SUGGEST_LEN: usize = 64;
/// Candidates "did you mean" looks at per diagnostic (the first ones, in the order given).
pub const MAX_SUGGEST_CANDIDATES: usize = 4096;
/// Most elements of a table literal `[a, b, ...]`.
pub const MAX_TABLE_LEN: usize = 65536;
/// Characters of a source line a diagnostic's excerpt shows: a longer line is cut to a
/// window around the label, marked `…` where cut.
pub const MAX_EXCERPT_CHARS: usize = 120;
