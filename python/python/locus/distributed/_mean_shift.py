"""MeanShift sharded over the workers: the points stay on them, one key set
per shard; each iteration merges the shards' row states and moves the
seeds on the driver, by the engine's step and stop rule; the modes are
ranked by the engine's rule from populations counted on the shards."""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable

import distributed
import numpy as np

from .. import _locus
from .._arrays import as_count, as_matrix
from .._engine import check_backend, engine_for
from .._errors import InputError
from .._functions import knn
from .._kernels import ProductKernel, kernel_arg
from .._results import MeanShiftResult
from ._keyset import _check_kernel
from ._tasks import _states
from ._merge import _merge_bins, _merge_extent, _ratio, _tree, candidates, extent, merge_states, seed_bins
from . import _regions, _watch
from ._placement import (
    DEFAULT_TIMEOUT,
    Needs,
    _check_dask,
    _check_finite,
    _check_nonempty,
    _check_shards,
    _dask_parts,
    _first_nonfinite,
    _is_dask,
    _scatter_blocks,
    _Shard,
    _Sharded,
    _workers,
    check_timeout,
)


def _points(shard: _Shard) -> np.ndarray:
    return shard.keys


def _label_points(shard: _Shard, modes: np.ndarray, h: float, cluster_all: bool) -> np.ndarray:
    dist, idx = knn(shard.keys, modes, 1, backend=engine_for(shard.backend))
    # int32 on the wire (half the bytes of int64; there are far fewer
    # modes than 2³¹), int64 once gathered.
    labels = idx[:, 0].astype(np.int32)
    if not cluster_all:
        labels[dist[:, 0] > h] = -1
    return labels


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
    timeout: float = DEFAULT_TIMEOUT,
) -> MeanShiftResult:
    """MeanShift of ``X`` (N × d, NumPy or Dask array) sharded over the
    cluster, with the results of :func:`locus.mean_shift` on the same data
    (same partition, modes equal up to float rounding: the shards' sums
    run in another order, so a seed near the stop threshold can take one
    step more or fewer, and modes agree within a few ``tol·bandwidth`` —
    up to about 6 with the triangular kernel, whose steps shrink slowly).

    The points are centred on the middle of their bounding box and kept
    resident, one key set per shard. ``seeds``: ``"binned"`` (scikit-learn's
    bins of side ``bandwidth`` holding at least ``min_bin_freq`` points,
    counted per shard and summed), ``"all"`` (every point: they are brought
    to the driver) or an array of seeds.

    With a compact kernel (``uniform``, ``epanechnikov``, ``triangular``,
    ``biweight``, ``cosine``) the shards are regions of space: slabs along
    the points' widest coordinate, cut where a pilot on a sample puts
    equal shares of the shifting work (each slab within half a share of
    points of an equal split), each holding its own points and a
    halo of those within one bandwidth of it (the points move once, from
    the blocks to the slabs' workers). Every seed inside a slab is then
    answered by that slab alone, so a worker shifts its seeds through as
    many iterations as they stay in its slab without an exchange; a seed
    that crosses into another slab is sent there in the next round. The
    populations of the final positions are counted by the slab holding
    each, and every point is labelled on the worker holding its block.
    Otherwise (a kernel of full support, or a product kernel) the shards
    are row blocks: each iteration sends the moving seeds to every shard,
    merges the shards' row states in a tree, moves the seeds on the
    driver and drops the converged ones. Either way modes are ranked by the
    points within one bandwidth, merged when within one bandwidth, and
    every point is labelled by its nearest mode on its own worker. ``bandwidth`` must be given (a number), unless
    ``kernel`` is a :class:`~locus.ProductKernel` (joint MeanShift, as
    :func:`locus.mean_shift`: no bandwidth, each block in units of its own).
    ``progress(iteration, queried, moving)`` is called after each
    iteration with the seeds sent out and those still moving; by region,
    after each round, with the most iterations any seed has taken, the
    seeds sent out and those handed to another slab.

    A worker that dies during the call makes it raise
    :class:`ShardLostError` (within about a second of the scheduler
    noticing), never a partial answer; ``timeout`` (seconds) bounds every
    exchange that moves data or asks the scheduler, as in
    :class:`ShardedKeySet`.

    Parameters
    ----------
    client : distributed.Client
        The Dask client of the cluster.
    X : array-like or dask.array.Array of shape (n_samples, n_features)
        The points.
    bandwidth : float or None, default=None
        The bandwidth (required, unless ``kernel`` is a product kernel).
    kernel : str or ProductKernel, default="uniform"
        A profile name (``uniform``: scikit-learn's flat kernel) or a
        :class:`~locus.ProductKernel`.
    seeds : {"binned", "all"} or array-like of shape (n_seeds, n_features), default="binned"
        Where the seeds start.
    min_bin_freq : int, default=1
        The fewest points a bin needs to give a seed.
    cluster_all : bool, default=True
        False: points farther than ``bandwidth`` from every mode get −1.
    max_iter : int, default=300
        The most shifts a seed takes.
    tol : float, default=1e-3
        A seed stops when it moves at most ``tol·bandwidth``.
    backend : {"auto", "gpu", "cpu"}, default="auto"
        The engine each worker opens.
    shards : int or None, default=None
        How many shards: by region, the slabs (default one per worker;
        slab r lives on worker r mod W; fewer where the points span fewer
        than two bandwidths per slab along the cut coordinate); by rows, the row blocks (default:
        one per worker for NumPy input, the row chunks for Dask input).
    progress : callable or None, default=None
        ``progress(iteration, queried, moving)``, called after each
        iteration (by region: after each round).
    timeout : float, default=30
        Seconds any exchange that moves data or asks the scheduler may take.

    Returns
    -------
    MeanShiftResult
        As :func:`locus.mean_shift` returns it.
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
    timeout = check_timeout(timeout)
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
        xf, sizes = _dask_parts(client, X, "X", None, shards, timeout)
    else:
        xf, sizes = _scatter_blocks(client, workers, x, shards, "X", timeout)
    # The blocks the passes before placement need (named in a ShardLostError).
    blocks = Needs([(f, f"X block {i} of {len(xf)}") for i, f in enumerate(xf)])

    def gather(futures: Any, what: str) -> Any:
        return _watch.gather(client, futures, blocks, f"mean_shift: {what}", timeout)

    n_total = sum(sizes)
    if n_total == 0:
        _check_nonempty((0, d), "X")
    # The centre: the middle of the bounding box, rounded to f32 (as the engine).
    # A compact kernel shards by region (_regions): the bounding box pass
    # also samples the rows that place the cuts between the regions.
    by_region = scale is None and _regions.is_compact(kernel)
    if by_region:
        groups = _regions.by_worker(client, xf, "mean_shift: the bounding box", timeout)
        per = _regions.SAMPLE_ROWS // len(xf) + 1
        parts = _regions.on_groups(client, groups, xf, _regions.extent_and_sample_many, per)
        lo, hi, sample = gather(_tree(client, parts, _regions.merge_extent_and_sample), "the bounding box")
    else:
        parts = [client.submit(extent, f, pure=False) for f in xf]
        lo, hi = gather(_tree(client, parts, _merge_extent), "the bounding box")
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        # A Dask X: find the first non-finite entry, by its row in X.
        bad = gather([client.submit(_first_nonfinite, f, pure=False) for f in xf], "the check of X")
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        for off, b in zip(offsets, bad):
            if b is not None:
                raise InputError(f"X has a non-finite value ({b[2]}) at row {off + b[0]}, column {b[1]}")
        raise InputError("X must be finite")
    center = ((lo + hi) * 0.5).astype(np.float32).astype(np.float64)

    if by_region:
        # Each seed shifted by the one shard whose slab holds it, for as
        # many iterations as it stays there.
        modes_c, labels, populations, iterations, converged = _regions.run(
            client, xf, sizes, groups, workers,
            sample=sample, center=center, h=h, kernel=kernel,
            seeds=seeds if seeds_given is None else seeds_given,
            min_bin_freq=min_bin_freq, cluster_all=bool(cluster_all), max_iter=max_iter, tol=tol,
            backend=backend, regions=shards or len(workers), progress=progress, timeout=timeout,
            gather=gather,
        )
        modes = (modes_c.astype(np.float64) + center).astype(np.float32)
        return MeanShiftResult(modes, labels, populations, iterations, converged, h)

    # Seeds, centred.
    if seeds_given is not None:
        seeds_xy = seeds_given
    elif seeds == "binned":
        parts = [client.submit(seed_bins, f, h, pure=False) for f in xf]
        bins, counts = gather(_tree(client, parts, _merge_bins), "the bins")
        kept = bins[counts >= min_bin_freq]
        if len(kept) == n_total:
            seeds_xy = None  # every point its own bin: the points are the seeds
        else:
            seeds_xy = (kept * h).astype(np.float32)
    else:
        seeds_xy = None

    sh = _Sharded(client, timeout)  # the points, centred; values = the points
    sh._place(
        None, None, None, None, backend, None,
        center=center, values_are_keys=True, key_futures=(xf, sizes),
    )
    # The raw blocks are released: the shards hold the centred points.
    del xf
    blocks = Needs()
    try:
        if seeds_xy is None:
            # Every point a seed: the shards' centred points, gathered once
            # (a new array, in row order).
            pos = np.concatenate(sh._map_reduce(_points, None, lambda i: (), None, what="mean_shift: the seeds"))
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
        before_last = None
        for it in range(1, max_iter + 1):
            if it == max_iter:
                before_last = pos.copy()
            m, s, u = sh._map_reduce(
                _states, merge_states, lambda i: (), pos[active], h_kernel, kernel, "values",
                what=f"mean_shift: iteration {it}",
            )
            mean = _ratio(s, u)
            sub = pos[active]
            stop = _locus.shift_step(sub, mean, thr_sq)
            pos[active] = sub
            active = active[~stop]
            iterations = it
            if progress is not None:
                progress(it, len(sub), len(active))
            if len(active) == 0:
                converged = True
                break

        # Post-processing: distinct final positions, their populations
        # (counted before the last step when max_iter stopped the run).
        cand, at = candidates(pos, None if converged else before_last)
        _, counts, _ = sh._map_reduce(
            _states, merge_states, lambda i: (), at, h, "uniform", "none",
            what="mean_shift: the populations",
        )
        modes_c, populations = _locus.rank_modes(cand, counts, h, len(pos))
        labels = np.concatenate(sh._map_reduce(
            _label_points, None, lambda i: (), modes_c, h, bool(cluster_all), what="mean_shift: the labels"
        )).astype(np.int64)
    finally:
        sh.close()
    modes = (modes_c.astype(np.float64) + center).astype(np.float32)
    if scale is not None:
        modes = (modes.astype(np.float64) * scale).astype(np.float32)
    return MeanShiftResult(modes, labels, populations, iterations, converged, h)
