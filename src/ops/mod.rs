//! The public ops, as methods of [`Engine`](crate::Engine): each checks its
//! inputs once ([`Inputs`]), then hands valid data to the engine's backend;
//! an op over keys it does not keep prepares them for its one call
//! (`call.rs`) and runs the code a [`KeySet`](crate::KeySet) runs.

mod adaptive;
pub(crate) mod call;
mod classify;
mod impute;
mod kde;
mod kernel_matrix;
mod keys;
mod knn;
mod lbfgsb;
mod linalg;
mod local_fit;
mod local_mean;
mod loo;
mod loo_per_feature;
mod multi_kernel;
mod score;
mod softmax;
mod states;
mod variable;

pub(crate) use adaptive::check_rule as check_knn_rule;
pub(crate) use classify::Classes;
pub use classify::{EmptyFallback, LocalModeClassifier, Predictions, labels_from_f32};
pub use impute::{Imputed, MAX_IMPUTE_ITERATIONS};
pub use kde::ln_normalizer;
pub use kernel_matrix::LaplacianKind;
pub(crate) use keys::{LabelSet, OnKeys, ValueSet};
pub use knn::KnnWeights;
pub(crate) use knn::knn_scaled;
pub(crate) use local_fit::check_degree;
pub use local_fit::{LocalFit, LocalPca, MAX_LOCAL_DIM, MAX_LOCAL_MAGNITUDE, RANK_TOLERANCE};
pub use loo::{BandwidthSelection, LooScore};
pub use loo_per_feature::{PerFeatureLoo, PerFeatureOptions, PerFeatureSelection};
pub use multi_kernel::MultiKernel;
pub(crate) use softmax::OnAttention;
pub use softmax::{FeatureLocalMean, SoftmaxParams, merge_heads, split_heads};
pub use variable::VariableBandwidth;
pub(crate) use variable::{
    check_bandwidths, log_density_of, variable_keys, variable_states, with_offset,
};

use ndarray::ArrayView2;

use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::matrix::Matrix;

/// The inputs of an op over keys, checked once: queries and keys non-empty,
/// finite and of one dimension, values (if any) one row per key, and the
/// kernel's blocks (if a kernel is given) covering the dimension, in that
/// order.
pub(crate) struct Inputs<'a> {
    /// The queries (`M × d`).
    pub q: Matrix<'a>,
    /// The keys (`N × d`).
    pub x: Matrix<'a>,
    /// The values (`N × q`), when the op takes them.
    pub y: Option<Matrix<'a>>,
}

impl<'a> Inputs<'a> {
    /// Checks `queries`, `keys` and `values` for `op` under `kernel`.
    pub(crate) fn check(
        op: &'static str,
        kernel: Option<&Kernel>,
        queries: ArrayView2<'a, f32>,
        keys: ArrayView2<'a, f32>,
        values: Option<ArrayView2<'a, f32>>,
    ) -> Result<Self> {
        let q = Matrix::check(op, "queries", queries)?;
        let x = Matrix::check(op, "keys", keys)?;
        let y = values.map(|v| Matrix::check(op, "values", v)).transpose()?;
        check_shapes(op, &q, &x, y.as_ref())?;
        if let Some(k) = kernel {
            k.check_dim(op, x.cols())?;
        }
        Ok(Inputs { q, x, y })
    }

    /// The values, which an op that takes them passed to [`check`](Self::check).
    pub(crate) fn values(&self) -> &Matrix<'a> {
        self.y.as_ref().expect("the op passed values") // ok: the caller passed them
    }
}

/// Checks that queries and keys share a dimension and that values (if
/// any) have one row per key.
pub(crate) fn check_shapes(
    op: &'static str,
    queries: &Matrix<'_>,
    keys: &Matrix<'_>,
    values: Option<&Matrix<'_>>,
) -> Result<()> {
    if queries.cols() != keys.cols() {
        return Err(Error::DimensionMismatch {
            op,
            queries: queries.cols(),
            keys: keys.cols(),
        });
    }
    if let Some(v) = values
        && v.rows() != keys.rows()
    {
        return Err(Error::RowMismatch {
            op,
            keys: keys.rows(),
            values: v.rows(),
        });
    }
    Ok(())
}
