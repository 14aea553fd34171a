//! The `locus` binary under an address-space cap, one case per op family
//! (local means, densities, kNN, local PCA, local linear fits,
//! imputation): inputs that the cap lets the tool read but whose working
//! copies (transposed and padded keys, centred values, the imputation's
//! values and mask) it cannot hold. Each run must end in exit 1 with a
//! one-line message naming the op and what could not be allocated — never
//! an abort ("memory allocation of N bytes failed", exit 134) — and leave
//! no output file behind.
//!
//! The inputs are sparse `.npy` files of zeros (a header, then a hole), so
//! they cost no disk and little time to write; reading them costs about a
//! second each.

use std::path::Path;
use std::process::{Command, Output};

use tempfile::TempDir;

#[path = "support/npy.rs"]
mod npy;
use npy::sparse_npy;

/// The address-space cap: room for the tool itself (about 100 MB with two
/// threads), a 200 MB input and some slack, not for the working copies.
const CAP: u64 = 500_000_000;

/// The tool on the CPU backend under [`CAP`], with two threads (the
/// tool's own address space then does not grow with the machine's cores).
fn capped(dir: &Path, args: &[&str]) -> Output {
    Command::new("prlimit")
        .arg(format!("--as={CAP}"))
        .arg(env!("CARGO_BIN_EXE_locus"))
        .args(args)
        .args(["--backend", "cpu", "--output", "o.npy"])
        .current_dir(dir)
        .env("NODEVICE_SELECT", "1")
        .env("RAYON_NUM_THREADS", "2")
        .env("MALLOC_ARENA_MAX", "2")
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap()
}

/// Asserts a clean failure to allocate: exit 1 (not an abort), one line
/// on stderr naming the buffer and its size ("local_mean: transposed keys
/// needs 1600000000 bytes, which cannot be allocated"), no output.
#[track_caller]
fn out_of_memory(dir: &Path, out: &Output) {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(1),
        "status {:?}, stderr: {err}",
        out.status
    );
    let last = err.trim_end().lines().last().unwrap_or_default();
    assert!(last.starts_with("error: "), "{err}");
    assert!(
        last.contains(" needs ") && last.contains("bytes, which cannot be allocated"),
        "{last:?} does not name the allocation"
    );
    assert!(
        !err.contains("memory allocation of") && !err.contains("panicked"),
        "{err}"
    );
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('o') || n.contains(".tmp"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// Keys 2 × 25·10⁶ (200 MB): their transposed copy, padded to 16 rows per
/// column, needs 1.6 GB.
fn wide_keys(dir: &TempDir) {
    sparse_npy(dir.path(), "wide.npy", &[2, 25_000_000]);
}

/// Keys 2.5·10⁶ × 20 (200 MB): the local fits' working copies (the keys
/// transposed, and as values, or centred) need 400 MB more.
fn tall_keys(dir: &TempDir) {
    sparse_npy(dir.path(), "tall.npy", &[2_500_000, 20]);
    sparse_npy(dir.path(), "q.npy", &[10, 20]);
}

/// Which input a case reads.
#[derive(Clone, Copy)]
enum Input {
    Wide,
    Tall,
}

/// Runs the tool with `args` on `input` under the cap and asserts a clean
/// failure to allocate.
fn fails_cleanly(input: Input, args: &[&str]) {
    if npy::prlimit().is_none() {
        return;
    }
    let dir = TempDir::new().unwrap();
    match input {
        Input::Wide => wide_keys(&dir),
        Input::Tall => tall_keys(&dir),
    }
    let out = capped(dir.path(), args);
    out_of_memory(dir.path(), &out);
}

#[test]
fn local_mean_under_a_memory_cap_is_an_error_not_an_abort() {
    fails_cleanly(
        Input::Wide,
        &["local-mean", "--keys", "wide.npy", "--bandwidth", "1"],
    );
}

#[test]
fn kde_under_a_memory_cap_is_an_error_not_an_abort() {
    fails_cleanly(
        Input::Wide,
        &["kde", "--keys", "wide.npy", "--bandwidth", "1"],
    );
}

#[test]
fn knn_under_a_memory_cap_is_an_error_not_an_abort() {
    fails_cleanly(Input::Wide, &["knn", "--keys", "wide.npy", "--k", "1"]);
}

#[test]
fn local_pca_under_a_memory_cap_is_an_error_not_an_abort() {
    let args = [
        "local-pca",
        "--keys",
        "tall.npy",
        "--queries",
        "q.npy",
        "--bandwidth",
        "1",
    ];
    fails_cleanly(Input::Tall, &args);
}

#[test]
fn local_linear_fit_under_a_memory_cap_is_an_error_not_an_abort() {
    let args = ["local-mean", "--keys", "tall.npy", "--queries", "q.npy"];
    fails_cleanly(
        Input::Tall,
        &[&args[..], &["--bandwidth", "1", "--degree", "1"]].concat(),
    );
}

#[test]
fn impute_under_a_memory_cap_is_an_error_not_an_abort() {
    fails_cleanly(
        Input::Tall,
        &["impute", "--input", "tall.npy", "--bandwidth", "1"],
    );
}
