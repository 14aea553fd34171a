//! The crate's one error type, and the clustering errors it wraps.

mod cluster;

pub use cluster::ClusterError;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in locus.
///
/// Variants name the operation (`op`) and the sizes involved, so a message
/// read in a log says what was being computed and on what.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The bandwidth is not finite, not positive, or so extreme that `1/h²`
    /// is not a normal `f32`.
    // The range is `kernel::{MIN_BANDWIDTH, MAX_BANDWIDTH}`, written out
    // because this leaf module imports nothing (a kernel test checks it).
    #[error(
        "bandwidth must be finite and within [1e-18, 1e18] (so that 1/h² is a normal f32), got {value}"
    )]
    InvalidBandwidth {
        /// The rejected value.
        value: f64,
    },

    /// A profile name that is not one of the eight known ones.
    #[error(
        "unknown kernel profile {name:?} (expected one of gaussian, epanechnikov, uniform, triangular, biweight, laplacian, cauchy, cosine)"
    )]
    UnknownProfile {
        /// The rejected name.
        name: String,
    },

    /// A metric name that is not one of the supported ones.
    #[error(
        "unknown metric {name:?} (expected one of euclidean, l2, manhattan, cityblock, l1, chebyshev, infinity, minkowski (with p), haversine)"
    )]
    UnknownMetric {
        /// The rejected name.
        name: String,
    },

    /// Data whose column count the metric does not take (haversine: 2).
    #[error("{op}: the {metric} metric takes {expected} columns but the data has {data}")]
    MetricDimension {
        /// Operation name.
        op: &'static str,
        /// The metric's name.
        metric: &'static str,
        /// Columns the metric takes.
        expected: usize,
        /// Columns of the data.
        data: usize,
    },

    /// An op that computes Euclidean distances only was asked for another
    /// metric (it never computes the Euclidean one in its place).
    #[error("{op} supports the euclidean metric only, got {metric}")]
    UnsupportedMetric {
        /// Operation name.
        op: &'static str,
        /// The metric asked for.
        metric: String,
    },

    /// Queries and keys (or points) do not have the same number of columns.
    #[error("{op}: queries have dimension {queries} but keys have dimension {keys}")]
    DimensionMismatch {
        /// Operation name.
        op: &'static str,
        /// Columns of the queries.
        queries: usize,
        /// Columns of the keys.
        keys: usize,
    },

    /// A product kernel's blocks do not cover the data's columns.
    #[error(
        "{op}: the product kernel's blocks cover {kernel} coordinates but the data has {data} columns"
    )]
    KernelDimension {
        /// Operation name.
        op: &'static str,
        /// `Σ dims` of the kernel's blocks.
        kernel: usize,
        /// Columns of the data.
        data: usize,
    },

    /// Values do not have one row per key.
    #[error("{op}: {keys} keys but {values} value rows; values need one row per key")]
    RowMismatch {
        /// Operation name.
        op: &'static str,
        /// Rows of the keys.
        keys: usize,
        /// Rows of the values.
        values: usize,
    },

    /// An input with no rows or no columns.
    #[error("{op}: {what} is empty ({rows}×{cols}); it needs at least one row and one column")]
    EmptyInput {
        /// Operation name.
        op: &'static str,
        /// Which input (`"queries"`, `"keys"`, `"values"`, `"points"`).
        what: &'static str,
        /// Its rows.
        rows: usize,
        /// Its columns.
        cols: usize,
    },

    /// A NaN or infinite entry in the data.
    #[error("{op}: {what} has a non-finite value ({value}) at row {row}, column {col}")]
    NonFinite {
        /// Operation name.
        op: &'static str,
        /// Which input.
        what: &'static str,
        /// Row of the first offending entry.
        row: usize,
        /// Column of the first offending entry.
        col: usize,
        /// The value itself (NaN or ±inf).
        value: f32,
    },

    /// An invalid parameter other than the bandwidth (tile limits, options, …).
    #[error("invalid parameter {name}: {reason}")]
    InvalidParameter {
        /// Parameter name.
        name: &'static str,
        /// What is wrong with it.
        reason: String,
    },

    /// A result or working set too large to allocate.
    #[error("{op}: {what} needs {bytes} bytes, which cannot be allocated")]
    TooLarge {
        /// Operation name.
        op: &'static str,
        /// What was being allocated.
        what: &'static str,
        /// Bytes requested (saturated at `u64::MAX`).
        bytes: u64,
    },

    /// A GPU was required but wgpu found no adapter.
    #[error(
        "no GPU adapter found on backends {backends}; install a Vulkan driver (e.g. `apt-get install mesa-vulkan-drivers` for the software one) or use the CPU backend"
    )]
    NoAdapter {
        /// The wgpu backends that were searched.
        backends: String,
    },

    /// The adapter asked for (by [`EngineOptions::adapter`](crate::EngineOptions::adapter)
    /// or `LOCUS_ADAPTER`) is not among those wgpu finds.
    #[error("no GPU adapter matches {wanted}; adapters found: {available}")]
    AdapterNotFound {
        /// What was asked for, e.g. `index 3` or `name containing "h200"`.
        wanted: String,
        /// The adapters found, with their indices (`none` when there are none).
        available: String,
    },

    /// Hardware was required (`LOCUS_REQUIRE_HARDWARE=1` or
    /// [`EngineOptions::require_hardware`](crate::EngineOptions::require_hardware))
    /// but the adapter chosen is a software rasterizer, which runs shaders on the CPU.
    #[error(
        "GPU adapter {adapter:?} is a software rasterizer (it runs shaders on the CPU) and a hardware adapter is required"
    )]
    SoftwareAdapter {
        /// Adapter name.
        adapter: String,
    },

    /// The adapter exists but refused to create a device.
    #[error("could not open GPU device on adapter {adapter:?}: {reason}")]
    DeviceRequest {
        /// Adapter name.
        adapter: String,
        /// wgpu's message.
        reason: String,
    },

    /// A validation or internal error reported by wgpu while running an op.
    #[error("{op} ({sizes}): GPU error: {message}")]
    Gpu {
        /// Operation name.
        op: &'static str,
        /// Sizes of the op, e.g. `M=777 N=1301 d=7`.
        sizes: String,
        /// wgpu's message.
        message: String,
    },

    /// The device ran out of memory while running an op.
    #[error("{op} ({sizes}): GPU out of memory")]
    GpuOutOfMemory {
        /// Operation name.
        op: &'static str,
        /// Sizes of the op.
        sizes: String,
    },

    /// The GPU device was lost (driver reset, removal); create a new engine.
    #[error("GPU device lost: {reason}")]
    DeviceLost {
        /// The driver's reason.
        reason: String,
    },

    /// An allocation would pass the engine's memory limit
    /// ([`EngineOptions::memory_limit`](crate::EngineOptions::memory_limit)).
    /// Nothing was changed: the engine and its key sets keep working, and
    /// a smaller request (or the same one later) can succeed.
    #[error(
        "{op}: {what} needs {bytes} bytes, but {in_use} of the {limit}-byte memory limit are in use"
    )]
    MemoryLimit {
        /// Operation name.
        op: &'static str,
        /// What was being allocated.
        what: &'static str,
        /// Bytes requested.
        bytes: u64,
        /// Bytes held when the request was refused.
        in_use: u64,
        /// The limit.
        limit: u64,
    },

    /// An array with a number of axes the op does not accept.
    #[error("{op}: {what} has {ndim} axes; expected 2 (rows × cols) or 3 (batch × rows × cols)")]
    Rank {
        /// Operation name.
        op: &'static str,
        /// Which input.
        what: &'static str,
        /// Its number of axes.
        ndim: usize,
    },

    /// Inputs of a batched op do not have the same batch size.
    #[error("{op}: {what} has batch size {got} but phi has {expected}")]
    BatchMismatch {
        /// Operation name.
        op: &'static str,
        /// Which input.
        what: &'static str,
        /// Batch size of `phi`.
        expected: usize,
        /// Batch size of `what`.
        got: usize,
    },

    /// A causal mask with more queries than keys: the first queries would
    /// see no key at all.
    #[error(
        "{op}: the causal mask needs at most as many queries as keys per batch, got {queries} queries and {keys} keys"
    )]
    CausalShape {
        /// Operation name.
        op: &'static str,
        /// Query rows per batch.
        queries: usize,
        /// Key rows per batch.
        keys: usize,
    },

    /// A negative entry in a feature map whose weights must form a kernel.
    #[error(
        "{op}: {what} has a negative value ({value}) at row {row}, column {col}; features must be non-negative"
    )]
    NegativeFeature {
        /// Operation name.
        op: &'static str,
        /// Which input.
        what: &'static str,
        /// Row of the first offending entry (batches stacked: row `b·rows + i`).
        row: usize,
        /// Column of the first offending entry.
        col: usize,
        /// The value itself.
        value: f32,
    },

    /// Logits `scale·⟨φ, ψ⟩` whose size could exceed the `f32` range.
    #[error(
        "{op}: logits scale·⟨phi, psi⟩ may reach {bound:e}, beyond the f32 range; rescale the features or the scale"
    )]
    LogitOverflow {
        /// Operation name.
        op: &'static str,
        /// `|scale|·max‖φ_i‖·max‖ψ_j‖` (or `|scale|·max|φ|`), an upper bound on the logits.
        bound: f64,
    },

    /// The op (or this configuration of it) has no implementation on this backend.
    #[error("{op} is not supported on the {backend} backend: {reason}")]
    Unsupported {
        /// Operation name.
        op: &'static str,
        /// `"cpu"` or `"gpu"`.
        backend: &'static str,
        /// Why.
        reason: String,
    },

    /// The call was cancelled through its [`CancelToken`](crate::CancelToken)
    /// (or the token's deadline passed) before it finished. Nothing was
    /// returned and nothing was changed: the engine and its key sets keep
    /// working.
    #[error("{op}: {reason} before the call finished")]
    Cancelled {
        /// Operation name.
        op: &'static str,
        /// `"cancelled"` or `"deadline passed"`.
        reason: &'static str,
    },

    /// The engine's own CPU thread pool
    /// ([`EngineOptions::threads`](crate::EngineOptions::threads)) could
    /// not be started (the system refused a thread).
    #[error("could not start a pool of {threads} CPU threads: {reason}")]
    ThreadPool {
        /// Threads asked for.
        threads: usize,
        /// The system's reason.
        reason: String,
    },

    /// A clustering parameter, or data a clustering method cannot use.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}
