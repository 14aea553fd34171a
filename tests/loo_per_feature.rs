//! Leave-one-out error with per-feature bandwidths and its gradient in
//! `ln h`: CPU and GPU against a plain f64 reference, the reference's
//! gradient against central differences of its error, and the search.

mod common;

use common::*;
use locus::{Engine, Error, PerFeatureOptions, Profile};
use ndarray::Array2;

fn engines() -> Vec<(&'static str, &'static Engine)> {
    let mut v = vec![("cpu", cpu())];
    if let Some(g) = gpu() {
        v.push(("gpu", g));
    }
    v
}

/// `E(h)`, `∂E/∂ln h` and the rows without a prediction, straight from
/// the definition in f64: `K_ij = k(Σ_a ((x_ia − x_ja)/h_a)²)`,
/// `∂K_ij/∂ln h_a = −2 k'(t) u_a²`.
fn reference(p: Profile, x: &Array2<f32>, y: &Array2<f32>, h: &[f64]) -> (f64, Vec<f64>, usize) {
    let (n, d, q) = (x.nrows(), x.ncols(), y.ncols());
    let f = |a: &Array2<f32>, i: usize, c: usize| f64::from(a[[i, c]]);
    let mut total = 0.0;
    let mut grad = vec![0.0; d];
    let mut counted = 0;
    for i in 0..n {
        let mut s = 0.0;
        let mut w = vec![0.0; q];
        let mut ds = vec![0.0; d];
        let mut dw = vec![vec![0.0; q]; d];
        for j in (0..n).filter(|&j| j != i) {
            let u: Vec<f64> = (0..d).map(|a| (f(x, j, a) - f(x, i, a)) / h[a]).collect();
            let t: f64 = u.iter().map(|v| v * v).sum();
            let k = p.eval_sq(t);
            let kp = if p.is_exponential() {
                p.slope_sq(t) * k
            } else {
                p.slope_sq(t)
            };
            s += k;
            for (c, wc) in w.iter_mut().enumerate() {
                *wc += k * f(y, j, c);
            }
            for (a, dwa) in dw.iter_mut().enumerate() {
                let dk = -2.0 * kp * u[a] * u[a];
                ds[a] += dk;
                for (c, v) in dwa.iter_mut().enumerate() {
                    *v += dk * f(y, j, c);
                }
            }
        }
        if s <= 0.0 {
            continue;
        }
        counted += 1;
        for c in 0..q {
            let m = w[c] / s;
            let r = f(y, i, c) - m;
            total += r * r;
            for a in 0..d {
                let dm = (dw[a][c] - m * ds[a]) / s;
                grad[a] += -2.0 * r * dm;
            }
        }
    }
    let nn = counted as f64;
    (
        total / nn,
        grad.iter().map(|g| g / nn).collect(),
        n - counted,
    )
}

fn data(seed: u64, n: usize, d: usize, q: usize) -> (Array2<f32>, Array2<f32>) {
    let mut rng = Rng::new(seed);
    let x = rng.matrix(n, d, -1.0, 1.0);
    let noise = rng.matrix(n, q, -0.1, 0.1);
    let y = Array2::from_shape_fn((n, q), |(i, c)| {
        (2.0 * x[[i, 0]] + c as f32).sin() + x[[i, d - 1]] * x[[i, d - 1]] + noise[[i, c]]
    });
    (x, y)
}

const DIFFERENTIABLE: [Profile; 7] = [
    Profile::Gaussian,
    Profile::Epanechnikov,
    Profile::Triangular,
    Profile::Biweight,
    Profile::Laplacian,
    Profile::Cauchy,
    Profile::Cosine,
];

/// The reference's gradient is the derivative of its error: central
/// differences in `ln h_a` for every differentiable profile.
#[test]
fn reference_gradient_matches_central_differences() {
    let (x, y) = data(1, 60, 3, 2);
    let h = [0.7, 1.1, 1.6];
    for p in DIFFERENTIABLE {
        let (e, g, _) = reference(p, &x, &y, &h);
        for a in 0..3 {
            let step = 1e-5;
            let at = |s: f64| {
                let mut hh = h;
                hh[a] *= s.exp();
                reference(p, &x, &y, &hh).0
            };
            let fd = (at(step) - at(-step)) / (2.0 * step);
            assert!(
                (fd - g[a]).abs() <= 1e-5 * g[a].abs().max(1e-3 * e),
                "{p} feature {a}: analytic {} vs differences {fd}",
                g[a]
            );
        }
    }
}

/// Error and gradient of both backends against the reference, for
/// every differentiable profile, supervised and self-supervised; the
/// empty rows counted alike.
#[test]
fn error_and_gradient_match_the_reference() {
    // 300 rows: more than one CPU key block.
    let (x, y) = data(2, 300, 3, 2);
    let h = [0.45f32, 0.8, 1.3];
    let hd: Vec<f64> = h.iter().map(|&v| f64::from(v)).collect();
    for (name, e) in engines() {
        for p in DIFFERENTIABLE {
            for (what, values) in [("supervised", Some(&y)), ("self", None)] {
                let targets = values.unwrap_or(&x);
                let (want, wg, wempty) = reference(p, &x, targets, &hd);
                let got = e
                    .loo_error_per_feature(p, &h, x.view(), values.map(|v| v.view()))
                    .unwrap();
                assert_eq!(got.empty_rows, wempty, "{name} {p} {what}");
                assert!(
                    (got.error - want).abs() <= 1e-4 * want,
                    "{name} {p} {what}: error {} vs {want}",
                    got.error
                );
                let scale = wg.iter().fold(0.0f64, |a, &v| a.max(v.abs()));
                for (a, (&gg, &w)) in got.gradient.iter().zip(&wg).enumerate() {
                    assert!(
                        (gg - w).abs() <= 1e-3 * scale + 1e-6 * want,
                        "{name} {p} {what} feature {a}: {gg} vs {w}"
                    );
                }
                assert_eq!(got.bandwidths, h);
            }
        }
    }
}

/// Enough keys that the GPU sweeps them in several windows under
/// lavapipe's loop budget (merged like key tiles) and the CPU in several
/// blocks.
#[test]
fn many_keys_merge_across_windows() {
    let (x, y) = data(3, 2300, 3, 2);
    let h = [0.2f32, 0.3, 0.5];
    let hd: Vec<f64> = h.iter().map(|&v| f64::from(v)).collect();
    for p in [Profile::Gaussian, Profile::Biweight] {
        let (want, wg, _) = reference(p, &x, &y, &hd);
        let scale = wg.iter().fold(0.0f64, |a, &v| a.max(v.abs()));
        for (name, e) in engines() {
            let got = e
                .loo_error_per_feature(p, &h, x.view(), Some(y.view()))
                .unwrap();
            assert!((got.error - want).abs() <= 1e-4 * want, "{name} {p}");
            for (&gg, &w) in got.gradient.iter().zip(&wg) {
                assert!((gg - w).abs() <= 1e-3 * scale, "{name} {p}: {gg} vs {w}");
            }
        }
    }
}

/// Bandwidths so small that every key lies beyond the f32 range of `t`:
/// the rows are finished in f64 and predict the nearest point's target
/// (gaussian, laplacian), whose error no bandwidth change alters.
#[test]
fn far_rows_are_finished_in_f64() {
    // A jittered grid 10 apart: with these bandwidths every pair lies at
    // t ≥ 1.6·10³⁷, beyond T_FAR, so every row is a far row.
    let mut rng = Rng::new(4);
    let jitter = rng.matrix(40, 2, 0.0, 1.0);
    let x = Array2::from_shape_fn((40, 2), |(i, a)| {
        let cell = if a == 0 { i % 7 } else { i / 7 };
        10.0 * cell as f32 + jitter[[i, a]]
    });
    let y = rng.matrix(40, 1, -1.0, 1.0);
    let h = [1e-18f32, 2e-18];
    for (name, e) in engines() {
        for p in [Profile::Gaussian, Profile::Laplacian, Profile::Cauchy] {
            let got = e
                .loo_error_per_feature(p, &h, x.view(), Some(y.view()))
                .unwrap();
            assert_eq!(got.empty_rows, 0, "{name} {p}");
            assert!(got.error.is_finite() && got.error > 0.0, "{name} {p}");
            assert!(got.gradient.iter().all(|g| g.is_finite()), "{name} {p}");
            if p != Profile::Cauchy {
                // The nearest point under the scaled metric.
                let want: f64 = (0..40)
                    .map(|i| {
                        let t = |j: usize| {
                            (0..2)
                                .map(|a| {
                                    (f64::from(x[[j, a]] - x[[i, a]]) / f64::from(h[a])).powi(2)
                                })
                                .sum::<f64>()
                        };
                        let nn = (0..40)
                            .filter(|&j| j != i)
                            .min_by(|&a, &b| t(a).total_cmp(&t(b)))
                            .unwrap();
                        f64::from(y[[i, 0]] - y[[nn, 0]]).powi(2)
                    })
                    .sum::<f64>()
                    / 40.0;
                assert!((got.error - want).abs() <= 1e-9 * want, "{name} {p}");
                assert!(got.gradient.iter().all(|g| g.abs() < 1e-9), "{name} {p}");
            }
        }
    }
}

/// Compact profiles with small bandwidths leave rows without a
/// prediction, counted as `loo_error` counts them.
#[test]
fn empty_rows_are_counted_as_loo_error_counts_them() {
    let (x, y) = data(5, 80, 2, 1);
    let h = [0.08f32, 0.08];
    for (name, e) in engines() {
        let got = e
            .loo_error_per_feature(Profile::Epanechnikov, &h, x.view(), Some(y.view()))
            .unwrap();
        let k = locus::Kernel::new(Profile::Epanechnikov, 0.08).unwrap();
        let scalar = e.loo_error(&k, x.view(), Some(y.view())).unwrap();
        assert!(got.empty_rows > 0, "{name}");
        assert_eq!(got.empty_rows, scalar.empty_rows, "{name}");
        assert!(
            (got.error - scalar.error).abs() <= 1e-4 * scalar.error,
            "{name}"
        );
    }
}

#[test]
fn bad_inputs_are_typed_errors() {
    let (x, y) = data(6, 20, 2, 1);
    let e = cpu();
    let uniform = e.loo_error_per_feature(Profile::Uniform, &[1.0, 1.0], x.view(), Some(y.view()));
    assert!(matches!(
        uniform,
        Err(Error::InvalidParameter {
            name: "profile",
            ..
        })
    ));
    let count = e.loo_error_per_feature(Profile::Gaussian, &[1.0], x.view(), Some(y.view()));
    assert!(matches!(
        count,
        Err(Error::InvalidParameter {
            name: "bandwidths",
            ..
        })
    ));
    let zero = e.loo_error_per_feature(Profile::Gaussian, &[1.0, 0.0], x.view(), Some(y.view()));
    assert!(matches!(zero, Err(Error::InvalidBandwidth { .. })));
    let rows = y.slice(ndarray::s![..10, ..]);
    let short = e.loo_error_per_feature(Profile::Gaussian, &[1.0, 1.0], x.view(), Some(rows));
    assert!(matches!(short, Err(Error::RowMismatch { .. })));
    let mut nan = x.clone();
    nan[[3, 1]] = f32::NAN;
    let bad = e.loo_error_per_feature(Profile::Gaussian, &[1.0, 1.0], nan.view(), None);
    assert!(matches!(bad, Err(Error::NonFinite { .. })));
    let opts = PerFeatureOptions {
        bound_factor: 1.0,
        ..PerFeatureOptions::default()
    };
    let r = e.select_bandwidths_per_feature(Profile::Gaussian, x.view(), None, &opts);
    assert!(matches!(
        r,
        Err(Error::InvalidParameter {
            name: "bound_factor",
            ..
        })
    ));
    let opts = PerFeatureOptions {
        max_iterations: 0,
        ..PerFeatureOptions::default()
    };
    let r = e.select_bandwidths_per_feature(Profile::Gaussian, x.view(), None, &opts);
    assert!(matches!(
        r,
        Err(Error::InvalidParameter {
            name: "max_iterations",
            ..
        })
    ));
    // The GPU's register sums are bounded; the CPU takes any size.
    let (wide, _) = data(7, 12, 33, 1);
    let h = vec![1.0f32; 33];
    assert!(
        e.loo_error_per_feature(Profile::Gaussian, &h, wide.view(), None)
            .is_ok()
    );
    if let Some(g) = gpu() {
        let r = g.loo_error_per_feature(Profile::Gaussian, &h, wide.view(), None);
        assert!(
            matches!(r, Err(Error::Unsupported { backend: "gpu", .. })),
            "{r:?}"
        );
    }
}

/// The search: a target that depends on the first feature only gives
/// the second (noise) a much larger bandwidth; the error never rises
/// along the trace and ends below the start's and below every scalar
/// bandwidth's; both backends agree.
#[test]
fn search_finds_the_relevant_feature() {
    let mut rng = Rng::new(8);
    let x = rng.matrix(200, 2, -1.0, 1.0);
    let noise = rng.matrix(200, 1, -0.05, 0.05);
    let y = Array2::from_shape_fn((200, 1), |(i, _)| (3.0 * x[[i, 0]]).sin() + noise[[i, 0]]);
    let mut errors = Vec::new();
    for (name, e) in engines() {
        let s = e
            .select_bandwidths_per_feature(
                Profile::Gaussian,
                x.view(),
                Some(y.view()),
                &PerFeatureOptions::default(),
            )
            .unwrap();
        assert!(s.converged, "{name}: {s:?}");
        assert!(
            s.bandwidths[1] > 5.0 * s.bandwidths[0],
            "{name}: {:?}",
            s.bandwidths
        );
        assert!(s.trace.windows(2).all(|w| w[1] <= w[0]), "{name}");
        assert!(s.error <= s.trace[0]);
        let hd: Vec<f64> = s.bandwidths.iter().map(|&v| f64::from(v)).collect();
        let (want, g, _) = reference(Profile::Gaussian, &x, &y, &hd);
        assert!((s.error - want).abs() <= 1e-4 * want, "{name}");
        // At the optimum (or a bound), the gradient is small.
        assert!(g.iter().all(|v| v.abs() < 1e-3 * want), "{name}: {g:?}");
        let candidates: Vec<f32> = (0..12).map(|k| 0.05 * 1.4f32.powi(k)).collect();
        let scalar = e
            .select_bandwidth(Profile::Gaussian, x.view(), Some(y.view()), &candidates)
            .unwrap();
        let best = scalar
            .curve
            .iter()
            .map(|c| c.error)
            .fold(f64::INFINITY, f64::min);
        assert!(s.error < best, "{name}: {} vs scalar {best}", s.error);
        errors.push(s.error);
    }
    if errors.len() == 2 {
        assert!(
            (errors[0] - errors[1]).abs() <= 1e-3 * errors[0],
            "{errors:?}"
        );
    }
    // Self-supervised runs too (paper Eq. 85), with the points as targets.
    let s = cpu()
        .select_bandwidths_per_feature(
            Profile::Cauchy,
            x.view(),
            None,
            &PerFeatureOptions::default(),
        )
        .unwrap();
    assert_eq!(s.bandwidths.len(), 2);
    assert!(s.error <= s.trace[0]);
}
