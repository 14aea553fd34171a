//! Variable bandwidths (docs/numerics.md, "Variable bandwidths"): per-key
//! (sample-point) and per-query (balloon) local means and densities on
//! the CPU and the GPU (lavapipe, device-sized and tiny tiles) against a
//! plain `f64` reference; far rows; bandwidths across six decades; the
//! densities integrating to 1; the bandwidth rules; key sets built with
//! bandwidths; every bad input typed.

mod common;

use common::{Rng, SENTINEL, engines_and_tiny_tiles};
use locus::{Engine, Error, Kernel, Profile, VariableBandwidth};
use ndarray::{Array1, Array2};

/// `ln k(t)` in `f64` (−inf outside a compact support).
fn ln_k(p: Profile, t: f64) -> f64 {
    match p {
        Profile::Gaussian => -0.5 * t,
        Profile::Laplacian => -t.sqrt(),
        Profile::Cauchy => -t.ln_1p(),
        _ => p.eval_sq(t).ln(),
    }
}

/// The reference: per row, the log-weights `ln k(t_ij) + c_j`, their
/// log-sum-exp, the weighted mean of `values` (NaN without mass), and the
/// largest `|ln k(t_ij)|` of the keys that hold the row's mass (above
/// `10⁻⁶` of it), whose `f32` rounding bounds the engines' accuracy
/// (docs/numerics.md, "Variable bandwidths").
fn reference(
    p: Profile,
    bw: &VariableBandwidth,
    q: &Array2<f32>,
    x: &Array2<f32>,
    values: &Array2<f32>,
) -> (Array1<f64>, Array2<f64>, Array1<f64>) {
    let d = x.ncols() as f64;
    let (m, n, c) = (q.nrows(), x.nrows(), values.ncols());
    let mut log_sum = Array1::zeros(m);
    let mut means = Array2::zeros((m, c));
    let mut scale = Array1::zeros(m);
    for i in 0..m {
        let mut lk = vec![0.0f64; n];
        let lw: Vec<f64> = (0..n)
            .map(|j| {
                let h = f64::from(match bw {
                    VariableBandwidth::PerKey(h) => h[j],
                    VariableBandwidth::PerQuery(h) => h[i],
                });
                let d2: f64 = q
                    .row(i)
                    .iter()
                    .zip(x.row(j))
                    .map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2))
                    .sum();
                let c = match bw {
                    VariableBandwidth::PerKey(_) => -d * h.ln(),
                    VariableBandwidth::PerQuery(_) => 0.0,
                };
                lk[j] = ln_k(p, d2 / (h * h));
                lk[j] + c
            })
            .collect();
        let top = lw.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if top == f64::NEG_INFINITY {
            log_sum[i] = f64::NEG_INFINITY;
            means.row_mut(i).fill(f64::NAN);
            continue;
        }
        let w: Vec<f64> = lw.iter().map(|&l| (l - top).exp()).collect();
        let s: f64 = w.iter().sum();
        log_sum[i] = top + s.ln();
        scale[i] = (0..n)
            .filter(|&j| w[j] > 1e-6 * s)
            .map(|j| lk[j].abs())
            .fold(0.0, f64::max);
        for k in 0..c {
            means[[i, k]] = w
                .iter()
                .enumerate()
                .map(|(j, &wj)| wj * f64::from(values[[j, k]]))
                .sum::<f64>()
                / s;
        }
    }
    (log_sum, means, scale)
}

/// The reference log density: the log-sum less `ln N + ln c_k` (and
/// `d ln h_i` per query).
fn ref_log_density(
    p: Profile,
    bw: &VariableBandwidth,
    q: &Array2<f32>,
    x: &Array2<f32>,
) -> Array1<f64> {
    let none = Array2::zeros((x.nrows(), 0));
    let (mut ls, _, _) = reference(p, bw, q, x, &none);
    let d = x.ncols();
    let base = (x.nrows() as f64).ln() + locus::ln_normalizer(p, d).unwrap();
    for (i, l) in ls.iter_mut().enumerate() {
        *l -= base;
        if let VariableBandwidth::PerQuery(h) = bw {
            *l -= d as f64 * f64::from(h[i]).ln();
        }
    }
    ls
}

/// What the `f32` rounding of a log-weight of magnitude `l` in `d`
/// dimensions moves it by: `t` carries `(d + 2)` roundings (and `√t`,
/// `ln` one more), with a factor 4 of room.
fn lw_rounding(l: f64, d: usize) -> f64 {
    4.0 * (d + 3) as f64 * l / f64::from(1u32 << 24)
}

#[track_caller]
fn close_means(what: &str, got: &Array2<f32>, want: &Array2<f64>, scale: &Array1<f64>) {
    let d: usize = what
        .split("d=")
        .nth(1)
        .and_then(|r| r.split(' ').next()?.parse().ok())
        .unwrap_or(8);
    for ((i, k), &w) in want.indexed_iter() {
        let g = f64::from(got[[i, k]]);
        if w.is_nan() {
            assert!(g.is_nan(), "{what}: [{i},{k}] = {g}, expected NaN");
            continue;
        }
        assert!(g != f64::from(SENTINEL), "{what}: [{i},{k}] never written");
        // The values are within ±2: a weight's relative error moves the mean
        // by at most twice that.
        let tol = 1e-4 * w.abs() + 1e-5 + 4.0 * lw_rounding(scale[i], d);
        assert!(
            (g - w).abs() <= tol,
            "{what}: [{i},{k}] = {g}, expected {w}"
        );
    }
}

#[track_caller]
fn close_logs(what: &str, got: &Array1<f64>, want: &Array1<f64>, scale: &Array1<f64>) {
    let d: usize = what
        .split("d=")
        .nth(1)
        .and_then(|r| r.split(' ').next()?.parse().ok())
        .unwrap_or(8);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if w == f64::NEG_INFINITY {
            assert_eq!(g, w, "{what}: row {i}");
            continue;
        }
        // 1e-4 relative in the density, and relative in a far row's log.
        let tol = 1e-4 + 2e-6 * w.abs() + lw_rounding(scale[i], d);
        assert!((g - w).abs() <= tol, "{what}: row {i}: {g} vs {w}");
    }
}

/// Bandwidths log-uniform in `[lo, hi]`.
fn log_uniform(rng: &mut Rng, n: usize, lo: f64, hi: f64) -> Vec<f32> {
    (0..n)
        .map(|_| (lo.ln() + (hi.ln() - lo.ln()) * f64::from(rng.uniform())).exp() as f32)
        .collect()
}

/// Per-key and per-query bandwidths from `10⁻³` to `10³`, d = 1, 2, 8,
/// every profile, against the reference on every engine.
#[test]
fn variable_bandwidths_match_the_f64_reference() {
    let engines = engines_and_tiny_tiles(7, 13);
    let mut rng = Rng::new(33);
    for d in [1usize, 2, 8] {
        let (m, n) = (37, 61);
        // Queries near the keys, some far out.
        let x = rng.matrix(n, d, -1.0, 1.0);
        let mut q = rng.matrix(m, d, -1.5, 1.5);
        q.row_mut(3).fill(40.0);
        let y = rng.matrix(n, 5, -2.0, 2.0);
        let per_key = VariableBandwidth::PerKey(log_uniform(&mut rng, n, 1e-3, 1e3));
        let per_query = VariableBandwidth::PerQuery(log_uniform(&mut rng, m, 1e-3, 1e3));
        // Moderate bandwidths too, where compact rows are not all empty.
        let mid = VariableBandwidth::PerKey(log_uniform(&mut rng, n, 0.2, 2.0));
        for p in Profile::ALL {
            for bw in [&per_key, &per_query, &mid] {
                let (_, want, scale) = reference(p, bw, &q, &x, &y);
                let density =
                    (p != Profile::Cauchy || d == 1).then(|| ref_log_density(p, bw, &q, &x));
                for (name, e) in &engines {
                    let what = format!("{name} {p} d={d} {:?}", std::mem::discriminant(bw));
                    let got = e
                        .local_mean_variable(p, bw, q.view(), x.view(), y.view())
                        .unwrap();
                    close_means(&what, &got.values, &want, &scale);
                    let empty = want.rows().into_iter().filter(|r| r[0].is_nan()).count();
                    assert_eq!(got.empty_rows, empty, "{what}");
                    if let Some(want) = &density {
                        let got = e.log_density_variable(p, bw, q.view(), x.view()).unwrap();
                        close_logs(&what, &got, want, &scale);
                    }
                }
            }
        }
    }
}

/// A key set built with per-key bandwidths answers as the one-shot ops
/// (bit for bit: the same pass over the same tiles) and so the `f64`
/// reference, on every engine, every profile, d = 1, 2, 8, with several
/// key tiles under the tiny caps; the prepared keys count in its
/// resident bytes.
#[test]
fn key_sets_with_bandwidths_match_the_one_shot_ops() {
    let engines = engines_and_tiny_tiles(7, 13);
    let mut rng = Rng::new(35);
    for d in [1usize, 2, 8] {
        let (m, n) = (29, 53);
        let x = rng.matrix(n, d, -1.0, 1.0);
        let mut q = rng.matrix(m, d, -1.5, 1.5);
        q.row_mut(2).fill(30.0);
        let y = rng.matrix(n, 3, -2.0, 2.0);
        let h = log_uniform(&mut rng, n, 0.05, 5.0);
        let bw = VariableBandwidth::PerKey(h.clone());
        let ha = Array1::from(h);
        for (name, e) in &engines {
            let plain = e.prepare(x.view()).values(y.view()).build().unwrap();
            let set = e
                .prepare(x.view())
                .values(y.view())
                .bandwidths(ha.view())
                .build()
                .unwrap();
            assert!(set.resident_bytes() > plain.resident_bytes(), "{name}");
            assert_eq!(set.bandwidths().unwrap(), ha.view());
            for p in Profile::ALL {
                let what = format!("{name} key set {p} d={d}");
                let got = set.local_mean_variable(p, q.view()).unwrap();
                let one = e
                    .local_mean_variable(p, &bw, q.view(), x.view(), y.view())
                    .unwrap();
                let same =
                    |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
                assert!(
                    got.values
                        .iter()
                        .zip(&one.values)
                        .all(|(&a, &b)| same(a, b)),
                    "{what}: local means differ from the one-shot op"
                );
                assert_eq!(got.empty_rows, one.empty_rows, "{what}");
                let (_, want, scale) = reference(p, &bw, &q, &x, &y);
                close_means(&what, &got.values, &want, &scale);
                if p != Profile::Cauchy || d == 1 {
                    let got = set.log_density_variable(p, q.view()).unwrap();
                    let one = e.log_density_variable(p, &bw, q.view(), x.view()).unwrap();
                    assert_eq!(got, one, "{what}: densities differ from the one-shot op");
                    close_logs(&what, &got, &ref_log_density(p, &bw, &q, &x), &scale);
                    let dens = set.density_variable(p, q.view()).unwrap();
                    assert_eq!(dens, got.mapv(f64::exp), "{what}");
                } else {
                    let err = set.log_density_variable(p, q.view()).unwrap_err();
                    assert!(matches!(err, Error::Unsupported { .. }), "{what}: {err}");
                }
            }
            // A set without bandwidths, or without values, says so.
            let err = plain
                .local_mean_variable(Profile::Gaussian, q.view())
                .unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::InvalidParameter {
                        name: "bandwidths",
                        ..
                    }
                ),
                "{err}"
            );
            assert!(plain.bandwidths().is_none());
            let no_values = e.prepare(x.view()).bandwidths(ha.view()).build().unwrap();
            let err = no_values
                .local_mean_variable(Profile::Gaussian, q.view())
                .unwrap_err();
            assert!(
                matches!(err, Error::InvalidParameter { name: "values", .. }),
                "{err}"
            );
            assert!(
                no_values
                    .log_density_variable(Profile::Gaussian, q.view())
                    .is_ok()
            );
            // Queries of the wrong dimension; bandwidths of the wrong
            // length, zero or non-finite: typed errors at the request or
            // the build.
            let wrong = rng.matrix(3, d + 1, -1.0, 1.0);
            let err = set
                .local_mean_variable(Profile::Gaussian, wrong.view())
                .unwrap_err();
            assert!(matches!(err, Error::DimensionMismatch { .. }), "{err}");
            for bad in [
                Array1::from(vec![1.0f32; n - 1]),
                Array1::from_shape_fn(n, |j| if j == 4 { 0.0 } else { 1.0 }),
                Array1::from_shape_fn(n, |j| if j == 4 { f32::NAN } else { 1.0 }),
            ] {
                let err = e
                    .prepare(x.view())
                    .bandwidths(bad.view())
                    .build()
                    .unwrap_err();
                assert!(
                    matches!(
                        err,
                        Error::InvalidParameter {
                            name: "bandwidths",
                            ..
                        }
                    ),
                    "{err}"
                );
            }
        }
    }
}

/// Rows whose every key lies beyond `T_FAR` (tiny bandwidths, a query
/// 10¹⁷ away) are finished in `f64`: the local mean of the nearest-reaching
/// key, the log density about −5·10³⁷; a wide key reaches a far query on
/// the `f32` path.
#[test]
fn far_rows_are_finished_in_f64() {
    let engines = engines_and_tiny_tiles(2, 3);
    let mut rng = Rng::new(7);
    for d in [1usize, 2, 8] {
        let n = 9;
        let x = rng.matrix(n, d, 0.0, 1.0);
        let y = rng.matrix(n, 2, -1.0, 1.0);
        // ‖q‖ = 10¹⁷ and 3·10¹⁶ in every dimension.
        let mut q = rng.matrix(4, d, 0.0, 1.0);
        let r = (d as f32).sqrt();
        q.row_mut(0).fill(1e17 / r);
        q.row_mut(1).fill(-3e16 / r);
        let tiny = VariableBandwidth::PerKey(log_uniform(&mut rng, n, 1e-3, 1e-2));
        let mut wide = log_uniform(&mut rng, n, 1e-3, 1e-2);
        wide[4] = 1e3;
        let wide = VariableBandwidth::PerKey(wide);
        let balloon = VariableBandwidth::PerQuery(vec![1e-2, 2e-3, 0.5, 1e-3]);
        for p in [Profile::Gaussian, Profile::Laplacian, Profile::Cauchy] {
            for (bw, far) in [(&tiny, true), (&wide, false), (&balloon, true)] {
                // Far rows are computed in f64: the tolerance of the values.
                let (_, want, _) = reference(p, bw, &q, &x, &y);
                let scale = Array1::zeros(q.nrows());
                let dens = (p != Profile::Cauchy || d == 1).then(|| ref_log_density(p, bw, &q, &x));
                for (name, e) in &engines {
                    let what = format!("{name} {p} d={d} far");
                    let got = e
                        .local_mean_variable(p, bw, q.view(), x.view(), y.view())
                        .unwrap();
                    assert_eq!(got.empty_rows, 0, "{what}");
                    close_means(&what, &got.values, &want, &scale);
                    if let Some(want) = &dens {
                        let got = e.log_density_variable(p, bw, q.view(), x.view()).unwrap();
                        close_logs(&what, &got, want, &scale);
                        // Beyond T_FAR, a gaussian's log density is about −5·10³⁷.
                        if far && p == Profile::Gaussian {
                            assert!(got[0].is_finite() && got[0] < -1e36, "{what}: {}", got[0]);
                        }
                    }
                }
            }
        }
    }
}

/// `∫ p̂ = 1` for per-key bandwidths: a midpoint rule on a grid in d = 1
/// and d = 2, every compact profile, the gaussian and the laplacian.
#[test]
fn sample_point_densities_integrate_to_one() {
    let e = Engine::cpu();
    let mut rng = Rng::new(11);
    for d in [1usize, 2] {
        let n = 5;
        let x = rng.matrix(n, d, -1.0, 1.0);
        let h = log_uniform(&mut rng, n, 0.2, 0.8);
        let bw = VariableBandwidth::PerKey(h);
        let (half, cells) = if d == 1 {
            (20.0f64, 40_000)
        } else {
            (14.0, 1400)
        };
        let dx = 2.0 * half / cells as f64;
        let axis: Vec<f32> = (0..cells)
            .map(|k| (-half + (k as f64 + 0.5) * dx) as f32)
            .collect();
        let grid = if d == 1 {
            Array2::from_shape_fn((cells, 1), |(i, _)| axis[i])
        } else {
            Array2::from_shape_fn((cells * cells, 2), |(i, k)| {
                if k == 0 {
                    axis[i / cells]
                } else {
                    axis[i % cells]
                }
            })
        };
        for p in Profile::ALL {
            if p == Profile::Cauchy {
                continue; // heavy tails: no finite grid holds its mass
            }
            let f = e.density_variable(p, &bw, grid.view(), x.view()).unwrap();
            let total: f64 = f.sum() * dx.powi(d as i32);
            let tol = if d == 1 { 1e-4 } else { 2e-3 };
            assert!((total - 1.0).abs() < tol, "{p} d={d}: ∫ = {total}");
        }
    }
}

/// The k-NN rules against brute force, Abramson's law against its
/// definition.
#[test]
fn bandwidth_rules_follow_their_definitions() {
    let e = Engine::cpu();
    let mut rng = Rng::new(5);
    let x = rng.matrix(40, 3, -1.0, 1.0);
    let q = rng.matrix(9, 3, -1.0, 1.0);
    let dist = |a: ndarray::ArrayView1<f32>, b: ndarray::ArrayView1<f32>| -> f64 {
        a.iter()
            .zip(b)
            .map(|(&u, &v)| (f64::from(u) - f64::from(v)).powi(2))
            .sum::<f64>()
            .sqrt()
    };
    let h = e.knn_bandwidths(x.view(), 4, 1.5).unwrap();
    for (j, &hj) in h.iter().enumerate() {
        let mut ds: Vec<f64> = (0..40)
            .filter(|&k| k != j)
            .map(|k| dist(x.row(j), x.row(k)))
            .collect();
        ds.sort_by(f64::total_cmp);
        assert!((f64::from(hj) - 1.5 * ds[3]).abs() < 1e-5, "key {j}");
    }
    let hb = e.balloon_bandwidths(q.view(), x.view(), 3, 0.5).unwrap();
    for (i, &hi) in hb.iter().enumerate() {
        let mut ds: Vec<f64> = (0..40).map(|k| dist(q.row(i), x.row(k))).collect();
        ds.sort_by(f64::total_cmp);
        assert!((f64::from(hi) - 0.5 * ds[2]).abs() < 1e-5, "query {i}");
    }
    let pilot = Kernel::new(Profile::Gaussian, 0.4).unwrap();
    let ha = e.abramson_bandwidths(&pilot, x.view()).unwrap();
    let lf = e.log_density(&pilot, x.view(), x.view(), None).unwrap();
    let g = lf.mean().unwrap();
    for (j, &hj) in ha.iter().enumerate() {
        let want = 0.4 * (-0.5 * (lf[j] - g)).exp();
        assert!((f64::from(hj) / want - 1.0).abs() < 1e-6, "key {j}");
    }
    // Denser points get narrower kernels.
    let dense = lf
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .unwrap()
        .0;
    let sparse = lf
        .iter()
        .enumerate()
        .min_by(|a, b| a.1.total_cmp(b.1))
        .unwrap()
        .0;
    assert!(ha[dense] < ha[sparse]);
}

/// Every bad input is a typed error, never a panic.
#[test]
fn bad_bandwidths_are_typed_errors() {
    let e = Engine::cpu();
    let x = Array2::from_shape_fn((5, 2), |(i, k)| (i + k) as f32);
    let q = Array2::from_shape_fn((3, 2), |(i, k)| (i * k) as f32);
    let y = Array2::<f32>::ones((5, 1));
    let bad = |bw: VariableBandwidth| {
        let a = e.local_mean_variable(Profile::Gaussian, &bw, q.view(), x.view(), y.view());
        let b = e.log_density_variable(Profile::Epanechnikov, &bw, q.view(), x.view());
        for r in [a.map(|_| ()), b.map(|_| ())] {
            assert!(
                matches!(
                    r,
                    Err(Error::InvalidParameter {
                        name: "bandwidths",
                        ..
                    })
                ),
                "{bw:?}: {r:?}"
            );
        }
    };
    bad(VariableBandwidth::PerKey(vec![1.0; 4]));
    bad(VariableBandwidth::PerKey(vec![1.0; 3]));
    bad(VariableBandwidth::PerQuery(vec![1.0; 5]));
    for v in [0.0, -1.0, f32::NAN, f32::INFINITY, 1e-20, 1e20] {
        bad(VariableBandwidth::PerKey(vec![1.0, 1.0, v, 1.0, 1.0]));
        bad(VariableBandwidth::PerQuery(vec![1.0, v, 1.0]));
    }
    // Shapes and values are checked as for fixed bandwidths.
    let ok = VariableBandwidth::PerKey(vec![1.0; 5]);
    let wrong_d = Array2::<f32>::zeros((3, 3));
    assert!(matches!(
        e.local_mean_variable(Profile::Gaussian, &ok, wrong_d.view(), x.view(), y.view()),
        Err(Error::DimensionMismatch { .. })
    ));
    let mut nan = q.clone();
    nan[[0, 0]] = f32::NAN;
    assert!(matches!(
        e.log_density_variable(Profile::Gaussian, &ok, nan.view(), x.view()),
        Err(Error::NonFinite { .. })
    ));
    assert!(matches!(
        e.log_density_variable(Profile::Cauchy, &ok, q.view(), x.view()),
        Err(Error::Unsupported { .. })
    ));
    // The rules.
    let param = |r: locus::Result<Vec<f32>>, name: &str| match r {
        Err(Error::InvalidParameter { name: n, .. }) => assert_eq!(n, name),
        other => panic!("{name}: {other:?}"),
    };
    param(e.knn_bandwidths(x.view(), 0, 1.0), "k");
    param(e.knn_bandwidths(x.view(), 5, 1.0), "k");
    param(e.knn_bandwidths(x.view(), 1, 0.0), "alpha");
    param(e.knn_bandwidths(x.view(), 1, f32::NAN), "alpha");
    param(e.balloon_bandwidths(q.view(), x.view(), 0, 1.0), "k");
    let dup = Array2::from_shape_fn((4, 1), |(i, _)| if i < 3 { 1.0 } else { 2.0 });
    param(e.knn_bandwidths(dup.view(), 2, 1.0), "k");
    assert!(e.knn_bandwidths(dup.view(), 3, 1.0).is_ok());
    assert!(matches!(
        e.balloon_bandwidths(q.view(), x.view(), 6, 1.0),
        Err(Error::InvalidParameter { .. })
    ));
}
