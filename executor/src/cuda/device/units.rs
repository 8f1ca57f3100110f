//! Which kernel entries there are and how they are grouped into units that NVRTC compiles
//! independently ([`KernelUnit`], [`units_of`]): pure naming, tested without a GPU; the
//! loading and launching are in `kernels.rs`.
//!
//! Invariant: the units of a load hold every entry [`entry_names_of`] lists for its element
//! type, each in exactly one unit ([`unit_of_entry`] says which), but for the reductions a
//! plan without reducing ops and the `_multi` twins a plan without blocks of several peers
//! leave out (`kernels.rs`'s module docs).

use super::nvrtc::{self, UnitSource};
use crate::dtype::{DType, ReduceOp};
use crate::error::ExecError;

pub(super) const DTYPES: [&str; 7] = ["f32", "f16", "bf16", "i32", "f64", "i64", "u8"];
pub(super) const OPS: [&str; 4] = ["sum", "prod", "min", "max"];

/// The two entries of an interpreter (`coll_f32_sum_ll`): the plain one, and its `_multi`
/// twin for GPUs with a block of several peers (`kernel/entries.cu`).
pub(super) fn interp_entries(d: &str, op: &str, ll: bool) -> [String; 2] {
    let plain = format!("coll_{d}_{op}{}", if ll { "_ll" } else { "" });
    let multi = format!("{plain}_multi");
    [plain, multi]
}

/// The LL128 entry of an operator (`coll_f32_sum_ll128`), in a unit of its own: LL128 calls
/// have no block of several peers, so it has no twin.
pub(super) fn ll128_entry(d: &str, op: &str) -> String {
    format!("coll_{d}_{op}_ll128")
}

/// The one-shot allreduce entry of an operator (`coll_f32_sum_oneshot`), in the operator's
/// plain LL unit (`kernel/oneshot.cuh`).
pub(super) fn oneshot_entry(d: &str, op: &str) -> String {
    format!("coll_{d}_{op}_oneshot")
}

/// The name of operator `OPS[op]` (`op` for an index past them, which no unit has).
fn op_at(op: usize) -> &'static str {
    OPS.get(op).copied().unwrap_or("op")
}

/// The entries a load of `dtype` compiles and loads (the source's `-DCOLL_DTYPE_<T>`):
/// its interpreter per operator and protocol (bulk and LL each plain and `_multi`, LL128
/// plain), its one-shot allreduce per operator, its avg scaling, and the barrier.
pub fn entry_names_of(dtype: DType) -> Vec<String> {
    let d = dtype_name(dtype);
    let mut names: Vec<String> = OPS.iter().flat_map(|o| op_entries(d, o)).collect();
    names.push(format!("coll_{d}_scale"));
    names.push("coll_barrier".into());
    names
}

/// The entries of one element type and operator: the interpreters (bulk and LL each plain
/// and `_multi`, LL128 plain) and the one-shot allreduce.
fn op_entries(d: &str, o: &str) -> impl Iterator<Item = String> {
    [false, true]
        .map(|ll| interp_entries(d, o, ll))
        .into_iter()
        .flatten()
        .chain([ll128_entry(d, o), oneshot_entry(d, o)])
}

/// Which entries of one element type a [`KernelUnit`] holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnitPart {
    /// The interpreter of operator `OPS[op]` for one protocol (`ll`: the low-latency one):
    /// its plain entry, or (`multi`) its `_multi` twin for blocks of several peers.
    Interp { op: usize, ll: bool, multi: bool },
    /// The LL128 interpreter of operator `OPS[op]` (plain only).
    Ll128 { op: usize },
    /// The avg scaling and the copy-engine barrier: small, and needed by every plan.
    Aux,
}

/// One NVRTC program of a load: some entries of one element type, selected by defines of
/// the source (`entries.cu`), compiled, cached and loaded as a module of its own.
///
/// One per operator, protocol and twin: NVRTC's time grows with the entries, and a load
/// compiles its units at once on threads, so its wall time is about the slowest unit's (one
/// entry of an interpreter: `bench/results/2026-11-24-cpu-kernel-compile.md`; the `_multi`
/// twins, in the same units, more than doubled a plain plan's cold compile on an H100 until
/// they got units of their own, `bench/results/2026-11-25-h100x1-kernel-units.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelUnit {
    pub dtype: DType,
    pub part: UnitPart,
}

impl KernelUnit {
    /// Its name in the cache and the setup report: e.g. `f32-sum-bulk`, `f32-max-ll`,
    /// `f32-aux`. Distinct for every unit of every type.
    pub fn name(&self) -> String {
        let d = dtype_name(self.dtype);
        match self.selection() {
            Some((op, proto, multi)) => {
                let twin = if multi { "-multi" } else { "" };
                format!("{d}-{}-{proto}{twin}", op_at(op))
            }
            None => format!("{d}-aux"),
        }
    }

    /// The NVRTC defines that select its entries from the source.
    pub fn defines(&self) -> Vec<String> {
        let mut defs = vec![nvrtc::dtype_define(self.dtype)];
        let Some((op, proto, multi)) = self.selection() else {
            defs.push("-DCOLL_AUX".into());
            return defs;
        };
        defs.push(format!("-DCOLL_OP_{}", op_at(op).to_ascii_uppercase()));
        defs.push(format!("-DCOLL_PROTO_{}", proto.to_ascii_uppercase()));
        defs.push(
            if multi {
                "-DCOLL_ENTRIES_MULTI"
            } else {
                "-DCOLL_ENTRIES_PLAIN"
            }
            .into(),
        );
        defs
    }

    /// The operator (an index into `OPS`), protocol (as the unit's name spells it) and
    /// twin (`_multi` or plain) an interpreter's unit selects; `None` for the aux unit.
    fn selection(&self) -> Option<(usize, &'static str, bool)> {
        match self.part {
            UnitPart::Interp { op, ll, multi } => Some((op, if ll { "ll" } else { "bulk" }, multi)),
            UnitPart::Ll128 { op } => Some((op, "ll128", false)),
            UnitPart::Aux => None,
        }
    }

    /// The entries it holds.
    pub fn entries(&self) -> Vec<String> {
        let d = dtype_name(self.dtype);
        match self.part {
            UnitPart::Interp { op, ll, multi } => {
                let [plain, twin] = interp_entries(d, op_at(op), ll);
                match (ll, multi) {
                    (_, true) => vec![twin],
                    (true, false) => vec![plain, oneshot_entry(d, op_at(op))],
                    (false, false) => vec![plain],
                }
            }
            UnitPart::Ll128 { op } => vec![ll128_entry(d, op_at(op))],
            UnitPart::Aux => vec![format!("coll_{d}_scale"), "coll_barrier".into()],
        }
    }

    /// What [`nvrtc::images`] compiles for it.
    pub fn source(&self) -> UnitSource {
        UnitSource {
            name: self.name(),
            defines: self.defines(),
        }
    }
}

/// The units a load of `dtype` compiles: the interpreter per operator and protocol, their
/// `_multi` twins (bulk and LL) where the plan has a block of `several` peers, and the avg
/// scaling with the barrier; for a plan that never `reduces`, sum's interpreters only, which
/// then serve every operator.
pub fn units_of(dtype: DType, reduces: bool, several: bool) -> Vec<KernelUnit> {
    let ops = if reduces { OPS.len() } else { 1 };
    let twins: &[bool] = if several { &[false, true] } else { &[false] };
    let mut units: Vec<KernelUnit> = twins
        .iter()
        .flat_map(|&multi| {
            (0..ops).flat_map(move |op| {
                [false, true].map(|ll| KernelUnit {
                    dtype,
                    part: UnitPart::Interp { op, ll, multi },
                })
            })
        })
        .collect();
    units.extend((0..ops).map(|op| KernelUnit {
        dtype,
        part: UnitPart::Ll128 { op },
    }));
    units.push(KernelUnit {
        dtype,
        part: UnitPart::Aux,
    });
    units
}

/// The index in `units` of the unit that holds entry `name`, if one does.
pub fn unit_of_entry(units: &[KernelUnit], name: &str) -> Option<usize> {
    units
        .iter()
        .position(|u| u.entries().iter().any(|e| e == name))
}

/// Compiles every unit of each of `dtypes` (every operator's) for GPUs of architecture
/// `arch` (`sm_90`) into `cache_dir`, where loads then read them, on up to `threads`
/// threads, with no GPU: a container image or a shared directory prepared this way spares
/// every fresh process of a job the compile. Units already there are read, not compiled
/// again. Returns the units, in the order of `dtypes`, and how each was had.
pub fn prebuild(
    source: &str,
    arch: &str,
    dtypes: &[DType],
    cache_dir: &std::path::Path,
    threads: usize,
) -> Result<(Vec<KernelUnit>, nvrtc::UnitImages), ExecError> {
    let units: Vec<KernelUnit> = dtypes
        .iter()
        .flat_map(|&d| units_of(d, true, true))
        .collect();
    let sources: Vec<UnitSource> = units.iter().map(KernelUnit::source).collect();
    let images = nvrtc::images(source, arch, &sources, Some(cache_dir), threads)?;
    Ok((units, images))
}

/// Whether a load of each of `dtypes` for architecture `arch` would compile nothing: every
/// unit is built into the binary or in `cache_dir` as machine code already (what
/// [`prebuild`] would find there): a look at names only.
pub fn prebuilt(source: &str, arch: &str, dtypes: &[DType], cache_dir: &std::path::Path) -> bool {
    dtypes.iter().all(|&d| {
        let units = units_of(d, true, true);
        let sources: Vec<UnitSource> = units.iter().map(KernelUnit::source).collect();
        nvrtc::builtin_present(source, arch, &sources)
            || units
                .iter()
                .all(|u| nvrtc::cache_path(cache_dir, source, arch, &u.name(), true).exists())
    })
}

/// Every entry of the kernel source with no define: the interpreter per element type,
/// operator and protocol (bulk, `_ll`, each plain and `_multi`; `_ll128`), the one-shot
/// allreduce per element type and operator, the avg scaling per element type, and the
/// barrier of copy-engine calls.
pub fn entry_names() -> Vec<String> {
    let mut names: Vec<String> = DTYPES
        .iter()
        .flat_map(|d| {
            OPS.iter()
                .flat_map(move |o| op_entries(d, o))
                .chain(std::iter::once(format!("coll_{d}_scale")))
        })
        .collect();
    names.push("coll_barrier".into());
    names
}

pub(super) fn dtype_name(d: DType) -> &'static str {
    d.name()
}

pub(super) fn op_name(o: ReduceOp) -> &'static str {
    match o.combine() {
        ReduceOp::Sum | ReduceOp::Avg => "sum",
        ReduceOp::Prod => "prod",
        ReduceOp::Min => "min",
        ReduceOp::Max => "max",
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn every_entry_is_named_once() {
        let names = entry_names();
        // Per type: bulk and LL per operator, each plain and `_multi`, LL128 plain, the
        // one-shot, the scale; then the barrier.
        assert_eq!(names.len(), DTYPES.len() * (6 * OPS.len() + 1) + 1);
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len());
        assert!(names.contains(&"coll_bf16_max".to_string()));
        assert!(names.contains(&"coll_bf16_max_ll_multi".to_string()));
        assert!(names.contains(&"coll_bf16_max_ll128".to_string()));
        assert!(names.contains(&"coll_bf16_max_oneshot".to_string()));
        assert!(!names.iter().any(|n| n.contains("ll128_multi")));
        assert!(names.contains(&"coll_f32_scale".to_string()));
        assert!(names.contains(&"coll_barrier".to_string()));
        assert!(!names.iter().any(|n| n.contains("ceiling")));
    }

    #[test]
    fn a_load_of_one_type_names_its_entries_and_the_barrier() {
        let f32s = entry_names_of(DType::F32);
        assert_eq!(f32s.len(), 6 * OPS.len() + 2);
        assert!(f32s.contains(&"coll_f32_min_ll".to_string()));
        assert!(f32s.contains(&"coll_f32_min_ll128".to_string()));
        assert!(f32s.contains(&"coll_f32_min_ll_multi".to_string()));
        assert!(f32s.contains(&"coll_f32_max_multi".to_string()));
        assert!(f32s.contains(&"coll_f32_scale".to_string()));
        assert!(f32s.contains(&"coll_barrier".to_string()));
        assert!(!f32s.iter().any(|n| n.contains("f64")));
        // Every type's load together names every entry of the source.
        let mut union: Vec<String> = DType::ALL.iter().flat_map(|&d| entry_names_of(d)).collect();
        union.sort();
        union.dedup();
        let mut all = entry_names();
        all.sort();
        assert_eq!(union, all);
    }

    #[test]
    fn the_units_of_a_load_hold_each_of_its_entries_once() {
        for d in DType::ALL {
            let units = units_of(d, true, true);
            // Bulk and LL, each plain and `_multi`, and LL128 per operator, then aux.
            assert_eq!(units.len(), 5 * OPS.len() + 1);
            let mut held: Vec<String> = units.iter().flat_map(KernelUnit::entries).collect();
            held.sort();
            let mut want = entry_names_of(d);
            want.sort();
            assert_eq!(held, want, "{}", d.name());
            // The lookup finds each entry in the one unit that holds it.
            for (i, u) in units.iter().enumerate() {
                for e in u.entries() {
                    assert_eq!(unit_of_entry(&units, &e), Some(i), "{e}");
                }
            }
        }
        let f32s = units_of(DType::F32, true, true);
        let at = |e: &str| unit_of_entry(&f32s, e).map(|i| f32s[i].name());
        assert_eq!(at("coll_f32_min_ll").as_deref(), Some("f32-min-ll"));
        // The one-shot beside its operator's plain LL interpreter.
        assert_eq!(at("coll_f32_min_oneshot").as_deref(), Some("f32-min-ll"));
        // An interpreter's `_multi` twin is in a unit of its own.
        assert_eq!(
            at("coll_f32_min_ll_multi").as_deref(),
            Some("f32-min-ll-multi")
        );
        assert_eq!(
            at("coll_f32_max_multi").as_deref(),
            Some("f32-max-bulk-multi")
        );
        assert_eq!(at("coll_f32_max").as_deref(), Some("f32-max-bulk"));
        assert_eq!(at("coll_barrier").as_deref(), Some("f32-aux"));
        assert_eq!(at("coll_f32_scale").as_deref(), Some("f32-aux"));
        assert_eq!(at("coll_f64_sum"), None);
    }

    #[test]
    fn unit_names_and_defines_tell_every_unit_apart() {
        let all: Vec<KernelUnit> = DType::ALL
            .iter()
            .flat_map(|&d| units_of(d, true, true))
            .collect();
        let mut names: Vec<String> = all.iter().map(KernelUnit::name).collect();
        let mut defines: Vec<Vec<String>> = all.iter().map(KernelUnit::defines).collect();
        names.sort();
        names.dedup();
        defines.sort();
        defines.dedup();
        assert_eq!((names.len(), defines.len()), (all.len(), all.len()));
        let u = KernelUnit {
            dtype: DType::F32,
            part: UnitPart::Interp {
                op: 1,
                ll: true,
                multi: true,
            },
        };
        assert_eq!(u.name(), "f32-prod-ll-multi");
        assert_eq!(
            u.defines(),
            [
                "-DCOLL_DTYPE_F32",
                "-DCOLL_OP_PROD",
                "-DCOLL_PROTO_LL",
                "-DCOLL_ENTRIES_MULTI"
            ]
        );
        // Every define a unit passes is one the source tests.
        let source = include_str!("../kernel/entries.cu");
        for d in all.iter().flat_map(KernelUnit::defines) {
            let name = d.trim_start_matches("-D");
            assert!(source.contains(&format!("defined({name})")), "{name}");
        }
    }
}
