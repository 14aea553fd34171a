//! The normalized kernel-softmax weight matrix on the CPU: scores tile by
//! tile into the output rows, then a softmax per row.
//!
//! Imports: `super` (tiles, packing, scores), `super::super::simd`,
//! `crate::error`, `crate::matrix`, `crate::types`.

use rayon::prelude::*;

use super::super::simd::{Avx2Fma, Isa, Portable, exp_nonpos, max_of, sum_of};
use super::{BK, BQ, Batch, pack, scaled_queries, scores};
use crate::cancel::Checkpoint;
use crate::error::Result;
use crate::matrix::alloc_output;
use crate::types::{Attention, Heads};

/// The normalized weights of every batch, row-major `(B·M) × N`.
pub(crate) fn softmax_matrix(
    phi: &Heads<'_>,
    psi: &Heads<'_>,
    attn: &Attention,
) -> Result<Vec<f32>> {
    softmax_matrix_on(phi, psi, attn, Avx2Fma::detect())
}

/// [`softmax_matrix`] on the AVX2 + FMA build when `isa` holds the token,
/// else on the portable one (`None` forces it).
pub(crate) fn softmax_matrix_on(
    phi: &Heads<'_>,
    psi: &Heads<'_>,
    attn: &Attention,
    isa: Option<Avx2Fma>,
) -> Result<Vec<f32>> {
    let (nb, m, n, d) = (phi.batch, phi.rows, psi.rows, phi.cols());
    let mut out = alloc_output("softmax_matrix", "output", nb * m, n)?;
    // Read on the calling thread, before the batches fan out.
    let cp = Checkpoint::current("softmax_matrix");
    out.par_chunks_mut(m * n)
        .enumerate()
        .try_for_each(|(b, ob)| {
            if cp.is_cancelled() {
                return Ok(());
            }
            let keys = pack("softmax_matrix", psi.batch_slice(b), n, d, None)?;
            let batch = Batch {
                phi: phi.batch_slice(b),
                keys: &keys,
                d,
                n,
                scale: attn.scale,
                causal: attn.causal,
                off: n - m.min(n),
            };
            ob.par_chunks_mut(BQ * n).enumerate().for_each(|(blk, o)| {
                if cp.is_cancelled() {
                    return;
                }
                let i0 = blk * BQ;
                #[cfg(target_arch = "x86_64")]
                if let Some(isa) = isa {
                    // SAFETY: `isa` is an `Avx2Fma` token, made only where
                    // run-time detection found AVX2 and FMA.
                    return unsafe { matrix_rows_avx2(isa, &batch, i0, o) };
                }
                matrix_rows(Portable, &batch, i0, o);
            });
            Ok::<(), crate::error::Error>(())
        })?;
    cp.check()?;
    Ok(out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn matrix_rows_avx2(isa: Avx2Fma, b: &Batch<'_>, i0: usize, out: &mut [f32]) {
    matrix_rows(isa, b, i0, out);
}

/// Rows `i0..` of one batch's weight matrix into `out` (row stride `N`):
/// logits tile by tile, then per row `e^{s−m} / Σ e^{s−m}`.
#[inline(always)]
fn matrix_rows<S: Isa>(isa: S, b: &Batch<'_>, i0: usize, out: &mut [f32]) {
    let n = b.n;
    let rows = out.len() / n;
    let qs = scaled_queries(b, i0, i0 + rows);
    let mut s = vec![0.0f32; rows * BK];
    let end = b.key_end(i0 + rows);
    for j0 in (0..end).step_by(BK) {
        let len = BK.min(end - j0);
        scores(isa, &qs, rows, b.d, b.keys.key_tile(j0, b.d), len, &mut s);
        for r in 0..rows {
            out[r * n + j0..r * n + j0 + len].copy_from_slice(&s[r * BK..r * BK + len]);
        }
    }
    for (r, row) in out.chunks_exact_mut(n).enumerate() {
        // Keys past the row's limit weigh 0 (the row has at least key 0).
        let lim = if b.causal { i0 + r + b.off + 1 } else { n };
        let (live, masked) = row.split_at_mut(lim);
        masked.fill(0.0);
        let mx = max_of(live);
        for x in live.iter_mut() {
            *x = exp_nonpos::<S>(*x - mx);
        }
        let sum: f64 = live.chunks(BK).map(|c| f64::from(sum_of(c))).sum();
        let inv = (1.0 / sum) as f32;
        for x in live.iter_mut() {
            *x *= inv;
        }
    }
}
