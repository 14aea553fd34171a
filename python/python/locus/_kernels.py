"""Product (joint, bilateral) kernels, and the kernel argument the ops
hand to the engine."""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any, Iterable

import numpy as np

from ._errors import InputError

# The profile names (and aliases) the engine accepts.
PROFILES = frozenset(
    {
        "gaussian", "rbf", "epanechnikov", "uniform", "flat", "tophat", "triangular", "linear",
        "biweight", "quartic", "laplacian", "exponential", "cauchy", "cosine",
    }
)


class ProductKernel:
    """A product kernel over consecutive coordinate blocks,
    ``K(x, x') = Π_b k_b(‖x_b − x'_b‖ / h_b)``, each block given as
    ``(dims, profile, bandwidth)``: the joint spatial–range kernel of
    bilateral filtering and of MeanShift image segmentation (pixels as
    ``(row, col, L, u, v)`` with a spatial and a range block).

    Pass it as ``kernel=`` to any op, with no ``bandwidth`` (the blocks carry
    theirs); the data must have ``sum(dims)`` columns.

    Parameters
    ----------
    blocks : iterable of (int, str, float)
        The blocks in coordinate order: how many coordinates, the profile
        (a name of :data:`PROFILES`, any case), the bandwidth (finite,
        > 0).

    Raises
    ------
    InputError
        A malformed block, an unknown profile, a bandwidth not finite and
        positive, or no block at all.

    Examples
    --------
    >>> import numpy as np, locus
    >>> k = locus.ProductKernel([(2, "uniform", 8.0), (3, "gaussian", 6.0)])
    >>> k.dims
    5
    >>> x = np.array([[0, 0, 50, 0, 0], [3, 1, 52, 1, 0], [4, 4, 90, 0, 0]], dtype=np.float32)
    >>> locus.local_mean(x[:1], x, [[1.0], [2.0], [3.0]], kernel=k, backend="cpu").round(3)
    array([[1.483]], dtype=float32)
    """

    __slots__ = ("_blocks",)

    def __init__(self, blocks: Iterable[tuple[int, str, float]]) -> None:
        parsed: list[tuple[int, str, float]] = []
        for b in blocks:
            try:
                dims, profile, bandwidth = b
            except (TypeError, ValueError):
                raise InputError(
                    f"each block is (dims, profile, bandwidth), got {b!r}"
                ) from None
            if isinstance(dims, bool) or not isinstance(dims, Integral) or not 1 <= dims < 2**32:
                raise InputError(f"a block's dims must be an integer in 1..2**32-1, got {dims!r}")
            if not isinstance(profile, str) or profile.lower() not in PROFILES:
                raise InputError(f"a block's profile must be one of {sorted(PROFILES)}, got {profile!r}")
            if isinstance(bandwidth, bool) or not isinstance(bandwidth, Real):
                raise InputError(f"a block's bandwidth must be a number, got {bandwidth!r}")
            if not math.isfinite(bandwidth) or bandwidth <= 0:
                raise InputError(f"a block's bandwidth must be finite and > 0, got {bandwidth!r}")
            parsed.append((int(dims), profile.lower(), float(bandwidth)))
        if not parsed:
            raise InputError("a product kernel needs at least one block")
        self._blocks = tuple(parsed)

    @property
    def blocks(self) -> tuple[tuple[int, str, float], ...]:
        """The blocks, ``(dims, profile, bandwidth)`` each."""
        return self._blocks

    @property
    def dims(self) -> int:
        """The number of coordinates the kernel takes."""
        return sum(b[0] for b in self._blocks)

    def __repr__(self) -> str:
        return f"ProductKernel({list(self._blocks)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProductKernel) and self._blocks == other._blocks

    def __hash__(self) -> int:
        return hash(self._blocks)

    def __reduce__(self) -> tuple[Any, ...]:
        return (ProductKernel, (list(self._blocks),))


def kernel_spec(kernel: Any, bandwidth: Any) -> Any:
    """``kernel`` as the engine takes it.

    Parameters
    ----------
    kernel : str or ProductKernel
        A profile name, or a product kernel.
    bandwidth : float or None
        Must be None with a product kernel.

    Returns
    -------
    str or list of (int, str, float)
        The profile name as given, or the product kernel's blocks.

    Raises
    ------
    InputError
        A product kernel with a bandwidth.
    """
    if not isinstance(kernel, ProductKernel):
        return kernel
    if bandwidth is not None:
        raise InputError("a ProductKernel carries its blocks' bandwidths: give no bandwidth with it")
    return list(kernel.blocks)


def kernel_arg(kernel: Any, bandwidth: Any, metric: str = "euclidean") -> Any:
    """``kernel``, ``bandwidth`` and ``metric`` as the ops of the engine
    take them, one value.

    Parameters
    ----------
    kernel : str or ProductKernel
        A profile name, or a product kernel.
    bandwidth : float or None
        The profile's bandwidth; None with a product kernel.
    metric : str, default="euclidean"
        The engine's metric (``_compat.metric_spec``): the distance ``r``
        of ``k(r/h)``; a product kernel takes the Euclidean one only.

    Returns
    -------
    tuple of (str, float), (str, float, str) or list of (int, str, float)
        ``(name, bandwidth)``, ``(name, bandwidth, metric)`` for another
        metric than the Euclidean one, or the product kernel's blocks (they
        carry their bandwidths).

    Raises
    ------
    TypeError
        A kernel that is neither, or a profile name without a bandwidth.
    InputError
        A product kernel with a bandwidth, or with another metric.
    """
    if isinstance(kernel, ProductKernel):
        if metric != "euclidean":
            raise InputError(f"a ProductKernel's blocks are Euclidean, got metric {metric!r}")
        return kernel_spec(kernel, bandwidth)
    if not isinstance(kernel, str):
        raise TypeError(f"kernel must be a profile name or a ProductKernel, got {kernel!r}")
    if bandwidth is None:
        raise TypeError(
            f"bandwidth must be a number for the kernel {kernel!r} (only a ProductKernel goes without)"
        )
    if metric != "euclidean":
        return (kernel, bandwidth, metric)
    return (kernel, bandwidth)


def log_profile(profile: str, t: np.ndarray) -> np.ndarray:
    """A profile's log-weight ``ln k(r)`` at scaled squared distances
    ``t = r² = ‖x − x'‖²/h²``, in float64 (``-inf`` outside a compact
    profile's support; NaN where ``t`` is NaN).

    Parameters
    ----------
    profile : str
        A profile name or alias of :data:`PROFILES` (any case).
    t : numpy.ndarray
        Scaled squared distances, ``≥ 0`` or NaN.

    Returns
    -------
    numpy.ndarray
        ``ln k(√t)``, the shape of ``t``; up to a constant, the weights
        the engine gives (a weighted mean does not see the constant).

    Raises
    ------
    InputError
        An unknown profile name.
    """
    t = np.asarray(t, dtype=np.float64)
    r = np.sqrt(t)
    name = profile.lower()
    with np.errstate(divide="ignore", invalid="ignore"):
        if name in ("gaussian", "rbf"):
            return -0.5 * t
        if name in ("laplacian", "exponential"):
            return -r
        if name == "cauchy":
            return -np.log1p(t)
        inside = t < 1.0
        if name in ("uniform", "flat", "tophat"):
            out = np.zeros_like(t)
        elif name == "epanechnikov":
            out = np.log1p(-np.minimum(t, 1.0))
        elif name in ("triangular", "linear"):
            out = np.log1p(-np.minimum(r, 1.0))
        elif name in ("biweight", "quartic"):
            out = 2.0 * np.log1p(-np.minimum(t, 1.0))
        elif name == "cosine":
            out = np.log(np.cos(0.5 * np.pi * np.minimum(r, 1.0)))
        else:
            raise InputError(f"kernel must be one of {sorted(PROFILES)}, got {profile!r}")
        return np.where(inside, out, np.where(np.isnan(t), np.nan, -np.inf))
