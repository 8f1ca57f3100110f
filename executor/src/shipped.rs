//! The algorithms shipped in `algorithms/`, embedded at build time, and the per-size choice
//! among them by predicted time (`coll compile --auto`).

use coll_compiler::predict::{self, Prediction};
use coll_compiler::topology::Topology;
use coll_compiler::{CompileOptions, compile};
use coll_lang::builtins::CollectiveKind;

include!(concat!(env!("OUT_DIR"), "/shipped.rs"));

/// One shipped algorithm considered for a choice.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// `algorithms/<file>`.
    pub file: String,
    /// The prediction at the asked size, or why it cannot run here.
    pub outcome: Result<Prediction, String>,
    pub plan: Option<coll_compiler::plan::ValidPlan>,
}

/// Every shipped algorithm of `kind`, compiled for `topo` and predicted at `size` bytes
/// (nccl-tests' S), best first; those that cannot run say why.
pub fn candidates(kind: CollectiveKind, topo: &Topology, size: u64) -> Vec<Candidate> {
    let shipped: Vec<(String, &str)> = SHIPPED
        .iter()
        .map(|(name, text)| (format!("algorithms/{name}"), *text))
        .collect();
    candidates_from(&shipped, kind, topo, size)
}

/// [`candidates`] among `sources` (file name, text): the shipped algorithms and, for callers
/// that have them, their users' own.
pub fn candidates_from(
    sources: &[(String, &str)],
    kind: CollectiveKind,
    topo: &Topology,
    size: u64,
) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = Vec::new();
    for (file, text) in sources {
        let file = file.clone();
        let module = match coll_lang::load(coll_lang::SourceFile::new(file.clone(), *text)) {
            Ok(m) => m,
            Err(d) => {
                out.push(Candidate {
                    file,
                    outcome: Err(format!(
                        "does not load: {}",
                        d.list
                            .first()
                            .map(|x| x.kind.to_string())
                            .unwrap_or_default()
                    )),
                    plan: None,
                });
                continue;
            }
        };
        if module.summary.kind != kind {
            continue;
        }
        let options =
            options_for("", &module.summary).expect("the empty setting is valid for every program");
        let outcome = compile(&module, topo, &options)
            .map_err(|d| {
                d.list
                    .first()
                    .map(|x| x.kind.to_string())
                    .unwrap_or_default()
            })
            .and_then(|c| {
                let steps = |r, b, o| c.schedule.round_of(r, b, o);
                predict::predict_sweep_with(
                    &c.lowered.plan,
                    topo,
                    &[size],
                    &steps,
                    &predict::Model::default(),
                )
                .map_err(|e| e.to_string())
                .and_then(|rows| {
                    rows.into_iter()
                        .next()
                        .ok_or_else(|| "no prediction".to_string())
                })
                .map(|p| (p, c.into_plan()))
            });
        match outcome {
            Ok((p, plan)) => out.push(Candidate {
                file,
                outcome: Ok(p),
                plan: Some(plan),
            }),
            Err(why) => out.push(Candidate {
                file,
                outcome: Err(why),
                plan: None,
            }),
        }
    }
    out.sort_by(|a, b| match (&a.outcome, &b.outcome) {
        (Ok(x), Ok(y)) => x.time_us.total_cmp(&y.time_us),
        (Ok(_), Err(_)) => std::cmp::Ordering::Less,
        (Err(_), Ok(_)) => std::cmp::Ordering::Greater,
        (Err(_), Err(_)) => a.file.cmp(&b.file),
    });
    out
}

/// The tuning setting that lowers a program in program order with its blocks of several
/// peers ([`options_for`]): the plan the cost model does not choose by itself for a
/// latency-bound program (it has no per-op cost, which the merged blocks save).
pub const SEVERAL_PEERS: &str = "peers=several";

/// Compile options for a tuning setting of a program with header `summary`: empty (the
/// program as written, but an in-place one compiled out of place where its collective allows
/// it, as `coll run` and `coll bench` do), or a comma list of `instances=N`,
/// `placement=as-written` (keep an in-place program's placement), `peers=one` (no blocks
/// of several peers, as formats with one peer a side need) and `peers=several` (the program's
/// own channels and order, a block per connection, with its blocks of several peers, as
/// `--schedule program,program,per-connection,several-peers` asks; where nothing merges, that
/// candidate unmerged, and the plan's schedule note says so).
pub fn options_for(
    settings: &str,
    summary: &coll_lang::check::Summary,
) -> Result<CompileOptions, String> {
    use coll_compiler::lower::{Channels, Order, Packing, Scheduling};
    let mut o = CompileOptions::default();
    o.elaborate.out_of_place = coll_compiler::elaborate::placement::convertible(summary);
    let mut peers: Option<&str> = None;
    for item in settings.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match item.split_once('=') {
            Some(("instances", v)) => {
                let n: u32 = v.parse().ok().filter(|&n| n >= 1).ok_or_else(|| {
                    format!("setting `{item}`: instances must be a positive count")
                })?;
                o.elaborate.instances = Some(n);
            }
            Some(("placement", "as-written")) => o.elaborate.out_of_place = false,
            Some(("peers", v @ ("one" | "several"))) => {
                // Both would lower a merged schedule with merging off: say so, not guess.
                if peers.is_some_and(|p| p != v) {
                    return Err("settings `peers=one` and `peers=several` contradict".into());
                }
                peers = Some(v);
                if v == "one" {
                    o.lower.several_peers = false;
                } else {
                    o.lower.scheduling = Scheduling::OnlyMerged(
                        Channels::Program,
                        Order::Program,
                        Packing::PerConnection,
                    );
                }
            }
            _ => {
                return Err(format!(
                    "unknown setting `{item}` (known: instances=N, placement=as-written, \
                     peers=one, peers=several)"
                ));
            }
        }
    }
    Ok(o)
}

/// Whether plans `a` and `b` run the same ops: equal but for the scheduler's notes, which
/// record how each was asked for (two settings that lower to one plan need one measurement).
pub fn same_ops(a: &coll_compiler::plan::Plan, b: &coll_compiler::plan::Plan) -> bool {
    // Every field named, so a field added to plans is weighed here too.
    let coll_compiler::plan::Plan {
        version,
        name,
        collective,
        inplace,
        ranks,
        topology,
        protocol,
        chunk_factor,
        buffers,
        sources,
        gpus,
        schedule: _,
    } = a;
    *version == b.version
        && *name == b.name
        && *collective == b.collective
        && *inplace == b.inplace
        && *ranks == b.ranks
        && *topology == b.topology
        && *protocol == b.protocol
        && *chunk_factor == b.chunk_factor
        && *buffers == b.buffers
        && *sources == b.sources
        && *gpus == b.gpus
}

/// `file` and, when there are any, its tuning `settings` in brackets: how logs and tables
/// name a candidate.
pub fn label(file: &str, settings: &str) -> String {
    if settings.is_empty() {
        file.to_string()
    } else {
        format!("{file} ({settings})")
    }
}

/// The plan of shipped algorithm `file` (`algorithms/<name>.coll` or `<name>.coll`) for
/// `topo` with tuning `settings` ([`options_for`]), or why there is none.
pub fn plan_of(
    file: &str,
    topo: &Topology,
    settings: &str,
) -> Result<coll_compiler::plan::ValidPlan, String> {
    let name = file.trim_start_matches("algorithms/");
    let (_, text) = SHIPPED
        .iter()
        .find(|(n, _)| *n == name)
        .ok_or_else(|| format!("no shipped algorithm `{file}`"))?;
    let module = coll_lang::load(coll_lang::SourceFile::new(
        format!("algorithms/{name}"),
        *text,
    ))
    .map_err(|d| d.render())?;
    let options = options_for(settings, &module.summary)?;
    compile(&module, topo, &options)
        .map(|c| c.into_plan())
        .map_err(|d| d.render())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_plans_are_found_by_file_name() {
        let topo = Topology::parse("nvswitch:4").expect("preset");
        let p = plan_of("algorithms/allreduce_ring.coll", &topo, "").expect("ships");
        assert_eq!(p.ranks, 4);
        assert_eq!(
            plan_of("allreduce_ring.coll", &topo, "").map(|p| p.ranks),
            Ok(4)
        );
        let e = plan_of("algorithms/nope.coll", &topo, "").expect_err("not shipped");
        assert!(
            e.contains("no shipped algorithm `algorithms/nope.coll`"),
            "{e}"
        );
        // Settings: instances multiply the chunk factor; bad settings are named.
        let x4 = plan_of("allreduce_ring.coll", &topo, "instances=4").expect("compiles");
        assert_eq!(x4.chunk_factor, 4 * p.chunk_factor);
        let e = plan_of("allreduce_ring.coll", &topo, "instances=0").expect_err("zero");
        assert!(e.contains("instances must be a positive count"), "{e}");
        let e = plan_of("allreduce_ring.coll", &topo, "split=3").expect_err("unknown");
        assert!(e.contains("unknown setting `split=3`"), "{e}");
        // In-place programs run out of place unless kept as written.
        assert!(!p.inplace);
        let kept = plan_of("allreduce_ring.coll", &topo, "placement=as-written").expect("ok");
        assert!(kept.inplace);
        let rs = plan_of("reducescatter_ring.coll", &topo, "").expect("ships");
        assert!(!rs.inplace);
    }

    /// `peers=several` lowers the program's own order with its blocks of several peers: the
    /// one-shot's single receive of every peer, which the cost model does not choose; the
    /// plan the model already chooses for NVLS (the same ops); an unmerged one where nothing
    /// merges (allpairs). It contradicts `peers=one`, and unknown settings name it.
    #[test]
    fn several_peers_is_a_setting() {
        let topo = Topology::parse("nvswitch:4").expect("preset");
        let merged = |p: &coll_compiler::plan::ValidPlan| {
            p.schedule.as_ref().is_some_and(|n| n.several_peers)
        };
        let oneshot = plan_of("allreduce_oneshot.coll", &topo, "").expect("ships");
        let several = plan_of("allreduce_oneshot.coll", &topo, SEVERAL_PEERS).expect("ok");
        assert!(!merged(&oneshot) && merged(&several));
        assert!(!same_ops(&oneshot, &several));
        for (r, g) in several.gpus.iter().enumerate() {
            let receives = g.receive_fan_in();
            assert_eq!(receives, [3], "rank {r}: one receive of all three peers");
        }
        let nvls = plan_of("allreduce_nvls.coll", &topo, "").expect("ships");
        let nvls_several = plan_of("allreduce_nvls.coll", &topo, SEVERAL_PEERS).expect("ok");
        assert!(merged(&nvls) && merged(&nvls_several));
        assert!(same_ops(&nvls, &nvls_several));
        assert_ne!(
            nvls.schedule, nvls_several.schedule,
            "asked for differently"
        );
        let one = plan_of("allreduce_nvls.coll", &topo, "peers=one").expect("ok");
        assert!(!merged(&one) && !same_ops(&nvls, &one));
        let pairs = plan_of("allreduce_allpairs.coll", &topo, SEVERAL_PEERS).expect("ok");
        assert!(!merged(&pairs));
        let both = "peers=one,peers=several";
        let e = plan_of("allreduce_nvls.coll", &topo, both).expect_err("contradict");
        assert!(e.contains("contradict"), "{e}");
        let e = plan_of("allreduce_nvls.coll", &topo, "peers=all").expect_err("unknown");
        assert!(e.contains("peers=one, peers=several"), "{e}");
        let x16 = plan_of("allreduce_nvls.coll", &topo, "peers=several,instances=16");
        assert_eq!(x16.map(|p| p.chunk_factor), Ok(16 * nvls.chunk_factor));
    }
}
