//! The scheduler: how an op is cut into tiles that fit the device.
//!
//! Queries are tiled for dispatch limits and binding sizes, keys for the
//! storage-binding size, value columns for the register budget; partial
//! row states of different key tiles are merged with the one associative
//! rule of docs/numerics.md ([`merge_states`](crate::merge_states), mirrored by `merge_state` in the
//! shaders). Every limit can be lowered by [`TileLimits`], so tests force
//! many tiny tiles on small data.

use crate::error::{Error, Result};

/// Caps on tile sizes, on top of what the device allows. `None` leaves a
/// dimension to the device limits. Used by tests (to force many small
/// tiles) and by services that want to bound a single dispatch.
///
/// ```
/// use locus::TileLimits;
/// let tiny = TileLimits { query_rows: Some(5), key_rows: Some(7), ..TileLimits::default() };
/// assert!(tiny.validate().is_ok());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TileLimits {
    /// Most query rows per dispatch.
    pub query_rows: Option<usize>,
    /// Most key rows per tile (one storage binding each).
    pub key_rows: Option<usize>,
    /// Most value columns accumulated per pass (capped at 8 by the shader).
    pub value_cols: Option<usize>,
    /// Largest storage buffer to bind, in bytes (device limit otherwise).
    pub buffer_bytes: Option<u64>,
}

impl TileLimits {
    /// Checks that every given cap is usable (non-zero, buffers ≥ 16 bytes).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming the bad field.
    pub fn validate(&self) -> Result<()> {
        let bad = |name, reason: &str| {
            Err(Error::InvalidParameter {
                name,
                reason: reason.to_string(),
            })
        };
        if self.query_rows == Some(0) {
            return bad("tile_limits.query_rows", "must be at least 1");
        }
        if self.key_rows == Some(0) {
            return bad("tile_limits.key_rows", "must be at least 1");
        }
        if self.value_cols == Some(0) {
            return bad("tile_limits.value_cols", "must be at least 1");
        }
        if matches!(self.buffer_bytes, Some(b) if b < 16) {
            return bad("tile_limits.buffer_bytes", "must be at least 16 bytes");
        }
        Ok(())
    }
}

/// What the device allows, as the planner needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeviceLimits {
    /// Largest storage buffer binding, bytes.
    pub binding_bytes: u64,
    /// Workgroups per dispatch dimension.
    pub workgroups_per_dim: u32,
    /// Workgroup memory, bytes.
    pub workgroup_bytes: u32,
    /// Loop iterations one invocation may execute in total, where the
    /// driver caps them. Mesa's llvmpipe (lavapipe) silently stops every
    /// loop of an invocation after 65535 iterations in all, which would
    /// drop keys from long tiles without any error; key tiles are sized to
    /// stay well inside the cap.
    pub loop_budget: Option<u32>,
}

/// Keys one dispatch may visit per invocation under a loop budget, when
/// each key costs up to `per_key` loop iterations (nothing unrolled).
fn budget_keys(dev: &DeviceLimits, per_key: usize) -> usize {
    dev.loop_budget
        .map_or(usize::MAX, |b| (b as usize * 7 / 8 / per_key.max(1)).max(1))
}

/// Threads per workgroup of the local-mean shader (one query each).
pub(crate) const LOCAL_MEAN_WG: usize = 64;
/// Workgroup side of the kernel-matrix shader (16 × 16 entries).
pub(crate) const MATRIX_WG: usize = 16;
/// Most value columns one local-mean pass keeps in registers.
pub(crate) const MAX_VALUE_COLS: usize = 8;
/// Most keys staged in workgroup memory at once.
const MAX_STAGED_KEYS: usize = 256;

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
    let binding = caps
        .buffer_bytes
        .map_or(dev.binding_bytes, |b| b.min(dev.binding_bytes));
    let floats = (binding / 4).min(usize::MAX as u64) as usize;
    let col_tile = q
        .min(MAX_VALUE_COLS)
        .min(caps.value_cols.unwrap_or(usize::MAX));
    let col_slots = col_tile.max(1);
    let staged_keys = (dev.workgroup_bytes as usize / 4 / (d + col_slots)).min(MAX_STAGED_KEYS);
    if staged_keys == 0 {
        return Err(Error::Unsupported {
            op: "local_mean",
            backend: "gpu",
            reason: format!(
                "dimension d={d} does not fit one key in {} bytes of workgroup memory",
                dev.workgroup_bytes
            ),
        });
    }
    // Keys: one binding holds a tile of keys, another its value rows.
    let key_tile = (floats / d.max(q).max(1))
        .min(budget_keys(dev, 2 + d + col_slots))
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
    m: usize,
    n: usize,
    d: usize,
) -> Result<MatrixPlan> {
    let binding = caps
        .buffer_bytes
        .map_or(dev.binding_bytes, |b| b.min(dev.binding_bytes));
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
    m: usize,
    n: usize,
    d: usize,
    k: usize,
) -> Result<KnnPlan> {
    let binding = caps
        .buffer_bytes
        .map_or(dev.binding_bytes, |b| b.min(dev.binding_bytes));
    let floats = (binding / 4).min(usize::MAX as u64) as usize;
    let per_row = d.max(2 * k);
    if floats < per_row {
        return Err(too_small(binding, per_row));
    }
    let staged_keys = (dev.workgroup_bytes as usize / 4 / d).min(MAX_STAGED_KEYS);
    if staged_keys == 0 {
        return Err(Error::Unsupported {
            op: "knn",
            backend: "gpu",
            reason: format!(
                "dimension d={d} does not fit one key in {} bytes of workgroup memory",
                dev.workgroup_bytes
            ),
        });
    }
    // The insertion loop may run k times per key in the worst case.
    let key_tile = (floats / d)
        .min(budget_keys(dev, 2 + d + k))
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

fn too_small(binding: u64, floats: usize) -> Error {
    Error::InvalidParameter {
        name: "tile_limits.buffer_bytes",
        reason: format!("{binding} bytes cannot hold one row of {floats} floats"),
    }
}

/// Ranges `0..len` cut into pieces of at most `tile`.
pub(crate) fn tiles(len: usize, tile: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..len.div_ceil(tile)).map(move |t| (t * tile, ((t + 1) * tile).min(len)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAVAPIPE: DeviceLimits = DeviceLimits {
        binding_bytes: 128 << 20,
        workgroups_per_dim: 65535,
        workgroup_bytes: 32 << 10,
        loop_budget: None,
    };

    #[test]
    fn tiles_cover_the_range_once() {
        let t: Vec<_> = tiles(10, 4).collect();
        assert_eq!(t, vec![(0, 4), (4, 8), (8, 10)]);
        assert_eq!(tiles(3, 7).count(), 1);
    }

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
    fn matrix_blocks_fit_one_binding() {
        let caps = TileLimits {
            buffer_bytes: Some(4 * 1000),
            ..TileLimits::default()
        };
        let p = plan_matrix(&LAVAPIPE, &caps, 777, 1301, 2).unwrap();
        assert!(p.block_rows * p.key_tile <= 1000);
        assert!(p.key_tile * 2 <= 1000);
    }

    #[test]
    fn a_loop_budget_bounds_key_tiles() {
        let dev = DeviceLimits {
            loop_budget: Some(65535),
            ..LAVAPIPE
        };
        let p = plan_local_mean(&dev, &TileLimits::default(), 10, 1_000_000, 3, 3).unwrap();
        assert!(p.key_tile * (2 + 3 + 3) < 65535);
        let p = plan_knn(&dev, &TileLimits::default(), 10, 1_000_000, 16, 16).unwrap();
        assert!(p.key_tile * (2 + 16 + 16) < 65535);
    }

    #[test]
    fn huge_dimension_is_a_clear_error() {
        let e = plan_local_mean(&LAVAPIPE, &TileLimits::default(), 10, 10, 10_000, 1);
        assert!(matches!(e, Err(Error::Unsupported { .. })));
    }
}
