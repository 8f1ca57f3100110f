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
    let rows: Vec<[f64; 4]> = points.iter().map(|&(x, y, t)| [1.0, x, y, t]).collect();
    let (f, rel_rms) = fit(&rows)?;
    Some(Calibration {
        fixed_us: f[0],
        latency: f[1],
        transfer: f[2],
        rel_rms,
    })
}

/// A fit with the predicted fixed part weighed apart for bulk and LL calls
/// ([`calibrate_by_protocol`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProtocolCalibration {
    pub fixed_us: f64,
    /// The factor of a bulk call's predicted fixed part.
    pub latency: f64,
    /// The factor of an LL call's.
    pub latency_ll: f64,
    pub transfer: f64,
    pub rel_rms: f64,
}

/// One latency factor for both protocols.
impl From<Calibration> for ProtocolCalibration {
    fn from(c: Calibration) -> Self {
        ProtocolCalibration {
            fixed_us: c.fixed_us,
            latency: c.latency,
            latency_ll: c.latency,
            transfer: c.transfer,
            rel_rms: c.rel_rms,
        }
    }
}

impl ProtocolCalibration {
    /// The calibrated time of a prediction of a call that ran LL (`ll`) or bulk.
    pub fn time_us(&self, parts: Time, ll: bool) -> f64 {
        let a = if ll { self.latency_ll } else { self.latency };
        self.fixed_us + a * parts.latency_us + self.transfer * parts.transfer_us
    }
}

/// [`calibrate`] with one latency factor for bulk calls and another for LL calls, from
/// `points` of `(predicted fixed part, predicted transfer part, measured time, whether the
/// call ran LL)`: the model's protocol latencies are NCCL's, and what an executor pays per
/// hop in each protocol (or what hides it) need not keep their ratio.
pub fn calibrate_by_protocol(points: &[(f64, f64, f64, bool)]) -> Option<ProtocolCalibration> {
    let rows: Vec<[f64; 5]> = points
        .iter()
        .map(|&(x, y, t, ll)| {
            let (bulk, lat_ll) = if ll { (0.0, x) } else { (x, 0.0) };
            [1.0, bulk, lat_ll, y, t]
        })
        .collect();
    let (f, rel_rms) = fit(&rows)?;
    Some(ProtocolCalibration {
        fixed_us: f[0],
        latency: f[1],
        latency_ll: f[2],
        transfer: f[3],
        rel_rms,
    })
}

/// The non-negative least-squares fit of the last column of `points` on the others (every
/// value finite, the measured time positive), as [`calibrate`] describes: the factors and
/// the relative RMS error.
fn fit<const N: usize>(points: &[[f64; N]]) -> Option<(Vec<f64>, f64)> {
    let k = N - 1;
    let usable: Vec<&[f64; N]> = points
        .iter()
        .filter(|p| p[k] > 0.0 && p.iter().all(|v| v.is_finite()))
        .collect();
    if usable.len() < 2 {
        return None;
    }
    // Every subset of the terms as a bit set (bit 0 the fixed part), larger first, the full
    // model first; the fixed part alone says nothing about the model and is left out.
    let mut subsets: Vec<u32> = (2..(1u32 << k)).collect();
    subsets.sort_by_key(|&s| (std::cmp::Reverse(s.count_ones()), std::cmp::Reverse(s)));
    let mut best: Option<(Vec<f64>, f64)> = None;
    for set in subsets {
        let terms: Vec<usize> = (0..k).filter(|t| set & (1 << t) != 0).collect();
        // A subset needs more points than terms to say anything about the error.
        if usable.len() <= terms.len() && terms.len() > 1 {
            continue;
        }
        let Some(coef) = solve(&usable, &terms) else {
            continue;
        };
        if coef.iter().any(|c| *c < 0.0 || !c.is_finite()) {
            continue;
        }
        let mut full = vec![0.0; k];
        for (&t, &c) in terms.iter().zip(&coef) {
            full[t] = c;
        }
        let sq: f64 = usable
            .iter()
            .map(|p| {
                let e = (full.iter().zip(p.iter()).map(|(f, x)| f * x).sum::<f64>() - p[k]) / p[k];
                e * e
            })
            .sum();
        let rms = (sq / usable.len() as f64).sqrt();
        // A smaller model is kept only when it fits better (the full one never fits worse
        // where it is valid, so this keeps the first valid one unless a subset ties it).
        if best.as_ref().is_none_or(|b| rms < b.1 - 1e-12) {
            best = Some((full, rms));
        }
    }
    best
}

/// The weighted least-squares factors of the columns `terms` of `points` (the last column
/// the measured time `t`, weight `1 / t²`), by Gaussian elimination of the normal
/// equations; `None` when they are singular.
fn solve<const N: usize>(points: &[&[f64; N]], terms: &[usize]) -> Option<Vec<f64>> {
    let k = terms.len();
    let t = N - 1;
    let mut m = vec![vec![0.0; k + 1]; k];
    for p in points {
        let w = 1.0 / (p[t] * p[t]);
        for (i, &a) in terms.iter().enumerate() {
            for (j, &b) in terms.iter().enumerate() {
                m[i][j] += w * p[a] * p[b];
            }
            m[i][k] += w * p[a] * p[t];
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
