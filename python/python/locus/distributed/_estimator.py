"""``locus.distributed.MeanShift``: the face of
:class:`sklearn.cluster.MeanShift` (and of :class:`locus.MeanShift`) over
a Dask cluster, on NumPy or Dask arrays, as dask-ml's estimators take
them."""

from __future__ import annotations

from typing import Any

import distributed
import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils.validation import check_is_fitted

from .._base import check_bandwidth, check_bool, check_int, check_kernel
from .._cluster import _CLOSED, nearest_centres
from .._cluster_functions import estimate_bandwidth
from .._engine import check_backend
from .._errors import InputError
from .._kernels import ProductKernel
from ._mean_shift import mean_shift
from ._placement import _is_dask
from ._watch import DEFAULT_TIMEOUT

__all__ = ["MeanShift"]

# Points the bandwidth estimate draws when none is given.
_ESTIMATE_ROWS = 10_000


class MeanShift(ClusterMixin, BaseEstimator):
    """MeanShift on a Dask cluster, with the constructor, ``fit``,
    ``predict``, ``labels_`` and ``cluster_centers_`` of
    :class:`sklearn.cluster.MeanShift`: the points stay on the workers,
    one resident key set per shard (:func:`locus.distributed.mean_shift`),
    and the result is :func:`locus.mean_shift`'s on the same data (same
    partition, centres equal up to float rounding).

    Two defaults differ from scikit-learn's, for data too large for one
    machine: ``bin_seeding=True`` (seeding every point brings them all to
    the driver; ``bin_seeding=False`` does that), and with
    ``bandwidth=None`` the quantile-0.3 estimate is taken on a random
    sample of at most 10 000 points, not on all of them.

    Parameters
    ----------
    client : distributed.Client or None, default=None
        The cluster's client; None: the current default client
        (:func:`distributed.get_client`).
    bandwidth : float or None, default=None
        The radius of the neighbourhoods (> 0); None estimates it on a
        sample (see above).
    seeds : array-like of shape (n_seeds, n_features) or None, default=None
        Where the seeds start; None: the bins (or every point).
    bin_seeding : bool, default=True
        Seeds on a grid of side ``bandwidth`` (counted per shard, summed),
        one per bin holding at least ``min_bin_freq`` points.
    min_bin_freq : int, default=1
        The fewest points a bin needs to give a seed.
    cluster_all : bool, default=True
        False: a point farther than ``bandwidth`` from every centre is
        labelled −1.
    max_iter : int, default=300
        The most steps after the first a seed takes (≥ 0).
    kernel : str or ProductKernel, default="flat"
        scikit-learn's flat kernel (a closed ball, as :class:`locus.MeanShift`),
        another locus profile, or a :class:`~locus.ProductKernel` with
        ``bandwidth=None``.
    backend : {"auto", "gpu", "cpu"}, default="auto"
        The engine each worker opens.
    shards : int or None, default=None
        How many shards (default: one per worker for NumPy input, the row
        chunks for Dask input).
    timeout : float, default=30
        Seconds any exchange that moves data or asks the scheduler may take.

    Attributes
    ----------
    cluster_centers_ : numpy.ndarray of shape (n_clusters, n_features)
        The centres, most populated first (float32).
    labels_ : numpy.ndarray of shape (n_samples,)
        Each point's cluster (int64), −1 for an orphan.
    n_iter_ : int
        The most steps after the first any seed took.
    bandwidth_ : float
        The bandwidth given or estimated (the flat kernel's ball is then
        widened by ``1 + 2⁻²⁰`` to be closed, as :class:`locus.MeanShift`'s).
    n_features_in_ : int
        Features seen in ``fit``.

    Examples
    --------
    A cluster of two local worker processes::

        from distributed import Client, LocalCluster
        import numpy as np
        import locus.distributed as ld

        client = Client(LocalCluster(n_workers=2, threads_per_worker=1))
        X = np.random.default_rng(0).normal(size=(1_000_000, 2))
        ms = ld.MeanShift(bandwidth=0.5, backend="cpu").fit(X)
        ms.cluster_centers_, ms.predict([[0.0, 0.0]])
    """

    def __init__(
        self,
        *,
        client: distributed.Client | None = None,
        bandwidth: float | None = None,
        seeds: Any = None,
        bin_seeding: bool = True,
        min_bin_freq: int = 1,
        cluster_all: bool = True,
        max_iter: int = 300,
        kernel: str | ProductKernel = "flat",
        backend: str = "auto",
        shards: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.client = client
        self.bandwidth = bandwidth
        self.seeds = seeds
        self.bin_seeding = bin_seeding
        self.min_bin_freq = min_bin_freq
        self.cluster_all = cluster_all
        self.max_iter = max_iter
        self.kernel = kernel
        self.backend = backend
        self.shards = shards
        self.timeout = timeout

    def __sklearn_clone__(self) -> MeanShift:
        """A clone that shares the client (a live connection, which
        :func:`sklearn.base.clone` would otherwise deep-copy) and clones
        every other parameter."""
        from sklearn.base import clone

        params = self.get_params(deep=False)
        client = params.pop("client")
        return type(self)(client=client, **{k: clone(v, safe=False) for k, v in params.items()})

    def _client(self) -> distributed.Client:
        if self.client is not None:
            if not isinstance(self.client, distributed.Client):
                raise InputError(f"client must be a distributed.Client, got {type(self.client).__name__}")
            return self.client
        try:
            return distributed.get_client()
        except ValueError:
            raise InputError(
                "no Dask client: pass client=... or create a distributed.Client first"
            ) from None

    def _bandwidth(self, X: Any) -> float | None:
        """The bandwidth: given, or estimated on a sample of the rows."""
        if isinstance(self.kernel, ProductKernel):
            if self.bandwidth is not None:
                raise InputError("a ProductKernel carries its blocks' bandwidths: set bandwidth=None with it")
            return None
        if self.bandwidth is not None:
            return check_bandwidth(self.bandwidth)
        n = int(X.shape[0])
        rows = np.sort(np.random.default_rng(0).choice(n, min(n, _ESTIMATE_ROWS), replace=False))
        sample = X[rows]
        if _is_dask(sample):
            sample = sample.compute()
        h = estimate_bandwidth(np.asarray(sample), backend=self.backend)
        if not h > 0:
            raise InputError(
                "the estimated bandwidth is 0 (the sampled points repeat); give a bandwidth"
            )
        return float(h)

    def fit(self, X: Any, y: Any = None) -> MeanShift:
        """Clusters ``X`` (a NumPy or Dask array, n_samples × n_features).

        Parameters
        ----------
        X : array-like or dask.array.Array of shape (n_samples, n_features)
            The points.
        y : None
            Ignored.

        Returns
        -------
        MeanShift
            The fitted estimator.
        """
        check_backend(self.backend)
        check_kernel(self.kernel)
        bin_seeding = check_bool(self.bin_seeding, "bin_seeding")
        min_bin_freq = check_int(self.min_bin_freq, "min_bin_freq", minimum=1)
        max_iter = check_int(self.max_iter, "max_iter", minimum=0)
        cluster_all = check_bool(self.cluster_all, "cluster_all")
        client = self._client()
        if not _is_dask(X):
            X = np.asarray(X)
        if len(X.shape) != 2:
            raise InputError(f"X must be 2-D (n_samples, n_features), got shape {X.shape}")
        h = self._bandwidth(X)
        product = isinstance(self.kernel, ProductKernel)
        flat = not product and str(self.kernel).lower() in ("flat", "uniform", "tophat")
        seeds: Any = "binned" if bin_seeding else "all"
        if self.seeds is not None:
            seeds = self.seeds
        r = mean_shift(
            client,
            X,
            bandwidth=None if h is None else h * (_CLOSED if flat else 1.0),
            kernel="uniform" if flat else self.kernel,
            seeds=seeds,
            min_bin_freq=min_bin_freq,
            cluster_all=cluster_all,
            max_iter=max_iter + 1,
            backend=self.backend,
            shards=self.shards,
            timeout=self.timeout,
        )
        self.cluster_centers_ = r.cluster_centers
        self.labels_ = r.labels
        self.n_iter_ = max(int(r.n_iter) - 1, 0)
        self.bandwidth_ = float(r.bandwidth) if h is None else h
        self.n_features_in_ = int(X.shape[1])
        return self

    def predict(self, X: Any) -> np.ndarray:
        """The index of the nearest cluster centre for each sample.

        Parameters
        ----------
        X : array-like or dask.array.Array of shape (n_samples, n_features)
            The points to label (a Dask array is labelled chunk by chunk on
            the workers and returned as a Dask array).

        Returns
        -------
        numpy.ndarray or dask.array.Array of shape (n_samples,)
            The index (int64) of each point's nearest centre.
        """
        check_is_fitted(self)
        centres = np.asarray(self.cluster_centers_, dtype=np.float64)
        if _is_dask(X):
            if X.ndim != 2 or int(X.shape[1]) != self.n_features_in_:
                raise InputError(f"X must have {self.n_features_in_} columns, got shape {X.shape}")
            # Whole rows per block: a block split across columns would hold
            # only some coordinates.
            X = X.rechunk({1: -1})
            return X.map_blocks(_nearest, centres, self.kernel, drop_axis=1, dtype=np.int64)
        x = np.asarray(X, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.n_features_in_:
            raise InputError(f"X must have {self.n_features_in_} columns, got shape {x.shape}")
        return nearest_centres(x, centres, self.kernel)


def _nearest(x: np.ndarray, centres: np.ndarray, kernel: Any) -> np.ndarray:
    """A block's rows' nearest centres (run on the workers)."""
    return nearest_centres(np.asarray(x, dtype=np.float64), centres, kernel)
