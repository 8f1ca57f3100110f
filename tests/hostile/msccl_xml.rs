//! Mutants of the MSCCL-IR fixtures (`tests/inputs/msccl/*.xml`), edited as text: attribute
//! values replaced (ngpus, nchunksperloop, nchannels, offsets and counts, depid/deps, peers,
//! types, buffers), elements removed, duplicated or swapped, attributes added, renamed or
//! dropped, entity tricks (nested entity expansion, external entities, character references
//! out of range), deep element nesting, truncation and byte flips. Each is checked, compiled
//! to another format, or run with a small count.

use crate::runner::{Case, INPUT};
use crate::seeded::{Gen, HOSTILE_NUMBERS};
use std::ops::Range;

/// Byte ranges of every attribute value (between its quotes), with the attribute's name.
fn attributes(text: &str) -> Vec<(String, std::ops::Range<usize>)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(p) = text[i..].find("=\"") {
        let eq = i + p;
        let mut s = eq;
        while s > 0 && (b[s - 1].is_ascii_alphanumeric() || b[s - 1] == b'_') {
            s -= 1;
        }
        let start = eq + 2;
        let Some(len) = text[start..].find('"') else {
            break;
        };
        out.push((text[s..eq].to_string(), start..start + len));
        i = start + len + 1;
    }
    out
}

fn value_for(g: &mut Gen, name: &str) -> String {
    let from = |g: &mut Gen, xs: &[&str]| g.pick(xs).to_string();
    match (name, g.below(4)) {
        (_, 0) => from(g, HOSTILE_NUMBERS),
        ("type", _) => from(
            g,
            &[
                "s", "r", "rrc", "rcs", "rrs", "rrcs", "cpy", "re", "nop", "cs", "zz", "",
            ],
        ),
        ("srcbuf" | "dstbuf", _) => from(g, &["i", "o", "s", "x", "", "input"]),
        ("coll", _) => from(
            g,
            &[
                "allreduce",
                "allgather",
                "alltoall",
                "broadcast",
                "reduce",
                "reducescatter",
                "zz",
            ],
        ),
        ("proto", _) => from(g, &["Simple", "LL", "LL128", "simple", "zz"]),
        ("inplace" | "hasdep", _) => from(g, &["0", "1", "2", "true"]),
        ("deps" | "depid" | "send" | "recv" | "chan" | "id", _) => {
            from(g, &["-1", "0", "1", "2", "3", "4", "5", "9", "-2", "65536"])
        }
        _ => from(
            g,
            &[
                "0",
                "1",
                "2",
                "3",
                "4",
                "5",
                "8",
                "16",
                "-1",
                "268435456",
                "134217729",
            ],
        ),
    }
}

/// The lines of one element starting at line `i`: a self-closed one, or through its end tag.
fn element_lines(lines: &[&str], i: usize) -> std::ops::Range<usize> {
    let l = lines[i].trim_start();
    let tag: String = l
        .trim_start_matches('<')
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect();
    if l.trim_end().ends_with("/>") || tag.is_empty() {
        return i..i + 1;
    }
    let end = format!("</{tag}>");
    let j = (i..lines.len())
        .find(|&j| lines[j].contains(&end))
        .unwrap_or(i);
    i..j + 1
}

const BILLION_LAUGHS: &str = "<?xml version=\"1.0\"?>\n<!DOCTYPE algo [\n<!ENTITY a \"aaaaaaaaaa\">\n<!ENTITY b \"&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;\">\n<!ENTITY c \"&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;\">\n<!ENTITY d \"&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;\">\n<!ENTITY e \"&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;\">\n<!ENTITY f \"&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;\">\n<!ENTITY g \"&f;&f;&f;&f;&f;&f;&f;&f;&f;&f;\">\n]>\n";

pub fn mutate(g: &mut Gen, text: &mut String) {
    let attrs = attributes(text);
    let lines: Vec<&str> = text.lines().collect();
    let tag_lines: Vec<usize> = (0..lines.len())
        .filter(|&i| {
            lines[i].trim_start().starts_with('<')
                && !lines[i].trim_start().starts_with("</")
                && !lines[i].trim_start().starts_with("<!")
        })
        .collect();
    match g.below(14) {
        0..=3 if !attrs.is_empty() => {
            let (name, r) = g.pick(&attrs).clone();
            let v = value_for(g, &name);
            text.replace_range(r, &v);
        }
        4 | 5 if !tag_lines.is_empty() => {
            let r = element_lines(&lines, *g.pick(&tag_lines));
            let mut out: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
            if g.one_in(2) {
                out.drain(r);
            } else {
                let copy: Vec<String> = out[r.clone()].to_vec();
                let at = if g.one_in(2) { r.end } else { g.below(out.len()) };
                for (k, l) in copy.into_iter().enumerate() {
                    out.insert(at + k, l);
                }
            }
            *text = out.join("\n");
        }
        6 if !tag_lines.is_empty() => {
            let i = *g.pick(&tag_lines);
            let mut out: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
            let extra = *g.pick(&[" zz=\"1\"", " ngpus=\"2\"", " s=\"0\" s=\"1\"", " xmlns:q=\"u\" q:a=\"1\"", " type"]);
            let l = &mut out[i];
            let at = l.rfind("/>").or_else(|| l.rfind('>')).unwrap_or(l.len());
            l.insert_str(at, extra);
            *text = out.join("\n");
        }
        7 => match g.below(4) {
            0 => {
                text.insert_str(0, BILLION_LAUGHS);
                if let Some((_, r)) = attrs.first() {
                    // The offsets moved by the prefix.
                    let r = r.start + BILLION_LAUGHS.len()..r.end + BILLION_LAUGHS.len();
                    text.replace_range(r, "&g;");
                }
            }
            1 => text.insert_str(
                0,
                "<?xml version=\"1.0\"?>\n<!DOCTYPE algo [<!ENTITY x SYSTEM \"file:///etc/passwd\">]>\n",
            ),
            _ if !attrs.is_empty() => {
                let (_, r) = g.pick(&attrs).clone();
                let v = *g.pick(&["&amp;", "&#48;", "&#x110000;", "&#0;", "&unknown;", "&lt;1", "1&#10;"]);
                text.replace_range(r, v);
            }
            _ => text.push_str("<!-- trailing --><algo/>"),
        },
        8 => {
            let at = g.below(text.len().max(1));
            let mut b = std::mem::take(text).into_bytes();
            b.truncate(at);
            *text = String::from_utf8_lossy(&b).into_owned();
        }
        10 if tag_lines.len() > 1 => {
            let (a, b) = (*g.pick(&tag_lines), *g.pick(&tag_lines));
            let mut out: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
            out.swap(a, b);
            *text = out.join("\n");
        }
        11 if !attrs.is_empty() => {
            let (name, r) = g.pick(&attrs).clone();
            // The attribute's name starts `name.len() + 2` bytes before its value.
            let start = r.start - name.len() - 2;
            if g.one_in(2) {
                text.replace_range(start..r.end + 1, "");
            } else {
                text.replace_range(start..start + name.len(), &format!("{name}x"));
            }
        }
        12 if !tag_lines.is_empty() => {
            let depth = *g.pick(&[100, 5000, 100_000]);
            let i = *g.pick(&tag_lines);
            let mut out: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
            out.insert(i, format!("{}{}", "<x>".repeat(depth), "</x>".repeat(depth)));
            *text = out.join("\n");
        }
        _ => {
            let i = g.below(text.len().max(1));
            let at = (0..=i).rev().find(|&k| text.is_char_boundary(k)).unwrap_or(0);
            let piece = g.pick::<&str>(&["<", ">", "</gpu>", "<tb id=\"9\">", "\"", "<step/>", "]]>"]);
            text.insert_str(at, piece);
        }
    }
}

fn command(g: &mut Gen) -> Vec<String> {
    let a = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    match g.below(10) {
        0..=4 => a(&["check", INPUT]),
        5 => a(&["check", INPUT, "--ranks", *g.pick(&["1", "2", "4", "5"])]),
        6 | 7 => a(&[
            "compile",
            INPUT,
            "--format",
            *g.pick(&["text", "json", "msccl-xml", "svg"]),
        ]),
        _ => a(&[
            "run",
            INPUT,
            "--count",
            *g.pick(&["1", "4", "100"]),
            "--timeout",
            "5",
        ]),
    }
}

/// Of every `stride`-th of `per_base` mutants of every MSCCL-IR fixture, those with an index in `window`.
pub fn cases(per_base: usize, stride: usize, window: &Range<usize>) -> Vec<Case> {
    let dir = coll_tests::root().join("tests/inputs/msccl");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "xml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let base = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let original =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for k in (0..per_base).step_by(stride).filter(|k| window.contains(k)) {
            // A generator per case: case k is the same whichever others are generated.
            let mut g = Gen::new(&format!("xml/{base}/{k}"));
            let mut text = original.clone();
            for _ in 0..1 + g.below(3) {
                mutate(&mut g, &mut text);
            }
            let mut bytes = text.into_bytes();
            // Byte flips last, on bytes: they may leave invalid UTF-8, which `coll` must
            // refuse by name.
            if g.one_in(8) && !bytes.is_empty() {
                for _ in 0..=g.below(6) {
                    let at = g.below(bytes.len());
                    let any = g.byte();
                    bytes[at] = *g.pick(&[b'<', b'>', b'"', b'&', b'/', 0, 0xff, any]);
                }
            }
            out.push(Case {
                name: format!("xml/{base}/{k}"),
                args: command(&mut g),
                input: Some(("xml", bytes)),
                bound: None,
            });
        }
    }
    out
}
