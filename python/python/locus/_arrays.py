"""Input conversion at the edge: every array is converted once to a
C-contiguous ``float32`` array, which the engine then borrows without a
copy. A ``float32`` C-contiguous input is used as is; ``float64`` (and
integer, boolean) inputs and other memory orders are converted (one copy).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._errors import InputError

_NUMERIC = "biuf"


def as_float32(x: Any, name: str, ndims: tuple[int, ...] = (2,)) -> np.ndarray:
    """``x`` as a C-contiguous float32 array with one of ``ndims`` axes.

    Raises ``TypeError`` for a non-numeric dtype and :class:`InputError`
    (a ``ValueError``) for a wrong number of axes or a ragged list, naming
    the argument.
    """
    if x is None:
        raise TypeError(f"{name} must be an array, got None")
    try:
        a = np.asarray(x)
    except (ValueError, TypeError) as e:
        raise InputError(f"{name} cannot be read as an array: {e}") from None
    if a.dtype.kind not in _NUMERIC:
        raise TypeError(
            f"{name} must hold real numbers (float32 preferred), got dtype {a.dtype}"
        )
    if a.ndim not in ndims:
        want = " or ".join(f"{n}-D" for n in ndims)
        raise InputError(f"{name} must be {want}, got a {a.ndim}-D array of shape {a.shape}")
    if a.dtype == np.float32 and a.flags.c_contiguous:
        return a
    with np.errstate(over="ignore"):  # out-of-range values become inf: refused as non-finite
        return np.ascontiguousarray(a, dtype=np.float32)


def result_dtype(*xs: Any) -> type[np.floating]:
    """The floating dtype of a result computed from ``xs`` (``None``
    entries ignored): ``float32`` when every input is float32 (or float16,
    boolean), ``float64`` otherwise (float64, integer input, Python lists),
    numpy's promotion. The engine computes in float32 either way; a float64
    result is its float32 values widened."""
    dtypes = []
    for x in xs:
        if x is None:
            continue
        dt = getattr(x, "dtype", None)
        if not isinstance(dt, np.dtype):
            try:
                dt = np.asarray(x).dtype
            except (ValueError, TypeError):
                continue  # refused with its own message when converted
        dtypes.append(dt)
    try:
        dt = np.result_type(np.float32, *dtypes)
    except TypeError:
        return np.float64
    return np.float32 if dt.kind == "f" and dt.itemsize <= 4 else np.float64


def as_dtype(a: np.ndarray, dtype: type[np.floating]) -> np.ndarray:
    """``a`` in ``dtype`` (no copy when it already is)."""
    return a if a.dtype == dtype else a.astype(dtype)


def as_matrix(x: Any, name: str) -> np.ndarray:
    """``x`` as a C-contiguous float32 2-D array (see :func:`as_float32`)."""
    return as_float32(x, name, (2,))


def as_values(x: Any, name: str) -> tuple[np.ndarray, bool]:
    """Values as a 2-D float32 array, and whether they were given 1-D
    (then results are returned 1-D too)."""
    a = as_float32(x, name, (1, 2))
    if a.ndim == 1:
        return a.reshape(-1, 1), True
    return a, False


def as_degree(degree: Any, return_slopes: bool) -> int:
    """A local polynomial degree (0 or 1); slopes need degree 1."""
    if isinstance(degree, (bool, np.bool_)) or not isinstance(degree, (int, np.integer)):
        raise TypeError(f"degree must be an integer, got {type(degree).__name__}")
    if degree not in (0, 1):
        raise InputError(f"degree must be 0 or 1, got {degree}")
    if return_slopes and degree != 1:
        raise InputError("return_slopes needs degree=1 (local linear regression)")
    return int(degree)


def fit_result(fit: np.ndarray, slopes: Any, vector: bool, return_slopes: bool) -> Any:
    """A local fit as the caller asked: 1-D for 1-D values, with the slopes
    when asked."""
    if vector:
        fit = fit[:, 0]
        slopes = None if slopes is None else slopes[:, 0, :]
    return (fit, slopes) if return_slopes else fit


def as_count(k: Any, name: str) -> int:
    """A non-negative integer parameter (``k``, ``n_samples``, ...)."""
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(k).__name__}")
    if k < 0:
        raise InputError(f"{name} must be non-negative, got {k}")
    if k > np.iinfo(np.int64).max:
        raise InputError(f"{name} is too large: {k}")
    return int(k)


def as_seconds(t: Any, name: str) -> float:
    """A finite, non-negative number of seconds (a wait, a timeout)."""
    if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number of seconds, got {type(t).__name__}")
    t = float(t)
    if not np.isfinite(t) or t < 0:
        raise InputError(f"{name} must be a finite number of seconds >= 0, got {t}")
    return t


def as_labels(y: Any, n: int, name: str = "labels") -> tuple[np.ndarray, np.ndarray]:
    """The distinct labels (sorted) and each label's index among them
    (int64), for ``n`` keys."""
    y = np.asarray(y)
    if y.ndim != 1:
        raise InputError(f"{name} must be 1-D (one label per key), got shape {y.shape}")
    if y.shape[0] != n:
        raise InputError(f"{name} has {y.shape[0]} entries but there are {n} keys")
    if y.dtype.kind == "f" and not np.all(np.isfinite(y)):
        raise InputError(f"{name} must be finite")
    classes, index = np.unique(y, return_inverse=True)
    return classes, np.ascontiguousarray(index.reshape(-1), dtype=np.int64)
