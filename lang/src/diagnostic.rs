//! Diagnostics: typed errors with a primary span, extra labels and notes, rendered with
//! codespan-reporting as `error: message` followed by `┌─ path:line:col` and an excerpt.
//!
//! Every diagnostic has a primary span inside the file it is reported against; the
//! rendering never contains colours unless asked for and never an absolute path unless the
//! file was named by one. A line of more than [`MAX_EXCERPT_CHARS`] characters is shown as
//! a window of that many around its label, with `…` where it was cut (so a diagnostic's size
//! does not grow with the line's), while `path:line:col` stays that of the original text.

use crate::limits::{MAX_EXCERPT_CHARS, MAX_SUGGEST_CANDIDATES, MAX_SUGGEST_LEN};
use crate::source::{SourceFile, Span};
use codespan_reporting::diagnostic::{Diagnostic as CsDiagnostic, Label as CsLabel};
use codespan_reporting::files::{Files, SimpleFile};
use codespan_reporting::term;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;

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

    fn to_codespan<'a>(&self, file: &'a SourceFile) -> (Excerpts<'a>, CsDiagnostic<()>) {
        let mut ranges = vec![clamp(self.span, file)];
        ranges.extend(self.labels.iter().map(|l| clamp(l.span, file)));
        let (files, ranges) = Excerpts::new(file, ranges);
        let mut ranges = ranges.into_iter();
        let primary = ranges.next().unwrap_or(0..0);
        let mut labels = vec![CsLabel::primary((), primary).with_message(self.label.clone())];
        labels.extend(
            self.labels
                .iter()
                .zip(ranges)
                .map(|(l, r)| CsLabel::secondary((), r).with_message(l.message.clone())),
        );
        let diag = CsDiagnostic::error()
            .with_message(self.kind.to_string())
            .with_labels(labels)
            .with_notes(self.notes.clone());
        (files, diag)
    }
}

/// Keeps a span inside the text and on character boundaries, so rendering never fails.
fn clamp(span: Span, file: &SourceFile) -> Range<usize> {
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

/// The text codespan renders one diagnostic from: the file itself, or, where it has lines
/// of more than [`MAX_EXCERPT_CHARS`] characters, a copy in which each such line is cut to
/// a window of that many characters (around the first label that starts or ends on it,
/// else its beginning) with `…` on each cut side. Lines keep their indices, so line numbers
/// are unchanged, and [`Files::column_number`] answers with the original columns.
struct Excerpts<'a> {
    file: SimpleFile<&'a str, Cow<'a, str>>,
    /// Per cut line (by index): its start in the copy, the bytes of the `…` before the
    /// window (0 or 3), and the characters of the original line before the window.
    cuts: BTreeMap<usize, (usize, usize, usize)>,
}

/// Marks where a line was cut.
const CUT: &str = "…";

impl<'a> Excerpts<'a> {
    /// The view of `file` and `ranges` (clamped to the text, primary first) moved into it.
    fn new(file: &'a SourceFile, ranges: Vec<Range<usize>>) -> (Excerpts<'a>, Vec<Range<usize>>) {
        let text = file.text();
        let starts = file.line_starts();
        // The end of line `i`'s content (before its newline).
        let content_end = |i: usize| {
            starts
                .get(i + 1)
                .map_or(text.len(), |&next| next.saturating_sub(1))
        };
        // Characters are at most bytes: a line of few bytes needs no counting.
        let long = |i: usize| {
            let line = &text[starts[i]..content_end(i)];
            line.len() > MAX_EXCERPT_CHARS && line.chars().count() > MAX_EXCERPT_CHARS
        };
        let line_of = |p: usize| starts.partition_point(|&s| s <= p).saturating_sub(1);
        let long_lines: Vec<usize> = (0..starts.len()).filter(|&i| long(i)).collect();
        if long_lines.is_empty() {
            let view = Excerpts {
                file: SimpleFile::new(file.name(), Cow::Borrowed(text)),
                cuts: BTreeMap::new(),
            };
            return (view, ranges);
        }
        // Each long line's window, in bytes of the original: around its first label boundary.
        let mut windows: BTreeMap<usize, Range<usize>> = BTreeMap::new();
        for p in ranges.iter().flat_map(|r| [r.start, r.end]) {
            let i = line_of(p);
            if windows.contains_key(&i) || long_lines.binary_search(&i).is_err() {
                continue;
            }
            windows.insert(i, window(text, starts[i]..content_end(i), p));
        }
        for &i in &long_lines {
            windows
                .entry(i)
                .or_insert_with(|| window(text, starts[i]..content_end(i), starts[i]));
        }
        let mut copy = String::with_capacity(text.len().min(1 << 20));
        let mut cuts = BTreeMap::new();
        // Per line: (its start in the original, its start in the copy) and its window.
        let mut placed: Vec<(usize, usize)> = Vec::with_capacity(starts.len());
        let mut last = 0;
        for (&i, w) in &windows {
            // The lines before `i` are copied as they are.
            copy.push_str(&text[last..starts[i]]);
            let at = copy.len();
            let prefix = if w.start > starts[i] { CUT.len() } else { 0 };
            if prefix > 0 {
                copy.push_str(CUT);
            }
            copy.push_str(&text[w.clone()]);
            if w.end < content_end(i) {
                copy.push_str(CUT);
            }
            let before = text[starts[i]..w.start].chars().count();
            cuts.insert(i, (at, prefix, before));
            placed.push((i, at));
            last = content_end(i);
        }
        copy.push_str(&text[last..]);
        let moved = |p: usize| {
            let i = line_of(p);
            match windows.get(&i) {
                Some(w) => {
                    let (at, prefix, _) = cuts[&i];
                    at + prefix + (p.clamp(w.start, w.end) - w.start)
                }
                None => {
                    // Shifted by what the cut lines before it lost or gained.
                    let k = placed.partition_point(|&(j, _)| j < i);
                    match k.checked_sub(1).map(|k| placed[k]) {
                        None => p,
                        Some((j, _)) => {
                            let (at, prefix, _) = cuts[&j];
                            let w = &windows[&j];
                            let suffix = if w.end < content_end(j) { CUT.len() } else { 0 };
                            let end_in_copy = at + prefix + (w.end - w.start) + suffix;
                            end_in_copy + (p - content_end(j))
                        }
                    }
                }
            }
        };
        let ranges = ranges
            .into_iter()
            .map(|r| moved(r.start)..moved(r.end))
            .collect();
        let view = Excerpts {
            file: SimpleFile::new(file.name(), Cow::Owned(copy)),
            cuts,
        };
        (view, ranges)
    }
}

/// A window of [`MAX_EXCERPT_CHARS`] characters of the line `line` (byte range of its
/// content) that holds byte `p`, a third of it before `p`. Walks characters from `p`, so
/// its cost does not depend on the line's length.
fn window(text: &str, line: Range<usize>, p: usize) -> Range<usize> {
    let back = |mut b: usize, mut k: usize| {
        while k > 0 && b > line.start {
            b -= 1;
            while !text.is_char_boundary(b) {
                b -= 1;
            }
            k -= 1;
        }
        b
    };
    let start = back(p.clamp(line.start, line.end), MAX_EXCERPT_CHARS / 3);
    let (mut end, mut k) = (start, MAX_EXCERPT_CHARS);
    while k > 0 && end < line.end {
        end += 1;
        while !text.is_char_boundary(end) {
            end += 1;
        }
        k -= 1;
    }
    // Near the end of the line, the window reaches further back instead.
    back(start, k)..end
}

impl<'a> Files<'a> for Excerpts<'_> {
    type FileId = ();
    type Name = &'a str;
    type Source = &'a str;

    fn name(&'a self, _: ()) -> Result<&'a str, codespan_reporting::files::Error> {
        Ok(self.file.name())
    }

    fn source(&'a self, _: ()) -> Result<&'a str, codespan_reporting::files::Error> {
        Ok(self.file.source().as_ref())
    }

    fn line_index(
        &'a self,
        id: (),
        byte: usize,
    ) -> Result<usize, codespan_reporting::files::Error> {
        self.file.line_index(id, byte)
    }

    fn line_range(
        &'a self,
        id: (),
        line: usize,
    ) -> Result<Range<usize>, codespan_reporting::files::Error> {
        self.file.line_range(id, line)
    }

    fn column_number(
        &'a self,
        id: (),
        line: usize,
        byte: usize,
    ) -> Result<usize, codespan_reporting::files::Error> {
        let source = self.file.source().as_ref();
        let range = self.file.line_range(id, line)?;
        Ok(match self.cuts.get(&line) {
            Some(&(at, prefix, before)) => {
                let from = at + prefix;
                before
                    + codespan_reporting::files::column_index(
                        source,
                        from..range.end,
                        byte.max(from),
                    )
                    + 1
            }
            None => codespan_reporting::files::column_index(source, range, byte) + 1,
        })
    }
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

    fn rendered(text: &str, span: Span, secondary: Option<Span>) -> String {
        let file = SourceFile::new("t.coll", text);
        let mut d = Diagnostic::new(ErrorKind::MissingChunks, span).with_label("here");
        if let Some(s) = secondary {
            d = d.with_secondary(s, "and here");
        }
        d.render(&file)
    }

    #[test]
    fn long_lines_are_cut_around_the_label_and_keep_their_location() {
        // Line 2: 300 `a`, then `bad`, then 300 `c`; the label is on `bad` at column 301.
        let line = format!("{}bad{}", "a".repeat(300), "c".repeat(300));
        let text = format!("first\n{line}\nlast\n");
        let at = 6 + 300;
        let out = rendered(&text, Span::new(at, at + 3), Some(Span::new(0, 5)));
        let window = format!("…{}bad{}…", "a".repeat(40), "c".repeat(77));
        assert_eq!(
            out,
            format!(
                "error: header has no `chunks` item\n  ┌─ t.coll:2:301\n  │\n1 │ first\n  │ ----- and here\n2 │ {window}\n  │ {}^^^ here\n\n",
                " ".repeat(41)
            )
        );
        // A label spanning the cut runs to the marker; the line after is untouched.
        let out = rendered(
            &text,
            Span::new(at, at + 200),
            Some(Span::new(6 + 604, 6 + 608)),
        );
        assert!(out.contains(&format!("2 │ {window}\n")), "{out}");
        assert!(
            out.contains(&format!("  │ {}{} here", " ".repeat(41), "^".repeat(80))),
            "{out}"
        );
        assert!(out.contains("3 │ last\n  │ ---- and here"), "{out}");
        // At the start of a line only the end is cut; a short line is not cut at all.
        let out = rendered(&line, Span::new(0, 1), None);
        assert!(
            out.contains(&format!("1 │ {}…\n", "a".repeat(120))),
            "{out}"
        );
        let short = "x".repeat(MAX_EXCERPT_CHARS);
        let out = rendered(&short, Span::new(119, 120), None);
        assert!(out.contains(&format!("1 │ {short}\n")), "{out}");
    }

    #[test]
    fn a_diagnostic_on_a_15_mb_line_stays_small() {
        // Multi-byte characters: the column counts characters, the cut keeps boundaries.
        let text = "é".repeat(7_500_000);
        let at = 2 * 5_000_000;
        let out = rendered(&text, Span::new(at, at + 2), None);
        assert!(out.len() < 1000, "{} bytes", out.len());
        assert!(out.contains("┌─ t.coll:1:5000001\n"), "{out}");
        assert!(
            out.contains(&format!("│ {}^ here", " ".repeat(41))),
            "{out}"
        );
    }
}
