//! Dispatch of `shaders/local_mean.wgsl`: query tiles × value-column
//! passes × key tiles, merged on the device.

use crate::error::Result;
use crate::gpu::plan::local_mean::{IP_MIN_D, ip_workgroup_bytes};
use crate::gpu::plan::{LOCAL_MEAN_WG, LocalMeanPlan, plan_local_mean, tiles};
use crate::kernel::Kernel;
use crate::matrix::{Matrix, alloc_output};
use crate::types::{MomentLayout, RowNormalized, RowStates};

use super::buffers::{Pooled, upload};
use super::check_u32;
use super::context::{ErrorScope, GpuContext};
use super::dispatch::{Bindings, Dispatch, Group, Program, Workgroups, partial_states};
use super::keys::{DeviceKeys, KeyTile, upload_key_tiles};
use super::pipelines::PipelineKey;
use super::shaders::{EXCLUDE_SELF, FIRST_TILE, LAST_TILE, ShaderId, block_scales};
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
    _pad: u32,
    /// A product kernel's `1/h_b` (`shaders::block_scales`).
    block_inv_h: [[f32; 4]; 2],
}

/// One query tile of a local-mean-shader call and its buffers.
pub(crate) struct TileJob<'a, 'p> {
    pub kernel: &'a Kernel,
    pub plan: &'a LocalMeanPlan,
    pub d: usize,
    /// Value columns of the values buffers (0: row sums only).
    pub q: usize,
    /// Query rows in the tile, and the global index of the first.
    pub rows: usize,
    pub row0: usize,
    pub key_tiles: &'a [KeyTile<'p>],
    pub queries: &'a Pooled<'p>,
    pub state: &'a Pooled<'p>,
    pub out: &'a Pooled<'p>,
    pub counter: &'a Pooled<'p>,
    /// Leave each row's own key out (the queries are the keys).
    pub exclude_self: bool,
    /// What the pass computes.
    pub kind: PassKind,
    /// Measure by differences even where the inner-product tiles would
    /// serve (d ≥ 32): for a pass whose row maximum `m` another shader
    /// weighs keys against (the normalized kernel matrix computes each
    /// entry's `t` by differences, and its nearest key must get `e⁰`).
    pub differences: bool,
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

/// The value-column passes of a call with `q` columns.
pub(crate) fn passes(plan: &LocalMeanPlan, q: usize) -> Vec<(usize, usize)> {
    if q == 0 {
        vec![(0, 0)]
    } else {
        tiles(q, plan.col_tile).collect()
    }
}

/// The keys `a..b` of key tile `tile` that one dispatch sweeps.
#[derive(Debug, Clone, Copy)]
struct Window {
    tile: usize,
    a: usize,
    b: usize,
}

/// Records one value-column pass `c0..c1` over every key tile: each row's
/// state ends in `state` (`finalize = false`) or its local means in `out`
/// (`finalize = true`). Each key tile is swept in windows of
/// `plan.dispatch_keys` keys, one dispatch each; when the rows alone give
/// the device too few workgroups, each window's keys are split across
/// workgroups and a merge dispatch follows (docs/tiling.md, "Key splits").
pub(crate) fn record_pass<'p>(
    ctx: &'p GpuContext,
    op: &'static str,
    sub: &mut Submission<'p>,
    job: &TileJob<'_, '_>,
    (c0, c1): (usize, usize),
    finalize: bool,
) -> Result<()> {
    let rows32 = check_u32(op, "query rows", job.rows)?;
    let q_stride = check_u32(op, "value columns", job.q)?;
    let row0 = check_u32(op, "query rows", job.row0)?;
    let inv_h2 = job.kernel.inv_h2();
    let block_inv_h = block_scales(job.kernel);
    let splits = job.plan.key_splits(&ctx.limits, &ctx.caps, job.rows);
    let windows: Vec<Window> = job
        .key_tiles
        .iter()
        .enumerate()
        .flat_map(|(tile, kt)| {
            tiles(kt.len, job.plan.dispatch_keys).map(move |(a, b)| Window { tile, a, b })
        })
        .collect();
    let windows_n = windows.len();
    let records = windows
        .iter()
        .enumerate()
        .map(|(w, &Window { tile, a, b })| {
            let mut flags = 0;
            if w == 0 {
                flags |= FIRST_TILE;
            }
            if finalize && w + 1 == windows_n {
                flags |= LAST_TILE;
            }
            if job.exclude_self {
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
                key0: check_u32(op, "key rows", job.key_tiles[tile].start + a)?,
                kbase: check_u32(op, "key rows", a)?,
                split_keys: check_u32(op, "key rows", (b - a).div_ceil(splits).max(1))?,
                splits: check_u32(op, "key splits", splits)?,
                _pad: 0,
                block_inv_h,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let qt = (c1 - c0) as u32;
    // From d = 32 a radial kernel's distances come from inner-product
    // tiles (docs/numerics.md, "Inner products (larger `d`, GPU)").
    let ip = job.kind == PassKind::Mean
        && !job.differences
        && !job.kernel.is_product()
        && job.d >= IP_MIN_D
        && ip_workgroup_bytes(qt as usize) <= ctx.limits.workgroup_bytes as usize;
    let (shader, mut template) = match job.kind {
        PassKind::Mean if ip => (ShaderId::LocalMeanIp, vec![]),
        PassKind::Mean | PassKind::Masked => (
            ShaderId::LocalMean,
            vec![
                ("MASKED", u32::from(job.kind == PassKind::Masked)),
                ("STAGE", job.plan.staged_keys as u32),
                ("R", job.plan.rows_per_thread as u32),
            ],
        ),
        PassKind::Moments(l) => {
            let window = l.value_window(job.plan.col_tile) as u32;
            (
                ShaderId::LocalMoments,
                vec![
                    ("QY", l.qy as u32),
                    ("YW", window),
                    ("YWA", window.max(1)),
                    ("SECOND", u32::from(l.second)),
                    ("STAGE", job.plan.staged_keys as u32),
                ],
            )
        }
    };
    template.extend([("D", job.d as u32), ("QT", qt), ("QA", qt.max(1))]);
    let key = PipelineKey::for_kernel(shader, template, job.kernel);
    // Rows per workgroup: R per invocation in local_mean.wgsl; every plan
    // that may take another shader has R = 1. The merge has one row per
    // invocation.
    let rows_per_group = LOCAL_MEAN_WG * job.plan.rows_per_thread;
    let workgroups = Workgroups {
        x: Workgroups::cover(op, job.rows, rows_per_group)?,
        y: check_u32(op, "key splits", splits)?,
        z: 1,
    };
    let merge = Workgroups::x(Workgroups::cover(op, job.rows, LOCAL_MEAN_WG)?);
    let program = Program::split(ctx, op, &key, splits, merge)?;
    let partial = partial_states(ctx, op, splits, splits * job.rows * job.plan.state_cols())?;
    let mut bindings = Bindings::new(ctx, op, shader, &records)?;
    let groups: Vec<Group> = job
        .key_tiles
        .iter()
        .map(|kt| {
            bindings.group(&[
                job.queries.binding(),
                kt.keys.binding(),
                kt.values.binding(),
                job.state.binding(),
                job.out.binding(),
                job.counter.binding(),
                partial.binding(),
            ])
        })
        .collect();
    let dispatches: Vec<Dispatch> = windows
        .iter()
        .enumerate()
        .map(|(w, window)| Dispatch {
            group: groups[window.tile],
            record: w,
            workgroups,
        })
        .collect();
    sub.record(&program, &bindings, &dispatches);
    sub.keep(bindings);
    sub.keep(partial);
    Ok(())
}

/// Buffers of one query tile.
struct TileBuffers<'p> {
    queries: Pooled<'p>,
    state: Pooled<'p>,
    out: Pooled<'p>,
    counter: Pooled<'p>,
}

fn tile_buffers<'p>(
    ctx: &'p GpuContext,
    op: &'static str,
    queries: &Matrix<'_>,
    (r0, r1): (usize, usize),
    state_cols: usize,
    out_cols: usize,
) -> Result<TileBuffers<'p>> {
    let rows = r1 - r0;
    let storage = wgpu::BufferUsages::STORAGE;
    let readable = storage | wgpu::BufferUsages::COPY_SRC;
    Ok(TileBuffers {
        queries: upload(ctx, op, queries.row_range(r0, r1), storage)?,
        state: ctx.buffer(op, (rows * state_cols * 4) as u64, readable)?,
        out: ctx.buffer(op, (rows * out_cols * 4) as u64, readable)?,
        counter: ctx.buffer(op, 4, readable | wgpu::BufferUsages::COPY_DST)?,
    })
}

/// Local means of `queries` against key tiles already on the device, under
/// the caller's error scope (which the caller finishes).
pub(crate) fn means_on_tiles(
    ctx: &GpuContext,
    scope: &ErrorScope,
    kernel: &Kernel,
    queries: &Matrix<'_>,
    keys: &DeviceKeys<'_, '_>,
    plan: &LocalMeanPlan,
) -> Result<RowNormalized> {
    normalized_on_tiles(ctx, scope, kernel, queries, keys, plan, PassKind::Mean)
}

/// Local means (plain or masked) or local moments of `queries` against
/// key tiles on the device.
fn normalized_on_tiles(
    ctx: &GpuContext,
    scope: &ErrorScope,
    kernel: &Kernel,
    queries: &Matrix<'_>,
    keys: &DeviceKeys<'_, '_>,
    plan: &LocalMeanPlan,
    kind: PassKind,
) -> Result<RowNormalized> {
    let op = scope.op;
    let (m, d) = (queries.rows(), keys.d);
    let q = match kind {
        PassKind::Moments(l) => l.cols(),
        PassKind::Mean | PassKind::Masked => keys.q,
    };
    let mut out = alloc_output(op, "output", m, q)?;
    let state_cols = plan.state_cols();
    let mut empty = 0usize;
    for (r0, r1) in tiles(m, plan.query_tile) {
        let b = tile_buffers(ctx, op, queries, (r0, r1), state_cols, q)?;
        let job = TileJob {
            kernel,
            plan,
            d,
            q,
            rows: r1 - r0,
            row0: r0,
            key_tiles: keys.tiles,
            queries: &b.queries,
            state: &b.state,
            out: &b.out,
            counter: &b.counter,
            exclude_self: false,
            kind,
            differences: false,
        };
        let mut sub = Submission::new(ctx);
        sub.clear_buffer(b.counter.buffer(), 0, Some(4));
        sub.fill_sentinel(ctx, op, &b.out)?;
        // Value columns in bounded batches of passes: each batch's
        // parameters and bind groups are released (once run) before the
        // next.
        let all = passes(plan, q);
        let batches = all.len().div_ceil(PASSES_PER_SUBMIT);
        for (bi, batch) in all.chunks(PASSES_PER_SUBMIT).enumerate() {
            for &cols in batch {
                record_pass(ctx, op, &mut sub, &job, cols, true)?;
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

/// Local moments of `layout` for `queries` against key tiles already on
/// the device (their value matrix: the layout's `qy` columns), under the
/// caller's error scope; rows without mass in `f32` are left NaN.
pub(crate) fn moments_on_tiles(
    ctx: &GpuContext,
    scope: &ErrorScope,
    kernel: &Kernel,
    queries: &Matrix<'_>,
    keys: &DeviceKeys<'_, '_>,
    plan: &LocalMeanPlan,
    layout: MomentLayout,
) -> Result<RowNormalized> {
    normalized_on_tiles(
        ctx,
        scope,
        kernel,
        queries,
        keys,
        plan,
        PassKind::Moments(layout),
    )
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
    let plan = plan_local_mean(&ctx.limits, &ctx.caps, m, n, d, q)?;
    // Missing coordinates as f32::MAX: the shader's test is a comparison,
    // which no compiler may assume away (unlike NaN's).
    let mark = |a: &Matrix<'_>| {
        let data = a
            .as_slice()
            .iter()
            .map(|&v| if v.is_nan() { f32::MAX } else { v });
        ndarray::Array2::from_shape_vec((a.rows(), a.cols()), data.collect())
            .expect("rows·cols entries") // ok: same shape
    };
    let (qa, xa) = (mark(queries), mark(keys));
    let qm = Matrix::check(OP, "queries", qa.view())?;
    let xm = Matrix::check(OP, "keys", xa.view())?;
    let scope = ctx.scope(OP, format!("M={m} N={n} d={d} q={q}"))?;
    let key_tiles = upload_key_tiles(ctx, OP, &xm, Some(values), plan.key_tile)?;
    let keys = DeviceKeys {
        tiles: &key_tiles,
        d,
        q,
    };
    let out = normalized_on_tiles(ctx, &scope, kernel, &qm, &keys, &plan, PassKind::Masked)?;
    scope.finish(ctx)?;
    Ok(out)
}

/// Row states of `queries` against key tiles already on the device, under
/// the caller's error scope (which the caller finishes).
pub(crate) fn states_on_tiles(
    ctx: &GpuContext,
    scope: &ErrorScope,
    kernel: &Kernel,
    queries: &Matrix<'_>,
    keys: &DeviceKeys<'_, '_>,
    plan: &LocalMeanPlan,
    exclude_self: bool,
) -> Result<RowStates> {
    let op = scope.op;
    let (m, d, q) = (queries.rows(), keys.d, keys.q);
    let state_cols = plan.state_cols();
    let mut states = RowStates::empty(m, q);
    for (r0, r1) in tiles(m, plan.query_tile) {
        let b = tile_buffers(ctx, op, queries, (r0, r1), state_cols, 0)?;
        let job = TileJob {
            kernel,
            plan,
            d,
            q,
            rows: r1 - r0,
            row0: r0,
            key_tiles: keys.tiles,
            queries: &b.queries,
            state: &b.state,
            out: &b.out,
            counter: &b.counter,
            exclude_self,
            kind: PassKind::Mean,
            differences: false,
        };
        for (c0, c1) in passes(plan, q) {
            let mut sub = Submission::new(ctx);
            sub.fill_sentinel(ctx, op, &b.state)?;
            record_pass(ctx, op, &mut sub, &job, (c0, c1), false)?;
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
