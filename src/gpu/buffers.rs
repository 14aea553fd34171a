//! Buffer pool, uploads and readback.

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::sync::Mutex;

use crate::error::{Error, Result};

use super::context::{ErrorScope, GpuContext};

/// Buffers up to this size are pooled by power-of-two classes; larger ones
/// by multiples of [`BIG_STEP`].
const SMALL_MAX: u64 = 64 << 20;
const BIG_STEP: u64 = 16 << 20;

/// Reuses device buffers by (size class, usage). Idle buffers are kept up
/// to a byte cap; beyond it they are freed on return.
pub(crate) struct BufferPool {
    free: Mutex<HashMap<(u64, u32), Vec<wgpu::Buffer>>>,
    idle_bytes: Mutex<u64>,
    cap: u64,
    max_buffer: u64,
}

impl BufferPool {
    pub(crate) fn new(cap: u64, max_buffer: u64) -> Self {
        BufferPool {
            free: Mutex::new(HashMap::new()),
            idle_bytes: Mutex::new(0),
            cap,
            max_buffer,
        }
    }

    fn class(&self, size: u64) -> u64 {
        let c = if size <= SMALL_MAX {
            size.max(256).next_power_of_two()
        } else {
            size.div_ceil(BIG_STEP) * BIG_STEP
        };
        c.min(self.max_buffer).max(size)
    }

    /// A buffer of at least `size` bytes with `usage`, from the pool when
    /// one is idle.
    pub(crate) fn get<'p>(
        &'p self,
        ctx: &GpuContext,
        op: &'static str,
        size: u64,
        usage: wgpu::BufferUsages,
    ) -> Result<Pooled<'p>> {
        let size = size.max(4).next_multiple_of(4);
        if size > self.max_buffer {
            return Err(Error::TooLarge {
                op,
                what: "one GPU buffer",
                bytes: size,
            });
        }
        let class = self.class(size);
        let key = (class, usage.bits());
        let reused = self
            .free
            .lock()
            .ok()
            .and_then(|mut f| f.get_mut(&key).and_then(Vec::pop));
        let buffer = match reused {
            Some(b) => {
                if let Ok(mut idle) = self.idle_bytes.lock() {
                    *idle -= class;
                }
                b
            }
            None => ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(op),
                size: class,
                usage,
                mapped_at_creation: false,
            }),
        };
        Ok(Pooled {
            buffer: Some(buffer),
            pool: self,
            key,
            len: size,
        })
    }

    fn put(&self, key: (u64, u32), buffer: wgpu::Buffer) {
        let Ok(mut idle) = self.idle_bytes.lock() else {
            return;
        };
        if *idle + key.0 > self.cap {
            return; // dropped: freed by wgpu
        }
        if let Ok(mut f) = self.free.lock() {
            *idle += key.0;
            f.entry(key).or_default().push(buffer);
        }
    }
}

/// A buffer on loan from the pool; returned when dropped.
pub(crate) struct Pooled<'p> {
    buffer: Option<wgpu::Buffer>,
    pool: &'p BufferPool,
    key: (u64, u32),
    len: u64,
}

impl Pooled<'_> {
    pub(crate) fn buffer(&self) -> &wgpu::Buffer {
        self.buffer.as_ref().expect("present until drop") // ok: taken only in Drop
    }

    /// Bytes in use (what was asked for, rounded up to 4).
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Binding of exactly the bytes in use (the pooled buffer may be larger
    /// than the binding limit allows).
    pub(crate) fn binding(&self) -> wgpu::BindingResource<'_> {
        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: self.buffer(),
            offset: 0,
            size: NonZeroU64::new(self.len),
        })
    }

    /// Binding of `size` bytes at `offset` (for dynamic uniform offsets).
    pub(crate) fn binding_sized(&self, size: u64) -> wgpu::BindingResource<'_> {
        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: self.buffer(),
            offset: 0,
            size: NonZeroU64::new(size),
        })
    }
}

impl Drop for Pooled<'_> {
    fn drop(&mut self) {
        if let Some(b) = self.buffer.take() {
            self.pool.put(self.key, b);
        }
    }
}

/// Uploads `data` into a pooled storage buffer (a 4-byte dummy when empty).
pub(crate) fn upload<'p, T: bytemuck::Pod>(
    ctx: &'p GpuContext,
    op: &'static str,
    data: &[T],
    usage: wgpu::BufferUsages,
) -> Result<Pooled<'p>> {
    let bytes: &[u8] = bytemuck::cast_slice(data);
    let buf = ctx.pool.get(
        ctx,
        op,
        bytes.len() as u64,
        usage | wgpu::BufferUsages::COPY_DST,
    )?;
    if !bytes.is_empty() {
        ctx.queue.write_buffer(buf.buffer(), 0, bytes);
    }
    Ok(buf)
}

/// Submits `encoder` after copying `sources` (buffer, bytes) one after the
/// other into one staging buffer, waits, and returns the bytes as `f32`s
/// (one vector per source). Errors of the op are checked by the caller's
/// [`ErrorScope`] before the data are used.
pub(crate) fn submit_and_read(
    ctx: &GpuContext,
    scope: &ErrorScope,
    mut encoder: wgpu::CommandEncoder,
    sources: &[(&wgpu::Buffer, u64)],
) -> Result<Vec<Vec<f32>>> {
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
    let index = ctx.queue.submit([encoder.finish()]);
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
    Ok(out)
}
