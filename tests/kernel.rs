//! The interpreter kernel compiled through ptxas for the H200's architecture (sm_90), with no GPU:
//! only NVRTC is needed (`pip install nvidia-cuda-nvrtc-cu12` and its lib directory on
//! LD_LIBRARY_PATH is enough). Skipped, with the reason printed, where NVRTC is missing, as
//! on CI's machine. It compiles every unit a load compiles (one NVRTC program per element
//! type, operator and protocol, and one for the avg scaling and the barrier), and catches
//! what otherwise shows only on the GPU machine: a unit that does not compile or lost an
//! entry, or one that needs more registers than a CTA of coll's size may have (the launch
//! fails with "too many resources requested"), or a host-kernel ABI whose sizes the C
//! compiler lays out otherwise than the header's asserts (and the Rust generated from them)
//! say.

use coll_executor::cuda::device::{
    KernelResources, UnitSource, cache_path, entry_names, images, kernel_resources,
    kernel_resources_with, nvrtc_present, units_of,
};
use coll_executor::cuda::{KERNEL_SOURCE, THREADS};
use coll_executor::dtype::DType;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Registers of one SM (every generation coll runs on).
const REGISTER_FILE: u32 = 65536;

fn fits_a_full_cta(arch: &str, k: &KernelResources) {
    assert!(
        k.registers * THREADS <= REGISTER_FILE,
        "{arch} {}: {} registers x {THREADS} threads exceed the SM's {REGISTER_FILE}",
        k.name,
        k.registers
    );
}

/// Every unit a load compiles, for the H200's architecture (and each one more that
/// `COLL_KERNEL_ARCHS`, e.g. `sm_90,sm_80`, names): each compiles, holds exactly its entries,
/// fits a full CTA, and together they hold every entry of the source. The whole source is
/// never compiled as one program (no load does that; it took 93 s of CI's two cores).
#[test]
fn every_unit_a_load_compiles_holds_exactly_its_entries_and_fits_a_full_cta() {
    if !nvrtc_present() {
        eprintln!("skipped: NVRTC (libnvrtc.so) not found");
        return;
    }
    let archs = std::env::var("COLL_KERNEL_ARCHS").unwrap_or_else(|_| "sm_90".into());
    for arch in archs.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        every_unit_for(arch);
    }
}

fn every_unit_for(arch: &str) {
    // What loads compile: every unit of every element type, each its own NVRTC program,
    // compiled here on every core as a load does.
    let units: Vec<_> = DType::ALL
        .iter()
        .flat_map(|&d| units_of(d, true, true))
        .collect();
    let next = AtomicUsize::new(0);
    let done = Mutex::new(Vec::new());
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                while let Some(u) = units.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let t = std::time::Instant::now();
                    let res = kernel_resources_with(KERNEL_SOURCE, arch, &u.defines())
                        .unwrap_or_else(|e| panic!("{arch} {}: {e}", u.name()));
                    let took = t.elapsed().as_secs_f64();
                    done.lock()
                        .expect("no test thread panicked")
                        .push((*u, res, took));
                }
            });
        }
    });
    let done = done.into_inner().expect("no test thread panicked");
    assert_eq!(done.len(), units.len());
    let mut union: Vec<String> = Vec::new();
    for (u, res, took) in &done {
        eprintln!("{arch} unit {}: {took:.2} s", u.name());
        for k in res {
            eprintln!(
                "{arch} {}: {} registers, {} B stack, {} B spilled, {} B reloaded",
                k.name, k.registers, k.stack_bytes, k.spill_stores, k.spill_loads
            );
        }
        let mut compiled: Vec<&str> = res.iter().map(|k| k.name.as_str()).collect();
        compiled.sort();
        let mut wanted = u.entries();
        wanted.sort();
        assert_eq!(compiled, wanted, "{arch} {}", u.name());
        for k in res {
            fits_a_full_cta(arch, k);
        }
        union.extend(compiled.iter().map(|n| n.to_string()));
    }
    // The units together hold every entry of the whole source, none twice (the barrier is
    // in every type's units, as each load needs it).
    union.sort();
    let barriers = union.iter().filter(|n| *n == "coll_barrier").count();
    assert_eq!(barriers, DType::ALL.len());
    union.dedup();
    let mut whole = entry_names();
    whole.sort();
    assert_eq!(union, whole, "{arch}");
    let distinct: usize = units.iter().map(|u| u.entries().len()).sum();
    assert_eq!(distinct, whole.len() + DType::ALL.len() - 1);
}

#[test]
fn a_cold_load_compiles_its_units_on_threads_and_a_warm_one_reads_them() {
    if !nvrtc_present() {
        eprintln!("skipped: NVRTC (libnvrtc.so) not found");
        return;
    }
    let dir = std::env::temp_dir().join(format!("coll-kernel-units-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // Two small units of a type that never reduces (sum's LL interpreter, the aux unit).
    let units: Vec<UnitSource> = units_of(DType::I32, false, false)
        .iter()
        .filter(|u| !u.name().ends_with("-bulk") && !u.name().ends_with("-ll128"))
        .map(|u| u.source())
        .collect();
    let names: Vec<&str> = units.iter().map(|u| u.name.as_str()).collect();
    assert_eq!(names, ["i32-sum-ll", "i32-aux"]);
    let cold = images(KERNEL_SOURCE, "sm_90", &units, Some(&dir), 2).expect("compiles");
    assert_eq!(cold.threads, 2);
    assert!(cold.wall > std::time::Duration::ZERO);
    for (u, got) in units.iter().zip(&cold.units) {
        assert!(!got.from_cache && got.image.cubin, "{}", u.name);
        assert!(got.compile > std::time::Duration::ZERO && got.compile <= cold.wall);
        // A CUBIN is an ELF file, written to the unit's own cache file.
        assert_eq!(&got.image.bytes[..4], b"\x7fELF", "{}", u.name);
        let file = cache_path(&dir, KERNEL_SOURCE, "sm_90", &u.name, true);
        assert_eq!(std::fs::read(&file).expect("cached"), got.image.bytes);
    }
    let warm = images(KERNEL_SOURCE, "sm_90", &units, Some(&dir), 2).expect("cached");
    assert_eq!(warm.threads, 0);
    for (c, w) in cold.units.iter().zip(&warm.units) {
        assert!(w.from_cache);
        assert_eq!(c.image.bytes, w.image.bytes);
    }
    // Only what is missing is compiled again, on as many threads as there are such units.
    let aux = cache_path(&dir, KERNEL_SOURCE, "sm_90", "i32-aux", true);
    std::fs::remove_file(&aux).expect("remove");
    let part = images(KERNEL_SOURCE, "sm_90", &units, Some(&dir), 2).expect("compiles");
    assert_eq!(part.threads, 1);
    assert!(part.units[0].from_cache && !part.units[1].from_cache);
    assert!(aux.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Loads that start together on one cache (the processes of a job, one per GPU; here two
/// threads, whose lock files are opened apart just as two processes' are) compile each unit
/// once: whichever locks a unit first compiles it, the other waits and reads it.
#[test]
fn loads_starting_together_compile_each_unit_once() {
    if !nvrtc_present() {
        eprintln!("skipped: NVRTC (libnvrtc.so) not found");
        return;
    }
    let dir = std::env::temp_dir().join(format!("coll-kernel-lock-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let units: Vec<UnitSource> = units_of(DType::I64, false, false)
        .iter()
        .filter(|u| !u.name().ends_with("-bulk"))
        .map(|u| u.source())
        .collect();
    let both: Vec<_> = std::thread::scope(|s| {
        let loads: Vec<_> = (0..2)
            .map(|_| s.spawn(|| images(KERNEL_SOURCE, "sm_90", &units, Some(&dir), 1)))
            .collect();
        loads
            .into_iter()
            .map(|h| h.join().expect("no panic").expect("compiles"))
            .collect()
    });
    for (i, u) in units.iter().enumerate() {
        let compiled = both.iter().filter(|l| !l.units[i].from_cache).count();
        assert_eq!(compiled, 1, "{} compiled by {compiled} loads", u.name);
        assert_eq!(both[0].units[i].image.bytes, both[1].units[i].image.bytes);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `coll kernels` fills a cache ahead of time with no GPU: every unit of the types asked
/// for, for the architecture asked for, which a load then reads instead of compiling; a
/// second run finds them all there.
#[test]
fn coll_kernels_fills_the_cache_a_load_reads() {
    if !nvrtc_present() {
        eprintln!("skipped: NVRTC (libnvrtc.so) not found");
        return;
    }
    let dir = std::env::temp_dir().join(format!("coll-kernels-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.to_str().expect("utf-8 path");
    let argv = [
        "coll",
        "kernels",
        "--arch",
        "sm_90",
        "--dtype",
        "u8",
        "--cache-dir",
        d,
    ];
    let (code, out, err) = coll_cli::run_captured(argv);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("sm_90: 21 units of u8 (cubin sm_90): 21 compiled on ")
            && out.contains(", 0 already there, in "),
        "{out}"
    );
    let units: Vec<UnitSource> = units_of(DType::U8, true, true)
        .iter()
        .map(|u| u.source())
        .collect();
    let load = images(KERNEL_SOURCE, "sm_90", &units, Some(&dir), 1).expect("cached");
    assert_eq!(load.threads, 0, "a load compiled nothing");
    assert!(load.units.iter().all(|u| u.from_cache));
    let (code, out, err) = coll_cli::run_captured(argv);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(": 0 compiled on 0 threads, 21 already there"),
        "{out}"
    );
    // An architecture NVRTC cannot name is an error that says so.
    let (code, _, err) =
        coll_cli::run_captured(["coll", "kernels", "--arch", "hopper", "--cache-dir", d]);
    assert_eq!(code, 1);
    assert!(
        err.contains("error: hopper: ") && err.contains("unexpected GPU architecture"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_abi_headers_size_asserts_are_checked_by_nvrtc() {
    if !nvrtc_present() {
        eprintln!("skipped: NVRTC (libnvrtc.so) not found");
        return;
    }
    // The ABI header alone, as the kernel source starts with it.
    let abi = KERNEL_SOURCE
        .split("#line 1 \"common.cuh\"")
        .next()
        .expect("the source starts with abi.h");
    assert!(abi.contains("static_assert(sizeof(DOp) == 48, \"DOp\");"));
    assert_eq!(
        kernel_resources(abi, "sm_90").expect("abi.h compiles"),
        vec![]
    );
    // A size the compiler disagrees with fails the compile, naming the header and struct.
    let wrong = abi.replace("sizeof(DOp) == 48", "sizeof(DOp) == 40");
    let e = kernel_resources(&wrong, "sm_90")
        .expect_err("a wrong size assert fails")
        .to_string();
    assert!(e.contains("abi.h") && e.contains("DOp"), "{e}");
}
