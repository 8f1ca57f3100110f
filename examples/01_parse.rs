//! Parse and type-check a `.coll` file, print its header summary and its canonical layout.
//!
//! `cargo run --example parse -- algorithms/allreduce_ring.coll`

use std::process::ExitCode;

fn main() -> ExitCode {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "algorithms/allreduce_ring.coll".to_string());
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("cannot read {path}: {e}");
            return ExitCode::FAILURE;
        }
    };
    match coll_lang::load_bytes(&path, bytes) {
        Ok(module) => {
            let s = &module.summary;
            println!(
                "{path}: {} `{}`, {}",
                s.kind.name(),
                s.name,
                if s.inplace {
                    "in-place"
                } else {
                    "out-of-place"
                }
            );
            print!(
                "{}",
                coll_lang::fmt::format(module.file.text(), &module.program)
            );
            ExitCode::SUCCESS
        }
        Err(diags) => {
            eprint!("{}", diags.render());
            ExitCode::FAILURE
        }
    }
}
