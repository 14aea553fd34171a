"""KernelDensity as a scikit-learn density estimator."""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from ._base import check_bandwidth, keep_params, kernel_params
from ._compat import check_algorithm, check_metric_columns, check_tolerance, metric_spec
from ._engine import check_backend
from ._errors import InputError
from ._fitted import FittedKeys, check_points, check_weights, weight_scale
from ._kernels import ProductKernel
from ._sampling import check_sampled, pick_keys, unit_draws
from ._variable import is_adaptive, point_bandwidths

__all__ = ["KernelDensity"]

# scikit-learn's kernel names, and the locus profiles they are.
_KERNELS = {
    "gaussian": "gaussian",
    "tophat": "uniform",
    "epanechnikov": "epanechnikov",
    "exponential": "laplacian",
    "linear": "triangular",
    "cosine": "cosine",
}
_OURS = ("uniform", "triangular", "laplacian", "biweight", "cauchy")


class KernelDensity(BaseEstimator):
    """Kernel density estimation on the GPU or the CPU, a drop-in for
    :class:`sklearn.neighbors.KernelDensity`, with its constructor
    arguments: exact sums over every point (no tree), computed in float32
    on points centred on their mean, densities in float64 agreeing with
    scikit-learn's to about 1e-5 relative.

    Parameters
    ----------
    bandwidth : float, {"scott", "silverman", "adaptive"} or array-like, default=1.0
        A positive number, or scikit-learn's rules ``n^(-1/(d+4))``,
        ``(n(d+2)/4)^(-1/(d+4))``; ``None`` with a :class:`~locus.ProductKernel`.
        ``"adaptive"``: the sample-point (variable-bandwidth) estimate, each
        point ``x_j`` with its own ``h_j = adaptive_alpha·r_k(j)``, the
        distance to its ``adaptive_k``-th nearest other point, and its own
        normalizer ``1/(c_k h_j^d)`` (it integrates to 1); an array of one
        bandwidth per training point gives them directly. Euclidean, not
        with a :class:`~locus.ProductKernel`.
    algorithm : {"auto", "kd_tree", "ball_tree"}, default="auto"
        Accepted for scikit-learn compatibility; a no-op (exact sums).
    kernel : str or ProductKernel, default="gaussian"
        scikit-learn's names (``gaussian``, ``tophat``, ``epanechnikov``,
        ``exponential``, ``linear``, ``cosine``: ``cos(πr/2)`` for
        ``r < 1``, normalized exactly in every dimension, where
        scikit-learn's constant for it is wrong in even dimensions, by a
        factor ``(4 − 8/π)/4`` in two), locus's
        (``uniform``, ``triangular``, ``laplacian``, ``biweight``,
        ``cauchy`` in one dimension), or a :class:`~locus.ProductKernel`
        with ``bandwidth=None`` (normalized block by block).
    metric : str, default="euclidean"
        The distance ``r`` of ``k(r/h)``: ``"euclidean"`` (``"l2"``),
        ``"manhattan"`` (``"cityblock"``, ``"l1"``), ``"chebyshev"``
        (``"infinity"``), ``"minkowski"`` (``p`` in ``metric_params``,
        default 2) or ``"haversine"`` (2 columns: latitude, longitude in
        radians; ``bandwidth`` in radians). The normalization is the
        Euclidean kernel's for every metric, as scikit-learn's (so the
        density of another metric is scikit-learn's, not a probability
        density under that metric). Another name raises
        :class:`~locus.InputError` at ``fit``.
    atol, rtol : float, default=0
        Accepted (non-negative). scikit-learn's tree stops refining within
        ``atol + rtol·p̂``; locus sums every term, so its only error is
        float32 rounding (about 1e-5 relative): at least as accurate as any
        tolerance at or above that, and no coarser for smaller ones.
    breadth_first : bool, default=True
        Accepted; a no-op (no tree).
    leaf_size : int, default=40
        Accepted; a no-op (no tree).
    metric_params : dict, default=None
        ``None`` or ``{"p": p}`` (Minkowski's exponent, ``p ≥ 1``).
    backend : {"auto", "gpu", "cpu"}, default="auto"
        Where the sums run.
    adaptive_k : int, default=10
        The neighbour of ``bandwidth="adaptive"``'s rule (``1 <= k < n``).
    adaptive_alpha : float, default=1.0
        The factor of ``bandwidth="adaptive"``'s rule (> 0).

    Attributes
    ----------
    bandwidth_ : float or ndarray of shape (n_samples,)
        The bandwidth used; per point (float64 copies of the float32
        values the sums use) with ``bandwidth="adaptive"`` or an array.
    X_ : ndarray of shape (n_samples, n_features)
        The points (float32 or float64 as given).
    sample_weight_ : ndarray of shape (n_samples,) or None
        The weights (float64).
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np, locus
    >>> X = np.random.default_rng(0).normal(size=(500, 2))
    >>> kde = locus.KernelDensity(bandwidth=0.5, backend="cpu").fit(X)
    >>> kde.score_samples([[0.0, 0.0], [9.0, 9.0]]).round(2)
    array([  -2.02, -208.1 ])
    """

    def __init__(
        self,
        *,
        bandwidth: Any = 1.0,
        algorithm: str = "auto",
        kernel: str = "gaussian",
        metric: str = "euclidean",
        atol: float = 0,
        rtol: float = 0,
        breadth_first: bool = True,
        leaf_size: int = 40,
        metric_params: dict | None = None,
        backend: str = "auto",
        adaptive_k: int = 10,
        adaptive_alpha: float = 1.0,
    ) -> None:
        keep_params(self, locals())

    def _profile(self) -> Any:
        if isinstance(self.kernel, ProductKernel):
            return self.kernel
        if self.kernel in _KERNELS:
            return _KERNELS[self.kernel]
        if self.kernel in _OURS:
            return self.kernel
        raise InputError(
            f"kernel must be one of {sorted(_KERNELS) + list(_OURS)}, got {self.kernel!r}"
        )

    def _check_params(self) -> None:
        check_backend(self.backend)
        self._profile()
        if self.algorithm not in ("auto", "kd_tree", "ball_tree"):
            raise InputError(
                f'algorithm must be "auto", "kd_tree" or "ball_tree", got {self.algorithm!r}'
            )
        check_algorithm(self.algorithm, self.leaf_size)
        self._metric = metric_spec(self.metric, None, self.metric_params)
        check_tolerance(self.atol, "atol")
        check_tolerance(self.rtol, "rtol")
        if not isinstance(self.breadth_first, (bool, np.bool_)):
            raise InputError(f"breadth_first must be a bool, got {self.breadth_first!r}")

    def fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> KernelDensity:
        """Keeps the points ``X`` (and non-negative ``sample_weight``) and
        prepares them on the engine.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : None
            Ignored.
        sample_weight : array-like of shape (n_samples,), default=None
            Weights of the points (non-negative, not all zero).

        Returns
        -------
        KernelDensity
            The fitted estimator.
        """
        self._check_params()
        X = check_points(self, X, reset=True)
        n, d = X.shape
        hs = None
        if is_adaptive(self.bandwidth):
            if isinstance(self.kernel, ProductKernel):
                raise InputError("per-point bandwidths take a profile name as kernel, not a ProductKernel")
            if self._metric != "euclidean":
                raise InputError(f"per-point bandwidths take the euclidean metric, not {self.metric!r}")
            hs = point_bandwidths(self, X, self.backend)
            h = None
        elif isinstance(self.kernel, ProductKernel):
            # The blocks carry the bandwidths (kernel_params refuses another).
            h = kernel_params(self.bandwidth, self.kernel)["bandwidth"]
        elif isinstance(self.bandwidth, str):
            if self.bandwidth == "scott":
                h = n ** (-1 / (d + 4))
            elif self.bandwidth == "silverman":
                h = (n * (d + 2) / 4) ** (-1 / (d + 4))
            else:
                raise ValueError(
                    'bandwidth must be a number, "scott", "silverman", "adaptive" or an array '
                    f"of one per point, got {self.bandwidth!r}"
                )
        else:
            h = check_bandwidth(self.bandwidth)
        values = None
        if sample_weight is not None:
            sample_weight = check_weights(sample_weight, X)
            scaled = sample_weight * weight_scale(sample_weight)
            values = scaled.astype(np.float32).reshape(-1, 1)
            # ln(N / Σw) for the weights as the engine holds them.
            self._log_weight_norm = math.log(n) - math.log(float(values.sum(dtype=np.float64)))
        self.bandwidth_ = hs.astype(np.float64) if hs is not None else None if h is None else float(h)
        self.X_ = X
        self.sample_weight_ = sample_weight
        check_metric_columns(self._metric, d)
        self._fitted = FittedKeys(
            X,
            self.backend,
            values,
            sample_weight=sample_weight,
            centre=self._metric != "haversine",
            bandwidths=hs,
        )
        self._fitted.keyset()
        return self

    def score_samples(self, X: Any) -> np.ndarray:
        """``ln p̂(x)`` for each sample (float64), normalized to be a
        probability density: ``-inf`` outside a compact kernel's support.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The samples.

        Returns
        -------
        numpy.ndarray of shape (n_samples,)
            The log-densities (float64).
        """
        check_is_fitted(self)
        X = check_points(self, X, reset=False)
        fitted = self._fitted
        q = fitted.queries(X)
        ks = fitted.keyset()
        if fitted.bandwidths is not None:
            return self._variable_score(ks, q)
        kw = {"bandwidth": self.bandwidth_, "kernel": self._profile(), "metric": self._metric}
        if fitted.values is None:
            return ks.log_density(q, **kw)
        # Σ_j w_j K_j / Σ_j w_j = (Σ_j K_j / N)·(u/s)·(N / Σ_j w_j), u/s the
        # local mean of the weights.
        lp = ks.log_density(q, **kw)
        _, s, u = ks.row_states(q, **kw)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.log(u[:, 0] / s)
        return np.where(s > 0, lp + ratio + self._log_weight_norm, -math.inf)

    def _variable_score(self, ks: Any, q: np.ndarray) -> np.ndarray:
        """``score_samples`` with per-point bandwidths: the key set's
        sample-point ``ln p̂``; weighted, times the local mean of the
        weights under the same kernels, over their mean."""
        profile = cast(str, self._profile())
        lp = ks.log_density_variable(q, kernel=profile)
        if self._fitted.values is None:
            return cast(np.ndarray, lp)
        mean_w = ks.local_mean_variable(q, kernel=profile)[:, 0].astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.log(mean_w)
        return np.where(mean_w > 0, lp + ratio + self._log_weight_norm, -math.inf)

    def score(self, X: Any, y: Any = None) -> float:
        """The total log-likelihood of ``X``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The samples.
        y : None
            Ignored.

        Returns
        -------
        float
            ``Σ ln p̂(x)`` over the samples.
        """
        return float(np.sum(self.score_samples(X)))

    def sample(self, n_samples: int = 1, random_state: Any = None) -> np.ndarray:
        """Random samples from the fitted density, for every kernel (where
        scikit-learn samples only the gaussian and tophat ones).

        Each sample picks a training point with probability proportional to
        its ``sample_weight`` (uniformly without) and adds the bandwidth
        times a draw of the kernel's own density in ``d`` dimensions: a
        direction uniform on the sphere times an exactly drawn radius
        (``locus._sampling``); with per-point bandwidths, the picked
        point's own. The gaussian and tophat kernels draw from
        the same random stream as scikit-learn, so the same
        ``random_state`` gives scikit-learn's samples. A
        :class:`~locus.ProductKernel` draws each block on its own.

        Parameters
        ----------
        n_samples : int, default=1
            Number of samples (``>= 1``).
        random_state : int, RandomState instance or None, default=None
            As :func:`sklearn.utils.check_random_state` takes it.

        Returns
        -------
        ndarray of shape (n_samples, n_features), float64

        Raises
        ------
        InputError
            The cauchy kernel in two or more dimensions (it has no density
            there: ``score_samples`` refuses it too), or ``n_samples`` not
            a positive integer.
        NotImplementedError
            A metric other than the Euclidean distance.
        """
        check_is_fitted(self)
        if isinstance(n_samples, (bool, np.bool_)) or not isinstance(n_samples, (int, np.integer)) or n_samples < 1:
            raise InputError(f"n_samples must be an integer >= 1, got {n_samples!r}")
        if metric_spec(self.metric, None, self.metric_params) != "euclidean":
            raise NotImplementedError(f"sampling is implemented for the Euclidean metric only, not {self.metric!r}")
        data = np.asarray(self.X_, dtype=np.float64)
        n_keys, d = data.shape
        profile = self._profile()
        rng = check_random_state(random_state)
        n = int(n_samples)
        if self._fitted.bandwidths is not None:
            # Per-point bandwidths: the picked point's own h scales the draw.
            p = check_sampled(profile, d)
            i = pick_keys(n, n_keys, self.sample_weight_, rng)
            h = self._fitted.bandwidths.astype(np.float64)[i]
            return data[i] + h[:, np.newaxis] * unit_draws(p, n, d, rng)
        if isinstance(profile, ProductKernel):
            blocks = [(dims, check_sampled(p, dims), h) for dims, p, h in profile.blocks]
        else:
            # fit set a bandwidth for every kernel but a product.
            blocks = [(d, check_sampled(profile, d), cast(float, self.bandwidth_))]
        i = pick_keys(n, n_keys, self.sample_weight_, rng)
        if len(blocks) == 1 and blocks[0][1] in ("gaussian", "uniform"):
            # scikit-learn's draws, in its order.
            h = float(blocks[0][2])
            if blocks[0][1] == "gaussian":
                return np.atleast_2d(rng.normal(data[i], h))
            from scipy.special import gammainc

            Z = rng.normal(size=(n, d))
            s_sq = np.einsum("ij,ij->i", Z, Z)
            correction = gammainc(0.5 * d, 0.5 * s_sq) ** (1.0 / d) * h / np.sqrt(s_sq)
            return data[i] + Z * correction[:, np.newaxis]
        out = data[i]
        start = 0
        for dims, p, h in blocks:
            out[:, start : start + dims] += float(h) * unit_draws(p, n, dims, rng)
            start += dims
        return out
