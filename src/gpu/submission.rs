//! One submission of GPU work and the buffers it needs.
//!
//! A [`Submission`] wraps the timed [`Encoder`] and owns every pooled
//! buffer recorded into it that nothing else holds: uniform blocks
//! ([`ParamBlock`]), the parameters of sentinel fills, temporary inputs.
//! The pool matters here, not wgpu: wgpu keeps a buffer alive until the
//! submissions that use it complete, but a [`Pooled`] buffer dropped
//! goes back to the pool at once, where another call may take it and
//! `write_buffer` new contents into it. Such a write lands at the start of
//! the next queue submission, so a buffer returned *before* its own
//! submission would be read with someone else's data; returned *after* it,
//! the write is ordered after the work on the queue and is harmless.
//!
//! The submit methods consume the submission. Those that wait
//! ([`submit_and_wait`](Submission::submit_and_wait),
//! [`submit_and_read`](Submission::submit_and_read)) release the kept
//! buffers once the device has run the work;
//! [`submit_then`](Submission::submit_then), which does not wait, hands
//! them to the next submission, which releases them when it is done (work
//! on the one queue completes in order). A submission dropped unsubmitted
//! (an error on the way) discards its commands, so its buffers were never
//! used.

use std::ops::{Deref, DerefMut};

use crate::error::Result;

use super::buffers::Pooled;
use super::context::{ErrorScope, GpuContext};
use super::pipelines::PipelineKey;
use super::plan::FILL_WG;
use super::shaders::ShaderId;
use super::timing::{self, Encoder};
use super::{ParamBlock, bind_group, check_u32};

/// Recorded GPU work and the buffers it holds until it is done. Derefs to
/// the timed [`Encoder`] for recording passes and copies.
pub(crate) struct Submission<'p> {
    encoder: Encoder,
    kept: Vec<Pooled<'p>>,
}

impl<'p> Submission<'p> {
    /// An empty submission on `ctx`'s device.
    pub(crate) fn new(ctx: &GpuContext) -> Self {
        Submission {
            encoder: Encoder::new(ctx),
            kept: Vec::new(),
        }
    }

    /// Keeps a uniform block or buffer recorded into this submission on
    /// loan until the submission is done.
    pub(crate) fn keep(&mut self, resource: impl Into<Pooled<'p>>) {
        self.kept.push(resource.into());
    }

    /// Records a fill of `buf` with the engine's sentinel, if one is set
    /// (its parameters are kept).
    pub(crate) fn fill_sentinel(
        &mut self,
        ctx: &'p GpuContext,
        op: &'static str,
        buf: &Pooled<'_>,
    ) -> Result<()> {
        let Some(value) = ctx.sentinel else {
            return Ok(());
        };
        let len = check_u32(op, "sentinel fill", (buf.len() / 4) as usize)?;
        let params = ParamBlock::new(
            ctx,
            op,
            &[FillParams {
                len,
                value,
                _pad: [0; 2],
            }],
        )?;
        let pipeline = ctx.pipelines.get(
            ctx,
            op,
            &PipelineKey {
                shader: ShaderId::Fill,
                template: vec![],
                profile: None,
                product: None,
            },
        )?;
        let bg = bind_group(ctx, ShaderId::Fill, &[params.binding(), buf.binding()]);
        let mut pass = self.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bg, &[params.offset(0)]);
        pass.dispatch_workgroups(len.div_ceil(FILL_WG as u32).clamp(1, 4096), 1, 1);
        drop(pass);
        self.keep(params);
        Ok(())
    }

    /// Submits the work without waiting; the returned (empty) submission
    /// keeps this one's buffers until it is itself done.
    pub(crate) fn submit_then(self, ctx: &GpuContext) -> Submission<'p> {
        timing::submit(ctx, self.encoder);
        Submission {
            encoder: Encoder::new(ctx),
            kept: self.kept,
        }
    }

    /// Submits the work and waits until the device has run it, so that
    /// the buffers and bind groups it used can be released or reused: what
    /// keeps a long sequence of passes in bounded memory.
    pub(crate) fn submit_and_wait(self, ctx: &GpuContext, scope: &ErrorScope) -> Result<()> {
        let index = timing::submit(ctx, self.encoder);
        ctx.device
            .poll(wgpu::PollType::Wait {
                submission_index: Some(index),
                timeout: None,
            })
            .map_err(|e| scope.error(format!("waiting for the device: {e}")))?;
        drop(self.kept);
        Ok(())
    }

    /// Submits the work after copying `sources` (buffer, bytes) one after
    /// the other into one staging buffer, waits, and returns the bytes as
    /// `f32`s (one vector per source). Errors of the op are checked by the
    /// caller's [`ErrorScope`] before the data are used.
    pub(crate) fn submit_and_read(
        self,
        ctx: &GpuContext,
        scope: &ErrorScope,
        sources: &[(&wgpu::Buffer, u64)],
    ) -> Result<Vec<Vec<f32>>> {
        let Submission { mut encoder, kept } = self;
        let total: u64 = sources.iter().map(|s| s.1).sum();
        let staging = ctx.pool.get(
            ctx,
            scope.op,
            total,
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        )?;
        let mut off = 0;
        for &(src, len) in sources {
            encoder.copy_buffer_to_buffer(src, 0, staging.buffer(), off, len);
            off += len;
        }
        let index = timing::submit(ctx, encoder);
        let (tx, rx) = std::sync::mpsc::channel();
        staging
            .buffer()
            .slice(..total)
            .map_async(wgpu::MapMode::Read, move |r| {
                let _ = tx.send(r);
            });
        ctx.device
            .poll(wgpu::PollType::Wait {
                submission_index: Some(index),
                timeout: None,
            })
            .map_err(|e| scope.error(format!("waiting for the device: {e}")))?;
        match rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(scope.error(format!("mapping the results: {e}"))),
            Err(_) => return Err(scope.error("the device dropped the readback")),
        }
        let out = {
            let view = staging
                .buffer()
                .slice(..total)
                .get_mapped_range()
                .map_err(|e| scope.error(format!("reading the results: {e}")))?;
            let all: &[f32] = bytemuck::cast_slice(&view);
            let mut res = Vec::with_capacity(sources.len());
            let mut o = 0usize;
            for &(_, len) in sources {
                let n = (len / 4) as usize;
                res.push(all[o..o + n].to_vec());
                o += n;
            }
            res
        };
        staging.buffer().unmap();
        drop(kept);
        Ok(out)
    }
}

impl Deref for Submission<'_> {
    type Target = Encoder;

    fn deref(&self) -> &Encoder {
        &self.encoder
    }
}

impl DerefMut for Submission<'_> {
    fn deref_mut(&mut self) -> &mut Encoder {
        &mut self.encoder
    }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct FillParams {
    len: u32,
    value: f32,
    _pad: [u32; 2],
}

/// An output block of a matrix recorded into a submission but not yet
/// read back: rows `row..row + rows`, columns `col..col + cols`.
pub(crate) struct Block<'p> {
    pub out: Pooled<'p>,
    pub row: usize,
    pub rows: usize,
    pub col: usize,
    pub cols: usize,
}

/// Output blocks recorded into one submission and read back together
/// once they reach `batch` bytes, into `out` (row stride `n`): the batched
/// readback of the kernel matrix and of the softmax weight matrix.
pub(crate) struct Blocks<'p> {
    pending: Vec<Block<'p>>,
    bytes: u64,
    batch: u64,
}

impl<'p> Blocks<'p> {
    /// No block yet; read back every `batch` bytes.
    pub(crate) fn new(batch: u64) -> Self {
        Blocks {
            pending: Vec::new(),
            bytes: 0,
            batch,
        }
    }

    /// Before recording a block of `bytes`: when the pending blocks would
    /// pass the batch with it, submits `sub` (leaving a fresh submission in
    /// its place) and reads them back.
    pub(crate) fn make_room(
        &mut self,
        ctx: &GpuContext,
        scope: &ErrorScope,
        sub: &mut Submission<'_>,
        bytes: u64,
        out: &mut [f32],
        n: usize,
    ) -> Result<()> {
        if !self.pending.is_empty() && self.bytes + bytes > self.batch {
            let full = std::mem::replace(sub, Submission::new(ctx));
            flush(ctx, scope, full, &mut self.pending, out, n)?;
            self.bytes = 0;
        }
        Ok(())
    }

    /// A block recorded into the current submission.
    pub(crate) fn push(&mut self, b: Block<'p>) {
        self.bytes += (b.rows * b.cols * 4) as u64;
        self.pending.push(b);
    }

    /// Submits `sub` and reads back every pending block.
    pub(crate) fn finish(
        mut self,
        ctx: &GpuContext,
        scope: &ErrorScope,
        sub: Submission<'_>,
        out: &mut [f32],
        n: usize,
    ) -> Result<()> {
        flush(ctx, scope, sub, &mut self.pending, out, n)
    }
}

/// Submits `sub` (the pending blocks and whatever else it recorded) and
/// reads the blocks back into `out` (row stride `n`).
fn flush(
    ctx: &GpuContext,
    scope: &ErrorScope,
    sub: Submission<'_>,
    pending: &mut Vec<Block<'_>>,
    out: &mut [f32],
    n: usize,
) -> Result<()> {
    if pending.is_empty() {
        return sub.submit_and_wait(ctx, scope);
    }
    let sources: Vec<_> = pending
        .iter()
        .map(|b| (b.out.buffer(), b.out.len()))
        .collect();
    let read = sub.submit_and_read(ctx, scope, &sources)?;
    for (b, data) in pending.iter().zip(&read) {
        for (r, src) in data.chunks_exact(b.cols).take(b.rows).enumerate() {
            let o = (b.row + r) * n + b.col;
            out[o..o + b.cols].copy_from_slice(src);
        }
    }
    pending.clear();
    Ok(())
}
