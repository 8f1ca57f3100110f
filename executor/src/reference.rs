//! Test data and the naive reference every run is checked against, as nccl-tests does:
//! inputs are small integers chosen so that every reduction is exact in any order for the
//! dtype and rank count (so the order the schedule combines in cannot change the result),
//! and the expected output is computed directly from the collective's definition, not from
//! the plan.

use crate::dtype::{DType, Element, ReduceOp, reduce_into};
use coll_lang::builtins::CollectiveKind;

// NCCL's in-place layout lives with the plan's aliasing, which it must agree with; every
// in-place path of the executor takes it from here.
pub use coll_compiler::layout::{InPlaceLayout, in_place_layout};

/// The input of rank `rank` of `n`, `len` elements (computed in parallel: a 1 GiB sweep on
/// 8 ranks fills 2 G elements before its first call).
pub fn fill<T: Element>(op: ReduceOp, n: u32, rank: u32, len: u64) -> Vec<T> {
    use rayon::prelude::*;
    let n64 = u64::from(n.max(1));
    let value = |i: u64| {
        let v = match op {
            // One rank per element contributes 2, the others 1: the product is 2.
            ReduceOp::Prod => 1 + u64::from((u64::from(rank) + i).is_multiple_of(n64)),
            _ => {
                // Sums of n values stay below the dtype's exact limit.
                let m = (T::DTYPE.exact_limit() / n64).clamp(2, 97);
                (u64::from(rank) * 7 + i * 13 + 3) % m
            }
        };
        T::from_u64(v)
    };
    if len < PARALLEL_MIN as u64 {
        return (0..len).map(value).collect();
    }
    (0..len).into_par_iter().map(value).collect()
}

/// Elements below which the helpers here run on the calling thread: handing small work to
/// rayon's pool costs more than it saves (a hand-off per call, and idle workers spinning on
/// the cores the caller needs), and tests call them thousands of times on a few dozen.
const PARALLEL_MIN: usize = 1 << 14;

/// Whether the executor is expected to have written rank `rank`'s output.
pub fn checked(kind: CollectiveKind, rank: u32, root: u32) -> bool {
    kind != CollectiveKind::Reduce || rank == root
}

/// The expected outputs (`None` for ranks whose output the collective leaves undefined), or
/// `None` for a custom collective, which has no definition to compute from. `inputs` are
/// every rank's input (any slice-like type, so a caller's buffers need no copy); the
/// reduction of an allreduce or reduce is computed once for every rank, and ranks are built
/// in parallel (a 1 GiB check on 8 ranks is 8 GiB of output).
pub fn expected<T: Element, I: AsRef<[T]> + Sync>(
    kind: CollectiveKind,
    inputs: &[I],
    count: u64,
    op: ReduceOp,
    root: u32,
) -> Option<Vec<Option<Vec<T>>>> {
    use rayon::prelude::*;
    if kind == CollectiveKind::Custom {
        return None;
    }
    let n = inputs.len();
    let c = count as usize;
    let combine = |parts: &mut dyn Iterator<Item = &[T]>| -> Vec<T> {
        let mut acc: Vec<T> = parts.next().map(<[T]>::to_vec).unwrap_or_default();
        for p in parts {
            reduce_into(op, &mut acc, p);
        }
        if op == ReduceOp::Avg {
            acc.iter_mut().for_each(|x| *x = x.div_n(n as u32));
        }
        acc
    };
    let slice =
        |q: usize, k: usize| -> &[T] { inputs[q].as_ref().get(k * c..k * c + c).unwrap_or(&[]) };
    let whole = matches!(kind, CollectiveKind::AllReduce | CollectiveKind::Reduce)
        .then(|| combine(&mut inputs.iter().map(AsRef::as_ref)));
    let rank = |r: usize| {
        Some(match kind {
            CollectiveKind::AllReduce => whole.clone().unwrap_or_default(),
            CollectiveKind::Reduce if r as u32 == root => whole.clone().unwrap_or_default(),
            CollectiveKind::Reduce | CollectiveKind::Custom => return None,
            CollectiveKind::AllGather => (0..n).flat_map(|q| slice(q, 0).to_vec()).collect(),
            CollectiveKind::ReduceScatter => combine(&mut (0..n).map(|q| slice(q, r))),
            CollectiveKind::AllToAll => (0..n).flat_map(|q| slice(q, r).to_vec()).collect(),
            CollectiveKind::Broadcast => inputs[root as usize].as_ref().to_vec(),
            CollectiveKind::SendRecv => inputs[(r + n - 1) % n].as_ref().to_vec(),
        })
    };
    if c.saturating_mul(n) < PARALLEL_MIN {
        return Some((0..n).map(rank).collect());
    }
    Some((0..n).into_par_iter().map(rank).collect())
}

/// Elements that differ from the reference, over all ranks (nccl-tests' `#wrong`); ranks
/// are compared in parallel.
pub fn count_wrong<T: Element>(outputs: &[Vec<T>], expected: &[Option<Vec<T>>]) -> u64 {
    use rayon::prelude::*;
    let wrong = |(out, exp): (&Vec<T>, &Option<Vec<T>>)| match exp {
        None => 0,
        Some(e) => {
            let mismatched = out.iter().zip(e).filter(|(a, b)| a != b).count();
            (mismatched + out.len().abs_diff(e.len())) as u64
        }
    };
    if outputs.iter().map(Vec::len).sum::<usize>() < PARALLEL_MIN {
        return outputs.iter().zip(expected).map(wrong).sum();
    }
    outputs.par_iter().zip(expected).map(wrong).sum()
}

/// Checks `outputs` against the reference for `inputs`: `(wrong elements, elements checked)`,
/// or `(None, 0)` for a collective with no reference (custom ones).
pub fn check<T: Element>(
    kind: CollectiveKind,
    inputs: &[Vec<T>],
    outputs: &[Vec<T>],
    count: u64,
    op: ReduceOp,
    root: u32,
) -> (Option<u64>, u64) {
    check_ranks(kind, inputs, 0, outputs, count, op, root)
}

/// [`check`] for the outputs of ranks `first..first + outputs.len()` only (one process's
/// share of a multi-process run); `inputs` are every rank's.
pub fn check_ranks<T: Element>(
    kind: CollectiveKind,
    inputs: &[Vec<T>],
    first: u32,
    outputs: &[Vec<T>],
    count: u64,
    op: ReduceOp,
    root: u32,
) -> (Option<u64>, u64) {
    match expected(kind, inputs, count, op, root) {
        Some(exp) => {
            let mine = exp
                .get(first as usize..first as usize + outputs.len())
                .unwrap_or(&[]);
            (
                Some(count_wrong(outputs, mine)),
                mine.iter().flatten().map(|v| v.len() as u64).sum(),
            )
        }
        None => (None, 0),
    }
}

/// A dtype's name with its size, for summaries.
pub fn describe(d: DType) -> String {
    format!("{} ({} B)", d.name(), d.size())
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    #[test]
    fn sums_stay_exact() {
        let n = 64;
        let inputs: Vec<Vec<bf16>> = (0..n).map(|r| fill(ReduceOp::Sum, n, r, 100)).collect();
        let exp =
            expected(CollectiveKind::AllReduce, &inputs, 100, ReduceOp::Sum, 0).expect("built-in");
        for i in 0..100 {
            let exact: f64 = inputs.iter().map(|v| v[i].to_f64()).sum();
            assert_eq!(exp[0].as_ref().map(|v| v[i].to_f64()), Some(exact));
        }
    }

    #[test]
    fn products_are_two() {
        let inputs: Vec<Vec<f32>> = (0..5).map(|r| fill(ReduceOp::Prod, 5, r, 7)).collect();
        let exp =
            expected(CollectiveKind::AllReduce, &inputs, 7, ReduceOp::Prod, 0).expect("built-in");
        assert!(exp[0].as_ref().is_some_and(|v| v.iter().all(|&x| x == 2.0)));
    }
}
