"""locus: localization methods (kernel local means / Nadaraya–Watson,
MeanShift, KDE, kNN, kernel softmax) on a GPU (wgpu) or the CPU (rayon).

numpy in, numpy out: inputs are converted once to C-contiguous float32
(borrowed without a copy when they already are), every computation runs
with the GIL released, results come back as numpy arrays without a copy.

>>> import numpy as np, locus
>>> X = np.array([[0, 0], [0.3, 0.1], [0.1, 0.4], [6, 6], [6.2, 5.9]])
>>> locus.mean_shift(X, bandwidth=1.0, backend="cpu").labels
array([0, 0, 0, 1, 1])

The scikit-learn estimators (``locus.MeanShift``, ``locus.KernelDensity``,
``locus.KernelRegression``, ``locus.LocalModeClassifier``,
``locus.KNeighborsClassifier``, ``locus.KNeighborsRegressor``,
``locus.NearestNeighbors``) need
scikit-learn: ``pip install 'locus-engine[sklearn]'``.
"""

from __future__ import annotations

import os as _os
from typing import TYPE_CHECKING, Any

# Mesa's Vulkan device-select layer, which the loader runs while the engine
# lists GPU adapters, wants a display server: without one (no valid
# XDG_RUNTIME_DIR) it prints "error: XDG_RUNTIME_DIR is invalid or not set"
# on stderr in every process. Device selection has no bearing on compute
# (the engine chooses its adapter itself: LOCUS_ADAPTER), so the layer is
# off unless the user set NODEVICE_SELECT, before the loader first runs.
_os.environ.setdefault("NODEVICE_SELECT", "1")

from ._engine import AttentionSet, Engine, KeySet  # noqa: E402
from ._errors import (  # noqa: E402
    DeviceError,
    InputError,
    LocusError,
    LocusMemoryError,
    ServiceAuthError,
    ServiceBusyError,
    ServiceError,
    ServiceInputError,
)
from ._client import Client  # noqa: E402
from ._cluster_functions import estimate_bandwidth, mean_shift, medoid_shift  # noqa: E402
from ._bandwidth_selection import (  # noqa: E402
    PerFeatureBandwidths,
    loo_error_per_feature,
    select_bandwidths_per_feature,
)
from ._functions import (  # noqa: E402
    density,
    feature_local_mean,
    impute,
    kernel_matrix,
    kernel_softmax,
    knn,
    local_mean,
    local_pca,
    local_polynomial,
    log_density,
    score,
    self_local_mean,
)
from ._generate import GenerateResult, generate  # noqa: E402
from ._variable import balloon_bandwidths, knn_bandwidths  # noqa: E402
from ._kernels import ProductKernel  # noqa: E402
from ._locus import __version__  # noqa: E402
from ._results import (  # noqa: E402
    KNNResult,
    LocalPCAResult,
    MeanShiftResult,
    MedoidShiftResult,
    RowStates,
)

if TYPE_CHECKING:
    # Type checkers see the estimators' classes; at run time they load on
    # first use (below), so that `import locus` needs no scikit-learn.
    from ._classification import LocalModeClassifier
    from ._cluster import MeanShift
    from ._density import KernelDensity
    from ._impute import LocalMeanImputer
    from ._neighbors import KNeighborsClassifier, KNeighborsRegressor, NearestNeighbors
    from ._regression import KernelRegression

_ESTIMATORS = {
    "MeanShift": "_cluster",
    "KernelDensity": "_density",
    "KernelRegression": "_regression",
    "LocalModeClassifier": "_classification",
    "KNeighborsClassifier": "_neighbors",
    "KNeighborsRegressor": "_neighbors",
    "NearestNeighbors": "_neighbors",
    "LocalMeanImputer": "_impute",
}

__all__ = [
    "Engine",
    "KeySet",
    "AttentionSet",
    "RowStates",
    "KNNResult",
    "LocusError",
    "InputError",
    "DeviceError",
    "LocusMemoryError",
    "ServiceError",
    "ServiceInputError",
    "ServiceAuthError",
    "ServiceBusyError",
    "Client",
    "MeanShiftResult",
    "MedoidShiftResult",
    "PerFeatureBandwidths",
    "LocalPCAResult",
    "GenerateResult",
    "ProductKernel",
    "density",
    "estimate_bandwidth",
    "feature_local_mean",
    "generate",
    "impute",
    "kernel_matrix",
    "kernel_softmax",
    "knn",
    "knn_bandwidths",
    "balloon_bandwidths",
    "local_mean",
    "local_pca",
    "local_polynomial",
    "log_density",
    "loo_error_per_feature",
    "mean_shift",
    "medoid_shift",
    "score",
    "select_bandwidths_per_feature",
    "self_local_mean",
    "__version__",
    "MeanShift",
    "KernelDensity",
    "KernelRegression",
    "LocalModeClassifier",
    "KNeighborsClassifier",
    "KNeighborsRegressor",
    "NearestNeighbors",
    "LocalMeanImputer",
]


def __getattr__(name: str) -> Any:
    """Imports the scikit-learn estimators on first use.

    Parameters
    ----------
    name : str
        The attribute asked for.

    Returns
    -------
    type
        The estimator class ``name``.

    Raises
    ------
    AttributeError
        ``name`` is not an attribute of locus.
    ImportError
        scikit-learn is not installed (the message says how to install it).
    """
    module = _ESTIMATORS.get(name)
    if module is None:
        raise AttributeError(f"module 'locus' has no attribute {name!r}")
    try:
        import sklearn  # noqa: F401
    except ImportError as e:
        raise ImportError(
            f"locus.{name} is a scikit-learn estimator and needs scikit-learn; "
            "install it with: pip install 'locus-engine[sklearn]'"
        ) from e
    import importlib

    cls = getattr(importlib.import_module(f"locus.{module}"), name)
    globals()[name] = cls
    return cls


def __dir__() -> list[str]:
    """The public names, estimators included."""
    return sorted(__all__)
