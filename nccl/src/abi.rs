//! NCCL's C ABI as of NCCL 2.28: result codes, data types, reduction operators, the unique
//! id and the communicator configuration, with their conversions to coll's types.
//!
//! Invariants: every `#[repr(C)]` type here has the size and field offsets of its C
//! counterpart in `nccl.h` 2.28 (checked by the tests below); values that come from C are
//! taken as plain integers and converted with a check ([`DataType::from_raw`],
//! [`RedOp::from_raw`]), never transmuted, so an out-of-range value is an error, not
//! undefined behaviour.

use coll_executor::dtype::{DType, ReduceOp};
use std::ffi::{c_char, c_int, c_uint};

/// NCCL's version this library presents: 2.28.3, as `ncclGetVersion` encodes it.
pub const VERSION_CODE: c_int = 22803;

/// `ncclResult_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NcclResult {
    Success = 0,
    UnhandledCudaError = 1,
    SystemError = 2,
    InternalError = 3,
    InvalidArgument = 4,
    InvalidUsage = 5,
    RemoteError = 6,
    InProgress = 7,
}

impl NcclResult {
    /// `ncclGetErrorString`'s text (NCCL's wording, so logs read the same).
    pub fn text(raw: c_int) -> &'static std::ffi::CStr {
        match raw {
            0 => c"no error",
            1 => c"unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
            2 => c"unhandled system error (run with NCCL_DEBUG=INFO for details)",
            3 => c"internal error - please report this issue to the NCCL developers",
            4 => c"invalid argument (run with NCCL_DEBUG=WARN for details)",
            5 => c"invalid usage (run with NCCL_DEBUG=WARN for details)",
            6 => c"remote process exited or there was a network error",
            7 => c"NCCL operation in progress",
            _ => c"unknown result code",
        }
    }

    /// A result code from C (the real NCCL's), unknown values as internal errors.
    pub fn from_raw(raw: c_int) -> NcclResult {
        match raw {
            0 => NcclResult::Success,
            1 => NcclResult::UnhandledCudaError,
            2 => NcclResult::SystemError,
            4 => NcclResult::InvalidArgument,
            5 => NcclResult::InvalidUsage,
            6 => NcclResult::RemoteError,
            7 => NcclResult::InProgress,
            _ => NcclResult::InternalError,
        }
    }
}

/// `ncclDataType_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    Int8,
    Uint8,
    Int32,
    Uint32,
    Int64,
    Uint64,
    Float16,
    Float32,
    Float64,
    Bfloat16,
    Float8e4m3,
    Float8e5m2,
}

impl DataType {
    pub fn from_raw(raw: c_int) -> Option<DataType> {
        Some(match raw {
            0 => DataType::Int8,
            1 => DataType::Uint8,
            2 => DataType::Int32,
            3 => DataType::Uint32,
            4 => DataType::Int64,
            5 => DataType::Uint64,
            6 => DataType::Float16,
            7 => DataType::Float32,
            8 => DataType::Float64,
            9 => DataType::Bfloat16,
            10 => DataType::Float8e4m3,
            11 => DataType::Float8e5m2,
            _ => return None,
        })
    }

    pub fn raw(self) -> c_int {
        self as c_int
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DataType::Int8 | DataType::Uint8 | DataType::Float8e4m3 | DataType::Float8e5m2 => 1,
            DataType::Float16 | DataType::Bfloat16 => 2,
            DataType::Int32 | DataType::Uint32 | DataType::Float32 => 4,
            DataType::Int64 | DataType::Uint64 | DataType::Float64 => 8,
        }
    }

    /// coll's element type for it, where coll reduces it. Types coll only moves (no
    /// reduction) are [`DataType::bytes_alike`].
    pub fn dtype(self) -> Option<DType> {
        Some(match self {
            DataType::Uint8 => DType::U8,
            DataType::Int32 => DType::I32,
            DataType::Int64 => DType::I64,
            DataType::Float16 => DType::F16,
            DataType::Float32 => DType::F32,
            DataType::Float64 => DType::F64,
            DataType::Bfloat16 => DType::Bf16,
            _ => return None,
        })
    }

    /// An element type of the same size, for collectives that only move data (allgather,
    /// alltoall, broadcast, send/receive), where the element's meaning does not matter.
    pub fn bytes_alike(self) -> DType {
        match self.size() {
            1 => DType::U8,
            2 => DType::F16,
            4 => DType::I32,
            _ => DType::I64,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DataType::Int8 => "int8",
            DataType::Uint8 => "uint8",
            DataType::Int32 => "int32",
            DataType::Uint32 => "uint32",
            DataType::Int64 => "int64",
            DataType::Uint64 => "uint64",
            DataType::Float16 => "half",
            DataType::Float32 => "float",
            DataType::Float64 => "double",
            DataType::Bfloat16 => "bfloat16",
            DataType::Float8e4m3 => "fp8e4m3",
            DataType::Float8e5m2 => "fp8e5m2",
        }
    }
}

/// `ncclRedOp_t`: the five built-in operators, or one made by `ncclRedOpCreatePreMulSum`
/// (values from [`RedOp::FIRST_DYNAMIC`] up).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RedOp {
    Builtin(ReduceOp),
    Dynamic(c_int),
}

impl RedOp {
    /// `ncclNumOps`: the first value of a created operator.
    pub const FIRST_DYNAMIC: c_int = 5;

    pub fn from_raw(raw: c_int) -> Option<RedOp> {
        Some(match raw {
            0 => RedOp::Builtin(ReduceOp::Sum),
            1 => RedOp::Builtin(ReduceOp::Prod),
            2 => RedOp::Builtin(ReduceOp::Max),
            3 => RedOp::Builtin(ReduceOp::Min),
            4 => RedOp::Builtin(ReduceOp::Avg),
            r if r >= Self::FIRST_DYNAMIC => RedOp::Dynamic(r),
            _ => return None,
        })
    }

    pub fn name(self) -> String {
        match self {
            RedOp::Builtin(op) => op.name().to_string(),
            RedOp::Dynamic(r) => format!("premulsum#{r}"),
        }
    }
}

/// `NCCL_UNIQUE_ID_BYTES`.
pub const UNIQUE_ID_BYTES: usize = 128;

/// `ncclUniqueId`: 128 opaque bytes that rank 0 makes and every rank is given.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UniqueId {
    pub internal: [c_char; UNIQUE_ID_BYTES],
}

impl UniqueId {
    pub fn from_bytes(b: &[u8; UNIQUE_ID_BYTES]) -> UniqueId {
        UniqueId {
            internal: b.map(|x| x as c_char),
        }
    }

    pub fn bytes(&self) -> [u8; UNIQUE_ID_BYTES] {
        self.internal.map(|x| x as u8)
    }
}

impl std::fmt::Debug for UniqueId {
    // The id carries the job's secret: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UniqueId(..)")
    }
}

/// `NCCL_CONFIG_UNDEF_INT`.
pub const CONFIG_UNDEF_INT: c_int = c_int::MIN;
/// The magic word of an initialised `ncclConfig_t`.
pub const CONFIG_MAGIC: c_uint = 0xcafe_beef;

/// `ncclConfig_t` of NCCL 2.28. A caller built against an older header passes a smaller
/// struct (its `size` says how much): only the fields inside it are read
/// ([`Config::read`]).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RawConfig {
    pub size: usize,
    pub magic: c_uint,
    pub version: c_uint,
    pub blocking: c_int,
    pub cga_cluster_size: c_int,
    pub min_ctas: c_int,
    pub max_ctas: c_int,
    pub net_name: *const c_char,
    pub split_share: c_int,
    pub traffic_class: c_int,
    pub comm_name: *const c_char,
    pub collnet_enable: c_int,
    pub cta_policy: c_int,
    pub shrink_share: c_int,
    pub nvls_ctas: c_int,
    pub n_channels_per_net_peer: c_int,
    pub nvlink_centric_sched: c_int,
}

/// `NCCL_CTA_POLICY_ZERO`.
pub const CTA_POLICY_ZERO: c_int = 0x02;

/// What coll takes from a communicator's configuration (undefined fields as `None`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// `blocking = 0` asks for non-blocking init and calls (`ncclInProgress`).
    pub blocking: Option<bool>,
    pub min_ctas: Option<u32>,
    pub max_ctas: Option<u32>,
    pub cta_policy: Option<i32>,
    pub comm_name: Option<String>,
}

/// Why a configuration was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("ncclConfig_t not initialised with NCCL_CONFIG_INITIALIZER (magic {0:#x})")]
    Magic(u32),
    #[error("ncclConfig_t of {0} bytes is smaller than its header")]
    Size(usize),
}

impl Config {
    /// Reads a caller's configuration.
    ///
    /// # Safety
    /// `raw` is null or points to a readable `ncclConfig_t` of at least the size its `size`
    /// field states (at least its 16-byte header), and a non-null `commName` is a
    /// NUL-terminated string.
    pub unsafe fn read(raw: *const RawConfig) -> Result<Config, ConfigError> {
        if raw.is_null() {
            return Ok(Config::default());
        }
        let header = std::mem::offset_of!(RawConfig, blocking);
        // SAFETY: the caller gives a readable header (size, magic, version).
        let (size, magic) = unsafe { ((*raw).size, (*raw).magic) };
        if magic != CONFIG_MAGIC {
            return Err(ConfigError::Magic(magic));
        }
        if size < header {
            return Err(ConfigError::Size(size));
        }
        let has = |end: usize| size >= end;
        let int = |v: c_int| (v != CONFIG_UNDEF_INT).then_some(v);
        // SAFETY: each field is read only when the caller's struct (by its size) holds it.
        let c = unsafe { &*raw };
        macro_rules! field {
            ($f:ident, $t:ty) => {
                if has(std::mem::offset_of!(RawConfig, $f) + std::mem::size_of::<$t>()) {
                    Some(c.$f)
                } else {
                    None
                }
            };
        }
        let comm_name = field!(comm_name, *const c_char)
            .filter(|p| !p.is_null())
            // SAFETY: a non-null commName is a NUL-terminated string (the contract).
            .map(|p| {
                unsafe { std::ffi::CStr::from_ptr(p) }
                    .to_string_lossy()
                    .into_owned()
            });
        Ok(Config {
            blocking: field!(blocking, c_int).and_then(int).map(|b| b != 0),
            min_ctas: field!(min_ctas, c_int)
                .and_then(int)
                .and_then(|v| u32::try_from(v).ok()),
            max_ctas: field!(max_ctas, c_int)
                .and_then(int)
                .and_then(|v| u32::try_from(v).ok()),
            cta_policy: field!(cta_policy, c_int).and_then(int),
            comm_name,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn layouts_match_nccl_2_28() {
        assert_eq!(size_of::<UniqueId>(), 128);
        assert_eq!(size_of::<RawConfig>(), 80);
        assert_eq!(offset_of!(RawConfig, blocking), 16);
        assert_eq!(offset_of!(RawConfig, net_name), 32);
        assert_eq!(offset_of!(RawConfig, split_share), 40);
        assert_eq!(offset_of!(RawConfig, comm_name), 48);
        assert_eq!(offset_of!(RawConfig, collnet_enable), 56);
        assert_eq!(offset_of!(RawConfig, cta_policy), 60);
        assert_eq!(offset_of!(RawConfig, nvlink_centric_sched), 76);
        assert_eq!(size_of::<NcclResult>(), size_of::<c_int>());
    }

    fn initializer() -> RawConfig {
        RawConfig {
            size: size_of::<RawConfig>(),
            magic: CONFIG_MAGIC,
            version: VERSION_CODE as c_uint,
            blocking: CONFIG_UNDEF_INT,
            cga_cluster_size: CONFIG_UNDEF_INT,
            min_ctas: CONFIG_UNDEF_INT,
            max_ctas: CONFIG_UNDEF_INT,
            net_name: std::ptr::null(),
            split_share: CONFIG_UNDEF_INT,
            traffic_class: CONFIG_UNDEF_INT,
            comm_name: std::ptr::null(),
            collnet_enable: CONFIG_UNDEF_INT,
            cta_policy: CONFIG_UNDEF_INT,
            shrink_share: CONFIG_UNDEF_INT,
            nvls_ctas: CONFIG_UNDEF_INT,
            n_channels_per_net_peer: CONFIG_UNDEF_INT,
            nvlink_centric_sched: CONFIG_UNDEF_INT,
        }
    }

    #[test]
    fn configs_read_what_their_size_holds() {
        let name = c"trainer";
        let mut raw = initializer();
        // SAFETY: a live, initialised config.
        assert_eq!(unsafe { Config::read(&raw) }, Ok(Config::default()));
        raw.blocking = 0;
        raw.max_ctas = 16;
        raw.cta_policy = CTA_POLICY_ZERO;
        raw.comm_name = name.as_ptr();
        // SAFETY: as above; `name` outlives the read.
        let c = unsafe { Config::read(&raw) }.expect("valid config");
        assert_eq!(c.blocking, Some(false));
        assert_eq!(c.max_ctas, Some(16));
        assert_eq!(c.cta_policy, Some(CTA_POLICY_ZERO));
        assert_eq!(c.comm_name.as_deref(), Some("trainer"));
        // A caller built against a header that ends before CTAPolicy.
        raw.size = offset_of!(RawConfig, cta_policy);
        // SAFETY: as above.
        let c = unsafe { Config::read(&raw) }.expect("valid config");
        assert_eq!(c.cta_policy, None);
        assert_eq!(c.comm_name.as_deref(), Some("trainer"));
        raw.magic = 0;
        // SAFETY: as above.
        assert_eq!(unsafe { Config::read(&raw) }, Err(ConfigError::Magic(0)));
        raw.magic = CONFIG_MAGIC;
        raw.size = 8;
        // SAFETY: as above.
        assert_eq!(unsafe { Config::read(&raw) }, Err(ConfigError::Size(8)));
        // SAFETY: null is allowed.
        assert_eq!(
            unsafe { Config::read(std::ptr::null()) },
            Ok(Config::default())
        );
    }

    #[test]
    fn values_from_c_are_checked() {
        assert_eq!(DataType::from_raw(9), Some(DataType::Bfloat16));
        assert_eq!(DataType::from_raw(12), None);
        assert_eq!(DataType::from_raw(-1), None);
        assert_eq!(RedOp::from_raw(4), Some(RedOp::Builtin(ReduceOp::Avg)));
        assert_eq!(RedOp::from_raw(7), Some(RedOp::Dynamic(7)));
        assert_eq!(RedOp::from_raw(-3), None);
        assert_eq!(NcclResult::from_raw(99), NcclResult::InternalError);
        assert_eq!(DataType::Uint32.dtype(), None);
        assert_eq!(DataType::Uint32.bytes_alike(), DType::I32);
    }
}
