//! A small HTTP JSON service over a key set: local means and local-mode
//! classification at the posted query points.
//!
//! ```text
//! cargo run --release --example service -- --keys K.npy --values V.npy \
//!     [--labels L.npy] --port P [--kernel gaussian --bandwidth 0.5]
//! ```
//!
//! * `POST /local-mean` `{"queries": [[..d..], ...], "kernel": "gaussian", "bandwidth": 0.5}`
//!   (kernel and bandwidth optional, defaulting to the start-up ones; or
//!   `"blocks": [[2, "uniform", 8.0], [3, "gaussian", 6.0]]`, a product
//!   kernel over coordinate blocks, instead of both) →
//!   `{"values": [[..q..], ...], "empty_rows": 0}`; a query with no key in
//!   reach of a compact kernel gets `null`s.
//! * `POST /classify` (same request; needs `--labels`) →
//!   `{"labels": [...], "proba": [[..C..], ...], "empty_rows": 0}`.
//! * `GET /health` → backend, sizes and defaults; `GET /stats` → how
//!   requests were batched.
//!
//! Bad input (malformed JSON, ragged or wrong-width rows, non-finite
//! numbers, unknown kernels, bad bandwidths) is answered with 400 and a
//! message; more rows than `--max-rows` (or a body too large to hold them)
//! with 413 "too many rows (limit N)"; a request that does not fit under
//! the memory limit with 503. Every error has a JSON body
//! `{"error": "..."}`: 404 and 405 included, and the protocol errors hyper
//! answers itself (a garbage request line, a malformed or conflicting
//! `Content-Length`: 400; more than 100 headers: 431).
//!
//! Protection: a client must send a request's headers within
//! `--header-timeout-ms` (idle and half-sent connections are closed) and
//! its body within `--body-timeout-ms` of them (default 10 s; a slow upload
//! is answered 408 and closed); at most `--max-connections` are served at
//! once (more wait in the listen queue). A request takes one of the
//! `--max-in-flight` compute permits only once its body is read and
//! checked (more are shed at once with 503 and `Retry-After`; `/health` is
//! exempt), so slow uploads hold none. A request that takes longer than
//! `--request-timeout-ms` (from its headers) is answered 503 and its work
//! is cancelled: it stops at its next checkpoint, and its permit is
//! released only then, so the permits bound the compute running, not only
//! the requests waiting for an answer. SIGTERM or SIGINT stops accepting,
//! lets in-flight requests finish (up to `--shutdown-grace-ms`) and exits 0.
//!
//! Requests from many connections run concurrently on blocking threads
//! and are coalesced by the key set's micro-batching. The port `0` takes a
//! free one; the address is printed on stdout as `listening on http://ADDR`
//! once the service accepts connections.

mod api;
mod http;
mod protocol;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::{get, post};
use clap::{Parser, ValueEnum};
use locus::{Batching, Device, Engine, EngineOptions, Error, Kernel, KeySetOptions};
use ndarray::{Array1, Array2, Ix1};
use tokio::sync::Semaphore;

use api::App;
use http::Limits;

#[derive(Parser)]
#[command(about = "HTTP JSON service: local means and classes over a resident key set")]
struct Args {
    /// Keys, `N × d` (`.npy`, float32 or float64).
    #[arg(long)]
    keys: PathBuf,
    /// Values, `N × q` or `N` (`.npy`, float32 or float64).
    #[arg(long)]
    values: PathBuf,
    /// Class labels, `N` non-negative integers (`.npy`, any integer or float type).
    #[arg(long)]
    labels: Option<PathBuf>,
    /// TCP port (0: any free port).
    #[arg(long)]
    port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// Default kernel profile.
    #[arg(long, default_value = "gaussian")]
    kernel: String,
    /// Default bandwidth.
    #[arg(long, default_value_t = 1.0)]
    bandwidth: f32,
    /// Backend: a hardware GPU when there is one (auto), or forced.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    backend: BackendArg,
    /// Longest a batch waits for more requests, in microseconds.
    #[arg(long, default_value_t = 1000)]
    max_wait_us: u64,
    /// Run every request alone.
    #[arg(long)]
    no_batching: bool,
    /// Most query rows per request.
    #[arg(long, default_value_t = 65536)]
    max_rows: usize,
    /// Memory limit of the engine, in MiB.
    #[arg(long)]
    memory_limit_mib: Option<u64>,
    /// Longest a client may take to send a request's headers (and longest
    /// an idle connection stays open), in milliseconds.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    header_timeout_ms: u64,
    /// Longest a client may take to send a request's body after its
    /// headers, in milliseconds; a slower upload is answered 408.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    body_timeout_ms: u64,
    /// Longest a request may take from its headers to its answer, in
    /// milliseconds; its work is cancelled then.
    #[arg(long, default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(1..))]
    request_timeout_ms: u64,
    /// Most connections served at once.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    max_connections: u64,
    /// Most requests computing at once; more are refused with 503.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    max_in_flight: u64,
    /// Longest a shutdown waits for in-flight requests, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    shutdown_grace_ms: u64,
}

#[derive(Clone, Copy, ValueEnum)]
enum BackendArg {
    Auto,
    Cpu,
    Gpu,
}

/// The command-line tool's `.npy` reader: the header is checked against
/// the file before anything is allocated, so a forged shape is an error.
#[path = "../../src/bin/locus/npy.rs"]
mod npy;

/// Opens an `.npy` file and reads its header.
fn open_npy(path: &Path) -> Result<(std::io::BufReader<std::fs::File>, npy::Header), String> {
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let file = std::fs::File::open(path).map_err(|e| err(&e))?;
    let len = file.metadata().map_err(|e| err(&e))?.len();
    let mut r = std::io::BufReader::new(file);
    let h = npy::read_header(&mut r, len).map_err(|e| err(&e))?;
    Ok((r, h))
}

/// A matrix from a 2-D float array, or a column from a 1-D one.
fn matrix(path: &Path) -> Result<Array2<f32>, String> {
    let (mut r, h) = open_npy(path)?;
    let cols = match h.shape.as_slice() {
        [_] => 1,
        [_, c] => *c,
        s => {
            return Err(format!(
                "{}: shape {s:?}; expected 1 or 2 axes",
                path.display()
            ));
        }
    };
    let a = npy::read_f32(&mut r, &h).map_err(|e| format!("{}: {e}", path.display()))?;
    let rows = a.len() / cols.max(1);
    a.into_shape_with_order((rows, cols))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Labels from a 1-D array of any integer type or of whole floats.
fn labels(path: &Path) -> Result<Array1<i64>, String> {
    let (mut r, h) = open_npy(path)?;
    if h.shape.len() != 1 {
        return Err(format!(
            "{}: labels must be one-dimensional",
            path.display()
        ));
    }
    let a = npy::read_i64(&mut r, &h).map_err(|e| format!("{}: {e}", path.display()))?;
    a.into_dimensionality::<Ix1>()
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn build(args: &Args) -> Result<App, String> {
    let kernel = Kernel::new(
        args.kernel.parse().map_err(|e: Error| e.to_string())?,
        args.bandwidth,
    )
    .map_err(|e| e.to_string())?;
    let keys = matrix(&args.keys)?;
    let values = matrix(&args.values)?;
    let labels = args.labels.as_deref().map(labels).transpose()?;
    let mut opts = EngineOptions::new(match args.backend {
        BackendArg::Auto => Device::Auto,
        BackendArg::Cpu => Device::Cpu,
        BackendArg::Gpu => Device::Gpu,
    });
    opts.memory_limit = args
        .memory_limit_mib
        .map(|m| {
            m.checked_mul(1 << 20)
                .ok_or_else(|| format!("--memory-limit-mib {m} is too large"))
        })
        .transpose()?;
    let engine = Engine::with_options(opts).map_err(|e| e.to_string())?;
    let batching = if args.no_batching {
        Batching::off()
    } else {
        Batching {
            max_wait: Duration::from_micros(args.max_wait_us),
            ..Batching::default()
        }
    };
    let mut builder = engine
        .prepare(keys.view())
        .values(values.view())
        .options(KeySetOptions {
            batching,
            max_request_rows: args.max_rows,
            ..KeySetOptions::default()
        });
    if let Some(l) = &labels {
        builder = builder.labels(l.view());
    }
    let set = builder.build().map_err(|e| e.to_string())?;
    let max_in_flight = usize::try_from(args.max_in_flight).unwrap_or(usize::MAX);
    Ok(App {
        set,
        kernel,
        max_rows: args.max_rows,
        in_flight: Arc::new(Semaphore::new(max_in_flight)),
        max_in_flight,
        request_timeout: Duration::from_millis(args.request_timeout_ms),
    })
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let app = match build(&args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let addr = SocketAddr::new(args.host, args.port);
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: cannot listen on {addr}: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let local = listener.local_addr().unwrap_or(addr);
    eprintln!(
        "{} keys (d = {}) on {}",
        app.set.rows(),
        app.set.dim(),
        app.set.engine().backend()
    );
    // A body with `--max-rows` rows of `d` numbers of up to 32 characters
    // each fits; larger ones are refused while they are read.
    let body_bytes = args
        .max_rows
        .saturating_mul(app.set.dim().saturating_mul(32).saturating_add(8))
        .saturating_add(1 << 20);
    let limits = Limits {
        request_timeout: Duration::from_millis(args.request_timeout_ms),
        body_timeout: Duration::from_millis(args.body_timeout_ms),
        max_rows: args.max_rows,
        body_bytes,
    };
    let router = Router::new()
        .route("/local-mean", post(api::local_mean))
        .route("/classify", post(api::classify))
        .route("/health", get(api::health))
        .route("/stats", get(api::stats))
        .with_state(Arc::new(app))
        // The guard reads every body under the limit itself.
        .layer(DefaultBodyLimit::disable())
        .layer(middleware::from_fn_with_state(limits, http::guard))
        .layer(middleware::from_fn(http::json_errors));
    println!("listening on http://{local}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    http::serve(
        listener,
        router,
        Duration::from_millis(args.header_timeout_ms),
        usize::try_from(args.max_connections).unwrap_or(usize::MAX),
        Duration::from_millis(args.shutdown_grace_ms),
    )
    .await;
    eprintln!("stopped");
    std::process::ExitCode::SUCCESS
}
