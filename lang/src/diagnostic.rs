//! Diagnostics: typed errors with a primary span, extra labels and notes, rendered with
//! codespan-reporting as `error: message` followed by `┌─ path:line:col` and an excerpt.
//!
//! Every diagnostic has a primary span inside the file it is reported against; the
//! rendering never contains colours unless asked for and never an absolute path unless the
//! file was named by one.

use crate::limits::{MAX_SUGGEST_CANDIDATES, MAX_SUGGEST_LEN};
use crate::source::{SourceFile, Span};
use codespan_reporting::diagnostic::{Diagnostic as CsDiagnostic, Label as CsLabel};
use codespan_reporting::files::SimpleFile;
use codespan_reporting::term;
use std::fmt;

/// What went wrong; the `Display` text is the headline of the diagnostic.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ErrorKind {
    // --- reading ---
    #[error("file is not valid UTF-8")]
    InvalidUtf8,
    #[error("file is empty: expected a `collective` header")]
    EmptyFile,

    // --- lexing and parsing ---
    #[error("unterminated block comment")]
    UnterminatedComment,
    #[error("integer literal `{0}` does not fit in 64 bits")]
    IntegerTooLarge(String),
    #[error("expected {expected}, found {found}")]
    Syntax { expected: String, found: String },
    #[error("nesting deeper than {limit} levels")]
    TooDeep { limit: usize },
    #[error("too many errors; stopping after {0}")]
    TooManyErrors(usize),
    #[error(
        "too many errors: {shown} shown, and {more} more (at most {shown} are reported per file)"
    )]
    MoreErrors { shown: usize, more: usize },
    #[error("unknown header item `{name}`")]
    UnknownHeaderItem { name: String },
    #[error("comparison operators cannot be chained")]
    ChainedComparison,
    #[error("a table holds at most {limit} elements")]
    TableTooLong { limit: usize },
    #[error("`{what}` is not supported")]
    Unsupported { what: String },

    // --- names ---
    #[error("unknown name `{name}`")]
    UnknownName { name: String },
    #[error("unknown function `{name}`")]
    UnknownFunction { name: String },
    #[error("`{name}` is defined more than once")]
    Duplicate { name: String },
    #[error("cannot assign to `{name}`: {why}")]
    NotAssignable { name: String, why: String },
    #[error("`{name}` cannot name a function: a statement starting with it is a transfer")]
    StatementKeywordAsFunction { name: String },

    // --- header ---
    #[error("missing `collective` header")]
    MissingHeader,
    #[error("more than one `collective` header in a file")]
    DuplicateHeader,
    #[error("unknown collective `{name}`")]
    UnknownCollective { name: String },
    #[error("header item `{item}` is given more than once")]
    DuplicateHeaderItem { item: String },
    #[error("header has no `chunks` item")]
    MissingChunks,
    #[error("a `custom` collective needs an `ensure {{ ... }}` postcondition")]
    MissingPostcondition,
    #[error("`ensure` is only for `custom` collectives; `{kind}` has a built-in postcondition")]
    UnexpectedPostcondition { kind: String },
    #[error("unknown topology `{name}`")]
    UnknownTopology { name: String },
    #[error("unknown capability `{name}`")]
    UnknownCapability { name: String },
    #[error("`inplace` and `outofplace` contradict each other")]
    ConflictingPlacement,
    #[error("header takes exactly one parameter (the rank count), found {found}")]
    HeaderParams { found: usize },

    // --- hints ---
    #[error("unknown hint `{name}`")]
    UnknownHint { name: String },
    #[error("hint `{name}` is given more than once")]
    DuplicateHint { name: String },
    #[error("hint `{name}` belongs in the header, not on a transfer")]
    HintNotAllowedHere { name: String },
    #[error("unknown protocol `{name}`")]
    UnknownProtocol { name: String },
    #[error("hint `{name}` must be at least {min}, found {value}")]
    HintOutOfRange { name: String, min: i64, value: i64 },
    #[error("unknown channel kind `{name}`")]
    UnknownChannelKind { name: String },

    // --- types ---
    #[error("type mismatch: expected {expected}, found {found}")]
    TypeMismatch { expected: String, found: String },
    #[error("`{name}` takes {expected} argument{s}, found {found}", s = if *expected == 1 { "" } else { "s" })]
    Arity {
        name: String,
        expected: usize,
        found: usize,
    },
    #[error("`{name}` returns nothing; it cannot be used as a value")]
    NoValue { name: String },
    #[error("result of `{name}` is unused; only functions that return nothing are statements")]
    UnusedValue { name: String },
    #[error("`return` outside a function")]
    ReturnOutsideFunction,
    #[error("function `{name}` must return a value on every path")]
    MissingReturn { name: String },
    #[error("unknown type `{name}`")]
    UnknownType { name: String },
    #[error("`copy` takes one source rank; use `reduce` to combine chunks from several ranks")]
    CopyManyToOne,
    #[error("`copy` takes one source; use `reduce` to combine several into one chunk")]
    CopySeveralSources,
    #[error("a table is read with one index, as in `{name}[i]`")]
    TableIndex { name: String },
    #[error("source and destination both name several ranks")]
    ManyToMany,
    #[error("a chunk reference needs an index here: `{buffer}[rank][index]`")]
    MissingIndex { buffer: String },
    #[error("`expect` is only allowed inside `ensure`")]
    ExpectOutsideEnsure,
    #[error("`{what}` is not allowed inside `ensure`")]
    NotAllowedInEnsure { what: String },
    #[error("functions are defined at the top level only")]
    NestedFunction,
}

/// A label on a span other than the primary one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label {
    pub span: Span,
    pub message: String,
}

/// One error with its location, optional secondary labels and notes. `K` is the typed
/// error: [`ErrorKind`] for the front end; later stages bring their own enums and reuse the
/// rendering.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic<K = ErrorKind> {
    pub kind: K,
    pub span: Span,
    /// The text under the primary caret (may be empty).
    pub label: String,
    pub labels: Vec<Label>,
    pub notes: Vec<String>,
}

impl<K: fmt::Display> Diagnostic<K> {
    pub fn new(kind: K, span: Span) -> Diagnostic<K> {
        Diagnostic {
            kind,
            span,
            label: String::new(),
            labels: Vec::new(),
            notes: Vec::new(),
        }
    }

    pub fn with_label(mut self, text: impl Into<String>) -> Diagnostic<K> {
        self.label = text.into();
        self
    }

    pub fn with_secondary(mut self, span: Span, text: impl Into<String>) -> Diagnostic<K> {
        self.labels.push(Label {
            span,
            message: text.into(),
        });
        self
    }

    pub fn with_note(mut self, text: impl Into<String>) -> Diagnostic<K> {
        self.notes.push(text.into());
        self
    }

    /// Renders as plain text (no colours), the form used in snapshots and by `coll check`
    /// when standard error is not a terminal.
    pub fn render(&self, file: &SourceFile) -> String {
        let (files, diag) = self.to_codespan(file);
        term::emit_into_string(&term::Config::default(), &files, &diag)
            .unwrap_or_else(|_| self.short(file))
    }

    /// Renders with colours onto a terminal writer.
    pub fn render_to(
        &self,
        file: &SourceFile,
        out: &mut dyn term::WriteStyle,
    ) -> Result<(), codespan_reporting::files::Error> {
        let (files, diag) = self.to_codespan(file);
        term::emit_to_write_style(out, &term::Config::default(), &files, &diag)
    }

    /// One line: `path:line:col: error: message`.
    pub fn short(&self, file: &SourceFile) -> String {
        format!("{}: error: {}", file.location(self.span), self.kind)
    }

    fn to_codespan<'a>(
        &self,
        file: &'a SourceFile,
    ) -> (SimpleFile<&'a str, &'a str>, CsDiagnostic<()>) {
        let files = SimpleFile::new(file.name(), file.text());
        let mut labels =
            vec![CsLabel::primary((), clamp(self.span, file)).with_message(self.label.clone())];
        labels.extend(
            self.labels.iter().map(|l| {
                CsLabel::secondary((), clamp(l.span, file)).with_message(l.message.clone())
            }),
        );
        let diag = CsDiagnostic::error()
            .with_message(self.kind.to_string())
            .with_labels(labels)
            .with_notes(self.notes.clone());
        (files, diag)
    }
}

/// Keeps a span inside the text and on character boundaries, so rendering never fails.
fn clamp(span: Span, file: &SourceFile) -> std::ops::Range<usize> {
    let text = file.text();
    let mut start = (span.start as usize).min(text.len());
    let mut end = (span.end as usize).clamp(start, text.len());
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    while !text.is_char_boundary(end) {
        end += 1;
    }
    start..end
}

/// The diagnostics of one file, in source order; an error value for library callers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostics<K = ErrorKind> {
    pub file: SourceFile,
    pub list: Vec<Diagnostic<K>>,
}

impl<K: fmt::Debug + fmt::Display> std::error::Error for Diagnostics<K> {}

impl<K: fmt::Display> Diagnostics<K> {
    /// All diagnostics rendered as plain text, separated by blank lines.
    pub fn render(&self) -> String {
        self.list
            .iter()
            .map(|d| d.render(&self.file))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl<K: fmt::Display> fmt::Display for Diagnostics<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.list.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{}", d.short(&self.file))?;
        }
        Ok(())
    }
}

impl PartialEq for SourceFile {
    fn eq(&self, other: &SourceFile) -> bool {
        self.name() == other.name() && self.text() == other.text()
    }
}
impl Eq for SourceFile {}

/// Edit distance, for "did you mean" notes. Bounded by [`MAX_SUGGEST_LEN`] and
/// [`MAX_SUGGEST_CANDIDATES`]; a candidate whose length differs from `name`'s by more than
/// the accepted distance is skipped without computing it.
pub fn did_you_mean<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    let n = name.chars().take(MAX_SUGGEST_LEN + 1).count();
    if n > MAX_SUGGEST_LEN {
        return None;
    }
    let mut best: Option<(usize, &str)> = None;
    for c in candidates.into_iter().take(MAX_SUGGEST_CANDIDATES) {
        let m = c.chars().take(MAX_SUGGEST_LEN + 1).count();
        let limit = (n.max(m) / 3).max(1);
        // The distance is at least the difference in length.
        if m > MAX_SUGGEST_LEN || n.abs_diff(m) > limit {
            continue;
        }
        let d = levenshtein(name, c);
        if d <= limit && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| format!("did you mean `{c}`?"))
}

/// Optimal string alignment distance: insertions, deletions, substitutions and swaps of
/// two neighbours each cost one, so `mni` is one edit from `min`.
fn levenshtein(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let w = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * w];
    for (i, row) in d.chunks_mut(w).enumerate() {
        row[0] = i;
    }
    for (j, cell) in d.iter_mut().take(w).enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[(i - 1) * w + j] + 1)
                .min(d[i * w + j - 1] + 1)
                .min(d[(i - 1) * w + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[(i - 2) * w + j - 2] + 1);
            }
            d[i * w + j] = v;
        }
    }
    d[a.len() * w + b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swaps_are_one_edit() {
        assert_eq!(levenshtein("mni", "min"), 1);
        assert_eq!(levenshtein("inptu", "input"), 1);
        assert_eq!(levenshtein("kitten", "sitting"), 3);
        assert_eq!(
            did_you_mean("itn", ["int", "bool"]).as_deref(),
            Some("did you mean `int`?")
        );
        assert_eq!(did_you_mean("zzz", ["int", "bool"]), None);
    }

    #[test]
    fn long_names_get_no_suggestion_and_no_table() {
        // 200 000 characters would need a 40 G-cell table; the bound returns at once.
        let long = "x".repeat(200_000);
        assert_eq!(did_you_mean(&long, [long.as_str()]), None);
        let at_limit = "y".repeat(MAX_SUGGEST_LEN);
        let near = format!("{}z", "y".repeat(MAX_SUGGEST_LEN - 1));
        assert_eq!(
            did_you_mean(&at_limit, [near.as_str()]).as_deref(),
            Some(format!("did you mean `{near}`?").as_str())
        );
        // Lengths too far apart are skipped: `ab` is not offered for `abcdefgh`.
        assert_eq!(did_you_mean("abcdefgh", ["ab"]), None);
        // Only the first candidates are compared.
        let many: Vec<String> = (0..MAX_SUGGEST_CANDIDATES)
            .map(|i| format!("q{i}"))
            .collect();
        let iter = many.iter().map(String::as_str).chain(["input"]);
        assert_eq!(did_you_mean("inptu", iter), None);
    }
}
