//! Mutants of the shipped algorithms (`algorithms/*.coll`): each case applies one to three
//! edits to one algorithm's text (token deleted, duplicated or swapped, a number replaced by
//! a hostile one, a name made long or unknown, deep nesting, truncation, byte flips including
//! invalid UTF-8, a header item changed or added) and runs one command on it: `check`,
//! `compile` at 1, 3 or 64 ranks, `fmt`, or `run` with a small count.

use crate::runner::{Case, INPUT};
use crate::seeded::{Gen, HOSTILE_NUMBERS};
use std::ops::Range;

/// One lexical piece of a source: tokens keep their text, so joining them gives the file.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Ident,
    Number,
    Punct,
    /// Whitespace and comments: never mutated as tokens.
    Trivia,
}

fn lex(src: &str) -> Vec<(Kind, String)> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        let kind = if c.is_whitespace() {
            while i < chars.len() && chars[i].is_whitespace() {
                i += 1;
            }
            Kind::Trivia
        } else if c == '/' && chars.get(i + 1) == Some(&'/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            Kind::Trivia
        } else if c.is_ascii_alphabetic() || c == '_' {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            Kind::Ident
        } else if c.is_ascii_digit() {
            while i < chars.len() && chars[i].is_ascii_digit() {
                i += 1;
            }
            Kind::Number
        } else {
            i += 1;
            Kind::Punct
        };
        out.push((kind, chars[start..i].iter().collect()));
    }
    out
}

const UNKNOWN_NAMES: &[&str] = &[
    "zz_unknown",
    "inputt",
    "outptu",
    "scratch9",
    "n_",
    "rank2",
    "for",
    "let",
    "fn",
    "collective",
    "reduce",
    "copy",
    "via",
    "with",
    "return",
    "chunks",
    "ranks",
    "nodes",
    "gpus_per_node",
    "log2",
    "max",
];

const INSERTS: &[&str] = &[
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ";",
    ",",
    "..",
    "->",
    "<<",
    ">>",
    "%",
    "/",
    "-",
    "*",
    "==",
    "!",
    "n",
    "r",
    "0",
    "if",
    "else",
    "for",
    "in",
    "let",
    "fn",
    "return",
    "via net",
    "with pipeline 0",
    "input",
    "output",
    "scratch",
];

/// Header items that size or shape the whole plan, with the values tried for each.
fn header_item(g: &mut Gen) -> String {
    let value = |g: &mut Gen| -> String {
        match g.below(3) {
            0 => g.pick(HOSTILE_NUMBERS).to_string(),
            1 => g
                .pick(&[
                    "n * n * n",
                    "n * n * n * n * n",
                    "1 << 62",
                    "1 << 63",
                    "n << 40",
                    "0 - n",
                    "n / 0",
                    "n % 0",
                    "log2(0)",
                    "max(1, min(8, 8 * (n - 2)))",
                ])
                .to_string(),
            _ => "n".to_string(),
        }
    };
    match g.below(9) {
        0 => format!("chunks {};", value(g)),
        1 => format!("instances {};", value(g)),
        2 => format!("pipeline {};", value(g)),
        3 => format!(
            "protocol {};",
            g.pick(&["simple", "ll", "ll128", "LL", "zz", "0", "simple, ll"])
        ),
        4 => format!("ranks n >= {};", value(g)),
        5 => format!(
            "topology {};",
            g.pick(&["any", "cluster", "zz", "nvswitch, nvswitch", "ring", ""])
        ),
        6 => "inplace;".to_string(),
        7 => format!("needs {};", g.pick(&["net", "switch", "zz", "nvlink"])),
        _ => format!("channel {};", value(g)),
    }
}

/// One edit of `src`, in place.
fn mutate(g: &mut Gen, src: &mut Vec<u8>) {
    let text = String::from_utf8_lossy(src).into_owned();
    let mut toks = lex(&text);
    let real: Vec<usize> = (0..toks.len())
        .filter(|&i| toks[i].0 != Kind::Trivia)
        .collect();
    let of_kind = |toks: &[(Kind, String)], k: Kind| -> Vec<usize> {
        (0..toks.len()).filter(|&i| toks[i].0 == k).collect()
    };
    let join =
        |toks: &[(Kind, String)]| -> Vec<u8> { toks.iter().flat_map(|(_, t)| t.bytes()).collect() };
    if real.is_empty() || src.is_empty() {
        src.extend_from_slice(b"collective allreduce x(n) { chunks 1; }\n");
        return;
    }
    match g.below(11) {
        0 => {
            let i = *g.pick(&real);
            toks.remove(i);
            *src = join(&toks);
        }
        1 => {
            let i = *g.pick(&real);
            let t = toks[i].clone();
            toks.insert(i, (t.0, format!("{} ", t.1)));
            *src = join(&toks);
        }
        2 => {
            let (a, b) = (*g.pick(&real), *g.pick(&real));
            toks.swap(a, b);
            *src = join(&toks);
        }
        3 => {
            let nums = of_kind(&toks, Kind::Number);
            let i = if nums.is_empty() {
                *g.pick(&real)
            } else {
                *g.pick(&nums)
            };
            toks[i].1 = g.pick(HOSTILE_NUMBERS).to_string();
            *src = join(&toks);
        }
        4 => {
            let ids = of_kind(&toks, Kind::Ident);
            let i = *g.pick(&ids);
            toks[i].1 = match g.below(3) {
                0 => "x".repeat(*g.pick(&[65, 1000, 70_000])),
                1 => format!("{}_{}", toks[i].1, "q".repeat(g.below(80))),
                _ => g.pick(UNKNOWN_NAMES).to_string(),
            };
            // Every use of a renamed name, or just this one (a long name only once: for
            // every `for` of a deep nest it would make gigabytes).
            if g.one_in(2) && toks[i].1.len() <= 100 {
                let old = lex(&text)[i].1.clone();
                let new = toks[i].1.clone();
                for t in toks.iter_mut().filter(|t| t.0 == Kind::Ident && t.1 == old) {
                    t.1 = new.clone();
                }
            }
            *src = join(&toks);
        }
        5 => {
            let depth = *g.pick(&[50, 200, 1000, 100_000]);
            let i = *g.pick(&real);
            let (open, close) =
                *g.pick(&[("(", ")"), ("[", "]"), ("{", "}"), ("-", ""), ("!", "")]);
            toks[i].1 = format!("{}{}{}", open.repeat(depth), toks[i].1, close.repeat(depth));
            *src = join(&toks);
        }
        6 => {
            let depth = *g.pick(&[20, 300, 20_000]);
            let mut s = String::new();
            for k in 0..depth {
                // One level a line: deep nesting, not one long line (see
                // `unclosed_braces_on_a_15_mb_line_give_short_excerpts` for that).
                s.push_str(&format!("for i{k} in 0..1 {{\n"));
            }
            s.push_str("copy input[0][0] -> input[1];");
            s.push_str(&"}".repeat(depth));
            src.extend_from_slice(s.as_bytes());
        }
        7 => {
            let at = g.below(src.len());
            src.truncate(at);
        }
        8 => {
            for _ in 0..=g.below(8) {
                let at = g.below(src.len());
                let any = g.byte();
                src[at] = *g.pick(&[0xff, 0xc3, 0xe2, 0x80, 0x00, b'"', b'\\', any]);
            }
        }
        9 => {
            let item = header_item(g);
            let at = text.find('{').map_or(0, |p| p + 1);
            // Replace the item of the same keyword if the header has one, else add it.
            let kw = item.split(' ').next().unwrap_or("");
            let header_end = text.find('}').unwrap_or(text.len());
            let found = text[..header_end]
                .match_indices(&format!("\n    {kw} "))
                .next()
                .map(|(p, _)| p + 1);
            let mut t = text.clone();
            match found {
                Some(p) => {
                    let end = t[p..].find('\n').map_or(t.len(), |e| p + e);
                    t.replace_range(p..end, &format!("    {item}"));
                }
                None => t.insert_str(at, &format!("\n    {item}")),
            }
            *src = t.into_bytes();
        }
        _ => {
            let i = *g.pick(&real);
            toks.insert(i, (Kind::Punct, format!(" {} ", g.pick(INSERTS))));
            *src = join(&toks);
        }
    }
}

/// Whether an algorithm's header restricts it to clusters.
fn cluster_only(src: &str) -> bool {
    src.contains("topology cluster;")
}

/// A command for a mutant of `base`: which one, ranks and topology drawn from `g`.
fn command(g: &mut Gen, cluster: bool) -> Vec<String> {
    let n = *g.pick(&[1usize, 2, 3, 4, 8, 64]);
    let mut args: Vec<String> = match g.below(10) {
        0 => {
            return vec![
                "check".into(),
                INPUT.into(),
                STEP_LIMIT[0].into(),
                STEP_LIMIT[1].into(),
            ];
        }
        1 => return vec!["fmt".into(), INPUT.into()],
        2..=4 => vec!["check".into(), INPUT.into()],
        5..=7 => {
            let mut a = vec!["compile".into(), INPUT.into()];
            if g.one_in(3) {
                a.extend([
                    "--format".into(),
                    g.pick(&["json", "msccl-xml", "dot", "svg"]).to_string(),
                ]);
            }
            a
        }
        _ => {
            let n = *g.pick(&[1usize, 2, 3, 4]);
            let mut a: Vec<String> =
                vec!["run".into(), INPUT.into(), "--ranks".into(), n.to_string()];
            a.extend(["--count".into(), g.pick(&["1", "7", "1000"]).to_string()]);
            a.extend(["--timeout".into(), "5".into()]);
            if cluster {
                a.extend(["--topo".into(), format!("cluster:1x{n}")]);
            }
            a.extend(STEP_LIMIT.iter().map(|s| s.to_string()));
            return a;
        }
    };
    args.extend(["--ranks".into(), n.to_string()]);
    if cluster && n.is_multiple_of(2) {
        args.extend(["--topo".into(), format!("cluster:2x{}", n / 2)]);
    }
    args.extend(STEP_LIMIT.iter().map(|s| s.to_string()));
    args
}

/// Largest mutant kept; an edit past it is undone.
const MAX_MUTANT_BYTES: usize = 4 << 20;

/// Every command that elaborates runs with a step limit of a million: a number mutated into
/// a loop bound of 2^63 stops at the default limits too (2^24 steps, 2^22 ops), but only
/// after seconds; a million keeps each of thousands of mutants fast. The shipped algorithms
/// need under 10^5 steps at 64 ranks.
const STEP_LIMIT: [&str; 2] = ["--step-limit", "1000000"];

/// Of every `stride`-th of `per_base` mutants of every shipped algorithm, those with an index in `window`.
pub fn cases(per_base: usize, stride: usize, window: &Range<usize>) -> Vec<Case> {
    let mut out = Vec::new();
    for path in coll_tests::coll_files("algorithms") {
        let base = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let original = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let cluster = cluster_only(&String::from_utf8_lossy(&original));
        for k in (0..per_base).step_by(stride).filter(|k| window.contains(k)) {
            // A generator per case: case k is the same whichever others are generated.
            let mut g = Gen::new(&format!("coll/{base}/{k}"));
            let mut src = original.clone();
            for _ in 0..1 + g.below(3) {
                let before = src.clone();
                mutate(&mut g, &mut src);
                // Edits compound (a 70 000-character name for every one of 20 000 `for`s
                // made 1.4 GB); the crafted cases cover large files, mutants stay small.
                if src.len() > MAX_MUTANT_BYTES {
                    src = before;
                }
            }
            let args = command(&mut g, cluster);
            out.push(Case {
                name: format!("coll/{base}/{k}"),
                args,
                input: Some(("coll", src)),
                bound: None,
            });
        }
    }
    out
}
