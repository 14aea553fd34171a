//! The `locus` binary against hostile input: forged `.npy` headers, label
//! files of every dtype, CSV first rows, outputs given twice or in folders
//! that cannot be written, signals while writing, address-space caps,
//! arguments that look like flags. Every case ends in a one-line error
//! with exit 2 (or 1), or in the right result: never an abort, a silently
//! dropped row, or debris left in the output folder.

mod common;
#[path = "support/npy.rs"]
mod npy;

use std::path::{Path, PathBuf};
use std::process::{Command as Process, Output, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::Command;
use common::{Rng, cpu, gpu};
use locus::{Kernel, Profile};
use ndarray::{Array1, Array2};
use ndarray_npy::{read_npy, write_npy};
use npy::{prlimit, raw_npy, sparse_npy};
use tempfile::TempDir;

fn exe() -> &'static str {
    env!("CARGO_BIN_EXE_locus")
}

fn locus() -> Command {
    let mut c = Command::new(exe());
    c.env("NODEVICE_SELECT", "1");
    c
}

fn npy(dir: &TempDir, name: &str, a: &Array2<f32>) -> PathBuf {
    let p = dir.path().join(name);
    write_npy(&p, a).unwrap();
    p
}

fn file(dir: &TempDir, name: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// Asserts a usage or input error: exit 2, one line on stderr naming every
/// `expect`, no backtrace.
#[track_caller]
fn input_error(out: &Output, expect: &[&str]) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(
        !err.contains("panicked")
            && !err.contains("backtrace")
            && !err.contains("memory allocation"),
        "{err}"
    );
    for e in expect {
        assert!(err.contains(e), "{err:?} lacks {e:?}");
    }
    err
}

fn run(dir: &TempDir, args: &[&str]) -> Output {
    locus().current_dir(dir.path()).args(args).output().unwrap()
}

/// Files in `dir` other than `keep`.
fn debris(dir: &Path, keep: &[&str]) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !keep.contains(&n.as_str()))
        .collect()
}

/// The tool under an address-space cap of `bytes`.
fn capped(dir: &TempDir, bytes: u64, args: &[&str]) -> Output {
    Process::new("prlimit")
        .arg(format!("--as={bytes}"))
        .arg(exe())
        .args(args)
        .current_dir(dir.path())
        .env("NODEVICE_SELECT", "1")
        .output()
        .unwrap()
}

// ---- .npy headers ------------------------------------------------------------

/// Headers that slipped past the old size check (double quotes, a space
/// before the colon, a repeated key) and made the reader ask for 4 TB.
fn forged_headers() -> Vec<(&'static str, String)> {
    let huge = "(100000000000, 10)";
    vec![
        (
            "double.npy",
            format!("{{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": {huge}}}"),
        ),
        (
            "spaced.npy",
            format!("{{'descr': '<f4', 'fortran_order': False, 'shape' : {huge}, }}"),
        ),
        (
            "twice.npy",
            format!(
                "{{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), 'shape': {huge}, }}"
            ),
        ),
        (
            "first.npy",
            format!("{{'shape': {huge}, 'fortran_order': False, 'descr': '<f4'}}"),
        ),
    ]
}

#[test]
fn forged_npy_headers_are_input_errors() {
    let dir = TempDir::new().unwrap();
    npy(&dir, "x.npy", &Array2::zeros((4, 4)));
    for (name, dict) in forged_headers() {
        file(&dir, name, raw_npy(&dict, &[0u8; 64]));
        let out = run(
            &dir,
            &[
                "kde",
                "--bandwidth",
                "1",
                "--keys",
                name,
                "--output",
                "o.npy",
            ],
        );
        input_error(&out, &["--keys", name]);
        // The same file as labels.
        let out = run(
            &dir,
            &[
                "classify",
                "--bandwidth",
                "1",
                "--train",
                "x.npy",
                "--queries",
                "x.npy",
                "--labels",
                name,
                "--output",
                "o.npy",
            ],
        );
        input_error(&out, &["--labels", name]);
    }
    // A structured dtype, an unknown version, a header longer than the file.
    let mut v9 = raw_npy(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }",
        &[0; 4],
    );
    v9[6] = 9;
    let mut long = raw_npy(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }",
        &[0; 4],
    );
    long[8..10].copy_from_slice(&60000u16.to_le_bytes());
    for (name, bytes, expect) in [
        (
            "rec.npy",
            raw_npy(
                "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }",
                &[0; 4],
            ),
            "structured",
        ),
        ("v9.npy", v9, "version 9"),
        ("long.npy", long, "header of 60000 bytes"),
    ] {
        file(&dir, name, bytes);
        let out = run(
            &dir,
            &[
                "kde",
                "--bandwidth",
                "1",
                "--keys",
                name,
                "--output",
                "o.npy",
            ],
        );
        input_error(&out, &[expect]);
    }
    assert!(
        debris(dir.path(), &[])
            .iter()
            .all(|n| n.ends_with(".npy") && n != "o.npy")
    );
}

/// A `.npy` large enough to be read in parts by several threads: every
/// part lands in its rows (each key its own nearest neighbour), a late
/// infinity is named at its row and column, a file cut short is refused.
#[test]
fn large_npy_files_read_in_parts_keep_their_rows_and_errors() {
    let dir = TempDir::new().unwrap();
    let (n, d) = (70_000, 33); // 9.2 MB of data: over the 8 MiB threshold
    let mut x = Rng::new(41).matrix(n, d, -1.0, 1.0);
    let rows = [0usize, 17_000, 35_001, 52_000, n - 1];
    let q = Array2::from_shape_fn((rows.len(), d), |(i, c)| x[[rows[i], c]]);
    npy(&dir, "x.npy", &x);
    npy(&dir, "q.npy", &q);
    let args = |keys: &str| {
        [
            "knn",
            "--k",
            "1",
            "--keys",
            keys,
            "--queries",
            "q.npy",
            "--output",
            "i.npy",
            "--backend",
            "cpu",
        ]
        .map(String::from)
    };
    let out = run(&dir, &args("x.npy").each_ref().map(String::as_str));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let idx: Array2<i64> = read_npy(dir.path().join("i.npy")).unwrap();
    let got: Vec<usize> = idx.iter().map(|&i| i as usize).collect();
    assert_eq!(got, rows);
    x[[n - 10, 7]] = f32::INFINITY;
    npy(&dir, "inf.npy", &x);
    let out = run(&dir, &args("inf.npy").each_ref().map(String::as_str));
    input_error(&out, &["--keys", "infinity at row 69990, column 7"]);
    // Under an address-space cap too tight for the threads the tool
    // starts (its signal watcher, the reader's, the pool's): an error or
    // a result, never a panic. The caps are above what the binary's own
    // mapping takes (below that it cannot even parse its arguments), by
    // a few MB to a hundred.
    if prlimit().is_some() {
        let binary = std::fs::metadata(exe()).unwrap().len();
        for cap in [4_000_000u64, 30_000_000, 90_000_000].map(|m| binary + m) {
            let out = capped(&dir, cap, &args("x.npy").each_ref().map(String::as_str));
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                matches!(out.status.code(), Some(0..=2)) && !err.contains("panicked"),
                "cap {cap}: {:?} {err}",
                out.status
            );
            if !out.status.success() {
                assert_eq!(err.trim_end().lines().count(), 1, "cap {cap}: {err}");
            }
        }
    }
    let bytes = std::fs::read(dir.path().join("x.npy")).unwrap();
    file(&dir, "short.npy", &bytes[..bytes.len() - 100]);
    let out = run(&dir, &args("short.npy").each_ref().map(String::as_str));
    input_error(
        &out,
        &[
            "--keys",
            "needs 9240000 bytes of data but the file holds 9239900",
        ],
    );
}

// ---- generated data beyond memory --------------------------------------------

#[test]
fn demo_with_more_points_than_memory_is_an_input_error() {
    let dir = TempDir::new().unwrap();
    let args = [
        "demo",
        "--points",
        "4294967295",
        "--no-plot",
        "--backend",
        "cpu",
    ];
    let out = match prlimit() {
        Some(_) => capped(&dir, 2_000_000_000, &args),
        None => run(&dir, &args),
    };
    input_error(&out, &["--points 4294967295", "do not fit in memory"]);
}

// ---- classes and label files ------------------------------------------------

/// Labels as a raw `.npy` of type `descr` (little-endian).
fn labels_npy(descr: &str, labels: &[i64]) -> Vec<u8> {
    let data: Vec<u8> = labels
        .iter()
        .flat_map(|&l| match descr {
            "|i1" => (l as i8).to_le_bytes().to_vec(),
            "<i2" => (l as i16).to_le_bytes().to_vec(),
            "<i4" => (l as i32).to_le_bytes().to_vec(),
            "<i8" => l.to_le_bytes().to_vec(),
            "|u1" => (l as u8).to_le_bytes().to_vec(),
            "<u2" => (l as u16).to_le_bytes().to_vec(),
            "<u4" => (l as u32).to_le_bytes().to_vec(),
            "<u8" => (l as u64).to_le_bytes().to_vec(),
            "<f4" => (l as f32).to_le_bytes().to_vec(),
            "<f8" => (l as f64).to_le_bytes().to_vec(),
            other => panic!("{other}"),
        })
        .collect();
    raw_npy(
        &format!(
            "{{'descr': '{descr}', 'fortran_order': False, 'shape': ({},), }}",
            labels.len()
        ),
        &data,
    )
}

#[test]
fn classes_are_the_labels_present_not_the_largest_label() {
    let dir = TempDir::new().unwrap();
    let mut rng = Rng::new(15);
    let (x, q) = (rng.matrix(20, 2, 0.0, 1.0), rng.matrix(9, 2, 0.0, 1.0));
    npy(&dir, "x.npy", &x);
    npy(&dir, "q.npy", &q);
    let labels: Vec<i64> = (0..20)
        .map(|i| if i % 2 == 0 { 0 } else { 16_777_215 })
        .collect();
    file(&dir, "l.npy", labels_npy("<i8", &labels));
    let args = [
        "classify",
        "--backend",
        "cpu",
        "--bandwidth",
        "0.4",
        "--train",
        "x.npy",
        "--queries",
        "q.npy",
        "--labels",
        "l.npy",
        "--output",
        "p.npy",
        "--proba",
        "pr.npy",
    ];
    // Two classes: well under a 3 GB address-space cap (2^24 classes were
    // 3.6 GB and 10 s).
    let t = Instant::now();
    let out = match prlimit() {
        Some(_) => capped(&dir, 3_000_000_000, &args),
        None => run(&dir, &args),
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    let pred: Array1<i64> = read_npy(dir.path().join("p.npy")).unwrap();
    let proba: Array2<f32> = read_npy(dir.path().join("pr.npy")).unwrap();
    assert_eq!(proba.ncols(), 2);
    // The library with labels 0 and 1, mapped back.
    let k = Kernel::new(Profile::Gaussian, 0.4).unwrap();
    let small = Array1::from_iter(labels.iter().map(|&l| i64::from(l > 0)));
    let clf = cpu()
        .fit_classifier(&k, x.view(), small.view(), None)
        .unwrap();
    let want = clf
        .predict(q.view())
        .unwrap()
        .labels
        .mapv(|l| l * 16_777_215);
    assert_eq!(pred, want);
    assert!(pred.iter().any(|&l| l == 16_777_215) && pred.iter().any(|&l| l == 0));
    let want_p = clf.predict_proba(q.view()).unwrap().values;
    assert!(
        proba
            .iter()
            .zip(&want_p)
            .all(|(a, b)| (a - b).abs() <= 1e-6)
    );
}

#[test]
fn label_files_of_every_integer_dtype_and_whole_floats_are_accepted() {
    let dir = TempDir::new().unwrap();
    let mut rng = Rng::new(16);
    let (x, q) = (rng.matrix(30, 2, 0.0, 1.0), rng.matrix(7, 2, 0.0, 1.0));
    npy(&dir, "x.npy", &x);
    npy(&dir, "q.npy", &q);
    let labels: Vec<i64> = (0..30).map(|i| [3, 7, 100][i % 3]).collect();
    let mut first: Option<Vec<u8>> = None;
    for descr in [
        "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8", "<f4", "<f8",
    ] {
        file(&dir, "l.npy", labels_npy(descr, &labels));
        let out = run(
            &dir,
            &[
                "classify",
                "--backend",
                "cpu",
                "--bandwidth",
                "0.3",
                "--train",
                "x.npy",
                "--queries",
                "q.npy",
                "--labels",
                "l.npy",
                "--output",
                "p.csv",
            ],
        );
        assert!(
            out.status.success(),
            "{descr}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let pred = std::fs::read(dir.path().join("p.csv")).unwrap();
        let text = String::from_utf8_lossy(&pred);
        assert!(
            text.lines().all(|l| ["3", "7", "100"].contains(&l)),
            "{descr}: {text}"
        );
        match &first {
            None => first = Some(pred),
            Some(f) => assert_eq!(f, &pred, "{descr}"),
        }
    }
    // Not labels: a fraction, a negative integer, an unsigned value beyond i64.
    let mut big = labels_npy("<u8", &labels);
    let at = big.len() - 8;
    big[at..].copy_from_slice(&u64::MAX.to_le_bytes());
    for (name, bytes, expect) in [
        (
            "frac.npy",
            {
                let mut l = labels.iter().map(|&v| v as f64).collect::<Vec<_>>();
                l[4] = 1.5;
                let data: Vec<u8> = l.iter().flat_map(|v| v.to_le_bytes()).collect();
                raw_npy(
                    "{'descr': '<f8', 'fortran_order': False, 'shape': (30,), }",
                    &data,
                )
            },
            "not an integer",
        ),
        (
            "neg.npy",
            labels_npy("<i4", &[&labels[..29], &[-2]].concat()),
            "label 29 is -2",
        ),
        ("big.npy", big, "does not fit"),
    ] {
        file(&dir, name, bytes);
        let out = run(
            &dir,
            &[
                "classify",
                "--backend",
                "cpu",
                "--bandwidth",
                "0.3",
                "--train",
                "x.npy",
                "--queries",
                "q.npy",
                "--labels",
                name,
                "--output",
                "p2.csv",
            ],
        );
        input_error(&out, &[expect]);
    }
    // A short label file names the labels and the training points.
    file(&dir, "short.npy", labels_npy("<i8", &labels[..20]));
    let out = run(
        &dir,
        &[
            "classify",
            "--backend",
            "cpu",
            "--bandwidth",
            "0.3",
            "--train",
            "x.npy",
            "--queries",
            "q.npy",
            "--labels",
            "short.npy",
            "--output",
            "p2.csv",
        ],
    );
    input_error(
        &out,
        &["--labels short.npy has 20 labels", "--train x.npy (30×2)"],
    );
}

// ---- CSV first rows ------------------------------------------------------------

/// Rows of the densities `kde` writes for `keys.csv` (one per key).
fn kde_rows(dir: &TempDir, extra: &[&str]) -> Result<usize, Output> {
    let out = locus()
        .current_dir(dir.path())
        .args([
            "kde",
            "--backend",
            "cpu",
            "--bandwidth",
            "1",
            "--keys",
            "keys.csv",
        ])
        .args(["--output", "dens.csv"])
        .args(extra)
        .output()
        .unwrap();
    if !out.status.success() {
        return Err(out);
    }
    let text = std::fs::read_to_string(dir.path().join("dens.csv")).unwrap();
    Ok(text.lines().count())
}

#[test]
fn csv_first_rows_are_never_dropped_silently() {
    let dir = TempDir::new().unwrap();
    let cases: [(&[u8], usize); 5] = [
        (b"\xEF\xBB\xBF1,2\n3,4\n", 2),
        (b"\"1\",\"2\"\n3, \"4\"\n", 2),
        (b"x,y\n1,2\n3,4\n", 2),
        (b"1,2\r\n3,4\r\n", 2),
        (b"# comment\n\n1,2 # trailing\n3,4\n", 2),
    ];
    for (text, rows) in cases {
        file(&dir, "keys.csv", text);
        let got = kde_rows(&dir, &[]).map_err(|o| String::from_utf8_lossy(&o.stderr).into_owned());
        assert_eq!(got, Ok(rows), "{:?}", String::from_utf8_lossy(text));
    }
    // A first row that is partly numbers: an error naming line 1 and the
    // options that decide it.
    for text in ["1,\n3,4\n", "1,2x\n3,4\n", "x,2024\n3,4\n"] {
        file(&dir, "keys.csv", text);
        let out = kde_rows(&dir, &[]).unwrap_err();
        input_error(&out, &["keys.csv", "line 1", "--header", "--no-header"]);
    }
    // --header takes it as a header; --no-header as data (here: an error
    // for the non-number, or all the rows).
    file(&dir, "keys.csv", "x,2024\n3,4\n");
    assert_eq!(kde_rows(&dir, &["--header"]).ok(), Some(1));
    input_error(
        &kde_rows(&dir, &["--no-header"]).unwrap_err(),
        &["line 1, field 1: \"x\""],
    );
    file(&dir, "keys.csv", "1,2\n3,4\n");
    assert_eq!(kde_rows(&dir, &["--no-header"]).ok(), Some(2));
    assert_eq!(kde_rows(&dir, &["--header"]).ok(), Some(1));
    let out = kde_rows(&dir, &["--header", "--no-header"]).unwrap_err();
    input_error(&out, &["--no-header"]);
}

// ---- outputs -------------------------------------------------------------------

#[test]
fn an_output_path_given_twice_is_refused_before_any_work() {
    let dir = TempDir::new().unwrap();
    let mut rng = Rng::new(7);
    npy(&dir, "x.npy", &rng.matrix(30, 2, 0.0, 1.0));
    file(
        &dir,
        "l.csv",
        (0..30).map(|i| format!("{}\n", i % 2)).collect::<String>(),
    );
    for args in [
        vec![
            "classify",
            "--bandwidth",
            "0.5",
            "--train",
            "x.npy",
            "--queries",
            "x.npy",
            "--labels",
            "l.csv",
            "--output",
            "same.npy",
            "--proba",
            "same.npy",
        ],
        vec![
            "classify",
            "--bandwidth",
            "0.5",
            "--train",
            "x.npy",
            "--queries",
            "x.npy",
            "--labels",
            "l.csv",
            "--output",
            "same.npy",
            "--proba",
            "./same.npy",
        ],
        vec![
            "mean-shift",
            "--bandwidth",
            "0.5",
            "--input",
            "x.npy",
            "--labels",
            "same.csv",
            "--modes",
            "same.csv",
        ],
        vec![
            "knn",
            "--k",
            "2",
            "--keys",
            "x.npy",
            "--output",
            "same.npy",
            "--distances",
            "same.npy",
        ],
    ] {
        let out = run(&dir, &args);
        input_error(&out, &["same", "the same file as"]);
        assert_eq!(
            debris(dir.path(), &["x.npy", "l.csv"]),
            Vec::<String>::new()
        );
    }
}

/// A folder this process cannot write to, or None (with the reason
/// printed) where there is none.
fn unwritable_folder(dir: &TempDir) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let ro = dir.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    if std::fs::write(ro.join("probe"), b"").is_err() {
        return Some(ro);
    }
    // Permissions do not bind this user (root): sysfs refuses new files.
    let _ = std::fs::remove_file(ro.join("probe"));
    if std::fs::write("/sys/locus-probe", b"").is_err() && Path::new("/sys").is_dir() {
        return Some(PathBuf::from("/sys"));
    }
    eprintln!("SKIPPED: no folder this user cannot write to");
    None
}

#[test]
fn outputs_in_a_folder_that_cannot_be_written_are_refused_before_any_work() {
    let dir = TempDir::new().unwrap();
    let Some(ro) = unwritable_folder(&dir) else {
        return;
    };
    let plot = ro.join("demo.png");
    let t = Instant::now();
    let out = locus()
        .args(["demo", "--backend", "cpu", "--points", "2000000", "--plot"])
        .arg(&plot)
        .output()
        .unwrap();
    input_error(&out, &["--plot", "cannot write in folder"]);
    // Refused before clustering two million points.
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert!(!plot.exists());
}

/// Starts `kernel-matrix` writing a large CSV into `dir` (so that it is
/// writing for a while), with named temporary files when `named`.
fn start_large_write(dir: &TempDir, named: bool) -> std::process::Child {
    let mut rng = Rng::new(3);
    npy(dir, "x.npy", &rng.matrix(2500, 2, 0.0, 1.0));
    let mut c = Process::new(exe());
    c.current_dir(dir.path())
        .args([
            "kernel-matrix",
            "--backend",
            "cpu",
            "--bandwidth",
            "0.5",
            "--keys",
            "x.npy",
        ])
        .args(["--output", "k.csv", "--quiet"])
        .env("NODEVICE_SELECT", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if named {
        c.env("LOCUS_NO_TMPFILE", "1");
    }
    c.spawn().unwrap()
}

/// Waits (up to 60 s) until `ready` holds; false if the child ended first.
fn wait_for(child: &mut std::process::Child, ready: impl Fn() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(60) {
        if ready() {
            return true;
        }
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    false
}

fn signal(pid: u32, name: &str) {
    let ok = Process::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{name}");
}

#[test]
fn interrupted_runs_remove_their_temporary_files() {
    use std::os::unix::process::ExitStatusExt;
    for (name, number) in [("TERM", 15), ("INT", 2), ("HUP", 1)] {
        let dir = TempDir::new().unwrap();
        let mut child = start_large_write(&dir, true);
        // Writing: a temporary file with data in it (the output check
        // before any work makes an empty one for an instant).
        let writing = wait_for(&mut child, || {
            debris(dir.path(), &["x.npy"]).iter().any(|n| {
                n.ends_with(".tmp")
                    && std::fs::metadata(dir.path().join(n)).is_ok_and(|m| m.len() > 0)
            })
        });
        assert!(
            writing,
            "SIG{name}: the run ended before it was seen writing"
        );
        signal(child.id(), name);
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(number), "SIG{name}: {status:?}");
        assert_eq!(
            debris(dir.path(), &["x.npy"]),
            Vec::<String>::new(),
            "SIG{name}"
        );
    }
}

#[test]
fn killed_runs_leave_nothing_behind() {
    let dir = TempDir::new().unwrap();
    let mut child = start_large_write(&dir, false);
    let fds = PathBuf::from(format!("/proc/{}/fd", child.id()));
    let folder = std::fs::canonicalize(dir.path()).unwrap();
    // Writing: an open file in the folder that has no name there, with
    // data in it.
    let writing = wait_for(&mut child, || {
        std::fs::read_dir(&fds).is_ok_and(|fds| {
            fds.flatten().any(|fd| {
                std::fs::read_link(fd.path()).is_ok_and(|l| {
                    l.starts_with(&folder) && l.to_string_lossy().ends_with("(deleted)")
                }) && std::fs::metadata(fd.path()).is_ok_and(|m| m.len() > 0)
            })
        })
    });
    if !writing {
        eprintln!("SKIPPED: no unnamed temporary file seen (no O_TMPFILE here?)");
        let _ = child.kill();
        let _ = child.wait();
        return;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(debris(dir.path(), &["x.npy"]), Vec::<String>::new());
}

// ---- arguments and messages -----------------------------------------------------

#[test]
fn hostile_arguments_get_messages_that_name_them() {
    let dir = TempDir::new().unwrap();
    let mut rng = Rng::new(5);
    npy(&dir, "x.npy", &rng.matrix(20, 2, 0.0, 1.0));
    // Negative and infinite bandwidths are values (a range error), not flags.
    for h in ["-1", "-inf", "-1e-3"] {
        for cmd in [
            vec![
                "kde",
                "--keys",
                "x.npy",
                "--output",
                "o.npy",
                "--bandwidth",
                h,
            ],
            vec![
                "mean-shift",
                "--input",
                "x.npy",
                "--labels",
                "o.npy",
                "--bandwidth",
                h,
            ],
            vec!["demo", "--no-plot", "--bandwidth", h],
        ] {
            let out = run(&dir, &cmd);
            input_error(&out, &["bandwidth must be finite", h]);
        }
    }
    // A quantile too small for the data is the quantile's fault.
    for q in ["0", "1e-9", "0.05"] {
        let out = run(
            &dir,
            &[
                "mean-shift",
                "--input",
                "x.npy",
                "--labels",
                "o.npy",
                "--quantile",
                q,
            ],
        );
        input_error(
            &out,
            &[&format!("--quantile {q}"), "too small for 20 points"],
        );
    }
    // A kernel with no density in this dimension is a usage error.
    let out = run(
        &dir,
        &[
            "kde",
            "--keys",
            "x.npy",
            "--output",
            "o.npy",
            "--bandwidth",
            "1",
            "--kernel",
            "cauchy",
        ],
    );
    input_error(&out, &["--kernel cauchy", "d = 2", "no finite integral"]);
    npy(&dir, "x1.npy", &rng.matrix(20, 1, 0.0, 1.0));
    let ok = run(
        &dir,
        &[
            "kde",
            "--keys",
            "x1.npy",
            "--output",
            "o.npy",
            "--bandwidth",
            "1",
            "--kernel",
            "cauchy",
        ],
    );
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    // Bare `locus`: the help, as a usage error.
    let out = run(&dir, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        err.contains("Usage: locus") && err.contains("Commands:"),
        "{err}"
    );
    assert!(!err.starts_with("error:"), "{err}");
}

#[test]
fn gpu_runs_print_nothing_on_stderr_without_a_runtime_folder() {
    if gpu().is_none() {
        return;
    }
    let dir = TempDir::new().unwrap();
    let mut rng = Rng::new(6);
    npy(&dir, "x.npy", &rng.matrix(50, 2, 0.0, 1.0));
    let out = Process::new(exe())
        .current_dir(dir.path())
        .args([
            "kde",
            "--backend",
            "gpu",
            "--bandwidth",
            "0.5",
            "--keys",
            "x.npy",
        ])
        .args(["--output", "o.npy", "--quiet", "--verify"])
        .env_remove("XDG_RUNTIME_DIR")
        .env("NODEVICE_SELECT", "0")
        .env("WAYLAND_DISPLAY", "wayland-0")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

// ---- memory ---------------------------------------------------------------------------

#[test]
fn hostile_inputs_under_an_address_space_cap_are_errors_not_aborts() {
    if prlimit().is_none() {
        return;
    }
    let dir = TempDir::new().unwrap();
    let cap = 1_500_000_000;
    npy(&dir, "x.npy", &Array2::zeros((4, 2)));
    // Forged headers.
    for (name, dict) in forged_headers() {
        file(&dir, name, raw_npy(&dict, &[0u8; 64]));
        let out = capped(
            &dir,
            cap,
            &[
                "kde",
                "--backend",
                "cpu",
                "--bandwidth",
                "1",
                "--keys",
                name,
                "--output",
                "o.npy",
            ],
        );
        input_error(&out, &[name]);
    }
    // An honest header over 4 GB of data (a sparse file): more than the
    // cap lets the reader allocate.
    sparse_npy(dir.path(), "big.npy", &[500_000_000, 2]);
    sparse_npy(dir.path(), "many.npy", &[300_000_000]);
    let out = capped(
        &dir,
        cap,
        &[
            "kde",
            "--backend",
            "cpu",
            "--bandwidth",
            "1",
            "--keys",
            "big.npy",
            "--output",
            "o.npy",
        ],
    );
    input_error(&out, &["big.npy", "do not fit in memory"]);
    let out = capped(
        &dir,
        cap,
        &[
            "classify",
            "--backend",
            "cpu",
            "--bandwidth",
            "1",
            "--train",
            "x.npy",
            "--queries",
            "x.npy",
            "--labels",
            "many.npy",
            "--output",
            "o.npy",
        ],
    );
    input_error(&out, &["many.npy", "do not fit in memory"]);
    // Generated data beyond the cap.
    let out = capped(
        &dir,
        cap,
        &[
            "demo",
            "--backend",
            "cpu",
            "--no-plot",
            "--points",
            "300000000",
        ],
    );
    input_error(&out, &["--points 300000000", "do not fit in memory"]);
    assert!(!dir.path().join("o.npy").exists());
}

/// Peak resident memory of binned MeanShift through the tool: at most 40
/// bytes per point (plus the process's own) for 2-D points.
#[test]
fn binned_mean_shift_peak_memory_is_bounded_per_point() {
    let time = Path::new("/usr/bin/time");
    if !time.exists() {
        eprintln!("SKIPPED: /usr/bin/time (GNU time) is not installed; peak memory not measured");
        return;
    }
    let dir = TempDir::new().unwrap();
    let n = 2_000_000usize;
    let mut rng = Rng::new(11);
    let x = Array2::from_shape_fn((n, 2), |(i, j)| {
        let centre = [(0.0f32, 0.0f32), (5.0, 5.0), (-5.0, 4.0)][i % 3];
        (if j == 0 { centre.0 } else { centre.1 }) + rng.uniform() * 2.0 - 1.0
    });
    npy(&dir, "x.npy", &x);
    drop(x);
    let out = Process::new(time)
        .args(["-f", "peak %M KB"])
        .arg(exe())
        .args([
            "mean-shift",
            "--backend",
            "cpu",
            "--seeds",
            "binned",
            "--bandwidth",
            "1",
        ])
        .args(["--input", "x.npy", "--labels", "l.npy", "--quiet"])
        .current_dir(dir.path())
        .env("NODEVICE_SELECT", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let kb: u64 = err
        .lines()
        .find_map(|l| l.strip_prefix("peak ")?.strip_suffix(" KB")?.parse().ok())
        .unwrap_or_else(|| panic!("no peak in {err:?}"));
    // The process itself (code, allocator, thread stacks): ~20 MB.
    let per_point = (kb.saturating_sub(25_000) * 1024) as f64 / n as f64;
    eprintln!("binned MeanShift of {n} 2-D points: peak {kb} KB, {per_point:.1} bytes per point");
    assert!(
        per_point <= 40.0,
        "{per_point:.1} bytes per point (peak {kb} KB)"
    );
    let labels: Array1<i64> = read_npy(dir.path().join("l.npy")).unwrap();
    assert_eq!(labels.len(), n);
}

// ---- `locus serve`'s loading ------------------------------------------------------

#[cfg(feature = "serve")]
#[test]
fn serve_refuses_forged_headers_at_start_up() {
    let service = env!("CARGO_BIN_EXE_locus");
    let dir = TempDir::new().unwrap();
    npy(&dir, "v.npy", &Array2::zeros((4, 1)));
    npy(&dir, "k.npy", &Array2::zeros((4, 2)));
    for (name, dict) in forged_headers() {
        file(&dir, name, raw_npy(&dict, &[0u8; 64]));
        for args in [
            ["--keys", name, "--values", "v.npy"],
            ["--keys", "k.npy", "--values", name],
        ] {
            let out = Process::new(service)
                .current_dir(dir.path())
                .args(["serve", "--set", "s"])
                .args(args)
                .args(["--port", "0", "--backend", "cpu"])
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            // A message and exit 2 (bad input), not an abort.
            assert_eq!(out.status.code(), Some(2), "{name}: {err}");
            assert!(
                err.contains(name)
                    && (err.contains("truncated or corrupt") || err.contains("given twice")),
                "{name}: {err}"
            );
            assert!(!err.contains("memory allocation"), "{err}");
        }
    }
    // Forged labels are refused the same way.
    file(
        &dir,
        "bad_l.npy",
        raw_npy(&forged_headers()[0].1, &[0u8; 64]),
    );
    let out = Process::new(service)
        .current_dir(dir.path())
        .args([
            "serve",
            "--set",
            "s",
            "--keys",
            "k.npy",
            "--values",
            "v.npy",
            "--labels",
            "bad_l.npy",
        ])
        .args(["--port", "0", "--backend", "cpu"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad_l.npy"));
}
