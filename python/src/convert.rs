//! Small conversions at the edge: kernel names, product kernels and
//! bandwidths, softmax parameters, fixed-rank array views.

use locus::{Kernel, Profile, SoftmaxParams};
use pyo3::prelude::*;

use crate::errors::{input, to_py};

/// A kernel as Python passes it: a profile name (with a bandwidth), or a
/// product kernel's blocks `[(dims, profile, bandwidth), …]` (what
/// `locus.ProductKernel` hands over).
#[derive(Debug, FromPyObject)]
pub(crate) enum KernelSpec {
    /// A profile name or alias.
    Name(String),
    /// A product kernel's blocks.
    Blocks(Vec<(usize, String, f64)>),
}

/// The kernel `spec` (a profile or an alias such as `tophat`, `linear`,
/// `exponential`, with bandwidth `h`; or a product kernel's blocks, with no
/// `h`), checked.
pub(crate) fn kernel(py: Python<'_>, spec: &KernelSpec, h: Option<f64>) -> PyResult<Kernel> {
    match (spec, h) {
        (KernelSpec::Name(name), Some(h)) => {
            Kernel::new(profile(py, name)?, h as f32).map_err(|e| to_py(py, &e))
        }
        (KernelSpec::Name(name), None) => {
            Err(input(py, format!("the kernel {name:?} needs a bandwidth")))
        }
        (KernelSpec::Blocks(blocks), None) => {
            let spec = blocks
                .iter()
                .map(|(d, p, h)| Ok((*d, profile(py, p)?, *h as f32)))
                .collect::<PyResult<Vec<_>>>()?;
            Kernel::product(spec).map_err(|e| to_py(py, &e))
        }
        (KernelSpec::Blocks(_), Some(_)) => Err(input(
            py,
            "a product kernel carries its blocks' bandwidths: give no bandwidth with it",
        )),
    }
}

/// The profile `name`, checked.
pub(crate) fn profile(py: Python<'_>, name: &str) -> PyResult<Profile> {
    name.parse().map_err(|e| to_py(py, &e))
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
