//! Bakes the commit the binary was built from into it (`COLL_BUILD_COMMIT`), so that
//! `coll bench --suite --record` can key its records by commit on a machine that has the
//! binary but no git. Read from `.git` directly (git itself may be missing where this
//! builds): HEAD, then the branch it names, loose or packed; a worktree's `.git` file points
//! at its own HEAD and at the common directory that holds the refs. Without a repository the
//! value is empty and the record says `unknown`, unless `COLL_COMMIT` is set where it runs.

use std::fs;
use std::path::{Path, PathBuf};

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let commit = head_commit(&root.join(".git")).unwrap_or_default();
    println!("cargo:rustc-env=COLL_BUILD_COMMIT={commit}");
}

/// The commit `dot_git` (a directory, or a worktree's `gitdir:` file) has checked out;
/// prints the files it read as rerun triggers.
fn head_commit(dot_git: &Path) -> Option<String> {
    let git_dir = if dot_git.is_file() {
        // Only the pointer file: a directory here would make cargo scan all of `.git`.
        println!("cargo:rerun-if-changed={}", dot_git.display());
        let text = fs::read_to_string(dot_git).ok()?;
        let dir = PathBuf::from(text.trim().strip_prefix("gitdir:")?.trim());
        if dir.is_absolute() {
            dir
        } else {
            dot_git.parent()?.join(dir)
        }
    } else {
        dot_git.to_path_buf()
    };
    // A worktree keeps HEAD to itself and refs in the common directory.
    let common = match fs::read_to_string(git_dir.join("commondir")) {
        Ok(c) => git_dir.join(c.trim()),
        Err(_) => git_dir.clone(),
    };
    let head_file = git_dir.join("HEAD");
    println!("cargo:rerun-if-changed={}", head_file.display());
    let head = fs::read_to_string(&head_file).ok()?;
    let head = head.trim();
    let Some(name) = head.strip_prefix("ref:").map(str::trim) else {
        return Some(short(head));
    };
    for dir in [&git_dir, &common] {
        let loose = dir.join(name);
        println!("cargo:rerun-if-changed={}", loose.display());
        if let Ok(id) = fs::read_to_string(&loose) {
            return Some(short(id.trim()));
        }
    }
    let packed = common.join("packed-refs");
    println!("cargo:rerun-if-changed={}", packed.display());
    fs::read_to_string(packed).ok()?.lines().find_map(|line| {
        let (id, r) = line.split_once(' ')?;
        (r == name).then(|| short(id))
    })
}

/// The 7-digit abbreviation the records and `bench/results/` names use.
fn short(id: &str) -> String {
    id.chars().take(7).collect()
}
