//! Row states in `f64` for the rows the `f32` kernels cannot represent.
//!
//! The kernels form the scaled squared distance `t = ‖x − q‖²/h²` in `f32`
//! and give a key at `t ≥ T_FAR` (or where `t` overflows) weight 0. That is
//! exact as long as some key of the row lies nearer, but a row whose every
//! key is that far (a tiny bandwidth, coordinates near 10¹⁹) would come
//! back empty although gaussian, laplacian and cauchy weights are never 0.
//! Such rows are recomputed here from `f64` distances, where `t` cannot
//! overflow (docs/numerics.md, "Far rows"), with the profiles' log weights
//! from `form.rs`.
//!
//! Imports: `super` (kernel, profiles, formulas) only.

use super::form::{Form, with_form};
use super::{Kernel, Profile};

/// A cauchy row whose weights sum below this (every key at `t > 10²⁸`) is
/// recomputed: its `f32` weights are near the subnormal range.
pub(crate) const CAUCHY_EXACT_BELOW: f64 = 1e-28;

/// Whether a row state `(m, s)` from the `f32` kernels must be recomputed
/// in `f64`: an exponential profile with no key in reach, or a cauchy row
/// with vanishing mass. Compact profiles never need it (a key beyond
/// `T_FAR` lies outside their support), nor products of compact blocks
/// only (a product goes by its gaussian carrier otherwise).
pub(crate) fn needs_exact(kernel: &Kernel, s: f64) -> bool {
    if !kernel.has_full_support() {
        return false;
    }
    match kernel.profile() {
        Profile::Cauchy => s.is_nan() || s < CAUCHY_EXACT_BELOW,
        p if p.is_exponential() => s.is_nan() || s <= 0.0,
        _ => false,
    }
}

/// `ln k` from an `f64` scaled squared distance `t` (finite; −inf outside
/// a compact profile's support).
pub(crate) fn log_weight(profile: Profile, t: f64) -> f64 {
    with_form!(profile, P => P::exact_log_weight(t))
}

/// The state `(m, s, u)` of one query over the keys `k0..k1`, all in
/// `f64`: `key(j, k)` is coordinate `k` of key `j`, `value(j, c)` value
/// column `c`, and `skip` a key to leave out. `m` is returned as `f32`,
/// clamped to `f32::MIN` when smaller (such a row's local mean is still
/// exact; its log-sum lies below the `f32` range). `u` must hold `q`
/// zeros. Returns `(m, s)`; `s = 0` only when every key was skipped.
pub(crate) fn row_state(
    kernel: &Kernel,
    query: &[f32],
    key: impl Fn(usize, usize) -> f32,
    value: impl Fn(usize, usize) -> f32,
    (k0, k1): (usize, usize),
    skip: Option<usize>,
    u: &mut [f64],
) -> (f32, f64) {
    // Each key's log-weight once (a product's compact blocks first).
    let lws: Vec<(usize, f64)> = (k0..k1)
        .filter(|&j| Some(j) != skip)
        .map(|j| (j, kernel.log_weight_by(query, |k| key(j, k))))
        .filter(|&(_, l)| l > f64::NEG_INFINITY)
        .collect();
    state_of(&lws, value, u)
}

/// The state `(m, s, u)` from each key's `f64` log-weight `(j, l)`
/// (`l > −inf`), `value(j, c)` value column `c` of key `j`, `u` its `q`
/// entries (zeroed here): `m` as `f32`, clamped to `f32::MIN` when
/// smaller; `(−inf, 0)` without keys.
pub(crate) fn state_of(
    lws: &[(usize, f64)],
    value: impl Fn(usize, usize) -> f32,
    u: &mut [f64],
) -> (f32, f64) {
    let m = lws.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
    u.fill(0.0);
    if m == f64::NEG_INFINITY {
        return (f32::NEG_INFINITY, 0.0);
    }
    let mut s = 0.0;
    for &(j, l) in lws {
        let w = (l - m).exp();
        s += w;
        for (c, uc) in u.iter_mut().enumerate() {
            *uc += w * f64::from(value(j, c));
        }
    }
    ((m as f32).max(f32::MIN), s)
}

/// The row `K(q, x_j) / Σ_j K(q, x_j)` of `D⁻¹K` over keys `0..n`, from
/// `f64` log-weights (for the rows the `f32` kernels leave without mass).
/// Returns `false`, leaving `out` alone, when no key has weight.
pub(crate) fn normalized_row(
    kernel: &Kernel,
    query: &[f32],
    key: impl Fn(usize, usize) -> f32,
    out: &mut [f32],
) -> bool {
    let lw: Vec<f64> = (0..out.len())
        .map(|j| kernel.log_weight_by(query, |k| key(j, k)))
        .collect();
    let m = lw.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if m == f64::NEG_INFINITY {
        return false;
    }
    let s: f64 = lw.iter().map(|&l| (l - m).exp()).sum();
    for (o, &l) in out.iter_mut().zip(&lw) {
        *o = ((l - m).exp() / s) as f32;
    }
    true
}

/// Turns row `i` of `D⁻¹K` into row `i` of `I − D⁻¹K`, in place: the one
/// flip of both backends' normalized Laplacian.
pub(crate) fn to_normalized_laplacian(row: &mut [f32], i: usize) {
    for x in row.iter_mut() {
        *x = -*x;
    }
    row[i] += 1.0;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn far_keys_keep_the_nearest_ones() {
        // Keys 0 and 1, query 100, h = 1e-18: t ≈ 1e40 overflows f32.
        let k = Kernel::new(Profile::Gaussian, 1e-18).unwrap();
        let keys = [0.0f32, 1.0];
        let vals = [1.0f32, 2.0];
        let mut u = [0.0];
        let (m, s) = row_state(
            &k,
            &[100.0],
            |j, _| keys[j],
            |j, _| vals[j],
            (0, 2),
            None,
            &mut u,
        );
        assert_eq!(m, f32::MIN);
        assert_eq!(u[0] / s, 2.0);
        // Leaving the only key out leaves nothing.
        let (m, s) = row_state(
            &k,
            &[100.0],
            |j, _| keys[j],
            |j, _| vals[j],
            (1, 2),
            Some(1),
            &mut u,
        );
        assert_eq!((m, s), (f32::NEG_INFINITY, 0.0));
        // Cauchy: weights ∝ 1/(1+t), not only the nearest key.
        let k = Kernel::new(Profile::Cauchy, 1e-18).unwrap();
        let (_, s) = row_state(
            &k,
            &[2.0],
            |j, _| keys[j],
            |j, _| vals[j],
            (0, 2),
            None,
            &mut u,
        );
        // t = 4e36 and 1e36: weights 1 : 4 relative to the nearest.
        let want = (1.0 * 0.25 + 2.0 * 1.0) / 1.25;
        assert!((u[0] / s - want).abs() < 1e-12, "{}", u[0] / s);
        let of = |p| Kernel::new(p, 1.0).unwrap();
        assert!(needs_exact(&of(Profile::Gaussian), 0.0));
        assert!(!needs_exact(&of(Profile::Gaussian), 1e-300));
        assert!(needs_exact(&of(Profile::Cauchy), 1e-30));
        assert!(!needs_exact(&of(Profile::Uniform), 0.0));
        // Products: by their gaussian carrier, unless every block is compact.
        let mixed = Kernel::product([(1, Profile::Uniform, 1.0), (1, Profile::Cauchy, 1.0)]);
        assert!(needs_exact(&mixed.unwrap(), 0.0));
        let compact = Kernel::product([(1, Profile::Uniform, 1.0), (1, Profile::Biweight, 1.0)]);
        assert!(!needs_exact(&compact.unwrap(), 0.0));
    }
}
