//! Dispatch of `shaders/local_mean.wgsl`: query tiles × value-column
//! passes × key tiles, merged on the device.

use crate::error::Result;
use crate::gpu::plan::Shape;
use crate::gpu::plan::local_mean::{IP_MIN_D, ip_queries_resident};
use crate::gpu::plan::{LOCAL_MEAN_WG, LocalMeanPlan, plan_local_mean, tiles};
use crate::kernel::{Kernel, Profile};
use crate::matrix::{Matrix, alloc_output, try_collect};
use crate::types::{MomentLayout, RowNormalized, RowStates};

use super::buffers::{Pooled, upload};
use super::cells::{SortedQueries, Spans};
use super::context::GpuContext;
use super::dispatch::{Bindings, Dispatch, Program, Window, Workgroups, partial_states};
use super::keys::{DeviceKeys, OnTiles, upload_key_tiles};
use super::pipelines::PipelineKey;
use super::plan::check_u32;
use super::shaders::{EXCLUDE_SELF, FIRST_TILE, LAST_TILE, ShaderId, WeightForm, block_scales};
use super::submission::Submission;

/// Value-column passes recorded into one submission: bounds the memory of
/// their parameters and bind groups however many value columns there are.
const PASSES_PER_SUBMIT: usize = 64;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    keys: u32,
    q_stride: u32,
    c0: u32,
    inv_h2: f32,
    flags: u32,
    row0: u32,
    key0: u32,
    kbase: u32,
    split_keys: u32,
    splits: u32,
    /// With spans: the window of spans this dispatch sweeps.
    span_window: u32,
    /// A product kernel's `1/h_b` (`shaders::block_scales`).
    block_inv_h: [[f32; 4]; 2],
}

/// What every pass of one call of the local-mean shaders shares: the
/// kernel, its plan, the key tiles, and what the passes compute.
pub(crate) struct Sweep<'a, 'p> {
    pub op: &'static str,
    pub kernel: &'a Kernel,
    pub plan: &'a LocalMeanPlan,
    pub keys: &'a DeviceKeys<'a, 'p>,
    /// Value columns of the passes (0: row sums only): the keys' value
    /// columns, or a moment layout's.
    pub q: usize,
    /// What the passes compute.
    pub kind: PassKind,
    /// Leave each row's own key out (the queries are the keys).
    pub exclude_self: bool,
    /// Measure by differences even where the inner-product tiles would
    /// serve (d ≥ 32), and keep the row maximum `m` the nearest key's
    /// log-weight exactly (`WeightForm::Exact`, not the pre-scaled
    /// coordinates of `WeightForm::Scaled`): for a pass whose `m` another
    /// shader weighs keys against (the normalized kernel matrix computes
    /// each entry's `t` by differences, and its nearest key must get `e⁰`).
    pub differences: bool,
    /// A key set's cell index and the queries sorted by it: each query
    /// tile's workgroups sweep only their spans of the index's sorted key
    /// tile (the sweep's one key tile), without key splits.
    pub index: Option<&'a SortedQueries<'a>>,
}

/// One query tile of a [`Sweep`]: its rows and the buffers its passes
/// bind.
pub(crate) struct QueryTile<'a, 'p> {
    /// Query rows in the tile, and the global index of the first.
    pub rows: usize,
    pub row0: usize,
    pub queries: &'a Pooled<'p>,
    pub state: &'a Pooled<'p>,
    pub out: &'a Pooled<'p>,
    pub counter: &'a Pooled<'p>,
    /// Its workgroups' key ranges, when the sweep has an index.
    pub spans: Option<&'a Spans<'p>>,
}

/// What a local-mean-shader pass computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PassKind {
    /// Local means or row states (`local_mean.wgsl`).
    Mean,
    /// Local means with masked distances (`local_mean.wgsl`, `MASKED`):
    /// missing coordinates stored as `f32::MAX`.
    Masked,
    /// Local moments of this layout (`local_moments.wgsl`, whose `q`
    /// columns are the layout's).
    Moments(MomentLayout),
}

impl<'a, 'p> Sweep<'a, 'p> {
    /// Local means (or row states) of `keys` with `kernel`, planned by
    /// `plan`, for `op`: the keys' value columns, every key, by the
    /// fastest distances.
    pub(crate) fn new(
        op: &'static str,
        kernel: &'a Kernel,
        plan: &'a LocalMeanPlan,
        keys: &'a DeviceKeys<'a, 'p>,
    ) -> Self {
        Sweep {
            op,
            kernel,
            plan,
            keys,
            q: keys.q,
            kind: PassKind::Mean,
            exclude_self: false,
            differences: false,
            index: None,
        }
    }

    /// How `local_mean.wgsl` forms this sweep's weights: pre-scaled
    /// coordinates for a radial gaussian whose row maximum no other pass
    /// reads against its own distances, the exact nearest key's log-weight
    /// otherwise (a product's carrier, masked distances, the laplacian),
    /// plain weights for the other profiles.
    pub(crate) fn weight_form(&self) -> WeightForm {
        let profile = self.kernel.profile();
        if profile == Profile::Laplacian {
            WeightForm::Root
        } else if !profile.is_exponential() {
            WeightForm::Plain
        } else if self.differences
            || self.kernel.is_product()
            || !self.kernel.metric().is_euclidean()
            || self.kind != PassKind::Mean
        {
            WeightForm::Exact
        } else {
            WeightForm::Scaled
        }
    }

    /// The value-column passes.
    pub(crate) fn passes(&self) -> Vec<(usize, usize)> {
        if self.q == 0 {
            vec![(0, 0)]
        } else {
            tiles(self.q, self.plan.col_tile).collect()
        }
    }

    /// Records one value-column pass `c0..c1` of `tile` over every key
    /// tile: each row's state ends in `state` (`finalize = false`) or its
    /// local means in `out` (`finalize = true`). Each key tile is swept in
    /// windows of `plan.dispatch_keys` keys, one dispatch each; when the
    /// rows alone give the device too few workgroups, each window's keys
    /// are split across workgroups and a merge dispatch follows
    /// (docs/tiling.md, "Key splits"). With spans (a key set's cell
    /// index), the one key tile is swept in the spans' windows instead,
    /// each workgroup over its own key ranges, never split.
    pub(crate) fn record<'s>(
        &self,
        ctx: &'s GpuContext,
        sub: &mut Submission<'s>,
        tile: &QueryTile<'_, '_>,
        (c0, c1): (usize, usize),
        finalize: bool,
    ) -> Result<()> {
        let op = self.op;
        let rows32 = check_u32(op, "query rows", tile.rows)?;
        let q_stride = check_u32(op, "value columns", self.q)?;
        let row0 = check_u32(op, "query rows", tile.row0)?;
        let inv_h2 = self.kernel.inv_h2();
        let block_inv_h = block_scales(self.kernel);
        let (splits, windows) = match tile.spans {
            Some(spans) => {
                let kt = &self.keys.tiles[0];
                let whole = Window {
                    key_tile: 0,
                    a: 0,
                    b: kt.len,
                };
                (1, vec![whole; spans.windows])
            }
            None => (
                self.plan.key_splits(&ctx.limits, &ctx.caps, tile.rows),
                Window::all(self.keys.tiles, self.plan.dispatch_keys),
            ),
        };
        let windows_n = windows.len();
        let records = windows
            .iter()
            .enumerate()
            .map(|(w, win @ &Window { key_tile, a, b })| {
                let mut flags = 0;
                if w == 0 {
                    flags |= FIRST_TILE;
                }
                if finalize && w + 1 == windows_n {
                    flags |= LAST_TILE;
                }
                if self.exclude_self {
                    flags |= EXCLUDE_SELF;
                }
                Ok(Params {
                    rows: rows32,
                    keys: check_u32(op, "key rows", b - a)?,
                    q_stride,
                    c0: c0 as u32,
                    inv_h2,
                    flags,
                    row0,
                    key0: check_u32(op, "key rows", self.keys.tiles[key_tile].start + a)?,
                    kbase: check_u32(op, "key rows", a)?,
                    split_keys: check_u32(op, "key rows", win.split_keys(splits))?,
                    splits: check_u32(op, "key splits", splits)?,
                    span_window: if tile.spans.is_some() { w as u32 } else { 0 },
                    block_inv_h,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let qt = (c1 - c0) as u32;
        // From d = 32 a radial kernel's distances come from inner-product
        // tiles (docs/numerics.md, "Inner products (larger `d`, GPU)").
        // Its queries stay in workgroup memory for the dispatch where the
        // device's limit allows, else a chunk of them is staged per step.
        let ip = (self.kind == PassKind::Mean
            && !self.differences
            && !self.kernel.is_product()
            && self.kernel.metric().is_euclidean()
            && self.keys.d >= IP_MIN_D
            && tile.spans.is_none())
        .then(|| ip_queries_resident(self.keys.d, qt as usize, ctx.limits.workgroup_bytes))
        .flatten();
        let (shader, mut template) = match self.kind {
            PassKind::Mean if ip.is_some() => (
                ShaderId::LocalMeanIp,
                vec![("QRES", u32::from(ip == Some(true)))],
            ),
            PassKind::Mean | PassKind::Masked => (
                ShaderId::LocalMean,
                vec![
                    ("MASKED", u32::from(self.kind == PassKind::Masked)),
                    ("STAGE", self.plan.staged_keys as u32),
                    ("C", self.plan.chunk_keys() as u32),
                    ("R", self.plan.rows_per_thread as u32),
                    ("FORM", self.weight_form().code()),
                    ("EXCL", u32::from(self.exclude_self)),
                    ("SPANS", u32::from(tile.spans.is_some())),
                ],
            ),
            PassKind::Moments(l) => {
                let window = l.value_window(self.plan.col_tile) as u32;
                (
                    ShaderId::LocalMoments,
                    vec![
                        ("QY", l.qy as u32),
                        ("YW", window),
                        ("YWA", window.max(1)),
                        ("SECOND", u32::from(l.second)),
                        ("STAGE", self.plan.staged_keys as u32),
                    ],
                )
            }
        };
        template.extend([("D", self.keys.d as u32), ("QT", qt), ("QA", qt.max(1))]);
        let mut key = PipelineKey::for_kernel(shader, template, self.kernel);
        if shader == ShaderId::LocalMean && self.kind == PassKind::Mean {
            key = key.with_metric(&self.kernel.metric());
        }
        // Rows per workgroup: R per invocation in local_mean.wgsl; every plan
        // that may take another shader has R = 1. The merge has one row per
        // invocation.
        let rows_per_group = LOCAL_MEAN_WG * self.plan.rows_per_thread;
        let workgroups = Workgroups {
            x: Workgroups::cover(op, tile.rows, rows_per_group)?,
            y: check_u32(op, "key splits", splits)?,
            z: 1,
        };
        let merge = Workgroups::x(Workgroups::cover(op, tile.rows, LOCAL_MEAN_WG)?);
        let program = Program::split(ctx, op, &key, splits, merge)?;
        let partial = partial_states(ctx, op, splits, splits * tile.rows * self.plan.state_cols())?;
        let mut bindings = Bindings::new(ctx, op, shader, &records)?;
        // local_mean.wgsl's spans; the queries stand in without (unread).
        let spans = tile.spans.map_or(tile.queries, |s| &s.buffer);
        let mut rest = vec![tile.state, tile.out, tile.counter, &partial];
        if shader == ShaderId::LocalMean {
            rest.push(spans);
        }
        let groups = bindings.per_key_tile(self.keys.tiles, tile.queries, &rest);
        let in_windows = windows.iter().map(|w| groups[w.key_tile]);
        let dispatches = Dispatch::in_order(in_windows, 0, workgroups);
        sub.record(&program, &bindings, &dispatches);
        sub.keep(bindings);
        sub.keep(partial);
        Ok(())
    }
}

/// Buffers of one query tile: its queries uploaded, its row states,
/// outputs and empty-row counter.
struct TileBuffers<'p> {
    queries: Pooled<'p>,
    state: Pooled<'p>,
    out: Pooled<'p>,
    counter: Pooled<'p>,
    spans: Option<Spans<'p>>,
}

impl<'p> TileBuffers<'p> {
    /// The buffers of the query rows `r0..r1` of `call` for `sweep`,
    /// with `out_cols` output columns, and the tile that binds them.
    fn new(
        call: &OnTiles<'_, 'p>,
        sweep: &Sweep<'_, '_>,
        (r0, r1): (usize, usize),
        out_cols: usize,
    ) -> Result<Self> {
        let (ctx, op, rows) = (call.ctx, call.scope.op, r1 - r0);
        let storage = wgpu::BufferUsages::STORAGE;
        let readable = storage | wgpu::BufferUsages::COPY_SRC;
        let state_cols = sweep.plan.state_cols();
        Ok(TileBuffers {
            queries: upload(ctx, op, call.queries.row_range(r0, r1), storage)?,
            state: ctx.buffer(op, (rows * state_cols * 4) as u64, readable)?,
            out: ctx.buffer(op, (rows * out_cols * 4) as u64, readable)?,
            counter: ctx.buffer(op, 4, readable | wgpu::BufferUsages::COPY_DST)?,
            spans: match sweep.index {
                Some(ix) => Some(ix.spans(ctx, op, (r0, r1), sweep.plan)?),
                None => None,
            },
        })
    }

    /// The query tile of rows `r0..r1` over these buffers.
    fn tile(&self, (r0, r1): (usize, usize)) -> QueryTile<'_, 'p> {
        QueryTile {
            rows: r1 - r0,
            row0: r0,
            queries: &self.queries,
            state: &self.state,
            out: &self.out,
            counter: &self.counter,
            spans: self.spans.as_ref(),
        }
    }
}

/// Local means of a call against key tiles on the device; with `index`,
/// the call's queries are its sorted queries and its one key tile the
/// index's (rows come back in sorted order).
pub(crate) fn means_on_tiles(
    call: &OnTiles<'_, '_>,
    kernel: &Kernel,
    plan: &LocalMeanPlan,
    index: Option<&SortedQueries<'_>>,
) -> Result<RowNormalized> {
    let sweep = Sweep {
        index,
        ..Sweep::new(call.scope.op, kernel, plan, &call.keys)
    };
    normalized_on_tiles(call, &sweep)
}

/// Local moments of `layout` of a call against key tiles on the device
/// (their value matrix: the layout's `qy` columns); rows without mass in
/// `f32` are left NaN.
pub(crate) fn moments_on_tiles(
    call: &OnTiles<'_, '_>,
    kernel: &Kernel,
    plan: &LocalMeanPlan,
    layout: MomentLayout,
) -> Result<RowNormalized> {
    let sweep = Sweep {
        q: layout.cols(),
        kind: PassKind::Moments(layout),
        ..Sweep::new(call.scope.op, kernel, plan, &call.keys)
    };
    normalized_on_tiles(call, &sweep)
}

/// Local means (plain or masked) or local moments of a call: `sweep`'s
/// passes finalized, query tile by query tile.
fn normalized_on_tiles(call: &OnTiles<'_, '_>, sweep: &Sweep<'_, '_>) -> Result<RowNormalized> {
    let (ctx, scope) = (call.ctx, call.scope);
    let (op, m, q) = (scope.op, call.queries.rows(), sweep.q);
    let mut out = alloc_output(op, "output", m, q)?;
    let mut empty = 0usize;
    for (r0, r1) in tiles(m, sweep.plan.query_tile) {
        let b = TileBuffers::new(call, sweep, (r0, r1), q)?;
        let tile = b.tile((r0, r1));
        let mut sub = Submission::new(ctx);
        sub.clear_buffer(b.counter.buffer(), 0, Some(4));
        sub.fill_sentinel(ctx, op, &b.out)?;
        // Value columns in bounded batches of passes: each batch's
        // parameters and bind groups are released (once run) before the
        // next.
        let all = sweep.passes();
        let batches = all.len().div_ceil(PASSES_PER_SUBMIT);
        for (bi, batch) in all.chunks(PASSES_PER_SUBMIT).enumerate() {
            for &cols in batch {
                sweep.record(ctx, &mut sub, &tile, cols, true)?;
            }
            if bi + 1 < batches {
                std::mem::replace(&mut sub, Submission::new(ctx)).submit_and_wait(ctx, scope)?;
            }
        }
        let read = sub.submit_and_read(
            ctx,
            scope,
            &[(b.out.buffer(), b.out.len()), (b.counter.buffer(), 4)],
        )?;
        out[r0 * q..r1 * q].copy_from_slice(&read[0]);
        empty += read[1][0].to_bits() as usize;
    }
    Ok(RowNormalized::from_parts(m, q, out, empty))
}

/// Local means with masked distances on the GPU (`queries` and `keys` may
/// hold NaN: missing coordinates). NaN rows (counted) without mass; no
/// far-row finishing.
pub(crate) fn masked_local_mean(
    ctx: &GpuContext,
    kernel: &Kernel,
    queries: &Matrix<'_>,
    keys: &Matrix<'_>,
    values: &Matrix<'_>,
) -> Result<RowNormalized> {
    const OP: &str = "masked_local_mean";
    let (m, n, d, q) = (queries.rows(), keys.rows(), keys.cols(), values.cols());
    check_u32(OP, "query rows", m)?;
    check_u32(OP, "key rows", n)?;
    let plan = plan_local_mean(&ctx.limits, &ctx.caps, Shape { m, n, d, q })?;
    // Missing coordinates as f32::MAX: the shader's test is a comparison,
    // which no compiler may assume away (unlike NaN's).
    let mark = |a: &Matrix<'_>, what| -> Result<ndarray::Array2<f32>> {
        let data = a
            .as_slice()
            .iter()
            .map(|&v| if v.is_nan() { f32::MAX } else { v });
        let data = try_collect(OP, what, a.as_slice().len(), data)?;
        Ok(ndarray::Array2::from_shape_vec((a.rows(), a.cols()), data).expect("rows·cols entries")) // ok: same shape
    };
    let (qa, xa) = (mark(queries, "marked queries")?, mark(keys, "marked keys")?);
    let qm = Matrix::check(OP, "queries", qa.view())?;
    let xm = Matrix::check(OP, "keys", xa.view())?;
    let scope = ctx.scope(OP, format!("M={m} N={n} d={d} q={q}"))?;
    let key_tiles = upload_key_tiles(ctx, OP, &xm, Some(values), plan.key_tile)?;
    let call = OnTiles {
        ctx,
        scope: &scope,
        queries: &qm,
        keys: DeviceKeys {
            tiles: &key_tiles,
            d,
            q,
        },
    };
    let sweep = Sweep {
        kind: PassKind::Masked,
        ..Sweep::new(OP, kernel, &plan, &call.keys)
    };
    let out = normalized_on_tiles(&call, &sweep)?;
    scope.finish(ctx)?;
    Ok(out)
}

/// Row states of a call against key tiles on the device; with `index`,
/// as [`means_on_tiles`].
pub(crate) fn states_on_tiles(
    call: &OnTiles<'_, '_>,
    kernel: &Kernel,
    plan: &LocalMeanPlan,
    (exclude_self, index): (bool, Option<&SortedQueries<'_>>),
) -> Result<RowStates> {
    let (ctx, scope) = (call.ctx, call.scope);
    let sweep = Sweep {
        exclude_self,
        index,
        ..Sweep::new(scope.op, kernel, plan, &call.keys)
    };
    let (m, q) = (call.queries.rows(), sweep.q);
    let mut states = RowStates::empty(scope.op, m, q)?;
    for (r0, r1) in tiles(m, plan.query_tile) {
        let b = TileBuffers::new(call, &sweep, (r0, r1), 0)?;
        let tile = b.tile((r0, r1));
        for (c0, c1) in sweep.passes() {
            let mut sub = Submission::new(ctx);
            sub.fill_sentinel(ctx, scope.op, &b.state)?;
            sweep.record(ctx, &mut sub, &tile, (c0, c1), false)?;
            let read = sub.submit_and_read(ctx, scope, &[(b.state.buffer(), b.state.len())])?;
            // The pass's state rows are 2 + max(c1 − c0, 1) floats wide.
            let stride = 2 + (c1 - c0).max(1);
            for (r, row) in read[0].chunks_exact(stride).take(r1 - r0).enumerate() {
                let i = r0 + r;
                states.max_log_weight[i] = row[0];
                states.sum[i] = f64::from(row[1]);
                for c in c0..c1 {
                    states.weighted[[i, c]] = f64::from(row[2 + c - c0]);
                }
            }
        }
    }
    states.normalize_empty();
    Ok(states)
}
