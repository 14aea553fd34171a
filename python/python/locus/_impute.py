"""LocalMeanImputer as a scikit-learn transformer, with the arguments and
conventions of :class:`sklearn.impute.KNNImputer`."""

from __future__ import annotations

import warnings
from numbers import Real
from typing import Any, Callable

import numpy as np
from sklearn.base import TransformerMixin
from sklearn.impute import MissingIndicator
from sklearn.metrics.pairwise import pairwise_distances_chunked
from sklearn.utils.validation import check_is_fitted, validate_data

from ._base import KernelEstimator, LocusEstimator, check_bool, check_positive_int, keep_params
from ._errors import InputError
from ._functions import impute
from ._kernels import ProductKernel, log_profile

__all__ = ["LocalMeanImputer"]

_WEIGHTS = ("kernel", "uniform", "distance")


class LocalMeanImputer(TransformerMixin, KernelEstimator):
    """Missing-value imputation by local means, a kernel-weighted
    counterpart of :class:`sklearn.impute.KNNImputer` that takes its
    arguments.

    Each missing entry ``(i, c)`` becomes a weighted mean of feature ``c``
    over its *donors*, the training rows that observe it, with distances
    over the features both rows observe, rescaled as scikit-learn's
    ``nan_euclidean`` (``sqrt(d / n_shared · Σ_shared (x − y)²)``). By
    default every training row is a donor, weighted by the kernel
    (``K(dist / bandwidth)``): the local mean, computed by the engine (GPU
    or CPU, in float32 on coordinates centred on the training means). With
    ``n_neighbors=k`` the donors are the ``k`` nearest, as KNNImputer's.
    An entry no donor weighs (no shared feature, or none within a compact
    kernel's reach) gets the training mean of its feature.

    Parameters
    ----------
    missing_values : float, default=np.nan
        The placeholder of a missing entry: NaN, or a number (then the data
        must otherwise be finite).
    n_neighbors : int or None, default=None
        None: every training row observing the feature is a donor. An
        integer ``k ≥ 1``: the ``k`` nearest of them (KNNImputer's donors;
        their distances are computed with scikit-learn's
        ``nan_euclidean_distances`` on the CPU, in float64).
    weights : {"kernel", "uniform", "distance"} or callable, default="kernel"
        How donors are weighted: by the kernel (``kernel``, ``bandwidth``),
        equally, by inverse distance, or by a function of the donors'
        distance array (NaN where no feature is shared) returning weights
        of the same shape, as KNNImputer's ``weights``. Anything but
        ``"kernel"`` goes through the CPU path of ``n_neighbors``.
    metric : {"nan_euclidean"}, default="nan_euclidean"
        Only scikit-learn's ``nan_euclidean`` (accepted for compatibility).
    copy : bool, default=True
        False: ``transform`` fills the array it is given in place when it
        can (a writable float array of the fitted dtype, no column dropped,
        no indicator), as KNNImputer's ``copy``.
    add_indicator : bool, default=False
        Appends a :class:`~sklearn.impute.MissingIndicator`'s columns (one
        per feature with a missing entry in ``fit``).
    keep_empty_features : bool, default=False
        A feature with no observed value in ``fit`` is dropped from the
        output; True keeps it, filled with 0 (KNNImputer's rule).
    bandwidth : float or None, default=1.0
        The kernel's bandwidth (positive; None with a
        :class:`~locus.ProductKernel`, whose blocks carry theirs).
    kernel : str or ProductKernel, default="gaussian"
        Any locus profile name, or a :class:`~locus.ProductKernel`
        (``n_neighbors=None`` only).
    iterations : int, default=1
        ``> 1`` re-imputes with distances between the completed rows
        (values still only from observed entries); ``weights="kernel"`` and
        ``n_neighbors=None`` only.
    backend : {"auto", "gpu", "cpu"}, default="auto"
        Where the engine computes.

    Attributes
    ----------
    X_ : numpy.ndarray
        The training rows (float64, or float32 for float32 input), NaN
        where missing.
    indicator_ : MissingIndicator or None
        The indicator appended when ``add_indicator``.
    n_features_in_ : int
        Features seen in ``fit``.
    feature_names_in_ : numpy.ndarray
        Their names, when ``X`` had string column names.

    Notes
    -----
    The output has the input's float dtype (float64 for integer input);
    observed entries are copied exactly. ``set_output(transform="pandas")``
    gives DataFrames with the names of :meth:`get_feature_names_out`.

    Examples
    --------
    >>> import numpy as np, locus
    >>> X = np.array([[1.0, 2.0], [1.1, np.nan], [8.0, 9.0], [0.9, 2.2]])
    >>> locus.LocalMeanImputer(bandwidth=0.5, backend="cpu").fit_transform(X)[1].round(2)
    array([1.1, 2.1])
    >>> locus.LocalMeanImputer(missing_values=-1, n_neighbors=2, weights="uniform").fit_transform(
    ...     [[1.0, 2.0], [1.1, -1], [8.0, 9.0], [0.9, 2.2]])[1]
    array([1.1, 2.1])
    """

    def __init__(
        self,
        *,
        missing_values: float = np.nan,
        n_neighbors: int | None = None,
        weights: str | Callable[[np.ndarray], np.ndarray] = "kernel",
        metric: str = "nan_euclidean",
        copy: bool = True,
        add_indicator: bool = False,
        keep_empty_features: bool = False,
        bandwidth: float | None = 1.0,
        kernel: str | ProductKernel = "gaussian",
        iterations: int = 1,
        backend: str = "auto",
    ) -> None:
        keep_params(self, locals())

    def _validate_params(self) -> None:
        """The kernel estimators' checks, and the imputer's own.

        Raises
        ------
        InputError
            A parameter out of its domain (also a ``ValueError``).
        """
        weighted = isinstance(self.weights, str) and self.weights == "kernel"
        if weighted:
            super()._validate_params()
        else:
            # Without kernel weights, bandwidth and kernel are unused.
            LocusEstimator._validate_params(self)
        if weighted and self.n_neighbors is not None and isinstance(self.kernel, ProductKernel):
            raise InputError("a ProductKernel weighs all training rows: use it with n_neighbors=None")
        mv = self.missing_values
        if isinstance(mv, (bool, np.bool_)) or not isinstance(mv, Real):
            raise InputError(f"missing_values must be np.nan or a number, got {mv!r}")
        if self.n_neighbors is not None:
            check_positive_int(self.n_neighbors, "n_neighbors")
        if not callable(self.weights) and self.weights not in _WEIGHTS:
            raise InputError(
                f"weights must be one of {list(_WEIGHTS)} or a callable, got {self.weights!r}"
            )
        if self.metric != "nan_euclidean":
            raise InputError(f'metric must be "nan_euclidean", got {self.metric!r}')
        for name in ("copy", "add_indicator", "keep_empty_features"):
            check_bool(getattr(self, name), name)
        if check_positive_int(self.iterations, "iterations") > 1 and not self._kernel_path():
            raise InputError("iterations > 1 needs weights='kernel' and n_neighbors=None")

    def _kernel_path(self) -> bool:
        """Whether the engine imputes (every donor, kernel weights)."""
        return self.n_neighbors is None and isinstance(self.weights, str) and self.weights == "kernel"

    def _validate(self, X: Any, *, reset: bool, copy: bool) -> tuple[np.ndarray, np.ndarray]:
        """``X`` validated (float64, or float32 kept) and its missing mask."""
        nan = bool(np.isnan(self.missing_values))
        X = validate_data(
            self,
            X,
            reset=reset,
            dtype=[np.float64, np.float32],
            order="C",
            copy=copy,
            ensure_all_finite="allow-nan" if nan else True,
        )
        mask = np.isnan(X) if nan else X == self.missing_values
        return X, mask

    def fit(self, X: Any, y: Any = None) -> LocalMeanImputer:
        """Stores the training rows.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The training rows; ``missing_values`` marks a missing entry.
        y : None
            Ignored.

        Returns
        -------
        LocalMeanImputer
            The fitted imputer.
        """
        self._validate_params()
        X, mask = self._validate(X, reset=True, copy=True)
        X[mask] = np.nan
        self.X_ = X
        self._valid_mask = mask.shape[0] > mask.sum(axis=0)
        if self.add_indicator:
            self.indicator_: MissingIndicator | None = MissingIndicator(
                missing_values=np.nan, error_on_new=False
            ).fit(X)
        else:
            self.indicator_ = None
        return self

    def transform(self, X: Any) -> np.ndarray:
        """``X`` with its missing entries filled from the training rows.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows to complete.

        Returns
        -------
        numpy.ndarray of shape (n_samples, n_features_out)
            The completed rows (the input's float dtype), less the features
            empty in ``fit`` (unless ``keep_empty_features``), plus the
            indicator columns (``add_indicator``).
        """
        check_is_fitted(self)
        self._validate_params()
        X, mask = self._validate(X, reset=False, copy=bool(self.copy))
        return self._complete(X, mask, self.X_)

    def fit_transform(self, X: Any, y: Any = None, **fit_params: Any) -> np.ndarray:
        """Fits on ``X`` and fills it from its own rows.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The training rows; ``missing_values`` marks a missing entry.
        y : None
            Ignored.
        **fit_params : dict
            Ignored.

        Returns
        -------
        numpy.ndarray of shape (n_samples, n_features_out)
            ``X`` completed, as :meth:`transform` returns it.
        """
        self.fit(X)
        return self._complete(self.X_.copy(), np.isnan(self.X_), None)

    def _complete(self, X: np.ndarray, mask: np.ndarray, keys: np.ndarray | None) -> np.ndarray:
        """Fills ``X`` where ``mask`` (in place), then drops or zeroes the
        empty features and appends the indicator."""
        valid = self._valid_mask
        indicator = None if self.indicator_ is None else self.indicator_.transform(
            np.where(mask, np.nan, X)
        )
        if mask[:, valid].any():
            fit = self.X_[:, valid]
            work = np.where(mask, np.nan, X)[:, valid]
            if self._kernel_path():
                filled = self._kernel_fill(work, fit, keys is None)
            else:
                # Distances over every feature (empty ones count in
                # nan_euclidean's rescaling, as in KNNImputer).
                filled = self._donor_fill(np.where(mask, np.nan, X), self.X_)[:, valid]
            cols = np.flatnonzero(valid)
            sub = X[:, cols]
            hole = mask[:, cols]
            sub[hole] = filled[hole]
            X[:, cols] = sub
        if bool(self.keep_empty_features):
            X[:, ~valid] = 0
        elif not valid.all():
            X = X[:, valid]
        if indicator is not None:
            X = np.hstack((X, indicator.astype(X.dtype)))
        return X

    def _kernel_fill(self, work: np.ndarray, fit: np.ndarray, own: bool) -> np.ndarray:
        """The engine's local means, on coordinates centred on the
        training means (so a common offset costs no float32 precision)."""
        mu = np.nanmean(fit, axis=0)
        q = (work - mu).astype(np.float32)
        keys = None if own else (fit - mu).astype(np.float32)
        out = impute(q, keys, **self._kernel_args(), iterations=int(self.iterations))
        return out.astype(np.float64) + mu

    def _donor_fill(self, work: np.ndarray, fit: np.ndarray) -> np.ndarray:
        """KNNImputer's donors (the ``n_neighbors`` nearest observing rows,
        ``nan_euclidean`` distances) with this imputer's weights."""
        out = work.copy()
        observed = ~np.isnan(fit)
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # an empty feature's mean
            col_mean = np.nanmean(fit, axis=0)
        rows = np.flatnonzero(np.isnan(work).any(axis=1))

        def fill_chunk(dist: np.ndarray, start: int) -> None:
            idx = rows[start : start + len(dist)]
            for c in range(work.shape[1]):
                recv = np.flatnonzero(np.isnan(work[idx, c]))
                donors = np.flatnonzero(observed[:, c])
                if recv.size == 0 or donors.size == 0:
                    continue
                d = dist[recv][:, donors]
                k = len(donors) if self.n_neighbors is None else min(int(self.n_neighbors), len(donors))
                if k < len(donors):
                    pick = np.argpartition(d, k - 1, axis=1)[:, :k]
                    d = np.take_along_axis(d, pick, axis=1)
                    values = fit[donors[pick], c]
                else:
                    values = np.broadcast_to(fit[donors, c], d.shape)
                w = self._donor_weights(d)
                total = w.sum(axis=1)
                with np.errstate(invalid="ignore", divide="ignore"):
                    mean = (w * values).sum(axis=1) / total
                out[idx[recv], c] = np.where(total > 0, mean, col_mean[c])

        for _ in pairwise_distances_chunked(
            work[rows],
            fit,
            metric="nan_euclidean",
            missing_values=np.nan,
            reduce_func=fill_chunk,
        ):
            pass
        return out

    def _donor_weights(self, d: np.ndarray) -> np.ndarray:
        """The donors' weights (≥ 0, 0 where no feature is shared)."""
        shared = ~np.isnan(d)
        if callable(self.weights):
            w = np.asarray(self.weights(d), dtype=np.float64)
        elif self.weights == "uniform":
            w = shared.astype(np.float64)
        elif self.weights == "distance":
            with np.errstate(divide="ignore"):
                w = 1.0 / d
            exact = d == 0
            hit = exact.any(axis=1)
            w[hit] = exact[hit]
        else:
            h = float(self.bandwidth)
            lw = log_profile(str(self.kernel), (d / h) ** 2)
            lw = np.where(shared, lw, -np.inf)
            top = lw.max(axis=1, keepdims=True)
            with np.errstate(invalid="ignore"):
                w = np.exp(lw - np.where(np.isfinite(top), top, 0.0))
        return np.where(shared & np.isfinite(w), w, 0.0)

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """The names of the output columns.

        Parameters
        ----------
        input_features : array-like of str or None, default=None
            The input's names: ``feature_names_in_`` when None (or
            ``x0``, ``x1``, … without one); if given, they must match it.

        Returns
        -------
        numpy.ndarray of str (object dtype)
            The kept features' names, then ``missingindicator_<name>`` for
            the indicator columns.
        """
        check_is_fitted(self, "n_features_in_")
        names = _feature_names_in(self, input_features)
        out = names[self._valid_mask] if not bool(self.keep_empty_features) else names
        if self.indicator_ is not None:
            out = np.concatenate([out, self.indicator_.get_feature_names_out(names)])
        return np.asarray(out, dtype=object)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags


def _feature_names_in(est: Any, input_features: Any) -> np.ndarray:
    """scikit-learn's rule for the input names of ``get_feature_names_out``."""
    known = getattr(est, "feature_names_in_", None)
    if input_features is None:
        if known is not None:
            return np.asarray(known, dtype=object)
        return np.asarray([f"x{i}" for i in range(est.n_features_in_)], dtype=object)
    names = np.asarray(input_features, dtype=object)
    if names.ndim != 1 or len(names) != est.n_features_in_:
        raise InputError(
            f"input_features should have length equal to n_features_in_ ({est.n_features_in_}), "
            f"got {len(names) if names.ndim == 1 else names.shape}"
        )
    if known is not None and not np.array_equal(names, known):
        raise InputError("input_features is not equal to feature_names_in_")
    return names
