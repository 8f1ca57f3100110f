//! Routing a call: coll serves it, or the real NCCL does, and the log says so.
//!
//! A call goes to the real NCCL when its communicator is served by the real NCCL, when its
//! collective is turned off (`COLL_NCCL_DISABLE`), when coll does not reduce its element
//! type or operator (fp8, unsigned 32/64-bit, `ncclRedOpCreatePreMulSum` operators), or
//! when coll has no plan for it; each such kind and reason is logged once. The decision
//! depends only on the call's arguments, which NCCL requires to agree across ranks, so all
//! ranks of a clique decide alike.
//!
//! Invariant: a call is either deposited with its clique (and its caller returns once its
//! batch has run) or forwarded, never both and never dropped.

use crate::abi::{DataType, NcclResult, RedOp};
use crate::clique::Call;
use crate::comm::{Backend, Comm, RealComm};
use crate::error::{Error, Result};
use crate::global::Global;
use crate::settings::LogLevel;
use coll_executor::dtype::ReduceOp;
use coll_lang::builtins::CollectiveKind;
use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};
use std::sync::{Arc, LazyLock, Mutex};

/// (served by coll, collective, element type).
type CallKind = (bool, &'static str, &'static str);

/// Calls so far, by kind.
static COUNTS: LazyLock<Mutex<BTreeMap<CallKind, u64>>> = LazyLock::new(Default::default);

fn count(served: bool, s: &Spec) {
    *coll_executor::sync::lock(&COUNTS)
        .entry((served, s.kind.name(), s.dtype.name()))
        .or_default() += 1;
}

/// One line: how many calls coll served and how many it forwarded, by collective and type
/// (logged at `NCCL_DEBUG=INFO` when a communicator is destroyed).
pub fn summary() -> String {
    let counts = coll_executor::sync::lock(&COUNTS);
    let part = |served: bool| {
        let items: Vec<String> = counts
            .iter()
            .filter(|((s, _, _), _)| *s == served)
            .map(|((_, k, t), n)| format!("{k} {t} {n}"))
            .collect();
        let total: u64 = counts
            .iter()
            .filter(|((s, _, _), _)| *s == served)
            .map(|(_, n)| n)
            .sum();
        if items.is_empty() {
            "0".to_string()
        } else {
            format!("{total} ({})", items.join(", "))
        }
    };
    format!(
        "calls served by coll: {}; forwarded to the real NCCL: {}",
        part(true),
        part(false)
    )
}

/// One call as the API gave it.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    pub kind: CollectiveKind,
    pub send: u64,
    pub recv: u64,
    pub count: u64,
    pub dtype: DataType,
    pub op: RedOp,
    /// The root of broadcast and reduce; the peer of send and receive.
    pub root: u32,
    pub stream: usize,
    /// For point-to-point calls: a receive (`recv`), else a send (`send`).
    pub is_recv: bool,
}

/// Turns a real NCCL result into ours.
pub fn check_real(what: &str, r: c_int) -> Result<()> {
    match NcclResult::from_raw(r) {
        NcclResult::Success => Ok(()),
        code => Err(Error::new(
            code,
            format!("the real NCCL's {what} failed ({r})"),
        )),
    }
}

/// Whether the collective reduces (and so needs coll to know the element type).
pub fn reduces(kind: CollectiveKind) -> bool {
    matches!(
        kind,
        CollectiveKind::AllReduce | CollectiveKind::ReduceScatter | CollectiveKind::Reduce
    )
}

/// Why coll does not serve `spec` on a coll communicator, or `None` when it does: the
/// reason, and the key it is logged once under (the reason without the call's size).
fn forward_reason(
    global: &Global,
    clique: &crate::clique::Clique,
    s: &Spec,
) -> Option<(String, String)> {
    let fixed = |why: String| Some((why.clone(), why));
    if s.kind == CollectiveKind::SendRecv {
        return fixed("point-to-point calls (ncclSend/ncclRecv) are not served by coll yet".into());
    }
    if global.settings.disabled.contains(s.kind) {
        return fixed("turned off by COLL_NCCL_DISABLE".into());
    }
    if reduces(s.kind) {
        if s.dtype.dtype().is_none() {
            return fixed(format!("coll does not reduce {}", s.dtype.name()));
        }
        if let RedOp::Dynamic(_) = s.op {
            return fixed("coll does not run ncclRedOpCreatePreMulSum operators".into());
        }
    }
    clique
        .serves(s.kind, s.count, s.dtype.size() as u64)
        .err()
        .map(|e| (e.message, format!("no plan for {}", s.kind.name())))
}

/// The executor's form of a call coll serves.
fn call_of(s: &Spec) -> Call {
    let (dtype, op) = if reduces(s.kind) {
        (
            s.dtype.dtype().unwrap_or(s.dtype.bytes_alike()),
            match s.op {
                RedOp::Builtin(op) => op,
                RedOp::Dynamic(_) => ReduceOp::Sum,
            },
        )
    } else {
        (s.dtype.bytes_alike(), ReduceOp::Sum)
    };
    Call {
        kind: s.kind,
        send: s.send,
        recv: s.recv,
        count: s.count,
        dtype,
        op,
        root: s.root,
        stream: s.stream,
    }
}

/// Runs calls (one, or a group's), each on its communicator, in order.
pub fn run(global: &Global, calls: Vec<(Arc<Comm>, Spec)>) -> Result<()> {
    let mut waits = Vec::new();
    let mut outcome = Ok(());
    // The calls forwarded here go in one real group, as one thread driving several GPUs
    // must issue them.
    let mut real_group = RealGroup::default();
    for (comm, s) in &calls {
        let r = (|| -> Result<()> {
            comm.usable()?;
            match comm.backend()? {
                Backend::Real(real) => {
                    count(false, s);
                    forward(global, &mut real_group, *real, s)
                }
                Backend::Coll {
                    clique,
                    member,
                    real,
                } => match forward_reason(global, clique, s) {
                    None => {
                        count(true, s);
                        waits.push((
                            Arc::clone(comm),
                            Arc::clone(clique),
                            clique.deposit(*member, call_of(s)),
                        ));
                        Ok(())
                    }
                    Some((why, reason)) => {
                        let key = format!(
                            "forward {} {} {}: {reason}",
                            s.kind.name(),
                            s.dtype.name(),
                            s.op.name()
                        );
                        global.log.once(
                            LogLevel::Warn,
                            &key,
                            &format!(
                                "{} of {} ({}) forwarded to the real NCCL: {why}",
                                s.kind.name(),
                                s.dtype.name(),
                                s.op.name()
                            ),
                        );
                        let real = real.ok_or_else(|| {
                            Error::usage(format!(
                                "{} of {}: {why}; and no real NCCL is loaded to forward it to \
                                 (COLL_NCCL_FORWARD=0, or none was found: COLL_NCCL_REAL)",
                                s.kind.name(),
                                s.dtype.name()
                            ))
                        })?;
                        count(false, s);
                        forward(global, &mut real_group, real, s)
                    }
                },
            }
        })();
        if let Err(e) = r
            && outcome.is_ok()
        {
            outcome = Err(e);
        }
    }
    if let Err(e) = real_group.close(global)
        && outcome.is_ok()
    {
        outcome = Err(e);
    }
    for (comm, clique, seq) in waits {
        if let Err(e) = clique.wait(seq) {
            comm.set_async_error(e.clone());
            if outcome.is_ok() {
                outcome = Err(e);
            }
        }
    }
    outcome
}

fn missing(what: &str) -> Error {
    Error::usage(format!("the real NCCL does not export {what}"))
}

/// A real NCCL group, opened at the first forwarded call.
#[derive(Debug, Default)]
struct RealGroup {
    open: bool,
}

impl RealGroup {
    fn open(&mut self, lib: &crate::real::RealNccl) -> Result<()> {
        if !self.open {
            let f = lib.group_start.ok_or_else(|| missing("ncclGroupStart"))?;
            // SAFETY: no arguments.
            check_real("ncclGroupStart", unsafe { f() })?;
            self.open = true;
        }
        Ok(())
    }

    fn close(&mut self, global: &Global) -> Result<()> {
        if !std::mem::take(&mut self.open) {
            return Ok(());
        }
        let f = global
            .real()?
            .group_end
            .ok_or_else(|| missing("ncclGroupEnd"))?;
        // SAFETY: no arguments; closes the group `open` started.
        check_real("ncclGroupEnd", unsafe { f() })
    }
}

/// Calls the real NCCL's function for `s` on `real`, inside `group`.
fn forward(global: &Global, group: &mut RealGroup, real: RealComm, s: &Spec) -> Result<()> {
    let lib = global.real()?;
    group.open(lib)?;
    let (send, recv) = (s.send as *const c_void, s.recv as *mut c_void);
    let (count, dt, comm, stream) = (
        s.count as usize,
        s.dtype.raw(),
        real.0,
        s.stream as *mut c_void,
    );
    let op = match s.op {
        RedOp::Builtin(o) => builtin_raw(o),
        RedOp::Dynamic(r) => r,
    };
    let root = s.root as c_int;
    // SAFETY: each function is the real NCCL's, called with the caller's own arguments
    // (validated handles and enums; buffers and stream under the caller's NCCL contract)
    // and the real communicator made for this rank.
    let r = unsafe {
        match s.kind {
            CollectiveKind::AllReduce => lib.all_reduce.ok_or_else(|| missing("ncclAllReduce"))?(
                send, recv, count, dt, op, comm, stream,
            ),
            CollectiveKind::AllGather => lib.all_gather.ok_or_else(|| missing("ncclAllGather"))?(
                send, recv, count, dt, comm, stream,
            ),
            CollectiveKind::ReduceScatter => lib
                .reduce_scatter
                .ok_or_else(|| missing("ncclReduceScatter"))?(
                send, recv, count, dt, op, comm, stream,
            ),
            CollectiveKind::AllToAll => lib.all_to_all.ok_or_else(|| missing("ncclAlltoAll"))?(
                send, recv, count, dt, comm, stream,
            ),
            CollectiveKind::Broadcast => lib.broadcast.ok_or_else(|| missing("ncclBroadcast"))?(
                send, recv, count, dt, root, comm, stream,
            ),
            CollectiveKind::Reduce => lib.reduce.ok_or_else(|| missing("ncclReduce"))?(
                send, recv, count, dt, op, root, comm, stream,
            ),
            CollectiveKind::SendRecv if !s.is_recv => {
                lib.send.ok_or_else(|| missing("ncclSend"))?(send, count, dt, root, comm, stream)
            }
            CollectiveKind::SendRecv => {
                lib.recv.ok_or_else(|| missing("ncclRecv"))?(recv, count, dt, root, comm, stream)
            }
            CollectiveKind::Custom => {
                return Err(Error::internal("a custom collective from the API"));
            }
        }
    };
    check_real(s.kind.name(), r)
}

/// NCCL's value of a built-in operator.
pub fn builtin_raw(op: ReduceOp) -> c_int {
    match op {
        ReduceOp::Sum => 0,
        ReduceOp::Prod => 1,
        ReduceOp::Max => 2,
        ReduceOp::Min => 3,
        ReduceOp::Avg => 4,
    }
}
