//! The parser: `.coll` text to [`crate::ast::Program`], built on nom 8 over `&str`.
//!
//! Positions are byte offsets computed from how much input remains, so every node gets an
//! exact [`Span`]. Statements are dispatched on their first word and commit (`cut`) after
//! it, so a failure reports what was expected at the furthest point reached. After an error
//! the parser resynchronises at the next `;` or `}` of the same nesting level and goes on,
//! so one file yields several diagnostics. Nesting (parentheses, unary operators, blocks,
//! and the depth of the expression tree) is bounded by [`MAX_DEPTH`], so hostile input ends
//! in a diagnostic, never a stack overflow.

use crate::ast::*;
use crate::builtins::{HEADER_HINTS, HEADER_ITEMS, is_keyword};
use crate::comments::comment_len;
use crate::diagnostic::{Diagnostic, ErrorKind, did_you_mean};
use crate::limits::MAX_TABLE_LEN;
use crate::source::Span;
use nom::bytes::complete::{take_while, take_while1};
use nom::error::ParseError;
use nom::{IResult, Parser as _};
use std::cell::{Cell, RefCell};

/// Deepest nesting of expressions and blocks accepted.
pub const MAX_DEPTH: usize = 256;
/// Diagnostics reported per file before giving up.
pub const MAX_ERRORS: usize = 50;

/// A parse failure at a position, with what was expected there.
#[derive(Clone, Debug)]
pub struct PError<'a> {
    at: &'a str,
    expected: Vec<&'static str>,
    /// A specific error that replaces the generic "expected ..." message.
    /// Boxed so the error type (returned everywhere) stays small.
    custom: Option<Box<Diagnostic>>,
}

impl<'a> PError<'a> {
    fn expected(at: &'a str, what: &'static str) -> Self {
        PError {
            at,
            expected: vec![what],
            custom: None,
        }
    }
}

impl<'a> ParseError<&'a str> for PError<'a> {
    fn from_error_kind(at: &'a str, _: nom::error::ErrorKind) -> Self {
        PError {
            at,
            expected: Vec::new(),
            custom: None,
        }
    }

    fn append(_: &'a str, _: nom::error::ErrorKind, other: Self) -> Self {
        other
    }

    /// Keeps the error that got furthest; merges expectations at the same place.
    fn or(mut self, other: Self) -> Self {
        match self.at.len().cmp(&other.at.len()) {
            std::cmp::Ordering::Less => self,
            std::cmp::Ordering::Greater => other,
            std::cmp::Ordering::Equal => {
                if self.custom.is_some() {
                    return self;
                }
                if other.custom.is_some() {
                    return other;
                }
                for e in other.expected {
                    if !self.expected.contains(&e) {
                        self.expected.push(e);
                    }
                }
                self
            }
        }
    }
}

type In<'a> = &'a str;
type PResult<'a, T> = IResult<In<'a>, T, PError<'a>>;

/// Parses a whole file. Returns every diagnostic found when the file is not valid.
pub fn parse(text: &str) -> Result<Program, Vec<Diagnostic>> {
    let p = Parser {
        src: text,
        depth: Cell::new(0),
        diags: RefCell::new(Vec::new()),
    };
    let items = p.top_items(text);
    let diags = p.diags.into_inner();
    if diags.is_empty() {
        Ok(Program {
            items,
            span: Span::new(0, text.len()),
        })
    } else {
        Err(diags)
    }
}

struct Parser<'a> {
    src: &'a str,
    depth: Cell<usize>,
    diags: RefCell<Vec<Diagnostic>>,
}

/// Restores the nesting depth when a nested parse returns.
struct DepthGuard<'p> {
    depth: &'p Cell<usize>,
}

impl Drop for DepthGuard<'_> {
    fn drop(&mut self) {
        self.depth.set(self.depth.get() - 1);
    }
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Operators and punctuation, longest first so `->` is never read as `-`.
const PUNCT: &[&str] = &[
    "->", "==", "!=", "<=", ">=", "<<", ">>", "..", "+", "-", "*", "/", "%", "&", "|", "^", "~",
    "<", ">", "=", "(", ")", "[", "]", "{", "}", ";", ",", ":",
];

impl<'a> Parser<'a> {
    fn off(&self, i: In<'a>) -> usize {
        self.src.len() - i.len()
    }

    fn span(&self, from: In<'a>, to: In<'a>) -> Span {
        Span::new(self.off(from), self.off(to))
    }

    fn fail<T>(&self, at: In<'a>, diag: Diagnostic) -> PResult<'a, T> {
        Err(nom::Err::Failure(PError {
            at,
            expected: Vec::new(),
            custom: Some(Box::new(diag)),
        }))
    }

    fn enter(&self, at: In<'a>) -> Result<DepthGuard<'_>, nom::Err<PError<'a>>> {
        let d = self.depth.get() + 1;
        if d > MAX_DEPTH {
            let off = self.off(at);
            return Err(nom::Err::Failure(PError {
                at,
                expected: Vec::new(),
                custom: Some(Box::new(
                    Diagnostic::new(
                        ErrorKind::TooDeep { limit: MAX_DEPTH },
                        Span::new(off, off + 1),
                    )
                    .with_label("too deep here"),
                )),
            }));
        }
        self.depth.set(d);
        Ok(DepthGuard { depth: &self.depth })
    }

    // ----- lexical -----

    /// Skips whitespace and comments.
    fn ws(&self, mut i: In<'a>) -> PResult<'a, ()> {
        loop {
            let (rest, _) = take_while(char::is_whitespace).parse(i)?;
            i = rest;
            match comment_len(i) {
                None => return Ok((i, ())),
                Some(Ok(len)) => i = &i[len..],
                Some(Err(_)) => {
                    let off = self.off(i);
                    return self.fail(
                        i,
                        Diagnostic::new(ErrorKind::UnterminatedComment, Span::new(off, off + 2))
                            .with_label("comment starts here")
                            .with_note("block comments nest: every `/*` needs its own `*/`"),
                    );
                }
            }
        }
    }

    /// A punctuation token, matched whole (so `-` does not match `->`).
    fn sym(&self, s: &'static str) -> impl Fn(In<'a>) -> PResult<'a, Span> + '_ {
        move |i| {
            let (i, _) = self.ws(i)?;
            match Self::punct_at(i) {
                Some(p) if p == s => {
                    let rest = &i[s.len()..];
                    Ok((rest, self.span(i, rest)))
                }
                _ => Err(nom::Err::Error(PError::expected(i, quoted(s)))),
            }
        }
    }

    fn punct_at(i: In<'a>) -> Option<&'static str> {
        PUNCT.iter().copied().find(|p| i.starts_with(p))
    }

    /// The next word (identifier or keyword) without consuming it.
    fn peek_word(&self, i: In<'a>) -> PResult<'a, Option<&'a str>> {
        let (i, _) = self.ws(i)?;
        if !i.starts_with(is_ident_start) {
            return Ok((i, None));
        }
        let end = i.find(|c: char| !is_ident_char(c)).unwrap_or(i.len());
        Ok((i, Some(&i[..end])))
    }

    fn kw(&self, k: &'static str) -> impl Fn(In<'a>) -> PResult<'a, Span> + '_ {
        move |i| {
            let (i, w) = self.peek_word(i)?;
            if w == Some(k) {
                let rest = &i[k.len()..];
                Ok((rest, self.span(i, rest)))
            } else {
                Err(nom::Err::Error(PError::expected(i, quoted(k))))
            }
        }
    }

    /// Any word, keywords included (used where keywords are just names, like `reduce`).
    fn word(&self, i: In<'a>) -> PResult<'a, Ident> {
        let (i, _) = self.ws(i)?;
        let (rest, w) = take_while1(is_ident_char)
            .parse(i)
            .map_err(|_: nom::Err<PError<'a>>| nom::Err::Error(PError::expected(i, "a name")))?;
        if !w.starts_with(is_ident_start) {
            return Err(nom::Err::Error(PError::expected(i, "a name")));
        }
        Ok((
            rest,
            Ident {
                name: w.to_string(),
                span: self.span(i, rest),
            },
        ))
    }

    fn ident(&self, i: In<'a>) -> PResult<'a, Ident> {
        let (rest, id) = self.word(i)?;
        if is_keyword(&id.name) {
            let (i, _) = self.ws(i)?;
            return Err(nom::Err::Error(PError::expected(i, "a name")));
        }
        Ok((rest, id))
    }

    fn int(&self, i: In<'a>) -> PResult<'a, i64> {
        let (i, _) = self.ws(i)?;
        let (rest, text) = if let Some(hex) = i.strip_prefix("0x").or_else(|| i.strip_prefix("0X"))
        {
            let (rest, _) = take_while1(|c: char| c.is_ascii_hexdigit() || c == '_')
                .parse(hex)
                .map_err(|_: nom::Err<PError<'a>>| {
                    nom::Err::Failure(PError::expected(hex, "hexadecimal digits"))
                })?;
            (rest, &i[..i.len() - rest.len()])
        } else {
            let (rest, _) = take_while1(|c: char| c.is_ascii_digit() || c == '_').parse(i)?;
            if !i.starts_with(|c: char| c.is_ascii_digit()) {
                return Err(nom::Err::Error(PError::expected(i, "a number")));
            }
            (rest, &i[..i.len() - rest.len()])
        };
        match int_literal(text) {
            Ok(v) => Ok((rest, v)),
            Err(_) => self.fail(
                i,
                Diagnostic::new(
                    ErrorKind::IntegerTooLarge(text.to_string()),
                    self.span(i, rest),
                )
                .with_label("too large")
                .with_note(format!("the largest integer is {}", i64::MAX)),
            ),
        }
    }
}

/// Runs `f` with at least 128 KiB of stack left, switching to a fresh heap segment if not.
pub fn grow<R>(f: impl FnOnce() -> R) -> R {
    stacker::maybe_grow(128 * 1024, 2 * 1024 * 1024, f)
}

fn quoted(s: &'static str) -> &'static str {
    // Static strings for every token we ever expect, so errors stay allocation-free.
    match s {
        "->" => "`->`",
        "==" => "`==`",
        "!=" => "`!=`",
        "<=" => "`<=`",
        ">=" => "`>=`",
        "<<" => "`<<`",
        ">>" => "`>>`",
        ".." => "`..`",
        "+" => "`+`",
        "-" => "`-`",
        "*" => "`*`",
        "/" => "`/`",
        "%" => "`%`",
        "&" => "`&`",
        "|" => "`|`",
        "^" => "`^`",
        "~" => "`~`",
        "<" => "`<`",
        ">" => "`>`",
        "=" => "`=`",
        "(" => "`(`",
        ")" => "`)`",
        "[" => "`[`",
        "]" => "`]`",
        "{" => "`{`",
        "}" => "`}`",
        ";" => "`;`",
        "," => "`,`",
        ":" => "`:`",
        "collective" => "`collective`",
        "fn" => "`fn`",
        "let" => "`let`",
        "for" => "`for`",
        "in" => "`in`",
        "step" => "`step`",
        "while" => "`while`",
        "if" => "`if`",
        "else" => "`else`",
        "return" => "`return`",
        "assert" => "`assert`",
        "copy" => "`copy`",
        "then" => "`then`",
        "reduce" => "`reduce`",
        "via" => "`via`",
        "with" => "`with`",
        "expect" => "`expect`",
        "not" => "`not`",
        _ => "a token",
    }
}

/// The value of an integer literal's text: `_` separators are ignored, `0x`/`0X` starts a
/// hexadecimal one. Fails when the value does not fit an `i64` (or the text is not digits).
pub(crate) fn int_literal(text: &str) -> Result<i64, std::num::ParseIntError> {
    let digits: String = text.chars().filter(|&c| c != '_').collect();
    match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(h) => i64::from_str_radix(h, 16),
        None => digits.parse::<i64>(),
    }
}

/// What the text at a position looks like, for "found ..." and the caret's length.
fn describe(at: &str) -> (String, usize) {
    let Some(c) = at.chars().next() else {
        return ("end of file".to_string(), 0);
    };
    if is_ident_char(c) {
        let end = at.find(|c: char| !is_ident_char(c)).unwrap_or(at.len());
        let w = &at[..end];
        let what = if is_keyword(w) { "keyword" } else { "" };
        let shown = if end > 40 { &w[..40] } else { w };
        let text = if what.is_empty() {
            format!("`{shown}`")
        } else {
            format!("{what} `{shown}`")
        };
        return (text, end);
    }
    if let Some(p) = Parser::punct_at(at) {
        return (format!("`{p}`"), p.len());
    }
    if c.is_control() {
        return (format!("character U+{:04X}", c as u32), c.len_utf8());
    }
    (format!("`{c}`"), c.len_utf8())
}

fn join_alternatives(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => (*one).to_string(),
        [rest @ .., last] => format!("{} or {}", rest.join(", "), last),
    }
}

mod exprs;
mod items;
mod stmts;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrow_is_not_minus() {
        let p = parse("collective allreduce r(n) { chunks 1; }\ncopy input[0][0] -> input[1];\n")
            .expect("parses");
        assert_eq!(p.items.len(), 2);
    }

    #[test]
    fn recovers_after_errors() {
        let errs =
            parse("collective allreduce r(n) { chunks 1; }\nlet = 1;\nlet y = ;\nlet z = 3;\n")
                .expect_err("two errors");
        assert_eq!(errs.len(), 2, "{errs:?}");
    }

    #[test]
    fn tables_are_bounded() {
        let at_limit = format!("let t = [{}];", vec!["1"; MAX_TABLE_LEN].join(","));
        assert!(parse(&at_limit).is_ok());
        let over = format!("let t = [{}];", vec!["1"; MAX_TABLE_LEN + 1].join(","));
        let errs = parse(&over).expect_err("too long");
        assert_eq!(
            errs[0].kind,
            ErrorKind::TableTooLong {
                limit: MAX_TABLE_LEN
            }
        );
        // The caret is on the first element past the limit.
        assert_eq!(errs[0].span.start as usize, over.len() - 3);
    }

    #[test]
    fn break_and_continue_are_one_error_each() {
        let errs = parse("while true { break; }\nfor i in 0..2 { continue; let x = 1; }\n")
            .expect_err("unsupported");
        let kinds: Vec<_> = errs.iter().map(|d| d.kind.clone()).collect();
        assert_eq!(
            kinds,
            vec![
                ErrorKind::Unsupported {
                    what: "break".into()
                },
                ErrorKind::Unsupported {
                    what: "continue".into()
                },
            ]
        );
        assert!(parse("let break = 1;\nbreak = 2;").is_err());
        assert!(parse("let x = 1;\ncopy = 2;\nstep = 3;").is_ok());
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let src = format!("let x = {}1{};", "(".repeat(100_000), ")".repeat(100_000));
        let errs = parse(&src).expect_err("too deep");
        assert!(matches!(errs[0].kind, ErrorKind::TooDeep { .. }));
        let src = format!("let x = 1{};", " + 1".repeat(100_000));
        assert!(parse(&src).is_err());
        let src = format!("let x = {}1;", "- ".repeat(100_000));
        assert!(parse(&src).is_err());
        let src = format!(
            "let x = {}1{};",
            "if true then ".repeat(100_000),
            " else 2".repeat(100_000)
        );
        assert!(matches!(
            parse(&src).expect_err("too deep")[0].kind,
            ErrorKind::TooDeep { .. }
        ));
        let src = format!("let x = {}1{};", "[".repeat(100_000), "]".repeat(100_000));
        assert!(matches!(
            parse(&src).expect_err("too deep")[0].kind,
            ErrorKind::TooDeep { .. }
        ));
    }
}
