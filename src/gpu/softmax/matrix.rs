//! Dispatch of the softmax weight matrix: per batch and query tile, the
//! row pass of `shaders/softmax.wgsl` (row statistics), then
//! `shaders/softmax_matrix.wgsl` block by block, read back in batches.

use crate::error::Result;
use crate::gpu::plan::softmax::MATRIX_WG;
use crate::gpu::plan::{Shape, batch_bytes, plan_softmax_matrix, tiles};
use crate::matrix::alloc_output;
use crate::types::{Attention, Heads};

use super::attention::{AttendJob, QueryTile, record_attend};
use super::{stacked, upload_keys};
use crate::gpu::blocks::{BlockInputs, Blocks};
use crate::gpu::buffers::upload;
use crate::gpu::context::GpuContext;
use crate::gpu::dispatch::Program;
use crate::gpu::pipelines::PipelineKey;
use crate::gpu::plan::check_u32;
use crate::gpu::shaders::ShaderId;
use crate::gpu::submission::Submission;

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
    let mplan = plan_softmax_matrix(&ctx.limits, &ctx.caps, nb, Shape { m, n, d, q: 0 })?;
    let plan = mplan.rows;
    let scope = ctx.scope(
        OP,
        format!("B={nb} M={m} N={n} d={d} causal={}", attn.causal),
    )?;
    let mut out = alloc_output(OP, "output", nb * m, n)?;
    let off = n - m.min(n);
    let storage = wgpu::BufferUsages::STORAGE;
    let batch_bytes = batch_bytes(&ctx.limits, &ctx.caps);
    // The row pass: statistics only.
    let job = AttendJob {
        op: OP,
        plan: &plan,
        attn,
        keys: n,
        d,
        q: 0,
        off,
    };
    let program = Program::new(ctx, OP, &PipelineKey::new(ShaderId::SoftmaxMatrix, vec![]))?;
    for b in 0..nb {
        let key_tiles = upload_keys(ctx, OP, psi, None, (b, b + 1), plan.key_tile)?;
        for (r0, r1) in tiles(m, plan.query_tile) {
            let rows = r1 - r0;
            let (p0, p1) = stacked(b, b + 1, r0, r1, m);
            let qbuf = upload(ctx, OP, phi.data.row_range(p0, p1), storage)?;
            let state = ctx.buffer(OP, (rows * plan.state_cols() * 4) as u64, storage)?;
            let dummy_out = ctx.buffer(OP, 4, storage)?;
            let mut sub = Submission::new(ctx);
            let tile = QueryTile {
                row_start: r0,
                rows,
                batches: 1,
                key_batch: 0,
                queries: &qbuf,
                state: &state,
                out: &dummy_out,
            };
            record_attend(ctx, &mut sub, &job, &tile, &key_tiles)?;
            let mut blocks = Blocks::new(ctx, &scope, batch_bytes, &mut out, n);
            let inputs = BlockInputs {
                queries: &qbuf,
                state: &state,
                row: p0,
                rows,
                side: MATRIX_WG,
            };
            // Key tiles no row of this query tile sees stay 0 (as allocated).
            for kt in key_tiles
                .iter()
                .filter(|kt| !attn.causal || kt.start < r1 + off)
            {
                let block_rows = mplan.block_rows_for(kt.len, rows);
                blocks.record(&mut sub, &program, &inputs, kt, block_rows, |place| {
                    Ok(MatParams {
                        rows: place.rows as u32,
                        cols: check_u32(OP, "key rows", kt.len)?,
                        d: check_u32(OP, "dimension", d)?,
                        row_off: (place.row - p0) as u32,
                        row_start: check_u32(OP, "query rows", r0)?,
                        key_start: check_u32(OP, "key rows", kt.start)?,
                        off: check_u32(OP, "key rows", off)?,
                        causal: u32::from(attn.causal),
                        scale: attn.scale,
                        state_stride: plan.state_cols() as u32,
                        _pad: [0; 2],
                    })
                })?;
            }
            // The row pass went with the first submission, which keeps its
            // uniforms; its other buffers live until this query tile is
            // read back.
            blocks.finish(sub)?;
        }
    }
    scope.finish(ctx)?;
    Ok(out)
}
