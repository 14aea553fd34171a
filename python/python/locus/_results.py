"""What the ops return beyond plain arrays: named tuples of arrays."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["KNNResult", "LocalPCAResult", "MeanShiftResult", "MedoidShiftResult", "RowStates"]


class RowStates(NamedTuple):
    """Mergeable partial sums of a local mean, per query row: the largest
    log-weight ``m``, ``s = Σ e^{w−m}`` and ``u = Σ e^{w−m}·y``."""

    max_log_weight: np.ndarray
    """``m``, the largest log-weight of each row (M, float32; −∞ for a
    row with no weight)."""
    sum: np.ndarray
    """``s = Σ e^{w−m}`` (M, float64)."""
    weighted: np.ndarray
    """``u = Σ e^{w−m}·y`` (M × q, float64): the local mean is ``u / s``."""


class KNNResult(NamedTuple):
    """The ``k`` nearest keys of each query, in scikit-learn's and faiss's
    order: ``distances, indices = locus.knn(...)``."""

    distances: np.ndarray
    """Euclidean distances (M × k), nearest first; the queries' floating
    dtype (float64 for float64 input), computed in float32."""
    indices: np.ndarray
    """Indices of the keys (M × k, int64); equal distances in index order."""


class LocalPCAResult(NamedTuple):
    """Result of :func:`~locus.local_pca`."""

    means: np.ndarray
    """Kernel-weighted mean of the keys around each query (M × d)."""
    variances: np.ndarray
    """Leading eigenvalues of the local covariance, descending (M × k)."""
    components: np.ndarray
    """Their unit eigenvectors (M × k × d), largest entry positive."""


class MeanShiftResult(NamedTuple):
    """What :func:`~locus.mean_shift` found."""

    cluster_centers: np.ndarray
    """The modes (C × d, in ``X``'s floating dtype), most populated first."""
    labels: np.ndarray
    """One label per point (int64): its mode's index, or −1 (``cluster_all=False``)."""
    populations: np.ndarray
    """Points within one bandwidth of each mode (what modes are ranked by);
    for a seed ``max_iter`` stopped, of where it was before its last step
    (scikit-learn's count)."""
    n_iter: int
    """Iterations run (the most shifts any seed took)."""
    converged: bool
    """Whether every seed stopped within ``max_iter``."""
    bandwidth: float
    """The bandwidth used (given or estimated)."""


class MedoidShiftResult(NamedTuple):
    """What :func:`~locus.medoid_shift` found."""

    medoids: np.ndarray
    """Indices of the medoids among the points, most populated first."""
    cluster_centers: np.ndarray
    """The medoids' coordinates (C × d; C × 0 for a distance matrix)."""
    labels: np.ndarray
    """One label per point (int64): the index of its medoid."""
    populations: np.ndarray
    """Points in each cluster."""
    n_iter: int
    """Rounds of jumps in which some point still moved."""
    converged: bool
    """Whether every point reached a fixed medoid within ``max_iter``."""
    bandwidth: float
    """The bandwidth used."""
