//! Bandwidth rules: scikit-learn's quantile estimate (k-th neighbour
//! distances, computed with the engine) and Scott's and Silverman's rules.

use ndarray::ArrayView2;
use rayon::prelude::*;

use super::params::Bandwidth;
use crate::backend::MatrixMode;
use crate::engine::Engine;
use crate::error::ClusterError;
use crate::error::{Error, Result};
use crate::kernel::{Kernel, MAX_BANDWIDTH, MIN_BANDWIDTH, Profile};
use crate::matrix::Matrix;
use crate::ops::call;

/// Distance rows computed per engine call: at most this many entries.
const BLOCK_ENTRIES: usize = 1 << 24;

impl Engine {
    /// scikit-learn's `estimate_bandwidth`: the mean, over the points, of
    /// the distance to their k-th nearest neighbour, with
    /// `k = max(1, ⌊quantile·n⌋)` and the point itself as its own first
    /// neighbour. With `n_samples`, a fixed-seed random subset of that many
    /// points (drawn without replacement) stands for the data, as queries
    /// and as neighbours. The distances are computed by the engine's
    /// backend in blocks of rows (`O(n²d)` work, `O(n)` memory per row).
    ///
    /// # Errors
    /// Empty or non-finite points; [`ClusterError::InvalidQuantile`],
    /// [`ClusterError::ZeroSamples`]; [`ClusterError::DegenerateBandwidth`]
    /// when the estimate is 0 (e.g. constant data) or not a usable bandwidth.
    pub fn estimate_bandwidth(
        &self,
        points: ArrayView2<'_, f32>,
        quantile: f64,
        n_samples: Option<usize>,
    ) -> Result<f32> {
        let rule = Bandwidth::Quantile {
            quantile,
            n_samples,
        };
        rule.check(Profile::Uniform)?;
        let x = Matrix::check("estimate_bandwidth", "points", points)?;
        self.resolve_bandwidth(rule, &x)
    }

    /// The bandwidth `rule` gives on `x`, checked usable by any kernel.
    pub(crate) fn resolve_bandwidth(&self, rule: Bandwidth, x: &Matrix<'_>) -> Result<f32> {
        let (name, h) = match rule {
            Bandwidth::Fixed(h) => return Ok(h),
            Bandwidth::Quantile {
                quantile,
                n_samples,
            } => ("quantile", self.quantile_estimate(x, quantile, n_samples)?),
            Bandwidth::Scott => ("scott", rule_of_thumb(x, false)),
            Bandwidth::Silverman => ("silverman", rule_of_thumb(x, true)),
        };
        usable(name, h)
    }

    fn quantile_estimate(
        &self,
        x: &Matrix<'_>,
        quantile: f64,
        n_samples: Option<usize>,
    ) -> Result<f64> {
        let (n, d) = (x.rows(), x.cols());
        let sample: Vec<f32> = match n_samples {
            Some(s) if s < n => {
                let mut rows = Vec::with_capacity(s * d);
                for i in subsample(n, s) {
                    rows.extend_from_slice(x.row_range(i, i + 1));
                }
                rows
            }
            _ => x.as_slice().to_vec(),
        };
        let n = sample.len() / d;
        let k = ((n as f64 * quantile) as usize).clamp(1, n);
        let view = ArrayView2::from_shape((n, d), &sample).expect("n·d entries"); // ok: sized above
        let keys = Matrix::check("estimate_bandwidth", "points", view)?;
        let unit = Kernel::new(Profile::Uniform, 1.0)?;
        let block = (BLOCK_ENTRIES / n).clamp(1, n);
        let mut total = 0.0f64;
        for r0 in (0..n).step_by(block) {
            let r1 = (r0 + block).min(n);
            let qv = view.slice(ndarray::s![r0..r1, ..]);
            let queries = Matrix::check("estimate_bandwidth", "points", qv)?;
            let mode = MatrixMode::SqDistance;
            let (mut sq, _) =
                call::kernel_matrix(self.backend_impl(), &unit, &queries, &keys, mode)?;
            let flat = sq.as_slice_mut().expect("standard layout"); // ok: built row-major
            total += self.install(|| {
                flat.par_chunks_mut(n)
                    .map(|row| {
                        let (_, kth, _) = row.select_nth_unstable_by(k - 1, f32::total_cmp);
                        f64::from(kth.max(0.0)).sqrt()
                    })
                    .sum::<f64>()
            });
        }
        Ok(total / n as f64)
    }
}

/// Scott's rule on `points`: `σ · n^(−1/(d+4))`, `σ` the root mean square
/// of the per-coordinate sample standard deviations.
///
/// # Errors
/// Empty or non-finite points; [`ClusterError::DegenerateBandwidth`] when
/// the spread is 0 (constant data, or a single point).
pub fn scott_bandwidth(points: ArrayView2<'_, f32>) -> Result<f32> {
    let x = Matrix::check("scott_bandwidth", "points", points)?;
    usable("scott", rule_of_thumb(&x, false))
}

/// Silverman's rule on `points`: `σ · (n(d+2)/4)^(−1/(d+4))`, same `σ` as
/// [`scott_bandwidth`].
///
/// # Errors
/// As [`scott_bandwidth`].
pub fn silverman_bandwidth(points: ArrayView2<'_, f32>) -> Result<f32> {
    let x = Matrix::check("silverman_bandwidth", "points", points)?;
    usable("silverman", rule_of_thumb(&x, true))
}

fn rule_of_thumb(x: &Matrix<'_>, silverman: bool) -> f64 {
    let (n, d) = (x.rows(), x.cols());
    if n < 2 {
        return 0.0;
    }
    let mut mean = vec![0.0f64; d];
    for row in x.as_slice().chunks_exact(d) {
        for (m, &v) in mean.iter_mut().zip(row) {
            *m += f64::from(v);
        }
    }
    mean.iter_mut().for_each(|m| *m /= n as f64);
    let mut ss = 0.0f64;
    for row in x.as_slice().chunks_exact(d) {
        for (m, &v) in mean.iter().zip(row) {
            ss += (f64::from(v) - m).powi(2);
        }
    }
    let sigma = (ss / ((n - 1) as f64 * d as f64)).sqrt();
    let (nf, df) = (n as f64, d as f64);
    let factor = if silverman {
        (nf * (df + 2.0) / 4.0).powf(-1.0 / (df + 4.0))
    } else {
        nf.powf(-1.0 / (df + 4.0))
    };
    sigma * factor
}

fn usable(rule: &'static str, h: f64) -> Result<f32> {
    let hf = h as f32;
    if !(hf.is_finite() && (MIN_BANDWIDTH..=MAX_BANDWIDTH).contains(&hf)) {
        return Err(Error::Cluster(ClusterError::DegenerateBandwidth {
            rule,
            estimate: h,
        }));
    }
    Ok(hf)
}

/// `s` distinct indices of `0..n`, drawn by a fixed-seed partial
/// Fisher–Yates shuffle (SplitMix64), in draw order.
pub(crate) fn subsample(n: usize, s: usize) -> Vec<usize> {
    let mut state = 0x853C_49E6_748F_EA9Bu64;
    let mut next = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut idx: Vec<usize> = (0..n).collect();
    for i in 0..s.min(n) {
        let j = i + (next() % (n - i) as u64) as usize;
        idx.swap(i, j);
    }
    idx.truncate(s.min(n));
    idx
}
