//! Checking `.coll` programs at `cargo build` time and embedding their plans in the binary.
//!
//! A package that runs coll from Rust names its programs in its `build.rs` (with
//! `coll-compiler` both as a build-dependency and as a dependency):
//!
//! ```no_run
//! // In build.rs's `fn main`:
//! coll_compiler::embed::Programs::new()
//!     .program("algorithms/allreduce_ring.coll") // relative to the package
//!     .ranks([2, 4, 8])
//!     .topology("nvswitch:{n}")
//!     .emit();
//! ```
//!
//! and includes the result with [`include_programs!`](crate::include_programs), which
//! defines one [`EmbeddedProgram`] constant per program (`ALLREDUCE_RING` here) and
//! `COLL_PROGRAMS`, all of them in the order named:
//!
//! ```ignore
//! // In the package's code (needs the `OUT_DIR` of a package with that build script):
//! coll_compiler::include_programs!();
//!
//! let plan = ALLREDUCE_RING.plan(8)?; // validated; 3 ranks would be an error
//! ```
//!
//! Each program is parsed, type-checked,
//! elaborated, proved, lowered and checked for deadlock and resources for every rank count,
//! exactly as `coll check FILE --ranks N --topo T` does ([`crate::compile`] with
//! [`CompileOptions::default`] unless [`Programs::options`] says otherwise). Any failure
//! fails the build with each diagnostic at its `path:line:col` and excerpt, so a wrong
//! algorithm never reaches run time.
//!
//! Rules: [`Programs::ranks`], [`Programs::topology`] and [`Programs::options`] apply to the
//! program named last. Without `ranks`, a program is embedded for those of
//! [`DEFAULT_RANKS`] its header's `ranks` admits (at least one must be), or, with a topology
//! that names no `{n}`, for that topology's rank count. The topology is a template:
//! `{n}` becomes the rank count; the default is `nvswitch:{n}`; a `.json` or `.xml` file is
//! relative to the package. Paths in diagnostics and in the plans' source lines are the
//! program's path as given to [`Programs::program`]. A constant's name is the file stem
//! upper-cased, every character other than an ASCII letter, digit or `_` made `_`, and
//! `COLL_` put first when it would not start with a letter.
//!
//! Invariants of the generated file `coll_programs.rs`: every constant holds the program's
//! source as checked and, per rank count (ascending, no repeats), the JSON plan
//! ([`Plan::to_json`](crate::plan::Plan::to_json)) that passed every check; constant names
//! are distinct.
//!
//! [`Programs::emit`] and [`Programs::try_emit`] read `CARGO_MANIFEST_DIR` and `OUT_DIR`:
//! they are the part of a build script (a binary) that this crate provides, and cargo hands
//! a build script its directories only through these variables. Everything else here,
//! [`Programs::try_emit_to`] and [`Programs::check`] included, reads no environment.

mod program;
#[cfg(test)]
mod tests;

pub use program::EmbeddedProgram;

use crate::error::CompileError;
use crate::plan::{Plan, PlanError};
use crate::topology::Topology;
use crate::{CompileOptions, compile};
use coll_lang::Diagnostics;
use std::fmt::{self, Write as _};
use std::path::{Path, PathBuf};

/// The rank counts a program is embedded for when the build script names none (those its
/// header admits).
pub const DEFAULT_RANKS: [u32; 3] = [2, 4, 8];

/// The topology template when the build script names none: `{n}` GPUs on one NVSwitch, as
/// `coll check` assumes.
pub const DEFAULT_TOPOLOGY: &str = "nvswitch:{n}";

/// The file [`Programs::try_emit_to`] writes into the output directory.
pub const GENERATED_FILE: &str = "coll_programs.rs";

/// The generated constant that lists every program.
const LIST_NAME: &str = "COLL_PROGRAMS";

/// Includes the programs a build script embedded with [`Programs::emit`]: one
/// [`EmbeddedProgram`](crate::embed::EmbeddedProgram) constant per program, named after its
/// file stem, and `COLL_PROGRAMS` listing them all.
#[macro_export]
macro_rules! include_programs {
    () => {
        include!(concat!(env!("OUT_DIR"), "/coll_programs.rs"));
    };
}

/// The programs a build script embeds; see the [module docs](self).
#[derive(Clone, Debug, Default)]
pub struct Programs {
    entries: Vec<Entry>,
    /// A setter called before any program, reported by the emit and check calls.
    misuse: Option<String>,
}

/// One program and how to check it.
#[derive(Clone, Debug)]
struct Entry {
    path: PathBuf,
    ranks: Option<Vec<u32>>,
    topology: Option<String>,
    options: CompileOptions,
}

impl Entry {
    /// The path as given: the name diagnostics and plans use.
    fn name(&self) -> String {
        self.path.display().to_string()
    }

    fn template(&self) -> &str {
        self.topology.as_deref().unwrap_or(DEFAULT_TOPOLOGY)
    }
}

/// A program that passed every check, with its plan for each rank count (ascending).
#[derive(Clone, Debug)]
pub struct Checked {
    /// The name of its constant in the generated file.
    pub name: String,
    /// Its path as given to [`Programs::program`].
    pub file: String,
    pub source: String,
    /// The collective and the header's name (allreduce `ring`), for the constant's doc.
    pub what: String,
    /// The topology template it was lowered for.
    pub topology: String,
    pub plans: Vec<(u32, Plan)>,
}

/// One program (and, once elaborated, one rank count) that did not pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The program's path as given to [`Programs::program`].
    pub file: String,
    /// The rank count and topology being checked; `None` when the file failed before
    /// elaboration (reading, parsing, type-checking).
    pub target: Option<(u32, String)>,
    /// One line per diagnostic: `path:line:col: error: message`.
    pub lines: Vec<String>,
    /// Every diagnostic with its excerpt, as `coll check` prints it without colour.
    pub rendered: String,
}

impl Failure {
    fn of<K: fmt::Display>(file: &str, target: Option<(u32, &str)>, d: &Diagnostics<K>) -> Self {
        Failure {
            file: file.to_string(),
            target: target.map(|(n, t)| (n, t.to_string())),
            lines: d.list.iter().map(|x| x.short(&d.file)).collect(),
            rendered: d.render(),
        }
    }

    /// A failure with no source location (an unreadable file, a bad topology).
    fn plain(file: &str, target: Option<(u32, &str)>, message: String) -> Self {
        Failure {
            file: file.to_string(),
            target: target.map(|(n, t)| (n, t.to_string())),
            lines: vec![message.clone()],
            rendered: format!("error: {message}\n"),
        }
    }
}

/// Why embedding failed, or why an embedded plan cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// The build script used the builder wrongly (the message says how).
    #[error("coll embedding: {0}")]
    Usage(String),
    /// [`Programs::emit`] or [`Programs::try_emit`] ran outside a build script.
    #[error(
        "coll embedding: `{0}` is not set; `emit` and `try_emit` run inside a build script \
         (use `try_emit_to` elsewhere)"
    )]
    NotInBuildScript(&'static str),
    #[error("coll embedding: cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Programs that failed their checks, each with its rendered diagnostics.
    #[error("{}", render_failures(.0))]
    Rejected(Vec<Failure>),
    /// [`EmbeddedProgram::plan`] for a rank count the program was not embedded for.
    #[error("{program} has no embedded plan for {ranks} ranks; it has {}", counts(.available))]
    UnknownRanks {
        program: String,
        ranks: u32,
        available: Vec<u32>,
    },
    /// An embedded plan that does not load (hand-written, or from another version).
    #[error("the embedded plan of {program} for {ranks} ranks does not load: {source}")]
    Plan {
        program: String,
        ranks: u32,
        #[source]
        source: PlanError,
    },
}

impl EmbedError {
    /// One-line messages, each with its `path:line:col` where it has one: what a build
    /// script shows as `cargo:warning` lines.
    pub fn lines(&self) -> Vec<String> {
        match self {
            EmbedError::Rejected(failures) => failures
                .iter()
                .flat_map(|f| f.lines.iter().map(|l| l.replace('\n', " ")))
                .collect(),
            other => vec![other.to_string().replace('\n', " ")],
        }
    }
}

fn counts(available: &[u32]) -> String {
    match available {
        [] => "none".to_string(),
        _ => {
            let list: Vec<String> = available.iter().map(u32::to_string).collect();
            format!("plans for {} ranks", list.join(", "))
        }
    }
}

fn render_failures(failures: &[Failure]) -> String {
    let mut out = String::new();
    for f in failures {
        out.push_str(f.rendered.trim_end());
        out.push_str("\n\n");
    }
    let n = failures.len();
    let _ = write!(
        out,
        "coll embedding: {n} check{} failed",
        if n == 1 { "" } else { "s" }
    );
    out
}

impl Programs {
    pub fn new() -> Programs {
        Programs::default()
    }

    /// Adds a `.coll` program; a relative path is relative to the package (the directory of
    /// its `Cargo.toml`).
    pub fn program(mut self, path: impl AsRef<Path>) -> Programs {
        self.entries.push(Entry {
            path: path.as_ref().to_path_buf(),
            ranks: None,
            topology: None,
            options: CompileOptions::default(),
        });
        self
    }

    /// The rank counts to prove and embed the last program for.
    pub fn ranks(self, ranks: impl IntoIterator<Item = u32>) -> Programs {
        let mut ranks: Vec<u32> = ranks.into_iter().collect();
        ranks.sort_unstable();
        ranks.dedup();
        self.set("ranks", |e| e.ranks = Some(ranks))
    }

    /// The topology of the last program: a preset or a `.json`/`.xml` file, where `{n}`
    /// stands for the rank count (`nvswitch:{n}`, `ring:{n}`, `cluster:2x4`).
    pub fn topology(self, template: impl Into<String>) -> Programs {
        let template = template.into();
        self.set("topology", |e| e.topology = Some(template))
    }

    /// How to compile the last program (root, placement, instances, limits); the default
    /// is what `coll check` uses.
    pub fn options(self, options: CompileOptions) -> Programs {
        self.set("options", |e| e.options = options)
    }

    fn set(mut self, what: &str, f: impl FnOnce(&mut Entry)) -> Programs {
        match self.entries.last_mut() {
            Some(e) => f(e),
            None => {
                self.misuse.get_or_insert_with(|| {
                    format!("`{what}` applies to the program named last, but no program was named")
                });
            }
        }
        self
    }

    /// Checks every program and writes the generated file into `OUT_DIR`, printing the
    /// `cargo:rerun-if-changed` lines for every file read; on failure, prints each
    /// diagnostic as a `cargo:warning` line and all of them with excerpts on standard
    /// error, and ends the build script with exit code 1.
    pub fn emit(&self) {
        if let Err(e) = self.try_emit() {
            for line in e.lines() {
                println!("cargo:warning={line}");
            }
            eprintln!("{e}");
            std::process::exit(1);
        }
    }

    /// [`Programs::emit`] returning the error instead of ending the process; on success,
    /// the path of the generated file. Prints the `cargo:rerun-if-changed` lines.
    pub fn try_emit(&self) -> Result<PathBuf, EmbedError> {
        let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
            .ok_or(EmbedError::NotInBuildScript("CARGO_MANIFEST_DIR"))?;
        let out = std::env::var_os("OUT_DIR").ok_or(EmbedError::NotInBuildScript("OUT_DIR"))?;
        let manifest = Path::new(&manifest);
        // Before checking, so that a failed build reruns when any of them changes.
        for path in self.inputs(manifest) {
            println!("cargo:rerun-if-changed={}", path.display());
        }
        self.try_emit_to(manifest, Path::new(&out))
    }

    /// Checks every program, with relative paths taken from `manifest_dir`, and writes
    /// [`GENERATED_FILE`] into `out_dir`; returns its path. Prints nothing.
    pub fn try_emit_to(&self, manifest_dir: &Path, out_dir: &Path) -> Result<PathBuf, EmbedError> {
        let checked = self.check(manifest_dir)?;
        let path = out_dir.join(GENERATED_FILE);
        std::fs::write(&path, generate(&checked)).map_err(|source| EmbedError::Write {
            path: path.clone(),
            source,
        })?;
        Ok(path)
    }

    /// The files the programs read: each program and each topology file.
    pub fn inputs(&self, manifest_dir: &Path) -> Vec<PathBuf> {
        let mut files = Vec::new();
        for e in &self.entries {
            files.push(manifest_dir.join(&e.path));
            let template = e.template();
            if is_topology_file(template) {
                let counts = e.ranks.clone().unwrap_or_else(|| DEFAULT_RANKS.to_vec());
                for n in counts {
                    files.push(manifest_dir.join(instantiate(template, n)));
                }
            }
        }
        files.sort();
        files.dedup();
        files
    }

    /// Checks every program for every rank count, as `coll check FILE --ranks N --topo T`
    /// does, and returns the checked programs in the order named; every failure of every
    /// program is in the error.
    pub fn check(&self, manifest_dir: &Path) -> Result<Vec<Checked>, EmbedError> {
        if let Some(m) = &self.misuse {
            return Err(EmbedError::Usage(m.clone()));
        }
        if self.entries.is_empty() {
            return Err(EmbedError::Usage("no program was named".into()));
        }
        self.check_names()?;
        let mut failures = Vec::new();
        let mut checked = Vec::new();
        for e in &self.entries {
            if let Some(c) = check_entry(e, manifest_dir, &mut failures) {
                checked.push(c);
            }
        }
        if failures.is_empty() {
            Ok(checked)
        } else {
            Err(EmbedError::Rejected(failures))
        }
    }

    /// Every program gets a distinct constant, and none is the list's.
    fn check_names(&self) -> Result<(), EmbedError> {
        let mut seen: Vec<(String, String)> = vec![(LIST_NAME.to_string(), String::new())];
        for e in &self.entries {
            if e.ranks.as_ref().is_some_and(Vec::is_empty) {
                return Err(EmbedError::Usage(format!(
                    "`ranks` of {} names no rank count",
                    e.name()
                )));
            }
            let name = const_name(&e.path);
            if let Some((_, other)) = seen.iter().find(|(n, _)| *n == name) {
                let clash = if other.is_empty() {
                    format!("the list of all programs, `{LIST_NAME}`")
                } else {
                    other.clone()
                };
                return Err(EmbedError::Usage(format!(
                    "{} would be the constant `{name}`, as {clash} is; rename one of them",
                    e.name()
                )));
            }
            seen.push((name, e.name()));
        }
        Ok(())
    }
}

/// Loads and checks one program for each of its rank counts; failures go to `failures`.
fn check_entry(e: &Entry, manifest_dir: &Path, failures: &mut Vec<Failure>) -> Option<Checked> {
    let file = e.name();
    let bytes = match std::fs::read(manifest_dir.join(&e.path)) {
        Ok(b) => b,
        Err(err) => {
            failures.push(Failure::plain(
                &file,
                None,
                format!("cannot read {file}: {err}"),
            ));
            return None;
        }
    };
    let module = match coll_lang::load_bytes(&file, bytes) {
        Ok(m) => m,
        Err(d) => {
            failures.push(Failure::of(&file, None, &d));
            return None;
        }
    };
    let template = e.template();
    let (counts, defaulted) = match (&e.ranks, template.contains("{n}")) {
        (Some(r), _) => (r.clone(), false),
        (None, true) => (DEFAULT_RANKS.to_vec(), true),
        // A fixed topology fixes the rank count.
        (None, false) => match topology(template, manifest_dir) {
            Ok(t) => (
                vec![u32::try_from(t.num_ranks()).unwrap_or(u32::MAX)],
                false,
            ),
            Err(message) => {
                failures.push(Failure::plain(&file, None, format!("{file}: {message}")));
                return None;
            }
        },
    };
    let before = failures.len();
    let mut plans = Vec::new();
    let mut refused = None;
    for n in counts {
        let spec = instantiate(template, n);
        let target = Some((n, spec.as_str()));
        let topo = match topology(&spec, manifest_dir) {
            Ok(t) if t.num_ranks() == n as usize => t,
            Ok(t) => {
                let message = format!(
                    "{file}: {n} ranks but topology `{spec}` has {} ranks",
                    t.num_ranks()
                );
                failures.push(Failure::plain(&file, target, message));
                continue;
            }
            Err(message) => {
                failures.push(Failure::plain(&file, target, format!("{file}: {message}")));
                continue;
            }
        };
        match compile(&module, &topo, &e.options) {
            Ok(c) => plans.push((n, c.into_plan().into_inner())),
            // The default counts are a guess: skip those the header refuses.
            Err(d) if defaulted && refuses_ranks(&d) => refused = Some(d),
            Err(d) => {
                let d = with_target(d, n, topo.name());
                failures.push(Failure::of(&file, target, &d));
            }
        }
    }
    if plans.is_empty() && failures.len() == before {
        // Only a defaulted list gets here with nothing: its every count was refused.
        let list: Vec<String> = DEFAULT_RANKS.iter().map(u32::to_string).collect();
        let note = format!(
            "embedding tries {} ranks unless `.ranks(...)` names others",
            list.join(", ")
        );
        failures.push(match refused {
            Some(mut d) => {
                if let Some(first) = d.list.first_mut() {
                    first.notes.push(note);
                }
                Failure::of(&file, None, &d)
            }
            None => Failure::plain(
                &file,
                None,
                format!("{file}: no rank count to embed; {note}"),
            ),
        });
    }
    if failures.len() > before {
        return None;
    }
    Some(Checked {
        name: const_name(&e.path),
        file,
        source: module.file.text().to_string(),
        what: format!("{} `{}`", module.summary.kind.name(), module.summary.name),
        topology: template.to_string(),
        plans,
    })
}

/// The header's `ranks` refused the rank count, and nothing else went wrong.
fn refuses_ranks(d: &Diagnostics<CompileError>) -> bool {
    matches!(d.list.as_slice(), [one] if matches!(one.kind, CompileError::UnsupportedRanks { .. }))
}

/// Says which rank count and topology a diagnostic is about, unless it already does (the
/// proof's diagnostics say so).
fn with_target(mut d: Diagnostics<CompileError>, n: u32, topo: &str) -> Diagnostics<CompileError> {
    let said = format!("for n = {n} on {topo}");
    for diag in &mut d.list {
        if !diag.notes.iter().any(|note| note.contains(&said)) {
            diag.notes.push(format!("embedding {said}"));
        }
    }
    d
}

fn instantiate(template: &str, n: u32) -> String {
    template.replace("{n}", &n.to_string())
}

fn is_topology_file(spec: &str) -> bool {
    let lower = spec.to_ascii_lowercase();
    lower.ends_with(".json") || lower.ends_with(".xml")
}

/// A preset, or a topology file relative to the package.
fn topology(spec: &str, manifest_dir: &Path) -> Result<Topology, String> {
    let parsed = if is_topology_file(spec) {
        let path = manifest_dir.join(spec);
        Topology::parse(&path.display().to_string())
    } else {
        Topology::parse(spec)
    };
    parsed.map_err(|e| format!("topology `{spec}`: {e}"))
}

/// The constant's name for a program file (see the module docs).
fn const_name(path: &Path) -> String {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut name: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        name.insert_str(0, "COLL_");
    }
    name
}

/// The text of the generated file. String literals are written with `{:?}`, whose escapes
/// are Rust's.
fn generate(checked: &[Checked]) -> String {
    const TYPE: &str = "::coll_compiler::embed::EmbeddedProgram";
    let mut out = String::from(
        "// Generated by coll_compiler::embed from the package's build.rs: every program was \
         parsed,\n// proved and checked for each rank count below. Do not edit.\n",
    );
    for c in checked {
        let counts: Vec<String> = c.plans.iter().map(|(n, _)| n.to_string()).collect();
        let doc = format!(
            " `{}`: {}, proved and checked for {} ranks on `{}`.",
            c.file,
            c.what,
            counts.join(", "),
            c.topology
        );
        let _ = writeln!(out, "\n#[doc = {doc:?}]");
        let _ = writeln!(out, "#[allow(dead_code, unreachable_pub)]");
        let _ = writeln!(out, "pub const {}: {TYPE} = {TYPE}::new(", c.name);
        let _ = writeln!(out, "    {:?},", c.file);
        let _ = writeln!(out, "    {:?},", c.source);
        out.push_str("    &[\n");
        for (n, plan) in &c.plans {
            let _ = writeln!(out, "        ({n}, {:?}),", plan.to_json());
        }
        out.push_str("    ],\n);\n");
    }
    let names: Vec<&str> = checked.iter().map(|c| c.name.as_str()).collect();
    let _ = writeln!(
        out,
        "\n/// Every embedded program, in the order the build script named them.\n\
         #[allow(dead_code, unreachable_pub)]\n\
         pub const {LIST_NAME}: &[{TYPE}] = &[{}];",
        names.join(", ")
    );
    out
}
