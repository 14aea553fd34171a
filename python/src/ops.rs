//! The ops as functions of an engine: borrowed inputs, GIL released,
//! results handed to numpy without a copy.

use locus::{Imputed, LaplacianKind, LocalFit, LocalPca, Neighbours, RowNormalized};
use ndarray::{Array1, Array2, ArrayD, Ix2, Ix3};
use numpy::{IntoPyArray, PyArrayDyn, PyReadonlyArray1, PyReadonlyArray2, PyReadonlyArrayDyn};
use pyo3::prelude::*;

use crate::convert::{AsView, KernelArg, dim, softmax_params};
use crate::engine::Engine;
use crate::errors::{compute, input};
use crate::results::IntoPython;

/// Rows as the ops take them: a C-contiguous `float32` matrix, borrowed.
type Rows<'py> = PyReadonlyArray2<'py, f32>;

/// Per-key weights: a contiguous `float32` vector, borrowed.
type Weights<'py> = PyReadonlyArray1<'py, f32>;

/// The kernel ops, one entry each: the doc, the name, the input arrays
/// (positional; an optional one defaults to `None`), the options
/// (keyword-only, with their defaults), the result the engine returns,
/// and the call that computes it on the engine `e` with the kernel `k`.
/// Every op takes the engine first and the kernel as the keyword `kernel`
/// (a `KernelArg`, checked while the arguments are read); the inputs
/// reach the call as views, and the call runs with the GIL released.
macro_rules! kernel_ops {
    ($(
        $(#[$doc:meta])*
        fn $name:ident(
            $($input:ident: $array:ty $(= $none:tt)?),+
            $(; $($opt:ident: $opt_ty:ty = $default:tt),+)?
        ) -> $result:ty = |$e:ident, $k:ident| $call:expr;
    )+) => {$(
        $(#[$doc])*
        #[pyfunction]
        #[pyo3(signature = (engine, $($input $(= $none)?),+, *, kernel $($(, $opt = $default)+)?))]
        pub(crate) fn $name<'py>(
            py: Python<'py>,
            engine: &Bound<'py, Engine>,
            $($input: $array,)+
            kernel: KernelArg,
            $($($opt: $opt_ty,)+)?
        ) -> PyResult<<$result as IntoPython<'py>>::Output> {
            $(let $input = AsView::view(&$input);)+
            let ($e, $k) = (&engine.get().inner, &*kernel);
            compute(py, || $call).map(|r: $result| r.into_python(py))
        }
    )+};
}

kernel_ops! {
    /// Local means of `values` at `queries` over `keys`; the empty-row count.
    fn local_mean(queries: Rows<'py>, keys: Rows<'py>, values: Rows<'py>)
        -> RowNormalized = |e, k| e.local_mean(k, queries, keys, values);

    /// The self-local mean `K̃X` of `points`; the empty-row count.
    fn self_local_mean(points: Rows<'py>)
        -> RowNormalized = |e, k| e.self_local_mean(k, points);

    /// Local polynomial regression of degree 0 or 1: fitted values, slopes
    /// (`M × q × d`, degree 1 only), empty rows, rank-deficient rows.
    fn local_polynomial(queries: Rows<'py>, keys: Rows<'py>, values: Rows<'py>; degree: usize = 1)
        -> LocalFit = |e, k| e.local_polynomial(k, queries, keys, values, degree);

    /// Local PCA: means, variances (`M × k`), components (`M × k × d`), empty
    /// rows.
    fn local_pca(queries: Rows<'py>, keys: Rows<'py>; components: usize = 1)
        -> LocalPca = |e, k| e.local_pca(k, queries, keys, components);

    /// The score `∇ log f̂` of the keys' kernel density at `queries`; the
    /// empty-row count.
    fn score(queries: Rows<'py>, keys: Rows<'py>)
        -> RowNormalized = |e, k| e.score(k, queries, keys);

    /// Imputation: `queries` (NaN: missing) filled from `keys` (or from
    /// themselves without keys); the filled rows, the count of imputed
    /// entries and of those that took the column mean.
    fn impute(queries: Rows<'py>, keys: Option<Rows<'py>> = None; iterations: usize = 1)
        -> Imputed = |e, k| match keys {
            Some(keys) => e.impute_from(k, queries, keys, iterations),
            None => e.impute(k, queries, iterations),
        };

    /// `K` (or `D⁻¹K` with `normalize`) between `queries` and `keys`; the
    /// empty-row count (0 without `normalize`).
    fn kernel_matrix(queries: Rows<'py>, keys: Rows<'py>; normalize: bool = false)
        -> RowNormalized = |e, k| if normalize {
            e.normalized_kernel_matrix(k, queries, keys)
        } else {
            let values = e.kernel_matrix(k, queries, keys);
            values.map(|values| RowNormalized { values, empty_rows: 0 })
        };

    /// The graph Laplacian `D − K` (or `I − D⁻¹K` with `normalized`) of
    /// `points`.
    fn laplacian(points: Rows<'py>; normalized: bool = false)
        -> Array2<f32> = |e, k| {
            let kind = if normalized {
                LaplacianKind::RandomWalk
            } else {
                LaplacianKind::Unnormalized
            };
            e.laplacian(k, points, kind)
        };

    /// `ln p̂` at `queries` of the KDE on `keys` (optionally weighted).
    fn log_density(queries: Rows<'py>, keys: Rows<'py>, weights: Option<Weights<'py>> = None)
        -> Array1<f64> = |e, k| e.log_density(k, queries, keys, weights);
}

/// Indices (int64) and distances of the `k` nearest `keys` of each query
/// under `metric` (`"euclidean"`, `"manhattan"`, `"minkowski:3"`, …).
#[pyfunction]
#[pyo3(signature = (engine, queries, keys, k, metric = "euclidean"))]
pub(crate) fn knn<'py>(
    py: Python<'py>,
    engine: &Bound<'py, Engine>,
    queries: Rows<'py>,
    keys: Rows<'py>,
    k: usize,
    metric: &str,
) -> PyResult<<Neighbours as IntoPython<'py>>::Output> {
    let metric = crate::convert::metric(py, metric)?;
    let (q, x) = (queries.as_array(), keys.as_array());
    let e = &engine.get().inner;
    compute(py, || e.knn_metric(q, x, k, metric)).map(|nb| nb.into_python(py))
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
