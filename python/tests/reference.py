"""Slow float64 references, written plainly."""

import numpy as np

PROFILES = {
    "gaussian": lambda t: np.exp(-t / 2),
    "epanechnikov": lambda t: np.maximum(1 - t, 0),
    "uniform": lambda t: (t < 1).astype(float),
    "triangular": lambda t: np.maximum(1 - np.sqrt(t), 0),
    "biweight": lambda t: np.maximum(1 - t, 0) ** 2,
    "laplacian": lambda t: np.exp(-np.sqrt(t)),
    "cauchy": lambda t: 1 / (1 + t),
    "cosine": lambda t: np.where(t < 1, np.cos(0.5 * np.pi * np.sqrt(np.minimum(t, 1))), 0.0),
}


def sq_dist(q, x):
    q = np.asarray(q, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    return ((q[:, None, :] - x[None, :, :]) ** 2).sum(-1)


def kernel_matrix(q, x, h, kernel):
    return PROFILES[kernel](sq_dist(q, x) / h**2)


def local_mean(q, x, y, h, kernel):
    k = kernel_matrix(q, x, h, kernel)
    s = k.sum(1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (k @ np.asarray(y, dtype=np.float64)) / s


def assert_close(got, want, rtol=1e-4, atol=1e-5):
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want, rtol=rtol, atol=atol)
