//! Fused, streaming Nadaraya–Watson local mean on the CPU: the driver.
//!
//! Queries are split into groups handled by rayon tasks; each group walks
//! the keys in blocks of [`KEY_BLOCK`] that stay in L1 while every query of
//! the group visits them. This file holds the split over groups and key
//! ranges, and the choice of kernel; the kernels
//! are `portable.rs` and `avx2.rs`. Per query the row state `(m, s, u)` of
//! docs/numerics.md is kept in `f64`; a block's sums are formed in `f32`
//! lanes and merged into it. The `M×N` matrix is never stored.
//!
//! Its children: `group.rs` (the group's job and state), `far.rs` (rows
//! finished in `f64`), `portable.rs` and `avx2.rs` (the kernels).
//!
//! Imports: `super::{keys, panels, simd}`, `crate::cancel`, `crate::error`,
//! `crate::kernel`, `crate::matrix`, `crate::types`.

#[cfg(target_arch = "x86_64")]
mod avx2;
mod far;
mod group;
mod portable;

use rayon::prelude::*;

use super::keys::KeysSoa;
use super::panels::{CentredRows, P, TileIsa, serve_sq_dists};
use super::simd::{Avx2Fma, KEY_BLOCK, Portable};
use crate::cancel::Checkpoint;
use crate::error::Result;
use crate::kernel::Kernel;
use crate::matrix::ensure_room;
use crate::types::RowStates;

pub(crate) use group::{GroupJob, GroupState, QUERY_GROUP};

/// Row states `(m, s, u)` of every query: the shared core of local means,
/// densities and leave-one-out sums. With `exclude_self` the queries must be
/// the keys and row `i` skips key `i`.
///
/// Work is split over query groups; when there are too few of them to
/// occupy every thread, the keys are split as well and the partial states
/// merged with the associative rule.
///
/// A task that finds `cp` cancelled skips its work; the call then fails
/// with [`crate::Error::Cancelled`].
pub(crate) fn group_states(
    kernel: &Kernel,
    queries: &[f32],
    d: usize,
    keys: &KeysSoa<'_>,
    exclude_self: bool,
    cp: &Checkpoint,
) -> Result<Vec<GroupState>> {
    let (n, q) = (keys.n, keys.q);
    let groups = queries.len().div_ceil(QUERY_GROUP * d);
    // The groups' states are collected by rayon, which cannot fail: make
    // sure their memory exists first (refuse rather than abort).
    let per_group = std::mem::size_of::<GroupState>() + QUERY_GROUP * (q + 2) * 8;
    ensure_room(
        cp.op(),
        "row states",
        (groups as u64).saturating_mul(per_group as u64),
    )?;
    let want = 4 * rayon::current_num_threads();
    if groups >= want && serve_sq_dists(kernel, keys.panels, d) {
        let states = panel_group_states(kernel, queries, d, keys, exclude_self, cp);
        cp.check()?;
        return Ok(states);
    }
    let splits = if groups >= want {
        1
    } else {
        want.div_ceil(groups).min(n / (4 * KEY_BLOCK)).max(1)
    };
    // Key ranges aligned to whole blocks.
    let per = n.div_ceil(splits).next_multiple_of(KEY_BLOCK);
    let states = queries
        .par_chunks(QUERY_GROUP * d)
        .enumerate()
        .map(|(gi, qs)| {
            let job = |k0: usize, k1: usize| GroupJob {
                kernel,
                queries: qs,
                d,
                keys,
                k0,
                k1,
                self_row: exclude_self.then_some(gi * QUERY_GROUP),
                centred: None,
            };
            if cp.is_cancelled() {
                return GroupState::empty(kernel.profile(), q);
            }
            if splits == 1 {
                return group(&job(0, n));
            }
            (0..n.div_ceil(per))
                .into_par_iter()
                .map(|t| match cp.is_cancelled() {
                    true => GroupState::empty(kernel.profile(), q),
                    false => group(&job(t * per, ((t + 1) * per).min(n))),
                })
                .reduce_with(|mut a, b| {
                    a.merge(&b, q);
                    a
                })
                .unwrap_or_else(|| GroupState::empty(kernel.profile(), q))
        })
        .collect();
    cp.check()?;
    Ok(states)
}

/// Query groups per task when the keys have panels: they share each key
/// range while it is in cache.
const TASK_GROUPS: usize = 8;

/// Bytes of key panels a task's groups share at a time (well inside L2).
const RANGE_BYTES: usize = 512 * 1024;

/// [`group_states`] when the keys have panels and there are enough
/// groups: each task takes up to [`TASK_GROUPS`] groups through the keys
/// in ranges of about [`RANGE_BYTES`], every group over a range before the
/// next range, and merges the ranges' states. The inner products then
/// reuse each key from cache `8·TASK_GROUPS` times instead of 8.
fn panel_group_states(
    kernel: &Kernel,
    queries: &[f32],
    d: usize,
    keys: &KeysSoa<'_>,
    exclude_self: bool,
    cp: &Checkpoint,
) -> Vec<GroupState> {
    let (n, q) = (keys.n, keys.q);
    let groups = queries.len().div_ceil(QUERY_GROUP * d);
    let per = groups
        .div_ceil(4 * rayon::current_num_threads())
        .clamp(1, TASK_GROUPS);
    let range = (RANGE_BYTES / (4 * d) / (2 * P) * (2 * P)).clamp(2 * P, KEY_BLOCK);
    queries
        .par_chunks(per * QUERY_GROUP * d)
        .enumerate()
        .flat_map_iter(|(t, chunk)| {
            let first = t * per;
            let mut states: Vec<GroupState> = chunk
                .chunks(QUERY_GROUP * d)
                .map(|_| GroupState::empty(kernel.profile(), q))
                .collect();
            let centred: Vec<Option<CentredRows>> = chunk
                .chunks(QUERY_GROUP * d)
                .map(|qs| keys.panels.map(|p| CentredRows::new(p, qs)))
                .collect();
            for k0 in (0..n).step_by(range) {
                if cp.is_cancelled() {
                    break;
                }
                for (g, qs) in chunk.chunks(QUERY_GROUP * d).enumerate() {
                    let part = group(&GroupJob {
                        kernel,
                        queries: qs,
                        d,
                        keys,
                        k0,
                        k1: (k0 + range).min(n),
                        self_row: exclude_self.then_some((first + g) * QUERY_GROUP),
                        centred: centred[g].as_ref(),
                    });
                    states[g].merge(&part, q);
                }
            }
            states
        })
        .collect()
}

/// The row states of `m` queries from their groups' states (as
/// [`group_states`] returns them), rows with no mass normalized.
pub(crate) fn row_states_of(groups: &[GroupState], m: usize, q: usize) -> Result<RowStates> {
    let mut states = RowStates::empty("row_states", m, q)?;
    for (g, st) in groups.iter().enumerate() {
        for r in 0..QUERY_GROUP.min(m.saturating_sub(g * QUERY_GROUP)) {
            put_row(&mut states, g * QUERY_GROUP + r, st, r, q);
        }
    }
    states.normalize_empty();
    Ok(states)
}

/// Row `i` of `states` from row `r` of group state `st` (`q` columns).
pub(crate) fn put_row(states: &mut RowStates, i: usize, st: &GroupState, r: usize, q: usize) {
    states.max_log_weight[i] = st.m[r];
    states.sum[i] = st.s[r];
    for c in 0..q {
        states.weighted[[i, c]] = st.u[r * q + c];
    }
}

/// Local means of `queries` (row-major, `d` columns) into `out` (`q`
/// columns). Returns the number of empty rows (written as NaN).
pub(crate) fn local_mean(
    kernel: &Kernel,
    queries: &[f32],
    d: usize,
    keys: &KeysSoa<'_>,
    exclude_self: bool,
    out: &mut [f32],
    cp: &Checkpoint,
) -> Result<usize> {
    let q = keys.q;
    let states = group_states(kernel, queries, d, keys, exclude_self, cp)?;
    Ok(out
        .par_chunks_mut(QUERY_GROUP * q)
        .zip(states.par_iter())
        .map(|(o, st)| st.finalize(q, o))
        .sum())
}

/// The state of one group, on the best compiled version.
pub(crate) fn group(job: &GroupJob<'_>) -> GroupState {
    group_on(Avx2Fma::detect(), job)
}

/// The state of one group: on the AVX2 kernel when `isa` holds the token,
/// else on the portable one (`None` forces it).
pub(crate) fn group_on(isa: Option<Avx2Fma>, job: &GroupJob<'_>) -> GroupState {
    #[cfg(target_arch = "x86_64")]
    let mut st = match isa {
        Some(isa) => avx2::group(isa, job),
        None => portable::group::<Portable>(job, TileIsa::Portable),
    };
    #[cfg(not(target_arch = "x86_64"))]
    let mut st = {
        let _ = isa;
        portable::group::<Portable>(job, TileIsa::Portable)
    };
    far::finish_far_rows(job, &mut st);
    st
}

/// The portable version (any CPU); the AVX2 one is tested against it.
#[cfg(test)]
pub(crate) fn group_portable(job: &GroupJob<'_>) -> GroupState {
    group_on(None, job)
}

#[cfg(test)]
mod tests;
