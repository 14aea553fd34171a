"""The GIL is released during compute, and key sets serve a thread pool."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from reference import assert_close, local_mean

import locus


def _long_call_args(rng):
    # Sized so one call takes a good fraction of a second on two cores.
    q = rng.normal(size=(3000, 8)).astype(np.float32)
    x = rng.normal(size=(20000, 8)).astype(np.float32)
    return q, x


def test_python_runs_while_a_call_computes(rng):
    q, x = _long_call_args(rng)
    engine = locus.Engine("cpu")
    done = threading.Event()
    span = {}

    def work():
        span["start"] = time.perf_counter()
        locus.local_mean(q, x, bandwidth=1.0, backend=engine)
        span["end"] = time.perf_counter()
        done.set()

    t = threading.Thread(target=work)
    ticks = []
    t.start()
    while not done.is_set():
        ticks.append(time.perf_counter())
    t.join()
    inside = [s for s in ticks if span["start"] < s < span["end"]]
    duration = span["end"] - span["start"]
    assert duration > 0.05, "the call was too short to tell"
    # Holding the GIL, the loop above could tick only at the 5 ms switch
    # points before the call began; released, it ticks all the way through.
    assert len(inside) > 1000, (len(inside), duration)
    assert inside[-1] - inside[0] > 0.8 * duration


def test_two_compute_threads_overlap(rng):
    q, x = _long_call_args(rng)
    engine = locus.Engine("cpu")
    barrier = threading.Barrier(2)
    spans = [None, None]
    results = [None, None]
    in_call = [threading.Event(), threading.Event()]

    def work(i):
        barrier.wait()
        t0 = time.perf_counter()
        in_call[i].set()
        results[i] = locus.local_mean(q[i::2], x, bandwidth=1.0, backend=engine)
        spans[i] = (t0, time.perf_counter())

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (a0, a1), (b0, b1) = spans
    assert max(a0, b0) < min(a1, b1), "the two calls did not run at the same time"
    overlap = min(a1, b1) - max(a0, b0)
    assert overlap > 0.5 * min(a1 - a0, b1 - b0)
    np.testing.assert_array_equal(results[0], locus.local_mean(q[0::2], x, bandwidth=1.0, backend=engine))


def test_keyset_methods_agree_with_the_functions(rng):
    x = rng.normal(size=(200, 3)).astype(np.float32)
    y = rng.normal(size=(200, 2)).astype(np.float32)
    labels = np.where(x[:, 0] > 0, "right", "left")
    q = rng.normal(size=(16, 3)).astype(np.float32)
    ks = locus.Engine("cpu").prepare(x, y, labels)
    assert (ks.n_keys, ks.dim) == (200, 3) and ks.resident_bytes > 0
    assert list(ks.classes) == ["left", "right"]
    assert_close(ks.local_mean(q, bandwidth=0.5, kernel="epanechnikov"),
                 local_mean(q, x, y, 0.5, "epanechnikov"))
    np.testing.assert_allclose(
        ks.log_density(q, bandwidth=0.5), locus.log_density(q, x, bandwidth=0.5, backend="cpu"), rtol=1e-5
    )
    np.testing.assert_allclose(ks.density(q, bandwidth=0.5), np.exp(ks.log_density(q, bandwidth=0.5)))
    one_hot = np.stack([labels == "left", labels == "right"], 1).astype(np.float32)
    proba = ks.predict_proba(q, bandwidth=0.5)
    assert_close(proba, local_mean(q, x, one_hot, 0.5, "gaussian"))
    np.testing.assert_array_equal(ks.classify(q, bandwidth=0.5), ks.classes[np.argmax(proba, 1)])
    # an empty neighbourhood gets the nearest key's label
    far = np.array([[100.0, 0.0, 0.0]], np.float32)
    assert ks.classify(far, bandwidth=0.5, kernel="uniform")[0] == labels[np.argmax(x[:, 0])]
    dist, idx = ks.knn(q, 4)
    dist2, idx2 = locus.knn(q, x, 4, backend="cpu")
    np.testing.assert_array_equal(idx, idx2)
    m, s, u = ks.row_states(q, bandwidth=0.5)
    np.testing.assert_allclose(u / s[:, None], ks.local_mean(q, bandwidth=0.5), rtol=1e-5)
    assert set(ks.stats()) == {"direct", "batches", "batched_requests", "largest_batch", "retried_alone"}
    assert ks.local_mean(q, bandwidth=0.5).shape == (16, 2)
    vec = locus.Engine("cpu").prepare(x, y[:, 0])
    assert vec.local_mean(q, bandwidth=0.5).shape == (16,)


def test_keyset_from_a_thread_pool(rng):
    x = rng.normal(size=(5000, 4)).astype(np.float32)
    y = rng.normal(size=(5000, 3)).astype(np.float32)
    ks = locus.Engine("cpu").prepare(x, y, labels=(x[:, 0] > 0).astype(int))
    queries = [rng.normal(size=(16, 4)).astype(np.float32) for _ in range(64)]
    alone = [ks.local_mean(q, bandwidth=0.4) for q in queries]
    alone_cls = [ks.classify(q, bandwidth=0.4) for q in queries]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda q: ks.local_mean(q, bandwidth=0.4), queries))
        together_cls = list(pool.map(lambda q: ks.classify(q, bandwidth=0.4), queries))
        knns = list(pool.map(lambda q: ks.knn(q, 3).indices, queries))
    for a, b in zip(alone, together):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    for a, b in zip(alone_cls, together_cls):
        np.testing.assert_array_equal(a, b)
    for q, k in zip(queries, knns):
        np.testing.assert_array_equal(k, locus.knn(q, x, 3, backend="cpu").indices)
    stats = ks.stats()
    assert stats["direct"] + stats["batched_requests"] >= 3 * 64


@pytest.mark.parametrize("backend", ["cpu"])
def test_shared_engines_by_name(backend):
    from locus._engine import engine_for

    assert engine_for(backend) is engine_for(backend)
    e = locus.Engine(backend)
    assert engine_for(e) is e


def _concurrent_requests_under_a_limit(rng, memory_wait):
    """200 concurrent 8-row requests on a key set whose engine holds it and
    room for about three requests; the answers (or the error) of each."""
    x = rng.normal(size=(20000, 3)).astype(np.float32)
    y = rng.normal(size=(20000, 3)).astype(np.float32)
    queries = [rng.normal(size=(8, 3)).astype(np.float32) for _ in range(200)]
    free = locus.Engine("cpu").prepare(x, y)
    want = [free.local_mean(q, bandwidth=0.3) for q in queries]
    # An 8-row request's working memory: 8 rows x (12 * 3 columns + 16) bytes.
    request = 8 * (12 * 3 + 16)
    limit = free.resident_bytes + 3 * request + request // 2
    ks = locus.Engine("cpu", memory_limit=limit, memory_wait=memory_wait).prepare(x, y)
    barrier = threading.Barrier(len(queries))
    got = [None] * len(queries)

    def work(i):
        barrier.wait()
        try:
            got[i] = ks.local_mean(queries[i], bandwidth=0.3)
        except locus.LocusMemoryError as e:
            got[i] = e

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(queries))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return got, want


def test_concurrent_requests_under_a_memory_limit_wait_their_turn(rng):
    got, want = _concurrent_requests_under_a_limit(rng, memory_wait=60.0)
    failed = [g for g in got if isinstance(g, Exception)]
    assert not failed, f"{len(failed)} of {len(got)} failed: {failed[:3]}"
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-7)
    # Without a wait (the behaviour before admission), requests that meet
    # others fail; how many depends on timing, so it is only reported.
    got, _ = _concurrent_requests_under_a_limit(rng, memory_wait=0)
    failed = sum(isinstance(g, Exception) for g in got)
    print(f"memory_wait=0: {failed} of {len(got)} requests failed")


def test_memory_wait_is_checked():
    with pytest.raises(locus.InputError, match="memory_wait"):
        locus.Engine("cpu", memory_limit=1000, memory_wait=-1.0)
    with pytest.raises(locus.InputError, match="memory_wait"):
        locus.Engine("cpu", memory_wait=float("nan"))
    with pytest.raises(TypeError, match="memory_wait"):
        locus.Engine("cpu", memory_wait="10")
    # A request that can never fit fails at once, whatever the wait.
    engine = locus.Engine("cpu", memory_limit=1000, memory_wait=600)
    t0 = time.perf_counter()
    with pytest.raises(locus.LocusMemoryError, match="memory limit"):
        engine.prepare(np.ones((500, 3), np.float32), np.ones((500, 2), np.float32))
    assert time.perf_counter() - t0 < 30
