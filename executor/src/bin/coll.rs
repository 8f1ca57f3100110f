//! The `coll` command. All logic lives in [`coll_executor::cli`] so tests drive it in-process.

fn main() -> std::process::ExitCode {
    coll_executor::cli::main()
}
