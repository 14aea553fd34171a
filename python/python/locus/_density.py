"""KernelDensity as a scikit-learn density estimator."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from sklearn.utils.validation import _check_sample_weight, check_is_fitted

from ._base import check_bandwidth, check_X, keep_params, kernel_params
from ._engine import check_backend
from ._functions import log_density
from ._kernels import ProductKernel

__all__ = ["KernelDensity"]

# scikit-learn's kernel names, and the locus profiles they are.
_KERNELS = {
    "gaussian": "gaussian",
    "tophat": "uniform",
    "epanechnikov": "epanechnikov",
    "exponential": "laplacian",
    "linear": "triangular",
}
_OURS = ("uniform", "triangular", "laplacian", "biweight", "cauchy")


class KernelDensity(BaseEstimator):
    """Kernel density estimation on the GPU or the CPU, a drop-in for
    :class:`sklearn.neighbors.KernelDensity` (exact sums: no tree, no
    tolerance).

    ``bandwidth``: a positive number, or ``"scott"`` / ``"silverman"``
    (scikit-learn's rules: ``n^(-1/(d+4))``, ``(n(d+2)/4)^(-1/(d+4))``).
    ``kernel``: scikit-learn's names (``gaussian``, ``tophat``,
    ``epanechnikov``, ``exponential``, ``linear``; ``cosine`` is not
    available) or locus's (``uniform``, ``triangular``, ``laplacian``,
    ``biweight``, ``cauchy`` in one dimension), or a
    :class:`~locus.ProductKernel` with ``bandwidth=None`` (a density
    normalized block by block). ``metric``: only
    ``"euclidean"``. ``backend``: ``"auto"``, ``"gpu"``, ``"cpu"``. Points
    are stored in float32; densities are float64 and agree with
    scikit-learn's to about 1e-5 relative.

    Attributes: ``bandwidth_``, ``n_features_in_``, ``X_`` (the points,
    float32), ``sample_weight_`` (or None).

    >>> import numpy as np, locus
    >>> X = np.random.default_rng(0).normal(size=(500, 2))
    >>> kde = locus.KernelDensity(bandwidth=0.5, backend="cpu").fit(X)
    >>> kde.score_samples([[0.0, 0.0], [9.0, 9.0]]).round(2)
    array([  -2.02, -208.1 ])
    """

    def __init__(
        self,
        *,
        bandwidth: float | str = 1.0,
        kernel: str = "gaussian",
        metric: str = "euclidean",
        backend: str = "auto",
    ) -> None:
        keep_params(self, locals())

    def _profile(self) -> Any:
        if isinstance(self.kernel, ProductKernel):
            return self.kernel
        if self.kernel in _KERNELS:
            return _KERNELS[self.kernel]
        if self.kernel in _OURS:
            return self.kernel
        raise ValueError(
            f"kernel must be one of {sorted(_KERNELS) + list(_OURS)}, got {self.kernel!r}"
        )

    def fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> KernelDensity:
        """Stores the points ``X`` (and positive ``sample_weight``)."""
        check_backend(self.backend)
        self._profile()
        if self.metric != "euclidean":
            raise ValueError(f'metric must be "euclidean", got {self.metric!r}')
        X = check_X(self, X, reset=True)
        n, d = X.shape
        if isinstance(self.kernel, ProductKernel):
            # The blocks carry the bandwidths (kernel_params refuses another).
            h = kernel_params(self.bandwidth, self.kernel)["bandwidth"]
        elif isinstance(self.bandwidth, str):
            if self.bandwidth == "scott":
                h = n ** (-1 / (d + 4))
            elif self.bandwidth == "silverman":
                h = (n * (d + 2) / 4) ** (-1 / (d + 4))
            else:
                raise ValueError(
                    f'bandwidth must be a number, "scott" or "silverman", got {self.bandwidth!r}'
                )
        else:
            h = check_bandwidth(self.bandwidth)
        if sample_weight is not None:
            sample_weight = _check_sample_weight(
                sample_weight, X, dtype=np.float32, ensure_non_negative=True
            )
            if not sample_weight.sum() > 0:
                raise ValueError("sample_weight sums to zero")
            sample_weight = np.ascontiguousarray(sample_weight)
        self.bandwidth_ = None if h is None else float(h)
        self.X_ = X
        self.sample_weight_ = sample_weight
        return self

    def score_samples(self, X: Any) -> np.ndarray:
        """``ln p̂(x)`` for each sample (float64), normalized to be a
        probability density."""
        check_is_fitted(self)
        X = check_X(self, X, reset=False)
        return log_density(
            X,
            self.X_,
            bandwidth=self.bandwidth_,
            kernel=self._profile(),
            weights=self.sample_weight_,
            backend=self.backend,
        )

    def score(self, X: Any, y: Any = None) -> float:
        """The total log-likelihood of ``X``."""
        return float(np.sum(self.score_samples(X)))

    def sample(self, n_samples: int = 1, random_state: Any = None) -> np.ndarray:
        """Random samples from the model (gaussian and tophat kernels), as
        scikit-learn draws them."""
        check_is_fitted(self)
        if self._profile() not in ("gaussian", "uniform"):
            raise NotImplementedError("sampling is implemented for the gaussian and tophat kernels")
        data = self.X_.astype(np.float64)
        rng = check_random_state(random_state)
        u = rng.uniform(0, 1, size=n_samples)
        if self.sample_weight_ is None:
            i = (u * data.shape[0]).astype(np.int64)
        else:
            cumsum = np.cumsum(self.sample_weight_.astype(np.float64))
            i = np.searchsorted(cumsum, u * cumsum[-1])
        if self._profile() == "gaussian":
            return np.atleast_2d(rng.normal(data[i], self.bandwidth_))
        from scipy.special import gammainc

        dim = data.shape[1]
        Z = rng.normal(size=(n_samples, dim))
        s_sq = np.einsum("ij,ij->i", Z, Z)
        correction = gammainc(0.5 * dim, 0.5 * s_sq) ** (1.0 / dim) * self.bandwidth_ / np.sqrt(s_sq)
        return data[i] + Z * correction[:, np.newaxis]
