//! Dispatch of `shaders/knn.wgsl` (from d = 32 `knn_ip.wgsl`, where its
//! tiles fit): query tiles × dispatch windows of the key tiles (split
//! across workgroups and merged when the queries alone leave the device
//! idle), the running top-k list kept on the device between windows.

use ndarray::Array2;

use crate::error::{Error, Result};
use crate::gpu::plan::{KnnPlan, LOCAL_MEAN_WG, MAX_GPU_K, tiles};
use crate::kernel::Metric;
use crate::types::Neighbours;

use super::buffers::upload;
use super::dispatch::{Bindings, Dispatch, Program, Window, Workgroups, partial_states};
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
    kbase: u32,
    split_keys: u32,
    splits: u32,
    _pad: u32,
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
/// device: per query tile, each key tile swept in windows of
/// `plan.dispatch_keys` keys (one dispatch each), each window's keys split
/// across workgroups when the rows alone give the device too few, with a
/// merge dispatch after each split one (docs/tiling.md, "k nearest
/// neighbours").
pub(crate) fn knn_on_tiles(
    call: &OnTiles<'_, '_>,
    (n, metric): (usize, &Metric),
    plan: &KnnPlan,
) -> Result<Neighbours> {
    let (ctx, queries, keys, k) = (call.ctx, call.queries, &call.keys, plan.k);
    let (m, d) = (queries.rows(), keys.d);
    // From d = 32 the keys are filtered by inner-product tiles and the
    // candidates re-measured (docs/numerics.md, "kNN by inner products
    // (GPU)"): the same lists as the differences.
    // Another metric than the Euclidean one is measured by differences
    // (`plan_knn` plans no inner-product tiles for it), its ranks and
    // distances by `knn.wgsl`'s `METRIC`.
    debug_assert!(plan.ip.is_none() || metric.is_euclidean());
    let (shader, mut template) = match plan.ip {
        Some(resident) => (ShaderId::KnnIp, vec![("QRES", u32::from(resident))]),
        None => (
            ShaderId::Knn,
            vec![
                ("STAGE", plan.staged_keys as u32),
                ("KB", plan.key_block as u32),
            ],
        ),
    };
    template.extend([("D", d as u32), ("K", k as u32)]);
    let mut key = PipelineKey::new(shader, template);
    if shader == ShaderId::Knn {
        key = key.with_metric(metric);
    }
    let windows = Window::all(keys.tiles, plan.dispatch_keys);
    let mut distances = Array2::<f32>::zeros((m, k));
    let mut indices = Array2::<i64>::zeros((m, k));
    let storage = wgpu::BufferUsages::STORAGE;
    let readable = storage | wgpu::BufferUsages::COPY_SRC;
    for (r0, r1) in tiles(m, plan.query_tile) {
        let rows = r1 - r0;
        let splits = plan.key_splits(&ctx.limits, &ctx.caps, rows);
        let qbuf = upload(ctx, OP, queries.row_range(r0, r1), storage)?;
        let best = ctx.buffer(OP, (rows * k * 8) as u64, storage)?;
        let out_d = ctx.buffer(OP, (rows * k * 4) as u64, readable)?;
        let out_i = ctx.buffer(OP, (rows * k * 4) as u64, readable)?;
        let partial = partial_states(ctx, OP, splits, splits * rows * 2 * k)?;
        let last = windows.len() - 1;
        let records = windows
            .iter()
            .enumerate()
            .map(|(w, win @ &Window { key_tile, a, b })| {
                Ok(KnnParams {
                    rows: check_u32(OP, "query rows", rows)?,
                    keys: check_u32(OP, "key rows", b - a)?,
                    key0: check_u32(OP, "key rows", keys.tiles[key_tile].start + a)?,
                    flags: (u32::from(w == 0) * FIRST_TILE) | (u32::from(w == last) * LAST_TILE),
                    kbase: check_u32(OP, "key rows", a)?,
                    split_keys: check_u32(OP, "key rows", win.split_keys(splits))?,
                    splits: check_u32(OP, "key splits", splits)?,
                    _pad: 0,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let row_groups = Workgroups::cover(OP, rows, LOCAL_MEAN_WG)?;
        let workgroups = Workgroups {
            x: row_groups,
            y: check_u32(OP, "key splits", splits)?,
            z: 1,
        };
        let merge = Workgroups::x(row_groups);
        let program = Program::split(ctx, OP, &key, splits, merge)?;
        let mut bindings = Bindings::new(ctx, OP, shader, &records)?;
        let groups: Vec<_> = keys
            .tiles
            .iter()
            .map(|kt| bindings.group(&[&qbuf, &kt.keys, &best, &out_d, &out_i, &partial]))
            .collect();
        let dispatches =
            Dispatch::in_order(windows.iter().map(|w| groups[w.key_tile]), 0, workgroups);
        let mut sub = Submission::new(ctx);
        sub.fill_sentinel(ctx, OP, &out_d)?;
        sub.fill_sentinel(ctx, OP, &out_i)?;
        sub.record(&program, &bindings, &dispatches);
        sub.keep(bindings);
        sub.keep(partial);
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

#[cfg(test)]
mod tests;
