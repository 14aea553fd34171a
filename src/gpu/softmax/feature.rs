//! Dispatch of `shaders/feature_mean.wgsl`, the linear feature local
//! mean: per batch, chunk sums of the key tiles (`chunk_sums`), their
//! prefix (`prefix`), then each query tile's means (`finish`).

use crate::error::Result;
use crate::gpu::plan::Shape;
use crate::gpu::plan::softmax::{FINISH_WG, SUM_WG};
use crate::gpu::plan::{plan_feature, tiles};
use crate::matrix::alloc_output;
use crate::types::Heads;

use super::{stacked, upload_keys};
use crate::gpu::buffers::{Pooled, upload};
use crate::gpu::context::GpuContext;
use crate::gpu::dispatch::{Bindings, Dispatch, Program, Workgroups};
use crate::gpu::pipelines::PipelineKey;
use crate::gpu::plan::check_u32;
use crate::gpu::shaders::ShaderId;
use crate::gpu::submission::Submission;

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

/// The query rows `r0..r1` of one `finish` tile, whose keys' limits
/// (causal) fall in key tile `key_tile`.
struct QueryTile {
    r0: usize,
    r1: usize,
    key_tile: usize,
}

/// A `finish` tile's output buffer and its stacked rows `p0..p1`.
struct TileOut<'p> {
    p0: usize,
    p1: usize,
    obuf: Pooled<'p>,
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
    let plan = plan_feature(&ctx.limits, &ctx.caps, Shape { m, n, d, q })?;
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
    let key = |shader, cols: usize| {
        PipelineKey::new(shader, vec![("QA", cols.max(1).next_power_of_two() as u32)])
    };
    let finish_key = |cols| key(ShaderId::FeatureFinish, cols);
    let sums_program = Program::new(ctx, OP, &key(ShaderId::FeatureSums, 1))?;
    let prefix_program = Program::new(ctx, OP, &key(ShaderId::FeaturePrefix, 1))?;
    for b in 0..nb {
        let psi_scale = power_of_two_scale(psi.batch_slice(b));
        let key_tiles = upload_keys(ctx, OP, psi, Some(values), (b, b + 1), plan.key_tile)?;
        let sums = ctx.buffer(OP, ((chunks + 1) * e * 4) as u64, storage)?;
        let counter = ctx.buffer(
            OP,
            4,
            storage | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
        )?;
        let dummy = ctx.buffer(OP, 4, storage)?;
        let dummy_out = ctx.buffer(OP, 4, storage)?;
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
        let mut qtiles: Vec<QueryTile> = Vec::new();
        for (t, kt) in key_tiles.iter().enumerate() {
            let (a, z) = if causal {
                (kt.start.max(off) - off, (kt.start + kt.len).max(off) - off)
            } else if t == 0 {
                (0, m)
            } else {
                (0, 0)
            };
            for (r0, r1) in tiles(z - a, plan.query_tile) {
                qtiles.push(QueryTile {
                    r0: a + r0,
                    r1: a + r1,
                    key_tile: t,
                });
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
        for qt in &qtiles {
            let kt = &key_tiles[qt.key_tile];
            for &(c0, c1) in &passes {
                records.push(FeatParams {
                    keys: kt.len as u32,
                    rows: (qt.r1 - qt.r0) as u32,
                    row_start: qt.r0 as u32,
                    key_start: kt.start as u32,
                    c0: c0 as u32,
                    cols: (c1 - c0) as u32,
                    ..base
                });
            }
        }
        let mut bindings = Bindings::new(ctx, OP, ShaderId::FeatureSums, &records)?;
        let mut sub = Submission::new(ctx);
        sub.clear_buffer(counter.buffer(), 0, Some(4));
        let sum_groups = bindings.per_key_tile(&key_tiles, &dummy, &[&sums, &dummy_out, &counter]);
        let sum_dispatches: Vec<Dispatch> = key_tiles
            .iter()
            .zip(sum_groups)
            .enumerate()
            .map(|(t, (kt, group))| Dispatch {
                group,
                record: t,
                workgroups: Workgroups::x(kt.len.div_ceil(plan.chunk) as u32),
            })
            .collect();
        sub.record(&sums_program, &bindings, &sum_dispatches);
        let prefix = Dispatch {
            // The first key tile's group: the prefix reads only the sums.
            group: sum_dispatches[0].group,
            record: key_tiles.len(),
            workgroups: Workgroups::x(
                e.div_ceil(SUM_WG)
                    .clamp(1, ctx.limits.workgroups_per_dim as usize) as u32,
            ),
        };
        sub.record(&prefix_program, &bindings, &[prefix]);
        let mut rec = prefix.record + 1;
        let mut outs = Vec::with_capacity(qtiles.len());
        for qt in &qtiles {
            let (p0, p1) = stacked(b, b + 1, qt.r0, qt.r1, m);
            let qbuf = upload(ctx, OP, phi.data.row_range(p0, p1), storage)?;
            let obuf = ctx.buffer(
                OP,
                ((qt.r1 - qt.r0) * q * 4) as u64,
                storage | wgpu::BufferUsages::COPY_SRC,
            )?;
            sub.fill_sentinel(ctx, OP, &obuf)?;
            let kt = &key_tiles[qt.key_tile];
            let group = bindings.per_key_tile([kt], &qbuf, &[&sums, &obuf, &counter])[0];
            let workgroups = Workgroups::x(Workgroups::cover(OP, qt.r1 - qt.r0, FINISH_WG)?);
            for &(c0, c1) in &passes {
                let program = Program::new(ctx, OP, &finish_key(c1 - c0))?;
                let dispatch = Dispatch {
                    group,
                    record: rec,
                    workgroups,
                };
                sub.record(&program, &bindings, &[dispatch]);
                rec += 1;
            }
            sub.keep(qbuf);
            outs.push(TileOut { p0, p1, obuf });
        }
        sub.keep(bindings);
        let mut sources: Vec<(&wgpu::Buffer, u64)> = outs
            .iter()
            .map(|o| (o.obuf.buffer(), o.obuf.len()))
            .collect();
        sources.push((counter.buffer(), 4));
        let read = sub.submit_and_read(ctx, &scope, &sources)?;
        for (o, data) in outs.iter().zip(&read) {
            out[o.p0 * q..o.p1 * q].copy_from_slice(data);
        }
        empty += read[read.len() - 1][0].to_bits() as usize;
    }
    scope.finish(ctx)?;
    Ok((out, empty))
}

#[cfg(test)]
mod tests {
    use super::*;

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
