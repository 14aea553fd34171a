//! Row states `(m, s, u)`, the partial sums behind every normalized op, the
//! associative rule that merges them, and the normalized results they give.

use ndarray::{Array1, Array2, Zip};

use crate::error::{Error, Result};
use crate::matrix::{try_array, try_vec};

/// Per-query partial sums of a kernel-weighted average, in the log domain
/// (docs/numerics.md): for row `i`,
///
/// * `m_i` = the largest log-weight `ln K(q_i, x_j)` (0 for the
///   non-exponential profiles, whose weights are not shifted; −inf when no
///   key has weight),
/// * `s_i = Σ_j e^{ln K_ij − m_i}`, so `Σ_j K_ij = e^{m_i}·s_i`,
/// * `u_i = Σ_j e^{ln K_ij − m_i}·y_j` (`q` columns; none without values).
///
/// States over different key sets merge associatively
/// ([`merge`](Self::merge)), so keys can be sharded across calls, devices
/// or machines and combined exactly.
#[derive(Debug, Clone, PartialEq)]
pub struct RowStates {
    /// `m_i`.
    pub max_log_weight: Array1<f32>,
    /// `s_i`.
    pub sum: Array1<f64>,
    /// `u_i` (`M × q`).
    pub weighted: Array2<f64>,
}

impl RowStates {
    /// `rows` rows without mass, or [`Error::TooLarge`](crate::Error::TooLarge)
    /// for `op`.
    pub(crate) fn empty(op: &'static str, rows: usize, q: usize) -> crate::error::Result<Self> {
        let n = rows as u64;
        Ok(RowStates {
            max_log_weight: Array1::from(try_vec(op, "row states", n, f32::NEG_INFINITY)?),
            sum: Array1::from(try_vec(op, "row states", n, 0.0)?),
            weighted: try_array(op, "row states", (rows, q), 0.0)?,
        })
    }

    /// Gives every row without mass the same form: `m = −inf`, `s = 0`,
    /// `u = 0` (backends may leave a finite stand-in for −inf).
    pub(crate) fn normalize_empty(&mut self) {
        for (i, s) in self.sum.iter().enumerate() {
            if *s <= 0.0 || !s.is_finite() {
                self.max_log_weight[i] = f32::NEG_INFINITY;
                self.weighted.row_mut(i).fill(0.0);
            }
        }
        self.sum
            .mapv_inplace(|s| if s > 0.0 && s.is_finite() { s } else { 0.0 });
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.sum.len()
    }

    /// Rows with no kernel mass at all.
    pub fn empty_rows(&self) -> usize {
        self.sum.iter().filter(|&&s| s == 0.0).count()
    }

    /// `ln Σ_j K(q_i, x_j)` per row (−inf for rows without mass), exact
    /// even where `Σ_j K` itself underflows. A row whose largest log-weight
    /// lies below the `f32` range (`m_i` = `f32::MIN`, see
    /// docs/numerics.md) has mass, and finite local means, but a log-sum
    /// of −inf here.
    pub fn log_sum(&self) -> Array1<f64> {
        Zip::from(&self.max_log_weight)
            .and(&self.sum)
            .map_collect(|&m, &s| {
                if s > 0.0 && m > f32::MIN {
                    f64::from(m) + s.ln()
                } else {
                    f64::NEG_INFINITY
                }
            })
    }

    /// The local means `u_i / s_i` (NaN rows, counted, where there is no mass).
    pub fn means(&self) -> RowNormalized {
        let (rows, q) = self.weighted.dim();
        let mut values = Array2::<f32>::zeros((rows, q));
        let mut empty_rows = 0;
        for (i, mut row) in values.rows_mut().into_iter().enumerate() {
            let s = self.sum[i];
            if s > 0.0 {
                for (o, &u) in row.iter_mut().zip(self.weighted.row(i)) {
                    *o = (u / s) as f32;
                }
            } else {
                row.fill(f32::NAN);
                empty_rows += 1;
            }
        }
        RowNormalized { values, empty_rows }
    }

    /// Adds `ln w` to every row's log-weights: the states of the kernel
    /// `w·K` (for mixtures of kernels). `w` must be positive and finite.
    pub fn scale_weights(&mut self, w: f64) -> Result<()> {
        if !(w.is_finite() && w > 0.0) {
            return Err(Error::InvalidParameter {
                name: "weight",
                reason: format!("a kernel weight must be positive and finite, got {w}"),
            });
        }
        let lw = w.ln();
        // −inf (no mass) and f32::MIN (below the f32 range) stay as they are.
        self.max_log_weight.mapv_inplace(|m| {
            if m == f32::NEG_INFINITY || m == f32::MIN {
                m
            } else {
                ((f64::from(m) + lw) as f32).max(f32::MIN)
            }
        });
        Ok(())
    }

    /// Merges the states of the same queries over other keys (or another
    /// kernel): afterwards `self` describes the sum of both weightings.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] when the shapes differ.
    pub fn merge(&mut self, other: &RowStates) -> Result<()> {
        if self.weighted.dim() != other.weighted.dim() {
            return Err(Error::InvalidParameter {
                name: "states",
                reason: format!(
                    "cannot merge states of shape {:?} with {:?}",
                    self.weighted.dim(),
                    other.weighted.dim()
                ),
            });
        }
        let q = self.weighted.ncols();
        let mut u = vec![0.0; q];
        for i in 0..self.rows() {
            let a = self.weighted.row(i).to_vec();
            let b = other.weighted.row(i).to_vec();
            let (m, s) = merge_states(
                (self.max_log_weight[i], self.sum[i], &a),
                (other.max_log_weight[i], other.sum[i], &b),
                &mut u,
            );
            self.max_log_weight[i] = m;
            self.sum[i] = s;
            self.weighted.row_mut(i).assign(&Array1::from(u.clone()));
        }
        Ok(())
    }
}

/// A row-normalized result: local means `K̃Y`, or the matrix `D⁻¹K`.
///
/// A row whose kernel weights are all zero has no defined average. That
/// happens with compact profiles (epanechnikov, uniform, triangular,
/// biweight) when no key lies within one bandwidth of the query, and with
/// any profile when every key is so far that `r/h ≥ ~3·10¹⁸` (its weight is
/// taken as exactly 0). Such a row is filled with NaN and counted in
/// [`empty_rows`](Self::empty_rows): NaN in `values` means "empty
/// neighbourhood" and nothing else, because inputs are checked finite.
#[derive(Debug, Clone, PartialEq)]
pub struct RowNormalized {
    /// The rows (`M × q` local means, or `M × N` for `D⁻¹K`).
    pub values: Array2<f32>,
    /// How many rows had an empty neighbourhood (and are NaN).
    pub empty_rows: usize,
}

impl RowNormalized {
    pub(crate) fn from_parts(rows: usize, cols: usize, data: Vec<f32>, empty_rows: usize) -> Self {
        let values = Array2::from_shape_vec((rows, cols), data).expect("rows·cols entries"); // ok: callers size data
        RowNormalized { values, empty_rows }
    }

    /// The rows, dropping the count.
    pub fn into_values(self) -> Array2<f32> {
        self.values
    }
}

/// The associative merge of two partial row states `(m, s, u)` with
/// `m` the largest log-weight seen, `s = Σ e^{w−m}`, `u = Σ e^{w−m}·y`
/// (docs/numerics.md, "Row states and their merge"). Non-exponential profiles use `m = 0` throughout.
///
/// ```text
/// m = max(m₁, m₂),  s = s₁e^{m₁−m} + s₂e^{m₂−m},  u likewise
/// ```
pub fn merge_states(a: (f32, f64, &[f64]), b: (f32, f64, &[f64]), u_out: &mut [f64]) -> (f32, f64) {
    let m = a.0.max(b.0);
    let scale = |mi: f32| {
        if mi == f32::NEG_INFINITY {
            0.0
        } else {
            (f64::from(mi) - f64::from(m)).exp()
        }
    };
    let (fa, fb) = (scale(a.0), scale(b.0));
    for ((o, &ua), &ub) in u_out.iter_mut().zip(a.2).zip(b.2) {
        *o = ua * fa + ub * fb;
    }
    (m, a.1 * fa + b.1 * fb)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_is_associative_and_matches_one_pass() {
        // Three log-weights split as ((w1, w2), w3) and (w1, (w2, w3)).
        let w = [-3.0f32, 5.0, 1.0];
        let y = [2.0f64, -1.0, 4.0];
        let single = |i: usize| (w[i], 1.0f64, vec![y[i]]);
        let mut u12 = [0.0];
        let a = single(0);
        let b = single(1);
        let c = single(2);
        let (m12, s12) = merge_states((a.0, a.1, &a.2), (b.0, b.1, &b.2), &mut u12);
        let mut left = [0.0];
        let (_, sl) = merge_states((m12, s12, &u12), (c.0, c.1, &c.2), &mut left);
        let mut u23 = [0.0];
        let (m23, s23) = merge_states((b.0, b.1, &b.2), (c.0, c.1, &c.2), &mut u23);
        let mut right = [0.0];
        let (_, sr) = merge_states((a.0, a.1, &a.2), (m23, s23, &u23), &mut right);
        let direct: f64 = w.iter().map(|&x| f64::from(x).exp()).sum::<f64>();
        let mean: f64 = w
            .iter()
            .zip(&y)
            .map(|(&x, &v)| f64::from(x).exp() * v)
            .sum::<f64>()
            / direct;
        assert!((left[0] / sl - mean).abs() < 1e-12);
        assert!((right[0] / sr - mean).abs() < 1e-12);
        // An empty state (m = −inf) is the identity.
        let mut u = [0.0];
        let (m, s) = merge_states((f32::NEG_INFINITY, 0.0, &[0.0]), (a.0, a.1, &a.2), &mut u);
        assert_eq!((m, s, u[0]), (a.0, 1.0, 2.0));
    }
}
