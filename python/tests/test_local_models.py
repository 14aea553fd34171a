"""Local linear regression, local PCA and scores against float64 numpy
references (and statsmodels' local linear regression when installed)."""

import numpy as np
import pytest
from reference import PROFILES, assert_close, kernel_matrix, local_mean, sq_dist

import locus

CPU = "cpu"


def ref_local_linear(q, x, y, h, kernel):
    """Weighted least squares of y ≈ a + bᵀ(x − q) per query (float64)."""
    q, x, y = (np.asarray(a, dtype=np.float64) for a in (q, x, y))
    w = kernel_matrix(q, x, h, kernel)
    fit = np.empty((len(q), y.shape[1]))
    slopes = np.empty((len(q), y.shape[1], x.shape[1]))
    for i, qi in enumerate(q):
        z = np.hstack([np.ones((len(x), 1)), x - qi])
        a = z.T @ (w[i][:, None] * z)
        beta = np.linalg.solve(a, z.T @ (w[i][:, None] * y))
        fit[i] = beta[0]
        slopes[i] = beta[1:].T
    return fit, slopes


@pytest.mark.parametrize("kernel", ["gaussian", "epanechnikov", "biweight", "cauchy"])
def test_local_linear_matches_reference(rng, kernel):
    x = rng.uniform(-1, 1, size=(300, 2))
    y = np.stack([np.sin(2 * x[:, 0]) + x[:, 1], x[:, 0] * x[:, 1] + 5], 1)
    q = rng.uniform(-0.8, 0.8, size=(40, 2))
    h = 0.3 if kernel in ("gaussian", "cauchy") else 0.7
    fit, slopes = locus.local_polynomial(q, x, y, bandwidth=h, kernel=kernel, return_slopes=True, backend=CPU)
    want_fit, want_slopes = ref_local_linear(q, x, y, h, kernel)
    assert fit.dtype == np.float64 and fit.shape == (40, 2) and slopes.shape == (40, 2, 2)
    assert_close(fit, want_fit, rtol=1e-4, atol=1e-4)
    assert_close(slopes, want_slopes, rtol=1e-3, atol=1e-3)


def test_local_polynomial_shapes_degree_zero_and_errors(rng):
    x = rng.normal(size=(100, 3))
    y = rng.normal(size=100)
    q = rng.normal(size=(7, 3))
    fit, slopes = locus.local_polynomial(q, x, y, bandwidth=1.0, return_slopes=True, backend=CPU)
    assert fit.shape == (7,) and slopes.shape == (7, 3)
    zero = locus.local_polynomial(q, x, y, bandwidth=1.0, degree=0, backend=CPU)
    assert_close(zero, local_mean(q, x, y[:, None], 1.0, "gaussian")[:, 0])
    with pytest.raises(locus.InputError, match="degree"):
        locus.local_polynomial(q, x, y, bandwidth=1.0, degree=2, backend=CPU)
    with pytest.raises(locus.InputError, match="return_slopes"):
        locus.local_polynomial(q, x, y, bandwidth=1.0, degree=0, return_slopes=True, backend=CPU)
    with pytest.raises(locus.InputError, match="d ≤ 64"):
        wide = rng.normal(size=(10, 65))
        locus.local_polynomial(wide, wide, rng.normal(size=10), bandwidth=1.0, backend=CPU)


def test_local_pca_matches_weighted_covariance(rng):
    t = rng.uniform(0, 2 * np.pi, size=500)
    x = np.stack([np.cos(t), np.sin(t), 0.01 * rng.normal(size=500)], 1)
    q = x[:20] + 0.01
    r = locus.local_pca(q, x, bandwidth=0.3, n_components=3, backend=CPU)
    w = kernel_matrix(q, x, 0.3, "gaussian")
    for i in range(len(q)):
        wi = w[i] / w[i].sum()
        mean = wi @ x
        cov = (x - mean).T @ (wi[:, None] * (x - mean))
        lam, vec = np.linalg.eigh(cov)
        assert_close(r.means[i], mean, atol=1e-5)
        assert_close(r.variances[i], lam[::-1], rtol=1e-3, atol=1e-6)
        # The leading direction is the circle's tangent, up to sign.
        assert abs(float(r.components[i, 0] @ vec[:, -1])) > 1 - 1e-4
    with pytest.raises(locus.InputError, match="components"):
        locus.local_pca(q, x, bandwidth=0.3, n_components=4, backend=CPU)


def test_score_is_the_gradient_of_the_log_density(rng):
    x = rng.normal(size=(300, 2))
    q = rng.normal(size=(15, 2)) * 0.5
    h = 0.6
    got = locus.score(q, x, bandwidth=h, backend=CPU)
    w = PROFILES["gaussian"](sq_dist(q, x) / h**2)
    want = (w @ x / w.sum(1, keepdims=True) - q) / h**2
    assert_close(got, want, rtol=1e-4, atol=1e-4)
    with pytest.raises(locus.InputError, match="uniform"):
        locus.score(q, x, bandwidth=h, kernel="uniform", backend=CPU)


def test_kernel_regression_degree_one(rng):
    x = rng.uniform(0, 1, size=(200, 1))
    y = 3 * x[:, 0] - 1
    reg = locus.KernelRegression(bandwidth=0.1, degree=1, backend=CPU).fit(x, y)
    # A linear target is reproduced up to the edges; the local mean is not.
    edges = np.array([[0.0], [1.0]])
    assert_close(reg.predict(edges), [-1.0, 2.0], atol=1e-4)
    nw = locus.KernelRegression(bandwidth=0.1, degree=0, backend=CPU).fit(x, y)
    assert abs(nw.predict(edges)[0] + 1.0) > 0.05
    with pytest.raises(ValueError, match="degree"):
        locus.KernelRegression(degree=2).fit(x, y)


def test_local_linear_matches_statsmodels_on_diabetes():
    kr = pytest.importorskip("statsmodels.nonparametric.kernel_regression")
    from sklearn.datasets import load_diabetes

    data = load_diabetes()
    for cols, h in (([2], 0.02), ([2, 3, 8], 0.04)):
        x = data.data[:, cols].astype(np.float32)
        y = data.target.astype(np.float32)
        ref = kr.KernelReg(y.astype(np.float64), x.astype(np.float64), var_type="c" * len(cols), reg_type="ll", bw=[h] * len(cols))
        want, _ = ref.fit(x.astype(np.float64))
        got = locus.local_polynomial(x, x, y, bandwidth=h, backend=CPU)
        assert_close(got, want, rtol=1e-4, atol=0)


def test_gpu_local_models_match_cpu(gpu, rng):
    x = rng.uniform(-1, 1, size=(250, 3))
    y = rng.normal(size=(250, 2)) + x[:, :1]
    q = rng.uniform(-0.7, 0.7, size=(33, 3))
    for kernel in ("gaussian", "biweight"):
        f_cpu, s_cpu = locus.local_polynomial(q, x, y, bandwidth=0.8, kernel=kernel, return_slopes=True, backend=CPU)
        f_gpu, s_gpu = locus.local_polynomial(q, x, y, bandwidth=0.8, kernel=kernel, return_slopes=True, backend=gpu)
        assert_close(f_gpu, f_cpu, rtol=1e-4, atol=1e-4)
        assert_close(s_gpu, s_cpu, rtol=1e-3, atol=1e-3)
        p_cpu = locus.local_pca(q, x, bandwidth=0.8, kernel=kernel, n_components=2, backend=CPU)
        p_gpu = locus.local_pca(q, x, bandwidth=0.8, kernel=kernel, n_components=2, backend=gpu)
        assert_close(p_gpu.variances, p_cpu.variances, rtol=1e-3, atol=1e-6)
    assert_close(locus.score(q, x, bandwidth=0.5, backend=gpu), locus.score(q, x, bandwidth=0.5, backend=CPU), rtol=1e-4, atol=1e-4)


def ref_impute(q, x, h):
    """One masked round in float64 (gaussian)."""
    q = np.asarray(q, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    d = x.shape[1]
    out = q.copy()
    for i, qi in enumerate(q):
        diff = (qi[None, :] - x) ** 2
        shared = ~np.isnan(diff)
        n = shared.sum(1)
        t = np.where(n > 0, np.nansum(diff, 1) * d / np.maximum(n, 1), np.inf) / h**2
        w = np.exp(-t / 2)
        for c in np.flatnonzero(np.isnan(qi)):
            obs = ~np.isnan(x[:, c])
            out[i, c] = (w[obs] @ x[obs, c]) / w[obs].sum()
    return out


def test_impute_matches_reference_and_knn_imputer_limit(rng):
    from sklearn.impute import KNNImputer

    full = rng.normal(size=(200, 6)).cumsum(axis=1)
    x = full.copy()
    x[rng.uniform(size=x.shape) < 0.2] = np.nan
    got = locus.impute(x, bandwidth=1.5, backend=CPU)
    assert_close(got, ref_impute(x, x, 1.5), rtol=1e-4, atol=1e-4)
    imp = locus.LocalMeanImputer(bandwidth=1.5, backend=CPU)
    assert_close(imp.fit_transform(x), got)
    q = x[:20].copy()
    assert_close(imp.transform(q), ref_impute(q, x, 1.5), rtol=1e-4, atol=1e-4)
    # A small bandwidth tends to 1-NN imputation (KNNImputer, k = 1)
    # wherever the nearest row observes the feature.
    small = locus.impute(x, bandwidth=0.05, backend=CPU)
    knn1 = KNNImputer(n_neighbors=1).fit_transform(x)
    assert np.mean(np.abs(small - knn1) < 1e-3) > 0.9
    two = locus.LocalMeanImputer(bandwidth=1.5, iterations=2, backend=CPU).fit_transform(x)
    assert np.isfinite(two).all() and (two[~np.isnan(x)] == x[~np.isnan(x)]).all()
    with pytest.raises(ValueError, match="iterations"):
        locus.LocalMeanImputer(iterations=0).fit(x)
    bad = x.copy()
    bad[:, 2] = np.nan
    # As KNNImputer: a feature never observed in fit is dropped.
    assert locus.LocalMeanImputer(backend=CPU).fit_transform(bad).shape == (200, 5)
    with pytest.raises(locus.InputError, match="column 2"):
        locus.impute(bad, bandwidth=1.0, backend=CPU)


def test_gpu_impute_matches_cpu(gpu, rng):
    x = rng.normal(size=(150, 5))
    x[rng.uniform(size=x.shape) < 0.25] = np.nan
    for it in (1, 2):
        cpu = locus.impute(x, bandwidth=1.2, iterations=it, backend=CPU)
        assert_close(locus.impute(x, bandwidth=1.2, iterations=it, backend=gpu), cpu, rtol=1e-4, atol=1e-4)


def test_key_set_local_models_match_the_functions(rng):
    x = rng.uniform(-1, 1, size=(300, 2))
    y = np.sin(3 * x[:, 0]) + x[:, 1]
    q = rng.uniform(-0.8, 0.8, size=(17, 2))
    ks = locus.Engine("cpu").prepare(x, values=y)
    fit, slopes = ks.local_polynomial(q, bandwidth=0.3, return_slopes=True)
    want_fit, want_slopes = locus.local_polynomial(q, x, y, bandwidth=0.3, return_slopes=True, backend=CPU)
    assert fit.shape == (17,) and slopes.shape == (17, 2)
    assert_close(fit, want_fit, rtol=1e-4, atol=1e-4)
    assert_close(slopes, want_slopes, rtol=1e-3, atol=1e-3)
    r = ks.local_pca(q, bandwidth=0.3, n_components=2)
    w = locus.local_pca(q, x, bandwidth=0.3, n_components=2, backend=CPU)
    assert_close(r.variances, w.variances, rtol=1e-3, atol=1e-6)
    with pytest.raises(locus.InputError, match="degree"):
        ks.local_polynomial(q, bandwidth=0.3, degree=2)


def test_bad_parameters_raise_typed_errors(rng):
    x = rng.normal(size=(20, 2))
    y = rng.normal(size=20)
    with pytest.raises(locus.InputError, match="degree"):
        locus.local_polynomial(x, x, y, bandwidth=1.0, degree=2**70, backend=CPU)
    with pytest.raises(locus.InputError, match="too large"):
        locus.local_pca(x, x, bandwidth=1.0, n_components=2**70, backend=CPU)
    with pytest.raises(locus.InputError, match="too large"):
        locus.impute(x, bandwidth=1.0, iterations=2**70, backend=CPU)
    with pytest.raises(ValueError, match="kernel"):
        locus.LocalMeanImputer(kernel="foo").fit_transform(x)
