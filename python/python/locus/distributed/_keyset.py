"""A key set split into shards: each shard answers for its keys on its
worker, and the answers merge into the single-node key set's."""

from __future__ import annotations

import math
import numbers
from functools import partial
from typing import Any

import distributed
import numpy as np

from .. import _locus
from .._arrays import as_count, as_labels, as_matrix, as_values
from .._engine import check_backend
from .._errors import InputError
from .._kernels import ProductKernel, kernel_arg
from .._results import KNNResult, RowStates
from . import _space, _watch
from ._merge import _merge_knn, _ratio, merge_states
from ._tasks import _knn_task, _log_mass, _states
from ._placement import (
    DEFAULT_TIMEOUT,
    Needs,
    _check_dask,
    _check_finite,
    _check_nonempty,
    _check_shards,
    _is_dask,
    _known_rows,
    _Sharded,
    _workers,
)


def _check_kernel(bandwidth: Any, kernel: Any) -> float | None:
    """``bandwidth`` as a float, after the driver checked it and ``kernel``
    by the engine's own rules (nothing is computed), so a bad parameter is
    refused before any task is sent, with the single-node error; ``None``
    for a :class:`~locus.ProductKernel`, which takes no bandwidth."""
    product = isinstance(kernel, ProductKernel)
    if not product and (isinstance(bandwidth, str) or not isinstance(bandwidth, numbers.Real)):
        raise TypeError(f"bandwidth must be a number, got {type(bandwidth).__name__}")
    _locus.check_kernel(kernel_arg(kernel, bandwidth))
    return None if product else float(bandwidth)


class ShardedKeySet(_Sharded):
    """Keys (and values, labels) split into shards, one resident
    :class:`locus.KeySet` per shard on the Dask worker that holds it.

    ``keys``: a NumPy array (split into ``shards`` row blocks, default one
    per worker, each scattered to one worker) or a Dask array (its row
    chunks are the shards, or ``shards`` blocks after a rechunk; the blocks
    are computed on the workers and never gathered). ``values`` (N or
    N × q) and ``labels`` (N) likewise, NumPy or Dask. The class list is
    the union of the labels across all shards, so every shard's
    probabilities have the same columns. ``backend`` is the engine name
    each worker opens (``"auto"``, ``"gpu"``, ``"cpu"``).

    The methods are those of :class:`locus.KeySet`, with the same results
    (up to float rounding of the merged sums, ~1e-7 relative): each shard
    answers for its keys, and the answers are merged associatively.
    Indices returned by :meth:`knn` are global (row order of ``keys``).

    A call never answers without every shard: when a shard's worker dies,
    the call (and every later one) raises :class:`ShardLostError` within
    about a second of the scheduler noticing, naming the shard. Each call
    asks the scheduler where the shards are before sending anything, sends
    the queries to the workers holding them (not broadcast) and watches the
    shards while the workers compute. ``timeout`` (seconds, default 30)
    bounds every exchange that moves data or asks the scheduler (placing
    the shards, sending the queries, each probe): past it the call raises
    :class:`ShardLostError`. The compute itself is not bounded, only
    watched; raise ``timeout`` for queries too large to send in 30 s.

    Parameters
    ----------
    client : distributed.Client
        The Dask client of the cluster.
    keys : array-like or dask.array.Array of shape (n_keys, n_features)
        The keys, NumPy or Dask.
    values : array-like or dask.array.Array of shape (n_keys,) or (n_keys, q), default=None
        Their values.
    labels : array-like or dask.array.Array of shape (n_keys,), default=None
        Their labels.
    backend : {"auto", "gpu", "cpu"}, default="auto"
        The engine each worker opens.
    shards : int or None, default=None
        How many shards (default: one per worker for NumPy input, the row
        chunks for Dask input; by space, one per worker).
    timeout : float, default=30
        Seconds any exchange that moves data or asks the scheduler may take.
    partition : {"rows", "space"}, default="rows"
        ``"rows"``: each shard a block of rows, and every query asks every
        shard. ``"space"``: the keys cut into slabs along their widest
        coordinate (at quantiles of a sample: about equal numbers of keys
        per slab; slab i on worker i mod W), each shard knowing the box its
        keys fill; a query under a compact kernel (``uniform``,
        ``epanechnikov``, ``triangular``, ``biweight``, ``cosine``) asks
        only the shards whose box lies within the bandwidth of it (none:
        an empty neighbourhood), and :meth:`knn` asks the shard whose box
        is nearest, then only those whose box is nearer than the k-th
        neighbour found there. Kernels of full support and product kernels
        ask every shard. Same results either way (up to the order of the
        merged sums); indices stay global.
    """

    def __init__(
        self,
        client: distributed.Client,
        keys: Any,
        values: Any = None,
        labels: Any = None,
        *,
        backend: str = "auto",
        shards: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        partition: str = "rows",
    ) -> None:
        super().__init__(client, timeout)
        # Everything the driver can check is checked before any task is sent.
        check_backend(backend)
        if partition not in ("rows", "space"):
            raise InputError(f'partition must be "rows" or "space", got {partition!r}')
        self.partition = partition
        shards = _check_shards(shards)
        workers = _workers(client)
        n = None  # rows of the keys, where known on the driver
        if _is_dask(keys):
            _check_dask(keys, "keys", (2,))
            n = _known_rows(keys)
        else:
            keys = as_matrix(keys, "keys")
            _check_nonempty(keys.shape, "keys")
            _check_finite(keys, "keys")
            n = keys.shape[0]
        if n == 0:
            _check_nonempty(keys.shape, "keys")
        self._vector = False
        self._q = None
        if values is not None:
            if _is_dask(values):
                _check_dask(values, "values", (1, 2))
                ndim = values.ndim
            else:
                values, vector = as_values(values, "values")
                ndim = 1 if vector else 2
                _check_finite(values, "values")
            m = _known_rows(values) if _is_dask(values) else values.shape[0]
            if n is not None and m is not None and m != n:
                raise InputError(f"values has {m} rows but there are {n} keys")
            self._vector = ndim == 1
            self._q = 1 if ndim == 1 else int(values.shape[1])
        self._classes = None
        if labels is not None:
            if _is_dask(labels):
                import dask.array as da

                _check_dask(labels, "labels", (1,))
                m = _known_rows(labels)
                if n is not None and m is not None and m != n:
                    raise InputError(f"labels has {m} entries but there are {n} keys")
                self._classes = _watch.gather(
                    client, client.compute(da.unique(labels)), Needs(), "placing the labels", self.timeout
                )
                if self._classes.dtype.kind == "f" and not np.all(np.isfinite(self._classes)):
                    raise InputError("labels must be finite")
            else:
                lab = np.asarray(labels)
                # Keys of unknown length (Dask, unknown chunks): the count
                # is checked on the workers.
                rows = n if n is not None else (lab.shape[0] if lab.ndim else 0)
                self._classes = as_labels(lab, rows)[0]
        if partition == "space":
            _space.place(self, keys, values, labels, self._classes, backend, shards, workers)
        else:
            self._place(keys, values, labels, self._classes, backend, shards, workers=workers)
        self._dim = int(keys.shape[1])  # known on the driver: checked above
        self.backend = backend

    # -- properties -----------------------------------------------------------

    @property
    def n_keys(self) -> int:
        """Number of keys N, over all shards."""
        return int(sum(self.rows))

    @property
    def dim(self) -> int:
        """Dimension d of keys and queries."""
        return self._dim

    @property
    def classes(self) -> np.ndarray | None:
        """The distinct labels over all shards (sorted)."""
        return self._classes

    @property
    def n_shards(self) -> int:
        """Number of shards."""
        return len(self.shards)

    @property
    def shard_rows(self) -> list[int]:
        """Keys per shard, in shard order (by rows: in row order)."""
        return list(self.rows)

    def where(self) -> list[str]:
        """The worker holding each shard.

        Returns
        -------
        list of str
            The address of each shard's worker (comma-separated if several).
        """
        who = _watch.who_has(self.client, self.shards, "where", self.timeout)
        return [",".join(who.get(s.key, ())) for s in self.shards]

    # -- ops -------------------------------------------------------------------

    def _queries(self, queries: Any) -> np.ndarray:
        self._check()
        q = as_matrix(queries, "queries")
        _check_nonempty(q.shape, "queries")
        if q.shape[1] != self._dim:
            raise InputError(
                f"queries have dimension {q.shape[1]} but the keys have dimension {self._dim}"
            )
        _check_finite(q, "queries")
        return q

    def _shard_name(self, i: int) -> str:
        if self.partition != "space":
            return super()._shard_name(i)
        on = ",".join(self.homes[i]) or "no worker"
        return f"shard {i} of {len(self.shards)} (slab {i}, {self.rows[i]} keys, placed on {on})"

    def _reach(self, h: float | None, kernel: Any) -> float | None:
        """How far a weighed key can be, when queries are routed by space."""
        if self.partition != "space":
            return None
        return _space.reach_of(h, kernel)

    def _merged_states(
        self, q: np.ndarray, bandwidth: float | None, kernel: str | ProductKernel, cols: str, what: str
    ) -> tuple:
        h = _check_kernel(bandwidth, kernel)
        reach = self._reach(h, kernel)
        if reach is not None:
            n_cols = {"values": self._q or 0, "labels": 0 if self._classes is None else len(self._classes), "none": 0}[cols]
            return _space.states(self, q, h, kernel, cols, n_cols, reach, what)
        return self._map_reduce(_states, merge_states, lambda i: (), q, h, kernel, cols, what=what)

    def row_states(self, queries: Any, *, bandwidth: float | None = None, kernel: str | ProductKernel = "gaussian") -> RowStates:
        """The merged row states ``(m, s, u)`` over every shard (``u`` has
        the value columns, none without values).

        Parameters
        ----------
        queries : array-like of shape (n_queries, n_features)
            The query points (M × d).
        bandwidth : float or None, default=None
            The kernel's bandwidth ``h`` (finite, > 0); required with a profile
            name, None with a :class:`~locus.ProductKernel`.
        kernel : str or ProductKernel, default="gaussian"
            A profile name, or a :class:`~locus.ProductKernel`.

        Returns
        -------
        RowStates
            ``(m, s, u)`` over all keys.
        """
        q = self._queries(queries)
        m, s, u = self._merged_states(q, bandwidth, kernel, "values", "row_states")
        return RowStates(m, s, u)

    def local_mean(self, queries: Any, *, bandwidth: float | None = None, kernel: str | ProductKernel = "gaussian") -> np.ndarray:
        """Local means of the values over every shard's keys; NaN rows for
        empty neighbourhoods.

        Parameters
        ----------
        queries : array-like of shape (n_queries, n_features)
            The query points (M × d).
        bandwidth : float or None, default=None
            The kernel's bandwidth ``h`` (finite, > 0); required with a profile
            name, None with a :class:`~locus.ProductKernel`.
        kernel : str or ProductKernel, default="gaussian"
            A profile name, or a :class:`~locus.ProductKernel`.

        Returns
        -------
        numpy.ndarray of shape (n_queries, q) or (n_queries,)
            The local means.
        """
        if self._q is None:
            raise InputError("this key set was prepared without values")
        m, s, u = self._merged_states(self._queries(queries), bandwidth, kernel, "values", "local_mean")
        out = _ratio(s, u)
        return out[:, 0] if self._vector else out

    def log_density(self, queries: Any, *, bandwidth: float | None = None, kernel: str | ProductKernel = "gaussian") -> np.ndarray:
        """``ln p̂(q)`` of the KDE on all keys (float64).

        Parameters
        ----------
        queries : array-like of shape (n_queries, n_features)
            The query points (M × d).
        bandwidth : float or None, default=None
            The kernel's bandwidth ``h`` (finite, > 0); required with a profile
            name, None with a :class:`~locus.ProductKernel`.
        kernel : str or ProductKernel, default="gaussian"
            A profile name, or a :class:`~locus.ProductKernel`.

        Returns
        -------
        numpy.ndarray of shape (n_queries,)
            ``ln p̂`` at each query.
        """
        q = self._queries(queries)
        bandwidth = _check_kernel(bandwidth, kernel)
        reach = self._reach(bandwidth, kernel)
        if reach is not None:
            lm = _space.log_mass(self, q, bandwidth, kernel, reach, "log_density")
        else:
            lm = self._map_reduce(_log_mass, np.logaddexp, lambda i: (), q, bandwidth, kernel, what="log_density")
        return lm - math.log(self.n_keys)

    def density(self, queries: Any, *, bandwidth: float | None = None, kernel: str | ProductKernel = "gaussian") -> np.ndarray:
        """``p̂(q)`` of the KDE on all keys (float64).

        Parameters
        ----------
        queries : array-like of shape (n_queries, n_features)
            The query points (M × d).
        bandwidth : float or None, default=None
            The kernel's bandwidth ``h`` (finite, > 0); required with a profile
            name, None with a :class:`~locus.ProductKernel`.
        kernel : str or ProductKernel, default="gaussian"
            A profile name, or a :class:`~locus.ProductKernel`.

        Returns
        -------
        numpy.ndarray of shape (n_queries,)
            ``p̂`` at each query.
        """
        return np.exp(self.log_density(queries, bandwidth=bandwidth, kernel=kernel))

    def predict_proba(self, queries: Any, *, bandwidth: float | None = None, kernel: str | ProductKernel = "gaussian") -> np.ndarray:
        """Class probabilities (M × C, columns in the order of
        :attr:`classes`); NaN rows for empty neighbourhoods.

        Parameters
        ----------
        queries : array-like of shape (n_queries, n_features)
            The query points (M × d).
        bandwidth : float or None, default=None
            The kernel's bandwidth ``h`` (finite, > 0); required with a profile
            name, None with a :class:`~locus.ProductKernel`.
        kernel : str or ProductKernel, default="gaussian"
            A profile name, or a :class:`~locus.ProductKernel`.

        Returns
        -------
        numpy.ndarray of shape (n_queries, n_classes)
            The probabilities.
        """
        if self._classes is None:
            raise InputError("this key set was prepared without labels")
        m, s, u = self._merged_states(self._queries(queries), bandwidth, kernel, "labels", "predict_proba")
        return _ratio(s, u)

    def classify(self, queries: Any, *, bandwidth: float | None = None, kernel: str | ProductKernel = "gaussian") -> np.ndarray:
        """The most probable label per query (ties to the smaller label); a
        query with an empty neighbourhood gets its nearest key's label (the
        lowest global index among equally near keys).

        Parameters
        ----------
        queries : array-like of shape (n_queries, n_features)
            The query points (M × d).
        bandwidth : float or None, default=None
            The kernel's bandwidth ``h`` (finite, > 0); required with a profile
            name, None with a :class:`~locus.ProductKernel`.
        kernel : str or ProductKernel, default="gaussian"
            A profile name, or a :class:`~locus.ProductKernel`.

        Returns
        -------
        numpy.ndarray of shape (n_queries,)
            The labels.
        """
        if self._classes is None:
            raise InputError("this key set was prepared without labels")
        q = self._queries(queries)
        m, s, u = self._merged_states(q, bandwidth, kernel, "labels", "classify")
        proba = _ratio(s, u)
        empty = np.isnan(proba[:, 0]) if proba.shape[1] else np.ones(len(q), dtype=bool)
        index = np.zeros(len(q), dtype=np.int64)
        index[~empty] = np.argmax(proba[~empty], axis=1)
        if empty.any():
            lab = self._knn(q[empty], 1)[3]
            index[empty] = lab[:, 0]
        return self._classes[index]

    def _knn(self, q: np.ndarray, k: int) -> tuple:
        if self.partition == "space":
            return _space.knn(self, q, k, self._classes is not None)
        return self._map_reduce(
            _knn_task, partial(_merge_knn, k=k), lambda i: (self.offsets[i],), q, k, what="knn"
        )

    def knn(self, queries: Any, k: int) -> KNNResult:
        """The ``k`` nearest keys over every shard, nearest first, equal
        distances in global index order: a :class:`~locus.KNNResult`
        ``(distances, indices)``, distances (M × k, float32) and global
        indices (M × k, int64), as scikit-learn's ``kneighbors``.

        Parameters
        ----------
        queries : array-like of shape (n_queries, n_features)
            The query points (M × d).
        k : int
            Neighbours per query.

        Returns
        -------
        KNNResult
            ``(distances, indices)``.
        """
        q = self._queries(queries)
        k = as_count(k, "k")
        if k == 0 or k > self.n_keys:
            raise InputError(f"k must be in 1..={self.n_keys} (the number of keys), got {k}")
        dist, _, idx, _ = self._knn(q, k)
        return KNNResult(dist, idx)

    def __repr__(self) -> str:
        return (
            f"ShardedKeySet(rows={self.n_keys}, dim={self._dim}, shards={len(self.shards)}, "
            f"value_cols={self._q}, classes={None if self._classes is None else len(self._classes)}, "
            f"backend={self.backend!r}, partition={self.partition!r})"
        )
