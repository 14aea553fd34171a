//! Distance metrics: what `r` in `k(r/h)` and a kNN distance measure.
//!
//! [`Metric`] names scikit-learn's metrics of its neighbours and density
//! estimators that the engines compute directly: Euclidean (the default,
//! and the only one the inner-product tiles, MeanShift, local moments and
//! attention take), Manhattan, Chebyshev, Minkowski with `1 ≤ p < ∞`, and
//! haversine (great-circle distance on the unit sphere between
//! `(latitude, longitude)` rows in radians).
//!
//! Each metric has a *rank*: a monotone function of the distance that is
//! cheap to accumulate over coordinates (the squared distance for
//! Euclidean, `Σ|Δ|` for Manhattan, `max|Δ|` for Chebyshev, the haversine
//! `a = sin²(Δφ/2) + cos φ₁ cos φ₂ sin²(Δλ/2)`). Minkowski's rank is the
//! distance itself, accumulated coordinate by coordinate as
//! `(a^p + |Δ|^p)^(1/p) = hi·(1 + (lo/hi)^p)^(1/p)` ([`minkowski_step`],
//! `hi`/`lo` the larger and smaller of the two): `Σ|Δ|^p` itself would
//! underflow or overflow `f32` for a large `p` or an unusual scale (`p = 30`
//! on differences of 10⁻³), and this form stays within `[hi, 2^(1/p)·hi]`
//! for any `p` (`p = ∞` gives Chebyshev's).
//! kNN ranks keys by it; [`Metric::rank_to_distance`] turns it into the
//! distance, and a kernel's scaled squared distance is `t = dist²/h²`.
//!
//! Imports: `crate::error` only.

use std::fmt;

use crate::error::{Error, Result};

/// The metric names [`Metric::from_name`] accepts, for error messages.
pub const METRIC_NAMES: &str =
    "euclidean, l2, manhattan, cityblock, l1, chebyshev, infinity, minkowski (with p), haversine";

/// A distance metric between rows (see the module documentation).
///
/// ```
/// use locus::Metric;
/// assert_eq!(Metric::from_name("cityblock", None)?, Metric::Manhattan);
/// assert_eq!(Metric::from_name("minkowski", Some(2.0))?, Metric::Euclidean);
/// assert_eq!(Metric::minkowski(3.0)?.p(), 3.0);
/// assert!(Metric::minkowski(0.5).is_err());
/// assert!(Metric::from_name("cosine", None).is_err());
/// # Ok::<(), locus::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub enum Metric {
    /// `‖x − y‖₂`.
    #[default]
    Euclidean,
    /// `Σ|x_k − y_k|` (`p = 1`).
    Manhattan,
    /// `max|x_k − y_k|` (`p = ∞`).
    Chebyshev,
    /// `(Σ|x_k − y_k|^p)^(1/p)` with `1 < p < ∞`, `p ≠ 2` (made by
    /// [`Metric::minkowski`], which maps 1, 2 and ∞ to the named metrics).
    Minkowski {
        /// The exponent.
        p: f64,
    },
    /// Great-circle distance on the unit sphere between rows
    /// `(latitude, longitude)` in radians:
    /// `2·asin(√(sin²(Δφ/2) + cos φ₁ cos φ₂ sin²(Δλ/2)))` (data of 2 columns).
    Haversine,
}

impl Metric {
    /// Minkowski's metric of exponent `p`: [`Metric::Manhattan`] for 1,
    /// [`Metric::Euclidean`] for 2, [`Metric::Chebyshev`] for `+∞`.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] (`p`) for `p < 1` or NaN.
    pub fn minkowski(p: f64) -> Result<Metric> {
        if p.is_nan() || p < 1.0 {
            return Err(Error::InvalidParameter {
                name: "p",
                reason: format!("the Minkowski exponent must be at least 1 (or +inf), got {p}"),
            });
        }
        Ok(match p {
            1.0 => Metric::Manhattan,
            2.0 => Metric::Euclidean,
            p if p.is_infinite() => Metric::Chebyshev,
            p => Metric::Minkowski { p },
        })
    }

    /// The metric of a scikit-learn name (case-insensitive): `"euclidean"`
    /// or `"l2"`, `"manhattan"`, `"cityblock"` or `"l1"`, `"chebyshev"` or
    /// `"infinity"`, `"minkowski"` with `p` (2 when `None`), `"haversine"`.
    /// `p` is ignored for the other names, as scikit-learn ignores it.
    ///
    /// # Errors
    /// [`Error::UnknownMetric`] for another name; as [`Metric::minkowski`]
    /// for a bad `p`.
    pub fn from_name(name: &str, p: Option<f64>) -> Result<Metric> {
        match name.to_ascii_lowercase().as_str() {
            "euclidean" | "l2" => Ok(Metric::Euclidean),
            "manhattan" | "cityblock" | "l1" => Ok(Metric::Manhattan),
            "chebyshev" | "infinity" => Ok(Metric::Chebyshev),
            "minkowski" => Metric::minkowski(p.unwrap_or(2.0)),
            "haversine" => Ok(Metric::Haversine),
            _ => Err(Error::UnknownMetric { name: name.into() }),
        }
    }

    /// The metric's scikit-learn name (`"minkowski"` for
    /// [`Metric::Minkowski`]).
    pub fn name(&self) -> &'static str {
        match self {
            Metric::Euclidean => "euclidean",
            Metric::Manhattan => "manhattan",
            Metric::Chebyshev => "chebyshev",
            Metric::Minkowski { .. } => "minkowski",
            Metric::Haversine => "haversine",
        }
    }

    /// The Minkowski exponent: 2, 1, ∞ for the named metrics, `p` for
    /// [`Metric::Minkowski`]; NaN for haversine (not a Minkowski metric).
    pub fn p(&self) -> f64 {
        match *self {
            Metric::Euclidean => 2.0,
            Metric::Manhattan => 1.0,
            Metric::Chebyshev => f64::INFINITY,
            Metric::Minkowski { p } => p,
            Metric::Haversine => f64::NAN,
        }
    }

    /// Whether this is the Euclidean metric.
    pub fn is_euclidean(&self) -> bool {
        matches!(self, Metric::Euclidean)
    }

    /// Checks that data with `d` columns suits the metric (haversine takes
    /// 2: latitude and longitude).
    ///
    /// # Errors
    /// [`Error::MetricDimension`] otherwise.
    pub fn check_dim(&self, op: &'static str, d: usize) -> Result<()> {
        match self {
            Metric::Haversine if d != 2 => Err(Error::MetricDimension {
                op,
                metric: self.name(),
                expected: 2,
                data: d,
            }),
            _ => Ok(()),
        }
    }

    /// Fails unless the metric is Euclidean: for the ops that only compute
    /// that one (inner-product tiles, local moments, MeanShift, kernel
    /// matrices, masked distances).
    ///
    /// # Errors
    /// [`Error::UnsupportedMetric`] naming `op`.
    pub fn require_euclidean(&self, op: &'static str) -> Result<()> {
        match self {
            Metric::Euclidean => Ok(()),
            m => Err(Error::UnsupportedMetric {
                op,
                metric: m.to_string(),
            }),
        }
    }

    /// The code the shaders' `METRIC` override takes (0 Euclidean, 1
    /// Manhattan, 2 Chebyshev, 3 Minkowski, 4 haversine).
    pub(crate) fn shader_code(&self) -> u32 {
        match self {
            Metric::Euclidean => 0,
            Metric::Manhattan => 1,
            Metric::Chebyshev => 2,
            Metric::Minkowski { .. } => 3,
            Metric::Haversine => 4,
        }
    }

    /// The metric as hashable bits (code and `p`), for cache and batch keys.
    pub(crate) fn key(&self) -> (u32, u64) {
        let p = match self {
            Metric::Minkowski { p } => p.to_bits(),
            _ => 0,
        };
        (self.shader_code(), p)
    }

    /// The distance from a rank (see the module documentation), in `f64`.
    pub fn rank_to_distance(&self, rank: f64) -> f64 {
        match *self {
            Metric::Euclidean => rank.sqrt(),
            Metric::Manhattan | Metric::Chebyshev => rank,
            Metric::Minkowski { .. } => rank,
            Metric::Haversine => 2.0 * rank.clamp(0.0, 1.0).sqrt().asin(),
        }
    }

    /// The rank between two rows, in `f64` (the plain definition).
    pub fn rank(&self, x: &[f32], y: &[f32]) -> f64 {
        self.rank_by(x, |k| y[k])
    }

    /// `dist(x, y)` in `f64` (the plain definition, for references).
    pub fn distance(&self, x: &[f32], y: &[f32]) -> f64 {
        self.rank_to_distance(self.rank(x, y))
    }

    /// The rank between `q` and the row whose coordinate `k` is `key(k)`.
    pub(crate) fn rank_by(&self, q: &[f32], key: impl Fn(usize) -> f32) -> f64 {
        let diff = |k: usize| f64::from(key(k)) - f64::from(q[k]);
        let ks = 0..q.len();
        match *self {
            Metric::Euclidean => ks.map(|k| diff(k) * diff(k)).sum(),
            Metric::Manhattan => ks.map(|k| diff(k).abs()).sum(),
            Metric::Chebyshev => ks.map(|k| diff(k).abs()).fold(0.0, f64::max),
            Metric::Minkowski { p } => ks.fold(0.0, |a, k| minkowski_step(a, diff(k).abs(), p)),
            Metric::Haversine => {
                let (q0, q1) = (f64::from(q[0]), f64::from(q[1]));
                let (x0, x1) = (f64::from(key(0)), f64::from(key(1)));
                let s0 = (0.5 * (x0 - q0)).sin();
                let s1 = (0.5 * (x1 - q1)).sin();
                s0 * s0 + q0.cos() * x0.cos() * s1 * s1
            }
        }
    }
}

/// One coordinate's step of Minkowski's rank (the distance so far `a`,
/// the next `|Δ| = x`): `(a^p + x^p)^(1/p)` as `hi·(1 + (lo/hi)^p)^(1/p)`,
/// which neither underflows nor overflows for any `p ≥ 1` (∞ included).
#[inline(always)]
pub(crate) fn minkowski_step<F: num_like::Float>(a: F, x: F, p: F) -> F {
    let (hi, lo) = if x > a { (x, a) } else { (a, x) };
    if hi == F::ZERO || hi.is_infinite() {
        return hi;
    }
    let r = (lo / hi).powf(p);
    hi * (F::ONE + r).powf(F::ONE / p)
}

/// The two floating types [`minkowski_step`] runs in.
pub(crate) mod num_like {
    /// `f32` or `f64`: what [`minkowski_step`](super::minkowski_step) uses.
    pub trait Float:
        Copy
        + PartialOrd
        + std::ops::Mul<Output = Self>
        + std::ops::Div<Output = Self>
        + std::ops::Add<Output = Self>
    {
        /// 0.
        const ZERO: Self;
        /// 1.
        const ONE: Self;
        /// `self^e`.
        fn powf(self, e: Self) -> Self;
        /// Whether `±∞`.
        fn is_infinite(self) -> bool;
    }
    macro_rules! float {
        ($t:ty) => {
            impl Float for $t {
                const ZERO: Self = 0.0;
                const ONE: Self = 1.0;
                fn powf(self, e: Self) -> Self {
                    <$t>::powf(self, e)
                }
                fn is_infinite(self) -> bool {
                    <$t>::is_infinite(self)
                }
            }
        };
    }
    float!(f32);
    float!(f64);
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Metric::Minkowski { p } => write!(f, "minkowski(p={p})"),
            m => f.write_str(m.name()),
        }
    }
}

impl std::str::FromStr for Metric {
    type Err = Error;

    /// A name as [`Metric::from_name`] takes it, `"minkowski"` with p = 2,
    /// or `"minkowski:P"` with its exponent.
    fn from_str(s: &str) -> Result<Metric> {
        match s.split_once(':') {
            Some((name, p)) if name.eq_ignore_ascii_case("minkowski") => {
                let p = p
                    .trim()
                    .parse::<f64>()
                    .map_err(|_| Error::InvalidParameter {
                        name: "p",
                        reason: format!("not a number: {p:?}"),
                    })?;
                Metric::minkowski(p)
            }
            _ => Metric::from_name(s, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_as_scikit_learn_spells_them() {
        let m = |n: &str| Metric::from_name(n, None).unwrap();
        assert_eq!(m("L2"), Metric::Euclidean);
        assert_eq!(m("l1"), Metric::Manhattan);
        assert_eq!(m("infinity"), Metric::Chebyshev);
        assert_eq!(m("haversine"), Metric::Haversine);
        assert_eq!(
            Metric::from_name("minkowski", Some(1.0)).unwrap(),
            Metric::Manhattan
        );
        assert_eq!(
            Metric::from_name("minkowski", Some(f64::INFINITY)).unwrap(),
            Metric::Chebyshev
        );
        assert_eq!(
            "minkowski:3".parse::<Metric>().unwrap(),
            Metric::Minkowski { p: 3.0 }
        );
        assert!(matches!(
            Metric::from_name("cosine", None),
            Err(Error::UnknownMetric { .. })
        ));
        for p in [0.5, 0.0, -1.0, f64::NAN] {
            assert!(matches!(
                Metric::minkowski(p),
                Err(Error::InvalidParameter { name: "p", .. })
            ));
        }
        assert!(matches!(
            Metric::Haversine.check_dim("knn", 3),
            Err(Error::MetricDimension { data: 3, .. })
        ));
        assert!(Metric::Haversine.check_dim("knn", 2).is_ok());
        assert!(matches!(
            Metric::Manhattan.require_euclidean("mean_shift"),
            Err(Error::UnsupportedMetric {
                op: "mean_shift",
                ..
            })
        ));
    }

    #[test]
    fn distances_match_their_definitions() {
        let (x, y) = ([0.0f32, 3.0, -1.0], [4.0f32, 0.0, 1.0]);
        assert_eq!(Metric::Euclidean.distance(&x, &y), 29f64.sqrt());
        assert_eq!(Metric::Manhattan.distance(&x, &y), 9.0);
        assert_eq!(Metric::Chebyshev.distance(&x, &y), 4.0);
        let d3 = Metric::minkowski(3.0).unwrap().distance(&x, &y);
        assert!((d3 - 99f64.cbrt()).abs() < 1e-12);
        // A quarter of the equator, and pole to equator.
        let h = |a: [f32; 2], b: [f32; 2]| Metric::Haversine.distance(&a, &b);
        let half_pi = std::f64::consts::FRAC_PI_2;
        assert!((h([0.0, 0.0], [0.0, half_pi as f32]) - half_pi).abs() < 1e-7);
        assert!((h([half_pi as f32, 0.0], [0.0, 1.0]) - half_pi).abs() < 1e-7);
    }
}
