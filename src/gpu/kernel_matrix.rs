//! Dispatch of `shaders/kernel_matrix.wgsl`, tile by tile, so the matrix
//! may be larger than any one device buffer.

use crate::backend::MatrixMode;
use crate::error::Result;
use crate::gpu::plan::{LocalMeanPlan, MATRIX_WG, MatrixPlan, batch_bytes, tiles};
use crate::kernel::Kernel;
use crate::matrix::alloc_output;

use super::blocks::{BlockInputs, Blocks};
use super::buffers::upload;
use super::dispatch::Program;
use super::keys::OnTiles;
use super::local_mean::{QueryTile, Sweep};
use super::pipelines::PipelineKey;
use super::shaders::{ShaderId, block_scales, matrix_mode_code};
use super::submission::Submission;

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
    call: &OnTiles<'_, '_>,
    kernel: &Kernel,
    mode: MatrixMode,
    (mplan, lplan): (&MatrixPlan, &LocalMeanPlan),
) -> Result<Vec<f32>> {
    let (ctx, queries, keys) = (call.ctx, call.queries, &call.keys);
    let (m, d) = (queries.rows(), keys.d);
    let key_tiles = keys.tiles;
    let n = key_tiles.last().map_or(0, |t| t.start + t.len);
    let mut out = alloc_output(OP, "output", m, n)?;
    let storage = wgpu::BufferUsages::STORAGE;
    let needs_sums = !matches!(mode, MatrixMode::Raw | MatrixMode::SqDistance);
    let state_stride = 3u32; // 2 + QA with QA = 1 for the row-sum pass
    let key = PipelineKey::for_kernel(ShaderId::KernelMatrix, vec![("D", d as u32)], kernel);
    let program = Program::new(ctx, OP, &key)?;
    let batch = batch_bytes(&ctx.limits, &ctx.caps);
    // The row sums, a pass without values.
    let sums = Sweep {
        q: 0,
        // Entries weigh keys by differences against this m.
        differences: true,
        ..Sweep::new(OP, kernel, lplan, keys)
    };
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
            let tile = QueryTile {
                rows,
                row0: r0,
                queries: &qbuf,
                state: &state,
                out: &dummy,
                counter: &counter,
                spans: None,
            };
            sums.record(ctx, &mut sub, &tile, (0, 0), false)?;
            sub.keep(dummy);
            sub.keep(counter);
            sub = sub.submit_then(ctx);
        }
        // Blocks are recorded into one submission until their outputs
        // reach `batch` bytes, then read back together.
        let mut blocks = Blocks::new(ctx, call.scope, batch, &mut out, n);
        let inputs = BlockInputs {
            queries: &qbuf,
            state: &state,
            row: r0,
            rows,
            side: MATRIX_WG,
        };
        for kt in key_tiles {
            let block_rows = mplan.block_rows_for(kt.len, rows);
            blocks.record(&mut sub, &program, &inputs, kt, block_rows, |place| {
                Ok(MatParams {
                    rows: place.rows as u32,
                    cols: kt.len as u32,
                    row_off: (place.row - r0) as u32,
                    mode: matrix_mode_code(mode),
                    inv_h2: kernel.inv_h2(),
                    row_global: place.row as u32,
                    col_global: kt.start as u32,
                    state_stride,
                    block_inv_h: block_scales(kernel),
                })
            })?;
        }
        blocks.finish(sub)?;
    }
    Ok(out)
}
