//! Local-mean diffusion's parameters: a consuming builder checked into
//! valid parameters, and the schedule resolved for one data set
//! ([`Diffusion`]: the noise levels, the bandwidths and the draws).

use ndarray::{Array2, ArrayView2};
use rayon::prelude::*;

use super::rng::Stream;
use crate::error::{Error, Result};
use crate::kernel::{Kernel, Profile};
use crate::matrix::{Matrix, try_array};

const OP: &str = "generate";

/// Steps of the default schedule.
pub const DEFAULT_STEPS: usize = 20;
/// The default schedule's smallest noise level, as a fraction of the data's
/// scale (the root mean square distance of the points to their mean).
pub const DEFAULT_SIGMA_MIN: f64 = 0.01;
/// The default schedule's largest noise level, as the same fraction.
pub const DEFAULT_SIGMA_MAX: f64 = 0.5;
/// The most steps a schedule may have.
pub const MAX_STEPS: usize = 100_000;

/// The stream family of the starting samples' draws (row picks and
/// noise); level `t`'s noised data use family `t`.
const START_STREAM: u64 = u64::MAX;

/// How a schedule's levels are spaced between its smallest and largest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spacing {
    /// `σ_t = min·(max/min)^((t−1)/(T−1))`: equal ratios.
    Geometric,
    /// `σ_t = min + (max − min)·(t−1)/(T−1)`: equal differences.
    Linear,
}

/// The noise levels `σ_1, …, σ_T`: the standard deviation of the Gaussian
/// noise the forward process adds at each step (paper §9.3, eq. 110 with
/// `a_t = 1`: `x_t = x_{t−1} + ε_t`, `ε_t ~ N(0, σ_t² I)`).
#[derive(Debug, Clone, PartialEq)]
pub enum NoiseSchedule {
    /// `steps` levels spaced from `min` (`σ_1`) to `max` (`σ_T`); one step
    /// is `σ_1 = max`. A bound left `None` is the default fraction of the
    /// data's scale ([`DEFAULT_SIGMA_MIN`], [`DEFAULT_SIGMA_MAX`]).
    Spaced {
        /// How the levels are spaced.
        spacing: Spacing,
        /// `T`, at least 1.
        steps: usize,
        /// `σ_1`, finite and positive (`None`: 0.01 × the data's scale).
        min: Option<f64>,
        /// `σ_T`, finite, positive and at least `min` (`None`: 0.5 × the
        /// data's scale).
        max: Option<f64>,
    },
    /// These levels, `σ_1` first (finite and positive, at least one).
    Given(Vec<f64>),
}

impl Default for NoiseSchedule {
    /// 20 geometric levels from 0.01 to 0.5 times the data's scale.
    fn default() -> Self {
        NoiseSchedule::Spaced {
            spacing: Spacing::Geometric,
            steps: DEFAULT_STEPS,
            min: None,
            max: None,
        }
    }
}

/// The kernel bandwidth `h_t` of each level's local mean.
#[derive(Debug, Clone, PartialEq)]
pub enum LevelBandwidths {
    /// `h_t = factor·σ_t`. With the gaussian profile and `factor = 1` the
    /// kernel is the forward step's transition density `p(x_t | x_{t−1})`,
    /// so the local mean is the posterior mean `E[x_{t−1} | x_t]` under the
    /// noised data (Tweedie's formula, paper §9.2).
    Noise {
        /// Finite and positive.
        factor: f64,
    },
    /// These bandwidths, `h_1` first: one per level.
    Given(Vec<f64>),
}

impl Default for LevelBandwidths {
    /// `h_t = σ_t`.
    fn default() -> Self {
        LevelBandwidths::Noise { factor: 1.0 }
    }
}

/// Local-mean diffusion (paper §9.3): a consuming builder, checked into
/// [`DiffusionValidParams`] by [`check`](Self::check).
///
/// ```
/// use locus::{DiffusionParams, NoiseSchedule, Profile};
/// let params = DiffusionParams::new()
///     .schedule(NoiseSchedule::Given(vec![0.05, 0.2, 0.8]))
///     .samples(100)
///     .seed(7)
///     .check()?;
/// assert_eq!(params.steps(), 3);
/// assert!(DiffusionParams::new().samples(0).check().is_err());
/// # Ok::<(), locus::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct DiffusionParams {
    schedule: NoiseSchedule,
    bandwidths: LevelBandwidths,
    profile: Profile,
    samples: Option<usize>,
    seed: u64,
    trajectory: bool,
}

impl Default for DiffusionParams {
    fn default() -> Self {
        DiffusionParams::new()
    }
}

impl DiffusionParams {
    /// The default schedule ([`NoiseSchedule::default`]), gaussian kernels
    /// with `h_t = σ_t`, one sample per data row, seed 0, no trajectory.
    pub fn new() -> Self {
        DiffusionParams {
            schedule: NoiseSchedule::default(),
            bandwidths: LevelBandwidths::default(),
            profile: Profile::Gaussian,
            samples: None,
            seed: 0,
            trajectory: false,
        }
    }

    /// The noise levels.
    pub fn schedule(mut self, schedule: NoiseSchedule) -> Self {
        self.schedule = schedule;
        self
    }

    /// The bandwidth of each level's local mean.
    pub fn bandwidths(mut self, bandwidths: LevelBandwidths) -> Self {
        self.bandwidths = bandwidths;
        self
    }

    /// The kernel profile of the local means (default gaussian).
    pub fn profile(mut self, profile: Profile) -> Self {
        self.profile = profile;
        self
    }

    /// How many points to generate (default: as many as the data has rows).
    pub fn samples(mut self, samples: usize) -> Self {
        self.samples = Some(samples);
        self
    }

    /// The seed of every random draw: the same seed, data and parameters
    /// give the same draws on any backend and thread count.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Whether to keep the samples after every step
    /// ([`Generated::trajectory`](crate::Generated::trajectory)).
    pub fn trajectory(mut self, keep: bool) -> Self {
        self.trajectory = keep;
        self
    }

    /// Checks every parameter that can be checked without data.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `steps` (0 or more than
    /// [`MAX_STEPS`]), `sigmas` (a level that is not finite and positive,
    /// an empty list, `min > max`), `bandwidths` (a factor that is not
    /// finite and positive, a list whose length is not the number of
    /// steps) or `samples` (0); [`Error::InvalidBandwidth`] for a given
    /// bandwidth no kernel accepts.
    pub fn check(self) -> Result<DiffusionValidParams> {
        let steps = match &self.schedule {
            NoiseSchedule::Spaced {
                steps, min, max, ..
            } => {
                for (name, v) in [("min", min), ("max", max)] {
                    if let Some(v) = v {
                        positive("sigmas", name, *v)?;
                    }
                }
                if let (Some(lo), Some(hi)) = (min, max)
                    && lo > hi
                {
                    return Err(invalid("sigmas", format!("min {lo} exceeds max {hi}")));
                }
                *steps
            }
            NoiseSchedule::Given(s) => {
                for (t, &v) in s.iter().enumerate() {
                    positive("sigmas", &format!("σ_{}", t + 1), v)?;
                }
                s.len()
            }
        };
        if steps == 0 || steps > MAX_STEPS {
            return Err(invalid(
                "steps",
                format!("the schedule needs 1 to {MAX_STEPS} levels, got {steps}"),
            ));
        }
        match &self.bandwidths {
            LevelBandwidths::Noise { factor } => positive("bandwidths", "factor", *factor)?,
            LevelBandwidths::Given(h) => {
                if h.len() != steps {
                    return Err(invalid(
                        "bandwidths",
                        format!(
                            "{} bandwidths for {steps} levels; give one per level",
                            h.len()
                        ),
                    ));
                }
                for &v in h {
                    Kernel::new(self.profile, v as f32)?;
                }
            }
        }
        if self.samples == Some(0) {
            return Err(invalid("samples", "at least one sample is needed".into()));
        }
        Ok(DiffusionValidParams(self))
    }
}

fn invalid(name: &'static str, reason: String) -> Error {
    Error::InvalidParameter { name, reason }
}

fn positive(name: &'static str, what: &str, v: f64) -> Result<()> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(invalid(
            name,
            format!("{what} must be finite and > 0, got {v}"),
        ))
    }
}

/// Checked [`DiffusionParams`].
#[derive(Debug, Clone, PartialEq)]
pub struct DiffusionValidParams(DiffusionParams);

impl DiffusionValidParams {
    /// `T`, the number of levels (and of local-mean steps).
    pub fn steps(&self) -> usize {
        match &self.0.schedule {
            NoiseSchedule::Spaced { steps, .. } => *steps,
            NoiseSchedule::Given(s) => s.len(),
        }
    }

    /// The schedule resolved for `data` (`N × d`): its noise levels and
    /// bandwidths, and the draws.
    ///
    /// # Errors
    /// Empty or non-finite data; [`Error::InvalidParameter`] (`sigmas`)
    /// when a default bound is asked for on data with no spread;
    /// [`Error::InvalidBandwidth`] for a level's bandwidth no kernel
    /// accepts.
    pub fn resolve(&self, data: ArrayView2<'_, f32>) -> Result<Diffusion> {
        let x = Matrix::check(OP, "data", data)?;
        self.resolve_checked(&x)
    }

    pub(crate) fn resolve_checked(&self, x: &Matrix<'_>) -> Result<Diffusion> {
        let p = &self.0;
        let sigmas = match &p.schedule {
            NoiseSchedule::Given(s) => s.clone(),
            NoiseSchedule::Spaced {
                spacing,
                steps,
                min,
                max,
            } => {
                // Measured once, and only when a bound is left to it.
                let measured = std::cell::OnceCell::new();
                let scale = || {
                    let s = *measured.get_or_init(|| data_scale(x));
                    if s > 0.0 && s.is_finite() {
                        Ok(s)
                    } else {
                        Err(invalid(
                            "sigmas",
                            format!(
                                "the data's scale is {s} (are all points equal?); give the smallest and largest noise levels"
                            ),
                        ))
                    }
                };
                let lo = match min {
                    Some(v) => *v,
                    None => DEFAULT_SIGMA_MIN * scale()?,
                };
                let hi = match max {
                    Some(v) => *v,
                    None => DEFAULT_SIGMA_MAX * scale()?,
                };
                if lo > hi {
                    return Err(invalid(
                        "sigmas",
                        format!("min {lo} exceeds max {hi} (one of them from the data's scale)"),
                    ));
                }
                spaced(*spacing, *steps, lo, hi)
            }
        };
        let bandwidths: Vec<f64> = match &p.bandwidths {
            LevelBandwidths::Noise { factor } => sigmas.iter().map(|s| factor * s).collect(),
            LevelBandwidths::Given(h) => h.clone(),
        };
        let kernels = bandwidths
            .iter()
            .map(|&h| Kernel::new(p.profile, h as f32))
            .collect::<Result<Vec<_>>>()?;
        let mut levels = Vec::with_capacity(sigmas.len() + 1);
        let mut acc = 0.0f64;
        levels.push(0.0);
        for s in &sigmas {
            acc += s * s;
            levels.push(acc.sqrt());
        }
        Ok(Diffusion {
            sigmas,
            bandwidths,
            levels,
            kernels,
            samples: p.samples.unwrap_or(x.rows()),
            seed: p.seed,
            trajectory: p.trajectory,
        })
    }
}

/// The levels of a spaced schedule, `σ_1 = lo` first.
fn spaced(spacing: Spacing, steps: usize, lo: f64, hi: f64) -> Vec<f64> {
    if steps == 1 {
        return vec![hi];
    }
    let last = (steps - 1) as f64;
    (0..steps)
        .map(|i| {
            let f = i as f64 / last;
            match spacing {
                Spacing::Geometric => lo * (hi / lo).powf(f),
                Spacing::Linear => lo + (hi - lo) * f,
            }
        })
        .collect()
}

/// The root mean square distance of the points to their mean,
/// `√(Σ_k var_k)`, in `f64`.
fn data_scale(x: &Matrix<'_>) -> f64 {
    let mean = column_means(x);
    let n = x.rows() as f64;
    let ss: f64 = x
        .as_slice()
        .chunks_exact(x.cols())
        .map(|r| {
            r.iter()
                .zip(&mean)
                .map(|(&v, m)| (f64::from(v) - m).powi(2))
                .sum::<f64>()
        })
        .sum();
    (ss / n).sqrt()
}

/// The data's column means, in `f64`.
pub(crate) fn column_means(x: &Matrix<'_>) -> Vec<f64> {
    let mut mean = vec![0.0f64; x.cols()];
    for r in x.as_slice().chunks_exact(x.cols()) {
        for (m, &v) in mean.iter_mut().zip(r) {
            *m += f64::from(v);
        }
    }
    let n = x.rows() as f64;
    mean.iter_mut().for_each(|m| *m /= n);
    mean
}

/// A diffusion schedule resolved for one data set `X_0` (`N × d`): the
/// noise levels `σ_t`, the cumulative levels `s_t = √(σ_1² + … + σ_t²)`,
/// the bandwidths `h_t`, and the draws of the noised data `X_t` and of the
/// starting samples `X′_T`, each a function of the seed alone.
#[derive(Debug, Clone, PartialEq)]
pub struct Diffusion {
    sigmas: Vec<f64>,
    bandwidths: Vec<f64>,
    /// `s_0 = 0, s_1, …, s_T`.
    levels: Vec<f64>,
    kernels: Vec<Kernel>,
    samples: usize,
    seed: u64,
    trajectory: bool,
}

impl Diffusion {
    /// `T`.
    pub fn steps(&self) -> usize {
        self.sigmas.len()
    }

    /// `σ_1, …, σ_T`.
    pub fn sigmas(&self) -> &[f64] {
        &self.sigmas
    }

    /// `h_1, …, h_T`.
    pub fn bandwidths(&self) -> &[f64] {
        &self.bandwidths
    }

    /// The kernel of level `t`, the local mean that takes `X′_t` to
    /// `X′_{t−1}`; `None` unless `1 ≤ t ≤ T`.
    pub fn kernel(&self, t: usize) -> Option<&Kernel> {
        self.kernels.get(t.checked_sub(1)?)
    }

    /// `s_t`, the standard deviation of the noise in `X_t` (`s_0 = 0`);
    /// `None` when `t > T`.
    pub fn noise_level(&self, t: usize) -> Option<f64> {
        self.levels.get(t).copied()
    }

    /// The kernels, level 1 first.
    pub(crate) fn kernels(&self) -> &[Kernel] {
        &self.kernels
    }

    /// How many samples are generated.
    pub fn samples(&self) -> usize {
        self.samples
    }

    /// Whether the trajectory is kept.
    pub(crate) fn keeps_trajectory(&self) -> bool {
        self.trajectory
    }

    /// The noised data `X_t = X_0 + s_t·Z` (`Z` standard normal, drawn from
    /// stream family `t`, one stream per row), `X_0` itself for `t = 0`.
    ///
    /// # Errors
    /// Empty or non-finite data; [`Error::InvalidParameter`] (`level`)
    /// when `t > T`; [`Error::TooLarge`] when the result cannot be
    /// allocated.
    pub fn noised(&self, data: ArrayView2<'_, f32>, t: usize) -> Result<Array2<f32>> {
        let x = Matrix::check(OP, "data", data)?;
        self.check_level(t)?;
        let mut out = try_array(OP, "noised data", (x.rows(), x.cols()), 0.0f32)?;
        let zero = vec![0.0; x.cols()];
        self.fill_noised(&x, &zero, t, out.as_slice_mut().expect("standard layout")); // ok: made so
        Ok(out)
    }

    /// The starting samples `X′_T`: sample `i` is a data row picked
    /// uniformly (with replacement) plus `s_T·Z`, both from the start's
    /// stream of row `i` — a draw of the fully noised data's distribution.
    ///
    /// # Errors
    /// As [`noised`](Self::noised).
    pub fn start(&self, data: ArrayView2<'_, f32>) -> Result<Array2<f32>> {
        let x = Matrix::check(OP, "data", data)?;
        let mut out = try_array(OP, "samples", (self.samples, x.cols()), 0.0f32)?;
        let zero = vec![0.0; x.cols()];
        self.fill_start(&x, &zero, out.as_slice_mut().expect("standard layout")); // ok: made so
        Ok(out)
    }

    fn check_level(&self, t: usize) -> Result<()> {
        if t > self.steps() {
            return Err(invalid(
                "level",
                format!("level {t} of a {}-step schedule", self.steps()),
            ));
        }
        Ok(())
    }

    /// `X_t − c` into `out` (`N × d`, row-major), in `f64` then rounded.
    pub(crate) fn fill_noised(&self, x: &Matrix<'_>, c: &[f64], t: usize, out: &mut [f32]) {
        let (d, s) = (x.cols(), self.levels[t]);
        out.par_chunks_mut(d)
            .zip(x.as_slice().par_chunks(d))
            .enumerate()
            .for_each(|(i, (o, r))| {
                let mut z = Stream::new(self.seed, t as u64, i as u64);
                for ((o, &v), ck) in o.iter_mut().zip(r).zip(c) {
                    let noise = if t == 0 { 0.0 } else { s * z.normal() };
                    *o = (f64::from(v) - ck + noise) as f32;
                }
            });
    }

    /// `X′_T − c` into `out` (`samples × d`, row-major).
    pub(crate) fn fill_start(&self, x: &Matrix<'_>, c: &[f64], out: &mut [f32]) {
        let (d, n, s) = (x.cols(), x.rows(), self.levels[self.steps()]);
        out.par_chunks_mut(d).enumerate().for_each(|(i, o)| {
            let mut z = Stream::new(self.seed, START_STREAM, i as u64);
            let r = x.as_slice();
            let row = z.below(n);
            for ((o, &v), ck) in o.iter_mut().zip(&r[row * d..(row + 1) * d]).zip(c) {
                *o = (f64::from(v) - ck + s * z.normal()) as f32;
            }
        });
    }
}
