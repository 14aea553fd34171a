//! Leave-one-out error and bandwidth selection (paper Fig. 19a, Eq. 55).

use ndarray::ArrayView2;

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::kernel::{Kernel, Profile};
use crate::matrix::Matrix;

/// Leave-one-out score of one bandwidth.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LooScore {
    /// The bandwidth scored (1 for a product kernel, whose blocks carry
    /// theirs).
    pub bandwidth: f32,
    /// Mean over points of `‖y_i − Σ_{j≠i} K_ij y_j / Σ_{j≠i} K_ij‖²`,
    /// over the points that have a prediction.
    pub error: f64,
    /// Points with no other point in their neighbourhood (no prediction;
    /// left out of `error`).
    pub empty_rows: usize,
}

/// The result of [`Engine::select_bandwidth`].
#[derive(Debug, Clone, PartialEq)]
pub struct BandwidthSelection {
    /// The chosen bandwidth.
    pub best: f32,
    /// Every candidate's score, in the order given.
    pub curve: Vec<LooScore>,
}

impl Engine {
    /// Leave-one-out error of the local mean of `values` (`N × q`) over
    /// `points` (`N × d`); with `values = None`, the points themselves
    /// (self-supervised, paper Eq. 55). The diagonal is excluded inside the
    /// kernels (each row skips its own key), not subtracted afterwards.
    ///
    /// # Errors
    /// Empty or non-finite inputs, `values` rows ≠ points rows.
    pub fn loo_error(
        &self,
        kernel: &Kernel,
        points: ArrayView2<'_, f32>,
        values: Option<ArrayView2<'_, f32>>,
    ) -> Result<LooScore> {
        const OP: &str = "loo_error";
        let x = Matrix::check(OP, "points", points)?;
        let y = values.map(|v| Matrix::check(OP, "values", v)).transpose()?;
        super::check_shapes(OP, &x, &x, y.as_ref())?;
        kernel.check_dim(OP, x.cols())?;
        let targets = y.as_ref().unwrap_or(&x);
        let keys = (&x, Some(targets));
        let states = super::call::row_states(self.backend_impl(), kernel, &x, keys, true)?;
        let q = targets.cols();
        let mut total = 0.0;
        let mut counted = 0usize;
        for i in 0..x.rows() {
            let s = states.sum[i];
            if s <= 0.0 {
                continue;
            }
            let yi = &targets.as_slice()[i * q..(i + 1) * q];
            total += yi
                .iter()
                .zip(states.weighted.row(i))
                .map(|(&t, &u)| (f64::from(t) - u / s).powi(2))
                .sum::<f64>();
            counted += 1;
        }
        Ok(LooScore {
            bandwidth: kernel.bandwidth(),
            error: if counted > 0 {
                total / counted as f64
            } else {
                f64::NAN
            },
            empty_rows: x.rows() - counted,
        })
    }

    /// Scores every candidate bandwidth by [`loo_error`](Self::loo_error)
    /// and returns the best with the whole curve. Candidates that leave
    /// points without a prediction rank after those that do not (fewest
    /// such points first), then by error; ties go to the first given.
    ///
    /// # Errors
    /// An empty candidate list, an invalid bandwidth among them, and the
    /// errors of [`loo_error`](Self::loo_error).
    pub fn select_bandwidth(
        &self,
        profile: Profile,
        points: ArrayView2<'_, f32>,
        values: Option<ArrayView2<'_, f32>>,
        candidates: &[f32],
    ) -> Result<BandwidthSelection> {
        if candidates.is_empty() {
            return Err(Error::InvalidParameter {
                name: "candidates",
                reason: "no candidate bandwidths given".into(),
            });
        }
        let kernels = candidates
            .iter()
            .map(|&h| Kernel::new(profile, h))
            .collect::<Result<Vec<_>>>()?;
        let curve = kernels
            .iter()
            .map(|k| self.loo_error(k, points, values))
            .collect::<Result<Vec<_>>>()?;
        let best = curve
            .iter()
            .enumerate()
            .min_by(|(ia, a), (ib, b)| {
                let ea = if a.error.is_nan() {
                    f64::INFINITY
                } else {
                    a.error
                };
                let eb = if b.error.is_nan() {
                    f64::INFINITY
                } else {
                    b.error
                };
                (a.empty_rows, ea, *ia)
                    .partial_cmp(&(b.empty_rows, eb, *ib))
                    .unwrap_or(std::cmp::Ordering::Equal)
            })
            .map(|(_, s)| s.bandwidth)
            .unwrap_or(candidates[0]);
        Ok(BandwidthSelection { best, curve })
    }
}
