//! Key sets on the GPU: key tiles and their value rows uploaded once into
//! device buffers the key set owns, cut by the same plan as the ops (so
//! `N` may exceed one binding); each query uploads only its own rows.

use std::sync::Arc;

use super::buffers::Pooled;
use super::check_u32;
use super::context::ErrorScope;
use super::context::GpuContext;
use super::far::{HostKeys, far_means, far_states, means_need_host, states_need_host};
use super::keys::{DeviceKeys, KeyTile, Rows, StoredTile, upload_tiles};
use super::knn::{check_gpu_k, knn_on_tiles};
use super::local_mean::{means_on_tiles, moments_on_tiles, states_on_tiles};
use super::submission::Submission;
use crate::backend::Resident;
use crate::error::{Error, Result};
use crate::gpu::plan::{plan_knn, plan_local_mean, plan_local_moments, resident_key_tile, tiles};
use crate::kernel::{Kernel, Profile};
use crate::matrix::Matrix;
use crate::memory::Reservation;
use crate::types::{MomentLayout, Neighbours, RowNormalized, RowStates};

/// Device buffers of a key set. Dropping it frees them (wgpu keeps a
/// buffer alive until the submissions that use it complete) and gives
/// their bytes back to the engine's memory budget.
pub(crate) struct GpuResident {
    ctx: Arc<GpuContext>,
    tiles: Vec<StoredTile<'static>>,
    n: usize,
    d: usize,
    set_cols: Vec<usize>,
    key_tile: usize,
    held: Reservation,
}

impl std::fmt::Debug for GpuResident {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuResident")
            .field("n", &self.n)
            .field("d", &self.d)
            .field("sets", &self.set_cols)
            .field("key_tile", &self.key_tile)
            .field("tiles", &self.tiles.len())
            .finish_non_exhaustive()
    }
}

/// Bytes of a buffer holding `floats` values (at least 4, as the pool rounds).
pub(crate) fn buffer_bytes(floats: usize) -> u64 {
    (floats as u64).saturating_mul(4).max(4)
}

/// `data` in a device buffer of its own, outside the pool (the caller
/// charges its bytes to the budget). COPY_SRC: far rows read a key set's
/// keys back (far.rs).
pub(crate) fn owned_upload(ctx: &GpuContext, data: &[f32]) -> Result<Pooled<'static>> {
    let buffer = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("key set"),
        size: buffer_bytes(data.len()),
        usage: wgpu::BufferUsages::STORAGE
            | wgpu::BufferUsages::COPY_DST
            | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    ctx.queue
        .write_buffer(&buffer, 0, bytemuck::cast_slice(data));
    Ok(Pooled::owned(buffer, buffer_bytes(data.len())))
}

/// Waits until the uploads queued so far are on the device, so that their
/// failures surface in `scope`.
pub(crate) fn wait_for_uploads(ctx: &GpuContext, scope: &ErrorScope) -> Result<()> {
    let index = ctx.queue.submit([]);
    ctx.device
        .poll(wgpu::PollType::Wait {
            submission_index: Some(index),
            timeout: None,
        })
        .map(|_| ())
        .map_err(|e| scope.error(format!("waiting for the upload: {e}")))
}

impl GpuResident {
    /// Uploads `keys` and every value matrix, tiled so that every op's plan
    /// accepts the tiles, after charging their size to the engine's budget.
    pub(crate) fn new(
        ctx: &Arc<GpuContext>,
        keys: &Matrix<'_>,
        sets: &[Matrix<'_>],
    ) -> Result<Self> {
        const OP: &str = "prepare";
        let (n, d) = (keys.rows(), keys.cols());
        check_u32(OP, "key rows", n)?;
        let set_cols: Vec<usize> = sets.iter().map(Matrix::cols).collect();
        let key_tile = resident_key_tile(&ctx.limits, &ctx.caps, n, d, &set_cols)?;
        let bytes: u64 = tiles(n, key_tile)
            .map(|(a, b)| {
                let len = b - a;
                buffer_bytes(len * d) + set_cols.iter().map(|&q| buffer_bytes(len * q)).sum::<u64>()
            })
            .sum();
        let held = ctx.pool.reserve(OP, "resident keys and values", bytes)?;
        let scope = ctx.scope(
            OP,
            format!("N={n} d={d} value columns={set_cols:?} key tile={key_tile}"),
        )?;
        let mut alloc = |data: &[f32]| owned_upload(ctx, data);
        let key_rows = |a, b| keys.row_range(a, b);
        let set_rows: Vec<_> = sets.iter().map(|v| move |a, b| v.row_range(a, b)).collect();
        let set_rows: Vec<&Rows<'_>> = set_rows.iter().map(|f| f as &Rows<'_>).collect();
        let tiles = upload_tiles(n, key_tile, &key_rows, &set_rows, &mut alloc)?;
        wait_for_uploads(ctx, &scope)?;
        scope.finish(ctx)?;
        Ok(GpuResident {
            ctx: Arc::clone(ctx),
            tiles,
            n,
            d,
            set_cols,
            key_tile,
            held,
        })
    }

    /// Loans of the key tiles, with value matrix `set` as their values
    /// (the keys themselves stand in when there is none: the shader reads
    /// no values then).
    fn key_tiles(&self, set: Option<usize>) -> Vec<KeyTile<'static>> {
        self.tiles.iter().map(|t| t.view(set)).collect()
    }

    /// Fails (rather than computing with tiles the plan does not allow)
    /// when a query's plan wants smaller key tiles than those resident.
    fn check_tile(&self, op: &'static str, planned: usize) -> Result<usize> {
        if planned < self.key_tile.min(self.n) {
            return Err(Error::Unsupported {
                op,
                backend: "gpu",
                reason: format!(
                    "this query needs key tiles of at most {planned} keys; the key set holds tiles of {} (raise TileLimits::buffer_bytes)",
                    self.key_tile
                ),
            });
        }
        Ok(self.key_tile)
    }

    /// The keys and the values of `set`, read back from the device into
    /// row-major host copies: for the rare rows finished on the host
    /// (far.rs), so never on the common path.
    fn read_back(&self, scope: &ErrorScope, set: Option<usize>) -> Result<(Vec<f32>, Vec<f32>)> {
        let ctx = &*self.ctx;
        let q = set.map_or(0, |s| self.set_cols[s]);
        let mut keys = Vec::with_capacity(self.n * self.d);
        let mut values = Vec::with_capacity(self.n * q);
        for t in &self.tiles {
            let mut sources = vec![(t.keys.buffer(), (t.len * self.d * 4) as u64)];
            if let Some(s) = set.filter(|_| q > 0) {
                sources.push((t.sets[s].buffer(), (t.len * q * 4) as u64));
            }
            let read = Submission::new(ctx).submit_and_read(ctx, scope, &sources)?;
            keys.extend_from_slice(&read[0]);
            if let Some(v) = read.get(1) {
                values.extend_from_slice(v);
            }
        }
        Ok((keys, values))
    }

    fn host<'a>(&self, keys: &'a [f32], values: &'a [f32], q: usize) -> HostKeys<'a> {
        HostKeys {
            keys,
            values,
            n: self.n,
            d: self.d,
            q,
        }
    }

    fn sizes(&self, m: usize, what: &str) -> String {
        format!("M={m} N={} d={} {what} (key set)", self.n, self.d)
    }
}

impl Resident for GpuResident {
    fn local_mean(
        &self,
        kernel: &Kernel,
        queries: &Matrix<'_>,
        set: usize,
    ) -> Result<RowNormalized> {
        const OP: &str = "local_mean";
        if kernel.profile() == Profile::Cauchy {
            // As in a one-shot call: a vanishing cauchy row shows in its state.
            return Ok(self.row_states(kernel, queries, Some(set))?.means());
        }
        let (ctx, m, q) = (&*self.ctx, queries.rows(), self.set_cols[set]);
        check_u32(OP, "query rows", m)?;
        let mut plan = plan_local_mean(&ctx.limits, &ctx.caps, m, self.n, self.d, q)?;
        plan.key_tile = self.check_tile(OP, plan.key_tile)?;
        let scope = ctx.scope(OP, self.sizes(m, &format!("q={q}")))?;
        let tiles = self.key_tiles(Some(set));
        let keys = DeviceKeys {
            tiles: &tiles,
            d: self.d,
            q,
        };
        let mut out = means_on_tiles(ctx, &scope, kernel, queries, &keys, &plan)?;
        if means_need_host(kernel, &out) {
            let (kh, vh) = self.read_back(&scope, Some(set))?;
            let host = self.host(&kh, &vh, q);
            far_means(kernel, queries, &host, &mut out);
        }
        scope.finish(ctx)?;
        Ok(out)
    }

    fn row_states(
        &self,
        kernel: &Kernel,
        queries: &Matrix<'_>,
        set: Option<usize>,
    ) -> Result<RowStates> {
        const OP: &str = "row_states";
        let (ctx, m) = (&*self.ctx, queries.rows());
        let q = set.map_or(0, |s| self.set_cols[s]);
        check_u32(OP, "query rows", m)?;
        let mut plan = plan_local_mean(&ctx.limits, &ctx.caps, m, self.n, self.d, q)?;
        plan.key_tile = self.check_tile(OP, plan.key_tile)?;
        let scope = ctx.scope(OP, self.sizes(m, &format!("q={q}")))?;
        let tiles = self.key_tiles(set);
        let keys = DeviceKeys {
            tiles: &tiles,
            d: self.d,
            q,
        };
        let mut out = states_on_tiles(ctx, &scope, kernel, queries, &keys, &plan, false)?;
        if states_need_host(kernel, &out) {
            let (kh, vh) = self.read_back(&scope, set)?;
            let host = self.host(&kh, &vh, q);
            far_states(kernel, queries, &host, false, &mut out);
        }
        scope.finish(ctx)?;
        Ok(out)
    }

    fn local_moments(
        &self,
        kernel: &Kernel,
        queries: &Matrix<'_>,
        layout: MomentLayout,
        set: Option<usize>,
    ) -> Result<RowNormalized> {
        const OP: &str = "local_moments";
        let (ctx, m) = (&*self.ctx, queries.rows());
        check_u32(OP, "query rows", m)?;
        let mut plan = plan_local_moments(&ctx.limits, &ctx.caps, (m, self.n), &layout)?;
        plan.key_tile = self.check_tile(OP, plan.key_tile)?;
        let scope = ctx.scope(OP, self.sizes(m, &format!("q={}", layout.qy)))?;
        let tiles = self.key_tiles(set);
        let keys = DeviceKeys {
            tiles: &tiles,
            d: self.d,
            q: layout.qy,
        };
        let mut out = moments_on_tiles(ctx, &scope, kernel, queries, &keys, &plan, layout)?;
        if means_need_host(kernel, &out) {
            let (kh, vh) = self.read_back(&scope, set)?;
            let (d, qy) = (self.d, layout.qy);
            let keys = (self.n, |j, k| kh[j * d + k], |j, c| vh[j * qy + c]);
            layout.finish_far_rows(kernel, queries.as_slice(), keys, &mut out);
        }
        scope.finish(ctx)?;
        Ok(out)
    }

    fn knn(&self, queries: &Matrix<'_>, k: usize) -> Result<Neighbours> {
        const OP: &str = "knn";
        let (ctx, m) = (&*self.ctx, queries.rows());
        check_gpu_k(k)?;
        check_u32(OP, "query rows", m)?;
        let mut plan = plan_knn(&ctx.limits, &ctx.caps, m, self.n, self.d, k)?;
        plan.key_tile = self.check_tile(OP, plan.key_tile)?;
        let scope = ctx.scope(OP, self.sizes(m, &format!("k={k}")))?;
        let tiles = self.key_tiles(None);
        let keys = DeviceKeys {
            tiles: &tiles,
            d: self.d,
            q: 0,
        };
        let out = knn_on_tiles(ctx, &scope, queries, &keys, self.n, k, &plan)?;
        scope.finish(ctx)?;
        Ok(out)
    }

    fn check_k(&self, k: usize) -> Result<()> {
        check_gpu_k(k)
    }

    fn bytes(&self) -> u64 {
        self.held.bytes()
    }
}
