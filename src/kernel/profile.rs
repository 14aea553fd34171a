//! The eight radial profiles by name: what they are called, which have a
//! compact support, their shader codes. Their formulas are `form.rs`'s.
//!
//! Imports: `crate::error`.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

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
/// | cosine | cos(πr/2) for r < 1 | r < 1 |
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
    /// `cos(πr/2)` for `r < 1`, else 0 (scikit-learn's `cosine`).
    Cosine,
}

impl Profile {
    /// All eight profiles, in the order of the table above.
    pub const ALL: [Profile; 8] = [
        Profile::Gaussian,
        Profile::Epanechnikov,
        Profile::Uniform,
        Profile::Triangular,
        Profile::Biweight,
        Profile::Laplacian,
        Profile::Cauchy,
        Profile::Cosine,
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
            Profile::Cosine => "cosine",
        }
    }

    /// Whether `k(r) = 0` for `r ≥ 1`, so a query can have an empty neighbourhood.
    pub fn is_compact(self) -> bool {
        matches!(
            self,
            Profile::Epanechnikov
                | Profile::Uniform
                | Profile::Triangular
                | Profile::Biweight
                | Profile::Cosine
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
            Profile::Cosine => 7,
        }
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
            "cosine" => Profile::Cosine,
            _ => {
                return Err(Error::UnknownProfile {
                    name: s.to_string(),
                });
            }
        };
        Ok(p)
    }
}
