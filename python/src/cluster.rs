//! MeanShift, MedoidShift and the bandwidth estimates (the quantile rule,
//! leave-one-out per-feature bandwidths).

use locus::{
    AdaptiveBandwidth, Bandwidth, Kernel, MeanShiftFit, MeanShiftValidParams, MedoidShiftFit,
    Profile, Seeds,
};
use numpy::{PyReadonlyArray1, PyReadonlyArray2};
use pyo3::prelude::*;

use crate::convert::{Block, owned, product, profile};
use crate::engine::Engine;
use crate::errors::{compute, input, to_py};
use crate::results::IntoPython;

/// The kernel of MeanShift and MedoidShift as Python passes it:
/// `(profile, bandwidth rule)`, or a product kernel's blocks
/// `[(dims, profile, bandwidth), …]`, which carry their bandwidths.
#[derive(FromPyObject)]
pub(crate) enum ShiftKernel {
    /// A profile and its bandwidth rule.
    Radial(String, BandwidthRule),
    /// A product kernel's blocks.
    Product(Vec<Block>),
}

/// A [`ShiftKernel`], checked.
enum CheckedShiftKernel {
    /// A profile and its bandwidth rule.
    Radial(Profile, Bandwidth),
    /// A product kernel.
    Product(Kernel),
}

impl ShiftKernel {
    /// The kernel, checked.
    fn checked(self, py: Python<'_>) -> PyResult<CheckedShiftKernel> {
        Ok(match self {
            ShiftKernel::Radial(name, rule) => {
                CheckedShiftKernel::Radial(profile(py, &name)?, rule.checked(py)?)
            }
            ShiftKernel::Product(blocks) => CheckedShiftKernel::Product(product(py, &blocks)?),
        })
    }
}

/// A bandwidth rule as Python passes it: a number (fixed), `"scott"` or
/// `"silverman"`, or `(quantile, n_samples)`: scikit-learn's estimate.
#[derive(FromPyObject)]
pub(crate) enum BandwidthRule {
    /// A fixed bandwidth.
    Fixed(f64),
    /// A rule by its name.
    Named(String),
    /// The mean distance to the k-th neighbour, `k = ⌊quantile·n⌋`, on
    /// `n_samples` points if given.
    Quantile(f64, Option<usize>),
}

impl BandwidthRule {
    /// The rule, checked.
    fn checked(self, py: Python<'_>) -> PyResult<Bandwidth> {
        match self {
            BandwidthRule::Fixed(h) => Ok(Bandwidth::Fixed(h as f32)),
            BandwidthRule::Quantile(quantile, n_samples) => Ok(Bandwidth::Quantile {
                quantile,
                n_samples,
            }),
            BandwidthRule::Named(name) => match name.as_str() {
                "scott" => Ok(Bandwidth::Scott),
                "silverman" => Ok(Bandwidth::Silverman),
                other => Err(input(
                    py,
                    format!("bandwidth rule must be \"scott\" or \"silverman\", got {other:?}"),
                )),
            },
        }
    }
}

/// MeanShift's seeds as Python passes them: the seeds themselves, or the
/// `min_bin_freq` of binned seeding (`None`: every point is a seed).
#[derive(FromPyObject)]
enum SeedsArg<'py> {
    /// These seeds.
    Given(PyReadonlyArray2<'py, f32>),
    /// Binned seeding, keeping bins of at least this many points.
    Binned(usize),
}

/// MeanShift's parameters, checked once: the kernel with its bandwidth
/// rule, the seeds, `max_iter`, `tol`, `blurring` and `cluster_all`.
#[pyclass(module = "locus._locus", frozen)]
pub struct MeanShiftParams {
    inner: MeanShiftValidParams,
}

#[pymethods]
impl MeanShiftParams {
    /// Checks MeanShift's parameters.
    #[new]
    #[pyo3(signature = (
        kernel, *, seeds = None, max_iter = 300, tol = 1e-3, blurring = false, cluster_all = true,
        bandwidths = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        kernel: ShiftKernel,
        seeds: Option<SeedsArg<'_>>,
        max_iter: usize,
        tol: f64,
        blurring: bool,
        cluster_all: bool,
        bandwidths: Option<PyReadonlyArray1<'_, f32>>,
    ) -> PyResult<Self> {
        let base = match kernel.checked(py)? {
            CheckedShiftKernel::Radial(p, rule) => locus::MeanShiftParams::new()
                .profile(p)
                .bandwidth_rule(rule),
            CheckedShiftKernel::Product(k) => locus::MeanShiftParams::new().kernel(k),
        };
        // Per-point bandwidths replace the kernel's bandwidth rule.
        let base = match bandwidths {
            Some(h) => base.adaptive_bandwidth(AdaptiveBandwidth::PerPoint(h.as_array().to_vec())),
            None => base,
        };
        let seeds = match seeds {
            Some(SeedsArg::Given(s)) => {
                Seeds::Given(owned(py, ("mean_shift", "seeds"), s.as_array())?)
            }
            Some(SeedsArg::Binned(min_bin_freq)) => Seeds::Binned { min_bin_freq },
            None => Seeds::All,
        };
        let inner = base
            .seeds(seeds)
            .max_iter(max_iter)
            .tol(tol)
            .blurring(blurring)
            .cluster_all(cluster_all)
            .check()
            .map_err(|e| to_py(py, &e))?;
        Ok(MeanShiftParams { inner })
    }
}

/// MeanShift of `points`: modes, labels, populations, iterations, whether
/// it converged, the bandwidth.
#[pyfunction]
pub(crate) fn mean_shift<'py>(
    py: Python<'py>,
    engine: &Bound<'py, Engine>,
    points: PyReadonlyArray2<'py, f32>,
    params: &Bound<'py, MeanShiftParams>,
) -> PyResult<<MeanShiftFit as IntoPython<'py>>::Output> {
    let (x, params) = (points.as_array(), &params.get().inner);
    let e = &engine.get().inner;
    compute(py, || e.mean_shift(params, x)).map(|fit| fit.into_python(py))
}

/// MedoidShift of `points` (or of a distance matrix with `distances`):
/// medoids, modes, labels, populations, iterations, whether it converged,
/// the bandwidth.
#[pyfunction]
#[pyo3(signature = (engine, points, *, kernel, max_iter = 300, distances = false))]
pub(crate) fn medoid_shift<'py>(
    py: Python<'py>,
    engine: &Bound<'py, Engine>,
    points: PyReadonlyArray2<'py, f32>,
    kernel: ShiftKernel,
    max_iter: usize,
    distances: bool,
) -> PyResult<<MedoidShiftFit as IntoPython<'py>>::Output> {
    let base = match kernel.checked(py)? {
        CheckedShiftKernel::Radial(p, rule) => locus::MedoidShiftParams::new()
            .profile(p)
            .bandwidth_rule(rule),
        CheckedShiftKernel::Product(k) => locus::MedoidShiftParams::new().kernel(k),
    };
    let params = base.max_iter(max_iter).check().map_err(|e| to_py(py, &e))?;
    let x = points.as_array();
    let e = &engine.get().inner;
    compute(py, || {
        if distances {
            e.medoid_shift_distances(&params, x)
        } else {
            e.medoid_shift(&params, x)
        }
    })
    .map(|fit| fit.into_python(py))
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

/// The leave-one-out error of the local mean under per-feature
/// bandwidths, its gradient in `ln h` and the rows without a prediction.
#[pyfunction]
#[pyo3(signature = (engine, points, values, *, profile_name, bandwidths))]
pub(crate) fn loo_error_per_feature<'py>(
    py: Python<'py>,
    engine: &Bound<'py, Engine>,
    points: PyReadonlyArray2<'py, f32>,
    values: Option<PyReadonlyArray2<'py, f32>>,
    profile_name: &str,
    bandwidths: Vec<f32>,
) -> PyResult<(f64, Vec<f64>, usize)> {
    let p = profile(py, profile_name)?;
    let x = points.as_array();
    let y = values.as_ref().map(|v| v.as_array());
    let e = &engine.get().inner;
    let s = compute(py, || e.loo_error_per_feature(p, &bandwidths, x, y))?;
    Ok((s.error, s.gradient, s.empty_rows))
}

/// Per-feature bandwidths by bounded quasi-Newton on the leave-one-out
/// error: `(bandwidths, error, empty_rows, iterations, converged, trace,
/// initial)`.
#[pyfunction]
#[pyo3(signature = (
    engine, points, values, *, profile_name, max_iter = 100, tol = 1e-7,
    gradient_tol = 1e-5, initial = None, bound_factor = 1e3
))]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
pub(crate) fn select_bandwidths_per_feature<'py>(
    py: Python<'py>,
    engine: &Bound<'py, Engine>,
    points: PyReadonlyArray2<'py, f32>,
    values: Option<PyReadonlyArray2<'py, f32>>,
    profile_name: &str,
    max_iter: usize,
    tol: f64,
    gradient_tol: f64,
    initial: Option<Vec<f32>>,
    bound_factor: f64,
) -> PyResult<(Vec<f32>, f64, usize, usize, bool, Vec<f64>, Vec<f32>)> {
    let p = profile(py, profile_name)?;
    let x = points.as_array();
    let y = values.as_ref().map(|v| v.as_array());
    let e = &engine.get().inner;
    let options = locus::PerFeatureOptions {
        max_iterations: max_iter,
        tolerance: tol,
        gradient_tolerance: gradient_tol,
        initial,
        bound_factor,
    };
    let s = compute(py, || e.select_bandwidths_per_feature(p, x, y, &options))?;
    Ok((
        s.bandwidths,
        s.error,
        s.empty_rows,
        s.iterations,
        s.converged,
        s.trace,
        s.initial,
    ))
}
