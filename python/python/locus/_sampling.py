"""Exact draws from a kernel density estimate, for every profile:
``KernelDensity.sample``.

A KDE ``p̂(x) = Σ_j w_j K_h(x − x_j) / Σ_j w_j`` is a mixture, so a draw
picks a key ``j`` with probability ``w_j / Σ w`` and adds ``h·u``, where
``u`` has the density ``∝ k(‖u‖)`` of the profile in ``d`` dimensions: a
direction uniform on the sphere times a radius of density
``∝ r^{d−1} k(r)``. Each radius is drawn exactly, in NumPy, vectorized:

========================  ===============================================
profile                   radius ``r`` (or the whole draw)
========================  ===============================================
gaussian                  the draw itself: ``d`` standard normals
laplacian ``e^{−r}``      ``Gamma(d, 1)``
uniform ``1[r < 1]``      ``U^{1/d}`` (``Beta(d, 1)``)
epanechnikov ``1 − r²``   ``√Beta(d/2, 2)``
biweight ``(1 − r²)²``    ``√Beta(d/2, 3)``
triangular ``1 − r``      ``Beta(d, 2)``
cosine ``cos(πr/2)``      ``Beta(d, 2)``, kept with probability
                          ``sin(πs/2)/(πs/2)``, ``s = 1 − r`` (at least
                          ``2/π`` in every dimension), in vectorized rounds
cauchy ``1/(1 + r²)``     ``d = 1`` only: a standard Cauchy draw
========================  ===============================================

(``r²`` of the epanechnikov and biweight radii has density
``∝ u^{d/2−1}(1 − u)^b``; ``cos(πr/2) = sin(πs/2) ≤ (π/2)·s`` bounds the
cosine by the triangular profile.)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._errors import InputError

__all__ = ["CANONICAL", "check_sampled", "pick_keys", "unit_draws"]

# Every profile name or alias the engine accepts, to its profile.
CANONICAL = {
    "gaussian": "gaussian",
    "rbf": "gaussian",
    "epanechnikov": "epanechnikov",
    "uniform": "uniform",
    "flat": "uniform",
    "tophat": "uniform",
    "triangular": "triangular",
    "linear": "triangular",
    "biweight": "biweight",
    "quartic": "biweight",
    "laplacian": "laplacian",
    "exponential": "laplacian",
    "cauchy": "cauchy",
    "cosine": "cosine",
}


def check_sampled(profile: str, d: int) -> str:
    """The profile of ``profile`` (any alias, any case), checked to be a
    density in ``d`` dimensions.

    Raises
    ------
    InputError
        An unknown profile, or the cauchy profile in ``d ≥ 2`` (no finite
        integral: the density refuses it too).
    """
    name = CANONICAL.get(profile.lower()) if isinstance(profile, str) else None
    if name is None:
        raise InputError(f"kernel must be one of {sorted(CANONICAL)}, got {profile!r}")
    if name == "cauchy" and d != 1:
        raise InputError(
            f"the cauchy profile has no finite integral in d = {d} (only in d = 1); "
            "it cannot be normalized into a density"
        )
    return name


def pick_keys(n_samples: int, n_keys: int, weights: np.ndarray | None, rng: np.random.RandomState) -> np.ndarray:
    """``n_samples`` key indices, each ``j`` with probability
    ``w_j / Σ w`` (``1 / n_keys`` without weights), drawn as scikit-learn
    draws them (one uniform each, the same stream); a key of zero weight is
    never chosen.

    Parameters
    ----------
    n_samples, n_keys : int
    weights : numpy.ndarray of shape (n_keys,) or None
        Non-negative, not all zero.
    rng : numpy.random.RandomState

    Returns
    -------
    numpy.ndarray of shape (n_samples,), int64
    """
    u = rng.uniform(0, 1, size=n_samples)
    if weights is None:
        return np.minimum((u * n_keys).astype(np.int64), n_keys - 1)
    cumsum = np.cumsum(weights.astype(np.float64))
    i = np.searchsorted(cumsum, u * cumsum[-1])
    # Only u = 0 lands on a key of zero weight (the first keys, when they
    # weigh nothing): a draw of probability 0 in exact arithmetic, given
    # to the first key that weighs something.
    first = int(np.argmax(weights > 0))
    return np.where(weights[i] > 0, i, first).astype(np.int64)


def _directions(n: int, d: int, rng: np.random.RandomState) -> np.ndarray:
    """``n`` unit vectors uniform on the sphere in ``d`` dimensions
    (normalized standard normals; a zero draw, of probability 0, drawn
    again)."""
    z = rng.standard_normal((n, d))
    norm = np.sqrt(np.einsum("ij,ij->i", z, z))
    bad = ~(norm > 0)
    while bad.any():
        z[bad] = rng.standard_normal((int(bad.sum()), d))
        norm[bad] = np.sqrt(np.einsum("ij,ij->i", z[bad], z[bad]))
        bad = ~(norm > 0)
    return z / norm[:, None]


def _cosine_radii(n: int, d: int, rng: np.random.RandomState) -> np.ndarray:
    """``n`` radii of density ``∝ r^{d−1} cos(πr/2)`` on ``[0, 1)``:
    ``Beta(d, 2)`` proposals (density ``∝ r^{d−1}(1 − r)``) kept with
    probability ``sin(x)/x``, ``x = π(1 − r)/2``, in vectorized rounds."""
    out = np.empty(n)
    filled = 0
    while filled < n:
        need = n - filled
        # Acceptance is at least 2/π ≈ 0.64: one round usually suffices.
        m = int(need * 1.6) + 16
        r = rng.beta(d, 2.0, size=m)
        x = 0.5 * math.pi * (1.0 - r)
        keep = r[rng.uniform(0, 1, size=m) * x < np.sin(x)][:need]
        out[filled : filled + len(keep)] = keep
        filled += len(keep)
    return out


def _radii(profile: str, n: int, d: int, rng: np.random.RandomState) -> np.ndarray:
    """``n`` radii of density ``∝ r^{d−1} k(r)`` (see the module's table)."""
    if profile == "laplacian":
        return rng.gamma(float(d), 1.0, size=n)
    if profile == "uniform":
        return rng.uniform(0, 1, size=n) ** (1.0 / d)
    if profile == "epanechnikov":
        return np.sqrt(rng.beta(0.5 * d, 2.0, size=n))
    if profile == "biweight":
        return np.sqrt(rng.beta(0.5 * d, 3.0, size=n))
    if profile == "triangular":
        return rng.beta(float(d), 2.0, size=n)
    if profile == "cosine":
        return _cosine_radii(n, d, rng)
    raise AssertionError(f"no radial draw for {profile!r}")


def unit_draws(profile: str, n: int, d: int, rng: np.random.RandomState) -> np.ndarray:
    """``n`` draws in ``d`` dimensions of density ``∝ k(‖u‖)``, the
    profile's kernel at bandwidth 1 (float64, ``n × d``).

    Parameters
    ----------
    profile : str
        A profile of :data:`CANONICAL`'s values, checked by
        :func:`check_sampled` for ``d``.
    n, d : int
    rng : numpy.random.RandomState

    Returns
    -------
    numpy.ndarray of shape (n, d)
    """
    if profile == "gaussian":
        return rng.standard_normal((n, d))
    if profile == "cauchy":
        return rng.standard_cauchy((n, 1))
    return _directions(n, d, rng) * _radii(profile, n, d, rng)[:, None]
