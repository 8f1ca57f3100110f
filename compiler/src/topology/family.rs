//! Structural classification: which [`Family`] words of a `.coll` header a topology
//! satisfies. Each test looks only at the graph, so presets, files and imports are
//! classified alike (`cluster:1x8` is as much `hgx` as `hgx-h200:8`).

use super::{Device, Family, LinkKind, Topology};
use petgraph::graph::NodeIndex;
use petgraph::visit::EdgeRef;

pub(super) fn families(t: &Topology) -> Vec<Family> {
    let mut out = Vec::new();
    let nvswitch = is_nvswitch(t);
    if nvswitch {
        out.push(Family::NvSwitch);
    }
    if nvswitch && every_gpu_has_nic(t) {
        out.push(Family::Hgx);
    }
    if has_network(t) {
        out.push(Family::Cluster);
    }
    if is_ring(t) {
        out.push(Family::Ring);
    }
    out
}

fn neighbours(t: &Topology, n: NodeIndex) -> impl Iterator<Item = (NodeIndex, &super::Link)> {
    t.graph().edges(n).map(move |e| {
        let m = if e.source() == n {
            e.target()
        } else {
            e.source()
        };
        (m, e.weight())
    })
}

fn is_nvlink(kind: LinkKind) -> bool {
    matches!(kind, LinkKind::NvLink | LinkKind::NvSwitch)
}

/// Every GPU has a link to an NVSwitch of its own node.
pub(super) fn has_switch(t: &Topology) -> bool {
    let g = t.graph();
    t.gpu_nodes().iter().all(|&gpu| {
        let node = g.node_weight(gpu).and_then(Device::node);
        neighbours(t, gpu).any(|(m, _)| {
            matches!(g.node_weight(m), Some(Device::NvSwitch { node: s }) if Some(*s) == node)
        })
    })
}

/// One node, and every pair of GPUs is joined by a direct NVLink or through NVSwitches
/// (over NVLink links only). A single GPU counts when it sits on an NVSwitch.
fn is_nvswitch(t: &Topology) -> bool {
    let g = t.graph();
    let gpus = t.gpu_nodes();
    if t.nodes() != 1 {
        return false;
    }
    // NVSwitch fabrics: components of NVSwitch devices joined by NVLink-kind links.
    let mut fabric = vec![usize::MAX; g.node_count()];
    let mut fabrics = 0;
    for start in g.node_indices() {
        if fabric[start.index()] != usize::MAX
            || !matches!(g.node_weight(start), Some(Device::NvSwitch { .. }))
        {
            continue;
        }
        let mut stack = vec![start];
        fabric[start.index()] = fabrics;
        while let Some(n) = stack.pop() {
            for (m, l) in neighbours(t, n) {
                if is_nvlink(l.kind)
                    && fabric[m.index()] == usize::MAX
                    && matches!(g.node_weight(m), Some(Device::NvSwitch { .. }))
                {
                    fabric[m.index()] = fabrics;
                    stack.push(m);
                }
            }
        }
        fabrics += 1;
    }
    // Each GPU's fabrics, and the GPUs on each fabric.
    let mut gpu_fabrics: Vec<Vec<usize>> = vec![Vec::new(); gpus.len()];
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); fabrics];
    for (r, &gpu) in gpus.iter().enumerate() {
        for (m, l) in neighbours(t, gpu) {
            let f = fabric[m.index()];
            if is_nvlink(l.kind) && f != usize::MAX && !gpu_fabrics[r].contains(&f) {
                gpu_fabrics[r].push(f);
                members[f].push(r);
            }
        }
    }
    if gpus.len() == 1 {
        return !gpu_fabrics[0].is_empty();
    }
    // Fast path: one fabric reaches every GPU.
    if members.iter().any(|m| m.len() == gpus.len()) {
        return true;
    }
    let rank_of = |n: NodeIndex| match g.node_weight(n) {
        Some(Device::Gpu { rank, .. }) => Some(rank.index()),
        _ => None,
    };
    // Otherwise count, for each GPU, the GPUs it reaches (stamped to avoid double counts).
    let mut stamp = vec![usize::MAX; gpus.len()];
    for (r, &gpu) in gpus.iter().enumerate() {
        stamp[r] = r;
        let mut reached = 0;
        let mut mark = |q: usize, reached: &mut usize| {
            if stamp[q] != r {
                stamp[q] = r;
                *reached += 1;
            }
        };
        for &f in &gpu_fabrics[r] {
            for &q in &members[f] {
                mark(q, &mut reached);
            }
        }
        for (m, l) in neighbours(t, gpu) {
            if l.kind == LinkKind::NvLink
                && let Some(q) = rank_of(m)
            {
                mark(q, &mut reached);
            }
        }
        if reached != gpus.len() - 1 {
            return false;
        }
    }
    true
}

/// Every GPU reaches a NIC over PCIe through PCIe switches only (no CPU, no other GPU).
fn every_gpu_has_nic(t: &Topology) -> bool {
    let g = t.graph();
    // Components of PCIe switches and NICs joined by PCIe links; which hold a NIC.
    let mut comp = vec![usize::MAX; g.node_count()];
    let mut has_nic = Vec::new();
    for start in g.node_indices() {
        if comp[start.index()] != usize::MAX || !pcie_side(g.node_weight(start)) {
            continue;
        }
        let id = has_nic.len();
        let mut nic = false;
        let mut stack = vec![start];
        comp[start.index()] = id;
        while let Some(n) = stack.pop() {
            nic |= matches!(g.node_weight(n), Some(Device::Nic { .. }));
            for (m, l) in neighbours(t, n) {
                if l.kind == LinkKind::Pcie
                    && comp[m.index()] == usize::MAX
                    && pcie_side(g.node_weight(m))
                {
                    comp[m.index()] = id;
                    stack.push(m);
                }
            }
        }
        has_nic.push(nic);
    }
    t.gpu_nodes().iter().all(|&gpu| {
        neighbours(t, gpu).any(|(m, l)| {
            l.kind == LinkKind::Pcie && comp[m.index()] != usize::MAX && has_nic[comp[m.index()]]
        })
    })
}

fn pcie_side(d: Option<&Device>) -> bool {
    matches!(d, Some(Device::PciSwitch { .. } | Device::Nic { .. }))
}

/// A network switch with at least one NIC on it.
fn has_network(t: &Topology) -> bool {
    let g = t.graph();
    g.node_indices().any(|n| {
        matches!(g.node_weight(n), Some(Device::NetSwitch))
            && neighbours(t, n).any(|(m, _)| matches!(g.node_weight(m), Some(Device::Nic { .. })))
    })
}

/// `n >= 2` GPUs, no NVSwitch links, and each GPU's NVLink peers are exactly its rank
/// neighbours (`r - 1` and `r + 1` mod n; for `n = 2` the other GPU).
fn is_ring(t: &Topology) -> bool {
    let g = t.graph();
    let gpus = t.gpu_nodes();
    let n = gpus.len();
    if n < 2 {
        return false;
    }
    for (r, &gpu) in gpus.iter().enumerate() {
        let mut peers = Vec::new();
        for (m, l) in neighbours(t, gpu) {
            match l.kind {
                LinkKind::NvSwitch => return false,
                LinkKind::NvLink => match g.node_weight(m) {
                    Some(Device::Gpu { rank, .. }) => {
                        if !peers.contains(&rank.index()) {
                            peers.push(rank.index());
                        }
                    }
                    // NVLink to a CPU or a switch is not a ring.
                    _ => return false,
                },
                LinkKind::Pcie | LinkKind::Net => {}
            }
        }
        peers.sort_unstable();
        let mut want = vec![(r + 1) % n, (r + n - 1) % n];
        want.sort_unstable();
        want.dedup();
        if peers != want {
            return false;
        }
    }
    true
}
