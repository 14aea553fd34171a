"""The estimators against scikit-learn's on the same data."""

import pickle
import subprocess
import sys

import numpy as np
import pytest
from reference import assert_close, local_mean

import locus

sklearn = pytest.importorskip("sklearn")
from sklearn import cluster, neighbors  # noqa: E402
from sklearn.base import clone  # noqa: E402
from sklearn.datasets import make_blobs  # noqa: E402


def _same_partition(a, b):
    pairs = set(zip(np.asarray(a).tolist(), np.asarray(b).tolist()))
    return len(pairs) == len(set(np.asarray(a).tolist())) == len(set(np.asarray(b).tolist()))


@pytest.fixture
def blobs():
    x, y = make_blobs(n_samples=600, centers=5, cluster_std=0.8, random_state=3)
    return x, y


@pytest.mark.parametrize("bin_seeding", [False, True])
@pytest.mark.parametrize("bandwidth", [None, 1.2])
def test_mean_shift_partition_equals_sklearn(blobs, bin_seeding, bandwidth):
    x, _ = blobs
    ref = cluster.MeanShift(bandwidth=bandwidth, bin_seeding=bin_seeding).fit(x)
    ours = locus.MeanShift(bandwidth=bandwidth, bin_seeding=bin_seeding, backend="cpu").fit(x)
    assert _same_partition(ours.labels_, ref.labels_)
    np.testing.assert_allclose(ours.cluster_centers_, ref.cluster_centers_, atol=1e-3)
    assert ours.n_features_in_ == 2 and ours.n_iter_ >= 1
    assert _same_partition(ours.predict(x[:50]), ref.predict(x[:50]))
    np.testing.assert_array_equal(ours.fit_predict(x), ours.labels_)


def test_mean_shift_cluster_all_false_and_gaussian_kernel(blobs):
    x, _ = blobs
    ref = cluster.MeanShift(bandwidth=0.8, cluster_all=False).fit(x)
    ours = locus.MeanShift(bandwidth=0.8, cluster_all=False, backend="cpu").fit(x)
    np.testing.assert_array_equal(ours.labels_ == -1, ref.labels_ == -1)
    g = locus.MeanShift(bandwidth=1.0, kernel="gaussian", backend="cpu").fit(x)
    assert len(g.cluster_centers_) >= 1


@pytest.mark.parametrize("kernel", ["gaussian", "tophat", "epanechnikov", "exponential", "linear", "cosine"])
@pytest.mark.parametrize("bandwidth", [0.3, "scott", "silverman"])
def test_kernel_density_matches_sklearn(rng, kernel, bandwidth):
    x = rng.normal(size=(400, 3))
    q = rng.normal(size=(60, 3)) * 1.5
    ref = neighbors.KernelDensity(bandwidth=bandwidth, kernel=kernel).fit(x)
    ours = locus.KernelDensity(bandwidth=bandwidth, kernel=kernel, backend="cpu").fit(x)
    assert ours.bandwidth_ == pytest.approx(ref.bandwidth_)
    want, got = ref.score_samples(q), ours.score_samples(q)
    # Where the density is 0 scikit-learn's tree reports about 1e-15 (we give -inf).
    np.testing.assert_allclose(np.exp(got), np.exp(want), rtol=1e-4, atol=1e-12)
    f = np.exp(want) > 1e-12
    np.testing.assert_allclose(got[f], want[f], rtol=1e-4)
    assert ours.score(q[f]) == pytest.approx(ref.score(q[f]), rel=1e-5)


def test_kernel_density_sample_weight_and_sampling(rng):
    x = rng.normal(size=(300, 2))
    w = rng.uniform(0.1, 3.0, size=300)
    ref = neighbors.KernelDensity(bandwidth=0.5).fit(x, sample_weight=w)
    ours = locus.KernelDensity(bandwidth=0.5, backend="cpu").fit(x, sample_weight=w)
    np.testing.assert_allclose(ours.score_samples(x[:40]), ref.score_samples(x[:40]), rtol=1e-5)
    for kernel in ("gaussian", "tophat"):
        ref = neighbors.KernelDensity(bandwidth=0.5, kernel=kernel).fit(x)
        ours = locus.KernelDensity(bandwidth=0.5, kernel=kernel, backend="cpu").fit(x)
        np.testing.assert_allclose(ours.sample(50, random_state=7), ref.sample(50, random_state=7), rtol=1e-6)
    # Every kernel samples; only the Euclidean metric does.
    assert locus.KernelDensity(kernel="linear", backend="cpu").fit(x).sample(3).shape == (3, 2)
    kde = locus.KernelDensity(kernel="cosine", backend="cpu").fit(x)
    with pytest.raises(NotImplementedError, match="Euclidean"):
        kde.set_params(metric="manhattan").sample()
    with pytest.raises(ValueError, match="kernel"):
        locus.KernelDensity(kernel="cosinus", backend="cpu").fit(x)


def test_kernel_regression_is_nadaraya_watson(rng):
    x = rng.uniform(0, 6, size=(300, 1))
    y = np.sin(x[:, 0]) + 0.1 * rng.normal(size=300)
    q = np.linspace(0, 6, 50)[:, None]
    reg = locus.KernelRegression(bandwidth=0.3, backend="cpu").fit(x, y)
    assert_close(reg.predict(q), local_mean(q, x, y[:, None], 0.3, "gaussian")[:, 0])
    y2 = np.stack([y, -y], 1)
    assert reg.fit(x, y2).predict(q).shape == (50, 2)
    assert reg.score(x, y2) > 0.9
    with pytest.raises(ValueError, match="degree"):
        locus.KernelRegression(degree=3).fit(x, y)


def test_local_mode_classifier(blobs):
    x, y = blobs
    labels = np.array(["a", "b", "c", "d", "e"])[y]
    clf = locus.LocalModeClassifier(bandwidth=0.8, backend="cpu").fit(x, labels)
    assert list(clf.classes_) == list("abcde")
    proba = clf.predict_proba(x)
    np.testing.assert_allclose(proba.sum(1), 1, rtol=1e-5)
    one_hot = (y[:, None] == np.arange(5)).astype(float)
    assert_close(proba, local_mean(x, x, one_hot, 0.8, "gaussian"))
    assert clf.score(x, labels) > 0.9
    far = clf.predict([[1e3, 1e3]])
    assert far[0] in clf.classes_
    compact = locus.LocalModeClassifier(bandwidth=0.1, kernel="uniform", backend="cpu").fit(x, labels)
    np.testing.assert_allclose(compact.predict_proba([[1e3, 1e3]]).sum(), 1.0)


@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_kneighbors_match_sklearn(rng, weights):
    x = rng.normal(size=(300, 4))
    y = (x[:, 0] + x[:, 1] > 0).astype(int) + (x[:, 2] > 1)
    q = rng.normal(size=(80, 4))
    ref = neighbors.KNeighborsClassifier(n_neighbors=7, weights=weights).fit(x, y)
    ours = locus.KNeighborsClassifier(n_neighbors=7, weights=weights, backend="cpu").fit(x, y)
    np.testing.assert_array_equal(ours.predict(q), ref.predict(q))
    np.testing.assert_allclose(ours.predict_proba(q), ref.predict_proba(q), rtol=1e-5)
    rd, ri = ref.kneighbors(q)
    od, oi = ours.kneighbors(q)
    np.testing.assert_array_equal(oi, ri)
    np.testing.assert_allclose(od, rd, rtol=1e-5)
    np.testing.assert_array_equal(ours.kneighbors(return_distance=False), ref.kneighbors(return_distance=False))
    t = np.stack([x[:, 0] * 2, x[:, 1]], 1)
    refr = neighbors.KNeighborsRegressor(n_neighbors=5, weights=weights).fit(x, t)
    oursr = locus.KNeighborsRegressor(n_neighbors=5, weights=weights, backend="cpu").fit(x, t)
    np.testing.assert_allclose(oursr.predict(q), refr.predict(q), rtol=1e-5)
    np.testing.assert_allclose(
        oursr.fit(x, t[:, 0]).predict(q), refr.fit(x, t[:, 0]).predict(q), rtol=1e-5
    )


def test_clone_pickle_and_params(blobs):
    x, y = blobs
    for est in [
        locus.MeanShift(bandwidth=1.0, backend="cpu"),
        locus.KernelDensity(bandwidth=0.5, backend="cpu"),
        locus.KernelRegression(bandwidth=0.5, backend="cpu"),
        locus.LocalModeClassifier(bandwidth=0.5, backend="cpu"),
        locus.KNeighborsClassifier(backend="cpu"),
        locus.KNeighborsRegressor(backend="cpu"),
    ]:
        params = est.get_params()
        assert clone(est).get_params() == params
        fitted = est.fit(x, y)
        again = pickle.loads(pickle.dumps(fitted))
        method = "score_samples" if isinstance(est, locus.KernelDensity) else "predict"
        np.testing.assert_array_equal(getattr(again, method)(x[:20]), getattr(fitted, method)(x[:20]))


def test_estimators_without_sklearn_say_what_to_install():
    code = (
        "import sys; sys.modules['sklearn'] = None\n"
        "import locus\n"
        "locus.local_mean([[0.0]], [[0.0]], bandwidth=1.0, backend='cpu')\n"
        "try:\n    locus.MeanShift\n"
        "except ImportError as e:\n    print(e)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "pip install 'locus-engine[sklearn]'" in r.stdout
