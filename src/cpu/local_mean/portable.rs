//! The portable group kernel of the fused local mean (any CPU; the AVX2
//! kernel in `avx2.rs` is tested against it). Per key block, pass one
//! turns the distances into log-weights (or weights) by the profile's
//! formula (`kernel/form.rs`) and finds the block maximum; pass two forms
//! `e^{w−m}`, skipping lane groups whose weights are all zero, and
//! accumulates the weight sum and up to four value columns in lane
//! registers.
//!
//! Imports: `super` (group job and state), `super::super::{keys, metric,
//! panels, simd, weights}`, `crate::kernel`.

use super::super::keys::KeysSoa;
use super::super::metric::metric_ts;
use super::super::panels::TileIsa;
use super::super::simd::{Isa, KEY_BLOCK, LANES, dot, exp_nonpos, fmadd, fmax};
use super::super::sq_dists::SqDists;
use super::super::weights::{initial_max, product_ts};
use super::group::{GroupJob, GroupState, QueryBlock};
use crate::kernel::form::{Form, Gaussian, with_form};
use crate::kernel::{ProductBlocks, Profile};

/// Row states of one group over a key range, compiled for `S`; the
/// distances by inner products on `tile` where the keys have panels.
#[inline(always)]
pub(super) fn group<S: Isa>(job: &GroupJob<'_>, tile: TileIsa) -> GroupState {
    let GroupJob {
        kernel,
        queries,
        d,
        keys,
        k0,
        k1,
        self_row,
        centred,
    } = *job;
    let profile = kernel.profile();
    let inv_h2 = kernel.inv_h2();
    let product = kernel.product_blocks();
    let metric = kernel.metric();
    let direct = (!metric.is_euclidean()).then_some(metric);
    let (n, q) = (keys.ld, keys.q);
    let g = queries.len() / d;
    let mut st = GroupState::empty(profile, q);
    let mut buf = [0.0f32; KEY_BLOCK];
    let mut cmax = [0.0f32; KEY_BLOCK / LANES + 1];
    let mut ub = [0.0f32; MAX_FUSED_COLS];
    let mut ip = SqDists::new(kernel, queries, d, keys.panels, centred, tile);
    let mut j0 = k0;
    while j0 < k1 {
        let len = KEY_BLOCK.min(k1 - j0);
        let w = &mut buf[..len];
        let use_ip = ip.as_mut().map(|ip| ip.block(j0, len, g));
        for r in 0..g {
            let query = &queries[r * d..(r + 1) * d];
            let pre = ip
                .as_ref()
                .filter(|_| use_ip.is_some_and(|u| u[r]))
                .map(|ip| ip.row(r, len));
            let mut bm = match (&product, &direct) {
                (Some(pb), _) => product_log_weights::<S>(pb, keys.xt, n, j0, query, w, &mut cmax),
                (None, Some(m)) => {
                    metric_ts::<S>(m, inv_h2, keys.xt, n, j0, query, w);
                    with_form!(profile, P => weights_of_ts(w, &mut cmax, P::lane::<f32>))
                }
                (None, None) => {
                    let blk = QueryBlock {
                        xt: keys.xt,
                        n,
                        j0,
                        len,
                        query,
                        pre,
                    };
                    log_weights::<S>(profile, blk, inv_h2, w, &mut cmax)
                }
            };
            if let Some(sk) = self_row
                .map(|r0| r0 + r)
                .filter(|&sk| sk >= j0 && sk < j0 + len)
            {
                // Leave the query's own key out, and recompute the maxima.
                w[sk - j0] = initial_max(profile);
                let c = (sk - j0) / LANES;
                cmax[c] = w[c * LANES..(c * LANES + LANES).min(len)]
                    .iter()
                    .fold(f32::NEG_INFINITY, |a, &b| fmax(a, b));
                bm = cmax[..len.div_ceil(LANES)]
                    .iter()
                    .fold(f32::NEG_INFINITY, |a, &b| fmax(a, b));
            }
            if bm == f32::NEG_INFINITY || (!profile.is_exponential() && bm <= 0.0) {
                continue; // no mass in this block
            }
            let ur = &mut st.u[r * q..(r + 1) * q];
            // Non-exponential profiles keep m = 0: their weights are not shifted.
            if profile.is_exponential() && bm > st.m[r] {
                let factor = (f64::from(st.m[r]) - f64::from(bm)).exp();
                st.m[r] = bm;
                st.s[r] *= factor;
                ur.iter_mut().for_each(|x| *x *= factor);
            }
            let sb = accumulate::<S>(
                profile.is_exponential(),
                st.m[r],
                w,
                &cmax,
                keys,
                j0,
                &mut ub,
            );
            st.s[r] += f64::from(sb);
            if q <= MAX_FUSED_COLS {
                for (uc, &b) in ur.iter_mut().zip(&ub) {
                    *uc += f64::from(b);
                }
            } else {
                // `accumulate` left the weights in `w`.
                for (c, uc) in ur.iter_mut().enumerate() {
                    *uc += f64::from(dot::<S>(w, &keys.yt[c * n + j0..c * n + j0 + len]));
                }
            }
        }
        j0 += len;
    }
    st
}

/// Value columns accumulated in registers in the same pass as the weights.
const MAX_FUSED_COLS: usize = 4;

/// Pass one over a block: scaled squared distances (from `pre` when the
/// inner products gave them, else by differences) turned into
/// log-weights (exponential profiles; −inf for infinitely far keys) or
/// weights (the others), stored in `w`, with the maximum of each lane
/// group in `cmax`. Returns the block's maximum.
#[inline(always)]
fn log_weights<S: Isa>(
    profile: Profile,
    blk: QueryBlock<'_>,
    inv_h2: f32,
    w: &mut [f32],
    cmax: &mut [f32],
) -> f32 {
    with_form!(profile, P => fused_dists::<S, _>(blk, inv_h2, w, cmax, P::lane::<f32>))
}

/// The profile's log-weights (or weights) of the scaled squared distances
/// already in `w`, in place, with each lane group's maximum in `cmax`.
/// Returns the block's maximum.
#[inline(always)]
fn weights_of_ts<F: Fn(f32) -> f32>(w: &mut [f32], cmax: &mut [f32], f: F) -> f32 {
    let mut bm = f32::NEG_INFINITY;
    for (c, chunk) in w.chunks_mut(LANES).enumerate() {
        let mut cm = f32::NEG_INFINITY;
        for x in chunk.iter_mut() {
            *x = f(*x);
            cm = fmax(cm, *x);
        }
        cmax[c] = cm;
        bm = fmax(bm, cm);
    }
    bm
}

/// [`log_weights`] for a product kernel: the carrier's `t` by blocks
/// (`cpu/weights.rs`), then its gaussian log-weights (the panels never
/// serve a product).
#[inline(always)]
fn product_log_weights<S: Isa>(
    pb: &ProductBlocks,
    xt: &[f32],
    n: usize,
    j0: usize,
    query: &[f32],
    w: &mut [f32],
    cmax: &mut [f32],
) -> f32 {
    product_ts::<S>(pb, xt, n, j0, query, w);
    weights_of_ts(w, cmax, Gaussian::lane::<f32>)
}

#[inline(always)]
fn fused_dists<S: Isa, F: Fn(f32) -> f32>(
    blk: QueryBlock<'_>,
    inv_h2: f32,
    w: &mut [f32],
    cmax: &mut [f32],
    f: F,
) -> f32 {
    let QueryBlock {
        xt,
        n,
        j0,
        query,
        pre,
        ..
    } = blk;
    // Squared distances: given (`pre`, one per key), or formed here.
    let mut bm = f32::NEG_INFINITY;
    for (c, chunk) in w.chunks_mut(LANES).enumerate() {
        let j = j0 + c * LANES;
        if chunk.len() == LANES {
            let mut acc = [0.0f32; LANES];
            match pre {
                Some(p) => acc.copy_from_slice(&p[c * LANES..(c + 1) * LANES]),
                None => {
                    for (k, &qk) in query.iter().enumerate() {
                        let x = &xt[k * n + j..k * n + j + LANES];
                        for l in 0..LANES {
                            let df = x[l] - qk;
                            acc[l] = fmadd::<S>(df, df, acc[l]);
                        }
                    }
                }
            }
            let mut v = [0.0f32; LANES];
            for l in 0..LANES {
                v[l] = f(acc[l] * inv_h2);
            }
            chunk.copy_from_slice(&v);
            let cm = max8(v);
            cmax[c] = cm;
            bm = fmax(bm, cm);
        } else {
            let mut cm = f32::NEG_INFINITY;
            for (l, wl) in chunk.iter_mut().enumerate() {
                let a = match pre {
                    Some(p) => p[c * LANES + l],
                    None => {
                        let mut a = 0.0f32;
                        for (k, &qk) in query.iter().enumerate() {
                            let df = xt[k * n + j + l] - qk;
                            a = fmadd::<S>(df, df, a);
                        }
                        a
                    }
                };
                *wl = f(a * inv_h2);
                cm = fmax(cm, *wl);
            }
            cmax[c] = cm;
            bm = fmax(bm, cm);
        }
    }
    bm
}

/// Maximum of one lane group, as a shuffle tree (a sequential `max` fold
/// would not vectorize: float reductions are not reassociated).
#[inline(always)]
fn max8(v: [f32; LANES]) -> f32 {
    let mut a = [0.0f32; 4];
    for l in 0..4 {
        a[l] = fmax(v[l], v[l + 4]);
    }
    let b = [fmax(a[0], a[2]), fmax(a[1], a[3])];
    fmax(b[0], b[1])
}

/// Pass two: weights `e^{w−m}` (or the plain weights), their sum (returned)
/// and, for at most [`MAX_FUSED_COLS`] value columns, the weighted value
/// sums into `ub`. With more columns the weights are left in `w` for the
/// caller's dot products. Lane groups whose weights are all zero are
/// skipped.
#[inline(always)]
fn accumulate<S: Isa>(
    exponential: bool,
    m: f32,
    w: &mut [f32],
    cmax: &[f32],
    keys: &KeysSoa<'_>,
    j0: usize,
    ub: &mut [f32; MAX_FUSED_COLS],
) -> f32 {
    macro_rules! by_q {
        ($exp:literal) => {
            match keys.q {
                1 => accumulate_q::<S, $exp, 1>(m, w, cmax, keys, j0, ub),
                2 => accumulate_q::<S, $exp, 2>(m, w, cmax, keys, j0, ub),
                3 => accumulate_q::<S, $exp, 3>(m, w, cmax, keys, j0, ub),
                4 => accumulate_q::<S, $exp, 4>(m, w, cmax, keys, j0, ub),
                _ => accumulate_q::<S, $exp, 0>(m, w, cmax, keys, j0, ub),
            }
        };
    }
    if exponential {
        by_q!(true)
    } else {
        by_q!(false)
    }
}

#[inline(always)]
fn accumulate_q<S: Isa, const EXP: bool, const Q: usize>(
    m: f32,
    w: &mut [f32],
    cmax: &[f32],
    keys: &KeysSoa<'_>,
    j0: usize,
    ub: &mut [f32; MAX_FUSED_COLS],
) -> f32 {
    let n = keys.ld;
    let ys: [&[f32]; Q] = std::array::from_fn(|c| &keys.yt[c * n + j0..c * n + j0 + w.len()]);
    let mut s_acc = [0.0f32; LANES];
    let mut u_acc = [[0.0f32; LANES]; Q];
    let mut s_tail = 0.0f32;
    let mut u_tail = [0.0f32; Q];
    for (c, chunk) in w.chunks_mut(LANES).enumerate() {
        // exp(−87) is the smallest weight exp_nonpos does not flush to 0.
        let empty = if EXP {
            cmax[c] - m < -87.0
        } else {
            cmax[c] <= 0.0
        };
        if empty {
            chunk.fill(0.0);
            continue;
        }
        let o = c * LANES;
        if chunk.len() == LANES {
            let mut wl = [0.0f32; LANES];
            wl.copy_from_slice(chunk);
            if EXP {
                for x in &mut wl {
                    *x = exp_nonpos::<S>(*x - m);
                }
            }
            for l in 0..LANES {
                s_acc[l] += wl[l];
            }
            for (col, y) in ys.iter().enumerate() {
                let y = &y[o..o + LANES];
                for l in 0..LANES {
                    u_acc[col][l] = fmadd::<S>(wl[l], y[l], u_acc[col][l]);
                }
            }
            if Q == 0 {
                chunk.copy_from_slice(&wl);
            }
        } else {
            for (l, x) in chunk.iter_mut().enumerate() {
                let wv = if EXP { exp_nonpos::<S>(*x - m) } else { *x };
                s_tail += wv;
                for (col, y) in ys.iter().enumerate() {
                    u_tail[col] = fmadd::<S>(wv, y[o + l], u_tail[col]);
                }
                *x = wv;
            }
        }
    }
    for col in 0..Q {
        ub[col] = u_acc[col].iter().sum::<f32>() + u_tail[col];
    }
    s_acc.iter().sum::<f32>() + s_tail
}
