//! Inner products in `bf16` for kNN's filter, on CPUs with AVX-512 BF16
//! (`vdpbf16ps`: sixteen `f32` lanes, each adding two products of `bf16`
//! pairs). On an AMD Zen 4 the instruction does twice the multiply-adds of
//! an `f32` FMA in the same time, and the keys take half the bytes.
//!
//! Only kNN's filter uses them: its test needs a bound on the error of
//! each inner product, not the product itself, and every key that passes
//! is measured exactly as before (`knn_blocked.rs`), so the lists do not
//! change. The bound (docs/numerics.md, "kNN by inner products"): rounding
//! both factors to `bf16` moves each product by at most `(2·2⁻⁸ + 2⁻¹⁶)`
//! of its size, so `|s_b − q'·x'| ≤ (2⁻⁷ + 2⁻¹⁶ + d·u)·‖q'‖‖x'‖` plus
//! subnormals flushed; the filter adds [`GAMMA`] to its relative slack and
//! [`abs`] to its absolute one.
//!
//! Imports: `super::simd`, `crate::error`, `crate::matrix`.

#[cfg(target_arch = "x86_64")]
use super::simd::{Bf16Dot, KEY_BLOCK};
use crate::error::Result;
#[cfg(target_arch = "x86_64")]
use crate::matrix::try_zeros;

/// Keys per panel: one register of `f32` lanes (`panels::P`).
pub(crate) const LANES: usize = 16;
/// Query rows of a tile (`panels::ROWS`).
pub(crate) const ROWS: usize = 8;

/// What the `bf16` products add to the filter's relative slack `γ`: the
/// rounding of both factors (`2·2⁻⁸ + 2⁻¹⁶`) with a margin of `2⁻¹²` that
/// also covers the subnormal terms' relative part.
pub(crate) const GAMMA: f64 = 1.0 / 128.0 + 1.0 / 4096.0;

/// What the `bf16` products add to the filter's absolute slack in `d`
/// dimensions: `vdpbf16ps` reads subnormal inputs as zero and flushes
/// subnormal products and sums, each at most `2⁻¹²⁶` (and an input
/// flushed moves its product by `2⁻¹²⁶` of the other factor, at most
/// `2⁻¹²⁷(1 + x²)`): `(12d + 128)·2⁻¹²⁶` holds all of them, doubled.
pub(crate) fn abs(d: usize) -> f64 {
    (12 * d + 128) as f64 * f64::from(f32::MIN_POSITIVE)
}

/// Coordinate pairs per key: `⌈d/2⌉`.
pub(crate) fn pairs_of(d: usize) -> usize {
    d.div_ceil(2)
}

/// `x` rounded to the nearest `bf16` (ties to even), as its 16 bits. Not
/// for NaN (the inputs are finite).
pub(crate) fn to_bf16(x: f32) -> u32 {
    let b = x.to_bits();
    (b.wrapping_add(0x7fff + ((b >> 16) & 1))) >> 16
}

/// The keys' panels in `bf16` pairs: `c[(p·dp + t)·LANES + l]` holds
/// coordinate `2t` of key `p·LANES + l` in its low 16 bits and coordinate
/// `2t + 1` (zero past `d`) in its high 16 bits, so one register load
/// feeds sixteen keys' pair `t` to `vdpbf16ps`.
pub(crate) struct Bf16Panels {
    c: Vec<u32>,
    /// Pairs per key, `⌈d/2⌉`.
    dp: usize,
}

impl Bf16Panels {
    /// Bytes the pairs of `n` keys in `d` dimensions take.
    pub(crate) fn bytes(n: usize, d: usize) -> u64 {
        (n.div_ceil(LANES) * LANES) as u64 * pairs_of(d) as u64 * 4
    }

    /// Room for the pairs of `panels` panels of `d` coordinates, zero
    /// (each filled by [`fill_panel`]); or
    /// [`Error::TooLarge`](crate::Error::TooLarge) for `op`.
    pub(crate) fn try_zeroed(op: &'static str, panels: usize, d: usize) -> Result<Bf16Panels> {
        let dp = pairs_of(d);
        let len = (panels as u64).saturating_mul((dp * LANES) as u64);
        let c = try_zeros::<u32>(op, "bf16 key panels", len)?;
        Ok(Bf16Panels { c, dp })
    }

    /// Every pair, panel after panel (tests compare packings).
    #[cfg(test)]
    pub(crate) fn raw(&self) -> &[u32] {
        &self.c
    }

    /// Entries of one panel's pairs.
    pub(crate) fn panel_len(&self) -> usize {
        self.dp * LANES
    }

    /// The pairs of the first `first` panels and of the others, to fill.
    pub(crate) fn split_panels_mut(&mut self, first: usize) -> (&mut [u32], &mut [u32]) {
        let at = (first * self.dp * LANES).min(self.c.len());
        self.c.split_at_mut(at)
    }
}

/// One `f32` panel's pairs (`panel`: `c[k·LANES + l]`, coordinate `k` of
/// key `l`, zero-padded), each value rounded to the nearest `bf16`, into
/// `out` (one panel of [`Bf16Panels`]).
pub(crate) fn fill_panel(t: Bf16Dot, panel: &[f32], d: usize, out: &mut [u32]) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the token proves AVX-512F and AVX-512 BF16.
    unsafe {
        pack_panel(t, panel, d, out)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (t, panel, d, out);
}

/// One panel's pairs (`panel`: `d` registers of [`LANES`] keys; `out`:
/// exactly `⌈d/2⌉` registers, each reading coordinates `2t` and `2t + 1`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
fn pack_panel(_t: Bf16Dot, panel: &[f32], d: usize, out: &mut [u32]) {
    use std::arch::x86_64::*;
    assert!(panel.len() >= LANES * d && out.len() == pairs_of(d) * LANES);
    for (t, o) in out.chunks_exact_mut(LANES).enumerate() {
        let k = 2 * t;
        // SAFETY: coordinates k and k + 1 < d of the panel's 16 keys lie
        // within its LANES·d floats (asserted above); `o` holds 16 lanes.
        unsafe {
            let lo = _mm512_loadu_ps(panel.as_ptr().add(k * LANES));
            let hi = match k + 1 < d {
                true => _mm512_loadu_ps(panel.as_ptr().add((k + 1) * LANES)),
                false => _mm512_setzero_ps(),
            };
            let lo = _mm512_cvtepu16_epi32(std::mem::transmute::<__m256bh, __m256i>(
                _mm512_cvtneps_pbh(lo),
            ));
            let hi = _mm512_cvtepu16_epi32(std::mem::transmute::<__m256bh, __m256i>(
                _mm512_cvtneps_pbh(hi),
            ));
            let v = _mm512_or_si512(lo, _mm512_slli_epi32::<16>(hi));
            _mm512_storeu_si512(o.as_mut_ptr().cast(), v);
        }
    }
}

/// The pairs of [`ROWS`] centred query rows (`qc`, row-major, `d`
/// columns, zero rows included): `out[r·dp + t]` as in [`Bf16Panels`].
pub(crate) fn query_pairs(qc: &[f32], d: usize) -> Vec<u32> {
    let dp = pairs_of(d);
    let mut out = vec![0u32; ROWS * dp];
    for (row, o) in qc.chunks_exact(d).zip(out.chunks_exact_mut(dp)) {
        for (t, o) in o.iter_mut().enumerate() {
            let hi = row.get(2 * t + 1).map_or(0, |&x| to_bf16(x));
            *o = to_bf16(row[2 * t]) | (hi << 16);
        }
    }
    out
}

/// `out[r·KEY_BLOCK + (j − j0)] ≈ q'_r·x'_j` in `bf16` products for the
/// [`ROWS`] query rows of `qb` ([`query_pairs`]) and the keys
/// `j0..j0+len` (`j0` a multiple of [`LANES`], `len ≤ KEY_BLOCK`).
pub(crate) fn dot_tile(
    t: Bf16Dot,
    qb: &[u32],
    panels: &Bf16Panels,
    j0: usize,
    len: usize,
    out: &mut [f32; ROWS * KEY_BLOCK],
) {
    assert!(j0.is_multiple_of(LANES) && len > 0 && len <= KEY_BLOCK);
    assert!(qb.len() >= ROWS * panels.dp);
    assert!((j0 + len).div_ceil(LANES) * LANES * panels.dp <= panels.c.len());
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the token proves AVX-512F and AVX-512 BF16; the bounds are
    // asserted above.
    unsafe {
        tile_avx512bf16(t, qb, panels, j0, len, out)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (t, out);
}

/// [`dot_tile`]: eight rows by two panels at a time, sixteen accumulators
/// of one chain each (the bound is the sequential sum's, whatever the
/// order), stored masked where a panel runs past the block.
///
/// # Safety
/// AVX-512F and AVX-512 BF16 must be present; the bounds of [`dot_tile`]
/// must hold.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn tile_avx512bf16(
    _t: Bf16Dot,
    qb: &[u32],
    panels: &Bf16Panels,
    j0: usize,
    len: usize,
    out: &mut [f32; ROWS * KEY_BLOCK],
) {
    use std::arch::x86_64::*;
    let dp = panels.dp;
    let (p0, p1) = (j0 / LANES, (j0 + len).div_ceil(LANES));
    let (q, c) = (qb.as_ptr(), panels.c.as_ptr());
    let mut p = p0;
    while p < p1 {
        let w = (p1 - p).min(2);
        // A lone last panel is read twice; its second copy is not stored.
        let (x0, x1) = unsafe { (c.add(p * LANES * dp), c.add((p + w - 1) * LANES * dp)) };
        let mut a = [_mm512_setzero_ps(); 2 * ROWS];
        for t in 0..dp {
            // SAFETY: pair t < dp of panels p and p + w − 1 < p1, within
            // the asserted length; query pair t of each row within qb.
            unsafe {
                let k0: __m512bh =
                    std::mem::transmute(_mm512_loadu_si512(x0.add(t * LANES).cast()));
                let k1: __m512bh =
                    std::mem::transmute(_mm512_loadu_si512(x1.add(t * LANES).cast()));
                for g in 0..ROWS {
                    let qv: __m512bh =
                        std::mem::transmute(_mm512_set1_epi32(*q.add(g * dp + t) as i32));
                    a[2 * g] = _mm512_dpbf16_ps(a[2 * g], qv, k0);
                    a[2 * g + 1] = _mm512_dpbf16_ps(a[2 * g + 1], qv, k1);
                }
            }
        }
        for v in 0..w {
            let first = (p + v) * LANES - j0;
            let n = (len - first).min(LANES);
            let m: __mmask16 = if n == LANES { 0xffff } else { (1u16 << n) - 1 };
            for g in 0..ROWS {
                // SAFETY: lanes first..first+n of row g lie within the
                // row's KEY_BLOCK floats (first + n ≤ len ≤ KEY_BLOCK).
                unsafe {
                    _mm512_mask_storeu_ps(
                        out.as_mut_ptr().add(g * KEY_BLOCK + first),
                        m,
                        a[2 * g + v],
                    )
                };
            }
        }
        p += w;
    }
}

#[cfg(test)]
mod tests {
    use super::super::panels::{CentredRows, KnnRows, Panels, TileIsa, dot_tile as f32_tile};
    use super::super::test_data as data;
    use super::*;

    /// Every `bf16` inner product lies within the filter's bound of the
    /// `f64` one of the same centred values, for lengths with partial
    /// panels and an odd `d`, values over several decades.
    #[test]
    fn bf16_tiles_stay_within_the_bound() {
        let Some(t) = Bf16Dot::detect() else {
            return;
        };
        for (d, n) in [(1, 5), (3, 40), (32, 300), (33, 257), (128, 520), (784, 70)] {
            let x: Vec<f32> = data(n * d, d as u64)
                .iter()
                .enumerate()
                .map(|(i, v)| v * [1.0, 1e3, 1e-3, 7.0][i % 4])
                .collect();
            let q = data(ROWS * d, 1000 + d as u64);
            let panels = Panels::from_rows(&x, d, KnnRows::Lent).expect("near keys");
            let pairs = panels.bf16().expect("built where the CPU has BF16");
            let rows = CentredRows::new(&panels, &q);
            let qb = query_pairs(rows.qc(), d);
            let mut s = [0.0f32; ROWS * KEY_BLOCK];
            let mut s32 = [0.0f32; ROWS * KEY_BLOCK];
            for j0 in (0..n).step_by(KEY_BLOCK) {
                let len = KEY_BLOCK.min(n - j0);
                dot_tile(t, &qb, pairs, j0, len, &mut s);
                let span = panels.block(j0, Some(&x)).expect("packed on demand");
                f32_tile(TileIsa::best(), &rows, ROWS, span, j0, len, &mut s32);
                for r in 0..ROWS {
                    for j in j0..j0 + len {
                        let xc = panels_key(&panels, &x, j, d);
                        let qc = &rows.qc()[r * d..(r + 1) * d];
                        let exact: f64 = xc
                            .iter()
                            .zip(qc)
                            .map(|(&a, &b)| f64::from(a) * f64::from(b))
                            .sum();
                        let bound = (GAMMA + 1e-6 * d as f64)
                            * rows.nq[r].sqrt()
                            * panels.norms()[j].sqrt()
                            + abs(d);
                        let got = f64::from(s[r * KEY_BLOCK + j - j0]);
                        assert!(
                            (got - exact).abs() <= bound,
                            "d={d} r={r} j={j}: {got} vs {exact} (bound {bound})"
                        );
                        let f = f64::from(s32[r * KEY_BLOCK + j - j0]);
                        assert!(
                            (got - f).abs() <= 2.0 * bound,
                            "d={d} r={r} j={j}: bf16 {got}, f32 {f}"
                        );
                    }
                }
            }
        }
    }

    /// Key `j`'s centred coordinates as the panels hold them.
    fn panels_key(panels: &Panels, x: &[f32], j: usize, d: usize) -> Vec<f32> {
        (0..d)
            .map(|k| (f64::from(x[j * d + k]) - panels.mean()[k]) as f32)
            .collect()
    }

    #[test]
    fn rounding_to_bf16_is_to_nearest_even() {
        assert_eq!(to_bf16(1.0), 0x3f80);
        assert_eq!(to_bf16(-2.0), 0xc000);
        // 1 + 2⁻⁸ is halfway between 1 and 1 + 2⁻⁷: ties to even (1).
        assert_eq!(to_bf16(1.0 + 1.0 / 256.0), 0x3f80);
        // 1 + 3·2⁻⁸ is halfway between 1 + 2⁻⁷ and 1 + 2·2⁻⁷: to even.
        assert_eq!(to_bf16(1.0 + 3.0 / 256.0), 0x3f82);
        // Just above a halfway point rounds up.
        assert_eq!(to_bf16(f32::from_bits(0x3f80_8001)), 0x3f81);
        for x in [0.1f32, -3.7, 1e-20, 6e17, 123.456] {
            let back = f32::from_bits(to_bf16(x) << 16);
            assert!(((back - x) / x).abs() <= 1.0 / 256.0, "{x} -> {back}");
        }
    }
}
