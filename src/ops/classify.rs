//! Local-mode classification (paper §4.3): the class whose kernel vote is
//! largest, with probabilities the local mean of one-hot labels.

use ndarray::{Array1, Array2, ArrayView1, ArrayView2};

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::matrix::{Matrix, alloc_output};
use crate::types::{Neighbours, RowNormalized};

/// What [`LocalModeClassifier::predict`] answers for a query with an empty
/// neighbourhood (no training point within reach of a compact kernel).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EmptyFallback {
    /// Label −1 ("unassigned"); the query is counted in `empty_rows`.
    #[default]
    Unassigned,
    /// The label of the nearest training point (still counted), by the
    /// Euclidean distance in the data's units (for a product kernel too).
    NearestNeighbour,
}

/// Predicted labels.
#[derive(Debug, Clone, PartialEq)]
pub struct Predictions {
    /// One label per query (−1 where unassigned).
    pub labels: Array1<i64>,
    /// Queries whose neighbourhood was empty (see [`EmptyFallback`]).
    pub empty_rows: usize,
}

/// A fitted local-mode classifier: the training points, their one-hot
/// labels, the kernel, and the engine that evaluates it.
#[derive(Debug, Clone)]
pub struct LocalModeClassifier {
    engine: Engine,
    kernel: Kernel,
    keys: Array2<f32>,
    labels: Array1<i64>,
    classes: Array1<i64>,
    one_hot: Array2<f32>,
    fallback: EmptyFallback,
}

impl Engine {
    /// Fits a local-mode classifier on `keys` (`N × d`) with non-negative
    /// integer `labels`, one per key.
    ///
    /// The classes are the distinct labels present, in increasing order
    /// (scikit-learn's `classes_`): labels `{0, 16777215}` make two
    /// classes, not 2²⁴. With `classes = Some(C)` they are instead all of
    /// `0..C`, present or not, and every label must lie below `C`.
    /// [`LocalModeClassifier::class_labels`] says which label each column
    /// of the probabilities stands for; predictions are labels.
    ///
    /// # Errors
    /// Empty or non-finite keys; labels not one per key, negative, or
    /// ≥ `classes`.
    pub fn fit_classifier(
        &self,
        kernel: &Kernel,
        keys: ArrayView2<'_, f32>,
        labels: ArrayView1<'_, i64>,
        classes: Option<usize>,
    ) -> Result<LocalModeClassifier> {
        const OP: &str = "fit_classifier";
        let x = Matrix::check(OP, "keys", keys)?;
        let c = Classes::of(OP, labels, x.rows(), classes)?;
        let one_hot = c.one_hot(OP)?;
        Ok(LocalModeClassifier {
            engine: self.clone(),
            kernel: *kernel,
            keys: keys.to_owned(),
            labels: labels.to_owned(),
            classes: c.labels,
            one_hot,
            fallback: EmptyFallback::default(),
        })
    }
}

impl LocalModeClassifier {
    /// Sets what empty neighbourhoods are labelled.
    pub fn with_fallback(mut self, fallback: EmptyFallback) -> Self {
        self.fallback = fallback;
        self
    }

    /// Number of classes `C`.
    pub fn classes(&self) -> usize {
        self.one_hot.ncols()
    }

    /// The label of each class, in increasing order: column `j` of
    /// [`predict_proba`](Self::predict_proba) is the probability of label
    /// `class_labels()[j]`.
    pub fn class_labels(&self) -> ArrayView1<'_, i64> {
        self.classes.view()
    }

    /// Class probabilities (`M × C`, columns in the order of
    /// [`class_labels`](Self::class_labels)): the local mean of one-hot
    /// labels. Rows with an empty neighbourhood are NaN and counted.
    ///
    /// # Errors
    /// As [`Engine::local_mean`].
    pub fn predict_proba(&self, queries: ArrayView2<'_, f32>) -> Result<RowNormalized> {
        self.engine
            .local_mean(&self.kernel, queries, self.keys.view(), self.one_hot.view())
    }

    /// The label of the most probable class per query (ties to the smaller
    /// label), with empty neighbourhoods handled by the [`EmptyFallback`].
    ///
    /// # Errors
    /// As [`Engine::local_mean`].
    pub fn predict(&self, queries: ArrayView2<'_, f32>) -> Result<Predictions> {
        let proba = self.predict_proba(queries)?;
        let labels = label_rows(
            &proba,
            self.classes.view(),
            (self.fallback == EmptyFallback::NearestNeighbour).then(|| self.labels.view()),
            queries,
            |sub| {
                let metric = self.kernel.metric();
                self.engine.knn_metric(sub, self.keys.view(), 1, metric)
            },
        )?;
        Ok(Predictions {
            labels,
            empty_rows: proba.empty_rows,
        })
    }
}

/// The label of every query from its class probabilities
/// ([`argmax_labels`]); with `nearest_labels` (the training labels, when
/// the fallback is [`EmptyFallback::NearestNeighbour`]), a query with an
/// empty neighbourhood takes the label of its nearest training point,
/// found by `nearest` on the sub-matrix of those queries. The one rule of
/// both [`LocalModeClassifier::predict`] and `KeySet::classify`.
pub(crate) fn label_rows(
    proba: &RowNormalized,
    classes: ArrayView1<'_, i64>,
    nearest_labels: Option<ArrayView1<'_, i64>>,
    queries: ArrayView2<'_, f32>,
    nearest: impl FnOnce(ArrayView2<'_, f32>) -> Result<Neighbours>,
) -> Result<Array1<i64>> {
    let mut labels = argmax_labels(proba.values.view(), classes);
    if let Some(train) = nearest_labels
        && proba.empty_rows > 0
    {
        let empty: Vec<usize> = (0..labels.len()).filter(|&i| labels[i] < 0).collect();
        let sub = queries.select(ndarray::Axis(0), &empty);
        let nb = nearest(sub.view())?;
        for (r, &i) in empty.iter().enumerate() {
            labels[i] = train[nb.indices[[r, 0]] as usize];
        }
    }
    Ok(labels)
}

/// The label of each row of class probabilities (column `j` for label
/// `classes[j]`): the largest, the first on ties; −1 for a row with no
/// mass (NaN).
pub(crate) fn argmax_labels(
    proba: ArrayView2<'_, f32>,
    classes: ArrayView1<'_, i64>,
) -> Array1<i64> {
    let mut v = Vec::with_capacity(proba.ncols());
    proba
        .rows()
        .into_iter()
        .map(|r| {
            if r[0].is_nan() {
                -1
            } else {
                v.clear();
                v.extend(r.iter().map(|&p| f64::from(p)));
                classes[argmax(&v)]
            }
        })
        .collect()
}

/// Index of the largest value, the first one on ties.
pub(crate) fn argmax(v: &[f64]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best
}

/// The classes of a set of labels, and each key's class.
#[derive(Debug, Clone)]
pub(crate) struct Classes {
    /// The label of each class, increasing.
    pub labels: Array1<i64>,
    /// The class of each key (an index into `labels`).
    pub index: Vec<usize>,
}

impl Classes {
    /// Checks `labels` (one per key, non-negative; below `classes` when
    /// given) and finds the classes: the distinct labels present, or all
    /// of `0..classes` when given.
    pub(crate) fn of(
        op: &'static str,
        labels: ArrayView1<'_, i64>,
        n: usize,
        classes: Option<usize>,
    ) -> Result<Classes> {
        if labels.len() != n {
            return Err(Error::InvalidParameter {
                name: "labels",
                reason: format!(
                    "{op}: {} labels for {n} keys; labels need one per key",
                    labels.len()
                ),
            });
        }
        if let Some((i, &l)) = labels.iter().enumerate().find(|(_, l)| **l < 0) {
            return Err(Error::InvalidParameter {
                name: "labels",
                reason: format!(
                    "labels must be non-negative integers (−1 means unassigned in results); label {i} is {l}"
                ),
            });
        }
        let Some(c) = classes else {
            let mut present: Vec<i64> = labels.to_vec();
            present.sort_unstable();
            present.dedup();
            if present.is_empty() {
                return Err(Error::InvalidParameter {
                    name: "classes",
                    reason: "there must be at least one class".into(),
                });
            }
            let index = labels
                .iter()
                .map(|l| present.binary_search(l).unwrap_or_default())
                .collect();
            return Ok(Classes {
                labels: Array1::from(present),
                index,
            });
        };
        if c > MAX_CLASSES {
            return Err(Error::InvalidParameter {
                name: "classes",
                reason: format!("{c} classes; at most {MAX_CLASSES} (2^24) are supported"),
            });
        }
        if c == 0 {
            return Err(Error::InvalidParameter {
                name: "classes",
                reason: "there must be at least one class".into(),
            });
        }
        let max = labels.iter().copied().max().unwrap_or(0);
        if max as u64 >= c as u64 {
            return Err(Error::InvalidParameter {
                name: "labels",
                reason: format!("label {max} is outside 0..{c} (the number of classes)"),
            });
        }
        Ok(Classes {
            labels: (0..c as i64).collect(),
            index: labels.iter().map(|&l| l as usize).collect(),
        })
    }

    /// Number of classes.
    pub(crate) fn len(&self) -> usize {
        self.labels.len()
    }

    /// The `n × C` indicator matrix of the keys' classes, allocated
    /// fallibly: a size that cannot be allocated is [`Error::TooLarge`],
    /// not an abort.
    pub(crate) fn one_hot(&self, op: &'static str) -> Result<Array2<f32>> {
        let (n, c) = (self.index.len(), self.len());
        let mut data = alloc_output(op, "one-hot label matrix", n, c)?;
        for (j, &k) in self.index.iter().enumerate() {
            data[j * c + k] = 1.0;
        }
        Array2::from_shape_vec((n, c), data).map_err(|e| Error::InvalidParameter {
            name: "labels",
            reason: e.to_string(),
        })
    }
}

/// The most classes a classifier takes when their number is given.
pub(crate) const MAX_CLASSES: usize = 1 << 24;

/// Converts labels stored as floats (e.g. read from a file) to class
/// indices, refusing values that are not non-negative integers.
///
/// # Errors
/// [`Error::InvalidParameter`] naming the first bad label.
pub fn labels_from_f32(labels: ArrayView1<'_, f32>) -> Result<Array1<i64>> {
    labels
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            if v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v < 9.0e15 {
                Ok(v as i64)
            } else {
                Err(Error::InvalidParameter {
                    name: "labels",
                    reason: format!("label {i} is {v}, not a class index (a non-negative integer)"),
                })
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use ndarray::array;

    use super::*;

    #[test]
    fn classes_are_the_labels_present_or_all_of_a_given_count() {
        let labels = array![16_777_215i64, 0, 7, 0, 16_777_215];
        let c = Classes::of("t", labels.view(), 5, None).expect("valid");
        assert_eq!(c.labels.to_vec(), vec![0, 7, 16_777_215]);
        assert_eq!(c.index, vec![2, 0, 1, 0, 2]);
        let one_hot = c.one_hot("t").expect("small");
        assert_eq!(one_hot.dim(), (5, 3));
        assert_eq!(one_hot.row(2).to_vec(), vec![0.0, 1.0, 0.0]);
        let c = Classes::of("t", array![0i64, 2].view(), 2, Some(4)).expect("valid");
        assert_eq!(c.labels.to_vec(), vec![0, 1, 2, 3]);
        assert_eq!(c.index, vec![0, 2]);
        // The predicted label of a probability row is the class's label.
        let proba = array![[0.2f32, 0.5, 0.3], [f32::NAN, f32::NAN, f32::NAN]];
        let classes = array![3i64, 9, 40];
        assert_eq!(
            argmax_labels(proba.view(), classes.view()).to_vec(),
            vec![9, -1]
        );
    }

    #[test]
    fn labels_that_are_not_classes_are_refused_with_their_reason() {
        let short = Classes::of("fit", array![0i64, 1].view(), 3, None).unwrap_err();
        assert!(short.to_string().contains("2 labels for 3 keys"), "{short}");
        let neg = Classes::of("fit", array![0i64, -1].view(), 2, None).unwrap_err();
        assert!(neg.to_string().contains("label 1 is -1"), "{neg}");
        let beyond = Classes::of("fit", array![0i64, 4].view(), 2, Some(4)).unwrap_err();
        assert!(beyond.to_string().contains("outside 0..4"), "{beyond}");
        let many = Classes::of("fit", array![0i64].view(), 1, Some((1 << 24) + 1)).unwrap_err();
        assert!(many.to_string().contains("at most"), "{many}");
    }
}
