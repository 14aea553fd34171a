//! Dispatch of `shaders/softmax.wgsl` (kernel softmax), of its row pass
//! plus `shaders/softmax_matrix.wgsl` (the weight matrix), and of
//! `shaders/feature_mean.wgsl` (the linear feature local mean).
//!
//! Batches are stacked along the rows (`Heads`), so a batch group, query
//! tile or key tile is one contiguous row range of its input. When every
//! batch's data fit the device bindings, several batches share a dispatch
//! (`workgroup_id.y` is the batch); otherwise one batch at a time is cut
//! into query tiles × key tiles, and the partial row states of the key
//! tiles merge on the device.

use super::timing::{self, Encoder};
use crate::error::{Error, Result};
use crate::gpu::plan::{DeviceLimits, TileLimits, tiles};
use crate::matrix::alloc_output;
use crate::types::{Attention, Heads};

use super::buffers::{Pooled, submit_and_read, upload};
use super::context::GpuContext;
use super::pipelines::PipelineKey;
use super::shaders::{
    ATTEND_WG, CAUSAL, FINISH_WG, FIRST_TILE, LAST_TILE, SOFTMAX_MATRIX_WG as MATRIX_WG, SUM_WG,
    ShaderId,
};
use super::{ParamBlock, bind_group, check_u32, fill_sentinel};

/// Most value columns one attention pass keeps in registers.
const MAX_ATTEND_COLS: usize = 64;
/// Most keys staged in workgroup memory at once (also the scores each
/// invocation holds in registers).
const MAX_STAGED: usize = 32;
/// Matrix output bytes recorded into one submission before readback.
const BATCH_BYTES: u64 = 64 << 20;
/// Keys per chunk of the feature local mean (at least).
const FEATURE_CHUNK: usize = 256;
/// Value columns per `finish` pass of the feature local mean.
const FEATURE_COLS: usize = 16;

/// Tiling of one attention call (or of the row pass of the matrix).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AttendPlan {
    /// Batches per dispatch (more than 1 only when tiles are whole batches).
    pub batch_group: usize,
    /// Query rows per tile.
    pub query_tile: usize,
    /// Keys per tile (one binding for the keys, one for the values).
    pub key_tile: usize,
    /// Value columns per pass (0: row statistics only).
    pub col_tile: usize,
    /// Keys staged in workgroup memory at once.
    pub staged: usize,
}

impl AttendPlan {
    fn d4(d: usize) -> usize {
        d.div_ceil(4)
    }
    fn qa4(&self) -> usize {
        self.col_tile.max(1).div_ceil(4)
    }
    /// Floats per row of the state buffer.
    fn state_cols(&self) -> usize {
        2 + 4 * self.qa4()
    }
}

fn binding_floats(dev: &DeviceLimits, caps: &TileLimits) -> usize {
    let binding = caps
        .buffer_bytes
        .map_or(dev.binding_bytes, |b| b.min(dev.binding_bytes));
    (binding / 4).min(usize::MAX as u64) as usize
}

fn too_small(floats: usize, need: usize) -> Error {
    Error::InvalidParameter {
        name: "tile_limits.buffer_bytes",
        reason: format!("{} bytes cannot hold one row of {need} floats", floats * 4),
    }
}

/// Plans attention of `b` batches of `m` queries against `n` keys in `d`
/// dimensions with `q` value columns (`q = 0`: row statistics only).
pub(crate) fn plan_attend(
    dev: &DeviceLimits,
    caps: &TileLimits,
    b: usize,
    m: usize,
    n: usize,
    d: usize,
    q: usize,
) -> Result<AttendPlan> {
    let floats = binding_floats(dev, caps);
    let col_tile = q
        .min(MAX_ATTEND_COLS)
        .min(caps.value_cols.unwrap_or(usize::MAX));
    let mut plan = AttendPlan {
        batch_group: 1,
        query_tile: 1,
        key_tile: 1,
        col_tile,
        staged: 0,
    };
    let per_key = 16 * (AttendPlan::d4(d) + plan.qa4());
    plan.staged = (dev.workgroup_bytes as usize / per_key).min(MAX_STAGED);
    if plan.staged == 0 {
        return Err(Error::Unsupported {
            op: "kernel_softmax",
            backend: "gpu",
            reason: format!(
                "dimension d={d} does not fit one key in {} bytes of workgroup memory",
                dev.workgroup_bytes
            ),
        });
    }
    let wq = d.max(q).max(plan.state_cols());
    let wk = d.max(q);
    if floats < wq {
        return Err(too_small(floats, wq));
    }
    let dispatch_rows = dev.workgroups_per_dim as usize * ATTEND_WG;
    plan.query_tile = (floats / wq)
        .min(dispatch_rows)
        .min(caps.query_rows.unwrap_or(usize::MAX))
        .min(m)
        .max(1);
    plan.key_tile = (floats / wk)
        .min(attend_budget_keys(dev, d, plan.qa4()))
        .min(caps.key_rows.unwrap_or(usize::MAX))
        .min(n)
        .max(1);
    if plan.query_tile == m && plan.key_tile == n {
        plan.batch_group = (floats / (m * wq))
            .min(floats / (n * wk))
            .min(dev.workgroups_per_dim as usize)
            .min(b)
            .max(1);
    }
    Ok(plan)
}

/// Loop iterations one invocation may run under the device's loop budget
/// (llvmpipe stops an invocation's loops after 65535 iterations in all),
/// with a margin; `None` where there is no cap.
fn loop_budget(dev: &DeviceLimits) -> Option<usize> {
    dev.loop_budget.map(|b| b as usize * 7 / 8)
}

/// Keys one `attend` dispatch may visit per invocation under the loop
/// budget, counting every loop iteration as if nothing were unrolled: per
/// key the dot product (`D4`), a rescale and the weighted values (`QA4`
/// each), the key loop and its share of the staging loops; once, the
/// query load and the state merge.
fn attend_budget_keys(dev: &DeviceLimits, d: usize, qa4: usize) -> usize {
    let d4 = AttendPlan::d4(d);
    loop_budget(dev).map_or(usize::MAX, |b| {
        let fixed = 5 * d4 + 10 * qa4 + 16;
        let per_key = 2 + d4 + 2 * qa4 + (d4 + qa4).div_ceil(8);
        (b.saturating_sub(fixed) / per_key).max(1)
    })
}

/// Rows `first..last` of the stacked rows (`per` rows per batch) that hold
/// rows `r0..r1` of batches `b0..b1` (whole batches when `b1 > b0 + 1`).
fn stacked(b0: usize, b1: usize, r0: usize, r1: usize, per: usize) -> (usize, usize) {
    (b0 * per + r0, (b1 - 1) * per + r1)
}

/// Keys (and their value rows) of one batch group, uploaded once.
struct KeyTile<'p> {
    /// Index within the batch of the tile's first key.
    start: usize,
    len: usize,
    keys: Pooled<'p>,
    values: Pooled<'p>,
}

fn upload_keys<'p>(
    ctx: &'p GpuContext,
    op: &'static str,
    psi: &Heads<'_>,
    values: Option<&Heads<'_>>,
    (b0, b1): (usize, usize),
    key_tile: usize,
) -> Result<Vec<KeyTile<'p>>> {
    let storage = wgpu::BufferUsages::STORAGE;
    tiles(psi.rows, key_tile)
        .map(|(k0, k1)| {
            let (a, b) = stacked(b0, b1, k0, k1, psi.rows);
            Ok(KeyTile {
                start: k0,
                len: k1 - k0,
                keys: upload(ctx, op, psi.data.row_range(a, b), storage)?,
                values: match values {
                    Some(v) => upload(ctx, op, v.data.row_range(a, b), storage)?,
                    None => upload::<f32>(ctx, op, &[], storage)?,
                },
            })
        })
        .collect()
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct AttendParams {
    rows: u32,
    keys: u32,
    d: u32,
    q_stride: u32,
    c0: u32,
    scale: f32,
    flags: u32,
    row_start: u32,
    key_start: u32,
    off: u32,
    cols: u32,
    _pad: u32,
}

/// One query tile of an attention call, as `record_attend` needs it.
struct QueryTile<'a, 'p> {
    /// Index within the batch of the first row, and rows per batch.
    row_start: usize,
    rows: usize,
    /// Batches in the dispatch.
    batches: usize,
    queries: &'a Pooled<'p>,
    state: &'a Pooled<'p>,
    out: &'a Pooled<'p>,
}

/// Records, for one query tile, the passes (value-column passes × the key
/// tiles some row of the tile sees) that leave the attention in `out`
/// (`q > 0`) or the row statistics in `state` (`q = 0`). Returns the
/// parameters, which must live until the submission completes.
#[allow(clippy::too_many_arguments)]
fn record_attend<'p>(
    ctx: &'p GpuContext,
    op: &'static str,
    encoder: &mut Encoder,
    plan: &AttendPlan,
    attn: &Attention,
    (n, d, q, off): (usize, usize, usize, usize),
    tile: &QueryTile<'_, '_>,
    key_tiles: &[KeyTile<'_>],
) -> Result<ParamBlock<'p>> {
    // Key tiles past the tile's last limit are hidden from every row.
    let seen: Vec<&KeyTile<'_>> = key_tiles
        .iter()
        .filter(|kt| !attn.causal || kt.start < tile.row_start + tile.rows + off)
        .collect();
    debug_assert!(!seen.is_empty() && n > 0);
    let passes: Vec<(usize, usize)> = if q == 0 {
        vec![(0, 0)]
    } else {
        tiles(q, plan.col_tile).collect()
    };
    let mut records = Vec::with_capacity(passes.len() * seen.len());
    for &(c0, c1) in &passes {
        for (t, kt) in seen.iter().enumerate() {
            let mut flags = 0;
            if t == 0 {
                flags |= FIRST_TILE;
            }
            if q > 0 && t + 1 == seen.len() {
                flags |= LAST_TILE;
            }
            if attn.causal {
                flags |= CAUSAL;
            }
            records.push(AttendParams {
                rows: check_u32(op, "query rows", tile.rows)?,
                keys: check_u32(op, "key rows", kt.len)?,
                d: check_u32(op, "dimension", d)?,
                q_stride: check_u32(op, "value columns", q)?,
                c0: c0 as u32,
                scale: attn.scale,
                flags,
                row_start: check_u32(op, "query rows", tile.row_start)?,
                key_start: check_u32(op, "key rows", kt.start)?,
                off: check_u32(op, "key rows", off)?,
                cols: (c1 - c0) as u32,
                _pad: 0,
            });
        }
    }
    let params = ParamBlock::new(ctx, op, &records)?;
    let groups: Vec<wgpu::BindGroup> = seen
        .iter()
        .map(|kt| {
            bind_group(
                ctx,
                ShaderId::Softmax,
                &[
                    params.binding(),
                    tile.queries.binding(),
                    kt.keys.binding(),
                    kt.values.binding(),
                    tile.state.binding(),
                    tile.out.binding(),
                ],
            )
        })
        .collect();
    let workgroups = check_u32(op, "workgroups", tile.rows.div_ceil(ATTEND_WG))?;
    let batches = check_u32(op, "batches", tile.batches)?;
    let mut rec = 0;
    for &(c0, c1) in &passes {
        let qt = (c1 - c0) as u32;
        let pipeline = ctx.pipelines.get(
            ctx,
            op,
            &PipelineKey {
                shader: ShaderId::Softmax,
                template: vec![
                    ("D4", AttendPlan::d4(d) as u32),
                    ("QA4", qt.max(1).div_ceil(4)),
                    ("BK", plan.staged as u32),
                ],
                profile: None,
            },
        )?;
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some(op),
            timestamp_writes: None,
        });
        pass.set_pipeline(&pipeline);
        for bg in &groups {
            pass.set_bind_group(0, bg, &[params.offset(rec)]);
            pass.dispatch_workgroups(workgroups, batches, 1);
            rec += 1;
        }
    }
    Ok(params)
}

/// `softmax(s·ΦΨᵀ)V` of every batch on the GPU.
pub(crate) fn kernel_softmax(
    ctx: &GpuContext,
    phi: &Heads<'_>,
    psi: &Heads<'_>,
    values: &Heads<'_>,
    attn: &Attention,
) -> Result<Vec<f32>> {
    const OP: &str = "kernel_softmax";
    let (nb, m, n, d, q) = (phi.batch, phi.rows, psi.rows, phi.cols(), values.cols());
    check_u32(OP, "query rows", nb * m)?;
    check_u32(OP, "key rows", nb * n)?;
    let plan = plan_attend(&ctx.limits, &ctx.caps, nb, m, n, d, q)?;
    let scope = ctx.scope(
        OP,
        format!("B={nb} M={m} N={n} d={d} q={q} causal={}", attn.causal),
    )?;
    let mut out = alloc_output(OP, "output", nb * m, q)?;
    let off = n - m.min(n);
    let storage = wgpu::BufferUsages::STORAGE;
    for (b0, b1) in tiles(nb, plan.batch_group) {
        let key_tiles = upload_keys(ctx, OP, psi, Some(values), (b0, b1), plan.key_tile)?;
        for (r0, r1) in tiles(m, plan.query_tile) {
            let (p0, p1) = stacked(b0, b1, r0, r1, m);
            let qbuf = upload(ctx, OP, phi.data.row_range(p0, p1), storage)?;
            // Row states pass between key tiles; one tile needs none.
            let state_rows = if key_tiles.len() > 1 { p1 - p0 } else { 0 };
            let state = ctx.pool.get(
                ctx,
                OP,
                (state_rows * plan.state_cols() * 4) as u64,
                storage,
            )?;
            let obuf = ctx.pool.get(
                ctx,
                OP,
                ((p1 - p0) * q * 4) as u64,
                storage | wgpu::BufferUsages::COPY_SRC,
            )?;
            let mut encoder = Encoder::new(ctx);
            let _fill = fill_sentinel(ctx, OP, &mut encoder, &obuf)?;
            let tile = QueryTile {
                row_start: r0,
                rows: r1 - r0,
                batches: b1 - b0,
                queries: &qbuf,
                state: &state,
                out: &obuf,
            };
            let _params = record_attend(
                ctx,
                OP,
                &mut encoder,
                &plan,
                attn,
                (n, d, q, off),
                &tile,
                &key_tiles,
            )?;
            let read = submit_and_read(ctx, &scope, encoder, &[(obuf.buffer(), obuf.len())])?;
            out[p0 * q..p1 * q].copy_from_slice(&read[0]);
        }
    }
    scope.finish(ctx)?;
    Ok(out)
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct MatParams {
    rows: u32,
    cols: u32,
    d: u32,
    row_off: u32,
    row_start: u32,
    key_start: u32,
    off: u32,
    causal: u32,
    scale: f32,
    state_stride: u32,
    _pad: [u32; 2],
}

/// An output block of the weight matrix recorded but not yet read back.
struct Block<'p> {
    out: Pooled<'p>,
    /// Uniforms of its dispatches: alive until the submission completes.
    _params: [Option<ParamBlock<'p>>; 2],
    /// First stacked row, rows, first column, columns.
    row: usize,
    rows: usize,
    col: usize,
    cols: usize,
}

/// The normalized weights of every batch on the GPU: per batch and query
/// tile, the row pass of `softmax.wgsl` leaves (m, l) per row, then the
/// entries are written block by block (each block at most one binding).
pub(crate) fn softmax_matrix(
    ctx: &GpuContext,
    phi: &Heads<'_>,
    psi: &Heads<'_>,
    attn: &Attention,
) -> Result<Vec<f32>> {
    const OP: &str = "softmax_matrix";
    let (nb, m, n, d) = (phi.batch, phi.rows, psi.rows, phi.cols());
    check_u32(OP, "query rows", nb * m)?;
    check_u32(OP, "key rows", nb * n)?;
    let mut plan = plan_attend(&ctx.limits, &ctx.caps, nb, m, n, d, 0)?;
    let floats = binding_floats(&ctx.limits, &ctx.caps);
    let dispatch = ctx.limits.workgroups_per_dim as usize * MATRIX_WG;
    // Key tiles are also output blocks' columns: within one dispatch's reach.
    plan.key_tile = plan.key_tile.min(dispatch).min(floats);
    plan.batch_group = 1;
    let scope = ctx.scope(
        OP,
        format!("B={nb} M={m} N={n} d={d} causal={}", attn.causal),
    )?;
    let mut out = alloc_output(OP, "output", nb * m, n)?;
    let off = n - m.min(n);
    let storage = wgpu::BufferUsages::STORAGE;
    let batch_bytes = BATCH_BYTES.min(ctx.limits.binding_bytes.max(1 << 20));
    let pipeline = ctx.pipelines.get(
        ctx,
        OP,
        &PipelineKey {
            shader: ShaderId::SoftmaxMatrix,
            template: vec![],
            profile: None,
        },
    )?;
    for b in 0..nb {
        let key_tiles = upload_keys(ctx, OP, psi, None, (b, b + 1), plan.key_tile)?;
        for (r0, r1) in tiles(m, plan.query_tile) {
            let rows = r1 - r0;
            let (p0, p1) = stacked(b, b + 1, r0, r1, m);
            let qbuf = upload(ctx, OP, phi.data.row_range(p0, p1), storage)?;
            let state = ctx
                .pool
                .get(ctx, OP, (rows * plan.state_cols() * 4) as u64, storage)?;
            let dummy_out = ctx.pool.get(ctx, OP, 4, storage)?;
            let mut encoder = Encoder::new(ctx);
            let tile = QueryTile {
                row_start: r0,
                rows,
                batches: 1,
                queries: &qbuf,
                state: &state,
                out: &dummy_out,
            };
            let _stats = record_attend(
                ctx,
                OP,
                &mut encoder,
                &plan,
                attn,
                (n, d, 0, off),
                &tile,
                &key_tiles,
            )?;
            let mut pending: Vec<Block<'_>> = Vec::new();
            let mut pending_bytes = 0u64;
            // Key tiles no row of this query tile sees stay 0 (as allocated).
            for kt in key_tiles
                .iter()
                .filter(|kt| !attn.causal || kt.start < r1 + off)
            {
                let block_rows = (floats / kt.len).clamp(1, rows).min(dispatch);
                for (a0, a1) in tiles(rows, block_rows) {
                    let brows = a1 - a0;
                    let bytes = (brows * kt.len * 4) as u64;
                    if !pending.is_empty() && pending_bytes + bytes > batch_bytes {
                        let full = std::mem::replace(&mut encoder, Encoder::new(ctx));
                        flush(ctx, &scope, full, &mut pending, &mut out, n)?;
                        pending_bytes = 0;
                    }
                    let obuf =
                        ctx.pool
                            .get(ctx, OP, bytes, storage | wgpu::BufferUsages::COPY_SRC)?;
                    let params = ParamBlock::new(
                        ctx,
                        OP,
                        &[MatParams {
                            rows: brows as u32,
                            cols: check_u32(OP, "key rows", kt.len)?,
                            d: check_u32(OP, "dimension", d)?,
                            row_off: a0 as u32,
                            row_start: check_u32(OP, "query rows", r0)?,
                            key_start: check_u32(OP, "key rows", kt.start)?,
                            off: check_u32(OP, "key rows", off)?,
                            causal: u32::from(attn.causal),
                            scale: attn.scale,
                            state_stride: plan.state_cols() as u32,
                            _pad: [0; 2],
                        }],
                    )?;
                    let bg = bind_group(
                        ctx,
                        ShaderId::SoftmaxMatrix,
                        &[
                            params.binding(),
                            qbuf.binding(),
                            kt.keys.binding(),
                            state.binding(),
                            obuf.binding(),
                        ],
                    );
                    let fill = fill_sentinel(ctx, OP, &mut encoder, &obuf)?;
                    {
                        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                            label: Some(OP),
                            timestamp_writes: None,
                        });
                        pass.set_pipeline(&pipeline);
                        pass.set_bind_group(0, &bg, &[params.offset(0)]);
                        pass.dispatch_workgroups(
                            check_u32(OP, "workgroups", kt.len.div_ceil(MATRIX_WG))?,
                            check_u32(OP, "workgroups", brows.div_ceil(MATRIX_WG))?,
                            1,
                        );
                    }
                    pending_bytes += bytes;
                    pending.push(Block {
                        out: obuf,
                        _params: [Some(params), fill],
                        row: p0 + a0,
                        rows: brows,
                        col: kt.start,
                        cols: kt.len,
                    });
                }
            }
            // The row pass went with the first submission; its uniforms
            // and buffers live until this query tile is read back.
            flush(ctx, &scope, encoder, &mut pending, &mut out, n)?;
        }
    }
    scope.finish(ctx)?;
    Ok(out)
}

/// Submits the pending blocks (and whatever else `encoder` recorded) and
/// reads them back into `out` (row stride `n`).
fn flush(
    ctx: &GpuContext,
    scope: &super::context::ErrorScope,
    encoder: Encoder,
    pending: &mut Vec<Block<'_>>,
    out: &mut [f32],
    n: usize,
) -> Result<()> {
    if pending.is_empty() {
        timing::submit(ctx, encoder);
        return Ok(());
    }
    let sources: Vec<_> = pending
        .iter()
        .map(|b| (b.out.buffer(), b.out.len()))
        .collect();
    let read = submit_and_read(ctx, scope, encoder, &sources)?;
    for (b, data) in pending.iter().zip(&read) {
        for (r, src) in data.chunks_exact(b.cols).take(b.rows).enumerate() {
            let o = (b.row + r) * n + b.col;
            out[o..o + b.cols].copy_from_slice(src);
        }
    }
    pending.clear();
    Ok(())
}

/// Tiling of one feature-local-mean call (per batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FeaturePlan {
    /// Keys per chunk (one workgroup of `chunk_sums`, one prefix state).
    pub chunk: usize,
    /// Keys per key tile: a whole number of chunks.
    pub key_tile: usize,
    /// Query rows per `finish` tile.
    pub query_tile: usize,
    /// Value columns per `finish` pass.
    pub col_tile: usize,
}

/// Plans the feature local mean of `m` queries and `n` keys in `d`
/// dimensions with `q` value columns.
pub(crate) fn plan_feature(
    dev: &DeviceLimits,
    caps: &TileLimits,
    m: usize,
    n: usize,
    d: usize,
    q: usize,
) -> Result<FeaturePlan> {
    let floats = binding_floats(dev, caps);
    let e = d.saturating_mul(q + 1);
    let wk = d.max(q);
    let dispatch = dev.workgroups_per_dim as usize;
    let col_tile = q
        .min(FEATURE_COLS)
        .min(caps.value_cols.unwrap_or(usize::MAX))
        .max(1);
    let unsupported = |reason: String| Error::Unsupported {
        op: "feature_local_mean",
        backend: "gpu",
        reason,
    };
    // Keys one binding (of keys or of values) holds.
    let max_keys = (floats / wk)
        .min(caps.key_rows.unwrap_or(usize::MAX))
        .min(n);
    if max_keys == 0 {
        return Err(too_small(floats, wk));
    }
    // Under a loop budget, a chunk bounds the iterations of `chunk_sums`
    // (its entries × its keys) and of `finish` (its keys × (d + columns)),
    // and the number of chunks those of `prefix`.
    let qa = col_tile.next_power_of_two();
    let budget = loop_budget(dev);
    let longest = budget.map_or(usize::MAX, |b| {
        let sums = (b / e.div_ceil(SUM_WG).max(1)).saturating_sub(1);
        let finish = b.saturating_sub(d * (2 + qa) + 2 * qa) / (1 + d + qa);
        sums.min(finish)
    });
    let hi = max_keys.min(longest);
    if hi == 0 {
        return Err(unsupported(format!(
            "d={d}, q={q} exceed the device's loop budget per invocation"
        )));
    }
    let mut chunk = FEATURE_CHUNK.min(hi);
    // The chunk sums and the total must fit one binding, and the prefix
    // pass the loop budget: fewer, longer chunks.
    while n.div_ceil(chunk).saturating_add(1).saturating_mul(e) > floats
        || budget.is_some_and(|b| n.div_ceil(chunk) > b)
    {
        if chunk == hi {
            return Err(unsupported(format!(
                "{n} keys need more chunk sums (d={d}, q={q}) than one binding or the loop budget allows"
            )));
        }
        chunk = (chunk * 2).min(hi);
    }
    let key_tile = max_keys / chunk * chunk;
    let query_tile = (floats / wk)
        .min(dispatch * FINISH_WG)
        .min(caps.query_rows.unwrap_or(usize::MAX))
        .min(m)
        .max(1);
    Ok(FeaturePlan {
        chunk,
        key_tile: key_tile.min(dispatch * chunk),
        query_tile,
        col_tile,
    })
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct FeatParams {
    d: u32,
    q: u32,
    keys: u32,
    chunk: u32,
    chunk0: u32,
    chunks: u32,
    rows: u32,
    row_start: u32,
    key_start: u32,
    off: u32,
    c0: u32,
    causal: u32,
    psi_scale: f32,
    cols: u32,
    _pad: [u32; 2],
}

/// The power of two that brings the largest entry of `xs` (non-negative)
/// into `[1, 2)`, kept within the normal `f32` range.
fn power_of_two_scale(xs: &[f32]) -> f32 {
    let mx = xs.iter().fold(0.0f32, |a, &x| a.max(x));
    if mx <= 0.0 {
        return 1.0;
    }
    let e = f64::from(mx).log2().floor() as i32;
    2.0f32.powi((-e).clamp(-126, 126))
}

/// Linear feature local means of every batch on the GPU, and the count of
/// rows whose weights are all zero.
pub(crate) fn feature_local_mean(
    ctx: &GpuContext,
    phi: &Heads<'_>,
    psi: &Heads<'_>,
    values: &Heads<'_>,
    causal: bool,
) -> Result<(Vec<f32>, usize)> {
    const OP: &str = "feature_local_mean";
    let (nb, m, n, d, q) = (phi.batch, phi.rows, psi.rows, phi.cols(), values.cols());
    check_u32(OP, "query rows", nb * m)?;
    check_u32(OP, "key rows", nb * n)?;
    let plan = plan_feature(&ctx.limits, &ctx.caps, m, n, d, q)?;
    let scope = ctx.scope(
        OP,
        format!("B={nb} M={m} N={n} d={d} q={q} causal={causal}"),
    )?;
    let mut out = alloc_output(OP, "output", nb * m, q)?;
    let storage = wgpu::BufferUsages::STORAGE;
    let off = n - m.min(n);
    let chunks = n.div_ceil(plan.chunk);
    let e = d * (q + 1);
    let mut empty = 0usize;
    // Finish passes hold a power of two of columns: few pipelines.
    let template = |cols: usize| PipelineKey {
        shader: ShaderId::FeatureFinish,
        template: vec![("QA", cols.max(1).next_power_of_two() as u32)],
        profile: None,
    };
    let sums_pipeline = ctx.pipelines.get(
        ctx,
        OP,
        &PipelineKey {
            shader: ShaderId::FeatureSums,
            ..template(1)
        },
    )?;
    let prefix_pipeline = ctx.pipelines.get(
        ctx,
        OP,
        &PipelineKey {
            shader: ShaderId::FeaturePrefix,
            ..template(1)
        },
    )?;
    for b in 0..nb {
        let psi_scale = power_of_two_scale(psi.batch_slice(b));
        let key_tiles = upload_keys(ctx, OP, psi, Some(values), (b, b + 1), plan.key_tile)?;
        let sums = ctx
            .pool
            .get(ctx, OP, ((chunks + 1) * e * 4) as u64, storage)?;
        let counter = ctx.pool.get(
            ctx,
            OP,
            4,
            storage | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
        )?;
        let dummy = ctx.pool.get(ctx, OP, 4, storage)?;
        let dummy_out = ctx.pool.get(ctx, OP, 4, storage)?;
        let base = FeatParams {
            d: check_u32(OP, "dimension", d)?,
            q: check_u32(OP, "value columns", q)?,
            keys: 0,
            chunk: check_u32(OP, "key rows", plan.chunk)?,
            chunk0: 0,
            chunks: check_u32(OP, "chunks", chunks)?,
            rows: 0,
            row_start: 0,
            key_start: 0,
            off: check_u32(OP, "key rows", off)?,
            c0: 0,
            causal: u32::from(causal),
            psi_scale,
            cols: 0,
            _pad: [0; 2],
        };
        // Query tiles: causal ones hold the rows whose limit falls in one
        // key tile (their own chunk's keys are read from it).
        let mut qtiles: Vec<(usize, usize, usize)> = Vec::new(); // (r0, r1, key tile)
        for (t, kt) in key_tiles.iter().enumerate() {
            let (a, z) = if causal {
                (kt.start.max(off) - off, (kt.start + kt.len).max(off) - off)
            } else if t == 0 {
                (0, m)
            } else {
                (0, 0)
            };
            for (r0, r1) in tiles(z - a, plan.query_tile) {
                qtiles.push((a + r0, a + r1, t));
            }
        }
        let passes: Vec<(usize, usize)> = tiles(q, plan.col_tile).collect();
        let mut records = Vec::new();
        for kt in &key_tiles {
            records.push(FeatParams {
                keys: kt.len as u32,
                chunk0: (kt.start / plan.chunk) as u32,
                key_start: kt.start as u32,
                ..base
            });
        }
        records.push(base); // prefix
        for &(r0, r1, t) in &qtiles {
            for &(c0, c1) in &passes {
                records.push(FeatParams {
                    keys: key_tiles[t].len as u32,
                    rows: (r1 - r0) as u32,
                    row_start: r0 as u32,
                    key_start: key_tiles[t].start as u32,
                    c0: c0 as u32,
                    cols: (c1 - c0) as u32,
                    ..base
                });
            }
        }
        let params = ParamBlock::new(ctx, OP, &records)?;
        let mut encoder = Encoder::new(ctx);
        encoder.clear_buffer(counter.buffer(), 0, Some(4));
        let group = |kt: &KeyTile<'_>, queries: &Pooled<'_>, out: &Pooled<'_>| {
            bind_group(
                ctx,
                ShaderId::FeatureSums,
                &[
                    params.binding(),
                    queries.binding(),
                    kt.keys.binding(),
                    kt.values.binding(),
                    sums.binding(),
                    out.binding(),
                    counter.binding(),
                ],
            )
        };
        let mut rec = 0;
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.set_pipeline(&sums_pipeline);
            for kt in &key_tiles {
                let bg = group(kt, &dummy, &dummy_out);
                pass.set_bind_group(0, &bg, &[params.offset(rec)]);
                pass.dispatch_workgroups(kt.len.div_ceil(plan.chunk) as u32, 1, 1);
                rec += 1;
            }
        }
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.set_pipeline(&prefix_pipeline);
            let bg = group(&key_tiles[0], &dummy, &dummy_out);
            pass.set_bind_group(0, &bg, &[params.offset(rec)]);
            pass.dispatch_workgroups(e.div_ceil(SUM_WG).clamp(1, 65535) as u32, 1, 1);
            rec += 1;
        }
        let mut outs = Vec::with_capacity(qtiles.len());
        for &(r0, r1, t) in &qtiles {
            let (p0, p1) = stacked(b, b + 1, r0, r1, m);
            let qbuf = upload(ctx, OP, phi.data.row_range(p0, p1), storage)?;
            let obuf = ctx.pool.get(
                ctx,
                OP,
                ((r1 - r0) * q * 4) as u64,
                storage | wgpu::BufferUsages::COPY_SRC,
            )?;
            let fill = fill_sentinel(ctx, OP, &mut encoder, &obuf)?;
            let bg = group(&key_tiles[t], &qbuf, &obuf);
            for &(c0, c1) in &passes {
                let pipeline = ctx.pipelines.get(ctx, OP, &template(c1 - c0))?;
                let mut pass = encoder.begin_compute_pass(&Default::default());
                pass.set_pipeline(&pipeline);
                pass.set_bind_group(0, &bg, &[params.offset(rec)]);
                pass.dispatch_workgroups(
                    check_u32(OP, "workgroups", (r1 - r0).div_ceil(FINISH_WG))?,
                    1,
                    1,
                );
                rec += 1;
            }
            outs.push((p0, p1, qbuf, obuf, fill));
        }
        let mut sources: Vec<(&wgpu::Buffer, u64)> =
            outs.iter().map(|o| (o.3.buffer(), o.3.len())).collect();
        sources.push((counter.buffer(), 4));
        let read = submit_and_read(ctx, &scope, encoder, &sources)?;
        for (o, data) in outs.iter().zip(&read) {
            out[o.0 * q..o.1 * q].copy_from_slice(data);
        }
        empty += read[read.len() - 1][0].to_bits() as usize;
    }
    scope.finish(ctx)?;
    Ok((out, empty))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAVAPIPE: DeviceLimits = DeviceLimits {
        binding_bytes: 128 << 20,
        workgroups_per_dim: 65535,
        workgroup_bytes: 32 << 10,
        loop_budget: None,
    };

    #[test]
    fn attention_plan_groups_whole_batches_and_tiles_big_ones() {
        let p = plan_attend(&LAVAPIPE, &TileLimits::default(), 8, 4096, 4096, 64, 64).unwrap();
        assert_eq!(
            (p.batch_group, p.query_tile, p.key_tile, p.col_tile),
            (8, 4096, 4096, 64)
        );
        assert!(p.staged * 16 * (16 + 16) <= 32 << 10);
        let caps = TileLimits {
            query_rows: Some(5),
            key_rows: Some(7),
            value_cols: Some(3),
            buffer_bytes: None,
        };
        let p = plan_attend(&LAVAPIPE, &caps, 3, 100, 50, 8, 10).unwrap();
        assert_eq!(
            (p.batch_group, p.query_tile, p.key_tile, p.col_tile),
            (1, 5, 7, 3)
        );
        // Small bindings: one batch per dispatch, tiles within one binding.
        let small = TileLimits {
            buffer_bytes: Some(4 * 64 * 100),
            ..TileLimits::default()
        };
        let p = plan_attend(&LAVAPIPE, &small, 8, 1000, 1000, 64, 64).unwrap();
        assert_eq!(p.batch_group, 1);
        assert!(p.key_tile * 64 <= 6400 && p.query_tile * (2 + 64) <= 6400);
    }

    #[test]
    fn a_loop_budget_bounds_key_tiles_and_chunks() {
        let dev = DeviceLimits {
            loop_budget: Some(65535),
            ..LAVAPIPE
        };
        let p = plan_attend(&dev, &TileLimits::default(), 8, 4096, 4096, 64, 64).unwrap();
        // 2 + 16 + 2·16 + 4 iterations per key.
        assert!(p.key_tile * 54 < 65535 && p.key_tile > 500);
        assert_eq!(p.batch_group, 1);
        let p = plan_feature(&dev, &TileLimits::default(), 1000, 1_000_000, 64, 64).unwrap();
        assert!(p.chunk * (1 + 64 + 16) + 64 * 18 < 65535);
        assert!(1_000_000usize.div_ceil(p.chunk) < 65535);
        assert!(p.chunk * (64 * 65usize).div_ceil(256) < 65535);
    }

    #[test]
    fn huge_dimension_is_a_clear_error() {
        let e = plan_attend(&LAVAPIPE, &TileLimits::default(), 1, 10, 10, 10_000, 1);
        assert!(matches!(e, Err(Error::Unsupported { .. })), "{e:?}");
    }

    #[test]
    fn feature_plan_keeps_whole_chunks_per_key_tile() {
        let caps = TileLimits {
            key_rows: Some(29),
            ..TileLimits::default()
        };
        let p = plan_feature(&LAVAPIPE, &caps, 100, 300, 3, 2).unwrap();
        assert_eq!(p.key_tile % p.chunk, 0);
        assert!(p.key_tile <= 29);
        // Chunk sums too many for one binding: fewer, longer chunks.
        let n = 10_000_000;
        let p = plan_feature(&LAVAPIPE, &TileLimits::default(), 1000, n, 64, 64).unwrap();
        assert_eq!(p.chunk, 2048);
        assert!((n.div_ceil(p.chunk) + 1) * 64 * 65 <= 32 << 20);
        // Bindings smaller than a chunk: chunks shrink to one binding.
        let small = TileLimits {
            buffer_bytes: Some(4 * 4 * 8 * 30),
            ..TileLimits::default()
        };
        let p = plan_feature(&LAVAPIPE, &small, 90, 300, 4, 7).unwrap();
        assert_eq!((p.chunk, p.key_tile), (137, 137));
    }

    #[test]
    fn power_of_two_scales_are_exact() {
        assert_eq!(power_of_two_scale(&[0.0, 3.0, 1.0]), 0.5);
        assert_eq!(power_of_two_scale(&[0.0]), 1.0);
        for x in [1e-30f32, 7.0, 3e20, 1.0, 1.99] {
            let y = x * power_of_two_scale(&[x]);
            assert!((1.0..2.0).contains(&y), "{x} → {y}");
        }
    }
}
