//! Routes between ranks.
//!
//! A route is a path from one GPU to another that never passes through a third GPU (GPUs
//! do not forward; everything else does: switches, CPUs, NICs, the network). Among those
//! paths the route has the highest bottleneck bandwidth, then the lowest total latency,
//! then the fewest links; remaining ties go to the path found first (lower device ids), so
//! routes are deterministic.
//!
//! How: a widest-path Dijkstra finds the best bottleneck `B` to each target; then a
//! latency Dijkstra over the links of bandwidth `>= B` finds the fastest of those paths.
//! Doing it in two passes is what makes the lexicographic choice exact (one pass over
//! (bandwidth, latency) labels is not: a wider prefix can lose to a faster one later).

use super::{Device, LinkKind, Topology};
use crate::ids::{DeviceId, LinkId, RankId};
use petgraph::graph::{EdgeIndex, NodeIndex};
use petgraph::visit::EdgeRef;
use serde::{Deserialize, Serialize};
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::fmt;

/// How a route crosses the machine (the most remote part wins: Net, then Pcie, then
/// Switch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RouteKind {
    /// Only NVLinks between the two GPUs and nothing between them: a direct link.
    Direct,
    /// Through an NVSwitch, over NVLink only.
    Switch,
    /// Through the host: PCIe links, PCIe switches or a CPU, but not the network.
    Pcie,
    /// Crosses the network (a NIC-to-switch link).
    Net,
}

impl RouteKind {
    /// `direct`, `switch`, `pcie`, `net`.
    pub fn name(self) -> &'static str {
        match self {
            RouteKind::Direct => "direct",
            RouteKind::Switch => "switch",
            RouteKind::Pcie => "pcie",
            RouteKind::Net => "net",
        }
    }
}

impl fmt::Display for RouteKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A path between two ranks' GPUs.
#[derive(Clone, Debug, PartialEq)]
pub struct Route {
    /// The links in order from the first GPU to the second.
    pub links: Vec<LinkId>,
    /// The devices in order, both GPUs included (`links.len() + 1` of them).
    pub devices: Vec<DeviceId>,
    pub kind: RouteKind,
    /// The smallest bandwidth along the path, GB/s per direction.
    pub bandwidth_gbs: f64,
    /// The sum of the links' latencies, µs.
    pub latency_us: f64,
}

pub(crate) fn route(t: &Topology, a: RankId, b: RankId) -> Option<Route> {
    let gpus = t.gpu_nodes();
    let (&src, &dst) = (gpus.get(a.index())?, gpus.get(b.index())?);
    if src == dst {
        return None;
    }
    let wide = widest(t, src, Some(dst));
    let bw = wide[dst.index()];
    if bw <= 0.0 {
        return None;
    }
    let pred = fastest(t, src, bw, Some(dst));
    build(t, src, dst, &pred)
}

pub(crate) fn routes_from(t: &Topology, a: RankId) -> Vec<Option<Route>> {
    let gpus = t.gpu_nodes();
    let mut out = vec![None; gpus.len()];
    let Some(&src) = gpus.get(a.index()) else {
        return out;
    };
    let wide = widest(t, src, None);
    let mut levels: Vec<f64> = gpus
        .iter()
        .filter(|&&g| g != src)
        .map(|g| wide[g.index()])
        .filter(|&bw| bw > 0.0)
        .collect();
    levels.sort_by(f64::total_cmp);
    levels.dedup();
    for bw in levels {
        let pred = fastest(t, src, bw, None);
        for (r, &g) in gpus.iter().enumerate() {
            if g != src && wide[g.index()] == bw {
                out[r] = build(t, src, g, &pred);
            }
        }
    }
    out
}

/// Whether paths may continue through device `n` (a GPU other than the source may only
/// end a path).
fn forwards(t: &Topology, src: NodeIndex, n: NodeIndex) -> bool {
    n == src || !t.graph().node_weight(n).is_some_and(Device::is_gpu)
}

/// Whether a search for the route to `stop_at` alone may skip device `n`: a GPU that is
/// neither end can only end a path to itself, so its label is never read (on a switch of
/// n GPUs this keeps a route from queueing all of them: n^2 heap operations for every
/// rank's route to its ring neighbour).
fn dead_end(t: &Topology, src: NodeIndex, n: NodeIndex, stop_at: Option<NodeIndex>) -> bool {
    stop_at.is_some_and(|dst| n != dst && !forwards(t, src, n))
}

fn other_end(e: petgraph::graph::EdgeReference<'_, super::Link>, n: NodeIndex) -> NodeIndex {
    if e.source() == n {
        e.target()
    } else {
        e.source()
    }
}

/// The best bottleneck bandwidth from `src` to every device (0 where unreachable).
fn widest(t: &Topology, src: NodeIndex, stop_at: Option<NodeIndex>) -> Vec<f64> {
    let g = t.graph();
    let mut best = vec![0.0f64; g.node_count()];
    let mut done = vec![false; g.node_count()];
    best[src.index()] = f64::INFINITY;
    let mut heap = BinaryHeap::new();
    heap.push((Wide(f64::INFINITY), Reverse(src.index())));
    while let Some((Wide(bw), Reverse(i))) = heap.pop() {
        if done[i] {
            continue;
        }
        done[i] = true;
        let n = NodeIndex::new(i);
        if Some(n) == stop_at {
            break;
        }
        if !forwards(t, src, n) {
            continue;
        }
        for e in g.edges(n) {
            let m = other_end(e, n);
            if dead_end(t, src, m, stop_at) {
                continue;
            }
            let through = bw.min(e.weight().bandwidth_gbs);
            if !done[m.index()] && through > best[m.index()] {
                best[m.index()] = through;
                heap.push((Wide(through), Reverse(m.index())));
            }
        }
    }
    best
}

/// Latency Dijkstra from `src` over links of bandwidth `>= min_bw`; returns each device's
/// predecessor link on its fastest path (then fewest links).
fn fastest(
    t: &Topology,
    src: NodeIndex,
    min_bw: f64,
    stop_at: Option<NodeIndex>,
) -> Vec<Option<EdgeIndex>> {
    let g = t.graph();
    let mut dist = vec![(f64::INFINITY, u32::MAX); g.node_count()];
    let mut pred = vec![None; g.node_count()];
    let mut done = vec![false; g.node_count()];
    dist[src.index()] = (0.0, 0);
    let mut heap = BinaryHeap::new();
    heap.push(Reverse((Fast(0.0, 0), src.index())));
    while let Some(Reverse((Fast(lat, hops), i))) = heap.pop() {
        if done[i] {
            continue;
        }
        done[i] = true;
        let n = NodeIndex::new(i);
        if Some(n) == stop_at {
            break;
        }
        if !forwards(t, src, n) {
            continue;
        }
        for e in g.edges(n) {
            let w = e.weight();
            if w.bandwidth_gbs < min_bw {
                continue;
            }
            let m = other_end(e, n);
            if dead_end(t, src, m, stop_at) {
                continue;
            }
            let cand = (lat + w.latency_us, hops + 1);
            if !done[m.index()] && Fast(cand.0, cand.1) < Fast(dist[m.index()].0, dist[m.index()].1)
            {
                dist[m.index()] = cand;
                pred[m.index()] = Some(e.id());
                heap.push(Reverse((Fast(cand.0, cand.1), m.index())));
            }
        }
    }
    pred
}

fn build(
    t: &Topology,
    src: NodeIndex,
    dst: NodeIndex,
    pred: &[Option<EdgeIndex>],
) -> Option<Route> {
    let g = t.graph();
    let mut links = Vec::new();
    let mut devices = vec![DeviceId::new(dst.index())];
    let mut at = dst;
    while at != src {
        let e = (*pred.get(at.index())?)?;
        let (x, y) = g.edge_endpoints(e)?;
        at = if x == at { y } else { x };
        links.push(e);
        devices.push(DeviceId::new(at.index()));
        if links.len() > g.node_count() {
            return None; // a cycle in the predecessors cannot happen; never loop on one
        }
    }
    links.reverse();
    devices.reverse();
    let mut bandwidth_gbs = f64::INFINITY;
    let mut latency_us = 0.0;
    let mut kinds = Vec::with_capacity(links.len());
    for &e in &links {
        let w = g.edge_weight(e)?;
        bandwidth_gbs = bandwidth_gbs.min(w.bandwidth_gbs);
        latency_us += w.latency_us;
        kinds.push(w.kind);
    }
    let inner = devices
        .get(1..devices.len().saturating_sub(1))
        .unwrap_or_default();
    let inner_device = |f: fn(&Device) -> bool| {
        inner
            .iter()
            .any(|d| g.node_weight(NodeIndex::new(d.index())).is_some_and(f))
    };
    let kind = if kinds.contains(&LinkKind::Net) || inner_device(|d| *d == Device::NetSwitch) {
        RouteKind::Net
    } else if kinds.contains(&LinkKind::Pcie)
        || inner_device(|d| {
            matches!(
                d,
                Device::Cpu { .. } | Device::PciSwitch { .. } | Device::Nic { .. }
            )
        })
    {
        RouteKind::Pcie
    } else if kinds.contains(&LinkKind::NvSwitch)
        || inner_device(|d| matches!(d, Device::NvSwitch { .. }))
    {
        RouteKind::Switch
    } else {
        RouteKind::Direct
    };
    Some(Route {
        links: links.into_iter().map(|e| LinkId::new(e.index())).collect(),
        devices,
        kind,
        bandwidth_gbs,
        latency_us,
    })
}

/// A bandwidth ordered by `total_cmp` (values are finite or +inf, never NaN).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Wide(f64);

impl Eq for Wide {}

impl PartialOrd for Wide {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Wide {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// (latency, links) ordered lexicographically, latency by `total_cmp`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Fast(f64, u32);

impl Eq for Fast {}

impl PartialOrd for Fast {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Fast {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0).then(self.1.cmp(&other.1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Topology;

    fn r(i: usize) -> RankId {
        RankId::new(i)
    }

    /// A wide-but-slow path and a narrow-but-fast one: bandwidth wins, then latency.
    #[test]
    fn bandwidth_first_then_latency() {
        let json = r#"{
          "devices": [
            {"id": "g0", "kind": "gpu"}, {"id": "g1", "kind": "gpu"},
            {"id": "s1", "kind": "pci_switch"}, {"id": "s2", "kind": "pci_switch"},
            {"id": "s3", "kind": "pci_switch"}
          ],
          "links": [
            {"between": ["g0", "s1"], "kind": "pcie", "bandwidth_gbs": 10, "latency_us": 0.1},
            {"between": ["s1", "g1"], "kind": "pcie", "bandwidth_gbs": 10, "latency_us": 0.1},
            {"between": ["g0", "s2"], "kind": "pcie", "bandwidth_gbs": 40, "latency_us": 3},
            {"between": ["s2", "g1"], "kind": "pcie", "bandwidth_gbs": 40, "latency_us": 3},
            {"between": ["g0", "s3"], "kind": "pcie", "bandwidth_gbs": 40, "latency_us": 1},
            {"between": ["s3", "s2"], "kind": "pcie", "bandwidth_gbs": 50, "latency_us": 1}
          ]
        }"#;
        let t = Topology::from_json(json).expect("valid");
        let route = t.route(r(0), r(1)).expect("route");
        assert_eq!(route.bandwidth_gbs, 40.0);
        // g0-s2-g1 (6 µs) vs g0-s3-s2-g1 (5 µs): the faster of the wide ones.
        assert_eq!(route.links.len(), 3);
        assert!((route.latency_us - 5.0).abs() < 1e-9);
        assert_eq!(route.kind, RouteKind::Pcie);
        let back = t.route(r(1), r(0)).expect("route back");
        assert_eq!(back.bandwidth_gbs, 40.0);
        assert_eq!(
            back.links.iter().rev().copied().collect::<Vec<_>>(),
            route.links
        );
    }

    /// The lexicographic choice needs two passes: here the widest prefix to `s` is not
    /// the one that leads to the fastest widest path.
    #[test]
    fn two_passes_are_exact() {
        let json = r#"{
          "devices": [
            {"id": "g0", "kind": "gpu"}, {"id": "g1", "kind": "gpu"},
            {"id": "a", "kind": "pci_switch"}, {"id": "b", "kind": "pci_switch"},
            {"id": "s", "kind": "pci_switch"}
          ],
          "links": [
            {"between": ["g0", "a"], "kind": "pcie", "bandwidth_gbs": 100, "latency_us": 10},
            {"between": ["a", "s"], "kind": "pcie", "bandwidth_gbs": 100, "latency_us": 0},
            {"between": ["g0", "b"], "kind": "pcie", "bandwidth_gbs": 50, "latency_us": 1},
            {"between": ["b", "s"], "kind": "pcie", "bandwidth_gbs": 50, "latency_us": 0},
            {"between": ["s", "g1"], "kind": "pcie", "bandwidth_gbs": 50, "latency_us": 1}
          ]
        }"#;
        let t = Topology::from_json(json).expect("valid");
        let route = t.route(r(0), r(1)).expect("route");
        assert_eq!(route.bandwidth_gbs, 50.0);
        assert!((route.latency_us - 2.0).abs() < 1e-9);
        assert_eq!(t.routes_from(r(0))[1].as_ref(), Some(&route));
    }

    #[test]
    fn never_through_a_third_gpu() {
        let t = Topology::preset("ring:4").expect("preset");
        assert!(t.route(r(0), r(2)).is_none());
        assert!(t.route(r(1), r(3)).is_none());
        let all = t.routes_from(r(0));
        assert_eq!(all.len(), 4);
        assert!(all[0].is_none() && all[2].is_none());
        assert!(all[1].is_some() && all[3].is_some());
    }

    #[test]
    fn routes_from_matches_route() {
        for spec in ["cluster:2x4", "hgx-h200:8", "ring:6", "nvswitch:3"] {
            let t = Topology::preset(spec).expect("preset");
            for a in 0..t.num_ranks() {
                let all = t.routes_from(r(a));
                for (b, got) in all.iter().enumerate() {
                    assert_eq!(
                        got.as_ref(),
                        t.route(r(a), r(b)).as_ref(),
                        "{spec} {a}->{b}"
                    );
                }
            }
        }
    }

    #[test]
    fn route_devices_and_links_agree() {
        let t = Topology::preset("cluster:2x2").expect("preset");
        let route = t.route(r(1), r(2)).expect("route");
        assert_eq!(route.devices.len(), route.links.len() + 1);
        assert_eq!(route.devices.first().copied(), t.gpu(r(1)));
        assert_eq!(route.devices.last().copied(), t.gpu(r(2)));
        for (i, &l) in route.links.iter().enumerate() {
            let (a, b, _) = t.link(l).expect("link");
            let (x, y) = (route.devices[i], route.devices[i + 1]);
            assert!((a, b) == (x, y) || (a, b) == (y, x));
        }
    }
}
