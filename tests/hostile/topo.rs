//! Mutants of the topology files of `tests/inputs/topo/` (our JSON format and NCCL topology
//! XML), made by the plan and MSCCL-IR mutators (any JSON value, any XML attribute or
//! element), given to `coll check` of ring allreduce as `--topo` at 1 to 8 ranks.

use crate::runner::{Case, INPUT};
use crate::seeded::Gen;
use crate::{msccl_xml, plan_json};
use std::ops::Range;

/// Of every `stride`-th of `per_file` mutants of every topology file, those with an index in `window`.
pub fn cases(per_file: usize, stride: usize, window: &Range<usize>) -> Vec<Case> {
    let dir = coll_tests::root().join("tests/inputs/topo");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    let ring = coll_tests::root().join("algorithms/allreduce_ring.coll");
    let ring = ring.to_str().expect("a UTF-8 workspace path");
    let mut out = Vec::new();
    for path in files {
        let Some(file) = path.file_name().map(|s| s.to_string_lossy().into_owned()) else {
            continue;
        };
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
        let json = file.ends_with(".json");
        for k in (0..per_file).step_by(stride).filter(|k| window.contains(k)) {
            // A generator per case: case k is the same whichever others are generated.
            let mut g = Gen::new(&format!("topo/{file}/{k}"));
            let bytes = if json {
                let Ok(mut v) = serde_json::from_str::<serde_json::Value>(&text) else {
                    break; // a fixture that is broken on purpose: the crafted cases run it
                };
                let mut tail = None;
                for _ in 0..1 + g.below(2) {
                    tail = plan_json::mutate(&mut g, &mut v).or(tail);
                }
                let mut s = serde_json::to_string_pretty(&v).expect("a Value serialises");
                if let (Some(deep), Some(p)) = (tail, s.rfind('}')) {
                    s.replace_range(p.., &format!(",\"deep\":{deep}}}"));
                }
                s.into_bytes()
            } else {
                let mut t = text.clone();
                for _ in 0..1 + g.below(2) {
                    msccl_xml::mutate(&mut g, &mut t);
                }
                t.into_bytes()
            };
            let n = g.pick(&["1", "2", "4", "8"]).to_string();
            out.push(Case {
                name: format!("topo/{file}/{k}"),
                args: ["check", ring, "--ranks", &n, "--topo", INPUT]
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
                input: Some((if json { "json" } else { "xml" }, bytes)),
                bound: None,
            });
        }
    }
    out
}
