"""locus.distributed on a local Dask cluster of two worker processes: every
sharded op equals the single-process op on the same data."""

import os
import signal
import subprocess
import sys
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
        gi, gd = sharded.knn(qg, k)
        wi, wd = single.knn(qg, k)
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
    gi, gd = sharded.knn(q, 5)
    wi, wd = single.knn(q, 5)
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
    ],
    ids=["binned", "min_bin_freq", "epanechnikov", "all"],
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
        backend="cpu",
    )
    got = ld.mean_shift(client, x, bandwidth=h, backend="cpu", **kw)
    np.testing.assert_array_equal(got.labels, want.labels)
    assert got.cluster_centers.shape == want.cluster_centers.shape
    np.testing.assert_allclose(got.cluster_centers, want.cluster_centers, atol=1e-4 * h, rtol=0)
    np.testing.assert_array_equal(got.populations, want.populations)
    assert (got.n_iter, got.converged, got.bandwidth) == (want.n_iter, want.converged, want.bandwidth)


def test_mean_shift_on_a_dask_array_with_given_seeds(client):
    x = _blobs(4000, seed=5)
    seeds = x[::97]
    want = locus.mean_shift(x, bandwidth=1.2, seeds=seeds, backend="cpu")
    got = ld.mean_shift(
        client, da.from_array(x, chunks=(1500, 2)), bandwidth=1.2, seeds=seeds, backend="cpu"
    )
    np.testing.assert_array_equal(got.labels, want.labels)
    np.testing.assert_allclose(got.cluster_centers, want.cluster_centers, atol=1.2e-4, rtol=0)


def test_a_released_shard_raises_instead_of_a_partial_result(client, data):
    x, y, _, q = data
    sharded = ld.ShardedKeySet(client, x, y, backend="cpu", shards=3)
    sharded.local_mean(q, bandwidth=0.5)
    client.cancel([sharded.shards[1]])
    with pytest.raises(ld.ShardLostError):
        sharded.local_mean(q, bandwidth=0.5)


def test_a_killed_worker_loses_its_shard_loudly():
    # A cluster of its own: one of its workers is killed.
    with distributed.LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0"
    ) as cluster, distributed.Client(cluster) as c:
        rng = np.random.default_rng(0)
        x = rng.normal(size=(2000, 2)).astype(np.float32)
        q = x[:50]
        sharded = ld.ShardedKeySet(c, x, x[:, 0], backend="cpu", shards=2)
        victim = sharded.where()[1]
        pid = c.run(os.getpid, workers=[victim])[victim]
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 20
        while victim in c.scheduler_info()["workers"] and time.monotonic() < deadline:
            time.sleep(0.05)
        # Scattered keys cannot be recomputed: the call must fail, not
        # return the means of the surviving shard alone.
        with pytest.raises(ld.ShardLostError):
            sharded.local_mean(q, bandwidth=0.5)
