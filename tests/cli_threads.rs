//! `--threads N`: a compute subcommand's CPU work on a pool of N threads
//! of its own, the same results as on every core, and a count of 0
//! refused as bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tempfile::TempDir;

#[path = "support/npy.rs"]
mod npy;
use npy::raw_npy;

/// A little-endian `f32` `.npy` of `rows × cols` deterministic values.
fn points(dir: &Path, name: &str, rows: usize, cols: usize) -> PathBuf {
    let dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, {cols}), }}");
    let data: Vec<u8> = (0..rows * cols)
        .flat_map(|i| (((i * 7919) % 1000) as f32 / 250.0).to_le_bytes())
        .collect();
    let path = dir.join(name);
    std::fs::write(&path, raw_npy(&dict, &data)).unwrap();
    path
}

/// `locus local-mean` on the CPU with `threads` (none: the default),
/// writing `out`.
fn local_mean(dir: &Path, threads: Option<&str>, out: &str) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_locus"));
    c.args([
        "local-mean",
        "--backend",
        "cpu",
        "--bandwidth",
        "0.5",
        "--json",
    ])
    .args(["--keys", "x.npy", "--output", out])
    .current_dir(dir)
    .env("NODEVICE_SELECT", "1");
    if let Some(t) = threads {
        c.args(["--threads", t]);
    }
    c.output().unwrap()
}

#[test]
fn threads_run_the_op_on_that_many_with_the_same_result() {
    let dir = TempDir::new().unwrap();
    points(dir.path(), "x.npy", 3000, 3);
    let one = local_mean(dir.path(), Some("1"), "one.npy");
    assert!(one.status.success(), "{one:?}");
    let json = String::from_utf8(one.stdout).unwrap();
    assert!(json.contains("(rayon, 1 threads,"), "{json}");
    let three = local_mean(dir.path(), Some("3"), "three.npy");
    assert!(three.status.success(), "{three:?}");
    assert!(
        String::from_utf8(three.stdout)
            .unwrap()
            .contains("(rayon, 3 threads,")
    );
    let all = local_mean(dir.path(), None, "all.npy");
    assert!(all.status.success(), "{all:?}");
    let read = |f: &str| std::fs::read(dir.path().join(f)).unwrap();
    assert_eq!(read("one.npy"), read("three.npy"));
    assert_eq!(read("one.npy"), read("all.npy"));
}

#[test]
fn zero_threads_is_bad_input() {
    let dir = TempDir::new().unwrap();
    points(dir.path(), "x.npy", 10, 2);
    let out = local_mean(dir.path(), Some("0"), "o.npy");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--threads"));
    assert!(!dir.path().join("o.npy").exists());
}
