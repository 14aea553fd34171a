"""What the scikit-learn estimators share: their parameters kept as given,
input validation in scikit-learn's terms (converted once to C-contiguous
float32), the checks of common parameters (:meth:`LocusEstimator._validate_params`,
called first thing in every ``fit``), and the kernel estimators'
``bandwidth``, ``kernel`` and ``backend``."""

from __future__ import annotations

from numbers import Real
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import validate_data

from ._compat import check_n_jobs
from ._engine import check_backend
from ._errors import InputError
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
    """An integer ≥ 1.

    Parameters
    ----------
    k : int
        The value to check.
    name : str
        The parameter's name, for the error message.

    Returns
    -------
    int
        ``k`` as a Python ``int``.

    Raises
    ------
    InputError
        ``k`` is not an integer ≥ 1 (``True``/``False`` are refused).
    """
    return check_int(k, name, minimum=1)


def check_int(k: Any, name: str, *, minimum: int) -> int:
    """An integer ≥ ``minimum`` (booleans refused), as a Python ``int``;
    :class:`~locus.InputError` naming ``name`` otherwise."""
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)) or k < minimum:
        raise InputError(f"{name} must be an integer >= {minimum}, got {k!r}")
    return int(k)


def check_bool(b: Any, name: str) -> bool:
    """``True`` or ``False`` (numpy's included); :class:`~locus.InputError`
    naming ``name`` otherwise."""
    if not isinstance(b, (bool, np.bool_)):
        raise InputError(f"{name} must be True or False, got {b!r}")
    return bool(b)


def check_bandwidth(h: Any, name: str = "bandwidth") -> float:
    """A finite, positive number.

    Parameters
    ----------
    h : float
        The value to check.
    name : str, default="bandwidth"
        The parameter's name, for the error message.

    Returns
    -------
    float
        ``h`` as a Python ``float``.

    Raises
    ------
    InputError
        ``h`` is not a number, not finite, or not > 0.
    """
    if isinstance(h, (bool, np.bool_)) or not isinstance(h, Real):
        raise InputError(f"{name} must be a positive number, got {h!r}")
    h = float(h)
    if not np.isfinite(h) or h <= 0:
        raise InputError(f"{name} must be finite and > 0, got {h}")
    return h


# The kernel names (and aliases) the engine accepts.
_KERNEL_NAMES = PROFILES


def check_kernel(kernel: Any) -> None:
    """A kernel name the engine accepts (any case), or a ProductKernel;
    :class:`~locus.InputError` (a ``ValueError``) otherwise."""
    if isinstance(kernel, ProductKernel):
        return
    if not isinstance(kernel, str) or kernel.lower() not in _KERNEL_NAMES:
        raise InputError(
            f"kernel must be one of {sorted(_KERNEL_NAMES)} or a locus.ProductKernel, got {kernel!r}"
        )


def kernel_params(bandwidth: Any, kernel: Any) -> dict[str, Any]:
    """An estimator's ``bandwidth`` and ``kernel`` as the functions take
    them.

    Parameters
    ----------
    bandwidth : float or None
        Positive with a profile name; None with a
        :class:`~locus.ProductKernel` (its blocks carry theirs).
    kernel : str or ProductKernel
        A profile name the engine knows (any case), or a product kernel.

    Returns
    -------
    dict
        ``{"bandwidth": ..., "kernel": ...}``, checked.

    Raises
    ------
    InputError
        An unknown kernel name, a bandwidth not finite and positive, or a
        product kernel with a bandwidth.
    """
    check_kernel(kernel)
    if isinstance(kernel, ProductKernel):
        if bandwidth is not None:
            raise InputError(
                "a ProductKernel carries its blocks' bandwidths: set bandwidth=None with it"
            )
        return {"bandwidth": None, "kernel": kernel}
    return {"bandwidth": check_bandwidth(bandwidth), "kernel": kernel}


class LocusEstimator(BaseEstimator):
    """The base of every locus estimator: its parameters are checked when
    ``fit`` starts (:meth:`_validate_params`), so a typo fails there, not in
    ``predict`` (where, inside ``GridSearchCV``, it would become a NaN
    score)."""

    def _validate_params(self) -> None:
        """Checks the parameters every estimator shares, where it has them:
        ``backend`` (``"auto"``, ``"gpu"``, ``"cpu"``) and ``n_jobs``
        (None or a non-zero integer, as scikit-learn's). Estimators extend
        it with their own checks (calling this one first); ``fit`` calls it
        before it looks at the data.

        Raises
        ------
        InputError
            A parameter out of its domain (also a ``ValueError``).
        """
        if hasattr(self, "backend"):
            check_backend(self.backend)
        check_n_jobs(getattr(self, "n_jobs", None))


class KernelEstimator(LocusEstimator):
    """An estimator of local means: its ``bandwidth`` (positive; None with a
    :class:`~locus.ProductKernel`), ``kernel`` and ``backend``."""

    bandwidth: Any
    kernel: Any
    backend: str

    def _validate_params(self) -> None:
        """The shared checks, and ``bandwidth`` with ``kernel``: a known
        profile name (any case) with a positive bandwidth, or a
        :class:`~locus.ProductKernel` with ``bandwidth=None``.

        Raises
        ------
        InputError
            A parameter out of its domain (also a ``ValueError``).
        """
        super()._validate_params()
        kernel_params(self.bandwidth, self.kernel)

    def _kernel_args(self) -> dict[str, Any]:
        """``bandwidth``, ``kernel`` and ``backend``, checked, as the
        functions take them."""
        check_backend(self.backend)
        return {**kernel_params(self.bandwidth, self.kernel), "backend": self.backend}
