//! Kernel softmax (attention), its weight matrix and the linear feature
//! local mean on the CPU.
//!
//! Attention is FlashAttention's scheme on the CPU: rayon tasks take a
//! block of [`BQ`] query rows of one batch (and, when there are too few
//! blocks to occupy the threads, a range of keys, merged afterwards with
//! [`merge_states`]); each block walks the keys in tiles of [`BK`]. Per
//! tile, the scores `S = (s·Φ_blk)Ψ_tileᵀ` come from a register-tiled
//! micro-kernel ([`MR`] rows × [`NR`] keys), the row maxima move the
//! running maximum `m`, `P = e^{S−m}` is formed in place and `P·V_tile`
//! is accumulated by a second micro-kernel. Only `BQ × BK` scores exist at
//! any time; the extra memory is one packed copy of the keys and values
//! (linear in `N`). The tile sums are `f32`; every [`FLUSH_TILES`] tiles
//! they are merged into the row state `(m, l, acc)` kept in `f64`.
//!
//! Everything is compiled twice (baseline x86-64 and AVX2 + FMA, chosen at
//! run time), as in `simd.rs`; the AVX2 build takes its two micro-kernels
//! from `softmax_avx2.rs`, the portable one from the lane-group loops here.

use rayon::prelude::*;

use super::simd::{Avx2Fma, Isa, LANES, Portable, exp_nonpos, fmadd, fmax, max_of, sum_of};
use crate::error::Result;
use crate::matrix::alloc_output;
use crate::types::merge_states;
use crate::types::{Attention, Heads};

/// Query rows per block (a multiple of [`MR`]).
pub(crate) const BQ: usize = 48;
/// Keys per tile.
pub(crate) const BK: usize = 64;
/// Rows of the register tile.
const MR: usize = 6;
/// Keys (or value columns) of the register tile: two lane groups.
pub(crate) const NR: usize = 2 * LANES;
/// Key tiles accumulated in `f32` before they are merged into the `f64` state.
const FLUSH_TILES: usize = 8;

/// One batch's keys (and values), packed for the micro-kernels.
struct Packed {
    /// Keys transposed tile by tile: coordinate `k` of key `t·BK + c` at
    /// `kt[(t·d + k)·BK + c]` (each tile one contiguous `d × BK` block),
    /// zero beyond `N`.
    kt: Vec<f32>,
    /// Values, `N × qp` with zero columns beyond `q` (empty when unused).
    v: Vec<f32>,
    qp: usize,
}

impl Packed {
    /// The transposed keys of the tile starting at key `j0` (a multiple of [`BK`]).
    fn key_tile(&self, j0: usize, d: usize) -> &[f32] {
        &self.kt[j0 * d..(j0 + BK) * d]
    }
}

fn pack(psi: &[f32], n: usize, d: usize, values: Option<(&[f32], usize)>) -> Packed {
    let mut kt = vec![0.0f32; n.next_multiple_of(BK) * d];
    for (j, row) in psi.chunks_exact(d).enumerate() {
        let (t, c) = (j / BK, j % BK);
        for (k, &x) in row.iter().enumerate() {
            kt[(t * d + k) * BK + c] = x;
        }
    }
    let (v, qp) = match values {
        Some((v, q)) => {
            let qp = q.next_multiple_of(NR);
            let mut vp = vec![0.0f32; n * qp];
            for (dst, src) in vp.chunks_exact_mut(qp).zip(v.chunks_exact(q)) {
                dst[..q].copy_from_slice(src);
            }
            (vp, qp)
        }
        None => (Vec::new(), 0),
    };
    Packed { kt, v, qp }
}

/// What every block of one batch shares.
struct Batch<'a> {
    /// The batch's queries, row-major `M × d`.
    phi: &'a [f32],
    keys: &'a Packed,
    d: usize,
    n: usize,
    scale: f32,
    /// Causal mask: query `i` sees keys `j ≤ i + off`.
    causal: bool,
    off: usize,
}

impl Batch<'_> {
    /// Keys `0..end` that some query of rows `i0..i1` may see.
    fn key_end(&self, i1: usize) -> usize {
        if self.causal {
            self.n.min(i1 - 1 + self.off + 1)
        } else {
            self.n
        }
    }
}

/// Row states of a block over some keys (docs/numerics.md): `m` the largest
/// logit, `l = Σ e^{s−m}`, `acc = Σ e^{s−m} v` (`rows × qp`).
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

/// Kernel softmax of every batch, row-major `(B·M) × q`.
pub(crate) fn kernel_softmax(
    phi: &Heads<'_>,
    psi: &Heads<'_>,
    values: &Heads<'_>,
    attn: &Attention,
) -> Result<Vec<f32>> {
    kernel_softmax_on(phi, psi, values, attn, Avx2Fma::detect())
}

/// [`kernel_softmax`] on the AVX2 + FMA build when `isa` holds the token,
/// else on the portable one (`None` forces it).
pub(crate) fn kernel_softmax_on(
    phi: &Heads<'_>,
    psi: &Heads<'_>,
    values: &Heads<'_>,
    attn: &Attention,
    isa: Option<Avx2Fma>,
) -> Result<Vec<f32>> {
    let (nb, m, n, d, q) = (phi.batch, phi.rows, psi.rows, phi.cols(), values.cols());
    let mut out = alloc_output("kernel_softmax", "output", nb * m, q)?;
    // Batches run a group at a time, a group as large as the thread pool,
    // so the packed keys and values in memory are those of one group, not
    // of every batch.
    let group = rayon::current_num_threads().clamp(1, nb.max(1));
    let blocks = group * m.div_ceil(BQ);
    let want = 4 * rayon::current_num_threads();
    // Few blocks (short query sequences): split the keys too.
    let splits = if blocks >= want {
        1
    } else {
        want.div_ceil(blocks).min(n / (4 * BK)).max(1)
    };
    for (g, og) in out.chunks_mut(group * m * q).enumerate() {
        let b0 = g * group;
        let packed: Vec<Packed> = (b0..b0 + og.len() / (m * q))
            .into_par_iter()
            .map(|b| pack(psi.batch_slice(b), n, d, Some((values.batch_slice(b), q))))
            .collect();
        og.par_chunks_mut(m * q)
            .zip(&packed)
            .enumerate()
            .for_each(|(i, (ob, keys))| {
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
                        .map(|t| {
                            block_state(isa, &batch, i0, i1, t * per, ((t + 1) * per).min(end))
                        })
                        .reduce_with(BlockState::merge)
                        .unwrap_or_else(|| BlockState::empty(i1 - i0, keys.qp));
                    state.finalize(q, o);
                });
            });
    }
    Ok(out)
}

fn block_state(
    isa: Option<Avx2Fma>,
    b: &Batch<'_>,
    i0: usize,
    i1: usize,
    k0: usize,
    k1: usize,
) -> BlockState {
    #[cfg(target_arch = "x86_64")]
    if let Some(isa) = isa {
        // SAFETY: `isa` is an `Avx2Fma` token, made only where run-time
        // detection found AVX2 and FMA.
        return unsafe { block_state_avx2(isa, b, i0, i1, k0, k1) };
    }
    let _ = isa;
    block_state_impl(Portable, b, i0, i1, k0, k1)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn block_state_avx2(
    isa: Avx2Fma,
    b: &Batch<'_>,
    i0: usize,
    i1: usize,
    k0: usize,
    k1: usize,
) -> BlockState {
    block_state_impl(isa, b, i0, i1, k0, k1)
}

/// The scaled queries of rows `i0..i1`.
fn scaled_queries(b: &Batch<'_>, i0: usize, i1: usize) -> Vec<f32> {
    b.phi[i0 * b.d..i1 * b.d]
        .iter()
        .map(|&x| x * b.scale)
        .collect()
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
    let mut st = BlockState::empty(rows, qp);
    let mut s = vec![0.0f32; rows * BK];
    // Tile sums relative to the same running maximum, merged every FLUSH_TILES.
    let mut o = vec![0.0f32; rows * qp];
    let mut l32 = vec![0.0f32; rows];
    let mut pending = 0;
    let mut j0 = k0;
    while j0 < k1 {
        let len = BK.min(k1 - j0);
        scores(isa, &qs, rows, b.d, b.keys.key_tile(j0, b.d), len, &mut s);
        // Keys beyond some row's limit: only near the diagonal.
        let masked = b.causal && j0 + len - 1 > i0 + b.off;
        for r in 0..rows {
            let row = &mut s[r * BK..r * BK + len];
            if masked {
                let lim = i0 + r + b.off;
                for (c, x) in row.iter_mut().enumerate() {
                    if j0 + c > lim {
                        *x = f32::NEG_INFINITY;
                    }
                }
            }
            let m_new = fmax(st.m[r], max_of(row));
            if m_new == f32::NEG_INFINITY {
                row.fill(0.0); // every key of this tile is masked for this row
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
            for x in row.iter_mut() {
                *x = exp_nonpos::<S>(*x - m_new);
            }
            l32[r] += sum_of(row);
        }
        weighted_values(isa, &s, rows, len, &b.keys.v[j0 * qp..], qp, &mut o);
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

/// Scores of `rows` scaled queries (row-major, `d` columns) against one
/// tile of `len` keys (`kt`, transposed: `d × BK`) into `s` (row stride
/// [`BK`]); columns up to the next multiple of [`NR`] are written (padding
/// keys score 0).
#[inline(always)]
fn scores<S: Isa>(
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
        return unsafe { super::softmax_avx2::score_tile::<R>(isa, qs, d, kt, ld, j, s) };
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
        return unsafe { super::softmax_avx2::value_tile::<R>(isa, p, len, v, qp, c, o) };
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
    out.par_chunks_mut(m * n).enumerate().for_each(|(b, ob)| {
        let keys = pack(psi.batch_slice(b), n, d, None);
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
            let i0 = blk * BQ;
            #[cfg(target_arch = "x86_64")]
            if let Some(isa) = isa {
                // SAFETY: `isa` is an `Avx2Fma` token, made only where
                // run-time detection found AVX2 and FMA.
                return unsafe { matrix_rows_avx2(isa, &batch, i0, o) };
            }
            matrix_rows(Portable, &batch, i0, o);
        });
    });
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

/// Sums over a range of keys: `s = Σ ψ_j v_jᵀ` (`d × q`) and `z = Σ ψ_j`.
#[derive(Clone)]
struct FeatureSums {
    s: Vec<f64>,
    z: Vec<f64>,
    q: usize,
}

impl FeatureSums {
    fn zero(d: usize, q: usize) -> Self {
        FeatureSums {
            s: vec![0.0; d * q],
            z: vec![0.0; d],
            q,
        }
    }

    #[inline(always)]
    fn add_key(&mut self, psi: &[f32], v: &[f64]) {
        for (k, &w) in psi.iter().enumerate() {
            if w == 0.0 {
                continue;
            }
            let w = f64::from(w);
            self.z[k] += w;
            for (s, &x) in self.s[k * self.q..(k + 1) * self.q].iter_mut().zip(v) {
                *s += w * x;
            }
        }
    }

    fn add(&mut self, other: &FeatureSums) {
        for (a, b) in self.s.iter_mut().zip(&other.s) {
            *a += b;
        }
        for (a, b) in self.z.iter_mut().zip(&other.z) {
            *a += b;
        }
    }

    /// `φᵀs / φᵀz` into `out` (NaN when `φᵀz = 0`); returns 1 for an empty row.
    #[inline(always)]
    fn apply(&self, phi: &[f32], num: &mut [f64], out: &mut [f32]) -> usize {
        num.fill(0.0);
        let mut den = 0.0f64;
        for (k, &w) in phi.iter().enumerate() {
            if w == 0.0 {
                continue;
            }
            let w = f64::from(w);
            den += w * self.z[k];
            for (a, &s) in num.iter_mut().zip(&self.s[k * self.q..(k + 1) * self.q]) {
                *a += w * s;
            }
        }
        if den > 0.0 {
            let inv = 1.0 / den;
            for (o, &a) in out.iter_mut().zip(num.iter()) {
                *o = (a * inv) as f32;
            }
            0
        } else {
            out.fill(f32::NAN);
            1
        }
    }
}

/// Linear feature local means of every batch, row-major `(B·M) × q`, and
/// the count of empty rows.
pub(crate) fn feature_local_mean(
    phi: &Heads<'_>,
    psi: &Heads<'_>,
    values: &Heads<'_>,
    causal: bool,
) -> Result<(Vec<f32>, usize)> {
    feature_local_mean_on(phi, psi, values, causal, Avx2Fma::detect())
}

/// [`feature_local_mean`] on the AVX2 + FMA build when `isa` holds the
/// token, else on the portable one (`None` forces it).
pub(crate) fn feature_local_mean_on(
    phi: &Heads<'_>,
    psi: &Heads<'_>,
    values: &Heads<'_>,
    causal: bool,
    isa: Option<Avx2Fma>,
) -> Result<(Vec<f32>, usize)> {
    let (nb, m, q) = (phi.batch, phi.rows, values.cols());
    let mut out = alloc_output("feature_local_mean", "output", nb * m, q)?;
    let empty = out
        .par_chunks_mut(m * q)
        .enumerate()
        .map(|(b, ob)| {
            let args = FeatureBatch {
                phi: phi.batch_slice(b),
                psi: psi.batch_slice(b),
                v: values.batch_slice(b),
                m,
                n: psi.rows,
                d: phi.cols(),
                q,
                causal,
                isa,
            };
            args.run(ob)
        })
        .sum();
    Ok((out, empty))
}

/// One batch of the feature local mean.
#[derive(Clone, Copy)]
struct FeatureBatch<'a> {
    phi: &'a [f32],
    psi: &'a [f32],
    v: &'a [f32],
    m: usize,
    n: usize,
    d: usize,
    q: usize,
    causal: bool,
    /// The AVX2 + FMA token, when that build is to run.
    isa: Option<Avx2Fma>,
}

impl FeatureBatch<'_> {
    /// Keys `k0..k1` added to `st`; with `emit`, after each key `t` the row
    /// of the query whose limit is `t` is written into `out` (which starts
    /// at query row `row0`). Returns the number of empty rows written.
    fn scan(
        &self,
        st: &mut FeatureSums,
        k0: usize,
        k1: usize,
        emit: Option<(usize, &mut [f32])>,
    ) -> usize {
        #[cfg(target_arch = "x86_64")]
        if let Some(isa) = self.isa {
            // SAFETY: `isa` is an `Avx2Fma` token, made only where run-time
            // detection found AVX2 and FMA.
            return unsafe { self.scan_avx2(isa, st, k0, k1, emit) };
        }
        self.scan_impl(st, k0, k1, emit)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    fn scan_avx2(
        &self,
        _isa: Avx2Fma,
        st: &mut FeatureSums,
        k0: usize,
        k1: usize,
        emit: Option<(usize, &mut [f32])>,
    ) -> usize {
        self.scan_impl(st, k0, k1, emit)
    }

    #[inline(always)]
    fn scan_impl(
        &self,
        st: &mut FeatureSums,
        k0: usize,
        k1: usize,
        mut emit: Option<(usize, &mut [f32])>,
    ) -> usize {
        let (d, q) = (self.d, self.q);
        let off = self.n - self.m.min(self.n);
        let mut v = vec![0.0f64; q];
        let mut num = vec![0.0f64; q];
        let mut empty = 0;
        for t in k0..k1 {
            for (a, &x) in v.iter_mut().zip(&self.v[t * q..(t + 1) * q]) {
                *a = f64::from(x);
            }
            st.add_key(&self.psi[t * d..(t + 1) * d], &v);
            if let Some((row0, out)) = emit.as_mut() {
                if t >= off {
                    let i = t - off;
                    let o = &mut out[(i - *row0) * q..(i - *row0 + 1) * q];
                    empty += st.apply(&self.phi[i * d..(i + 1) * d], &mut num, o);
                }
            }
        }
        empty
    }

    fn apply_rows(&self, st: &FeatureSums, out: &mut [f32]) -> usize {
        #[cfg(target_arch = "x86_64")]
        if let Some(isa) = self.isa {
            // SAFETY: `isa` is an `Avx2Fma` token, made only where run-time
            // detection found AVX2 and FMA.
            return unsafe { self.apply_rows_avx2(isa, st, out) };
        }
        self.apply_rows_impl(st, out)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    fn apply_rows_avx2(&self, _isa: Avx2Fma, st: &FeatureSums, out: &mut [f32]) -> usize {
        self.apply_rows_impl(st, out)
    }

    #[inline(always)]
    fn apply_rows_impl(&self, st: &FeatureSums, out: &mut [f32]) -> usize {
        let mut num = vec![0.0f64; self.q];
        out.chunks_exact_mut(self.q)
            .zip(self.phi.chunks_exact(self.d))
            .map(|(o, f)| st.apply(f, &mut num, o))
            .sum()
    }

    /// Runs the batch into `out` (`M × q`); returns the empty rows.
    fn run(&self, out: &mut [f32]) -> usize {
        let (n, d, q) = (self.n, self.d, self.q);
        // At most 64 chunks per batch: few prefix states, enough tasks; and
        // fewer when the states are large (each chunk holds a sum and,
        // causal, a prefix of d·(q+1) f64), so a batch's states stay within
        // about 32 MiB.
        let state_bytes = d.saturating_mul(q + 1).saturating_mul(16).max(1);
        let max_chunks = ((32usize << 20) / state_bytes).clamp(1, 64);
        let chunk = 256usize.max(n.div_ceil(max_chunks));
        let ranges: Vec<(usize, usize)> = (0..n.div_ceil(chunk))
            .map(|c| (c * chunk, ((c + 1) * chunk).min(n)))
            .collect();
        let sums: Vec<FeatureSums> = ranges
            .par_iter()
            .map(|&(k0, k1)| {
                let mut st = FeatureSums::zero(d, q);
                self.scan(&mut st, k0, k1, None);
                st
            })
            .collect();
        if !self.causal {
            let mut total = FeatureSums::zero(d, q);
            for s in &sums {
                total.add(s);
            }
            return out
                .par_chunks_mut(64 * q)
                .enumerate()
                .map(|(blk, o)| {
                    let rows = FeatureBatch {
                        phi: &self.phi[blk * 64 * d..],
                        ..*self
                    };
                    rows.apply_rows(&total, o)
                })
                .sum();
        }
        // Causal: exclusive prefix of the chunk sums, then each chunk scans
        // its keys from its prefix and writes the queries whose limit
        // (i + N − M) falls in it.
        let off = n - self.m;
        let mut prefix = Vec::with_capacity(sums.len());
        let mut run = FeatureSums::zero(d, q);
        for s in &sums {
            prefix.push(run.clone());
            run.add(s);
        }
        let mut pieces = Vec::with_capacity(ranges.len());
        let mut rest = out;
        for (c, &(k0, k1)) in ranges.iter().enumerate() {
            let r0 = k0.max(off) - off;
            let r1 = k1.max(off) - off;
            let (mine, tail) = rest.split_at_mut((r1 - r0) * q);
            rest = tail;
            pieces.push((c, r0, mine));
        }
        pieces
            .into_par_iter()
            .zip(prefix)
            .map(|((c, r0, o), mut st)| {
                let (k0, k1) = ranges[c];
                self.scan(&mut st, k0, k1, Some((r0, o)))
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::Matrix;
    use ndarray::ArrayView2;

    fn data(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) as f32
                    / (1 << 24) as f32
                    - 0.5
            })
            .collect()
    }

    fn heads(v: &[f32], batch: usize, rows: usize, cols: usize) -> Heads<'_> {
        let view = ArrayView2::from_shape((batch * rows, cols), v).unwrap();
        Heads {
            data: Matrix::check("test", "x", view).unwrap(),
            batch,
            rows,
            ndim: 3,
        }
    }

    /// f64 attention of one batch: materialized scores, row max, exp, normalize.
    #[allow(clippy::too_many_arguments)]
    fn reference(
        phi: &[f32],
        psi: &[f32],
        v: &[f32],
        m: usize,
        n: usize,
        d: usize,
        q: usize,
        s: f32,
        causal: bool,
    ) -> Vec<f64> {
        let mut out = vec![0.0; m * q];
        let off = n - m.min(n);
        for i in 0..m {
            let lim = if causal { i + off + 1 } else { n };
            let sc: Vec<f64> = (0..lim)
                .map(|j| {
                    f64::from(s)
                        * (0..d)
                            .map(|k| f64::from(phi[i * d + k]) * f64::from(psi[j * d + k]))
                            .sum::<f64>()
                })
                .collect();
            let mx = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = sc.iter().map(|x| (x - mx).exp()).collect();
            let tot: f64 = w.iter().sum();
            for c in 0..q {
                out[i * q + c] = (0..lim)
                    .map(|j| w[j] * f64::from(v[j * q + c]))
                    .sum::<f64>()
                    / tot;
            }
        }
        out
    }

    /// The portable build (which integration tests do not reach on an AVX2
    /// machine) and the AVX2 one against the f64 reference, on shapes that
    /// leave partial register tiles, key tiles and key splits.
    #[test]
    fn portable_and_avx2_builds_match_reference() {
        for &(nb, m, n, d, q, causal) in &[
            (1usize, 1usize, 1usize, 1usize, 1usize, false),
            (2, 53, 131, 7, 5, false),
            (2, 53, 131, 7, 5, true),
            (1, 5, 700, 3, 17, true),
            (3, 49, 49, 16, 16, true),
        ] {
            let (pv, kv, vv) = (
                data(nb * m * d, 1),
                data(nb * n * d, 2),
                data(nb * n * q, 3),
            );
            let (p, k, v) = (
                heads(&pv, nb, m, d),
                heads(&kv, nb, n, d),
                heads(&vv, nb, n, q),
            );
            let attn = Attention { scale: 2.5, causal };
            let mut builds = vec![None];
            if let Some(isa) = Avx2Fma::detect() {
                builds.push(Some(isa));
            }
            for isa in builds {
                let avx2 = isa.is_some();
                let got = kernel_softmax_on(&p, &k, &v, &attn, isa).unwrap();
                let mat = softmax_matrix_on(&p, &k, &attn, isa).unwrap();
                for b in 0..nb {
                    let want = reference(
                        p.batch_slice(b),
                        k.batch_slice(b),
                        v.batch_slice(b),
                        m,
                        n,
                        d,
                        q,
                        2.5,
                        causal,
                    );
                    for (i, &w) in want.iter().enumerate() {
                        let g = f64::from(got[b * m * q + i]);
                        assert!(
                            (g - w).abs() <= 1e-4 * w.abs() + 1e-5,
                            "avx2={avx2} {nb}×{m}×{n} d={d} q={q} causal={causal} [{b}][{i}]: {g} vs {w}"
                        );
                    }
                    // Weights times values equal the fused result.
                    for i in 0..m {
                        let row = &mat[(b * m + i) * n..(b * m + i + 1) * n];
                        for c in 0..q {
                            let u: f64 = row
                                .iter()
                                .enumerate()
                                .map(|(j, &w)| {
                                    f64::from(w) * f64::from(v.batch_slice(b)[j * q + c])
                                })
                                .sum();
                            let w = want[i * q + c];
                            assert!(
                                (u - w).abs() <= 1e-4 * w.abs() + 1e-5,
                                "matrix avx2={avx2}: {u} vs {w}"
                            );
                        }
                    }
                }
            }
        }
    }
    /// Both builds of the feature local mean against the pairwise f64
    /// definition, with chunks, prefix sums and an empty row.
    #[test]
    fn feature_mean_builds_match_definition() {
        for &(nb, m, n, d, q, causal) in &[
            (2usize, 300usize, 700usize, 3usize, 5usize, true),
            (1, 40, 40, 4, 1, false),
            (1, 1, 1, 1, 2, true),
        ] {
            let pos = |v: Vec<f32>| {
                v.into_iter()
                    .map(|x| (x + 0.5).max(0.0))
                    .collect::<Vec<_>>()
            };
            let mut pv = pos(data(nb * m * d, 4));
            pv[..d].fill(0.0); // query 0 of batch 0 has no weight
            let (kv, vv) = (pos(data(nb * n * d, 5)), data(nb * n * q, 6));
            let (p, k, v) = (
                heads(&pv, nb, m, d),
                heads(&kv, nb, n, d),
                heads(&vv, nb, n, q),
            );
            let mut builds = vec![None];
            if let Some(isa) = Avx2Fma::detect() {
                builds.push(Some(isa));
            }
            for isa in builds {
                let avx2 = isa.is_some();
                let (got, empty) = feature_local_mean_on(&p, &k, &v, causal, isa).unwrap();
                assert_eq!(empty, nb.min(1), "avx2={avx2}");
                let off = n - m.min(n);
                for b in 0..nb {
                    let (pb, kb, vb) = (p.batch_slice(b), k.batch_slice(b), v.batch_slice(b));
                    for i in 0..m {
                        let lim = if causal { i + off + 1 } else { n };
                        let w: Vec<f64> = (0..lim)
                            .map(|j| {
                                (0..d)
                                    .map(|t| f64::from(pb[i * d + t]) * f64::from(kb[j * d + t]))
                                    .sum()
                            })
                            .collect();
                        let den: f64 = w.iter().sum();
                        for c in 0..q {
                            let g = f64::from(got[(b * m + i) * q + c]);
                            if den == 0.0 {
                                assert!(g.is_nan());
                                continue;
                            }
                            let want = (0..lim)
                                .map(|j| w[j] * f64::from(vb[j * q + c]))
                                .sum::<f64>()
                                / den;
                            assert!(
                                (g - want).abs() <= 1e-5 * want.abs() + 1e-6,
                                "avx2={avx2} [{b}][{i}][{c}]: {g} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }
}
