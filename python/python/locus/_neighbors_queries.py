"""The neighbour queries every neighbours estimator answers, as
scikit-learn's ``KNeighborsMixin`` and ``RadiusNeighborsMixin``:
``kneighbors``, ``kneighbors_graph``, ``radius_neighbors``,
``radius_neighbors_graph``.

Candidates come from the engine (the prepared key set's kNN; the uniform
kernel's matrix for a radius, with a margin for float32 rounding); the
distances returned are then computed exactly, in float64, from the points
as given, so they and the order they set (nearest first, equal distances
in index order) are scikit-learn's, in the training points' dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from ._base import check_positive_int
from ._compat import check_algorithm, check_metric_columns, check_n_jobs, csr, metric_spec
from ._engine import check_backend, engine_for
from ._errors import InputError
from ._fitted import FittedKeys, check_points
from ._functions import kernel_matrix
from ._results import KNNResult

__all__ = ["NeighborsQueries"]

# Entries of one block of a radius query's kernel matrix (rows × keys).
_BLOCK = 1 << 22


def _metric_dists(a: np.ndarray, b: np.ndarray, metric: str) -> np.ndarray:
    """Row-wise distances between ``a`` and ``b`` (float64) under the
    engine's ``metric`` (``_compat.metric_spec``)."""
    diff = np.subtract(a, b, dtype=np.float64)
    if metric == "euclidean":
        return np.sqrt(np.einsum("ij,ij->i", diff, diff))
    if metric == "manhattan":
        return np.abs(diff).sum(axis=1)
    if metric == "chebyshev":
        return np.abs(diff).max(axis=1, initial=0.0)
    if metric == "haversine":
        lat_a, lat_b = a[:, 0].astype(np.float64), b[:, 0].astype(np.float64)
        h = np.sin(0.5 * diff[:, 0]) ** 2 + np.cos(lat_a) * np.cos(lat_b) * np.sin(0.5 * diff[:, 1]) ** 2
        return 2.0 * np.arcsin(np.sqrt(np.clip(h, 0.0, 1.0)))
    p = float(metric.split(":", 1)[1])
    return (np.abs(diff) ** p).sum(axis=1) ** (1.0 / p)


def _pair_dists(
    Q: np.ndarray, X: np.ndarray, rows: np.ndarray, cols: np.ndarray, metric: str = "euclidean"
) -> np.ndarray:
    """Distances under ``metric`` between ``Q[rows]`` and ``X[cols]``, in float64."""
    out = np.empty(len(rows), dtype=np.float64)
    step = max(1, _BLOCK // max(1, Q.shape[1]))
    for s in range(0, len(rows), step):
        out[s : s + step] = _metric_dists(Q[rows[s : s + step]], X[cols[s : s + step]], metric)
    return out


def _object_array(parts: list[np.ndarray]) -> np.ndarray:
    out = np.empty(len(parts), dtype=object)
    out[:] = parts
    return out


class NeighborsQueries(BaseEstimator):
    """Fitted training points and the neighbour queries on them (the base
    of the neighbours estimators)."""

    n_neighbors: Any
    algorithm: Any
    leaf_size: Any
    metric: Any
    p: Any
    metric_params: Any
    n_jobs: Any
    backend: Any

    def _check_neighbor_params(self) -> None:
        check_backend(self.backend)
        check_positive_int(self.n_neighbors, "n_neighbors")
        check_algorithm(self.algorithm, self.leaf_size)
        self._metric = metric_spec(self.metric, self.p, self.metric_params)
        check_n_jobs(self.n_jobs)

    def _fit_points(self, X: np.ndarray) -> None:
        """Keeps the validated points and prepares their key set."""
        metric = self._metric
        check_metric_columns(metric, X.shape[1])
        self._fitted = FittedKeys(
            X, self.backend, n_jobs=self.n_jobs, centre=metric != "haversine"
        )
        self._fitted.keyset()
        self.X_ = X
        self.n_samples_fit_ = X.shape[0]
        self.effective_metric_params_: dict[str, Any] = {}
        if metric.startswith("minkowski:"):
            self.effective_metric_ = "minkowski"
            self.effective_metric_params_ = {"p": float(metric.split(":", 1)[1])}
        else:
            self.effective_metric_ = metric

    def _queries(self, X: Any) -> tuple[np.ndarray, bool]:
        check_is_fitted(self)
        if X is None:
            return self.X_, True
        return check_points(self, X, reset=False), False

    def kneighbors(
        self, X: Any = None, n_neighbors: int | None = None, return_distance: bool = True
    ) -> Any:
        """The ``n_neighbors`` nearest training points of each sample of
        ``X``, nearest first (equal distances in index order), as
        scikit-learn's ``kneighbors``: ``(distances, indices)`` (a
        :class:`~locus.KNNResult`), or the indices alone. With ``X=None``,
        the neighbours of each training point, itself excluded.

        Parameters
        ----------
        X : array-like of shape (n_queries, n_features), default=None
            The query points; ``None`` for the training points.
        n_neighbors : int, default=None
            How many neighbours (default: the estimator's ``n_neighbors``).
        return_distance : bool, default=True
            Whether to return the distances too.

        Returns
        -------
        distances : ndarray of shape (n_queries, n_neighbors)
            Distances under the estimator's metric, in the training
            points' dtype.
        indices : ndarray of shape (n_queries, n_neighbors)
            Indices of the neighbours among the training points (int64).
        """
        Q, query_is_train = self._queries(X)
        k = check_positive_int(self.n_neighbors if n_neighbors is None else n_neighbors, "n_neighbors")
        k_query = k + 1 if query_is_train else k
        n_fit = self.n_samples_fit_
        if k_query > n_fit:
            raise InputError(
                f"Expected n_neighbors <= n_samples_fit, but n_neighbors = {k_query}, "
                f"n_samples_fit = {n_fit}, n_samples = {Q.shape[0]}"
            )
        fitted = self._fitted
        qc = fitted.keys if query_is_train else fitted.queries(Q)
        _, idx = fitted.keyset().knn(qc, k_query, metric=self._metric)
        rows = np.repeat(np.arange(Q.shape[0]), k_query)
        dist = _pair_dists(Q, self.X_, rows, idx.ravel(), self._metric).reshape(idx.shape)
        order = np.lexsort((idx, dist), axis=-1)
        idx = np.take_along_axis(idx, order, axis=1)
        dist = np.take_along_axis(dist, order, axis=1)
        if query_is_train:
            # scikit-learn's rule: drop each point itself, or, when
            # duplicates pushed it out of the list, the nearest.
            keep = idx != np.arange(Q.shape[0])[:, None]
            keep[~(~keep).any(axis=1), 0] = False
            idx = idx[keep].reshape(Q.shape[0], k)
            dist = dist[keep].reshape(Q.shape[0], k)
        if not return_distance:
            return idx
        return KNNResult(dist.astype(self.X_.dtype, copy=False), idx)

    def kneighbors_graph(
        self, X: Any = None, n_neighbors: int | None = None, mode: str = "connectivity"
    ) -> Any:
        """The k-neighbours graph as a sparse CSR matrix (n_queries ×
        n_samples_fit), as scikit-learn's ``kneighbors_graph``: ones
        (``mode="connectivity"``) or distances (``mode="distance"``), each
        row's entries nearest first.

        Parameters
        ----------
        X : array-like of shape (n_queries, n_features), default=None
            The query points; ``None`` for the training points (each point's
            own entry left out).
        n_neighbors : int, default=None
            Neighbours per query (default: the estimator's ``n_neighbors``).
        mode : {"connectivity", "distance"}, default="connectivity"
            The entries: ones, or the distances.

        Returns
        -------
        scipy.sparse.csr_matrix of shape (n_queries, n_samples_fit)
            The graph (a ``csr_array`` under scikit-learn's
            ``sparse_interface="sparray"``).
        """
        if mode not in ("connectivity", "distance"):
            raise InputError(f'mode must be "connectivity" or "distance", got {mode!r}')
        k = self.n_neighbors if n_neighbors is None else n_neighbors
        if mode == "connectivity":
            ind = self.kneighbors(X, k, return_distance=False)
            data = np.ones(ind.size)
        else:
            dist, ind = self.kneighbors(X, k)
            data = dist.ravel()
        n_queries, k = ind.shape
        indptr = np.arange(0, n_queries * k + 1, k)
        return csr(data, ind.ravel(), indptr, (n_queries, self.n_samples_fit_))

    def _radius(self, radius: Any) -> float:
        if radius is None:
            radius = getattr(self, "radius", None)
            if radius is None:
                raise InputError("give a radius (this estimator has none of its own)")
        if isinstance(radius, (bool, np.bool_)) or not isinstance(radius, (int, float, np.number)):
            raise InputError(f"radius must be a number >= 0, got {radius!r}")
        radius = float(radius)
        if not np.isfinite(radius) or radius < 0:
            raise InputError(f"radius must be a finite number >= 0, got {radius}")
        return radius

    def radius_neighbors(
        self,
        X: Any = None,
        radius: float | None = None,
        return_distance: bool = True,
        sort_results: bool = False,
    ) -> Any:
        """The training points within ``radius`` (distance ≤ radius) of
        each sample, as scikit-learn's ``radius_neighbors``: object arrays
        of one array per query, ``(distances, indices)`` or the indices
        alone, in index order (by distance with ``sort_results``). With
        ``X=None``, of each training point, itself excluded.

        Parameters
        ----------
        X : array-like of shape (n_queries, n_features), default=None
            The query points; ``None`` for the training points.
        radius : float, default=None
            The radius (default: the estimator's ``radius``).
        return_distance : bool, default=True
            Whether to return the distances too.
        sort_results : bool, default=False
            Each query's neighbours nearest first (needs ``return_distance``).

        Returns
        -------
        distances : ndarray of shape (n_queries,) of arrays
            Distances under the estimator's metric, in the training
            points' dtype.
        indices : ndarray of shape (n_queries,) of arrays
            Indices of the neighbours (int64).
        """
        if sort_results and not return_distance:
            raise InputError("return_distance must be True if sort_results is True.")
        Q, query_is_train = self._queries(X)
        r = self._radius(radius)
        fitted = self._fitted
        keys = fitted.keys
        qc = keys if query_is_train else fitted.queries(Q)
        # The engine's float32 squared distances are within about 1e-6 of
        # (|q|² + |x|²) of the exact ones: a margin of 1e-5 of that finds
        # every candidate; the exact distances then decide. Candidates are
        # Euclidean: within r under p ≤ 2 (Manhattan included) is within r
        # Euclidean; under p > 2 (Chebyshev included) within r·√d; haversine
        # (longitudes wrap around) takes every point as a candidate.
        metric = self._metric
        p = 1.0 if metric == "manhattan" else float(metric.split(":", 1)[1]) if ":" in metric else 2.0
        if metric == "chebyshev" or p > 2:
            r_e = r * float(np.sqrt(Q.shape[1]))
        else:
            r_e = r
        big = float(np.max(np.einsum("ij,ij->i", keys, keys), initial=0.0))
        n_fit = self.n_samples_fit_
        step = max(1, _BLOCK // n_fit)
        engine = engine_for(self.backend, self.n_jobs)
        dists: list[np.ndarray] = []
        inds: list[np.ndarray] = []
        for s in range(0, Q.shape[0], step):
            qb = qc[s : s + step]
            q2 = float(np.max(np.einsum("ij,ij->i", qb, qb), initial=0.0))
            h = float(np.sqrt(r_e * r_e + 1e-5 * (big + q2) + 1e-30)) * (1 + 1e-5)
            if metric == "haversine":
                member = np.ones((len(qb), n_fit), dtype=bool)
            else:
                member = kernel_matrix(qb, keys, bandwidth=h, kernel="uniform", backend=engine) > 0
            rows, cols = np.nonzero(member)
            d = _pair_dists(Q[s : s + step], self.X_, rows, cols, metric)
            ok = d <= r
            if query_is_train:
                ok &= cols != rows + s
            rows, cols, d = rows[ok], cols[ok].astype(np.int64), d[ok]
            bounds = np.searchsorted(rows, np.arange(len(qb) + 1))
            for i in range(len(qb)):
                ci, di = cols[bounds[i] : bounds[i + 1]], d[bounds[i] : bounds[i + 1]]
                if sort_results:
                    o = np.argsort(di, kind="stable")
                    ci, di = ci[o], di[o]
                inds.append(ci)
                dists.append(di.astype(self.X_.dtype, copy=False))
        if not return_distance:
            return _object_array(inds)
        return _object_array(dists), _object_array(inds)

    def radius_neighbors_graph(
        self,
        X: Any = None,
        radius: float | None = None,
        mode: str = "connectivity",
        sort_results: bool = False,
    ) -> Any:
        """The radius-neighbours graph as a sparse CSR matrix (n_queries ×
        n_samples_fit), as scikit-learn's ``radius_neighbors_graph``: ones
        (``mode="connectivity"``) or distances (``mode="distance"``).

        Parameters
        ----------
        X : array-like of shape (n_queries, n_features), default=None
            The query points; ``None`` for the training points (each point's
            own entry left out).
        radius : float, default=None
            The radius (default: the estimator's ``radius``).
        mode : {"connectivity", "distance"}, default="connectivity"
            The entries: ones, or the distances.
        sort_results : bool, default=False
            Each row's entries by distance (``mode="distance"`` only).

        Returns
        -------
        scipy.sparse.csr_matrix of shape (n_queries, n_samples_fit)
            The graph (a ``csr_array`` under scikit-learn's
            ``sparse_interface="sparray"``).
        """
        if mode not in ("connectivity", "distance"):
            raise InputError(f'mode must be "connectivity" or "distance", got {mode!r}')
        if mode == "connectivity":
            ind = self.radius_neighbors(X, radius, return_distance=False)
            data = None
        else:
            dist, ind = self.radius_neighbors(X, radius, sort_results=sort_results)
            data = np.concatenate(list(dist)) if len(dist) else np.zeros(0)
        counts = np.array([len(a) for a in ind], dtype=np.int64)
        flat = np.concatenate(list(ind)) if len(ind) else np.zeros(0, dtype=np.int64)
        if data is None:
            data = np.ones(len(flat))
        indptr = np.concatenate(([0], np.cumsum(counts)))
        return csr(data, flat, indptr, (len(ind), self.n_samples_fit_))
