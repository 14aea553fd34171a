//! The server's CPU time per query row by body format: `locus serve` on
//! loopback (CPU backend, resident N = 10⁵ keys, d = 8, q = 1), local means
//! of requests of 4096 rows sent one after the other on one keep-alive
//! connection, as JSON (JSON answers), `.npy` (`.npy` answers) and Arrow
//! IPC (Arrow answers). The service's CPU time (user + system, from
//! `/proc/PID/stat`) is read before and after each run; the formats
//! alternate in rounds so that a change in the machine's load touches all
//! alike. Two kernels: a uniform one of a tiny bandwidth (few neighbours,
//! the keys' cell grid: the compute is small and the bodies' handling
//! shows) and the realistic gaussian (h = 0.3); and, to time the
//! request's handling alone, the same requests with a parameter local
//! means do not take (`k`): the whole body is read and checked, then
//! refused (400) without any compute.
//!
//! ```text
//! cargo bench --bench service_formats
//! ```
//!
//! Environment: `LOCUS_FORMAT_REQUESTS` (requests per format, kernel and
//! round, 50 times as many refused ones; default 20), `LOCUS_FORMAT_ROUNDS` (default 3; the best round
//! of each is reported).

#[path = "../tests/support/arrow.rs"]
mod arrow;
#[path = "../tests/support/http.rs"]
mod http;

use std::time::{Duration, Instant};

use ndarray::{Array1, Array2};

const N: usize = 100_000;
const D: usize = 8;
const ROWS: usize = 4096;

#[path = "support/data.rs"]
mod support_data;
use support_data::{data, env};

/// A request in one format: its path, headers and body.
struct Format {
    name: &'static str,
    path: String,
    headers: Vec<(&'static str, &'static str)>,
    body: Vec<u8>,
}

/// Local means of `q` with kernel `profile` of bandwidth `h`, in each
/// format; with `refused`, a parameter local means do not take (`k`), so
/// that the service reads the whole body and answers 400 without
/// computing.
fn formats(q: &Array2<f32>, profile: &str, h: &str, refused: bool) -> Vec<Format> {
    let rows: Vec<Vec<f32>> = q.rows().into_iter().map(|r| r.to_vec()).collect();
    let k = if refused { ", \"k\": 1" } else { "" };
    let json = format!(
        r#"{{"queries": {}, "kernel": "{profile}", "bandwidth": {h}{k}}}"#,
        serde_json::to_string(&rows).expect("json")
    );
    let mut npy = Vec::new();
    ndarray_npy::WriteNpyExt::write_npy(q, &mut npy).expect("npy");
    let path = "/v1/sets/bench/local-mean";
    let k = if refused { "&k=1" } else { "" };
    let with_query = format!("{path}?kernel={profile}&bandwidth={h}{k}");
    vec![
        Format {
            name: "JSON",
            path: path.to_string(),
            headers: vec![("Content-Type", "application/json")],
            body: json.into_bytes(),
        },
        Format {
            name: ".npy",
            path: with_query.clone(),
            headers: vec![
                ("Content-Type", "application/x-npy"),
                ("Accept", "application/x-npy"),
            ],
            body: npy,
        },
        Format {
            name: "Arrow",
            path: with_query,
            headers: vec![("Content-Type", arrow::ARROW), ("Accept", arrow::ARROW)],
            body: arrow::arrow_body(q, "queries", false),
        },
    ]
}

fn main() {
    if option_env!("CARGO_BIN_EXE_locus").is_none() {
        println!("skipped: the locus binary is not built (feature `serve`)");
        return;
    }
    let requests = env("LOCUS_FORMAT_REQUESTS", 20);
    let rounds = env("LOCUS_FORMAT_ROUNDS", 3).max(1);
    let keys = data(N, D, 1);
    let values: Array2<f32> = {
        let v: Array1<f32> = keys.rows().into_iter().map(|r| r.sum().sin()).collect();
        v.insert_axis(ndarray::Axis(1))
    };
    let dir = http::temp_dir("bench-formats");
    let (k, v) = (dir.join("keys.npy"), dir.join("values.npy"));
    ndarray_npy::write_npy(&k, &keys).expect("write keys");
    ndarray_npy::write_npy(&v, &values).expect("write values");
    let (k, v) = (
        k.to_string_lossy().into_owned(),
        v.to_string_lossy().into_owned(),
    );
    let svc = http::Service::start(
        &[
            "--set",
            "bench",
            "--keys",
            &k,
            "--values",
            &v,
            "--backend",
            "cpu",
            "--quiet",
            "--no-batching",
        ],
        Duration::from_secs(300),
    );
    let pid = svc.child.id();
    let mut c = http::Client::connect(svc.addr).expect("connect");
    let q = data(ROWS, D, 7);
    println!(
        "locus serve, CPU backend, N = {N} keys, d = {D}, q = 1; {requests} requests of {ROWS} rows per format, kernel and round, best of {rounds} rounds\n"
    );
    println!(
        "| kernel | format | body bytes | server CPU µs/row | wall ms/request | JSON / this |"
    );
    println!("|---|---|---|---|---|---|");
    for (what, profile, h, refused) in [
        ("request read, then refused (k=)", "uniform", "0.002", true),
        ("uniform h = 0.002", "uniform", "0.002", false),
        ("gaussian h = 0.3", "gaussian", "0.3", false),
    ] {
        let want = if refused { 400 } else { 200 };
        // CPU time is counted in 10 ms ticks: many more of the cheap ones.
        let requests = if refused { requests * 50 } else { requests };
        let formats = formats(&q, profile, h, refused);
        let mut best = vec![(f64::INFINITY, f64::INFINITY); formats.len()];
        for _ in 0..rounds {
            for (i, f) in formats.iter().enumerate() {
                let (path, body) = (&f.path, &f.body);
                // One request first: connection and caches warm.
                let r = c.send("POST", path, &f.headers, body).expect("request");
                assert_eq!(r.status, want, "{}: {}", f.name, r.text());
                let cpu0 = http::cpu_seconds(Some(pid)).expect("/proc");
                let t0 = Instant::now();
                for _ in 0..requests {
                    let r = c.send("POST", path, &f.headers, body).expect("request");
                    assert_eq!(r.status, want, "{}: {}", f.name, r.text());
                }
                let wall = t0.elapsed().as_secs_f64();
                let cpu = http::cpu_seconds(Some(pid)).expect("/proc") - cpu0;
                let per_row = cpu * 1e6 / (requests * ROWS) as f64;
                let per_req = wall * 1e3 / requests as f64;
                if per_row < best[i].0 {
                    best[i] = (per_row, per_req);
                }
            }
        }
        for (i, f) in formats.iter().enumerate() {
            println!(
                "| {what} | {} | {} | {:.3} | {:.2} | {:.2}× |",
                f.name,
                f.body.len(),
                best[i].0,
                best[i].1,
                best[0].0 / best[i].0
            );
        }
    }
    drop(svc);
    let _ = std::fs::remove_dir_all(&dir);
}
