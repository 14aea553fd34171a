//! MeanShift on the GPU: the iteration stays on the device.
//!
//! Seeds are cut into chunks that fit one dispatch and one binding; each
//! chunk keeps its positions, an active list of the seeds still moving,
//! a query tile and the local means on the device. Per iteration and
//! chunk: `mean_shift.wgsl` gathers the moving seeds into the query tile,
//! `local_mean.wgsl` computes their local means over every key tile
//! (merged on the device), and `mean_shift.wgsl` moves the seeds and
//! compacts those still moving into the next list. Only the chunk's two
//! counters (seeds moving, largest shift) are read back; a chunk whose
//! seeds all stopped costs nothing more. Blurring, the chunks are the key
//! tiles themselves and every point moves each iteration.

use crate::error::Result;
use crate::gpu::plan::{LOCAL_MEAN_WG, plan_mean_shift, tiles};
use crate::matrix::reserve;
use crate::types::{Progress, Shift, ShiftOutcome, ShiftRun};

use super::buffers::{Pooled, upload};
use super::context::GpuContext;
use super::dispatch::{Bindings, Dispatch, Group, Program, Workgroups};
use super::keys::{DeviceKeys, KeyTile, upload_call_tiles, upload_key_tiles};
use super::local_mean::{QueryTile, Sweep};
use super::pipelines::PipelineKey;
use super::plan::check_u32;
use super::shaders::{FINISH, FINISH_BLURRING, GATHER, ShaderId};
use super::submission::Submission;

const OP: &str = "mean_shift";

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct ShiftParams {
    rows: u32,
    mode: u32,
    thr_sq: f32,
    _pad: u32,
}

/// A chunk of seeds and its device state.
struct Chunk<'p> {
    /// Seeds `start..start + len`.
    start: usize,
    len: usize,
    /// Positions (`len × d`); blurring, the key tile holds them instead.
    positions: Option<Pooled<'p>>,
    /// Active lists (local seed indices); `lists[cur]` is this iteration's.
    lists: [Pooled<'p>; 2],
    cur: usize,
    queries: Pooled<'p>,
    means: Pooled<'p>,
    state: Pooled<'p>,
    empty: Pooled<'p>,
    counters: Pooled<'p>,
    /// Seeds still moving (the length of `lists[cur]`).
    moving: usize,
}

/// MeanShift iterations on the GPU (see the module notes).
pub(crate) fn mean_shift(ctx: &GpuContext, shift: Shift<'_>) -> Result<ShiftOutcome> {
    let Shift {
        kernel,
        points,
        seeds,
        rule: run,
        progress,
    } = shift;
    let run = &run;
    let (n, d) = (points.rows(), points.cols());
    let m = seeds.len() / d;
    check_u32(OP, "points", n)?;
    check_u32(OP, "seeds", m)?;
    let plan = plan_mean_shift(&ctx.limits, &ctx.caps, m, n, d, run.blurring)?;
    let storage = wgpu::BufferUsages::STORAGE;
    let copy_src = wgpu::BufferUsages::COPY_SRC;
    let key_tiles: Vec<KeyTile<'_>> = if run.blurring {
        // The keys move in place (and are read back), then are copied
        // into the values for the next iteration.
        let rows = |a, b| points.row_range(a, b);
        upload_call_tiles(
            ctx,
            OP,
            n,
            plan.key_tile,
            &rows,
            Some(&rows),
            storage | copy_src,
        )?
    } else {
        upload_key_tiles(ctx, OP, points, Some(points), plan.key_tile)?
    };
    let ranges: Vec<(usize, usize)> = if run.blurring {
        key_tiles
            .iter()
            .map(|t| (t.start, t.start + t.len))
            .collect()
    } else {
        tiles(m, plan.query_tile).collect()
    };
    let state_cols = plan.state_cols();
    let mut chunks = Vec::with_capacity(ranges.len());
    for &(a, b) in &ranges {
        let len = b - a;
        // Blurring needs no lists and no gathered queries (bound, unused).
        let (listed, gathered) = if run.blurring { (1, 1) } else { (len, len * d) };
        let local: Vec<u32> = (0..listed as u32).collect();
        chunks.push(Chunk {
            start: a,
            len,
            positions: if run.blurring {
                None
            } else {
                Some(upload(ctx, OP, &seeds[a * d..b * d], storage | copy_src)?)
            },
            lists: [
                upload(ctx, OP, &local, storage)?,
                ctx.buffer(OP, (listed * 4) as u64, storage)?,
            ],
            cur: 0,
            queries: ctx.buffer(OP, (gathered * 4) as u64, storage)?,
            means: ctx.buffer(OP, (len * d * 4) as u64, storage)?,
            state: ctx.buffer(OP, (len * state_cols * 4) as u64, storage)?,
            empty: ctx.buffer(OP, 4, storage)?,
            counters: ctx.buffer(OP, 8, storage | copy_src | wgpu::BufferUsages::COPY_DST)?,
            moving: len,
        });
    }
    drop(seeds);
    let key = PipelineKey::new(ShaderId::MeanShift, vec![("D", d as u32)]);
    let program = Program::new(ctx, OP, &key)?;
    // The points are their own values.
    let keys = DeviceKeys {
        tiles: &key_tiles,
        d,
        q: d,
    };
    let means = Sweep::new(OP, kernel, &plan, &keys);
    let sizes = format!("M={m} N={n} d={d} blurring={}", run.blurring);
    let mut iterations = 0;
    let mut converged = false;
    let mut before_last = None;
    for it in 1..=run.max_iter {
        if it == run.max_iter && !run.blurring {
            before_last = Some(read_positions(ctx, &chunks, &key_tiles, d, sizes.clone())?);
        }
        let scope = ctx.scope(OP, sizes.clone())?;
        let mut sub = Submission::new(ctx);
        let live: Vec<usize> = (0..chunks.len())
            .filter(|&c| chunks[c].moving > 0)
            .collect();
        for &c in &live {
            sub.clear_buffer(chunks[c].counters.buffer(), 0, None);
        }
        if run.blurring {
            for &c in &live {
                let ch = &chunks[c];
                sub.fill_sentinel(ctx, OP, &ch.means)?;
                ch.record_means(ctx, &mut sub, &means, ch.len, &key_tiles[c].keys)?;
            }
            // Every local mean above read the old positions; now move.
            for &c in &live {
                let ch = &chunks[c];
                let kt = &key_tiles[c];
                let step = Step::new(ctx, ch, &kt.keys, &[FINISH_BLURRING], run)?;
                step.record(&mut sub, &program, 0);
                sub.keep(step.bindings);
                sub.copy_buffer_to_buffer(
                    kt.keys.buffer(),
                    0,
                    kt.values.buffer(),
                    0,
                    kt.keys.len(),
                );
            }
        } else {
            for &c in &live {
                let ch = &chunks[c];
                let pos = ch
                    .positions
                    .as_ref()
                    .expect("non-blurring chunks own positions"); // ok: set above
                let step = Step::new(ctx, ch, pos, &[GATHER, FINISH], run)?;
                step.record(&mut sub, &program, 0);
                sub.fill_sentinel(ctx, OP, &ch.means)?;
                ch.record_means(ctx, &mut sub, &means, ch.moving, &ch.queries)?;
                step.record(&mut sub, &program, 1);
                sub.keep(step.bindings);
            }
        }
        let sources: Vec<_> = live
            .iter()
            .map(|&c| (chunks[c].counters.buffer(), 8))
            .collect();
        let read = sub.submit_and_read(ctx, &scope, &sources)?;
        scope.finish(ctx)?;
        let mut moving = 0;
        let mut max_shift = 0.0f32;
        for (&c, r) in live.iter().zip(&read) {
            let ch = &mut chunks[c];
            let count = (r[0].to_bits() as usize).min(ch.len);
            max_shift = max_shift.max(r[1]);
            moving += count;
            if !run.blurring {
                ch.moving = count;
                ch.cur ^= 1;
            }
        }
        if run.blurring {
            for ch in &mut chunks {
                ch.moving = if moving > 0 { ch.len } else { 0 };
            }
        }
        iterations = it;
        progress(&Progress {
            iteration: it,
            moving,
            max_shift,
        });
        if moving == 0 {
            converged = true;
            break;
        }
    }
    let positions = read_positions(ctx, &chunks, &key_tiles, d, sizes)?;
    Ok(ShiftOutcome {
        positions,
        iterations,
        converged,
        before_last: before_last.filter(|_| !converged),
    })
}

/// Every seed's position (blurring: every point's), read back chunk by
/// chunk in seed order.
fn read_positions(
    ctx: &GpuContext,
    chunks: &[Chunk<'_>],
    key_tiles: &[KeyTile<'_>],
    d: usize,
    sizes: String,
) -> Result<Vec<f32>> {
    let scope = ctx.scope(OP, sizes)?;
    let m: usize = chunks.iter().map(|ch| ch.len).sum();
    let mut positions = reserve(OP, "positions", (m as u64).saturating_mul(d as u64))?;
    for (c, ch) in chunks.iter().enumerate() {
        let buf = match &ch.positions {
            Some(p) => p,
            None => &key_tiles[c].keys,
        };
        let read = Submission::new(ctx).submit_and_read(
            ctx,
            &scope,
            &[(buf.buffer(), (ch.len * d * 4) as u64)],
        )?;
        debug_assert_eq!(positions.len(), ch.start * d);
        positions.extend_from_slice(&read[0]);
    }
    scope.finish(ctx)?;
    Ok(positions)
}

/// The `mean_shift.wgsl` dispatches of one chunk in one iteration: one
/// uniform record per mode, all over the chunk's rows (its moving seeds;
/// blurring, all its points) and buffers, with `positions`.
struct Step<'p> {
    bindings: Bindings<'p>,
    group: Group,
    workgroups: Workgroups,
}

impl<'p> Step<'p> {
    fn new(
        ctx: &'p GpuContext,
        ch: &Chunk<'_>,
        positions: &Pooled<'_>,
        modes: &[u32],
        run: &ShiftRun,
    ) -> Result<Self> {
        let rows = if ch.positions.is_some() {
            ch.moving
        } else {
            ch.len
        };
        let rows32 = check_u32(OP, "seeds", rows)?;
        let records: Vec<ShiftParams> = modes
            .iter()
            .map(|&mode| ShiftParams {
                rows: rows32,
                mode,
                thr_sq: run.thr_sq,
                _pad: 0,
            })
            .collect();
        let mut bindings = Bindings::new(ctx, OP, ShaderId::MeanShift, &records)?;
        let group = bindings.group(&[
            positions,
            &ch.lists[ch.cur],
            &ch.lists[ch.cur ^ 1],
            &ch.queries,
            &ch.means,
            &ch.counters,
        ]);
        let workgroups = Workgroups::x(Workgroups::cover(OP, rows, LOCAL_MEAN_WG)?);
        Ok(Step {
            bindings,
            group,
            workgroups,
        })
    }

    /// Records the dispatch of mode `i` (of those `new` was given), in a
    /// compute pass of its own.
    fn record(&self, sub: &mut Submission<'p>, program: &Program, i: usize) {
        let dispatch = Dispatch {
            group: self.group,
            record: i,
            workgroups: self.workgroups,
        };
        sub.record(program, &self.bindings, &[dispatch]);
    }
}

impl<'p> Chunk<'p> {
    /// Records the local means (`sweep`) of the first `rows` queries in
    /// `queries` over every key tile into the chunk's `means`.
    fn record_means(
        &self,
        ctx: &'p GpuContext,
        sub: &mut Submission<'p>,
        sweep: &Sweep<'_, '_>,
        rows: usize,
        queries: &Pooled<'p>,
    ) -> Result<()> {
        let tile = QueryTile {
            rows,
            row0: 0,
            queries,
            state: &self.state,
            out: &self.means,
            counter: &self.empty,
            spans: None,
        };
        for cols in sweep.passes() {
            sweep.record(ctx, sub, &tile, cols, true)?;
        }
        Ok(())
    }
}
