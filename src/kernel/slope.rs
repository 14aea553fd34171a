//! The profiles' slopes `k'(t) = dk/dt` in `t = r²`, for the gradient of
//! the leave-one-out error with respect to per-feature bandwidths
//! (docs/numerics.md, "Per-feature bandwidths"). Written once over a
//! numeric [`Lane`] like the weights of `form.rs`; `shaders/loo_grad.wgsl`
//! is the one other writing of them.
//!
//! For the exponential profiles (accumulated in the log domain) the slope
//! is given relative to the weight, `k'(t)/k(t)` (gaussian `−½`, laplacian
//! `−1/(2√t)`), so that it multiplies the row's shifted weight and the
//! shift by the row's largest log-weight applies to the slope sums too;
//! for the others it is `k'(t)` itself.
//!
//! Imports: `super::form` (the lane arithmetic) and `super::profile`.

use super::form::Lane;
use super::profile::Profile;

/// The cosine profile's slope `k'(t) = −(π/4)·sin(π√t/2)/√t` on
/// `0 ≤ t < 1` as the polynomial `Σ_m (m+1)·c_{m+1} tᵐ` of the series
/// `cos(π√t/2) = Σ c_m tᵐ` (no square root, no sine), lowest power
/// first; truncated after `t⁶`: off by at most `5.3·10⁻¹⁰` (of
/// `|k'| ≥ π/4` on the support: well below an `f32` ulp). `loo_grad.wgsl`
/// evaluates the same coefficients (generated).
pub(crate) const COSINE_SLOPE_POLY: [f32; 7] = [
    -1.233_700_5,
    0.507_339,
    -0.062_590_44,
    0.003_677_041,
    -1.260_102_1e-4,
    2.826_525e-6,
    -4.470_622e-8,
];

impl Profile {
    /// Whether the profile has a slope the bandwidths can follow: every
    /// profile but the uniform, whose `k` is flat (its derivative is zero
    /// wherever it exists, and the error is a step function of `h`).
    pub fn is_differentiable(self) -> bool {
        self != Profile::Uniform
    }

    /// The slope in `f64` as the gradient's `f32` kernels use it:
    /// `k'(t)/k(t)` for the exponential profiles, `k'(t)` for the others
    /// (0 outside a compact support and for the uniform). The plain
    /// definition, with `f64`'s own sine for the cosine.
    pub fn slope_sq(self, t: f64) -> f64 {
        match self {
            Profile::Cosine if t > 0.0 && t < 1.0 => {
                let r = t.sqrt();
                -std::f64::consts::FRAC_PI_4 * (std::f64::consts::FRAC_PI_2 * r).sin() / r
            }
            p => slope(p, t),
        }
    }
}

/// The slope of `profile` at the scaled squared distance `t` (module
/// docs: relative to the weight for the exponential profiles). Beyond a
/// compact support, and at `t = 0` for the two profiles with a `√t`
/// (laplacian, triangular: their `k'·u²` tends to 0 there, `u² ≤ t`), 0.
#[inline(always)]
pub(crate) fn slope<L: Lane>(profile: Profile, t: L) -> L {
    let zero = t.lit(0.0);
    let one = t.lit(1.0);
    // `−1/(2√t)` for t > 0, else 0.
    let half_root = |t: L| {
        let s = t.sqrt().max(t.lit(f32::MIN_POSITIVE));
        t.select_lt(t.lit(f32::MIN_POSITIVE), zero, t.lit(-0.5).div(s))
    };
    match profile {
        Profile::Gaussian => t.lit(-0.5),
        Profile::Laplacian => half_root(t),
        Profile::Epanechnikov => t.select_lt(one, t.lit(-1.0), zero),
        Profile::Uniform => zero,
        Profile::Triangular => t.select_lt(one, half_root(t), zero),
        Profile::Biweight => one.sub(t).max(zero).mul(t.lit(-2.0)),
        Profile::Cauchy => {
            let a = one.add(t);
            t.unless_far(t.lit(-1.0).div(a.mul(a)), zero)
        }
        Profile::Cosine => {
            let c = COSINE_SLOPE_POLY;
            let mut p = t.lit(c[6]);
            for &k in c[..6].iter().rev() {
                p = p.mul_add(t, t.lit(k));
            }
            t.select_lt(one, p, zero)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each slope against a central difference of the profile's `f64`
    /// weight (divided by the weight for the exponential ones), and the
    /// `f32` lanes against the `f64` definition.
    #[test]
    fn slopes_are_the_profiles_derivatives() {
        for p in Profile::ALL {
            if !p.is_differentiable() {
                assert_eq!(slope(p, 0.3f64), 0.0);
                continue;
            }
            for t in [0.01f64, 0.2, 0.5, 0.81, 0.99, 1.7, 9.0] {
                let e = 1e-6;
                let fd = (p.eval_sq(t + e) - p.eval_sq(t - e)) / (2.0 * e);
                let want = if p.is_exponential() {
                    fd / p.eval_sq(t)
                } else {
                    fd
                };
                let got = p.slope_sq(t);
                assert!(
                    (got - want).abs() <= 1e-6 * want.abs().max(1.0),
                    "{p} t={t}: {got} vs {want}"
                );
                // At the f32 value of t (1 − t cancels near the edge).
                let tf = t as f32;
                let lane = f64::from(slope(p, tf));
                let exact = p.slope_sq(f64::from(tf));
                assert!(
                    (lane - exact).abs() <= 4e-7 * exact.abs().max(1e-3),
                    "{p} t={t}: f32 {lane} vs {exact}"
                );
            }
            // Beyond a compact support, nothing.
            if p.is_compact() {
                assert_eq!(slope(p, 1.5f32), 0.0, "{p}");
            }
        }
        assert_eq!(slope(Profile::Laplacian, 0.0f32), 0.0);
        assert_eq!(slope(Profile::Triangular, 0.0f32), 0.0);
        assert_eq!(slope(Profile::Cauchy, crate::kernel::T_FAR), 0.0);
        assert!((slope(Profile::Cosine, 0.0f32) + 1.233_700_5).abs() < 1e-7);
    }
}
