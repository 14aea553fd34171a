"""Local-mode classification as a scikit-learn classifier."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from ._base import KernelEstimator, check_X, check_Xy, keep_params
from ._functions import knn, local_mean

__all__ = ["LocalModeClassifier"]


class LocalModeClassifier(ClassifierMixin, KernelEstimator):
    """Local-mode classification: class probabilities are the
    Nadaraya–Watson local mean of one-hot labels,
    ``P(c | x) = Σ_{j: y_j = c} K(x, x_j) / Σ_j K(x, x_j)``, and the
    prediction the most probable class (ties to the smaller class).

    ``bandwidth`` (positive), ``kernel`` (any locus kernel; default
    gaussian), ``backend``. With a compact kernel, a query with no training
    point within ``bandwidth`` gets its nearest training point's class
    (probability 1). Labels may be anything numpy can sort (``classes_``).

    Attributes: ``classes_``, ``X_`` (float32), ``y_`` (class indices),
    ``n_features_in_``.

    >>> import numpy as np, locus
    >>> X = np.array([[0.0], [0.2], [1.0], [1.1]])
    >>> clf = locus.LocalModeClassifier(bandwidth=0.3, backend="cpu").fit(X, ["a", "a", "b", "b"])
    >>> clf.predict([[0.1], [0.9], [5.0]])
    array(['a', 'b', 'b'], dtype='<U1')
    """

    def __init__(self, *, bandwidth: float = 1.0, kernel: str = "gaussian", backend: str = "auto") -> None:
        keep_params(self, locals())

    def fit(self, X: Any, y: Any) -> LocalModeClassifier:
        """Stores the training points and their classes."""
        self._kernel_args()
        X, y = check_Xy(self, X, y)
        check_classification_targets(y)
        self.classes_, index = np.unique(y, return_inverse=True)
        self.X_ = X
        self.y_ = index.reshape(-1).astype(np.int64)
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities (n × n_classes, float32), columns in the
        order of ``classes_``."""
        check_is_fitted(self)
        X = check_X(self, X, reset=False)
        one_hot = np.zeros((self.X_.shape[0], len(self.classes_)), dtype=np.float32)
        one_hot[np.arange(self.X_.shape[0]), self.y_] = 1.0
        proba = local_mean(X, self.X_, one_hot, **self._kernel_args())
        empty = np.isnan(proba[:, 0])
        if empty.any():
            idx, _ = knn(X[empty], self.X_, 1, backend=self.backend)
            proba[empty] = one_hot[idx[:, 0]]
        return proba

    def predict(self, X: Any) -> np.ndarray:
        """The most probable class of each sample."""
        check_is_fitted(self)
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]
