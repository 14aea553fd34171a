"""Nadaraya–Watson kernel regression as a scikit-learn regressor."""

from __future__ import annotations

from typing import Any, cast

import numpy as np
from sklearn.base import RegressorMixin
from sklearn.utils.validation import check_is_fitted

from ._base import KernelEstimator, check_X, check_Xy, keep_params
from ._functions import local_mean, local_polynomial

__all__ = ["KernelRegression"]


class KernelRegression(RegressorMixin, KernelEstimator):
    """Kernel regression: Nadaraya–Watson (local constant, ``degree=0``):
    ``ŷ(x) = Σ_j K(x, x_j) y_j / Σ_j K(x, x_j)``, or local linear
    (``degree=1``: the kernel-weighted least-squares line at each sample,
    free of the local mean's bias at boundaries and on slopes), fused and
    streaming on the GPU or the CPU (the n_queries × n_samples weights are
    never stored).

    ``bandwidth`` (positive), ``kernel`` (any locus kernel; default
    gaussian), ``degree`` (0 or 1; 1 needs at most 64 features),
    ``backend``. ``y`` may have several columns. Computed in float32; with a compact kernel a query with no
    training point within ``bandwidth`` is predicted NaN. Exponential
    kernels are summed in the log domain: a tiny bandwidth gives the
    nearest training targets, not NaN.

    Attributes: ``X_`` (float32), ``y_`` (float32), ``n_features_in_``.

    >>> import numpy as np, locus
    >>> X = np.linspace(0, 6, 200)[:, None]
    >>> reg = locus.KernelRegression(bandwidth=0.2, backend="cpu").fit(X, np.sin(X[:, 0]))
    >>> reg.predict([[np.pi / 2]]).round(2)
    array([0.98], dtype=float32)
    """

    def __init__(self, *, bandwidth: float = 1.0, kernel: str = "gaussian", degree: int = 0, backend: str = "auto") -> None:
        keep_params(self, locals())

    def fit(self, X: Any, y: Any) -> KernelRegression:
        """Stores the training points and targets."""
        self._kernel_args()
        if isinstance(self.degree, bool) or self.degree not in (0, 1):
            raise ValueError(f"degree must be 0 (local constant) or 1 (local linear), got {self.degree!r}")
        X, y = check_Xy(self, X, y, multi_output=True, y_numeric=True)
        self.X_ = X
        self.y_ = np.ascontiguousarray(y, dtype=np.float32)
        return self

    def predict(self, X: Any) -> np.ndarray:
        """The local fit of the training targets at each sample (float32;
        shape ``(n,)`` or ``(n, n_outputs)`` as ``y``)."""
        check_is_fitted(self)
        X = check_X(self, X, reset=False)
        if self.degree == 1:
            # Without return_slopes, one array.
            return cast(np.ndarray, local_polynomial(X, self.X_, self.y_, **self._kernel_args(), degree=1))
        return local_mean(X, self.X_, self.y_, **self._kernel_args())

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags
