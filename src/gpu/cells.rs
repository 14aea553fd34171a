//! A GPU key set's cell index: for a kernel of bounded reach (a compact
//! profile, a product kernel whose blocks are all compact, or a radial
//! gaussian truncated where far keys weigh nothing; Euclidean) in up to
//! [`MAX_D`] coordinates, the keys and every value matrix sorted by grid
//! cell or k-d leaf (`space.rs`) into one key tile of buffers of their
//! own. A request sorts its queries the same way; each workgroup of
//! `local_mean.wgsl` takes `LOCAL_MEAN_WG·R` consecutive sorted queries
//! and sweeps only the key ranges within reach of them (its spans), so a
//! query visits the keys near it, not all of them. The states come back
//! in sorted order and are put back in the request's.
//!
//! The index depends on the bandwidth: built (keys read back once, sorted
//! on the host, uploaded) on the first request that can use it and kept
//! ([`IndexCache`], one entry, replaced when a request brings another
//! reach), shared by concurrent requests, its device bytes charged to the
//! engine's budget only when they fit with as much again left free, else
//! the request runs over all keys as without an index. One-shot calls,
//! leave-one-out row states, local moments, kNN and kernel matrices keep
//! the brute-force sweep; so do sets whose sorted keys or values would
//! not fit one binding.
//!
//! Spans, per query tile: each workgroup's rows are cut into runs of one
//! cell (leaf); each run's box widened by the reach gives key ranges
//! (`Layout::ranges`), merged over the workgroup's runs, cut into pieces
//! and dealt into dispatch windows of at most `dispatch_keys` keys each
//! (whole chunks of `C` counted, the padding a range's last stage takes),
//! so one invocation's keys stay within the plan's loop budget and work
//! cap as a brute-force window's do.

use std::sync::Arc;

use rayon::prelude::*;

use super::buffers::{Pooled, owned_upload, upload, wait_for_uploads};
use super::context::{ErrorScope, GpuContext};
use super::keys::{KeyTile, StoredTile};
use super::plan::local_mean::IP_MIN_D;
use super::plan::{LOCAL_MEAN_WG, LocalMeanPlan, binding_floats};
use crate::error::{Error, Result};
use crate::grid;
use crate::kernel::Kernel;
use crate::matrix::{Matrix, ensure_room, try_collect};
use crate::memory::Reservation;
use crate::space::{self, Built, Layout};
use crate::types::{RowNormalized, RowStates};

/// Most coordinates a GPU key set is indexed in: from `IP_MIN_D` on, its
/// brute-force sweep measures by inner-product tiles, which an index that
/// prunes little would lose to (as on the CPU).
pub(crate) const MAX_D: usize = IP_MIN_D - 1;

/// Keys and values sorted by cell (leaf) for one reach, in one key tile.
pub(crate) struct GpuIndex {
    /// The reach the index was built for (the cache's key).
    reach: Vec<f64>,
    layout: Layout,
    tile: StoredTile<'static>,
    /// The sorted tile's device bytes on the engine's budget.
    held: Reservation,
}

/// Keys and value matrices read back from a key set, row-major: what an
/// index is built from.
pub(crate) struct HostSet {
    pub keys: Vec<f32>,
    pub sets: Vec<(Vec<f32>, usize)>,
    pub n: usize,
    pub d: usize,
}

impl GpuIndex {
    /// Whether keys of `n` rows in `d` coordinates with value matrices of
    /// `set_cols` columns fit one key tile on `ctx` (each matrix one
    /// binding).
    pub(crate) fn fits(ctx: &GpuContext, n: usize, d: usize, set_cols: &[usize]) -> bool {
        let floats = binding_floats(&ctx.limits, &ctx.caps);
        let widest = set_cols.iter().copied().fold(d, usize::max);
        n.checked_mul(widest).is_some_and(|f| f <= floats)
    }

    /// The device bytes of an index of `n` keys in `d` coordinates with
    /// value matrices of `set_cols` columns.
    pub(crate) fn device_bytes(n: usize, d: usize, set_cols: &[usize]) -> u64 {
        let floats = |c: usize| (n as u64).saturating_mul(c as u64).saturating_mul(4).max(4);
        set_cols
            .iter()
            .fold(floats(d), |b, &q| b.saturating_add(floats(q)))
    }

    /// The index of `host` for `reach` on `ctx`, its device bytes already
    /// charged to `held`: the layout built on the host, the keys and every
    /// value matrix permuted by it and uploaded.
    pub(crate) fn build(
        ctx: &GpuContext,
        scope: &ErrorScope,
        host: &HostSet,
        reach: &[f64],
        held: Reservation,
    ) -> Result<Built<GpuIndex>> {
        let (op, n, d) = (scope.op, host.n, host.d);
        if ensure_room(op, "cell index", Layout::bytes(n, d).1).is_err() {
            return Ok(Built::NoMemory);
        }
        // Column-major, as the layouts take their points.
        let xt = try_collect(
            op,
            "keys by coordinate",
            n * d,
            (0..d).flat_map(|k| (0..n).map(move |i| host.keys[i * d + k])),
        )?;
        let Some(layout) = Layout::build(&xt, (n, n, d), reach) else {
            return Ok(Built::Useless);
        };
        drop(xt);
        let permute = |rows: &[f32], cols: usize| {
            let order = layout.order().iter().map(|&i| i as usize);
            space::gather_rows((op, "sorted keys"), rows, cols, order)
        };
        let keys = owned_upload(ctx, &permute(&host.keys, d)?)?;
        let sets = host
            .sets
            .iter()
            .map(|(v, q)| owned_upload(ctx, &permute(v, *q)?))
            .collect::<Result<Vec<_>>>()?;
        wait_for_uploads(ctx, scope)?;
        Ok(Built::Index(Arc::new(GpuIndex {
            reach: reach.to_vec(),
            layout,
            tile: StoredTile {
                start: 0,
                len: n,
                keys,
                sets,
            },
            held,
        })))
    }

    /// The sorted key tile with value matrix `set` (the keys when `None`).
    pub(crate) fn tile(&self, set: Option<usize>) -> KeyTile<'static> {
        self.tile.view(set)
    }

    /// `queries` sorted by cell (leaf) for a request of `kernel`.
    pub(crate) fn sort<'i>(
        &'i self,
        op: &'static str,
        kernel: &Kernel,
        queries: &Matrix<'_>,
    ) -> Result<SortedQueries<'i>> {
        let (m, d) = (queries.rows(), queries.cols());
        ensure_room(
            op,
            "sorted queries",
            (m as u64).saturating_mul(16 + 4 * d as u64),
        )?;
        let rows = queries.as_slice();
        let keyed = self.layout.sorted_queries(rows, d);
        let order = keyed.iter().map(|&(_, i)| i as usize);
        let sorted = space::gather_rows((op, "sorted queries"), rows, d, order)?;
        Ok(SortedQueries {
            index: self,
            radius: space::radius(kernel, &self.reach),
            d,
            cells: keyed.iter().map(|&(c, _)| c).collect(),
            order: keyed.into_iter().map(|(_, i)| i).collect(),
            rows: sorted,
        })
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.held.bytes()
    }
}

/// The key ranges the workgroups of one query tile visit, as
/// `local_mean.wgsl`'s `spans` reads them, swept in `windows` dispatches
/// (`local_mean.rs`).
pub(crate) struct Spans<'p> {
    pub buffer: Pooled<'p>,
    pub windows: usize,
}

/// A request's queries sorted by the cells (leaves) of an index.
pub(crate) struct SortedQueries<'i> {
    index: &'i GpuIndex,
    /// A radial kernel's reach: k-d leaves are pruned by distance too.
    radius: Option<f64>,
    d: usize,
    /// Each sorted row's cell (leaf).
    cells: Vec<u64>,
    /// Sorted position → the request's row.
    order: Vec<u32>,
    /// The queries in sorted order, row-major.
    rows: Vec<f32>,
}

impl SortedQueries<'_> {
    /// The sorted queries as a matrix.
    pub(crate) fn matrix(&self, op: &'static str) -> Result<Matrix<'_>> {
        let view = ndarray::ArrayView2::from_shape((self.order.len(), self.d), &self.rows)
            .expect("rows·d floats"); // ok: built so
        Matrix::check(op, "queries", view)
    }

    /// The key ranges within reach of sorted rows `rows` (a workgroup's),
    /// sorted and merged: each run of rows in one cell asks the layout for
    /// the ranges within reach of its box.
    fn group_ranges(&self, (a, b): (usize, usize), out: &mut Vec<(usize, usize)>) {
        let (d, reach) = (self.d, &self.index.reach);
        out.clear();
        let mut start = a;
        for i in a + 1..=b {
            if i == b || self.cells[i] != self.cells[start] {
                let (lo, hi) = grid::query_box(&self.rows[start * d..i * d], d, reach);
                self.index.layout.ranges(&lo, &hi, self.radius, out);
                start = i;
            }
        }
        out.sort_unstable();
        let mut merged = 0;
        for k in 0..out.len() {
            let r = out[k];
            if r.0 >= r.1 {
                continue;
            }
            if merged > 0 && r.0 <= out[merged - 1].1 {
                out[merged - 1].1 = out[merged - 1].1.max(r.1);
            } else {
                out[merged] = r;
                merged += 1;
            }
        }
        out.truncate(merged);
    }

    /// The spans of the workgroups of sorted rows `r0..r1` (one query
    /// tile) under `plan`, uploaded: per workgroup its key ranges, dealt
    /// into windows of at most `plan.dispatch_keys` keys (whole chunks).
    pub(crate) fn spans<'p>(
        &self,
        ctx: &'p GpuContext,
        op: &'static str,
        (r0, r1): (usize, usize),
        plan: &LocalMeanPlan,
    ) -> Result<Spans<'p>> {
        let per_group = LOCAL_MEAN_WG * plan.rows_per_thread;
        let groups = (r1 - r0).div_ceil(per_group);
        let chunk = plan.chunk_keys().max(1);
        // A piece's cost: its keys padded to whole chunks.
        let cap = (plan.dispatch_keys / chunk * chunk).max(chunk);
        let cost = |(a, b): (usize, usize)| (b - a).div_ceil(chunk) * chunk;
        // Per workgroup, its pieces in window order, each with its window.
        let dealt: Vec<Vec<(u32, u32, usize)>> = (0..groups)
            .into_par_iter()
            .map_init(Vec::new, |ranges, g| {
                let a = r0 + g * per_group;
                self.group_ranges((a, (a + per_group).min(r1)), ranges);
                let (mut window, mut used) = (0, 0);
                let mut pieces = Vec::new();
                for &(ka, kb) in ranges.iter() {
                    for pa in (ka..kb).step_by(cap) {
                        let piece = (pa, (pa + cap).min(kb));
                        if used + cost(piece) > cap {
                            window += 1;
                            used = 0;
                        }
                        used += cost(piece);
                        pieces.push((piece.0 as u32, piece.1 as u32, window));
                    }
                }
                pieces
            })
            .collect();
        let windows = dealt
            .iter()
            .filter_map(|p| p.last().map(|l| l.2 + 1))
            .max()
            .unwrap_or(1);
        // Heads (window-major), then the ranges of each head.
        let heads = 2 * windows * groups;
        let ranges: usize = dealt.iter().map(Vec::len).sum();
        let mut words = vec![0u32; heads];
        words.reserve(2 * ranges);
        for (g, pieces) in dealt.iter().enumerate() {
            // Pieces come in window order: each window's are a run.
            let mut rest = &pieces[..];
            for w in 0..windows {
                let count = rest.iter().take_while(|p| p.2 == w).count();
                let h = 2 * (w * groups + g);
                words[h] = words.len() as u32;
                words[h + 1] = count as u32;
                words.extend(rest[..count].iter().flat_map(|p| [p.0, p.1]));
                rest = &rest[count..];
            }
        }
        if words.len() > binding_floats(&ctx.limits, &ctx.caps) {
            return Err(Error::Unsupported {
                op,
                backend: "gpu",
                reason: format!(
                    "the key ranges of {} query rows take {} words, more than one binding holds (fewer query rows a request, or a smaller bandwidth)",
                    r1 - r0,
                    words.len()
                ),
            });
        }
        let buffer = upload(ctx, op, &words, wgpu::BufferUsages::STORAGE)?;
        Ok(Spans { buffer, windows })
    }

    /// Row states computed for the sorted rows, put back in the request's
    /// order.
    pub(crate) fn unsort_states(&self, op: &'static str, sorted: &RowStates) -> Result<RowStates> {
        let q = sorted.weighted.ncols();
        let mut out = RowStates::empty(op, self.order.len(), q)?;
        space::put_rows(&mut out, self.order.iter().map(|&i| i as usize), sorted);
        Ok(out)
    }

    /// Normalized rows computed for the sorted rows, put back in the
    /// request's order.
    pub(crate) fn unsort_rows(&self, sorted: RowNormalized) -> RowNormalized {
        let mut values = ndarray::Array2::zeros(sorted.values.dim());
        for (p, &i) in self.order.iter().enumerate() {
            values.row_mut(i as usize).assign(&sorted.values.row(p));
        }
        RowNormalized {
            values,
            empty_rows: sorted.empty_rows,
        }
    }
}

/// A GPU key set's index cache.
pub(crate) type IndexCache = space::IndexCache<GpuIndex>;

/// The reach of `kernel` when a GPU key set of `n` keys in `d`
/// coordinates can be indexed for it ([`space::reach_for`] up to
/// [`MAX_D`], every coordinate bounded). A product kernel with a gaussian
/// block is not: its far rows' states carry the `f32` rounding of a large
/// `m` (hundreds of bandwidths away along the gaussian block) into each
/// merge of dispatch windows, and the spans' windows are not the
/// brute-force sweep's, so such rows would differ from the one-shot op's
/// more often (docs/numerics.md, "Far rows").
pub(crate) fn reach_for(
    kernel: &Kernel,
    (n, d): (usize, usize),
    exclude_self: bool,
) -> Option<Vec<f64>> {
    space::reach_for(kernel, (n, d), exclude_self, MAX_D)
        .filter(|reach| reach.iter().all(|r| r.is_finite()))
}
