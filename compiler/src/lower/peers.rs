//! Who each rank sends to, counted before emission: the op counts emission reserves for
//! and the routes it needs, found one by one for the few peers most ranks have.

use crate::elaborate::Elaborated;
use crate::plan::Via;
use crate::topology::Topology;

/// The ranks one rank sends to, while they are few.
#[derive(Clone, Debug)]
pub(super) enum Peers {
    Few(smallvec::SmallVec<[u32; FEW_PEERS]>),
    Many,
}

/// Peers past which a rank's routes are found all at once ([`Topology::routes_from`], which
/// builds a route to every rank) rather than one by one ([`Topology::route`]).
const FEW_PEERS: usize = 4;

impl Peers {
    fn add(&mut self, q: u32) {
        if let Peers::Few(list) = self {
            if list.contains(&q) {
                return;
            }
            if list.len() == FEW_PEERS {
                *self = Peers::Many;
            } else {
                list.push(q);
            }
        }
    }
}

/// For each rank, at most how many ops emission gives it, and which ranks it sends to:
/// one pass over the program's ops, ranges of receivers counted as differences, so a
/// one-to-many op costs O(1) here. (A rank's own chunk of a one-to-many op is counted as
/// an op although emission may skip it.)
pub(super) fn expected_ops(e: &Elaborated, pieces: u64) -> (Vec<usize>, Vec<Peers>) {
    let n = e.n as usize;
    // Differences: `ops[r]` adds to ranks r and up.
    let mut ops = vec![0i64; n + 1];
    let mut peers = vec![Peers::Few(smallvec::SmallVec::new()); n];
    // Ranks are inside 0..n (an invariant of `Elaborated`); the bounds checks keep a
    // violation harmless.
    let add = |d: &mut [i64], start: u32, end: u32, v: i64| {
        if start < end && (end as usize) < d.len() {
            d[start as usize] += v;
            d[end as usize] -= v;
        }
    };
    for op in &e.ops {
        let pipeline = if op.pipeline > 0 {
            u64::from(op.pipeline)
        } else {
            u64::from(e.pipeline.max(1))
        };
        // Emission units: per instance and pipeline piece, one per chunk when cut.
        let units =
            u64::from(e.instances) * pipeline * if pieces == 1 { 1 } else { u64::from(op.count) };
        let units = i64::try_from(units).unwrap_or(i64::MAX / 4);
        let (sr, dr) = (op.src.ranks, op.dst.ranks);
        if sr.is_multi() {
            // Many-to-one: every other source sends to the destination.
            add(&mut ops, sr.start, sr.end, units);
            add(
                &mut ops,
                dr.start,
                dr.start + 1,
                units * i64::from(sr.len()),
            );
            for s in sr.start..sr.end {
                if s != dr.start
                    && let Some(p) = peers.get_mut(s as usize)
                {
                    p.add(dr.start);
                }
            }
        } else {
            add(&mut ops, dr.start, dr.end, units);
            add(
                &mut ops,
                sr.start,
                sr.start + 1,
                units * i64::from(dr.len()),
            );
            if let Some(p) = peers.get_mut(sr.start as usize) {
                if dr.is_multi() {
                    *p = Peers::Many;
                } else if dr.start != sr.start {
                    p.add(dr.start);
                }
            }
        }
    }
    let mut o = 0i64;
    let mut expected = Vec::with_capacity(n);
    for d in &ops[..n] {
        o += d;
        expected.push(usize::try_from(o).unwrap_or(0));
    }
    (expected, peers)
}

/// The kind of channel the topology's best route from rank `from` takes to each of
/// `peers` (to every rank for [`Peers::Many`]); `None` for the others.
pub(super) fn routes_from(topo: &Topology, from: u32, peers: &Peers) -> Vec<Option<Via>> {
    let via = |r: crate::topology::Route| Via::from(r.kind);
    let from_id = crate::ids::RankId(from);
    match peers {
        Peers::Many => topo
            .routes_from(from_id)
            .into_iter()
            .map(|r| r.map(via))
            .collect(),
        Peers::Few(list) => {
            let mut out = vec![None; topo.num_ranks()];
            for &q in list {
                if let Some(slot) = out.get_mut(q as usize) {
                    *slot = topo.route(from_id, crate::ids::RankId(q)).map(via);
                }
            }
            out
        }
    }
}
