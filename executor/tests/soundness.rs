//! Compile-fail tests of the GPU device layer's safe API: safe code cannot use a region of
//! an arena after the arena is gone, nor hand the driver a device address (copies, clears,
//! made-up spans), nor capture a graph (which replays addresses later). trybuild compiles
//! each case of `ui/` and compares the compiler's errors with the `.stderr` file beside it;
//! nothing runs, so no GPU or CUDA is needed. After a deliberate change, `TRYBUILD=overwrite`
//! rewrites the `.stderr` files (review their diff before committing it); the messages are
//! those of the toolchain CI runs, and a new rustc may reword them.
//!
//! They live in this crate rather than with the integration tests of `tests/`: trybuild
//! checks each case against every dependency of the package that runs it, and those of
//! `coll-tests` (the command line, the NCCL library, the test tools) took a minute more.

#[test]
fn device_memory_is_reached_only_through_handles() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
