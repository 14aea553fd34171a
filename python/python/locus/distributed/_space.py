"""A sharded key set partitioned by space (``ShardedKeySet(...,
partition="space")``): the keys cut into slabs along their widest
coordinate (at quantiles of a sample, so the slabs hold about equal
numbers of keys), one shard per slab, each knowing the box its keys fill.
A query under a compact kernel goes only to the shards whose box lies
within the kernel's reach of it, and a k-nearest-neighbour query first to
the shard whose box is nearest, then only to those whose box is nearer
than the k-th neighbour found there; the answers are merged with the same
associative rules as over row shards."""

from __future__ import annotations

from functools import partial
from typing import Any, Callable

import numpy as np
from dask.sizeof import sizeof

from . import _watch
from ._tasks import _knn_task, _log_mass, _states
from ._merge import _merge_knn, _tree, merge_states
from ._placement import _checked_block, _even, _is_dask, _known_rows, _Shard
from ._regions import (
    SAMPLE_ROWS,
    build_slabs,
    by_worker,
    extent_and_sample_many,
    is_compact,
    merge_extent_and_sample,
    on_groups,
    place_cuts,
)

# Relative slack on a compact kernel's reach and on a k-th distance when
# deciding which shards a query needs (f32 rounding at the edge).
_SLACK = 1e-3


class _SpaceShard(_Shard):
    """A slab's shard: its keys (with values and class indices) and their
    rows in the whole key set (the driver asks once for the box they
    fill)."""

    def __init__(
        self,
        keys: np.ndarray,
        values: np.ndarray | None,
        label_index: np.ndarray | None,
        n_classes: int,
        backend: str,
        rows: np.ndarray,
    ) -> None:
        super().__init__(keys, values, label_index, n_classes, backend)
        self.row_index = rows

    def nbytes(self) -> int:
        return super().nbytes() + self.row_index.nbytes

    def __reduce__(self) -> tuple:
        return (
            _SpaceShard,
            (self.keys, self.values, self.label_index, self.n_classes, self.backend, self.row_index),
        )


@sizeof.register(_SpaceShard)
def _sizeof_space(s: _SpaceShard) -> int:
    return s.nbytes()


def pieces(
    blocks: list, offsets: list[int], classes: np.ndarray | None, axis: int, cuts: np.ndarray
) -> list:
    """Blocks ``(keys, values, labels)`` cut by slab: for each slab, its
    keys, values, class indices and rows, joined over the blocks."""
    got = []
    for (k, v, lab), off in zip(blocks, offsets):
        x, y, index = _checked_block(k, v, lab, classes, off)
        c = x[:, axis]
        slab = np.searchsorted(cuts.astype(np.float32), c, side="right")
        rows = np.arange(off, off + len(x), dtype=np.int64)
        got.append((x, y, index, rows, slab))
    out = []
    for r in range(len(cuts) + 1):
        sel = [np.flatnonzero(g[4] == r) for g in got]
        part = []
        for j in range(4):
            arrs = [g[j].take(s, axis=0) for g, s in zip(got, sel) if g[j] is not None]
            part.append(np.concatenate(arrs) if arrs else None)
        out.append(tuple(part))
    return out


def pieces_many(classes: np.ndarray | None, axis: int, cuts: np.ndarray, offsets: list[int], *flat: Any) -> list:
    """:func:`pieces` of a worker's blocks, given flat as keys, values,
    labels of each block in turn."""
    blocks = [tuple(flat[i:i + 3]) for i in range(0, len(flat), 3)]
    return pieces(blocks, offsets, classes, axis, cuts)


def build(backend: str, n_classes: int, d: int, *parts: tuple) -> _SpaceShard:
    """A slab's shard from its pieces of every worker's blocks, its keys in
    the order of their rows in the whole key set: the pieces come by
    worker, not by row, and the key set breaks ties between equally near
    keys by position, which must then be the global row's."""
    rows = np.concatenate([p[3] for p in parts if p[3] is not None] or [np.zeros(0, dtype=np.int64)])
    order = np.argsort(rows, kind="stable")

    def join(j: int) -> np.ndarray | None:
        arrs = [p[j] for p in parts if p[j] is not None]
        return np.concatenate(arrs).take(order, axis=0) if arrs else None

    keys = join(0)
    keys = np.zeros((0, d), dtype=np.float32) if keys is None else keys
    return _SpaceShard(np.ascontiguousarray(keys), join(1), join(2), n_classes, backend, rows[order])


def _knn_rows(shard: _SpaceShard, q: np.ndarray, k: int) -> tuple:
    """The shard's k nearest keys of each query (fewer when it holds fewer),
    with global indices."""
    dist, d2, idx, lab = _knn_task(shard, 0, q, k)
    return dist, d2, shard.row_index[idx], lab


def _box(shard: _SpaceShard) -> tuple:
    k = shard.keys
    return shard.n, k.min(axis=0).astype(np.float64), k.max(axis=0).astype(np.float64)


def place(
    sks: Any,
    keys: Any,
    values: Any,
    labels: Any,
    classes: np.ndarray | None,
    backend: str,
    shards: int | None,
    workers: list[str],
) -> None:
    """Places ``sks`` (a :class:`ShardedKeySet`) by space: its shards,
    rows, homes, boxes, cut coordinate and cuts."""
    client, t = sks.client, sks.timeout
    what = "placing the keys"
    n = _known_rows(keys) if _is_dask(keys) else keys.shape[0]
    if shards is not None and n is not None:
        _even(n, shards, "keys")  # refuses more slabs than keys, as the row partition does
    kf, sizes, vf, lf, _ = sks._blocks(keys, values, labels, None, "keys", None, workers)
    if shards is not None:
        _even(sum(sizes), shards, "keys")
    d = int(keys.shape[1])
    offsets = [int(o) for o in np.concatenate([[0], np.cumsum(sizes)[:-1]])]
    groups = by_worker(client, kf, what, t)
    per = SAMPLE_ROWS // len(kf) + 1
    parts = on_groups(client, groups, kf, extent_and_sample_many, per)
    lo, hi, sample = _watch.gather(client, _tree(client, parts, merge_extent_and_sample), _watch.Needs(), what, t)
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        # A non-finite key: the checked cut below names it (row and column).
        axis, cuts = 0, np.zeros(0)
    else:
        sample = sample.astype(np.float64)
        axis = int(np.argmax(hi - lo))
        cuts = place_cuts(sample[:, axis], shards or len(workers))
    n_classes = 0 if classes is None else len(classes)
    split = [
        client.submit(
            pieces_many, classes, axis, cuts, [offsets[i] for i in idx],
            *[a for i in idx for a in (kf[i], vf[i], lf[i])],
            workers=[w] if w else None, allow_other_workers=True, pure=False,
        )
        for w, idx in groups
    ]
    n_slabs = len(cuts) + 1
    sks.shards = build_slabs(client, split, n_slabs, workers, build, (backend, n_classes, d), "shard", what, t)
    boxes = _watch.gather(client, [client.submit(_box, f, pure=False) for f in sks.shards], _watch.Needs(), what, t)
    sks.rows = [int(b[0]) for b in boxes]
    sks.offsets = [0] * n_slabs
    sks.lo = np.array([b[1] for b in boxes])
    sks.hi = np.array([b[2] for b in boxes])
    sks.axis, sks.cuts = axis, cuts
    who = _watch.who_has(client, sks.shards, what, t)
    sks.homes = [list(who.get(s.key, ())) for s in sks.shards]


def box_sq_dists(q: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Squared distances (f64) from each query to each shard's box (M × S)."""
    q = q.astype(np.float64)[:, None, :]
    gap = np.maximum(lo[None] - q, 0.0) + np.maximum(q - hi[None], 0.0)
    return np.einsum("msd,msd->ms", gap, gap)


def reach_of(bandwidth: float | None, kernel: Any) -> float | None:
    """How far a key the kernel weighs can lie from the query: a compact
    profile's bandwidth with slack; None for kernels of full support and
    product kernels (every shard is asked)."""
    if is_compact(kernel) and bandwidth is not None:
        return float(bandwidth) * (1.0 + _SLACK)
    return None


def _maybe(task: Callable, shard: _SpaceShard, q: np.ndarray, *args: Any) -> Any:
    return None if len(q) == 0 else task(shard, q, *args)


def routed(sks: Any, task: Callable, q: np.ndarray, routes: list, *args: Any, what: str) -> list:
    """``task(shard, q[routes[i]], *args)`` on every shard with a route (None
    for one without), as a list over the shards."""
    return sks._map_reduce(
        partial(_maybe, task), None, lambda i: (q[routes[i]],), None, *args, what=what
    )


def _routes(sks: Any, q: np.ndarray, reach: float) -> list:
    """For each shard, the queries whose box distance is within ``reach``."""
    near = box_sq_dists(q, sks.lo, sks.hi) <= reach * reach
    return [np.flatnonzero(near[:, i]) for i in range(len(sks.shards))]


def states(sks: Any, q: np.ndarray, h: float | None, kernel: Any, cols: str, n_cols: int, reach: float, what: str) -> tuple:
    """Row states ``(m, s, u)`` of ``q`` merged over the shards within
    ``reach`` of each query (rows no shard reaches: empty)."""
    routes = _routes(sks, q, reach)
    m = np.full(len(q), -np.inf, dtype=np.float32)
    s = np.zeros(len(q))
    u = np.zeros((len(q), n_cols))
    for rows, ans in zip(routes, routed(sks, _states, q, routes, h, kernel, cols, what=what)):
        if ans is not None:
            m[rows], s[rows], u[rows] = merge_states((m[rows], s[rows], u[rows]), ans)
    return m, s, u


def log_mass(sks: Any, q: np.ndarray, h: float | None, kernel: Any, reach: float, what: str) -> np.ndarray:
    """``ln Σᵢ nᵢ·p̂ᵢ(q)`` over the shards within ``reach`` of each query."""
    routes = _routes(sks, q, reach)
    out = np.full(len(q), -np.inf)
    for rows, ans in zip(routes, routed(sks, _log_mass, q, routes, h, kernel, what=what)):
        if ans is not None:
            out[rows] = np.logaddexp(out[rows], ans)
    return out


def knn(sks: Any, q: np.ndarray, k: int, labelled: bool) -> tuple:
    """``(dist, d2, global index, labels)`` of the k nearest keys: each
    query asks the shard whose box is nearest first, then only the shards
    whose box is no farther than the k-th neighbour found there."""
    d2box = box_sq_dists(q, sks.lo, sks.hi)
    first = np.argmin(d2box, axis=1)
    n_shards = len(sks.shards)
    ones = [np.flatnonzero(first == i) for i in range(n_shards)]
    pad = _Lists(len(q), k, labelled)
    for rows, ans in zip(ones, routed(sks, _knn_rows, q, ones, k, what="knn")):
        if ans is not None:
            pad.merge(rows, ans)
    # A list shorter than k (the first shard held fewer keys) has +inf last.
    kth = pad.dist[:, k - 1].astype(np.float64)
    limit = (kth * (1.0 + _SLACK)) ** 2
    more = d2box <= limit[:, None]
    more[np.arange(len(q)), first] = False
    rest = [np.flatnonzero(more[:, i]) for i in range(n_shards)]
    if any(len(r) for r in rest):
        for rows, ans in zip(rest, routed(sks, _knn_rows, q, rest, k, what="knn")):
            if ans is not None:
                pad.merge(rows, ans)
    return pad.dist, pad.d2, pad.idx, pad.lab


class _Lists:
    """k-nearest lists of every query, padded with (+inf, +inf, no key)
    until filled; merged by distance, then squared distance, then global
    index (the single-node order)."""

    def __init__(self, m: int, k: int, labelled: bool) -> None:
        self.k = k
        self.dist = np.full((m, k), np.inf, dtype=np.float32)
        self.d2 = np.full((m, k), np.inf, dtype=np.float32)
        self.idx = np.full((m, k), np.iinfo(np.int64).max, dtype=np.int64)
        self.lab = np.zeros((m, k), dtype=np.int64) if labelled else None

    def merge(self, rows: np.ndarray, ans: tuple) -> None:
        a = (self.dist[rows], self.d2[rows], self.idx[rows], None if self.lab is None else self.lab[rows])
        dist, d2, idx, lab = _merge_knn(a, ans, self.k)
        self.dist[rows], self.d2[rows], self.idx[rows] = dist, d2, idx
        if self.lab is not None:
            self.lab[rows] = lab
