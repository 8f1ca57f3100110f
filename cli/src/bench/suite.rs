//! `coll bench --suite FILE`: the maintained benchmark cases of a TOML suite file
//! (`bench/suite.toml`), each run through the same sweep as `coll bench FILE` — a case is
//! turned into exactly the `coll bench` command line it stands for ([`Case::argv`]) — with
//! the usual tables printed and, with `--record`, one JSON line per case, size and placement
//! appended to a record file ([`super::record`]).
//!
//! Invariants of a loaded [`Suite`]: case names are unique and non-empty; every case's
//! command line parses as `coll bench` arguments and every target parses
//! ([`super::target::Target`]), so a bad case is refused before anything runs, naming it; a
//! suite file that is not valid TOML or has a misspelt or mistyped field is refused naming
//! `file:line:col`.

use super::BenchArgs;
use super::record::{self, Record};
use super::target::Target;
use crate::output::Ctx;
use crate::{EXIT_FAILURE, EXIT_OK, EXIT_USAGE};
use clap::Parser;
use serde::{Deserialize, Deserializer};
use std::path::{Path, PathBuf};

/// Why a suite file was refused.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    /// Not TOML, or not a suite: at `line:col` (1-based) of `path`.
    #[error("{path}:{line}:{col}: {message}")]
    Syntax {
        path: String,
        line: usize,
        col: usize,
        message: String,
    },
    /// A case that parses but cannot run as written.
    #[error("{path}: case `{case}`: {message}")]
    Case {
        path: String,
        case: String,
        message: String,
    },
}

/// A size in bytes: an integer, or a string with an optional K, M or G suffix (`"32M"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Size(pub u64);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Size, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(v) => Ok(Size(v)),
            Raw::Text(s) => super::parse_size(&s)
                .map(Size)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// nccl-tests' `-b`, `-e`, `-f`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Sizes {
    pub min: Size,
    pub max: Size,
    #[serde(default = "two")]
    pub factor: u64,
}

fn two() -> u64 {
    2
}
fn default_iters() -> u32 {
    20
}
fn default_warmup() -> u32 {
    5
}
fn one() -> u32 {
    1
}
fn f32_name() -> String {
    "f32".into()
}
fn sum_name() -> String {
    "sum".into()
}

/// One benchmark case; the defaults are `coll bench`'s.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// Unique within the suite; the records' key.
    pub name: String,
    /// The `.coll` program or JSON plan, relative to where `coll` runs (the repository root).
    pub file: PathBuf,
    pub ranks: usize,
    /// `--instances` (None: the header's).
    #[serde(default)]
    pub instances: Option<u32>,
    #[serde(default = "f32_name")]
    pub dtype: String,
    #[serde(default = "sum_name")]
    pub op: String,
    #[serde(default)]
    pub root: usize,
    /// `--topo` (None: `nvswitch:ranks`).
    #[serde(default)]
    pub topo: Option<String>,
    pub sizes: Sizes,
    #[serde(default = "default_iters")]
    pub iters: u32,
    #[serde(default = "default_warmup")]
    pub warmup: u32,
    /// Check calls per size (0: none).
    #[serde(default = "one")]
    pub check: u32,
    /// CUDA-graph launches per size (None: eager calls).
    #[serde(default)]
    pub graph: Option<u32>,
    /// Whether NCCL runs beside coll (`--vs-nccl`).
    #[serde(default)]
    pub nccl: bool,
    /// Further `coll bench` options, as on its command line (`["--no-fold"]`).
    #[serde(default)]
    pub args: Vec<String>,
    /// Selection labels (`--tag`).
    #[serde(default)]
    pub tags: Vec<String>,
    /// Cases of one group are judged together: per size, the fastest of them counts (the
    /// small-message targets hold for the best plan, whichever it is).
    #[serde(default)]
    pub group: Option<String>,
    /// What the case must show ([`Target`] syntax), judged by `coll bench --summary`.
    #[serde(default)]
    pub targets: Vec<String>,
}

/// The suite file: its cases, in the order they run.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Suite {
    #[serde(rename = "case", default)]
    pub cases: Vec<Case>,
}

/// Parses `coll bench` arguments alone (the first item stands for the program name).
#[derive(Debug, Parser)]
#[command(name = "coll bench", no_binary_name = false)]
struct BenchLine {
    #[command(flatten)]
    args: BenchArgs,
}

impl Case {
    /// The `coll bench` arguments this case stands for (without `coll bench`), on `gpus`
    /// when given (default: the first `ranks` GPUs, so that NCCL, which needs one rank per
    /// GPU, runs beside it on a larger machine).
    pub fn argv(&self, gpus: &[usize], timeout: Option<f64>) -> Vec<String> {
        let mut v: Vec<String> = vec![self.file.display().to_string()];
        let mut opt = |k: &str, val: String| {
            v.push(k.to_string());
            v.push(val);
        };
        opt("--ranks", self.ranks.to_string());
        if let Some(i) = self.instances {
            opt("--instances", i.to_string());
        }
        if let Some(t) = &self.topo {
            opt("--topo", t.clone());
        }
        opt("-b", size_arg(self.sizes.min.0));
        opt("-e", size_arg(self.sizes.max.0));
        opt("-f", self.sizes.factor.to_string());
        opt("-n", self.iters.to_string());
        opt("-w", self.warmup.to_string());
        opt("-c", self.check.to_string());
        if self.dtype != "f32" {
            opt("--dtype", self.dtype.clone());
        }
        if self.op != "sum" {
            opt("--op", self.op.clone());
        }
        if self.root != 0 {
            opt("--root", self.root.to_string());
        }
        if let Some(g) = self.graph {
            opt("--graph", g.to_string());
        }
        let gpus: Vec<String> = if gpus.is_empty() {
            (0..self.ranks).map(|g| g.to_string()).collect()
        } else {
            gpus.iter().map(|g| g.to_string()).collect()
        };
        opt("--gpus", gpus.join(","));
        if let Some(t) = timeout {
            opt("--timeout", t.to_string());
        }
        if self.nccl {
            v.push("--vs-nccl".into());
        }
        v.extend(self.args.iter().cloned());
        v
    }

    /// The parsed `coll bench` arguments of [`Case::argv`].
    fn bench_args(&self, gpus: &[usize], timeout: Option<f64>) -> Result<BenchArgs, String> {
        let argv = std::iter::once("coll bench".to_string()).chain(self.argv(gpus, timeout));
        let line = BenchLine::try_parse_from(argv).map_err(|e| {
            // clap's first line says what is wrong; its usage lines name a command line
            // nobody typed.
            let text = e.to_string();
            let first = text.lines().next().unwrap_or_default();
            first.trim_start_matches("error: ").to_string()
        })?;
        if line.args.file.is_none() || line.args.auto || line.args.suite.is_some() {
            return Err("its `args` may not replace the case's file".into());
        }
        Ok(line.args)
    }

    /// The case's targets, parsed.
    pub fn targets(&self) -> Result<Vec<Target>, String> {
        self.targets.iter().map(|t| t.parse()).collect()
    }
}

/// A size as `coll bench` takes it, with the largest exact suffix (`33554432` -> `32M`).
fn size_arg(b: u64) -> String {
    for (shift, suffix) in [(30, "G"), (20, "M"), (10, "K")] {
        if b != 0 && b.is_multiple_of(1 << shift) {
            return format!("{}{suffix}", b >> shift);
        }
    }
    b.to_string()
}

/// 1-based line and column of byte `at` in `text`.
pub fn line_col(text: &str, at: usize) -> (usize, usize) {
    // Inside a character (a span should never be): count from the character's start.
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let col = before.rfind('\n').map_or(before.chars().count(), |nl| {
        before[nl + 1..].chars().count()
    }) + 1;
    (line, col)
}

impl Suite {
    /// Parses and checks the suite text `text` of file `path` (for messages).
    pub fn parse(path: &str, text: &str) -> Result<Suite, SuiteError> {
        let suite: Suite = toml::from_str(text).map_err(|e| {
            let (line, col) = e.span().map_or((1, 1), |s| line_col(text, s.start));
            SuiteError::Syntax {
                path: path.into(),
                line,
                col,
                message: e.message().trim().to_string(),
            }
        })?;
        let bad = |case: &Case, message: String| SuiteError::Case {
            path: path.into(),
            case: case.name.clone(),
            message,
        };
        for (i, c) in suite.cases.iter().enumerate() {
            if c.name.trim().is_empty() {
                return Err(bad(c, "a case needs a name".into()));
            }
            if suite.cases[..i].iter().any(|d| d.name == c.name) {
                return Err(bad(c, "a second case of this name".into()));
            }
            if c.sizes.min.0 > c.sizes.max.0 {
                return Err(bad(c, "sizes.min is larger than sizes.max".into()));
            }
            c.bench_args(&[], None).map_err(|m| bad(c, m))?;
            c.targets().map_err(|m| bad(c, m))?;
        }
        Ok(suite)
    }

    /// Reads and parses the suite file `path`.
    pub fn load(path: &Path) -> Result<Suite, SuiteError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| SuiteError::Read {
            path: name.clone(),
            source,
        })?;
        Suite::parse(&name, &text)
    }

    /// The cases with any of `tags` (all when empty) and, when `names` is not empty, those
    /// named; in the file's order. An unknown tag or name is an error naming what exists.
    pub fn select(&self, tags: &[String], names: &[String]) -> Result<Vec<&Case>, String> {
        for t in tags {
            if !self.cases.iter().any(|c| c.tags.contains(t)) {
                let mut known: Vec<&str> = self
                    .cases
                    .iter()
                    .flat_map(|c| c.tags.iter().map(String::as_str))
                    .collect();
                known.sort_unstable();
                known.dedup();
                return Err(format!("no case has tag `{t}`; tags: {}", known.join(", ")));
            }
        }
        for n in names {
            if !self.cases.iter().any(|c| &c.name == n) {
                let known: Vec<&str> = self.cases.iter().map(|c| c.name.as_str()).collect();
                return Err(format!("no case `{n}`; cases: {}", known.join(", ")));
            }
        }
        Ok(self
            .cases
            .iter()
            .filter(|c| tags.is_empty() || c.tags.iter().any(|t| tags.contains(t)))
            .filter(|c| names.is_empty() || names.contains(&c.name))
            .collect())
    }
}

impl Ctx<'_> {
    /// Runs `coll bench --suite`: every selected case in order, each printed as `coll
    /// bench` prints it under a line `== CASE: ARGS` and followed by `[rc CODE]` (what
    /// `bench/tables.py` reads), recorded with `--record`. Exit 1 if any case failed.
    pub fn bench_suite(&mut self, args: &BenchArgs, path: &Path) -> u8 {
        let suite = match Suite::load(path) {
            Ok(s) => s,
            Err(e) => {
                let _ = writeln!(self.err, "error: {e}");
                return EXIT_FAILURE;
            }
        };
        let cases = match suite.select(&args.tags, &args.cases) {
            Ok(c) => c,
            Err(e) => {
                let _ = writeln!(self.err, "error: {}: {e}", path.display());
                return EXIT_USAGE;
            }
        };
        // Once, before any case: without a GPU every case would say so again.
        let all = match self.pick_gpus("coll bench --suite", &args.gpus) {
            Ok(g) => g,
            Err(code) => return code,
        };
        let machine = record::machine(self.env, &all);
        let commit = record::commit(self.env);
        let _ = writeln!(
            self.out,
            "# coll bench --suite {}: {} cases on {} (commit {commit})",
            path.display(),
            cases.len(),
            machine.describe()
        );
        // The case's own timeout is `coll bench`'s default unless the suite's command line set one.
        let timeout = (args.timeout != super::DEFAULT_TIMEOUT).then_some(args.timeout);
        let mut failed = Vec::new();
        for case in cases {
            let argv = case.argv(&args.gpus, timeout);
            let _ = writeln!(self.out, "== {}: {}", case.name, argv.join(" "));
            let code = match case.bench_args(&args.gpus, timeout) {
                Ok(case_args) => {
                    let mut kept = None;
                    let code = self.bench_file(&case_args, &mut kept);
                    if let (Some(file), Some(ran)) = (&args.record, kept) {
                        let date = record::utc_now();
                        let lines = Record::of_case(case, &ran, &machine, &commit, &date);
                        if let Err(e) = record::append(file, &lines) {
                            let _ = writeln!(self.err, "error: {e}");
                            return EXIT_FAILURE;
                        }
                    }
                    code
                }
                Err(e) => {
                    let _ = writeln!(self.err, "error: case `{}`: {e}", case.name);
                    EXIT_FAILURE
                }
            };
            let _ = writeln!(self.out, "[rc {code}]");
            if code != EXIT_OK {
                failed.push(case.name.clone());
            }
        }
        if failed.is_empty() {
            EXIT_OK
        } else {
            let _ = writeln!(self.err, "error: cases that failed: {}", failed.join(", "));
            EXIT_FAILURE
        }
    }
}

/// What a case's sweep produced, for its records.
#[derive(Debug)]
pub struct Ran {
    pub collective: coll_lang::builtins::CollectiveKind,
    pub report: super::BenchReport,
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = r#"
[[case]]
name = "allreduce-large"
file = "algorithms/allreduce_ring.coll"
ranks = 2
instances = 16
sizes = { min = "32M", max = "1G" }
iters = 10
warmup = 3
nccl = true
tags = ["targets", "large"]
targets = ["ratio >= 1.15 for 32M..256M"]
"#;

    #[test]
    fn a_case_becomes_its_command_line() {
        let s = Suite::parse("s.toml", ONE).expect("parses");
        let c = &s.cases[0];
        assert_eq!(c.sizes.min, Size(32 << 20));
        assert_eq!(c.sizes.factor, 2);
        assert_eq!(
            c.argv(&[], None).join(" "),
            "algorithms/allreduce_ring.coll --ranks 2 --instances 16 -b 32M -e 1G -f 2 -n 10 -w 3 -c 1 --gpus 0,1 --vs-nccl"
        );
        assert_eq!(
            c.argv(&[2, 3], Some(5.0)).join(" "),
            "algorithms/allreduce_ring.coll --ranks 2 --instances 16 -b 32M -e 1G -f 2 -n 10 -w 3 -c 1 --gpus 2,3 --timeout 5 --vs-nccl"
        );
        assert_eq!(size_arg(8), "8");
        assert_eq!(size_arg(1000), "1000");
        assert_eq!(size_arg(64 << 10), "64K");
    }

    #[test]
    fn positions_are_one_based_and_count_characters() {
        let text = "ab\nµx\n";
        assert_eq!(line_col(text, 0), (1, 1));
        assert_eq!(line_col(text, 3), (2, 1));
        assert_eq!(line_col(text, 5), (2, 2));
        // Inside the two-byte `µ`, and past the end.
        assert_eq!(line_col(text, 4), (2, 1));
        assert_eq!(line_col(text, 99), (3, 1));
    }

    #[test]
    fn bad_files_name_line_and_column() {
        let e = Suite::parse("s.toml", &ONE.replace("iters = 10", "itres = 10"))
            .expect_err("misspelt field");
        let text = e.to_string();
        assert!(
            text.starts_with("s.toml:8:1: unknown field `itres`"),
            "{text}"
        );
        let e = Suite::parse("s.toml", &ONE.replace("\"32M\"", "\"32X\"")).expect_err("size");
        let text = e.to_string();
        assert!(text.starts_with("s.toml:7:"), "{text}");
        assert!(text.contains("`32X` is not a size"), "{text}");
        let e = Suite::parse("s.toml", "[[case]\nname = 1").expect_err("not TOML");
        assert!(e.to_string().starts_with("s.toml:1:"), "{e}");
    }

    #[test]
    fn bad_cases_are_named() {
        let e = Suite::parse("s.toml", &format!("{ONE}{ONE}")).expect_err("twice");
        assert_eq!(
            e.to_string(),
            "s.toml: case `allreduce-large`: a second case of this name"
        );
        let e = Suite::parse(
            "s.toml",
            &ONE.replace("ranks = 2", "ranks = 2\nop = \"mean\""),
        )
        .expect_err("op");
        assert!(
            e.to_string()
                .starts_with("s.toml: case `allreduce-large`: invalid value 'mean'"),
            "{e}"
        );
        let e = Suite::parse("s.toml", &ONE.replace(">= 1.15", ">= fast")).expect_err("target");
        assert!(
            e.to_string()
                .contains("case `allreduce-large`: target `ratio >= fast"),
            "{e}"
        );
    }

    #[test]
    fn selection_by_tag_and_name() {
        let two = format!(
            "{ONE}{}",
            ONE.replace("allreduce-large", "small")
                .replace("\"targets\", \"large\"", "\"small\"")
        );
        let s = Suite::parse("s.toml", &two).expect("parses");
        let names = |v: Vec<&Case>| v.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
        assert_eq!(
            names(s.select(&[], &[]).expect("all")),
            ["allreduce-large", "small"]
        );
        assert_eq!(
            names(s.select(&["small".into()], &[]).expect("tag")),
            ["small"]
        );
        assert_eq!(
            s.select(&["x8".into()], &[]).expect_err("no such tag"),
            "no case has tag `x8`; tags: large, small, targets"
        );
        assert_eq!(
            s.select(&[], &["big".into()]).expect_err("no such case"),
            "no case `big`; cases: allreduce-large, small"
        );
    }
}
