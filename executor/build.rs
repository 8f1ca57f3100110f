//! Embeds the shipped algorithms (`../algorithms/*.coll`) so `coll compile --auto` can choose
//! among them from any working directory, and generates the Rust side of the GPU kernel's ABI
//! (which `src/cuda/abi.rs` includes) from its header `src/cuda/kernel/abi.h`: a header the
//! generator (`src/cuda/abi_gen.rs`) cannot read or lay out fails the build, naming its line.
//! With `COLL_EMBED_KERNELS=DIR` (a kernel cache `coll kernels` filled) it also builds that
//! directory's kernel images into the binary (`src/cuda/device/builtin_gen.rs`); a directory
//! without any fails the build, saying how to fill it.

use std::fmt::Write;
use std::path::Path;

#[path = "src/cuda/abi_gen.rs"]
mod abi_gen;
#[path = "src/cuda/device/builtin_gen.rs"]
mod builtin_gen;

fn main() {
    let out_dir = std::env::var("OUT_DIR").unwrap_or_else(|_| ".".into());
    abi(Path::new(&out_dir));
    builtin_kernels(Path::new(&out_dir));
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../algorithms");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p: &std::path::PathBuf| p.extension().is_some_and(|x| x == "coll"));
    files.sort();
    let mut out = String::from(
        "/// Shipped algorithms: (file name, source).\npub const SHIPPED: &[(&str, &str)] = &[\n",
    );
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
        let name = f
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "    ({name:?}, include_str!({:?})),",
            f.display().to_string()
        );
    }
    out.push_str("];\n");
    let dest = Path::new(&out_dir).join("shipped.rs");
    if let Err(e) = std::fs::write(&dest, out) {
        println!("cargo:warning=cannot write {}: {e}", dest.display());
    }
}

/// Writes `abi.rs` into `out_dir` from the kernel's ABI header, or stops the build saying why.
fn abi(out_dir: &Path) {
    let header = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cuda/kernel/abi.h");
    println!("cargo:rerun-if-changed={}", header.display());
    let fail = |msg: String| -> ! {
        eprintln!("error: {msg}");
        std::process::exit(1)
    };
    let src = std::fs::read_to_string(&header)
        .unwrap_or_else(|e| fail(format!("cannot read {}: {e}", header.display())));
    let rust = abi_gen::generate(&src, "src/cuda/kernel/abi.h")
        .unwrap_or_else(|e| fail(format!("{}:{}: {}", header.display(), e.line, e.msg)));
    let dest = out_dir.join("abi.rs");
    if let Err(e) = std::fs::write(&dest, rust) {
        fail(format!("cannot write {}: {e}", dest.display()));
    }
}

/// Writes `builtin_kernels.rs` into `out_dir`: the images of `COLL_EMBED_KERNELS`'s
/// directory, or none; a directory it cannot use stops the build saying why.
fn builtin_kernels(out_dir: &Path) {
    println!("cargo:rerun-if-env-changed=COLL_EMBED_KERNELS");
    let dir = std::env::var_os("COLL_EMBED_KERNELS").filter(|d| !d.is_empty());
    if let Some(d) = &dir {
        // Cargo reads a relative path here against the package, not where it was started.
        let d = std::fs::canonicalize(d).unwrap_or_else(|_| Path::new(d).to_path_buf());
        println!("cargo:rerun-if-changed={}", d.display());
    }
    let rust = builtin_gen::generate(dir.as_deref().map(Path::new)).unwrap_or_else(|e| {
        eprintln!("error: COLL_EMBED_KERNELS: {e}");
        std::process::exit(1)
    });
    let dest = out_dir.join("builtin_kernels.rs");
    if let Err(e) = std::fs::write(&dest, rust) {
        eprintln!("error: cannot write {}: {e}", dest.display());
        std::process::exit(1)
    }
}
