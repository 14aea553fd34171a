//! Local linear regression, local PCA and score estimates: CPU and GPU
//! against plain f64 references.
#![allow(clippy::needless_range_loop)] // index loops mirror the formulas

mod common;

use common::*;
use locus::{Engine, Error, Kernel, Profile};
use ndarray::{Array2, Array3, ArrayView1};

fn engines() -> Vec<(&'static str, Engine)> {
    engines_and_tiny_tiles(7, 13)
}

fn sq(a: ArrayView1<f32>, b: ArrayView1<f32>) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2))
        .sum()
}

/// f64 weights of one query (relative to the largest, so exponential
/// profiles cannot underflow).
fn weights(k: &Kernel, q: ArrayView1<f32>, x: &Array2<f32>) -> Vec<f64> {
    let h = f64::from(k.bandwidth());
    let p = k.profile();
    let lw: Vec<f64> = x
        .rows()
        .into_iter()
        .map(|xj| {
            let t = sq(q, xj) / (h * h);
            p.log_eval_sq(t).unwrap_or_else(|| p.eval_sq(t).ln())
        })
        .collect();
    let m = lw.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    lw.iter().map(|&l| (l - m).exp()).collect()
}

/// Solves `a z = b` (n × n, f64) by Gaussian elimination with partial
/// pivoting.
fn solve(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Vec<f64> {
    let n = b.len();
    for c in 0..n {
        let p = (c..n)
            .max_by(|&i, &j| a[i][c].abs().total_cmp(&a[j][c].abs()))
            .unwrap();
        a.swap(c, p);
        b.swap(c, p);
        for r in c + 1..n {
            let f = a[r][c] / a[c][c];
            for k in c..n {
                a[r][k] -= f * a[c][k];
            }
            b[r] -= f * b[c];
        }
    }
    let mut z = vec![0.0; n];
    for c in (0..n).rev() {
        let s: f64 = (c + 1..n).map(|k| a[c][k] * z[k]).sum();
        z[c] = (b[c] - s) / a[c][c];
    }
    z
}

/// Weighted least squares of `y ≈ a + bᵀ(x − q)` per query, in f64:
/// fitted `M × q` and slopes `M × q × d`.
fn ref_local_linear(
    k: &Kernel,
    qs: &Array2<f32>,
    x: &Array2<f32>,
    y: &Array2<f32>,
) -> (Array2<f64>, Array3<f64>) {
    let (m, d, qy) = (qs.nrows(), x.ncols(), y.ncols());
    let mut fit = Array2::zeros((m, qy));
    let mut slopes = Array3::zeros((m, qy, d));
    for (i, q) in qs.rows().into_iter().enumerate() {
        let w = weights(k, q, x);
        let mut a = vec![vec![0.0; d + 1]; d + 1];
        let mut rhs = vec![vec![0.0; d + 1]; qy];
        for (j, xj) in x.rows().into_iter().enumerate() {
            let mut z = vec![1.0];
            z.extend((0..d).map(|t| f64::from(xj[t]) - f64::from(q[t])));
            for r in 0..=d {
                for c in 0..=d {
                    a[r][c] += w[j] * z[r] * z[c];
                }
                for (cy, rh) in rhs.iter_mut().enumerate() {
                    rh[r] += w[j] * z[r] * f64::from(y[[j, cy]]);
                }
            }
        }
        for (cy, rh) in rhs.into_iter().enumerate() {
            let beta = solve(a.clone(), rh);
            fit[[i, cy]] = beta[0];
            for t in 0..d {
                slopes[[i, cy, t]] = beta[1 + t];
            }
        }
    }
    (fit, slopes)
}

fn smooth_data(seed: u64, n: usize, d: usize) -> (Array2<f32>, Array2<f32>) {
    let mut rng = Rng::new(seed);
    let x = rng.matrix(n, d, -1.0, 1.0);
    let y = Array2::from_shape_fn((n, 2), |(j, c)| {
        let r = x.row(j);
        let base: f32 = r
            .iter()
            .enumerate()
            .map(|(t, v)| (t as f32 + 1.0) * v)
            .sum();
        if c == 0 {
            base.sin() + 0.05 * rng.uniform() + 3.0
        } else {
            r.iter().map(|v| v * v).sum::<f32>() - 10.0
        }
    });
    (x, y)
}

#[test]
fn local_linear_matches_the_weighted_least_squares_reference() {
    for (name, e) in engines() {
        for (seed, d, n, m) in [
            (1u64, 1usize, 300usize, 41usize),
            (2, 2, 400, 37),
            (3, 3, 500, 29),
        ] {
            let (x, y) = smooth_data(seed, n, d);
            let q = Rng::new(seed + 100).matrix(m, d, -0.9, 0.9);
            for (p, h) in [
                (Profile::Gaussian, 0.3f32),
                (Profile::Epanechnikov, 0.8),
                (Profile::Biweight, 0.9),
                (Profile::Laplacian, 0.4),
                (Profile::Cauchy, 0.3),
                (Profile::Cosine, 0.8),
            ] {
                let k = Kernel::new(p, h).unwrap();
                let got = e
                    .local_polynomial(&k, q.view(), x.view(), y.view(), 1)
                    .unwrap();
                let (fit, slopes) = ref_local_linear(&k, &q, &x, &y);
                let what = format!("{name} {p:?} d={d}");
                assert_eq!(got.empty_rows, 0, "{what}");
                assert_eq!(got.rank_deficient_rows, 0, "{what}");
                assert_close(&format!("{what} fitted"), &got.fitted, &fit, 1e-4, 1e-4);
                let gs = got.slopes.unwrap();
                let gs2 = gs.to_shape((m, 2 * d)).unwrap().to_owned();
                let ws2 = slopes.to_shape((m, 2 * d)).unwrap().to_owned();
                assert_close(&format!("{what} slopes"), &gs2, &ws2, 1e-3, 1e-3);
            }
        }
    }
}

#[test]
fn degree_zero_is_the_local_mean_and_degree_two_is_refused() {
    let (x, y) = smooth_data(7, 200, 2);
    let k = Kernel::gaussian(0.3).unwrap();
    for (name, e) in engines() {
        let fit = e
            .local_polynomial(&k, x.view(), x.view(), y.view(), 0)
            .unwrap();
        let mean = e.local_mean(&k, x.view(), x.view(), y.view()).unwrap();
        assert_eq!(fit.fitted, mean.values, "{name}");
        assert!(fit.slopes.is_none());
        let err = e
            .local_polynomial(&k, x.view(), x.view(), y.view(), 2)
            .unwrap_err();
        assert!(
            matches!(err, Error::InvalidParameter { name: "degree", .. }),
            "{err}"
        );
    }
}

#[test]
fn a_linear_function_is_reproduced_exactly_where_the_local_mean_is_biased() {
    // Local linear regression has no boundary bias for a linear target.
    let n = 400;
    let x = Array2::from_shape_fn((n, 1), |(j, _)| j as f32 / (n - 1) as f32);
    let y = x.mapv(|v| 2.0 * v - 1.0);
    let q = Array2::from_shape_vec((3, 1), vec![0.0f32, 0.5, 1.0]).unwrap();
    let k = Kernel::gaussian(0.1).unwrap();
    for (name, e) in engines() {
        let lin = e
            .local_polynomial(&k, q.view(), x.view(), y.view(), 1)
            .unwrap();
        let nw = e
            .local_polynomial(&k, q.view(), x.view(), y.view(), 0)
            .unwrap();
        for (i, want) in [-1.0f32, 0.0, 1.0].into_iter().enumerate() {
            assert!(
                (lin.fitted[[i, 0]] - want).abs() < 1e-4,
                "{name}: {}",
                lin.fitted
            );
            assert!((lin.slopes.as_ref().unwrap()[[i, 0, 0]] - 2.0).abs() < 1e-3);
        }
        // The local mean is pulled inwards at both ends.
        assert!(
            nw.fitted[[0, 0]] > -0.9 && nw.fitted[[2, 0]] < 0.9,
            "{name}"
        );
    }
}

#[test]
fn rank_deficient_designs_are_counted_and_solved_along_the_keys() {
    // Keys on the line x₂ = 2x₁ in the plane: the local design spans one
    // direction. The fit follows y along the line; the slope across it is 0.
    let n = 200;
    let t: Vec<f32> = (0..n).map(|j| j as f32 / n as f32).collect();
    let x = Array2::from_shape_fn((n, 2), |(j, c)| if c == 0 { t[j] } else { 2.0 * t[j] });
    let y = Array2::from_shape_fn((n, 1), |(j, _)| 3.0 * t[j] + 1.0);
    let q = Array2::from_shape_vec((2, 2), vec![0.5f32, 1.0, 0.25, 0.5]).unwrap();
    let k = Kernel::gaussian(0.2).unwrap();
    for (name, e) in engines() {
        let got = e
            .local_polynomial(&k, q.view(), x.view(), y.view(), 1)
            .unwrap();
        assert_eq!(got.rank_deficient_rows, 2, "{name}");
        assert!(
            (got.fitted[[0, 0]] - 2.5).abs() < 1e-4,
            "{name}: {}",
            got.fitted
        );
        assert!(
            (got.fitted[[1, 0]] - 1.75).abs() < 1e-4,
            "{name}: {}",
            got.fitted
        );
        // Minimum-norm slopes along (1, 2)/√5: dy/dt = 3 over |d x/dt| = √5.
        let s = got.slopes.unwrap();
        assert!(
            (s[[0, 0, 0]] - 0.6).abs() < 1e-3 && (s[[0, 0, 1]] - 1.2).abs() < 1e-3,
            "{s}"
        );
    }
}

#[test]
fn empty_and_far_rows() {
    let (x, y) = smooth_data(9, 100, 2);
    let far = Array2::from_shape_vec((2, 2), vec![50.0f32, 50.0, 0.0, 0.0]).unwrap();
    for (name, e) in engines() {
        // Compact: no key in reach → NaN, counted.
        let k = Kernel::new(Profile::Epanechnikov, 0.5).unwrap();
        let got = e
            .local_polynomial(&k, far.view(), x.view(), y.view(), 1)
            .unwrap();
        assert_eq!(got.empty_rows, 1, "{name}");
        assert!(got.fitted.row(0).iter().all(|v| v.is_nan()));
        assert!(got.fitted.row(1).iter().all(|v| v.is_finite()));
        // Gaussian with every key beyond the far cut: the nearest key's
        // value (a one-key design: rank-deficient, the local mean).
        let k = Kernel::gaussian(1e-18).unwrap();
        let got = e
            .local_polynomial(&k, far.view(), x.view(), y.view(), 1)
            .unwrap();
        assert_eq!(got.empty_rows, 0, "{name}");
        assert_eq!(got.rank_deficient_rows, 2, "{name}");
        for i in 0..2 {
            let nearest = (0..x.nrows())
                .min_by(|&a, &b| sq(far.row(i), x.row(a)).total_cmp(&sq(far.row(i), x.row(b))))
                .unwrap();
            assert_eq!(got.fitted.row(i), y.row(nearest), "{name} row {i}");
        }
    }
}

fn ref_cov(k: &Kernel, q: ArrayView1<f32>, x: &Array2<f32>) -> (Vec<f64>, Vec<Vec<f64>>) {
    let d = x.ncols();
    let w = weights(k, q, x);
    let sw: f64 = w.iter().sum();
    let mean: Vec<f64> = (0..d)
        .map(|a| {
            x.column(a)
                .iter()
                .zip(&w)
                .map(|(&v, w)| w * f64::from(v))
                .sum::<f64>()
                / sw
        })
        .collect();
    let cov = (0..d)
        .map(|a| {
            (0..d)
                .map(|b| {
                    x.rows()
                        .into_iter()
                        .zip(&w)
                        .map(|(r, w)| w * (f64::from(r[a]) - mean[a]) * (f64::from(r[b]) - mean[b]))
                        .sum::<f64>()
                        / sw
                })
                .collect()
        })
        .collect();
    (mean, cov)
}

#[test]
fn local_pca_matches_the_weighted_covariance() {
    // Points near a circle: the leading local direction is its tangent.
    let n = 600;
    let mut rng = Rng::new(21);
    let x = Array2::from_shape_fn((n, 3), |(j, c)| {
        let a = j as f32 / n as f32 * std::f32::consts::TAU;
        match c {
            0 => 5.0 + a.cos(),
            1 => -3.0 + a.sin(),
            _ => 0.02 * (rng.uniform() - 0.5),
        }
    });
    let q = Rng::new(22).matrix(17, 3, -0.5, 0.5) + &ndarray::array![5.0f32, -3.0, 0.0];
    for (name, e) in engines() {
        for (p, h) in [(Profile::Gaussian, 0.3f32), (Profile::Biweight, 1.2)] {
            let k = Kernel::new(p, h).unwrap();
            let got = e.local_pca(&k, q.view(), x.view(), 3).unwrap();
            assert_eq!(got.empty_rows, 0);
            for i in 0..q.nrows() {
                let (mean, cov) = ref_cov(&k, q.row(i), &x);
                let what = format!("{name} {p:?} row {i}");
                for a in 0..3 {
                    assert!(
                        (f64::from(got.means[[i, a]]) - mean[a]).abs() < 1e-4,
                        "{what}"
                    );
                }
                let scale = cov[0][0] + cov[1][1] + cov[2][2];
                let trace: f64 = got.variances.row(i).iter().map(|&v| f64::from(v)).sum();
                assert!((trace - scale).abs() < 1e-4 * scale.max(1e-3), "{what}");
                for c in 0..3 {
                    let v = got.components.slice(ndarray::s![i, c, ..]);
                    let lam = f64::from(got.variances[[i, c]]);
                    for a in 0..3 {
                        let cv: f64 = (0..3).map(|b| cov[a][b] * f64::from(v[b])).sum();
                        assert!(
                            (cv - lam * f64::from(v[a])).abs() < 2e-4 * scale,
                            "{what} c={c}"
                        );
                    }
                    let big = v
                        .iter()
                        .copied()
                        .fold(0.0f32, |m, x| if x.abs() > m.abs() { x } else { m });
                    assert!(big > 0.0, "{what}: sign");
                }
            }
        }
        let k = Kernel::gaussian(0.3).unwrap();
        let err = e.local_pca(&k, q.view(), x.view(), 4).unwrap_err();
        assert!(matches!(
            err,
            Error::InvalidParameter {
                name: "components",
                ..
            }
        ));
    }
}

/// f64 score: Σ k′(t_j)·2(q − x_j)/h² / Σ k(t_j) from the analytic derivative.
fn ref_score(k: &Kernel, q: &Array2<f32>, x: &Array2<f32>) -> Array2<f64> {
    let h = f64::from(k.bandwidth());
    let d = x.ncols();
    Array2::from_shape_fn((q.nrows(), d), |(i, a)| {
        let (mut num, mut den) = (0.0, 0.0);
        for xj in x.rows() {
            let t = sq(q.row(i), xj) / (h * h);
            let (kv, dk) = match k.profile() {
                Profile::Gaussian => ((-t / 2.0).exp(), -0.5 * (-t / 2.0).exp()),
                Profile::Epanechnikov => ((1.0 - t).max(0.0), if t < 1.0 { -1.0 } else { 0.0 }),
                Profile::Biweight => ((1.0 - t).max(0.0).powi(2), -2.0 * (1.0 - t).max(0.0)),
                _ => unreachable!(),
            };
            den += kv;
            num += dk * 2.0 * (f64::from(q[[i, a]]) - f64::from(xj[a])) / (h * h);
        }
        num / den
    })
}

#[test]
fn scores_match_the_derivative_of_the_density() {
    let x = Rng::new(31).matrix(400, 2, 10.0, 12.0);
    let q = Rng::new(32).matrix(23, 2, 10.3, 11.7);
    for (name, e) in engines() {
        for (p, h) in [
            (Profile::Gaussian, 0.3f32),
            (Profile::Epanechnikov, 0.7),
            (Profile::Biweight, 0.8),
        ] {
            let k = Kernel::new(p, h).unwrap();
            let got = e.score(&k, q.view(), x.view()).unwrap();
            let want = ref_score(&k, &q, &x);
            let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            assert_close(
                &format!("{name} {p:?} score"),
                &got.values,
                &want,
                1e-4,
                1e-4 * scale,
            );
        }
        // Tweedie with σ = h, gaussian: the local mean.
        let k = Kernel::gaussian(0.3).unwrap();
        let den = e.denoise(&k, q.view(), x.view(), 0.3).unwrap();
        let mean = e.local_mean(&k, q.view(), x.view(), x.view()).unwrap();
        let diff = (&den.values - &mean.values)
            .mapv(f32::abs)
            .fold(0.0f32, |m, &v| m.max(v));
        assert!(diff < 1e-4, "{name}: {diff}");
        for p in [
            Profile::Uniform,
            Profile::Triangular,
            Profile::Laplacian,
            Profile::Cauchy,
            Profile::Cosine,
        ] {
            let k = Kernel::new(p, 0.5).unwrap();
            let err = e.score(&k, q.view(), x.view()).unwrap_err();
            assert!(
                matches!(err, Error::InvalidParameter { name: "kernel", .. }),
                "{err}"
            );
        }
        let err = e.denoise(&k, q.view(), x.view(), 0.0).unwrap_err();
        assert!(matches!(
            err,
            Error::InvalidParameter {
                name: "noise_std",
                ..
            }
        ));
    }
}

#[test]
fn local_model_limits_are_typed_errors() {
    let e = Engine::cpu();
    let k = Kernel::gaussian(1.0).unwrap();
    let wide = Array2::<f32>::zeros((3, 65));
    let y = Array2::<f32>::zeros((3, 1));
    let err = e
        .local_polynomial(&k, wide.view(), wide.view(), y.view(), 1)
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidParameter {
                name: "dimension",
                ..
            }
        ),
        "{err}"
    );
    let mut big = Array2::<f32>::zeros((3, 2));
    big[[1, 1]] = 1e13;
    let err = e.local_pca(&k, big.view(), big.view(), 1).unwrap_err();
    assert!(
        matches!(err, Error::InvalidParameter { name: "inputs", .. }),
        "{err}"
    );
    let x = Array2::<f32>::zeros((3, 2));
    let y2 = Array2::<f32>::zeros((4, 1));
    let err = e
        .local_polynomial(&k, x.view(), x.view(), y2.view(), 1)
        .unwrap_err();
    assert!(matches!(err, Error::RowMismatch { .. }), "{err}");
}

/// A key set's tiles serve its moment passes at d ≥ 32 too, where the
/// local means take inner-product tiles (whose loop budget the moment
/// passes do not share): 700 keys, more than one tile on a software
/// adapter.
#[test]
fn key_sets_fit_at_high_d() {
    let mut rng = Rng::new(43);
    let x = rng.matrix(700, 40, 0.0, 1.0);
    let y = rng.matrix(700, 2, -1.0, 1.0);
    let q = rng.matrix(9, 40, 0.0, 1.0);
    let k = Kernel::new(Profile::Gaussian, 2.5).unwrap();
    for (name, e) in engines() {
        let ks = e.prepare(x.view()).values(y.view()).build().unwrap();
        let one = e
            .local_polynomial(&k, q.view(), x.view(), y.view(), 1)
            .unwrap();
        let got = ks.local_polynomial(&k, q.view(), 1).unwrap();
        let what = format!("{name} d=40 key set");
        assert_close(&what, &got.fitted, &one.fitted.mapv(f64::from), 1e-4, 1e-4);
        let pca = ks.local_pca(&k, q.view(), 2).unwrap();
        let want = e.local_pca(&k, q.view(), x.view(), 2).unwrap();
        assert_close(&what, &pca.means, &want.means.mapv(f64::from), 1e-5, 1e-5);
    }
}

#[test]
fn key_sets_fit_as_the_one_shot_ops() {
    let (x, y) = smooth_data(41, 400, 3);
    let q = Rng::new(42).matrix(23, 3, -0.8, 0.8);
    for (name, e) in engines() {
        let ks = e.prepare(x.view()).values(y.view()).build().unwrap();
        for (p, h) in [(Profile::Gaussian, 0.4f32), (Profile::Biweight, 0.9)] {
            let k = Kernel::new(p, h).unwrap();
            let one = e
                .local_polynomial(&k, q.view(), x.view(), y.view(), 1)
                .unwrap();
            let got = ks.local_polynomial(&k, q.view(), 1).unwrap();
            let what = format!("{name} {p:?} key set");
            assert_eq!(got.empty_rows, one.empty_rows, "{what}");
            assert_close(&what, &got.fitted, &one.fitted.mapv(f64::from), 1e-4, 1e-4);
            let (gs, os) = (got.slopes.unwrap(), one.slopes.unwrap());
            let flat = |a: &Array3<f32>| a.to_shape((23, 6)).unwrap().to_owned();
            assert_close(&what, &flat(&gs), &flat(&os).mapv(f64::from), 1e-3, 1e-3);
            let zero = ks.local_polynomial(&k, q.view(), 0).unwrap();
            assert_eq!(zero.fitted, ks.local_mean(&k, q.view()).unwrap().values);
            let pca = ks.local_pca(&k, q.view(), 2).unwrap();
            let want = e.local_pca(&k, q.view(), x.view(), 2).unwrap();
            assert_close(
                &what,
                &pca.variances,
                &want.variances.mapv(f64::from),
                1e-3,
                1e-6,
            );
            assert_close(&what, &pca.means, &want.means.mapv(f64::from), 1e-5, 1e-5);
        }
        let bare = e.prepare(x.view()).build().unwrap();
        let k = Kernel::gaussian(0.4).unwrap();
        let err = bare.local_polynomial(&k, q.view(), 1).unwrap_err();
        assert!(
            matches!(err, Error::InvalidParameter { name: "values", .. }),
            "{err}"
        );
        let err = ks.local_pca(&k, q.view(), 4).unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidParameter {
                    name: "components",
                    ..
                }
            ),
            "{err}"
        );
    }
}

#[test]
fn moments_about_the_local_mean_keep_far_queries_and_odd_scales_exact() {
    // A query far off a one-dimensional key set: moments about the query
    // would cancel (offsets of 10 against a spread of 0 across the line).
    let n = 4000;
    let x = Array2::from_shape_fn(
        (n, 2),
        |(j, c)| if c == 0 { j as f32 / n as f32 } else { 0.0 },
    );
    let y = Array2::from_shape_fn((n, 1), |(j, _)| {
        let t = j as f32 / n as f32;
        3.0 * t + 0.1 * (20.0 * t).sin()
    });
    let q = Array2::from_shape_vec((1, 2), vec![0.2f32, 10.0]).unwrap();
    let k = Kernel::gaussian(1.0).unwrap();
    // Extrapolating a line far beyond its keys; and coordinates near 1e-22.
    let line_x = Array2::from_shape_fn((101, 1), |(j, _)| j as f32 / 100.0);
    let line_y = line_x.mapv(|v| 2.0 * v + 1.0);
    let far_q = Array2::from_shape_vec((2, 1), vec![5.0f32, 20.0]).unwrap();
    let tiny_x = line_x.mapv(|v| v * 1e-22);
    let tiny_q = Array2::from_shape_vec((1, 1), vec![0.0f32]).unwrap();
    for (name, e) in engines() {
        let got = e
            .local_polynomial(&k, q.view(), x.view(), y.view(), 1)
            .unwrap();
        let (want, _) = ref_local_linear_1d_line(&x, &y, 0.2, 10.0);
        assert!(
            (f64::from(got.fitted[[0, 0]]) - want).abs() < 1e-4 * want.abs(),
            "{name}: {} vs {want}",
            got.fitted[[0, 0]]
        );
        assert_eq!(
            got.rank_deficient_rows, 1,
            "{name}: the design spans one direction"
        );
        let kh = Kernel::gaussian(0.5).unwrap();
        let got = e
            .local_polynomial(&kh, far_q.view(), line_x.view(), line_y.view(), 1)
            .unwrap();
        assert_eq!(got.rank_deficient_rows, 0, "{name}");
        for (i, want) in [11.0f32, 41.0].into_iter().enumerate() {
            let g = got.fitted[[i, 0]];
            assert!((g - want).abs() < 1e-4 * want, "{name}: {g} vs {want}");
        }
        let kt = Kernel::gaussian(1e-18).unwrap();
        let got = e
            .local_polynomial(&kt, tiny_q.view(), tiny_x.view(), line_y.view(), 1)
            .unwrap();
        let (g, s) = (got.fitted[[0, 0]], got.slopes.unwrap()[[0, 0, 0]]);
        assert!((g - 1.0).abs() < 1e-4, "{name}: fit {g}");
        assert!((s / 2e22 - 1.0).abs() < 1e-3, "{name}: slope {s}");
    }
}

/// The local linear fit at (qx, qy) over keys on the line x₂ = 0, in f64:
/// the design spans x₁ only, so the minimum-norm fit is the 1-D weighted
/// least-squares line in x₁ evaluated at qx (x₂'s weight factor is the
/// same for every key).
fn ref_local_linear_1d_line(x: &Array2<f32>, y: &Array2<f32>, qx: f64, _qy: f64) -> (f64, f64) {
    let (mut s0, mut s1, mut s2, mut t0, mut t1) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for j in 0..x.nrows() {
        let r = f64::from(x[[j, 0]]) - qx;
        let w = (-r * r / 2.0).exp();
        let v = f64::from(y[[j, 0]]);
        s0 += w;
        s1 += w * r;
        s2 += w * r * r;
        t0 += w * v;
        t1 += w * r * v;
    }
    let b = (s0 * t1 - s1 * t0) / (s0 * s2 - s1 * s1);
    ((t0 - b * s1) / s0, b)
}

#[test]
fn many_value_columns_stage_their_windows_on_every_backend() {
    // Passes of 8 columns cut the values' groups at every offset: the GPU
    // stages only the value columns a pass touches.
    for (d, qy) in [(1usize, 9usize), (1, 17), (2, 40), (3, 11)] {
        let mut rng = Rng::new(60 + d as u64 * 7 + qy as u64);
        let x = rng.matrix(150, d, -1.0, 1.0);
        let y = Array2::from_shape_fn((150, qy), |(j, c)| {
            let s: f32 = x.row(j).iter().map(|v| v * (c as f32 + 1.0)).sum();
            s.sin() + c as f32
        });
        let q = rng.matrix(11, d, -0.8, 0.8);
        let k = Kernel::gaussian(0.5).unwrap();
        let (fit, slopes) = ref_local_linear(&k, &q, &x, &y);
        for (name, e) in engines() {
            let got = e
                .local_polynomial(&k, q.view(), x.view(), y.view(), 1)
                .unwrap();
            let what = format!("{name} d={d} qy={qy}");
            assert_close(&what, &got.fitted, &fit, 1e-4, 1e-4);
            let gs = got
                .slopes
                .unwrap()
                .to_shape((11, qy * d))
                .unwrap()
                .to_owned();
            let ws = slopes.to_shape((11, qy * d)).unwrap().to_owned();
            assert_close(&what, &gs, &ws, 1e-3, 1e-3);
        }
    }
}
