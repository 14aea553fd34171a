//! Missing-value imputation: CPU and GPU against a plain f64 reference.
#![allow(clippy::needless_range_loop)] // index loops mirror the formulas

mod common;

use common::*;
use locus::{Engine, Error, Kernel, Profile};
use ndarray::Array2;

fn engines() -> Vec<(&'static str, Engine)> {
    engines_and_tiny_tiles(5, 11)
}

/// Rows with ~`frac` of their entries NaN (never a whole column).
fn with_holes(seed: u64, n: usize, d: usize, frac: f32) -> (Array2<f32>, Array2<f32>) {
    let mut rng = Rng::new(seed);
    let full = Array2::from_shape_fn((n, d), |(j, c)| {
        (j as f32 * 0.37 + c as f32).sin() * 3.0 + rng.uniform()
    });
    let mut holed = full.clone();
    for j in 0..n {
        for c in 0..d {
            if j > 0 && rng.uniform() < frac {
                holed[[j, c]] = f32::NAN;
            }
        }
    }
    (full, holed)
}

/// One masked round in f64: the imputed matrix and the fallback count.
fn ref_round(k: &Kernel, q: &Array2<f32>, x: &Array2<f32>) -> (Array2<f64>, usize) {
    let (d, h) = (x.ncols(), f64::from(k.bandwidth()));
    let mut col_mean = vec![0.0; d];
    for c in 0..d {
        let obs: Vec<f64> = x
            .column(c)
            .iter()
            .filter(|v| !v.is_nan())
            .map(|&v| f64::from(v))
            .collect();
        col_mean[c] = obs.iter().sum::<f64>() / obs.len() as f64;
    }
    let mut out = q.mapv(f64::from);
    let mut fallback = 0;
    for i in 0..q.nrows() {
        let w: Vec<f64> = x
            .rows()
            .into_iter()
            .map(|xj| {
                let (mut s, mut n) = (0.0, 0);
                for c in 0..d {
                    let df = f64::from(q[[i, c]]) - f64::from(xj[c]);
                    if !df.is_nan() {
                        s += df * df;
                        n += 1;
                    }
                }
                if n == 0 {
                    0.0
                } else {
                    k.profile().eval_sq(s * d as f64 / n as f64 / (h * h))
                }
            })
            .collect();
        for c in 0..d {
            if !q[[i, c]].is_nan() {
                continue;
            }
            let (mut num, mut den) = (0.0, 0.0);
            for (j, &wj) in w.iter().enumerate() {
                if !x[[j, c]].is_nan() {
                    num += wj * f64::from(x[[j, c]]);
                    den += wj;
                }
            }
            out[[i, c]] = if den > 0.0 {
                num / den
            } else {
                fallback += 1;
                col_mean[c]
            };
        }
    }
    (out, fallback)
}

#[test]
fn one_round_matches_the_reference_on_every_backend() {
    let (_, x) = with_holes(1, 120, 5, 0.3);
    let (_, q) = with_holes(2, 31, 5, 0.4);
    for (name, e) in engines() {
        for (p, h) in [
            (Profile::Gaussian, 1.5f32),
            (Profile::Epanechnikov, 2.0),
            (Profile::Uniform, 1.0),
        ] {
            let k = Kernel::new(p, h).unwrap();
            let got = e.impute_from(&k, q.view(), x.view(), 1).unwrap();
            let (want, fallback) = ref_round(&k, &q, &x);
            let what = format!("{name} {p:?}");
            assert_eq!(
                got.imputed,
                q.iter().filter(|v| v.is_nan()).count(),
                "{what}"
            );
            assert_eq!(got.fallback, fallback, "{what}");
            assert_close(&what, &got.values, &want, 1e-4, 1e-4);
            // Self-imputation: the data as its own keys.
            let got = e.impute(&k, x.view(), 1).unwrap();
            let (want, _) = ref_round(&k, &x, &x);
            assert_close(&format!("{what} self"), &got.values, &want, 1e-4, 1e-4);
        }
    }
}

#[test]
fn later_rounds_use_the_completed_rows_and_agree_across_backends() {
    let (full, x) = with_holes(3, 150, 4, 0.25);
    let k = Kernel::gaussian(0.8).unwrap();
    let cpu = Engine::cpu();
    let one = cpu.impute(&k, x.view(), 1).unwrap();
    let three = cpu.impute(&k, x.view(), 3).unwrap();
    // A second round from round one's completion, written out: plain
    // distances between the completed rows, observed values only.
    let completed = one.values.clone();
    let mut want = completed.mapv(f64::from);
    let d = x.ncols();
    for i in 0..x.nrows() {
        for c in 0..d {
            if !x[[i, c]].is_nan() {
                continue;
            }
            let (mut num, mut den) = (0.0, 0.0);
            for j in 0..x.nrows() {
                if x[[j, c]].is_nan() {
                    continue;
                }
                let t: f64 = (0..d)
                    .map(|a| (f64::from(completed[[i, a]]) - f64::from(completed[[j, a]])).powi(2))
                    .sum::<f64>()
                    / 0.64;
                let w = (-t / 2.0).exp();
                num += w * f64::from(x[[j, c]]);
                den += w;
            }
            want[[i, c]] = num / den;
        }
    }
    let two = cpu.impute(&k, x.view(), 2).unwrap();
    assert_close("round two", &two.values, &want, 1e-4, 1e-4);
    // Observed entries are untouched; the error against the truth is finite.
    for ((i, c), &v) in x.indexed_iter() {
        if !v.is_nan() {
            assert_eq!(three.values[[i, c]], v);
        }
    }
    let rmse = |a: &Array2<f32>| {
        let (mut s, mut n) = (0.0f64, 0);
        for ((i, c), &v) in x.indexed_iter() {
            if v.is_nan() {
                s += f64::from(a[[i, c]] - full[[i, c]]).powi(2);
                n += 1;
            }
        }
        (s / n as f64).sqrt()
    };
    assert!(rmse(&three.values).is_finite() && rmse(&one.values) < 2.0);
    for (name, e) in engines() {
        let got = e.impute(&k, x.view(), 3).unwrap();
        let want = three.values.mapv(f64::from);
        assert_close(
            &format!("{name} three rounds"),
            &got.values,
            &want,
            1e-4,
            1e-4,
        );
    }
}

#[test]
fn fallbacks_and_errors() {
    let nan = f32::NAN;
    let x = Array2::from_shape_vec((3, 2), vec![0.0, 1.0, 10.0, nan, 20.0, 3.0]).unwrap();
    // A query sharing no observed coordinate with a key in reach: the
    // column mean.
    let q = Array2::from_shape_vec((2, 2), vec![100.0, nan, nan, nan]).unwrap();
    for (name, e) in engines() {
        let k = Kernel::new(Profile::Uniform, 1.0).unwrap();
        let got = e.impute_from(&k, q.view(), x.view(), 1).unwrap();
        assert_eq!((got.imputed, got.fallback), (3, 3), "{name}");
        assert_eq!(got.values.row(0).to_vec(), vec![100.0, 2.0], "{name}");
        assert_eq!(got.values.row(1).to_vec(), vec![10.0, 2.0], "{name}");
        let err = e.impute(&k, x.view(), 0).unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidParameter {
                    name: "iterations",
                    ..
                }
            ),
            "{err}"
        );
        let empty_col = Array2::from_shape_vec((2, 2), vec![1.0, nan, 2.0, nan]).unwrap();
        let err = e.impute(&k, empty_col.view(), 1).unwrap_err();
        assert!(
            err.to_string().contains("column 1 has no observed entry"),
            "{err}"
        );
        let inf = Array2::from_shape_vec((1, 2), vec![f32::INFINITY, 1.0]).unwrap();
        let err = e.impute(&k, inf.view(), 1).unwrap_err();
        assert!(matches!(err, Error::NonFinite { .. }), "{err}");
        let wide = Array2::<f32>::zeros((1, 3));
        let err = e.impute_from(&k, wide.view(), x.view(), 1).unwrap_err();
        assert!(matches!(err, Error::DimensionMismatch { .. }), "{err}");
    }
}

#[test]
fn a_tiny_bandwidth_gives_the_nearest_observer_not_the_column_mean() {
    // The observers of a coordinate may lie far beyond the row's nearest
    // key: their f32 weights vanish, the f64 recomputation keeps them.
    let (_, x) = with_holes(5, 60, 3, 0.3);
    let k = Kernel::gaussian(1e-3).unwrap();
    let d = x.ncols();
    for (name, e) in engines() {
        let got = e.impute(&k, x.view(), 1).unwrap();
        assert_eq!(got.fallback, 0, "{name}");
        for ((i, c), &v) in x.indexed_iter() {
            if !v.is_nan() {
                continue;
            }
            let dist = |j: usize| {
                let (mut s, mut n) = (0.0f64, 0);
                for a in 0..d {
                    let df = f64::from(x[[i, a]]) - f64::from(x[[j, a]]);
                    if !df.is_nan() {
                        s += df * df;
                        n += 1;
                    }
                }
                if n == 0 {
                    f64::INFINITY
                } else {
                    s * d as f64 / n as f64
                }
            };
            let nearest = (0..x.nrows())
                .filter(|&j| !x[[j, c]].is_nan())
                .min_by(|&a, &b| dist(a).total_cmp(&dist(b)))
                .unwrap();
            let (g, w) = (got.values[[i, c]], x[[nearest, c]]);
            assert!(
                (g - w).abs() <= 1e-5 * w.abs().max(1.0),
                "{name} ({i}, {c}): {g} vs {w}"
            );
        }
    }
}
