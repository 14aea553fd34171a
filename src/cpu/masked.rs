//! The masked local mean behind imputation: distances over the
//! coordinates both rows observe (NaN marks a missing one), rescaled as
//! scikit-learn's `nan_euclidean` — `(d / n_shared)·Σ_shared (q_k − x_k)²`,
//! no weight without a shared coordinate — then the local mean of the
//! values, on the driver of `moments.rs`. The keys are the column layout
//! every CPU op streams ([`KeyColumns`]), missing entries kept as NaN, so a
//! block's distances and sums are lane loops over the keys.

use super::keys::{KeyColumns, KeysSoa, Pack};
use super::moments::{PairSums, weighted_averages};
use super::simd::{Isa, KEY_BLOCK, dot, fmadd};
use crate::error::Result;
use crate::kernel::Kernel;
use crate::matrix::Matrix;
use crate::types::RowNormalized;

struct Masked<'a> {
    keys: KeysSoa<'a>,
    d: usize,
}

impl PairSums for Masked<'_> {
    fn cols(&self) -> usize {
        self.keys.q
    }
    fn scratch(&self) -> usize {
        0
    }
    #[inline(always)]
    fn sq_dists<S: Isa>(&self, q: &[f32], j0: usize, t: &mut [f32]) {
        // `t` gathers Σ (x − q)² over the shared coordinates, a stack
        // block their count.
        let (len, ld) = (t.len(), self.keys.ld);
        let mut shared = [0.0f32; KEY_BLOCK];
        let shared = &mut shared[..len];
        t.fill(0.0);
        for (k, &qk) in q.iter().enumerate() {
            if qk.is_nan() {
                continue;
            }
            let x = &self.keys.xt[k * ld + j0..k * ld + j0 + len];
            for ((tj, sj), &xj) in t.iter_mut().zip(shared.iter_mut()).zip(x) {
                let seen = !xj.is_nan();
                let df = if seen { xj - qk } else { 0.0 };
                *tj = fmadd::<S>(df, df, *tj);
                *sj += f32::from(u8::from(seen));
            }
        }
        let d = self.d as f32;
        for (tj, &sj) in t.iter_mut().zip(shared.iter()) {
            *tj = if sj > 0.0 {
                *tj * (d / sj)
            } else {
                f32::INFINITY
            };
        }
    }
    #[inline(always)]
    fn add<S: Isa>(&self, _q: &[f32], j0: usize, w: &[f32], _f: &mut [f32], block: &mut [f32]) {
        let (len, ld) = (w.len(), self.keys.ld);
        for (c, b) in block.iter_mut().enumerate() {
            *b = dot::<S>(w, &self.keys.yt[c * ld + j0..c * ld + j0 + len]);
        }
    }
}

/// Local means of `values` (finite) with masked distances between
/// `queries` and `keys` (NaN: missing): `M × q`, NaN rows (counted) with
/// no weighted key.
pub(crate) fn masked_local_mean(
    kernel: &Kernel,
    queries: &Matrix<'_>,
    keys: &Matrix<'_>,
    values: &Matrix<'_>,
) -> Result<RowNormalized> {
    let cols = KeyColumns::new(keys, std::slice::from_ref(values), Pack::None);
    let pairs = Masked {
        keys: cols.soa(Some(0)),
        d: keys.cols(),
    };
    weighted_averages("masked_local_mean", kernel, queries, keys.rows(), &pairs)
}
