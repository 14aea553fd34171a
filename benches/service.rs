//! Serving many small requests against one reference set, side by side in
//! one process: resident N = 10⁵ keys, d = 8, q = 1, gaussian; 16 client
//! threads each sending requests of 16 queries, one after the other.
//!
//! Per backend: (a) a fresh `Engine::local_mean` per request, keys passed
//! each time; (b) a `KeySet` without batching; (c) a `KeySet` with
//! batching. Then a bounded load test of `locus serve` on loopback (JSON
//! requests to `POST /v1/sets/bench/local-mean`).
//!
//! ```text
//! cargo bench --bench service
//! ```
//!
//! Environment: `LOCUS_SERVICE_REQUESTS` (per thread, default 1000; a
//! software GPU adapter runs 1/50 of it: it is a CPU, its figures say
//! nothing about GPU speed), `LOCUS_SERVICE_HTTP_REQUESTS` (per thread,
//! default 200), `LOCUS_BENCH_BACKENDS` (any of `cpu,gpu,http`).

#[path = "../tests/support/http.rs"]
mod http;

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use locus::{Batching, Device, Engine, EngineOptions, Kernel, KeySet, KeySetOptions};
use ndarray::{Array1, Array2};

const N: usize = 100_000;
const D: usize = 8;
const THREADS: usize = 16;
const ROWS: usize = 16;
const BANDWIDTH: f32 = 0.3;

#[path = "support/data.rs"]
mod support_data;
use support_data::{data, env};

fn wants(what: &str) -> bool {
    std::env::var("LOCUS_BENCH_BACKENDS").map_or(true, |b| b.contains(what))
}

/// Requests per second and latency percentiles of one run (or of
/// several rounds together).
struct Figures {
    requests: usize,
    per_sec: f64,
    p50: Duration,
    p99: Duration,
    wall: Duration,
    latencies: Vec<Duration>,
    /// CPU seconds used by the whole process during the run.
    cpu: Option<f64>,
}

impl Figures {
    fn new(mut latencies: Vec<Duration>, wall: Duration, cpu: Option<f64>) -> Figures {
        latencies.sort();
        let pct = |p: f64| latencies[((latencies.len() - 1) as f64 * p).round() as usize];
        Figures {
            requests: latencies.len(),
            per_sec: latencies.len() as f64 / wall.as_secs_f64(),
            p50: pct(0.50),
            p99: pct(0.99),
            wall,
            latencies,
            cpu,
        }
    }

    /// All rounds together: requests over the summed wall time.
    fn sum(rounds: Vec<Figures>) -> Figures {
        let wall = rounds.iter().map(|f| f.wall).sum();
        let cpu = rounds.iter().map(|f| f.cpu).sum();
        Figures::new(
            rounds.into_iter().flat_map(|f| f.latencies).collect(),
            wall,
            cpu,
        )
    }
}

/// Rounds in which the modes of a backend alternate.
const ROUNDS: usize = 5;

/// One request: `call(client thread, queries)`.
type Call<'a> = dyn Fn(usize, &Array2<f32>) + Sync + 'a;

/// `THREADS` callers, each sending `per_thread` requests of `ROWS` queries
/// (from its own pool of query matrices) through `call(thread, queries)`.
fn load(per_thread: usize, call: &Call<'_>) -> Figures {
    let pools: Vec<Vec<Array2<f32>>> = (0..THREADS)
        .map(|t| {
            (0..8)
                .map(|i| data(ROWS, D, 1000 + (t * 8 + i) as u64))
                .collect()
        })
        .collect();
    let barrier = Barrier::new(THREADS + 1);
    let mut cpu0 = None;
    let mut lat: Vec<Duration> = Vec::with_capacity(THREADS * per_thread);
    let t0 = std::thread::scope(|s| {
        let handles: Vec<_> = pools
            .iter()
            .enumerate()
            .map(|(thread, pool)| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    (0..per_thread)
                        .map(|r| {
                            let t = Instant::now();
                            call(thread, &pool[r % pool.len()]);
                            t.elapsed()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        barrier.wait();
        let t0 = Instant::now();
        cpu0 = http::cpu_seconds(None);
        for h in handles {
            lat.extend(h.join().expect("client thread"));
        }
        t0
    });
    let wall = t0.elapsed();
    let cpu = http::cpu_seconds(None).zip(cpu0).map(|(b, a)| b - a);
    Figures::new(lat, wall, cpu)
}

fn row(backend: &str, mode: &str, f: &Figures, base: Option<f64>, note: &str) {
    let ratio = base.map_or("".to_string(), |b| format!("{:.2}×", f.per_sec / b));
    let cpu = f.cpu.map_or("".to_string(), |c| {
        format!("{:.2}", c * 1e3 / f.requests as f64)
    });
    println!(
        "| {backend} | {mode} | {} | {:.0} | {:.2} | {:.2} | {ratio} | {cpu} | {note} |",
        f.requests,
        f.per_sec,
        f.p50.as_secs_f64() * 1e3,
        f.p99.as_secs_f64() * 1e3,
    );
}

/// Runs (a), (b) and (c) in alternating rounds, so that a change in the
/// machine's load (it may be shared) touches all three alike, and prints
/// their totals.
fn bench_backend(
    name: &str,
    engine: &Engine,
    per_thread: usize,
    keys: &Array2<f32>,
    values: &Array2<f32>,
) {
    let kernel = Kernel::gaussian(BANDWIDTH).expect("bandwidth");
    let prepared = |batching| -> KeySet {
        engine
            .prepare(keys.view())
            .values(values.view())
            .options(KeySetOptions {
                batching,
                ..KeySetOptions::default()
            })
            .build()
            .expect("key set")
    };
    let (plain, batched) = (prepared(Batching::off()), prepared(Batching::default()));
    let modes: [(&str, &Call<'_>); 3] = [
        ("(a) Engine::local_mean, keys passed", &|_, q| {
            black_box(
                engine
                    .local_mean(&kernel, q.view(), keys.view(), values.view())
                    .expect("local mean"),
            );
        }),
        ("(b) KeySet, no batching", &|_, q| {
            black_box(plain.local_mean(&kernel, q.view()).expect("local mean"));
        }),
        ("(c) KeySet, batching (≤ 1 ms)", &|_, q| {
            black_box(batched.local_mean(&kernel, q.view()).expect("local mean"));
        }),
    ];
    let rounds = ROUNDS.min(per_thread);
    let mut totals: Vec<Vec<Figures>> = (0..3).map(|_| Vec::new()).collect();
    for r in 0..rounds {
        let n = per_thread / rounds + usize::from(r < per_thread % rounds);
        for (i, (_, call)) in modes.iter().enumerate() {
            totals[i].push(load(n, *call));
        }
    }
    let figures: Vec<Figures> = totals.into_iter().map(Figures::sum).collect();
    for (i, (mode, _)) in modes.iter().enumerate() {
        let note = if i == 2 {
            let st = batched.stats();
            format!(
                "{} batches, {:.1} requests each, largest {}",
                st.batches,
                st.batched_requests as f64 / st.batches.max(1) as f64,
                st.largest_batch
            )
        } else {
            String::new()
        };
        let base = (i > 0).then_some(figures[0].per_sec);
        row(name, mode, &figures[i], base, &note);
    }
}

fn bench_http(per_thread: usize, keys: &Array2<f32>, values: &Array2<f32>) {
    if option_env!("CARGO_BIN_EXE_locus").is_none() {
        println!("\nHTTP load test skipped: the locus binary is not built (feature `serve`)");
        return;
    }
    let dir = http::temp_dir("bench");
    let (k, v) = (dir.join("keys.npy"), dir.join("values.npy"));
    ndarray_npy::write_npy(&k, keys).expect("write keys");
    ndarray_npy::write_npy(&v, values).expect("write values");
    let (k, v) = (
        k.to_string_lossy().into_owned(),
        v.to_string_lossy().into_owned(),
    );
    let h = BANDWIDTH.to_string();
    let modes = [
        ("no batching", Some("--no-batching")),
        ("batching (≤ 1 ms)", None),
    ];
    let services: Vec<http::Service> = modes
        .iter()
        .map(|(_, extra)| {
            let mut args = vec![
                "--set",
                "bench",
                "--keys",
                &k,
                "--values",
                &v,
                "--bandwidth",
                &h,
                "--quiet",
            ];
            args.extend(extra);
            http::Service::start(&args, Duration::from_secs(120))
        })
        .collect();
    // One keep-alive connection per client thread and service.
    let clients: Vec<Vec<std::sync::Mutex<http::Client>>> = services
        .iter()
        .map(|svc| {
            (0..THREADS)
                .map(|_| std::sync::Mutex::new(http::Client::connect(svc.addr).expect("connect")))
                .collect()
        })
        .collect();
    let rounds = ROUNDS.min(per_thread);
    let mut totals: Vec<Vec<Figures>> = modes.iter().map(|_| Vec::new()).collect();
    for r in 0..rounds {
        let n = per_thread / rounds + usize::from(r < per_thread % rounds);
        for (i, conns) in clients.iter().enumerate() {
            totals[i].push(load(n, &|thread, q| {
                let rows: Vec<Vec<f32>> = q.rows().into_iter().map(|r| r.to_vec()).collect();
                let body = format!(
                    r#"{{"queries": {}}}"#,
                    serde_json::to_string(&rows).expect("json")
                );
                let mut c = conns[thread].lock().expect("client");
                let (status, b) = c
                    .request("POST", "/v1/sets/bench/local-mean", &body)
                    .expect("request");
                assert_eq!(status, 200, "{b}");
            }));
        }
    }
    for ((mode, _), (figs, mut svc)) in modes.iter().zip(totals.into_iter().zip(services)) {
        let mut c = http::Client::connect(svc.addr).expect("connect");
        let (_, sets) = c.request("GET", "/v1/sets", "").expect("sets");
        let (_, metrics) = c.request("GET", "/metrics", "").expect("metrics");
        let backend = serde_json::from_str::<serde_json::Value>(&sets)
            .ok()
            .and_then(|v| v["backend"].as_str().map(str::to_string))
            .unwrap_or_default();
        let stats: Vec<&str> = metrics
            .lines()
            .filter(|l| l.starts_with("locus_set_batch"))
            .collect();
        let stats = stats.join(", ");
        // The service is another process: this one's CPU time says nothing.
        let figs = Figures {
            cpu: None,
            ..Figures::sum(figs)
        };
        row("http", mode, &figs, None, &format!("{backend}; {stats}"));
        assert!(svc.running(), "the service stopped");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    // `cargo bench` passes `--bench`; this harness takes no arguments.
    let per_thread = env("LOCUS_SERVICE_REQUESTS", 1000);
    let keys = data(N, D, 1);
    let values: Array2<f32> = {
        let v: Array1<f32> = keys.rows().into_iter().map(|r| r.sum().sin()).collect();
        v.insert_axis(ndarray::Axis(1))
    };
    println!(
        "resident N = {N} keys, d = {D}, q = 1, gaussian h = {BANDWIDTH}; {THREADS} client threads × requests of {ROWS} queries\n"
    );
    println!(
        "| backend | mode | requests | requests/s | p50 ms | p99 ms | vs (a) | CPU ms/request | batches |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    if wants("cpu") {
        bench_backend("cpu", &Engine::cpu(), per_thread, &keys, &values);
    }
    if wants("gpu") {
        match Engine::with_options(EngineOptions::new(Device::Gpu)) {
            Ok(e) if e.backend().is_software() => {
                let n = (per_thread / 50).max(2);
                bench_backend("gpu-software", &e, n, &keys, &values);
            }
            Ok(e) => bench_backend("gpu", &e, per_thread, &keys, &values),
            Err(e) => println!("| gpu | not run: {e} | | | | | | | |"),
        }
    }
    if wants("http") {
        bench_http(env("LOCUS_SERVICE_HTTP_REQUESTS", 200), &keys, &values);
    }
}
