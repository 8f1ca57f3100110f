//! The library's settings, from NCCL-style environment variables.
//!
//! Only the C entry layer reads the environment (once, at the first call), through
//! [`Settings::from_lookup`]; everything below it takes a [`Settings`]. Unset variables keep
//! the defaults; the GPU executor's own knobs (`COLL_*`, see the executor's SETTINGS.md)
//! come through the same lookup.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `NCCL_DEBUG` | `WARN`, `INFO` or `TRACE`: what the library logs to stderr (`VERSION` prints the version once) | warnings only |
//! | `COLL_NCCL_ALGORITHMS` | a directory of `.coll` files that join the shipped algorithms as candidates | none |
//! | `COLL_NCCL_TUNING` | tuning tables (`coll bench --auto`'s output) that pick the plan per collective and size: files or directories of `*.json` tables, separated by `:`; those of other rank counts are skipped, and two for one collective and rank count are an error; `none`: the cost model alone | the tables built in for the machine measured ([`crate::select::BUILTIN`]) where this is one, else the cost model |
//! | `COLL_NCCL_ALGO` | force an algorithm per collective: `allreduce=ring,allgather=rd` (file stem or path) | none |
//! | `COLL_NCCL_DISABLE` | collectives coll does not serve (`alltoall,broadcast`, or `all`): forwarded to the real NCCL | none |
//! | `COLL_NCCL_REAL` | path of the real `libnccl.so.2` for what coll forwards | searched: see [`crate::real`] |
//! | `COLL_NCCL_FORWARD` | `0`: never load the real NCCL; a call coll cannot serve fails with `ncclInvalidUsage` | `1` |
//! | `COLL_NCCL_REAL_INIT` | when the real NCCL's communicator beside one coll serves is made: `lazy`, at the first call forwarded to it where all of the communicator's ranks live in this process or it has two ranks (at init otherwise: across processes making it is itself a collective, and a forwarded point-to-point call of more than two ranks reaches only two), so a job whose calls coll all serves never pays NCCL's init; `eager`, at init always (the first forwarded call may then come inside a CUDA-graph capture, where a communicator cannot be made) | `lazy` |
//! | `COLL_NCCL_MAX_EXECUTORS` | loaded plans (executors, each holding GPU memory) kept per communicator; past it the least recently used one that no call is using is freed ([`crate::clique`]) | 32 |
//! | `COLL_NCCL_PREBUILD` | element types whose kernel a communicator's first init has compiled into the kernel cache in the background (`f32,bf16`; empty: none), so that a first call of them finds it there ([`crate::prebuild`]) | `f32,bf16` |
//! | `COLL_NET_HOST` | the address other processes reach this one at (communicators spread over processes) | the route toward `MASTER_ADDR`, else toward the default gateway, else 127.0.0.1 |
//! | `MASTER_ADDR` | the launcher's rendezvous host (torchrun sets it): where rank 0's address is looked for | none |
//!
//! Invariant: a [`Settings`] is complete and valid; a variable that does not parse is an
//! error naming it, returned by the first NCCL call (never a silent default).

use coll_executor::cuda::settings::{GpuSettings, SettingsError};
use coll_executor::dtype::DType;
use coll_lang::builtins::CollectiveKind;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// How much the library logs (`NCCL_DEBUG`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// Nothing but the version line NCCL prints at `VERSION`.
    Version,
    /// Warnings: every forwarded call kind, once; errors.
    #[default]
    Warn,
    /// Also each communicator and each plan chosen.
    Info,
    /// Also every call.
    Trace,
}

/// Why a variable was refused.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{var}={value}: {why}")]
    Bad {
        var: &'static str,
        value: String,
        why: String,
    },
    #[error(transparent)]
    Gpu(#[from] SettingsError),
}

/// When the real NCCL's communicator beside one coll serves is made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RealInit {
    /// At the first forwarded call, where all of the communicator's ranks live in this
    /// process or it has two ranks (one process per GPU on 2 GPUs); at init otherwise.
    #[default]
    Lazy,
    /// At init.
    Eager,
}

/// Which collectives coll leaves to the real NCCL.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Disabled {
    #[default]
    None,
    All,
    Some(BTreeSet<&'static str>),
}

impl Disabled {
    pub fn contains(&self, kind: CollectiveKind) -> bool {
        match self {
            Disabled::None => false,
            Disabled::All => true,
            Disabled::Some(s) => s.contains(kind.name()),
        }
    }
}

/// Everything the library is told by its environment.
#[derive(Clone, Debug)]
pub struct Settings {
    pub log: LogLevel,
    pub algorithms: Option<PathBuf>,
    /// Tuning tables and directories of them (`COLL_NCCL_TUNING`), in order.
    pub tuning: Vec<PathBuf>,
    /// Whether, with no `tuning` given, the tables built in for this machine serve
    /// (`COLL_NCCL_TUNING=none` turns them off).
    pub builtin_tuning: bool,
    /// Collective name -> the algorithm forced for it.
    pub force: BTreeMap<&'static str, String>,
    pub disabled: Disabled,
    pub real: Option<PathBuf>,
    pub forward: bool,
    /// When the real NCCL's communicator beside coll's is made (`COLL_NCCL_REAL_INIT`).
    pub real_init: RealInit,
    /// Executors kept per clique (`COLL_NCCL_MAX_EXECUTORS`), at least 1.
    pub max_executors: usize,
    /// Element types compiled ahead of a first call (`COLL_NCCL_PREBUILD`).
    pub prebuild: Vec<DType>,
    pub net_host: Option<std::net::IpAddr>,
    pub master_addr: Option<String>,
    pub gpu: GpuSettings,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            log: LogLevel::Warn,
            algorithms: None,
            tuning: Vec::new(),
            builtin_tuning: true,
            force: BTreeMap::new(),
            disabled: Disabled::None,
            real: None,
            forward: true,
            real_init: RealInit::Lazy,
            max_executors: DEFAULT_MAX_EXECUTORS,
            prebuild: DEFAULT_PREBUILD.to_vec(),
            net_host: None,
            master_addr: None,
            gpu: GpuSettings::default(),
        }
    }
}

/// Executors kept per clique unless `COLL_NCCL_MAX_EXECUTORS` says otherwise: room for a
/// training job's collectives at their size classes and roots and its usual point-to-point
/// patterns (reloading one costs a plan load, hundreds of milliseconds), while a job of
/// ever new patterns holds at most this many executors' GPU memory per communicator.
pub const DEFAULT_MAX_EXECUTORS: usize = 32;

/// What a communicator's init compiles ahead unless `COLL_NCCL_PREBUILD` says otherwise: the
/// element types training jobs reduce in.
pub const DEFAULT_PREBUILD: [DType; 2] = [DType::F32, DType::Bf16];

/// The collectives NCCL's API has, by the names the variables use.
const COLLECTIVES: [CollectiveKind; 7] = [
    CollectiveKind::AllReduce,
    CollectiveKind::AllGather,
    CollectiveKind::ReduceScatter,
    CollectiveKind::AllToAll,
    CollectiveKind::Broadcast,
    CollectiveKind::Reduce,
    CollectiveKind::SendRecv,
];

fn collective(var: &'static str, name: &str) -> Result<&'static str, Error> {
    let name = name.trim().to_ascii_lowercase();
    COLLECTIVES
        .iter()
        .map(|k| k.name())
        .find(|k| *k == name)
        .ok_or_else(|| Error::Bad {
            var,
            value: name.clone(),
            why: format!(
                "not a collective; expected one of {}",
                COLLECTIVES.map(|k| k.name()).join(", ")
            ),
        })
}

impl Settings {
    /// The settings `lookup` gives (the C entry layer passes the process environment).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Settings, Error> {
        let mut s = Settings {
            gpu: GpuSettings::from_lookup(&lookup)?,
            ..Settings::default()
        };
        if let Some(v) = lookup("NCCL_DEBUG") {
            s.log = match v.trim().to_ascii_uppercase().as_str() {
                "VERSION" => LogLevel::Version,
                "WARN" | "" => LogLevel::Warn,
                "INFO" => LogLevel::Info,
                "TRACE" | "ABORT" => LogLevel::Trace,
                _ => {
                    return Err(Error::Bad {
                        var: "NCCL_DEBUG",
                        value: v,
                        why: "expected VERSION, WARN, INFO or TRACE".into(),
                    });
                }
            };
        }
        s.algorithms = lookup("COLL_NCCL_ALGORITHMS")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        match lookup("COLL_NCCL_TUNING") {
            Some(v) if v.trim() == "none" => s.builtin_tuning = false,
            Some(v) => {
                s.tuning = v
                    .split(':')
                    .filter(|p| !p.is_empty())
                    .map(PathBuf::from)
                    .collect()
            }
            None => {}
        }
        s.real = lookup("COLL_NCCL_REAL")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        if let Some(v) = lookup("COLL_NCCL_ALGO") {
            for item in v.split(',').filter(|i| !i.trim().is_empty()) {
                let Some((k, algo)) = item.split_once('=') else {
                    return Err(Error::Bad {
                        var: "COLL_NCCL_ALGO",
                        value: v.clone(),
                        why: format!("`{item}` is not COLLECTIVE=ALGORITHM"),
                    });
                };
                let algo = algo.trim();
                if algo.is_empty() {
                    return Err(Error::Bad {
                        var: "COLL_NCCL_ALGO",
                        value: v.clone(),
                        why: format!("`{item}` names no algorithm"),
                    });
                }
                s.force
                    .insert(collective("COLL_NCCL_ALGO", k)?, algo.to_string());
            }
        }
        if let Some(v) = lookup("COLL_NCCL_DISABLE") {
            s.disabled = match v.trim() {
                "" | "none" => Disabled::None,
                "all" => Disabled::All,
                list => Disabled::Some(
                    list.split(',')
                        .map(|k| collective("COLL_NCCL_DISABLE", k))
                        .collect::<Result<_, _>>()?,
                ),
            };
        }
        if let Some(v) = lookup("COLL_NET_HOST").filter(|v| !v.trim().is_empty()) {
            s.net_host = Some(v.trim().parse().map_err(|_| Error::Bad {
                var: "COLL_NET_HOST",
                value: v.clone(),
                why: "not an IP address".into(),
            })?);
        }
        s.master_addr = lookup("MASTER_ADDR").filter(|v| !v.trim().is_empty());
        if let Some(v) = lookup("COLL_NCCL_FORWARD") {
            s.forward = match v.trim() {
                "1" => true,
                "0" => false,
                _ => {
                    return Err(Error::Bad {
                        var: "COLL_NCCL_FORWARD",
                        value: v,
                        why: "expected 0 or 1".into(),
                    });
                }
            };
        }
        if let Some(v) = lookup("COLL_NCCL_REAL_INIT").filter(|v| !v.trim().is_empty()) {
            s.real_init = match v.trim().to_ascii_lowercase().as_str() {
                "lazy" => RealInit::Lazy,
                "eager" => RealInit::Eager,
                _ => {
                    return Err(Error::Bad {
                        var: "COLL_NCCL_REAL_INIT",
                        value: v,
                        why: "expected lazy or eager".into(),
                    });
                }
            };
        }
        if let Some(v) = lookup("COLL_NCCL_PREBUILD") {
            s.prebuild = v
                .split(',')
                .map(str::trim)
                .filter(|d| !d.is_empty())
                .map(|d| {
                    DType::from_name(&d.to_ascii_lowercase()).ok_or_else(|| Error::Bad {
                        var: "COLL_NCCL_PREBUILD",
                        value: v.clone(),
                        why: format!(
                            "`{d}` is not an element type ({})",
                            DType::ALL.map(|t| t.name()).join(", ")
                        ),
                    })
                })
                .collect::<Result<_, _>>()?;
        }
        if let Some(v) = lookup("COLL_NCCL_MAX_EXECUTORS").filter(|v| !v.trim().is_empty()) {
            s.max_executors = match v.trim().parse::<usize>() {
                Ok(n) if n >= 1 => n,
                _ => {
                    return Err(Error::Bad {
                        var: "COLL_NCCL_MAX_EXECUTORS",
                        value: v,
                        why: "expected a whole number of at least 1".into(),
                    });
                }
            };
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(vars: &[(&str, &str)]) -> Result<Settings, Error> {
        Settings::from_lookup(|k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn defaults_serve_everything_and_may_forward() {
        let s = from(&[]).expect("defaults");
        assert_eq!(s.log, LogLevel::Warn);
        assert!(s.forward);
        assert!(!s.disabled.contains(CollectiveKind::AllReduce));
        assert!(s.force.is_empty());
        assert_eq!(s.max_executors, DEFAULT_MAX_EXECUTORS);
        assert_eq!(s.prebuild, [DType::F32, DType::Bf16]);
        assert_eq!(s.real_init, RealInit::Lazy);
        assert!(s.tuning.is_empty() && s.builtin_tuning);
    }

    #[test]
    fn tuning_names_tables_or_none() {
        let s = from(&[("COLL_NCCL_TUNING", "/t/a.json::/t/dir")]).expect("valid");
        assert_eq!(
            s.tuning,
            [PathBuf::from("/t/a.json"), PathBuf::from("/t/dir")]
        );
        let none = from(&[("COLL_NCCL_TUNING", "none")]).expect("valid");
        assert!(none.tuning.is_empty() && !none.builtin_tuning);
    }

    #[test]
    fn variables_set_what_they_name() {
        let s = from(&[
            ("NCCL_DEBUG", "info"),
            ("COLL_NCCL_ALGO", "allreduce=ring, allgather = rd"),
            ("COLL_NCCL_DISABLE", "alltoall,broadcast"),
            ("COLL_NCCL_FORWARD", "0"),
            ("COLL_NCCL_REAL", "/opt/nccl/libnccl.so.2"),
            ("COLL_NCCL_MAX_EXECUTORS", " 3 "),
            ("COLL_NCCL_PREBUILD", "F16, i32"),
            ("COLL_NCCL_REAL_INIT", "Eager"),
        ])
        .expect("valid");
        assert_eq!(s.real_init, RealInit::Eager);
        assert_eq!(s.prebuild, [DType::F16, DType::I32]);
        let none = from(&[("COLL_NCCL_PREBUILD", "")]).expect("valid");
        assert!(none.prebuild.is_empty());
        assert_eq!(s.max_executors, 3);
        assert_eq!(s.log, LogLevel::Info);
        assert_eq!(s.force.get("allreduce").map(String::as_str), Some("ring"));
        assert_eq!(s.force.get("allgather").map(String::as_str), Some("rd"));
        assert!(s.disabled.contains(CollectiveKind::AllToAll));
        assert!(s.disabled.contains(CollectiveKind::Broadcast));
        assert!(!s.disabled.contains(CollectiveKind::AllReduce));
        assert!(!s.forward);
        assert_eq!(s.real, Some(PathBuf::from("/opt/nccl/libnccl.so.2")));
        let all = from(&[("COLL_NCCL_DISABLE", "all")]).expect("valid");
        assert!(all.disabled.contains(CollectiveKind::Reduce));
    }

    #[test]
    fn bad_values_name_their_variable() {
        let e = |vars: &[(&str, &str)]| match from(vars) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("{vars:?} accepted"),
        };
        assert_eq!(
            e(&[("COLL_NCCL_FORWARD", "yes")]),
            "COLL_NCCL_FORWARD=yes: expected 0 or 1"
        );
        assert_eq!(
            e(&[("COLL_NCCL_REAL_INIT", "soon")]),
            "COLL_NCCL_REAL_INIT=soon: expected lazy or eager"
        );
        assert_eq!(
            e(&[("COLL_NCCL_PREBUILD", "f32,fp8")]),
            "COLL_NCCL_PREBUILD=f32,fp8: `fp8` is not an element type (f32, f64, f16, bf16, \
             i32, i64, u8)"
        );
        assert!(
            e(&[("COLL_NCCL_DISABLE", "allreduce,gather")]).starts_with(
                "COLL_NCCL_DISABLE=gather: not a collective; expected one of allreduce"
            )
        );
        assert_eq!(
            e(&[("COLL_NCCL_ALGO", "allreduce")]),
            "COLL_NCCL_ALGO=allreduce: `allreduce` is not COLLECTIVE=ALGORITHM"
        );
        assert!(e(&[("NCCL_DEBUG", "LOUD")]).starts_with("NCCL_DEBUG=LOUD"));
        for bad in ["0", "-2", "many"] {
            assert_eq!(
                e(&[("COLL_NCCL_MAX_EXECUTORS", bad)]),
                format!("COLL_NCCL_MAX_EXECUTORS={bad}: expected a whole number of at least 1")
            );
        }
    }
}
