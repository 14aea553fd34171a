//! Small conversions at the edge: kernel names and bandwidths.

use locus::{Kernel, Profile};
use pyo3::prelude::*;

use crate::errors::to_py;

/// The kernel `name` (a profile or an alias such as `tophat`, `linear`,
/// `exponential`) with bandwidth `h`, both checked.
pub(crate) fn kernel(py: Python<'_>, name: &str, h: f64) -> PyResult<Kernel> {
    let profile: Profile = name.parse().map_err(|e| to_py(py, &e))?;
    Kernel::new(profile, h as f32).map_err(|e| to_py(py, &e))
}

/// The profile `name`, checked.
pub(crate) fn profile(py: Python<'_>, name: &str) -> PyResult<Profile> {
    name.parse().map_err(|e| to_py(py, &e))
}
