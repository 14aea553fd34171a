"""Nadaraya–Watson kernel regression as a scikit-learn regressor."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import RegressorMixin
from sklearn.utils.validation import check_is_fitted

from ._arrays import result_dtype
from ._bandwidth_selection import select_bandwidths_per_feature
from ._base import KernelEstimator, keep_params, kernel_params
from ._errors import InputError
from ._fitted import FittedKeys, check_points, check_points_targets, check_weights, weight_scale

__all__ = ["KernelRegression"]

#: The ``bandwidth`` that learns one bandwidth per feature by leave-one-out.
PER_FEATURE = "loo-per-feature"


class KernelRegression(RegressorMixin, KernelEstimator):
    """Kernel regression: Nadaraya–Watson (local constant, ``degree=0``):
    ``ŷ(x) = Σ_j K(x, x_j) y_j / Σ_j K(x, x_j)``, or local linear
    (``degree=1``: the kernel-weighted least-squares line at each sample,
    free of the local mean's bias at boundaries and on slopes), fused and
    streaming on the GPU or the CPU (the n_queries × n_samples weights are
    never stored).

    ``bandwidth`` (positive), ``kernel`` (any locus kernel; default
    gaussian), ``degree`` (0 or 1; 1 needs at most 64 features),
    ``backend``. ``y`` may have several columns; ``fit`` takes
    ``sample_weight`` (``degree=0``). Computed in float32 on points and
    targets centred on their means (a common offset costs no digits),
    returned in float64 (float32 when ``X`` and ``y`` both are). With a
    compact kernel a query with no training point within ``bandwidth`` is
    predicted NaN. Exponential kernels are summed in the log domain: a tiny
    bandwidth gives the nearest training targets, not NaN. The training
    points stay prepared on the engine, so a ``predict`` costs one
    :class:`~locus.KeySet` call.

    ``bandwidth="loo-per-feature"`` learns one bandwidth per feature at
    ``fit`` (a diagonal metric: :func:`~locus.select_bandwidths_per_feature`
    on the training data, ``degree=0``, no ``sample_weight``); ``predict``
    then weighs by exactly that kernel, ``K = k(Σ_a ((x_a − x'_a)/h_a)²)``
    (the features divided by their bandwidths, bandwidth 1).

    Attributes: ``X_``, ``y_`` (as given, float32 or float64),
    ``n_features_in_``, ``bandwidth_`` (the bandwidth used: a float, the
    array of ``n_features`` bandwidths with ``"loo-per-feature"``, None
    with a product kernel), ``loo_error_`` (``"loo-per-feature"``: the
    leave-one-out error at ``bandwidth_``).

    Parameters
    ----------
    bandwidth : float or "loo-per-feature", default=1.0
        The kernel's bandwidth (> 0; None with a
        :class:`~locus.ProductKernel`), or ``"loo-per-feature"``.
    kernel : str or ProductKernel, default="gaussian"
        Any locus kernel.
    degree : {0, 1}, default=0
        0: Nadaraya–Watson; 1: local linear (at most 64 features).
    backend : {"auto", "gpu", "cpu"}, default="auto"
        Where the sums run.

    Examples
    --------
    >>> import numpy as np, locus
    >>> X = np.linspace(0, 6, 200)[:, None]
    >>> reg = locus.KernelRegression(bandwidth=0.2, backend="cpu").fit(X, np.sin(X[:, 0]))
    >>> reg.predict([[np.pi / 2]]).round(2)
    array([0.98])
    """

    def __init__(
        self, *, bandwidth: float | str = 1.0, kernel: str = "gaussian", degree: int = 0, backend: str = "auto"
    ) -> None:
        keep_params(self, locals())

    def _per_feature(self) -> bool:
        if isinstance(self.bandwidth, str):
            if self.bandwidth != PER_FEATURE:
                raise InputError(f"bandwidth must be a positive number or {PER_FEATURE!r}, got {self.bandwidth!r}")
            return True
        return False

    def _args(self) -> dict[str, Any]:
        """The kernel as the engine takes it: with per-feature bandwidths,
        the profile at bandwidth 1 over the scaled features."""
        if self._per_feature():
            return {**kernel_params(1.0, self.kernel), "backend": self.backend}
        return self._kernel_args()

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> KernelRegression:
        """Keeps the training points and targets, prepared on the engine.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weights: ``ŷ(x) = Σ w_j K_j y_j / Σ w_j K_j``
            (``degree=0`` only).

        Returns
        -------
        KernelRegression
            The fitted estimator.
        """
        per_feature = self._per_feature()
        self._args()
        if isinstance(self.degree, bool) or self.degree not in (0, 1):
            raise ValueError(f"degree must be 0 (local constant) or 1 (local linear), got {self.degree!r}")
        if per_feature and (self.degree != 0 or sample_weight is not None):
            raise InputError(f"bandwidth={PER_FEATURE!r} supports degree=0 without sample_weight only")
        X, y = check_points_targets(self, X, y, multi_output=True, y_numeric=True)
        n = X.shape[0]
        y2 = np.asarray(y, dtype=np.float64).reshape(n, -1)
        keys = X
        self._scale: np.ndarray | None = None
        if per_feature:
            sel = select_bandwidths_per_feature(X, y2, kernel=self.kernel, backend=self.backend)
            self.bandwidth_: Any = sel.bandwidths
            self.loo_error_ = sel.error
            self._scale = 1.0 / sel.bandwidths
            keys = np.asarray(X, dtype=np.float64) * self._scale
        else:
            self.bandwidth_ = None if self.bandwidth is None else float(self.bandwidth)
        w = None
        if sample_weight is not None:
            if self.degree != 0:
                raise InputError("sample_weight is supported with degree=0 only")
            w = check_weights(sample_weight, X)
            w = w * weight_scale(w)
        # Targets centred on their mean (a local fit shifts with them), so
        # float32 keeps their digits under a common offset.
        self._y_offset = np.average(y2, axis=0, weights=w)
        yc = y2 - self._y_offset
        values = yc if w is None else np.column_stack([yc * w[:, None], w])
        values = np.ascontiguousarray(values, dtype=np.float32)
        self._fitted = FittedKeys(keys, self.backend, values, sample_weight=w)
        self._fitted.keyset()
        self._weighted = w is not None
        self.X_ = X
        self.y_ = y
        return self

    def predict(self, X: Any) -> np.ndarray:
        """The local fit of the training targets at each sample (shape
        ``(n,)`` or ``(n, n_outputs)`` as ``y``; float64 unless ``X`` and
        ``y`` were both float32; NaN where a compact kernel finds no
        training point).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The samples.

        Returns
        -------
        numpy.ndarray of shape (n_samples,) or (n_samples, n_outputs)
            The predictions.
        """
        check_is_fitted(self)
        X = check_points(self, X, reset=False)
        fitted = self._fitted
        if self._scale is not None:
            X = np.asarray(X, dtype=np.float64) * self._scale
        q = fitted.queries(X)
        kw = {k: v for k, v in self._args().items() if k != "backend"}
        ks = fitted.keyset()
        if self.degree == 1:
            out = ks.local_polynomial(q, **kw, degree=1).astype(np.float64)
        else:
            # Σ w K y and Σ w K as the row states' float64 sums, divided in
            # float64 (so a weight of 2 and a repeated point agree to ~1e-15).
            _, total, u = ks.row_states(q, **kw)
            if self._weighted:
                u, total = u[:, :-1], u[:, -1]
            with np.errstate(divide="ignore", invalid="ignore"):
                out = u / total[:, None]
        out += self._y_offset
        out = out.astype(result_dtype(self.X_, self.y_), copy=False)
        return out[:, 0] if self.y_.ndim == 1 else out

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags
