//! The HTTP layer: connections, plain or TLS (header deadline, the TLS
//! handshake under it too, connection cap, graceful shutdown, JSON bodies
//! on hyper's own error answers), request bodies
//! read whole under their deadline before anything else, JSON bodies on
//! every error answer, and every answer counted and logged.
//!
//! Imports: `super::{app, handlers, metrics, protocol}`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, HttpBody};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use tokio::sync::Semaphore;

use super::app::{App, Deadline, Failure};
use super::handlers::route_of;
use super::metrics::{LogLine, Served};
use super::protocol::{JsonErrors, MAX_HEADERS};

/// The limits of the HTTP layer.
#[derive(Clone)]
pub struct Limits {
    /// `--request-timeout-ms`: from a request's headers to its answer.
    pub request_timeout: Duration,
    /// `--body-timeout-ms`: from a request's headers to the end of its body.
    pub body_timeout: Duration,
    /// `--max-rows`, for the messages.
    pub max_rows: usize,
    /// Largest query body accepted (`--max-body-mib`).
    pub body_bytes: usize,
    /// Largest set upload accepted (`--max-upload-mib`).
    pub upload_bytes: usize,
}

impl Limits {
    fn too_large(&self, upload: bool) -> Failure {
        let msg = if upload {
            format!(
                "set upload too large: the body exceeds {} bytes (--max-upload-mib)",
                self.upload_bytes
            )
        } else {
            format!(
                "too many rows (limit {}) or too large: the request body exceeds {} bytes",
                self.max_rows, self.body_bytes
            )
        };
        Failure(StatusCode::PAYLOAD_TOO_LARGE, msg)
    }
}

/// Why a body was not read.
enum BodyError {
    TooLarge,
    Broken(String),
}

/// Reads `body` whole, refusing it once it passes `limit` bytes.
async fn read_body(mut body: Body, limit: usize) -> Result<Vec<u8>, BodyError> {
    let mut bytes = Vec::new();
    while let Some(frame) =
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await
    {
        let frame = frame.map_err(|e| BodyError::Broken(e.to_string()))?;
        if let Ok(data) = frame.into_data() {
            if bytes.len() + data.len() > limit {
                return Err(BodyError::TooLarge);
            }
            bytes.extend_from_slice(&data);
        }
    }
    Ok(bytes)
}

/// The HTTP layer around every route (the probes and `/metrics` are
/// exempt, so they answer under load): a body announced too large is refused unread; the body is
/// then read whole within `--body-timeout-ms` (and the request's deadline)
/// or the request is answered 408 and its connection closed; only then do
/// the routes see it, with the request's [`Deadline`]. No compute permit is
/// held while a body arrives: the routes take one after parsing it.
pub async fn guard(State(limits): State<Limits>, req: Request, next: Next) -> Response {
    if matches!(
        req.uri().path(),
        "/livez" | "/readyz" | "/metrics" | "/openapi.json"
    ) {
        return next.run(req).await;
    }
    // Only a set upload may be as large as an upload; any other PUT (a
    // route that does not take one) gets the query bodies' limit.
    let upload =
        req.method() == axum::http::Method::PUT && super::auth::is_set_route(req.uri().path());
    let limit = if upload {
        limits.upload_bytes
    } else {
        limits.body_bytes
    };
    let start = Instant::now();
    let deadline = start + limits.request_timeout;
    // A body announced larger than any allowed request: refused unread.
    let announced = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > limit as u64) {
        return limits.too_large(upload).into_response();
    }
    let body_deadline = deadline.min(start + limits.body_timeout);
    let (mut parts, body) = req.into_parts();
    let read = tokio::time::timeout_at(
        tokio::time::Instant::from_std(body_deadline),
        read_body(body, limit),
    );
    let bytes = match read.await {
        Ok(Ok(b)) => b,
        Ok(Err(BodyError::TooLarge)) => return limits.too_large(upload).into_response(),
        Ok(Err(BodyError::Broken(e))) => {
            return Failure(
                StatusCode::BAD_REQUEST,
                format!("the request body could not be read: {e}"),
            )
            .into_response();
        }
        Err(_) => {
            let mut r = Failure(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {} ms of its headers; send it at once",
                    (body_deadline - start).as_millis()
                ),
            )
            .into_response();
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return r;
        }
    };
    parts.extensions.insert(Deadline(deadline));
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// Gives every error answer a JSON body `{"error": "..."}`: those of the
/// routes and of [`guard`] already have one; the router's own (404, 405)
/// are rewritten here.
pub async fn json_errors(req: Request, next: Next) -> Response {
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
            "no such endpoint: {method} {path} (POST /v1/sets/{{name}}/{{op}}, POST /v1/mean-shift, \
             GET /v1/sets, GET|PUT|DELETE /v1/sets/{{name}}, GET /livez, /readyz, /metrics, \
             /openapi.json)"
        ),
        StatusCode::METHOD_NOT_ALLOWED => format!("method {method} not allowed on {path}"),
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

/// The layer around every route: times the request, counts its answer by
/// op and status, writes its log line.
pub async fn observe(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let t0 = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let r = next.run(req).await;
    let seconds = t0.elapsed().as_secs_f64();
    let (op, set) = route_of(&method, &path);
    let rows = r.extensions().get::<Served>().map_or(0, |s| s.rows);
    let status = r.status().as_u16();
    app.metrics.record(op, status, seconds, rows);
    app.metrics.log(&LogLine {
        method: &method,
        path: &path,
        op,
        set,
        status,
        rows,
        seconds,
    });
    r
}

/// How connections are served.
pub struct Connections {
    /// `--header-timeout-ms`: for a request's headers, an idle connection,
    /// and a TLS handshake.
    pub header_timeout: Duration,
    /// `--max-connections`.
    pub max_connections: usize,
    /// `--shutdown-grace-ms`: longest wait for the open connections.
    pub grace: Duration,
    /// `--tls-cert`, `--tls-key`: each connection's TLS handshake.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
}

/// Serves HTTP/1.1 on `io` (a socket, or a TLS stream over one) until the
/// client closes it, the header timeout passes, or a graceful shutdown
/// lets its request in flight finish.
async fn serve_connection<I>(io: I, router: Router, header_timeout: Duration, watcher: Watcher)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .max_headers(MAX_HEADERS)
        .keep_alive(true);
    let conn = http.serve_connection(
        JsonErrors::new(TokioIo::new(io)),
        TowerToHyperService::new(router),
    );
    let _ = watcher.watch(conn).await;
}

/// Serves `router` on `listener` until `stop` resolves: each connection
/// under the header-read timeout (and its TLS handshake too), at most
/// `max_connections` at once; then waits for the open ones, handshakes
/// included (up to `grace`).
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    c: Connections,
    stop: impl std::future::Future<Output = ()>,
) {
    let Connections {
        header_timeout,
        max_connections,
        grace,
        tls,
    } = c;
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(max_connections));
    let mut stop = std::pin::pin!(stop);
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
        let (router, tls, watcher) = (router.clone(), tls.clone(), graceful.watcher());
        tokio::spawn(async move {
            match tls {
                None => serve_connection(stream, router, header_timeout, watcher).await,
                Some(tls) => {
                    // A failed or slow handshake closes the connection.
                    if let Ok(Ok(stream)) =
                        tokio::time::timeout(header_timeout, tls.accept(stream)).await
                    {
                        serve_connection(stream, router, header_timeout, watcher).await;
                    }
                }
            }
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

/// Resolves on SIGTERM or SIGINT (Ctrl-C).
pub async fn shutdown_signal() {
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
