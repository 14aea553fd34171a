//! The result of a k-nearest-neighbour search.

use ndarray::Array2;

/// The `k` nearest keys of each query.
#[derive(Debug, Clone, PartialEq)]
pub struct Neighbours {
    /// Key indices (`M × k`), nearest first; equal distances in index order.
    pub indices: Array2<i64>,
    /// Euclidean distances (`M × k`), ascending.
    pub distances: Array2<f32>,
}
