//! Mutants of JSON plans: a few shipped algorithms compiled by `coll compile --format json`,
//! then one to three edits each: any value of any field replaced (numbers by 0, -1, huge,
//! float, string, null; strings by other names), arrays emptied, duplicated, shortened or
//! reordered (ops, blocks, ranks, buffers), dependencies pointing anywhere, peers out of
//! range, `chunk_factor` 0 / 2^32 / 2^63, huge buffers, unknown fields, deep nesting, and
//! the text truncated; or, for half of them, one or two edits that keep the plan well-typed
//! with small numbers (see `mutate_typed`), to reach the stages after validation. Each is checked (`coll check`, sometimes with `--ranks`), compiled to
//! another format, or run with a small count.

use crate::runner::{Case, INPUT};
use crate::seeded::Gen;
use serde_json::{Value, json};
use std::ops::Range;
use std::path::Path;
use std::process::Command;

/// The algorithms compiled to plans, with the arguments that pick ranks and topology.
const BASES: &[(&str, &[&str])] = &[
    ("allreduce_ring", &["--ranks", "4"]),
    (
        "allreduce_ring",
        &[
            "--ranks",
            "3",
            "--instances",
            "2",
            "--placement",
            "out-of-place",
        ],
    ),
    ("alltoall", &["--ranks", "3"]),
    ("broadcast_tree", &["--ranks", "4"]),
    ("reduce_tree", &["--ranks", "3"]),
    ("allgather_rd", &["--ranks", "4"]),
    ("allreduce_nvls", &["--ranks", "4"]),
    ("allreduce_hier", &["--ranks", "4", "--topo", "cluster:2x2"]),
];

/// The JSON plan of each base, compiled by `bin`.
pub fn bases(bin: &Path) -> Vec<(String, Value)> {
    BASES
        .iter()
        .map(|(algo, args)| {
            // Relative, so that op sources in the plans do not depend on the checkout.
            let out = Command::new(bin)
                .current_dir(coll_tests::root())
                .arg("compile")
                .arg(format!("algorithms/{algo}.coll"))
                .args(*args)
                .args(["--format", "json"])
                .output()
                .expect("coll starts");
            assert!(
                out.status.success(),
                "{algo} {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let v: Value = serde_json::from_slice(&out.stdout).expect("coll writes JSON");
            let name = format!("{algo}-{}", args[1]);
            (name, v)
        })
        .collect()
}

/// A path to a node: object keys and array indices from the root.
type NodePath = Vec<Step>;
#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Index(usize),
}

fn all_paths(v: &Value, here: &mut NodePath, out: &mut Vec<NodePath>) {
    out.push(here.clone());
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                here.push(Step::Key(k.clone()));
                all_paths(x, here, out);
                here.pop();
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                here.push(Step::Index(i));
                all_paths(x, here, out);
                here.pop();
            }
        }
        _ => {}
    }
}

fn node<'a>(v: &'a mut Value, path: &[Step]) -> Option<&'a mut Value> {
    let mut cur = v;
    for s in path {
        cur = match s {
            Step::Key(k) => cur.get_mut(k.as_str())?,
            Step::Index(i) => cur.get_mut(*i)?,
        };
    }
    Some(cur)
}

fn hostile_number(g: &mut Gen) -> Value {
    match g.below(12) {
        0 => json!(0),
        1 => json!(-1),
        2 => json!(1u64 << 32),
        3 => json!(1u64 << 63),
        4 => json!(u64::MAX),
        5 => json!(i64::MIN),
        6 => json!(1.5),
        7 => json!(1e300),
        8 => json!("3"),
        9 => Value::Null,
        10 => json!(g.below(8)),
        _ => json!(1u64 << 28),
    }
}

/// Nested arrays `depth` deep around `inner`, as text (a `Value` that deep would overflow
/// serde_json's own recursion when printed).
fn deep_text(depth: usize) -> String {
    format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
}

/// Some object in `v` (the root if no other), chosen by `g`.
fn some_object_path(
    g: &mut Gen,
    paths: &[NodePath],
    v: &Value,
    want_key: &str,
) -> Option<NodePath> {
    let with: Vec<&NodePath> = paths
        .iter()
        .filter(|p| {
            let mut x = v;
            for s in p.iter() {
                x = match s {
                    Step::Key(k) => &x[k.as_str()],
                    Step::Index(i) => &x[*i],
                };
            }
            x.as_object()
                .is_some_and(|m| want_key.is_empty() || m.contains_key(want_key))
        })
        .collect();
    (!with.is_empty()).then(|| with[g.below(with.len())].clone())
}

/// One edit of the plan; a returned string replaces the whole serialised text's tail (deep
/// nesting) when the edit cannot be a `Value`.
pub fn mutate(g: &mut Gen, v: &mut Value) -> Option<String> {
    let mut paths = Vec::new();
    all_paths(v, &mut Vec::new(), &mut paths);
    match g.below(14) {
        // Any node, by kind.
        0..=3 => {
            let p = paths[g.below(paths.len())].clone();
            let n = node(v, &p)?;
            *n = match n.take() {
                Value::Number(_) => hostile_number(g),
                Value::String(s) => match g.below(5) {
                    0 => json!(""),
                    1 => json!(format!("{s}{}", "x".repeat(g.below(3) * 50_000))),
                    2 => json!(*g.pick(&[
                        "allreduce",
                        "alltoall",
                        "broadcast",
                        "zz",
                        "s",
                        "r",
                        "rrc",
                        "cs",
                        "re",
                        "ll",
                        "ll128",
                        "net",
                        "switch",
                        "nvlink",
                        "pcie",
                        "\u{0}",
                        "ë"
                    ])),
                    3 => json!(0),
                    _ => Value::Null,
                },
                Value::Array(mut a) => match g.below(6) {
                    0 => json!([]),
                    1 => {
                        let dup = a.clone();
                        a.extend(dup);
                        Value::Array(a)
                    }
                    2 if !a.is_empty() => {
                        let i = g.below(a.len());
                        a.remove(i);
                        Value::Array(a)
                    }
                    3 if a.len() > 1 => {
                        let (i, j) = (g.below(a.len()), g.below(a.len()));
                        a.swap(i, j);
                        Value::Array(a)
                    }
                    4 if !a.is_empty() => {
                        let i = g.below(a.len());
                        let x = a[i].clone();
                        a.insert(g.below(a.len()), x);
                        Value::Array(a)
                    }
                    _ => {
                        a.reverse();
                        Value::Array(a)
                    }
                },
                Value::Object(mut m) => match g.below(3) {
                    0 if !m.is_empty() => {
                        let k = m.keys().nth(g.below(m.len())).cloned().unwrap_or_default();
                        m.remove(&k);
                        Value::Object(m)
                    }
                    1 => {
                        m.insert(
                            g.pick(&["zz", "extra", "Rank", "deps ", ""]).to_string(),
                            json!(1),
                        );
                        Value::Object(m)
                    }
                    _ => json!([]),
                },
                Value::Bool(b) => match g.below(3) {
                    0 => json!(!b),
                    1 => json!(1),
                    _ => Value::Null,
                },
                Value::Null => json!(0),
            };
        }
        // Top-level fields, while the top level is still an object (an earlier edit may
        // have replaced it, and indexing a non-object would panic here).
        4 => {
            let x = json!(*g.pick(&[0u64, 1 << 32, 1 << 63, 1 << 27, (1 << 27) + 1, u64::MAX]));
            v.as_object_mut()?.insert("chunk_factor".into(), x);
        }
        5 => {
            let bufs = v.get_mut("buffers")?.as_array_mut()?;
            let i = g.below(bufs.len().max(1));
            let x = json!(*g.pick(&[0u64, 1 << 28, 1 << 32, 1 << 63, u64::MAX]));
            bufs.get_mut(i)?.as_object_mut()?.insert("chunks".into(), x);
        }
        6 => {
            let x = json!(*g.pick(&[0u64, 1, 2, 5, 65537, 1 << 32]));
            v.as_object_mut()?.insert("ranks".into(), x);
        }
        7 => {
            let p = some_object_path(g, &paths, v, "op")?;
            let op = node(v, &p)?;
            let mut dep = || -> Value {
                let big = [0i64, 1, 2, 3, -1, 1 << 32, 1000];
                json!([big[g.below(big.len())], big[g.below(big.len())]])
            };
            op["deps"] = json!([dep(), dep()]);
        }
        8 => {
            let p = some_object_path(g, &paths, v, "ops")?;
            let key = *g.pick(&["send_peer", "recv_peer", "channel", "id"]);
            let val = json!(*g.pick(&[0i64, 1, 2, 3, 4, 5, -1, 1 << 32, 65536]));
            node(v, &p)?[key] = val;
        }
        9 => {
            let p = some_object_path(g, &paths, v, "op")?;
            let op = node(v, &p)?;
            let key = *g.pick(&["src", "dst", "n", "at", "group", "op"]);
            op[key] = match key {
                "src" | "dst" => {
                    let vals = [0i64, 1, 2, 5, -1, 1 << 28, 1 << 32];
                    json!([vals[g.below(vals.len())], vals[g.below(vals.len())]])
                }
                "op" => json!(*g.pick(&[
                    "s", "r", "rrc", "rcs", "rrs", "rrcs", "cpy", "re", "cs", "nop"
                ])),
                _ => hostile_number(g),
            };
        }
        10 => {
            // Move an op to another block, or a block to another rank.
            let p = some_object_path(g, &paths, v, "ops")?;
            let q = some_object_path(g, &paths, v, "ops")?;
            let ops = node(v, &p)?["ops"].as_array_mut()?;
            if ops.is_empty() {
                return None;
            }
            let op = ops.remove(g.below(ops.len()));
            node(v, &q)?["ops"].as_array_mut()?.push(op);
        }
        11 => {
            let p = some_object_path(g, &paths, v, "")?;
            node(v, &p)?
                .as_object_mut()?
                .insert(format!("unknown_{}", g.below(9)), json!({"a": [1, 2]}));
        }
        12 => return Some(deep_text(*g.pick(&[130, 1000, 100_000]))),
        _ => {
            let x = json!(*g.pick(&[0i64, 2, -1, 1 << 40]));
            v.as_object_mut()?.insert("version".into(), x);
        }
    }
    None
}

/// One edit that keeps the plan well-typed, with small in-range numbers, so that it often
/// passes validation and reaches replay, the deadlock and race checks and the executor:
/// an op's deps, slices, count or kind changed; ops swapped, dropped or duplicated in a
/// block; a peer changed; `chunk_factor` or a buffer resized.
fn mutate_typed(g: &mut Gen, v: &mut Value) -> Option<()> {
    let mut paths = Vec::new();
    all_paths(v, &mut Vec::new(), &mut paths);
    let small = |g: &mut Gen, n: usize| json!(g.below(n));
    match g.below(6) {
        0 | 1 => {
            let p = some_object_path(g, &paths, v, "op")?;
            let key = *g.pick(&["deps", "src", "dst", "n", "op", "deps"]);
            let x = match key {
                "deps" => json!([[g.below(3), g.below(8)]]),
                "src" | "dst" => json!([g.below(3), g.below(8)]),
                "n" => json!(1 + g.below(3)),
                _ => json!(*g.pick(&["s", "r", "rrc", "rcs", "rrs", "rrcs", "cpy", "re", "cs"])),
            };
            node(v, &p)?.as_object_mut()?.insert(key.into(), x);
        }
        2 | 3 => {
            let p = some_object_path(g, &paths, v, "ops")?;
            let ops = node(v, &p)?.get_mut("ops")?.as_array_mut()?;
            if ops.is_empty() {
                return None;
            }
            let (i, j) = (g.below(ops.len()), g.below(ops.len()));
            match g.below(3) {
                0 => ops.swap(i, j),
                1 => {
                    ops.remove(i);
                }
                _ => {
                    let x = ops[i].clone();
                    ops.insert(j, x);
                }
            }
        }
        4 => {
            let p = some_object_path(g, &paths, v, "ops")?;
            let key = *g.pick(&["send_peer", "recv_peer", "channel"]);
            let x = small(g, 5);
            node(v, &p)?.as_object_mut()?.insert(key.into(), x);
        }
        _ => {
            if g.one_in(2) {
                let x = json!(1 + g.below(8));
                v.as_object_mut()?.insert("chunk_factor".into(), x);
            } else {
                let bufs = v.get_mut("buffers")?.as_array_mut()?;
                let i = g.below(bufs.len().max(1));
                let x = json!(1 + g.below(16));
                bufs.get_mut(i)?.as_object_mut()?.insert("chunks".into(), x);
            }
        }
    }
    Some(())
}

/// A command for a plan mutant.
fn command(g: &mut Gen) -> Vec<String> {
    let a = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    match g.below(10) {
        0..=4 => a(&["check", INPUT]),
        5 => a(&["check", INPUT, "--ranks", *g.pick(&["1", "3", "4", "64"])]),
        6 => a(&[
            "compile",
            INPUT,
            "--format",
            *g.pick(&["text", "json", "msccl-xml", "dot", "svg"]),
        ]),
        7 => a(&["compile", INPUT, "--predict"]),
        _ => a(&[
            "run",
            INPUT,
            "--count",
            *g.pick(&["1", "5", "100"]),
            "--timeout",
            "5",
        ]),
    }
}

/// Of every `stride`-th of `per_base` mutants of every base plan, those with an index in `window`.
pub fn cases(
    bases: &[(String, Value)],
    per_base: usize,
    stride: usize,
    window: &Range<usize>,
) -> Vec<Case> {
    let mut out = Vec::new();
    for (base, plan) in bases {
        for k in (0..per_base).step_by(stride).filter(|k| window.contains(k)) {
            // A generator per case: case k is the same whichever others are generated.
            let mut g = Gen::new(&format!("plan/{base}/{k}"));
            let mut v = plan.clone();
            let mut tail = None;
            if g.one_in(2) {
                for _ in 0..1 + g.below(2) {
                    mutate_typed(&mut g, &mut v);
                }
            } else {
                for _ in 0..1 + g.below(3) {
                    tail = mutate(&mut g, &mut v).or(tail);
                }
            }
            let mut text = if g.one_in(2) {
                serde_json::to_string_pretty(&v)
            } else {
                serde_json::to_string(&v)
            }
            .expect("a Value serialises");
            if let Some(deep) = tail {
                // Deep nesting as the value of the last field.
                if let Some(p) = text.rfind('}') {
                    text.replace_range(p.., &format!(",\"deep\":{deep}}}"));
                }
            }
            if g.one_in(8) {
                let at = g.below(text.len().max(1));
                let mut b = text.into_bytes();
                b.truncate(at);
                text = String::from_utf8_lossy(&b).into_owned();
            }
            out.push(Case {
                name: format!("plan/{base}/{k}"),
                args: command(&mut g),
                input: Some(("json", text.into_bytes())),
                bound: None,
            });
        }
    }
    out
}
