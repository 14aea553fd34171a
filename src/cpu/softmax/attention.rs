//! Kernel softmax (attention) on the CPU: blocks of query rows walk the
//! key tiles with a running maximum (see `mod.rs`), their `f64` row states
//! merged over key ranges.
//!
//! The weights are `e^{s−m} = 2^{(s−m)·log₂e}` ([`exp2_capped`]: no
//! Cody–Waite reduction), and the running maximum is lazy: a row's
//! reference `m` moves only when a tile holds a score above `m + LAZY`, so
//! most tiles need no horizontal maximum and no rescaling, and the weights
//! stay below `e^LAZY`.
//!
//! Imports: `super` (tiles, packing, scores), `super::super::simd`,
//! `crate::error`, `crate::matrix`, `crate::types`.

use std::borrow::Borrow;

use rayon::prelude::*;

use super::super::simd::{Isa, Portable, TileIsa, exp2_capped, fmadd, max_of, sum_of};
use super::{BK, BQ, Batch, LAZY, MR, NR, Packed, SUB, scaled_queries, scores};
use crate::cancel::Checkpoint;
use crate::error::Result;
use crate::matrix::alloc_output;
use crate::types::merge_states;
use crate::types::{Attention, Heads};

/// Key tiles accumulated in `f32` before they are merged into the `f64` state.
const FLUSH_TILES: usize = 8;

/// Row states of a block over some keys (docs/numerics.md): `m` the
/// reference maximum (a score reached it, and none exceeds it by more than
/// `LAZY`), `l = Σ e^{s−m}`, `acc = Σ e^{s−m} v` (`rows × qp`).
struct BlockState {
    m: Vec<f32>,
    l: Vec<f64>,
    acc: Vec<f64>,
    qp: usize,
}

impl BlockState {
    fn empty(rows: usize, qp: usize) -> Self {
        BlockState {
            m: vec![f32::NEG_INFINITY; rows],
            l: vec![0.0; rows],
            acc: vec![0.0; rows * qp],
            qp,
        }
    }

    fn merge(mut self, other: BlockState) -> BlockState {
        let qp = self.qp;
        let mut u = vec![0.0; qp];
        for r in 0..self.m.len() {
            let (m, l) = merge_states(
                (self.m[r], self.l[r], &self.acc[r * qp..(r + 1) * qp]),
                (other.m[r], other.l[r], &other.acc[r * qp..(r + 1) * qp]),
                &mut u,
            );
            self.m[r] = m;
            self.l[r] = l;
            self.acc[r * qp..(r + 1) * qp].copy_from_slice(&u);
        }
        self
    }

    /// `acc / l`, the first `q` columns of each row.
    fn finalize(&self, q: usize, out: &mut [f32]) {
        for (r, o) in out.chunks_exact_mut(q).enumerate() {
            let inv = 1.0 / self.l[r];
            for (oc, &a) in o.iter_mut().zip(&self.acc[r * self.qp..]) {
                *oc = (a * inv) as f32;
            }
        }
    }
}

/// Kernel softmax of every batch against keys and values packed per batch
/// by `packed(b)` (`n` keys, `q` value columns), row-major `(B·M) × q`.
/// The packing of a one-shot call or a prepared set's stored copy
/// (`stored`: every batch is packed already, so all run at once).
pub(crate) fn attend_packed<P>(
    phi: &Heads<'_>,
    (n, q): (usize, usize),
    attn: &Attention,
    isa: TileIsa,
    (packed, stored): (&(dyn Fn(usize) -> Result<P> + Sync), bool),
) -> Result<Vec<f32>>
where
    P: Borrow<Packed> + Send + Sync,
{
    let (nb, m, d) = (phi.batch, phi.rows, phi.cols());
    let mut out = alloc_output("kernel_softmax", "output", nb * m, q)?;
    // Read on the calling thread, before the batches fan out.
    let cp = Checkpoint::current("kernel_softmax");
    // Batches run a group at a time, a group as large as the thread pool,
    // so the packed keys and values in memory are those of one group, not
    // of every batch; a stored set's batches all at once (one fan-out,
    // which few queries per batch, as in decoding, need to fill the pool).
    let group = match stored {
        true => nb.max(1),
        false => rayon::current_num_threads().clamp(1, nb.max(1)),
    };
    let blocks = group * m.div_ceil(BQ);
    let want = 4 * rayon::current_num_threads();
    // Few blocks (short query sequences): split the keys too.
    let splits = if blocks >= want {
        1
    } else {
        want.div_ceil(blocks).min(n / (4 * BK)).max(1)
    };
    for (g, og) in out.chunks_mut(group * m * q).enumerate() {
        cp.check()?;
        let b0 = g * group;
        let group_keys: Vec<P> = (b0..b0 + og.len() / (m * q))
            .into_par_iter()
            .map(packed)
            .collect::<Result<_>>()?;
        og.par_chunks_mut(m * q)
            .zip(&group_keys)
            .enumerate()
            .for_each(|(i, (ob, keys))| {
                let keys: &Packed = keys.borrow();
                let batch = Batch {
                    phi: phi.batch_slice(b0 + i),
                    keys,
                    d,
                    n,
                    scale: attn.scale,
                    causal: attn.causal,
                    off: n - m.min(n),
                };
                ob.par_chunks_mut(BQ * q).enumerate().for_each(|(blk, o)| {
                    let i0 = blk * BQ;
                    let i1 = i0 + o.len() / q;
                    let end = batch.key_end(i1);
                    let per = end.div_ceil(splits).next_multiple_of(BK);
                    let state = (0..end.div_ceil(per))
                        .into_par_iter()
                        .map(|t| match cp.is_cancelled() {
                            true => BlockState::empty(i1 - i0, keys.qp),
                            false => {
                                block_state(isa, &batch, i0, i1, t * per, ((t + 1) * per).min(end))
                            }
                        })
                        .reduce_with(BlockState::merge)
                        .unwrap_or_else(|| BlockState::empty(i1 - i0, keys.qp));
                    state.finalize(q, o);
                });
            });
    }
    cp.check()?;
    Ok(out)
}

fn block_state(
    isa: TileIsa,
    b: &Batch<'_>,
    i0: usize,
    i1: usize,
    k0: usize,
    k1: usize,
) -> BlockState {
    match isa {
        // SAFETY: the tokens are made only where run-time detection found
        // the features.
        #[cfg(target_arch = "x86_64")]
        TileIsa::Avx512(t) => unsafe { block_state_avx512(t, b, i0, i1, k0, k1) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        TileIsa::Avx2(t) => unsafe { block_state_avx2(t, b, i0, i1, k0, k1) },
        _ => block_state_impl(Portable, b, i0, i1, k0, k1),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn block_state_avx2(
    isa: super::super::simd::Avx2Fma,
    b: &Batch<'_>,
    i0: usize,
    i1: usize,
    k0: usize,
    k1: usize,
) -> BlockState {
    block_state_impl(isa, b, i0, i1, k0, k1)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn block_state_avx512(
    isa: super::super::simd::Avx512,
    b: &Batch<'_>,
    i0: usize,
    i1: usize,
    k0: usize,
    k1: usize,
) -> BlockState {
    block_state_impl(isa, b, i0, i1, k0, k1)
}

/// Row states of queries `i0..i1` over keys `k0..k1` (`k0` a multiple of
/// [`BK`]).
#[inline(always)]
fn block_state_impl<S: Isa>(
    isa: S,
    b: &Batch<'_>,
    i0: usize,
    i1: usize,
    k0: usize,
    k1: usize,
) -> BlockState {
    let rows = i1 - i0;
    let qp = b.keys.qp;
    let qs = scaled_queries(b, i0, i1);
    // The AVX-512 tile reads the queries repacked (`avx512::pack_queries`).
    #[cfg(target_arch = "x86_64")]
    let qs = match isa.avx512() {
        Some(_) => super::avx512::pack_queries(&qs, rows, b.d),
        None => qs,
    };
    let mut st = BlockState::empty(rows, qp);
    let mut s = vec![0.0f32; SUB.min(rows) * BK];
    // Tile sums relative to the same running maximum, merged every FLUSH_TILES.
    let mut o = vec![0.0f32; rows * qp];
    let mut l32 = vec![0.0f32; rows];
    let mut pending = 0;
    let mut j0 = k0;
    while j0 < k1 {
        let len = BK.min(k1 - j0);
        let kt = b.keys.key_tile(j0, b.d);
        let vt = &b.keys.v[j0 * qp..];
        // The tile's keys and values serve every sub-block while they are
        // in cache; the scores of one sub-block exist at a time.
        for r0 in (0..rows).step_by(SUB) {
            let r1 = (r0 + SUB).min(rows);
            // Keys beyond every row of the sub-block: nothing to add (later
            // sub-blocks see further).
            if b.causal && j0 > i0 + r1 - 1 + b.off {
                continue;
            }
            let sub = r1 - r0;
            tile_scores(isa, &qs[r0 * b.d..], sub, b.d, kt, len, &mut s);
            // Keys beyond some row's limit: only near the diagonal.
            let masked = b.causal && j0 + len - 1 > i0 + r0 + b.off;
            for r in r0..r1 {
                let row = &mut s[(r - r0) * BK..(r - r0) * BK + len];
                if masked {
                    let lim = i0 + r + b.off;
                    for (c, x) in row.iter_mut().enumerate() {
                        if j0 + c > lim {
                            *x = f32::NEG_INFINITY;
                        }
                    }
                }
                let m_new = raised_max(isa, row, st.m[r]);
                if m_new == f32::NEG_INFINITY {
                    row.fill(0.0); // every key so far is masked for this row
                    continue;
                }
                if m_new > st.m[r] {
                    let f = (f64::from(st.m[r]) - f64::from(m_new)).exp();
                    st.l[r] *= f;
                    st.acc[r * qp..(r + 1) * qp]
                        .iter_mut()
                        .for_each(|x| *x *= f);
                    let f32_ = f as f32;
                    l32[r] *= f32_;
                    o[r * qp..(r + 1) * qp].iter_mut().for_each(|x| *x *= f32_);
                    st.m[r] = m_new;
                }
                l32[r] += exp2_sum(isa, row, m_new);
            }
            weighted_values(isa, &s, sub, len, vt, qp, &mut o[r0 * qp..]);
        }
        pending += 1;
        if pending == FLUSH_TILES {
            flush(&mut st, &mut o, &mut l32);
            pending = 0;
        }
        j0 += len;
    }
    flush(&mut st, &mut o, &mut l32);
    st
}

/// Adds the `f32` tile sums into the `f64` state and clears them.
fn flush(st: &mut BlockState, o: &mut [f32], l32: &mut [f32]) {
    for (a, x) in st.acc.iter_mut().zip(o.iter_mut()) {
        *a += f64::from(*x);
        *x = 0.0;
    }
    for (l, x) in st.l.iter_mut().zip(l32.iter_mut()) {
        *l += f64::from(*x);
        *x = 0.0;
    }
}

/// [`scores`], by the AVX-512 tile where `isa` has it (`qs` then packed
/// by `avx512::pack_queries`).
#[inline(always)]
fn tile_scores<S: Isa>(
    isa: S,
    qs: &[f32],
    rows: usize,
    d: usize,
    kt: &[f32],
    len: usize,
    s: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if let Some(t) = isa.avx512() {
        // SAFETY: the token is made only where run-time detection found
        // AVX-512F, AVX2 and FMA.
        return unsafe { super::avx512::scores(t, qs, rows, d, kt, s) };
    }
    scores(isa, qs, rows, d, kt, len, s);
}

/// A row's reference maximum after one more tile of its scores: `m` while
/// every score `s` of `row` has `s − m ≤ LAZY` (the difference rounded as
/// the exponential's argument will be), else the row's largest score (so
/// −∞ while every score so far is −∞).
#[inline(always)]
fn raised_max<S: Isa>(isa: S, row: &[f32], m: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if let Some(t) = isa.avx512() {
        // SAFETY: as in `tile_scores`.
        return unsafe { super::avx512::raised_max(t, row, m) };
    }
    let _ = isa;
    let t = max_of(row);
    if t - m > LAZY { t } else { m }
}

/// `row[j] = e^{row[j] − m}` in place, as `2^{(row[j] − m)·log₂e}` (every
/// score at most `m + LAZY`), and their sum.
#[inline(always)]
fn exp2_sum<S: Isa>(isa: S, row: &mut [f32], m: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if let Some(t) = isa.avx512() {
        // SAFETY: as in `tile_scores`.
        return unsafe { super::avx512::exp2_sum(t, row, m) };
    }
    for x in row.iter_mut() {
        *x = exp2_capped::<S>((*x - m) * std::f32::consts::LOG2_E);
    }
    sum_of(row)
}

/// `o += P·V`: `P` is `rows × len` (row stride [`BK`]), `V` the values of
/// the tile's keys (row stride `qp`), `o` is `rows × qp`.
#[inline(always)]
fn weighted_values<S: Isa>(
    isa: S,
    p: &[f32],
    rows: usize,
    len: usize,
    v: &[f32],
    qp: usize,
    o: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if let Some(t) = isa.avx512() {
        // SAFETY: as in `tile_scores`.
        return unsafe { super::avx512::weighted_values(t, p, rows, len, v, qp, o) };
    }
    for c in (0..qp).step_by(NR) {
        let mut r = 0;
        while r < rows {
            let rr = (rows - r).min(MR);
            let (pr, or) = (&p[r * BK..], &mut o[r * qp..]);
            by_rows!(rr, value_tile, S, (isa, pr, len, v, qp, c, or));
            r += rr;
        }
    }
}

/// `o[r·qp + c + l] += Σ_j p[r·BK + j]·v[j·qp + c + l]` for `R` rows and
/// `NR` columns.
#[inline(always)]
fn value_tile<S: Isa, const R: usize>(
    isa: S,
    p: &[f32],
    len: usize,
    v: &[f32],
    qp: usize,
    c: usize,
    o: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if let Some(isa) = isa.avx2_fma() {
        // SAFETY: `isa` is an `Avx2Fma` token, made only where run-time
        // detection found AVX2 and FMA.
        return unsafe { super::avx2::value_tile::<R>(isa, p, len, v, qp, c, o) };
    }
    assert!(len <= BK && p.len() >= (R - 1) * BK + len && c + NR <= qp);
    assert!(v.len() >= len * qp && o.len() >= (R - 1) * qp + c + NR);
    let mut acc: [[f32; NR]; R] =
        std::array::from_fn(|r| std::array::from_fn(|l| o[r * qp + c + l]));
    for j in 0..len {
        // SAFETY: j·qp + c + NR ≤ (len−1)·qp + qp ≤ v.len() (asserted above).
        let vv = unsafe {
            v.as_ptr()
                .add(j * qp + c)
                .cast::<[f32; NR]>()
                .read_unaligned()
        };
        for (r, a) in acc.iter_mut().enumerate() {
            // SAFETY: r·BK + j < (R−1)·BK + len ≤ p.len().
            let pr = unsafe { *p.get_unchecked(r * BK + j) };
            for l in 0..NR {
                a[l] = fmadd::<S>(pr, vv[l], a[l]);
            }
        }
    }
    for (r, a) in acc.iter().enumerate() {
        o[r * qp + c..r * qp + c + NR].copy_from_slice(a);
    }
}
