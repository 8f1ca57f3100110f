//! Work on rayon's pool only where there is enough of it. Handing a call to the pool from
//! outside it costs a wake-up and a hand-off, and idle workers spin (yielding) for a while
//! before they sleep, on the cores the caller needs: lowering a program of a few dozen ops
//! on two cores spent more than half its time in the kernel that way, once per candidate
//! schedule. Below [`MIN_OPS`] ops the same work runs on the calling thread, in the same
//! order, with the same results.

use std::convert::Infallible;

/// Work over fewer ops than this runs on the calling thread (a ring at n = 64 has about
/// 16 000; the programs of tests and examples mostly a few hundred).
pub(crate) const MIN_OPS: usize = 1 << 12;

/// Whether work over `ops` ops is worth the pool.
pub(crate) fn worth(ops: usize) -> bool {
    ops >= MIN_OPS
}

/// `a` and `b`, side by side on the pool when `parallel`, else one after the other.
pub(crate) fn join<A, B, RA, RB>(parallel: bool, a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    B: FnOnce() -> RB + Send,
    RA: Send,
    RB: Send,
{
    if parallel {
        rayon::join(a, b)
    } else {
        (a(), b())
    }
}

/// `f` of each item with its index, in order; on the pool when `parallel`.
pub(crate) fn map<T, R, F>(parallel: bool, items: Vec<T>, f: F) -> Vec<R>
where
    T: Send,
    R: Send,
    F: Fn(usize, T) -> R + Sync + Send,
{
    let never_fails = try_map(parallel, items, |i, t| Ok::<R, Infallible>(f(i, t)));
    match never_fails {
        Ok(out) => out,
        Err(never) => match never {},
    }
}

/// [`map`] of a fallible `f`, stopping at an error: on the calling thread the first in item
/// order, on the pool whichever its threads meet first (as `collect` into a `Result` does there).
pub(crate) fn try_map<T, R, E, F>(parallel: bool, items: Vec<T>, f: F) -> Result<Vec<R>, E>
where
    T: Send,
    R: Send,
    E: Send,
    F: Fn(usize, T) -> Result<R, E> + Sync + Send,
{
    if parallel {
        use rayon::prelude::*;
        items
            .into_par_iter()
            .enumerate()
            .map(|(i, t)| f(i, t))
            .collect()
    } else {
        items
            .into_iter()
            .enumerate()
            .map(|(i, t)| f(i, t))
            .collect()
    }
}

/// [`map`] over borrowed items.
pub(crate) fn map_ref<T, R, F>(parallel: bool, items: &[T], f: F) -> Vec<R>
where
    T: Sync,
    R: Send,
    F: Fn(usize, &T) -> R + Sync + Send,
{
    if parallel {
        use rayon::prelude::*;
        items.par_iter().enumerate().map(|(i, t)| f(i, t)).collect()
    } else {
        items.iter().enumerate().map(|(i, t)| f(i, t)).collect()
    }
}
