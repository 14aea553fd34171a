//! The protections of `locus serve` as a client sees them: started on
//! 127.0.0.1 on a free port with one set from `.npy` files, real HTTP
//! requests, valid and invalid, from several connections at once (limits,
//! timeouts, shedding, protocol errors, shutdown). tests/serve.rs tests
//! the API itself.

mod common;
#[path = "support/http.rs"]
mod http;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use http::{Client, Service, temp_folder};
use locus::{Engine, Kernel, Profile};
use ndarray::{Array1, Array2};
use ndarray_npy::write_npy;
use serde_json::Value;

struct Files {
    /// Removed when dropped.
    dir: tempfile::TempDir,
    keys: Array2<f32>,
    values: Array2<f32>,
    labels: Array1<i64>,
}

impl Files {
    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_string_lossy().into_owned()
    }
}

/// Keys (N × 3, float32), values (N × 2, float64: converted on load),
/// labels (N, int64).
fn files() -> Files {
    let dir = temp_folder("service");
    let mut rng = Rng::new(5);
    let keys = rng.matrix(500, 3, 0.0, 1.0);
    let values = rng.matrix(500, 2, -1.0, 1.0);
    let labels = Array1::from_shape_fn(500, |j| i64::from(keys[[j, 0]] > 0.5));
    write_npy(dir.path().join("keys.npy"), &keys).unwrap();
    write_npy(dir.path().join("values.npy"), &values.mapv(f64::from)).unwrap();
    write_npy(dir.path().join("labels.npy"), &labels).unwrap();
    Files {
        dir,
        keys,
        values,
        labels,
    }
}

fn start(f: &Files, labels: bool) -> Service {
    start_with(f, labels, &[])
}

fn start_with(f: &Files, labels: bool, extra: &[&str]) -> Service {
    let (k, v, l) = (
        f.path("keys.npy"),
        f.path("values.npy"),
        f.path("labels.npy"),
    );
    let mut args = vec![
        "--set",
        "default",
        "--keys",
        &k,
        "--values",
        &v,
        "--kernel",
        "gaussian",
        "--bandwidth",
        "0.3",
        "--backend",
        "cpu",
    ];
    if labels {
        args.extend(["--labels", &l]);
    }
    args.extend(extra);
    Service::start(&args, Duration::from_secs(60))
}

fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

fn matrix(v: &Value) -> Array2<f32> {
    let rows = v.as_array().expect("array of rows");
    let cols = rows[0].as_array().expect("row").len();
    Array2::from_shape_fn((rows.len(), cols), |(i, j)| {
        rows[i][j].as_f64().map_or(f32::NAN, |x| x as f32)
    })
}

fn body(q: &Array2<f32>, extra: &str) -> String {
    let rows: Vec<Vec<f32>> = q.rows().into_iter().map(|r| r.to_vec()).collect();
    format!(
        r#"{{"queries": {}{extra}}}"#,
        serde_json::to_string(&rows).unwrap()
    )
}

#[test]
fn the_service_answers_valid_requests_and_refuses_bad_ones() {
    let f = files();
    let mut svc = start(&f, true);
    let mut c = Client::connect(svc.addr).unwrap();
    let engine = Engine::cpu();
    let q = Rng::new(6).matrix(7, 3, 0.0, 1.0);

    // Local mean with the start-up kernel, then with another one.
    let (status, b) = c.request("POST", LM, &body(&q, "")).unwrap();
    assert_eq!(status, 200, "{b}");
    let k = Kernel::gaussian(0.3).unwrap();
    let want = engine
        .local_mean(&k, q.view(), f.keys.view(), f.values.view())
        .unwrap();
    assert_close(
        "local mean",
        &matrix(&json(&b)["values"]),
        &want.values.mapv(f64::from),
        1e-5,
        1e-6,
    );
    let extra = r#", "kernel": "epanechnikov", "bandwidth": 0.05"#;
    let (status, b) = c.request("POST", LM, &body(&q, extra)).unwrap();
    assert_eq!(status, 200, "{b}");
    let k = Kernel::new(Profile::Epanechnikov, 0.05).unwrap();
    let want = engine
        .local_mean(&k, q.view(), f.keys.view(), f.values.view())
        .unwrap();
    let v = json(&b);
    // Empty neighbourhoods come back as nulls, and are counted.
    assert_eq!(v["empty_rows"].as_u64(), Some(want.empty_rows as u64));
    assert!(want.empty_rows > 0);
    assert_close(
        "compact",
        &matrix(&v["values"]),
        &want.values.mapv(f64::from),
        1e-5,
        1e-6,
    );

    // A product kernel over coordinate blocks.
    let extra = r#", "blocks": [[1, "uniform", 0.4], [2, "gaussian", 0.2]]"#;
    let (status, b) = c.request("POST", LM, &body(&q, extra)).unwrap();
    assert_eq!(status, 200, "{b}");
    let k = Kernel::product([(1, Profile::Uniform, 0.4), (2, Profile::Gaussian, 0.2)]).unwrap();
    let want = engine
        .local_mean(&k, q.view(), f.keys.view(), f.values.view())
        .unwrap();
    assert_close(
        "product",
        &matrix(&json(&b)["values"]),
        &want.values.mapv(f64::from),
        1e-5,
        1e-6,
    );

    // Classification.
    let (status, b) = c.request("POST", CL, &body(&q, "")).unwrap();
    assert_eq!(status, 200, "{b}");
    let v = json(&b);
    let k = Kernel::gaussian(0.3).unwrap();
    let clf = engine
        .fit_classifier(&k, f.keys.view(), f.labels.view(), None)
        .unwrap();
    let labels: Vec<i64> = v["labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_i64().unwrap())
        .collect();
    assert_eq!(labels, clf.predict(q.view()).unwrap().labels.to_vec());
    let proba = matrix(&v["proba"]);
    assert_close(
        "proba",
        &proba,
        &clf.predict_proba(q.view()).unwrap().values.mapv(f64::from),
        1e-5,
        1e-6,
    );

    // Bad input: 400 with a message, and the service stays up.
    let bad = [
        (LM, "not json".to_string(), "invalid request"),
        (LM, r#"{"queries": []}"#.to_string(), "empty"),
        (
            LM,
            r#"{"queries": [[0.1, 0.2]]}"#.to_string(),
            "coordinates",
        ),
        (
            LM,
            r#"{"queries": [[0.1, 0.2, 0.3], [1]]}"#.to_string(),
            "query 1",
        ),
        (
            LM,
            r#"{"queries": [[0.1, 1e300, 0.3]]}"#.to_string(),
            "finite",
        ),
        (
            LM,
            r#"{"queries": [[0.1, "x", 0.3]]}"#.to_string(),
            "invalid request",
        ),
        (
            LM,
            r#"{"points": [[0.1, 0.2, 0.3]]}"#.to_string(),
            "invalid request",
        ),
        (CL, body(&q, r#", "kernel": "boxcar""#), "unknown kernel"),
        (CL, body(&q, r#", "bandwidth": -1"#), "bandwidth"),
        (CL, body(&q, r#", "bandwidth": 0"#), "bandwidth"),
        (
            LM,
            body(&q, r#", "blocks": [[1, "uniform", 0.4]]"#),
            "cover 1 coordinates",
        ),
        (
            LM,
            body(&q, r#", "blocks": [[3, "gaussian", 1]], "bandwidth": 1"#),
            "send no",
        ),
    ];
    for (path, b, needle) in bad {
        let (status, answer) = c.request("POST", path, &b).unwrap();
        assert_eq!(status, 400, "{path} {b}: {answer}");
        let msg = json(&answer)["error"].as_str().unwrap().to_string();
        assert!(msg.contains(needle), "{path} {b}: {msg:?} lacks {needle:?}");
    }
    // (A server may close a connection whose request body it did not read.)
    let (status, b) = Client::connect(svc.addr)
        .unwrap()
        .request("GET", LM, "")
        .unwrap();
    assert_eq!(status, 405);
    let msg = json(&b)["error"].as_str().unwrap().to_string();
    assert!(msg.contains("GET") && msg.contains(LM), "{msg}");
    let (status, b) = Client::connect(svc.addr)
        .unwrap()
        .request("POST", "/nowhere", "{}")
        .unwrap();
    assert_eq!(status, 404);
    let msg = json(&b)["error"].as_str().unwrap().to_string();
    assert!(
        msg.contains("/nowhere") && msg.contains("/v1/sets/{name}/{op}"),
        "{msg}"
    );

    // Many connections at once; batching coalesces their requests.
    let addr = svc.addr;
    let qs: Vec<Array2<f32>> = (0..8)
        .map(|t| Rng::new(100 + t).matrix(1 + t as usize, 3, 0.0, 1.0))
        .collect();
    std::thread::scope(|s| {
        for q in &qs {
            let (f, engine) = (&f, &engine);
            s.spawn(move || {
                let mut c = Client::connect(addr).unwrap();
                let k = Kernel::gaussian(0.3).unwrap();
                let want = engine
                    .local_mean(&k, q.view(), f.keys.view(), f.values.view())
                    .unwrap();
                for _ in 0..10 {
                    let (status, b) = c.request("POST", LM, &body(q, "")).unwrap();
                    assert_eq!(status, 200, "{b}");
                    assert_close(
                        "concurrent",
                        &matrix(&json(&b)["values"]),
                        &want.values.mapv(f64::from),
                        1e-5,
                        1e-6,
                    );
                }
            });
        }
    });
    let (status, b) = c.request("GET", "/metrics", "").unwrap();
    assert_eq!(status, 200);
    assert!(
        b.contains("locus_set_batched_requests_total{set=\"default\"} 84\n"),
        "{b}"
    );
    let (status, b) = c.request("GET", "/v1/sets/default", "").unwrap();
    assert_eq!(status, 200);
    assert_eq!(json(&b)["keys"].as_u64(), Some(500));
    assert!(svc.running(), "{}", svc.stderr.lock().unwrap());
}

#[test]
fn without_labels_classify_is_a_clear_422_and_bad_files_fail_at_start() {
    let f = files();
    let svc = start(&f, false);
    let mut c = Client::connect(svc.addr).unwrap();
    let (status, b) = c
        .request("POST", CL, r#"{"queries": [[0.1, 0.2, 0.3]]}"#)
        .unwrap();
    assert_eq!(status, 422, "{b}");
    assert!(b.contains("without labels"), "{b}");
    drop(svc);

    // Values with the wrong number of rows: the service refuses to start.
    write_npy(
        f.dir.path().join("short.npy"),
        &Array2::<f32>::zeros((3, 1)),
    )
    .unwrap();
    let out = std::process::Command::new(http::locus_binary())
        .args([
            "serve",
            "--set",
            "default",
            "--keys",
            &f.path("keys.npy"),
            "--values",
            &f.path("short.npy"),
        ])
        .args(["--port", "0", "--backend", "cpu"])
        .env("NODEVICE_SELECT", "1")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("500 keys but 3 value rows"), "{err}");
}

/// Reads from `s` until the server closes the connection (or `limit`
/// passes); returns what arrived and whether it was closed.
fn read_until_closed(s: &mut TcpStream, limit: Duration) -> (String, bool) {
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let t0 = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while t0.elapsed() < limit {
        match s.read(&mut buf) {
            Ok(0) => return (String::from_utf8_lossy(&got).into_owned(), true),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return (String::from_utf8_lossy(&got).into_owned(), true),
        }
    }
    (String::from_utf8_lossy(&got).into_owned(), false)
}

fn raw(addr: std::net::SocketAddr) -> TcpStream {
    TcpStream::connect_timeout(&addr, Duration::from_secs(10)).unwrap()
}

/// The body of an HTTP answer read whole (`Content-Length` framing).
fn answer_body(text: &str) -> &str {
    text.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

#[test]
fn too_many_rows_and_too_large_bodies_are_413_with_the_limit() {
    let f = files();
    let svc = start_with(&f, false, &["--max-rows", "5"]);
    let mut c = Client::connect(svc.addr).unwrap();
    let q = Rng::new(1).matrix(6, 3, 0.0, 1.0);
    let (status, b) = c.request("POST", LM, &body(&q, "")).unwrap();
    assert_eq!(status, 413, "{b}");
    let msg = json(&b)["error"].as_str().unwrap().to_string();
    assert!(msg.contains("too many rows (limit 5)"), "{msg}");
    let (status, b) = c
        .request(
            "POST",
            LM,
            &body(&q.slice(ndarray::s![..5, ..]).to_owned(), ""),
        )
        .unwrap();
    assert_eq!(status, 200, "{b}");
    // A body announced far beyond what 5 rows need is refused before it is read.
    let mut s = raw(svc.addr);
    s.write_all(
        b"POST /v1/sets/default/local-mean HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 500000000\r\n\r\n{\"queries\": [",
    )
    .unwrap();
    let (text, _) = read_until_closed(&mut s, Duration::from_secs(10));
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    let msg = json(answer_body(&text))["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(msg.contains("too many rows (limit 5)"), "{msg}");
}

#[test]
fn idle_and_half_sent_connections_are_closed_after_the_header_timeout() {
    let f = files();
    let svc = start_with(
        &f,
        false,
        &["--header-timeout-ms", "300", "--max-connections", "8"],
    );
    // Fill every connection slot: half-sent headers and silent sockets.
    let mut held: Vec<TcpStream> = (0..8)
        .map(|i| {
            let mut s = raw(svc.addr);
            if i % 2 == 0 {
                s.write_all(b"POST /v1/sets/default/local-mean HTTP/1.1\r\nHost: x\r\n")
                    .unwrap();
            }
            s
        })
        .collect();
    // A ninth client is served once the timeout has freed the slots.
    let t0 = Instant::now();
    let (status, b) = Client::connect(svc.addr)
        .unwrap()
        .request("GET", "/livez", "")
        .unwrap();
    assert_eq!(status, 200, "{b}");
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    for (i, s) in held.iter_mut().enumerate() {
        let (_, closed) = read_until_closed(s, Duration::from_secs(5));
        assert!(closed, "connection {i} still open after the header timeout");
    }
}

/// Keys (`n × d`, float32) and values (`n × 2`) large enough that a
/// 3000-query local mean computes for seconds on two cores: `keys.npy` and
/// `values.npy` in the returned folder.
fn large_files(n: usize, d: usize) -> tempfile::TempDir {
    let dir = temp_folder("service-large");
    let mut rng = Rng::new(11);
    write_npy(dir.path().join("keys.npy"), &rng.matrix(n, d, 0.0, 1.0)).unwrap();
    write_npy(dir.path().join("values.npy"), &rng.matrix(n, 2, -1.0, 1.0)).unwrap();
    dir
}

fn start_large(dir: &tempfile::TempDir, extra: &[&str]) -> Service {
    let (k, v) = (
        dir.path().join("keys.npy").to_string_lossy().into_owned(),
        dir.path().join("values.npy").to_string_lossy().into_owned(),
    );
    let mut args = vec![
        "--set",
        "default",
        "--keys",
        &k,
        "--values",
        &v,
        "--bandwidth",
        "2",
        "--backend",
        "cpu",
    ];
    args.extend(extra);
    Service::start(&args, Duration::from_secs(60))
}

/// A request body of `rows` query points of `d` coordinates, written short.
fn large_body(rows: usize, d: usize) -> String {
    let q = Rng::new(12).matrix(rows, d, 0.0, 1.0);
    let rows: Vec<String> = q
        .rows()
        .into_iter()
        .map(|r| {
            let v: Vec<String> = r.iter().map(|x| format!("{x:.3}")).collect();
            format!("[{}]", v.join(","))
        })
        .collect();
    format!(r#"{{"queries": [{}]}}"#, rows.join(","))
}

/// The local-mean and classify routes of the service's one set.
const LM: &str = "/v1/sets/default/local-mean";
const CL: &str = "/v1/sets/default/classify";

/// Sends one request on a fresh connection; the status and the body.
fn send(addr: std::net::SocketAddr, body: &str) -> (u16, String) {
    Client::connect(addr)
        .unwrap()
        .request("POST", LM, body)
        .unwrap()
}

#[test]
fn requests_beyond_the_in_flight_limit_are_shed() {
    let dir = large_files(200_000, 32);
    let svc = start_large(
        &dir,
        &["--max-in-flight", "1", "--request-timeout-ms", "4000"],
    );
    let addr = svc.addr;
    let big = large_body(3000, 32);
    let small = large_body(1, 32);
    // A request computing for seconds holds the only permit.
    let (tx, rx) = std::sync::mpsc::channel();
    let first = std::thread::spawn(move || {
        let r = send(addr, &big);
        tx.send(()).unwrap();
        r
    });
    std::thread::sleep(Duration::from_millis(1000));
    let mut c = Client::connect(addr).unwrap();
    let (status, b) = c.request("POST", LM, &small).unwrap();
    let first_done = rx.try_recv().is_ok();
    // (Unless the first request already finished, on a much faster machine.)
    if !first_done {
        assert_eq!(status, 503, "{b}");
        let msg = json(&b)["error"].as_str().unwrap().to_string();
        assert!(msg.contains("busy") && msg.contains("limit 1"), "{msg}");
        // /livez is exempt.
        let (status, _) = c.request("GET", "/livez", "").unwrap();
        assert_eq!(status, 200);
    }
    // The long request is answered 503 at its deadline (or done earlier).
    let (status, b) = first.join().unwrap();
    if status != 200 {
        assert_eq!(status, 503, "{b}");
        let msg = json(&b)["error"].as_str().unwrap().to_string();
        assert!(msg.contains("longer than 4000 ms"), "{msg}");
    }
}

#[test]
fn slow_uploads_hold_no_permit_and_are_answered_408() {
    let f = files();
    let svc = start_with(
        &f,
        false,
        &[
            "--max-in-flight",
            "2",
            "--body-timeout-ms",
            "1500",
            "--max-connections",
            "64",
        ],
    );
    // Sixteen uploads (eight times the permits) stall after one body byte.
    let t0 = Instant::now();
    let mut slow: Vec<TcpStream> = (0..16)
        .map(|_| {
            let mut s = raw(svc.addr);
            s.write_all(
                b"POST /v1/sets/default/local-mean HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
            )
            .unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    // A normal request is served at once: the stalled ones hold no permit.
    let q = Rng::new(2).matrix(2, 3, 0.0, 1.0);
    let t1 = Instant::now();
    let (status, b) = send(svc.addr, &body(&q, ""));
    assert_eq!(status, 200, "{b}");
    assert!(t1.elapsed() < Duration::from_secs(1), "{:?}", t1.elapsed());
    // Each stalled upload is answered 408 at its body deadline, and closed.
    for (i, s) in slow.iter_mut().enumerate() {
        let (text, closed) = read_until_closed(s, Duration::from_secs(10));
        assert!(text.starts_with("HTTP/1.1 408"), "upload {i}: {text}");
        let msg = json(answer_body(&text))["error"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(msg.contains("within 1500 ms"), "{msg}");
        assert!(closed, "upload {i} still open after its 408");
    }
    assert!(
        t0.elapsed() >= Duration::from_millis(1400),
        "{:?}",
        t0.elapsed()
    );
}

#[test]
fn protocol_errors_are_answered_with_a_json_body() {
    let f = files();
    let svc = start(&f, false);
    let many_headers: String = (0..101).map(|i| format!("X-Extra-{i}: y\r\n")).collect();
    let cases = [
        ("POST /v1/sets/default/local-mean HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n".to_string(), 400, "Content-Length"),
        ("POST /v1/sets/default/local-mean HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n".to_string(), 400, "Content-Length"),
        (
            "POST /v1/sets/default/local-mean HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\n{}".to_string(),
            400,
            "Content-Length",
        ),
        ("GARBAGE\r\n\r\n".to_string(), 400, "malformed"),
        (format!("GET /livez HTTP/1.1\r\nHost: x\r\n{many_headers}\r\n"), 431, "100 headers"),
    ];
    for (request, want, needle) in cases {
        let mut s = raw(svc.addr);
        s.write_all(request.as_bytes()).unwrap();
        let (text, closed) = read_until_closed(&mut s, Duration::from_secs(10));
        assert!(
            text.starts_with(&format!("HTTP/1.1 {want} ")),
            "{request:?}: {text}"
        );
        assert!(
            text.to_ascii_lowercase()
                .contains("content-type: application/json"),
            "{text}"
        );
        let msg = json(answer_body(&text))["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{request:?}: {text}"))
            .to_string();
        assert!(msg.contains(needle), "{request:?}: {msg}");
        assert!(closed, "{request:?}: the connection stays open");
    }
    // The service is unharmed.
    let q = Rng::new(3).matrix(2, 3, 0.0, 1.0);
    assert_eq!(send(svc.addr, &body(&q, "")).0, 200);
}

#[cfg(target_os = "linux")]
#[test]
fn timed_out_work_stops_and_then_releases_its_permit() {
    let dir = large_files(200_000, 32);
    let svc = start_large(
        &dir,
        &["--max-in-flight", "2", "--request-timeout-ms", "300"],
    );
    let addr = svc.addr;
    let big = large_body(3000, 32);
    // Twelve requests of seconds of work each, two at a time: each is
    // answered 503 (timed out; or busy while cancelled work winds down).
    let mut timed_out = 0;
    for _ in 0..6 {
        let answers: Vec<(u16, String)> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..2).map(|_| s.spawn(|| send(addr, &big))).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (status, b) in answers {
            assert_eq!(status, 503, "{b}");
            let msg = json(&b)["error"].as_str().unwrap().to_string();
            assert!(
                msg.contains("longer than 300 ms") || msg.contains("busy"),
                "{msg}"
            );
            timed_out += usize::from(msg.contains("longer than"));
        }
    }
    assert!(timed_out >= 2, "{timed_out} of 12 timed out");
    // Within two seconds of the last answer the work has stopped: the
    // process uses (almost) no CPU.
    std::thread::sleep(Duration::from_secs(2));
    let pid = svc.child.id();
    let before = http::cpu_seconds(Some(pid)).unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let used = http::cpu_seconds(Some(pid)).unwrap() - before;
    assert!(
        used < 0.15,
        "{used:.2} s of CPU in the second 2 s after the last answer"
    );
    // And the permits are free again.
    let (status, b) = send(addr, &large_body(1, 32));
    assert_eq!(status, 200, "{b}");
}

#[cfg(unix)]
#[test]
fn sigterm_finishes_the_request_in_flight_then_exits() {
    let f = files();
    let mut svc = start(&f, false);
    let q = Rng::new(3).matrix(3, 3, 0.0, 1.0);
    let full = body(&q, "");
    let (head, tail) = full.split_at(full.len() / 2);
    let mut s = raw(svc.addr);
    write!(
        s,
        "POST /v1/sets/default/local-mean HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{head}",
        full.len()
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let pid = svc.child.id().to_string();
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(kill.success());
    std::thread::sleep(Duration::from_millis(300));
    // No new connections are served once the signal arrived.
    assert!(
        Client::connect(svc.addr)
            .and_then(|mut c| c.request("GET", "/livez", ""))
            .is_err(),
        "a new connection was served after SIGTERM"
    );
    // The request in flight completes.
    s.write_all(tail.as_bytes()).unwrap();
    let (text, _) = read_until_closed(&mut s, Duration::from_secs(20));
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let k = Kernel::gaussian(0.3).unwrap();
    let want = Engine::cpu()
        .local_mean(&k, q.view(), f.keys.view(), f.values.view())
        .unwrap();
    assert_close(
        "in flight at shutdown",
        &matrix(&json(answer_body(&text))["values"]),
        &want.values.mapv(f64::from),
        1e-5,
        1e-6,
    );
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
    assert!(svc.stderr.lock().unwrap().contains("shutting down"));
}

/// Every JSON body the service parses (queries, MeanShift points, the
/// parameters, set uploads and each of their fields) nested 10⁵ deep is a
/// 400 (serde_json's recursion limit), never a stack overflow: the
/// service answers on.
#[test]
fn deeply_nested_json_is_a_400_not_a_stack_overflow() {
    let f = files();
    let mut svc = start(&f, true);
    let mut c = Client::connect(svc.addr).unwrap();
    let deep = "[".repeat(100_000);
    let deep_map = r#"{"a":"#.repeat(100_000);
    let cases: Vec<(&str, &str, String)> = vec![
        ("POST", "/v1/sets/default/local-mean", deep.clone()),
        ("POST", "/v1/sets/default/local-mean", deep_map.clone()),
        (
            "POST",
            "/v1/sets/default/local-mean",
            format!(r#"{{"queries": {deep}"#),
        ),
        (
            "POST",
            "/v1/sets/default/local-mean",
            format!(r#"{{"queries": [[0.1, 0.2, 0.3]], "blocks": {deep}"#),
        ),
        (
            "POST",
            "/v1/sets/default/knn",
            format!(r#"{{"queries": [[0.1, 0.2, 0.3]], "k": {deep_map}"#),
        ),
        ("POST", "/v1/mean-shift", deep.clone()),
        ("POST", "/v1/mean-shift", format!(r#"{{"points": {deep}"#)),
        ("PUT", "/v1/sets/nested", deep.clone()),
        ("PUT", "/v1/sets/nested", deep_map.clone()),
        ("PUT", "/v1/sets/nested", format!(r#"{{"keys": {deep}"#)),
        (
            "PUT",
            "/v1/sets/nested",
            format!(r#"{{"keys": [[0]], "values": {deep}"#),
        ),
        (
            "PUT",
            "/v1/sets/nested",
            format!(r#"{{"keys": [[0]], "values": [{deep_map}"#),
        ),
        (
            "PUT",
            "/v1/sets/nested",
            format!(r#"{{"keys": [[0]], "labels": {deep}"#),
        ),
        (
            "PUT",
            "/v1/sets/nested",
            format!(r#"{{"keys": [[0]], "weights": {deep}"#),
        ),
    ];
    for (method, path, body) in &cases {
        let (status, text) = c.request(method, path, body).unwrap();
        assert_eq!(status, 400, "{method} {path} {}…: {text}", &body[..40]);
        assert_eq!(json(&text)["kind"], "bad_request");
        assert!(svc.running(), "the service died on {method} {path}");
    }
    let (status, _) = c.request("GET", "/livez", "").unwrap();
    assert_eq!(status, 200);
    let (status, _) = c.request("GET", "/v1/sets/nested", "").unwrap();
    assert_eq!(status, 404, "no set was made");
}
