//! Dispatch of `shaders/knn.wgsl`: query tiles × key tiles, the running
//! top-k list kept on the device between key tiles.

use ndarray::Array2;

use crate::error::{Error, Result};
use crate::gpu::plan::{KnnPlan, LOCAL_MEAN_WG, MAX_GPU_K, tiles};
use crate::types::Neighbours;

use super::buffers::upload;
use super::dispatch::{Bindings, Dispatch, Program, Workgroups};
use super::keys::OnTiles;
use super::pipelines::PipelineKey;
use super::plan::check_u32;
use super::shaders::{FIRST_TILE, LAST_TILE, ShaderId};
use super::submission::Submission;

const OP: &str = "knn";

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct KnnParams {
    rows: u32,
    keys: u32,
    key0: u32,
    flags: u32,
}

/// Refuses `k` above what one GPU pass keeps.
pub(crate) fn check_gpu_k(k: usize) -> Result<()> {
    if k > MAX_GPU_K {
        return Err(Error::Unsupported {
            op: OP,
            backend: "gpu",
            reason: format!(
                "k = {k} exceeds the {MAX_GPU_K} neighbours one GPU pass keeps; use the CPU backend"
            ),
        });
    }
    Ok(())
}

/// The `k` nearest of the `n` keys of a call against key tiles on the
/// device.
pub(crate) fn knn_on_tiles(
    call: &OnTiles<'_, '_>,
    n: usize,
    k: usize,
    plan: &KnnPlan,
) -> Result<Neighbours> {
    let (ctx, queries, keys) = (call.ctx, call.queries, &call.keys);
    let (m, d) = (queries.rows(), keys.d);
    let key_tiles = keys.tiles;
    let template = vec![
        ("D", d as u32),
        ("K", k as u32),
        ("STAGE", plan.staged_keys as u32),
    ];
    let program = Program::new(ctx, OP, &PipelineKey::new(ShaderId::Knn, template))?;
    let mut distances = Array2::<f32>::zeros((m, k));
    let mut indices = Array2::<i64>::zeros((m, k));
    let storage = wgpu::BufferUsages::STORAGE;
    let readable = storage | wgpu::BufferUsages::COPY_SRC;
    for (r0, r1) in tiles(m, plan.query_tile) {
        let rows = r1 - r0;
        let qbuf = upload(ctx, OP, queries.row_range(r0, r1), storage)?;
        let best = ctx.buffer(OP, (rows * k * 8) as u64, storage)?;
        let out_d = ctx.buffer(OP, (rows * k * 4) as u64, readable)?;
        let out_i = ctx.buffer(OP, (rows * k * 4) as u64, readable)?;
        let last = key_tiles.len() - 1;
        let records = key_tiles
            .iter()
            .enumerate()
            .map(|(t, kt)| {
                Ok(KnnParams {
                    rows: rows as u32,
                    keys: check_u32(OP, "key rows", kt.len)?,
                    key0: check_u32(OP, "key rows", kt.start)?,
                    flags: (u32::from(t == 0) * FIRST_TILE) | (u32::from(t == last) * LAST_TILE),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let mut bindings = Bindings::new(ctx, OP, ShaderId::Knn, &records)?;
        let workgroups = Workgroups::x(Workgroups::cover(OP, rows, LOCAL_MEAN_WG)?);
        let groups = key_tiles
            .iter()
            .map(|kt| bindings.group(&[&qbuf, &kt.keys, &best, &out_d, &out_i]));
        let dispatches = Dispatch::in_order(groups, 0, workgroups);
        let mut sub = Submission::new(ctx);
        sub.fill_sentinel(ctx, OP, &out_d)?;
        sub.fill_sentinel(ctx, OP, &out_i)?;
        sub.record(&program, &bindings, &dispatches);
        sub.keep(bindings);
        let read = sub.submit_and_read(
            ctx,
            call.scope,
            &[(out_d.buffer(), out_d.len()), (out_i.buffer(), out_i.len())],
        )?;
        for r in 0..rows {
            for c in 0..k {
                distances[[r0 + r, c]] = read[0][r * k + c];
                let idx = read[1][r * k + c].to_bits();
                indices[[r0 + r, c]] = if idx == u32::MAX { -1 } else { i64::from(idx) };
            }
        }
    }
    if indices.iter().any(|&i| i < 0 || i as usize >= n) {
        return Err(Error::Gpu {
            op: OP,
            sizes: format!("M={m} N={n} d={d} k={k}"),
            message: "the device returned an out-of-range neighbour index".into(),
        });
    }
    Ok(Neighbours { indices, distances })
}
