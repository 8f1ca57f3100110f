//! The header's items, read line by line and laid out by C's rules, with no padding allowed.

use super::expr::{CType, Expr, Scalar, Tok, Value, tokenize};
use super::{GenError, err};
use std::collections::HashMap;

/// One field's type: a scalar or an earlier struct, maybe an array of them.
#[derive(Clone, Debug)]
pub(crate) struct Field {
    pub(crate) name: String,
    pub(crate) docs: Vec<String>,
    pub(crate) elem: Elem,
    /// Array length: its source (a literal or a #define) and value.
    pub(crate) len: Option<(String, u64)>,
    /// Where the header declares it.
    pub(crate) line: usize,
}

#[derive(Clone, Debug)]
pub(crate) enum Elem {
    Scalar(Scalar),
    Struct(String),
}

#[derive(Clone, Debug)]
pub(crate) struct Struct {
    pub(crate) name: String,
    pub(crate) docs: Vec<String>,
    pub(crate) fields: Vec<Field>,
    pub(crate) line: usize,
    /// Offsets of the fields, size and alignment, once laid out.
    pub(crate) offsets: Vec<u64>,
    pub(crate) size: u64,
    pub(crate) align: u64,
    /// Whether its `static_assert(sizeof ..)` has been seen.
    pub(crate) asserted: bool,
}

impl Struct {
    /// The error at `line` of a struct whose size is not asserted by then.
    fn unasserted_at(&self, line: usize) -> GenError {
        GenError {
            line,
            msg: format!(
                "struct {0} (line {1}) must be followed by \
                 `static_assert(sizeof({0}) == {2}, \"{0}\");`",
                self.name, self.line, self.size
            ),
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Enum {
    pub(crate) name: String,
    pub(crate) docs: Vec<String>,
    pub(crate) ty: Scalar,
    /// The `PREFIX_` every enumerator starts with (set by the first).
    pub(crate) prefix: String,
    /// (Rust variant name, value, docs).
    pub(crate) variants: Vec<(String, i128, Vec<String>)>,
}

#[derive(Clone, Debug)]
pub(crate) enum Item {
    Define {
        name: String,
        docs: Vec<String>,
        value: Value,
    },
    Enum(Enum),
    Struct(Struct),
}

/// Where the reader is: at the top level, or inside an enum or struct body.
pub(crate) enum State {
    Top,
    InEnum(Enum, usize),
    InStruct(Struct),
}

/// The header's items, in order, read and laid out.
#[derive(Default)]
pub(crate) struct Header {
    pub(crate) items: Vec<Item>,
    pub(crate) types: HashMap<String, Scalar>,
    pub(crate) defines: HashMap<String, Value>,
    /// Index in `items` of each struct.
    pub(crate) structs: HashMap<String, usize>,
    /// Every name the header defines (types, constants, enumerators, structs), with its line.
    pub(crate) names: HashMap<String, usize>,
}

pub(crate) const RUST_KEYWORDS: [&str; 38] = [
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern",
    "false", "fn", "for", "gen", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut",
    "pub", "ref", "return", "self", "static", "struct", "super", "trait", "true", "type", "unsafe",
    "use", "where", "while",
];

impl Header {
    pub(crate) fn declare(&mut self, name: &str, line: usize) -> Result<(), GenError> {
        if let Some(first) = self.names.insert(name.to_string(), line) {
            return err(line, format!("`{name}` is already defined on line {first}"));
        }
        Ok(())
    }

    pub(crate) fn expr(&self, toks: &[Tok], line: usize) -> Result<Value, GenError> {
        let mut e = Expr {
            toks,
            at: 0,
            line,
            defines: &self.defines,
            types: &self.types,
        };
        let v = e.or()?;
        if let Some(t) = e.peek() {
            return err(line, format!("unexpected {t} after the value"));
        }
        Ok(v)
    }

    /// A struct whose `static_assert` has not come yet, if any.
    pub(crate) fn unasserted(&self) -> Option<&Struct> {
        self.items.iter().rev().find_map(|i| match i {
            Item::Struct(s) if !s.asserted => Some(s),
            _ => None,
        })
    }

    pub(crate) fn top(
        &mut self,
        toks: &[Tok],
        docs: Vec<String>,
        line: usize,
    ) -> Result<State, GenError> {
        if let Some(s) = self.unasserted()
            && !matches!(toks.first(), Some(Tok::Ident(k)) if k == "static_assert")
        {
            return Err(s.unasserted_at(line));
        }
        let word = |i: usize| match toks.get(i) {
            Some(Tok::Ident(s)) => Some(s.as_str()),
            _ => None,
        };
        match word(0) {
            Some("typedef") => self.typedef(toks, line)?,
            Some("static_assert") => self.static_assert(toks, line)?,
            Some("enum") => {
                let (Some(name), Some(Tok::Punct(":")), Some(ty), Some(Tok::Punct("{")), 5) =
                    (word(1), toks.get(2), word(3), toks.get(4), toks.len())
                else {
                    return err(line, "expected `enum NAME : TYPE {`");
                };
                let Some(&ty) = self.types.get(ty) else {
                    return err(
                        line,
                        format!("`{ty}` is not a fixed-width type of a typedef above"),
                    );
                };
                let name = name.to_string();
                self.declare(&name, line)?;
                return Ok(State::InEnum(
                    Enum {
                        name,
                        docs,
                        ty,
                        prefix: String::new(),
                        variants: Vec::new(),
                    },
                    line,
                ));
            }
            Some("struct") => {
                let (Some(name), Some(Tok::Punct("{")), 3) = (word(1), toks.get(2), toks.len())
                else {
                    return err(line, "expected `struct NAME {`");
                };
                let name = name.to_string();
                self.declare(&name, line)?;
                return Ok(State::InStruct(Struct {
                    name,
                    docs,
                    fields: Vec::new(),
                    line,
                    offsets: Vec::new(),
                    size: 0,
                    align: 1,
                    asserted: false,
                }));
            }
            _ if matches!(toks.first(), Some(Tok::Punct("#"))) => {
                let (Some("define"), Some(name)) = (word(1), word(2)) else {
                    return err(line, "only `#define NAME VALUE` is supported");
                };
                if toks.len() < 4 {
                    return err(line, format!("#define {name} has no value"));
                }
                let value = self.expr(&toks[3..], line)?;
                if value.ty == CType::Int && value.v < 0 {
                    return err(
                        line,
                        format!(
                            "#define {name}: a value of type int is a size (usize); cast a \
                             negative one"
                        ),
                    );
                }
                let name = name.to_string();
                self.declare(&name, line)?;
                self.defines.insert(name.clone(), value);
                self.items.push(Item::Define { name, docs, value });
            }
            _ => {
                return err(
                    line,
                    "outside the subset abi.h may use (typedef, #define, enum, struct, \
                     static_assert, comments)",
                );
            }
        }
        Ok(State::Top)
    }

    pub(crate) fn typedef(&mut self, toks: &[Tok], line: usize) -> Result<(), GenError> {
        let words: Option<Vec<&str>> = match toks.split_last() {
            Some((Tok::Punct(";"), body)) => body[1..]
                .iter()
                .map(|t| match t {
                    Tok::Ident(s) => Some(s.as_str()),
                    _ => None,
                })
                .collect(),
            _ => None,
        };
        let Some((name, c)) = words.as_deref().and_then(|w| match w.split_last() {
            Some((n, c)) if !c.is_empty() => Some((*n, c.join(" "))),
            _ => None,
        }) else {
            return err(line, "expected `typedef TYPE NAME;`");
        };
        let Some(s) = Scalar::ALL.into_iter().find(|s| s.name() == name) else {
            return err(
                line,
                format!(
                    "typedef `{name}`: only u8, u16, u32, u64, i8, i16, i32 and i64 may be defined"
                ),
            );
        };
        if c != s.c_spelling() {
            return err(
                line,
                format!("typedef {name} must name `{}`, not `{c}`", s.c_spelling()),
            );
        }
        self.declare(name, line)?;
        self.types.insert(name.to_string(), s);
        Ok(())
    }

    pub(crate) fn static_assert(&mut self, toks: &[Tok], line: usize) -> Result<(), GenError> {
        let shape = match toks {
            [
                Tok::Ident(_),
                Tok::Punct("("),
                Tok::Ident(sizeof),
                Tok::Punct("("),
                Tok::Ident(name),
                Tok::Punct(")"),
                Tok::Punct("=="),
                Tok::Int(bytes, _),
                Tok::Punct(","),
                Tok::Str,
                Tok::Punct(")"),
                Tok::Punct(";"),
            ] if sizeof == "sizeof" => Some((name, *bytes)),
            _ => None,
        };
        let Some((name, bytes)) = shape else {
            return err(
                line,
                "expected `static_assert(sizeof(NAME) == BYTES, \"...\");`",
            );
        };
        let s = match self.structs.get(name).map(|&i| &mut self.items[i]) {
            Some(Item::Struct(s)) => s,
            _ => return err(line, format!("`{name}` is not a struct above")),
        };
        if s.asserted {
            return err(line, format!("struct {name}'s size is already asserted"));
        }
        if i128::from(s.size) != bytes {
            return err(
                line,
                format!(
                    "struct {name} is {} bytes by C's layout rules, not {bytes}",
                    s.size
                ),
            );
        }
        s.asserted = true;
        Ok(())
    }

    /// One line of an enum's body; true at its end.
    pub(crate) fn enum_line(
        &mut self,
        e: &mut Enum,
        toks: &[Tok],
        docs: Vec<String>,
        line: usize,
    ) -> Result<bool, GenError> {
        if let [Tok::Punct("}"), Tok::Punct(";")] = toks {
            if e.variants.is_empty() {
                return err(line, format!("enum {} has no values", e.name));
            }
            return Ok(true);
        }
        let (Some(Tok::Ident(name)), Some(Tok::Punct("="))) = (toks.first(), toks.get(1)) else {
            return err(line, "expected `PREFIX_NAME = VALUE,` or `};`");
        };
        let body = match toks.split_last() {
            Some((Tok::Punct(","), body)) => &body[2..],
            _ => &toks[2..],
        };
        let value = self.expr(body, line)?;
        let (lo, hi) = e.ty.range();
        if value.v < lo || value.v > hi {
            return err(
                line,
                format!("{name} = {} does not fit {}", value.v, e.ty.name()),
            );
        }
        let Some((prefix, rest)) = name.split_once('_') else {
            return err(
                line,
                format!("enumerator `{name}` needs a PREFIX_ (as OP_SEND)"),
            );
        };
        if e.variants.is_empty() {
            e.prefix = prefix.to_string();
        } else if e.prefix != prefix {
            return err(
                line,
                format!(
                    "enumerator `{name}`: every value of enum {} starts with {}_",
                    e.name, e.prefix
                ),
            );
        }
        let variant = camel(rest);
        if !variant.starts_with(|c: char| c.is_ascii_alphabetic()) {
            return err(
                line,
                format!(
                    "enumerator `{name}` needs a name that starts with a letter after its prefix"
                ),
            );
        }
        if let Some((v, ..)) = e.variants.iter().find(|(_, v, _)| *v == value.v) {
            return err(line, format!("{name}: the value {} is also {v}'s", value.v));
        }
        self.declare(name, line)?;
        let docs = if docs.is_empty() {
            vec![format!("The kernel's `{name}`.")]
        } else {
            docs
        };
        e.variants.push((variant, value.v, docs));
        Ok(false)
    }

    /// One line of a struct's body; true at its end, once the struct is laid out.
    pub(crate) fn struct_line(
        &mut self,
        s: &mut Struct,
        toks: &[Tok],
        docs: Vec<String>,
        line: usize,
    ) -> Result<bool, GenError> {
        if let [Tok::Punct("}"), Tok::Punct(";")] = toks {
            return self.lay_out(s, line).map(|()| true);
        }
        let (ty, name, len) = match toks {
            [Tok::Ident(ty), Tok::Ident(name), Tok::Punct(";")] => (ty, name, None),
            [
                Tok::Ident(ty),
                Tok::Ident(name),
                Tok::Punct("["),
                len,
                Tok::Punct("]"),
                Tok::Punct(";"),
            ] => (ty, name, Some(len)),
            _ => return err(line, "expected `TYPE NAME;`, `TYPE NAME[LEN];` or `};`"),
        };
        let elem = if let Some(&sc) = self.types.get(ty) {
            Elem::Scalar(sc)
        } else if self.structs.contains_key(ty) {
            Elem::Struct(ty.clone())
        } else {
            return err(
                line,
                format!("`{ty}` is neither a fixed-width type nor a struct above"),
            );
        };
        if RUST_KEYWORDS.contains(&name.as_str()) {
            return err(line, format!("field `{name}` is a Rust keyword"));
        }
        if s.fields.iter().any(|f| &f.name == name) {
            return err(line, format!("struct {} has two fields `{name}`", s.name));
        }
        let len = match len {
            None => None,
            Some(Tok::Int(v, _)) if *v > 0 => Some((v.to_string(), *v as u64)),
            Some(Tok::Ident(d)) => match self.defines.get(d) {
                Some(v) if v.v > 0 && v.v <= i128::from(u32::MAX) => Some((d.clone(), v.v as u64)),
                Some(_) => return err(line, format!("array length {d} is not a positive size")),
                None => return err(line, format!("array length `{d}` is not a #define above")),
            },
            Some(t) => {
                return err(
                    line,
                    format!("array length {t}: a positive literal or a #define"),
                );
            }
        };
        s.fields.push(Field {
            name: name.clone(),
            docs,
            elem,
            len,
            line,
        });
        Ok(false)
    }

    /// C's layout of `s`, refusing any padding the compiler would insert.
    pub(crate) fn lay_out(&self, s: &mut Struct, line: usize) -> Result<(), GenError> {
        if s.fields.is_empty() {
            return err(line, format!("struct {} has no fields", s.name));
        }
        let mut off = 0u64;
        for f in &s.fields {
            let (size, align) = match &f.elem {
                Elem::Scalar(sc) => (sc.size(), sc.size()),
                Elem::Struct(name) => match self.structs.get(name).map(|&i| &self.items[i]) {
                    Some(Item::Struct(inner)) => (inner.size, inner.align),
                    _ => return err(line, format!("`{name}` is not a struct above")),
                },
            };
            if !off.is_multiple_of(align) {
                return err(
                    f.line,
                    format!(
                        "struct {}: field `{}` would start at byte {off} but needs alignment \
                         {align}: add {} bytes of explicit padding before it",
                        s.name,
                        f.name,
                        align - off % align
                    ),
                );
            }
            s.offsets.push(off);
            off += size * f.len.as_ref().map_or(1, |l| l.1);
            s.align = s.align.max(align);
        }
        if !off.is_multiple_of(s.align) {
            return err(
                line,
                format!(
                    "struct {} ends at byte {off} but its alignment is {}: add {} bytes of \
                     explicit padding at its end",
                    s.name,
                    s.align,
                    s.align - off % s.align
                ),
            );
        }
        s.size = off;
        Ok(())
    }
}

/// `RECV_REDUCE_COPY` as `RecvReduceCopy`.
pub(crate) fn camel(s: &str) -> String {
    s.split('_')
        .filter(|w| !w.is_empty())
        .map(|w| {
            let lower = w.to_ascii_lowercase();
            let mut c = lower.chars();
            match c.next() {
                Some(f) => f.to_ascii_uppercase().to_string() + c.as_str(),
                None => String::new(),
            }
        })
        .collect()
}

/// Splits a line at its `//` comment (outside string literals): code, comment text.
pub(crate) fn split_comment(line: &str) -> (&str, Option<&str>) {
    let b = line.as_bytes();
    let mut in_str = false;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => in_str = !in_str,
            b'\\' if in_str => i += 1,
            b'/' if !in_str && b.get(i + 1) == Some(&b'/') => {
                let text = &line[i + 2..];
                return (&line[..i], Some(text.strip_prefix(' ').unwrap_or(text)));
            }
            _ => {}
        }
        i += 1;
    }
    (line, None)
}

/// Reads the header into its items.
pub(crate) fn read(src: &str) -> Result<Header, GenError> {
    let mut h = Header::default();
    let mut state = State::Top;
    let mut docs: Vec<String> = Vec::new();
    let mut last = 0;
    for (i, raw) in src.lines().enumerate() {
        let line = i + 1;
        last = line;
        if raw.contains("/*") {
            return err(line, "only `//` comments are supported");
        }
        let (code, comment) = split_comment(raw);
        let toks = tokenize(code, line)?;
        if toks.is_empty() {
            match comment {
                Some(c) => docs.push(c.trim_end().to_string()),
                // A blank line ends a comment: it documents nothing below.
                None => docs.clear(),
            }
            continue;
        }
        let mut item_docs = std::mem::take(&mut docs);
        if let Some(c) = comment {
            item_docs.push(c.trim_end().to_string());
        }
        state = match state {
            State::Top => h.top(&toks, item_docs, line)?,
            State::InEnum(mut e, start) => {
                if h.enum_line(&mut e, &toks, item_docs, line)? {
                    h.items.push(Item::Enum(e));
                    State::Top
                } else {
                    State::InEnum(e, start)
                }
            }
            State::InStruct(mut s) => {
                if h.struct_line(&mut s, &toks, item_docs, line)? {
                    h.structs.insert(s.name.clone(), h.items.len());
                    h.items.push(Item::Struct(s));
                    State::Top
                } else {
                    State::InStruct(s)
                }
            }
        };
    }
    match state {
        State::Top => {}
        State::InEnum(e, start) => return err(start, format!("enum {} has no `}};`", e.name)),
        State::InStruct(s) => return err(s.line, format!("struct {} has no `}};`", s.name)),
    }
    if let Some(s) = h.unasserted() {
        return Err(s.unasserted_at(last));
    }
    Ok(h)
}
