//! Generation by local means: local-mean diffusion (paper §9.3), which
//! reverses a Gaussian noising of the data by iterated local means, one
//! noise level at a time.
//!
//! A checked builder ([`DiffusionParams`] → `check()` →
//! [`DiffusionValidParams`]), the schedule resolved for a data set
//! ([`Diffusion`]: levels, bandwidths and the seeded draws), and
//! [`Engine::generate`](crate::Engine::generate), which runs on the
//! engine's backend through its local-mean op.

mod diffusion;
mod params;
mod rng;

pub use diffusion::Generated;
pub use params::{
    DEFAULT_SIGMA_MAX, DEFAULT_SIGMA_MIN, DEFAULT_STEPS, Diffusion, DiffusionParams,
    DiffusionValidParams, LevelBandwidths, MAX_STEPS, NoiseSchedule, Spacing,
};
