//! Tiling of kernel softmax: attention (and the row pass of its weight
//! matrix), the weight matrix's output blocks, and the chunks of the
//! linear feature local mean.

use crate::error::{Error, Result};

use super::{
    DeviceLimits, Shape, TileLimits, binding_floats, chunked_budget_keys, dispatch_pairs,
    loop_budget, no_room_for_a_key, split_count, too_small, whole_chunks,
};

/// Invocations per workgroup of `softmax.wgsl` (one query row each, so
/// also its rows per workgroup), of `softmax_tiled.wgsl` (16 row lanes × 4
/// key lanes) and of the split merge.
pub(crate) const ATTEND_WG: usize = 64;
/// Row lanes of `softmax_tiled.wgsl`: a workgroup holds `16·RI` rows.
pub(crate) const TILED_ROW_LANES: usize = 16;
/// Keys per block of `softmax_tiled.wgsl`, largest first: the planner takes
/// the first whose tiles fit the device's workgroup memory (multiples of
/// 16: four key lanes of vec4s of keys).
const TILED_KEYS: [usize; 3] = [64, 32, 16];
/// Rows per invocation of `softmax_tiled.wgsl` (`RI`), largest first.
const TILED_ROWS: [usize; 3] = [4, 2, 1];
/// Most value columns one attention pass keeps in registers.
pub(crate) const MAX_ATTEND_COLS: usize = 64;
/// Most keys staged in workgroup memory at once (also the scores each
/// invocation holds in registers).
pub(crate) const MAX_STAGED: usize = 32;
/// Keys per chunk of the feature local mean (at least).
pub(crate) const FEATURE_CHUNK: usize = 256;
/// Value columns per `finish` pass of the feature local mean.
pub(crate) const FEATURE_COLS: usize = 16;
/// Invocations per workgroup of `chunk_sums` and `prefix`.
pub(crate) const SUM_WG: usize = 256;
/// Query rows per workgroup of `finish`.
pub(crate) const FINISH_WG: usize = 64;

/// Workgroup side of `softmax_matrix.wgsl` (16 × 16 entries).
pub(crate) const MATRIX_WG: usize = 16;
/// Fewest keys one workgroup of an attention key split sweeps.
const MIN_SPLIT_KEYS: usize = 256;

/// Tiling of one attention call (or of the row pass of the matrix).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AttendPlan {
    /// Batches per dispatch (more than 1 only when tiles are whole batches).
    pub batch_group: usize,
    /// Query rows per tile.
    pub query_tile: usize,
    /// Keys per tile (one binding for the keys, one for the values).
    pub key_tile: usize,
    /// Value columns per pass (0: row statistics only).
    pub col_tile: usize,
    /// Keys staged in workgroup memory at once (`softmax.wgsl`).
    pub staged: usize,
    /// Keys per block of `softmax_tiled.wgsl`, which runs the passes with
    /// value columns when its tiles fit (0: `softmax.wgsl` runs them).
    pub tiled_keys: usize,
    /// Rows per invocation of `softmax_tiled.wgsl` (`RI`: 4, or 2 and 1
    /// for few queries, so a decoding step's 16 rows fill a workgroup).
    pub tiled_rows: usize,
}

impl AttendPlan {
    /// `vec4`s per key row of `d` floats.
    pub(crate) fn d4(d: usize) -> usize {
        d.div_ceil(4)
    }
    /// `vec4`s of value columns per pass.
    pub(crate) fn qa4(&self) -> usize {
        self.col_tile.max(1).div_ceil(4)
    }
    /// Floats per row of the state buffer.
    pub(crate) fn state_cols(&self) -> usize {
        2 + 4 * self.qa4()
    }

    /// Whether the passes with value columns run `softmax_tiled.wgsl`.
    pub(crate) fn tiled(&self) -> bool {
        self.tiled_keys > 0
    }

    /// Query rows per workgroup of the shader that runs a pass with
    /// (`values`) or without value columns.
    pub(crate) fn group_rows(&self, values: bool) -> usize {
        if values && self.tiled() {
            TILED_ROW_LANES * self.tiled_rows
        } else {
            ATTEND_WG
        }
    }

    /// Workgroups that share one dispatch's key tile of `keys` keys for
    /// `rows` query rows in each of `batches` batches, for passes with
    /// (`values`) or without value columns: the caps' count, or, when the
    /// rows give fewer workgroups than the device wants (B = 8, T = 4096
    /// gives 512), enough to fill it, each slice at least `MIN_SPLIT_KEYS`
    /// keys per 64 rows of a workgroup (a decoding step's workgroup of 16
    /// rows: 64 keys); 1 on software adapters. Bounded so the slices'
    /// partial states fit one binding.
    pub(crate) fn key_splits(
        &self,
        dev: &DeviceLimits,
        caps: &TileLimits,
        values: bool,
        (rows, batches, keys): (usize, usize, usize),
    ) -> usize {
        let wg_rows = self.group_rows(values);
        split_count(
            dev,
            caps,
            (
                rows.div_ceil(wg_rows) * batches,
                keys,
                MIN_SPLIT_KEYS * wg_rows / ATTEND_WG,
            ),
            rows * batches * self.state_cols(),
        )
    }
}

/// Plans attention of `b` batches of `m` queries against `n` keys in `d`
/// dimensions with `q` value columns (`q = 0`: row statistics only).
pub(crate) fn plan_attend(
    dev: &DeviceLimits,
    caps: &TileLimits,
    b: usize,
    m: usize,
    n: usize,
    d: usize,
    q: usize,
) -> Result<AttendPlan> {
    let floats = binding_floats(dev, caps);
    let col_tile = q
        .min(MAX_ATTEND_COLS)
        .min(caps.value_cols.unwrap_or(usize::MAX));
    let mut plan = AttendPlan {
        batch_group: 1,
        query_tile: 1,
        key_tile: 1,
        col_tile,
        staged: 0,
        tiled_keys: 0,
        tiled_rows: 0,
    };
    let d4 = AttendPlan::d4(d);
    let per_key = 16 * (d4 + plan.qa4());
    plan.staged = whole_chunks((dev.workgroup_bytes as usize / per_key).min(MAX_STAGED));
    if tiled_fits_rows(d, q, col_tile) {
        (plan.tiled_rows, plan.tiled_keys) =
            choose_tiled(dev, (d4, plan.qa4()), tiled_rows_for(m), 0).unwrap_or((0, 0));
    }
    if plan.staged == 0 {
        return Err(no_room_for_a_key("kernel_softmax", d, dev));
    }
    let wq = d.max(q).max(plan.state_cols());
    let wk = d.max(q);
    if floats < wq {
        return Err(too_small(floats as u64 * 4, wq));
    }
    let dispatch_rows = dev.workgroups_per_dim as usize * ATTEND_WG;
    plan.query_tile = (floats / wq)
        .min(dispatch_rows)
        .min(caps.query_rows.unwrap_or(usize::MAX))
        .min(m)
        .max(1);
    // The work cap (as the local mean's): a query tile against a key tile
    // is at most DISPATCH_WORK pair-units (`2 + d + cols` each).
    let pairs = dispatch_pairs(2 + d + plan.col_tile.max(1));
    plan.key_tile = (floats / wk)
        .min(if plan.tiled() {
            tiled_budget_keys(dev, (d4, plan.qa4()), plan.tiled_keys, plan.tiled_rows)
        } else {
            attend_budget_keys(dev, d, plan.qa4(), plan.staged)
        })
        .min(caps.key_rows.unwrap_or(usize::MAX))
        .min(caps.dispatch_keys.unwrap_or(usize::MAX))
        .min((pairs / plan.query_tile).max(MAX_STAGED * 8))
        .min(n)
        .max(1);
    plan.batch_group = whole_batches(dev, caps, &plan, (b, m, n, d, q));
    Ok(plan)
}

/// Batches per dispatch when a query tile and a key tile are whole batches
/// (`query_tile = M`, `key_tile = N`): as many as one binding of queries and
/// one of keys hold, the dispatch dimension and the work cap allow; else 1.
fn whole_batches(
    dev: &DeviceLimits,
    caps: &TileLimits,
    plan: &AttendPlan,
    (b, m, n, d, q): (usize, usize, usize, usize, usize),
) -> usize {
    if plan.query_tile != m || plan.key_tile != n {
        return 1;
    }
    let floats = binding_floats(dev, caps);
    let (wq, wk) = (d.max(q).max(plan.state_cols()), d.max(q));
    let pairs = dispatch_pairs(2 + d + plan.col_tile.max(1));
    (floats / (m * wq))
        .min(floats / (n * wk))
        .min(dev.workgroups_per_dim as usize)
        .min(pairs / (m * n).max(1))
        .min(b)
        .max(1)
}

/// Plans attention of `b` batches of `m` queries against a prepared key
/// set of `n` keys per batch, stored in key tiles of `key_tile` keys and,
/// when a tile is a whole batch, in groups of `group` batches per buffer
/// (`plan_attend(b, n, n, d, q)`'s, at preparation): the call's plan with
/// those key tiles, query tiles within the work cap against them, and
/// batch groups within the stored ones. The register tiles are those for
/// `m` queries (a decoding step's: `RI = 1`) whose loop budget holds the
/// stored key tiles; the preparation's plan had such tiles.
pub(crate) fn plan_attend_prepared(
    dev: &DeviceLimits,
    caps: &TileLimits,
    (b, m, n, d, q): (usize, usize, usize, usize, usize),
    key_tile: usize,
    group: usize,
) -> Result<AttendPlan> {
    let mut plan = plan_attend(dev, caps, b, m, n, d, q)?;
    let pairs = dispatch_pairs(2 + d + plan.col_tile.max(1));
    if plan.tiled() {
        let tiles = (AttendPlan::d4(d), plan.qa4());
        (plan.tiled_rows, plan.tiled_keys) =
            choose_tiled(dev, tiles, tiled_rows_for(m), key_tile).unwrap_or((0, 0));
    }
    plan.key_tile = key_tile;
    plan.query_tile = plan.query_tile.min((pairs / key_tile).max(1));
    plan.batch_group = whole_batches(dev, caps, &plan, (b, m, n, d, q)).min(group);
    Ok(plan)
}

/// Keys one `attend` dispatch may visit per invocation under the loop
/// budget, counting every loop iteration as if nothing were unrolled: per
/// key the dot product (`D4`), a rescale and the weighted values (`QA4`
/// each), the key loop and its share of the staging loops; once, the
/// query load and the state merge.
fn attend_budget_keys(dev: &DeviceLimits, d: usize, qa4: usize, staged: usize) -> usize {
    let d4 = AttendPlan::d4(d);
    let fixed = 5 * d4 + 10 * qa4 + 16;
    let per_key = 2 + d4 + 2 * qa4 + (d4 + qa4).div_ceil(8);
    chunked_budget_keys(dev, fixed, per_key, staged)
}

/// Whether `softmax_tiled.wgsl` can read a call's rows as vec4s: `d`
/// features, `q` value columns a row and passes of `col_tile` columns, all
/// multiples of 4 (else `softmax.wgsl` runs the passes).
fn tiled_fits_rows(d: usize, q: usize, col_tile: usize) -> bool {
    col_tile > 0 && d.is_multiple_of(4) && q.is_multiple_of(4) && col_tile.is_multiple_of(4)
}

/// Rows per invocation of `softmax_tiled.wgsl` for `m` queries a batch:
/// the fewest idle rows (16 rows a workgroup for a decoding step of up to
/// 16 queries, 32 up to 32, else 64).
fn tiled_rows_for(m: usize) -> usize {
    TILED_ROWS
        .into_iter()
        .rev()
        .find(|&ri| m <= TILED_ROW_LANES * ri)
        .unwrap_or(TILED_ROWS[0])
}

/// The register tiles `(RI, BK)` of `softmax_tiled.wgsl` for `(d4, qa4)`
/// vec4s of features and value columns: `RI = ri` first, then the others
/// (largest first), each with the largest block whose workgroup memory
/// fits the device and whose loop budget holds a block and `keys` keys.
fn choose_tiled(
    dev: &DeviceLimits,
    (d4, qa4): (usize, usize),
    ri: usize,
    keys: usize,
) -> Option<(usize, usize)> {
    let rows = std::iter::once(ri).chain(TILED_ROWS.into_iter().filter(move |&r| r != ri));
    rows.flat_map(|ri| TILED_KEYS.into_iter().map(move |bk| (ri, bk)))
        .find(|&(ri, bk)| {
            tiled_workgroup_bytes(d4, qa4, bk, ri) <= dev.workgroup_bytes as usize
                && tiled_budget_keys(dev, (d4, qa4), bk, ri) >= bk.max(keys)
        })
}

/// Workgroup memory of `softmax_tiled.wgsl` with `d4` vec4s of features,
/// `qa4` of value columns, blocks of `bk` keys and `ri` rows per
/// invocation (`16·ri` rows): the queries (odd vec4 stride), one array for
/// a block's keys (whole staging steps of 64 vec4s) and then its weights
/// (odd vec4 stride), the value rows (whole steps, and 4 vec4s of
/// padding), and each key lane's row maxima (a stride ≡ 16 mod 32 floats).
pub(crate) fn tiled_workgroup_bytes(d4: usize, qa4: usize, bk: usize, ri: usize) -> usize {
    let wr = TILED_ROW_LANES * ri;
    let steps = |n: usize| n.div_ceil(ATTEND_WG) * ATTEND_WG;
    let ms = wr.div_ceil(32) * 32 + 16;
    let keys_weights = steps(bk * d4).max(wr * ((bk / 4) | 1));
    16 * (wr * (d4 | 1) + keys_weights + steps(bk * qa4) + 4) + 4 * 4 * ms
}

/// Keys one `attend_tiled` dispatch may sweep under the loop budget
/// (whole blocks of `bk`), counting every loop iteration as if nothing
/// were unrolled (loop by loop, as `softmax_tiled.wgsl` nests them): per
/// block the staging steps of keys and values, the logits' start, the
/// logit tile (per feature group: the queries, then key groups × keys ×
/// rows), the mask, the maxima, the weights and the rescale, and the
/// weighted values (per four keys: the weights, then keys × value groups ×
/// rows); once, the queries' staging, the rows' limits, the state's start
/// and the writes. 0 when not one block fits.
fn tiled_budget_keys(dev: &DeviceLimits, (d4, qa4): (usize, usize), bk: usize, ri: usize) -> usize {
    let (kh, co4) = (bk / 16, qa4.div_ceil(4));
    let kpi = 4 * kh;
    let per_block = 1
        + (bk * d4).div_ceil(ATTEND_WG)
        + (bk * qa4).div_ceil(ATTEND_WG)
        + ri * kpi
        + d4 * (1 + ri + kh * (1 + 4 * (1 + ri)))
        + ri * (1 + 5 * kh)
        + ri * kpi
        + ri * (1 + 5 * kh + co4)
        + bk / 4 * (1 + ri + 4 * (1 + co4 * (1 + ri)));
    let wr = TILED_ROW_LANES * ri;
    let fixed = (wr * d4).div_ceil(ATTEND_WG) + ri * (4 + co4) + ri * (1 + 5 * co4) + 16;
    loop_budget(dev).map_or(usize::MAX, |b| b.saturating_sub(fixed) / per_block * bk)
}

/// Tiling of one softmax weight matrix: the row pass (an attention plan
/// without values, one batch per dispatch, key tiles that are also output
/// blocks' columns) and the output blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SoftmaxMatrixPlan {
    pub rows: AttendPlan,
    /// Floats of one output block (one binding).
    pub block_floats: usize,
    /// Output rows or columns one dispatch reaches.
    pub dispatch: usize,
}

impl SoftmaxMatrixPlan {
    /// Output rows per block of a key tile of `cols` keys in a query tile
    /// of `rows` rows.
    pub(crate) fn block_rows_for(&self, cols: usize, rows: usize) -> usize {
        (self.block_floats / cols).clamp(1, rows).min(self.dispatch)
    }
}

/// Plans the weight matrix of `b` batches of `m` queries against `n` keys
/// in `d` dimensions (the shape's value columns are not read).
pub(crate) fn plan_softmax_matrix(
    dev: &DeviceLimits,
    caps: &TileLimits,
    b: usize,
    shape: Shape,
) -> Result<SoftmaxMatrixPlan> {
    let mut rows = plan_attend(dev, caps, b, shape.m, shape.n, shape.d, 0)?;
    let floats = binding_floats(dev, caps);
    let dispatch = dev.workgroups_per_dim as usize * MATRIX_WG;
    // Key tiles are also output blocks' columns: within one dispatch's reach.
    rows.key_tile = rows.key_tile.min(dispatch).min(floats);
    rows.batch_group = 1;
    Ok(SoftmaxMatrixPlan {
        rows,
        block_floats: floats,
        dispatch,
    })
}

/// Tiling of one feature-local-mean call (per batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FeaturePlan {
    /// Keys per chunk (one workgroup of `chunk_sums`, one prefix state).
    pub chunk: usize,
    /// Keys per key tile: a whole number of chunks.
    pub key_tile: usize,
    /// Query rows per `finish` tile.
    pub query_tile: usize,
    /// Value columns per `finish` pass.
    pub col_tile: usize,
}

/// Plans the feature local mean of `m` queries and `n` keys in `d`
/// dimensions with `q` value columns.
pub(crate) fn plan_feature(
    dev: &DeviceLimits,
    caps: &TileLimits,
    shape: Shape,
) -> Result<FeaturePlan> {
    let (m, n, d, q) = (shape.m, shape.n, shape.d, shape.q);
    let floats = binding_floats(dev, caps);
    let e = d.saturating_mul(q + 1);
    let wk = d.max(q);
    let dispatch = dev.workgroups_per_dim as usize;
    let col_tile = q
        .min(FEATURE_COLS)
        .min(caps.value_cols.unwrap_or(usize::MAX))
        .max(1);
    let unsupported = |reason: String| Error::Unsupported {
        op: "feature_local_mean",
        backend: "gpu",
        reason,
    };
    // Keys one binding (of keys or of values) holds.
    let max_keys = (floats / wk)
        .min(caps.key_rows.unwrap_or(usize::MAX))
        .min(n);
    if max_keys == 0 {
        return Err(too_small(floats as u64 * 4, wk));
    }
    // Under a loop budget, a chunk bounds the iterations of `chunk_sums`
    // (its entries × its keys) and of `finish` (its keys × (d + columns)),
    // and the number of chunks those of `prefix`.
    let qa = col_tile.next_power_of_two();
    let budget = loop_budget(dev);
    let longest = budget.map_or(usize::MAX, |b| {
        let sums = (b / e.div_ceil(SUM_WG).max(1)).saturating_sub(1);
        let finish = b.saturating_sub(d * (2 + qa) + 2 * qa) / (1 + d + qa);
        sums.min(finish)
    });
    let hi = max_keys.min(longest);
    if hi == 0 {
        return Err(unsupported(format!(
            "d={d}, q={q} exceed the device's loop budget per invocation"
        )));
    }
    let mut chunk = FEATURE_CHUNK.min(hi);
    // The chunk sums and the total must fit one binding, and the prefix
    // pass the loop budget: fewer, longer chunks.
    while n.div_ceil(chunk).saturating_add(1).saturating_mul(e) > floats
        || budget.is_some_and(|b| n.div_ceil(chunk) > b)
    {
        if chunk == hi {
            return Err(unsupported(format!(
                "{n} keys need more chunk sums (d={d}, q={q}) than one binding or the loop budget allows"
            )));
        }
        chunk = (chunk * 2).min(hi);
    }
    let key_tile = max_keys / chunk * chunk;
    let query_tile = (floats / wk)
        .min(dispatch * FINISH_WG)
        .min(caps.query_rows.unwrap_or(usize::MAX))
        .min(m)
        .max(1);
    Ok(FeaturePlan {
        chunk,
        key_tile: key_tile.min(dispatch * chunk),
        query_tile,
        col_tile,
    })
}

#[cfg(test)]
mod tests {
    use super::super::shape;
    use super::super::{DISPATCH_WORK, H200, LAVAPIPE, LOOP_CAPPED, small_caps};
    use super::*;

    #[test]
    fn attention_splits_keys_to_fill_a_device_and_caps_dispatch_work() {
        let hw = H200;
        let none = TileLimits::default();
        // B = 8, T = 4096, d = 64: 512 workgroups of rows, 8 slices of keys.
        let p = plan_attend(&hw, &none, 8, 4096, 4096, 64, 64).unwrap();
        assert_eq!((p.key_tile, p.batch_group), (4096, 8));
        assert_eq!(p.key_splits(&hw, &none, true, (4096, 8, 4096)), 8);
        assert_eq!(p.key_splits(&hw, &none, false, (4096, 8, 4096)), 8);
        // Few keys: every slice keeps at least 256.
        assert_eq!(p.key_splits(&hw, &none, true, (64, 1, 600)), 2);
        // Software adapters do not split unless told to.
        let s = plan_attend(&LAVAPIPE, &none, 8, 4096, 4096, 64, 64).unwrap();
        assert_eq!(s.key_splits(&LAVAPIPE, &none, true, (4096, 1, 4096)), 1);
        // A decoding step (16 queries a batch): workgroups of 16 rows, the
        // keys split into slices of 64.
        let p = plan_attend(&hw, &none, 8, 16, 4096, 64, 64).unwrap();
        assert_eq!((p.tiled_rows, p.group_rows(true)), (1, 16));
        assert_eq!(p.key_splits(&hw, &none, true, (16, 8, 4096)), 64);
        assert_eq!(p.key_splits(&hw, &none, false, (16, 8, 4096)), 16);
        // One long sequence: key tiles within the work cap.
        let p = plan_attend(&hw, &none, 1, 1_000_000, 1_000_000, 64, 64).unwrap();
        let units = (2 + 64 + 64) as u64;
        assert!(p.query_tile as u64 * p.key_tile as u64 * units <= DISPATCH_WORK);
        assert!(p.key_tile >= MAX_STAGED * 8);
    }

    #[test]
    fn value_passes_run_in_register_tiles_where_they_fit() {
        let none = TileLimits::default();
        let h200 = H200;
        let tiled = |dev: &DeviceLimits, m, d, q| {
            let p = plan_attend(dev, &none, 8, m, 4096, d, q).unwrap();
            (p.tiled_rows, p.tiled_keys)
        };
        assert_eq!(tiled(&h200, 4096, 64, 64), (4, 32));
        assert_eq!(tiled(&LAVAPIPE, 4096, 64, 64), (4, 16));
        assert_eq!(tiled(&LAVAPIPE, 4096, 80, 20), (4, 16));
        // Few queries: fewer rows per invocation, longer blocks.
        assert_eq!(tiled(&h200, 16, 64, 64), (1, 64));
        assert_eq!(tiled(&LAVAPIPE, 16, 64, 64), (1, 32));
        assert_eq!(tiled(&LAVAPIPE, 1, 64, 64), (1, 32));
        assert_eq!(tiled(&LAVAPIPE, 30, 64, 64), (2, 32));
        // Wide queries: fewer rows per workgroup, where they fit.
        assert_eq!(tiled(&h200, 4096, 256, 64), (1, 16));
        assert_eq!(tiled(&LAVAPIPE, 4096, 512, 64), (0, 0));
        // Rows that are not whole vec4s; the row pass has no values.
        assert_eq!(tiled(&LAVAPIPE, 4096, 80, 17), (0, 0));
        assert_eq!(tiled(&LAVAPIPE, 4096, 130, 8), (0, 0));
        assert_eq!(tiled(&h200, 4096, 64, 0), (0, 0));
        for (dev, m, d, q) in [
            (&h200, 100, 64, 64),
            (&h200, 16, 64, 64),
            (&LAVAPIPE, 100, 80, 20),
            (&LAVAPIPE, 3, 4, 4),
        ] {
            let p = plan_attend(dev, &none, 1, m, 100, d, q).unwrap();
            assert!(p.tiled(), "{m} {d} {q}");
            let bytes =
                tiled_workgroup_bytes(AttendPlan::d4(d), p.qa4(), p.tiled_keys, p.tiled_rows);
            assert!(bytes <= dev.workgroup_bytes as usize, "{m} {d} {q}");
        }
        // Under a loop budget, key tiles are whole blocks within it.
        let budget = LOOP_CAPPED;
        let p = plan_attend(&budget, &none, 1, 4096, 100_000, 64, 64).unwrap();
        assert_eq!(p.tiled_keys, 16);
        assert!(p.key_tile > 500 && p.key_tile < 100_000, "{}", p.key_tile);
        assert_eq!(p.key_tile % 16, 0);
        // A prepared set's stored key tiles: a decoding step's tiles whose
        // budget holds them.
        let set = plan_attend(&budget, &none, 2, 4096, 4096, 64, 64).unwrap();
        let dec =
            plan_attend_prepared(&budget, &none, (2, 16, 4096, 64, 64), set.key_tile, 1).unwrap();
        assert!(dec.tiled());
        let tiles = (16, 16);
        assert!(tiled_budget_keys(&budget, tiles, dec.tiled_keys, dec.tiled_rows) >= set.key_tile);
        assert_eq!(dec.key_tile, set.key_tile);
    }

    /// The H200's limits through Vulkan (48 KiB of workgroup memory,
    /// bindings of 2³¹ − 1 bytes, a device to fill): the plans of training
    /// (B = 8, T = 4096) and decoding steps (M = 1, 16 against 4096 keys),
    /// their register tiles within the limits, and the shaders rendered
    /// with those tiles validated by naga. (Their tiles at d = 64 need more
    /// than lavapipe's 32 KiB; the same tiles at d = 32 and 16 run there,
    /// tests/softmax.rs.)
    #[test]
    fn h200_plans_render_shaders_that_validate() {
        let h200 = H200;
        let none = TileLimits::default();
        for (b, m, n, d, q, tiles, splits) in [
            (8, 4096, 4096, 64, 64, (4, 32), 8),
            (8, 16, 4096, 64, 64, (1, 64), 64),
            (8, 1, 4096, 64, 64, (1, 64), 64),
            (8, 4096, 4096, 128, 128, (4, 16), 8),
        ] {
            let p = plan_attend(&h200, &none, b, m, n, d, q).unwrap();
            let what = format!("B={b} M={m} N={n} d={d} q={q}");
            assert_eq!((p.tiled_rows, p.tiled_keys), tiles, "{what}");
            assert_eq!(
                (p.query_tile, p.key_tile, p.batch_group),
                (m, n, 8),
                "{what}"
            );
            let rows = p.query_tile * p.batch_group;
            assert_eq!(
                p.key_splits(&h200, &none, true, (m, 8, n)),
                splits,
                "{what}"
            );
            assert!(rows * d.max(q).max(p.state_cols()) * 4 < 1 << 31, "{what}");
            let (d4, qa4) = (AttendPlan::d4(d), p.qa4());
            let bytes = tiled_workgroup_bytes(d4, qa4, p.tiled_keys, p.tiled_rows);
            assert!(bytes <= 48 << 10, "{what}: {bytes}");
            let values = [
                ("D4", d4 as u32),
                ("QA4", qa4 as u32),
                ("BK", p.tiled_keys as u32),
                ("RI", p.tiled_rows as u32),
            ];
            let src = crate::gpu::shaders::ShaderId::SoftmaxTiled
                .render(&values)
                .unwrap();
            let module = naga::front::wgsl::parse_str(&src)
                .unwrap_or_else(|e| panic!("{what}:\n{}", e.emit_to_string(&src)));
            naga::valid::Validator::new(
                naga::valid::ValidationFlags::all(),
                naga::valid::Capabilities::all(),
            )
            .validate(&module)
            .unwrap_or_else(|e| panic!("{what}:\n{}", e.emit_to_string(&src)));
            for entry in ["attend_tiled", "merge_splits"] {
                assert!(module.entry_points.iter().any(|ep| ep.name == entry));
            }
        }
    }

    #[test]
    fn attention_plan_groups_whole_batches_and_tiles_big_ones() {
        let p = plan_attend(&LAVAPIPE, &TileLimits::default(), 8, 4096, 4096, 64, 64).unwrap();
        assert_eq!(
            (p.batch_group, p.query_tile, p.key_tile, p.col_tile),
            (8, 4096, 4096, 64)
        );
        assert!(p.staged * 16 * (16 + 16) <= LAVAPIPE.workgroup_bytes as usize);
        let caps = small_caps(3);
        let p = plan_attend(&LAVAPIPE, &caps, 3, 100, 50, 8, 10).unwrap();
        assert_eq!(
            (p.batch_group, p.query_tile, p.key_tile, p.col_tile),
            (1, 5, 7, 3)
        );
        // Small bindings: one batch per dispatch, tiles within one binding.
        let small = TileLimits {
            buffer_bytes: Some(4 * 64 * 100),
            ..TileLimits::default()
        };
        let p = plan_attend(&LAVAPIPE, &small, 8, 1000, 1000, 64, 64).unwrap();
        assert_eq!(p.batch_group, 1);
        assert!(p.key_tile * 64 <= 6400 && p.query_tile * (2 + 64) <= 6400);
    }

    #[test]
    fn a_loop_budget_bounds_key_tiles_and_chunks() {
        let dev = LOOP_CAPPED;
        // The row pass (softmax.wgsl): 2 + 16 + 2·1 + 3 iterations per key.
        let p = plan_attend(&dev, &TileLimits::default(), 8, 4096, 4096, 64, 0).unwrap();
        assert!(p.key_tile * 23 < 65535 && p.key_tile > 2000);
        assert_eq!(p.batch_group, 1);
        // Register tiles (softmax_tiled.wgsl): 877 iterations per block of
        // 16, after 148.
        let p = plan_attend(&dev, &TileLimits::default(), 8, 4096, 4096, 64, 64).unwrap();
        assert_eq!((p.tiled_rows, p.tiled_keys), (4, 16));
        assert_eq!(p.key_tile, 1040);
        assert!(148 + p.key_tile / 16 * 877 < 65535 * 7 / 8);
        let p = plan_feature(&dev, &TileLimits::default(), shape(1000, 1_000_000, 64, 64)).unwrap();
        assert!(p.chunk * (1 + 64 + 16) + 64 * 18 < 65535);
        assert!(1_000_000usize.div_ceil(p.chunk) < 65535);
        assert!(p.chunk * (64 * 65usize).div_ceil(256) < 65535);
    }

    #[test]
    fn huge_dimension_is_a_clear_error() {
        let e = plan_attend(&LAVAPIPE, &TileLimits::default(), 1, 10, 10, 10_000, 1);
        assert!(matches!(e, Err(Error::Unsupported { .. })), "{e:?}");
    }

    #[test]
    fn feature_plan_keeps_whole_chunks_per_key_tile() {
        let caps = TileLimits {
            key_rows: Some(29),
            ..TileLimits::default()
        };
        let p = plan_feature(&LAVAPIPE, &caps, shape(100, 300, 3, 2)).unwrap();
        assert_eq!(p.key_tile % p.chunk, 0);
        assert!(p.key_tile <= 29);
        // Chunk sums too many for one binding: fewer, longer chunks.
        let n = 10_000_000;
        let p = plan_feature(&LAVAPIPE, &TileLimits::default(), shape(1000, n, 64, 64)).unwrap();
        assert_eq!(p.chunk, 2048);
        let floats = binding_floats(&LAVAPIPE, &TileLimits::default());
        assert!((n.div_ceil(p.chunk) + 1) * 64 * 65 <= floats);
        // Bindings smaller than a chunk: chunks shrink to one binding.
        let small = TileLimits {
            buffer_bytes: Some(4 * 4 * 8 * 30),
            ..TileLimits::default()
        };
        let p = plan_feature(&LAVAPIPE, &small, shape(90, 300, 4, 7)).unwrap();
        assert_eq!((p.chunk, p.key_tile), (137, 137));
    }
}
