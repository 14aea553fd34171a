//! Local moments (docs/numerics.md, "Local moments"): per query, the
//! kernel-weighted averages of products of the keys' scaled offsets `r = (x − c)/h`
//! and their values, in one pass over the keys; and the driver they share
//! with the masked local mean (`masked.rs`), [`weighted_averages`].
//!
//! Each query streams the keys in blocks of [`KEY_BLOCK`]: the block's
//! weights come from `weights.rs` (log domain for the exponential
//! profiles), its sums are formed in `f32` and added to the row's `f64`
//! sums, rescaled when the running maximum log-weight moves — the local
//! mean's two-level summation with the moments in place of the values.
//! The moments' block sums are lane dot products over the keys stored
//! column-major (AVX2 + FMA where the CPU has it).

use rayon::prelude::*;

use super::keys::KeysSoa;
#[cfg(target_arch = "x86_64")]
use super::simd::Avx2Fma;
use super::simd::{Isa, KEY_BLOCK, Portable, dot, scaled_sq_dists, sum_of};
use super::weights::{block_weights, initial_max, product_ts};
use crate::cancel::Checkpoint;
use crate::error::Result;
use crate::kernel::{Kernel, ProductBlocks};
use crate::matrix::{Matrix, alloc_output};
use crate::types::{MomentLayout, RowNormalized};

/// What one pass sums per pair, a block of keys at a time: how the keys'
/// squared distances to the query are formed, and which weighted columns
/// they add.
pub(crate) trait PairSums: Sync {
    /// Columns per query.
    fn cols(&self) -> usize;
    /// Scratch floats a thread needs for [`add`](Self::add).
    fn scratch(&self) -> usize;
    /// The scaled distances from `q` to keys `j0..j0 + t.len()` the
    /// kernel's weights are formed from (`‖x − q‖²/h²` for a radial kernel,
    /// the carrier's `t` for a product; infinite: the key has no weight).
    fn ts<S: Isa>(&self, kernel: &Kernel, q: &[f32], j0: usize, t: &mut [f32]);
    /// Adds the columns of keys `j0..j0 + w.len()`, weighted by `w` (zero
    /// for a weightless key), to `block`.
    fn add<S: Isa>(&self, q: &[f32], j0: usize, w: &[f32], scratch: &mut [f32], block: &mut [f32]);
}

/// Per-thread buffers of one row.
struct Scratch {
    t: Vec<f32>,
    f: Vec<f32>,
    block: Vec<f32>,
    sums: Vec<f64>,
}

/// Kernel-weighted averages of the columns `pairs` adds, for each query
/// (`queries`, `M × d`) over `n` keys: `M × pairs.cols()`, NaN rows
/// (counted) without mass.
pub(crate) fn weighted_averages<P: PairSums>(
    op: &'static str,
    kernel: &Kernel,
    queries: &Matrix<'_>,
    n: usize,
    pairs: &P,
) -> Result<RowNormalized> {
    let (m, p) = (queries.rows(), pairs.cols());
    let mut out = alloc_output(op, "averages", m, p)?;
    // Read on the calling thread, before the rows fan out.
    let cp = Checkpoint::current(op);
    #[cfg(target_arch = "x86_64")]
    let isa = Avx2Fma::detect();
    let empty = out
        .par_chunks_mut(p)
        .enumerate()
        .map_init(
            || Scratch {
                t: vec![0.0; KEY_BLOCK],
                f: vec![0.0; pairs.scratch()],
                block: vec![0.0; p],
                sums: vec![0.0; p],
            },
            |sc, (i, row)| {
                if cp.is_cancelled() {
                    return false;
                }
                let q = queries.row_range(i, i + 1);
                #[cfg(target_arch = "x86_64")]
                if let Some(isa) = isa {
                    // SAFETY: `isa` is an `Avx2Fma` token, made only where
                    // run-time detection found AVX2 and FMA.
                    return !unsafe { row_avx2(isa, kernel, q, n, pairs, sc, row) };
                }
                !averages_row::<Portable, P>(kernel, q, n, pairs, sc, row)
            },
        )
        .filter(|&e| e)
        .count();
    cp.check()?;
    Ok(RowNormalized::from_parts(m, p, out, empty))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn row_avx2<P: PairSums>(
    _isa: Avx2Fma,
    kernel: &Kernel,
    q: &[f32],
    n: usize,
    pairs: &P,
    sc: &mut Scratch,
    out: &mut [f32],
) -> bool {
    averages_row::<Avx2Fma, P>(kernel, q, n, pairs, sc, out)
}

/// One query's averages into `out`; `false` (and NaN) when it has no mass.
#[inline(always)]
fn averages_row<S: Isa, P: PairSums>(
    kernel: &Kernel,
    q: &[f32],
    n: usize,
    pairs: &P,
    sc: &mut Scratch,
    out: &mut [f32],
) -> bool {
    let mut mx = initial_max(kernel.profile());
    let mut s = 0.0f64;
    sc.sums.fill(0.0);
    for j0 in (0..n).step_by(KEY_BLOCK) {
        let len = KEY_BLOCK.min(n - j0);
        let t = &mut sc.t[..len];
        pairs.ts::<S>(kernel, q, j0, t);
        let Some(factor) = block_weights::<S>(kernel.profile(), t, &mut mx) else {
            continue;
        };
        if factor != 1.0 {
            s *= factor;
            sc.sums.iter_mut().for_each(|u| *u *= factor);
        }
        sc.block.fill(0.0);
        pairs.add::<S>(q, j0, t, &mut sc.f, &mut sc.block);
        s += f64::from(sum_of(t));
        for (u, &b) in sc.sums.iter_mut().zip(&sc.block) {
            *u += f64::from(b);
        }
    }
    if s > 0.0 {
        for (o, &u) in out.iter_mut().zip(&sc.sums) {
            *o = (u / s) as f32;
        }
        true
    } else {
        out.fill(f32::NAN);
        false
    }
}

/// The local moments' pairs: offsets `x − q` and values, the keys and
/// values stored column-major (`xt[k·ld + j]`, `yt[c·ld + j]`).
struct Moments<'a> {
    xt: &'a [f32],
    yt: &'a [f32],
    ld: usize,
    layout: MomentLayout,
    /// `1/h` of each coordinate, the offsets' scale.
    inv_h: Vec<f32>,
    /// A product kernel's blocks (formed once, not per key block).
    product: Option<ProductBlocks>,
}

impl PairSums for Moments<'_> {
    fn cols(&self) -> usize {
        self.layout.cols()
    }
    fn scratch(&self) -> usize {
        // The block's offsets r_k and weighted offsets w·r_k.
        2 * self.layout.d * KEY_BLOCK
    }
    #[inline(always)]
    fn ts<S: Isa>(&self, kernel: &Kernel, q: &[f32], j0: usize, t: &mut [f32]) {
        // The row is [q | c]: the weights are placed by q.
        let q = &q[..self.layout.d];
        match &self.product {
            Some(pb) => product_ts::<S>(pb, self.xt, self.ld, j0, q, t),
            None => scaled_sq_dists::<S>(self.xt, self.ld, j0, q, kernel.inv_h2(), t),
        }
    }
    #[inline(always)]
    fn add<S: Isa>(&self, q: &[f32], j0: usize, w: &[f32], f: &mut [f32], block: &mut [f32]) {
        let (d, qy, n, len) = (self.layout.d, self.layout.qy, self.ld, w.len());
        let (r, wr) = f.split_at_mut(d * KEY_BLOCK);
        // Offsets from the row's centre c, scaled by 1/h.
        for ((k, &ck), &inv_h) in q[d..2 * d].iter().enumerate().zip(&self.inv_h) {
            let x = &self.xt[k * n + j0..k * n + j0 + len];
            let rk = &mut r[k * KEY_BLOCK..k * KEY_BLOCK + len];
            let wrk = &mut wr[k * KEY_BLOCK..k * KEY_BLOCK + len];
            for (((rj, wrj), &xj), &wj) in rk.iter_mut().zip(wrk.iter_mut()).zip(x).zip(w) {
                *rj = (xj - ck) * inv_h;
                *wrj = wj * *rj;
            }
        }
        let col = |k: usize| &r[k * KEY_BLOCK..k * KEY_BLOCK + len];
        let wcol = |k: usize| &wr[k * KEY_BLOCK..k * KEY_BLOCK + len];
        let y = |c: usize| &self.yt[c * n + j0..c * n + j0 + len];
        for (a, b) in block[..d].iter_mut().enumerate() {
            *b = sum_of(wcol(a));
        }
        if !self.layout.second {
            for (c, b) in block[d..d + qy].iter_mut().enumerate() {
                *b = dot::<S>(w, y(c));
            }
            return;
        }
        // The layout's order: pairs, then each value with its cross moments.
        let mut idx = d;
        for a in 0..d {
            for b in a..d {
                block[idx] = dot::<S>(wcol(a), col(b));
                idx += 1;
            }
        }
        for c in 0..qy {
            block[idx] = dot::<S>(w, y(c));
            idx += 1;
            for a in 0..d {
                block[idx] = dot::<S>(wcol(a), y(c));
                idx += 1;
            }
        }
    }
}

/// `1/h` of each of `d` coordinates in `f32`, the scale of the moments'
/// offsets (a product kernel's blocks each have their own).
fn inv_h(kernel: &Kernel, d: usize) -> Vec<f32> {
    let hs = kernel.coordinate_bandwidths(d);
    hs.iter().map(|&h| (1.0 / h) as f32).collect()
}

/// Local moments of every query row `[q | c]` (`M × 2d`) against the
/// keys' columns (their value matrix: the layout's `qy` columns), as one-shot
/// calls and key sets keep them: `M × layout.cols()` averages, far rows
/// finished in `f64`, NaN rows (counted) without mass.
pub(crate) fn local_moments(
    kernel: &Kernel,
    queries: &Matrix<'_>,
    keys: &KeysSoa<'_>,
    layout: MomentLayout,
) -> Result<RowNormalized> {
    let pairs = Moments {
        xt: keys.xt,
        yt: keys.yt,
        ld: keys.ld,
        layout,
        inv_h: inv_h(kernel, layout.d),
        product: kernel.product_blocks(),
    };
    let mut out = weighted_averages("local_moments", kernel, queries, keys.n, &pairs)?;
    let (xt, yt, ld) = (keys.xt, keys.yt, keys.ld);
    layout.finish_far_rows(
        kernel,
        queries.as_slice(),
        (keys.n, |j, k| xt[k * ld + j], |j, c| yt[c * ld + j]),
        &mut out,
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::keys::{KeyColumns, Pack};
    use crate::kernel::Profile;
    use ndarray::Array2;

    #[test]
    fn block_sums_follow_the_layout_on_every_build() {
        // Moments of a few keys against the layout's factor products,
        // written per pair in f64.
        let (n, d, qy) = (300usize, 3usize, 2usize);
        let x = Array2::from_shape_fn((n, d), |(j, k)| ((j * 7 + k * 3) % 11) as f32 * 0.1);
        let y = Array2::from_shape_fn((n, qy), |(j, c)| ((j + c) % 5) as f32 - 2.0);
        // [q | c]: weights around q, offsets from c, scaled by 1/h = 1/2.
        let q = Array2::from_shape_vec((1, 2 * d), vec![0.5, 0.4, 0.3, 0.2, 0.1, 0.0]).unwrap();
        let layout = MomentLayout {
            d,
            qy,
            second: true,
        };
        let (xm, ym, qm) = (
            Matrix::check("t", "x", x.view()).unwrap(),
            Matrix::check("t", "y", y.view()).unwrap(),
            Matrix::check("t", "q", q.view()).unwrap(),
        );
        let kernel = Kernel::new(Profile::Epanechnikov, 2.0).unwrap();
        let cols = KeyColumns::new(&xm, std::slice::from_ref(&ym), Pack::None);
        let got = local_moments(&kernel, &qm, &cols.soa(Some(0)), layout).unwrap();
        let mut want = vec![0.0f64; layout.cols()];
        let mut s = 0.0;
        for j in 0..n {
            let t: f64 = (0..d)
                .map(|k| f64::from(x[[j, k]] - q[[0, k]]).powi(2))
                .sum::<f64>()
                / 4.0;
            let mut f: Vec<f64> = (0..d)
                .map(|k| f64::from(x[[j, k]] - q[[0, d + k]]) / 2.0)
                .collect();
            let w = (1.0 - t).max(0.0);
            f.extend((0..qy).map(|c| f64::from(y[[j, c]])));
            f.push(1.0);
            s += w;
            for (c, o) in want.iter_mut().enumerate() {
                let (ia, ib) = layout.factors(c);
                *o += w * f[ia] * f[ib];
            }
        }
        for (c, o) in want.iter().enumerate() {
            let g = f64::from(got.values[[0, c]]);
            assert!(
                (g - o / s).abs() < 1e-5 * (o / s).abs().max(1.0),
                "column {c}: {g} vs {}",
                o / s
            );
        }
    }
}
