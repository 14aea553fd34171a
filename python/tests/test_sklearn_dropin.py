"""scikit-learn code with ``from locus import …`` in place of
``from sklearn.neighbors import …``: scikit-learn's constructor arguments
verbatim, its datasets (bundled, no download), its results."""

import pickle

import numpy as np
import pytest

import locus

pytest.importorskip("sklearn")
pytest.importorskip("scipy")
from sklearn import datasets, neighbors  # noqa: E402
from sklearn.base import clone  # noqa: E402

CPU = "cpu"


@pytest.fixture(scope="module")
def iris():
    X, y = datasets.load_iris(return_X_y=True)
    # Iris repeats points and has distances exactly equal to round radii:
    # a small jitter makes the neighbour sets unambiguous.
    return X + np.random.default_rng(0).normal(scale=1e-3, size=X.shape), y


@pytest.fixture(scope="module")
def digits():
    return datasets.load_digits(return_X_y=True)


@pytest.fixture(scope="module")
def diabetes():
    return datasets.load_diabetes(return_X_y=True)


@pytest.fixture(scope="module")
def offset():
    # A common offset far larger than the spread: float32 coordinates
    # would keep 3 digits of it.
    X = 1e6 + np.linspace(0, 1, 1000)[:, None]
    y = np.sin(6 * (X[:, 0] - 1e6))
    return X, y


def test_kernel_density_with_sklearn_arguments(iris, diabetes):
    for X, h in ((iris[0], 0.4), (diabetes[0], 0.05)):
        kw = dict(algorithm="auto", atol=0, rtol=1e-8, metric="euclidean", breadth_first=True, leaf_size=40)
        ref = neighbors.KernelDensity(bandwidth=h, **kw).fit(X[::2])
        ours = locus.KernelDensity(bandwidth=h, **kw, backend=CPU).fit(X[::2])
        want, got = ref.score_samples(X[1::2]), ours.score_samples(X[1::2])
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        assert ours.get_params()["leaf_size"] == 40 and clone(ours).rtol == 1e-8


def test_kernel_density_sample_weight_every_kernel(diabetes):
    X = diabetes[0]
    w = np.random.default_rng(1).uniform(0, 3, len(X))
    for kernel in ("gaussian", "tophat", "epanechnikov", "exponential", "linear"):
        ref = neighbors.KernelDensity(bandwidth=0.08, kernel=kernel).fit(X, sample_weight=w)
        ours = locus.KernelDensity(bandwidth=0.08, kernel=kernel, backend=CPU).fit(X, sample_weight=w)
        want, got = ref.score_samples(X[:60]), ours.score_samples(X[:60])
        finite = np.isfinite(want) & (want > -30)
        np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=1e-4)


def test_kneighbors_classifier_with_sklearn_arguments(digits):
    X, y = digits
    train, test = slice(0, 1200), slice(1200, None)
    for weights in ("uniform", "distance"):
        ref = neighbors.KNeighborsClassifier(n_jobs=-1, algorithm="brute", weights=weights).fit(X[train], y[train])
        ours = locus.KNeighborsClassifier(n_jobs=-1, algorithm="brute", weights=weights, backend=CPU)
        ours.fit(X[train], y[train])
        d_ref, _ = ref.kneighbors(X[test])
        d, i = ours.kneighbors(X[test])
        assert d.dtype == np.float64 and i.dtype == np.int64
        np.testing.assert_allclose(d, d_ref, rtol=1e-12)
        # Pixel distances tie often; a tie at the k-th place is broken by
        # index here, arbitrarily by scikit-learn.
        assert np.mean(ours.predict(X[test]) == ref.predict(X[test])) > 0.99
        assert ours.score(X[test], y[test]) == pytest.approx(ref.score(X[test], y[test]), abs=0.01)


def test_kneighbors_regressor_matches_sklearn(diabetes, offset):
    for X, y in (diabetes, offset):
        # (off the midpoints of the offset grid, where neighbours tie)
        Q = X[1::2] + 3e-4
        for weights in ("uniform", "distance"):
            kw = dict(n_neighbors=7, weights=weights, algorithm="kd_tree", leaf_size=10, p=2, metric="minkowski")
            ref = neighbors.KNeighborsRegressor(**kw).fit(X[::2], y[::2])
            ours = locus.KNeighborsRegressor(**kw, n_jobs=2, backend=CPU).fit(X[::2], y[::2])
            got = ours.predict(Q)
            assert got.dtype == np.float64
            np.testing.assert_allclose(got, ref.predict(Q), rtol=1e-9, atol=1e-4 * np.ptp(y))
            np.testing.assert_allclose(ours.kneighbors()[0], ref.kneighbors()[0], rtol=1e-9, atol=1e-9)


def test_nearest_neighbors_radius_and_graphs(iris, diabetes):
    for X, r in ((iris[0], 0.5), (diabetes[0], 0.08)):
        ref = neighbors.NearestNeighbors(n_neighbors=4, radius=r).fit(X)
        ours = locus.NearestNeighbors(n_neighbors=4, radius=r, algorithm="ball_tree", backend=CPU).fit(X)
        for Q in (None, X[:40] + 0.01):
            a = ours.radius_neighbors_graph(Q)
            b = ref.radius_neighbors_graph(Q)
            # (scikit-learn's unsorted rows come in no set order; ours in index order)
            assert a.format == "csr" and a.shape == b.shape and (a != b).nnz == 0
            assert all(np.all(np.diff(a.indices[a.indptr[i] : a.indptr[i + 1]]) > 0) for i in range(a.shape[0]))
            a = ours.radius_neighbors_graph(Q, mode="distance", sort_results=True)
            b = ref.radius_neighbors_graph(Q, mode="distance", sort_results=True)
            np.testing.assert_array_equal(a.indptr, b.indptr)
            np.testing.assert_array_equal(a.indices, b.indices)
            np.testing.assert_allclose(a.data, b.data, rtol=1e-12)
            for mode in ("connectivity", "distance"):
                a = ours.kneighbors_graph(Q, mode=mode)
                b = ref.kneighbors_graph(Q, mode=mode)
                np.testing.assert_array_equal(a.indices, b.indices)
                np.testing.assert_allclose(a.data, b.data, rtol=1e-12)
            dist, ind = ours.radius_neighbors(Q)
            dist_ref, ind_ref = ref.radius_neighbors(Q)
            assert dist.dtype == object and len(ind) == len(ind_ref)
            for d, i, dr, ir in zip(dist, ind, dist_ref, ind_ref):
                np.testing.assert_array_equal(i, np.sort(ir))  # index order
                np.testing.assert_allclose(d, dr[np.argsort(ir)], rtol=1e-12)
    with pytest.raises(ValueError, match="sort_results"):
        ours.radius_neighbors(return_distance=False, sort_results=True)


def test_multi_output_classifiers(iris):
    X, y = iris
    Y = np.column_stack([y, (X[:, 0] > 5.8).astype(int), np.where(X[:, 1] > 3, "wide", "narrow")])
    ref = neighbors.KNeighborsClassifier(n_neighbors=6).fit(X, Y)
    ours = locus.KNeighborsClassifier(n_neighbors=6, backend=CPU).fit(X, Y)
    np.testing.assert_array_equal(ours.predict(X), ref.predict(X))
    for a, b in zip(ours.predict_proba(X), ref.predict_proba(X)):
        np.testing.assert_allclose(a, b)
    # LocalModeClassifier: a 2-D y votes per column as separate fits would.
    both = locus.LocalModeClassifier(bandwidth=0.5, backend=CPU).fit(X, Y)
    for j in range(Y.shape[1]):
        one = locus.LocalModeClassifier(bandwidth=0.5, backend=CPU).fit(X, Y[:, j])
        np.testing.assert_array_equal(both.predict(X)[:, j], one.predict(X))
        np.testing.assert_allclose(both.predict_proba(X)[j], one.predict_proba(X), rtol=1e-6, atol=1e-9)


def test_uniform_kernel_estimators_are_sklearns_radius_neighbors(iris, diabetes):
    X, y = iris
    clf = locus.LocalModeClassifier(bandwidth=0.6, kernel="uniform", backend=CPU).fit(X, y)
    ref = neighbors.RadiusNeighborsClassifier(radius=0.6).fit(X, y)
    np.testing.assert_allclose(clf.predict_proba(X), ref.predict_proba(X), rtol=1e-6, atol=1e-7)
    X, y = diabetes
    reg = locus.KernelRegression(bandwidth=0.1, kernel="uniform", backend=CPU).fit(X, y)
    ref = neighbors.RadiusNeighborsRegressor(radius=0.1).fit(X, y)
    got = reg.predict(X)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, ref.predict(X), rtol=1e-6)


def test_sample_weight_is_repetition(diabetes, iris):
    X, y = diabetes
    w = np.random.default_rng(2).integers(0, 3, len(X))
    rep = np.repeat(np.arange(len(X)), w)
    a = locus.KernelRegression(bandwidth=0.05, backend=CPU).fit(X, y, sample_weight=w).predict(X[:50])
    b = locus.KernelRegression(bandwidth=0.05, backend=CPU).fit(X[rep], y[rep]).predict(X[:50])
    np.testing.assert_allclose(a, b, rtol=1e-5)
    X, y = iris
    w = np.random.default_rng(3).integers(0, 3, len(X))
    rep = np.repeat(np.arange(len(X)), w)
    a = locus.LocalModeClassifier(bandwidth=0.4, backend=CPU).fit(X, y, sample_weight=w).predict_proba(X)
    b = locus.LocalModeClassifier(bandwidth=0.4, backend=CPU).fit(X[rep], y[rep]).predict_proba(X)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="degree=0"):
        locus.KernelRegression(degree=1, backend=CPU).fit(X, y, sample_weight=w)


def test_offset_costs_no_accuracy(offset):
    X, y = offset
    near = X - 1e6
    for degree in (0, 1):
        far = locus.KernelRegression(bandwidth=0.02, degree=degree, backend=CPU).fit(X[::2], y[::2])
        ref = locus.KernelRegression(bandwidth=0.02, degree=degree, backend=CPU).fit(near[::2], y[::2])
        np.testing.assert_allclose(far.predict(X[1::2]), ref.predict(near[1::2]), atol=1e-4)
    kde = locus.KernelDensity(bandwidth=0.02, backend=CPU).fit(X)
    ref = neighbors.KernelDensity(bandwidth=0.02).fit(X)
    np.testing.assert_allclose(kde.score_samples(X[::7]), ref.score_samples(X[::7]), rtol=1e-5, atol=1e-5)


def test_float32_stays_float32(diabetes):
    X, y = diabetes
    X32 = X.astype(np.float32)
    assert locus.KNeighborsRegressor(backend=CPU).fit(X32, y).kneighbors(X32[:3])[0].dtype == np.float32
    assert locus.KernelRegression(bandwidth=0.1, backend=CPU).fit(X32, y.astype(np.float32)).predict(X32).dtype == np.float32
    assert locus.local_mean(X32, X32, X32[:, 0], bandwidth=0.1, backend=CPU).dtype == np.float32
    assert locus.local_mean(X, X, y, bandwidth=0.1, backend=CPU).dtype == np.float64
    assert locus.knn(X[:3], X, 2, backend=CPU).distances.dtype == np.float64


def test_unsupported_arguments_are_named_not_faked(iris):
    X, y = iris
    # The metrics locus computes are in test_metrics.py; these it does not.
    for est in (
        locus.KNeighborsClassifier(metric="mahalanobis", backend=CPU),
        locus.NearestNeighbors(metric="cosine", backend=CPU),
        locus.KNeighborsClassifier(metric="haversine", backend=CPU),  # 4 columns
        locus.KNeighborsClassifier(metric_params={"w": [1, 2, 3, 4]}, backend=CPU),
        locus.KernelDensity(metric="correlation", backend=CPU),
    ):
        with pytest.raises(locus.InputError, match="euclidean|2 columns|metric_params"):
            est.fit(X, y)
    for bad in (dict(algorithm="octree"), dict(leaf_size=0), dict(n_jobs=0)):
        with pytest.raises(locus.InputError):
            locus.KNeighborsClassifier(**bad, backend=CPU).fit(X, y)
    with pytest.raises(TypeError) as e:
        locus.KNeighborsRegressor(n_neighbours=3)
    assert "_KNeighbors" not in str(e.value) and "KNeighborsRegressor" in str(e.value)
    # metric_params={"p": 2} and metric="l2" are the Euclidean distance
    a = locus.KNeighborsClassifier(metric_params={"p": 2}, backend=CPU).fit(X, y).predict(X)
    b = locus.KNeighborsClassifier(metric="l2", backend=CPU).fit(X, y).predict(X)
    np.testing.assert_array_equal(a, b)


def test_fitted_estimators_keep_their_keys_prepared_across_pickle(diabetes):
    X, y = diabetes
    for est in (
        locus.KNeighborsRegressor(backend=CPU),
        locus.KernelRegression(bandwidth=0.1, backend=CPU),
        locus.KernelDensity(bandwidth=0.1, backend=CPU),
        locus.LocalModeClassifier(bandwidth=0.1, backend=CPU),
    ):
        fitted = est.fit(X, y > 140)
        first = fitted._fitted.keyset()
        call = fitted.score_samples if hasattr(fitted, "score_samples") else fitted.predict
        want = call(X[:5])
        assert fitted._fitted.keyset() is first  # prepared once, in fit
        blob = pickle.dumps(fitted)
        assert len(blob) < 2 * X.nbytes + 100_000  # the points once, no key set
        again = pickle.loads(blob)
        np.testing.assert_array_equal(call(X[:5]), want)
        np.testing.assert_array_equal(
            (again.score_samples if hasattr(again, "score_samples") else again.predict)(X[:5]), want
        )
