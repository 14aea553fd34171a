//! Profile weights for one block of keys, in the log domain where needed.

use super::simd::{Isa, exp_nonpos, fmax, max_of};
use crate::kernel::Profile;
use crate::kernel::T_FAR;

/// Turns the scaled squared distances in `buf` into weights, in place.
///
/// For exponential profiles the weights are `exp(ln k − m)` relative to the
/// running maximum log-weight `m` of the row, which this raises when the
/// block holds a larger one (docs/numerics.md). The return value is the factor by
/// which the row's earlier sums must be multiplied to stay relative to the
/// new `m` (`1.0` when it did not move), or `None` when the block carries no
/// mass at all (every key infinitely far; `buf` is then all zeros).
///
/// For the other profiles `m` stays 0, weights are plain `k(r)`, and the
/// factor is always `Some(1.0)`.
#[inline(always)]
pub(crate) fn block_weights<S: Isa>(profile: Profile, buf: &mut [f32], m: &mut f32) -> Option<f64> {
    match profile {
        Profile::Gaussian | Profile::Laplacian => {
            if profile == Profile::Gaussian {
                for x in buf.iter_mut() {
                    *x = if *x < T_FAR {
                        -0.5 * *x
                    } else {
                        f32::NEG_INFINITY
                    };
                }
            } else {
                for x in buf.iter_mut() {
                    *x = if *x < T_FAR {
                        -x.sqrt()
                    } else {
                        f32::NEG_INFINITY
                    };
                }
            }
            let bm = max_of(buf);
            if bm == f32::NEG_INFINITY {
                buf.fill(0.0);
                return None;
            }
            let factor = if bm > *m {
                let f = (f64::from(*m) - f64::from(bm)).exp();
                *m = bm;
                f
            } else {
                1.0
            };
            let mm = *m;
            for x in buf.iter_mut() {
                *x = exp_nonpos::<S>(*x - mm);
            }
            Some(factor)
        }
        Profile::Epanechnikov => {
            for x in buf.iter_mut() {
                *x = fmax(1.0 - *x, 0.0);
            }
            Some(1.0)
        }
        Profile::Uniform => {
            for x in buf.iter_mut() {
                *x = if *x < 1.0 { 1.0 } else { 0.0 };
            }
            Some(1.0)
        }
        Profile::Triangular => {
            for x in buf.iter_mut() {
                *x = fmax(1.0 - x.sqrt(), 0.0);
            }
            Some(1.0)
        }
        Profile::Biweight => {
            for x in buf.iter_mut() {
                let a = fmax(1.0 - *x, 0.0);
                *x = a * a;
            }
            Some(1.0)
        }
        Profile::Cauchy => {
            for x in buf.iter_mut() {
                *x = if *x < T_FAR { 1.0 / (1.0 + *x) } else { 0.0 };
            }
            Some(1.0)
        }
    }
}

/// Initial running maximum of a row: −inf for exponential profiles (no key
/// seen yet), 0 for the others (their weights are not shifted).
pub(crate) fn initial_max(profile: Profile) -> f32 {
    if profile.is_exponential() {
        f32::NEG_INFINITY
    } else {
        0.0
    }
}
