//! Tiling of the local-mean shader: local means and row states, and
//! MeanShift (whose iterations run it).

use crate::error::Result;
use crate::types::MomentLayout;

use super::{
    CHUNK_KEYS, DeviceLimits, MAX_STAGED_KEYS, Shape, TileLimits, binding_bytes, binding_floats,
    budget_keys, chunked_budget_keys, dispatch_window, no_room_for_a_key, split_count, too_small,
};

/// Threads per workgroup of the local-mean shaders.
pub(crate) const LOCAL_MEAN_WG: usize = 64;
/// Most value columns one local-moments pass keeps in registers.
pub(crate) const MAX_VALUE_COLS: usize = 8;
/// Value accumulators one invocation of `local_mean.wgsl` keeps per pass,
/// over all its rows: `32 / R` columns a pass (8 at d ≤ 8, 16 at d < 32,
/// 32 beyond), so a wide MeanShift or local mean recomputes its distances
/// in fewer passes.
pub(crate) const VALUE_REGS: usize = 32;
/// Fewest keys one workgroup of a key split sweeps: below this the merge
/// costs more than the parallelism gains.
const MIN_SPLIT_KEYS: usize = 512;
/// Keys per chunk of `local_mean.wgsl` (its template constant `C`): each
/// row's reference moves once per chunk, one `exp2` and `1 + q` products
/// shared by `C` keys, and the chunk's key values stay in registers
/// (`R · C` of them). Staged keys are whole chunks where one fits.
pub(crate) const LOCAL_MEAN_CHUNK: usize = 16;
/// [`LOCAL_MEAN_CHUNK`] on a software adapter
/// ([`DeviceLimits::chunk_keys`]): on lavapipe a local mean at 8000² takes
/// 10–15 % longer with chunks of 16 keys than of 8.
pub(crate) const SOFTWARE_CHUNK: usize = 8;
/// Workgroups of `local_mean.wgsl` resident on a multiprocessor, as a
/// fraction of the 32 of 64 invocations that
/// [`DeviceLimits::fill_workgroups`] counts: each invocation holds its
/// chunk's `R · C = 64` key values, its `R` rows' queries and three sets
/// of sums, about 128 registers, so a quarter as many fit.
const RESIDENT_FRACTION: usize = 4;
/// Most key slices a query block takes to end its dispatches in whole
/// waves (the first dispatch of a wave fill).
const MAX_WAVE_SPLITS: usize = 8;

/// Query rows each invocation of `local_mean.wgsl` keeps in registers in
/// `d` dimensions: each staged key is read once for all of them.
pub(crate) fn rows_per_thread(d: usize) -> usize {
    match d {
        0..=8 => 4,
        9..IP_MIN_D => 2,
        _ => 1,
    }
}

/// From this dimension a local mean of a radial kernel takes its
/// distances from inner-product tiles (`local_mean_ip.wgsl`), one row per
/// invocation of the accumulation.
pub(crate) const IP_MIN_D: usize = 32;

/// Loop iterations per key of `local_mean_ip.wgsl` in `d` dimensions with
/// `cols` value columns a pass, as if nothing were unrolled: a 32-key
/// step runs per 32-coordinate chunk its staging (the keys' 20, the
/// queries' 40 when they do not stay), the key norms (16), the 8 × 4
/// block's loops (32 · 21) and sums (2 · 33); then its rows' t and the values
/// (under 120), and, when a row re-measures, per chunk the raw staging
/// (60) and the differences (32 · 41); then the weights (per chunk of 8
/// keys: 24, the columns, and per key `1 + 5·⌈cols/4⌉`).
fn ip_loop_per_key(d: usize, cols: usize) -> usize {
    let chunks = d.div_ceil(IP_CHUNK_DIMS);
    let weights =
        (IP_STEP_KEYS / CHUNK_KEYS) * (24 + cols + CHUNK_KEYS * (1 + 5 * cols.div_ceil(4)));
    (chunks * (830 + 1374) + 120 + weights).div_ceil(IP_STEP_KEYS)
}

/// Loop iterations of `local_mean_ip.wgsl` once per dispatch: the queries
/// staged and their norms, per chunk 40 + 2 · 17 and the chunk's own.
fn ip_loop_fixed(d: usize) -> usize {
    d.div_ceil(IP_CHUNK_DIMS) * 75
}

/// Query rows of an inner-product tile of `local_mean_ip.wgsl` (its
/// generated `TQ`): one per invocation when the tile's weights accumulate.
pub(crate) const IP_TILE_ROWS: usize = LOCAL_MEAN_WG;
/// Keys per step of `local_mean_ip.wgsl` (its generated `TK`).
pub(crate) const IP_STEP_KEYS: usize = 32;
/// Coordinates per chunk staged in workgroup memory (its generated `KC`):
/// one lane each when a warp stages a row.
pub(crate) const IP_CHUNK_DIMS: usize = 32;

/// Workgroup memory of `local_mean_ip.wgsl` in `d` dimensions with `cols`
/// value columns a pass, its queries `resident` (every coordinate of the
/// tile's 64 rows, 64 words a coordinate) or one chunk of them (68 words a
/// coordinate), in vec4 units: the shared area of the keys (36 words a
/// coordinate) and the re-measure's raw query chunk, which the 64 × 32 dot
/// products (36 words a row) reuse; the 32 keys' values; the keys' norms
/// in two halves; and the re-measure's two flags (8 bytes).
pub(crate) fn ip_workgroup_bytes(d: usize, cols: usize, resident: bool) -> usize {
    let (tq, tk, kc) = (IP_TILE_ROWS, IP_STEP_KEYS, IP_CHUNK_DIMS);
    let coords = if resident { d.div_ceil(kc) * kc } else { kc };
    let row_units = tq / 4 + usize::from(!resident);
    let keys_units = tk / 4 + 1;
    let shared = (kc * keys_units + kc * (tq / 4 + 1)).max(tq * keys_units);
    16 * (coords * row_units + shared + tk * cols.max(1).div_ceil(4) + tk / 2) + 8
}

/// How `local_mean_ip.wgsl` runs in `d` dimensions with `cols` value
/// columns on a device with `workgroup_bytes` of workgroup memory:
/// `Some(true)` with the queries staged once for the dispatch, where they
/// fit; `Some(false)` with a chunk of them staged per chunk and step;
/// `None` where neither fits (the pass takes `local_mean.wgsl`).
pub(crate) fn ip_queries_resident(d: usize, cols: usize, workgroup_bytes: u32) -> Option<bool> {
    let room = workgroup_bytes as usize;
    [true, false]
        .into_iter()
        .find(|&resident| ip_workgroup_bytes(d, cols, resident) <= room)
}

/// Tiling of one local-mean call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LocalMeanPlan {
    /// Query rows per dispatch.
    pub query_tile: usize,
    /// Keys per key tile (one binding for keys, one for values).
    pub key_tile: usize,
    /// Value columns per pass (0 when only row sums are wanted).
    pub col_tile: usize,
    /// Keys staged in workgroup memory per step inside a dispatch.
    pub staged_keys: usize,
    /// Keys per register chunk of `local_mean.wgsl` (`C`): the device's
    /// [`chunk_keys`](DeviceLimits::chunk_keys), or the whole stage where
    /// fewer keys fit (`staged_keys` is a multiple of it either way).
    pub chunk: usize,
    /// Query rows per invocation (register blocking; 1 for the moments
    /// shader).
    pub rows_per_thread: usize,
    /// Keys one dispatch sweeps: a key tile is swept in windows of this
    /// many, merged like key tiles (the work cap, [`DISPATCH_WORK`](super::DISPATCH_WORK)).
    pub dispatch_keys: usize,
}

/// Workgroup memory of `local_mean.wgsl` beside its staged keys: the
/// head and the current range of a workgroup's spans (two `vec2<u32>`).
pub(crate) const SPAN_WORKGROUP_BYTES: usize = 16;

/// Plans a local mean of `m` queries against `n` keys in `d` dimensions
/// with `q` value columns (`q = 0`: row sums only).
pub(crate) fn plan_local_mean(
    dev: &DeviceLimits,
    caps: &TileLimits,
    shape: Shape,
) -> Result<LocalMeanPlan> {
    let Shape { m, n, d, q } = shape;
    let rpt = rows_per_thread(d);
    plan_with_cols(dev, caps, (m, n, d, q), (VALUE_REGS / rpt, rpt, true))
}

/// Loop iterations per key of `local_mean.wgsl` with `cols` value columns
/// (at least 1) and `rpt` rows per invocation, nothing unrolled: the
/// coordinates by vec4 group (4 slots each, every row), the value columns
/// likewise, the per-row weights and bookkeeping.
pub(crate) fn local_mean_loop_per_key(d: usize, cols: usize, rpt: usize) -> usize {
    let (d4, qa4) = (d.div_ceil(4), cols.div_ceil(4));
    4 + d4 * (5 + 4 * rpt) + 2 * (rpt + 1) + 7 * rpt + qa4 * (5 + 4 * rpt)
}

/// [`plan_local_mean`] with at most `max_cols` value columns a pass, `rpt`
/// rows per invocation, and (`ip`) the inner-product shader's loop budget
/// counted from d = 32 (the local moments never take that shader).
fn plan_with_cols(
    dev: &DeviceLimits,
    caps: &TileLimits,
    (m, n, d, q): (usize, usize, usize, usize),
    (max_cols, rpt, ip): (usize, usize, bool),
) -> Result<LocalMeanPlan> {
    let binding = binding_bytes(dev, caps);
    let floats = (binding / 4).min(usize::MAX as u64) as usize;
    let col_tile = q.min(max_cols).min(caps.value_cols.unwrap_or(usize::MAX));
    let col_slots = col_tile.max(1);
    // Keys and value rows are staged as vec4 groups.
    let (d4, qa4) = (d.div_ceil(4), col_slots.div_ceil(4));
    let chunk = (dev.chunk_keys as usize).max(1);
    let room = (dev.workgroup_bytes as usize).saturating_sub(SPAN_WORKGROUP_BYTES);
    let staged_keys = whole_chunks((room / 16 / (d4 + qa4)).min(MAX_STAGED_KEYS), chunk);
    if staged_keys == 0 {
        return Err(no_room_for_a_key("local_mean", d, dev));
    }
    // Keys: one binding holds a tile of keys, another its value rows. Under
    // a loop budget, each key costs the loops over its coordinates and
    // columns for every row of the invocation, and the chunk bookkeeping,
    // in whole chunks; from d = 32 the inner-product shader's cost too
    // (32 keys a step), whichever is lower.
    let per_key = local_mean_loop_per_key(d, col_slots, rpt);
    let mut budget = padded_budget_keys(dev, per_key, chunk.min(staged_keys));
    if ip && d >= IP_MIN_D {
        budget = budget.min(chunked_budget_keys(
            dev,
            ip_loop_fixed(d),
            ip_loop_per_key(d, col_slots),
            IP_STEP_KEYS,
        ));
    }
    let key_tile = (floats / d.max(q).max(1))
        .min(budget)
        .min(caps.key_rows.unwrap_or(usize::MAX))
        .min(n)
        .max(1);
    // Queries: dispatch limit, and the query, state and output bindings.
    let dispatch_rows = dev.workgroups_per_dim as usize * LOCAL_MEAN_WG * rpt;
    let per_row = d.max(q).max(2 + col_slots);
    let query_tile = (floats / per_row)
        .min(dispatch_rows)
        .min(caps.query_rows.unwrap_or(usize::MAX))
        .min(m)
        .max(1);
    if floats < per_row || floats < d {
        return Err(too_small(binding, per_row));
    }
    let mut plan = LocalMeanPlan {
        query_tile,
        key_tile,
        col_tile,
        staged_keys,
        chunk: chunk.min(staged_keys),
        rows_per_thread: rpt,
        dispatch_keys: key_tile,
    };
    plan.set_window(caps, 2 + d + col_slots);
    Ok(plan)
}

/// Workgroups of `local_mean.wgsl` the device holds at once (a wave).
fn resident_workgroups(dev: &DeviceLimits) -> usize {
    (dev.fill_workgroups as usize / RESIDENT_FRACTION).max(1)
}

/// Staged keys of `local_mean.wgsl` rounded down to whole chunks of
/// `chunk` keys (when there is room for one; fewer stage as one chunk).
fn whole_chunks(staged: usize, chunk: usize) -> usize {
    if staged >= chunk {
        staged / chunk * chunk
    } else {
        staged
    }
}

/// Keys one dispatch of `local_mean.wgsl` may sweep under the loop
/// budget when a key costs `per_key` iterations, `staged` keys a stage:
/// an invocation's sweep pads its last stage up to a whole chunk of
/// `chunk` keys.
fn padded_budget_keys(dev: &DeviceLimits, per_key: usize, chunk: usize) -> usize {
    budget_keys(dev, per_key * chunk.max(1), per_key)
}

impl LocalMeanPlan {
    /// Keys per chunk of `local_mean.wgsl` (its template constant `C`).
    pub(crate) fn chunk_keys(&self) -> usize {
        self.chunk
    }

    /// Sets the dispatch window for the tiles chosen: a full query tile
    /// against a window of keys stays within [`DISPATCH_WORK`](super::DISPATCH_WORK) (`units`
    /// per pair), or the caps' window when lower.
    fn set_window(&mut self, caps: &TileLimits, units: usize) {
        self.dispatch_keys = dispatch_window(caps, units, self.query_tile, self.key_tile);
    }

    /// Workgroups that share one dispatch's keys for `rows` query rows:
    /// the caps' count, or, when the rows give fewer workgroups than the
    /// device wants, enough to fill it (each slice at least
    /// `MIN_SPLIT_KEYS` keys), or, when they give more, enough to end the
    /// dispatch in whole waves of resident workgroups
    /// ([`wave_splits`](Self::wave_splits)); 1 on software adapters.
    /// Bounded so the partial row states fit one binding. Chosen per
    /// dispatch, so MeanShift's shrinking active lists split more as they
    /// shrink.
    pub(crate) fn key_splits(&self, dev: &DeviceLimits, caps: &TileLimits, rows: usize) -> usize {
        // The merge pass takes 64 rows a workgroup: beyond one dispatch's
        // reach of those, no split.
        if rows.div_ceil(LOCAL_MEAN_WG) > dev.workgroups_per_dim as usize {
            return 1;
        }
        let groups = rows.div_ceil(LOCAL_MEAN_WG * self.rows_per_thread);
        let state_floats = rows * self.state_cols();
        let fill = dev.fill_workgroups as usize;
        if caps.key_splits.is_none() && fill > 0 && groups >= fill {
            return self.wave_splits(dev, caps, groups, state_floats);
        }
        split_count(
            dev,
            caps,
            (groups, self.dispatch_keys, MIN_SPLIT_KEYS),
            state_floats,
        )
    }

    /// Key slices for a dispatch of `groups` query blocks, at least one
    /// wave of the device: a dispatch runs in waves of
    /// `fill_workgroups / RESIDENT_FRACTION` resident workgroups, and one
    /// whose last wave is partly empty leaves that share of the device
    /// idle until it ends (the next window's dispatch waits for it). So
    /// the fewest slices (at most `MAX_WAVE_SPLITS`, each at least
    /// `MIN_SPLIT_KEYS` keys, their partial states in one binding) whose
    /// waves are at least 15/16 full, else the fullest; 1 when the
    /// dispatch already fills 15/16 of its waves.
    fn wave_splits(
        &self,
        dev: &DeviceLimits,
        caps: &TileLimits,
        groups: usize,
        state_floats: usize,
    ) -> usize {
        let wave = resident_workgroups(dev);
        // Slots used of 16 per slot of the waves.
        let fullness = |s: usize| {
            let g = groups * s;
            (g * 16) as f64 / (g.div_ceil(wave) * wave) as f64
        };
        let most = MAX_WAVE_SPLITS
            .min(self.dispatch_keys / MIN_SPLIT_KEYS)
            .min(dev.workgroups_per_dim as usize)
            .min(binding_floats(dev, caps) / state_floats.max(1))
            .max(1);
        let mut best = 1;
        for s in 1..=most {
            if fullness(s) >= 15.0 {
                return s;
            }
            if fullness(s) > fullness(best) {
                best = s;
            }
        }
        best
    }

    /// Share of the slots of its waves of resident workgroups that a
    /// dispatch of `rows` query rows split `splits` ways fills, for tests
    /// and reports.
    #[cfg(test)]
    pub(crate) fn wave_fullness(&self, dev: &DeviceLimits, rows: usize, splits: usize) -> f64 {
        let wave = resident_workgroups(dev);
        let g = rows.div_ceil(LOCAL_MEAN_WG * self.rows_per_thread) * splits;
        g as f64 / (g.div_ceil(wave) * wave) as f64
    }

    /// Floats of a row state `(m, s, u)` of a pass of `col_tile` columns
    /// (2 + at least 1): rows of the state and partial-state buffers.
    pub(crate) fn state_cols(&self) -> usize {
        2 + self.col_tile.max(1)
    }
}

/// Plans a local-moment pass (`shaders/local_moments.wgsl`) of `m`
/// queries against `n` keys for `layout`: the local-mean plan for the
/// layout's output columns, query rows of `2d` floats (`[q | c]`),
/// workgroup memory staging each key's coordinates and the value columns
/// a pass touches, and key tiles within the loop budget of a pair's work
/// (the offsets, the staged values and the pass's columns).
pub(crate) fn plan_local_moments(
    dev: &DeviceLimits,
    caps: &TileLimits,
    (m, n): (usize, usize),
    layout: &MomentLayout,
) -> Result<LocalMeanPlan> {
    let d = layout.d;
    let mut plan = plan_with_cols(
        dev,
        caps,
        (m, n, d, layout.cols()),
        (MAX_VALUE_COLS, 1, false),
    )?;
    // One query row per invocation; a query row is [q | c]: 2d floats.
    let floats = (binding_bytes(dev, caps) / 4).min(usize::MAX as u64) as usize;
    plan.query_tile = plan.query_tile.min(floats / (2 * d)).max(1);
    let window = layout.value_window(plan.col_tile);
    plan.staged_keys =
        (dev.workgroup_bytes as usize / 4 / (d + window.max(1))).min(MAX_STAGED_KEYS);
    if plan.staged_keys == 0 {
        return Err(no_room_for_a_key("local_moments", d, dev));
    }
    let per_key = 2 + 2 * d + window + plan.col_tile.max(1);
    plan.key_tile = plan.key_tile.min(budget_keys(dev, 0, per_key)).max(1);
    plan.set_window(caps, per_key);
    Ok(plan)
}

/// Plans MeanShift of `m` seeds over `n` points in `d` dimensions: the
/// local-mean plan of its iterations; blurring, a key tile is also a chunk
/// of queries.
pub(crate) fn plan_mean_shift(
    dev: &DeviceLimits,
    caps: &TileLimits,
    m: usize,
    n: usize,
    d: usize,
    blurring: bool,
) -> Result<LocalMeanPlan> {
    let mut plan = plan_local_mean(
        dev,
        caps,
        Shape {
            m: m.max(1),
            n,
            d,
            q: d,
        },
    )?;
    if blurring {
        let t = plan.key_tile.min(plan.query_tile);
        plan.key_tile = t;
        plan.query_tile = t;
        plan.set_window(caps, 2 + d + plan.col_tile.max(1));
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::super::shape;
    use super::super::{DISPATCH_WORK, LAVAPIPE, LOOP_CAPPED, small_caps};
    use super::*;
    use crate::error::Error;

    #[test]
    fn local_mean_plan_respects_caps_and_device() {
        let p =
            plan_local_mean(&LAVAPIPE, &TileLimits::default(), shape(1000, 5000, 3, 20)).unwrap();
        assert_eq!((p.query_tile, p.key_tile, p.col_tile), (1000, 5000, 8));
        // Keys and values staged as vec4 groups: 1 + 2 per key.
        assert!(p.staged_keys * 16 * (1 + 2) <= 32 << 10);
        let caps = small_caps(2);
        let p = plan_local_mean(&LAVAPIPE, &caps, shape(1000, 5000, 3, 20)).unwrap();
        assert_eq!((p.query_tile, p.key_tile, p.col_tile), (5, 7, 2));
        // Key tiles shrink with the binding size.
        let small = TileLimits {
            buffer_bytes: Some(4 * 3 * 100),
            ..TileLimits::default()
        };
        let p = plan_local_mean(&LAVAPIPE, &small, shape(1000, 5000, 3, 3)).unwrap();
        assert_eq!(p.key_tile, 100);
    }

    #[test]
    fn a_loop_budget_bounds_key_tiles() {
        let dev = LOOP_CAPPED;
        let p = plan_local_mean(&dev, &TileLimits::default(), shape(10, 1_000_000, 3, 3)).unwrap();
        let r = p.rows_per_thread;
        assert_eq!(r, 4);
        assert!(p.key_tile * (4 + (5 + 4 * r) + 2 * (r + 1) + 7 * r + (5 + 4 * r)) < 65535);
        assert!(p.key_tile > 500, "{}", p.key_tile);
    }

    #[test]
    fn moment_plans_stage_values_and_respect_the_loop_budget() {
        let dev = LOOP_CAPPED;
        let layout = MomentLayout {
            d: 3,
            qy: 200,
            second: true,
        };
        let p = plan_local_moments(&dev, &TileLimits::default(), (10, 1_000_000), &layout).unwrap();
        assert_eq!(p.col_tile, 8);
        // Each pass stages the few value columns it touches, not all 200.
        let w = layout.value_window(8);
        assert!(w <= 8);
        assert!(p.staged_keys * (3 + w) * 4 <= 32 << 10);
        assert!(p.key_tile * (2 + 2 * 3 + w + 8) < 65535);
    }

    /// A hardware-like device: 4 GiB bindings, splits wanted.
    /// A data-centre GPU's limits as the planner sees them.
    const HARDWARE: DeviceLimits = super::super::H200;

    #[test]
    fn few_queries_split_the_keys_across_workgroups_on_hardware() {
        let none = TileLimits::default();
        // M = 4096, d = 3: 16 workgroups of 4 rows per invocation.
        let p = plan_local_mean(&HARDWARE, &none, shape(4096, 1_000_000, 3, 3)).unwrap();
        assert_eq!(p.rows_per_thread, 4);
        assert_eq!(p.key_splits(&HARDWARE, &none, 4096), 256);
        // Fewer rows (a MeanShift list that shrank): more slices, each of
        // at least 512 keys, never more than 1024.
        assert_eq!(p.key_splits(&HARDWARE, &none, 10), 1024);
        let short = plan_local_mean(&HARDWARE, &none, shape(10, 5000, 3, 3)).unwrap();
        assert_eq!(short.key_splits(&HARDWARE, &none, 10), 5000 / 512);
        // Enough rows to fill the device alone: no split.
        let big = plan_local_mean(&HARDWARE, &none, shape(1_000_000, 1_000_000, 3, 3)).unwrap();
        assert_eq!(big.key_splits(&HARDWARE, &none, 1_000_000), 1);
        // Beyond what a merge dispatch of 64 rows a workgroup reaches
        // (65535 · 64 rows), no split even when asked.
        let forced = TileLimits {
            key_splits: Some(2),
            ..TileLimits::default()
        };
        let huge = plan_local_mean(&HARDWARE, &forced, shape(5_000_000, 4, 3, 1)).unwrap();
        assert!(huge.query_tile > 65535 * 64);
        assert_eq!(huge.key_splits(&HARDWARE, &forced, huge.query_tile), 1);
        assert_eq!(huge.key_splits(&HARDWARE, &forced, 65535 * 64), 2);
        // A software adapter never splits unless the caps say so.
        let soft = plan_local_mean(&LAVAPIPE, &none, shape(64, 100_000, 3, 3)).unwrap();
        assert_eq!(soft.key_splits(&LAVAPIPE, &none, 64), 1);
        let forced = TileLimits {
            key_splits: Some(7),
            ..TileLimits::default()
        };
        assert_eq!(soft.key_splits(&LAVAPIPE, &forced, 64), 7);
        // The partial states must fit one binding: 200 rows × 5 floats.
        let small = TileLimits {
            buffer_bytes: Some(4 * 200 * 5 * 3),
            key_splits: Some(50),
            ..TileLimits::default()
        };
        let p = plan_local_mean(&LAVAPIPE, &small, shape(200, 1000, 3, 3)).unwrap();
        assert_eq!(p.key_splits(&LAVAPIPE, &small, 200), 3);
    }

    #[test]
    fn value_columns_per_pass_follow_the_rows_per_invocation() {
        let none = TileLimits::default();
        let cols = |d| {
            plan_local_mean(&LAVAPIPE, &none, shape(100, 100, d, 100))
                .unwrap()
                .col_tile
        };
        assert_eq!(
            (cols(3), cols(8), cols(9), cols(31), cols(32)),
            (8, 8, 16, 16, 32)
        );
        // Local moments keep 8.
        let layout = MomentLayout {
            d: 40,
            qy: 50,
            second: false,
        };
        let p = plan_local_moments(&LAVAPIPE, &none, (10, 10), &layout).unwrap();
        assert_eq!(p.col_tile, MAX_VALUE_COLS);
    }

    #[test]
    fn one_dispatch_does_bounded_work() {
        let none = TileLimits::default();
        // M = N = 10⁷, d = 3, q = 3: windows of keys, each query tile ×
        // window within the work cap.
        let p = plan_local_mean(&HARDWARE, &none, shape(10_000_000, 10_000_000, 3, 3)).unwrap();
        assert_eq!(p.query_tile, 10_000_000);
        let units = (2 + 3 + 3) as u64;
        assert!(p.query_tile as u64 * p.dispatch_keys as u64 * units <= DISPATCH_WORK);
        assert!(p.dispatch_keys >= 256 && p.dispatch_keys < p.key_tile);
        // Small calls: one window per key tile.
        let p = plan_local_mean(&HARDWARE, &none, shape(1000, 5000, 3, 3)).unwrap();
        assert_eq!(p.dispatch_keys, p.key_tile);
        let capped = TileLimits {
            dispatch_keys: Some(33),
            ..TileLimits::default()
        };
        let p = plan_local_mean(&HARDWARE, &capped, shape(1000, 5000, 3, 3)).unwrap();
        assert_eq!(p.dispatch_keys, 33);
    }

    #[test]
    fn dispatches_end_in_whole_waves_of_resident_workgroups() {
        let none = TileLimits::default();
        // d = 3: 256 rows a workgroup; 4096 / 4 = 1024 resident workgroups.
        let plan = |m| plan_local_mean(&HARDWARE, &none, shape(m, 1_000_000, 3, 4)).unwrap();
        // M = 10⁶: 3907 workgroups fill 4 waves to 95 %: no split.
        let p = plan(1_000_000);
        assert_eq!(p.key_splits(&HARDWARE, &none, 1_000_000), 1);
        assert!(p.wave_fullness(&HARDWARE, 1_000_000, 1) > 0.95);
        // M = 1.2·10⁶: 4688 workgroups fill 5 waves to 92 %; 3 slices
        // fill 14 waves to 98 %.
        let p = plan(1_200_000);
        assert!(p.wave_fullness(&HARDWARE, 1_200_000, 1) < 0.92);
        let s = p.key_splits(&HARDWARE, &none, 1_200_000);
        assert_eq!(s, 3);
        assert!(p.wave_fullness(&HARDWARE, 1_200_000, s) >= 15.0 / 16.0);
        // Each slice keeps at least 512 keys of the window.
        assert!(p.dispatch_keys / s >= MIN_SPLIT_KEYS);
        // A window too short to cut: no split.
        let short = TileLimits {
            dispatch_keys: Some(700),
            ..TileLimits::default()
        };
        let p = plan_local_mean(&HARDWARE, &short, shape(1_200_000, 1_000_000, 3, 4)).unwrap();
        assert_eq!(p.key_splits(&HARDWARE, &short, 1_200_000), 1);
        // The caps' split wins; a software adapter never splits.
        let forced = TileLimits {
            key_splits: Some(2),
            ..TileLimits::default()
        };
        let p = plan(1_200_000);
        assert_eq!(p.key_splits(&HARDWARE, &forced, 1_200_000), 2);
        let soft = plan_local_mean(&LAVAPIPE, &none, shape(1_200_000, 1_000_000, 3, 4)).unwrap();
        assert_eq!(soft.key_splits(&LAVAPIPE, &none, 1_200_000), 1);
    }

    #[test]
    fn stages_hold_whole_chunks() {
        let none = TileLimits::default();
        for (d, q) in [(3, 4), (3, 0), (17, 9), (300, 3), (2000, 1)] {
            let p = plan_local_mean(&LAVAPIPE, &none, shape(10, 10_000, d, q)).unwrap();
            let c = p.chunk_keys();
            assert!((1..=LOCAL_MEAN_CHUNK).contains(&c), "d={d}: chunk {c}");
            assert_eq!(p.staged_keys % c, 0, "d={d}: {} staged", p.staged_keys);
        }
        // A software adapter's chunks are 8 keys, a GPU's 16.
        let p = plan_local_mean(&LAVAPIPE, &none, shape(10, 10_000, 3, 4)).unwrap();
        assert_eq!((p.staged_keys, p.chunk_keys()), (256, SOFTWARE_CHUNK));
        let p = plan_local_mean(&HARDWARE, &none, shape(10, 10_000, 3, 4)).unwrap();
        assert_eq!(p.chunk_keys(), LOCAL_MEAN_CHUNK);
        // d = 2000: 4 keys fit 32 KiB; they are one chunk.
        let p = plan_local_mean(&LAVAPIPE, &none, shape(10, 10_000, 2000, 1)).unwrap();
        assert_eq!((p.staged_keys, p.chunk_keys()), (4, 4));
    }

    #[test]
    fn huge_dimension_is_a_clear_error() {
        let e = plan_local_mean(&LAVAPIPE, &TileLimits::default(), shape(10, 10, 10_000, 1));
        assert!(matches!(e, Err(Error::Unsupported { .. })));
    }
}
