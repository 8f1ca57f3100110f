//! The `coll` command. Its logic is the `coll_cli` library, so tests drive it in-process;
//! this binary only reads the process's arguments and environment.

use std::process::ExitCode;

fn main() -> ExitCode {
    // NCCL picks NVLink multicast (NVLS) on NVSwitch machines; coll is measured against
    // NCCL with it off (2 × H200 on an NVSwitch, bench/README.md), for both alike. Set once
    // here, before any thread exists, it holds for every NCCL this process loads (`coll bench
    // --vs-nccl`) and every process it starts (`coll run --procs`); an explicit setting is
    // kept.
    if std::env::var_os(coll_cli::bench::nccl::NVLS_VAR).is_none() {
        // SAFETY: the first statement of `main`: no other thread exists yet that could read
        // or write the environment at the same time.
        unsafe { std::env::set_var(coll_cli::bench::nccl::NVLS_VAR, "0") };
    }
    let env: coll_cli::Env = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    coll_cli::main(std::env::args_os(), &env)
}
