"""k-nearest-neighbour classification and regression as scikit-learn
estimators."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from ._base import check_positive_int, check_X, check_Xy, keep_params
from ._engine import check_backend
from ._functions import knn

__all__ = ["KNeighborsClassifier", "KNeighborsRegressor"]


class _KNeighbors(BaseEstimator):
    """Shared by both estimators: parameters, ``fit`` and ``kneighbors``."""

    def __init__(
        self,
        n_neighbors: int = 5,
        *,
        weights: Any = "uniform",
        metric: str = "minkowski",
        p: float = 2,
        backend: str = "auto",
    ) -> None:
        keep_params(self, locals())

    def _check_params(self) -> None:
        check_backend(self.backend)
        check_positive_int(self.n_neighbors, "n_neighbors")
        if not (self.weights in ("uniform", "distance") or callable(self.weights)):
            raise ValueError(f'weights must be "uniform", "distance" or a callable, got {self.weights!r}')
        if not (self.metric == "euclidean" or (self.metric == "minkowski" and self.p == 2)):
            raise ValueError(
                f"only the Euclidean metric is implemented (metric='minkowski' with p=2, "
                f"or 'euclidean'), got metric={self.metric!r}, p={self.p!r}"
            )

    def kneighbors(
        self, X: Any = None, n_neighbors: int | None = None, return_distance: bool = True
    ) -> Any:
        """The ``n_neighbors`` nearest training points of each sample:
        distances (float32) and indices, nearest first. With ``X=None``,
        of each training point, itself excluded."""
        check_is_fitted(self)
        k = check_positive_int(self.n_neighbors if n_neighbors is None else n_neighbors, "n_neighbors")
        n_fit = self.X_.shape[0]
        query_is_train = X is None
        if query_is_train:
            X, k_query = self.X_, k + 1
        else:
            X, k_query = check_X(self, X, reset=False), k
        if k_query > n_fit:
            raise ValueError(
                f"Expected n_neighbors <= n_samples_fit, but n_neighbors = {k_query}, "
                f"n_samples_fit = {n_fit}, n_samples = {X.shape[0]}"
            )
        idx, dist = knn(X, self.X_, k_query, backend=self.backend)
        if query_is_train:
            # Drop each point itself (or, among duplicates, the farthest).
            own = idx == np.arange(X.shape[0])[:, None]
            own[~own.any(axis=1), -1] = True
            own[np.cumsum(own, axis=1) > 1] = False
            keep = ~own
            idx = idx[keep].reshape(X.shape[0], k)
            dist = dist[keep].reshape(X.shape[0], k)
        return (dist, idx) if return_distance else idx

    def _weights(self, dist: np.ndarray) -> np.ndarray:
        if self.weights == "uniform":
            return np.ones_like(dist, dtype=np.float64)
        if self.weights == "distance":
            d = dist.astype(np.float64)
            with np.errstate(divide="ignore"):
                w = 1.0 / d
            inf = np.isinf(w)
            rows = inf.any(axis=1)
            w[rows] = inf[rows]
            return w
        return np.asarray(self.weights(dist), dtype=np.float64)

    def _fit(self, X: Any, y: Any, **kw: Any) -> tuple[np.ndarray, np.ndarray]:
        self._check_params()
        X, y = check_Xy(self, X, y, **kw)
        self.X_ = X
        self.n_samples_fit_ = X.shape[0]
        return X, y


class KNeighborsClassifier(ClassifierMixin, _KNeighbors):
    """k-nearest-neighbour vote on the GPU or the CPU, as
    :class:`sklearn.neighbors.KNeighborsClassifier` (Euclidean distance,
    brute force in float32).

    ``n_neighbors``, ``weights`` (``"uniform"``, ``"distance"`` or a
    callable), ``metric`` (``"minkowski"`` with ``p=2``, or
    ``"euclidean"``), ``backend``. Ties in the vote go to the smaller class;
    equal distances to the lower training index.
    On a GPU, ``n_neighbors`` is at most 128 (one pass keeps that many).

    Attributes: ``classes_``, ``X_``, ``y_`` (class indices),
    ``n_features_in_``, ``n_samples_fit_``.

    >>> import numpy as np, locus
    >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
    >>> clf = locus.KNeighborsClassifier(n_neighbors=3, backend="cpu").fit(X, [0, 0, 1, 1])
    >>> clf.predict([[1.1]]), clf.predict_proba([[0.9]]).round(3)
    (array([0]), array([[0.667, 0.333]]))
    """

    def fit(self, X: Any, y: Any) -> KNeighborsClassifier:
        """Stores the training points and their classes."""
        X, y = self._fit(X, y)
        check_classification_targets(y)
        self.classes_, index = np.unique(y, return_inverse=True)
        self.y_ = index.reshape(-1).astype(np.int64)
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        """Weighted vote shares (n × n_classes, float64), columns in the
        order of ``classes_``."""
        dist, idx = self.kneighbors(X)
        w = self._weights(dist)
        votes = np.zeros((idx.shape[0], len(self.classes_)))
        rows = np.repeat(np.arange(idx.shape[0]), idx.shape[1])
        np.add.at(votes, (rows, self.y_[idx].ravel()), w.ravel())
        total = votes.sum(axis=1, keepdims=True)
        total[total == 0] = 1.0
        return votes / total

    def predict(self, X: Any) -> np.ndarray:
        """The class with the largest weighted vote among the neighbours."""
        check_is_fitted(self)
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]


class KNeighborsRegressor(RegressorMixin, _KNeighbors):
    """k-nearest-neighbour regression on the GPU or the CPU, as
    :class:`sklearn.neighbors.KNeighborsRegressor` (Euclidean distance,
    brute force in float32): the (weighted) mean of the neighbours' targets.

    Parameters as :class:`KNeighborsClassifier`. ``y`` may have several
    columns. Attributes: ``X_``, ``y_``, ``n_features_in_``, ``n_samples_fit_``.

    >>> import numpy as np, locus
    >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
    >>> reg = locus.KNeighborsRegressor(n_neighbors=2, backend="cpu").fit(X, [0.0, 0.0, 1.0, 1.0])
    >>> reg.predict([[1.6]])
    array([0.5])
    """

    def fit(self, X: Any, y: Any) -> KNeighborsRegressor:
        """Stores the training points and targets."""
        _, y = self._fit(X, y, multi_output=True, y_numeric=True)
        self.y_ = np.asarray(y, dtype=np.float64)
        return self

    def predict(self, X: Any) -> np.ndarray:
        """The weighted mean of the neighbours' targets (float64)."""
        dist, idx = self.kneighbors(X)
        w = self._weights(dist)
        ys = self.y_[idx]
        if ys.ndim == 2:
            return (ys * w).sum(axis=1) / w.sum(axis=1)
        return (ys * w[:, :, None]).sum(axis=1) / w.sum(axis=1)[:, None]

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags
