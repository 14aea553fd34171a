//! `AttentionSet`: attention keys and values prepared once on an engine's
//! backend, attended to by many query batches.

use ndarray::{ArrayD, Ix2, Ix3};
use numpy::{IntoPyArray, PyArrayDyn, PyReadonlyArrayDyn};
use pyo3::prelude::*;

use crate::convert::{dim, softmax_params};
use crate::errors::{compute, input};

/// Keys `Ψ` and values `V` (2-D, or batched 3-D) kept on the backend;
/// `attend` computes `softmax(scale·ΦΨᵀ)V` for new queries with the GIL
/// released.
#[pyclass(module = "locus._locus", frozen)]
pub struct AttentionSet {
    pub(crate) inner: locus::AttentionSet,
}

#[pymethods]
impl AttentionSet {
    /// `softmax(scale·ΦΨᵀ)V` of `phi` (`(M, d)` or `(B, M, d)`) against
    /// the prepared keys and values.
    #[pyo3(signature = (phi, *, scale = None, causal = false))]
    fn attend<'py>(
        &self,
        py: Python<'py>,
        phi: PyReadonlyArrayDyn<'py, f32>,
        scale: Option<f64>,
        causal: bool,
    ) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
        let params = softmax_params(scale, causal);
        let p = phi.as_array();
        let set = &self.inner;
        let out: ArrayD<f32> = match p.ndim() {
            2 => compute(py, || {
                set.attend(dim::<Ix2>(&p), &params).map(|a| a.into_dyn())
            })?,
            3 => compute(py, || {
                set.attend(dim::<Ix3>(&p), &params).map(|a| a.into_dyn())
            })?,
            n => {
                return Err(input(
                    py,
                    format!("phi must be 2-D (M × d) or 3-D (B × M × d); got {n} axes"),
                ));
            }
        };
        Ok(out.into_pyarray(py))
    }

    /// Batches B.
    #[getter]
    fn batches(&self) -> usize {
        self.inner.batches()
    }

    /// Keys per batch N.
    #[getter]
    fn keys(&self) -> usize {
        self.inner.keys()
    }

    /// Feature dimension d.
    #[getter]
    fn dim(&self) -> usize {
        self.inner.dim()
    }

    /// Value columns q.
    #[getter]
    fn value_cols(&self) -> usize {
        self.inner.value_cols()
    }

    /// Bytes the backend holds for the keys and values.
    #[getter]
    fn resident_bytes(&self) -> u64 {
        self.inner.bytes()
    }

    fn __repr__(&self) -> String {
        format!(
            "AttentionSet(batches={}, keys={}, dim={}, value_cols={})",
            self.inner.batches(),
            self.inner.keys(),
            self.inner.dim(),
            self.inner.value_cols()
        )
    }
}
