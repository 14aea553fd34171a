//! Dispatch of `shaders/kernel_matrix.wgsl`, tile by tile, so the matrix
//! may be larger than any one device buffer.

use crate::backend::MatrixMode;
use crate::error::Result;
use crate::gpu::plan::{LocalMeanPlan, MATRIX_WG, MatrixPlan, batch_bytes, tiles};
use crate::kernel::Kernel;
use crate::matrix::{Matrix, alloc_output};

use super::buffers::upload;
use super::context::{ErrorScope, GpuContext};
use super::keys::DeviceKeys;
use super::local_mean::{PassKind, TileJob, record_pass};
use super::pipelines::PipelineKey;
use super::shaders::{ProductCode, ShaderId, block_scales, matrix_mode_code};
use super::submission::{Block, Blocks, Submission};
use super::{ParamBlock, bind_group, check_u32};

const OP: &str = "kernel_matrix";

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct MatParams {
    rows: u32,
    cols: u32,
    row_off: u32,
    mode: u32,
    inv_h2: f32,
    row_global: u32,
    col_global: u32,
    state_stride: u32,
    /// A product kernel's `1/h_b` (`shaders::block_scales`).
    block_inv_h: [[f32; 4]; 2],
}

/// A kernel matrix of `queries` against key tiles on the device, under the caller's error scope: per query tile, the
/// row sums (for the normalized and Laplacian modes, by `lplan`), then one
/// output block at a time (`mplan`). Row-major `M × N`; rows of `D⁻¹K`
/// without mass in `f32` are left NaN for the host (far rows).
pub(crate) fn matrix_on_tiles(
    ctx: &GpuContext,
    scope: &ErrorScope,
    kernel: &Kernel,
    queries: &Matrix<'_>,
    keys: &DeviceKeys<'_, '_>,
    mode: MatrixMode,
    (mplan, lplan): (&MatrixPlan, &LocalMeanPlan),
) -> Result<Vec<f32>> {
    let (m, d) = (queries.rows(), keys.d);
    let key_tiles = keys.tiles;
    let n = key_tiles.last().map_or(0, |t| t.start + t.len);
    let mut out = alloc_output(OP, "output", m, n)?;
    let storage = wgpu::BufferUsages::STORAGE;
    let needs_sums = !matches!(mode, MatrixMode::Raw | MatrixMode::SqDistance);
    let state_stride = 3u32; // 2 + QA with QA = 1 for the row-sum pass
    let workgroups_x = |cols: usize| cols.div_ceil(MATRIX_WG) as u32;
    for (r0, r1) in tiles(m, mplan.query_tile) {
        let rows = r1 - r0;
        let qbuf = upload(ctx, OP, queries.row_range(r0, r1), storage)?;
        let state = ctx.buffer(OP, (rows * state_stride as usize * 4) as u64, storage)?;
        // The row sums go first, on their own; their buffers are kept by
        // the blocks' first submission.
        let mut sub = Submission::new(ctx);
        if needs_sums {
            let dummy = ctx.buffer(OP, 4, storage)?;
            let counter = ctx.buffer(OP, 4, storage)?;
            let job = TileJob {
                kernel,
                plan: lplan,
                d,
                q: 0,
                rows,
                row0: r0,
                key_tiles,
                queries: &qbuf,
                state: &state,
                out: &dummy,
                counter: &counter,
                exclude_self: false,
                kind: PassKind::Mean,
                // Entries weigh keys by differences against this m.
                differences: true,
            };
            record_pass(ctx, OP, &mut sub, &job, (0, 0), false)?;
            sub.keep(dummy);
            sub.keep(counter);
            sub = sub.submit_then(ctx);
        }
        let pipeline = ctx.pipeline(
            OP,
            &PipelineKey {
                shader: ShaderId::KernelMatrix,
                template: vec![("D", d as u32)],
                profile: Some(kernel.profile().shader_code()),
                product: ProductCode::of(kernel),
            },
        )?;
        // Blocks are recorded into one submission until their outputs
        // reach `batch` bytes, then read back together.
        let mut blocks = Blocks::new(batch_bytes(&ctx.limits, &ctx.caps));
        for kt in key_tiles {
            let block_rows = mplan.block_rows_for(kt.len, rows);
            for (b0, b1) in tiles(rows, block_rows) {
                let brows = b1 - b0;
                let bytes = (brows * kt.len * 4) as u64;
                blocks.make_room(ctx, scope, &mut sub, bytes, &mut out, n)?;
                let obuf = ctx.buffer(OP, bytes, storage | wgpu::BufferUsages::COPY_SRC)?;
                let params = ParamBlock::new(
                    ctx,
                    OP,
                    &[MatParams {
                        rows: brows as u32,
                        cols: kt.len as u32,
                        row_off: b0 as u32,
                        mode: matrix_mode_code(mode),
                        inv_h2: kernel.inv_h2(),
                        row_global: (r0 + b0) as u32,
                        col_global: kt.start as u32,
                        state_stride,
                        block_inv_h: block_scales(kernel),
                    }],
                )?;
                let bg = bind_group(
                    ctx,
                    ShaderId::KernelMatrix,
                    &[
                        params.binding(),
                        qbuf.binding(),
                        kt.keys.binding(),
                        state.binding(),
                        obuf.binding(),
                    ],
                );
                sub.fill_sentinel(ctx, OP, &obuf)?;
                {
                    let mut pass = sub.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: Some(OP),
                        timestamp_writes: None,
                    });
                    pass.set_pipeline(&pipeline);
                    pass.set_bind_group(0, &bg, &[params.offset(0)]);
                    pass.dispatch_workgroups(
                        workgroups_x(kt.len),
                        check_u32(OP, "workgroups", brows.div_ceil(MATRIX_WG))?,
                        1,
                    );
                }
                sub.keep(params);
                blocks.push(Block {
                    out: obuf,
                    row: r0 + b0,
                    rows: brows,
                    col: kt.start,
                    cols: kt.len,
                });
            }
        }
        blocks.finish(ctx, scope, sub, &mut out, n)?;
    }
    Ok(out)
}
