//! MeanShift iterations on the CPU.
//!
//! Local means come from the fused kernel of `local_mean/` (AVX2 where
//! available). For compact profiles the keys are sorted by grid cell
//! (`grid.rs`) and each group of seeds visits only the key ranges of the
//! cells within one bandwidth, so a step costs the seed's neighbourhood,
//! not all N keys. Seeds that have converged leave the active list.
//!
//! Imports: `super::{keys, local_mean, panels, threads}`, `crate::cancel`, `crate::error`,
//! `crate::grid`, `crate::kernel`,
//! `crate::matrix`, `crate::types`.

use rayon::prelude::*;

use super::keys::KeysSoa;
use super::local_mean::{GroupJob, GroupState, QUERY_GROUP, group, local_mean};
use super::panels::{self, CentredRows, KnnRows, Panels, serve_sq_dists};
use super::threads::Threads;
use crate::cancel::Checkpoint;
use crate::error::Result;
use crate::grid::{self, Grid};
use crate::kernel::Kernel;
use crate::matrix::{padded_stride, reserve, try_collect, try_copy, try_vec};
use crate::types::{Progress, Shift, ShiftOutcome, ShiftRun, shift_to};

/// The op the allocations here report.
const OP: &str = "mean_shift";

/// Keys stored column-major (values are the keys themselves), sorted by
/// cell when the profile is compact.
pub(crate) struct ShiftKeys {
    xt: Vec<f32>,
    n: usize,
    ld: usize,
    d: usize,
    grid: Option<Grid>,
    /// The keys centred and packed for inner products (larger `d`).
    panels: Option<Panels>,
    /// Per coordinate, how far a key with weight can lie from the query
    /// along it: the bandwidth of a compact profile (a product's compact
    /// blocks) plus slack, so f32 rounding at the kernel's edge can never
    /// drop a key the kernel would count; infinite elsewhere.
    reach: Vec<f64>,
}

impl ShiftKeys {
    /// Keys for `kernel` from row-major `points` (`d` columns), or
    /// [`Error::TooLarge`](crate::Error::TooLarge) when their copies cannot
    /// be allocated.
    pub(crate) fn new(kernel: &Kernel, points: &[f32], d: usize) -> Result<Self> {
        let n = points.len() / d;
        let ld = padded_stride(n);
        let reach = grid::reach(kernel, d);
        // A grid on the coordinates of bounded reach, cells a fraction of
        // the smallest reach.
        let grid = grid::cells_for(&reach)
            .map(|(side, bounded)| Grid::new(points, d, side, Some(&bounded)));
        let mut xt = try_vec(
            OP,
            "transposed points",
            (ld as u64).saturating_mul(d as u64),
            0.0,
        )?;
        match &grid {
            Some(g) => {
                for (pos, &i) in g.order.iter().enumerate() {
                    let row = &points[i as usize * d..(i as usize + 1) * d];
                    for (k, &v) in row.iter().enumerate() {
                        xt[k * ld + pos] = v;
                    }
                }
            }
            None => {
                for (i, row) in points.chunks_exact(d).enumerate() {
                    for (k, &v) in row.iter().enumerate() {
                        xt[k * ld + i] = v;
                    }
                }
            }
        }
        // The panels follow the keys' order (the grid's, when there is one).
        let panels = if !panels::wanted_for(kernel, d, usize::MAX) {
            None
        } else if let Some(g) = &grid {
            let sorted = g
                .order
                .iter()
                .flat_map(|&i| &points[i as usize * d..(i as usize + 1) * d])
                .copied();
            let sorted = try_collect(OP, "sorted points", points.len(), sorted)?;
            Panels::try_from_rows(OP, &sorted, d, KnnRows::No)?
        } else {
            Panels::try_from_rows(OP, points, d, KnnRows::No)?
        };
        Ok(ShiftKeys {
            xt,
            n,
            ld,
            d,
            grid,
            panels,
            reach,
        })
    }

    /// The keys, with themselves as values.
    fn soa(&self) -> KeysSoa<'_> {
        KeysSoa {
            xt: &self.xt,
            yt: &self.xt,
            n: self.n,
            ld: self.ld,
            q: self.d,
            panels: self.panels.as_ref(),
            rows: None,
        }
    }

    /// Row states of the queries `rows` of `pos` (at most `QUERY_GROUP`),
    /// gathered into `buf`, over every key that can weigh.
    fn group_state(
        &self,
        kernel: &Kernel,
        pos: &[f32],
        rows: &[u32],
        buf: &mut Vec<f32>,
        ranges: &mut Vec<(usize, usize)>,
    ) -> GroupState {
        let d = self.d;
        buf.clear();
        for &r in rows {
            buf.extend_from_slice(&pos[r as usize * d..(r as usize + 1) * d]);
        }
        let soa = self.soa();
        // Centred once for all the group's key ranges.
        let centred = self
            .panels
            .as_ref()
            .filter(|&p| serve_sq_dists(kernel, Some(p), d))
            .map(|p| CentredRows::new(p, buf));
        let job = |k0, k1| GroupJob {
            kernel,
            queries: buf,
            d,
            keys: &soa,
            k0,
            k1,
            self_row: None,
            centred: centred.as_ref(),
        };
        let Some(grid) = &self.grid else {
            return group(&job(0, self.n));
        };
        let (lo, hi) = grid::query_box(buf, d, &self.reach);
        ranges.clear();
        grid.ranges(&lo, &hi, ranges);
        let mut st = GroupState::empty(kernel.profile(), soa.q);
        for &(a, b) in ranges.iter() {
            // The associative merge (a plain sum where m = 0).
            let part = group(&job(a, b));
            st.merge(&part, soa.q);
        }
        st
    }

    /// Groups of at most `QUERY_GROUP` rows of `pos` (from `active`) that
    /// share a grid cell, so they share their key ranges.
    fn groups(&self, pos: &[f32], active: &[u32]) -> Vec<Vec<u32>> {
        let d = self.d;
        let Some(grid) = &self.grid else {
            return active.chunks(QUERY_GROUP).map(<[u32]>::to_vec).collect();
        };
        let mut keyed: Vec<(u64, u32)> = active
            .par_iter()
            .map(|&r| (grid.key_of(&pos[r as usize * d..(r as usize + 1) * d]), r))
            .collect();
        keyed.par_sort_unstable();
        let mut groups = Vec::new();
        let mut cur: Vec<u32> = Vec::with_capacity(QUERY_GROUP);
        let mut cur_key = None;
        for (key, r) in keyed {
            if cur.len() == QUERY_GROUP || (cur_key != Some(key) && !cur.is_empty()) {
                groups.push(std::mem::take(&mut cur));
            }
            cur_key = Some(key);
            cur.push(r);
        }
        if !cur.is_empty() {
            groups.push(cur);
        }
        groups
    }

    /// Local means of the rows `active` of `pos`: `(row, mean)` pairs in
    /// some order; a NaN mean is an empty neighbourhood. Groups that find
    /// `cp` cancelled are skipped, and the step fails.
    fn local_means(
        &self,
        kernel: &Kernel,
        pos: &[f32],
        active: &[u32],
        cp: &Checkpoint,
    ) -> Result<(Vec<u32>, Vec<f32>)> {
        let d = self.d;
        let len = (active.len() as u64).saturating_mul(d as u64);
        if self.grid.is_none() {
            // Every key weighs: the full fused local mean (it also splits
            // the keys across threads when the queries are few).
            let mut queries = reserve(OP, "moving points", len)?;
            for &r in active {
                queries.extend_from_slice(&pos[r as usize * d..(r as usize + 1) * d]);
            }
            let mut out = try_vec(OP, "local means", len, 0.0f32)?;
            local_mean(kernel, &queries, d, &self.soa(), false, &mut out, cp)?;
            return Ok((try_copy(OP, "moving points", active)?, out));
        }
        let groups = self.groups(pos, active);
        let parts: Vec<(Vec<u32>, Vec<f32>)> = groups
            .into_par_iter()
            .map_init(
                || (Vec::new(), Vec::new()),
                |(buf, ranges), rows| {
                    if cp.is_cancelled() {
                        return (Vec::new(), Vec::new());
                    }
                    let st = self.group_state(kernel, pos, &rows, buf, ranges);
                    let mut out = vec![0.0f32; rows.len() * d];
                    st.finalize(d, &mut out);
                    (rows, out)
                },
            )
            .collect();
        cp.check()?;
        let mut order = reserve(OP, "moving points", active.len() as u64)?;
        let mut means = reserve(OP, "local means", len)?;
        for (rows, out) in parts {
            order.extend(rows);
            means.extend(out);
        }
        Ok((order, means))
    }
}

/// MeanShift on the CPU: `seeds` (row-major, `d` columns) move over
/// `points`, or, blurring, the points themselves move. The calling
/// thread's cancellation token is checked before every iteration and
/// within each. Each iteration's local means run on `threads`; the loop,
/// and `progress`, stay on the calling thread.
pub(crate) fn mean_shift(shift: Shift<'_>, threads: &Threads) -> Result<ShiftOutcome> {
    let cp = Checkpoint::current("mean_shift");
    let (kernel, run, progress) = (shift.kernel, &shift.rule, shift.progress);
    let (d, points) = (shift.points.cols(), shift.points.as_slice());
    let mut pos = shift.seeds;
    let m = pos.len() / d;
    let mut keys = threads.install(|| ShiftKeys::new(kernel, points, d))?;
    let mut active = try_collect(OP, "moving points", m, 0..m as u32)?;
    let mut iterations = 0;
    let mut converged = false;
    let mut before_last = None;
    for it in 1..=run.max_iter {
        cp.check()?;
        if it == run.max_iter && !run.blurring {
            before_last = Some(try_copy(OP, "positions", &pos)?);
        }
        if run.blurring && it > 1 {
            keys = threads.install(|| ShiftKeys::new(kernel, &pos, d))?;
        }
        let (order, means) = threads.install(|| keys.local_means(kernel, &pos, &active, &cp))?;
        let mut next = reserve(OP, "moving points", order.len() as u64)?;
        let mut max_shift = 0.0f64;
        if run.blurring {
            // Every point moves at once: the means were computed from the
            // old positions, which the keys hold.
            let mut moving = 0;
            for (&r, mean) in order.iter().zip(means.chunks_exact(d)) {
                let (sh2, stop) = step(&mut pos[r as usize * d..(r as usize + 1) * d], mean, run);
                max_shift = max_shift.max(sh2);
                moving += usize::from(!stop);
            }
            iterations = it;
            progress(&Progress {
                iteration: it,
                moving,
                max_shift: max_shift.sqrt() as f32,
            });
            if moving == 0 {
                converged = true;
                break;
            }
            continue;
        }
        for (&r, mean) in order.iter().zip(means.chunks_exact(d)) {
            let (sh2, stop) = step(&mut pos[r as usize * d..(r as usize + 1) * d], mean, run);
            max_shift = max_shift.max(sh2);
            if !stop {
                next.push(r);
            }
        }
        next.sort_unstable();
        active = next;
        iterations = it;
        progress(&Progress {
            iteration: it,
            moving: active.len(),
            max_shift: max_shift.sqrt() as f32,
        });
        if active.is_empty() {
            converged = true;
            break;
        }
    }
    Ok(ShiftOutcome {
        positions: pos,
        iterations,
        converged,
        before_last: before_last.filter(|_| !converged),
    })
}

/// Moves one seed to its local mean. Returns the squared shift and whether
/// the seed stops (shift within tolerance, or an empty neighbourhood: the
/// seed then stays where it is).
fn step(p: &mut [f32], mean: &[f32], run: &ShiftRun) -> (f64, bool) {
    let (sh2, stop) = shift_to(p, mean, run.thr_sq);
    (f64::from(sh2), stop)
}
