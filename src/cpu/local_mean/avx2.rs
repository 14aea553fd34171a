//! Explicit AVX2 + FMA kernel of the fused local mean (the CPU hot path).
//!
//! Same algorithm and numerics as the portable version in `portable.rs`
//! (which runs where AVX2 is missing and is tested against this one):
//! per key block, pass one turns distances into log-weights (or weights)
//! and finds the block maximum; pass two forms `e^{w−m}`, skipping lane
//! groups whose weights are all zero, and accumulates the weight sum and
//! up to four value columns in registers. The profiles come from
//! `kernel/form.rs`, evaluated on [`V8`] lanes.
//!
//! Imports: `super` (group job and state), `super::super::{keys,
//! panels, simd}`,
//! `crate::kernel`.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use super::super::keys::KeysSoa;
use super::super::panels::TileIsa;
use super::super::simd::{
    Avx2Fma, EXP_LN2_HI, EXP_LN2_LO, EXP_MAGIC, EXP_MIN, EXP_POLY, KEY_BLOCK, LANES,
};
use super::super::sq_dists::SqDists;
use super::group::{GroupJob, GroupState, QueryBlock};
use crate::kernel::T_FAR;
use crate::kernel::form::{Form, Lane, with_form};

/// Eight `f32` lanes in an AVX register, evaluated by the profiles'
/// formulas (`kernel/form.rs`). The token they carry is what makes their
/// intrinsics sound to call.
#[derive(Clone, Copy)]
struct V8 {
    v: __m256,
    isa: Avx2Fma,
}

/// Implements a [`Lane`] method of [`V8`] by one intrinsic expression.
macro_rules! v8_ops {
    ($(fn $name:ident($($arg:ident),*) => |$s:ident| $body:expr;)*) => {$(
        #[inline(always)]
        fn $name(self $(, $arg: V8)*) -> V8 {
            let $s = self;
            // SAFETY: a `V8` holds an `Avx2Fma` token, made only where
            // run-time detection found AVX2 and FMA.
            V8 { v: unsafe { $body }, isa: self.isa }
        }
    )*};
}

impl Lane for V8 {
    #[inline(always)]
    fn lit(self, x: f32) -> V8 {
        // SAFETY: as in `v8_ops`.
        V8 {
            v: unsafe { _mm256_set1_ps(x) },
            isa: self.isa,
        }
    }
    v8_ops! {
        fn add(o) => |s| _mm256_add_ps(s.v, o.v);
        fn sub(o) => |s| _mm256_sub_ps(s.v, o.v);
        fn mul(o) => |s| _mm256_mul_ps(s.v, o.v);
        fn mul_add(a, b) => |s| _mm256_fmadd_ps(s.v, a.v, b.v);
        fn div(o) => |s| _mm256_div_ps(s.v, o.v);
        fn neg() => |s| _mm256_sub_ps(_mm256_setzero_ps(), s.v);
        fn sqrt() => |s| _mm256_sqrt_ps(s.v);
        fn max(o) => |s| _mm256_max_ps(s.v, o.v);
        fn select_lt(bound, then, otherwise) => |s| _mm256_blendv_ps(
            otherwise.v,
            then.v,
            _mm256_cmp_ps::<_CMP_LT_OQ>(s.v, bound.v)
        );
    }
    #[inline(always)]
    fn unless_far(self, near: V8, far: V8) -> V8 {
        self.select_lt(self.lit(T_FAR), near, far)
    }
}

/// `e^x` for `x ≤ 0`, exactly 0 below −87 (same polynomial as
/// `simd::exp_nonpos`).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn exp_nonpos(x: __m256) -> __m256 {
    let magic = _mm256_set1_ps(EXP_MAGIC);
    let tiny = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(EXP_MIN));
    let xc = _mm256_max_ps(x, _mm256_set1_ps(EXP_MIN));
    let k = _mm256_fmadd_ps(xc, _mm256_set1_ps(std::f32::consts::LOG2_E), magic);
    let n = _mm256_sub_ps(k, magic);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_LN2_HI), xc);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_LN2_LO), r);
    let mut p = _mm256_set1_ps(EXP_POLY[0]);
    for &c in &EXP_POLY[1..] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let y = _mm256_add_ps(
        _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r),
        _mm256_set1_ps(1.0),
    );
    let ni = _mm256_sub_epi32(_mm256_castps_si256(k), _mm256_castps_si256(magic));
    let scale = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
        ni,
        _mm256_set1_epi32(127),
    )));
    _mm256_andnot_ps(tiny, _mm256_mul_ps(y, scale))
}

/// Horizontal maximum.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn hmax(v: __m256) -> f32 {
    let m4 = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    let m1 = _mm_max_ss(m2, _mm_shuffle_ps::<1>(m2, m2));
    _mm_cvtss_f32(m1)
}

/// Horizontal sum.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn hsum(v: __m256) -> f32 {
    let s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    let s1 = _mm_add_ss(s2, _mm_shuffle_ps::<1>(s2, s2));
    _mm_cvtss_f32(s1)
}

/// Lane mask selecting the first `rem` lanes (`rem` in 1..=8).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn head_mask(rem: usize) -> __m256i {
    let idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    _mm256_cmpgt_epi32(_mm256_set1_epi32(rem as i32), idx)
}

/// `v` with lane `lane` replaced by the matching lane of `by`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn mask_lane(v: __m256, lane: usize, by: __m256) -> __m256 {
    let idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let hit = _mm256_cmpeq_epi32(idx, _mm256_set1_epi32(lane as i32));
    _mm256_blendv_ps(v, by, _mm256_castsi256_ps(hit))
}

/// Loads 8 floats at `s[o..]`, or the first `s.len() − o` of them (zeros after).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn load(s: &[f32], o: usize) -> __m256 {
    let rem = s.len() - o;
    if rem >= LANES {
        // SAFETY: o + 8 ≤ s.len().
        unsafe { _mm256_loadu_ps(s.as_ptr().add(o)) }
    } else {
        // SAFETY: the mask reads only the first `rem` (in bounds) lanes.
        unsafe { _mm256_maskload_ps(s.as_ptr().add(o), head_mask(rem)) }
    }
}

/// Row states of one group of queries over a key range (see [`GroupJob`]).
/// A product kernel or a non-Euclidean metric takes the portable kernel
/// (distances by blocks, or by the metric), compiled for AVX2 + FMA.
pub(crate) fn group(isa: Avx2Fma, job: &GroupJob<'_>) -> GroupState {
    if job.kernel.is_product() || !job.kernel.metric().is_euclidean() {
        // SAFETY: `isa` is an `Avx2Fma` token, made only where run-time
        // detection found AVX2 and FMA.
        return unsafe { product(isa, job) };
    }
    // SAFETY: `isa` is an `Avx2Fma` token, made only where run-time
    // detection found AVX2 and FMA.
    with_form!(job.kernel.profile(), P => unsafe { by_q::<P>(isa, job) })
}

#[target_feature(enable = "avx2,fma")]
fn product(isa: Avx2Fma, job: &GroupJob<'_>) -> GroupState {
    super::portable::group::<Avx2Fma>(job, TileIsa::Avx2(isa))
}

#[target_feature(enable = "avx2,fma")]
fn by_q<P: Form>(isa: Avx2Fma, job: &GroupJob<'_>) -> GroupState {
    match job.keys.q {
        1 => group_impl::<P, 1>(isa, job),
        2 => group_impl::<P, 2>(isa, job),
        3 => group_impl::<P, 3>(isa, job),
        4 => group_impl::<P, 4>(isa, job),
        _ => group_impl::<P, 0>(isa, job),
    }
}

#[repr(C, align(32))]
struct Block([f32; KEY_BLOCK]);

/// `Q` value columns accumulated in registers (`Q = 0`: any number, by
/// dot products over the stored weights).
#[target_feature(enable = "avx2,fma")]
fn group_impl<P: Form, const Q: usize>(isa: Avx2Fma, job: &GroupJob<'_>) -> GroupState {
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
    let (n, q) = (keys.ld, keys.q);
    let g = queries.len() / d;
    let mut st = GroupState::empty(kernel.profile(), q);
    let (m, s, u) = (&mut st.m, &mut st.s, &mut st.u);
    let mut buf = Block([0.0; KEY_BLOCK]);
    let inv = _mm256_set1_ps(kernel.inv_h2());
    let mut ip = SqDists::new(
        kernel,
        queries,
        d,
        keys.panels,
        centred,
        TileIsa::at_most(Some(isa)),
    );
    let mut j0 = k0;
    while j0 < k1 {
        let len = KEY_BLOCK.min(k1 - j0);
        let chunks = len.div_ceil(LANES);
        let use_ip = ip.as_mut().map(|ip| ip.block(j0, len, g));
        // The value columns of this block, sliced once for every row.
        let ys: [&[f32]; 4] = std::array::from_fn(|col| {
            let c = col.min(Q.max(1) - 1).min(keys.q.max(1) - 1);
            if Q == 0 {
                &[][..]
            } else {
                &keys.yt[c * n + j0..c * n + j0 + len]
            }
        });
        for r in 0..g {
            let query = &queries[r * d..(r + 1) * d];
            let skip = self_row.map(|r0| r0 + r);
            let pre = ip
                .as_ref()
                .filter(|_| use_ip.is_some_and(|u| u[r]))
                .map(|ip| ip.row(r, len));
            // Pass one: (log-)weights and the block maximum.
            // Distances given (inner products) or any d beyond 8: the
            // generic pass; otherwise the one unrolled for d.
            let dk = if pre.is_some() || d > 8 { 0 } else { d };
            let blk = QueryBlock {
                xt: keys.xt,
                n,
                j0,
                len,
                query,
                pre,
            };
            macro_rules! pass {
                ($dim:literal) => {
                    pass_one::<P, $dim>(isa, blk, inv, skip, &mut buf)
                };
            }
            let bmv = match dk {
                1 => pass!(1),
                2 => pass!(2),
                3 => pass!(3),
                4 => pass!(4),
                5 => pass!(5),
                6 => pass!(6),
                7 => pass!(7),
                8 => pass!(8),
                _ => pass!(0),
            };
            let bm = hmax(bmv);
            if bm == f32::NEG_INFINITY || (!P::LOG && bm <= 0.0) {
                continue; // no mass in this block
            }
            let ur = &mut u[r * q..(r + 1) * q];
            // Non-exponential profiles keep m = 0: their weights are not shifted.
            if P::LOG && bm > m[r] {
                let factor = (f64::from(m[r]) - f64::from(bm)).exp();
                m[r] = bm;
                s[r] *= factor;
                ur.iter_mut().for_each(|x| *x *= factor);
            }
            // Pass two: weights, their sum, weighted values.
            let mv = _mm256_set1_ps(m[r]);
            let mut s_acc = _mm256_setzero_ps();
            let mut u_acc = [_mm256_setzero_ps(); 4];
            for c in 0..chunks {
                let o = c * LANES;
                // SAFETY: o + 8 ≤ KEY_BLOCK.
                let lw = unsafe { _mm256_loadu_ps(buf.0.as_ptr().add(o)) };
                let w = if P::LOG {
                    let x = _mm256_sub_ps(lw, mv);
                    let live = _mm256_cmp_ps::<_CMP_GE_OQ>(x, _mm256_set1_ps(-87.0));
                    if _mm256_movemask_ps(live) == 0 {
                        if Q == 0 {
                            // SAFETY: as above.
                            unsafe {
                                _mm256_storeu_ps(buf.0.as_mut_ptr().add(o), _mm256_setzero_ps())
                            };
                        }
                        continue;
                    }
                    exp_nonpos(x)
                } else {
                    let live = _mm256_cmp_ps::<_CMP_GT_OQ>(lw, _mm256_setzero_ps());
                    if _mm256_movemask_ps(live) == 0 {
                        continue;
                    }
                    lw
                };
                s_acc = _mm256_add_ps(s_acc, w);
                if Q == 0 {
                    // SAFETY: as above.
                    unsafe { _mm256_storeu_ps(buf.0.as_mut_ptr().add(o), w) };
                }
                for (y, acc) in ys.iter().zip(u_acc.iter_mut()).take(Q) {
                    let yv = if o + LANES <= len {
                        // SAFETY: o + 8 ≤ len = y.len().
                        unsafe { _mm256_loadu_ps(y.as_ptr().add(o)) }
                    } else {
                        load(y, o)
                    };
                    *acc = _mm256_fmadd_ps(w, yv, *acc);
                }
            }
            s[r] += f64::from(hsum(s_acc));
            if Q > 0 {
                for (uc, acc) in ur.iter_mut().zip(&u_acc).take(Q) {
                    *uc += f64::from(hsum(*acc));
                }
            } else {
                let w = &buf.0[..len];
                for c0 in (0..q).step_by(4) {
                    let sums = weighted_cols(w, keys, j0, c0);
                    for (uc, v) in ur[c0..].iter_mut().zip(sums) {
                        *uc += f64::from(v);
                    }
                }
            }
        }
        j0 += len;
    }
    st
}

/// Pass one over the keys `j0..j0+len`: log-weights (or weights) of one
/// query into `buf` (lanes past `len` get the identity: −inf or 0), and
/// their lane-wise maximum. The squared distances come from `pre` when
/// the inner products gave them (`ip.rs`), else by differences: `D > 0` is
/// the dimension known at compile time (unrolled, query broadcast once);
/// `D = 0` handles any `d`. The key `skip` (the query itself, for
/// leave-one-out) gets the identity.
#[inline(never)]
#[target_feature(enable = "avx2,fma")]
fn pass_one<P: Form, const D: usize>(
    isa: Avx2Fma,
    blk: QueryBlock<'_>,
    inv: __m256,
    skip: Option<usize>,
    buf: &mut Block,
) -> __m256 {
    let QueryBlock {
        xt,
        n,
        j0,
        len,
        query,
        pre,
    } = blk;
    let identity = _mm256_set1_ps(if P::LOG { f32::NEG_INFINITY } else { 0.0 });
    let d = query.len();
    assert!(d >= 1 && (D == 0 || D == d) && j0 + len <= n && len <= KEY_BLOCK && xt.len() >= d * n);
    assert!(pre.is_none_or(|p| p.len() == len));
    let qv: [__m256; 8] = std::array::from_fn(|k| _mm256_set1_ps(query[k.min(d - 1)]));
    let mut bmv = identity;
    let full = len / LANES;
    let base = xt.as_ptr();
    for c in 0..full {
        let j = j0 + c * LANES;
        let mut acc = _mm256_setzero_ps();
        if let Some(p) = pre {
            // SAFETY: c·8 + 8 ≤ len = p.len() (asserted above).
            acc = unsafe { _mm256_loadu_ps(p.as_ptr().add(c * LANES)) };
        } else if D > 0 {
            // Two accumulation chains (even and odd coordinates) halve the
            // latency of the longer dimensions.
            let mut acc2 = _mm256_setzero_ps();
            for (k, qk) in qv.iter().enumerate().take(D) {
                // SAFETY: k < d and j + 8 ≤ j0 + len ≤ n (asserted above).
                let x = unsafe { _mm256_loadu_ps(base.add(k * n + j)) };
                let df = _mm256_sub_ps(x, *qk);
                if k % 2 == 0 {
                    acc = _mm256_fmadd_ps(df, df, acc);
                } else {
                    acc2 = _mm256_fmadd_ps(df, df, acc2);
                }
            }
            acc = _mm256_add_ps(acc, acc2);
        } else {
            // Two accumulation chains halve the latency of long dimensions.
            let mut acc2 = _mm256_setzero_ps();
            let mut k = 0;
            while k + 1 < d {
                // SAFETY: as above.
                let (x0, x1) = unsafe {
                    (
                        _mm256_loadu_ps(base.add(k * n + j)),
                        _mm256_loadu_ps(base.add((k + 1) * n + j)),
                    )
                };
                let d0 = _mm256_sub_ps(x0, _mm256_set1_ps(query[k]));
                let d1 = _mm256_sub_ps(x1, _mm256_set1_ps(query[k + 1]));
                acc = _mm256_fmadd_ps(d0, d0, acc);
                acc2 = _mm256_fmadd_ps(d1, d1, acc2);
                k += 2;
            }
            if k < d {
                // SAFETY: as above.
                let x = unsafe { _mm256_loadu_ps(base.add(k * n + j)) };
                let d0 = _mm256_sub_ps(x, _mm256_set1_ps(query[k]));
                acc = _mm256_fmadd_ps(d0, d0, acc);
            }
            acc = _mm256_add_ps(acc, acc2);
        }
        let mut v = P::lane(V8 {
            v: _mm256_mul_ps(acc, inv),
            isa,
        })
        .v;
        if let Some(sk) = skip.filter(|&sk| sk >= j && sk < j + LANES) {
            v = mask_lane(v, sk - j, identity);
        }
        // SAFETY: c·8 + 8 ≤ len ≤ KEY_BLOCK.
        unsafe { _mm256_storeu_ps(buf.0.as_mut_ptr().add(c * LANES), v) };
        bmv = _mm256_max_ps(bmv, v);
    }
    let rem = len - full * LANES;
    if rem > 0 {
        let j = j0 + full * LANES;
        let mut acc = _mm256_setzero_ps();
        if let Some(p) = pre {
            acc = load(p, full * LANES);
        } else {
            for (k, &q) in query.iter().enumerate() {
                let df = _mm256_sub_ps(load(&xt[k * n..k * n + j0 + len], j), _mm256_set1_ps(q));
                acc = _mm256_fmadd_ps(df, df, acc);
            }
        }
        let mut v = P::lane(V8 {
            v: _mm256_mul_ps(acc, inv),
            isa,
        })
        .v;
        v = _mm256_blendv_ps(identity, v, _mm256_castsi256_ps(head_mask(rem)));
        if let Some(sk) = skip.filter(|&sk| sk >= j && sk < j + rem) {
            v = mask_lane(v, sk - j, identity);
        }
        // SAFETY: full·8 + 8 ≤ KEY_BLOCK since rem > 0 and len ≤ KEY_BLOCK.
        unsafe { _mm256_storeu_ps(buf.0.as_mut_ptr().add(full * LANES), v) };
        bmv = _mm256_max_ps(bmv, v);
    }
    bmv
}

/// `Σ_j w_j y_{c,j}` for up to four value columns `c0..c0+4` of the keys
/// `j0..j0+w.len()`, in registers.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn weighted_cols(w: &[f32], keys: &KeysSoa<'_>, j0: usize, c0: usize) -> [f32; 4] {
    let (n, len) = (keys.ld, w.len());
    let cols = (keys.q - c0).min(4);
    let ys: [&[f32]; 4] = std::array::from_fn(|c| {
        let c = c0 + c.min(cols - 1);
        &keys.yt[c * n + j0..c * n + j0 + len]
    });
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut o = 0;
    while o < len {
        let wv = load(w, o);
        for (a, y) in acc.iter_mut().zip(&ys).take(cols) {
            *a = _mm256_fmadd_ps(wv, load(y, o), *a);
        }
        o += LANES;
    }
    std::array::from_fn(|c| hsum(acc[c]))
}
