//! The interpreter kernel compiled through ptxas for the H200's architecture (sm_90), with no GPU:
//! only NVRTC is needed (`pip install nvidia-cuda-nvrtc-cu12` and its lib directory on
//! LD_LIBRARY_PATH is enough). Skipped, with the reason printed, where NVRTC is missing, as
//! on CI's machine. It catches what otherwise shows only on the GPU machine: a kernel that
//! does not compile, or one that needs more registers than a CTA of coll's size may have
//! (the launch fails with "too many resources requested"), or a host-kernel ABI whose sizes
//! the C compiler lays out otherwise than the header's asserts (and the Rust generated from
//! them) say.

use coll_executor::cuda::device::{
    dtype_define, entry_names, entry_names_of, kernel_resources, kernel_resources_with,
    nvrtc_present,
};
use coll_executor::cuda::{KERNEL_SOURCE, THREADS};
use coll_executor::dtype::DType;

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
            assert!(
                k.registers * THREADS <= REGISTER_FILE,
                "{arch} {}: {} registers x {THREADS} threads exceed the SM's {REGISTER_FILE}",
                k.name,
                k.registers
            );
        }
    }
}

#[test]
fn a_load_of_one_element_type_compiles_exactly_its_entries() {
    if !nvrtc_present() {
        eprintln!("skipped: NVRTC (libnvrtc.so) not found");
        return;
    }
    // What a load compiles: the type's define selects its entries and the barrier, nothing
    // of the other types (whose code would only cost NVRTC time).
    for d in DType::ALL {
        let t = std::time::Instant::now();
        let res = kernel_resources_with(KERNEL_SOURCE, "sm_90", &[dtype_define(d)])
            .expect("one type's entries compile");
        eprintln!("sm_90 {}: {:.1} s", d.name(), t.elapsed().as_secs_f64());
        let mut compiled: Vec<&str> = res.iter().map(|k| k.name.as_str()).collect();
        compiled.sort();
        let mut wanted = entry_names_of(d);
        wanted.sort();
        assert_eq!(compiled, wanted, "{}", d.name());
    }
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
