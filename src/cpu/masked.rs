//! The masked local mean behind imputation: distances over the
//! coordinates both rows observe (NaN marks a missing one), rescaled as
//! scikit-learn's `nan_euclidean` — `(d / n_shared)·Σ_shared (q_k − x_k)²`,
//! no weight without a shared coordinate — then the local mean of the
//! values, on the driver of `moments.rs`. The keys are stored
//! column-major, missing entries as 0 beside a 0/1 mask, so a block's
//! distances and sums are lane loops over the keys.

use super::moments::{PairSums, weighted_averages};
use super::simd::{Isa, dot, fmadd};
use crate::error::Result;
use crate::kernel::Kernel;
use crate::matrix::{Matrix, reserve};
use crate::types::RowNormalized;

struct Masked {
    /// `d` columns of `n`: the keys, missing entries 0.
    xt: Vec<f32>,
    /// `d` columns of `n`: 1 where the key observes the coordinate.
    mt: Vec<f32>,
    /// `q` columns of `n`: the values.
    yt: Vec<f32>,
    n: usize,
    d: usize,
    q: usize,
}

impl PairSums for Masked {
    fn cols(&self) -> usize {
        self.q
    }
    fn scratch(&self) -> usize {
        0
    }
    #[inline(always)]
    fn sq_dists<S: Isa>(&self, q: &[f32], j0: usize, t: &mut [f32]) {
        // `t` gathers Σ mask·(x − q)², a stack block the shared counts.
        let len = t.len();
        let mut shared = [0.0f32; super::simd::KEY_BLOCK];
        let shared = &mut shared[..len];
        t.fill(0.0);
        for (k, &qk) in q.iter().enumerate() {
            if qk.is_nan() {
                continue;
            }
            let x = &self.xt[k * self.n + j0..k * self.n + j0 + len];
            let m = &self.mt[k * self.n + j0..k * self.n + j0 + len];
            for (((tj, sj), &xj), &mj) in t.iter_mut().zip(shared.iter_mut()).zip(x).zip(m) {
                let df = (xj - qk) * mj;
                *tj = fmadd::<S>(df, df, *tj);
                *sj += mj;
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
        let len = w.len();
        for (c, b) in block.iter_mut().enumerate() {
            *b = dot::<S>(w, &self.yt[c * self.n + j0..c * self.n + j0 + len]);
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
    const OP: &str = "masked_local_mean";
    let (n, d, q) = (keys.rows(), keys.cols(), values.cols());
    let column_major = |what, cols: usize, f: &dyn Fn(usize, usize) -> f32| -> Result<Vec<f32>> {
        let mut v = reserve::<f32>(OP, what, (n * cols) as u64)?;
        v.resize(n * cols, 0.0);
        for k in 0..cols {
            for j in 0..n {
                v[k * n + j] = f(j, k);
            }
        }
        Ok(v)
    };
    let (x, y) = (keys.as_slice(), values.as_slice());
    let pairs = Masked {
        xt: column_major("keys", d, &|j, k| {
            let v = x[j * d + k];
            if v.is_nan() { 0.0 } else { v }
        })?,
        mt: column_major("mask", d, &|j, k| {
            if x[j * d + k].is_nan() { 0.0 } else { 1.0 }
        })?,
        yt: column_major("values", q, &|j, c| y[j * q + c])?,
        n,
        d,
        q,
    };
    weighted_averages(OP, kernel, queries, n, &pairs)
}
