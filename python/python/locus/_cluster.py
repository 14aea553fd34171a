"""MeanShift as a scikit-learn clusterer."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils import check_array
from sklearn.utils.validation import check_is_fitted

from ._base import check_bandwidth, check_X, keep_params
from ._engine import check_backend
from ._functions import knn, mean_shift
from ._kernels import ProductKernel

__all__ = ["MeanShift"]


class MeanShift(ClusterMixin, BaseEstimator):
    """MeanShift clustering on the GPU or the CPU, a drop-in for
    :class:`sklearn.cluster.MeanShift`.

    Parameters as scikit-learn's (``bandwidth``: a number or None to
    estimate it with ``estimate_bandwidth`` at quantile 0.3; ``seeds``;
    ``bin_seeding``; ``min_bin_freq``; ``cluster_all``; ``max_iter``;
    ``n_jobs`` is accepted and ignored, the engine uses every core), plus
    ``kernel`` (default ``"flat"``, scikit-learn's; any locus kernel) and
    ``backend`` (``"auto"``, ``"gpu"``, ``"cpu"``). Data are processed in
    float32. With the flat kernel the partition is scikit-learn's.

    Attributes: ``cluster_centers_`` (float32), ``labels_``, ``n_iter_``,
    ``n_features_in_``, ``feature_names_in_`` (when X has column names),
    and ``bandwidth_`` (the bandwidth used).

    >>> import numpy as np, locus
    >>> X = np.array([[1, 1], [2, 1], [1, 0], [4, 7], [3, 5], [3, 6]])
    >>> ms = locus.MeanShift(bandwidth=2, backend="cpu").fit(X)
    >>> ms.labels_
    array([1, 1, 1, 0, 0, 0])
    >>> ms.predict([[0, 0], [5, 5]])
    array([1, 0])
    """

    def __init__(
        self,
        *,
        bandwidth: float | None = None,
        seeds: Any = None,
        bin_seeding: bool = False,
        min_bin_freq: int = 1,
        cluster_all: bool = True,
        n_jobs: int | None = None,
        max_iter: int = 300,
        kernel: str = "flat",
        backend: str = "auto",
    ) -> None:
        keep_params(self, locals())

    def fit(self, X: Any, y: Any = None) -> MeanShift:
        """Clusters ``X`` (n_samples × n_features); ``y`` is ignored."""
        check_backend(self.backend)
        X = check_X(self, X, reset=True)
        h = None if self.bandwidth is None else check_bandwidth(self.bandwidth)
        if h is None and X.shape[0] == 1 and not isinstance(self.kernel, ProductKernel):
            raise ValueError(
                "MeanShift cannot estimate a bandwidth from 1 sample; give bandwidth"
            )
        seeds = (
            None
            if self.seeds is None
            else check_array(self.seeds, dtype=np.float32, order="C", input_name="seeds")
        )
        r = mean_shift(
            X,
            bandwidth=h,
            kernel=self.kernel,
            seeds=seeds,
            bin_seeding=self.bin_seeding,
            min_bin_freq=self.min_bin_freq,
            cluster_all=self.cluster_all,
            max_iter=self.max_iter,
            backend=self.backend,
        )
        self.cluster_centers_ = r.cluster_centers
        self.labels_ = r.labels
        self.n_iter_ = int(r.n_iter)
        self.bandwidth_ = float(r.bandwidth)
        return self

    def predict(self, X: Any) -> np.ndarray:
        """The index of the nearest cluster centre for each sample (with a
        :class:`~locus.ProductKernel`, nearest in units of its blocks'
        bandwidths, as ``fit`` labels)."""
        check_is_fitted(self)
        X = check_X(self, X, reset=False)
        centres = self.cluster_centers_
        if isinstance(self.kernel, ProductKernel):
            scale = np.array(
                [h for d, _, h in self.kernel.blocks for _ in range(d)], dtype=np.float32
            )
            X, centres = X / scale, centres / scale
        _, idx = knn(X, centres, 1, backend=self.backend)
        return idx[:, 0]
