//! Attention keys and values prepared on the GPU. A set kept across calls
//! holds the key tiles and value rows of every batch, uploaded once into
//! device buffers it owns (charged to the engine's budget), cut as a call
//! with as many queries as keys would cut them; a call uploads only its
//! queries and reads back its output. For one call (`kernel_softmax`) the
//! inputs stay borrowed and each batch group's key tiles come from the
//! pool as the call reaches it, cut by that call's own plan, so only one
//! group is on the device at a time.

use std::sync::Arc;

use super::attention::attend_call;
use super::{stacked, upload_group, upload_keys};
use crate::backend::PreparedAttention;
use crate::error::Result;
use crate::gpu::buffers::{buffer_bytes, owned_upload, wait_for_uploads};
use crate::gpu::context::GpuContext;
use crate::gpu::keys::{KeyTile, StoredTile};
use crate::gpu::plan::check_u32;
use crate::gpu::plan::{plan_attend, plan_attend_prepared, tiles};
use crate::memory::Reservation;
use crate::types::{Attention, Heads};

/// Attention keys and values on the GPU: a kept set's device buffers, or a
/// call's borrowed inputs.
pub(crate) enum GpuAttention<'a> {
    Kept(Kept),
    Call {
        ctx: &'a GpuContext,
        psi: Heads<'a>,
        values: Heads<'a>,
    },
}

/// Device buffers of a kept attention set.
pub(crate) struct Kept {
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

impl std::fmt::Debug for GpuAttention<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Self::Kept(s) = self else {
            return f.debug_struct("GpuAttention").finish_non_exhaustive();
        };
        f.debug_struct("GpuAttention")
            .field("groups", &s.groups.len())
            .field("n", &s.n)
            .field("d", &s.d)
            .field("q", &s.q)
            .field("key_tile", &s.key_tile)
            .field("group", &s.group)
            .finish_non_exhaustive()
    }
}

impl GpuAttention<'static> {
    /// A kept set: uploads `psi` and `values` in the key tiles and batch groups of
    /// `plan_attend(B, N, N, d, q)`, after charging their size to the
    /// engine's budget.
    pub(crate) fn kept(ctx: &Arc<GpuContext>, psi: &Heads<'_>, values: &Heads<'_>) -> Result<Self> {
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
        Ok(GpuAttention::Kept(Kept {
            ctx: Arc::clone(ctx),
            groups,
            n,
            d,
            q,
            key_tile,
            group,
            held,
        }))
    }
}

impl<'a> GpuAttention<'a> {
    /// The keys and values of one call, borrowed until it runs.
    pub(crate) fn for_call(ctx: &'a GpuContext, psi: &Heads<'a>, values: &Heads<'a>) -> Self {
        GpuAttention::Call {
            ctx,
            psi: psi.clone(),
            values: values.clone(),
        }
    }
}

/// `softmax(s·ΦΨᵀ)V` of every batch of one call: each batch group's key
/// tiles uploaded from the pool, cut by the call's own plan.
fn attend_once(
    ctx: &GpuContext,
    (psi, values): (&Heads<'_>, &Heads<'_>),
    phi: &Heads<'_>,
    attn: &Attention,
) -> Result<Vec<f32>> {
    const OP: &str = "kernel_softmax";
    let (nb, m, n, d, q) = (phi.batch, phi.rows, psi.rows, phi.cols(), values.cols());
    check_u32(OP, "query rows", nb * m)?;
    check_u32(OP, "key rows", nb * n)?;
    let plan = plan_attend(&ctx.limits, &ctx.caps, nb, m, n, d, q)?;
    attend_call(ctx, &plan, attn, (nb, m, n, d, q), "", |call, out| {
        for (b0, b1) in tiles(nb, plan.batch_group) {
            let key_tiles = upload_keys(ctx, OP, psi, Some(values), (b0, b1), plan.key_tile)?;
            call.batches(ctx, phi, (b0, b1), 0, &key_tiles, out)?;
        }
        Ok(())
    })
}

impl PreparedAttention for GpuAttention<'_> {
    fn attend(&self, phi: &Heads<'_>, attn: &Attention) -> Result<Vec<f32>> {
        match self {
            GpuAttention::Kept(s) => s.attend(phi, attn),
            GpuAttention::Call { ctx, psi, values } => attend_once(ctx, (psi, values), phi, attn),
        }
    }

    fn bytes(&self) -> u64 {
        match self {
            GpuAttention::Kept(s) => s.held.bytes(),
            GpuAttention::Call { .. } => 0,
        }
    }
}

impl Kept {
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
}
