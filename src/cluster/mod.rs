//! Clustering by local means: MeanShift (classic and blurring, paper
//! §5.2.3) and MedoidShift (paper §7.4), with bandwidth rules.
//!
//! Each method has a checked builder (`*Params` → `check()` → `*ValidParams`)
//! and runs as a method of [`Engine`](crate::Engine), on either backend.

mod bandwidth;
mod mean_shift;
mod medoid_shift;
mod params;
mod postprocess;

pub use crate::error::ClusterError;
pub use crate::types::Progress;
pub use bandwidth::{scott_bandwidth, silverman_bandwidth};
pub use mean_shift::MeanShiftFit;
pub use medoid_shift::MedoidShiftFit;
pub use params::{
    Bandwidth, MeanShiftParams, MeanShiftValidParams, MedoidShiftParams, MedoidShiftValidParams,
    Seeds,
};
