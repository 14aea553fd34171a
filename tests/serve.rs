//! `locus serve`'s API as a client sees it: the real binary on a free
//! loopback port; every op in JSON and in `.npy` against the library's
//! own results, set management and replacement under load, API keys,
//! back-pressure, readiness and draining on SIGTERM, the metrics parsed
//! by a strict reader of the Prometheus text format, bad bodies. The
//! HTTP protections (timeouts, shedding, protocol errors) are tested in
//! tests/service_http.rs.

mod common;
#[path = "support/http.rs"]
mod http;
#[path = "support/prometheus.rs"]
mod prometheus;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use http::{Client, Reply, Service, temp_folder};
use locus::{Engine, Kernel, KeySet, MeanShiftParams};
use ndarray::{Array1, Array2, ArrayD, IxDyn};
use ndarray_npy::{ReadNpyExt, WriteNpyExt, write_npy};
use serde_json::Value;

const READ_KEY: &str = "reader-0123456789abcdef";
const ADMIN_KEY: &str = "admin-0123456789abcdef";

/// The arrays of the test set, written as `.npy` files in `dir`.
struct Data {
    dir: tempfile::TempDir,
    keys: Array2<f32>,
    values: Array2<f32>,
    labels: Array1<i64>,
    weights: Array1<f32>,
}

impl Data {
    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_string_lossy().into_owned()
    }
}

fn data() -> Data {
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
fn start(d: &Data, extra: &[&str]) -> Service {
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

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// A JSON array (of any depth) of numbers as an `f64` array; `null` is NaN.
fn array(v: &Value) -> ArrayD<f64> {
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

fn npy_body(q: &Array2<f32>) -> Vec<u8> {
    let mut b = Vec::new();
    q.write_npy(&mut b).unwrap();
    b
}

/// An `.npy` answer read as `f64` whatever its dtype.
fn npy_answer(r: &Reply) -> ArrayD<f64> {
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

fn same(what: &str, got: &ArrayD<f64>, want: &ArrayD<f64>, rtol: f64) {
    assert_eq!(got.shape(), want.shape(), "{what}");
    for (g, w) in got.iter().zip(want) {
        let ok = (g.is_nan() && w.is_nan()) || (g - w).abs() <= rtol * w.abs() + 1e-6;
        assert!(ok, "{what}: {g} vs {w}");
    }
}

fn rows_json(q: &Array2<f32>) -> String {
    let rows: Vec<Vec<f32>> = q.rows().into_iter().map(|r| r.to_vec()).collect();
    serde_json::to_string(&rows).unwrap()
}

/// Asks `op` on `set` with `params` (JSON fields) in JSON, and each of
/// `arrays` as `.npy` (parameters in the query string, `output=`): the
/// `.npy` answers must equal the JSON ones; returns the JSON answer.
fn ask(
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
    answer
}

#[test]
fn every_op_answers_as_the_library_in_json_and_npy() {
    let d = data();
    let svc = start(&d, &[]);
    let mut c = Client::connect(svc.addr).unwrap();
    let e = Engine::cpu();
    let set: KeySet = e
        .prepare(d.keys.view())
        .values(d.values.view())
        .labels(d.labels.view())
        .build()
        .unwrap();
    let q = Rng::new(22).matrix(9, 3, 0.0, 1.0);
    let k = Kernel::gaussian(0.3).unwrap();
    let dy = |a: Array2<f32>| a.mapv(f64::from).into_dyn();

    let a = ask(&mut c, "s", "local-mean", &q, &[], &["values"]);
    same(
        "local-mean",
        &array(&a["values"]),
        &dy(set.local_mean(&k, q.view()).unwrap().values),
        1e-5,
    );
    let a = ask(
        &mut c,
        "s",
        "local-mean",
        &q,
        &[
            ("degree", "1"),
            ("kernel", "\"epanechnikov\""),
            ("bandwidth", "0.6"),
        ],
        &["values", "slopes"],
    );
    let k1 = Kernel::new(locus::Profile::Epanechnikov, 0.6).unwrap();
    let fit = set.local_polynomial(&k1, q.view(), 1).unwrap();
    same("degree 1", &array(&a["values"]), &dy(fit.fitted), 1e-4);
    same(
        "slopes",
        &array(&a["slopes"]),
        &fit.slopes.unwrap().mapv(f64::from).into_dyn(),
        1e-3,
    );

    let a = ask(
        &mut c,
        "s",
        "row-states",
        &q,
        &[],
        &["max_log_weight", "sum", "weighted"],
    );
    let s = set.row_states(&k, q.view()).unwrap();
    same(
        "m",
        &array(&a["max_log_weight"]),
        &s.max_log_weight.mapv(f64::from).into_dyn(),
        1e-6,
    );
    same("s", &array(&a["sum"]), &s.sum.into_dyn(), 1e-6);
    same("u", &array(&a["weighted"]), &s.weighted.into_dyn(), 1e-6);

    let a = ask(&mut c, "s", "density", &q, &[], &["density"]);
    same(
        "density",
        &array(&a["density"]),
        &set.density(&k, q.view()).unwrap().into_dyn(),
        1e-6,
    );
    let a = ask(
        &mut c,
        "s",
        "log-density",
        &q,
        &[("bandwidth", "0.5")],
        &["log_density"],
    );
    let k5 = Kernel::gaussian(0.5).unwrap();
    same(
        "log density",
        &array(&a["log_density"]),
        &set.log_density(&k5, q.view()).unwrap().into_dyn(),
        1e-6,
    );
    // The weighted set: the engine's weighted estimate.
    let a = ask(&mut c, "w", "density", &q, &[], &["density"]);
    let want = e
        .density(&k, q.view(), d.keys.view(), Some(d.weights.view()))
        .unwrap();
    same(
        "weighted density",
        &array(&a["density"]),
        &want.into_dyn(),
        1e-6,
    );
    assert!(
        (array(&a["density"]) - set.density(&k, q.view()).unwrap().into_dyn())
            .iter()
            .any(|x| x.abs() > 1e-3)
    );

    let a = ask(
        &mut c,
        "s",
        "classify",
        &q,
        &[("blocks", "[[1, \"uniform\", 0.5], [2, \"gaussian\", 0.4]]")],
        &["labels", "proba"],
    );
    let kp = Kernel::product([
        (1, locus::Profile::Uniform, 0.5),
        (2, locus::Profile::Gaussian, 0.4),
    ])
    .unwrap();
    let cl = set.classify(&kp, q.view()).unwrap();
    same(
        "labels",
        &array(&a["labels"]),
        &cl.labels.mapv(|x| x as f64).into_dyn(),
        0.0,
    );
    same("proba", &array(&a["proba"]), &dy(cl.proba), 1e-5);
    assert_eq!(a["classes"], serde_json::json!([0, 3]));

    let a = ask(
        &mut c,
        "s",
        "knn",
        &q,
        &[("k", "4")],
        &["distances", "indices"],
    );
    let nn = set.knn(q.view(), 4).unwrap();
    same(
        "indices",
        &array(&a["indices"]),
        &nn.indices.mapv(|x| x as f64).into_dyn(),
        0.0,
    );
    same(
        "distances",
        &array(&a["distances"]),
        &dy(nn.distances),
        1e-6,
    );

    // MeanShift of posted points, JSON and .npy.
    let pts = Rng::new(23).matrix(40, 2, 0.0, 1.0);
    let (status, b) = c
        .request(
            "POST",
            "/v1/mean-shift",
            &format!(r#"{{"points": {}, "bandwidth": 0.4}}"#, rows_json(&pts)),
        )
        .unwrap();
    assert_eq!(status, 200, "{b}");
    let a = json(&b);
    // The service's default kernel (gaussian) with the request's bandwidth.
    let fit = e
        .mean_shift(
            &MeanShiftParams::new()
                .kernel(Kernel::gaussian(0.4).unwrap())
                .check()
                .unwrap(),
            pts.view(),
        )
        .unwrap();
    same("modes", &array(&a["modes"]), &dy(fit.modes), 1e-5);
    same(
        "ms labels",
        &array(&a["labels"]),
        &fit.labels.mapv(|x| x as f64).into_dyn(),
        0.0,
    );
    let r = c
        .send(
            "POST",
            "/v1/mean-shift?bandwidth=0.4&output=labels",
            &[
                ("Content-Type", "application/x-npy"),
                ("Accept", "application/x-npy"),
            ],
            &npy_body(&pts),
        )
        .unwrap();
    same("ms .npy", &npy_answer(&r), &array(&a["labels"]), 0.0);
    assert_eq!(
        r.header("x-locus-iterations"),
        Some(a["iterations"].to_string().as_str())
    );
    assert_eq!(r.header("x-locus-converged"), Some("true"));
}

#[test]
fn sets_are_created_replaced_listed_and_dropped() {
    let d = data();
    let svc = start(&d, &[]);
    let mut c = Client::connect(svc.addr).unwrap();
    let (status, b) = c.request("GET", "/v1/sets", "").unwrap();
    assert_eq!(status, 200);
    let names: Vec<_> = json(&b)["sets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["s", "w"]);
    let s = &json(&b)["sets"][0];
    assert_eq!(
        (
            s["keys"].as_u64(),
            s["dim"].as_u64(),
            s["value_cols"].as_u64()
        ),
        (Some(300), Some(3), Some(2))
    );
    assert_eq!(json(&b)["sets"][1]["weighted"], Value::Bool(true));

    // JSON upload: 201, then 200 when replaced.
    let (status, b) = c
        .request(
            "PUT",
            "/v1/sets/n",
            r#"{"keys": [[0], [1], [2]], "values": [1, 2, 3], "labels": [0, 1, 1]}"#,
        )
        .unwrap();
    assert_eq!(status, 201, "{b}");
    assert_eq!(json(&b)["replaced"], Value::Bool(false));
    // .npy parts upload replaces it.
    let keys = Array2::from_shape_fn((4, 1), |(i, _)| i as f32);
    let mut body = Vec::new();
    keys.write_npy(&mut body).unwrap();
    Array1::from(vec![10.0f32, 10.0, 10.0, 10.0])
        .write_npy(&mut body)
        .unwrap();
    let r = c
        .send(
            "PUT",
            "/v1/sets/n?parts=keys,values",
            &[("Content-Type", "application/x-npy")],
            &body,
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(json(&r.text())["set"]["keys"].as_u64(), Some(4));
    let (status, b) = c
        .request("POST", "/v1/sets/n/local-mean", r#"{"queries": [[1.5]]}"#)
        .unwrap();
    assert_eq!(status, 200, "{b}");
    assert!(
        (array(&json(&b)["values"])[[0, 0]] - 10.0).abs() < 1e-5,
        "{b}"
    );
    // The new set has no labels: 422.
    let (status, b) = c
        .request("POST", "/v1/sets/n/classify", r#"{"queries": [[1.5]]}"#)
        .unwrap();
    assert_eq!(status, 422, "{b}");
    assert_eq!(json(&b)["kind"], "unprocessable");
    let (status, _) = c.request("DELETE", "/v1/sets/n", "").unwrap();
    assert_eq!(status, 200);
    let (status, b) = c.request("DELETE", "/v1/sets/n", "").unwrap();
    assert_eq!(status, 404, "{b}");
    // Bad uploads are refused and change nothing.
    for (body, needle) in [
        (r#"{"keys": []}"#, "empty"),
        (r#"{"keys": [[0], [1, 2]]}"#, "row 1"),
        (
            r#"{"keys": [[0], [1]], "values": [1]}"#,
            "2 keys but 1 value rows",
        ),
        (
            r#"{"keys": [[0], [1]], "weights": [1, -1]}"#,
            "non-negative",
        ),
        (r#"{"keys": [[0]], "extra": 1}"#, "unknown field"),
    ] {
        let (status, b) = c.request("PUT", "/v1/sets/bad", body).unwrap();
        assert_eq!(status, 400, "{body}: {b}");
        assert!(
            json(&b)["error"].as_str().unwrap().contains(needle),
            "{body}: {b}"
        );
    }
    let (status, b) = c
        .request("PUT", "/v1/sets/a%2Fb", r#"{"keys": [[0]]}"#)
        .unwrap();
    assert_eq!(status, 400, "{b}");
    let (_, b) = c.request("GET", "/v1/sets", "").unwrap();
    assert_eq!(json(&b)["sets"].as_array().unwrap().len(), 2);
}

#[test]
fn a_set_replaced_under_load_loses_no_request() {
    let d = data();
    let svc = start(&d, &["--quiet"]);
    let addr = svc.addr;
    let upload = |v: f32| {
        format!(
            r#"{{"keys": {}, "values": {}}}"#,
            rows_json(&d.keys),
            serde_json::to_string(&vec![v; 300]).unwrap()
        )
    };
    let mut admin = Client::connect(addr).unwrap();
    assert_eq!(
        admin.request("PUT", "/v1/sets/r", &upload(1.0)).unwrap().0,
        201
    );
    let stop = std::sync::atomic::AtomicBool::new(false);
    let answered = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|t| {
                let stop = &stop;
                s.spawn(move || {
                    let mut c = Client::connect(addr).unwrap();
                    let q = Rng::new(30 + t).matrix(3, 3, 0.0, 1.0);
                    let body = format!(r#"{{"queries": {}}}"#, rows_json(&q));
                    let mut n = 0;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let (status, b) =
                            c.request("POST", "/v1/sets/r/local-mean", &body).unwrap();
                        assert_eq!(status, 200, "{b}");
                        let v = array(&json(&b)["values"]);
                        // One set or the other, never a mix.
                        assert!(
                            v.iter().all(|x| (x - v[[0, 0]]).abs() < 1e-6)
                                && [1.0, 2.0].iter().any(|w| (v[[0, 0]] - w).abs() < 1e-5),
                            "{b}"
                        );
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        for i in 0..10 {
            let (status, b) = admin
                .request(
                    "PUT",
                    "/v1/sets/r",
                    &upload(if i % 2 == 0 { 2.0 } else { 1.0 }),
                )
                .unwrap();
            assert_eq!(status, 200, "{b}");
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        workers
            .into_iter()
            .map(|w| w.join().unwrap())
            .sum::<usize>()
    });
    assert!(answered > 0);
}

#[test]
fn api_keys_guard_queries_and_set_changes() {
    let d = data();
    let keys = d.dir.path().join("keys.txt");
    std::fs::write(
        &keys,
        format!("# service keys\n{READ_KEY} read\n{ADMIN_KEY} admin\n"),
    )
    .unwrap();
    let kp = keys.to_string_lossy().into_owned();
    let svc = start(&d, &["--api-keys", &kp]);
    let mut c = Client::connect(svc.addr).unwrap();
    let q = r#"{"queries": [[0.1, 0.2, 0.3]]}"#;
    let bearer = |k: &str| format!("Bearer {k}");
    let json_ct = ("Content-Type", "application/json");
    let put = r#"{"keys": [[0], [1]]}"#;
    let cases: [(&str, &str, Option<String>, &str, u16); 9] = [
        ("POST", "/v1/sets/s/density", None, q, 401),
        (
            "POST",
            "/v1/sets/s/density",
            Some(bearer("wrong-key-0123456789")),
            q,
            401,
        ),
        ("POST", "/v1/sets/s/density", Some(bearer(READ_KEY)), q, 200),
        ("GET", "/metrics", None, "", 401),
        ("GET", "/metrics", Some(bearer(READ_KEY)), "", 200),
        ("PUT", "/v1/sets/x", Some(bearer(READ_KEY)), put, 403),
        ("PUT", "/v1/sets/x", Some(bearer(ADMIN_KEY)), put, 201),
        ("DELETE", "/v1/sets/x", Some(bearer(READ_KEY)), "", 403),
        ("DELETE", "/v1/sets/x", Some(bearer(ADMIN_KEY)), "", 200),
    ];
    for (method, path, auth, body, want) in cases {
        let mut headers = vec![json_ct];
        if let Some(a) = &auth {
            headers.push(("Authorization", a));
        }
        let r = c.send(method, path, &headers, body.as_bytes()).unwrap();
        assert_eq!(r.status, want, "{method} {path} {auth:?}: {}", r.text());
        if want == 401 {
            assert_eq!(r.header("www-authenticate"), Some("bearer"));
            assert_eq!(json(&r.text())["kind"], "unauthorized");
        }
    }
    // The probes need no key.
    assert_eq!(c.request("GET", "/readyz", "").unwrap().0, 200);
    assert_eq!(c.request("GET", "/livez", "").unwrap().0, 200);

    // Without keys, only a loopback address is served.
    let out = std::process::Command::new(http::locus_binary())
        .args([
            "serve",
            "--port",
            "0",
            "--host",
            "0.0.0.0",
            "--backend",
            "cpu",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--api-keys"));
}

#[test]
fn bad_requests_are_typed_json_errors() {
    let d = data();
    let svc = start(&d, &["--max-rows", "20"]);
    let mut c = Client::connect(svc.addr).unwrap();
    let q = r#"{"queries": [[0.1, 0.2, 0.3]]}"#;
    let many = format!(r#"{{"queries": {}}}"#, rows_json(&Array2::zeros((21, 3))));
    // Path, query string, headers, body, status, a word of the message.
    type Case<'a> = (
        &'a str,
        &'a str,
        &'a [(&'a str, &'a str)],
        Vec<u8>,
        u16,
        &'a str,
    );
    let cases: [Case; 12] = [
        ("/v1/sets/nope/density", "", &[], q.into(), 404, "no set"),
        ("/v1/sets/s/nope", "", &[], q.into(), 404, "no op"),
        (
            "/v1/sets/s/density",
            "",
            &[("Content-Type", "text/plain")],
            q.into(),
            415,
            "Content-Type",
        ),
        (
            "/v1/sets/s/density",
            "",
            &[],
            b"{\"queries\": [[[[[[1]]]]]]}".to_vec(),
            400,
            "invalid request",
        ),
        (
            "/v1/sets/s/density",
            "",
            &[],
            many.into_bytes(),
            413,
            "limit 20",
        ),
        ("/v1/sets/s/knn", "", &[], q.into(), 400, "\"k\""),
        (
            "/v1/sets/s/density",
            "",
            &[],
            r#"{"queries": [[0.1, 0.2, 0.3]], "k": 2}"#.into(),
            400,
            "takes no",
        ),
        (
            "/v1/sets/s/knn",
            "",
            &[],
            r#"{"queries": [[0.1, 0.2, 0.3]], "k": 301}"#.into(),
            400,
            "k",
        ),
        ("/v1/sets/w/local-mean", "", &[], q.into(), 422, "values"),
        (
            "/v1/sets/s/density",
            "?bandwidth=x",
            &[("Content-Type", "application/x-npy")],
            npy_body(&Array2::zeros((1, 3))),
            400,
            "not a number",
        ),
        (
            "/v1/sets/s/density",
            "",
            &[("Content-Type", "application/x-npy")],
            b"\x93NUMPY garbage".to_vec(),
            400,
            ".npy",
        ),
        (
            "/v1/sets/s/density",
            "",
            &[("Content-Type", "application/x-npy")],
            npy_body(&Array2::zeros((1, 4))),
            400,
            "4",
        ),
    ];
    for (path, query, headers, body, want, needle) in cases {
        let mut h = headers.to_vec();
        if h.is_empty() {
            h.push(("Content-Type", "application/json"));
        }
        let r = c
            .send("POST", &format!("{path}{query}"), &h, &body)
            .unwrap();
        assert_eq!(r.status, want, "{path}{query}: {}", r.text());
        let v = json(&r.text());
        let msg = v["error"].as_str().unwrap_or_else(|| panic!("{path}: {v}"));
        assert!(
            msg.contains(needle),
            "{path}{query}: {msg:?} lacks {needle:?}"
        );
        assert!(v["kind"].is_string(), "{v}");
    }
    let r = c
        .send(
            "POST",
            "/v1/sets/s/density?output=nope",
            &[
                ("Content-Type", "application/x-npy"),
                ("Accept", "application/x-npy"),
            ],
            &npy_body(&Array2::zeros((1, 3))),
        )
        .unwrap();
    assert_eq!(r.status, 400, "{}", r.text());
}

#[test]
fn a_full_queue_is_429_with_retry_after() {
    // A set large enough that a 3000-query request computes for a while.
    let dir = temp_folder("serve-queue");
    write_npy(
        dir.path().join("k.npy"),
        &Rng::new(40).matrix(200_000, 32, 0.0, 1.0),
    )
    .unwrap();
    let k = dir.path().join("k.npy").to_string_lossy().into_owned();
    let svc = Service::start(
        &[
            "--set",
            "big",
            "--keys",
            &k,
            "--backend",
            "cpu",
            "--bandwidth",
            "2",
            "--queue-depth",
            "1",
            "--request-timeout-ms",
            "3000",
            "--quiet",
        ],
        Duration::from_secs(60),
    );
    let addr = svc.addr;
    let big = format!(
        r#"{{"queries": {}}}"#,
        rows_json(&Rng::new(41).matrix(3000, 32, 0.0, 1.0))
    );
    let slow = std::thread::spawn(move || {
        Client::connect(addr)
            .unwrap()
            .request("POST", "/v1/sets/big/density", &big)
            .unwrap()
    });
    let mut c = Client::connect(addr).unwrap();
    let t0 = Instant::now();
    // Once the slow request is queued, a second one is refused at once.
    let mut seen = false;
    while t0.elapsed() < Duration::from_secs(5) && !slow.is_finished() {
        let (_, m) = c.request("GET", "/metrics", "").unwrap();
        if m.contains("locus_queue_depth{set=\"big\"} 1\n") {
            let r = c.send("POST", "/v1/sets/big/density", &[("Content-Type", "application/json")], br#"{"queries": [[0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]]}"#).unwrap();
            if !slow.is_finished() {
                assert_eq!(r.status, 429, "{}", r.text());
                assert_eq!(r.header("retry-after"), Some("1"));
                assert_eq!(json(&r.text())["kind"], "queue_full");
                seen = true;
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let (status, b) = slow.join().unwrap();
    assert!(status == 200 || status == 503, "{status}: {b}");
    assert!(seen || status == 200, "the queue was never seen full");
    // The queue is free again once the work has stopped (a request
    // answered 503 at its deadline keeps its place until then).
    let t1 = Instant::now();
    loop {
        let (_, m) = c.request("GET", "/metrics", "").unwrap();
        if m.contains("locus_queue_depth{set=\"big\"} 0\n") {
            break;
        }
        assert!(t1.elapsed() < Duration::from_secs(10), "{m}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn metrics_follow_the_prometheus_text_format() {
    let d = data();
    let svc = start(&d, &["--memory-limit-mib", "512"]);
    let mut c = Client::connect(svc.addr).unwrap();
    for body in [
        r#"{"queries": [[0.1, 0.2, 0.3]]}"#,
        r#"{"queries": [[0.1, 0.2, 0.3], [0.3, 0.2, 0.1]]}"#,
        "not json",
    ] {
        c.request("POST", "/v1/sets/s/density", body).unwrap();
    }
    let r = c.send("GET", "/metrics", &[], b"").unwrap();
    assert_eq!(r.status, 200);
    assert!(
        r.header("content-type")
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    let m = prometheus::parse(&r.text()).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    let get = |name: &str, labels: &[(&str, &str)]| {
        let want: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        m.samples
            .iter()
            .find(|s| s.name == name && s.labels == want)
            .map(|s| s.value)
    };
    assert_eq!(
        get(
            "locus_requests_total",
            &[("op", "density"), ("code", "200")]
        ),
        Some(2.0)
    );
    assert_eq!(
        get(
            "locus_requests_total",
            &[("op", "density"), ("code", "400")]
        ),
        Some(1.0)
    );
    assert_eq!(get("locus_rows_total", &[("op", "density")]), Some(3.0));
    assert_eq!(
        get("locus_request_duration_seconds_count", &[("op", "density")]),
        Some(3.0)
    );
    assert_eq!(get("locus_set_keys", &[("set", "s")]), Some(300.0));
    assert_eq!(get("locus_queue_depth", &[("set", "w")]), Some(0.0));
    assert_eq!(
        get("locus_engine_memory_limit_bytes", &[]),
        Some(512.0 * 1048576.0)
    );
    assert!(get("locus_engine_memory_bytes", &[]).unwrap() > 0.0);
    assert_eq!(get("locus_ready", &[]), Some(1.0));
    for family in [
        "locus_requests_total",
        "locus_request_duration_seconds",
        "locus_queue_depth",
        "locus_in_flight",
        "locus_backend_info",
    ] {
        assert!(m.types.contains_key(family), "{family} has no TYPE");
    }
}

#[cfg(unix)]
#[test]
fn sigterm_turns_readyz_503_and_drains_before_exit_0() {
    use std::io::Write;
    let d = data();
    let mut svc = start(&d, &["--shutdown-delay-ms", "1500", "--log-json"]);
    let mut c = Client::connect(svc.addr).unwrap();
    assert_eq!(c.request("GET", "/readyz", "").unwrap().0, 200);
    // A request in flight: its body half sent.
    let q = Rng::new(50).matrix(2, 3, 0.0, 1.0);
    let full = format!(r#"{{"queries": {}}}"#, rows_json(&q));
    let (head, tail) = full.split_at(full.len() / 2);
    let mut s = std::net::TcpStream::connect(svc.addr).unwrap();
    write!(s, "POST /v1/sets/s/local-mean HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{head}", full.len()).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &svc.child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    std::thread::sleep(Duration::from_millis(200));
    // Draining: not ready, still alive.
    let (status, b) = Client::connect(svc.addr)
        .unwrap()
        .request("GET", "/readyz", "")
        .unwrap();
    assert_eq!(status, 503, "{b}");
    assert!(json(&b)["error"].as_str().unwrap().contains("draining"));
    // The request in flight completes.
    s.write_all(tail.as_bytes()).unwrap();
    let mut text = String::new();
    use std::io::Read;
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut buf = [0u8; 4096];
    while !text.contains("\"empty_rows\"") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed before the answer: {text}");
        text.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = svc.child.try_wait().unwrap() {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "still running after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
    // One JSON log line per request.
    let err = svc.stderr.lock().unwrap().clone();
    let lines: Vec<Value> = err
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(json)
        .collect();
    let lm = lines
        .iter()
        .find(|l| l["op"] == "local-mean")
        .unwrap_or_else(|| panic!("{err}"));
    assert_eq!(
        (
            lm["status"].as_u64(),
            lm["rows"].as_u64(),
            lm["set"].as_str()
        ),
        (Some(200), Some(2), Some("s"))
    );
}

#[test]
fn a_config_file_names_the_sets_and_flags_override_it() {
    let d = data();
    let cfg = d.dir.path().join("serve.toml");
    std::fs::write(
        &cfg,
        "port = 1\nbackend = \"cpu\"\nbandwidth = 0.3\nmax-rows = 2\n\n[[set]]\nname = \"fromfile\"\nkeys = \"k.npy\"\nvalues = \"v.npy\"\n",
    )
    .unwrap();
    let p = cfg.to_string_lossy().into_owned();
    // --port (0) overrides the file's.
    let svc = Service::start(
        &["--config", &p, "--max-rows", "3"],
        Duration::from_secs(60),
    );
    let mut c = Client::connect(svc.addr).unwrap();
    let q = Rng::new(60).matrix(3, 3, 0.0, 1.0);
    let (status, b) = c
        .request(
            "POST",
            "/v1/sets/fromfile/local-mean",
            &format!(r#"{{"queries": {}}}"#, rows_json(&q)),
        )
        .unwrap();
    assert_eq!(status, 200, "{b}");
    let want = Engine::cpu()
        .local_mean(
            &Kernel::gaussian(0.3).unwrap(),
            q.view(),
            d.keys.view(),
            d.values.view(),
        )
        .unwrap();
    same(
        "from file",
        &array(&json(&b)["values"]),
        &want.values.mapv(f64::from).into_dyn(),
        1e-5,
    );
    // An unknown key in the file is an error at start.
    std::fs::write(&cfg, "port = 0\nmax_rows = 2\n").unwrap();
    let out = std::process::Command::new(http::locus_binary())
        .args(["serve", "--config", &p])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("max_rows"));
}
