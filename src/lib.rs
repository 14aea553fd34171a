//! # locus
//!
//! A compute engine for *localization methods*: models built from a
//! localization kernel `K(x, x') = k(‖x − x'‖/h)` and local means
//! (Nadaraya–Watson averages) `ŷ(q) = Σ_j K(q, x_j) y_j / Σ_j K(q, x_j)`.
//!
//! Every op runs on a GPU through wgpu (WGSL compute shaders, tiled to the
//! device) and on the CPU through rayon, with the same numerics: exponential
//! kernels are accumulated in the log domain with a running maximum, so a
//! tiny bandwidth still gives the nearest keys' average rather than NaN.
//!
//! ```
//! use locus::{Engine, Kernel, Profile};
//! use ndarray::Array2;
//!
//! let engine = Engine::new(); // hardware GPU if there is one, else CPU
//! let x = Array2::from_shape_fn((100, 2), |(i, j)| ((i * 7 + j * 3) % 11) as f32);
//! let kernel = Kernel::new(Profile::Epanechnikov, 3.0)?;
//! let smoothed = engine.self_local_mean(&kernel, x.view())?;
//! assert_eq!(smoothed.values.dim(), (100, 2));
//! assert_eq!(smoothed.empty_rows, 0);
//! # Ok::<(), locus::Error>(())
//! ```

// Layers, each importing only the ones above it in this list (the
// dependency direction of docs/architecture.md):
// leaf types → backend traits → the two backends → engine → public API.
mod error;

mod cancel;
mod grid;
mod kd;
pub mod kernel;
mod matrix;
mod memory;
mod space;
mod types;

mod backend;

mod cpu;
mod gpu;

mod engine;

mod ops;

mod cluster;
mod generate;
mod sets;

pub use backend::{BackendInfo, GpuLimits, PipelineCacheStatus};
pub use cancel::CancelToken;
pub use cluster::{
    AdaptiveBandwidth, Bandwidth, ClusterError, MeanShiftFit, MeanShiftParams,
    MeanShiftValidParams, MedoidShiftFit, MedoidShiftParams, MedoidShiftValidParams, Progress,
    Seeds, scott_bandwidth, silverman_bandwidth,
};
pub use cluster::{neighbour_sq_dists, rank_modes, shift_step};
pub use engine::{
    ADAPTER_ENV, DEFAULT_MEMORY_WAIT, Device, Engine, EngineOptions, PIPELINE_CACHE_ENV,
    REQUIRE_HARDWARE_ENV, default_pipeline_cache_dir,
};
pub use error::{Error, Result};
pub use generate::{
    DEFAULT_SIGMA_MAX, DEFAULT_SIGMA_MIN, DEFAULT_STEPS, Diffusion, DiffusionParams,
    DiffusionValidParams, Generated, LevelBandwidths, MAX_STEPS, NoiseSchedule, Spacing,
};
pub use gpu::adapter::AdapterChoice;
pub use gpu::plan::TileLimits;
pub use kernel::{Kernel, Metric, Profile};
#[doc(hidden)]
pub use matrix::{first_non_finite, zeroed_vec};
pub use memory::MemoryUsage;
pub use ops::{
    BandwidthSelection, EmptyFallback, FeatureLocalMean, Imputed, KnnWeights, LaplacianKind,
    LocalFit, LocalModeClassifier, LocalPca, LooScore, MAX_IMPUTE_ITERATIONS, MAX_LOCAL_DIM,
    MAX_LOCAL_MAGNITUDE, MultiKernel, PerFeatureLoo, PerFeatureOptions, PerFeatureSelection,
    Predictions, RANK_TOLERANCE, SoftmaxParams, VariableBandwidth, labels_from_f32, ln_normalizer,
    merge_heads, split_heads,
};
pub use sets::{
    AttentionSet, BatchStats, Batching, Classification, KeySet, KeySetBuilder, KeySetOptions,
};
pub use types::merge_states;
pub use types::{Neighbours, RowNormalized, RowStates};

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
