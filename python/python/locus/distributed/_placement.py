"""Where the data go: what the driver checks of the inputs before any task
is sent, the shards (one key set each, built on the worker that holds its
block), and the map over the shards with its tree of merges; the workers'
GPU adapters."""

from __future__ import annotations

import asyncio
import math
import uuid
from typing import Any, Callable, Sequence

import dask
import distributed
import numpy as np
from dask.sizeof import sizeof

from .._arrays import as_count, as_matrix
from .._engine import engine_for
from .._errors import InputError, LocusError
from . import _watch
from ._merge import _tree
from ._watch import DEFAULT_TIMEOUT, Needs, ShardLostError, check_timeout

__all__ = ["ShardLostError", "DEFAULT_TIMEOUT", "check_timeout"]


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


def _checked_block(
    keys: Any,
    values: Any,
    labels: Any,
    classes: np.ndarray | None,
    offset: int = 0,
    keys_name: str = "keys",
    center: np.ndarray | None = None,
    values_are_keys: bool = False,
) -> tuple:
    """A block's keys (centred on ``center`` when given), values and class
    indices, checked on its worker (errors name the row in the whole
    input: ``offset`` + local row)."""
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
    if labels is not None:
        if classes is None:
            raise InputError("labels came without their classes")
        lab = np.asarray(labels).reshape(-1)
        if lab.shape[0] != x.shape[0]:
            raise InputError(f"a shard has {x.shape[0]} keys but {lab.shape[0]} labels")
        index = np.searchsorted(classes, lab).astype(np.int64)
    return x, y, index


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
    x, y, index = _checked_block(keys, values, labels, classes, offset, keys_name, center, values_are_keys)
    n_classes = 0 if index is None or classes is None else len(classes)
    return _Shard(x, y, index, n_classes, backend)


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
    client: distributed.Client,
    workers: list[str],
    x: np.ndarray,
    shards: int | None,
    name: str,
    timeout: float = DEFAULT_TIMEOUT,
) -> tuple[list, list[int]]:
    """``x`` cut into ``shards`` near-equal blocks (one per worker by
    default), each scattered to a worker in turn (all at once, bounded by
    ``timeout`` seconds); the futures and sizes."""
    parts = _split_numpy(x, shards if shards is not None else min(len(workers), len(x)), name)
    items = [(p, workers[i % len(workers)]) for i, p in enumerate(parts)]
    futures = _watch.scatter(client, items, f"placing the {name}", timeout)
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
    timeout: float = DEFAULT_TIMEOUT,
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
        sizes = _watch.gather(
            client,
            [client.submit(len, f, pure=False) for f in futs],
            Needs([(f, f"{name} block {i}") for i, f in enumerate(futs)]),
            f"placing the {name}",
            timeout,
        )
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
    """Futures of a cluster's shards, with the map/tree-reduce over them.
    ``timeout``: seconds any exchange that moves data or asks the scheduler
    may take (the wait for the workers' compute is watched, not bounded)."""

    def __init__(self, client: distributed.Client, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.client = client
        self.timeout = check_timeout(timeout)
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
        client, t = self.client, self.timeout
        keys_name = "X" if values_are_keys else "keys"
        what = f"placing the {keys_name}"
        kf, sizes, vf, lf, who = self._blocks(keys, values, labels, shards, keys_name, key_futures, workers)
        offsets = [int(o) for o in np.concatenate([[0], np.cumsum(sizes)[:-1]])]
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
                workers=list(who.get(k.key, ())) or None,
                allow_other_workers=True,
                pure=False,
                key=f"locus-shard-{uuid.uuid4().hex}",
            )
            for k, v, lab, off in zip(kf, vf, lf, offsets)
        ]
        names = [f"shard {i} of {len(kf)}" for i in range(len(kf))]
        # A shard's error (an InputError naming the row) is raised.
        _watch.wait_ok(client, self.shards, names, what, t)
        # Each shard holds exactly its block: the driver already knows the sizes.
        self.rows = [int(k) for k in sizes]
        self.offsets = offsets
        # Asked once: every call sends its tasks there (or elsewhere, when a
        # shard has moved; a lost one is refused by `_check`).
        who = _watch.who_has(client, self.shards, what, t)
        self.homes = [list(who.get(s.key, ())) for s in self.shards]

    def _blocks(
        self,
        keys: Any,
        values: Any,
        labels: Any,
        shards: int | None,
        keys_name: str,
        key_futures: list | None = None,
        workers: list[str] | None = None,
    ) -> tuple:
        """The keys as row blocks on the workers (NumPy keys: scattered over
        ``workers``; Dask keys: their chunks; or ``key_futures`` already
        placed), computed, with the values and labels cut alike and sent to
        the same workers: ``(key futures, sizes, value futures, label
        futures, who_has)`` (None futures where there are no values or
        labels)."""
        client, t = self.client, self.timeout
        what = f"placing the {keys_name}"
        if key_futures is not None:
            kf, sizes = key_futures
        elif _is_dask(keys):
            kf, sizes = _dask_parts(client, keys, "keys", None, shards, t)
        else:
            kf, sizes = _scatter_blocks(client, workers or _workers(client), keys, shards, "keys", t)
        if not kf:
            raise InputError(f"{keys_name} is empty (0 rows); it needs at least one row")
        _watch.wait_ok(client, kf, [f"{keys_name} block {i}" for i in range(len(kf))], what, t)
        who = _watch.who_has(client, kf, what, t)

        def split_like(a: Any, name: str) -> list:
            if a is None:
                return [None] * len(kf)
            if _is_dask(a):
                return _dask_parts(client, a, name, sizes, None, t)[0]
            a = np.asarray(a)
            if a.shape[0] != sum(sizes):
                raise InputError(f"{name} has {a.shape[0]} rows but there are {sum(sizes)} keys")
            cuts = np.cumsum(sizes)[:-1]
            homes = [who.get(f.key, ()) for f in kf]
            if not all(homes):
                raise _watch.lost_error(what, [f"{keys_name} block {i}" for i, h in enumerate(homes) if not h])
            items = [(p, h[0]) for p, h in zip(np.split(a, cuts), homes)]
            return _watch.scatter(client, items, f"placing the {name}", t)

        return kf, sizes, split_like(values, "values"), split_like(labels, "labels"), who

    def _check(self, what: str | None = None) -> None:
        """Raises :class:`ShardLostError` (its message led by ``what``, the
        call, when given) when the set is closed, its client is not running
        or a shard's future is lost, cancelled or erred."""
        head = f"{what}: " if what else ""
        again = _watch.again(what or "")
        if self._closed:
            raise ShardLostError(f"{head}this {type(self).__name__} was closed; its shards are released")
        status = getattr(self.client, "status", "running")
        if status != "running":
            raise ShardLostError(f"{head}the Dask client is {status}; its shards are gone ({again})")
        for i, f in enumerate(self.shards):
            if f.status in ("lost", "cancelled", "error"):
                raise ShardLostError(
                    f"{head}shard {i} of {len(self.shards)} is {f.status}; "
                    f"no result is given without it ({again})"
                )

    def _shard_name(self, i: int) -> str:
        lo, n = self.offsets[i], self.rows[i]
        on = ",".join(self.homes[i]) or "no worker"
        return f"shard {i} of {len(self.shards)} (keys {lo}..{lo + n}, placed on {on})"

    def _map_reduce(
        self,
        task: Callable,
        merge: Callable | None,
        per_shard: Callable,
        queries: np.ndarray | None,
        *args: Any,
        what: str = "the call",
    ) -> Any:
        """``merge`` of ``task(shard, *per_shard(i), queries, *args)`` over
        every shard, in a tree of pairwise merges on the workers (``merge``
        None: the list of the shards' answers, in shard order; ``queries``
        None: not passed).

        The scheduler is asked first where every shard is: one held by no
        live worker raises :class:`ShardLostError` before anything is sent.
        The queries then go to the workers holding the shards, one scatter
        per worker, all at once (a broadcast's replication can spin on a
        worker that died since), bounded by :attr:`timeout`. The wait for
        the answer is watched: a shard lost meanwhile ends it at once."""
        self._check(what)
        client, t = self.client, self.timeout
        needs = Needs([(s, self._shard_name(i)) for i, s in enumerate(self.shards)])

        async def go() -> Any:
            lost, who, alive = await asyncio.wait_for(needs.probe(client), t)
            homes = []
            for i, s in enumerate(self.shards):
                live = [w for w in who.get(s.key, ()) if w in alive]
                if not live:
                    lost.append(f"{self._shard_name(i)} (no live worker holds it)")
                homes.append(live[0] if live else "")
            if lost:
                raise _watch.lost_error(what, sorted(set(lost)))
            head: dict[str, list] = {w: [] for w in homes}
            if queries is not None:
                targets = sorted(head)
                sends = asyncio.gather(
                    *(client.scatter(queries, workers=[w], hash=False, timeout=t) for w in targets)
                )
                sent = Needs(needs.futures, [(w, f"worker {w}") for w in targets])
                to = f"{what}: sending the queries to {', '.join(targets)}"
                qf = await _watch.watched(client, sends, sent, to, t, t)
                head = {w: [f] for w, f in zip(targets, qf)}
            parts = [
                client.submit(
                    task,
                    s,
                    *per_shard(i),
                    *head[homes[i]],
                    *args,
                    workers=[homes[i]],
                    allow_other_workers=True,
                    pure=False,
                )
                for i, s in enumerate(self.shards)
            ]
            root = parts if merge is None else _tree(client, parts, merge)
            return await _watch.watched(client, client.gather(root), needs, what, None, t)

        return _watch.run(client, go, what)

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


def assign_adapters(client: distributed.Client, adapters: Sequence[int | str] | None = None) -> dict:
    """Gives each worker of ``client`` its own GPU adapter: sets
    ``LOCUS_ADAPTER`` in worker i to ``adapters[i]`` (default ``i``), in
    the workers' sorted address order. Call it before anything opens an
    engine on the workers (an engine reads the variable when it opens).
    Returns ``{worker address: adapter}``.

    Parameters
    ----------
    client : distributed.Client
        The Dask client of the cluster.
    adapters : sequence of int or str, default=None
        One adapter (index or name, as ``LOCUS_ADAPTER`` takes it) per
        worker; ``0, 1, …`` when None.

    Returns
    -------
    dict
        ``{worker address: adapter}``.
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
