//! coll behind NCCL's C API: a shared library with NCCL's soname (`libnccl.so.2`) that
//! PyTorch, nccl-tests and any other NCCL program load in NCCL's place (`LD_PRELOAD`, or
//! first on the library path) to run their collectives on coll's plans.
//!
//! Layers, from C inwards:
//! - [`entry`]: the exported functions, each checking its pointers and handles and turning
//!   errors into `ncclResult_t` (nothing panics across the boundary);
//! - [`global`]: the settings ([`settings`], from NCCL-style environment variables: the only
//!   place that reads the environment), the log ([`log`]), the real NCCL ([`real`]);
//! - [`group`] and [`init`]: NCCL's group semantics, communicators completed at a group's
//!   end ([`comm`]: handles; [`id`]: what the unique id carries);
//! - [`route`]: each call served by coll or forwarded to the real NCCL, logged once per kind
//!   and reason; [`clique`]: a process's ranks of one communicator, whose calls run as one
//!   executor call; [`select`]: the plan per collective and size; [`p2p`]: the plan of a
//!   group's point-to-point calls; [`split`]: `ncclCommSplit` ([`exchange`]: across
//!   processes); [`cache`]: the bounded cache of a clique's executors.
//! - [`abi`]: the C types and their layout.
//!
//! What is served: communicators whose ranks all live in one process (`ncclCommInitAll`,
//! or `ncclCommInitRank[Config]` for every rank inside one group, as nccl-tests `-g` does)
//! and communicators spread over processes that each own a contiguous, equal block of ranks
//! on one GPU (torchrun, mpirun; [`bootstrap`]), for allreduce, allgather, reducescatter,
//! alltoall, broadcast and reduce in the element types and operators coll reduces;
//! `ncclSend`/`ncclRecv` where every rank knows the group's whole set of transfers ([`p2p`]);
//! communicators split from one coll serves, in one process or spread over several
//! ([`split`], [`exchange`]), whose children coll places. Other point-to-point patterns,
//! other placements and `ncclRedOpCreatePreMulSum` operators go to the real NCCL.
//!
//! GPU memory stays bounded: each communicator keeps at most `COLL_NCCL_MAX_EXECUTORS`
//! loaded plans ([`settings`], [`clique`]).

pub mod abi;
pub mod bootstrap;
pub mod cache;
pub mod clique;
pub mod comm;
pub mod entry;
pub mod error;
pub mod exchange;
pub mod global;
pub mod group;
pub mod id;
pub mod init;
pub mod log;
pub mod p2p;
pub mod prebuild;
pub mod real;
pub mod rounds;
pub mod route;
pub mod select;
pub mod settings;
pub mod split;
