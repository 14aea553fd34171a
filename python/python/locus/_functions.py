"""The ops as functions: numpy in, numpy out.

Every function converts its array inputs once to C-contiguous ``float32``
(no copy when they already are), runs on the engine named by ``backend``
(``"auto"``, ``"gpu"``, ``"cpu"`` or a :class:`~locus.Engine`) with the
GIL released, and returns numpy arrays in the inputs' floating dtype:
float32 for float32 inputs (the engine's result, no copy), float64 when any
input is float64 (or integer, or a Python list): the float32 result widened.
The engine computes in float32 either way; see docs/numerics.md. Where
an op is unchanged by a common shift of keys and queries (local means of
values, densities, neighbours, kernel matrices, MeanShift), float64 keys
and queries are first centred near the keys' float64 mean and rounded to
float32 once, so a common offset (``1e6 + x``) costs no accuracy;
positions computed from them (the keys' own local means, MeanShift's
centres, local PCA's means, imputed coordinates) get the offset back in
float64. Attention (:func:`kernel_softmax`, :func:`feature_local_mean`)
is not centred: dot products change with a shift. Kernels: ``gaussian``, ``epanechnikov``, ``uniform`` (``flat``,
``tophat``), ``triangular`` (``linear``), ``biweight`` (``quartic``),
``laplacian`` (``exponential``), ``cauchy``, ``cosine``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _locus
from ._arrays import (
    as_count,
    as_degree,
    as_dtype,
    as_float32,
    as_matrix,
    as_values,
    fit_result,
    result_dtype,
)
from ._centre import add_offset, centre
from ._compat import metric_spec
from ._engine import BackendLike, engine_for
from ._errors import InputError
from ._kernels import ProductKernel, kernel_arg
from ._results import KNNResult, LocalPCAResult
from ._variable import _engine, check_variable, variable_local_mean, variable_log_density

__all__ = [
    "local_mean",
    "self_local_mean",
    "local_polynomial",
    "local_pca",
    "score",
    "impute",
    "kernel_matrix",
    "density",
    "log_density",
    "knn",
    "kernel_softmax",
    "feature_local_mean",
]



def local_mean(
    queries: Any,
    keys: Any,
    values: Any = None,
    *,
    bandwidth: float | None = None,
    kernel: str | ProductKernel = "gaussian",
    backend: BackendLike = "auto",
    bandwidths: Any = None,
    balloon: bool = False,
) -> np.ndarray:
    """Nadaraya–Watson local means ``Σ_j K(q, x_j) y_j / Σ_j K(q, x_j)``.

    ``queries`` (M × d), ``keys`` (N × d), ``values`` (N × q, or N for a
    1-D result; the keys themselves when omitted, i.e. one MeanShift step
    of the queries). A row whose neighbourhood is empty (a compact kernel
    and no key within ``bandwidth``) is NaN. Exponential kernels are
    accumulated in the log domain, so a tiny bandwidth gives the nearest
    keys' average, not NaN.

    Parameters
    ----------
    queries : array-like of shape (n_queries, n_features)
        The query points (M × d).
    keys : array-like of shape (n_keys, n_features)
        The keys (N × d).
    values : array-like of shape (n_keys, n_values) or (n_keys,), default=None
        The values averaged; the keys themselves when None (one MeanShift
        step of the queries).
    bandwidth : float or None, default=None
        The kernel's bandwidth ``h`` (finite, > 0); required with a profile
        name, None with a :class:`~locus.ProductKernel` (its blocks carry
        theirs).
    kernel : str or ProductKernel, default="gaussian"
        A profile name (:doc:`/user_guide/functions`, "Kernels"), or a
        :class:`~locus.ProductKernel`.
    backend : {"auto", "gpu", "cpu"} or Engine, default="auto"
        Where the op runs: a backend name (one shared engine per name) or an
        :class:`~locus.Engine`.
    bandwidths : array-like of shape (n_keys,), default=None
        Variable (sample-point) bandwidths, one per key, in place of
        ``bandwidth``: ``K_ij = h_j^(−d)·k(‖q_i − x_j‖/h_j)``, the weights
        of the sample-point density (:func:`log_density`), so the local
        mean is the ratio of two such densities. A profile name.
    balloon : bool, default=False
        ``bandwidths`` has one bandwidth per query:
        ``K_ij = k(‖q_i − x_j‖/h_i)``.

    Returns
    -------
    numpy.ndarray of shape (n_queries, n_values) or (n_queries,)
        The local means (1-D for 1-D values), in the inputs' floating dtype;
        NaN rows for empty neighbourhoods.

    Examples
    --------
    >>> import numpy as np, locus
    >>> keys = np.array([[0.0], [1.0], [10.0]], dtype=np.float32)
    >>> locus.local_mean([[0.0], [20.0]], keys, [1.0, 3.0, 100.0], bandwidth=0.5,
    ...                  kernel="epanechnikov", backend="cpu")
    array([ 1., nan])
    """
    if balloon and bandwidths is None:
        raise InputError("balloon=True needs bandwidths (one per query)")
    if bandwidths is not None:
        profile = check_variable(bandwidth, kernel)
        return variable_local_mean(
            queries, keys, values, bandwidths, profile=profile, balloon=bool(balloon), backend=backend
        )
    dtype = result_dtype(queries, keys, values)
    offset, x, (q,) = centre(keys, (queries, "queries"))
    if values is not None:
        y, vector = as_values(values, "values")
        out, _ = _locus.local_mean(_engine(backend), q, x, y, kernel=kernel_arg(kernel, bandwidth))
        return as_dtype(out[:, 0] if vector else out, dtype)
    # The keys' own local means are positions: the offset comes back.
    out, _ = _locus.local_mean(_engine(backend), q, x, x, kernel=kernel_arg(kernel, bandwidth))
    return add_offset(out, offset, dtype)


def local_polynomial(
    queries: Any,
    keys: Any,
    values: Any,
    *,
    bandwidth: float | None = None,
    kernel: str | ProductKernel = "gaussian",
    degree: int = 1,
    return_slopes: bool = False,
    backend: BackendLike = "auto",
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Local polynomial regression: ``degree=0`` is the Nadaraya–Watson
    local mean, ``degree=1`` local linear regression (per query the
    kernel-weighted least-squares fit of ``y ≈ a + bᵀ(x − q)``, giving
    ``a``; statsmodels' ``KernelReg(reg_type="ll")``).

    ``queries`` (M × d), ``keys`` (N × d, d ≤ 64), ``values`` (N × q, or N
    for a 1-D result). With ``return_slopes`` (degree 1) also returns the
    local slopes ``b``, the gradient estimate: ``M × q × d`` (``M × d`` for
    1-D values). Rows with an empty neighbourhood are NaN. Where the keys
    around a query span fewer than d directions, the fit uses the
    directions they span (slopes 0 across the others).

    Parameters
    ----------
    queries : array-like of shape (n_queries, n_features)
        The query points (M × d).
    keys : array-like of shape (n_keys, n_features)
        The keys (N × d, d ≤ 64).
    values : array-like of shape (n_keys, n_values) or (n_keys,)
        The values fitted.
    bandwidth : float or None, default=None
        The kernel's bandwidth ``h`` (finite, > 0); required with a profile
        name, None with a :class:`~locus.ProductKernel` (its blocks carry
        theirs).
    kernel : str or ProductKernel, default="gaussian"
        A profile name (:doc:`/user_guide/functions`, "Kernels"), or a
        :class:`~locus.ProductKernel`.
    degree : {0, 1}, default=1
        0: the local mean; 1: local linear regression.
    return_slopes : bool, default=False
        Also return the local slopes (``degree=1`` only).
    backend : {"auto", "gpu", "cpu"} or Engine, default="auto"
        Where the op runs: a backend name (one shared engine per name) or an
        :class:`~locus.Engine`.

    Returns
    -------
    fit : numpy.ndarray of shape (n_queries, n_values) or (n_queries,)
        The local fit ``a`` at each query (1-D for 1-D values).
    slopes : numpy.ndarray of shape (n_queries, n_values, n_features) or (n_queries, n_features)
        The local slopes ``b``, only with ``return_slopes``.

    Examples
    --------
    >>> import numpy as np, locus
    >>> x = np.linspace(0, 1, 101)[:, None]
    >>> locus.local_polynomial([[0.0], [1.0]], x, 2 * x[:, 0] + 1, bandwidth=0.1,
    ...                        backend="cpu").round(4)
    array([1., 3.])
    """
    dtype = result_dtype(queries, keys, values)
    _, x, (q,) = centre(keys, (queries, "queries"))
    y, vector = as_values(values, "values")
    degree = as_degree(degree, return_slopes)
    fit, slopes, _, _ = _locus.local_polynomial(
        _engine(backend), q, x, y, kernel=kernel_arg(kernel, bandwidth), degree=degree
    )
    fit = as_dtype(fit, dtype)
    slopes = None if slopes is None else as_dtype(slopes, dtype)
    return fit_result(fit, slopes, vector, return_slopes)


def local_pca(
    queries: Any,
    keys: Any,
    *,
    bandwidth: float | None = None,
    n_components: int = 1,
    kernel: str | ProductKernel = "gaussian",
    backend: BackendLike = "auto",
) -> LocalPCAResult:
    """Local PCA: at each query the kernel-weighted mean and covariance of
    the keys around it, and the covariance's leading ``n_components``
    eigenvalues and eigenvectors (local principal directions). Rows with
    an empty neighbourhood are NaN.

    Parameters
    ----------
    queries : array-like of shape (n_queries, n_features)
        The query points (M × d).
    keys : array-like of shape (n_keys, n_features)
        The keys (N × d).
    bandwidth : float or None, default=None
        The kernel's bandwidth ``h`` (finite, > 0); required with a profile
        name, None with a :class:`~locus.ProductKernel` (its blocks carry
        theirs).
    n_components : int, default=1
        How many leading eigenpairs per query (≤ d).
    kernel : str or ProductKernel, default="gaussian"
        A profile name (:doc:`/user_guide/functions`, "Kernels"), or a
        :class:`~locus.ProductKernel`.
    backend : {"auto", "gpu", "cpu"} or Engine, default="auto"
        Where the op runs: a backend name (one shared engine per name) or an
        :class:`~locus.Engine`.

    Returns
    -------
    LocalPCAResult
        ``(means, variances, components)``: ``(M × d)``, ``(M × k)``,
        ``(M × k × d)``, in the inputs' floating dtype.

    Examples
    --------
    >>> import numpy as np, locus
    >>> t = np.linspace(0, 1, 50)
    >>> keys = np.stack([t, 2 * t], axis=1)
    >>> r = locus.local_pca([[0.5, 1.0]], keys, bandwidth=0.3, backend="cpu")
    >>> r.components[0, 0].round(3)
    array([0.447, 0.894])
    """
    dtype = result_dtype(queries, keys)
    offset, x, (q,) = centre(keys, (queries, "queries"))
    k = as_count(n_components, "n_components")
    means, variances, components, _ = _locus.local_pca(
        _engine(backend), q, x, kernel=kernel_arg(kernel, bandwidth), components=k
    )
    means = add_offset(means, offset, dtype)
    return LocalPCAResult(means, as_dtype(variances, dtype), as_dtype(components, dtype))


def impute(
    X: Any,
    keys: Any = None,
    *,
    bandwidth: float | None = None,
    kernel: str | ProductKernel = "gaussian",
    iterations: int = 1,
    backend: BackendLike = "auto",
) -> np.ndarray:
    """Fills the missing (NaN) entries of ``X`` (M × d) by local means:
    entry ``(i, c)`` becomes the kernel-weighted mean of coordinate ``c``
    over the rows of ``keys`` (default: ``X`` itself) that observe it, with
    distances over the coordinates both rows observe, rescaled as
    scikit-learn's ``nan_euclidean``. ``iterations > 1`` re-imputes with
    distances between the completed rows. An entry no weighted row
    observes gets the column mean of ``keys``. Returns a copy in ``X``'s
    floating dtype (computed in float32).

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        The rows to complete; NaN marks a missing entry.
    keys : array-like of shape (n_keys, n_features), default=None
        The rows to take values from (NaN where missing); ``X`` when None.
    bandwidth : float or None, default=None
        The kernel's bandwidth ``h`` (finite, > 0); required with a profile
        name, None with a :class:`~locus.ProductKernel` (its blocks carry
        theirs).
    kernel : str or ProductKernel, default="gaussian"
        A profile name (:doc:`/user_guide/functions`, "Kernels"), or a
        :class:`~locus.ProductKernel`.
    iterations : int, default=1
        ``> 1`` re-imputes with distances between the completed rows.
    backend : {"auto", "gpu", "cpu"} or Engine, default="auto"
        Where the op runs: a backend name (one shared engine per name) or an
        :class:`~locus.Engine`.

    Returns
    -------
    numpy.ndarray of shape (n_samples, n_features)
        A completed copy of ``X``, in its floating dtype.

    Examples
    --------
    >>> import numpy as np, locus
    >>> X = np.array([[0.0, 0.0], [0.1, np.nan], [5.0, 5.0], [0.0, 0.2]])
    >>> locus.impute(X, bandwidth=1.0, kernel="uniform", backend="cpu")[1].round(6)
    array([0.1, 0.1])
    """
    dtype = result_dtype(X, keys)
    if keys is None:
        offset, q, _ = centre(X, name="X", nan=True)
        x = None
    else:
        offset, x, (q,) = centre(keys, (X, "X"), nan=True)
    it = as_count(iterations, "iterations")
    out, _, _ = _locus.impute(_engine(backend), q, x, kernel=kernel_arg(kernel, bandwidth), iterations=it)
    if offset is None:
        return as_dtype(out, dtype)
    # Imputed coordinates are positions; the observed ones are kept as given.
    filled = np.array(X, dtype=np.float64)
    missing = np.isnan(filled)
    filled[missing] = (out.astype(np.float64) + offset)[missing]
    return as_dtype(filled, dtype)


def score(
    queries: Any,
    keys: Any,
    *,
    bandwidth: float | None = None,
    kernel: str | ProductKernel = "gaussian",
    backend: BackendLike = "auto",
) -> np.ndarray:
    """The score ``∇ log f̂(q)`` of the kernel density estimate of ``keys``
    (M × d), through local means: ``(m(q) − q)/h²`` for the gaussian
    kernel; epanechnikov and biweight use their derivative's profile.
    ``q + σ²·score`` is Tweedie's denoising step for gaussian noise σ.

    Parameters
    ----------
    queries : array-like of shape (n_queries, n_features)
        The query points (M × d).
    keys : array-like of shape (n_keys, n_features)
        The keys (N × d).
    bandwidth : float or None, default=None
        The kernel's bandwidth ``h`` (finite, > 0); required with a profile
        name, None with a :class:`~locus.ProductKernel` (its blocks carry
        theirs).
    kernel : str or ProductKernel, default="gaussian"
        A profile name (:doc:`/user_guide/functions`, "Kernels"), or a
        :class:`~locus.ProductKernel`.
    backend : {"auto", "gpu", "cpu"} or Engine, default="auto"
        Where the op runs: a backend name (one shared engine per name) or an
        :class:`~locus.Engine`.

    Returns
    -------
    numpy.ndarray of shape (n_queries, n_features)
        ``∇ log f̂`` at each query, in the inputs' floating dtype.

    Examples
    --------
    >>> import numpy as np, locus
    >>> keys = np.array([[-1.0], [1.0]], dtype=np.float32)
    >>> locus.score([[0.0], [2.0]], keys, bandwidth=1.0, backend="cpu").round(3)
    array([[ 0.   ],
           [-1.036]])
    """
    dtype = result_dtype(queries, keys)
    _, x, (q,) = centre(keys, (queries, "queries"))
    out, _ = _locus.score(_engine(backend), q, x, kernel=kernel_arg(kernel, bandwidth))
    return as_dtype(out, dtype)


def self_local_mean(
    points: Any, *, bandwidth: float | None = None, kernel: str | ProductKernel = "gaussian", backend: BackendLike = "auto"
) -> np.ndarray:
    """Every point replaced by the local mean of the points around it
    (``K̃X``, one blurring MeanShift step).

    Parameters
    ----------
    points : array-like of shape (n_points, n_features)
        The points, keys and queries at once.
    bandwidth : float or None, default=None
        The kernel's bandwidth ``h`` (finite, > 0); required with a profile
        name, None with a :class:`~locus.ProductKernel` (its blocks carry
        theirs).
    kernel : str or ProductKernel, default="gaussian"
        A profile name (:doc:`/user_guide/functions`, "Kernels"), or a
        :class:`~locus.ProductKernel`.
    backend : {"auto", "gpu", "cpu"} or Engine, default="auto"
        Where the op runs: a backend name (one shared engine per name) or an
        :class:`~locus.Engine`.

    Returns
    -------
    numpy.ndarray of shape (n_points, n_features)
        Each point's local mean, in the points' floating dtype.

    Examples
    --------
    >>> import numpy as np, locus
    >>> locus.self_local_mean(np.array([[0.0], [1.0], [9.0]]), bandwidth=2.0,
    ...                       kernel="uniform", backend="cpu")
    array([[0.5],
           [0.5],
           [9. ]])
    """
    dtype = result_dtype(points)
    offset, x, _ = centre(points, name="points")
    out, _ = _locus.self_local_mean(_engine(backend), x, kernel=kernel_arg(kernel, bandwidth))
    return add_offset(out, offset, dtype)


def kernel_matrix(
    queries: Any,
    keys: Any = None,
    *,
    bandwidth: float | None = None,
    kernel: str | ProductKernel = "gaussian",
    normalize: str | None = None,
    laplacian: bool = False,
    backend: BackendLike = "auto",
) -> np.ndarray:
    """The kernel matrix ``K_ij = k(‖q_i − x_j‖ / h)`` (M × N).

    ``normalize="rows"`` gives ``D⁻¹K`` (rows sum to 1, computed in the log
    domain; NaN rows where a row has no mass). ``laplacian=True`` gives the
    graph Laplacian of ``queries`` (``keys`` must be omitted): ``D − K``, or
    ``I − D⁻¹K`` with ``normalize="rows"``. ``keys`` defaults to ``queries``.

    Parameters
    ----------
    queries : array-like of shape (n_queries, n_features)
        The query points (M × d).
    keys : array-like of shape (n_keys, n_features), default=None
        The keys; ``queries`` when None.
    bandwidth : float or None, default=None
        The kernel's bandwidth ``h`` (finite, > 0); required with a profile
        name, None with a :class:`~locus.ProductKernel` (its blocks carry
        theirs).
    kernel : str or ProductKernel, default="gaussian"
        A profile name (:doc:`/user_guide/functions`, "Kernels"), or a
        :class:`~locus.ProductKernel`.
    normalize : {None, "rows"}, default=None
        ``"rows"``: each row divided by its sum.
    laplacian : bool, default=False
        The graph Laplacian of ``queries`` instead (``keys`` omitted).
    backend : {"auto", "gpu", "cpu"} or Engine, default="auto"
        Where the op runs: a backend name (one shared engine per name) or an
        :class:`~locus.Engine`.

    Returns
    -------
    numpy.ndarray of shape (n_queries, n_keys)
        The (normalized) kernel matrix or Laplacian, in the inputs' floating
        dtype.

    Examples
    --------
    >>> import numpy as np, locus
    >>> x = np.array([[0.0], [1.0]])
    >>> locus.kernel_matrix(x, bandwidth=1.0, kernel="triangular", backend="cpu")
    array([[1., 0.],
           [0., 1.]])
    >>> locus.kernel_matrix(x, bandwidth=2.0, kernel="triangular", laplacian=True, backend="cpu")
    array([[ 0.5, -0.5],
           [-0.5,  0.5]])
    """
    if normalize not in (None, "rows"):
        raise InputError(f'normalize must be None or "rows", got {normalize!r}')
    dtype = result_dtype(queries, keys)
    e = _engine(backend)
    if laplacian:
        if keys is not None:
            raise InputError("laplacian=True is the Laplacian of the queries' graph; omit keys")
        _, q, _ = centre(queries, name="queries")
        lap = _locus.laplacian(
            e, q, kernel=kernel_arg(kernel, bandwidth), normalized=normalize == "rows"
        )
        return as_dtype(lap, dtype)
    if keys is None:
        _, q, _ = centre(queries, name="queries")
        x = q
    else:
        _, x, (q,) = centre(keys, (queries, "queries"))
    out, _ = _locus.kernel_matrix(
        e, q, x, kernel=kernel_arg(kernel, bandwidth), normalize=normalize == "rows"
    )
    return as_dtype(out, dtype)


def log_density(
    queries: Any,
    keys: Any,
    *,
    bandwidth: float | None = None,
    kernel: str | ProductKernel = "gaussian",
    weights: Any = None,
    backend: BackendLike = "auto",
    metric: str = "euclidean",
    p: float | None = None,
    bandwidths: Any = None,
    balloon: bool = False,
) -> np.ndarray:
    """``ln p̂(q)`` of the kernel density estimate on ``keys`` (float64),
    normalized with each kernel's exact constant in d dimensions (as
    scikit-learn's ``KernelDensity.score_samples``); optional non-negative
    per-key ``weights``. Computed in the log domain, so far from the data
    the value is finite and very negative for kernels with full support,
    and ``-inf`` outside the support of compact ones. ``metric`` (and
    ``p`` for ``"minkowski"``): the distance ``r`` of ``k(r/h)``, as
    scikit-learn's ``KernelDensity(metric=...)``, whose normalization
    (the Euclidean one, for every metric) it keeps.

    Parameters
    ----------
    queries : array-like of shape (n_queries, n_features)
        The query points (M × d).
    keys : array-like of shape (n_keys, n_features)
        The keys (N × d).
    bandwidth : float or None, default=None
        The kernel's bandwidth ``h`` (finite, > 0); required with a profile
        name, None with a :class:`~locus.ProductKernel` (its blocks carry
        theirs).
    kernel : str or ProductKernel, default="gaussian"
        A profile name (:doc:`/user_guide/functions`, "Kernels"), or a
        :class:`~locus.ProductKernel`.
    weights : array-like of shape (n_keys,), default=None
        Non-negative weights of the keys (not all zero); equal when None.
    backend : {"auto", "gpu", "cpu"} or Engine, default="auto"
        Where the op runs: a backend name (one shared engine per name) or an
        :class:`~locus.Engine`.
    metric : str, default="euclidean"
        The distance: ``"euclidean"`` (``"l2"``), ``"manhattan"``
        (``"cityblock"``, ``"l1"``), ``"chebyshev"`` (``"infinity"``),
        ``"minkowski"`` (with ``p``) or ``"haversine"`` (2 columns:
        latitude, longitude in radians; float64 points are then not
        centred).
    p : float or None, default=None
        Minkowski's exponent (``>= 1``; None for 2).
    bandwidths : array-like of shape (n_keys,), default=None
        Variable (sample-point) bandwidths, one per key, in place of
        ``bandwidth``: ``p̂(q) = (1/N) Σ_j k(‖q − x_j‖/h_j) / (c_k h_j^d)``,
        each key normalized by its own ``h_j`` (it integrates to 1);
        :func:`knn_bandwidths` sets them by the k-nearest-neighbour rule.
        A profile name, Euclidean, no ``weights``.
    balloon : bool, default=False
        ``bandwidths`` has one bandwidth per query (the balloon estimate
        ``p̂(q_i) = Σ_j k(‖q_i − x_j‖/h_i) / (N c_k h_i^d)``;
        :func:`balloon_bandwidths` sets them by the k-NN rule).

    Returns
    -------
    numpy.ndarray of shape (n_queries,)
        ``ln p̂`` at each query (float64).

    Examples
    --------
    >>> import numpy as np, locus
    >>> float(locus.log_density([[0.0]], [[0.0]], bandwidth=1.0, backend="cpu")[0])  # ln(1/√(2π))
    -0.9189385332046727
    """
    m = metric_spec(metric, p)
    if balloon and bandwidths is None:
        raise InputError("balloon=True needs bandwidths (one per query)")
    if bandwidths is not None:
        profile = check_variable(bandwidth, kernel, weights, m)
        return variable_log_density(
            queries, keys, bandwidths, profile=profile, balloon=bool(balloon), backend=backend
        )
    if m == "haversine":
        # Not translation invariant: no centring.
        q, x = as_matrix(queries, "queries"), as_matrix(keys, "keys")
    else:
        _, x, (q,) = centre(keys, (queries, "queries"))
    w = None if weights is None else as_float32(weights, "weights", (1,))
    kern = kernel_arg(kernel, bandwidth, m)
    return _locus.log_density(_engine(backend), q, x, kernel=kern, weights=w)


def density(
    queries: Any,
    keys: Any,
    *,
    bandwidth: float | None = None,
    kernel: str | ProductKernel = "gaussian",
    weights: Any = None,
    backend: BackendLike = "auto",
    metric: str = "euclidean",
    p: float | None = None,
    bandwidths: Any = None,
    balloon: bool = False,
) -> np.ndarray:
    """The kernel density estimate ``p̂(q)`` (float64): ``exp`` of
    :func:`log_density`, which may underflow to 0 far from the data.

    Parameters
    ----------
    queries : array-like of shape (n_queries, n_features)
        The query points (M × d).
    keys : array-like of shape (n_keys, n_features)
        The keys (N × d).
    bandwidth : float or None, default=None
        The kernel's bandwidth ``h`` (finite, > 0); required with a profile
        name, None with a :class:`~locus.ProductKernel` (its blocks carry
        theirs).
    kernel : str or ProductKernel, default="gaussian"
        A profile name (:doc:`/user_guide/functions`, "Kernels"), or a
        :class:`~locus.ProductKernel`.
    weights : array-like of shape (n_keys,), default=None
        Non-negative weights of the keys; equal when None.
    backend : {"auto", "gpu", "cpu"} or Engine, default="auto"
        Where the op runs: a backend name (one shared engine per name) or an
        :class:`~locus.Engine`.
    metric : str, default="euclidean"
        The distance: ``"euclidean"`` (``"l2"``), ``"manhattan"``
        (``"cityblock"``, ``"l1"``), ``"chebyshev"`` (``"infinity"``),
        ``"minkowski"`` (with ``p``) or ``"haversine"`` (2 columns:
        latitude, longitude in radians; float64 points are then not
        centred).
    p : float or None, default=None
        Minkowski's exponent (``>= 1``; None for 2).
    bandwidths : array-like of shape (n_keys,), default=None
        Variable (sample-point) bandwidths, one per key, in place of
        ``bandwidth`` (see :func:`log_density`).
    balloon : bool, default=False
        ``bandwidths`` has one bandwidth per query (see :func:`log_density`).

    Returns
    -------
    numpy.ndarray of shape (n_queries,)
        ``p̂`` at each query (float64).

    Examples
    --------
    >>> import numpy as np, locus
    >>> locus.density([[0.0], [0.5]], [[0.0]], bandwidth=1.0, kernel="tophat", backend="cpu")
    array([0.5, 0.5])
    """
    return np.exp(
        log_density(
            queries,
            keys,
            bandwidth=bandwidth,
            kernel=kernel,
            weights=weights,
            backend=backend,
            metric=metric,
            p=p,
            bandwidths=bandwidths,
            balloon=balloon,
        )
    )


def knn(
    queries: Any,
    keys: Any,
    k: int,
    *,
    backend: BackendLike = "auto",
    metric: str = "euclidean",
    p: float | None = None,
) -> KNNResult:
    """The ``k`` nearest keys of each query by Euclidean distance (or
    ``metric``: ``"manhattan"``, ``"chebyshev"``, ``"minkowski"`` with
    ``p``, ``"haversine"`` on (latitude, longitude) in radians), as
    scikit-learn's ``kneighbors`` and faiss return them: a
    :class:`~locus.KNNResult` ``(distances, indices)``, distances (M × k,
    in the inputs' floating dtype, computed in float32) and indices (M × k,
    int64), nearest first, equal distances in index order; on a GPU ``k``
    is at most 128.

    Parameters
    ----------
    queries : array-like of shape (n_queries, n_features)
        The query points (M × d).
    keys : array-like of shape (n_keys, n_features)
        The keys (N × d).
    k : int
        Neighbours per query (1 ≤ k ≤ N).
    backend : {"auto", "gpu", "cpu"} or Engine, default="auto"
        Where the op runs: a backend name (one shared engine per name) or an
        :class:`~locus.Engine`.
    metric : str, default="euclidean"
        The distance: ``"euclidean"`` (``"l2"``), ``"manhattan"``
        (``"cityblock"``, ``"l1"``), ``"chebyshev"`` (``"infinity"``),
        ``"minkowski"`` (with ``p``) or ``"haversine"`` (2 columns:
        latitude, longitude in radians; float64 points are then not
        centred).
    p : float or None, default=None
        Minkowski's exponent (``>= 1``; None for 2).

    Returns
    -------
    KNNResult
        ``(distances, indices)``, each ``(M × k)``.

    Examples
    --------
    >>> import numpy as np, locus
    >>> dist, idx = locus.knn([[0.9]], [[0.0], [1.0], [3.0]], 2, backend="cpu")
    >>> dist.round(3), idx
    (array([[0.1, 0.9]]), array([[1, 0]]))
    """
    dtype = result_dtype(queries, keys)
    m = metric_spec(metric, p)
    if m == "haversine":
        # Not translation invariant: no centring.
        q, x = as_matrix(queries, "queries"), as_matrix(keys, "keys")
    else:
        _, x, (q,) = centre(keys, (queries, "queries"))
    idx, dist = _locus.knn(_engine(backend), q, x, as_count(k, "k"), m)
    return KNNResult(as_dtype(dist, dtype), idx)


def kernel_softmax(
    phi: Any,
    psi: Any,
    values: Any,
    *,
    scale: float | None = None,
    causal: bool = False,
    backend: BackendLike = "auto",
) -> np.ndarray:
    """Attention as a local mean: ``softmax(scale·ΦΨᵀ)V`` in one pass
    (online softmax, the M × N scores never stored). 2-D ``(M, d)``,
    ``(N, d)``, ``(N, q)`` or batched 3-D ``(B, ·, ·)`` inputs; ``scale``
    defaults to ``1/√d``; ``causal`` lets query i see keys ``0..i``.

    Parameters
    ----------
    phi : array-like of shape (n_queries, d) or (batches, n_queries, d)
        The queries Φ.
    psi : array-like of shape (n_keys, d) or (batches, n_keys, d)
        The keys Ψ.
    values : array-like of shape (n_keys, q) or (batches, n_keys, q)
        The values V.
    scale : float or None, default=None
        The factor of the scores; ``1/√d`` when None.
    causal : bool, default=False
        Query i sees the keys ``0..i`` only.
    backend : {"auto", "gpu", "cpu"} or Engine, default="auto"
        Where the op runs: a backend name (one shared engine per name) or an
        :class:`~locus.Engine`.

    Returns
    -------
    numpy.ndarray of shape (n_queries, q) or (batches, n_queries, q)
        ``softmax(scale·ΦΨᵀ)V``, in the inputs' floating dtype.

    Examples
    --------
    >>> import numpy as np, locus
    >>> phi = np.eye(2, dtype=np.float32)
    >>> out = locus.kernel_softmax(phi, 10 * phi, [[1.0], [2.0]], scale=1.0, backend="cpu")
    >>> out.round(3)
    array([[1.],
           [2.]])
    """
    dtype = result_dtype(phi, psi, values)
    p = as_float32(phi, "phi", (2, 3))
    k = as_float32(psi, "psi", (2, 3))
    v = as_float32(values, "values", (2, 3))
    out = _locus.kernel_softmax(_engine(backend), p, k, v, scale=scale, causal=bool(causal))
    return as_dtype(out, dtype)


def feature_local_mean(
    phi: Any, psi: Any, values: Any, *, causal: bool = False, backend: BackendLike = "auto"
) -> np.ndarray:
    """The linear feature local mean ``(ΦΨᵀV) ⊘ (ΦΨᵀ1)`` in O(N) as
    ``Φ(ΨᵀV) ⊘ Φ(Ψᵀ1)`` (linear attention); features must be non-negative;
    NaN rows where a query has no weight. Shapes as :func:`kernel_softmax`.

    Parameters
    ----------
    phi : array-like of shape (n_queries, d) or (batches, n_queries, d)
        The queries' non-negative features Φ.
    psi : array-like of shape (n_keys, d) or (batches, n_keys, d)
        The keys' non-negative features Ψ.
    values : array-like of shape (n_keys, q) or (batches, n_keys, q)
        The values V.
    causal : bool, default=False
        Query i sees the keys ``0..i`` only (prefix sums).
    backend : {"auto", "gpu", "cpu"} or Engine, default="auto"
        Where the op runs: a backend name (one shared engine per name) or an
        :class:`~locus.Engine`.

    Returns
    -------
    numpy.ndarray of shape (n_queries, q) or (batches, n_queries, q)
        ``(ΦΨᵀV) ⊘ (ΦΨᵀ1)``, NaN rows where a query has no weight.

    Examples
    --------
    >>> import numpy as np, locus
    >>> locus.feature_local_mean([[1.0, 0.0]], [[1.0, 0.0], [3.0, 0.0]], [[2.0], [6.0]], backend="cpu")
    array([[5.]])
    """
    dtype = result_dtype(phi, psi, values)
    p = as_float32(phi, "phi", (2, 3))
    k = as_float32(psi, "psi", (2, 3))
    v = as_float32(values, "values", (2, 3))
    out, _ = _locus.feature_local_mean(_engine(backend), p, k, v, causal=bool(causal))
    return as_dtype(out, dtype)
