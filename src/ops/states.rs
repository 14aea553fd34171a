//! [`Engine::row_states`]: the partial sums `(m, s, u)` of a one-shot call.

use ndarray::ArrayView2;

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::matrix::Matrix;
use crate::types::RowStates;

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
        kernel.check_dim(OP, x.cols())?;
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
