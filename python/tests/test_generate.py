"""locus.generate (local-mean diffusion): the last step against a float64
local mean written here, determinism, the energy distance to held-out
data along the schedule, offsets, the GPU, bad arguments."""

import numpy as np
import pytest
from scipy.spatial.distance import cdist
from sklearn.datasets import make_moons

import locus

CPU = "cpu"


def gaussian_local_mean(q, x, h):
    """Σ K(q, x_i) x_i / Σ K(q, x_i) with K = exp(−‖q − x‖²/2h²), in float64."""
    lw = -cdist(q, x, "sqeuclidean") / (2 * h * h)
    w = np.exp(lw - lw.max(axis=1, keepdims=True))
    return (w @ x) / w.sum(axis=1, keepdims=True)


def energy_distance(a, b):
    return 2 * cdist(a, b).mean() - cdist(a, a).mean() - cdist(b, b).mean()


@pytest.fixture(scope="module")
def moons():
    return make_moons(n_samples=1500, noise=0.05, random_state=0)[0]


def test_the_last_step_is_the_local_mean_over_the_data(moons):
    r = locus.generate(moons, n_samples=300, random_state=1, return_trajectory=True, backend=CPU)
    assert r.samples.shape == (300, 2) and r.samples.dtype == np.float64
    assert len(r.trajectory) == 21 and len(r.sigmas) == len(r.bandwidths) == 20
    np.testing.assert_array_equal(r.trajectory[-1], r.samples)
    np.testing.assert_allclose(r.bandwidths, r.sigmas)
    # The default levels: geometric from 0.01 to 0.5 of the data's scale.
    scale = np.sqrt(((moons - moons.mean(0)) ** 2).sum(1).mean())
    np.testing.assert_allclose(r.sigmas, np.geomspace(0.01 * scale, 0.5 * scale, 20), rtol=1e-9)
    # X_0 is the data itself: the last step is checkable here in float64.
    want = gaussian_local_mean(r.trajectory[-2], moons, r.bandwidths[0])
    np.testing.assert_allclose(r.samples, want, rtol=1e-4, atol=1e-5)
    assert r.empty_rows == 0


def test_random_state_fixes_every_draw(moons):
    a = locus.generate(moons, n_samples=50, random_state=7, backend=CPU).samples
    np.testing.assert_array_equal(a, locus.generate(moons, n_samples=50, random_state=7, backend=CPU).samples)
    b = locus.generate(moons, n_samples=50, random_state=8, backend=CPU).samples
    assert not np.array_equal(a, b)
    rs = np.random.RandomState(3)
    first = locus.generate(moons, n_samples=5, random_state=rs, backend=CPU).samples
    second = locus.generate(moons, n_samples=5, random_state=rs, backend=CPU).samples
    assert not np.array_equal(first, second)
    g = locus.generate(moons, n_samples=5, random_state=np.random.default_rng(3), backend=CPU)
    assert g.samples.shape == (5, 2)
    assert locus.generate(moons, n_samples=5, backend=CPU).samples.shape == (5, 2)
    assert locus.generate(moons, n_samples=5, random_state=2**64 - 1, backend=CPU).samples.shape == (5, 2)


def test_an_offset_moves_the_samples_with_the_data(moons):
    a = locus.generate(moons, n_samples=100, random_state=2, backend=CPU).samples
    b = locus.generate(moons + 1e4, n_samples=100, random_state=2, backend=CPU).samples
    np.testing.assert_allclose(b - 1e4, a, atol=1e-6)
    f = locus.generate(moons.astype(np.float32), n_samples=10, random_state=2, backend=CPU).samples
    assert f.dtype == np.float32


def test_the_samples_approach_held_out_data_along_the_schedule(moons):
    """Observed with h = σ: the distance dips early (the posterior means
    pull the samples towards the middle), rises while their spread is too
    short, then falls at every step over the last two thirds; with h = σ/2
    it falls at every step. Both end far below the start."""
    held_out = make_moons(n_samples=600, noise=0.05, random_state=1)[0]
    for factor, first in ((1.0, 7), (0.5, 0)):
        r = locus.generate(moons, n_samples=400, random_state=3, bandwidth_factor=factor,
                           return_trajectory=True, backend=CPU)
        ed = [energy_distance(s, held_out) for s in r.trajectory]
        print(factor, np.round(ed, 4))
        assert ed[-1] < 0.25 * ed[0], ed
        assert all(b <= a * 1.02 + 1e-4 for a, b in zip(ed[first:], ed[first + 1:])), ed


def test_given_levels_bandwidths_and_compact_kernels(moons):
    r = locus.generate(moons, n_samples=60, sigmas=[0.02, 0.1, 0.4], bandwidth=[0.05, 0.2, 0.8],
                       kernel="epanechnikov", random_state=0, backend=CPU)
    np.testing.assert_array_equal(r.sigmas, [0.02, 0.1, 0.4])
    np.testing.assert_array_equal(r.bandwidths, [0.05, 0.2, 0.8])
    assert np.isfinite(r.samples).all()
    lin = locus.generate(moons, n_samples=5, steps=4, sigmas="linear", sigma_min=0.1, sigma_max=0.4,
                         backend=CPU)
    np.testing.assert_allclose(lin.sigmas, [0.1, 0.2, 0.3, 0.4])


def test_the_gpu_gives_the_cpus_samples(gpu, moons):
    kw = dict(n_samples=200, random_state=4)
    cpu = locus.generate(moons, backend=CPU, **kw).samples
    got = locus.generate(moons, backend=gpu, **kw).samples
    # Each step agrees to float32 rounding; the last, smallest level turns
    # that into moves of ~1e-4 at near ties between data points.
    np.testing.assert_allclose(got, cpu, atol=1e-3)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(n_samples=0), locus.InputError, "samples"),
        (dict(steps=0), locus.InputError, "steps"),
        (dict(sigmas="cosine"), locus.InputError, "sigmas"),
        (dict(sigmas=[0.1, -0.2]), locus.InputError, "sigmas"),
        (dict(sigmas=[[0.1]]), locus.InputError, "1-D"),
        (dict(sigmas=[0.1], sigma_min=0.1), locus.InputError, "sigma_min"),
        (dict(sigma_min=2.0, sigma_max=1.0), locus.InputError, "exceeds"),
        (dict(sigma_min="a"), TypeError, "sigma_min"),
        (dict(bandwidth=[0.1, 0.2]), locus.InputError, "one per level"),
        (dict(bandwidth_factor=0.0), locus.InputError, "factor"),
        (dict(bandwidth_factor=None), TypeError, "bandwidth_factor"),
        (dict(kernel="nope"), locus.InputError, "profile"),
        (dict(random_state=-1), locus.InputError, "random_state"),
        (dict(random_state=1.5), TypeError, "random_state"),
        (dict(n_samples=2.0), TypeError, "n_samples"),
    ],
)
def test_bad_arguments_raise(moons, kwargs, error, match):
    with pytest.raises(error, match=match):
        locus.generate(moons, backend=CPU, **kwargs)


def test_bad_data_raise():
    with pytest.raises(locus.InputError, match="scale"):
        locus.generate(np.ones((10, 2)), backend=CPU)
    with pytest.raises(locus.InputError):
        locus.generate(np.array([[0.0, np.nan], [1.0, 2.0]]), backend=CPU)
    with pytest.raises(locus.InputError):
        locus.generate(np.zeros((0, 2)), backend=CPU)
