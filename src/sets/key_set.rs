//! [`KeySet`]: keys, values and labels prepared once on an engine's backend
//! and queried many times, from many threads, with any kernel.
//!
//! A service that answers "local mean / class / density at these points"
//! keeps one reference set and receives many small requests. A
//! [`KeySet`] keeps the keys where the backend wants them (GPU: tiled
//! device buffers; CPU: the transposed layout its kernels stream), so a
//! request pays only for its own rows, and coalesces small concurrent
//! requests into one call ([`Batching`]). Every op runs the code of the
//! one-shot ops ([`OnKeys`], over the backend's prepared keys), its
//! requests routed through the batching ([`Batched`]).

use std::sync::Arc;

use ndarray::{Array1, Array2, ArrayView1, ArrayView2};

use super::batch::{BatchStats, Batcher, Batching};
use crate::backend::{MatrixMode, Moments, PreparedKeys, Query};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::kernel::{Kernel, MAX_BLOCKS, Metric, Profile};
use crate::matrix::Matrix;
use crate::memory::MemoryUsage;
use crate::ops::check_degree;
use crate::ops::{Classes, EmptyFallback, LabelSet, LocalFit, LocalPca, OnKeys, ValueSet};
use crate::types::{Neighbours, RowNormalized, RowStates};

mod variable;

/// Options of a [`KeySet`].
///
/// ```
/// use locus::{Batching, KeySetOptions};
/// let o = KeySetOptions { batching: Batching::off(), ..KeySetOptions::default() };
/// assert_eq!(o.max_request_rows, 1 << 20);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeySetOptions {
    /// How concurrent small requests are coalesced.
    pub batching: Batching,
    /// Most query rows in one request (default 2²⁰); a larger request is
    /// refused with [`Error::TooLarge`] before any work.
    pub max_request_rows: usize,
    /// What [`KeySet::classify`] answers for a query with an empty
    /// neighbourhood (default: label −1).
    pub empty_fallback: EmptyFallback,
}

impl Default for KeySetOptions {
    fn default() -> Self {
        KeySetOptions {
            batching: Batching::default(),
            max_request_rows: 1 << 20,
            empty_fallback: EmptyFallback::Unassigned,
        }
    }
}

impl KeySetOptions {
    fn validate(&self) -> Result<()> {
        let bad = |name, reason: &str| {
            Err(Error::InvalidParameter {
                name,
                reason: reason.to_string(),
            })
        };
        if self.max_request_rows == 0 {
            return bad("max_request_rows", "must be at least 1");
        }
        if self.batching.max_batch_rows == 0 {
            return bad("batching.max_batch_rows", "must be at least 1");
        }
        if self.batching.direct_rows == 0 {
            return bad("batching.direct_rows", "must be at least 1");
        }
        if self.batching.concurrent_batches == 0 {
            return bad("batching.concurrent_batches", "must be at least 1");
        }
        if self.batching.max_wait > std::time::Duration::from_secs(1) {
            return bad("batching.max_wait", "must be at most one second");
        }
        Ok(())
    }
}

/// Class labels and probabilities from [`KeySet::classify`].
#[derive(Debug, Clone, PartialEq)]
pub struct Classification {
    /// The most probable class per query (ties to the smaller class); −1
    /// for an empty neighbourhood unless
    /// [`KeySetOptions::empty_fallback`] says otherwise.
    pub labels: Array1<i64>,
    /// Class probabilities (`M × C`): the local mean of one-hot labels;
    /// NaN rows for empty neighbourhoods.
    pub proba: Array2<f32>,
    /// Queries whose neighbourhood was empty.
    pub empty_rows: usize,
}

/// Builds a [`KeySet`]; from [`Engine::prepare`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct KeySetBuilder<'a> {
    engine: Engine,
    keys: ArrayView2<'a, f32>,
    values: Option<ArrayView2<'a, f32>>,
    labels: Option<ArrayView1<'a, i64>>,
    classes: Option<usize>,
    bandwidths: Option<ArrayView1<'a, f32>>,
    options: KeySetOptions,
}

impl<'a> KeySetBuilder<'a> {
    /// Per-key (sample-point) bandwidths `h_j`, one per key, for
    /// [`KeySet::local_mean_variable`] and
    /// [`KeySet::log_density_variable`]: the keys go to the backend a
    /// second time, with their scales, in the layout of the
    /// variable-bandwidth pass ([`VariableBandwidth::PerKey`](crate::VariableBandwidth::PerKey);
    /// [`Engine::knn_bandwidths`] sets them by the k-NN rule).
    pub fn bandwidths(mut self, bandwidths: ArrayView1<'a, f32>) -> Self {
        self.bandwidths = Some(bandwidths);
        self
    }

    /// Values (`N × q`) for [`KeySet::local_mean`] and [`KeySet::row_states`].
    pub fn values(mut self, values: ArrayView2<'a, f32>) -> Self {
        self.values = Some(values);
        self
    }

    /// Class labels, non-negative integers (one per key), for
    /// [`KeySet::classify`] and [`KeySet::predict_proba`]. The classes are
    /// the distinct labels present, in increasing order
    /// ([`KeySet::class_labels`]), unless [`classes`](Self::classes) is set.
    pub fn labels(mut self, labels: ArrayView1<'a, i64>) -> Self {
        self.labels = Some(labels);
        self
    }

    /// The classes are all of `0..C`, present or not (every label must lie
    /// below `C`).
    pub fn classes(mut self, classes: usize) -> Self {
        self.classes = Some(classes);
        self
    }

    /// Batching, request-size and classification options.
    pub fn options(mut self, options: KeySetOptions) -> Self {
        self.options = options;
        self
    }

    /// Checks everything and makes the keys resident on the backend.
    ///
    /// # Errors
    /// Empty or non-finite keys or values, values or labels not one row
    /// per key, labels out of range, invalid options; on a GPU, a
    /// dimension too large for the shaders; [`Error::MemoryLimit`] when the
    /// key set does not fit under the engine's memory limit.
    pub fn build(self) -> Result<KeySet> {
        const OP: &str = "prepare";
        self.options.validate()?;
        let keys = Matrix::check(OP, "keys", self.keys)?;
        let (n, d) = (keys.rows(), keys.cols());
        let mut sets = Vec::new();
        let mut values_set = None;
        let mut values_extent = 0.0;
        if let Some(v) = self.values {
            let v = Matrix::check(OP, "values", v)?;
            if v.rows() != n {
                return Err(Error::RowMismatch {
                    op: OP,
                    keys: n,
                    values: v.rows(),
                });
            }
            values_set = Some((sets.len(), v.cols()));
            values_extent = v.max_abs();
            sets.push(v);
        }
        let mut labels_set = None;
        let mut labels = None;
        let mut class_labels = None;
        let indicator;
        if let Some(l) = self.labels {
            let c = Classes::of(OP, l, n, self.classes)?;
            indicator = c.one_hot(OP)?;
            labels_set = Some((sets.len(), c.len()));
            sets.push(Matrix::check(OP, "labels", indicator.view())?);
            labels = Some(l.to_owned());
            class_labels = Some(c.labels);
        }
        let extent = keys.max_abs();
        let variable = match self.bandwidths {
            Some(h) => Some(variable::Variable::prepare(
                &self.engine,
                &keys,
                values_set.map(|(s, _)| &sets[s]),
                h,
            )?),
            None => None,
        };
        let prepared = self.engine.backend_impl().prepare(&keys, &sets)?;
        let b = self.options.batching;
        Ok(KeySet {
            inner: Arc::new(Inner {
                engine: self.engine,
                keys: Batched {
                    prepared,
                    means: Batcher::new(b),
                    states: Batcher::new(b),
                    knn: Batcher::new(b),
                },
                n,
                d,
                values_set,
                labels_set,
                labels,
                class_labels,
                extent,
                values_extent,
                variable,
                options: self.options,
            }),
        })
    }
}

/// A kernel, as a key that groups requests: same profile, same bandwidth
/// bits, same blocks (dims, profile, bandwidth bits) for a product, same
/// metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct KernelKey(
    Profile,
    u32,
    [(usize, Profile, u32); MAX_BLOCKS],
    (u32, u64),
);

impl From<&Kernel> for KernelKey {
    fn from(k: &Kernel) -> Self {
        let mut blocks = [(0, Profile::Gaussian, 0); MAX_BLOCKS];
        for (slot, b) in blocks.iter_mut().zip(k.blocks().unwrap_or(&[])) {
            *slot = (b.dims, b.profile, b.bandwidth.to_bits());
        }
        KernelKey(
            k.profile(),
            k.bandwidth().to_bits(),
            blocks,
            k.metric().key(),
        )
    }
}

/// A key set's prepared keys with its requests coalesced: local means,
/// row states and kNN go through a [`Batcher`] each.
#[derive(Debug)]
struct Batched {
    prepared: Arc<dyn PreparedKeys>,
    means: Batcher<(KernelKey, usize), RowNormalized>,
    states: Batcher<(KernelKey, Option<usize>), RowStates>,
    knn: Batcher<(usize, (u32, u64)), Neighbours>,
}

impl PreparedKeys for Batched {
    fn local_mean(&self, q: &Query<'_>, set: usize) -> Result<RowNormalized> {
        let p = &self.prepared;
        let run = |m: &Matrix<'_>| p.local_mean(&q.with_rows(m), set);
        self.means.submit((q.kernel.into(), set), q.rows, &run)
    }

    fn row_states(&self, q: &Query<'_>, set: Option<usize>) -> Result<RowStates> {
        let p = &self.prepared;
        if q.exclude_self {
            // Rows are tied to keys: a batch of several requests would not be.
            return p.row_states(q, set);
        }
        let run = |m: &Matrix<'_>| p.row_states(&q.with_rows(m), set);
        self.states.submit((q.kernel.into(), set), q.rows, &run)
    }

    fn local_moments(&self, q: &Query<'_>, pass: Moments) -> Result<RowNormalized> {
        self.prepared.local_moments(q, pass)
    }

    fn knn(&self, queries: &Matrix<'_>, k: usize, metric: &Metric) -> Result<Neighbours> {
        let p = &self.prepared;
        let run = |m: &Matrix<'_>| p.knn(m, k, metric);
        self.knn.submit((k, metric.key()), queries, &run)
    }

    fn kernel_matrix(&self, q: &Query<'_>, mode: MatrixMode) -> Result<RowNormalized> {
        self.prepared.kernel_matrix(q, mode)
    }

    fn check_k(&self, k: usize) -> Result<()> {
        self.prepared.check_k(k)
    }

    fn bytes(&self) -> u64 {
        self.prepared.bytes()
    }
}

#[derive(Debug)]
struct Inner {
    engine: Engine,
    keys: Batched,
    n: usize,
    d: usize,
    /// Index among the resident value matrices, and columns.
    values_set: Option<(usize, usize)>,
    labels_set: Option<(usize, usize)>,
    labels: Option<Array1<i64>>,
    /// The label of each class (column of the one-hot matrix).
    class_labels: Option<Array1<i64>>,
    /// The keys' largest coordinate magnitude (for the kNN range check).
    extent: f32,
    /// The values' largest magnitude (for the local models' limits).
    values_extent: f32,
    /// The keys with their per-key bandwidths, if given.
    variable: Option<variable::Variable>,
    options: KeySetOptions,
}

/// Keys (`N × d`), and optionally values (`N × q`) and class labels, kept
/// on an engine's backend for many queries with any kernel: local means,
/// row states, densities, class probabilities and labels, nearest
/// neighbours. Results equal the [`Engine`] ops' on the same data.
///
/// On a GPU the keys, values and one-hot labels are uploaded once into
/// device buffers the key set owns (tiled like the ops, so `N` may exceed
/// one binding); on the CPU they are kept transposed in the layout the
/// kernels stream. Either way they count against the engine's memory limit
/// and are freed when the last clone is dropped.
///
/// Local means and row states (and the densities and class probabilities
/// computed from them) under a kernel of bounded reach — a compact
/// profile, a product kernel with a compact block, or a radial gaussian or
/// laplacian truncated where far keys weigh under 10⁻⁹ of a row — in up to 31
/// Euclidean dimensions over at least 4096 keys go through a cell index:
/// the keys sorted by grid cell (up to 8 dimensions) or by leaf of a k-d
/// split (9 to 31) on the first such request, kept for that
/// bandwidth (replaced when another comes), so a query visits only the
/// keys within reach (on the CPU by groups of queries; on a GPU each
/// workgroup over its own key ranges of one sorted key tile). Its memory
/// counts against the limit too
/// ([`resident_bytes`](Self::resident_bytes)); when it would take more
/// than half of the memory free, the request runs over every key (docs/scaling.md, "Key sets that index
/// space").
///
/// A key set is `Send + Sync` and cheap to clone: share it between
/// threads. Small requests that arrive together are coalesced into one
/// call ([`Batching`]); large ones run at once on the caller's thread.
///
/// ```
/// use locus::{Engine, Kernel};
/// use ndarray::array;
/// let engine = Engine::cpu();
/// let keys = array![[0.0f32], [1.0], [10.0]];
/// let values = array![[1.0f32], [3.0], [100.0]];
/// let set = engine.prepare(keys.view()).values(values.view()).build()?;
/// let k = Kernel::gaussian(0.5)?;
/// let m = set.local_mean(&k, array![[0.0f32]].view())?;
/// assert!((m.values[[0, 0]] - 1.24).abs() < 0.01);
/// # Ok::<(), locus::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct KeySet {
    inner: Arc<Inner>,
}

impl Engine {
    /// Starts preparing a [`KeySet`] on this engine's backend from `keys`
    /// (`N × d`); add values and labels on the builder.
    pub fn prepare<'a>(&self, keys: ArrayView2<'a, f32>) -> KeySetBuilder<'a> {
        KeySetBuilder {
            engine: self.clone(),
            keys,
            values: None,
            labels: None,
            classes: None,
            bandwidths: None,
            options: KeySetOptions::default(),
        }
    }

    /// Memory the engine holds, against its limit
    /// ([`EngineOptions::memory_limit`](crate::EngineOptions::memory_limit)).
    pub fn memory_usage(&self) -> MemoryUsage {
        self.backend_impl().memory()
    }
}

impl KeySet {
    /// Number of keys `N`.
    pub fn rows(&self) -> usize {
        self.inner.n
    }

    /// Dimension `d` of keys and queries.
    pub fn dim(&self) -> usize {
        self.inner.d
    }

    /// Value columns `q`, if values were given.
    pub fn value_cols(&self) -> Option<usize> {
        self.inner.values_set.map(|s| s.1)
    }

    /// Number of classes `C`, if labels were given.
    pub fn classes(&self) -> Option<usize> {
        self.inner.labels_set.map(|s| s.1)
    }

    /// The label of each class, increasing, if labels were given: column
    /// `j` of [`predict_proba`](Self::predict_proba) is the probability of
    /// label `class_labels()[j]`.
    pub fn class_labels(&self) -> Option<ArrayView1<'_, i64>> {
        self.inner.class_labels.as_ref().map(|c| c.view())
    }

    /// Bytes held by the backend for the keys, values and labels (with the
    /// cell index of the last bounded kernel, if built; with
    /// the keys of variable-bandwidth passes, if bandwidths were given).
    pub fn resident_bytes(&self) -> u64 {
        let v = self
            .inner
            .variable
            .as_ref()
            .map_or(0, variable::Variable::bytes);
        self.inner.keys.bytes().saturating_add(v)
    }

    /// The engine the key set lives on.
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// The options it was built with.
    pub fn options(&self) -> &KeySetOptions {
        &self.inner.options
    }

    /// How requests were served so far: directly, in batches, retried.
    pub fn stats(&self) -> BatchStats {
        let k = &self.inner.keys;
        let mut s = k.means.stats();
        s.add(&k.states.stats());
        s.add(&k.knn.stats());
        s
    }

    /// [`queries`](Self::queries) for an op with `kernel`, whose blocks (a
    /// product kernel's) must cover the keys' dimension.
    fn kernel_queries<'q>(
        &self,
        op: &'static str,
        kernel: &Kernel,
        queries: ArrayView2<'q, f32>,
    ) -> Result<Matrix<'q>> {
        kernel.check_dim(op, self.inner.d)?;
        self.queries(op, queries)
    }

    /// Checks a request's queries: non-empty, finite, `d` columns, not
    /// more rows than the options allow.
    fn queries<'q>(&self, op: &'static str, queries: ArrayView2<'q, f32>) -> Result<Matrix<'q>> {
        let q = Matrix::check(op, "queries", queries)?;
        if q.cols() != self.inner.d {
            return Err(Error::DimensionMismatch {
                op,
                queries: q.cols(),
                keys: self.inner.d,
            });
        }
        if q.rows() > self.inner.options.max_request_rows {
            return Err(Error::TooLarge {
                op,
                what: "request (more query rows than KeySetOptions::max_request_rows)",
                bytes: (q.rows() as u64).saturating_mul(q.cols() as u64 * 4),
            });
        }
        Ok(q)
    }

    fn set(&self, set: Option<(usize, usize)>, what: &'static str, builder: &str) -> Result<usize> {
        set.map(|s| s.0).ok_or_else(|| Error::InvalidParameter {
            name: what,
            reason: format!("this key set was prepared without {what} (KeySetBuilder::{builder})"),
        })
    }

    /// The ops' view of the prepared keys, requests batched.
    fn on_keys(&self) -> OnKeys<'_> {
        let i = &*self.inner;
        OnKeys {
            keys: &i.keys,
            n: i.n,
            d: i.d,
            extent: i.extent,
            threads: i.engine.threads_impl(),
        }
    }

    /// Local means of the values at `queries` (`M × d`), as
    /// [`Engine::local_mean`] with this key set's keys and values.
    ///
    /// # Errors
    /// No values in this key set; empty or non-finite queries, wrong
    /// dimension, too many rows; backend failures
    /// ([`Error::MemoryLimit`] among them: the key set keeps working).
    pub fn local_mean(
        &self,
        kernel: &Kernel,
        queries: ArrayView2<'_, f32>,
    ) -> Result<RowNormalized> {
        let set = self.set(self.inner.values_set, "values", "values")?;
        let q = self.kernel_queries("local_mean", kernel, queries)?;
        self.inner.keys.local_mean(&Query::new(kernel, &q), set)
    }

    /// Row states `(m, s, u)` of `queries` with the values (or, without
    /// values, row sums only), as [`Engine::row_states`]: they merge with
    /// the states of other key sets ([`RowStates::merge`]).
    ///
    /// # Errors
    /// As [`local_mean`](Self::local_mean).
    pub fn row_states(&self, kernel: &Kernel, queries: ArrayView2<'_, f32>) -> Result<RowStates> {
        let q = self.kernel_queries("row_states", kernel, queries)?;
        let set = self.inner.values_set.map(|s| s.0);
        self.inner.keys.row_states(&Query::new(kernel, &q), set)
    }

    /// `ln p̂(q)` per query, as [`Engine::log_density`] with unweighted keys.
    ///
    /// # Errors
    /// As [`local_mean`](Self::local_mean) (values are not needed); the
    /// cauchy profile in `d ≥ 2`.
    pub fn log_density(
        &self,
        kernel: &Kernel,
        queries: ArrayView2<'_, f32>,
    ) -> Result<Array1<f64>> {
        let q = self.kernel_queries("density", kernel, queries)?;
        self.on_keys().log_density(kernel, &q)
    }

    /// Kernel density estimate per query, as [`Engine::density`] with
    /// unweighted keys.
    ///
    /// # Errors
    /// As [`log_density`](Self::log_density).
    pub fn density(&self, kernel: &Kernel, queries: ArrayView2<'_, f32>) -> Result<Array1<f64>> {
        Ok(self.log_density(kernel, queries)?.mapv(f64::exp))
    }

    /// Class probabilities (`M × C`): the local mean of the one-hot labels,
    /// as [`LocalModeClassifier::predict_proba`](crate::LocalModeClassifier::predict_proba).
    ///
    /// # Errors
    /// No labels in this key set; otherwise as [`local_mean`](Self::local_mean).
    pub fn predict_proba(
        &self,
        kernel: &Kernel,
        queries: ArrayView2<'_, f32>,
    ) -> Result<RowNormalized> {
        let set = self.set(self.inner.labels_set, "labels", "labels")?;
        let q = self.kernel_queries("classify", kernel, queries)?;
        self.inner.keys.local_mean(&Query::new(kernel, &q), set)
    }

    /// The most probable class per query and the class probabilities, as
    /// [`LocalModeClassifier::predict`](crate::LocalModeClassifier::predict)
    /// with [`KeySetOptions::empty_fallback`].
    ///
    /// # Errors
    /// As [`predict_proba`](Self::predict_proba).
    pub fn classify(
        &self,
        kernel: &Kernel,
        queries: ArrayView2<'_, f32>,
    ) -> Result<Classification> {
        let set = self.set(self.inner.labels_set, "labels", "labels")?;
        let q = self.kernel_queries("classify", kernel, queries)?;
        let i = &*self.inner;
        // Present whenever the labels set is (checked by `set` above).
        let labels = LabelSet {
            set,
            classes: view_of(&i.class_labels),
            labels: view_of(&i.labels),
        };
        let fallback = i.options.empty_fallback;
        let (proba, labels) = self
            .on_keys()
            .classify(kernel, (&q, queries), &labels, fallback)?;
        Ok(Classification {
            labels,
            empty_rows: proba.empty_rows,
            proba: proba.values,
        })
    }

    /// Local polynomial regression of the values at `queries`, as
    /// [`Engine::local_polynomial`] with this key set's keys and values
    /// (degree 0: [`local_mean`](Self::local_mean)). Degree 1 reads the
    /// values as stored, not centred on their mean as the one-shot op does:
    /// its cross moments keep about `2⁻²⁴·|ȳ|/|Δy|` relative accuracy,
    /// where `ȳ` is the values' offset and `Δy` their variation within a
    /// bandwidth (docs/numerics.md, "Local moments").
    ///
    /// # Errors
    /// As [`Engine::local_polynomial`]; no values in this key set; on the
    /// GPU, a key set whose resident tiles exceed what the moment pass may
    /// visit per dispatch ([`Error::Unsupported`]).
    pub fn local_polynomial(
        &self,
        kernel: &Kernel,
        queries: ArrayView2<'_, f32>,
        degree: usize,
    ) -> Result<LocalFit> {
        let set = self.set(self.inner.values_set, "values", "values")?;
        if check_degree(degree)? == 0 {
            return Ok(self.local_mean(kernel, queries)?.into());
        }
        let q = self.kernel_queries("local_polynomial", kernel, queries)?;
        let values = ValueSet {
            set,
            cols: self.inner.values_set.map_or(0, |s| s.1),
            extent: self.inner.values_extent,
        };
        self.on_keys().local_linear(kernel, &q, values)
    }

    /// Local PCA at `queries`, as [`Engine::local_pca`] with this key
    /// set's keys.
    ///
    /// # Errors
    /// As [`Engine::local_pca`]; on the GPU as
    /// [`local_polynomial`](Self::local_polynomial).
    pub fn local_pca(
        &self,
        kernel: &Kernel,
        queries: ArrayView2<'_, f32>,
        components: usize,
    ) -> Result<LocalPca> {
        let q = self.kernel_queries("local_pca", kernel, queries)?;
        self.on_keys().local_pca(kernel, &q, components)
    }

    /// The `k` nearest keys of every query, as [`Engine::knn`].
    ///
    /// # Errors
    /// `k = 0` or `k > N`; on the GPU `k` above 128; otherwise as
    /// [`local_mean`](Self::local_mean).
    pub fn knn(&self, queries: ArrayView2<'_, f32>, k: usize) -> Result<Neighbours> {
        self.knn_metric(queries, k, Metric::Euclidean)
    }

    /// The `k` nearest keys of every query under `metric`, as
    /// [`Engine::knn_metric`].
    ///
    /// # Errors
    /// As [`knn`](Self::knn), plus [`Error::MetricDimension`](crate::Error::MetricDimension)
    /// for haversine keys of other than 2 columns.
    pub fn knn_metric(
        &self,
        queries: ArrayView2<'_, f32>,
        k: usize,
        metric: Metric,
    ) -> Result<Neighbours> {
        self.on_keys().check_k(k)?;
        let q = self.queries("knn", queries)?;
        self.on_keys().knn(&q, k, &metric)
    }
}

/// The view of labels a key set holds (empty when it holds none).
fn view_of(l: &Option<Array1<i64>>) -> ArrayView1<'_, i64> {
    l.as_ref().map_or(ArrayView1::from(&[][..]), |c| c.view())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_set_types_are_send_sync_and_cheap_to_clone() {
        fn assert_send_sync<T: Send + Sync + Clone>() {}
        assert_send_sync::<KeySet>();
        assert_send_sync::<KeySetOptions>();
        assert_send_sync::<Classification>();
        assert_send_sync::<BatchStats>();
    }

    #[test]
    fn bad_options_are_refused() {
        let e = Engine::cpu();
        let x = ndarray::array![[0.0f32]];
        for o in [
            KeySetOptions {
                max_request_rows: 0,
                ..KeySetOptions::default()
            },
            KeySetOptions {
                batching: Batching {
                    max_batch_rows: 0,
                    ..Batching::default()
                },
                ..KeySetOptions::default()
            },
            KeySetOptions {
                batching: Batching {
                    max_wait: std::time::Duration::from_secs(5),
                    ..Batching::default()
                },
                ..KeySetOptions::default()
            },
        ] {
            let err = e.prepare(x.view()).options(o).build().unwrap_err();
            assert!(matches!(err, Error::InvalidParameter { .. }), "{err}");
        }
    }
}
