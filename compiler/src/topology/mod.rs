//! The machine: an undirected graph of devices (GPUs, NVSwitches, PCIe switches, CPUs,
//! NICs, the network switch) joined by links that carry a bandwidth (GB/s, per direction)
//! and a latency (µs): the alpha-beta figures the cost model uses.
//!
//! Where topologies come from:
//! - presets ([`Topology::preset`]): `nvswitch:N`, `hgx-h200:N`, `cluster:NxG`, `ring:N`
//!   (see [`presets`]);
//! - our JSON format ([`Topology::from_json`], [`Topology::to_json`]; `compiler/TOPOLOGY.md`
//!   and [`mod@file`] describe it);
//! - NCCL's topology XML, as `NCCL_TOPO_DUMP_FILE` writes it ([`Topology::from_nccl_xml`],
//!   see [`nccl_xml`]).
//!
//! [`Topology::parse`] takes any of these: a spec ending in `.json` or `.xml` is a path.
//!
//! Invariants of every [`Topology`] (checked when it is built, whatever the source):
//! - there is at least one GPU, and at most [`MAX_RANKS`] GPUs, [`MAX_DEVICES`] devices and
//!   [`MAX_LINKS`] links;
//! - GPU ranks are `0..n-1`, each exactly once, numbered node-major: with `G` GPUs per
//!   node, rank `r` is GPU `r % G` (its `local` index) of node `r / G`, so
//!   `rank_at(node, local)` is `node * G + local`;
//! - node ids are `0..N-1` and every node has the same number of GPUs (`G >= 1`); devices
//!   other than GPUs name a node below `N` (the network switch belongs to no node);
//! - every link joins two different devices and has a finite bandwidth `> 0` and a finite
//!   latency `>= 0`; parallel links are allowed;
//! - device and link ids are dense (`0..num_devices()`, `0..num_links()`), in the order the
//!   devices and links were given; nothing is ever removed.
//!
//! Routes ([`Topology::route`]) never pass through a third GPU: GPUs do not forward.

pub mod error;
pub mod file;
pub mod nccl_xml;
pub mod presets;
pub mod route;

mod build;
mod family;

pub use error::{PRESET_LIST, TextPos, TopologyError};
pub use route::{Route, RouteKind};

use crate::ids::{DeviceId, LinkId, RankId};
use petgraph::graph::{EdgeIndex, NodeIndex, UnGraph};
use petgraph::visit::EdgeRef;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};

/// At most this many ranks (GPUs) in a topology.
pub const MAX_RANKS: usize = 65_536;
/// At most this many devices in a topology.
pub const MAX_DEVICES: usize = 1 << 20;
/// At most this many links in a topology.
pub const MAX_LINKS: usize = 1 << 22;
/// Topology files larger than this are refused before they are read.
pub const MAX_FILE_BYTES: u64 = 256 << 20;

/// A device of the machine. `node` is the index of the host (machine) the device sits in.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Device {
    /// A GPU: one rank. `local` is its index within its node; `name` its PCI bus id when
    /// imported from NCCL, `gpuL` in presets, its name or id in our JSON format.
    Gpu {
        rank: RankId,
        node: u32,
        local: u32,
        name: String,
    },
    /// An NVSwitch fabric of one node (NCCL merges all switch chips of a node into one).
    #[serde(rename = "nvswitch")]
    NvSwitch { node: u32 },
    /// A PCIe switch or bridge.
    PciSwitch { node: u32 },
    /// A CPU (NUMA domain, PCIe root).
    Cpu { node: u32 },
    /// A network interface (one NCCL `<net>` port), e.g. `mlx5_0`.
    Nic { node: u32, name: String },
    /// The network joining the NICs of all nodes.
    NetSwitch,
}

impl Device {
    /// The word used for this kind of device in our JSON format: `gpu`, `nvswitch`,
    /// `pci_switch`, `cpu`, `nic`, `net_switch`.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Device::Gpu { .. } => "gpu",
            Device::NvSwitch { .. } => "nvswitch",
            Device::PciSwitch { .. } => "pci_switch",
            Device::Cpu { .. } => "cpu",
            Device::Nic { .. } => "nic",
            Device::NetSwitch => "net_switch",
        }
    }

    /// The node the device belongs to; `None` for the network switch.
    pub fn node(&self) -> Option<u32> {
        match self {
            Device::Gpu { node, .. }
            | Device::NvSwitch { node }
            | Device::PciSwitch { node }
            | Device::Cpu { node }
            | Device::Nic { node, .. } => Some(*node),
            Device::NetSwitch => None,
        }
    }

    /// The rank of a GPU; `None` for other devices.
    pub fn rank(&self) -> Option<RankId> {
        match self {
            Device::Gpu { rank, .. } => Some(*rank),
            _ => None,
        }
    }

    pub fn is_gpu(&self) -> bool {
        matches!(self, Device::Gpu { .. })
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Gpu {
                rank, node, name, ..
            } => write!(f, "GPU \"{name}\" ({rank}, node {node})"),
            Device::NvSwitch { node } => write!(f, "NVSwitch of node {node}"),
            Device::PciSwitch { node } => write!(f, "PCIe switch (node {node})"),
            Device::Cpu { node } => write!(f, "CPU (node {node})"),
            Device::Nic { node, name } => write!(f, "NIC \"{name}\" (node {node})"),
            Device::NetSwitch => write!(f, "network switch"),
        }
    }
}

/// What a link is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkKind {
    /// NVLink between two GPUs (or a GPU and a CPU: NVLink-C2C, POWER9).
    NvLink,
    /// NVLink between a GPU and an NVSwitch.
    NvSwitch,
    /// PCIe.
    Pcie,
    /// A network link (NIC to the network switch).
    Net,
}

impl LinkKind {
    pub const ALL: [LinkKind; 4] = [
        LinkKind::NvLink,
        LinkKind::NvSwitch,
        LinkKind::Pcie,
        LinkKind::Net,
    ];

    /// `nvlink`, `nvswitch`, `pcie`, `net`.
    pub fn name(self) -> &'static str {
        match self {
            LinkKind::NvLink => "nvlink",
            LinkKind::NvSwitch => "nvswitch",
            LinkKind::Pcie => "pcie",
            LinkKind::Net => "net",
        }
    }

    pub fn from_name(name: &str) -> Option<LinkKind> {
        LinkKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl fmt::Display for LinkKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A link: bandwidth in GB/s (1e9 bytes/s) per direction, latency in µs.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Link {
    pub kind: LinkKind,
    pub bandwidth_gbs: f64,
    pub latency_us: f64,
}

/// The structural classes of topology that a `.coll` header's `topology ...;` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// One node, every GPU reaches every other through an NVSwitch or a direct NVLink.
    NvSwitch,
    /// [`Family::NvSwitch`], and every GPU has a NIC of its own (reached over PCIe without
    /// crossing a CPU or another GPU).
    Hgx,
    /// There is a network: NICs joined to a network switch (any node count).
    Cluster,
    /// `n >= 2` GPUs whose only NVLinks join rank neighbours `r` and `r+1 mod n`, all of
    /// them, and no NVSwitch.
    Ring,
}

impl Family {
    pub const ALL: [Family; 4] = [Family::NvSwitch, Family::Hgx, Family::Cluster, Family::Ring];

    /// `nvswitch`, `hgx`, `cluster`, `ring`: the words of a `.coll` header.
    pub fn name(self) -> &'static str {
        match self {
            Family::NvSwitch => "nvswitch",
            Family::Hgx => "hgx",
            Family::Cluster => "cluster",
            Family::Ring => "ring",
        }
    }

    pub fn from_name(name: &str) -> Option<Family> {
        Family::ALL.into_iter().find(|f| f.name() == name)
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A machine. Built only through presets, files or imports, so the invariants in the
/// module docs always hold.
#[derive(Clone, Debug)]
pub struct Topology {
    name: String,
    graph: UnGraph<Device, Link>,
    /// The GPU device of each rank.
    gpus: Vec<NodeIndex>,
    nodes: usize,
    gpus_per_node: usize,
}

impl PartialEq for Topology {
    /// Same name, same devices and links in the same order.
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.graph.node_count() == other.graph.node_count()
            && self.graph.edge_count() == other.graph.edge_count()
            && self.devices().zip(other.devices()).all(|(a, b)| a == b)
            && self.links().zip(other.links()).all(|(a, b)| a == b)
    }
}

impl Topology {
    /// A preset spec (`nvswitch:8`, `cluster:2x8`, ...), or a path ending in `.json` (our
    /// format) or `.xml` (NCCL's topology XML, one node).
    pub fn parse(spec: &str) -> Result<Topology, TopologyError> {
        let lower = spec.to_ascii_lowercase();
        if lower.ends_with(".json") {
            Topology::from_json_file(Path::new(spec))
        } else if lower.ends_with(".xml") {
            Topology::from_nccl_xml_file(Path::new(spec))
        } else {
            Topology::preset(spec)
        }
    }

    /// A preset; see [`presets`] for the list and figures.
    pub fn preset(spec: &str) -> Result<Topology, TopologyError> {
        presets::preset(spec)
    }

    /// Reads our JSON format. The topology's name is the file's `name` field, or `json`.
    pub fn from_json(text: &str) -> Result<Topology, TopologyError> {
        file::from_json(text, None)
    }

    /// Writes our JSON format; [`Topology::from_json`] reads it back to an equal topology.
    pub fn to_json(&self) -> String {
        file::to_json(self)
    }

    /// Imports one node from NCCL's topology XML. The topology is named `nccl-xml`.
    pub fn from_nccl_xml(text: &str) -> Result<Topology, TopologyError> {
        nccl_xml::import(&[text], "nccl-xml")
    }

    /// Imports several nodes, one NCCL topology XML each (node `i` from `texts[i]`), their
    /// NICs joined by one network switch. Every node must have the same GPU count.
    pub fn from_nccl_xml_nodes(texts: &[&str]) -> Result<Topology, TopologyError> {
        nccl_xml::import(texts, "nccl-xml")
    }

    /// Reads a `.json` file; the name is the file's `name` field, or the file name.
    pub fn from_json_file(path: &Path) -> Result<Topology, TopologyError> {
        let text = read_file(path)?;
        file::from_json(&text, Some(&file_name(path))).map_err(|e| e.in_file(path.to_path_buf()))
    }

    /// Reads an NCCL `.xml` file; the topology is named after the file.
    pub fn from_nccl_xml_file(path: &Path) -> Result<Topology, TopologyError> {
        let text = read_file(path)?;
        nccl_xml::import(&[&text], &file_name(path)).map_err(|e| e.in_file(path.to_path_buf()))
    }

    /// `nvswitch:8`, `cluster:2x8`, a file name, or `nccl-xml`.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn num_ranks(&self) -> usize {
        self.gpus.len()
    }

    pub fn nodes(&self) -> usize {
        self.nodes
    }

    pub fn gpus_per_node(&self) -> usize {
        self.gpus_per_node
    }

    /// The node of rank `r` (computed from the node-major numbering, so also defined for
    /// ranks past the end).
    pub fn node_of(&self, r: RankId) -> usize {
        r.index() / self.gpus_per_node
    }

    /// The index of rank `r` within its node.
    pub fn local_of(&self, r: RankId) -> usize {
        r.index() % self.gpus_per_node
    }

    /// The rank of GPU `local` of `node`, if both are in range.
    pub fn rank_at(&self, node: usize, local: usize) -> Option<RankId> {
        (node < self.nodes && local < self.gpus_per_node)
            .then(|| RankId::new(node * self.gpus_per_node + local))
    }

    /// The GPU device of rank `r`.
    pub fn gpu(&self, r: RankId) -> Option<DeviceId> {
        self.gpus.get(r.index()).map(|n| DeviceId::new(n.index()))
    }

    pub fn num_devices(&self) -> usize {
        self.graph.node_count()
    }

    pub fn num_links(&self) -> usize {
        self.graph.edge_count()
    }

    pub fn device(&self, id: DeviceId) -> Option<&Device> {
        self.graph.node_weight(NodeIndex::new(id.index()))
    }

    /// A link's two ends (in the order given when it was made) and figures.
    pub fn link(&self, id: LinkId) -> Option<(DeviceId, DeviceId, &Link)> {
        let e = EdgeIndex::new(id.index());
        let (a, b) = self.graph.edge_endpoints(e)?;
        let w = self.graph.edge_weight(e)?;
        Some((DeviceId::new(a.index()), DeviceId::new(b.index()), w))
    }

    /// All devices, in id order.
    pub fn devices(&self) -> impl Iterator<Item = (DeviceId, &Device)> {
        self.graph
            .node_indices()
            .zip(self.graph.node_weights())
            .map(|(n, d)| (DeviceId::new(n.index()), d))
    }

    /// All links, in id order, with their two ends.
    pub fn links(&self) -> impl Iterator<Item = (LinkId, DeviceId, DeviceId, &Link)> {
        self.graph.edge_references().map(|e| {
            (
                LinkId::new(e.id().index()),
                DeviceId::new(e.source().index()),
                DeviceId::new(e.target().index()),
                e.weight(),
            )
        })
    }

    /// The links at a device, with the device at the other end.
    pub fn links_at(&self, d: DeviceId) -> impl Iterator<Item = (LinkId, DeviceId, &Link)> {
        let n = NodeIndex::new(d.index());
        let valid = n.index() < self.graph.node_count();
        valid
            .then(|| self.graph.edges(n))
            .into_iter()
            .flatten()
            .map(move |e| {
                let other = if e.source() == n {
                    e.target()
                } else {
                    e.source()
                };
                (
                    LinkId::new(e.id().index()),
                    DeviceId::new(other.index()),
                    e.weight(),
                )
            })
    }

    /// The families this topology belongs to, in [`Family::ALL`] order (see [`Family`]).
    pub fn families(&self) -> Vec<Family> {
        family::families(self)
    }

    /// Whether every GPU is linked directly to an NVSwitch of its own node.
    pub fn has_switch(&self) -> bool {
        family::has_switch(self)
    }

    /// The best path from `a` to `b` that never passes through a third GPU: the highest
    /// bottleneck bandwidth, then the lowest total latency, then the fewest links. `None`
    /// when there is no such path, when `a == b`, or when a rank is out of range.
    pub fn route(&self, a: RankId, b: RankId) -> Option<Route> {
        route::route(self, a, b)
    }

    /// The best route from `a` to every rank (indexed by rank; `None` at `a` itself and
    /// where there is no route). Cheaper than `n` calls to [`Topology::route`].
    pub fn routes_from(&self, a: RankId) -> Vec<Option<Route>> {
        route::routes_from(self, a)
    }

    /// One line: name, ranks, nodes, devices, links, families.
    pub fn summary(&self) -> String {
        let fams: Vec<&str> = self.families().iter().map(|f| f.name()).collect();
        format!(
            "{}: {} ranks ({} nodes x {} GPUs), {} devices, {} links, families [{}]",
            self.name,
            self.num_ranks(),
            self.nodes,
            self.gpus_per_node,
            self.num_devices(),
            self.num_links(),
            fams.join(", ")
        )
    }

    pub(crate) fn graph(&self) -> &UnGraph<Device, Link> {
        &self.graph
    }

    pub(crate) fn gpu_nodes(&self) -> &[NodeIndex] {
        &self.gpus
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

fn read_file(path: &Path) -> Result<String, TopologyError> {
    let io = |source| TopologyError::Io {
        path: PathBuf::from(path),
        source,
    };
    let len = std::fs::metadata(path).map_err(io)?.len();
    if len > MAX_FILE_BYTES {
        return Err(TopologyError::TooLarge {
            what: "bytes of topology file",
            count: len,
            limit: MAX_FILE_BYTES,
        }
        .in_file(path.to_path_buf()));
    }
    std::fs::read_to_string(path).map_err(io)
}
