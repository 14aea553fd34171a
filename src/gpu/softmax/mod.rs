//! Kernel softmax on the GPU: attention (`attention.rs`), the softmax
//! weight matrix (`matrix.rs`) and the linear feature local mean
//! (`feature.rs`); here, what they share: the upload of one batch
//! group's key tiles. Their tiling is planned in `plan/softmax.rs`.
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

use crate::error::Result;
use crate::gpu::plan::tiles;
use crate::types::Heads;

use super::buffers::{Pooled, upload};
use super::context::GpuContext;

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
