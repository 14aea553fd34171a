//! MeanShift, MedoidShift and the bandwidth estimate.

use locus::{Bandwidth, MeanShiftParams, MedoidShiftParams, Seeds};
use numpy::{IntoPyArray, PyReadonlyArray2};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::convert::{KernelSpec, profile};
use crate::engine::Engine;
use crate::errors::{compute, input, to_py};

/// The bandwidth rule: a fixed `bandwidth`, or `rule` ("quantile" with
/// `quantile` and `n_samples`, "scott", "silverman").
fn rule(
    py: Python<'_>,
    bandwidth: Option<f64>,
    rule: &str,
    quantile: f64,
    n_samples: Option<usize>,
) -> PyResult<Bandwidth> {
    if let Some(h) = bandwidth {
        return Ok(Bandwidth::Fixed(h as f32));
    }
    match rule {
        "quantile" => Ok(Bandwidth::Quantile {
            quantile,
            n_samples,
        }),
        "scott" => Ok(Bandwidth::Scott),
        "silverman" => Ok(Bandwidth::Silverman),
        other => Err(input(
            py,
            format!(
                "bandwidth_rule must be \"quantile\", \"scott\" or \"silverman\", got {other:?}"
            ),
        )),
    }
}

/// MeanShift of `points`; a dict with `modes`, `labels`, `populations`,
/// `iterations`, `converged`, `bandwidth`.
#[pyfunction]
#[pyo3(signature = (
    engine, points, *, bandwidth = None, bandwidth_rule = "quantile", quantile = 0.3,
    n_samples = None, kernel = KernelSpec::Name("uniform".into()), seeds = None,
    bin_seeding = false, min_bin_freq = 1, max_iter = 300, tol = 1e-3, blurring = false,
    cluster_all = true
))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn mean_shift<'py>(
    py: Python<'py>,
    engine: &Bound<'py, Engine>,
    points: PyReadonlyArray2<'py, f32>,
    bandwidth: Option<f64>,
    bandwidth_rule: &str,
    quantile: f64,
    n_samples: Option<usize>,
    kernel: KernelSpec,
    seeds: Option<PyReadonlyArray2<'py, f32>>,
    bin_seeding: bool,
    min_bin_freq: usize,
    max_iter: usize,
    tol: f64,
    blurring: bool,
    cluster_all: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let seeds = match (seeds, bin_seeding) {
        (Some(s), _) => Seeds::Given(s.as_array().to_owned()),
        (None, true) => Seeds::Binned { min_bin_freq },
        (None, false) => Seeds::All,
    };
    let base = match &kernel {
        KernelSpec::Name(name) => MeanShiftParams::new()
            .profile(profile(py, name)?)
            .bandwidth_rule(rule(py, bandwidth, bandwidth_rule, quantile, n_samples)?),
        // Joint MeanShift: the blocks carry the bandwidths.
        KernelSpec::Blocks(_) => {
            MeanShiftParams::new().kernel(crate::convert::kernel(py, &kernel, bandwidth)?)
        }
    };
    let params = base
        .seeds(seeds)
        .max_iter(max_iter)
        .tol(tol)
        .blurring(blurring)
        .cluster_all(cluster_all)
        .check()
        .map_err(|e| to_py(py, &e))?;
    let x = points.as_array();
    let e = &engine.get().inner;
    let fit = compute(py, || e.mean_shift(&params, x))?;
    let d = PyDict::new(py);
    d.set_item("modes", fit.modes.into_pyarray(py))?;
    d.set_item("labels", fit.labels.into_pyarray(py))?;
    d.set_item("populations", fit.populations.into_pyarray(py))?;
    d.set_item("iterations", fit.iterations)?;
    d.set_item("converged", fit.converged)?;
    d.set_item("bandwidth", fit.bandwidth)?;
    Ok(d)
}

/// MedoidShift of `points` (or of a distance matrix with `distances`); a
/// dict with `medoids`, `modes`, `labels`, `populations`, `iterations`,
/// `converged`, `bandwidth`.
#[pyfunction]
#[pyo3(signature = (
    engine, points, *, bandwidth = None, bandwidth_rule = "quantile", quantile = 0.3,
    n_samples = None, kernel = KernelSpec::Name("gaussian".into()), max_iter = 300,
    distances = false
))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn medoid_shift<'py>(
    py: Python<'py>,
    engine: &Bound<'py, Engine>,
    points: PyReadonlyArray2<'py, f32>,
    bandwidth: Option<f64>,
    bandwidth_rule: &str,
    quantile: f64,
    n_samples: Option<usize>,
    kernel: KernelSpec,
    max_iter: usize,
    distances: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let base = match &kernel {
        KernelSpec::Name(name) => MedoidShiftParams::new()
            .profile(profile(py, name)?)
            .bandwidth_rule(rule(py, bandwidth, bandwidth_rule, quantile, n_samples)?),
        KernelSpec::Blocks(_) => {
            MedoidShiftParams::new().kernel(crate::convert::kernel(py, &kernel, bandwidth)?)
        }
    };
    let params = base.max_iter(max_iter).check().map_err(|e| to_py(py, &e))?;
    let x = points.as_array();
    let e = &engine.get().inner;
    let fit = compute(py, || {
        if distances {
            e.medoid_shift_distances(&params, x)
        } else {
            e.medoid_shift(&params, x)
        }
    })?;
    let d = PyDict::new(py);
    let medoids: Vec<i64> = fit.medoids.iter().map(|&m| m as i64).collect();
    d.set_item("medoids", medoids.into_pyarray(py))?;
    d.set_item("modes", fit.modes.into_pyarray(py))?;
    d.set_item("labels", fit.labels.into_pyarray(py))?;
    d.set_item("populations", fit.populations.into_pyarray(py))?;
    d.set_item("iterations", fit.iterations)?;
    d.set_item("converged", fit.converged)?;
    d.set_item("bandwidth", fit.bandwidth)?;
    Ok(d)
}

/// scikit-learn's `estimate_bandwidth`: mean distance to the k-th nearest
/// neighbour, `k = max(1, ⌊quantile·n⌋)`, on `n_samples` points if given.
#[pyfunction]
#[pyo3(signature = (engine, points, *, quantile = 0.3, n_samples = None))]
pub(crate) fn estimate_bandwidth<'py>(
    py: Python<'py>,
    engine: &Bound<'py, Engine>,
    points: PyReadonlyArray2<'py, f32>,
    quantile: f64,
    n_samples: Option<usize>,
) -> PyResult<f32> {
    let x = points.as_array();
    let e = &engine.get().inner;
    compute(py, || e.estimate_bandwidth(x, quantile, n_samples))
}
