//! The real NCCL, loaded with `dlopen` for what coll forwards.
//!
//! It is loaded only when a call needs it (and never with `COLL_NCCL_FORWARD=0`), from the
//! path `COLL_NCCL_REAL` gives, else from the first of [`candidates`] that is a different
//! library from this one: when this library is itself installed as `libnccl.so.2` on the
//! search path, loading by name would find it again, so each candidate is opened by path
//! and refused when its `ncclGetVersion` is ours. It is opened with `RTLD_DEEPBIND` so that
//! its own calls to NCCL functions bind inside it, not to this library's exports that
//! `LD_PRELOAD` puts first.
//!
//! Invariant: a [`RealNccl`] holds its library open for as long as it lives, and every
//! function pointer in it came from that library.

use crate::abi::{RawConfig, UniqueId};
use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
use std::ffi::{c_char, c_int, c_void};
use std::path::{Path, PathBuf};

/// glibc's `RTLD_DEEPBIND` and `RTLD_NOLOAD` (the same values on x86-64 and aarch64).
const RTLD_DEEPBIND: c_int = 0x0008;
const RTLD_NOLOAD: c_int = 0x0004;

/// An opaque `ncclComm_t` of the real NCCL.
pub type RawComm = *mut c_void;
/// A `cudaStream_t`.
pub type RawStream = *mut c_void;

/// Why the real NCCL could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("the real NCCL is not loaded: COLL_NCCL_FORWARD=0")]
    Disabled,
    #[error("{}: {reason}", path.display())]
    Open { path: PathBuf, reason: String },
    #[error("{} is this library, not the real NCCL", path.display())]
    Itself { path: PathBuf },
    #[error(
        "{} is already loaded in this process (by the program itself): its own calls to NCCL \
         functions would reach this library; point COLL_NCCL_REAL at another copy",
        path.display()
    )]
    Loaded { path: PathBuf },
    #[error(
        "the real NCCL was not found (tried {}); set COLL_NCCL_REAL to its libnccl.so.2",
        tried.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    NotFound { tried: Vec<PathBuf> },
}

macro_rules! functions {
    ($($field:ident = $sym:literal : fn($($arg:ty),*) -> $ret:ty;)*) => {
        /// The real NCCL's functions this library forwards to; `None` where that NCCL does
        /// not export one (an older version).
        pub struct RealNccl {
            pub path: PathBuf,
            $(pub $field: Option<unsafe extern "C" fn($($arg),*) -> $ret>,)*
            _lib: Library,
        }

        impl std::fmt::Debug for RealNccl {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct("RealNccl").field("path", &self.path).finish_non_exhaustive()
            }
        }

        impl RealNccl {
            fn resolve(lib: Library, path: PathBuf) -> RealNccl {
                RealNccl {
                    path,
                    // SAFETY: each symbol is NCCL's C function of that name, whose C
                    // signature (nccl.h 2.28) the declared type matches.
                    $($field: unsafe { lib.get::<unsafe extern "C" fn($($arg),*) -> $ret>(
                        concat!($sym, "\0").as_bytes()) }.ok().map(|s| *s),)*
                    _lib: lib,
                }
            }
        }
    };
}

functions! {
    get_version = "ncclGetVersion": fn(*mut c_int) -> c_int;
    get_unique_id = "ncclGetUniqueId": fn(*mut UniqueId) -> c_int;
    get_error_string = "ncclGetErrorString": fn(c_int) -> *const c_char;
    get_last_error = "ncclGetLastError": fn(RawComm) -> *const c_char;
    comm_init_rank = "ncclCommInitRank": fn(*mut RawComm, c_int, UniqueId, c_int) -> c_int;
    comm_init_rank_config = "ncclCommInitRankConfig":
        fn(*mut RawComm, c_int, UniqueId, c_int, *mut RawConfig) -> c_int;
    comm_init_all = "ncclCommInitAll": fn(*mut RawComm, c_int, *const c_int) -> c_int;
    comm_split = "ncclCommSplit": fn(RawComm, c_int, c_int, *mut RawComm, *mut RawConfig) -> c_int;
    comm_finalize = "ncclCommFinalize": fn(RawComm) -> c_int;
    comm_destroy = "ncclCommDestroy": fn(RawComm) -> c_int;
    comm_abort = "ncclCommAbort": fn(RawComm) -> c_int;
    comm_get_async_error = "ncclCommGetAsyncError": fn(RawComm, *mut c_int) -> c_int;
    comm_user_rank = "ncclCommUserRank": fn(RawComm, *mut c_int) -> c_int;
    comm_count = "ncclCommCount": fn(RawComm, *mut c_int) -> c_int;
    comm_register = "ncclCommRegister": fn(RawComm, *mut c_void, usize, *mut *mut c_void) -> c_int;
    comm_deregister = "ncclCommDeregister": fn(RawComm, *mut c_void) -> c_int;
    comm_window_register = "ncclCommWindowRegister":
        fn(RawComm, *mut c_void, usize, *mut *mut c_void, c_int) -> c_int;
    comm_window_deregister = "ncclCommWindowDeregister": fn(RawComm, *mut c_void) -> c_int;
    red_op_create_pre_mul_sum = "ncclRedOpCreatePreMulSum":
        fn(*mut c_int, *mut c_void, c_int, c_int, RawComm) -> c_int;
    red_op_destroy = "ncclRedOpDestroy": fn(c_int, RawComm) -> c_int;
    all_reduce = "ncclAllReduce":
        fn(*const c_void, *mut c_void, usize, c_int, c_int, RawComm, RawStream) -> c_int;
    all_gather = "ncclAllGather":
        fn(*const c_void, *mut c_void, usize, c_int, RawComm, RawStream) -> c_int;
    reduce_scatter = "ncclReduceScatter":
        fn(*const c_void, *mut c_void, usize, c_int, c_int, RawComm, RawStream) -> c_int;
    all_to_all = "ncclAlltoAll":
        fn(*const c_void, *mut c_void, usize, c_int, RawComm, RawStream) -> c_int;
    broadcast = "ncclBroadcast":
        fn(*const c_void, *mut c_void, usize, c_int, c_int, RawComm, RawStream) -> c_int;
    reduce = "ncclReduce":
        fn(*const c_void, *mut c_void, usize, c_int, c_int, c_int, RawComm, RawStream) -> c_int;
    send = "ncclSend": fn(*const c_void, usize, c_int, c_int, RawComm, RawStream) -> c_int;
    recv = "ncclRecv": fn(*mut c_void, usize, c_int, c_int, RawComm, RawStream) -> c_int;
    group_start = "ncclGroupStart": fn() -> c_int;
    group_end = "ncclGroupEnd": fn() -> c_int;
    mem_alloc = "ncclMemAlloc": fn(*mut *mut c_void, usize) -> c_int;
    mem_free = "ncclMemFree": fn(*mut c_void) -> c_int;
}

/// Where to look for the real NCCL when `COLL_NCCL_REAL` is unset: each directory of
/// `library_path` (the process's `LD_LIBRARY_PATH`, as the entry layer passes it), then the
/// system's library directories.
pub fn candidates(library_path: Option<&str>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = library_path
        .unwrap_or("")
        .split(':')
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .collect();
    for d in [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/usr/local/lib",
        "/usr/lib",
    ] {
        dirs.push(PathBuf::from(d));
    }
    dirs.into_iter().map(|d| d.join("libnccl.so.2")).collect()
}

impl RealNccl {
    /// A fresh id from the real NCCL's `ncclGetUniqueId` (`None` where it does not export
    /// one).
    pub fn unique_id(&self) -> crate::error::Result<Option<UniqueId>> {
        let Some(f) = self.get_unique_id else {
            return Ok(None);
        };
        let mut id = UniqueId::from_bytes(&[0; crate::abi::UNIQUE_ID_BYTES]);
        // SAFETY: ncclGetUniqueId writes one 128-byte id.
        crate::route::check_real("ncclGetUniqueId", unsafe { f(&mut id) })?;
        Ok(Some(id))
    }

    /// Opens the real NCCL at `path`; `ours` is this library's `ncclGetVersion`, to refuse
    /// loading this library again under the real one's name.
    pub fn open(path: &Path, ours: usize) -> Result<RealNccl, LoadError> {
        // A copy the program loaded itself was bound without DEEPBIND: refuse it.
        // SAFETY: RTLD_NOLOAD only looks the library up; nothing is loaded or run.
        if let Ok(l) = unsafe { Library::open(Some(path), RTLD_NOW | RTLD_NOLOAD) } {
            let real = RealNccl::resolve(l, path.to_path_buf());
            let itself = real.get_version.is_some_and(|f| f as usize == ours);
            return Err(if itself {
                LoadError::Itself {
                    path: path.to_path_buf(),
                }
            } else {
                LoadError::Loaded {
                    path: path.to_path_buf(),
                }
            });
        }
        // SAFETY: loading a shared library runs its initialisers; NCCL's only set up its
        // own state. DEEPBIND keeps its internal calls inside it (module docs).
        let lib = unsafe { Library::open(Some(path), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND) }
            .map_err(|e| LoadError::Open {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?;
        let real = RealNccl::resolve(lib, path.to_path_buf());
        match real.get_version {
            Some(f) if f as usize == ours => Err(LoadError::Itself {
                path: path.to_path_buf(),
            }),
            Some(_) => Ok(real),
            None => Err(LoadError::Open {
                path: path.to_path_buf(),
                reason: "it exports no ncclGetVersion: not an NCCL library".into(),
            }),
        }
    }

    /// The first candidate that opens as an NCCL other than this library.
    pub fn find(
        explicit: Option<&Path>,
        candidates: &[PathBuf],
        ours: usize,
    ) -> Result<RealNccl, LoadError> {
        if let Some(p) = explicit {
            return RealNccl::open(p, ours);
        }
        let mut tried = Vec::new();
        for p in candidates {
            if !p.exists() {
                continue;
            }
            match RealNccl::open(p, ours) {
                Ok(r) => return Ok(r),
                Err(_) => tried.push(p.clone()),
            }
        }
        if tried.is_empty() {
            tried = candidates.to_vec();
        }
        Err(LoadError::NotFound { tried })
    }

    /// The real NCCL's version code.
    pub fn version(&self) -> Option<c_int> {
        let f = self.get_version?;
        let mut v = 0;
        // SAFETY: NCCL's ncclGetVersion writes one int.
        (unsafe { f(&mut v) } == 0).then_some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_follow_the_library_path_first() {
        let c = candidates(Some("/opt/a::/opt/b"));
        assert_eq!(c[0], PathBuf::from("/opt/a/libnccl.so.2"));
        assert_eq!(c[1], PathBuf::from("/opt/b/libnccl.so.2"));
        assert!(c.contains(&PathBuf::from("/usr/lib/x86_64-linux-gnu/libnccl.so.2")));
    }

    #[test]
    fn a_missing_or_foreign_library_is_an_error_naming_it() {
        let e = RealNccl::open(Path::new("/nonexistent/libnccl.so.2"), 0)
            .err()
            .map(|e| e.to_string());
        assert!(e.is_some_and(|e| e.starts_with("/nonexistent/libnccl.so.2: ")));
        let e = RealNccl::find(None, &[PathBuf::from("/nonexistent/libnccl.so.2")], 0)
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some(
                "the real NCCL was not found (tried /nonexistent/libnccl.so.2); set \
                 COLL_NCCL_REAL to its libnccl.so.2"
            )
        );
    }
}
