//! Kernel learning by leave-one-out with per-feature bandwidths (a
//! diagonal metric, "ARD"; paper §8.1): the error `E(h)` and its gradient
//! in `ln h` from one fused pass over the keys, and the bounded
//! quasi-Newton search on top (docs/numerics.md, "Per-feature
//! bandwidths").

use ndarray::{Array2, ArrayView2};

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::kernel::exact::{CAUCHY_EXACT_BELOW, log_weight};
use crate::kernel::{MAX_BANDWIDTH, MIN_BANDWIDTH, Profile};
use crate::matrix::{Matrix, try_collect};
use crate::types::GradStates;

use super::lbfgsb::{Settings, minimize};

/// The leave-one-out error of per-feature bandwidths and its gradient
/// ([`Engine::loo_error_per_feature`]).
#[derive(Debug, Clone, PartialEq)]
pub struct PerFeatureLoo {
    /// The bandwidths scored, one per feature.
    pub bandwidths: Vec<f32>,
    /// Mean over points of `‖y_i − Σ_{j≠i} K_ij y_j / Σ_{j≠i} K_ij‖²`,
    /// over the points that have a prediction (as [`LooScore`](crate::LooScore)).
    pub error: f64,
    /// `∂error/∂ln h_a`, one per feature (rows without a prediction held
    /// out, as in `error`).
    pub gradient: Vec<f64>,
    /// Points with no other point in their neighbourhood.
    pub empty_rows: usize,
}

/// How [`Engine::select_bandwidths_per_feature`] searches.
#[derive(Debug, Clone, PartialEq)]
pub struct PerFeatureOptions {
    /// Most quasi-Newton iterations (default 100).
    pub max_iterations: usize,
    /// Stop when an iteration lowers the error by at most this fraction
    /// (default `1e-7`).
    pub tolerance: f64,
    /// Stop when the projected gradient in `ln h`, relative to the error,
    /// is at most this in every feature (default `1e-5`).
    pub gradient_tolerance: f64,
    /// The starting bandwidths (default: each feature's standard
    /// deviation times the best factor of a short log grid around Scott's
    /// `n^(−1/(d+4))`).
    pub initial: Option<Vec<f32>>,
    /// Each bandwidth stays within this factor of its start, both ways
    /// (default `1e3`; and within the accepted bandwidths).
    pub bound_factor: f64,
}

impl Default for PerFeatureOptions {
    fn default() -> Self {
        PerFeatureOptions {
            max_iterations: 100,
            tolerance: 1e-7,
            gradient_tolerance: 1e-5,
            initial: None,
            bound_factor: 1e3,
        }
    }
}

/// The result of [`Engine::select_bandwidths_per_feature`].
#[derive(Debug, Clone, PartialEq)]
pub struct PerFeatureSelection {
    /// The chosen bandwidth of each feature (`10¹⁸` for a feature
    /// dropped: one that does not lower the error).
    pub bandwidths: Vec<f32>,
    /// The leave-one-out error there.
    pub error: f64,
    /// Points without a prediction there (never more than at the start).
    pub empty_rows: usize,
    /// The starting bandwidths.
    pub initial: Vec<f32>,
    /// Quasi-Newton iterations taken.
    pub iterations: usize,
    /// Points scored (error and gradient, one pass each; the start's grid
    /// included, no point twice).
    pub evaluations: usize,
    /// Whether a tolerance stopped the search (not the iteration cap).
    pub converged: bool,
    /// The error at the start and after each iteration.
    pub trace: Vec<f64>,
}

/// The op's checked inputs: points and targets.
struct Data<'a> {
    x: Matrix<'a>,
    y: Matrix<'a>,
}

/// Multiplicative steps of the starting grid around Scott's factor.
const START_GRID: [f64; 8] = [0.0625, 0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0];

impl Engine {
    /// Leave-one-out error of the local mean under per-feature bandwidths
    /// `h` (`K(x, x') = k(Σ_a ((x_a − x'_a)/h_a)²)` for the profile `k`,
    /// a diagonal metric) and its gradient with respect to `ln h_a`,
    /// from one fused pass over the keys (docs/numerics.md, "Per-feature
    /// bandwidths"). `values` (`N × q`) are the targets; `None`: the
    /// points themselves (self-supervised, paper Eq. 85). Each point's
    /// own key is left out inside the pass.
    ///
    /// ```
    /// use locus::{Engine, Profile};
    /// use ndarray::array;
    /// let x = array![[0.0f32, 0.0], [1.0, 0.5], [2.0, 1.0], [3.0, 0.0]];
    /// let y = array![[0.0f32], [1.0], [2.0], [3.0]];
    /// let e = Engine::cpu();
    /// let s = e.loo_error_per_feature(Profile::Gaussian, &[1.0, 2.0], x.view(), Some(y.view()))?;
    /// assert_eq!(s.gradient.len(), 2);
    /// # Ok::<(), locus::Error>(())
    /// ```
    ///
    /// # Errors
    /// The uniform profile (its error is a step function of `h`: no
    /// gradient); one bandwidth per feature, each valid as in
    /// [`Kernel::new`](crate::Kernel::new); empty or non-finite inputs,
    /// `values` rows ≠ points rows; on the GPU, more features or target
    /// columns than its register sums hold ([`Error::Unsupported`]).
    pub fn loo_error_per_feature(
        &self,
        profile: Profile,
        bandwidths: &[f32],
        points: ArrayView2<'_, f32>,
        values: Option<ArrayView2<'_, f32>>,
    ) -> Result<PerFeatureLoo> {
        let data = check(profile, points, values)?;
        let h = check_bandwidths(bandwidths, data.x.cols())?;
        self.evaluate(profile, &data, &h)
    }

    /// Chooses per-feature bandwidths by minimizing
    /// [`loo_error_per_feature`](Self::loo_error_per_feature): bounded
    /// quasi-Newton (projected L-BFGS) on `ln h` from each feature's
    /// standard deviation times the best of a short log grid of factors
    /// (or [`PerFeatureOptions::initial`]). A step may not leave more
    /// points without a prediction than the start does. A feature whose
    /// bandwidth ends above ten times its standard deviation (or on its
    /// upper bound) is then dropped — its bandwidth set to the largest
    /// accepted, `10¹⁸` — when that does not raise the error.
    ///
    /// ```
    /// use locus::{Engine, PerFeatureOptions, Profile};
    /// use ndarray::Array2;
    /// // y depends on the first feature only: its bandwidth comes out
    /// // smaller than the second's.
    /// let x = Array2::from_shape_fn((60, 2), |(i, a)| ((i * (3 + 4 * a)) % 17) as f32 / 17.0);
    /// let y = x.column(0).mapv(|v| (6.0 * v).sin()).insert_axis(ndarray::Axis(1));
    /// let s = Engine::cpu().select_bandwidths_per_feature(
    ///     Profile::Gaussian, x.view(), Some(y.view()), &PerFeatureOptions::default())?;
    /// assert!(s.bandwidths[0] < s.bandwidths[1]);
    /// assert!(s.error <= s.trace[0]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    ///
    /// # Errors
    /// Those of [`loo_error_per_feature`](Self::loo_error_per_feature);
    /// [`Error::InvalidParameter`] for options out of range (no
    /// iteration, a negative tolerance, a bound factor not above 1, an
    /// initial bandwidth per feature missing or invalid).
    pub fn select_bandwidths_per_feature(
        &self,
        profile: Profile,
        points: ArrayView2<'_, f32>,
        values: Option<ArrayView2<'_, f32>>,
        options: &PerFeatureOptions,
    ) -> Result<PerFeatureSelection> {
        let data = check(profile, points, values)?;
        check_options(options)?;
        let d = data.x.cols();
        // Every point is scored once: the grid's best is the start, the
        // minimizer's first point, and its last the result.
        let seen = Seen::default();
        let eval = |h: &[f64]| seen.evaluate(h, || self.evaluate(profile, &data, h));
        let start = match &options.initial {
            Some(h) => check_bandwidths(h, d)?,
            None => self.grid_start(&data, &eval)?,
        };
        let first = eval(&start)?;
        let allowed = first.empty_rows;
        if first.error.is_nan() {
            return Err(Error::InvalidParameter {
                name: "initial",
                reason: "no point has a neighbour at the starting bandwidths".into(),
            });
        }
        let (lmin, lmax) = (f64::from(MIN_BANDWIDTH).ln(), f64::from(MAX_BANDWIDTH).ln());
        let span = options.bound_factor.ln();
        let theta0: Vec<f64> = start.iter().map(|h| h.ln()).collect();
        let lo: Vec<f64> = theta0.iter().map(|t| (t - span).max(lmin)).collect();
        let hi: Vec<f64> = theta0.iter().map(|t| (t + span).min(lmax)).collect();
        let scale = first.error.abs().max(f64::MIN_POSITIVE);
        let settings = Settings {
            max_iterations: options.max_iterations,
            ftol: options.tolerance,
            pgtol: options.gradient_tolerance * scale,
            memory: 10,
        };
        let objective = |theta: &[f64]| -> Result<Option<(f64, Vec<f64>)>> {
            // exp(ln h) need not give h back: the start is scored as given.
            let h: Vec<f64> = match theta == &theta0[..] {
                true => start.clone(),
                false => theta.iter().map(|t| t.exp()).collect(),
            };
            let s = eval(&h)?;
            Ok((s.empty_rows <= allowed && s.error.is_finite()).then_some((s.error, s.gradient)))
        };
        let m = minimize(objective, &theta0, (&lo, &hi), &settings)?;
        let mut h: Vec<f64> = match m.x == theta0 {
            true => start.clone(),
            false => m.x.iter().map(|t| t.exp()).collect(),
        };
        let mut last = eval(&h)?;
        // A feature whose bandwidth ended above ten times its spread (or
        // on its upper bound) is dropped (h = MAX_BANDWIDTH: its offsets
        // vanish) unless that raises the error: the limit the search
        // approaches ever more slowly for a feature that does not help.
        let sd = column_sd(&data.x);
        for a in 0..d {
            if (h[a] < 10.0 * sd[a] && m.x[a] < hi[a]) || hi[a] >= lmax {
                continue;
            }
            let mut wide = h.clone();
            wide[a] = f64::from(MAX_BANDWIDTH);
            let s = eval(&wide)?;
            if s.empty_rows <= allowed && s.error <= last.error {
                h = wide;
                last = s;
            }
        }
        Ok(PerFeatureSelection {
            bandwidths: last.bandwidths,
            error: last.error,
            empty_rows: last.empty_rows,
            initial: start.iter().map(|&v| v as f32).collect(),
            iterations: m.iterations,
            evaluations: seen.count(),
            converged: m.converged,
            trace: m.trace,
        })
    }

    /// Each feature's standard deviation (1 for a constant feature, whose
    /// bandwidth does not matter) times the factor of [`START_GRID`]·Scott
    /// with the fewest empty rows, then the least error (each scored by
    /// `eval`).
    fn grid_start(
        &self,
        data: &Data<'_>,
        eval: &dyn Fn(&[f64]) -> Result<PerFeatureLoo>,
    ) -> Result<Vec<f64>> {
        let (n, d) = (data.x.rows(), data.x.cols());
        let sd = column_sd(&data.x);
        let scott = (n as f64).powf(-1.0 / (d as f64 + 4.0));
        let mut best: Option<(usize, f64, Vec<f64>)> = None;
        for f in START_GRID {
            let h: Vec<f64> = sd
                .iter()
                .map(|s| (s * scott * f).clamp(f64::from(MIN_BANDWIDTH), f64::from(MAX_BANDWIDTH)))
                .collect();
            let s = eval(&h)?;
            let e = if s.error.is_nan() {
                f64::INFINITY
            } else {
                s.error
            };
            if best
                .as_ref()
                .is_none_or(|(be, bv, _)| (s.empty_rows, e) < (*be, *bv))
            {
                best = Some((s.empty_rows, e, h));
            }
        }
        let (_, _, h) = best.expect("the grid is not empty"); // ok: START_GRID has 8 entries
        Ok(h)
    }

    /// The error and gradient at bandwidths `h` (valid, one per feature).
    fn evaluate(&self, profile: Profile, data: &Data<'_>, h: &[f64]) -> Result<PerFeatureLoo> {
        const OP: &str = "loo_error_per_feature";
        let (n, d) = (data.x.rows(), data.x.cols());
        let hf: Vec<f32> = h.iter().map(|&v| v as f32).collect();
        // The points in units of their bandwidths; f32 range kept (a
        // coordinate whose quotient overflows is far from every other).
        let inv: Vec<f32> = hf.iter().map(|&v| 1.0 / v).collect();
        let scaled = data
            .x
            .as_slice()
            .iter()
            .enumerate()
            .map(|(k, &v)| (v * inv[k % d]).clamp(f32::MIN, f32::MAX));
        let scaled = try_collect(OP, "scaled points", n * d, scaled)?;
        let scaled = Array2::from_shape_vec((n, d), scaled).expect("n·d entries"); // ok: same shape
        let xs = Matrix::check(OP, "scaled points", scaled.view())?;
        let mut states = self.backend_impl().loo_grad_states(profile, &xs, &data.y)?;
        finish_far_rows(profile, data, &hf, &mut states);
        let (error, gradient, empty_rows) = states.error_and_gradient();
        Ok(PerFeatureLoo {
            bandwidths: hf,
            error,
            gradient,
            empty_rows,
        })
    }
}

/// Checks the points, targets and profile.
fn check<'a>(
    profile: Profile,
    points: ArrayView2<'a, f32>,
    values: Option<ArrayView2<'a, f32>>,
) -> Result<Data<'a>> {
    const OP: &str = "loo_error_per_feature";
    if !profile.is_differentiable() {
        return Err(Error::InvalidParameter {
            name: "profile",
            reason: "the uniform profile's leave-one-out error is a step function of the \
                     bandwidths (its gradient is zero wherever it exists); use another profile"
                .into(),
        });
    }
    let x = Matrix::check(OP, "points", points)?;
    let y = match values {
        Some(v) => Matrix::check(OP, "values", v)?,
        None => Matrix::check(OP, "points", points)?,
    };
    super::check_shapes(OP, &x, &x, Some(&y))?;
    Ok(Data { x, y })
}

/// Checks one valid bandwidth per feature and widens them to `f64`.
fn check_bandwidths(h: &[f32], d: usize) -> Result<Vec<f64>> {
    if h.len() != d {
        return Err(Error::InvalidParameter {
            name: "bandwidths",
            reason: format!(
                "{} bandwidths for {d} features; give one per feature",
                h.len()
            ),
        });
    }
    h.iter()
        .map(|&v| crate::kernel::Kernel::new(Profile::Gaussian, v).map(|_| f64::from(v)))
        .collect()
}

fn check_options(o: &PerFeatureOptions) -> Result<()> {
    let bad = |name, reason: String| Err(Error::InvalidParameter { name, reason });
    if o.max_iterations == 0 {
        return bad("max_iterations", "must be at least 1".into());
    }
    if !(o.tolerance >= 0.0 && o.tolerance.is_finite()) {
        return bad(
            "tolerance",
            format!("must be finite and ≥ 0, got {}", o.tolerance),
        );
    }
    if !(o.gradient_tolerance >= 0.0 && o.gradient_tolerance.is_finite()) {
        return bad(
            "gradient_tolerance",
            format!("must be finite and ≥ 0, got {}", o.gradient_tolerance),
        );
    }
    if !(o.bound_factor > 1.0 && o.bound_factor.is_finite()) {
        return bad(
            "bound_factor",
            format!("must be finite and > 1, got {}", o.bound_factor),
        );
    }
    Ok(())
}

/// Each column's sample standard deviation in `f64` (1 where it is 0).
fn column_sd(x: &Matrix<'_>) -> Vec<f64> {
    let (n, d) = (x.rows(), x.cols());
    let mut mean = vec![0.0f64; d];
    for row in x.as_slice().chunks_exact(d) {
        for (m, &v) in mean.iter_mut().zip(row) {
            *m += f64::from(v) / n as f64;
        }
    }
    let mut ss = vec![0.0f64; d];
    for row in x.as_slice().chunks_exact(d) {
        for ((s, m), &v) in ss.iter_mut().zip(&mean).zip(row) {
            *s += (f64::from(v) - m).powi(2);
        }
    }
    ss.iter()
        .map(|s| {
            let sd = (s / (n.max(2) - 1) as f64).sqrt();
            if sd > 0.0 && sd.is_finite() { sd } else { 1.0 }
        })
        .collect()
}

/// Recomputes in `f64` the rows the `f32` pass leaves without mass
/// although the profile has full support (every key beyond the `f32`
/// range; cauchy: a vanishing sum), as the local mean's far rows
/// (docs/numerics.md, "Far rows"): log-weights shifted by the row's
/// largest, slopes relative to the weight.
fn finish_far_rows(profile: Profile, data: &Data<'_>, h: &[f32], states: &mut GradStates) {
    if profile.is_compact() {
        return;
    }
    let (n, d, q) = (data.x.rows(), data.x.cols(), data.y.cols());
    let (x, y) = (data.x.as_slice(), data.y.as_slice());
    let h: Vec<f64> = h.iter().map(|&v| f64::from(v)).collect();
    for i in 0..n {
        let s = states.row(i)[1];
        let far = match profile {
            Profile::Cauchy => s.is_nan() || s < CAUCHY_EXACT_BELOW,
            _ => s.is_nan() || s <= 0.0,
        };
        if !far {
            continue;
        }
        let rec = states.row_mut(i);
        exact_row(profile, (x, y), (n, d, q), &h, i, rec);
    }
}

/// Row `i`'s record over every other key, all in `f64`.
fn exact_row(
    profile: Profile,
    (x, y): (&[f32], &[f32]),
    (n, d, q): (usize, usize, usize),
    h: &[f64],
    i: usize,
    rec: &mut [f64],
) {
    let xi = &x[i * d..(i + 1) * d];
    let t_of = |j: usize| -> f64 {
        (0..d)
            .map(|a| ((f64::from(x[j * d + a]) - f64::from(xi[a])) / h[a]).powi(2))
            .sum()
    };
    let lw: Vec<(usize, f64)> = (0..n)
        .filter(|&j| j != i)
        .map(|j| (j, log_weight(profile, t_of(j))))
        .filter(|p| p.1 > f64::NEG_INFINITY)
        .collect();
    rec.fill(0.0);
    let m = lw.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
    rec[0] = m;
    if m == f64::NEG_INFINITY {
        return;
    }
    for &(j, l) in &lw {
        let t = t_of(j);
        let w = (l - m).exp();
        // k'/k: the exponential profiles' slope is already relative.
        let ratio = match profile {
            Profile::Cauchy => -1.0 / (1.0 + t),
            p => p.slope_sq(t),
        };
        let c = w * ratio;
        rec[1] += w;
        for cc in 0..q {
            let dl = f64::from(y[j * q + cc]) - f64::from(y[i * q + cc]);
            rec[2 + cc] += w * dl;
            for a in 0..d {
                let u = (f64::from(x[j * d + a]) - f64::from(xi[a])) / h[a];
                let e = c * u * u;
                if cc == 0 {
                    rec[2 + q + a] += e;
                }
                rec[2 + q + d + a * q + cc] += e * dl;
            }
        }
    }
}

/// The points a search has scored, so that none is scored twice (each
/// score is one `O(n²)` pass).
#[derive(Default)]
struct Seen(std::cell::RefCell<Vec<(Vec<u64>, PerFeatureLoo)>>);

impl Seen {
    /// The score at `h`: remembered, or `score()` remembered.
    fn evaluate(
        &self,
        h: &[f64],
        score: impl FnOnce() -> Result<PerFeatureLoo>,
    ) -> Result<PerFeatureLoo> {
        let key: Vec<u64> = h.iter().map(|v| v.to_bits()).collect();
        if let Some((_, s)) = self.0.borrow().iter().find(|(k, _)| *k == key) {
            return Ok(s.clone());
        }
        let s = score()?;
        self.0.borrow_mut().push((key, s.clone()));
        Ok(s)
    }

    /// How many points were scored.
    fn count(&self) -> usize {
        self.0.borrow().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array2;

    /// A search scores each point once: the grid's best start is not
    /// scored again by the minimizer, nor its end by the result; the count
    /// it reports is the points it scored.
    #[test]
    fn no_point_is_scored_twice() {
        let seen = Seen::default();
        let calls = std::cell::Cell::new(0);
        let score = |h: &[f64]| {
            calls.set(calls.get() + 1);
            Ok(PerFeatureLoo {
                bandwidths: h.iter().map(|&v| v as f32).collect(),
                error: h[0],
                gradient: vec![0.0; h.len()],
                empty_rows: 0,
            })
        };
        for h in [[1.0, 2.0], [1.0, 2.0], [1.5, 2.0], [1.0, 2.0]] {
            let s = seen.evaluate(&h, || score(&h)).unwrap();
            assert_eq!(s.error, h[0]);
        }
        assert_eq!((calls.get(), seen.count()), (2, 2));

        // A whole search: its evaluations are distinct points.
        let e = Engine::cpu();
        let x = Array2::from_shape_fn((40, 2), |(i, k)| ((i * 7 + k * 3) % 11) as f32 * 0.3);
        let y = Array2::from_shape_fn((40, 1), |(i, _)| (i % 5) as f32);
        let sel = e
            .select_bandwidths_per_feature(
                Profile::Gaussian,
                x.view(),
                Some(y.view()),
                &PerFeatureOptions::default(),
            )
            .unwrap();
        assert!(sel.evaluations >= START_GRID.len() + sel.iterations);
    }
}
