//! The rayon CPU backend: every op, same numerics as the shaders.

#[cfg(target_arch = "x86_64")]
mod avx2;
mod kernel_matrix;
mod local_mean;
pub(crate) mod simd;
mod softmax;
#[cfg(target_arch = "x86_64")]
mod softmax_avx2;
mod weights;

use ndarray::Array2;

use crate::backend::{Backend, BackendInfo, MatrixMode};
use crate::error::Result;
use crate::kernel::Kernel;
use crate::matrix::{Matrix, alloc_output, padded_stride};
use crate::ops::{Attention, Heads, RowNormalized};

use local_mean::KeysSoa;

/// The CPU backend. Stateless: it uses rayon's global thread pool.
#[derive(Debug)]
pub(crate) struct CpuBackend {
    info: BackendInfo,
}

impl CpuBackend {
    pub(crate) fn new() -> Self {
        CpuBackend {
            info: BackendInfo::Cpu {
                threads: rayon::current_num_threads(),
                simd: simd::simd_name(),
            },
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
        let xt = keys.transposed();
        let yt = values.transposed();
        let soa = KeysSoa {
            xt: &xt,
            yt: &yt,
            n: keys.rows(),
            ld: padded_stride(keys.rows()),
            q,
        };
        let empty_rows =
            local_mean::local_mean(kernel, queries.as_slice(), queries.cols(), &soa, &mut out);
        Ok(RowNormalized::from_parts(m, q, out, empty_rows))
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
        let xt = keys.transposed();
        let soa = KeysSoa {
            xt: &xt,
            yt: &[],
            n,
            ld: padded_stride(n),
            q: 0,
        };
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
}
