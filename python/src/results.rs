//! Conversions at the edge, to Python: each result of the crate as the
//! numpy arrays (handed over without a copy) and counts Python receives.

use locus::{
    Classification, Imputed, LocalFit, LocalPca, MeanShiftFit, MedoidShiftFit, Neighbours,
    RowNormalized, RowStates,
};
use ndarray::{Array, Dimension};
use numpy::{Element, IntoPyArray, PyArray, PyArray1, PyArray2, PyArray3};
use pyo3::prelude::*;

/// A result of the crate as Python receives it.
pub(crate) trait IntoPython<'py> {
    /// The arrays and counts.
    type Output;

    /// Hands `self` to Python.
    fn into_python(self, py: Python<'py>) -> Self::Output;
}

/// An array as is.
impl<'py, T: Element, D: Dimension> IntoPython<'py> for Array<T, D> {
    type Output = Bound<'py, PyArray<T, D>>;

    fn into_python(self, py: Python<'py>) -> Self::Output {
        self.into_pyarray(py)
    }
}

/// `(values, empty rows)`.
impl<'py> IntoPython<'py> for RowNormalized {
    type Output = (Bound<'py, PyArray2<f32>>, usize);

    fn into_python(self, py: Python<'py>) -> Self::Output {
        (self.values.into_pyarray(py), self.empty_rows)
    }
}

/// `(fitted, slopes or None, empty rows, rank-deficient rows)`.
impl<'py> IntoPython<'py> for LocalFit {
    type Output = (
        Bound<'py, PyArray2<f32>>,
        Option<Bound<'py, PyArray3<f32>>>,
        usize,
        usize,
    );

    fn into_python(self, py: Python<'py>) -> Self::Output {
        (
            self.fitted.into_pyarray(py),
            self.slopes.map(|s| s.into_pyarray(py)),
            self.empty_rows,
            self.rank_deficient_rows,
        )
    }
}

/// `(means, variances, components, empty rows)`.
impl<'py> IntoPython<'py> for LocalPca {
    type Output = (
        Bound<'py, PyArray2<f32>>,
        Bound<'py, PyArray2<f32>>,
        Bound<'py, PyArray3<f32>>,
        usize,
    );

    fn into_python(self, py: Python<'py>) -> Self::Output {
        (
            self.means.into_pyarray(py),
            self.variances.into_pyarray(py),
            self.components.into_pyarray(py),
            self.empty_rows,
        )
    }
}

/// `(filled rows, imputed entries, entries that took the column mean)`.
impl<'py> IntoPython<'py> for Imputed {
    type Output = (Bound<'py, PyArray2<f32>>, usize, usize);

    fn into_python(self, py: Python<'py>) -> Self::Output {
        (self.values.into_pyarray(py), self.imputed, self.fallback)
    }
}

/// `(indices, distances)`.
impl<'py> IntoPython<'py> for Neighbours {
    type Output = (Bound<'py, PyArray2<i64>>, Bound<'py, PyArray2<f32>>);

    fn into_python(self, py: Python<'py>) -> Self::Output {
        (
            self.indices.into_pyarray(py),
            self.distances.into_pyarray(py),
        )
    }
}

/// `(max_log_weight, sum, weighted)`.
impl<'py> IntoPython<'py> for RowStates {
    type Output = (
        Bound<'py, PyArray1<f32>>,
        Bound<'py, PyArray1<f64>>,
        Bound<'py, PyArray2<f64>>,
    );

    fn into_python(self, py: Python<'py>) -> Self::Output {
        (
            self.max_log_weight.into_pyarray(py),
            self.sum.into_pyarray(py),
            self.weighted.into_pyarray(py),
        )
    }
}

/// `(class indices, probabilities, empty rows)`.
impl<'py> IntoPython<'py> for Classification {
    type Output = (Bound<'py, PyArray1<i64>>, Bound<'py, PyArray2<f32>>, usize);

    fn into_python(self, py: Python<'py>) -> Self::Output {
        (
            self.labels.into_pyarray(py),
            self.proba.into_pyarray(py),
            self.empty_rows,
        )
    }
}

/// `(modes, labels, populations, iterations, converged, bandwidth)`: the
/// fields of `locus.MeanShiftResult`.
impl<'py> IntoPython<'py> for MeanShiftFit {
    type Output = (
        Bound<'py, PyArray2<f32>>,
        Bound<'py, PyArray1<i64>>,
        Bound<'py, PyArray1<usize>>,
        usize,
        bool,
        f32,
    );

    fn into_python(self, py: Python<'py>) -> Self::Output {
        (
            self.modes.into_pyarray(py),
            self.labels.into_pyarray(py),
            self.populations.into_pyarray(py),
            self.iterations,
            self.converged,
            self.bandwidth,
        )
    }
}

/// `(medoids, clustering)`: the medoids, and the fields
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
