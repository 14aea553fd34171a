//! Output blocks of a matrix (the kernel matrix, the softmax weight
//! matrix): each written by one dispatch, recorded into a submission and
//! read back in batches, double-buffered ([`Blocks`]).

use crate::error::Result;

use super::buffers::Pooled;
use super::context::{ErrorScope, GpuContext};
use super::dispatch::{Program, Workgroups};
use super::keys::KeyTile;
use super::plan::tiles;
use super::submission::{PendingRead, Submission};

/// Where an output block of a matrix lands: rows `row..row + rows`,
/// columns `col..col + cols`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Place {
    pub row: usize,
    pub rows: usize,
    pub col: usize,
    pub cols: usize,
}

impl Place {
    /// The blocks of at most `block_rows` rows that cover rows
    /// `row..row + rows` of columns `col..col + cols`, top to bottom.
    fn blocks(self, block_rows: usize) -> impl Iterator<Item = Place> {
        tiles(self.rows, block_rows).map(move |(a, b)| Place {
            row: self.row + a,
            rows: b - a,
            ..self
        })
    }

    fn bytes(&self) -> u64 {
        (self.rows * self.cols * 4) as u64
    }
}

/// A query tile as the block shaders (`kernel_matrix.wgsl`,
/// `softmax_matrix.wgsl`) bind it: its queries and row states, around a
/// key tile's keys; its rows `row..row + rows` of the matrix.
pub(crate) struct BlockInputs<'a, 'p> {
    pub queries: &'a Pooled<'p>,
    pub state: &'a Pooled<'p>,
    pub row: usize,
    pub rows: usize,
    /// The shader's workgroup side: `side × side` entries a workgroup.
    pub side: usize,
}

/// An output block recorded into a submission but not yet read back.
struct Block<'p> {
    out: Pooled<'p>,
    place: Place,
}

/// A submitted batch whose readback is under way, and its blocks.
struct InFlight<'p> {
    read: PendingRead<'p>,
    blocks: Vec<Block<'p>>,
}

/// Output blocks recorded into one submission and read back together
/// once they reach `batch` bytes, into `out` (row stride `n`): the batched
/// readback of the kernel matrix and of the softmax weight matrix.
///
/// Double-buffered: a full batch is submitted with its copy into a staging
/// buffer, and the *previous* batch's results are copied from their mapped
/// staging buffer straight into `out` while the device runs the new one,
/// so the device does not wait for the host's copy (nor the host for the
/// device, beyond one batch). At most two batches are in flight.
pub(crate) struct Blocks<'p, 'o> {
    ctx: &'p GpuContext,
    scope: &'o ErrorScope,
    out: &'o mut [f32],
    n: usize,
    pending: Vec<Block<'p>>,
    bytes: u64,
    batch: u64,
    /// The previous batch: submitted, its readback under way.
    in_flight: Option<InFlight<'p>>,
}

impl<'p, 'o> Blocks<'p, 'o> {
    /// No block yet; read back every `batch` bytes into `out` (row stride
    /// `n`), under `scope`.
    pub(crate) fn new(
        ctx: &'p GpuContext,
        scope: &'o ErrorScope,
        batch: u64,
        out: &'o mut [f32],
        n: usize,
    ) -> Self {
        Blocks {
            ctx,
            scope,
            out,
            n,
            pending: Vec::new(),
            bytes: 0,
            batch,
            in_flight: None,
        }
    }

    /// Opens the output block at `place`, to be written by work recorded
    /// into `sub` next: when the pending blocks would pass the batch with
    /// it, first submits `sub` (leaving a fresh submission in its place)
    /// and completes the batch before it; then takes the block's buffer
    /// and records its sentinel fill. Returns the buffer to bind.
    fn open(&mut self, sub: &mut Submission<'p>, place: Place) -> Result<&Pooled<'p>> {
        let (ctx, op) = (self.ctx, self.scope.op);
        let bytes = place.bytes();
        if !self.pending.is_empty() && self.bytes + bytes > self.batch {
            let full = std::mem::replace(sub, Submission::new(ctx));
            self.flush(full)?;
        }
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC;
        let out = ctx.buffer(op, bytes, usage)?;
        sub.fill_sentinel(ctx, op, &out)?;
        self.bytes += bytes;
        self.pending.push(Block { out, place });
        Ok(&self.pending.last().expect("just pushed").out) // ok: pushed above
    }

    /// Records the blocks of `inputs`' rows × key tile `kt`, at most
    /// `block_rows` rows each, top to bottom: each [opened](Self::open),
    /// then written by one dispatch of `program` over its uniform record
    /// `record(place)` and the bindings queries, keys, row states, block.
    pub(crate) fn record<T: bytemuck::Pod>(
        &mut self,
        sub: &mut Submission<'p>,
        program: &Program,
        inputs: &BlockInputs<'_, '_>,
        kt: &KeyTile<'_>,
        block_rows: usize,
        record: impl Fn(Place) -> Result<T>,
    ) -> Result<()> {
        let tile = Place {
            row: inputs.row,
            rows: inputs.rows,
            col: kt.start,
            cols: kt.len,
        };
        for place in tile.blocks(block_rows) {
            let (ctx, op) = (self.ctx, self.scope.op);
            let block = self.open(sub, place)?;
            let workgroups = Workgroups {
                x: Workgroups::cover(op, place.cols, inputs.side)?,
                y: Workgroups::cover(op, place.rows, inputs.side)?,
                z: 1,
            };
            let bindings = [inputs.queries, &kt.keys, inputs.state, block];
            sub.dispatch(ctx, program, &record(place)?, &bindings, workgroups)?;
        }
        Ok(())
    }

    /// Submits `sub` and reads back every block still pending or in flight.
    pub(crate) fn finish(mut self, sub: Submission<'p>) -> Result<()> {
        self.flush(sub)?;
        match self.in_flight.take() {
            Some(last) => self.complete(last),
            None => Ok(()),
        }
    }

    /// Submits `sub` (the pending blocks and whatever else it recorded)
    /// with the pending blocks' readback, then completes the batch
    /// submitted before it, whose results land in `out` while the device
    /// runs this one.
    fn flush(&mut self, sub: Submission<'p>) -> Result<()> {
        let (ctx, scope) = (self.ctx, self.scope);
        let next = if self.pending.is_empty() {
            sub.submit_and_wait(ctx, scope)?;
            None
        } else {
            let sources: Vec<_> = self
                .pending
                .iter()
                .map(|b| (b.out.buffer(), b.out.len()))
                .collect();
            let read = sub.submit_with_readback(ctx, scope, &sources)?;
            Some(InFlight {
                read,
                blocks: std::mem::take(&mut self.pending),
            })
        };
        self.bytes = 0;
        match std::mem::replace(&mut self.in_flight, next) {
            Some(prev) => self.complete(prev),
            None => Ok(()),
        }
    }

    /// Waits for a submitted batch and copies its blocks from the mapped
    /// staging buffer into `out`.
    fn complete(&mut self, InFlight { read, blocks }: InFlight<'p>) -> Result<()> {
        let (out, n) = (&mut *self.out, self.n);
        read.wait(self.ctx, self.scope, |all| {
            let mut o = 0usize;
            for b in &blocks {
                let len = (b.out.len() / 4) as usize;
                let Place {
                    row,
                    rows,
                    col,
                    cols,
                } = b.place;
                for (r, src) in all[o..o + len].chunks_exact(cols).take(rows).enumerate() {
                    let at = (row + r) * n + col;
                    out[at..at + cols].copy_from_slice(src);
                }
                o += len;
            }
        })
    }
}
