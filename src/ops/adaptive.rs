//! Bandwidth rules for variable bandwidths (docs/numerics.md, "Variable
//! bandwidths"): the k-nearest-neighbour rules of the sample-point and
//! balloon estimators, and Abramson's square-root law from a pilot
//! density.

use ndarray::ArrayView2;

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::kernel::{Kernel, MAX_BANDWIDTH, MIN_BANDWIDTH};

/// `k ≥ 1` and `alpha` finite and positive.
pub(crate) fn check_rule(k: usize, alpha: f32) -> Result<()> {
    if k == 0 {
        return Err(Error::InvalidParameter {
            name: "k",
            reason: "the k-th nearest neighbour needs k ≥ 1".into(),
        });
    }
    if !(alpha.is_finite() && alpha > 0.0) {
        return Err(Error::InvalidParameter {
            name: "alpha",
            reason: format!("alpha must be finite and positive, got {alpha}"),
        });
    }
    Ok(())
}

/// `α·r` for each distance `r`, refused where it leaves the bandwidth
/// range (`r = 0`: a point with `k` or more duplicates).
fn scaled(dist: impl Iterator<Item = f32>, alpha: f32, what: &str) -> Result<Vec<f32>> {
    dist.enumerate()
        .map(|(i, r)| {
            let h = (f64::from(alpha) * f64::from(r)) as f32;
            if h.is_finite() && (MIN_BANDWIDTH..=MAX_BANDWIDTH).contains(&h) {
                Ok(h)
            } else {
                Err(Error::InvalidParameter {
                    name: "k",
                    reason: format!(
                        "{what} {i}: alpha·distance = {h} is outside [{MIN_BANDWIDTH:e}, {MAX_BANDWIDTH:e}] (a distance of 0 means {what} {i} has k or more duplicates; raise k)"
                    ),
                })
            }
        })
        .collect()
}

impl Engine {
    /// Sample-point bandwidths by the k-nearest-neighbour rule:
    /// `h_j = α·r_k(j)`, `r_k(j)` the distance from point `j` to its `k`-th
    /// nearest *other* point (Breiman, Meisel & Purcell 1977; Silverman
    /// 1986, §5.3), for [`VariableBandwidth::PerKey`](crate::VariableBandwidth::PerKey)
    /// over these points.
    ///
    /// ```
    /// use locus::Engine;
    /// use ndarray::array;
    /// let x = array![[0.0f32], [1.0], [3.0]];
    /// assert_eq!(Engine::cpu().knn_bandwidths(x.view(), 1, 2.0)?, vec![2.0, 2.0, 4.0]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for `k = 0`, `k ≥ N`, `alpha` not
    /// finite and positive, or a bandwidth of 0 (a point with `k` or more
    /// duplicates); the inputs' errors as [`knn`](Self::knn).
    pub fn knn_bandwidths(
        &self,
        points: ArrayView2<'_, f32>,
        k: usize,
        alpha: f32,
    ) -> Result<Vec<f32>> {
        check_rule(k, alpha)?;
        if k >= points.nrows() {
            return Err(Error::InvalidParameter {
                name: "k",
                reason: format!(
                    "the k-th nearest other point needs k < N; k = {k} with N = {}",
                    points.nrows()
                ),
            });
        }
        // The (k+1)-th nearest point counting the point itself: its own
        // distance (0) is the first, duplicates' zeros come with it.
        let nb = self.knn(points, points, k + 1)?;
        scaled(nb.distances.column(k).iter().copied(), alpha, "point")
    }

    /// Balloon bandwidths by the k-nearest-neighbour rule: `h_i = α·r_k(i)`,
    /// `r_k(i)` the distance from query `i` to its `k`-th nearest key
    /// (Loftsgaarden & Quesenberry 1965), for
    /// [`VariableBandwidth::PerQuery`](crate::VariableBandwidth::PerQuery).
    ///
    /// # Errors
    /// As [`knn_bandwidths`](Self::knn_bandwidths), with `1 ≤ k ≤ N`.
    pub fn balloon_bandwidths(
        &self,
        queries: ArrayView2<'_, f32>,
        keys: ArrayView2<'_, f32>,
        k: usize,
        alpha: f32,
    ) -> Result<Vec<f32>> {
        check_rule(k, alpha)?;
        let nb = self.knn(queries, keys, k)?;
        scaled(nb.distances.column(k - 1).iter().copied(), alpha, "query")
    }

    /// Abramson's square-root law from a pilot density: `h_j =
    /// h·(f̂(x_j)/g)^{−1/2}`, `f̂` the fixed-bandwidth density of `pilot`
    /// (bandwidth `h`) over the points, `g` the geometric mean of the
    /// `f̂(x_j)` (Abramson 1982; Silverman 1986, §5.3), for
    /// [`VariableBandwidth::PerKey`](crate::VariableBandwidth::PerKey). Computed
    /// from log densities, so a pilot far below `f64`'s range is fine.
    ///
    /// # Errors
    /// As [`log_density`](Self::log_density) with `pilot`;
    /// [`Error::InvalidParameter`] where a bandwidth leaves
    /// `[1e-18, 1e18]`, or `pilot` is a product kernel.
    pub fn abramson_bandwidths(
        &self,
        pilot: &Kernel,
        points: ArrayView2<'_, f32>,
    ) -> Result<Vec<f32>> {
        if pilot.is_product() {
            return Err(Error::InvalidParameter {
                name: "pilot",
                reason: "Abramson's law takes a radial pilot kernel".into(),
            });
        }
        let lf = self.log_density(pilot, points, points, None)?;
        // Each point lies in its own kernel's support: ln f̂ > −inf.
        let mean = lf.iter().sum::<f64>() / lf.len() as f64;
        let h = f64::from(pilot.bandwidth());
        let out: Vec<f32> = lf
            .iter()
            .map(|&l| (h * (-0.5 * (l - mean)).exp()) as f32)
            .collect();
        scaled(out.into_iter(), 1.0, "point")
    }
}
