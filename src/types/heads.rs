//! Validated attention inputs, as the backends receive them.

use crate::matrix::Matrix;

/// A validated batch of row-major matrices stacked along the rows: batch
/// `b` occupies rows `b·rows .. (b+1)·rows` of `data`.
#[derive(Debug, Clone)]
pub(crate) struct Heads<'a> {
    pub data: Matrix<'a>,
    pub batch: usize,
    pub rows: usize,
    /// Axes of the input (2: one batch given as a matrix).
    pub ndim: usize,
}

impl Heads<'_> {
    /// Columns of every matrix.
    pub(crate) fn cols(&self) -> usize {
        self.data.cols()
    }

    /// Batch `b`, row-major.
    pub(crate) fn batch_slice(&self, b: usize) -> &[f32] {
        self.data.row_range(b * self.rows, (b + 1) * self.rows)
    }
}

/// Valid attention parameters, as the backends receive them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Attention {
    /// Logit scale (finite).
    pub scale: f32,
    /// Causal mask (then `M ≤ N`).
    pub causal: bool,
}
