//! `ncclCommSplit` of a communicator spread over processes: every process's (color, key)
//! per rank, exchanged over the parent's mesh, and the children formed from them.
//!
//! The exchange is one barrier of the parent's mesh ([`coll_executor::net::mesh::Mesh::barrier`]): the links the
//! parent's processes opened after proving its id's secret, so no new listener and no
//! unauthenticated byte is involved. Each process contributes a [`Proposal`]: its ranks'
//! (color, key) and, for each color among them, a fresh child id ([`CollId`]: a new secret
//! and a bootstrap listener of this process). Every process then derives the same children
//! ([`plan`]) and takes, for each child, the id proposed by the process of the child's
//! rank 0: that rank serves the child's rendezvous, which must happen in the process
//! whose listener the id names. The other proposed ids are dropped with their listeners.
//! Each child then forms as a fresh communicator of those ranks would
//! ([`crate::init::complete_child`]): all its ranks here, one clique; spread over processes,
//! its own rendezvous (proving its new secret) and mesh; the real NCCL's child beside it
//! where forwarding is on.
//!
//! Children form in ascending color order in every process, so two processes that share
//! several children meet in each child's rendezvous in the same order.
//!
//! Invariants: a proposal that decodes names only ranks its sender owns, each once, colors
//! of at least `NO_COLOR`, at most one id per color; [`plan`] accepts a set of proposals
//! only when every parent rank appears exactly once and every child's rank 0 came with an
//! id for its color, and every process derives the same plan from the same proposals.

use crate::abi::NcclResult;
use crate::bootstrap;
use crate::clique::Clique;
use crate::comm::{Comm, RealComm};
use crate::error::{Error, Result};
use crate::global::Global;
use crate::id::CollId;
use crate::settings::LogLevel;
use crate::split::{Entry, NO_COLOR, groups};
use coll_executor::net::mesh::Placement;
use std::sync::Arc;

const MAGIC: &[u8; 4] = b"CSP1";
/// Bytes of one (rank, color, key) entry.
const ENTRY: usize = 12;
/// Bytes of one (color, id) pair.
const ID: usize = 4 + crate::abi::UNIQUE_ID_BYTES;

/// One process's part of a split exchange.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proposal {
    /// (parent rank, color, key) of each of its ranks.
    pub ranks: Vec<(u32, i32, i32)>,
    /// A child id per color among its ranks, for the children whose rank 0 it holds.
    pub ids: Vec<(i32, CollId)>,
}

/// Why a proposal or a set of them was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExchangeError {
    #[error("process {proc} sent a malformed split proposal: {why}")]
    Malformed { proc: u32, why: String },
    #[error("process {proc} proposed rank {rank}, which it does not own")]
    Foreign { proc: u32, rank: u32 },
    #[error("rank {rank} was proposed twice")]
    Twice { rank: u32 },
    #[error("no process proposed rank {rank}")]
    Missing { rank: u32 },
    #[error("process {proc} holds rank 0 of color {color}'s child but proposed no id for it")]
    NoId { proc: u32, color: i32 },
}

impl Proposal {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(12 + self.ranks.len() * ENTRY + self.ids.len() * ID);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&(self.ranks.len() as u32).to_le_bytes());
        for &(r, c, k) in &self.ranks {
            b.extend_from_slice(&r.to_le_bytes());
            b.extend_from_slice(&c.to_le_bytes());
            b.extend_from_slice(&k.to_le_bytes());
        }
        b.extend_from_slice(&(self.ids.len() as u32).to_le_bytes());
        for (c, id) in &self.ids {
            b.extend_from_slice(&c.to_le_bytes());
            b.extend_from_slice(&id.encode().bytes());
        }
        b
    }

    /// Process `proc`'s proposal from `bytes`, checked against `place` (the parent's
    /// ranks over its processes; see the module's invariants).
    pub fn decode(
        bytes: &[u8],
        proc: u32,
        place: Placement,
    ) -> std::result::Result<Proposal, ExchangeError> {
        let bad = |why: &str| ExchangeError::Malformed {
            proc,
            why: why.to_string(),
        };
        let mut r = Reader(bytes);
        if r.take(4).ok_or_else(|| bad("empty"))? != MAGIC {
            return Err(bad("not a split proposal (bad magic)"));
        }
        let n = r.u32().ok_or_else(|| bad("no rank count"))?;
        // Bounded by the sender's block before anything of that size is allocated.
        if n as usize > place.ranks_of(proc).len() {
            return Err(bad(&format!("{n} ranks")));
        }
        let mut ranks = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let (rank, color, key) = match (r.u32(), r.i32(), r.i32()) {
                (Some(a), Some(c), Some(k)) => (a, c, k),
                _ => return Err(bad("cut short in its ranks")),
            };
            if rank >= place.ranks || place.owner(rank) != proc {
                return Err(ExchangeError::Foreign { proc, rank });
            }
            if color < NO_COLOR {
                return Err(bad(&format!("rank {rank}: color {color}")));
            }
            if ranks.iter().any(|&(q, _, _)| q == rank) {
                return Err(ExchangeError::Twice { rank });
            }
            ranks.push((rank, color, key));
        }
        let m = r.u32().ok_or_else(|| bad("no id count"))?;
        if m > n {
            return Err(bad(&format!("{m} ids for {n} ranks")));
        }
        let mut ids: Vec<(i32, CollId)> = Vec::with_capacity(m as usize);
        for _ in 0..m {
            let color = r.i32().ok_or_else(|| bad("cut short in its ids"))?;
            let raw: [u8; crate::abi::UNIQUE_ID_BYTES] = r
                .take(crate::abi::UNIQUE_ID_BYTES)
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| bad("cut short in its ids"))?;
            let id = CollId::decode(&crate::abi::UniqueId::from_bytes(&raw))
                .map_err(|e| bad(&e.to_string()))?;
            if color == NO_COLOR || ids.iter().any(|(c, _)| *c == color) {
                return Err(bad(&format!("an id for color {color}")));
            }
            if id.addr.is_none() {
                return Err(bad(&format!("color {color}'s id names no address")));
            }
            ids.push((color, id));
        }
        if !r.0.is_empty() {
            return Err(bad("trailing bytes"));
        }
        Ok(Proposal { ranks, ids })
    }
}

/// Little-endian fields from the front of a byte string.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = rest;
        Some(head)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
}

/// One child of a split.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Child {
    pub color: i32,
    /// Its members' parent ranks, in child-rank order.
    pub members: Vec<u32>,
    /// Its id: the one the process of its rank 0 proposed.
    pub id: CollId,
}

/// The children every process's proposal (in process order) makes, in ascending color
/// order.
pub fn plan(
    proposals: &[Proposal],
    place: Placement,
) -> std::result::Result<Vec<Child>, ExchangeError> {
    let mut entries: Vec<(u32, i32, i32)> = Vec::with_capacity(place.ranks as usize);
    for (proc, p) in (0u32..).zip(proposals) {
        if let Some(&(rank, _, _)) =
            (p.ranks.iter()).find(|e| e.0 >= place.ranks || place.owner(e.0) != proc)
        {
            return Err(ExchangeError::Foreign { proc, rank });
        }
        entries.extend_from_slice(&p.ranks);
    }
    entries.sort_unstable_by_key(|e| e.0);
    for (i, e) in entries.iter().enumerate() {
        if i > 0 && entries[i - 1].0 == e.0 {
            return Err(ExchangeError::Twice { rank: e.0 });
        }
    }
    if let Some(rank) = (0..place.ranks).find(|&r| entries.get(r as usize).map(|e| e.0) != Some(r))
    {
        return Err(ExchangeError::Missing { rank });
    }
    groups(&entries)
        .into_iter()
        .map(|g| {
            let members: Vec<u32> = g.iter().map(|&i| entries[i].0).collect();
            let color = entries[g[0]].1;
            let proc = place.owner(members[0]);
            let id = proposals
                .get(proc as usize)
                .and_then(|p| p.ids.iter().find(|(c, _)| *c == color))
                .map(|(_, id)| *id)
                .ok_or(ExchangeError::NoId { proc, color })?;
            Ok(Child { color, members, id })
        })
        .collect()
}

/// Each member's child (`None` for no color), or why it has none.
pub type Outcomes = Vec<Result<Option<Arc<Comm>>>>;

/// Child ids this process proposed, whose listeners go unless a child's rendezvous took
/// them (a listener is registered until rank 0's rendezvous takes it: [`bootstrap`]).
struct Proposed(Vec<[u8; 32]>);

impl Drop for Proposed {
    fn drop(&mut self) {
        for s in &self.0 {
            bootstrap::unlisten(s);
        }
    }
}

fn remote(what: impl std::fmt::Display) -> Error {
    Error::new(
        NcclResult::RemoteError,
        format!("ncclCommSplit across processes: {what}"),
    )
}

/// Forms the children of one split round of `clique`, a communicator spread over
/// processes (`entries`: its members' parts, in member order): the exchange over its mesh,
/// then each child with a member here (module docs). Blocks for up to the exchange's and
/// each child's rendezvous timeouts.
pub fn form(global: &Global, clique: &Clique, entries: &[Entry]) -> Result<Outcomes> {
    let mesh = clique
        .mesh()
        .ok_or_else(|| Error::internal("a split across processes of a clique with no mesh"))?;
    let place = Placement::new(clique.nranks, mesh.procs())
        .ok_or_else(|| Error::internal("a mesh of more processes than ranks"))?;
    let timeout = global.settings.gpu.timeout;
    let root = entries.iter().find_map(|e| e.root).ok_or_else(|| {
        Error::internal("a communicator spread over processes without rank 0's address")
    })?;
    let host_ip = global
        .settings
        .net_host
        .map_or_else(|| coll_executor::net::local_ip_toward(root), Ok)
        .map_err(|e| Error::system(format!("no route toward rank 0 at {root}: {e}")))?;
    let mut colors: Vec<i32> = entries
        .iter()
        .map(|e| e.color)
        .filter(|&c| c != NO_COLOR)
        .collect();
    colors.sort_unstable();
    colors.dedup();
    let mut proposed = Proposed(Vec::new());
    let mut ids = Vec::with_capacity(colors.len());
    for c in colors {
        let mut id = CollId::new(None, None).map_err(|e| Error::system(e.to_string()))?;
        id.addr = Some(bootstrap::listen(id.secret, host_ip)?);
        proposed.0.push(id.secret);
        ids.push((c, id));
    }
    let mine = Proposal {
        ranks: (clique.members.iter().zip(entries))
            .map(|(m, e)| (m.rank, e.color, e.key))
            .collect(),
        ids,
    };
    let all = mesh.barrier(&mine.encode(), timeout).map_err(|f| {
        remote(format!(
            "the exchange of colors and keys failed: {}",
            f.describe(Some(&place))
        ))
    })?;
    let proposals = (0u32..)
        .zip(&all)
        .map(|(p, b)| Proposal::decode(b, p, place))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(remote)?;
    let children = plan(&proposals, place).map_err(remote)?;
    let mut out: Outcomes = vec![Ok(None); entries.len()];
    for child in children {
        // (member here, its child rank)
        let here: Vec<(usize, u32)> = (0u32..)
            .zip(&child.members)
            .filter_map(|(cr, &pr)| clique.member_of(pr).map(|m| (m, cr)))
            .collect();
        if here.is_empty() {
            continue;
        }
        let n = child.members.len() as u32;
        let comms: Vec<Arc<Comm>> = here
            .iter()
            .map(|&(m, cr)| {
                let e = &entries[m];
                Arc::new(Comm::new(
                    cr,
                    n,
                    clique.members[m].device,
                    e.ctx,
                    e.config.clone(),
                    child.id,
                ))
            })
            .collect();
        let reals: Vec<Option<RealComm>> = here.iter().map(|&(m, _)| entries[m].real).collect();
        let r = crate::init::complete_child(global, &comms, &reals);
        if r.is_ok() {
            global.log.line(
                LogLevel::Info,
                &format!(
                    "split across processes: color {}, a communicator of {n} ranks (parent \
                     ranks {:?}), this process's child ranks {:?}",
                    child.color,
                    child.members,
                    here.iter().map(|h| h.1).collect::<Vec<_>>()
                ),
            );
        }
        for (&(m, _), c) in here.iter().zip(comms) {
            out[m] = r.clone().map(|()| Some(c));
        }
    }
    drop(proposed);
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::abi::Config;
    use crate::clique::Member;
    use crate::select::Selector;
    use crate::settings::Settings;
    use coll_compiler::topology::Topology;
    use coll_executor::net::mesh::{Mesh, loopback};
    use std::time::Duration;

    /// A process's state that never forwards, bound to loopback.
    pub(crate) fn global(timeout: Duration) -> &'static Global {
        let mut s = Settings {
            forward: false,
            net_host: Some([127, 0, 0, 1].into()),
            ..Settings::default()
        };
        s.gpu.timeout = timeout;
        Box::leak(Box::new(Global::with_settings(s)))
    }

    /// Rank `rank`'s clique of an `n`-rank communicator whose processes (one rank each)
    /// are linked by `mesh`.
    pub(crate) fn spread_clique(g: &Global, n: u32, rank: u32, mesh: Mesh) -> Arc<Clique> {
        let topo = Topology::parse(&format!("nvswitch:{n}")).expect("preset");
        Arc::new(
            Clique::new(
                n,
                vec![Member { rank, device: 0 }],
                Selector::new(topo, &g.settings, None).expect("selector"),
                g.settings.gpu.clone(),
                Arc::clone(&g.log),
                Some(Arc::new(mesh)),
                4,
            )
            .expect("a clique"),
        )
    }

    fn entry(color: i32, key: i32) -> Entry {
        Entry {
            color,
            key,
            real: None,
            config: Config::default(),
            ctx: 0,
            root: Some(([127, 0, 0, 1], 9).into()),
        }
    }

    /// Four processes, played by threads with loopback meshes, split with `how` (color,
    /// key per rank): each one's outcome.
    fn split4(how: [(i32, i32); 4]) -> Vec<Result<Option<Arc<Comm>>>> {
        let g = global(Duration::from_secs(20));
        let meshes = loopback(4, 4, Duration::from_secs(20)).expect("loopback meshes");
        let threads: Vec<_> = (0u32..)
            .zip(meshes)
            .map(|(r, mesh)| {
                let (color, key) = how[r as usize];
                std::thread::spawn(move || {
                    let clique = spread_clique(g, 4, r, mesh);
                    let mut out = form(g, &clique, &[entry(color, key)]).expect("the exchange");
                    assert_eq!(out.len(), 1);
                    out.remove(0)
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("a process"))
            .collect()
    }

    /// Each process's child meets its other members at the id the exchange chose and
    /// proves its new secret; the rendezvous then finds all of them in one process (these
    /// are threads), which coll cannot place: its error names the child ranks each held.
    #[test]
    fn processes_exchange_colors_and_meet_in_their_children() {
        let held = |o: &Result<Option<Arc<Comm>>>| match o {
            Err(e) => e.message.clone(),
            Ok(c) => panic!("formed {c:?}"),
        };
        // Parity: children {0, 2} and {1, 3}; rank 3 joins none.
        let out = split4([(0, 0), (1, 0), (0, 0), (NO_COLOR, 0)]);
        assert!(matches!(out[3], Ok(None)), "{:?}", out[3]);
        for (r, child_rank, size) in [(0, 0, "[0, 1]"), (2, 1, "[0, 1]")] {
            let e = held(&out[r]);
            assert!(
                e.contains(&format!("owns ranks {size} but initialised [{child_rank}]")),
                "rank {r}: {e}"
            );
        }
        // Rank 1 alone in color 1: a child of one rank, all here, served by coll.
        let alone = out[1].as_ref().expect("formed").as_ref().expect("a child");
        assert_eq!((alone.rank, alone.nranks), (0, 1));
        // One color, keys reversed: parent rank r is child rank 3 - r.
        let out = split4([(7, 3), (7, 2), (7, 1), (7, 0)]);
        for (r, o) in out.iter().enumerate() {
            let e = held(o);
            assert!(
                e.contains(&format!(
                    "owns ranks [0, 1, 2, 3] but initialised [{}]",
                    3 - r
                )),
                "rank {r}: {e}"
            );
        }
    }

    fn id(port: u16) -> CollId {
        CollId::new(None, Some(([10, 0, 0, 1], port).into())).expect("random bytes")
    }

    /// 4 ranks, one per process.
    const FOUR: Placement = Placement { ranks: 4, procs: 4 };

    #[test]
    fn proposals_round_trip() {
        let p = Proposal {
            ranks: vec![(2, 1, -5), (3, NO_COLOR, 0)],
            ids: vec![(1, id(7))],
        };
        let two = Placement { ranks: 4, procs: 2 };
        assert_eq!(Proposal::decode(&p.encode(), 1, two), Ok(p.clone()));
        let empty = Proposal {
            ranks: vec![],
            ids: vec![],
        };
        assert_eq!(Proposal::decode(&empty.encode(), 0, two), Ok(empty));
    }

    #[test]
    fn malformed_proposals_name_their_process_and_fault() {
        let two = Placement { ranks: 4, procs: 2 };
        let good = Proposal {
            ranks: vec![(2, 1, 0), (3, 1, 1)],
            ids: vec![(1, id(9))],
        }
        .encode();
        let e = |b: &[u8], proc: u32| {
            Proposal::decode(b, proc, two)
                .expect_err("refused")
                .to_string()
        };
        // Every cut of a good proposal is refused, none panics.
        for cut in 0..good.len() {
            let text = e(&good[..cut], 1);
            assert!(
                text.starts_with("process 1 sent a malformed"),
                "{cut}: {text}"
            );
        }
        assert_eq!(
            e(&[good.as_slice(), &[0]].concat(), 1),
            "process 1 sent a malformed split proposal: trailing bytes"
        );
        // Process 0 owns ranks 0 and 1 only.
        assert_eq!(
            e(&good, 0),
            "process 0 proposed rank 2, which it does not own"
        );
        let twice = Proposal {
            ranks: vec![(2, 1, 0), (2, 1, 1)],
            ids: vec![],
        };
        assert_eq!(e(&twice.encode(), 1), "rank 2 was proposed twice");
        let mut color = good.clone();
        color[12..16].copy_from_slice(&(-2i32).to_le_bytes());
        assert_eq!(
            e(&color, 1),
            "process 1 sent a malformed split proposal: rank 2: color -2"
        );
        // A count larger than the sender's block is refused before any allocation.
        let mut many = good.clone();
        many[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(e(&many, 1).ends_with(&format!("{} ranks", u32::MAX)));
        let mut foreign = good;
        foreign[0] = b'X';
        assert!(e(&foreign, 1).ends_with("(bad magic)"));
    }

    #[test]
    fn every_process_derives_the_children_from_the_proposals() {
        // Parity colors, keys as ranks: children {0, 2} and {1, 3}, ids from processes 0
        // and 1 (their rank 0s); process 2's id for color 0 goes unused.
        let (a, b, c) = (id(1), id(2), id(3));
        let parity = [
            Proposal {
                ranks: vec![(0, 0, 0)],
                ids: vec![(0, a)],
            },
            Proposal {
                ranks: vec![(1, 1, 1)],
                ids: vec![(1, b)],
            },
            Proposal {
                ranks: vec![(2, 0, 2)],
                ids: vec![(0, c)],
            },
            Proposal {
                ranks: vec![(3, 1, 3)],
                ids: vec![],
            },
        ];
        let children = plan(&parity, FOUR).expect("a plan");
        assert_eq!(
            children,
            vec![
                Child {
                    color: 0,
                    members: vec![0, 2],
                    id: a
                },
                Child {
                    color: 1,
                    members: vec![1, 3],
                    id: b
                },
            ]
        );
        // One color, keys reversed: parent rank 3 is child rank 0, so its process's id.
        let reversed: Vec<Proposal> = (0..4u32)
            .map(|r| Proposal {
                ranks: vec![(r, 5, 3 - r as i32)],
                ids: vec![(5, id(10 + r as u16))],
            })
            .collect();
        let children = plan(&reversed, FOUR).expect("a plan");
        assert_eq!(children.len(), 1);
        assert_eq!(children[0].members, vec![3, 2, 1, 0]);
        assert_eq!(children[0].id, reversed[3].ids[0].1);
        // No color: in no child.
        let mut none = parity.clone();
        none[3].ranks[0].1 = NO_COLOR;
        let children = plan(&none, FOUR).expect("a plan");
        assert_eq!(children[1].members, vec![1]);
    }

    #[test]
    fn incomplete_or_inconsistent_proposals_are_refused() {
        let one = |r: u32, ids: Vec<(i32, CollId)>| Proposal {
            ranks: vec![(r, 0, 0)],
            ids,
        };
        let x = id(1);
        // Rank 3's process sent nothing.
        let missing = [one(0, vec![(0, x)]), one(1, vec![]), one(2, vec![])];
        assert_eq!(
            plan(&missing, FOUR),
            Err(ExchangeError::Missing { rank: 3 })
        );
        // Rank 0's process proposed no id for its child.
        let no_id = [
            one(0, vec![]),
            one(1, vec![]),
            one(2, vec![]),
            one(3, vec![]),
        ];
        assert_eq!(
            plan(&no_id, FOUR),
            Err(ExchangeError::NoId { proc: 0, color: 0 })
        );
        let mut twice = [
            one(0, vec![(0, x)]),
            one(1, vec![]),
            one(2, vec![]),
            one(3, vec![]),
        ];
        twice[0].ranks.push((0, 0, 1));
        assert_eq!(plan(&twice, FOUR), Err(ExchangeError::Twice { rank: 0 }));
        // A rank in another process's proposal.
        let foreign = [
            one(0, vec![(0, x)]),
            one(2, vec![]),
            one(2, vec![]),
            one(3, vec![]),
        ];
        assert_eq!(
            plan(&foreign, FOUR),
            Err(ExchangeError::Foreign { proc: 1, rank: 2 })
        );
    }
}
