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
//! the memory limit with 503. Every error, 404 and 405 included, has a
//! JSON body `{"error": "..."}`.
//!
//! Protection: a client must send a request's headers within
//! `--header-timeout-ms` (idle and half-sent connections are closed), at
//! most `--max-connections` are served at once (more wait in the
//! listen queue), at most `--max-in-flight` requests compute at once (more
//! are shed at once with 503 and `Retry-After`; `/health` is exempt), and
//! a request that takes longer than `--request-timeout-ms` is answered 503.
//! SIGTERM or SIGINT stops accepting, lets in-flight requests finish (up
//! to `--shutdown-grace-ms`) and exits 0.
//!
//! Requests from many connections run concurrently on blocking threads
//! and are coalesced by the key set's micro-batching. The port `0` takes a
//! free one; the address is printed on stdout as `listening on http://ADDR`
//! once the service accepts connections.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use clap::{Parser, ValueEnum};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use locus::{
    Batching, Device, Engine, EngineOptions, Error, Kernel, KeySet, KeySetOptions, Profile,
};
use ndarray::{Array1, Array2, Ix1};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::Semaphore;

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
    /// Longest a request may take from its headers to its answer, in milliseconds.
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

struct App {
    set: KeySet,
    kernel: Kernel,
    /// `--max-rows`.
    max_rows: usize,
}

/// The limits of the HTTP layer.
#[derive(Clone)]
struct Limits {
    in_flight: Arc<Semaphore>,
    max_in_flight: usize,
    request_timeout: Duration,
    max_rows: usize,
    body_bytes: usize,
}

/// A request body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Query {
    queries: Vec<Vec<f64>>,
    kernel: Option<String>,
    bandwidth: Option<f64>,
    /// A product kernel instead: `[[dims, profile, bandwidth], …]`.
    blocks: Option<Vec<(usize, String, f64)>>,
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

fn too_many_rows(limit: usize, rows: usize) -> Failure {
    Failure(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("too many rows (limit {limit}): the request has {rows}; split it"),
    )
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
        if q.queries.len() > self.max_rows {
            return Err(too_many_rows(self.max_rows, q.queries.len()));
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
        if let Some(blocks) = &q.blocks {
            if q.kernel.is_some() || q.bandwidth.is_some() {
                return Err(bad(
                    "\"blocks\" carries the kernel: send no \"kernel\" or \"bandwidth\" with it",
                ));
            }
            let spec = blocks
                .iter()
                .map(|(dims, p, h)| Ok((*dims, p.parse::<Profile>()?, *h as f32)))
                .collect::<Result<Vec<_>, Error>>()?;
            let kernel = Kernel::product(spec)?;
            kernel.check_dim("local-mean", d)?;
            return Ok((kernel, queries));
        }
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
    Ok(App {
        set,
        kernel,
        max_rows: args.max_rows,
    })
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C).
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

/// The HTTP layer around every route: load shedding and the request
/// timeout (`/health` is exempt from both, so it answers under load).
async fn guard(State(limits): State<Limits>, req: Request, next: Next) -> Response {
    if req.uri().path() == "/health" {
        return next.run(req).await;
    }
    // A body announced larger than any allowed request: refused unread.
    let announced = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > limits.body_bytes as u64) {
        return Failure(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "too many rows (limit {}): the request body exceeds {} bytes",
                limits.max_rows, limits.body_bytes
            ),
        )
        .into_response();
    }
    let Ok(_permit) = Arc::clone(&limits.in_flight).try_acquire_owned() else {
        let mut r = Failure(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "busy: {} requests in flight (limit {}); retry later",
                limits.max_in_flight, limits.max_in_flight
            ),
        )
        .into_response();
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return r;
    };
    match tokio::time::timeout(limits.request_timeout, next.run(req)).await {
        Ok(r) => r,
        Err(_) => Failure(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the request took longer than {} ms; send fewer rows or retry later",
                limits.request_timeout.as_millis()
            ),
        )
        .into_response(),
    }
}

/// Gives every error answer a JSON body `{"error": "..."}`: those of the
/// routes already have one; the router's own (404, 405) and the body
/// limit's (413) are rewritten here.
async fn json_errors(State(limits): State<Limits>, req: Request, next: Next) -> Response {
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let r = next.run(req).await;
    let status = r.status();
    let is_json = r
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return r;
    }
    let msg = match status {
        StatusCode::NOT_FOUND => format!(
            "no such endpoint: {method} {path} (POST /local-mean, POST /classify, GET /health, GET /stats)"
        ),
        StatusCode::METHOD_NOT_ALLOWED => format!("method {method} not allowed on {path}"),
        StatusCode::PAYLOAD_TOO_LARGE => format!(
            "too many rows (limit {}): the request body exceeds {} bytes",
            limits.max_rows, limits.body_bytes
        ),
        _ => {
            let text = axum::body::to_bytes(r.into_body(), 64 << 10)
                .await
                .map(|b| String::from_utf8_lossy(&b).trim().to_string())
                .unwrap_or_default();
            let reason = status.canonical_reason().unwrap_or("error");
            if text.is_empty() {
                reason.to_string()
            } else {
                format!("{reason}: {text}")
            }
        }
    };
    Failure(status, msg).into_response()
}

/// Serves `router` on `listener` until a shutdown signal: each connection
/// under the header-read timeout, at most `max_connections` at once; then
/// waits for the open ones (up to `grace`).
async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    header_timeout: Duration,
    max_connections: usize,
    grace: Duration,
) {
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(max_connections));
    let mut stop = std::pin::pin!(shutdown_signal());
    loop {
        let slot = tokio::select! {
            s = Arc::clone(&slots).acquire_owned() => match s {
                Ok(s) => s,
                Err(_) => break,
            },
            _ = &mut stop => break,
        };
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    // Out of file descriptors or a connection reset before
                    // it was accepted: wait a little, keep serving.
                    eprintln!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stop => break,
        };
        let _ = stream.set_nodelay(true);
        let mut http = http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(header_timeout)
            .keep_alive(true);
        let conn = http.serve_connection(
            TokioIo::new(stream),
            TowerToHyperService::new(router.clone()),
        );
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _ = conn.await;
            drop(slot);
        });
    }
    drop(listener);
    eprintln!("shutting down: finishing the requests in flight");
    tokio::select! {
        _ = graceful.shutdown() => {},
        _ = tokio::time::sleep(grace) => {
            eprintln!("shutdown: gave up waiting after {} ms", grace.as_millis());
        },
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
    // A body with `--max-rows` rows of `d` numbers of up to 32 characters
    // each fits; larger ones are refused while they are read.
    let body_bytes = args
        .max_rows
        .saturating_mul(app.set.dim().saturating_mul(32).saturating_add(8))
        .saturating_add(1 << 20);
    let max_in_flight = usize::try_from(args.max_in_flight).unwrap_or(usize::MAX);
    let limits = Limits {
        in_flight: Arc::new(Semaphore::new(max_in_flight)),
        max_in_flight,
        request_timeout: Duration::from_millis(args.request_timeout_ms),
        max_rows: args.max_rows,
        body_bytes,
    };
    let router = Router::new()
        .route("/local-mean", post(local_mean))
        .route("/classify", post(classify))
        .route("/health", get(health))
        .route("/stats", get(stats))
        .with_state(Arc::new(app))
        .layer(DefaultBodyLimit::max(body_bytes))
        .layer(middleware::from_fn_with_state(limits.clone(), guard))
        .layer(middleware::from_fn_with_state(limits, json_errors));
    println!("listening on http://{local}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    serve(
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
