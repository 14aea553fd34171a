//! Fused, streaming Nadaraya–Watson local mean on the CPU.
//!
//! Queries are split into groups handled by rayon tasks; each group walks
//! the keys in blocks of [`KEY_BLOCK`] that stay in L1 while every query of
//! the group visits them. Per query the row state `(m, s, u)` of DESIGN §3
//! is kept in `f64`; a block's sums are formed in `f32` lanes and merged
//! into it. The `M×N` matrix is never stored.

use rayon::prelude::*;

use super::simd::{KEY_BLOCK, dot, has_avx2_fma, scaled_sq_dists, sum_of};
use super::weights::{block_weights, initial_max};
use crate::kernel::Kernel;

/// Queries that share one pass over the keys.
const QUERY_GROUP: usize = 8;

/// Keys and values stored column-major for unit-stride lane loads.
pub(crate) struct KeysSoa<'a> {
    /// `d × n`: coordinate `k` of key `j` at `xt[k·n + j]`.
    pub xt: &'a [f32],
    /// `q × n`: value column `c` of key `j` at `yt[c·n + j]`.
    pub yt: &'a [f32],
    /// Number of keys.
    pub n: usize,
    /// Number of value columns.
    pub q: usize,
}

/// Local means of `queries` (row-major, `d` columns) into `out` (`q`
/// columns). Returns the number of empty rows (written as NaN).
pub(crate) fn local_mean(
    kernel: &Kernel,
    queries: &[f32],
    d: usize,
    keys: &KeysSoa<'_>,
    out: &mut [f32],
) -> usize {
    let q = keys.q;
    let rows_per_task = QUERY_GROUP * 4;
    out.par_chunks_mut(rows_per_task * q)
        .zip(queries.par_chunks(rows_per_task * d))
        .map(|(out_chunk, q_chunk)| {
            out_chunk
                .chunks_mut(QUERY_GROUP * q)
                .zip(q_chunk.chunks(QUERY_GROUP * d))
                .map(|(o, qs)| group(kernel, qs, d, keys, o))
                .sum::<usize>()
        })
        .sum()
}

/// One group of queries, dispatched to the best compiled version.
fn group(kernel: &Kernel, queries: &[f32], d: usize, keys: &KeysSoa<'_>, out: &mut [f32]) -> usize {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: the CPU supports AVX2 and FMA (checked just above).
        return unsafe { group_avx2(kernel, queries, d, keys, out) };
    }
    let _ = has_avx2_fma;
    group_impl::<false>(kernel, queries, d, keys, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn group_avx2(
    kernel: &Kernel,
    queries: &[f32],
    d: usize,
    keys: &KeysSoa<'_>,
    out: &mut [f32],
) -> usize {
    group_impl::<true>(kernel, queries, d, keys, out)
}

#[inline(always)]
fn group_impl<const FMA: bool>(
    kernel: &Kernel,
    queries: &[f32],
    d: usize,
    keys: &KeysSoa<'_>,
    out: &mut [f32],
) -> usize {
    let profile = kernel.profile();
    let inv_h2 = kernel.inv_h2();
    let (n, q) = (keys.n, keys.q);
    let g = queries.len() / d;
    let mut m = [initial_max(profile); QUERY_GROUP];
    let mut s = [0.0f64; QUERY_GROUP];
    let mut u = vec![0.0f64; QUERY_GROUP * q];
    let mut buf = [0.0f32; KEY_BLOCK];
    let mut j0 = 0;
    while j0 < n {
        let len = KEY_BLOCK.min(n - j0);
        let w = &mut buf[..len];
        for r in 0..g {
            scaled_sq_dists::<FMA>(keys.xt, n, j0, &queries[r * d..(r + 1) * d], inv_h2, w);
            let Some(factor) = block_weights::<FMA>(profile, w, &mut m[r]) else {
                continue;
            };
            let ur = &mut u[r * q..(r + 1) * q];
            if factor != 1.0 {
                s[r] *= factor;
                ur.iter_mut().for_each(|x| *x *= factor);
            }
            let sb = sum_of(w);
            if sb == 0.0 {
                continue;
            }
            s[r] += f64::from(sb);
            for (c, uc) in ur.iter_mut().enumerate() {
                *uc += f64::from(dot::<FMA>(w, &keys.yt[c * n + j0..c * n + j0 + len]));
            }
        }
        j0 += len;
    }
    let mut empty = 0;
    for r in 0..g {
        let o = &mut out[r * q..(r + 1) * q];
        if s[r] > 0.0 {
            for (oc, &uc) in o.iter_mut().zip(&u[r * q..(r + 1) * q]) {
                *oc = (uc / s[r]) as f32;
            }
        } else {
            o.fill(f32::NAN);
            empty += 1;
        }
    }
    empty
}
