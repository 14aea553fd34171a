//! Dispatch of `shaders/local_mean.wgsl`: query tiles × value-column
//! passes × key tiles, merged on the device.

use crate::error::Result;
use crate::kernel::Kernel;
use crate::matrix::{Matrix, alloc_output};
use crate::ops::RowNormalized;
use crate::plan::{LOCAL_MEAN_WG, LocalMeanPlan, plan_local_mean, tiles};

use super::buffers::{Pooled, submit_and_read, upload};
use super::context::GpuContext;
use super::pipelines::PipelineKey;
use super::shaders::ShaderId;
use super::{ParamBlock, bind_group, check_u32, fill_sentinel};

const OP: &str = "local_mean";
const FIRST_TILE: u32 = 1;
const LAST_TILE: u32 = 2;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    keys: u32,
    q_stride: u32,
    c0: u32,
    inv_h2: f32,
    flags: u32,
    _pad: [u32; 2],
}

/// Keys (and their value rows) uploaded once per call, one binding each.
pub(crate) struct KeyTile<'p> {
    pub start: usize,
    pub len: usize,
    pub keys: Pooled<'p>,
    pub values: Pooled<'p>,
}

/// Uploads the key tiles of `plan` (values may have zero columns).
pub(crate) fn upload_key_tiles<'p>(
    ctx: &'p GpuContext,
    op: &'static str,
    keys: &Matrix<'_>,
    values: Option<&Matrix<'_>>,
    key_tile: usize,
) -> Result<Vec<KeyTile<'p>>> {
    let storage = wgpu::BufferUsages::STORAGE;
    tiles(keys.rows(), key_tile)
        .map(|(a, b)| {
            Ok(KeyTile {
                start: a,
                len: b - a,
                keys: upload(ctx, op, keys.row_range(a, b), storage)?,
                values: match values {
                    Some(v) => upload(ctx, op, v.row_range(a, b), storage)?,
                    None => upload::<f32>(ctx, op, &[], storage)?,
                },
            })
        })
        .collect()
}

/// Records, for one query tile, the passes that leave each row's state in
/// `state` (`finalize = false`, used for row sums) or its local means in
/// `out` (`finalize = true`). Returns the parameters, which must live until
/// the submission completes.
#[allow(clippy::too_many_arguments)]
pub(crate) fn record_tile<'p>(
    ctx: &'p GpuContext,
    op: &'static str,
    encoder: &mut wgpu::CommandEncoder,
    kernel: &Kernel,
    plan: &LocalMeanPlan,
    d: usize,
    q: usize,
    rows: usize,
    key_tiles: &[KeyTile<'_>],
    queries: &Pooled<'_>,
    state: &Pooled<'_>,
    out: &Pooled<'_>,
    counter: &Pooled<'_>,
    finalize: bool,
) -> Result<ParamBlock<'p>> {
    let rows32 = check_u32(op, "query rows", rows)?;
    let passes: Vec<(usize, usize)> = if q == 0 {
        vec![(0, 0)]
    } else {
        tiles(q, plan.col_tile).collect()
    };
    let mut records = Vec::with_capacity(passes.len() * key_tiles.len());
    for &(c0, _) in &passes {
        for (t, kt) in key_tiles.iter().enumerate() {
            let mut flags = 0;
            if t == 0 {
                flags |= FIRST_TILE;
            }
            if finalize && t + 1 == key_tiles.len() {
                flags |= LAST_TILE;
            }
            records.push(Params {
                rows: rows32,
                keys: check_u32(op, "key rows", kt.len)?,
                q_stride: check_u32(op, "value columns", q)?,
                c0: c0 as u32,
                inv_h2: kernel.inv_h2(),
                flags,
                _pad: [0; 2],
            });
        }
    }
    let params = ParamBlock::new(ctx, op, &records)?;
    let groups: Vec<wgpu::BindGroup> = key_tiles
        .iter()
        .map(|kt| {
            bind_group(
                ctx,
                ShaderId::LocalMean,
                &[
                    params.binding(),
                    queries.binding(),
                    kt.keys.binding(),
                    kt.values.binding(),
                    state.binding(),
                    out.binding(),
                    counter.binding(),
                ],
            )
        })
        .collect();
    let workgroups = check_u32(op, "workgroups", rows.div_ceil(LOCAL_MEAN_WG))?;
    let mut rec = 0;
    for &(c0, c1) in &passes {
        let qt = (c1 - c0) as u32;
        let pipeline = ctx.pipelines.get(
            ctx,
            op,
            &PipelineKey {
                shader: ShaderId::LocalMean,
                template: vec![
                    ("D", d as u32),
                    ("QT", qt),
                    ("QA", qt.max(1)),
                    ("STAGE", plan.staged_keys as u32),
                ],
                profile: Some(kernel.profile().shader_code()),
            },
        )?;
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some(op),
            timestamp_writes: None,
        });
        pass.set_pipeline(&pipeline);
        for bg in &groups {
            pass.set_bind_group(0, bg, &[params.offset(rec)]);
            pass.dispatch_workgroups(workgroups, 1, 1);
            rec += 1;
        }
    }
    Ok(params)
}

/// Local means on the GPU.
pub(crate) fn local_mean(
    ctx: &GpuContext,
    kernel: &Kernel,
    queries: &Matrix<'_>,
    keys: &Matrix<'_>,
    values: &Matrix<'_>,
) -> Result<RowNormalized> {
    let (m, n, d, q) = (queries.rows(), keys.rows(), keys.cols(), values.cols());
    check_u32(OP, "query rows", m)?;
    check_u32(OP, "key rows", n)?;
    let plan = plan_local_mean(&ctx.limits, &ctx.caps, m, n, d, q)?;
    let scope = ctx.scope(OP, format!("M={m} N={n} d={d} q={q}"))?;
    let mut out = alloc_output(OP, "output", m, q)?;
    let key_tiles = upload_key_tiles(ctx, OP, keys, Some(values), plan.key_tile)?;
    let storage = wgpu::BufferUsages::STORAGE;
    let state_cols = 2 + plan.col_tile.max(1);
    let mut empty = 0usize;
    for (r0, r1) in tiles(m, plan.query_tile) {
        let rows = r1 - r0;
        let qbuf = upload(ctx, OP, queries.row_range(r0, r1), storage)?;
        let state = ctx
            .pool
            .get(ctx, OP, (rows * state_cols * 4) as u64, storage)?;
        let obuf = ctx.pool.get(
            ctx,
            OP,
            (rows * q * 4) as u64,
            storage | wgpu::BufferUsages::COPY_SRC,
        )?;
        let counter = ctx.pool.get(
            ctx,
            OP,
            4,
            storage | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
        )?;
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        encoder.clear_buffer(counter.buffer(), 0, Some(4));
        let _fill = fill_sentinel(ctx, OP, &mut encoder, &obuf)?;
        let _params = record_tile(
            ctx,
            OP,
            &mut encoder,
            kernel,
            &plan,
            d,
            q,
            rows,
            &key_tiles,
            &qbuf,
            &state,
            &obuf,
            &counter,
            true,
        )?;
        let read = submit_and_read(
            ctx,
            &scope,
            encoder,
            &[(obuf.buffer(), obuf.len()), (counter.buffer(), 4)],
        )?;
        out[r0 * q..r1 * q].copy_from_slice(&read[0]);
        empty += read[1][0].to_bits() as usize;
    }
    scope.finish(ctx)?;
    Ok(RowNormalized::from_parts(m, q, out, empty))
}
