//! Tiling of a key set on the device: one key tile size that every later
//! query's plan accepts.

use crate::error::Result;

use super::{DeviceLimits, MAX_GPU_K, Shape, TileLimits, plan_knn, plan_local_mean};

/// Keys per tile of a key set of `n` keys in `d` dimensions with value
/// matrices of `set_cols` columns: the smallest key tile any query would
/// plan (kNN at its largest k, local means with every value matrix or
/// none), so that every plan accepts these tiles. Under a driver's loop
/// budget a larger tile would silently drop keys.
pub(crate) fn resident_key_tile(
    dev: &DeviceLimits,
    caps: &TileLimits,
    n: usize,
    d: usize,
    set_cols: &[usize],
) -> Result<usize> {
    let shape = Shape { m: 1, n, d, q: 0 };
    let knn = |differences| {
        plan_knn(dev, caps, shape, (MAX_GPU_K.min(n), differences))
            .or_else(|_| plan_knn(dev, caps, shape, (1, differences)))
            .map(|p| p.key_tile)
    };
    // kNN under any metric: by inner products or by differences.
    let mut key_tile = knn(false)?.min(knn(true)?);
    for q in std::iter::once(0).chain(set_cols.iter().copied()) {
        key_tile = key_tile.min(plan_local_mean(dev, caps, Shape { m: 1, n, d, q })?.key_tile);
    }
    Ok(key_tile)
}
