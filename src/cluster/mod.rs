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
mod shard;
mod variable_shift;

use ndarray::ArrayViewMut2;

pub use crate::error::ClusterError;
pub use crate::types::Progress;
pub use bandwidth::{scott_bandwidth, silverman_bandwidth};
pub use mean_shift::MeanShiftFit;
pub use medoid_shift::MedoidShiftFit;
pub use params::{
    AdaptiveBandwidth, Bandwidth, MeanShiftParams, MeanShiftValidParams, MedoidShiftParams,
    MedoidShiftValidParams, Seeds,
};
pub use shard::{neighbour_sq_dists, rank_modes, shift_step};

/// Joint MeanShift and MedoidShift run in units of a product kernel's
/// blocks: each column of `rows` divided by its coordinate's bandwidth `h`
/// (`back`: multiplied, for modes found in those units), in `f64`.
pub(crate) fn block_units(mut rows: ArrayViewMut2<'_, f32>, h: &[f64], back: bool) {
    for mut row in rows.rows_mut() {
        for (v, &hk) in row.iter_mut().zip(h) {
            let x = f64::from(*v);
            *v = if back { x * hk } else { x / hk } as f32;
        }
    }
}
