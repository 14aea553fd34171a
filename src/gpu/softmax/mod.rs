//! Kernel softmax on the GPU: attention (`attention.rs`), the softmax
//! weight matrix (`matrix.rs`) and the linear feature local mean
//! (`feature.rs`); here, what they share: the key tiles of one batch
//! group. Their tiling is planned in `plan/softmax.rs`.
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
mod prepared;

pub(crate) use feature::feature_local_mean;
pub(crate) use matrix::softmax_matrix;
pub(crate) use prepared::GpuAttention;

use crate::error::Result;
use crate::types::Heads;

use super::buffers::{Pooled, upload};
use super::context::GpuContext;
use super::keys::{KeyTile, Rows, StoredTile, upload_tiles};

/// Rows `first..last` of the stacked rows (`per` rows per batch) that hold
/// rows `r0..r1` of batches `b0..b1` (whole batches when `b1 > b0 + 1`).
fn stacked(b0: usize, b1: usize, r0: usize, r1: usize, per: usize) -> (usize, usize) {
    (b0 * per + r0, (b1 - 1) * per + r1)
}

/// Uploads with `alloc` the key tiles of `key_tile` keys of batches
/// `b0..b1` (batch-major within a tile: whole batches when `b1 > b0 + 1`)
/// and their value rows: a call's upload or a prepared set's.
fn upload_group<'p>(
    psi: &Heads<'_>,
    values: Option<&Heads<'_>>,
    (b0, b1): (usize, usize),
    key_tile: usize,
    alloc: &mut dyn FnMut(&[f32]) -> Result<Pooled<'p>>,
) -> Result<Vec<StoredTile<'p>>> {
    let per = psi.rows;
    let keys = |k0, k1| {
        let (a, b) = stacked(b0, b1, k0, k1, per);
        psi.data.row_range(a, b)
    };
    let vals = values.map(|v| {
        move |k0, k1| {
            let (a, b) = stacked(b0, b1, k0, k1, per);
            v.data.row_range(a, b)
        }
    });
    let sets: Vec<&Rows<'_>> = vals.iter().map(|v| v as &Rows<'_>).collect();
    upload_tiles(per, key_tile, &keys, &sets, alloc)
}

/// Uploads the key tiles (and their value rows) of batches `b0..b1` for
/// one call, from the pool.
fn upload_keys<'p>(
    ctx: &'p GpuContext,
    op: &'static str,
    psi: &Heads<'_>,
    values: Option<&Heads<'_>>,
    batches: (usize, usize),
    key_tile: usize,
) -> Result<Vec<KeyTile<'p>>> {
    let mut alloc = |data: &[f32]| upload(ctx, op, data, wgpu::BufferUsages::STORAGE);
    let stored = upload_group(psi, values, batches, key_tile, &mut alloc)?;
    Ok(stored.into_iter().map(StoredTile::into_tile).collect())
}
