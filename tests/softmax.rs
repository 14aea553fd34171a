//! Kernel softmax (attention) and its weight matrix: GPU vs CPU vs plain
//! f64 references, the heads helper, and one test per error (the linear
//! feature local mean: tests/feature_mean.rs).

mod common;

use common::attention::*;
use common::*;
use locus::{Engine, Error, SoftmaxParams, TileLimits, merge_heads, split_heads};
use ndarray::{Array3, ArrayD, Axis, IxDyn};

const RTOL: f64 = 1e-4;
const ATOL: f64 = 1e-5;

fn check_attention(e: &Engine, label: &str, shapes: &[(usize, usize, usize, usize, usize)]) {
    for (si, &shape) in shapes.iter().enumerate() {
        let (_, m, n, d, _) = shape;
        let x = data(300 + si as u64, shape, -1.0);
        // A scale that makes the weights far from uniform.
        let scale = 3.0 / (d as f32).sqrt();
        for causal in [false, true] {
            if causal && m > n {
                continue;
            }
            let p = SoftmaxParams::new().with_scale(scale).with_causal(causal);
            let what = format!("{label} {shape:?} causal={causal}");
            let got = e
                .kernel_softmax(x.phi.view(), x.psi.view(), x.v.view(), &p)
                .unwrap();
            let want = ref_attention(&x.phi, &x.psi, &x.v, f64::from(scale), causal);
            assert_close(&what, &flat(&got), &flat(&want), RTOL, ATOL);
            let got = e.softmax_matrix(x.phi.view(), x.psi.view(), &p).unwrap();
            let want = ref_weights(&x.phi, &x.psi, f64::from(scale), causal);
            assert_close(
                &format!("{what} matrix"),
                &flat(&got),
                &flat(&want),
                RTOL,
                1e-6,
            );
        }
    }
}

#[test]
fn cpu_attention_matches_reference() {
    check_attention(cpu(), "cpu", &SHAPES);
}

#[test]
fn gpu_attention_matches_reference() {
    let Some(g) = gpu() else { return };
    check_attention(g, "gpu", &SHAPES);
}

#[test]
fn gpu_attention_with_forced_tiny_tiles_merges_states() {
    for limits in [
        TileLimits {
            query_rows: Some(13),
            key_rows: Some(29),
            value_cols: Some(5),
            buffer_bytes: None,
            ..TileLimits::default()
        },
        // Bindings of 1 KiB: one batch per dispatch, rows and keys tiled.
        TileLimits {
            buffer_bytes: Some(1 << 10),
            ..TileLimits::default()
        },
        // Room for two of the three batches in one dispatch.
        TileLimits {
            buffer_bytes: Some(4000),
            ..TileLimits::default()
        },
    ] {
        let Some(g) = gpu_engine(limits) else { return };
        check_attention(
            &g,
            &format!("gpu {limits:?}"),
            &[(3, 33, 70, 3, 7), (2, 20, 45, 4, 12)],
        );
    }
}

/// Key tiles split across workgroups (slices merged by a second pass),
/// causal or not, attention and the weight matrix's row pass: more slices
/// than some rows see keys (causal rows whose slices are all hidden), a
/// batched dispatch, key tiles of several slices each.
#[test]
fn gpu_attention_with_key_splits_merges_slices() {
    for limits in [
        TileLimits {
            key_splits: Some(3),
            ..TileLimits::default()
        },
        TileLimits {
            query_rows: Some(13),
            key_rows: Some(29),
            key_splits: Some(7),
            value_cols: Some(5),
            ..TileLimits::default()
        },
    ] {
        let Some(g) = gpu_engine(limits) else { return };
        check_attention(
            &g,
            &format!("gpu {limits:?}"),
            &[
                (3, 33, 70, 3, 7),
                (2, 20, 45, 4, 12),
                (1, 100, 100, 9, 2),
                (2, 1, 5, 2, 1),
            ],
        );
    }
}

/// Rows whole vec4s wide, so the register-tiled shader runs every pass:
/// on lavapipe (32 KiB) 4 rows per invocation with blocks of 16 (d = 64),
/// 32 (d = 32: the H200's class at d = 64) and 64 keys (d = 16); 2 rows
/// (M = 20); a decoding step of 16 and of 1 query (1 row per invocation,
/// blocks of 32 and 64). Sizes are multiples of no tile, causal or not.
const TILED_SHAPES: [(usize, usize, usize, usize, usize); 7] = [
    (2, 67, 131, 64, 64),
    (2, 45, 100, 32, 32),
    (2, 70, 83, 16, 8),
    (3, 20, 45, 8, 12),
    (2, 16, 300, 64, 64),
    (2, 1, 300, 64, 64),
    (1, 16, 77, 16, 16),
];

#[test]
fn gpu_register_tiles_match_reference() {
    let Some(g) = gpu() else { return };
    check_attention(g, "gpu tiled", &TILED_SHAPES);
}

/// The register tiles with forced key splits (slices merged by a second
/// pass, causal rows whose slices are all hidden, decoding steps of 16
/// rows a workgroup) and forced tiny tiles (key tiles of 29 keys: partial
/// blocks in every tile; passes of 8 value columns).
#[test]
fn gpu_register_tiles_with_forced_splits_and_tiny_tiles() {
    for limits in [
        TileLimits {
            key_splits: Some(3),
            ..TileLimits::default()
        },
        TileLimits {
            key_splits: Some(7),
            key_rows: Some(100),
            ..TileLimits::default()
        },
        TileLimits {
            query_rows: Some(13),
            key_rows: Some(29),
            value_cols: Some(8),
            ..TileLimits::default()
        },
    ] {
        let Some(g) = gpu_engine(limits) else { return };
        check_attention(
            &g,
            &format!("gpu tiled {limits:?}"),
            &[
                (2, 67, 131, 64, 64),
                (3, 20, 45, 8, 12),
                (2, 16, 300, 64, 64),
                (2, 1, 300, 16, 16),
            ],
        );
    }
}

#[test]
fn gpu_long_key_ranges_stay_within_the_software_loop_budget() {
    // llvmpipe silently stops an invocation's loops after 65535
    // iterations in all: 70000 keys in one key tile would lose the last.
    let Some(g) = gpu() else { return };
    check_attention(g, "gpu long", &[(1, 5, 70_000, 4, 2)]);
    // Register tiles (64 features, 64 value columns): blocks of 16 keys
    // cost the most iterations per key; key tiles sized to the budget.
    check_attention(g, "gpu long tiled", &[(1, 3, 12_000, 64, 64)]);
    // d = 2000: 4 keys fit a stage, yet every chunk runs 8
    // slots; a large value on the last key shows a key tile cut short.
    let x = data(77, (1, 3, 2000, 2000, 1), 0.0);
    let mut v = x.v.clone();
    v[[0, 1999, 0]] = 1.0e6;
    let p = SoftmaxParams::new().with_scale(0.05);
    let want = ref_attention(&x.phi, &x.psi, &v, 0.05, false);
    let got = g
        .kernel_softmax(x.phi.view(), x.psi.view(), v.view(), &p)
        .unwrap();
    assert_close("gpu d=2000", &flat(&got), &flat(&want), RTOL, ATOL);
}

/// A finite scale whose product with log₂e overflows `f32`, on features
/// so small that every logit is modest: the same weights as the CPU.
#[test]
fn a_huge_scale_on_tiny_features_is_finite() {
    let x = data(78, (1, 4, 9, 3, 2), 0.0);
    let phi = x.phi.mapv(|f| f * 1.0e-30);
    let p = SoftmaxParams::new().with_scale(3.0e38);
    let want = ref_attention(&phi, &x.psi, &x.v, 3.0e38, false);
    for (name, e) in engines() {
        let got = e
            .kernel_softmax(phi.view(), x.psi.view(), x.v.view(), &p)
            .unwrap();
        assert!(got.iter().all(|v| v.is_finite()), "{name}: {got:?}");
        assert_close(&name, &flat(&got), &flat(&want), RTOL, ATOL);
    }
}

#[test]
fn two_dimensional_inputs_are_one_batch() {
    let x = data(7, (1, 20, 30, 5, 4), -1.0);
    let (p2, k2, v2) = (
        x.phi.index_axis(Axis(0), 0),
        x.psi.index_axis(Axis(0), 0),
        x.v.index_axis(Axis(0), 0),
    );
    for (name, e) in engines() {
        let p = SoftmaxParams::new().with_causal(true);
        let two = e.kernel_softmax(p2, k2, v2, &p).unwrap();
        let three = e
            .kernel_softmax(x.phi.view(), x.psi.view(), x.v.view(), &p)
            .unwrap();
        assert_eq!(two.dim(), (20, 4), "{name}");
        assert_eq!(two, three.index_axis(Axis(0), 0), "{name}");
        let w = e.softmax_matrix(p2, k2, &p).unwrap();
        assert_eq!(w.dim(), (20, 30));
        // Dynamic-rank views keep their rank.
        let dynv = x.phi.view().into_dyn();
        let out = e
            .kernel_softmax(dynv, x.psi.view().into_dyn(), x.v.view().into_dyn(), &p)
            .unwrap();
        assert_eq!(out.shape(), &[1, 20, 4]);
    }
}

#[test]
fn transposed_views_are_read_in_logical_order() {
    let x = data(8, (2, 9, 14, 4, 3), -1.0);
    // (M, B, d) in memory, viewed as (B, M, d): not contiguous.
    let stored = x
        .phi
        .view()
        .permuted_axes([1, 0, 2])
        .as_standard_layout()
        .to_owned();
    let phi_back = stored.view().permuted_axes([1, 0, 2]);
    assert_eq!(phi_back, x.phi);
    assert!(!phi_back.is_standard_layout());
    for (name, e) in engines() {
        let p = SoftmaxParams::new();
        let a = e
            .kernel_softmax(phi_back, x.psi.view(), x.v.view(), &p)
            .unwrap();
        let b = e
            .kernel_softmax(x.phi.view(), x.psi.view(), x.v.view(), &p)
            .unwrap();
        assert_eq!(a, b, "{name}");
    }
}

/// Values up to the `f32` range (batch 0 near `f32::MAX`, one sign;
/// batch 1 at 2·10³⁷, both signs; batch 2 ordinary), under equal scores
/// (every weight the largest: sums of up to 1100 such values overflow
/// `f32`) and spread ones: finite outputs within 1e-5 of each batch's
/// largest value, one-shot and from a prepared set, causal or not.
#[test]
fn values_near_the_f32_range_do_not_overflow() {
    let (nb, m, n, d, q) = (3, 7, 1100, 4, 3);
    for spread in [0.0f32, 1.0] {
        let x = data(91, (nb, m, n, d, q), -1.0);
        let phi = x.phi.mapv(|f| f * spread);
        let v = Array3::from_shape_fn((nb, n, q), |(b, j, c)| {
            let u = x.v[[b, j, c]] / 3.0; // within (−1, 1)
            match b {
                0 => f32::MAX * (0.75 + 0.25 * u),
                1 => 2e37 * u,
                _ => u,
            }
        });
        for causal in [false, true] {
            let p = SoftmaxParams::new().with_causal(causal);
            let scale = 1.0 / (d as f64).sqrt();
            let want = ref_attention(&phi, &x.psi, &v, scale, causal);
            for (name, e) in engines() {
                let one = e
                    .kernel_softmax(phi.view(), x.psi.view(), v.view(), &p)
                    .unwrap();
                let set = e
                    .prepare_attention(x.psi.view(), v.view())
                    .unwrap()
                    .attend(phi.view(), &p)
                    .unwrap();
                for (how, got) in [("one-shot", &one), ("set", &set)] {
                    for ((b, i, c), &w) in want.indexed_iter() {
                        let top = v
                            .index_axis(Axis(0), b)
                            .fold(0.0f64, |a, &y| a.max(f64::from(y).abs()));
                        let g = got[[b, i, c]];
                        assert!(
                            g.is_finite() && (f64::from(g) - w).abs() <= 1e-5 * top,
                            "{name} {how} spread={spread} causal={causal} [{b}][{i}][{c}]: {g} vs {w}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn huge_logits_stay_finite_and_exact() {
    // d = 1, logits 10000 + 1.5625·j and their negatives: exact in f32, so
    // the weights e^{1.5625(j − j_max)} can be checked at 1e-4.
    let n = 50;
    let psi = Array3::from_shape_fn((1, n, 1), |(_, j, _)| 100.0 + j as f32 / 64.0);
    let phi = Array3::from_shape_fn((1, 2, 1), |(_, i, _)| if i == 0 { 100.0 } else { -100.0 });
    let mut rng = Rng::new(11);
    let v = rng
        .matrix(n, 3, -1.0, 1.0)
        .into_shape_with_order((1, n, 3))
        .unwrap();
    for (name, e) in engines() {
        for causal in [false, true] {
            let p = SoftmaxParams::new().with_scale(1.0).with_causal(causal);
            let got = e
                .kernel_softmax(phi.view(), psi.view(), v.view(), &p)
                .unwrap();
            let want = ref_attention(&phi, &psi, &v, 1.0, causal);
            assert_close(
                &format!("{name} exact huge"),
                &flat(&got),
                &flat(&want),
                RTOL,
                ATOL,
            );
        }
    }
    // Random features with logits around ±1e4: the largest logit wins.
    let x = data(12, (2, 40, 60, 16, 3), -1.0);
    let p = SoftmaxParams::new().with_scale(2500.0);
    let want = ref_attention(&x.phi, &x.psi, &x.v, 2500.0, false);
    for (name, e) in engines() {
        let got = e
            .kernel_softmax(x.phi.view(), x.psi.view(), x.v.view(), &p)
            .unwrap();
        assert!(got.iter().all(|v| v.is_finite()), "{name}");
        assert_close(
            &format!("{name} random huge"),
            &flat(&got),
            &flat(&want),
            RTOL,
            ATOL,
        );
        let w = e.softmax_matrix(x.phi.view(), x.psi.view(), &p).unwrap();
        for s in w.sum_axis(Axis(2)) {
            assert!((s - 1.0).abs() < 1e-5, "{name}: row sum {s}");
        }
    }
}

#[test]
fn equal_scores_give_the_plain_average() {
    // φ = 0: every logit is 0, every weight 1/N (1/(i+1) under the mask).
    let x = data(13, (2, 30, 30, 6, 4), -1.0);
    let zero = Array3::<f32>::zeros((2, 30, 6));
    for (name, e) in engines() {
        for causal in [false, true] {
            let p = SoftmaxParams::new().with_causal(causal);
            let got = e
                .kernel_softmax(zero.view(), x.psi.view(), x.v.view(), &p)
                .unwrap();
            for ((b, i, c), &g) in got.indexed_iter() {
                let lim = if causal { i + 1 } else { 30 };
                let mean: f64 =
                    (0..lim).map(|j| f64::from(x.v[[b, j, c]])).sum::<f64>() / lim as f64;
                assert!(
                    (f64::from(g) - mean).abs() <= 1e-5 * mean.abs() + 1e-6,
                    "{name} causal={causal} [{b},{i},{c}]: {g} vs {mean}"
                );
            }
        }
    }
}

#[test]
fn weight_rows_sum_to_one_and_masked_entries_are_zero() {
    let x = data(14, (2, 20, 26, 5, 1), -1.0);
    for (name, e) in engines() {
        let p = SoftmaxParams::new().with_causal(true);
        let w = e.softmax_matrix(x.phi.view(), x.psi.view(), &p).unwrap();
        for ((b, i, j), &v) in w.indexed_iter() {
            if j > i + 6 {
                assert_eq!(v, 0.0, "{name} [{b},{i},{j}]");
            } else {
                assert!(v > 0.0, "{name} [{b},{i},{j}]");
            }
        }
        for s in w.sum_axis(Axis(2)) {
            assert!((s - 1.0).abs() < 1e-5, "{name}: row sum {s}");
        }
    }
}

#[test]
fn gpu_weight_matrix_larger_than_one_binding_is_tiled() {
    let limits = TileLimits {
        buffer_bytes: Some(2048),
        ..TileLimits::default()
    };
    let Some(g) = gpu_engine(limits) else { return };
    check_attention(&g, "gpu 2 KiB bindings", &[(2, 37, 150, 3, 2)]);
}

#[test]
fn heads_split_and_merge() {
    let mut rng = Rng::new(16);
    let x = rng.matrix(7, 12, -1.0, 1.0);
    let h = split_heads(x.view(), 3).unwrap();
    assert_eq!(h.dim(), (3, 7, 4));
    assert_eq!(h[[2, 5, 1]], x[[5, 9]]);
    assert_eq!(merge_heads(h.view()), x);
    for heads in [0, 5] {
        let err = split_heads(x.view(), heads).unwrap_err();
        assert!(
            matches!(err, Error::InvalidParameter { name: "heads", .. }),
            "{err}"
        );
    }
}

// One test per error: a typed error on every backend, never a panic.

fn small() -> Data {
    data(17, (2, 4, 5, 3, 2), 0.0)
}

#[test]
fn error_rank() {
    let x = small();
    let four = ArrayD::<f32>::zeros(IxDyn(&[1, 2, 4, 3]));
    for (_, e) in engines() {
        let err = e
            .kernel_softmax(
                four.view(),
                x.psi.view().into_dyn(),
                x.v.view().into_dyn(),
                &SoftmaxParams::new(),
            )
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::Rank {
                    what: "phi",
                    ndim: 4,
                    ..
                }
            ),
            "{err}"
        );
    }
}

#[test]
fn error_batch_mismatch() {
    let x = small();
    let other = data(18, (3, 4, 5, 3, 2), 0.0);
    for (_, e) in engines() {
        let p = SoftmaxParams::new();
        let err = e
            .kernel_softmax(x.phi.view(), other.psi.view(), x.v.view(), &p)
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::BatchMismatch {
                    what: "psi",
                    expected: 2,
                    got: 3,
                    ..
                }
            ),
            "{err}"
        );
        let err = e
            .feature_local_mean(x.phi.view(), x.psi.view(), other.v.view(), false)
            .unwrap_err();
        assert!(
            matches!(err, Error::BatchMismatch { what: "values", .. }),
            "{err}"
        );
    }
}

#[test]
fn error_dimension_mismatch() {
    let x = small();
    let wide = data(19, (2, 4, 5, 4, 2), 0.0);
    for (_, e) in engines() {
        let err = e
            .softmax_matrix(x.phi.view(), wide.psi.view(), &SoftmaxParams::new())
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::DimensionMismatch {
                    queries: 3,
                    keys: 4,
                    ..
                }
            ),
            "{err}"
        );
    }
}

#[test]
fn error_value_rows_mismatch() {
    let x = small();
    let long = data(20, (2, 4, 6, 3, 2), 0.0);
    for (_, e) in engines() {
        let err = e
            .kernel_softmax(
                x.phi.view(),
                x.psi.view(),
                long.v.view(),
                &SoftmaxParams::new(),
            )
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::RowMismatch {
                    keys: 5,
                    values: 6,
                    ..
                }
            ),
            "{err}"
        );
    }
}

#[test]
fn error_empty_input() {
    let x = small();
    let no_rows = Array3::<f32>::zeros((2, 0, 3));
    let no_cols = Array3::<f32>::zeros((2, 4, 0));
    for (_, e) in engines() {
        let p = SoftmaxParams::new();
        let err = e
            .kernel_softmax(no_rows.view(), x.psi.view(), x.v.view(), &p)
            .unwrap_err();
        assert!(
            matches!(err, Error::EmptyInput { what: "phi", .. }),
            "{err}"
        );
        let err = e
            .kernel_softmax(no_cols.view(), no_cols.view(), x.v.view(), &p)
            .unwrap_err();
        assert!(matches!(err, Error::EmptyInput { cols: 0, .. }), "{err}");
    }
}

#[test]
fn error_non_finite_input() {
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        for (_, e) in engines() {
            for which in ["phi", "psi", "values"] {
                let mut x = small();
                match which {
                    "phi" => x.phi[[1, 2, 1]] = bad,
                    "psi" => x.psi[[1, 2, 1]] = bad,
                    _ => x.v[[1, 2, 1]] = bad,
                }
                let err = e
                    .kernel_softmax(
                        x.phi.view(),
                        x.psi.view(),
                        x.v.view(),
                        &SoftmaxParams::new(),
                    )
                    .unwrap_err();
                match err {
                    // Batches are stacked: batch 1, row 2 is row 1·rows + 2.
                    Error::NonFinite {
                        what, col: 1, row, ..
                    } => {
                        assert_eq!(what, which);
                        assert_eq!(row, if which == "phi" { 6 } else { 7 });
                    }
                    other => panic!("{which}: {other}"),
                }
            }
        }
    }
}

#[test]
fn error_bad_scale() {
    let x = small();
    for s in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        for (_, e) in engines() {
            let p = SoftmaxParams::new().with_scale(s);
            let err = e
                .kernel_softmax(x.phi.view(), x.psi.view(), x.v.view(), &p)
                .unwrap_err();
            assert!(
                matches!(err, Error::InvalidParameter { name: "scale", .. }),
                "{s}: {err}"
            );
        }
    }
    // Zero and negative scales are valid kernels.
    for s in [0.0f32, -2.0] {
        let p = SoftmaxParams::new().with_scale(s);
        assert!(
            cpu()
                .kernel_softmax(x.phi.view(), x.psi.view(), x.v.view(), &p)
                .is_ok()
        );
    }
}

#[test]
fn error_causal_with_more_queries_than_keys() {
    let x = data(21, (1, 6, 5, 3, 2), 0.0);
    for (_, e) in engines() {
        let p = SoftmaxParams::new().with_causal(true);
        let err = e
            .kernel_softmax(x.phi.view(), x.psi.view(), x.v.view(), &p)
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::CausalShape {
                    queries: 6,
                    keys: 5,
                    ..
                }
            ),
            "{err}"
        );
        let err = e
            .feature_local_mean(x.phi.view(), x.psi.view(), x.v.view(), true)
            .unwrap_err();
        assert!(matches!(err, Error::CausalShape { .. }), "{err}");
        // Without the mask the shape is fine.
        assert!(
            e.kernel_softmax(
                x.phi.view(),
                x.psi.view(),
                x.v.view(),
                &SoftmaxParams::new()
            )
            .is_ok()
        );
    }
}

#[test]
fn error_logits_beyond_f32_range() {
    let x = small();
    let big = x.phi.mapv(|f| f * 1e20);
    for (_, e) in engines() {
        let p = SoftmaxParams::new().with_scale(1e19);
        let err = e
            .kernel_softmax(big.view(), x.psi.view(), x.v.view(), &p)
            .unwrap_err();
        assert!(matches!(err, Error::LogitOverflow { .. }), "{err}");
        let err = e.softmax_matrix(big.view(), x.psi.view(), &p).unwrap_err();
        assert!(matches!(err, Error::LogitOverflow { .. }), "{err}");
    }
}

#[test]
fn error_negative_feature() {
    for which in ["phi", "psi"] {
        let mut x = small();
        match which {
            "phi" => x.phi[[0, 3, 2]] = -0.5,
            _ => x.psi[[0, 3, 2]] = -0.5,
        }
        for (_, e) in engines() {
            let err = e
                .feature_local_mean(x.phi.view(), x.psi.view(), x.v.view(), false)
                .unwrap_err();
            match err {
                Error::NegativeFeature {
                    what,
                    row: 3,
                    col: 2,
                    value,
                    ..
                } => {
                    assert_eq!((what, value), (which, -0.5));
                }
                other => panic!("{which}: {other}"),
            }
        }
    }
}

#[test]
fn params_are_send_sync_and_default_to_one_over_sqrt_d() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<SoftmaxParams>();
    assert_send_sync::<locus::FeatureLocalMean<ndarray::Ix3>>();
    let x = small();
    let d = 3.0f32;
    let a = cpu()
        .kernel_softmax(
            x.phi.view(),
            x.psi.view(),
            x.v.view(),
            &SoftmaxParams::new(),
        )
        .unwrap();
    let b = cpu()
        .kernel_softmax(
            x.phi.view(),
            x.psi.view(),
            x.v.view(),
            &SoftmaxParams::new().with_scale(1.0 / d.sqrt()),
        )
        .unwrap();
    assert_eq!(a, b);
}
