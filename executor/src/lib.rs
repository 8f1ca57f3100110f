//! `coll-executor`: runs plans. [`cpu`] is the reference executor (threads, bounded queues,
//! real typed data); [`cuda`] runs plans on GPUs; [`harness`] runs a plan on generated data
//! and checks it against [`mod@reference`]; [`bootstrap`] finds the ranks of a multi-process
//! run and exchanges their handles, and [`net`] carries messages between processes (TCP,
//! RDMA); [`tuning`] keeps the per-size choice of algorithm; [`size`] reads sizes with K, M,
//! G suffixes. The `coll` command line that drives all of this is the `coll-cli` crate.

pub mod api;
pub mod bootstrap;
pub mod cpu;
pub mod cuda;
pub mod dtype;
pub mod error;
pub mod harness;
pub mod net;
pub mod reference;
pub mod shipped;
pub mod size;
pub mod sync;
pub mod tuning;

pub use error::{AbortCause, ExecError};
