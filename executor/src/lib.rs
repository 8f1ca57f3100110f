//! `coll-executor`: runs plans (CPU reference executor, GPU executors, transports) and hosts
//! the `coll` command line ([`cli`]), where compiling and running meet.

pub mod cli;
