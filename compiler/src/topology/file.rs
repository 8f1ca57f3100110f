//! Our topology file format: JSON, read with [`Topology::from_json`] and written with
//! [`Topology::to_json`]. `compiler/TOPOLOGY.md` has the full description and an example.
//!
//! ```json
//! {
//!   "version": 1,
//!   "name": "two-gpus",
//!   "devices": [
//!     {"id": "g0", "kind": "gpu", "node": 0, "rank": 0, "name": "0000:18:00.0"},
//!     {"id": "g1", "kind": "gpu", "node": 0, "rank": 1},
//!     {"id": "sw", "kind": "nvswitch", "node": 0}
//!   ],
//!   "links": [
//!     {"between": ["g0", "sw"], "kind": "nvswitch", "bandwidth_gbs": 478, "latency_us": 0.7},
//!     {"between": ["g1", "sw"], "kind": "nvswitch", "bandwidth_gbs": 478, "latency_us": 0.7}
//!   ]
//! }
//! ```
//!
//! - `version`: optional, must be 1. `name`: optional (default: the file name, or `json`).
//! - `devices[]`: `id` (unique string), `kind` (`gpu`, `nvswitch`, `pci_switch`, `cpu`,
//!   `nic`, `net_switch`), `node` (default 0; not allowed on `net_switch`), `rank` (GPUs
//!   only; give it on every GPU or on none: by default GPUs are ranked in order of
//!   appearance, node-major), `name` (GPUs and NICs only; default: the id).
//! - `links[]`: `between` (two device ids), `kind` (`nvlink`, `nvswitch`, `pcie`, `net`),
//!   `bandwidth_gbs` (GB/s per direction, `> 0`), `latency_us` (µs, `>= 0`).
//! - Unknown fields are errors (they are usually typos). Then the invariants of
//!   [`super`] apply: ranks `0..n-1` once each and node-major, regular nodes, and so on.
//!
//! `to_json` names devices `gpu<rank>`, `nvswitch<k>`, `pci<k>`, `cpu<k>`, `nic<k>`, `net<k>`
//! (`k` counting devices of that kind in id order), gives every field explicitly and keeps
//! device and link order, so reading it back gives an equal topology (ids of a file that
//! was read are not kept; GPU names are).

use super::build::{Builder, link_problem};
use super::{Device, Link, LinkKind, TextPos, Topology, TopologyError};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// The JSON format version this build reads and writes.
pub const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTopology {
    #[serde(default = "default_version")]
    version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    devices: Vec<FileDevice>,
    #[serde(default)]
    links: Vec<FileLink>,
}

fn default_version() -> u32 {
    FORMAT_VERSION
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Kind {
    Gpu,
    #[serde(rename = "nvswitch")]
    NvSwitch,
    PciSwitch,
    Cpu,
    Nic,
    NetSwitch,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDevice {
    id: String,
    kind: Kind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    node: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rank: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLink {
    between: [String; 2],
    kind: LinkKind,
    bandwidth_gbs: f64,
    latency_us: f64,
}

/// Reads our format; `default_name` names the topology when the file gives no name.
pub(crate) fn from_json(text: &str, default_name: Option<&str>) -> Result<Topology, TopologyError> {
    let file: FileTopology = serde_json::from_str(text).map_err(json_error)?;
    if file.version != FORMAT_VERSION {
        return Err(TopologyError::JsonVersion {
            found: file.version,
        });
    }
    let mut b = Builder::new();
    let mut ids = HashMap::with_capacity(file.devices.len());
    for d in file.devices {
        let bad = |reason: &str| TopologyError::BadDevice {
            device: format!("\"{}\"", d.id),
            reason: reason.to_string(),
        };
        if d.rank.is_some() && d.kind != Kind::Gpu {
            return Err(bad("only GPUs have a rank"));
        }
        if d.name.is_some() && !matches!(d.kind, Kind::Gpu | Kind::Nic) {
            return Err(bad("only GPUs and NICs have a name"));
        }
        let node = d.node.unwrap_or(0);
        let name = || d.name.clone().unwrap_or_else(|| d.id.clone());
        let n = match d.kind {
            Kind::Gpu => b.add_gpu(node, d.rank, name())?,
            Kind::NvSwitch => b.add(Device::NvSwitch { node })?,
            Kind::PciSwitch => b.add(Device::PciSwitch { node })?,
            Kind::Cpu => b.add(Device::Cpu { node })?,
            Kind::Nic => b.add(Device::Nic { node, name: name() })?,
            Kind::NetSwitch => {
                if d.node.is_some() {
                    return Err(bad("the network switch belongs to no node; remove `node`"));
                }
                b.add(Device::NetSwitch)?
            }
        };
        if ids.insert(d.id.clone(), n).is_some() {
            return Err(TopologyError::DuplicateDevice { id: d.id });
        }
    }
    for (index, l) in file.links.into_iter().enumerate() {
        let [a, c] = &l.between;
        let find = |id: &String| {
            ids.get(id)
                .copied()
                .ok_or_else(|| TopologyError::UnknownDevice {
                    index,
                    id: id.clone(),
                })
        };
        let (na, nc) = (find(a)?, find(c)?);
        let link = Link {
            kind: l.kind,
            bandwidth_gbs: l.bandwidth_gbs,
            latency_us: l.latency_us,
        };
        let label = || format!("{index} (\"{a}\" - \"{c}\")");
        if na == nc {
            return Err(TopologyError::BadLink {
                link: label(),
                reason: "both ends are the same device".into(),
            });
        }
        if let Some(reason) = link_problem(&link) {
            return Err(TopologyError::BadLink {
                link: label(),
                reason,
            });
        }
        b.link(na, nc, link)?;
    }
    let name = file
        .name
        .or_else(|| default_name.map(str::to_string))
        .unwrap_or_else(|| "json".to_string());
    b.finish(name)
}

fn json_error(e: serde_json::Error) -> TopologyError {
    let (line, column) = (e.line(), e.column());
    let full = e.to_string();
    let suffix = format!(" at line {line} column {column}");
    let message = full.strip_suffix(&suffix).unwrap_or(&full).to_string();
    TopologyError::Json {
        pos: TextPos {
            line: u32::try_from(line).unwrap_or(u32::MAX),
            column: u32::try_from(column).unwrap_or(u32::MAX),
        },
        message,
    }
}

/// Writes our format: one device or link per line.
pub(crate) fn to_json(t: &Topology) -> String {
    let mut counters: HashMap<&'static str, usize> = HashMap::new();
    let mut ids = Vec::with_capacity(t.num_devices());
    let mut devices = Vec::with_capacity(t.num_devices());
    for (_, d) in t.devices() {
        let (kind, prefix) = match d {
            Device::Gpu { .. } => (Kind::Gpu, "gpu"),
            Device::NvSwitch { .. } => (Kind::NvSwitch, "nvswitch"),
            Device::PciSwitch { .. } => (Kind::PciSwitch, "pci"),
            Device::Cpu { .. } => (Kind::Cpu, "cpu"),
            Device::Nic { .. } => (Kind::Nic, "nic"),
            Device::NetSwitch => (Kind::NetSwitch, "net"),
        };
        let id = match d {
            Device::Gpu { rank, .. } => format!("gpu{}", rank.0),
            _ => {
                let k = counters.entry(prefix).or_insert(0);
                *k += 1;
                format!("{prefix}{}", *k - 1)
            }
        };
        let name = match d {
            Device::Gpu { name, .. } | Device::Nic { name, .. } => Some(name.clone()),
            _ => None,
        };
        devices.push(FileDevice {
            id: id.clone(),
            kind,
            node: d.node(),
            rank: d.rank().map(|r| r.0),
            name,
        });
        ids.push(id);
    }
    let links: Vec<FileLink> = t
        .links()
        .map(|(_, a, b, l)| FileLink {
            between: [ids[a.index()].clone(), ids[b.index()].clone()],
            kind: l.kind,
            bandwidth_gbs: l.bandwidth_gbs,
            latency_us: l.latency_us,
        })
        .collect();
    let line = |v: Result<String, serde_json::Error>| v.unwrap_or_default();
    let name = serde_json::to_string(t.name()).unwrap_or_default();
    let mut out =
        format!("{{\n  \"version\": {FORMAT_VERSION},\n  \"name\": {name},\n  \"devices\": [\n");
    let body: Vec<String> = devices
        .iter()
        .map(|d| format!("    {}", line(serde_json::to_string(d))))
        .collect();
    out.push_str(&body.join(",\n"));
    out.push_str("\n  ],\n  \"links\": [\n");
    let body: Vec<String> = links
        .iter()
        .map(|l| format!("    {}", line(serde_json::to_string(l))))
        .collect();
    out.push_str(&body.join(",\n"));
    if !links.is_empty() {
        out.push('\n');
    }
    out.push_str("  ]\n}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::RankId;
    use crate::topology::{Family, RouteKind};
    use std::path::Path;

    fn inputs() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/inputs/topo")
    }

    fn err(json: &str) -> String {
        match Topology::from_json(json) {
            Ok(t) => panic!("should fail, built {}", t.summary()),
            Err(e) => e.to_string(),
        }
    }

    const TWO: &str = r#"{"devices": [{"id": "a", "kind": "gpu"}, {"id": "b", "kind": "gpu"}],
        "links": [{"between": ["a", "b"], "kind": "nvlink", "bandwidth_gbs": 100, "latency_us": 1}]}"#;

    #[test]
    fn minimal_file() {
        let t = Topology::from_json(TWO).expect("valid");
        assert_eq!(t.name(), "json");
        assert_eq!(t.num_ranks(), 2);
        assert_eq!(t.families(), vec![Family::NvSwitch, Family::Ring]);
        let route = t.route(RankId(0), RankId(1)).expect("route");
        assert_eq!(route.kind, RouteKind::Direct);
        assert!(matches!(
            t.device(route.devices[0]),
            Some(Device::Gpu { name, .. }) if name == "a"
        ));
    }

    #[test]
    fn custom_ring_fixture() {
        let path = inputs().join("custom_ring4.json");
        let t = Topology::parse(&path.display().to_string()).expect("fixture reads");
        assert_eq!(t.name(), "custom-ring4");
        assert_eq!(t.num_ranks(), 4);
        assert_eq!(t.families(), vec![Family::Ring]);
        assert!(
            t.route(RankId(0), RankId(2))
                .is_none_or(|r| r.kind == RouteKind::Pcie)
        );
        let next = t.route(RankId(2), RankId(3)).expect("route");
        assert_eq!(next.kind, RouteKind::Direct);
        let back = Topology::from_json(&t.to_json()).expect("round trip");
        assert_eq!(back, t);
    }

    #[test]
    fn ranks_default_to_node_major_order_of_appearance() {
        let json = r#"{"devices": [
            {"id": "x", "kind": "gpu", "node": 1}, {"id": "y", "kind": "gpu", "node": 0},
            {"id": "z", "kind": "gpu", "node": 1}, {"id": "w", "kind": "gpu", "node": 0}]}"#;
        let t = Topology::from_json(json).expect("valid");
        let names: Vec<String> = (0..4)
            .filter_map(|r| match t.gpu(RankId(r)).and_then(|d| t.device(d)) {
                Some(Device::Gpu { name, local, .. }) => Some(format!("{name}{local}")),
                _ => None,
            })
            .collect();
        assert_eq!(names, ["y0", "w1", "x0", "z1"]);
        assert_eq!((t.nodes(), t.gpus_per_node()), (2, 2));
        assert!(t.families().is_empty());
    }

    #[test]
    fn explicit_ranks() {
        let json = r#"{"devices": [{"id": "a", "kind": "gpu", "rank": 1}, {"id": "b", "kind": "gpu", "rank": 0}]}"#;
        let t = Topology::from_json(json).expect("valid");
        assert!(matches!(
            t.gpu(RankId(0)).and_then(|d| t.device(d)),
            Some(Device::Gpu { name, .. }) if name == "b"
        ));
    }

    #[test]
    fn validation_errors_name_the_problem() {
        assert_eq!(
            err(r#"{"devices": [{"id": "a", "kind": "gpu"}, {"id": "a", "kind": "gpu"}]}"#),
            "duplicate device id \"a\""
        );
        assert_eq!(
            err(
                r#"{"devices": [{"id": "a", "kind": "gpu"}], "links": [{"between": ["a", "b"], "kind": "nvlink", "bandwidth_gbs": 1, "latency_us": 1}]}"#
            ),
            "link 0 names unknown device \"b\""
        );
        assert!(
            err(r#"{"devices": [{"id": "a", "kind": "gpu"}, {"id": "b", "kind": "gpu"}], "links": [{"between": ["a", "b"], "kind": "nvlink", "bandwidth_gbs": -5, "latency_us": 1}]}"#)
                .contains("bad link 0 (\"a\" - \"b\"): bandwidth must be a positive number of GB/s, found -5")
        );
        assert!(
            err(r#"{"devices": [{"id": "a", "kind": "gpu"}, {"id": "b", "kind": "gpu"}], "links": [{"between": ["a", "b"], "kind": "nvlink", "bandwidth_gbs": 0, "latency_us": 1}]}"#)
                .contains("found 0")
        );
        assert!(
            err(r#"{"devices": [{"id": "a", "kind": "gpu"}], "links": [{"between": ["a", "a"], "kind": "nvlink", "bandwidth_gbs": 1, "latency_us": 1}]}"#)
                .contains("both ends are the same device")
        );
        assert!(
            err(r#"{"devices": [{"id": "a", "kind": "gpu", "rank": 0}, {"id": "b", "kind": "gpu", "rank": 0}]}"#)
                .contains("rank 0 is given to both GPU \"a\" and GPU \"b\"")
        );
        assert!(
            err(r#"{"devices": [{"id": "a", "kind": "gpu", "rank": 0}, {"id": "b", "kind": "gpu", "rank": 2}]}"#)
                .contains("GPU \"b\" has rank 2, but there are 2 GPUs")
        );
        assert!(
            err(r#"{"devices": [{"id": "a", "kind": "gpu", "rank": 0}, {"id": "b", "kind": "gpu"}]}"#)
                .contains("every GPU gives its rank or none does")
        );
        assert!(
            err(r#"{"devices": [{"id": "a", "kind": "gpu", "node": 1, "rank": 0}, {"id": "b", "kind": "gpu", "rank": 1}]}"#)
                .contains("node-major")
        );
        assert_eq!(
            err(
                r#"{"devices": [{"id": "a", "kind": "gpu"}, {"id": "b", "kind": "gpu", "node": 1}, {"id": "c", "kind": "gpu", "node": 1}]}"#
            ),
            "irregular topology: node 1 has 2 GPUs but node 0 has 1; every node needs the same number of GPUs"
        );
        assert!(
            err(r#"{"devices": [{"id": "a", "kind": "gpu"}, {"id": "b", "kind": "gpu", "node": 2}]}"#)
                .contains("without gaps, but a GPU is on node 2")
        );
        assert!(
            err(r#"{"devices": [{"id": "a", "kind": "gpu"}, {"id": "b", "kind": "gpu", "node": 4000000000}]}"#)
                .contains("bad node ids")
        );
        assert!(
            err(r#"{"devices": [{"id": "a", "kind": "gpu"}, {"id": "s", "kind": "nvswitch", "node": 3}]}"#)
                .contains("a device of kind nvswitch is on node 3, which has no GPU (GPUs are on node 0)")
        );
        assert_eq!(err(r#"{"devices": []}"#), "topology has no GPUs");
        assert!(
            err(r#"{"devices": [{"id": "s", "kind": "cpu", "rank": 0}]}"#)
                .contains("only GPUs have a rank")
        );
        assert!(
            err(r#"{"devices": [{"id": "s", "kind": "net_switch", "node": 0}]}"#)
                .contains("belongs to no node")
        );
        assert_eq!(
            err(r#"{"version": 2, "devices": []}"#),
            "topology JSON: unsupported version 2 (this build reads version 1)"
        );
    }

    #[test]
    fn node_gaps_are_named() {
        let e = err(
            r#"{"devices": [{"id": "a", "kind": "gpu"}, {"id": "b", "kind": "gpu", "node": 2}, {"id": "c", "kind": "gpu", "node": 2}]}"#,
        );
        assert_eq!(
            e,
            "bad node ids: node ids must be 0..3 without gaps, but node 1 has no GPU"
        );
    }

    #[test]
    fn syntax_and_shape_errors_have_positions() {
        let e = err(
            "{\n  \"devices\": [\n    {\"id\": \"a\", \"kind\": \"gpu\", \"nodes\": 0}\n  ]\n}",
        );
        assert!(e.starts_with("topology JSON 3:"), "{e}");
        assert!(e.contains("unknown field `nodes`"), "{e}");
        let e = err("{\"devices\": [{\"id\": \"a\", \"kind\": \"tpu\"}]}");
        assert!(e.contains("unknown variant `tpu`"), "{e}");
        let e = err("{\"devices\": [");
        assert!(e.starts_with("topology JSON 1:"), "{e}");
    }

    #[test]
    fn broken_fixtures_fail_with_the_file_named() {
        for (file, want) in [
            (
                "bad_link_unknown_device.json",
                "link 4 names unknown device \"gpu9\"",
            ),
            ("bad_duplicate_id.json", "duplicate device id \"gpu1\""),
            ("bad_ranks.json", "rank 1 is given to both"),
            (
                "bad_irregular.json",
                "irregular topology: node 1 has 1 GPUs but node 0 has 2",
            ),
            (
                "bad_bandwidth.json",
                "bandwidth must be a positive number of GB/s, found -100",
            ),
            ("bad_syntax.json", ":4:"),
        ] {
            let path = inputs().join(file);
            let e = Topology::parse(&path.display().to_string())
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains(file), "{file}: {e}");
            assert!(e.contains(want), "{file}: {e}");
        }
    }

    /// Damaged files give errors, never panics.
    #[test]
    fn damaged_input_never_panics() {
        let text = Topology::preset("cluster:2x2").expect("preset").to_json();
        for i in (0..text.len()).step_by(7) {
            let _ = Topology::from_json(text.get(..i).unwrap_or(""));
        }
        for (from, to) in [
            ("478.0", "1e400"),
            ("\"rank\":1", "\"rank\":4294967295"),
            ("0.7", "-0.0"),
        ] {
            let _ = Topology::from_json(&text.replace(from, to));
        }
    }

    #[test]
    fn missing_file_is_an_io_error() {
        let e = Topology::parse("no/such/topo.json").err();
        assert!(matches!(e, Some(TopologyError::Io { .. })), "{e:?}");
        let text = e.map(|e| e.to_string()).unwrap_or_default();
        assert!(
            text.starts_with("cannot read topology file no/such/topo.json: "),
            "{text}"
        );
    }

    #[test]
    fn to_json_is_readable() {
        let t = Topology::preset("ring:2").expect("preset");
        assert_eq!(
            t.to_json(),
            r#"{
  "version": 1,
  "name": "ring:2",
  "devices": [
    {"id":"gpu0","kind":"gpu","node":0,"rank":0,"name":"gpu0"},
    {"id":"gpu1","kind":"gpu","node":0,"rank":1,"name":"gpu1"}
  ],
  "links": [
    {"between":["gpu0","gpu1"],"kind":"nvlink","bandwidth_gbs":106.0,"latency_us":0.7}
  ]
}
"#
        );
    }
}
