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
use crate::kernel::form::add_carrier_ts;
use crate::kernel::{Kernel, ProductBlocks};
use crate::matrix::Matrix;
use crate::types::RowNormalized;

struct Masked<'a> {
    keys: KeysSoa<'a>,
    d: usize,
    /// A product kernel's blocks (formed once, not per key block).
    product: Option<ProductBlocks>,
}

impl PairSums for Masked<'_> {
    fn cols(&self) -> usize {
        self.keys.q
    }
    fn scratch(&self) -> usize {
        0
    }
    #[inline(always)]
    fn ts<S: Isa>(&self, kernel: &Kernel, q: &[f32], j0: usize, t: &mut [f32]) {
        // Per block (the whole row for a radial kernel): `part` gathers
        // Σ (x − q)² over the shared coordinates, `shared` their count.
        let (len, ld) = (t.len(), self.keys.ld);
        let pb = self.product;
        let nb = pb.map_or(1, |pb| pb.len);
        let mut part = [0.0f32; KEY_BLOCK];
        let mut shared = [0.0f32; KEY_BLOCK];
        let (part, shared) = (&mut part[..len], &mut shared[..len]);
        t.fill(0.0);
        for b in 0..nb {
            let (k0, k1) = pb.map_or((0, self.d), |pb| (pb.start[b], pb.end[b]));
            // A product's differences are scaled by 1/h_b before squaring.
            let s = pb.map_or(1.0, |pb| pb.inv_h[b]);
            part.fill(0.0);
            shared.fill(0.0);
            for (k, &qk) in q.iter().enumerate().take(k1).skip(k0) {
                if qk.is_nan() {
                    continue;
                }
                let x = &self.keys.xt[k * ld + j0..k * ld + j0 + len];
                for ((pj, sj), &xj) in part.iter_mut().zip(shared.iter_mut()).zip(x) {
                    let seen = !xj.is_nan();
                    let df = if seen { (xj - qk) * s } else { 0.0 };
                    *pj = fmadd::<S>(df, df, *pj);
                    *sj += f32::from(u8::from(seen));
                }
            }
            // nan_euclidean's rescaling within the block; a block with no
            // shared coordinate leaves the pair without weight.
            let db = (k1 - k0) as f32;
            for (pj, &sj) in part.iter_mut().zip(shared.iter()) {
                *pj = if sj > 0.0 {
                    *pj * (db / sj)
                } else {
                    f32::INFINITY
                };
            }
            match pb {
                None => {
                    let inv_h2 = kernel.inv_h2();
                    for (tj, &pj) in t.iter_mut().zip(part.iter()) {
                        *tj = pj * inv_h2;
                    }
                }
                Some(pb) => add_carrier_ts(pb.profile[b], part, t),
            }
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
    let op = "masked_local_mean";
    let cols = KeyColumns::try_new(op, keys, std::slice::from_ref(values), Pack::None)?;
    let pairs = Masked {
        keys: cols.soa(Some(0)),
        d: keys.cols(),
        product: kernel.product_blocks(),
    };
    weighted_averages(op, kernel, queries, keys.rows(), &pairs)
}
