//! The distance ops on keys already in the kernels' layout
//! ([`KeyColumns`]): what a one-shot call (`mod.rs`, which transposes its
//! inputs first) and a key set (`resident.rs`, which keeps them
//! transposed and charges its requests to a memory budget) both run.
//!
//! Imports: `super::{keys, local_mean, knn, kernel_matrix}`, `crate::backend`,
//! `crate::error`, `crate::kernel`, `crate::matrix`, `crate::types`.

use ndarray::Array2;

use super::keys::KeyColumns;
use super::{kernel_matrix, knn, local_mean};
use crate::backend::MatrixMode;
use crate::error::Result;
use crate::kernel::Kernel;
use crate::matrix::{Matrix, alloc_output};
use crate::types::{Neighbours, RowNormalized, RowStates};

/// Local means of `queries` over value matrix `set`.
pub(crate) fn local_mean(
    keys: &KeyColumns,
    kernel: &Kernel,
    queries: &Matrix<'_>,
    set: usize,
) -> Result<RowNormalized> {
    let soa = keys.soa(Some(set));
    let (m, q) = (queries.rows(), soa.q);
    let mut out = alloc_output("local_mean", "output", m, q)?;
    let empty = local_mean::local_mean(kernel, queries.as_slice(), keys.d(), &soa, false, &mut out);
    Ok(RowNormalized::from_parts(m, q, out, empty))
}

/// Row states of `queries` over value matrix `set` (none: sums only); with
/// `exclude_self` the queries are the keys and row `i` skips key `i`.
pub(crate) fn row_states(
    keys: &KeyColumns,
    kernel: &Kernel,
    queries: &Matrix<'_>,
    set: Option<usize>,
    exclude_self: bool,
) -> RowStates {
    let soa = keys.soa(set);
    let groups = local_mean::group_states(kernel, queries.as_slice(), keys.d(), &soa, exclude_self);
    local_mean::row_states_of(&groups, queries.rows(), soa.q)
}

/// The `k` nearest keys of every query.
pub(crate) fn knn(keys: &KeyColumns, queries: &Matrix<'_>, k: usize) -> Neighbours {
    let lists = knn::knn(queries.as_slice(), keys.d(), &keys.soa(None), k);
    knn::neighbours(&lists, k)
}

/// The kernel matrix of `queries` against the keys in `mode`, and its
/// number of empty rows.
pub(crate) fn kernel_matrix(
    keys: &KeyColumns,
    kernel: &Kernel,
    queries: &Matrix<'_>,
    mode: MatrixMode,
) -> Result<(Array2<f32>, usize)> {
    let (m, n) = (queries.rows(), keys.n());
    let mut out = alloc_output("kernel_matrix", "output", m, n)?;
    let empty = kernel_matrix::kernel_matrix(
        kernel,
        queries.as_slice(),
        keys.d(),
        &keys.soa(None),
        mode,
        &mut out,
    );
    let arr = Array2::from_shape_vec((m, n), out).expect("shape matches allocation"); // ok: sized above
    Ok((arr, empty))
}
