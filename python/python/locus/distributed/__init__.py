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
the merged answer comes back. The keys never move. The merge of row
states, seen without a cluster: two key sets' states of the same queries
merge into the states of all their keys.

>>> import numpy as np, locus, locus.distributed as ld
>>> engine = locus.Engine("cpu")
>>> keys, values, q = np.array([[0.0], [1.0], [3.0]]), np.array([1.0, 2.0, 4.0]), [[1.0]]
>>> m, s, u = ld.merge_states(engine.prepare(keys[:2], values[:2]).row_states(q, bandwidth=1.0),
...                           engine.prepare(keys[2:], values[2:]).row_states(q, bandwidth=1.0))
>>> (u[:, 0] / s).round(5), engine.prepare(keys, values).local_mean(q, bandwidth=1.0).round(5)
(array([1.80718]), array([1.80718]))

Example (a cluster of two local worker processes)::

    from distributed import Client, LocalCluster
    import numpy as np
    import locus.distributed as ld

    client = Client(LocalCluster(n_workers=2, threads_per_worker=1))
    keys = np.random.default_rng(0).normal(size=(100_000, 3))
    sks = ld.ShardedKeySet(client, keys, values=keys[:, 0], backend="cpu")
    sks.local_mean(keys[:5], bandwidth=0.5)
    ld.mean_shift(client, keys, bandwidth=1.0, seeds="binned").cluster_centers
    ld.MeanShift(bandwidth=1.0).fit(keys).labels_   # scikit-learn's face

Several GPUs on one node: one worker per adapter, each told its adapter by
``LOCUS_ADAPTER`` before its first engine opens (see
:func:`assign_adapters` and ``docs/scaling.md``).
"""

from __future__ import annotations

try:
    import dask  # noqa: F401
    import distributed  # noqa: F401
except ImportError as _missing:  # pragma: no cover - exercised without dask
    raise ImportError(
        "locus.distributed needs dask.distributed; install it with: "
        "pip install 'locus-engine[distributed]'"
    ) from _missing

from typing import TYPE_CHECKING, Any

from ._keyset import ShardedKeySet
from ._mean_shift import mean_shift
from ._merge import merge_states
from ._placement import assign_adapters
from ._watch import ShardLostError

if TYPE_CHECKING:
    from ._estimator import MeanShift


def __getattr__(name: str) -> Any:
    # The estimator is imported on first use: it needs scikit-learn (about a
    # second to import), which every worker would otherwise pay when it
    # first runs a task of this package.
    if name == "MeanShift":
        from ._estimator import MeanShift

        return MeanShift
    raise AttributeError(f"module 'locus.distributed' has no attribute {name!r}")


__all__ = [
    "ShardedKeySet",
    "ShardLostError",
    "MeanShift",
    "mean_shift",
    "merge_states",
    "assign_adapters",
]
