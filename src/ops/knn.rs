//! k nearest neighbours, and the kNN local models on top (paper §4.4).

use ndarray::{Array1, Array2, ArrayView1, ArrayView2};

use crate::backend::Backend;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::matrix::{Matrix, ensure_room};
use crate::types::{Neighbours, RowNormalized};

use super::{Inputs, call};

/// How the `k` neighbours are weighted in [`Engine::knn_regress`] and
/// [`Engine::knn_classify`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KnnWeights {
    /// Every neighbour counts the same (the plain kNN average / vote).
    Uniform,
    /// Neighbour `j` weighs `K(q, x_j)` (log domain for exponential
    /// profiles); a query whose `k` neighbours all have weight 0 is empty.
    Kernel(Kernel),
}

impl Engine {
    /// The `k` nearest keys of every query, by Euclidean distance.
    ///
    /// # Errors
    /// Empty or non-finite inputs, dimension mismatch, `k = 0` or `k > N`;
    /// on the GPU, `k` above 128 (one pass keeps at most that many).
    pub fn knn(
        &self,
        queries: ArrayView2<'_, f32>,
        keys: ArrayView2<'_, f32>,
        k: usize,
    ) -> Result<Neighbours> {
        const OP: &str = "knn";
        let Inputs { q, x, .. } = Inputs::check(OP, None, queries, keys, None)?;
        check_k(k, x.rows())?;
        check_room(OP, q.rows(), k)?;
        knn_scaled(self.backend_impl(), &q, &x, k)
    }

    /// kNN regression: the (weighted) mean of the `k` nearest keys' values.
    ///
    /// # Errors
    /// As [`knn`](Self::knn), plus `values` rows ≠ keys rows.
    pub fn knn_regress(
        &self,
        queries: ArrayView2<'_, f32>,
        keys: ArrayView2<'_, f32>,
        values: ArrayView2<'_, f32>,
        k: usize,
        weights: KnnWeights,
    ) -> Result<RowNormalized> {
        const OP: &str = "knn_regress";
        let y = Matrix::check(OP, "values", values)?;
        if y.rows() != keys.nrows() {
            return Err(Error::RowMismatch {
                op: OP,
                keys: keys.nrows(),
                values: y.rows(),
            });
        }
        if let KnnWeights::Kernel(kernel) = &weights {
            kernel.check_dim(OP, keys.ncols())?;
        }
        let nb = self.knn(queries, keys, k)?;
        let (m, q) = (nb.indices.nrows(), y.cols());
        let mut out = Array2::<f32>::zeros((m, q));
        let mut empty = 0;
        for i in 0..m {
            match neighbour_weights(&nb, i, weights, (&queries, &keys)) {
                None => {
                    out.row_mut(i).fill(f32::NAN);
                    empty += 1;
                }
                Some(w) => {
                    let total: f64 = w.iter().sum();
                    for c in 0..q {
                        let s: f64 = w
                            .iter()
                            .zip(nb.indices.row(i))
                            .map(|(&wj, &j)| wj * f64::from(y.as_slice()[j as usize * q + c]))
                            .sum();
                        out[[i, c]] = (s / total) as f32;
                    }
                }
            }
        }
        Ok(RowNormalized {
            values: out,
            empty_rows: empty,
        })
    }

    /// kNN classification: the class with the largest (weighted) vote among
    /// the `k` nearest keys; ties go to the smaller class. Empty queries
    /// (all weights 0) get −1 and are counted in the second value.
    ///
    /// # Errors
    /// As [`knn`](Self::knn), plus labels that are negative or not one per key.
    pub fn knn_classify(
        &self,
        queries: ArrayView2<'_, f32>,
        keys: ArrayView2<'_, f32>,
        labels: ArrayView1<'_, i64>,
        k: usize,
        weights: KnnWeights,
    ) -> Result<(Array1<i64>, usize)> {
        let classes = super::classify::Classes::of("knn_classify", labels, keys.nrows(), None)?;
        if let KnnWeights::Kernel(kernel) = &weights {
            kernel.check_dim("knn_classify", keys.ncols())?;
        }
        let nb = self.knn(queries, keys, k)?;
        let m = nb.indices.nrows();
        let mut out = Array1::<i64>::zeros(m);
        let mut empty = 0;
        let mut votes = vec![0.0f64; classes.len()];
        for i in 0..m {
            let Some(w) = neighbour_weights(&nb, i, weights, (&queries, &keys)) else {
                out[i] = -1;
                empty += 1;
                continue;
            };
            votes.fill(0.0);
            for (&wj, &j) in w.iter().zip(nb.indices.row(i)) {
                votes[classes.index[j as usize]] += wj;
            }
            out[i] = classes.labels[super::classify::argmax(&votes)];
        }
        Ok((out, empty))
    }
}

/// Weights of the `k` neighbours of query `i`, relative to the largest
/// (None when they are all zero); a product kernel's from the coordinates
/// of the queries and keys `(q, x)`.
fn neighbour_weights(
    nb: &Neighbours,
    i: usize,
    weights: KnnWeights,
    (q, x): (&ArrayView2<'_, f32>, &ArrayView2<'_, f32>),
) -> Option<Vec<f64>> {
    let k = nb.indices.ncols();
    match weights {
        KnnWeights::Uniform => Some(vec![1.0; k]),
        KnnWeights::Kernel(kernel) if kernel.is_product() => {
            let qi: Vec<f32> = q.row(i).to_vec();
            let lw: Vec<f64> = nb
                .indices
                .row(i)
                .iter()
                .map(|&j| kernel.log_weight_by(&qi, |k| x[[j as usize, k]]))
                .collect();
            let mx = lw.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            (mx > f64::NEG_INFINITY).then(|| lw.iter().map(|l| (l - mx).exp()).collect())
        }
        KnnWeights::Kernel(kernel) => {
            let h = f64::from(kernel.bandwidth());
            let p = kernel.profile();
            let lw: Vec<f64> = nb
                .distances
                .row(i)
                .iter()
                .map(|&r| {
                    let t = (f64::from(r) / h).powi(2);
                    p.log_eval_sq(t).unwrap_or_else(|| p.eval_sq(t).ln())
                })
                .collect();
            let mx = lw.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            (mx > f64::NEG_INFINITY).then(|| lw.iter().map(|l| (l - mx).exp()).collect())
        }
    }
}

/// Fails unless `1 ≤ k ≤ n` (`n` keys): the one `k` check of every kNN entry
/// point (one-shot and key set).
pub(crate) fn check_k(k: usize, n: usize) -> Result<()> {
    if k == 0 || k > n {
        return Err(Error::InvalidParameter {
            name: "k",
            reason: format!("k must be in 1..={n} (the number of keys), got {k}"),
        });
    }
    Ok(())
}

/// Fails with [`Error::TooLarge`] unless the `M × k` neighbour lists (and
/// their working copies, about 20 bytes an entry) can be allocated now,
/// rather than letting the allocation abort the process.
pub(crate) fn check_room(op: &'static str, m: usize, k: usize) -> Result<()> {
    let bytes = (m as u64).saturating_mul(k as u64).saturating_mul(20);
    ensure_room(op, "neighbour lists", bytes)
}

/// Squared distances up to this size are computed without overflow; larger
/// coordinates are scaled down first (see [`knn_scaled`]).
pub(crate) const SQ_DIST_LIMIT: f64 = 1e37;

/// The largest squared distance between rows of `a` and `b` can reach:
/// `d·(max|a| + max|b|)²`.
fn sq_dist_bound(a: &Matrix<'_>, b: &Matrix<'_>) -> f64 {
    let r = f64::from(a.max_abs()) + f64::from(b.max_abs());
    a.cols() as f64 * r * r
}

/// The `k` nearest keys of every query ([`call::knn`]), exact for coordinates of any finite size: when squared
/// distances could overflow `f32`, queries and keys are first scaled by a
/// power of two (exact, so the ranking and the ties do not change) and the
/// distances scaled back (`+∞` when beyond the `f32` range).
pub(crate) fn knn_scaled(
    backend: &dyn Backend,
    queries: &Matrix<'_>,
    keys: &Matrix<'_>,
    k: usize,
) -> Result<Neighbours> {
    let bound = sq_dist_bound(queries, keys);
    if bound <= SQ_DIST_LIMIT {
        return call::knn(backend, queries, keys, k);
    }
    // 2^e with bound / 4^e ≤ SQ_DIST_LIMIT; finite f32 inputs keep e below
    // about 70 (plus log₄ d), so 2^−e is a normal f32.
    let e = ((bound / SQ_DIST_LIMIT).log2() / 2.0).ceil() as i32;
    let down = 2.0f32.powi(-e);
    let scale = |m: &Matrix<'_>, what| -> Result<Array2<f32>> {
        let mut a = m.to_array("knn", what)?;
        a.mapv_inplace(|v| v * down);
        Ok(a)
    };
    let (qs, xs) = (
        scale(queries, "scaled queries")?,
        scale(keys, "scaled keys")?,
    );
    let q = Matrix::check("knn", "queries", qs.view())?;
    let x = Matrix::check("knn", "keys", xs.view())?;
    let mut nb = call::knn(backend, &q, &x, k)?;
    let up = 2.0f64.powi(e);
    nb.distances.mapv_inplace(|v| (f64::from(v) * up) as f32);
    Ok(nb)
}
