//! The planners' shared rules, and every planner against the limits an
//! H200 reports.

use super::*;

#[test]
fn key_split_and_window_caps_are_checked() {
    let bad = |t: TileLimits| matches!(t.validate(), Err(Error::InvalidParameter { .. }));
    let with = |key_splits, dispatch_keys| TileLimits {
        key_splits,
        dispatch_keys,
        ..TileLimits::default()
    };
    assert!(bad(with(Some(0), None)));
    assert!(bad(with(Some(MAX_KEY_SPLITS + 1), None)));
    assert!(bad(with(None, Some(0))));
    assert!(with(Some(MAX_KEY_SPLITS), Some(1)).validate().is_ok());
}

#[test]
fn tiles_cover_the_range_once() {
    let t: Vec<_> = tiles(10, 4).collect();
    assert_eq!(t, vec![(0, 4), (4, 8), (8, 10)]);
    assert_eq!(tiles(3, 7).count(), 1);
}

use super::local_mean::{IP_MIN_D, ip_queries_resident};
use super::softmax::{MATRIX_WG as SOFTMAX_MATRIX_WG, tiled_workgroup_bytes};

/// The limits as wgpu reports them for an H200 become [`H200`]: bindings
/// of the device's 2³¹ − 1 bytes (not 4 GiB), rounded down to whole
/// `vec4`s, and its workgroup memory and dispatch size.
#[test]
fn device_limits_come_from_what_the_device_reports() {
    assert_eq!(DeviceLimits::from_wgpu(&h200_limits(), false), H200);
    const { assert!(H200.binding_bytes < 1 << 31) };
    // A binding never passes a buffer, nor what the shaders index.
    let small_buffers = wgpu::Limits {
        max_buffer_size: 1000,
        ..h200_limits()
    };
    assert_eq!(
        DeviceLimits::from_wgpu(&small_buffers, false).binding_bytes,
        992
    );
    let metal_like = wgpu::Limits {
        max_storage_buffer_binding_size: 1 << 40,
        ..h200_limits()
    };
    assert_eq!(
        DeviceLimits::from_wgpu(&metal_like, false).binding_bytes,
        SHADER_BINDING_BYTES / 16 * 16
    );
    // lavapipe as it reports itself: llvmpipe's loop cap, no key splits.
    let lavapipe = wgpu::Limits {
        max_storage_buffer_binding_size: 128 << 20,
        max_buffer_size: (1 << 31) - 1,
        max_compute_workgroup_storage_size: 32 << 10,
        ..h200_limits()
    };
    assert_eq!(DeviceLimits::from_wgpu(&lavapipe, true), LOOP_CAPPED);
}

/// What one plan's dispatches need of the device, checked against it.
struct Need<'a> {
    dev: &'a DeviceLimits,
    what: String,
}

impl Need<'_> {
    /// A binding of `floats` floats fits the device's binding size.
    fn binding(&self, name: &str, floats: usize) {
        let bytes = floats as u64 * 4;
        assert!(
            bytes <= self.dev.binding_bytes,
            "{}: {name} binds {bytes} bytes, more than {}",
            self.what,
            self.dev.binding_bytes
        );
        assert!(u32::try_from(floats).is_ok(), "{}: {name}", self.what);
    }

    /// A dispatch dimension of `n` workgroups fits the device.
    fn workgroups(&self, name: &str, n: usize) {
        assert!(
            (1..=self.dev.workgroups_per_dim as usize).contains(&n),
            "{}: {name} dispatches {n} workgroups, the device allows {}",
            self.what,
            self.dev.workgroups_per_dim
        );
    }

    /// Workgroup memory of `bytes` fits the device.
    fn workgroup_memory(&self, name: &str, bytes: usize) {
        assert!(
            bytes <= self.dev.workgroup_bytes as usize,
            "{}: {name} needs {bytes} bytes of workgroup memory, the device has {}",
            self.what,
            self.dev.workgroup_bytes
        );
    }

    /// One dispatch's pairs at `units` a pair stay within the work cap.
    fn work(&self, rows: usize, keys: usize, units: usize) {
        let work = rows as u64 * keys as u64 * units as u64;
        assert!(
            work <= DISPATCH_WORK,
            "{}: {rows} rows × {keys} keys × {units} units a dispatch",
            self.what
        );
    }
}

/// A local-mean plan's bindings (queries, row states, outputs, keys,
/// values, the key slices' partial states), workgroup memory and
/// dispatches within `dev`.
fn check_local_mean(dev: &DeviceLimits, p: &LocalMeanPlan, s: Shape, what: &str) {
    let need = Need {
        dev,
        what: format!("{what} {s:?} {p:?}"),
    };
    let caps = TileLimits::default();
    let (rows, cols) = (p.query_tile, p.col_tile.max(1));
    need.binding("queries", rows * s.d);
    need.binding("row states", rows * p.state_cols());
    need.binding("outputs", rows * s.q);
    need.binding("keys", p.key_tile * s.d);
    need.binding("values", p.key_tile * s.q);
    let (d4, qa4) = (s.d.div_ceil(4), cols.div_ceil(4));
    need.workgroup_memory("staged keys", p.staged_keys * 16 * (d4 + qa4));
    if s.d >= IP_MIN_D && ip_queries_resident(s.d, cols, dev.workgroup_bytes).is_none() {
        eprintln!("{what}: the inner-product tiles do not fit; local_mean.wgsl runs");
    }
    need.workgroups(
        "query rows",
        rows.div_ceil(LOCAL_MEAN_WG * p.rows_per_thread),
    );
    let splits = p.key_splits(dev, &caps, rows);
    need.workgroups("key splits", splits);
    if splits > 1 {
        need.binding("partial states", splits * rows * p.state_cols());
        need.workgroups("merge", rows.div_ceil(LOCAL_MEAN_WG));
    }
    assert!(p.dispatch_keys <= p.key_tile, "{}", need.what);
    need.work(rows, p.dispatch_keys, 2 + s.d + cols);
}

/// Every planner at the benchmark's large sizes (`locus bench --size
/// large`) against the limits an H200 reports: each binding within 2³¹ − 1
/// bytes, workgroup memory within 48 KiB, dispatches within 65535
/// workgroups a dimension, each dispatch within the work cap.
#[test]
fn every_planner_fits_an_h200_at_the_benchmark_sizes() {
    let dev = &H200;
    let caps = TileLimits::default();

    // Local means: M = N = 10⁶ at d = 3; 4096 queries (keys split);
    // M = N = 2·10⁵ at d = 128; a MeanShift step on 10⁶ points.
    for s in [
        shape(1_000_000, 1_000_000, 3, 4),
        shape(4_096, 1_000_000, 3, 4),
        shape(200_000, 200_000, 128, 4),
    ] {
        let p = plan_local_mean(dev, &caps, s).unwrap();
        check_local_mean(dev, &p, s, "local mean");
        assert_eq!((p.query_tile, p.key_tile), (s.m, s.n), "one tile each");
    }
    let few = plan_local_mean(dev, &caps, shape(4_096, 1_000_000, 3, 4)).unwrap();
    assert!(
        few.key_splits(dev, &caps, 4_096) > 1,
        "few queries split the keys"
    );
    for blurring in [false, true] {
        let p = plan_mean_shift(dev, &caps, 1_000_000, 1_000_000, 2, blurring).unwrap();
        check_local_mean(dev, &p, shape(1_000_000, 1_000_000, 2, 2), "mean shift");
    }

    // kNN: 10⁴ queries over 10⁶ keys, d = 128, k = 16.
    let (s, k) = (shape(10_000, 1_000_000, 128, 0), 16);
    let p = plan_knn(dev, &caps, s, (k, false)).unwrap();
    let need = Need {
        dev,
        what: format!("knn {s:?} {p:?}"),
    };
    need.binding("queries", p.query_tile * s.d);
    need.binding("keys", p.key_tile * s.d);
    need.binding("neighbour lists", p.query_tile * 2 * k);
    need.workgroup_memory("staged keys", p.staged_keys * 4 * s.d);
    need.workgroups("query rows", p.query_tile.div_ceil(LOCAL_MEAN_WG));
    assert_eq!(p.key_tile, s.n, "10⁶ keys of d = 128 bind at once");

    // Beyond the benchmark, where the binding size bounds the tiles: 10⁷
    // keys of d = 128 (5 GB) are cut into key tiles of at most 2³¹ bytes.
    let s = shape(10_000, 10_000_000, 128, 0);
    let big = plan_knn(dev, &caps, s, (k, false)).unwrap();
    assert!(big.key_tile < s.n && big.key_tile * s.d * 4 > 1 << 30);
    let need = Need {
        dev,
        what: format!("knn {s:?} {big:?}"),
    };
    need.binding("keys", big.key_tile * s.d);

    // A 16384² kernel matrix (d = 3) with its row sums; and a 65536² one,
    // whose output blocks the binding size bounds (under a 4 GiB binding
    // they would be twice what the device binds).
    for n in [16_384, 65_536] {
        let s = shape(n, n, 3, 0);
        let (mp, lp) = plan_kernel_matrix(dev, &caps, s).unwrap();
        let need = Need {
            dev,
            what: format!("kernel matrix {s:?} {mp:?}"),
        };
        need.binding("queries", mp.query_tile * s.d);
        need.binding("keys", mp.key_tile * s.d);
        let rows = mp.block_rows_for(mp.key_tile, mp.query_tile);
        need.binding("output block", rows * mp.key_tile);
        need.workgroups("block columns", mp.key_tile.div_ceil(MATRIX_WG));
        need.workgroups("block rows", rows.div_ceil(MATRIX_WG));
        check_local_mean(dev, &lp, s, "kernel matrix row sums");
    }

    // Attention B = 8, T = 4096, d = 64 (64 value columns), and 16 new
    // queries a call against the prepared keys.
    let (b, t, d) = (8, 4_096, 64);
    let full = plan_attend(dev, &caps, b, t, t, d, d).unwrap();
    let prepared = plan_attend_prepared(
        dev,
        &caps,
        (b, 16, t, d, d),
        full.key_tile,
        full.batch_group,
    )
    .unwrap();
    for (p, m) in [(full, t), (prepared, 16)] {
        let need = Need {
            dev,
            what: format!("attention B={b} M={m} T={t} d={d} {p:?}"),
        };
        let group = p.batch_group;
        need.binding("queries", group * p.query_tile * d);
        need.binding("row states", group * p.query_tile * p.state_cols());
        need.binding("outputs", group * p.query_tile * d);
        need.binding("keys", group * p.key_tile * d);
        need.binding("values", group * p.key_tile * d);
        let (d4, qa4) = (d.div_ceil(4), p.qa4());
        need.workgroup_memory("staged keys", p.staged * 16 * (d4 + qa4));
        if p.tiled_keys > 0 {
            let bytes = tiled_workgroup_bytes(d4, qa4, p.tiled_keys, p.tiled_rows);
            need.workgroup_memory("tiles", bytes);
        }
        // The pass with value columns (tiled where its tiles fit) and the
        // one without.
        for values in [true, false] {
            let rows = p.group_rows(values);
            need.workgroups("query rows", p.query_tile.div_ceil(rows));
        }
        need.workgroups("batches", group);
        let splits = [true, false]
            .map(|values| p.key_splits(dev, &caps, values, (p.query_tile, group, p.key_tile)))
            .into_iter()
            .max()
            .unwrap_or(1);
        need.workgroups("key splits", splits);
        need.binding(
            "partial states",
            splits * group * p.query_tile * p.state_cols(),
        );
        need.work(group * p.query_tile, p.key_tile, 2 + d + p.col_tile.max(1));
    }
    // The weight matrix of one such batch.
    let mp = plan_softmax_matrix(dev, &caps, b, shape(t, t, d, 0)).unwrap();
    let need = Need {
        dev,
        what: format!("softmax matrix {mp:?}"),
    };
    let rows = mp.block_rows_for(mp.rows.key_tile, mp.rows.query_tile);
    need.binding("output block", rows * mp.rows.key_tile);
    need.workgroups(
        "block columns",
        mp.rows.key_tile.div_ceil(SOFTMAX_MATRIX_WG),
    );
    need.workgroups("block rows", rows.div_ceil(SOFTMAX_MATRIX_WG));
}
