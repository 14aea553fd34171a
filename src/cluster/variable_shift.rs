//! Variable-bandwidth MeanShift (Comaniciu, Ramesh & Meer 2001): every
//! point `x_j` its own bandwidth `h_j`, each seed moved to
//! `Σ_j x_j h_j^{−(d+2)} g(‖x − x_j‖²/h_j²) / Σ_j h_j^{−(d+2)} g(…)` (the
//! per-key weights `h_j^{−(d+2)}` join the log-weights of the
//! variable-bandwidth pass, docs/numerics.md, "Variable bandwidths"),
//! until its shift is within `tol·h_s` (the step and stop rule of fixed
//! MeanShift, `types::shift_to`, with `h_s` the bandwidth at the seed's
//! start). Modes are ranked and merged as in `postprocess.rs`, each at its own scale `h_c`,
//! the bandwidth of the point nearest it; points are labelled by their
//! nearest mode ([`label`]).

use std::borrow::Cow;
use std::cmp::Ordering;

use ndarray::{Array1, ArrayView2};

use super::mean_shift::{MeanShiftFit, bin_seeds, centred, midpoint, uncentred_modes};
use super::params::{AdaptiveBandwidth, MeanShiftValidParams, Seeds};
use super::postprocess::label;
use super::shard::cmp_rows;
use crate::engine::Engine;
use crate::error::{ClusterError, Result};
use crate::kernel::{Metric, Profile};
use crate::matrix::{Matrix, try_collect, try_copy};
use crate::ops::{VariableBandwidth, check_bandwidths, knn_scaled, variable_keys, variable_states};
use crate::types::{Progress, shift_to};

const OP: &str = "mean_shift";

impl Engine {
    /// [`mean_shift_with_progress`](Self::mean_shift_with_progress) with
    /// per-point bandwidths (`rule`).
    pub(super) fn variable_shift(
        &self,
        params: &MeanShiftValidParams,
        rule: &AdaptiveBandwidth,
        points: ArrayView2<'_, f32>,
        mut progress: impl FnMut(&Progress),
    ) -> Result<MeanShiftFit> {
        let x = Matrix::check(OP, "points", points)?;
        let (n, d) = (x.rows(), x.cols());
        let h = match rule {
            AdaptiveBandwidth::PerPoint(h) => {
                check_bandwidths(h, n, "points")?;
                h.clone()
            }
            AdaptiveBandwidth::Knn { k, alpha } => self.knn_bandwidths(points, *k, *alpha)?,
        };
        let h_median = median(&h);
        let center = midpoint(x.as_slice(), d);
        let xc = self.install(|| centred(x.as_slice(), &center))?;
        // Bins on the points as given (cells of the median bandwidth from
        // the origin, as fixed MeanShift and scikit-learn), then centred.
        let binned = match params.seeds() {
            Seeds::Binned { min_bin_freq } => Some(self.install(|| {
                centred(
                    &bin_seeds(x.as_slice(), d, h_median, *min_bin_freq),
                    &center,
                )
            })?),
            _ => None,
        };
        drop(x);
        let xv = ArrayView2::from_shape((n, d), &xc).expect("n·d"); // ok: one row per point
        let xm = Matrix::check(OP, "points", xv)?;
        // Seeds (centred) and the bandwidth each starts at.
        let (mut pos, start_h) = match params.seeds() {
            Seeds::All => (try_copy(OP, "seeds", &xc)?, h.clone()),
            Seeds::Binned { .. } => {
                let s = binned.unwrap_or_default();
                let hs = self.nearest_h(&s, &xm, &h)?;
                (s, hs)
            }
            Seeds::Given(s) => {
                if s.ncols() != d {
                    return Err(ClusterError::SeedDimension {
                        seeds: s.ncols(),
                        points: d,
                    }
                    .into());
                }
                let given = try_collect(OP, "seeds", s.len(), s.iter().copied())?;
                let s = self.install(|| centred(&given, &center))?;
                let hs = self.nearest_h(&s, &xm, &h)?;
                (s, hs)
            }
        };
        let m = pos.len() / d;
        if m == 0 {
            return Err(ClusterError::NoModes {
                seeds: 0,
                bandwidth: h_median,
            }
            .into());
        }
        // The points, their bandwidths and weights go to the backend once
        // for the run; each iteration passes only the moving seeds.
        let bw = VariableBandwidth::PerKey(h.clone());
        let (keys, _, _) = variable_keys(&bw, 0, (&xm, Some(&xm)), (d + 2) as f64)?;
        let prepared = self.backend_impl().prepare_variable_call(OP, keys)?;
        let tol = params.tol();
        let mut moving: Vec<usize> = (0..m).collect();
        let (mut iterations, mut converged, mut before_last) = (0, false, None);
        for it in 1..=params.max_iter() {
            if it == params.max_iter() {
                before_last = Some(pos.clone());
            }
            let mut gathered = Vec::with_capacity(moving.len() * d);
            for &s in &moving {
                gathered.extend_from_slice(&pos[s * d..(s + 1) * d]);
            }
            let qv = ArrayView2::from_shape((moving.len(), d), &gathered).expect("rows of d"); // ok: gathered so
            let qm = Matrix::check(OP, "seeds", qv)?;
            // Local means do not depend on the log-weights' offset.
            let states = prepared.states(OP, params.profile(), (&qm, None), true)?;
            let means = states.means().values;
            let mut next = Vec::with_capacity(moving.len());
            let mut max_shift = 0.0f32;
            for (r, &s) in moving.iter().enumerate() {
                let th = (tol * f64::from(start_h[s])) as f32;
                let m = means.row(r);
                let mean: Cow<'_, [f32]> =
                    m.as_slice().map_or_else(|| m.to_vec().into(), Cow::from);
                // An empty neighbourhood: the seed stays where it is, stopped.
                let (sh2, stop) = shift_to(&mut pos[s * d..(s + 1) * d], &mean, th * th);
                max_shift = max_shift.max(sh2.sqrt());
                if !stop {
                    next.push(s);
                }
            }
            moving = next;
            iterations = it;
            progress(&Progress {
                iteration: it,
                moving: moving.len(),
                max_shift,
            });
            if moving.is_empty() {
                converged = true;
                break;
            }
        }
        drop(prepared);
        let counted_at = if converged { None } else { before_last };
        let modes = self.select_variable_modes(&pos, counted_at.as_deref(), &xm, &h)?;
        let c = modes.scales.len();
        let mm = Matrix::check(
            OP,
            "modes",
            ArrayView2::from_shape((c, d), &modes.modes).expect("c·d"), // ok: rows of d
        )?;
        let mut labels = label(self.backend_impl(), &xm, &mm, h_median, true)?;
        if !params.cluster_all() {
            for (i, l) in labels.iter_mut().enumerate() {
                let k = *l as usize;
                let dist = sq_dist(xm.row_range(i, i + 1), mm.row_range(k, k + 1)).sqrt();
                if dist > f64::from(modes.scales[k]) {
                    *l = -1;
                }
            }
        }
        let modes_out = uncentred_modes(modes.modes, d, &center);
        Ok(MeanShiftFit {
            modes: modes_out,
            labels: Array1::from(labels),
            populations: modes.populations,
            iterations,
            converged,
            bandwidth: h_median,
        })
    }

    /// The bandwidth of the point nearest each row of `rows` (row-major).
    fn nearest_h(&self, rows: &[f32], points: &Matrix<'_>, h: &[f32]) -> Result<Vec<f32>> {
        let d = points.cols();
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let v = ArrayView2::from_shape((rows.len() / d, d), rows).expect("rows of d"); // ok: whole rows
        let q = Matrix::check(OP, "seeds", v)?;
        let nb = knn_scaled(self.backend_impl(), &q, points, (1, &Metric::Euclidean))?;
        Ok(nb.indices.iter().map(|&j| h[j as usize]).collect())
    }

    /// The final positions ranked and merged, each candidate at its own
    /// scale: its population is the number of points within `h_c` of where
    /// it was counted (`counted_at`, else its position), candidates are
    /// ranked by population then coordinates (descending), and each one
    /// still standing drops every other within its `h_c`.
    fn select_variable_modes(
        &self,
        positions: &[f32],
        counted_at: Option<&[f32]>,
        points: &Matrix<'_>,
        h: &[f32],
    ) -> Result<VariableModes> {
        let d = points.cols();
        let seeds = positions.len() / d;
        let row = |v: &[f32], i: usize| -> Vec<f32> { v[i * d..(i + 1) * d].to_vec() };
        // One candidate per position (the last seed there, as postprocess.rs).
        let mut order: Vec<usize> = (0..seeds).collect();
        order.sort_unstable_by(|&a, &b| {
            cmp_rows(&row(positions, a), &row(positions, b)).then(b.cmp(&a))
        });
        order.dedup_by(|a, b| cmp_rows(&row(positions, *a), &row(positions, *b)).is_eq());
        let cand: Vec<f32> = order.iter().flat_map(|&i| row(positions, i)).collect();
        let at: Vec<f32> = match counted_at {
            Some(at) => order.iter().flat_map(|&i| row(at, i)).collect(),
            None => cand.clone(),
        };
        let scales = self.nearest_h(&cand, points, h)?;
        // Points within h_c: row sums of the uniform profile at a
        // per-query bandwidth (weights 1, so the sums count).
        let c = scales.len();
        let av = ArrayView2::from_shape((c, d), &at).expect("c·d"); // ok: rows of d
        let am = Matrix::check(OP, "modes", av)?;
        let counts = variable_states(
            self,
            OP,
            Profile::Uniform,
            &VariableBandwidth::PerQuery(scales.clone()),
            (&am, points, None),
            0.0,
        )?;
        let pops: Vec<usize> = counts.sum.iter().map(|&s| s.round() as usize).collect();
        let mut rank: Vec<usize> = (0..c).filter(|&i| pops[i] > 0).collect();
        rank.sort_by(|&a, &b| {
            pops[b]
                .cmp(&pops[a])
                .then_with(|| cmp_rows(&row(&cand, b), &row(&cand, a)))
        });
        // Sweep along the first coordinate for the neighbours of a mode.
        let mut by_x: Vec<usize> = rank.clone();
        by_x.sort_by(|&a, &b| {
            cand[a * d]
                .partial_cmp(&cand[b * d])
                .unwrap_or(Ordering::Equal)
        });
        let xs: Vec<f32> = by_x.iter().map(|&i| cand[i * d]).collect();
        let mut removed = vec![false; c];
        let mut out = VariableModes::default();
        for &i in &rank {
            if removed[i] {
                continue;
            }
            let r = f64::from(scales[i]);
            let ci = row(&cand, i);
            let lo = xs.partition_point(|&v| f64::from(v) < f64::from(ci[0]) - r);
            for &j in by_x[lo..]
                .iter()
                .take_while(|&&j| f64::from(cand[j * d]) <= f64::from(ci[0]) + r)
            {
                if j != i && sq_dist(&ci, &row(&cand, j)) <= r * r {
                    removed[j] = true;
                }
            }
            out.modes.extend_from_slice(&ci);
            out.populations.push(pops[i]);
            out.scales.push(scales[i]);
        }
        if out.scales.is_empty() {
            return Err(ClusterError::NoModes {
                seeds,
                bandwidth: median(h),
            }
            .into());
        }
        Ok(out)
    }
}

/// The modes of a variable-bandwidth run, strongest first.
#[derive(Debug, Default)]
struct VariableModes {
    /// Row-major, `d` columns (centred).
    modes: Vec<f32>,
    /// Points within each mode's scale.
    populations: Vec<usize>,
    /// Each mode's scale `h_c`.
    scales: Vec<f32>,
}

/// The median (the upper one of an even count).
fn median(h: &[f32]) -> f32 {
    let mut s = h.to_vec();
    s.sort_by(f32::total_cmp);
    s[s.len() / 2]
}

fn sq_dist(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2))
        .sum()
}
