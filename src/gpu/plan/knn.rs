//! Tiling of the kNN shader: query tiles × key tiles, the running top-k
//! list of each query kept on the device between key tiles.

use crate::error::Result;

use super::{
    DeviceLimits, LOCAL_MEAN_WG, MAX_STAGED_KEYS, Shape, TileLimits, binding_bytes, budget_keys,
    no_room_for_a_key, too_small,
};

/// Most neighbours one GPU kNN pass keeps per query (private arrays).
pub(crate) const MAX_GPU_K: usize = 128;

/// Tiling of one kNN call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KnnPlan {
    pub query_tile: usize,
    pub key_tile: usize,
    pub staged_keys: usize,
}

/// Plans `k` nearest neighbours of `m` queries among `n` keys in `d`
/// dimensions.
pub(crate) fn plan_knn(
    dev: &DeviceLimits,
    caps: &TileLimits,
    shape: Shape,
    k: usize,
) -> Result<KnnPlan> {
    let Shape { m, n, d, .. } = shape;
    let binding = binding_bytes(dev, caps);
    let floats = (binding / 4).min(usize::MAX as u64) as usize;
    let per_row = d.max(2 * k);
    if floats < per_row {
        return Err(too_small(binding, per_row));
    }
    let staged_keys = (dev.workgroup_bytes as usize / 4 / d).min(MAX_STAGED_KEYS);
    if staged_keys == 0 {
        return Err(no_room_for_a_key("knn", d, dev));
    }
    // The insertion loop may run k times per key in the worst case.
    let key_tile = (floats / d)
        .min(budget_keys(dev, 0, 2 + d + k))
        .min(caps.key_rows.unwrap_or(usize::MAX))
        .min(n)
        .max(1);
    let query_tile = (floats / per_row)
        .min(dev.workgroups_per_dim as usize * LOCAL_MEAN_WG)
        .min(caps.query_rows.unwrap_or(usize::MAX))
        .min(m)
        .max(1);
    Ok(KnnPlan {
        query_tile,
        key_tile,
        staged_keys,
    })
}

#[cfg(test)]
mod tests {
    use super::super::LOOP_CAPPED;
    use super::super::shape;
    use super::*;

    #[test]
    fn a_loop_budget_bounds_key_tiles() {
        let dev = LOOP_CAPPED;
        let p = plan_knn(
            &dev,
            &TileLimits::default(),
            shape(10, 1_000_000, 16, 0),
            16,
        )
        .unwrap();
        assert!(p.key_tile * (2 + 16 + 16) < 65535);
    }
}
