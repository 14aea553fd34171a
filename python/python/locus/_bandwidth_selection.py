"""Per-feature bandwidths by leave-one-out: :func:`loo_error_per_feature`
and :func:`select_bandwidths_per_feature` (numpy in, numpy out; points
and targets each centred on their float64 mean before rounding to
float32, which changes no leave-one-out error)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from . import _locus
from ._arrays import as_count
from ._centre import centre
from ._engine import BackendLike
from ._errors import InputError
from ._functions import _engine
from ._kernels import ProductKernel

__all__ = ["PerFeatureBandwidths", "loo_error_per_feature", "select_bandwidths_per_feature"]


class PerFeatureBandwidths(NamedTuple):
    """What :func:`~locus.select_bandwidths_per_feature` found."""

    bandwidths: np.ndarray
    """The chosen bandwidth of each feature (``1e18``: a feature dropped)."""
    error: float
    """The leave-one-out error there."""
    empty_rows: int
    """Points without a prediction there."""
    n_iter: int
    """Quasi-Newton iterations taken."""
    converged: bool
    """Whether a tolerance stopped the search (not ``max_iter``)."""
    trace: np.ndarray
    """The error at the start and after each iteration."""
    initial: np.ndarray
    """The starting bandwidths."""


def _profile(kernel: Any) -> str:
    if isinstance(kernel, ProductKernel) or not isinstance(kernel, str):
        raise InputError(
            f"per-feature bandwidths need a profile name (the bandwidths make the metric), got {kernel!r}"
        )
    return kernel


def _inputs(X: Any, y: Any) -> tuple[np.ndarray, np.ndarray | None]:
    _, x, _ = centre(X, name="X")
    if y is None:
        return x, None
    y2 = np.asarray(y)
    if y2.ndim == 1:
        y2 = y2.reshape(-1, 1)
    _, yc, _ = centre(y2, name="y")
    return x, yc


def loo_error_per_feature(
    X: Any,
    y: Any = None,
    *,
    bandwidths: Any,
    kernel: str = "gaussian",
    backend: BackendLike = "auto",
) -> tuple[float, np.ndarray]:
    """The leave-one-out error of the local mean under per-feature
    bandwidths ``h`` (``K = k(Σ_a ((x_a − x'_a)/h_a)²)``, a diagonal
    metric), ``mean_i ‖y_i − Σ_{j≠i} K_ij y_j / Σ_{j≠i} K_ij‖²`` over the
    points that have a prediction, and its gradient with respect to
    ``log h_a``, from one fused pass.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        The points.
    y : array-like of shape (n_samples,) or (n_samples, n_targets), default=None
        The targets; None: the points themselves (self-supervised).
    bandwidths : array-like of shape (n_features,)
        One positive bandwidth per feature.
    kernel : str, default="gaussian"
        Any profile but ``"uniform"`` (whose error has no gradient).
    backend : {"auto", "gpu", "cpu"} or Engine, default="auto"
        Where the op runs.

    Returns
    -------
    error : float
        The leave-one-out error (NaN when no point has a prediction).
    gradient : numpy.ndarray of shape (n_features,)
        ``∂error/∂log h_a``.

    Examples
    --------
    >>> import numpy as np, locus
    >>> X = np.array([[0.0, 0.0], [1.0, 0.5], [2.0, 1.0], [3.0, 0.0]])
    >>> err, grad = locus.loo_error_per_feature(X, X[:, 0], bandwidths=[1.0, 2.0], backend="cpu")
    >>> grad.shape
    (2,)
    """
    x, yc = _inputs(X, y)
    h = [float(v) for v in np.asarray(bandwidths, dtype=np.float64).reshape(-1)]
    err, grad, _ = _locus.loo_error_per_feature(
        _engine(backend), x, yc, profile_name=_profile(kernel), bandwidths=h
    )
    return float(err), np.asarray(grad, dtype=np.float64)


def select_bandwidths_per_feature(
    X: Any,
    y: Any = None,
    *,
    kernel: str = "gaussian",
    max_iter: int = 100,
    tol: float = 1e-7,
    gradient_tol: float = 1e-5,
    initial: Any = None,
    bound_factor: float = 1e3,
    backend: BackendLike = "auto",
) -> PerFeatureBandwidths:
    """Per-feature bandwidths (a diagonal metric, "ARD") minimizing the
    leave-one-out error of the local mean (:func:`loo_error_per_feature`):
    bounded quasi-Newton (projected L-BFGS) on ``log h``, from each
    feature's standard deviation times the best factor of a short log grid
    around Scott's ``n^(-1/(d+4))``. A step may not leave more points
    without a prediction than the start does. A feature whose bandwidth
    ends above ten times its standard deviation (or on its upper bound)
    is dropped (bandwidth ``1e18``) when that does not raise the error.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        The points.
    y : array-like of shape (n_samples,) or (n_samples, n_targets), default=None
        The targets; None: the points themselves (self-supervised).
    kernel : str, default="gaussian"
        Any profile but ``"uniform"``.
    max_iter : int, default=100
        Most quasi-Newton iterations.
    tol : float, default=1e-7
        Stop when an iteration lowers the error by at most this fraction.
    gradient_tol : float, default=1e-5
        Stop when the projected gradient in ``log h``, relative to the
        error, is at most this in every feature.
    initial : array-like of shape (n_features,), default=None
        Starting bandwidths instead of the grid's.
    bound_factor : float, default=1e3
        Each bandwidth stays within this factor of its start.
    backend : {"auto", "gpu", "cpu"} or Engine, default="auto"
        Where the op runs.

    Returns
    -------
    PerFeatureBandwidths
        The bandwidths, the error, the iterations and the trace.

    Examples
    --------
    >>> import numpy as np, locus
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-1, 1, size=(200, 2))
    >>> y = np.sin(3 * X[:, 0])  # the second feature is noise
    >>> r = locus.select_bandwidths_per_feature(X, y, backend="cpu")
    >>> bool(r.bandwidths[1] > 5 * r.bandwidths[0])
    True
    """
    x, yc = _inputs(X, y)
    start = None
    if initial is not None:
        start = [float(v) for v in np.asarray(initial, dtype=np.float64).reshape(-1)]
    out = _locus.select_bandwidths_per_feature(
        _engine(backend),
        x,
        yc,
        profile_name=_profile(kernel),
        max_iter=as_count(max_iter, "max_iter"),
        tol=float(tol),
        gradient_tol=float(gradient_tol),
        initial=start,
        bound_factor=float(bound_factor),
    )
    h, err, empty, n_iter, converged, trace, first = out
    return PerFeatureBandwidths(
        bandwidths=np.asarray(h, dtype=np.float64),
        error=float(err),
        empty_rows=int(empty),
        n_iter=int(n_iter),
        converged=bool(converged),
        trace=np.asarray(trace, dtype=np.float64),
        initial=np.asarray(first, dtype=np.float64),
    )
