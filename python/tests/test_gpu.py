"""The same calls on a GPU engine (any Vulkan adapter, lavapipe included)."""

import numpy as np
from reference import assert_close, local_mean

import locus


def test_gpu_engine_local_mean_and_keyset_match_reference(gpu, rng):
    info = gpu.info()
    assert info["backend"] == "gpu" and "name" in info and "limits" in info
    q = rng.normal(size=(57, 3))
    x = rng.normal(size=(301, 3))
    y = rng.normal(size=(301, 2))
    for kernel in ("gaussian", "epanechnikov", "cosine"):
        assert_close(locus.local_mean(q, x, y, bandwidth=0.7, kernel=kernel, backend=gpu),
                     local_mean(q, x, y, 0.7, kernel))
    # The cosine density on the GPU is scikit-learn's (d = 3, odd: its
    # constant is right there).
    from sklearn.neighbors import KernelDensity

    ref = KernelDensity(bandwidth=0.9, kernel="cosine").fit(x).score_samples(q)
    got = locus.KernelDensity(bandwidth=0.9, kernel="cosine", backend="gpu").fit(x).score_samples(q)
    f = np.isfinite(ref)
    np.testing.assert_array_equal(np.isfinite(got), f)
    np.testing.assert_allclose(got[f], ref[f], rtol=1e-4)
    ks = gpu.prepare(x, y, labels=x[:, 0] > 0)
    assert_close(ks.local_mean(q, bandwidth=0.7), local_mean(q, x, y, 0.7, "gaussian"))
    np.testing.assert_array_equal(ks.knn(q, 3).indices, locus.knn(q, x, 3, backend="cpu").indices)


def test_gpu_mean_shift_and_estimator_match_cpu(gpu, rng):
    from sklearn.datasets import make_blobs

    x, _ = make_blobs(n_samples=500, centers=3, random_state=1)
    cpu = locus.mean_shift(x, bandwidth=1.5, backend="cpu")
    g = locus.mean_shift(x, bandwidth=1.5, backend=gpu)
    np.testing.assert_array_equal(g.labels, cpu.labels)
    np.testing.assert_allclose(g.cluster_centers, cpu.cluster_centers, atol=1e-4)
    kde = locus.KernelDensity(bandwidth=0.5, backend="gpu").fit(x)
    np.testing.assert_allclose(
        kde.score_samples(x[:50]),
        locus.KernelDensity(bandwidth=0.5, backend="cpu").fit(x).score_samples(x[:50]),
        rtol=1e-5,
    )


def test_gpu_prepared_attention_matches_cpu(gpu, rng):
    k, v = rng.normal(size=(2, 150, 64)), rng.normal(size=(2, 150, 64))
    s = gpu.prepare_attention(k, v)
    for m in (1, 150):
        p = rng.normal(size=(2, m, 64))
        for causal in (False, True):
            want = locus.kernel_softmax(p, k, v, causal=causal, backend="cpu")
            assert_close(s.attend(p, causal=causal), want)
