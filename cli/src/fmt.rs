//! `coll fmt`: print `.coll` files in the canonical layout (comments kept), rewrite them
//! (`--write`), or name the first line of each that is not formatted (`--check`, exit 1).

use crate::output::Ctx;
use clap::Args;
use coll_lang::SourceFile;
use std::path::PathBuf;

/// The arguments of `coll fmt`.
#[derive(Debug, Args)]
pub struct FmtArgs {
    /// Files to format.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Rewrite the files in place.
    #[arg(long, conflicts_with = "check")]
    write: bool,
    /// Print nothing but the files that are not formatted; exit 1 if any.
    #[arg(long)]
    check: bool,
}

impl Ctx<'_> {
    /// Runs `coll fmt`; returns the exit code.
    pub fn fmt(&mut self, args: &FmtArgs) -> u8 {
        let mut failed = 0;
        let several = args.files.len() > 1;
        for path in &args.files {
            let Some(m) = self.load(path) else {
                failed += 1;
                continue;
            };
            let formatted = coll_lang::fmt::format(m.file.text(), &m.program);
            let same = formatted == m.file.text();
            if args.check {
                if !same {
                    failed += 1;
                    self.explain_unformatted(&m.file, &formatted);
                }
            } else if args.write {
                if !same {
                    if let Err(e) = std::fs::write(path, &formatted) {
                        let _ = writeln!(self.err, "error: cannot write {}: {e}", path.display());
                        failed += 1;
                    } else {
                        let _ = writeln!(self.out, "formatted {}", path.display());
                    }
                }
            } else {
                if several {
                    let _ = writeln!(self.out, "==> {} <==", path.display());
                }
                let _ = write!(self.out, "{formatted}");
            }
        }
        self.finish(failed, args.files.len())
    }

    /// Names the first line that differs from the canonical layout.
    fn explain_unformatted(&mut self, file: &SourceFile, formatted: &str) {
        let mut have = file.text().lines();
        let mut want = formatted.lines();
        let mut line = 1;
        loop {
            match (have.next(), want.next()) {
                (Some(a), Some(b)) if a == b => line += 1,
                (None, None) => {
                    // Same lines: only the final newline differs.
                    let _ = writeln!(
                        self.err,
                        "{}:{line}: not formatted: a file ends with exactly one newline",
                        file.name()
                    );
                    return;
                }
                (a, b) => {
                    let _ = writeln!(
                        self.err,
                        "{}:{line}: not formatted\n  found:    {}\n  expected: {}",
                        file.name(),
                        a.map_or("<end of file>".to_string(), |s| format!("{s:?}")),
                        b.map_or("<end of file>".to_string(), |s| format!("{s:?}")),
                    );
                    return;
                }
            }
        }
    }
}
