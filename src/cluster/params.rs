//! MeanShift and MedoidShift parameters: consuming builders whose `check()`
//! yields the valid parameters the engine accepts (parameters are checked once, at the edge).

use ndarray::Array2;

use crate::error::ClusterError;
use crate::error::Result;
use crate::kernel::{Kernel, Metric, Profile};
use crate::matrix::Matrix;

/// How the bandwidth `h` is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bandwidth {
    /// This bandwidth.
    Fixed(f32),
    /// scikit-learn's `estimate_bandwidth`: the mean over points of the
    /// distance to their k-th nearest neighbour (the point itself counts as
    /// the first), `k = max(1, ⌊quantile·n⌋)`, on `n_samples` points drawn
    /// without replacement (all points when `None`). `O(n²d)`: for large
    /// data give `n_samples` (a few thousand) or a fixed bandwidth.
    /// See [`Engine::estimate_bandwidth`](crate::Engine::estimate_bandwidth).
    Quantile {
        /// In `[0, 1]`.
        quantile: f64,
        /// Subsample size (at least 1).
        n_samples: Option<usize>,
    },
    /// Scott's rule: `σ · n^(−1/(d+4))`, with `σ` the root mean square of
    /// the per-coordinate standard deviations.
    Scott,
    /// Silverman's rule: `σ · (n(d+2)/4)^(−1/(d+4))`, same `σ`.
    Silverman,
}

impl Default for Bandwidth {
    /// `Quantile { quantile: 0.3, n_samples: None }`, scikit-learn's default.
    fn default() -> Self {
        Bandwidth::Quantile {
            quantile: 0.3,
            n_samples: None,
        }
    }
}

impl Bandwidth {
    /// Checks what can be checked without data.
    pub(crate) fn check(&self, profile: Profile) -> Result<()> {
        match *self {
            Bandwidth::Fixed(h) => Kernel::new(profile, h).map(|_| ()),
            Bandwidth::Quantile {
                quantile,
                n_samples,
            } => {
                if !(0.0..=1.0).contains(&quantile) {
                    return Err(ClusterError::InvalidQuantile { value: quantile }.into());
                }
                if n_samples == Some(0) {
                    return Err(ClusterError::ZeroSamples.into());
                }
                Ok(())
            }
            Bandwidth::Scott | Bandwidth::Silverman => Ok(()),
        }
    }
}

/// What [`MeanShiftParams::kernel`] and [`MedoidShiftParams::kernel`] set:
/// a radial kernel's profile and fixed bandwidth (no product), or a product
/// kernel with unit bandwidth (its blocks scale the points; `profile` kept).
fn kernel_settings(kernel: Kernel, profile: Profile) -> (Profile, Bandwidth, Option<Kernel>) {
    if kernel.is_product() {
        (profile, Bandwidth::Fixed(1.0), Some(kernel))
    } else {
        (kernel.profile(), Bandwidth::Fixed(kernel.bandwidth()), None)
    }
}

/// The kernel and iteration setters of [`MeanShiftParams`] and
/// [`MedoidShiftParams`], written once (`$default`: the default profile;
/// `$product`: what a product kernel gives; `$step`: what one iteration
/// moves).
macro_rules! kernel_setters {
    ($default:literal, $product:literal, $step:literal) => {
        #[doc = concat!("The kernel profile (default ", $default, ").")]
        pub fn profile(mut self, profile: Profile) -> Self {
            self.profile = profile;
            self
        }

        /// A fixed bandwidth `h`.
        pub fn bandwidth(mut self, h: f32) -> Self {
            self.bandwidth = Bandwidth::Fixed(h);
            self.product = None;
            self
        }

        /// The kernel itself: a radial kernel sets the profile and a fixed
        /// bandwidth; a product kernel ([`Kernel::product`]) gives
        #[doc = $product]
        ///
        /// The kernel's metric must be Euclidean (`check` refuses another).
        pub fn kernel(mut self, kernel: Kernel) -> Self {
            (self.profile, self.bandwidth, self.product) = kernel_settings(kernel, self.profile);
            self.metric = kernel.metric();
            self
        }

        /// How the bandwidth is chosen.
        pub fn bandwidth_rule(mut self, rule: Bandwidth) -> Self {
            self.bandwidth = rule;
            self.product = None;
            self
        }

        #[doc = concat!("Most ", $step, " (default 300).")]
        pub fn max_iter(mut self, max_iter: usize) -> Self {
            self.max_iter = max_iter;
            self
        }
    };
}

/// The kernel and iteration getters of [`MeanShiftValidParams`] and
/// [`MedoidShiftValidParams`] (`$step`: what one iteration moves).
macro_rules! kernel_getters {
    ($step:literal) => {
        /// The kernel profile.
        pub fn profile(&self) -> Profile {
            self.0.profile
        }

        /// The product kernel, when one was given.
        pub fn product_kernel(&self) -> Option<&Kernel> {
            self.0.product.as_ref()
        }

        /// The bandwidth rule.
        pub fn bandwidth(&self) -> Bandwidth {
            self.0.bandwidth
        }

        #[doc = concat!("Most ", $step, ".")]
        pub fn max_iter(&self) -> usize {
            self.0.max_iter
        }
    };
}

/// Per-point bandwidths of variable-bandwidth MeanShift (Comaniciu, Ramesh
/// & Meer 2001): point `j` spreads with its own `h_j`, and each shift is
/// `m(x) = Σ_j x_j h_j^{−(d+2)} g(‖x − x_j‖²/h_j²) / Σ_j h_j^{−(d+2)} g(…) − x`
/// with `g` the params' profile. See [`MeanShiftParams::adaptive_bandwidth`].
#[derive(Debug, Clone, PartialEq)]
pub enum AdaptiveBandwidth {
    /// These bandwidths, one per point (finite, within `[1e-18, 1e18]`).
    PerPoint(Vec<f32>),
    /// `h_j = alpha·r_k(j)`, `r_k(j)` the distance from point `j` to its
    /// `k`-th nearest other point
    /// ([`Engine::knn_bandwidths`](crate::Engine::knn_bandwidths)).
    Knn {
        /// Which neighbour (at least 1, fewer than the points).
        k: usize,
        /// The factor (finite, positive).
        alpha: f32,
    },
}

/// Where MeanShift starts its seeds.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Seeds {
    /// Every point is a seed.
    #[default]
    All,
    /// scikit-learn's bin seeding: points are binned on a grid of side `h`
    /// (bin `round(x/h)`, rounding half to even, in `f64`); each bin holding
    /// at least `min_bin_freq` points gives one seed at its grid point
    /// `round(x/h)·h`. As in scikit-learn, when every point lands in a bin
    /// of its own, the points themselves are the seeds.
    Binned {
        /// Fewest points a bin needs to give a seed (at least 1).
        min_bin_freq: usize,
    },
    /// These seeds (`M × d`, finite).
    Given(Array2<f32>),
}

/// MeanShift parameters, unchecked. Build with the setters, then
/// [`check`](Self::check).
///
/// ```
/// use locus::{MeanShiftParams, Profile, Seeds};
/// let params = MeanShiftParams::new()
///     .bandwidth(1.0)
///     .profile(Profile::Uniform)
///     .seeds(Seeds::Binned { min_bin_freq: 1 })
///     .check()?;
/// assert_eq!(params.max_iter(), 300);
/// assert!(MeanShiftParams::new().max_iter(0).check().is_err());
/// # Ok::<(), locus::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct MeanShiftParams {
    profile: Profile,
    bandwidth: Bandwidth,
    /// A product kernel, which replaces `profile` and `bandwidth`.
    product: Option<Kernel>,
    metric: Metric,
    seeds: Seeds,
    max_iter: usize,
    tol: f64,
    blurring: bool,
    cluster_all: bool,
    /// Per-point bandwidths, which replace `bandwidth`.
    adaptive: Option<AdaptiveBandwidth>,
}

impl Default for MeanShiftParams {
    fn default() -> Self {
        MeanShiftParams::new()
    }
}

impl MeanShiftParams {
    /// scikit-learn's defaults: flat (uniform) kernel, bandwidth estimated
    /// with quantile 0.3, every point a seed, `max_iter = 300`,
    /// `tol = 1e-3`, not blurring, `cluster_all = true`.
    pub fn new() -> Self {
        MeanShiftParams {
            profile: Profile::Uniform,
            bandwidth: Bandwidth::default(),
            product: None,
            metric: Metric::Euclidean,
            seeds: Seeds::All,
            max_iter: 300,
            tol: 1e-3,
            blurring: false,
            cluster_all: true,
            adaptive: None,
        }
    }

    /// Variable-bandwidth MeanShift: every point its own bandwidth
    /// ([`AdaptiveBandwidth`]), in place of the fixed bandwidth rule. A
    /// seed stops when its shift is at most `tol·h` with `h` the bandwidth
    /// of the point nearest where it started; modes are ranked by the
    /// points within their own scale `h_c` (the bandwidth of the point
    /// nearest the mode), a mode within `h_c` of a stronger one is
    /// dropped, and with `cluster_all = false` a point farther than its
    /// mode's `h_c` is labelled −1. Bin seeding bins on the median
    /// bandwidth. Not with blurring or a product kernel (`check` refuses
    /// them).
    pub fn adaptive_bandwidth(mut self, rule: AdaptiveBandwidth) -> Self {
        self.adaptive = Some(rule);
        self
    }

    kernel_setters!(
        "uniform, scikit-learn's flat kernel",
        "joint MeanShift over its blocks (Comaniciu–Meer's joint spatial–range \
         domain): each block's coordinates are divided by its bandwidth, the seeds \
         move with unit bandwidths, so `tol`, bin seeding and the \
         `cluster_all = false` reach are in those units, and the modes come back \
         in the data's units ([`MeanShiftFit::bandwidth`](crate::MeanShiftFit::bandwidth) \
         is then 1).",
        "shifts of a seed"
    );

    /// Where the seeds start.
    pub fn seeds(mut self, seeds: Seeds) -> Self {
        self.seeds = seeds;
        self
    }

    /// A seed stops when its shift is at most `tol·h` (default 1e-3).
    pub fn tol(mut self, tol: f64) -> Self {
        self.tol = tol;
        self
    }

    /// `true`: the points themselves move (blurring MeanShift); `false`
    /// (default): seeds move over the fixed points.
    pub fn blurring(mut self, blurring: bool) -> Self {
        self.blurring = blurring;
        self
    }

    /// `true` (default): every point gets the nearest mode; `false`: points
    /// farther than one bandwidth from every mode are labelled −1.
    pub fn cluster_all(mut self, cluster_all: bool) -> Self {
        self.cluster_all = cluster_all;
        self
    }

    /// Checks every parameter.
    ///
    /// # Errors
    /// [`Error::InvalidBandwidth`] for a fixed bandwidth no kernel accepts;
    /// [`Error::Cluster`] with [`ClusterError::ZeroMaxIter`],
    /// [`InvalidTolerance`](ClusterError::InvalidTolerance),
    /// [`ZeroMinBinFreq`](ClusterError::ZeroMinBinFreq),
    /// [`BlurringNeedsAllSeeds`](ClusterError::BlurringNeedsAllSeeds),
    /// [`InvalidQuantile`](ClusterError::InvalidQuantile),
    /// [`ZeroSamples`](ClusterError::ZeroSamples); [`Error::EmptyInput`] or
    /// [`Error::NonFinite`] for given seeds that are empty or not finite.
    ///
    /// [`Error::InvalidBandwidth`]: crate::Error::InvalidBandwidth
    /// [`Error::Cluster`]: crate::Error::Cluster
    /// [`Error::EmptyInput`]: crate::Error::EmptyInput
    /// [`Error::NonFinite`]: crate::Error::NonFinite
    pub fn check(self) -> Result<MeanShiftValidParams> {
        const OP: &str = "mean_shift";
        self.metric.require_euclidean(OP)?;
        if self.max_iter == 0 {
            return Err(ClusterError::ZeroMaxIter { op: OP }.into());
        }
        if !self.tol.is_finite() || self.tol <= 0.0 {
            return Err(ClusterError::InvalidTolerance { value: self.tol }.into());
        }
        self.bandwidth.check(self.profile)?;
        match &self.seeds {
            Seeds::All => {}
            Seeds::Binned { min_bin_freq } => {
                if *min_bin_freq == 0 {
                    return Err(ClusterError::ZeroMinBinFreq.into());
                }
            }
            Seeds::Given(s) => {
                Matrix::check(OP, "seeds", s.view())?;
            }
        }
        if self.blurring && self.seeds != Seeds::All {
            return Err(ClusterError::BlurringNeedsAllSeeds.into());
        }
        if let Some(rule) = &self.adaptive {
            check_adaptive(rule, self.blurring, self.product.is_some())?;
        }
        Ok(MeanShiftValidParams(self))
    }
}

/// What [`AdaptiveBandwidth`] can be checked for without data.
fn check_adaptive(rule: &AdaptiveBandwidth, blurring: bool, product: bool) -> Result<()> {
    use crate::error::Error;
    if blurring || product {
        return Err(Error::InvalidParameter {
            name: "adaptive_bandwidth",
            reason: "variable-bandwidth MeanShift moves seeds over fixed points with a radial profile: not with blurring or a product kernel".into(),
        });
    }
    match rule {
        AdaptiveBandwidth::PerPoint(h) => crate::ops::check_bandwidths(h, h.len(), "points"),
        AdaptiveBandwidth::Knn { k, alpha } => crate::ops::check_knn_rule(*k, *alpha),
    }
}

/// Checked MeanShift parameters, as [`Engine::mean_shift`](crate::Engine::mean_shift) takes them.
#[derive(Debug, Clone, PartialEq)]
pub struct MeanShiftValidParams(MeanShiftParams);

impl MeanShiftValidParams {
    kernel_getters!("shifts per seed");

    /// For a product kernel with coordinate bandwidths `h`: the same
    /// parameters with unit bandwidths and the given seeds divided by `h`
    /// (what the shift runs with on the scaled points).
    pub(crate) fn unit_product(&self, h: &[f64]) -> Result<MeanShiftValidParams> {
        let mut p = self.0.clone();
        p.product = p.product.map(|k| k.unit_blocks());
        if let Seeds::Given(s) = &mut p.seeds {
            if s.ncols() == h.len() {
                super::block_units(s.view_mut(), h, false);
            }
            Matrix::check("mean_shift", "seeds", s.view())?;
        }
        Ok(MeanShiftValidParams(p))
    }
    /// The per-point bandwidths, when given.
    pub fn adaptive_bandwidth(&self) -> Option<&AdaptiveBandwidth> {
        self.0.adaptive.as_ref()
    }
    /// The seeding.
    pub fn seeds(&self) -> &Seeds {
        &self.0.seeds
    }
    /// Convergence tolerance, relative to the bandwidth.
    pub fn tol(&self) -> f64 {
        self.0.tol
    }
    /// Whether the points themselves move.
    pub fn blurring(&self) -> bool {
        self.0.blurring
    }
    /// Whether every point gets a label.
    pub fn cluster_all(&self) -> bool {
        self.0.cluster_all
    }
}

/// MedoidShift parameters, unchecked (paper §7.4).
///
/// ```
/// use locus::{MedoidShiftParams, Profile};
/// let p = MedoidShiftParams::new().profile(Profile::Gaussian).bandwidth(0.5).check()?;
/// assert_eq!(p.max_iter(), 300);
/// # Ok::<(), locus::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MedoidShiftParams {
    profile: Profile,
    bandwidth: Bandwidth,
    /// A product kernel, which replaces `profile` and `bandwidth`.
    product: Option<Kernel>,
    metric: Metric,
    max_iter: usize,
}

impl Default for MedoidShiftParams {
    fn default() -> Self {
        MedoidShiftParams::new()
    }
}

impl MedoidShiftParams {
    /// Gaussian kernel, bandwidth estimated with quantile 0.3, `max_iter = 300`.
    pub fn new() -> Self {
        MedoidShiftParams {
            profile: Profile::Gaussian,
            bandwidth: Bandwidth::default(),
            product: None,
            metric: Metric::Euclidean,
            max_iter: 300,
        }
    }

    kernel_setters!(
        "gaussian",
        "joint MedoidShift on points: each block's coordinates divided by its \
         bandwidth, local means with unit bandwidths, the nearest point in those \
         units (not for a given distance matrix).",
        "jumps of a point"
    );

    /// Checks every parameter.
    ///
    /// # Errors
    /// As [`MeanShiftParams::check`] for the bandwidth and `max_iter`.
    pub fn check(self) -> Result<MedoidShiftValidParams> {
        self.metric.require_euclidean("medoid_shift")?;
        if self.max_iter == 0 {
            return Err(ClusterError::ZeroMaxIter { op: "medoid_shift" }.into());
        }
        self.bandwidth.check(self.profile)?;
        Ok(MedoidShiftValidParams(self))
    }
}

/// Checked MedoidShift parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MedoidShiftValidParams(MedoidShiftParams);

impl MedoidShiftValidParams {
    kernel_getters!("jumps per point");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_are_send_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<MeanShiftParams>();
        assert_send_sync::<MeanShiftValidParams>();
        assert_send_sync::<MedoidShiftValidParams>();
    }
}
