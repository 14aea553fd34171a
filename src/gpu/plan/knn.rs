//! Tiling of the kNN shaders: query tiles × key tiles, each key tile swept
//! in dispatch windows (the work cap), each window's keys split across
//! workgroups when the queries alone leave the device idle; the running
//! top-k list of each query kept on the device between windows. From
//! d = 32, where the device's workgroup memory holds its tiles, the keys
//! are filtered by inner-product tiles (`knn_ip.wgsl`), else measured by
//! differences (`knn.wgsl`).

use crate::error::Result;

use super::local_mean::{IP_CHUNK_DIMS, IP_MIN_D, IP_STEP_KEYS, IP_TILE_ROWS};
use super::{
    DeviceLimits, LOCAL_MEAN_WG, MAX_STAGED_KEYS, Shape, TileLimits, binding_bytes, budget_keys,
    dispatch_window, loop_budget, no_room_for_a_key, split_count, too_small,
};

/// Most neighbours one GPU kNN pass keeps per query (private arrays).
pub(crate) const MAX_GPU_K: usize = 128;

/// Keys one invocation of `knn.wgsl` measures at once (its `KB`): as many
/// independent multiply-add chains, so a warp does not wait on one.
pub(crate) const KNN_KEY_BLOCK: usize = 4;

/// Fewest keys one workgroup of a kNN key split sweeps: below this the
/// merge costs more than the parallelism gains.
const MIN_SPLIT_KEYS: usize = 512;

/// Tiling of one kNN call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KnnPlan {
    /// Neighbours per query.
    pub k: usize,
    /// Query rows per dispatch.
    pub query_tile: usize,
    /// Keys per key tile (one binding).
    pub key_tile: usize,
    /// Keys staged in workgroup memory per step (a multiple of
    /// `key_block`).
    pub staged_keys: usize,
    /// Keys each invocation measures at once (`KB`): [`KNN_KEY_BLOCK`], or
    /// 1 where fewer keys fit the workgroup memory.
    pub key_block: usize,
    /// Keys one dispatch sweeps: a key tile is swept in windows of this
    /// many (the work cap, [`DISPATCH_WORK`](super::DISPATCH_WORK)).
    pub dispatch_keys: usize,
    /// The inner-product tiles of `knn_ip.wgsl` (d ≥ 32, where they fit):
    /// `Some(true)` with the queries staged once per dispatch,
    /// `Some(false)` a chunk of them per step; `None`: `knn.wgsl`.
    pub ip: Option<bool>,
}

/// Workgroup memory of `knn_ip.wgsl` in `d` dimensions, its queries
/// `resident` (every coordinate of the tile's 64 rows, 64 words a
/// coordinate) or one chunk of them (68 words a coordinate): the keys'
/// chunk and then the 64 × 32 dot products (36 words a row), the keys'
/// norms in two halves and their filter weights.
pub(crate) fn knn_ip_workgroup_bytes(d: usize, resident: bool) -> usize {
    let (tq, tk, kc) = (IP_TILE_ROWS, IP_STEP_KEYS, IP_CHUNK_DIMS);
    let coords = if resident { d.div_ceil(kc) * kc } else { kc };
    let row_units = tq / 4 + usize::from(!resident);
    16 * (coords * row_units + tq * (tk / 4 + 1) + tk / 2 + tk / 4)
}

/// How `knn_ip.wgsl` runs in `d` dimensions on a device with
/// `workgroup_bytes` of workgroup memory: `Some(true)` with the queries
/// staged once for the dispatch, where they fit; `Some(false)` a chunk of
/// them per chunk and step; `None` below d = 32 or where neither fits
/// (then `knn.wgsl`).
pub(crate) fn knn_ip_queries_resident(d: usize, workgroup_bytes: u32) -> Option<bool> {
    let room = workgroup_bytes as usize;
    [true, false]
        .into_iter()
        .find(|&resident| d >= IP_MIN_D && knn_ip_workgroup_bytes(d, resident) <= room)
}

/// Loop iterations per key of `knn_ip.wgsl` in `d` dimensions keeping `k`
/// neighbours, as if nothing were unrolled and every key re-measured (a
/// list not yet full, or a row too far for the filter): a 32-key step
/// runs per 32-coordinate chunk its staging (the keys' 20, the queries' 40
/// when they do not stay), the key norms (16) and the 8 × 4 block's
/// loops (32 · 21); then the dot products' store (8) and the filter
/// (40); per key the re-measure (`d`), the offer (`k`) and its loop.
fn knn_ip_loop_per_key(d: usize, k: usize) -> usize {
    knn_ip_step_loops(d).div_ceil(IP_STEP_KEYS) + d + k + 2
}

/// Loop iterations of one 32-key step of `knn_ip.wgsl` in `d` dimensions
/// before its keys are offered (see [`knn_ip_loop_per_key`]).
fn knn_ip_step_loops(d: usize) -> usize {
    d.div_ceil(IP_CHUNK_DIMS) * 750 + 64
}

/// Loop iterations per key of `knn.wgsl` in `d` dimensions keeping `k`
/// neighbours, `kb` keys a step, as if nothing were unrolled: per step its
/// coordinates by vec4 group (each key's 4 components), per key its offer
/// (`k` slots), the staging (5 per vec4 group over 64 invocations) and the
/// stage loop.
pub(crate) fn knn_loop_per_key(d: usize, k: usize, kb: usize) -> usize {
    let d4 = d.div_ceil(4);
    (1 + d4 * (1 + 5 * kb)).div_ceil(kb) + 1 + k + (5 * d4).div_ceil(LOCAL_MEAN_WG) + 1
}

/// Loop iterations of one invocation of the merge entry with `splits`
/// slices of `k` entries, each entry offered (`k` slots): the list loaded,
/// the slices, the list written.
fn merge_loops(splits: usize, k: usize) -> usize {
    2 * k + 2 + splits * k * (k + 2)
}

/// Plans `k` nearest neighbours of `m` queries among `n` keys in `d`
/// dimensions (by differences only with `differences`: a metric other
/// than the Euclidean one, which the inner-product tiles cannot measure).
pub(crate) fn plan_knn(
    dev: &DeviceLimits,
    caps: &TileLimits,
    shape: Shape,
    (k, differences): (usize, bool),
) -> Result<KnnPlan> {
    let Shape { m, n, d, .. } = shape;
    let binding = binding_bytes(dev, caps);
    let floats = (binding / 4).min(usize::MAX as u64) as usize;
    let per_row = d.max(2 * k);
    if floats < per_row {
        return Err(too_small(binding, per_row));
    }
    let ip = knn_ip_queries_resident(d, dev.workgroup_bytes).filter(|_| !differences);
    // knn.wgsl: keys staged as vec4 groups, whole blocks of KB.
    let fit = (dev.workgroup_bytes as usize / 16 / d.div_ceil(4)).min(MAX_STAGED_KEYS);
    if fit == 0 && ip.is_none() {
        return Err(no_room_for_a_key("knn", d, dev));
    }
    let key_block = if fit >= KNN_KEY_BLOCK {
        KNN_KEY_BLOCK
    } else {
        1
    };
    let staged_keys = fit / key_block * key_block;
    // Under a loop budget: every key's iterations, and once per slice the
    // query's load (the tile's queries and norms), the list's start and
    // end and a partial last step.
    let (per_key, fixed) = if ip.is_some() {
        let per_key = knn_ip_loop_per_key(d, k);
        let queries = d.div_ceil(IP_CHUNK_DIMS) * 75;
        (per_key, queries + 2 * k + 4 + knn_ip_step_loops(d))
    } else {
        let per_key = knn_loop_per_key(d, k, key_block);
        (per_key, d + 2 * k + 4 + key_block * per_key)
    };
    let key_tile = (floats / d)
        .min(budget_keys(dev, fixed, per_key))
        .min(caps.key_rows.unwrap_or(usize::MAX))
        .min(n)
        .max(1);
    let query_tile = (floats / per_row)
        .min(dev.workgroups_per_dim as usize * LOCAL_MEAN_WG)
        .min(caps.query_rows.unwrap_or(usize::MAX))
        .min(m)
        .max(1);
    // The work cap: a full query tile against a window of keys, a pair
    // costing 2 + d + k pair-units.
    let dispatch_keys = dispatch_window(caps, 2 + d + k, query_tile, key_tile);
    Ok(KnnPlan {
        k,
        query_tile,
        key_tile,
        staged_keys,
        key_block,
        dispatch_keys,
        ip,
    })
}

impl KnnPlan {
    /// Workgroups that share one dispatch's keys for `rows` query rows:
    /// the caps' count, or, when the rows give fewer workgroups than the
    /// device wants, enough to fill it (each slice at least
    /// `MIN_SPLIT_KEYS` keys); 1 on software adapters. Bounded so the
    /// slices' lists (`2k` words a row each) fit one binding and, under a
    /// loop budget, the merge's loops stay inside it.
    pub(crate) fn key_splits(&self, dev: &DeviceLimits, caps: &TileLimits, rows: usize) -> usize {
        let groups = rows.div_ceil(LOCAL_MEAN_WG);
        let splits = split_count(
            dev,
            caps,
            (groups, self.dispatch_keys, MIN_SPLIT_KEYS),
            rows * 2 * self.k,
        );
        let merge_cap = loop_budget(dev).map_or(usize::MAX, |b| {
            (b.saturating_sub(merge_loops(0, self.k)) / (self.k * (self.k + 2))).max(1)
        });
        splits.min(merge_cap).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::super::shape;
    use super::super::{DISPATCH_WORK, LAVAPIPE, LOOP_CAPPED};
    use super::*;

    #[test]
    fn a_loop_budget_bounds_key_tiles() {
        let dev = LOOP_CAPPED;
        let p = plan_knn(
            &dev,
            &TileLimits::default(),
            shape(10, 1_000_000, 16, 0),
            (16, false),
        )
        .unwrap();
        assert!(p.key_tile * (2 + 16 + 16) < 65535);
        let per_key = knn_loop_per_key(16, 16, p.key_block);
        assert!(p.key_tile * per_key + 16 + 2 * 16 + 4 + 4 * per_key < 65535 * 7 / 8);
        assert!(p.key_tile > 1000, "{}", p.key_tile);
    }

    /// A hardware-like device: 2³¹ − 1 byte bindings, 48 KiB of
    /// workgroup memory, splits wanted.
    const HARDWARE: DeviceLimits = DeviceLimits {
        binding_bytes: (1 << 31) - 1,
        workgroups_per_dim: 65535,
        workgroup_bytes: 48 << 10,
        loop_budget: None,
        fill_workgroups: 4096,
        chunk_keys: super::super::local_mean::LOCAL_MEAN_CHUNK as u32,
    };

    #[test]
    fn keys_stage_as_vec4_groups_in_whole_blocks() {
        let none = TileLimits::default();
        let p = plan_knn(
            &HARDWARE,
            &none,
            shape(10_000, 1_000_000, 128, 0),
            (16, false),
        )
        .unwrap();
        assert_eq!((p.key_block, p.staged_keys), (4, 96));
        let p = plan_knn(&LAVAPIPE, &none, shape(10, 100, 3, 0), (5, false)).unwrap();
        assert_eq!((p.key_block, p.staged_keys), (4, 256));
        // d = 5 stages two vec4 groups a key: 32 KiB / 32 B = 1024 → 256.
        // d = 3000: 750 groups, two keys fit, measured one at a time.
        let p = plan_knn(&LAVAPIPE, &none, shape(10, 100, 3000, 0), (5, false)).unwrap();
        assert_eq!((p.key_block, p.staged_keys), (1, 2));
        // d = 9000 takes the inner-product tiles a chunk of queries at a
        // time; where neither shader fits, the plan fails.
        let p = plan_knn(&LAVAPIPE, &none, shape(10, 100, 9000, 0), (5, false)).unwrap();
        assert_eq!(p.ip, Some(false));
        let tiny = DeviceLimits {
            workgroup_bytes: 16 << 10,
            ..LAVAPIPE
        };
        let e = plan_knn(&tiny, &none, shape(10, 100, 9000, 0), (5, false));
        assert!(matches!(e, Err(crate::error::Error::Unsupported { .. })));
    }

    #[test]
    fn the_benchmark_fills_an_h200_in_bounded_dispatches() {
        let none = TileLimits::default();
        // 10⁴ queries × 10⁶ keys, d = 128, k = 16: one key tile, windows
        // within the work cap, 26 slices a window (157 × 26 = 4082
        // workgroups of two warps).
        let (m, n, d, k) = (10_000, 1_000_000, 128, 16);
        let p = plan_knn(&HARDWARE, &none, shape(m, n, d, 0), (k, false)).unwrap();
        assert_eq!((p.query_tile, p.key_tile), (m, n));
        assert!(m as u64 * p.dispatch_keys as u64 * (2 + d + k) as u64 <= DISPATCH_WORK);
        assert_eq!(p.dispatch_keys, 47_068);
        let s = p.key_splits(&HARDWARE, &none, m);
        assert_eq!(s, 26);
        assert!(m.div_ceil(64) * s * 2 >= 132 * 4 * 4);
        // A software adapter never splits unless the caps say so, and
        // then the merge stays inside the loop budget.
        assert_eq!(p.key_splits(&LAVAPIPE, &none, m), 1);
        let forced = TileLimits {
            key_splits: Some(1024),
            ..TileLimits::default()
        };
        let p = plan_knn(
            &LOOP_CAPPED,
            &forced,
            shape(100, 100_000, 8, 0),
            (128, false),
        )
        .unwrap();
        let s = p.key_splits(&LOOP_CAPPED, &forced, 100);
        assert!(s > 1 && merge_loops(s, 128) <= 65535 * 7 / 8, "{s}");
        // The slices' lists fit one binding.
        let small = TileLimits {
            buffer_bytes: Some(4 * 200 * 2 * 4 * 3),
            key_splits: Some(50),
            ..TileLimits::default()
        };
        let p = plan_knn(&LAVAPIPE, &small, shape(200, 1000, 3, 0), (4, false)).unwrap();
        assert_eq!(p.key_splits(&LAVAPIPE, &small, 200), 3);
    }

    #[test]
    fn inner_product_tiles_from_d_32_where_they_fit() {
        use super::super::H200;
        let none = TileLimits::default();
        let ip = |dev: &DeviceLimits, d| {
            plan_knn(dev, &none, shape(10, 100, d, 0), (16, false))
                .unwrap()
                .ip
        };
        // H200, 48 KiB: queries stay up to d = 128 (41.4 KiB), then a
        // chunk a step; lavapipe, 32 KiB: up to d = 64.
        assert_eq!(knn_ip_workgroup_bytes(128, true), 42_368);
        for (d, h200, lavapipe) in [
            (31, None, None),
            (32, Some(true), Some(true)),
            (64, Some(true), Some(true)),
            (65, Some(true), Some(false)),
            (128, Some(true), Some(false)),
            (129, Some(false), Some(false)),
            (784, Some(false), Some(false)),
        ] {
            assert_eq!(ip(&H200, d), h200, "H200 d={d}");
            assert_eq!(ip(&LAVAPIPE, d), lavapipe, "lavapipe d={d}");
        }
        // The benchmark (10⁴ × 10⁶, d = 128, k = 16) on the H200: one key
        // tile, the same windows and slices as the differences.
        let p = plan_knn(&H200, &none, shape(10_000, 1_000_000, 128, 0), (16, false)).unwrap();
        assert_eq!(
            (p.ip, p.key_tile, p.dispatch_keys),
            (Some(true), 1_000_000, 47_068)
        );
        assert_eq!(p.key_splits(&H200, &none, 10_000), 26);
    }

    #[test]
    fn a_loop_budget_bounds_inner_product_key_tiles() {
        // Every key re-measured (a list not yet full): the tile's loops,
        // d for the re-measure and k for the offer, per key.
        for (d, k) in [(32, 1), (128, 16), (784, 128)] {
            let p = plan_knn(
                &LOOP_CAPPED,
                &TileLimits::default(),
                shape(10, 1_000_000, d, 0),
                (k, false),
            )
            .unwrap();
            assert!(p.ip.is_some());
            let per_key = knn_ip_loop_per_key(d, k);
            assert!(per_key > d + k);
            let step = d.div_ceil(32) * 750 + 64;
            let fixed = d.div_ceil(32) * 75 + 2 * k + 4 + step;
            assert!(p.key_tile * per_key + fixed <= 65535 * 7 / 8, "d={d} k={k}");
            assert!(p.key_tile >= 16, "d={d} k={k}: {}", p.key_tile);
        }
    }

    #[test]
    fn caps_lower_the_window() {
        let capped = TileLimits {
            dispatch_keys: Some(33),
            ..TileLimits::default()
        };
        let p = plan_knn(&HARDWARE, &capped, shape(1000, 5000, 3, 0), (4, false)).unwrap();
        assert_eq!(p.dispatch_keys, 33);
        let p = plan_knn(
            &HARDWARE,
            &TileLimits::default(),
            shape(1000, 5000, 3, 0),
            (4, false),
        )
        .unwrap();
        assert_eq!(p.dispatch_keys, 5000);
    }
}
