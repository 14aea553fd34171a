"""A common offset costs no accuracy in the functions and key sets: float64
keys and queries are centred before they are rounded to float32, and
positions get the offset back. Far from the origin, float32 alone would
be off by a good fraction of the spread (its step at 1e6 is 0.06)."""

import numpy as np
import pytest
from reference import kernel_matrix as ref_kernel_matrix
from reference import local_mean as ref_local_mean
from reference import sq_dist

import locus
from locus._centre import mean_offset

CPU = "cpu"
OFFSET = np.array([1e6, -3e5])
T = np.linspace(0, 1, 1000)
# Spread 1 in the first coordinate, 2 in the second.
X = np.column_stack([T, 2 * T[::-1] ** 2]) + OFFSET
Q = X[::37] + np.array([3e-4, -2e-4])
Y = np.sin(6 * T)
TOL = 1e-4  # of the spread


def test_local_means_of_values_and_of_the_keys():
    got = locus.local_mean(Q, X, Y, bandwidth=0.05, backend=CPU)
    np.testing.assert_allclose(got, ref_local_mean(Q, X, Y[:, None], 0.05, "gaussian")[:, 0], atol=TOL)
    # The keys' own local means are positions: the offset comes back.
    got = locus.local_mean(Q, X, bandwidth=0.05, backend=CPU)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, ref_local_mean(Q, X, X, 0.05, "gaussian"), rtol=0, atol=TOL)
    got = locus.self_local_mean(X, bandwidth=0.05, backend=CPU)
    np.testing.assert_allclose(got, ref_local_mean(X, X, X, 0.05, "gaussian"), rtol=0, atol=TOL)


def test_densities_kernel_matrices_and_neighbours():
    h = 0.05
    k = ref_kernel_matrix(Q, X, h, "gaussian")
    want = np.log(k.mean(1) / (2 * np.pi * h * h))
    np.testing.assert_allclose(locus.log_density(Q, X, bandwidth=h, backend=CPU), want, atol=TOL)
    np.testing.assert_allclose(locus.density(Q, X, bandwidth=h, backend=CPU), np.exp(want), rtol=TOL)
    np.testing.assert_allclose(locus.kernel_matrix(Q, X, bandwidth=h, backend=CPU), k, atol=TOL)
    dist, idx = locus.knn(Q, X, 3, backend=CPU)
    d_all = np.sqrt(sq_dist(Q, X))
    np.testing.assert_allclose(dist, np.sort(d_all, axis=1)[:, :3], atol=TOL)
    np.testing.assert_allclose(np.take_along_axis(d_all, idx, axis=1), dist, atol=TOL)


def test_local_models_and_their_positions():
    h = 0.1
    fit = locus.local_polynomial(Q, X, Y, bandwidth=h, backend=CPU)
    near = locus.local_polynomial(Q - OFFSET, X - OFFSET, Y, bandwidth=h, backend=CPU)
    np.testing.assert_allclose(fit, near, atol=TOL)
    pca = locus.local_pca(Q, X, bandwidth=h, n_components=1, backend=CPU)
    np.testing.assert_allclose(pca.means, ref_local_mean(Q, X, X, h, "gaussian"), rtol=0, atol=TOL)
    near = locus.local_pca(Q - OFFSET, X - OFFSET, bandwidth=h, n_components=1, backend=CPU)
    np.testing.assert_allclose(pca.variances, near.variances, rtol=1e-3, atol=1e-8)


def test_clustering_and_bandwidths_match_the_data_moved_to_the_origin():
    blobs = np.concatenate([T[:300, None] * 0.2, 3 + T[:300, None] * 0.2]) @ np.ones((1, 2))
    far = blobs + OFFSET
    est = locus.estimate_bandwidth(far, backend=CPU)
    assert est == pytest.approx(locus.estimate_bandwidth(blobs, backend=CPU), rel=TOL)
    for kw in ({}, {"bin_seeding": True}):
        got = locus.mean_shift(far, bandwidth=1.0, backend=CPU, **kw)
        want = locus.mean_shift(blobs, bandwidth=1.0, backend=CPU, **kw)
        np.testing.assert_array_equal(got.labels, want.labels)
        np.testing.assert_allclose(got.cluster_centers, want.cluster_centers + OFFSET, rtol=0, atol=TOL)
    got = locus.medoid_shift(far[::5], bandwidth=1.0, backend=CPU)
    want = locus.medoid_shift(blobs[::5], bandwidth=1.0, backend=CPU)
    np.testing.assert_array_equal(got.medoids, want.medoids)
    np.testing.assert_allclose(got.cluster_centers, far[::5][got.medoids], rtol=0, atol=TOL)


def test_imputed_coordinates_are_positions_and_observed_ones_stay():
    holes = X.copy()
    holes[::10, 1] = np.nan
    got = locus.impute(holes, bandwidth=0.05, backend=CPU)
    seen = ~np.isnan(holes)
    np.testing.assert_array_equal(got[seen], holes[seen])
    near = locus.impute(holes - OFFSET, bandwidth=0.05, backend=CPU) + OFFSET
    np.testing.assert_allclose(got[~seen], near[~seen], rtol=0, atol=TOL)


def test_key_sets_centre_their_keys_and_every_query():
    ks = locus.Engine(CPU).prepare(X, values=Y)
    np.testing.assert_allclose(
        ks.local_mean(Q, bandwidth=0.05), ref_local_mean(Q, X, Y[:, None], 0.05, "gaussian")[:, 0], atol=TOL
    )
    # float32 queries are moved by the same offset.
    q32 = Q.astype(np.float32)
    np.testing.assert_allclose(
        ks.local_mean(q32, bandwidth=0.05),
        ref_local_mean(q32.astype(np.float64), X, Y[:, None], 0.05, "gaussian")[:, 0],
        atol=TOL,
    )
    dist, _ = ks.knn(Q, 2)
    np.testing.assert_allclose(dist, np.sort(np.sqrt(sq_dist(Q, X)), axis=1)[:, :2], atol=TOL)
    means = ks.local_pca(Q, bandwidth=0.1).means
    np.testing.assert_allclose(means, ref_local_mean(Q, X, X, 0.1, "gaussian"), rtol=0, atol=TOL)


def test_data_near_the_origin_and_float32_data_are_not_moved(rng):
    x = rng.normal(size=(200, 3)) + 0.4
    assert mean_offset(x) is None
    got = locus.self_local_mean(x, bandwidth=0.5, backend=CPU)
    np.testing.assert_array_equal(got, locus.self_local_mean(x.astype(np.float32), bandwidth=0.5, backend=CPU))
    x32 = (X - OFFSET).astype(np.float32) + np.float32(1e6)
    a = locus.local_mean(x32[:50], x32, bandwidth=0.5, backend=CPU)
    assert a.dtype == np.float32
    e = locus.Engine(CPU)
    np.testing.assert_array_equal(a, e.prepare(x32, values=x32).local_mean(x32[:50], bandwidth=0.5))
    # Offsets are rounded to a power of two at or above the range.
    np.testing.assert_array_equal(mean_offset(np.array([[1e6 + 0.25], [1e6 + 0.75]])), [1e6 + 0.5])
    # A column moves only where its largest magnitude at least halves: not
    # values in [0, 1) whose mean rounds to 1, not tiny values beside ones.
    u = rng.uniform(0, 1, (1000, 3))
    u[:, 1] += 0.02  # a mean above 0.5: rounded to 1 on a grid of 1
    assert mean_offset(u) is None
    assert mean_offset(np.array([[1e-7], [2e-7], [1.0], [1.0], [1.0]])) is None
    np.testing.assert_array_equal(mean_offset(np.array([[10.0, 0.5], [11.0, 0.6]])), [10.0, 0.5])
    # The mean taken as the tool and the service take it (from the least
    # value, excesses summed row after row): a tie rounds alike in all
    # three (2.5 to even, where keys.mean() gave 2.5000000000000004 → 3),
    # and keys near the end of the float64 range do not overflow it.
    np.testing.assert_array_equal(mean_offset(np.array([[2.1], [2.7], [2.7]])), [2.0])
    np.testing.assert_array_equal(mean_offset(np.array([[1e308, 0.0], [1e308, 1.0]])), [1e308, 0.0])
