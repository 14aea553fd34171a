//! `KeySet`: keys (and values, labels) resident on an engine's backend,
//! queried from many threads.

use numpy::{IntoPyArray, PyArray1, PyArray2, PyArray3, PyReadonlyArray2};
use pyo3::prelude::*;

use crate::convert::KernelSpec;
use pyo3::types::PyDict;

use crate::errors::compute;

/// Keys, values and labels prepared once on an engine's backend; every
/// query method releases the GIL, and concurrent small requests are
/// coalesced into one call (micro-batching).
#[pyclass(module = "locus._locus", frozen)]
pub struct KeySet {
    pub(crate) inner: locus::KeySet,
}

type Means<'py> = (Bound<'py, PyArray2<f32>>, usize);

#[pymethods]
impl KeySet {
    /// Local means of the values at `queries`; the number of empty rows.
    #[pyo3(signature = (queries, *, bandwidth = None, kernel = KernelSpec::Name("gaussian".into())))]
    fn local_mean<'py>(
        &self,
        py: Python<'py>,
        queries: PyReadonlyArray2<'py, f32>,
        bandwidth: Option<f64>,
        kernel: KernelSpec,
    ) -> PyResult<Means<'py>> {
        let k = crate::convert::kernel(py, &kernel, bandwidth)?;
        let q = queries.as_array();
        let r = compute(py, || self.inner.local_mean(&k, q))?;
        Ok((r.values.into_pyarray(py), r.empty_rows))
    }

    /// Local polynomial regression of the values at `queries`: fitted
    /// values, slopes (degree 1), empty rows, rank-deficient rows.
    #[pyo3(signature = (queries, *, bandwidth = None, kernel = KernelSpec::Name("gaussian".into()), degree = 1))]
    #[allow(clippy::type_complexity)]
    fn local_polynomial<'py>(
        &self,
        py: Python<'py>,
        queries: PyReadonlyArray2<'py, f32>,
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
        let q = queries.as_array();
        let r = compute(py, || self.inner.local_polynomial(&k, q, degree))?;
        Ok((
            r.fitted.into_pyarray(py),
            r.slopes.map(|s| s.into_pyarray(py)),
            r.empty_rows,
            r.rank_deficient_rows,
        ))
    }

    /// Local PCA at `queries`: means, variances, components, empty rows.
    #[pyo3(signature = (queries, *, bandwidth = None, kernel = KernelSpec::Name("gaussian".into()), components = 1))]
    #[allow(clippy::type_complexity)]
    fn local_pca<'py>(
        &self,
        py: Python<'py>,
        queries: PyReadonlyArray2<'py, f32>,
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
        let q = queries.as_array();
        let r = compute(py, || self.inner.local_pca(&k, q, components))?;
        Ok((
            r.means.into_pyarray(py),
            r.variances.into_pyarray(py),
            r.components.into_pyarray(py),
            r.empty_rows,
        ))
    }

    /// Row states `(max_log_weight, sum, weighted)` of `queries`.
    #[pyo3(signature = (queries, *, bandwidth = None, kernel = KernelSpec::Name("gaussian".into())))]
    #[allow(clippy::type_complexity)]
    fn row_states<'py>(
        &self,
        py: Python<'py>,
        queries: PyReadonlyArray2<'py, f32>,
        bandwidth: Option<f64>,
        kernel: KernelSpec,
    ) -> PyResult<(
        Bound<'py, PyArray1<f32>>,
        Bound<'py, PyArray1<f64>>,
        Bound<'py, PyArray2<f64>>,
    )> {
        let k = crate::convert::kernel(py, &kernel, bandwidth)?;
        let q = queries.as_array();
        let s = compute(py, || self.inner.row_states(&k, q))?;
        Ok((
            s.max_log_weight.into_pyarray(py),
            s.sum.into_pyarray(py),
            s.weighted.into_pyarray(py),
        ))
    }

    /// `ln p̂(q)` per query.
    #[pyo3(signature = (queries, *, bandwidth = None, kernel = KernelSpec::Name("gaussian".into())))]
    fn log_density<'py>(
        &self,
        py: Python<'py>,
        queries: PyReadonlyArray2<'py, f32>,
        bandwidth: Option<f64>,
        kernel: KernelSpec,
    ) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let k = crate::convert::kernel(py, &kernel, bandwidth)?;
        let q = queries.as_array();
        Ok(compute(py, || self.inner.log_density(&k, q))?.into_pyarray(py))
    }

    /// `p̂(q)` per query.
    #[pyo3(signature = (queries, *, bandwidth = None, kernel = KernelSpec::Name("gaussian".into())))]
    fn density<'py>(
        &self,
        py: Python<'py>,
        queries: PyReadonlyArray2<'py, f32>,
        bandwidth: Option<f64>,
        kernel: KernelSpec,
    ) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let k = crate::convert::kernel(py, &kernel, bandwidth)?;
        let q = queries.as_array();
        Ok(compute(py, || self.inner.density(&k, q))?.into_pyarray(py))
    }

    /// Class probabilities (`M × C`) and the number of empty rows.
    #[pyo3(signature = (queries, *, bandwidth = None, kernel = KernelSpec::Name("gaussian".into())))]
    fn predict_proba<'py>(
        &self,
        py: Python<'py>,
        queries: PyReadonlyArray2<'py, f32>,
        bandwidth: Option<f64>,
        kernel: KernelSpec,
    ) -> PyResult<Means<'py>> {
        let k = crate::convert::kernel(py, &kernel, bandwidth)?;
        let q = queries.as_array();
        let r = compute(py, || self.inner.predict_proba(&k, q))?;
        Ok((r.values.into_pyarray(py), r.empty_rows))
    }

    /// Class indices (−1 for an empty neighbourhood), probabilities, and
    /// the number of empty rows.
    #[pyo3(signature = (queries, *, bandwidth = None, kernel = KernelSpec::Name("gaussian".into())))]
    #[allow(clippy::type_complexity)]
    fn classify<'py>(
        &self,
        py: Python<'py>,
        queries: PyReadonlyArray2<'py, f32>,
        bandwidth: Option<f64>,
        kernel: KernelSpec,
    ) -> PyResult<(Bound<'py, PyArray1<i64>>, Bound<'py, PyArray2<f32>>, usize)> {
        let k = crate::convert::kernel(py, &kernel, bandwidth)?;
        let q = queries.as_array();
        let c = compute(py, || self.inner.classify(&k, q))?;
        Ok((
            c.labels.into_pyarray(py),
            c.proba.into_pyarray(py),
            c.empty_rows,
        ))
    }

    /// Indices (`M × k`, int64) and distances (`M × k`) of the `k`
    /// nearest keys.
    #[allow(clippy::type_complexity)]
    fn knn<'py>(
        &self,
        py: Python<'py>,
        queries: PyReadonlyArray2<'py, f32>,
        k: usize,
    ) -> PyResult<(Bound<'py, PyArray2<i64>>, Bound<'py, PyArray2<f32>>)> {
        let q = queries.as_array();
        let nb = compute(py, || self.inner.knn(q, k))?;
        Ok((nb.indices.into_pyarray(py), nb.distances.into_pyarray(py)))
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
