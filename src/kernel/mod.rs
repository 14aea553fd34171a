//! Localization kernels: `K(x, x') = k(‖x − x'‖ / h)`: the [`Profile`]
//! names, the validated [`Kernel`], `T_FAR`, the profiles' formulas
//! (`form.rs`, one definition for every evaluation) and the `f64` far-row
//! math (`exact.rs`).
//!
//! Imports: `crate::error` only (a leaf module; both backends import it).

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

pub(crate) mod exact;
pub(crate) mod form;

use form::{Form, with_form};

/// A key's scaled squared distance `t = r²/h²` at or beyond this counts as
/// infinitely far: its weight is zero for every profile, on both backends
/// (docs/numerics.md, "Far rows").
pub(crate) const T_FAR: f32 = 1.0e37;

/// Smallest accepted bandwidth: `1/h²` must stay a finite `f32`.
pub const MIN_BANDWIDTH: f32 = 1e-18;
/// Largest accepted bandwidth: `1/h²` must stay a normal `f32`.
pub const MAX_BANDWIDTH: f32 = 1e18;

/// A radial profile `k(r) ≥ 0`, non-increasing in `r = ‖x − x'‖ / h`.
///
/// | profile | k(r) | support |
/// |---|---|---|
/// | gaussian | exp(−r²/2) | all |
/// | epanechnikov | (1 − r²)₊ | r < 1 |
/// | uniform | 1\[r < 1\] | r < 1 |
/// | triangular | (1 − r)₊ | r < 1 |
/// | biweight | ((1 − r²)₊)² | r < 1 |
/// | laplacian | exp(−r) | all |
/// | cauchy | 1 / (1 + r²) | all |
///
/// Every profile has `k(0) = 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Profile {
    /// `exp(−r²/2)`, accumulated in the log domain.
    Gaussian,
    /// `(1 − r²)₊`.
    Epanechnikov,
    /// `1[r < 1]` (flat, "tophat").
    Uniform,
    /// `(1 − r)₊` (linear).
    Triangular,
    /// `((1 − r²)₊)²` (quartic).
    Biweight,
    /// `exp(−r)` (exponential), accumulated in the log domain.
    Laplacian,
    /// `1 / (1 + r²)`.
    Cauchy,
}

impl Profile {
    /// All seven profiles, in the order of the table above.
    pub const ALL: [Profile; 7] = [
        Profile::Gaussian,
        Profile::Epanechnikov,
        Profile::Uniform,
        Profile::Triangular,
        Profile::Biweight,
        Profile::Laplacian,
        Profile::Cauchy,
    ];

    /// The profile's name as accepted by [`FromStr`].
    pub fn name(self) -> &'static str {
        match self {
            Profile::Gaussian => "gaussian",
            Profile::Epanechnikov => "epanechnikov",
            Profile::Uniform => "uniform",
            Profile::Triangular => "triangular",
            Profile::Biweight => "biweight",
            Profile::Laplacian => "laplacian",
            Profile::Cauchy => "cauchy",
        }
    }

    /// Whether the weights are exponentials, accumulated in the log domain
    /// with a running maximum (docs/numerics.md).
    pub fn is_exponential(self) -> bool {
        with_form!(self, P => P::LOG)
    }

    /// Whether `k(r) = 0` for `r ≥ 1`, so a query can have an empty neighbourhood.
    pub fn is_compact(self) -> bool {
        matches!(
            self,
            Profile::Epanechnikov | Profile::Uniform | Profile::Triangular | Profile::Biweight
        )
    }

    /// The code the shaders use for this profile (`PROFILE` override constant).
    pub(crate) fn shader_code(self) -> u32 {
        match self {
            Profile::Gaussian => 0,
            Profile::Epanechnikov => 1,
            Profile::Uniform => 2,
            Profile::Triangular => 3,
            Profile::Biweight => 4,
            Profile::Laplacian => 5,
            Profile::Cauchy => 6,
        }
    }

    /// `k(r)` in `f64`, from the scaled squared distance `t = r²`.
    ///
    /// This is the plain definition; the engines use the log-domain form for
    /// exponential profiles.
    pub fn eval_sq(self, t: f64) -> f64 {
        with_form!(self, P => P::eval(t))
    }

    /// `ln k(r)` from `t = r²` for the exponential profiles (`−t/2`, `−√t`);
    /// `None` for the others.
    pub fn log_eval_sq(self, t: f64) -> Option<f64> {
        with_form!(self, P => P::LOG.then(|| P::lane(t)))
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Profile {
    type Err = Error;

    /// Parses a profile name; common aliases (`flat`, `tophat`, `linear`,
    /// `quartic`, `exponential`, `rbf`) are accepted too.
    fn from_str(s: &str) -> Result<Self> {
        let p = match s.to_ascii_lowercase().as_str() {
            "gaussian" | "rbf" => Profile::Gaussian,
            "epanechnikov" => Profile::Epanechnikov,
            "uniform" | "flat" | "tophat" => Profile::Uniform,
            "triangular" | "linear" => Profile::Triangular,
            "biweight" | "quartic" => Profile::Biweight,
            "laplacian" | "exponential" => Profile::Laplacian,
            "cauchy" => Profile::Cauchy,
            _ => {
                return Err(Error::UnknownProfile {
                    name: s.to_string(),
                });
            }
        };
        Ok(p)
    }
}

/// A localization kernel: a [`Profile`] and a validated bandwidth `h`.
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
        Ok(Kernel { profile, bandwidth })
    }

    /// Gaussian kernel with bandwidth `h`.
    pub fn gaussian(h: f32) -> Result<Self> {
        Kernel::new(Profile::Gaussian, h)
    }

    /// The profile.
    pub fn profile(&self) -> Profile {
        self.profile
    }

    /// The bandwidth `h`.
    pub fn bandwidth(&self) -> f32 {
        self.bandwidth
    }

    /// `1/h²` as used by both backends (scaled squared distance `t = r²/h²`).
    pub(crate) fn inv_h2(&self) -> f32 {
        let h = f64::from(self.bandwidth);
        (1.0 / (h * h)) as f32
    }

    /// `K(x, x')` in `f64` from the squared distance `‖x − x'‖²`; the plain
    /// definition, for references and small computations.
    pub fn eval_sq_dist(&self, sq_dist: f64) -> f64 {
        let h = f64::from(self.bandwidth);
        self.profile.eval_sq(sq_dist / (h * h))
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}(h={})", self.profile, self.bandwidth)
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
