"""locus on a Dask cluster: key sets split into shards that stay resident on
the workers, and MeanShift whose iterations merge the shards' row states.

Needs ``dask[distributed]``: ``pip install 'locus-engine[distributed]'``.

Every op of a :class:`locus.KeySet` is a reduction over keys, and its
partial results merge associatively: the row states ``(m, s, u)`` of a
local mean (``m = max(m₁, m₂)``, ``s = s₁e^{m₁−m} + s₂e^{m₂−m}``, ``u``
likewise), log-densities (``logaddexp``), top-k lists (the k smallest of
the union, equal distances to the lower global index). So a
:class:`ShardedKeySet` keeps one :class:`locus.KeySet` per shard, built on
the worker that holds the shard and reused by every call; a call sends the
queries to the workers, each shard answers for its keys, and the answers
are merged pairwise in a tree (depth ⌈log₂ shards⌉) on the workers; only
the merged answer comes back. The keys never move.

Example (a cluster of two local worker processes)::

    from distributed import Client, LocalCluster
    import numpy as np
    import locus.distributed as ld

    client = Client(LocalCluster(n_workers=2, threads_per_worker=1))
    keys = np.random.default_rng(0).normal(size=(100_000, 3))
    sks = ld.ShardedKeySet(client, keys, values=keys[:, 0], backend="cpu")
    sks.local_mean(keys[:5], bandwidth=0.5)
    ld.mean_shift(client, keys, bandwidth=1.0, seeds="binned").cluster_centers

Several GPUs on one node: one worker per adapter, each told its adapter by
``LOCUS_ADAPTER`` before its first engine opens (see
:func:`assign_adapters` and ``docs/scaling.md``).
"""

from __future__ import annotations

import math
import uuid
from functools import partial
from concurrent.futures import CancelledError
from typing import Any, Callable, Sequence

import numpy as np

try:
    import dask
    import distributed
    from dask.sizeof import sizeof
except ImportError as e:  # pragma: no cover - exercised without dask
    raise ImportError(
        "locus.distributed needs dask.distributed; install it with: "
        "pip install 'locus-engine[distributed]'"
    ) from e

from ._arrays import as_count, as_matrix
from ._engine import RowStates, engine_for
from ._errors import InputError, LocusError
from ._functions import MeanShiftResult

__all__ = ["ShardedKeySet", "ShardLostError", "mean_shift", "merge_states", "assign_adapters"]


class ShardLostError(LocusError, RuntimeError):
    """A shard's key set is gone (its worker died, or its future was
    released): the call is refused rather than answered without it."""


ShardLostError.__module__ = "locus.distributed"

_BACKENDS = ("auto", "gpu", "cpu")


# ---------------------------------------------------------------------------
# Merges (plain numpy, run on the workers and on the driver)


def merge_states(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
    """Merges two row states ``(m, s, u)`` of the same queries over disjoint
    keys into the states over both (associative and commutative; rows with
    ``m = −∞``, i.e. no weight, merge as zeros).

    >>> import numpy as np
    >>> m, s, u = merge_states((np.float32([0.0]), np.array([1.0]), np.array([[2.0]])),
    ...                        (np.float32([-np.inf]), np.array([0.0]), np.array([[0.0]])))
    >>> float(m[0]), float(s[0]), float(u[0, 0])
    (0.0, 1.0, 2.0)
    """
    m1, s1, u1 = a
    m2, s2, u2 = b
    m = np.maximum(m1, m2)
    mf = m.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        f1 = np.where(np.isneginf(m1), 0.0, np.exp(m1.astype(np.float64) - mf))
        f2 = np.where(np.isneginf(m2), 0.0, np.exp(m2.astype(np.float64) - mf))
    s = s1 * f1 + s2 * f2
    u = u1 * f1[:, None] + u2 * f2[:, None]
    return m, s, u


def _merge_knn(a: tuple, b: tuple, k: int) -> tuple:
    """The k nearest of two neighbour lists ``(dist, d2, index, labels)``:
    by distance, then the squared distance it was rounded from, then
    global index (the single-node order)."""
    dist = np.concatenate([a[0], b[0]], axis=1)
    d2 = np.concatenate([a[1], b[1]], axis=1)
    idx = np.concatenate([a[2], b[2]], axis=1)
    order = np.lexsort((idx, d2, dist), axis=-1)[:, :k]
    lab = None
    if a[3] is not None:
        lab = np.take_along_axis(np.concatenate([a[3], b[3]], axis=1), order, axis=1)
    take = partial(np.take_along_axis, indices=order, axis=1)
    return take(dist), take(d2), take(idx), lab


def _sq_dists(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Squared distances as the CPU engine ranks neighbours: per coordinate
    ``df = x − q`` in f32 and ``acc = fma(df, df, acc)`` (the product is
    exact in f64, so one f64 add then f32 rounding stands in for the fma)."""
    acc = np.zeros(x.shape[:-1], dtype=np.float32)
    for c in range(x.shape[-1]):
        df = (x[..., c] - q[..., c]).astype(np.float64)
        acc = (df * df + acc.astype(np.float64)).astype(np.float32)
    return acc


def _merge_bins(a: tuple, b: tuple) -> tuple:
    """Bin counts of two shards: (bins, counts) with bins unique rows."""
    bins = np.concatenate([a[0], b[0]])
    counts = np.concatenate([a[1], b[1]])
    if len(bins) == 0:
        return bins, counts
    u, inv = np.unique(bins, axis=0, return_inverse=True)
    return u, np.bincount(inv.reshape(-1), weights=counts, minlength=len(u)).astype(np.int64)


def _merge_extent(a: tuple, b: tuple) -> tuple:
    return np.minimum(a[0], b[0]), np.maximum(a[1], b[1])


def _concat(*parts: np.ndarray) -> np.ndarray:
    return np.concatenate(parts)


# ---------------------------------------------------------------------------
# What a worker holds: one shard


class _Shard:
    """One shard on a worker: its keys (float32), the columns its key set
    carries as values (the values, then the one-hot class indices), and the
    key set itself, built on this worker's engine.

    Pickled (if Dask ever moves or spills it) as its arrays, and rebuilt on
    arrival; ``sizeof`` reports the arrays, so the scheduler treats it as
    the large object it is and runs the shard's tasks where it lives.
    """

    def __init__(
        self,
        keys: np.ndarray,
        values: np.ndarray | None,
        label_index: np.ndarray | None,
        n_classes: int,
        backend: str,
    ) -> None:
        self.keys = as_matrix(keys, "keys")
        self.values = values
        self.label_index = label_index
        self.n_classes = n_classes
        self.backend = backend
        cols = []
        if values is not None:
            cols.append(values)
        if label_index is not None:
            onehot = np.zeros((len(label_index), n_classes), dtype=np.float32)
            onehot[np.arange(len(label_index)), label_index] = 1.0
            cols.append(onehot)
        carried = np.hstack(cols) if len(cols) > 1 else (cols[0] if cols else None)
        self.q = 0 if values is None else values.shape[1]
        self.keyset = engine_for(backend).prepare(self.keys, carried)

    @property
    def n(self) -> int:
        return self.keys.shape[0]

    def nbytes(self) -> int:
        n = self.keys.nbytes
        n += 0 if self.values is None else self.values.nbytes
        n += 0 if self.label_index is None else self.label_index.nbytes
        return n + int(self.keyset.resident_bytes)

    def __reduce__(self) -> tuple:
        return (
            _Shard,
            (self.keys, self.values, self.label_index, self.n_classes, self.backend),
        )


@sizeof.register(_Shard)
def _sizeof_shard(s: _Shard) -> int:
    return s.nbytes()


def _build_shard(
    keys: Any,
    values: Any,
    labels: Any,
    classes: np.ndarray | None,
    backend: str,
    center: np.ndarray | None,
    values_are_keys: bool,
) -> _Shard:
    x = np.asarray(keys)
    if x.ndim != 2:
        raise InputError(f"keys must be 2-D, got a {x.ndim}-D shard of shape {x.shape}")
    if center is not None:
        x = (x.astype(np.float64) - center).astype(np.float32)
    x = as_matrix(x, "keys")
    y = None
    if values_are_keys:
        y = x
    elif values is not None:
        y = np.asarray(values)
        y = np.ascontiguousarray(y.reshape(len(y), -1), dtype=np.float32)
        if y.shape[0] != x.shape[0]:
            raise InputError(f"a shard has {x.shape[0]} keys but {y.shape[0]} values")
    index = None
    n_classes = 0
    if labels is not None:
        lab = np.asarray(labels).reshape(-1)
        if lab.shape[0] != x.shape[0]:
            raise InputError(f"a shard has {x.shape[0]} keys but {lab.shape[0]} labels")
        index = np.searchsorted(classes, lab).astype(np.int64)
        n_classes = len(classes)
    return _Shard(x, y, index, n_classes, backend)


def _shard_rows(shard: _Shard) -> int:
    return shard.n


def _shard_dim(shard: _Shard) -> int:
    return shard.keys.shape[1]


def _shard_extent(x: Any) -> tuple:
    x = np.asarray(x, dtype=np.float32)
    if x.shape[0] == 0:
        d = x.shape[1]
        return np.full(d, np.inf), np.full(d, -np.inf)
    return x.min(axis=0).astype(np.float64), x.max(axis=0).astype(np.float64)


# Per-shard ops: what each worker computes for the broadcast queries.


def _states(shard: _Shard, queries: np.ndarray, bandwidth: float, kernel: str, cols: str) -> tuple:
    m, s, u = shard.keyset.row_states(queries, bandwidth=bandwidth, kernel=kernel)
    if cols == "values":
        u = u[:, : shard.q]
    elif cols == "labels":
        u = u[:, shard.q :]
    else:
        u = u[:, :0]
    return m, s, np.ascontiguousarray(u)


def _log_mass(shard: _Shard, queries: np.ndarray, bandwidth: float, kernel: str) -> np.ndarray:
    # ln p̂ of this shard's KDE, weighted by its share of keys: ln(n_i·p̂_i).
    lp = shard.keyset.log_density(queries, bandwidth=bandwidth, kernel=kernel)
    return lp + math.log(shard.n)


def _knn_task(shard: _Shard, offset: int, queries: np.ndarray, k: int) -> tuple:
    k = min(k, shard.n)
    idx, dist = shard.keyset.knn(queries, k)
    d2 = _sq_dists(shard.keys[idx], queries[:, None, :])
    lab = None if shard.label_index is None else shard.label_index[idx]
    return dist, d2, idx + offset, lab


def _bins(x: Any, h: float) -> tuple:
    """scikit-learn's bins ``round(x/h)`` (half to even, in f64) of a shard,
    with their counts."""
    x = np.asarray(x, dtype=np.float32)
    b = np.round(x.astype(np.float64) / h) + 0.0
    if len(b) == 0:
        return b, np.zeros(0, dtype=np.int64)
    u, counts = np.unique(b, axis=0, return_counts=True)
    return u, counts.astype(np.int64)


def _points(shard: _Shard) -> np.ndarray:
    return shard.keys


def _label_points(shard: _Shard, modes: np.ndarray, h: float, cluster_all: bool) -> np.ndarray:
    from ._functions import knn

    idx, dist = knn(shard.keys, modes, 1, backend=engine_for(shard.backend))
    labels = idx[:, 0].astype(np.int64)
    if not cluster_all:
        labels[dist[:, 0] > h] = -1
    return labels


# ---------------------------------------------------------------------------
# Driver side


def _is_dask(x: Any) -> bool:
    return dask.is_dask_collection(x)


def _workers(client: distributed.Client) -> list[str]:
    w = sorted(client.scheduler_info(n_workers=-1)["workers"])
    if not w:
        raise LocusError("the Dask cluster has no workers")
    return w


def _split_numpy(x: np.ndarray, shards: int) -> list[np.ndarray]:
    n = x.shape[0]
    if shards > n:
        raise InputError(f"{shards} shards for {n} keys: each shard needs at least one key")
    return np.array_split(x, shards)


def _dask_parts(client: distributed.Client, x: Any, rows: Sequence[int] | None, shards: int | None):
    """Futures of the row blocks of the Dask array ``x`` (full rows per
    block), computed where Dask puts them."""
    if x.ndim == 2:
        x = x.rechunk({1: -1})
    if rows is not None:
        x = x.rechunk({0: tuple(rows)})
    elif shards is not None:
        x = x.rechunk({0: max(1, -(-x.shape[0] // shards))})
    blocks = x.to_delayed().reshape(-1)
    return client.compute(list(blocks))


class _Sharded:
    """Futures of a cluster's shards, with the map/tree-reduce over them."""

    def __init__(self, client: distributed.Client) -> None:
        self.client = client
        self.shards: list[distributed.Future] = []
        self.rows: list[int] = []
        self.offsets: list[int] = []
        self.bytes_moved = 0  # states/lists sent between processes by the last call

    def _place(
        self,
        keys: Any,
        values: Any,
        labels: Any,
        classes: np.ndarray | None,
        backend: str,
        shards: int | None,
        center: np.ndarray | None = None,
        values_are_keys: bool = False,
        key_futures: list | None = None,
    ) -> None:
        client = self.client
        workers = _workers(client)
        if key_futures is not None:
            kf = key_futures
        elif _is_dask(keys):
            kf = _dask_parts(client, keys, None, shards)
        else:
            parts = _split_numpy(keys, shards or len(workers))
            kf = [
                client.scatter(p, workers=[workers[i % len(workers)]], hash=False)
                for i, p in enumerate(parts)
            ]
        distributed.wait(kf)
        sizes = client.gather([client.submit(lambda a: len(a), f, pure=False) for f in kf])
        if any(s == 0 for s in sizes):
            raise InputError("a shard has no keys; use fewer shards")
        who = client.who_has(kf)

        def split_like(a: Any) -> list:
            if a is None:
                return [None] * len(kf)
            if _is_dask(a):
                return _dask_parts(client, a, sizes, None)
            a = np.asarray(a)
            if a.shape[0] != sum(sizes):
                raise InputError(f"{a.shape[0]} rows for {sum(sizes)} keys")
            cuts = np.cumsum(sizes)[:-1]
            return [
                client.scatter(p, workers=list(who[f.key]), hash=False)
                for p, f in zip(np.split(a, cuts), kf)
            ]

        vf, lf = split_like(values), split_like(labels)
        self.shards = [
            client.submit(
                _build_shard,
                k,
                v,
                lab,
                classes,
                backend,
                center,
                values_are_keys,
                workers=list(who[k.key]),
                allow_other_workers=True,
                pure=False,
                key=f"locus-shard-{uuid.uuid4().hex}",
            )
            for k, v, lab in zip(kf, vf, lf)
        ]
        distributed.wait(self.shards)
        self.rows = client.gather([client.submit(_shard_rows, s, pure=False) for s in self.shards])
        self.offsets = [int(o) for o in np.concatenate([[0], np.cumsum(self.rows)[:-1]])]
        # The raw blocks are no longer needed: each shard keeps its own copy.
        del kf, vf, lf

    def _check(self) -> None:
        for i, f in enumerate(self.shards):
            if f.status in ("lost", "cancelled", "error"):
                raise ShardLostError(
                    f"shard {i} of {len(self.shards)} is {f.status}; "
                    "no result is given without it (rebuild the sharded key set)"
                )

    def _map_reduce(self, task: Callable, merge: Callable, per_shard: Callable, *args: Any) -> Any:
        """``merge`` of ``task(shard, *per_shard(i), *args)`` over every
        shard, in a tree of pairwise merges on the workers."""
        self._check()
        client = self.client
        who = client.who_has(self.shards)
        parts = [
            client.submit(
                task,
                s,
                *per_shard(i),
                *args,
                workers=list(who.get(s.key, ())) or None,
                allow_other_workers=True,
                pure=False,
            )
            for i, s in enumerate(self.shards)
        ]
        root = _tree(client, parts, merge)
        try:
            out = root.result()
        except CancelledError as e:
            raise ShardLostError(
                f"a shard was lost during the call ({e}); no result is given without it"
            ) from e
        finally:
            del parts, root
        return out

    def close(self) -> None:
        """Releases the shards (their key sets are dropped on the workers)."""
        if self.shards:
            self.client.cancel(self.shards)
        self.shards = []


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
    ) -> None:
        super().__init__(client)
        if backend not in _BACKENDS:
            raise InputError(f'backend must be "auto", "gpu" or "cpu", got {backend!r}')
        if shards is not None:
            shards = as_count(shards, "shards")
            if shards == 0:
                raise InputError("shards must be at least 1")
        if not _is_dask(keys):
            keys = as_matrix(keys, "keys")
        self._vector = False
        self._q = None
        if values is not None:
            ndim = values.ndim if _is_dask(values) else np.ndim(values)
            if ndim not in (1, 2):
                raise InputError(f"values must be 1-D or 2-D, got {ndim}-D")
            self._vector = ndim == 1
            self._q = 1 if ndim == 1 else int(values.shape[1])
        self._classes = None
        if labels is not None:
            if _is_dask(labels):
                import dask.array as da

                self._classes = client.compute(da.unique(labels)).result()
            else:
                lab = np.asarray(labels)
                if lab.ndim != 1:
                    raise InputError(f"labels must be 1-D (one label per key), got shape {lab.shape}")
                if lab.dtype.kind == "f" and not np.all(np.isfinite(lab)):
                    raise InputError("labels must be finite")
                self._classes = np.unique(lab)
        self._place(keys, values, labels, self._classes, backend, shards)
        self._dim = int(self.client.submit(_shard_dim, self.shards[0], pure=False).result())
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
        return len(self.shards)

    @property
    def shard_rows(self) -> list[int]:
        """Keys per shard, in row order."""
        return list(self.rows)

    def where(self) -> list[str]:
        """The worker holding each shard."""
        who = self.client.who_has(self.shards)
        return [",".join(who.get(s.key, ())) for s in self.shards]

    # -- ops -------------------------------------------------------------------

    def _queries(self, queries: Any) -> np.ndarray:
        q = as_matrix(queries, "queries")
        if q.shape[1] != self._dim:
            raise InputError(
                f"queries have {q.shape[1]} columns but the keys have {self._dim}"
            )
        return q

    def _merged_states(self, q: np.ndarray, bandwidth: float, kernel: str, cols: str) -> tuple:
        qf = self.client.scatter(q, broadcast=True, hash=False)
        return self._map_reduce(
            _states, merge_states, lambda i: (), qf, float(bandwidth), kernel, cols
        )

    def row_states(self, queries: Any, *, bandwidth: float, kernel: str = "gaussian") -> RowStates:
        """The merged row states ``(m, s, u)`` over every shard (``u`` has
        the value columns, none without values)."""
        q = self._queries(queries)
        m, s, u = self._merged_states(q, bandwidth, kernel, "values")
        return RowStates(m, s, u)

    def local_mean(self, queries: Any, *, bandwidth: float, kernel: str = "gaussian") -> np.ndarray:
        """Local means of the values over every shard's keys; NaN rows for
        empty neighbourhoods."""
        if self._q is None:
            raise InputError("this key set was prepared without values")
        m, s, u = self._merged_states(self._queries(queries), bandwidth, kernel, "values")
        out = _ratio(s, u)
        return out[:, 0] if self._vector else out

    def log_density(self, queries: Any, *, bandwidth: float, kernel: str = "gaussian") -> np.ndarray:
        """``ln p̂(q)`` of the KDE on all keys (float64)."""
        q = self._queries(queries)
        qf = self.client.scatter(q, broadcast=True, hash=False)
        lm = self._map_reduce(_log_mass, np.logaddexp, lambda i: (), qf, float(bandwidth), kernel)
        return lm - math.log(self.n_keys)

    def density(self, queries: Any, *, bandwidth: float, kernel: str = "gaussian") -> np.ndarray:
        """``p̂(q)`` of the KDE on all keys (float64)."""
        return np.exp(self.log_density(queries, bandwidth=bandwidth, kernel=kernel))

    def predict_proba(self, queries: Any, *, bandwidth: float, kernel: str = "gaussian") -> np.ndarray:
        """Class probabilities (M × C, columns in the order of
        :attr:`classes`); NaN rows for empty neighbourhoods."""
        if self._classes is None:
            raise InputError("this key set was prepared without labels")
        m, s, u = self._merged_states(self._queries(queries), bandwidth, kernel, "labels")
        return _ratio(s, u)

    def classify(self, queries: Any, *, bandwidth: float, kernel: str = "gaussian") -> np.ndarray:
        """The most probable label per query (ties to the smaller label); a
        query with an empty neighbourhood gets its nearest key's label (the
        lowest global index among equally near keys)."""
        if self._classes is None:
            raise InputError("this key set was prepared without labels")
        q = self._queries(queries)
        m, s, u = self._merged_states(q, bandwidth, kernel, "labels")
        proba = _ratio(s, u)
        empty = np.isnan(proba[:, 0]) if proba.shape[1] else np.ones(len(q), dtype=bool)
        index = np.zeros(len(q), dtype=np.int64)
        index[~empty] = np.argmax(proba[~empty], axis=1)
        if empty.any():
            lab = self._knn(q[empty], 1)[3]
            index[empty] = lab[:, 0]
        return self._classes[index]

    def _knn(self, q: np.ndarray, k: int) -> tuple:
        qf = self.client.scatter(q, broadcast=True, hash=False)
        return self._map_reduce(
            _knn_task, partial(_merge_knn, k=k), lambda i: (self.offsets[i],), qf, k
        )

    def knn(self, queries: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Global indices (M × k, int64) and distances (M × k, float32) of
        the ``k`` nearest keys over every shard, nearest first, equal
        distances in global index order."""
        k = as_count(k, "k")
        if k == 0 or k > self.n_keys:
            raise InputError(f"k must be in 1..={self.n_keys} (the number of keys), got {k}")
        dist, _, idx, _ = self._knn(self._queries(queries), k)
        return idx, dist

    def __repr__(self) -> str:
        return (
            f"ShardedKeySet(rows={self.n_keys}, dim={self._dim}, shards={len(self.shards)}, "
            f"value_cols={self._q}, classes={None if self._classes is None else len(self._classes)}, "
            f"backend={self.backend!r})"
        )


def _ratio(s: np.ndarray, u: np.ndarray) -> np.ndarray:
    """``u/s`` per row as float32; NaN rows where ``s = 0``."""
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (u / s[:, None]).astype(np.float32)
    out[s <= 0] = np.nan
    return out


# ---------------------------------------------------------------------------
# MeanShift


_SHIFT_FLOOR = np.float32(1.0 / (1 << 21))


def _step(pos: np.ndarray, mean: np.ndarray, thr_sq: np.float32) -> np.ndarray:
    """Moves the rows of ``pos`` to ``mean`` in place, as the engine does;
    returns which rows stop: an empty neighbourhood (NaN mean: the seed
    stays), or a squared shift (f32, summed coordinate by coordinate) of at
    most ``max(thr_sq, (2⁻²¹·max|mean|)²)``."""
    empty = np.isnan(mean[:, 0])
    sh2 = np.zeros(len(pos), dtype=np.float32)
    for c in range(pos.shape[1]):
        df = mean[:, c] - pos[:, c]
        sh2 = sh2 + df * df
    big = np.abs(mean).max(axis=1) * _SHIFT_FLOOR
    stop = empty | (sh2 <= np.maximum(thr_sq, big * big))
    pos[~empty] = mean[~empty]
    return stop


def _rank_and_suppress(cand: np.ndarray, counts: np.ndarray, h: float) -> tuple:
    """Modes from candidates: drop those with no point within ``h``, rank
    by population then coordinates (both descending), and let each one
    still standing remove every other within ``h`` (f64 distances)."""
    n = np.rint(counts).astype(np.int64)
    keep = n > 0
    cand, n = cand[keep], n[keep]
    if len(cand) == 0:
        raise InputError("mean_shift: no seed has a point within one bandwidth")
    keys = [-cand[:, c] for c in range(cand.shape[1] - 1, -1, -1)]
    order = np.lexsort((*keys, -n))
    cand, n = cand[order], n[order]
    c64 = cand.astype(np.float64)
    h2 = float(h) * float(h)
    alive = np.ones(len(cand), dtype=bool)
    for i in range(len(cand)):
        if not alive[i]:
            continue
        d2 = ((c64 - c64[i]) ** 2).sum(axis=1)
        near = d2 <= h2
        near[i] = False
        alive &= ~near
    return cand[alive], n[alive]


class _ShiftShards(_Sharded):
    """The points of a MeanShift, centred and resident per shard (values =
    the points themselves)."""


def mean_shift(
    client: distributed.Client,
    X: Any,
    *,
    bandwidth: float,
    kernel: str = "uniform",
    seeds: Any = "binned",
    min_bin_freq: int = 1,
    cluster_all: bool = True,
    max_iter: int = 300,
    tol: float = 1e-3,
    backend: str = "auto",
    shards: int | None = None,
    progress: Callable[[int, int, int], None] | None = None,
) -> MeanShiftResult:
    """MeanShift of ``X`` (N × d, NumPy or Dask array) sharded over the
    cluster, with the results of :func:`locus.mean_shift` on the same data
    (same partition, modes equal up to float rounding).

    The points are centred on the middle of their bounding box and kept
    resident, one key set per shard. ``seeds``: ``"binned"`` (scikit-learn's
    bins of side ``bandwidth`` holding at least ``min_bin_freq`` points,
    counted per shard and summed), ``"all"`` (every point: they are brought
    to the driver) or an array of seeds. Each iteration sends the moving
    seeds to every shard, merges the shards' row states in a tree, moves
    the seeds on the driver and drops the converged ones. Modes are then
    ranked by the points within one bandwidth (counted per shard), merged
    when within one bandwidth, and every point is labelled by its nearest
    mode on its own worker. ``bandwidth`` must be given (a number).
    ``progress(iteration, queried, moving)`` is called after each
    iteration with the seeds sent out and those still moving.
    """
    if backend not in _BACKENDS:
        raise InputError(f'backend must be "auto", "gpu" or "cpu", got {backend!r}')
    if isinstance(bandwidth, (str, type(None))) or not bandwidth > 0:
        raise InputError(f"bandwidth must be a positive number, got {bandwidth!r}")
    h = float(np.float32(bandwidth))
    max_iter = as_count(max_iter, "max_iter")
    min_bin_freq = as_count(min_bin_freq, "min_bin_freq")
    workers = _workers(client)
    if _is_dask(X):
        xf = _dask_parts(client, X, None, shards)
    else:
        x = as_matrix(X, "X")
        xf = [
            client.scatter(p, workers=[workers[i % len(workers)]], hash=False)
            for i, p in enumerate(_split_numpy(x, shards or len(workers)))
        ]
    # The centre: the middle of the bounding box, rounded to f32 (as the engine).
    parts = [client.submit(_shard_extent, f, pure=False) for f in xf]
    lo, hi = _tree(client, parts, _merge_extent).result()
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        raise InputError("X must be non-empty and finite")
    center = ((lo + hi) * 0.5).astype(np.float32).astype(np.float64)
    d = len(center)

    # Seeds, centred.
    if isinstance(seeds, str) and seeds == "binned":
        parts = [client.submit(_bins, f, h, pure=False) for f in xf]
        bins, counts = _tree(client, parts, _merge_bins).result()
        n_total = sum(client.gather([client.submit(len, f, pure=False) for f in xf]))
        kept = bins[counts >= min_bin_freq]
        if len(kept) == n_total:
            seeds_xy = None  # every point its own bin: the points are the seeds
        else:
            seeds_xy = (kept * h).astype(np.float32)
    elif isinstance(seeds, str) and seeds == "all":
        seeds_xy = None
    elif isinstance(seeds, str):
        raise InputError(f'seeds must be "binned", "all" or an array, got {seeds!r}')
    else:
        seeds_xy = as_matrix(seeds, "seeds")
        if seeds_xy.shape[1] != d:
            raise InputError(f"seeds have {seeds_xy.shape[1]} columns but X has {d}")

    sh = _ShiftShards(client)
    sh._place(None, None, None, None, backend, None, center=center, values_are_keys=True, key_futures=xf)
    del xf
    try:
        if seeds_xy is None:
            parts = [client.submit(_points, s, pure=False) for s in sh.shards]
            pos = _tree(client, parts, _concat).result().copy()
        else:
            pos = (seeds_xy.astype(np.float64) - center).astype(np.float32)
        if len(pos) == 0:
            raise InputError(
                f"mean_shift: no seeds (no bin holds min_bin_freq={min_bin_freq} points)"
            )
        tol_h = float(tol) * h
        thr_sq = np.float32(tol_h * tol_h)
        active = np.arange(len(pos))
        iterations, converged = 0, False
        for it in range(1, max_iter + 1):
            qf = client.scatter(pos[active], broadcast=True, hash=False)
            m, s, u = sh._map_reduce(_states, merge_states, lambda i: (), qf, h, kernel, "values")
            mean = _ratio(s, u)
            sub = pos[active]
            stop = _step(sub, mean, thr_sq)
            pos[active] = sub
            active = active[~stop]
            iterations = it
            if progress is not None:
                progress(it, len(sub), len(active))
            if len(active) == 0:
                converged = True
                break

        # Post-processing: distinct final positions, their populations.
        bits = np.unique(pos.view(np.uint32), axis=0)
        cand = np.ascontiguousarray(bits).view(np.float32)
        qf = client.scatter(cand, broadcast=True, hash=False)
        _, counts, _ = sh._map_reduce(_states, merge_states, lambda i: (), qf, h, "uniform", "none")
        modes_c, populations = _rank_and_suppress(cand, counts, h)
        mf = client.scatter(modes_c, broadcast=True, hash=False)
        label_parts = [
            client.submit(_label_points, s, mf, h, bool(cluster_all), pure=False) for s in sh.shards
        ]
        labels = np.concatenate(client.gather(label_parts))
    finally:
        sh.close()
    modes = (modes_c.astype(np.float64) + center).astype(np.float32)
    return MeanShiftResult(
        modes, labels, populations.astype(np.uint64), iterations, converged, h
    )


def _tree(client: distributed.Client, parts: list, merge: Callable) -> distributed.Future:
    """The pairwise tree of ``merge`` over futures ``parts``: its root."""
    level = list(parts)
    while len(level) > 1:
        nxt = [client.submit(merge, level[i], level[i + 1], pure=False) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def assign_adapters(client: distributed.Client, adapters: Sequence[int | str] | None = None) -> dict:
    """Gives each worker of ``client`` its own GPU adapter: sets
    ``LOCUS_ADAPTER`` in worker i to ``adapters[i]`` (default ``i``), in
    the workers' sorted address order. Call it before anything opens an
    engine on the workers (an engine reads the variable when it opens).
    Returns ``{worker address: adapter}``.
    """
    workers = _workers(client)
    adapters = list(range(len(workers))) if adapters is None else list(adapters)
    if len(adapters) < len(workers):
        raise InputError(f"{len(workers)} workers but {len(adapters)} adapters")
    plan = {w: str(a) for w, a in zip(workers, adapters)}
    for w, a in plan.items():
        client.run(_set_adapter, a, workers=[w])
    return plan


def _set_adapter(adapter: str) -> None:
    import os

    os.environ["LOCUS_ADAPTER"] = adapter
