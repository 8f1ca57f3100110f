//! The interpreter kernel compiled through ptxas for the H200's architecture (sm_90), with no GPU:
//! only NVRTC is needed (`pip install nvidia-cuda-nvrtc-cu12` and its lib directory on
//! LD_LIBRARY_PATH is enough). Skipped, with the reason printed, where NVRTC is missing, as
//! on CI's machine. It compiles the whole source and every unit a load compiles (one NVRTC
//! program per element type, operator and protocol, and one for the avg scaling and the
//! barrier), and catches what otherwise shows only on the GPU machine: a kernel or unit that
//! does not compile or lost an entry, or one that needs more registers than a CTA of coll's
//! size may have (the launch fails with "too many resources requested"), or a host-kernel
//! ABI whose sizes the C compiler lays out otherwise than the header's asserts (and the Rust
//! generated from them) say.

use coll_executor::cuda::device::{
    KernelResources, entry_names, kernel_resources, kernel_resources_with, nvrtc_present, units_of,
};
use coll_executor::cuda::{KERNEL_SOURCE, THREADS};
use coll_executor::dtype::DType;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Registers of one SM (every generation coll runs on).
const REGISTER_FILE: u32 = 65536;

#[test]
fn the_kernel_compiles_for_hopper_and_every_entry_fits_a_full_cta() {
    if !nvrtc_present() {
        eprintln!("skipped: NVRTC (libnvrtc.so) not found");
        return;
    }
    let archs = std::env::var("COLL_KERNEL_ARCHS").unwrap_or_else(|_| "sm_90".into());
    for arch in archs.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        let res = kernel_resources(KERNEL_SOURCE, arch).expect("the kernel compiles");
        for k in &res {
            eprintln!(
                "{arch} {}: {} registers, {} B stack, {} B spilled, {} B reloaded",
                k.name, k.registers, k.stack_bytes, k.spill_stores, k.spill_loads
            );
        }
        let mut compiled: Vec<&str> = res.iter().map(|k| k.name.as_str()).collect();
        compiled.sort();
        let mut wanted = entry_names();
        wanted.sort();
        assert_eq!(compiled, wanted, "{arch}: the entries coll loads");
        for k in &res {
            fits_a_full_cta(arch, k);
        }
    }
}

fn fits_a_full_cta(arch: &str, k: &KernelResources) {
    assert!(
        k.registers * THREADS <= REGISTER_FILE,
        "{arch} {}: {} registers x {THREADS} threads exceed the SM's {REGISTER_FILE}",
        k.name,
        k.registers
    );
}

#[test]
fn every_unit_a_load_compiles_holds_exactly_its_entries_and_fits_a_full_cta() {
    if !nvrtc_present() {
        eprintln!("skipped: NVRTC (libnvrtc.so) not found");
        return;
    }
    // What loads compile: every unit of every element type, each its own NVRTC program,
    // compiled here on every core as a load does.
    let units: Vec<_> = DType::ALL.iter().flat_map(|&d| units_of(d, true)).collect();
    let next = AtomicUsize::new(0);
    let done = Mutex::new(Vec::new());
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                while let Some(u) = units.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let t = std::time::Instant::now();
                    let res = kernel_resources_with(KERNEL_SOURCE, "sm_90", &u.defines())
                        .unwrap_or_else(|e| panic!("{}: {e}", u.name()));
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
        eprintln!("sm_90 unit {}: {took:.2} s", u.name());
        let mut compiled: Vec<&str> = res.iter().map(|k| k.name.as_str()).collect();
        compiled.sort();
        let mut wanted = u.entries();
        wanted.sort();
        assert_eq!(compiled, wanted, "{}", u.name());
        for k in res {
            fits_a_full_cta("sm_90", k);
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
    assert_eq!(union, whole);
    let distinct: usize = units.iter().map(|u| u.entries().len()).sum();
    assert_eq!(distinct, whole.len() + DType::ALL.len() - 1);
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
