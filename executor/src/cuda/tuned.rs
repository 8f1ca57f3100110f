//! The per-size choice at run time: one executor per algorithm a [`TuningTable`] names, all
//! loaded up front, and each call served by the one the table picks for its size. Every call
//! returns the line saying which plan served it and on what evidence, for the caller to log:
//! a call never silently runs something else, and a size the table does not cover is an
//! error, not a fallback.

use super::{CudaExecutor, LoadOptions, RankBuffers};
use crate::dtype::ReduceOp;
use crate::error::ExecError;
use crate::shipped;
use crate::tuning::TuningTable;
use coll_compiler::predict;
use coll_compiler::topology::Topology;
use coll_lang::builtins::CollectiveKind;
use cudarc::driver::CudaStream;

/// A collective served per size by the fastest measured algorithm.
pub struct TunedExecutor {
    kind: CollectiveKind,
    table: TuningTable,
    /// ((algorithm file, settings), its executor), one per pair the table names for `kind`.
    execs: Vec<((String, String), CudaExecutor)>,
}

impl std::fmt::Debug for TunedExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TunedExecutor")
            .field("kind", &self.kind)
            .field(
                "algorithms",
                &self.execs.iter().map(|(a, _)| a).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl TunedExecutor {
    /// Compiles and loads every algorithm `table` names for `kind` on `topo` and `gpus`
    /// (eagerly: each executor allocates what it needs now), each for the largest count the
    /// table gives it, at most `o.max_count`: an algorithm that serves small sizes only then
    /// holds scratch for those (allpairs on 4 ranks, loaded for 1 GiB, took 4.45 GB a GPU).
    pub fn load(
        table: TuningTable,
        kind: CollectiveKind,
        topo: &Topology,
        gpus: &[usize],
        o: &LoadOptions,
    ) -> Result<TunedExecutor, ExecError> {
        if table.ranks as usize != topo.num_ranks() {
            return Err(ExecError::Gpu(format!(
                "the tuning table is for {} ranks, the topology has {}",
                table.ranks,
                topo.num_ranks()
            )));
        }
        let mut execs: Vec<((String, String), CudaExecutor)> = Vec::new();
        for e in table.entries.iter().filter(|e| e.collective == kind.name()) {
            let key = (e.algorithm.clone(), e.settings.clone());
            if execs.iter().any(|(k, _)| *k == key) {
                continue;
            }
            let plan = shipped::plan_of(&e.algorithm, topo, &e.settings)
                .map_err(|why| ExecError::Gpu(format!("{}: {why}", e.algorithm)))?;
            let esize = o.dtype.size() as u64;
            let max_count = serving_max_count(&table, kind, &key, esize, o.max_count);
            let mine = LoadOptions {
                max_count,
                ..o.clone()
            };
            execs.push((key, CudaExecutor::load(plan, gpus, &mine)?));
        }
        if execs.is_empty() {
            return Err(ExecError::Gpu(format!(
                "the tuning table has no entry for {}",
                kind.name()
            )));
        }
        Ok(TunedExecutor { kind, table, execs })
    }

    /// Enqueues one call (see [`CudaExecutor::enqueue`]) on the algorithm the table picks
    /// for its size; returns the line naming it and why.
    pub fn enqueue(
        &self,
        streams: &[&CudaStream],
        bufs: &[RankBuffers<'_>],
        count: u64,
        op: ReduceOp,
    ) -> Result<String, ExecError> {
        let (file, exec) = self.pick(count)?;
        exec.enqueue(streams, bufs, count, op)?;
        Ok(self.why(file, count))
    }

    /// The executor serving `count` elements.
    pub fn pick(&self, count: u64) -> Result<(&str, &CudaExecutor), ExecError> {
        let bytes = self.bytes(count);
        let choice = self.table.choose(self.kind, bytes).ok_or_else(|| {
            ExecError::Gpu(format!(
                "the tuning table covers no {} of {bytes} B",
                self.kind.name()
            ))
        })?;
        self.execs
            .iter()
            .find(|((a, s), _)| *a == choice.entry.algorithm && *s == choice.entry.settings)
            .map(|((a, _), e)| (a.as_str(), e))
            .ok_or_else(|| ExecError::Gpu(format!("{} is not loaded", choice.entry.algorithm)))
    }

    fn bytes(&self, count: u64) -> u64 {
        let esize = self.execs.first().map_or(4, |(_, e)| e.dtype.size() as u64);
        predict::size_of_count(self.kind, count, self.table.ranks) * esize
    }

    fn why(&self, file: &str, count: u64) -> String {
        self.table
            .choose(self.kind, self.bytes(count))
            .map_or_else(|| file.to_string(), |c| c.why())
    }
}

/// The largest count a call routed to `key` (algorithm, settings) can have: over the ranges
/// `table` gives it for `kind`, the largest count whose size (nccl-tests' bytes, as
/// [`TunedExecutor::pick`] measures it) fits, at most `cap` (and at least 1).
fn serving_max_count(
    table: &TuningTable,
    kind: CollectiveKind,
    key: &(String, String),
    esize: u64,
    cap: u64,
) -> u64 {
    table
        .entries
        .iter()
        .filter(|e| e.collective == kind.name() && e.algorithm == key.0 && e.settings == key.1)
        .map(|e| predict::nccl_count(kind, e.max_bytes, table.ranks) / esize.max(1))
        .max()
        .unwrap_or(cap)
        .clamp(1, cap.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tuning::Entry;

    fn entry(algorithm: &str, settings: &str, min_bytes: u64, max_bytes: u64) -> Entry {
        Entry {
            collective: "allgather".into(),
            min_bytes,
            max_bytes,
            algorithm: algorithm.into(),
            settings: settings.into(),
            time_us: 1.0,
            runner_up_us: None,
        }
    }

    #[test]
    fn each_algorithm_is_loaded_for_the_sizes_it_serves() {
        let table = TuningTable {
            version: 1,
            machine: "m".into(),
            ranks: 4,
            topology: "nvswitch:4".into(),
            entries: vec![
                entry("rd", "", 0, 65_536),
                entry("ring", "", 65_537, 1 << 20),
                entry("ring", "instances=16", (1 << 20) + 1, u64::MAX),
                entry("rd", "", 1 << 30, 1 << 30),
            ],
            calibration: Vec::new(),
            model_fit: None,
            model_fit_by_protocol: None,
        };
        let at = |a: &str, s: &str, cap: u64| {
            serving_max_count(
                &table,
                CollectiveKind::AllGather,
                &(a.into(), s.into()),
                4,
                cap,
            )
        };
        // allgather on 4 ranks: size = 4 ranks x count x 4 bytes; the largest of its ranges.
        assert_eq!(at("rd", "", u64::MAX), (1 << 30) / 16);
        assert_eq!(at("ring", "", u64::MAX), (1 << 20) / 16);
        // Open-ended ranges, and every range, stop at what the caller loads for.
        assert_eq!(at("ring", "instances=16", 1000), 1000);
        assert_eq!(at("ring", "", 1000), 1000);
        // A pair the table does not name (never loaded) gets the cap.
        assert_eq!(at("tree", "", 1000), 1000);
    }
}
