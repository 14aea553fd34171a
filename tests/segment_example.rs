//! The segmentation example (`examples/segment.rs`) on a small crop of
//! scikit-learn's `china.jpg` (`tests/data/china-crop.png`): the segmented
//! image and labels it writes, the same segments on every backend, and a
//! clear error for a file that is not an image.

mod common;
#[path = "support/examples.rs"]
mod examples;

use std::path::{Path, PathBuf};
use std::process::Command;

use ndarray::Array2;
use serde_json::Value;
use tempfile::TempDir;

/// The example's executable (which `cargo test` builds).
fn example() -> PathBuf {
    examples::example_binary("segment")
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/china-crop.png")
}

/// Runs the example on the fixture; its summary and labels.
fn segment(dir: &TempDir, backend: &str) -> (Value, Array2<i64>) {
    let (png, labels) = (
        dir.path().join(format!("{backend}.png")),
        dir.path().join(format!("{backend}.npy")),
    );
    let out = Command::new(example())
        .env("NODEVICE_SELECT", "1")
        .args(["--spatial", "4", "--range", "8", "--backend", backend])
        .arg("--input")
        .arg(fixture())
        .arg("--output")
        .arg(&png)
        .arg("--labels")
        .arg(&labels)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    let img = image::open(&png).unwrap().to_rgb8();
    assert_eq!(img.dimensions(), (48, 32));
    (summary, ndarray_npy::read_npy(&labels).unwrap())
}

#[test]
fn the_photograph_is_segmented_alike_on_every_backend() {
    let dir = TempDir::new().unwrap();
    let (cpu, labels) = segment(&dir, "cpu");
    assert_eq!(labels.dim(), (32, 48));
    let segments = cpu["segments"].as_u64().unwrap() as i64;
    // Fewer regions than pixels, more than a handful; every pixel labelled.
    assert!((5..400).contains(&segments), "{cpu}");
    assert!(labels.iter().all(|&l| (0..segments).contains(&l)));
    // The segmented image stays close to the photograph.
    assert!(cpu["psnr_db"].as_f64().unwrap() > 20.0, "{cpu}");
    // Neighbouring pixels mostly share a segment: regions, not noise.
    let same = (0..32)
        .flat_map(|r| (1..48).map(move |c| (r, c)))
        .filter(|&(r, c)| labels[[r, c]] == labels[[r, c - 1]])
        .count();
    assert!(
        same * 10 > 32 * 47 * 6,
        "{same} of {} neighbours alike",
        32 * 47
    );
    if common::gpu().is_some() {
        let (gpu, gl) = segment(&dir, "gpu");
        assert_eq!(gpu["segments"], cpu["segments"], "{gpu} vs {cpu}");
        let differ = gl.iter().zip(&labels).filter(|(a, b)| a != b).count();
        assert!(differ <= 16, "{differ} pixels in other segments");
    }
}

#[test]
fn a_file_that_is_not_an_image_is_refused() {
    let dir = TempDir::new().unwrap();
    let bad = dir.path().join("bad.png");
    std::fs::write(&bad, "not a png").unwrap();
    let out = Command::new(example())
        .arg("--input")
        .arg(&bad)
        .arg("--output")
        .arg(dir.path().join("o.png"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("error: ") && err.contains("bad.png"),
        "{err}"
    );
    assert!(!dir.path().join("o.png").exists());
    // Bad parameters name their flag, before any output is written.
    for (args, needle) in [
        (vec!["--spatial", "0"], "--spatial"),
        (vec!["--range", "nan"], "--range"),
        (vec!["--labels", "/no/such/folder/l.npy"], "--labels"),
    ] {
        let out = Command::new(example())
            .arg("--input")
            .arg(fixture())
            .arg("--output")
            .arg(dir.path().join("o.png"))
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!dir.path().join("o.png").exists(), "{args:?}");
    }
}
