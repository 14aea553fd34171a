//! One-shot calls over keys: the keys prepared on the backend for the one
//! call ([`Backend::prepare_call`]: laid out as that call plans, no memory
//! reservation), queried through the code a [`KeySet`](crate::KeySet)
//! runs ([`PreparedKeys`]), and dropped. Every op of `ops/` and
//! `cluster/` that queries keys it does not keep goes through these.

use ndarray::Array2;

use crate::backend::{Backend, Call, MatrixMode, Moments, Query};
use crate::error::Result;
use crate::kernel::{Kernel, Metric};
use crate::matrix::Matrix;
use crate::types::{MomentLayout, Neighbours, RowNormalized, RowStates};

/// Nadaraya–Watson local means of `values` at `queries`.
pub(crate) fn local_mean(
    backend: &dyn Backend,
    kernel: &Kernel,
    queries: &Matrix<'_>,
    (keys, values): (&Matrix<'_>, &Matrix<'_>),
) -> Result<RowNormalized> {
    let call = Call::means("local_mean", kernel, queries.rows(), values.cols());
    let sets = std::slice::from_ref(values);
    backend
        .prepare_call(keys, sets, &call)?
        .local_mean(&Query::new(kernel, queries), 0)
}

/// Row states `(m, s, u)` of `queries` with `values` (none: row sums
/// only); with `exclude_self` the queries are the keys and row `i` leaves
/// key `i` out.
pub(crate) fn row_states(
    backend: &dyn Backend,
    kernel: &Kernel,
    queries: &Matrix<'_>,
    (keys, values): (&Matrix<'_>, Option<&Matrix<'_>>),
    exclude_self: bool,
) -> Result<RowStates> {
    let cols = values.map_or(0, Matrix::cols);
    let call = Call::means("row_states", kernel, queries.rows(), cols);
    let sets = values.map(std::slice::from_ref).unwrap_or_default();
    let set = values.map(|_| 0);
    let query = Query {
        exclude_self,
        ..Query::new(kernel, queries)
    };
    backend
        .prepare_call(keys, sets, &call)?
        .row_states(&query, set)
}

/// Local moments (`layout`) of the keys' offsets from each query and of
/// `values` (the layout's `qy` columns; none: no values).
pub(crate) fn local_moments(
    backend: &dyn Backend,
    kernel: &Kernel,
    queries: &Matrix<'_>,
    (keys, values): (&Matrix<'_>, Option<&Matrix<'_>>),
    layout: MomentLayout,
) -> Result<RowNormalized> {
    let call = Call::moments(kernel, queries.rows(), layout);
    let sets = values.map(std::slice::from_ref).unwrap_or_default();
    let set = values.map(|_| 0);
    let pass = Moments { layout, set };
    backend
        .prepare_call(keys, sets, &call)?
        .local_moments(&Query::new(kernel, queries), pass)
}

/// The `k` nearest keys of every query under `metric` (`1 ≤ k ≤ N` and
/// the metric's dimension, checked).
pub(crate) fn knn(
    backend: &dyn Backend,
    queries: &Matrix<'_>,
    keys: &Matrix<'_>,
    k: usize,
    metric: &Metric,
) -> Result<Neighbours> {
    let call = Call::knn(queries.rows(), k, metric);
    backend
        .prepare_call(keys, &[], &call)?
        .knn(queries, k, metric)
}

/// A kernel matrix and, for the normalized modes, its count of empty rows.
pub(crate) fn kernel_matrix(
    backend: &dyn Backend,
    kernel: &Kernel,
    queries: &Matrix<'_>,
    keys: &Matrix<'_>,
    mode: MatrixMode,
) -> Result<(Array2<f32>, usize)> {
    let call = Call::matrix(kernel, queries.rows());
    let m = backend
        .prepare_call(keys, &[], &call)?
        .kernel_matrix(&Query::new(kernel, queries), mode)?;
    Ok((m.values, m.empty_rows))
}
