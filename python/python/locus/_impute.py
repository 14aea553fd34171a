"""LocalMeanImputer as a scikit-learn transformer."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from ._base import KernelEstimator, check_kernel, check_positive_int, keep_params
from ._functions import impute

__all__ = ["LocalMeanImputer"]


class LocalMeanImputer(TransformerMixin, KernelEstimator):
    """Missing-value imputation by local means, a kernel-weighted
    counterpart of :class:`sklearn.impute.KNNImputer`.

    Each missing (NaN) entry ``(i, c)`` becomes the kernel-weighted mean of
    feature ``c`` over the training rows that observe it, with distances
    over the features both rows observe, rescaled as scikit-learn's
    ``nan_euclidean`` (``sqrt(d / n_shared · Σ_shared (x − y)²)``).
    ``iterations > 1`` re-imputes with distances between the completed
    rows (values still only from observed entries). An entry no weighted
    training row observes gets the training mean of that feature.

    ``bandwidth`` (positive), ``kernel`` (any locus kernel; default
    gaussian), ``iterations`` (≥ 1), ``backend``. Output is float32.

    Attributes: ``X_`` (the training rows, float32, NaN where missing),
    ``n_features_in_``.

    >>> import numpy as np, locus
    >>> X = np.array([[1.0, 2.0], [1.1, np.nan], [8.0, 9.0], [0.9, 2.2]])
    >>> locus.LocalMeanImputer(bandwidth=0.5, backend="cpu").fit_transform(X)[1].round(2)
    array([1.1, 2.1], dtype=float32)
    """

    def __init__(self, *, bandwidth: float = 1.0, kernel: str = "gaussian", iterations: int = 1, backend: str = "auto") -> None:
        keep_params(self, locals())

    def _check_params(self) -> None:
        self._kernel_args()
        check_kernel(self.kernel)
        check_positive_int(self.iterations, "iterations")

    def fit(self, X: Any, y: Any = None) -> LocalMeanImputer:
        """Stores the training rows (NaN marks a missing entry)."""
        self._check_params()
        X = validate_data(self, X, reset=True, dtype=np.float32, order="C", ensure_all_finite="allow-nan")
        observed = ~np.isnan(X)
        if not observed.any(axis=0).all():
            empty = int(np.flatnonzero(~observed.any(axis=0))[0])
            raise ValueError(f"feature {empty} has no observed value in the training data")
        self.X_ = X
        return self

    def transform(self, X: Any) -> np.ndarray:
        """``X`` with its missing entries filled from the training rows."""
        check_is_fitted(self)
        self._check_params()
        X = validate_data(self, X, reset=False, dtype=np.float32, order="C", ensure_all_finite="allow-nan")
        return self._fill(X, self.X_)

    def fit_transform(self, X: Any, y: Any = None, **fit_params: Any) -> np.ndarray:
        """Fits on ``X`` and fills it from its own rows."""
        self.fit(X)
        return self._fill(self.X_, None)

    def _fill(self, X: np.ndarray, keys: np.ndarray | None) -> np.ndarray:
        if not np.isnan(X).any():
            return X.copy()
        return impute(X, keys, **self._kernel_args(), iterations=int(self.iterations))

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        # The engine computes in float32: float32 in, float32 out.
        tags.transformer_tags.preserves_dtype = ["float32"]
        return tags
