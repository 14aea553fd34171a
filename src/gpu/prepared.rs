//! Keys prepared on the GPU ([`PreparedKeys`]): key tiles and their value
//! rows in device buffers, cut by the plans of the ops (so `N` may exceed
//! one binding); each query uploads only its own rows. A key set keeps
//! them in buffers it owns, charged to the engine's budget, tiled so that
//! every op's plan accepts them; a one-shot call takes them from the pool,
//! tiled as its own plan cuts them, and keeps its host matrices borrowed
//! for the rows finished on the host. The ops are the same code either way.

use std::borrow::Cow;
use std::ops::Deref;
use std::sync::Arc;

use super::buffers::{Pooled, buffer_bytes, owned_upload, upload, wait_for_uploads};
use super::cells::{self, GpuIndex, HostSet, IndexCache};
use super::context::{ErrorScope, GpuContext};
use super::far::{
    HostKeys, far_matrix_rows, far_means, far_states, matrix_needs_host, means_need_host,
    states_need_host, tiny_cauchy_row,
};
use super::kernel_matrix::matrix_on_tiles;
use super::keys::{DeviceKeys, KeyTile, OnTiles, Rows, StoredTile, upload_tiles};
use super::knn::{check_gpu_k, knn_on_tiles};
use super::local_mean::{means_on_tiles, moments_on_tiles, states_on_tiles};
use super::plan::check_u32;
use super::submission::Submission;
use crate::backend::{Call, CallKind, MatrixMode, Moments, PreparedKeys, Query};
use crate::error::{Error, Result};
use crate::gpu::plan::Shape;
use crate::gpu::plan::{
    plan_kernel_matrix, plan_knn, plan_local_mean, plan_local_moments, resident_key_tile, tiles,
};
use crate::kernel::{Kernel, Metric, Profile};
use crate::matrix::{Matrix, reserve};
use crate::memory::Reservation;
use crate::space::{self, Built};
use crate::types::{Neighbours, RowNormalized, RowStates};

/// The device of prepared keys: shared with the engine (a key set, which
/// may outlive any one call) or borrowed for one call.
pub(super) enum Device<'a> {
    /// A key set's.
    Shared(Arc<GpuContext>),
    /// A call's.
    Borrowed(&'a GpuContext),
}

impl Deref for Device<'_> {
    type Target = GpuContext;
    fn deref(&self) -> &GpuContext {
        match self {
            Device::Shared(c) => c,
            Device::Borrowed(c) => c,
        }
    }
}

/// Keys and values, row-major on the host: borrowed from a call, or read
/// back from a key set's buffers.
type HostRows<'h> = (Cow<'h, [f32]>, Cow<'h, [f32]>);

/// Key tiles on the device and what the queries need of them. Dropping it
/// frees a key set's buffers (wgpu keeps a buffer alive until the
/// submissions that use it complete) and gives their bytes back to the
/// engine's memory budget, or returns a call's buffers to the pool.
pub(crate) struct GpuKeys<'a> {
    ctx: Device<'a>,
    tiles: Vec<StoredTile<'a>>,
    n: usize,
    d: usize,
    set_cols: Vec<usize>,
    key_tile: usize,
    /// A call's host matrices, keys first (the far rows read them); a key
    /// set reads its keys back from the device instead.
    host: Option<(Matrix<'a>, Vec<Matrix<'a>>)>,
    /// A key set's reservation; `None` for a call.
    held: Option<Reservation>,
    /// A key set's cell index (`cells.rs`), built on first use.
    index: IndexCache,
}

impl std::fmt::Debug for GpuKeys<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuKeys")
            .field("n", &self.n)
            .field("d", &self.d)
            .field("sets", &self.set_cols)
            .field("key_tile", &self.key_tile)
            .field("tiles", &self.tiles.len())
            .field("kept", &self.held.is_some())
            .finish_non_exhaustive()
    }
}

/// The key tiles of `keys` and every matrix of `sets`, cut every
/// `key_tile` rows, each tile's rows put on the device by `alloc`.
fn tiles_of<'p>(
    keys: &Matrix<'_>,
    sets: &[Matrix<'_>],
    key_tile: usize,
    alloc: &mut dyn FnMut(&[f32]) -> Result<Pooled<'p>>,
) -> Result<Vec<StoredTile<'p>>> {
    let key_rows = |a, b| keys.row_range(a, b);
    let set_rows: Vec<_> = sets.iter().map(|v| move |a, b| v.row_range(a, b)).collect();
    let set_rows: Vec<&Rows<'_>> = set_rows.iter().map(|f| f as &Rows<'_>).collect();
    upload_tiles(keys.rows(), key_tile, &key_rows, &set_rows, alloc)
}

impl GpuKeys<'static> {
    /// A key set: uploads `keys` and every value matrix into buffers of its
    /// own, tiled so that every op's plan accepts the tiles, after charging
    /// their size to the engine's budget.
    pub(crate) fn kept(
        ctx: &Arc<GpuContext>,
        keys: &Matrix<'_>,
        sets: &[Matrix<'_>],
    ) -> Result<Self> {
        const OP: &str = "prepare";
        let (n, d) = (keys.rows(), keys.cols());
        check_u32(OP, "key rows", n)?;
        let set_cols: Vec<usize> = sets.iter().map(Matrix::cols).collect();
        let key_tile = resident_key_tile(&ctx.limits, &ctx.caps, n, d, &set_cols)?;
        let bytes: u64 = tiles(n, key_tile)
            .map(|(a, b)| {
                let len = b - a;
                buffer_bytes(len * d) + set_cols.iter().map(|&q| buffer_bytes(len * q)).sum::<u64>()
            })
            .sum();
        let held = ctx.pool.reserve(OP, "resident keys and values", bytes)?;
        let scope = ctx.scope(
            OP,
            format!("N={n} d={d} value columns={set_cols:?} key tile={key_tile}"),
        )?;
        let tiles = tiles_of(keys, sets, key_tile, &mut |data| owned_upload(ctx, data))?;
        wait_for_uploads(ctx, &scope)?;
        scope.finish(ctx)?;
        Ok(GpuKeys {
            ctx: Device::Shared(Arc::clone(ctx)),
            tiles,
            n,
            d,
            set_cols,
            key_tile,
            host: None,
            held: Some(held),
            index: IndexCache::default(),
        })
    }
}

impl<'a> GpuKeys<'a> {
    /// Keys for one `call`: uploaded from the pool in the key tiles of that
    /// call's plan, the host matrices kept borrowed, nothing reserved.
    pub(crate) fn for_call(
        ctx: &'a GpuContext,
        keys: &Matrix<'a>,
        sets: &[Matrix<'a>],
        call: &Call<'_>,
    ) -> Result<Self> {
        let op = call.op;
        let (m, n, d) = (call.rows, keys.rows(), keys.cols());
        let (limits, caps) = (&ctx.limits, &ctx.caps);
        if let CallKind::Knn { k, .. } = call.kind {
            check_gpu_k(k)?;
        }
        check_u32(op, "query rows", m)?;
        check_u32(op, "key rows", n)?;
        let shape = Shape { m, n, d, q: 0 };
        let key_tile = match call.kind {
            CallKind::Means { cols } => {
                plan_local_mean(limits, caps, Shape { q: cols, ..shape })?.key_tile
            }
            CallKind::Moments(layout) => {
                plan_local_moments(limits, caps, (m, n), &layout)?.key_tile
            }
            CallKind::Knn { k, differences } => {
                plan_knn(limits, caps, shape, (k, differences))?.key_tile
            }
            CallKind::Matrix => plan_kernel_matrix(limits, caps, shape)?.1.key_tile,
        };
        let scope = ctx.scope(op, format!("M={m} N={n} d={d} (keys)"))?;
        let storage = wgpu::BufferUsages::STORAGE;
        let tiles = tiles_of(keys, sets, key_tile, &mut |data| {
            upload(ctx, op, data, storage)
        })?;
        scope.finish(ctx)?;
        Ok(GpuKeys {
            ctx: Device::Borrowed(ctx),
            tiles,
            n,
            d,
            set_cols: sets.iter().map(Matrix::cols).collect(),
            key_tile,
            host: Some((keys.clone(), sets.to_vec())),
            held: None,
            index: IndexCache::default(),
        })
    }

    /// Loans of the key tiles, with value matrix `set` as their values
    /// (the keys themselves stand in when there is none: the shader reads
    /// no values then).
    fn key_tiles(&self, set: Option<usize>) -> Vec<KeyTile<'static>> {
        self.tiles.iter().map(|t| t.view(set)).collect()
    }

    /// A call of `queries` under `scope` against `tiles` as an op binds
    /// them, with a value matrix of `q` columns.
    fn call<'t>(
        &'t self,
        scope: &'t ErrorScope,
        queries: &'t Matrix<'t>,
        tiles: &'t [KeyTile<'static>],
        q: usize,
    ) -> OnTiles<'t, 't> {
        OnTiles {
            ctx: &self.ctx,
            scope,
            queries,
            keys: DeviceKeys {
                tiles,
                d: self.d,
                q,
            },
        }
    }

    /// Fails (rather than computing with tiles the plan does not allow)
    /// when a query's plan wants smaller key tiles than those prepared.
    fn check_tile(&self, op: &'static str, planned: usize) -> Result<usize> {
        if planned < self.key_tile.min(self.n) {
            return Err(Error::Unsupported {
                op,
                backend: "gpu",
                reason: format!(
                    "this query needs key tiles of at most {planned} keys; the key set holds tiles of {} (raise TileLimits::buffer_bytes)",
                    self.key_tile
                ),
            });
        }
        Ok(self.key_tile)
    }

    /// The keys and the values of `set`, row-major on the host, for the
    /// rare rows finished there (far.rs): a call's own matrices, or a key
    /// set's read back from the device (never on the common path).
    fn host_rows(&self, scope: &ErrorScope, set: Option<usize>) -> Result<HostRows<'_>> {
        if let Some((keys, sets)) = &self.host {
            let values = set.map_or(&[][..], |s| sets[s].as_slice());
            return Ok((Cow::Borrowed(keys.as_slice()), Cow::Borrowed(values)));
        }
        let values = set.filter(|&s| self.set_cols[s] > 0);
        let which: Vec<_> = std::iter::once(None).chain(values.map(Some)).collect();
        let mut read = self.read_back(scope, &which)?.into_iter();
        let keys = read.next().unwrap_or_default();
        Ok((
            Cow::Owned(keys),
            Cow::Owned(read.next().unwrap_or_default()),
        ))
    }

    /// A key set's keys (`None`) and value matrices (`Some(set)`), as
    /// `which` lists them, read back from its tiles, row-major: one
    /// submission a tile for all of them.
    fn read_back(&self, scope: &ErrorScope, which: &[Option<usize>]) -> Result<Vec<Vec<f32>>> {
        let ctx = &*self.ctx;
        let cols = |w: &Option<usize>| w.map_or(self.d, |s| self.set_cols[s]);
        let mut out = which
            .iter()
            .map(|w| {
                let what = if w.is_some() {
                    "values read back"
                } else {
                    "keys read back"
                };
                reserve(
                    scope.op,
                    what,
                    (self.n as u64).saturating_mul(cols(w) as u64),
                )
            })
            .collect::<Result<Vec<_>>>()?;
        for t in &self.tiles {
            let sources: Vec<_> = which
                .iter()
                .map(|w| {
                    let buf = w.map_or(&t.keys, |s| &t.sets[s]);
                    (buf.buffer(), (t.len * cols(w) * 4) as u64)
                })
                .collect();
            let read = Submission::new(ctx).submit_and_read(ctx, scope, &sources)?;
            for (o, r) in out.iter_mut().zip(&read) {
                o.extend_from_slice(r);
            }
        }
        Ok(out)
    }

    /// The reach of `kernel`'s request when this key set can be indexed
    /// for it: a key set (not a one-shot call) and [`cells::reach_for`].
    fn index_reach(&self, kernel: &Kernel, exclude_self: bool) -> Option<Vec<f64>> {
        self.held.as_ref()?;
        cells::reach_for(kernel, (self.n, self.d), exclude_self)
    }

    /// A key set's cell index for `kernel`'s request (`cells.rs`), built
    /// and kept on first use; `None` when the request sweeps every key (a
    /// one-shot call, [`cells::reach_for`], a layout that cannot prune,
    /// sorted tiles wider than a binding, or device memory not free).
    fn index(
        &self,
        kernel: &Kernel,
        exclude_self: bool,
        scope: &ErrorScope,
    ) -> Result<Option<Arc<GpuIndex>>> {
        let Some(reach) = self.index_reach(kernel, exclude_self) else {
            return Ok(None);
        };
        let ctx = &*self.ctx;
        self.index.get(reach, |reach| {
            if !GpuIndex::fits(ctx, self.n, self.d, &self.set_cols) {
                return Ok(Built::Useless);
            }
            let bytes = GpuIndex::device_bytes(self.n, self.d, &self.set_cols);
            // At most half of the device memory free now: the rest stays
            // for requests.
            let Some(held) = ctx.pool.reserve_if_free(bytes, bytes) else {
                return Ok(Built::NoMemory);
            };
            let built = (|| {
                let which: Vec<_> = std::iter::once(None)
                    .chain((0..self.set_cols.len()).map(Some))
                    .collect();
                let mut read = self.read_back(scope, &which)?.into_iter();
                let host = HostSet {
                    keys: read.next().unwrap_or_default(),
                    sets: read.zip(self.set_cols.iter().copied()).collect(),
                    n: self.n,
                    d: self.d,
                };
                GpuIndex::build(ctx, scope, &host, reach, held)
            })();
            match built {
                // No host memory for the sorting: the request runs over
                // every key, as without room on the device.
                Err(Error::TooLarge { .. }) => Ok(Built::NoMemory),
                other => other,
            }
        })
    }

    fn host<'h>(&self, keys: &'h [f32], values: &'h [f32], q: usize) -> HostKeys<'h> {
        HostKeys {
            keys,
            values,
            n: self.n,
            d: self.d,
            q,
        }
    }

    /// The shape of a query of `m` rows with `q` value columns.
    fn shape(&self, m: usize, q: usize) -> Shape {
        Shape {
            m,
            n: self.n,
            d: self.d,
            q,
        }
    }

    fn sizes(&self, m: usize, what: &str) -> String {
        let kind = if self.held.is_some() {
            " (key set)"
        } else {
            ""
        };
        format!("M={m} N={} d={} {what}{kind}", self.n, self.d)
    }
}

impl PreparedKeys for GpuKeys<'_> {
    fn local_mean(&self, query: &Query<'_>, set: usize) -> Result<RowNormalized> {
        const OP: &str = "local_mean";
        let (kernel, queries) = (query.kernel, query.rows);
        debug_assert!(!query.exclude_self, "leave-one-out takes row states");
        if kernel.profile() == Profile::Cauchy {
            // A cauchy row can have mass too small for f32 without being
            // empty; its state shows it (`needs_exact`), its mean would not.
            return Ok(self.row_states(query, Some(set))?.means());
        }
        if space::truncated(kernel) && self.index_reach(kernel, false).is_some() {
            // A truncated request over the index: rows beyond its reach
            // show in their states.
            return Ok(self.row_states(query, Some(set))?.means());
        }
        let (ctx, m, q) = (&*self.ctx, queries.rows(), self.set_cols[set]);
        check_u32(OP, "query rows", m)?;
        let mut plan = plan_local_mean(&ctx.limits, &ctx.caps, self.shape(m, q))?;
        plan.key_tile = self.check_tile(OP, plan.key_tile)?;
        let scope = ctx.scope(OP, self.sizes(m, &format!("q={q}")))?;
        let mut out = match self.index(kernel, false, &scope)? {
            Some(ix) => {
                let sorted = ix.sort(OP, kernel, queries)?;
                let (rows, tiles) = (sorted.matrix(OP)?, [ix.tile(Some(set))]);
                let call = self.call(&scope, &rows, &tiles, q);
                sorted.unsort_rows(means_on_tiles(&call, kernel, &plan, Some(&sorted))?)
            }
            None => {
                let tiles = self.key_tiles(Some(set));
                let call = self.call(&scope, queries, &tiles, q);
                means_on_tiles(&call, kernel, &plan, None)?
            }
        };
        if means_need_host(kernel, &out) {
            let (kh, vh) = self.host_rows(&scope, Some(set))?;
            far_means(kernel, queries, &self.host(&kh, &vh, q), &mut out);
        }
        scope.finish(ctx)?;
        Ok(out)
    }

    fn row_states(&self, query: &Query<'_>, set: Option<usize>) -> Result<RowStates> {
        const OP: &str = "row_states";
        let (kernel, queries, exclude_self) = (query.kernel, query.rows, query.exclude_self);
        let (ctx, m) = (&*self.ctx, queries.rows());
        let q = set.map_or(0, |s| self.set_cols[s]);
        check_u32(OP, "query rows", m)?;
        let mut plan = plan_local_mean(&ctx.limits, &ctx.caps, self.shape(m, q))?;
        plan.key_tile = self.check_tile(OP, plan.key_tile)?;
        let scope = ctx.scope(OP, self.sizes(m, &format!("q={q}")))?;
        let mut out = match self.index(kernel, exclude_self, &scope)? {
            Some(ix) => {
                let sorted = ix.sort(OP, kernel, queries)?;
                let (rows, tiles) = (sorted.matrix(OP)?, [ix.tile(set)]);
                let call = self.call(&scope, &rows, &tiles, q);
                let st = states_on_tiles(&call, kernel, &plan, (false, Some(&sorted)))?;
                let mut states = sorted.unsort_states(OP, &st)?;
                // A truncated (gaussian) request's rows whose nearest key
                // lies too far for the index's reach: over every key.
                let beyond = space::rows_beyond_reach(kernel, self.n, &states);
                if !beyond.is_empty() {
                    let d = self.d;
                    let what = (OP, "rows beyond reach");
                    let sub =
                        space::gather_rows(what, queries.as_slice(), d, beyond.iter().copied())?;
                    let view = ndarray::ArrayView2::from_shape((beyond.len(), d), &sub)
                        .expect("rows·d floats"); // ok: built so
                    let sub = Matrix::check(OP, "queries", view)?;
                    let tiles = self.key_tiles(set);
                    let call = self.call(&scope, &sub, &tiles, q);
                    let full = states_on_tiles(&call, kernel, &plan, (false, None))?;
                    space::put_rows(&mut states, beyond, &full);
                }
                states
            }
            None => {
                let tiles = self.key_tiles(set);
                let call = self.call(&scope, queries, &tiles, q);
                states_on_tiles(&call, kernel, &plan, (exclude_self, None))?
            }
        };
        if states_need_host(kernel, &out) {
            let (kh, vh) = self.host_rows(&scope, set)?;
            far_states(
                kernel,
                queries,
                &self.host(&kh, &vh, q),
                exclude_self,
                &mut out,
            );
        }
        scope.finish(ctx)?;
        Ok(out)
    }

    fn local_moments(&self, query: &Query<'_>, pass: Moments) -> Result<RowNormalized> {
        const OP: &str = "local_moments";
        let (kernel, queries) = (query.kernel, query.rows);
        kernel.require_euclidean(OP)?;
        let Moments { layout, set } = pass;
        let (ctx, m) = (&*self.ctx, queries.rows());
        check_u32(OP, "query rows", m)?;
        check_u32(OP, "layout columns", layout.cols())?;
        let mut plan = plan_local_moments(&ctx.limits, &ctx.caps, (m, self.n), &layout)?;
        plan.key_tile = self.check_tile(OP, plan.key_tile)?;
        let scope = ctx.scope(OP, self.sizes(m, &format!("q={}", layout.qy)))?;
        let tiles = self.key_tiles(set);
        let call = self.call(&scope, queries, &tiles, layout.qy);
        let mut out = moments_on_tiles(&call, kernel, &plan, layout)?;
        if means_need_host(kernel, &out) {
            let (kh, vh) = self.host_rows(&scope, set)?;
            let (d, qy) = (self.d, layout.qy);
            let keys = (self.n, |j, k| kh[j * d + k], |j, c| vh[j * qy + c]);
            layout.finish_far_rows(kernel, queries.as_slice(), keys, &mut out);
        }
        scope.finish(ctx)?;
        Ok(out)
    }

    fn knn(&self, queries: &Matrix<'_>, k: usize, metric: &Metric) -> Result<Neighbours> {
        const OP: &str = "knn";
        let (ctx, m) = (&*self.ctx, queries.rows());
        check_gpu_k(k)?;
        check_u32(OP, "query rows", m)?;
        let differences = !metric.is_euclidean();
        let mut plan = plan_knn(&ctx.limits, &ctx.caps, self.shape(m, 0), (k, differences))?;
        plan.key_tile = self.check_tile(OP, plan.key_tile)?;
        let scope = ctx.scope(OP, self.sizes(m, &format!("k={k}")))?;
        let tiles = self.key_tiles(None);
        let call = self.call(&scope, queries, &tiles, 0);
        let out = knn_on_tiles(&call, (self.n, metric), &plan)?;
        scope.finish(ctx)?;
        Ok(out)
    }

    fn kernel_matrix(&self, query: &Query<'_>, mode: MatrixMode) -> Result<RowNormalized> {
        const OP: &str = "kernel_matrix";
        let (kernel, queries) = (query.kernel, query.rows);
        kernel.require_euclidean(OP)?;
        let (ctx, m, n) = (&*self.ctx, queries.rows(), self.n);
        check_u32(OP, "query rows", m)?;
        // One set of key tiles and query tiles serves both the row sums and
        // the blocks.
        let (mplan, mut lplan) = plan_kernel_matrix(&ctx.limits, &ctx.caps, self.shape(m, 0))?;
        lplan.key_tile = self.check_tile(OP, lplan.key_tile)?;
        let scope = ctx.scope(OP, self.sizes(m, &format!("mode={mode:?}")))?;
        let tiles = self.key_tiles(None);
        let call = self.call(&scope, queries, &tiles, 0);
        let mut out = matrix_on_tiles(&call, kernel, mode, (&mplan, &lplan))?;
        scope.finish(ctx)?;
        // Rows of D⁻¹K left without mass because every key lies beyond the
        // f32 distance range are finished on the host (docs/numerics.md,
        // "Far rows").
        if matrix_needs_host(kernel, mode) {
            let tiny: Vec<bool> = if kernel.profile() == Profile::Cauchy {
                let st = self.row_states(query, None)?;
                st.sum
                    .iter()
                    .zip(&st.max_log_weight)
                    .map(|(&s, &lw)| tiny_cauchy_row(kernel, s, lw))
                    .collect()
            } else {
                vec![false; m]
            };
            let far = tiny.iter().any(|&t| t) || out.iter().any(|v| v.is_nan());
            if far {
                let scope = ctx.scope(OP, self.sizes(m, "far rows"))?;
                let (kh, _) = self.host_rows(&scope, None)?;
                scope.finish(ctx)?;
                let host = self.host(&kh, &[], 0);
                far_matrix_rows(kernel, queries, &host, (mode, &tiny), &mut out);
            }
        }
        // D⁻¹K rows with no mass are NaN (finite inputs cannot produce NaN otherwise).
        let empty = if mode == MatrixMode::RowNormalized {
            out.chunks_exact(n).filter(|r| r[0].is_nan()).count()
        } else {
            0
        };
        Ok(RowNormalized::from_parts(m, n, out, empty))
    }

    fn check_k(&self, k: usize) -> Result<()> {
        check_gpu_k(k)
    }

    fn bytes(&self) -> u64 {
        let set = self.held.as_ref().map_or(0, Reservation::bytes);
        set.saturating_add(self.index.bytes(GpuIndex::bytes))
    }
}
