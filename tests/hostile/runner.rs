//! Runs hostile cases through the `coll` binary, each in its own process under an
//! address-space limit and a hang bound, several at once, and collects every failure.
//!
//! A case passes when the process exits 0, 1 (invalid input, failed check) or 2 (usage
//! error) and its standard error shows no sign of an internal error. It fails on a signal
//! (abort, segfault, a kill after an allocation past the limit), on any other exit code (101
//! is a panic), on "panicked", "internal error" or "RUST_BACKTRACE" in standard error, and
//! when it runs past [`hang_bound`] (it is killed then). The bound detects hangs; it is no
//! timing test, so it is many times what any case needs on a loaded 2-core machine.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use wait_timeout::ChildExt;

/// Address space of every case: 4 GiB, in KiB as `ulimit -v` takes it.
pub const ADDRESS_SPACE_KIB: u64 = 4 << 20;
/// Longest a case may run before it counts as hung.
pub const HANG_BOUND: Duration = Duration::from_secs(10);
/// The bound for an input of a megabyte or more in a debug build: unoptimised code reads
/// source text at about a microsecond a byte, so the 10 MB cases take 10-12 s there (linear
/// in the size; under a second in release).
pub const HANG_BOUND_DEBUG_BIG: Duration = Duration::from_secs(40);

/// The hang bound of `case` (the `coll` binary is built in the profile of this test).
pub fn hang_bound(case: &Case) -> Duration {
    if let Some(b) = case.bound {
        return b;
    }
    let big = case.input.as_ref().is_some_and(|(_, b)| b.len() >= 1 << 20);
    if cfg!(debug_assertions) && big {
        HANG_BOUND_DEBUG_BIG
    } else {
        HANG_BOUND
    }
}

/// Internal errors already known, by a line of standard error that identifies each, with
/// the `#[ignore]`d test in `hostile.rs` that reproduces it: a generated case that hits one
/// is counted in [`Report::known`] instead of failing the suite. Delete an entry once its
/// bug is fixed.
pub const KNOWN_BUGS: &[(&str, &str)] = &[];

/// The placeholder in [`Case::args`] replaced by the path of the case's input file.
pub const INPUT: &str = "@IN";

/// One run of `coll`: its arguments, and the input file they name (if any).
#[derive(Clone, Debug)]
pub struct Case {
    /// Unique, stable name: `<family>/<base>/<index>` (the seed's order).
    pub name: String,
    /// The arguments after `coll`; [`INPUT`] stands for the input's path.
    pub args: Vec<String>,
    /// The input file: its extension (which decides how `coll` reads it) and bytes.
    pub input: Option<(&'static str, Vec<u8>)>,
    /// A hang bound of its own, for a case that is slow by design (see [`hang_bound`]).
    pub bound: Option<Duration>,
}

impl Case {
    pub fn new(
        name: impl Into<String>,
        args: &[&str],
        input: Option<(&'static str, Vec<u8>)>,
    ) -> Case {
        Case {
            name: name.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            input,
            bound: None,
        }
    }

    /// The case with hang bound `bound`.
    pub fn with_bound(self, bound: Duration) -> Case {
        Case {
            bound: Some(bound),
            ..self
        }
    }
}

/// Why a case failed.
#[derive(Debug)]
pub struct Failure {
    pub name: String,
    pub command: String,
    pub reason: String,
    pub stderr_head: String,
}

/// What a run of many cases found.
#[derive(Debug, Default)]
pub struct Report {
    pub cases: usize,
    /// How many cases exited 0, 1 and 2.
    pub exits: [usize; 3],
    /// The same per family (the case name up to its first `/`).
    pub by_family: BTreeMap<String, [usize; 3]>,
    /// Cases run per family.
    pub cases_by_family: BTreeMap<String, usize>,
    pub failures: Vec<Failure>,
    /// Cases that hit a bug of [`KNOWN_BUGS`]: the case and the test reproducing the bug.
    pub known: Vec<(String, &'static str)>,
    /// The slowest case and its time.
    pub slowest: (String, Duration),
    pub wall: Duration,
}

/// The family of a case: its name up to the first `/`.
fn family(name: &str) -> String {
    name.split('/').next().unwrap_or("").to_string()
}

impl Report {
    /// Adds the findings of a later batch of cases.
    pub fn absorb(&mut self, other: Report) {
        self.cases += other.cases;
        for i in 0..3 {
            self.exits[i] += other.exits[i];
        }
        for (f, e) in other.by_family {
            let mine = self.by_family.entry(f).or_default();
            for i in 0..3 {
                mine[i] += e[i];
            }
        }
        for (f, n) in other.cases_by_family {
            *self.cases_by_family.entry(f).or_default() += n;
        }
        self.failures.extend(other.failures);
        self.known.extend(other.known);
        if other.slowest.1 > self.slowest.1 {
            self.slowest = other.slowest;
        }
        self.wall += other.wall;
    }

    /// Every failure, one block each, sorted by case name.
    pub fn describe_failures(&self) -> String {
        let mut out = String::new();
        for f in &self.failures {
            out.push_str(&format!(
                "--- {}: {}\n    coll {}\n{}\n",
                f.name, f.reason, f.command, f.stderr_head
            ));
        }
        out
    }

    pub fn summary(&self) -> String {
        let mut s = format!(
            "{} cases in {:.1} s: {} exit 0, {} exit 1, {} exit 2, {} known bugs, {} failed; slowest {} ({:.2} s)",
            self.cases,
            self.wall.as_secs_f64(),
            self.exits[0],
            self.exits[1],
            self.exits[2],
            self.known.len(),
            self.failures.len(),
            self.slowest.0,
            self.slowest.1.as_secs_f64()
        );
        for (family, e) in &self.by_family {
            s.push_str(&format!(
                "\n  {family}: {} exit 0, {} exit 1, {} exit 2",
                e[0], e[1], e[2]
            ));
        }
        for (case, test) in &self.known {
            s.push_str(&format!("\n  {case}: known bug, see {test}"));
        }
        s
    }
}

/// The `coll` binary of the profile this test was built in: `target/<profile>/coll`, next to
/// the `deps/` folder holding this test. `cargo test --workspace` builds it (coll-cli's own
/// integration tests need it); a focused `cargo test -p coll-tests` does not, hence the hint.
pub fn coll_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test runs from target/<profile>/deps");
    let bin = profile_dir.join(format!("coll{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.is_file(),
        "{} is missing: build it first with `cargo build -p coll-cli --bin coll` \
         (with --release for a release test run)",
        bin.display()
    );
    bin
}

/// Runs every case, `workers` at a time, and reports all failures. With `keep`, each case's
/// input stays in that folder under the case's name (slashes become `_`).
pub fn run_all(cases: &[Case], workers: usize, keep: Option<&Path>) -> Report {
    let bin = coll_binary();
    let started = Instant::now();
    let next = AtomicUsize::new(0);
    let mut first = Report {
        cases: cases.len(),
        ..Report::default()
    };
    for c in cases {
        *first.cases_by_family.entry(family(&c.name)).or_default() += 1;
    }
    let report = Mutex::new(first);
    std::thread::scope(|s| {
        for _ in 0..workers.max(1) {
            s.spawn(|| {
                let dir = tempfile::tempdir().expect("a temporary folder");
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(case) = cases.get(i) else { break };
                    let (outcome, took, _) = run_one(&bin, case, dir.path(), keep);
                    let mut r = report.lock().unwrap_or_else(|e| e.into_inner());
                    if took > r.slowest.1 {
                        r.slowest = (case.name.clone(), took);
                    }
                    match outcome {
                        Ok(code) => {
                            r.exits[code] += 1;
                            r.by_family.entry(family(&case.name)).or_default()[code] += 1;
                        }
                        Err(f) => match KNOWN_BUGS
                            .iter()
                            .find(|(sig, _)| f.stderr_head.contains(sig))
                        {
                            Some((_, test)) => r.known.push((f.name, test)),
                            None => r.failures.push(f),
                        },
                    }
                }
            });
        }
    });
    let mut r = report.into_inner().unwrap_or_else(|e| e.into_inner());
    r.failures.sort_by(|a, b| a.name.cmp(&b.name));
    r.known.sort();
    r.wall = started.elapsed();
    r
}

/// Runs one case on its own: `Ok(exit code)` when it passes, its time and its standard
/// error, for tests that check what a case says.
pub fn run_single(case: &Case) -> (Result<usize, Failure>, Duration, String) {
    let dir = tempfile::tempdir().expect("a temporary folder");
    run_one(&coll_binary(), case, dir.path(), None)
}

/// Runs one case: `Ok(exit code)` when it passes, its time and its standard error.
fn run_one(
    bin: &Path,
    case: &Case,
    dir: &Path,
    keep: Option<&Path>,
) -> (Result<usize, Failure>, Duration, String) {
    let input_path = case.input.as_ref().map(|(ext, bytes)| {
        let flat = case.name.replace('/', "_");
        let p = match keep {
            Some(k) => k.join(format!("{flat}.{ext}")),
            None => dir.join(format!("case.{ext}")),
        };
        std::fs::write(&p, bytes).unwrap_or_else(|e| panic!("cannot write {}: {e}", p.display()));
        p
    });
    let args: Vec<String> = case
        .args
        .iter()
        .map(|a| match (&input_path, a.as_str()) {
            (Some(p), INPUT) => p.display().to_string(),
            _ => a.clone(),
        })
        .collect();
    let command = args.join(" ");
    let err_path = dir.join("stderr");
    let err_file = std::fs::File::create(&err_path).expect("a file for standard error");
    // `ulimit -v` in a shell that then becomes `coll`: the limit holds for `coll` alone.
    let script = format!("ulimit -v {ADDRESS_SPACE_KIB} && exec \"$0\" \"$@\"");
    let bound = hang_bound(case);
    let started = Instant::now();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(bin)
        .args(&args)
        .current_dir(dir)
        .env_remove("RUST_BACKTRACE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err_file)
        .spawn()
        .expect("sh starts");
    // Woken by the exit itself: most cases take a few milliseconds, and polling with a
    // sleep added up to a third of the suite's time.
    let status: Option<ExitStatus> = match child.wait_timeout(bound) {
        Ok(Some(st)) => Some(st),
        Ok(None) => {
            let _ = child.kill();
            let _ = child.wait();
            None
        }
        Err(e) => panic!("waiting for {command}: {e}"),
    };
    let took = started.elapsed();
    let stderr =
        String::from_utf8_lossy(&std::fs::read(&err_path).unwrap_or_default()).into_owned();
    let verdict = judge(status, bound, &stderr);
    let result = verdict.map_err(|reason| Failure {
        name: case.name.clone(),
        command: command.clone(),
        reason,
        stderr_head: stderr.lines().take(8).collect::<Vec<_>>().join("\n"),
    });
    if let (Some(k), Some(p)) = (keep, &input_path) {
        eprintln!(
            "{}: coll {command}  ({})",
            case.name,
            p.strip_prefix(k).unwrap_or(p).display()
        );
    }
    (result, took, stderr)
}

/// The verdict on one exit: `Ok(code)` for 0, 1 or 2 without an internal error's signs.
fn judge(status: Option<ExitStatus>, bound: Duration, stderr: &str) -> Result<usize, String> {
    use std::os::unix::process::ExitStatusExt;
    let Some(status) = status else {
        return Err(format!("hung: killed after {} s", bound.as_secs()));
    };
    if let Some(sig) = status.signal() {
        return Err(format!("killed by signal {sig}"));
    }
    let code = status.code().unwrap_or(-1);
    for sign in ["panicked", "internal error", "RUST_BACKTRACE"] {
        if stderr.contains(sign) {
            return Err(format!("exit {code} with `{sign}` in standard error"));
        }
    }
    match code {
        0..=2 => Ok(code as usize),
        _ => Err(format!("exit {code}")),
    }
}
