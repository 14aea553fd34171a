//! The masked local mean behind imputation: distances over the
//! coordinates both rows observe (NaN marks a missing one), rescaled as
//! scikit-learn's `nan_euclidean` — `(d / n_shared)·Σ_shared (q_k − x_k)²`,
//! no weight without a shared coordinate — then the local mean of the
//! values, on the driver of `moments.rs`.

use super::moments::{PairSums, weighted_averages};
use super::simd::Isa;
use crate::error::Result;
use crate::kernel::Kernel;
use crate::matrix::Matrix;
use crate::types::RowNormalized;

struct Masked<'a> {
    keys: &'a [f32],
    d: usize,
    values: &'a [f32],
    q: usize,
}

impl PairSums for Masked<'_> {
    fn cols(&self) -> usize {
        self.q
    }
    fn scratch(&self) -> usize {
        0
    }
    fn sq_dists<S: Isa>(&self, q: &[f32], j0: usize, t: &mut [f32]) {
        let d = self.d;
        for (jj, tj) in t.iter_mut().enumerate() {
            let j = j0 + jj;
            let (mut acc, mut shared) = (0.0f32, 0usize);
            for (&xk, &qk) in self.keys[j * d..(j + 1) * d].iter().zip(q) {
                let df = xk - qk;
                if !df.is_nan() {
                    acc += df * df;
                    shared += 1;
                }
            }
            *tj = if shared == 0 {
                f32::INFINITY
            } else {
                acc * (d as f32 / shared as f32)
            };
        }
    }
    fn add<S: Isa>(&self, _q: &[f32], j0: usize, w: &[f32], _f: &mut [f32], block: &mut [f32]) {
        for (jj, &wj) in w.iter().enumerate() {
            if wj > 0.0 {
                let j = j0 + jj;
                for (b, &y) in block
                    .iter_mut()
                    .zip(&self.values[j * self.q..(j + 1) * self.q])
                {
                    *b += wj * y;
                }
            }
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
    let pairs = Masked {
        keys: keys.as_slice(),
        d: keys.cols(),
        values: values.as_slice(),
        q: values.cols(),
    };
    weighted_averages("masked_local_mean", kernel, queries, keys.rows(), &pairs)
}
