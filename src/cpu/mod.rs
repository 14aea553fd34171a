//! The rayon CPU backend: every op, same numerics as the shaders.
//!
//! This file is the [`Backend`] impl; `prepared.rs` holds keys prepared
//! for queries ([`PreparedKeys`]: transposed into `keys.rs`'s
//! `KeyColumns`), kept by a key set or built for one call, and runs every
//! op over keys on them; a key set's local means and row states under a
//! kernel of bounded reach go through its cell index (`cells.rs`). The
//! kernels:
//! `local_mean/` (fused local mean and row states; portable and AVX2),
//! `kernel_matrix.rs`, `knn.rs`, `loo_grad.rs` (the per-feature bandwidth
//! gradient's row sums), `mean_shift.rs`, `variable.rs` (variable
//! bandwidths), `softmax/` (attention,
//! its matrix, the feature local mean), over the building blocks of
//! `simd.rs` (lane loops, the [`simd::Avx2Fma`] token) and `weights.rs`.
//!
//! Imports: `crate::{backend, error, grid, kernel, matrix, memory, types}`;
//! never `gpu/`, `engine`, `ops/`, `cluster/` or `sets/`.

mod bf16;
mod cells;
pub(crate) mod kernel_matrix;
mod keys;
mod knn;
mod knn_blocked;
mod local_mean;
mod loo_grad;
mod masked;
mod mean_shift;
mod metric;
mod moments;
mod pack;
mod panels;
mod prepared;
pub(crate) mod simd;
mod softmax;
mod sq_dists;
mod threads;
mod topk;
mod variable;
mod weights;

use std::sync::Arc;

use crate::backend::{
    Backend, BackendInfo, Call, PreparedAttention, PreparedKeys, PreparedVariable,
};
use crate::error::Result;
use crate::kernel::{Kernel, Profile};
use crate::matrix::Matrix;
use crate::memory::{MemoryBudget, MemoryUsage};
use crate::types::{Attention, Heads, RowNormalized, VariableKeys};
use crate::types::{GradStates, Shift, ShiftOutcome};

use prepared::CpuKeys;
use softmax::CpuAttention;
pub(crate) use threads::Threads;

/// The CPU backend: its threads (rayon's global pool or the engine's
/// own), and the memory budget of its key sets.
#[derive(Debug)]
pub(crate) struct CpuBackend {
    info: BackendInfo,
    budget: Arc<MemoryBudget>,
    threads: Threads,
}

impl CpuBackend {
    /// On rayon's global pool, without a memory limit.
    pub(crate) fn new() -> Self {
        CpuBackend::with_memory_limit(None, std::time::Duration::ZERO, Threads::default())
    }

    /// A backend whose work runs on `threads` and whose key sets (resident
    /// data and request working memory) hold at most `limit` bytes; a
    /// request that would fit once others end waits for them up to `wait`.
    pub(crate) fn with_memory_limit(
        limit: Option<u64>,
        wait: std::time::Duration,
        threads: Threads,
    ) -> Self {
        let budget = MemoryBudget::new(limit);
        budget.set_wait(wait);
        CpuBackend {
            info: BackendInfo::Cpu {
                threads: threads.count(),
                simd: simd::simd_name(),
            },
            budget: Arc::new(budget),
            threads,
        }
    }
}

impl Backend for CpuBackend {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn prepare(&self, keys: &Matrix<'_>, sets: &[Matrix<'_>]) -> Result<Arc<dyn PreparedKeys>> {
        Ok(Arc::new(CpuKeys::kept(
            &self.budget,
            &self.threads,
            keys,
            sets,
        )?))
    }

    fn prepare_call<'a>(
        &'a self,
        keys: &'a Matrix<'a>,
        sets: &[Matrix<'a>],
        call: &Call<'_>,
    ) -> Result<Box<dyn PreparedKeys + 'a>> {
        let threads = &self.threads;
        Ok(Box::new(CpuKeys::for_call(
            &self.budget,
            threads,
            keys,
            sets,
            call,
        )?))
    }

    fn prepare_attention(
        &self,
        psi: &Heads<'_>,
        values: &Heads<'_>,
    ) -> Result<Arc<dyn PreparedAttention>> {
        Ok(Arc::new(CpuAttention::kept(
            &self.budget,
            &self.threads,
            psi,
            values,
        )?))
    }

    fn prepare_attention_call<'a>(
        &'a self,
        psi: &Heads<'a>,
        values: &Heads<'a>,
    ) -> Result<Box<dyn PreparedAttention + 'a>> {
        Ok(Box::new(CpuAttention::for_call(&self.threads, psi, values)))
    }

    fn masked_local_mean(
        &self,
        kernel: &Kernel,
        queries: &Matrix<'_>,
        keys: &Matrix<'_>,
        values: &Matrix<'_>,
    ) -> Result<RowNormalized> {
        kernel.require_euclidean("masked_local_mean")?;
        self.threads
            .install(|| masked::masked_local_mean(kernel, queries, keys, values))
    }

    fn memory(&self) -> MemoryUsage {
        let (in_use, limit) = self.budget.usage();
        MemoryUsage {
            in_use,
            idle: 0,
            limit,
        }
    }

    fn softmax_matrix(
        &self,
        phi: &Heads<'_>,
        psi: &Heads<'_>,
        attn: &Attention,
    ) -> Result<Vec<f32>> {
        self.threads
            .install(|| softmax::softmax_matrix(phi, psi, attn))
    }

    fn feature_local_mean(
        &self,
        phi: &Heads<'_>,
        psi: &Heads<'_>,
        values: &Heads<'_>,
        causal: bool,
    ) -> Result<(Vec<f32>, usize)> {
        self.threads
            .install(|| softmax::feature_local_mean(phi, psi, values, causal))
    }

    fn loo_grad_states(
        &self,
        profile: Profile,
        points: &Matrix<'_>,
        values: &Matrix<'_>,
    ) -> Result<GradStates> {
        self.threads
            .install(|| loo_grad::loo_grad_states(profile, points, values))
    }

    fn mean_shift(&self, shift: Shift<'_>) -> Result<ShiftOutcome> {
        shift.kernel.require_euclidean("mean_shift")?;
        mean_shift::mean_shift(shift, &self.threads)
    }

    fn prepare_variable(&self, keys: VariableKeys<'_>) -> Result<Arc<dyn PreparedVariable>> {
        Ok(Arc::new(variable::CpuVariable::kept(
            &self.budget,
            &self.threads,
            keys,
        )?))
    }

    fn prepare_variable_call<'a>(
        &'a self,
        op: &'static str,
        keys: VariableKeys<'a>,
    ) -> Result<Box<dyn PreparedVariable + 'a>> {
        let _ = op;
        Ok(Box::new(variable::CpuVariable::for_call(
            &self.threads,
            keys,
        )))
    }
}

/// Test inputs of the CPU kernels: `len` values in `[-1, 1)` from a small
/// deterministic generator (xorshift), a different stream per `seed`.
#[cfg(test)]
pub(crate) fn test_data(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}
