//! `locus kde`, `locus local-mean` and `locus mean-shift` with variable bandwidths
//! (`--bandwidths`, `--adaptive-k`, `--abramson`): outputs against the
//! library, `--verify` across backends, bad inputs exit 2 on one line.

mod common;

use assert_cmd::Command;
use common::Rng;
use locus::{AdaptiveBandwidth, Engine, MeanShiftParams, Profile, VariableBandwidth};
use ndarray::{Array1, Array2};
use ndarray_npy::{read_npy, write_npy};
use tempfile::TempDir;

fn locus() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_locus"));
    c.env("NODEVICE_SELECT", "1");
    c
}

fn two_scales() -> Array2<f32> {
    let mut rng = Rng::new(4);
    let mut x = rng.matrix(120, 2, -0.1, 0.1);
    x.append(ndarray::Axis(0), rng.matrix(120, 2, 5.0, 9.0).view())
        .unwrap();
    x
}

#[test]
fn kde_with_variable_bandwidths_matches_the_library() {
    let dir = TempDir::new().unwrap();
    let x = two_scales();
    write_npy(dir.path().join("x.npy"), &x).unwrap();
    let e = Engine::cpu();
    let h = e.knn_bandwidths(x.view(), 7, 2.0).unwrap();
    let want = e
        .log_density_variable(
            Profile::Gaussian,
            &VariableBandwidth::PerKey(h.clone()),
            x.view(),
            x.view(),
        )
        .unwrap();
    let hcol = Array2::from_shape_vec((h.len(), 1), h).unwrap();
    write_npy(dir.path().join("h.npy"), &hcol).unwrap();
    for args in [
        vec!["--adaptive-k", "7", "--alpha", "2"],
        vec!["--bandwidths", "h.npy"],
    ] {
        locus()
            .current_dir(dir.path())
            .args([
                "kde",
                "--keys",
                "x.npy",
                "--log",
                "-o",
                "out.npy",
                "--backend",
                "cpu",
            ])
            .args(&args)
            .assert()
            .success();
        let got: Array1<f32> = read_npy(dir.path().join("out.npy")).unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (f64::from(*g) - w).abs() < 1e-4 * (1.0 + w.abs()),
                "{args:?}"
            );
        }
    }
    // Checked against the other backend where there is one.
    locus()
        .current_dir(dir.path())
        .args([
            "kde",
            "--keys",
            "x.npy",
            "-o",
            "out.npy",
            "--abramson",
            "--bandwidth",
            "0.5",
        ])
        .args(["--backend", "cpu", "--verify"])
        .assert()
        .success();
}

#[test]
fn local_mean_with_variable_bandwidths_matches_the_library() {
    let dir = TempDir::new().unwrap();
    let x = two_scales();
    let mut rng = Rng::new(9);
    let q = rng.matrix(31, 2, -1.0, 10.0);
    let y = rng.matrix(240, 3, -2.0, 2.0);
    write_npy(dir.path().join("x.npy"), &x).unwrap();
    write_npy(dir.path().join("q.npy"), &q).unwrap();
    write_npy(dir.path().join("y.npy"), &y).unwrap();
    let e = Engine::cpu();
    let per_key = e.knn_bandwidths(x.view(), 7, 2.0).unwrap();
    let balloon = e.balloon_bandwidths(q.view(), x.view(), 5, 1.5).unwrap();
    let pilot = locus::Kernel::new(Profile::Epanechnikov, 0.8).unwrap();
    let abramson = e.abramson_bandwidths(&pilot, x.view()).unwrap();
    let hq = Array2::from_shape_vec((balloon.len(), 1), balloon.clone()).unwrap();
    write_npy(dir.path().join("hq.npy"), &hq).unwrap();
    let cases: Vec<(Vec<&str>, Profile, VariableBandwidth)> = vec![
        (
            vec!["--adaptive-k", "7", "--alpha", "2"],
            Profile::Gaussian,
            VariableBandwidth::PerKey(per_key),
        ),
        (
            vec!["--adaptive-k", "5", "--alpha", "1.5", "--balloon"],
            Profile::Gaussian,
            VariableBandwidth::PerQuery(balloon.clone()),
        ),
        (
            vec![
                "--bandwidths",
                "hq.npy",
                "--balloon",
                "--kernel",
                "laplacian",
            ],
            Profile::Laplacian,
            VariableBandwidth::PerQuery(balloon),
        ),
        (
            vec![
                "--abramson",
                "--bandwidth",
                "0.8",
                "--kernel",
                "epanechnikov",
            ],
            Profile::Epanechnikov,
            VariableBandwidth::PerKey(abramson),
        ),
    ];
    for (args, p, bw) in cases {
        let want = e
            .local_mean_variable(p, &bw, q.view(), x.view(), y.view())
            .unwrap();
        locus()
            .current_dir(dir.path())
            .args(["local-mean", "--keys", "x.npy", "--queries", "q.npy"])
            .args(["--values", "y.npy", "-o", "out.npy", "--backend", "cpu"])
            .args(&args)
            .assert()
            .success();
        let got: Array2<f32> = read_npy(dir.path().join("out.npy")).unwrap();
        assert_eq!(got.dim(), (31, 3), "{args:?}");
        for (g, w) in got.iter().zip(&want.values) {
            assert!(
                g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                "{args:?}: {g} vs {w}"
            );
        }
    }
    // The self-local mean (queries and values default to the keys),
    // checked against the other backend where there is one.
    locus()
        .current_dir(dir.path())
        .args(["local-mean", "--keys", "x.npy", "-o", "self.npy"])
        .args(["--adaptive-k", "6", "--backend", "cpu", "--verify"])
        .assert()
        .success();
    let got: Array2<f32> = read_npy(dir.path().join("self.npy")).unwrap();
    let h = e.knn_bandwidths(x.view(), 6, 1.0).unwrap();
    let want = e
        .local_mean_variable(
            Profile::Gaussian,
            &VariableBandwidth::PerKey(h),
            x.view(),
            x.view(),
            x.view(),
        )
        .unwrap();
    assert_eq!(got, want.values);
}

#[test]
fn mean_shift_with_adaptive_bandwidths_matches_the_library() {
    let dir = TempDir::new().unwrap();
    let x = two_scales();
    write_npy(dir.path().join("x.npy"), &x).unwrap();
    let p = MeanShiftParams::new()
        .profile(Profile::Gaussian)
        .adaptive_bandwidth(AdaptiveBandwidth::Knn { k: 10, alpha: 3.0 })
        .check()
        .unwrap();
    let want = Engine::cpu().mean_shift(&p, x.view()).unwrap();
    locus()
        .current_dir(dir.path())
        .args(["mean-shift", "--input", "x.npy", "--kernel", "gaussian"])
        .args(["--adaptive-k", "10", "--alpha", "3", "--labels", "l.npy"])
        .args(["--backend", "cpu"])
        .assert()
        .success();
    let got: Array1<i64> = read_npy(dir.path().join("l.npy")).unwrap();
    assert_eq!(got, want.labels);
}

#[test]
fn bad_variable_bandwidths_exit_2_on_one_line() {
    let dir = TempDir::new().unwrap();
    let x = two_scales();
    write_npy(dir.path().join("x.npy"), &x).unwrap();
    let short = Array2::<f32>::ones((239, 1));
    write_npy(dir.path().join("short.npy"), &short).unwrap();
    let mut zero = Array2::<f32>::ones((240, 1));
    zero[[3, 0]] = 0.0;
    write_npy(dir.path().join("zero.npy"), &zero).unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "kde",
                "--keys",
                "x.npy",
                "-o",
                "o.npy",
                "--bandwidths",
                "short.npy",
            ],
            "one per key",
        ),
        (
            vec![
                "kde",
                "--keys",
                "x.npy",
                "-o",
                "o.npy",
                "--bandwidths",
                "zero.npy",
            ],
            "bandwidth 3 is 0",
        ),
        (
            vec!["kde", "--keys", "x.npy", "-o", "o.npy", "--adaptive-k", "0"],
            "k",
        ),
        (
            vec![
                "kde",
                "--keys",
                "x.npy",
                "-o",
                "o.npy",
                "--adaptive-k",
                "3",
                "--metric",
                "manhattan",
            ],
            "--metric",
        ),
        (
            vec![
                "local-mean",
                "--keys",
                "x.npy",
                "-o",
                "o.npy",
                "--bandwidths",
                "short.npy",
            ],
            "one per key",
        ),
        (
            vec![
                "local-mean",
                "--keys",
                "x.npy",
                "-o",
                "o.npy",
                "--adaptive-k",
                "3",
                "--degree",
                "1",
            ],
            "--degree 1",
        ),
        (
            vec![
                "local-mean",
                "--keys",
                "x.npy",
                "-o",
                "o.npy",
                "--adaptive-k",
                "3",
                "--kernel",
                "gaussian,uniform",
            ],
            "one radial profile",
        ),
        (
            vec!["local-mean", "--keys", "x.npy", "-o", "o.npy"],
            "--bandwidth",
        ),
        (
            vec![
                "local-mean",
                "--keys",
                "x.npy",
                "-o",
                "o.npy",
                "--bandwidth",
                "1",
                "--balloon",
            ],
            "--balloon needs",
        ),
        (
            vec![
                "kde",
                "--keys",
                "x.npy",
                "-o",
                "o.npy",
                "--bandwidth",
                "1",
                "--balloon",
            ],
            "--balloon needs",
        ),
        (
            vec![
                "mean-shift",
                "--input",
                "x.npy",
                "--labels",
                "l.npy",
                "--bandwidths",
                "short.npy",
            ],
            "one row per row",
        ),
        (
            vec![
                "mean-shift",
                "--input",
                "x.npy",
                "--labels",
                "l.npy",
                "--adaptive-k",
                "400",
            ],
            "k",
        ),
    ];
    for (args, expect) in cases {
        let out = locus()
            .current_dir(dir.path())
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(expect), "{args:?}: {err:?} lacks {expect:?}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(!dir.path().join("o.npy").exists() && !dir.path().join("l.npy").exists());
    }
}
