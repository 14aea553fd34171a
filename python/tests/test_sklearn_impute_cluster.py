"""scikit-learn code with ``from locus import ...``: the imputer with
KNNImputer's arguments and MeanShift with scikit-learn's rules, compared
with scikit-learn on its bundled data (iris, digits, diabetes) and on its
own MeanShift toy data; parameters checked at ``fit``; a quiet stderr."""

import os
import subprocess
import sys

import numpy as np
import pytest

import locus

pytest.importorskip("sklearn")
from sklearn import cluster  # noqa: E402
from sklearn.compose import ColumnTransformer  # noqa: E402
from sklearn.datasets import load_diabetes, load_digits, load_iris, make_blobs  # noqa: E402
from sklearn.impute import KNNImputer  # noqa: E402

CPU = "cpu"


def _holes(x, frac, seed):
    x = np.array(x, dtype=np.float64)
    x[np.random.default_rng(seed).uniform(size=x.shape) < frac] = np.nan
    return x


@pytest.fixture(scope="module")
def diabetes():
    x = _holes(load_diabetes().data, 0.15, 0)
    x[:, 3] = np.nan  # a feature never observed
    return x


# ---------------------------------------------------------------- imputer


@pytest.mark.parametrize(
    "kw",
    [
        dict(n_neighbors=5, weights="uniform"),
        dict(n_neighbors=3, weights="distance"),
        dict(n_neighbors=4, weights=lambda d: 1.0 / (1.0 + d)),
        dict(n_neighbors=5, weights="uniform", add_indicator=True),
    ],
)
@pytest.mark.parametrize("data", ["iris", "diabetes"])
def test_imputer_with_knn_weights_equals_knn_imputer(diabetes, kw, data):
    x = diabetes if data == "diabetes" else _holes(load_iris().data, 0.2, 1)
    ref = KNNImputer(**kw).fit(x[:100])
    ours = locus.LocalMeanImputer(**kw, backend=CPU).fit(x[:100])
    got = ours.transform(x[100:])
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, ref.transform(x[100:]), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ours.fit_transform(x), KNNImputer(**kw).fit_transform(x), atol=1e-12)
    assert list(ours.get_feature_names_out()) == list(ref.get_feature_names_out())


def test_imputer_numeric_missing_values_and_empty_features(diabetes):
    x = np.where(np.isnan(diabetes), -1.0, diabetes)
    kw = dict(missing_values=-1.0, n_neighbors=5, weights="uniform")
    ref = KNNImputer(**kw).fit_transform(x)
    got = locus.LocalMeanImputer(**kw, backend=CPU).fit_transform(x)
    assert got.shape == ref.shape == (442, 9)  # the empty feature dropped
    np.testing.assert_allclose(got, ref, atol=1e-12)
    keep = locus.LocalMeanImputer(**kw, keep_empty_features=True, backend=CPU).fit(x)
    out = keep.transform(x)
    np.testing.assert_allclose(out, KNNImputer(**kw, keep_empty_features=True).fit_transform(x), atol=1e-12)
    assert len(keep.get_feature_names_out()) == out.shape[1] == 10
    # A missing entry of an empty feature, and the rows only missing it.
    assert (out[:, 3] == 0).all()
    with pytest.raises(ValueError):
        locus.LocalMeanImputer(missing_values=-1.0).fit(np.where(x == -1.0, np.nan, x))


def test_imputer_kernel_path_keeps_dtype_observed_entries_and_offsets(diabetes):
    x = diabetes[:, [0, 1, 2, 4, 5]]
    imp = locus.LocalMeanImputer(bandwidth=0.05, backend=CPU)
    got = imp.fit_transform(x)
    obs = ~np.isnan(x)
    assert got.dtype == np.float64 and np.isfinite(got).all()
    np.testing.assert_array_equal(got[obs], x[obs])  # copied exactly
    assert imp.fit_transform(x.astype(np.float32)).dtype == np.float32
    # A common offset costs no precision: the fills shift by it.
    shifted = locus.LocalMeanImputer(bandwidth=0.05, backend=CPU).fit_transform(x + 1e6)
    np.testing.assert_allclose(shifted - 1e6, got, atol=1e-4 * np.nanstd(x))
    # The verbatim scikit-learn line works (kernel weights on 5 donors).
    five = locus.LocalMeanImputer(missing_values=np.nan, n_neighbors=5, backend=CPU).fit_transform(x)
    assert five.shape == x.shape and np.isfinite(five).all()


def test_imputer_pandas_output_and_column_transformer(diabetes):
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(diabetes, columns=[f"c{i}" for i in range(10)])
    imp = locus.LocalMeanImputer(bandwidth=0.05, add_indicator=True, backend=CPU).set_output(transform="pandas")
    out = imp.fit_transform(df)
    assert isinstance(out, pd.DataFrame)
    assert list(out.columns) == list(imp.get_feature_names_out())
    assert "c3" not in out.columns and "missingindicator_c3" in out.columns
    ct = ColumnTransformer(
        [("imp", locus.LocalMeanImputer(bandwidth=0.05, backend=CPU), ["c0", "c1", "c3"])],
        remainder="passthrough",
    ).set_output(transform="pandas")
    cols = ct.fit_transform(df).columns.tolist()
    assert cols[:2] == ["imp__c0", "imp__c1"] and "imp__c3" not in cols and len(cols) == 9


def test_imputer_copy_false_fills_in_place():
    x = _holes(load_iris().data, 0.2, 2)
    imp = locus.LocalMeanImputer(n_neighbors=3, weights="uniform", copy=False, backend=CPU).fit(x)
    q = x[:30].copy()
    out = imp.transform(q)
    assert out is q and not np.isnan(q).any()


def test_imputer_on_digits_is_close_to_knn_imputer():
    x = _holes(load_digits().data[:400], 0.1, 3)
    ref = KNNImputer(n_neighbors=1).fit_transform(x)
    # A small bandwidth tends to the nearest donor.
    got = locus.LocalMeanImputer(bandwidth=1.0, backend=CPU).fit_transform(x)
    assert np.mean(np.abs(got - ref) < 1e-2) > 0.97


# -------------------------------------------------------------- MeanShift

# scikit-learn's test data for MeanShift.
TOY, _ = make_blobs(
    n_samples=300,
    n_features=2,
    centers=np.array([[1, 1], [-1, -1], [1, -1]]) + 10,
    cluster_std=0.4,
    shuffle=True,
    random_state=11,
)


def _same(X, **kw):
    ref = cluster.MeanShift(**kw).fit(X)
    ours = locus.MeanShift(**kw, backend=CPU).fit(X)
    assert ours.cluster_centers_.dtype == ref.cluster_centers_.dtype
    np.testing.assert_allclose(ours.cluster_centers_, ref.cluster_centers_, atol=1e-4)
    np.testing.assert_array_equal(ours.labels_, ref.labels_)
    assert ours.n_iter_ == ref.n_iter_
    return ref, ours


@pytest.mark.parametrize("cluster_all", [True, False])
def test_mean_shift_orphans_as_sklearn_on_its_toy_data(cluster_all):
    ref, ours = _same(TOY, bandwidth=1.2, cluster_all=cluster_all)
    assert len(np.unique(ours.labels_)) == (3 if cluster_all else 4)
    assert np.sum(ours.labels_ == -1) == np.sum(ref.labels_ == -1)


@pytest.mark.parametrize("max_iter", [0, 1, 2, 5])
@pytest.mark.parametrize("data", ["toy", "iris"])
def test_mean_shift_max_iter_as_sklearn(max_iter, data):
    _same(TOY if data == "toy" else load_iris().data, max_iter=max_iter)


@pytest.mark.parametrize("kw", [{}, {"bin_seeding": True}])
def test_mean_shift_iris_and_digits(kw):
    _same(load_iris().data, **kw)
    digits = load_digits().data[:300]
    if kw:
        # Bins of side 20 on pixels of 0..16: no seed near a point.
        with pytest.raises(ValueError, match="No point was within bandwidth"):
            cluster.MeanShift(bandwidth=20.0, **kw).fit(digits)
        with pytest.raises(ValueError):
            locus.MeanShift(bandwidth=20.0, backend=CPU, **kw).fit(digits)
    else:
        _same(digits, bandwidth=20.0)


def test_mean_shift_iris_orphans_count_as_sklearn():
    ref = cluster.MeanShift(bandwidth=0.5, cluster_all=False).fit(load_iris().data)
    ours = locus.MeanShift(bandwidth=0.5, cluster_all=False, backend=CPU).fit(load_iris().data)
    assert np.sum(ours.labels_ == -1) == np.sum(ref.labels_ == -1)


def test_mean_shift_zero_bandwidth_as_sklearn():
    # scikit-learn's test: the estimated bandwidth is 0.
    x = np.array([1, 1, 1, 2, 2, 2, 3, 3], dtype=np.float64).reshape(-1, 1)
    for kw in ({}, {"bin_seeding": True}, {"cluster_all": False}):
        ref, ours = _same(x, **kw)
        assert ours.bandwidth_ == 0.0
    # Constant 1-D data and a single sample: one cluster, no error.
    ref, ours = _same(np.full((10, 1), 3.5))
    assert ours.cluster_centers_.tolist() == [[3.5]]
    _same(np.ones((1, 3)))
    # Seeds that no point equals find nothing, as scikit-learn's.
    with pytest.raises(ValueError, match="bandwidth=0"):
        locus.MeanShift(seeds=[[9.0]], backend=CPU).fit(x)


def test_mean_shift_closed_balls_and_ties_as_sklearn():
    # Integer data: points at exactly one bandwidth are neighbours.
    line = np.array([[0.0], [1], [2], [3], [10]])
    _same(line, bandwidth=1)
    _same(line, bandwidth=1, cluster_all=False)
    # scikit-learn's intensity tie test.
    x = np.array([[1, 1], [2, 1], [1, 0], [4, 7], [3, 5], [3, 6]], dtype=np.float64)
    np.testing.assert_array_equal(locus.MeanShift(bandwidth=2, backend=CPU).fit(x).labels_, [1, 1, 1, 0, 0, 0])
    np.testing.assert_array_equal(
        locus.MeanShift(bandwidth=2, backend=CPU).fit(x[[3, 4, 5, 0, 1, 2]]).labels_, [0, 0, 0, 1, 1, 1]
    )


@pytest.mark.parametrize("max_iter", [0, 1, 300])
def test_gpu_mean_shift_as_sklearn(gpu, max_iter):
    ref = cluster.MeanShift(bandwidth=1.2, max_iter=max_iter, cluster_all=False).fit(TOY)
    ours = locus.MeanShift(bandwidth=1.2, max_iter=max_iter, cluster_all=False, backend="gpu").fit(TOY)
    np.testing.assert_allclose(ours.cluster_centers_, ref.cluster_centers_, atol=1e-4)
    np.testing.assert_array_equal(ours.labels_, ref.labels_)
    assert ours.n_iter_ == ref.n_iter_


def test_mean_shift_float32_stays_float32():
    ms = locus.MeanShift(bandwidth=1.2, backend=CPU).fit(TOY.astype(np.float32))
    assert ms.cluster_centers_.dtype == np.float32
    assert ms.predict(TOY[:5]).dtype == np.int64


# ------------------------------------------------------ checks at fit


@pytest.mark.parametrize(
    "est",
    [
        locus.MeanShift(kernel="gausian", backend=CPU),
        locus.LocalMeanImputer(kernel="gausian", backend=CPU),
        locus.KernelRegression(kernel="gausian", backend=CPU),
        locus.LocalModeClassifier(kernel="gausian", backend=CPU),
        locus.MeanShift(max_iter=-1, backend=CPU),
        locus.MeanShift(min_bin_freq=0, backend=CPU),
        locus.MeanShift(n_jobs=0, backend=CPU),
        locus.MeanShift(bandwidth=0, backend=CPU),
        locus.MeanShift(cluster_all="no", backend=CPU),
        locus.MeanShift(backend="gpux"),
        locus.LocalMeanImputer(n_neighbors=0, backend=CPU),
        locus.LocalMeanImputer(weights="nearest", backend=CPU),
        locus.LocalMeanImputer(metric="euclidean", backend=CPU),
        locus.LocalMeanImputer(missing_values="NA", backend=CPU),
        locus.LocalMeanImputer(iterations=2, n_neighbors=3, backend=CPU),
        locus.LocalMeanImputer(add_indicator=1, backend=CPU),
        locus.LocalMeanImputer(bandwidth=-1.0, backend=CPU),
    ],
    ids=repr,
)
def test_bad_parameters_fail_at_fit(est):
    x, y = TOY[:40], (TOY[:40, 0] > 10).astype(int)
    with pytest.raises(locus.InputError):
        est.fit(x, y)


# ------------------------------------------------------------- stderr


def test_auto_backend_prints_nothing_on_stderr():
    # Without NODEVICE_SELECT and without XDG_RUNTIME_DIR, Mesa's
    # device-select layer would print an error while adapters are listed.
    env = {k: v for k, v in os.environ.items() if k not in ("NODEVICE_SELECT", "XDG_RUNTIME_DIR")}
    code = (
        "import locus\n"
        "locus.Engine('auto')\n"
        "locus.local_mean([[0.0]], [[0.0], [1.0]], [1.0, 2.0], bandwidth=1.0)\n"
        "import os; print(os.environ['NODEVICE_SELECT'])\n"
    )
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert r.stdout.strip() == "1"
    # A user's own setting is kept.
    env["NODEVICE_SELECT"] = "0"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "0"
