//! Buffers as the ops use them: loans from the context's pool
//! ([`Pooled`], `pool.rs`) and uploads into them, and the buffers a
//! prepared set owns outside the pool.

use crate::error::Result;

use super::context::{ErrorScope, GpuContext};
pub(crate) use super::pool::Pooled;

/// Uploads `data` into a pooled storage buffer (a 4-byte dummy when empty).
pub(crate) fn upload<'p, T: bytemuck::Pod>(
    ctx: &'p GpuContext,
    op: &'static str,
    data: &[T],
    usage: wgpu::BufferUsages,
) -> Result<Pooled<'p>> {
    let bytes: &[u8] = bytemuck::cast_slice(data);
    let buf = ctx.buffer(op, bytes.len() as u64, usage | wgpu::BufferUsages::COPY_DST)?;
    if !bytes.is_empty() {
        ctx.queue.write_buffer(buf.buffer(), 0, bytes);
    }
    Ok(buf)
}

/// Bytes of a buffer holding `floats` values (at least 4, as the pool rounds).
pub(crate) fn buffer_bytes(floats: usize) -> u64 {
    (floats as u64).saturating_mul(4).max(4)
}

/// `data` in a device buffer of its own, outside the pool (the caller
/// charges its bytes to the budget). COPY_SRC: far rows read a key set's
/// keys back (far.rs).
pub(crate) fn owned_upload(ctx: &GpuContext, data: &[f32]) -> Result<Pooled<'static>> {
    let buffer = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("key set"),
        size: buffer_bytes(data.len()),
        usage: wgpu::BufferUsages::STORAGE
            | wgpu::BufferUsages::COPY_DST
            | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    ctx.queue
        .write_buffer(&buffer, 0, bytemuck::cast_slice(data));
    Ok(Pooled::owned(buffer, buffer_bytes(data.len())))
}

/// Waits until the uploads queued so far are on the device, so that their
/// failures surface in `scope`.
pub(crate) fn wait_for_uploads(ctx: &GpuContext, scope: &ErrorScope) -> Result<()> {
    let index = ctx.queue.submit([]);
    ctx.device
        .poll(wgpu::PollType::Wait {
            submission_index: Some(index),
            timeout: None,
        })
        .map(|_| ())
        .map_err(|e| scope.error(format!("waiting for the upload: {e}")))
}
