//! Tiling of the local-mean shader: local means and row states, and
//! MeanShift (whose iterations run it).

use crate::error::Result;
use crate::types::MomentLayout;

use super::{
    DeviceLimits, MAX_STAGED_KEYS, TileLimits, binding_bytes, budget_keys, no_room_for_a_key,
    too_small,
};

/// Threads per workgroup of the local-mean shader (one query each).
pub(crate) const LOCAL_MEAN_WG: usize = 64;
/// Most value columns one local-mean pass keeps in registers.
pub(crate) const MAX_VALUE_COLS: usize = 8;

/// Tiling of one local-mean call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LocalMeanPlan {
    /// Query rows per dispatch.
    pub query_tile: usize,
    /// Keys per key tile (one binding for keys, one for values).
    pub key_tile: usize,
    /// Value columns per pass (0 when only row sums are wanted).
    pub col_tile: usize,
    /// Keys staged in workgroup memory per step inside a dispatch.
    pub staged_keys: usize,
}

/// Plans a local mean of `m` queries against `n` keys in `d` dimensions
/// with `q` value columns (`q = 0`: row sums only).
pub(crate) fn plan_local_mean(
    dev: &DeviceLimits,
    caps: &TileLimits,
    m: usize,
    n: usize,
    d: usize,
    q: usize,
) -> Result<LocalMeanPlan> {
    let binding = binding_bytes(dev, caps);
    let floats = (binding / 4).min(usize::MAX as u64) as usize;
    let col_tile = q
        .min(MAX_VALUE_COLS)
        .min(caps.value_cols.unwrap_or(usize::MAX));
    let col_slots = col_tile.max(1);
    let staged_keys = (dev.workgroup_bytes as usize / 4 / (d + col_slots)).min(MAX_STAGED_KEYS);
    if staged_keys == 0 {
        return Err(no_room_for_a_key("local_mean", d, dev));
    }
    // Keys: one binding holds a tile of keys, another its value rows.
    let key_tile = (floats / d.max(q).max(1))
        .min(budget_keys(dev, 0, 2 + d + col_slots))
        .min(caps.key_rows.unwrap_or(usize::MAX))
        .min(n)
        .max(1);
    // Queries: dispatch limit, and the query, state and output bindings.
    let dispatch_rows = dev.workgroups_per_dim as usize * LOCAL_MEAN_WG;
    let per_row = d.max(q).max(2 + col_slots);
    let query_tile = (floats / per_row)
        .min(dispatch_rows)
        .min(caps.query_rows.unwrap_or(usize::MAX))
        .min(m)
        .max(1);
    if floats < per_row || floats < d {
        return Err(too_small(binding, per_row));
    }
    Ok(LocalMeanPlan {
        query_tile,
        key_tile,
        col_tile,
        staged_keys,
    })
}

/// Plans a local-moment pass (`shaders/local_moments.wgsl`) of `m`
/// queries against `n` keys for `layout`: the local-mean plan for the
/// layout's output columns, query rows of `2d` floats (`[q | c]`),
/// workgroup memory staging each key's coordinates and the value columns
/// a pass touches, and key tiles within the loop budget of a pair's work
/// (the offsets, the staged values and the pass's columns).
pub(crate) fn plan_local_moments(
    dev: &DeviceLimits,
    caps: &TileLimits,
    (m, n): (usize, usize),
    layout: &MomentLayout,
) -> Result<LocalMeanPlan> {
    let d = layout.d;
    let mut plan = plan_local_mean(dev, caps, m, n, d, layout.cols())?;
    // A query row is [q | c]: 2d floats.
    let floats = (binding_bytes(dev, caps) / 4).min(usize::MAX as u64) as usize;
    plan.query_tile = plan.query_tile.min(floats / (2 * d)).max(1);
    let window = layout.value_window(plan.col_tile);
    plan.staged_keys =
        (dev.workgroup_bytes as usize / 4 / (d + window.max(1))).min(MAX_STAGED_KEYS);
    if plan.staged_keys == 0 {
        return Err(no_room_for_a_key("local_moments", d, dev));
    }
    let per_key = 2 + 2 * d + window + plan.col_tile.max(1);
    plan.key_tile = plan.key_tile.min(budget_keys(dev, 0, per_key)).max(1);
    Ok(plan)
}

/// Plans MeanShift of `m` seeds over `n` points in `d` dimensions: the
/// local-mean plan of its iterations; blurring, a key tile is also a chunk
/// of queries.
pub(crate) fn plan_mean_shift(
    dev: &DeviceLimits,
    caps: &TileLimits,
    m: usize,
    n: usize,
    d: usize,
    blurring: bool,
) -> Result<LocalMeanPlan> {
    let mut plan = plan_local_mean(dev, caps, m.max(1), n, d, d)?;
    if blurring {
        let t = plan.key_tile.min(plan.query_tile);
        plan.key_tile = t;
        plan.query_tile = t;
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::super::LAVAPIPE;
    use super::*;
    use crate::error::Error;

    #[test]
    fn local_mean_plan_respects_caps_and_device() {
        let p = plan_local_mean(&LAVAPIPE, &TileLimits::default(), 1000, 5000, 3, 20).unwrap();
        assert_eq!((p.query_tile, p.key_tile, p.col_tile), (1000, 5000, 8));
        assert!(p.staged_keys * (3 + 8) * 4 <= 32 << 10);
        let caps = TileLimits {
            query_rows: Some(5),
            key_rows: Some(7),
            value_cols: Some(2),
            buffer_bytes: None,
        };
        let p = plan_local_mean(&LAVAPIPE, &caps, 1000, 5000, 3, 20).unwrap();
        assert_eq!((p.query_tile, p.key_tile, p.col_tile), (5, 7, 2));
        // Key tiles shrink with the binding size.
        let small = TileLimits {
            buffer_bytes: Some(4 * 3 * 100),
            ..TileLimits::default()
        };
        let p = plan_local_mean(&LAVAPIPE, &small, 1000, 5000, 3, 3).unwrap();
        assert_eq!(p.key_tile, 100);
    }

    #[test]
    fn a_loop_budget_bounds_key_tiles() {
        let dev = DeviceLimits {
            loop_budget: Some(65535),
            ..LAVAPIPE
        };
        let p = plan_local_mean(&dev, &TileLimits::default(), 10, 1_000_000, 3, 3).unwrap();
        assert!(p.key_tile * (2 + 3 + 3) < 65535);
    }

    #[test]
    fn moment_plans_stage_values_and_respect_the_loop_budget() {
        let dev = DeviceLimits {
            loop_budget: Some(65535),
            ..LAVAPIPE
        };
        let layout = MomentLayout {
            d: 3,
            qy: 200,
            second: true,
        };
        let p = plan_local_moments(&dev, &TileLimits::default(), (10, 1_000_000), &layout).unwrap();
        assert_eq!(p.col_tile, 8);
        // Each pass stages the few value columns it touches, not all 200.
        let w = layout.value_window(8);
        assert!(w <= 8);
        assert!(p.staged_keys * (3 + w) * 4 <= 32 << 10);
        assert!(p.key_tile * (2 + 2 * 3 + w + 8) < 65535);
    }

    #[test]
    fn huge_dimension_is_a_clear_error() {
        let e = plan_local_mean(&LAVAPIPE, &TileLimits::default(), 10, 10, 10_000, 1);
        assert!(matches!(e, Err(Error::Unsupported { .. })));
    }
}
