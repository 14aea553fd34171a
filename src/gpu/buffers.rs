//! Buffers as the ops use them: loans from the context's pool
//! ([`Pooled`], `pool.rs`) and uploads into them.

use crate::error::Result;

use super::context::GpuContext;
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
