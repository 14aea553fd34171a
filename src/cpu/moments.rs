//! Local moments (docs/numerics.md, "Local moments"): per query, the
//! kernel-weighted averages of products of the keys' offsets `r = x − q`
//! and their values, in one pass over the keys; and the driver they share
//! with the masked local mean (`masked.rs`), [`weighted_averages`].
//!
//! Each query streams the keys in blocks of [`KEY_BLOCK`]: the block's
//! weights come from `weights.rs` (log domain for the exponential
//! profiles), its sums are formed in `f32` and added to the row's `f64`
//! sums, rescaled when the running maximum log-weight moves — the local
//! mean's two-level summation with the moments in place of the values.

use rayon::prelude::*;

use super::simd::{KEY_BLOCK, Portable};
use super::weights::{block_weights, initial_max};
use crate::error::Result;
use crate::kernel::Kernel;
use crate::matrix::{Matrix, alloc_output};
use crate::types::{MomentLayout, RowNormalized};

/// What one pass sums per pair: how a key's squared distance to the query
/// is formed, and which weighted columns it adds.
pub(crate) trait PairSums: Sync {
    /// Columns per query.
    fn cols(&self) -> usize;
    /// Scratch floats a thread needs for [`add`](Self::add).
    fn scratch(&self) -> usize;
    /// The squared distance from `q` to key `j`, before the bandwidth
    /// (infinite: the key has no weight).
    fn sq_dist(&self, q: &[f32], j: usize) -> f32;
    /// Adds key `j`'s columns, weighted by `w > 0`, to `block`.
    fn add(&self, q: &[f32], j: usize, w: f32, scratch: &mut [f32], block: &mut [f32]);
}

/// Per-thread buffers of one row.
struct Scratch {
    t: Vec<f32>,
    f: Vec<f32>,
    block: Vec<f32>,
    sums: Vec<f64>,
}

/// Kernel-weighted averages of the columns `pairs` adds, for each of the
/// `m` queries (`queries`, `m × d` row-major) over `n` keys: `m ×
/// pairs.cols()`, NaN rows (counted) without mass.
pub(crate) fn weighted_averages<P: PairSums>(
    op: &'static str,
    kernel: &Kernel,
    queries: &Matrix<'_>,
    n: usize,
    pairs: &P,
) -> Result<RowNormalized> {
    let (m, p) = (queries.rows(), pairs.cols());
    let mut out = alloc_output(op, "averages", m, p)?;
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
                let q = queries.row_range(i, i + 1);
                !averages_row(kernel, q, n, pairs, sc, row)
            },
        )
        .filter(|&e| e)
        .count();
    Ok(RowNormalized::from_parts(m, p, out, empty))
}

/// One query's averages into `out`; `false` (and NaN) when it has no mass.
fn averages_row<P: PairSums>(
    kernel: &Kernel,
    q: &[f32],
    n: usize,
    pairs: &P,
    sc: &mut Scratch,
    out: &mut [f32],
) -> bool {
    let inv_h2 = kernel.inv_h2();
    let mut mx = initial_max(kernel.profile());
    let mut s = 0.0f64;
    sc.sums.fill(0.0);
    for j0 in (0..n).step_by(KEY_BLOCK) {
        let len = KEY_BLOCK.min(n - j0);
        let t = &mut sc.t[..len];
        for (jj, tj) in t.iter_mut().enumerate() {
            *tj = pairs.sq_dist(q, j0 + jj) * inv_h2;
        }
        let Some(factor) = block_weights::<Portable>(kernel.profile(), t, &mut mx) else {
            continue;
        };
        if factor != 1.0 {
            s *= factor;
            sc.sums.iter_mut().for_each(|u| *u *= factor);
        }
        let mut bs = 0.0f32;
        sc.block.fill(0.0);
        for (jj, &w) in t.iter().enumerate() {
            // A weightless key adds nothing (and its columns may not be
            // finite products).
            if w > 0.0 {
                bs += w;
                pairs.add(q, j0 + jj, w, &mut sc.f, &mut sc.block);
            }
        }
        s += f64::from(bs);
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

/// The local moments' pairs: offsets `x − q` and values.
struct Moments<'a> {
    keys: &'a [f32],
    values: Option<&'a [f32]>,
    layout: MomentLayout,
}

impl PairSums for Moments<'_> {
    fn cols(&self) -> usize {
        self.layout.cols()
    }
    fn scratch(&self) -> usize {
        self.layout.one() + 1
    }
    fn sq_dist(&self, q: &[f32], j: usize) -> f32 {
        let d = self.layout.d;
        let mut acc = 0.0f32;
        for (&xk, &qk) in self.keys[j * d..(j + 1) * d].iter().zip(q) {
            let df = xk - qk;
            acc += df * df;
        }
        acc
    }
    fn add(&self, q: &[f32], j: usize, w: f32, f: &mut [f32], block: &mut [f32]) {
        let (d, qy) = (self.layout.d, self.layout.qy);
        for k in 0..d {
            f[k] = self.keys[j * d + k] - q[k];
        }
        if let Some(y) = self.values {
            f[d..d + qy].copy_from_slice(&y[j * qy..(j + 1) * qy]);
        }
        f[d + qy] = 1.0;
        accumulate(&self.layout, w, f, block);
    }
}

/// Local moments of every query: `M × layout.cols()` averages, NaN rows
/// (counted) without mass.
pub(crate) fn local_moments(
    kernel: &Kernel,
    queries: &Matrix<'_>,
    keys: &Matrix<'_>,
    values: Option<&Matrix<'_>>,
    layout: MomentLayout,
) -> Result<RowNormalized> {
    let pairs = Moments {
        keys: keys.as_slice(),
        values: values.map(|v| v.as_slice()),
        layout,
    };
    weighted_averages("local_moments", kernel, queries, keys.rows(), &pairs)
}

/// Adds `w·F[ia]·F[ib]` for every column of `layout` (in its order).
#[inline]
fn accumulate(layout: &MomentLayout, w: f32, f: &[f32], block: &mut [f32]) {
    let (d, qy) = (layout.d, layout.qy);
    for (b, &fc) in block.iter_mut().zip(&f[..d + qy]) {
        *b += w * fc;
    }
    if !layout.second {
        return;
    }
    let mut idx = d + qy;
    for a in 0..d {
        let wa = w * f[a];
        for &fb in &f[a..d] {
            block[idx] += wa * fb;
            idx += 1;
        }
    }
    for a in 0..d {
        let wa = w * f[a];
        for &fc in &f[d..d + qy] {
            block[idx] += wa * fc;
            idx += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accumulation_follows_the_layout() {
        let layout = MomentLayout {
            d: 3,
            qy: 2,
            second: true,
        };
        let f = [1.5f32, -2.0, 0.5, 3.0, -1.0, 1.0];
        let mut block = vec![0.0; layout.cols()];
        accumulate(&layout, 2.0, &f, &mut block);
        for (c, &b) in block.iter().enumerate() {
            let (ia, ib) = layout.factors(c);
            assert_eq!(b, 2.0 * f[ia] * f[ib], "column {c}");
        }
    }
}
