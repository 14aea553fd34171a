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
import numbers
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

from ._arrays import as_count, as_labels, as_matrix, as_values
from ._engine import check_backend, engine_for
from ._errors import InputError, LocusError
from ._kernels import ProductKernel, kernel_arg
from ._results import MeanShiftResult, RowStates

__all__ = ["ShardedKeySet", "ShardLostError", "mean_shift", "merge_states", "assign_adapters"]


class ShardLostError(LocusError, RuntimeError):
    """A shard's key set is gone (its worker died, or its future was
    released): the call is refused rather than answered without it."""




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


def _fmt(v: float) -> str:
    return "NaN" if np.isnan(v) else str(float(v))


def _check_finite(a: np.ndarray, name: str, offset: int = 0) -> None:
    """Raises an :class:`InputError` naming the first non-finite entry of
    the 2-D ``a`` by its row in the whole input (``offset`` + local row)."""
    bad = _first_nonfinite(a)
    if bad is not None:
        r, c, v = bad
        raise InputError(f"{name} has a non-finite value ({v}) at row {offset + r}, column {c}")


def _first_nonfinite(a: Any) -> tuple | None:
    a = np.asarray(a)
    if a.ndim == 1:
        a = a.reshape(-1, 1)
    with np.errstate(over="ignore"):
        a = a.astype(np.float32, copy=False)
    ok = np.isfinite(a)
    if ok.all():
        return None
    r, c = np.argwhere(~ok)[0]
    return int(r), int(c), _fmt(a[r, c])


def _check_nonempty(shape: tuple, name: str) -> None:
    if shape[0] == 0 or shape[1] == 0:
        raise InputError(
            f"{name} is empty ({shape[0]}×{shape[1]}); it needs at least one row and one column"
        )


def _slice_rows(parts: list, bounds: list) -> np.ndarray:
    return np.concatenate([np.asarray(p)[lo:hi] for p, (lo, hi) in zip(parts, bounds)])


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
        # MeanShift shards carry the points as their values: the same array.
        n += 0 if self.values is None or self.values is self.keys else self.values.nbytes
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
    offset: int = 0,
    keys_name: str = "keys",
) -> _Shard:
    x = np.asarray(keys)
    if x.ndim != 2:
        raise InputError(f"{keys_name} must be 2-D, got a {x.ndim}-D shard of shape {x.shape}")
    x = as_matrix(x, keys_name)
    _check_finite(x, keys_name, offset)  # before centring: the row of the input
    if center is not None:
        x = (x.astype(np.float64) - center).astype(np.float32)
    y = None
    if values_are_keys:
        y = x
    elif values is not None:
        y = np.asarray(values)
        y = as_matrix(y.reshape(len(y), -1), "values")
        if y.shape[0] != x.shape[0]:
            raise InputError(f"a shard has {x.shape[0]} keys but {y.shape[0]} values")
        _check_finite(y, "values", offset)
    index = None
    n_classes = 0
    if labels is not None:
        lab = np.asarray(labels).reshape(-1)
        if lab.shape[0] != x.shape[0]:
            raise InputError(f"a shard has {x.shape[0]} keys but {lab.shape[0]} labels")
        index = np.searchsorted(classes, lab).astype(np.int64)
        n_classes = len(classes)
    return _Shard(x, y, index, n_classes, backend)


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
    status = getattr(client, "status", "running")
    if status != "running":
        raise InputError(f"client: the Dask client is {status}; pass a running distributed.Client")
    # Asked of the scheduler directly: `scheduler_info()` returns a cache
    # that the client's periodic refresh may overwrite with a worker-less
    # summary between the fetch and the return.
    w = sorted(client.nthreads())
    if not w:
        raise LocusError("the Dask cluster has no workers")
    return w


def _check_shards(shards: Any) -> int | None:
    if shards is None:
        return None
    shards = as_count(shards, "shards")
    if shards == 0:
        raise InputError("shards must be at least 1, got 0")
    return shards


def _even(n: int, shards: int, name: str) -> list[int]:
    """Rows of ``shards`` near-equal blocks of ``n`` rows (as ``np.array_split``)."""
    if shards > n:
        raise InputError(
            f"shards={shards} but {name} has {n} rows: each shard needs at least one row"
        )
    return [n // shards + (i < n % shards) for i in range(shards)]


def _split_numpy(x: np.ndarray, shards: int, name: str = "keys") -> list[np.ndarray]:
    cuts = np.cumsum(_even(x.shape[0], shards, name))[:-1]
    return np.split(x, cuts)


def _scatter_blocks(
    client: distributed.Client, workers: list[str], x: np.ndarray, shards: int | None, name: str
) -> tuple[list, list[int]]:
    """``x`` cut into ``shards`` near-equal blocks (one per worker by
    default), each scattered to a worker in turn; the futures and sizes."""
    parts = _split_numpy(x, shards if shards is not None else min(len(workers), len(x)), name)
    futures = [
        client.scatter(p, workers=[workers[i % len(workers)]], hash=False)
        for i, p in enumerate(parts)
    ]
    return futures, [len(p) for p in parts]


def _check_dask(x: Any, name: str, ndims: tuple[int, ...]) -> None:
    """What the driver can check of a Dask array without computing it."""
    if x.ndim not in ndims:
        want = " or ".join(f"{n}-D" for n in ndims)
        raise InputError(f"{name} must be {want}, got a {x.ndim}-D array of shape {x.shape}")
    if name != "labels" and x.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers (float32 preferred), got dtype {x.dtype}")
    if x.ndim == 2 and any(math.isnan(c) for c in x.chunks[1]):
        raise InputError(
            f"{name} has unknown column chunk sizes; call {name}.compute_chunk_sizes() first"
        )
    if x.ndim == 2 and x.shape[1] == 0:
        _check_nonempty(x.shape, name)


def _known_rows(x: Any) -> int | None:
    """Rows of a Dask array, None if its chunk sizes are unknown."""
    n = x.shape[0]
    return None if isinstance(n, float) and math.isnan(n) else int(n)


def _reblock(client: distributed.Client, futs: list, sizes: list[int], target: list[int]) -> list:
    """Futures of row blocks of ``target`` rows cut from blocks ``futs`` of
    ``sizes`` rows (on the workers)."""
    starts = [0, *np.cumsum(sizes).tolist()]
    out, a = [], 0
    for t in target:
        b = a + t
        pieces = [
            (i, max(a, starts[i]) - starts[i], min(b, starts[i + 1]) - starts[i])
            for i in range(len(futs))
            if starts[i] < b and starts[i + 1] > a
        ]
        if len(pieces) == 1 and pieces[0][1] == 0 and pieces[0][2] == sizes[pieces[0][0]]:
            out.append(futs[pieces[0][0]])
        else:
            out.append(
                client.submit(
                    _slice_rows,
                    [futs[i] for i, _, _ in pieces],
                    [(lo, hi) for _, lo, hi in pieces],
                    pure=False,
                )
            )
        a = b
    return out


def _dask_parts(
    client: distributed.Client,
    x: Any,
    name: str,
    rows: Sequence[int] | None = None,
    shards: int | None = None,
) -> tuple[list, list[int]]:
    """Futures of the row blocks of the Dask array ``x`` (full rows per
    block), computed where Dask puts them, and their rows: blocks of
    ``rows`` rows if given, else ``shards`` near-equal blocks, else the
    non-empty row chunks of ``x``. Chunk sizes may be unknown (NaN): the
    blocks are then computed as they are and cut on the workers."""
    if x.ndim == 2:
        x = x.rechunk({1: -1})
    n = _known_rows(x)  # None when any row chunk is unknown
    if n is not None:
        if rows is not None:
            if n != sum(rows):
                raise InputError(f"{name} has {n} rows but there are {sum(rows)} keys")
            x = x.rechunk({0: tuple(rows)})
        elif shards is not None:
            x = x.rechunk({0: tuple(_even(n, shards, name))})
        sizes = [int(c) for c in x.chunks[0]]
        futs = client.compute(list(x.to_delayed().reshape(-1)))
    else:
        futs = client.compute(list(x.to_delayed().reshape(-1)))
        sizes = client.gather([client.submit(len, f, pure=False) for f in futs])
        n = sum(sizes)
        if rows is not None:
            if n != sum(rows):
                raise InputError(f"{name} has {n} rows but there are {sum(rows)} keys")
            target = list(rows)
        elif shards is not None:
            target = _even(n, shards, name)
        else:
            target = [s for s in sizes if s]
        futs, sizes = _reblock(client, futs, sizes, target), target
    if rows is None and shards is None:
        futs = [f for f, k in zip(futs, sizes) if k]
        sizes = [k for k in sizes if k]
    return futs, sizes


class _Sharded:
    """Futures of a cluster's shards, with the map/tree-reduce over them."""

    def __init__(self, client: distributed.Client) -> None:
        self.client = client
        self.shards: list[distributed.Future] = []
        self.rows: list[int] = []
        self.offsets: list[int] = []
        self.homes: list[list[str]] = []  # the workers holding each shard
        self._closed = False

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
        workers: list[str] | None = None,
    ) -> None:
        """Cuts the keys into shards (NumPy keys: scattered over
        ``workers``; Dask keys: their chunks; or ``key_futures`` already
        placed), sends values and labels to the same workers and builds one
        key set per shard there."""
        client = self.client
        keys_name = "X" if values_are_keys else "keys"
        if key_futures is not None:
            kf, sizes = key_futures
        elif _is_dask(keys):
            kf, sizes = _dask_parts(client, keys, "keys", None, shards)
        else:
            kf, sizes = _scatter_blocks(client, workers or _workers(client), keys, shards, "keys")
        if not kf:
            raise InputError(f"{keys_name} is empty (0 rows); it needs at least one row")
        distributed.wait(kf)
        who = client.who_has(kf)
        offsets = [int(o) for o in np.concatenate([[0], np.cumsum(sizes)[:-1]])]

        def split_like(a: Any, name: str) -> list:
            if a is None:
                return [None] * len(kf)
            if _is_dask(a):
                return _dask_parts(client, a, name, sizes, None)[0]
            a = np.asarray(a)
            if a.shape[0] != sum(sizes):
                raise InputError(f"{name} has {a.shape[0]} rows but there are {sum(sizes)} keys")
            cuts = np.cumsum(sizes)[:-1]
            return [
                client.scatter(p, workers=list(who[f.key]), hash=False)
                for p, f in zip(np.split(a, cuts), kf)
            ]

        vf, lf = split_like(values, "values"), split_like(labels, "labels")
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
                off,
                keys_name,
                workers=list(who[k.key]),
                allow_other_workers=True,
                pure=False,
                key=f"locus-shard-{uuid.uuid4().hex}",
            )
            for k, v, lab, off in zip(kf, vf, lf, offsets)
        ]
        distributed.wait(self.shards)
        for f in self.shards:
            if f.status == "error":
                f.result()  # raises the shard's error (an InputError naming the row)
        # Each shard holds exactly its block: the driver already knows the sizes.
        self.rows = [int(k) for k in sizes]
        self.offsets = offsets
        # Asked once: every call sends its tasks there (or elsewhere, when a
        # shard has moved; a lost one is refused by `_check`).
        who = client.who_has(self.shards)
        self.homes = [list(who.get(s.key, ())) for s in self.shards]

    def _check(self) -> None:
        if self._closed:
            raise ShardLostError(f"this {type(self).__name__} was closed; its shards are released")
        status = getattr(self.client, "status", "running")
        if status != "running":
            raise ShardLostError(
                f"the Dask client is {status}; its shards are gone (rebuild the sharded key set)"
            )
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
        parts = [
            client.submit(
                task,
                s,
                *per_shard(i),
                *args,
                workers=self.homes[i] or None,
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
        """Releases the shards (their key sets are dropped on the workers);
        later calls raise :class:`ShardLostError`."""
        # Released, not cancelled: cancelling a shard that tasks of an
        # earlier call still depend on trips the scheduler (an assertion in
        # its cancel handler), which breaks the client's connection.
        for f in self.shards:
            f.release()
        self.shards = []
        self._closed = True


_PROBE: list = []


def _check_kernel(bandwidth: Any, kernel: Any) -> float | None:
    """``bandwidth`` as a float, after the driver checked it and ``kernel``
    by the engine's own rules (one tiny CPU call), so a bad parameter is
    refused before any task is sent, with the single-node error; ``None``
    for a :class:`~locus.ProductKernel` (checked when it was made), which
    takes no bandwidth."""
    if isinstance(kernel, ProductKernel):
        kernel_arg(kernel, bandwidth)
        return None
    if isinstance(bandwidth, str) or not isinstance(bandwidth, numbers.Real):
        raise TypeError(f"bandwidth must be a number, got {type(bandwidth).__name__}")
    if not isinstance(kernel, str):
        raise TypeError(f"kernel must be the name of a kernel profile, got {type(kernel).__name__}")
    h = float(bandwidth)
    if not _PROBE:
        _PROBE.append(engine_for("cpu").prepare(np.zeros((1, 1), dtype=np.float32)))
    _PROBE[0].log_density(np.zeros((1, 1), dtype=np.float32), bandwidth=h, kernel=kernel)
    return h


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
        # Everything the driver can check is checked before any task is sent.
        check_backend(backend)
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
                self._classes = client.compute(da.unique(labels)).result()
                if self._classes.dtype.kind == "f" and not np.all(np.isfinite(self._classes)):
                    raise InputError("labels must be finite")
            else:
                lab = np.asarray(labels)
                # Keys of unknown length (Dask, unknown chunks): the count
                # is checked on the workers.
                rows = n if n is not None else (lab.shape[0] if lab.ndim else 0)
                self._classes = as_labels(lab, rows)[0]
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
        self._check()
        q = as_matrix(queries, "queries")
        _check_nonempty(q.shape, "queries")
        if q.shape[1] != self._dim:
            raise InputError(
                f"queries have dimension {q.shape[1]} but the keys have dimension {self._dim}"
            )
        _check_finite(q, "queries")
        return q

    def _merged_states(self, q: np.ndarray, bandwidth: float, kernel: str, cols: str) -> tuple:
        bandwidth = _check_kernel(bandwidth, kernel)
        qf = self.client.scatter(q, broadcast=True, hash=False)
        return self._map_reduce(_states, merge_states, lambda i: (), qf, bandwidth, kernel, cols)

    def row_states(self, queries: Any, *, bandwidth: float | None = None, kernel: str | ProductKernel = "gaussian") -> RowStates:
        """The merged row states ``(m, s, u)`` over every shard (``u`` has
        the value columns, none without values)."""
        q = self._queries(queries)
        m, s, u = self._merged_states(q, bandwidth, kernel, "values")
        return RowStates(m, s, u)

    def local_mean(self, queries: Any, *, bandwidth: float | None = None, kernel: str | ProductKernel = "gaussian") -> np.ndarray:
        """Local means of the values over every shard's keys; NaN rows for
        empty neighbourhoods."""
        if self._q is None:
            raise InputError("this key set was prepared without values")
        m, s, u = self._merged_states(self._queries(queries), bandwidth, kernel, "values")
        out = _ratio(s, u)
        return out[:, 0] if self._vector else out

    def log_density(self, queries: Any, *, bandwidth: float | None = None, kernel: str | ProductKernel = "gaussian") -> np.ndarray:
        """``ln p̂(q)`` of the KDE on all keys (float64)."""
        q = self._queries(queries)
        bandwidth = _check_kernel(bandwidth, kernel)
        qf = self.client.scatter(q, broadcast=True, hash=False)
        lm = self._map_reduce(_log_mass, np.logaddexp, lambda i: (), qf, bandwidth, kernel)
        return lm - math.log(self.n_keys)

    def density(self, queries: Any, *, bandwidth: float | None = None, kernel: str | ProductKernel = "gaussian") -> np.ndarray:
        """``p̂(q)`` of the KDE on all keys (float64)."""
        return np.exp(self.log_density(queries, bandwidth=bandwidth, kernel=kernel))

    def predict_proba(self, queries: Any, *, bandwidth: float | None = None, kernel: str | ProductKernel = "gaussian") -> np.ndarray:
        """Class probabilities (M × C, columns in the order of
        :attr:`classes`); NaN rows for empty neighbourhoods."""
        if self._classes is None:
            raise InputError("this key set was prepared without labels")
        m, s, u = self._merged_states(self._queries(queries), bandwidth, kernel, "labels")
        return _ratio(s, u)

    def classify(self, queries: Any, *, bandwidth: float | None = None, kernel: str | ProductKernel = "gaussian") -> np.ndarray:
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
        q = self._queries(queries)
        k = as_count(k, "k")
        if k == 0 or k > self.n_keys:
            raise InputError(f"k must be in 1..={self.n_keys} (the number of keys), got {k}")
        dist, _, idx, _ = self._knn(q, k)
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


def mean_shift(
    client: distributed.Client,
    X: Any,
    *,
    bandwidth: float | None = None,
    kernel: str | ProductKernel = "uniform",
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
    mode on its own worker. ``bandwidth`` must be given (a number), unless
    ``kernel`` is a :class:`~locus.ProductKernel` (joint MeanShift, as
    :func:`locus.mean_shift`: no bandwidth, each block in units of its own).
    ``progress(iteration, queried, moving)`` is called after each
    iteration with the seeds sent out and those still moving.
    """
    # Every parameter, and X and seeds where on the driver, are checked
    # before any task is sent.
    check_backend(backend)
    scale = None
    if isinstance(kernel, ProductKernel):
        # Joint MeanShift, as locus.mean_shift: every block in units of its
        # bandwidth, unit bandwidths, the modes scaled back at the end.
        kernel_arg(kernel, bandwidth)
        scale = np.array([h for d, _, h in kernel.blocks for _ in range(d)], dtype=np.float32)
        kernel = ProductKernel([(d, p, 1.0) for d, p, _ in kernel.blocks])
        bandwidth = 1.0
        if not _is_dask(X):
            X = as_matrix(X, "X")
        if len(X.shape) != 2 or int(X.shape[1]) != len(scale):
            raise InputError(
                f"mean_shift: the product kernel's blocks cover {len(scale)} coordinates "
                f"but the data has {int(X.shape[1])} columns"
            )
        X = X / scale
        if not isinstance(seeds, str):
            seeds = as_matrix(seeds, "seeds")
            if seeds.shape[1] == len(scale):
                seeds = seeds / scale
    if isinstance(bandwidth, str) or bandwidth is None:
        raise InputError(
            "bandwidth must be a number (the bandwidth rules of locus.mean_shift are not "
            f"available here), got {bandwidth!r}"
        )
    _check_kernel(None if scale is not None else bandwidth, kernel)
    h = float(np.float32(bandwidth))
    # What the shards' key sets take: a product kernel has no bandwidth.
    h_kernel = None if scale is not None else h
    max_iter = as_count(max_iter, "max_iter")
    if max_iter == 0:
        raise InputError("max_iter must be at least 1, got 0")
    min_bin_freq = as_count(min_bin_freq, "min_bin_freq")
    if isinstance(tol, str) or not isinstance(tol, numbers.Real):
        raise TypeError(f"tol must be a number, got {type(tol).__name__}")
    tol = float(tol)
    if not (math.isfinite(tol) and tol > 0):
        raise InputError(f"tol must be finite and > 0, got {tol}")
    shards = _check_shards(shards)
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be callable, got {type(progress).__name__}")
    if isinstance(seeds, str) and seeds not in ("binned", "all"):
        raise InputError(f'seeds must be "binned", "all" or an array, got {seeds!r}')
    workers = _workers(client)
    if _is_dask(X):
        _check_dask(X, "X", (2,))
        d = int(X.shape[1])
    else:
        x = as_matrix(X, "X")
        _check_nonempty(x.shape, "X")
        _check_finite(x, "X")
        d = x.shape[1]
    seeds_given = None
    if not isinstance(seeds, str):
        seeds_given = as_matrix(seeds, "seeds")
        _check_nonempty(seeds_given.shape, "seeds")
        if seeds_given.shape[1] != d:
            raise InputError(
                f"seeds have dimension {seeds_given.shape[1]} but the points have dimension {d}"
            )
        _check_finite(seeds_given, "seeds")

    if _is_dask(X):
        xf, sizes = _dask_parts(client, X, "X", None, shards)
    else:
        xf, sizes = _scatter_blocks(client, workers, x, shards, "X")
    n_total = sum(sizes)
    if n_total == 0:
        _check_nonempty((0, d), "X")
    # The centre: the middle of the bounding box, rounded to f32 (as the engine).
    parts = [client.submit(_shard_extent, f, pure=False) for f in xf]
    lo, hi = _tree(client, parts, _merge_extent).result()
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        # A Dask X: find the first non-finite entry, by its row in X.
        bad = client.gather([client.submit(_first_nonfinite, f, pure=False) for f in xf])
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        for off, b in zip(offsets, bad):
            if b is not None:
                raise InputError(f"X has a non-finite value ({b[2]}) at row {off + b[0]}, column {b[1]}")
        raise InputError("X must be finite")
    center = ((lo + hi) * 0.5).astype(np.float32).astype(np.float64)

    # Seeds, centred.
    if seeds_given is not None:
        seeds_xy = seeds_given
    elif seeds == "binned":
        parts = [client.submit(_bins, f, h, pure=False) for f in xf]
        bins, counts = _tree(client, parts, _merge_bins).result()
        kept = bins[counts >= min_bin_freq]
        if len(kept) == n_total:
            seeds_xy = None  # every point its own bin: the points are the seeds
        else:
            seeds_xy = (kept * h).astype(np.float32)
    else:
        seeds_xy = None

    sh = _Sharded(client)  # the points, centred; values = the points
    sh._place(
        None, None, None, None, backend, None,
        center=center, values_are_keys=True, key_futures=(xf, sizes),
    )
    del xf
    try:
        if seeds_xy is None:
            # Every point a seed: the shards' centred points, gathered once
            # (a new array, in row order).
            parts = [client.submit(_points, s, pure=False) for s in sh.shards]
            pos = np.concatenate(client.gather(parts))
        else:
            pos = (seeds_xy.astype(np.float64) - center).astype(np.float32)
        if len(pos) == 0:
            raise InputError(
                f"mean_shift: no seeds (no bin holds min_bin_freq={min_bin_freq} points)"
            )
        tol_h = tol * h
        thr_sq = np.float32(tol_h * tol_h)
        active = np.arange(len(pos))
        iterations, converged = 0, False
        for it in range(1, max_iter + 1):
            qf = client.scatter(pos[active], broadcast=True, hash=False)
            m, s, u = sh._map_reduce(_states, merge_states, lambda i: (), qf, h_kernel, kernel, "values")
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
    if scale is not None:
        modes = (modes.astype(np.float64) * scale).astype(np.float32)
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
