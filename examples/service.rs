//! A small HTTP JSON service over a key set: local means and local-mode
//! classification at the posted query points.
//!
//! ```text
//! cargo run --release --example service -- --keys K.npy --values V.npy \
//!     [--labels L.npy] --port P [--kernel gaussian --bandwidth 0.5]
//! ```
//!
//! * `POST /local-mean` `{"queries": [[..d..], ...], "kernel": "gaussian", "bandwidth": 0.5}`
//!   (kernel and bandwidth optional, defaulting to the start-up ones) →
//!   `{"values": [[..q..], ...], "empty_rows": 0}`; a query with no key in
//!   reach of a compact kernel gets `null`s.
//! * `POST /classify` (same request; needs `--labels`) →
//!   `{"labels": [...], "proba": [[..C..], ...], "empty_rows": 0}`.
//! * `GET /health` → backend, sizes and defaults; `GET /stats` → how
//!   requests were batched.
//!
//! Bad input (malformed JSON, ragged or wrong-width rows, non-finite
//! numbers, unknown kernels, bad bandwidths, too many rows) is answered
//! with 400 and a message; a request that does not fit under the memory
//! limit with 503. Requests from many connections run concurrently on
//! blocking threads and are coalesced by the key set's micro-batching.
//! The port `0` takes a free one; the address is printed on stdout as
//! `listening on http://ADDR` once the service accepts connections.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use clap::{Parser, ValueEnum};
use locus::{
    Batching, Device, Engine, EngineOptions, Error, Kernel, KeySet, KeySetOptions, Profile,
};
use ndarray::{Array1, Array2, Ix1};
use serde::{Deserialize, Serialize};
use serde_json::json;

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
}

#[derive(Clone, Copy, ValueEnum)]
enum BackendArg {
    Auto,
    Cpu,
    Gpu,
}

struct App {
    set: KeySet,
    kernel: Kernel,
}

/// A request body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Query {
    queries: Vec<Vec<f64>>,
    kernel: Option<String>,
    bandwidth: Option<f64>,
}

/// The answer of `/local-mean` (floats written as the shortest `f32`;
/// NaN, an empty neighbourhood, as `null`).
#[derive(Serialize)]
struct Means {
    values: Vec<Vec<f32>>,
    empty_rows: usize,
}

/// The answer of `/classify`.
#[derive(Serialize)]
struct Classes {
    labels: Vec<i64>,
    proba: Vec<Vec<f32>>,
    empty_rows: usize,
}

/// A 4xx/5xx answer with a message.
struct Failure(StatusCode, String);

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        (self.0, axum::Json(json!({ "error": self.1 }))).into_response()
    }
}

fn bad(msg: impl Into<String>) -> Failure {
    Failure(StatusCode::BAD_REQUEST, msg.into())
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        let status = match e {
            Error::MemoryLimit { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Error::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Error::Gpu { .. }
            | Error::GpuOutOfMemory { .. }
            | Error::DeviceLost { .. }
            | Error::Unsupported { .. } => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::BAD_REQUEST,
        };
        Failure(status, e.to_string())
    }
}

impl App {
    /// Parses and checks a request: JSON shape, row widths, finite `f32`s,
    /// kernel and bandwidth.
    fn parse(&self, body: &[u8]) -> Result<(Kernel, Array2<f32>), Failure> {
        let q: Query =
            serde_json::from_slice(body).map_err(|e| bad(format!("invalid request: {e}")))?;
        let d = self.set.dim();
        if q.queries.is_empty() {
            return Err(bad("\"queries\" is empty; send at least one point"));
        }
        let mut data = Vec::with_capacity(q.queries.len() * d);
        for (i, row) in q.queries.iter().enumerate() {
            if row.len() != d {
                return Err(bad(format!(
                    "query {i} has {} coordinates; the keys have {d}",
                    row.len()
                )));
            }
            for (j, &v) in row.iter().enumerate() {
                let f = v as f32;
                if !f.is_finite() {
                    return Err(bad(format!(
                        "query {i} coordinate {j} is {v}, not a finite 32-bit float"
                    )));
                }
                data.push(f);
            }
        }
        let queries = Array2::from_shape_vec((q.queries.len(), d), data)
            .map_err(|e| bad(format!("queries: {e}")))?;
        let profile = match &q.kernel {
            Some(name) => name.parse::<Profile>()?,
            None => self.kernel.profile(),
        };
        let h = match q.bandwidth {
            Some(h) => h as f32,
            None => self.kernel.bandwidth(),
        };
        Ok((Kernel::new(profile, h)?, queries))
    }
}

/// Runs `f` on a blocking thread (the key set's calls block) and turns a
/// panic into a 500 rather than a dropped connection.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Failure> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => Ok(r?),
        Err(e) => Err(Failure(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal error: {e}"),
        )),
    }
}

fn rows(a: &Array2<f32>) -> Vec<Vec<f32>> {
    a.rows().into_iter().map(|r| r.to_vec()).collect()
}

async fn local_mean(State(app): State<Arc<App>>, body: Bytes) -> Result<Response, Failure> {
    let (kernel, queries) = app.parse(&body)?;
    let set = app.set.clone();
    let m = blocking(move || set.local_mean(&kernel, queries.view())).await?;
    Ok(axum::Json(Means {
        values: rows(&m.values),
        empty_rows: m.empty_rows,
    })
    .into_response())
}

async fn classify(State(app): State<Arc<App>>, body: Bytes) -> Result<Response, Failure> {
    if app.set.classes().is_none() {
        return Err(bad(
            "this service was started without --labels; /classify is not available",
        ));
    }
    let (kernel, queries) = app.parse(&body)?;
    let set = app.set.clone();
    let c = blocking(move || set.classify(&kernel, queries.view())).await?;
    Ok(axum::Json(Classes {
        labels: c.labels.to_vec(),
        proba: rows(&c.proba),
        empty_rows: c.empty_rows,
    })
    .into_response())
}

async fn health(State(app): State<Arc<App>>) -> Response {
    let s = &app.set;
    axum::Json(json!({
        "backend": s.engine().backend().to_string(),
        "keys": s.rows(),
        "dim": s.dim(),
        "value_cols": s.value_cols(),
        "classes": s.classes(),
        "kernel": app.kernel.profile().name(),
        "bandwidth": app.kernel.bandwidth(),
        "resident_bytes": s.resident_bytes(),
    }))
    .into_response()
}

async fn stats(State(app): State<Arc<App>>) -> Response {
    let st = app.set.stats();
    axum::Json(json!({
        "direct": st.direct,
        "batches": st.batches,
        "batched_requests": st.batched_requests,
        "largest_batch": st.largest_batch,
        "retried_alone": st.retried_alone,
    }))
    .into_response()
}

/// The command-line tool's `.npy` reader: the header is checked against
/// the file before anything is allocated, so a forged shape is an error.
#[path = "../src/bin/locus/npy.rs"]
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
    Ok(App { set, kernel })
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
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
    let router = Router::new()
        .route("/local-mean", post(local_mean))
        .route("/classify", post(classify))
        .route("/health", get(health))
        .route("/stats", get(stats))
        .with_state(Arc::new(app));
    println!("listening on http://{local}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    if let Err(e) = axum::serve(listener, router)
        .with_graceful_shutdown(shutdown_signal())
        .await
    {
        eprintln!("error: {e}");
        return std::process::ExitCode::FAILURE;
    }
    std::process::ExitCode::SUCCESS
}
