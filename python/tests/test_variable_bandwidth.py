"""Variable bandwidths: ``bandwidths=`` of ``locus.log_density``,
``locus.density`` and ``locus.local_mean`` (per key and per query) against
a float64 reference, key sets prepared with bandwidths, the estimators'
``bandwidth="adaptive"`` (KernelDensity: scores, integral, weights,
sampling by goodness of fit; MeanShift: clusters of different scales), the
k-NN rules against brute force, bad inputs typed."""

import numpy as np
import pytest
from scipy import stats

import locus


def reference_log_density(q, x, h):
    """ln of (1/N) Σ_j φ(‖q − x_j‖/h_j) / h_j^d, φ the standard normal."""
    d = x.shape[1]
    d2 = ((q[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    lw = -0.5 * d2 / h**2 - d * np.log(h) - 0.5 * d * np.log(2 * np.pi)
    top = lw.max(axis=1, keepdims=True)
    return (top + np.log(np.exp(lw - top).sum(axis=1, keepdims=True)))[:, 0] - np.log(len(x))


@pytest.mark.parametrize("d", [1, 2, 8])
def test_log_density_with_per_key_bandwidths(rng, d, gpu):
    x = rng.normal(size=(57, d)) + 1000.0
    q = rng.normal(size=(23, d)) + 1000.0
    h = np.exp(rng.uniform(np.log(1e-3), np.log(1e3), size=57))
    want = reference_log_density(q, x, h)
    for backend in ("cpu", gpu):
        got = locus.log_density(q, x, bandwidths=h, backend=backend)
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
        dens = locus.density(q, x, bandwidths=h, backend=backend)
        np.testing.assert_allclose(dens, np.exp(want), rtol=1e-4, atol=0)


def test_knn_bandwidths_follow_the_rule(rng):
    x = rng.normal(size=(40, 3))
    h = locus.knn_bandwidths(x, 4, alpha=1.5, backend="cpu")
    d = np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1))
    np.fill_diagonal(d, np.inf)
    np.testing.assert_allclose(h, 1.5 * np.sort(d, axis=1)[:, 3], rtol=1e-5)


def test_bad_bandwidths_are_typed(rng):
    x = rng.normal(size=(5, 2))
    with pytest.raises(locus.InputError):
        locus.log_density(x, x, bandwidths=np.ones(4), backend="cpu")
    for bad in (0.0, -1.0, np.nan, np.inf):
        h = np.ones(5)
        h[2] = bad
        with pytest.raises(locus.InputError):
            locus.log_density(x, x, bandwidths=h, backend="cpu")
    with pytest.raises(locus.InputError):
        locus.log_density(x, x, bandwidth=1.0, bandwidths=np.ones(5), backend="cpu")
    with pytest.raises(locus.InputError):
        locus.log_density(x, x, bandwidths=np.ones(5), weights=np.ones(5), backend="cpu")
    with pytest.raises(locus.InputError):
        locus.knn_bandwidths(x, 5, backend="cpu")
    with pytest.raises(locus.InputError):
        locus.knn_bandwidths(x, 1, alpha=0.0, backend="cpu")


def reference_weights(q, x, h, balloon, d):
    """ln K_ij (gaussian) with per-key (or per-query) bandwidths, and the
    per-key factor -d ln h_j."""
    d2 = ((q[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    if balloon:
        return -0.5 * d2 / h[:, None] ** 2
    return -0.5 * d2 / h[None, :] ** 2 - d * np.log(h)[None, :]


@pytest.mark.parametrize("balloon", [False, True])
def test_local_mean_with_variable_bandwidths(rng, balloon, gpu):
    d = 3
    x = rng.normal(size=(61, d)) + 500.0
    q = rng.normal(size=(19, d)) * 1.5 + 500.0
    y = rng.normal(size=(61, 2))
    h = np.exp(rng.uniform(np.log(0.2), np.log(3.0), size=19 if balloon else 61))
    lw = reference_weights(q, x, h, balloon, d)
    w = np.exp(lw - lw.max(axis=1, keepdims=True))
    want = w @ y / w.sum(axis=1, keepdims=True)
    for backend in ("cpu", gpu):
        got = locus.local_mean(q, x, y, bandwidths=h, balloon=balloon, backend=backend)
        assert got.dtype == np.float64 and got.shape == (19, 2)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        one = locus.local_mean(q, x, y[:, 0], bandwidths=h, balloon=balloon, backend=backend)
        np.testing.assert_allclose(one, want[:, 0], rtol=1e-4, atol=1e-5)
        # Without values: the keys' own local means, positions in the data's frame.
        pos = locus.local_mean(q, x, bandwidths=h, balloon=balloon, backend=backend)
        np.testing.assert_allclose(pos, w @ x / w.sum(axis=1, keepdims=True), rtol=1e-6, atol=1e-4)


def test_balloon_densities(rng, gpu):
    d = 2
    x = rng.normal(size=(80, d))
    q = rng.normal(size=(17, d)) * 2
    hq = locus.balloon_bandwidths(q, x, 7, alpha=1.5, backend="cpu")
    dist = np.sqrt(((q[:, None] - x[None]) ** 2).sum(-1))
    np.testing.assert_allclose(hq, 1.5 * np.sort(dist, axis=1)[:, 6], rtol=1e-5)
    lw = reference_weights(q, x, hq.astype(np.float64), True, d)
    top = lw.max(axis=1)
    want = top + np.log(np.exp(lw - top[:, None]).sum(axis=1)) - np.log(len(x))
    want -= 0.5 * d * np.log(2 * np.pi) + d * np.log(hq.astype(np.float64))
    for backend in ("cpu", gpu):
        got = locus.log_density(q, x, bandwidths=hq, balloon=True, backend=backend)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_key_sets_prepared_with_bandwidths(rng, gpu):
    x = rng.normal(size=(300, 2)).astype(np.float32)
    y = rng.normal(size=(300, 3)).astype(np.float32)
    q = rng.normal(size=(40, 2)).astype(np.float32)
    h = locus.knn_bandwidths(x, 8, backend="cpu")
    for e in (locus.Engine("cpu"), gpu):
        ks = e.prepare(x, y, bandwidths=h)
        np.testing.assert_array_equal(ks.bandwidths, h)
        for kernel in ("gaussian", "epanechnikov", "laplacian"):
            want = locus.local_mean(q, x, y, bandwidths=h, kernel=kernel, backend=e)
            np.testing.assert_array_equal(ks.local_mean_variable(q, kernel=kernel), want)
            want = locus.log_density(q, x, bandwidths=h, kernel=kernel, backend=e)
            np.testing.assert_array_equal(ks.log_density_variable(q, kernel=kernel), want)
        plain = e.prepare(x, y)
        assert plain.bandwidths is None
        assert ks.resident_bytes > plain.resident_bytes
        with pytest.raises(locus.InputError, match="without bandwidths"):
            plain.local_mean_variable(q)
    with pytest.raises(locus.InputError):
        locus.Engine("cpu").prepare(x, y, bandwidths=h[:-1])


def test_kernel_density_adaptive_scores(rng, gpu):
    X = np.concatenate([rng.normal(size=(150, 2)) * 0.05, rng.normal(size=(150, 2)) * 2 + 6])
    Q = rng.normal(size=(30, 2)) * 3 + 3
    for backend in ("cpu", "gpu"):
        kde = locus.KernelDensity(bandwidth="adaptive", adaptive_k=7, adaptive_alpha=1.5, backend=backend)
        kde.fit(X)
        h = locus.knn_bandwidths(X, 7, alpha=1.5, backend="cpu")
        assert kde.bandwidth_.shape == (300,)
        np.testing.assert_allclose(kde.bandwidth_, h, rtol=1e-6)
        np.testing.assert_allclose(kde.score_samples(Q), reference_log_density(Q, X, kde.bandwidth_), rtol=1e-5, atol=1e-4)
        # Weighted: Σ w_j K_j / Σ w_j.
        w = rng.uniform(0.1, 3.0, size=300)
        kde.fit(X, sample_weight=w)
        lw = reference_weights(Q, X, kde.bandwidth_, False, 2) - np.log(2 * np.pi)
        top = lw.max(axis=1, keepdims=True)
        want = (top + np.log((np.exp(lw - top) * w).sum(axis=1, keepdims=True)))[:, 0] - np.log(w.sum())
        np.testing.assert_allclose(kde.score_samples(Q), want, rtol=1e-5, atol=1e-4)
    # Given per-point bandwidths, and a clone keeps them.
    hs = np.full(300, 0.7)
    kde = locus.KernelDensity(bandwidth=hs, kernel="epanechnikov", backend="cpu").fit(X)
    fixed = locus.KernelDensity(bandwidth=0.7, kernel="epanechnikov", backend="cpu").fit(X)
    np.testing.assert_allclose(kde.score_samples(Q), fixed.score_samples(Q), rtol=1e-5, atol=1e-6)
    from sklearn.base import clone

    np.testing.assert_array_equal(clone(kde).get_params()["bandwidth"], hs)


@pytest.mark.parametrize("kernel", ["gaussian", "epanechnikov", "exponential"])
def test_kernel_density_adaptive_integrates_to_one(rng, kernel):
    X = np.concatenate([rng.normal(size=(40, 1)) * 0.1, rng.normal(size=(40, 1)) * 3 + 10])
    kde = locus.KernelDensity(bandwidth="adaptive", adaptive_k=5, kernel=kernel, backend="cpu").fit(X)
    grid = np.linspace(-40, 60, 200001)[:, None]
    p = np.exp(kde.score_samples(grid))
    assert abs(p.sum() * (grid[1, 0] - grid[0, 0]) - 1.0) < 1e-4


def mixture_cdf(centres, h, profile):
    """The CDF of the 1-D sample-point mixture (1/N) Σ_j F((t − x_j)/h_j)."""

    def cdf(t):
        z = (np.asarray(t)[:, None] - centres[None, :]) / h[None, :]
        if profile == "gaussian":
            f = stats.norm.cdf(z)
        else:  # uniform on [-1, 1]
            f = np.clip((z + 1) / 2, 0, 1)
        return f.mean(axis=1)

    return cdf


@pytest.mark.parametrize("kernel,profile", [("gaussian", "gaussian"), ("tophat", "uniform")])
def test_kernel_density_adaptive_samples_follow_the_density(rng, kernel, profile):
    # Bandwidths 0.2 to 6 (k = 1), so each shapes the mixture.
    X = np.array([[0.0], [0.5], [5.0], [5.2], [20.0], [26.0]])
    kde = locus.KernelDensity(bandwidth="adaptive", adaptive_k=1, kernel=kernel, backend="cpu").fit(X)
    np.testing.assert_allclose(kde.bandwidth_, [0.5, 0.5, 0.2, 0.2, 6.0, 6.0], rtol=1e-6)
    s = kde.sample(100_000, random_state=3)
    assert s.shape == (100_000, 1)
    h = kde.bandwidth_
    assert stats.kstest(s[:, 0], mixture_cdf(X[:, 0], h, profile)).pvalue > 1e-3
    # The test has power: the same samples against bandwidths 20 % wider.
    assert stats.kstest(s[:, 0], mixture_cdf(X[:, 0], 1.2 * h, profile)).pvalue < 1e-6
    # In two dimensions: points 100 apart with bandwidths 0.5 to 5, so a
    # sample's nearest point is the one it was drawn around; radii in units
    # of that point's bandwidth follow the profile's radial law (the fixed
    # bandwidth sampler's radii, tested against the law in test_sampling.py).
    X2 = np.stack(np.meshgrid(np.arange(10.0), np.arange(10.0)), -1).reshape(-1, 2) * 100
    h2 = rng.uniform(0.5, 5.0, size=100)
    kde2 = locus.KernelDensity(bandwidth=h2, kernel=kernel, backend="cpu").fit(X2)
    fixed = locus.KernelDensity(bandwidth=1.0, kernel=kernel, backend="cpu").fit(np.zeros((1, 2)))
    s2 = kde2.sample(20_000, random_state=4)
    d2 = np.sqrt(((s2[:, None] - X2[None]) ** 2).sum(-1))
    near = d2.argmin(axis=1)
    r = d2[np.arange(len(s2)), near] / h2[near]
    r0 = np.sqrt((fixed.sample(20_000, random_state=5) ** 2).sum(-1))
    assert stats.ks_2samp(r, r0).pvalue > 1e-3
    assert stats.ks_2samp(r / 1.05, r0).pvalue < 1e-6


def test_mean_shift_adaptive_separates_scales(rng, gpu):
    tight = np.concatenate([rng.normal(size=(200, 2)) * 0.05, rng.normal(size=(200, 2)) * 0.05 + [0.5, 0]])
    X = np.concatenate([tight, rng.normal(size=(400, 2)) * 2 + [20, 0]])
    truth = np.repeat([0, 1, 2], [200, 200, 400])
    for backend in ("cpu", "gpu"):
        ms = locus.MeanShift(bandwidth="adaptive", adaptive_k=20, adaptive_alpha=3.0, kernel="gaussian", backend=backend)
        labels = ms.fit_predict(X)
        assert len(ms.cluster_centers_) == 3
        # The same partition as the truth, up to the names of the clusters.
        pairs = set(zip(labels.tolist(), truth.tolist()))
        assert len(pairs) == 3
        assert ms.bandwidth_.shape == (800,)
        r = locus.mean_shift(X, bandwidths=ms.bandwidth_, kernel="gaussian", max_iter=301, backend=backend)
        np.testing.assert_array_equal(r.labels, labels)
        np.testing.assert_array_equal(ms.predict(X[:5]), labels[:5])
    # Flat kernel, bin seeding, orphans: runs and labels every point.
    ms = locus.MeanShift(bandwidth="adaptive", adaptive_k=20, bin_seeding=True, cluster_all=False, backend="cpu")
    labels = ms.fit(X).labels_
    assert labels.shape == (800,) and labels.max() >= 0


def test_adaptive_estimators_refuse_what_they_cannot_do(rng):
    X = rng.normal(size=(30, 2))
    with pytest.raises(locus.InputError):
        locus.KernelDensity(bandwidth="adaptive", adaptive_k=30, backend="cpu").fit(X)
    with pytest.raises(locus.InputError):
        locus.KernelDensity(bandwidth="adaptive", adaptive_alpha=0.0, backend="cpu").fit(X)
    with pytest.raises(locus.InputError):
        locus.KernelDensity(bandwidth=np.ones(29), backend="cpu").fit(X)
    with pytest.raises(locus.InputError):
        locus.KernelDensity(bandwidth="adaptive", metric="manhattan", backend="cpu").fit(X)
    with pytest.raises(locus.InputError):
        locus.KernelDensity(bandwidth="adaptive", kernel=locus.ProductKernel([(1, "gaussian", 1.0), (1, "gaussian", 1.0)]), backend="cpu").fit(X)
    with pytest.raises(ValueError):
        locus.KernelDensity(bandwidth="wide", backend="cpu").fit(X)
    with pytest.raises(locus.InputError):
        locus.MeanShift(bandwidth="wide", backend="cpu").fit(X)
    with pytest.raises(locus.InputError):
        locus.MeanShift(bandwidth=np.ones(3), backend="cpu").fit(X)
    with pytest.raises(locus.InputError):
        locus.MeanShift(bandwidth=np.full(30, np.nan), backend="cpu").fit(X)
    with pytest.raises(locus.InputError):
        locus.mean_shift(X, bandwidth=1.0, bandwidths=np.ones(30), backend="cpu")
    with pytest.raises(locus.InputError):
        locus.mean_shift(X, bandwidths=np.ones(30), blurring=True, backend="cpu")
    with pytest.raises(locus.InputError):
        locus.local_mean(X, X, bandwidth=1.0, bandwidths=np.ones(30), backend="cpu")
    with pytest.raises(locus.InputError):
        locus.local_mean(X, X, bandwidths=np.ones(29), backend="cpu")
    with pytest.raises(locus.InputError):
        locus.local_mean(X, X, bandwidths=np.ones(30), kernel=locus.ProductKernel([(2, "gaussian", 1.0)]), backend="cpu")


def test_balloon_without_bandwidths_is_refused(rng):
    x = rng.normal(size=(10, 2))
    for f in (locus.local_mean, locus.log_density, locus.density):
        with pytest.raises(locus.InputError, match="balloon"):
            f(x, x, bandwidth=1.0, balloon=True, backend="cpu")
