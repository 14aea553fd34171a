//! The `locus` binary, run on small files in a temporary folder: outputs
//! against the library's results, file formats, error messages and exit
//! codes, `--verify`, `--json`.

mod common;

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use common::{Rng, cpu, gpu};
use locus::{Kernel, LaplacianKind, Profile};
use ndarray::{Array1, Array2, ShapeBuilder};
use ndarray_npy::{read_npy, write_npy};
use predicates::prelude::*;
use serde_json::Value;
use tempfile::TempDir;

fn locus() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_locus"));
    c.env("NODEVICE_SELECT", "1");
    c
}

fn npy(dir: &TempDir, name: &str, a: &Array2<f32>) -> PathBuf {
    let p = dir.path().join(name);
    write_npy(&p, a).unwrap();
    p
}

fn file(dir: &TempDir, name: &str, text: &str) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn to_csv(a: &Array2<f32>) -> String {
    let mut s = String::new();
    for r in a.rows() {
        let cells: Vec<String> = r.iter().map(|v| format!("{v:?}")).collect();
        s += &cells.join(",");
        s.push('\n');
    }
    s
}

type Three<T> = (T, T, T);

/// Random queries (`m × d`) and keys (`n × d`) in the unit cube and values
/// (`n × q`) in `±span`, written as `q.npy`, `x.npy`, `y.npy` in `dir`.
fn queries_keys_values(
    dir: &TempDir,
    seed: u64,
    (m, n, d, q): (usize, usize, usize, usize),
    span: f32,
) -> (Three<Array2<f32>>, Three<PathBuf>) {
    let mut rng = Rng::new(seed);
    let (qm, x, y) = (
        rng.matrix(m, d, 0.0, 1.0),
        rng.matrix(n, d, 0.0, 1.0),
        rng.matrix(n, q, -span, span),
    );
    let paths = (
        npy(dir, "q.npy", &qm),
        npy(dir, "x.npy", &x),
        npy(dir, "y.npy", &y),
    );
    ((qm, x, y), paths)
}

/// Reads an output: `.npy` as f32, `.csv` as plain numbers.
fn read_out(p: &Path) -> Array2<f32> {
    if p.extension().unwrap() == "npy" {
        return read_npy(p).unwrap();
    }
    let text = std::fs::read_to_string(p).unwrap();
    let rows: Vec<Vec<f32>> = text
        .lines()
        .map(|l| l.split(',').map(|f| f.parse().unwrap()).collect())
        .collect();
    let cols = rows[0].len();
    Array2::from_shape_vec((rows.len(), cols), rows.concat()).unwrap()
}

/// Same shape, equal within `rtol` (NaN where the other is NaN).
#[track_caller]
fn assert_near(got: &Array2<f32>, want: &Array2<f32>, rtol: f32) {
    assert_eq!(got.dim(), want.dim());
    for ((i, j), &w) in want.indexed_iter() {
        let g = got[[i, j]];
        if w.is_nan() {
            assert!(g.is_nan(), "[{i},{j}] = {g}, expected NaN");
        } else {
            assert!(
                (g - w).abs() <= rtol * w.abs() + 1e-6,
                "[{i},{j}] = {g}, expected {w}"
            );
        }
    }
}

fn json_of(out: &[u8]) -> Value {
    serde_json::from_slice(out).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON object ({e}): {}",
            String::from_utf8_lossy(out)
        )
    })
}

/// Whether GPU runs can be tested: a GPU adapter (lavapipe will do), or
/// SKIPPED (a failure under `CI=true`, see `common::gpu_engine`).
fn have_gpu() -> bool {
    gpu().is_some()
}

// ---- local-mean ------------------------------------------------------------

#[test]
fn local_mean_matches_the_library() {
    let dir = TempDir::new().unwrap();
    let mut rng = Rng::new(1);
    let (q, x, y) = (
        rng.matrix(37, 3, 0.0, 1.0),
        rng.matrix(53, 3, 0.0, 1.0),
        rng.matrix(53, 2, -5.0, 5.0),
    );
    let out = dir.path().join("m.npy");
    locus()
        .args(["local-mean", "--backend", "cpu", "--kernel", "epanechnikov"])
        .args(["--bandwidth", "0.3", "--queries"])
        .arg(npy(&dir, "q.npy", &q))
        .arg("--keys")
        .arg(npy(&dir, "x.npy", &x))
        .arg("--values")
        .arg(npy(&dir, "y.npy", &y))
        .arg("--output")
        .arg(&out)
        .assert()
        .success()
        .stdout(predicate::str::contains("local-mean: M=37 N=53 d=3 q=2"));
    let k = Kernel::new(Profile::Epanechnikov, 0.3).unwrap();
    let want = cpu().local_mean(&k, q.view(), x.view(), y.view()).unwrap();
    assert!(want.empty_rows > 0, "the test wants some empty rows");
    assert_near(&read_out(&out), &want.values, 1e-6);
}

#[test]
fn local_linear_and_local_pca_match_the_library() {
    let dir = TempDir::new().unwrap();
    let mut rng = Rng::new(5);
    let (q, x, y) = (
        rng.matrix(19, 2, 0.0, 1.0),
        rng.matrix(80, 2, 0.0, 1.0),
        rng.matrix(80, 2, -5.0, 5.0),
    );
    let (out, slopes) = (dir.path().join("f.npy"), dir.path().join("s.csv"));
    locus()
        .args(["local-mean", "--backend", "cpu", "--bandwidth", "0.3"])
        .args(["--degree", "1", "--queries"])
        .arg(npy(&dir, "q.npy", &q))
        .arg("--keys")
        .arg(npy(&dir, "x.npy", &x))
        .arg("--values")
        .arg(npy(&dir, "y.npy", &y))
        .arg("--slopes")
        .arg(&slopes)
        .arg("--output")
        .arg(&out)
        .assert()
        .success()
        .stdout(predicate::str::contains("degree: 1"));
    let k = Kernel::gaussian(0.3).unwrap();
    let want = cpu()
        .local_polynomial(&k, q.view(), x.view(), y.view(), 1)
        .unwrap();
    assert_near(&read_out(&out), &want.fitted, 1e-6);
    // CSV: one row of q·d slopes per query.
    let s = want.slopes.unwrap();
    let flat = s.to_shape((19, 4)).unwrap().to_owned();
    assert_near(&read_out(&slopes), &flat, 1e-6);

    let (comp, var) = (dir.path().join("c.npy"), dir.path().join("v.npy"));
    locus()
        .args(["local-pca", "--backend", "cpu", "--kernel", "biweight"])
        .args(["--bandwidth", "0.5", "--components", "2", "--keys"])
        .arg(dir.path().join("x.npy"))
        .arg("--variances")
        .arg(&var)
        .arg("--output")
        .arg(&comp)
        .assert()
        .success()
        .stdout(predicate::str::contains("local-pca: M=80 N=80 d=2 k=2"));
    let k = Kernel::new(Profile::Biweight, 0.5).unwrap();
    let want = cpu().local_pca(&k, x.view(), x.view(), 2).unwrap();
    assert_near(&read_out(&var), &want.variances, 1e-6);
    let got: ndarray::Array3<f32> = read_npy(&comp).unwrap();
    assert_eq!(got, want.components);
    let xs = dir.path().join("x.npy");
    let xs = xs.to_str().unwrap();
    for (args, expect) in [
        (
            vec![
                "local-mean",
                "--keys",
                xs,
                "--bandwidth",
                "1",
                "--degree",
                "2",
                "-o",
                "out.csv",
            ],
            vec!["--degree is 0"],
        ),
        (
            vec![
                "local-mean",
                "--keys",
                xs,
                "--bandwidth",
                "1",
                "--slopes",
                "s.npy",
                "-o",
                "out.csv",
            ],
            vec!["--slopes needs --degree 1"],
        ),
        (
            vec![
                "local-pca",
                "--keys",
                xs,
                "--bandwidth",
                "1",
                "--components",
                "3",
                "-o",
                "out.csv",
            ],
            vec!["--components must lie in 1..=2"],
        ),
    ] {
        fails_with(&dir, &args, &expect);
    }
}

#[test]
fn impute_reads_missing_entries_and_matches_the_library() {
    let dir = TempDir::new().unwrap();
    let csv = file(&dir, "h.csv", "a,b,c\n1,2,3\n1.1,,3.1\n5,6,NA\n1,2.1,nan\n");
    let out = dir.path().join("f.npy");
    locus()
        .args([
            "impute",
            "--backend",
            "cpu",
            "--bandwidth",
            "0.7",
            "--iterations",
            "2",
            "-i",
        ])
        .arg(&csv)
        .arg("-o")
        .arg(&out)
        .assert()
        .success()
        .stdout(predicate::str::contains("imputed: 3"));
    let nan = f32::NAN;
    let x = Array2::from_shape_vec(
        (4, 3),
        vec![1.0, 2.0, 3.0, 1.1, nan, 3.1, 5.0, 6.0, nan, 1.0, 2.1, nan],
    )
    .unwrap();
    let want = cpu()
        .impute(&Kernel::gaussian(0.7).unwrap(), x.view(), 2)
        .unwrap();
    // Positions of points read as text come back as float64.
    let got: Array2<f64> = read_npy(&out).unwrap();
    assert_near(&got.mapv(|v| v as f32), &want.values, 1e-6);
    // NaN in .npy is a missing entry here, and still refused elsewhere.
    let holed = npy(&dir, "x.npy", &x);
    locus()
        .args([
            "impute",
            "--backend",
            "cpu",
            "--bandwidth",
            "0.7",
            "--reference",
        ])
        .arg(&holed)
        .arg("-i")
        .arg(&holed)
        .arg("-o")
        .arg(dir.path().join("g.csv"))
        .assert()
        .success();
    let xs = holed.to_str().unwrap();
    fails_with(
        &dir,
        &[
            "local-mean",
            "--keys",
            xs,
            "--bandwidth",
            "1",
            "-o",
            "out.csv",
        ],
        &["NaN at row 1, column 1"],
    );
    let inf = file(&dir, "inf.csv", "1,inf\n2,3\n");
    fails_with(
        &dir,
        &[
            "impute",
            "-i",
            inf.to_str().unwrap(),
            "--bandwidth",
            "1",
            "-o",
            "out.csv",
        ],
        &["infinity at row 0, column 1"],
    );
}

#[test]
fn self_local_mean_from_csv_with_header_and_comments() {
    let dir = TempDir::new().unwrap();
    let x = Rng::new(2).matrix(40, 2, 0.0, 1.0);
    let text = format!("# points, made by a test\nx,y\n{}", to_csv(&x));
    let out = dir.path().join("m.csv");
    let assert = locus()
        .args([
            "local-mean",
            "--backend",
            "cpu",
            "--bandwidth",
            "0.25",
            "--json",
            "--keys",
        ])
        .arg(file(&dir, "x.csv", &text))
        .arg("-o")
        .arg(&out)
        .assert()
        .success();
    let j = json_of(&assert.get_output().stdout);
    assert_eq!(j["command"], "local-mean");
    assert_eq!(j["backend"], "cpu");
    assert_eq!(j["summary"]["self_local_mean"], true);
    assert_eq!(j["sizes"]["N"], 40);
    assert_eq!(j["kernel"]["profile"], "gaussian");
    assert!(j["seconds"].as_f64().unwrap() >= 0.0);
    let k = Kernel::gaussian(0.25).unwrap();
    let want = cpu().self_local_mean(&k, x.view()).unwrap();
    assert_near(&read_out(&out), &want.values, 1e-6);
}

#[test]
fn values_default_to_the_keys() {
    let dir = TempDir::new().unwrap();
    let mut rng = Rng::new(3);
    let (q, x) = (rng.matrix(9, 2, 0.0, 1.0), rng.matrix(30, 2, 0.0, 1.0));
    let out = dir.path().join("m.npy");
    locus()
        .args([
            "local-mean",
            "--backend",
            "cpu",
            "--bandwidth",
            "0.4",
            "-q",
            "--queries",
        ])
        .arg(npy(&dir, "q.npy", &q))
        .arg("--keys")
        .arg(npy(&dir, "x.npy", &x))
        .arg("--output")
        .arg(&out)
        .assert()
        .success()
        .stdout("");
    let k = Kernel::gaussian(0.4).unwrap();
    let want = cpu().local_mean(&k, q.view(), x.view(), x.view()).unwrap();
    assert_near(&read_out(&out), &want.values, 1e-6);
}

// ---- kernel-matrix ---------------------------------------------------------

#[test]
fn kernel_matrix_variants_match_the_library() {
    let dir = TempDir::new().unwrap();
    let mut rng = Rng::new(4);
    let (q, x) = (rng.matrix(11, 2, 0.0, 1.0), rng.matrix(17, 2, 0.0, 1.0));
    let qp = npy(&dir, "q.npy", &q);
    let xp = file(&dir, "x.csv", &to_csv(&x));
    let k = Kernel::new(Profile::Biweight, 0.5).unwrap();
    let e = cpu();
    let cases: [(&[&str], bool, Array2<f32>); 4] = [
        (&[], true, e.kernel_matrix(&k, q.view(), x.view()).unwrap()),
        (
            &["--normalize", "rows"],
            true,
            e.normalized_kernel_matrix(&k, q.view(), x.view())
                .unwrap()
                .values,
        ),
        (
            &["--laplacian"],
            false,
            e.laplacian(&k, x.view(), LaplacianKind::Unnormalized)
                .unwrap(),
        ),
        (
            &["--laplacian", "--normalize", "rows"],
            false,
            e.laplacian(&k, x.view(), LaplacianKind::RandomWalk)
                .unwrap(),
        ),
    ];
    for (i, (extra, with_queries, want)) in cases.iter().enumerate() {
        let out = dir.path().join(format!("k{i}.csv"));
        let mut cmd = locus();
        cmd.args([
            "kernel-matrix",
            "--backend",
            "cpu",
            "--kernel",
            "biweight",
            "--bandwidth",
            "0.5",
        ])
        .args(*extra)
        .arg("--keys")
        .arg(&xp)
        .arg("--output")
        .arg(&out);
        if *with_queries {
            cmd.arg("--queries").arg(&qp);
        }
        cmd.assert().success();
        assert_near(&read_out(&out), want, 1e-6);
    }
}

#[test]
fn laplacian_takes_no_queries() {
    let dir = TempDir::new().unwrap();
    let x = file(&dir, "x.csv", "0,0\n1,1\n");
    locus()
        .args([
            "kernel-matrix",
            "--laplacian",
            "--bandwidth",
            "1",
            "--queries",
        ])
        .arg(&x)
        .arg("--keys")
        .arg(&x)
        .arg("--output")
        .arg(dir.path().join("l.npy"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("cannot be used with"));
}

// ---- files -----------------------------------------------------------------

#[test]
fn npy_f64_fortran_order_and_one_dimensional_inputs() {
    let dir = TempDir::new().unwrap();
    let mut rng = Rng::new(5);
    let (q, x) = (rng.matrix(6, 2, 0.0, 1.0), rng.matrix(25, 2, 0.0, 1.0));
    let y: Array1<f32> = Array1::from_shape_fn(25, |i| i as f32 * 0.5 - 3.0);
    // Queries: f32 in Fortran order; keys: f64 in Fortran order; values: 1-D f64.
    let qf = Array2::from_shape_vec((6, 2).f(), q.t().iter().copied().collect()).unwrap();
    assert_eq!(qf, q);
    let xf =
        Array2::from_shape_vec((25, 2).f(), x.t().iter().map(|&v| f64::from(v)).collect()).unwrap();
    let (qp, xp, yp) = (
        dir.path().join("q.npy"),
        dir.path().join("x.npy"),
        dir.path().join("y.npy"),
    );
    write_npy(&qp, &qf).unwrap();
    write_npy(&xp, &xf).unwrap();
    write_npy(&yp, &y.mapv(f64::from)).unwrap();
    let out = dir.path().join("m.npy");
    locus()
        .args([
            "local-mean",
            "--backend",
            "cpu",
            "--bandwidth",
            "0.3",
            "--queries",
        ])
        .arg(&qp)
        .arg("--keys")
        .arg(&xp)
        .arg("--values")
        .arg(&yp)
        .arg("--output")
        .arg(&out)
        .assert()
        .success();
    let k = Kernel::gaussian(0.3).unwrap();
    let y2 = y.insert_axis(ndarray::Axis(1));
    let want = cpu().local_mean(&k, q.view(), x.view(), y2.view()).unwrap();
    assert_near(&read_out(&out), &want.values, 1e-6);
}

#[test]
fn csv_and_npy_outputs_hold_the_same_bits() {
    let dir = TempDir::new().unwrap();
    let x = Rng::new(6).matrix(30, 3, -1e3, 1e3);
    let xp = npy(&dir, "x.npy", &x);
    let (a, b) = (dir.path().join("m.csv"), dir.path().join("m.npy"));
    for out in [&a, &b] {
        locus()
            .args([
                "local-mean",
                "--backend",
                "cpu",
                "--bandwidth",
                "300",
                "--keys",
            ])
            .arg(&xp)
            .arg("--output")
            .arg(out)
            .assert()
            .success();
    }
    let (ca, nb) = (read_out(&a), read_out(&b));
    assert_eq!(ca.dim(), (30, 3));
    for (u, v) in ca.iter().zip(&nb) {
        assert_eq!(u.to_bits(), v.to_bits(), "{u} vs {v}");
    }
    // Written f32, and no temporary files left beside the outputs.
    let header = std::fs::read(&b).unwrap();
    assert!(String::from_utf8_lossy(&header[..80]).contains("<f4"));
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.contains("tmp")), "{names:?}");
}

// ---- errors ----------------------------------------------------------------

/// Runs `args` in `dir` and checks: exit 2, one line on stderr containing
/// every piece of `expect`, no output file, no panic.
#[track_caller]
fn fails_with(dir: &TempDir, args: &[&str], expect: &[&str]) {
    let out = locus().current_dir(dir.path()).args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: stderr {err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "{args:?}: not one line: {err}"
    );
    assert!(err.starts_with("error: "), "{err}");
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "{err}"
    );
    for e in expect {
        assert!(err.contains(e), "{args:?}: {err:?} lacks {e:?}");
    }
    assert!(!dir.path().join("out.csv").exists());
}

#[test]
fn bad_input_exits_2_naming_the_problem() {
    let dir = TempDir::new().unwrap();
    file(&dir, "x.csv", "a,b\n0,0\n1,1\n2,0.5\n");
    file(&dir, "x3.csv", "0,0,0\n1,1,1\n");
    file(&dir, "ragged.csv", "# comment\n1,2\n3,4\n5\n");
    file(&dir, "nan.csv", "1,2\n3,nan\n");
    file(&dir, "word.csv", "1,2\n3,four\n");
    file(&dir, "y2.csv", "1\n2\n");
    file(&dir, "empty.csv", "x,y\n");
    std::fs::write(dir.path().join("bad.npy"), b"not numpy").unwrap();
    write_npy(dir.path().join("int.npy"), &Array2::<i64>::zeros((2, 2))).unwrap();
    write_npy(
        dir.path().join("inf.npy"),
        &ndarray::array![[0.0f64], [f64::INFINITY]],
    )
    .unwrap();
    let lm = |extra: &[&'static str]| {
        let mut v = vec!["local-mean", "--bandwidth", "1", "--output", "out.csv"];
        v.extend_from_slice(extra);
        v
    };
    fails_with(
        &dir,
        &lm(&["--keys", "missing.csv"]),
        &["--keys missing.csv", "no such file"],
    );
    fails_with(
        &dir,
        &lm(&["--keys", "ragged.csv"]),
        &["ragged.csv", "ragged row: line 4"],
    );
    fails_with(
        &dir,
        &lm(&["--keys", "nan.csv"]),
        &["nan.csv", "NaN at row 1, column 1", "line 2"],
    );
    fails_with(
        &dir,
        &lm(&["--keys", "inf.npy"]),
        &["inf.npy", "infinity at row 1, column 0"],
    );
    fails_with(
        &dir,
        &lm(&["--keys", "word.csv"]),
        &["word.csv", "line 2, field 2", "\"four\""],
    );
    fails_with(
        &dir,
        &lm(&["--keys", "empty.csv"]),
        &["empty.csv", "empty (0×2)"],
    );
    fails_with(
        &dir,
        &lm(&["--keys", "bad.npy"]),
        &["bad.npy", "not a valid .npy file"],
    );
    fails_with(
        &dir,
        &lm(&["--keys", "int.npy"]),
        &["int.npy", "unsupported dtype"],
    );
    fails_with(
        &dir,
        &lm(&["--keys", "x.txt"]),
        &["x.txt", "unknown file type"],
    );
    fails_with(
        &dir,
        &lm(&["--keys", "x.csv", "--queries", "x3.csv"]),
        &[
            "shape mismatch",
            "--queries x3.csv (2×3)",
            "--keys x.csv (3×2)",
        ],
    );
    fails_with(
        &dir,
        &lm(&["--keys", "x.csv", "--values", "y2.csv"]),
        &[
            "shape mismatch",
            "--values y2.csv (2×1)",
            "one row per row of --keys",
        ],
    );
    for h in ["0", "-1", "nan", "1e40", "wide"] {
        fails_with(
            &dir,
            &[
                "local-mean",
                "--keys",
                "x.csv",
                "--output",
                "out.csv",
                "--bandwidth",
                h,
            ],
            &["--bandwidth", "bandwidth"],
        );
    }
    fails_with(
        &dir,
        &[
            "kernel-matrix",
            "--keys",
            "x.csv",
            "-o",
            "out.csv",
            "--bandwidth",
            "1",
            "--kernel",
            "boxcar",
        ],
        &["unknown kernel profile \"boxcar\"", "epanechnikov"],
    );
    fails_with(
        &dir,
        &["local-mean", "--keys", "x.csv", "--output", "out.csv"],
        &["--bandwidth"],
    );
    fails_with(
        &dir,
        &lm(&["--keys", "x.csv", "--backend", "tpu"]),
        &["tpu"],
    );
    fails_with(
        &dir,
        &[
            "local-mean",
            "--keys",
            "x.csv",
            "--bandwidth",
            "1",
            "--output",
            "out.xlsx",
        ],
        &["out.xlsx", "unknown file type"],
    );
    fails_with(
        &dir,
        &[
            "local-mean",
            "--keys",
            "x.csv",
            "--bandwidth",
            "1",
            "--output",
            "no/such/out.csv",
        ],
        &["no/such/out.csv", "does not exist"],
    );
    fails_with(&dir, &["demo", "--plot", "demo.jpg"], &["demo.jpg", ".png"]);
    fails_with(&dir, &["frobnicate"], &["frobnicate"]);
}

// ---- GPU: --verify, --backend gpu -------------------------------------------

#[test]
fn verify_passes_between_gpu_and_cpu() {
    if !have_gpu() {
        return;
    }
    let dir = TempDir::new().unwrap();
    let ((q, x, y), (qp, xp, yp)) = queries_keys_values(&dir, 7, (45, 70, 3, 3), 2.0);
    let out = dir.path().join("m.npy");
    let assert = locus()
        .args([
            "local-mean",
            "--backend",
            "gpu",
            "--verify",
            "--json",
            "--kernel",
            "cauchy",
        ])
        .args(["--bandwidth", "0.2", "--queries"])
        .arg(&qp)
        .arg("--keys")
        .arg(&xp)
        .arg("--values")
        .arg(&yp)
        .arg("--output")
        .arg(&out)
        .assert()
        .success();
    let j = json_of(&assert.get_output().stdout);
    assert_eq!(j["backend"], "gpu");
    assert!(j["adapter"]["name"].is_string());
    assert_eq!(j["verify"]["backend"], "cpu");
    assert_eq!(j["verify"]["ok"], true);
    assert!(j["verify"]["max_abs"].as_f64().unwrap() <= 1e-4);
    let k = Kernel::new(Profile::Cauchy, 0.2).unwrap();
    let want = cpu().local_mean(&k, q.view(), x.view(), y.view()).unwrap();
    assert_near(&read_out(&out), &want.values, 1e-4);

    // A CPU run verified on the GPU, in text.
    let out = dir.path().join("k.csv");
    locus()
        .args([
            "kernel-matrix",
            "--backend",
            "cpu",
            "--verify",
            "--laplacian",
            "--bandwidth",
            "0.3",
            "--keys",
        ])
        .arg(&xp)
        .arg("--output")
        .arg(&out)
        .assert()
        .success()
        .stdout(predicate::str::contains("verify on gpu").and(predicate::str::contains(": ok")));
    assert!(out.exists());
}

// ---- info, bench, demo -----------------------------------------------------

#[test]
fn info_text_and_json() {
    locus().arg("info").assert().success().stdout(
        predicate::str::contains("auto backend:").and(predicate::str::contains("cpu backend")),
    );
    let out = locus().args(["info", "--json"]).output().unwrap();
    assert!(out.status.success());
    let j = json_of(&out.stdout);
    assert_eq!(j["cpu"]["backend"], "cpu");
    assert!(j["cpu"]["threads"].as_u64().unwrap() >= 1);
    assert!(j["adapters"].is_array());
    if have_gpu() {
        assert!(
            j["gpu"]["limits"]["max_storage_buffer_binding_size"]
                .as_u64()
                .unwrap()
                > 0
        );
        assert!(j["gpu"]["features"].is_array());
    }
}

#[test]
fn bench_quick_json() {
    let out = locus()
        .args(["bench", "--quick", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j = json_of(&out.stdout);
    let results = j["results"].as_array().unwrap();
    let ops: Vec<&str> = results.iter().map(|r| r["op"].as_str().unwrap()).collect();
    for op in ["local-mean", "kernel-matrix", "kernel-matrix --laplacian"] {
        assert!(ops.contains(&op), "{ops:?}");
    }
    for r in results {
        assert!(r["cpu"]["seconds"].as_f64().unwrap() > 0.0);
        assert!(r["cpu"]["pairs_per_second"].as_f64().unwrap() > 0.0);
        if have_gpu() {
            assert!(r["gpu"]["seconds"].as_f64().unwrap() > 0.0, "{r}");
            assert!(r["speedup"].as_f64().unwrap() > 0.0);
            assert_eq!(r["check"]["rows"], "all", "{r}");
            assert_eq!(r["check"]["deviation"]["ok"], true, "{r}");
        }
    }
    if have_gpu() {
        let software = j["gpu"]["adapter"]["software"].as_bool().unwrap();
        assert_eq!(j["gpu_software"], software);
    }
}

#[test]
fn demo_runs_on_the_cpu_and_plots() {
    let dir = TempDir::new().unwrap();
    let png = dir.path().join("demo.png");
    locus()
        .args(["demo", "--backend", "cpu", "--points", "3000", "--plot"])
        .arg(&png)
        .assert()
        .success()
        .stdout(
            predicate::str::contains("backend: cpu")
                .and(predicate::str::contains("MeanShift found 5 clusters"))
                .and(predicate::str::contains("time:"))
                .and(predicate::str::contains("wrote")),
        );
    let img = image::open(&png).unwrap();
    assert_eq!((img.width(), img.height()), (900, 900));
    // The default plot path is demo.png in the working directory.
    let out = locus()
        .current_dir(dir.path())
        .args(["demo", "--backend", "cpu", "--points", "500", "--json"])
        .output()
        .unwrap();
    let j = json_of(&out.stdout);
    assert_eq!(j["command"], "demo");
    assert_eq!(j["summary"]["clusters"], 5);
    assert_eq!(j["summary"]["converged"], true);
    assert!(dir.path().join("demo.png").exists());
}

// ---- mean-shift, medoid-shift ----------------------------------------------

#[test]
fn mean_shift_and_medoid_shift_match_the_library() {
    let dir = TempDir::new().unwrap();
    let mut rng = Rng::new(33);
    // Three blobs of 60 points.
    let mut x = rng.matrix(180, 2, -0.5, 0.5);
    for (i, mut r) in x.rows_mut().into_iter().enumerate() {
        r[0] += [0.0, 6.0, 0.0][i % 3];
        r[1] += [0.0, 0.0, 6.0][i % 3];
    }
    let xp = npy(&dir, "x.npy", &x);
    let verify = if have_gpu() { vec!["--verify"] } else { vec![] };
    let (labels, modes, png) = (
        dir.path().join("l.npy"),
        dir.path().join("m.csv"),
        dir.path().join("ms.png"),
    );
    let out = locus()
        .args([
            "mean-shift",
            "--backend",
            "cpu",
            "--bandwidth",
            "1.5",
            "--seeds",
            "binned",
            "--json",
        ])
        .args(&verify)
        .arg("--input")
        .arg(&xp)
        .arg("--labels")
        .arg(&labels)
        .arg("--modes")
        .arg(&modes)
        .arg("--plot")
        .arg(&png)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j = json_of(&out.stdout);
    assert_eq!(j["summary"]["clusters"], 3);
    let p = locus::MeanShiftParams::new()
        .bandwidth(1.5)
        .seeds(locus::Seeds::Binned { min_bin_freq: 1 })
        .check()
        .unwrap();
    let want = cpu().mean_shift(&p, x.view()).unwrap();
    let got: Array1<i64> = read_npy(&labels).unwrap();
    assert_eq!(got, want.labels);
    assert_near(&read_out(&modes), &want.modes, 1e-6);
    assert!(image::open(&png).is_ok());

    // --quantile estimates the bandwidth first and reports it.
    let out = locus()
        .args([
            "mean-shift",
            "--backend",
            "cpu",
            "--quantile",
            "0.2",
            "--json",
            "--input",
        ])
        .arg(&xp)
        .arg("--labels")
        .arg(dir.path().join("l2.npy"))
        .output()
        .unwrap();
    let j = json_of(&out.stdout);
    let h = j["summary"]["bandwidth"].as_f64().unwrap() as f32;
    let want_h = cpu().estimate_bandwidth(x.view(), 0.2, None).unwrap();
    assert_eq!(h, want_h);
    assert_eq!(j["summary"]["bandwidth_estimated"], true);

    let (ml, mm) = (dir.path().join("ml.csv"), dir.path().join("mm.npy"));
    locus()
        .args(["medoid-shift", "--backend", "cpu", "--bandwidth", "1.0"])
        .args(&verify)
        .arg("--input")
        .arg(&xp)
        .arg("--labels")
        .arg(&ml)
        .arg("--medoids")
        .arg(&mm)
        .assert()
        .success()
        .stdout(
            predicate::str::contains("clusters: ").and(predicate::str::contains("medoid indices")),
        );
    let p = locus::MedoidShiftParams::new()
        .bandwidth(1.0)
        .check()
        .unwrap();
    let want = cpu().medoid_shift(&p, x.view()).unwrap();
    let got = read_out(&ml);
    for i in 0..180 {
        assert_eq!(got[[i, 0]] as i64, want.labels[i]);
    }
    assert_near(&read_out(&mm), &want.modes, 0.0);

    // Bad input: a constant input cannot estimate a bandwidth; max-iter 0.
    let c = npy(&dir, "c.npy", &Array2::from_elem((10, 2), 1.0f32));
    fails_with(
        &dir,
        &["mean-shift", "--input", "c.npy", "--labels", "o.npy"],
        &["--input", "c.npy", "bandwidth"],
    );
    let _ = c;
    fails_with(
        &dir,
        &[
            "mean-shift",
            "--bandwidth",
            "1",
            "--max-iter",
            "0",
            "--input",
            "x.npy",
            "--labels",
            "o.npy",
        ],
        &["max_iter"],
    );
}

// ---- kde, classify, knn ----------------------------------------------------

#[test]
fn kde_classify_knn_match_the_library() {
    let dir = TempDir::new().unwrap();
    let mut rng = Rng::new(21);
    let (q, x) = (rng.matrix(23, 2, 0.0, 1.0), rng.matrix(61, 2, 0.0, 1.0));
    let labels = Array1::from_shape_fn(61, |i| (i % 3) as f32);
    let (qp, xp) = (npy(&dir, "q.npy", &q), npy(&dir, "x.npy", &x));
    let lp = dir.path().join("l.npy");
    write_npy(&lp, &labels).unwrap();
    let verify = if have_gpu() { vec!["--verify"] } else { vec![] };

    // kde and --log, by a profile's name (cosine: scikit-learn's sixth)
    for (p, log) in [Profile::Biweight, Profile::Cosine]
        .into_iter()
        .flat_map(|p| [(p, false), (p, true)])
    {
        let k = Kernel::new(p, 0.4).unwrap();
        let out = dir.path().join(format!("p{p}{log}.npy"));
        let mut c = locus();
        c.args([
            "kde",
            "--backend",
            "cpu",
            "--kernel",
            p.name(),
            "--bandwidth",
            "0.4",
        ])
        .args(&verify)
        .arg("--queries")
        .arg(&qp)
        .arg("--keys")
        .arg(&xp)
        .arg("--output")
        .arg(&out);
        if log {
            c.arg("--log");
        }
        c.assert().success();
        let want = cpu().log_density(&k, q.view(), x.view(), None).unwrap();
        let got: Array1<f32> = read_npy(&out).unwrap();
        for i in 0..23 {
            let w = if log { want[i] } else { want[i].exp() };
            let g = f64::from(got[i]);
            assert!(
                g == w || (g - w).abs() <= 1e-5 * w.abs() + 1e-7,
                "kde {p} log={log} [{i}] {g} vs {w}"
            );
        }
    }

    // classify with probabilities
    let (pred, proba) = (dir.path().join("pred.csv"), dir.path().join("proba.npy"));
    locus()
        .args(["classify", "--backend", "cpu", "--bandwidth", "0.3"])
        .args(&verify)
        .arg("--train")
        .arg(&xp)
        .arg("--labels")
        .arg(&lp)
        .arg("--queries")
        .arg(&qp)
        .arg("--output")
        .arg(&pred)
        .arg("--proba")
        .arg(&proba)
        .assert()
        .success();
    let kg = Kernel::gaussian(0.3).unwrap();
    let li = labels.mapv(|v| v as i64);
    let clf = cpu()
        .fit_classifier(&kg, x.view(), li.view(), None)
        .unwrap();
    let want = clf.predict(q.view()).unwrap();
    let got = read_out(&pred);
    for i in 0..23 {
        assert_eq!(got[[i, 0]] as i64, want.labels[i]);
    }
    assert_near(
        &read_out(&proba),
        &clf.predict_proba(q.view()).unwrap().values,
        1e-6,
    );

    // knn: i64 indices and distances
    let (idx, dist) = (dir.path().join("idx.npy"), dir.path().join("d.csv"));
    locus()
        .args(["knn", "--backend", "cpu", "--k", "5"])
        .args(&verify)
        .arg("--queries")
        .arg(&qp)
        .arg("--keys")
        .arg(&xp)
        .arg("--output")
        .arg(&idx)
        .arg("--distances")
        .arg(&dist)
        .assert()
        .success();
    let want = cpu().knn(q.view(), x.view(), 5).unwrap();
    let got: Array2<i64> = read_npy(&idx).unwrap();
    assert_eq!(got, want.indices);
    assert_near(&read_out(&dist), &want.distances, 1e-6);

    // Bad inputs: labels that are not class indices, k beyond N.
    let bad = dir.path().join("bad.csv");
    std::fs::write(
        &bad,
        (0..61)
            .map(|i| {
                if i == 4 {
                    "1.5\n".to_string()
                } else {
                    "0\n".to_string()
                }
            })
            .collect::<String>(),
    )
    .unwrap();
    fails_with(
        &dir,
        &[
            "classify",
            "--bandwidth",
            "0.3",
            "--train",
            "x.npy",
            "--labels",
            "bad.csv",
            "--queries",
            "q.npy",
            "--output",
            "o.npy",
        ],
        &[
            "--labels",
            "bad.csv",
            "line 5, field 1: \"1.5\" is not an integer",
        ],
    );
    fails_with(
        &dir,
        &["knn", "--k", "62", "--keys", "x.npy", "--output", "o.npy"],
        &["--k 62", "between 1 and"],
    );
}

// ---- softmax ---------------------------------------------------------------

#[test]
fn softmax_matches_the_library_for_stacks_matrices_and_merged_heads() {
    use locus::{SoftmaxParams, merge_heads, split_heads};
    use ndarray::{Array3, Axis};

    let dir = TempDir::new().unwrap();
    let mut rng = Rng::new(21);
    let stack = |rng: &mut Rng, b: usize, r: usize, c: usize, lo: f32| {
        let m = rng.matrix(b * r, c, lo, 1.0);
        m.into_shape_with_order((b, r, c)).unwrap()
    };
    let (phi, psi, v) = (
        stack(&mut rng, 3, 17, 5, -1.0),
        stack(&mut rng, 3, 23, 5, -1.0),
        stack(&mut rng, 3, 23, 2, -1.0),
    );
    let path = |name: &str, a: &Array3<f32>| {
        let p = dir.path().join(name);
        write_npy(&p, a).unwrap();
        p
    };
    let (pp, kp, vp) = (
        path("phi.npy", &phi),
        path("psi.npy", &psi),
        path("v.npy", &v),
    );

    // 3-D in, 3-D out; causal with M < N; the weights too.
    let (out, w) = (dir.path().join("o.npy"), dir.path().join("w.npy"));
    let assert = locus()
        .args(["softmax", "--backend", "cpu", "--causal", "--json", "--phi"])
        .arg(&pp)
        .arg("--psi")
        .arg(&kp)
        .arg("--values")
        .arg(&vp)
        .arg("--output")
        .arg(&out)
        .arg("--weights")
        .arg(&w)
        .assert()
        .success();
    let j = json_of(&assert.get_output().stdout);
    assert_eq!(j["sizes"]["B"], 3);
    assert_eq!(j["summary"]["causal"], true);
    let p = SoftmaxParams::new().with_causal(true);
    let want = cpu()
        .kernel_softmax(phi.view(), psi.view(), v.view(), &p)
        .unwrap();
    let got: Array3<f32> = read_npy(&out).unwrap();
    let flat = |a: Array3<f32>| {
        let (b, r, c) = a.dim();
        a.into_shape_with_order((b * r, c)).unwrap()
    };
    assert_near(&flat(got), &flat(want), 1e-5);
    let want_w = cpu().softmax_matrix(phi.view(), psi.view(), &p).unwrap();
    let got_w: Array3<f32> = read_npy(&w).unwrap();
    assert_near(&flat(got_w), &flat(want_w.clone()), 1e-5);
    // The last M of N = 23 positions: query 0 sees keys 0..=6.
    assert!(want_w[[1, 0, 7]] == 0.0 && want_w[[1, 0, 6]] > 0.0);

    // One head as a matrix, a CSV output, an explicit scale.
    let (phi0, psi0, v0) = (
        phi.index_axis(Axis(0), 0).to_owned(),
        psi.index_axis(Axis(0), 0).to_owned(),
        v.index_axis(Axis(0), 0).to_owned(),
    );
    let out = dir.path().join("o.csv");
    locus()
        .args([
            "softmax",
            "--backend",
            "cpu",
            "-q",
            "--scale",
            "-0.5",
            "--phi",
        ])
        .arg(npy(&dir, "phi0.npy", &phi0))
        .arg("--psi")
        .arg(npy(&dir, "psi0.npy", &psi0))
        .arg("--values")
        .arg(file(&dir, "v0.csv", &to_csv(&v0)))
        .arg("--output")
        .arg(&out)
        .assert()
        .success();
    let want = cpu()
        .kernel_softmax(
            phi0.view(),
            psi0.view(),
            v0.view(),
            &SoftmaxParams::new().with_scale(-0.5),
        )
        .unwrap();
    assert_near(&read_out(&out), &want, 1e-5);

    // --heads: (T, H·d) split into heads, the output merged back.
    let (t, h) = (19, 2);
    let (x, vv) = (rng.matrix(t, 8, -1.0, 1.0), rng.matrix(t, 6, -1.0, 1.0));
    let xp = npy(&dir, "x.npy", &x);
    let out = dir.path().join("mh.npy");
    locus()
        .args([
            "softmax",
            "--backend",
            "cpu",
            "-q",
            "--causal",
            "--heads",
            "2",
        ])
        .arg("--phi")
        .arg(&xp)
        .arg("--psi")
        .arg(&xp)
        .arg("--values")
        .arg(npy(&dir, "vv.npy", &vv))
        .arg("--output")
        .arg(&out)
        .assert()
        .success();
    let xs = split_heads(x.view(), h).unwrap();
    let vs = split_heads(vv.view(), h).unwrap();
    let want = cpu()
        .kernel_softmax(
            xs.view(),
            xs.view(),
            vs.view(),
            &SoftmaxParams::new().with_causal(true),
        )
        .unwrap();
    assert_near(&read_out(&out), &merge_heads(want.view()), 1e-5);

    // --linear: the feature local mean, with non-negative features.
    let (a, b) = (phi0.mapv(f32::abs), psi0.mapv(f32::abs));
    let out = dir.path().join("lin.npy");
    let assert = locus()
        .args(["softmax", "--backend", "cpu", "--linear", "--json", "--phi"])
        .arg(npy(&dir, "a.npy", &a))
        .arg("--psi")
        .arg(npy(&dir, "b.npy", &b))
        .arg("--values")
        .arg(npy(&dir, "v0.npy", &v0))
        .arg("--output")
        .arg(&out)
        .assert()
        .success();
    assert_eq!(
        json_of(&assert.get_output().stdout)["summary"]["empty_rows"],
        0
    );
    let want = cpu()
        .feature_local_mean(a.view(), b.view(), v0.view(), false)
        .unwrap();
    assert_near(&read_out(&out), &want.values, 1e-5);

    // Bad input: exit 2, one line naming the problem, nothing written.
    let p = |s: &str| s.to_string();
    let (pp, kp, vp) = (
        pp.display().to_string(),
        kp.display().to_string(),
        vp.display().to_string(),
    );
    let base = |extra: &[&str]| -> Vec<String> {
        let mut v = vec![p("softmax"), p("--backend"), p("cpu")];
        v.extend(extra.iter().map(|s| s.to_string()));
        v.push(p("--output"));
        v.push(p("out.csv"));
        v
    };
    let run = |args: Vec<String>, expect: &[&str]| {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        fails_with(&dir, &a, expect);
    };
    // A 3-D result cannot be CSV.
    run(
        base(&["--phi", &pp, "--psi", &kp, "--values", &vp]),
        &["--output out.csv", "3-D", ".npy"],
    );
    // Heads, columns and rows must agree.
    run(
        base(&["--phi", &pp, "--psi", "psi0.npy", "--values", &vp]),
        &["shape mismatch", "--psi", "heads"],
    );
    run(
        base(&["--phi", "phi0.npy", "--psi", "x.npy", "--values", "v0.npy"]),
        &["shape mismatch", "--phi", "--psi", "columns"],
    );
    run(
        base(&[
            "--phi", "phi0.npy", "--psi", "psi0.npy", "--values", "x.npy",
        ]),
        &["shape mismatch", "--values", "one row per row"],
    );
    // More queries than keys under the causal mask; negative features.
    run(
        base(&[
            "--causal", "--phi", "psi0.npy", "--psi", "phi0.npy", "--values", "phi0.npy",
        ]),
        &["causal", "23 queries and 17 keys"],
    );
    run(
        base(&[
            "--linear", "--phi", "phi0.npy", "--psi", "psi0.npy", "--values", "v0.npy",
        ]),
        &["phi", "negative"],
    );
    run(
        base(&[
            "--scale", "nan", "--phi", "phi0.npy", "--psi", "psi0.npy", "--values", "v0.npy",
        ]),
        &["scale", "finite"],
    );
    run(
        base(&[
            "--heads", "3", "--phi", "x.npy", "--psi", "x.npy", "--values", "vv.npy",
        ]),
        &["--heads 3", "do not divide"],
    );
    // A 4-D array is rejected with its shape.
    let four = ndarray::Array4::<f32>::zeros((1, 2, 3, 4));
    write_npy(dir.path().join("four.npy"), &four).unwrap();
    run(
        base(&[
            "--phi", "four.npy", "--psi", "psi0.npy", "--values", "v0.npy",
        ]),
        &["--phi four.npy", "3-D", "[1, 2, 3, 4]"],
    );

    // Verified against the GPU.
    if have_gpu() {
        let out = dir.path().join("g.npy");
        locus()
            .args([
                "softmax",
                "--backend",
                "gpu",
                "--verify",
                "--causal",
                "--phi",
            ])
            .arg(&pp)
            .arg("--psi")
            .arg(&kp)
            .arg("--values")
            .arg(&vp)
            .arg("--output")
            .arg(&out)
            .arg("--weights")
            .arg(dir.path().join("gw.npy"))
            .assert()
            .success()
            .stdout(predicate::str::contains(": ok"));
    }
}

#[test]
fn product_kernels_from_blocks_match_the_library() {
    let dir = TempDir::new().unwrap();
    let ((q, x, y), (qp, xp, yp)) = queries_keys_values(&dir, 41, (23, 61, 3, 2), 5.0);
    let out = dir.path().join("m.npy");
    let assert = locus()
        .args(["local-mean", "--backend", "cpu", "--json"])
        .args([
            "--kernel",
            "uniform,gaussian",
            "--bandwidth",
            "0.6,0.2",
            "--blocks",
            "2,1",
        ])
        .arg("--queries")
        .arg(&qp)
        .arg("--keys")
        .arg(&xp)
        .arg("--values")
        .arg(&yp)
        .arg("--output")
        .arg(&out)
        .assert()
        .success();
    let j = json_of(&assert.get_output().stdout);
    assert_eq!(j["kernel"]["blocks"][1]["profile"], "gaussian", "{j}");
    assert_eq!(j["kernel"]["blocks"][0]["dims"], 2, "{j}");
    let k = Kernel::product([(2, Profile::Uniform, 0.6), (1, Profile::Gaussian, 0.2)]).unwrap();
    let want = cpu().local_mean(&k, q.view(), x.view(), y.view()).unwrap();
    assert_near(&read_out(&out), &want.values, 1e-6);

    // One profile for every block; a KDE normalized block by block.
    let dens = dir.path().join("p.npy");
    locus()
        .args([
            "kde",
            "--backend",
            "cpu",
            "--bandwidth",
            "0.5,0.25",
            "--blocks",
            "1,2",
        ])
        .arg("--keys")
        .arg(&xp)
        .arg("--queries")
        .arg(&qp)
        .arg("--output")
        .arg(&dens)
        .assert()
        .success();
    let k = Kernel::product([(1, Profile::Gaussian, 0.5), (2, Profile::Gaussian, 0.25)]).unwrap();
    let want = cpu().log_density(&k, q.view(), x.view(), None).unwrap();
    let got: Array1<f32> = read_npy(&dens).unwrap();
    for i in 0..q.nrows() {
        let (g, w) = (f64::from(got[i]), want[i].exp());
        assert!((g - w).abs() < 1e-4 * w, "{g} vs {w}");
    }

    // Joint MeanShift over (2, 1) blocks.
    let labels = dir.path().join("l.npy");
    locus()
        .args(["mean-shift", "--backend", "cpu", "--kernel", "gaussian"])
        .args(["--bandwidth", "0.5,0.3", "--blocks", "2,1"])
        .arg("--input")
        .arg(&xp)
        .arg("--labels")
        .arg(&labels)
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "product(2×gaussian(h=0.5), 1×gaussian(h=0.3))",
        ));
    let k = Kernel::product([(2, Profile::Gaussian, 0.5), (1, Profile::Gaussian, 0.3)]).unwrap();
    let params = locus::MeanShiftParams::new().kernel(k).check().unwrap();
    let fit = cpu().mean_shift(&params, x.view()).unwrap();
    let got: Array1<i64> = read_npy(&labels).unwrap();
    assert_eq!(got, fit.labels);
    locus()
        .args([
            "medoid-shift",
            "--backend",
            "cpu",
            "--bandwidth",
            "0.5,0.3",
            "--blocks",
            "2,1",
        ])
        .arg("--input")
        .arg(&xp)
        .arg("--labels")
        .arg(&labels)
        .assert()
        .success();
    let params = locus::MedoidShiftParams::new().kernel(k).check().unwrap();
    let fit = cpu().medoid_shift(&params, x.view()).unwrap();
    let got: Array1<i64> = read_npy(&labels).unwrap();
    assert_eq!(got, fit.labels);

    // --verify compares the modes in units of each block's bandwidth: a
    // tiny spatial bandwidth beside a wide range one is no false alarm.
    if have_gpu() {
        let mut rng = Rng::new(43);
        let pts = Array2::from_shape_fn((120, 3), |(j, c)| match c {
            2 => 40.0 * (j % 3) as f32 + 5.0 * rng.uniform(),
            _ => 0.002 * (j % 5) as f32,
        });
        locus()
            .args([
                "mean-shift",
                "--backend",
                "cpu",
                "--verify",
                "--kernel",
                "uniform,gaussian",
            ])
            .args(["--bandwidth", "0.01,7", "--blocks", "2,1"])
            .arg("--input")
            .arg(npy(&dir, "pts.npy", &pts))
            .arg("--labels")
            .arg(&labels)
            .assert()
            .success()
            .stdout(predicate::str::contains(": ok"));
    }

    // Blocks that do not fit, counts that do not match.
    let x_name = xp.to_str().unwrap();
    for (args, expect) in [
        (
            vec![
                "local-mean",
                "--keys",
                x_name,
                "--bandwidth",
                "1,1",
                "--blocks",
                "1,1",
                "--output",
                "out.csv",
            ],
            vec!["blocks cover 2 coordinates", "3 columns"],
        ),
        (
            vec![
                "local-mean",
                "--keys",
                x_name,
                "--bandwidth",
                "1,1",
                "--output",
                "out.csv",
            ],
            vec!["without --blocks"],
        ),
        (
            vec![
                "kde",
                "--keys",
                x_name,
                "--bandwidth",
                "1",
                "--blocks",
                "1,2",
                "--output",
                "out.csv",
            ],
            vec!["one per block"],
        ),
        (
            vec![
                "kde",
                "--keys",
                x_name,
                "--kernel",
                "gaussian,uniform,cauchy",
                "--bandwidth",
                "1,1",
                "--blocks",
                "1,2",
                "--output",
                "out.csv",
            ],
            vec!["3 profiles"],
        ),
        (
            vec![
                "kde",
                "--keys",
                x_name,
                "--kernel",
                "gaussian,cauchy",
                "--bandwidth",
                "1,1",
                "--blocks",
                "1,2",
                "--output",
                "out.csv",
            ],
            vec!["cauchy", "d = 2"],
        ),
        (
            vec![
                "mean-shift",
                "--input",
                x_name,
                "--bandwidth",
                "1,1",
                "--blocks",
                "1,1",
                "--labels",
                "out.csv",
            ],
            vec!["blocks cover 2 coordinates"],
        ),
    ] {
        fails_with(&dir, &args, &expect);
    }
}
