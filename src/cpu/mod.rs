//! The rayon CPU backend: every op, same numerics as the shaders.

#[cfg(target_arch = "x86_64")]
mod avx2;
mod far;
pub(crate) mod kernel_matrix;
mod knn;
mod local_mean;
mod mean_shift;
mod resident;
pub(crate) mod simd;
mod softmax;
mod weights;

use std::sync::Arc;

use ndarray::Array2;

use crate::backend::Resident;
use crate::backend::{Backend, BackendInfo, MatrixMode};
use crate::error::Result;
use crate::kernel::Kernel;
use crate::matrix::{Matrix, alloc_output};
use crate::memory::{MemoryBudget, MemoryUsage};
use crate::types::{Attention, Heads, Neighbours, RowNormalized, RowStates};
use crate::types::{Progress, ShiftOutcome, ShiftRun};

use local_mean::OwnedSoa;

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
        let (m, q) = (queries.rows(), values.cols());
        let mut out = alloc_output("local_mean", "output", m, q)?;
        let owned = OwnedSoa::new(keys, Some(values));
        let soa = owned.view();
        let empty_rows = local_mean::local_mean(
            kernel,
            queries.as_slice(),
            queries.cols(),
            &soa,
            false,
            &mut out,
        );
        Ok(RowNormalized::from_parts(m, q, out, empty_rows))
    }

    fn row_states(
        &self,
        kernel: &Kernel,
        queries: &Matrix<'_>,
        keys: &Matrix<'_>,
        values: Option<&Matrix<'_>>,
        exclude_self: bool,
    ) -> Result<RowStates> {
        let (m, q) = (queries.rows(), values.map_or(0, |v| v.cols()));
        let owned = OwnedSoa::new(keys, values);
        let soa = owned.view();
        let groups = local_mean::group_states(
            kernel,
            queries.as_slice(),
            queries.cols(),
            &soa,
            exclude_self,
        );
        Ok(local_mean::row_states_of(&groups, m, q))
    }

    fn knn(&self, queries: &Matrix<'_>, keys: &Matrix<'_>, k: usize) -> Result<Neighbours> {
        let owned = OwnedSoa::new(keys, None);
        let soa = owned.view();
        let lists = knn::knn(queries.as_slice(), queries.cols(), &soa, k);
        Ok(knn::neighbours(&lists, k))
    }

    fn kernel_matrix(
        &self,
        kernel: &Kernel,
        queries: &Matrix<'_>,
        keys: &Matrix<'_>,
        mode: MatrixMode,
    ) -> Result<(Array2<f32>, usize)> {
        let (m, n) = (queries.rows(), keys.rows());
        let mut out = alloc_output("kernel_matrix", "output", m, n)?;
        let owned = OwnedSoa::new(keys, None);
        let soa = owned.view();
        let empty = kernel_matrix::kernel_matrix(
            kernel,
            queries.as_slice(),
            queries.cols(),
            &soa,
            mode,
            &mut out,
        );
        let arr = Array2::from_shape_vec((m, n), out).expect("shape matches allocation"); // ok: sized above
        Ok((arr, empty))
    }

    fn prepare(&self, keys: &Matrix<'_>, sets: &[Matrix<'_>]) -> Result<Arc<dyn Resident>> {
        Ok(Arc::new(resident::CpuResident::new(
            &self.budget,
            keys,
            sets,
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
