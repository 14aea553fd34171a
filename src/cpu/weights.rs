//! Profile weights for one block of keys, in the log domain where needed
//! (the formulas are `kernel/form.rs`'s), and a row's initial running
//! maximum.
//!
//! Imports: `super::simd`, `crate::kernel`.

use super::simd::{Isa, exp_nonpos, max_of};
use crate::kernel::Profile;
use crate::kernel::form::{Form, with_form};

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
    with_form!(profile, P => block_weights_of::<S, P>(buf, m))
}

#[inline(always)]
fn block_weights_of<S: Isa, P: Form>(buf: &mut [f32], m: &mut f32) -> Option<f64> {
    for x in buf.iter_mut() {
        *x = P::lane(*x);
    }
    if !P::LOG {
        return Some(1.0);
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

/// Initial running maximum of a row: −inf for exponential profiles (no key
/// seen yet), 0 for the others (their weights are not shifted).
pub(crate) fn initial_max(profile: Profile) -> f32 {
    if profile.is_exponential() {
        f32::NEG_INFINITY
    } else {
        0.0
    }
}
