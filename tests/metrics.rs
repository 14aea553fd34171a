//! Metrics other than the Euclidean one: kNN, local means and densities
//! under Manhattan, Chebyshev, Minkowski (p = 3, and large p at extreme
//! scales) and haversine on the CPU
//! and the GPU (one-shot and through a key set) against plain `f64`
//! references computed here, and the typed errors of what does not fit.
#![allow(clippy::needless_range_loop)] // index loops mirror the formulas

mod common;

use common::*;
use locus::{Error, Kernel, MeanShiftParams, Metric, Profile, ln_normalizer};
use ndarray::{Array2, ArrayView1};

/// Each metric with data it takes: 4 columns, or haversine's (latitude,
/// longitude) in radians.
fn cases() -> Vec<(Metric, Array2<f32>, Array2<f32>)> {
    let mut rng = Rng::new(29);
    let mut plain = |m: Metric| {
        (
            m,
            rng.matrix(23, 4, -1.0, 1.0),
            rng.matrix(61, 4, -1.0, 1.0),
        )
    };
    let mut v = vec![
        plain(Metric::Manhattan),
        plain(Metric::Chebyshev),
        plain(Metric::minkowski(3.0).unwrap()),
        plain(Metric::Euclidean),
    ];
    let mut rng = Rng::new(7);
    let mut latlon = |rows| {
        let mut a = rng.matrix(rows, 2, -1.0, 1.0);
        a.column_mut(0).mapv_inplace(|v| v * 1.3);
        a.column_mut(1).mapv_inplace(|v| v * 3.1);
        a
    };
    v.push((Metric::Haversine, latlon(23), latlon(61)));
    v
}

fn dist(m: &Metric, a: ArrayView1<'_, f32>, b: ArrayView1<'_, f32>) -> f64 {
    m.distance(a.as_slice().unwrap(), b.as_slice().unwrap())
}

/// Checks neighbour lists against the exact distances: each listed
/// distance is its key's, ascending, and the i-th equals the reference's.
fn check_knn(what: &str, m: &Metric, q: &Array2<f32>, x: &Array2<f32>, nb: &locus::Neighbours) {
    let k = nb.indices.ncols();
    for i in 0..q.nrows() {
        let mut all: Vec<f64> = x.rows().into_iter().map(|r| dist(m, q.row(i), r)).collect();
        all.sort_by(f64::total_cmp);
        for c in 0..k {
            let j = nb.indices[[i, c]] as usize;
            let got = f64::from(nb.distances[[i, c]]);
            let own = dist(m, q.row(i), x.row(j));
            let tol = 2e-5 * own.max(1e-2);
            assert!(
                (got - own).abs() <= tol,
                "{what} {m} row {i}: {got} vs {own}"
            );
            assert!(
                (own - all[c]).abs() <= tol,
                "{what} {m} row {i} rank {c}: {own} vs {}",
                all[c]
            );
        }
    }
}

#[test]
fn knn_under_every_metric_matches_the_f64_reference() {
    for (name, engine) in engines_and_tiny_tiles(7, 13) {
        for (m, q, x) in cases() {
            let nb = engine.knn_metric(q.view(), x.view(), 5, m).unwrap();
            check_knn(name, &m, &q, &x, &nb);
            let set = engine.prepare(x.view()).build().unwrap();
            let kept = set.knn_metric(q.view(), 5, m).unwrap();
            check_knn(&format!("{name} key set"), &m, &q, &x, &kept);
        }
    }
}

/// Minkowski with a large `p` at scales where `Σ|Δ|^p` leaves `f32`
/// (`p = 30` on differences of 10⁻³ underflows, `p = 40` on differences of
/// 100 overflows, `p = 10⁶` is Chebyshev's): kNN, local means and
/// densities still match the `f64` definition, one-shot and key set.
#[test]
fn minkowski_of_a_large_p_keeps_every_scale() {
    let mut rng = Rng::new(41);
    for (name, engine) in engines_and_tiny_tiles(7, 13) {
        for (p, scale) in [(30.0, 0.01f32), (40.0, 100.0), (1e6, 1.0)] {
            let m = Metric::minkowski(p).unwrap();
            let q = rng.matrix(9, 3, 0.0, scale);
            let x = rng.matrix(40, 3, 0.0, scale);
            let nb = engine.knn_metric(q.view(), x.view(), 5, m).unwrap();
            check_knn(name, &m, &q, &x, &nb);
            let set = engine.prepare(x.view()).build().unwrap();
            let kept = set.knn_metric(q.view(), 5, m).unwrap();
            check_knn(&format!("{name} key set"), &m, &q, &x, &kept);
            let y = rng.matrix(40, 2, -1.0, 1.0);
            let kernel = Kernel::new(Profile::Gaussian, 0.3 * scale)
                .unwrap()
                .with_metric(m)
                .unwrap();
            let (want, dens) = reference(&kernel, &q, &x, &y);
            let what = format!("{name} {kernel}");
            let got = engine
                .local_mean(&kernel, q.view(), x.view(), y.view())
                .unwrap();
            assert_close(&what, &got.values, &want, 1e-4, 1e-5);
            let got = engine.density(&kernel, q.view(), x.view(), None).unwrap();
            for i in 0..q.nrows() {
                let tol = 1e-4 * dens[i];
                assert!(
                    (got[i] - dens[i]).abs() <= tol,
                    "{what} row {i}: {} vs {}",
                    got[i],
                    dens[i]
                );
            }
        }
    }
}

#[test]
fn knn_ties_go_to_the_lower_index() {
    // Keys at Manhattan distance 2 from the origin in different ways.
    let x = ndarray::array![[2.0f32, 0.0], [1.0, 1.0], [0.0, 2.0], [-1.0, -1.0]];
    let q = ndarray::array![[0.0f32, 0.0]];
    for (name, engine) in engines_and_tiny_tiles(7, 13) {
        let nb = engine
            .knn_metric(q.view(), x.view(), 4, Metric::Manhattan)
            .unwrap();
        assert_eq!(nb.indices.row(0).to_vec(), vec![0, 1, 2, 3], "{name}");
        let nb = engine
            .knn_metric(q.view(), x.view(), 2, Metric::Chebyshev)
            .unwrap();
        assert_eq!(nb.indices.row(0).to_vec(), vec![1, 3], "{name}");
    }
}

/// `Σ K(dist/h) y / Σ K(dist/h)` and `(1/N) Σ K(dist/h) / (c_d h^d)` in `f64`.
fn reference(
    kernel: &Kernel,
    q: &Array2<f32>,
    x: &Array2<f32>,
    y: &Array2<f32>,
) -> (Array2<f64>, Vec<f64>) {
    let (m, n, cols) = (q.nrows(), x.nrows(), y.ncols());
    let metric = kernel.metric();
    let h = f64::from(kernel.bandwidth());
    let mut means = Array2::<f64>::zeros((m, cols));
    let mut dens = vec![0.0; m];
    let d = x.ncols();
    let norm = ln_normalizer(kernel.profile(), d).unwrap().exp() * h.powi(d as i32) * n as f64;
    for i in 0..m {
        let w: Vec<f64> = (0..n)
            .map(|j| {
                kernel
                    .profile()
                    .eval_sq((dist(&metric, q.row(i), x.row(j)) / h).powi(2))
            })
            .collect();
        let s: f64 = w.iter().sum();
        for c in 0..cols {
            means[[i, c]] = (0..n).map(|j| w[j] * f64::from(y[[j, c]])).sum::<f64>() / s;
        }
        dens[i] = s / norm;
    }
    (means, dens)
}

#[test]
fn local_means_and_densities_under_every_metric_match_the_f64_reference() {
    let mut rng = Rng::new(3);
    for (name, engine) in engines_and_tiny_tiles(7, 13) {
        for (m, q, x) in cases() {
            let y = rng.matrix(x.nrows(), 3, -2.0, 2.0);
            for (profile, h) in [
                (Profile::Gaussian, 0.6f32),
                (Profile::Epanechnikov, 1.7),
                (Profile::Laplacian, 0.5),
            ] {
                let kernel = Kernel::new(profile, h).unwrap().with_metric(m).unwrap();
                let (want, dens) = reference(&kernel, &q, &x, &y);
                let what = format!("{name} {kernel}");
                let got = engine
                    .local_mean(&kernel, q.view(), x.view(), y.view())
                    .unwrap();
                assert_close(&what, &got.values, &want, 1e-4, 1e-5);
                let set = engine.prepare(x.view()).values(y.view()).build().unwrap();
                let kept = set.local_mean(&kernel, q.view()).unwrap();
                assert_close(&format!("{what} key set"), &kept.values, &want, 1e-4, 1e-5);
                let got = engine.density(&kernel, q.view(), x.view(), None).unwrap();
                let kept = set.density(&kernel, q.view()).unwrap();
                for i in 0..q.nrows() {
                    for (how, v) in [("one-shot", got[i]), ("key set", kept[i])] {
                        let tol = 1e-4 * dens[i] + 1e-9;
                        assert!(
                            (v - dens[i]).abs() <= tol,
                            "{what} {how} row {i}: {v} vs {}",
                            dens[i]
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn what_a_metric_cannot_do_is_a_typed_error() {
    let e = cpu();
    let x = Rng::new(1).matrix(20, 3, -1.0, 1.0);
    let hav = Kernel::gaussian(0.5)
        .unwrap()
        .with_metric(Metric::Haversine)
        .unwrap();
    assert!(matches!(
        e.local_mean(&hav, x.view(), x.view(), x.view()),
        Err(Error::MetricDimension {
            expected: 2,
            data: 3,
            ..
        })
    ));
    assert!(matches!(
        e.knn_metric(x.view(), x.view(), 2, Metric::Haversine),
        Err(Error::MetricDimension { .. })
    ));
    let l1 = Kernel::gaussian(0.5)
        .unwrap()
        .with_metric(Metric::Manhattan)
        .unwrap();
    for engine in std::iter::once(e).chain(gpu()) {
        assert!(matches!(
            engine.kernel_matrix(&l1, x.view(), x.view()),
            Err(Error::UnsupportedMetric {
                op: "kernel_matrix",
                ..
            })
        ));
        let set = engine.prepare(x.view()).values(x.view()).build().unwrap();
        assert!(matches!(
            set.local_polynomial(&l1, x.view(), 1),
            Err(Error::UnsupportedMetric { .. })
        ));
    }
    assert!(matches!(
        MeanShiftParams::new().kernel(l1).check(),
        Err(Error::UnsupportedMetric {
            op: "mean_shift",
            ..
        })
    ));
    let product = Kernel::product([(3, Profile::Gaussian, 1.0)]).unwrap();
    assert!(matches!(
        product.with_metric(Metric::Chebyshev),
        Err(Error::InvalidParameter { name: "metric", .. })
    ));
    assert!(matches!(
        Metric::minkowski(0.9),
        Err(Error::InvalidParameter { name: "p", .. })
    ));
    assert!(matches!(
        Metric::from_name("mahalanobis", None),
        Err(Error::UnknownMetric { .. })
    ));
}
