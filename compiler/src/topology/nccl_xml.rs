//! Import of NCCL's topology XML: the file `NCCL_TOPO_DUMP_FILE` writes and
//! `NCCL_TOPO_FILE` reads. One file describes one node.
//!
//! What is read (element and attribute names are NCCL's):
//! - `<system version="1">`: the root; a `version` other than 1 is refused.
//! - `<cpu arch vendor>`: a [`Device::Cpu`]. The CPUs of a node are joined pairwise by a
//!   [`LinkKind::Pcie`] link (the socket interconnect; a host path like PCIe) of
//!   [`inter_cpu_gbs`]. `<nic>` directly under a `<cpu>` (a socket NIC) is joined
//!   to it by a PCIe link of [`LOCAL_PCIE_GBS`].
//! - `<pci busid link_speed link_width>`, nested: an element holding `<gpu>` children is
//!   those GPUs' slot; one holding `<nic>` children is those NICs' slot; one holding `<pci>`
//!   children is a [`Device::PciSwitch`]; a leaf `<pci>` (an NVMe drive, a bridge to
//!   nothing) is left out. Each GPU, NIC or switch is joined to its parent (CPU or switch)
//!   by a PCIe link of `speed × width / 8` GB/s from its own element's `link_speed`
//!   (`"32.0 GT/s PCIe"` → 32; empty or `Unknown` → 8 as NCCL assumes) and `link_width`
//!   (`0` → 16, as NCCL does). `busid` is required on every `<pci>`.
//! - `<gpu dev sm rank>`: a GPU named by its `<pci>`'s bus id. `sm` is required. When any
//!   GPU has a `rank`, GPUs without one are not in the communicator and are left out (as
//!   NCCL does); ranks are then numbered in the order of the `rank` values (so a dump from
//!   the second node of a job, ranks 8..15, gives ranks 0..7). Without ranks, GPUs are
//!   numbered in `dev` order. Several `<gpu>` in one `<pci>` (several ranks on one GPU)
//!   are named `busid#k` and split its links' bandwidth, as NCCL does.
//! - `<nvlink target count tclass>` under a `<gpu>`: `count` links of the GPU's
//!   [`nvlink_gbs`] each. `tclass` `0x068000` (and any class NCCL does not know, as NCCL
//!   treats it) targets an NVSwitch: all of a node's switch targets become one
//!   [`Device::NvSwitch`], and a GPU's switch links add up into one
//!   [`LinkKind::NvSwitch`] link. A `tclass` beginning `0x03` targets the GPU with bus id
//!   `target`: one [`LinkKind::NvLink`] per pair, however many sides list it (the larger
//!   figure wins). `0x068001` targets the CPU above the GPU (POWER9).
//! - `<c2c bw count>` under a `<gpu>`: NVLink-C2C to the CPU above it, `bw × count / 1000`
//!   GB/s (`bw` is MB/s per link).
//! - `<nic>` → `<net name speed latency>`: one [`Device::Nic`] per `<net>` (named by
//!   `name`; a name seen again in the node, as NCCL lists socket NICs under every CPU, adds
//!   a link to the same NIC), joined by a [`LinkKind::Net`] link of `speed / 8000` GB/s
//!   (`speed` in Mbit/s; missing or `<= 0` means 10 Gb/s, as NCCL assumes) and `latency`
//!   µs (missing or 0: [`NET_US`]) to the one [`Device::NetSwitch`].
//! - Anything else (`pcilink`, unknown elements and attributes) is ignored.
//!
//! Latencies, which NCCL's XML does not carry: NVLink [`super::presets::NVLINK_US`], PCIe
//! [`super::presets::PCIE_US`].
//!
//! Errors name the element, the attribute and `line:col`; nothing in the input can make
//! the import panic.

use super::build::Builder;
use super::presets::{NET_US, NVLINK_US, PCIE_US};
use super::{Device, Link, LinkKind, TextPos, Topology, TopologyError};
use petgraph::graph::NodeIndex;
use roxmltree::{Document, Node, NodeId};
use std::collections::{BTreeMap, HashMap, HashSet};

/// PCIe bandwidth assumed between a CPU and a NIC listed directly under it.
pub const LOCAL_PCIE_GBS: f64 = 64.0;
/// Deeper `<pci>` nesting than this is refused (real machines have fewer than 10 levels).
pub const MAX_DEPTH: usize = 64;
/// NCCL's `tclass` of an NVSwitch.
pub const NVSWITCH_CLASS: &str = "0x068000";
/// NCCL's `tclass` of a CPU reached by NVLink.
pub const CPU_CLASS: &str = "0x068001";

/// Bandwidth of `count` NVLinks, GB/s per direction, by the GPU's compute capability
/// (`sm`): 100 and later (NVLink 5) 50 per link; 90 to 99 (NVLink 4) 478/18 ≈ 26.56, so
/// 18 links make the 478 GB/s of the `nvswitch` preset; 80 to 89 (NVLink 3) 25; earlier 20.
pub fn nvlink_gbs(sm: i64, count: i64) -> f64 {
    let c = count as f64;
    match sm {
        100.. => c * 50.0,
        90..=99 => c * super::presets::NVSWITCH_GBS / 18.0,
        80..=89 => c * 25.0,
        _ => c * 20.0,
    }
}

pub(crate) fn import(texts: &[&str], name: &str) -> Result<Topology, TopologyError> {
    let mut b = Builder::new();
    let mut net = None;
    for (i, text) in texts.iter().enumerate() {
        let node = u32::try_from(i).unwrap_or(u32::MAX);
        import_node(&mut b, &mut net, text, node).map_err(|e| {
            if texts.len() > 1 {
                TopologyError::InNode {
                    node: i,
                    source: Box::new(e),
                }
            } else {
                e
            }
        })?;
    }
    b.finish(name.to_string())
}

fn import_node(
    b: &mut Builder,
    net: &mut Option<NodeIndex>,
    text: &str,
    node: u32,
) -> Result<(), TopologyError> {
    let doc = Document::parse(text).map_err(|e| {
        let p = e.pos();
        let full = e.to_string();
        let suffix = format!(" at {}:{}", p.row, p.col);
        TopologyError::XmlSyntax {
            pos: TextPos {
                line: p.row,
                column: p.col,
            },
            message: full.strip_suffix(&suffix).unwrap_or(&full).to_string(),
        }
    })?;
    let mut imp = Import {
        doc: &doc,
        b,
        net,
        node,
        gpu_dev: HashMap::new(),
        linked: HashSet::new(),
        by_busid: HashMap::new(),
        all_gpu_busids: HashSet::new(),
        gpu_sm: HashMap::new(),
        siblings: HashMap::new(),
        nics: HashMap::new(),
        to_switch: BTreeMap::new(),
        pairs: BTreeMap::new(),
        to_cpu: BTreeMap::new(),
    };
    imp.run()
}

struct Import<'d, 'i, 'b> {
    doc: &'d Document<'i>,
    b: &'b mut Builder,
    net: &'b mut Option<NodeIndex>,
    node: u32,
    /// `<gpu>` element -> its device (GPUs in the communicator only).
    gpu_dev: HashMap<NodeId, NodeIndex>,
    /// `<gpu>` elements reached from a `<cpu>` (and so linked).
    linked: HashSet<NodeId>,
    /// Lower-case bus id -> the GPU devices in that slot.
    by_busid: HashMap<String, Vec<NodeIndex>>,
    /// Bus ids of every `<gpu>`'s slot, in the communicator or not.
    all_gpu_busids: HashSet<String>,
    gpu_sm: HashMap<NodeIndex, i64>,
    /// How many GPU devices share each GPU's slot.
    siblings: HashMap<NodeIndex, usize>,
    /// NIC name -> device.
    nics: HashMap<String, NodeIndex>,
    /// GPU -> total bandwidth to the node's NVSwitch.
    to_switch: BTreeMap<NodeIndex, f64>,
    /// GPU pair (lower index first) -> NVLink bandwidth.
    pairs: BTreeMap<(NodeIndex, NodeIndex), f64>,
    /// (GPU, CPU) -> NVLink / C2C bandwidth.
    to_cpu: BTreeMap<(NodeIndex, NodeIndex), f64>,
}

fn elements<'a, 'i>(n: Node<'a, 'i>) -> impl Iterator<Item = Node<'a, 'i>> {
    n.children().filter(|c| c.is_element())
}

impl<'d, 'i> Import<'d, 'i, '_> {
    fn pos_at(&self, byte: usize) -> TextPos {
        let p = self.doc.text_pos_at(byte);
        TextPos {
            line: p.row,
            column: p.col,
        }
    }

    /// An error about element `e`, placed at attribute `attr` when it is present.
    fn error(&self, e: Node<'d, 'i>, attr: Option<&str>, message: String) -> TopologyError {
        let at = attr
            .and_then(|a| e.attribute_node(a))
            .map(|a| a.range().start)
            .unwrap_or_else(|| e.range().start);
        TopologyError::Xml {
            pos: self.pos_at(at),
            element: e.tag_name().name().to_string(),
            attribute: attr.map(str::to_string),
            message,
        }
    }

    fn required(&self, e: Node<'d, 'i>, attr: &str) -> Result<&'d str, TopologyError> {
        e.attribute(attr)
            .ok_or_else(|| self.error(e, None, format!("missing attribute `{attr}`")))
    }

    fn int(&self, e: Node<'d, 'i>, attr: &str) -> Result<Option<i64>, TopologyError> {
        let Some(text) = e.attribute(attr) else {
            return Ok(None);
        };
        parse_int(text).map(Some).ok_or_else(|| {
            self.error(
                e,
                Some(attr),
                format!("expected an integer, found \"{text}\""),
            )
        })
    }

    fn required_int(&self, e: Node<'d, 'i>, attr: &str) -> Result<i64, TopologyError> {
        self.required(e, attr)?;
        self.int(e, attr).map(|v| v.unwrap_or(0))
    }

    fn link(
        &mut self,
        a: NodeIndex,
        b: NodeIndex,
        kind: LinkKind,
        bw: f64,
        lat: f64,
    ) -> Result<(), TopologyError> {
        self.b
            .link(
                a,
                b,
                Link {
                    kind,
                    bandwidth_gbs: bw,
                    latency_us: lat,
                },
            )
            .map(|_| ())
    }

    fn run(&mut self) -> Result<(), TopologyError> {
        let root = self.doc.root_element();
        if root.tag_name().name() != "system" {
            return Err(self.error(
                root,
                None,
                "the root element must be <system> (an NCCL topology file)".into(),
            ));
        }
        if let Some(v) = root.attribute("version")
            && parse_int(v) != Some(1)
        {
            return Err(self.error(
                root,
                Some("version"),
                format!("unsupported version \"{v}\" (NCCL topology files are version 1)"),
            ));
        }
        self.add_gpus(root)?;
        let mut cpus: Vec<NodeIndex> = Vec::new();
        for cpu in elements(root).filter(|e| e.has_tag_name("cpu")) {
            let dev = self.b.add(Device::Cpu { node: self.node })?;
            let bw = inter_cpu_gbs(cpu.attribute("arch"), cpu.attribute("vendor"));
            for &other in &cpus {
                self.link(other, dev, LinkKind::Pcie, bw, PCIE_US)?;
            }
            cpus.push(dev);
            self.children(cpu, dev, dev, 1)?;
        }
        let unlinked = self
            .gpu_dev
            .keys()
            .filter(|id| !self.linked.contains(id))
            .filter_map(|&id| self.doc.get_node(id))
            .min_by_key(|g| g.range().start);
        if let Some(g) = unlinked {
            return Err(self.error(
                g,
                None,
                "this GPU is not reached from a <cpu> through <pci> elements".into(),
            ));
        }
        self.finish_links()
    }

    /// Pass 1: every `<gpu>`, checked, ranked and added in rank order.
    fn add_gpus(&mut self, root: Node<'d, 'i>) -> Result<(), TopologyError> {
        struct Gpu<'a, 'b> {
            elem: Node<'a, 'b>,
            busid: String,
            key: Option<i64>,
            sm: i64,
            name: String,
        }
        let mut gpus = Vec::new();
        for g in root.descendants().filter(|n| n.has_tag_name("gpu")) {
            let slot = g.parent_element().filter(|p| p.has_tag_name("pci"));
            let Some(slot) = slot else {
                return Err(self.error(
                    g,
                    None,
                    "a <gpu> must be the child of the <pci> element that carries its bus id".into(),
                ));
            };
            let busid = self.required(slot, "busid")?.to_ascii_lowercase();
            let sm = self.required_int(g, "sm")?;
            let rank = self.int(g, "rank")?;
            if let Some(r) = rank.filter(|&r| r < 0) {
                return Err(self.error(g, Some("rank"), format!("a rank is >= 0, found {r}")));
            }
            self.all_gpu_busids.insert(busid.clone());
            let in_slot: Vec<Node> = elements(slot).filter(|c| c.has_tag_name("gpu")).collect();
            let name = if in_slot.len() > 1 {
                let k = in_slot.iter().position(|c| *c == g).unwrap_or(0);
                format!("{busid}#{k}")
            } else {
                busid.clone()
            };
            gpus.push(Gpu {
                elem: g,
                busid,
                key: rank,
                sm,
                name,
            });
        }
        let ranked = gpus.iter().any(|g| g.key.is_some());
        if ranked {
            gpus.retain(|g| g.key.is_some());
        } else {
            for g in &mut gpus {
                g.key = Some(self.required_int(g.elem, "dev")?);
            }
        }
        let attr = if ranked { "rank" } else { "dev" };
        gpus.sort_by_key(|g| g.key);
        for pair in gpus.windows(2) {
            if pair[0].key == pair[1].key {
                let (first, second) = (pair[0].elem, pair[1].elem);
                let line = self.pos_at(first.range().start).line;
                return Err(self.error(
                    second,
                    Some(attr),
                    format!(
                        "{attr} {} is also given to the <gpu> on line {line}",
                        pair[0].key.unwrap_or(0)
                    ),
                ));
            }
        }
        let slot_count =
            |busid: &str, gpus: &[Gpu]| gpus.iter().filter(|g| g.busid == busid).count();
        for g in &gpus {
            let dev = self.b.add_gpu(self.node, None, g.name.clone())?;
            self.gpu_dev.insert(g.elem.id(), dev);
            self.by_busid.entry(g.busid.clone()).or_default().push(dev);
            self.gpu_sm.insert(dev, g.sm);
            self.siblings.insert(dev, slot_count(&g.busid, &gpus));
        }
        Ok(())
    }

    /// Pass 2: the children of a `<cpu>` or of a PCIe switch `<pci>`.
    fn children(
        &mut self,
        e: Node<'d, 'i>,
        parent: NodeIndex,
        cpu: NodeIndex,
        depth: usize,
    ) -> Result<(), TopologyError> {
        for c in elements(e) {
            match c.tag_name().name() {
                "pci" => self.pci(c, parent, cpu, depth + 1)?,
                "nic" if e.has_tag_name("cpu") => self.nic(c, parent, LOCAL_PCIE_GBS)?,
                _ => {}
            }
        }
        Ok(())
    }

    fn pci(
        &mut self,
        e: Node<'d, 'i>,
        parent: NodeIndex,
        cpu: NodeIndex,
        depth: usize,
    ) -> Result<(), TopologyError> {
        if depth > MAX_DEPTH {
            return Err(self.error(
                e,
                None,
                format!("<pci> elements nested more than {MAX_DEPTH} deep"),
            ));
        }
        self.required(e, "busid")?;
        let gpus: Vec<Node> = elements(e).filter(|c| c.has_tag_name("gpu")).collect();
        let nics: Vec<Node> = elements(e).filter(|c| c.has_tag_name("nic")).collect();
        let has_pci = elements(e).any(|c| c.has_tag_name("pci"));
        if !gpus.is_empty() {
            let bw = self.pci_gbs(e)?;
            for g in gpus {
                // GPUs outside the communicator have no device.
                if let Some(&dev) = self.gpu_dev.get(&g.id()) {
                    self.linked.insert(g.id());
                    self.link(dev, parent, LinkKind::Pcie, bw, PCIE_US)?;
                    self.gpu_links(g, dev, cpu)?;
                }
            }
        } else if !nics.is_empty() {
            let bw = self.pci_gbs(e)?;
            for n in nics {
                self.nic(n, parent, bw)?;
            }
        } else if has_pci {
            let bw = self.pci_gbs(e)?;
            let sw = self.b.add(Device::PciSwitch { node: self.node })?;
            self.link(sw, parent, LinkKind::Pcie, bw, PCIE_US)?;
            self.children(e, sw, cpu, depth)?;
        }
        Ok(())
    }

    /// A `<pci>` element's link bandwidth, GB/s.
    fn pci_gbs(&self, e: Node<'d, 'i>) -> Result<f64, TopologyError> {
        let speed_text = self.required(e, "link_speed")?;
        let width = self.required_int(e, "link_width")?;
        if width < 0 {
            return Err(self.error(
                e,
                Some("link_width"),
                format!("expected a lane count >= 0, found {width}"),
            ));
        }
        let width = if width == 0 { 16 } else { width };
        let t = speed_text.trim();
        let speed = if t.is_empty() || t.starts_with("Unknown") {
            8.0
        } else {
            let number = t.split(|c: char| c.is_whitespace()).next().unwrap_or("");
            match number.parse::<f64>() {
                Ok(s) if s.is_finite() && s > 0.0 => s,
                _ => {
                    return Err(self.error(
                        e,
                        Some("link_speed"),
                        format!(
                            "expected a speed such as \"32.0 GT/s PCIe\", found \"{speed_text}\""
                        ),
                    ));
                }
            }
        };
        Ok(speed * width as f64 / 8.0)
    }

    /// A `<nic>`: its `<net>` ports, each joined to `parent` by PCIe and to the network.
    fn nic(
        &mut self,
        e: Node<'d, 'i>,
        parent: NodeIndex,
        pcie_gbs: f64,
    ) -> Result<(), TopologyError> {
        for n in elements(e).filter(|c| c.has_tag_name("net")) {
            let name = self.required(n, "name")?.to_string();
            if let Some(&dev) = self.nics.get(&name) {
                // The same port listed again (NCCL lists socket NICs under every CPU).
                self.link(dev, parent, LinkKind::Pcie, pcie_gbs, PCIE_US)?;
                continue;
            }
            let mbps = self.int(n, "speed")?.unwrap_or(0);
            let mbps = if mbps <= 0 { 10_000 } else { mbps };
            let latency = match n.attribute("latency") {
                None => 0.0,
                Some(text) => match text.trim().parse::<f64>() {
                    Ok(l) if l.is_finite() && l >= 0.0 => l,
                    _ => {
                        return Err(self.error(
                            n,
                            Some("latency"),
                            format!("expected a latency in µs >= 0, found \"{text}\""),
                        ));
                    }
                },
            };
            let latency = if latency > 0.0 { latency } else { NET_US };
            let dev = self.b.add(Device::Nic {
                node: self.node,
                name: name.clone(),
            })?;
            self.nics.insert(name, dev);
            self.link(dev, parent, LinkKind::Pcie, pcie_gbs, PCIE_US)?;
            let switch = match *self.net {
                Some(s) => s,
                None => {
                    let s = self.b.add(Device::NetSwitch)?;
                    *self.net = Some(s);
                    s
                }
            };
            self.link(dev, switch, LinkKind::Net, mbps as f64 / 8000.0, latency)?;
        }
        Ok(())
    }

    /// A `<gpu>`'s `<nvlink>` and `<c2c>` children, gathered; links are made at the end.
    fn gpu_links(
        &mut self,
        g: Node<'d, 'i>,
        dev: NodeIndex,
        cpu: NodeIndex,
    ) -> Result<(), TopologyError> {
        let sm = self.gpu_sm.get(&dev).copied().unwrap_or(0);
        let local = self.siblings.get(&dev).copied().unwrap_or(1).max(1) as f64;
        for l in elements(g) {
            if l.has_tag_name("c2c") {
                let bw = self.required_int(l, "bw")?;
                let count = self.required_int(l, "count")?;
                if bw < 0 || count < 0 {
                    return Err(self.error(l, None, "`bw` and `count` must be >= 0".into()));
                }
                if bw > 0 && count > 0 {
                    *self.to_cpu.entry((dev, cpu)).or_insert(0.0) +=
                        bw as f64 * count as f64 / 1000.0 / local;
                }
                continue;
            }
            if !l.has_tag_name("nvlink") {
                continue;
            }
            let count = self.required_int(l, "count")?;
            if count < 0 {
                return Err(self.error(
                    l,
                    Some("count"),
                    format!("expected a link count >= 0, found {count}"),
                ));
            }
            let tclass = self.required(l, "tclass")?.trim().to_ascii_lowercase();
            if !tclass.starts_with("0x")
                || tclass.len() < 3
                || !tclass[2..].bytes().all(|c| c.is_ascii_hexdigit())
            {
                return Err(self.error(
                    l,
                    Some("tclass"),
                    format!("expected a PCI class such as \"0x068000\", found \"{tclass}\""),
                ));
            }
            if count == 0 {
                continue;
            }
            let bw = nvlink_gbs(sm, count) / local;
            if tclass.starts_with("0x03") {
                let target = self.required(l, "target")?.to_ascii_lowercase();
                let Some(peers) = self.by_busid.get(&target).cloned() else {
                    if self.all_gpu_busids.contains(&target) {
                        continue; // a GPU outside the communicator
                    }
                    return Err(self.error(
                        l,
                        Some("target"),
                        format!("no <gpu> in this file has bus id \"{target}\""),
                    ));
                };
                if peers.contains(&dev) {
                    return Err(self.error(
                        l,
                        Some("target"),
                        "an NVLink from a GPU to itself".into(),
                    ));
                }
                let remote = peers.len() as f64;
                for p in peers {
                    let key = if dev < p { (dev, p) } else { (p, dev) };
                    let entry = self.pairs.entry(key).or_insert(0.0);
                    *entry = entry.max(bw / remote);
                }
            } else if tclass == CPU_CLASS {
                *self.to_cpu.entry((dev, cpu)).or_insert(0.0) += bw;
            } else {
                *self.to_switch.entry(dev).or_insert(0.0) += bw;
            }
        }
        Ok(())
    }

    fn finish_links(&mut self) -> Result<(), TopologyError> {
        if !self.to_switch.is_empty() {
            let sw = self.b.add(Device::NvSwitch { node: self.node })?;
            let to_switch = std::mem::take(&mut self.to_switch);
            for (gpu, bw) in to_switch {
                self.link(gpu, sw, LinkKind::NvSwitch, bw, NVLINK_US)?;
            }
        }
        for ((a, b), bw) in std::mem::take(&mut self.pairs) {
            self.link(a, b, LinkKind::NvLink, bw, NVLINK_US)?;
        }
        for ((gpu, cpu), bw) in std::mem::take(&mut self.to_cpu) {
            self.link(gpu, cpu, LinkKind::NvLink, bw, NVLINK_US)?;
        }
        Ok(())
    }
}

/// The bandwidth between two CPU sockets of a node, GB/s, by the `<cpu>`'s `arch` and
/// `vendor` (NCCL's figures: POWER 32, Arm 6, AMD 16, Intel and others 22).
pub fn inter_cpu_gbs(arch: Option<&str>, vendor: Option<&str>) -> f64 {
    match (arch, vendor) {
        (Some("ppc64"), _) => 32.0,
        (Some("arm64" | "aarch64"), _) => 6.0,
        (_, Some("AuthenticAMD")) => 16.0,
        _ => 22.0,
    }
}

/// An integer as NCCL reads one (`strtol` base 0): decimal, or hex after `0x`.
fn parse_int(text: &str) -> Option<i64> {
    let t = text.trim();
    let (neg, digits) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let v = match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(hex) => i64::from_str_radix(hex, 16).ok()?,
        None => {
            if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
                return None;
            }
            digits.parse::<i64>().ok()?
        }
    };
    Some(if neg { -v } else { v })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::RankId;
    use crate::topology::{Family, RouteKind};
    use std::path::{Path, PathBuf};

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/inputs/topo")
            .join(name)
    }

    fn load(name: &str) -> Topology {
        Topology::parse(&fixture(name).display().to_string()).expect("fixture imports")
    }

    fn err(xml: &str) -> TopologyError {
        match Topology::from_nccl_xml(xml) {
            Ok(t) => panic!("should fail, built {}", t.summary()),
            Err(e) => e,
        }
    }

    fn r(i: usize) -> RankId {
        RankId::new(i)
    }

    #[test]
    fn dgx_h100() {
        let t = load("dgx_h100_nvswitch.xml");
        assert_eq!(t.name(), "dgx_h100_nvswitch.xml");
        assert_eq!((t.num_ranks(), t.nodes(), t.gpus_per_node()), (8, 1, 8));
        // 8 GPUs, 2 CPUs, 12 PCIe switches, 8 NICs, the network, one merged NVSwitch.
        assert_eq!(t.num_devices(), 32);
        let count = |f: fn(&Device) -> bool| t.devices().filter(|(_, d)| f(d)).count();
        assert_eq!(count(|d| matches!(d, Device::NvSwitch { .. })), 1);
        assert_eq!(count(|d| matches!(d, Device::PciSwitch { .. })), 12);
        assert_eq!(count(|d| matches!(d, Device::Nic { .. })), 8);
        assert_eq!(count(|d| matches!(d, Device::Cpu { .. })), 2);
        assert!(t.has_switch());
        assert_eq!(
            t.families(),
            vec![Family::NvSwitch, Family::Hgx, Family::Cluster]
        );
        // Rank 3 is the GPU at 0000:5d:00.0.
        assert!(matches!(
            t.gpu(r(3)).and_then(|d| t.device(d)),
            Some(Device::Gpu { name, local: 3, .. }) if name == "0000:5d:00.0"
        ));
        for a in 0..8 {
            for (b, route) in t.routes_from(r(a)).into_iter().enumerate() {
                if a == b {
                    continue;
                }
                let route = route.expect("route");
                assert_eq!(route.kind, RouteKind::Switch, "{a}->{b}");
                // 5 + 5 + 4 + 4 = 18 NVLinks of 478/18 GB/s.
                assert!(
                    (route.bandwidth_gbs - 478.0).abs() < 1e-9,
                    "{}",
                    route.bandwidth_gbs
                );
            }
        }
        // Each NIC is a 400 Gb/s port on the network.
        let nets: Vec<f64> = t
            .links()
            .filter(|(_, _, _, l)| l.kind == LinkKind::Net)
            .map(|(_, _, _, l)| l.bandwidth_gbs)
            .collect();
        assert_eq!(nets, vec![50.0; 8]);
        let back = Topology::from_json(&t.to_json()).expect("round trip");
        assert_eq!(back, t);
    }

    #[test]
    fn two_gpus_direct() {
        let t = load("two_gpus_nvlink_direct.xml");
        assert_eq!(t.num_ranks(), 2);
        assert!(!t.has_switch());
        assert_eq!(t.families(), vec![Family::NvSwitch, Family::Ring]);
        let route = t.route(r(0), r(1)).expect("route");
        assert_eq!(route.kind, RouteKind::Direct);
        assert_eq!(route.links.len(), 1);
        // Listed from both sides, made once: 12 NVLink 3 links of 25 GB/s.
        assert_eq!(route.bandwidth_gbs, 300.0);
        let nvlinks = t
            .links()
            .filter(|(_, _, _, l)| l.kind == LinkKind::NvLink)
            .count();
        assert_eq!(nvlinks, 1);
    }

    #[test]
    fn pcie_only() {
        let t = load("pcie_only.xml");
        assert_eq!(t.num_ranks(), 4);
        assert!(!t.has_switch());
        // The socket NIC makes a network, listed under both CPUs but one NIC.
        assert_eq!(t.families(), vec![Family::Cluster]);
        let nics = t
            .devices()
            .filter(|(_, d)| matches!(d, Device::Nic { .. }))
            .count();
        assert_eq!(nics, 1);
        let same_switch = t.route(r(0), r(1)).expect("route");
        assert_eq!(same_switch.kind, RouteKind::Pcie);
        assert_eq!(same_switch.bandwidth_gbs, 16.0); // 8 GT/s x 16 lanes
        assert_eq!(same_switch.links.len(), 2);
        let other_socket = t.route(r(0), r(3)).expect("route");
        assert_eq!(other_socket.kind, RouteKind::Pcie);
        assert_eq!(other_socket.bandwidth_gbs, 16.0);
        // GPU, switch, CPU, CPU, switch, GPU: the socket link, not a detour by the NIC.
        assert_eq!(other_socket.links.len(), 5);
    }

    #[test]
    fn broken_fixtures_name_element_attribute_and_line() {
        for (file, want) in [
            (
                "bad_missing_busid.xml",
                "bad_missing_busid.xml:4:7: <pci>: missing attribute `busid`",
            ),
            (
                "bad_nvlink_target.xml",
                "bad_nvlink_target.xml:10:17: <nvlink> attribute `target`: no <gpu> in this file has bus id \"0000:c2:00.0\"",
            ),
            (
                "bad_sm.xml",
                "bad_sm.xml:4:20: <gpu> attribute `sm`: expected an integer, found \"ninety\"",
            ),
            (
                "bad_syntax.xml",
                "bad_syntax.xml:5:5: expected 'gpu' tag, not 'pci'",
            ),
        ] {
            let e = Topology::parse(&fixture(file).display().to_string())
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains(want), "{file}: {e}");
        }
    }

    const ONE_GPU: &str = r#"<system version="1"><cpu><pci busid="0000:01:00.0" link_speed="16.0 GT/s PCIe" link_width="16"><gpu dev="0" sm="90"/></pci></cpu></system>"#;

    #[test]
    fn small_documents() {
        let t = Topology::from_nccl_xml(ONE_GPU).expect("valid");
        assert_eq!(t.name(), "nccl-xml");
        assert_eq!(t.num_ranks(), 1);
        assert!(t.families().is_empty());
    }

    #[test]
    fn errors_are_typed_and_placed() {
        let e = err("<topology/>");
        assert!(matches!(&e, TopologyError::Xml { element, .. } if element == "topology"));
        assert_eq!(e.pos(), Some(TextPos { line: 1, column: 1 }));
        let e = err(r#"<system version="2"/>"#);
        assert!(
            e.to_string().contains("<system> attribute `version`"),
            "{e}"
        );
        assert!(matches!(
            err("<system version=\"1\"></system>"),
            TopologyError::NoGpus
        ));
        let e = err("<system><cpu>\n<gpu sm=\"90\"/></cpu></system>");
        assert!(
            e.to_string()
                .contains("2:1: <gpu>: a <gpu> must be the child of the <pci>"),
            "{e}"
        );
        let e = err(&ONE_GPU.replace("link_width=\"16\"", ""));
        assert!(
            e.to_string()
                .contains("<pci>: missing attribute `link_width`"),
            "{e}"
        );
        let e = err(&ONE_GPU.replace("16.0 GT/s PCIe", "fast"));
        assert!(
            e.to_string()
                .contains("<pci> attribute `link_speed`: expected a speed"),
            "{e}"
        );
        let e = err(&ONE_GPU.replace(" dev=\"0\"", ""));
        assert!(
            e.to_string().contains("<gpu>: missing attribute `dev`"),
            "{e}"
        );
        let e = err(&ONE_GPU.replace(
            "<gpu dev=\"0\" sm=\"90\"/>",
            "<gpu dev=\"0\" sm=\"90\"><nvlink target=\"x\" count=\"2\" tclass=\"switch\"/></gpu>",
        ));
        assert!(e.to_string().contains("<nvlink> attribute `tclass`"), "{e}");
        let e = err(&ONE_GPU.replace(
            "<gpu dev=\"0\" sm=\"90\"/>",
            "<gpu dev=\"0\" sm=\"90\"><nvlink count=\"2\" tclass=\"0x030200\"/></gpu>",
        ));
        assert!(
            e.to_string()
                .contains("<nvlink>: missing attribute `target`"),
            "{e}"
        );
        let e = err(&ONE_GPU.replace("<gpu dev=\"0\" sm=\"90\"/>", "<gpu dev=\"0\" sm=\"90\"><nvlink target=\"0000:01:00.0\" count=\"2\" tclass=\"0x030200\"/></gpu>"));
        assert!(e.to_string().contains("from a GPU to itself"), "{e}");
        let two = r#"<system><cpu>
            <pci busid="a" link_speed="8 GT/s" link_width="16"><gpu dev="0" sm="70" rank="1"/></pci>
            <pci busid="b" link_speed="8 GT/s" link_width="16"><gpu dev="1" sm="70" rank="1"/></pci>
            </cpu></system>"#;
        let e = err(two);
        assert!(
            e.to_string().contains(
                "3:85: <gpu> attribute `rank`: rank 1 is also given to the <gpu> on line 2"
            ),
            "{e}"
        );
        let e = err("<system><cpu>");
        assert!(matches!(e, TopologyError::XmlSyntax { .. }), "{e}");
        let e = err("<!DOCTYPE x [<!ENTITY a \"b\">]><system/>");
        assert!(e.to_string().starts_with("NCCL topology XML "), "{e}");
        let e = err(
            r#"<system><pci busid="a" link_speed="8 GT/s" link_width="16"><gpu dev="0" sm="70"/></pci></system>"#,
        );
        assert!(e.to_string().contains("not reached from a <cpu>"), "{e}");
    }

    #[test]
    fn gpus_without_rank_are_left_out_and_ranks_renumbered() {
        let xml = r#"<system><cpu>
            <pci busid="0000:0a:00.0" link_speed="16 GT/s" link_width="16"><gpu dev="0" sm="80" rank="9"/></pci>
            <pci busid="0000:0b:00.0" link_speed="16 GT/s" link_width="16"><gpu dev="1" sm="80"/></pci>
            <pci busid="0000:0c:00.0" link_speed="16 GT/s" link_width="16"><gpu dev="2" sm="80" rank="8">
              <nvlink target="0000:0b:00.0" count="4" tclass="0x030200"/>
              <nvlink target="0000:0a:00.0" count="4" tclass="0x030200"/>
            </gpu></pci>
            </cpu></system>"#;
        let t = Topology::from_nccl_xml(xml).expect("valid");
        assert_eq!(t.num_ranks(), 2);
        let names: Vec<&str> = (0..2)
            .filter_map(|i| match t.gpu(r(i)).and_then(|d| t.device(d)) {
                Some(Device::Gpu { name, .. }) => Some(name.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(names, ["0000:0c:00.0", "0000:0a:00.0"]);
        let route = t.route(r(0), r(1)).expect("route");
        assert_eq!(
            (route.kind, route.bandwidth_gbs),
            (RouteKind::Direct, 100.0)
        );
    }

    #[test]
    fn several_ranks_on_one_gpu_share_its_links() {
        let xml = r#"<system><cpu>
            <pci busid="0000:0a:00.0" link_speed="32.0 GT/s PCIe" link_width="16">
              <gpu dev="0" sm="90" rank="0"><nvlink target="fffffff:ff:ff.0" count="18" tclass="0x068000"/></gpu>
              <gpu dev="0" sm="90" rank="1"><nvlink target="fffffff:ff:ff.0" count="18" tclass="0x068000"/></gpu>
            </pci>
            </cpu></system>"#;
        let t = Topology::from_nccl_xml(xml).expect("valid");
        assert_eq!(t.num_ranks(), 2);
        assert!(t.has_switch());
        let route = t.route(r(0), r(1)).expect("route");
        assert_eq!(route.kind, RouteKind::Switch);
        assert!((route.bandwidth_gbs - 239.0).abs() < 1e-9);
        assert!(matches!(
            t.gpu(r(1)).and_then(|d| t.device(d)),
            Some(Device::Gpu { name, .. }) if name == "0000:0a:00.0#1"
        ));
    }

    #[test]
    fn c2c_and_cpu_nvlink_reach_the_cpu() {
        let xml = r#"<system><cpu arch="arm64">
            <pci busid="0009:01:00.0" link_speed="32.0 GT/s PCIe" link_width="16">
              <gpu dev="0" sm="90" rank="0"><c2c bw="56376" count="8"/></gpu>
            </pci>
            <pci busid="0009:02:00.0" link_speed="32.0 GT/s PCIe" link_width="16">
              <gpu dev="1" sm="70" rank="1"><nvlink target="0009:00:00.0" count="3" tclass="0x068001"/></gpu>
            </pci>
            </cpu></system>"#;
        let t = Topology::from_nccl_xml(xml).expect("valid");
        let to_cpu: Vec<f64> = t
            .links()
            .filter(|(_, _, _, l)| l.kind == LinkKind::NvLink)
            .map(|(_, _, _, l)| l.bandwidth_gbs)
            .collect();
        assert_eq!(to_cpu.len(), 2);
        assert!((to_cpu[0] - 451.008).abs() < 1e-9);
        assert_eq!(to_cpu[1], 60.0);
        // GPU to GPU through the CPU is a host path.
        let route = t.route(r(0), r(1)).expect("route");
        assert_eq!(route.kind, RouteKind::Pcie);
        assert_eq!(route.bandwidth_gbs, 64.0);
    }

    #[test]
    fn several_files_make_a_cluster() {
        let text = std::fs::read_to_string(fixture("dgx_h100_nvswitch.xml")).expect("fixture");
        let t = Topology::from_nccl_xml_nodes(&[&text, &text]).expect("valid");
        assert_eq!((t.num_ranks(), t.nodes(), t.gpus_per_node()), (16, 2, 8));
        assert_eq!(t.families(), vec![Family::Cluster]);
        let nets = t
            .devices()
            .filter(|(_, d)| **d == Device::NetSwitch)
            .count();
        assert_eq!(nets, 1);
        let route = t.route(r(0), r(8)).expect("route");
        assert_eq!((route.kind, route.bandwidth_gbs), (RouteKind::Net, 50.0));
        let e = Topology::from_nccl_xml_nodes(&[&text, ONE_GPU]).err();
        assert!(matches!(e, Some(TopologyError::Irregular { .. })), "{e:?}");
        let e = Topology::from_nccl_xml_nodes(&[&text, "<system>"]).err();
        assert!(e.is_some_and(|e| e.to_string().starts_with("node 1: NCCL topology XML 1:")));
    }

    /// Damaged files give errors, never panics.
    #[test]
    fn damaged_input_never_panics() {
        let text = std::fs::read_to_string(fixture("dgx_h100_nvswitch.xml")).expect("fixture");
        let cut = |i: usize| text.get(..i).unwrap_or("");
        for i in (0..text.len()).step_by(61) {
            let _ = Topology::from_nccl_xml(cut(i));
            let mut damaged = text.clone();
            if damaged.is_char_boundary(i) && damaged.is_char_boundary(i + 1) {
                damaged.replace_range(i..i + 1, "\"");
                let _ = Topology::from_nccl_xml(&damaged);
            }
        }
        for attr in [
            "count=\"5\"",
            "link_width=\"16\"",
            "speed=\"400000\"",
            "sm=\"90\"",
        ] {
            for value in ["-1", "0", "99999999999999999999", "0x7fffffffffffffff", ""] {
                let name = attr.split('=').next().unwrap_or("");
                let damaged = text.replace(attr, &format!("{name}=\"{value}\""));
                let _ = Topology::from_nccl_xml(&damaged);
            }
        }
    }

    #[test]
    fn integers_read_as_nccl_does() {
        assert_eq!(parse_int("42"), Some(42));
        assert_eq!(parse_int(" 0x1f "), Some(31));
        assert_eq!(parse_int("-1"), Some(-1));
        assert_eq!(parse_int(""), None);
        assert_eq!(parse_int("4x"), None);
        assert_eq!(parse_int("99999999999999999999"), None);
    }

    #[test]
    fn nvlink_figures() {
        assert_eq!(nvlink_gbs(90, 18), 478.0);
        assert_eq!(nvlink_gbs(80, 12), 300.0);
        assert_eq!(nvlink_gbs(100, 18), 900.0);
        assert_eq!(nvlink_gbs(70, 6), 120.0);
    }
}
