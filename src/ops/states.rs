//! Row states `(m, s, u)`: the partial sums behind every normalized op.

use ndarray::{Array1, Array2, ArrayView2, Zip};

use super::RowNormalized;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::matrix::Matrix;

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
    pub(crate) fn empty(rows: usize, q: usize) -> Self {
        RowStates {
            max_log_weight: Array1::from_elem(rows, f32::NEG_INFINITY),
            sum: Array1::zeros(rows),
            weighted: Array2::zeros((rows, q)),
        }
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
            let (m, s) = crate::plan::merge_states(
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

impl Engine {
    /// Row states `(m, s, u)` of `queries` against `keys`, with optional
    /// `values` (`N × q`). With `exclude_self`, `queries` must be the keys
    /// themselves (same rows) and row `i` leaves key `i` out
    /// (leave-one-out sums, diagonal removed inside the kernels).
    ///
    /// # Errors
    /// Empty or non-finite inputs, dimension or row mismatches, and with
    /// `exclude_self` queries whose row count differs from the keys'.
    pub fn row_states(
        &self,
        kernel: &Kernel,
        queries: ArrayView2<'_, f32>,
        keys: ArrayView2<'_, f32>,
        values: Option<ArrayView2<'_, f32>>,
        exclude_self: bool,
    ) -> Result<RowStates> {
        const OP: &str = "row_states";
        let q = Matrix::check(OP, "queries", queries)?;
        let x = Matrix::check(OP, "keys", keys)?;
        let y = values.map(|v| Matrix::check(OP, "values", v)).transpose()?;
        super::check_shapes(OP, &q, &x, y.as_ref())?;
        if exclude_self && q.rows() != x.rows() {
            return Err(Error::RowMismatch {
                op: OP,
                keys: x.rows(),
                values: q.rows(),
            });
        }
        self.backend_impl()
            .row_states(kernel, &q, &x, y.as_ref(), exclude_self)
    }
}
