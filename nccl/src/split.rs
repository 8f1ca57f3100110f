//! `ncclCommSplit`: children of a communicator served by coll where the parent is.
//!
//! A child's members are the parent's ranks that gave the same color, ranked by (key,
//! parent rank); `NCCL_SPLIT_NOCOLOR` (-1) joins none and gets a null handle. Each rank's
//! (color, key) is deposited in its parent clique's [`Rendezvous`] (the n-th split of every
//! member meets in round n, whether one thread splits every rank inside a group or one
//! thread per GPU splits its own). Where every rank of the parent lives in this process,
//! the deposit that completes a round forms every child at once, each a clique of its own,
//! and every caller takes its child. Where the parent is spread over processes, that
//! deposit starts a thread that exchanges the round with the other processes over the
//! parent's mesh and forms the children that have members here ([`crate::exchange`]); each
//! caller waits for it, and gives up at the clique's timeout (the exchange's and the
//! children's rendezvous's, each bounded by it) or when the parent is aborted. A parent
//! served by the real NCCL is split by the real NCCL alone, logged once with the reason.
//!
//! Where forwarding is on, each rank's real NCCL parent is split too (one real group per
//! thread's splits, before the rendezvous), and the real child stays beside the coll child
//! for the calls coll forwards, as it does beside a parent. A parent spread over processes
//! whose real communicator was waiting for a first forwarded call makes it first; one whose
//! ranks all live here leaves its children's to their own first forwarded call.
//!
//! Invariants: round `n` holds at most one entry per member and forms children once, when
//! it holds all of them; every member of a round gets the outcome meant for it from one
//! formation; a child's ranks are `0..m` in (key, parent rank) order; a child is registered
//! (and its handle written) only by its own caller.

use crate::abi::Config;
use crate::clique::{Clique, CurrentContext};
use crate::comm::{self, Backend, Comm, Later, RealBeside, RealComm};
use crate::error::{Error, Result};
use crate::exchange::Outcomes;
use crate::global::Global;
use crate::id::CollId;
use crate::rounds::{Rounds, Unmet};
use crate::route::check_real;
use crate::settings::{LogLevel, RealInit};
use coll_executor::sync::lock;
use cudarc::driver::{result, sys};
use std::ffi::c_void;
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// `NCCL_SPLIT_NOCOLOR`: the rank joins no child.
pub const NO_COLOR: i32 = -1;

/// One rank's `ncclCommSplit`, completed now or at its group's end.
#[derive(Debug)]
pub struct SplitCall {
    pub parent: Arc<Comm>,
    pub color: i32,
    pub key: i32,
    pub config: Config,
    /// Where the child's handle goes (a `ncclComm_t *` the caller keeps valid until the
    /// split completes): private, so only [`SplitCall::new`]'s contract sets it.
    out: *mut *mut c_void,
}

impl SplitCall {
    /// A split whose child's handle goes to `out`.
    ///
    /// # Safety
    /// `out` is non-null, aligned and writable until the split completes (NCCL's contract
    /// for `ncclCommSplit`'s `newcomm`, grouped or not).
    pub unsafe fn new(
        parent: Arc<Comm>,
        color: i32,
        key: i32,
        config: Config,
        out: *mut *mut c_void,
    ) -> SplitCall {
        SplitCall {
            parent,
            color,
            key,
            config,
            out,
        }
    }
}

/// The children of entries `(parent rank, color, key)`: per color (ascending), the indices
/// of its entries in child-rank order, (key, parent rank); `NO_COLOR` entries in none.
pub fn groups(entries: &[(u32, i32, i32)]) -> Vec<Vec<usize>> {
    let mut colors: Vec<i32> = entries
        .iter()
        .map(|e| e.1)
        .filter(|&c| c != NO_COLOR)
        .collect();
    colors.sort_unstable();
    colors.dedup();
    colors
        .into_iter()
        .map(|c| {
            let mut g: Vec<usize> = (0..entries.len()).filter(|&i| entries[i].1 == c).collect();
            g.sort_by_key(|&i| (entries[i].2, entries[i].0));
            g
        })
        .collect()
}

/// One member's part of a split round.
#[derive(Clone, Debug)]
pub struct Entry {
    pub color: i32,
    pub key: i32,
    /// The real NCCL child, where forwarding is on (null for no color).
    pub real: Option<RealComm>,
    pub config: Config,
    /// The parent communicator's CUDA context.
    pub ctx: usize,
    /// Where the parent's rank 0 listened, for a parent spread over processes (the
    /// children's listeners bind toward it).
    pub root: Option<SocketAddr>,
}

type Children = Vec<Option<Arc<Comm>>>;

/// A round's children: formed at once (every rank here), or by a thread exchanging the
/// round with the other processes ([`crate::exchange`]).
#[derive(Clone, Debug)]
pub enum Formed {
    Now(Result<Children>),
    Later(Arc<Forming>),
}

/// The children of a round being formed across processes: one outcome per member, set
/// once by the thread forming them.
#[derive(Debug, Default)]
pub struct Forming {
    outcomes: Mutex<Option<Result<Outcomes>>>,
    done: Condvar,
}

impl Forming {
    fn set(&self, o: Result<Outcomes>) {
        *lock(&self.outcomes) = Some(o);
        self.done.notify_all();
    }

    /// Member `m`'s outcome, waiting up to `timeout` and giving up once `aborted` says so
    /// (checked every few milliseconds: an abort has no handle on this wait).
    fn wait(
        &self,
        m: usize,
        timeout: Duration,
        aborted: impl Fn() -> bool,
    ) -> std::result::Result<Result<Option<Arc<Comm>>>, Unmet> {
        let deadline = Instant::now() + timeout;
        let mut o = lock(&self.outcomes);
        loop {
            if let Some(o) = o.as_ref() {
                return Ok(match o {
                    Ok(each) => each
                        .get(m)
                        .cloned()
                        .unwrap_or_else(|| Err(Error::internal("a member with no outcome"))),
                    Err(e) => Err(e.clone()),
                });
            }
            if aborted() {
                return Err(Unmet::Aborted);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Unmet::Missing(Vec::new()));
            }
            let step = (deadline - now).min(Duration::from_millis(20));
            o = self
                .done
                .wait_timeout(o, step)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }
}

/// The split rounds of one clique.
pub type Rendezvous = Rounds<Entry, Formed>;

/// Deposits member `m`'s entry in its next round of `clique`; the deposit that completes
/// the round forms the children, or starts the thread that does for a parent spread over
/// processes. Returns the round.
fn deposit(global: &'static Global, clique: &Arc<Clique>, m: usize, e: Entry) -> u64 {
    clique.splits.deposit(m, e, |entries| {
        if clique.mesh().is_none() {
            return Formed::Now(form(global, clique, &entries));
        }
        let forming = Arc::new(Forming::default());
        let (f, c) = (Arc::clone(&forming), Arc::clone(clique));
        let started = std::thread::Builder::new()
            .name("coll-nccl-split".into())
            .spawn(move || {
                let o = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    crate::exchange::form(global, &c, &entries)
                }))
                .unwrap_or_else(|_| Err(Error::internal("a split's thread panicked")));
                f.set(o);
            });
        if let Err(e) = started {
            forming.set(Err(Error::system(format!("a split's thread: {e}"))));
        }
        Formed::Later(forming)
    })
}

/// Waits for round `seq`; member `m`'s child (`None` for no color).
fn wait(clique: &Clique, seq: u64, m: usize, timeout: Duration) -> Result<Option<Arc<Comm>>> {
    let start = Instant::now();
    let outcome = clique.splits.wait(seq, timeout).and_then(|f| match f {
        Formed::Now(outcome) => Ok(outcome.map(|children| children.get(m).cloned().flatten())),
        // The exchange and each child's rendezvous are bounded by the timeout; the last of
        // them can start just before the previous one's end.
        Formed::Later(forming) => {
            let budget = timeout * (2 + 2 * clique.members.len() as u32);
            forming.wait(m, budget.saturating_sub(start.elapsed()), || {
                clique.splits.aborted()
            })
        }
    });
    match outcome {
        Ok(child) => child,
        Err(Unmet::Gone) => Err(Error::internal(format!("split round {seq} is gone"))),
        Err(Unmet::Aborted) => Err(Error::usage(format!(
            "ncclCommSplit {seq}: the parent communicator was aborted"
        ))),
        Err(Unmet::Missing(missing)) if missing.is_empty() => Err(Error::new(
            crate::abi::NcclResult::RemoteError,
            format!(
                "ncclCommSplit {seq}: the children were not formed with the other processes \
                 in time"
            ),
        )),
        Err(Unmet::Missing(missing)) => {
            let missing: Vec<u32> = missing.iter().map(|&i| clique.members[i].rank).collect();
            Err(Error::usage(format!(
                "ncclCommSplit {seq}: ranks {missing:?} of this process did not split within \
                 {timeout:?}; a thread driving several GPUs must group their splits \
                 (ncclGroupStart/End)"
            )))
        }
    }
}

/// Forms every child of a complete round (entries in member order).
fn form(global: &Global, clique: &Clique, entries: &[Entry]) -> Result<Children> {
    let keyed: Vec<(u32, i32, i32)> = clique
        .members
        .iter()
        .zip(entries)
        .map(|(m, e)| (m.rank, e.color, e.key))
        .collect();
    let mut children: Children = vec![None; entries.len()];
    for group in groups(&keyed) {
        let n = group.len() as u32;
        let id = CollId::new(None, None).map_err(|e| Error::system(e.to_string()))?;
        let comms: Vec<Arc<Comm>> = group
            .iter()
            .enumerate()
            .map(|(rank, &i)| {
                Arc::new(Comm::new(
                    rank as u32,
                    n,
                    clique.members[i].device,
                    entries[i].ctx,
                    entries[i].config.clone(),
                    id,
                ))
            })
            .collect();
        let real: Vec<Option<RealComm>> = group.iter().map(|&i| entries[i].real).collect();
        // Without a real child split off the parent's real communicator (never made: it
        // waits for a first forwarded call), one for the child's ranks, all here, from a
        // fresh id.
        let unsplit = global.settings.forward && real.iter().all(Option::is_none);
        let fresh = || Later {
            nranks: n,
            members: comms.iter().map(|c| (c.rank, c.ctx)).collect(),
            id: None,
        };
        match crate::init::coll_clique(global, &comms) {
            Ok(child) => {
                // The real parent's children where it was split; else real ones made at the
                // child's first forwarded call.
                let beside = if unsplit && global.settings.real_init == RealInit::Lazy {
                    RealBeside::later(fresh())
                } else {
                    RealBeside::made(real.clone())
                };
                for (c, m) in comms.iter().zip(0..) {
                    c.set_backend(Ok(Backend::Coll {
                        clique: Arc::clone(&child),
                        member: m,
                        real: Arc::clone(&beside),
                    }));
                }
                global.log.line(
                    LogLevel::Info,
                    &format!(
                        "split: a communicator of {n} ranks (parent ranks {:?}): served by coll",
                        group.iter().map(|&i| keyed[i].0).collect::<Vec<_>>()
                    ),
                );
            }
            Err(e) => {
                // The child's shape is coll's to refuse; the real child serves it if any.
                global.log.once(
                    LogLevel::Warn,
                    &format!("split forward {e}"),
                    &format!("a communicator made by ncclCommSplit served by the real NCCL: {e}"),
                );
                // The real NCCL serves the child alone: made now where it was not split off.
                let real = if unsplit {
                    match crate::init::make_later(global, &fresh()) {
                        Ok(made) => made,
                        Err(why) => {
                            global.log.once(
                                LogLevel::Warn,
                                &format!("split real {why}"),
                                &format!("no real NCCL for a split's child: {why}"),
                            );
                            real
                        }
                    }
                } else {
                    real
                };
                for (c, real) in comms.iter().zip(&real) {
                    c.set_backend(real.map(Backend::Real).ok_or_else(|| e.clone()));
                }
            }
        }
        for (c, &i) in comms.into_iter().zip(&group) {
            children[i] = Some(c);
        }
    }
    Ok(children)
}

/// Carries out one thread's splits (one, or a group's).
pub fn run(global: &'static Global, calls: Vec<SplitCall>) -> Result<()> {
    for c in &calls {
        c.parent.usable()?;
        if c.color < NO_COLOR {
            return Err(Error::argument(format!("color {}", c.color)));
        }
    }
    // Which parents coll splits: those it serves.
    let by_coll: Vec<Option<(Arc<Clique>, usize)>> = calls
        .iter()
        .map(|c| match c.parent.backend() {
            Ok(Backend::Coll { clique, member, .. }) => Some((Arc::clone(clique), *member)),
            _ => None,
        })
        .collect();
    // A parent spread over processes whose real communicator waits for a first forwarded
    // call gets it now, so its real children are split off it: a child's real communicator
    // made later from a fresh id would need that id told to the other processes. A split is
    // a collective of every rank of the parent, as making it is.
    for c in &calls {
        if let Ok(Backend::Coll {
            clique,
            member,
            real,
        }) = c.parent.backend()
            && real.pending()
            && clique.spread()
            && let Err(e) =
                real.get_or_make(*member, |later| crate::init::make_later(global, later))
        {
            global.log.once(
                LogLevel::Warn,
                &format!("split real parent {e}"),
                &format!("no real NCCL beside a split's parent: {e}"),
            );
        }
    }
    let reals = match real_splits(global, &calls, &by_coll) {
        Ok(r) => r,
        // coll's children still form (the other ranks wait for them); only what coll
        // forwards on them then fails.
        Err(e) if by_coll.iter().all(Option::is_some) => {
            global.log.once(
                LogLevel::Warn,
                &format!("split no real {e}"),
                &format!(
                    "no real NCCL beside a split's children: calls coll cannot serve will fail: {e}"
                ),
            );
            vec![None; calls.len()]
        }
        Err(e) => return Err(e),
    };
    let mut pending = Vec::new();
    for ((c, coll), real) in calls.iter().zip(&by_coll).zip(&reals) {
        match coll {
            Some((clique, member)) => {
                let e = Entry {
                    color: c.color,
                    key: c.key,
                    real: *real,
                    config: c.config.clone(),
                    ctx: c.parent.ctx,
                    root: c.parent.id.addr,
                };
                let seq = deposit(global, clique, *member, e);
                pending.push((c, clique, *member, seq));
            }
            None => {
                let child = match real {
                    Some(r) => Some(real_child(global, c, *r)?),
                    None => None,
                };
                give(c, child);
            }
        }
    }
    let mut outcome = Ok(());
    for (c, clique, member, seq) in pending {
        match wait(clique, seq, member, global.settings.gpu.timeout) {
            Ok(child) => give(c, child),
            Err(e) => {
                give(c, None);
                if outcome.is_ok() {
                    outcome = Err(e);
                }
            }
        }
    }
    outcome
}

/// Registers `child` and writes its handle (null for none) where the caller asked.
fn give(c: &SplitCall, child: Option<Arc<Comm>>) {
    let handle = child.map_or(std::ptr::null_mut(), comm::register);
    // SAFETY: `out` is writable until the split completes ([`SplitCall::new`]'s contract).
    unsafe { *c.out = handle };
}

/// The real NCCL's children of the calls' parents (in one real group, each under its
/// parent's context): `None` where a parent has no real communicator or the rank gave no
/// color. A parent coll does not split needs its real one.
fn real_splits(
    global: &Global,
    calls: &[SplitCall],
    by_coll: &[Option<(Arc<Clique>, usize)>],
) -> Result<Vec<Option<RealComm>>> {
    for (c, coll) in calls.iter().zip(by_coll) {
        if coll.is_none() && c.parent.real().is_none() {
            return Err(Error::usage(
                "ncclCommSplit of a communicator coll does not split needs the real NCCL beside \
                 coll",
            ));
        }
    }
    if calls.iter().all(|c| c.parent.real().is_none()) {
        return Ok(vec![None; calls.len()]);
    }
    let lib = global.real()?;
    let missing = |what: &str| Error::usage(format!("the real NCCL does not export {what}"));
    let (start, end, split) = (
        lib.group_start.ok_or_else(|| missing("ncclGroupStart"))?,
        lib.group_end.ok_or_else(|| missing("ncclGroupEnd"))?,
        lib.comm_split.ok_or_else(|| missing("ncclCommSplit"))?,
    );
    let _ctx = CurrentContext::save()?;
    // SAFETY: no arguments.
    check_real("ncclGroupStart", unsafe { start() })?;
    let mut out = Vec::with_capacity(calls.len());
    let mut first_err = Ok(());
    for c in calls {
        let Some(parent) = c.parent.real() else {
            out.push(None);
            continue;
        };
        // SAFETY: the context was current on a thread of this process at the parent's init
        // and primary contexts live as long as the process.
        if let Err(e) = unsafe { result::ctx::set_current(c.parent.ctx as sys::CUcontext) } {
            first_err = Err(Error::new(
                crate::abi::NcclResult::UnhandledCudaError,
                format!("cuCtxSetCurrent: {e:?}"),
            ));
            break;
        }
        let mut raw: crate::real::RawComm = std::ptr::null_mut();
        // SAFETY: the real parent communicator; `raw` receives the new one; a null config
        // asks for the defaults.
        let r = unsafe { split(parent.0, c.color, c.key, &mut raw, std::ptr::null_mut()) };
        if let Err(e) = check_real("ncclCommSplit", r) {
            first_err = Err(e);
            break;
        }
        out.push((!raw.is_null()).then_some(RealComm(raw)));
    }
    // SAFETY: no arguments; closes the group opened above.
    let ended = check_real("ncclGroupEnd", unsafe { end() });
    first_err?;
    ended?;
    Ok(out)
}

/// The child of a parent coll does not split: the real NCCL's alone.
fn real_child(global: &Global, c: &SplitCall, real: RealComm) -> Result<Arc<Comm>> {
    global.log.once(
        LogLevel::Warn,
        "split real",
        "communicators split from one served by the real NCCL are served by the real NCCL",
    );
    let lib = global.real()?;
    let (Some(ur), Some(cc)) = (lib.comm_user_rank, lib.comm_count) else {
        return Err(Error::usage(
            "the real NCCL lacks ncclCommUserRank or ncclCommCount",
        ));
    };
    let (mut rank, mut count) = (0, 0);
    // SAFETY: a live real communicator; each writes one int.
    check_real("ncclCommUserRank", unsafe { ur(real.0, &mut rank) })?;
    // SAFETY: as above.
    check_real("ncclCommCount", unsafe { cc(real.0, &mut count) })?;
    let id = CollId::new(None, None).map_err(|e| Error::system(e.to_string()))?;
    let new = Arc::new(Comm::new(
        rank as u32,
        count as u32,
        c.parent.device,
        c.parent.ctx,
        c.config.clone(),
        id,
    ));
    new.set_backend(Ok(Backend::Real(real)));
    Ok(new)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A member of a parent spread over processes waiting for the exchange (the other
    /// process never splits) is woken by the parent's abort, not by the timeout.
    #[test]
    fn abort_wakes_a_split_waiting_for_other_processes() {
        let g = crate::exchange::tests::global(Duration::from_secs(30));
        let mut meshes =
            coll_executor::net::mesh::loopback(2, 2, Duration::from_secs(10)).expect("meshes");
        let _other = meshes.pop();
        let mesh = meshes.pop().expect("process 0's mesh");
        let clique = crate::exchange::tests::spread_clique(g, 2, 0, mesh);
        let id = CollId::new(None, Some(([127, 0, 0, 1], 9).into())).expect("random bytes");
        let parent = Arc::new(Comm::new(0, 2, 0, 0, Config::default(), id));
        parent.set_backend(Ok(Backend::Coll {
            clique: Arc::clone(&clique),
            member: 0,
            real: comm::RealBeside::made(vec![None]),
        }));
        let aborter = {
            let parent = Arc::clone(&parent);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                parent.abort()
            })
        };
        let mut out: *mut c_void = std::ptr::NonNull::dangling().as_ptr();
        // SAFETY: `out` outlives the split, which completes (or fails) inside `run`.
        let call = unsafe { SplitCall::new(parent, 0, 0, Config::default(), &mut out) };
        let start = Instant::now();
        let e = run(g, vec![call]).expect_err("aborted");
        assert!(
            e.message.contains("the parent communicator was aborted"),
            "{e}"
        );
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
        assert!(out.is_null(), "no child after an abort");
        aborter
            .join()
            .expect("the aborter")
            .expect("no executor to abort");
    }

    #[test]
    fn children_follow_color_then_key_then_parent_rank() {
        // Parent ranks 0..4: colors 1, 0, 1, NO_COLOR; keys reversed.
        let g = groups(&[(0, 1, 3), (1, 0, 2), (2, 1, 1), (3, NO_COLOR, 0)]);
        assert_eq!(g, vec![vec![1], vec![2, 0]]);
        // Equal keys: parent rank decides.
        assert_eq!(groups(&[(0, 5, 0), (1, 5, 0)]), vec![vec![0, 1]]);
        // Two 1-rank children.
        assert_eq!(groups(&[(0, 0, 0), (1, 1, 0)]), vec![vec![0], vec![1]]);
        assert!(groups(&[(0, NO_COLOR, 0)]).is_empty());
    }
}
