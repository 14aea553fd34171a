//! Brute-force k nearest neighbours by inner products, for larger `d`: a
//! group of queries against a block of the keys' panels (`panels.rs`),
//! approximate squared distances `‖q‖² − 2q·x + ‖x‖²` of the centred data
//! used only as a filter, and the exact squared distance (the arithmetic
//! of `knn.rs`, bit for bit) of each key that passes, offered to the same
//! [`TopK`]. The results equal the direct path's; numerics.md, "kNN by
//! inner products", gives the bound. Where the CPU has AVX-512 BF16 the
//! filter's products come from `bf16.rs` (the bound widened by the
//! rounding to `bf16`), in `f32` again for a group of queries whose
//! filter the wider bound leaves too loose.
//!
//! Imports: `super::{bf16, keys, panels, simd, topk}`.

use rayon::prelude::*;

use super::bf16::{self, Bf16Panels};
use super::keys::KeysSoa;
use super::panels::{CentredRows, MAX_D, Panels, ROWS, TileIsa, dot_tile, far_norm};
#[cfg(target_arch = "x86_64")]
use super::simd::Avx512;
#[cfg(target_arch = "x86_64")]
use super::simd::transpose8;
use super::simd::{Avx2Fma, Bf16Dot, Isa, KEY_BLOCK, Portable};
use super::topk::TopK;
use crate::cancel::Checkpoint;

/// Queries per rayon task (groups of [`ROWS`] sharing each key block).
const CHUNK: usize = 16 * ROWS;

/// Keys that may pass the `bf16` filter in one group's key block (of
/// `ROWS · KEY_BLOCK` pairs) before the group takes the block's `f32`
/// tile instead: each costs an exact re-measure of about `d` cycles
/// (0.24 µs a key at d = 784 on the 2-core Zen 4), the `bf16` tile saves
/// about `64·d` cycles against the `f32` one, and the `f32` filter would
/// pass some of the same keys (many in the first blocks, while the
/// lists' limits are loose). Measured: 128 and 256 gave the same times on
/// spread data.
const BF16_MAX_PASSING: usize = ROWS * KEY_BLOCK / 16;

/// Blocks in a row for which a group may find its `bf16` filter too loose
/// before it keeps to the `f32` tiles (data whose neighbours lie much
/// nearer each other than to the keys' mean: the wider bound passes whole
/// clusters).
const BF16_REFUSALS: u8 = 4;

/// The filter's data: the keys' squared norms scaled by `1 − γ`, and the
/// constants of the bound; the same for the `bf16` products, when used.
struct Filter<'a> {
    panels: &'a Panels,
    w: Vec<f32>,
    gamma: f64,
    abs: f64,
    bf16: Option<Bf16Filter<'a>>,
}

/// The `bf16` filter's data: the pairs, `‖x'‖²(1 − γ_b)` per key and the
/// wider constants.
struct Bf16Filter<'a> {
    t: Bf16Dot,
    pairs: &'a Bf16Panels,
    w: Vec<f32>,
    gamma: f64,
    abs: f64,
}

/// `‖x'_j‖²(1 − γ)` of every key, rounded to `f32`.
fn scaled_norms(panels: &Panels, gamma: f64) -> Vec<f32> {
    panels
        .norms()
        .iter()
        .map(|&s| (s * (1.0 - gamma)) as f32)
        .collect()
}

/// `γ = (2d + 64)·2⁻²⁴`: the filter's relative slack (numerics.md).
fn gamma(d: usize) -> f64 {
    (2 * d + 64) as f64 * f64::from(f32::EPSILON) / 2.0
}

/// The `k` nearest keys of every query by inner products; `None` when the
/// keys have no panels (too far apart for the bound, or not built): the
/// caller then runs the direct path. `isa`: the AVX2 + FMA token, or
/// `None` for the portable build (of the exact distances; the filter's
/// tile runs on the best build up to it).
pub(crate) fn knn(
    isa: Option<Avx2Fma>,
    queries: &[f32],
    d: usize,
    keys: &KeysSoa<'_>,
    k: usize,
    cp: &Checkpoint,
) -> Option<Vec<TopK>> {
    let panels = keys.panels.filter(|p| p.d() == d && d <= MAX_D)?;
    let gamma = gamma(d);
    let abs = (4 * d + 64) as f64 * f64::from(f32::MIN_POSITIVE);
    // The `bf16` products where the panels hold them and the caller runs
    // the best build (tests force the others with `isa`).
    let bf16 = match (isa.and(Bf16Dot::detect()), panels.bf16()) {
        (Some(t), Some(pairs)) => Some(Bf16Filter {
            t,
            pairs,
            w: scaled_norms(panels, gamma + bf16::GAMMA),
            gamma: gamma + bf16::GAMMA,
            abs: abs + bf16::abs(d),
        }),
        _ => None,
    };
    let filter = Filter {
        panels,
        w: scaled_norms(panels, gamma),
        gamma,
        abs,
        bf16,
    };
    let m = queries.len() / d;
    let per = m
        .div_ceil(4 * rayon::current_num_threads())
        .next_multiple_of(ROWS)
        .clamp(ROWS, CHUNK);
    let lists = queries
        .par_chunks(per * d)
        .flat_map_iter(|chunk| match cp.is_cancelled() {
            // Skipped: the caller reports the cancellation.
            true => vec![TopK::new(k); chunk.len() / d],
            false => chunk_lists(isa, chunk, d, keys, &filter, k),
        })
        .collect();
    Some(lists)
}

/// The lists of up to [`CHUNK`] queries, on the AVX2 + FMA build when `isa`
/// holds the token.
fn chunk_lists(
    isa: Option<Avx2Fma>,
    chunk: &[f32],
    d: usize,
    keys: &KeysSoa<'_>,
    filter: &Filter<'_>,
    k: usize,
) -> Vec<TopK> {
    let tile = TileIsa::at_most(isa);
    #[cfg(target_arch = "x86_64")]
    if let (Some(_), TileIsa::Avx512(t)) = (isa, tile) {
        // SAFETY: the tokens are made only where run-time detection found
        // the features.
        return unsafe { chunk_avx512(t, chunk, d, keys, filter, k) };
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(isa) = isa {
        // SAFETY: `isa` is an `Avx2Fma` token, made only where run-time
        // detection found AVX2 and FMA.
        return unsafe { chunk_avx2(isa, tile, chunk, d, keys, filter, k) };
    }
    let _ = isa;
    chunk_impl(Portable, tile, chunk, d, keys, filter, k, passing)
}

/// The keys of `w` and `s` (at most 16) that pass the test
/// `w_j − 2s_j ≤ lim`, as bits (key `l` at bit `l`).
#[inline(always)]
fn passing(w: &[f32], s: &[f32], lim: f32) -> u32 {
    w.iter()
        .zip(s)
        .enumerate()
        .fold(0, |bits, (l, (&wj, &sj))| {
            bits | (u32::from(wj - 2.0 * sj <= lim) << l)
        })
}

/// [`passing`] sixteen lanes at a time: `2s_j` is exact, so the fused
/// `w_j − 2s_j` rounds as the separate one does.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
fn passing_avx512(w: &[f32], s: &[f32], lim: f32) -> u32 {
    use std::arch::x86_64::*;
    let n = w.len().min(s.len()).min(16);
    let k: __mmask16 = if n == 16 { 0xffff } else { (1u16 << n) - 1 };
    // SAFETY: only the first n ≤ 16 lanes are read; both slices hold n.
    let (wv, sv) = unsafe {
        (
            _mm512_maskz_loadu_ps(k, w.as_ptr()),
            _mm512_maskz_loadu_ps(k, s.as_ptr()),
        )
    };
    let t = _mm512_fnmadd_ps(_mm512_set1_ps(2.0), sv, wv);
    u32::from(_mm512_mask_cmp_ps_mask::<_CMP_LE_OQ>(
        k,
        t,
        _mm512_set1_ps(lim),
    ))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn chunk_avx512(
    t: Avx512,
    chunk: &[f32],
    d: usize,
    keys: &KeysSoa<'_>,
    filter: &Filter<'_>,
    k: usize,
) -> Vec<TopK> {
    chunk_impl(
        t,
        TileIsa::Avx512(t),
        chunk,
        d,
        keys,
        filter,
        k,
        |w, s, lim| passing_avx512(w, s, lim),
    )
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn chunk_avx2(
    isa: Avx2Fma,
    tile: TileIsa,
    chunk: &[f32],
    d: usize,
    keys: &KeysSoa<'_>,
    filter: &Filter<'_>,
    k: usize,
) -> Vec<TopK> {
    chunk_impl(isa, tile, chunk, d, keys, filter, k, passing)
}

/// One query's filter state: its list, centred squared norm and the
/// current limit `L` of the test `w_j − 2s_j ≤ L` (and `L_b`, the same for
/// the `bf16` products).
struct Row {
    top: TopK,
    nq: f64,
    lim: f32,
    lim_b: f32,
}

impl Row {
    /// Too far from the keys' mean for the bound: the direct path.
    fn far(&self) -> bool {
        far_norm(self.nq)
    }

    fn update(&mut self, f: &Filter<'_>) {
        let thr = f64::from(self.top.last());
        let lim =
            |gamma: f64, abs: f64| (thr * (1.0 + gamma) + abs - self.nq * (1.0 - gamma)) as f32;
        self.lim = lim(f.gamma, f.abs);
        if let Some(b) = &f.bf16 {
            self.lim_b = lim(b.gamma, b.abs);
        }
    }
}

/// Appends to `cand` the (row, key) pairs among the keys `cols` of a
/// group's block (from key `j0`) whose tile `s` passes the test with the
/// norms `w` (the block's keys) and each row's limit `lim`: for each 16
/// keys, row by row, so each row's keys come in index order.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn collect_passing(
    cand: &mut Vec<(u32, u32)>,
    s: &[f32; ROWS * KEY_BLOCK],
    w: &[f32],
    rows: &[Row],
    (first_row, rows_here): (usize, usize),
    (j0, cols): (usize, std::ops::Range<usize>),
    lim: impl Fn(&Row) -> f32,
    pass: &impl Fn(&[f32], &[f32], f32) -> u32,
) {
    for c0 in cols.clone().step_by(16) {
        let c1 = (c0 + 16).min(cols.end);
        for r in 0..rows_here {
            let i = first_row + r;
            let row = &rows[i];
            if row.far() {
                continue;
            }
            let sc = &s[r * KEY_BLOCK + c0..r * KEY_BLOCK + c1];
            let mut bits = pass(&w[c0..c1], sc, lim(row));
            while bits != 0 {
                let l = bits.trailing_zeros() as usize;
                cand.push((i as u32, (j0 + c0 + l) as u32));
                bits &= bits - 1;
            }
        }
    }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn chunk_impl<S: Isa>(
    isa: S,
    tile: TileIsa,
    chunk: &[f32],
    d: usize,
    keys: &KeysSoa<'_>,
    filter: &Filter<'_>,
    k: usize,
    pass: impl Fn(&[f32], &[f32], f32) -> u32,
) -> Vec<TopK> {
    let m = chunk.len() / d;
    let n = keys.n;
    let groups: Vec<CentredRows> = chunk
        .chunks(ROWS * d)
        .map(|g| CentredRows::new(filter.panels, g))
        .collect();
    let mut rows: Vec<Row> = (0..m)
        .map(|i| {
            let g = &groups[i / ROWS];
            let mut row = Row {
                top: TopK::new(k),
                nq: g.nq[i % ROWS],
                lim: 0.0,
                lim_b: 0.0,
            };
            row.update(filter);
            row
        })
        .collect();
    let mut s = [0.0f32; ROWS * KEY_BLOCK];
    // Keys that pass a row's filter.
    let mut cand: Vec<(u32, u32)> = Vec::new();
    // They are re-measured together, eight distance chains
    // interleaved (one chain of `d` dependent multiply-adds per key would
    // otherwise wait on the previous), and offered to their lists in
    // index order. A key the filter would have dropped after a limit fell
    // meanwhile is measured and refused by its list: the same lists as
    // one key at a time.
    let remeasure = |cand: &[(u32, u32)], rows: &mut [Row]| {
        for batch in cand.chunks(8) {
            let t = sq_dists8(isa, batch, chunk, d, keys);
            for (&(i, j), &t) in batch.iter().zip(&t) {
                let row = &mut rows[i as usize];
                if row.top.offer(t, j) {
                    row.update(filter);
                }
            }
        }
    };
    // The groups' query pairs for the `bf16` tile, and for how many
    // blocks in a row each group found that filter too loose.
    let pairs: Vec<Vec<u32>> = match filter.bf16 {
        Some(_) => groups
            .iter()
            .map(|g| bf16::query_pairs(g.qc(), d))
            .collect(),
        None => Vec::new(),
    };
    let mut refused = vec![0u8; groups.len()];
    for j0 in (0..n).step_by(KEY_BLOCK) {
        let len = KEY_BLOCK.min(n - j0);
        let w = &filter.w[j0..j0 + len];
        // In the first block each list's limit falls from +∞: its keys are
        // re-measured after each 16, later after the whole block.
        let per_chunk = j0 == 0;
        for (gi, g) in groups.iter().enumerate() {
            let rows_here = (m - gi * ROWS).min(ROWS);
            let live = gi * ROWS..gi * ROWS + rows_here;
            // The `bf16` tile once every list of the group is full (a
            // finite limit), unless the group found it too loose for
            // BF16_REFUSALS blocks in a row.
            if let Some(b) = filter.bf16.as_ref().filter(|_| {
                !per_chunk
                    && refused[gi] < BF16_REFUSALS
                    && rows[live.clone()]
                        .iter()
                        .all(|r| r.far() || r.lim_b.is_finite())
            }) {
                bf16::dot_tile(b.t, &pairs[gi], b.pairs, j0, len, &mut s);
                cand.clear();
                let wb = &b.w[j0..j0 + len];
                let at = (live.start, rows_here);
                collect_passing(
                    &mut cand,
                    &s,
                    wb,
                    &rows,
                    at,
                    (j0, 0..len),
                    |r| r.lim_b,
                    &pass,
                );
                if cand.len() <= BF16_MAX_PASSING {
                    remeasure(&cand, &mut rows);
                    refused[gi] = 0;
                    continue;
                }
                refused[gi] += 1;
                cand.clear();
            }
            match filter.panels.block(j0, keys.rows) {
                Some(span) => dot_tile(tile, g, rows_here, span, j0, len, &mut s),
                // The block's panels could not be allocated: every key of
                // it passes (w − 2·∞ ≤ any limit) and is measured exactly.
                None => s.fill(f32::INFINITY),
            }
            let step = if per_chunk { 16 } else { len };
            for c0 in (0..len).step_by(step) {
                cand.clear();
                let (at, cols) = ((live.start, rows_here), c0..(c0 + step).min(len));
                collect_passing(&mut cand, &s, w, &rows, at, (j0, cols), |r| r.lim, &pass);
                remeasure(&cand, &mut rows);
            }
        }
    }
    rows.into_iter()
        .enumerate()
        .map(|(i, row)| match row.far() {
            true => far_row(isa, i, chunk, d, keys, k),
            false => row.top,
        })
        .collect()
}

/// The `k` nearest keys of query row `i` of `chunk` (too far from the
/// keys' mean for the filter's bound) over every key, eight at a time by
/// [`sq_dists8`] (from the keys' rows, or their columns where no rows are
/// at hand): the direct path's distances, bit for bit, offered in index
/// order.
fn far_row<S: Isa>(
    isa: S,
    i: usize,
    chunk: &[f32],
    d: usize,
    keys: &KeysSoa<'_>,
    k: usize,
) -> TopK {
    let mut top = TopK::new(k);
    let mut batch = [(0u32, 0u32); 8];
    for j0 in (0..keys.n).step_by(8) {
        let len = 8.min(keys.n - j0);
        for (c, pair) in batch[..len].iter_mut().enumerate() {
            *pair = (i as u32, (j0 + c) as u32);
        }
        let t = sq_dists8(isa, &batch[..len], chunk, d, keys);
        for (c, &t) in t[..len].iter().enumerate() {
            top.offer(t, (j0 + c) as u32);
        }
    }
    top
}

/// The squared distances of up to eight (query row, key) pairs of `batch`
/// (queries row-major in `chunk`), each exactly as
/// [`sq_dist_row`](super::simd::sq_dist_row) and
/// [`sq_dist`](super::simd::sq_dist) compute it (one multiply-add per
/// coordinate, in coordinate order), the eight chains advanced together.
/// Entries past the batch are unspecified.
#[inline(always)]
fn sq_dists8<S: Isa>(
    isa: S,
    batch: &[(u32, u32)],
    chunk: &[f32],
    d: usize,
    keys: &KeysSoa<'_>,
) -> [f32; 8] {
    debug_assert!(!batch.is_empty() && batch.len() <= 8);
    // Coordinate k of pair c: key at kb[c][k·ks], query at qs[c][k].
    // A short batch repeats its last pair.
    let pair = |c: usize| batch[c.min(batch.len() - 1)];
    let mut qs: [&[f32]; 8] = [&[]; 8];
    let mut kb: [&[f32]; 8] = [&[]; 8];
    let ks = match keys.rows {
        Some(_) => 1,
        None => keys.ld,
    };
    for c in 0..8 {
        let (i, j) = pair(c);
        let (i, j) = (i as usize, j as usize);
        qs[c] = &chunk[i * d..(i + 1) * d];
        kb[c] = match keys.rows {
            Some(rows) => &rows[j * d..(j + 1) * d],
            // Column-major: coordinate k of key j at xt[k·ld + j].
            None => &keys.xt[j..(d - 1) * keys.ld + j + 1],
        };
    }
    let kp: [*const f32; 8] = std::array::from_fn(|c| kb[c].as_ptr());
    let qp: [*const f32; 8] = std::array::from_fn(|c| qs[c].as_ptr());
    #[cfg(target_arch = "x86_64")]
    if let (1, Some(_)) = (ks, isa.avx512()) {
        // SAFETY: the token proves AVX-512F, AVX2 and FMA; with ks = 1
        // every pointer addresses a key or query row of d floats.
        return unsafe { rows8_avx512(kp, qp, d) };
    }
    let _ = isa;
    let mut acc = [0.0f32; 8];
    for k in 0..d {
        for c in 0..8 {
            // SAFETY: kb[c] holds (d−1)·ks + 1 floats (a key row, ks = 1,
            // or a strided column slice, ks = ld) and qs[c] holds d; k < d.
            let df = unsafe { *kp[c].add(k * ks) - *qp[c].add(k) };
            acc[c] = super::simd::fmadd::<S>(df, df, acc[c]);
        }
    }
    acc
}

/// [`sq_dists8`] for eight key rows and eight query rows (`d` floats
/// each), sixteen coordinates at a time: the rows' differences loaded
/// whole, transposed to one register per coordinate (eight pairs across
/// its lanes), then one multiply-add per coordinate in coordinate order,
/// so each pair's chain is the scalar one, bit for bit.
///
/// # Safety
/// AVX-512F, AVX2 and FMA must be present; each pointer must address `d`
/// readable floats.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn rows8_avx512(kp: [*const f32; 8], qp: [*const f32; 8], d: usize) -> [f32; 8] {
    use std::arch::x86_64::*;
    let mut acc = _mm256_setzero_ps();
    let mut k0 = 0;
    while k0 < d {
        let n = (d - k0).min(16);
        let m: __mmask16 = if n == 16 { 0xffff } else { (1u16 << n) - 1 };
        // SAFETY: lanes k0..k0+n of each row lie within its d floats; the
        // others are not read (zero).
        let diff: [__m512; 8] = std::array::from_fn(|c| unsafe {
            _mm512_sub_ps(
                _mm512_maskz_loadu_ps(m, kp[c].add(k0)),
                _mm512_maskz_loadu_ps(m, qp[c].add(k0)),
            )
        });
        // Two 8 × 8 transposes: coordinates k0..k0+8, then k0+8..k0+16.
        for half in 0..2 {
            let rows: [__m256; 8] = std::array::from_fn(|c| match half {
                0 => _mm512_castps512_ps256(diff[c]),
                _ => _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(diff[c]))),
            });
            let cols = transpose8(rows);
            for v in cols.iter().take(n.saturating_sub(8 * half).min(8)) {
                acc = _mm256_fmadd_ps(*v, *v, acc);
            }
        }
        k0 += 16;
    }
    let mut out = [0.0f32; 8];
    // SAFETY: `out` holds eight floats.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
    out
}

#[cfg(test)]
mod tests {
    use super::super::keys::{KeyColumns, Pack};
    use super::super::knn::direct;
    use super::super::test_data as data;
    use super::*;
    use crate::kernel::Metric;
    use crate::matrix::Matrix;

    /// Blocked and direct lists of `q` (m × d) against `x` (n × d), on the
    /// portable build and (where the CPU has it) the AVX2 + FMA build.
    fn same(q: &[f32], x: &[f32], d: usize, k: usize, what: &str) {
        same_with(q, x, d, k, what, true);
    }

    /// [`same`], the AVX2 + FMA build's filter with the panels' `bf16`
    /// products where the CPU has them when `bf16`, in `f32` otherwise;
    /// with the keys as a key set holds them (copied row-major) and as a
    /// one-shot call does (lent, the `f32` panels after the first block
    /// packed on demand where the pairs are built).
    fn same_with(q: &[f32], x: &[f32], d: usize, k: usize, what: &str, bf16: bool) {
        let n = x.len() / d;
        let view = ndarray::ArrayView2::from_shape((n, d), x).unwrap();
        let m = Matrix::check("test", "x", view).unwrap();
        let cols = KeyColumns::new(&m, &[], Pack::PanelsAndRows);
        let lent = KeyColumns::new(&m, &[], Pack::PanelsInstead);
        let (cols, lent) = match bf16 {
            true => (cols, lent),
            false => (cols.without_bf16(), lent.without_bf16()),
        };
        let soa = cols.soa(None);
        let lent_soa = KeysSoa {
            rows: Some(x),
            ..lent.soa(None)
        };
        for isa in [None, Avx2Fma::detect()] {
            let cp = Checkpoint::current("knn");
            let want = direct(isa, &Metric::Euclidean, q, d, &soa, k, &cp);
            for (how, keys) in [("copied", &soa), ("lent", &lent_soa)] {
                let got = knn(isa, q, d, keys, k, &cp).expect("blocked path runs");
                let what = format!("{what} {how} avx2={}", isa.is_some());
                assert_eq!(got.len(), want.len(), "{what}");
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(g.idx(), w.idx(), "{what} row {i}");
                    let (gb, wb): (Vec<u32>, Vec<u32>) = (
                        g.d2().iter().map(|v| v.to_bits()).collect(),
                        w.d2().iter().map(|v| v.to_bits()).collect(),
                    );
                    assert_eq!(gb, wb, "{what} row {i}");
                }
            }
        }
    }

    #[test]
    fn blocked_lists_equal_the_direct_lists() {
        for d in [1, 7, 31, 32, 33, 64, 128, 200] {
            for (m, n) in [(1, 1), (5, 3), (13, 37), (33, 301)] {
                let q = data(m * d, (d * 1000 + m) as u64);
                let x = data(n * d, (d * 7 + n) as u64);
                for k in [1, 3.min(n), n] {
                    same(&q, &x, d, k, &format!("d={d} m={m} n={n} k={k}"));
                }
            }
        }
    }

    #[test]
    fn offset_data_and_duplicate_keys_give_the_same_lists() {
        for d in [1, 7, 33, 128] {
            let (m, n) = (9, 257);
            // Offset by 1e4: the centring keeps the filter tight.
            let q: Vec<f32> = data(m * d, 3).iter().map(|v| v + 1e4).collect();
            let x: Vec<f32> = data(n * d, 4).iter().map(|v| v + 1e4).collect();
            for k in [1, 16, n] {
                same(&q, &x, d, k, &format!("offset d={d} k={k}"));
            }
            // Eleven distinct keys repeated: ties everywhere, lower index first;
            // queries on keys (distance 0) and between them.
            let base = data(11 * d, 5);
            let x: Vec<f32> = (0..n)
                .flat_map(|j| base[(j * 7 % 11) * d..][..d].to_vec())
                .collect();
            let mut q = x[..5 * d].to_vec();
            q.extend(data(4 * d, 6));
            for k in [1, 5, 40, n] {
                same(&q, &x, d, k, &format!("ties d={d} k={k}"));
            }
        }
    }

    /// Many key blocks, with the `bf16` filter and without it: the same
    /// lists as the direct path, bit for bit — on spread data (the `bf16`
    /// tiles serve from the second block), on tight clusters far from the
    /// keys' mean (the wider bound passes whole clusters: the groups go
    /// back to `f32` tiles), and with k larger than a block (lists not
    /// yet full take the `f32` tiles).
    #[test]
    fn bf16_and_f32_filters_give_the_direct_lists() {
        for d in [2, 33, 128] {
            let (m, n) = (41, 2100);
            let x = data(n * d, 50 + d as u64);
            let q = data(m * d, 60 + d as u64);
            // Two clusters of spread 0.01 at ±100 along the first axis.
            let far = |v: &[f32]| -> Vec<f32> {
                v.chunks_exact(d)
                    .enumerate()
                    .flat_map(|(i, r)| {
                        r.iter().enumerate().map(move |(c, &t)| {
                            0.01 * t + if c == 0 { [100.0, -100.0][i % 2] } else { 0.0 }
                        })
                    })
                    .collect()
            };
            let (xf, qf) = (far(&x), far(&q));
            for bf16 in [true, false] {
                for k in [1, 16, 300] {
                    same_with(
                        &q,
                        &x,
                        d,
                        k,
                        &format!("spread d={d} k={k} bf16={bf16}"),
                        bf16,
                    );
                    same_with(
                        &qf,
                        &xf,
                        d,
                        k,
                        &format!("clusters d={d} k={k} bf16={bf16}"),
                        bf16,
                    );
                }
            }
        }
    }

    /// The AVX-512 test of 16 keys passes the keys the scalar one passes,
    /// for every length and at the edges (ties, infinities, NaN).
    #[test]
    fn vector_filter_passes_what_the_scalar_one_passes() {
        let vals = [
            0.0f32,
            -0.0,
            1.0,
            -1.5,
            2.5,
            1e30,
            -1e30,
            f32::INFINITY,
            f32::NAN,
            0.75,
        ];
        let w: Vec<f32> = (0..16).map(|i| vals[(i * 7) % vals.len()]).collect();
        let s: Vec<f32> = (0..16).map(|i| vals[(i * 3 + 1) % vals.len()]).collect();
        #[cfg(target_arch = "x86_64")]
        if Avx512::detect().is_some() {
            for n in 0..=16 {
                for lim in [
                    0.0,
                    -1.0,
                    2.0,
                    f32::INFINITY,
                    f32::NEG_INFINITY,
                    f32::NAN,
                    1e30,
                ] {
                    let want = passing(&w[..n], &s[..n], lim);
                    // SAFETY: detected above.
                    let got = unsafe { passing_avx512(&w[..n], &s[..n], lim) };
                    assert_eq!(got, want, "n={n} lim={lim}");
                }
            }
        }
        // The scalar test itself: key 0 passes (0 − 2·0 ≤ 0), NaN never.
        assert_eq!(passing(&[0.0, f32::NAN], &[0.0, 0.0], 0.0), 1);
    }

    /// Eight distances from rows, sixteen coordinates at a time and
    /// transposed, equal the scalar chains bit for bit, for every length
    /// (tails of 1 to 16 coordinates) and wide-ranging values.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn transposed_distances_equal_the_scalar_chains() {
        if Avx512::detect().is_none() {
            return;
        }
        for d in (1..=40).chain([64, 127, 128, 200]) {
            let keys = data(8 * d, d as u64);
            let queries: Vec<f32> = data(8 * d, 1000 + d as u64)
                .iter()
                .enumerate()
                .map(|(i, v)| v * [1.0, 1e3, 1e-3, 7.0][i % 4])
                .collect();
            let kp: [*const f32; 8] = std::array::from_fn(|c| keys[c * d..].as_ptr());
            let qp: [*const f32; 8] = std::array::from_fn(|c| queries[c * d..].as_ptr());
            // SAFETY: detected above; each row holds d floats.
            let got = unsafe { rows8_avx512(kp, qp, d) };
            for c in 0..8 {
                let mut want = 0.0f32;
                for k in 0..d {
                    let df = keys[c * d + k] - queries[c * d + k];
                    want = df.mul_add(df, want);
                }
                assert_eq!(got[c].to_bits(), want.to_bits(), "d={d} pair {c}");
            }
        }
    }

    #[test]
    fn far_data_fall_back_to_the_direct_path() {
        let d = 3;
        let x = [0.0f32, 0.0, 0.0, 1e19, 0.0, 0.0];
        let view = ndarray::ArrayView2::from_shape((2, d), &x[..]).unwrap();
        let cols = KeyColumns::new(
            &Matrix::check("test", "x", view).unwrap(),
            &[],
            Pack::PanelsAndRows,
        );
        let cp = Checkpoint::current("knn");
        assert!(knn(None, &[0.0; 3], d, &cols.soa(None), 1, &cp).is_none());
        // A far query alone goes the direct way inside the blocked path.
        let x = data(40 * d, 9);
        let mut q = data(8 * d, 10);
        q[4] = 3e19;
        same(&q, &x, d, 4, "far query");
    }
}
