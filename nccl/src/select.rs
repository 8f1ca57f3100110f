//! Which plan serves a call: per collective and size, from a forced algorithm, else the
//! tuning table (the user's, else one built in for the machine measured: [`BUILTIN`]), else
//! the cost model over the shipped algorithms and the user's own.
//!
//! Invariants: every [`Choice`] says why it was made (logged at `NCCL_DEBUG=INFO`); a
//! choice is made once per collective and power-of-two size class and then reused, so a
//! training loop compiles nothing after its first calls; a size with no plan is an error
//! naming the collective and size, which the caller forwards or reports.

use crate::settings::Settings;
use coll_compiler::plan::ValidPlan;
use coll_compiler::predict;
use coll_compiler::topology::Topology;
use coll_executor::shipped;
use coll_executor::tuning::TuningTable;
use coll_lang::builtins::CollectiveKind;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A plan chosen for a collective at a size class.
#[derive(Debug)]
pub struct Choice {
    /// How logs name it: the algorithm file and its settings.
    pub label: String,
    pub plan: ValidPlan,
    /// Why it serves (forced, measured, predicted).
    pub why: String,
}

/// Why there is no plan.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SelectError {
    #[error("{0}")]
    Setup(String),
    #[error("no plan for {kind} of {bytes} B on {topology}: {why}")]
    NoPlan {
        kind: &'static str,
        bytes: u64,
        topology: String,
        why: String,
    },
}

/// The choices for one communicator shape (a topology).
#[derive(Debug)]
pub struct Selector {
    topo: Topology,
    force: HashMap<&'static str, String>,
    /// The tuning table and where it came from (`COLL_NCCL_TUNING`, or the built-in one).
    tuning: Option<(TuningTable, String)>,
    /// The user's algorithms: (file, text).
    user: Vec<(String, String)>,
    cache: Mutex<HashMap<(CollectiveKind, u32), Arc<Choice>>>,
}

/// The size class of `bytes`: its bit length, so each class spans a factor of two.
fn class(bytes: u64) -> u32 {
    64 - bytes.leading_zeros()
}

fn read_dir(dir: &Path) -> Result<Vec<(String, String)>, SelectError> {
    let err = |e: std::io::Error| {
        SelectError::Setup(format!("COLL_NCCL_ALGORITHMS={}: {e}", dir.display()))
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(err)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "coll"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = read_text(&p)
                .map_err(|e| SelectError::Setup(format!("COLL_NCCL_ALGORITHMS: {e}")))?;
            Ok((p.display().to_string(), text))
        })
        .collect()
}

/// Tuning tables built into the library: (file, text), each `coll bench --auto`'s tables of
/// the five collectives for one machine, merged (`nccl/tables/README.md` says how each was
/// measured). A communicator uses the one whose machine, rank count and topology are its own
/// ([`machine_of`]) where the user gave no tables.
pub const BUILTIN: &[(&str, &str)] = &[(
    "nccl/tables/4xH200-nvswitch.json",
    include_str!("../tables/4xH200-nvswitch.json"),
)];

/// The built-in table measured on `machine` (`4 x NVIDIA H200`) for `n` ranks on `topo`.
fn builtin(
    machine: &str,
    n: usize,
    topo: &str,
) -> Result<Option<(TuningTable, String)>, SelectError> {
    for (file, text) in BUILTIN {
        let t = TuningTable::parse(file, text)
            .map_err(|e| SelectError::Setup(format!("built-in table: {e}")))?;
        if t.machine == machine && t.ranks as usize == n && t.topology == topo {
            return Ok(Some((
                t,
                format!("the table built in for {machine} ({file})"),
            )));
        }
    }
    Ok(None)
}

/// What a rank's process says of the rank's GPU, for naming the machine ([`machine_of`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuIdentity {
    /// The model, as the driver names it (`NVIDIA H200`).
    pub name: String,
    /// Names one physical GPU whatever each process sees.
    pub uuid: [u8; 16],
    /// Whether the process sees at least two GPUs and every one NVLinked to every other.
    pub nvlinked: bool,
}

/// The identities of CUDA devices `devices` as this process sees them, each `None` where
/// CUDA cannot say; the process's NVLink view is asked of the driver once for all.
pub fn identities(devices: &[i32]) -> Vec<Option<GpuIdentity>> {
    use coll_executor::cuda::{device, topo};
    let nvlinked = topo::local_peers().is_ok_and(|p| p.len() >= 2 && topo::nvlink_everywhere(&p));
    let one = |d: i32| {
        let ordinal = usize::try_from(d).ok()?;
        Some(GpuIdentity {
            name: device::name_of(ordinal).ok()?,
            uuid: device::uuid_of(ordinal).ok()?,
            nvlinked,
        })
    };
    devices.iter().map(|&d| one(d)).collect()
}

/// The machine a communicator's ranks run on, as tuning tables name it (`4 x NVIDIA H200`),
/// from every rank's [`GpuIdentity`] in rank order: one GPU per rank, all of one model, each
/// process seeing its GPUs NVLinked; `None` otherwise, or where any is unknown (then no
/// built-in table applies). Every process of a communicator computes it from the same list,
/// so all choose alike.
pub fn machine_of(ids: &[Option<GpuIdentity>]) -> Option<String> {
    let ids: Vec<&GpuIdentity> = ids.iter().map(Option::as_ref).collect::<Option<_>>()?;
    let first = ids.first()?;
    let mut uuids: Vec<[u8; 16]> = ids.iter().map(|i| i.uuid).collect();
    uuids.sort_unstable();
    uuids.dedup();
    let alike = ids.iter().all(|i| i.nvlinked && i.name == first.name);
    (alike && uuids.len() == ids.len()).then(|| format!("{} x {}", ids.len(), first.name))
}

/// The tuning tables of `paths` (files, or directories whose `*.json` files are all tables,
/// taken in name order) for `n` ranks, as one table: a table measured for another rank count
/// says nothing here and is skipped; two with entries for one collective are an error naming
/// both, never a silent choice between them.
fn tables(paths: &[PathBuf], n: usize) -> Result<Option<TuningTable>, SelectError> {
    let err = |what: String| SelectError::Setup(format!("COLL_NCCL_TUNING: {what}"));
    let mut files: Vec<PathBuf> = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| err(format!("{}: {e}", p.display())))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.extension().is_some_and(|x| x == "json"))
                .collect();
            found.sort();
            files.extend(found);
        } else {
            files.push(p.clone());
        }
    }
    let mut merged: Option<TuningTable> = None;
    // Which file tunes each collective, for the error that names both.
    let mut tuned_by: Vec<(String, PathBuf)> = Vec::new();
    for f in files {
        let t = TuningTable::load(&f).map_err(|e| err(e.to_string()))?;
        if t.ranks as usize != n {
            continue;
        }
        for c in t.collectives() {
            if let Some((_, other)) = tuned_by.iter().find(|(k, _)| k == c) {
                return Err(err(format!(
                    "{} and {} both tune {c} for {n} ranks",
                    other.display(),
                    f.display()
                )));
            }
            tuned_by.push((c.to_string(), f.clone()));
        }
        match &mut merged {
            Some(m) => m.entries.extend(t.entries),
            None => merged = Some(t),
        }
    }
    Ok(merged)
}

impl Selector {
    /// The selector for communicators of shape `topo` on `machine` ([`machine_of`]; `None`:
    /// not known, so no built-in table serves).
    pub fn new(
        topo: Topology,
        settings: &Settings,
        machine: Option<&str>,
    ) -> Result<Selector, SelectError> {
        let n = topo.num_ranks();
        let tuning = match machine {
            Some(m) if settings.tuning.is_empty() && settings.builtin_tuning => {
                builtin(m, n, topo.name())?
            }
            _ => tables(&settings.tuning, n)?.map(|t| (t, "COLL_NCCL_TUNING".to_string())),
        };
        let user = match &settings.algorithms {
            Some(dir) => read_dir(dir)?,
            None => Vec::new(),
        };
        Ok(Selector {
            topo,
            force: settings
                .force
                .iter()
                .map(|(k, v)| (*k, v.clone()))
                .collect(),
            tuning,
            user,
            cache: Mutex::new(HashMap::new()),
        })
    }

    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// The plan for `kind` at `bytes` (nccl-tests' size).
    pub fn choose(&self, kind: CollectiveKind, bytes: u64) -> Result<Arc<Choice>, SelectError> {
        let key = (kind, class(bytes));
        if let Some(c) = coll_executor::sync::lock(&self.cache).get(&key) {
            return Ok(Arc::clone(c));
        }
        let choice = Arc::new(self.decide(kind, bytes)?);
        coll_executor::sync::lock(&self.cache).insert(key, Arc::clone(&choice));
        Ok(choice)
    }

    fn no_plan(&self, kind: CollectiveKind, bytes: u64, why: String) -> SelectError {
        SelectError::NoPlan {
            kind: kind.name(),
            bytes,
            topology: self.topo.name().to_string(),
            why,
        }
    }

    fn decide(&self, kind: CollectiveKind, bytes: u64) -> Result<Choice, SelectError> {
        if let Some(algo) = self.force.get(kind.name()) {
            let plan = self
                .forced(kind, algo)
                .map_err(|why| self.no_plan(kind, bytes, format!("COLL_NCCL_ALGO: {why}")))?;
            return Ok(Choice {
                label: algo.clone(),
                plan,
                why: format!("{} forced by COLL_NCCL_ALGO", algo),
            });
        }
        if let Some((table, source)) = &self.tuning
            && let Some(c) = table.choose(kind, bytes)
        {
            let e = c.entry;
            let plan = shipped::plan_of(&e.algorithm, &self.topo, &e.settings)
                .map_err(|why| self.no_plan(kind, bytes, format!("{source}: {why}")))?;
            return Ok(Choice {
                label: shipped::label(&e.algorithm, &e.settings),
                plan,
                why: format!("{}, by {source}", c.why()),
            });
        }
        let mut sources: Vec<(String, &str)> = self
            .user
            .iter()
            .map(|(f, t)| (f.clone(), t.as_str()))
            .collect();
        let shipped_sources = shipped::SHIPPED
            .iter()
            .map(|(name, text)| (format!("algorithms/{name}"), *text));
        sources.extend(shipped_sources);
        let mut ranked = shipped::candidates_from(&sources, kind, &self.topo, bytes);
        let why_not: Vec<String> = ranked
            .iter()
            .filter_map(|c| c.outcome.as_ref().err().map(|e| format!("{}: {e}", c.file)))
            .collect();
        let best = ranked.iter_mut().find(|c| c.outcome.is_ok());
        match best {
            Some(c) => {
                let time = c.outcome.as_ref().map_or(0.0, |p| p.time_us);
                let plan = c
                    .plan
                    .take()
                    .ok_or_else(|| self.no_plan(kind, bytes, "no plan".into()))?;
                Ok(Choice {
                    label: c.file.clone(),
                    plan,
                    why: format!(
                        "{} of {bytes} B: {}, best predicted ({time:.1} µs) on {}",
                        kind.name(),
                        c.file,
                        self.topo.name()
                    ),
                })
            }
            None => Err(self.no_plan(
                kind,
                bytes,
                if why_not.is_empty() {
                    "no algorithm for it".into()
                } else {
                    why_not.join("; ")
                },
            )),
        }
    }

    /// The plan of a forced algorithm: a shipped file (`ring`, `allreduce_ring`,
    /// `allreduce_ring.coll`), or a path to a `.coll` file.
    fn forced(&self, kind: CollectiveKind, algo: &str) -> Result<ValidPlan, String> {
        let path = Path::new(algo);
        if path.extension().is_some_and(|x| x == "coll") && path.exists() {
            let text = read_text(path)?;
            return compile_source(&path.display().to_string(), &text, kind, &self.topo);
        }
        let stem = algo.trim_end_matches(".coll");
        let names = [
            format!("{stem}.coll"),
            format!("{}_{stem}.coll", kind.name()),
        ];
        for name in &names {
            if shipped::SHIPPED.iter().any(|(n, _)| n == name) {
                return shipped::plan_of(name, &self.topo, "");
            }
        }
        Err(format!(
            "`{algo}` is neither a .coll file nor a shipped algorithm (tried {})",
            names.join(", ")
        ))
    }
}

/// A `.coll` file's text, bounded as the compiler bounds every source.
fn read_text(path: &Path) -> Result<String, String> {
    let bytes = coll_lang::read_source(path).map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|e| format!("{}: not UTF-8: {e}", path.display()))
}

/// Compiles a user's `.coll` text for `topo`, checking that it implements `kind`.
fn compile_source(
    file: &str,
    text: &str,
    kind: CollectiveKind,
    topo: &Topology,
) -> Result<ValidPlan, String> {
    let module = coll_lang::load(coll_lang::SourceFile::new(file.to_string(), text))
        .map_err(|d| d.render())?;
    if module.summary.kind != kind {
        return Err(format!(
            "{file} is a {}, not a {}",
            module.summary.kind.name(),
            kind.name()
        ));
    }
    let options = shipped::options_for("", &module.summary)?;
    coll_compiler::compile(&module, topo, &options)
        .map(|c| c.into_plan())
        .map_err(|d| d.render())
}

/// nccl-tests' size of a call of `count` elements of `esize` bytes on `n` ranks.
pub fn bytes_of(kind: CollectiveKind, count: u64, esize: u64, n: u32) -> u64 {
    predict::size_of_count(kind, count, n).saturating_mul(esize)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selector(vars: &[(&str, &str)]) -> Selector {
        selector_on(vars, None)
    }

    /// A selector for 4 ranks on `machine` ([`machine_of`]'s words).
    fn selector_on(vars: &[(&str, &str)], machine: Option<&str>) -> Selector {
        let settings = Settings::from_lookup(|k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
        .expect("valid settings");
        let topo = Topology::parse("nvswitch:4").expect("preset");
        Selector::new(topo, &settings, machine).expect("selector")
    }

    #[test]
    fn the_table_built_in_for_the_machine_serves_unless_the_user_says_otherwise() {
        let h200 = Some("4 x NVIDIA H200");
        let s = selector_on(&[], h200);
        // 4 x H200's table: ring x16 from 128 MiB, ring as written from 1 GiB.
        let mid = s
            .choose(CollectiveKind::AllReduce, 256 << 20)
            .expect("a plan");
        assert_eq!(mid.label, "algorithms/allreduce_ring.coll (instances=16)");
        assert!(
            mid.why.ends_with(
                "by the table built in for 4 x NVIDIA H200 (nccl/tables/4xH200-nvswitch.json)"
            ),
            "{}",
            mid.why
        );
        let big = s
            .choose(CollectiveKind::AllReduce, 1 << 30)
            .expect("a plan");
        assert_eq!(big.label, "algorithms/allreduce_ring.coll");
        // Another machine, or the tables turned off: the cost model.
        for s in [
            selector_on(&[], Some("4 x NVIDIA H100")),
            selector_on(&[("COLL_NCCL_TUNING", "none")], h200),
            selector_on(&[], None),
        ] {
            let c = s
                .choose(CollectiveKind::AllReduce, 256 << 20)
                .expect("a plan");
            assert!(c.why.contains("best predicted"), "{}", c.why);
        }
    }

    #[test]
    fn the_machine_is_named_only_for_distinct_nvlinked_gpus_of_one_model() {
        let gpu = |name: &str, u: u8, nvlinked: bool| {
            Some(GpuIdentity {
                name: name.into(),
                uuid: [u; 16],
                nvlinked,
            })
        };
        let h200 = |u| gpu("NVIDIA H200", u, true);
        let four = [h200(0), h200(1), h200(2), h200(3)];
        assert_eq!(machine_of(&four).as_deref(), Some("4 x NVIDIA H200"));
        // Two ranks on one GPU (one UUID), a GPU of another model, one unknown, a process
        // that saw no NVLink: no machine, so no built-in table.
        for odd in [
            [h200(0), h200(1), h200(2), h200(2)],
            [h200(0), h200(1), h200(2), gpu("NVIDIA H100", 3, true)],
            [h200(0), h200(1), h200(2), None],
            [h200(0), h200(1), h200(2), gpu("NVIDIA H200", 3, false)],
        ] {
            assert_eq!(machine_of(&odd), None, "{odd:?}");
        }
        assert_eq!(machine_of(&[]), None);
    }

    #[test]
    fn every_built_in_table_covers_five_collectives_with_plans_that_compile() {
        for (file, text) in BUILTIN {
            let t = TuningTable::parse(file, text).expect("a valid table");
            let topo = Topology::parse(&t.topology).expect("the table's topology");
            assert_eq!(topo.num_ranks(), t.ranks as usize, "{file}");
            let mut kinds = t.collectives();
            kinds.sort_unstable();
            assert_eq!(
                kinds,
                [
                    "allgather",
                    "allreduce",
                    "alltoall",
                    "broadcast",
                    "reducescatter"
                ],
                "{file}"
            );
            for e in &t.entries {
                let plan = shipped::plan_of(&e.algorithm, &topo, &e.settings);
                assert!(
                    plan.is_ok(),
                    "{file}: {} {}: {plan:?}",
                    e.algorithm,
                    e.settings
                );
            }
        }
    }

    #[test]
    fn the_cost_model_chooses_and_says_why() {
        let s = selector(&[]);
        let small = s.choose(CollectiveKind::AllReduce, 8).expect("a plan");
        assert!(small.why.contains("best predicted"), "{}", small.why);
        assert_eq!(small.plan.collective.0, CollectiveKind::AllReduce);
        // The same size class reuses the choice.
        let again = s.choose(CollectiveKind::AllReduce, 12).expect("a plan");
        assert!(Arc::ptr_eq(&small, &again));
        let big = s
            .choose(CollectiveKind::AllGather, 1 << 30)
            .expect("a plan");
        assert_eq!(big.plan.collective.0, CollectiveKind::AllGather);
    }

    #[test]
    fn a_forced_algorithm_serves_every_size() {
        let s = selector(&[("COLL_NCCL_ALGO", "allreduce=ring")]);
        let c = s.choose(CollectiveKind::AllReduce, 8).expect("a plan");
        assert_eq!(c.label, "ring");
        assert_eq!(c.plan.name, "ring");
        assert!(c.why.contains("forced by COLL_NCCL_ALGO"));
        let bad = selector(&[("COLL_NCCL_ALGO", "allreduce=nosuch")]);
        let e = bad
            .choose(CollectiveKind::AllReduce, 8)
            .err()
            .map(|e| e.to_string());
        assert!(
            e.as_deref().is_some_and(|e| e.starts_with(
                "no plan for allreduce of 8 B on nvswitch:4: COLL_NCCL_ALGO: `nosuch` is neither"
            )),
            "{e:?}"
        );
    }

    /// A table of `kind` on `n` ranks served by `algorithm` with `settings` at every size.
    fn table(kind: CollectiveKind, n: u32, algorithm: &str, settings: &str) -> TuningTable {
        let m = coll_executor::tuning::Measurement {
            collective: kind,
            algorithm: algorithm.into(),
            settings: settings.into(),
            bytes: 8,
            time_us: 10.0,
        };
        coll_executor::tuning::build("4 x H200", n, &format!("nvswitch:{n}"), &[m])
    }

    /// A table's setting rebuilds the plan `coll bench --auto` measured: the one-shot with
    /// `peers=several` is served merged, one receive of every peer a rank.
    #[test]
    fn a_table_entry_serves_its_setting() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("tuning-allreduce-4.json");
        table(
            CollectiveKind::AllReduce,
            4,
            "algorithms/allreduce_oneshot.coll",
            shipped::SEVERAL_PEERS,
        )
        .save(&p)
        .expect("saved");
        let s = selector(&[("COLL_NCCL_TUNING", &p.display().to_string())]);
        let c = s.choose(CollectiveKind::AllReduce, 8).expect("a plan");
        assert_eq!(c.label, "algorithms/allreduce_oneshot.coll (peers=several)");
        assert!(c.plan.schedule.as_ref().is_some_and(|n| n.several_peers));
        for g in &c.plan.gpus {
            let receives = g.receive_fan_in();
            assert_eq!(receives, [3], "rank {}", g.rank);
        }
    }

    #[test]
    fn tuning_tables_of_each_collective_serve_together() {
        let dir = tempfile::tempdir().expect("tempdir");
        let save = |name: &str, t: TuningTable| {
            let p = dir.path().join(name);
            t.save(&p).expect("saved");
            p
        };
        let ar = save(
            "tuning-allreduce-4.json",
            table(
                CollectiveKind::AllReduce,
                4,
                "algorithms/allreduce_rhd.coll",
                "",
            ),
        );
        save(
            "tuning-allgather-4.json",
            table(
                CollectiveKind::AllGather,
                4,
                "algorithms/allgather_rd.coll",
                "",
            ),
        );
        // Another rank count's table in the same directory is skipped.
        save(
            "tuning-allreduce-2.json",
            table(
                CollectiveKind::AllReduce,
                2,
                "algorithms/allreduce_tree.coll",
                "",
            ),
        );
        let d = dir.path().display().to_string();
        let s = selector(&[("COLL_NCCL_TUNING", &d)]);
        let c = s
            .choose(CollectiveKind::AllReduce, 1 << 20)
            .expect("a plan");
        assert_eq!(c.label, "algorithms/allreduce_rhd.coll");
        assert!(c.why.contains("fastest measured"), "{}", c.why);
        let c = s
            .choose(CollectiveKind::AllGather, 1 << 20)
            .expect("a plan");
        assert_eq!(c.label, "algorithms/allgather_rd.coll");
        // A collective no table tunes goes to the cost model.
        let c = s.choose(CollectiveKind::AllToAll, 1 << 20).expect("a plan");
        assert!(c.why.contains("best predicted"), "{}", c.why);

        // Files may be listed one by one, `:`-separated; a second table of one collective
        // for the same rank count is refused, naming both files.
        let other = dir.path().join("more");
        std::fs::create_dir(&other).expect("mkdir");
        let again = other.join("tuning-allreduce-4.json");
        table(
            CollectiveKind::AllReduce,
            4,
            "algorithms/allreduce_ring.coll",
            "",
        )
        .save(&again)
        .expect("saved");
        let listed = format!("{}:{}", ar.display(), again.display());
        let settings = Settings::from_lookup(|k| (k == "COLL_NCCL_TUNING").then(|| listed.clone()))
            .expect("valid settings");
        let topo = Topology::parse("nvswitch:4").expect("preset");
        let e = Selector::new(topo, &settings, None)
            .err()
            .map(|e| e.to_string());
        let want = format!(
            "COLL_NCCL_TUNING: {} and {} both tune allreduce for 4 ranks",
            ar.display(),
            again.display()
        );
        assert!(e.as_deref().is_some_and(|e| e.contains(&want)), "{e:?}");
    }

    #[test]
    fn size_classes_double() {
        assert_eq!(class(0), 0);
        assert_eq!(class(1), 1);
        assert_eq!(class(8), 4);
        assert_eq!(class(15), 4);
        assert_eq!(class(16), 5);
    }
}
