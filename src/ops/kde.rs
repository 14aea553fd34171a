//! Kernel density estimation with exact normalizing constants.

use ndarray::{Array1, ArrayView1, ArrayView2};

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::kernel::{Kernel, Profile};
use crate::matrix::Matrix;
use crate::types::RowStates;

use super::{Inputs, OnKeys, call};
use crate::backend::Call;

/// `ln V_d`, the log-volume of the unit ball in `d` dimensions
/// (`V_0 = 1`, `V_1 = 2`, `V_d = V_{d−2}·2π/d`).
fn ln_unit_ball(d: usize) -> f64 {
    let mut v = if d.is_multiple_of(2) { 0.0 } else { 2f64.ln() };
    let mut k = if d.is_multiple_of(2) { 2 } else { 3 };
    while k <= d {
        v += (2.0 * std::f64::consts::PI / k as f64).ln();
        k += 2;
    }
    v
}

/// `ln(c/V_d)` of the cosine profile in `d` dimensions, from
/// `c = S_{d−1} ∫₀¹ r^{d−1} cos(πr/2) dr` with `S_{d−1} = d·V_d`.
/// Substituting `s = 1 − r` and expanding `sin(πs/2)` gives Beta integrals,
/// so `c = V_d · (π/2)/(d+1) · Σ_k a_k` with `a_0 = 1` and
/// `a_k = −a_{k−1}·(π/2)²/((d+2k)(d+2k+1))`: an alternating series whose
/// ratio is at most `π²/48 ≈ 0.21`, so it converges to `f64` accuracy
/// in ten terms without cancellation, for every `d` (the recurrence
/// `I_n = 2/π − (4n(n−1)/π²)·I_{n−2}`, which scikit-learn sums forward,
/// loses about a digit per two dimensions).
fn ln_cosine_over_ball(d: usize) -> f64 {
    let df = d as f64;
    let q = std::f64::consts::FRAC_PI_2.powi(2);
    let (mut a, mut sum) = (1.0f64, 1.0f64);
    for k in 1.. {
        let k = f64::from(k);
        a *= -q / ((df + 2.0 * k) * (df + 2.0 * k + 1.0));
        sum += a;
        if a.abs() < 1e-18 * sum {
            break;
        }
    }
    (std::f64::consts::FRAC_PI_2 / (df + 1.0)).ln() + sum.ln()
}

/// `ln c_k`, where `c_k = ∫_{ℝᵈ} k(‖u‖) du` is the profile's normalizing
/// constant in `d` dimensions, so that `K(x, ·)/(hᵈ c_k)` integrates to 1.
///
/// | profile | c_k |
/// |---|---|
/// | gaussian | (2π)^{d/2} |
/// | uniform | V_d |
/// | epanechnikov | V_d · 2/(d+2) |
/// | biweight | V_d · 8/((d+2)(d+4)) |
/// | triangular | V_d / (d+1) |
/// | laplacian | V_d · d! |
/// | cauchy | π (d = 1 only) |
/// | cosine | V_d · (π/2)/(d+1) · Σ_k a_k (`ln_cosine_over_ball`) |
///
/// with `V_d` the volume of the unit ball.
///
/// # Errors
/// [`Error::Unsupported`] for the cauchy profile in `d ≥ 2`, where
/// `∫ r^{d−1}/(1+r²) dr` diverges; [`Error::InvalidParameter`] for `d = 0`.
pub fn ln_normalizer(profile: Profile, d: usize) -> Result<f64> {
    if d == 0 {
        return Err(Error::InvalidParameter {
            name: "d",
            reason: "a density needs at least one dimension".into(),
        });
    }
    let df = d as f64;
    let lv = ln_unit_ball(d);
    Ok(match profile {
        Profile::Gaussian => 0.5 * df * (2.0 * std::f64::consts::PI).ln(),
        Profile::Uniform => lv,
        Profile::Epanechnikov => lv + (2.0 / (df + 2.0)).ln(),
        Profile::Biweight => lv + (8.0 / ((df + 2.0) * (df + 4.0))).ln(),
        Profile::Triangular => lv - (df + 1.0).ln(),
        Profile::Cosine => lv + ln_cosine_over_ball(d),
        Profile::Laplacian => lv + (1..=d).map(|k| (k as f64).ln()).sum::<f64>(),
        Profile::Cauchy => {
            if d != 1 {
                return Err(Error::Unsupported {
                    op: "density",
                    backend: "any",
                    reason: format!(
                        "the cauchy profile has no finite integral in d = {d} (only in d = 1); it cannot be normalized into a density"
                    ),
                });
            }
            std::f64::consts::PI.ln()
        }
    })
}

/// `ln C` of a kernel in `d` dimensions: [`ln_normalizer`] of its profile,
/// or for a product kernel the sum of its blocks' (each in its own
/// dimension: the integral of a product is the product of integrals).
///
/// # Errors
/// As [`ln_normalizer`] (for any block); [`Error::KernelDimension`] when a
/// product's blocks do not cover `d`.
pub(crate) fn kernel_ln_normalizer(kernel: &Kernel, d: usize) -> Result<f64> {
    kernel.check_dim("density", d)?;
    match kernel.blocks() {
        None => ln_normalizer(kernel.profile(), d),
        Some(bs) => bs.iter().map(|b| ln_normalizer(b.profile, b.dims)).sum(),
    }
}

/// `ln(W·Π h·C)`: what a kernel sum's log is lowered by to give a log
/// density, for total key weight `W` (N for unweighted keys) in `d`
/// dimensions, with `ln_c = ln C` from [`kernel_ln_normalizer`] and `Π h`
/// the product of the coordinates' bandwidths (`hᵈ` for a radial kernel).
pub(crate) fn ln_density_scale(ln_c: f64, kernel: &Kernel, d: usize, total_weight: f64) -> f64 {
    total_weight.ln() + kernel.ln_bandwidth_volume(d) + ln_c
}

impl Engine {
    /// Kernel density estimate at each query,
    /// `p̂(q) = Σ_j w_j k(‖q − x_j‖/h) / (W hᵈ c_k)` with `W = Σ_j w_j`
    /// (`w_j = 1` without `weights`), normalized with the profile's exact
    /// constant in `d` dimensions ([`ln_normalizer`]).
    ///
    /// Values may underflow `f64` far from the data; use
    /// [`log_density`](Self::log_density) there.
    ///
    /// # Errors
    /// As [`log_density`](Self::log_density).
    pub fn density(
        &self,
        kernel: &Kernel,
        queries: ArrayView2<'_, f32>,
        keys: ArrayView2<'_, f32>,
        weights: Option<ArrayView1<'_, f32>>,
    ) -> Result<Array1<f64>> {
        Ok(self
            .log_density(kernel, queries, keys, weights)?
            .mapv(f64::exp))
    }

    /// `ln p̂(q)` per query, computed in the log domain: for profiles with
    /// full support (gaussian, laplacian, cauchy) a query far from every key
    /// gets a finite, very negative value, not −inf, wherever that value
    /// fits in `f32` (rows whose keys all lie beyond the `f32` distance
    /// range are finished in `f64`; below the `f32` range the result is
    /// −inf, see docs/numerics.md); compact profiles give −inf outside the
    /// support (the density is exactly 0 there). With `weights`, the
    /// running maximum includes `ln w_j`, so keys of weight 0 nearest the
    /// query do not hide the others.
    ///
    /// # Errors
    /// Empty or non-finite inputs, dimension mismatch, `weights` of the
    /// wrong length, negative or non-finite, or summing to 0; the cauchy
    /// profile in `d ≥ 2`.
    pub fn log_density(
        &self,
        kernel: &Kernel,
        queries: ArrayView2<'_, f32>,
        keys: ArrayView2<'_, f32>,
        weights: Option<ArrayView1<'_, f32>>,
    ) -> Result<Array1<f64>> {
        const OP: &str = "density";
        let Inputs { q, x, .. } = Inputs::check(OP, Some(kernel), queries, keys, None)?;
        let d = x.cols();
        // Before the weights: the cauchy profile in d ≥ 2 has no density.
        let ln_c = kernel_ln_normalizer(kernel, d)?;
        let w = weights
            .map(|w| check_weights(OP, w, x.rows()))
            .transpose()?;
        let total = w.as_ref().map_or(x.rows() as f64, |w| {
            w.iter().map(|&v| f64::from(v)).sum::<f64>()
        });
        let Some(w) = &w else {
            // Unweighted: what a key set answers, on keys prepared for this call.
            let call = Call::means("row_states", kernel, q.rows(), 0);
            let keys = self.backend_impl().prepare_call(&x, &[], &call)?;
            let (n, extent) = (x.rows(), 0.0);
            return OnKeys {
                keys: &*keys,
                n,
                d,
                extent,
                threads: self.threads_impl(),
            }
            .log_density(kernel, &q);
        };
        let norm = ln_density_scale(ln_c, kernel, d, total);
        let log_mass = self.weighted_log_mass(kernel, &q, &x, w)?;
        Ok(log_mass.mapv(|l| l - norm))
    }

    /// `ln Σ_j w_j K(q_i, x_j)` per query, with the running maximum taken
    /// over log-weights that include `ln w_j` (docs/numerics.md): keys
    /// with weight 0 are dropped, the others are grouped by the binary
    /// exponent of their weight ([`WEIGHT_BAND`] binades per group), each
    /// group's states are computed with `w_j / 2^e ∈ [1, 2^WEIGHT_BAND)`
    /// as the value, shifted by `ln 2^e` and merged. Within a group the
    /// largest kernel log-weight and the largest weighted one differ by
    /// less than `WEIGHT_BAND · ln 2`, so the weighted sum cannot underflow
    /// the way it does when a zero- or tiny-weight key is the nearest.
    fn weighted_log_mass(
        &self,
        kernel: &Kernel,
        q: &Matrix<'_>,
        x: &Matrix<'_>,
        w: &Array1<f32>,
    ) -> Result<Array1<f64>> {
        const OP: &str = "density";
        let mut groups: Vec<(i32, Vec<usize>)> = Vec::new();
        for (j, &v) in w.iter().enumerate() {
            if v > 0.0 {
                let e = band_of(v);
                match groups.iter_mut().find(|(g, _)| *g == e) {
                    Some((_, idx)) => idx.push(j),
                    None => groups.push((e, vec![j])),
                }
            }
        }
        let d = x.cols();
        let mut total: Option<RowStates> = None;
        for (e, idx) in &groups {
            let scale = (f64::from(*e) * f64::from(WEIGHT_BAND)).exp2();
            let (keys, vals) = if idx.len() == w.len() {
                (None, w.mapv(|v| (f64::from(v) / scale) as f32))
            } else {
                let mut k = Vec::with_capacity(idx.len() * d);
                for &j in idx {
                    k.extend_from_slice(x.row_range(j, j + 1));
                }
                (
                    Some(k),
                    idx.iter()
                        .map(|&j| (f64::from(w[j]) / scale) as f32)
                        .collect::<Array1<f32>>(),
                )
            };
            let keys_view = keys
                .as_ref()
                .map(|k| ArrayView2::from_shape((idx.len(), d), k))
                .transpose()
                .map_err(|e| Error::InvalidParameter {
                    name: "keys",
                    reason: e.to_string(),
                })?;
            let keys_m = match &keys_view {
                Some(v) => Matrix::check(OP, "keys", v.view())?,
                None => x.clone(),
            };
            let vm = vals.view().insert_axis(ndarray::Axis(1));
            let vals_m = Matrix::check(OP, "weights", vm)?;
            let keys = (&keys_m, Some(&vals_m));
            let mut st = call::row_states(self.backend_impl(), kernel, q, keys, false)?;
            // The weighted sum becomes the state's sum: Σ w K = 2^e·e^m·u.
            st.sum.assign(&st.weighted.column(0));
            st.normalize_empty();
            st.scale_weights(scale)?;
            match &mut total {
                Some(t) => t.merge(&st)?,
                None => total = Some(st),
            }
        }
        Ok(total.map_or_else(
            || Array1::from_elem(q.rows(), f64::NEG_INFINITY),
            |t| t.log_sum(),
        ))
    }
}

/// Binades of weight per group of [`Engine::weighted_log_mass`]: a
/// group's values lie in `[1, 2^32)`, far inside `f32`, and a key whose
/// kernel weight is `e^{-87}` below the group's largest (where the kernels
/// flush to 0) would contribute under `2^32·e^{-87} ≈ 7·10⁻²⁹` of it.
const WEIGHT_BAND: i32 = 32;

/// The group of a positive weight: `⌊log₂ w / WEIGHT_BAND⌋`.
fn band_of(w: f32) -> i32 {
    (f64::from(w).log2().floor() as i32).div_euclid(WEIGHT_BAND)
}

/// Per-key weights: one per key, finite, non-negative, positive sum.
pub(crate) fn check_weights(
    op: &'static str,
    w: ArrayView1<'_, f32>,
    n: usize,
) -> Result<Array1<f32>> {
    if w.len() != n {
        return Err(Error::RowMismatch {
            op,
            keys: n,
            values: w.len(),
        });
    }
    if let Some((i, &v)) = w
        .iter()
        .enumerate()
        .find(|(_, v)| !v.is_finite() || **v < 0.0)
    {
        return Err(Error::InvalidParameter {
            name: "weights",
            reason: format!("weights must be finite and non-negative; weight {i} is {v}"),
        });
    }
    if w.iter().all(|&v| v == 0.0) {
        return Err(Error::InvalidParameter {
            name: "weights",
            reason: "the weights sum to zero".into(),
        });
    }
    Ok(w.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_ball_volumes() {
        let pi = std::f64::consts::PI;
        for (d, v) in [(1, 2.0), (2, pi), (3, 4.0 / 3.0 * pi), (4, pi * pi / 2.0)] {
            assert!((ln_unit_ball(d).exp() - v).abs() < 1e-12, "d={d}");
        }
    }

    #[test]
    fn one_dimensional_constants_match_direct_integrals() {
        // ∫_ℝ k(|r|) dr, by the midpoint rule on [−50, 50].
        for p in Profile::ALL {
            let n = 2_000_000;
            let dr = 100.0 / n as f64;
            let integral: f64 = (0..n)
                .map(|i| {
                    let r = -50.0 + (i as f64 + 0.5) * dr;
                    p.eval_sq(r * r) * dr
                })
                .sum();
            let c = ln_normalizer(p, 1).unwrap().exp();
            let tol = if p == Profile::Cauchy { 2e-2 } else { 1e-6 };
            assert!((integral - c).abs() < tol * c, "{p}: {integral} vs {c}");
        }
        assert!(matches!(
            ln_normalizer(Profile::Cauchy, 2),
            Err(Error::Unsupported { .. })
        ));
    }

    /// The cosine constant against its closed forms in d = 1, 2, 3
    /// (`4/π`, `4 − 8/π`, `8 − 64/π²`, by parts) and a midpoint rule on the
    /// radial integral `S_{d−1} ∫₀¹ r^{d−1} cos(πr/2) dr` in d = 10 and
    /// d = 60 (where the forward recurrence has lost every digit).
    #[test]
    fn cosine_constant_matches_closed_forms_and_quadrature() {
        let pi = std::f64::consts::PI;
        for (d, c) in [
            (1, 4.0 / pi),
            (2, 4.0 - 8.0 / pi),
            (3, 8.0 - 64.0 / (pi * pi)),
        ] {
            let got = ln_normalizer(Profile::Cosine, d).unwrap().exp();
            assert!((got / c - 1.0).abs() < 1e-14, "d={d}: {got} vs {c}");
        }
        for d in [10usize, 60] {
            let n = 200_000;
            let dr = 1.0 / n as f64;
            let radial: f64 = (0..n)
                .map(|i| {
                    let r = (i as f64 + 0.5) * dr;
                    r.powi(d as i32 - 1) * (pi * r / 2.0).cos() * dr
                })
                .sum();
            // S_{d−1} = d·V_d.
            let want = (d as f64).ln() + ln_unit_ball(d) + radial.ln();
            let got = ln_normalizer(Profile::Cosine, d).unwrap();
            assert!((got - want).abs() < 1e-8, "d={d}: {got} vs {want}");
        }
    }
}
