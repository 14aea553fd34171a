//! The local-mean diffusion driver (paper §9.3, eq. 109): starting from a
//! draw of the fully noised data, each step replaces the samples by their
//! local means over the data noised one level less, on the engine's
//! backend.

use ndarray::{Array2, ArrayView2, Axis};

use super::params::{DiffusionValidParams, column_means};
use crate::cancel::Checkpoint;
use crate::engine::Engine;
use crate::error::Result;
use crate::matrix::{Matrix, reserve, try_array};

const OP: &str = "generate";

/// What [`Engine::generate`] produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Generated {
    /// The generated points `X′_0` (`samples × d`).
    pub samples: Array2<f32>,
    /// With [`DiffusionParams::trajectory`](crate::DiffusionParams::trajectory):
    /// the samples at every level, `X′_T` (the start) first and `X′_0` last
    /// (`T + 1` matrices); otherwise empty.
    pub trajectory: Vec<Array2<f32>>,
    /// The noise levels `σ_1, …, σ_T` used.
    pub sigmas: Vec<f64>,
    /// The bandwidths `h_1, …, h_T` used.
    pub bandwidths: Vec<f64>,
    /// Sample rows, summed over the steps, whose neighbourhood held no
    /// noised data point (compact profiles only): such a sample stays
    /// where it is for that step, as a MeanShift seed does.
    pub empty_rows: usize,
}

impl Engine {
    /// Local-mean diffusion (paper §9.3): generates points like `data`
    /// (`X_0`, `N × d`) by iterated local means under a Gaussian noise
    /// schedule,
    ///
    /// `X′_{t−1} = μ_K(X′_t; X_{t−1})`, `t = T, …, 1` (eq. 109),
    ///
    /// where `μ_K(q; X) = Σ_i K(q, x_i) x_i / Σ_i K(q, x_i)` is the self-local
    /// mean with the level's kernel (bandwidth `h_t`), `X_t = X_0 + s_t·Z`
    /// the data noised to level `t` (eq. 110 with `a_t = 1`, in its
    /// marginal form: `s_t² = σ_1² + … + σ_t²`, fresh noise per level),
    /// and the start `X′_T` a draw of the fully noised data (a data row
    /// picked uniformly plus `s_T·Z`). The last step's keys are the data
    /// itself. Every draw comes from the parameters' seed
    /// ([`Diffusion::noised`](crate::Diffusion::noised),
    /// [`Diffusion::start`](crate::Diffusion::start)): the result is the same
    /// for a seed on either backend up to the local means' rounding.
    ///
    /// Each step is one [`local_mean`](Self::local_mean) on the engine's
    /// backend (`samples × N` kernel evaluations); the noise is drawn on
    /// the host. The points are centred on the data's mean while the steps
    /// run. The call checks its cancellation token before every step (and
    /// the local means check it inside theirs); host buffers are allocated
    /// fallibly ([`Error::TooLarge`](crate::Error::TooLarge)) and each
    /// local mean charges the engine's memory budget as any call does.
    ///
    /// Posterior means shrink: with `h_t = σ_t` the samples' spread comes
    /// out below the data's (for Gaussian data of variance `v`, by about
    /// `v/(v + s_T²)`), most at the middle levels; the last, small levels
    /// move the samples onto the data's support.
    ///
    /// ```
    /// use locus::{DiffusionParams, Engine};
    /// use ndarray::Array2;
    /// let x = Array2::from_shape_fn((200, 2), |(i, j)| ((i * 37 + j * 11) % 97) as f32 / 97.0);
    /// let params = DiffusionParams::new().samples(50).seed(1).check()?;
    /// let out = Engine::cpu().generate(&params, x.view())?;
    /// assert_eq!(out.samples.dim(), (50, 2));
    /// assert_eq!(out.sigmas.len(), 20);
    /// # Ok::<(), locus::Error>(())
    /// ```
    ///
    /// # Errors
    /// Empty or non-finite data; what
    /// [`DiffusionValidParams::resolve`] reports; [`Error::Cancelled`];
    /// [`Error::TooLarge`] and backend failures.
    ///
    /// [`Error::Cancelled`]: crate::Error::Cancelled
    /// [`Error::TooLarge`]: crate::Error::TooLarge
    pub fn generate(
        &self,
        params: &DiffusionValidParams,
        data: ArrayView2<'_, f32>,
    ) -> Result<Generated> {
        self.generate_with_progress(params, data, |_, _| {})
    }

    /// [`generate`](Self::generate), calling `progress(done, steps)` after
    /// every step.
    ///
    /// # Errors
    /// As [`generate`](Self::generate).
    pub fn generate_with_progress(
        &self,
        params: &DiffusionValidParams,
        data: ArrayView2<'_, f32>,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<Generated> {
        let checkpoint = Checkpoint::current(OP);
        let x = Matrix::check(OP, "data", data)?;
        let plan = params.resolve_checked(&x)?;
        let (n, d, m, steps) = (x.rows(), x.cols(), plan.samples(), plan.steps());
        let centre = column_means(&x);
        let mut trajectory = reserve::<Array2<f32>>(
            OP,
            "trajectory",
            if plan.keeps_trajectory() {
                steps as u64 + 1
            } else {
                0
            },
        )?;
        let mut samples = try_array(OP, "samples", (m, d), 0.0f32)?;
        self.install(|| {
            plan.fill_start(
                &x,
                &centre,
                samples.as_slice_mut().expect("standard layout"),
            ) // ok: made so
        });
        if plan.keeps_trajectory() {
            trajectory.push(uncentred(&samples, &centre)?);
        }
        let mut keys = try_array(OP, "noised data", (n, d), 0.0f32)?;
        let mut empty_rows = 0;
        for t in (1..=steps).rev() {
            checkpoint.check()?;
            self.install(|| {
                plan.fill_noised(
                    &x,
                    &centre,
                    t - 1,
                    keys.as_slice_mut().expect("standard layout"),
                ) // ok: made so
            });
            let kernel = &plan.kernels()[t - 1];
            let next = self.local_mean(kernel, samples.view(), keys.view(), keys.view())?;
            let mut moved = next.values;
            if next.empty_rows > 0 {
                empty_rows += stay_put(&mut moved, &samples);
            }
            samples = moved;
            if plan.keeps_trajectory() {
                trajectory.push(uncentred(&samples, &centre)?);
            }
            progress(steps - t + 1, steps);
        }
        Ok(Generated {
            samples: uncentred(&samples, &centre)?,
            trajectory,
            sigmas: plan.sigmas().to_vec(),
            bandwidths: plan.bandwidths().to_vec(),
            empty_rows,
        })
    }
}

/// Rows of `moved` that are NaN (an empty neighbourhood) take their row of
/// `before`; returns how many.
fn stay_put(moved: &mut Array2<f32>, before: &Array2<f32>) -> usize {
    let mut count = 0;
    for (mut row, old) in moved.axis_iter_mut(Axis(0)).zip(before.rows()) {
        if row.iter().any(|v| v.is_nan()) {
            row.assign(&old);
            count += 1;
        }
    }
    count
}

/// `a + c` (the centre added back), in `f64` then rounded.
fn uncentred(a: &Array2<f32>, c: &[f64]) -> Result<Array2<f32>> {
    let mut out = try_array(OP, "samples", a.dim(), 0.0f32)?;
    for (mut o, r) in out.rows_mut().into_iter().zip(a.rows()) {
        for ((o, &v), ck) in o.iter_mut().zip(r).zip(c) {
            *o = (f64::from(v) + ck) as f32;
        }
    }
    Ok(out)
}
