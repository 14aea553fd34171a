"""Type stubs of the compiled module ``locus._locus``.

The public API is the Python layer (``locus``); these functions take
C-contiguous ``float32`` arrays exactly (the Python layer converts) and an
``Engine`` first.
"""

from typing import Any

import numpy as np
import numpy.typing as npt

__version__: str

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
# A profile name, or a product kernel's blocks [(dims, profile, bandwidth), …].
KernelSpec = str | list[tuple[int, str, float]]

class Engine:
    def __init__(self, backend: str = "auto", *, memory_limit: int | None = None) -> None: ...
    @property
    def backend(self) -> str: ...
    def info(self) -> dict[str, Any]: ...
    def prepare(
        self,
        keys: F32,
        values: F32 | None = None,
        labels: I64 | None = None,
        *,
        batching: bool = True,
        max_request_rows: int | None = None,
        nearest_fallback: bool = False,
    ) -> KeySet: ...
    def prepare_attention(self, psi: F32, values: F32) -> AttentionSet: ...

class AttentionSet:
    def attend(self, phi: F32, *, scale: float | None = None, causal: bool = False) -> F32: ...
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

class KeySet:
    @property
    def rows(self) -> int: ...
    @property
    def dim(self) -> int: ...
    @property
    def value_cols(self) -> int | None: ...
    @property
    def resident_bytes(self) -> int: ...
    def local_mean(self, queries: F32, *, bandwidth: float | None = None, kernel: KernelSpec = "gaussian") -> tuple[F32, int]: ...
    def local_polynomial(
        self, queries: F32, *, bandwidth: float | None = None, kernel: KernelSpec = "gaussian", degree: int = 1
    ) -> tuple[F32, F32 | None, int, int]: ...
    def local_pca(
        self, queries: F32, *, bandwidth: float | None = None, kernel: KernelSpec = "gaussian", components: int = 1
    ) -> tuple[F32, F32, F32, int]: ...
    def row_states(
        self, queries: F32, *, bandwidth: float | None = None, kernel: KernelSpec = "gaussian"
    ) -> tuple[F32, F64, F64]: ...
    def log_density(self, queries: F32, *, bandwidth: float | None = None, kernel: KernelSpec = "gaussian") -> F64: ...
    def density(self, queries: F32, *, bandwidth: float | None = None, kernel: KernelSpec = "gaussian") -> F64: ...
    def predict_proba(self, queries: F32, *, bandwidth: float | None = None, kernel: KernelSpec = "gaussian") -> tuple[F32, int]: ...
    def classify(
        self, queries: F32, *, bandwidth: float | None = None, kernel: KernelSpec = "gaussian"
    ) -> tuple[I64, F32, int]: ...
    def knn(self, queries: F32, k: int) -> tuple[I64, F32]: ...
    def stats(self) -> dict[str, int]: ...

def local_mean(
    engine: Engine, queries: F32, keys: F32, values: F32, *, bandwidth: float | None = None, kernel: KernelSpec = "gaussian"
) -> tuple[F32, int]: ...
def self_local_mean(
    engine: Engine, points: F32, *, bandwidth: float | None = None, kernel: KernelSpec = "gaussian"
) -> tuple[F32, int]: ...
def local_polynomial(
    engine: Engine,
    queries: F32,
    keys: F32,
    values: F32,
    *,
    bandwidth: float | None = None,
    kernel: KernelSpec = "gaussian",
    degree: int = 1,
) -> tuple[F32, F32 | None, int, int]: ...
def local_pca(
    engine: Engine, queries: F32, keys: F32, *, bandwidth: float | None = None, kernel: KernelSpec = "gaussian", components: int = 1
) -> tuple[F32, F32, F32, int]: ...
def impute(
    engine: Engine,
    queries: F32,
    keys: F32 | None = None,
    *,
    bandwidth: float | None = None,
    kernel: KernelSpec = "gaussian",
    iterations: int = 1,
) -> tuple[F32, int, int]: ...
def score(engine: Engine, queries: F32, keys: F32, *, bandwidth: float | None = None, kernel: KernelSpec = "gaussian") -> tuple[F32, int]: ...
def kernel_matrix(
    engine: Engine,
    queries: F32,
    keys: F32,
    *,
    bandwidth: float | None = None,
    kernel: KernelSpec = "gaussian",
    normalize: bool = False,
) -> tuple[F32, int]: ...
def laplacian(
    engine: Engine, points: F32, *, bandwidth: float | None = None, kernel: KernelSpec = "gaussian", normalized: bool = False
) -> F32: ...
def log_density(
    engine: Engine,
    queries: F32,
    keys: F32,
    *,
    bandwidth: float | None = None,
    kernel: KernelSpec = "gaussian",
    weights: F32 | None = None,
) -> F64: ...
def knn(engine: Engine, queries: F32, keys: F32, k: int) -> tuple[I64, F32]: ...
def kernel_softmax(
    engine: Engine, phi: F32, psi: F32, values: F32, *, scale: float | None = None, causal: bool = False
) -> F32: ...
def feature_local_mean(
    engine: Engine, phi: F32, psi: F32, values: F32, *, causal: bool = False
) -> tuple[F32, int]: ...
def mean_shift(
    engine: Engine,
    points: F32,
    *,
    bandwidth: float | None = None,
    bandwidth_rule: str = "quantile",
    quantile: float = 0.3,
    n_samples: int | None = None,
    kernel: KernelSpec = "uniform",
    seeds: F32 | None = None,
    bin_seeding: bool = False,
    min_bin_freq: int = 1,
    max_iter: int = 300,
    tol: float = 1e-3,
    blurring: bool = False,
    cluster_all: bool = True,
) -> dict[str, Any]: ...
def medoid_shift(
    engine: Engine,
    points: F32,
    *,
    bandwidth: float | None = None,
    bandwidth_rule: str = "quantile",
    quantile: float = 0.3,
    n_samples: int | None = None,
    kernel: KernelSpec = "gaussian",
    max_iter: int = 300,
    distances: bool = False,
) -> dict[str, Any]: ...
def estimate_bandwidth(
    engine: Engine, points: F32, *, quantile: float = 0.3, n_samples: int | None = None
) -> float: ...
