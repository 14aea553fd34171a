//! Kernel softmax (attention), its weight matrix and the linear feature
//! local mean on the CPU: one file per op (`attention.rs`, `matrix.rs`,
//! `feature.rs`), the AVX2 micro-kernels in `avx2.rs`, and here what the
//! attention and the matrix share: the tile sizes, the packed keys, the
//! batch description and the score micro-kernel.
//!
//! Attention is FlashAttention's scheme on the CPU: rayon tasks take a
//! block of [`BQ`] query rows of one batch (and, when there are too few
//! blocks to occupy the threads, a range of keys, merged afterwards with
//! `merge_states`); each block walks the keys in tiles of [`BK`]. Per
//! tile, the scores `S = (s·Φ_blk)Ψ_tileᵀ` come from a register-tiled
//! micro-kernel ([`MR`] rows × [`NR`] keys), the row maxima move the
//! running maximum `m`, `P = e^{S−m}` is formed in place and `P·V_tile`
//! is accumulated by a second micro-kernel. Only `BQ × BK` scores exist at
//! any time; the extra memory is one packed copy of the keys and values
//! (linear in `N`). The tile sums are `f32`; every few tiles they are
//! merged into the row state `(m, l, acc)` kept in `f64`.
//!
//! Everything is compiled twice (baseline x86-64 and AVX2 + FMA, chosen at
//! run time by the [`Avx2Fma`](super::simd::Avx2Fma) token), as in `simd.rs`; the AVX2 build
//! takes its two micro-kernels from `avx2.rs`, the portable one from the
//! lane-group loops here and in `attention.rs`.
//!
//! Imports: `super::simd`, `crate::error`, `crate::matrix`, `crate::types`.

/// Runs `$f::<S, R>` with `R` the rows left (1..=MR).
macro_rules! by_rows {
    ($rows:expr, $f:ident, $isa:ident, ($($arg:expr),*)) => {
        match $rows {
            1 => $f::<$isa, 1>($($arg),*),
            2 => $f::<$isa, 2>($($arg),*),
            3 => $f::<$isa, 3>($($arg),*),
            4 => $f::<$isa, 4>($($arg),*),
            5 => $f::<$isa, 5>($($arg),*),
            _ => $f::<$isa, MR>($($arg),*),
        }
    };
}

mod attention;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod feature;
mod matrix;
mod prepared;
#[cfg(test)]
mod tests;

use super::simd::{Isa, LANES, fmadd};
use crate::error::Result;
use crate::matrix::try_zeros;

pub(crate) use feature::feature_local_mean;
pub(crate) use matrix::softmax_matrix;
pub(crate) use prepared::CpuAttention;

/// Query rows per block (a multiple of [`SUB`]).
pub(crate) const BQ: usize = 192;
/// Query rows whose scores exist at a time inside a block of the
/// attention (a multiple of [`MR`]): each key tile and its values serve
/// the block's [`BQ`] rows a sub-block after another while they are in
/// cache, so the keys stream from memory `M/BQ` times, not `M/SUB`.
pub(crate) const SUB: usize = 48;
const _: () = assert!(SUB.is_multiple_of(MR) && BQ.is_multiple_of(SUB));
/// Keys per tile.
pub(crate) const BK: usize = 64;
/// Rows of the register tile.
pub(super) const MR: usize = 6;
/// Keys (or value columns) of the register tile: two lane groups.
pub(crate) const NR: usize = 2 * LANES;

/// How far a score may rise above its row's reference maximum before the
/// reference moves: weights up to `e⁵ ≈ 148`, so a tile's `f32` sums (at
/// most `FLUSH_TILES·BK` terms, values within `2⁶⁴`: the op divides larger
/// ones by a power of 2, `ops::softmax::safe_values`) stay far from
/// overflow.
pub(super) const LAZY: f32 = 5.0;

/// One batch's keys (and values), packed for the micro-kernels (the
/// default: nothing packed).
#[derive(Default)]
pub(super) struct Packed {
    /// Keys transposed tile by tile: coordinate `k` of key `t·BK + c` at
    /// `kt[(t·d + k)·BK + c]` (each tile one contiguous `d × BK` block),
    /// zero beyond `N`.
    pub kt: Vec<f32>,
    /// Values, `N × qp` with zero columns beyond `q` (empty when unused).
    pub v: Vec<f32>,
    pub qp: usize,
}

impl Packed {
    /// The transposed keys of the tile starting at key `j0` (a multiple of [`BK`]).
    pub(super) fn key_tile(&self, j0: usize, d: usize) -> &[f32] {
        &self.kt[j0 * d..(j0 + BK) * d]
    }

    /// Writes one batch's keys and values into this packing, made by
    /// [`pack`] for inputs of the same shape: every key and value position
    /// is written, the padding (zero) is left as it is, so a packing can
    /// serve batch after batch.
    pub(super) fn fill(&mut self, psi: &[f32], d: usize, values: Option<(&[f32], usize)>) {
        for (j, row) in psi.chunks_exact(d).enumerate() {
            let (t, c) = (j / BK, j % BK);
            for (k, &x) in row.iter().enumerate() {
                self.kt[(t * d + k) * BK + c] = x;
            }
        }
        if let Some((v, q)) = values {
            for (dst, src) in self.v.chunks_exact_mut(self.qp).zip(v.chunks_exact(q)) {
                dst[..q].copy_from_slice(src);
            }
        }
    }
}

/// Packs one batch's keys `psi` (`n × d`) and `values` (`n × q`), or
/// [`Error::TooLarge`](crate::Error::TooLarge) for `op`.
pub(super) fn pack(
    op: &'static str,
    psi: &[f32],
    n: usize,
    d: usize,
    values: Option<(&[f32], usize)>,
) -> Result<Packed> {
    let len = (n.next_multiple_of(BK) as u64).saturating_mul(d as u64);
    let kt = try_zeros::<f32>(op, "packed keys", len)?;
    let (v, qp) = match values {
        Some((_, q)) => {
            let qp = q.next_multiple_of(NR);
            let vp = try_zeros::<f32>(op, "packed values", (n as u64).saturating_mul(qp as u64))?;
            (vp, qp)
        }
        None => (Vec::new(), 0),
    };
    let mut packed = Packed { kt, v, qp };
    packed.fill(psi, d, values);
    Ok(packed)
}

/// What every block of one batch shares.
pub(super) struct Batch<'a> {
    /// The batch's queries, row-major `M × d`.
    pub phi: &'a [f32],
    pub keys: &'a Packed,
    pub d: usize,
    pub n: usize,
    pub scale: f32,
    /// Causal mask: query `i` sees keys `j ≤ i + off`.
    pub causal: bool,
    pub off: usize,
}

impl Batch<'_> {
    /// Keys `0..end` that some query of rows `i0..i1` may see.
    pub(super) fn key_end(&self, i1: usize) -> usize {
        if self.causal {
            self.n.min(i1 - 1 + self.off + 1)
        } else {
            self.n
        }
    }
}

/// The scaled queries of rows `i0..i1`.
pub(super) fn scaled_queries(b: &Batch<'_>, i0: usize, i1: usize) -> Vec<f32> {
    b.phi[i0 * b.d..i1 * b.d]
        .iter()
        .map(|&x| x * b.scale)
        .collect()
}

/// Scores of `rows` scaled queries (row-major, `d` columns) against one
/// tile of `len` keys (`kt`, transposed: `d × BK`) into `s` (row stride
/// [`BK`]); columns up to the next multiple of [`NR`] are written (padding
/// keys score 0).
#[inline(always)]
pub(super) fn scores<S: Isa>(
    isa: S,
    qs: &[f32],
    rows: usize,
    d: usize,
    kt: &[f32],
    len: usize,
    s: &mut [f32],
) {
    let cols = len.next_multiple_of(NR);
    let mut r = 0;
    while r < rows {
        let rr = (rows - r).min(MR);
        for c in (0..cols).step_by(NR) {
            let (q, out) = (&qs[r * d..(r + rr) * d], &mut s[r * BK + c..]);
            by_rows!(rr, score_tile, S, (isa, q, d, kt, BK, c, out));
        }
        r += rr;
    }
}

/// `R × NR` scores: `s[r·BK + l] = Σ_k qs[r·d + k]·kt[k·ld + j + l]`.
#[inline(always)]
fn score_tile<S: Isa, const R: usize>(
    isa: S,
    qs: &[f32],
    d: usize,
    kt: &[f32],
    ld: usize,
    j: usize,
    s: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if let Some(isa) = isa.avx2_fma() {
        // SAFETY: `isa` is an `Avx2Fma` token, made only where run-time
        // detection found AVX2 and FMA.
        return unsafe { avx2::score_tile::<R>(isa, qs, d, kt, ld, j, s) };
    }
    assert!(d >= 1 && qs.len() >= R * d && j + NR <= ld && kt.len() >= d * ld);
    assert!(s.len() >= (R - 1) * BK + NR);
    let mut acc = [[0.0f32; NR]; R];
    for k in 0..d {
        // SAFETY: k·ld + j + NR ≤ (d−1)·ld + ld ≤ kt.len() (asserted above).
        let kv = unsafe {
            kt.as_ptr()
                .add(k * ld + j)
                .cast::<[f32; NR]>()
                .read_unaligned()
        };
        for (r, a) in acc.iter_mut().enumerate() {
            // SAFETY: r·d + k < R·d ≤ qs.len().
            let qv = unsafe { *qs.get_unchecked(r * d + k) };
            for l in 0..NR {
                a[l] = fmadd::<S>(qv, kv[l], a[l]);
            }
        }
    }
    for (r, a) in acc.iter().enumerate() {
        s[r * BK..r * BK + NR].copy_from_slice(a);
    }
}
