//! The header's tokens and constant expressions: C's integer types, literals and arithmetic,
//! as far as `abi.h` may use them. Every value is computed in `i128` and must fit its C type:
//! an overflow in the header is a mistake, not C's wrap-around, except through a cast.

use super::{GenError, err};
use std::collections::HashMap;
use std::fmt;

/// The fixed-width integer types, the only scalars the header may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scalar {
    U8,
    U16,
    U32,
    U64,
    I8,
    I16,
    I32,
    I64,
}

impl Scalar {
    pub(crate) const ALL: [Scalar; 8] = [
        Scalar::U8,
        Scalar::U16,
        Scalar::U32,
        Scalar::U64,
        Scalar::I8,
        Scalar::I16,
        Scalar::I32,
        Scalar::I64,
    ];

    /// Its name, in the header and in Rust alike.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Scalar::U8 => "u8",
            Scalar::U16 => "u16",
            Scalar::U32 => "u32",
            Scalar::U64 => "u64",
            Scalar::I8 => "i8",
            Scalar::I16 => "i16",
            Scalar::I32 => "i32",
            Scalar::I64 => "i64",
        }
    }

    /// The C type a typedef of it must name (as NVRTC's 64-bit device sizes them).
    pub(crate) fn c_spelling(self) -> &'static str {
        match self {
            Scalar::U8 => "unsigned char",
            Scalar::U16 => "unsigned short",
            Scalar::U32 => "unsigned int",
            Scalar::U64 => "unsigned long long",
            Scalar::I8 => "signed char",
            Scalar::I16 => "short",
            Scalar::I32 => "int",
            Scalar::I64 => "long long",
        }
    }

    /// Size in bytes, which is also its alignment.
    pub(crate) fn size(self) -> u64 {
        match self {
            Scalar::U8 | Scalar::I8 => 1,
            Scalar::U16 | Scalar::I16 => 2,
            Scalar::U32 | Scalar::I32 => 4,
            Scalar::U64 | Scalar::I64 => 8,
        }
    }

    pub(crate) fn signed(self) -> bool {
        matches!(self, Scalar::I8 | Scalar::I16 | Scalar::I32 | Scalar::I64)
    }

    pub(crate) fn range(self) -> (i128, i128) {
        let bits = 8 * self.size() as u32;
        if self.signed() {
            (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
        } else {
            (0, (1i128 << bits) - 1)
        }
    }

    /// `v` reduced to this type as a C cast does (two's complement wrap).
    pub(crate) fn wrap(self, v: i128) -> i128 {
        let bits = 8 * self.size() as u32;
        let m = v & ((1i128 << bits) - 1);
        if self.signed() && m >= 1i128 << (bits - 1) {
            m - (1i128 << bits)
        } else {
            m
        }
    }
}

/// The C type of a constant expression: `int` (an unsuffixed literal) or a fixed-width type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CType {
    Int,
    Fixed(Scalar),
}

impl CType {
    /// The type arithmetic happens in: narrower types promote to int, as in C.
    pub(crate) fn promoted(self) -> Scalar {
        match self {
            CType::Fixed(s) if s.size() >= 4 => s,
            _ => Scalar::I32,
        }
    }
}

/// The usual arithmetic conversions of two operands.
pub(crate) fn common(a: CType, b: CType) -> Scalar {
    let (a, b) = (a.promoted(), b.promoted());
    if a.size() != b.size() {
        return if a.size() > b.size() { a } else { b };
    }
    if !a.signed() { a } else { b }
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Tok {
    Ident(String),
    /// A literal's value and its type (from its suffix).
    Int(i128, CType),
    Str,
    Punct(&'static str),
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Ident(s) => write!(f, "`{s}`"),
            Tok::Int(v, _) => write!(f, "`{v}`"),
            Tok::Str => write!(f, "a string"),
            Tok::Punct(p) => write!(f, "`{p}`"),
        }
    }
}

pub(crate) const PUNCT: [&str; 23] = [
    "<<", ">>", "==", "(", ")", "{", "}", "[", "]", ";", ",", "=", ":", "+", "-", "*", "/", "&",
    "|", "~", "#", "<", ">",
];

/// Splits a line (its comment already cut off) into tokens.
pub(crate) fn tokenize(text: &str, line: usize) -> Result<Vec<Tok>, GenError> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(Tok::Ident(text[s..i].to_string()));
        } else if c.is_ascii_digit() {
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(literal(&text[s..i], line)?);
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            if i >= b.len() {
                return err(line, "unterminated string");
            }
            i += 1;
            out.push(Tok::Str);
        } else if let Some(p) = PUNCT.iter().find(|p| text[i..].starts_with(**p)) {
            out.push(Tok::Punct(p));
            i += p.len();
        } else {
            let ch = text[i..].chars().next().unwrap_or('?');
            return err(line, format!("unexpected character `{ch}`"));
        }
    }
    Ok(out)
}

/// An integer literal: decimal or `0x` hex, with no suffix (int), `u` (u32), `ull` (u64) or
/// `ll` (i64).
pub(crate) fn literal(s: &str, line: usize) -> Result<Tok, GenError> {
    let lower = s.to_ascii_lowercase();
    let (digits, radix) = match lower.strip_prefix("0x") {
        Some(h) => (h, 16),
        None => (lower.as_str(), 10),
    };
    let end = digits
        .find(|c: char| !c.is_digit(radix))
        .unwrap_or(digits.len());
    let (num, suffix) = digits.split_at(end);
    let v = i128::from_str_radix(num, radix).map_err(|_| GenError {
        line,
        msg: format!("bad integer literal `{s}`"),
    })?;
    // C's rule: the first type of the suffix's list that holds the value (hex literals may
    // also take the unsigned type of each width).
    use Scalar::{I32, I64, U32, U64};
    let candidates: &[Scalar] = match (suffix, radix) {
        ("", 10) => &[I32, I64],
        ("", _) => &[I32, U32, I64, U64],
        ("u", _) => &[U32, U64],
        ("ll", 10) => &[I64],
        ("ll", _) => &[I64, U64],
        ("ull", _) => &[U64],
        _ => {
            return err(
                line,
                format!("literal `{s}`: only the suffixes u, ll and ull are supported"),
            );
        }
    };
    let Some(&t) = candidates.iter().find(|t| v <= t.range().1) else {
        return err(line, format!("literal `{s}` is too large"));
    };
    let ty = if t == I32 {
        CType::Int
    } else {
        CType::Fixed(t)
    };
    Ok(Tok::Int(v, ty))
}

/// A `#define` the header made: its value and type.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Value {
    pub(crate) v: i128,
    pub(crate) ty: CType,
}

/// A recursive-descent reader of one constant expression, with C's precedence: `|`, `&`,
/// shifts, `+ -`, `* /`, then unary `- ~` and casts.
pub(crate) struct Expr<'a> {
    pub(crate) toks: &'a [Tok],
    pub(crate) at: usize,
    pub(crate) line: usize,
    pub(crate) defines: &'a HashMap<String, Value>,
    pub(crate) types: &'a HashMap<String, Scalar>,
}

impl Expr<'_> {
    pub(crate) fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at)
    }

    pub(crate) fn eat(&mut self, p: &str) -> bool {
        if matches!(self.peek(), Some(Tok::Punct(q)) if *q == p) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    pub(crate) fn expect(&mut self, p: &str) -> Result<(), GenError> {
        if self.eat(p) {
            return Ok(());
        }
        match self.peek() {
            Some(t) => err(self.line, format!("expected `{p}`, found {t}")),
            None => err(self.line, format!("expected `{p}` at the end of the line")),
        }
    }

    /// The result of `op` in type `ty`, which must hold it (overflow is a mistake here).
    pub(crate) fn fit(&self, v: i128, ty: Scalar) -> Result<Value, GenError> {
        let (lo, hi) = ty.range();
        if v < lo || v > hi {
            return err(self.line, format!("the value {v} overflows {}", ty.name()));
        }
        let ty = if ty == Scalar::I32 {
            CType::Int
        } else {
            CType::Fixed(ty)
        };
        Ok(Value { v, ty })
    }

    pub(crate) fn or(&mut self) -> Result<Value, GenError> {
        let mut a = self.and()?;
        while self.eat("|") {
            let b = self.and()?;
            let t = common(a.ty, b.ty);
            a = self.fit(t.wrap(a.v) | t.wrap(b.v), t)?;
        }
        Ok(a)
    }

    pub(crate) fn and(&mut self) -> Result<Value, GenError> {
        let mut a = self.shift()?;
        while self.eat("&") {
            let b = self.shift()?;
            let t = common(a.ty, b.ty);
            a = self.fit(t.wrap(a.v) & t.wrap(b.v), t)?;
        }
        Ok(a)
    }

    pub(crate) fn shift(&mut self) -> Result<Value, GenError> {
        let mut a = self.sum()?;
        loop {
            let left = if self.eat("<<") {
                true
            } else if self.eat(">>") {
                false
            } else {
                return Ok(a);
            };
            let b = self.sum()?;
            let t = a.ty.promoted();
            let bits = 8 * t.size() as i128;
            if b.v < 0 || b.v >= bits || a.v < 0 {
                return err(
                    self.line,
                    format!("shift of {} by {} in {}", a.v, b.v, t.name()),
                );
            }
            let v = if left { a.v << b.v } else { a.v >> b.v };
            a = self.fit(v, t)?;
        }
    }

    pub(crate) fn sum(&mut self) -> Result<Value, GenError> {
        let mut a = self.product()?;
        loop {
            let plus = if self.eat("+") {
                true
            } else if self.eat("-") {
                false
            } else {
                return Ok(a);
            };
            let b = self.product()?;
            let t = common(a.ty, b.ty);
            a = self.fit(if plus { a.v + b.v } else { a.v - b.v }, t)?;
        }
    }

    pub(crate) fn product(&mut self) -> Result<Value, GenError> {
        let mut a = self.unary()?;
        loop {
            let times = if self.eat("*") {
                true
            } else if self.eat("/") {
                false
            } else {
                return Ok(a);
            };
            let b = self.unary()?;
            let t = common(a.ty, b.ty);
            let v = if times {
                a.v * b.v
            } else if b.v == 0 {
                return err(self.line, "division by zero");
            } else {
                // C truncates toward zero, as i128 division does.
                a.v / b.v
            };
            a = self.fit(v, t)?;
        }
    }

    pub(crate) fn unary(&mut self) -> Result<Value, GenError> {
        if self.eat("-") {
            let a = self.unary()?;
            let t = a.ty.promoted();
            return self.fit(t.wrap(-a.v), t);
        }
        if self.eat("~") {
            let a = self.unary()?;
            let t = a.ty.promoted();
            return self.fit(t.wrap(!a.v), t);
        }
        if self.eat("(") {
            // A cast: `(TYPE)` followed by an operand, converting as C does.
            if let (Some(Tok::Ident(name)), Some(Tok::Punct(")"))) =
                (self.toks.get(self.at), self.toks.get(self.at + 1))
                && let Some(&s) = self.types.get(name)
            {
                self.at += 2;
                let a = self.unary()?;
                return Ok(Value {
                    v: s.wrap(a.v),
                    ty: CType::Fixed(s),
                });
            }
            let a = self.or()?;
            self.expect(")")?;
            return Ok(a);
        }
        match self.peek().cloned() {
            Some(Tok::Int(v, ty)) => {
                self.at += 1;
                Ok(Value { v, ty })
            }
            Some(Tok::Ident(name)) => {
                self.at += 1;
                match self.defines.get(&name) {
                    Some(&v) => Ok(v),
                    None => err(
                        self.line,
                        format!("`{name}` is not a #define of an earlier line"),
                    ),
                }
            }
            Some(t) => err(self.line, format!("expected a value, found {t}")),
            None => err(self.line, "expected a value at the end of the line"),
        }
    }
}
