//! The service's shared state, the typed JSON error answers, and the one
//! way a request computes: a compute permit, a cancel token that expires
//! at the request's deadline, a blocking thread.
//!
//! Imports: `super::{metrics, sets}`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use locus::{CancelToken, Engine, Error, Kernel, KeySetOptions};
use serde_json::json;
use tokio::sync::Semaphore;

use super::metrics::Metrics;
use super::sets::Registry;

/// Where the service is in its life: `/readyz` answers 200 only when
/// [`Phase::Ready`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// The sets named at start are being prepared.
    Loading = 0,
    /// Serving.
    Ready = 1,
    /// A shutdown signal arrived: the requests in flight finish.
    Draining = 2,
}

/// The service's state, shared by every route.
pub struct App {
    /// The named key sets.
    pub sets: Registry,
    /// The engine every set lives on.
    pub engine: Engine,
    /// The kernel of a request that names none (`--kernel`, `--bandwidth`).
    pub kernel: Kernel,
    /// How sets are prepared (batching, `--max-rows`).
    pub set_options: KeySetOptions,
    /// Most requests admitted on one set at once (`--queue-depth`).
    pub queue_depth: usize,
    /// `--max-rows`.
    pub max_rows: usize,
    /// One permit per request computing (`--max-in-flight`).
    pub in_flight: Arc<Semaphore>,
    /// `--max-in-flight`.
    pub max_in_flight: usize,
    /// `--request-timeout-ms`, for the messages.
    pub request_timeout: Duration,
    /// Counters, histograms and the request log.
    pub metrics: Metrics,
    phase: AtomicU8,
}

/// When a request must be answered: its headers' arrival plus
/// `--request-timeout-ms` (set by `http::guard`).
#[derive(Clone, Copy)]
pub struct Deadline(pub Instant);

/// A 4xx/5xx answer with a message: `{"error": "...", "kind": "..."}`. A
/// 503 or 429 (busy, a full queue, timed out, out of memory, loading:
/// passing conditions) says `Retry-After: 1`.
#[derive(Debug)]
pub struct Failure(pub StatusCode, pub String);

/// The machine-readable kind of an error answer, by status.
pub fn kind(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "bad_request",
        401 => "unauthorized",
        403 => "forbidden",
        404 => "not_found",
        405 => "method_not_allowed",
        408 => "request_timeout",
        413 => "too_large",
        415 => "unsupported_media_type",
        422 => "unprocessable",
        429 => "queue_full",
        431 => "headers_too_large",
        503 => "unavailable",
        s if s >= 500 => "internal",
        _ => "error",
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let body = json!({ "error": self.1, "kind": kind(self.0) });
        let mut r = (self.0, axum::Json(body)).into_response();
        if matches!(
            self.0,
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS
        ) {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        r
    }
}

/// 400 with `msg`.
pub fn bad(msg: impl Into<String>) -> Failure {
    Failure(StatusCode::BAD_REQUEST, msg.into())
}

/// 413: more rows than `--max-rows`.
pub fn too_many_rows(limit: usize, rows: usize) -> Failure {
    Failure(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("too many rows (limit {limit}): the request has {rows}; split it"),
    )
}

/// The answer to a request not done by its deadline.
pub fn timed_out(timeout: Duration) -> Failure {
    Failure(
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "the request took longer than {} ms; send fewer rows or retry later",
            timeout.as_millis()
        ),
    )
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        use locus::ClusterError as C;
        let status = match &e {
            Error::MemoryLimit { .. } | Error::Cancelled { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Error::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Error::Gpu { .. }
            | Error::GpuOutOfMemory { .. }
            | Error::DeviceLost { .. }
            | Error::Unsupported { .. } => StatusCode::INTERNAL_SERVER_ERROR,
            // Valid parameters this data cannot serve: the set holds no
            // values or labels for the op, MeanShift finds no mode.
            Error::InvalidParameter { name, .. } if matches!(*name, "values" | "labels") => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            Error::Cluster(C::NoModes { .. } | C::DegenerateBandwidth { .. }) => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            _ => StatusCode::BAD_REQUEST,
        };
        Failure(status, e.to_string())
    }
}

/// Cancels a request's work when its handler ends or is dropped (the
/// client gone, the shutdown grace over), not only at the deadline.
struct CancelOnDrop(CancelToken);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// What [`App::new`] takes besides the sets.
pub struct AppParts {
    /// The engine every set lives on.
    pub engine: Engine,
    /// The default kernel.
    pub kernel: Kernel,
    /// How sets are prepared.
    pub set_options: KeySetOptions,
    /// `--queue-depth`.
    pub queue_depth: usize,
    /// `--max-rows`.
    pub max_rows: usize,
    /// `--max-in-flight`.
    pub max_in_flight: usize,
    /// `--request-timeout-ms`.
    pub request_timeout: Duration,
    /// The request log's format.
    pub metrics: Metrics,
}

impl App {
    /// A service with no set yet, loading.
    pub fn new(p: AppParts) -> App {
        App {
            sets: Registry::default(),
            engine: p.engine,
            kernel: p.kernel,
            set_options: p.set_options,
            queue_depth: p.queue_depth,
            max_rows: p.max_rows,
            in_flight: Arc::new(Semaphore::new(p.max_in_flight)),
            max_in_flight: p.max_in_flight,
            request_timeout: p.request_timeout,
            metrics: p.metrics,
            phase: AtomicU8::new(Phase::Loading as u8),
        }
    }

    /// The service's phase.
    pub fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Acquire) {
            0 => Phase::Loading,
            1 => Phase::Ready,
            _ => Phase::Draining,
        }
    }

    /// Moves to `phase` (never back from draining).
    pub fn set_phase(&self, phase: Phase) {
        let _ = self
            .phase
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| {
                (p != Phase::Draining as u8).then_some(phase as u8)
            });
    }

    /// Runs `f` on a blocking thread (the key set's calls block) once a
    /// compute permit is free (503 with `Retry-After` at once if none is),
    /// under a cancel token that expires at `deadline`. The permit moves
    /// into the blocking task and is released only when `f` has returned:
    /// a request answered 503 at its deadline keeps its permit until its
    /// work has stopped at the next checkpoint, so `--max-in-flight` bounds
    /// the compute, not only the answers. A panic is a 500, not a dropped
    /// connection.
    pub async fn compute<T: Send + 'static>(
        &self,
        deadline: Deadline,
        f: impl FnOnce() -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Failure> {
        let Ok(permit) = Arc::clone(&self.in_flight).try_acquire_owned() else {
            return Err(self.busy());
        };
        let token = CancelToken::with_deadline(deadline.0);
        let _stop = CancelOnDrop(token.clone());
        let task = tokio::task::spawn_blocking(move || {
            let out = token.run(f);
            drop(permit);
            out
        });
        let deadline = tokio::time::Instant::from_std(deadline.0);
        match tokio::time::timeout_at(deadline, task).await {
            Err(_) | Ok(Ok(Err(Error::Cancelled { .. }))) => Err(timed_out(self.request_timeout)),
            Ok(Ok(r)) => Ok(r?),
            Ok(Err(e)) => Err(Failure(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("internal error: {e}"),
            )),
        }
    }

    /// 503: every compute permit is taken.
    fn busy(&self) -> Failure {
        Failure(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "busy: {} requests in flight (limit {}); retry later",
                self.max_in_flight, self.max_in_flight
            ),
        )
    }

    /// 503 while the service is not ready for queries.
    pub fn check_ready(&self) -> Result<(), Failure> {
        match self.phase() {
            Phase::Loading => Err(Failure(
                StatusCode::SERVICE_UNAVAILABLE,
                "loading: the key sets named at start are being prepared; retry shortly".into(),
            )),
            Phase::Ready | Phase::Draining => Ok(()),
        }
    }
}
