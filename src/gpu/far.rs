//! Rows the shaders cannot represent, finished on the host in `f64`
//! (docs/numerics.md, "Far rows").
//!
//! The shaders give a key at `t ≥ T_FAR` (or where the `f32` `t`
//! overflows) weight 0. That is exact unless every key of a row is that
//! far; such rows come back empty (or, for cauchy, with a vanishing sum)
//! and are recomputed here from the host's copy of the keys with the CPU
//! path's `f64` routine.

use crate::kernel::Kernel;
use crate::kernel::exact::{needs_exact, row_state};
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
    /// The host matrices of a one-shot call.
    pub(crate) fn of(keys: &'a Matrix<'_>, values: Option<&'a Matrix<'_>>) -> Self {
        HostKeys {
            keys: keys.as_slice(),
            values: values.map_or(&[][..], Matrix::as_slice),
            n: keys.rows(),
            d: keys.cols(),
            q: values.map_or(0, Matrix::cols),
        }
    }

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
