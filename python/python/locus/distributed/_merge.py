"""Merges of the shards' answers: row states (by the engine's rule), top-k
lists, bin counts, extents; run on the workers and on the driver, pairwise
in a tree of tasks."""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Sequence

import distributed
import numpy as np

from .. import _locus


def merge_states(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
    """Merges two row states ``(m, s, u)`` of the same queries over disjoint
    keys into the states over both (associative and commutative; rows with
    ``m = −∞``, i.e. no weight, merge as zeros), by the engine's rule.

    Parameters
    ----------
    a, b : RowStates or tuple of (numpy.ndarray, numpy.ndarray, numpy.ndarray)
        The states ``(m, s, u)`` of the same queries over two sets of keys.

    Returns
    -------
    tuple of (numpy.ndarray, numpy.ndarray, numpy.ndarray)
        The states ``(m, s, u)`` over both.

    Examples
    --------
    >>> import numpy as np
    >>> m, s, u = merge_states((np.float32([0.0]), np.array([1.0]), np.array([[2.0]])),
    ...                        (np.float32([-np.inf]), np.array([0.0]), np.array([[0.0]])))
    >>> float(m[0]), float(s[0]), float(u[0, 0])
    (0.0, 1.0, 2.0)
    """
    return _locus.merge_states(_as_states(a), _as_states(b))


def _as_states(states: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row states as the engine takes them: ``m`` float32, ``s`` and ``u``
    float64, C-contiguous."""
    m, s, u = states
    return (
        np.ascontiguousarray(m, dtype=np.float32),
        np.ascontiguousarray(s, dtype=np.float64),
        np.ascontiguousarray(u, dtype=np.float64),
    )


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


def _bin_keys(b: np.ndarray) -> tuple | None:
    """Rows of whole numbers (float64 bin indices) as one int64 key each,
    the first column most significant (so keys sort as the rows do
    lexicographically), with the offsets and strides that undo it; None
    where the bins' spans do not fit."""
    if not len(b):
        return None
    # By column (contiguous): reductions down the rows of a narrow C-order
    # array are several times slower.
    bt = np.ascontiguousarray(b.T)
    lo, hi = bt.min(axis=1), bt.max(axis=1)
    if max(np.abs(lo).max(), np.abs(hi).max()) > 2.0**52:
        return None
    span = (hi - lo).astype(np.int64) + 1
    if float(np.prod(span.astype(np.float64))) >= 2.0**62:
        return None
    stride = np.ones(len(span), dtype=np.int64)
    for k in range(len(span) - 2, -1, -1):
        stride[k] = stride[k + 1] * span[k + 1]
    keys = (bt[0] - lo[0]).astype(np.int64) * stride[0]
    for k in range(1, len(span)):
        keys += (bt[k] - lo[k]).astype(np.int64) * stride[k]
    return keys, lo, stride, int(np.prod(span))


def _rows(uk: np.ndarray, lo: np.ndarray, stride: np.ndarray) -> np.ndarray:
    """The bin rows of keys ``uk`` (as :func:`_bin_keys` made them)."""
    u = np.empty((len(uk), len(stride)))
    rest = uk
    for k in range(len(stride)):
        u[:, k], rest = rest // stride[k] + lo[k], rest % stride[k]
    return u + 0.0


def unique_bins(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(b, axis=0, return_inverse=True)`` for rows of whole
    numbers (float64 bin indices), sorted the same way (lexicographically
    by column): a 1-D sort of one int64 key per row where the bins' spans
    allow, else ``np.unique`` itself."""
    keyed = _bin_keys(b)
    if keyed is None:
        u, inv = np.unique(b, axis=0, return_inverse=True)
        return u, inv.reshape(-1)
    keys, lo, stride, _ = keyed
    uk, inv = np.unique(keys, return_inverse=True)
    return _rows(uk, lo, stride), inv.reshape(-1)


def bin_counts(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(b, axis=0, return_counts=True)`` for rows of whole
    numbers, the same rows in the same order: counted by key (a histogram
    where the bins' box is at most a few times the rows, else a sort of
    the keys)."""
    keyed = _bin_keys(b)
    if keyed is None:
        u, counts = np.unique(b, axis=0, return_counts=True)
        return u, counts.astype(np.int64)
    keys, lo, stride, total = keyed
    if total <= max(4 * len(b), 1 << 20):
        hist = np.bincount(keys, minlength=total)
        uk = np.flatnonzero(hist)
        counts = hist[uk]
    else:
        uk, counts = np.unique(keys, return_counts=True)
    return _rows(uk, lo, stride), counts.astype(np.int64)


def _merge_bins(a: tuple, b: tuple) -> tuple:
    """Bin counts of two shards: (bins, counts) with bins unique rows."""
    bins = np.concatenate([a[0], b[0]])
    counts = np.concatenate([a[1], b[1]])
    if len(bins) == 0:
        return bins, counts
    u, inv = unique_bins(bins)
    return u, np.bincount(inv, weights=counts, minlength=len(u)).astype(np.int64)


def extent(x: Any) -> tuple:
    """A block's bounding box ``(lo, hi)`` in f64 (``+inf``/``-inf`` for no
    rows: the identity of :func:`_merge_extent`)."""
    x = np.asarray(x, dtype=np.float32)
    if x.shape[0] == 0:
        d = x.shape[1]
        return np.full(d, np.inf), np.full(d, -np.inf)
    return x.min(axis=0).astype(np.float64), x.max(axis=0).astype(np.float64)


def seed_bins(x: Any, h: float) -> tuple:
    """scikit-learn's bins ``round(x/h)`` (half to even, in f64) of a block
    of points, with their counts."""
    x = np.asarray(x, dtype=np.float32)
    b = np.round(x.astype(np.float64) / h) + 0.0
    if len(b) == 0:
        return b, np.zeros(0, dtype=np.int64)
    return bin_counts(b)


def _merge_extent(a: tuple, b: tuple) -> tuple:
    return np.minimum(a[0], b[0]), np.maximum(a[1], b[1])


def _ratio(s: np.ndarray, u: np.ndarray) -> np.ndarray:
    """``u/s`` per row as float32; NaN rows where ``s = 0``."""
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (u / s[:, None]).astype(np.float32)
    out[s <= 0] = np.nan
    return out


def _tree(client: distributed.Client, parts: list, merge: Callable) -> distributed.Future:
    """The pairwise tree of ``merge`` over futures ``parts``: its root."""
    level = list(parts)
    while len(level) > 1:
        nxt = [client.submit(merge, level[i], level[i + 1], pure=False) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def candidates(pos: np.ndarray, counted_at: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The distinct final seed positions ``pos`` (f32 rows, in the order
    of their bits, as the single process sorts them) and where each
    one's population is counted: ``counted_at`` of the last seed at that
    position (the single process's rule: positions before the last step
    when ``max_iter`` stopped the run), or the position itself when
    None."""
    bits, inverse = np.unique(pos.view(np.uint32), axis=0, return_inverse=True)
    cand = np.ascontiguousarray(bits).view(np.float32)
    if counted_at is None:
        return cand, cand
    last = np.full(len(cand), -1, dtype=np.int64)
    np.maximum.at(last, inverse.ravel(), np.arange(len(pos)))
    return cand, np.ascontiguousarray(counted_at[last], dtype=np.float32)

