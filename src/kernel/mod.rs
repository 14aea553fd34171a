//! Localization kernels: `K(x, x') = k(‖x − x'‖ / h)`: the [`Profile`]
//! names, the validated [`Kernel`], `T_FAR`, the profiles' formulas
//! (`form.rs`, one definition for every evaluation) and the `f64` far-row
//! math (`exact.rs`).
//!
//! Imports: `crate::error` only (a leaf module; both backends import it).

use std::fmt;

use crate::error::{Error, Result};

pub(crate) mod exact;
pub(crate) mod form;
pub(crate) mod slope;

mod metric;
mod profile;

pub(crate) use form::{COSINE_POLY, T_FAR};
pub(crate) use metric::minkowski_step;
pub use metric::{METRIC_NAMES, Metric};
pub use profile::Profile;

/// Smallest accepted bandwidth: `1/h²` must stay a finite `f32`.
pub const MIN_BANDWIDTH: f32 = 1e-18;
/// Largest accepted bandwidth: `1/h²` must stay a normal `f32`.
pub const MAX_BANDWIDTH: f32 = 1e18;

/// Most blocks a product kernel may have.
pub const MAX_BLOCKS: usize = 8;

/// One block of a product kernel: `dims` consecutive coordinates with their
/// own profile and bandwidth.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KernelBlock {
    /// Number of coordinates in the block (≥ 1).
    pub dims: usize,
    /// The block's profile.
    pub profile: Profile,
    /// The block's bandwidth.
    pub bandwidth: f32,
}

/// A product kernel's blocks (fixed capacity, so [`Kernel`] stays `Copy`).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Blocks {
    len: usize,
    items: [KernelBlock; MAX_BLOCKS],
}

/// A localization kernel: a [`Profile`] and a validated bandwidth `h`
/// (radial: `K(x, x') = k(‖x − x'‖/h)`), or a product over coordinate
/// blocks, each with its own profile and bandwidth ([`Kernel::product`]).
///
/// ```
/// use locus::{Kernel, Profile};
/// let k = Kernel::new(Profile::Gaussian, 0.5)?;
/// assert_eq!(k.bandwidth(), 0.5);
/// assert!(Kernel::new(Profile::Gaussian, 0.0).is_err());
/// # Ok::<(), locus::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Kernel {
    profile: Profile,
    bandwidth: f32,
    blocks: Option<Blocks>,
    metric: Metric,
}

impl Kernel {
    /// A kernel with the given profile and bandwidth.
    ///
    /// # Errors
    /// [`Error::InvalidBandwidth`] when `bandwidth` is not finite or lies
    /// outside [`MIN_BANDWIDTH`]..=[`MAX_BANDWIDTH`] (which includes `h ≤ 0`).
    pub fn new(profile: Profile, bandwidth: f32) -> Result<Self> {
        if !bandwidth.is_finite() || !(MIN_BANDWIDTH..=MAX_BANDWIDTH).contains(&bandwidth) {
            return Err(Error::InvalidBandwidth {
                value: f64::from(bandwidth),
            });
        }
        Ok(Kernel {
            profile,
            bandwidth,
            blocks: None,
            metric: Metric::Euclidean,
        })
    }

    /// A product (joint, bilateral) kernel over consecutive coordinate
    /// blocks: `K(x, x') = Π_b k_b(‖x_b − x'_b‖ / h_b)`, each block given as
    /// `(dims, profile, h)` (paper §2.1.3). Data must then have exactly
    /// `Σ dims` columns; every op checks it.
    ///
    /// Every op that takes a kernel accepts it, MeanShift and MedoidShift on
    /// points included (through their parameters' `kernel`); not the
    /// bandwidth searches, which choose one radial `h`, nor MedoidShift on a
    /// distance matrix (no coordinates to split into blocks). The engines
    /// evaluate it as a gaussian of the
    /// block-wise distance `t = −2 Σ_b ln k_b(t_b)`, `t_b = ‖x_b − x'_b‖²/h_b²`
    /// (so [`profile`](Self::profile) is [`Profile::Gaussian`] and
    /// [`bandwidth`](Self::bandwidth) is 1 for a product); the weights are
    /// accumulated in the log domain whatever the blocks' profiles.
    ///
    /// ```
    /// use locus::{Kernel, Profile};
    /// // Pixels as (row, col, L, u, v): a spatial and a range block.
    /// let k = Kernel::product([(2, Profile::Uniform, 8.0), (3, Profile::Gaussian, 6.0)])?;
    /// assert_eq!(k.dims(), Some(5));
    /// assert!(Kernel::product([(0, Profile::Uniform, 1.0)]).is_err());
    /// # Ok::<(), locus::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidBandwidth`] for a block's bandwidth as in
    /// [`Kernel::new`]; [`Error::InvalidParameter`] for no block, more than
    /// [`MAX_BLOCKS`], or a block of no coordinates.
    pub fn product(blocks: impl IntoIterator<Item = (usize, Profile, f32)>) -> Result<Self> {
        let blocks: Vec<(usize, Profile, f32)> = blocks.into_iter().collect();
        if blocks.is_empty() || blocks.len() > MAX_BLOCKS {
            return Err(Error::InvalidParameter {
                name: "blocks",
                reason: format!(
                    "a product kernel needs 1 to {MAX_BLOCKS} blocks, got {}",
                    blocks.len()
                ),
            });
        }
        let first = KernelBlock {
            dims: 1,
            profile: Profile::Gaussian,
            bandwidth: 1.0,
        };
        let mut items = [first; MAX_BLOCKS];
        for (slot, &(dims, profile, bandwidth)) in items.iter_mut().zip(&blocks) {
            if dims == 0 || dims > u32::MAX as usize {
                return Err(Error::InvalidParameter {
                    name: "blocks",
                    reason: format!("each block needs 1 to {} coordinates, got {dims}", u32::MAX),
                });
            }
            Kernel::new(profile, bandwidth)?;
            *slot = KernelBlock {
                dims,
                profile,
                bandwidth,
            };
        }
        Ok(Kernel {
            profile: Profile::Gaussian,
            bandwidth: 1.0,
            blocks: Some(Blocks {
                len: blocks.len(),
                items,
            }),
            metric: Metric::Euclidean,
        })
    }

    /// The same radial kernel with `r = dist(x, x')` under `metric`:
    /// `K(x, x') = k(dist(x, x')/h)`. Local means, row states, densities
    /// and kNN's kernel weights honour it on both backends; the ops that
    /// compute Euclidean distances only (local moments and fits, kernel
    /// matrices, MeanShift, masked distances) refuse a kernel with another
    /// metric ([`Error::UnsupportedMetric`]).
    ///
    /// ```
    /// use locus::{Kernel, Metric, Profile};
    /// let k = Kernel::new(Profile::Gaussian, 0.5)?.with_metric(Metric::Manhattan)?;
    /// assert_eq!(k.metric(), Metric::Manhattan);
    /// # Ok::<(), locus::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for a product kernel other than with
    /// the Euclidean metric (its blocks are Euclidean).
    pub fn with_metric(mut self, metric: Metric) -> Result<Self> {
        if self.is_product() && !metric.is_euclidean() {
            return Err(Error::InvalidParameter {
                name: "metric",
                reason: format!("a product kernel's blocks are Euclidean, got {metric}"),
            });
        }
        self.metric = metric;
        Ok(self)
    }

    /// The metric of `r` (Euclidean unless set by
    /// [`with_metric`](Self::with_metric)).
    pub fn metric(&self) -> Metric {
        self.metric
    }

    /// Fails unless the kernel's metric is Euclidean (see
    /// [`Metric::require_euclidean`]).
    pub(crate) fn require_euclidean(&self, op: &'static str) -> Result<()> {
        self.metric.require_euclidean(op)
    }

    /// The same kernel with every block's bandwidth 1 (a radial kernel
    /// unchanged): a product for points already divided by its blocks'
    /// bandwidths, as joint MeanShift and MedoidShift run.
    pub(crate) fn unit_blocks(&self) -> Kernel {
        let mut k = *self;
        if let Some(b) = k.blocks.as_mut() {
            b.items.iter_mut().for_each(|item| item.bandwidth = 1.0);
        }
        k
    }

    /// A product kernel's blocks; `None` for a radial kernel.
    pub fn blocks(&self) -> Option<&[KernelBlock]> {
        self.blocks.as_ref().map(|b| &b.items[..b.len])
    }

    /// Whether this is a product kernel.
    pub fn is_product(&self) -> bool {
        self.blocks.is_some()
    }

    /// The number of coordinates a product kernel takes (`Σ dims`); `None`
    /// for a radial kernel (any dimension).
    pub fn dims(&self) -> Option<usize> {
        self.blocks().map(|b| b.iter().map(|b| b.dims).sum())
    }

    /// Checks that data with `d` columns suits the kernel: a product
    /// kernel's blocks must cover exactly `d` coordinates, the haversine
    /// metric takes 2.
    ///
    /// # Errors
    /// [`Error::KernelDimension`] or [`Error::MetricDimension`] otherwise.
    pub fn check_dim(&self, op: &'static str, d: usize) -> Result<()> {
        self.metric.check_dim(op, d)?;
        match self.dims() {
            Some(k) if k != d => Err(Error::KernelDimension {
                op,
                kernel: k,
                data: d,
            }),
            _ => Ok(()),
        }
    }

    /// The bandwidth of each of `d` coordinates (`h` for every coordinate
    /// of a radial kernel, the block's for a product).
    pub fn coordinate_bandwidths(&self, d: usize) -> Vec<f64> {
        match self.blocks() {
            None => vec![f64::from(self.bandwidth); d],
            Some(bs) => bs
                .iter()
                .flat_map(|b| std::iter::repeat_n(f64::from(b.bandwidth), b.dims))
                .collect(),
        }
    }

    /// Whether some weight is never 0 in exact arithmetic, so the `f32`
    /// kernels may lose a row the `f64` far-row pass recovers: a
    /// full-support profile, or a product with a full-support block.
    pub(crate) fn has_full_support(&self) -> bool {
        match self.blocks() {
            None => !self.profile.is_compact(),
            Some(bs) => bs.iter().any(|b| !b.profile.is_compact()),
        }
    }

    /// The blocks as the engines use them: coordinate ranges, profiles and
    /// `1/h_b²`; `None` for a radial kernel.
    pub(crate) fn product_blocks(&self) -> Option<ProductBlocks> {
        let bs = self.blocks()?;
        let mut out = ProductBlocks {
            len: bs.len(),
            start: [0; MAX_BLOCKS],
            end: [0; MAX_BLOCKS],
            profile: [Profile::Gaussian; MAX_BLOCKS],
            inv_h: [1.0; MAX_BLOCKS],
        };
        let mut k = 0;
        for (i, b) in bs.iter().enumerate() {
            out.start[i] = k;
            k += b.dims;
            out.end[i] = k;
            out.profile[i] = b.profile;
            let h = f64::from(b.bandwidth);
            out.inv_h[i] = (1.0 / h) as f32;
        }
        Some(out)
    }

    /// `K(x, x')` in `f64` from the two points: the plain definition, for
    /// references and small computations (any kernel, product or radial).
    pub fn eval_pair(&self, x: &[f32], y: &[f32]) -> f64 {
        self.log_eval_pair(x, y).exp()
    }

    /// `ln K(x, x')` in `f64` (−inf where the weight is 0).
    pub fn log_eval_pair(&self, x: &[f32], y: &[f32]) -> f64 {
        self.log_weight_by(x, |k| y[k])
    }

    /// `ln K(q, x)` in `f64` with `key(k)` coordinate `k` of `x` (−inf where
    /// the weight is 0): each block's differences scaled by `1/h_b`, its
    /// compact blocks first, stopping at the first that gives no weight.
    pub(crate) fn log_weight_by(&self, q: &[f32], key: impl Fn(usize) -> f32) -> f64 {
        let t = |k0: usize, k1: usize, h: f32| -> f64 {
            let inv_h = 1.0 / f64::from(h);
            (k0..k1)
                .map(|k| {
                    let df = (f64::from(key(k)) - f64::from(q[k])) * inv_h;
                    df * df
                })
                .sum()
        };
        let Some(bs) = self.blocks() else {
            if !self.metric.is_euclidean() {
                let dist = self.metric.rank_to_distance(self.metric.rank_by(q, key));
                let h = f64::from(self.bandwidth);
                return exact::log_weight(self.profile, (dist / h) * (dist / h));
            }
            return exact::log_weight(self.profile, t(0, q.len(), self.bandwidth));
        };
        let mut lw = 0.0;
        for compact in [true, false] {
            let mut k0 = 0;
            for b in bs {
                let k1 = k0 + b.dims;
                if b.profile.is_compact() == compact {
                    lw += exact::log_weight(b.profile, t(k0, k1, b.bandwidth));
                    if lw == f64::NEG_INFINITY {
                        return lw;
                    }
                }
                k0 = k1;
            }
        }
        lw
    }

    /// `ln` of the kernel's integral over `R^d` relative to its profile
    /// normalizers: `Σ_b d_b·ln h_b` (radial: `d·ln h`), the bandwidth
    /// part of a density's normalization.
    pub(crate) fn ln_bandwidth_volume(&self, d: usize) -> f64 {
        self.coordinate_bandwidths(d).iter().map(|h| h.ln()).sum()
    }

    /// Gaussian kernel with bandwidth `h`.
    pub fn gaussian(h: f32) -> Result<Self> {
        Kernel::new(Profile::Gaussian, h)
    }

    /// The profile; for a product kernel [`Profile::Gaussian`], the carrier
    /// its blocks are combined in (see [`Kernel::product`]; the blocks'
    /// own profiles are in [`blocks`](Self::blocks)).
    pub fn profile(&self) -> Profile {
        self.profile
    }

    /// The bandwidth `h`; 1 for a product kernel (its blocks carry their
    /// own, [`blocks`](Self::blocks)).
    pub fn bandwidth(&self) -> f32 {
        self.bandwidth
    }

    /// `1/h²` as used by both backends (scaled squared distance `t = r²/h²`).
    pub(crate) fn inv_h2(&self) -> f32 {
        let h = f64::from(self.bandwidth);
        (1.0 / (h * h)) as f32
    }

    /// `K(x, x')` in `f64` from the squared distance `‖x − x'‖²`; the plain
    /// definition, for references and small computations. A radial kernel
    /// only: a product kernel is not a function of the distance (this gives
    /// its gaussian carrier); use [`eval_pair`](Self::eval_pair).
    pub fn eval_sq_dist(&self, sq_dist: f64) -> f64 {
        let h = f64::from(self.bandwidth);
        self.profile.eval_sq(sq_dist / (h * h))
    }
}

/// A product kernel's blocks as the engines evaluate them: coordinates
/// `start[b]..end[b]`, profile and `1/h_b` (in `f32`; the differences are
/// scaled by it before they are squared) of block `b < len`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ProductBlocks {
    pub(crate) len: usize,
    pub(crate) start: [usize; MAX_BLOCKS],
    pub(crate) end: [usize; MAX_BLOCKS],
    pub(crate) profile: [Profile; MAX_BLOCKS],
    pub(crate) inv_h: [f32; MAX_BLOCKS],
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.blocks() {
            None if !self.metric.is_euclidean() => {
                write!(f, "{}(h={}, {})", self.profile, self.bandwidth, self.metric)
            }
            None => write!(f, "{}(h={})", self.profile, self.bandwidth),
            Some(bs) => {
                f.write_str("product(")?;
                for (i, b) in bs.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{}×{}(h={})", b.dims, b.profile, b.bandwidth)?;
                }
                f.write_str(")")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bandwidth_error_states_the_accepted_range() {
        let msg = Error::InvalidBandwidth { value: 0.0 }.to_string();
        let range = format!("[{MIN_BANDWIDTH:e}, {MAX_BANDWIDTH:e}]");
        assert!(msg.contains(&range), "{msg} should name {range}");
    }
}
