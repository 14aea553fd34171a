//! The `locus` binary on points far from the origin: float64 `.npy` and
//! CSV inputs are centred on the keys' mean in f64 before they are
//! rounded to f32, positions come back as float64 with the offset, and
//! the haversine metric and f32 files are used as they are.

mod common;

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use common::Rng;
use ndarray::{Array2, Axis};
use ndarray_npy::{read_npy, write_npy};
use predicates::prelude::*;
use tempfile::TempDir;

/// `locus ARGS… --backend cpu FLAG PATH…`.
fn locus(args: &[&str], files: &[(&str, &Path)]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_locus"));
    c.env("NODEVICE_SELECT", "1")
        .args(args)
        .args(["--backend", "cpu"]);
    for (flag, path) in files {
        c.arg(flag).arg(path);
    }
    c
}

/// [`locus`], run to success.
fn run(args: &[&str], files: &[(&str, &Path)]) {
    locus(args, files).assert().success();
}

/// [`locus`], refused with exit status 2 and `message` on stderr.
fn refused(args: &[&str], files: &[(&str, &Path)], message: &str) {
    locus(args, files)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(message));
}

/// `rows × cols` points: `offset[c]` plus `spread` times a uniform number
/// with bits below f32's (two uniforms, one scaled by 2⁻²⁴).
fn far_points(rng: &mut Rng, rows: usize, offset: &[f64], spread: f64) -> Array2<f64> {
    Array2::from_shape_fn((rows, offset.len()), |(_, c)| {
        let u = f64::from(rng.uniform()) + f64::from(rng.uniform()) * 2f64.powi(-24);
        offset[c] + spread * u
    })
}

fn npy64(dir: &TempDir, name: &str, a: &Array2<f64>) -> PathBuf {
    let p = dir.path().join(name);
    write_npy(&p, a).unwrap();
    p
}

/// Every value as the shortest text that reads back to the same f64.
fn csv64(dir: &TempDir, name: &str, a: &Array2<f64>) -> PathBuf {
    let mut s = String::new();
    for r in a.rows() {
        let cells: Vec<String> = r.iter().map(|v| format!("{v:?}")).collect();
        s += &cells.join(",");
        s.push('\n');
    }
    let p = dir.path().join(name);
    std::fs::write(&p, s).unwrap();
    p
}

fn csv_f64(p: &Path) -> Array2<f64> {
    let text = std::fs::read_to_string(p).unwrap();
    let rows: Vec<Vec<f64>> = text
        .lines()
        .map(|l| l.split(',').map(|f| f.parse().unwrap()).collect())
        .collect();
    let cols = rows[0].len();
    Array2::from_shape_vec((rows.len(), cols), rows.concat()).unwrap()
}

fn sq(a: ndarray::ArrayView1<f64>, b: ndarray::ArrayView1<f64>) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

fn run_knn(
    q: &Path,
    x: &Path,
    k: usize,
    dir: &TempDir,
    extra: &[&str],
) -> (Array2<i64>, Array2<f32>) {
    let (idx, dist) = (dir.path().join("i.npy"), dir.path().join("d.npy"));
    let k = k.to_string();
    let args: Vec<&str> = ["knn", "--k", &k].iter().chain(extra).copied().collect();
    let files = [
        ("--queries", q),
        ("--keys", x),
        ("--output", &idx),
        ("--distances", &dist),
    ];
    run(&args, &files);
    (read_npy(&idx).unwrap(), read_npy(&dist).unwrap())
}

/// The lists against a float64 brute force: distances within `atol`, and
/// each index the f64 one wherever the f64 distances around it are not
/// within `atol` of a tie.
#[track_caller]
fn assert_knn(q: &Array2<f64>, x: &Array2<f64>, idx: &Array2<i64>, dist: &Array2<f32>, atol: f64) {
    for (i, qi) in q.rows().into_iter().enumerate() {
        let mut d: Vec<(f64, usize)> = x
            .rows()
            .into_iter()
            .enumerate()
            .map(|(j, xj)| (sq(qi, xj).sqrt(), j))
            .collect();
        d.sort_by(|a, b| a.partial_cmp(b).unwrap());
        for r in 0..idx.ncols() {
            let got = f64::from(dist[[i, r]]);
            assert!(
                (got - d[r].0).abs() <= atol,
                "query {i} rank {r}: {got} against {}",
                d[r].0
            );
            let tied = (r > 0 && d[r].0 - d[r - 1].0 <= atol) || d[r + 1].0 - d[r].0 <= atol;
            if !tied {
                assert_eq!(idx[[i, r]] as usize, d[r].1, "query {i} rank {r}");
            }
        }
    }
}

#[test]
fn knn_of_float64_points_far_from_the_origin_matches_float64() {
    let dir = TempDir::new().unwrap();
    let mut rng = Rng::new(41);
    // The spacing of f32 near 1e7 is 1: rounded as they are, these points
    // would keep one significant digit of their spread.
    let offset = [1e7, -3e7];
    let (x, q) = (
        far_points(&mut rng, 300, &offset, 2.0),
        far_points(&mut rng, 40, &offset, 2.0),
    );
    let (idx, dist) = run_knn(
        &npy64(&dir, "q.npy", &q),
        &npy64(&dir, "x.npy", &x),
        6,
        &dir,
        &[],
    );
    assert_knn(&q, &x, &idx, &dist, 2e-6);
    // The same numbers as CSV text: the same lists, bit for bit.
    let (idx2, dist2) = run_knn(
        &csv64(&dir, "q.csv", &q),
        &csv64(&dir, "x.csv", &x),
        6,
        &dir,
        &[],
    );
    assert_eq!(idx2, idx);
    assert_eq!(dist2, dist);
    // f32 keys (exact at this offset: whole numbers) with float64 queries:
    // the queries are centred on the keys' mean too.
    let x32 = x.mapv(|v| v.round() as f32);
    let xp = dir.path().join("x32.npy");
    write_npy(&xp, &x32).unwrap();
    let (idx, dist) = run_knn(&npy64(&dir, "q.npy", &q), &xp, 6, &dir, &[]);
    assert_knn(&q, &x32.mapv(f64::from), &idx, &dist, 2e-6);
}

#[test]
fn the_haversine_metric_takes_points_as_given() {
    // (latitude, longitude) in radians: a shift would change the
    // distances, so float64 inputs are rounded as they are, the same as
    // their f32 copies.
    let dir = TempDir::new().unwrap();
    let mut rng = Rng::new(42);
    let (x, q) = (
        far_points(&mut rng, 50, &[0.7, 0.1], 0.1),
        far_points(&mut rng, 9, &[0.7, 0.1], 0.1),
    );
    let wide = run_knn(
        &npy64(&dir, "q.npy", &q),
        &npy64(&dir, "x.npy", &x),
        4,
        &dir,
        &["--metric", "haversine"],
    );
    let (q32, x32) = (q.mapv(|v| v as f32), x.mapv(|v| v as f32));
    let (qp, xp) = (dir.path().join("q32.npy"), dir.path().join("x32.npy"));
    write_npy(&qp, &q32).unwrap();
    write_npy(&xp, &x32).unwrap();
    let narrow = run_knn(&qp, &xp, 4, &dir, &["--metric", "haversine"]);
    assert_eq!(wide, narrow);
}

/// Gaussian local mean of `x` at each of its rows, in f64.
fn ref_self_mean(x: &Array2<f64>, h: f64) -> Array2<f64> {
    let mut out = Array2::zeros(x.dim());
    for (i, xi) in x.rows().into_iter().enumerate() {
        let mut total = 0.0;
        for xj in x.rows() {
            let w = (-sq(xi, xj) / (2.0 * h * h)).exp();
            total += w;
            out.row_mut(i).scaled_add(w, &xj);
        }
        out.row_mut(i).mapv_inplace(|v| v / total);
    }
    out
}

#[test]
fn local_means_of_the_keys_come_back_as_float64_positions() {
    // Coordinates as map projections give them (metres east and north).
    let dir = TempDir::new().unwrap();
    let mut rng = Rng::new(43);
    let x = far_points(&mut rng, 120, &[500_000.0, 4_649_776.0], 100.0);
    let want = ref_self_mean(&x, 10.0);
    for name in ["m.npy", "m.csv"] {
        let out = dir.path().join(name);
        let keys = csv64(&dir, "x.csv", &x);
        run(
            &["local-mean", "--bandwidth", "10"],
            &[("--keys", &keys), ("--output", &out)],
        );
        let got: Array2<f64> = match name {
            "m.npy" => read_npy(&out).unwrap(), // float64: fails on f32
            _ => {
                // Each f32 result as its shortest decimal, moved back: no
                // run of binary digits beyond its precision.
                let text = std::fs::read_to_string(&out).unwrap();
                let longest = text.split([',', '\n']).map(str::len).max().unwrap();
                assert!(longest <= 15, "a field of {longest} characters");
                csv_f64(&out)
            }
        };
        let err = (&got - &want).mapv(f64::abs).fold(0.0f64, |m, &v| m.max(v));
        // f32 carries 7 digits of the 100 m spread, not of 4.6e6 m.
        assert!(err < 1e-4, "{name}: max error {err} m");
    }
}

#[test]
fn mean_shift_modes_and_medoids_come_back_with_the_offset() {
    let dir = TempDir::new().unwrap();
    let mut rng = Rng::new(44);
    let centres = [[1e6, 2e6], [1e6 + 10.0, 2e6], [1e6, 2e6 + 10.0]];
    let x = ndarray::concatenate(
        Axis(0),
        &centres
            .iter()
            .map(|c| far_points(&mut rng, 60, &[c[0] - 0.5, c[1] - 0.5], 1.0))
            .collect::<Vec<_>>()
            .iter()
            .map(|a| a.view())
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let xp = npy64(&dir, "x.npy", &x);
    let (labels, modes) = (dir.path().join("l.npy"), dir.path().join("m.npy"));
    let files = [
        ("--input", &*xp),
        ("--labels", &labels),
        ("--modes", &modes),
    ];
    run(&["mean-shift", "--bandwidth", "2"], &files);
    let modes: Array2<f64> = read_npy(&modes).unwrap();
    assert_eq!(modes.nrows(), 3);
    for c in centres {
        let near = modes
            .rows()
            .into_iter()
            .any(|m| (m[0] - c[0]).abs() < 0.2 && (m[1] - c[1]).abs() < 0.2);
        assert!(near, "no mode near {c:?}: {modes}");
    }
    // Binned seeds lie on cells of side h = 0.7 from the origin: the points
    // move by whole cells only (the keys' mean on its power-of-two grid,
    // 10⁶ and 2·10⁶ here, then to a multiple of 0.7 — as written, not of
    // the f32 nearest it), so the run far away is the run on the points
    // moved by that much to the origin (which are not moved again), moved
    // back, bit for bit. Moved by 10⁶, or by cells of f32(0.7), the seeds
    // would lie elsewhere.
    let cells: Vec<f64> = x
        .columns()
        .into_iter()
        .map(|c| {
            let (lo, hi) = c
                .iter()
                .fold((f64::MAX, f64::MIN), |(l, h), &v| (l.min(v), h.max(v)));
            let step = (hi - lo).log2().ceil().exp2();
            let plain = (c.mean().unwrap() / step).round_ties_even() * step;
            (plain / 0.7).round_ties_even() * 0.7
        })
        .collect();
    assert_eq!(cells, [1e6, 2e6].map(|c: f64| (c / 0.7).round() * 0.7));
    let binned = |input: &Path, tag: &str| {
        let (l, m) = (
            dir.path().join(format!("l{tag}.npy")),
            dir.path().join(format!("m{tag}.npy")),
        );
        run(
            &["mean-shift", "--bandwidth", "0.7", "--seeds", "binned"],
            &[("--input", input), ("--labels", &l), ("--modes", &m)],
        );
        let labels: ndarray::Array1<i64> = read_npy(&l).unwrap();
        let modes: Array2<f64> = read_npy(&m).unwrap();
        (labels, modes)
    };
    let far = binned(&xp, "far");
    let mut near = x.clone();
    for mut r in near.rows_mut() {
        r[0] -= cells[0];
        r[1] -= cells[1];
    }
    let near = binned(&npy64(&dir, "near.npy", &near), "near");
    assert_eq!(far.0, near.0);
    let mut back = near.1.clone();
    for mut r in back.rows_mut() {
        r[0] += cells[0];
        r[1] += cells[1];
    }
    assert_eq!(far.1, back);
    let medoids = dir.path().join("med.csv");
    let files = [
        ("--input", &*xp),
        ("--labels", &labels),
        ("--medoids", &medoids),
    ];
    run(&["medoid-shift", "--bandwidth", "2"], &files);
    // Each medoid is an input point, as given.
    for m in csv_f64(&medoids).rows() {
        assert!(
            x.rows().into_iter().any(|r| r == m),
            "medoid {m} is not an input point"
        );
    }
}

#[test]
fn impute_writes_observed_entries_as_given() {
    let dir = TempDir::new().unwrap();
    let mut rng = Rng::new(45);
    let mut x = far_points(&mut rng, 80, &[1e7, 1e7, 1e7], 3.0);
    // The third coordinate follows the first two; some are missing.
    for mut r in x.rows_mut() {
        r[2] = r[0] + r[1] - 1e7;
    }
    let missing = [3usize, 17, 42, 77];
    for &i in &missing {
        x[[i, 2]] = f64::NAN;
    }
    let out = dir.path().join("f.npy");
    let input = npy64(&dir, "x.npy", &x);
    run(
        &["impute", "--bandwidth", "0.5"],
        &[("--input", &input), ("--output", &out)],
    );
    let got: Array2<f64> = read_npy(&out).unwrap();
    // The same as CSV text in and out, far from and near the origin
    // (nothing moved there; more digits than f32 holds): observed entries
    // as given too.
    let csv_out = dir.path().join("f.csv");
    let as_text = |points: &Array2<f64>, name: &str, what: &str| {
        let csv_in = csv64(&dir, name, points);
        run(
            &["impute", "--bandwidth", "0.5"],
            &[("--input", &csv_in), ("--output", &csv_out)],
        );
        let text = csv_f64(&csv_out);
        for ((i, j), &v) in points.indexed_iter() {
            if !v.is_nan() {
                assert_eq!(text[[i, j]].to_bits(), v.to_bits(), "{what} [{i},{j}]");
            }
        }
    };
    as_text(&x, "x.csv", "csv");
    as_text(&x.mapv(|v| v - 1e7), "near.csv", "near csv");
    for ((i, j), &v) in x.indexed_iter() {
        if v.is_nan() {
            // A local mean of neighbours within ~1 of a plane of slope 1.
            let want = got[[i, 0]] + got[[i, 1]] - 1e7;
            assert!(
                (got[[i, j]] - want).abs() < 1.5,
                "[{i},{j}] = {}",
                got[[i, j]]
            );
        } else {
            assert_eq!(got[[i, j]].to_bits(), v.to_bits(), "[{i},{j}]");
        }
    }
}

#[test]
fn impute_keeps_float32_entries_centred_on_a_float64_reference() {
    // The input's f32 entries move with the reference's offset and come
    // back as given (0.1 is not 0.1 − 1e7 + 1e7 in f32).
    let dir = TempDir::new().unwrap();
    let mut rng = Rng::new(47);
    let reference = far_points(&mut rng, 50, &[1e7, 1e7], 2.0);
    let nan = f32::NAN;
    let input = ndarray::array![[0.1f32, nan], [0.3, 0.7], [1e7 + 0.5, nan], [nan, 1e7]];
    let ip = dir.path().join("in.npy");
    write_npy(&ip, &input).unwrap();
    let out = dir.path().join("f.npy");
    let rp = npy64(&dir, "ref.npy", &reference);
    let files = [("--input", &*ip), ("--reference", &rp), ("--output", &out)];
    run(&["impute", "--bandwidth", "1"], &files);
    let got: Array2<f64> = read_npy(&out).unwrap();
    for ((i, j), &v) in input.indexed_iter() {
        if !v.is_nan() {
            assert_eq!(got[[i, j]], f64::from(v), "[{i},{j}]");
        } else {
            assert!(got[[i, j]].is_finite(), "[{i},{j}] not filled");
        }
    }
    // As text: each f32 entry as its shortest decimal (0.1, not
    // 0.10000000149011612).
    let csv_out = dir.path().join("f.csv");
    let files = [
        ("--input", &*ip),
        ("--reference", &rp),
        ("--output", &csv_out),
    ];
    run(&["impute", "--bandwidth", "1"], &files);
    let text = std::fs::read_to_string(&csv_out).unwrap();
    assert!(text.starts_with("0.1,"), "{text}");
    assert!(text.contains("\n0.3,0.7\n"), "{text}");
}

#[test]
fn values_beyond_f32_are_centred_or_refused() {
    let dir = TempDir::new().unwrap();
    // Two keys 1e24 apart near 1e39 (beyond f32): centred, they fit.
    let x = ndarray::array![[1e39], [1e39 + 1e24]];
    let xp = npy64(&dir, "x.npy", &x);
    let (idx, dist) = run_knn(&xp, &xp, 2, &dir, &[]);
    assert_eq!(idx, ndarray::array![[0, 1], [1, 0]]);
    let (gap, want) = (f64::from(dist[[0, 1]]), x[[1, 0]] - x[[0, 0]]);
    assert!((gap - want).abs() < want * 1e-6, "{gap:e} against {want:e}");
    // Spanning more than f32 holds: refused, naming the entry.
    let x = ndarray::array![[-1e39], [1e39]];
    let xp = npy64(&dir, "wide.npy", &x);
    let out = dir.path().join("i.npy");
    refused(
        &["knn", "--k", "1"],
        &[("--keys", &xp), ("--output", &out)],
        "value -1e39 at row 0, column 0 (0-based) is too large for f32",
    );
    // A CSV entry: its line too.
    let p = dir.path().join("x.csv");
    std::fs::write(&p, "a,b\n1,2\n3,4e40\n").unwrap();
    refused(
        &["knn", "--k", "1", "--metric", "haversine"],
        &[("--keys", &p), ("--output", &out)],
        "value 4e40 at row 1, column 1 (0-based; line 3) is too large for f32",
    );
}

#[test]
fn float32_files_and_data_near_the_origin_are_not_moved() {
    // CSV text near the origin is rounded as it is: the same results as
    // its f32 copy, the same CSV text; a .npy of positions is float64 (the
    // precision the points came in), an f32 file's is f32.
    let dir = TempDir::new().unwrap();
    let x = Rng::new(46).matrix(50, 2, -1.0, 1.0);
    let csv = dir.path().join("x.csv");
    std::fs::write(
        &csv,
        x.rows()
            .into_iter()
            .map(|r| format!("{:?},{:?}\n", r[0], r[1]))
            .collect::<String>(),
    )
    .unwrap();
    let x32 = dir.path().join("x.npy");
    write_npy(&x32, &x).unwrap();
    let run = |input: &Path, out: &str| {
        let out = dir.path().join(out);
        run(
            &["local-mean", "--bandwidth", "0.3"],
            &[("--keys", input), ("--output", &out)],
        );
        out
    };
    let narrow: Array2<f32> = read_npy(run(&x32, "a.npy")).unwrap(); // f32
    let wide: Array2<f64> = read_npy(run(&csv, "b.npy")).unwrap(); // float64
    assert_eq!(wide, narrow.mapv(f64::from));
    let (a, b) = (run(&x32, "a.csv"), run(&csv, "b.csv"));
    assert_eq!(
        std::fs::read_to_string(a).unwrap(),
        std::fs::read_to_string(b).unwrap()
    );
}
