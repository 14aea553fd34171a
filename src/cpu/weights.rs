//! Profile weights for one block of keys, in the log domain where needed
//! (the formulas are `kernel/form.rs`'s), and a row's initial running
//! maximum.
//!
//! Also a product kernel's scaled distances, by blocks ([`product_ts`]).
//!
//! Imports: `super::simd`, `crate::kernel`.

use super::simd::{Isa, KEY_BLOCK, exp_nonpos, fmadd, max_of};
use crate::kernel::form::{Form, add_carrier_ts, with_form};
use crate::kernel::{ProductBlocks, Profile};

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

/// A product kernel's carrier `t_j = −2 Σ_b ln k_b(‖x_jb − q_b‖²/h_b²)` from
/// one query to the keys `j0..j0+t.len()` (column-major `xt`, stride `n`):
/// each block's squared distances summed over its coordinates, then turned
/// into its share of `t` (docs/numerics.md, "Product kernels").
#[inline(always)]
pub(crate) fn product_ts<S: Isa>(
    pb: &ProductBlocks,
    xt: &[f32],
    n: usize,
    j0: usize,
    query: &[f32],
    t: &mut [f32],
) {
    let mut part = [0.0f32; KEY_BLOCK];
    for (c, tc) in t.chunks_mut(KEY_BLOCK).enumerate() {
        let j = j0 + c * KEY_BLOCK;
        let len = tc.len();
        tc.fill(0.0);
        for b in 0..pb.len {
            let part = &mut part[..len];
            part.fill(0.0);
            // Differences scaled before they are squared: the sum overflows
            // only beyond ~1.8e19 bandwidths.
            let s = pb.inv_h[b];
            for (k, &qk) in query.iter().enumerate().take(pb.end[b]).skip(pb.start[b]) {
                let col = &xt[k * n + j..k * n + j + len];
                for (p, &x) in part.iter_mut().zip(col) {
                    let df = (x - qk) * s;
                    *p = fmadd::<S>(df, df, *p);
                }
            }
            add_carrier_ts(pb.profile[b], part, tc);
        }
    }
}
