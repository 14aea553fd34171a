//! What can be wrong with clustering parameters, or with data that a
//! clustering method cannot use.

/// A clustering parameter or input that cannot be used. Wrapped in
/// [`Error::Cluster`](crate::Error::Cluster).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// `max_iter` is 0: not even one step could be taken.
    #[error("{op}: max_iter must be at least 1")]
    ZeroMaxIter {
        /// `"mean_shift"` or `"medoid_shift"`.
        op: &'static str,
    },

    /// The convergence tolerance is not finite or not positive.
    #[error("mean_shift: tolerance must be finite and > 0, got {value}")]
    InvalidTolerance {
        /// The rejected value.
        value: f64,
    },

    /// Bin seeding with `min_bin_freq = 0`.
    #[error("mean_shift: min_bin_freq must be at least 1")]
    ZeroMinBinFreq,

    /// Given seeds whose dimension differs from the points'.
    #[error("mean_shift: seeds have dimension {seeds} but the points have dimension {points}")]
    SeedDimension {
        /// Columns of the seeds.
        seeds: usize,
        /// Columns of the points.
        points: usize,
    },

    /// The blurring variant moves the points themselves, so every point is
    /// a seed; other seedings do not apply.
    #[error("mean_shift: blurring moves every point, so seeds must be Seeds::All")]
    BlurringNeedsAllSeeds,

    /// A quantile outside `[0, 1]` (or NaN) for the bandwidth estimate.
    #[error("estimate_bandwidth: quantile must lie in [0, 1], got {value}")]
    InvalidQuantile {
        /// The rejected value.
        value: f64,
    },

    /// `n_samples = 0` for the bandwidth estimate.
    #[error("estimate_bandwidth: n_samples must be at least 1")]
    ZeroSamples,

    /// A bandwidth rule gave 0 (or a value no kernel accepts), e.g. on
    /// constant data.
    #[error(
        "{rule}: the estimated bandwidth is {estimate}, which no kernel accepts (are all points equal?); give a bandwidth explicitly"
    )]
    DegenerateBandwidth {
        /// Which rule: `"quantile"`, `"scott"`, `"silverman"`.
        rule: &'static str,
        /// What it gave.
        estimate: f64,
    },

    /// A rule that needs point coordinates (Scott, Silverman) was asked for
    /// on a distance matrix.
    #[error(
        "{rule} needs point coordinates; a distance matrix only supports a fixed or quantile bandwidth"
    )]
    RuleNeedsCoordinates {
        /// The rule.
        rule: &'static str,
    },

    /// No seed had any point within one bandwidth, so there is no mode.
    #[error(
        "mean_shift: no point lies within bandwidth {bandwidth} of any of the {seeds} seeds; use other seeds or a larger bandwidth"
    )]
    NoModes {
        /// Number of seeds.
        seeds: usize,
        /// The bandwidth.
        bandwidth: f32,
    },

    /// A distance matrix that is not square.
    #[error("medoid_shift: the distance matrix must be square, got {rows}×{cols}")]
    NotSquare {
        /// Rows.
        rows: usize,
        /// Columns.
        cols: usize,
    },

    /// A negative entry in a distance matrix.
    #[error("medoid_shift: distance matrix entry [{row}, {col}] is negative ({value})")]
    NegativeDistance {
        /// Row of the first negative entry.
        row: usize,
        /// Its column.
        col: usize,
        /// The value.
        value: f32,
    },
}
