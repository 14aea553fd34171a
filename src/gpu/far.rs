//! Rows the shaders cannot represent, finished on the host in `f64`
//! (docs/numerics.md, "Far rows").
//!
//! The shaders give a key at `t ≥ T_FAR` (or where the `f32` `t`
//! overflows) weight 0. That is exact unless every key of a row is that
//! far; such rows come back empty (or, for cauchy, with a vanishing sum)
//! and are recomputed here from the host's copy of the keys with the CPU
//! path's `f64` routine.

use crate::backend::MatrixMode;
use crate::kernel::exact::{needs_exact, normalized_row, row_state, to_normalized_laplacian};
use crate::kernel::{Kernel, Profile};
use crate::matrix::Matrix;
use crate::types::{RowNormalized, RowStates};

/// Keys (`n × d`) and values (`n × q`, possibly none) on the host,
/// row-major.
pub(crate) struct HostKeys<'a> {
    pub keys: &'a [f32],
    pub values: &'a [f32],
    pub n: usize,
    pub d: usize,
    pub q: usize,
}

impl<'a> HostKeys<'a> {
    /// The `f64` state of query `i` over every key.
    fn state(
        &self,
        kernel: &Kernel,
        queries: &Matrix<'_>,
        i: usize,
        exclude_self: bool,
        u: &mut [f64],
    ) -> (f32, f64) {
        let (d, q) = (self.d, self.q);
        row_state(
            kernel,
            queries.row_range(i, i + 1),
            |j, k| self.keys[j * d + k],
            |j, c| self.values[j * q + c],
            (0, self.n),
            exclude_self.then_some(i),
            u,
        )
    }
}

/// Whether some row of `out` (local means from the shader) may be a far
/// row: an empty row under a profile with full support.
pub(crate) fn means_need_host(kernel: &Kernel, out: &RowNormalized) -> bool {
    out.empty_rows > 0 && kernel.has_full_support()
}

/// Whether some row of `states` needs the host ([`needs_exact`]).
pub(crate) fn states_need_host(kernel: &Kernel, states: &RowStates) -> bool {
    states.sum.iter().any(|&s| needs_exact(kernel, s))
}

/// Replaces the empty rows of full-support profiles by their `f64` local
/// means, and recounts the empty rows.
pub(crate) fn far_means(
    kernel: &Kernel,
    queries: &Matrix<'_>,
    host: &HostKeys<'_>,
    out: &mut RowNormalized,
) {
    if !means_need_host(kernel, out) {
        return;
    }
    let mut u = vec![0.0; host.q];
    for i in 0..out.values.nrows() {
        if !out.values.row(i).iter().any(|v| v.is_nan()) {
            continue;
        }
        let (_, s) = host.state(kernel, queries, i, false, &mut u);
        if s > 0.0 {
            for (o, &uc) in out.values.row_mut(i).iter_mut().zip(&u) {
                *o = (uc / s) as f32;
            }
            out.empty_rows -= 1;
        }
    }
}

/// Replaces the row states that need it by their `f64` states.
pub(crate) fn far_states(
    kernel: &Kernel,
    queries: &Matrix<'_>,
    host: &HostKeys<'_>,
    exclude_self: bool,
    states: &mut RowStates,
) {
    let mut u = vec![0.0; host.q];
    for i in 0..states.rows() {
        if !needs_exact(kernel, states.sum[i]) {
            continue;
        }
        let (m, s) = host.state(kernel, queries, i, exclude_self, &mut u);
        if s > 0.0 {
            states.max_log_weight[i] = m;
            states.sum[i] = s;
            states
                .weighted
                .row_mut(i)
                .assign(&ndarray::ArrayView1::from(&u[..]));
        }
    }
}

/// Whether the rows of a kernel matrix in `mode` may need the host: the
/// normalized modes of full-support profiles (their `D⁻¹K` rows can be left
/// without mass in `f32`).
pub(crate) fn matrix_needs_host(kernel: &Kernel, mode: MatrixMode) -> bool {
    matches!(
        mode,
        MatrixMode::RowNormalized | MatrixMode::NormalizedLaplacian
    ) && kernel.has_full_support()
}

/// Whether the cauchy row state `(s, m)` of a query may hide a sum too
/// small for `f32`: one the state pass finished in `f64` (the only cauchy
/// states whose `m` is not 0) or an empty one. Other profiles' rows show it
/// as NaN in the matrix.
pub(crate) fn tiny_cauchy_row(kernel: &Kernel, sum: f64, max_log_weight: f32) -> bool {
    kernel.profile() == Profile::Cauchy && (sum == 0.0 || max_log_weight != 0.0)
}

/// Finishes in `f64`, from the host's keys, the rows of a normalized kernel
/// matrix (`out`, row-major `M × n`) left without mass (NaN) or flagged in
/// `tiny`.
pub(crate) fn far_matrix_rows(
    kernel: &Kernel,
    queries: &Matrix<'_>,
    host: &HostKeys<'_>,
    (mode, tiny): (MatrixMode, &[bool]),
    out: &mut [f32],
) {
    let (n, d, xs) = (host.n, host.d, host.keys);
    for (i, row) in out.chunks_exact_mut(n).enumerate() {
        if !tiny[i] && !row.iter().any(|v| v.is_nan()) {
            continue;
        }
        let query = queries.row_range(i, i + 1);
        if normalized_row(kernel, query, |j, k| xs[j * d + k], row)
            && mode == MatrixMode::NormalizedLaplacian
        {
            to_normalized_laplacian(row, i);
        }
    }
}
