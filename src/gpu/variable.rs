//! Row states with variable bandwidths on the GPU
//! (`shaders/variable_bandwidth.wgsl`; docs/numerics.md, "Variable
//! bandwidths").
//!
//! The keys go up once per call in key tiles, each with its scales
//! `(τ_j, c_j)` beside it and its values; per query tile (its rows and
//! their scales `σ_i`) and pass of value columns, one dispatch per window
//! of a key tile continues the row states on the device, and the states
//! are read back. Rows left without weight under a full-support profile
//! (every key beyond `T_FAR`) are finished on the host in `f64` from the
//! host's keys ([`VariablePass::exact_row`]).

use ndarray::{Array1, Array2};

use crate::error::Result;
use crate::kernel::Kernel;
use crate::types::{RowStates, VariablePass};

use super::buffers::{Pooled, upload};
use super::context::GpuContext;
use super::dispatch::{Bindings, Dispatch, Program, Workgroups};
use super::pipelines::PipelineKey;
use super::plan::check_u32;
use super::plan::tiles;
use super::plan::variable::{VARIABLE_STAGE, VARIABLE_WG, VariablePlan, plan_variable};
use super::shaders::{FIRST_TILE, ShaderId};
use super::submission::Submission;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    keys: u32,
    q_stride: u32,
    c0: u32,
    key0: u32,
    flags: u32,
    _pad: [u32; 2],
}

/// A key tile on the device: keys, their scales `(τ_j, c_j)` and values.
struct Tile<'p> {
    len: usize,
    keys: Pooled<'p>,
    scales: Pooled<'p>,
    values: Pooled<'p>,
}

/// The row states of `pass` on the device (see the module notes).
pub(crate) fn variable_states(ctx: &GpuContext, pass: &VariablePass<'_>) -> Result<RowStates> {
    let op = pass.op;
    let (m, n, d, q) = (
        pass.queries.rows(),
        pass.keys.rows(),
        pass.keys.cols(),
        pass.cols(),
    );
    check_u32(op, "queries", m)?;
    check_u32(op, "keys", n)?;
    let plan = plan_variable(&ctx.limits, &ctx.caps, (m, n, d, q))?;
    let storage = wgpu::BufferUsages::STORAGE;
    let mut key_tiles = Vec::new();
    for (a, b) in tiles(n, plan.key_tile) {
        let scales: Vec<[f32; 2]> = (a..b)
            .map(|j| [pass.scales.key(j), pass.scales.log_weight(j)])
            .collect();
        key_tiles.push(Tile {
            len: b - a,
            keys: upload(ctx, op, pass.keys.row_range(a, b), storage)?,
            scales: upload(ctx, op, &scales, storage)?,
            values: match pass.values {
                Some(v) => upload(ctx, op, v.row_range(a, b), storage)?,
                None => ctx.buffer(op, 4, storage)?,
            },
        });
    }
    let mut mw = Array1::from_elem(m, f32::NEG_INFINITY);
    let mut sum = Array1::zeros(m);
    let mut u = Array2::zeros((m, q));
    let passes: Vec<(usize, usize)> = if q == 0 {
        vec![(0, 0)]
    } else {
        tiles(q, plan.cols).collect()
    };
    for (r0, r1) in tiles(m, plan.query_tile) {
        let rows = r1 - r0;
        let queries = upload(ctx, op, pass.queries.row_range(r0, r1), storage)?;
        let scales: Vec<f32> = (r0..r1).map(|i| pass.scales.row(i)).collect();
        let row_scale = upload(ctx, op, &scales, storage)?;
        for &(c0, c1) in &passes {
            let qt = c1 - c0;
            let sw = 2 + qt.max(1);
            let state = ctx.buffer(
                op,
                (rows * sw * 4) as u64,
                storage | wgpu::BufferUsages::COPY_SRC,
            )?;
            let bufs = Buffers {
                queries: &queries,
                row_scale: &row_scale,
                state: &state,
            };
            let read = sweep(ctx, pass, &plan, &key_tiles, &bufs, (rows, c0, qt))?;
            for (r, st) in read.chunks_exact(sw).enumerate() {
                let i = r0 + r;
                if c0 == 0 {
                    mw[i] = st[0];
                    sum[i] = f64::from(st[1]);
                }
                for c in 0..qt {
                    u[[i, c0 + c]] = f64::from(st[2 + c]);
                }
            }
        }
    }
    drop(key_tiles);
    // Far rows: finished in f64 on the host.
    let mut row = vec![0.0f64; q];
    for i in 0..m {
        if pass.needs_exact(mw[i], sum[i]) {
            let (mm, ss) = pass.exact_row(i, &mut row);
            mw[i] = mm;
            sum[i] = ss;
            u.row_mut(i).assign(&Array1::from(row.clone()));
        }
    }
    let mut st = RowStates {
        max_log_weight: mw,
        sum,
        weighted: u,
    };
    st.normalize_empty();
    Ok(st)
}

/// A query tile's buffers.
struct Buffers<'a, 'p> {
    queries: &'a Pooled<'p>,
    row_scale: &'a Pooled<'p>,
    state: &'a Pooled<'p>,
}

/// One pass (value columns `c0..c0 + qt`) of a query tile of `rows` rows
/// over every key tile, window by window; returns the states read back.
fn sweep(
    ctx: &GpuContext,
    pass: &VariablePass<'_>,
    plan: &VariablePlan,
    key_tiles: &[Tile<'_>],
    bufs: &Buffers<'_, '_>,
    (rows, c0, qt): (usize, usize, usize),
) -> Result<Vec<f32>> {
    let op = pass.op;
    let d = pass.keys.cols();
    let q = pass.cols();
    let kernel = Kernel::new(pass.profile, 1.0)?;
    let template = vec![
        ("D", d as u32),
        ("QT", qt as u32),
        ("QA", qt.max(1) as u32),
        ("STAGE", VARIABLE_STAGE as u32),
    ];
    let key = PipelineKey::for_kernel(ShaderId::VariableBandwidth, template, &kernel);
    let program = Program::new(ctx, op, &key)?;
    let rows32 = check_u32(op, "queries", rows)?;
    let mut records = Vec::new();
    let mut windows = Vec::new();
    for (t, tile) in key_tiles.iter().enumerate() {
        for (a, b) in tiles(tile.len, plan.window) {
            records.push(Params {
                rows: rows32,
                keys: check_u32(op, "keys", b - a)?,
                q_stride: check_u32(op, "values", q.max(1))?,
                c0: check_u32(op, "values", c0)?,
                key0: check_u32(op, "keys", a)?,
                flags: if records.is_empty() { FIRST_TILE } else { 0 },
                _pad: [0; 2],
            });
            windows.push(t);
        }
    }
    let sizes = format!("M={rows} N={} d={d} q={q}", pass.keys.rows());
    let scope = ctx.scope(op, sizes)?;
    let mut sub = Submission::new(ctx);
    sub.fill_sentinel(ctx, op, bufs.state)?;
    let mut bindings = Bindings::new(ctx, op, ShaderId::VariableBandwidth, &records)?;
    let groups: Vec<_> = key_tiles
        .iter()
        .map(|kt| {
            bindings.group(&[
                bufs.queries,
                bufs.row_scale,
                &kt.keys,
                &kt.scales,
                &kt.values,
                bufs.state,
            ])
        })
        .collect();
    let workgroups = Workgroups::x(Workgroups::cover(op, rows, VARIABLE_WG)?);
    let dispatches: Vec<Dispatch> = windows
        .iter()
        .enumerate()
        .map(|(r, &t)| Dispatch {
            group: groups[t],
            record: r,
            workgroups,
        })
        .collect();
    sub.record(&program, &bindings, &dispatches);
    sub.keep(bindings);
    let sw = 2 + qt.max(1);
    let read = sub.submit_and_read(
        ctx,
        &scope,
        &[(bufs.state.buffer(), (rows * sw * 4) as u64)],
    )?;
    scope.finish(ctx)?;
    Ok(read.into_iter().next().unwrap_or_default())
}
