//! Element types and reduction operators, as NCCL names them.
//!
//! [`Element`] is implemented for every dtype the executors support; the reduction of a
//! slice is written as one loop per operator so the compiler vectorises it.

use half::{bf16, f16};
use std::fmt;

/// An element type (`--dtype`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F64,
    F16,
    Bf16,
    I32,
    I64,
    U8,
}

impl DType {
    pub const ALL: [DType; 7] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::Bf16,
        DType::I32,
        DType::I64,
        DType::U8,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
        }
    }

    /// Accepts our names and NCCL's (`float`, `half`, `int32`, ...).
    pub fn from_name(s: &str) -> Option<DType> {
        Some(match s {
            "f32" | "float" | "float32" => DType::F32,
            "f64" | "double" | "float64" => DType::F64,
            "f16" | "half" | "float16" => DType::F16,
            "bf16" | "bfloat16" => DType::Bf16,
            "i32" | "int" | "int32" => DType::I32,
            "i64" | "int64" => DType::I64,
            "u8" | "uint8" => DType::U8,
            _ => return None,
        })
    }

    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
            DType::F16 | DType::Bf16 => 2,
            DType::U8 => 1,
        }
    }

    /// The largest integer every value up to which the type holds exactly, for test data
    /// whose reductions are exact in any order.
    pub fn exact_limit(self) -> u64 {
        match self {
            DType::F16 => 2048,
            DType::Bf16 => 256,
            DType::U8 => 255,
            DType::F32 => 1 << 24,
            DType::F64 | DType::I64 => 1 << 53,
            DType::I32 => (1 << 31) - 1,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A reduction operator (`--op`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Prod,
    Min,
    Max,
    /// Sum, then divide by the rank count (NCCL's `ncclAvg`).
    Avg,
}

impl ReduceOp {
    pub const ALL: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Avg,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::Avg => "avg",
        }
    }

    pub fn from_name(s: &str) -> Option<ReduceOp> {
        Self::ALL.into_iter().find(|o| o.name() == s)
    }

    /// The operator that combines pairs (avg combines by sum).
    pub fn combine(self) -> ReduceOp {
        if self == ReduceOp::Avg {
            ReduceOp::Sum
        } else {
            self
        }
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A value the executors move and combine.
pub trait Element: Copy + PartialEq + Send + Sync + fmt::Debug + bytemuck::Pod + 'static {
    const DTYPE: DType;
    fn zero() -> Self;
    fn from_u64(v: u64) -> Self;
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn min_of(self, o: Self) -> Self;
    fn max_of(self, o: Self) -> Self;
    /// Division by the rank count, for `avg`.
    fn div_n(self, n: u32) -> Self;
    fn to_f64(self) -> f64;
}

/// `dst[i] = dst[i] (op) src[i]`; `avg` combines as `sum`.
pub fn reduce_into<T: Element>(op: ReduceOp, dst: &mut [T], src: &[T]) {
    let pairs = dst.iter_mut().zip(src);
    match op.combine() {
        ReduceOp::Sum | ReduceOp::Avg => pairs.for_each(|(d, s)| *d = d.add(*s)),
        ReduceOp::Prod => pairs.for_each(|(d, s)| *d = d.mul(*s)),
        ReduceOp::Min => pairs.for_each(|(d, s)| *d = d.min_of(*s)),
        ReduceOp::Max => pairs.for_each(|(d, s)| *d = d.max_of(*s)),
    }
}

/// `out[i] = a[i] (op) b[i]`.
pub fn reduce_to<T: Element>(op: ReduceOp, out: &mut [T], a: &[T], b: &[T]) {
    let it = out.iter_mut().zip(a.iter().zip(b));
    match op.combine() {
        ReduceOp::Sum | ReduceOp::Avg => it.for_each(|(o, (x, y))| *o = x.add(*y)),
        ReduceOp::Prod => it.for_each(|(o, (x, y))| *o = x.mul(*y)),
        ReduceOp::Min => it.for_each(|(o, (x, y))| *o = x.min_of(*y)),
        ReduceOp::Max => it.for_each(|(o, (x, y))| *o = x.max_of(*y)),
    }
}

macro_rules! float {
    ($t:ty, $d:expr) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            fn zero() -> Self {
                0.0
            }
            fn from_u64(v: u64) -> Self {
                v as $t
            }
            fn add(self, o: Self) -> Self {
                self + o
            }
            fn mul(self, o: Self) -> Self {
                self * o
            }
            fn min_of(self, o: Self) -> Self {
                self.min(o)
            }
            fn max_of(self, o: Self) -> Self {
                self.max(o)
            }
            fn div_n(self, n: u32) -> Self {
                self / (n as $t)
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
        }
    };
}

float!(f32, DType::F32);
float!(f64, DType::F64);

macro_rules! int {
    ($t:ty, $d:expr) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            fn zero() -> Self {
                0
            }
            fn from_u64(v: u64) -> Self {
                v as $t
            }
            // Integers wrap as NCCL's do.
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            fn mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            fn min_of(self, o: Self) -> Self {
                Ord::min(self, o)
            }
            fn max_of(self, o: Self) -> Self {
                Ord::max(self, o)
            }
            fn div_n(self, n: u32) -> Self {
                self / (n as $t).max(1)
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
        }
    };
}

int!(i32, DType::I32);
int!(i64, DType::I64);
int!(u8, DType::U8);

macro_rules! half_float {
    ($t:ty, $d:expr) => {
        // Arithmetic in f32, rounded once per operation, as GPU half arithmetic does.
        impl Element for $t {
            const DTYPE: DType = $d;
            fn zero() -> Self {
                <$t>::ZERO
            }
            fn from_u64(v: u64) -> Self {
                <$t>::from_f32(v as f32)
            }
            fn add(self, o: Self) -> Self {
                <$t>::from_f32(self.to_f32() + o.to_f32())
            }
            fn mul(self, o: Self) -> Self {
                <$t>::from_f32(self.to_f32() * o.to_f32())
            }
            fn min_of(self, o: Self) -> Self {
                if o < self { o } else { self }
            }
            fn max_of(self, o: Self) -> Self {
                if o > self { o } else { self }
            }
            fn div_n(self, n: u32) -> Self {
                <$t>::from_f32(self.to_f32() / n as f32)
            }
            fn to_f64(self) -> f64 {
                self.to_f64()
            }
        }
    };
}

half_float!(f16, DType::F16);
half_float!(bf16, DType::Bf16);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
        for o in ReduceOp::ALL {
            assert_eq!(ReduceOp::from_name(o.name()), Some(o));
        }
        assert_eq!(DType::from_name("half"), Some(DType::F16));
    }

    #[test]
    fn reductions() {
        let mut d = [1.0f32, 5.0, -2.0];
        reduce_into(ReduceOp::Max, &mut d, &[3.0, 4.0, -1.0]);
        assert_eq!(d, [3.0, 5.0, -1.0]);
        let mut h = [f16::from_f32(1.5); 2];
        reduce_into(ReduceOp::Sum, &mut h, &[f16::from_f32(2.0); 2]);
        assert_eq!(h[0].to_f32(), 3.5);
        assert_eq!(250u8.add(10), 4, "wraps");
    }
}
