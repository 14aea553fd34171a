"""Centring before rounding: float64 points are moved to their keys'
float64 mean before they are rounded to the engine's float32, so a common
offset costs no accuracy (``1e6 + x`` rounded to float32 keeps 3
significant digits of ``x``; ``x − mean`` keeps 7).

Only ops unchanged by a common shift of keys and queries are centred
(distances, kernels, densities, neighbours, local means of values); an
output that is itself a position (the local mean of the keys, MeanShift's
centres, local PCA's means, imputed coordinates) gets the offset added
back in float64. float32 inputs are passed as they are: rounding them
loses nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._arrays import as_float32

__all__ = ["add_offset", "as_float64", "centre", "centre_on", "mean_offset"]


def _is_float32(x: Any) -> bool:
    return getattr(x, "dtype", None) == np.float32


def as_float64(x: Any, name: str) -> np.ndarray:
    """``x`` checked as :func:`~locus._arrays.as_float32` checks it (real
    numbers, 2-D), as float64."""
    try:
        a = np.asarray(x)
    except (ValueError, TypeError):
        return as_float32(x, name)  # raises, naming the problem
    if a.dtype.kind in "biuf" and a.ndim == 2:
        return a.astype(np.float64, copy=False)
    return as_float32(a, name)  # raises, naming the problem


def mean_offset(keys: np.ndarray, *, nan: bool = False) -> np.ndarray | None:
    """Where to centre ``keys`` (float64): per column, the mean rounded to
    a multiple of the power of two at or above the column's range (a
    constant column: its value). The centred points are then within about
    one range of 0, as accurate in float32 as around their mean. A column
    is moved only where that gains precision (its largest magnitude at
    least halves), so data already near 0 (a mean within half that power
    of two, or values in [0, 1)) is not moved at all: its float32
    rounding, and every result, stay as they were.
    ``nan``: NaN entries are missing (columns without any value: 0).
    ``None`` when nothing moves, or there is nothing to centre on (no
    rows, non-finite entries, which the engine refuses with its own
    message)."""
    if keys.shape[0] == 0 or keys.shape[1] == 0:
        return None
    n, d = keys.shape
    if nan:
        seen = ~np.isnan(keys)
        if not np.all(np.isfinite(keys[seen])):
            return None
        count = seen.sum(axis=0)
        hi = np.where(seen, keys, -np.inf).max(axis=0)
        lo = np.where(seen, keys, np.inf).min(axis=0)
    else:
        if not np.all(np.isfinite(keys)):
            return None
        count = np.full(d, n)
        hi, lo = keys.max(axis=0), keys.min(axis=0)
    # As the command-line tool and the service take it: from the least
    # value, each value's excess summed row after row, so the mean neither
    # overflows near the ends of the float64 range nor misses a constant
    # column's value, and the three round it alike. Missing entries add 0.
    base = np.where(count > 0, lo, 0.0)
    excess = np.zeros(d)
    for start in range(0, n, 1 << 14):
        block = keys[start : start + (1 << 14)] - base
        excess += (np.where(np.isnan(block), 0.0, block) if nan else block).sum(axis=0)
    mean = base + np.divide(excess, count, out=np.zeros(d), where=count > 0)
    width = np.where(count > 0, hi - lo, 0.0)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        step = np.exp2(np.ceil(np.log2(width)))
        offset = np.where(width > 0, np.round(mean / step) * step, mean)
        # Moved only where that gains precision: the column's largest
        # magnitude at least halves (values in [0, 1), whose mean rounds
        # to 1, stay where they are). `+ 0.0`: no -0.0.
        big = np.maximum(np.abs(lo), np.abs(hi))
        moved = np.maximum(np.abs(lo - offset), np.abs(hi - offset))
        offset = np.where(moved <= big / 2, offset, 0.0) + 0.0
    if not np.all(np.isfinite(offset)) or not np.any(offset):
        return None
    return offset


def centre_on(x: np.ndarray, offset: np.ndarray | None, name: str) -> np.ndarray:
    """``x − offset`` computed in float64 and rounded once to float32
    (C-contiguous); ``x`` as float32 when there is no offset or ``x`` is
    not a matrix of its dimension (the engine then refuses it)."""
    if offset is None or x.ndim != 2 or x.shape[1] != offset.shape[0]:
        return as_float32(x, name)
    out = np.empty(x.shape, np.float32)
    with np.errstate(over="ignore", invalid="ignore"):  # inf: refused as non-finite
        return np.subtract(x, offset, out=out, dtype=np.float64, casting="same_kind")


def centre(
    keys: Any, *others: tuple[Any, str], name: str = "keys", nan: bool = False
) -> tuple[np.ndarray | None, np.ndarray, list[Any]]:
    """``keys`` (called ``name`` in errors) and each of ``others``
    (``(array or None, name)`` pairs) as float32 matrices: centred on the
    keys' float64 mean when any of them is not float32, else as they are.
    Returns the offset (``None``: not centred), the keys and the others
    (``None`` stays ``None``). ``nan``: NaN marks a missing entry
    (imputation)."""
    given = [(x, n) for x, n in others if x is not None]
    if _is_float32(keys) and all(_is_float32(x) for x, _ in given):
        return None, as_float32(keys, name), [
            None if x is None else as_float32(x, n) for x, n in others
        ]
    k64 = as_float64(keys, name)
    offset = mean_offset(k64, nan=nan)
    rest = [None if x is None else centre_on(as_float64(x, n), offset, n) for x, n in others]
    return offset, centre_on(k64, offset, name), rest


def add_offset(positions: np.ndarray, offset: np.ndarray | None, dtype: Any) -> np.ndarray:
    """Positions computed on centred points, moved back by ``offset`` in
    float64, in ``dtype`` (as they are without an offset)."""
    if offset is None:
        return positions if positions.dtype == dtype else positions.astype(dtype)
    return (positions.astype(np.float64) + offset).astype(dtype, copy=False)
