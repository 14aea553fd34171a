//! Kernel-only GPU time: every compute pass of an [`Encoder`] writes a
//! timestamp at its start and end (when the engine was built with
//! `gpu_timing` and the adapter has `TIMESTAMP_QUERY`); [`submit`] resolves
//! them into a readback buffer with the submission, and
//! [`Timing::take`] adds up the pass durations once the work is done.
//!
//! Without timing an [`Encoder`] is a plain `wgpu::CommandEncoder`: the op
//! code is the same either way. [`Timing`] is a part of the context; what
//! it and the encoder need (the device, the queue) is passed in.

use std::ops::{Deref, DerefMut};
use std::sync::Mutex;
use std::time::Duration;

use crate::error::{Error, Result};

/// Passes timed per query set (two timestamps each). A resolve must start
/// at a multiple of 256 bytes: 256 pairs of 8-byte stamps keep every
/// set's block aligned.
const PAIRS_PER_SET: u32 = 256;
/// Bytes of one query set's resolved stamps.
const SET_BYTES: u64 = PAIRS_PER_SET as u64 * 16;

/// The timestamps of submissions not yet read, and the timestamp period.
#[derive(Debug)]
pub(crate) struct Timing {
    /// Nanoseconds per timestamp tick.
    period_ns: f64,
    /// Readback buffers of submitted work, with the pairs used per set.
    pending: Mutex<Vec<(wgpu::Buffer, Vec<u32>)>>,
}

impl Timing {
    pub(crate) fn new(period_ns: f32) -> Timing {
        Timing {
            period_ns: f64::from(period_ns),
            pending: Mutex::new(Vec::new()),
        }
    }

    /// Waits (on `device`) for every submission timed so far and returns
    /// the sum of its compute passes' durations, forgetting them.
    pub(crate) fn take(&self, device: &wgpu::Device) -> Result<Duration> {
        let pending = std::mem::take(&mut *self.pending.lock().map_err(|_| poisoned())?);
        let mut ticks: u128 = 0;
        for (buffer, used) in pending {
            let (tx, rx) = std::sync::mpsc::channel();
            buffer.slice(..).map_async(wgpu::MapMode::Read, move |r| {
                let _ = tx.send(r);
            });
            device
                .poll(wgpu::PollType::wait_indefinitely())
                .map_err(|e| timing_error(format!("waiting for the device: {e}")))?;
            match rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(timing_error(format!("mapping the timestamps: {e}"))),
                Err(_) => return Err(timing_error("the device dropped the timestamp readback")),
            }
            {
                let view = buffer
                    .slice(..)
                    .get_mapped_range()
                    .map_err(|e| timing_error(format!("reading the timestamps: {e}")))?;
                let stamps: &[u64] = bytemuck::cast_slice(&view);
                for (set, &n) in used.iter().enumerate() {
                    let base = set * 2 * PAIRS_PER_SET as usize;
                    for p in 0..n as usize {
                        let (a, b) = (stamps[base + 2 * p], stamps[base + 2 * p + 1]);
                        // A pass whose end precedes its start (a counter
                        // reset) is not counted rather than counted wrong.
                        ticks += u128::from(b.saturating_sub(a));
                    }
                }
            }
            buffer.unmap();
        }
        let ns = ticks as f64 * self.period_ns;
        Ok(Duration::from_nanos(ns.round() as u64))
    }
}

fn poisoned() -> Error {
    timing_error("a thread panicked while holding the timestamp list")
}

fn timing_error(message: impl Into<String>) -> Error {
    Error::Gpu {
        op: "gpu timing",
        sizes: String::new(),
        message: message.into(),
    }
}

/// A command encoder whose compute passes write timestamps when the
/// context times them. Derefs to the `wgpu::CommandEncoder` for
/// everything else (copies, clears).
pub(crate) struct Encoder {
    inner: wgpu::CommandEncoder,
    /// The device, when passes are timed.
    device: Option<wgpu::Device>,
    /// Query sets in use, [`PAIRS_PER_SET`] passes each.
    sets: Vec<wgpu::QuerySet>,
    /// Passes timed so far.
    passes: u32,
}

impl Encoder {
    /// A new encoder on `device`, timing its passes when there is a
    /// `timing`.
    pub(crate) fn new(device: &wgpu::Device, timing: Option<&Timing>) -> Encoder {
        Encoder {
            inner: device.create_command_encoder(&Default::default()),
            device: timing.map(|_| device.clone()),
            sets: Vec::new(),
            passes: 0,
        }
    }

    /// Begins a compute pass, timed when the context times passes (the
    /// descriptor's own timestamp writes are then replaced).
    pub(crate) fn begin_compute_pass(
        &mut self,
        desc: &wgpu::ComputePassDescriptor<'_>,
    ) -> wgpu::ComputePass<'_> {
        let Some(device) = &self.device else {
            return self.inner.begin_compute_pass(desc);
        };
        let (set, pair) = (self.passes / PAIRS_PER_SET, self.passes % PAIRS_PER_SET);
        if set as usize == self.sets.len() {
            self.sets
                .push(device.create_query_set(&wgpu::QuerySetDescriptor {
                    label: Some("locus pass timestamps"),
                    ty: wgpu::QueryType::Timestamp,
                    count: 2 * PAIRS_PER_SET,
                }));
        }
        self.passes += 1;
        self.inner.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: desc.label,
            timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                query_set: &self.sets[set as usize],
                beginning_of_pass_write_index: Some(2 * pair),
                end_of_pass_write_index: Some(2 * pair + 1),
            }),
        })
    }

    /// Records the resolve of this encoder's timestamps into a readback
    /// buffer; returns it with the passes per set.
    fn resolve(&mut self) -> Option<(wgpu::Buffer, Vec<u32>)> {
        let device = self.device.as_ref()?;
        if self.passes == 0 {
            return None;
        }
        let bytes = self.sets.len() as u64 * SET_BYTES;
        let resolved = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("locus timestamps"),
            size: bytes,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let read = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("locus timestamps readback"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut used = Vec::with_capacity(self.sets.len());
        for (i, set) in self.sets.iter().enumerate() {
            let n = (self.passes - i as u32 * PAIRS_PER_SET).min(PAIRS_PER_SET);
            self.inner
                .resolve_query_set(set, 0..2 * n, &resolved, i as u64 * SET_BYTES);
            used.push(n);
        }
        self.inner
            .copy_buffer_to_buffer(&resolved, 0, &read, 0, bytes);
        Some((read, used))
    }
}

impl Deref for Encoder {
    type Target = wgpu::CommandEncoder;

    fn deref(&self) -> &wgpu::CommandEncoder {
        &self.inner
    }
}

impl DerefMut for Encoder {
    fn deref_mut(&mut self) -> &mut wgpu::CommandEncoder {
        &mut self.inner
    }
}

/// Finishes and submits `encoder` on `queue`; its pass timestamps, if
/// any, are kept in `timing` for [`Timing::take`].
pub(crate) fn submit(
    queue: &wgpu::Queue,
    timing: Option<&Timing>,
    mut encoder: Encoder,
) -> wgpu::SubmissionIndex {
    let stamps = encoder.resolve();
    let index = queue.submit([encoder.inner.finish()]);
    if let (Some(timing), Some(s)) = (timing, stamps)
        && let Ok(mut pending) = timing.pending.lock()
    {
        pending.push(s);
    }
    index
}
