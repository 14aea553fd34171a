//! `locus serve`'s API as a client sees it: the real binary on a free
//! loopback port; every op in JSON, `.npy` and Arrow against the library's
//! own results, typed errors for bad requests, the metrics parsed by a
//! strict reader of the Prometheus text format, the TOML configuration.
//! tests/serve_sets.rs tests set management, API keys, back-pressure and
//! shutdown; tests/service_http.rs the HTTP protections (timeouts,
//! shedding, protocol errors).

#[path = "support/arrow.rs"]
mod arrow;
mod common;
#[path = "support/http.rs"]
mod http;
#[path = "support/prometheus.rs"]
mod prometheus;
#[path = "support/serve.rs"]
mod serve;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use http::{Client, Service};
use locus::{Engine, Kernel, KeySet, MeanShiftParams};
use ndarray::Array2;
use serve::*;

#[test]
fn every_op_answers_as_the_library_in_json_npy_and_arrow() {
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

/// `GET /openapi.json` (no key needed) is docs/openapi.json, byte for byte
/// as `--print-openapi` prints it; every route the router serves is in it
/// (an undeclared one would be a 404 here); every answer of these tests
/// is checked against it by the client (support/openapi.rs).
#[test]
fn the_openapi_description_is_served_and_is_the_documented_copy() {
    let d = data();
    let keys = d.dir.path().join("keys.txt");
    std::fs::write(&keys, format!("{READ_KEY} read\n")).unwrap();
    let kp = keys.to_string_lossy().into_owned();
    let svc = start(&d, &["--api-keys", &kp]);
    let mut c = Client::connect(svc.addr).unwrap();
    let r = c.send("GET", "/openapi.json", &[], b"").unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    let served: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let copy = http::openapi::docs_copy();
    assert_eq!(
        &served,
        http::openapi::document(),
        "docs/openapi.json is stale: locus serve --print-openapi > docs/openapi.json"
    );
    let printed = std::process::Command::new(http::locus_binary())
        .args(["serve", "--print-openapi"])
        .output()
        .unwrap();
    assert!(printed.status.success());
    assert_eq!(
        String::from_utf8_lossy(&printed.stdout).trim_end(),
        copy.trim_end()
    );

    // Every declared route answers (with the read key), as declared.
    let auth = format!("Bearer {READ_KEY}");
    let headers = [("Authorization", auth.as_str())];
    let paths = served["paths"].as_object().unwrap();
    assert_eq!(paths.len(), 13);
    for (template, item) in paths {
        let path = template.replace("{name}", "s");
        for method in item.as_object().unwrap().keys() {
            let method = method.to_ascii_uppercase();
            if method == "DELETE" || method == "PUT" {
                continue;
            }
            let body = if method == "POST" {
                let field = if path.ends_with("mean-shift") {
                    "points"
                } else {
                    "queries"
                };
                format!(r#"{{"{field}": [[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]], "k": 1}}"#)
            } else {
                String::new()
            };
            let r = c.send(&method, &path, &headers, body.as_bytes()).unwrap();
            // 400: a `k` sent to an op that takes none; never a 404.
            assert!(
                matches!(r.status, 200 | 400),
                "{method} {path}: {} {}",
                r.status,
                r.text()
            );
        }
    }
    // The client's check refuses what the description does not declare.
    let undeclared = r#"{"values": [[1.0]], "empty_rows": 0, "extra": 1}"#;
    let json_type = [("content-type".to_string(), "application/json".to_string())];
    let e = http::openapi::check(
        "POST",
        "/v1/sets/s/local-mean",
        200,
        &json_type,
        undeclared.as_bytes(),
    )
    .unwrap_err();
    assert!(e.contains("extra"), "{e}");
    assert!(http::openapi::check("GET", "/livez", 418, &json_type, b"{}").is_err());
    let busy = r#"{"error": "busy", "kind": "queue_full"}"#;
    let e = http::openapi::check("POST", "/v1/sets/s/knn", 429, &json_type, busy.as_bytes())
        .unwrap_err();
    assert!(e.contains("retry-after"), "{e}");
}
