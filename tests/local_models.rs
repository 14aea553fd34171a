//! KDE, local-mode classification, kNN, leave-one-out and multi-kernel
//! local means: GPU vs CPU vs plain f64 references.

mod common;

use common::*;
use locus::{
    EmptyFallback, Engine, Error, Kernel, KnnWeights, MultiKernel, Profile, TileLimits,
    ln_normalizer,
};
use ndarray::{Array1, Array2, Axis, array, s};

fn engines() -> Vec<(&'static str, &'static Engine)> {
    let mut v = vec![("cpu", cpu())];
    if let Some(g) = gpu() {
        v.push(("gpu", g));
    }
    v
}

fn sq(a: ndarray::ArrayView1<f32>, b: ndarray::ArrayView1<f32>) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2))
        .sum()
}

/// Plain f64 density with the profile constants written out here.
fn ref_density(k: &Kernel, q: &Array2<f32>, x: &Array2<f32>, w: Option<&Array1<f32>>) -> Vec<f64> {
    let d = x.ncols();
    let h = f64::from(k.bandwidth());
    let c = ln_normalizer(k.profile(), d).unwrap().exp();
    let wsum: f64 = w.map_or(x.nrows() as f64, |w| w.iter().map(|&v| f64::from(v)).sum());
    q.rows()
        .into_iter()
        .map(|qi| {
            let s: f64 = x
                .rows()
                .into_iter()
                .enumerate()
                .map(|(j, xj)| {
                    w.map_or(1.0, |w| f64::from(w[j])) * k.profile().eval_sq(sq(qi, xj) / (h * h))
                })
                .sum();
            s / (wsum * h.powi(d as i32) * c)
        })
        .collect()
}

#[test]
fn density_matches_reference_on_both_backends() {
    for (si, &(m, n, d)) in [(57usize, 301usize, 1usize), (33, 200, 2), (20, 150, 3)]
        .iter()
        .enumerate()
    {
        let mut rng = Rng::new(300 + si as u64);
        let q = rng.matrix(m, d, 0.0, 1.0);
        let x = rng.matrix(n, d, 0.0, 1.0);
        let w = Array1::from_shape_fn(n, |_| rng.uniform() * 2.0);
        for p in Profile::ALL {
            if p == Profile::Cauchy && d > 1 {
                continue;
            }
            let k = Kernel::new(p, 0.3).unwrap();
            for weights in [None, Some(&w)] {
                let want = ref_density(&k, &q, &x, weights);
                for (name, e) in engines() {
                    let got = e
                        .density(&k, q.view(), x.view(), weights.map(|w| w.view()))
                        .unwrap();
                    for (i, (&g, &t)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            (g - t).abs() <= 1e-4 * t.abs() + 1e-9,
                            "{name} {p} d={d} weighted={}: [{i}] {g} vs {t}",
                            weights.is_some()
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn density_integrates_to_one() {
    let mut rng = Rng::new(41);
    // d = 1: every profile (cauchy has heavy tails: a wide grid and a looser bound).
    let x1 = rng.matrix(40, 1, 0.0, 1.0);
    for p in Profile::ALL {
        let h = 0.2f32;
        let (lo, hi, n) = if p == Profile::Cauchy {
            (-2000.0, 2000.0, 400_001)
        } else {
            (-3.0, 4.0, 20_001)
        };
        let dx = (hi - lo) / (n - 1) as f64;
        let grid = Array2::from_shape_fn((n, 1), |(i, _)| (lo + i as f64 * dx) as f32);
        let k = Kernel::new(p, h).unwrap();
        let dens = cpu().density(&k, grid.view(), x1.view(), None).unwrap();
        let total: f64 = dens.sum() * dx;
        let tol = if p == Profile::Cauchy { 2e-3 } else { 1e-3 };
        assert!((total - 1.0).abs() < tol, "d=1 {p}: ∫p = {total}");
    }
    // d = 2: compact profiles and the gaussian, on a 401 × 401 grid; the
    // GPU computes half of them.
    let x2 = rng.matrix(25, 2, 0.0, 1.0);
    for (pi, p) in [
        Profile::Gaussian,
        Profile::Epanechnikov,
        Profile::Uniform,
        Profile::Triangular,
        Profile::Biweight,
        Profile::Cosine,
    ]
    .into_iter()
    .enumerate()
    {
        let h = 0.25f32;
        let (lo, hi, n) = (-1.5f64, 2.5f64, 401usize);
        let dx = (hi - lo) / (n - 1) as f64;
        let grid = Array2::from_shape_fn((n * n, 2), |(i, c)| {
            let g = if c == 0 { i / n } else { i % n };
            (lo + g as f64 * dx) as f32
        });
        let k = Kernel::new(p, h).unwrap();
        let e = match gpu() {
            Some(g) if pi % 2 == 1 => g,
            _ => cpu(),
        };
        let total = e.density(&k, grid.view(), x2.view(), None).unwrap().sum() * dx * dx;
        assert!((total - 1.0).abs() < 5e-3, "d=2 {p}: ∫p = {total}");
    }
}

#[test]
fn log_density_is_finite_far_away_for_full_support_profiles() {
    let x = array![[0.0f32, 0.0], [1.0, 1.0]];
    let far = array![[1000.0f32, -1000.0]];
    for (name, e) in engines() {
        for p in [Profile::Gaussian, Profile::Laplacian] {
            let k = Kernel::new(p, 0.1).unwrap();
            let l = e.log_density(&k, far.view(), x.view(), None).unwrap()[0];
            assert!(l.is_finite() && l < -1000.0, "{name} {p}: {l}");
            assert_eq!(e.density(&k, far.view(), x.view(), None).unwrap()[0], 0.0);
            // Exact value: the nearest key dominates.
            let r2 = 1000.0f64.powi(2) * 2.0;
            let want = match p {
                Profile::Gaussian => -0.5 * r2 / 0.01,
                _ => -(r2.sqrt() / 0.1),
            } - (2.0f64).ln()
                - 2.0 * 0.1f64.ln()
                - ln_normalizer(p, 2).unwrap();
            assert!(
                (l - want).abs() < 1e-4 * want.abs(),
                "{name} {p}: {l} vs {want}"
            );
        }
        let k = Kernel::new(Profile::Epanechnikov, 0.1).unwrap();
        assert_eq!(
            e.log_density(&k, far.view(), x.view(), None).unwrap()[0],
            f64::NEG_INFINITY
        );
    }
}

fn blobs(
    rng: &mut Rng,
    per: usize,
    centres: &[(f32, f32)],
    spread: f32,
) -> (Array2<f32>, Array1<i64>) {
    let n = per * centres.len();
    let mut x = Array2::zeros((n, 2));
    let mut y = Array1::zeros(n);
    for (c, &(cx, cy)) in centres.iter().enumerate() {
        for i in 0..per {
            let r = c * per + i;
            x[[r, 0]] = cx + spread * (rng.uniform() - 0.5);
            x[[r, 1]] = cy + spread * (rng.uniform() - 0.5);
            y[r] = c as i64;
        }
    }
    (x, y)
}

#[test]
fn classification_of_separable_blobs_is_perfect() {
    let mut rng = Rng::new(77);
    let centres = [(0.0, 0.0), (5.0, 0.0), (0.0, 5.0), (5.0, 5.0)];
    let (x, y) = blobs(&mut rng, 60, &centres, 1.0);
    let (q, qy) = blobs(&mut rng, 15, &centres, 1.0);
    for (name, e) in engines() {
        for p in Profile::ALL {
            let k = Kernel::new(p, 1.0).unwrap();
            let clf = e.fit_classifier(&k, x.view(), y.view(), None).unwrap();
            assert_eq!(clf.classes(), 4);
            let pred = clf.predict(q.view()).unwrap();
            assert_eq!(pred.labels, qy, "{name} {p}");
            assert_eq!(pred.empty_rows, 0);
            let proba = clf.predict_proba(q.view()).unwrap();
            for r in proba.values.rows() {
                assert!((r.sum() - 1.0).abs() < 1e-5);
            }
        }
    }
}

#[test]
fn classification_probabilities_match_reference_and_empty_rows_fall_back() {
    let mut rng = Rng::new(78);
    let x = rng.matrix(120, 2, 0.0, 1.0);
    let y = Array1::from_shape_fn(120, |i| (i % 3) as i64);
    let mut onehot = Array2::<f32>::zeros((120, 3));
    for (i, &l) in y.iter().enumerate() {
        onehot[[i, l as usize]] = 1.0;
    }
    let q = ndarray::concatenate![
        Axis(0),
        rng.matrix(10, 2, 0.0, 1.0),
        array![[50.0f32, 50.0]]
    ];
    let k = Kernel::new(Profile::Biweight, 0.3).unwrap();
    let (want, empty) = ref_local_mean(&k, &q, &x, &onehot);
    assert_eq!(empty, 1);
    for (name, e) in engines() {
        let clf = e.fit_classifier(&k, x.view(), y.view(), Some(4)).unwrap();
        assert_eq!(clf.classes(), 4);
        let proba = clf.predict_proba(q.view()).unwrap();
        assert_close(
            &format!("{name} proba"),
            &proba.values.slice(s![.., ..3]).to_owned(),
            &want,
            1e-4,
            1e-5,
        );
        let pred = clf.predict(q.view()).unwrap();
        assert_eq!((pred.labels[10], pred.empty_rows), (-1, 1), "{name}");
        // The nearest training point of (50, 50) is the one with the largest x + y.
        let nearest = (0..120)
            .min_by(|&a, &b| {
                let da = sq(q.row(10), x.row(a));
                let db = sq(q.row(10), x.row(b));
                da.partial_cmp(&db).unwrap()
            })
            .unwrap();
        let pred = clf
            .with_fallback(EmptyFallback::NearestNeighbour)
            .predict(q.view())
            .unwrap();
        assert_eq!(pred.labels[10], y[nearest], "{name}");
        assert_eq!(pred.empty_rows, 1);
    }
}

/// Checks a kNN answer against brute force in f64: the distances agree,
/// each reported distance is the true one, and the sets differ only where
/// distances tie within rounding.
fn check_knn(what: &str, q: &Array2<f32>, x: &Array2<f32>, k: usize, got: &locus::Neighbours) {
    for i in 0..q.nrows() {
        let mut all: Vec<(f64, usize)> = (0..x.nrows())
            .map(|j| (sq(q.row(i), x.row(j)).sqrt(), j))
            .collect();
        all.sort_by(|a, b| a.partial_cmp(b).unwrap());
        for (c, &(dw, jw)) in all.iter().enumerate().take(k) {
            let dg = f64::from(got.distances[[i, c]]);
            let jg = got.indices[[i, c]] as usize;
            assert!(
                (dg - dw).abs() <= 1e-5 * dw + 1e-6,
                "{what}: row {i} rank {c}: {dg} vs {dw}"
            );
            let true_dg = sq(q.row(i), x.row(jg)).sqrt();
            assert!(
                (true_dg - dg).abs() <= 1e-5 * dw + 1e-6,
                "{what}: row {i} rank {c}: index {jg}"
            );
            if jg != jw {
                assert!(
                    (true_dg - dw).abs() <= 1e-5 * dw + 1e-6,
                    "{what}: row {i} rank {c}: {jg} vs {jw}"
                );
            }
        }
    }
}

#[test]
fn knn_equals_brute_force_sort() {
    for (si, &(m, n, d, k)) in [
        (1usize, 1usize, 1usize, 1usize),
        (77, 301, 3, 5),
        (20, 500, 16, 16),
        (9, 40, 2, 40),
        // From d = 24 and 32 queries the CPU ranks by inner products.
        (37, 301, 64, 7),
        (33, 127, 200, 127),
    ]
    .iter()
    .enumerate()
    {
        let mut rng = Rng::new(500 + si as u64);
        let q = rng.matrix(m, d, 0.0, 1.0);
        let x = rng.matrix(n, d, 0.0, 1.0);
        for (name, e) in engines() {
            let got = e.knn(q.view(), x.view(), k).unwrap();
            check_knn(&format!("{name} M={m} N={n} d={d} k={k}"), &q, &x, k, &got);
        }
    }
    // Forced tiny tiles on the GPU: the running top-k crosses key tiles.
    let limits = TileLimits {
        query_rows: Some(7),
        key_rows: Some(23),
        ..TileLimits::default()
    };
    if let Some(g) = gpu_engine(limits) {
        let mut rng = Rng::new(9);
        let q = rng.matrix(30, 3, 0.0, 1.0);
        let x = rng.matrix(200, 3, 0.0, 1.0);
        check_knn(
            "gpu tiny tiles",
            &q,
            &x,
            8,
            &g.knn(q.view(), x.view(), 8).unwrap(),
        );
    }
}

/// A query too far from the keys' mean for the inner-product filter's
/// bound goes over every key directly, on the one-shot blocked path too
/// (whose keys have no transposed copy: it measures them from their rows).
#[test]
fn knn_of_queries_far_from_the_keys_is_exact() {
    let (m, n, d, k) = (40, 700, 32, 5);
    let mut rng = Rng::new(77);
    let x = rng.matrix(n, d, -1e16, 1e16);
    let mut q = rng.matrix(m, d, -1e16, 1e16);
    for i in [0, 17, m - 1] {
        let far = rng.matrix(1, d, 1e17, 2e17);
        q.row_mut(i).assign(&far.row(0));
    }
    for (name, e) in engines() {
        let got = e.knn(q.view(), x.view(), k).unwrap();
        check_knn(&format!("{name} far queries"), &q, &x, k, &got);
        let set = e.prepare(x.view()).build().unwrap();
        let kept = set.knn(q.view(), k).unwrap();
        assert_eq!(kept.indices, got.indices, "{name} key set");
    }
}

#[test]
fn knn_ties_go_to_the_lower_index() {
    // Keys 0..4 all at distance 1 from the query; key 5 at distance 0.5.
    let x = array![
        [1.0f32, 0.0],
        [0.0, 1.0],
        [-1.0, 0.0],
        [0.0, -1.0],
        [1.0, 0.0],
        [0.5, 0.0]
    ];
    let q = array![[0.0f32, 0.0]];
    for (name, e) in engines() {
        let nb = e.knn(q.view(), x.view(), 4).unwrap();
        assert_eq!(nb.indices.row(0).to_vec(), vec![5, 0, 1, 2], "{name}");
        assert_eq!(
            nb.distances.row(0).to_vec(),
            vec![0.5, 1.0, 1.0, 1.0],
            "{name}"
        );
    }
}

/// kNN split across keys on the GPU (forced: a software adapter never
/// splits by itself): many slices, windows and key tiles, `k` near and
/// above a slice's size, `k = N`, ties everywhere, dimensions off the
/// vec4 groups and one too wide to measure four keys at once. The lists
/// equal the CPU's (indices and order; distances but for the square
/// root), as the unsplit path's do.
#[test]
fn gpu_knn_split_across_keys_equals_the_cpu_lists() {
    let cases = [
        // (splits, window, key tile, query tile)
        (Some(7), Some(100), Some(333), Some(20)),
        (Some(8), Some(61), None, None),
        (Some(64), None, Some(250), None),
        (Some(1), Some(9), Some(40), Some(11)),
    ];
    let mut rng = Rng::new(4242);
    // Eleven distinct keys on an integer grid repeated: equal distances
    // between distinct keys and between copies; queries on keys and off.
    let tied = |n: usize, d: usize, rng: &mut Rng| {
        let base = rng.matrix(11, d, 0.0, 3.0).mapv(f32::round);
        Array2::from_shape_fn((n, d), |(j, c)| base[[j * 7 % 11, c]])
    };
    for (ci, &(key_splits, dispatch_keys, key_rows, query_rows)) in cases.iter().enumerate() {
        let limits = TileLimits {
            key_splits,
            dispatch_keys,
            key_rows,
            query_rows,
            ..TileLimits::default()
        };
        let Some(g) = gpu_engine(limits) else { return };
        // (M, N, d, the k to try): k = N where N is small.
        let shapes: [(usize, usize, usize, &[usize]); 3] = [
            (37, 600, 5, &[1, 9, 16]),
            (9, 61, 3, &[7, 9, 61]),
            (13, 150, 130, &[1, 16]),
        ];
        for &(m, n, d, ks) in &shapes {
            let uniform = (rng.matrix(m, d, 0.0, 1.0), rng.matrix(n, d, 0.0, 1.0));
            let x = tied(n, d, &mut rng);
            let mut q = x.slice(s![..m.min(5), ..]).to_owned();
            q.append(Axis(0), rng.matrix(m - q.nrows(), d, 0.0, 3.0).view())
                .unwrap();
            for (kind, (q, x)) in [("uniform", uniform), ("ties", (q, x))] {
                for &k in ks {
                    let what = format!("case {ci} {kind} M={m} N={n} d={d} k={k}");
                    let got = g.knn(q.view(), x.view(), k).unwrap();
                    let want = cpu().knn(q.view(), x.view(), k).unwrap();
                    same_lists(&what, &got, &want);
                }
            }
        }
    }
    // Fewer than four keys fit the workgroup memory: one key a step.
    let limits = TileLimits {
        key_splits: Some(5),
        dispatch_keys: Some(17),
        ..TileLimits::default()
    };
    if let Some(g) = gpu_engine(limits) {
        let (q, x) = (
            rng.matrix(6, 2100, 0.0, 1.0),
            rng.matrix(50, 2100, 0.0, 1.0),
        );
        for k in [1, 3, 50] {
            let got = g.knn(q.view(), x.view(), k).unwrap();
            let want = cpu().knn(q.view(), x.view(), k).unwrap();
            same_lists(&format!("d=2100 k={k}"), &got, &want);
        }
    }
}

/// The same neighbours in the same order; the distances equal but for
/// the device's square root (within Vulkan's ULP bounds, not correctly
/// rounded on every driver).
fn same_lists(what: &str, got: &locus::Neighbours, want: &locus::Neighbours) {
    assert_eq!(got.indices, want.indices, "{what}");
    for (a, b) in got.distances.iter().zip(&want.distances) {
        assert!(
            (a - b).abs() <= 4.0 * f32::EPSILON * b,
            "{what}: {a} vs {b}"
        );
    }
}

#[test]
fn knn_regression_and_classification_match_reference() {
    let mut rng = Rng::new(61);
    let x = rng.matrix(150, 2, 0.0, 1.0);
    let yv = rng.matrix(150, 2, -1.0, 1.0);
    let labels = Array1::from_shape_fn(150, |i| (i % 4) as i64);
    let q = rng.matrix(12, 2, 0.0, 1.0);
    let k = 7;
    let kernel = Kernel::new(Profile::Gaussian, 0.2).unwrap();
    for (name, e) in engines() {
        let nb = e.knn(q.view(), x.view(), k).unwrap();
        let uni = e
            .knn_regress(q.view(), x.view(), yv.view(), k, KnnWeights::Uniform)
            .unwrap();
        let ker = e
            .knn_regress(q.view(), x.view(), yv.view(), k, KnnWeights::Kernel(kernel))
            .unwrap();
        let (cls, empty) = e
            .knn_classify(q.view(), x.view(), labels.view(), k, KnnWeights::Uniform)
            .unwrap();
        assert_eq!(empty, 0);
        for i in 0..12 {
            let idx: Vec<usize> = nb.indices.row(i).iter().map(|&j| j as usize).collect();
            let w: Vec<f64> = idx
                .iter()
                .map(|&j| kernel.eval_sq_dist(sq(q.row(i), x.row(j))))
                .collect();
            for c in 0..2 {
                let mean = idx.iter().map(|&j| f64::from(yv[[j, c]])).sum::<f64>() / k as f64;
                assert!(
                    (f64::from(uni.values[[i, c]]) - mean).abs() < 1e-5,
                    "{name}"
                );
                let wm = idx
                    .iter()
                    .zip(&w)
                    .map(|(&j, &wj)| wj * f64::from(yv[[j, c]]))
                    .sum::<f64>()
                    / w.iter().sum::<f64>();
                assert!((f64::from(ker.values[[i, c]]) - wm).abs() < 1e-4, "{name}");
            }
            let mut votes = [0usize; 4];
            for &j in &idx {
                votes[labels[j] as usize] += 1;
            }
            let best = (0..4)
                .max_by_key(|&c| (votes[c], std::cmp::Reverse(c)))
                .unwrap();
            assert_eq!(cls[i], best as i64, "{name}");
        }
    }
}

/// Plain f64 leave-one-out error.
fn ref_loo(k: &Kernel, x: &Array2<f32>, y: &Array2<f32>) -> (f64, usize) {
    let n = x.nrows();
    let mut total = 0.0;
    let mut counted = 0;
    for i in 0..n {
        let mut rest: Vec<usize> = (0..n).collect();
        rest.remove(i);
        let xs = x.select(Axis(0), &rest);
        let ys = y.select(Axis(0), &rest);
        let (m, e) = ref_local_mean(k, &x.slice(s![i..i + 1, ..]).to_owned(), &xs, &ys);
        if e == 1 {
            continue;
        }
        total += (0..y.ncols())
            .map(|c| (f64::from(y[[i, c]]) - m[[0, c]]).powi(2))
            .sum::<f64>();
        counted += 1;
    }
    (total / counted as f64, n - counted)
}

#[test]
fn loo_error_matches_reference_with_the_diagonal_excluded() {
    // d = 2, and d = 40, where the GPU measures by inner-product tiles.
    for (d, h) in [(2, 0.15), (40, 2.6)] {
        check_loo(d, h);
    }
}

fn check_loo(d: usize, h: f32) {
    let mut rng = Rng::new(88);
    let x = rng.matrix(131, d, 0.0, 1.0);
    let y = rng.matrix(131, 3, -1.0, 1.0);
    let limits = TileLimits {
        query_rows: Some(17),
        key_rows: Some(29),
        value_cols: Some(2),
        buffer_bytes: None,
        // Each row's own key found within windows and key slices too.
        key_splits: Some(4),
        dispatch_keys: Some(11),
    };
    let tiny = gpu_engine(limits);
    for p in Profile::ALL {
        let k = Kernel::new(p, h).unwrap();
        let (want, want_empty) = ref_loo(&k, &x, &y);
        let (want_self, _) = ref_loo(&k, &x, &x);
        let mut es: Vec<(&str, &Engine)> = engines();
        if let Some(t) = &tiny {
            es.push(("gpu tiny tiles", t));
        }
        for (name, e) in es {
            let got = e.loo_error(&k, x.view(), Some(y.view())).unwrap();
            assert!(
                (got.error - want).abs() <= 1e-4 * want,
                "{name} {p} d={d}: {} vs {want}",
                got.error
            );
            assert_eq!(got.empty_rows, want_empty, "{name} {p} d={d}");
            let got = e.loo_error(&k, x.view(), None).unwrap();
            assert!(
                (got.error - want_self).abs() <= 1e-4 * want_self,
                "{name} {p} d={d} self"
            );
        }
    }
}

#[test]
fn bandwidth_selection_picks_the_known_best() {
    // Two tight clusters far apart, value = cluster id: any bandwidth that
    // stays inside a cluster predicts perfectly; a huge one mixes them; a
    // tiny flat one leaves every point alone.
    let mut rng = Rng::new(12);
    let (x, lab) = blobs(&mut rng, 40, &[(0.0, 0.0), (10.0, 0.0)], 1.0);
    let y = lab.mapv(|l| l as f32).insert_axis(Axis(1));
    let candidates = [1e-4f32, 0.8, 100.0];
    for (name, e) in engines() {
        for p in [Profile::Uniform, Profile::Epanechnikov] {
            let sel = e
                .select_bandwidth(p, x.view(), Some(y.view()), &candidates)
                .unwrap();
            assert_eq!(sel.best, 0.8, "{name} {p}: {:?}", sel.curve);
            assert_eq!(sel.curve.len(), 3);
            assert_eq!(sel.curve[0].empty_rows, 80);
            assert_eq!(sel.curve[1].error, 0.0);
            assert!(sel.curve[2].error > 0.1);
        }
    }
}

/// Plain f64 multi-kernel local mean.
fn ref_multi(
    terms: &[(f32, Kernel)],
    constant: f64,
    identity: f64,
    q: &Array2<f32>,
    x: &Array2<f32>,
    y: &Array2<f32>,
    selfish: bool,
) -> Array2<f64> {
    Array2::from_shape_fn((q.nrows(), y.ncols()), |(i, c)| {
        let mut s = 0.0;
        let mut u = 0.0;
        for j in 0..x.nrows() {
            let r2 = sq(q.row(i), x.row(j));
            let mut w: f64 = terms
                .iter()
                .map(|(wm, k)| f64::from(*wm) * k.eval_sq_dist(r2))
                .sum::<f64>()
                + constant;
            if selfish && i == j {
                w += identity;
            }
            s += w;
            u += w * f64::from(y[[j, c]]);
        }
        u / s
    })
}

#[test]
fn multi_kernel_local_mean_matches_reference() {
    let mut rng = Rng::new(4);
    let x = rng.matrix(90, 2, 0.0, 1.0);
    let y = rng.matrix(90, 2, -1.0, 1.0);
    let q = rng.matrix(13, 2, 0.0, 1.0);
    let terms = [
        (0.6f32, Kernel::gaussian(0.1).unwrap()),
        (0.4, Kernel::new(Profile::Epanechnikov, 0.4).unwrap()),
        (2.0, Kernel::new(Profile::Cauchy, 0.2).unwrap()),
    ];
    let mut mk = MultiKernel::new();
    for &(w, k) in &terms {
        mk = mk.term(w, k);
    }
    let mk = mk.constant(0.01);
    let want = ref_multi(&terms, 0.01, 0.0, &q, &x, &y, false);
    let mk_self = mk.clone().identity(0.5);
    let want_self = ref_multi(&terms, 0.01, 0.5, &x, &x, &y, true);
    for (name, e) in engines() {
        let got = e
            .multi_kernel_local_mean(&mk, q.view(), x.view(), y.view())
            .unwrap();
        assert_close(&format!("{name} multi"), &got.values, &want, 1e-4, 1e-5);
        let got = e
            .multi_kernel_self_local_mean(&mk_self, x.view(), Some(y.view()))
            .unwrap();
        assert_close(
            &format!("{name} multi self"),
            &got.values,
            &want_self,
            1e-4,
            1e-5,
        );
        assert!(matches!(
            e.multi_kernel_local_mean(&mk_self, q.view(), x.view(), y.view()),
            Err(Error::InvalidParameter { .. })
        ));
    }
}

#[test]
fn row_states_of_split_keys_merge_to_the_whole() {
    let mut rng = Rng::new(31);
    let x = rng.matrix(300, 3, 0.0, 1.0);
    let y = rng.matrix(300, 2, -1.0, 1.0);
    let q = rng.matrix(40, 3, 0.0, 1.0);
    for p in [Profile::Gaussian, Profile::Triangular] {
        let k = Kernel::new(p, 0.02).unwrap();
        for (name, e) in engines() {
            let whole = e
                .row_states(&k, q.view(), x.view(), Some(y.view()), false)
                .unwrap();
            let mut a = e
                .row_states(
                    &k,
                    q.view(),
                    x.slice(s![..170, ..]),
                    Some(y.slice(s![..170, ..])),
                    false,
                )
                .unwrap();
            let b = e
                .row_states(
                    &k,
                    q.view(),
                    x.slice(s![170.., ..]),
                    Some(y.slice(s![170.., ..])),
                    false,
                )
                .unwrap();
            a.merge(&b).unwrap();
            let (mw, ma) = (whole.means(), a.means());
            assert_eq!(mw.empty_rows, ma.empty_rows, "{name} {p}");
            let want = mw.values.mapv(f64::from);
            assert_close(&format!("{name} {p} merged"), &ma.values, &want, 1e-5, 1e-6);
            for (lw, la) in whole.log_sum().iter().zip(a.log_sum().iter()) {
                assert!(
                    lw == la || (lw - la).abs() < 1e-5 * lw.abs().max(1.0),
                    "{name} {p}"
                );
            }
        }
    }
}

#[test]
fn bad_inputs_of_local_models_are_typed_errors() {
    let x = array![[0.0f32, 0.0], [1.0, 1.0], [2.0, 2.0]];
    let k = Kernel::gaussian(1.0).unwrap();
    for (_, e) in engines() {
        // Labels: negative, beyond the class count, wrong length.
        for (labels, classes) in [
            (array![0i64, -1, 1], None),
            (array![0i64, 3, 1], Some(3)),
            (array![0i64, 1], None),
        ] {
            let err = e
                .fit_classifier(&k, x.view(), labels.view(), classes)
                .unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::InvalidParameter { .. } | Error::RowMismatch { .. }
                ),
                "{err}"
            );
        }
        // k = 0 and k > N.
        for kk in [0, 4] {
            assert!(matches!(
                e.knn(x.view(), x.view(), kk),
                Err(Error::InvalidParameter { name: "k", .. })
            ));
        }
        // No candidate bandwidths; an invalid one.
        assert!(matches!(
            e.select_bandwidth(Profile::Gaussian, x.view(), None, &[]),
            Err(Error::InvalidParameter {
                name: "candidates",
                ..
            })
        ));
        assert!(matches!(
            e.select_bandwidth(Profile::Gaussian, x.view(), None, &[1.0, -1.0]),
            Err(Error::InvalidBandwidth { .. })
        ));
        // Negative / zero KDE weights; cauchy density in d = 2.
        for w in [
            array![1.0f32, -1.0, 1.0],
            array![0.0f32, 0.0, 0.0],
            array![1.0f32, f32::NAN, 1.0],
        ] {
            assert!(matches!(
                e.density(&k, x.view(), x.view(), Some(w.view())),
                Err(Error::InvalidParameter { .. })
            ));
        }
        assert!(matches!(
            e.density(
                &Kernel::new(Profile::Cauchy, 1.0).unwrap(),
                x.view(),
                x.view(),
                None
            ),
            Err(Error::Unsupported { .. })
        ));
        // Negative multi-kernel weights.
        let mk = MultiKernel::new().term(-1.0, k);
        assert!(matches!(
            e.multi_kernel_local_mean(&mk, x.view(), x.view(), x.view()),
            Err(Error::InvalidParameter { .. })
        ));
    }
    assert!(locus::labels_from_f32(array![0.0f32, 1.5].view()).is_err());
    assert_eq!(
        locus::labels_from_f32(array![0.0f32, 2.0].view()).unwrap(),
        array![0i64, 2]
    );
}
