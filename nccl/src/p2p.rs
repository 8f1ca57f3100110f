//! Point-to-point calls (`ncclSend`/`ncclRecv`) served by coll: a group's sends and
//! receives on one communicator become an *edge set* (sender -> receiver), and a plan made
//! for exactly that set runs over the whole communicator like a collective.
//!
//! The plan is a `custom` collective generated as `.coll` text ([`source`]): one
//! `copy input[a][0] -> output[b][0]` per edge, its postcondition the same edges, compiled
//! and proven by coll's compiler for the communicator's topology and cached per edge set.
//! Data only moves, so any element type runs as a same-size stand-in.
//!
//! Every rank of the plan must know the same edge set, so coll serves point-to-point calls
//! only where that holds ([`decide`]):
//! - every rank of the communicator lives in this process and every one of them takes part
//!   in the calls of one `ncclGroupStart`/`End` on one thread (nccl-tests `-g`): the group
//!   names every edge;
//! - the communicator has 2 ranks (one per process, as `torch.distributed` runs them): each
//!   rank's own send and receive name the whole set.
//!
//! Anything else (more ranks spread over processes, ranks of one process driven from
//! several threads), more than one send or receive per rank in a group, edges of different
//! counts or element sizes, is forwarded with its reason. A rank's send to itself is a copy
//! inside the plan (or, spread over processes, a stream-ordered copy of its own). A rank's
//! send and receive on two streams run on the first call's, the other joined to it before
//! and after. Across processes each rank decides alone; the rules look only at what both
//! ranks' calls share (peers, counts, sizes), so they decide alike: a rank's send to itself
//! beside transfers to its peer, which the peer cannot see, is copied before the decision
//! and left out of it (`route::split_self`).
//!
//! Invariants: an [`Edges`] is sorted and free of duplicates, so equal sets are equal keys;
//! every edge's sender has exactly that send and its receiver exactly that receive among
//! the parts it was made from ([`edges_of`] refuses anything else); a rank that only sends
//! or only receives passes its one buffer as both of its buffers, which is safe because the
//! plan never touches the input of a rank that does not send nor the output of one that
//! does not receive, and each is NCCL's `count` elements, the size the plan reads or writes.

use coll_compiler::plan::ValidPlan;
use coll_compiler::topology::Topology;
use std::fmt::Write as _;

/// (sender, receiver) pairs, sorted, no duplicates.
pub type Edges = Vec<(u32, u32)>;

/// One rank's point-to-point part in a group: whom it sends to, whom it receives from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Part {
    pub send_to: Option<u32>,
    pub recv_from: Option<u32>,
}

/// The `.coll` text of the plan for `edges` on `n` ranks.
pub fn source(n: u32, edges: &[(u32, u32)]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "// The point-to-point calls of one group: one copy per send.\n\
         collective custom p2p(n) {{\n    chunks 1;\n    outofplace;\n    ranks n == {n};\n    \
         topology any;\n    ensure {{"
    );
    for (a, b) in edges {
        let _ = writeln!(s, "        expect output[{b}][0] == input[{a}][0];");
    }
    s.push_str("    }\n}\n\n");
    for (a, b) in edges {
        let _ = writeln!(s, "copy input[{a}][0] -> output[{b}][0];");
    }
    s
}

/// How logs and executor caches name the plan of `edges`.
pub fn label(edges: &[(u32, u32)]) -> String {
    let e: Vec<String> = edges.iter().map(|(a, b)| format!("{a}>{b}")).collect();
    format!("p2p[{}]", e.join(","))
}

/// The plan for `edges` on `topo` (its rank count), compiled and proven.
pub fn plan(topo: &Topology, edges: &[(u32, u32)]) -> Result<ValidPlan, String> {
    let n = topo.num_ranks() as u32;
    let text = source(n, edges);
    let file = format!("{}.coll", label(edges));
    let module =
        coll_lang::load(coll_lang::SourceFile::new(file, &text)).map_err(|d| d.render())?;
    let options = coll_executor::shipped::options_for("", &module.summary)?;
    coll_compiler::compile(&module, topo, &options)
        .map(|c| c.into_plan())
        .map_err(|d| d.render())
}

/// The edge set of `parts` ((rank, part) for ranks of an `n`-rank communicator): when
/// `whole`, the parts are every rank that takes part, and each send must meet its receive
/// among them; otherwise they are one rank's of a 2-rank communicator, whose peer is
/// trusted to call the other half (NCCL requires it).
pub fn edges_of(n: u32, parts: &[(u32, Part)], whole: bool) -> Result<Edges, String> {
    let part_of = |r: u32| parts.iter().find(|(q, _)| *q == r).map(|(_, p)| *p);
    let mut edges = Edges::new();
    for &(r, p) in parts {
        for peer in [p.send_to, p.recv_from].into_iter().flatten() {
            if peer >= n {
                return Err(format!("peer {peer} of a communicator of {n} ranks"));
            }
        }
        if let Some(to) = p.send_to {
            edges.push((r, to));
            if whole && part_of(to).and_then(|q| q.recv_from) != Some(r) {
                return Err(format!(
                    "rank {r} sends to rank {to}, which does not receive from it in this group"
                ));
            }
        }
        if let Some(from) = p.recv_from {
            if whole && part_of(from).and_then(|q| q.send_to) != Some(r) {
                return Err(format!(
                    "rank {r} receives from rank {from}, which does not send to it in this group"
                ));
            }
            if !whole {
                edges.push((from, r));
            }
        }
    }
    edges.sort_unstable();
    edges.dedup();
    Ok(edges)
}

/// Where a group's point-to-point calls on one communicator run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// On coll, with the plan of these edges.
    Serve(Edges),
    /// Only sends to self and receives from self on a rank whose peers are in other
    /// processes: a stream-ordered copy, no plan.
    LocalCopy,
    /// To the real NCCL, for this reason (logged once).
    Forward(String),
}

/// The shape of the communicator a group's point-to-point calls run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub nranks: u32,
    /// Its ranks in this process.
    pub local: u32,
}

/// One point-to-point call of a group, as far as the decision needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call {
    pub rank: u32,
    pub is_recv: bool,
    pub peer: u32,
    pub count: u64,
    /// Element size in bytes.
    pub esize: usize,
}

/// Whether coll serves `calls` (a group's point-to-point calls on the local ranks of one
/// communicator of `shape`; count-0 calls already dropped), and with which edges; the
/// module docs give the rules.
pub fn decide(shape: Shape, calls: &[Call]) -> Decision {
    let Some(first) = calls.first() else {
        return Decision::Forward("no point-to-point calls".into());
    };
    if calls.iter().any(|c| c.count != first.count) {
        return Decision::Forward(
            "coll serves a group's point-to-point calls when all have the same count".into(),
        );
    }
    if calls.iter().any(|c| c.esize != first.esize) {
        return Decision::Forward(
            "coll serves a group's point-to-point calls when all have the same element size".into(),
        );
    }
    let mut parts: Vec<(u32, Part)> = Vec::new();
    for c in calls {
        let i = match parts.iter().position(|(r, _)| *r == c.rank) {
            Some(i) => i,
            None => {
                parts.push((c.rank, Part::default()));
                parts.len() - 1
            }
        };
        let slot = if c.is_recv {
            &mut parts[i].1.recv_from
        } else {
            &mut parts[i].1.send_to
        };
        if slot.replace(c.peer).is_some() {
            return Decision::Forward(
                "coll serves at most one send and one receive per rank in a group".into(),
            );
        }
    }
    for &(r, p) in &parts {
        if (p.send_to == Some(r)) != (p.recv_from == Some(r)) {
            return Decision::Forward(format!(
                "rank {r}: a send to itself needs a receive from itself in the same group"
            ));
        }
    }
    let whole = shape.local == shape.nranks;
    if whole {
        if parts.len() as u32 != shape.nranks {
            return Decision::Forward(
                "coll serves point-to-point calls of a communicator whose ranks live in one \
                 process when every rank takes part in one group on one thread"
                    .into(),
            );
        }
    } else {
        let own = parts
            .iter()
            .all(|(r, p)| p.send_to.is_none_or(|t| t == *r) && p.recv_from.is_none_or(|f| f == *r));
        if own {
            return Decision::LocalCopy;
        }
        if shape.nranks != 2 {
            return Decision::Forward(format!(
                "coll serves point-to-point calls across processes only between 2 ranks (this \
                 communicator has {}): other ranks cannot know the whole set of transfers",
                shape.nranks
            ));
        }
    }
    match edges_of(shape.nranks, &parts, whole) {
        Ok(e) => Decision::Serve(e),
        Err(why) => Decision::Forward(why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coll_executor::cpu::{CpuExecutor, RunOptions};

    /// Runs the plan of `edges` on `n` ranks on the CPU executor at `count`: every rank's
    /// output.
    fn run(n: u32, edges: &[(u32, u32)], count: u64) -> Vec<Vec<f32>> {
        let topo = Topology::parse(&format!("nvswitch:{n}")).expect("preset");
        let plan = plan(&topo, edges).unwrap_or_else(|e| panic!("{e}\n{}", source(n, edges)));
        let exec = CpuExecutor::new(plan, 4);
        let inputs: Vec<Vec<f32>> = (0..n)
            .map(|r| (0..count).map(|j| (r * 1000) as f32 + j as f32).collect())
            .collect();
        let o = RunOptions {
            count,
            ..RunOptions::default()
        };
        exec.run(&inputs, &o).expect("runs")
    }

    fn input(r: u32, count: u64) -> Vec<f32> {
        (0..count).map(|j| (r * 1000) as f32 + j as f32).collect()
    }

    #[test]
    fn a_ring_shift_moves_each_rank_s_input_to_the_next() {
        for n in [2u32, 3, 4] {
            let edges: Edges = (0..n).map(|r| (r, (r + 1) % n)).collect();
            for count in [1u64, 7, 1000] {
                let out = run(n, &edges, count);
                for r in 0..n {
                    assert_eq!(
                        out[r as usize],
                        input((r + n - 1) % n, count),
                        "n {n} rank {r}"
                    );
                }
            }
        }
    }

    #[test]
    fn one_direction_and_self_copies_move_exactly_their_edges() {
        let out = run(2, &[(0, 1)], 5);
        assert_eq!(out[1], input(0, 5));
        // Rank 0 receives nothing: its output is left as it was (the executor's zeros).
        assert_eq!(out[0], vec![0.0; 5]);
        let out = run(3, &[(0, 0), (1, 2), (2, 1)], 3);
        assert_eq!(out[0], input(0, 3));
        assert_eq!(out[1], input(2, 3));
        assert_eq!(out[2], input(1, 3));
    }

    #[test]
    fn two_ranks_on_two_hosts_have_plans_too() {
        let topo = Topology::parse("cluster:2x1").expect("preset");
        for edges in [vec![(0, 1)], vec![(1, 0)], vec![(0, 1), (1, 0)]] {
            let plan = plan(&topo, &edges).unwrap_or_else(|e| panic!("{edges:?}: {e}"));
            let out = CpuExecutor::new(plan, 4)
                .run(
                    &[input(0, 9), input(1, 9)],
                    &RunOptions {
                        count: 9,
                        ..RunOptions::default()
                    },
                )
                .expect("runs");
            for (a, b) in edges {
                assert_eq!(out[b as usize], input(a, 9));
            }
        }
    }

    #[test]
    fn the_source_names_every_edge_and_the_label_the_set() {
        let s = source(2, &[(0, 1), (1, 0)]);
        assert!(s.contains("ranks n == 2;"), "{s}");
        assert!(s.contains("expect output[1][0] == input[0][0];"), "{s}");
        assert!(s.contains("copy input[1][0] -> output[0][0];"), "{s}");
        assert_eq!(label(&[(0, 1), (1, 0)]), "p2p[0>1,1>0]");
    }

    fn call(rank: u32, is_recv: bool, peer: u32) -> Call {
        Call {
            rank,
            is_recv,
            peer,
            count: 8,
            esize: 4,
        }
    }

    const LOCAL2: Shape = Shape {
        nranks: 2,
        local: 2,
    };
    const SPREAD2: Shape = Shape {
        nranks: 2,
        local: 1,
    };

    fn forwarded(d: Decision) -> String {
        match d {
            Decision::Forward(why) => why,
            other => panic!("served: {other:?}"),
        }
    }

    #[test]
    fn every_edge_set_shape_is_served_or_forwarded_with_its_reason() {
        // nccl-tests sendrecv -g 2: both ranks' send and receive in one group.
        let ring = [
            call(0, false, 1),
            call(0, true, 1),
            call(1, false, 0),
            call(1, true, 0),
        ];
        assert_eq!(decide(LOCAL2, &ring), Decision::Serve(vec![(0, 1), (1, 0)]));
        // torch send/recv, one process per rank: each names the whole set.
        assert_eq!(
            decide(SPREAD2, &[call(0, false, 1)]),
            Decision::Serve(vec![(0, 1)])
        );
        assert_eq!(
            decide(SPREAD2, &[call(1, true, 0)]),
            Decision::Serve(vec![(0, 1)])
        );
        assert_eq!(
            decide(SPREAD2, &[call(1, true, 0), call(1, false, 0)]),
            Decision::Serve(vec![(0, 1), (1, 0)])
        );
        // Send to self: a copy in the plan, or of its own across processes.
        assert_eq!(
            decide(
                LOCAL2,
                &[
                    call(0, false, 0),
                    call(0, true, 0),
                    call(1, false, 1),
                    call(1, true, 1)
                ]
            ),
            Decision::Serve(vec![(0, 0), (1, 1)])
        );
        assert_eq!(
            decide(SPREAD2, &[call(1, false, 1), call(1, true, 1)]),
            Decision::LocalCopy
        );
        assert!(
            forwarded(decide(SPREAD2, &[call(1, false, 1)]))
                .contains("a send to itself needs a receive from itself")
        );
        // A rank of a one-process communicator missing from the group.
        assert!(
            forwarded(decide(LOCAL2, &[call(0, false, 1)]))
                .contains("when every rank takes part in one group")
        );
        // A send without its receive.
        assert_eq!(
            forwarded(decide(LOCAL2, &[call(0, false, 1), call(1, false, 0)])),
            "rank 0 sends to rank 1, which does not receive from it in this group"
        );
        // Two sends of one rank.
        let four = Shape {
            nranks: 4,
            local: 4,
        };
        assert!(
            forwarded(decide(four, &[call(0, false, 1), call(0, false, 2)]))
                .contains("at most one send and one receive")
        );
        let mut odd = ring;
        odd[3].count = 9;
        assert!(forwarded(decide(LOCAL2, &odd)).contains("the same count"));
        let mut wide = ring;
        wide[0].esize = 2;
        assert!(forwarded(decide(LOCAL2, &wide)).contains("the same element size"));
        // More than 2 ranks over processes.
        let spread4 = Shape {
            nranks: 4,
            local: 1,
        };
        assert!(
            forwarded(decide(spread4, &[call(1, false, 2), call(1, true, 0)]))
                .contains("only between 2 ranks (this communicator has 4)")
        );
    }
}
