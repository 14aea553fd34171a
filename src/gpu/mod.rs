//! The wgpu backend: WGSL shaders driven by the tiling plans of `plan/`.

pub(crate) mod adapter;
mod blocks;
mod buffers;
mod cells;
pub(crate) mod context;
mod dispatch;
mod far;
mod kernel_matrix;
mod keys;
mod knn;
mod local_mean;
mod loo_grad;
mod mean_shift;
pub(crate) mod pipeline_cache;
mod pipelines;
pub(crate) mod plan;
mod pool;
mod prepared;
pub(crate) mod shaders;
mod softmax;
mod submission;
mod timing;
mod variable;

use std::sync::Arc;

use crate::backend::{
    Backend, BackendInfo, Call, GpuLimits, PipelineCacheStatus, PreparedAttention, PreparedKeys,
    PreparedVariable,
};
use crate::error::Result;
use crate::kernel::{Kernel, Profile};
use crate::matrix::Matrix;
use crate::memory::MemoryUsage;
use crate::types::{Attention, Heads, RowNormalized, VariableKeys};
use crate::types::{GradStates, Shift, ShiftOutcome};

use context::GpuContext;
use prepared::GpuKeys;
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

    fn pipeline_cache(&self) -> Option<&PipelineCacheStatus> {
        Some(&self.ctx.pipeline_cache)
    }

    fn prepare(&self, keys: &Matrix<'_>, sets: &[Matrix<'_>]) -> Result<Arc<dyn PreparedKeys>> {
        Ok(Arc::new(GpuKeys::kept(&self.ctx, keys, sets)?))
    }

    fn prepare_call<'a>(
        &'a self,
        keys: &'a Matrix<'a>,
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
        kernel.require_euclidean("masked_local_mean")?;
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

    fn loo_grad_states(
        &self,
        profile: Profile,
        points: &Matrix<'_>,
        values: &Matrix<'_>,
    ) -> Result<GradStates> {
        loo_grad::loo_grad_states(&self.ctx, profile, points, values)
    }

    fn mean_shift(&self, shift: Shift<'_>) -> Result<ShiftOutcome> {
        shift.kernel.require_euclidean("mean_shift")?;
        mean_shift::mean_shift(&self.ctx, shift)
    }

    fn prepare_variable(&self, keys: VariableKeys<'_>) -> Result<Arc<dyn PreparedVariable>> {
        Ok(Arc::new(variable::GpuVariable::kept(&self.ctx, keys)?))
    }

    fn prepare_variable_call<'a>(
        &'a self,
        op: &'static str,
        keys: VariableKeys<'a>,
    ) -> Result<Box<dyn PreparedVariable + 'a>> {
        Ok(Box::new(variable::GpuVariable::for_call(
            &self.ctx, op, keys,
        )?))
    }

    fn memory(&self) -> MemoryUsage {
        self.ctx.pool.usage()
    }
}
