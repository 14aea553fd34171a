//! The CPU's far rows: a row whose every key lies too far for the `f32`
//! kernels is recomputed in `f64` (docs/numerics.md, "Far rows"), in place
//! in the group state the kernels returned. The GPU twin is `gpu/far.rs`.
//!
//! Imports: `super::group`, `super::super::weights`, `crate::kernel` (its
//! `f64` far-row math).

use super::super::weights::initial_max;
use super::group::{GroupJob, GroupState};
use crate::kernel::exact::{needs_exact, row_state};

/// Recomputes in `f64` the rows whose keys all lie too far for the `f32`
/// kernels, in place in the group state the kernels returned.
pub(crate) fn finish_far_rows(job: &GroupJob<'_>, st: &mut GroupState) {
    let profile = job.kernel.profile();
    let (ld, q, d) = (job.keys.ld, job.keys.q, job.d);
    let g = job.queries.len() / d;
    for r in 0..g {
        if !needs_exact(job.kernel, st.s[r]) {
            continue;
        }
        let (m, s) = row_state(
            job.kernel,
            &job.queries[r * d..(r + 1) * d],
            |j, k| job.keys.xt[k * ld + j],
            |j, c| job.keys.yt[c * ld + j],
            (job.k0, job.k1),
            job.self_row.map(|r0| r0 + r),
            &mut st.u[r * q..(r + 1) * q],
        );
        st.m[r] = if s > 0.0 { m } else { initial_max(profile) };
        st.s[r] = s;
    }
}
