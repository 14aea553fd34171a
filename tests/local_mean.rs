//! Local mean parity: GPU vs CPU vs a plain f64 reference, every profile.

mod common;

use common::*;
use locus::{Engine, Kernel, Profile, TileLimits};
use ndarray::{Array2, s};

const RTOL: f64 = 1e-4;
const ATOL: f64 = 1e-5;

/// (M, N, d, q) shapes that are multiples of no tile size.
const SHAPES: [(usize, usize, usize, usize); 5] = [
    (1, 1, 1, 1),
    (777, 1301, 7, 5),
    (65, 257, 3, 3),
    (3, 1000, 2, 11),
    (129, 33, 1, 2),
];

fn check_all(engine: &Engine, label: &str, shapes: &[(usize, usize, usize, usize)]) {
    for (si, &(m, n, d, q)) in shapes.iter().enumerate() {
        let mut rng = Rng::new(1000 + si as u64);
        let queries = rng.matrix(m, d, 0.0, 1.0);
        let keys = rng.matrix(n, d, 0.0, 1.0);
        let values = rng.matrix(n, q, -2.0, 3.0);
        let h = 0.4 * (d as f32).sqrt();
        for p in Profile::ALL {
            let k = Kernel::new(p, h).unwrap();
            let (want, want_empty) = ref_local_mean(&k, &queries, &keys, &values);
            let got = engine
                .local_mean(&k, queries.view(), keys.view(), values.view())
                .unwrap();
            let what = format!("{label} {p} M={m} N={n} d={d} q={q}");
            assert_close(&what, &got.values, &want, RTOL, ATOL);
            assert_eq!(got.empty_rows, want_empty, "{what}: empty rows");
        }
    }
}

#[test]
fn cpu_matches_reference_for_every_profile_and_shape() {
    check_all(cpu(), "cpu", &SHAPES);
}

#[test]
fn gpu_matches_reference_for_every_profile_and_shape() {
    let Some(gpu) = gpu() else { return };
    check_all(gpu, "gpu", &SHAPES);
}

#[test]
fn gpu_with_forced_tiny_tiles_merges_partial_states() {
    let limits = TileLimits {
        query_rows: Some(13),
        key_rows: Some(29),
        value_cols: Some(2),
        ..TileLimits::default()
    };
    let Some(gpu) = gpu_engine(limits) else {
        return;
    };
    check_all(
        &gpu,
        "gpu tiny tiles",
        &[(77, 301, 3, 5), (1, 1, 1, 1), (40, 100, 5, 1)],
    );
    // Tiles bounded by binding size rather than row caps.
    let by_bytes = TileLimits {
        buffer_bytes: Some(4 * 3 * 50),
        ..TileLimits::default()
    };
    let Some(gpu) = gpu_engine(by_bytes) else {
        return;
    };
    check_all(&gpu, "gpu small bindings", &[(120, 333, 3, 3)]);
}

/// Keys split across workgroups (each slice's row states merged by a
/// second pass) and key tiles swept in several windows (one dispatch
/// each): the same local means as the f64 reference, for every profile,
/// including more slices than a window has keys (empty slices) and a
/// single query row (the register-blocked shader's other rows idle).
#[test]
fn gpu_key_splits_and_dispatch_windows_merge_to_the_reference() {
    // (64, 7, 29): 64 slices asked, capped at the 7 keys of a window; the
    // last window of each 29-key tile holds 1 key, so 6 slices are empty.
    for (splits, window, key_rows) in [(5, 37, 101), (64, 7, 29), (2, 1000, 1000)] {
        let limits = TileLimits {
            query_rows: Some(300),
            key_rows: Some(key_rows),
            key_splits: Some(splits),
            dispatch_keys: Some(window),
            ..TileLimits::default()
        };
        let Some(gpu) = gpu_engine(limits) else {
            return;
        };
        check_all(
            &gpu,
            &format!("gpu {splits} key splits, windows of {window}"),
            &[
                (77, 301, 3, 5),
                (1, 50, 2, 1),
                (257, 700, 9, 3),
                (40, 150, 40, 2),
                // 16 and 32 value columns a pass (2 and 1 rows per invocation).
                (20, 60, 12, 20),
                (9, 70, 40, 40),
            ],
        );
    }
}

/// From d = 32 the GPU forms distances from inner-product tiles centred on
/// a key, and falls back to differences where the expansion's error bound
/// is too loose: the same local means as the f64 reference on ordinary
/// data, data far from the origin (the centring), two tight clusters far
/// apart (the fallback), every profile, with device-sized tiles and with
/// tiny tiles, windows and key splits.
#[test]
fn gpu_inner_product_tiles_match_reference_at_high_d() {
    let Some(gpu) = gpu() else { return };
    let tiny = gpu_engine(TileLimits {
        query_rows: Some(45),
        key_rows: Some(77),
        key_splits: Some(3),
        dispatch_keys: Some(40),
        ..TileLimits::default()
    })
    .expect("an adapter, as for gpu()");
    // Windows of 5 keys split 5 ways (16 asked, capped at the window): the
    // last window of a 77-key tile holds 2 keys, so 3 slices are empty.
    let sliced = gpu_engine(TileLimits {
        key_rows: Some(77),
        key_splits: Some(16),
        dispatch_keys: Some(5),
        ..TileLimits::default()
    })
    .expect("an adapter, as for gpu()");
    let mut rng = Rng::new(4242);
    let mut cases: Vec<(String, Array2<f32>, Array2<f32>, f32)> = Vec::new();
    for &(m, n, d) in &[(70, 200, 32), (33, 97, 64), (5, 40, 784)] {
        let q = rng.matrix(m, d, 0.0, 1.0);
        let x = rng.matrix(n, d, 0.0, 1.0);
        cases.push((format!("uniform d={d}"), q, x, 0.4 * (d as f32).sqrt()));
    }
    let (q, x) = (rng.matrix(50, 40, 0.0, 1.0), rng.matrix(120, 40, 0.0, 1.0));
    cases.push(("offset 1e4".into(), q + 1.0e4, x + 1.0e4, 2.0));
    // Two clusters 1000 apart, spread 1e-3, h = 1e-2.
    let cluster = |rng: &mut Rng, rows: usize| {
        let mut a = rng.matrix(rows, 40, 0.0, 1.0e-3);
        for (r, mut row) in a.rows_mut().into_iter().enumerate() {
            if r % 2 == 1 {
                row += 1000.0;
            }
        }
        a
    };
    let (q, x) = (cluster(&mut rng, 40), cluster(&mut rng, 90));
    cases.push(("two clusters".into(), q, x, 1.0e-2));
    for (what, q, x, h) in &cases {
        let v = rng.matrix(x.nrows(), 3, -2.0, 3.0);
        for p in Profile::ALL {
            let k = Kernel::new(p, *h).unwrap();
            let (want, want_empty) = ref_local_mean(&k, q, x, &v);
            for (name, e) in [("gpu", gpu), ("gpu tiny", &tiny), ("gpu sliced", &sliced)] {
                let got = e.local_mean(&k, q.view(), x.view(), v.view()).unwrap();
                let label = format!("{name} {what} {p}");
                assert_close(&label, &got.values, &want, RTOL, ATOL);
                assert_eq!(got.empty_rows, want_empty, "{label}: empty rows");
            }
        }
    }
}

/// The inner-product tiles' two layouts and their re-measure: d not a
/// multiple of the 32-coordinate chunk (33, 45, 200), queries kept in
/// workgroup memory (3 value columns at d = 33 and 45 on a 32 KiB device)
/// or staged a chunk per step (32 columns a pass, and d = 200), tiny
/// tiles, windows of 33 keys (a last step of one key) and key splits, and
/// a bandwidth small against the data's spread from the centre, so that
/// some rows of a workgroup re-measure by differences while others keep
/// the expansion.
#[test]
fn gpu_inner_product_layouts_and_remeasure_match_reference() {
    let Some(gpu) = gpu() else { return };
    let tiny = gpu_engine(TileLimits {
        query_rows: Some(70),
        key_rows: Some(101),
        key_splits: Some(2),
        dispatch_keys: Some(33),
        ..TileLimits::default()
    })
    .expect("an adapter, as for gpu()");
    let mut rng = Rng::new(2727);
    for &(m, n, d) in &[(70, 130, 33), (65, 97, 45), (20, 75, 200)] {
        let q = rng.matrix(m, d, 0.0, 1.0);
        let x = rng.matrix(n, d, 0.0, 1.0);
        let h = 0.5 * (d as f32).sqrt();
        let mut cases = vec![("uniform", q.clone(), x.clone(), h)];
        // Two groups 20 apart per coordinate, each 0.3 wide: half the keys
        // and every third query in the far one. The far rows' expansion
        // (centred on a near key) fails its bound, so they re-measure by
        // differences, in steps of near keys beside near rows that keep
        // the inner products (without the re-measure, at h² = 0.03·d, this
        // case failed by 7 to 15 times the tolerance).
        let (mut q2, mut x2) = (q * 0.3, x * 0.3);
        for (r, mut row) in q2.rows_mut().into_iter().enumerate() {
            if r % 3 == 1 {
                row += 20.0;
            }
        }
        for mut row in x2.rows_mut().into_iter().skip(n / 2) {
            row += 20.0;
        }
        cases.push(("two groups", q2, x2, (0.06 * d as f32).sqrt()));
        for (what, q, x, h) in &cases {
            for cols in [3, 40] {
                let v = rng.matrix(n, cols, -2.0, 3.0);
                for p in Profile::ALL {
                    let k = Kernel::new(p, *h).unwrap();
                    let (want, want_empty) = ref_local_mean(&k, q, x, &v);
                    for (name, e) in [("gpu", gpu), ("gpu tiny", &tiny)] {
                        let got = e.local_mean(&k, q.view(), x.view(), v.view()).unwrap();
                        let label = format!("{name} {what} d={d} q={cols} {p}");
                        assert_close(&label, &got.values, &want, RTOL, ATOL);
                        assert_eq!(got.empty_rows, want_empty, "{label}: empty rows");
                    }
                }
            }
        }
    }
}

/// Many more value-column passes than one submission records (one column
/// per pass here): every batch of passes lands in the output, and the
/// row counts are not counted twice.
#[test]
fn gpu_many_value_column_passes_are_submitted_in_batches() {
    let Some(gpu) = gpu_engine(TileLimits {
        value_cols: Some(1),
        key_rows: Some(7),
        ..TileLimits::default()
    }) else {
        return;
    };
    check_all(
        &gpu,
        "gpu one column per pass",
        &[(9, 20, 2, 150), (1, 3, 1, 129)],
    );
    // Far queries: every row empty under a compact kernel, counted once.
    let k = Kernel::new(Profile::Uniform, 0.1).unwrap();
    let mut rng = Rng::new(5);
    let keys = rng.matrix(20, 2, 0.0, 1.0);
    let values = rng.matrix(20, 150, 0.0, 1.0);
    let far = rng.matrix(4, 2, 10.0, 11.0);
    let got = gpu
        .local_mean(&k, far.view(), keys.view(), values.view())
        .unwrap();
    assert_eq!(got.empty_rows, 4);
    assert!(got.values.iter().all(|v| v.is_nan()));
}

#[test]
fn self_local_mean_equals_local_mean_of_points_on_points() {
    let mut rng = Rng::new(7);
    let x = rng.matrix(300, 4, -1.0, 1.0);
    let k = Kernel::new(Profile::Biweight, 0.9).unwrap();
    let (want, _) = ref_local_mean(&k, &x, &x, &x);
    let mut engines = vec![("cpu", cpu())];
    if let Some(g) = gpu() {
        engines.push(("gpu", g));
    }
    for (name, e) in engines {
        let got = e.self_local_mean(&k, x.view()).unwrap();
        assert_close(&format!("{name} self"), &got.values, &want, RTOL, ATOL);
        assert_eq!(got.empty_rows, 0);
    }
}

fn engines() -> Vec<(&'static str, &'static Engine)> {
    let mut v = vec![("cpu", cpu())];
    if let Some(g) = gpu() {
        v.push(("gpu", g));
    }
    v
}

#[test]
fn duplicate_points_are_averaged_with_equal_weight() {
    let mut rng = Rng::new(11);
    let base = rng.matrix(40, 3, 0.0, 1.0);
    // Every key appears three times, with different values.
    let keys = ndarray::concatenate![ndarray::Axis(0), base, base, base];
    let values = rng.matrix(120, 2, -1.0, 1.0);
    for p in Profile::ALL {
        let k = Kernel::new(p, 0.5).unwrap();
        let (want, _) = ref_local_mean(&k, &base, &keys, &values);
        for (name, e) in engines() {
            let got = e
                .local_mean(&k, base.view(), keys.view(), values.view())
                .unwrap();
            assert_close(
                &format!("{name} duplicates {p}"),
                &got.values,
                &want,
                RTOL,
                ATOL,
            );
        }
    }
}

#[test]
fn tiny_bandwidth_returns_the_nearest_keys_average_not_nan() {
    let mut rng = Rng::new(5);
    let keys = rng.matrix(500, 3, 0.0, 1.0);
    let values = rng.matrix(500, 2, -1.0, 1.0);
    // Queries near (not on) keys; the nearest key is ~1e-3 away, the next
    // much farther, and with h = 1e-5 every plain weight exp(-t/2)
    // underflows (t ≥ 1e4).
    let mut queries = keys.slice(s![..50, ..]).to_owned();
    queries.mapv_inplace(|v| v + 1e-3);
    for p in [Profile::Gaussian, Profile::Laplacian] {
        let k = Kernel::new(p, 1e-5).unwrap();
        let (want, empty) = ref_local_mean(&k, &queries, &keys, &values);
        assert_eq!(empty, 0);
        for (name, e) in engines() {
            let got = e
                .local_mean(&k, queries.view(), keys.view(), values.view())
                .unwrap();
            assert_eq!(got.empty_rows, 0, "{name} {p}");
            assert_close(
                &format!("{name} tiny h {p}"),
                &got.values,
                &want,
                RTOL,
                ATOL,
            );
            // The nearest key of query i is key i.
            for i in 0..50 {
                for c in 0..2 {
                    assert!((got.values[[i, c]] - values[[i, c]]).abs() < 1e-5);
                }
            }
        }
    }
    // Two keys at exactly the same distance share the weight equally.
    let keys2 = Array2::from_shape_vec((3, 1), vec![-1.0f32, 1.0, 5.0]).unwrap();
    let vals2 = Array2::from_shape_vec((3, 1), vec![10.0f32, 20.0, 99.0]).unwrap();
    let q2 = Array2::from_shape_vec((1, 1), vec![0.0f32]).unwrap();
    let k = Kernel::gaussian(1e-3).unwrap();
    for (name, e) in engines() {
        let got = e
            .local_mean(&k, q2.view(), keys2.view(), vals2.view())
            .unwrap();
        assert!(
            (got.values[[0, 0]] - 15.0).abs() < 1e-4,
            "{name}: {}",
            got.values[[0, 0]]
        );
    }
}

#[test]
fn huge_bandwidth_gives_the_plain_mean() {
    let mut rng = Rng::new(9);
    let keys = rng.matrix(300, 2, 0.0, 1.0);
    let values = rng.matrix(300, 3, -1.0, 1.0);
    let queries = rng.matrix(10, 2, 0.0, 1.0);
    let mean = values.mean_axis(ndarray::Axis(0)).unwrap();
    for p in Profile::ALL {
        let k = Kernel::new(p, 1e6).unwrap();
        for (name, e) in engines() {
            let got = e
                .local_mean(&k, queries.view(), keys.view(), values.view())
                .unwrap();
            for i in 0..10 {
                for c in 0..3 {
                    assert!(
                        (got.values[[i, c]] - mean[c]).abs() < 1e-5,
                        "{name} {p}: {} vs {}",
                        got.values[[i, c]],
                        mean[c]
                    );
                }
            }
        }
    }
}

#[test]
fn empty_neighbourhoods_are_nan_and_counted() {
    let mut rng = Rng::new(3);
    let keys = rng.matrix(200, 2, 0.0, 1.0);
    let values = rng.matrix(200, 3, -1.0, 1.0);
    // 20 queries inside the data, 7 far outside it.
    let inside = rng.matrix(20, 2, 0.2, 0.8);
    let outside = rng.matrix(7, 2, 10.0, 11.0);
    let queries = ndarray::concatenate![ndarray::Axis(0), inside, outside];
    for p in Profile::ALL {
        let k = Kernel::new(p, 0.3).unwrap();
        let (want, want_empty) = ref_local_mean(&k, &queries, &keys, &values);
        assert_eq!(want_empty, if p.is_compact() { 7 } else { 0 });
        for (name, e) in engines() {
            let got = e
                .local_mean(&k, queries.view(), keys.view(), values.view())
                .unwrap();
            assert_eq!(got.empty_rows, want_empty, "{name} {p}");
            assert_close(&format!("{name} empty {p}"), &got.values, &want, RTOL, ATOL);
        }
    }
}

#[test]
fn non_contiguous_views_are_accepted() {
    let mut rng = Rng::new(21);
    let big = rng.matrix(90, 6, 0.0, 1.0);
    let keys = big.slice(s![..;2, ..3]); // strided rows and columns
    let values = big.slice(s![..;2, 3..]);
    let queries = big.t().to_owned();
    let queries = queries.t();
    let k = Kernel::gaussian(0.3).unwrap();
    let (want, _) = ref_local_mean(
        &k,
        &queries.slice(s![.., ..3]).to_owned(),
        &keys.to_owned(),
        &values.to_owned(),
    );
    for (name, e) in engines() {
        let got = e
            .local_mean(&k, queries.slice(s![.., ..3]), keys, values)
            .unwrap();
        assert_close(&format!("{name} strided"), &got.values, &want, RTOL, ATOL);
    }
}

/// Long key tiles: software rasterizers cap the loop iterations of one
/// invocation (llvmpipe at 65535 in all, silently); every key must still
/// count. With a huge flat kernel each local mean is the plain mean.
#[test]
fn gpu_counts_every_key_of_long_tiles() {
    let Some(g) = gpu() else { return };
    let n = 70_000;
    let mut rng = Rng::new(70);
    let keys = rng.matrix(n, 3, 0.0, 1.0);
    let values = rng.matrix(n, 3, -1.0, 1.0);
    let queries = rng.matrix(5, 3, 0.0, 1.0);
    let mean = values.mapv(f64::from).mean_axis(ndarray::Axis(0)).unwrap();
    let k = Kernel::new(Profile::Uniform, 100.0).unwrap();
    let got = g
        .local_mean(&k, queries.view(), keys.view(), values.view())
        .unwrap();
    let st = g
        .row_states(&k, queries.view(), keys.view(), Some(values.view()), false)
        .unwrap();
    for i in 0..5 {
        assert_eq!(st.sum[i], n as f64, "row {i}: every key has weight 1");
        for c in 0..3 {
            assert!((f64::from(got.values[[i, c]]) - mean[c]).abs() < 1e-5);
        }
    }
    let kg = Kernel::gaussian(0.05).unwrap();
    let (want, _) = ref_local_mean(&kg, &queries, &keys, &values);
    let got = g
        .local_mean(&kg, queries.view(), keys.view(), values.view())
        .unwrap();
    assert_close("gpu long tiles gaussian", &got.values, &want, RTOL, ATOL);
    let nb = g.knn(queries.view(), keys.view(), 16).unwrap();
    let nc = cpu().knn(queries.view(), keys.view(), 16).unwrap();
    assert_eq!(nb.indices, nc.indices);
}

/// From d = 32 and 32 queries the CPU takes inner products (one-shot
/// calls build the keys' panels, key sets keep them): every profile
/// against the reference, one-shot and key set, data away from the
/// origin; kNN lists equal bit for bit between the inner-product path
/// (one-shot with many queries, key set) and the differences (a few
/// queries).
#[test]
fn cpu_inner_products_match_reference_at_higher_d() {
    let e = cpu();
    for (si, &(m, n, d, q)) in [(70usize, 900usize, 48usize, 3usize), (40, 300, 300, 2)]
        .iter()
        .enumerate()
    {
        let mut rng = Rng::new(2000 + si as u64);
        let queries = rng.matrix(m, d, 50.0, 51.0);
        let keys = rng.matrix(n, d, 50.0, 51.0);
        let values = rng.matrix(n, q, -2.0, 3.0);
        let ks = e
            .prepare(keys.view())
            .values(values.view())
            .build()
            .unwrap();
        let h = 0.4 * (d as f32).sqrt();
        for p in Profile::ALL {
            let k = Kernel::new(p, h).unwrap();
            let (want, want_empty) = ref_local_mean(&k, &queries, &keys, &values);
            let what = format!("{p} M={m} N={n} d={d}");
            let got = e
                .local_mean(&k, queries.view(), keys.view(), values.view())
                .unwrap();
            assert_close(&format!("one-shot {what}"), &got.values, &want, RTOL, ATOL);
            assert_eq!(got.empty_rows, want_empty, "{what}: empty rows");
            let got = ks.local_mean(&k, queries.view()).unwrap();
            assert_close(&format!("key set {what}"), &got.values, &want, RTOL, ATOL);
        }
        let kk = 7;
        let one_shot = e.knn(queries.view(), keys.view(), kk).unwrap();
        let key_set = ks.knn(queries.view(), kk).unwrap();
        let few = e.knn(queries.slice(s![..16, ..]), keys.view(), kk).unwrap();
        assert_eq!(one_shot, key_set, "d={d}: one-shot vs key set kNN");
        assert_eq!(
            one_shot.indices.slice(s![..16, ..]),
            few.indices,
            "d={d}: kNN indices"
        );
        assert_eq!(
            one_shot.distances.slice(s![..16, ..]),
            few.distances,
            "d={d}: kNN distances"
        );
    }
}

/// The GPU stages keys in chunks of 16 and pads a stage's last chunk with
/// keys at +∞: key counts on either side of a chunk and of a 256-key
/// stage, windows shorter than a chunk and key slices that start inside
/// one give the reference for every profile, so for every weight form
/// (the gaussian by pre-scaled coordinates, the laplacian, the plain
/// profiles). Row states give the log-sum too, far from the keys (a
/// large row maximum) included.
#[test]
fn gpu_padded_chunks_match_the_reference() {
    let shapes = [
        (5, 15, 3, 4),
        (6, 16, 3, 4),
        (7, 17, 3, 2),
        (3, 255, 3, 1),
        (4, 257, 3, 4),
        (9, 31, 1, 3),
        (2, 33, 8, 1),
    ];
    let short = TileLimits {
        key_rows: Some(40),
        dispatch_keys: Some(5),
        key_splits: Some(3),
        ..TileLimits::default()
    };
    let mut es: Vec<(&str, Engine)> = Vec::new();
    if let Some(g) = gpu_engine(TileLimits::default()) {
        es.push(("gpu", g));
    }
    if let Some(g) = gpu_engine(short) {
        es.push(("gpu windows of 5, 3 slices", g));
    }
    for (name, e) in &es {
        check_all(e, name, &shapes);
    }
    // Log-sums of row states: queries near the keys and 3 away from them
    // (t/h² ≈ 3·10⁴: ln Σ K ≈ −1.5·10⁴).
    let mut rng = Rng::new(77);
    let keys = rng.matrix(37, 3, 0.0, 1.0);
    let values = rng.matrix(37, 2, -1.0, 1.0);
    let mut queries = rng.matrix(6, 3, 0.0, 1.0);
    queries.slice_mut(s![3.., ..]).mapv_inplace(|v| v + 3.0);
    for p in [Profile::Gaussian, Profile::Laplacian, Profile::Epanechnikov] {
        let h = if p == Profile::Epanechnikov {
            8.0
        } else {
            0.02
        };
        let k = Kernel::new(p, h).unwrap();
        let (want, _) = ref_local_mean(&k, &queries, &keys, &values);
        for (name, e) in &es {
            let st = e
                .row_states(&k, queries.view(), keys.view(), Some(values.view()), false)
                .unwrap();
            assert_close(
                &format!("{name} {p} states"),
                &st.means().values,
                &want,
                RTOL,
                ATOL,
            );
            for (i, &ls) in st.log_sum().iter().enumerate() {
                let q = queries.row(i).to_vec();
                let lw: Vec<f64> = keys
                    .rows()
                    .into_iter()
                    .map(|x| k.log_eval_pair(&q, x.as_slice().unwrap()))
                    .collect();
                let top = lw.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let want_ls = top + lw.iter().map(|w| (w - top).exp()).sum::<f64>().ln();
                assert!(
                    (ls - want_ls).abs() <= 1e-6 * want_ls.abs() + 1e-5,
                    "{name} {p} row {i}: log-sum {ls} vs {want_ls}"
                );
            }
        }
    }
}
