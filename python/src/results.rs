//! Conversions at the edge, to Python: each result of the crate as the
//! numpy arrays (handed over without a copy) and counts Python receives.

use locus::{
    Classification, Imputed, LocalFit, LocalPca, MeanShiftFit, MedoidShiftFit, Neighbours,
    RowNormalized, RowStates,
};
use ndarray::{Array, Array1, Array2, Array3, Dimension};
use numpy::{Element, IntoPyArray, PyArray, PyArray1};
use pyo3::prelude::*;

/// A result of the crate, or one of its fields, as Python receives it.
pub(crate) trait IntoPython<'py> {
    /// The arrays and counts.
    type Output;

    /// Hands `self` to Python.
    fn into_python(self, py: Python<'py>) -> Self::Output;
}

/// An array: a numpy array that owns the data.
impl<'py, T: Element, D: Dimension> IntoPython<'py> for Array<T, D> {
    type Output = Bound<'py, PyArray<T, D>>;

    fn into_python(self, py: Python<'py>) -> Self::Output {
        self.into_pyarray(py)
    }
}

/// Counts per mode: a `uint64` array.
impl<'py> IntoPython<'py> for Vec<usize> {
    type Output = Bound<'py, PyArray1<usize>>;

    fn into_python(self, py: Python<'py>) -> Self::Output {
        self.into_pyarray(py)
    }
}

/// A field that may be absent: converted when present.
impl<'py, T: IntoPython<'py>> IntoPython<'py> for Option<T> {
    type Output = Option<T::Output>;

    fn into_python(self, py: Python<'py>) -> Self::Output {
        self.map(|v| v.into_python(py))
    }
}

/// A pair of results: each converted.
impl<'py, A: IntoPython<'py>, B: IntoPython<'py>> IntoPython<'py> for (A, B) {
    type Output = (A::Output, B::Output);

    fn into_python(self, py: Python<'py>) -> Self::Output {
        (self.0.into_python(py), self.1.into_python(py))
    }
}

/// Counts, flags and bandwidths, as they are.
macro_rules! as_they_are {
    ($($scalar:ty),+) => {$(
        impl<'py> IntoPython<'py> for $scalar {
            type Output = $scalar;

            fn into_python(self, _py: Python<'py>) -> $scalar {
                self
            }
        }
    )+};
}

as_they_are!(usize, bool, f32);

/// The results that are structs of the crate: the tuple of the listed
/// fields, in this order, each converted.
macro_rules! field_tuples {
    ($(
        $(#[$doc:meta])*
        $result:ident { $($field:ident: $ty:ty),+ $(,)? }
    )+) => {$(
        $(#[$doc])*
        impl<'py> IntoPython<'py> for $result {
            type Output = ($(<$ty as IntoPython<'py>>::Output,)+);

            fn into_python(self, py: Python<'py>) -> Self::Output {
                ($(<$ty as IntoPython<'py>>::into_python(self.$field, py),)+)
            }
        }
    )+};
}

field_tuples! {
    /// `(values, empty rows)`.
    RowNormalized { values: Array2<f32>, empty_rows: usize }

    /// `(fitted, slopes or None, empty rows, rank-deficient rows)`.
    LocalFit {
        fitted: Array2<f32>,
        slopes: Option<Array3<f32>>,
        empty_rows: usize,
        rank_deficient_rows: usize,
    }

    /// `(means, variances, components, empty rows)`.
    LocalPca {
        means: Array2<f32>,
        variances: Array2<f32>,
        components: Array3<f32>,
        empty_rows: usize,
    }

    /// `(filled rows, imputed entries, entries that took the column mean)`.
    Imputed { values: Array2<f32>, imputed: usize, fallback: usize }

    /// `(indices, distances)`.
    Neighbours { indices: Array2<i64>, distances: Array2<f32> }

    /// `(max_log_weight, sum, weighted)`.
    RowStates { max_log_weight: Array1<f32>, sum: Array1<f64>, weighted: Array2<f64> }

    /// `(class indices, probabilities, empty rows)`.
    Classification { labels: Array1<i64>, proba: Array2<f32>, empty_rows: usize }

    /// `(modes, labels, populations, iterations, converged, bandwidth)`:
    /// the fields of `locus.MeanShiftResult`.
    MeanShiftFit {
        modes: Array2<f32>,
        labels: Array1<i64>,
        populations: Vec<usize>,
        iterations: usize,
        converged: bool,
        bandwidth: f32,
    }
}

/// `(medoids, clustering)`: the medoids (`int64`), and the fields
/// `locus.MedoidShiftResult` shares with `locus.MeanShiftResult`, as
/// [`MeanShiftFit`] gives them.
impl<'py> IntoPython<'py> for MedoidShiftFit {
    type Output = (
        Bound<'py, PyArray1<i64>>,
        <MeanShiftFit as IntoPython<'py>>::Output,
    );

    fn into_python(self, py: Python<'py>) -> Self::Output {
        let medoids: Vec<i64> = self.medoids.iter().map(|&m| m as i64).collect();
        let clustering = MeanShiftFit {
            modes: self.modes,
            labels: self.labels,
            populations: self.populations,
            iterations: self.iterations,
            converged: self.converged,
            bandwidth: self.bandwidth,
        };
        (medoids.into_pyarray(py), clustering.into_python(py))
    }
}
