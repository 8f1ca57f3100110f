//! `coll-executor`: runs plans. [`cpu`] is the reference executor (threads, bounded queues,
//! real typed data); [`cuda`] runs plans on GPUs; [`harness`] runs a plan on generated data
//! and checks it against [`mod@reference`]; [`bootstrap`] finds the ranks of a multi-process
//! run and exchanges their handles, [`net`] carries messages between processes (TCP, RDMA)
//! and [`procs`] runs one process's share; [`tuning`] keeps the per-size choice of
//! algorithm; [`size`] reads sizes with K, M, G suffixes; [`cli`] is the `coll` command
//! line, where compiling and running meet.

pub mod bootstrap;
pub mod cli;
pub mod cpu;
pub mod cuda;
pub mod dtype;
pub mod error;
pub mod harness;
pub mod net;
pub mod procs;
pub mod reference;
pub mod shipped;
pub mod size;
pub mod sync;
pub mod tuning;

pub use error::ExecError;
