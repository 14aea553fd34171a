"""locus.distributed on a local Dask cluster of two worker processes: every
sharded op equals the single-process op on the same data."""

import collections
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")

import locus  # noqa: E402
import locus.distributed as ld  # noqa: E402

KERNELS = ["gaussian", "epanechnikov", "uniform", "laplacian"]


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0"
    )
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    n = 4999  # split into shards of unequal sizes
    x = rng.normal(size=(n, 3)).astype(np.float32)
    y = np.column_stack([np.sin(x[:, 0]), x[:, 1] ** 2]).astype(np.float32) + 3.0
    # Class "c" only in the second half: some shards lack it.
    labels = np.where(x[:, 2] > 0.5, "a", "b").astype(object)
    labels[n // 2 :][x[n // 2 :, 0] > 1.0] = "c"
    labels = labels.astype(str)
    q = np.vstack([rng.normal(size=(200, 3)) * 1.5, rng.normal(size=(10, 3)) + 30.0]).astype(
        np.float32
    )  # the last rows are far from every key: empty for compact kernels
    return x, y, labels, q


@pytest.fixture(scope="module")
def single(data):
    x, y, labels, _ = data
    return locus.Engine("cpu").prepare(x, y, labels)


@pytest.fixture(scope="module")
def sharded(client, data):
    x, y, labels, _ = data
    return ld.ShardedKeySet(client, x, y, labels, backend="cpu", shards=3)


def _close(got, want, rtol=1e-5):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    f = np.isfinite(want)
    scale = np.abs(want[f]).max() if f.any() else 1.0
    np.testing.assert_allclose(got[f], want[f], rtol=rtol, atol=rtol * scale)


def test_importing_locus_does_not_import_dask():
    code = "import locus, sys; sys.exit(int(any(m.startswith('dask') or m.startswith('distributed') for m in sys.modules)))"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_shards_are_resident_on_both_workers(client, sharded, data):
    x = data[0]
    assert sharded.n_shards == 3
    assert sum(sharded.shard_rows) == sharded.n_keys == len(x)
    assert len(set(sharded.shard_rows)) > 1  # 4999 rows: unequal shards
    assert len(set(sharded.where())) == 2
    assert list(sharded.classes) == ["a", "b", "c"]


@pytest.mark.parametrize("kernel", KERNELS)
def test_local_means_and_densities_equal_single_process(sharded, single, data, kernel):
    q = data[3]
    _close(sharded.local_mean(q, bandwidth=0.6, kernel=kernel), single.local_mean(q, bandwidth=0.6, kernel=kernel))
    _close(sharded.log_density(q, bandwidth=0.6, kernel=kernel), single.log_density(q, bandwidth=0.6, kernel=kernel))
    _close(sharded.density(q, bandwidth=0.6, kernel=kernel), single.density(q, bandwidth=0.6, kernel=kernel))
    _close(sharded.predict_proba(q, bandwidth=0.6, kernel=kernel), single.predict_proba(q, bandwidth=0.6, kernel=kernel))
    np.testing.assert_array_equal(
        sharded.classify(q, bandwidth=0.6, kernel=kernel), single.classify(q, bandwidth=0.6, kernel=kernel)
    )


def test_row_states_merge_to_the_single_process_mean(sharded, single, data):
    q = data[3]
    got, want = sharded.row_states(q, bandwidth=0.5), single.row_states(q, bandwidth=0.5)
    assert got.weighted.shape == want.weighted.shape
    mean = lambda st: st.weighted / st.sum[:, None]  # noqa: E731
    _close(mean(got), mean(want))
    # The states themselves are plain numpy arrays and merge associatively.
    a = ld.merge_states(ld.merge_states(got, want), got)
    b = ld.merge_states(got, ld.merge_states(want, got))
    _close(a[1], b[1], rtol=1e-12)


def test_knn_lists_are_identical_ties_included(client, data):
    x, q = data[0], data[3]
    # Coordinates on a coarse grid: many equal distances across shards.
    xg, qg = np.round(x, 1), np.round(q[:200], 1)
    single = locus.Engine("cpu").prepare(xg)
    sharded = ld.ShardedKeySet(client, xg, backend="cpu", shards=5)
    for k in (1, 16):
        gd, gi = sharded.knn(qg, k)
        wd, wi = single.knn(qg, k)
        np.testing.assert_array_equal(gi, wi)
        np.testing.assert_array_equal(gd, wd)


def test_dask_array_with_uneven_chunks(client, data):
    x, y, labels, q = data
    chunks = (700, 2500, 1799)
    xd = da.from_array(x, chunks=(chunks, 3))
    sharded = ld.ShardedKeySet(
        client, xd, da.from_array(y[:, 0], chunks=1000), da.from_array(labels, chunks=2000), backend="cpu"
    )
    assert sharded.shard_rows == list(chunks)
    single = locus.Engine("cpu").prepare(x, y[:, 0], labels)
    got = sharded.local_mean(q, bandwidth=0.5)
    assert got.ndim == 1
    _close(got, single.local_mean(q, bandwidth=0.5))
    np.testing.assert_array_equal(
        sharded.classify(q, bandwidth=0.5, kernel="biweight"), single.classify(q, bandwidth=0.5, kernel="biweight")
    )
    gd, gi = sharded.knn(q, 5)
    wd, wi = single.knn(q, 5)
    np.testing.assert_array_equal(gi, wi)
    np.testing.assert_array_equal(gd, wd)


def _blobs(n=6000, seed=3):
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-6, 6, size=(5, 2))
    x = centers[rng.integers(0, 5, n)] + rng.normal(scale=0.6, size=(n, 2))
    return (x + 50.0).astype(np.float32)


@pytest.mark.parametrize(
    "kw",
    [
        {"seeds": "binned"},
        {"seeds": "binned", "min_bin_freq": 5, "cluster_all": False, "shards": 5},
        {"seeds": "binned", "kernel": "epanechnikov", "shards": 3},
        {"seeds": "all", "shards": 3},
        {"seeds": "binned", "kernel": "gaussian", "shards": 3, "max_iter": 40},
    ],
    ids=["binned", "min_bin_freq", "epanechnikov", "all", "gaussian"],
)
def test_mean_shift_equals_single_process(client, kw):
    x = _blobs()
    h = 1.0
    want = locus.mean_shift(
        x,
        bandwidth=h,
        kernel=kw.get("kernel", "uniform"),
        bin_seeding=kw["seeds"] == "binned",
        min_bin_freq=kw.get("min_bin_freq", 1),
        cluster_all=kw.get("cluster_all", True),
        max_iter=kw.get("max_iter", 300),
        backend="cpu",
    )
    got = ld.mean_shift(client, x, bandwidth=h, backend="cpu", **kw)
    np.testing.assert_array_equal(got.labels, want.labels)
    assert got.cluster_centers.shape == want.cluster_centers.shape
    np.testing.assert_allclose(got.cluster_centers, want.cluster_centers, atol=1e-4 * h, rtol=0)
    np.testing.assert_array_equal(got.populations, want.populations)
    assert (got.n_iter, got.converged, got.bandwidth) == (want.n_iter, want.converged, want.bandwidth)


def test_mean_shift_by_region_hands_seeds_across_slabs(client):
    """A compact kernel shards by region: seeds that start in one slab and
    drift into another are handed over between rounds, and the result is
    still the single process's, up to the iteration cap."""
    rng = np.random.default_rng(21)
    # Two blobs joined by a sparse bridge along the first coordinate, denser
    # towards the second blob: the bridge's seeds drift along it, across
    # whichever cuts lie on their way to a mode.
    x = np.concatenate([
        rng.normal(scale=0.5, size=(1500, 2)),
        rng.normal(scale=0.5, size=(1500, 2)) + [12.0, 0.0],
        np.column_stack([12.0 * np.sqrt(rng.uniform(0, 1, 600)), rng.normal(scale=0.3, size=600)]),
    ]).astype(np.float32)
    for max_iter in (300, 4):
        want = locus.mean_shift(x, bandwidth=2.0, bin_seeding=False, max_iter=max_iter, backend="cpu")
        log = []
        got = ld.mean_shift(
            client, x, bandwidth=2.0, seeds="all", shards=6, max_iter=max_iter, backend="cpu",
            progress=lambda it, queried, moving: log.append((it, queried, moving)),
        )
        assert (got.n_iter, got.converged) == (want.n_iter, want.converged), max_iter
        np.testing.assert_array_equal(got.labels, want.labels)
        np.testing.assert_allclose(got.cluster_centers, want.cluster_centers, atol=2e-4, rtol=0)
        np.testing.assert_array_equal(got.populations, want.populations)
        if max_iter == 4:
            continue
        # The first round sends every seed; later ones only those handed
        # over (none once every seed has stopped or reached the cap).
        assert log[0][1] == len(x) and len(log) > 1 and 0 < log[1][1] < len(x), log
        assert log[-1][2] == 0
    assert not want.converged and want.n_iter == 4


@pytest.mark.parametrize("kernel", ["uniform", "gaussian"])
def test_mean_shift_stopped_by_max_iter_counts_populations_as_the_single_process(client, kernel):
    """When max_iter stops the run, the single process counts each seed's
    population where it was before its last step; both sharded paths
    (by region: uniform; by rows: gaussian) do the same, so labels,
    populations and modes match at every cap, on 1 to 3 shards."""
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.normal(size=(1500, 2)), rng.normal(size=(1500, 2)) + [8.0, 0.0]]).astype(np.float32)
    for max_iter in (1, 2, 5):
        want = locus.mean_shift(x, bandwidth=1.0, kernel=kernel, bin_seeding=True, max_iter=max_iter, backend="cpu")
        assert not want.converged
        for shards in (1, 3):
            got = ld.mean_shift(
                client, x, bandwidth=1.0, kernel=kernel, seeds="binned", max_iter=max_iter, backend="cpu", shards=shards
            )
            assert (got.n_iter, got.converged) == (want.n_iter, want.converged)
            np.testing.assert_array_equal(got.populations, want.populations, err_msg=f"{max_iter=} {shards=}")
            np.testing.assert_array_equal(got.labels, want.labels)
            np.testing.assert_allclose(got.cluster_centers, want.cluster_centers, atol=1e-5, rtol=0)


def test_space_shards_hold_their_keys_in_global_row_order():
    """A slab's pieces arrive by worker, not by row; the shard puts its keys
    back in row order, so equally near keys tie by global row as in one key
    set (it held row 3119 before row 119 when the later block's worker came
    first)."""
    from locus.distributed import _space

    x = np.array([[0.0, 0.0], [5.0, 5.0]], dtype=np.float32)
    later = (x, None, None, np.array([3119, 3120], dtype=np.int64))
    earlier = (x[:1] + 0.0, None, None, np.array([119], dtype=np.int64))
    shard = _space.build("cpu", 0, 2, later, earlier)
    np.testing.assert_array_equal(shard.row_index, [119, 3119, 3120])
    np.testing.assert_array_equal(shard.keys, [[0, 0], [0, 0], [5, 5]])
    _, _, idx, _ = _space._knn_rows(shard, np.zeros((1, 2), dtype=np.float32), 1)
    assert idx[0, 0] == 119


def test_region_cuts_keep_slabs_populated_and_at_least_two_bandwidths_wide():
    """Asked for more slabs than the data hold bandwidths, MeanShift by
    region makes fewer (each slab at least 2h wide: its halo never holds
    more keys than the slab owns by much), each with a sampled point."""
    from locus.distributed._regions import place_cuts

    rng = np.random.default_rng(2)
    sample = rng.uniform(0, 10, 5000).astype(np.float32).astype(np.float64)
    for regions, width in ((2, 0.0), (16, 0.0), (512, 8.0), (512, 2.0), (64, 100.0)):
        cuts = place_cuts(sample, regions, width)
        assert len(cuts) <= regions - 1
        edges = np.concatenate([[sample.min()], cuts, [sample.max()]])
        # One slab when the range holds fewer than two widths.
        assert len(cuts) == 0 or np.all(np.diff(edges) >= width), (regions, width, cuts)
        slab = np.searchsorted(cuts, sample, side="right")
        assert set(slab) == set(range(len(cuts) + 1))
    assert len(place_cuts(sample, 512, 2.0)) <= 4
    assert len(place_cuts(sample, 16, 0.0)) == 15
    assert len(place_cuts(sample, 64, 100.0)) == 0


def test_region_cuts_follow_the_work_within_half_a_share_of_points():
    """Given where the shifting work falls, the cuts split the work evenly
    (not the points), are values of sampled points, and move at most half a
    slab's share of points from the equal-population cut."""
    from locus.distributed._regions import place_cuts

    rng = np.random.default_rng(3)
    sample = rng.uniform(0, 100, 20000).astype(np.float32).astype(np.float64)
    # Work spread evenly over [40, 60]: its median, 50, is also the points'.
    # Over [0, 30] its median would be 15, but a cut may not leave more than
    # 75 % of the points on one side, so it stops at the 25 % quantile.
    where = rng.uniform(40, 60, 5000)
    cuts = place_cuts(sample, 2, 0.0, (where, np.ones_like(where)))
    assert abs(cuts[0] - 50) < 1.5 and cuts[0] in set(sample)
    where = rng.uniform(0, 30, 5000)
    cuts = place_cuts(sample, 2, 0.0, (where, np.ones_like(where)))
    q25 = np.quantile(sample, 0.25, method="inverted_cdf")
    assert cuts[0] == q25
    # Four slabs, work twice as dense on the left half: the cuts crowd
    # there, each within its band of points, increasing.
    where = np.concatenate([rng.uniform(0, 50, 8000), rng.uniform(50, 100, 4000)])
    cuts = place_cuts(sample, 4, 0.0, (where, np.ones_like(where)))
    plain = place_cuts(sample, 4, 0.0)
    assert len(cuts) == 3 and np.all(np.diff(cuts) > 0)
    assert np.all(cuts <= plain) and cuts[0] < plain[0] - 3
    work_share = [np.mean(where < c) for c in cuts]
    np.testing.assert_allclose(work_share, [0.25, 0.5, 0.75], atol=0.02)
    # No work recorded: the equal-population cuts.
    assert np.array_equal(place_cuts(sample, 4, 0.0, (np.zeros(0), np.zeros(0))), plain)


def test_pilot_work_falls_where_the_seeds_gather():
    """The pilot shifts seeds over the sample and records each step at the
    seed's coordinate with the sampled points within reach (plus one) as
    its work: with a stop threshold no step exceeds, one step a seed and
    exactly those counts; two blobs of as many points and seeds, the right
    one four times as dense: four fifths of the work on the right, so the
    work-balanced cut moves from the gap between the blobs into the right
    one (within the band of points it may move in)."""
    from locus.distributed._regions import pilot_work, place_cuts

    rng = np.random.default_rng(4)
    left = rng.normal([-6.0, 0.0], 1.0, size=(5000, 2))
    right = rng.normal([6.0, 0.0], 0.5, size=(5000, 2))
    sample = np.concatenate([left, right]).astype(np.float32)
    seeds = np.concatenate([left[:60], right[:60]]).astype(np.float32)
    where, work, seed = pilot_work(sample, seeds, 0, 1.0, "uniform", 1e6, 300)
    np.testing.assert_array_equal(seed, np.arange(len(seeds)))
    s64 = sample.astype(np.float64)
    within = [np.sum(np.sum((s64 - q) ** 2, axis=1) <= 1.0) for q in seeds.astype(np.float64)]
    np.testing.assert_array_equal(where, seeds[:, 0].astype(np.float64))
    np.testing.assert_array_equal(work, np.array(within, dtype=np.float64) + 1.0)
    right_share = np.sum(work[where > 0]) / np.sum(work)
    assert 0.7 < right_share < 0.9, right_share
    coord = s64[:, 0]
    cut = place_cuts(coord, 2, 2.0, (where, work))
    plain = place_cuts(coord, 2, 2.0)
    assert abs(plain[0]) < 4.0 and cut[0] > 4.0, (plain, cut)
    assert np.mean(coord >= cut[0]) >= 0.25
    # Shifted to their stops, seeds take several steps each.
    where, work, seed = pilot_work(sample, seeds, 0, 1.0, "uniform", 1e-6, 300)
    assert len(where) == len(work) == len(seed) > 2 * len(seeds) and np.all(work >= 1.0)
    # Recorded iteration by iteration: each seed's steps in order, and
    # each seed moves towards its blob's centre.
    for i in (0, 70):
        mine = where[seed == i]
        assert len(mine) >= 2 and abs(mine[-1] - (-6.0 if i < 60 else 6.0)) < abs(mine[0] - (-6.0 if i < 60 else 6.0)) + 1e-6


def test_the_replay_counts_rounds_and_cuts_move_to_cheaper_replays():
    """rounds_cost replays the pilot's steps on slabs: a seed works in its
    slab until it leaves it, then in the next round; the cost sums each
    round's busiest slab. Given the steps' seeds, place_cuts moves the
    work-balanced cut only to a cheaper replay."""
    from locus.distributed._regions import place_cuts, rounds_cost

    # Seed 0 walks 1 → 2 → 3 (work 1 each); seed 1 walks 6 → 5 → 4 (work
    # 2 each). One cut at 3.5: no crossing, one round, cost max(3, 6).
    where = np.array([1.0, 2.0, 3.0, 6.0, 5.0, 4.0])
    work = np.array([1.0, 1.0, 1.0, 2.0, 2.0, 2.0])
    seed = np.array([0, 0, 0, 1, 1, 1])
    assert rounds_cost(np.array([3.5]), where, work, seed) == 6.0
    # A cut at 2.5: seed 0's last step is in slab 1 in round 2, after
    # round 1's max(2, 6): 6 + 1.
    assert rounds_cost(np.array([2.5]), where, work, seed) == 7.0
    # Cut at 5.5: seed 1 starts in slab 1 (2), then slab 0 in round 2
    # (2 + 2); seed 0 all in slab 0 in round 1 (3): max(3, 2) + 4.
    assert rounds_cost(np.array([5.5]), where, work, seed) == 7.0
    # No cut: everything in one round on one slab.
    assert rounds_cost(np.zeros(0), where, work, seed) == 9.0

    rng = np.random.default_rng(5)
    sample = rng.uniform(0, 100, 4000)
    # Seeds of two basins walk to modes at 20 and 80; the right basin's
    # steps cost twice as much, so the balanced cut lies in it.
    starts = np.concatenate([rng.uniform(0, 50, 60), rng.uniform(50, 100, 60)])
    modes = np.where(starts < 50, 20.0, 80.0)
    steps = 12
    t = np.arange(steps) / (steps - 1)
    where = (starts[:, None] + (modes - starts)[:, None] * t[None, :]).ravel()
    work = np.repeat(np.where(starts < 50, 1.0, 2.0), steps)
    seed = np.repeat(np.arange(len(starts)), steps)
    balanced = place_cuts(sample, 2, 2.0, (where, work))
    refined = place_cuts(sample, 2, 2.0, (where, work, seed))
    assert 50 < balanced[0] < 80
    assert rounds_cost(refined, where, work, seed) <= rounds_cost(balanced, where, work, seed)
    assert refined[0] in set(sample)
    assert np.mean(sample < refined[0]) <= 0.75 + 1e-9
    # Three slabs: each cut stays 2h from its neighbours and the ends.
    cuts = place_cuts(sample, 3, 2.0, (where, work, seed))
    edges = np.concatenate([[sample.min()], cuts, [sample.max()]])
    assert len(cuts) == 2 and np.all(np.diff(edges) >= 2.0)
    assert rounds_cost(cuts, where, work, seed) <= rounds_cost(place_cuts(sample, 3, 2.0, (where, work)), where, work, seed)


def test_region_centring_in_f32_equals_the_f64_difference():
    """The region path centres points by an f32 subtraction; the shards and
    the single process round the f64 difference. Bit for bit the same, at
    any scale and far from the centre (where one operand is below 2⁻²⁹ of
    the other)."""
    from locus.distributed._regions import _centred

    rng = np.random.default_rng(5)
    for scale in (1.0, 1e-30, 1e4, 1e20):
        x = (rng.normal(size=(50_000, 3)) * rng.choice([1e-12, 1e-3, 1.0, 1e9], size=(50_000, 3)) * scale)
        x = x.astype(np.float32)
        c = (rng.normal(size=3) * scale).astype(np.float32).astype(np.float64)
        want = (x.astype(np.float64) - c).astype(np.float32)
        np.testing.assert_array_equal(_centred(x, c).view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("dask_input", [False, True], ids=["numpy", "dask"])
def test_key_sets_partitioned_by_space_route_queries_and_equal_the_single_node(client, dask_input, monkeypatch):
    """``partition="space"``: slabs along the widest coordinate; a compact
    kernel's query asks only the shards whose box is within reach, kNN the
    nearest box first and then those nearer than its k-th neighbour. Every
    op equals the single-node key set (and the row partition), ties and
    empty neighbourhoods included."""
    from locus.distributed import _space

    rng = np.random.default_rng(31)
    n = 6000
    x = (rng.normal(size=(n, 3)) * [6.0, 1.0, 1.0]).astype(np.float32)
    x[n // 2:n // 2 + 200] = x[:200]  # equal keys far apart in row order: ties by global index
    y = rng.normal(size=(n, 2)).astype(np.float32)
    lab = rng.integers(0, 4, n)
    q = np.concatenate([
        (rng.normal(size=(300, 3)) * [7.0, 1.2, 1.2]),
        x[:40] + 1e-3,
        [[100.0, 0.0, 0.0]],  # beyond every box: empty under a compact kernel
    ]).astype(np.float32)
    single = locus.Engine("cpu").prepare(x, y, lab)
    args = (x, y, lab)
    if dask_input:
        args = (da.from_array(x, chunks=(700, 3)), da.from_array(y, chunks=(700, 2)), da.from_array(lab, chunks=700))
    asked = []
    real = _space.routed

    def counting(sks, task, queries, routes, *a, what):
        asked.append(sum(len(r) for r in routes))
        return real(sks, task, queries, routes, *a, what=what)

    monkeypatch.setattr(_space, "routed", counting)
    ks = ld.ShardedKeySet(client, *args, backend="cpu", shards=4, partition="space")
    try:
        assert ks.n_shards == 4 and sum(ks.shard_rows) == n
        for kernel, h in (("uniform", 0.8), ("epanechnikov", 1.5), ("biweight", 0.5), ("gaussian", 0.7)):
            asked.clear()
            _close(ks.local_mean(q, bandwidth=h, kernel=kernel), single.local_mean(q, bandwidth=h, kernel=kernel))
            _close(ks.log_density(q, bandwidth=h, kernel=kernel), single.log_density(q, bandwidth=h, kernel=kernel))
            _close(ks.predict_proba(q, bandwidth=h, kernel=kernel), single.predict_proba(q, bandwidth=h, kernel=kernel))
            np.testing.assert_array_equal(ks.classify(q, bandwidth=h, kernel=kernel), single.classify(q, bandwidth=h, kernel=kernel))
            if kernel == "gaussian":
                assert not asked  # full support: every shard, by the row path's map
            else:
                # Routed: far fewer (query, shard) pairs than every query
                # to every shard.
                assert asked and max(asked) < 0.6 * len(q) * 4, (kernel, asked)
        assert np.isnan(ks.local_mean(q[-1:], bandwidth=0.8, kernel="uniform")).all()
        for k in (1, 7, 60):
            asked.clear()
            d_got, i_got = ks.knn(q, k)
            d_want, i_want = single.knn(q, k)
            np.testing.assert_array_equal(i_got, i_want)
            np.testing.assert_array_equal(d_got, d_want)
            assert sum(asked) < 0.6 * len(q) * 4, (k, asked)
        # Keys on one slab only: the others are never asked, k = N still works.
        d_all, i_all = ks.knn(q[:3], n)
        np.testing.assert_array_equal(i_all, single.knn(q[:3], n)[1])
    finally:
        ks.close()


def test_mean_shift_on_a_dask_array_with_given_seeds(client):
    x = _blobs(4000, seed=5)
    seeds = x[::97]
    want = locus.mean_shift(x, bandwidth=1.2, seeds=seeds, backend="cpu")
    got = ld.mean_shift(
        client, da.from_array(x, chunks=(1500, 2)), bandwidth=1.2, seeds=seeds, backend="cpu"
    )
    np.testing.assert_array_equal(got.labels, want.labels)
    np.testing.assert_allclose(got.cluster_centers, want.cluster_centers, atol=1.2e-4, rtol=0)


def test_product_kernels_shard_as_the_single_process(client, data, single, sharded):
    x, y, _, q = data
    k = locus.ProductKernel([(1, "uniform", 1.5), (2, "gaussian", 0.7)])
    _close(sharded.local_mean(q, kernel=k), single.local_mean(q, kernel=k))
    _close(sharded.log_density(q, kernel=k), single.log_density(q, kernel=k))
    with pytest.raises(ValueError, match="no bandwidth"):
        sharded.local_mean(q, bandwidth=1.0, kernel=k)
    # Joint MeanShift, points as a Dask array.
    pts = _blobs(3000, seed=9) * np.array([1.0, 10.0], dtype=np.float32)
    jk = locus.ProductKernel([(1, "uniform", 1.0), (1, "gaussian", 8.0)])
    want = locus.mean_shift(pts, kernel=jk, bin_seeding=True, backend="cpu")
    got = ld.mean_shift(client, da.from_array(pts, chunks=(1100, 2)), kernel=jk, backend="cpu")
    np.testing.assert_array_equal(got.labels, want.labels)
    np.testing.assert_allclose(got.cluster_centers, want.cluster_centers, atol=1e-3, rtol=0)


def test_a_released_shard_raises_instead_of_a_partial_result(client, data):
    x, y, _, q = data
    sharded = ld.ShardedKeySet(client, x, y, backend="cpu", shards=3)
    sharded.local_mean(q, bandwidth=0.5)
    client.cancel([sharded.shards[1]])
    with pytest.raises(ld.ShardLostError):
        sharded.local_mean(q, bandwidth=0.5)


@pytest.mark.parametrize("partition", ["rows", "space"])
def test_a_killed_worker_loses_its_shard_loudly(partition):
    # A cluster of its own: one of its workers is killed.
    with distributed.LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0"
    ) as cluster, distributed.Client(cluster) as c:
        rng = np.random.default_rng(0)
        x = rng.normal(size=(2000, 2)).astype(np.float32)
        q = x[:50]
        sharded = ld.ShardedKeySet(c, x, x[:, 0], backend="cpu", shards=2, partition=partition)
        victim = sharded.where()[1]
        pid = c.run(os.getpid, workers=[victim])[victim]
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 20
        while victim in c.nthreads() and time.monotonic() < deadline:
            time.sleep(0.05)
        # Scattered keys cannot be recomputed: the call must fail, not
        # return the means of the surviving shard alone.
        with pytest.raises(ld.ShardLostError):
            sharded.local_mean(q, bandwidth=0.5)


class _KillableCluster:
    """A scheduler in this process and worker processes of its own, without
    nannies: :meth:`kill` SIGKILLs a worker and starts a fresh process in
    its place, which joins while the test goes on with the others."""

    def __init__(self, n=4):
        self.cluster = distributed.LocalCluster(n_workers=0, processes=True, dashboard_address=":0")
        self.client = distributed.Client(self.cluster)
        self.procs = []
        for _ in range(n):
            self._start()
        self.client.wait_for_workers(n, timeout=90)

    def _start(self):
        cmd = [sys.executable, "-m", "distributed.cli.dask_worker", self.cluster.scheduler_address,
               "--nthreads", "1", "--no-nanny", "--no-dashboard"]
        self.procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def kill(self, worker):
        pid = self.client.run(os.getpid, workers=[worker])[worker]
        os.kill(pid, signal.SIGKILL)
        self._start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.client.close()
        self.cluster.close()
        for p in self.procs:
            p.kill()
            p.wait()


def _two_workers_without(c, gone):
    """Waits until the scheduler has dropped ``gone`` and the same two or
    more workers have been up for 0.3 s."""
    deadline = time.monotonic() + 90
    seen, since = None, time.monotonic()
    while True:
        now = set(c.nthreads())
        if now != seen:
            seen, since = now, time.monotonic()
        if gone not in now and len(now) >= 2 and time.monotonic() - since > 0.3:
            return
        assert time.monotonic() < deadline, f"no two workers up within 90 s: {now}"
        time.sleep(0.02)


def _placed(c, gone, *args, **kw):
    """A ShardedKeySet, placed once ``gone`` is dropped and two workers are
    up. (Placing on a worker that goes away meanwhile raises
    ShardLostError: then it is placed again.)"""
    for attempt in range(5):
        if gone is not None:
            _two_workers_without(c, gone)
        try:
            return ld.ShardedKeySet(c, *args, **kw)
        except ld.ShardLostError:
            if attempt == 4:
                raise


def _outcome(call, limit=60.0):
    """(the exception's type name, or "ok"/"hang", seconds): ``call`` run
    in a thread, abandoned after ``limit`` seconds."""
    box = {}

    def go():
        try:
            call()
            box["r"] = "ok"
        except Exception as e:  # noqa: BLE001 - the type is the outcome
            box["r"] = type(e).__name__
            box["e"] = e

    t = time.monotonic()
    th = threading.Thread(target=go, daemon=True)
    th.start()
    th.join(limit)
    return box.get("r", "hang"), time.monotonic() - t, box.get("e")


KILL_CALLS = {
    "local_mean": lambda s, q: s.local_mean(q, bandwidth=0.5),
    "knn": lambda s, q: s.knn(q, 3),
    "log_density": lambda s, q: s.log_density(q, bandwidth=0.5),
    "classify": lambda s, q: s.classify(q, bandwidth=0.5),
}


def test_every_call_right_after_a_worker_is_killed_raises_shard_lost():
    # A worker SIGKILLed just before a call: the scheduler learns it some
    # milliseconds later, so the call races the loss. 20 times in a row,
    # each op, each call must raise ShardLostError within seconds: never
    # hang (a broadcast of the queries used to spin on the dead worker),
    # never a raw Dask KeyError.
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, 2)).astype(np.float32)
    labels = (x[:, 0] > 0).astype(np.int64)
    q = x[:50]
    outcomes, worst, victim = collections.Counter(), 0.0, None
    with _KillableCluster() as kc:
        c = kc.client
        for run in range(20):
            sharded = _placed(c, victim, x, x[:, 0], labels, backend="cpu", shards=2)
            name = list(KILL_CALLS)[run % len(KILL_CALLS)]
            victim = sharded.where()[run % 2]
            kc.kill(victim)
            kind, seconds, err = _outcome(lambda: KILL_CALLS[name](sharded, q))
            outcomes[kind] += 1
            worst = max(worst, seconds)
            assert kind == "ShardLostError", f"run {run}, {name}: {kind} after {seconds:.1f} s: {err!r}"
            assert seconds < 15, f"run {run}, {name}: ShardLostError only after {seconds:.1f} s"
        print(f"kill then call: {dict(outcomes)}, slowest {worst:.2f} s")
        # The client and the cluster still answer.
        sharded = _placed(c, victim, x, x[:, 0], backend="cpu", shards=2)
        want = locus.Engine("cpu").prepare(x, x[:, 0]).local_mean(q, bandwidth=0.5)
        _close(sharded.local_mean(q, bandwidth=0.5), want)


def test_a_worker_killed_between_mean_shift_iterations_raises_shard_lost():
    x = _blobs(3000, seed=4)
    with _KillableCluster() as kc:
        c, victim = kc.client, None
        for run in range(5):
            if victim is not None:
                _two_workers_without(c, victim)
            killed = {}

            def progress(it, queried, moving):
                # Kill a worker holding a shard after the first exchange of
                # shifts (a round of the region path: the populations and
                # labels still need every shard).
                if "at" not in killed:
                    holders = {
                        w for k, ws in c.who_has().items()
                        if "locus-shard" in str(k) or "locus-region" in str(k) for w in ws
                    }
                    killed["worker"] = sorted(holders)[run % len(holders)]
                    kc.kill(killed["worker"])
                    killed["at"] = time.monotonic()

            kind, _, err = _outcome(
                lambda: ld.mean_shift(c, x, bandwidth=1.0, backend="cpu", shards=2, progress=progress)
            )
            assert "at" in killed, "progress was never called: nothing was killed"
            victim = killed["worker"]
            seconds = time.monotonic() - killed["at"]
            assert kind == "ShardLostError", f"run {run}: {kind}: {err!r}"
            assert "mean_shift" in str(err)
            assert seconds < 15, f"run {run}: ShardLostError only after {seconds:.1f} s"


# ---------------------------------------------------------------------------
# Hostile inputs: the error type (and parameter) of the single-node API,
# raised on the driver; never a Dask traceback, a hang or a wrong answer.

_X = np.random.default_rng(11).normal(size=(20, 2)).astype(np.float32)


def _with(a, row, col, v):
    a = np.array(a, dtype=np.float64)
    a[(row, col) if a.ndim == 2 else row] = v
    return a


def _unknown_chunks(x, keep=-100.0):
    xd = da.from_array(x, chunks=(7, x.shape[1]))
    return xd[xd[:, 0] > keep]


KEYSET_BAD = {
    "empty keys": (lambda: (np.zeros((0, 2)),), {}, ValueError, "keys is empty"),
    "keys without columns": (lambda: (np.zeros((20, 0)),), {}, ValueError, r"keys is empty \(20×0\)"),
    "1-D keys": (lambda: (np.zeros(5),), {}, ValueError, "keys must be 2-D"),
    "NaN key, global row": (lambda: (_with(_X, 13, 1, np.nan),), {}, ValueError, "keys .*NaN.* row 13, column 1"),
    "inf key": (lambda: (_with(_X, 3, 0, np.inf),), {}, ValueError, "keys .*inf.* row 3"),
    "f64 key out of f32 range": (lambda: (_with(_X, 0, 0, 1e300),), {}, ValueError, "keys .*inf"),
    "string keys": (lambda: (np.array([["a", "b"]] * 4),), {}, TypeError, "keys must hold real numbers"),
    "NaN value": (lambda: (_X, _with(_X[:, 0], 13, 0, np.nan)), {}, ValueError, "values .*NaN.* row 13"),
    "values rows": (lambda: (_X, np.ones(19)), {}, ValueError, "values has 19 rows but there are 20 keys"),
    "values 3-D": (lambda: (_X, np.ones((20, 1, 1))), {}, ValueError, "values must be 1-D or 2-D"),
    "string values": (lambda: (_X, np.array(["a"] * 20)), {}, TypeError, "values must hold real numbers"),
    "labels rows": (lambda: (_X, None, np.ones(21)), {}, ValueError, "labels has 21 entries but there are 20 keys"),
    "labels 2-D": (lambda: (_X, None, np.ones((20, 1))), {}, ValueError, "labels must be 1-D"),
    "NaN label": (lambda: (_X, None, _with(np.ones(20), 4, 0, np.nan)), {}, ValueError, "labels must be finite"),
    "shards 0": (lambda: (_X,), {"shards": 0}, ValueError, "shards must be at least 1"),
    "shards negative": (lambda: (_X,), {"shards": -1}, ValueError, "shards"),
    "shards float": (lambda: (_X,), {"shards": 2.0}, TypeError, "shards must be an integer"),
    "shards str": (lambda: (_X,), {"shards": "2"}, TypeError, "shards must be an integer"),
    "shards > N": (lambda: (_X,), {"shards": 21}, ValueError, "shards=21 but keys has 20 rows"),
    "backend": (lambda: (_X,), {"backend": "tpu"}, ValueError, "backend"),
    "dask empty keys": (lambda: (da.zeros((0, 2), chunks=(1, 2)),), {}, ValueError, "keys is empty"),
    "dask 1-D keys": (lambda: (da.zeros(5, chunks=2),), {}, ValueError, "keys must be 2-D"),
    "dask string keys": (lambda: (da.from_array(np.array([["a", "b"]] * 4), chunks=(2, 2)),), {}, TypeError, "keys must hold real numbers"),
    "dask NaN key, global row": (lambda: (da.from_array(_with(_X, 15, 0, np.nan), chunks=(7, 2)),), {}, ValueError, "keys .*NaN.* row 15, column 0"),
    "dask NaN value, global row": (lambda: (da.from_array(_X, chunks=(7, 2)), da.from_array(_with(_X[:, 0], 13, 0, np.nan), chunks=5)), {}, ValueError, "values .*NaN.* row 13"),
    "dask values rows": (lambda: (da.from_array(_X, chunks=(7, 2)), da.ones(19, chunks=5)), {}, ValueError, "values has 19 rows but there are 20 keys"),
    "dask labels rows": (lambda: (da.from_array(_X, chunks=(7, 2)), None, da.ones(19, chunks=5)), {}, ValueError, "labels has 19 entries"),
    "dask NaN label": (lambda: (da.from_array(_X, chunks=(7, 2)), None, da.from_array(_with(np.ones(20), 13, 0, np.nan), chunks=5)), {}, ValueError, "labels must be finite"),
    "dask shards > N": (lambda: (da.from_array(_X, chunks=(5, 2)),), {"shards": 21}, ValueError, "shards=21 but keys has 20 rows"),
    "dask unknown chunks, values rows": (lambda: (_unknown_chunks(_X), np.ones(19)), {}, ValueError, "values has 19 rows but there are 20 keys"),
}


@pytest.mark.parametrize("partition", ["rows", "space"])
@pytest.mark.parametrize("case", list(KEYSET_BAD), ids=list(KEYSET_BAD))
def test_sharded_key_set_refuses_bad_data_as_the_single_node_key_set(client, case, partition):
    args, kw, exc, match = KEYSET_BAD[case]
    args = args()
    if not case.startswith(("dask", "shards", "backend")) and partition == "rows":
        with pytest.raises(exc):  # the single-node key set refuses it alike
            locus.Engine("cpu").prepare(*args)
    with pytest.raises(exc, match=match):
        ld.ShardedKeySet(client, *args, **{"backend": "cpu", "partition": partition, **kw})


def test_partition_must_be_rows_or_space(client):
    with pytest.raises(ValueError, match='partition must be "rows" or "space"'):
        ld.ShardedKeySet(client, _X, partition="cells")


@pytest.fixture(scope="module", params=["rows", "space"])
def small(client, request):
    return ld.ShardedKeySet(
        client, _X, _X[:, 0], np.arange(20) % 3 - 1, backend="cpu", shards=3, partition=request.param
    )


QUERY_BAD = {
    "NaN query": (lambda s: s.local_mean(_with(_X[:2], 1, 1, np.nan), bandwidth=1.0), ValueError, r"queries .*NaN.* row 1, column 1"),
    "inf query knn": (lambda s: s.knn(_with(_X[:2], 0, 0, -np.inf), 2), ValueError, "queries .*inf"),
    "NaN query classify": (lambda s: s.classify(_with(_X[:2], 0, 0, np.nan), bandwidth=1.0), ValueError, "queries .*NaN"),
    "empty queries": (lambda s: s.log_density(np.zeros((0, 2)), bandwidth=1.0), ValueError, "queries is empty"),
    "1-D queries": (lambda s: s.density(np.zeros(2), bandwidth=1.0), ValueError, "queries must be 2-D"),
    "query dimension": (lambda s: s.predict_proba(np.zeros((2, 3)), bandwidth=1.0), ValueError, "queries have dimension 3 but the keys have dimension 2"),
    "k 0": (lambda s: s.knn(_X[:2], 0), ValueError, "k must be in 1..=20"),
    "k > N": (lambda s: s.knn(_X[:2], 21), ValueError, "k must be in 1..=20"),
    "k float": (lambda s: s.knn(_X[:2], 2.0), TypeError, "k must be an integer"),
    "bandwidth 0": (lambda s: s.local_mean(_X[:2], bandwidth=0.0), ValueError, "bandwidth must be finite"),
    "bandwidth negative": (lambda s: s.row_states(_X[:2], bandwidth=-1.0), ValueError, "bandwidth must be finite"),
    "bandwidth NaN": (lambda s: s.log_density(_X[:2], bandwidth=float("nan")), ValueError, "bandwidth must be finite"),
    "bandwidth inf": (lambda s: s.classify(_X[:2], bandwidth=float("inf")), ValueError, "bandwidth must be finite"),
    "bandwidth str": (lambda s: s.local_mean(_X[:2], bandwidth="1"), TypeError, "bandwidth must be a number"),
    "bandwidth None": (lambda s: s.density(_X[:2], bandwidth=None), TypeError, "bandwidth must be a number"),
    "unknown kernel": (lambda s: s.local_mean(_X[:2], bandwidth=1.0, kernel="box"), ValueError, "unknown kernel profile"),
    "kernel None": (lambda s: s.log_density(_X[:2], bandwidth=1.0, kernel=None), TypeError, "kernel"),
}


@pytest.mark.parametrize("case", list(QUERY_BAD), ids=list(QUERY_BAD))
def test_sharded_key_set_refuses_bad_queries_as_the_single_node_key_set(small, case):
    call, exc, match = QUERY_BAD[case]
    single = locus.Engine("cpu").prepare(_X, _X[:, 0], np.arange(20) % 3 - 1)
    with pytest.raises(exc):
        call(single)
    with pytest.raises(exc, match=match):
        call(small)


def test_awkward_but_valid_key_sets_equal_the_single_node_key_set(client):
    q = _X[:4] + 0.1
    xi = (np.arange(40).reshape(20, 2) % 7).astype(np.int64)  # ints: converted as the single node
    neg = np.arange(20) % 3 - 1  # negative labels
    single = locus.Engine("cpu").prepare(xi, xi[:, 0].astype(np.float64), neg)
    cases = [
        ld.ShardedKeySet(client, xi, xi[:, 0].astype(np.float64), neg, backend="cpu", shards=3),
        ld.ShardedKeySet(client, xi, xi[:, 0], neg, backend="cpu", shards=20),  # one key per shard
        ld.ShardedKeySet(  # unknown chunk sizes, cut into 3 shards on the workers
            client, _unknown_chunks(xi), da.from_array(xi[:, 0], chunks=6), neg, backend="cpu", shards=3
        ),
    ]
    assert cases[2].shard_rows == [7, 7, 6]
    for s in cases:
        _close(s.local_mean(q, bandwidth=2.0), single.local_mean(q, bandwidth=2.0))
        # (probabilities, not classify: on this grid two classes tie up to rounding)
        _close(s.predict_proba(q, bandwidth=2.0), single.predict_proba(q, bandwidth=2.0))
        for k in (1, 8, 20):  # 8 > a shard's rows, 20 = N
            gd, gi = s.knn(q, k)
            wd, wi = single.knn(q, k)
            np.testing.assert_array_equal(gi, wi)
            np.testing.assert_array_equal(gd, wd)
    # An empty chunk in the middle of a Dask array is no empty shard.
    xd = da.concatenate([da.from_array(xi[:10], chunks=(10, 2)), da.zeros((0, 2), chunks=(0, 2)), da.from_array(xi[10:], chunks=(10, 2))])
    assert ld.ShardedKeySet(client, xd, backend="cpu").n_keys == 20
    # Fewer keys than workers, default shards.
    assert ld.ShardedKeySet(client, xi[:1], backend="cpu").knn(q, 1).indices.tolist() == [[0]] * 4


def test_calls_after_close_raise_and_the_client_survives(client):
    s = ld.ShardedKeySet(client, _X, _X[:, 0], backend="cpu", shards=3)
    s.local_mean(_X[:2], bandwidth=1.0)
    s.close()
    s.close()
    for call in (lambda: s.local_mean(_X[:2], bandwidth=1.0), lambda: s.knn(_X[:2], 1), lambda: s.log_density(_X[:2], bandwidth=1.0)):
        with pytest.raises(ld.ShardLostError, match="closed"):
            call()
    # The client still works (closing used to break its connection).
    assert ld.ShardedKeySet(client, _X, backend="cpu").knn(_X[:1], 1).indices.tolist() == [[0]]


def test_a_closed_client_is_refused():
    with distributed.Client(
        n_workers=1, processes=False, threads_per_worker=1, dashboard_address=":0"
    ) as c:
        s = ld.ShardedKeySet(c, _X, _X[:, 0], backend="cpu")
    with pytest.raises(ld.ShardLostError, match="client is closed"):
        s.local_mean(_X[:2], bandwidth=1.0)
    with pytest.raises(ValueError, match="client"):
        ld.ShardedKeySet(c, _X, backend="cpu")
    with pytest.raises(ValueError, match="client"):
        ld.mean_shift(c, _X, bandwidth=1.0, backend="cpu")


MS_BAD = {
    "empty X": ({"X": np.zeros((0, 2))}, ValueError, "X is empty"),
    "X without columns": ({"X": np.zeros((20, 0))}, ValueError, r"X is empty \(20×0\)"),
    "1-D X": ({"X": np.zeros(5)}, ValueError, "X must be 2-D"),
    "NaN in X": ({"X": _with(_X, 13, 1, np.nan)}, ValueError, "X .*NaN.* row 13, column 1"),
    "string X": ({"X": np.array([["a", "b"]] * 3)}, TypeError, "X must hold real numbers"),
    "bandwidth 0": ({"bandwidth": 0.0}, ValueError, "bandwidth must be finite"),
    "bandwidth NaN": ({"bandwidth": float("nan")}, ValueError, "bandwidth must be finite"),
    "bandwidth inf": ({"bandwidth": float("inf")}, ValueError, "bandwidth must be finite"),
    "bandwidth tiny": ({"bandwidth": 1e-40}, ValueError, "bandwidth must be finite"),
    "bandwidth str": ({"bandwidth": "wide"}, ValueError, "bandwidth must be a number"),
    "unknown kernel": ({"kernel": "box"}, ValueError, "unknown kernel profile"),
    "seeds 1-D": ({"seeds": np.zeros(2)}, ValueError, "seeds must be 2-D"),
    "seeds dimension": ({"seeds": np.zeros((2, 3))}, ValueError, "seeds have dimension 3 but the points have dimension 2"),
    "seeds empty": ({"seeds": np.zeros((0, 2))}, ValueError, "seeds is empty"),
    "NaN seed": ({"seeds": np.array([[0.0, np.nan]])}, ValueError, "seeds .*NaN"),
    "max_iter 0": ({"max_iter": 0}, ValueError, "max_iter must be at least 1"),
    "max_iter float": ({"max_iter": 1.5}, TypeError, "max_iter must be an integer"),
    "tol negative": ({"tol": -1.0}, ValueError, "tol must be finite and > 0"),
    "tol NaN": ({"tol": float("nan")}, ValueError, "tol must be finite and > 0"),
    "tol None": ({"tol": None}, TypeError, "tol must be a number"),
    "shards 0": ({"shards": 0}, ValueError, "shards must be at least 1"),
    "shards negative": ({"shards": -1}, ValueError, "shards"),
    "shards float": ({"shards": 2.0}, TypeError, "shards must be an integer"),
    "shards > N": ({"shards": 21}, ValueError, "shards=21 but X has 20 rows"),
    "progress not callable": ({"progress": 3}, TypeError, "progress must be callable"),
    "dask 1-D X": ({"X": da.zeros(5, chunks=2)}, ValueError, "X must be 2-D"),
    "dask empty X": ({"X": _unknown_chunks(_X, keep=100.0)}, ValueError, "X is empty"),
    "dask inf in X, global row": ({"X": da.from_array(_with(_X, 13, 1, np.inf), chunks=(7, 2))}, ValueError, "X .*inf.* row 13, column 1"),
    "dask shards > N": ({"X": da.from_array(_X, chunks=(5, 2)), "shards": 21}, ValueError, "shards=21 but X has 20 rows"),
}


@pytest.mark.parametrize("case", list(MS_BAD), ids=list(MS_BAD))
def test_mean_shift_refuses_bad_input(client, case):
    kw, exc, match = MS_BAD[case]
    kw = {"X": _X, "bandwidth": 1.0, "backend": "cpu", **kw}
    if not case.startswith(("dask", "shards", "progress", "bandwidth str")):
        single = {k: v for k, v in kw.items()}
        with pytest.raises(exc):  # the single-node mean_shift refuses it alike
            locus.mean_shift(single.pop("X"), **single)
    with pytest.raises(exc, match=match):
        ld.mean_shift(client, kw.pop("X"), **kw)


def test_mean_shift_of_awkward_but_valid_input(client):
    xi = np.rint(_blobs(300, seed=9)).astype(np.int64)  # ints: converted as the single node
    want = locus.mean_shift(xi, bandwidth=3.0, bin_seeding=True, backend="cpu")
    for X, kw in [
        (xi, {}),
        (_unknown_chunks(xi), {"shards": 3}),  # unknown chunk sizes
        (xi, {"shards": 7}),
    ]:
        got = ld.mean_shift(client, X, bandwidth=3.0, backend="cpu", **kw)
        np.testing.assert_array_equal(got.labels, want.labels)
        np.testing.assert_allclose(got.cluster_centers, want.cluster_centers, atol=3e-4, rtol=0)
    one = ld.mean_shift(client, _X[:1], bandwidth=1.0, backend="cpu")  # fewer points than workers
    assert one.labels.tolist() == [0]


def test_mean_shift_estimator_on_numpy_and_dask(client):
    """``locus.distributed.MeanShift``: scikit-learn's face over the
    cluster, the single process's partition (bins of side h·(1 + 2⁻²⁰) for
    the flat kernel, as its closed ball), NumPy or Dask in, ``predict`` on
    either."""
    from sklearn.base import clone

    from locus._cluster import _CLOSED

    x = _blobs(3000, seed=11)
    h = 1.0
    want = locus.mean_shift(x, bandwidth=h * _CLOSED, bin_seeding=True, max_iter=301, backend="cpu")
    for X in (x, da.from_array(x, chunks=(700, 2))):
        ms = ld.MeanShift(client=client, bandwidth=h, backend="cpu", shards=3).fit(X)
        np.testing.assert_array_equal(ms.labels_, want.labels)
        np.testing.assert_allclose(ms.cluster_centers_, want.cluster_centers, atol=1e-4, rtol=0)
        assert ms.n_iter_ == want.n_iter - 1 and ms.bandwidth_ == h and ms.n_features_in_ == 2
        np.testing.assert_array_equal(ms.predict(x[:50]), want.labels[:50])
        lazy = ms.predict(da.from_array(x[:50], chunks=(20, 2)))
        np.testing.assert_array_equal(lazy.compute(), want.labels[:50])
    # The single-process estimator agrees on these blobs.
    single = locus.MeanShift(bandwidth=h, bin_seeding=True, backend="cpu").fit(x)
    np.testing.assert_array_equal(ms.labels_, single.labels_)
    # clone shares the client; a Dask array chunked across its columns
    # is labelled by whole rows.
    twin = clone(ms)
    assert twin.client is client and twin.get_params()["bandwidth"] == h
    split = da.from_array(x[:50], chunks=(20, 1))
    np.testing.assert_array_equal(ms.predict(split).compute(), want.labels[:50])
    # A gaussian kernel, the default client, an estimated bandwidth.
    est = ld.MeanShift(kernel="gaussian", backend="cpu")
    assert clone(est).get_params()["kernel"] == "gaussian"
    est.fit(x)
    assert est.bandwidth_ > 0 and est.labels_.shape == (3000,)
    with pytest.raises(ValueError):
        ld.MeanShift(client=client, bandwidth=-1.0, backend="cpu").fit(x)
    with pytest.raises(ValueError):
        ld.MeanShift(client=client, bandwidth=1.0, backend="cpu").fit(x).predict(np.zeros((2, 3)))


def _worker_adapter() -> tuple:
    import os

    from locus._engine import engine_for

    return os.environ.get("LOCUS_ADAPTER"), engine_for("gpu").info()["name"]


def test_two_gpu_workers_each_open_the_adapter_they_are_given(gpu):
    """Workers with GPUs: each worker opens the adapter ``assign_adapters``
    gives it (by index or by name, as ``LOCUS_ADAPTER`` takes it), the
    sharded ops run on the workers' GPU engines (lavapipe here) with the
    single process's results, and an adapter that does not exist is a
    typed error from the worker, not a hang or a CPU run."""
    name = gpu.info()["name"]
    x = _blobs(3000, seed=8)
    want = locus.mean_shift(x, bandwidth=1.0, bin_seeding=True, backend="cpu")
    q = x[::37] + 0.1
    cluster = distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0")
    with cluster, distributed.Client(cluster) as c:
        plan = ld.assign_adapters(c, [0, name])
        assert sorted(plan.values()) == sorted(["0", name])
        opened = c.run(_worker_adapter)
        assert sorted(opened.values()) == sorted([("0", name), (name, name)])
        # By region (uniform kernel) on the workers' GPU key sets.
        got = ld.mean_shift(c, x, bandwidth=1.0, backend="gpu")
        np.testing.assert_array_equal(got.labels, want.labels)
        np.testing.assert_allclose(got.cluster_centers, want.cluster_centers, atol=1e-4, rtol=0)
        # Row shards (a kernel of full support), against the single GPU engine.
        ks = ld.ShardedKeySet(c, x, x, backend="gpu", shards=2)
        try:
            _close(ks.local_mean(q, bandwidth=0.7, kernel="gaussian"),
                   gpu.prepare(x, x).local_mean(q, bandwidth=0.7, kernel="gaussian"))
        finally:
            ks.close()
    cluster = distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0")
    with cluster, distributed.Client(cluster) as c:
        ld.assign_adapters(c, ["no-such-adapter-anywhere", name])
        with pytest.raises(locus.DeviceError, match="no-such-adapter-anywhere"):
            ld.mean_shift(c, x, bandwidth=1.0, backend="gpu")
