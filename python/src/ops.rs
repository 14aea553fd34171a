//! The ops as functions of an engine: borrowed inputs, GIL released,
//! results handed to numpy without a copy.

use locus::LaplacianKind;
use ndarray::{ArrayD, Ix2, Ix3};
use numpy::{
    IntoPyArray, PyArray1, PyArray2, PyArray3, PyArrayDyn, PyReadonlyArray1, PyReadonlyArray2,
    PyReadonlyArrayDyn,
};
use pyo3::prelude::*;

use crate::convert::{KernelSpec, dim, softmax_params};
use crate::engine::Engine;
use crate::errors::{compute, input};

type Means<'py> = (Bound<'py, PyArray2<f32>>, usize);

/// Local means of `values` at `queries` over `keys`; the empty-row count.
#[pyfunction]
#[pyo3(signature = (engine, queries, keys, values, *, bandwidth = None, kernel = KernelSpec::Name("gaussian".into())))]
pub(crate) fn local_mean<'py>(
    py: Python<'py>,
    engine: &Bound<'py, Engine>,
    queries: PyReadonlyArray2<'py, f32>,
    keys: PyReadonlyArray2<'py, f32>,
    values: PyReadonlyArray2<'py, f32>,
    bandwidth: Option<f64>,
    kernel: KernelSpec,
) -> PyResult<Means<'py>> {
    let k = crate::convert::kernel(py, &kernel, bandwidth)?;
    let (q, x, y) = (queries.as_array(), keys.as_array(), values.as_array());
    let e = &engine.get().inner;
    let r = compute(py, || e.local_mean(&k, q, x, y))?;
    Ok((r.values.into_pyarray(py), r.empty_rows))
}

/// Local polynomial regression of degree 0 or 1: fitted values, slopes
/// (`M × q × d`, degree 1 only), empty rows, rank-deficient rows.
#[pyfunction]
#[pyo3(signature = (engine, queries, keys, values, *, bandwidth = None, kernel = KernelSpec::Name("gaussian".into()), degree = 1))]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
pub(crate) fn local_polynomial<'py>(
    py: Python<'py>,
    engine: &Bound<'py, Engine>,
    queries: PyReadonlyArray2<'py, f32>,
    keys: PyReadonlyArray2<'py, f32>,
    values: PyReadonlyArray2<'py, f32>,
    bandwidth: Option<f64>,
    kernel: KernelSpec,
    degree: usize,
) -> PyResult<(
    Bound<'py, PyArray2<f32>>,
    Option<Bound<'py, PyArray3<f32>>>,
    usize,
    usize,
)> {
    let k = crate::convert::kernel(py, &kernel, bandwidth)?;
    let (q, x, y) = (queries.as_array(), keys.as_array(), values.as_array());
    let e = &engine.get().inner;
    let r = compute(py, || e.local_polynomial(&k, q, x, y, degree))?;
    Ok((
        r.fitted.into_pyarray(py),
        r.slopes.map(|s| s.into_pyarray(py)),
        r.empty_rows,
        r.rank_deficient_rows,
    ))
}

/// Local PCA: means, variances (`M × k`), components (`M × k × d`), empty
/// rows.
#[pyfunction]
#[pyo3(signature = (engine, queries, keys, *, bandwidth = None, kernel = KernelSpec::Name("gaussian".into()), components = 1))]
#[allow(clippy::type_complexity)]
pub(crate) fn local_pca<'py>(
    py: Python<'py>,
    engine: &Bound<'py, Engine>,
    queries: PyReadonlyArray2<'py, f32>,
    keys: PyReadonlyArray2<'py, f32>,
    bandwidth: Option<f64>,
    kernel: KernelSpec,
    components: usize,
) -> PyResult<(
    Bound<'py, PyArray2<f32>>,
    Bound<'py, PyArray2<f32>>,
    Bound<'py, PyArray3<f32>>,
    usize,
)> {
    let k = crate::convert::kernel(py, &kernel, bandwidth)?;
    let (q, x) = (queries.as_array(), keys.as_array());
    let e = &engine.get().inner;
    let r = compute(py, || e.local_pca(&k, q, x, components))?;
    Ok((
        r.means.into_pyarray(py),
        r.variances.into_pyarray(py),
        r.components.into_pyarray(py),
        r.empty_rows,
    ))
}

/// The score `∇ log f̂` of the keys' kernel density at `queries`; the
/// empty-row count.
#[pyfunction]
#[pyo3(signature = (engine, queries, keys, *, bandwidth = None, kernel = KernelSpec::Name("gaussian".into())))]
pub(crate) fn score<'py>(
    py: Python<'py>,
    engine: &Bound<'py, Engine>,
    queries: PyReadonlyArray2<'py, f32>,
    keys: PyReadonlyArray2<'py, f32>,
    bandwidth: Option<f64>,
    kernel: KernelSpec,
) -> PyResult<Means<'py>> {
    let k = crate::convert::kernel(py, &kernel, bandwidth)?;
    let (q, x) = (queries.as_array(), keys.as_array());
    let e = &engine.get().inner;
    let r = compute(py, || e.score(&k, q, x))?;
    Ok((r.values.into_pyarray(py), r.empty_rows))
}

/// Imputation: `queries` (NaN: missing) filled from `keys` (or from
/// themselves without keys); the filled rows, the count of imputed entries
/// and of those that took the column mean.
#[pyfunction]
#[pyo3(signature = (engine, queries, keys = None, *, bandwidth = None, kernel = KernelSpec::Name("gaussian".into()), iterations = 1))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn impute<'py>(
    py: Python<'py>,
    engine: &Bound<'py, Engine>,
    queries: PyReadonlyArray2<'py, f32>,
    keys: Option<PyReadonlyArray2<'py, f32>>,
    bandwidth: Option<f64>,
    kernel: KernelSpec,
    iterations: usize,
) -> PyResult<(Bound<'py, PyArray2<f32>>, usize, usize)> {
    let k = crate::convert::kernel(py, &kernel, bandwidth)?;
    let q = queries.as_array();
    let x = keys.as_ref().map(|k| k.as_array());
    let e = &engine.get().inner;
    let r = compute(py, || match x {
        Some(x) => e.impute_from(&k, q, x, iterations),
        None => e.impute(&k, q, iterations),
    })?;
    Ok((r.values.into_pyarray(py), r.imputed, r.fallback))
}

/// The self-local mean `K̃X` of `points`; the empty-row count.
#[pyfunction]
#[pyo3(signature = (engine, points, *, bandwidth = None, kernel = KernelSpec::Name("gaussian".into())))]
pub(crate) fn self_local_mean<'py>(
    py: Python<'py>,
    engine: &Bound<'py, Engine>,
    points: PyReadonlyArray2<'py, f32>,
    bandwidth: Option<f64>,
    kernel: KernelSpec,
) -> PyResult<Means<'py>> {
    let k = crate::convert::kernel(py, &kernel, bandwidth)?;
    let x = points.as_array();
    let e = &engine.get().inner;
    let r = compute(py, || e.self_local_mean(&k, x))?;
    Ok((r.values.into_pyarray(py), r.empty_rows))
}

/// `K` (or `D⁻¹K` with `normalize`) between `queries` and `keys`; the
/// empty-row count (0 without `normalize`).
#[pyfunction]
#[pyo3(signature = (engine, queries, keys, *, bandwidth = None, kernel = KernelSpec::Name("gaussian".into()), normalize = false))]
pub(crate) fn kernel_matrix<'py>(
    py: Python<'py>,
    engine: &Bound<'py, Engine>,
    queries: PyReadonlyArray2<'py, f32>,
    keys: PyReadonlyArray2<'py, f32>,
    bandwidth: Option<f64>,
    kernel: KernelSpec,
    normalize: bool,
) -> PyResult<Means<'py>> {
    let k = crate::convert::kernel(py, &kernel, bandwidth)?;
    let (q, x) = (queries.as_array(), keys.as_array());
    let e = &engine.get().inner;
    let (m, empty) = compute(py, || {
        if normalize {
            e.normalized_kernel_matrix(&k, q, x)
                .map(|r| (r.values, r.empty_rows))
        } else {
            e.kernel_matrix(&k, q, x).map(|m| (m, 0))
        }
    })?;
    Ok((m.into_pyarray(py), empty))
}

/// The graph Laplacian `D − K` (or `I − D⁻¹K` with `normalized`) of `points`.
#[pyfunction]
#[pyo3(signature = (engine, points, *, bandwidth = None, kernel = KernelSpec::Name("gaussian".into()), normalized = false))]
pub(crate) fn laplacian<'py>(
    py: Python<'py>,
    engine: &Bound<'py, Engine>,
    points: PyReadonlyArray2<'py, f32>,
    bandwidth: Option<f64>,
    kernel: KernelSpec,
    normalized: bool,
) -> PyResult<Bound<'py, PyArray2<f32>>> {
    let k = crate::convert::kernel(py, &kernel, bandwidth)?;
    let x = points.as_array();
    let kind = if normalized {
        LaplacianKind::RandomWalk
    } else {
        LaplacianKind::Unnormalized
    };
    let e = &engine.get().inner;
    Ok(compute(py, || e.laplacian(&k, x, kind))?.into_pyarray(py))
}

/// `ln p̂` at `queries` of the KDE on `keys` (optionally weighted).
#[pyfunction]
#[pyo3(signature = (engine, queries, keys, *, bandwidth = None, kernel = KernelSpec::Name("gaussian".into()), weights = None))]
pub(crate) fn log_density<'py>(
    py: Python<'py>,
    engine: &Bound<'py, Engine>,
    queries: PyReadonlyArray2<'py, f32>,
    keys: PyReadonlyArray2<'py, f32>,
    bandwidth: Option<f64>,
    kernel: KernelSpec,
    weights: Option<PyReadonlyArray1<'py, f32>>,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let k = crate::convert::kernel(py, &kernel, bandwidth)?;
    let (q, x) = (queries.as_array(), keys.as_array());
    let w = weights.as_ref().map(|w| w.as_array());
    let e = &engine.get().inner;
    Ok(compute(py, || e.log_density(&k, q, x, w))?.into_pyarray(py))
}

/// Indices (int64) and distances of the `k` nearest `keys` of each query.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub(crate) fn knn<'py>(
    py: Python<'py>,
    engine: &Bound<'py, Engine>,
    queries: PyReadonlyArray2<'py, f32>,
    keys: PyReadonlyArray2<'py, f32>,
    k: usize,
) -> PyResult<(Bound<'py, PyArray2<i64>>, Bound<'py, PyArray2<f32>>)> {
    let (q, x) = (queries.as_array(), keys.as_array());
    let e = &engine.get().inner;
    let nb = compute(py, || e.knn(q, x, k))?;
    Ok((nb.indices.into_pyarray(py), nb.distances.into_pyarray(py)))
}

/// `softmax(s·ΦΨᵀ)V` for 2-D `(M, d)` or batched 3-D `(B, M, d)` inputs.
#[pyfunction]
#[pyo3(signature = (engine, phi, psi, values, *, scale = None, causal = false))]
pub(crate) fn kernel_softmax<'py>(
    py: Python<'py>,
    engine: &Bound<'py, Engine>,
    phi: PyReadonlyArrayDyn<'py, f32>,
    psi: PyReadonlyArrayDyn<'py, f32>,
    values: PyReadonlyArrayDyn<'py, f32>,
    scale: Option<f64>,
    causal: bool,
) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    let params = softmax_params(scale, causal);
    let (p, k, v) = (phi.as_array(), psi.as_array(), values.as_array());
    same_rank(py, &[p.ndim(), k.ndim(), v.ndim()])?;
    let e = &engine.get().inner;
    let out: ArrayD<f32> = compute(py, || match p.ndim() {
        2 => e
            .kernel_softmax(dim::<Ix2>(&p), dim::<Ix2>(&k), dim::<Ix2>(&v), &params)
            .map(|a| a.into_dyn()),
        _ => e
            .kernel_softmax(dim::<Ix3>(&p), dim::<Ix3>(&k), dim::<Ix3>(&v), &params)
            .map(|a| a.into_dyn()),
    })?;
    Ok(out.into_pyarray(py))
}

/// `(ΦΨᵀV) ⊘ (ΦΨᵀ1)` in linear time, 2-D or batched 3-D; the empty-row count.
#[pyfunction]
#[pyo3(signature = (engine, phi, psi, values, *, causal = false))]
pub(crate) fn feature_local_mean<'py>(
    py: Python<'py>,
    engine: &Bound<'py, Engine>,
    phi: PyReadonlyArrayDyn<'py, f32>,
    psi: PyReadonlyArrayDyn<'py, f32>,
    values: PyReadonlyArrayDyn<'py, f32>,
    causal: bool,
) -> PyResult<(Bound<'py, PyArrayDyn<f32>>, usize)> {
    let (p, k, v) = (phi.as_array(), psi.as_array(), values.as_array());
    same_rank(py, &[p.ndim(), k.ndim(), v.ndim()])?;
    let e = &engine.get().inner;
    let (out, empty): (ArrayD<f32>, usize) = compute(py, || match p.ndim() {
        2 => e
            .feature_local_mean(dim::<Ix2>(&p), dim::<Ix2>(&k), dim::<Ix2>(&v), causal)
            .map(|r| (r.values.into_dyn(), r.empty_rows)),
        _ => e
            .feature_local_mean(dim::<Ix3>(&p), dim::<Ix3>(&k), dim::<Ix3>(&v), causal)
            .map(|r| (r.values.into_dyn(), r.empty_rows)),
    })?;
    Ok((out.into_pyarray(py), empty))
}

/// Checks that phi, psi and values are all 2-D or all 3-D.
fn same_rank(py: Python<'_>, ranks: &[usize]) -> PyResult<()> {
    if !(ranks.iter().all(|&r| r == 2) || ranks.iter().all(|&r| r == 3)) {
        return Err(input(
            py,
            format!(
                "phi, psi and values must all be 2-D (rows × cols) or all 3-D (batch × rows × cols); got {} axes",
                ranks
                    .iter()
                    .map(|r| r.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    Ok(())
}
