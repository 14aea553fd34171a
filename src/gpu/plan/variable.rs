//! Tiling of `variable_bandwidth.wgsl` (variable bandwidths): query tiles
//! for the dispatch and binding limits, key tiles for the binding size,
//! each key tile swept in windows under the loop budget and the work cap,
//! value columns in passes of at most [`VARIABLE_COLS`].

use crate::error::Result;

use super::{
    DeviceLimits, TileLimits, binding_bytes, binding_floats, budget_keys, dispatch_window,
    too_small,
};

/// Threads per workgroup of `variable_bandwidth.wgsl` (one query row each).
pub(crate) const VARIABLE_WG: usize = 64;
/// Most value columns one pass accumulates (its template constant `QT`).
pub(crate) const VARIABLE_COLS: usize = 8;
/// Keys of one stage: the `f32` level of the shader's two-level summation
/// (its sums are added into the row's state every this many keys).
pub(crate) const VARIABLE_STAGE: usize = 256;

/// How a variable-bandwidth pass is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct VariablePlan {
    /// Query rows per tile.
    pub query_tile: usize,
    /// Keys per key tile (one binding each for keys, scales and values).
    pub key_tile: usize,
    /// Most keys one dispatch sweeps.
    pub window: usize,
    /// Value columns per pass (`QT`; 0: row sums only).
    pub cols: usize,
}

/// The plan for `m` queries and `n` keys in `d` dimensions with `q` value
/// columns.
///
/// # Errors
/// [`Error::InvalidParameter`](crate::Error::InvalidParameter) when the
/// caps' binding cannot hold one row.
pub(crate) fn plan_variable(
    dev: &DeviceLimits,
    caps: &TileLimits,
    (m, n, d, q): (usize, usize, usize, usize),
) -> Result<VariablePlan> {
    let cols = q
        .min(VARIABLE_COLS)
        .min(caps.value_cols.unwrap_or(usize::MAX));
    let state = 2 + cols.max(1);
    let floats = binding_floats(dev, caps);
    let key_floats = d.max(q).max(2);
    let row_floats = d.max(state);
    if floats < key_floats.max(row_floats) {
        return Err(too_small(
            binding_bytes(dev, caps),
            key_floats.max(row_floats),
        ));
    }
    let key_tile = (floats / key_floats)
        .min(n)
        .min(caps.key_rows.unwrap_or(usize::MAX))
        .max(1);
    let query_tile = (floats / row_floats)
        .min(dev.workgroups_per_dim as usize * VARIABLE_WG)
        .min(caps.query_rows.unwrap_or(usize::MAX))
        .min(m)
        .max(1);
    // Per key: the key loop, `d` coordinates, the stage's columns, and a
    // rescale of `2·QT` sums when the maximum moves; per stage the add.
    let per_key = 1 + d + 3 * cols + 1;
    let fixed = 4 * (cols + 2) + d;
    let units = 2 + d + cols;
    let window = budget_keys(dev, fixed, per_key)
        .min(dispatch_window(caps, units, query_tile, key_tile))
        .max(1);
    Ok(VariablePlan {
        query_tile,
        key_tile,
        window,
        cols,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_stay_inside_the_loop_budget_and_the_caps() {
        let dev = DeviceLimits::from_wgpu(&wgpu::Limits::default(), true);
        let p = plan_variable(&dev, &TileLimits::default(), (1000, 200_000, 8, 8)).unwrap();
        assert_eq!(p.cols, 8);
        assert!(p.window * (1 + 8 + 3 * 8 + 1) < 65_535, "{p:?}");
        let caps = TileLimits {
            query_rows: Some(5),
            key_rows: Some(7),
            value_cols: Some(3),
            dispatch_keys: Some(2),
            ..TileLimits::default()
        };
        let p = plan_variable(&dev, &caps, (100, 100, 2, 5)).unwrap();
        assert_eq!((p.query_tile, p.key_tile, p.window, p.cols), (5, 7, 2, 3));
        let tiny = TileLimits {
            buffer_bytes: Some(16),
            ..TileLimits::default()
        };
        assert!(plan_variable(&dev, &tiny, (10, 10, 8, 0)).is_err());
    }
}
