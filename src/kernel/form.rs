//! The eight profiles' formulas, written once over a numeric [`Lane`]
//! type: the `f64` reference ([`Profile::eval_sq`], the far-row log
//! weights of `exact.rs`), the scalar `f32` kernels of the CPU (one lane,
//! vectorized by LLVM over lane groups) and the AVX2 kernel (eight lanes in
//! a register, `cpu/local_mean/avx2.rs`) all evaluate the same [`Form`].
//! `shaders/profiles.wgsl` is the one other writing of them.
//!
//! Imports: `super::profile` (the [`Profile`] enum) only.

use super::profile::Profile;

/// A key's scaled squared distance `t = r²/h²` at or beyond this counts as
/// infinitely far: its weight is zero for every profile, on both backends
/// (docs/numerics.md, "Far rows").
pub(crate) const T_FAR: f32 = 1.0e37;

/// The cosine profile's polynomial `P(t) = cos(π√t/2)/(1 − t)` on
/// `0 ≤ t ≤ 1`, lowest power first: the coefficients are the partial sums
/// `Σ_{m≤n} c_m` of the series `cos(π√t/2) = Σ c_m t^m`,
/// `c_m = (−1)^m (π²/4)^m/(2m)!`, so that `(1 − t)·P(t)` is the profile
/// with its zero at `t = 1` exact. Truncated after `t⁵`: `P` is off by at
/// most `6.3·10⁻⁹` (of `P ≥ π/4`: 0.14 of an `f32` ulp), so the `f32`
/// weight is accurate to a few units in the last place, relative, up to
/// the support's edge. `profiles.wgsl` evaluates the same coefficients
/// (generated).
pub(crate) const COSINE_POLY: [f32; 6] = [
    1.0,
    -0.233_700_55,
    0.019_968_958,
    -8.945_23e-4,
    2.473_727_6e-5,
    -4.647_66e-7,
];

impl Profile {
    /// Whether the weights are exponentials, accumulated in the log domain
    /// with a running maximum (docs/numerics.md).
    pub fn is_exponential(self) -> bool {
        with_form!(self, P => P::LOG)
    }

    /// `k(r)` in `f64`, from the scaled squared distance `t = r²`.
    ///
    /// This is the plain definition; the engines use the log-domain form for
    /// exponential profiles.
    pub fn eval_sq(self, t: f64) -> f64 {
        with_form!(self, P => P::eval(t))
    }

    /// `ln k(r)` from `t = r²` for the exponential profiles (`−t/2`, `−√t`);
    /// `None` for the others.
    pub fn log_eval_sq(self, t: f64) -> Option<f64> {
        with_form!(self, P => P::LOG.then(|| P::lane(t)))
    }
}

/// The arithmetic the profiles need, on one value or a group of lanes.
///
/// Every method takes `self` (or a lane) so that a lane type may carry a
/// proof of the instructions it needs (the AVX2 lanes carry the CPU
/// feature token).
pub(crate) trait Lane: Copy {
    /// A lane of the same kind holding `x` in every lane.
    fn lit(self, x: f32) -> Self;
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    /// `self·a + b`: one fused multiply-add where the lane type has the
    /// instruction (the AVX2 lanes), else a multiply and an add (a fused
    /// one in software would be far slower).
    fn mul_add(self, a: Self, b: Self) -> Self;
    fn div(self, o: Self) -> Self;
    fn neg(self) -> Self;
    fn sqrt(self) -> Self;
    /// `self` where `self > o`, else `o` (inputs are never NaN here).
    fn max(self, o: Self) -> Self;
    /// `then` where `self < bound`, else `otherwise`, lane by lane.
    fn select_lt(self, bound: Self, then: Self, otherwise: Self) -> Self;
    /// `near` where the scaled squared distance `self` lies below
    /// [`T_FAR`], else `far` (docs/numerics.md, "Far rows"). The `f64`
    /// reference has no such cut: `t` cannot overflow there.
    fn unless_far(self, near: Self, far: Self) -> Self;
}

impl Lane for f64 {
    #[inline(always)]
    fn lit(self, x: f32) -> f64 {
        f64::from(x)
    }
    #[inline(always)]
    fn add(self, o: f64) -> f64 {
        self + o
    }
    #[inline(always)]
    fn sub(self, o: f64) -> f64 {
        self - o
    }
    #[inline(always)]
    fn mul(self, o: f64) -> f64 {
        self * o
    }
    #[inline(always)]
    fn mul_add(self, a: f64, b: f64) -> f64 {
        self * a + b
    }
    #[inline(always)]
    fn div(self, o: f64) -> f64 {
        self / o
    }
    #[inline(always)]
    fn neg(self) -> f64 {
        -self
    }
    #[inline(always)]
    fn sqrt(self) -> f64 {
        f64::sqrt(self)
    }
    #[inline(always)]
    fn max(self, o: f64) -> f64 {
        f64::max(self, o)
    }
    #[inline(always)]
    fn select_lt(self, bound: f64, then: f64, otherwise: f64) -> f64 {
        if self < bound { then } else { otherwise }
    }
    #[inline(always)]
    fn unless_far(self, near: f64, _far: f64) -> f64 {
        near
    }
}

impl Lane for f32 {
    #[inline(always)]
    fn lit(self, x: f32) -> f32 {
        x
    }
    #[inline(always)]
    fn add(self, o: f32) -> f32 {
        self + o
    }
    #[inline(always)]
    fn sub(self, o: f32) -> f32 {
        self - o
    }
    #[inline(always)]
    fn mul(self, o: f32) -> f32 {
        self * o
    }
    #[inline(always)]
    fn mul_add(self, a: f32, b: f32) -> f32 {
        self * a + b
    }
    #[inline(always)]
    fn div(self, o: f32) -> f32 {
        self / o
    }
    #[inline(always)]
    fn neg(self) -> f32 {
        -self
    }
    #[inline(always)]
    fn sqrt(self) -> f32 {
        f32::sqrt(self)
    }
    /// Branch-free, lowers to `maxps`.
    #[inline(always)]
    fn max(self, o: f32) -> f32 {
        if self > o { self } else { o }
    }
    #[inline(always)]
    fn select_lt(self, bound: f32, then: f32, otherwise: f32) -> f32 {
        if self < bound { then } else { otherwise }
    }
    #[inline(always)]
    fn unless_far(self, near: f32, far: f32) -> f32 {
        if self < T_FAR { near } else { far }
    }
}

/// One profile's formula, from the scaled squared distance `t = r²`.
pub(crate) trait Form {
    /// Whether [`Form::lane`] is the log-weight `ln k` (accumulated in the
    /// log domain with a running maximum) rather than the weight `k`.
    const LOG: bool;

    /// What the kernels accumulate for a key at `t`: `ln k(t)` when
    /// [`Form::LOG`] (−inf for a key beyond [`T_FAR`]), else `k(t)` (0
    /// beyond [`T_FAR`]).
    fn lane<L: Lane>(t: L) -> L;

    /// `k(t)` in `f64`, the plain definition.
    #[inline]
    fn eval(t: f64) -> f64 {
        let v = Self::lane(t);
        if Self::LOG { v.exp() } else { v }
    }

    /// `ln k(t)` in `f64` for the far rows of a full-support profile
    /// (docs/numerics.md, "Far rows").
    #[inline]
    fn exact_log_weight(t: f64) -> f64 {
        let v = Self::lane(t);
        if Self::LOG { v } else { v.ln() }
    }
}

/// `exp(−r²/2)`.
pub(crate) struct Gaussian;
/// `(1 − r²)₊`.
pub(crate) struct Epanechnikov;
/// `1[r < 1]`.
pub(crate) struct Uniform;
/// `(1 − r)₊`.
pub(crate) struct Triangular;
/// `((1 − r²)₊)²`.
pub(crate) struct Biweight;
/// `exp(−r)`.
pub(crate) struct Laplacian;
/// `1 / (1 + r²)`.
pub(crate) struct Cauchy;
/// `cos(πr/2)` for `r < 1`.
pub(crate) struct Cosine;

impl Form for Gaussian {
    const LOG: bool = true;
    #[inline(always)]
    fn lane<L: Lane>(t: L) -> L {
        t.unless_far(t.mul(t.lit(-0.5)), t.lit(f32::NEG_INFINITY))
    }
}

impl Form for Laplacian {
    const LOG: bool = true;
    #[inline(always)]
    fn lane<L: Lane>(t: L) -> L {
        t.unless_far(t.sqrt().neg(), t.lit(f32::NEG_INFINITY))
    }
}

impl Form for Epanechnikov {
    const LOG: bool = false;
    #[inline(always)]
    fn lane<L: Lane>(t: L) -> L {
        t.lit(1.0).sub(t).max(t.lit(0.0))
    }
}

impl Form for Uniform {
    const LOG: bool = false;
    #[inline(always)]
    fn lane<L: Lane>(t: L) -> L {
        t.select_lt(t.lit(1.0), t.lit(1.0), t.lit(0.0))
    }
}

impl Form for Triangular {
    const LOG: bool = false;
    #[inline(always)]
    fn lane<L: Lane>(t: L) -> L {
        t.lit(1.0).sub(t.sqrt()).max(t.lit(0.0))
    }
}

impl Form for Biweight {
    const LOG: bool = false;
    #[inline(always)]
    fn lane<L: Lane>(t: L) -> L {
        let a = t.lit(1.0).sub(t).max(t.lit(0.0));
        a.mul(a)
    }
}

impl Form for Cauchy {
    const LOG: bool = false;
    #[inline(always)]
    fn lane<L: Lane>(t: L) -> L {
        let one = t.lit(1.0);
        t.unless_far(one.div(one.add(t)), t.lit(0.0))
    }
    /// `−ln(1 + t)`, accurate for small `t` too.
    #[inline]
    fn exact_log_weight(t: f64) -> f64 {
        -t.ln_1p()
    }
}

impl Form for Cosine {
    const LOG: bool = false;
    /// `(1 − t)·P(t)` ([`COSINE_POLY`], Horner) inside the support: no
    /// square root, no cosine, the same arithmetic on every lane.
    #[inline(always)]
    fn lane<L: Lane>(t: L) -> L {
        let [c0, c1, c2, c3, c4, c5] = COSINE_POLY;
        let mut p = t.lit(c5);
        for c in [c4, c3, c2, c1, c0] {
            p = p.mul_add(t, t.lit(c));
        }
        let one = t.lit(1.0);
        t.select_lt(one, one.sub(t).mul(p), t.lit(0.0))
    }
    /// `cos(π√t/2)` for `t < 1` from `f64`'s own cosine: the reference the
    /// polynomial is checked against.
    #[inline]
    fn eval(t: f64) -> f64 {
        if t < 1.0 {
            (std::f64::consts::FRAC_PI_2 * t.sqrt()).cos()
        } else {
            0.0
        }
    }
    #[inline]
    fn exact_log_weight(t: f64) -> f64 {
        Self::eval(t).ln()
    }
}

/// Adds one block's share of a product kernel's carrier `t` — `−2 ln k(t_b)`
/// (+inf where `k = 0`), so the product's weight is `exp(−t/2)` — to `t`,
/// from the block's scaled squared distances `t_b` (one per key, formed
/// from differences already divided by `h_b`); docs/numerics.md, "Product
/// kernels".
///
/// No block is cut at [`T_FAR`]: only the sum is (by the gaussian carrier),
/// since a key far in one block may still outweigh keys far in another.
#[inline(always)]
pub(crate) fn add_carrier_ts(profile: Profile, t_b: &[f32], t: &mut [f32]) {
    use Profile as P;
    match profile {
        P::Gaussian => {
            for (tj, &x) in t.iter_mut().zip(t_b) {
                *tj += x;
            }
        }
        P::Laplacian => {
            for (tj, &x) in t.iter_mut().zip(t_b) {
                *tj += 2.0 * x.sqrt();
            }
        }
        P::Cauchy => {
            for (tj, &x) in t.iter_mut().zip(t_b) {
                *tj += 2.0 * x.ln_1p();
            }
        }
        P::Uniform => {
            for (tj, &x) in t.iter_mut().zip(t_b) {
                *tj += if x < 1.0 { 0.0 } else { f32::INFINITY };
            }
        }
        compact => with_form!(compact, F => {
            for (tj, &x) in t.iter_mut().zip(t_b) {
                *tj += -2.0 * F::lane(x).ln();
            }
        }),
    }
}

/// Evaluates `$body` with `$P` bound to the [`Form`] of `$profile`: the one
/// place a [`Profile`] value turns into its formula's type.
macro_rules! with_form {
    ($profile:expr, $P:ident => $body:expr) => {{
        match $profile {
            $crate::kernel::Profile::Gaussian => {
                type $P = $crate::kernel::form::Gaussian;
                $body
            }
            $crate::kernel::Profile::Epanechnikov => {
                type $P = $crate::kernel::form::Epanechnikov;
                $body
            }
            $crate::kernel::Profile::Uniform => {
                type $P = $crate::kernel::form::Uniform;
                $body
            }
            $crate::kernel::Profile::Triangular => {
                type $P = $crate::kernel::form::Triangular;
                $body
            }
            $crate::kernel::Profile::Biweight => {
                type $P = $crate::kernel::form::Biweight;
                $body
            }
            $crate::kernel::Profile::Laplacian => {
                type $P = $crate::kernel::form::Laplacian;
                $body
            }
            $crate::kernel::Profile::Cauchy => {
                type $P = $crate::kernel::form::Cauchy;
                $body
            }
            $crate::kernel::Profile::Cosine => {
                type $P = $crate::kernel::form::Cosine;
                $body
            }
        }
    }};
}
pub(crate) use with_form;

/// `ln k(t)` in `f32` as the variable-bandwidth kernels weigh a key
/// (docs/numerics.md, "Variable bandwidths"): the profile's `f32` lane,
/// its log for the plain-weight profiles; −inf beyond [`T_FAR`] and
/// outside a compact profile's support.
#[inline]
pub(crate) fn log_weight_f32(profile: Profile, t: f32) -> f32 {
    // NaN (an overflowed difference times 0) is far too.
    if t.is_nan() || t >= T_FAR {
        return f32::NEG_INFINITY;
    }
    with_form!(profile, P => {
        let v = P::lane(t);
        if P::LOG { v } else if v > 0.0 { v.ln() } else { f32::NEG_INFINITY }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::Profile;

    /// The dispatch maps each profile to its formula: `k(0) = 1`, the log
    /// domain for gaussian and laplacian only, and the profile's value at
    /// `r = 1/2`.
    #[test]
    fn dispatch_maps_each_profile_to_its_form() {
        for p in Profile::ALL {
            assert_eq!(p.eval_sq(0.0), 1.0, "{p}");
            let log = matches!(p, Profile::Gaussian | Profile::Laplacian);
            assert_eq!(with_form!(p, P => P::LOG), log, "{p}");
        }
        let half = [
            (-0.125f64).exp(),
            0.75,
            1.0,
            0.5,
            0.5625,
            (-0.5f64).exp(),
            0.8,
            (std::f64::consts::FRAC_PI_4).cos(),
        ];
        for (p, want) in Profile::ALL.into_iter().zip(half) {
            assert!((p.eval_sq(0.25) - want).abs() < 1e-15, "{p}");
        }
    }

    /// The `f32` lanes agree with the `f64` reference, and both cut at the
    /// support's edge and beyond `T_FAR` as docs/numerics.md says.
    #[test]
    fn f32_lanes_follow_the_reference() {
        for p in Profile::ALL {
            for t in [0.0f32, 0.25, 0.5, 0.999, 1.0, 1.5, 4.0, 80.0] {
                let want = with_form!(p, P => P::lane(f64::from(t)));
                let got = f64::from(with_form!(p, P => P::lane(t)));
                assert!(
                    (got - want).abs() <= 1e-6 * want.abs() + 1e-7,
                    "{p} t={t}: {got} vs {want}"
                );
            }
            let far = with_form!(p, P => P::lane(T_FAR));
            let none = if p.is_exponential() {
                f32::NEG_INFINITY
            } else {
                0.0
            };
            assert_eq!(far, none, "{p} beyond T_FAR");
        }
    }

    /// The cosine polynomial against `f64`'s cosine on a fine grid of the
    /// support: relative error within a few `f32` units in the last place
    /// up to the edge, the edge itself exactly 0.
    #[test]
    fn cosine_polynomial_is_the_cosine() {
        let mut worst = 0.0f64;
        for i in 0..=4096 {
            let t = i as f32 / 4096.0;
            let want = Profile::Cosine.eval_sq(f64::from(t));
            let got = f64::from(Cosine::lane(t));
            if want > 0.0 {
                worst = worst.max((got - want).abs() / want);
            } else {
                assert_eq!(got, 0.0, "t={t}");
            }
        }
        assert!(worst < 4.0 * f64::from(f32::EPSILON), "worst {worst:e}");
        // Just inside the edge, r = 1 − 2⁻¹²: k ≈ (π/2)·2⁻¹².
        let t = (1.0f32 - 1.0 / 4096.0).powi(2);
        let want = Profile::Cosine.eval_sq(f64::from(t));
        assert!((f64::from(Cosine::lane(t)) / want - 1.0).abs() < 1e-6);
        assert_eq!(Cosine::lane(1.0f32), 0.0);
        assert_eq!(Cosine::lane(f32::INFINITY), 0.0);
    }
}
