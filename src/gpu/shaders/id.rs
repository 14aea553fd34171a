//! [`ShaderId`]: the name of each compute shader entry point, the key of
//! the registry (`SHADERS`) and of the pipeline cache.
//!
//! Imports: nothing of the crate.

/// One compute shader entry point of the engine: the key of
/// [`SHADERS`](super::SHADERS) and of the pipeline cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ShaderId {
    /// `shaders/local_mean.wgsl`: fused local mean / row sums.
    LocalMean,
    /// `shaders/local_moments.wgsl`: local moments (local linear
    /// regression, local PCA, scores).
    LocalMoments,
    /// `shaders/kernel_matrix.wgsl`: kernel-matrix blocks.
    KernelMatrix,
    /// `shaders/fill.wgsl`: output sentinels.
    Fill,
    /// `shaders/knn.wgsl`: k nearest neighbours.
    Knn,
    /// `shaders/mean_shift.wgsl`: MeanShift gather / move / compact.
    MeanShift,
    /// `shaders/softmax.wgsl`: kernel softmax (attention), one pass.
    Softmax,
    /// `shaders/softmax_matrix.wgsl`: softmax weight-matrix blocks.
    SoftmaxMatrix,
    /// `shaders/feature_mean.wgsl`, entry `chunk_sums`.
    FeatureSums,
    /// `shaders/feature_mean.wgsl`, entry `prefix`.
    FeaturePrefix,
    /// `shaders/feature_mean.wgsl`, entry `finish`.
    FeatureFinish,
    /// `shaders/local_mean.wgsl`, entry `merge_splits` (a key split's
    /// second pass).
    LocalMeanMerge,
    /// `shaders/local_moments.wgsl`, entry `merge_splits`.
    LocalMomentsMerge,
    /// `shaders/softmax.wgsl`, entry `merge_splits`.
    SoftmaxMerge,
    /// `shaders/local_mean_ip.wgsl`: local means from inner-product tiles
    /// (d ≥ 32, radial kernels).
    LocalMeanIp,
    /// `shaders/local_mean_ip.wgsl`, entry `merge_splits`.
    LocalMeanIpMerge,
    /// `shaders/softmax_tiled.wgsl`: attention in register tiles (passes
    /// with value columns, where the tiles fit).
    SoftmaxTiled,
    /// `shaders/softmax_tiled.wgsl`, entry `merge_splits`.
    SoftmaxTiledMerge,
    /// `shaders/knn.wgsl`, entry `merge_splits` (a key split's second
    /// pass: the slices' lists merged).
    KnnMerge,
    /// `shaders/knn_ip.wgsl`: k nearest neighbours filtered by
    /// inner-product tiles and re-measured by differences (d ≥ 32).
    KnnIp,
    /// `shaders/knn_ip.wgsl`, entry `merge_splits`.
    KnnIpMerge,
    /// `shaders/loo_grad.wgsl`: the leave-one-out error's row sums and
    /// their derivatives in per-feature bandwidths.
    LooGrad,
    /// `shaders/variable_bandwidth.wgsl`: row states with per-query and
    /// per-key bandwidths.
    VariableBandwidth,
}

impl ShaderId {
    /// Every shader.
    pub(crate) const ALL: [ShaderId; 23] = [
        ShaderId::LocalMean,
        ShaderId::LocalMoments,
        ShaderId::KernelMatrix,
        ShaderId::Fill,
        ShaderId::Knn,
        ShaderId::MeanShift,
        ShaderId::Softmax,
        ShaderId::SoftmaxMatrix,
        ShaderId::FeatureSums,
        ShaderId::FeaturePrefix,
        ShaderId::FeatureFinish,
        ShaderId::LocalMeanMerge,
        ShaderId::LocalMomentsMerge,
        ShaderId::SoftmaxMerge,
        ShaderId::LocalMeanIp,
        ShaderId::LocalMeanIpMerge,
        ShaderId::SoftmaxTiled,
        ShaderId::SoftmaxTiledMerge,
        ShaderId::KnnMerge,
        ShaderId::KnnIp,
        ShaderId::KnnIpMerge,
        ShaderId::LooGrad,
        ShaderId::VariableBandwidth,
    ];
}
