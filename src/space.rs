//! A key set's spatial index, shared by both backends: when a request's
//! kernel has bounded reach, which keys it sorts by grid cell (`grid.rs`,
//! up to [`MAX_GRID_D`] coordinates) or by leaf of a k-d split (`kd.rs`,
//! beyond), and the key ranges within reach of a box of queries. The CPU
//! key set merges the row states of those ranges on its threads
//! (`cpu/cells.rs`); the GPU key set hands them to its workgroups as spans
//! of a sorted key tile (`gpu/cells.rs`).

use std::sync::{Arc, Mutex, MutexGuard};

use rayon::prelude::*;

use crate::error::Result;
use crate::grid::{self, Grid};
use crate::kd::KdTree;
use crate::kernel::{Kernel, Profile};
use crate::matrix::try_collect;
use crate::types::RowStates;

/// Most coordinates keys are indexed in by grid cell: beyond, a box of a
/// few cells per gridded axis holds most keys along the others anyway,
/// and a k-d split takes over.
pub(crate) const MAX_GRID_D: usize = 8;

/// Fewest keys worth an index: below, one pass over all keys is cheap.
pub(crate) const MIN_KEYS: usize = 4096;

/// The mass, relative to a row's whole, that a truncated (exponential)
/// request over an index may leave out (docs/numerics.md, "Exponential
/// kernels over an index"): far below f32's rounding of the sums it would
/// change.
pub(crate) const LEFT_OUT: f64 = 1e-9;

/// How much farther than its least a truncated index reaches: rows whose
/// nearest key lies within `√(SLACK² − 1) ≈ 0.75` (gaussian) or
/// `SLACK − 1 = 0.25` (laplacian) of the least reach are served by the
/// index; farther ones (outliers) go over every key.
const SLACK: f64 = 1.25;

/// A radial exponential kernel's least reach over `n` keys, in
/// bandwidths: the gaussian's keys whose squared distance exceeds the
/// nearest key's by `R₀²·h²` weigh at most `e^{−R₀²/2}` of it each, the
/// laplacian's keys farther than it by `R₀·h` at most `e^{−R₀}`; so all
/// `n` together at most [`LEFT_OUT`] of the row with
/// `R₀ = √(2·ln(n / LEFT_OUT))` (gaussian: 7.6 at 4096 keys, 8.9 at 10⁷)
/// or `R₀ = ln(n / LEFT_OUT)` (laplacian: 29 and 39).
fn least_reach(profile: Profile, n: usize) -> f64 {
    let l = (n as f64 / LEFT_OUT).ln();
    match profile {
        Profile::Laplacian => l,
        _ => (2.0 * l).sqrt(),
    }
}

/// Whether requests of `kernel` over an index are truncated: a radial
/// gaussian or laplacian, which have no bounded reach but whose far keys
/// weigh nothing within the numerics contract.
pub(crate) fn truncated(kernel: &Kernel) -> bool {
    kernel.blocks().is_none() && matches!(kernel.profile(), Profile::Gaussian | Profile::Laplacian)
}

/// The reach of `kernel` when an index over `n` keys in `d` coordinates
/// (at most `max_d`, the backend's bound) can serve it: bounded on some
/// coordinate (a radial gaussian: [`SLACK`] times its least reach),
/// Euclidean, enough keys, no leave-one-out (whose rows are tied to the
/// keys' own order); `None` when the request runs over all keys.
pub(crate) fn reach_for(
    kernel: &Kernel,
    (n, d): (usize, usize),
    exclude_self: bool,
    max_d: usize,
) -> Option<Vec<f64>> {
    let fits = !exclude_self
        && kernel.metric().is_euclidean()
        && (1..=max_d).contains(&d)
        && (MIN_KEYS..=u32::MAX as usize).contains(&n);
    let reach = if truncated(kernel) {
        let h = f64::from(kernel.bandwidth());
        vec![SLACK * least_reach(kernel.profile(), n) * h; d]
    } else {
        grid::reach(kernel, d)
    };
    (fits && reach.iter().any(|r| r.is_finite())).then_some(reach)
}

/// Whether a row of a truncated request (see [`truncated`]) over an index
/// of `n` keys, whose nearest key's log-weight is `m` (gaussian `−t/2`,
/// `t` in squared bandwidths; laplacian `−√t`), must be answered over
/// every key: no key within the index's reach, or a nearest key so far
/// that the keys beyond the reach could weigh more than [`LEFT_OUT`] of
/// the row. Never for other kernels.
pub(crate) fn beyond_reach(kernel: &Kernel, n: usize, m: f32) -> bool {
    if !truncated(kernel) {
        return false;
    }
    let least = least_reach(kernel.profile(), n);
    let reach = SLACK * least;
    // A margin for the rounding of m in f32.
    let within = match kernel.profile() {
        Profile::Laplacian => -f64::from(m) + least <= reach * (1.0 - 1e-4),
        _ => -2.0 * f64::from(m) + least * least <= reach * reach * (1.0 - 1e-4),
    };
    !within
}

/// The rows of `states` (a truncated request over an index of `n` keys)
/// that must be answered over every key ([`beyond_reach`]).
pub(crate) fn rows_beyond_reach(kernel: &Kernel, n: usize, states: &RowStates) -> Vec<usize> {
    if !truncated(kernel) {
        return Vec::new();
    }
    (0..states.rows())
        .filter(|&i| beyond_reach(kernel, n, states.max_log_weight[i]))
        .collect()
}

/// Row `rows[r]` of `states` replaced by row `r` of `from`, for every `r`.
pub(crate) fn put_rows(
    states: &mut RowStates,
    rows: impl IntoIterator<Item = usize>,
    from: &RowStates,
) {
    for (r, i) in rows.into_iter().enumerate() {
        states.max_log_weight[i] = from.max_log_weight[r];
        states.sum[i] = from.sum[r];
        states.weighted.row_mut(i).assign(&from.weighted.row(r));
    }
}

/// How an index orders its keys: by grid cell, or by leaf of a k-d split.
pub(crate) enum Layout {
    Grid(Grid),
    Kd(KdTree),
}

impl Layout {
    /// Bytes the layout of `n` keys in `d` coordinates holds, and the most
    /// it holds while it is built.
    pub(crate) fn bytes(n: usize, d: usize) -> (u64, u64) {
        if d > MAX_GRID_D {
            let b = KdTree::bytes(n, d);
            (b, b)
        } else {
            Grid::bytes(n)
        }
    }

    /// The layout of `n` keys stored column-major (coordinate `k` of key
    /// `i` at `xt[k·ld + i]`) for `reach`: a grid up to [`MAX_GRID_D`]
    /// coordinates, a k-d split beyond (built on the current rayon pool);
    /// `None` when it cannot prune (no bounded coordinate, or every key in
    /// one cell).
    pub(crate) fn build(
        xt: &[f32],
        (n, ld, d): (usize, usize, usize),
        reach: &[f64],
    ) -> Option<Layout> {
        let (side, bounded) = grid::cells_for(reach)?;
        if d > MAX_GRID_D {
            return Some(Layout::Kd(KdTree::from_columns(xt, (n, ld, d))));
        }
        let grid = Grid::from_columns(xt, (n, ld, d), side, Some(&bounded));
        (grid.axes() > 0).then_some(Layout::Grid(grid))
    }

    /// The keys' sorted order: position `p` holds key `order()[p]`.
    pub(crate) fn order(&self) -> &[u32] {
        match self {
            Layout::Grid(g) => &g.order,
            Layout::Kd(t) => &t.order,
        }
    }

    /// Each row of the row-major `queries` (`d` columns) with its cell
    /// (leaf), sorted by cell and then row (on the current rayon pool).
    pub(crate) fn sorted_queries(&self, queries: &[f32], d: usize) -> Vec<(u64, u32)> {
        let mut keyed: Vec<(u64, u32)> = queries
            .par_chunks_exact(d)
            .enumerate()
            .map(|(i, row)| (self.key_of(row), i as u32))
            .collect();
        keyed.par_sort_unstable();
        keyed
    }

    /// The key queries are grouped by: their cell or leaf.
    pub(crate) fn key_of(&self, row: &[f32]) -> u64 {
        match self {
            Layout::Grid(g) => g.key_of(row),
            Layout::Kd(t) => t.key_of(row),
        }
    }

    /// The ranges of the sorted keys within reach of the widened query box
    /// `lo..=hi` (as [`grid::query_box`] gives it); with `radius` (a radial
    /// kernel's reach), a k-d split also prunes by Euclidean distance (a
    /// product kernel's reach is a ball per block, not one over all
    /// coordinates: never for it).
    pub(crate) fn ranges(
        &self,
        lo: &[f64],
        hi: &[f64],
        radius: Option<f64>,
        out: &mut Vec<(usize, usize)>,
    ) {
        match self {
            Layout::Grid(g) => g.ranges(lo, hi, out),
            Layout::Kd(t) => t.ranges(lo, hi, radius, out),
        }
    }
}

/// The radius a request of `kernel` may prune a k-d split's leaves by: a
/// radial kernel's reach; `None` for a product kernel.
pub(crate) fn radius(kernel: &Kernel, reach: &[f64]) -> Option<f64> {
    kernel.blocks().is_none().then(|| reach[0])
}

/// Rows `rows` of the row-major `data` (`cols` columns), gathered in that
/// order (`what` names the copy in a memory error): keys and values in an
/// index's order, queries in their cells' order, the rows a truncated
/// request sends over every key.
pub(crate) fn gather_rows(
    (op, what): (&'static str, &'static str),
    data: &[f32],
    cols: usize,
    rows: impl ExactSizeIterator<Item = usize>,
) -> Result<Vec<f32>> {
    let len = rows.len() * cols;
    let out = rows.flat_map(|i| data[i * cols..(i + 1) * cols].iter().copied());
    try_collect(op, what, len, out)
}

/// What building an index gave.
pub(crate) enum Built<T> {
    Index(Arc<T>),
    /// It cannot prune (every key in one cell), or cannot be held (the
    /// backend's bound): remembered, so later requests with that reach do
    /// not try again.
    Useless,
    /// Its memory was not free: not remembered (it may be later).
    NoMemory,
}

/// The cache's entry: a reach and its index (`None`: found useless).
type Entry<T> = Option<(Vec<f64>, Option<Arc<T>>)>;

/// A key set's index for the last reach asked (at most one), or the reach
/// for which an index was found useless; shared by concurrent requests.
pub(crate) struct IndexCache<T> {
    slot: Mutex<Entry<T>>,
}

impl<T> Default for IndexCache<T> {
    fn default() -> Self {
        IndexCache {
            slot: Mutex::new(None),
        }
    }
}

impl<T> IndexCache<T> {
    /// The index for `reach`, built by `build` on first use and kept;
    /// `None` when it cannot serve. `build` runs without the lock held, so
    /// a request never waits on the lock while another builds (two may
    /// then build the same index; the first kept is shared); an index for
    /// another reach leaves the cache first, so its memory goes back once
    /// the requests using it end.
    pub(crate) fn get(
        &self,
        reach: Vec<f64>,
        build: impl FnOnce(&[f64]) -> Result<Built<T>>,
    ) -> Result<Option<Arc<T>>> {
        {
            let mut slot = self.lock();
            match &*slot {
                Some((r, ix)) if *r == reach => return Ok(ix.clone()),
                _ => *slot = None,
            }
        }
        let built = match build(&reach)? {
            Built::Index(ix) => Some(ix),
            Built::Useless => None,
            Built::NoMemory => return Ok(None),
        };
        let mut slot = self.lock();
        Ok(match &*slot {
            // Another request built the same index meanwhile: share it.
            Some((r, ix)) if *r == reach => ix.clone(),
            _ => {
                *slot = Some((reach, built.clone()));
                built
            }
        })
    }

    /// `bytes` of the kept index (0 without one).
    pub(crate) fn bytes(&self, bytes: impl Fn(&T) -> u64) -> u64 {
        self.lock()
            .as_ref()
            .and_then(|(_, ix)| ix.as_deref())
            .map_or(0, bytes)
    }

    fn lock(&self) -> MutexGuard<'_, Entry<T>> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }
}
