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
mod tests;
