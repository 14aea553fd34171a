//! Explicit AVX-512 micro-kernels of the CPU attention (the build chosen
//! by the [`Avx512`] token): the score tile `R × BK` (all 64 keys of a
//! tile, four zmm accumulators per row), `P·V` over `R × 16·C` value
//! columns, and the softmax between them (lazy row maximum, `2^{s−m}` in place
//! and its sum) sixteen lanes at a time. With 32 vector registers a tile of
//! six rows keeps 24 accumulators, so each coordinate costs four loads and
//! six broadcasts for 24 fused multiply-adds (the AVX2 tile in `avx2.rs`:
//! two loads and six broadcasts for 12).
//!
//! The exponential is `simd::exp2_capped` lane for lane (same rounding,
//! same polynomial, same cut-off, NaN gives 0 in both), so the builds
//! differ only in the order of the sums.
//!
//! Imports: `super` (tile sizes, the lazy margin), `super::super::simd`
//! (the token, the exponential's constants).

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use super::super::simd::{Avx512, EXP2_MIN, EXP2_POLY};
use super::{BK, LAZY, MR};

/// Lanes of one zmm register of `f32`.
const W: usize = 16;
/// zmm registers across one tile of keys.
const KW: usize = BK / W;
const _: () = assert!(BK.is_multiple_of(W) && KW == 4);

/// The scaled queries of a block, repacked for [`scores`]: groups of
/// [`MR`] rows, each coordinate's [`MR`] values side by side
/// (`[g][k][r]`, zero rows after the last), so the tile's broadcasts read
/// one pointer at fixed offsets.
pub(super) fn pack_queries(qs: &[f32], rows: usize, d: usize) -> Vec<f32> {
    let groups = rows.div_ceil(MR);
    let mut out = vec![0.0f32; groups * MR * d];
    for (i, row) in qs.chunks_exact(d).take(rows).enumerate() {
        let (g, r) = (i / MR, i % MR);
        for (k, &x) in row.iter().enumerate() {
            out[(g * d + k) * MR + r] = x;
        }
    }
    out
}

/// Scores of `rows` queries packed by [`pack_queries`] against one whole
/// key tile `kt` (transposed, `d × BK`, zero beyond the last key), into
/// `s` (row stride [`BK`]); all [`BK`] columns are written.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) fn scores(t: Avx512, qp: &[f32], rows: usize, d: usize, kt: &[f32], s: &mut [f32]) {
    let mut r = 0;
    while r < rows {
        let rr = (rows - r).min(MR);
        let (q, out) = (&qp[r * d..(r + MR) * d], &mut s[r * BK..]);
        match rr {
            1 => score_tile::<1>(t, q, d, kt, out),
            2 => score_tile::<2>(t, q, d, kt, out),
            3 => score_tile::<3>(t, q, d, kt, out),
            4 => score_tile::<4>(t, q, d, kt, out),
            5 => score_tile::<5>(t, q, d, kt, out),
            _ => score_tile::<MR>(t, q, d, kt, out),
        }
        r += rr;
    }
}

/// `R × BK` scores `s[r·BK + l] = Σ_k q[k·MR + r]·kt[k·BK + l]`.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
fn score_tile<const R: usize>(_t: Avx512, q: &[f32], d: usize, kt: &[f32], s: &mut [f32]) {
    assert!(d >= 1 && R <= MR && q.len() >= MR * d && kt.len() >= d * BK);
    assert!(s.len() >= (R - 1) * BK + BK);
    let mut acc = [[_mm512_setzero_ps(); KW]; R];
    let (mut qp, mut kp) = (q.as_ptr(), kt.as_ptr());
    for _ in 0..d {
        // SAFETY: after k steps kp = kt + k·BK and qp = q + k·MR, and
        // k < d: kp + BK ≤ kt + d·BK, qp + MR ≤ q + d·MR.
        unsafe {
            let x: [__m512; KW] = std::array::from_fn(|c| _mm512_loadu_ps(kp.add(c * W)));
            for (r, a) in acc.iter_mut().enumerate() {
                let b = _mm512_set1_ps(*qp.add(r));
                for c in 0..KW {
                    a[c] = _mm512_fmadd_ps(b, x[c], a[c]);
                }
            }
            kp = kp.add(BK);
            qp = qp.add(MR);
        }
    }
    let sp = s.as_mut_ptr();
    for (r, a) in acc.iter().enumerate() {
        for (c, v) in a.iter().enumerate() {
            // SAFETY: r·BK + c·W + W ≤ R·BK ≤ s.len().
            unsafe { _mm512_storeu_ps(sp.add(r * BK + c * W), *v) };
        }
    }
}

/// `o += P·V`: `P` is `rows × len` (row stride [`BK`]), `V` the values of
/// the tile's keys (row stride `qp`, a multiple of 16), `o` is `rows × qp`.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) fn weighted_values(
    t: Avx512,
    p: &[f32],
    rows: usize,
    len: usize,
    v: &[f32],
    qp: usize,
    o: &mut [f32],
) {
    assert!(
        qp.is_multiple_of(W),
        "value columns packed to whole registers"
    );
    let mut c = 0;
    while c < qp {
        let cw = ((qp - c) / W).min(KW);
        let mut r = 0;
        while r < rows {
            let rr = (rows - r).min(MR);
            let (pr, or) = (&p[r * BK..], &mut o[r * qp..]);
            macro_rules! cols {
                ($r:literal) => {
                    match cw {
                        1 => value_tile::<$r, 1>(t, pr, len, v, qp, c, or),
                        2 => value_tile::<$r, 2>(t, pr, len, v, qp, c, or),
                        3 => value_tile::<$r, 3>(t, pr, len, v, qp, c, or),
                        _ => value_tile::<$r, 4>(t, pr, len, v, qp, c, or),
                    }
                };
            }
            match rr {
                1 => cols!(1),
                2 => cols!(2),
                3 => cols!(3),
                4 => cols!(4),
                5 => cols!(5),
                _ => cols!(6),
            }
            r += rr;
        }
        c += cw * W;
    }
}

/// `o[r·qp + c + l] += Σ_{j<len} p[r·BK + j]·v[j·qp + c + l]` for `R` rows
/// and `16·C` columns.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
fn value_tile<const R: usize, const C: usize>(
    _t: Avx512,
    p: &[f32],
    len: usize,
    v: &[f32],
    qp: usize,
    c: usize,
    o: &mut [f32],
) {
    assert!(len <= BK && p.len() >= (R - 1) * BK + len && c + C * W <= qp);
    assert!(v.len() >= len * qp && o.len() >= (R - 1) * qp + c + C * W);
    let op = o.as_mut_ptr();
    let mut acc = [[_mm512_setzero_ps(); C]; R];
    for (r, a) in acc.iter_mut().enumerate() {
        for (l, x) in a.iter_mut().enumerate() {
            // SAFETY: r·qp + c + 16·(l+1) ≤ (R−1)·qp + c + 16·C ≤ o.len().
            *x = unsafe { _mm512_loadu_ps(op.add(r * qp + c + l * W)) };
        }
    }
    let (pp, vp) = (p.as_ptr(), v.as_ptr());
    for j in 0..len {
        // SAFETY: j·qp + c + 16·C ≤ len·qp ≤ v.len(); r·BK + j < p.len().
        unsafe {
            let y: [__m512; C] =
                std::array::from_fn(|l| _mm512_loadu_ps(vp.add(j * qp + c + l * W)));
            for (r, a) in acc.iter_mut().enumerate() {
                let w = _mm512_set1_ps(*pp.add(r * BK + j));
                for l in 0..C {
                    a[l] = _mm512_fmadd_ps(w, y[l], a[l]);
                }
            }
        }
    }
    for (r, a) in acc.iter().enumerate() {
        for (l, x) in a.iter().enumerate() {
            // SAFETY: as for the loads.
            unsafe { _mm512_storeu_ps(op.add(r * qp + c + l * W), *x) };
        }
    }
}

/// The mask of the first `n` lanes (`n ≤ 16`).
#[inline(always)]
fn first(n: usize) -> __mmask16 {
    ((1u32 << n) - 1) as __mmask16
}

/// `attention::raised_max` on sixteen lanes: `m` while every element `x`
/// of `row` has `x − m ≤ LAZY` (`len ≤ BK`), else the largest element. A
/// whole tile needs no horizontal maximum unless the reference moves.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) fn raised_max(_t: Avx512, row: &[f32], m: f32) -> f32 {
    assert!(row.len() <= BK);
    let p = row.as_ptr();
    let mx = if row.len() == BK {
        // A whole tile: four independent loads, a tree of maxima.
        // SAFETY: the row holds BK = 4·16 floats.
        let x: [__m512; KW] = std::array::from_fn(|c| unsafe { _mm512_loadu_ps(p.add(c * W)) });
        _mm512_max_ps(_mm512_max_ps(x[0], x[1]), _mm512_max_ps(x[2], x[3]))
    } else {
        let mut mx = _mm512_set1_ps(f32::NEG_INFINITY);
        let mut j = 0;
        while j < row.len() {
            let n = (row.len() - j).min(W);
            // SAFETY: lanes j..j+n lie in `row`; the others are not read.
            let x = unsafe { _mm512_mask_loadu_ps(mx, first(n), p.add(j)) };
            mx = _mm512_max_ps(mx, x);
            j += n;
        }
        mx
    };
    let gap = _mm512_sub_ps(mx, _mm512_set1_ps(m));
    match _mm512_cmp_ps_mask::<_CMP_GT_OQ>(gap, _mm512_set1_ps(LAZY)) {
        0 => m,
        _ => _mm512_reduce_max_ps(mx),
    }
}

/// `row[j] = 2^{(row[j] − m)·log₂e}` in place, `simd::exp2_capped` lane
/// for lane (every `row[j] − m` at most `LAZY`, or −∞), and the sum of the
/// results.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) fn exp2_sum(_t: Avx512, row: &mut [f32], m: f32) -> f32 {
    assert!(row.len() <= BK);
    let p = row.as_mut_ptr();
    let (mv, l2e) = (_mm512_set1_ps(m), _mm512_set1_ps(std::f32::consts::LOG2_E));
    if row.len() == BK {
        // A whole tile: four independent exponentials in flight.
        // SAFETY: the row holds BK = 4·16 floats.
        let x: [__m512; KW] = std::array::from_fn(|c| unsafe {
            _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(p.add(c * W)), mv), l2e)
        });
        let e = exp2_capped(x);
        for (c, v) in e.iter().enumerate() {
            // SAFETY: as above.
            unsafe { _mm512_storeu_ps(p.add(c * W), *v) };
        }
        let s = _mm512_add_ps(_mm512_add_ps(e[0], e[1]), _mm512_add_ps(e[2], e[3]));
        return _mm512_reduce_add_ps(s);
    }
    let mut sum = _mm512_setzero_ps();
    let mut j = 0;
    while j < row.len() {
        let n = (row.len() - j).min(W);
        let k = first(n);
        // SAFETY: lanes j..j+n lie in `row`; the others are neither read
        // nor written.
        unsafe {
            let x = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, p.add(j)), mv), l2e);
            let [e] = exp2_capped([x]);
            _mm512_mask_storeu_ps(p.add(j), k, e);
            sum = _mm512_mask_add_ps(sum, k, sum, e);
        }
        j += n;
    }
    _mm512_reduce_add_ps(sum)
}

/// `simd::exp2_capped` of `N` registers of sixteen lanes: the same
/// polynomial on `r = x − round(x)` (`vrndscaleps`, ties to even, as the
/// portable build's magic-number rounding), scaled by `2^round(x)` in one
/// `vscalefps` (the same single rounding as its multiply by an exact power
/// of 2); lanes below `EXP2_MIN`, −∞ and NaN give 0.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
fn exp2_capped<const N: usize>(x: [__m512; N]) -> [__m512; N] {
    let n = x.map(|v| _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v));
    let r: [__m512; N] = std::array::from_fn(|c| _mm512_sub_ps(x[c], n[c]));
    let mut p = [_mm512_set1_ps(EXP2_POLY[0]); N];
    for &coef in &EXP2_POLY[1..] {
        for c in 0..N {
            p[c] = _mm512_fmadd_ps(p[c], r[c], _mm512_set1_ps(coef));
        }
    }
    let lo = _mm512_set1_ps(EXP2_MIN);
    std::array::from_fn(|c| {
        let keep = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(x[c], lo);
        _mm512_maskz_scalef_ps(keep, p[c], n[c])
    })
}
