"""Variable bandwidths: sample-point (one bandwidth per key) and balloon
(one per query) densities and local means, and the k-nearest-neighbour
rules that set them. :func:`~locus.log_density`, :func:`~locus.density`
and :func:`~locus.local_mean` come here when given ``bandwidths``.

Per key, ``K_ij = h_j^(−d)·k(‖q_i − x_j‖²/h_j²)``: each key normalized by
its own bandwidth, so the density integrates to 1 and a local mean is the
ratio of two such densities. Per query (balloon),
``K_ij = k(‖q_i − x_j‖²/h_i²)``, the density divided by ``N·c_k·h_i^d``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _locus
from ._arrays import as_dtype, as_float32, as_values, result_dtype
from ._centre import add_offset, centre
from ._engine import BackendLike, engine_for
from ._errors import InputError

__all__ = ["knn_bandwidths", "balloon_bandwidths"]


def _engine(backend: BackendLike) -> Any:
    """The Rust engine behind ``backend`` (the functions' one helper)."""
    return engine_for(backend)._inner


def check_variable(bandwidth: Any, kernel: Any, weights: Any = None, metric: str = "euclidean") -> str:
    """What variable bandwidths combine with: a profile name, no
    ``bandwidth``, no ``weights``, the Euclidean metric; the profile."""
    if bandwidth is not None:
        raise InputError("give either bandwidth or bandwidths, not both")
    if not isinstance(kernel, str):
        raise InputError("bandwidths take a profile name as kernel, not a product kernel")
    if weights is not None:
        raise InputError("bandwidths cannot be combined with weights")
    if metric != "euclidean":
        raise InputError("bandwidths take the euclidean metric")
    return kernel


def variable_log_density(
    queries: Any,
    keys: Any,
    bandwidths: Any,
    *,
    profile: str,
    balloon: bool,
    backend: BackendLike,
) -> np.ndarray:
    """``ln p̂`` at ``queries`` with per-key (``balloon``: per-query)
    ``bandwidths``."""
    _, x, (q,) = centre(keys, (queries, "queries"))
    h = as_float32(bandwidths, "bandwidths", (1,))
    return _locus.log_density_variable(_engine(backend), q, x, h, profile=profile, per_query=balloon)


def variable_local_mean(
    queries: Any,
    keys: Any,
    values: Any,
    bandwidths: Any,
    *,
    profile: str,
    balloon: bool,
    backend: BackendLike,
) -> np.ndarray:
    """Local means at ``queries`` with per-key (``balloon``: per-query)
    ``bandwidths``; the keys themselves when ``values`` is None."""
    dtype = result_dtype(queries, keys, values)
    offset, x, (q,) = centre(keys, (queries, "queries"))
    h = as_float32(bandwidths, "bandwidths", (1,))
    e = _engine(backend)
    if values is not None:
        y, vector = as_values(values, "values")
        out, _ = _locus.local_mean_variable(e, q, x, y, h, profile=profile, per_query=balloon)
        return as_dtype(out[:, 0] if vector else out, dtype)
    # The keys' own local means are positions: the offset comes back.
    out, _ = _locus.local_mean_variable(e, q, x, x, h, profile=profile, per_query=balloon)
    return add_offset(out, offset, dtype)


def knn_bandwidths(
    points: Any,
    k: int,
    *,
    alpha: float = 1.0,
    backend: BackendLike = "auto",
) -> np.ndarray:
    """Sample-point bandwidths by the k-nearest-neighbour rule:
    ``h_j = alpha·r_k(j)``, the distance from point ``j`` to its ``k``-th
    nearest other point (Breiman, Meisel & Purcell; Silverman, §5.3), for
    the ``bandwidths`` of :func:`log_density`, :func:`density` and
    :func:`local_mean`.

    Parameters
    ----------
    points : array-like of shape (n_points, n_features)
        The points (N × d).
    k : int
        Which neighbour (``1 <= k < N``).
    alpha : float, default=1.0
        The factor (finite, > 0).
    backend : {"auto", "gpu", "cpu"} or Engine, default="auto"
        Where the op runs: a backend name (one shared engine per name) or an
        :class:`~locus.Engine`.

    Returns
    -------
    numpy.ndarray of shape (n_points,)
        The bandwidths (float32).

    Examples
    --------
    >>> import locus
    >>> locus.knn_bandwidths([[0.0], [1.0], [3.0]], 1, alpha=2.0, backend="cpu").tolist()
    [2.0, 2.0, 4.0]
    """
    # Distances do not move with the points: centred, float64 points keep
    # their precision in float32.
    _, x, _ = centre(points, name="points")
    return _locus.knn_bandwidths(_engine(backend), x, k, alpha)


def balloon_bandwidths(
    queries: Any,
    keys: Any,
    k: int,
    *,
    alpha: float = 1.0,
    backend: BackendLike = "auto",
) -> np.ndarray:
    """Balloon bandwidths by the k-nearest-neighbour rule:
    ``h_i = alpha·r_k(q_i)``, the distance from query ``i`` to its
    ``k``-th nearest key (Loftsgaarden & Quesenberry), for the
    ``bandwidths`` of :func:`log_density`, :func:`density` and
    :func:`local_mean` with ``balloon=True``.

    Parameters
    ----------
    queries : array-like of shape (n_queries, n_features)
        The query points (M × d).
    keys : array-like of shape (n_keys, n_features)
        The keys (N × d).
    k : int
        Which neighbour (``1 <= k <= N``).
    alpha : float, default=1.0
        The factor (finite, > 0).
    backend : {"auto", "gpu", "cpu"} or Engine, default="auto"
        Where the op runs: a backend name (one shared engine per name) or an
        :class:`~locus.Engine`.

    Returns
    -------
    numpy.ndarray of shape (n_queries,)
        The bandwidths (float32).

    Examples
    --------
    >>> import locus
    >>> locus.balloon_bandwidths([[0.5]], [[0.0], [1.0], [3.0]], 2, backend="cpu").tolist()
    [0.5]
    """
    _, x, (q,) = centre(keys, (queries, "queries"))
    return _locus.balloon_bandwidths(_engine(backend), q, x, k, alpha)


def is_adaptive(bandwidth: Any) -> bool:
    """Whether an estimator's ``bandwidth`` asks for per-point bandwidths:
    ``"adaptive"``, or an array (one per point)."""
    if isinstance(bandwidth, str):
        return bandwidth == "adaptive"
    return bandwidth is not None and np.ndim(bandwidth) == 1


def point_bandwidths(est: Any, X: np.ndarray, backend: Any) -> np.ndarray:
    """The per-point bandwidths of an estimator whose ``bandwidth`` is
    ``"adaptive"`` (the k-NN rule, ``adaptive_alpha`` times the distance to
    the ``adaptive_k``-th nearest other point) or an array of one per
    point of ``X`` (float32)."""
    # The estimators' checks need scikit-learn; the functions here do not.
    from ._base import check_bandwidth, check_int

    if isinstance(est.bandwidth, str):
        k = check_int(est.adaptive_k, "adaptive_k", minimum=1)
        alpha = check_bandwidth(est.adaptive_alpha, "adaptive_alpha")
        if k >= len(X):
            raise InputError(f"adaptive_k={k} needs more than {k} points, got {len(X)}")
        return knn_bandwidths(X, k, alpha=alpha, backend=backend)
    h = as_float32(est.bandwidth, "bandwidth", (1,))
    if len(h) != len(X):
        raise InputError(f"bandwidth has {len(h)} values for {len(X)} points: give one per point")
    if not (np.isfinite(h).all() and (h > 0).all()):
        raise InputError("every per-point bandwidth must be finite and > 0")
    return h
