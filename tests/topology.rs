//! Topology fixtures: every file in `tests/inputs/topo/` is read as `--topo` would read it.
//! Valid ones are snapshotted as a summary plus the route from rank 0 to every other rank;
//! `bad_*` ones must fail with a message that names what is wrong.

use coll_compiler::ids::RankId;
use coll_compiler::topology::Topology;
use std::fmt::Write;

fn describe(t: &Topology) -> String {
    let mut s = format!("{}\n", t.summary());
    for b in 1..t.num_ranks() {
        let r = t.route(RankId(0), RankId::new(b));
        let _ = match r {
            Some(r) => writeln!(
                s,
                "rank 0 -> rank {b}: {} over {} links, {:.1} GB/s, {:.2} us",
                r.kind.name(),
                r.links.len(),
                r.bandwidth_gbs,
                r.latency_us
            ),
            None => writeln!(s, "rank 0 -> rank {b}: no route"),
        };
    }
    s
}

#[test]
fn topology_fixtures() {
    insta::glob!("inputs/topo", "*.{xml,json}", |path| {
        let name = coll_tests::display_name(path);
        let bad = path
            .file_name()
            .is_some_and(|f| f.to_string_lossy().starts_with("bad_"));
        // Relative to this crate (the tests' working directory), as a user would type it.
        let rel = name.strip_prefix("tests/").unwrap_or(&name).to_string();
        let result = Topology::parse(&rel);
        match (bad, result) {
            (false, Ok(t)) => insta::assert_snapshot!(describe(&t)),
            (true, Err(e)) => {
                let msg = e.to_string();
                assert!(msg.contains(&rel), "the message names the file: {msg}");
                insta::assert_snapshot!(msg);
            }
            (false, Err(e)) => panic!("{name} should load: {e}"),
            (true, Ok(t)) => panic!("{name} should be rejected, got {}", t.summary()),
        }
    });
}

#[test]
fn nccl_xml_with_nvswitch_is_an_nvswitch_machine() {
    let path = coll_tests::root().join("tests/inputs/topo/dgx_h100_nvswitch.xml");
    let t = Topology::parse(&path.to_string_lossy()).expect("fixture loads");
    assert_eq!(t.num_ranks(), 8);
    assert!(t.has_switch());
    let r = t.route(RankId(0), RankId(7)).expect("route");
    assert_eq!(r.kind.name(), "switch");
    assert!((r.bandwidth_gbs - 478.0).abs() < 1.0, "{}", r.bandwidth_gbs);
}

#[test]
fn presets_have_the_promised_shape() {
    for (spec, ranks, nodes) in [
        ("nvswitch:8", 8, 1),
        ("hgx-h200:8", 8, 1),
        ("cluster:4x8", 32, 4),
        ("ring:5", 5, 1),
    ] {
        let t = Topology::parse(spec).expect(spec);
        assert_eq!((t.num_ranks(), t.nodes()), (ranks, nodes), "{spec}");
        insta::assert_snapshot!(spec.replace(':', "_"), describe(&t));
    }
}
