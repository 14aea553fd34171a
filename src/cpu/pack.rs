//! The packing of one panel of keys for the inner-product tiles
//! (`panels.rs`): up to [`P`] keys centred on the keys' mean in `f64`,
//! rounded once to `f32`, stored coordinate by coordinate (`panel[k·P +
//! l]`), with their squared norms; the portable packing and the AVX-512
//! one, bit for bit the same.
//!
//! Imports: `super::simd`.

use super::simd::Avx512;
#[cfg(target_arch = "x86_64")]
use super::simd::transpose8;

/// Keys per panel.
pub(crate) const P: usize = 16;

/// One panel: the up to [`P`] `keys` (row-major, `d` columns) centred on
/// `mean` into `panel`, their squared norms added to `norms`, on the
/// AVX-512 build when `avx512` holds the token.
pub(crate) fn pack(
    avx512: Option<Avx512>,
    keys: &[f32],
    d: usize,
    mean: &[f64],
    panel: &mut [f32],
    norms: &mut [f64],
) {
    match avx512 {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the token is made only where run-time detection found
        // the features.
        Some(t) => unsafe { pack_avx512(t, keys, d, mean, panel, norms) },
        _ => pack_scalar(keys, d, mean, panel, norms),
    }
}

/// [`pack`] key by key: the up to [`P`] `keys` (row-major, `d` columns) centred on
/// `mean` (`f64` difference, rounded once) into `panel` (coordinate `k`
/// of key `l` at `panel[k·P + l]`), their squared norms added to `norms`
/// in `f64`, coordinate by coordinate.
fn pack_scalar(keys: &[f32], d: usize, mean: &[f64], panel: &mut [f32], norms: &mut [f64]) {
    pack_from(0, keys, d, mean, panel, norms);
}

/// [`pack_scalar`] of coordinates `from..d` only, each norm continued.
fn pack_from(
    from: usize,
    keys: &[f32],
    d: usize,
    mean: &[f64],
    panel: &mut [f32],
    norms: &mut [f64],
) {
    for (l, row) in keys.chunks_exact(d).enumerate() {
        for (i, (&x, &mu)) in row[from..].iter().zip(&mean[from..d]).enumerate() {
            let v = (f64::from(x) - mu) as f32;
            panel[(from + i) * P + l] = v;
            norms[l] += f64::from(v) * f64::from(v);
        }
    }
}

/// [`pack_scalar`] eight coordinates at a time: each key's eight centred in one
/// register of `f64`, rounded to `f32`, the sixteen keys' registers
/// transposed to one per coordinate; the same values and norms (the same
/// operations, each norm's in coordinate order), bit for bit.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn pack_avx512(
    _t: Avx512,
    keys: &[f32],
    d: usize,
    mean: &[f64],
    panel: &mut [f32],
    norms: &mut [f64],
) {
    use std::arch::x86_64::*;
    let nk = keys.len() / d;
    assert!(nk <= P && panel.len() >= P * d && norms.len() >= P && mean.len() >= d);
    let whole = d / 8 * 8;
    // SAFETY: norms holds P = 16 values (asserted).
    let mut acc: [__m512d; 2] =
        std::array::from_fn(|h| unsafe { _mm512_loadu_pd(norms.as_ptr().add(8 * h)) });
    for k0 in (0..whole).step_by(8) {
        // SAFETY: coordinates k0..k0+8 ≤ d of the mean and of each of the
        // nk key rows, within the slices asserted above.
        let mu = unsafe { _mm512_loadu_pd(mean.as_ptr().add(k0)) };
        let rows: [__m256; P] = std::array::from_fn(|l| match l < nk {
            true => {
                let x = unsafe { _mm256_loadu_ps(keys.as_ptr().add(l * d + k0)) };
                _mm512_cvtpd_ps(_mm512_sub_pd(_mm512_cvtps_pd(x), mu))
            }
            false => _mm256_setzero_ps(),
        });
        let halves = [
            transpose8(std::array::from_fn(|c| rows[c])),
            transpose8(std::array::from_fn(|c| rows[8 + c])),
        ];
        for kk in 0..8 {
            for (h, cols) in halves.iter().enumerate() {
                let v = cols[kk];
                // SAFETY: lanes 8h..8h+8 of coordinate k0 + kk < d.
                unsafe { _mm256_storeu_ps(panel.as_mut_ptr().add((k0 + kk) * P + 8 * h), v) };
                let w = _mm512_cvtps_pd(v);
                acc[h] = _mm512_add_pd(acc[h], _mm512_mul_pd(w, w));
            }
        }
    }
    for (h, a) in acc.iter().enumerate() {
        // SAFETY: norms holds P = 16 values.
        unsafe { _mm512_storeu_pd(norms.as_mut_ptr().add(8 * h), *a) };
    }
    // The last d mod 8 coordinates, key by key, continuing each norm.
    pack_from(whole, keys, d, mean, panel, norms);
}

#[cfg(test)]
mod tests {
    use super::super::test_data as data;
    use super::*;

    /// The AVX-512 packing gives the portable one's panels and norms bit
    /// for bit: every `d mod 8`, partial panels, values over decades.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn vector_packing_equals_the_scalar_one() {
        let Some(t) = Avx512::detect() else {
            return;
        };
        for d in (1..=20).chain([31, 32, 33, 784]) {
            for nk in [1, 7, 15, 16] {
                let keys: Vec<f32> = data(nk * d, (d * 31 + nk) as u64)
                    .iter()
                    .enumerate()
                    .map(|(i, v)| v * [1.0, 1e4, 1e-4, 3.0][i % 4] + 0.5)
                    .collect();
                let mean: Vec<f64> = (0..d).map(|k| 0.1 * k as f64 - 0.3).collect();
                let (mut p0, mut n0) = (vec![0.0f32; P * d], vec![0.0f64; P]);
                let (mut p1, mut n1) = (vec![0.0f32; P * d], vec![0.0f64; P]);
                pack_scalar(&keys, d, &mean, &mut p0, &mut n0);
                // SAFETY: detected above.
                unsafe { pack_avx512(t, &keys, d, &mean, &mut p1, &mut n1) };
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&p0), bits(&p1), "d={d} nk={nk}");
                let bits64 = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits64(&n0), bits64(&n1), "d={d} nk={nk}");
            }
        }
    }
}
