//! Row states with variable bandwidths on the GPU
//! (`shaders/variable_bandwidth.wgsl`; docs/numerics.md, "Variable
//! bandwidths").
//!
//! The keys go up once in key tiles, each with its scales `(τ_j, c_j)`
//! beside it and its values: per call, per MeanShift run, or once for a
//! key set ([`GpuVariable`]); per query tile (its rows and
//! their scales `σ_i`) and pass of value columns, one dispatch per window
//! of a key tile continues the row states on the device, and the states
//! are read back. Rows left without weight under a full-support profile
//! (every key beyond `T_FAR`) are finished on the host in `f64` from the
//! host's keys ([`VariablePass::exact_row`]).

use std::sync::Arc;

use ndarray::{Array1, Array2};

use crate::backend::PreparedVariable;
use crate::error::Result;
use crate::kernel::{Kernel, Profile};
use crate::matrix::Matrix;
use crate::memory::Reservation;
use crate::types::{RowStates, VariableKeys, VariablePass};

use super::buffers::{Pooled, upload};
use super::buffers::{buffer_bytes, owned_upload, wait_for_uploads};
use super::context::GpuContext;
use super::dispatch::{Bindings, Dispatch, Program, Workgroups};
use super::pipelines::PipelineKey;
use super::plan::check_u32;
use super::plan::tiles;
use super::plan::variable::{VARIABLE_STAGE, VARIABLE_WG, VariablePlan, plan_variable};
use super::prepared::Device;
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

/// The key side of variable-bandwidth passes on the device (see the
/// module notes): uploaded once, for a call or a run from the pool, for a
/// key set into buffers of its own charged to the engine's budget; the
/// host rows stay beside them for the far rows.
pub(crate) struct GpuVariable<'a> {
    ctx: Device<'a>,
    tiles: Vec<Tile<'a>>,
    keys: VariableKeys<'a>,
    held: Option<Reservation>,
}

impl std::fmt::Debug for GpuVariable<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuVariable")
            .field("n", &self.keys.keys.rows())
            .field("d", &self.keys.keys.cols())
            .field("tiles", &self.tiles.len())
            .field("kept", &self.held.is_some())
            .finish_non_exhaustive()
    }
}

/// The scales `(τ_j, c_j)` of keys `a..b`, interleaved.
fn tile_scales(keys: &VariableKeys<'_>, a: usize, b: usize) -> Vec<f32> {
    let at = |v: &[f32], j: usize, unit: f32| v.get(j).copied().unwrap_or(unit);
    (a..b)
        .flat_map(|j| [at(&keys.inv, j, 1.0), at(&keys.log_weights, j, 0.0)])
        .collect()
}

/// The key tile of `keys` (their plan's, independent of the queries).
fn key_tile(ctx: &GpuContext, keys: &VariableKeys<'_>) -> Result<usize> {
    let (n, d) = (keys.keys.rows(), keys.keys.cols());
    let q = keys.values.as_ref().map_or(0, Matrix::cols);
    Ok(plan_variable(&ctx.limits, &ctx.caps, (1, n, d, q))?.key_tile)
}

/// The tiles of `keys`, each buffer put on the device by `alloc`.
fn upload_tiles<'p>(
    ctx: &GpuContext,
    keys: &VariableKeys<'_>,
    alloc: &mut dyn FnMut(&[f32]) -> Result<Pooled<'p>>,
) -> Result<Vec<Tile<'p>>> {
    let n = keys.keys.rows();
    tiles(n, key_tile(ctx, keys)?)
        .map(|(a, b)| {
            Ok(Tile {
                len: b - a,
                keys: alloc(keys.keys.row_range(a, b))?,
                scales: alloc(&tile_scales(keys, a, b))?,
                values: match &keys.values {
                    Some(v) => alloc(v.row_range(a, b))?,
                    None => alloc(&[0.0])?,
                },
            })
        })
        .collect()
}

impl GpuVariable<'static> {
    /// A key set's: the tiles in buffers of its own, charged to the
    /// engine's budget, and a host copy of the rows.
    pub(crate) fn kept(ctx: &Arc<GpuContext>, keys: VariableKeys<'_>) -> Result<Self> {
        const OP: &str = "prepare";
        let (n, d) = (keys.keys.rows(), keys.keys.cols());
        check_u32(OP, "key rows", n)?;
        let q = keys.values.as_ref().map_or(0, Matrix::cols);
        let bytes: u64 = tiles(n, key_tile(ctx, &keys)?)
            .map(|(a, b)| {
                let len = b - a;
                buffer_bytes(len * d) + buffer_bytes(2 * len) + buffer_bytes(len * q)
            })
            .sum();
        let held = ctx
            .pool
            .reserve(OP, "resident keys, scales and values", bytes)?;
        let scope = ctx.scope(OP, format!("N={n} d={d} q={q} (variable bandwidths)"))?;
        let tiles = upload_tiles(ctx, &keys, &mut |data| owned_upload(ctx, data))?;
        wait_for_uploads(ctx, &scope)?;
        scope.finish(ctx)?;
        Ok(GpuVariable {
            ctx: Device::Shared(Arc::clone(ctx)),
            tiles,
            keys: keys.into_owned(OP)?,
            held: Some(held),
        })
    }
}

impl<'a> GpuVariable<'a> {
    /// A call's or a run's: the tiles from the pool, the host rows
    /// borrowed.
    pub(crate) fn for_call(
        ctx: &'a GpuContext,
        op: &'static str,
        keys: VariableKeys<'a>,
    ) -> Result<Self> {
        let (n, d) = (keys.keys.rows(), keys.keys.cols());
        check_u32(op, "keys", n)?;
        let storage = wgpu::BufferUsages::STORAGE;
        let scope = ctx.scope(op, format!("N={n} d={d} (keys)"))?;
        let tiles = upload_tiles(ctx, &keys, &mut |data| upload(ctx, op, data, storage))?;
        scope.finish(ctx)?;
        Ok(GpuVariable {
            ctx: Device::Borrowed(ctx),
            tiles,
            keys,
            held: None,
        })
    }
}

impl PreparedVariable for GpuVariable<'_> {
    fn states(
        &self,
        op: &'static str,
        profile: Profile,
        queries: (&Matrix<'_>, Option<&[f32]>),
        with_values: bool,
    ) -> Result<RowStates> {
        let pass = self.keys.pass(op, profile, queries, with_values);
        states_on_tiles(&self.ctx, &pass, &self.tiles)
    }

    fn bytes(&self) -> u64 {
        self.held.as_ref().map_or(0, Reservation::bytes)
    }
}

/// The row states of `pass` over its key tiles on the device (see the
/// module notes).
fn states_on_tiles(
    ctx: &GpuContext,
    pass: &VariablePass<'_>,
    key_tiles: &[Tile<'_>],
) -> Result<RowStates> {
    let op = pass.op;
    let (m, n, d, q) = (
        pass.queries.rows(),
        pass.keys.rows(),
        pass.keys.cols(),
        pass.cols(),
    );
    check_u32(op, "queries", m)?;
    let plan = plan_variable(&ctx.limits, &ctx.caps, (m, n, d, q))?;
    let storage = wgpu::BufferUsages::STORAGE;
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
            let read = sweep(ctx, pass, &plan, key_tiles, &bufs, (rows, c0, qt))?;
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
