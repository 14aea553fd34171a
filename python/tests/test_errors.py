"""Bad inputs raise typed exceptions naming the problem; the interpreter survives."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import locus

CPU = "cpu"
X = np.random.default_rng(0).normal(size=(20, 3)).astype(np.float32)


def test_exception_hierarchy():
    assert issubclass(locus.InputError, locus.LocusError) and issubclass(locus.InputError, ValueError)
    assert issubclass(locus.DeviceError, locus.LocusError) and issubclass(locus.DeviceError, RuntimeError)
    assert issubclass(locus.LocusMemoryError, locus.LocusError)
    assert issubclass(locus.LocusMemoryError, MemoryError)


@pytest.mark.parametrize(
    "bad",
    [np.array([["a", "b", "c"]]), np.array([[object(), 1, 2]], dtype=object), np.ones((2, 3), complex)],
)
def test_non_numeric_dtype_is_type_error_naming_the_argument(bad):
    with pytest.raises(TypeError, match="queries"):
        locus.local_mean(bad, X, bandwidth=1.0, backend=CPU)


@pytest.mark.parametrize("bad", [np.ones(3), np.ones((2, 2, 3)), 5.0])
def test_wrong_ndim(bad):
    with pytest.raises(locus.InputError, match="keys must be 2-D"):
        locus.local_mean(X, bad, bandwidth=1.0, backend=CPU)


def test_ragged_list():
    with pytest.raises(locus.InputError, match="queries"):
        locus.local_mean([[1.0, 2.0, 3.0], [1.0]], X, bandwidth=1.0, backend=CPU)


def test_nan_and_inf_are_refused_with_position():
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(locus.InputError, match="row 3, column 1"):
        locus.local_mean(X, bad, bandwidth=1.0, backend=CPU)
    with pytest.raises(ValueError, match="non-finite"):
        locus.mean_shift(np.array([[0.0], [np.inf]]), bandwidth=1.0, backend=CPU)
    # float64 beyond the float32 range becomes inf, and is refused as such
    with pytest.raises(locus.InputError, match="non-finite"):
        locus.knn(np.array([[1e300, 0, 0]]), X, 1, backend=CPU)


def test_shape_mismatches_and_empty_inputs():
    with pytest.raises(locus.InputError, match="dimension"):
        locus.local_mean(X[:, :2], X, bandwidth=1.0, backend=CPU)
    with pytest.raises(locus.InputError, match="value rows"):
        locus.local_mean(X, X, X[:5], bandwidth=1.0, backend=CPU)
    with pytest.raises(locus.InputError, match="empty"):
        locus.local_mean(X[:0], X, bandwidth=1.0, backend=CPU)
    with pytest.raises(locus.InputError, match="2-D"):
        locus.kernel_softmax(X, X, X[None], backend=CPU)
    with pytest.raises(locus.InputError, match="negative"):
        locus.feature_local_mean(-np.abs(X), X, X, backend=CPU)


@pytest.mark.parametrize("h", [0.0, -1.0, np.nan, np.inf, 1e-30])
def test_bad_bandwidth(h):
    with pytest.raises(locus.InputError, match="bandwidth"):
        locus.local_mean(X, X, bandwidth=h, backend=CPU)


def test_bad_parameters():
    with pytest.raises(TypeError):
        locus.local_mean(X, X, bandwidth="wide", backend=CPU)
    with pytest.raises(locus.InputError, match="unknown kernel"):
        locus.local_mean(X, X, bandwidth=1.0, kernel="boxcar", backend=CPU)
    with pytest.raises(locus.InputError, match="backend"):
        locus.local_mean(X, X, bandwidth=1.0, backend="tpu")
    with pytest.raises(locus.InputError, match="normalize"):
        locus.kernel_matrix(X, bandwidth=1.0, normalize="cols", backend=CPU)
    with pytest.raises(locus.InputError, match="omit keys"):
        locus.kernel_matrix(X, X, bandwidth=1.0, laplacian=True, backend=CPU)
    with pytest.raises(locus.InputError, match="k must be"):
        locus.knn(X, X, 21, backend=CPU)
    with pytest.raises(locus.InputError, match="non-negative"):
        locus.knn(X, X, -1, backend=CPU)
    with pytest.raises(locus.InputError, match="max_iter"):
        locus.mean_shift(X, bandwidth=1.0, max_iter=0, backend=CPU)
    with pytest.raises(locus.InputError, match="no point lies within"):
        locus.mean_shift(X, bandwidth=0.1, seeds=X[:2] + 100, backend=CPU)
    with pytest.raises(locus.InputError, match="cauchy"):
        locus.density(X, X, bandwidth=1.0, kernel="cauchy", backend=CPU)
    with pytest.raises(locus.InputError, match="weights"):
        locus.density(X, X, bandwidth=1.0, weights=-np.ones(20), backend=CPU)


def test_non_contiguous_and_other_dtypes_are_converted_once():
    big = np.asfortranarray(np.random.default_rng(1).normal(size=(30, 6)))
    view = big[::2, ::2]  # float64, neither C- nor F-contiguous
    want = locus.local_mean(np.ascontiguousarray(view, np.float32), X, bandwidth=1.0, backend=CPU)
    np.testing.assert_array_equal(locus.local_mean(view, X, bandwidth=1.0, backend=CPU), want)
    ints = np.arange(12).reshape(4, 3)
    np.testing.assert_array_equal(
        locus.local_mean(ints, X, bandwidth=1.0, backend=CPU),
        locus.local_mean(ints.astype(np.float32), X, bandwidth=1.0, backend=CPU),
    )
    ro = X.copy()
    ro.flags.writeable = False
    locus.local_mean(ro, ro, bandwidth=1.0, backend=CPU)


def test_results_own_their_memory():
    out = locus.local_mean(X, X, bandwidth=1.0, backend=CPU)
    assert out.flags.c_contiguous and out.flags.writeable and out.flags.owndata is not None
    out[:] = 0  # ours to change


def test_huge_requests_are_memory_errors():
    z = np.zeros((200_000, 1), np.float32)
    with pytest.raises(locus.LocusMemoryError, match="160000000000 bytes"):
        locus.kernel_matrix(z, z, bandwidth=1.0, backend=CPU)
    with pytest.raises(MemoryError):
        locus.kernel_matrix(z, z, bandwidth=1.0, backend=CPU)
    engine = locus.Engine("cpu", memory_limit=1000)
    with pytest.raises(locus.LocusMemoryError, match="memory limit"):
        engine.prepare(np.zeros((1000, 4)))
    ks = engine.prepare(np.zeros((10, 4)))  # still works after the refusal
    assert ks.n_keys == 10
    with pytest.raises(locus.LocusMemoryError, match="max_request_rows"):
        locus.Engine("cpu").prepare(X, max_request_rows=4).log_density(X, bandwidth=1.0)


def test_keyset_without_values_or_labels():
    ks = locus.Engine("cpu").prepare(X)
    with pytest.raises(locus.InputError, match="without values"):
        ks.local_mean(X, bandwidth=1.0)
    with pytest.raises(locus.InputError, match="without labels"):
        ks.classify(X, bandwidth=1.0)
    with pytest.raises(locus.InputError, match="dimension"):
        ks.knn(X[:, :2], 1)
    with pytest.raises(locus.InputError, match="labels"):
        locus.Engine("cpu").prepare(X, labels=np.zeros(3))


def _run(code, env=None):
    e = dict(os.environ, NODEVICE_SELECT="1", **(env or {}))
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=e, timeout=120
    )


def test_device_errors_are_device_error():
    r = _run(
        """
        import locus
        try:
            locus.Engine("gpu")
        except locus.DeviceError as e:
            assert isinstance(e, RuntimeError)
            print("DeviceError:", e)
        """,
        {"LOCUS_ADAPTER": "no-such-adapter-anywhere"},
    )
    assert r.returncode == 0, r.stderr
    assert "DeviceError: no GPU adapter" in r.stdout


def test_interpreter_survives_a_barrage_of_bad_calls():
    r = _run(
        """
        import numpy as np, locus
        x = np.ones((4, 2), np.float32)
        calls = [
            lambda: locus.local_mean(x, x[:, :1], bandwidth=1.0, backend="cpu"),
            lambda: locus.local_mean(x, x, bandwidth=-1.0, backend="cpu"),
            lambda: locus.local_mean(np.full((2, 2), np.nan), x, bandwidth=1.0, backend="cpu"),
            lambda: locus.kernel_softmax(x, x, x, scale=1e38, backend="cpu"),
            lambda: locus.knn(x, x, 0, backend="cpu"),
            lambda: locus.mean_shift(np.zeros((5, 2)), backend="cpu"),
            lambda: locus.medoid_shift(np.ones((3, 4)), metric="precomputed", bandwidth=1.0, backend="cpu"),
            lambda: locus.estimate_bandwidth(x, quantile=2.0, backend="cpu"),
            lambda: locus.kernel_matrix(np.zeros((1 << 17, 1)), np.zeros((1 << 17, 1)), bandwidth=1.0, backend="cpu"),
        ]
        for c in calls:
            try:
                c()
            except locus.LocusError as e:
                pass
            else:
                raise SystemExit(f"no error from {c}")
        print("alive")
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "alive"
