//! Nadaraya–Watson local mean `K̃Y` and the self-local mean `K̃X`.

use ndarray::ArrayView2;

use crate::engine::Engine;
use crate::error::Result;
use crate::kernel::Kernel;
use crate::matrix::Matrix;
use crate::types::RowNormalized;

use super::{Inputs, call};

impl Engine {
    /// Local means `ŷ(q_i) = Σ_j K(q_i, x_j) y_j / Σ_j K(q_i, x_j)` of the
    /// `values` (`N × q`) at the `queries` (`M × d`), with keys `N × d`.
    ///
    /// Fused and streaming on both backends: the `M × N` weights are never
    /// stored. Exponential profiles are accumulated in the log domain, so a
    /// tiny bandwidth yields the average of the nearest keys, not NaN. Rows
    /// with an empty neighbourhood are NaN and counted (see
    /// [`RowNormalized`]).
    ///
    /// # Errors
    /// Empty or non-finite inputs, `queries`/`keys` dimension mismatch,
    /// `values` rows ≠ `keys` rows, and backend failures.
    pub fn local_mean(
        &self,
        kernel: &Kernel,
        queries: ArrayView2<'_, f32>,
        keys: ArrayView2<'_, f32>,
        values: ArrayView2<'_, f32>,
    ) -> Result<RowNormalized> {
        let i = Inputs::check("local_mean", Some(kernel), queries, keys, Some(values))?;
        call::local_mean(self.backend_impl(), kernel, &i.q, (&i.x, i.values()))
    }

    /// The self-local mean `K̃X`: every point replaced by the local mean of
    /// all points around it (one MeanShift step).
    ///
    /// # Errors
    /// As [`local_mean`](Self::local_mean).
    pub fn self_local_mean(
        &self,
        kernel: &Kernel,
        points: ArrayView2<'_, f32>,
    ) -> Result<RowNormalized> {
        let x = Matrix::check("self_local_mean", "points", points)?;
        kernel.check_dim("self_local_mean", x.cols())?;
        call::local_mean(self.backend_impl(), kernel, &x, (&x, &x))
    }
}
