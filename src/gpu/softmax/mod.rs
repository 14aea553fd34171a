//! Kernel softmax on the GPU: attention (`attention.rs`), the softmax
//! weight matrix (`matrix.rs`) and the linear feature local mean
//! (`feature.rs`); here, what they share: the tiling plans and the upload
//! of one batch group's key tiles.
//!
//! Batches are stacked along the rows (`Heads`), so a batch group, query
//! tile or key tile is one contiguous row range of its input. When every
//! batch's data fit the device bindings, several batches share a dispatch
//! (`workgroup_id.y` is the batch); otherwise one batch at a time is cut
//! into query tiles × key tiles, and the partial row states of the key
//! tiles merge on the device.

mod attention;
mod feature;
mod matrix;

pub(crate) use attention::kernel_softmax;
pub(crate) use feature::feature_local_mean;
pub(crate) use matrix::softmax_matrix;

use crate::error::{Error, Result};
use crate::gpu::plan::{DeviceLimits, TileLimits, tiles};
use crate::types::Heads;

use super::buffers::{Pooled, upload};
use super::context::GpuContext;

/// Query rows per workgroup of `softmax.wgsl` (one per invocation).
const ATTEND_WG: usize = 64;
/// Most value columns one attention pass keeps in registers.
const MAX_ATTEND_COLS: usize = 64;
/// Most keys staged in workgroup memory at once (also the scores each
/// invocation holds in registers).
const MAX_STAGED: usize = 32;
/// Keys per chunk of the feature local mean (at least).
const FEATURE_CHUNK: usize = 256;
/// Value columns per `finish` pass of the feature local mean.
const FEATURE_COLS: usize = 16;
/// Invocations per workgroup of `chunk_sums` and `prefix`.
const SUM_WG: usize = 256;
/// Query rows per workgroup of `finish`.
const FINISH_WG: usize = 64;

/// Tiling of one attention call (or of the row pass of the matrix).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AttendPlan {
    /// Batches per dispatch (more than 1 only when tiles are whole batches).
    pub batch_group: usize,
    /// Query rows per tile.
    pub query_tile: usize,
    /// Keys per tile (one binding for the keys, one for the values).
    pub key_tile: usize,
    /// Value columns per pass (0: row statistics only).
    pub col_tile: usize,
    /// Keys staged in workgroup memory at once.
    pub staged: usize,
}

impl AttendPlan {
    fn d4(d: usize) -> usize {
        d.div_ceil(4)
    }
    fn qa4(&self) -> usize {
        self.col_tile.max(1).div_ceil(4)
    }
    /// Floats per row of the state buffer.
    fn state_cols(&self) -> usize {
        2 + 4 * self.qa4()
    }
}

fn binding_floats(dev: &DeviceLimits, caps: &TileLimits) -> usize {
    let binding = caps
        .buffer_bytes
        .map_or(dev.binding_bytes, |b| b.min(dev.binding_bytes));
    (binding / 4).min(usize::MAX as u64) as usize
}

fn too_small(floats: usize, need: usize) -> Error {
    Error::InvalidParameter {
        name: "tile_limits.buffer_bytes",
        reason: format!("{} bytes cannot hold one row of {need} floats", floats * 4),
    }
}

/// Plans attention of `b` batches of `m` queries against `n` keys in `d`
/// dimensions with `q` value columns (`q = 0`: row statistics only).
pub(crate) fn plan_attend(
    dev: &DeviceLimits,
    caps: &TileLimits,
    b: usize,
    m: usize,
    n: usize,
    d: usize,
    q: usize,
) -> Result<AttendPlan> {
    let floats = binding_floats(dev, caps);
    let col_tile = q
        .min(MAX_ATTEND_COLS)
        .min(caps.value_cols.unwrap_or(usize::MAX));
    let mut plan = AttendPlan {
        batch_group: 1,
        query_tile: 1,
        key_tile: 1,
        col_tile,
        staged: 0,
    };
    let per_key = 16 * (AttendPlan::d4(d) + plan.qa4());
    plan.staged = (dev.workgroup_bytes as usize / per_key).min(MAX_STAGED);
    if plan.staged == 0 {
        return Err(Error::Unsupported {
            op: "kernel_softmax",
            backend: "gpu",
            reason: format!(
                "dimension d={d} does not fit one key in {} bytes of workgroup memory",
                dev.workgroup_bytes
            ),
        });
    }
    let wq = d.max(q).max(plan.state_cols());
    let wk = d.max(q);
    if floats < wq {
        return Err(too_small(floats, wq));
    }
    let dispatch_rows = dev.workgroups_per_dim as usize * ATTEND_WG;
    plan.query_tile = (floats / wq)
        .min(dispatch_rows)
        .min(caps.query_rows.unwrap_or(usize::MAX))
        .min(m)
        .max(1);
    plan.key_tile = (floats / wk)
        .min(attend_budget_keys(dev, d, plan.qa4()))
        .min(caps.key_rows.unwrap_or(usize::MAX))
        .min(n)
        .max(1);
    if plan.query_tile == m && plan.key_tile == n {
        plan.batch_group = (floats / (m * wq))
            .min(floats / (n * wk))
            .min(dev.workgroups_per_dim as usize)
            .min(b)
            .max(1);
    }
    Ok(plan)
}

/// Loop iterations one invocation may run under the device's loop budget
/// (llvmpipe stops an invocation's loops after 65535 iterations in all),
/// with a margin; `None` where there is no cap.
fn loop_budget(dev: &DeviceLimits) -> Option<usize> {
    dev.loop_budget.map(|b| b as usize * 7 / 8)
}

/// Keys one `attend` dispatch may visit per invocation under the loop
/// budget, counting every loop iteration as if nothing were unrolled: per
/// key the dot product (`D4`), a rescale and the weighted values (`QA4`
/// each), the key loop and its share of the staging loops; once, the
/// query load and the state merge.
fn attend_budget_keys(dev: &DeviceLimits, d: usize, qa4: usize) -> usize {
    let d4 = AttendPlan::d4(d);
    loop_budget(dev).map_or(usize::MAX, |b| {
        let fixed = 5 * d4 + 10 * qa4 + 16;
        let per_key = 2 + d4 + 2 * qa4 + (d4 + qa4).div_ceil(8);
        (b.saturating_sub(fixed) / per_key).max(1)
    })
}

/// Rows `first..last` of the stacked rows (`per` rows per batch) that hold
/// rows `r0..r1` of batches `b0..b1` (whole batches when `b1 > b0 + 1`).
fn stacked(b0: usize, b1: usize, r0: usize, r1: usize, per: usize) -> (usize, usize) {
    (b0 * per + r0, (b1 - 1) * per + r1)
}

/// Keys (and their value rows) of one batch group, uploaded once.
struct KeyTile<'p> {
    /// Index within the batch of the tile's first key.
    start: usize,
    len: usize,
    keys: Pooled<'p>,
    values: Pooled<'p>,
}

fn upload_keys<'p>(
    ctx: &'p GpuContext,
    op: &'static str,
    psi: &Heads<'_>,
    values: Option<&Heads<'_>>,
    (b0, b1): (usize, usize),
    key_tile: usize,
) -> Result<Vec<KeyTile<'p>>> {
    let storage = wgpu::BufferUsages::STORAGE;
    tiles(psi.rows, key_tile)
        .map(|(k0, k1)| {
            let (a, b) = stacked(b0, b1, k0, k1, psi.rows);
            Ok(KeyTile {
                start: k0,
                len: k1 - k0,
                keys: upload(ctx, op, psi.data.row_range(a, b), storage)?,
                values: match values {
                    Some(v) => upload(ctx, op, v.data.row_range(a, b), storage)?,
                    None => upload::<f32>(ctx, op, &[], storage)?,
                },
            })
        })
        .collect()
}

/// Tiling of one feature-local-mean call (per batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FeaturePlan {
    /// Keys per chunk (one workgroup of `chunk_sums`, one prefix state).
    pub chunk: usize,
    /// Keys per key tile: a whole number of chunks.
    pub key_tile: usize,
    /// Query rows per `finish` tile.
    pub query_tile: usize,
    /// Value columns per `finish` pass.
    pub col_tile: usize,
}

/// Plans the feature local mean of `m` queries and `n` keys in `d`
/// dimensions with `q` value columns.
pub(crate) fn plan_feature(
    dev: &DeviceLimits,
    caps: &TileLimits,
    m: usize,
    n: usize,
    d: usize,
    q: usize,
) -> Result<FeaturePlan> {
    let floats = binding_floats(dev, caps);
    let e = d.saturating_mul(q + 1);
    let wk = d.max(q);
    let dispatch = dev.workgroups_per_dim as usize;
    let col_tile = q
        .min(FEATURE_COLS)
        .min(caps.value_cols.unwrap_or(usize::MAX))
        .max(1);
    let unsupported = |reason: String| Error::Unsupported {
        op: "feature_local_mean",
        backend: "gpu",
        reason,
    };
    // Keys one binding (of keys or of values) holds.
    let max_keys = (floats / wk)
        .min(caps.key_rows.unwrap_or(usize::MAX))
        .min(n);
    if max_keys == 0 {
        return Err(too_small(floats, wk));
    }
    // Under a loop budget, a chunk bounds the iterations of `chunk_sums`
    // (its entries × its keys) and of `finish` (its keys × (d + columns)),
    // and the number of chunks those of `prefix`.
    let qa = col_tile.next_power_of_two();
    let budget = loop_budget(dev);
    let longest = budget.map_or(usize::MAX, |b| {
        let sums = (b / e.div_ceil(SUM_WG).max(1)).saturating_sub(1);
        let finish = b.saturating_sub(d * (2 + qa) + 2 * qa) / (1 + d + qa);
        sums.min(finish)
    });
    let hi = max_keys.min(longest);
    if hi == 0 {
        return Err(unsupported(format!(
            "d={d}, q={q} exceed the device's loop budget per invocation"
        )));
    }
    let mut chunk = FEATURE_CHUNK.min(hi);
    // The chunk sums and the total must fit one binding, and the prefix
    // pass the loop budget: fewer, longer chunks.
    while n.div_ceil(chunk).saturating_add(1).saturating_mul(e) > floats
        || budget.is_some_and(|b| n.div_ceil(chunk) > b)
    {
        if chunk == hi {
            return Err(unsupported(format!(
                "{n} keys need more chunk sums (d={d}, q={q}) than one binding or the loop budget allows"
            )));
        }
        chunk = (chunk * 2).min(hi);
    }
    let key_tile = max_keys / chunk * chunk;
    let query_tile = (floats / wk)
        .min(dispatch * FINISH_WG)
        .min(caps.query_rows.unwrap_or(usize::MAX))
        .min(m)
        .max(1);
    Ok(FeaturePlan {
        chunk,
        key_tile: key_tile.min(dispatch * chunk),
        query_tile,
        col_tile,
    })
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
    fn attention_plan_groups_whole_batches_and_tiles_big_ones() {
        let p = plan_attend(&LAVAPIPE, &TileLimits::default(), 8, 4096, 4096, 64, 64).unwrap();
        assert_eq!(
            (p.batch_group, p.query_tile, p.key_tile, p.col_tile),
            (8, 4096, 4096, 64)
        );
        assert!(p.staged * 16 * (16 + 16) <= 32 << 10);
        let caps = TileLimits {
            query_rows: Some(5),
            key_rows: Some(7),
            value_cols: Some(3),
            buffer_bytes: None,
        };
        let p = plan_attend(&LAVAPIPE, &caps, 3, 100, 50, 8, 10).unwrap();
        assert_eq!(
            (p.batch_group, p.query_tile, p.key_tile, p.col_tile),
            (1, 5, 7, 3)
        );
        // Small bindings: one batch per dispatch, tiles within one binding.
        let small = TileLimits {
            buffer_bytes: Some(4 * 64 * 100),
            ..TileLimits::default()
        };
        let p = plan_attend(&LAVAPIPE, &small, 8, 1000, 1000, 64, 64).unwrap();
        assert_eq!(p.batch_group, 1);
        assert!(p.key_tile * 64 <= 6400 && p.query_tile * (2 + 64) <= 6400);
    }

    #[test]
    fn a_loop_budget_bounds_key_tiles_and_chunks() {
        let dev = DeviceLimits {
            loop_budget: Some(65535),
            ..LAVAPIPE
        };
        let p = plan_attend(&dev, &TileLimits::default(), 8, 4096, 4096, 64, 64).unwrap();
        // 2 + 16 + 2·16 + 4 iterations per key.
        assert!(p.key_tile * 54 < 65535 && p.key_tile > 500);
        assert_eq!(p.batch_group, 1);
        let p = plan_feature(&dev, &TileLimits::default(), 1000, 1_000_000, 64, 64).unwrap();
        assert!(p.chunk * (1 + 64 + 16) + 64 * 18 < 65535);
        assert!(1_000_000usize.div_ceil(p.chunk) < 65535);
        assert!(p.chunk * (64 * 65usize).div_ceil(256) < 65535);
    }

    #[test]
    fn huge_dimension_is_a_clear_error() {
        let e = plan_attend(&LAVAPIPE, &TileLimits::default(), 1, 10, 10, 10_000, 1);
        assert!(matches!(e, Err(Error::Unsupported { .. })), "{e:?}");
    }

    #[test]
    fn feature_plan_keeps_whole_chunks_per_key_tile() {
        let caps = TileLimits {
            key_rows: Some(29),
            ..TileLimits::default()
        };
        let p = plan_feature(&LAVAPIPE, &caps, 100, 300, 3, 2).unwrap();
        assert_eq!(p.key_tile % p.chunk, 0);
        assert!(p.key_tile <= 29);
        // Chunk sums too many for one binding: fewer, longer chunks.
        let n = 10_000_000;
        let p = plan_feature(&LAVAPIPE, &TileLimits::default(), 1000, n, 64, 64).unwrap();
        assert_eq!(p.chunk, 2048);
        assert!((n.div_ceil(p.chunk) + 1) * 64 * 65 <= 32 << 20);
        // Bindings smaller than a chunk: chunks shrink to one binding.
        let small = TileLimits {
            buffer_bytes: Some(4 * 4 * 8 * 30),
            ..TileLimits::default()
        };
        let p = plan_feature(&LAVAPIPE, &small, 90, 300, 4, 7).unwrap();
        assert_eq!((p.chunk, p.key_tile), (137, 137));
    }

    #[test]
    fn power_of_two_scales_are_exact() {
        assert_eq!(power_of_two_scale(&[0.0, 3.0, 1.0]), 0.5);
        assert_eq!(power_of_two_scale(&[0.0]), 1.0);
        for x in [1e-30f32, 7.0, 3e20, 1.0, 1.99] {
            let y = x * power_of_two_scale(&[x]);
            assert!((1.0..2.0).contains(&y), "{x} → {y}");
        }
    }
}
