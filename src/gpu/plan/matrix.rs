//! Tiling of the kernel matrix: query tiles × key tiles, each cut into
//! output blocks that fit one binding; the row sums of the normalized
//! modes share the key tiles.

use crate::error::Result;

use super::{
    DeviceLimits, LocalMeanPlan, Shape, TileLimits, binding_bytes, plan_local_mean, too_small,
};

/// Workgroup side of the kernel-matrix shader (16 × 16 entries).
pub(crate) const MATRIX_WG: usize = 16;

/// Tiling of one kernel-matrix call: query tiles × key tiles, each cut into
/// output blocks of `block_rows × key_tile` entries that fit one binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MatrixPlan {
    /// Query rows per tile.
    pub query_tile: usize,
    /// Keys (output columns) per tile.
    pub key_tile: usize,
    /// Output rows per block (≤ `query_tile`).
    pub block_rows: usize,
}

/// Plans an `m × n` kernel matrix in `d` dimensions.
pub(crate) fn plan_matrix(
    dev: &DeviceLimits,
    caps: &TileLimits,
    shape: Shape,
) -> Result<MatrixPlan> {
    let Shape { m, n, d, .. } = shape;
    let binding = binding_bytes(dev, caps);
    let floats = (binding / 4).min(usize::MAX as u64) as usize;
    if floats < d.max(2) {
        return Err(too_small(binding, d.max(2)));
    }
    let dispatch = dev.workgroups_per_dim as usize * MATRIX_WG;
    let key_tile = (floats / d)
        .min(floats)
        .min(dispatch)
        .min(caps.key_rows.unwrap_or(usize::MAX))
        .min(n)
        .max(1);
    let query_tile = (floats / d.max(2))
        .min(dispatch)
        .min(caps.query_rows.unwrap_or(usize::MAX))
        .min(m)
        .max(1);
    let block_rows = (floats / key_tile).clamp(1, query_tile);
    Ok(MatrixPlan {
        query_tile,
        key_tile,
        block_rows,
    })
}

impl MatrixPlan {
    /// Output rows per block of a key tile of `cols` keys in a query tile
    /// of `rows` rows (narrower tiles take more rows per block).
    pub(crate) fn block_rows_for(&self, cols: usize, rows: usize) -> usize {
        (self.block_rows * self.key_tile / cols).clamp(1, rows)
    }
}

/// Plans an `m × n` kernel matrix in `d` dimensions together with its row
/// sums (a local-mean pass without values): one set of key tiles and of
/// query tiles serves both; returns the matrix plan and the row-sum plan.
pub(crate) fn plan_kernel_matrix(
    dev: &DeviceLimits,
    caps: &TileLimits,
    shape: Shape,
) -> Result<(MatrixPlan, LocalMeanPlan)> {
    let mut mplan = plan_matrix(dev, caps, shape)?;
    let mut lplan = plan_local_mean(dev, caps, Shape { q: 0, ..shape })?;
    let key_tile = mplan.key_tile.min(lplan.key_tile);
    let query_tile = mplan.query_tile.min(lplan.query_tile);
    lplan.key_tile = key_tile;
    mplan.query_tile = query_tile;
    Ok((mplan, lplan))
}

#[cfg(test)]
mod tests {
    use super::super::LAVAPIPE;
    use super::super::shape;
    use super::*;

    #[test]
    fn matrix_blocks_fit_one_binding() {
        let caps = TileLimits {
            buffer_bytes: Some(4 * 1000),
            ..TileLimits::default()
        };
        let p = plan_matrix(&LAVAPIPE, &caps, shape(777, 1301, 2, 0)).unwrap();
        assert!(p.block_rows * p.key_tile <= 1000);
        assert!(p.key_tile * 2 <= 1000);
    }
}
