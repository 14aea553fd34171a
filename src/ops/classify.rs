//! Local-mode classification (paper §4.3): the class whose kernel vote is
//! largest, with probabilities the local mean of one-hot labels.

use ndarray::{Array1, Array2, ArrayView1, ArrayView2};

use super::RowNormalized;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::matrix::{Matrix, alloc_output};

/// What [`LocalModeClassifier::predict`] answers for a query with an empty
/// neighbourhood (no training point within reach of a compact kernel).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EmptyFallback {
    /// Label −1 ("unassigned"); the query is counted in `empty_rows`.
    #[default]
    Unassigned,
    /// The label of the nearest training point (still counted).
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
    one_hot: Array2<f32>,
    fallback: EmptyFallback,
}

impl Engine {
    /// Fits a local-mode classifier on `keys` (`N × d`) with `labels` in
    /// `0..C` (`C = max label + 1`, or `classes` when given).
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
        let c = check_labels(OP, labels, x.rows(), classes)?;
        let one_hot = one_hot(OP, labels, c)?;
        Ok(LocalModeClassifier {
            engine: self.clone(),
            kernel: *kernel,
            keys: keys.to_owned(),
            labels: labels.to_owned(),
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

    /// Class probabilities (`M × C`): the local mean of one-hot labels.
    /// Rows with an empty neighbourhood are NaN and counted.
    ///
    /// # Errors
    /// As [`Engine::local_mean`].
    pub fn predict_proba(&self, queries: ArrayView2<'_, f32>) -> Result<RowNormalized> {
        self.engine
            .local_mean(&self.kernel, queries, self.keys.view(), self.one_hot.view())
    }

    /// The most probable class per query (ties to the smaller class), with
    /// empty neighbourhoods handled by the [`EmptyFallback`].
    ///
    /// # Errors
    /// As [`Engine::local_mean`].
    pub fn predict(&self, queries: ArrayView2<'_, f32>) -> Result<Predictions> {
        let proba = self.predict_proba(queries)?;
        let mut labels = argmax_labels(proba.values.view());
        if proba.empty_rows > 0 && self.fallback == EmptyFallback::NearestNeighbour {
            let empty: Vec<usize> = (0..labels.len()).filter(|&i| labels[i] < 0).collect();
            let sub = queries.select(ndarray::Axis(0), &empty);
            let nb = self.engine.knn(sub.view(), self.keys.view(), 1)?;
            for (r, &i) in empty.iter().enumerate() {
                labels[i] = self.labels[nb.indices[[r, 0]] as usize];
            }
        }
        Ok(Predictions {
            labels,
            empty_rows: proba.empty_rows,
        })
    }
}

/// The class of each row of class probabilities: the largest, the smaller
/// class on ties; −1 for a row with no mass (NaN).
pub(crate) fn argmax_labels(proba: ArrayView2<'_, f32>) -> Array1<i64> {
    proba
        .rows()
        .into_iter()
        .map(|r| {
            if r[0].is_nan() {
                -1
            } else {
                let v: Vec<f64> = r.iter().map(|&p| f64::from(p)).collect();
                argmax(&v) as i64
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

/// Checks labels (one per key, in `0..C`) and returns `C`.
pub(crate) fn check_labels(
    op: &'static str,
    labels: ArrayView1<'_, i64>,
    n: usize,
    classes: Option<usize>,
) -> Result<usize> {
    if labels.len() != n {
        return Err(Error::RowMismatch {
            op,
            keys: n,
            values: labels.len(),
        });
    }
    let max = labels.iter().copied().max().unwrap_or(-1);
    if let Some((i, &l)) = labels.iter().enumerate().find(|(_, l)| **l < 0) {
        return Err(Error::InvalidParameter {
            name: "labels",
            reason: format!("labels must be class indices 0..C−1; label {i} is {l}"),
        });
    }
    let c = classes.unwrap_or(max as usize + 1);
    if c > MAX_CLASSES {
        return Err(Error::InvalidParameter {
            name: "classes",
            reason: format!(
                "{c} classes; at most {MAX_CLASSES} (2^24) are supported (labels must be class indices 0..C−1)"
            ),
        });
    }
    if c == 0 {
        return Err(Error::InvalidParameter {
            name: "classes",
            reason: "there must be at least one class".into(),
        });
    }
    if max as usize >= c {
        return Err(Error::InvalidParameter {
            name: "labels",
            reason: format!("label {max} is outside 0..{c} (the number of classes)"),
        });
    }
    Ok(c)
}

/// The most classes a classifier takes: labels are class indices, and
/// every class index below 2²⁴ is exact as an `f32`.
pub(crate) const MAX_CLASSES: usize = 1 << 24;

/// The `n × c` indicator matrix of `labels` (checked to lie in `0..c`),
/// allocated fallibly: a size that cannot be allocated is
/// [`Error::TooLarge`], not an abort.
pub(crate) fn one_hot(
    op: &'static str,
    labels: ArrayView1<'_, i64>,
    c: usize,
) -> Result<Array2<f32>> {
    let n = labels.len();
    let mut data = alloc_output(op, "one-hot label matrix", n, c)?;
    for (j, &l) in labels.iter().enumerate() {
        data[j * c + l as usize] = 1.0;
    }
    Ok(Array2::from_shape_vec((n, c), data).expect("n·c entries")) // ok: allocated n·c
}

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
