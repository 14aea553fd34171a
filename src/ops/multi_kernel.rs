//! Mixtures of kernels `Σ_m w_m K_m`, and the regularized kernels
//! `wK + vI` and `wK + v` (paper §8.2, Eq. 91).

use ndarray::{Array1, ArrayView2};

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::matrix::{Matrix, try_array, try_vec};
use crate::types::{RowNormalized, RowStates};

/// The op the allocations here report.
const OP: &str = "multi_kernel";

/// A weighted sum of kernels plus optional regularizing terms:
/// `K'(x, x') = Σ_m w_m K_m(x, x') + v_I·1[x is x'] + v_c`.
///
/// ```
/// use locus::{Kernel, MultiKernel, Profile};
/// let mk = MultiKernel::new()
///     .term(0.7, Kernel::gaussian(0.5)?)
///     .term(0.3, Kernel::new(Profile::Epanechnikov, 2.0)?)
///     .constant(1e-3)
///     .check()?;
/// assert_eq!(mk.terms().len(), 2);
/// # Ok::<(), locus::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MultiKernel {
    terms: Vec<(f32, Kernel)>,
    identity: f32,
    constant: f32,
}

impl MultiKernel {
    /// No terms yet.
    pub fn new() -> Self {
        MultiKernel::default()
    }

    /// Adds `w·K`.
    pub fn term(mut self, w: f32, kernel: Kernel) -> Self {
        self.terms.push((w, kernel));
        self
    }

    /// Adds `v·I`: every point also weighs itself by `v` (only in
    /// [`Engine::multi_kernel_self_local_mean`]).
    pub fn identity(mut self, v: f32) -> Self {
        self.identity = v;
        self
    }

    /// Adds the constant kernel `v` (every key weighs at least `v`).
    pub fn constant(mut self, v: f32) -> Self {
        self.constant = v;
        self
    }

    /// The `(w, K)` terms.
    pub fn terms(&self) -> &[(f32, Kernel)] {
        &self.terms
    }

    /// Checks the weights: finite and non-negative, at least one term or
    /// regularizer positive.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming the bad weight.
    pub fn check(self) -> Result<Self> {
        let bad = |name, v: f32| Error::InvalidParameter {
            name,
            reason: format!("weights must be finite and non-negative, got {v}"),
        };
        for &(w, _) in &self.terms {
            if !(w.is_finite() && w >= 0.0) {
                return Err(bad("multi_kernel.term", w));
            }
        }
        if !(self.identity.is_finite() && self.identity >= 0.0) {
            return Err(bad("multi_kernel.identity", self.identity));
        }
        if !(self.constant.is_finite() && self.constant >= 0.0) {
            return Err(bad("multi_kernel.constant", self.constant));
        }
        if self.terms.iter().all(|t| t.0 == 0.0) && self.identity == 0.0 && self.constant == 0.0 {
            return Err(Error::InvalidParameter {
                name: "multi_kernel",
                reason: "every weight is zero".into(),
            });
        }
        Ok(self)
    }
}

impl Engine {
    /// Local means under a [`MultiKernel`] (without the identity term,
    /// which needs the queries to be the keys: see
    /// [`multi_kernel_self_local_mean`](Self::multi_kernel_self_local_mean)).
    /// Each term's fused row states are merged with its weight added in
    /// the log domain, so no `M × N` matrix is formed.
    ///
    /// # Errors
    /// Invalid weights, a non-zero identity weight, and the errors of
    /// [`row_states`](Self::row_states).
    pub fn multi_kernel_local_mean(
        &self,
        kernel: &MultiKernel,
        queries: ArrayView2<'_, f32>,
        keys: ArrayView2<'_, f32>,
        values: ArrayView2<'_, f32>,
    ) -> Result<RowNormalized> {
        let mk = kernel.clone().check()?;
        if mk.identity != 0.0 {
            return Err(Error::InvalidParameter {
                name: "multi_kernel.identity",
                reason: "the identity term needs the queries to be the keys; use multi_kernel_self_local_mean".into(),
            });
        }
        Ok(self.multi_states(&mk, queries, keys, values)?.means())
    }

    /// Self-local means `K̃'Y` over `points` with every term of the
    /// [`MultiKernel`], the identity included (`values`: the points when
    /// `None`).
    ///
    /// # Errors
    /// As [`multi_kernel_local_mean`](Self::multi_kernel_local_mean).
    pub fn multi_kernel_self_local_mean(
        &self,
        kernel: &MultiKernel,
        points: ArrayView2<'_, f32>,
        values: Option<ArrayView2<'_, f32>>,
    ) -> Result<RowNormalized> {
        let mk = kernel.clone().check()?;
        let values = values.unwrap_or(points);
        let mut states = self.multi_states(&mk, points, points, values)?;
        if mk.identity > 0.0 {
            let y = Matrix::check("multi_kernel", "values", values)?;
            let n = points.nrows();
            let mut weighted = try_array(OP, "row states", (n, y.cols()), 0.0f64)?;
            for (w, &v) in weighted.iter_mut().zip(y.as_slice()) {
                *w = f64::from(v);
            }
            let ident = RowStates {
                max_log_weight: Array1::from(try_vec(
                    OP,
                    "row states",
                    n as u64,
                    mk.identity.ln(),
                )?),
                sum: Array1::from(try_vec(OP, "row states", n as u64, 1.0)?),
                weighted,
            };
            states.merge(&ident)?;
        }
        Ok(states.means())
    }

    fn multi_states(
        &self,
        mk: &MultiKernel,
        queries: ArrayView2<'_, f32>,
        keys: ArrayView2<'_, f32>,
        values: ArrayView2<'_, f32>,
    ) -> Result<RowStates> {
        let m = queries.nrows();
        // Checked here too: a constant-only mixture never reaches row_states.
        let (q, x, y) = (
            Matrix::check("multi_kernel", "queries", queries)?,
            Matrix::check("multi_kernel", "keys", keys)?,
            Matrix::check("multi_kernel", "values", values)?,
        );
        super::check_shapes("multi_kernel", &q, &x, Some(&y))?;
        let mut total: Option<RowStates> = None;
        for &(w, ref k) in mk.terms.iter().filter(|t| t.0 > 0.0) {
            let mut st = self.row_states(k, queries, keys, Some(values), false)?;
            st.scale_weights(f64::from(w))?;
            match &mut total {
                None => total = Some(st),
                Some(t) => t.merge(&st)?,
            }
        }
        if mk.constant > 0.0 {
            let mut col_sums = vec![0.0f64; y.cols()];
            for row in y.as_slice().chunks_exact(y.cols()) {
                for (s, &v) in col_sums.iter_mut().zip(row) {
                    *s += f64::from(v);
                }
            }
            let mut weighted = try_array(OP, "row states", (m, y.cols()), 0.0f64)?;
            for mut row in weighted.rows_mut() {
                row.iter_mut().zip(&col_sums).for_each(|(w, &s)| *w = s);
            }
            let c = RowStates {
                max_log_weight: Array1::from(try_vec(
                    OP,
                    "row states",
                    m as u64,
                    mk.constant.ln(),
                )?),
                sum: Array1::from(try_vec(OP, "row states", m as u64, y.rows() as f64)?),
                weighted,
            };
            match &mut total {
                None => total = Some(c),
                Some(t) => t.merge(&c)?,
            }
        }
        match total {
            Some(t) => Ok(t),
            None => {
                // Identity only: no cross-point weight at all.
                let y = Matrix::check("multi_kernel", "values", values)?;
                RowStates::empty(OP, m, y.cols())
            }
        }
    }
}
