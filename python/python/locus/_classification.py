"""Local-mode classification as a scikit-learn classifier."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from ._base import KernelEstimator, keep_params
from ._fitted import (
    FittedKeys,
    check_points,
    check_points_targets,
    check_weights,
    class_targets,
    merge_duplicates,
    weight_scale,
)

__all__ = ["LocalModeClassifier"]


class LocalModeClassifier(ClassifierMixin, KernelEstimator):
    """Local-mode classification: class probabilities are the
    Nadaraya–Watson local mean of one-hot labels,
    ``P(c | x) = Σ_{j: y_j = c} w_j K(x, x_j) / Σ_j w_j K(x, x_j)``, and the
    prediction the most probable class (ties to the smaller class).

    Parameters
    ----------
    bandwidth : float, default=1.0
        Positive (``None`` with a :class:`~locus.ProductKernel`).
    kernel : str or ProductKernel, default="gaussian"
        Any locus kernel.
    backend : {"auto", "gpu", "cpu"}, default="auto"
        Where the sums run.

    Notes
    -----
    ``fit`` takes ``sample_weight`` (the ``w_j``, default 1) and a 2-D
    ``y`` (one vote per output: ``classes_`` and ``predict_proba`` are then
    lists, ``predict`` has one column per output). With a compact kernel, a
    query with no training point of positive weight within ``bandwidth``
    gets its nearest training point's class (probability 1). Labels may be
    anything numpy can sort. Computed in float32 on points centred on their
    mean; probabilities returned in float64. The training points stay
    prepared on the engine, so a ``predict`` costs one
    :class:`~locus.KeySet` call.

    Attributes
    ----------
    classes_ : ndarray, or list of ndarrays (one per output)
    X_ : ndarray of shape (n_samples, n_features)
        The training points (float32 or float64 as given).
    y_ : ndarray of int64
        Class indices, ``(n_samples,)`` or ``(n_samples, n_outputs)``.
    outputs_2d_ : bool
        Whether ``y`` had several columns.
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np, locus
    >>> X = np.array([[0.0], [0.2], [1.0], [1.1]])
    >>> clf = locus.LocalModeClassifier(bandwidth=0.3, backend="cpu").fit(X, ["a", "a", "b", "b"])
    >>> clf.predict([[0.1], [0.9], [5.0]])
    array(['a', 'b', 'b'], dtype='<U1')
    """

    def __init__(self, *, bandwidth: float = 1.0, kernel: str = "gaussian", backend: str = "auto") -> None:
        keep_params(self, locals())

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> LocalModeClassifier:
        """Keeps the training points and their classes, prepared on the
        engine.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weights of the training points.

        Returns
        -------
        LocalModeClassifier
            The fitted estimator.
        """
        self._kernel_args()
        X, y = check_points_targets(self, X, y, multi_output=True)
        self.outputs_2d_, classes, index = class_targets(y)
        w = np.ones(X.shape[0]) if sample_weight is None else check_weights(sample_weight, X)
        # A point of weight k and k copies of it become the same key, so
        # the two fits sum the same terms in the same order.
        keys, self._key_labels, w = merge_duplicates(X, index, w)
        w = w * weight_scale(w)
        n = keys.shape[0]
        blocks = []
        for j, cj in enumerate(classes):
            one_hot = np.zeros((n, len(cj)))
            one_hot[np.arange(n), self._key_labels[:, j]] = w
            blocks.append(one_hot)
        self.classes_ = classes if self.outputs_2d_ else classes[0]
        self.y_ = index if self.outputs_2d_ else index[:, 0]
        values = np.ascontiguousarray(np.hstack(blocks), np.float32)
        self._fitted = FittedKeys(keys, self.backend, values, sample_weight=w)
        self._fitted.keyset()
        self.X_ = X
        return self

    def _proba(self, X: Any) -> list[np.ndarray]:
        check_is_fitted(self)
        X = check_points(self, X, reset=False)
        fitted = self._fitted
        q = fitted.queries(X)
        kw = {k: v for k, v in self._kernel_args().items() if k != "backend"}
        ks = fitted.keyset()
        _, _, mean = ks.row_states(q, **kw)  # float64 sums of w_j K_j per class
        classes = self.classes_ if self.outputs_2d_ else [self.classes_]
        y = self._key_labels
        nearest = None
        out, start = [], 0
        for j, c in enumerate(classes):
            block = mean[:, start : start + len(c)]
            start += len(c)
            total = block.sum(axis=1, keepdims=True)
            empty = ~(total[:, 0] > 0)
            with np.errstate(divide="ignore", invalid="ignore"):
                proba = block / total
            if empty.any():
                if nearest is None:
                    nearest = ks.knn(q[empty], 1).indices[:, 0]
                proba[empty] = 0.0
                proba[np.flatnonzero(empty), y[nearest, j]] = 1.0
            out.append(proba)
        return out

    def predict_proba(self, X: Any) -> Any:
        """Class probabilities (n × n_classes, float64), columns in the
        order of ``classes_``; a list of them, one per output, for a 2-D
        ``y``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The samples.

        Returns
        -------
        numpy.ndarray of shape (n_samples, n_classes), or list of them
            The probabilities (float64).
        """
        proba = self._proba(X)
        return proba if self.outputs_2d_ else proba[0]

    def predict(self, X: Any) -> np.ndarray:
        """The most probable class of each sample (``(n,)``, or
        ``(n, n_outputs)`` for a 2-D ``y``).

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
