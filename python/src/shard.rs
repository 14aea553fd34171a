//! What `locus.distributed` computes on the driver between the shards'
//! answers, bound from the crate so that it is the single-node arithmetic:
//! merging row states, MeanShift's step and stop rule, its ranking of
//! modes, the CPU's squared distances of neighbours, and the kernel check.

use locus::RowStates;
use ndarray::Array2;
use numpy::{PyArray1, PyArray2, PyReadonlyArray1, PyReadonlyArray2, PyReadwriteArray2};
use pyo3::prelude::*;

use crate::convert::{KernelArg, owned};
use crate::errors::compute;
use crate::results::IntoPython;

/// Row states `(max_log_weight, sum, weighted)` as Python passes them.
type States<'py> = (
    PyReadonlyArray1<'py, f32>,
    PyReadonlyArray1<'py, f64>,
    PyReadonlyArray2<'py, f64>,
);

/// The row states of the same queries over two disjoint sets of keys,
/// merged into the states over both (`RowStates::merge`).
#[pyfunction]
pub(crate) fn merge_states<'py>(
    py: Python<'py>,
    a: States<'py>,
    b: States<'py>,
) -> PyResult<<RowStates as IntoPython<'py>>::Output> {
    let owned = |(m, s, u): &States<'py>| -> PyResult<RowStates> {
        Ok(RowStates {
            max_log_weight: owned(py, ("merge_states", "row states"), m.as_array())?,
            sum: owned(py, ("merge_states", "row states"), s.as_array())?,
            weighted: owned(py, ("merge_states", "row states"), u.as_array())?,
        })
    };
    let (mut merged, other) = (owned(&a)?, owned(&b)?);
    compute(py, || merged.merge(&other))?;
    Ok(merged.into_python(py))
}

/// One MeanShift step: `positions` move to `means` in place; which stop
/// (`locus::shift_step`).
#[pyfunction]
pub(crate) fn shift_step<'py>(
    py: Python<'py>,
    mut positions: PyReadwriteArray2<'py, f32>,
    means: PyReadonlyArray2<'py, f32>,
    thr_sq: f32,
) -> PyResult<Bound<'py, PyArray1<bool>>> {
    let (p, m) = (positions.as_array_mut(), means.as_array());
    let stop = compute(py, || locus::shift_step(p, m, thr_sq))?;
    Ok(ndarray::Array1::from(stop).into_python(py))
}

/// The modes among distinct final seed positions, from their populations:
/// the modes, strongest first, and their populations (`locus::rank_modes`).
#[pyfunction]
pub(crate) fn rank_modes<'py>(
    py: Python<'py>,
    candidates: PyReadonlyArray2<'py, f32>,
    populations: PyReadonlyArray1<'py, f64>,
    h: f32,
    seeds: usize,
) -> PyResult<<(Array2<f32>, Vec<usize>) as IntoPython<'py>>::Output> {
    let (c, n) = (candidates.as_array(), populations.as_array());
    compute(py, || locus::rank_modes(c, n, h, seeds)).map(|modes| modes.into_python(py))
}

/// The squared distances from each query to its neighbours `indices` among
/// `keys`, as the CPU ranks neighbours (`locus::neighbour_sq_dists`).
#[pyfunction]
pub(crate) fn neighbour_sq_dists<'py>(
    py: Python<'py>,
    queries: PyReadonlyArray2<'py, f32>,
    keys: PyReadonlyArray2<'py, f32>,
    indices: PyReadonlyArray2<'py, i64>,
) -> PyResult<Bound<'py, PyArray2<f32>>> {
    let (q, x, i) = (queries.as_array(), keys.as_array(), indices.as_array());
    compute(py, || locus::neighbour_sq_dists(q, x, i)).map(|d2| d2.into_python(py))
}

/// Checks a kernel as the ops take it, `(profile, bandwidth)` or a product
/// kernel's blocks, by the engine's rules, without computing anything.
#[pyfunction]
pub(crate) fn check_kernel(kernel: KernelArg) {
    // Reading the argument checked it.
    let _ = kernel;
}
