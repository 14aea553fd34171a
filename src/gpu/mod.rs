//! The wgpu backend: WGSL shaders driven by the tiling plans of `plan/`.

pub(crate) mod adapter;
mod buffers;
pub(crate) mod context;
mod far;
mod kernel_matrix;
mod keys;
mod knn;
mod local_mean;
mod mean_shift;
mod pipelines;
pub(crate) mod plan;
mod pool;
mod prepared;
pub(crate) mod shaders;
mod softmax;
mod submission;
mod timing;

use std::sync::Arc;

use crate::backend::{Backend, BackendInfo, Call, GpuLimits, PreparedAttention, PreparedKeys};
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::matrix::Matrix;
use crate::memory::MemoryUsage;
use crate::types::{Attention, Heads, RowNormalized};
use crate::types::{Progress, ShiftOutcome, ShiftRun};

use buffers::Pooled;
use context::GpuContext;
use prepared::GpuKeys;
use shaders::ShaderId;
use softmax::GpuAttention;

/// The GPU backend: one device, shared by every call (and by the key sets
/// prepared on it).
#[derive(Debug)]
pub(crate) struct GpuBackend {
    ctx: Arc<GpuContext>,
}

impl GpuBackend {
    pub(crate) fn new(ctx: GpuContext) -> Self {
        GpuBackend { ctx: Arc::new(ctx) }
    }
}

impl Backend for GpuBackend {
    fn info(&self) -> &BackendInfo {
        &self.ctx.info
    }

    fn take_gpu_time(&self) -> Result<Option<std::time::Duration>> {
        self.ctx
            .timing
            .as_ref()
            .map(|t| t.take(&self.ctx.device))
            .transpose()
    }

    fn gpu_limits(&self) -> Option<&GpuLimits> {
        Some(&self.ctx.gpu_limits)
    }

    fn prepare(&self, keys: &Matrix<'_>, sets: &[Matrix<'_>]) -> Result<Arc<dyn PreparedKeys>> {
        Ok(Arc::new(GpuKeys::kept(&self.ctx, keys, sets)?))
    }

    fn prepare_call<'a>(
        &'a self,
        keys: &Matrix<'a>,
        sets: &[Matrix<'a>],
        call: &Call<'_>,
    ) -> Result<Box<dyn PreparedKeys + 'a>> {
        Ok(Box::new(GpuKeys::for_call(&self.ctx, keys, sets, call)?))
    }

    fn prepare_attention(
        &self,
        psi: &Heads<'_>,
        values: &Heads<'_>,
    ) -> Result<Arc<dyn PreparedAttention>> {
        Ok(Arc::new(GpuAttention::kept(&self.ctx, psi, values)?))
    }

    fn prepare_attention_call<'a>(
        &'a self,
        psi: &Heads<'a>,
        values: &Heads<'a>,
    ) -> Result<Box<dyn PreparedAttention + 'a>> {
        Ok(Box::new(GpuAttention::for_call(&self.ctx, psi, values)))
    }

    fn masked_local_mean(
        &self,
        kernel: &Kernel,
        queries: &Matrix<'_>,
        keys: &Matrix<'_>,
        values: &Matrix<'_>,
    ) -> Result<RowNormalized> {
        local_mean::masked_local_mean(&self.ctx, kernel, queries, keys, values)
    }

    fn softmax_matrix(
        &self,
        phi: &Heads<'_>,
        psi: &Heads<'_>,
        attn: &Attention,
    ) -> Result<Vec<f32>> {
        softmax::softmax_matrix(&self.ctx, phi, psi, attn)
    }

    fn feature_local_mean(
        &self,
        phi: &Heads<'_>,
        psi: &Heads<'_>,
        values: &Heads<'_>,
        causal: bool,
    ) -> Result<(Vec<f32>, usize)> {
        softmax::feature_local_mean(&self.ctx, phi, psi, values, causal)
    }

    fn mean_shift(
        &self,
        kernel: &Kernel,
        points: &Matrix<'_>,
        seeds: Vec<f32>,
        run: &ShiftRun,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<ShiftOutcome> {
        mean_shift::mean_shift(&self.ctx, kernel, points, seeds, run, progress)
    }

    fn memory(&self) -> MemoryUsage {
        self.ctx.pool.usage()
    }
}

/// Sizes as the shaders index them: every count must fit a `u32`.
pub(crate) fn check_u32(op: &'static str, what: &'static str, n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::TooLarge {
        op,
        what,
        bytes: (n as u64).saturating_mul(4),
    })
}

/// Uniform parameter records of one submission, one per dispatch, at the
/// device's dynamic-offset alignment. Once recorded, it must stay on loan
/// until its submission is done: hand it to the
/// [`Submission`](submission::Submission) with `keep`.
pub(crate) struct ParamBlock<'p> {
    buf: Pooled<'p>,
    stride: u64,
    size: u64,
}

impl<'p> ParamBlock<'p> {
    pub(crate) fn new<T: bytemuck::Pod>(
        ctx: &'p GpuContext,
        op: &'static str,
        records: &[T],
    ) -> Result<Self> {
        let size = std::mem::size_of::<T>() as u64;
        let stride = size.next_multiple_of(ctx.uniform_align);
        let mut bytes = vec![0u8; (stride * records.len().max(1) as u64) as usize];
        for (i, r) in records.iter().enumerate() {
            let o = i * stride as usize;
            bytes[o..o + size as usize].copy_from_slice(bytemuck::bytes_of(r));
        }
        let buf = buffers::upload(ctx, op, &bytes, wgpu::BufferUsages::UNIFORM)?;
        Ok(ParamBlock { buf, stride, size })
    }

    /// Binding resource (bound with a dynamic offset per dispatch).
    pub(crate) fn binding(&self) -> wgpu::BindingResource<'_> {
        self.buf.binding_sized(self.size)
    }

    /// Dynamic offset of record `i`.
    pub(crate) fn offset(&self, i: usize) -> u32 {
        (i as u64 * self.stride) as u32
    }
}

impl<'p> From<ParamBlock<'p>> for Pooled<'p> {
    fn from(p: ParamBlock<'p>) -> Pooled<'p> {
        p.buf
    }
}

/// The merge pipeline of a dispatch whose keys are split `splits` ways:
/// `key` with its shader's `merge_splits` entry (same template, same bind
/// groups); `None` without a split.
pub(crate) fn merge_pipeline(
    ctx: &GpuContext,
    op: &'static str,
    key: &pipelines::PipelineKey,
    splits: usize,
) -> Result<Option<Arc<wgpu::ComputePipeline>>> {
    let merge = match key.shader.merge() {
        Some(m) if splits > 1 => m,
        _ => return Ok(None),
    };
    let key = pipelines::PipelineKey {
        shader: merge,
        ..key.clone()
    };
    ctx.pipeline(op, &key).map(Some)
}

/// The buffer of a key split's partial row states, `floats` of them split
/// `splits` ways; without a split, a 16-byte stand-in for the binding.
pub(crate) fn partial_states<'p>(
    ctx: &'p GpuContext,
    op: &'static str,
    splits: usize,
    floats: usize,
) -> Result<Pooled<'p>> {
    let bytes = if splits > 1 { floats * 4 } else { 16 };
    ctx.buffer(op, bytes as u64, wgpu::BufferUsages::STORAGE)
}

/// Bind group for `shader` over `resources` in binding order.
pub(crate) fn bind_group(
    ctx: &GpuContext,
    shader: ShaderId,
    resources: &[wgpu::BindingResource<'_>],
) -> wgpu::BindGroup {
    let entries: Vec<_> = resources
        .iter()
        .enumerate()
        .map(|(i, r)| wgpu::BindGroupEntry {
            binding: i as u32,
            resource: r.clone(),
        })
        .collect();
    ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some(shader.file()),
        layout: ctx.pipelines.layout(shader),
        entries: &entries,
    })
}
