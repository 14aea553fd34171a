//! `KeySet`: keys (and values, labels) resident on an engine's backend,
//! queried from many threads.

use locus::{Classification, LocalFit, LocalPca, Neighbours, RowNormalized, RowStates};
use ndarray::Array1;
use numpy::PyReadonlyArray2;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::convert::KernelArg;
use crate::errors::compute;
use crate::results::IntoPython;

/// Keys, values and labels prepared once on an engine's backend; every
/// query method releases the GIL, and concurrent small requests are
/// coalesced into one call (micro-batching).
#[pyclass(module = "locus._locus", frozen)]
pub struct KeySet {
    pub(crate) inner: locus::KeySet,
}

/// The key set's methods: first its kernel queries, one entry each (the
/// doc, the name of the `locus::KeySet` method it calls, its options with
/// their defaults, the result that method returns), each taking `queries`
/// and the keyword `kernel` (a `KernelArg`, checked while the arguments are
/// read) and running with the GIL released; then the other methods as
/// written.
macro_rules! key_set_methods {
    (
        $(
            $(#[$doc:meta])*
            fn $name:ident($($opt:ident: $opt_ty:ty = $default:tt),*) -> $result:ty;
        )+
        others { $($others:tt)* }
    ) => {
        #[pymethods]
        impl KeySet {
            $(
                $(#[$doc])*
                #[pyo3(signature = (queries, *, kernel $(, $opt = $default)*))]
                fn $name<'py>(
                    &self,
                    py: Python<'py>,
                    queries: PyReadonlyArray2<'py, f32>,
                    kernel: KernelArg,
                    $($opt: $opt_ty,)*
                ) -> PyResult<<$result as IntoPython<'py>>::Output> {
                    let q = queries.as_array();
                    compute(py, || self.inner.$name(&kernel, q $(, $opt)*))
                        .map(|r: $result| r.into_python(py))
                }
            )+
            $($others)*
        }
    };
}

key_set_methods! {
    /// Local means of the values at `queries`; the number of empty rows.
    fn local_mean() -> RowNormalized;

    /// Local polynomial regression of the values at `queries`: fitted
    /// values, slopes (degree 1), empty rows, rank-deficient rows.
    fn local_polynomial(degree: usize = 1) -> LocalFit;

    /// Local PCA at `queries`: means, variances, components, empty rows.
    fn local_pca(components: usize = 1) -> LocalPca;

    /// Row states `(max_log_weight, sum, weighted)` of `queries`.
    fn row_states() -> RowStates;

    /// `ln p̂(q)` per query.
    fn log_density() -> Array1<f64>;

    /// `p̂(q)` per query.
    fn density() -> Array1<f64>;

    /// Class probabilities (`M × C`) and the number of empty rows.
    fn predict_proba() -> RowNormalized;

    /// Class indices (−1 for an empty neighbourhood), probabilities, and
    /// the number of empty rows.
    fn classify() -> Classification;

    others {
        /// Indices (`M × k`, int64) and distances (`M × k`) of the `k`
        /// nearest keys under `metric` (`"euclidean"`, `"minkowski:3"`, …).
        #[pyo3(signature = (queries, k, metric = "euclidean"))]
        fn knn<'py>(
            &self,
            py: Python<'py>,
            queries: PyReadonlyArray2<'py, f32>,
            k: usize,
            metric: &str,
        ) -> PyResult<<Neighbours as IntoPython<'py>>::Output> {
            let metric = crate::convert::metric(py, metric)?;
            let q = queries.as_array();
            compute(py, || self.inner.knn_metric(q, k, metric)).map(|nb| nb.into_python(py))
        }

        /// Local means of the values at `queries` under the per-key
        /// bandwidths the set was prepared with; the number of empty rows.
        #[pyo3(signature = (queries, *, profile = "gaussian"))]
        fn local_mean_variable<'py>(
            &self,
            py: Python<'py>,
            queries: PyReadonlyArray2<'py, f32>,
            profile: &str,
        ) -> PyResult<<RowNormalized as IntoPython<'py>>::Output> {
            let p = crate::convert::profile(py, profile)?;
            let q = queries.as_array();
            compute(py, || self.inner.local_mean_variable(p, q)).map(|r| r.into_python(py))
        }

        /// `ln p̂` at `queries` under the per-key bandwidths the set was
        /// prepared with.
        #[pyo3(signature = (queries, *, profile = "gaussian"))]
        fn log_density_variable<'py>(
            &self,
            py: Python<'py>,
            queries: PyReadonlyArray2<'py, f32>,
            profile: &str,
        ) -> PyResult<<Array1<f64> as IntoPython<'py>>::Output> {
            let p = crate::convert::profile(py, profile)?;
            let q = queries.as_array();
            compute(py, || self.inner.log_density_variable(p, q)).map(|r| r.into_python(py))
        }

        /// The per-key bandwidths the set was prepared with, if any.
        #[getter]
        fn bandwidths<'py>(&self, py: Python<'py>) -> Option<Bound<'py, numpy::PyArray1<f32>>> {
            self.inner
                .bandwidths()
                .map(|h| numpy::IntoPyArray::into_pyarray(h.to_owned(), py))
        }

        /// Number of keys.
        #[getter]
        fn rows(&self) -> usize {
            self.inner.rows()
        }

        /// Dimension of keys and queries.
        #[getter]
        fn dim(&self) -> usize {
            self.inner.dim()
        }

        /// Value columns, or None without values.
        #[getter]
        fn value_cols(&self) -> Option<usize> {
            self.inner.value_cols()
        }

        /// Bytes the backend holds for this key set.
        #[getter]
        fn resident_bytes(&self) -> u64 {
            self.inner.resident_bytes()
        }

        /// How requests were served: `direct`, `batches`, `batched_requests`,
        /// `largest_batch`, `retried_alone`.
        fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
            let s = self.inner.stats();
            let d = PyDict::new(py);
            d.set_item("direct", s.direct)?;
            d.set_item("batches", s.batches)?;
            d.set_item("batched_requests", s.batched_requests)?;
            d.set_item("largest_batch", s.largest_batch)?;
            d.set_item("retried_alone", s.retried_alone)?;
            Ok(d)
        }

        fn __repr__(&self) -> String {
            format!(
                "KeySet(rows={}, dim={}, value_cols={:?}, classes={:?}, backend={})",
                self.inner.rows(),
                self.inner.dim(),
                self.inner.value_cols(),
                self.inner.classes(),
                self.inner.engine().backend().kind()
            )
        }
    }
}
