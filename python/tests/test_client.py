"""locus.Client against the real ``locus serve``: every method's answer
equals the local function's on the same data, over Arrow IPC (pyarrow) and
over ``.npy``/JSON (pyarrow hidden); errors are typed.

The binary: ``LOCUS_BIN``, else ``target/release/locus`` of the checkout
(scripts/test-python.sh builds it and sets ``LOCUS_BIN``). Without it the
tests skip, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import locus

ROOT = Path(__file__).resolve().parents[2]
RTOL = 1e-5
H = 0.3


def _binary() -> str:
    path = os.environ.get("LOCUS_BIN") or str(ROOT / "target" / "release" / "locus")
    if not Path(path).is_file():
        reason = f"the locus binary is not built ({path}; set LOCUS_BIN or run cargo build --release --bin locus)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true: {reason}")
        pytest.skip(f"SKIPPED: {reason}")
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    keys = rng.uniform(0, 1, (400, 3)).astype(np.float32)
    return {
        "keys": keys,
        "values": rng.uniform(-1, 1, (400, 2)).astype(np.float32),
        "labels": (keys[:, 0] > 0.5).astype(np.int64) * 3,
        "weights": (0.5 + keys[:, 1]).astype(np.float32),
        "queries": rng.uniform(0, 1, (37, 3)).astype(np.float32),
    }


@pytest.fixture(scope="module")
def service(data: dict[str, np.ndarray], tmp_path_factory: pytest.TempPathFactory):
    """``locus serve`` on a free port with set ``s`` (keys, values, labels)
    and set ``w`` (keys, weights); its URL."""
    binary = _binary()
    d = tmp_path_factory.mktemp("serve")
    for name in ("keys", "values", "labels", "weights"):
        np.save(d / f"{name}.npy", data[name])
    args = [
        binary, "serve", "--port", "0", "--backend", "cpu", "--bandwidth", str(H), "--quiet",
        "--set", "s", "--keys", str(d / "keys.npy"), "--values", str(d / "values.npy"),
        "--labels", str(d / "labels.npy"),
        "--set", "w", "--keys", str(d / "keys.npy"), "--weights", str(d / "weights.npy"),
    ]
    env = dict(os.environ, NODEVICE_SELECT="1")
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("listening on http://"):
            proc.kill()
            _, err = proc.communicate(timeout=10)
            pytest.fail(f"locus serve did not start: {line!r} {err}")
        url = line.split()[-1]
        # Keep reading its pipes so it never blocks on them.
        for pipe in (proc.stdout, proc.stderr):
            threading.Thread(target=pipe.read, daemon=True).start()
        c = locus.Client(url)
        for _ in range(600):
            try:
                c.readyz()
                break
            except locus.ServiceBusyError:
                threading.Event().wait(0.05)
        yield url
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture(params=["arrow", "npy"])
def client(request: pytest.FixtureRequest, service: str, monkeypatch: pytest.MonkeyPatch):
    """A client over Arrow (pyarrow installed), or over .npy/JSON with the
    pyarrow import failing."""
    if request.param == "arrow":
        pytest.importorskip("pyarrow")
    else:
        monkeypatch.setitem(sys.modules, "pyarrow", None)
        monkeypatch.setitem(sys.modules, "pyarrow.ipc", None)
    c = locus.Client(service, timeout=30)
    assert c.arrow == (request.param == "arrow")
    yield c
    c.close()


def _close(got, want, rtol=RTOL):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-6)


@pytest.fixture(scope="module")
def local(data: dict[str, np.ndarray]) -> locus.KeySet:
    return locus.Engine("cpu").prepare(data["keys"], values=data["values"], labels=data["labels"])


def test_queries_equal_the_local_functions(client, data, local):
    q, k = data["queries"], data["keys"]
    _close(client.local_mean("s", q), local.local_mean(q, bandwidth=H))
    _close(
        client.local_mean("s", q, bandwidth=0.5, kernel="epanechnikov"),
        locus.local_mean(q, k, data["values"], bandwidth=0.5, kernel="epanechnikov", backend="cpu"),
    )
    fit, slopes = client.local_polynomial("s", q, bandwidth=0.6, degree=1, return_slopes=True)
    want_fit, want_slopes = local.local_polynomial(q, bandwidth=0.6, degree=1, return_slopes=True)
    _close(fit, want_fit, 1e-4)
    _close(slopes, want_slopes, 1e-3)
    got, want = client.row_states("s", q), local.row_states(q, bandwidth=H)
    for g, w in zip(got, want):
        _close(g, w)
    _close(client.density("s", q), local.density(q, bandwidth=H))
    _close(client.log_density("s", q, bandwidth=0.5), local.log_density(q, bandwidth=0.5))
    _close(
        client.density("w", q),
        locus.density(q, k, weights=data["weights"], bandwidth=H, backend="cpu"),
    )
    pk = locus.ProductKernel([(1, "uniform", 0.5), (2, "gaussian", 0.4)])
    np.testing.assert_array_equal(client.classify("s", q, kernel=pk), local.classify(q, kernel=pk))
    _close(client.predict_proba("s", q), local.predict_proba(q, bandwidth=H))
    got_knn, want_knn = client.knn("s", q, 4), local.knn(q, 4)
    np.testing.assert_array_equal(got_knn.indices, want_knn.indices)
    _close(got_knn.distances, want_knn.distances)


def test_mean_shift_equals_the_local_one(client):
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.normal(0, 0.1, (30, 2)), rng.normal(3, 0.1, (30, 2))]).astype(np.float32)
    got = client.mean_shift(x, bandwidth=0.5, kernel="gaussian", max_iter=300)
    want = locus.mean_shift(x, bandwidth=0.5, kernel="gaussian", max_iter=300, backend="cpu")
    np.testing.assert_array_equal(got.labels, want.labels)
    np.testing.assert_array_equal(got.populations, want.populations)
    _close(got.cluster_centers, want.cluster_centers, 1e-4)
    assert (got.converged, got.bandwidth) == (want.converged, want.bandwidth)


def test_sets_are_put_listed_and_deleted(client, data, local):
    q = data["queries"]
    name = f"up-{client.arrow}"
    r = client.put_set(name, data["keys"], values=data["values"], labels=data["labels"])
    assert r["replaced"] is False and r["set"]["keys"] == 400
    _close(client.local_mean(name, q), local.local_mean(q, bandwidth=H))
    np.testing.assert_array_equal(client.classify(name, q), local.classify(q, bandwidth=H))
    assert client.put_set(name, data["keys"], weights=data["weights"])["replaced"] is True
    assert client.get_set(name)["weighted"] is True
    assert name in [s["name"] for s in client.list_sets()]
    assert client.delete_set(name) == {"deleted": name}
    with pytest.raises(locus.ServiceInputError) as e:
        client.get_set(name)
    assert e.value.status == 404 and e.value.kind == "not_found"
    with pytest.raises(locus.InputError, match="weight"):
        client.put_set(name, data["keys"], weights=-data["weights"])
    # Labels that are not whole numbers are refused, not truncated.
    with pytest.raises(locus.InputError, match="labels"):
        client.put_set(name, data["keys"][:3], labels=[0.5, 1.7, 2.2])
    with pytest.raises(locus.InputError, match="labels"):
        client.put_set(name, data["keys"][:2], labels=["a", "b"])
    with pytest.raises(locus.InputError, match="labels"):
        client.put_set(name, data["keys"][:2], labels=np.array([0, 2**63], dtype=np.uint64))
    assert client.put_set(name, data["keys"][:3], labels=[0.0, 1.0, 1.0])["set"]["classes"] == [0, 1]
    client.delete_set(name)


def test_float64_points_far_from_the_origin_keep_their_precision(client):
    # UTM-like coordinates: float32 spacing there is 0.5 m (x) and 0.5 m (y).
    rng = np.random.default_rng(11)
    origin = np.array([500_000.0, 4_649_776.0])
    keys = origin + rng.uniform(-50, 50, (300, 2))
    values = np.sin(keys - origin).astype(np.float32)
    queries = origin + rng.uniform(-40, 40, (25, 2))
    name = f"far-{client.arrow}"
    r = client.put_set(name, keys, values=values)
    assert r["set"]["offset"] is not None
    # Against float64 references: kNN lists and local means.
    d2 = ((queries[:, None, :] - keys[None, :, :]) ** 2).sum(-1)
    got = client.knn(name, queries, 5)
    np.testing.assert_array_equal(got.indices, np.argsort(d2, axis=1)[:, :5])
    np.testing.assert_allclose(got.distances, np.sqrt(np.sort(d2, axis=1)[:, :5]), rtol=1e-5)
    w = np.exp(-d2 / (2 * 4.0**2))
    want = (w @ values.astype(np.float64)) / w.sum(1, keepdims=True)
    np.testing.assert_allclose(client.local_mean(name, queries, bandwidth=4.0, kernel="gaussian"), want, atol=1e-5)
    # The local package agrees (it centres float64 too).
    ks = locus.Engine("cpu").prepare(keys, values=values)
    _close(client.local_mean(name, queries, bandwidth=4.0, kernel="gaussian"),
           ks.local_mean(queries, bandwidth=4.0, kernel="gaussian"))
    # MeanShift's modes come back float64, where the points are.
    blobs = origin + np.concatenate([rng.normal(0, 0.3, (30, 2)), rng.normal(5, 0.3, (30, 2))])
    fit = client.mean_shift(blobs, bandwidth=1.0, kernel="gaussian", max_iter=300)
    ref = locus.mean_shift(blobs, bandwidth=1.0, kernel="gaussian", max_iter=300, backend="cpu")
    assert fit.cluster_centers.dtype == np.float64
    np.testing.assert_array_equal(fit.labels, ref.labels)
    np.testing.assert_allclose(fit.cluster_centers, ref.cluster_centers, rtol=0, atol=1e-4)
    assert client.delete_set(name) == {"deleted": name}


def test_errors_are_typed(client, data):
    assert client.livez() == {"status": "live"}
    assert client.readyz() == {"status": "ready"}
    with pytest.raises(ValueError, match="dimension|coordinates"):
        client.density("s", np.zeros((2, 5)))
    with pytest.raises(locus.ServiceInputError) as e:
        client.local_mean("w", data["queries"])
    assert e.value.status == 422
    with pytest.raises(locus.ServiceInputError, match="no set"):
        client.density("nope", data["queries"])
    with pytest.raises(locus.InputError):
        client.local_mean("s", data["queries"], kernel=locus.ProductKernel([(3, "uniform", 1.0)]), bandwidth=1.0)


def test_auth_and_busy_errors(data, tmp_path):
    binary = _binary()
    keys = tmp_path / "keys.txt"
    keys.write_text("reader-0123456789abcdef read\n")
    np.save(tmp_path / "k.npy", data["keys"])
    proc = subprocess.Popen(
        [binary, "serve", "--port", "0", "--backend", "cpu", "--quiet", "--api-keys", str(keys),
         "--set", "s", "--keys", str(tmp_path / "k.npy")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env=dict(os.environ, NODEVICE_SELECT="1"),
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split()[-1]
        with pytest.raises(locus.ServiceAuthError) as e:
            locus.Client(url).list_sets()
        assert e.value.status == 401
        reader = locus.Client(url, api_key="reader-0123456789abcdef")
        with pytest.raises(locus.ServiceAuthError) as e:
            reader.delete_set("s")
        assert e.value.status == 403 and isinstance(e.value, PermissionError)
        # Loading or ready: a 503 while loading is a busy error with Retry-After.
        try:
            reader.readyz()
        except locus.ServiceBusyError as busy:
            assert busy.status == 503 and busy.retry_after == 1.0
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_busy_errors_carry_retry_after():
    err = locus.ServiceBusyError(429, "queue_full", "busy", 1.0)
    assert isinstance(err, locus.ServiceError) and err.retry_after == 1.0
    assert "429" in str(err)


def test_bad_urls_are_refused():
    with pytest.raises(locus.InputError):
        locus.Client("https://example.invalid")
    with pytest.raises(locus.InputError):
        locus.Client("localhost:8080")
