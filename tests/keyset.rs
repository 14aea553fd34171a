//! Key sets: parity with the engine ops on both backends (device-sized and
//! forced tiny GPU tiles), concurrent callers with and without batching,
//! per-request validation, the memory limit, and freeing on drop.

mod common;

use std::time::Duration;

use common::*;
use locus::{
    Batching, Device, EmptyFallback, Engine, EngineOptions, Error, Kernel, KeySet, KeySetOptions,
    Profile, TileLimits,
};
use ndarray::{Array1, Array2, s};

/// Tiles that are multiples of nothing: many key tiles, value-column passes
/// and query tiles on small data.
const TINY: TileLimits = TileLimits {
    query_rows: Some(29),
    key_rows: Some(173),
    value_cols: Some(2),
    buffer_bytes: None,
    key_splits: Some(3),
    dispatch_keys: Some(61),
};

fn engines() -> Vec<(&'static str, Engine)> {
    let mut v = vec![("cpu", cpu().clone())];
    if let Some(g) = gpu() {
        v.push(("gpu", g.clone()));
    }
    if let Some(g) = gpu_engine(TINY) {
        v.push(("gpu-tiny-tiles", g));
    }
    v
}

/// An engine like `common::gpu_engine`, with a memory limit.
fn limited_engine(device: Device, limit: u64) -> Option<Engine> {
    let mut o = EngineOptions::new(device);
    o.memory_limit = Some(limit);
    o.output_sentinel = Some(SENTINEL);
    match Engine::with_options(o) {
        Ok(e) => Some(e),
        Err(Error::NoAdapter { .. }) if std::env::var("CI").as_deref() != Ok("true") => {
            eprintln!("SKIPPED: no GPU adapter (install mesa-vulkan-drivers); GPU checks not run");
            None
        }
        Err(e) => panic!("engine required but unavailable: {e}"),
    }
}

struct Data {
    keys: Array2<f32>,
    values: Array2<f32>,
    labels: Array1<i64>,
}

fn data(n: usize, d: usize, q: usize, classes: i64, seed: u64) -> Data {
    let mut rng = Rng::new(seed);
    let keys = rng.matrix(n, d, 0.0, 1.0);
    let values = rng.matrix(n, q, -2.0, 3.0);
    // Labels follow the first coordinate, with some noise.
    let labels = Array1::from_shape_fn(n, |j| {
        let c = (keys[[j, 0]] * classes as f32) as i64;
        if rng.uniform() < 0.1 {
            (c + 1) % classes
        } else {
            c.min(classes - 1)
        }
    });
    Data {
        keys,
        values,
        labels,
    }
}

fn prepare(e: &Engine, x: &Data, options: KeySetOptions) -> KeySet {
    e.prepare(x.keys.view())
        .values(x.values.view())
        .labels(x.labels.view())
        .options(options)
        .build()
        .expect("key set")
}

/// `got` matches the engine's `want` to f32 accumulation-order noise.
#[track_caller]
fn assert_same(what: &str, got: &Array2<f32>, want: &Array2<f32>) {
    assert_close(what, got, &want.mapv(f64::from), 1e-5, 1e-6);
}

#[test]
fn key_set_ops_match_engine_ops_on_every_backend() {
    let x = data(1301, 3, 3, 4, 11);
    let mut rng = Rng::new(12);
    let queries = rng.matrix(97, 3, -0.1, 1.1);
    for (name, e) in engines() {
        let ks = prepare(&e, &x, KeySetOptions::default());
        assert_eq!(
            (ks.rows(), ks.dim(), ks.value_cols(), ks.classes()),
            (1301, 3, Some(3), Some(4))
        );
        for (p, h) in [
            (Profile::Gaussian, 0.3),
            (Profile::Epanechnikov, 0.2),
            (Profile::Laplacian, 0.1),
            (Profile::Biweight, 0.04), // some queries have no key in reach
        ] {
            let k = Kernel::new(p, h).unwrap();
            let what = format!("{name} {p} h={h}");
            for m in [97, 1] {
                let q = queries.slice(s![..m, ..]);
                let want = e.local_mean(&k, q, x.keys.view(), x.values.view()).unwrap();
                let got = ks.local_mean(&k, q).unwrap();
                assert_same(
                    &format!("{what} local mean M={m}"),
                    &got.values,
                    &want.values,
                );
                assert_eq!(got.empty_rows, want.empty_rows, "{what}");
                let (r, _) = ref_local_mean(&k, &q.to_owned(), &x.keys, &x.values);
                assert_close(&format!("{what} vs f64"), &got.values, &r, 1e-4, 1e-5);

                let st = ks.row_states(&k, q).unwrap().means();
                assert_same(&format!("{what} row states"), &st.values, &want.values);

                let ld = ks.log_density(&k, q).unwrap();
                let wd = e.log_density(&k, q, x.keys.view(), None).unwrap();
                for (i, (&g, &w)) in ld.iter().zip(&wd).enumerate() {
                    assert!(
                        g == w || (g - w).abs() <= 1e-5 * w.abs() + 1e-6,
                        "{what} log density [{i}]: {g} vs {w}"
                    );
                }
                let dens = ks.density(&k, q).unwrap();
                assert!(dens.iter().zip(&ld).all(|(&p, &l)| p == l.exp()));

                let clf = e
                    .fit_classifier(&k, x.keys.view(), x.labels.view(), None)
                    .unwrap();
                let wp = clf.predict_proba(q).unwrap();
                let gp = ks.predict_proba(&k, q).unwrap();
                assert_same(&format!("{what} proba"), &gp.values, &wp.values);
                let c = ks.classify(&k, q).unwrap();
                assert_same(&format!("{what} classify proba"), &c.proba, &gp.values);
                assert_eq!(c.empty_rows, wp.empty_rows, "{what}");
                assert_eq!(c.labels, clf.predict(q).unwrap().labels, "{what} labels");
            }
            if p == Profile::Biweight {
                assert!(ks.local_mean(&k, queries.view()).unwrap().empty_rows > 0);
            }
        }
        for k in [1, 7] {
            let got = ks.knn(queries.view(), k).unwrap();
            let want = e.knn(queries.view(), x.keys.view(), k).unwrap();
            assert_eq!(got.indices, want.indices, "{name} knn k={k}");
            assert_same(
                &format!("{name} knn k={k}"),
                &got.distances,
                &want.distances,
            );
        }
    }
}

#[test]
fn empty_neighbourhoods_fall_back_to_the_nearest_label_when_asked() {
    let x = data(400, 2, 1, 3, 15);
    let q = Rng::new(16).matrix(40, 2, -0.5, 1.5);
    let k = Kernel::new(Profile::Uniform, 0.05).unwrap();
    let mut all = vec![("cpu", cpu().clone())];
    if let Some(g) = gpu() {
        all.push(("gpu", g.clone()));
    }
    for (name, e) in all {
        let ks = prepare(
            &e,
            &x,
            KeySetOptions {
                empty_fallback: EmptyFallback::NearestNeighbour,
                ..KeySetOptions::default()
            },
        );
        let want = e
            .fit_classifier(&k, x.keys.view(), x.labels.view(), None)
            .unwrap()
            .with_fallback(EmptyFallback::NearestNeighbour)
            .predict(q.view())
            .unwrap();
        let got = ks.classify(&k, q.view()).unwrap();
        assert!(got.empty_rows > 0, "{name}: no empty neighbourhood tested");
        assert_eq!(got.empty_rows, want.empty_rows, "{name}");
        assert_eq!(got.labels, want.labels, "{name}");
        assert!(got.labels.iter().all(|&l| l >= 0), "{name}");
    }
}

#[test]
fn keys_beyond_one_binding_are_tiled() {
    // 40 KB bindings: 3000 keys × 4 floats need several key tiles.
    let limits = TileLimits {
        buffer_bytes: Some(40 << 10),
        ..TileLimits::default()
    };
    let Some(g) = gpu_engine(limits) else { return };
    let x = data(3000, 4, 2, 3, 21);
    let q = Rng::new(22).matrix(50, 4, 0.0, 1.0);
    let ks = prepare(&g, &x, KeySetOptions::default());
    let k = Kernel::gaussian(0.2).unwrap();
    let got = ks.local_mean(&k, q.view()).unwrap();
    let (want, _) = ref_local_mean(&k, &q, &x.keys, &x.values);
    assert_close("tiled key set", &got.values, &want, 1e-4, 1e-5);
}

/// Work of one caller: a mix of ops, kernels and sizes, with the answers
/// the engine ops give, computed beforehand.
enum Expect {
    Mean(Kernel, Array2<f32>, Array2<f32>),
    Class(Kernel, Array2<f32>, Array1<i64>),
    Density(Kernel, Array2<f32>, Array1<f64>),
    Knn(usize, Array2<f32>, Array2<i64>),
    States(Kernel, Array2<f32>, locus::RowStates),
}

fn plan_requests(e: &Engine, x: &Data, thread: usize, count: usize) -> Vec<Expect> {
    let mut rng = Rng::new(1000 + thread as u64);
    let kernels = [
        Kernel::gaussian(0.25).unwrap(),
        Kernel::gaussian(0.4).unwrap(),
        Kernel::new(Profile::Epanechnikov, 0.3).unwrap(),
    ];
    (0..count)
        .map(|r| {
            let m = 1 + (thread * 7 + r * 3) % 19;
            let q = rng.matrix(m, x.keys.ncols(), 0.0, 1.0);
            let k = kernels[(thread + r) % kernels.len()];
            match (thread + r) % 4 {
                0 | 1 => {
                    let v = e
                        .local_mean(&k, q.view(), x.keys.view(), x.values.view())
                        .unwrap()
                        .values;
                    Expect::Mean(k, q, v)
                }
                2 => {
                    let clf = e
                        .fit_classifier(&k, x.keys.view(), x.labels.view(), None)
                        .unwrap();
                    let l = clf.predict(q.view()).unwrap().labels;
                    Expect::Class(k, q, l)
                }
                _ if r % 8 == 3 => {
                    let nb = e.knn(q.view(), x.keys.view(), 3).unwrap();
                    Expect::Knn(3, q, nb.indices)
                }
                _ if r % 2 == 0 => {
                    let st = e
                        .row_states(&k, q.view(), x.keys.view(), Some(x.values.view()), false)
                        .unwrap();
                    Expect::States(k, q, st)
                }
                _ => {
                    let d = e.log_density(&k, q.view(), x.keys.view(), None).unwrap();
                    Expect::Density(k, q, d)
                }
            }
        })
        .collect()
}

fn check(ks: &KeySet, what: &str, x: &Expect) {
    match x {
        Expect::Mean(k, q, want) => {
            let got = ks.local_mean(k, q.view()).unwrap();
            assert_same(what, &got.values, want);
        }
        Expect::Class(k, q, want) => {
            assert_eq!(&ks.classify(k, q.view()).unwrap().labels, want, "{what}");
        }
        Expect::Density(k, q, want) => {
            let got = ks.log_density(k, q.view()).unwrap();
            for (&g, &w) in got.iter().zip(want) {
                assert!((g - w).abs() <= 1e-5 * w.abs() + 1e-6, "{what}: {g} vs {w}");
            }
        }
        Expect::Knn(k, q, want) => {
            assert_eq!(&ks.knn(q.view(), *k).unwrap().indices, want, "{what}");
        }
        Expect::States(k, q, want) => {
            // Each caller's own rows of every part of the state, the
            // weighted sums included, compared as Σ K and Σ K·y.
            let got = ks.row_states(k, q.view()).unwrap();
            assert_eq!(got.rows(), q.nrows(), "{what}: rows");
            assert_eq!(got.weighted.dim(), want.weighted.dim(), "{what}: shape");
            for i in 0..q.nrows() {
                let scale = |st: &locus::RowStates| f64::from(st.max_log_weight[i]).exp();
                let (sg, sw) = (got.sum[i] * scale(&got), want.sum[i] * scale(want));
                assert!(
                    (sg - sw).abs() <= 1e-5 * sw.abs() + 1e-12,
                    "{what}: row {i} sum {sg} vs {sw}"
                );
                for c in 0..want.weighted.ncols() {
                    let (ug, uw) = (
                        got.weighted[[i, c]] * scale(&got),
                        want.weighted[[i, c]] * scale(want),
                    );
                    assert!(
                        (ug - uw).abs() <= 1e-5 * uw.abs() + 1e-6 * sw.abs() + 1e-12,
                        "{what}: row {i} weighted sum {c}: {ug} vs {uw}"
                    );
                }
            }
        }
    }
}

/// Callers on many threads, with requests of every kind at once and one
/// caller sending only bad requests: everyone gets their own answers.
fn concurrent_callers(name: &str, e: &Engine, batching: Batching, per_thread: usize) -> KeySet {
    let x = data(777, 3, 2, 3, 31);
    let threads = 8;
    let plans: Vec<Vec<Expect>> = (0..threads)
        .map(|t| plan_requests(e, &x, t, per_thread))
        .collect();
    let ks = prepare(
        e,
        &x,
        KeySetOptions {
            batching,
            ..KeySetOptions::default()
        },
    );
    let barrier = std::sync::Barrier::new(threads + 1);
    std::thread::scope(|s| {
        for (t, plan) in plans.iter().enumerate() {
            let (ks, barrier) = (ks.clone(), &barrier);
            s.spawn(move || {
                barrier.wait();
                for (r, x) in plan.iter().enumerate() {
                    check(&ks, &format!("{name} thread {t} request {r}"), x);
                }
            });
        }
        let (ks, barrier) = (&ks, &barrier);
        s.spawn(move || {
            barrier.wait();
            let k = Kernel::gaussian(0.3).unwrap();
            for r in 0..per_thread {
                let mut q = Array2::<f32>::zeros((3, 3));
                q[[1, r % 3]] = f32::NAN;
                let e = ks.local_mean(&k, q.view()).unwrap_err();
                assert!(matches!(e, Error::NonFinite { row: 1, .. }), "{e}");
                let e = ks.classify(&k, Array2::zeros((2, 5)).view()).unwrap_err();
                assert!(matches!(e, Error::DimensionMismatch { .. }), "{e}");
                let e = ks.knn(Array2::zeros((2, 3)).view(), 0).unwrap_err();
                assert!(
                    matches!(e, Error::InvalidParameter { name: "k", .. }),
                    "{e}"
                );
            }
        });
    });
    ks
}

#[test]
fn concurrent_callers_get_their_own_results() {
    let slow = Batching {
        // Long enough that requests surely meet on a busy 2-core machine.
        max_wait: Duration::from_millis(3),
        ..Batching::default()
    };
    let ks = concurrent_callers("cpu batched", cpu(), slow, 24);
    let st = ks.stats();
    assert_eq!(st.direct, 0, "{st:?}");
    assert_eq!(st.batched_requests, 8 * 24, "{st:?}");
    assert!(
        st.largest_batch > 1 && st.batches < 8 * 24,
        "no batch formed: {st:?}"
    );
    let ks = concurrent_callers("cpu unbatched", cpu(), Batching::off(), 12);
    assert_eq!(ks.stats().direct, 8 * 12);
    if let Some(g) = gpu() {
        let ks = concurrent_callers("gpu batched", g, slow, 8);
        assert_eq!(ks.stats().batched_requests, 8 * 8);
        concurrent_callers("gpu unbatched", g, Batching::off(), 4);
    }
}

#[test]
fn large_requests_skip_batching() {
    let x = data(300, 2, 1, 2, 41);
    let ks = prepare(
        cpu(),
        &x,
        KeySetOptions {
            batching: Batching {
                direct_rows: 50,
                ..Batching::default()
            },
            ..KeySetOptions::default()
        },
    );
    let k = Kernel::gaussian(0.2).unwrap();
    let q = Rng::new(42).matrix(60, 2, 0.0, 1.0);
    ks.local_mean(&k, q.view()).unwrap();
    ks.local_mean(&k, q.slice(s![..10, ..])).unwrap();
    let st = ks.stats();
    assert_eq!((st.direct, st.batched_requests), (1, 1), "{st:?}");
}

#[test]
fn each_request_is_validated() {
    let x = data(50, 3, 2, 3, 51);
    let k = Kernel::gaussian(0.5).unwrap();
    let mut all = vec![("cpu", cpu().clone())];
    if let Some(g) = gpu() {
        all.push(("gpu", g.clone()));
    }
    for (name, e) in all {
        let ks = e
            .prepare(x.keys.view())
            .options(KeySetOptions {
                max_request_rows: 10,
                ..KeySetOptions::default()
            })
            .build()
            .unwrap();
        let q = Array2::<f32>::zeros((4, 3));
        let err = ks.local_mean(&k, q.view()).unwrap_err();
        assert!(
            matches!(err, Error::InvalidParameter { name: "values", .. }),
            "{name}: {err}"
        );
        let err = ks.classify(&k, q.view()).unwrap_err();
        assert!(
            matches!(err, Error::InvalidParameter { name: "labels", .. }),
            "{name}: {err}"
        );
        let err = ks
            .log_density(&k, Array2::zeros((11, 3)).view())
            .unwrap_err();
        assert!(matches!(err, Error::TooLarge { .. }), "{name}: {err}");
        let err = ks
            .log_density(&k, Array2::zeros((0, 3)).view())
            .unwrap_err();
        assert!(matches!(err, Error::EmptyInput { .. }), "{name}: {err}");
        let err = ks.knn(q.view(), 51).unwrap_err();
        assert!(
            matches!(err, Error::InvalidParameter { name: "k", .. }),
            "{name}: {err}"
        );
        let cauchy = Kernel::new(Profile::Cauchy, 1.0).unwrap();
        let err = ks.density(&cauchy, q.view()).unwrap_err();
        assert!(matches!(err, Error::Unsupported { .. }), "{name}: {err}");
        // Densities without values work; the key set is unharmed.
        assert_eq!(ks.density(&k, q.view()).unwrap().len(), 4);
    }
    if let Some(g) = gpu() {
        let big = data(200, 2, 1, 2, 52);
        let ks = prepare(g, &big, KeySetOptions::default());
        let err = ks.knn(Array2::zeros((2, 2)).view(), 129).unwrap_err();
        assert!(matches!(err, Error::Unsupported { .. }), "{err}");
    }
    // Preparing checks keys, values and labels.
    let e = cpu();
    let mut bad = x.keys.clone();
    bad[[7, 1]] = f32::INFINITY;
    assert!(matches!(
        e.prepare(bad.view()).build().unwrap_err(),
        Error::NonFinite { row: 7, col: 1, .. }
    ));
    let short = x.values.slice(s![..49, ..]);
    assert!(matches!(
        e.prepare(x.keys.view()).values(short).build().unwrap_err(),
        Error::RowMismatch { .. }
    ));
    let mut labels = x.labels.clone();
    labels[3] = -2;
    assert!(matches!(
        e.prepare(x.keys.view())
            .labels(labels.view())
            .build()
            .unwrap_err(),
        Error::InvalidParameter { name: "labels", .. }
    ));
    assert!(matches!(
        e.prepare(x.keys.view())
            .labels(x.labels.view())
            .classes(2)
            .build()
            .unwrap_err(),
        Error::InvalidParameter { name: "labels", .. }
    ));
}

/// After a request that does not fit under the memory limit is refused,
/// the key set keeps answering correctly; a key set that does not fit is
/// refused and the engine keeps working.
fn memory_limit_then_continued_service(name: &str, device: Device, headroom: u64) {
    let x = data(1301, 3, 3, 4, 61);
    // The limit: this key set plus `headroom`.
    let probe = match limited_engine(device, u64::MAX / 2) {
        Some(e) => prepare(&e, &x, KeySetOptions::default()).resident_bytes(),
        None => return,
    };
    let Some(e) = limited_engine(device, probe + headroom) else {
        return;
    };
    let ks = prepare(&e, &x, KeySetOptions::default());
    assert_eq!(ks.resident_bytes(), probe);
    let k = Kernel::gaussian(0.3).unwrap();
    let small = Rng::new(62).matrix(20, 3, 0.0, 1.0);
    let want = ks.local_mean(&k, small.view()).unwrap();
    let huge = Rng::new(63).matrix(20_000, 3, 0.0, 1.0);
    for _ in 0..2 {
        let err = ks.local_mean(&k, huge.view()).unwrap_err();
        match err {
            Error::MemoryLimit { in_use, limit, .. } => {
                assert!(in_use <= limit, "{name}: {err}");
                assert_eq!(limit, probe + headroom);
            }
            _ => panic!("{name}: expected a memory-limit error, got {err}"),
        }
        let again = ks.local_mean(&k, small.view()).unwrap();
        assert_eq!(again.values, want.values, "{name}: service after the error");
        let (r, _) = ref_local_mean(&k, &small, &x.keys, &x.values);
        assert_close(name, &again.values, &r, 1e-4, 1e-5);
        assert!(ks.classify(&k, small.view()).is_ok());
    }
    let more = data(20_000, 3, 3, 4, 64);
    let err = e
        .prepare(more.keys.view())
        .values(more.values.view())
        .build()
        .unwrap_err();
    assert!(matches!(err, Error::MemoryLimit { .. }), "{name}: {err}");
    assert!(ks.knn(small.view(), 3).is_ok());
    let u = e.memory_usage();
    assert!(
        u.in_use <= probe + headroom && u.limit == Some(probe + headroom),
        "{u:?}"
    );
}

#[test]
fn memory_limit_is_a_typed_error_and_the_key_set_keeps_working() {
    memory_limit_then_continued_service("cpu", Device::Cpu, 100_000);
    memory_limit_then_continued_service("gpu", Device::Gpu, 256 << 10);
}

#[test]
fn dropping_the_last_clone_frees_the_key_set() {
    let x = data(2000, 4, 2, 3, 71);
    let k = Kernel::gaussian(0.3).unwrap();
    let q = Rng::new(72).matrix(9, 4, 0.0, 1.0);
    for device in [Device::Cpu, Device::Gpu] {
        let Some(e) = limited_engine(device, 1 << 30) else {
            continue;
        };
        let before = e.memory_usage().in_use;
        let ks = prepare(&e, &x, KeySetOptions::default());
        let held = ks.resident_bytes();
        assert!(held >= 2000 * (4 + 2 + 3) * 4, "{device:?}: {held}");
        assert_eq!(e.memory_usage().in_use, before + held, "{device:?}");
        let copy = ks.clone();
        let q2 = q.clone();
        let t = std::thread::spawn(move || copy.local_mean(&k, q2.view()).map(|m| m.values));
        let from_thread = t.join().unwrap().unwrap();
        assert_eq!(from_thread, ks.local_mean(&k, q.view()).unwrap().values);
        let with_queries = e.memory_usage().in_use;
        drop(ks);
        assert_eq!(e.memory_usage().in_use, with_queries - held, "{device:?}");
    }
}

/// Row states of concurrent callers with one kernel, so their requests
/// meet in batches: each caller gets its own rows of `m`, `s` and the
/// weighted sums `u`, as the engine computes them for its queries alone.
#[test]
fn batched_row_states_give_each_caller_its_own_rows() {
    let x = data(301, 3, 3, 2, 57);
    // While a request of the kind runs, a new batch waits to fill.
    let slow = Batching {
        max_wait: Duration::from_millis(200),
        concurrent_batches: 1,
        ..Batching::default()
    };
    let mut engines = vec![("cpu", cpu().clone())];
    if let Some(g) = gpu() {
        engines.push(("gpu", g.clone()));
    }
    for (name, e) in engines {
        let k = Kernel::gaussian(0.3).unwrap();
        let threads = 6;
        let plans: Vec<Vec<Expect>> = (0..threads)
            .map(|t| {
                let mut rng = Rng::new(500 + t as u64);
                (0..6)
                    .map(|r| {
                        let q = rng.matrix(1 + (t * 5 + r * 3) % 7, 3, 0.0, 1.0);
                        let st = e
                            .row_states(&k, q.view(), x.keys.view(), Some(x.values.view()), false)
                            .unwrap();
                        Expect::States(k, q, st)
                    })
                    .collect()
            })
            .collect();
        // Large requests run directly, again and again, while the small
        // ones arrive: with a request of the kind running, every new batch
        // waits to fill, so the small ones meet. Three of different sizes,
        // so that they rarely all end at once; a few attempts, as a busy
        // machine may still keep the callers apart (every attempt checks
        // every answer).
        let bigs: Vec<Array2<f32>> = [20_000, 31_000, 47_000]
            .iter()
            .map(|&r| Rng::new(r as u64).matrix(r, 3, 0.0, 1.0))
            .collect();
        let mut formed = None;
        for _attempt in 0..4 {
            let ks = prepare(
                &e,
                &x,
                KeySetOptions {
                    batching: slow,
                    ..KeySetOptions::default()
                },
            );
            let done = std::sync::atomic::AtomicBool::new(false);
            let barrier = std::sync::Barrier::new(threads + bigs.len());
            std::thread::scope(|s| {
                for big in &bigs {
                    let (ks2, barrier2, done2) = (ks.clone(), &barrier, &done);
                    s.spawn(move || {
                        barrier2.wait();
                        while !done2.load(std::sync::atomic::Ordering::Relaxed) {
                            ks2.row_states(&k, big.view()).unwrap();
                        }
                    });
                }
                let workers: Vec<_> = plans
                    .iter()
                    .enumerate()
                    .map(|(t, plan)| {
                        let (ks, barrier) = (ks.clone(), &barrier);
                        s.spawn(move || {
                            barrier.wait();
                            for (r, x) in plan.iter().enumerate() {
                                check(&ks, &format!("{name} row states thread {t} request {r}"), x);
                            }
                        })
                    })
                    .collect();
                let ok = workers.into_iter().all(|w| w.join().is_ok());
                done.store(true, std::sync::atomic::Ordering::Relaxed);
                assert!(ok, "{name}: a caller failed");
            });
            let st = ks.stats();
            formed = Some(st);
            if st.largest_batch > 1 {
                break;
            }
        }
        let st = formed.unwrap();
        assert!(
            st.largest_batch > 1,
            "{name}: no batch formed in 4 attempts: {st:?}"
        );
    }
}
