"""Product (joint, bilateral) kernels from Python: every op taking a
kernel accepts a ``locus.ProductKernel``, against float64 references built
block by block; the errors of a product that does not fit."""

import pickle

import numpy as np
import pytest
from reference import PROFILES, assert_close, sq_dist

import locus

BLOCKS = [(2, "uniform", 0.9), (3, "gaussian", 0.6)]


def product_matrix(q, x, blocks):
    k = np.ones((len(q), len(x)))
    c = 0
    for dims, profile, h in blocks:
        k *= PROFILES[profile](sq_dist(q[:, c : c + dims], x[:, c : c + dims]) / h**2)
        c += dims
    return k


def ref_local_mean(q, x, y, blocks):
    k = product_matrix(q, x, blocks)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (k @ np.asarray(y, dtype=np.float64)) / k.sum(1, keepdims=True)


@pytest.fixture
def data(rng):
    x = rng.uniform(-1, 1, (200, 5)).astype(np.float32)
    y = rng.normal(size=(200, 2)).astype(np.float32)
    q = rng.uniform(-1, 1, (30, 5)).astype(np.float32)
    return q, x, y


@pytest.mark.parametrize(
    "blocks",
    [
        BLOCKS,
        [(1, "triangular", 1.2), (2, "biweight", 1.3), (2, "cauchy", 0.5)],
        [(2, "epanechnikov", 1.1), (3, "laplacian", 0.8)],
    ],
)
def test_local_mean_and_kernel_matrix_match_the_reference(data, blocks):
    q, x, y = data
    k = locus.ProductKernel(blocks)
    assert_close(locus.local_mean(q, x, y, kernel=k, backend="cpu"), ref_local_mean(q, x, y, blocks))
    assert_close(
        locus.kernel_matrix(q, x, kernel=k, backend="cpu"), product_matrix(q, x, blocks), atol=1e-6
    )


def test_density_local_models_and_key_sets(data):
    q, x, y = data
    blocks = [(2, "gaussian", 0.5), (3, "gaussian", 0.3)]
    k = locus.ProductKernel(blocks)
    # A product of gaussians: the gaussian with per-coordinate bandwidths.
    h = np.array([0.5, 0.5, 0.3, 0.3, 0.3])
    u = (q[:, None, :].astype(np.float64) - x[None]) / h
    want = np.log(np.mean(np.prod(np.exp(-u**2 / 2) / (h * np.sqrt(2 * np.pi)), -1), 1))
    assert_close(locus.log_density(q, x, kernel=k, backend="cpu"), want, rtol=1e-5, atol=1e-5)
    fit = locus.local_polynomial(q, x, y, kernel=k, degree=1, backend="cpu")
    assert fit.shape == (30, 2) and np.isfinite(fit).all()
    pca = locus.local_pca(q, x, kernel=k, n_components=2, backend="cpu")
    assert pca.components.shape == (30, 2, 5)
    s = locus.score(q, x, kernel=k, backend="cpu")
    assert s.shape == (30, 5) and np.isfinite(s).all()
    ks = locus.Engine("cpu").prepare(x, y)
    assert_close(ks.local_mean(q, kernel=k), locus.local_mean(q, x, y, kernel=k, backend="cpu"))
    assert_close(ks.log_density(q, kernel=k), want, rtol=1e-5, atol=1e-5)


def test_joint_mean_shift_scales_each_block(rng):
    centres = np.array([[0, 0, 0.0], [5, 5, 0.2], [10, 0, 0.4]])
    x = np.repeat(centres, 40, 0) + rng.normal(0, [0.4, 0.4, 0.01], (120, 3))
    x = x.astype(np.float32)
    k = locus.ProductKernel([(2, "gaussian", 1.5), (1, "gaussian", 0.05)])
    r = locus.mean_shift(x, kernel=k, backend="cpu")
    assert len(r.cluster_centers) == 3
    assert r.bandwidth == 1.0
    # The same as the radial shift of the scaled points, modes scaled back.
    scale = np.array([1.5, 1.5, 0.05], dtype=np.float32)
    radial = locus.mean_shift(x / scale, bandwidth=1.0, kernel="gaussian", backend="cpu")
    np.testing.assert_array_equal(r.labels, radial.labels)
    assert_close(r.cluster_centers, radial.cluster_centers * scale, rtol=1e-4, atol=1e-4)


def test_gpu_matches_cpu(gpu, data):
    q, x, y = data
    k = locus.ProductKernel(BLOCKS)
    assert_close(
        locus.local_mean(q, x, y, kernel=k, backend=gpu),
        locus.local_mean(q, x, y, kernel=k, backend="cpu"),
    )


def test_the_kernel_object_and_its_errors(data):
    q, x, y = data
    k = locus.ProductKernel(BLOCKS)
    assert k.dims == 5 and k.blocks == ((2, "uniform", 0.9), (3, "gaussian", 0.6))
    assert pickle.loads(pickle.dumps(k)) == k and hash(k) == hash(locus.ProductKernel(BLOCKS))
    bad_blocks = ([], [(0, "gaussian", 1.0)], [(1, "boxcar", 1.0)], [(1, "gaussian", -1.0)], [(1, 2)], [(2**64, "gaussian", 1.0)])
    for bad in bad_blocks:
        with pytest.raises(locus.InputError):
            locus.ProductKernel(bad)
    with pytest.raises(locus.InputError, match="no bandwidth"):
        locus.local_mean(q, x, y, bandwidth=1.0, kernel=k, backend="cpu")
    with pytest.raises(TypeError, match="bandwidth must be a number"):
        locus.local_mean(q, x, y, backend="cpu")
    with pytest.raises(locus.InputError, match="cover 4 coordinates"):
        locus.local_mean(q, x, y, kernel=locus.ProductKernel([(4, "gaussian", 1.0)]), backend="cpu")
    with pytest.raises(locus.InputError, match="shadow|derivative"):
        locus.score(q, x, kernel=k, backend="cpu")


def test_joint_medoid_shift(rng):
    centres = np.array([[0, 0, 0.0], [5, 5, 0.2], [10, 0, 0.4]])
    x = (np.repeat(centres, 30, 0) + rng.normal(0, [0.4, 0.4, 0.01], (90, 3))).astype(np.float32)
    k = locus.ProductKernel([(2, "gaussian", 1.5), (1, "gaussian", 0.05)])
    r = locus.medoid_shift(x, kernel=k, backend="cpu")
    scale = np.array([1.5, 1.5, 0.05], dtype=np.float32)
    radial = locus.medoid_shift(x / scale, bandwidth=1.0, backend="cpu")
    np.testing.assert_array_equal(r.labels, radial.labels)
    np.testing.assert_array_equal(r.medoids, radial.medoids)
    with pytest.raises(locus.InputError, match="no bandwidth"):
        locus.medoid_shift(x, kernel=k, bandwidth=1.0, backend="cpu")


def test_estimators_take_a_product_kernel(rng):
    x = rng.uniform(-1, 1, (150, 3)).astype(np.float32)
    y = (x[:, 0] + x[:, 2] ** 2).astype(np.float32)
    k = locus.ProductKernel([(1, "gaussian", 0.4), (2, "epanechnikov", 1.2)])
    reg = locus.KernelRegression(bandwidth=None, kernel=k, backend="cpu").fit(x, y)
    assert_close(reg.predict(x[:5]), locus.local_mean(x[:5], x, y, kernel=k, backend="cpu"))
    kde = locus.KernelDensity(bandwidth=None, kernel=k, backend="cpu").fit(x)
    assert_close(kde.score_samples(x[:5]), locus.log_density(x[:5], x, kernel=k, backend="cpu"))
    labels = (x[:, 0] > 0).astype(int)
    clf = locus.LocalModeClassifier(bandwidth=None, kernel=k, backend="cpu").fit(x, labels)
    assert (clf.predict(x) == labels).mean() > 0.9
    holes = x.copy()
    holes[::7, 1] = np.nan
    filled = locus.LocalMeanImputer(bandwidth=None, kernel=k, backend="cpu").fit_transform(holes)
    assert np.isfinite(filled).all()
    ms = locus.MeanShift(kernel=locus.ProductKernel([(3, "gaussian", 0.5)]), backend="cpu").fit(x)
    assert len(ms.cluster_centers_) >= 1
    # Labels as fit gives them: nearest centre in units of each block.
    pts = np.column_stack([rng.uniform(0, 30, 400), rng.choice([0.0, 500.0], 400)]).astype(np.float32)
    jk = locus.ProductKernel([(1, "uniform", 8.0), (1, "gaussian", 100.0)])
    ms = locus.MeanShift(kernel=jk, backend="cpu").fit(pts)
    np.testing.assert_array_equal(ms.predict(pts), ms.labels_)
    with pytest.raises(ValueError, match="bandwidth=None"):
        locus.KernelRegression(kernel=k, backend="cpu").fit(x, y)
