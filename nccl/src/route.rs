//! Routing a call: coll serves it, or the real NCCL does, and the log says so.
//!
//! A call goes to the real NCCL when its communicator is served by the real NCCL, when its
//! collective is turned off (`COLL_NCCL_DISABLE`), when coll does not reduce its element
//! type or operator (fp8, unsigned 32/64-bit, `ncclRedOpCreatePreMulSum` operators), or
//! when coll has no plan for it; each such kind and reason is logged once. The decision
//! depends only on the call's arguments, which NCCL requires to agree across ranks, so all
//! ranks of a clique decide alike. The first forwarded call of a communicator whose real
//! one waits for it ([`crate::comm::RealBeside`]) makes the real ones of all its members
//! first, outside any real group already holding calls and never inside a CUDA-graph
//! capture.
//!
//! Point-to-point calls are decided per clique over all of its members' calls of the group
//! ([`crate::p2p::decide`], whose docs say when ranks in two processes decide alike) and
//! deposited as one part per member.
//!
//! Invariant: a call is either deposited with its clique (and its caller returns once its
//! batch has run) or forwarded, never both and never dropped.

use crate::abi::{DataType, NcclResult, RedOp};
use crate::clique::{Call, Clique, CurrentContext, capturing};
use crate::comm::{Backend, Comm, RealBeside, RealComm};
use crate::error::{Error, Result};
use crate::global::Global;
use crate::p2p;
use crate::settings::LogLevel;
use coll_executor::dtype::ReduceOp;
use coll_lang::builtins::CollectiveKind;
use cudarc::driver::{result, sys};
use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};
use std::sync::{Arc, LazyLock, Mutex};

/// (served by coll, collective (`send` or `recv` for point-to-point calls), element type).
type CallKind = (bool, &'static str, &'static str);

/// Calls so far, by kind.
static COUNTS: LazyLock<Mutex<BTreeMap<CallKind, u64>>> = LazyLock::new(Default::default);

fn count(served: bool, s: &Spec) {
    let name = match s.kind {
        CollectiveKind::SendRecv if s.is_recv => "recv",
        CollectiveKind::SendRecv => "send",
        k => k.name(),
    };
    *coll_executor::sync::lock(&COUNTS)
        .entry((served, name, s.dtype.name()))
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
        p2p: None,
    }
}

/// A batch deposited with a clique, waited for once everything is enqueued: (its
/// communicator, clique, batch, and a stream to join after the batch's stream, as
/// (after, batch's stream), for a rank's calls on two streams).
type Wait = (Arc<Comm>, Arc<Clique>, u64, Option<(usize, usize)>);

/// Runs calls (one, or a group's), each on its communicator, in order; the point-to-point
/// calls after the collectives, per communicator as one part ([`crate::p2p`]).
pub fn run(global: &Global, calls: Vec<(Arc<Comm>, Spec)>) -> Result<()> {
    let mut waits: Vec<Wait> = Vec::new();
    let mut outcome = Ok(());
    let mut keep = |r: Result<()>| {
        if let Err(e) = r
            && outcome.is_ok()
        {
            outcome = Err(e);
        }
    };
    // The calls forwarded here go in one real group, as one thread driving several GPUs
    // must issue them.
    let mut real_group = RealGroup::default();
    let (p2p, collectives): (Vec<_>, Vec<_>) = calls
        .into_iter()
        .partition(|(_, s)| s.kind == CollectiveKind::SendRecv);
    for (comm, s) in &collectives {
        keep(run_one(global, &mut real_group, &mut waits, comm, s));
    }
    for r in run_p2p(global, &mut real_group, &mut waits, p2p) {
        keep(r);
    }
    keep(real_group.close(global));
    for (comm, clique, seq, then_join) in waits {
        if let Err(e) = clique.wait(seq) {
            comm.set_async_error(e.clone());
            keep(Err(e));
        } else if let Some((other, main)) = then_join {
            // SAFETY: both are the rank's callers' live streams (the NCCL contract of its
            // send and receive).
            keep(unsafe { join_on(&comm, main, other) });
        }
    }
    outcome
}

/// Deposits or forwards one collective call.
fn run_one(
    global: &Global,
    real_group: &mut RealGroup,
    waits: &mut Vec<Wait>,
    comm: &Arc<Comm>,
    s: &Spec,
) -> Result<()> {
    comm.usable()?;
    match comm.backend()? {
        Backend::Real(real) => {
            count(false, s);
            forward(global, real_group, *real, s)
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
                    None,
                ));
                Ok(())
            }
            Some((why, reason)) => {
                forward_logged(global, real_group, (real, *member), s, &why, &reason)
            }
        },
    }
}

/// Forwards `s`, which coll does not serve for `why`, logging it once per kind and
/// `reason`, to member `member`'s real communicator in `beside` (its clique's), made now
/// if it waited for the first forwarded call; an error when no real NCCL is beside coll.
fn forward_logged(
    global: &Global,
    real_group: &mut RealGroup,
    (beside, member): (&RealBeside, usize),
    s: &Spec,
    why: &str,
    reason: &str,
) -> Result<()> {
    let key = format!(
        "forward {} {} {}: {reason}",
        s.kind.name(),
        s.dtype.name(),
        s.op.name()
    );
    let what = match s.kind {
        CollectiveKind::SendRecv => format!(
            "{} of {}",
            if s.is_recv { "recv" } else { "send" },
            s.dtype.name()
        ),
        // Only these combine: the operator other calls carry means nothing to them.
        CollectiveKind::AllReduce | CollectiveKind::ReduceScatter | CollectiveKind::Reduce => {
            format!("{} of {} ({})", s.kind.name(), s.dtype.name(), s.op.name())
        }
        _ => format!("{} of {}", s.kind.name(), s.dtype.name()),
    };
    global.log.once(
        LogLevel::Warn,
        &key,
        &format!("{what} forwarded to the real NCCL: {why}"),
    );
    if beside.pending() {
        // A communicator cannot be made inside a CUDA-graph capture, nor in a real group that
        // holds calls already: the group's calls so far are launched first.
        // SAFETY: the caller's stream, live under NCCL's contract.
        if unsafe { capturing(s.stream as sys::CUstream) }? {
            return Err(Error::usage(format!(
                "{what}: {why}; the real NCCL's communicator beside coll's, made at the first \
                 call forwarded to it, cannot be made inside a CUDA-graph capture: make the \
                 first such call outside one, or set COLL_NCCL_REAL_INIT=eager"
            )));
        }
        real_group.close(global)?;
    }
    let real = beside
        .get_or_make(member, |later| crate::init::make_later(global, later))
        .map_err(|e| {
            Error::usage(format!(
                "{what}: {why}; and the real NCCL's communicator beside coll's could not be \
                 made: {}",
                e.message
            ))
        })?
        .ok_or_else(|| {
            Error::usage(format!(
                "{what}: {why}; and no real NCCL is loaded to forward it to \
                 (COLL_NCCL_FORWARD=0, or none was found: COLL_NCCL_REAL)"
            ))
        })?;
    count(false, s);
    forward(global, real_group, real, s)
}

/// One communicator's point-to-point calls of a group.
struct P2pCalls {
    comm: Arc<Comm>,
    specs: Vec<Spec>,
}

/// Serves or forwards a group's point-to-point calls, decided per clique over all of its
/// members' calls ([`p2p::decide`]); one result per communicator.
fn run_p2p(
    global: &Global,
    real_group: &mut RealGroup,
    waits: &mut Vec<Wait>,
    calls: Vec<(Arc<Comm>, Spec)>,
) -> Vec<Result<()>> {
    let mut by_comm: Vec<P2pCalls> = Vec::new();
    for (comm, s) in calls {
        match by_comm.iter_mut().find(|c| Arc::ptr_eq(&c.comm, &comm)) {
            Some(c) => c.specs.push(s),
            None => by_comm.push(P2pCalls {
                comm,
                specs: vec![s],
            }),
        }
    }
    let mut results = Vec::new();
    // Per clique: its members' calls; communicators served by the real NCCL go at once.
    let mut cliques: Vec<(Arc<Clique>, Vec<&P2pCalls>)> = Vec::new();
    for c in &by_comm {
        let r = (|| -> Result<Option<Arc<Clique>>> {
            c.comm.usable()?;
            match c.comm.backend()? {
                Backend::Real(real) => {
                    for s in &c.specs {
                        count(false, s);
                        forward(global, real_group, *real, s)?;
                    }
                    Ok(None)
                }
                Backend::Coll { clique, .. } => Ok(Some(Arc::clone(clique))),
            }
        })();
        match r {
            Ok(Some(clique)) => match cliques.iter_mut().find(|(q, _)| Arc::ptr_eq(q, &clique)) {
                Some((_, members)) => members.push(c),
                None => cliques.push((clique, vec![c])),
            },
            Ok(None) => results.push(Ok(())),
            Err(e) => results.push(Err(e)),
        }
    }
    for (clique, members) in cliques {
        let spread = clique.spread();
        let mut rest: Vec<P2pCalls> = Vec::new();
        for m in members {
            match split_self(m, spread) {
                Ok(r) => rest.push(r),
                Err(e) => results.push(Err(e)),
            }
        }
        let members: Vec<&P2pCalls> = rest.iter().filter(|m| !m.specs.is_empty()).collect();
        if members.is_empty() {
            continue;
        }
        let decision = decide_p2p(global, &clique, &members);
        for m in members {
            results.push(serve_p2p(global, real_group, waits, &clique, m, &decision));
        }
    }
    results
}

/// On a communicator spread over processes, a rank's send to itself and receive from
/// itself beside transfers to its peer are copied at once and left out of the decision:
/// the peer cannot see them, so deciding on them could make the two ranks decide apart (one
/// forwarding, the other waiting on coll). Returns the calls left to decide.
fn split_self(m: &P2pCalls, spread: bool) -> Result<P2pCalls> {
    let own = |recv: bool| {
        m.specs
            .iter()
            .filter(|s| s.root == m.comm.rank && s.is_recv == recv)
            .collect::<Vec<_>>()
    };
    let (sends, recvs) = (own(false), own(true));
    let others = m.specs.iter().any(|s| s.root != m.comm.rank);
    let mut left = P2pCalls {
        comm: Arc::clone(&m.comm),
        specs: m.specs.clone(),
    };
    if spread && others && sends.len() == 1 && recvs.len() == 1 {
        // SAFETY: the rank's own send and receive, under NCCL's contract.
        unsafe { local_copy(&m.comm, sends[0], recvs[0]) }?;
        count(true, sends[0]);
        count(true, recvs[0]);
        left.specs.retain(|s| s.root != m.comm.rank);
    }
    Ok(left)
}

/// The decision for a clique's members' point-to-point calls of one group, with the plan
/// of a served edge set compiled (a set coll has no plan for is forwarded).
fn decide_p2p(global: &Global, clique: &Clique, members: &[&P2pCalls]) -> p2p::Decision {
    if global.settings.disabled.contains(CollectiveKind::SendRecv) {
        return p2p::Decision::Forward("turned off by COLL_NCCL_DISABLE".into());
    }
    let calls: Vec<p2p::Call> = members
        .iter()
        .flat_map(|m| {
            m.specs.iter().map(|s| p2p::Call {
                rank: m.comm.rank,
                is_recv: s.is_recv,
                peer: s.root,
                count: s.count,
                esize: s.dtype.size(),
            })
        })
        .collect();
    let shape = p2p::Shape {
        nranks: clique.nranks,
        local: clique.members.len() as u32,
    };
    match p2p::decide(shape, &calls) {
        p2p::Decision::Serve(edges) => match clique.p2p_plan(&edges) {
            Ok(_) => p2p::Decision::Serve(edges),
            Err(e) => p2p::Decision::Forward(e.message),
        },
        d => d,
    }
}

/// Carries out `decision` for one member's calls.
fn serve_p2p(
    global: &Global,
    real_group: &mut RealGroup,
    waits: &mut Vec<Wait>,
    clique: &Arc<Clique>,
    m: &P2pCalls,
    decision: &p2p::Decision,
) -> Result<()> {
    let (member, real) = match m.comm.backend()? {
        Backend::Coll { member, real, .. } => (*member, Arc::clone(real)),
        Backend::Real(_) => return Err(Error::internal("a real communicator in a clique")),
    };
    let send = m.specs.iter().find(|s| !s.is_recv);
    let recv = m.specs.iter().find(|s| s.is_recv);
    match decision {
        p2p::Decision::Forward(why) => {
            let reason = if why.starts_with("no plan") {
                "no plan for the edge set"
            } else {
                why
            };
            for s in &m.specs {
                forward_logged(global, real_group, (&real, member), s, why, reason)?;
            }
            Ok(())
        }
        p2p::Decision::LocalCopy => {
            if let (Some(s), Some(r)) = (send, recv) {
                // SAFETY: the rank's own send and receive, under NCCL's contract.
                unsafe { local_copy(&m.comm, s, r) }?;
            }
            m.specs.iter().for_each(|s| count(true, s));
            Ok(())
        }
        p2p::Decision::Serve(_) => {
            let Some(first) = send.or(recv) else {
                return Ok(());
            };
            let part = p2p::Part {
                send_to: send.map(|s| s.root),
                recv_from: recv.map(|s| s.root),
            };
            // A rank with one buffer passes it as both (the plan touches only that one).
            let (sb, rb) = match (send, recv) {
                (Some(s), Some(r)) => (s.send, r.recv),
                (Some(s), None) => (s.send, s.send),
                (None, _) => (first.recv, first.recv),
            };
            let call = Call {
                kind: CollectiveKind::SendRecv,
                send: sb,
                recv: rb,
                count: first.count,
                dtype: first.dtype.bytes_alike(),
                op: ReduceOp::Sum,
                root: 0,
                stream: first.stream,
                p2p: Some(part),
            };
            // A receive on another stream than the send's: it waits for the send's stream's
            // work before the batch and that stream for the batch after it.
            let other = recv
                .map(|r| r.stream)
                .filter(|&r| r != first.stream)
                .map(|r| (r, first.stream));
            if let Some((r, main)) = other {
                // SAFETY: the streams of the rank's own receive and send, live (NCCL's
                // contract).
                unsafe { join_on(&m.comm, r, main) }?;
            }
            m.specs.iter().for_each(|s| count(true, s));
            waits.push((
                Arc::clone(&m.comm),
                Arc::clone(clique),
                clique.deposit(member, call),
                other,
            ));
            Ok(())
        }
    }
}

/// Makes stream `after` wait for stream `before`'s work so far, under `comm`'s context.
///
/// # Safety
/// Both are live streams of `comm`'s device (`cudaStream_t`s as addresses).
unsafe fn join_on(comm: &Comm, before: usize, after: usize) -> Result<()> {
    let _ctx = CurrentContext::save()?;
    // SAFETY: the context was current on a thread of this process at the comm's init and
    // primary contexts live as long as the process.
    unsafe { result::ctx::set_current(comm.ctx as sys::CUcontext) }.map_err(|e| {
        Error::new(
            NcclResult::UnhandledCudaError,
            format!("cuCtxSetCurrent: {e:?}"),
        )
    })?;
    // SAFETY: the contract; `comm`'s context is current.
    unsafe { crate::clique::join(before as sys::CUstream, after as sys::CUstream) }
}

/// A rank's send to itself and receive from itself: one copy on the send's stream (the
/// receive's joined to it before and after), under its communicator's CUDA context.
///
/// # Safety
/// `send` and `recv` are the rank's calls under NCCL's contract: device buffers of `count`
/// elements and live streams of `comm`'s device, the buffers alive until the copy has run.
unsafe fn local_copy(comm: &Comm, send: &Spec, recv: &Spec) -> Result<()> {
    let bytes = send.count.saturating_mul(send.dtype.size() as u64);
    if send.send == recv.recv || bytes == 0 {
        return Ok(());
    }
    let cuda = |what: &str, e: cudarc::driver::DriverError| {
        Error::new(NcclResult::UnhandledCudaError, format!("{what}: {e:?}"))
    };
    let two = recv.stream != send.stream;
    if two {
        // SAFETY: the rank's live streams (the contract).
        unsafe { join_on(comm, recv.stream, send.stream) }?;
    }
    let _ctx = CurrentContext::save()?;
    // SAFETY: the context was current on a thread of this process at the comm's init and
    // primary contexts live as long as the process.
    unsafe { result::ctx::set_current(comm.ctx as sys::CUcontext) }
        .map_err(|e| cuda("cuCtxSetCurrent", e))?;
    // SAFETY: the contract: both buffers hold `count` elements and outlive the copy, which
    // runs on the send's live stream.
    unsafe {
        result::memcpy_dtod_async(
            recv.recv,
            send.send,
            bytes as usize,
            send.stream as sys::CUstream,
        )
    }
    .map_err(|e| cuda("cuMemcpyDtoDAsync", e))?;
    if two {
        // SAFETY: as above.
        unsafe { join_on(comm, send.stream, recv.stream) }?;
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_counts_sends_and_receives_apart() {
        let send = Spec {
            kind: CollectiveKind::SendRecv,
            send: 0,
            recv: 0,
            count: 4,
            dtype: DataType::Float8e5m2,
            op: RedOp::Builtin(ReduceOp::Sum),
            root: 1,
            stream: 0,
            is_recv: false,
        };
        let recv = Spec {
            is_recv: true,
            ..send
        };
        count(true, &send);
        count(true, &send);
        count(false, &recv);
        let s = summary();
        let (served, forwarded) = s.split_once("; forwarded").expect("two parts");
        assert!(served.contains("send fp8e5m2 2"), "{s}");
        assert!(!served.contains("recv fp8e5m2"), "{s}");
        assert!(forwarded.contains("recv fp8e5m2 1"), "{s}");
    }
}
