//! Explicit AVX2 + FMA micro-kernels of the CPU kernel softmax (the hot
//! loops of `mod.rs` and `attention.rs`, which hold the portable versions
//! they are tested against). Both keep a `R × 16` register tile (`2·R` accumulators) and
//! stream one operand through it with broadcasts of the other.
//!
//! Imports: `super` (tile sizes), `super::super::simd` (the token).

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use super::super::simd::Avx2Fma;
use super::{BK, NR};

/// `R × NR` scores `s[r·BK + l] = Σ_k qs[r·d + k]·kt[k·ld + j + l]`.
/// The token proves the CPU has AVX2 and FMA.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) fn score_tile<const R: usize>(
    _isa: Avx2Fma,
    qs: &[f32],
    d: usize,
    kt: &[f32],
    ld: usize,
    j: usize,
    s: &mut [f32],
) {
    assert!(d >= 1 && qs.len() >= R * d && j + NR <= ld && kt.len() >= d * ld);
    assert!(s.len() >= (R - 1) * BK + NR);
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    let (qp, kp) = (qs.as_ptr(), kt.as_ptr());
    for k in 0..d {
        // SAFETY: k·ld + j + 16 ≤ d·ld ≤ kt.len(); r·d + k < R·d ≤ qs.len().
        unsafe {
            let x0 = _mm256_loadu_ps(kp.add(k * ld + j));
            let x1 = _mm256_loadu_ps(kp.add(k * ld + j + 8));
            for (r, a) in acc.iter_mut().enumerate() {
                let q = _mm256_broadcast_ss(&*qp.add(r * d + k));
                a[0] = _mm256_fmadd_ps(q, x0, a[0]);
                a[1] = _mm256_fmadd_ps(q, x1, a[1]);
            }
        }
    }
    let sp = s.as_mut_ptr();
    for (r, a) in acc.iter().enumerate() {
        // SAFETY: r·BK + 16 ≤ (R−1)·BK + NR ≤ s.len().
        unsafe {
            _mm256_storeu_ps(sp.add(r * BK), a[0]);
            _mm256_storeu_ps(sp.add(r * BK + 8), a[1]);
        }
    }
}

/// `o[r·qp + c + l] += Σ_{j<len} p[r·BK + j]·v[j·qp + c + l]` for `R` rows
/// and `NR` columns.
/// The token proves the CPU has AVX2 and FMA.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) fn value_tile<const R: usize>(
    _isa: Avx2Fma,
    p: &[f32],
    len: usize,
    v: &[f32],
    qp: usize,
    c: usize,
    o: &mut [f32],
) {
    assert!(len <= BK && p.len() >= (R - 1) * BK + len && c + NR <= qp);
    assert!(v.len() >= len * qp && o.len() >= (R - 1) * qp + c + NR);
    let op = o.as_mut_ptr();
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    for (r, a) in acc.iter_mut().enumerate() {
        // SAFETY: r·qp + c + 16 ≤ (R−1)·qp + c + NR ≤ o.len().
        unsafe {
            a[0] = _mm256_loadu_ps(op.add(r * qp + c));
            a[1] = _mm256_loadu_ps(op.add(r * qp + c + 8));
        }
    }
    let (pp, vp) = (p.as_ptr(), v.as_ptr());
    for j in 0..len {
        // SAFETY: j·qp + c + 16 ≤ len·qp ≤ v.len(); r·BK + j < p.len().
        unsafe {
            let y0 = _mm256_loadu_ps(vp.add(j * qp + c));
            let y1 = _mm256_loadu_ps(vp.add(j * qp + c + 8));
            for (r, a) in acc.iter_mut().enumerate() {
                let w = _mm256_broadcast_ss(&*pp.add(r * BK + j));
                a[0] = _mm256_fmadd_ps(w, y0, a[0]);
                a[1] = _mm256_fmadd_ps(w, y1, a[1]);
            }
        }
    }
    for (r, a) in acc.iter().enumerate() {
        // SAFETY: as for the loads.
        unsafe {
            _mm256_storeu_ps(op.add(r * qp + c), a[0]);
            _mm256_storeu_ps(op.add(r * qp + c + 8), a[1]);
        }
    }
}
