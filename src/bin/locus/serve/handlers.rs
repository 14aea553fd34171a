//! The routes: the query ops on a named set and MeanShift of posted
//! points (parsed, admitted to the set's queue, computed under a permit
//! and the request's deadline, answered in the asked format), the set
//! management routes, and the probes.
//!
//! Imports: `super::{app, metrics, openapi, schema, sets, wire}`,
//! `crate::points`.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use locus::{Error, Kernel, MeanShiftParams, Profile};
use ndarray::{Array1, Array2};
use serde_json::{Value, json};

use super::app::{App, Deadline, Failure, Phase, bad};
use super::metrics::{Served, escape, family};
use super::schema;
use super::sets::{Centre, Entry, check_name};
use super::wire::{
    Answer, Field, Params, Request, answer_format, parse_request, parse_set, request_format,
};
use crate::points::Offset;

/// A query op on a set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Local means (degree 0) or local linear fits (degree 1) of the values.
    LocalMean,
    /// Row states `(m, s, u)` of the values.
    RowStates,
    /// Kernel density estimates.
    Density,
    /// Their logarithms.
    LogDensity,
    /// Local-mode classes and class probabilities.
    Classify,
    /// The `k` nearest keys.
    Knn,
}

impl Op {
    /// Every op, as named in the paths.
    pub const ALL: [Op; 6] = [
        Op::LocalMean,
        Op::RowStates,
        Op::Density,
        Op::LogDensity,
        Op::Classify,
        Op::Knn,
    ];

    /// The op's name in paths and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Op::LocalMean => "local-mean",
            Op::RowStates => "row-states",
            Op::Density => "density",
            Op::LogDensity => "log-density",
            Op::Classify => "classify",
            Op::Knn => "knn",
        }
    }

    /// The op named `s`.
    pub fn parse(s: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|o| o.name() == s)
    }
}

/// The kernel a request names, or the default's profile and bandwidth
/// for what it leaves out; a product kernel's blocks must cover `d`.
fn kernel_of(app: &App, p: &Params, d: usize) -> Result<Kernel, Failure> {
    if let Some(blocks) = &p.blocks {
        if p.kernel.is_some() || p.bandwidth.is_some() {
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
        return Ok(kernel);
    }
    let profile = match &p.kernel {
        Some(name) => name.parse::<Profile>()?,
        None => app.kernel.profile(),
    };
    let h = p.bandwidth.map_or(app.kernel.bandwidth(), |h| h as f32);
    Ok(Kernel::new(profile, h)?)
}

/// Refuses parameters `op` does not take (a `k` on a local mean is a
/// mistake, not something to ignore).
fn check_params(op: &str, p: &Params) -> Result<(), Failure> {
    let given: [(&str, bool); schema::PARAMS.len()] = [
        ("kernel", p.kernel.is_some()),
        ("bandwidth", p.bandwidth.is_some()),
        ("blocks", p.blocks.is_some()),
        ("degree", p.degree.is_some()),
        ("k", p.k.is_some()),
        ("max_iter", p.max_iter.is_some()),
    ];
    let takes = schema::params(op);
    match given.iter().find(|(n, g)| *g && !takes.contains(n)) {
        Some((n, _)) => Err(bad(format!(
            "{op} takes no {n:?} (it takes {})",
            takes.join(", ")
        ))),
        None => Ok(()),
    }
}

/// Runs `op` on `entry` (on the blocking thread).
fn run_op(entry: &Entry, op: Op, kernel: Option<Kernel>, req: &Request) -> Result<Answer, Error> {
    let set = &entry.set;
    let q = req.rows.view();
    let k = || {
        kernel.ok_or(Error::InvalidParameter {
            name: "kernel",
            reason: "missing".into(),
        })
    };
    let a = Answer::default();
    Ok(match op {
        Op::LocalMean => match req.params.degree.unwrap_or(0) {
            0 => {
                let m = set.local_mean(&k()?, q)?;
                a.with("values", Field::F32(m.values.into_dyn()))
                    .with("empty_rows", Field::Count(m.empty_rows))
            }
            degree => {
                let f = set.local_polynomial(&k()?, q, degree)?;
                let mut a = a.with("values", Field::F32(f.fitted.into_dyn()));
                if let Some(s) = f.slopes {
                    a = a.with("slopes", Field::F32(s.into_dyn()));
                }
                a.with("empty_rows", Field::Count(f.empty_rows))
                    .with("rank_deficient_rows", Field::Count(f.rank_deficient_rows))
            }
        },
        Op::RowStates => {
            let s = set.row_states(&k()?, q)?;
            a.with("max_log_weight", Field::F32(s.max_log_weight.into_dyn()))
                .with("sum", Field::F64(s.sum.into_dyn()))
                .with("weighted", Field::F64(s.weighted.into_dyn()))
        }
        Op::Density | Op::LogDensity => {
            let k = k()?;
            let log = match &entry.weighted {
                Some(w) => {
                    set.engine()
                        .log_density(&k, q, w.keys.view(), Some(w.weights.view()))?
                }
                None => set.log_density(&k, q)?,
            };
            if op == Op::Density {
                a.with("density", Field::F64(log.mapv(f64::exp).into_dyn()))
            } else {
                a.with("log_density", Field::F64(log.into_dyn()))
            }
        }
        Op::Classify => {
            let c = set.classify(&k()?, q)?;
            let classes = set
                .class_labels()
                .map_or_else(|| Array1::zeros(0), |c| c.to_owned());
            a.with("labels", Field::I64(c.labels.into_dyn()))
                .with("proba", Field::F32(c.proba.into_dyn()))
                .with_other("classes", Field::I64(classes.into_dyn()))
                .with("empty_rows", Field::Count(c.empty_rows))
        }
        Op::Knn => {
            let k = req.params.k.ok_or(Error::InvalidParameter {
                name: "k",
                reason: "knn needs \"k\", the number of neighbours".into(),
            })?;
            let n = set.knn(q, k)?;
            a.with("distances", Field::F32(n.distances.into_dyn()))
                .with("indices", Field::I64(n.indices.into_dyn()))
        }
    })
}

/// Bodies from this size on are parsed on a blocking thread, not on the
/// threads that serve the connections.
const PARSE_OFF_THREAD: usize = 256 << 10;

/// [`parse_request`], on a blocking thread for a large body.
async fn parse(
    body: Bytes,
    format: super::wire::Format,
    query: Option<&str>,
    (field, d, max_rows): (&'static str, Option<usize>, usize),
    centre: Centre,
) -> Result<Request, Failure> {
    if body.len() < PARSE_OFF_THREAD {
        return parse_request(&body, format, query, field, d, max_rows, &centre);
    }
    let query = query.map(str::to_string);
    tokio::task::spawn_blocking(move || {
        parse_request(&body, format, query.as_deref(), field, d, max_rows, &centre)
    })
    .await
    .map_err(|e| {
        Failure(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal error: {e}"),
        )
    })?
}

/// 404 for an unknown set.
fn no_set(app: &App, name: &str) -> Failure {
    Failure(
        StatusCode::NOT_FOUND,
        format!("no set {name:?} (sets: {:?})", app.sets.names()),
    )
}

/// `POST /v1/sets/{name}/{op}`.
pub async fn query(
    State(app): State<Arc<App>>,
    Path((name, op)): Path<(String, String)>,
    Extension(deadline): Extension<Deadline>,
    headers: HeaderMap,
    uri: Uri,
    body: Bytes,
) -> Result<Response, Failure> {
    app.check_ready()?;
    let op = Op::parse(&op).ok_or_else(|| {
        let ops: Vec<_> = Op::ALL.iter().map(|o| o.name()).collect();
        Failure(
            StatusCode::NOT_FOUND,
            format!("no op {op:?} (ops: {})", ops.join(", ")),
        )
    })?;
    let entry = app.sets.get(&name).ok_or_else(|| no_set(&app, &name))?;
    let format = request_format(&headers)?;
    let d = entry.set.dim();
    let centre = Centre::On(entry.offset.clone());
    let req = parse(
        body,
        format,
        uri.query(),
        ("queries", Some(d), app.max_rows),
        centre,
    )
    .await?;
    check_params(op.name(), &req.params)?;
    let kernel = match op {
        Op::Knn => None,
        _ => Some(kernel_of(&app, &req.params, d)?),
    };
    let Ok(slot) = Arc::clone(&entry.queue).try_acquire_owned() else {
        return Err(Failure(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "set {name:?} is busy: {} requests queued (limit {}); retry later",
                entry.queue_depth, entry.queue_depth
            ),
        ));
    };
    let rows = req.rows.nrows();
    let output = req.params.output.clone();
    let e = Arc::clone(&entry);
    let answer = app
        .compute(deadline, move || {
            let _slot = slot;
            run_op(&e, op, kernel, &req)
        })
        .await?;
    declared(op.name(), &answer)?;
    let mut r = answer.respond(answer_format(&headers), output.as_deref())?;
    r.extensions_mut().insert(Served { rows });
    Ok(r)
}

/// `POST /v1/mean-shift`: MeanShift of the posted points.
pub async fn mean_shift(
    State(app): State<Arc<App>>,
    Extension(deadline): Extension<Deadline>,
    headers: HeaderMap,
    uri: Uri,
    body: Bytes,
) -> Result<Response, Failure> {
    app.check_ready()?;
    let format = request_format(&headers)?;
    let req = parse(
        body,
        format,
        uri.query(),
        ("points", None, app.max_rows),
        Centre::OwnMean,
    )
    .await?;
    check_params("mean-shift", &req.params)?;
    let kernel = kernel_of(&app, &req.params, req.rows.ncols())?;
    let mut params = MeanShiftParams::new().kernel(kernel);
    if let Some(m) = req.params.max_iter {
        params = params.max_iter(m);
    }
    let params = params.check()?;
    let rows = req.rows.nrows();
    let engine = app.engine.clone();
    let points: Array2<f32> = req.rows;
    let fit = app
        .compute(deadline, move || {
            engine.mean_shift_owned(&params, points, |_| {})
        })
        .await?;
    let answer = mean_shift_answer(fit, req.offset.as_ref());
    declared("mean-shift", &answer)?;
    let mut r = answer.respond(answer_format(&headers), req.params.output.as_deref())?;
    r.extensions_mut().insert(Served { rows });
    Ok(r)
}

/// 500 for an answer whose fields are not those `schema` declares (and
/// the OpenAPI description): never sent. A test keeps this from happening.
fn declared(op: &str, answer: &Answer) -> Result<(), Failure> {
    schema::conforms(op, answer).map_err(|e| {
        Failure(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal error: an answer not as declared: {e}"),
        )
    })
}

/// MeanShift's answer; the modes moved back by `offset` (what was
/// subtracted from the points), in `f64`, where there is one.
fn mean_shift_answer(fit: locus::MeanShiftFit, offset: Option<&Offset>) -> Answer {
    let populations: Vec<i64> = fit.populations.iter().map(|&p| p as i64).collect();
    let modes = match offset {
        Some(o) => {
            let mut m = fit.modes.mapv(f64::from);
            o.restore(&mut m);
            Field::F64(m.into_dyn())
        }
        None => Field::F32(fit.modes.into_dyn()),
    };
    Answer::default()
        .with_other("modes", modes)
        .with("labels", Field::I64(fit.labels.into_dyn()))
        .with_other(
            "populations",
            Field::I64(Array1::from(populations).into_dyn()),
        )
        .with("iterations", Field::Count(fit.iterations))
        .with("converged", Field::Flag(fit.converged))
        .with("bandwidth", Field::Number(f64::from(fit.bandwidth)))
}

/// What `GET /v1/sets` says of a set.
fn describe(name: &str, e: &Entry) -> Value {
    let s = &e.set;
    json!({
        "name": name,
        "keys": s.rows(),
        "dim": s.dim(),
        "value_cols": s.value_cols(),
        "classes": s.class_labels().map(|c| c.to_vec()),
        "weighted": e.weighted.is_some(),
        "resident_bytes": s.resident_bytes(),
        "offset": e.offset.as_ref().map(|o| o.columns().to_vec()),
        "queue_depth": e.queue_depth,
        "in_queue": e.in_queue(),
    })
}

/// `PUT /v1/sets/{name}`: creates or replaces a set; the old one serves
/// until the new one is prepared.
pub async fn put_set(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
    Extension(deadline): Extension<Deadline>,
    headers: HeaderMap,
    uri: Uri,
    body: Bytes,
) -> Result<Response, Failure> {
    app.check_ready()?;
    check_name(&name).map_err(bad)?;
    let format = request_format(&headers)?;
    let query = uri.query().map(str::to_string);
    // A large upload is parsed off the connection threads.
    let data = tokio::task::spawn_blocking(move || parse_set(&body, format, query.as_deref()))
        .await
        .map_err(|e| {
            Failure(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("internal error: {e}"),
            )
        })??;
    let rows = data.keys.nrows();
    let (engine, options, depth) = (app.engine.clone(), app.set_options, app.queue_depth);
    let entry = app
        .compute(deadline, move || data.build(&engine, options, depth))
        .await?;
    let described = describe(&name, &entry);
    let replaced = app.sets.insert(name, entry);
    let status = if replaced {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    let mut r = (
        status,
        axum::Json(json!({ "set": described, "replaced": replaced })),
    )
        .into_response();
    r.extensions_mut().insert(Served { rows });
    Ok(r)
}

/// `DELETE /v1/sets/{name}`: requests in flight on it finish on it.
pub async fn delete_set(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
) -> Result<Response, Failure> {
    if app.sets.remove(&name) {
        Ok(axum::Json(json!({ "deleted": name })).into_response())
    } else {
        Err(no_set(&app, &name))
    }
}

/// `GET /v1/sets`.
pub async fn list_sets(State(app): State<Arc<App>>) -> Response {
    let sets: Vec<Value> = app
        .sets
        .list()
        .iter()
        .map(|(n, e)| describe(n, e))
        .collect();
    axum::Json(json!({ "sets": sets, "backend": app.engine.backend().to_string() })).into_response()
}

/// `GET /v1/sets/{name}`.
pub async fn get_set(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
) -> Result<Response, Failure> {
    let e = app.sets.get(&name).ok_or_else(|| no_set(&app, &name))?;
    Ok(axum::Json(describe(&name, &e)).into_response())
}

/// `GET /livez`: the process answers.
pub async fn livez() -> Response {
    axum::Json(json!({ "status": "live" })).into_response()
}

/// `GET /readyz`: 200 once the start-up sets are prepared; 503 before,
/// and from a shutdown signal on.
pub async fn readyz(State(app): State<Arc<App>>) -> Response {
    match app.phase() {
        Phase::Ready => axum::Json(json!({ "status": "ready" })).into_response(),
        Phase::Loading => {
            Failure(StatusCode::SERVICE_UNAVAILABLE, "loading".into()).into_response()
        }
        Phase::Draining => Failure(
            StatusCode::SERVICE_UNAVAILABLE,
            "draining: shutting down once the requests in flight finish".into(),
        )
        .into_response(),
    }
}

/// `GET /openapi.json`: the OpenAPI description of the API.
pub async fn openapi() -> Response {
    axum::Json(super::openapi::document()).into_response()
}

/// `GET /metrics`: Prometheus text format — the request counters, then
/// the gauges of the compute permits, each set (queue, size, batching),
/// the engine's memory and the readiness.
pub async fn metrics(State(app): State<Arc<App>>) -> Response {
    let mut out = String::new();
    app.metrics.render(&mut out);
    let w = &mut out;
    let in_flight = app
        .max_in_flight
        .saturating_sub(app.in_flight.available_permits());
    family(
        w,
        "locus_in_flight",
        "gauge",
        "Requests computing now (each holds a compute permit).",
    );
    let _ = writeln!(w, "locus_in_flight {in_flight}");
    family(
        w,
        "locus_in_flight_limit",
        "gauge",
        "Most requests computing at once (--max-in-flight).",
    );
    let _ = writeln!(w, "locus_in_flight_limit {}", app.max_in_flight);
    let sets = app.sets.list();
    type Gauge = fn(&Entry) -> u64;
    let per_set: [(&str, &str, &str, Gauge); 6] = [
        (
            "locus_queue_depth",
            "gauge",
            "Requests admitted on a set now (queued in its batching or computing).",
            |e| e.in_queue() as u64,
        ),
        (
            "locus_queue_capacity",
            "gauge",
            "Most requests admitted on a set at once (--queue-depth); more are answered 429.",
            |e| e.queue_depth as u64,
        ),
        ("locus_set_keys", "gauge", "Keys in a set.", |e| {
            e.set.rows() as u64
        }),
        (
            "locus_set_resident_bytes",
            "gauge",
            "Bytes the backend holds for a set.",
            |e| e.set.resident_bytes(),
        ),
        (
            "locus_set_batches_total",
            "counter",
            "Batches run on a set (coalesced concurrent requests).",
            |e| e.set.stats().batches,
        ),
        (
            "locus_set_batched_requests_total",
            "counter",
            "Requests served through a set's batches.",
            |e| e.set.stats().batched_requests,
        ),
    ];
    for (name, kind, help, value) in per_set {
        family(w, name, kind, help);
        for (set, e) in &sets {
            let _ = writeln!(w, "{name}{{set=\"{}\"}} {}", escape(set), value(e));
        }
    }
    let mem = app.engine.memory_usage();
    family(
        w,
        "locus_engine_memory_bytes",
        "gauge",
        "Memory the engine holds (sets and calls in progress).",
    );
    let _ = writeln!(w, "locus_engine_memory_bytes {}", mem.in_use);
    if let Some(limit) = mem.limit {
        family(
            w,
            "locus_engine_memory_limit_bytes",
            "gauge",
            "The engine's memory limit (--memory-limit-mib).",
        );
        let _ = writeln!(w, "locus_engine_memory_limit_bytes {limit}");
    }
    family(w, "locus_ready", "gauge", "1 when /readyz answers 200.");
    let _ = writeln!(w, "locus_ready {}", u8::from(app.phase() == Phase::Ready));
    let b = app.engine.backend();
    family(
        w,
        "locus_backend_info",
        "gauge",
        "The backend the sets live on (kind and adapter).",
    );
    let _ = writeln!(
        w,
        "locus_backend_info{{kind=\"{}\",adapter=\"{}\"}} 1",
        b.kind(),
        escape(&b.to_string())
    );
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out,
    )
        .into_response()
}

/// The op label of a request and the set it names, from its route (a
/// bounded set of labels: unknown paths are `unknown`).
pub fn route_of<'a>(method: &Method, path: &'a str) -> (&'static str, Option<&'a str>) {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (method, parts.as_slice()) {
        (_, ["v1", "sets", name, op]) => (Op::parse(op).map_or("unknown", Op::name), Some(*name)),
        (_, ["v1", "mean-shift"]) => ("mean-shift", None),
        (&Method::PUT, ["v1", "sets", name]) => ("put-set", Some(*name)),
        (&Method::DELETE, ["v1", "sets", name]) => ("delete-set", Some(*name)),
        (_, ["v1", "sets", name]) => ("get-set", Some(*name)),
        (_, ["v1", "sets"]) => ("list-sets", None),
        (_, ["livez"]) => ("livez", None),
        (_, ["readyz"]) => ("readyz", None),
        (_, ["metrics"]) => ("metrics", None),
        (_, ["openapi.json"]) => ("openapi", None),
        _ => ("unknown", None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_give_bounded_op_labels() {
        let m = Method::POST;
        assert_eq!(route_of(&m, "/v1/sets/a/knn"), ("knn", Some("a")));
        assert_eq!(route_of(&m, "/v1/sets/a/nope"), ("unknown", Some("a")));
        assert_eq!(route_of(&Method::PUT, "/v1/sets/a"), ("put-set", Some("a")));
        assert_eq!(route_of(&m, "/v1/mean-shift"), ("mean-shift", None));
        assert_eq!(route_of(&m, "/anything/else"), ("unknown", None));
    }

    /// Every op's answer has the fields `schema` declares (and so the
    /// OpenAPI description), with both degrees of the local mean.
    #[test]
    fn every_answer_is_as_declared() {
        use super::super::sets::SetData;
        use super::super::wire::Request;
        let engine = locus::Engine::cpu();
        let keys = Array2::from_shape_fn((12, 2), |(i, j)| (i * (j + 1)) as f32 * 0.25);
        let data = SetData {
            offset: None,
            values: Some(keys.mapv(|x| x * 2.0)),
            labels: Some(Array1::from_shape_fn(12, |i| (i % 3) as i64)),
            weights: Some(Array1::from_elem(12, 1.0)),
            keys: keys.clone(),
        };
        let entry = data
            .build(&engine, locus::KeySetOptions::default(), 4)
            .unwrap();
        let kernel = Kernel::new(Profile::Gaussian, 1.0).unwrap();
        let rows = keys.slice(ndarray::s![..3, ..]).to_owned();
        let cases = Op::ALL.iter().map(|&op| (op, Params::default())).chain([(
            Op::LocalMean,
            Params {
                degree: Some(1),
                ..Params::default()
            },
        )]);
        for (op, mut params) in cases {
            if op == Op::Knn {
                params.k = Some(3);
            }
            let req = Request {
                params,
                rows: rows.clone(),
                offset: None,
            };
            let answer = run_op(&entry, op, Some(kernel), &req).unwrap();
            schema::conforms(op.name(), &answer).unwrap();
            // A field the declaration lacks is caught.
            let more = answer.with("extra", Field::Count(0));
            assert!(schema::conforms(op.name(), &more).is_err());
        }
        let fit = engine
            .mean_shift_owned(
                &MeanShiftParams::new().kernel(kernel).check().unwrap(),
                keys,
                |_| {},
            )
            .unwrap();
        let moved = Offset::of(
            ndarray::array![[1e7f64, 0.0], [1e7 + 2.0, 1.0]].view(),
            false,
        );
        assert!(moved.is_some());
        let modes = fit.modes.clone();
        let moved_back = mean_shift_answer(fit.clone(), moved.as_ref());
        schema::conforms("mean-shift", &moved_back).unwrap();
        match &moved_back.fields[0] {
            (_, Field::F64(m)) => assert_eq!(m[[0, 0]], 1e7 + f64::from(modes[[0, 0]])),
            _ => panic!("modes moved back are float64"),
        }
        schema::conforms("mean-shift", &mean_shift_answer(fit, None)).unwrap();
        assert_eq!(schema::OPS[..6], Op::ALL.map(Op::name));
    }

    #[test]
    fn params_an_op_does_not_take_are_refused() {
        let p = Params {
            k: Some(3),
            ..Params::default()
        };
        assert!(check_params("knn", &p).is_ok());
        assert!(
            check_params("local-mean", &p)
                .unwrap_err()
                .1
                .contains("\"k\"")
        );
        let p = Params {
            degree: Some(1),
            ..Params::default()
        };
        assert!(check_params("local-mean", &p).is_ok());
        assert!(check_params("density", &p).is_err());
    }
}
