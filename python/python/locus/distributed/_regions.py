"""MeanShift sharded by region: for a compact kernel, each shard owns a
slab of space along the widest coordinate and holds its own points plus a
halo of the points within the kernel's reach of the slab, so every seed
inside a slab is answered by that shard alone. A worker then shifts its
seeds through as many iterations as they stay in its slab, with no
exchange between them; a seed that crosses into another slab goes there in
the next round. The populations of the final positions and the labels are
answered the same way (a candidate by the slab holding it, a point by the
slab owning it), so the keys are never brought together and each point is
counted once."""

from __future__ import annotations

import operator
import uuid
from typing import Any, Callable

import distributed
import numpy as np
from dask.sizeof import sizeof

from .. import _locus
from .._engine import engine_for
from .._errors import InputError
from .._functions import knn
from . import _watch
from ._tasks import _states
from ._merge import _merge_bins, _merge_extent, _ratio, candidates, extent, seed_bins
from ._placement import _Shard, _Sharded

# The profiles whose weight is zero beyond the bandwidth (and aliases).
COMPACT = frozenset(
    {"epanechnikov", "uniform", "flat", "tophat", "triangular", "linear", "biweight", "quartic", "cosine"}
)
# Rows sampled over all blocks (evenly per block) to place the cuts.
SAMPLE_ROWS = 1 << 16
# Relative slack on the halo's width: a key the kernel weighs at a seed in
# the slab lies within the bandwidth of it along every coordinate; f32
# rounding at the edge is far below this.
_HALO_SLACK = 1e-3


def is_compact(kernel: Any) -> bool:
    """Whether ``kernel`` (a profile name) has bounded reach."""
    return isinstance(kernel, str) and kernel.lower() in COMPACT


class _RegionShard(_Shard):
    """A slab's key set: the points it owns first (``n_owned`` of them),
    then its halo; the values are the points (MeanShift)."""

    def __init__(self, keys: np.ndarray, n_owned: int, backend: str) -> None:
        super().__init__(keys, keys, None, 0, backend)
        self.n_owned = int(n_owned)

    def __reduce__(self) -> tuple:
        return (_RegionShard, (self.keys, self.n_owned, self.backend))


@sizeof.register(_RegionShard)
def _sizeof_region(s: _RegionShard) -> int:
    return s.nbytes()


def _centred(x: Any, center: np.ndarray) -> np.ndarray:
    """``x`` centred as the shards and the single process centre it: the
    difference rounded to f32. ``center`` holds f32 values, so the f32
    subtraction (the exact difference rounded once) equals the f64
    difference rounded to f32, without the f64 temporaries (the exact
    difference of two f32 fits an f64 unless one is below 2⁻²⁹ of the
    other, and then both round to the larger)."""
    return np.subtract(np.asarray(x, dtype=np.float32), center.astype(np.float32), dtype=np.float32)


def extent_and_sample(x: Any, rows: int) -> tuple:
    """A block's bounding box and about ``rows`` of its rows, evenly
    strided (they place the cuts)."""
    x = np.asarray(x, dtype=np.float32)
    step = max(1, x.shape[0] // max(1, rows))
    return (*extent(x), x[::step].copy())


def merge_extent_and_sample(a: tuple, b: tuple) -> tuple:
    return (*_merge_extent(a, b), np.concatenate([a[2], b[2]]))


def by_worker(client: distributed.Client, blocks: list, what: str, timeout: float) -> list[tuple[str, list[int]]]:
    """The blocks grouped by the worker holding them, in block order within
    a group: each pass over the points then runs one task per worker over
    its own blocks, not one per block (hundreds of blocks at 10⁸ points,
    each a few milliseconds of scheduling)."""
    _watch.wait_ok(client, blocks, [f"X block {i} of {len(blocks)}" for i in range(len(blocks))], what, timeout)
    who = _watch.who_has(client, blocks, what, timeout)
    groups: dict[str, list[int]] = {}
    for i, f in enumerate(blocks):
        held = sorted(who.get(f.key, ()))
        groups.setdefault(held[0] if held else "", []).append(i)
    return sorted(groups.items())


def on_groups(
    client: distributed.Client, groups: list[tuple[str, list[int]]], blocks: list, task: Callable, *args: Any
) -> list:
    """``task(*args, *blocks of the group)`` for every group, on its worker:
    the futures, in group order."""
    return [
        client.submit(
            task, *args, *[blocks[i] for i in idx],
            workers=[w] if w else None, allow_other_workers=True, pure=False,
        )
        for w, idx in groups
    ]


def extent_and_sample_many(rows: int, *blocks: Any) -> tuple:
    """:func:`extent_and_sample` of several blocks, merged."""
    out = extent_and_sample(blocks[0], rows)
    for b in blocks[1:]:
        out = merge_extent_and_sample(out, extent_and_sample(b, rows))
    return out


def place_cuts(
    sample: np.ndarray,
    regions: int,
    min_width: float = 0.0,
    work: tuple[np.ndarray, ...] | None = None,
) -> np.ndarray:
    """Cuts along one coordinate giving ``regions`` slabs, at quantiles of
    the ``sample`` (values of points): of equal populations, or, given
    ``work`` (coordinates and the work done there, :func:`pilot_work`), of
    equal work, each cut kept within half a slab's share of points of the
    equal-population cut (so a slab holds at most its share plus half a
    share past each of its cuts: 1.5 times its share at the ends, twice
    in the middle); given the steps' seeds too, then moved to where the
    pilot's seeds cross fewer cuts (:func:`_fewer_crossings`). Each slab holds at least one sampled point and spans
    at least ``min_width`` of the sample's range (a cut that would break
    either is dropped), so there may be fewer: a slab narrower than its
    halo would hold more copied keys than its own."""
    if regions <= 1 or len(sample) == 0:
        return np.zeros(0, dtype=np.float64)
    at = np.arange(1, regions) / regions
    q = np.quantile(sample, at, method="inverted_cdf")
    if work is not None and len(work[0]) and float(np.sum(work[1])) > 0.0:
        order = np.argsort(work[0], kind="stable")
        where, w = work[0][order], np.cumsum(work[1][order], dtype=np.float64)
        aim = where[np.minimum(np.searchsorted(w, at * w[-1]), len(where) - 1)]
        half = 0.5 / regions
        # Within half a share of points of the equal-population cut, and
        # min_width from the ends (where that leaves no room: the
        # equal-population cut).
        low = np.maximum(np.quantile(sample, at - half, method="inverted_cdf"), sample.min() + min_width)
        high = np.minimum(np.quantile(sample, at + half, method="inverted_cdf"), sample.max() - min_width)
        aim = np.where(low <= high, np.clip(aim, low, np.maximum(low, high)), q)
        # Back to values of points (the slabs compare points with the
        # cuts): the nearest at or above, or the one below past the bound.
        ss = np.sort(sample)
        i = np.minimum(np.searchsorted(ss, aim), len(ss) - 1)
        i = np.where((ss[i] > high) & (low <= high) & (i > 0), i - 1, i)
        q = np.maximum.accumulate(ss[i])
        if len(work) > 2:
            q = _fewer_crossings(q, ss, at, half, min_width, work)
    lo, hi = float(sample.min()), float(sample.max())
    cuts: list[float] = []
    for c in np.unique(q[q > lo]).astype(np.float64):
        if c - (cuts[-1] if cuts else lo) >= min_width and hi - c >= min_width:
            cuts.append(float(c))
    return np.array(cuts, dtype=np.float64)


# Candidate positions per cut that :func:`_fewer_crossings` weighs.
_CANDIDATES = 24


def rounds_cost(cuts: np.ndarray, where: np.ndarray, work: np.ndarray, seed: np.ndarray) -> float:
    """The pilot's steps (coordinate, work, seed; each seed's steps in
    order) replayed on slabs cut at ``cuts``: a seed works in its slab
    until it leaves, then in the next round in its new one. Returns the
    sum over rounds of the busiest slab's work — the shifting phase's time
    when each slab has a worker, in the pilot's units."""
    if not len(where):
        return 0.0
    slab = _slab_of(where, cuts)
    same = np.concatenate([[False], seed[1:] == seed[:-1]])
    moved = same & (slab != np.concatenate([[0], slab[:-1]]))
    c = np.cumsum(moved)
    # Each step's round: the seed's moves so far.
    first = np.flatnonzero(~same)
    base = np.repeat(c[first] - moved[first], np.diff(np.concatenate([first, [len(c)]])))
    rounds = c - base
    per = np.bincount(rounds * (len(cuts) + 1) + slab, weights=work)
    per = np.pad(per, (0, (-len(per)) % (len(cuts) + 1)))
    return float(per.reshape(-1, len(cuts) + 1).max(axis=1).sum())


def _fewer_crossings(
    q: np.ndarray, ss: np.ndarray, at: np.ndarray, half: float, min_width: float, work: tuple
) -> np.ndarray:
    """The work-balanced cuts ``q`` moved, one at a time, to where the
    pilot's replay (:func:`rounds_cost`) is cheapest: a cut through a
    basin sends its seeds to another slab in a later round, when the
    other slab may be idle; a cut in the valley beside it sends none.
    Each cut stays within half a slab's share of points (``ss``: the
    sorted sample) of the equal-population cut, min_width from its
    neighbours and the ends."""
    where, w = work[0], work[1]
    order = np.argsort(work[2], kind="stable")
    where, w, seed = where[order], w[order], work[2][order]
    q = np.array(q, dtype=np.float64)
    n = len(ss)
    for r in range(len(q)):
        levels = np.linspace(max(at[r] - half, 0.0), min(at[r] + half, 1.0), _CANDIDATES)
        cand = ss[np.clip((levels * n).astype(np.int64), 0, n - 1)]
        left = q[r - 1] + min_width if r else ss[0] + min_width
        right = q[r + 1] - min_width if r + 1 < len(q) else ss[-1] - min_width
        cand = np.unique(np.concatenate([[q[r]], cand[(cand >= left) & (cand <= right)]]))
        best, best_cost = q[r], rounds_cost(q, where, w, seed)
        for c in cand:
            trial = q.copy()
            trial[r] = c
            cost = rounds_cost(trial, where, w, seed)
            if cost < best_cost * (1.0 - 1e-9):
                best, best_cost = c, cost
        q[r] = best
    return q


# The uniform profile's names: its row sums count the points within reach.
_UNIFORM = frozenset({"uniform", "flat", "tophat"})

# Most seeds the pilot of :func:`pilot_work` follows, and its most steps.
PILOT_SEEDS = 4096
PILOT_STEPS = 100


def pilot_work(
    sample: np.ndarray,
    seeds: np.ndarray,
    axis: int,
    h: float,
    kernel: str,
    thr_sq: float,
    max_iter: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where the shifting work falls along coordinate ``axis``: the seeds
    (centred; at most :data:`PILOT_SEEDS` of them, evenly strided) shifted
    over the ``sample`` (centred points) by the engine's step and stop
    rule, each step recorded at the seed's position with, as its work, the
    sampled points within ``h`` (a shard's cost per seed and step grows
    with the keys within reach), and the seed it belongs to. Seeds spend
    most steps near the modes, in the densest places: an equal split of
    points can give one slab twice the work of the other."""
    pos = np.array(seeds[:: max(1, -(-len(seeds) // PILOT_SEEDS))], dtype=np.float32, copy=True)
    ks = engine_for("cpu").prepare(np.ascontiguousarray(sample, dtype=np.float32),
                                   np.ascontiguousarray(sample, dtype=np.float32))
    where: list[np.ndarray] = []
    work: list[np.ndarray] = []
    ids: list[np.ndarray] = []
    active = np.arange(len(pos))
    for _ in range(min(max_iter, PILOT_STEPS)):
        if not len(active):
            break
        sub = pos[active]
        _, s, u = ks.row_states(sub, bandwidth=h, kernel=kernel)
        # The uniform kernel's sums are the counts already.
        count = s if kernel.lower() in _UNIFORM else ks.row_states(sub, bandwidth=h, kernel="uniform")[1]
        where.append(sub[:, axis].astype(np.float64))
        work.append(np.asarray(count, dtype=np.float64) + 1.0)
        ids.append(active)
        stop = _locus.shift_step(sub, _ratio(s, u), thr_sq)
        pos[active] = sub
        active = active[~stop]
    if not where:
        return np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64)
    return np.concatenate(where), np.concatenate(work), np.concatenate(ids)


def _slab_of(coord: np.ndarray, cuts: np.ndarray) -> np.ndarray:
    """The slab of each centred cut coordinate: slab r is
    ``[cuts[r−1], cuts[r])``."""
    return np.searchsorted(cuts, coord, side="right")


def pieces(x: Any, center: np.ndarray, axis: int, cuts: np.ndarray, halo: float, h_bins: float | None) -> tuple:
    """A block cut by slab (for each slab, the centred points it owns and
    those of its halo) and the block's seed bins of side ``h_bins`` (None:
    not asked)."""
    x = np.asarray(x, dtype=np.float32)
    xc = _centred(x, center)
    c = np.ascontiguousarray(xc[:, axis])
    # The cuts are values of points (f32), so comparing in f32 is exact; the
    # halo's ends are rounded outwards (a key more in a halo changes nothing).
    inf = np.float32(np.inf)
    lo = np.concatenate([[-inf], cuts.astype(np.float32)])
    hi = np.concatenate([cuts.astype(np.float32), [inf]])
    out = []
    for r in range(len(lo)):
        own = (c >= lo[r]) & (c < hi[r])
        lo_h = np.nextafter(np.float32(lo[r] - halo), -inf)
        hi_h = np.nextafter(np.float32(hi[r] + halo), inf)
        near = (c >= lo_h) & (c < hi_h) & ~own
        out.append((xc.take(np.flatnonzero(own), axis=0), xc.take(np.flatnonzero(near), axis=0)))
    return out, None if h_bins is None else seed_bins(x, h_bins)


def pieces_many(center: np.ndarray, axis: int, cuts: np.ndarray, halo: float, h_bins: float | None, *blocks: Any) -> tuple:
    """:func:`pieces` of several blocks, each slab's pieces joined in block
    order, the bins merged."""
    got = [pieces(b, center, axis, cuts, halo, h_bins) for b in blocks]
    out = [
        (np.concatenate([g[0][r][0] for g in got]), np.concatenate([g[0][r][1] for g in got]))
        for r in range(len(cuts) + 1)
    ]
    bins = None
    if h_bins is not None:
        bins = got[0][1]
        for g in got[1:]:
            bins = _merge_bins(bins, g[1])
    return out, bins


def build_region(backend: str, *parts: tuple) -> _RegionShard:
    """A slab's shard from its pieces of every block: the points it owns
    (in block order), then its halo."""
    owned = [p[0] for p in parts]
    keys = np.concatenate(owned + [p[1] for p in parts])
    return _RegionShard(np.ascontiguousarray(keys), sum(len(o) for o in owned), backend)


def build_index(shard: _RegionShard, h: float, kernel: str) -> int:
    """Builds the slab key set's cell index for bandwidth ``h`` and
    ``kernel`` (one query through it: the index is kept for the rounds);
    the shard's keys."""
    if shard.n:
        shard.keyset.row_states(shard.keys[:1], bandwidth=h, kernel=kernel)
    return shard.n


def label_block(x: Any, center: np.ndarray, modes: np.ndarray, h: float, cluster_all: bool, backend: str) -> np.ndarray:
    """The nearest mode of every point of a block (centred as the shards
    are), in the narrowest integer type that holds the labels (they cross
    the wire: one byte a point for fewer than 127 modes)."""
    dist, idx = knn(_centred(x, center), modes, 1, backend=engine_for(backend))
    labels = idx[:, 0].astype(np.min_scalar_type(-len(modes)))
    if not cluster_all:
        labels[dist[:, 0] > h] = -1
    return labels


def label_many(center: np.ndarray, modes: np.ndarray, h: float, cluster_all: bool, backend: str, *blocks: Any) -> list:
    """:func:`label_block` of several blocks: one array each."""
    return [label_block(b, center, modes, h, cluster_all, backend) for b in blocks]


def centred_many(center: np.ndarray, *blocks: Any) -> list:
    return [_centred(b, center) for b in blocks]


def build_slabs(
    client: distributed.Client,
    cut: list,
    n_slabs: int,
    workers: list[str],
    build: Callable,
    args: tuple,
    name: str,
    what: str,
    timeout: float,
) -> list:
    """Slab r built by ``build(*args, piece r of every future of cut)`` on
    worker r mod W (the pieces move there), waited on: the futures (a
    failed build raises its error, an InputError naming the row)."""
    shards = [
        client.submit(
            build,
            *args,
            *[client.submit(operator.itemgetter(r), c, pure=False) for c in cut],
            workers=[workers[r % len(workers)]],
            allow_other_workers=True,
            pure=False,
            key=f"locus-{name}-{uuid.uuid4().hex}",
        )
        for r in range(n_slabs)
    ]
    _watch.wait_ok(client, shards, [f"{name} {r} of {n_slabs}" for r in range(n_slabs)], what, timeout)
    return shards


class Regions(_Sharded):
    """The slabs' shards, with the cuts between them."""

    def __init__(self, client: distributed.Client, timeout: float, cuts: np.ndarray, axis: int) -> None:
        super().__init__(client, timeout)
        self.cuts = cuts
        self.axis = axis

    def _shard_name(self, i: int) -> str:
        on = ",".join(self.homes[i]) or "no worker"
        lo = "-inf" if i == 0 else f"{self.cuts[i - 1]:g}"
        hi = "inf" if i == len(self.cuts) else f"{self.cuts[i]:g}"
        return f"region {i} of {len(self.shards)} ({self.rows[i]} keys, coordinate {self.axis} in [{lo}, {hi}), on {on})"

    def place(
        self,
        blocks: list,
        groups: list[tuple[str, list[int]]],
        workers: list[str],
        center: np.ndarray,
        halo: float,
        h_bins: float | None,
        backend: str,
        gather: Callable[[Any, str], Any],
        what: str,
        index: tuple[float, str] | None = None,
    ) -> Any:
        """Cuts every block by slab on its worker (one task per group of
        ``groups``) and builds each slab's shard on its own worker (slab r
        on worker r mod W), the pieces moving there, with its cell index
        for ``index`` (bandwidth, kernel) when given. Returns the seed bins
        counted on the way (``h_bins`` None: None)."""
        from ._merge import _tree

        client, t = self.client, self.timeout
        split = on_groups(client, groups, blocks, pieces_many, center, self.axis, self.cuts, halo, h_bins)
        bins = None
        if h_bins is not None:
            counted = [client.submit(operator.itemgetter(1), f, pure=False) for f in split]
            bins = _tree(client, counted, _merge_bins)
        cut = [client.submit(operator.itemgetter(0), f, pure=False) for f in split]
        n_regions = len(self.cuts) + 1
        self.shards = build_slabs(client, cut, n_regions, workers, build_region, (backend,), "region", what, t)
        # The cell indexes once the pieces are released (so a worker never
        # holds both), on the slabs' workers.
        del split, cut
        size = build_index if index is not None else _size
        self.rows = gather(
            [client.submit(size, f, *(index or ()), pure=False) for f in self.shards], "placing the regions"
        )
        self.offsets = [0] * n_regions
        who = _watch.who_has(client, self.shards, what, t)
        self.homes = [list(who.get(s.key, ())) for s in self.shards]
        return None if bins is None else gather(bins, "the bins")

    def slab_of(self, pos: np.ndarray) -> np.ndarray:
        return _slab_of(pos[:, self.axis].astype(np.float64), self.cuts)

    def bounds(self, r: int) -> tuple[float, float]:
        lo = -np.inf if r == 0 else float(self.cuts[r - 1])
        hi = np.inf if r == len(self.cuts) else float(self.cuts[r])
        return lo, hi

    def routed(self, task: Callable, pos: np.ndarray, per: Callable, *args: Any, what: str) -> list:
        """``task(shard, rows, *per(r, rows), *args)`` for every slab with a
        row of ``pos`` in it (``rows``: the indices of those rows), as a
        list over the slabs (None for a slab with no row)."""
        slab = self.slab_of(pos)
        sel = [np.flatnonzero(slab == r) for r in range(len(self.shards))]
        answers = self._map_reduce(
            _routed_task, None, lambda r: (task, sel[r], *per(r, sel[r])), None, *args, what=what
        )
        return list(zip(sel, answers))


def _size(shard: _RegionShard) -> int:
    return shard.n


def _routed_task(shard: _RegionShard, task: Callable, rows: np.ndarray, *args: Any) -> Any:
    if len(rows) == 0:
        return None
    return task(shard, *args)


def shift_in_slab(
    shard: _RegionShard,
    pos: np.ndarray,
    iters: np.ndarray,
    lo: float,
    hi: float,
    axis: int,
    h: float,
    kernel: str,
    thr_sq: float,
    max_iter: int,
) -> tuple:
    """Shifts the seeds ``pos`` (each already ``iters`` steps along) by the
    engine's step and stop rule, each until it stops, takes its
    ``max_iter``-th step or leaves the slab ``[lo, hi)``. Returns the
    positions, the steps taken, each seed's end (1 stopped, 2 at
    ``max_iter``, 0 left the slab, still moving) and its position before
    its last step here."""
    pos = np.array(pos, dtype=np.float32, copy=True)
    iters = np.array(iters, dtype=np.int64, copy=True)
    end = np.zeros(len(pos), dtype=np.int8)
    before = pos.copy()
    active = np.arange(len(pos))
    while len(active):
        _, s, u = _states(shard, pos[active], h, kernel, "values")
        sub = pos[active]
        before[active] = sub
        stop = _locus.shift_step(sub, _ratio(s, u), thr_sq)
        pos[active] = sub
        iters[active] += 1
        end[active[stop]] = 1
        moving = active[~stop]
        full = iters[moving] >= max_iter
        end[moving[full]] = 2
        moving = moving[~full]
        c = pos[moving, axis].astype(np.float64)
        active = moving[(c >= lo) & (c < hi)]
    return pos, iters, end, before


def populations(shard: _RegionShard, cand: np.ndarray, h: float) -> np.ndarray:
    """The points within ``h`` of each candidate (all in this slab's key
    set, each once)."""
    _, s, _ = _states(shard, cand, h, "uniform", "none")
    return s


def _in_block_order(groups: list[tuple[str, list[int]]], answers: list) -> list:
    """The groups' per-block answers back in block order."""
    out: list = [None] * sum(len(idx) for _, idx in groups)
    for (_, idx), got in zip(groups, answers):
        for i, a in zip(idx, got):
            out[i] = a
    return out


def run(
    client: distributed.Client,
    xf: list,
    sizes: list[int],
    groups: list[tuple[str, list[int]]],
    workers: list[str],
    *,
    sample: np.ndarray,
    center: np.ndarray,
    h: float,
    kernel: str,
    seeds: str | np.ndarray,
    min_bin_freq: int,
    cluster_all: bool,
    max_iter: int,
    tol: float,
    backend: str,
    regions: int,
    progress: Callable[[int, int, int], None] | None,
    timeout: float,
    gather: Callable[[Any, str], Any],
) -> tuple:
    """MeanShift by region on the blocks ``xf`` (row counts ``sizes``,
    grouped by worker in ``groups``; ``sample``: rows of them spread over all, which place the cuts along
    their widest coordinate): the modes (centred), labels, populations,
    iterations and whether every seed stopped."""
    n_total = int(sum(sizes))
    sample_c = _centred(sample, center)
    sc = sample_c.astype(np.float64)
    axis = int(np.argmax(sc.max(axis=0) - sc.min(axis=0)))
    # Seeds given: centred once, for the pilot and the rounds.
    given = None if isinstance(seeds, str) else (np.asarray(seeds, dtype=np.float64) - center).astype(np.float32)
    binned = isinstance(seeds, str) and seeds == "binned"
    tol_h = tol * h
    thr_sq = float(np.float32(tol_h * tol_h))  # as the row-shard path
    work = None
    if regions > 1 and len(sc):
        # The pilot's seeds: the sample's own bins, the seeds given, or
        # the sampled points (every point a seed).
        if binned:
            b, c = seed_bins(sample, h)
            need = max(1.0, min_bin_freq * len(sample) / max(n_total, 1))
            guess = _centred((b[c >= need] * h).astype(np.float32), center)
        elif given is not None:
            guess = given
        else:
            guess = sample_c
        work = pilot_work(sample_c, guess, axis, h, kernel, thr_sq, max_iter)
    # Slabs at least two bandwidths wide: each then holds at most about as
    # many halo keys as keys of its own.
    cuts = place_cuts(sc[:, axis], regions, 2.0 * h, work)
    reg = Regions(client, timeout, cuts, axis)
    bins = reg.place(
        xf, groups, workers, center, h * (1.0 + _HALO_SLACK), h if binned else None, backend, gather,
        "mean_shift: placing the regions", (h, kernel),
    )
    try:
        if given is not None:
            pos = given
        elif binned and len(kept := bins[0][bins[1] >= min_bin_freq]) != n_total:
            pos = ((kept * h).astype(np.float32).astype(np.float64) - center).astype(np.float32)
        else:
            # Every point a seed, in row order.
            pos = np.concatenate(_in_block_order(groups, gather(
                on_groups(client, groups, xf, centred_many, center), "the seeds"
            )))
        if len(pos) == 0:
            raise InputError(f"mean_shift: no seeds (no bin holds min_bin_freq={min_bin_freq} points)")
        iters = np.zeros(len(pos), dtype=np.int64)
        end = np.zeros(len(pos), dtype=np.int8)
        # Each seed's position before its last step.
        before = pos.copy()
        moving = np.arange(len(pos))
        rounds = 0
        while len(moving):
            rounds += 1
            answers = reg.routed(
                shift_in_slab,
                pos[moving],
                lambda r, rows: (pos[moving[rows]], iters[moving[rows]], *reg.bounds(r)),
                axis, h, kernel, thr_sq, max_iter,
                what=f"mean_shift: round {rounds}",
            )
            for rows, ans in answers:
                if ans is not None:
                    pos[moving[rows]], iters[moving[rows]], end[moving[rows]], before[moving[rows]] = ans
            if progress is not None:
                progress(int(iters.max()), len(moving), int(np.sum(end == 0)))
            moving = np.flatnonzero(end == 0)
        iterations = int(iters.max())
        converged = bool(np.all(end == 1))

        # Populations as the single process counts them: when max_iter
        # stopped the run, where the seeds that took a max_iter-th step
        # were before it (the single process copies every position before
        # its last iteration); each asked of the slab holding that point.
        at = None
        if not converged:
            at = np.where((iters == max_iter)[:, None], before, pos)
        cand, cand_at = candidates(pos, at)
        counts = np.zeros(len(cand), dtype=np.float64)
        for rows, ans in reg.routed(
            populations, cand_at, lambda r, rows: (cand_at[rows],), h, what="mean_shift: the populations"
        ):
            if ans is not None:
                counts[rows] = ans
        modes_c, pops = _locus.rank_modes(cand, counts, h, len(pos))
    finally:
        reg.close()
    # Each block labels its own points: the labels come back in row order.
    labels = np.concatenate(_in_block_order(groups, gather(
        on_groups(client, groups, xf, label_many, center, modes_c, h, cluster_all, backend),
        "the labels",
    ))).astype(np.int64)
    return modes_c, labels, pops, iterations, converged
