"""Type stubs of the compiled module ``locus._locus``.

The public API is the Python layer (``locus``); these functions take
C-contiguous ``float32`` arrays exactly (the Python layer converts) and an
``Engine`` first. The package's tests check every signature here against
the compiled module (mypy's stubtest).
"""

from typing import Any, final

import numpy as np
import numpy.typing as npt
from typing_extensions import Self

__all__ = [
    "Engine", "KeySet", "AttentionSet", "MeanShiftParams",
    "local_mean", "self_local_mean", "local_polynomial", "local_pca", "score", "impute",
    "kernel_matrix", "laplacian", "log_density", "knn", "kernel_softmax", "feature_local_mean",
    "mean_shift", "medoid_shift", "estimate_bandwidth", "generate",
    "loo_error_per_feature", "select_bandwidths_per_feature", "log_density_variable", "knn_bandwidths",
    "balloon_bandwidths", "local_mean_variable",
    "merge_states", "shift_step", "rank_modes", "neighbour_sq_dists", "check_kernel",
    "__version__",
]

__version__: str

_F32 = npt.NDArray[np.float32]
_F64 = npt.NDArray[np.float64]
_I64 = npt.NDArray[np.int64]
_U64 = npt.NDArray[np.uint64]
# A product kernel's blocks, [(dims, profile, bandwidth), …].
_Blocks = list[tuple[int, str, float]]
# A kernel as the ops take it: (profile, bandwidth), or a product kernel's blocks.
_Kernel = tuple[str, float] | tuple[str, float, str] | _Blocks
# A kernel as MeanShift and MedoidShift take it: (profile, bandwidth rule),
# the rule a number, "scott", "silverman" or (quantile, n_samples); or blocks.
_ShiftKernel = tuple[str, float | str | tuple[float, int | None]] | _Blocks
_Means = tuple[_F32, int]
# Row states: max_log_weight, sum, weighted.
_States = tuple[_F32, _F64, _F64]
_Fit = tuple[_F32, _F32 | None, int, int]
_Pca = tuple[_F32, _F32, _F32, int]
# modes, labels, populations, iterations, converged, bandwidth.
_Clustering = tuple[_F32, _I64, _U64, int, bool, float]

@final
class Engine:
    def __new__(
        cls,
        backend: str = "auto",
        *,
        memory_limit: int | None = None,
        memory_wait: float | None = None,
        threads: int | None = None,
    ) -> Self: ...
    @property
    def backend(self) -> str: ...
    @property
    def threads(self) -> int: ...
    def info(self) -> dict[str, Any]: ...
    def prepare(
        self,
        keys: _F32,
        values: _F32 | None = None,
        labels: _I64 | None = None,
        *,
        batching: bool = True,
        max_request_rows: int | None = None,
        nearest_fallback: bool = False,
        bandwidths: _F32 | None = None,
    ) -> KeySet: ...
    def prepare_attention(self, psi: _F32, values: _F32) -> AttentionSet: ...

@final
class AttentionSet:
    def attend(self, phi: _F32, *, scale: float | None = None, causal: bool = False) -> _F32: ...
    @property
    def batches(self) -> int: ...
    @property
    def keys(self) -> int: ...
    @property
    def dim(self) -> int: ...
    @property
    def value_cols(self) -> int: ...
    @property
    def resident_bytes(self) -> int: ...

@final
class KeySet:
    def local_mean(self, queries: _F32, *, kernel: _Kernel) -> _Means: ...
    def local_polynomial(self, queries: _F32, *, kernel: _Kernel, degree: int = 1) -> _Fit: ...
    def local_pca(self, queries: _F32, *, kernel: _Kernel, components: int = 1) -> _Pca: ...
    def row_states(self, queries: _F32, *, kernel: _Kernel) -> _States: ...
    def log_density(self, queries: _F32, *, kernel: _Kernel) -> _F64: ...
    def density(self, queries: _F32, *, kernel: _Kernel) -> _F64: ...
    def predict_proba(self, queries: _F32, *, kernel: _Kernel) -> _Means: ...
    def classify(self, queries: _F32, *, kernel: _Kernel) -> tuple[_I64, _F32, int]: ...
    def knn(self, queries: _F32, k: int, metric: str = "euclidean") -> tuple[_I64, _F32]: ...
    def local_mean_variable(self, queries: _F32, *, profile: str = "gaussian") -> _Means: ...
    def log_density_variable(self, queries: _F32, *, profile: str = "gaussian") -> _F64: ...
    @property
    def bandwidths(self) -> _F32 | None: ...
    @property
    def rows(self) -> int: ...
    @property
    def dim(self) -> int: ...
    @property
    def value_cols(self) -> int | None: ...
    @property
    def resident_bytes(self) -> int: ...
    def stats(self) -> dict[str, int]: ...

@final
class MeanShiftParams:
    def __new__(
        cls,
        kernel: _ShiftKernel,
        *,
        seeds: _F32 | int | None = None,
        max_iter: int = 300,
        tol: float = 1e-3,
        blurring: bool = False,
        cluster_all: bool = True,
        bandwidths: _F32 | None = None,
    ) -> Self: ...

def local_mean(engine: Engine, queries: _F32, keys: _F32, values: _F32, *, kernel: _Kernel) -> _Means: ...
def self_local_mean(engine: Engine, points: _F32, *, kernel: _Kernel) -> _Means: ...
def local_polynomial(
    engine: Engine, queries: _F32, keys: _F32, values: _F32, *, kernel: _Kernel, degree: int = 1
) -> _Fit: ...
def local_pca(engine: Engine, queries: _F32, keys: _F32, *, kernel: _Kernel, components: int = 1) -> _Pca: ...
def score(engine: Engine, queries: _F32, keys: _F32, *, kernel: _Kernel) -> _Means: ...
def impute(
    engine: Engine, queries: _F32, keys: _F32 | None = None, *, kernel: _Kernel, iterations: int = 1
) -> tuple[_F32, int, int]: ...
def kernel_matrix(engine: Engine, queries: _F32, keys: _F32, *, kernel: _Kernel, normalize: bool = False) -> _Means: ...
def laplacian(engine: Engine, points: _F32, *, kernel: _Kernel, normalized: bool = False) -> _F32: ...
def log_density(engine: Engine, queries: _F32, keys: _F32, weights: _F32 | None = None, *, kernel: _Kernel) -> _F64: ...
def log_density_variable(engine: Engine, queries: _F32, keys: _F32, bandwidths: _F32, *, profile: str = "gaussian", per_query: bool = False) -> _F64: ...
def knn_bandwidths(engine: Engine, points: _F32, k: int, alpha: float = 1.0) -> _F32: ...
def balloon_bandwidths(engine: Engine, queries: _F32, keys: _F32, k: int, alpha: float = 1.0) -> _F32: ...
def local_mean_variable(
    engine: Engine,
    queries: _F32,
    keys: _F32,
    values: _F32,
    bandwidths: _F32,
    *,
    profile: str = "gaussian",
    per_query: bool = False,
) -> _Means: ...
def knn(engine: Engine, queries: _F32, keys: _F32, k: int, metric: str = "euclidean") -> tuple[_I64, _F32]: ...
def kernel_softmax(
    engine: Engine, phi: _F32, psi: _F32, values: _F32, *, scale: float | None = None, causal: bool = False
) -> _F32: ...
def feature_local_mean(engine: Engine, phi: _F32, psi: _F32, values: _F32, *, causal: bool = False) -> _Means: ...
def mean_shift(engine: Engine, points: _F32, params: MeanShiftParams) -> _Clustering: ...
def medoid_shift(
    engine: Engine, points: _F32, *, kernel: _ShiftKernel, max_iter: int = 300, distances: bool = False
) -> tuple[_I64, _Clustering]: ...
def estimate_bandwidth(engine: Engine, points: _F32, *, quantile: float = 0.3, n_samples: int | None = None) -> float: ...
def generate(
    engine: Engine,
    data: _F32,
    *,
    schedule: tuple[str, int, float | None, float | None] | list[float],
    bandwidths: float | list[float],
    kernel: str,
    samples: int | None = None,
    seed: int = 0,
    trajectory: bool = False,
) -> tuple[_F32, list[_F32], list[float], list[float], int]: ...
def loo_error_per_feature(
    engine: Engine, points: _F32, values: _F32 | None, *, profile_name: str, bandwidths: list[float]
) -> tuple[float, list[float], int]: ...
def select_bandwidths_per_feature(
    engine: Engine,
    points: _F32,
    values: _F32 | None,
    *,
    profile_name: str,
    max_iter: int = 100,
    tol: float = 1e-07,
    gradient_tol: float = 1e-05,
    initial: list[float] | None = None,
    bound_factor: float = 1000.0,
) -> tuple[list[float], float, int, int, bool, list[float], list[float]]: ...

# What locus.distributed computes on the driver.
def merge_states(a: _States, b: _States) -> _States: ...
def shift_step(positions: _F32, means: _F32, thr_sq: float) -> npt.NDArray[np.bool_]: ...
def rank_modes(candidates: _F32, populations: _F64, h: float, seeds: int) -> tuple[_F32, _U64]: ...
def neighbour_sq_dists(queries: _F32, keys: _F32, indices: _I64) -> _F32: ...
def check_kernel(kernel: _Kernel) -> None: ...
