//! The compiled part of the `locus` Python package (`locus._locus`):
//! thin bindings over the `locus` crate. Inputs arrive as C-contiguous
//! `float32` arrays (the Python layer converts once), are borrowed without
//! a copy, every computation runs with the GIL released, and results are
//! handed to numpy without a copy. Errors become `locus.LocusError` and
//! its subclasses; a panic never crosses into the interpreter.

mod attention;
mod cluster;
mod convert;
mod engine;
mod errors;
mod generate;
mod keyset;
mod ops;
mod results;
mod shard;
mod variable;
mod worker;

use pyo3::prelude::*;

/// Registers the classes and functions.
#[pymodule]
fn _locus(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<engine::Engine>()?;
    m.add_class::<keyset::KeySet>()?;
    m.add_class::<attention::AttentionSet>()?;
    m.add_class::<cluster::MeanShiftParams>()?;
    m.add_function(wrap_pyfunction!(ops::local_mean, m)?)?;
    m.add_function(wrap_pyfunction!(ops::self_local_mean, m)?)?;
    m.add_function(wrap_pyfunction!(ops::local_polynomial, m)?)?;
    m.add_function(wrap_pyfunction!(ops::local_pca, m)?)?;
    m.add_function(wrap_pyfunction!(ops::score, m)?)?;
    m.add_function(wrap_pyfunction!(ops::impute, m)?)?;
    m.add_function(wrap_pyfunction!(ops::kernel_matrix, m)?)?;
    m.add_function(wrap_pyfunction!(ops::laplacian, m)?)?;
    m.add_function(wrap_pyfunction!(ops::log_density, m)?)?;
    m.add_function(wrap_pyfunction!(ops::knn, m)?)?;
    m.add_function(wrap_pyfunction!(ops::kernel_softmax, m)?)?;
    m.add_function(wrap_pyfunction!(ops::feature_local_mean, m)?)?;
    m.add_function(wrap_pyfunction!(cluster::mean_shift, m)?)?;
    m.add_function(wrap_pyfunction!(cluster::medoid_shift, m)?)?;
    m.add_function(wrap_pyfunction!(cluster::estimate_bandwidth, m)?)?;
    m.add_function(wrap_pyfunction!(generate::generate, m)?)?;
    m.add_function(wrap_pyfunction!(cluster::loo_error_per_feature, m)?)?;
    m.add_function(wrap_pyfunction!(cluster::select_bandwidths_per_feature, m)?)?;
    m.add_function(wrap_pyfunction!(variable::log_density_variable, m)?)?;
    m.add_function(wrap_pyfunction!(variable::knn_bandwidths, m)?)?;
    m.add_function(wrap_pyfunction!(variable::local_mean_variable, m)?)?;
    m.add_function(wrap_pyfunction!(variable::balloon_bandwidths, m)?)?;
    m.add_function(wrap_pyfunction!(shard::merge_states, m)?)?;
    m.add_function(wrap_pyfunction!(shard::shift_step, m)?)?;
    m.add_function(wrap_pyfunction!(shard::rank_modes, m)?)?;
    m.add_function(wrap_pyfunction!(shard::neighbour_sq_dists, m)?)?;
    m.add_function(wrap_pyfunction!(shard::check_kernel, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
