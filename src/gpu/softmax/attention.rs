//! Dispatch of `shaders/softmax.wgsl`: `softmax(s·ΦΨᵀ)V` per query tile,
//! value-column passes × the key tiles its rows see; also the row pass
//! (row statistics only) of the weight matrix.

use crate::error::Result;
use crate::gpu::plan::softmax::ATTEND_WG;
use crate::gpu::plan::{AttendPlan, tiles};
use crate::matrix::alloc_output;
use crate::types::{Attention, Heads};

use super::{KeyTile, stacked};
use crate::gpu::buffers::{Pooled, upload};
use crate::gpu::context::{ErrorScope, GpuContext};
use crate::gpu::dispatch::{Bindings, Dispatch, Program, Workgroups, partial_states};
use crate::gpu::pipelines::PipelineKey;
use crate::gpu::plan::check_u32;
use crate::gpu::shaders::{CAUSAL, FIRST_TILE, LAST_TILE, ShaderId};
use crate::gpu::submission::Submission;

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
    split_keys: u32,
    splits: u32,
    batches: u32,
    key_batch: u32,
    _pad: u32,
}

/// What the passes of one group of batches share, as `record_attend`
/// needs it.
pub(super) struct AttendJob<'a> {
    pub(super) op: &'static str,
    pub(super) plan: &'a AttendPlan,
    pub(super) attn: &'a Attention,
    /// Keys per batch.
    pub(super) keys: usize,
    /// Feature dimension.
    pub(super) d: usize,
    /// Value columns (0: the row statistics only).
    pub(super) q: usize,
    /// N − M: query i sees the keys j ≤ i + off (causal mask).
    pub(super) off: usize,
}

/// One query tile of an attention call, as `record_attend` needs it.
pub(super) struct QueryTile<'a, 'p> {
    /// Index within the batch of the first row, and rows per batch.
    pub(super) row_start: usize,
    pub(super) rows: usize,
    /// Batches in the dispatch.
    pub(super) batches: usize,
    /// The batch of the key tiles' buffers that the dispatch's first batch
    /// reads (0 but for a prepared set whose buffers hold more batches).
    pub(super) key_batch: usize,
    pub(super) queries: &'a Pooled<'p>,
    pub(super) state: &'a Pooled<'p>,
    pub(super) out: &'a Pooled<'p>,
}

/// Records, for one query tile, the passes (value-column passes × the key
/// tiles some row of the tile sees) that leave the attention in `out`
/// (`q > 0`) or the row statistics in `state` (`q = 0`). When the tile's
/// rows give the device too few workgroups, each key tile is split across
/// workgroups and a merge dispatch follows (docs/tiling.md).
/// The shader keeps the logits in log₂ units (log₂e folded into the query).
pub(super) fn record_attend<'p>(
    ctx: &'p GpuContext,
    sub: &mut Submission<'p>,
    job: &AttendJob<'_>,
    tile: &QueryTile<'_, '_>,
    key_tiles: &[KeyTile<'_>],
) -> Result<()> {
    let AttendJob {
        op,
        plan,
        attn,
        keys: n,
        d,
        q,
        off,
    } = *job;
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
    // One split for the call: sized for its largest key tile.
    let widest = seen.iter().map(|kt| kt.len).max().unwrap_or(1);
    let splits = plan.key_splits(
        &ctx.limits,
        &ctx.caps,
        q > 0,
        (tile.rows, tile.batches, widest),
    );
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
                split_keys: check_u32(op, "key rows", kt.len.div_ceil(splits).max(1))?,
                splits: check_u32(op, "key splits", splits)?,
                batches: check_u32(op, "batches", tile.batches)?,
                key_batch: check_u32(op, "batches", tile.key_batch)?,
                _pad: 0,
            });
        }
    }
    // The key slices' partial row states (a stand-in without a split).
    let partial = partial_states(
        ctx,
        op,
        splits,
        splits * tile.batches * tile.rows * plan.state_cols(),
    )?;
    // Passes with value columns in register tiles where they fit.
    let tiled = q > 0 && plan.tiled();
    let (shader, block) = if tiled {
        (ShaderId::SoftmaxTiled, plan.tiled_keys)
    } else {
        (ShaderId::Softmax, plan.staged)
    };
    let mut bindings = Bindings::new(ctx, op, shader, &records)?;
    let groups = bindings.per_key_tile(seen, tile.queries, &[tile.state, tile.out, &partial]);
    let workgroups = Workgroups {
        x: Workgroups::cover(op, tile.rows, plan.group_rows(q > 0))?,
        y: check_u32(op, "batches", tile.batches)?,
        z: check_u32(op, "key splits", splits)?,
    };
    // The merge: one workgroup per 64 rows and batch.
    let merge = Workgroups {
        x: Workgroups::cover(op, tile.rows, ATTEND_WG)?,
        z: 1,
        ..workgroups
    };
    for (p, &(c0, c1)) in passes.iter().enumerate() {
        let qt = (c1 - c0) as u32;
        let mut template = vec![
            ("D4", AttendPlan::d4(d) as u32),
            ("QA4", qt.max(1).div_ceil(4)),
            ("BK", block as u32),
        ];
        if tiled {
            template.push(("RI", plan.tiled_rows as u32));
        }
        let key = PipelineKey::new(shader, template);
        let program = Program::split(ctx, op, &key, splits, merge)?;
        // The pass's records: one per key tile seen.
        let first = p * groups.len();
        let dispatches = Dispatch::in_order(groups.iter().copied(), first, workgroups);
        sub.record(&program, &bindings, &dispatches);
    }
    sub.keep(bindings);
    sub.keep(partial);
    Ok(())
}

/// One attention call of `B` batches of `M` queries against `N` keys in
/// `d` dimensions with `q` value columns, planned by `plan`: its error
/// scope (`what` added to the sizes it reports) and output, filled by
/// `groups` calling [`AttendCall::batches`] for each group of batches.
pub(super) fn attend_call(
    ctx: &GpuContext,
    plan: &AttendPlan,
    attn: &Attention,
    (nb, m, n, d, q): (usize, usize, usize, usize, usize),
    what: &str,
    groups: impl FnOnce(&AttendCall<'_>, &mut [f32]) -> Result<()>,
) -> Result<Vec<f32>> {
    const OP: &str = "kernel_softmax";
    let scope = ctx.scope(
        OP,
        format!(
            "B={nb} M={m} N={n} d={d} q={q} causal={}{what}",
            attn.causal
        ),
    )?;
    let mut out = alloc_output(OP, "output", nb * m, q)?;
    let call = AttendCall {
        op: OP,
        scope: &scope,
        plan,
        attn,
        shape: (n, q),
    };
    groups(&call, &mut out)?;
    scope.finish(ctx)?;
    Ok(out)
}

/// What every group of batches of one attention call shares.
pub(super) struct AttendCall<'a> {
    pub(super) op: &'static str,
    pub(super) scope: &'a ErrorScope,
    pub(super) plan: &'a AttendPlan,
    pub(super) attn: &'a Attention,
    /// Keys per batch and value columns.
    pub(super) shape: (usize, usize),
}

impl AttendCall<'_> {
    /// Attention of batches `b0..b1` (one dispatch's group) against
    /// `key_tiles`, whose buffers hold these batches from their batch
    /// `key_batch` on (0 for a call's own upload; a prepared set's buffers
    /// may hold more). Query tiles are uploaded, run and read back into
    /// their rows of `out` one at a time.
    pub(super) fn batches(
        &self,
        ctx: &GpuContext,
        phi: &Heads<'_>,
        (b0, b1): (usize, usize),
        key_batch: usize,
        key_tiles: &[KeyTile<'_>],
        out: &mut [f32],
    ) -> Result<()> {
        let (op, plan) = (self.op, self.plan);
        let (m, d) = (phi.rows, phi.cols());
        let (n, q) = self.shape;
        let job = AttendJob {
            op,
            plan,
            attn: self.attn,
            keys: n,
            d,
            q,
            off: n - m.min(n),
        };
        let storage = wgpu::BufferUsages::STORAGE;
        for (r0, r1) in tiles(m, plan.query_tile) {
            let (p0, p1) = stacked(b0, b1, r0, r1, m);
            let qbuf = upload(ctx, op, phi.data.row_range(p0, p1), storage)?;
            // Row states pass between key tiles; one tile needs none.
            let state_rows = if key_tiles.len() > 1 { p1 - p0 } else { 0 };
            let state = ctx.buffer(op, (state_rows * plan.state_cols() * 4) as u64, storage)?;
            let obuf = ctx.buffer(
                op,
                ((p1 - p0) * q * 4) as u64,
                storage | wgpu::BufferUsages::COPY_SRC,
            )?;
            let mut sub = Submission::new(ctx);
            sub.fill_sentinel(ctx, op, &obuf)?;
            let tile = QueryTile {
                row_start: r0,
                rows: r1 - r0,
                batches: b1 - b0,
                key_batch,
                queries: &qbuf,
                state: &state,
                out: &obuf,
            };
            record_attend(ctx, &mut sub, &job, &tile, key_tiles)?;
            // One copy, from the mapped staging buffer into the output.
            let dst = &mut out[p0 * q..p1 * q];
            sub.submit_with_readback(ctx, self.scope, &[(obuf.buffer(), obuf.len())])?
                .wait(ctx, self.scope, |all| {
                    dst.copy_from_slice(&all[..dst.len()])
                })?;
        }
        Ok(())
    }
}
