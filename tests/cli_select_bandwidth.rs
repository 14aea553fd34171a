//! `locus select-bandwidth`: the scalar and per-feature modes against the
//! library, the report (`--json`), the written row and usage errors.

mod common;

use assert_cmd::Command;
use common::{Rng, cpu, gpu};
use locus::{PerFeatureOptions, Profile};
use ndarray::Array2;
use ndarray_npy::{read_npy, write_npy};
use serde_json::Value;
use tempfile::TempDir;

fn locus() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_locus"));
    c.env("NODEVICE_SELECT", "1");
    c
}

/// Points whose target depends on the first feature only, as `x.npy`
/// and `y.npy`.
fn data(dir: &TempDir) -> (Array2<f32>, Array2<f32>) {
    let mut rng = Rng::new(3);
    let x = rng.matrix(90, 3, -1.0, 1.0);
    let y = Array2::from_shape_fn((90, 1), |(i, _)| (3.0 * x[[i, 0]]).sin());
    write_npy(dir.path().join("x.npy"), &x).unwrap();
    write_npy(dir.path().join("y.npy"), &y).unwrap();
    (x, y)
}

fn json_of(out: &[u8]) -> Value {
    serde_json::from_slice(out).unwrap_or_else(|e| panic!("not JSON ({e})"))
}

#[test]
fn per_feature_matches_the_library() {
    let dir = TempDir::new().unwrap();
    let (x, y) = data(&dir);
    let out = dir.path().join("h.npy");
    let mut backends = vec!["cpu"];
    if gpu().is_some() {
        backends.push("gpu");
    }
    for backend in backends {
        let run = locus()
            .current_dir(dir.path())
            .args([
                "select-bandwidth",
                "--per-feature",
                "--json",
                "--backend",
                backend,
            ])
            .args(["--points", "x.npy", "--values", "y.npy", "--output"])
            .arg(&out)
            .assert()
            .success();
        let j = json_of(&run.get_output().stdout);
        let s = &j["summary"];
        assert_eq!(s["mode"], "per-feature");
        let want = cpu()
            .select_bandwidths_per_feature(
                Profile::Gaussian,
                x.view(),
                Some(y.view()),
                &PerFeatureOptions::default(),
            )
            .unwrap();
        let err = s["error"].as_f64().unwrap();
        assert!(
            (err - want.error).abs() <= 1e-3 * want.error,
            "{backend}: {err} vs {}",
            want.error
        );
        let h: Vec<f64> = s["bandwidths"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(h.len(), 3);
        let written: Array2<f32> = read_npy(&out).unwrap();
        assert_eq!(written.dim(), (1, 3));
        for (a, &w) in written.iter().enumerate() {
            assert!((f64::from(w) - h[a]).abs() <= 1e-6 * h[a], "{backend}");
        }
        if backend == "cpu" {
            assert_eq!(written.as_slice().unwrap(), &want.bandwidths[..]);
        }
    }
}

#[test]
fn scalar_mode_matches_select_bandwidth() {
    let dir = TempDir::new().unwrap();
    let (x, y) = data(&dir);
    let run = locus()
        .current_dir(dir.path())
        .args([
            "select-bandwidth",
            "--json",
            "--backend",
            "cpu",
            "--kernel",
            "biweight",
        ])
        .args([
            "--points",
            "x.npy",
            "--values",
            "y.npy",
            "--candidates",
            "0.3,0.6,1.2,2.4",
        ])
        .assert()
        .success();
    let j = json_of(&run.get_output().stdout);
    let want = cpu()
        .select_bandwidth(
            Profile::Biweight,
            x.view(),
            Some(y.view()),
            &[0.3, 0.6, 1.2, 2.4],
        )
        .unwrap();
    let s = &j["summary"];
    assert_eq!(s["mode"], "scalar");
    assert_eq!(s["bandwidths"][0].as_f64().unwrap(), f64::from(want.best));
    assert_eq!(s["curve"].as_array().unwrap().len(), 4);
}

#[test]
fn usage_errors_exit_2() {
    let dir = TempDir::new().unwrap();
    data(&dir);
    let base = ["select-bandwidth", "--backend", "cpu", "--points", "x.npy"];
    locus()
        .current_dir(dir.path())
        .args(base)
        .args(["--per-feature", "--kernel", "uniform"])
        .assert()
        .code(2);
    locus()
        .current_dir(dir.path())
        .args(base)
        .args(["--per-feature", "--candidates", "1.0"])
        .assert()
        .code(2);
    locus()
        .current_dir(dir.path())
        .args(base)
        .args(["--per-feature", "--max-iter", "0"])
        .assert()
        .code(2);
    let short = Array2::<f32>::zeros((5, 1));
    write_npy(dir.path().join("short.npy"), &short).unwrap();
    locus()
        .current_dir(dir.path())
        .args(base)
        .args(["--values", "short.npy"])
        .assert()
        .code(2);
}
