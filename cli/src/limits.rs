//! The bounds of the numeric flags of `coll run` and of what a CPU run may allocate, in one
//! place: a value outside them is a usage error (exit 2) naming the flag and the bound, given
//! before anything is compiled or allocated.
//!
//! - `--ranks` is 1 to [`MAX_RANKS`] (the topology's limit).
//! - `--count` is at most [`MAX_COUNT`] elements, so element offsets and byte sizes stay far
//!   from 64-bit overflow.
//! - `--timeout` is a finite number of seconds, above 0 and at most [`MAX_TIMEOUT_SECS`].
//! - A run on the CPU executor holds every rank's buffers in this process, plus the
//!   reference copies the result check keeps: [`cpu_run_bytes`] estimates that, and a run
//!   needing more than [`MAX_CPU_RUN_BYTES`] is refused with the estimate.

use coll_compiler::plan::Plan;

/// Most ranks a run takes ([`coll_compiler::topology::MAX_RANKS`]).
pub const MAX_RANKS: usize = coll_compiler::topology::MAX_RANKS;
/// Largest `--count`: 2^40 elements.
pub const MAX_COUNT: u64 = 1 << 40;
/// Longest `--timeout`: one week.
pub const MAX_TIMEOUT_SECS: f64 = 7.0 * 24.0 * 3600.0;
/// Most memory a CPU run may need: 16 GiB.
pub const MAX_CPU_RUN_BYTES: u64 = 16 << 30;

/// `--ranks`: an integer in `1..=MAX_RANKS`.
pub fn parse_ranks(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=MAX_RANKS).contains(&n) => Ok(n),
        _ => Err(format!("`{s}` is not a rank count from 1 to {MAX_RANKS}")),
    }
}

/// `--count`: a size (digits with an optional K, M or G) of at most [`MAX_COUNT`].
pub fn parse_count(s: &str) -> Result<u64, String> {
    let v = crate::args::parse_size(s)?;
    if v > MAX_COUNT {
        return Err(format!(
            "count {v} is over the limit of {MAX_COUNT} (1T) elements"
        ));
    }
    Ok(v)
}

/// `--timeout`: seconds, above 0 and at most [`MAX_TIMEOUT_SECS`].
pub fn parse_timeout(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(t) if t.is_finite() && t > 0.0 && t <= MAX_TIMEOUT_SECS => Ok(t),
        _ => Err(format!(
            "`{s}` is not a number of seconds above 0 and at most {MAX_TIMEOUT_SECS} (a week)"
        )),
    }
}

/// Bytes a CPU run of `plan` at `count` elements of `elem_size` bytes needs, about: every
/// buffer of every rank, twice (the result check keeps the inputs and the expected outputs).
pub fn cpu_run_bytes(plan: &Plan, count: u64, elem_size: u64) -> u64 {
    let per_rank = (0..plan.buffers.len()).fold(0u64, |a, b| {
        a.saturating_add(plan.buffer_elements(b, count).saturating_mul(elem_size))
    });
    per_rank
        .saturating_mul(u64::from(plan.ranks))
        .saturating_mul(2)
}

/// A lower bound of [`cpu_run_bytes`] known before compiling: every rank has an input and
/// an output of at least `count` elements (one buffer in place).
pub fn cpu_run_bytes_at_least(ranks: usize, count: u64, elem_size: u64, inplace: bool) -> u64 {
    let buffers = if inplace { 1 } else { 2 };
    count
        .saturating_mul(elem_size)
        .saturating_mul(buffers)
        .saturating_mul(ranks as u64)
}

/// The error for a run that needs `bytes`, or `None` if it fits.
pub fn cpu_run_refusal(bytes: u64, ranks: u64, count: u64) -> Option<String> {
    (bytes > MAX_CPU_RUN_BYTES).then(|| {
        format!(
            "a CPU run needs ~{:.1} GB for {ranks} ranks at count {count}, over the limit of {:.1} GB: lower --count or --ranks",
            bytes as f64 / 1e9,
            MAX_CPU_RUN_BYTES as f64 / 1e9
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_out_of_range_name_the_bound() {
        assert_eq!(parse_ranks("4"), Ok(4));
        assert_eq!(
            parse_ranks("0"),
            Err("`0` is not a rank count from 1 to 65536".to_string())
        );
        assert!(parse_ranks("65537").is_err());
        assert_eq!(parse_count("1G"), Ok(1 << 30));
        assert_eq!(
            parse_count("9223372036854775808"),
            Err(
                "count 9223372036854775808 is over the limit of 1099511627776 (1T) elements"
                    .to_string()
            )
        );
        assert_eq!(parse_timeout("0.5"), Ok(0.5));
        for bad in ["1e300", "0", "-1", "inf", "NaN", "x"] {
            let e = parse_timeout(bad).expect_err(bad);
            assert!(
                e.starts_with(&format!("`{bad}` is not a number of seconds")),
                "{e}"
            );
        }
    }

    #[test]
    fn the_estimate_refuses_what_would_not_fit() {
        let bytes = cpu_run_bytes_at_least(4096, 1 << 20, 4, false);
        assert_eq!(bytes, 32 << 30);
        assert_eq!(
            cpu_run_refusal(bytes, 4096, 1 << 20).as_deref(),
            Some(
                "a CPU run needs ~34.4 GB for 4096 ranks at count 1048576, over the limit of 17.2 GB: lower --count or --ranks"
            )
        );
        assert_eq!(cpu_run_refusal(1 << 30, 8, 1 << 20), None);
    }
}
