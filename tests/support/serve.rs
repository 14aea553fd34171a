//! What the tests of `locus serve` share: the test sets written as files,
//! the service started on them, JSON and `.npy` bodies and answers, and
//! [`ask`], which asks an op in JSON, `.npy` and Arrow and checks they
//! agree.
#![allow(dead_code)]

use std::time::Duration;

use crate::arrow::{ARROW, arrow_answer, arrow_body};
use crate::common::Rng;
use crate::http::{Client, Reply, Service, temp_folder};
use ndarray::{Array1, Array2, ArrayD, IxDyn};
use ndarray_npy::{ReadNpyExt, WriteNpyExt, write_npy};
use serde_json::Value;

pub const READ_KEY: &str = "reader-0123456789abcdef";
pub const ADMIN_KEY: &str = "admin-0123456789abcdef";

/// The arrays of the test set, written as `.npy` files in `dir`.
pub struct Data {
    pub dir: tempfile::TempDir,
    pub keys: Array2<f32>,
    pub values: Array2<f32>,
    pub labels: Array1<i64>,
    pub weights: Array1<f32>,
}

impl Data {
    pub fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_string_lossy().into_owned()
    }
}

pub fn data() -> Data {
    let dir = temp_folder("serve");
    let mut rng = Rng::new(21);
    let keys = rng.matrix(300, 3, 0.0, 1.0);
    let values = rng.matrix(300, 2, -1.0, 1.0);
    let labels = Array1::from_shape_fn(300, |j| i64::from(keys[[j, 0]] > 0.5) * 3);
    let weights = Array1::from_shape_fn(300, |j| 0.5 + keys[[j, 1]]);
    write_npy(dir.path().join("k.npy"), &keys).unwrap();
    write_npy(dir.path().join("v.npy"), &values.mapv(f64::from)).unwrap();
    write_npy(dir.path().join("l.npy"), &labels).unwrap();
    write_npy(dir.path().join("w.npy"), &weights).unwrap();
    Data {
        dir,
        keys,
        values,
        labels,
        weights,
    }
}

/// Starts the service with set `s` (keys, values, labels) and set `w`
/// (keys, weights), and `extra` flags.
pub fn start(d: &Data, extra: &[&str]) -> Service {
    let (k, v, l, w) = (
        d.path("k.npy"),
        d.path("v.npy"),
        d.path("l.npy"),
        d.path("w.npy"),
    );
    let mut args = vec![
        "--set",
        "s",
        "--keys",
        &k,
        "--values",
        &v,
        "--labels",
        &l,
        "--set",
        "w",
        "--keys",
        &k,
        "--weights",
        &w,
        "--backend",
        "cpu",
        "--bandwidth",
        "0.3",
    ];
    args.extend(extra);
    Service::start(&args, Duration::from_secs(60))
}

pub fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// A JSON array (of any depth) of numbers as an `f64` array; `null` is NaN.
pub fn array(v: &Value) -> ArrayD<f64> {
    fn shape(v: &Value, out: &mut Vec<usize>) {
        if let Some(a) = v.as_array() {
            out.push(a.len());
            if let Some(first) = a.first() {
                shape(first, out);
            }
        }
    }
    fn flat(v: &Value, out: &mut Vec<f64>) {
        match v.as_array() {
            Some(a) => a.iter().for_each(|x| flat(x, out)),
            None => out.push(v.as_f64().unwrap_or(f64::NAN)),
        }
    }
    let (mut s, mut f) = (Vec::new(), Vec::new());
    shape(v, &mut s);
    flat(v, &mut f);
    ArrayD::from_shape_vec(IxDyn(&s), f).expect("a rectangular array")
}

pub fn npy_body(q: &Array2<f32>) -> Vec<u8> {
    let mut b = Vec::new();
    q.write_npy(&mut b).unwrap();
    b
}

/// An `.npy` answer read as `f64` whatever its dtype.
pub fn npy_answer(r: &Reply) -> ArrayD<f64> {
    assert_eq!(
        r.header("content-type"),
        Some("application/x-npy"),
        "{}",
        r.text()
    );
    let b = &r.body[..];
    if let Ok(a) = ArrayD::<f32>::read_npy(b) {
        return a.mapv(f64::from);
    }
    if let Ok(a) = ArrayD::<f64>::read_npy(b) {
        return a;
    }
    ArrayD::<i64>::read_npy(b)
        .expect("an f32, f64 or i64 .npy")
        .mapv(|x| x as f64)
}

pub fn same(what: &str, got: &ArrayD<f64>, want: &ArrayD<f64>, rtol: f64) {
    assert_eq!(got.shape(), want.shape(), "{what}");
    for (g, w) in got.iter().zip(want) {
        let ok = (g.is_nan() && w.is_nan()) || (g - w).abs() <= rtol * w.abs() + 1e-6;
        assert!(ok, "{what}: {g} vs {w}");
    }
}

pub fn rows_json(q: &Array2<f32>) -> String {
    let rows: Vec<Vec<f32>> = q.rows().into_iter().map(|r| r.to_vec()).collect();
    serde_json::to_string(&rows).unwrap()
}

/// Asks `op` on `set` with `params` (JSON fields) in JSON, and each of
/// `arrays` as `.npy` (parameters in the query string, `output=`), and in
/// Arrow (every per-row array as a column, the scalars in the schema's
/// metadata; then each of `arrays` alone by `output=`): the `.npy` and
/// Arrow answers must equal the JSON ones; returns the JSON answer.
pub fn ask(
    c: &mut Client,
    set: &str,
    op: &str,
    q: &Array2<f32>,
    params: &[(&str, &str)],
    arrays: &[&str],
) -> Value {
    let path = format!("/v1/sets/{set}/{op}");
    let fields: String = params
        .iter()
        .map(|(k, v)| format!(r#", "{k}": {v}"#))
        .collect();
    let (status, b) = c
        .request(
            "POST",
            &path,
            &format!(r#"{{"queries": {}{fields}}}"#, rows_json(q)),
        )
        .unwrap();
    assert_eq!(status, 200, "{op}: {b}");
    let answer = json(&b);
    let query: Vec<String> = params
        .iter()
        .map(|(k, v)| match *k {
            // The query string's form of a product kernel: dims:profile:h,…
            "blocks" => {
                let blocks: Vec<(usize, String, f64)> = serde_json::from_str(v).unwrap();
                let b: Vec<String> = blocks
                    .iter()
                    .map(|(d, p, h)| format!("{d}:{p}:{h}"))
                    .collect();
                format!("blocks={}", b.join(","))
            }
            _ => format!("{k}={}", v.trim_matches('"')),
        })
        .collect();
    for name in arrays {
        let url = format!("{path}?{}&output={name}", query.join("&"));
        let r = c
            .send(
                "POST",
                &url,
                &[
                    ("Content-Type", "application/x-npy"),
                    ("Accept", "application/x-npy"),
                ],
                &npy_body(q),
            )
            .unwrap();
        assert_eq!(r.status, 200, "{op} {name}: {}", r.text());
        assert_eq!(r.header("x-locus-array"), Some(*name));
        same(
            &format!("{op} {name} .npy vs JSON"),
            &npy_answer(&r),
            &array(&answer[*name]),
            0.0,
        );
    }
    // Arrow: float32 queries once, float64 (rounded to f32 as JSON) once.
    for (i, output) in std::iter::once(None)
        .chain(arrays.iter().map(|a| Some(*a)))
        .enumerate()
    {
        let mut url = format!("{path}?{}", query.join("&"));
        if let Some(o) = output {
            url.push_str(&format!("&output={o}"));
        }
        let r = c
            .send(
                "POST",
                &url,
                &[("Content-Type", ARROW), ("Accept", ARROW)],
                &arrow_body(q, "queries", i % 2 == 1),
            )
            .unwrap();
        assert_eq!(r.status, 200, "{op} Arrow {output:?}: {}", r.text());
        let a = arrow_answer(&r);
        let obj = answer.as_object().unwrap();
        let mut left_out: Vec<String> = Vec::new();
        for (name, v) in obj {
            if v.is_array() {
                match a.columns.get(name) {
                    Some(col) => same(&format!("{op} {name} Arrow vs JSON"), col, &array(v), 0.0),
                    None => left_out.push(name.clone()),
                }
            } else {
                assert_eq!(a.meta.get(name), Some(&v.to_string()), "{op} {name}");
            }
        }
        match output {
            Some(o) => assert_eq!(a.columns.keys().collect::<Vec<_>>(), vec![o]),
            None => {
                // Left out: the arrays whose rows are not the queries'.
                let listed: Vec<String> = a
                    .meta
                    .get("locus.other_arrays")
                    .map(|s| serde_json::from_str(s).unwrap())
                    .unwrap_or_default();
                assert_eq!(listed, left_out, "{op}");
                for col in a.columns.values() {
                    assert_eq!(col.shape()[0], q.nrows(), "{op}");
                }
            }
        }
    }
    answer
}
