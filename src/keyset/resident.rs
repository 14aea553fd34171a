//! What a backend keeps for a key set, and the queries it answers from it.

use std::fmt;

use crate::error::Result;
use crate::kernel::Kernel;
use crate::matrix::Matrix;
use crate::ops::{Neighbours, RowNormalized, RowStates};

/// Keys and value matrices kept by a backend for repeated queries: on the
/// GPU, key tiles in device buffers it owns; on the CPU, the transposed,
/// padded layout its kernels stream. Inputs arrive validated (finite,
/// non-empty, `d` columns, `k` in range). Freed when dropped.
pub(crate) trait Resident: Send + Sync + fmt::Debug {
    /// Local means of value matrix `set` at `queries`.
    fn local_mean(
        &self,
        kernel: &Kernel,
        queries: &Matrix<'_>,
        set: usize,
    ) -> Result<RowNormalized>;

    /// Row states `(m, s, u)` with value matrix `set` (`None`: row sums only).
    fn row_states(
        &self,
        kernel: &Kernel,
        queries: &Matrix<'_>,
        set: Option<usize>,
    ) -> Result<RowStates>;

    /// The `k` nearest keys of every query.
    fn knn(&self, queries: &Matrix<'_>, k: usize) -> Result<Neighbours>;

    /// Fails when this backend cannot return `k` neighbours (`1 ≤ k ≤ N`
    /// is checked by the caller).
    fn check_k(&self, k: usize) -> Result<()>;

    /// Bytes held for the keys and values.
    fn bytes(&self) -> u64;
}
