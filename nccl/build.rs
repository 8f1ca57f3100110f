//! The shared library carries NCCL's soname, so a program linked against libnccl.so.2 that
//! finds this library first (library path or LD_PRELOAD) binds to it.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnccl.so.2");
}
