//! Conversions at the edge, from Python: kernels (checked while the
//! arguments are read), borrowed arrays as the views the engine reads,
//! softmax parameters, fixed-rank array views.

use std::ops::Deref;

use locus::{Kernel, Metric, Profile, SoftmaxParams};
use ndarray::{ArrayView, Dimension};
use numpy::PyReadonlyArray;
use pyo3::prelude::*;

use crate::errors::to_py;

/// A product kernel's block as Python passes it: `(dims, profile,
/// bandwidth)` (what `locus.ProductKernel` hands over).
pub(crate) type Block = (usize, String, f64);

/// A kernel as the ops take it, checked while the arguments are read:
/// `(profile, bandwidth)`, the profile a name or an alias such as
/// `tophat`, `linear`, `exponential`; or a product kernel's blocks
/// `[(dims, profile, bandwidth), …]`. Dereferences to the checked kernel.
pub(crate) struct KernelArg(Kernel);

/// [`KernelArg`] as given, before the check.
#[derive(FromPyObject)]
enum KernelParts {
    /// A profile, its bandwidth and a metric (a name as `Metric`'s
    /// `FromStr` takes it: `"manhattan"`, `"minkowski:3"`, …).
    WithMetric(String, f64, String),
    /// A profile and its bandwidth.
    Radial(String, f64),
    /// A product kernel's blocks.
    Product(Vec<Block>),
}

impl<'a, 'py> FromPyObject<'a, 'py> for KernelArg {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let py = obj.py();
        match obj.extract::<KernelParts>()? {
            KernelParts::Radial(name, h) => Kernel::new(profile(py, &name)?, h as f32)
                .map(KernelArg)
                .map_err(|e| to_py(py, &e)),
            KernelParts::WithMetric(name, h, m) => {
                let kernel =
                    Kernel::new(profile(py, &name)?, h as f32).map_err(|e| to_py(py, &e))?;
                kernel
                    .with_metric(metric(py, &m)?)
                    .map(KernelArg)
                    .map_err(|e| to_py(py, &e))
            }
            KernelParts::Product(blocks) => product(py, &blocks).map(KernelArg),
        }
    }
}

impl Deref for KernelArg {
    type Target = Kernel;

    fn deref(&self) -> &Kernel {
        &self.0
    }
}

/// The product kernel of `blocks`, checked.
pub(crate) fn product(py: Python<'_>, blocks: &[Block]) -> PyResult<Kernel> {
    let spec = blocks
        .iter()
        .map(|(d, p, h)| Ok((*d, profile(py, p)?, *h as f32)))
        .collect::<PyResult<Vec<_>>>()?;
    Kernel::product(spec).map_err(|e| to_py(py, &e))
}

/// The metric `spec` (`"manhattan"`, `"minkowski:3"`, …), checked.
pub(crate) fn metric(py: Python<'_>, spec: &str) -> PyResult<Metric> {
    spec.parse().map_err(|e| to_py(py, &e))
}

/// The profile `name`, checked.
pub(crate) fn profile(py: Python<'_>, name: &str) -> PyResult<Profile> {
    name.parse().map_err(|e| to_py(py, &e))
}

/// A borrowed numpy input as the view the engine reads: the view, not the
/// array, crosses into the computation that runs with the GIL released.
pub(crate) trait AsView<'a> {
    /// The view (`Option` of one for an optional input).
    type View: Send;

    /// The view of `self`.
    fn view(&'a self) -> Self::View;
}

impl<'a, D: Dimension> AsView<'a> for PyReadonlyArray<'_, f32, D> {
    type View = ArrayView<'a, f32, D>;

    fn view(&'a self) -> Self::View {
        self.as_array()
    }
}

impl<'a, T: AsView<'a>> AsView<'a> for Option<T> {
    type View = Option<T::View>;

    fn view(&'a self) -> Self::View {
        self.as_ref().map(AsView::view)
    }
}

/// Softmax parameters from Python's `scale` (None: 1/√d) and `causal`.
pub(crate) fn softmax_params(scale: Option<f64>, causal: bool) -> SoftmaxParams {
    let params = SoftmaxParams::new().with_causal(causal);
    match scale {
        Some(s) => params.with_scale(s as f32),
        None => params,
    }
}

/// A view of rank `D`; the caller checked the rank (all inputs of one
/// rank, or a match on `ndim`).
pub(crate) fn dim<'a, D: ndarray::Dimension>(
    a: &ndarray::ArrayViewD<'a, f32>,
) -> ndarray::ArrayView<'a, f32, D> {
    a.clone()
        .into_dimensionality::<D>()
        .expect("rank checked by the caller") // ok: the callers check the rank first
}

/// An owned, row-major copy of `view` (a fallible `to_owned`): a
/// `LocusMemoryError` naming `op` and `what` when it cannot be allocated,
/// never an abort.
pub(crate) fn owned<T: Clone, D: Dimension>(
    py: Python<'_>,
    (op, what): (&'static str, &'static str),
    view: ArrayView<'_, T, D>,
) -> PyResult<ndarray::Array<T, D>> {
    let mut v = Vec::new();
    if v.try_reserve_exact(view.len()).is_err() {
        let bytes = (view.len() as u64).saturating_mul(std::mem::size_of::<T>() as u64);
        return Err(to_py(py, &locus::Error::TooLarge { op, what, bytes }));
    }
    v.extend(view.iter().cloned());
    Ok(ndarray::Array::from_shape_vec(view.raw_dim(), v).expect("the view's length")) // ok: view.len() entries
}
