"""MeanShift as a scikit-learn clusterer, with scikit-learn's rules."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import ClusterMixin
from sklearn.metrics import pairwise_distances_argmin
from sklearn.utils import check_array
from sklearn.utils.validation import check_is_fitted, validate_data

from ._base import LocusEstimator, check_bandwidth, check_bool, check_int, check_kernel, keep_params
from ._engine import engine_for
from ._errors import InputError
from ._cluster_functions import estimate_bandwidth, mean_shift
from ._kernels import ProductKernel
from ._variable import is_adaptive, point_bandwidths

__all__ = ["MeanShift"]

# scikit-learn's neighbourhoods are closed balls (distance <= bandwidth);
# the engine's flat kernel is open (< bandwidth). Widened by this factor,
# far below the engine's float32 resolution, the flat kernel also takes
# the points at exactly one bandwidth (integer data has many).
_CLOSED = 1.0 + 2.0**-20


class MeanShift(ClusterMixin, LocusEstimator):
    """MeanShift clustering on the GPU or the CPU, a drop-in for
    :class:`sklearn.cluster.MeanShift` with its rules.

    Each seed moves to the mean of the points within one bandwidth (a
    closed ball) until it moves by at most ``1e-3·bandwidth``, or for at
    most ``max_iter + 1`` steps (``n_iter_`` counts the steps after the
    first, as scikit-learn's); seeds are ranked by their populations,
    merged when within one bandwidth of a stronger one, and every point is
    labelled by its nearest centre (−1 beyond one bandwidth when
    ``cluster_all=False``). An estimated bandwidth of 0 (every point has
    at least ``⌊0.3·n⌋`` copies, as 1-D constant data) gives scikit-learn's
    result too: one cluster per distinct point, no error.

    Parameters
    ----------
    bandwidth : float, "adaptive", array-like or None, default=None
        The radius of the neighbourhoods (> 0); None estimates it with
        :func:`~locus.estimate_bandwidth` at quantile 0.3. ``"adaptive"``:
        variable-bandwidth MeanShift (Comaniciu, Ramesh & Meer), each point
        with its own ``h_j = adaptive_alpha·r_k(j)``, the distance to its
        ``adaptive_k``-th nearest other point, weighing
        ``h_j^(−(d+2))·g(‖x − x_j‖²/h_j²)``; an array of one bandwidth per
        point gives them directly. Seeds stop, modes merge and rank, and
        ``cluster_all=False`` orphans at each mode's own scale (the
        bandwidth of the point nearest it); bins are cells of the median
        bandwidth. Not with a :class:`~locus.ProductKernel`.
    seeds : array-like of shape (n_seeds, n_features) or None, default=None
        Where the seeds start; None: every point (or the bins).
    bin_seeding : bool, default=False
        Seeds on a grid of side ``bandwidth``, one per bin holding at least
        ``min_bin_freq`` points (scikit-learn's ``get_bin_seeds``).
    min_bin_freq : int, default=1
        The fewest points a bin needs to give a seed.
    cluster_all : bool, default=True
        False: a point farther than ``bandwidth`` from every centre is
        labelled −1.
    n_jobs : int or None, default=None
        CPU threads: None or -1 every core, k > 0 k threads, -2 all but
        one (joblib's count); 0 raises.
    max_iter : int, default=300
        The most steps after the first a seed takes (≥ 0).
    kernel : str or ProductKernel, default="flat"
        scikit-learn's flat kernel, or any locus profile (a weighted local
        mean; the ranking and labels still use the ball of one bandwidth),
        or a :class:`~locus.ProductKernel` with ``bandwidth=None``.
    backend : {"auto", "gpu", "cpu"}, default="auto"
        Where the engine computes.
    adaptive_k : int, default=10
        The neighbour of ``bandwidth="adaptive"``'s rule (``1 <= k < n``).
    adaptive_alpha : float, default=1.0
        The factor of ``bandwidth="adaptive"``'s rule (> 0).

    Attributes
    ----------
    cluster_centers_ : numpy.ndarray of shape (n_clusters, n_features)
        The centres, most populated first: float64 (float32 for float32
        input; the seeds move in float32 on coordinates centred on the
        data).
    labels_ : numpy.ndarray of shape (n_samples,)
        Each point's cluster (int64), −1 for an orphan.
    n_iter_ : int
        The most steps after the first any seed took.
    bandwidth_ : float or numpy.ndarray of shape (n_samples,)
        The bandwidth used; per point (float64 copies of the float32 values
        the engine uses) with ``bandwidth="adaptive"`` or an array.
    n_features_in_ : int
        Features seen in ``fit``.
    feature_names_in_ : numpy.ndarray
        Their names, when ``X`` had string column names.

    Examples
    --------
    >>> import numpy as np, locus
    >>> X = np.array([[1, 1], [2, 1], [1, 0], [4, 7], [3, 5], [3, 6]])
    >>> ms = locus.MeanShift(bandwidth=2, backend="cpu").fit(X)
    >>> ms.labels_
    array([1, 1, 1, 0, 0, 0])
    >>> ms.predict([[0, 0], [5, 5]])
    array([1, 0])
    """

    bandwidth_: float | np.ndarray

    def __init__(
        self,
        *,
        bandwidth: Any = None,
        seeds: Any = None,
        bin_seeding: bool = False,
        min_bin_freq: int = 1,
        cluster_all: bool = True,
        n_jobs: int | None = None,
        max_iter: int = 300,
        kernel: str | ProductKernel = "flat",
        backend: str = "auto",
        adaptive_k: int = 10,
        adaptive_alpha: float = 1.0,
    ) -> None:
        keep_params(self, locals())

    def _validate_params(self) -> None:
        """The shared checks, and MeanShift's own.

        Raises
        ------
        InputError
            A parameter out of its domain (also a ``ValueError``).
        """
        super()._validate_params()
        check_kernel(self.kernel)
        if isinstance(self.kernel, ProductKernel):
            if self.bandwidth is not None:
                raise InputError("a ProductKernel carries its blocks' bandwidths: set bandwidth=None with it")
        elif isinstance(self.bandwidth, str):
            if self.bandwidth != "adaptive":
                raise InputError(
                    f'bandwidth must be a number, None, "adaptive" or one per point, got {self.bandwidth!r}'
                )
        elif self.bandwidth is not None and not is_adaptive(self.bandwidth):
            check_bandwidth(self.bandwidth)
        check_bool(self.bin_seeding, "bin_seeding")
        check_bool(self.cluster_all, "cluster_all")
        check_int(self.min_bin_freq, "min_bin_freq", minimum=1)
        check_int(self.max_iter, "max_iter", minimum=0)

    def fit(self, X: Any, y: Any = None) -> MeanShift:
        """Clusters ``X``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The points.
        y : None
            Ignored.

        Returns
        -------
        MeanShift
            The fitted estimator.
        """
        self._validate_params()
        X = validate_data(self, X, reset=True, dtype=[np.float64, np.float32], order="C")
        seeds = (
            None
            if self.seeds is None
            else check_array(self.seeds, dtype=X.dtype, order="C", input_name="seeds")
        )
        engine = engine_for(self.backend, self.n_jobs)
        product = isinstance(self.kernel, ProductKernel)
        if not product and is_adaptive(self.bandwidth):
            return self._fit_adaptive(X, seeds, engine)
        h: float | None = None  # a ProductKernel's blocks carry theirs
        if not product:
            if self.bandwidth is not None:
                h = float(self.bandwidth)
            elif _zero_bandwidth(X):
                h = 0.0
            else:
                h = estimate_bandwidth(X, backend=engine)
        if h == 0.0:
            return self._fit_zero_bandwidth(X, seeds)
        flat = not product and str(self.kernel).lower() in ("flat", "uniform", "tophat")
        if h is not None and flat and self.bin_seeding and seeds is None:
            seeds = _bin_seeds(X, h, int(self.min_bin_freq))
        r = self._shift(
            X, seeds, engine, bandwidth=None if h is None else h * (_CLOSED if flat else 1.0)
        )
        self.bandwidth_ = float(r.bandwidth) if h is None else h
        return self

    def _fit_adaptive(self, X: np.ndarray, seeds: np.ndarray | None, engine: Any) -> MeanShift:
        """Variable-bandwidth MeanShift with the per-point bandwidths
        ``bandwidth`` asks for (widened as the fixed flat kernel's are)."""
        hs = point_bandwidths(self, X, engine)
        flat = str(self.kernel).lower() in ("flat", "uniform", "tophat")
        self._shift(X, seeds, engine, bandwidths=hs * np.float32(_CLOSED) if flat else hs)
        self.bandwidth_ = hs.astype(np.float64)
        return self

    def _shift(self, X: np.ndarray, seeds: np.ndarray | None, engine: Any, **bandwidth: Any) -> Any:
        """:func:`~locus.mean_shift` with these parameters and ``bandwidth``
        (``bandwidth=`` or ``bandwidths=``); keeps the centres, labels and
        steps, and returns the result."""
        r = mean_shift(
            X,
            kernel=self.kernel,
            seeds=seeds,
            bin_seeding=bool(self.bin_seeding) and seeds is None,
            min_bin_freq=int(self.min_bin_freq),
            cluster_all=bool(self.cluster_all),
            max_iter=int(self.max_iter) + 1,
            backend=engine,
            **bandwidth,
        )
        self.cluster_centers_ = r.cluster_centers.astype(X.dtype)
        self.labels_ = r.labels
        self.n_iter_ = max(int(r.n_iter) - 1, 0)
        return r

    def _fit_zero_bandwidth(self, X: np.ndarray, seeds: np.ndarray | None) -> MeanShift:
        """scikit-learn with a bandwidth of 0: a seed's neighbourhood is the
        points equal to it, so every seed on a point stays there, ranked by
        its copies; bins of side 0 are the points themselves."""
        start = X if seeds is None else seeds
        points, counts = np.unique(X, axis=0, return_counts=True)
        centres = np.unique(start, axis=0)
        found = {tuple(p): int(c) for p, c in zip(points.tolist(), counts.tolist())}
        ranked = sorted(
            ((found[c], c) for c in map(tuple, centres.tolist()) if c in found), reverse=True
        )
        if not ranked:
            raise InputError(
                "No point was within bandwidth=0 of any seed; give seeds among the points "
                "or a bandwidth"
            )
        self.cluster_centers_ = np.array([c for _, c in ranked], dtype=X.dtype)
        idx = pairwise_distances_argmin(X, self.cluster_centers_)
        labels = idx.astype(np.int64)
        if not bool(self.cluster_all):
            exact = (X == self.cluster_centers_[idx]).all(axis=1)
            labels[~exact] = -1
        self.labels_ = labels
        self.n_iter_ = 0
        self.bandwidth_ = 0.0
        return self

    def predict(self, X: Any) -> np.ndarray:
        """The index of the nearest cluster centre for each sample.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The points to label.

        Returns
        -------
        numpy.ndarray of shape (n_samples,)
            The index (int64) of each point's nearest centre (with a
            :class:`~locus.ProductKernel`, nearest in units of its blocks'
            bandwidths, as ``fit`` labels).
        """
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32], order="C")
        return nearest_centres(X, self.cluster_centers_, self.kernel)


def nearest_centres(X: np.ndarray, centres: np.ndarray, kernel: Any) -> np.ndarray:
    """Each row's nearest centre (int64), in units of a
    :class:`~locus.ProductKernel`'s block bandwidths when ``kernel`` is one."""
    if isinstance(kernel, ProductKernel):
        scale = np.array([h for d, _, h in kernel.blocks for _ in range(d)])
        X, centres = X / scale, centres / scale
    return pairwise_distances_argmin(X, centres).astype(np.int64)


def _zero_bandwidth(X: np.ndarray) -> bool:
    """Whether scikit-learn's estimated bandwidth (quantile 0.3) is 0:
    every point's ``max(1, ⌊0.3·n⌋)``-th nearest neighbour (itself first)
    is a copy of it."""
    k = max(1, int(X.shape[0] * 0.3))
    _, counts = np.unique(X, axis=0, return_counts=True)
    return bool(counts.min() >= k)


def _bin_seeds(X: np.ndarray, h: float, min_bin_freq: int) -> np.ndarray:
    """scikit-learn's ``get_bin_seeds``: one seed per bin ``round(x/h)``
    (half to even) holding at least ``min_bin_freq`` points, at
    ``round(x/h)·h`` (rounded to float32 first, as scikit-learn's); the
    points themselves when every bin holds a single point."""
    bins, counts = np.unique(np.round(X / h) + 0.0, axis=0, return_counts=True)
    kept = bins[counts >= min_bin_freq].astype(np.float32)
    if len(kept) == len(X):
        return X
    return (kept * h).astype(X.dtype)
