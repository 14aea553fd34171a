"""Generation by local means: :func:`generate`, local-mean diffusion
(numpy in, numpy out, as the functions of ``_functions.py``: float64 data
centred near its mean before rounding to float32, samples moved back in
float64)."""

from __future__ import annotations

from numbers import Real
from typing import Any, NamedTuple

import numpy as np

from . import _locus
from ._arrays import as_count, result_dtype
from ._centre import add_offset, centre
from ._engine import BackendLike
from ._errors import InputError
from ._functions import _engine

__all__ = ["generate", "GenerateResult"]

#: The largest seed: the engine's seeds are unsigned 64-bit integers.
_MAX_SEED = 2**64 - 1


class GenerateResult(NamedTuple):
    """What :func:`~locus.generate` produced."""

    samples: np.ndarray
    """The generated points ``X′_0`` (n_samples × d, in ``X``'s floating dtype)."""
    trajectory: list[np.ndarray]
    """With ``return_trajectory``: the samples at every level, the start
    ``X′_T`` first and ``X′_0`` last (``steps + 1`` arrays); else empty."""
    sigmas: np.ndarray
    """The noise levels ``σ_1, …, σ_T`` used (float64)."""
    bandwidths: np.ndarray
    """The bandwidths ``h_1, …, h_T`` used (float64)."""
    empty_rows: int
    """Sample rows, summed over the steps, with no data point in reach of
    a compact kernel: such a sample stays where it is for that step."""


def _seed(random_state: Any) -> int:
    """The engine's seed from ``random_state``: an integer in
    ``[0, 2⁶⁴)`` as it is, a ``RandomState`` or ``Generator`` drawn from,
    ``None`` drawn from numpy's global generator."""
    if random_state is None:
        return int(np.random.randint(0, 2**63, dtype=np.int64))
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(0, 2**63, dtype=np.int64))
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(0, 2**63))
    if isinstance(random_state, (bool, np.bool_)) or not isinstance(random_state, (int, np.integer)):
        raise TypeError(
            "random_state must be None, an integer, a numpy RandomState or Generator, "
            f"got {type(random_state).__name__}"
        )
    if not 0 <= random_state <= _MAX_SEED:
        raise InputError(f"random_state must lie in [0, 2**64), got {random_state}")
    return int(random_state)


def _levels(values: Any, name: str) -> list[float]:
    """A list of levels (or bandwidths) as floats, checked to be 1-D."""
    a = np.asarray(values, dtype=np.float64)
    if a.ndim != 1:
        raise InputError(f"{name} must be a 1-D list of numbers, got shape {a.shape}")
    return [float(v) for v in a]


def generate(
    X: Any,
    *,
    n_samples: int | None = None,
    steps: int = 20,
    sigmas: str | Any = "geometric",
    sigma_min: float | None = None,
    sigma_max: float | None = None,
    kernel: str = "gaussian",
    bandwidth: Any = None,
    bandwidth_factor: float = 1.0,
    random_state: Any = None,
    return_trajectory: bool = False,
    backend: BackendLike = "auto",
) -> GenerateResult:
    """New points like ``X`` by local-mean diffusion (iterated local means
    under a Gaussian noise schedule).

    The data noised to level ``t`` is ``X_t = X + s_t·Z`` with
    ``s_t² = σ_1² + … + σ_t²``. Starting from a draw of the fully noised
    data ``X′_T`` (data rows picked at random plus ``s_T·Z``), each step
    replaces the samples by their local means over the data noised one
    level less, ``X′_{t−1} = μ_K(X′_t; X_{t−1})``, down to ``X_0 = X``. With
    the gaussian kernel and ``h_t = σ_t`` each local mean is the posterior
    mean of the noising step. Posterior means shrink: the samples come out
    somewhat less spread than the data. Every step runs on the engine's
    backend; the draws depend on ``random_state`` alone.

    Parameters
    ----------
    X : array-like of shape (n_points, n_features)
        The data to imitate.
    n_samples : int or None, default=None
        How many points to generate; None: as many as ``X`` has rows.
    steps : int, default=20
        The number of noise levels ``T`` (with ``sigmas`` a spacing).
    sigmas : {"geometric", "linear"} or array-like of shape (steps,), default="geometric"
        How the levels are spaced from ``sigma_min`` to ``sigma_max``, or
        the levels ``σ_1, …, σ_T`` themselves.
    sigma_min : float or None, default=None
        ``σ_1``; None: 0.01 × the data's root mean square distance to its mean.
    sigma_max : float or None, default=None
        ``σ_T``; None: 0.5 × the same scale.
    kernel : str, default="gaussian"
        The local means' kernel profile.
    bandwidth : array-like of shape (steps,) or None, default=None
        The bandwidth of each level, ``h_1`` first; None:
        ``bandwidth_factor·σ_t``.
    bandwidth_factor : float, default=1.0
        ``h_t = bandwidth_factor·σ_t`` when ``bandwidth`` is None.
    random_state : int, RandomState, Generator or None, default=None
        The seed of every draw (an integer in ``[0, 2⁶⁴)``), or a numpy
        generator a seed is drawn from; None draws one from numpy's global
        generator.
    return_trajectory : bool, default=False
        Also return the samples after every step.
    backend : {"auto", "gpu", "cpu"} or Engine, default="auto"
        Where the op runs: a backend name (one shared engine per name) or an
        :class:`~locus.Engine`.

    Returns
    -------
    GenerateResult
        ``(samples, trajectory, sigmas, bandwidths, empty_rows)``.

    Examples
    --------
    >>> import numpy as np, locus
    >>> t = np.linspace(0, 2 * np.pi, 300, endpoint=False)
    >>> X = np.c_[np.cos(t), np.sin(t)]
    >>> r = locus.generate(X, n_samples=100, random_state=0, backend="cpu")
    >>> r.samples.shape, len(r.sigmas)
    ((100, 2), 20)
    >>> radius = np.hypot(*r.samples.T)
    >>> bool(np.all((radius > 0.8) & (radius < 1.1)))
    True
    """
    if isinstance(sigmas, str):
        if sigmas not in ("geometric", "linear"):
            raise InputError(f'sigmas must be "geometric", "linear" or a list of levels, got {sigmas!r}')
        bounds: list[float | None] = []
        for v, name in ((sigma_min, "sigma_min"), (sigma_max, "sigma_max")):
            if v is not None and (isinstance(v, (bool, np.bool_)) or not isinstance(v, Real)):
                raise TypeError(f"{name} must be a number or None, got {type(v).__name__}")
            bounds.append(None if v is None else float(v))
        schedule: Any = (sigmas, as_count(steps, "steps"), bounds[0], bounds[1])
    else:
        if sigma_min is not None or sigma_max is not None:
            raise InputError("sigma_min and sigma_max apply to a spacing, not to given sigmas")
        schedule = _levels(sigmas, "sigmas")
    if bandwidth is None:
        if isinstance(bandwidth_factor, (bool, np.bool_)) or not isinstance(bandwidth_factor, Real):
            raise TypeError(f"bandwidth_factor must be a number, got {type(bandwidth_factor).__name__}")
        bandwidths: Any = float(bandwidth_factor)
    else:
        bandwidths = _levels(bandwidth, "bandwidth")
    samples = None if n_samples is None else as_count(n_samples, "n_samples")
    dtype = result_dtype(X)
    offset, x, _ = centre(X, name="X")
    out, trajectory, used_sigmas, used_bandwidths, empty_rows = _locus.generate(
        _engine(backend),
        x,
        schedule=schedule,
        bandwidths=bandwidths,
        kernel=str(kernel),
        samples=samples,
        seed=_seed(random_state),
        trajectory=bool(return_trajectory),
    )
    return GenerateResult(
        add_offset(out, offset, dtype),
        [add_offset(t, offset, dtype) for t in trajectory],
        np.asarray(used_sigmas, dtype=np.float64),
        np.asarray(used_bandwidths, dtype=np.float64),
        int(empty_rows),
    )
