"""scikit-learn's constructor arguments that steer how scikit-learn
computes, not what: checked at ``fit`` with scikit-learn's rules, and
either honoured or, where they only tune scikit-learn's trees, accepted
and documented as no-ops (locus computes exactly, by brute force).

* ``algorithm`` (``"auto"``, ``"ball_tree"``, ``"kd_tree"``, ``"brute"``),
  ``leaf_size``, ``breadth_first``: no-ops (there is no tree).
* ``n_jobs``: the number of CPU threads the estimator's work runs on
  (:func:`threads_for_n_jobs`): ``None`` or ``-1`` every core (rayon's
  global pool, sized by ``RAYON_NUM_THREADS`` when set), ``k > 0`` k
  threads, ``-2`` all but one and ``-k`` all but ``k − 1`` (at least one),
  as joblib counts; ``0`` raises, as in scikit-learn. Estimators with the
  same ``backend`` and thread count share one engine (one thread pool).
* ``metric``, ``p``, ``metric_params``: honoured for the metrics the
  engine computes — ``"euclidean"``/``"l2"``, ``"manhattan"``/
  ``"cityblock"``/``"l1"``, ``"chebyshev"``/``"infinity"``,
  ``"minkowski"`` with ``p ≥ 1`` (``p`` also through ``metric_params``)
  and ``"haversine"`` (2 columns: latitude, longitude in radians); any
  other metric raises :class:`~locus.InputError` naming the supported ones
  (no other metric is computed in its place).
* ``atol``, ``rtol`` (KernelDensity): accepted (non-negative); the sums are
  exact, so the only error is float32 rounding (about 1e-6 relative per
  term, 1e-5 on a density): at least as accurate as any tolerance at or
  above that.
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any

import numpy as np

from ._errors import InputError

__all__ = [
    "check_algorithm",
    "check_metric_columns",
    "metric_spec",
    "check_n_jobs",
    "check_tolerance",
    "csr",
    "threads_for_n_jobs",
]

ALGORITHMS = ("auto", "ball_tree", "kd_tree", "brute")
METRICS = {
    "euclidean": "euclidean",
    "l2": "euclidean",
    "manhattan": "manhattan",
    "cityblock": "manhattan",
    "l1": "manhattan",
    "chebyshev": "chebyshev",
    "infinity": "chebyshev",
    "minkowski": "minkowski",
    "haversine": "haversine",
}


def _is_int(v: Any) -> bool:
    return isinstance(v, (Integral, np.integer)) and not isinstance(v, (bool, np.bool_))


def check_algorithm(algorithm: Any, leaf_size: Any) -> None:
    """``algorithm`` one of scikit-learn's, ``leaf_size`` an integer ≥ 1
    (both no-ops here)."""
    if algorithm not in ALGORITHMS:
        raise InputError(f"algorithm must be one of {list(ALGORITHMS)}, got {algorithm!r}")
    if not _is_int(leaf_size) or leaf_size < 1:
        raise InputError(f"leaf_size must be an integer >= 1, got {leaf_size!r}")


def check_n_jobs(n_jobs: Any) -> None:
    """``None`` or a non-zero integer, as scikit-learn takes it."""
    if n_jobs is not None and (not _is_int(n_jobs) or n_jobs == 0):
        raise InputError(f"n_jobs must be None or a non-zero integer, got {n_jobs!r}")


def cpu_count() -> int:
    """The cores this process may run on (its affinity mask where the
    system has one), at least 1."""
    import os

    counter = getattr(os, "process_cpu_count", None)
    if counter is not None:
        n = counter()
    elif hasattr(os, "sched_getaffinity"):
        n = len(os.sched_getaffinity(0))
    else:
        n = os.cpu_count()
    return max(int(n or 1), 1)


def threads_for_n_jobs(n_jobs: Any) -> int | None:
    """The CPU threads ``n_jobs`` asks for: ``None`` for ``None`` and
    ``-1`` (every core: rayon's global pool), ``k`` for ``k > 0``, and
    joblib's ``cores + 1 + n_jobs`` (at least 1) for ``n_jobs < -1``.

    Raises
    ------
    InputError
        ``n_jobs`` is 0 or not an integer.
    """
    check_n_jobs(n_jobs)
    if n_jobs is None or n_jobs == -1:
        return None
    if n_jobs > 0:
        return int(n_jobs)
    return max(cpu_count() + 1 + int(n_jobs), 1)


def metric_spec(metric: Any, p: Any = 2, metric_params: Any = None) -> str:
    """The metric as the engine takes it: ``"euclidean"``, ``"manhattan"``,
    ``"chebyshev"``, ``"haversine"`` or ``"minkowski:P"`` (``p`` = 1, 2 and
    ∞ give the named metrics), from scikit-learn's ``metric``, ``p`` and
    ``metric_params`` (which may hold ``p``; nothing else). The engine's
    spelling itself (``"minkowski:3.0"``) is accepted too.

    Parameters
    ----------
    metric : str
        A scikit-learn metric name.
    p : float or None
        Minkowski's exponent (ignored for the other names, as scikit-learn
        ignores it); None for 2.
    metric_params : dict or None
        ``{"p": ...}`` at most.

    Returns
    -------
    str
        The engine's metric.

    Raises
    ------
    InputError
        An unknown metric, a ``p`` below 1, or other ``metric_params``.
    """
    if metric_params is not None and not isinstance(metric_params, dict):
        raise InputError(f"metric_params must be None or a dict, got {metric_params!r}")
    if isinstance(metric, str) and metric.startswith("minkowski:"):
        # Already the engine's spelling (what this function returns).
        try:
            metric, p = "minkowski", float(metric.split(":", 1)[1])
        except ValueError:
            raise InputError(f"metric={metric!r}: the exponent is not a number") from None
    params = dict(metric_params or {})
    if "p" in params:
        p = params.pop("p")
    if params:
        raise InputError(f"metric_params={metric_params!r} is not supported: only 'p' is taken")
    name = METRICS.get(metric) if isinstance(metric, str) else None
    if name is None:
        raise InputError(
            f"metric={metric!r} is not supported; supported metrics: "
            + ", ".join(repr(m) for m in METRICS)
            + " (minkowski with p >= 1; haversine on (latitude, longitude) in radians)"
        )
    if name != "minkowski":
        return name
    if p is None:
        p = 2
    if isinstance(p, (bool, np.bool_)) or not isinstance(p, Real) or not float(p) >= 1:
        raise InputError(f"p must be a number >= 1 for the minkowski metric, got {p!r}")
    p = float(p)
    if p == 1:
        return "manhattan"
    if p == 2:
        return "euclidean"
    if np.isinf(p):
        return "chebyshev"
    return f"minkowski:{p!r}"


def check_metric_columns(metric: str, d: int) -> None:
    """Refuses the haversine metric (as :func:`metric_spec` returns it) on
    points that are not 2 columns (latitude, longitude)."""
    if metric == "haversine" and d != 2:
        raise InputError(f"the haversine metric takes 2 columns (latitude, longitude), got {d}")

def check_tolerance(value: Any, name: str) -> None:
    """A non-negative number (KernelDensity's ``atol``, ``rtol``)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, Real) or not float(value) >= 0:
        raise InputError(f"{name} must be a number >= 0, got {value!r}")


def csr(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, shape: tuple[int, int]) -> Any:
    """A CSR sparse matrix, in scikit-learn's configured sparse interface
    (``scipy.sparse.csr_matrix`` by default, ``csr_array`` under
    ``sparse_interface="sparray"``)."""
    from scipy.sparse import csr_array, csr_matrix
    from sklearn import get_config

    cls = csr_array if get_config().get("sparse_interface") == "sparray" else csr_matrix
    return cls((data, indices, indptr), shape=shape)
