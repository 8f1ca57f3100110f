//! Comments: `// line` and nested `/* block */`.
//!
//! The parser skips comments as whitespace; the formatter needs them back, so they are
//! collected by a separate scan. Invariant: the scan and the parser agree on where every
//! comment starts and ends, because both use [`comment_len`].

use crate::source::Span;

/// One comment in the source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Comment {
    pub span: Span,
    /// Nothing but whitespace precedes it on its line.
    pub own_line: bool,
    /// A `//` comment (runs to the end of its line).
    pub line: bool,
}

/// Length in bytes of the comment starting at `s`, `None` when `s` does not start with
/// one, `Err(len)` when a block comment is not terminated (it then runs to the end).
pub fn comment_len(s: &str) -> Option<Result<usize, usize>> {
    let b = s.as_bytes();
    if b.starts_with(b"//") {
        return Some(Ok(s.find('\n').unwrap_or(s.len())));
    }
    if !b.starts_with(b"/*") {
        return None;
    }
    let mut depth = 0usize;
    let mut i = 0;
    while i + 1 < b.len() {
        match (b[i], b[i + 1]) {
            (b'/', b'*') => {
                depth += 1;
                i += 2;
            }
            (b'*', b'/') => {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    return Some(Ok(i));
                }
            }
            _ => i += 1,
        }
    }
    Some(Err(s.len()))
}

/// Every comment of `text`, in order.
pub fn scan(text: &str) -> Vec<Comment> {
    let mut out = Vec::new();
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/'
            && let Some(len) = comment_len(&text[i..])
        {
            let len = len.unwrap_or_else(|l| l);
            let line_start = text[..i].rfind('\n').map_or(0, |p| p + 1);
            let own_line = text[line_start..i].trim().is_empty();
            out.push(Comment {
                span: Span::new(i, i + len),
                own_line,
                line: b[i + 1] == b'/',
            });
            i += len;
            continue;
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_block_and_line() {
        let t = "a /* x /* y */ z */ b // c\n  // d\n";
        let c = scan(t);
        assert_eq!(c.len(), 3);
        assert_eq!(&t[c[0].span.range()], "/* x /* y */ z */");
        assert!(!c[0].own_line);
        assert_eq!(&t[c[1].span.range()], "// c");
        assert!(c[2].own_line && c[2].line);
    }

    #[test]
    fn unterminated_runs_to_end() {
        assert_eq!(comment_len("/* a /* b */"), Some(Err(12)));
    }
}
