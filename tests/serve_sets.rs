//! `locus serve`'s sets and operations as a client sees them: sets
//! uploaded (JSON and `.npy` parts), replaced under load without losing a
//! request, listed and dropped; API keys (401/403); a full queue (429);
//! `/readyz` and draining on SIGTERM.

#[path = "support/arrow.rs"]
mod arrow;
mod common;
#[path = "support/http.rs"]
mod http;
#[path = "support/serve.rs"]
mod serve;

use std::time::{Duration, Instant};

use common::*;
use http::{Client, Service, temp_folder};
use ndarray::{Array1, Array2};
use ndarray_npy::{WriteNpyExt, write_npy};
use serde_json::Value;
use serve::*;

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
    // Requests answered so far: each replacement waits for one more, so
    // the replacements fall among the queries (on a busy host the ten of
    // them could otherwise end before the first query is answered).
    let done = std::sync::atomic::AtomicUsize::new(0);
    let one_more = |seen: usize| {
        let t = Instant::now();
        while done.load(std::sync::atomic::Ordering::Relaxed) <= seen
            && t.elapsed() < Duration::from_secs(10)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        done.load(std::sync::atomic::Ordering::Relaxed)
    };
    let answered = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|t| {
                let (stop, done) = (&stop, &done);
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
                        done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    n
                })
            })
            .collect();
        let mut seen = one_more(0);
        for i in 0..10 {
            let (status, b) = admin
                .request(
                    "PUT",
                    "/v1/sets/r",
                    &upload(if i % 2 == 0 { 2.0 } else { 1.0 }),
                )
                .unwrap();
            assert_eq!(status, 200, "{b}");
            seen = one_more(seen);
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
fn api_keys_from_the_environment_join_those_of_the_file() {
    let d = data();
    let keys = d.dir.path().join("keys.txt");
    std::fs::write(&keys, format!("{ADMIN_KEY} admin\n")).unwrap();
    let kp = keys.to_string_lossy().into_owned();
    let k = d.path("k.npy");
    let env_key = "env-reader-0123456789";
    let env = format!("{env_key} read, other-reader-0123456789 read");
    let svc = http::Service::start_with_env(
        &[
            "--set",
            "s",
            "--keys",
            &k,
            "--backend",
            "cpu",
            "--api-keys",
            &kp,
        ],
        &[("LOCUS_API_KEYS", &env)],
        Duration::from_secs(60),
    );
    let mut c = Client::connect(svc.addr).unwrap();
    let q = r#"{"queries": [[0.1, 0.2, 0.3]]}"#;
    let put = r#"{"keys": [[0], [1]]}"#;
    let ask = |c: &mut Client, method: &str, path: &str, key: &str, body: &str| {
        let auth = format!("Bearer {key}");
        let headers = [
            ("Content-Type", "application/json"),
            ("Authorization", auth.as_str()),
        ];
        c.send(method, path, &headers, body.as_bytes())
            .unwrap()
            .status
    };
    assert_eq!(ask(&mut c, "POST", "/v1/sets/s/density", env_key, q), 200);
    assert_eq!(ask(&mut c, "PUT", "/v1/sets/x", env_key, put), 403);
    assert_eq!(ask(&mut c, "PUT", "/v1/sets/x", ADMIN_KEY, put), 201);
    assert_eq!(
        ask(
            &mut c,
            "POST",
            "/v1/sets/s/density",
            "nope-0123456789abc",
            q
        ),
        401
    );
    drop(svc);

    // A bad entry, an empty value, or a key in both places stop the start.
    let bad = [
        ("short read".to_string(), Some(&kp), "LOCUS_API_KEYS"),
        (" , ".to_string(), None, "LOCUS_API_KEYS"),
        (format!("{ADMIN_KEY} read"), Some(&kp), "both"),
    ];
    for (value, file, says) in bad {
        let mut cmd = std::process::Command::new(http::locus_binary());
        cmd.args(["serve", "--port", "0", "--backend", "cpu"])
            .env("LOCUS_API_KEYS", &value);
        if let Some(f) = file {
            cmd.args(["--api-keys", f]);
        }
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{value:?}: {err}");
        assert!(err.contains(says), "{value:?}: {err}");
    }
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
