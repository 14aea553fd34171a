//! Variable bandwidths: sample-point (per-key) and balloon (per-query)
//! log densities, and the k-nearest-neighbour bandwidth rule.

use locus::{RowNormalized, VariableBandwidth};
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1, PyReadonlyArray2};
use pyo3::prelude::*;

use crate::engine::Engine;
use crate::errors::compute;
use crate::results::IntoPython;

/// `ln p̂` at the queries with one bandwidth per key (`per_query`: per
/// query), each kernel normalized by its own bandwidth.
#[pyfunction]
#[pyo3(signature = (engine, queries, keys, bandwidths, *, profile = "gaussian", per_query = false))]
pub(crate) fn log_density_variable<'py>(
    py: Python<'py>,
    engine: &Bound<'py, Engine>,
    queries: PyReadonlyArray2<'py, f32>,
    keys: PyReadonlyArray2<'py, f32>,
    bandwidths: PyReadonlyArray1<'py, f32>,
    profile: &str,
    per_query: bool,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let p = crate::convert::profile(py, profile)?;
    let bw = variable(bandwidths, per_query);
    let (q, x) = (queries.as_array(), keys.as_array());
    let e = &engine.get().inner;
    let out = compute(py, || e.log_density_variable(p, &bw, q, x))?;
    Ok(out.into_pyarray(py))
}

/// Local means of `values` at the queries with one bandwidth per key
/// (`per_query`: per query), and the number of empty rows.
#[pyfunction]
#[pyo3(signature = (engine, queries, keys, values, bandwidths, *, profile = "gaussian", per_query = false))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn local_mean_variable<'py>(
    py: Python<'py>,
    engine: &Bound<'py, Engine>,
    queries: PyReadonlyArray2<'py, f32>,
    keys: PyReadonlyArray2<'py, f32>,
    values: PyReadonlyArray2<'py, f32>,
    bandwidths: PyReadonlyArray1<'py, f32>,
    profile: &str,
    per_query: bool,
) -> PyResult<<RowNormalized as IntoPython<'py>>::Output> {
    let p = crate::convert::profile(py, profile)?;
    let bw = variable(bandwidths, per_query);
    let (q, x, y) = (queries.as_array(), keys.as_array(), values.as_array());
    let e = &engine.get().inner;
    let out = compute(py, || e.local_mean_variable(p, &bw, q, x, y))?;
    Ok(out.into_python(py))
}

/// Per-key bandwidths, or per-query ones.
fn variable(h: PyReadonlyArray1<'_, f32>, per_query: bool) -> VariableBandwidth {
    let h = h.as_array().to_vec();
    if per_query {
        VariableBandwidth::PerQuery(h)
    } else {
        VariableBandwidth::PerKey(h)
    }
}

/// Per-query (balloon) bandwidths by the k-NN rule: `alpha` times the
/// distance from each query to its `k`-th nearest key.
#[pyfunction]
#[pyo3(signature = (engine, queries, keys, k, alpha = 1.0))]
pub(crate) fn balloon_bandwidths<'py>(
    py: Python<'py>,
    engine: &Bound<'py, Engine>,
    queries: PyReadonlyArray2<'py, f32>,
    keys: PyReadonlyArray2<'py, f32>,
    k: usize,
    alpha: f32,
) -> PyResult<Bound<'py, PyArray1<f32>>> {
    let (q, x) = (queries.as_array(), keys.as_array());
    let e = &engine.get().inner;
    let h = compute(py, || e.balloon_bandwidths(q, x, k, alpha))?;
    Ok(h.into_pyarray(py))
}

/// `h_j = alpha·r_k(j)`: the distance from each point to its `k`-th
/// nearest other point, times `alpha`.
#[pyfunction]
#[pyo3(signature = (engine, points, k, alpha = 1.0))]
pub(crate) fn knn_bandwidths<'py>(
    py: Python<'py>,
    engine: &Bound<'py, Engine>,
    points: PyReadonlyArray2<'py, f32>,
    k: usize,
    alpha: f32,
) -> PyResult<Bound<'py, PyArray1<f32>>> {
    let x = points.as_array();
    let e = &engine.get().inner;
    let h = compute(py, || e.knn_bandwidths(x, k, alpha))?;
    Ok(h.into_pyarray(py))
}
