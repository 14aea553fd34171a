//! [`Engine::row_states`]: the partial sums `(m, s, u)` of a one-shot call.

use ndarray::ArrayView2;

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::types::RowStates;

use super::{Inputs, call};

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
        let Inputs { q, x, y } = Inputs::check(OP, Some(kernel), queries, keys, values)?;
        if exclude_self && q.rows() != x.rows() {
            return Err(Error::RowMismatch {
                op: OP,
                keys: x.rows(),
                values: q.rows(),
            });
        }
        call::row_states(
            self.backend_impl(),
            kernel,
            &q,
            (&x, y.as_ref()),
            exclude_self,
        )
    }
}
