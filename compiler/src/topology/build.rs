//! The one way to make a [`Topology`]: add devices and links, then [`Builder::finish`]
//! checks the invariants of the module docs and numbers the ranks.

use super::{Device, Link, MAX_DEVICES, MAX_LINKS, MAX_RANKS, Topology, TopologyError};
use crate::ids::RankId;
use petgraph::graph::{EdgeIndex, NodeIndex, UnGraph};

#[derive(Debug, Default)]
pub(crate) struct Builder {
    graph: UnGraph<Device, Link>,
    /// GPUs in the order they were added, with the rank they asked for.
    gpus: Vec<(NodeIndex, Option<u32>)>,
}

impl Builder {
    pub(crate) fn new() -> Builder {
        Builder::default()
    }

    /// Adds a device other than a GPU.
    pub(crate) fn add(&mut self, device: Device) -> Result<NodeIndex, TopologyError> {
        if self.graph.node_count() >= MAX_DEVICES {
            return Err(TopologyError::TooLarge {
                what: "devices",
                count: self.graph.node_count() as u64 + 1,
                limit: MAX_DEVICES as u64,
            });
        }
        Ok(self.graph.add_node(device))
    }

    /// Adds a GPU of `node`; `rank` is the rank it asks for (all GPUs give one or none).
    pub(crate) fn add_gpu(
        &mut self,
        node: u32,
        rank: Option<u32>,
        name: String,
    ) -> Result<NodeIndex, TopologyError> {
        if self.gpus.len() >= MAX_RANKS {
            return Err(TopologyError::TooLarge {
                what: "GPUs",
                count: self.gpus.len() as u64 + 1,
                limit: MAX_RANKS as u64,
            });
        }
        // Rank and local index are placeholders until `finish` numbers the GPUs.
        let n = self.add(Device::Gpu {
            rank: RankId(0),
            node,
            local: 0,
            name,
        })?;
        self.gpus.push((n, rank));
        Ok(n)
    }

    /// Joins two devices. The link's figures must be sound.
    pub(crate) fn link(
        &mut self,
        a: NodeIndex,
        b: NodeIndex,
        link: Link,
    ) -> Result<EdgeIndex, TopologyError> {
        // GPUs have no rank yet: name them by name.
        let describe = |g: &UnGraph<Device, Link>, n: NodeIndex| match g.node_weight(n) {
            Some(Device::Gpu { name, node, .. }) => format!("GPU \"{name}\" (node {node})"),
            Some(d) => d.to_string(),
            None => format!("device {}", n.index()),
        };
        let name = || {
            format!(
                "{} - {}",
                describe(&self.graph, a),
                describe(&self.graph, b)
            )
        };
        if a.index() >= self.graph.node_count() || b.index() >= self.graph.node_count() {
            return Err(TopologyError::BadLink {
                link: name(),
                reason: "an end is not a device".into(),
            });
        }
        if a == b {
            return Err(TopologyError::BadLink {
                link: name(),
                reason: "both ends are the same device".into(),
            });
        }
        if let Some(reason) = link_problem(&link) {
            return Err(TopologyError::BadLink {
                link: name(),
                reason,
            });
        }
        if self.graph.edge_count() >= MAX_LINKS {
            return Err(TopologyError::TooLarge {
                what: "links",
                count: self.graph.edge_count() as u64 + 1,
                limit: MAX_LINKS as u64,
            });
        }
        Ok(self.graph.add_edge(a, b, link))
    }

    /// Checks the invariants, numbers ranks node-major and returns the topology.
    pub(crate) fn finish(mut self, name: String) -> Result<Topology, TopologyError> {
        let n = self.gpus.len();
        if n == 0 {
            return Err(TopologyError::NoGpus);
        }
        let node_of = |g: &UnGraph<Device, Link>, i: NodeIndex| match g.node_weight(i) {
            Some(Device::Gpu { node, .. }) => *node as usize,
            _ => 0,
        };
        let gpu_name = |g: &UnGraph<Device, Link>, i: NodeIndex| match g.node_weight(i) {
            Some(Device::Gpu { name, .. }) => name.clone(),
            _ => String::new(),
        };

        // Nodes: 0..N-1, each with the same number of GPUs.
        let max_node = self
            .gpus
            .iter()
            .map(|&(i, _)| node_of(&self.graph, i))
            .max()
            .unwrap_or(0);
        if max_node >= n {
            return Err(TopologyError::BadNodes(format!(
                "node ids must be 0..N-1 without gaps, but a GPU is on node {max_node} and there are only {n} GPUs"
            )));
        }
        let mut counts = vec![0usize; max_node + 1];
        for &(i, _) in &self.gpus {
            counts[node_of(&self.graph, i)] += 1;
        }
        if let Some(empty) = counts.iter().position(|&c| c == 0) {
            return Err(TopologyError::BadNodes(format!(
                "node ids must be 0..{} without gaps, but node {empty} has no GPU",
                max_node + 1
            )));
        }
        let nodes = counts.len();
        let per_node = counts[0];
        if let Some(bad) = counts.iter().position(|&c| c != per_node) {
            return Err(TopologyError::Irregular {
                node: bad,
                count: counts[bad],
                first_node: 0,
                expected: per_node,
            });
        }
        for d in self.graph.node_weights() {
            if let Some(node) = d.node()
                && !d.is_gpu()
                && node as usize >= nodes
            {
                let what = match d {
                    Device::Nic { name, .. } => format!("NIC \"{name}\""),
                    _ => format!("a device of kind {}", d.kind_name()),
                };
                let have = if nodes == 1 {
                    "node 0".to_string()
                } else {
                    format!("nodes 0 to {}", nodes - 1)
                };
                return Err(TopologyError::BadNodes(format!(
                    "{what} is on node {node}, which has no GPU (GPUs are on {have})"
                )));
            }
        }

        // Ranks: all given or none; given ranks must be 0..n-1 once each and node-major.
        let given = self.gpus.iter().filter(|(_, r)| r.is_some()).count();
        let mut by_rank: Vec<Option<NodeIndex>> = vec![None; n];
        if given == 0 {
            let mut order: Vec<NodeIndex> = self.gpus.iter().map(|&(i, _)| i).collect();
            // Stable: order of appearance within a node.
            order.sort_by_key(|&i| node_of(&self.graph, i));
            for (r, i) in order.into_iter().enumerate() {
                by_rank[r] = Some(i);
            }
        } else if given < n {
            let missing = self
                .gpus
                .iter()
                .find(|(_, r)| r.is_none())
                .map(|&(i, _)| gpu_name(&self.graph, i))
                .unwrap_or_default();
            return Err(TopologyError::BadRanks(format!(
                "either every GPU gives its rank or none does; GPU \"{missing}\" gives none"
            )));
        } else {
            for &(i, r) in &self.gpus {
                let r = r.unwrap_or(0) as usize;
                if r >= n {
                    return Err(TopologyError::BadRanks(format!(
                        "GPU \"{}\" has rank {r}, but there are {n} GPUs, so ranks are 0..{}",
                        gpu_name(&self.graph, i),
                        n - 1
                    )));
                }
                if let Some(prev) = by_rank[r] {
                    return Err(TopologyError::BadRanks(format!(
                        "rank {r} is given to both GPU \"{}\" and GPU \"{}\"",
                        gpu_name(&self.graph, prev),
                        gpu_name(&self.graph, i)
                    )));
                }
                by_rank[r] = Some(i);
                let node = node_of(&self.graph, i);
                if r / per_node != node {
                    return Err(TopologyError::BadRanks(format!(
                        "GPU \"{}\" has rank {r} but is on node {node}; ranks are numbered node-major ({per_node} GPUs per node: node {node} holds ranks {}..{})",
                        gpu_name(&self.graph, i),
                        node * per_node,
                        (node + 1) * per_node - 1
                    )));
                }
            }
        }
        let mut gpus = Vec::with_capacity(n);
        for (r, slot) in by_rank.into_iter().enumerate() {
            // Every slot is filled: n GPUs, n distinct ranks below n.
            let Some(i) = slot else {
                return Err(TopologyError::BadRanks(format!("rank {r} is missing")));
            };
            if let Some(Device::Gpu { rank, local, .. }) = self.graph.node_weight_mut(i) {
                *rank = RankId::new(r);
                *local = (r % per_node) as u32;
            }
            gpus.push(i);
        }
        Ok(Topology {
            name,
            graph: self.graph,
            gpus,
            nodes,
            gpus_per_node: per_node,
        })
    }
}

/// Why a link's figures are unsound, if they are.
pub(crate) fn link_problem(link: &Link) -> Option<String> {
    if !link.bandwidth_gbs.is_finite() || link.bandwidth_gbs <= 0.0 {
        return Some(format!(
            "bandwidth must be a positive number of GB/s, found {}",
            link.bandwidth_gbs
        ));
    }
    if !link.latency_us.is_finite() || link.latency_us < 0.0 {
        return Some(format!(
            "latency must be a number of µs >= 0, found {}",
            link.latency_us
        ));
    }
    None
}
