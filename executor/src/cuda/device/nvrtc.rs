//! NVRTC: the interpreter kernel compiled to images a GPU loads, and the disk cache of
//! those images; ptxas' resources per entry for the kernel test.
//!
//! A load compiles one element type's entries as several units, independent NVRTC programs
//! of the same source with other defines ([`UnitSource`]: one per operator and protocol, and
//! one for the avg scaling and the barrier, `kernels::KernelUnit`), compiled at once on
//! threads ([`images`]): NVRTC's wall time is then about the slowest unit's rather than the
//! sum. Each goes straight to machine code for the GPU's real architecture (a CUBIN), which
//! the driver loads as is: PTX for a virtual `compute_XX` would leave the driver to
//! JIT-compile it at every fresh module load. PTX is only the fallback for a GPU newer than
//! this NVRTC knows: then the newest architecture it supports, for the driver to JIT
//! ([`Image::describe`] says which).
//!
//! Invariants: a cached image's file name holds the source's hash, the architecture, the
//! unit's name (its element type and entries) and the image's kind, so a file is only ever
//! read for the compile that wrote it; files are written aside and renamed, so no process
//! reads half of one. Each thread compiles its own NVRTC program (NVRTC's calls are
//! thread-safe on distinct programs); the results come back in the order of the units asked
//! for.

use crate::dtype::DType;
use crate::error::ExecError;
use cudarc::nvrtc::{Ptx, result as nvrtc, sys};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Whether NVRTC can be loaded: coll compiles its kernel with it the first time on each GPU
/// architecture (cudarc panics on first use otherwise).
pub fn nvrtc_present() -> bool {
    // SAFETY: loading NVRTC runs only its library initialisers, as any program using it does.
    unsafe { sys::is_culib_present() }
}

/// Loads NVRTC for the rest of the process, with what its first compiles load and set up (it
/// opens its builtins library at the first, and its machine-code back end sets up more at
/// the first compile for a real architecture, each registering exit handlers then): whatever
/// registers exit handlers after this runs them before NVRTC's own (handlers run in reverse
/// order), which is how a thread that may still be compiling at exit is waited for before
/// NVRTC is torn down. So an empty kernel is compiled to PTX, then to machine code for each
/// of `archs` (`sm_XX`; one NVRTC cannot emit is skipped: those load PTX). `false` where NVRTC
/// is missing or cannot compile an empty kernel.
///
/// (With only the PTX compile done here, a process that exited while such a thread compiled
/// machine code died of a segmentation fault in that thread: short nccl-tests runs through
/// coll's NCCL library on a machine with an empty kernel cache. The back end's late set-up is
/// the suspected cause, bench/results/2026-11-29-h200x2-nccl-library.md.)
pub fn load_nvrtc(archs: &[String]) -> bool {
    if !nvrtc_present() {
        return false;
    }
    // SAFETY: loads NVRTC (present, just checked) into cudarc's process-wide handle, which
    // is never unloaded; only its initialisers run, as at any first compile.
    let _ = unsafe { sys::culib() };
    const EMPTY: &str = "extern \"C\" __global__ void coll_empty() {}";
    if compile(EMPTY, &[], Output::Ptx).is_err() {
        return false;
    }
    for arch in archs {
        let _ = compile(
            EMPTY,
            &[format!("--gpu-architecture={arch}")],
            Output::Cubin,
        );
    }
    true
}

/// What a load says when NVRTC is missing.
pub const NO_NVRTC: &str = "NVRTC (libnvrtc.so) not found: coll compiles its kernel with it \
    the first time on each GPU architecture; install the CUDA toolkit's NVRTC (or `pip install \
    nvidia-cuda-nvrtc-cu12`) and put its lib directory on LD_LIBRARY_PATH";

/// The options every compile of the kernel takes, before the architecture and defines.
/// Nothing that changes the generated code's speed (no `-G`, no `-lineinfo`).
const BASE_OPTIONS: [&str; 1] = ["-std=c++17"];

/// What ptxas gave one kernel entry ([`kernel_resources`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelResources {
    pub name: String,
    pub registers: u32,
    pub stack_bytes: u32,
    pub spill_stores: u32,
    pub spill_loads: u32,
}

/// The define that selects `dtype`'s entries in the kernel source (`entries.cu`).
pub fn dtype_define(dtype: DType) -> String {
    format!("-DCOLL_DTYPE_{}", dtype.name().to_ascii_uppercase())
}

/// Compiles `source` for `arch` (a real one, e.g. `sm_90`) with NVRTC through ptxas, as the
/// driver would at load, and returns each entry's resources: no GPU needed, only NVRTC.
/// A kernel whose registers times its CTA size exceed the SM's register file cannot launch.
pub fn kernel_resources(source: &str, arch: &str) -> Result<Vec<KernelResources>, ExecError> {
    kernel_resources_with(source, arch, &[])
}

/// [`kernel_resources`] with more NVRTC options, such as [`dtype_define`]'s.
pub fn kernel_resources_with(
    source: &str,
    arch: &str,
    extra: &[String],
) -> Result<Vec<KernelResources>, ExecError> {
    let mut opts = vec![
        format!("--gpu-architecture={arch}"),
        "--ptxas-options=-v".into(),
    ];
    opts.extend(extra.iter().cloned());
    let (_, log) = compile(source, &opts, Output::None)?;
    Ok(parse_ptxas_log(&log))
}

/// What [`compile`] reads back from the program.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Output {
    None,
    Ptx,
    Cubin,
}

fn fail(what: &str, e: nvrtc::NvrtcError) -> ExecError {
    ExecError::Gpu(format!("NVRTC: {what}: {e:?}"))
}

/// Compiles `source` with [`BASE_OPTIONS`] and `opts`; returns the output asked for (PTX
/// without its closing NUL) and the log.
fn compile(source: &str, opts: &[String], out: Output) -> Result<(Vec<u8>, String), ExecError> {
    if !nvrtc_present() {
        return Err(ExecError::Gpu(NO_NVRTC.into()));
    }
    let src = std::ffi::CString::new(source)
        .map_err(|_| ExecError::Gpu("the kernel source holds a NUL byte".into()))?;
    let prog = nvrtc::create_program(&src, None).map_err(|e| fail("create", e))?;
    let mut all: Vec<String> = BASE_OPTIONS.iter().map(|s| s.to_string()).collect();
    all.extend(opts.iter().cloned());
    // SAFETY: `prog` is the live program created above, destroyed once below after its
    // log and output have been read.
    let compiled = unsafe { nvrtc::compile_program(prog, &all) };
    // SAFETY: as above.
    let log = unsafe { nvrtc::get_program_log(prog) };
    let image = match (&compiled, out) {
        (Err(_), _) | (_, Output::None) => Ok(Vec::new()),
        // SAFETY: as above, and the program compiled.
        (Ok(()), Output::Ptx) => unsafe { nvrtc::get_ptx(prog) }.map(|p| {
            p.into_iter()
                .map(|c| c as u8)
                .take_while(|&c| c != 0)
                .collect()
        }),
        // SAFETY: as above, and the program compiled for a real architecture.
        (Ok(()), Output::Cubin) => unsafe { get_cubin(prog) },
    };
    // SAFETY: as above; not used after this.
    let _ = unsafe { nvrtc::destroy_program(prog) };
    let log: Vec<u8> = log
        .map_err(|e| fail("log", e))?
        .into_iter()
        .map(|c| c as u8)
        .take_while(|&c| c != 0)
        .collect();
    let log = String::from_utf8_lossy(&log).into_owned();
    compiled.map_err(|e| {
        ExecError::Gpu(format!(
            "NVRTC could not compile the kernel ({e:?}):\n{log}"
        ))
    })?;
    Ok((image.map_err(|e| fail("output", e))?, log))
}

/// The CUBIN of a compiled program.
///
/// # Safety
/// `prog` is a live program compiled for a real architecture (`sm_XX`).
unsafe fn get_cubin(prog: sys::nvrtcProgram) -> Result<Vec<u8>, nvrtc::NvrtcError> {
    let mut size: usize = 0;
    // SAFETY: a live program (this function's contract) and a valid out pointer.
    unsafe { sys::nvrtcGetCUBINSize(prog, &mut size) }.result()?;
    let mut cubin = vec![0u8; size];
    // SAFETY: `cubin` has the size NVRTC reported for this program's CUBIN.
    unsafe { sys::nvrtcGetCUBIN(prog, cubin.as_mut_ptr().cast()) }.result()?;
    Ok(cubin)
}

/// The architectures this NVRTC compiles for (e.g. 90 for `sm_90`).
fn supported_archs() -> Result<Vec<i32>, ExecError> {
    let mut n: std::ffi::c_int = 0;
    // SAFETY: a valid out pointer; NVRTC is loaded (checked by the caller).
    unsafe { sys::nvrtcGetNumSupportedArchs(&mut n) }
        .result()
        .map_err(|e| fail("supported architectures", e))?;
    let mut archs: Vec<std::ffi::c_int> = vec![0; usize::try_from(n).unwrap_or(0)];
    // SAFETY: `archs` holds as many entries as NVRTC said it would write.
    unsafe { sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) }
        .result()
        .map_err(|e| fail("supported architectures", e))?;
    Ok(archs)
}

/// A compiled kernel, as the driver loads it.
#[derive(Clone, Debug)]
pub struct Image {
    /// Machine code for `arch` itself, or PTX for the driver to JIT-compile.
    pub cubin: bool,
    /// `sm_XX` for a CUBIN, `compute_XX` for PTX.
    pub arch: String,
    /// The GPU's own architecture (`sm_XX`).
    pub gpu_arch: String,
    pub bytes: Vec<u8>,
}

impl Image {
    /// For the setup report: e.g. `cubin sm_90`, or `ptx compute_90 (driver JIT for sm_100:
    /// this NVRTC cannot emit sm_100)`.
    pub fn describe(&self) -> String {
        if self.cubin {
            format!("cubin {}", self.arch)
        } else {
            format!(
                "ptx {} (driver JIT for {}: this NVRTC cannot emit {})",
                self.arch, self.gpu_arch, self.gpu_arch
            )
        }
    }

    /// What cudarc's `load_module` takes.
    pub fn to_ptx(&self) -> Ptx {
        if self.cubin {
            Ptx::from_binary(self.bytes.clone())
        } else {
            Ptx::from_src(String::from_utf8_lossy(&self.bytes).into_owned())
        }
    }
}

fn hash(s: &str) -> u64 {
    // FNV-1a: a stable key for the cache file name.
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// One NVRTC program of a load: the kernel source compiled with `defines`, which select
/// some of its entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitSource {
    /// Names the unit in the cache and the setup report, e.g. `f32-sum-bulk`: it must tell
    /// apart every set of defines compiled from one source (the element type and the unit).
    pub name: String,
    /// NVRTC options after the architecture, e.g. `-DCOLL_DTYPE_F32 -DCOLL_OP_SUM`.
    pub defines: Vec<String>,
}

/// One unit's image, as [`images`] compiled or read it.
#[derive(Clone, Debug)]
pub struct UnitImage {
    pub image: Image,
    /// Not compiled: read from the disk cache or built into the binary.
    pub from_cache: bool,
    /// Built into the binary (`COLL_EMBED_KERNELS`), a case of `from_cache`.
    pub builtin: bool,
    /// NVRTC's time on this unit alone (zero from the cache).
    pub compile: Duration,
}

/// What [`images`] did: every unit's image, in the order asked for, and the compile.
#[derive(Clone, Debug)]
pub struct UnitImages {
    pub units: Vec<UnitImage>,
    /// Threads that compiled (0 when every unit came from the cache).
    pub threads: usize,
    /// Wall time of the compile, all threads together (zero from the cache).
    pub wall: Duration,
}

/// The cache file of unit `unit` of `source` for `arch`.
pub fn cache_path(
    dir: &Path,
    source: &str,
    arch: &str,
    unit: &str,
    cubin: bool,
) -> std::path::PathBuf {
    let ext = if cubin { "cubin" } else { "ptx" };
    dir.join(format!("kernel-{:016x}-{arch}-{unit}.{ext}", hash(source)))
}

/// The image of `unit` built into the binary for `gpu_arch`, if there is one.
fn builtin_bytes(source: &str, gpu_arch: &str, unit: &str) -> Option<&'static [u8]> {
    let path = cache_path(Path::new(""), source, gpu_arch, unit, true);
    super::builtin_image(path.file_name()?.to_str()?)
}

/// Whether every unit's image is built into the binary for `gpu_arch` ([`builtin`] would
/// give them).
pub fn builtin_present(source: &str, gpu_arch: &str, units: &[UnitSource]) -> bool {
    units
        .iter()
        .all(|u| builtin_bytes(source, gpu_arch, &u.name).is_some())
}

/// Every unit's image built into the binary for `gpu_arch` (machine code), or `None` where
/// one is not: then the load reads the cache and compiles, as without any.
pub fn builtin(source: &str, gpu_arch: &str, units: &[UnitSource]) -> Option<UnitImages> {
    let units = units
        .iter()
        .map(|u| {
            let bytes = builtin_bytes(source, gpu_arch, &u.name)?;
            Some(UnitImage {
                image: Image {
                    cubin: true,
                    arch: gpu_arch.to_string(),
                    gpu_arch: gpu_arch.to_string(),
                    bytes: bytes.to_vec(),
                },
                from_cache: true,
                builtin: true,
                compile: Duration::ZERO,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(UnitImages {
        units,
        threads: 0,
        wall: Duration::ZERO,
    })
}

fn read_cached(
    dir: Option<&Path>,
    source: &str,
    arch: &str,
    gpu_arch: &str,
    unit: &str,
    cubin: bool,
) -> Option<Image> {
    let bytes = std::fs::read(cache_path(dir?, source, arch, unit, cubin)).ok()?;
    Some(Image {
        cubin,
        arch: arch.to_string(),
        gpu_arch: gpu_arch.to_string(),
        bytes,
    })
}

/// Writes `img` of `unit` into the cache. A cache that cannot be written costs the next
/// load a compile, no more: its errors are ignored.
fn write_cached(dir: &Path, source: &str, unit: &str, img: &Image) {
    let path = cache_path(dir, source, &img.arch, unit, img.cubin);
    let _ = std::fs::create_dir_all(dir);
    // Written aside and renamed: processes of one run (and loads on threads of one process)
    // may compile the same unit at once, and none may read half a file; the aside name is
    // this write's alone.
    static WRITES: AtomicUsize = AtomicUsize::new(0);
    let n = WRITES.fetch_add(1, Ordering::Relaxed);
    let tmp = path.with_extension(format!("{}.{n}.tmp", std::process::id()));
    if std::fs::write(&tmp, &img.bytes).is_ok() {
        let _ = std::fs::rename(&tmp, &path);
    }
}

/// How long a load waits for another process compiling the same unit before compiling it
/// itself: far beyond any unit's compile, so only a stopped or hung process is passed by.
const LOCK_WAIT: Duration = Duration::from_secs(120);

/// An exclusive lock on unit `unit`'s cache entry, taken before compiling it, so that the
/// processes of a job starting at once (one per GPU, one cache) compile each unit once and
/// the others read it. The lock file stays in the cache; the system frees the lock of a
/// process that dies. `None` where no lock can be had within [`LOCK_WAIT`] or the cache
/// holds no lock file: then this process compiles on its own, as with no cache.
fn lock_unit(
    dir: &Path,
    source: &str,
    arch: &str,
    unit: &str,
    cubin: bool,
) -> Option<std::fs::File> {
    std::fs::create_dir_all(dir).ok()?;
    let path = cache_path(dir, source, arch, unit, cubin).with_extension("lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .ok()?;
    let start = Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => return Some(file),
            Err(std::fs::TryLockError::WouldBlock) if start.elapsed() < LOCK_WAIT => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(_) => return None,
        }
    }
}

/// The architecture NVRTC compiles for on a GPU of `gpu_arch` (`sm_XX`), and whether that
/// is a CUBIN (else PTX for the driver to JIT).
fn target(gpu_arch: &str) -> Result<(String, bool), ExecError> {
    let want: i32 = gpu_arch
        .trim_start_matches("sm_")
        .parse()
        .map_err(|_| ExecError::Gpu(format!("unexpected GPU architecture {gpu_arch}")))?;
    let archs = supported_archs()?;
    if archs.contains(&want) {
        return Ok((gpu_arch.to_string(), true));
    }
    // A GPU newer than this NVRTC: PTX for the newest architecture it knows below the
    // GPU's, which the driver can JIT-compile for the GPU.
    match archs.iter().copied().filter(|&a| a < want).max() {
        Some(best) => Ok((format!("compute_{best}"), false)),
        None => Err(ExecError::Gpu(format!(
            "this NVRTC compiles for none of the architectures up to {gpu_arch} \
             (it knows {archs:?})"
        ))),
    }
}

/// Runs `job(i)` for every `i < n` on up to `threads` threads (the caller's among them),
/// each taking the next index when done with one; returns the results in index order, or
/// an error if a job panicked.
fn on_threads<R: Send>(
    n: usize,
    threads: usize,
    job: impl Fn(usize) -> R + Sync,
) -> Result<Vec<R>, ExecError> {
    let next = AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= n {
                return done;
            }
            // A panic is caught here, on whichever thread ran the job, so that it is
            // reported alike from the caller's thread and the others.
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(i)));
            done.push((i, r.ok()));
        }
    };
    let mut all: Vec<(usize, Option<R>)> = std::thread::scope(|s| {
        let mut handles = Vec::new();
        for t in 1..threads.clamp(1, n.max(1)) {
            // A thread that cannot be started leaves its share to the others.
            match std::thread::Builder::new()
                .name(format!("coll-nvrtc-{t}"))
                .spawn_scoped(s, work)
            {
                Ok(h) => handles.push(h),
                Err(_) => break,
            }
        }
        let mut all = work();
        for h in handles {
            match h.join() {
                Ok(done) => all.extend(done),
                Err(_) => return Err(ExecError::Gpu("an NVRTC compile panicked".into())),
            }
        }
        Ok(all)
    })?;
    all.sort_by_key(|(i, _)| *i);
    all.into_iter()
        .map(|(_, r)| r.ok_or_else(|| ExecError::Gpu("an NVRTC compile panicked".into())))
        .collect()
}

/// Every unit of `source` for a GPU of architecture `gpu_arch` (`sm_XX`): each read from
/// `cache_dir` (`None`: no disk cache), else compiled, on up to `threads` threads at once,
/// and written there. A load whose units are all cached needs no NVRTC.
pub fn images(
    source: &str,
    gpu_arch: &str,
    units: &[UnitSource],
    cache_dir: Option<&Path>,
    threads: usize,
) -> Result<UnitImages, ExecError> {
    let mut found: Vec<Option<Image>> = units
        .iter()
        .map(|u| read_cached(cache_dir, source, gpu_arch, gpu_arch, &u.name, true))
        .collect();
    if found.iter().all(Option::is_some) {
        return Ok(UnitImages {
            units: found
                .into_iter()
                .flatten()
                .map(|image| UnitImage {
                    image,
                    from_cache: true,
                    builtin: false,
                    compile: Duration::ZERO,
                })
                .collect(),
            threads: 0,
            wall: Duration::ZERO,
        });
    }
    if !nvrtc_present() {
        return Err(ExecError::Gpu(NO_NVRTC.into()));
    }
    let (arch, cubin) = target(gpu_arch)?;
    if !cubin {
        found = units
            .iter()
            .map(|u| read_cached(cache_dir, source, &arch, gpu_arch, &u.name, false))
            .collect();
    }
    let missing: Vec<usize> = (0..units.len()).filter(|&i| found[i].is_none()).collect();
    let threads = threads.clamp(1, missing.len().max(1));
    let out = if cubin { Output::Cubin } else { Output::Ptx };
    let start = Instant::now();
    let compiled = on_threads(missing.len(), threads, |k| {
        let u = &units[missing[k]];
        // Held until this unit is in the cache: another process compiling it finishes
        // first, and then its image is read instead of compiled again.
        let lock = cache_dir.and_then(|d| lock_unit(d, source, &arch, &u.name, cubin));
        if lock.is_some()
            && let Some(img) = read_cached(cache_dir, source, &arch, gpu_arch, &u.name, cubin)
        {
            return Ok((img, None));
        }
        let t = Instant::now();
        let mut opts = vec![format!("--gpu-architecture={arch}")];
        opts.extend(u.defines.iter().cloned());
        let (bytes, _) = compile(source, &opts, out)?;
        let took = t.elapsed();
        let img = Image {
            cubin,
            arch: arch.clone(),
            gpu_arch: gpu_arch.to_string(),
            bytes,
        };
        if let Some(dir) = cache_dir {
            write_cached(dir, source, &u.name, &img);
        }
        drop(lock);
        Ok::<_, ExecError>((img, Some(took)))
    })?;
    let wall = start.elapsed();
    let mut times: Vec<Option<Duration>> = vec![None; units.len()];
    for (&i, result) in missing.iter().zip(compiled) {
        let (img, took) = result?;
        times[i] = took;
        found[i] = Some(img);
    }
    let units = found
        .into_iter()
        .zip(times)
        .map(|(img, took)| {
            let image =
                img.ok_or_else(|| ExecError::Gpu("a kernel unit was not compiled".into()))?;
            Ok(UnitImage {
                image,
                from_cache: took.is_none(),
                builtin: false,
                compile: took.unwrap_or_default(),
            })
        })
        .collect::<Result<Vec<_>, ExecError>>()?;
    Ok(UnitImages {
        units,
        threads,
        wall,
    })
}

/// Each entry's resources from ptxas' verbose log (entries in the order compiled). The stack
/// and spills are the entry's own: ptxas lists the properties of the functions an entry calls
/// (`__noinline__`) after it, and those are not the entry's; its registers count them.
pub fn parse_ptxas_log(log: &str) -> Vec<KernelResources> {
    let number_before = |line: &str, word: &str| -> u32 {
        let words: Vec<&str> = line.split([' ', ',']).filter(|w| !w.is_empty()).collect();
        words
            .windows(2)
            .find(|w| w[1] == word)
            .and_then(|w| w[0].parse().ok())
            .unwrap_or(0)
    };
    let mut out: Vec<KernelResources> = Vec::new();
    // Whether the last "Function properties for" line named the entry being read.
    let mut own = false;
    for line in log.lines() {
        if let Some(rest) = line.split("Function properties for ").nth(1) {
            own = out.last().is_some_and(|k| k.name == rest.trim());
        } else if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            own = false;
            out.push(KernelResources {
                name: rest.split('\'').next().unwrap_or("").to_string(),
                registers: 0,
                stack_bytes: 0,
                spill_stores: 0,
                spill_loads: 0,
            });
        } else if let Some(k) = out.last_mut() {
            if line.contains("bytes stack frame") && own {
                k.stack_bytes = number_before(line, "bytes");
                let after_stores = line.split("stack frame").nth(1).unwrap_or("");
                k.spill_stores = number_before(after_stores, "bytes");
                k.spill_loads = number_before(
                    after_stores.split("spill stores").nth(1).unwrap_or(""),
                    "bytes",
                );
            } else if line.contains(" registers") {
                k.registers = number_before(line, "registers");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptxas_resources_are_read_per_entry() {
        // As NVRTC 12.9's log prints them for sm_90; the last lines are of a function the
        // entry calls, whose spills are its own.
        let log = "ptxas info    : 1 bytes gmem
ptxas info    : Compiling entry function 'coll_barrier' for 'sm_90'
ptxas info    : Function properties for coll_barrier
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 14 registers, used 0 barriers
ptxas info    : Compile time = 6.058 ms
ptxas info    : Compiling entry function 'coll_u8_max' for 'sm_90'
ptxas info    : Function properties for coll_u8_max
ptxas         .     8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 128 registers, used 1 barriers, 8 bytes cumulative stack size, 148 bytes smem
ptxas info    : Compile time = 400.1 ms
ptxas info    : Function properties for _Z15run_block_multiIhLi3ELb0EEvPK6DBlock
ptxas         .     0 bytes stack frame, 16 bytes spill stores, 20 bytes spill loads
";
        let k = parse_ptxas_log(log);
        assert_eq!(
            k,
            vec![
                KernelResources {
                    name: "coll_barrier".into(),
                    registers: 14,
                    stack_bytes: 0,
                    spill_stores: 0,
                    spill_loads: 0,
                },
                KernelResources {
                    name: "coll_u8_max".into(),
                    registers: 128,
                    stack_bytes: 8,
                    spill_stores: 4,
                    spill_loads: 12,
                },
            ]
        );
    }

    fn unit(name: &str) -> UnitSource {
        UnitSource {
            name: name.into(),
            defines: vec![format!("-DUNIT_{}", name.replace('-', "_"))],
        }
    }

    #[test]
    fn cached_units_are_loaded_without_nvrtc_each_from_its_own_file() {
        let dir = std::env::temp_dir().join(format!("coll-nvrtc-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let src = "// a source\n";
        let path = cache_path(&dir, src, "sm_90", "f32-sum-bulk", true);
        assert!(path.ends_with(format!(
            "kernel-{:016x}-sm_90-f32-sum-bulk.cubin",
            hash(src)
        )));
        let units = [unit("f32-sum-bulk"), unit("f32-aux")];
        for u in &units {
            let p = cache_path(&dir, src, "sm_90", &u.name, true);
            std::fs::write(&p, format!("cubin of {}", u.name)).expect("write");
        }
        // Found whatever NVRTC this machine has: every unit is cached.
        let got = images(src, "sm_90", &units, Some(&dir), 4).expect("from cache");
        assert_eq!((got.threads, got.wall), (0, Duration::ZERO));
        let bytes: Vec<&[u8]> = got.units.iter().map(|u| u.image.bytes.as_slice()).collect();
        assert_eq!(bytes, [&b"cubin of f32-sum-bulk"[..], b"cubin of f32-aux"]);
        for u in &got.units {
            assert!(u.from_cache && u.image.cubin);
            assert_eq!(u.compile, Duration::ZERO);
            assert_eq!(u.image.describe(), "cubin sm_90");
        }
        // Another unit, type, source, architecture or kind is another file.
        for other in [
            cache_path(&dir, src, "sm_90", "f32-sum-ll", true),
            cache_path(&dir, src, "sm_90", "f64-sum-bulk", true),
            cache_path(&dir, "// other\n", "sm_90", "f32-sum-bulk", true),
            cache_path(&dir, src, "sm_100", "f32-sum-bulk", true),
            cache_path(&dir, src, "sm_90", "f32-sum-bulk", false),
        ] {
            assert_ne!(path, other);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn work_on_threads_comes_back_in_order_with_every_item_once() {
        for threads in [0, 1, 3, 64] {
            let got = on_threads(10, threads, |i| {
                // Uneven work, so threads finish out of order.
                std::thread::sleep(Duration::from_millis(((i * 7) % 5) as u64));
                i * i
            })
            .expect("no panic");
            assert_eq!(got, (0..10).map(|i| i * i).collect::<Vec<_>>(), "{threads}");
        }
        assert!(on_threads(0, 4, |i| i).expect("nothing to do").is_empty());
        for threads in [1, 2] {
            let e = on_threads(4, threads, |i| if i == 3 { panic!("boom") } else { i })
                .expect_err("a job panicked");
            assert!(e.to_string().contains("NVRTC compile panicked"), "{e}");
        }
    }

    #[test]
    fn the_dtype_defines_are_those_the_source_tests() {
        let source = include_str!("../kernel/entries.cu");
        for d in DType::ALL {
            let def = dtype_define(d);
            let name = def.trim_start_matches("-D");
            assert!(source.contains(&format!("defined({name})")), "{name}");
        }
        assert_eq!(dtype_define(DType::Bf16), "-DCOLL_DTYPE_BF16");
    }
}
