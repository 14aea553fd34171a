//! The rayon CPU backend: every op, same numerics as the shaders.
//!
//! This file is the one-shot [`Backend`] impl (each call transposes its
//! keys into [`KeyColumns`] and runs the code a key set runs, `on_keys.rs`);
//! `resident.rs` is the [`Resident`] impl of key sets. The kernels:
//! `local_mean/` (fused local mean and row states; portable and AVX2),
//! `kernel_matrix.rs`, `knn.rs`, `mean_shift.rs`, `softmax/` (attention,
//! its matrix, the feature local mean), over the building blocks of
//! `simd.rs` (lane loops, the [`simd::Avx2Fma`] token) and `weights.rs`.
//!
//! Imports: `crate::{backend, error, grid, kernel, matrix, memory, types}`;
//! never `gpu/`, `engine`, `ops/`, `cluster/` or `keyset/`.

mod far;
pub(crate) mod kernel_matrix;
mod keys;
mod knn;
mod knn_blocked;
mod local_mean;
mod masked;
mod mean_shift;
mod moments;
mod on_keys;
mod panels;
mod resident;
pub(crate) mod simd;
mod softmax;
mod weights;

use std::sync::Arc;

use ndarray::Array2;

use crate::backend::{Backend, BackendInfo, MatrixMode};
use crate::backend::{PreparedAttention, Resident};
use crate::error::Result;
use crate::kernel::Kernel;
use crate::matrix::Matrix;
use crate::memory::{MemoryBudget, MemoryUsage};
use crate::types::{Attention, Heads, MomentLayout, Neighbours, RowNormalized, RowStates};
use crate::types::{Progress, ShiftOutcome, ShiftRun};

use keys::{KeyColumns, Pack};

/// The CPU backend: rayon's global thread pool, and the memory budget of
/// its key sets.
#[derive(Debug)]
pub(crate) struct CpuBackend {
    info: BackendInfo,
    budget: Arc<MemoryBudget>,
}

impl CpuBackend {
    pub(crate) fn new() -> Self {
        CpuBackend::with_memory_limit(None)
    }

    /// A backend whose key sets (resident data and request working memory)
    /// hold at most `limit` bytes.
    pub(crate) fn with_memory_limit(limit: Option<u64>) -> Self {
        CpuBackend {
            info: BackendInfo::Cpu {
                threads: rayon::current_num_threads(),
                simd: simd::simd_name(),
            },
            budget: Arc::new(MemoryBudget::new(limit)),
        }
    }
}

impl Backend for CpuBackend {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn local_mean(
        &self,
        kernel: &Kernel,
        queries: &Matrix<'_>,
        keys: &Matrix<'_>,
        values: &Matrix<'_>,
    ) -> Result<RowNormalized> {
        let pack = Pack::panels_if(panels::wanted_for(kernel, keys.cols(), queries.rows()));
        let cols = KeyColumns::new(keys, std::slice::from_ref(values), pack);
        on_keys::local_mean(&cols, kernel, queries, 0)
    }

    fn masked_local_mean(
        &self,
        kernel: &Kernel,
        queries: &Matrix<'_>,
        keys: &Matrix<'_>,
        values: &Matrix<'_>,
    ) -> Result<RowNormalized> {
        masked::masked_local_mean(kernel, queries, keys, values)
    }

    fn local_moments(
        &self,
        kernel: &Kernel,
        queries: &Matrix<'_>,
        keys: &Matrix<'_>,
        values: Option<&Matrix<'_>>,
        layout: MomentLayout,
    ) -> Result<RowNormalized> {
        // The key layout a key set keeps, and the same code.
        let sets = values.map(std::slice::from_ref).unwrap_or_default();
        let cols = KeyColumns::new(keys, sets, Pack::None);
        moments::local_moments(kernel, queries, &cols.soa(values.map(|_| 0)), layout)
    }

    fn row_states(
        &self,
        kernel: &Kernel,
        queries: &Matrix<'_>,
        keys: &Matrix<'_>,
        values: Option<&Matrix<'_>>,
        exclude_self: bool,
    ) -> Result<RowStates> {
        let sets = values.map(std::slice::from_ref).unwrap_or_default();
        let pack = Pack::panels_if(panels::wanted_for(kernel, keys.cols(), queries.rows()));
        let cols = KeyColumns::new(keys, sets, pack);
        let set = values.map(|_| 0);
        Ok(on_keys::row_states(
            &cols,
            kernel,
            queries,
            set,
            exclude_self,
        ))
    }

    fn knn(&self, queries: &Matrix<'_>, keys: &Matrix<'_>, k: usize) -> Result<Neighbours> {
        let pack = if knn::blocked(keys.cols(), queries.rows()) {
            Pack::PanelsAndRows
        } else {
            Pack::None
        };
        let cols = KeyColumns::new(keys, &[], pack);
        Ok(on_keys::knn(&cols, queries, k))
    }

    fn kernel_matrix(
        &self,
        kernel: &Kernel,
        queries: &Matrix<'_>,
        keys: &Matrix<'_>,
        mode: MatrixMode,
    ) -> Result<(Array2<f32>, usize)> {
        let pack = Pack::panels_if(panels::wanted_for(kernel, keys.cols(), queries.rows()));
        let cols = KeyColumns::new(keys, &[], pack);
        on_keys::kernel_matrix(&cols, kernel, queries, mode)
    }

    fn prepare(&self, keys: &Matrix<'_>, sets: &[Matrix<'_>]) -> Result<Arc<dyn Resident>> {
        Ok(Arc::new(resident::CpuResident::new(
            &self.budget,
            keys,
            sets,
        )?))
    }

    fn prepare_attention(
        &self,
        psi: &Heads<'_>,
        values: &Heads<'_>,
    ) -> Result<Arc<dyn PreparedAttention>> {
        Ok(Arc::new(softmax::CpuAttention::new(
            &self.budget,
            psi,
            values,
        )?))
    }

    fn memory(&self) -> MemoryUsage {
        let (in_use, limit) = self.budget.usage();
        MemoryUsage {
            in_use,
            idle: 0,
            limit,
        }
    }

    fn kernel_softmax(
        &self,
        phi: &Heads<'_>,
        psi: &Heads<'_>,
        values: &Heads<'_>,
        attn: &Attention,
    ) -> Result<Vec<f32>> {
        softmax::kernel_softmax(phi, psi, values, attn)
    }

    fn softmax_matrix(
        &self,
        phi: &Heads<'_>,
        psi: &Heads<'_>,
        attn: &Attention,
    ) -> Result<Vec<f32>> {
        softmax::softmax_matrix(phi, psi, attn)
    }

    fn feature_local_mean(
        &self,
        phi: &Heads<'_>,
        psi: &Heads<'_>,
        values: &Heads<'_>,
        causal: bool,
    ) -> Result<(Vec<f32>, usize)> {
        softmax::feature_local_mean(phi, psi, values, causal)
    }

    fn mean_shift(
        &self,
        kernel: &Kernel,
        points: &Matrix<'_>,
        seeds: Vec<f32>,
        run: &ShiftRun,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<ShiftOutcome> {
        Ok(mean_shift::mean_shift(
            kernel,
            points.as_slice(),
            points.cols(),
            seeds,
            run,
            progress,
        ))
    }
}
