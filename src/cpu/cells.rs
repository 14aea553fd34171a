//! A key set's cell index on the CPU: for a kernel of bounded reach (a
//! compact profile, or a product kernel with compact blocks; Euclidean),
//! the keys and values sorted by grid cell (`grid.rs`; up to `space::MAX_GRID_D`
//! coordinates) or, in more coordinates (up to [`MAX_KD_D`]), by leaf of
//! a k-d split (`kd.rs`), so a group of queries that share a cell (a
//! leaf) visits only the key ranges of the cells (leaves) within reach
//! and merges the ranges' row states with the associative rule, as
//! MeanShift's keys do (`mean_shift.rs`).
//!
//! The index depends on the bandwidth: it is built on the first request
//! that can use it and kept ([`CellCache`], one entry, replaced when a
//! request brings another reach), shared by concurrent requests, and
//! charged to the key set's memory budget. When it would take more than
//! half of the memory free it is not built and the request runs over all
//! keys, as it would without.
//! Leave-one-out row states keep the brute-force path (their rows are tied
//! to the keys' original order).
//!
//! Imports: `super::{keys, local_mean, panels, simd, threads}`, `crate::cancel`, `crate::error`,
//! `crate::grid`, `crate::kernel`, `crate::matrix`, `crate::memory`,
//! `crate::space`, `crate::types`.

use std::sync::Arc;

use rayon::prelude::*;

use super::keys::KeyColumns;
use super::local_mean::{GroupJob, GroupState, QUERY_GROUP, group, put_row};
use super::panels;
use super::simd::KEY_BLOCK;
use super::threads::Threads;
use crate::cancel::Checkpoint;
use crate::error::Result;
use crate::grid;
use crate::kernel::Kernel;
use crate::matrix::{ensure_room, reserve};
use crate::memory::{MemoryBudget, Reservation};
use crate::space::{self, Built, IndexCache, Layout};
use crate::types::RowStates;

/// Most coordinates a key set is indexed in by a k-d split: from
/// `panels::MIN_D` on, the brute-force path measures by inner products,
/// up to 1.8× faster per pair than the index's differences, so an index
/// that prunes little loses. Measured (`examples/keyset_cells.rs`, 2·10⁵
/// keys, 5000 queries, uniform kernel): d = 40 with every key in reach
/// 5.86 s indexed against 3.50 s; d = 16 likewise 1.87 s against 1.83 s;
/// d = 40 on clumps (h = 7) 0.34 s against 3.54 s.
pub(crate) const MAX_KD_D: usize = panels::MIN_D - 1;

/// Bytes of group states a request holds at a time (groups are finished
/// in chunks of this size, so a request's working memory stays bounded).
const CHUNK_BYTES: usize = 4 << 20;

/// Working memory a request over the index adds per query row: the
/// queries' cell keys and row numbers, and the groups' bounds.
pub(crate) const BYTES_PER_QUERY: u64 = 24;

/// The reach of `kernel` when the CPU index over `n` keys in `d`
/// coordinates can serve it ([`space::reach_for`] up to [`MAX_KD_D`]).
pub(crate) fn reach_for(
    kernel: &Kernel,
    n: usize,
    d: usize,
    exclude_self: bool,
) -> Option<Vec<f64>> {
    space::reach_for(kernel, (n, d), exclude_self, MAX_KD_D)
}

/// Keys and values sorted by the cell of a grid (or the leaf of a k-d
/// split) built for one reach.
pub(crate) struct CellIndex {
    /// The reach the index was built for (the cache's key).
    reach: Vec<f64>,
    layout: Layout,
    keys: KeyColumns,
    /// The index's memory on the key set's budget.
    held: Reservation,
}

impl CellIndex {
    /// The index of `keys` for `reach`, charged to `budget` when it takes
    /// at most half of the memory free now.
    fn build(
        keys: &KeyColumns,
        reach: &[f64],
        budget: &Arc<MemoryBudget>,
        threads: &Threads,
    ) -> Built<CellIndex> {
        let (n, d) = (keys.n(), keys.d());
        if grid::cells_for(reach).is_none() {
            return Built::Useless;
        }
        let (index_bytes, index_peak) = Layout::bytes(n, d);
        let bytes = keys.unpacked_bytes().saturating_add(index_bytes);
        // At most half of the memory free now: the rest stays for requests.
        let Some(held) = budget.reserve_if_free(bytes, bytes) else {
            return Built::NoMemory;
        };
        if ensure_room("prepare", "cell index", index_peak).is_err() {
            return Built::NoMemory;
        }
        let soa = keys.soa(None);
        let Some(layout) = threads.install(|| Layout::build(soa.xt, (n, soa.ld, d), reach)) else {
            // Every key in one cell: nothing to prune.
            return Built::Useless;
        };
        let order = layout.order();
        match threads.install(|| keys.permuted("prepare", order)) {
            Ok(sorted) => Built::Index(Arc::new(CellIndex {
                reach: reach.to_vec(),
                layout,
                keys: sorted,
                held,
            })),
            Err(_) => Built::NoMemory,
        }
    }

    /// Row states of `queries` (row-major, `d` columns) over value matrix
    /// `set`: `sink(row, state, r)` receives, for every query row, the
    /// state of its group and its place `r` in it. Groups that find `cp`
    /// cancelled are skipped, and the call fails.
    fn states(
        &self,
        kernel: &Kernel,
        queries: &[f32],
        set: Option<usize>,
        cp: &Checkpoint,
        sink: &mut dyn FnMut(usize, &GroupState, usize),
    ) -> Result<()> {
        let (op, d) = (cp.op(), self.keys.d());
        let m = queries.len() / d;
        let layout = &self.layout;
        // The index is shared by every kernel of this reach; only a radial
        // one's reach is a ball over all coordinates.
        let radius = space::radius(kernel, &self.reach);
        // Queries sorted by cell (leaf), then cut into groups of one each.
        ensure_room(op, "query cells", (m as u64).saturating_mul(16))?;
        let keyed = layout.sorted_queries(queries, d);
        let mut bounds = reserve::<(u32, u32)>(op, "query groups", m as u64)?;
        let mut start = 0;
        for i in 1..=m {
            if i == m || i - start == QUERY_GROUP || keyed[i].0 != keyed[start].0 {
                bounds.push((start as u32, i as u32));
                start = i;
            }
        }
        let soa = self.keys.soa(set);
        let q = soa.q;
        let per_group = std::mem::size_of::<GroupState>() + QUERY_GROUP * (q + 2) * 8;
        let chunk = (CHUNK_BYTES / per_group).max(16);
        let want = 4 * rayon::current_num_threads();
        let few = bounds.len() < want;
        for part in bounds.chunks(chunk) {
            let states: Vec<GroupState> = part
                .par_iter()
                .map_init(
                    || (Vec::new(), Vec::new()),
                    |(buf, ranges), &(a, b)| {
                        if cp.is_cancelled() {
                            return GroupState::empty(kernel.profile(), q);
                        }
                        buf.clear();
                        for &(_, i) in &keyed[a as usize..b as usize] {
                            let i = i as usize;
                            buf.extend_from_slice(&queries[i * d..(i + 1) * d]);
                        }
                        let (lo, hi) = grid::query_box(buf, d, &self.reach);
                        ranges.clear();
                        layout.ranges(&lo, &hi, radius, ranges);
                        let job = |(k0, k1): (usize, usize)| {
                            group(&GroupJob {
                                kernel,
                                queries: buf,
                                d,
                                keys: &soa,
                                k0,
                                k1,
                                self_row: None,
                                centred: None,
                            })
                        };
                        let merge = |mut a: GroupState, b: GroupState| {
                            a.merge(&b, q);
                            a
                        };
                        let empty = || GroupState::empty(kernel.profile(), q);
                        if few {
                            // Too few groups to occupy every thread: the
                            // keys within reach are split as well.
                            let pieces = split(ranges, want);
                            return pieces.into_par_iter().map(job).reduce(empty, merge);
                        }
                        ranges.iter().map(|&r| job(r)).fold(empty(), merge)
                    },
                )
                .collect();
            cp.check()?;
            for (&(a, b), st) in part.iter().zip(&states) {
                for (r, &(_, i)) in keyed[a as usize..b as usize].iter().enumerate() {
                    sink(i as usize, st, r);
                }
            }
        }
        Ok(())
    }

    /// Local means of value matrix `set` at `queries` into `out`
    /// (row-major, the set's columns); returns the number of empty rows
    /// (written as NaN).
    pub(crate) fn local_mean(
        &self,
        kernel: &Kernel,
        queries: &[f32],
        set: usize,
        out: &mut [f32],
        cp: &Checkpoint,
    ) -> Result<usize> {
        let q = self.keys.soa(Some(set)).q;
        let mut empty = 0;
        self.states(kernel, queries, Some(set), cp, &mut |i, st, r| {
            empty += usize::from(!st.finalize_row(r, q, &mut out[i * q..(i + 1) * q]));
        })?;
        Ok(empty)
    }

    /// Row states of `queries` with value matrix `set` (`None`: row sums
    /// only), rows with no mass normalized.
    pub(crate) fn row_states(
        &self,
        kernel: &Kernel,
        queries: &[f32],
        set: Option<usize>,
        cp: &Checkpoint,
    ) -> Result<RowStates> {
        let q = self.keys.soa(set).q;
        let m = queries.len() / self.keys.d();
        let mut states = RowStates::empty(cp.op(), m, q)?;
        self.states(kernel, queries, set, cp, &mut |i, st, r| {
            put_row(&mut states, i, st, r, q);
        })?;
        states.normalize_empty();
        Ok(states)
    }

    /// Bytes the index holds.
    fn bytes(&self) -> u64 {
        self.held.bytes()
    }
}

/// The key ranges `ranges` cut into about `parts` pieces of at least
/// `4·KEY_BLOCK` keys (pieces never straddle two ranges).
fn split(ranges: &[(usize, usize)], parts: usize) -> Vec<(usize, usize)> {
    let total: usize = ranges.iter().map(|&(a, b)| b - a).sum();
    let per = total.div_ceil(parts.max(1)).max(4 * KEY_BLOCK);
    let mut out = Vec::new();
    for &(a, b) in ranges {
        out.extend((a..b).step_by(per).map(|k| (k, (k + per).min(b))));
    }
    out
}

/// A key set's cell index for the last reach asked (at most one), or the
/// reach for which an index was found useless.
#[derive(Default)]
pub(crate) struct CellCache(IndexCache<CellIndex>);

impl CellCache {
    /// The index of `keys` for `kernel`'s requests (`exclude_self`: leave-
    /// one-out), built and kept on first use; `None` when the request runs
    /// over all keys ([`reach_for`], a grid that cannot prune, or the
    /// index would take more than half of the memory free now). The index
    /// is built on `threads`, without the cache's lock held.
    pub(crate) fn get(
        &self,
        kernel: &Kernel,
        exclude_self: bool,
        keys: &KeyColumns,
        budget: &Arc<MemoryBudget>,
        threads: &Threads,
    ) -> Option<Arc<CellIndex>> {
        let reach = reach_for(kernel, keys.n(), keys.d(), exclude_self)?;
        let build = |reach: &[f64]| Ok(CellIndex::build(keys, reach, budget, threads));
        // Building reports no errors (no memory: the request runs over
        // every key).
        self.0.get(reach, build).ok().flatten()
    }

    /// Bytes of the kept index (0 without one).
    pub(crate) fn bytes(&self) -> u64 {
        self.0.bytes(CellIndex::bytes)
    }
}
