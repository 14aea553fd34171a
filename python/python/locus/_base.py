"""What the scikit-learn estimators share: their parameters kept as given,
input validation in scikit-learn's terms (converted once to C-contiguous
float32), the checks of common parameters, and the kernel estimators'
``bandwidth``, ``kernel`` and ``backend``."""

from __future__ import annotations

from numbers import Real
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import validate_data

from ._engine import check_backend
from ._kernels import PROFILES, ProductKernel


def keep_params(est: BaseEstimator, params: dict[str, Any]) -> None:
    """Stores the arguments of an estimator's ``__init__`` (its
    ``locals()``) as its attributes, as given: scikit-learn's
    ``get_params`` reads them back, and ``fit`` checks them."""
    for name, value in params.items():
        if name != "self":
            setattr(est, name, value)


def check_X(est: Any, X: Any, *, reset: bool) -> np.ndarray:
    """``X`` validated as scikit-learn does (2-D, finite, non-empty, the
    number of features seen in ``fit``) and converted once to float32."""
    return validate_data(est, X, reset=reset, dtype=np.float32, order="C")


def check_Xy(est: Any, X: Any, y: Any, **kw: Any) -> tuple[np.ndarray, np.ndarray]:
    """``X`` and ``y`` validated together; ``X`` converted to float32."""
    return validate_data(est, X, y, dtype=np.float32, order="C", **kw)


def check_positive_int(k: Any, name: str) -> int:
    """An integer ≥ 1."""
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"{name} must be a positive integer, got {k!r}")
    return int(k)


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


class KernelEstimator(BaseEstimator):
    """An estimator of local means: its ``bandwidth`` (positive; None with a
    :class:`~locus.ProductKernel`), ``kernel`` and ``backend``."""

    bandwidth: Any
    kernel: Any
    backend: str

    def _kernel_args(self) -> dict[str, Any]:
        """``bandwidth``, ``kernel`` and ``backend``, checked, as the
        functions take them."""
        check_backend(self.backend)
        return {**kernel_params(self.bandwidth, self.kernel), "backend": self.backend}
