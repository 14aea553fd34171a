//! The public ops, as methods of [`Engine`](crate::Engine): each checks its
//! inputs once, then hands valid data to the engine's backend.

mod attention_set;
mod classify;
mod impute;
mod kde;
mod kernel_matrix;
mod knn;
mod linalg;
mod local_fit;
mod local_mean;
mod loo;
mod multi_kernel;
mod score;
mod softmax;
mod states;

pub use attention_set::AttentionSet;
pub(crate) use classify::{Classes, label_rows};
pub use classify::{EmptyFallback, LocalModeClassifier, Predictions, labels_from_f32};
pub use impute::{Imputed, MAX_IMPUTE_ITERATIONS};
pub(crate) use kde::kernel_ln_normalizer;
pub(crate) use kde::ln_density_scale;
pub use kde::ln_normalizer;
pub use kernel_matrix::LaplacianKind;
pub use knn::KnnWeights;
pub(crate) use knn::{SQ_DIST_LIMIT, check_k, check_room, knn_scaled};
pub(crate) use local_fit::{Centres, check_degree, check_limits, fit_linear, fit_pca};
pub use local_fit::{LocalFit, LocalPca, MAX_LOCAL_DIM, MAX_LOCAL_MAGNITUDE, RANK_TOLERANCE};
pub use loo::{BandwidthSelection, LooScore};
pub use multi_kernel::MultiKernel;
pub use softmax::{FeatureLocalMean, SoftmaxParams, merge_heads, split_heads};

use crate::error::{Error, Result};
use crate::matrix::Matrix;

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
