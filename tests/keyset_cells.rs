//! Key sets indexed by grid cell (by a k-d split from 9 to 31 coordinates) on
//! the CPU and on the GPU (sorted key tiles, each workgroup over its spans):
//! for kernels of bounded reach
//! (compact profiles, product kernels with compact blocks) a key set's
//! local means, row states, densities and class probabilities visit only
//! the cells within reach. Each is checked against the one-shot op, which
//! runs over every key (no index), within the numerics contract; the
//! index is seen in the key set's resident bytes.

mod common;

use std::sync::Arc;

use common::*;
use locus::{
    CancelToken, Device, Engine, EngineOptions, Error, Kernel, KeySet, Profile, TileLimits,
};
use ndarray::{Array1, Array2, concatenate, s};

/// Fewest keys the index is built for (`cpu/cells.rs`); the data here
/// have more.
const N: usize = 6000;

const COMPACT: [Profile; 5] = [
    Profile::Epanechnikov,
    Profile::Uniform,
    Profile::Triangular,
    Profile::Biweight,
    Profile::Cosine,
];

/// `n` keys in `d` coordinates: clumps in [0, 10)^d, and a few outliers
/// far away.
fn keys(n: usize, d: usize, seed: u64) -> Array2<f32> {
    let mut rng = Rng::new(seed);
    let centres = rng.matrix(5, d, 0.0, 10.0);
    let mut x = Array2::from_shape_fn((n, d), |(i, k)| {
        centres[[i % 5, k]] + 1.5 * (rng.uniform() - 0.5) + 0.6 * (rng.uniform() - 0.5)
    });
    for (i, far) in [(7usize, 1e4f32), (n / 2, -3e3), (n - 1, 1e6)] {
        x.row_mut(i).fill(far);
    }
    x
}

/// Queries: near the keys, between the clumps, outside the data, and on
/// the far outliers.
fn queries(x: &Array2<f32>, m: usize, seed: u64) -> Array2<f32> {
    let (n, d) = x.dim();
    let mut rng = Rng::new(seed);
    let mut q = Array2::from_shape_fn((m, d), |(i, k)| match i % 4 {
        0 | 1 => x[[(i * 37) % n, k]] + 0.3 * (rng.uniform() - 0.5),
        2 => 12.0 * rng.uniform() - 1.0,
        _ => -50.0 + 200.0 * rng.uniform(),
    });
    if m > 5 {
        q.row_mut(3).fill(1e4);
        q.row_mut(5).fill(1e6 + 0.01);
    }
    q
}

fn values(n: usize, q: usize, seed: u64) -> Array2<f32> {
    Rng::new(seed).matrix(n, q, -2.0, 3.0)
}

fn set(e: &Engine, x: &Array2<f32>, y: &Array2<f32>) -> KeySet {
    e.prepare(x.view())
        .values(y.view())
        .build()
        .expect("key set")
}

/// The one-shot local mean (every key visited), in f64 for `assert_close`.
fn brute_mean(
    e: &Engine,
    k: &Kernel,
    q: &Array2<f32>,
    x: &Array2<f32>,
    y: &Array2<f32>,
) -> (Array2<f64>, usize) {
    let r = e
        .local_mean(k, q.view(), x.view(), y.view())
        .expect("one-shot local mean");
    (r.values.mapv(f64::from), r.empty_rows)
}

/// The key set's local mean equals the one-shot op's within the contract
/// (1e-4 relative + 1e-5 absolute), with the same empty rows.
fn check_mean(
    what: &str,
    ks: &KeySet,
    k: &Kernel,
    q: &Array2<f32>,
    x: &Array2<f32>,
    y: &Array2<f32>,
) {
    check_mean_against(cpu(), what, ks, k, (q, x, y));
}

/// [`check_mean`] against `brute`'s one-shot op.
fn check_mean_against(
    brute: &Engine,
    what: &str,
    ks: &KeySet,
    k: &Kernel,
    (q, x, y): (&Array2<f32>, &Array2<f32>, &Array2<f32>),
) {
    let (want, want_empty) = brute_mean(brute, k, q, x, y);
    let got = ks.local_mean(k, q.view()).expect("key set local mean");
    assert_close(what, &got.values, &want, 1e-4, 1e-5);
    assert_eq!(got.empty_rows, want_empty, "{what}: empty rows");
    assert!(
        want_empty > 0,
        "{what}: the queries should include empty neighbourhoods"
    );
    assert!(
        want_empty < q.nrows(),
        "{what}: the queries should include non-empty neighbourhoods"
    );
}

#[test]
fn every_compact_profile_in_every_dimension_matches_the_one_shot_op() {
    let e = cpu();
    // Up to 8 coordinates by grid cell, beyond by a k-d split.
    for (d, h) in [
        (1usize, 0.05f32),
        (2, 0.3),
        (3, 0.5),
        (5, 0.9),
        (9, 2.0),
        (16, 2.8),
        (31, 4.0),
    ] {
        let x = keys(N + 17 * d, d, d as u64);
        let y = values(x.nrows(), 3, 11);
        let q = queries(&x, 203, 5 + d as u64);
        let ks = set(e, &x, &y);
        let base = ks.resident_bytes();
        for p in COMPACT {
            let k = Kernel::new(p, h).unwrap();
            check_mean(&format!("{p:?} d={d}"), &ks, &k, &q, &x, &y);
        }
        assert!(ks.resident_bytes() > base, "d={d}: no index was built");
    }
}

#[test]
fn product_kernels_with_compact_and_gaussian_blocks_match() {
    let e = cpu();
    let x = keys(N, 3, 21);
    let y = values(N, 2, 22);
    let q = queries(&x, 151, 23);
    let ks = set(e, &x, &y);
    let kernels = [
        Kernel::product([(2, Profile::Uniform, 0.4), (1, Profile::Gaussian, 0.7)]).unwrap(),
        Kernel::product([(1, Profile::Gaussian, 0.5), (2, Profile::Epanechnikov, 0.6)]).unwrap(),
        Kernel::product([(1, Profile::Biweight, 0.3), (2, Profile::Triangular, 0.8)]).unwrap(),
    ];
    for (i, k) in kernels.iter().enumerate() {
        check_mean(&format!("product {i}"), &ks, k, &q, &x, &y);
    }
    // In 12 coordinates (a k-d split): a compact block of 8 and a
    // gaussian one of 4, whose coordinates have no reach.
    let x12 = keys(N, 12, 24);
    let y12 = values(N, 2, 25);
    let q12 = queries(&x12, 151, 26);
    let ks12 = set(e, &x12, &y12);
    let base12 = ks12.resident_bytes();
    let k =
        Kernel::product([(8, Profile::Epanechnikov, 2.2), (4, Profile::Gaussian, 0.9)]).unwrap();
    check_mean("product d=12", &ks12, &k, &q12, &x12, &y12);
    assert!(ks12.resident_bytes() > base12, "d=12: no index was built");
    // Blocks of one bandwidth have the reach of a radial kernel of that
    // bandwidth, coordinate by coordinate, and share its index; but a key
    // within reach of each block may lie farther than h over all
    // coordinates. A radial request first (it builds the index), then the
    // product's: 600 keys at (0.9, 0.9, 0, …), a leaf of their own (the
    // others moved 3 away), are within 1 of the query in each block, 1.27
    // away in all.
    let mut near = keys(N, 9, 27) + 3.0;
    for (i, mut row) in near.rows_mut().into_iter().enumerate().take(600) {
        row.fill(0.0);
        row[0] = 0.9 + i as f32 * 1e-5;
        row[1] = 0.9;
    }
    let vals = values(N, 1, 28);
    let ks9 = set(e, &near, &vals);
    let origin = Array2::<f32>::zeros((1, 9));
    let radial = Kernel::new(Profile::Uniform, 1.0).unwrap();
    let got = ks9.local_mean(&radial, origin.view()).unwrap();
    assert_eq!(
        got.empty_rows, 1,
        "no key within 1 of the origin over all coordinates"
    );
    let blocks = Kernel::product([(1, Profile::Uniform, 1.0), (8, Profile::Uniform, 1.0)]).unwrap();
    let (want, want_empty) = brute_mean(e, &blocks, &origin, &near, &vals);
    assert_eq!(want_empty, 0);
    let got = ks9.local_mean(&blocks, origin.view()).unwrap();
    assert_close("equal blocks d=9", &got.values, &want, 1e-4, 1e-5);
    // A product with no compact block has no reach to index by.
    let base = ks.resident_bytes();
    let k = Kernel::product([(2, Profile::Gaussian, 0.4), (1, Profile::Laplacian, 0.7)]).unwrap();
    let (want, _) = brute_mean(e, &k, &q, &x, &y);
    assert_close(
        "unbounded product",
        &ks.local_mean(&k, q.view()).unwrap().values,
        &want,
        1e-4,
        1e-5,
    );
    assert_eq!(
        ks.resident_bytes(),
        base,
        "the last index stays; none is added"
    );
}

#[test]
fn densities_and_class_probabilities_go_through_the_index() {
    let e = cpu();
    let x = keys(N, 2, 31);
    let q = queries(&x, 180, 32);
    let labels = Array1::from_shape_fn(N, |j| {
        i64::from(x[[j, 0]] > 5.0) + 2 * i64::from(j % 3 == 0)
    });
    let ks = e
        .prepare(x.view())
        .labels(labels.view())
        .build()
        .expect("key set");
    let base = ks.resident_bytes();
    for p in [Profile::Epanechnikov, Profile::Uniform] {
        let k = Kernel::new(p, 0.35).unwrap();
        let got = ks.log_density(&k, q.view()).unwrap();
        let want = e.log_density(&k, q.view(), x.view(), None).unwrap();
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
            if w == f64::NEG_INFINITY {
                assert_eq!(g, w, "{p:?} row {i}: empty");
            } else {
                assert!(
                    (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                    "{p:?} row {i}: {g} vs {w}"
                );
            }
        }
        assert!(want.iter().any(|w| w.is_infinite()) && want.iter().any(|w| w.is_finite()));
        // One-hot labels (classes 0..4) as values, over every key.
        let one_hot =
            Array2::from_shape_fn((N, 4), |(j, c)| f32::from(u8::from(labels[j] == c as i64)));
        let (want, want_empty) = brute_mean(e, &k, &q, &x, &one_hot);
        let got = ks.predict_proba(&k, q.view()).unwrap();
        assert_close(&format!("{p:?} proba"), &got.values, &want, 1e-4, 1e-5);
        assert_eq!(got.empty_rows, want_empty);
    }
    assert!(ks.resident_bytes() > base, "no index was built");
}

#[test]
fn row_states_of_two_indexed_halves_merge_into_the_whole() {
    let e = cpu();
    let x = keys(2 * N, 2, 41);
    let y = values(2 * N, 2, 42);
    let q = queries(&x, 160, 43);
    let k = Kernel::new(Profile::Biweight, 0.4).unwrap();
    let halves = [s![..N, ..], s![N.., ..]];
    let mut merged = None;
    for h in halves {
        let (xh, yh) = (x.slice(h).to_owned(), y.slice(h).to_owned());
        let ks = set(e, &xh, &yh);
        let base = ks.resident_bytes();
        let st = ks.row_states(&k, q.view()).unwrap();
        assert!(ks.resident_bytes() > base, "no index was built");
        let want = e
            .row_states(&k, q.view(), xh.view(), Some(yh.view()), false)
            .unwrap();
        assert_states_close(&st, &want);
        match &mut merged {
            None => merged = Some(st),
            Some(m) => m.merge(&st).unwrap(),
        }
    }
    let whole = e
        .row_states(&k, q.view(), x.view(), Some(y.view()), false)
        .unwrap();
    assert_states_close(&merged.unwrap(), &whole);
}

/// Same total weight `e^m·s` and weighted sums `e^m·u`, and the same
/// empty rows (`m = −inf`, `s = 0`, `u = 0`).
fn assert_states_close(got: &locus::RowStates, want: &locus::RowStates) {
    for i in 0..want.rows() {
        let (gm, wm) = (got.max_log_weight[i], want.max_log_weight[i]);
        if want.sum[i] == 0.0 {
            assert_eq!((gm, got.sum[i]), (wm, 0.0), "row {i}: empty");
            assert!(got.weighted.row(i).iter().all(|&u| u == 0.0));
            continue;
        }
        let (gs, ws) = (
            f64::from(gm).exp() * got.sum[i],
            f64::from(wm).exp() * want.sum[i],
        );
        assert!((gs - ws).abs() <= 1e-4 * ws, "row {i}: sum {gs} vs {ws}");
        for c in 0..want.weighted.ncols() {
            let g = f64::from(gm).exp() * got.weighted[[i, c]];
            let w = f64::from(wm).exp() * want.weighted[[i, c]];
            assert!(
                (g - w).abs() <= 1e-4 * (w.abs() + ws),
                "row {i} col {c}: {g} vs {w}"
            );
        }
    }
}

#[test]
fn a_new_bandwidth_replaces_the_index() {
    let e = cpu();
    let x = keys(N, 2, 51);
    let y = values(N, 2, 52);
    let q = queries(&x, 120, 53);
    let ks = set(e, &x, &y);
    let base = ks.resident_bytes();
    let (small, large) = (
        Kernel::new(Profile::Uniform, 0.2).unwrap(),
        Kernel::new(Profile::Uniform, 0.9).unwrap(),
    );
    check_mean("h = 0.2", &ks, &small, &q, &x, &y);
    let one = ks.resident_bytes();
    assert!(one > base);
    for (i, k) in [large, small, large].iter().enumerate() {
        check_mean(&format!("change {i}"), &ks, k, &q, &x, &y);
        assert_eq!(ks.resident_bytes(), one, "change {i}: one index at a time");
    }
    // Leave-one-out row states run over every key, as before.
    let loo = ks.engine().clone();
    let got = loo
        .row_states(&small, x.view(), x.view(), Some(y.view()), true)
        .unwrap();
    assert_eq!(got.rows(), N);
    assert_eq!(ks.resident_bytes(), one);
}

#[test]
fn concurrent_requests_with_two_bandwidths_share_the_key_set() {
    let e = cpu();
    let x = Arc::new(keys(N, 2, 61));
    let y = Arc::new(values(N, 2, 62));
    let q = Arc::new(queries(&x, 100, 63));
    let ks = set(e, &x, &y);
    let kernels = [
        Kernel::new(Profile::Uniform, 0.25).unwrap(),
        Kernel::new(Profile::Epanechnikov, 0.6).unwrap(),
    ];
    let wants: Vec<_> = kernels
        .iter()
        .map(|k| brute_mean(e, k, &q, &x, &y))
        .collect();
    std::thread::scope(|sc| {
        for t in 0..4 {
            let (ks, q, kernels, wants) = (&ks, &q, &kernels, &wants);
            sc.spawn(move || {
                for i in 0..6 {
                    let j = (t + i) % 2;
                    let got = ks.local_mean(&kernels[j], q.view()).unwrap();
                    assert_close(
                        &format!("thread {t} call {i}"),
                        &got.values,
                        &wants[j].0,
                        1e-4,
                        1e-5,
                    );
                    assert_eq!(got.empty_rows, wants[j].1);
                }
            });
        }
    });
    // Whatever request came last left its index, and only one.
    let _ = ks.local_mean(&kernels[0], q.view()).unwrap();
    let one = ks.resident_bytes();
    let _ = ks.local_mean(&kernels[1], q.view()).unwrap();
    assert_eq!(ks.resident_bytes(), one);
}

#[test]
fn without_memory_for_the_index_the_key_set_answers_over_every_key() {
    let x = keys(N, 2, 71);
    let y = values(N, 2, 72);
    let q = queries(&x, 90, 73);
    let k = Kernel::new(Profile::Uniform, 0.3).unwrap();
    // Room for the key set and a request, not for a sorted copy beside it.
    let mut o = EngineOptions::new(Device::Cpu);
    o.memory_limit = Some(200_000);
    let e = Engine::with_options(o).unwrap();
    let ks = set(&e, &x, &y);
    let base = ks.resident_bytes();
    assert!(base < 150_000, "key set of {base} bytes");
    check_mean("limited", &ks, &k, &q, &x, &y);
    assert_eq!(ks.resident_bytes(), base, "the index cannot have fitted");
    // The index (a copy of the keys and values, 12 bytes a key of cells)
    // is built when it takes at most half of the memory free.
    let index = base + 12 * N as u64;
    for (limit, built) in [
        (base + 2 * index - 4096, false),
        (base + 2 * index + 8192, true),
    ] {
        let mut o = EngineOptions::new(Device::Cpu);
        o.memory_limit = Some(limit);
        let e = Engine::with_options(o).unwrap();
        let ks = set(&e, &x, &y);
        check_mean(&format!("limit {limit}"), &ks, &k, &q, &x, &y);
        assert_eq!(ks.resident_bytes() > base, built, "limit {limit}");
    }
}

#[test]
fn a_cancelled_request_over_the_index_fails_and_the_next_succeeds() {
    let e = cpu();
    let x = keys(N, 2, 81);
    let y = values(N, 2, 82);
    let q = queries(&x, 300, 83);
    let k = Kernel::new(Profile::Uniform, 0.3).unwrap();
    let ks = set(e, &x, &y);
    let token = CancelToken::new();
    token.cancel();
    let r = token.run(|| ks.local_mean(&k, q.view()));
    assert!(matches!(r, Err(Error::Cancelled { .. })), "{r:?}");
    check_mean("after the cancelled one", &ks, &k, &q, &x, &y);
    // Duplicated queries come back in their own rows.
    let qq = concatenate![ndarray::Axis(0), q, q];
    let got = ks.local_mean(&k, qq.view()).unwrap();
    let (want, _) = brute_mean(e, &k, &q, &x, &y);
    assert_close(
        "second copy",
        &got.values.slice(s![q.nrows().., ..]).to_owned(),
        &want,
        1e-4,
        1e-5,
    );
}

#[test]
fn a_few_queries_split_the_keys_within_reach() {
    let e = cpu();
    let x = keys(4 * N, 2, 91);
    let y = values(4 * N, 2, 92);
    let k = Kernel::new(Profile::Epanechnikov, 3.0).unwrap();
    let ks = set(e, &x, &y);
    for rows in [1usize, 2, 4] {
        let q = queries(&x, rows, 93).mapv(|v| v.clamp(0.0, 10.0));
        let (want, want_empty) = brute_mean(e, &k, &q, &x, &y);
        let got = ks.local_mean(&k, q.view()).unwrap();
        assert_close(&format!("{rows} rows"), &got.values, &want, 1e-4, 1e-5);
        assert_eq!(got.empty_rows, want_empty);
        assert!(want_empty < rows);
    }
}

/// GPU engines: device-sized tiles, and tiny ones (key set tiles of 700
/// keys while the index keeps one sorted tile, query tiles of 96 rows,
/// dispatch windows of 48 keys so a workgroup's spans take many windows,
/// value columns in passes of 2); none without an adapter (as `gpu()`).
fn gpu_engines() -> Vec<(&'static str, Engine)> {
    let tiny = TileLimits {
        query_rows: Some(96),
        key_rows: Some(700),
        value_cols: Some(2),
        buffer_bytes: None,
        key_splits: Some(3),
        dispatch_keys: Some(48),
    };
    [("gpu", TileLimits::default()), ("gpu tiny tiles", tiny)]
        .into_iter()
        .filter_map(|(name, limits)| Some((name, gpu_engine(limits)?)))
        .collect()
}

#[test]
fn gpu_key_sets_sweep_their_spans_and_match_the_one_shot_op() {
    for (name, e) in gpu_engines() {
        for (d, h, profiles) in [
            (1usize, 0.05f32, &COMPACT[..2]),
            (2, 0.3, &COMPACT[..]),
            (3, 0.5, &COMPACT[2..4]),
            (9, 2.0, &COMPACT[..2]),
            (16, 2.8, &COMPACT[3..]),
        ] {
            let x = keys(N + 17 * d, d, 100 + d as u64);
            let y = values(x.nrows(), 5, 12);
            let q = queries(&x, 403, 7 + d as u64);
            let ks = set(&e, &x, &y);
            let base = ks.resident_bytes();
            for &p in profiles {
                let k = Kernel::new(p, h).unwrap();
                let what = format!("{name} {p:?} d={d}");
                check_mean_against(&e, &what, &ks, &k, (&q, &x, &y));
                // The GPU's one-shot op and the CPU's agree as well.
                check_mean_against(cpu(), &what, &ks, &k, (&q, &x, &y));
            }
            assert!(
                ks.resident_bytes() > base,
                "{name} d={d}: no index was built"
            );
        }
    }
}

#[test]
fn gpu_key_sets_give_row_states_densities_and_products_through_the_index() {
    for (name, e) in gpu_engines() {
        let x = keys(2 * N, 2, 131);
        let y = values(2 * N, 3, 132);
        // Many queries: several query tiles of sorted rows, duplicates.
        let q0 = queries(&x, 1500, 133);
        let q = concatenate![ndarray::Axis(0), q0, q0.slice(s![..200, ..])];
        let ks = set(&e, &x, &y);
        let base = ks.resident_bytes();
        let k = Kernel::new(Profile::Biweight, 0.4).unwrap();
        let st = ks.row_states(&k, q.view()).unwrap();
        let want = e
            .row_states(&k, q.view(), x.view(), Some(y.view()), false)
            .unwrap();
        assert_states_close(&st, &want);
        assert!(ks.resident_bytes() > base, "{name}: no index was built");
        // Row sums only (no values bound).
        let got = ks.log_density(&k, q.view()).unwrap();
        let want = cpu().log_density(&k, q.view(), x.view(), None).unwrap();
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
            if w == f64::NEG_INFINITY {
                assert_eq!(g, w, "{name} row {i}: empty");
            } else {
                assert!(
                    (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                    "{name} row {i}: {g} vs {w}"
                );
            }
        }
        // Leave-one-out keeps every key, in the keys' own order.
        let loo = e
            .row_states(&k, x.view(), x.view(), Some(y.view()), true)
            .unwrap();
        let cpu_loo = cpu()
            .row_states(&k, x.view(), x.view(), Some(y.view()), true)
            .unwrap();
        assert_states_close(&loo, &cpu_loo);
        // Product kernels: compact blocks, and a compact block beside a
        // gaussian one (whose coordinates have no reach), d = 3 and 12.
        let x3 = keys(N, 3, 134);
        let q3 = queries(&x3, 301, 135);
        let ks3 = set(&e, &x3, &y.slice(s![..N, ..]).to_owned());
        for k in [
            Kernel::product([(1, Profile::Biweight, 0.3), (2, Profile::Triangular, 0.8)]).unwrap(),
            Kernel::product([(2, Profile::Uniform, 0.4), (1, Profile::Gaussian, 0.7)]).unwrap(),
        ] {
            let y3 = y.slice(s![..N, ..]).to_owned();
            check_mean_against(&e, &format!("{name} {k:?}"), &ks3, &k, (&q3, &x3, &y3));
        }
        let x12 = keys(N, 12, 136);
        let y12 = values(N, 2, 137);
        let q12 = queries(&x12, 151, 138);
        let ks12 = set(&e, &x12, &y12);
        let k = Kernel::product([(8, Profile::Epanechnikov, 2.2), (4, Profile::Gaussian, 0.9)])
            .unwrap();
        check_mean_against(
            &e,
            &format!("{name} product d=12"),
            &ks12,
            &k,
            (&q12, &x12, &y12),
        );
    }
}

#[test]
fn gpu_key_sets_whose_sorted_tile_would_not_fit_a_binding_sweep_every_key() {
    // Bindings of 64 kB: the set's tiles fit, one sorted tile of its 6000
    // keys in 3 coordinates (72 kB) would not.
    let limits = TileLimits {
        buffer_bytes: Some(64 << 10),
        ..TileLimits::default()
    };
    let Some(e) = gpu_engine(limits) else { return };
    let x = keys(N, 3, 141);
    let y = values(N, 2, 142);
    let q = queries(&x, 200, 143);
    let ks = set(&e, &x, &y);
    let base = ks.resident_bytes();
    let k = Kernel::new(Profile::Epanechnikov, 0.5).unwrap();
    check_mean_against(cpu(), "small bindings", &ks, &k, (&q, &x, &y));
    assert_eq!(
        ks.resident_bytes(),
        base,
        "no index: its tile cannot be bound"
    );
    // A one-shot call never builds one.
    let got = e.local_mean(&k, q.view(), x.view(), y.view()).unwrap();
    assert_eq!(got.values.nrows(), q.nrows());
}

/// A radial gaussian or laplacian over the index: keys beyond the
/// truncated reach weigh under 10⁻⁹ of any row the index answers; rows
/// whose nearest key lies farther (outliers, queries far outside) go over
/// every key. Same results as the one-shot op within the contract, on
/// both backends.
#[test]
fn exponential_key_sets_truncate_where_far_keys_weigh_nothing() {
    let mut engines = vec![("cpu", Engine::cpu())];
    engines.extend(gpu_engines());
    let cases = [
        (Profile::Gaussian, 2usize, 0.08f32),
        (Profile::Gaussian, 3, 0.15),
        (Profile::Gaussian, 12, 0.9),
        (Profile::Laplacian, 2, 0.02),
        (Profile::Laplacian, 9, 0.1),
    ];
    for (name, e) in engines {
        for (p, d, h) in cases {
            // Keys spread far wider than the reach (≈ 10 h): clumps and
            // outliers, queries near them, between them and far outside.
            let x = keys(N, d, 150 + d as u64);
            let y = values(N, 3, 151);
            let q = queries(&x, 301, 152 + d as u64);
            let ks = set(&e, &x, &y);
            let base = ks.resident_bytes();
            let k = Kernel::new(p, h).unwrap();
            let what = format!("{name} {p:?} d={d}");
            let (want, want_empty) = brute_mean(&e, &k, &q, &x, &y);
            let got = ks.local_mean(&k, q.view()).unwrap();
            // The GPU measures a far query's distances in f32 with its
            // coordinates pre-scaled by 1/h: at hundreds of bandwidths from
            // every key its weights carry rounding of order 10⁻⁵ whichever
            // keys it sweeps (the one-shot op's error against f64 too).
            let atol = if name == "cpu" { 1e-5 } else { 1e-4 };
            assert_close(&what, &got.values, &want, 1e-4, atol);
            assert_eq!((got.empty_rows, want_empty), (0, 0), "{what}");
            assert!(ks.resident_bytes() > base, "{what}: no index was built");
            let st = ks.row_states(&k, q.view()).unwrap();
            let want = e
                .row_states(&k, q.view(), x.view(), Some(y.view()), false)
                .unwrap();
            assert_states_close(&st, &want);
            let got = ks.log_density(&k, q.view()).unwrap();
            let want = cpu().log_density(&k, q.view(), x.view(), None).unwrap();
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                    "{what} row {i}: {g} vs {w}"
                );
            }
        }
    }
}

/// A product kernel whose compact blocks' bandwidths differ by 5000×: the
/// grid leaves the wide block's coordinates ungridded (with cells of the
/// narrow reach on every axis, one query took 16 s), and the results stay
/// the one-shot op's.
#[test]
fn product_kernels_of_unlike_bandwidths_index_by_the_narrow_block() {
    let mut rng = Rng::new(161);
    let x = Array2::from_shape_fn((N, 3), |(_, k)| {
        let span: f32 = if k == 0 { 10.0 } else { 20.0 };
        span * rng.uniform()
    });
    let y = values(N, 2, 162);
    // Queries on keys (the narrow block then holds a neighbour) and beside.
    let q = Array2::from_shape_fn((40, 3), |(i, k)| {
        x[[(i * 131) % N, k]] + if i % 2 == 0 { 0.0 } else { 3e-4 }
    });
    let k = Kernel::product([(1, Profile::Uniform, 1e-3), (2, Profile::Biweight, 5.0)]).unwrap();
    let mut engines = vec![("cpu", Engine::cpu())];
    engines.extend(gpu_engines());
    for (name, e) in engines {
        let ks = set(&e, &x, &y);
        let base = ks.resident_bytes();
        let (want, want_empty) = brute_mean(&e, &k, &q, &x, &y);
        let got = ks.local_mean(&k, q.view()).unwrap();
        assert_close(name, &got.values, &want, 1e-4, 1e-5);
        assert_eq!(got.empty_rows, want_empty, "{name}");
        assert!(want_empty < q.nrows(), "{name}: some rows have neighbours");
        assert!(ks.resident_bytes() > base, "{name}: no index was built");
    }
}
