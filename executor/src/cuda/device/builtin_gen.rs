//! Kernel images built into the binary: the generator behind `device::builtin`, run by
//! `executor/build.rs` (which includes this file with `#[path]`) and unit-tested here.
//!
//! A build with `COLL_EMBED_KERNELS=DIR` set, where `DIR` is a kernel cache that
//! `coll kernels --arch sm_XX --cache-dir DIR` filled, carries every machine-code image
//! (`kernel-*.cubin`) found there, as NCCL carries its compiled kernels: a process on a GPU
//! of that architecture then loads them without NVRTC or a cache, the cold start of a fresh
//! machine included. An image is found by its cache file name, which holds the hash of the
//! kernel source it was compiled from, so an image of another source is never used (it is
//! simply not found, and the unit compiles as without it).
//!
//! Invariants of the output: a Rust `const` slice of `(file name, bytes)` pairs, sorted by
//! name, names unique (they are the files of one directory), each name of the form
//! `kernel-<16 hex digits>-<arch>-<unit>.cubin`; empty when no directory is given.

use std::fmt::Write;
use std::path::Path;

/// The file names `dir` holds that are machine-code images of a kernel cache, sorted.
pub fn images_in(dir: &Path) -> Result<Vec<String>, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if is_image_name(&name) && entry.path().is_file() {
            names.push(name);
        }
    }
    names.sort();
    if names.is_empty() {
        return Err(format!(
            "{} holds no kernel image (kernel-*.cubin): fill it with `coll kernels --arch sm_XX --cache-dir {}`",
            dir.display(),
            dir.display()
        ));
    }
    Ok(names)
}

/// Whether `name` is a cache file name of a machine-code image:
/// `kernel-<16 hex digits>-<arch>-<unit>.cubin`.
pub fn is_image_name(name: &str) -> bool {
    let Some(rest) = name
        .strip_prefix("kernel-")
        .and_then(|r| r.strip_suffix(".cubin"))
    else {
        return false;
    };
    let (hash, tail) = rest.split_at(rest.len().min(16));
    hash.len() == 16
        && hash.bytes().all(|b| b.is_ascii_hexdigit())
        && tail.starts_with("-sm_")
        && tail.len() > 4
        && tail
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The Rust source of the table: every image of `dir` (none when `dir` is `None`).
pub fn generate(dir: Option<&Path>) -> Result<String, String> {
    let mut out = String::from(
        "/// Kernel images built in (`COLL_EMBED_KERNELS`): (cache file name, bytes), sorted.\n\
         pub const BUILTIN: &[(&str, &[u8])] = &[\n",
    );
    if let Some(dir) = dir {
        let dir = std::fs::canonicalize(dir).map_err(|e| {
            // A build script runs in its package's directory, not where cargo was started.
            let hint = if dir.is_relative() {
                " (a relative path is read from the executor crate's directory: give an absolute one)"
            } else {
                ""
            };
            format!("cannot read {}: {e}{hint}", dir.display())
        })?;
        for name in images_in(&dir)? {
            let path = dir.join(&name);
            let _ = writeln!(
                out,
                "    ({name:?}, include_bytes!({:?})),",
                path.display().to_string()
            );
        }
    }
    out.push_str("];\n");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_names_are_cache_files_of_machine_code() {
        assert!(is_image_name(
            "kernel-94a6208196842f40-sm_90-f32-sum-bulk.cubin"
        ));
        assert!(is_image_name(
            "kernel-94a6208196842f40-sm_100-bf16-aux.cubin"
        ));
        // PTX, lock files, other hashes and other files are not.
        assert!(!is_image_name(
            "kernel-94a6208196842f40-sm_90-f32-sum-bulk.ptx"
        ));
        assert!(!is_image_name(
            "kernel-94a6208196842f40-sm_90-f32-aux.cubin.lock"
        ));
        assert!(!is_image_name("kernel-94a62081-sm_90-f32-aux.cubin"));
        assert!(!is_image_name(
            "kernel-94a6208196842f4g-sm_90-f32-aux.cubin"
        ));
        assert!(!is_image_name("kernel-94a6208196842f40-sm_.cubin"));
        assert!(!is_image_name(
            "kernel-94a6208196842f40-sm_90-f32 aux.cubin"
        ));
        assert!(!is_image_name("notes.txt"));
    }

    #[test]
    fn the_table_holds_each_image_of_the_directory_sorted() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let b = "kernel-00000000000000ab-sm_90-f32-aux.cubin";
        let a = "kernel-00000000000000ab-sm_90-f32-sum-bulk.cubin";
        for (name, bytes) in [
            (a, &b"A"[..]),
            (b, b"B"),
            ("kernel-00000000000000ab-sm_90-f32-aux.ptx", b"P"),
        ] {
            std::fs::write(dir.path().join(name), bytes).expect("writes");
        }
        std::fs::write(dir.path().join(format!("{b}.lock")), b"").expect("writes");
        let rust = generate(Some(dir.path())).expect("generates");
        let lines: Vec<&str> = rust
            .lines()
            .filter(|l| l.contains("include_bytes!"))
            .collect();
        assert_eq!(lines.len(), 2, "{rust}");
        assert!(
            lines[0].starts_with(&format!("    ({b:?}, include_bytes!(")),
            "{rust}"
        );
        assert!(
            lines[1].starts_with(&format!("    ({a:?}, include_bytes!(")),
            "{rust}"
        );
        assert_eq!(generate(None).expect("generates").lines().count(), 3);
    }

    #[test]
    fn a_directory_without_images_is_an_error_saying_how_to_fill_it() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let err = generate(Some(dir.path())).expect_err("no images");
        assert!(
            err.contains("holds no kernel image") && err.contains("coll kernels --arch"),
            "{err}"
        );
        let err = generate(Some(&dir.path().join("missing"))).expect_err("no directory");
        assert!(err.starts_with("cannot read "), "{err}");
    }
}
