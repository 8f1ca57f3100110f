//! Proves the two algorithms `src/main.rs` runs, for every rank count it may ask for, before
//! the package compiles: a mistake in either `.coll` file fails `cargo build` at its line.

fn main() {
    coll_compiler::embed::Programs::new()
        .program("../../algorithms/allreduce_ring.coll")
        .ranks([2, 4, 8])
        .topology("nvswitch:{n}")
        // The default rank counts (2, 4, 8) on the default topology (nvswitch:{n}).
        .program("../../algorithms/allgather_ring.coll")
        .emit();
}
