//! `locus generate`: outputs against the library's `Engine::generate`,
//! `.npy` and `.csv`, `--json`, the plot, `--verify`, bad arguments.

mod common;

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use common::{Rng, cpu, gpu};
use locus::{DiffusionParams, LevelBandwidths, NoiseSchedule, Profile, Spacing};
use ndarray::Array2;
use ndarray_npy::{read_npy, write_npy};
use predicates::prelude::*;
use serde_json::Value;
use tempfile::TempDir;

fn locus() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_locus"));
    c.env("NODEVICE_SELECT", "1");
    c
}

/// 120 points on a noisy circle of radius 2 around (5, −3), as `x.npy`.
fn circle(dir: &TempDir) -> (Array2<f32>, PathBuf) {
    let mut rng = Rng::new(4);
    let x = Array2::from_shape_fn((120, 2), |(i, j)| {
        let a = i as f32 * 0.37;
        let jitter = 0.1 * (rng.uniform() - 0.5);
        if j == 0 {
            5.0 + 2.0 * a.cos() + jitter
        } else {
            -3.0 + 2.0 * a.sin() + jitter
        }
    });
    let p = dir.path().join("x.npy");
    write_npy(&p, &x).unwrap();
    (x, p)
}

fn read_csv(p: &Path) -> Array2<f32> {
    let text = std::fs::read_to_string(p).unwrap();
    let rows: Vec<Vec<f32>> = text
        .lines()
        .map(|l| l.split(',').map(|f| f.parse().unwrap()).collect())
        .collect();
    let cols = rows[0].len();
    Array2::from_shape_vec((rows.len(), cols), rows.concat()).unwrap()
}

fn json_of(out: &[u8]) -> Value {
    serde_json::from_slice(out).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON object ({e}): {}",
            String::from_utf8_lossy(out)
        )
    })
}

#[test]
fn generate_writes_the_librarys_samples_and_reports_the_schedule() {
    let dir = TempDir::new().unwrap();
    let (x, xp) = circle(&dir);
    let out = dir.path().join("g.npy");
    let assert = locus()
        .args(["generate", "--backend", "cpu", "--json", "--samples", "50"])
        .args(["--steps", "7", "--schedule", "linear", "--sigma-max", "1.5"])
        .args([
            "--seed",
            "42",
            "--kernel",
            "epanechnikov",
            "--bandwidth-factor",
            "3",
        ])
        .arg("--input")
        .arg(&xp)
        .arg("-o")
        .arg(&out)
        .assert()
        .success();
    let j = json_of(&assert.get_output().stdout);
    assert_eq!(j["command"], "generate");
    assert_eq!(j["sizes"]["samples"], 50);
    assert_eq!(j["sizes"]["T"], 7);
    assert_eq!(j["summary"]["seed"], 42);
    assert_eq!(j["summary"]["profile"], "epanechnikov");
    let sigmas = j["summary"]["sigmas"].as_array().unwrap();
    assert_eq!(sigmas.len(), 7);
    assert_eq!(sigmas[6].as_f64().unwrap(), 1.5);
    let params = DiffusionParams::new()
        .schedule(NoiseSchedule::Spaced {
            spacing: Spacing::Linear,
            steps: 7,
            min: None,
            max: Some(1.5),
        })
        .profile(Profile::Epanechnikov)
        .bandwidths(LevelBandwidths::Noise { factor: 3.0 })
        .samples(50)
        .seed(42)
        .check()
        .unwrap();
    let want = cpu().generate(&params, x.view()).unwrap();
    let got: Array2<f32> = read_npy(&out).unwrap();
    assert_eq!(got, want.samples);
    assert_eq!(j["summary"]["empty_rows"], want.empty_rows);
    // The samples lie near the circle, not at its centre.
    let r: Vec<f32> = got
        .rows()
        .into_iter()
        .map(|p| ((p[0] - 5.0).powi(2) + (p[1] + 3.0).powi(2)).sqrt())
        .collect();
    let mean_r = r.iter().sum::<f32>() / r.len() as f32;
    assert!((1.0..2.5).contains(&mean_r), "mean radius {mean_r}");
}

#[test]
fn given_sigmas_and_bandwidths_csv_output_and_a_plot() {
    let dir = TempDir::new().unwrap();
    let (x, xp) = circle(&dir);
    let (out, png) = (dir.path().join("g.csv"), dir.path().join("g.png"));
    locus()
        .args(["generate", "--backend", "cpu", "--sigmas", "0.05,0.3,1.0"])
        .args(["--bandwidths", "0.1,0.3,1.2", "--seed", "3"])
        .arg("--input")
        .arg(&xp)
        .arg("--output")
        .arg(&out)
        .arg("--plot")
        .arg(&png)
        .assert()
        .success()
        .stdout(predicate::str::contains("generate"));
    let params = DiffusionParams::new()
        .schedule(NoiseSchedule::Given(vec![0.05, 0.3, 1.0]))
        .bandwidths(LevelBandwidths::Given(vec![0.1, 0.3, 1.2]))
        .seed(3)
        .check()
        .unwrap();
    let want = cpu().generate(&params, x.view()).unwrap();
    let got = read_csv(&out);
    assert_eq!(got.dim(), (120, 2));
    for (g, w) in got.iter().zip(want.samples.iter()) {
        assert!((g - w).abs() <= 1e-6 * w.abs().max(1.0), "{g} vs {w}");
    }
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[1..4], b"PNG");
}

#[test]
fn bad_arguments_exit_2_and_write_nothing() {
    let dir = TempDir::new().unwrap();
    let (_, xp) = circle(&dir);
    let out = dir.path().join("g.npy");
    let cases: &[(&[&str], &str)] = &[
        (&["--samples", "0"], "samples"),
        (&["--steps", "0"], "steps"),
        (&["--sigma-min", "-1"], "sigmas"),
        (&["--sigma-min", "2", "--sigma-max", "1"], "exceeds"),
        (
            &["--sigmas", "0.1,0.2", "--bandwidths", "0.1"],
            "one per level",
        ),
        (&["--sigmas", "0.1,nan"], "sigmas"),
        (&["--bandwidth-factor", "0"], "bandwidths"),
        (&["--kernel", "nope"], "unknown kernel profile"),
        (&["--sigmas", "0.1", "--steps", "3"], "cannot be used with"),
    ];
    for (args, message) in cases {
        locus()
            .args(["generate", "--backend", "cpu"])
            .args(*args)
            .arg("--input")
            .arg(&xp)
            .arg("-o")
            .arg(&out)
            .assert()
            .code(2)
            .stderr(predicate::str::contains(*message));
        assert!(!out.exists(), "{args:?}");
    }
    // Data with no spread cannot give the default levels.
    let flat = dir.path().join("flat.npy");
    write_npy(&flat, &Array2::from_elem((5, 2), 1.0f32)).unwrap();
    locus()
        .args(["generate", "--backend", "cpu", "--input"])
        .arg(&flat)
        .arg("-o")
        .arg(&out)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("scale"));
}

#[test]
fn verify_passes_between_gpu_and_cpu() {
    if gpu().is_none() {
        return;
    }
    let dir = TempDir::new().unwrap();
    let (_, xp) = circle(&dir);
    let out = dir.path().join("g.npy");
    let assert = locus()
        .args([
            "generate",
            "--backend",
            "gpu",
            "--verify",
            "--json",
            "--samples",
            "40",
        ])
        .arg("--input")
        .arg(&xp)
        .arg("-o")
        .arg(&out)
        .assert()
        .success();
    let j = json_of(&assert.get_output().stdout);
    assert_eq!(j["backend"], "gpu");
    assert_eq!(j["verify"]["backend"], "cpu");
    assert_eq!(j["verify"]["ok"], true);
}
