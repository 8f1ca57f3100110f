//! Tests of reading NCCL's topology XML.

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
        e.to_string()
            .contains("3:85: <gpu> attribute `rank`: rank 1 is also given to the <gpu> on line 2"),
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
