//! Dispatch of `shaders/loo_grad.wgsl`: the leave-one-out gradient's row
//! sums, rows in tiles of the dispatch limit × key windows within the
//! loop budget, merged on the device.

use crate::error::{Error, Result};
use crate::kernel::Profile;
use crate::matrix::Matrix;
use crate::types::GradStates;

use super::buffers::upload;
use super::context::GpuContext;
use super::dispatch::{Bindings, Dispatch, Program, Workgroups};
use super::pipelines::PipelineKey;
use super::plan::{LOCAL_MEAN_WG, check_u32, tiles};
use super::shaders::{FIRST_TILE, ShaderId};
use super::submission::Submission;

/// Most features the shader takes: its per-row sums (`2 + q + d + d·q`
/// floats) live in registers.
pub(crate) const MAX_FEATURES: usize = 32;
/// Most target columns the shader takes.
pub(crate) const MAX_TARGETS: usize = 32;
/// Most `d·q` slope-target sums per row.
pub(crate) const MAX_PRODUCT: usize = 256;
/// Keys staged through workgroup memory at a time (`STAGE`): at most
/// `32·(d + q)·4 = 8 KiB` at the bounds.
const STAGE: usize = 32;
/// Keys per dispatch where the driver sets no loop budget: bounds one
/// dispatch's run time.
const WINDOW_KEYS: usize = 16_384;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    row0: u32,
    keys: u32,
    key0: u32,
    flags: u32,
    _pad: [u32; 3],
}

/// Fails unless the shader's register sums hold `d` features and `q`
/// target columns.
pub(crate) fn check_bounds(op: &'static str, d: usize, q: usize) -> Result<()> {
    if d > MAX_FEATURES || q > MAX_TARGETS || d * q > MAX_PRODUCT {
        return Err(Error::Unsupported {
            op,
            backend: "gpu",
            reason: format!(
                "{d} features × {q} target columns: the GPU pass keeps d·q slope sums per row in \
                 registers, at most {MAX_FEATURES} features, {MAX_TARGETS} columns and \
                 {MAX_PRODUCT} products; use the CPU backend"
            ),
        });
    }
    Ok(())
}

/// Keys one dispatch may visit per invocation: the loop iterations a key
/// costs (distance, targets, slope sums, the chunk's rescaling) within
/// the driver's budget (lavapipe's 65535), with a margin.
fn window_keys(budget: Option<u32>, d: usize, q: usize) -> usize {
    let per_key = 4 + 2 * d + 2 * q + 2 * d * q;
    let fixed = 64 + 2 * (d + q + d * q);
    budget.map_or(WINDOW_KEYS, |b| {
        let b = b as usize * 7 / 8;
        (b.saturating_sub(fixed) / per_key).clamp(1, WINDOW_KEYS)
    })
}

/// The gradient states of every point of `x` (divided by the bandwidths)
/// with targets `y`, each row leaving its own key out, on the GPU.
pub(crate) fn loo_grad_states(
    ctx: &GpuContext,
    profile: Profile,
    x: &Matrix<'_>,
    y: &Matrix<'_>,
) -> Result<GradStates> {
    const OP: &str = "loo_error_per_feature";
    let (n, d, q) = (x.rows(), x.cols(), y.cols());
    check_bounds(OP, d, q)?;
    check_u32(OP, "points", n)?;
    let stride = GradStates::stride_of(d, q);
    for (what, floats) in [("points", n * d), ("values", n * q), ("states", n * stride)] {
        let bytes = floats as u64 * 4;
        if bytes > ctx.limits.binding_bytes {
            return Err(Error::TooLarge {
                op: OP,
                what,
                bytes,
            });
        }
    }
    let scope = ctx.scope(OP, format!("N={n} d={d} q={q}"))?;
    let storage = wgpu::BufferUsages::STORAGE;
    let pts = upload(ctx, OP, x.as_slice(), storage)?;
    let vals = upload(ctx, OP, y.as_slice(), storage)?;
    let state = ctx.buffer(
        OP,
        (n * stride * 4) as u64,
        storage | wgpu::BufferUsages::COPY_SRC,
    )?;
    let rows_per_dispatch = ctx.limits.workgroups_per_dim as usize * LOCAL_MEAN_WG;
    let window = window_keys(ctx.limits.loop_budget, d, q);
    let mut records = Vec::new();
    let mut shapes = Vec::new();
    for (r0, r1) in tiles(n, rows_per_dispatch) {
        for (w, (k0, k1)) in tiles(n, window).enumerate() {
            records.push(Params {
                rows: (r1 - r0) as u32,
                row0: r0 as u32,
                keys: (k1 - k0) as u32,
                key0: k0 as u32,
                flags: if w == 0 { FIRST_TILE } else { 0 },
                _pad: [0; 3],
            });
            shapes.push(Workgroups::x(Workgroups::cover(
                OP,
                r1 - r0,
                LOCAL_MEAN_WG,
            )?));
        }
    }
    let key = PipelineKey {
        profile: Some(profile.shader_code()),
        ..PipelineKey::new(
            ShaderId::LooGrad,
            vec![("D", d as u32), ("Q", q as u32), ("STAGE", STAGE as u32)],
        )
    };
    let program = Program::new(ctx, OP, &key)?;
    let mut bindings = Bindings::new(ctx, OP, ShaderId::LooGrad, &records)?;
    let group = bindings.group(&[&pts, &vals, &state]);
    let dispatches: Vec<Dispatch> = shapes
        .into_iter()
        .enumerate()
        .map(|(record, workgroups)| Dispatch {
            group,
            record,
            workgroups,
        })
        .collect();
    let mut sub = Submission::new(ctx);
    sub.fill_sentinel(ctx, OP, &state)?;
    sub.record(&program, &bindings, &dispatches);
    sub.keep(bindings);
    sub.keep(pts);
    sub.keep(vals);
    let read = sub.submit_and_read(ctx, &scope, &[(state.buffer(), state.len())])?;
    scope.finish(ctx)?;
    let mut out = GradStates::empty(OP, n, d, q)?;
    for (i, rec) in read[0].chunks_exact(stride).take(n).enumerate() {
        if rec[1] > 0.0 && rec[1].is_finite() {
            for (o, &v) in out.row_mut(i).iter_mut().zip(rec) {
                *o = f64::from(v);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_stay_within_the_loop_budget() {
        assert_eq!(window_keys(None, 10, 10), WINDOW_KEYS);
        let w = window_keys(Some(65_535), 10, 10);
        assert!(w * (4 + 40 + 200) <= 65_535 && w > 100, "{w}");
        assert_eq!(window_keys(Some(10), 32, 8), 1);
        assert!(check_bounds("t", 32, 8).is_ok());
        assert!(check_bounds("t", 33, 1).is_err());
        assert!(check_bounds("t", 16, 17).is_err());
    }
}
