"""The clustering ops as functions: :func:`mean_shift`,
:func:`medoid_shift`, :func:`estimate_bandwidth` (numpy in, numpy out, as
the other functions in ``_functions.py``: float64 points centred near
their mean before rounding to float32, centres moved back in float64).
"""

from __future__ import annotations

from numbers import Real
from typing import Any

import numpy as np

from . import _locus
from ._arrays import (
    as_count,
    as_float32,
    as_matrix,
    result_dtype,
)
from ._centre import add_offset, centre, centre_on
from ._engine import BackendLike
from ._errors import InputError
from ._functions import _engine
from ._kernels import ProductKernel, kernel_spec
from ._results import MeanShiftResult, MedoidShiftResult

__all__ = ["mean_shift", "medoid_shift", "estimate_bandwidth"]


def _shift_kernel(kernel: Any, bandwidth: Any, quantile: Any, n_samples: Any) -> Any:
    """MeanShift's and MedoidShift's ``kernel`` and ``bandwidth`` as the
    engine takes them, one value: ``(profile, rule)``, the rule a number,
    ``"scott"``, ``"silverman"`` or, for ``bandwidth=None``, ``(quantile,
    n_samples)``; or a product kernel's blocks."""
    spec = kernel_spec(kernel, bandwidth)
    quantile = float(quantile)
    if n_samples is not None:
        n_samples = as_count(n_samples, "n_samples")
    if isinstance(kernel, ProductKernel):
        return spec
    if bandwidth is None:
        return (spec, (quantile, n_samples))
    if isinstance(bandwidth, str):
        if bandwidth not in ("scott", "silverman"):
            raise InputError(
                f'bandwidth must be a number, None, "scott" or "silverman", got {bandwidth!r}'
            )
        return (spec, bandwidth)
    return (spec, float(bandwidth))


def _whole_cells(offset: np.ndarray, bandwidth: Any) -> np.ndarray | None:
    """``offset`` rounded to whole cells of side ``bandwidth`` (bin
    seeding's grid); ``None`` unless the bandwidth is a positive number."""
    if isinstance(bandwidth, (bool, np.bool_)) or not isinstance(bandwidth, Real):
        return None
    h = float(bandwidth)
    if not (h > 0 and np.isfinite(h)):
        return None
    moved = np.round(offset / h) * h
    return moved if np.all(np.isfinite(moved)) and np.any(moved) else None


def mean_shift(
    X: Any,
    *,
    bandwidth: float | str | None = None,
    kernel: str | ProductKernel = "uniform",
    seeds: Any = None,
    bin_seeding: bool = False,
    min_bin_freq: int = 1,
    cluster_all: bool = True,
    max_iter: int = 300,
    tol: float = 1e-3,
    blurring: bool = False,
    quantile: float = 0.3,
    n_samples: int | None = None,
    backend: BackendLike = "auto",
    bandwidths: Any = None,
) -> MeanShiftResult:
    """MeanShift clustering, with scikit-learn's defaults and rules.

    Seeds (every point, ``bin_seeding`` on a grid of side ``bandwidth``
    keeping bins of at least ``min_bin_freq`` points, or given ``seeds``)
    move to the local mean of the points around them until the shift is at
    most ``tol·bandwidth``; modes are ranked by their populations, merged
    when closer than ``bandwidth``, and every point labelled by its nearest
    mode. ``bandwidth``: a number, ``None`` (scikit-learn's
    ``estimate_bandwidth`` with ``quantile`` and ``n_samples``), ``"scott"``
    or ``"silverman"``. ``kernel``: any profile (default the flat kernel,
    as scikit-learn), or a :class:`~locus.ProductKernel` for joint MeanShift
    (no ``bandwidth`` then: each block's coordinates are divided by its
    bandwidth, so ``tol`` and the merging distance are in those units, and
    the modes come back in the data's units). ``blurring``: the points
    themselves move.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        The points.
    bandwidth : float, {"scott", "silverman"} or None, default=None
        The bandwidth; None estimates it (:func:`estimate_bandwidth` with
        ``quantile`` and ``n_samples``); None with a product kernel.
    kernel : str or ProductKernel, default="uniform"
        A profile name (``uniform``: scikit-learn's flat kernel) or a
        :class:`~locus.ProductKernel`.
    seeds : array-like of shape (n_seeds, n_features), default=None
        Where the seeds start; None: every point (or the bins).
    bin_seeding : bool, default=False
        Seeds on a grid of side ``bandwidth``.
    min_bin_freq : int, default=1
        The fewest points a bin needs to give a seed.
    cluster_all : bool, default=True
        False: points farther than ``bandwidth`` from every mode get −1.
    max_iter : int, default=300
        The most shifts a seed takes.
    tol : float, default=1e-3
        A seed stops when it moves at most ``tol·bandwidth``.
    blurring : bool, default=False
        Blurring MeanShift: the points themselves move.
    quantile : float, default=0.3
        The quantile of the bandwidth estimate (``bandwidth=None``).
    n_samples : int or None, default=None
        Points the bandwidth estimate uses (all when None).
    backend : {"auto", "gpu", "cpu"} or Engine, default="auto"
        Where the op runs: a backend name (one shared engine per name) or an
        :class:`~locus.Engine`.
    bandwidths : array-like of shape (n_samples,), default=None
        Variable-bandwidth MeanShift (Comaniciu, Ramesh & Meer): one
        bandwidth per point, in place of ``bandwidth`` (None then), each
        point weighing ``h_j^(−(d+2))·g(‖x − x_j‖²/h_j²)``
        (:func:`knn_bandwidths` sets them by the k-NN rule). A seed stops
        within ``tol`` times the bandwidth of the point nearest its start;
        modes merge and rank at their own scale (the bandwidth of the point
        nearest them); bins are cells of the median bandwidth. A profile
        name, not blurring.

    Returns
    -------
    MeanShiftResult
        ``(cluster_centers, labels, populations, n_iter, converged, bandwidth)``.

    Examples
    --------
    >>> import numpy as np, locus
    >>> X = np.array([[0, 0], [0.3, 0.1], [0.1, 0.4], [6, 6], [6.2, 5.9]])
    >>> r = locus.mean_shift(X, bandwidth=1.0, backend="cpu")
    >>> r.labels, len(r.cluster_centers)
    (array([0, 0, 0, 1, 1]), 2)
    """
    hs = None
    cell: Any = bandwidth
    if bandwidths is not None:
        if bandwidth is not None:
            raise InputError("give either bandwidth or bandwidths, not both")
        if isinstance(kernel, ProductKernel):
            raise InputError("bandwidths take a profile name as kernel, not a product kernel")
        hs = as_float32(bandwidths, "bandwidths", (1,))
        # The rule is unused: the per-point bandwidths replace it.
        spec = _shift_kernel(kernel, 1.0, quantile, n_samples)
        # Bins are cells of the median bandwidth (the upper middle one, as
        # the engine takes it).
        cell = float(np.sort(hs)[len(hs) // 2]) if len(hs) else None
    else:
        spec = _shift_kernel(kernel, bandwidth, quantile, n_samples)
    dtype = result_dtype(X)
    min_bin_freq = as_count(min_bin_freq, "min_bin_freq")
    binned = bool(bin_seeding) and seeds is None
    offset, x, (given,) = centre(X, (seeds, "seeds"), name="X")
    if binned and offset is not None:
        # The bins are cells of side bandwidth from the origin: the points
        # move by whole cells, or not at all (a bandwidth yet to be found).
        offset = _whole_cells(offset, cell)
        x = centre_on(np.asarray(X, dtype=np.float64), offset, "X")
    start: np.ndarray | int | None
    if given is not None:
        start = given
    else:
        start = min_bin_freq if binned else None
    params = _locus.MeanShiftParams(
        spec,
        seeds=start,
        max_iter=as_count(max_iter, "max_iter"),
        tol=float(tol),
        blurring=bool(blurring),
        cluster_all=bool(cluster_all),
        bandwidths=hs,
    )
    centers, labels, populations, n_iter, converged, h = _locus.mean_shift(_engine(backend), x, params)
    centers = add_offset(centers, offset, dtype)
    return MeanShiftResult(centers, labels, populations, n_iter, converged, h)


def medoid_shift(
    X: Any,
    *,
    bandwidth: float | str | None = None,
    kernel: str | ProductKernel = "gaussian",
    max_iter: int = 300,
    metric: str = "euclidean",
    quantile: float = 0.3,
    n_samples: int | None = None,
    backend: BackendLike = "auto",
) -> MedoidShiftResult:
    """MedoidShift: every point jumps to the sample nearest its local mean
    (``argmin_j (K̃D)_ij``) until it stays put; points reaching the same
    medoid form a cluster. ``metric="precomputed"``: ``X`` is an N × N
    distance matrix (O(N³), CPU). ``bandwidth`` as :func:`mean_shift`;
    ``kernel`` a profile or a :class:`~locus.ProductKernel` (points only,
    no ``bandwidth``: local means in units of the blocks' bandwidths).

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features) or (n_samples, n_samples)
        The points, or their distance matrix (``metric="precomputed"``).
    bandwidth : float, {"scott", "silverman"} or None, default=None
        As :func:`mean_shift`'s.
    kernel : str or ProductKernel, default="gaussian"
        A profile name or a :class:`~locus.ProductKernel` (points only).
    max_iter : int, default=300
        The most rounds of jumps.
    metric : {"euclidean", "precomputed"}, default="euclidean"
        Whether ``X`` holds points or distances.
    quantile : float, default=0.3
        The quantile of the bandwidth estimate (``bandwidth=None``).
    n_samples : int or None, default=None
        Points the bandwidth estimate uses (all when None).
    backend : {"auto", "gpu", "cpu"} or Engine, default="auto"
        Where the op runs: a backend name (one shared engine per name) or an
        :class:`~locus.Engine`.

    Returns
    -------
    MedoidShiftResult
        ``(medoids, cluster_centers, labels, populations, n_iter, converged, bandwidth)``.

    Examples
    --------
    >>> import numpy as np, locus
    >>> r = locus.medoid_shift([[0.0], [0.2], [0.4], [5.0], [5.1], [5.3]], bandwidth=1.0, backend="cpu")
    >>> r.medoids, r.labels
    (array([1, 4]), array([0, 0, 0, 1, 1, 1]))
    """
    if metric not in ("euclidean", "precomputed"):
        raise InputError(f'metric must be "euclidean" or "precomputed", got {metric!r}')
    spec = _shift_kernel(kernel, bandwidth, quantile, n_samples)
    dtype = result_dtype(X)
    if metric == "precomputed":
        offset, x = None, as_matrix(X, "X")
    else:
        offset, x, _ = centre(X, name="X")
    medoids, clustering = _locus.medoid_shift(
        _engine(backend),
        x,
        kernel=spec,
        max_iter=as_count(max_iter, "max_iter"),
        distances=metric == "precomputed",
    )
    centers, labels, populations, n_iter, converged, h = clustering
    centers = add_offset(centers, offset, dtype)
    return MedoidShiftResult(medoids, centers, labels, populations, n_iter, converged, h)


def estimate_bandwidth(
    X: Any, *, quantile: float = 0.3, n_samples: int | None = None, backend: BackendLike = "auto"
) -> float:
    """scikit-learn's ``estimate_bandwidth``: the mean distance of each
    point to its k-th nearest neighbour (the point itself first),
    ``k = max(1, ⌊quantile·n⌋)``, on a fixed random subset of ``n_samples``
    points if given. O(n²d): give ``n_samples`` for large data.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        The points.
    quantile : float, default=0.3
        Which neighbour: ``k = max(1, ⌊quantile·n⌋)``.
    n_samples : int or None, default=None
        Size of the fixed random subset used; every point when None.
    backend : {"auto", "gpu", "cpu"} or Engine, default="auto"
        Where the op runs: a backend name (one shared engine per name) or an
        :class:`~locus.Engine`.

    Returns
    -------
    float
        The bandwidth.

    Examples
    --------
    >>> import numpy as np, locus
    >>> round(locus.estimate_bandwidth([[0.0], [1.0], [2.0], [3.0]], quantile=0.5, backend="cpu"), 3)
    1.0
    """
    _, x, _ = centre(X, name="X")
    if n_samples is not None:
        n_samples = as_count(n_samples, "n_samples")
    return float(
        _locus.estimate_bandwidth(_engine(backend), x, quantile=float(quantile), n_samples=n_samples)
    )
