"""``n_jobs`` and ``Engine(threads=...)``: the CPU work on a pool of that
many threads of the engine's own, with the same results."""

import os
import sys

import numpy as np
import pytest

import locus
from locus._compat import cpu_count, threads_for_n_jobs
from locus._engine import _engines, engine_for


def _pool_threads():
    """The ids of this process's threads named as engine pools name theirs."""
    ids = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().startswith("locus-cpu-"):
                    ids.add(tid)
        except OSError:  # the thread ended meanwhile
            pass
    return ids


def test_an_engine_has_the_threads_it_was_given():
    assert locus.Engine("cpu", threads=1).threads == 1
    assert locus.Engine("cpu", threads=3).threads == 3
    assert locus.Engine("cpu", threads=2).info()["threads"] == 2
    assert locus.Engine("cpu").threads >= 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts threads in /proc")
def test_the_pool_starts_its_threads_once_with_the_engine(rng):
    before = _pool_threads()
    engine = locus.Engine("cpu", threads=4)
    started = _pool_threads() - before
    assert len(started) == 4
    x = rng.normal(size=(500, 3)).astype(np.float32)
    for _ in range(3):
        locus.local_mean(x, x, bandwidth=0.5, backend=engine)
    assert _pool_threads() - before == started


def test_bad_thread_counts_are_refused():
    with pytest.raises(locus.InputError, match="threads"):
        locus.Engine("cpu", threads=-1)
    with pytest.raises(locus.InputError, match="threads"):
        locus.Engine("cpu", threads=0)
    with pytest.raises(TypeError, match="threads"):
        locus.Engine("cpu", threads="2")
    with pytest.raises(locus.InputError, match="threads"):
        locus.Engine("cpu", threads=10**7)


def test_results_are_the_same_on_any_number_of_threads(rng):
    # Enough queries that no op splits the keys across threads.
    q = rng.normal(size=(2000, 3)).astype(np.float32)
    x = rng.normal(size=(3000, 3)).astype(np.float32)
    y = rng.normal(size=3000).astype(np.float32)
    one, two = locus.Engine("cpu", threads=1), locus.Engine("cpu", threads=2)
    for f in (
        lambda e: locus.local_mean(q, x, y, bandwidth=0.3, backend=e),
        lambda e: locus.knn(q, x, 5, backend=e).distances,
        lambda e: locus.log_density(q, x, bandwidth=0.3, backend=e),
        lambda e: e.prepare(x, y).local_mean(q, bandwidth=0.3),
    ):
        np.testing.assert_array_equal(f(one), f(two))


def test_n_jobs_counts_as_scikit_learn_and_joblib_do():
    n = cpu_count()
    assert threads_for_n_jobs(None) is None
    assert threads_for_n_jobs(-1) is None
    assert threads_for_n_jobs(3) == 3
    assert threads_for_n_jobs(np.int64(2)) == 2
    assert threads_for_n_jobs(-2) == max(n - 1, 1)
    assert threads_for_n_jobs(-1000) == 1
    for bad in (0, 1.5, True, "2"):
        with pytest.raises(locus.InputError, match="n_jobs"):
            threads_for_n_jobs(bad)


def test_estimators_run_on_an_engine_of_their_n_jobs(rng):
    X = rng.normal(size=(400, 3))
    y = X[:, 0] + 0.1 * rng.normal(size=400)
    base = locus.KNeighborsRegressor(n_neighbors=5, backend="cpu").fit(X, y).predict(X[:50])
    for n_jobs in (1, 5):
        reg = locus.KNeighborsRegressor(n_neighbors=5, n_jobs=n_jobs, backend="cpu").fit(X, y)
        assert engine_for("cpu", n_jobs).threads == n_jobs
        assert ("cpu", n_jobs) in _engines
        np.testing.assert_array_equal(reg.predict(X[:50]), base)
    # One engine per thread count, shared by every estimator that asks.
    assert engine_for("cpu", 5) is engine_for("cpu", 5)
    centres = locus.MeanShift(bandwidth=1.0, backend="cpu").fit(X).cluster_centers_
    ms = locus.MeanShift(bandwidth=1.0, n_jobs=6, backend="cpu").fit(X)
    assert engine_for("cpu", 6).threads == 6
    np.testing.assert_allclose(ms.cluster_centers_, centres, rtol=0, atol=1e-6)
    dist, _ = locus.NearestNeighbors(n_neighbors=3, n_jobs=-1, backend="cpu").fit(X).kneighbors(X[:5])
    assert dist.shape == (5, 3)
    with pytest.raises(locus.InputError, match="n_jobs"):
        locus.KNeighborsClassifier(n_jobs=0, backend="cpu").fit(X, y > 0)
