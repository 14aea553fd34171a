//! Kernel matrices: `K`, `D⁻¹K`, and the graph Laplacians `D − K`, `I − D⁻¹K`.

use ndarray::{Array2, ArrayView2};

use crate::backend::MatrixMode;
use crate::engine::Engine;
use crate::error::Result;
use crate::kernel::Kernel;
use crate::matrix::Matrix;
use crate::types::RowNormalized;

use super::{Inputs, call};

/// Which graph Laplacian [`Engine::laplacian`] builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaplacianKind {
    /// `L = D − K` with `D = diag(K·1)`.
    Unnormalized,
    /// `L = I − D⁻¹K` (the random-walk normalization).
    RandomWalk,
}

impl Engine {
    /// The kernel matrix `K_ij = K(q_i, x_j)` (`M × N`).
    ///
    /// On the GPU it is produced tile by tile, so `M × N` may exceed one
    /// device buffer. Entries of exponential profiles that underflow `f32`
    /// are 0 (use [`normalized_kernel_matrix`](Self::normalized_kernel_matrix)
    /// for rows that stay meaningful at tiny bandwidths).
    ///
    /// # Errors
    /// Empty or non-finite inputs, dimension mismatch, an output too large
    /// to allocate, backend failures.
    pub fn kernel_matrix(
        &self,
        kernel: &Kernel,
        queries: ArrayView2<'_, f32>,
        keys: ArrayView2<'_, f32>,
    ) -> Result<Array2<f32>> {
        let (q, x) = check_pair("kernel_matrix", kernel, queries, keys)?;
        let (k, _) = call::kernel_matrix(self.backend_impl(), kernel, &q, &x, MatrixMode::Raw)?;
        Ok(k)
    }

    /// The row-normalized kernel matrix `K̃ = D⁻¹K` (rows sum to 1).
    ///
    /// Computed in the log domain for exponential profiles, so rows stay
    /// normalized even when every raw weight would underflow. Rows with no
    /// kernel mass are NaN and counted (see [`RowNormalized`]).
    ///
    /// # Errors
    /// As [`kernel_matrix`](Self::kernel_matrix).
    pub fn normalized_kernel_matrix(
        &self,
        kernel: &Kernel,
        queries: ArrayView2<'_, f32>,
        keys: ArrayView2<'_, f32>,
    ) -> Result<RowNormalized> {
        let (q, x) = check_pair("normalized_kernel_matrix", kernel, queries, keys)?;
        let mode = MatrixMode::RowNormalized;
        let (values, empty_rows) = call::kernel_matrix(self.backend_impl(), kernel, &q, &x, mode)?;
        Ok(RowNormalized { values, empty_rows })
    }

    /// The graph Laplacian of the kernel on `points` (`N × N`): `D − K` or
    /// `I − D⁻¹K`. Since `K(x, x) = 1`, no row is ever empty.
    ///
    /// # Errors
    /// As [`kernel_matrix`](Self::kernel_matrix).
    pub fn laplacian(
        &self,
        kernel: &Kernel,
        points: ArrayView2<'_, f32>,
        kind: LaplacianKind,
    ) -> Result<Array2<f32>> {
        let x = Matrix::check("laplacian", "points", points)?;
        kernel.check_dim("laplacian", x.cols())?;
        let mode = match kind {
            LaplacianKind::Unnormalized => MatrixMode::Laplacian,
            LaplacianKind::RandomWalk => MatrixMode::NormalizedLaplacian,
        };
        let (l, _) = call::kernel_matrix(self.backend_impl(), kernel, &x, &x, mode)?;
        Ok(l)
    }
}

fn check_pair<'a>(
    op: &'static str,
    kernel: &Kernel,
    queries: ArrayView2<'a, f32>,
    keys: ArrayView2<'a, f32>,
) -> Result<(Matrix<'a>, Matrix<'a>)> {
    let i = Inputs::check(op, Some(kernel), queries, keys, None)?;
    Ok((i.q, i.x))
}
