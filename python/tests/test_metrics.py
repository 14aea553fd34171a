"""Metrics other than the Euclidean one, as scikit-learn users pass them:
``KernelDensity(metric=...)``, ``KNeighbors*(metric=..., p=...)``,
``NearestNeighbors`` (``radius_neighbors`` included), ``locus.knn`` and
``locus.log_density`` with ``metric=``, against scikit-learn on iris, a
random set and latitude/longitude data (haversine)."""

import numpy as np
import pytest

import locus

pytest.importorskip("sklearn")
from sklearn import datasets, neighbors  # noqa: E402



@pytest.fixture(params=["cpu", "gpu"])
def backend(request):
    """Each backend; the GPU through conftest's ``gpu`` fixture (skipped,
    or failed under CI=true, without an adapter)."""
    if request.param == "gpu":
        request.getfixturevalue("gpu")
    return request.param


# (metric, p, metric_params) as scikit-learn takes them.
METRICS = [
    ("manhattan", 2, None),
    ("cityblock", 2, None),
    ("chebyshev", 2, None),
    ("minkowski", 3, None),
    ("minkowski", 1.5, None),
    ("minkowski", 2, {"p": 3}),
]


@pytest.fixture(scope="module")
def iris():
    X, y = datasets.load_iris(return_X_y=True)
    # A jitter: iris repeats points, so neighbour sets would tie.
    return X + np.random.default_rng(0).normal(scale=1e-3, size=X.shape), y


@pytest.fixture(scope="module")
def random_set():
    rng = np.random.default_rng(29)
    X = rng.normal(size=(300, 5))
    return X, X @ rng.normal(size=5) + rng.normal(scale=0.1, size=300)


@pytest.fixture(scope="module")
def latlon():
    rng = np.random.default_rng(7)
    lat = np.arcsin(rng.uniform(-1, 1, size=400))
    lon = rng.uniform(-np.pi, np.pi, size=400)
    return np.column_stack([lat, lon])


@pytest.mark.parametrize("metric,p,params", METRICS)
def test_kneighbors_match_scikit_learn(iris, random_set, backend, metric, p, params):
    for X, y in (iris, random_set):
        kw = dict(n_neighbors=7, metric=metric, p=p, metric_params=params)
        ours = locus.KNeighborsRegressor(**kw, weights="distance", backend=backend).fit(X, y)
        ref = neighbors.KNeighborsRegressor(**kw, weights="distance").fit(X, y)
        d, i = ours.kneighbors(X[:40])
        dr, ir = ref.kneighbors(X[:40])
        np.testing.assert_allclose(d, dr, rtol=1e-6, atol=1e-9)
        np.testing.assert_array_equal(i, ir)
        np.testing.assert_allclose(ours.predict(X[::3]), ref.predict(X[::3]), rtol=1e-4, atol=1e-6)
    X, y = iris
    clf = locus.KNeighborsClassifier(n_neighbors=5, metric=metric, p=p, metric_params=params, backend=backend)
    ref = neighbors.KNeighborsClassifier(n_neighbors=5, metric=metric, p=p, metric_params=params)
    np.testing.assert_array_equal(clf.fit(X, y).predict(X), ref.fit(X, y).predict(X))
    assert clf.effective_metric_ == ref.effective_metric_ or metric in ("cityblock", "minkowski")


def test_radius_neighbors_under_a_metric_match_scikit_learn(random_set, backend):
    X, _ = random_set
    for metric, p in (("manhattan", 2), ("chebyshev", 2), ("minkowski", 3)):
        ours = locus.NearestNeighbors(radius=1.6, metric=metric, p=p, backend=backend).fit(X)
        ref = neighbors.NearestNeighbors(radius=1.6, metric=metric, p=p).fit(X)
        d, i = ours.radius_neighbors(X[:30], sort_results=True)
        dr, ir = ref.radius_neighbors(X[:30], sort_results=True)
        for a, b, c, e in zip(d, dr, i, ir):
            np.testing.assert_array_equal(c, e)
            np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize("kernel", ["gaussian", "tophat", "epanechnikov", "exponential", "linear"])
@pytest.mark.parametrize("metric,params", [("manhattan", None), ("chebyshev", None), ("minkowski", {"p": 3})])
def test_kernel_density_matches_scikit_learn(iris, random_set, backend, kernel, metric, params):
    for X, _ in (iris, random_set):
        kw = dict(bandwidth=0.8, kernel=kernel, metric=metric, metric_params=params)
        ours = locus.KernelDensity(**kw, backend=backend).fit(X)
        ref = neighbors.KernelDensity(**kw).fit(X)
        q = X[::4] + 0.05
        np.testing.assert_allclose(
            np.exp(ours.score_samples(q)), np.exp(ref.score_samples(q)), rtol=1e-4, atol=1e-12
        )


def test_haversine_matches_scikit_learn(latlon, backend):
    X = latlon
    ours = locus.NearestNeighbors(n_neighbors=6, radius=0.3, metric="haversine", backend=backend).fit(X)
    ref = neighbors.NearestNeighbors(n_neighbors=6, radius=0.3, metric="haversine").fit(X)
    d, i = ours.kneighbors(X[:50])
    dr, ir = ref.kneighbors(X[:50])
    np.testing.assert_array_equal(i, ir)
    np.testing.assert_allclose(d, dr, rtol=1e-6, atol=1e-9)
    for a, b in zip(ours.radius_neighbors(X[:20])[1], ref.radius_neighbors(X[:20])[1]):
        np.testing.assert_array_equal(np.sort(a), np.sort(b))
    for kernel in ("gaussian", "epanechnikov"):
        kde = locus.KernelDensity(bandwidth=0.2, kernel=kernel, metric="haversine", backend=backend).fit(X)
        kref = neighbors.KernelDensity(bandwidth=0.2, kernel=kernel, metric="haversine").fit(X)
        np.testing.assert_allclose(
            np.exp(kde.score_samples(X[:60])), np.exp(kref.score_samples(X[:60])), rtol=1e-4
        )
    # The functions and a key set take the metric too.
    dist, idx = locus.knn(X[:10], X, 3, metric="haversine", backend=backend)
    np.testing.assert_array_equal(idx, ir[:10, :3])
    np.testing.assert_allclose(dist, dr[:10, :3], rtol=1e-4, atol=1e-6)
    gref = neighbors.KernelDensity(bandwidth=0.2, metric="haversine").fit(X)
    lp = locus.log_density(X[:10], X, bandwidth=0.2, metric="haversine", backend=backend)
    np.testing.assert_allclose(np.exp(lp), np.exp(gref.score_samples(X[:10])), rtol=1e-4)
    ks = locus.Engine(backend).prepare(X.astype(np.float32))
    _, kidx = ks.knn(X[:10], 3, metric="minkowski", p=1)
    _, fidx = locus.knn(X[:10], X, 3, metric="manhattan", backend=backend)
    np.testing.assert_array_equal(kidx, fidx)


def test_log_density_function_matches_scikit_learn(random_set):
    X, _ = random_set
    ref = neighbors.KernelDensity(bandwidth=0.7, metric="chebyshev").fit(X)
    got = locus.log_density(X[:20], X, bandwidth=0.7, metric="chebyshev", backend="cpu")
    np.testing.assert_allclose(np.exp(got), np.exp(ref.score_samples(X[:20])), rtol=1e-4)


def test_unknown_metrics_and_bad_p_are_refused_at_fit(iris):
    X, y = iris
    for kw in (
        dict(metric="mahalanobis"),
        dict(metric="minkowski", p=0.5),
        dict(metric="manhattan", metric_params={"w": 1}),
    ):
        with pytest.raises(locus.InputError, match="metric|p must"):
            locus.KNeighborsClassifier(**kw, backend="cpu").fit(X, y)
    with pytest.raises(locus.InputError, match="supported metrics: 'euclidean'"):
        locus.KernelDensity(metric="cosine", backend="cpu").fit(X)
    with pytest.raises(locus.InputError, match="2 columns"):
        locus.NearestNeighbors(metric="haversine", backend="cpu").fit(X)
    with pytest.raises(locus.InputError):
        locus.knn(X, X, 2, metric="correlation", backend="cpu")
