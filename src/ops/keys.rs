//! The ops over keys prepared on a backend, written once: what a
//! [`KeySet`](crate::KeySet) answers, and the one-shot ops that read the
//! same results from keys prepared for their call (`call.rs`). Each takes
//! queries already checked against the keys (dimension, size).

use ndarray::{Array1, ArrayView1, ArrayView2};

use super::classify::{EmptyFallback, label_rows};
use super::kde::{kernel_ln_normalizer, ln_density_scale};
use super::knn::{check_k, check_room, scale_exponent};
use super::local_fit::{Centres, LocalFit, LocalPca, check_limits, fit_linear, fit_pca};
use crate::backend::{Moments, PreparedKeys, Query};
use crate::cpu::Threads;
use crate::error::{Error, Result};
use crate::kernel::{Kernel, Metric};
use crate::matrix::Matrix;
use crate::types::{MomentLayout, Neighbours, RowNormalized};

/// Keys (`N × d`) prepared on a backend, and what the ops read of them
/// besides the backend's copy.
#[derive(Clone, Copy)]
pub(crate) struct OnKeys<'a> {
    /// The backend's keys and value matrices (a key set's requests go
    /// through its batching).
    pub keys: &'a dyn PreparedKeys,
    /// Number of keys `N`.
    pub n: usize,
    /// Dimension `d`.
    pub d: usize,
    /// The keys' largest coordinate magnitude (kNN's range check, the
    /// local models' limits).
    pub extent: f32,
    /// The engine's CPU threads (the local models' per-query solves).
    pub threads: &'a Threads,
}

/// A value matrix of prepared keys: its index among the prepared sets, its
/// columns and its largest magnitude.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ValueSet {
    /// Index among the prepared value matrices.
    pub set: usize,
    /// Columns `q`.
    pub cols: usize,
    /// Largest magnitude (the local models' limits).
    pub extent: f32,
}

/// Class labels prepared as a one-hot value matrix.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LabelSet<'a> {
    /// Index of the one-hot matrix among the prepared value matrices.
    pub set: usize,
    /// The label of each class (column), increasing.
    pub classes: ArrayView1<'a, i64>,
    /// Each key's label.
    pub labels: ArrayView1<'a, i64>,
}

impl OnKeys<'_> {
    /// `ln p̂(q)` per query with unweighted keys (docs/numerics.md): the
    /// log of the row sums lowered by `ln(N·Π h·C)`.
    pub(crate) fn log_density(&self, kernel: &Kernel, q: &Matrix<'_>) -> Result<Array1<f64>> {
        let ln_c = kernel_ln_normalizer(kernel, self.d)?;
        let norm = ln_density_scale(ln_c, kernel, self.d, self.n as f64);
        let states = self.keys.row_states(&Query::new(kernel, q), None)?;
        Ok(states.log_sum().mapv(|l| l - norm))
    }

    /// Class probabilities (the local mean of the one-hot labels) and the
    /// most probable class per query; with
    /// [`EmptyFallback::NearestNeighbour`] a query with an empty
    /// neighbourhood takes its nearest key's label (`queries`: the rows of
    /// `q`, to select those).
    pub(crate) fn classify(
        &self,
        kernel: &Kernel,
        (q, queries): (&Matrix<'_>, ArrayView2<'_, f32>),
        labels: &LabelSet<'_>,
        fallback: EmptyFallback,
    ) -> Result<(RowNormalized, Array1<i64>)> {
        let proba = self.keys.local_mean(&Query::new(kernel, q), labels.set)?;
        let nearest = (fallback == EmptyFallback::NearestNeighbour).then_some(labels.labels);
        let classes = label_rows(&proba, labels.classes, nearest, queries, |sub| {
            let sub = Matrix::check("classify", "queries", sub)?;
            let metric = kernel.metric();
            self.check_distances("classify", &sub, &metric)?;
            self.keys.knn(&sub, 1, &metric)
        })?;
        Ok((proba, classes))
    }

    /// Local linear regression (degree 1) of `values` at `q`, the moments
    /// centred at the keys' local mean from a first-moment pass, the values
    /// read as stored (docs/numerics.md, "Local moments").
    pub(crate) fn local_linear(
        &self,
        kernel: &Kernel,
        q: &Matrix<'_>,
        values: ValueSet,
    ) -> Result<LocalFit> {
        let big = q.max_abs().max(self.extent).max(values.extent);
        check_limits(self.d, big)?;
        let h = kernel.coordinate_bandwidths(self.d);
        let pass = |m: &Matrix<'_>, layout: MomentLayout| {
            let set = (layout.qy > 0).then_some(values.set);
            self.keys
                .local_moments(&Query::new(kernel, m), Moments { layout, set })
        };
        let shape = (&h[..], self.d, values.cols);
        let centre = vec![0.0; values.cols];
        let centres = (Centres::FirstMoments, &pass as _);
        fit_linear(
            ("local_polynomial", self.threads),
            q,
            shape,
            &centre,
            centres,
        )
    }

    /// Local PCA with `components` directions at `q`.
    pub(crate) fn local_pca(
        &self,
        kernel: &Kernel,
        q: &Matrix<'_>,
        components: usize,
    ) -> Result<LocalPca> {
        check_limits(self.d, q.max_abs().max(self.extent))?;
        let h = kernel.coordinate_bandwidths(self.d);
        let pass = |m: &Matrix<'_>, layout| {
            let pass = Moments { layout, set: None };
            self.keys.local_moments(&Query::new(kernel, m), pass)
        };
        let centres = (Centres::FirstMoments, &pass as _);
        fit_pca(("local_pca", self.threads), q, (&h, components), centres)
    }

    /// Fails unless this backend can return `k` of the `N` neighbours.
    pub(crate) fn check_k(&self, k: usize) -> Result<()> {
        check_k(k, self.n)?;
        self.keys.check_k(k)
    }

    /// The `k` nearest keys of every query under `metric` (`k` checked by
    /// [`check_k`](Self::check_k)).
    pub(crate) fn knn(&self, q: &Matrix<'_>, k: usize, metric: &Metric) -> Result<Neighbours> {
        metric.check_dim("knn", self.d)?;
        self.check_distances("knn", q, metric)?;
        check_room("knn", q.rows(), k)?;
        self.keys.knn(q, k, metric)
    }

    /// Fails when squared distances between `queries` and the keys could
    /// overflow `f32`, or when every coordinate is so small that they
    /// would fall below its normal range and lose their order: wherever
    /// [`scale_exponent`] would scale.
    /// [`Engine::knn`](crate::Engine::knn) rescales such data; prepared
    /// keys cannot be rescaled per request.
    fn check_distances(
        &self,
        op: &'static str,
        queries: &Matrix<'_>,
        metric: &Metric,
    ) -> Result<()> {
        let qx = queries.max_abs();
        let r = f64::from(qx) + f64::from(self.extent);
        let e = scale_exponent(metric, self.d, r);
        if e == 0 {
            return Ok(());
        }
        if e < 0 {
            return Err(Error::InvalidParameter {
                name: "queries",
                reason: format!(
                    "{op}: coordinates up to {qx:e} (keys up to {:e}) make distances underflow f32 and lose their order; scale the data by a power of two, or use Engine::knn, which rescales",
                    self.extent
                ),
            });
        }
        Err(Error::InvalidParameter {
            name: "queries",
            reason: format!(
                "{op}: coordinates up to {qx:e} (keys up to {:e}) make distances overflow f32; rescale the data, or use Engine::knn, which rescales",
                self.extent
            ),
        })
    }
}
