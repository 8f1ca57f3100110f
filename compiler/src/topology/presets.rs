//! Preset topologies, named by a spec string:
//!
//! | spec | machine |
//! |---|---|
//! | `nvswitch:N` | one node, `N >= 1` GPUs, each joined to one NVSwitch ([`LinkKind::NvSwitch`], [`NVSWITCH_GBS`] GB/s, [`NVLINK_US`] µs) |
//! | `hgx-h200:N` | `nvswitch:N` for `1 <= N <= 8`, plus one NIC per GPU: GPU–NIC PCIe Gen5 x16 ([`PCIE_GEN5_GBS`] GB/s, [`PCIE_US`] µs), NIC–network switch 400 Gb/s ([`NIC_GBS`] GB/s, [`NET_US`] µs) |
//! | `cluster:NxG` | `N >= 1` nodes of `G >= 1` GPUs: each node as `hgx-h200:G` (without the limit of 8), all NICs on one network switch; `N*G` ranks |
//! | `ring:N` | one node, `N >= 2` GPUs, GPU `i` joined to GPU `(i+1) % N` by NVLink ([`RING_LINK_GBS`] GB/s: 4 links, [`NVLINK_US`] µs); for `N = 2` a single link. No switch |
//!
//! Ranks are GPU indices (node-major). GPUs are named `gpuL` (`L` the index within the
//! node) and NICs `nicL`. Figures are an NVIDIA H200's: 18 NVLinks (`NV18` in `nvidia-smi
//! topo -m`) of 26.56 GB/s per direction = 478 GB/s; measured data rates are lower (see
//! `compiler/TOPOLOGY.md`). At most [`super::MAX_RANKS`] ranks.

use super::build::Builder;
use super::{Device, Link, LinkKind, MAX_RANKS, Topology, TopologyError};

/// GPU to NVSwitch, per direction (H200: NV18).
pub const NVSWITCH_GBS: f64 = 478.0;
/// One NVLink hop.
pub const NVLINK_US: f64 = 0.7;
/// A ring preset's GPU-to-GPU link: 4 NVLinks of 26.5 GB/s.
pub const RING_LINK_GBS: f64 = 106.0;
/// PCIe Gen5 x16: 32 GT/s × 16 lanes / 8.
pub const PCIE_GEN5_GBS: f64 = 64.0;
/// One PCIe hop.
pub const PCIE_US: f64 = 1.0;
/// A 400 Gb/s NIC.
pub const NIC_GBS: f64 = 50.0;
/// NIC to network switch.
pub const NET_US: f64 = 2.0;

/// The largest GPU count of an `hgx-h200` board.
pub const HGX_MAX_GPUS: u64 = 8;

const NAMES: [&str; 4] = ["nvswitch", "hgx-h200", "cluster", "ring"];

/// Builds the preset named by `spec` (see the module docs).
pub fn preset(spec: &str) -> Result<Topology, TopologyError> {
    let spec = spec.trim();
    let (word, arg) = match spec.split_once(':') {
        Some((w, a)) => (w, Some(a)),
        None => (spec, None),
    };
    let bad = |reason: String| TopologyError::BadPreset {
        spec: spec.to_string(),
        reason,
    };
    if !NAMES.contains(&word) {
        return Err(TopologyError::UnknownPreset {
            spec: spec.to_string(),
            hint: hint(spec, word, arg),
        });
    }
    let Some(arg) = arg else {
        let example = if word == "cluster" { "2x8" } else { "8" };
        let what = if word == "cluster" {
            "node and GPU counts"
        } else {
            "GPU count"
        };
        return Err(bad(format!("needs a {what}, e.g. {word}:{example}")));
    };
    match word {
        "nvswitch" => {
            let n = count(arg, "GPU count").map_err(bad)?;
            check_ranks(n)?;
            single_node(&format!("nvswitch:{n}"), n as u32, false)
        }
        "hgx-h200" => {
            let n = count(arg, "GPU count").map_err(bad)?;
            if n > HGX_MAX_GPUS {
                return Err(bad(format!(
                    "an HGX H200 board has 1 to {HGX_MAX_GPUS} GPUs, not {n}; use cluster:NxG for more"
                )));
            }
            single_node(&format!("hgx-h200:{n}"), n as u32, true)
        }
        "cluster" => {
            let Some((a, b)) = arg.split_once(['x', 'X']) else {
                return Err(bad(format!(
                    "expected NxG (nodes x GPUs per node), e.g. cluster:2x8, found \"{arg}\""
                )));
            };
            let nodes = count(a, "node count").map_err(bad)?;
            let per = count(b, "GPUs-per-node count").map_err(bad)?;
            check_ranks(nodes.saturating_mul(per))?;
            cluster(&format!("cluster:{nodes}x{per}"), nodes as u32, per as u32)
        }
        _ => {
            let n = count(arg, "GPU count").map_err(bad)?;
            if n < 2 {
                return Err(bad(
                    "a ring needs at least 2 GPUs (use nvswitch:1 for a single GPU)".into(),
                ));
            }
            check_ranks(n)?;
            ring(&format!("ring:{n}"), n as u32)
        }
    }
}

/// A positive decimal count.
fn count(text: &str, what: &str) -> Result<u64, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "the {what} must be a positive whole number, found \"{text}\""
        ));
    }
    // More than 12 digits is far past every limit; keep the parse from overflowing.
    let n: u64 = if text.trim_start_matches('0').len() > 12 {
        u64::MAX
    } else {
        text.parse().unwrap_or(u64::MAX)
    };
    if n == 0 {
        return Err(format!("the {what} must be at least 1"));
    }
    Ok(n)
}

fn check_ranks(n: u64) -> Result<(), TopologyError> {
    if n > MAX_RANKS as u64 {
        return Err(TopologyError::TooLarge {
            what: "ranks",
            count: n,
            limit: MAX_RANKS as u64,
        });
    }
    Ok(())
}

fn nvswitch_link() -> Link {
    Link {
        kind: LinkKind::NvSwitch,
        bandwidth_gbs: NVSWITCH_GBS,
        latency_us: NVLINK_US,
    }
}

fn pcie_link() -> Link {
    Link {
        kind: LinkKind::Pcie,
        bandwidth_gbs: PCIE_GEN5_GBS,
        latency_us: PCIE_US,
    }
}

fn net_link() -> Link {
    Link {
        kind: LinkKind::Net,
        bandwidth_gbs: NIC_GBS,
        latency_us: NET_US,
    }
}

/// Adds node `node`: an NVSwitch, `g` GPUs on it, and with `nic_to` a NIC per GPU joined
/// to that network switch.
fn add_node(
    b: &mut Builder,
    node: u32,
    g: u32,
    nic_to: Option<petgraph::graph::NodeIndex>,
) -> Result<(), TopologyError> {
    let sw = b.add(Device::NvSwitch { node })?;
    for local in 0..g {
        let gpu = b.add_gpu(node, None, format!("gpu{local}"))?;
        b.link(gpu, sw, nvswitch_link())?;
        if let Some(net) = nic_to {
            let nic = b.add(Device::Nic {
                node,
                name: format!("nic{local}"),
            })?;
            b.link(gpu, nic, pcie_link())?;
            b.link(nic, net, net_link())?;
        }
    }
    Ok(())
}

fn single_node(name: &str, n: u32, nics: bool) -> Result<Topology, TopologyError> {
    let mut b = Builder::new();
    let net = if nics {
        Some(b.add(Device::NetSwitch)?)
    } else {
        None
    };
    add_node(&mut b, 0, n, net)?;
    b.finish(name.to_string())
}

fn cluster(name: &str, nodes: u32, per: u32) -> Result<Topology, TopologyError> {
    let mut b = Builder::new();
    let net = b.add(Device::NetSwitch)?;
    for node in 0..nodes {
        add_node(&mut b, node, per, Some(net))?;
    }
    b.finish(name.to_string())
}

fn ring(name: &str, n: u32) -> Result<Topology, TopologyError> {
    let mut b = Builder::new();
    let mut gpus = Vec::with_capacity(n as usize);
    for i in 0..n {
        gpus.push(b.add_gpu(0, None, format!("gpu{i}"))?);
    }
    let links = if n == 2 { 1 } else { n as usize };
    for i in 0..links {
        b.link(
            gpus[i],
            gpus[(i + 1) % gpus.len()],
            Link {
                kind: LinkKind::NvLink,
                bandwidth_gbs: RING_LINK_GBS,
                latency_us: NVLINK_US,
            },
        )?;
    }
    b.finish(name.to_string())
}

/// A did-you-mean for an unknown preset word, or a note about file extensions.
fn hint(spec: &str, word: &str, arg: Option<&str>) -> Option<String> {
    let lower = word.to_ascii_lowercase();
    let prefix = NAMES
        .iter()
        .find(|n| lower.len() >= 3 && n.starts_with(lower.as_str()))
        .map(|&n| (0, n));
    let best = prefix.or_else(|| {
        NAMES
            .iter()
            .map(|&n| (edit_distance(&lower, n), n))
            .min()
            .filter(|&(d, n)| d <= 2.max(n.len() / 3))
    });
    if let Some((_, name)) = best {
        return Some(match arg {
            Some(a) => format!("did you mean \"{name}:{a}\"?"),
            None => format!("did you mean \"{name}\"?"),
        });
    }
    if spec.contains(['/', '\\', '.']) {
        return Some(
            "a topology file must end in .json (coll format) or .xml (NCCL topology XML)".into(),
        );
    }
    None
}

/// Levenshtein distance, counting a swap of neighbours as one edit.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let w = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * w];
    for i in 0..=a.len() {
        for j in 0..=b.len() {
            d[i * w + j] = if i == 0 {
                j
            } else if j == 0 {
                i
            } else {
                let sub = d[(i - 1) * w + j - 1] + usize::from(a[i - 1] != b[j - 1]);
                let mut best = sub.min(d[(i - 1) * w + j] + 1).min(d[i * w + j - 1] + 1);
                if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                    best = best.min(d[(i - 2) * w + j - 2] + 1);
                }
                best
            };
        }
    }
    d[a.len() * w + b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::RankId;
    use crate::topology::{Family, RouteKind};

    fn p(spec: &str) -> Topology {
        Topology::preset(spec).expect("preset builds")
    }

    fn err(spec: &str) -> String {
        match Topology::preset(spec) {
            Ok(t) => panic!("{spec} should fail, built {}", t.summary()),
            Err(e) => e.to_string(),
        }
    }

    fn r(i: usize) -> RankId {
        RankId::new(i)
    }

    #[test]
    fn nvswitch_counts_families_routes() {
        let t = p("nvswitch:8");
        assert_eq!(t.name(), "nvswitch:8");
        assert_eq!((t.num_ranks(), t.nodes(), t.gpus_per_node()), (8, 1, 8));
        assert_eq!((t.num_devices(), t.num_links()), (9, 8));
        assert_eq!(t.families(), vec![Family::NvSwitch]);
        assert!(t.has_switch());
        let route = t.route(r(0), r(5)).expect("route 0->5");
        assert_eq!(route.kind, RouteKind::Switch);
        assert_eq!(route.bandwidth_gbs, 478.0);
        assert!((route.latency_us - 1.4).abs() < 1e-9);
        assert_eq!(route.links.len(), 2);
        assert!(t.route(r(3), r(3)).is_none());
        assert!(t.route(r(0), r(8)).is_none());
    }

    #[test]
    fn nvswitch_one_gpu_is_valid() {
        let t = p("nvswitch:1");
        assert_eq!(t.num_ranks(), 1);
        assert_eq!(t.families(), vec![Family::NvSwitch]);
        assert!(t.has_switch());
    }

    #[test]
    fn hgx_counts_families_routes() {
        let t = p("hgx-h200:8");
        assert_eq!(t.num_ranks(), 8);
        // 8 GPUs + 8 NICs + NVSwitch + network switch; per GPU: switch, NIC, NIC-net.
        assert_eq!((t.num_devices(), t.num_links()), (18, 24));
        let f = t.families();
        assert!(
            f.contains(&Family::NvSwitch) && f.contains(&Family::Hgx),
            "{f:?}"
        );
        // A network is present, so it is also a (one-node) cluster.
        assert_eq!(f, vec![Family::NvSwitch, Family::Hgx, Family::Cluster]);
        assert!(t.has_switch());
        let route = t.route(r(1), r(7)).expect("route");
        assert_eq!(route.kind, RouteKind::Switch);
        assert_eq!(route.bandwidth_gbs, NVSWITCH_GBS);
        assert_eq!(p("hgx-h200:1").num_ranks(), 1);
        assert!(err("hgx-h200:9").contains("1 to 8 GPUs"));
    }

    #[test]
    fn cluster_counts_families_routes() {
        let t = p("cluster:2x4");
        assert_eq!(t.name(), "cluster:2x4");
        assert_eq!((t.num_ranks(), t.nodes(), t.gpus_per_node()), (8, 2, 4));
        assert_eq!(t.node_of(r(5)), 1);
        assert_eq!(t.local_of(r(5)), 1);
        assert_eq!(t.rank_at(1, 3), Some(r(7)));
        assert_eq!(t.rank_at(2, 0), None);
        // Two nodes: not one NVSwitch domain, so neither nvswitch nor hgx.
        assert_eq!(t.families(), vec![Family::Cluster]);
        assert!(t.has_switch());

        let route = t.route(r(0), r(4)).expect("route 0->4");
        assert_eq!(route.kind, RouteKind::Net);
        assert_eq!(route.bandwidth_gbs, NIC_GBS);
        assert_eq!(route.links.len(), 4);
        assert!((route.latency_us - 6.0).abs() < 1e-9);
        // Never through another GPU: only the two end devices are GPUs.
        let gpus_on_path = route
            .devices
            .iter()
            .filter(|&&d| t.device(d).is_some_and(|d| d.is_gpu()))
            .count();
        assert_eq!(gpus_on_path, 2);
        for &l in &route.links {
            let (a, b, _) = t.link(l).expect("link");
            for d in [a, b] {
                if let Some(Device::Gpu { rank, .. }) = t.device(d) {
                    assert!(*rank == r(0) || *rank == r(4));
                }
            }
        }
        // Inside a node the switch wins.
        let local = t.route(r(4), r(7)).expect("route");
        assert_eq!(local.kind, RouteKind::Switch);
        assert_eq!(local.bandwidth_gbs, NVSWITCH_GBS);
    }

    #[test]
    fn cluster_of_one_node_is_hgx_like() {
        let t = p("cluster:1x8");
        assert_eq!(
            t.families(),
            vec![Family::NvSwitch, Family::Hgx, Family::Cluster]
        );
    }

    #[test]
    fn ring_counts_families_routes() {
        let t = p("ring:4");
        assert_eq!((t.num_ranks(), t.num_devices(), t.num_links()), (4, 4, 4));
        assert_eq!(t.families(), vec![Family::Ring]);
        assert!(!t.has_switch());
        let next = t.route(r(0), r(1)).expect("route 0->1");
        assert_eq!(next.kind, RouteKind::Direct);
        assert_eq!(next.bandwidth_gbs, RING_LINK_GBS);
        let wrap = t.route(r(3), r(0)).expect("route 3->0");
        assert_eq!(wrap.kind, RouteKind::Direct);
        assert!(t.route(r(0), r(2)).is_none());

        let two = p("ring:2");
        assert_eq!(two.num_links(), 1);
        // Two GPUs joined directly are also all-to-all.
        assert_eq!(two.families(), vec![Family::NvSwitch, Family::Ring]);
        assert_eq!(p("ring:3").families(), vec![Family::NvSwitch, Family::Ring]);
        assert_eq!(p("ring:5").families(), vec![Family::Ring]);
    }

    #[test]
    fn bad_specs_name_the_presets() {
        let e = err("nvswich:8");
        assert_eq!(
            e,
            "unknown topology preset \"nvswich:8\"; presets: nvswitch:N, hgx-h200:N, cluster:NxG, ring:N; did you mean \"nvswitch:8\"?"
        );
        assert!(err("hgx:8").contains("did you mean \"hgx-h200:8\"?"));
        assert!(err("clutser:2x8").contains("did you mean \"cluster:2x8\"?"));
        assert!(err("topo.txt").contains("must end in .json"));
        assert!(!err("mesh:4").contains("did you mean"));
        assert!(err("nvswitch").contains("needs a GPU count, e.g. nvswitch:8"));
        assert!(err("cluster").contains("e.g. cluster:2x8"));
        assert!(err("nvswitch:0").contains("at least 1"));
        assert!(err("nvswitch:-1").contains("positive whole number"));
        assert!(err("nvswitch:8.5").contains("positive whole number"));
        assert!(err("cluster:2").contains("expected NxG"));
        assert!(err("cluster:2x").contains("GPUs-per-node count"));
        assert!(err("ring:1").contains("at least 2 GPUs"));
        assert!(err("").contains("unknown topology preset \"\""));
    }

    #[test]
    fn sizes_are_bounded() {
        assert!(err("nvswitch:65537").contains("exceed the limit of 65536"));
        assert!(err("cluster:100000x100000").contains("exceed the limit"));
        assert!(err("ring:99999999999999999999999").contains("exceed the limit"));
        assert_eq!(p("cluster:256x256").num_ranks(), 65_536);
    }

    #[test]
    fn specs_are_normalised() {
        assert_eq!(p("nvswitch:08").name(), "nvswitch:8");
        assert_eq!(p(" cluster:2X4 ").name(), "cluster:2x4");
    }

    #[test]
    fn every_preset_round_trips_through_json() {
        for spec in [
            "nvswitch:1",
            "nvswitch:8",
            "hgx-h200:1",
            "hgx-h200:8",
            "cluster:1x1",
            "cluster:2x4",
            "cluster:3x8",
            "ring:2",
            "ring:3",
            "ring:8",
        ] {
            let t = p(spec);
            let json = t.to_json();
            let back = Topology::from_json(&json).expect("round trip");
            assert_eq!(back, t, "{spec}");
            assert_eq!(back.to_json(), json, "{spec}");
            assert_eq!(back.families(), t.families(), "{spec}");
        }
    }

    #[test]
    fn edit_distance_counts_swaps_once() {
        assert_eq!(edit_distance("ring", "ring"), 0);
        assert_eq!(edit_distance("rnig", "ring"), 1);
        assert_eq!(edit_distance("nvswich", "nvswitch"), 1);
        assert_eq!(edit_distance("", "ring"), 4);
    }
}
