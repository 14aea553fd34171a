//! `locus serve` over HTTPS as a client sees it: a self-signed certificate
//! made here, the service started with `--tls-cert`/`--tls-key` and its
//! keys from `LOCUS_API_KEYS`, an authenticated query through a rustls
//! client; a connection that never completes its handshake closed after
//! the header timeout; SIGTERM still drains and exits 0; bad certificate
//! or key files refused at start with a clear message and exit 2.

#[path = "support/arrow.rs"]
mod arrow;
mod common;
#[path = "support/http.rs"]
mod http;
#[path = "support/serve.rs"]
mod serve;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::Service;
use serde_json::Value;
use serve::*;
use std::io::{Read, Write};
use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

/// A self-signed certificate for `localhost` and 127.0.0.1: its PEM
/// files in `dir`, and a client configuration that trusts it.
fn certificate(dir: &Path) -> (String, String, Arc<ClientConfig>) {
    let made =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
    let mut roots = RootCertStore::empty();
    roots.add(made.cert.der().clone()).unwrap();
    let config = ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let path = |p: &Path| p.to_string_lossy().into_owned();
    (path(&cert), path(&key), Arc::new(config))
}

/// One request (`METHOD PATH`, with `key` as its bearer token) over a
/// fresh TLS connection (`Connection: close`): the status and the body.
fn https(
    config: &Arc<ClientConfig>,
    addr: SocketAddr,
    request: &str,
    key: Option<&str>,
    body: &str,
) -> std::io::Result<(u16, String)> {
    let tcp = std::net::TcpStream::connect(addr)?;
    tcp.set_read_timeout(Some(Duration::from_secs(30)))?;
    let name = ServerName::try_from("localhost").unwrap();
    let conn = ClientConnection::new(Arc::clone(config), name).map_err(std::io::Error::other)?;
    let mut tls = StreamOwned::new(conn, tcp);
    let auth = key.map_or(String::new(), |k| format!("Authorization: Bearer {k}\r\n"));
    let head = format!(
        "{request} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{auth}\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    tls.write_all(head.as_bytes())?;
    tls.flush()?;
    let mut answer = Vec::new();
    tls.read_to_end(&mut answer)?;
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |b| b.1).to_string();
    Ok((status, body))
}

#[test]
fn an_https_service_answers_an_authenticated_query_and_drains() {
    let d = data();
    let (cert, key, client) = certificate(d.dir.path());
    let keys = format!("{READ_KEY} read,{ADMIN_KEY} admin");
    let k = d.path("k.npy");
    let mut svc = Service::launch(
        &[
            "--set",
            "s",
            "--keys",
            &k,
            "--backend",
            "cpu",
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--header-timeout-ms",
            "700",
        ],
        &[("LOCUS_API_KEYS", &keys)],
        Duration::from_secs(60),
    );
    assert!(svc.https, "the listening line names https");
    let addr = svc.addr;
    let t0 = Instant::now();
    while !https(&client, addr, "GET /readyz", None, "").is_ok_and(|(s, _)| s == 200) {
        assert!(t0.elapsed() < Duration::from_secs(60), "never ready");
        std::thread::sleep(Duration::from_millis(50));
    }

    let query = r#"{"queries": [[0.1, 0.2, 0.3], [0.9, 0.8, 0.7]], "k": 3}"#;
    let knn = "POST /v1/sets/s/knn";
    let (status, body) = https(&client, addr, knn, None, query).unwrap();
    assert_eq!(status, 401, "{body}");
    let (status, body) = https(&client, addr, knn, Some(READ_KEY), query).unwrap();
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let engine = locus::Engine::cpu();
    let set = engine.prepare(d.keys.view()).build().unwrap();
    let q = ndarray::arr2(&[[0.1f32, 0.2, 0.3], [0.9, 0.8, 0.7]]);
    let want = set.knn(q.view(), 3).unwrap();
    for (i, row) in v["indices"].as_array().unwrap().iter().enumerate() {
        for (j, idx) in row.as_array().unwrap().iter().enumerate() {
            assert_eq!(
                idx.as_i64(),
                Some(want.indices[[i, j]]),
                "row {i} column {j}"
            );
        }
    }

    // Plain HTTP to the HTTPS port is no answer.
    let plain = http::Client::connect(addr)
        .and_then(|mut c| c.request("GET", "/livez", ""))
        .map(|(s, _)| s);
    assert!(!matches!(plain, Ok(200)), "{plain:?}");

    // A connection that never sends its handshake is closed after the
    // header timeout.
    let t0 = Instant::now();
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let closed = tcp.read(&mut [0u8; 16]);
    assert!(
        matches!(&closed, Ok(0))
            || closed
                .as_ref()
                .is_err_and(|e| e.kind() != std::io::ErrorKind::WouldBlock),
        "{closed:?}"
    );
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(500) && waited < Duration::from_secs(5),
        "closed after {waited:?}"
    );

    // SIGTERM: drains, exits 0.
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &svc.child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = svc.child.try_wait().unwrap() {
            break s;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "still running");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
}

#[test]
fn bad_certificate_or_key_files_stop_the_start_with_exit_2() {
    let d = data();
    let (cert, key, _) = certificate(d.dir.path());
    let other = d.dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let (_, other_key, _) = certificate(&other);
    let garbage = d.path("garbage.pem");
    std::fs::write(&garbage, "not a PEM file\n").unwrap();
    let missing = d.path("missing.pem");
    let cases: [(&str, &str, &str); 5] = [
        (&missing, &key, "--tls-cert"),
        (&cert, &missing, "--tls-key"),
        (&garbage, &key, "--tls-cert"),
        (&cert, &garbage, "--tls-key"),
        (&cert, &other_key, "--tls-cert"),
    ];
    for (c, k, names) in cases {
        let out = std::process::Command::new(http::locus_binary())
            .args(["serve", "--port", "0", "--backend", "cpu"])
            .args(["--tls-cert", c, "--tls-key", k])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{c} {k}: {err}");
        assert!(err.contains(names), "{c} {k}: {err}");
        assert!(out.stdout.is_empty(), "never listened");
    }
}
