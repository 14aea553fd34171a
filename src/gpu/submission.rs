//! One submission of GPU work and the buffers it needs.
//!
//! A [`Submission`] wraps the timed [`Encoder`] and owns every pooled
//! buffer recorded into it that nothing else holds: uniform records
//! (`dispatch.rs`'s `Bindings`), the parameters of sentinel fills, temporary inputs.
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
use crate::matrix::try_copy;

use super::buffers::Pooled;
use super::context::{ErrorScope, GpuContext};
use super::timing::{self, Encoder};

/// A new timed encoder on `ctx`'s device.
fn encoder(ctx: &GpuContext) -> Encoder {
    Encoder::new(&ctx.device, ctx.timing.as_ref())
}

/// Submits `encoder` on `ctx`'s queue, keeping its pass timestamps.
fn submit(ctx: &GpuContext, encoder: Encoder) -> wgpu::SubmissionIndex {
    timing::submit(&ctx.queue, ctx.timing.as_ref(), encoder)
}

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
            encoder: encoder(ctx),
            kept: Vec::new(),
        }
    }

    /// Keeps a uniform block or buffer recorded into this submission on
    /// loan until the submission is done.
    pub(crate) fn keep(&mut self, resource: impl Into<Pooled<'p>>) {
        self.kept.push(resource.into());
    }

    /// Submits the work without waiting; the returned (empty) submission
    /// keeps this one's buffers until it is itself done.
    pub(crate) fn submit_then(self, ctx: &GpuContext) -> Submission<'p> {
        submit(ctx, self.encoder);
        Submission {
            encoder: encoder(ctx),
            kept: self.kept,
        }
    }

    /// Submits the work and waits until the device has run it, so that
    /// the buffers and bind groups it used can be released or reused: what
    /// keeps a long sequence of passes in bounded memory.
    pub(crate) fn submit_and_wait(self, ctx: &GpuContext, scope: &ErrorScope) -> Result<()> {
        scope.check_cancelled()?;
        let index = submit(ctx, self.encoder);
        ctx.device
            .poll(wgpu::PollType::Wait {
                submission_index: Some(index),
                timeout: None,
            })
            .map_err(|e| scope.error(format!("waiting for the device: {e}")))?;
        drop(self.kept);
        scope.check_cancelled()
    }

    /// Submits the work after copying `sources` (buffer, bytes) one after
    /// the other into one staging buffer, waits, and returns the bytes as
    /// `f32`s (one vector per source). Errors of the op are checked by the
    /// caller's [`ErrorScope`] before the data are used.
    pub(crate) fn submit_and_read(
        self,
        ctx: &'p GpuContext,
        scope: &ErrorScope,
        sources: &[(&wgpu::Buffer, u64)],
    ) -> Result<Vec<Vec<f32>>> {
        let lens: Vec<usize> = sources.iter().map(|s| (s.1 / 4) as usize).collect();
        self.submit_with_readback(ctx, scope, sources)?
            .wait(ctx, scope, |all| {
                let mut o = 0usize;
                lens.iter()
                    .map(|&n| {
                        o += n;
                        try_copy(scope.op, "read back", &all[o - n..o])
                    })
                    .collect()
            })?
    }

    /// Submits the work after copying `sources` (buffer, bytes) one after
    /// the other into one staging buffer and requests its mapping, without
    /// waiting: the device runs the work while the caller records more.
    /// [`PendingRead::wait`] completes it.
    pub(crate) fn submit_with_readback(
        self,
        ctx: &'p GpuContext,
        scope: &ErrorScope,
        sources: &[(&wgpu::Buffer, u64)],
    ) -> Result<PendingRead<'p>> {
        scope.check_cancelled()?;
        let Submission { mut encoder, kept } = self;
        let total: u64 = sources.iter().map(|s| s.1).sum();
        let staging = ctx.buffer(
            scope.op,
            total,
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        )?;
        let mut off = 0;
        for &(src, len) in sources {
            encoder.copy_buffer_to_buffer(src, 0, staging.buffer(), off, len);
            off += len;
        }
        let index = submit(ctx, encoder);
        let (tx, rx) = std::sync::mpsc::channel();
        staging
            .buffer()
            .slice(..total)
            .map_async(wgpu::MapMode::Read, move |r| {
                let _ = tx.send(r);
            });
        Ok(PendingRead {
            staging: Some(staging),
            total,
            index,
            rx,
            kept,
        })
    }
}

/// Submitted work whose results are being copied into a staging buffer
/// ([`Submission::submit_with_readback`]); it holds the work's buffers
/// until [`wait`](Self::wait) (or its drop, after an error elsewhere: the
/// pool then hands the buffers out again only to later submissions, which
/// run after this one on the queue). A staging buffer not read to the end
/// (dropped, or an error while waiting) may still be mapped or have its
/// mapping pending: it is freed, not pooled.
pub(crate) struct PendingRead<'p> {
    staging: Option<Pooled<'p>>,
    total: u64,
    index: wgpu::SubmissionIndex,
    rx: std::sync::mpsc::Receiver<std::result::Result<(), wgpu::BufferAsyncError>>,
    kept: Vec<Pooled<'p>>,
}

impl Drop for PendingRead<'_> {
    fn drop(&mut self) {
        if let Some(staging) = self.staging.take() {
            staging.discard();
        }
    }
}

impl PendingRead<'_> {
    /// Waits for the work (only this submission: later ones keep running)
    /// and hands the mapped results, as `f32`s in the order of the sources,
    /// to `read`, whose value it returns.
    pub(crate) fn wait<T>(
        mut self,
        ctx: &GpuContext,
        scope: &ErrorScope,
        read: impl FnOnce(&[f32]) -> T,
    ) -> Result<T> {
        ctx.device
            .poll(wgpu::PollType::Wait {
                submission_index: Some(self.index.clone()),
                timeout: None,
            })
            .map_err(|e| scope.error(format!("waiting for the device: {e}")))?;
        // Not read when cancelled: dropped, the staging buffer is freed.
        scope.check_cancelled()?;
        match self.rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(scope.error(format!("mapping the results: {e}"))),
            Err(_) => return Err(scope.error("the device dropped the readback")),
        }
        let staging = self
            .staging
            .as_ref()
            .expect("present until read or dropped"); // ok: taken below only
        let out = {
            let view = staging
                .buffer()
                .slice(..self.total)
                .get_mapped_range()
                .map_err(|e| scope.error(format!("reading the results: {e}")))?;
            read(bytemuck::cast_slice(&view))
        };
        staging.buffer().unmap();
        // Read and unmapped: back to the pool, with the work's buffers.
        drop(self.staging.take());
        drop(std::mem::take(&mut self.kept));
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
