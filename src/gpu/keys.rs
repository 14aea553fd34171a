//! Key tiles on the device: the one upload of keys and value rows, cut by
//! a plan's key tile, that every op uses (one-shot calls, resident key
//! sets, MeanShift, kernel softmax), and the tiles as an op binds them.

use crate::error::Result;
use crate::gpu::plan::tiles;
use crate::matrix::Matrix;

use super::buffers::{Pooled, upload};
use super::context::{ErrorScope, GpuContext};

/// Rows `a..b` of a host matrix, row-major.
pub(crate) type Rows<'d> = dyn Fn(usize, usize) -> &'d [f32] + 'd;

/// A key tile as stored: rows `start..start + len` of the keys and the same
/// rows of each value matrix uploaded with them.
pub(crate) struct StoredTile<'p> {
    pub start: usize,
    pub len: usize,
    pub keys: Pooled<'p>,
    pub sets: Vec<Pooled<'p>>,
}

/// A key tile as an op binds it: keys and one value matrix, one binding
/// each.
pub(crate) struct KeyTile<'p> {
    pub start: usize,
    pub len: usize,
    pub keys: Pooled<'p>,
    /// The value rows; the keys stand in when the op has no values (the
    /// shaders read none then).
    pub values: Pooled<'p>,
}

/// Key tiles on the device (uploaded for one call, or resident) and the
/// shapes the shaders need.
pub(crate) struct DeviceKeys<'a, 'p> {
    pub tiles: &'a [KeyTile<'p>],
    pub d: usize,
    /// Value columns of the tiles' values buffers (0: row sums only).
    pub q: usize,
}

/// A call against key tiles on the device: its context, the error scope
/// it runs under (which its caller finishes), its queries and the keys.
pub(crate) struct OnTiles<'a, 'p> {
    pub ctx: &'p GpuContext,
    pub scope: &'a ErrorScope,
    pub queries: &'a Matrix<'a>,
    pub keys: DeviceKeys<'a, 'p>,
}

/// Uploads rows `0..n` of the keys and of every value matrix in `sets`,
/// cut into tiles of `key_tile` rows; `alloc` puts each tile's rows on the
/// device.
pub(crate) fn upload_tiles<'p, 'd>(
    n: usize,
    key_tile: usize,
    keys: &Rows<'d>,
    sets: &[&Rows<'d>],
    alloc: &mut dyn FnMut(&[f32]) -> Result<Pooled<'p>>,
) -> Result<Vec<StoredTile<'p>>> {
    tiles(n, key_tile)
        .map(|(a, b)| {
            Ok(StoredTile {
                start: a,
                len: b - a,
                keys: alloc(keys(a, b))?,
                sets: sets.iter().map(|v| alloc(v(a, b))).collect::<Result<_>>()?,
            })
        })
        .collect()
}

impl<'p> StoredTile<'p> {
    /// A loan of the tile with value matrix `set` as its values (the keys
    /// when `None`); the stored buffers stay with their owner.
    pub(crate) fn view(&self, set: Option<usize>) -> KeyTile<'static> {
        let values = set.map_or(&self.keys, |s| &self.sets[s]);
        KeyTile {
            start: self.start,
            len: self.len,
            keys: Pooled::shared(self.keys.buffer(), self.keys.len()),
            values: Pooled::shared(values.buffer(), values.len()),
        }
    }

    /// The tile of a call with at most one value matrix, owning its
    /// buffers.
    pub(crate) fn into_tile(mut self) -> KeyTile<'p> {
        debug_assert!(self.sets.len() <= 1);
        let values = match self.sets.pop() {
            Some(v) => v,
            None => Pooled::shared(self.keys.buffer(), self.keys.len()),
        };
        KeyTile {
            start: self.start,
            len: self.len,
            keys: self.keys,
            values,
        }
    }
}

/// Uploads the key tiles of one call from the pool, with `usage` on every
/// buffer (besides the copy destination of an upload).
pub(crate) fn upload_call_tiles<'p, 'd>(
    ctx: &'p GpuContext,
    op: &'static str,
    n: usize,
    key_tile: usize,
    keys: &Rows<'d>,
    values: Option<&Rows<'d>>,
    usage: wgpu::BufferUsages,
) -> Result<Vec<KeyTile<'p>>> {
    let sets: Vec<&Rows<'d>> = values.into_iter().collect();
    let mut alloc = |data: &[f32]| upload(ctx, op, data, usage);
    Ok(upload_tiles(n, key_tile, keys, &sets, &mut alloc)?
        .into_iter()
        .map(StoredTile::into_tile)
        .collect())
}

/// Uploads the key tiles of a one-shot call over host matrices.
pub(crate) fn upload_key_tiles<'p>(
    ctx: &'p GpuContext,
    op: &'static str,
    keys: &Matrix<'_>,
    values: Option<&Matrix<'_>>,
    key_tile: usize,
) -> Result<Vec<KeyTile<'p>>> {
    let k = |a, b| keys.row_range(a, b);
    let v = values.map(|v| move |a, b| v.row_range(a, b));
    upload_call_tiles(
        ctx,
        op,
        keys.rows(),
        key_tile,
        &k,
        v.as_ref().map(|v| v as &Rows<'_>),
        wgpu::BufferUsages::STORAGE,
    )
}
