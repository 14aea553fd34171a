"""Every function against a float64 numpy reference or scikit-learn."""

import numpy as np
import pytest
from reference import PROFILES, assert_close, kernel_matrix, local_mean, sq_dist

import locus

CPU = "cpu"


@pytest.mark.parametrize("kernel", sorted(PROFILES))
def test_local_mean_matches_reference(rng, kernel):
    q = rng.normal(size=(37, 3))
    x = rng.normal(size=(101, 3))
    y = rng.normal(size=(101, 2))
    got = locus.local_mean(q, x, y, bandwidth=1.3, kernel=kernel, backend=CPU)
    assert got.dtype == np.float64 and got.shape == (37, 2)
    assert_close(got, local_mean(q, x, y, 1.3, kernel))


def test_local_mean_values_default_to_keys_and_1d_values(rng):
    q = rng.normal(size=(5, 2))
    x = rng.normal(size=(40, 2))
    assert_close(locus.local_mean(q, x, bandwidth=0.7, backend=CPU), local_mean(q, x, x, 0.7, "gaussian"))
    y = rng.normal(size=40)
    got = locus.local_mean(q, x, y, bandwidth=0.7, backend=CPU)
    assert got.shape == (5,)
    assert_close(got, local_mean(q, x, y[:, None], 0.7, "gaussian")[:, 0])


def test_empty_neighbourhood_is_nan_and_tiny_bandwidth_is_nearest(rng):
    x = np.array([[0.0], [1.0], [10.0]])
    y = np.array([1.0, 3.0, 100.0])
    got = locus.local_mean([[0.1], [50.0]], x, y, bandwidth=0.5, kernel="epanechnikov", backend=CPU)
    assert got[0] == 1.0 and np.isnan(got[1])
    got = locus.local_mean([[0.9]], x, y, bandwidth=1e-4, backend=CPU)
    assert got[0] == 3.0


def test_self_local_mean(rng):
    x = rng.normal(size=(60, 2))
    got = locus.self_local_mean(x, bandwidth=0.8, kernel="biweight", backend=CPU)
    assert_close(got, local_mean(x, x, x, 0.8, "biweight"))


def test_kernel_matrix_normalized_and_laplacians(rng):
    q = rng.normal(size=(9, 2))
    x = rng.normal(size=(13, 2))
    k = kernel_matrix(q, x, 0.9, "gaussian")
    assert_close(locus.kernel_matrix(q, x, bandwidth=0.9, backend=CPU), k)
    assert_close(
        locus.kernel_matrix(q, x, bandwidth=0.9, normalize="rows", backend=CPU),
        k / k.sum(1, keepdims=True),
    )
    kk = kernel_matrix(x, x, 0.9, "cauchy")
    d = np.diag(kk.sum(1))
    assert_close(locus.kernel_matrix(x, bandwidth=0.9, kernel="cauchy", laplacian=True, backend=CPU), d - kk)
    assert_close(
        locus.kernel_matrix(x, bandwidth=0.9, kernel="cauchy", laplacian=True, normalize="rows", backend=CPU),
        np.eye(13) - kk / kk.sum(1, keepdims=True),
    )
    assert_close(locus.kernel_matrix(x, bandwidth=0.9, backend=CPU), kernel_matrix(x, x, 0.9, "gaussian"))


@pytest.mark.parametrize(
    "ours,theirs",
    [("gaussian", "gaussian"), ("tophat", "tophat"), ("epanechnikov", "epanechnikov"),
     ("exponential", "exponential"), ("linear", "linear")],
)
def test_density_matches_sklearn(rng, ours, theirs):
    from sklearn.neighbors import KernelDensity

    x = rng.normal(size=(300, 3))
    q = rng.normal(size=(50, 3))
    w = rng.uniform(0.5, 2.0, size=300)
    want = KernelDensity(bandwidth=0.6, kernel=theirs).fit(x, sample_weight=w).score_samples(q)
    got = locus.log_density(q, x, bandwidth=0.6, kernel=ours, weights=w, backend=CPU)
    assert got.dtype == np.float64
    # scikit-learn's weighted tree leaves ~1e-16 where the density is 0 (we give -inf).
    np.testing.assert_allclose(np.exp(got), np.exp(want), rtol=1e-4, atol=1e-12)
    finite = np.exp(want) > 1e-12
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4)
    np.testing.assert_allclose(
        locus.density(q, x, bandwidth=0.6, kernel=ours, weights=w, backend=CPU),
        np.exp(want),
        rtol=1e-4,
        atol=1e-12,
    )


def test_knn_matches_argsort(rng):
    q = rng.normal(size=(20, 4))
    x = rng.normal(size=(77, 4))
    dist, idx = locus.knn(q, x, 6, backend=CPU)
    d = np.sqrt(sq_dist(q, x))
    want = np.argsort(d, axis=1, kind="stable")[:, :6]
    assert idx.dtype == np.int64 and dist.dtype == np.float64
    np.testing.assert_array_equal(idx, want)
    assert_close(dist, np.take_along_axis(d, want, 1))


def _softmax_ref(p, k, v, scale, causal):
    s = scale * np.einsum("...md,...nd->...mn", p, k)
    if causal:
        m, n = s.shape[-2:]
        s = np.where(np.tril(np.ones((m, n), bool)), s, -np.inf)
    s = np.exp(s - s.max(-1, keepdims=True))
    return (s / s.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("causal", [False, True])
def test_kernel_softmax_2d_and_batched(rng, causal):
    p, k, v = rng.normal(size=(3, 11, 4)), rng.normal(size=(3, 11, 4)), rng.normal(size=(3, 11, 5))
    got = locus.kernel_softmax(p, k, v, causal=causal, backend=CPU)
    assert got.shape == (3, 11, 5)
    assert_close(got, _softmax_ref(p, k, v, 0.5, causal))
    got2 = locus.kernel_softmax(p[0], k[0], v[0], scale=0.3, causal=causal, backend=CPU)
    assert_close(got2, _softmax_ref(p[0], k[0], v[0], 0.3, causal))


@pytest.mark.parametrize("causal", [False, True])
def test_prepared_attention_matches_kernel_softmax(rng, causal):
    k, v = rng.normal(size=(3, 20, 4)), rng.normal(size=(3, 20, 5))
    s = locus.Engine(CPU).prepare_attention(k, v)
    assert (s.batches, s.n_keys, s.dim, s.value_cols) == (3, 20, 4, 5)
    assert s.resident_bytes >= 3 * 20 * 9 * 4
    for m in (1, 7, 20):
        p = rng.normal(size=(3, m, 4))
        got = s.attend(p, scale=0.4, causal=causal)
        assert got.shape == (3, m, 5)
        m_off = np.concatenate([np.zeros((3, 20 - m, 4)), p], axis=1)
        want = _softmax_ref(m_off, k, v, 0.4, causal)[:, 20 - m:]
        assert_close(got, want)
    one = locus.Engine(CPU).prepare_attention(k[0], v[0])
    assert_close(one.attend(p[0], scale=0.4), _softmax_ref(p[0], k[0], v[0], 0.4, False))


def test_prepared_attention_errors():
    s = locus.Engine(CPU).prepare_attention(np.ones((2, 5, 3)), np.ones((2, 5, 2)))
    with pytest.raises(locus.InputError):
        s.attend(np.ones((3, 4, 3)))  # another batch count
    with pytest.raises(locus.InputError):
        s.attend(np.ones((2, 4, 7)))  # another dimension
    with pytest.raises(locus.InputError):
        s.attend(np.ones((2, 9, 3)), causal=True)  # M > N under the mask
    with pytest.raises(locus.InputError):
        s.attend(np.ones((1, 2, 4, 3)))
    with pytest.raises(locus.InputError):
        s.attend([[np.nan, 0.0, 0.0]])
    with pytest.raises(locus.InputError):
        locus.Engine(CPU).prepare_attention(np.ones((5, 3)), np.ones((2, 5, 2)))
    with pytest.raises(locus.LocusMemoryError):
        locus.Engine(CPU, memory_limit=1000).prepare_attention(np.ones((500, 3)), np.ones((500, 2)))


def test_feature_local_mean(rng):
    p, k, v = rng.uniform(size=(8, 3)), rng.uniform(size=(12, 3)), rng.normal(size=(12, 2))
    w = p @ k.T
    assert_close(locus.feature_local_mean(p, k, v, backend=CPU), (w @ v) / w.sum(1, keepdims=True))
    causal = locus.feature_local_mean(p, k[:8], v[:8], causal=True, backend=CPU)
    wc = np.tril(p @ k[:8].T)
    assert_close(causal, (wc @ v[:8]) / wc.sum(1, keepdims=True))


def _blobs(rng, n):
    from sklearn.datasets import make_blobs

    x, _ = make_blobs(n_samples=n, centers=4, cluster_std=0.6, random_state=int(rng.integers(1000)))
    return x.astype(np.float32)


def _same_partition(a, b):
    pairs = set(zip(a.tolist(), b.tolist()))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


@pytest.mark.parametrize("bin_seeding", [False, True])
def test_mean_shift_partition_equals_sklearn(rng, bin_seeding):
    from sklearn.cluster import MeanShift

    x = _blobs(rng, 400)
    ref = MeanShift(bandwidth=1.5, bin_seeding=bin_seeding).fit(x.astype(np.float64))
    got = locus.mean_shift(x, bandwidth=1.5, bin_seeding=bin_seeding, backend=CPU)
    assert _same_partition(got.labels, ref.labels_)
    assert len(got.cluster_centers) == len(ref.cluster_centers_)
    np.testing.assert_allclose(got.cluster_centers, ref.cluster_centers_, atol=1e-3)
    assert got.converged and got.bandwidth == 1.5


def test_mean_shift_estimated_bandwidth_and_given_seeds(rng):
    from sklearn.cluster import estimate_bandwidth

    x = _blobs(rng, 300)
    h = locus.estimate_bandwidth(x, quantile=0.2, backend=CPU)
    assert h == pytest.approx(estimate_bandwidth(x.astype(np.float64), quantile=0.2), rel=1e-4)
    r = locus.mean_shift(x, seeds=x[::50], bandwidth=2.0, backend=CPU)
    assert r.labels.shape == (300,) and r.labels.min() >= 0
    r = locus.mean_shift(x, bandwidth="scott", kernel="gaussian", backend=CPU)
    assert r.bandwidth > 0


def _medoid_shift_ref(x, h):
    k = kernel_matrix(x, x, h, "gaussian")
    k /= k.sum(1, keepdims=True)
    nxt = np.argmin(k @ sq_dist(x, x), axis=1)
    for _ in range(len(x)):
        nxt = nxt[nxt]
    return nxt


def test_medoid_shift_matches_reference(rng):
    x = _blobs(rng, 120)
    r = locus.medoid_shift(x, bandwidth=1.0, backend=CPU)
    want = _medoid_shift_ref(x, 1.0)
    np.testing.assert_array_equal(r.medoids[r.labels], want)
    d = np.sqrt(sq_dist(x, x)).astype(np.float32)
    rp = locus.medoid_shift(d, bandwidth=1.0, metric="precomputed", backend=CPU)
    assert rp.labels.shape == (120,)
