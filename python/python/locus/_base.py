"""What the scikit-learn estimators share: input validation in
scikit-learn's terms, converted once to C-contiguous float32."""

from __future__ import annotations

from numbers import Real
from typing import Any

import numpy as np
from sklearn.utils.validation import validate_data

from ._kernels import PROFILES, ProductKernel

_BACKENDS = ("auto", "gpu", "cpu")


def check_X(est: Any, X: Any, *, reset: bool) -> np.ndarray:
    """``X`` validated as scikit-learn does (2-D, finite, non-empty, the
    number of features seen in ``fit``) and converted once to float32."""
    return validate_data(est, X, reset=reset, dtype=np.float32, order="C")


def check_Xy(est: Any, X: Any, y: Any, **kw: Any) -> tuple[np.ndarray, np.ndarray]:
    """``X`` and ``y`` validated together; ``X`` converted to float32."""
    return validate_data(est, X, y, dtype=np.float32, order="C", **kw)


def check_bandwidth(h: Any, name: str = "bandwidth") -> float:
    """A finite, positive number."""
    if isinstance(h, (bool, np.bool_)) or not isinstance(h, Real):
        raise ValueError(f"{name} must be a positive number, got {h!r}")
    h = float(h)
    if not np.isfinite(h) or h <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {h}")
    return h


# The kernel names (and aliases) the engine accepts.
_KERNEL_NAMES = PROFILES


def check_kernel(kernel: Any) -> None:
    """A kernel name the engine accepts (any case), or a ProductKernel."""
    if isinstance(kernel, ProductKernel):
        return
    if not isinstance(kernel, str) or kernel.lower() not in _KERNEL_NAMES:
        raise ValueError(
            f"kernel must be one of {sorted(_KERNEL_NAMES)} or a locus.ProductKernel, got {kernel!r}"
        )


def kernel_params(bandwidth: Any, kernel: Any) -> dict[str, Any]:
    """An estimator's ``bandwidth`` and ``kernel`` as the functions take
    them: a positive bandwidth with a profile name, or ``bandwidth=None``
    with a :class:`~locus.ProductKernel` (its blocks carry theirs)."""
    if isinstance(kernel, ProductKernel):
        if bandwidth is not None:
            raise ValueError(
                "a ProductKernel carries its blocks' bandwidths: set bandwidth=None with it"
            )
        return {"bandwidth": None, "kernel": kernel}
    return {"bandwidth": check_bandwidth(bandwidth), "kernel": kernel}


def check_backend(backend: Any) -> None:
    """A backend name (estimators keep names, so that they pickle)."""
    if backend not in _BACKENDS:
        raise ValueError(f'backend must be "auto", "gpu" or "cpu", got {backend!r}')
