//! A prepared attention set on the GPU: the key tiles and value rows of
//! every batch uploaded once into device buffers the set owns (charged to
//! the engine's budget), cut as a call with as many queries as keys would
//! cut them; a call uploads only its queries and reads back its output.

use std::sync::Arc;

use super::attention::attend_call;
use super::{stacked, upload_group};
use crate::backend::PreparedAttention;
use crate::error::Result;
use crate::gpu::check_u32;
use crate::gpu::context::GpuContext;
use crate::gpu::keys::{KeyTile, StoredTile};
use crate::gpu::plan::{plan_attend, plan_attend_prepared, tiles};
use crate::gpu::resident::{buffer_bytes, owned_upload, wait_for_uploads};
use crate::memory::Reservation;
use crate::types::{Attention, Heads};

/// Device buffers of a prepared attention set.
pub(crate) struct GpuAttention {
    ctx: Arc<GpuContext>,
    /// Batches `b0..b1` stored together, and their key tiles (keys and, as
    /// set 0, values; batch-major within a tile).
    groups: Vec<((usize, usize), Vec<StoredTile<'static>>)>,
    n: usize,
    d: usize,
    q: usize,
    key_tile: usize,
    group: usize,
    held: Reservation,
}

impl std::fmt::Debug for GpuAttention {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuAttention")
            .field("groups", &self.groups.len())
            .field("n", &self.n)
            .field("d", &self.d)
            .field("q", &self.q)
            .field("key_tile", &self.key_tile)
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

impl GpuAttention {
    /// Uploads `psi` and `values` in the key tiles and batch groups of
    /// `plan_attend(B, N, N, d, q)`, after charging their size to the
    /// engine's budget.
    pub(crate) fn new(ctx: &Arc<GpuContext>, psi: &Heads<'_>, values: &Heads<'_>) -> Result<Self> {
        const OP: &str = "prepare_attention";
        let (nb, n, d, q) = (psi.batch, psi.rows, psi.cols(), values.cols());
        check_u32(OP, "key rows", nb * n)?;
        let plan = plan_attend(&ctx.limits, &ctx.caps, nb, n, n, d, q)?;
        let key_tile = plan.key_tile;
        // Several batches share a buffer only when a tile is a whole batch.
        let group = if key_tile >= n { plan.batch_group } else { 1 };
        let bytes: u64 = tiles(nb, group)
            .flat_map(|(b0, b1)| {
                tiles(n, key_tile).map(move |(k0, k1)| {
                    let (a, b) = stacked(b0, b1, k0, k1, n);
                    buffer_bytes((b - a) * d) + buffer_bytes((b - a) * q)
                })
            })
            .sum();
        let held = ctx.pool.reserve(OP, "attention keys and values", bytes)?;
        let scope = ctx.scope(
            OP,
            format!("B={nb} N={n} d={d} q={q} key tile={key_tile} batch group={group}"),
        )?;
        let mut alloc = |data: &[f32]| owned_upload(ctx, data);
        let groups = tiles(nb, group)
            .map(|g| Ok((g, upload_group(psi, Some(values), g, key_tile, &mut alloc)?)))
            .collect::<Result<Vec<_>>>()?;
        wait_for_uploads(ctx, &scope)?;
        scope.finish(ctx)?;
        Ok(GpuAttention {
            ctx: Arc::clone(ctx),
            groups,
            n,
            d,
            q,
            key_tile,
            group,
            held,
        })
    }
}

impl PreparedAttention for GpuAttention {
    fn attend(&self, phi: &Heads<'_>, attn: &Attention) -> Result<Vec<f32>> {
        const OP: &str = "kernel_softmax";
        let ctx = &*self.ctx;
        let (nb, m, n, d, q) = (phi.batch, phi.rows, self.n, self.d, self.q);
        check_u32(OP, "query rows", nb * m)?;
        let plan = plan_attend_prepared(
            &ctx.limits,
            &ctx.caps,
            (nb, m, n, d, q),
            self.key_tile,
            self.group,
        )?;
        let shape = (nb, m, n, d, q);
        attend_call(ctx, &plan, attn, shape, " (prepared)", |call, out| {
            for ((g0, g1), stored) in &self.groups {
                let key_tiles: Vec<KeyTile<'static>> =
                    stored.iter().map(|t| t.view(Some(0))).collect();
                for (b0, b1) in tiles(g1 - g0, plan.batch_group) {
                    call.batches(ctx, phi, (g0 + b0, g0 + b1), b0, &key_tiles, out)?;
                }
            }
            Ok(())
        })
    }

    fn bytes(&self) -> u64 {
        self.held.bytes()
    }
}
