"""What a fitted estimator keeps of its training points: the points as
given (float32 or float64), their float64 mean, the points centred on it
and rounded once to float32, and a :class:`~locus.KeySet` of them prepared
on the estimator's engine, so that each ``predict`` costs one key-set call.

Centring before rounding keeps the accuracy a common offset would take:
``1e6 + x`` rounded to float32 keeps 3 significant digits of ``x``,
``x − mean`` keeps 7. Every op an estimator calls (distances, kernels,
local means of centred values) is unchanged by the shift.

The key set lives on the engine, not in the pickle: it is dropped when the
estimator is pickled and prepared again on first use after unpickling.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from sklearn.utils.validation import _check_sample_weight, validate_data

from ._engine import KeySet, engine_for

# The floating dtypes kept as given; anything else becomes float64.
FLOATS: tuple[type[np.floating[Any]], ...] = (np.float64, np.float32)


def weight_scale(sample_weight: np.ndarray) -> float:
    """A power of two that brings the weights' sum near their count: the
    weights times it keep every bit in float32, whatever their units."""
    return float(2.0 ** np.round(np.log2(len(sample_weight) / sample_weight.sum())))


def merge_duplicates(
    X: np.ndarray, labels: np.ndarray, w: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct (point, labels) rows of ``X`` (n × d) and ``labels``
    (n × outputs, int64), sorted, each with the sum of its rows' weights
    ``w``; rows of weight 0 are left out. A point of integer weight k and
    k copies of it (or a weight-0 point and none) then give the same keys,
    values and order, so the kernel sums over them agree bit for bit, as
    scikit-learn's sample-weight check asks."""
    keep = w > 0
    X, labels, w = X[keep], labels[keep], w[keep]
    d = X.shape[1]
    rows = np.hstack([X.astype(np.float64, copy=False), labels.astype(np.float64)])
    distinct, inverse = np.unique(rows, axis=0, return_inverse=True)
    merged = np.bincount(inverse.reshape(-1), weights=w, minlength=len(distinct))
    keys = np.ascontiguousarray(distinct[:, :d], dtype=X.dtype)
    return keys, distinct[:, d:].astype(np.int64), merged


def check_weights(sample_weight: Any, X: np.ndarray) -> np.ndarray:
    """``sample_weight`` checked as scikit-learn does (one non-negative
    weight per sample), float64, not all zero."""
    w = _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True)
    if not w.sum() > 0:
        raise ValueError("sample_weight sums to zero")
    return w


def check_points(est: Any, X: Any, *, reset: bool) -> np.ndarray:
    """``X`` validated as scikit-learn does (2-D, finite, non-empty, the
    number of features seen in ``fit``), float32 or float64 kept, anything
    else converted to float64.

    After ``fit``, a C-contiguous float ndarray that passes every check is
    returned as is without scikit-learn's validation (a tenth of a
    millisecond, most of a small ``predict``); anything else, including
    every input that fails a check, goes through it and gets its errors
    and warnings."""
    if (
        not reset
        and type(X) is np.ndarray
        and X.dtype in FLOATS
        and X.ndim == 2
        and X.flags.c_contiguous
        and X.shape[0] > 0
        and X.shape[1] == getattr(est, "n_features_in_", -1)
        and not hasattr(est, "feature_names_in_")
        and np.isfinite(X).all()
    ):
        return X
    return validate_data(est, X, reset=reset, dtype=FLOATS, order="C")


def check_points_targets(est: Any, X: Any, y: Any, **kw: Any) -> tuple[np.ndarray, np.ndarray]:
    """``X`` and ``y`` validated together (``X`` as :func:`check_points`)."""
    return validate_data(est, X, y, dtype=FLOATS, order="C", **kw)


class FittedKeys:
    """Training points ``X`` (N × d, float32 or float64) and optional
    float32 ``values`` (N × q), prepared on the engine named ``backend``
    with the CPU threads ``n_jobs`` asks for.

    ``offset`` is the points' float64 mean (weighted by ``sample_weight``); ``keys`` the centred float32
    points; :meth:`keyset` the prepared key set (values included);
    :meth:`queries` centres queries the same way. With ``centre=False``
    (the haversine metric, which a shift would change) the offset is 0.
    ``bandwidths`` (float32, one per point): per-key bandwidths the key
    set is prepared with too."""

    def __init__(
        self,
        X: np.ndarray,
        backend: Any,
        values: np.ndarray | None = None,
        sample_weight: np.ndarray | None = None,
        n_jobs: int | None = None,
        centre: bool = True,
        bandwidths: np.ndarray | None = None,
    ) -> None:
        self.X = X
        self.values = values
        self.bandwidths = bandwidths
        self.backend = backend
        self.n_jobs = n_jobs
        self._lock = threading.Lock()
        self._keys: np.ndarray | None = None
        self._keyset: KeySet | None = None
        # Weighted as the points are, so that a weight of 2 and a repeated
        # point give the same keys.
        # Not for the haversine metric (``centre=False``): it is not
        # translation invariant.
        self.offset = (
            np.average(X.astype(np.float64, copy=False), axis=0, weights=sample_weight)
            if centre
            else np.zeros(X.shape[1])
        )

    @property
    def keys(self) -> np.ndarray:
        """The points minus their mean, float32 (C-contiguous)."""
        if self._keys is None:
            self._keys = self.queries(self.X)
        return self._keys

    def queries(self, X: np.ndarray) -> np.ndarray:
        """``X − offset`` computed in float64, rounded to float32."""
        out = np.empty(X.shape, np.float32)
        return np.subtract(X, self.offset, out=out, dtype=np.float64, casting="same_kind")

    def keyset(self) -> KeySet:
        """The key set on the engine (prepared on first use)."""
        ks = self._keyset
        if ks is None:
            with self._lock:
                ks = self._keyset
                if ks is None:
                    ks = self._keyset = engine_for(self.backend, self.n_jobs).prepare(
                        self.keys, self.values, batching=False, bandwidths=self.bandwidths
                    )
        return ks

    def __getstate__(self) -> dict[str, Any]:
        # The key set and the float32 copy are rebuilt on first use.
        return {
            "X": self.X,
            "values": self.values,
            "backend": self.backend,
            "n_jobs": self.n_jobs,
            "offset": self.offset,
            "bandwidths": self.bandwidths,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update({"n_jobs": None, "bandwidths": None, **state})
        self._lock = threading.Lock()
        self._keys = None
        self._keyset = None


def class_targets(y: Any) -> tuple[bool, list[np.ndarray], np.ndarray]:
    """Class targets as scikit-learn's classifiers keep them: whether ``y``
    has several outputs (a column vector warns and counts as one), each
    output's sorted classes, and every sample's class index per output
    (``n × n_outputs``)."""
    import warnings

    from sklearn.exceptions import DataConversionWarning
    from sklearn.utils.multiclass import check_classification_targets

    y = np.asarray(y)
    outputs_2d = not (y.ndim == 1 or y.shape[1] == 1)
    if y.ndim != 1 and not outputs_2d:
        warnings.warn(
            "A column-vector y was passed when a 1d array was expected. Please change "
            "the shape of y to (n_samples,), for example using ravel().",
            DataConversionWarning,
            stacklevel=3,
        )
    y = y.reshape(len(y), -1)
    check_classification_targets(y)
    classes, index = [], np.empty(y.shape, dtype=np.int64)
    for j in range(y.shape[1]):
        c, index[:, j] = np.unique(y[:, j], return_inverse=True)
        classes.append(c)
    return outputs_2d, classes, index
