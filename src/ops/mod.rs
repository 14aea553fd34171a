//! The public ops, as methods of [`Engine`](crate::Engine): each checks its
//! inputs once, then hands valid data to the engine's backend.

mod kernel_matrix;
mod local_mean;
mod softmax;

pub use kernel_matrix::LaplacianKind;
pub(crate) use softmax::{Attention, Heads};
pub use softmax::{FeatureLocalMean, SoftmaxParams, merge_heads, split_heads};

use ndarray::Array2;

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
