//! Dispatch of `shaders/kernel_matrix.wgsl`, tile by tile, so the matrix
//! may be larger than any one device buffer.

use crate::backend::MatrixMode;
use crate::error::Result;
use crate::gpu::plan::{LocalMeanPlan, MATRIX_WG, MatrixPlan, batch_bytes, tiles};
use crate::kernel::Kernel;
use crate::matrix::{Matrix, alloc_output};

use super::buffers::upload;
use super::context::{ErrorScope, GpuContext};
use super::dispatch::{Program, Workgroups};
use super::keys::DeviceKeys;
use super::local_mean::{PassKind, TileJob, record_pass};
use super::pipelines::PipelineKey;
use super::shaders::{ShaderId, block_scales, matrix_mode_code};
use super::submission::{Blocks, Place, Submission};

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
    let key = PipelineKey::for_kernel(ShaderId::KernelMatrix, vec![("D", d as u32)], kernel);
    let program = Program::new(ctx, OP, &key)?;
    let batch = batch_bytes(&ctx.limits, &ctx.caps);
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
        // Blocks are recorded into one submission until their outputs
        // reach `batch` bytes, then read back together.
        let mut blocks = Blocks::new(ctx, scope, batch, &mut out, n);
        for kt in key_tiles {
            let tile = Place {
                row: r0,
                rows,
                col: kt.start,
                cols: kt.len,
            };
            for place in tile.blocks(mplan.block_rows_for(kt.len, rows)) {
                let obuf = blocks.open(&mut sub, place)?;
                let record = MatParams {
                    rows: place.rows as u32,
                    cols: kt.len as u32,
                    row_off: (place.row - r0) as u32,
                    mode: matrix_mode_code(mode),
                    inv_h2: kernel.inv_h2(),
                    row_global: place.row as u32,
                    col_global: kt.start as u32,
                    state_stride,
                    block_inv_h: block_scales(kernel),
                };
                let bindings = [
                    qbuf.binding(),
                    kt.keys.binding(),
                    state.binding(),
                    obuf.binding(),
                ];
                let workgroups = Workgroups {
                    x: Workgroups::cover(OP, kt.len, MATRIX_WG)?,
                    y: Workgroups::cover(OP, place.rows, MATRIX_WG)?,
                    z: 1,
                };
                sub.dispatch(ctx, &program, &record, &bindings, workgroups)?;
            }
        }
        blocks.finish(sub)?;
    }
    Ok(out)
}
