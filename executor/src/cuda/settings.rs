//! The GPU executor's settings, resolved: what [`CudaExecutor::load`](super::CudaExecutor::load)
//! uses, with nothing left to look up later.
//!
//! A program builds its [`GpuSettings`] once, from [`GpuSettings::default`] or from its
//! environment through [`GpuSettings::from_lookup`] (`|k| std::env::var(k).ok()`), and hands
//! them to every executor it loads ([`super::LoadOptions::settings`]); the library itself
//! never reads the environment.
//!
//! Invariants:
//! - A [`GpuSettings`] has no field meaning "not decided yet": where a default depends on the
//!   plan or the machine ([`CeMin::Auto`], [`LaunchMode::Auto`]), the enum names that rule
//!   and loading applies it.
//! - [`KNOBS`] lists every variable [`GpuSettings::from_lookup`] reads, once each, and each
//!   knob's value type picks one of the four parsers (switch, size, number, duration) plus
//!   paths; an error names the variable and the value it had.
//! - A knob's default, where it is a value, parses to the field's [`Default`] value (a test
//!   checks every knob).
//! - `executor/SETTINGS.md` is [`GpuSettings::markdown_table`] under a fixed heading. A test
//!   compares the two; after changing [`KNOBS`], regenerate the file with
//!   `COLL_BLESS=1 cargo test -p coll-executor --lib settings`.

use super::{
    BULK_SUB_BYTES, CE_MIN_BYTES, CE_MIN_CAPTURED_BYTES, LL_SUB_BYTES, LL128_SUB_BYTES, MAX_SPLIT,
    ONESHOT_MAX_BYTES, SLOT_BYTES, SLOT_BYTES_MIN,
};
use std::path::PathBuf;
use std::time::Duration;

/// Caps the CTAs per plan block ([`GpuSettings::split_cap`]).
pub const SPLIT_VAR: &str = "COLL_GPU_SPLIT";
/// The LL message threshold ([`GpuSettings::ll_max`]).
pub const LL_MAX_VAR: &str = "COLL_GPU_LL_MAX";
/// LL data per sub-CTA ([`GpuSettings::ll_sub_bytes`]).
pub const LL_SUB_VAR: &str = "COLL_GPU_LL_SUB";
/// The LL128 message threshold ([`GpuSettings::ll128_max`]).
pub const LL128_MAX_VAR: &str = "COLL_GPU_LL128_MAX";
/// LL128 data per sub-CTA ([`GpuSettings::ll128_sub_bytes`]).
pub const LL128_SUB_VAR: &str = "COLL_GPU_LL128_SUB";
/// Bulk data per sub-CTA ([`GpuSettings::bulk_sub_bytes`]).
pub const BULK_SUB_VAR: &str = "COLL_GPU_BULK_SUB";
/// Bytes of each bulk staging slot ([`GpuSettings::slot_bytes`]).
pub const SLOT_BYTES_VAR: &str = "COLL_GPU_SLOT_BYTES";
/// The one-shot allreduce's threshold ([`GpuSettings::oneshot_max`]).
pub const ONESHOT_MAX_VAR: &str = "COLL_GPU_ONESHOT_MAX";
/// Direct messages on or off ([`GpuSettings::direct`]).
pub const DIRECT_VAR: &str = "COLL_GPU_DIRECT";
/// Swaps on or off ([`GpuSettings::swaps`]).
pub const SWAP_VAR: &str = "COLL_GPU_SWAP";
/// The least copy-engine call ([`GpuSettings::ce_min`]).
pub const CE_MIN_VAR: &str = "COLL_GPU_CE_MIN";
/// Launch threads on or off ([`GpuSettings::launch_threads`]).
pub const LAUNCH_THREADS_VAR: &str = "COLL_GPU_LAUNCH_THREADS";
/// How long idle launch threads spin ([`GpuSettings::launch_spin`]).
pub const LAUNCH_SPIN_VAR: &str = "COLL_GPU_LAUNCH_SPIN_US";
/// The call timeout ([`GpuSettings::timeout`]).
pub const TIMEOUT_VAR: &str = "COLL_GPU_TIMEOUT";
/// The LL epoch, a test hook ([`GpuSettings::ll_epoch`]).
pub const LL_EPOCH_VAR: &str = "COLL_GPU_LL_EPOCH";
/// The kernel cache directory ([`GpuSettings::cache_dir`]).
pub const CACHE_DIR_VAR: &str = "COLL_CACHE_DIR";

/// Idle launch threads spin this long after a job: well above the gap between eager calls in
/// a loop (about 10 µs), short enough that a process that stops calling frees its cores at
/// once.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(500);
/// A wait that sees no progress for this long fails the call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Every setting of the GPU executor, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuSettings {
    /// Most CTAs per plan block ([`super::split_factor`]); it never exceeds one CTA per SM,
    /// since the CTAs wait on each other and must all be resident at once. 0 acts as 1.
    pub split_cap: u32,
    /// Calls whose largest message is at most this many bytes, and whose larger buffer is at
    /// most [`super::LL_CALL_FACTOR`] times that, use the LL protocol.
    pub ll_max: Threshold,
    /// LL data one sub-CTA carries per message before a call is spread over more sub-CTAs
    /// ([`super::slicing_ll`]); 0 acts as 1.
    pub ll_sub_bytes: u64,
    /// Calls beyond LL's limits whose largest message is at most this many bytes, and whose
    /// larger buffer is at most [`super::LL_CALL_FACTOR`] times that, use LL128 where the
    /// plan allows it ([`super::config::CallLimits::ll128`]).
    pub ll128_max: Threshold,
    /// LL128 data one sub-CTA carries per message before a call is spread over more
    /// sub-CTAs ([`super::config::slicing_ll128`]); 0 acts as 1.
    pub ll128_sub_bytes: u64,
    /// Bulk data one sub-CTA must get before a chunk is cut over more sub-CTAs
    /// ([`super::slicing`]); 0 acts as 1.
    pub bulk_sub_bytes: u64,
    /// Bytes of each bulk staging slot, two per connection and sub-CTA in the receiver's
    /// memory ([`super::config::slot_bytes`]).
    pub slot_bytes: SlotSize,
    /// Calls of at most this many bytes of a plan that is a one-shot allreduce run as one
    /// exchange of every rank's input in a kernel of its own ([`super::oneshot`]); 0: never.
    pub oneshot_max: u64,
    /// Added to every LL message number, and the one-shot's call counters start there
    /// ([`super::oneshot`]), so a short run crosses the flag's wrap and a clean round (the
    /// kernel's headers): a test hook, 0 otherwise.
    pub ll_epoch: u64,
    /// Whether bulk calls of one process may store messages straight into the receiver's
    /// buffers where the plan allows it ([`super::direct`]).
    pub direct: bool,
    /// Whether direct messages may swap halves in place ([`super::direct::DirectOps::swaps`]).
    pub swaps: bool,
    /// Which bulk calls of one process run on the copy engines where the plan allows
    /// ([`super::copy_engine`]).
    pub ce_min: CeMin,
    /// Whether a call's GPUs are enqueued at once from one host thread per GPU
    /// ([`super::launch_threads`]).
    pub launch_threads: LaunchMode,
    /// How long idle launch threads spin after a call before they park.
    pub launch_spin: Duration,
    /// Where compiled kernels are kept between runs; `None`: no disk cache, the kernel is
    /// compiled at every load. [`GpuSettings::from_lookup`] computes the usual place.
    pub cache_dir: Option<PathBuf>,
    /// A wait that sees no progress for this long fails the call (reported by
    /// [`super::CudaExecutor::check_error`]).
    pub timeout: Duration,
}

impl Default for GpuSettings {
    /// The measured defaults, and no disk cache (where it would go depends on the
    /// environment, which [`GpuSettings::from_lookup`] reads).
    fn default() -> GpuSettings {
        GpuSettings {
            split_cap: MAX_SPLIT,
            ll_max: Threshold::Auto,
            ll_sub_bytes: LL_SUB_BYTES,
            ll128_max: Threshold::Auto,
            ll128_sub_bytes: LL128_SUB_BYTES,
            bulk_sub_bytes: BULK_SUB_BYTES,
            slot_bytes: SlotSize::Auto,
            oneshot_max: ONESHOT_MAX_BYTES,
            ll_epoch: 0,
            direct: true,
            swaps: true,
            ce_min: CeMin::Auto,
            launch_threads: LaunchMode::Auto,
            launch_spin: DEFAULT_SPIN,
            cache_dir: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

/// The least call (its larger buffer, bytes) that runs on the copy engines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CeMin {
    /// [`CE_MIN_BYTES`] where each GPU copies to one other GPU ([`CE_MIN_CAPTURED_BYTES`]
    /// for calls captured into CUDA graphs), and never where a GPU copies
    /// to several: from 32 MiB on the copy engines were faster for broadcast, allgather and
    /// alltoall with one peer, and a GPU copying to several took longer than the kernel
    /// (bench/NOTES.md, Copy engines).
    Auto,
    /// No call runs on the copy engines.
    Never,
    /// Calls of at least this many bytes, whatever the plan's peers; `From(0)` is `Never`.
    From(u64),
}

impl CeMin {
    /// The least copy-engine call in bytes for a plan (0: never), given whether each of its
    /// GPUs copies to one other GPU only.
    pub fn bytes(self, one_peer: bool) -> u64 {
        match self {
            CeMin::Auto if one_peer => CE_MIN_BYTES,
            CeMin::Auto | CeMin::Never => 0,
            CeMin::From(b) => b,
        }
    }

    /// As [`CeMin::bytes`], for calls captured into CUDA graphs, which order the copies with
    /// barrier kernels, not events: [`CE_MIN_CAPTURED_BYTES`] by the rule.
    pub fn bytes_captured(self, one_peer: bool) -> u64 {
        match self {
            CeMin::Auto if one_peer => CE_MIN_CAPTURED_BYTES,
            other => other.bytes(one_peer),
        }
    }
}

/// A protocol's message threshold ([`GpuSettings::ll_max`], [`GpuSettings::ll128_max`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threshold {
    /// The measured rule for the plan ([`super::config::ll_auto_max`],
    /// [`super::config::ll128_auto_max`]).
    Auto,
    /// Messages of at most this many bytes, whatever the plan; `Bytes(0)`: never.
    Bytes(u64),
}

impl Threshold {
    /// The threshold in bytes: as set, or `auto`'s rule.
    pub fn or_auto(self, auto: impl FnOnce() -> u64) -> u64 {
        match self {
            Threshold::Auto => auto(),
            Threshold::Bytes(b) => b,
        }
    }
}

/// Bytes of each bulk staging slot ([`GpuSettings::slot_bytes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotSize {
    /// [`SLOT_BYTES`], halved where a GPU would hold more than
    /// [`super::SLOT_BUDGET_BYTES`] of slots ([`super::config::slot_bytes`]).
    Auto,
    /// Slots of this many bytes: a multiple of [`SLOT_BYTES_MIN`], at most [`SLOT_BYTES`].
    Bytes(u32),
}

/// Whether a call's GPUs are enqueued from one host thread each ([`super::launch_threads`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaunchMode {
    /// On where the process may run on at least one core per GPU: a spinning worker that
    /// shares a core with the caller slows it down.
    Auto,
    On,
    /// The caller's thread enqueues one GPU after another.
    Off,
}

/// A variable [`GpuSettings::from_lookup`] read that does not hold a value of its type.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("environment variable {var}={value:?}: {why}")]
pub struct SettingsError {
    /// The variable, as [`KNOBS`] names it.
    pub var: &'static str,
    /// What it held.
    pub value: String,
    /// What it should hold.
    pub why: &'static str,
}

/// The unit a duration knob counts in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeUnit {
    Micros,
    Secs,
}

impl TimeUnit {
    fn nanos(self) -> f64 {
        match self {
            TimeUnit::Micros => 1e3,
            TimeUnit::Secs => 1e9,
        }
    }

    fn expected(self) -> &'static str {
        match self {
            TimeUnit::Micros => "expected microseconds (a number, 0 or more)",
            TimeUnit::Secs => "expected seconds (a number, 0 or more)",
        }
    }
}

/// The type of a knob's value, as the environment spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KnobType {
    /// `0` (off) or `1` (on).
    Switch,
    /// Bytes: digits with an optional `K`, `M` or `G` (powers of 1024).
    Size,
    /// A whole number.
    Number,
    /// A number (fractions allowed) of the unit.
    Duration(TimeUnit),
    /// A directory; empty means none.
    Path,
}

impl KnobType {
    /// How the table names the type.
    pub fn describe(self) -> &'static str {
        match self {
            KnobType::Switch => "`0` or `1`",
            KnobType::Size => "bytes (K, M, G: ×1024)",
            KnobType::Number => "whole number",
            KnobType::Duration(TimeUnit::Micros) => "microseconds",
            KnobType::Duration(TimeUnit::Secs) => "seconds",
            KnobType::Path => "directory",
        }
    }
}

/// A knob's default: a value in the variable's own syntax, or a rule that depends on the plan,
/// the machine or other variables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KnobDefault {
    Value(&'static str),
    Rule(&'static str),
}

/// Stores a parsed value into the settings, or says why the value is out of range.
type Set<T> = fn(&mut GpuSettings, T) -> Result<(), &'static str>;

/// A knob's parser and where its value goes; the variant is the knob's [`KnobType`].
#[derive(Clone, Copy, Debug)]
enum Setter {
    Switch(Set<bool>),
    Size(Set<u64>),
    Number(Set<u64>),
    Duration(TimeUnit, Set<Duration>),
    Path(Set<Option<PathBuf>>),
}

/// One environment variable of the GPU executor.
#[derive(Clone, Copy, Debug)]
pub struct Knob {
    pub var: &'static str,
    pub default: KnobDefault,
    /// What it does, one or two sentences of Markdown.
    pub meaning: &'static str,
    set: Setter,
}

impl Knob {
    pub fn kind(&self) -> KnobType {
        match self.set {
            Setter::Switch(_) => KnobType::Switch,
            Setter::Size(_) => KnobType::Size,
            Setter::Number(_) => KnobType::Number,
            Setter::Duration(u, _) => KnobType::Duration(u),
            Setter::Path(_) => KnobType::Path,
        }
    }

    /// Parses `value` with the parser of the knob's type and stores it into `s`.
    fn apply(&self, s: &mut GpuSettings, value: &str) -> Result<(), SettingsError> {
        let v = value.trim();
        let stored = match self.set {
            Setter::Switch(set) => parse_switch(v).and_then(|x| set(s, x)),
            Setter::Size(set) => parse_size(v).and_then(|x| set(s, x)),
            Setter::Number(set) => parse_number(v).and_then(|x| set(s, x)),
            Setter::Duration(unit, set) => parse_duration(v, unit).and_then(|x| set(s, x)),
            // A path is taken as written (spaces included).
            Setter::Path(set) => set(s, (!value.is_empty()).then(|| PathBuf::from(value))),
        };
        stored.map_err(|why| SettingsError {
            var: self.var,
            value: value.to_string(),
            why,
        })
    }
}

const AT_LEAST_ONE: &str = "must be at least 1";

/// Every variable of the GPU executor: what [`GpuSettings::from_lookup`] reads and
/// `executor/SETTINGS.md` lists.
pub const KNOBS: &[Knob] = &[
    Knob {
        var: SPLIT_VAR,
        default: KnobDefault::Value("128"),
        meaning: "Most CTAs per plan block, as `NCCL_MAX_NCHANNELS` caps NCCL's channels; never \
                  more than the SMs hold, nor more than 128. The processes of a multi-process run \
                  must agree.",
        set: Setter::Number(|s, x| {
            s.split_cap = u32::try_from(x)
                .ok()
                .filter(|&c| c > 0)
                .ok_or("expected a positive whole number of CTAs per plan block")?;
            Ok(())
        }),
    },
    Knob {
        var: LL_MAX_VAR,
        default: KnobDefault::Rule("`512K`, `256K` from 4 ranks where LL128 serves the plan"),
        meaning: "Calls whose largest message is at most this many bytes, and whose larger \
                  buffer is at most 8 times that, use the low-latency protocol; `0`: bulk only.",
        set: Setter::Size(|s, x| {
            s.ll_max = Threshold::Bytes(x);
            Ok(())
        }),
    },
    Knob {
        var: LL_SUB_VAR,
        default: KnobDefault::Value("1K"),
        meaning: "Data one sub-CTA carries per LL message before a call is spread over more \
                  sub-CTAs.",
        set: Setter::Size(|s, x| {
            s.ll_sub_bytes = (x > 0).then_some(x).ok_or(AT_LEAST_ONE)?;
            Ok(())
        }),
    },
    Knob {
        var: LL128_MAX_VAR,
        default: KnobDefault::Rule("`1M` below 4 ranks, `4M` from 4, `0` for alltoall"),
        meaning: "Calls beyond the low-latency protocol's whose largest message is at most this \
                  many bytes, and whose larger buffer is at most 8 times that, use LL128 (lines \
                  of 120 bytes of data and a flag) where every connection joins two GPUs over \
                  NVLink and no block has several peers; `0`: never.",
        set: Setter::Size(|s, x| {
            s.ll128_max = Threshold::Bytes(x);
            Ok(())
        }),
    },
    Knob {
        var: LL128_SUB_VAR,
        default: KnobDefault::Value("8K"),
        meaning: "Data one sub-CTA carries per LL128 message before a call is spread over more \
                  sub-CTAs.",
        set: Setter::Size(|s, x| {
            s.ll128_sub_bytes = (x > 0).then_some(x).ok_or(AT_LEAST_ONE)?;
            Ok(())
        }),
    },
    Knob {
        var: ONESHOT_MAX_VAR,
        default: KnobDefault::Value("64K"),
        meaning: "Allreduce calls of at most this many bytes (at most 64K) of a plan that sends \
                  every rank's whole input to every other rank run as one exchange in a kernel \
                  of their own instead of the interpreter; `0`: never.",
        set: Setter::Size(|s, x| {
            if x > ONESHOT_MAX_BYTES {
                return Err("at most 64K: the one-shot kernel carries that much in one pass");
            }
            s.oneshot_max = x;
            Ok(())
        }),
    },
    Knob {
        var: BULK_SUB_VAR,
        default: KnobDefault::Value("64K"),
        meaning: "Bulk data one sub-CTA must get before a chunk is cut over more sub-CTAs.",
        set: Setter::Size(|s, x| {
            s.bulk_sub_bytes = (x > 0).then_some(x).ok_or(AT_LEAST_ONE)?;
            Ok(())
        }),
    },
    Knob {
        var: SLOT_BYTES_VAR,
        default: KnobDefault::Rule(
            "`512K`, `256K` where a GPU would hold more than 64 MiB of slots",
        ),
        meaning: "Bytes of each bulk staging slot (two per connection and CTA, in the \
                  receiver's memory): a multiple of 4K, at most 512K. The processes of a \
                  multi-process run must agree.",
        set: Setter::Size(|s, x| {
            let b = u32::try_from(x)
                .ok()
                .filter(|b| (SLOT_BYTES_MIN..=SLOT_BYTES).contains(b))
                .filter(|b| b.is_multiple_of(SLOT_BYTES_MIN))
                .ok_or("expected a multiple of 4K from 4K to 512K")?;
            s.slot_bytes = SlotSize::Bytes(b);
            Ok(())
        }),
    },
    Knob {
        var: DIRECT_VAR,
        default: KnobDefault::Value("1"),
        meaning: "Bulk calls of one process store a message straight into the receiver's \
                  buffer where the plan allows it; `0` stages every message.",
        set: Setter::Switch(|s, x| {
            s.direct = x;
            Ok(())
        }),
    },
    Knob {
        var: SWAP_VAR,
        default: KnobDefault::Value("1"),
        meaning: "Direct messages of two ranks that exchange chunks swap them in place; `0` \
                  stages them.",
        set: Setter::Switch(|s, x| {
            s.swaps = x;
            Ok(())
        }),
    },
    Knob {
        var: CE_MIN_VAR,
        default: KnobDefault::Rule(
            "`32M` where each GPU copies to one other GPU (`64M` in CUDA graphs), else never",
        ),
        meaning: "Bulk calls of one process whose larger buffer has at least this many bytes \
                  run on the copy engines where the plan allows; `0`: never.",
        set: Setter::Size(|s, x| {
            s.ce_min = if x == 0 { CeMin::Never } else { CeMin::From(x) };
            Ok(())
        }),
    },
    Knob {
        var: LAUNCH_THREADS_VAR,
        default: KnobDefault::Rule("`1` where the process may run on a core per GPU, else `0`"),
        meaning: "A call's GPUs are enqueued at once, one host thread each; `0`: the caller's \
                  thread enqueues one GPU after another.",
        set: Setter::Switch(|s, x| {
            s.launch_threads = if x { LaunchMode::On } else { LaunchMode::Off };
            Ok(())
        }),
    },
    Knob {
        var: LAUNCH_SPIN_VAR,
        default: KnobDefault::Value("500"),
        meaning: "How long idle launch threads spin after a call before they sleep.",
        set: Setter::Duration(TimeUnit::Micros, |s, x| {
            s.launch_spin = x;
            Ok(())
        }),
    },
    Knob {
        var: TIMEOUT_VAR,
        default: KnobDefault::Value("30"),
        meaning: "A wait that sees no progress for this long fails the call. `coll run` and \
                  `coll bench` take it from `--timeout` instead.",
        set: Setter::Duration(TimeUnit::Secs, |s, x| {
            s.timeout = (!x.is_zero()).then_some(x).ok_or("must be more than 0")?;
            Ok(())
        }),
    },
    Knob {
        var: LL_EPOCH_VAR,
        default: KnobDefault::Value("0"),
        meaning: "A test hook: added to every LL message number, and where the one-shot \
                  allreduce's call counters start, so a short run crosses the flag's wrap.",
        set: Setter::Number(|s, x| {
            s.ll_epoch = x;
            Ok(())
        }),
    },
    Knob {
        var: CACHE_DIR_VAR,
        default: KnobDefault::Rule(
            "`$HOME/.cache/coll`; without `HOME`, `$TMPDIR/coll-cache` or `/tmp/coll-cache`",
        ),
        meaning: "Where compiled kernels are kept between runs; empty: nowhere (every load \
                  compiles).",
        set: Setter::Path(|s, x| {
            s.cache_dir = x;
            Ok(())
        }),
    },
];

impl GpuSettings {
    /// The settings `lookup` gives, variable by variable ([`KNOBS`]); an unset variable keeps
    /// the default, and the kernel cache goes where the default rule of `COLL_CACHE_DIR`
    /// says (`HOME` and `TMPDIR` come through `lookup` too). The first variable that does not
    /// parse is the error.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        let mut s = GpuSettings {
            cache_dir: Some(default_cache_dir(&lookup)),
            ..GpuSettings::default()
        };
        for knob in KNOBS {
            if let Some(value) = lookup(knob.var) {
                knob.apply(&mut s, &value)?;
            }
        }
        Ok(s)
    }

    /// [`KNOBS`] as a Markdown table: variable, value type, default, meaning.
    pub fn markdown_table() -> String {
        let mut t = String::from("| variable | value | default | meaning |\n|---|---|---|---|\n");
        for k in KNOBS {
            let default = match k.default {
                KnobDefault::Value(v) => format!("`{v}`"),
                KnobDefault::Rule(r) => r.to_string(),
            };
            t.push_str(&format!(
                "| `{}` | {} | {default} | {} |\n",
                k.var,
                k.kind().describe(),
                k.meaning
            ));
        }
        t
    }
}

/// `$HOME/.cache/coll`, else `$TMPDIR/coll-cache`, else `/tmp/coll-cache` (where the standard
/// library's temporary directory is on Unix).
fn default_cache_dir(lookup: &impl Fn(&str) -> Option<String>) -> PathBuf {
    let set = |k: &str| lookup(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    match set("HOME") {
        Some(home) => home.join(".cache/coll"),
        None => set("TMPDIR")
            .unwrap_or_else(|| PathBuf::from("/tmp"))
            .join("coll-cache"),
    }
}

/// The switch parser: `0` or `1`.
fn parse_switch(v: &str) -> Result<bool, &'static str> {
    match v {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err("expected 0 (off) or 1 (on)"),
    }
}

/// The size parser: digits with an optional `K`, `M` or `G` (powers of 1024), as `-b` takes.
fn parse_size(v: &str) -> Result<u64, &'static str> {
    let (digits, shift) = [('K', 10), ('M', 20), ('G', 30)]
        .into_iter()
        .find_map(|(c, shift)| {
            v.strip_suffix(c)
                .or_else(|| v.strip_suffix(c.to_ascii_lowercase()))
                .map(|d| (d, shift))
        })
        .unwrap_or((v, 0));
    digits
        .parse::<u64>()
        .ok()
        .filter(|_| digits.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|x| x.checked_mul(1 << shift))
        .ok_or("expected a size in bytes (digits with an optional K, M or G)")
}

/// The number parser: a whole number.
fn parse_number(v: &str) -> Result<u64, &'static str> {
    v.parse::<u64>()
        .ok()
        .filter(|_| v.bytes().all(|b| b.is_ascii_digit()))
        .ok_or("expected a whole number")
}

/// The duration parser: a number of `unit`, fractions allowed.
fn parse_duration(v: &str, unit: TimeUnit) -> Result<Duration, &'static str> {
    let plain = !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    let x: f64 = v.parse().ok().filter(|_| plain).ok_or(unit.expected())?;
    // Nanoseconds rounded, so `250` µs is exactly 250 µs; at most ~584 years.
    let nanos = (x * unit.nanos()).round();
    if nanos >= u64::MAX as f64 {
        return Err("too long");
    }
    Ok(Duration::from_nanos(nanos as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lookup that knows only `vars`.
    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    fn with(vars: &[(&str, &str)]) -> Result<GpuSettings, SettingsError> {
        GpuSettings::from_lookup(env(vars))
    }

    /// The settings of an environment with only `HOME=/h` set, plus `f`'s changes.
    fn expect(f: impl FnOnce(&mut GpuSettings)) -> GpuSettings {
        let mut s = GpuSettings {
            cache_dir: Some("/h/.cache/coll".into()),
            ..GpuSettings::default()
        };
        f(&mut s);
        s
    }

    #[test]
    fn the_defaults_are_the_measured_ones() {
        let d = GpuSettings::default();
        assert_eq!(d.split_cap, 128);
        assert_eq!(d.ll_max, Threshold::Auto);
        assert_eq!(d.ll_sub_bytes, 1 << 10);
        assert_eq!((d.ll128_max, d.ll128_sub_bytes), (Threshold::Auto, 8 << 10));
        assert_eq!(d.bulk_sub_bytes, 64 << 10);
        assert_eq!(d.slot_bytes, SlotSize::Auto);
        assert_eq!(d.oneshot_max, 64 << 10);
        assert_eq!(d.ll_epoch, 0);
        assert!(d.direct && d.swaps);
        assert_eq!(d.ce_min, CeMin::Auto);
        assert_eq!(d.launch_threads, LaunchMode::Auto);
        assert_eq!(d.launch_spin, Duration::from_micros(500));
        assert_eq!(d.cache_dir, None);
        assert_eq!(d.timeout, Duration::from_secs(30));
        // The copy engines by default only where each GPU has one peer, from 32 MiB.
        assert_eq!(CeMin::Auto.bytes(true), 32 << 20);
        assert_eq!(CeMin::Auto.bytes_captured(true), 64 << 20);
        assert_eq!(CeMin::From(1 << 20).bytes_captured(true), 1 << 20);
        assert_eq!(CeMin::Auto.bytes_captured(false), 0);
        assert_eq!(CeMin::Auto.bytes(false), 0);
        assert_eq!(CeMin::Never.bytes(true), 0);
        assert_eq!(CeMin::From(1 << 20).bytes(false), 1 << 20);
    }

    #[test]
    fn an_empty_environment_gives_the_defaults_and_the_usual_cache() {
        assert_eq!(with(&[("HOME", "/h")]), Ok(expect(|_| {})));
        let s = with(&[("TMPDIR", "/scratch")]).expect("valid");
        assert_eq!(s.cache_dir, Some("/scratch/coll-cache".into()));
        let s = with(&[("HOME", "")]).expect("valid");
        assert_eq!(s.cache_dir, Some("/tmp/coll-cache".into()));
    }

    #[test]
    fn every_value_default_parses_to_the_default() {
        for k in KNOBS {
            if let KnobDefault::Value(v) = k.default {
                let s = with(&[("HOME", "/h"), (k.var, v)]).expect(k.var);
                assert_eq!(s, expect(|_| {}), "{}={v}", k.var);
            }
        }
    }

    #[test]
    fn every_variable_is_listed_once() {
        let mut vars: Vec<&str> = KNOBS.iter().map(|k| k.var).collect();
        vars.sort_unstable();
        vars.dedup();
        assert_eq!(vars.len(), KNOBS.len());
        assert_eq!(vars.len(), 16);
    }

    #[test]
    fn every_knob_reads_its_variable() {
        let all = [
            (SPLIT_VAR, "16"),
            (LL_MAX_VAR, "64K"),
            (LL_SUB_VAR, "2K"),
            (LL128_MAX_VAR, "1M"),
            (LL128_SUB_VAR, "4K"),
            (BULK_SUB_VAR, "16k"),
            (SLOT_BYTES_VAR, "128K"),
            (ONESHOT_MAX_VAR, "4K"),
            (DIRECT_VAR, "0"),
            (SWAP_VAR, " 0 "),
            (CE_MIN_VAR, "1M"),
            (LAUNCH_THREADS_VAR, "1"),
            (LAUNCH_SPIN_VAR, "250"),
            (TIMEOUT_VAR, "0.05"),
            (LL_EPOCH_VAR, "4294967266"),
            (CACHE_DIR_VAR, "/cache"),
        ];
        assert_eq!(all.len(), KNOBS.len());
        let s = with(&all).expect("valid");
        assert_eq!(
            s,
            GpuSettings {
                split_cap: 16,
                ll_max: Threshold::Bytes(64 << 10),
                ll_sub_bytes: 2 << 10,
                ll128_max: Threshold::Bytes(1 << 20),
                ll128_sub_bytes: 4 << 10,
                bulk_sub_bytes: 16 << 10,
                slot_bytes: SlotSize::Bytes(128 << 10),
                oneshot_max: 4 << 10,
                ll_epoch: 4_294_967_266,
                direct: false,
                swaps: false,
                ce_min: CeMin::From(1 << 20),
                launch_threads: LaunchMode::On,
                launch_spin: Duration::from_micros(250),
                cache_dir: Some("/cache".into()),
                timeout: Duration::from_millis(50),
            }
        );
    }

    #[test]
    fn zeros_and_other_words_mean_what_the_table_says() {
        let h = ("HOME", "/h");
        assert_eq!(
            with(&[h, (LL_MAX_VAR, "0")]),
            Ok(expect(|s| s.ll_max = Threshold::Bytes(0)))
        );
        assert_eq!(
            with(&[h, (ONESHOT_MAX_VAR, "0")]),
            Ok(expect(|s| s.oneshot_max = 0))
        );
        assert_eq!(
            with(&[h, (LL_MAX_VAR, "1G")]),
            Ok(expect(|s| s.ll_max = Threshold::Bytes(1 << 30)))
        );
        assert_eq!(
            with(&[h, (CE_MIN_VAR, "0")]),
            Ok(expect(|s| s.ce_min = CeMin::Never))
        );
        assert_eq!(
            with(&[h, (LAUNCH_THREADS_VAR, "0")]),
            Ok(expect(|s| s.launch_threads = LaunchMode::Off))
        );
        assert_eq!(
            with(&[h, (DIRECT_VAR, "1")]),
            Ok(expect(|s| s.direct = true))
        );
        assert_eq!(
            with(&[h, (LAUNCH_SPIN_VAR, "0")]),
            Ok(expect(|s| s.launch_spin = Duration::ZERO))
        );
        assert_eq!(
            with(&[h, (TIMEOUT_VAR, "2.5")]),
            Ok(expect(|s| s.timeout = Duration::from_millis(2500)))
        );
        // An empty cache directory turns the disk cache off.
        assert_eq!(
            with(&[h, (CACHE_DIR_VAR, "")]),
            Ok(expect(|s| s.cache_dir = None))
        );
    }

    #[test]
    fn a_bad_value_names_the_variable_and_the_value() {
        let cases: &[(&str, &str, &str)] = &[
            (SPLIT_VAR, "sixteen", "expected a whole number"),
            (SPLIT_VAR, "", "expected a whole number"),
            (SPLIT_VAR, "0", "positive whole number of CTAs"),
            (SPLIT_VAR, "-4", "expected a whole number"),
            (SPLIT_VAR, "1.5", "expected a whole number"),
            (SPLIT_VAR, "4294967296", "positive whole number of CTAs"),
            (ONESHOT_MAX_VAR, "128K", "at most 64K"),
            (LL_MAX_VAR, "", "expected a size in bytes"),
            (LL_MAX_VAR, "big", "expected a size in bytes"),
            (LL_MAX_VAR, "-1", "expected a size in bytes"),
            (LL_MAX_VAR, "+1", "expected a size in bytes"),
            (LL_MAX_VAR, "4KB", "expected a size in bytes"),
            (LL_MAX_VAR, "99999999999G", "expected a size in bytes"),
            (LL_SUB_VAR, "0", "must be at least 1"),
            (LL128_SUB_VAR, "0", "must be at least 1"),
            (BULK_SUB_VAR, "0K", "must be at least 1"),
            (BULK_SUB_VAR, "1.5K", "expected a size in bytes"),
            (SLOT_BYTES_VAR, "0", "multiple of 4K from 4K to 512K"),
            (SLOT_BYTES_VAR, "1M", "multiple of 4K from 4K to 512K"),
            (SLOT_BYTES_VAR, "6000", "multiple of 4K from 4K to 512K"),
            (SLOT_BYTES_VAR, "5G", "multiple of 4K from 4K to 512K"),
            (DIRECT_VAR, "yes", "expected 0 (off) or 1 (on)"),
            (SWAP_VAR, "2", "expected 0 (off) or 1 (on)"),
            (CE_MIN_VAR, "64 M", "expected a size in bytes"),
            (LAUNCH_THREADS_VAR, "on", "expected 0 (off) or 1 (on)"),
            (LAUNCH_SPIN_VAR, "1ms", "expected microseconds"),
            (LAUNCH_SPIN_VAR, "-5", "expected microseconds"),
            (LAUNCH_SPIN_VAR, "inf", "expected microseconds"),
            (TIMEOUT_VAR, "1e3", "expected seconds"),
            (TIMEOUT_VAR, "0", "must be more than 0"),
            (TIMEOUT_VAR, "1e30", "expected seconds"),
            (TIMEOUT_VAR, "99999999999999999999", "too long"),
            (LL_EPOCH_VAR, "many", "expected a whole number"),
            (LL_EPOCH_VAR, "-1", "expected a whole number"),
        ];
        for &(var, value, why) in cases {
            let e = with(&[(var, value)]).expect_err(value);
            assert_eq!((e.var, e.value.as_str()), (var, value));
            let text = e.to_string();
            assert!(
                text.starts_with(&format!("environment variable {var}={value:?}: "))
                    && text.contains(why),
                "{text}"
            );
        }
        // The first bad variable in table order is the one reported.
        let e = with(&[(LL_EPOCH_VAR, "x"), (SPLIT_VAR, "y")]).expect_err("both bad");
        assert_eq!(e.var, SPLIT_VAR);
    }

    #[test]
    fn durations_are_exact_in_their_unit() {
        assert_eq!(
            parse_duration("250", TimeUnit::Micros),
            Ok(Duration::from_micros(250))
        );
        assert_eq!(
            parse_duration("0.05", TimeUnit::Secs),
            Ok(Duration::from_millis(50))
        );
        assert_eq!(
            parse_duration("1.", TimeUnit::Secs),
            Ok(Duration::from_secs(1))
        );
        assert!(parse_duration(".", TimeUnit::Secs).is_err());
    }

    /// What `executor/SETTINGS.md` holds.
    fn settings_page() -> String {
        format!(
            "<!-- Generated from KNOBS in executor/src/cuda/settings.rs; regenerate with \
             `COLL_BLESS=1 cargo test -p coll-executor --lib settings`. -->\n\n\
             # GPU settings\n\n\
             The GPU executor's environment variables, as `coll` reads them \
             (`GpuSettings::from_lookup`). A program that loads executors itself passes a \
             `GpuSettings`; its `Default` holds the values below and no kernel cache.\n\n{}",
            GpuSettings::markdown_table()
        )
    }

    #[test]
    fn settings_md_is_the_rendered_table() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/SETTINGS.md");
        let want = settings_page();
        if std::env::var("COLL_BLESS").as_deref() == Ok("1") {
            std::fs::write(path, &want).expect("write SETTINGS.md");
        }
        let have = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            have == want,
            "executor/SETTINGS.md is not the table KNOBS renders; regenerate it with \
             `COLL_BLESS=1 cargo test -p coll-executor --lib settings` and review the diff"
        );
    }

    #[test]
    fn the_table_has_a_row_per_knob() {
        let t = GpuSettings::markdown_table();
        assert_eq!(t.lines().count(), 2 + KNOBS.len());
        assert!(
            t.contains(
                "| `COLL_GPU_LL_MAX` | bytes (K, M, G: ×1024) | `512K`, `256K` from 4 ranks"
            ),
            "{t}"
        );
        assert!(
            t.contains("| `COLL_GPU_LAUNCH_SPIN_US` | microseconds | `500` |"),
            "{t}"
        );
    }
}
