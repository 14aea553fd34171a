//! Inner products for the distance-based ops at larger `d`: the keys
//! centred on their mean and packed in panels of [`P`] keys ([`Panels`],
//! built once per one-shot call or once per key set), a group of up to
//! [`ROWS`] centred queries ([`CentredRows`]), and the register-blocked
//! micro-kernel ([`dot_tile`]) that fills a `ROWS × KEY_BLOCK` tile of
//! inner products `q'·x'`, compiled for the portable build, AVX2 + FMA
//! and AVX-512. The callers turn the tile into squared distances
//! `‖q'‖² + ‖x'‖² − 2q'·x'` (local means, kernel matrices: `sq_dists.rs`)
//! or into the kNN filter (`knn_blocked.rs`). The packing of one panel is
//! `pack.rs`'s; the `bf16` pairs for kNN `bf16.rs`'s.
//!
//! Imports: `super::{bf16, pack, simd}`, `crate::error`, `crate::kernel`,
//! `crate::matrix`.

use std::sync::OnceLock;

use rayon::prelude::*;

use super::bf16::{self, Bf16Panels};
use super::pack::pack;
pub(crate) use super::simd::TileIsa;
use super::simd::{Avx2Fma, Avx512, Bf16Dot, Isa, KEY_BLOCK, Portable, fmadd};
use crate::error::Result;
use crate::kernel::Kernel;
use crate::matrix::{try_collect, try_copy, try_zeros};

pub(crate) use super::pack::P;
/// Query rows of a tile (the local mean's query group).
pub(crate) const ROWS: usize = 8;
const _: () = assert!(P == bf16::LANES && ROWS == bf16::ROWS);
/// Coordinates summed in one chain before it is added to the running
/// total: the dot product's rounding then grows with `KC + d/KC`, not `d`.
pub(crate) const KC: usize = 32;
/// Centred squared norms at or above this keep the direct path (no `f32`
/// intermediate of either path can overflow below it).
pub(crate) const NORM_LIMIT: f64 = 1e35;
/// Largest `d` the bounds are derived for (`d·u ≤ 0.004`).
pub(crate) const MAX_D: usize = 65_536;
/// Coordinates from which local means, row states and kernel matrices
/// take inner products. Measured on the 2-core development machine
/// (gaussian local mean, 8192 queries × 8192 keys, q = 4, AVX-512, best of
/// 3, against the differences): 2 % slower at d = 24, 1.2× faster at
/// d = 32, 1.8× at 64, 3.6× at 256, 6.2× at 784.
pub(crate) const MIN_D: usize = 32;

/// Whether `panels` serve the squared distances of local means, row
/// states and kernel matrices for queries in `d` dimensions under
/// `kernel` (never a product kernel's: its distances are by blocks).
pub(crate) fn serve_sq_dists(kernel: &Kernel, panels: Option<&Panels>, d: usize) -> bool {
    !kernel.is_product()
        && kernel.metric().is_euclidean()
        && panels.is_some_and(|p| p.d == d && d >= MIN_D)
}

/// Queries from which a one-shot call builds panels: building them is a
/// pass over the keys that fewer queries do not repay. Measured (gaussian
/// local mean, N = 65536 at d = 64 and 256, 16384 at d = 784, against the
/// differences): at 8 queries 5–45 % slower; at 32, 1.9× faster at
/// d = 256 and 20–60 % slower at d = 64 and 784 (14 ms and 15 ms more);
/// at 128, faster everywhere (1.2×, 5.2×, 1.6×).
pub(crate) const ONE_SHOT_MIN_M: usize = 32;

/// Whether a call with `m` queries in `d` dimensions under `kernel` should
/// build panels (a key set asks with `m = usize::MAX`: it builds them
/// once); never for a product kernel, which the panels do not serve
/// ([`serve_sq_dists`]).
pub(crate) fn wanted_for(kernel: &Kernel, d: usize, m: usize) -> bool {
    !kernel.is_product()
        && kernel.metric().is_euclidean()
        && (MIN_D..=MAX_D).contains(&d)
        && m >= ONE_SHOT_MIN_M
}

/// What [`Panels`] hold for kNN beside the packed keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KnnRows {
    /// Nothing (local means, row states, kernel matrices, MeanShift).
    No,
    /// The `bf16` pairs where the CPU has AVX-512 BF16; the keys stay the
    /// caller's, lent row-major to kNN's re-measure (a one-shot call,
    /// whose keys outlive it).
    Lent,
    /// The `bf16` pairs and a row-major copy of the keys (a key set).
    Copied,
}

/// The keys centred on their mean (taken in `f64`), rounded once to `f32`
/// and packed in panels (`c[(j/P)·P·d + k·P + j%P]`, zero-padded), with
/// their centred squared norms.
pub(crate) struct Panels {
    /// Every panel; or, for a one-shot kNN with the `bf16` pairs
    /// ([`KnnRows::Lent`]), the first key block's only — the others are
    /// packed when a tile first asks for them (`later`).
    c: Vec<f32>,
    /// The `f32` panels of key blocks 1, 2, … ([`KEY_BLOCK`] keys each),
    /// packed on first use from the lent keys when `c` holds the first
    /// block only (empty otherwise); `None` inside where the block could
    /// not be allocated.
    later: Vec<OnceLock<Option<Vec<f32>>>>,
    /// `‖x'_j‖²`, accumulated in `f64`.
    norms: Vec<f64>,
    /// The same, rounded to `f32` (padded to whole panels with zeros).
    norms32: Vec<f32>,
    mean: Vec<f64>,
    /// The keys as given, row-major (`rows[j·d + k]`), when copied
    /// ([`KnnRows::Copied`]): kNN re-measures its candidates from them
    /// with unit stride.
    rows: Option<Vec<f32>>,
    /// The panels in `bf16` pairs, for kNN's filter where the CPU has
    /// AVX-512 BF16 (built for [`KnnRows::Lent`] and [`KnnRows::Copied`]).
    bf16: Option<Bf16Panels>,
    d: usize,
}

impl Panels {
    /// Bytes the panels of `n` keys in `d` dimensions take, with what
    /// `knn` adds (the row-major copy; where the CPU has AVX-512 BF16, the
    /// `bf16` pairs).
    pub(crate) fn bytes(n: usize, d: usize, knn: KnnRows) -> u64 {
        let keys = n.div_ceil(P) as u64 * P as u64;
        let per_key = d as u64 * if knn == KnnRows::Copied { 8 } else { 4 } + 12;
        let pairs = match knn != KnnRows::No && Bf16Dot::detect().is_some() {
            true => Bf16Panels::bytes(n, d),
            false => 0,
        };
        keys.saturating_mul(per_key)
            .saturating_add(d as u64 * 8)
            .saturating_add(pairs)
    }

    /// Centres and packs the keys given row-major (`rows[j·d + k]`), with
    /// what `knn` asks (rounded to `bf16` pairs where the CPU has AVX-512
    /// BF16; copied as the row-major copy); `None` when some key lies
    /// too far from the mean (then every op keeps the direct path), and
    /// [`Error::TooLarge`](crate::Error::TooLarge) for `op` when the panels
    /// cannot be allocated.
    pub(crate) fn try_from_rows(
        op: &'static str,
        rows: &[f32],
        d: usize,
        knn: KnnRows,
    ) -> Result<Option<Panels>> {
        if rows.is_empty() || d == 0 || d > MAX_D {
            return Ok(None);
        }
        let n = rows.len() / d;
        let mean: Vec<f64> = rows
            .par_chunks(256 * d)
            .map(|chunk| {
                let mut sum = vec![0.0f64; d];
                for row in chunk.chunks_exact(d) {
                    for (s, &x) in sum.iter_mut().zip(row) {
                        *s += f64::from(x);
                    }
                }
                sum
            })
            .reduce_with(|mut a, b| {
                a.iter_mut().zip(&b).for_each(|(x, y)| *x += y);
                a
            })
            .expect("at least one key")
            .into_iter()
            .map(|s| s / n as f64)
            .collect();
        let padded = n.div_ceil(P) * P;
        let avx512 = Avx512::detect();
        let pairs_of = match (knn, Bf16Dot::detect()) {
            (KnnRows::Lent | KnnRows::Copied, Some(t)) => Some(t),
            _ => None,
        };
        // A one-shot kNN filters in `bf16` after its first block: the `f32`
        // panels of the others only where a group falls back to them.
        let lazy = knn == KnnRows::Lent && pairs_of.is_some();
        let eager = if lazy { padded.min(KEY_BLOCK) } else { padded };
        let mut c = try_zeros::<f32>(op, "key panels", (eager as u64).saturating_mul(d as u64))?;
        let mut norms = try_zeros::<f64>(op, "key norms", padded as u64)?;
        let near = c
            .par_chunks_mut(P * d)
            .zip(rows.par_chunks(P * d))
            .zip(norms.par_chunks_mut(P))
            .all(|((panel, keys), norms)| {
                pack(avx512, keys, d, &mean, panel, norms);
                norms.iter().all(|&s| s < NORM_LIMIT)
            });
        if !near {
            return Ok(None);
        }
        let mut bf16 = match pairs_of {
            Some(_) => Some(Bf16Panels::try_zeroed(op, padded / P, d)?),
            None => None,
        };
        if let (Some(t), Some(pairs)) = (pairs_of, bf16.as_mut()) {
            let plen = pairs.panel_len();
            let (first, rest) = pairs.split_panels_mut(eager / P);
            first
                .par_chunks_mut(plen)
                .zip(c.par_chunks(P * d))
                .for_each(|(out, panel)| bf16::fill_panel(t, panel, d, out));
            // The later panels through a scratch panel each: packed,
            // measured and rounded, the `f32` copy dropped.
            let near_later = rest
                .par_chunks_mut(plen)
                .zip(rows[(eager * d).min(rows.len())..].par_chunks(P * d))
                .zip(norms[eager..].par_chunks_mut(P))
                .map_init(
                    || vec![0.0f32; P * d],
                    |panel, ((out, keys), norms)| {
                        if keys.len() < P * d {
                            panel.fill(0.0); // the last panel's padding
                        }
                        pack(avx512, keys, d, &mean, panel, norms);
                        bf16::fill_panel(t, panel, d, out);
                        norms.iter().all(|&s| s < NORM_LIMIT)
                    },
                )
                .all(|ok| ok);
            if !near_later {
                return Ok(None);
            }
        }
        let norms32 = try_collect(op, "key norms", padded, norms.iter().map(|&s| s as f32))?;
        norms.truncate(n);
        let rows = match knn {
            KnnRows::Copied => Some(try_copy(op, "row-major keys", rows)?),
            _ => None,
        };
        let later = match lazy {
            true => (1..n.div_ceil(KEY_BLOCK))
                .map(|_| OnceLock::new())
                .collect(),
            false => Vec::new(),
        };
        Ok(Some(Panels {
            c,
            later,
            norms,
            norms32,
            mean,
            rows,
            bf16,
            d,
        }))
    }

    /// [`try_from_rows`](Self::try_from_rows) for tests, whose inputs are
    /// small.
    #[cfg(test)]
    pub(crate) fn from_rows(rows: &[f32], d: usize, knn: KnnRows) -> Option<Panels> {
        Self::try_from_rows("test", rows, d, knn).expect("small test keys")
    }

    /// Every key as given (`n·d` floats, row-major), when the row-major
    /// copy is kept ([`KnnRows::Copied`]).
    pub(crate) fn rows(&self) -> Option<&[f32]> {
        self.rows.as_deref()
    }

    /// The keys' mean the panels are centred on.
    #[cfg(test)]
    pub(crate) fn mean(&self) -> &[f64] {
        &self.mean
    }

    /// Drops the `bf16` pairs (tests of the `f32` filter).
    #[cfg(test)]
    pub(crate) fn drop_bf16(&mut self) {
        self.bf16 = None;
    }

    /// The panels in `bf16` pairs, when built.
    pub(crate) fn bf16(&self) -> Option<&Bf16Panels> {
        self.bf16.as_ref()
    }

    /// `‖x'_j‖²` of every key, in `f64`.
    pub(crate) fn norms(&self) -> &[f64] {
        &self.norms
    }

    /// `‖x'_j‖²` of the keys `j0..j0+len`, in `f32`.
    pub(crate) fn norms32(&self, j0: usize, len: usize) -> &[f32] {
        &self.norms32[j0..j0 + len]
    }

    /// Coordinates per key.
    pub(crate) fn d(&self) -> usize {
        self.d
    }

    /// Every panel, for the tiles (the panels must all be packed: not a
    /// one-shot kNN's, [`KnnRows::Lent`], whose tiles take [`block`](Self::block)).
    pub(crate) fn span(&self) -> Span<'_> {
        debug_assert!(self.later.is_empty());
        self.span_unchecked()
    }

    /// The panels of the key block starting at `j0` (a multiple of
    /// [`KEY_BLOCK`]), packed now from the keys row-major `rows` (those the
    /// panels were built from) if the panels hold the first block only and
    /// no tile has asked for this one before; `None` where that block
    /// cannot be allocated or `rows` are missing (the caller then measures
    /// the block's keys without the tile).
    pub(crate) fn block(&self, j0: usize, rows: Option<&[f32]>) -> Option<Span<'_>> {
        debug_assert!(j0.is_multiple_of(KEY_BLOCK));
        let b = j0 / KEY_BLOCK;
        if self.later.is_empty() || b == 0 {
            return Some(self.span_unchecked());
        }
        let d = self.d;
        let c = self.later.get(b - 1)?.get_or_init(|| {
            let keys = &rows?.get(j0 * d..(j0 + KEY_BLOCK).min(self.norms.len()) * d)?;
            let len = keys.len().div_ceil(P * d) * P * d;
            let mut c = try_zeros::<f32>("knn", "key panels", len as u64).ok()?;
            let avx512 = Avx512::detect();
            for (panel, keys) in c.chunks_mut(P * d).zip(keys.chunks(P * d)) {
                pack(avx512, keys, d, &self.mean, panel, &mut [0.0; P]);
            }
            Some(c)
        });
        c.as_deref().map(|c| Span { c, p0: j0 / P, d })
    }

    /// [`span`](Self::span) without its check: the first block's panels
    /// at least.
    fn span_unchecked(&self) -> Span<'_> {
        Span {
            c: &self.c,
            p0: 0,
            d: self.d,
        }
    }
}

/// Whole panels of keys for the tiles: `c` holds panels `p0, p0 + 1, …`
/// of `d` coordinates each.
#[derive(Clone, Copy)]
pub(crate) struct Span<'a> {
    c: &'a [f32],
    p0: usize,
    d: usize,
}

/// Up to [`ROWS`] queries centred on the keys' mean (`f64` difference,
/// rounded once), zero-padded to [`ROWS`] rows, with their centred
/// squared norms.
#[derive(Clone)]
pub(crate) struct CentredRows {
    qc: Vec<f32>,
    /// `‖q'_r‖²` in `f64`.
    pub nq: [f64; ROWS],
    /// The same in `f32`.
    pub nq32: [f32; ROWS],
}

impl CentredRows {
    /// Centres `queries` (row-major, at most [`ROWS`] rows of `panels.d()`).
    pub(crate) fn new(panels: &Panels, queries: &[f32]) -> Self {
        let d = panels.d;
        assert!(queries.len() <= ROWS * d && queries.len().is_multiple_of(d));
        let mut qc = vec![0.0f32; ROWS * d];
        let mut nq = [0.0f64; ROWS];
        for (r, q) in queries.chunks_exact(d).enumerate() {
            let mut s = 0.0f64;
            for (k, (&x, o)) in q.iter().zip(&mut qc[r * d..(r + 1) * d]).enumerate() {
                *o = (f64::from(x) - panels.mean[k]) as f32;
                s += f64::from(*o) * f64::from(*o);
            }
            nq[r] = s;
        }
        CentredRows {
            qc,
            nq,
            nq32: nq.map(|s| s as f32),
        }
    }

    /// The centred rows, row-major ([`ROWS`] rows of `d`, zero past the
    /// queries given).
    pub(crate) fn qc(&self) -> &[f32] {
        &self.qc
    }

    /// Whether row `r` lies too far from the keys' mean (or is not
    /// finite): it takes the direct path.
    pub(crate) fn far(&self, r: usize) -> bool {
        far_norm(self.nq[r])
    }
}

/// Whether a query of centred squared norm `nq` lies too far from the
/// keys' mean for the bounds (or is not finite).
pub(crate) fn far_norm(nq: f64) -> bool {
    nq >= NORM_LIMIT || !nq.is_finite()
}

/// `out[r·KEY_BLOCK + (j − j0)] = q'_r·x'_j` for the first `g` rows of
/// `rows` (and, up to the micro-kernel's height, a few zero rows after
/// them) and the keys `j0..j0+len` (`len ≤ KEY_BLOCK`).
pub(crate) fn dot_tile(
    isa: TileIsa,
    rows: &CentredRows,
    g: usize,
    panels: Span<'_>,
    j0: usize,
    len: usize,
    out: &mut [f32; ROWS * KEY_BLOCK],
) {
    debug_assert!(len <= KEY_BLOCK && len > 0);
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the tokens are made only where run-time detection found
        // the features.
        TileIsa::Avx512(t) => unsafe { tile_avx512(t, rows, g, panels, j0, len, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        TileIsa::Avx2(t) => unsafe { tile_avx2(t, rows, g, panels, j0, len, out) },
        _ => tile_impl::<Portable, 4, 1, _>(rows, g, panels, j0, len, out, dots::<Portable, 4, 1>),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn tile_avx2(
    _t: Avx2Fma,
    rows: &CentredRows,
    g: usize,
    panels: Span<'_>,
    j0: usize,
    len: usize,
    out: &mut [f32; ROWS * KEY_BLOCK],
) {
    tile_impl::<Avx2Fma, 4, 1, _>(rows, g, panels, j0, len, out, dots::<Avx2Fma, 4, 1>);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn tile_avx512(
    t: Avx512,
    rows: &CentredRows,
    g: usize,
    panels: Span<'_>,
    j0: usize,
    len: usize,
    out: &mut [f32; ROWS * KEY_BLOCK],
) {
    tile_impl::<Avx512, 8, 2, _>(rows, g, panels, j0, len, out, |qs, d, span, s| {
        dots_8x2_avx512(t, qs, d, span, s)
    });
}

/// [`dots`] for 8 queries and 2 panels in explicit AVX-512: the 16
/// accumulators of a chain in registers, the totals in memory.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn dots_8x2_avx512(_t: Avx512, qs: &[f32], d: usize, span: &[f32], s: &mut [[[f32; P]; 2]; 8]) {
    use std::arch::x86_64::*;
    assert!(qs.len() >= 8 * d && span.len() >= 2 * P * d);
    let (q, x) = (qs.as_ptr(), span.as_ptr());
    *s = [[[0.0; P]; 2]; 8];
    let mut k0 = 0;
    while k0 < d {
        let k1 = (k0 + KC).min(d);
        let mut a = [_mm512_setzero_ps(); 16];
        for k in k0..k1 {
            // SAFETY: k < d, and the lengths are asserted above.
            let (x0, x1) = unsafe {
                (
                    _mm512_loadu_ps(x.add(k * P)),
                    _mm512_loadu_ps(x.add(P * d + k * P)),
                )
            };
            for g in 0..8 {
                // SAFETY: as above.
                let qv = _mm512_set1_ps(unsafe { *q.add(g * d + k) });
                a[2 * g] = _mm512_fmadd_ps(qv, x0, a[2 * g]);
                a[2 * g + 1] = _mm512_fmadd_ps(qv, x1, a[2 * g + 1]);
            }
        }
        for (g, sg) in s.iter_mut().enumerate() {
            for (v, sv) in sg.iter_mut().enumerate() {
                let p = sv.as_mut_ptr();
                // SAFETY: `sv` holds 16 floats.
                unsafe { _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), a[2 * g + v])) };
            }
        }
        k0 = k1;
    }
}

/// The tile, `G` rows by `W` panels at a time by `kernel` (a lone last
/// panel by [`dots`]).
#[inline(always)]
fn tile_impl<S: Isa, const G: usize, const W: usize, K>(
    rows: &CentredRows,
    g: usize,
    panels: Span<'_>,
    j0: usize,
    len: usize,
    out: &mut [f32; ROWS * KEY_BLOCK],
    kernel: K,
) where
    K: Fn(&[f32], usize, &[f32], &mut [[[f32; P]; W]; G]),
{
    let d = panels.d;
    let (p0, p1) = (j0 / P, (j0 + len).div_ceil(P));
    let mut s = [[[0.0f32; P]; W]; G];
    let mut p = p0;
    while p < p1 {
        let w = W.min(p1 - p);
        let at = p - panels.p0;
        let span = &panels.c[at * P * d..(at + w) * P * d];
        for g0 in (0..g.next_multiple_of(G).min(ROWS)).step_by(G) {
            if w == W {
                kernel(&rows.qc[g0 * d..(g0 + G) * d], d, span, &mut s);
            } else {
                // A lone panel (the last, or a range's odd one), four
                // rows at a time (the shape that fits the registers).
                for g4 in (0..G).step_by(4) {
                    let mut one = [[[0.0f32; P]; 1]; 4];
                    let q4 = &rows.qc[(g0 + g4) * d..(g0 + g4 + 4) * d];
                    dots::<S, 4, 1>(q4, d, span, &mut one);
                    for (a, b) in s[g4..g4 + 4].iter_mut().zip(&one) {
                        a[0] = b[0];
                    }
                }
            }
            for (r, sg) in s.iter().enumerate() {
                let row = &mut out[(g0 + r) * KEY_BLOCK..(g0 + r + 1) * KEY_BLOCK];
                for (v, sv) in sg.iter().enumerate().take(w) {
                    let first = (p + v) * P;
                    if first >= j0 && first + P <= j0 + len {
                        row[first - j0..first - j0 + P].copy_from_slice(sv);
                    } else {
                        for (l, &x) in sv.iter().enumerate() {
                            let j = first + l;
                            if j >= j0 && j < j0 + len {
                                row[j - j0] = x;
                            }
                        }
                    }
                }
            }
        }
        p += w;
    }
}

/// `s[g][v][l] = Σ_k q_g[k]·x_{v,l}[k]` for `G` queries (row-major, `d`
/// columns) and `W` consecutive panels, in chains of [`KC`] coordinates.
#[inline(always)]
fn dots<S: Isa, const G: usize, const W: usize>(
    qs: &[f32],
    d: usize,
    span: &[f32],
    s: &mut [[[f32; P]; W]; G],
) {
    let mut tot = [[[0.0f32; P]; W]; G];
    let mut k0 = 0;
    while k0 < d {
        let k1 = (k0 + KC).min(d);
        let mut acc = [[[0.0f32; P]; W]; G];
        for k in k0..k1 {
            for (g, a) in acc.iter_mut().enumerate() {
                let qv = qs[g * d + k];
                for (v, av) in a.iter_mut().enumerate() {
                    let x = &span[v * P * d + k * P..v * P * d + (k + 1) * P];
                    for l in 0..P {
                        av[l] = fmadd::<S>(qv, x[l], av[l]);
                    }
                }
            }
        }
        for (t, a) in tot.iter_mut().zip(&acc) {
            for (tv, av) in t.iter_mut().zip(a) {
                for l in 0..P {
                    tv[l] += av[l];
                }
            }
        }
        k0 = k1;
    }
    *s = tot;
}

#[cfg(test)]
mod tests {
    use super::super::test_data as data;
    use super::*;

    #[test]
    fn tiles_equal_f64_dot_products_on_every_build() {
        for d in [1, 16, 31, 33, 70, 300] {
            let n = 301;
            let x = data(n * d, d as u64);
            let pan = Panels::from_rows(&x, d, KnnRows::Copied).unwrap();
            let q = data(5 * d, 99 + d as u64);
            let rows = CentredRows::new(&pan, &q);
            for isa in TileIsa::all() {
                for (j0, len) in [(0, 256), (3, 17), (250, 51), (17, 1), (288, 13)] {
                    let mut out = [f32::NAN; ROWS * KEY_BLOCK];
                    dot_tile(isa, &rows, ROWS, pan.span(), j0, len, &mut out);
                    for r in 0..ROWS {
                        for jj in 0..len {
                            let j = j0 + jj;
                            let want: f64 = if r < 5 {
                                (0..d)
                                    .map(|k| {
                                        (f64::from(q[r * d + k]) - pan.mean[k])
                                            * (f64::from(x[j * d + k]) - pan.mean[k])
                                    })
                                    .sum()
                            } else {
                                0.0
                            };
                            let got = f64::from(out[r * KEY_BLOCK + jj]);
                            let scale = (rows.nq[r] * pan.norms[j]).sqrt() + 1e-30;
                            assert!(
                                (got - want).abs() <= 1e-6 * scale,
                                "{isa:?} d={d} r={r} j={j}: {got} vs {want}"
                            );
                        }
                    }
                }
            }
            // The norms are those of the centred keys.
            let want: f64 = (0..d)
                .map(|k| (f64::from(x[7 * d + k]) - pan.mean[k]).powi(2))
                .sum();
            assert!((pan.norms()[7] - want).abs() <= 1e-6 * want);
        }
    }

    #[test]
    fn far_keys_and_queries_are_refused() {
        assert!(Panels::from_rows(&[0.0, 0.0, 1e19, 0.0], 2, KnnRows::No).is_none());
        let pan = Panels::from_rows(&[0.0, 0.0, 1.0, 0.0], 2, KnnRows::No).unwrap();
        let rows = CentredRows::new(&pan, &[3e19, 0.0, 0.0, f32::NAN, 1.0, 1.0]);
        assert!(rows.far(0) && rows.far(1) && !rows.far(2));
    }

    /// A one-shot kNN's panels ([`KnnRows::Lent`]) hold the same values as
    /// a key set's ([`KnnRows::Copied`]), bit for bit: the same norms, the
    /// same `bf16` pairs (packed through a scratch panel), and each key
    /// block's `f32` panels when a tile first asks for them.
    #[test]
    fn panels_packed_on_demand_equal_the_eager_ones() {
        for (d, n) in [(1, 300), (7, 256), (33, 257), (128, 1000), (784, 600)] {
            let x = data(n * d, 40 + d as u64);
            let lent = Panels::from_rows(&x, d, KnnRows::Lent).unwrap();
            let kept = Panels::from_rows(&x, d, KnnRows::Copied).unwrap();
            assert_eq!(lent.norms(), kept.norms(), "d={d}");
            assert_eq!(lent.norms32(0, n), kept.norms32(0, n), "d={d}");
            assert_eq!(
                lent.bf16().map(Bf16Panels::raw),
                kept.bf16().map(Bf16Panels::raw),
                "d={d}"
            );
            for j0 in (0..n).step_by(KEY_BLOCK) {
                let (p0, p1) = (j0 / P, (j0 + KEY_BLOCK).min(n).div_ceil(P));
                let want = &kept.span().c[p0 * P * d..p1 * P * d];
                let got = lent.block(j0, Some(&x)).expect("packed");
                assert_eq!(got.p0, if lent.later.is_empty() { 0 } else { p0 });
                let at = (p0 - got.p0) * P * d;
                assert_eq!(&got.c[at..at + want.len()], want, "d={d} j0={j0}");
                if j0 > 0 && !lent.later.is_empty() {
                    // Without the keys a later block cannot be packed.
                    let fresh = Panels::from_rows(&x, d, KnnRows::Lent).unwrap();
                    assert!(fresh.block(j0, None).is_none());
                }
            }
        }
    }
}
