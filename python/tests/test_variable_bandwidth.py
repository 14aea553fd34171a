"""Variable (sample-point) bandwidths in the functional API: ``bandwidths=``
of ``locus.log_density``/``locus.density`` against a float64 reference,
``locus.knn_bandwidths`` against brute force, bad inputs typed."""

import numpy as np
import pytest

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
