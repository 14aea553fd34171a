"""What a shard computes on its worker for the sharded ops (row states,
log masses, neighbour lists), shared by the row-block and the space
partitions and by sharded MeanShift."""

from __future__ import annotations

import math

import numpy as np

from .. import _locus
from ._placement import _Shard


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
    dist, idx = shard.keyset.knn(queries, k)
    d2 = _locus.neighbour_sq_dists(queries, shard.keys, idx)
    lab = None if shard.label_index is None else shard.label_index[idx]
    return dist, d2, idx + offset, lab
