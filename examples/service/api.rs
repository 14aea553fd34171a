//! The routes: requests parsed and checked, computed on blocking threads
//! under the in-flight limit and the request's deadline, answered as JSON.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Extension;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use locus::{CancelToken, Error, Kernel, KeySet, Profile};
use ndarray::{Array2, ArrayView1};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::Semaphore;

/// The service's state: the key set, the defaults and the compute limits.
pub struct App {
    pub set: KeySet,
    pub kernel: Kernel,
    /// `--max-rows`.
    pub max_rows: usize,
    /// One permit per request computing (`--max-in-flight`).
    pub in_flight: Arc<Semaphore>,
    pub max_in_flight: usize,
    /// `--request-timeout-ms`, for the messages.
    pub request_timeout: Duration,
}

/// When a request must be answered: its headers' arrival plus
/// `--request-timeout-ms` (set by `http::guard`).
#[derive(Clone, Copy)]
pub struct Deadline(pub Instant);

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
struct Means<'a> {
    values: Rows<'a>,
    empty_rows: usize,
}

/// The answer of `/classify`.
#[derive(Serialize)]
struct Classes<'a> {
    labels: Vec<i64>,
    proba: Rows<'a>,
    empty_rows: usize,
}

/// A 4xx/5xx answer with a message; a 503 (busy, timed out, out of
/// memory: all passing conditions) says `Retry-After: 1`.
pub struct Failure(pub StatusCode, pub String);

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let mut r = (self.0, axum::Json(json!({ "error": self.1 }))).into_response();
        if self.0 == StatusCode::SERVICE_UNAVAILABLE {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        r
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
        let status = match e {
            Error::MemoryLimit { .. } | Error::Cancelled { .. } => StatusCode::SERVICE_UNAVAILABLE,
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

/// Cancels a request's work when its handler ends or is dropped (the
/// client gone, the shutdown grace over), not only at the deadline.
struct CancelOnDrop(CancelToken);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

impl App {
    /// Parses and checks a request: JSON shape, row widths, finite `f32`s,
    /// kernel and bandwidth.
    pub fn parse(&self, body: &[u8]) -> Result<(Kernel, Array2<f32>), Failure> {
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

    /// Runs `f` on a blocking thread (the key set's calls block) once a
    /// compute permit is free (503 with `Retry-After` at once if none is),
    /// under a cancel token that expires at `deadline`. The permit moves
    /// into the blocking task and is released only when `f` has returned:
    /// a request answered 503 at its deadline keeps its permit until its
    /// work has stopped at the next checkpoint, so `--max-in-flight` bounds
    /// the compute, not only the answers. A panic is a 500, not a dropped
    /// connection.
    async fn compute<T: Send + 'static>(
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
}

/// A matrix written as a list of its rows, without copying them.
struct Rows<'a>(&'a Array2<f32>);

impl Serialize for Rows<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_seq(self.0.rows().into_iter().map(Row))
    }
}

/// One row (serde_json writes NaN as `null`).
struct Row<'a>(ArrayView1<'a, f32>);

impl Serialize for Row<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter())
    }
}

/// `POST /local-mean`.
pub async fn local_mean(
    State(app): State<Arc<App>>,
    Extension(deadline): Extension<Deadline>,
    body: Bytes,
) -> Result<Response, Failure> {
    let (kernel, queries) = app.parse(&body)?;
    let set = app.set.clone();
    let m = app
        .compute(deadline, move || set.local_mean(&kernel, queries.view()))
        .await?;
    Ok(axum::Json(Means {
        values: Rows(&m.values),
        empty_rows: m.empty_rows,
    })
    .into_response())
}

/// `POST /classify`.
pub async fn classify(
    State(app): State<Arc<App>>,
    Extension(deadline): Extension<Deadline>,
    body: Bytes,
) -> Result<Response, Failure> {
    if app.set.classes().is_none() {
        return Err(bad(
            "this service was started without --labels; /classify is not available",
        ));
    }
    let (kernel, queries) = app.parse(&body)?;
    let set = app.set.clone();
    let c = app
        .compute(deadline, move || set.classify(&kernel, queries.view()))
        .await?;
    Ok(axum::Json(Classes {
        labels: c.labels.to_vec(),
        proba: Rows(&c.proba),
        empty_rows: c.empty_rows,
    })
    .into_response())
}

/// `GET /health`.
pub async fn health(State(app): State<Arc<App>>) -> Response {
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

/// `GET /stats`.
pub async fn stats(State(app): State<Arc<App>>) -> Response {
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
