//! A group of queries on the CPU: its job (the queries, a key range, the
//! leave-one-out row) and its row state, shared by the driver (`mod.rs`),
//! the kernels (`portable.rs`, `avx2.rs`) and the far rows (`far.rs`).
//!
//! Imports: `super::super::{keys, panels, weights}`, `crate::kernel`,
//! `crate::types`.

use super::super::keys::KeysSoa;
use super::super::panels::CentredRows;
use super::super::weights::initial_max;
use crate::kernel::{Kernel, Profile};
use crate::types::merge_states;

/// Queries that share one pass over the keys.
pub(crate) const QUERY_GROUP: usize = 8;
// A group is one tile of inner products.
const _: () = assert!(QUERY_GROUP == super::super::panels::ROWS);

/// Row states `(m, s, u)` of a group of queries over some of the keys
/// (docs/numerics.md): `m` the largest log-weight (0 for non-exponential
/// profiles), `s = Σ e^{w−m}`, `u = Σ e^{w−m} y` (`rows × q`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GroupState {
    pub m: [f32; QUERY_GROUP],
    pub s: [f64; QUERY_GROUP],
    pub u: Vec<f64>,
}

impl GroupState {
    pub(crate) fn empty(profile: Profile, q: usize) -> Self {
        GroupState {
            m: [initial_max(profile); QUERY_GROUP],
            s: [0.0; QUERY_GROUP],
            u: vec![0.0; QUERY_GROUP * q],
        }
    }

    /// Merges `other` (same queries, other keys) into `self`.
    pub(crate) fn merge(&mut self, other: &GroupState, q: usize) {
        let mut u = vec![0.0; q];
        for r in 0..QUERY_GROUP {
            let (ua, ub) = (&self.u[r * q..(r + 1) * q], &other.u[r * q..(r + 1) * q]);
            let (m, s) = merge_states(
                (self.m[r], self.s[r], ua),
                (other.m[r], other.s[r], ub),
                &mut u,
            );
            self.m[r] = m;
            self.s[r] = s;
            self.u[r * q..(r + 1) * q].copy_from_slice(&u);
        }
    }

    /// Writes `u / s` for the first `out.len() / q` rows (NaN where `s = 0`)
    /// and returns how many rows were empty.
    pub(crate) fn finalize(&self, q: usize, out: &mut [f32]) -> usize {
        let mut empty = 0;
        for (r, o) in out.chunks_mut(q).enumerate() {
            empty += usize::from(!self.finalize_row(r, q, o));
        }
        empty
    }

    /// Writes row `r`'s `u / s` into `out` (`q` entries; NaN where
    /// `s = 0`); returns whether the row had mass.
    pub(crate) fn finalize_row(&self, r: usize, q: usize, out: &mut [f32]) -> bool {
        let s = self.s[r];
        if s > 0.0 {
            for (oc, &uc) in out.iter_mut().zip(&self.u[r * q..(r + 1) * q]) {
                *oc = (uc / s) as f32;
            }
        } else {
            out.fill(f32::NAN);
        }
        s > 0.0
    }
}

/// One unit of work: a group of at most [`QUERY_GROUP`] queries against
/// the keys `k0..k1`.
#[derive(Clone, Copy)]
pub(crate) struct GroupJob<'a> {
    pub kernel: &'a Kernel,
    /// The group's query rows, row-major with `d` columns.
    pub queries: &'a [f32],
    pub d: usize,
    pub keys: &'a KeysSoa<'a>,
    pub k0: usize,
    pub k1: usize,
    /// When the queries are the keys and every row must leave out its own
    /// key (leave-one-out): the global index of the group's first query.
    pub self_row: Option<usize>,
    /// The group's queries already centred for the keys' panels (a caller
    /// that runs the group over many key ranges centres them once).
    pub centred: Option<&'a CentredRows>,
}

/// One query against one block of keys `j0..j0 + len`: the keys' columns
/// (`xt`, coordinate `k` of key `j` at `xt[k·n + j]`), the query, and its
/// squared distances to the block when the inner products gave them.
#[derive(Clone, Copy)]
pub(crate) struct QueryBlock<'a> {
    pub xt: &'a [f32],
    pub n: usize,
    pub j0: usize,
    pub len: usize,
    pub query: &'a [f32],
    pub pre: Option<&'a [f32]>,
}
