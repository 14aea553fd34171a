//! The interfaces both backends implement ([`Backend`]: keys prepared for
//! queries and the ops over no prepared keys; [`PreparedKeys`] and
//! [`PreparedAttention`]: keys prepared on the backend, for a set kept
//! across calls or for one call), and what an engine reports about the one
//! it runs on.

use std::fmt;
use std::sync::Arc;

use crate::error::Result;
use crate::kernel::{Kernel, Metric, Profile};
use crate::matrix::Matrix;
use crate::memory::MemoryUsage;
use crate::types::{
    Attention, GradStates, Heads, MomentLayout, Neighbours, RowNormalized, RowStates, Shift,
    ShiftOutcome, VariableKeys,
};

/// Which matrix [`PreparedKeys::kernel_matrix`] produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MatrixMode {
    /// `K`.
    Raw,
    /// `D⁻¹K` (rows with no mass are NaN and counted).
    RowNormalized,
    /// `D − K` (queries are the keys).
    Laplacian,
    /// `I − D⁻¹K` (queries are the keys).
    NormalizedLaplacian,
    /// Squared Euclidean distances `‖q_i − x_j‖²` (the kernel must have
    /// bandwidth 1; its profile is ignored).
    SqDistance,
}

/// The one call a set of keys prepared by [`Backend::prepare_call`]
/// serves: its queries, kernel and what it computes, so the keys are laid
/// out as that call's own plan cuts them (GPU key tiles, CPU inner-product
/// panels), exactly as a call that uploads its keys itself would.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Call<'k> {
    /// The op, as its errors name it.
    pub op: &'static str,
    /// Query rows `M`.
    pub rows: usize,
    /// The kernel (`None`: kNN, which has none).
    pub kernel: Option<&'k Kernel>,
    /// What the call computes.
    pub kind: CallKind,
}

/// What a [`Call`] computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallKind {
    /// Local means or row states with `cols` value columns (0: sums only).
    Means {
        /// Value columns.
        cols: usize,
    },
    /// Local moments of this layout.
    Moments(MomentLayout),
    /// The `k` nearest keys.
    Knn {
        /// Neighbours per query.
        k: usize,
        /// Measured by differences (a metric other than the Euclidean one).
        differences: bool,
    },
    /// A kernel matrix.
    Matrix,
}

impl<'k> Call<'k> {
    /// Local means (`op` "local_mean") or row states ("row_states") of
    /// `rows` queries with `cols` value columns.
    pub(crate) fn means(op: &'static str, kernel: &'k Kernel, rows: usize, cols: usize) -> Self {
        Call {
            op,
            rows,
            kernel: Some(kernel),
            kind: CallKind::Means { cols },
        }
    }

    /// Local moments of `layout` at `rows` queries.
    pub(crate) fn moments(kernel: &'k Kernel, rows: usize, layout: MomentLayout) -> Self {
        Call {
            op: "local_moments",
            rows,
            kernel: Some(kernel),
            kind: CallKind::Moments(layout),
        }
    }

    /// The `k` nearest keys of `rows` queries under `metric`.
    pub(crate) fn knn(rows: usize, k: usize, metric: &Metric) -> Self {
        Call {
            op: "knn",
            rows,
            kernel: None,
            kind: CallKind::Knn {
                k,
                differences: !metric.is_euclidean(),
            },
        }
    }

    /// A kernel matrix of `rows` queries.
    pub(crate) fn matrix(kernel: &'k Kernel, rows: usize) -> Self {
        Call {
            op: "kernel_matrix",
            rows,
            kernel: Some(kernel),
            kind: CallKind::Matrix,
        }
    }
}

/// Queries to prepared keys: their rows (checked against the keys), the
/// kernel that weighs them, and whether row `i` leaves key `i` out
/// (leave-one-out row states: the queries are then the keys; only
/// [`PreparedKeys::row_states`] takes such a query).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Query<'q> {
    /// The kernel.
    pub kernel: &'q Kernel,
    /// The query rows (`M × d`).
    pub rows: &'q Matrix<'q>,
    /// Leave each row's own key out.
    pub exclude_self: bool,
}

impl<'q> Query<'q> {
    /// `rows` weighed by `kernel`, every key counted.
    pub(crate) fn new(kernel: &'q Kernel, rows: &'q Matrix<'q>) -> Self {
        Query {
            kernel,
            rows,
            exclude_self: false,
        }
    }

    /// The same kernel and rule for other rows (a batch's, a chunk's).
    pub(crate) fn with_rows<'r>(&self, rows: &'r Matrix<'r>) -> Query<'r>
    where
        'q: 'r,
    {
        Query { rows, ..*self }
    }
}

/// A local-moment pass over prepared keys: its layout, and the value
/// matrix whose columns are the layout's `qy` (`None`: no values).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Moments {
    /// Which averages.
    pub layout: MomentLayout,
    /// Which value matrix.
    pub set: Option<usize>,
}

/// Keys and value matrices prepared on a backend for queries: on the GPU,
/// key tiles in device buffers; on the CPU, the transposed, padded layout
/// its kernels stream. Kept for many calls (a [`KeySet`](crate::KeySet):
/// owned buffers charged to the memory budget) or for one
/// ([`Backend::prepare_call`]: pooled buffers, no reservation): either way
/// every op over keys runs this one code path. Inputs arrive validated
/// (finite, non-empty, `d` columns, `k` in range). Freed when dropped.
pub(crate) trait PreparedKeys: Send + Sync + fmt::Debug {
    /// Local means of value matrix `set` at the queries.
    fn local_mean(&self, q: &Query<'_>, set: usize) -> Result<RowNormalized>;

    /// Row states `(m, s, u)` with value matrix `set` (`None`: row sums
    /// only), each row leaving its own key out where the query says so.
    fn row_states(&self, q: &Query<'_>, set: Option<usize>) -> Result<RowStates>;

    /// Local moments (`layout`) of the keys' offsets from each query and of
    /// the pass's value matrix: `M × layout.cols()` kernel-weighted
    /// averages; rows without mass in `f32` are finished in `f64` (far
    /// rows), and NaN (counted) where they have none at all.
    fn local_moments(&self, q: &Query<'_>, pass: Moments) -> Result<RowNormalized>;

    /// The `k` nearest keys of every query under `metric` (its dimension
    /// checked by the caller), with their distances.
    fn knn(&self, queries: &Matrix<'_>, k: usize, metric: &Metric) -> Result<Neighbours>;

    /// A kernel matrix of the queries against the keys (`M × N`) and, for
    /// the normalized modes, its count of empty rows.
    fn kernel_matrix(&self, q: &Query<'_>, mode: MatrixMode) -> Result<RowNormalized>;

    /// Fails when this backend cannot return `k` neighbours (`1 ≤ k ≤ N`
    /// is checked by the caller).
    fn check_k(&self, k: usize) -> Result<()>;

    /// Bytes held for the keys and values (0 for a set prepared for one
    /// call, which reserves nothing).
    fn bytes(&self) -> u64;
}

/// The key side of variable-bandwidth passes prepared on a backend
/// ([`VariableKeys`]: keys, values, per-key scales and log-weights), each
/// call passing only its queries (docs/numerics.md, "Variable
/// bandwidths"). Freed when dropped.
pub(crate) trait PreparedVariable: Send + Sync + fmt::Debug {
    /// Row states of `queries` (per-query scales `rows`, if any) over the
    /// keys, with their values when `with_values`; far rows finished in
    /// `f64`.
    fn states(
        &self,
        op: &'static str,
        profile: Profile,
        queries: (&Matrix<'_>, Option<&[f32]>),
        with_values: bool,
    ) -> Result<RowStates>;

    /// Bytes held for the keys (0 for a call's, which reserves nothing).
    fn bytes(&self) -> u64;
}

/// Attention keys and values prepared on a backend for queries
/// ([`AttentionSet`](crate::AttentionSet), or one
/// [`kernel_softmax`](crate::Engine::kernel_softmax) call): on the GPU,
/// key tiles in device buffers; on the CPU, the packed layout its kernels
/// stream. Queries arrive validated against them (batches, dimension,
/// mask, logit range). Freed when dropped.
pub(crate) trait PreparedAttention: Send + Sync + fmt::Debug {
    /// `softmax(s·ΦΨᵀ)V` of every batch, row-major `(B·M) × q`.
    fn attend(&self, phi: &Heads<'_>, attn: &Attention) -> Result<Vec<f32>>;

    /// Bytes held for the keys and values.
    fn bytes(&self) -> u64;
}

/// What every backend provides: keys (and attention keys) prepared for
/// queries, and the ops that query no prepared keys. Inputs arrive
/// validated (finite, non-empty, consistent shapes); the CPU
/// implementation is the reference and exists for every op.
pub(crate) trait Backend: Send + Sync + fmt::Debug {
    /// What this backend is.
    fn info(&self) -> &BackendInfo;

    /// Keeps `keys` and the value matrices `sets` (one row per key each)
    /// for repeated queries of any op (a [`KeySet`](crate::KeySet)),
    /// charged to the memory budget.
    fn prepare(&self, keys: &Matrix<'_>, sets: &[Matrix<'_>]) -> Result<Arc<dyn PreparedKeys>>;

    /// Prepares `keys` and `sets` for the one `call` of a one-shot op, laid
    /// out as that call plans: the same code as a key set, without its
    /// memory reservation (GPU buffers come from the pool and the host
    /// matrices stay borrowed: the CPU's kNN re-measures from `keys`
    /// themselves).
    fn prepare_call<'a>(
        &'a self,
        keys: &'a Matrix<'a>,
        sets: &[Matrix<'a>],
        call: &Call<'_>,
    ) -> Result<Box<dyn PreparedKeys + 'a>>;

    /// Keeps attention keys `psi` and their `values` (validated, one value
    /// row per key) for repeated [`PreparedAttention::attend`] calls,
    /// charged to the memory budget.
    fn prepare_attention(
        &self,
        psi: &Heads<'_>,
        values: &Heads<'_>,
    ) -> Result<Arc<dyn PreparedAttention>>;

    /// Prepares attention keys and values for one call
    /// (`kernel_softmax`), without a memory reservation: borrowed, and
    /// laid out batch group by batch group as the call runs.
    fn prepare_attention_call<'a>(
        &'a self,
        psi: &Heads<'a>,
        values: &Heads<'a>,
    ) -> Result<Box<dyn PreparedAttention + 'a>>;

    /// Local means of `values` with masked distances: `queries` and `keys`
    /// may hold NaN (missing coordinates), which no prepared key set takes;
    /// a pair's squared distance is `(d / n_shared)·Σ` over the coordinates
    /// both observe, and a pair with none has no weight. NaN rows (counted)
    /// without mass; no far-row finishing.
    fn masked_local_mean(
        &self,
        kernel: &Kernel,
        queries: &Matrix<'_>,
        keys: &Matrix<'_>,
        values: &Matrix<'_>,
    ) -> Result<RowNormalized>;

    /// The normalized weights `softmax(s·ΦΨᵀ)` of every batch, row-major
    /// `(B·M) × N`, masked entries 0.
    fn softmax_matrix(
        &self,
        phi: &Heads<'_>,
        psi: &Heads<'_>,
        attn: &Attention,
    ) -> Result<Vec<f32>>;

    /// Linear feature local mean `(ΦΨᵀV) ⊘ (ΦΨᵀ1)` of every batch
    /// (non-negative features), row-major `(B·M) × q`, and the count of
    /// rows with zero weight (NaN).
    fn feature_local_mean(
        &self,
        phi: &Heads<'_>,
        psi: &Heads<'_>,
        values: &Heads<'_>,
        causal: bool,
    ) -> Result<(Vec<f32>, usize)>;

    /// The leave-one-out gradient's row sums (`types::GradStates`) of
    /// every point of `points` (already divided by per-feature bandwidths,
    /// Euclidean) with targets `values`, each row leaving its own key
    /// out: the per-feature bandwidth search's one pass over the keys.
    /// Rows whose every key lies beyond the `f32` range come back empty;
    /// the caller finishes them in `f64`.
    fn loo_grad_states(
        &self,
        profile: Profile,
        points: &Matrix<'_>,
        values: &Matrix<'_>,
    ) -> Result<GradStates>;

    /// MeanShift iterations: the seeds move to their local means over the
    /// points until each shift is within tolerance, or, blurring, the
    /// seeds are the points and move together.
    fn mean_shift(&self, shift: Shift<'_>) -> Result<ShiftOutcome>;

    /// The key side of variable-bandwidth passes kept on the backend (a key
    /// set's): on the GPU, key tiles with their scales and values in
    /// buffers of its own, charged to the engine's device budget, beside a
    /// host copy of the rows (which far rows read; not charged: the GPU
    /// engine's budget is its device memory); on the CPU, a copy of the
    /// rows, charged to the engine's budget.
    fn prepare_variable(&self, keys: VariableKeys<'_>) -> Result<Arc<dyn PreparedVariable>>;

    /// The key side of variable-bandwidth passes for one call or one run
    /// (a MeanShift's iterations): on the GPU, uploaded once from the
    /// pool; nothing reserved.
    fn prepare_variable_call<'a>(
        &'a self,
        op: &'static str,
        keys: VariableKeys<'a>,
    ) -> Result<Box<dyn PreparedVariable + 'a>>;

    /// The device's limits and features; `None` on the CPU.
    fn gpu_limits(&self) -> Option<&GpuLimits> {
        None
    }

    /// Where the device keeps its compiled pipelines between processes;
    /// `None` on the CPU.
    fn pipeline_cache(&self) -> Option<&PipelineCacheStatus> {
        None
    }

    /// Device time of the compute passes since the last call, when the
    /// backend times them; `None` otherwise.
    fn take_gpu_time(&self) -> Result<Option<std::time::Duration>> {
        Ok(None)
    }

    /// Memory held, against the engine's limit.
    fn memory(&self) -> MemoryUsage;
}

/// What the GPU device of an [`Engine`](crate::Engine) allows: the limits
/// the tiling plan works within and the adapter's optional features. For
/// reports (`locus info`); the engine itself needs nothing from it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GpuLimits {
    /// Largest buffer, bytes.
    pub max_buffer_size: u64,
    /// Largest storage-buffer binding, bytes (bounds a key tile).
    pub max_storage_buffer_binding_size: u64,
    /// Workgroups per dispatch dimension (bounds a query tile).
    pub max_compute_workgroups_per_dimension: u32,
    /// Threads per workgroup.
    pub max_compute_invocations_per_workgroup: u32,
    /// Workgroup memory, bytes.
    pub max_compute_workgroup_storage_size: u32,
    /// Optional features the adapter offers, by wgpu's names
    /// (`SHADER_F16`, `TIMESTAMP_QUERY`, …); locus requests none of them.
    pub adapter_features: Vec<String>,
}

/// The on-disk pipeline cache of a GPU [`Engine`](crate::Engine): compiled
/// pipelines kept between processes, so a second process on the same
/// adapter and driver compiles nothing (see
/// [`EngineOptions::pipeline_cache`](crate::EngineOptions::pipeline_cache)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PipelineCacheStatus {
    /// No cache directory: none was given, `LOCUS_PIPELINE_CACHE` is set
    /// empty, or there is no user cache directory.
    Off,
    /// The adapter keeps no application pipeline cache (wgpu has one on
    /// Vulkan only, where the adapter offers `PIPELINE_CACHE`).
    Unsupported {
        /// Why, for reports.
        reason: String,
    },
    /// The device could not create a pipeline cache; the engine runs
    /// without one.
    Unavailable {
        /// The cache file.
        path: std::path::PathBuf,
        /// The device's error.
        reason: String,
    },
    /// Pipelines are read from `path` when the device opens and written
    /// back (a temporary file renamed over it) after each new one.
    Active {
        /// The cache file (one per adapter model, named by wgpu).
        path: std::path::PathBuf,
        /// Bytes of cache data loaded (0: none there, or ignored).
        loaded_bytes: u64,
        /// Why a file that was there was not used (corrupt, truncated,
        /// another adapter or driver); it is replaced on the next write.
        ignored: Option<String>,
    },
}

impl PipelineCacheStatus {
    /// Whether the engine reads and writes a cache file.
    pub fn is_active(&self) -> bool {
        matches!(self, PipelineCacheStatus::Active { .. })
    }

    /// The cache file, when there is one.
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            PipelineCacheStatus::Active { path, .. }
            | PipelineCacheStatus::Unavailable { path, .. } => Some(path),
            _ => None,
        }
    }
}

impl fmt::Display for PipelineCacheStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PipelineCacheStatus::Off => f.write_str("off"),
            PipelineCacheStatus::Unsupported { reason } => {
                write!(f, "not supported ({reason})")
            }
            PipelineCacheStatus::Unavailable { path, reason } => {
                write!(f, "unavailable: {} ({reason})", path.display())
            }
            PipelineCacheStatus::Active {
                path,
                loaded_bytes,
                ignored,
            } => {
                write!(f, "{}", path.display())?;
                match ignored {
                    Some(why) => write!(f, " (existing data ignored: {why})"),
                    None if *loaded_bytes > 0 => write!(f, " ({loaded_bytes} bytes loaded)"),
                    None => f.write_str(" (empty)"),
                }
            }
        }
    }
}

/// The backend an [`Engine`](crate::Engine) runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendInfo {
    /// The rayon CPU path.
    Cpu {
        /// Worker threads.
        threads: usize,
        /// Vector instruction set the kernels were dispatched to.
        simd: &'static str,
    },
    /// A wgpu adapter.
    Gpu {
        /// Adapter name, e.g. `"NVIDIA H200"` or `"llvmpipe (LLVM 15.0.6, 256 bits)"`.
        name: String,
        /// Graphics API, e.g. `"Vulkan"`.
        api: String,
        /// wgpu's device type, e.g. `"DiscreteGpu"`, `"Cpu"`.
        device_type: String,
        /// Driver name and version as reported.
        driver: String,
        /// Whether this is a software rasterizer (device type `Cpu`, e.g. lavapipe).
        software: bool,
    },
}

impl BackendInfo {
    /// `"cpu"` or `"gpu"`.
    pub fn kind(&self) -> &'static str {
        match self {
            BackendInfo::Cpu { .. } => "cpu",
            BackendInfo::Gpu { .. } => "gpu",
        }
    }

    /// Whether this is a GPU backend.
    pub fn is_gpu(&self) -> bool {
        matches!(self, BackendInfo::Gpu { .. })
    }

    /// Whether this is a software GPU (runs shaders on the CPU).
    pub fn is_software(&self) -> bool {
        matches!(self, BackendInfo::Gpu { software: true, .. })
    }
}

impl fmt::Display for BackendInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendInfo::Cpu { threads, simd } => {
                write!(f, "cpu (rayon, {threads} threads, {simd})")
            }
            BackendInfo::Gpu {
                name,
                api,
                device_type,
                software,
                ..
            } => {
                write!(f, "gpu: {name} ({api}, {device_type})")?;
                if *software {
                    f.write_str(" [software adapter]")?;
                }
                Ok(())
            }
        }
    }
}
