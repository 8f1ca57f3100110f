//! Completing communicators: at the end of the group that created them, the new ranks of
//! each communicator (by the secret in its unique id) become one [`Clique`] when all of its
//! ranks live in this process, served by coll with a real NCCL communicator beside it for
//! what coll forwards; a communicator spread over processes is served by coll through the
//! process mesh ([`bootstrap`]) where its placement allows, else by the real NCCL.
//! [`coll_clique`] is also how [`crate::split`] serves the children of a split of a
//! single-process communicator, and [`complete_child`] how [`crate::exchange`] completes
//! those of one spread over processes.
//!
//! Invariant: every pending communicator leaves [`complete`] (and [`complete_child`]) with
//! its backend set, to a backend or to the error that prevented one; a failure is logged
//! once per reason.

use crate::abi::UniqueId;
use crate::bootstrap::{self, Joining};
use crate::clique::{Clique, CurrentContext, Member};
use crate::comm::{Backend, Comm, Later, RealBeside, RealComm};
use crate::error::{Error, Result};
use crate::global::Global;
use crate::group::PendingInit;
use crate::route::check_real;
use crate::select::Selector;
use crate::settings::{LogLevel, RealInit};
use coll_compiler::topology::Topology;
use cudarc::driver::{result, sys};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Completes every pending init of a group.
pub fn complete(global: &Global, inits: Vec<PendingInit>) -> Result<()> {
    let mut by_id: BTreeMap<[u8; 32], Vec<Arc<Comm>>> = BTreeMap::new();
    for i in inits {
        by_id.entry(i.comm.id.secret).or_default().push(i.comm);
    }
    let mut outcome = Ok(());
    for (_, comms) in by_id {
        let r = complete_one(global, &comms, None);
        if let Err(e) = &r {
            for c in &comms {
                c.set_backend(Err(e.clone()));
            }
            global.log.once(
                LogLevel::Warn,
                &format!("init {e}"),
                &format!("communicator init failed: {e}"),
            );
            if outcome.is_ok() {
                outcome = r;
            }
        }
    }
    outcome
}

/// Completes the communicators of a split's child that live here ([`crate::exchange`]):
/// served as [`complete`] would serve a fresh communicator of the same ranks, except that
/// the real NCCL's communicators beside them are `reals`, the real parent's children (one
/// per comm; `None` where there is none), not made from the id.
pub fn complete_child(
    global: &Global,
    comms: &[Arc<Comm>],
    reals: &[Option<RealComm>],
) -> Result<()> {
    if reals.len() != comms.len() {
        return Err(Error::internal("a real child per communicator"));
    }
    let r = complete_one(global, comms, Some(reals));
    if let Err(e) = &r {
        for c in comms {
            c.set_backend(Err(e.clone()));
        }
        global.log.once(
            LogLevel::Warn,
            &format!("split init {e}"),
            &format!("a communicator made by ncclCommSplit failed: {e}"),
        );
    }
    r
}

/// Completes one communicator's ranks here; `given`: the real communicators beside them
/// (a split's), else made from the id where forwarding is on.
fn complete_one(
    global: &Global,
    comms: &[Arc<Comm>],
    given: Option<&[Option<RealComm>]>,
) -> Result<()> {
    let n = comms[0].nranks;
    let mut ranks: Vec<u32> = comms.iter().map(|c| c.rank).collect();
    ranks.sort_unstable();
    if comms.iter().any(|c| c.nranks != n) {
        return Err(Error::argument(
            "ranks of one unique id were given different rank counts",
        ));
    }
    if ranks.windows(2).any(|w| w[0] == w[1]) {
        return Err(Error::argument(format!(
            "rank {} was initialised twice with one unique id",
            ranks.windows(2).find(|w| w[0] == w[1]).map_or(0, |w| w[0])
        )));
    }
    let all_here = ranks.len() as u32 == n;
    if !all_here {
        return match spread(global, comms, given) {
            Ok(()) => Ok(()),
            Err(Spread::Failed(e)) => Err(e),
            Err(Spread::Shape(why)) => forward_all(global, comms, &why, given),
        };
    }
    let clique = coll_clique(global, comms)?;
    serve(global, comms, clique, None, given)
}

/// The clique of `comms`, every rank of one communicator, all in this process (one
/// switch-connected host): how [`complete`] and [`crate::split`] serve them with coll.
pub fn coll_clique(global: &Global, comms: &[Arc<Comm>]) -> Result<Arc<Clique>> {
    let n = comms
        .first()
        .map(|c| c.nranks)
        .ok_or_else(|| Error::internal("a communicator of no ranks"))?;
    let spec = format!("nvswitch:{n}");
    let topo = Topology::parse(&spec).map_err(|e| Error::usage(format!("{spec}: {e}")))?;
    let devices: Vec<i32> = comms.iter().map(|c| c.device).collect();
    let machine = crate::select::machine_of(&crate::select::identities(&devices));
    let selector = Selector::new(topo, &global.settings, machine.as_deref())
        .map_err(|e| Error::usage(e.to_string()))?;
    clique_of(global, comms, selector, None)
}

/// The clique of `comms` (this process's ranks of one communicator).
fn clique_of(
    global: &Global,
    comms: &[Arc<Comm>],
    selector: Selector,
    mesh: Option<Arc<coll_executor::net::mesh::Mesh>>,
) -> Result<Arc<Clique>> {
    let members: Vec<Member> = comms
        .iter()
        .map(|c| Member {
            rank: c.rank,
            device: c.device,
        })
        .collect();
    Ok(Arc::new(Clique::new(
        comms[0].nranks,
        members,
        selector,
        global.settings.gpu.clone(),
        Arc::clone(&global.log),
        mesh,
        global.settings.max_executors,
    )?))
}

/// Makes `clique` serve `comms`, with a real NCCL communicator beside each where forwarding
/// is on (`given`, or made from the id).
/// `spread` names the processes and topology of a communicator spread over several, for the
/// one line that says how it is served.
fn serve(
    global: &Global,
    comms: &[Arc<Comm>],
    clique: Arc<Clique>,
    spread: Option<String>,
    given: Option<&[Option<RealComm>]>,
) -> Result<()> {
    let n = clique.nranks;
    let members: Vec<usize> = comms
        .iter()
        .map(|c| {
            clique
                .member_of(c.rank)
                .ok_or_else(|| Error::internal("a rank missing from its clique"))
        })
        .collect::<Result<_>>()?;
    // Per communicator to per member, as the clique numbers them.
    let by_member = |reals: Vec<Option<RealComm>>| {
        let mut out = vec![None; clique.members.len()];
        for (&m, r) in members.iter().zip(reals) {
            out[m] = r;
        }
        out
    };
    // The real NCCL beside coll, for what coll forwards; without it those calls fail. It may
    // wait for the first forwarded call ([`make_later`]) where every rank is here, or where
    // the communicator has two ranks: making it is a collective of every rank, and across
    // processes only there does every forwarded call reach every rank (a point-to-point
    // call of a larger one reaches two of them). Across processes it needs the real id the
    // unique id carries, the one every process was given.
    let lazy_here = match spread {
        None => true,
        Some(_) => n == 2 && comms[0].id.real.is_some(),
    };
    let real = if let Some(given) = given {
        RealBeside::made(by_member(given.to_vec()))
    } else if global.settings.forward && lazy_here && global.settings.real_init == RealInit::Lazy {
        let mut later = vec![(0, 0); clique.members.len()];
        for (&m, c) in members.iter().zip(comms) {
            later[m] = (c.rank, c.ctx);
        }
        RealBeside::later(Later {
            nranks: n,
            members: later,
            id: comms[0].id.real,
        })
    } else if global.settings.forward && comms[0].id.real.is_some() {
        let reals = match real_comms(global, comms) {
            Ok(r) => r.into_iter().map(Some).collect(),
            Err(e) => {
                global.log.once(
                    LogLevel::Warn,
                    &format!("no real {e}"),
                    &format!("no real NCCL beside coll: calls coll cannot serve will fail: {e}"),
                );
                vec![None; comms.len()]
            }
        };
        RealBeside::made(by_member(reals))
    } else {
        RealBeside::made(vec![None; clique.members.len()])
    };
    for (c, &member) in comms.iter().zip(&members) {
        c.set_backend(Ok(Backend::Coll {
            clique: Arc::clone(&clique),
            member,
            real: Arc::clone(&real),
        }));
    }
    let devices = clique.members.iter().map(|m| m.device).collect::<Vec<_>>();
    crate::prebuild::start(global, &devices);
    let line = match spread {
        Some(how) => format!(
            "communicator of {n} ranks over {how}, this process's on devices {devices:?}: \
             served by coll"
        ),
        None => format!("communicator of {n} ranks on devices {devices:?}: served by coll"),
    };
    global.log.line(LogLevel::Info, &line);
    Ok(())
}

/// Why a communicator spread over processes is not served by coll.
enum Spread {
    /// Its shape: the real NCCL may serve it.
    Shape(String),
    /// Its rendezvous or mesh failed: an error for the caller.
    Failed(Error),
}

impl From<Error> for Spread {
    fn from(e: Error) -> Spread {
        Spread::Failed(e)
    }
}

/// Serves a communicator spread over processes with coll: the rank rendezvous, the
/// placement check, the mesh of processes, the clique of this process's ranks.
fn spread(
    global: &Global,
    comms: &[Arc<Comm>],
    given: Option<&[Option<RealComm>]>,
) -> std::result::Result<(), Spread> {
    let id = comms[0].id;
    let n = comms[0].nranks;
    let Some(root) = id.addr else {
        return Err(Spread::Shape(
            "its unique id names no rank 0 address".into(),
        ));
    };
    let timeout = global.settings.gpu.timeout;
    let host_ip = global
        .settings
        .net_host
        .map_or_else(|| coll_executor::net::local_ip_toward(root), Ok)
        .map_err(|e| Error::system(format!("no route toward rank 0 at {root}: {e}")))?;
    let local: Vec<Joining> = comms
        .iter()
        .map(|c| Joining {
            rank: c.rank,
            device: c.device,
        })
        .collect();
    let infos = bootstrap::ranks(id.secret, root, n, &local, host_ip, timeout)?;
    let (owner, procs) = bootstrap::processes(&infos).map_err(Spread::Shape)?;
    let me = owner[comms[0].rank as usize];
    let mine: Vec<u32> = (0..n).filter(|&r| owner[r as usize] == me).collect();
    let mut here: Vec<u32> = comms.iter().map(|c| c.rank).collect();
    here.sort_unstable();
    if here != mine {
        return Err(Spread::Shape(format!(
            "this process owns ranks {mine:?} but initialised {here:?} together (one group)"
        )));
    }
    if comms.iter().any(|c| c.device != comms[0].device) {
        return Err(Spread::Shape(
            "a process of a communicator spread over processes drives one GPU".into(),
        ));
    }
    let mut hosts: Vec<&str> = Vec::new();
    for i in &infos {
        if hosts.last() != Some(&i.host.as_str()) {
            hosts.push(&i.host);
        }
    }
    let spec = if hosts.len() == 1 {
        format!("nvswitch:{n}")
    } else if n.is_multiple_of(hosts.len() as u32) {
        format!("cluster:{}x{}", hosts.len(), n / hosts.len() as u32)
    } else {
        return Err(Spread::Shape(format!(
            "{n} ranks on {} hosts: coll's topologies hold equal numbers of GPUs per host",
            hosts.len()
        )));
    };
    let topo = Topology::parse(&spec).map_err(|e| Spread::Shape(format!("{spec}: {e}")))?;
    // From what every rank said of its GPU: the same in every process.
    let machine = if hosts.len() == 1 {
        let ids: Vec<_> = infos.iter().map(|i| i.gpu.clone()).collect();
        crate::select::machine_of(&ids)
    } else {
        None
    };
    let selector = Selector::new(topo, &global.settings, machine.as_deref())
        .map_err(|e| Error::usage(e.to_string()))?;
    let meet = infos[0].mesh.ok_or_else(|| {
        Error::new(
            crate::abi::NcclResult::RemoteError,
            "rank 0 named no mesh address",
        )
    })?;
    let mesh = bootstrap::mesh(id.secret, meet, me, procs, n, host_ip, timeout)?;
    let clique = clique_of(global, comms, selector, Some(mesh))?;
    serve(
        global,
        comms,
        clique,
        Some(format!("{procs} processes ({spec})")),
        given,
    )?;
    Ok(())
}

/// Serves a communicator coll cannot place with the real NCCL alone (`given`'s, a split's,
/// or made from the id).
fn forward_all(
    global: &Global,
    comms: &[Arc<Comm>],
    why: &str,
    given: Option<&[Option<RealComm>]>,
) -> Result<()> {
    let n = comms[0].nranks;
    let made = match given {
        Some(given) => given
            .iter()
            .map(|r| r.ok_or_else(|| Error::usage("no real NCCL child of the split's parent")))
            .collect(),
        None => real_comms(global, comms),
    };
    let real = made.map_err(|e| {
        Error::usage(format!(
            "a communicator of {n} ranks that coll does not serve ({why}), and the real NCCL, \
             which would, is not available: {e}"
        ))
    })?;
    global.log.once(
        LogLevel::Warn,
        &format!("forward communicator {why}"),
        &format!("communicator of {n} ranks served by the real NCCL: {why}"),
    );
    for (c, r) in comms.iter().zip(real) {
        c.set_backend(Ok(Backend::Real(r)));
    }
    Ok(())
}

/// Real NCCL communicators for `comms` from the real id their unique id carries.
fn real_comms(global: &Global, comms: &[Arc<Comm>]) -> Result<Vec<RealComm>> {
    let id = comms[0]
        .id
        .real
        .ok_or_else(|| Error::usage("the unique id carries no real NCCL id"))?;
    let members: Vec<(u32, usize)> = comms.iter().map(|c| (c.rank, c.ctx)).collect();
    init_reals(global, id, comms[0].nranks, &members)
}

/// Makes the real communicators of a [`RealBeside`] that waited for the first forwarded call
/// (every member's, in one real group), from the unique id's real id or a fresh one.
pub fn make_later(global: &Global, later: &Later) -> Result<Vec<Option<RealComm>>> {
    let id = match later.id {
        Some(id) => id,
        None => global
            .real()?
            .unique_id()?
            .ok_or_else(|| Error::usage("the real NCCL does not export ncclGetUniqueId"))?,
    };
    let made = init_reals(global, id, later.nranks, &later.members)?;
    global.log.line(
        LogLevel::Info,
        &format!(
            "made the real NCCL's communicator beside coll's for ranks {:?} of {} at the first \
             forwarded call",
            later.members.iter().map(|m| m.0).collect::<Vec<_>>(),
            later.nranks
        ),
    );
    Ok(made.into_iter().map(Some).collect())
}

/// Real NCCL communicators of rank count `nranks` with real id `id`, one per `(rank, CUDA
/// context)` of `members` (one real group, each init under its rank's context, as the caller
/// had it current at its init call).
fn init_reals(
    global: &Global,
    id: UniqueId,
    nranks: u32,
    members: &[(u32, usize)],
) -> Result<Vec<RealComm>> {
    let real = global.real()?;
    let (start, end, init) = match (real.group_start, real.group_end, real.comm_init_rank) {
        (Some(s), Some(e), Some(i)) => (s, e, i),
        _ => return Err(Error::usage("the real NCCL lacks group or init functions")),
    };
    let _ctx = CurrentContext::save()?;
    // SAFETY: no arguments.
    check_real("ncclGroupStart", unsafe { start() })?;
    let mut out = Vec::with_capacity(members.len());
    let mut first_err = Ok(());
    for &(rank, ctx) in members {
        let mut raw: crate::real::RawComm = std::ptr::null_mut();
        // SAFETY: the context was current on a thread of this process at the comm's init
        // and primary contexts live as long as the process.
        let bound = unsafe { result::ctx::set_current(ctx as sys::CUcontext) };
        if let Err(e) = bound {
            first_err = Err(Error::new(
                crate::abi::NcclResult::UnhandledCudaError,
                format!("cuCtxSetCurrent: {e:?}"),
            ));
            break;
        }
        // SAFETY: `raw` receives the communicator; `id` is the real NCCL's id that rank 0
        // made; nranks and rank were checked by the caller.
        let r = unsafe { init(&mut raw, nranks as i32, id, rank as i32) };
        if let Err(e) = check_real("ncclCommInitRank", r) {
            first_err = Err(e);
            break;
        }
        out.push(RealComm(raw));
    }
    // SAFETY: no arguments; closes the group opened above.
    let ended = check_real("ncclGroupEnd", unsafe { end() });
    first_err?;
    ended?;
    Ok(out)
}
