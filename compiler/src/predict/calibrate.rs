//! How far measurements are from the model, as a fit: measured ≈ `fixed` + `latency` × the
//! predicted fixed part + `transfer` × the predicted size-proportional part
//! ([`super::Compiled::parts`]).
//!
//! `fixed` is what every call pays whatever the plan: the launch of the kernel and the wait
//! for its end, which the model, timing only the plan's ops, leaves out. `latency` > 1 means
//! the executor pays more per hop than the model's α (synchronisation, per-op dispatch);
//! `transfer` > 1 means it moves data slower than the links allow.
//!
//! Invariants: every factor of a [`Calibration`] is finite and non-negative; the fit weighs
//! each point by its relative error, so 8 B and 1 GiB points count alike.

use super::Time;

/// A fit of measurements to the model ([`calibrate`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Calibration {
    /// µs every call pays on top of the plan's ops.
    pub fixed_us: f64,
    pub latency: f64,
    pub transfer: f64,
    /// Root mean square of the relative error left after the fit.
    pub rel_rms: f64,
}

impl Calibration {
    /// The calibrated time of a prediction split as [`super::Compiled::parts`].
    pub fn time_us(&self, parts: Time) -> f64 {
        self.fixed_us + self.latency * parts.latency_us + self.transfer * parts.transfer_us
    }
}

/// Fits a [`Calibration`] to `points` of `(predicted fixed part, predicted transfer part,
/// measured time)`, all µs, by least squares on the relative error, with every term kept
/// non-negative: of the fits of every subset of the three terms whose factors are all
/// non-negative, the one with the least error. `None` with fewer than two usable points or
/// when no subset can be fitted (the parts cannot be told apart).
pub fn calibrate(points: &[(f64, f64, f64)]) -> Option<Calibration> {
    let usable: Vec<[f64; 4]> = points
        .iter()
        .filter(|&&(x, y, t)| t > 0.0 && t.is_finite() && x.is_finite() && y.is_finite())
        .map(|&(x, y, t)| [1.0, x, y, t])
        .collect();
    if usable.len() < 2 {
        return None;
    }
    // Subsets of (fixed, latency, transfer), the full model first; a subset needs more points
    // than terms to say anything about the error.
    const SUBSETS: [&[usize]; 6] = [&[0, 1, 2], &[1, 2], &[0, 2], &[0, 1], &[2], &[1]];
    let mut best: Option<Calibration> = None;
    for terms in SUBSETS {
        if usable.len() <= terms.len() && terms.len() > 1 {
            continue;
        }
        let Some(coef) = solve(&usable, terms) else {
            continue;
        };
        if coef.iter().any(|c| *c < 0.0 || !c.is_finite()) {
            continue;
        }
        let mut full = [0.0; 3];
        for (&t, &c) in terms.iter().zip(&coef) {
            full[t] = c;
        }
        let sq: f64 = usable
            .iter()
            .map(|p| {
                let e = (full[0] + full[1] * p[1] + full[2] * p[2] - p[3]) / p[3];
                e * e
            })
            .sum();
        let fit = Calibration {
            fixed_us: full[0],
            latency: full[1],
            transfer: full[2],
            rel_rms: (sq / usable.len() as f64).sqrt(),
        };
        // A smaller model is kept only when it fits better (the full one never fits worse
        // where it is valid, so this keeps the first valid one unless a subset ties it).
        if best.is_none_or(|b| fit.rel_rms < b.rel_rms - 1e-12) {
            best = Some(fit);
        }
    }
    best
}

/// The weighted least-squares factors of the columns `terms` of `points` (`[1, x, y, t]`,
/// weight `1 / t²`), by Gaussian elimination of the normal equations; `None` when they are
/// singular.
fn solve(points: &[[f64; 4]], terms: &[usize]) -> Option<Vec<f64>> {
    let k = terms.len();
    let mut m = vec![vec![0.0; k + 1]; k];
    for p in points {
        let w = 1.0 / (p[3] * p[3]);
        for (i, &a) in terms.iter().enumerate() {
            for (j, &b) in terms.iter().enumerate() {
                m[i][j] += w * p[a] * p[b];
            }
            m[i][k] += w * p[a] * p[3];
        }
    }
    let scale = (0..k).map(|i| m[i][i].abs()).fold(0.0, f64::max);
    for col in 0..k {
        let pivot = (col..k).max_by(|&a, &b| m[a][col].abs().total_cmp(&m[b][col].abs()))?;
        if m[pivot][col].abs() <= 1e-12 * scale.max(f64::MIN_POSITIVE) {
            return None;
        }
        m.swap(col, pivot);
        let pivot_row = m[col].clone();
        for (row, r) in m.iter_mut().enumerate() {
            if row != col {
                let f = r[col] / pivot_row[col];
                for (x, p) in r.iter_mut().zip(&pivot_row).skip(col) {
                    *x -= f * p;
                }
            }
        }
    }
    Some((0..k).map(|i| m[i][k] / m[i][i]).collect())
}
