//! Local-mean diffusion: `Engine::generate` for the Python layer.

use locus::{DiffusionParams, Generated, LevelBandwidths, NoiseSchedule, Spacing};
use numpy::{IntoPyArray, PyArray2, PyReadonlyArray2};
use pyo3::prelude::*;

use crate::convert::profile;
use crate::engine::Engine;
use crate::errors::{compute, input, to_py};

/// The noise levels as Python passes them: `(spacing, steps, min, max)`
/// (`"geometric"` or `"linear"`; a bound `None` for the data-scaled
/// default), or the levels themselves.
#[derive(FromPyObject)]
pub(crate) enum Schedule {
    /// Spaced levels.
    Spaced(String, usize, Option<f64>, Option<f64>),
    /// Given levels, `σ_1` first.
    Given(Vec<f64>),
}

/// The bandwidths as Python passes them: a factor of each level's `σ_t`,
/// or one bandwidth per level.
#[derive(FromPyObject)]
pub(crate) enum Bandwidths {
    /// `h_t = factor·σ_t`.
    Factor(f64),
    /// `h_1, …, h_T`.
    Given(Vec<f64>),
}

/// What `generate` hands back: the samples, the trajectory (empty unless
/// asked for), the levels, the bandwidths, the empty-row count.
type Output<'py> = (
    Bound<'py, PyArray2<f32>>,
    Vec<Bound<'py, PyArray2<f32>>>,
    Vec<f64>,
    Vec<f64>,
    usize,
);

/// Local-mean diffusion of `data` (paper §9.3) on the engine.
#[pyfunction]
#[pyo3(signature = (engine, data, *, schedule, bandwidths, kernel, samples = None, seed = 0, trajectory = false))]
#[allow(clippy::too_many_arguments)] // ok: the keyword arguments of one Python call
pub(crate) fn generate<'py>(
    py: Python<'py>,
    engine: &Bound<'py, Engine>,
    data: PyReadonlyArray2<'py, f32>,
    schedule: Schedule,
    bandwidths: Bandwidths,
    kernel: &str,
    samples: Option<usize>,
    seed: u64,
    trajectory: bool,
) -> PyResult<Output<'py>> {
    let schedule = match schedule {
        Schedule::Given(s) => NoiseSchedule::Given(s),
        Schedule::Spaced(spacing, steps, min, max) => NoiseSchedule::Spaced {
            spacing: match spacing.as_str() {
                "geometric" => Spacing::Geometric,
                "linear" => Spacing::Linear,
                other => {
                    return Err(input(
                        py,
                        format!(
                            "sigmas must be \"geometric\", \"linear\" or a list of levels, got {other:?}"
                        ),
                    ));
                }
            },
            steps,
            min,
            max,
        },
    };
    let bandwidths = match bandwidths {
        Bandwidths::Factor(factor) => LevelBandwidths::Noise { factor },
        Bandwidths::Given(h) => LevelBandwidths::Given(h),
    };
    let mut params = DiffusionParams::new()
        .schedule(schedule)
        .bandwidths(bandwidths)
        .profile(profile(py, kernel)?)
        .seed(seed)
        .trajectory(trajectory);
    if let Some(m) = samples {
        params = params.samples(m);
    }
    let params = params.check().map_err(|e| to_py(py, &e))?;
    let x = data.as_array();
    let e = &engine.get().inner;
    let Generated {
        samples,
        trajectory,
        sigmas,
        bandwidths,
        empty_rows,
    } = compute(py, || e.generate(&params, x))?;
    Ok((
        samples.into_pyarray(py),
        trajectory.into_iter().map(|a| a.into_pyarray(py)).collect(),
        sigmas,
        bandwidths,
        empty_rows,
    ))
}
