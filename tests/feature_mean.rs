//! Feature local means `(ΦΨᵀV) ⊘ (ΦΨᵀ1)` (linear attention) on both
//! backends against a plain f64 reference: odd shapes, causal masks,
//! empty rows, forced tiny tiles, tiny features.

mod common;

use common::attention::*;
use common::*;
use locus::{Engine, TileLimits};
use ndarray::{Array3, Axis};

const RTOL: f64 = 1e-4;
const ATOL: f64 = 1e-5;

/// Plain f64 `(ΦΨᵀV) ⊘ (ΦΨᵀ1)` with the pairwise weights formed
/// explicitly; NaN rows (and their count) where every weight is 0.
fn ref_feature_mean(
    phi: &Array3<f32>,
    psi: &Array3<f32>,
    v: &Array3<f32>,
    causal: bool,
) -> (Array3<f64>, usize) {
    let (nb, m, d) = phi.dim();
    let (n, q) = (psi.dim().1, v.dim().2);
    let mut out = Array3::<f64>::zeros((nb, m, q));
    let mut empty = 0;
    for b in 0..nb {
        for i in 0..m {
            let lim = if causal { i + 1 + n - m } else { n };
            let mut den = 0.0;
            let mut num = vec![0.0; q];
            for j in 0..lim {
                let w: f64 = (0..d)
                    .map(|k| f64::from(phi[[b, i, k]]) * f64::from(psi[[b, j, k]]))
                    .sum();
                den += w;
                for c in 0..q {
                    num[c] += w * f64::from(v[[b, j, c]]);
                }
            }
            for c in 0..q {
                out[[b, i, c]] = if den > 0.0 { num[c] / den } else { f64::NAN };
            }
            empty += usize::from(den <= 0.0);
        }
    }
    (out, empty)
}

fn check_feature_mean(e: &Engine, label: &str, shapes: &[(usize, usize, usize, usize, usize)]) {
    for (si, &shape) in shapes.iter().enumerate() {
        let (_, m, n, _, _) = shape;
        let mut x = data(500 + si as u64, shape, 0.0);
        // Some zero features, and a query row with none: an empty row.
        x.phi.mapv_inplace(|f| if f < 0.2 { 0.0 } else { f });
        x.psi.mapv_inplace(|f| if f < 0.2 { 0.0 } else { f });
        if m > 2 {
            x.phi.index_axis_mut(Axis(1), 1).fill(0.0);
        }
        for causal in [false, true] {
            if causal && m > n {
                continue;
            }
            let what = format!("{label} {shape:?} causal={causal}");
            let got = e
                .feature_local_mean(x.phi.view(), x.psi.view(), x.v.view(), causal)
                .unwrap();
            let (want, empty) = ref_feature_mean(&x.phi, &x.psi, &x.v, causal);
            assert_close(&what, &flat(&got.values), &flat(&want), RTOL, ATOL);
            assert_eq!(got.empty_rows, empty, "{what}: empty rows");
        }
    }
}

#[test]
fn cpu_feature_mean_matches_reference() {
    check_feature_mean(cpu(), "cpu", &SHAPES);
    // Long enough for several chunks and their prefix sums.
    check_feature_mean(cpu(), "cpu", &[(2, 1500, 2000, 3, 2), (1, 700, 700, 5, 20)]);
}

#[test]
fn gpu_feature_mean_matches_reference() {
    let Some(g) = gpu() else { return };
    check_feature_mean(g, "gpu", &SHAPES);
    check_feature_mean(g, "gpu", &[(1, 700, 700, 5, 20)]);
}

#[test]
fn gpu_feature_mean_with_forced_tiny_tiles() {
    for limits in [
        TileLimits {
            query_rows: Some(13),
            key_rows: Some(29),
            value_cols: Some(5),
            buffer_bytes: None,
            ..TileLimits::default()
        },
        TileLimits {
            buffer_bytes: Some(4 * 4 * 8 * 30),
            ..TileLimits::default()
        },
    ] {
        let Some(g) = gpu_engine(limits) else { return };
        check_feature_mean(
            &g,
            &format!("gpu {limits:?}"),
            &[(2, 90, 300, 4, 7), (1, 1, 1, 1, 1)],
        );
    }
}

#[test]
fn feature_mean_of_tiny_features_is_not_mistaken_for_empty() {
    let x = data(15, (2, 10, 40, 3, 2), 0.0);
    let phi = x.phi.mapv(|f| f * 1e-25);
    let psi = x.psi.mapv(|f| f * 1e-22);
    let (want, empty) = ref_feature_mean(&phi, &psi, &x.v, false);
    assert_eq!(empty, 0);
    for (name, e) in engines() {
        for causal in [false, true] {
            let got = e
                .feature_local_mean(phi.view(), psi.view(), x.v.view(), causal)
                .unwrap();
            assert_eq!(got.empty_rows, 0, "{name}");
            if !causal {
                assert_close(name.as_str(), &flat(&got.values), &flat(&want), RTOL, ATOL);
            }
        }
    }
}

/// Values near the `f32` range (one sign, and both signs at 2·10³⁷) over
/// 1100 keys: the GPU's `f32` sums overflowed to `inf` before the op
/// divided such values by a power of 2. Finite and within 1e-5 of the
/// largest value on both backends, causal or not; empty rows stay NaN.
#[test]
fn values_near_the_f32_range_do_not_overflow() {
    let (nb, m, n, d, q) = (2, 7, 1100, 4, 3);
    let mut x = data(16, (nb, m, n, d, q), 0.0);
    x.phi.index_axis_mut(Axis(1), 2).fill(0.0); // an empty row
    let v = Array3::from_shape_fn((nb, n, q), |(b, j, c)| {
        let u = x.v[[b, j, c]] / 3.0; // within (−1, 1)
        match b {
            0 => f32::MAX * (0.75 + 0.25 * u),
            _ => 2e37 * u,
        }
    });
    for causal in [false, true] {
        let (want, empty) = ref_feature_mean(&x.phi, &x.psi, &v, causal);
        for (name, e) in engines() {
            let got = e
                .feature_local_mean(x.phi.view(), x.psi.view(), v.view(), causal)
                .unwrap();
            assert_eq!(got.empty_rows, empty, "{name}");
            for ((b, i, c), &w) in want.indexed_iter() {
                let g = got.values[[b, i, c]];
                let top = v
                    .index_axis(Axis(0), b)
                    .fold(0.0f64, |a, &y| a.max(f64::from(y).abs()));
                if w.is_nan() {
                    assert!(g.is_nan(), "{name} causal={causal} [{b}][{i}][{c}]: {g}");
                    continue;
                }
                assert!(
                    g.is_finite() && (f64::from(g) - w).abs() <= 1e-5 * top,
                    "{name} causal={causal} [{b}][{i}][{c}]: {g} vs {w}"
                );
            }
        }
    }
}
