"""k-nearest-neighbour search, classification and regression as
scikit-learn estimators: ``NearestNeighbors``, ``KNeighborsClassifier``,
``KNeighborsRegressor``, with scikit-learn's constructor arguments."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from ._base import keep_params
from ._errors import InputError
from ._fitted import check_points, check_points_targets, class_targets
from ._neighbors_queries import NeighborsQueries

__all__ = ["NearestNeighbors", "KNeighborsClassifier", "KNeighborsRegressor"]

_PARAMS_DOC = """
    Parameters
    ----------
    n_neighbors : int, default=5
        Neighbours per query.
    weights : {"uniform", "distance"} or callable, default="uniform"
        Vote / mean weights: equal, ``1/distance`` (a neighbour at distance
        0 takes all the weight), or a function of the distance array.
    algorithm : {"auto", "ball_tree", "kd_tree", "brute"}, default="auto"
        Accepted for scikit-learn compatibility; a no-op (always brute force).
    leaf_size : int, default=30
        Accepted; a no-op (no tree).
    p : float, default=2
        Minkowski power (``p ≥ 1``; 1 Manhattan, 2 Euclidean, ``inf``
        Chebyshev), for ``metric="minkowski"``.
    metric : str, default="minkowski"
        ``"minkowski"`` (with ``p``), ``"euclidean"``/``"l2"``,
        ``"manhattan"``/``"cityblock"``/``"l1"``, ``"chebyshev"``/
        ``"infinity"`` or ``"haversine"`` (2 columns: latitude, longitude
        in radians), computed on the engine on every backend; any other
        metric raises :class:`~locus.InputError` at ``fit``.
    metric_params : dict, default=None
        ``None`` or ``{"p": p}`` (overrides ``p``).
    n_jobs : int, default=None
        CPU threads: None or -1 every core, k > 0 k threads, -2 all but
        one (joblib's count); 0 raises.
    backend : {"auto", "gpu", "cpu"}, default="auto"
        Where the search runs.
"""


def _weights(weights: Any, dist: np.ndarray) -> np.ndarray:
    """scikit-learn's neighbour weights for ``dist`` (float64)."""
    if weights == "uniform":
        return np.ones(dist.shape, dtype=np.float64)
    if weights == "distance":
        d = dist.astype(np.float64)
        with np.errstate(divide="ignore"):
            w = 1.0 / d
        inf = np.isinf(w)
        rows = inf.any(axis=1)
        w[rows] = inf[rows]
        return w
    return np.asarray(weights(dist), dtype=np.float64)


class _Supervised(NeighborsQueries):
    """What the classifier and the regressor share."""

    weights: Any

    def _check_params(self) -> None:
        self._check_neighbor_params()
        w = self.weights
        if not (w in ("uniform", "distance") or callable(w)):
            raise InputError(f'weights must be "uniform", "distance" or a callable, got {w!r}')

    def _neighbour_weights(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        dist, idx = self.kneighbors(X)
        return _weights(self.weights, dist), idx


class NearestNeighbors(NeighborsQueries):
    """Unsupervised nearest-neighbour search on the GPU or the CPU, a
    drop-in for :class:`sklearn.neighbors.NearestNeighbors` (brute force,
    under its ``metric``): ``kneighbors``, ``kneighbors_graph``, ``radius_neighbors``,
    ``radius_neighbors_graph``.

    Candidates are found in float32 on the engine (points centred on their
    mean first); the distances returned are computed in float64 from the
    points as given, in their dtype.

    Parameters
    ----------
    n_neighbors : int, default=5
        Neighbours per query of :meth:`kneighbors`.
    radius : float, default=1.0
        Radius of :meth:`radius_neighbors`.
    algorithm, leaf_size, metric, p, metric_params, n_jobs, backend
        As :class:`KNeighborsClassifier`.

    Attributes
    ----------
    X_ : ndarray of shape (n_samples, n_features)
        The training points (float32 or float64 as given).
    n_samples_fit_, n_features_in_, effective_metric_, effective_metric_params_

    Examples
    --------
    >>> import numpy as np, locus
    >>> nn = locus.NearestNeighbors(n_neighbors=2, radius=1.5, backend="cpu").fit([[0.0], [3.0], [1.0]])
    >>> nn.kneighbors([[0.9]])
    KNNResult(distances=array([[0.1, 0.9]]), indices=array([[2, 0]]))
    >>> nn.radius_neighbors_graph().toarray()
    array([[0., 0., 1.],
           [0., 0., 0.],
           [1., 0., 0.]])
    """

    def __init__(
        self,
        *,
        n_neighbors: int = 5,
        radius: float = 1.0,
        algorithm: str = "auto",
        leaf_size: int = 30,
        metric: str = "minkowski",
        p: float = 2,
        metric_params: dict | None = None,
        n_jobs: int | None = None,
        backend: str = "auto",
    ) -> None:
        keep_params(self, locals())

    def fit(self, X: Any, y: Any = None) -> NearestNeighbors:
        """Keeps the training points ``X`` (``y`` is ignored) and prepares
        them on the engine.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The training points.
        y : None
            Ignored.

        Returns
        -------
        NearestNeighbors
            The fitted estimator.
        """
        self._check_neighbor_params()
        self._radius(self.radius)
        self._fit_points(check_points(self, X, reset=True))
        return self


class KNeighborsClassifier(ClassifierMixin, _Supervised):
    """k-nearest-neighbour vote on the GPU or the CPU, a drop-in for
    :class:`sklearn.neighbors.KNeighborsClassifier` (brute force,
    under its metric), with its constructor arguments. ``y`` may have several
    columns (one vote per output). Ties in the vote go to the smaller
    class; equal distances to the lower training index. On a GPU,
    ``n_neighbors`` is at most 128 (127 for the training points'
    own neighbours, ``X=None``).
    {params}
    Attributes
    ----------
    classes_ : ndarray, or list of ndarrays (one per output)
        The classes.
    X_ : ndarray of shape (n_samples, n_features)
        The training points (float32 or float64 as given).
    y_ : ndarray of int64
        Class indices, ``(n_samples,)`` or ``(n_samples, n_outputs)``.
    outputs_2d_ : bool
        Whether ``y`` had several columns.
    n_features_in_, n_samples_fit_, effective_metric_, effective_metric_params_

    Examples
    --------
    >>> import numpy as np, locus
    >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
    >>> clf = locus.KNeighborsClassifier(n_neighbors=3, backend="cpu").fit(X, [0, 0, 1, 1])
    >>> clf.predict([[1.1]]), clf.predict_proba([[0.9]]).round(3)
    (array([0]), array([[0.667, 0.333]]))
    """

    __doc__ = (__doc__ or "").replace("{params}", _PARAMS_DOC)

    def __init__(
        self,
        n_neighbors: int = 5,
        *,
        weights: Any = "uniform",
        algorithm: str = "auto",
        leaf_size: int = 30,
        p: float = 2,
        metric: str = "minkowski",
        metric_params: dict | None = None,
        n_jobs: int | None = None,
        backend: str = "auto",
    ) -> None:
        keep_params(self, locals())

    def fit(self, X: Any, y: Any) -> KNeighborsClassifier:
        """Keeps the training points and their classes; ``y`` of shape
        ``(n_samples,)`` or ``(n_samples, n_outputs)``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The training points.
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
            Their classes (any labels numpy can sort).

        Returns
        -------
        KNeighborsClassifier
            The fitted estimator.
        """
        self._check_params()
        X, y = check_points_targets(self, X, y, multi_output=True)
        self.outputs_2d_, classes, index = class_targets(y)
        self.classes_ = classes if self.outputs_2d_ else classes[0]
        self.y_ = index if self.outputs_2d_ else index[:, 0]
        self._fit_points(X)
        return self

    def _proba(self, X: Any) -> list[np.ndarray]:
        check_is_fitted(self)
        w, idx = self._neighbour_weights(X)
        y = self.y_.reshape(self.n_samples_fit_, -1)
        classes = self.classes_ if self.outputs_2d_ else [self.classes_]
        rows = np.repeat(np.arange(idx.shape[0]), idx.shape[1])
        out = []
        for j, c in enumerate(classes):
            votes = np.zeros((idx.shape[0], len(c)))
            np.add.at(votes, (rows, y[idx, j].ravel()), w.ravel())
            total = votes.sum(axis=1, keepdims=True)
            total[total == 0] = 1.0
            out.append(votes / total)
        return out

    def predict_proba(self, X: Any) -> Any:
        """Weighted vote shares (n × n_classes, float64), columns in the
        order of ``classes_``; a list of them, one per output, for a 2-D
        ``y``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The samples.

        Returns
        -------
        numpy.ndarray of shape (n_samples, n_classes), or list of them
            The vote shares (float64).
        """
        proba = self._proba(X)
        return proba if self.outputs_2d_ else proba[0]

    def predict(self, X: Any) -> np.ndarray:
        """The class with the largest weighted vote among the neighbours
        (``(n,)``, or ``(n, n_outputs)`` for a 2-D ``y``).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The samples.

        Returns
        -------
        numpy.ndarray of shape (n_samples,) or (n_samples, n_outputs)
            The predicted classes.
        """
        proba = self._proba(X)
        classes = self.classes_ if self.outputs_2d_ else [self.classes_]
        out = [c[np.argmax(p, axis=1)] for c, p in zip(classes, proba)]
        return np.stack(out, axis=1) if self.outputs_2d_ else out[0]

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags


class KNeighborsRegressor(RegressorMixin, _Supervised):
    """k-nearest-neighbour regression on the GPU or the CPU, a drop-in for
    :class:`sklearn.neighbors.KNeighborsRegressor` (brute force,
    under its metric): the (weighted) mean of the neighbours' targets, in float64.
    ``y`` may have several columns.
    {params}
    Attributes
    ----------
    X_ : ndarray of shape (n_samples, n_features)
        The training points (float32 or float64 as given).
    y_ : ndarray of float64
        The targets.
    n_features_in_, n_samples_fit_, effective_metric_, effective_metric_params_

    Examples
    --------
    >>> import numpy as np, locus
    >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
    >>> reg = locus.KNeighborsRegressor(n_neighbors=2, backend="cpu").fit(X, [0.0, 0.0, 1.0, 1.0])
    >>> reg.predict([[1.6]])
    array([0.5])
    """

    __doc__ = (__doc__ or "").replace("{params}", _PARAMS_DOC)

    def __init__(
        self,
        n_neighbors: int = 5,
        *,
        weights: Any = "uniform",
        algorithm: str = "auto",
        leaf_size: int = 30,
        p: float = 2,
        metric: str = "minkowski",
        metric_params: dict | None = None,
        n_jobs: int | None = None,
        backend: str = "auto",
    ) -> None:
        keep_params(self, locals())

    def fit(self, X: Any, y: Any) -> KNeighborsRegressor:
        """Keeps the training points and targets.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The training points.
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
            Their targets.

        Returns
        -------
        KNeighborsRegressor
            The fitted estimator.
        """
        self._check_params()
        X, y = check_points_targets(self, X, y, multi_output=True, y_numeric=True)
        self.y_ = np.asarray(y, dtype=np.float64)
        self._fit_points(X)
        return self

    def predict(self, X: Any) -> np.ndarray:
        """The weighted mean of the neighbours' targets (float64; shape
        ``(n,)`` or ``(n, n_outputs)`` as ``y``).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The samples.

        Returns
        -------
        numpy.ndarray of shape (n_samples,) or (n_samples, n_outputs)
            The predictions (float64).
        """
        check_is_fitted(self)
        w, idx = self._neighbour_weights(X)
        ys = self.y_[idx]
        if ys.ndim == 2:
            return (ys * w).sum(axis=1) / w.sum(axis=1)
        return (ys * w[:, :, None]).sum(axis=1) / w.sum(axis=1)[:, None]

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags
