//! Kernels compiled ahead of a first call: when a communicator served by coll completes, the
//! kernel's units of the element types `COLL_NCCL_PREBUILD` names (f32 and bf16 unless set)
//! are compiled for its devices' architectures into the kernel cache on a background thread,
//! so that the first call of one of them, which comes after whatever the application does
//! between init and its first collective, finds them there instead of compiling (about a
//! second on a fresh machine). A first call that comes sooner waits only for the units still
//! compiling (the cache's per-unit locks), never compiles one twice. Where the cache holds
//! every such unit already (every process after a machine's first), or the binary carries
//! them built in (`COLL_EMBED_KERNELS`), init only looks at names; otherwise it loads NVRTC first (tens of milliseconds, once per process), and
//! a process that exits during the compile waits for the element type in progress.
//!
//! Invariant: each architecture is prepared at most once per process, on a thread of its
//! own that touches no CUDA context (NVRTC and the cache only), so it cannot disturb the
//! application's streams or a graph capture; its failures are logged, never returned. The
//! process does not exit under it: an exit handler stops it after the element type it is
//! compiling (a unit is never left half written: the cache writes aside and renames) and
//! waits for that, as NVRTC's library would otherwise be torn down under a compile.

use crate::global::Global;
use crate::settings::LogLevel;
use coll_executor::cuda::KERNEL_SOURCE;
use coll_executor::cuda::device::{arch_of, load_nvrtc, prebuild, prebuilt};
use std::collections::BTreeSet;
use std::sync::{Arc, Condvar, Mutex, Once};
use std::time::{Duration, Instant};

/// Architectures this process has started preparing.
static STARTED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// The background threads still compiling, and whether the process is exiting.
struct Running {
    active: usize,
    stop: bool,
}

static RUNNING: Mutex<Running> = Mutex::new(Running {
    active: 0,
    stop: false,
});
static FINISHED: Condvar = Condvar::new();
static AT_EXIT: Once = Once::new();

/// How long an exiting process waits for a background compile to reach the end of its
/// element type: one type's units, with room for a loaded machine.
const EXIT_WAIT: Duration = Duration::from_secs(30);

/// Registered with `atexit`: stops the background compiles after their current element
/// type and waits for them, before the libraries they use are torn down.
extern "C" fn stop_and_wait() {
    let mut r = coll_executor::sync::lock(&RUNNING);
    r.stop = true;
    let start = Instant::now();
    while r.active > 0 {
        let left = EXIT_WAIT.saturating_sub(start.elapsed());
        if left.is_zero() {
            return;
        }
        r = match FINISHED.wait_timeout(r, left) {
            Ok((g, _)) => g,
            Err(poisoned) => poisoned.into_inner().0,
        };
    }
}

/// Compiles `dtypes` for `arch` one element type at a time, until the process exits.
fn compile_ahead(
    arch: &str,
    dtypes: &[coll_executor::dtype::DType],
    dir: &std::path::Path,
    threads: usize,
) -> String {
    let start = Instant::now();
    let names = dtypes
        .iter()
        .map(|d| d.name())
        .collect::<Vec<_>>()
        .join(",");
    let (mut units, mut compiled) = (0, 0);
    for &d in dtypes {
        if coll_executor::sync::lock(&RUNNING).stop {
            return format!("kernels for {arch} ({names}): stopped at exit");
        }
        match prebuild(KERNEL_SOURCE, arch, &[d], dir, threads) {
            Ok((u, images)) => {
                units += u.len();
                compiled += images.units.iter().filter(|u| !u.from_cache).count();
            }
            Err(e) => return format!("kernels for {arch} ({names}) not compiled ahead: {e}"),
        }
    }
    format!(
        "kernels for {arch} ({names}) ready in the cache ahead of first calls: {units} units, \
         {compiled} compiled, in {:.2} s",
        start.elapsed().as_secs_f64()
    )
}

/// Starts preparing the kernels for the architectures of `devices` not prepared yet, where
/// the settings name element types and a kernel cache.
pub fn start(global: &Global, devices: &[i32]) {
    let settings = &global.settings;
    let (Some(dir), false) = (settings.gpu.cache_dir.clone(), settings.prebuild.is_empty()) else {
        return;
    };
    let mut arches = BTreeSet::new();
    for &d in devices {
        match usize::try_from(d)
            .map_err(|_| format!("device {d}"))
            .and_then(|o| arch_of(o).map_err(|e| e.to_string()))
        {
            Ok(a) => {
                arches.insert(a);
            }
            Err(e) => global.log.once(
                LogLevel::Info,
                "prebuild arch",
                &format!("no kernels compiled ahead: {e}"),
            ),
        }
    }
    let new: Vec<String> = {
        let mut started = coll_executor::sync::lock(&STARTED);
        arches
            .into_iter()
            .filter(|a| started.insert(a.clone()))
            .collect()
    };
    // Where the cache holds them all (every process after a machine's first) or they are
    // built in, nothing to do.
    let new: Vec<String> = new
        .into_iter()
        .filter(|a| !prebuilt(KERNEL_SOURCE, a, &settings.prebuild, &dir))
        .collect();
    if new.is_empty() {
        return;
    }
    // Loaded for good, its machine-code back end for these architectures set up, before the
    // exit handler below is registered (see `stop_and_wait`).
    if !load_nvrtc(&new) {
        global.log.once(
            LogLevel::Info,
            "prebuild nvrtc",
            "no kernels compiled ahead: NVRTC (libnvrtc.so) not found",
        );
        return;
    }
    // Half the cores: the application is starting up beside it.
    let threads = std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1));
    for arch in new {
        let dtypes = settings.prebuild.clone();
        let dir = dir.clone();
        let log = Arc::clone(&global.log);
        AT_EXIT.call_once(|| {
            // Exit handlers run in the reverse order of their registration, libraries'
            // destructors among them: NVRTC was loaded for good above, so this handler runs,
            // and waits, before NVRTC's are.
            // SAFETY: registers a function of no arguments that only locks and waits on this
            // module's statics, as `atexit` requires.
            unsafe { libc::atexit(stop_and_wait) };
        });
        coll_executor::sync::lock(&RUNNING).active += 1;
        let spawned = std::thread::Builder::new()
            .name("coll-prebuild".into())
            .spawn(move || {
                let line = compile_ahead(&arch, &dtypes, &dir, threads);
                log.line(LogLevel::Info, &line);
                coll_executor::sync::lock(&RUNNING).active -= 1;
                FINISHED.notify_all();
            });
        if let Err(e) = spawned {
            coll_executor::sync::lock(&RUNNING).active -= 1;
            global.log.line(
                LogLevel::Info,
                &format!("no kernels compiled ahead: no thread: {e}"),
            );
        }
    }
}
