//! k nearest neighbours, and the kNN local models on top (paper §4.4).

use ndarray::{Array1, Array2, ArrayView1, ArrayView2};

use crate::backend::Backend;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::kernel::{Kernel, Metric};
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

impl KnnWeights {
    /// The metric the neighbours are found by: the kernel's, Euclidean for
    /// uniform weights.
    fn metric(&self) -> Metric {
        match self {
            KnnWeights::Uniform => Metric::Euclidean,
            KnnWeights::Kernel(k) => k.metric(),
        }
    }
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
        self.knn_metric(queries, keys, k, Metric::Euclidean)
    }

    /// The `k` nearest keys of every query under `metric`, with their
    /// distances under it; ties go to the lower key index, as
    /// [`knn`](Self::knn)'s. Euclidean is `knn` itself; the other metrics
    /// are measured by differences on both backends (docs/numerics.md,
    /// "Metrics").
    ///
    /// ```
    /// use locus::{Engine, Metric};
    /// use ndarray::array;
    /// let keys = array![[0.0f32, 0.0], [1.0, 1.0], [0.0, 1.5]];
    /// let nb = Engine::cpu().knn_metric(array![[0.0f32, 0.0]].view(), keys.view(), 2, Metric::Manhattan)?;
    /// assert_eq!(nb.indices.row(0).to_vec(), vec![0, 2]);
    /// assert_eq!(nb.distances[[0, 1]], 1.5);
    /// # Ok::<(), locus::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`knn`](Self::knn), plus [`Error::MetricDimension`] for
    /// haversine on data of other than 2 columns.
    pub fn knn_metric(
        &self,
        queries: ArrayView2<'_, f32>,
        keys: ArrayView2<'_, f32>,
        k: usize,
        metric: Metric,
    ) -> Result<Neighbours> {
        const OP: &str = "knn";
        let Inputs { q, x, .. } = Inputs::check(OP, None, queries, keys, None)?;
        metric.check_dim(OP, x.cols())?;
        check_k(k, x.rows())?;
        check_room(OP, q.rows(), k)?;
        knn_scaled(self.backend_impl(), &q, &x, (k, &metric))
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
        let nb = self.knn_metric(queries, keys, k, weights.metric())?;
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
        let nb = self.knn_metric(queries, keys, k, weights.metric())?;
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

/// The largest rank under `metric` (`kernel/metric.rs`) between rows in
/// `d` dimensions whose coordinates differ by at most `r`: `d·r²`, `d·r`,
/// `r`, `d·r` (Minkowski's rank is its distance), 1 (haversine's `a`).
pub(crate) fn rank_bound(metric: &Metric, d: usize, r: f64) -> f64 {
    let d = d as f64;
    match *metric {
        Metric::Euclidean => d * r * r,
        Metric::Manhattan => d * r,
        Metric::Chebyshev => r,
        // The distance itself (kernel/metric.rs), at most Manhattan's.
        Metric::Minkowski { .. } => d * r,
        Metric::Haversine => 1.0,
    }
}

/// Coordinates whose largest difference is below this are scaled up
/// first (see [`knn_scaled`]): their squared distances would reach the
/// subnormal `f32` range, where they lose their precision and then their
/// order.
pub(crate) const TINY_RANGE: f64 = 1.0 / (1u64 << 30) as f64;

/// The `e` by which [`knn_scaled`] divides coordinates (`2^e`) in `d`
/// dimensions whose differences reach at most `r` under `metric`: 0 when
/// they need no scaling; `e > 0` when a rank could overflow `f32` (the
/// smallest such, with the bound / 4^e ≤ [`SQ_DIST_LIMIT`] for squared
/// distances; finite f32 inputs keep e below about 70 plus log₄ d, so
/// 2^−e is a normal f32; the other metrics, homogeneous of degree 1,
/// the smallest e whose bound fits); `e < 0` when `r` is below
/// [`TINY_RANGE`], bringing it between 1 and 2 (not haversine's angles,
/// which do not scale).
pub(crate) fn scale_exponent(metric: &Metric, d: usize, r: f64) -> i32 {
    let bound = rank_bound(metric, d, r);
    match metric {
        _ if bound > SQ_DIST_LIMIT => match metric {
            Metric::Euclidean => ((bound / SQ_DIST_LIMIT).log2() / 2.0).ceil() as i32,
            m => (1..=160)
                .find(|&e| rank_bound(m, d, r * 2f64.powi(-e)) <= SQ_DIST_LIMIT)
                .unwrap_or(160),
        },
        Metric::Haversine => 0,
        _ if r > 0.0 && r < TINY_RANGE => r.log2().floor() as i32,
        _ => 0,
    }
}

/// The `k` nearest keys of every query ([`call::knn`]), exact for
/// coordinates of any finite size: when squared distances could overflow
/// `f32`, queries and keys are first scaled down by a power of two, and
/// when their largest difference is tiny (below [`TINY_RANGE`], down to
/// subnormal coordinates) scaled up, so that it lies between 1 and 2; the
/// coordinates then keep their values exactly, and the distances are
/// scaled back (`+∞` when beyond the `f32` range, subnormal when below
/// its normal range). One limit stays: differences whose squares fall
/// below the normal `f32` range (about `10⁻¹⁹` apart, relative to a
/// largest difference of 1) beside larger ones that keep the data from
/// being scaled up (`[0, 1e-25, 2e-25, 1]`), or small ones beside
/// coordinates near `10³⁸` that scale it down, tie at 0.
pub(crate) fn knn_scaled(
    backend: &dyn Backend,
    queries: &Matrix<'_>,
    keys: &Matrix<'_>,
    (k, metric): (usize, &Metric),
) -> Result<Neighbours> {
    let r = f64::from(queries.max_abs()) + f64::from(keys.max_abs());
    let e = scale_exponent(metric, queries.cols(), r);
    if e == 0 {
        return call::knn(backend, queries, keys, k, metric);
    }
    // In f64: 2^−e may lie beyond the f32 range when scaling up.
    let by = 2.0f64.powi(-e);
    let scale = |m: &Matrix<'_>, what| -> Result<Array2<f32>> {
        let mut a = m.to_array("knn", what)?;
        a.mapv_inplace(|v| (f64::from(v) * by) as f32);
        Ok(a)
    };
    let (qs, xs) = (
        scale(queries, "scaled queries")?,
        scale(keys, "scaled keys")?,
    );
    let q = Matrix::check("knn", "queries", qs.view())?;
    let x = Matrix::check("knn", "keys", xs.view())?;
    let mut nb = call::knn(backend, &q, &x, k, metric)?;
    let up = 2.0f64.powi(e);
    nb.distances.mapv_inplace(|v| (f64::from(v) * up) as f32);
    Ok(nb)
}
