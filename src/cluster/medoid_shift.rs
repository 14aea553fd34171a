//! MedoidShift (paper §7.4): every point jumps to the sample point
//! `argmin_j (K̃D)_ij`, until it stays put; points that reach the same
//! medoid form a cluster.
//!
//! With squared Euclidean `D` and rows of `K̃` summing to one,
//! `(K̃D)_ij = ‖x_j − m_i‖² + const_i` where `m_i` is the local mean of
//! point `i`, so one step is a local mean followed by a nearest-sample
//! search: `O(N²d)` on either backend. A given distance matrix (a graph,
//! say) needs the product `K̃D` itself: `O(N³)`, for moderate N, on the CPU.

use ndarray::{Array1, Array2, ArrayView2, s};
use rayon::prelude::*;

use super::bandwidth::subsample;
use super::params::{Bandwidth, MedoidShiftValidParams};
use crate::engine::Engine;
use crate::error::ClusterError;
use crate::error::{Error, Result};
use crate::kernel::{Kernel, MAX_BANDWIDTH, MIN_BANDWIDTH};
use crate::matrix::Matrix;
use crate::ops::call;

const OP: &str = "medoid_shift";

/// What MedoidShift found.
#[derive(Debug, Clone, PartialEq)]
pub struct MedoidShiftFit {
    /// The medoids: indices of input points, most populated cluster first.
    pub medoids: Vec<usize>,
    /// The medoids' coordinates (`C × d`); `C × 0` for a distance matrix.
    pub modes: Array2<f32>,
    /// One label per input point: the index of its medoid in
    /// [`medoids`](Self::medoids).
    pub labels: Array1<i64>,
    /// The number of points in each cluster.
    pub populations: Vec<usize>,
    /// Rounds of jumps in which some point still moved.
    pub iterations: usize,
    /// Whether every point reached a medoid that stays put within `max_iter`.
    pub converged: bool,
    /// The bandwidth used (given or estimated).
    pub bandwidth: f32,
}

impl Engine {
    /// MedoidShift of `points` (`N × d`) with squared Euclidean distances:
    /// each sample `i` points to the sample nearest its local mean, and
    /// every point follows these jumps to a fixed point (its medoid).
    /// Ties go to the smallest index.
    ///
    /// ```
    /// use locus::{Engine, MedoidShiftParams};
    /// use ndarray::array;
    /// let x = array![[0.0f32], [0.2], [0.4], [5.0], [5.1], [5.3]];
    /// let p = MedoidShiftParams::new().bandwidth(1.0).check()?;
    /// let fit = Engine::cpu().medoid_shift(&p, x.view())?;
    /// assert_eq!(fit.medoids, vec![1, 4]);
    /// assert_eq!(fit.labels.to_vec(), vec![0, 0, 0, 1, 1, 1]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    ///
    /// # Errors
    /// Empty or non-finite points; a bandwidth rule that fails on this
    /// data; backend failures.
    pub fn medoid_shift(
        &self,
        params: &MedoidShiftValidParams,
        points: ArrayView2<'_, f32>,
    ) -> Result<MedoidShiftFit> {
        let x = Matrix::check(OP, "points", points)?;
        // A product kernel: the points in units of its blocks' bandwidths,
        // the blocks with unit bandwidths.
        let mut scaled;
        let (x, h, kernel) = match params.product_kernel() {
            Some(k) => {
                let d = x.cols();
                k.check_dim(OP, d)?;
                scaled = points.to_owned();
                super::block_units(scaled.view_mut(), &k.coordinate_bandwidths(d), false);
                (
                    Matrix::check(OP, "points", scaled.view())?,
                    1.0,
                    k.unit_blocks(),
                )
            }
            None => {
                let h = self.resolve_bandwidth(params.bandwidth(), &x)?;
                (x, h, Kernel::new(params.profile(), h)?)
            }
        };
        let backend = self.backend_impl();
        // k(0) = 1: every point is its own neighbour, so no row is empty.
        let means = call::local_mean(backend, &kernel, &x, (&x, &x))?;
        let mm = Matrix::check(OP, "local means", means.values.view())?;
        let nearest =
            crate::ops::knn_scaled(backend, &mm, &x, (1, &crate::kernel::Metric::Euclidean))?;
        let next: Vec<u32> = nearest.indices.iter().map(|&j| j as u32).collect();
        let mut fit = follow(&next, params.max_iter(), h);
        let d = x.cols();
        let mut modes = Array2::zeros((fit.medoids.len(), d));
        for (mut row, &m) in modes.rows_mut().into_iter().zip(&fit.medoids) {
            row.assign(&points.row(m));
        }
        fit.modes = modes;
        Ok(fit)
    }

    /// MedoidShift on a given distance matrix `distances` (`N × N`,
    /// finite, non-negative; a graph's shortest paths, say): kernel weights
    /// `K_ik = k(D_ik/h)`, each row normalized, then point `i` jumps to
    /// `argmin_j (K̃D)_ij`. A row with no weight (a compact kernel and no
    /// entry below `h`) leaves its point where it is. `O(N³)`, for moderate
    /// N; computed in `f64` on the CPU backend only.
    ///
    /// A [`Bandwidth::Quantile`] rule reads the k-th smallest entry of each
    /// (sampled) row.
    ///
    /// # Errors
    /// [`Error::Unsupported`] on a GPU engine; a matrix that is not square
    /// ([`ClusterError::NotSquare`]), has negative entries
    /// ([`ClusterError::NegativeDistance`]) or non-finite ones; Scott's or
    /// Silverman's rule ([`ClusterError::RuleNeedsCoordinates`]).
    pub fn medoid_shift_distances(
        &self,
        params: &MedoidShiftValidParams,
        distances: ArrayView2<'_, f32>,
    ) -> Result<MedoidShiftFit> {
        let (rows, cols) = distances.dim();
        if rows != cols {
            return Err(ClusterError::NotSquare { rows, cols }.into());
        }
        if params.product_kernel().is_some() {
            return Err(Error::InvalidParameter {
                name: "kernel",
                reason: "a product kernel weighs coordinate blocks; a distance matrix has no coordinates"
                    .into(),
            });
        }
        let dm = Matrix::check(OP, "distances", distances)?;
        if let Some(p) = dm.as_slice().iter().position(|&v| v < 0.0) {
            return Err(ClusterError::NegativeDistance {
                row: p / cols,
                col: p % cols,
                value: dm.as_slice()[p],
            }
            .into());
        }
        if self.backend().is_gpu() {
            return Err(Error::Unsupported {
                op: OP,
                backend: "gpu",
                reason: "a given distance matrix is handled by the CPU backend (Engine::cpu())"
                    .into(),
            });
        }
        let h = match params.bandwidth() {
            Bandwidth::Fixed(h) => h,
            Bandwidth::Quantile {
                quantile,
                n_samples,
            } => self.install(|| quantile_from_matrix(&distances, quantile, n_samples))?,
            Bandwidth::Scott => {
                return Err(ClusterError::RuleNeedsCoordinates { rule: "scott" }.into());
            }
            Bandwidth::Silverman => {
                return Err(ClusterError::RuleNeedsCoordinates { rule: "silverman" }.into());
            }
        };
        let kernel = Kernel::new(params.profile(), h)?;
        // Two N × N f64 work matrices: refuse, rather than abort, when
        // they cannot be allocated.
        let n = distances.nrows() as u64;
        crate::matrix::ensure_room(
            "medoid_shift",
            "weight matrices",
            n.saturating_mul(n).saturating_mul(16),
        )?;
        let next = self.install(|| medoid_targets(&kernel, &distances));
        let mut fit = follow(&next, params.max_iter(), h);
        fit.modes = Array2::zeros((fit.medoids.len(), 0));
        Ok(fit)
    }
}

/// The quantile bandwidth rule on distance rows (see
/// [`Engine::estimate_bandwidth`]).
fn quantile_from_matrix(
    dist: &ArrayView2<'_, f32>,
    quantile: f64,
    n_samples: Option<usize>,
) -> Result<f32> {
    let n = dist.nrows();
    let idx: Vec<usize> = match n_samples {
        Some(s) if s < n => subsample(n, s),
        _ => (0..n).collect(),
    };
    let m = idx.len();
    let k = ((m as f64 * quantile) as usize).clamp(1, m);
    let total: f64 = idx
        .par_iter()
        .map(|&i| {
            let mut row: Vec<f32> = idx.iter().map(|&j| dist[[i, j]]).collect();
            let (_, kth, _) = row.select_nth_unstable_by(k - 1, f32::total_cmp);
            f64::from(*kth)
        })
        .sum();
    let h = total / m as f64;
    let hf = h as f32;
    if !(hf.is_finite() && (MIN_BANDWIDTH..=MAX_BANDWIDTH).contains(&hf)) {
        return Err(ClusterError::DegenerateBandwidth {
            rule: "quantile",
            estimate: h,
        }
        .into());
    }
    Ok(hf)
}

/// `argmin_j (K̃D)_ij` for every row `i` (in `f64`, the row's own index
/// when its weights are all zero; the smallest index on ties).
fn medoid_targets(kernel: &Kernel, dist: &ArrayView2<'_, f32>) -> Vec<u32> {
    let n = dist.nrows();
    let h = f64::from(kernel.bandwidth());
    let p = kernel.profile();
    let d64 = dist.mapv(f64::from);
    // Row-normalized weights, in the log domain for exponential profiles.
    let mut kt = Array2::<f64>::zeros((n, n));
    let dflat = d64.as_slice().expect("standard layout"); // ok: built by mapv
    let empty: Vec<bool> = kt
        .as_slice_mut()
        .expect("standard layout") // ok: built by zeros
        .par_chunks_mut(n)
        .zip(dflat.par_chunks(n))
        .map(|(w, drow)| {
            for (wj, &dj) in w.iter_mut().zip(drow) {
                let t = (dj / h).powi(2);
                *wj = match p.log_eval_sq(t) {
                    Some(lw) => lw,
                    None => p.eval_sq(t),
                };
            }
            if p.is_exponential() {
                let mx = w.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                w.iter_mut().for_each(|l| *l = (*l - mx).exp());
            }
            let s: f64 = w.iter().sum();
            if s > 0.0 {
                w.iter_mut().for_each(|v| *v /= s);
            }
            s <= 0.0
        })
        .collect();
    // (K̃D), a block of rows per task.
    let block = 64;
    let mut out = vec![0u32; n];
    out.par_chunks_mut(block).enumerate().for_each(|(b, o)| {
        let r0 = b * block;
        let prod = kt.slice(s![r0..r0 + o.len(), ..]).dot(&d64);
        for (r, (oi, row)) in o.iter_mut().zip(prod.rows()).enumerate() {
            let i = r0 + r;
            if empty[i] {
                *oi = i as u32;
                continue;
            }
            let mut best = (0usize, f64::INFINITY);
            for (j, &v) in row.iter().enumerate() {
                if v < best.1 {
                    best = (j, v);
                }
            }
            *oi = best.0 as u32;
        }
    });
    out
}

/// Follows the jumps `next` from every point for at most `max_iter`
/// rounds; points at the same final sample form a cluster.
fn follow(next: &[u32], max_iter: usize, h: f32) -> MedoidShiftFit {
    let n = next.len();
    let mut at: Vec<u32> = (0..n as u32).collect();
    let mut iterations = 0;
    let settled = |at: &[u32]| at.iter().all(|&a| next[a as usize] == a);
    while iterations < max_iter && !settled(&at) {
        for a in at.iter_mut() {
            *a = next[*a as usize];
        }
        iterations += 1;
    }
    let converged = settled(&at);
    let mut counts = std::collections::HashMap::new();
    for &a in &at {
        *counts.entry(a as usize).or_insert(0usize) += 1;
    }
    let mut medoids: Vec<(usize, usize)> = counts.into_iter().collect();
    medoids.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut slot = vec![0i64; n];
    for (c, &(m, _)) in medoids.iter().enumerate() {
        slot[m] = c as i64;
    }
    MedoidShiftFit {
        labels: at.iter().map(|&a| slot[a as usize]).collect(),
        populations: medoids.iter().map(|m| m.1).collect(),
        medoids: medoids.iter().map(|m| m.0).collect(),
        modes: Array2::zeros((0, 0)),
        iterations,
        converged,
        bandwidth: h,
    }
}
