//! The OpenAPI 3.0 description of the API (`GET /openapi.json`, `locus
//! serve --print-openapi`), built from the declarations the handlers use:
//! each op's parameters and answer fields from `schema`, the media types
//! from `wire`, the error kinds from `app`. docs/openapi.json is a copy; a
//! test checks it is what the service serves, and the end-to-end tests
//! check every answer they see against it.
//!
//! Imports: `super::{app, schema, sets, wire}`.

use serde_json::{Map, Value, json};

use super::app::kind;
use super::arrow::ARROW;
use super::schema::{self, FieldSpec, Kind};
use super::sets::MAX_NAME;
use super::wire::NPY;

/// The error statuses an answer may have, and what each means.
const ERRORS: [(u16, &str); 14] = [
    (
        400,
        "malformed JSON, .npy or HTTP; wrong widths; non-finite numbers; bad parameters",
    ),
    (401, "no or unknown API key"),
    (403, "a read key on an admin route"),
    (404, "no such set, op or route"),
    (405, "the method is not allowed on this route"),
    (408, "the body did not arrive within --body-timeout-ms"),
    (413, "more rows than --max-rows, or a body over its limit"),
    (414, "the request URI is too long"),
    (415, "a Content-Type other than JSON, .npy or Arrow"),
    (422, "an op the set cannot serve; MeanShift finding no mode"),
    (
        429,
        "the set's queue is full; retry after Retry-After seconds",
    ),
    (431, "too many or too large headers"),
    (500, "a GPU failure"),
    (
        503,
        "loading, busy, past the request timeout or over the memory limit; retry after Retry-After seconds",
    ),
];

/// Which errors a route may answer.
#[derive(Clone, Copy)]
struct Route {
    /// Behind an API key (401).
    keyed: bool,
    /// Behind an admin key (403).
    admin: bool,
    /// Reads a body (408, 413, 415).
    body: bool,
    /// Names a set (404).
    set: bool,
    /// Computes (422, 503, 500).
    computes: bool,
    /// Queues on a set (429).
    queues: bool,
}

const READ: Route = Route {
    keyed: true,
    admin: false,
    body: false,
    set: false,
    computes: false,
    queues: false,
};

/// The error statuses of `r`.
fn errors_of(r: Route) -> Vec<u16> {
    let mut codes = vec![400, 405, 414, 431];
    if r.keyed {
        codes.push(401);
    }
    if r.admin {
        codes.push(403);
    }
    if r.set {
        codes.push(404);
    }
    if r.body {
        codes.extend([408, 413, 415]);
    }
    if r.computes {
        codes.extend([422, 500, 503]);
    }
    if r.queues {
        codes.push(429);
    }
    codes.sort_unstable();
    codes
}

/// A schema reference.
fn refer(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

/// The schema of a declared answer field.
fn field_schema(s: &FieldSpec) -> Value {
    let mut v = match s.kind {
        Kind::F32 | Kind::F64 | Kind::Position => json!({ "type": "number", "nullable": true }),
        Kind::I64 => json!({ "type": "integer" }),
        Kind::Count => json!({ "type": "integer", "minimum": 0 }),
        Kind::Number => json!({ "type": "number" }),
        Kind::Flag => json!({ "type": "boolean" }),
    };
    for _ in 0..s.rank {
        v = json!({ "type": "array", "items": v });
    }
    if let Value::Object(m) = &mut v {
        m.insert("description".into(), s.about.into());
    }
    v
}

/// The JSON answer of `op`: exactly its declared fields.
fn answer_schema(op: &str) -> Value {
    let fields = schema::answer(op);
    let properties: Map<String, Value> = fields
        .iter()
        .map(|s| (s.name.to_string(), field_schema(s)))
        .collect();
    let required: Vec<&str> = fields.iter().filter(|s| s.always).map(|s| s.name).collect();
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

/// A parameter's schema in a JSON body.
fn param_schema(name: &str) -> Value {
    match name {
        "kernel" => json!({
            "type": "string",
            "description": "a kernel profile: gaussian, epanechnikov, uniform, triangular, \
                            biweight, laplacian, cauchy, cosine (or an alias such as tophat); \
                            default the service's",
        }),
        "bandwidth" => json!({
            "type": "number", "minimum": 0, "exclusiveMinimum": true,
            "description": "the kernel's bandwidth; default the service's",
        }),
        "blocks" => json!({
            "type": "array",
            "minItems": 1,
            "description": "a product kernel over consecutive coordinate blocks, \
                            [dims, profile, bandwidth] each (instead of kernel and bandwidth)",
            "items": {
                "type": "array", "minItems": 3, "maxItems": 3,
                "items": { "anyOf": [{ "type": "number" }, { "type": "string" }] },
            },
        }),
        "degree" => json!({
            "type": "integer", "minimum": 0, "maximum": 1,
            "description": "0: local means; 1: local linear fits (default 0)",
        }),
        "k" => {
            json!({ "type": "integer", "minimum": 1, "description": "the neighbours sought (knn needs it)" })
        }
        "max_iter" => {
            json!({ "type": "integer", "minimum": 1, "description": "most MeanShift iterations" })
        }
        _ => json!({}),
    }
}

/// Rows of numbers, `what` each.
fn rows(about: &str) -> Value {
    json!({
        "type": "array",
        "minItems": 1,
        "description": about,
        "items": { "type": "array", "minItems": 1, "items": { "type": "number" } },
    })
}

/// The JSON request of `op`: its points and the parameters it takes.
fn request_schema(op: &str) -> Value {
    let points = schema::points_field(op);
    let mut properties = Map::new();
    properties.insert(
        points.into(),
        rows("the points, one row of d coordinates each (d the set's width)"),
    );
    for p in schema::params(op) {
        properties.insert((*p).into(), param_schema(p));
    }
    let required: &[&str] = if op == "knn" {
        &["queries", "k"]
    } else {
        &[points]
    };
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

/// A binary body.
fn binary(about: &str) -> Value {
    json!({ "schema": { "type": "string", "format": "binary", "description": about } })
}

/// The query-string parameters of `op` (for `.npy` and Arrow bodies; a
/// JSON body carries its parameters, and takes only `output` here).
fn query_parameters(op: &str) -> Vec<Value> {
    let mut out = vec![json!({ "$ref": "#/components/parameters/SetName" })];
    if op == "mean-shift" {
        out.clear();
    }
    for p in schema::params(op) {
        let mut s = param_schema(p);
        if *p == "blocks" {
            s = json!({
                "type": "string",
                "description": "dims:profile:bandwidth per block, comma separated \
                                (e.g. 2:uniform:8,3:gaussian:6)",
            });
        }
        out.push(json!({
            "name": p,
            "in": "query",
            "required": false,
            "description": "with a binary body only (a JSON body carries its parameters)",
            "schema": s,
        }));
    }
    let arrays: Vec<&str> = schema::answer(op)
        .iter()
        .filter(|s| s.rank > 0)
        .map(|s| s.name)
        .collect();
    out.push(json!({
        "name": "output",
        "in": "query",
        "required": false,
        "description": "the array a binary answer carries (default the first)",
        "schema": { "type": "string", "enum": arrays },
    }));
    out
}

/// The answers of a route: its successes and its errors.
fn responses(ok: Vec<(u16, Value)>, r: Route) -> Value {
    let mut m = Map::new();
    for (code, v) in ok {
        m.insert(code.to_string(), v);
    }
    for code in errors_of(r) {
        m.insert(
            code.to_string(),
            json!({ "$ref": format!("#/components/responses/E{code}") }),
        );
    }
    Value::Object(m)
}

/// A JSON answer with `schema`.
fn json_answer(about: &str, schema: Value) -> Value {
    json!({ "description": about, "content": { "application/json": { "schema": schema } } })
}

/// The operation of a query op (`POST /v1/sets/{name}/{op}`, or
/// `POST /v1/mean-shift`).
fn compute_operation(op: &str) -> Value {
    let on_set = op != "mean-shift";
    let scalars: Map<String, Value> = schema::answer(op)
        .iter()
        .filter(|s| s.rank == 0)
        .map(|s| {
            (
                format!("x-locus-{}", s.name.replace('_', "-")),
                json!({ "description": format!("binary answers: {}", s.about), "schema": field_schema(s) }),
            )
        })
        .chain([(
            "x-locus-array".to_string(),
            json!({ "description": "binary answers: the array sent", "schema": { "type": "string" } }),
        )])
        .collect();
    let ok = json!({
        "description": "the answer: a JSON object, or with Accept naming a binary type the \
                        array output= names",
        "headers": scalars,
        "content": {
            "application/json": { "schema": refer(&format!("{}Answer", camel(op))) },
            (NPY): binary("one array as .npy (float32; float64 for sum, weighted and densities; int64 for labels and indices)"),
            (ARROW): binary("the answer as an Arrow IPC stream"),
        },
    });
    let points = if on_set { "queries" } else { "points" };
    json!({
        "operationId": op.replace('-', "_"),
        "tags": ["queries"],
        "summary": format!("{op} of the posted {points}"),
        "parameters": query_parameters(op),
        "requestBody": {
            "required": true,
            "content": {
                "application/json": { "schema": refer(&format!("{}Request", camel(op))) },
                (NPY): binary("the points as one .npy array (float32 or float64, N×d)"),
                (ARROW): binary("the points as an Arrow IPC stream"),
            },
        },
        "responses": responses(vec![(200, ok)], Route {
            body: true,
            set: on_set,
            computes: true,
            queues: on_set,
            ..READ
        }),
    })
}

/// `local-mean` as `LocalMean`.
fn camel(op: &str) -> String {
    op.split('-')
        .map(|w| {
            let mut c = w.chars();
            c.next().map_or(String::new(), |f| {
                f.to_ascii_uppercase().to_string() + c.as_str()
            })
        })
        .collect()
}

/// What `GET /v1/sets/{name}` says of a set.
fn set_info() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["name", "keys", "dim", "value_cols", "classes", "weighted",
                     "resident_bytes", "offset", "queue_depth", "in_queue"],
        "properties": {
            "name": { "type": "string" },
            "keys": { "type": "integer", "minimum": 0, "description": "its keys, N" },
            "dim": { "type": "integer", "minimum": 0, "description": "their width, d" },
            "value_cols": { "type": "integer", "nullable": true, "description": "value columns, q (null: no values)" },
            "classes": { "type": "array", "nullable": true, "items": { "type": "integer" },
                         "description": "the class labels (null: no labels)" },
            "weighted": { "type": "boolean" },
            "resident_bytes": { "type": "integer", "minimum": 0 },
            "offset": { "type": "array", "nullable": true, "items": { "type": "number" },
                        "description": "per coordinate, what was subtracted from the keys (given as float64) and is from every query before rounding to float32 (null: nothing)" },
            "queue_depth": { "type": "integer", "minimum": 0, "description": "--queue-depth" },
            "in_queue": { "type": "integer", "minimum": 0, "description": "requests admitted now" },
        },
    })
}

/// The components: schemas, error answers, parameters, security.
fn components() -> Value {
    let mut schemas = Map::new();
    for op in schema::OPS {
        schemas.insert(format!("{}Request", camel(op)), request_schema(op));
        schemas.insert(format!("{}Answer", camel(op)), answer_schema(op));
    }
    let kinds: Vec<&str> = ERRORS
        .iter()
        .map(|(c, _)| match c {
            414 => "uri_too_long",
            c => kind(axum::http::StatusCode::from_u16(*c).unwrap_or_default()),
        })
        .collect();
    schemas.insert(
        "Error".into(),
        json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["error", "kind"],
            "properties": {
                "error": { "type": "string", "description": "what went wrong, for people" },
                "kind": { "type": "string", "enum": kinds, "description": "what went wrong, for programs" },
            },
        }),
    );
    schemas.insert("SetInfo".into(), set_info());
    schemas.insert(
        "SetList".into(),
        json!({
            "type": "object", "additionalProperties": false, "required": ["sets", "backend"],
            "properties": {
                "sets": { "type": "array", "items": refer("SetInfo") },
                "backend": { "type": "string", "description": "the backend the sets live on" },
            },
        }),
    );
    schemas.insert(
        "SetUpload".into(),
        json!({
            "type": "object", "additionalProperties": false, "required": ["keys"],
            "properties": {
                "keys": rows("the keys, N×d"),
                "values": {
                    "description": "the values, N×q or N (for local-mean and row-states)",
                    "anyOf": [rows("N×q"), { "type": "array", "items": { "type": "number" } }],
                },
                "labels": { "type": "array", "items": { "type": "integer" },
                            "description": "N class labels, non-negative (for classify)" },
                "weights": { "type": "array", "items": { "type": "number", "minimum": 0 },
                             "description": "N weights, not all zero (for density and log-density)" },
            },
        }),
    );
    schemas.insert(
        "SetChange".into(),
        json!({
            "type": "object", "additionalProperties": false, "required": ["set", "replaced"],
            "properties": { "set": refer("SetInfo"), "replaced": { "type": "boolean" } },
        }),
    );
    schemas.insert(
        "Status".into(),
        json!({
            "type": "object", "additionalProperties": false, "required": ["status"],
            "properties": { "status": { "type": "string", "enum": ["live", "ready"] } },
        }),
    );
    let retry = json!({
        "Retry-After": { "description": "seconds to wait", "required": true, "schema": { "type": "integer" } },
    });
    let mut answers = Map::new();
    for (code, about) in ERRORS {
        let mut v = json_answer(about, refer("Error"));
        if matches!(code, 429 | 503) {
            v["headers"] = retry.clone();
        }
        if code == 401 {
            v["headers"] = json!({
                "WWW-Authenticate": { "description": "Bearer", "required": true, "schema": { "type": "string" } },
            });
        }
        answers.insert(format!("E{code}"), v);
    }
    json!({
        "schemas": schemas,
        "responses": answers,
        "parameters": {
            "SetName": {
                "name": "name", "in": "path", "required": true,
                "description": format!("the set: 1 to {MAX_NAME} letters, digits, '_', '-', '.'"),
                "schema": { "type": "string", "pattern": format!("^[A-Za-z0-9_.-]{{1,{MAX_NAME}}}$") },
                "example": "iris",
            },
        },
        "securitySchemes": {
            "bearer": {
                "type": "http", "scheme": "bearer",
                "description": "an API key of --api-keys or LOCUS_API_KEYS (read: queries; admin: also set changes); a service without keys needs none",
            },
        },
    })
}

/// The OpenAPI document.
pub fn document() -> Value {
    let mut paths = Map::new();
    for op in &schema::OPS[..6] {
        paths.insert(
            format!("/v1/sets/{{name}}/{op}"),
            json!({ "post": compute_operation(op) }),
        );
    }
    paths.insert(
        "/v1/mean-shift".into(),
        json!({ "post": compute_operation("mean-shift") }),
    );
    paths.insert(
        "/v1/sets".into(),
        json!({ "get": {
            "operationId": "list_sets", "tags": ["sets"], "summary": "every set",
            "responses": responses(vec![(200, json_answer("the sets", refer("SetList")))], READ),
        } }),
    );
    let set_param = json!([{ "$ref": "#/components/parameters/SetName" }]);
    let set_change = |about: &str| json_answer(about, refer("SetChange"));
    paths.insert(
        "/v1/sets/{name}".into(),
        json!({
            "get": {
                "operationId": "get_set", "tags": ["sets"], "summary": "one set",
                "parameters": set_param,
                "responses": responses(vec![(200, json_answer("the set", refer("SetInfo")))],
                                       Route { set: true, ..READ }),
            },
            "put": {
                "operationId": "put_set", "tags": ["sets"],
                "summary": "create or replace a set (admin); the old one serves until the new one is prepared",
                "parameters": [
                    { "$ref": "#/components/parameters/SetName" },
                    { "name": "parts", "in": "query", "required": false,
                      "description": ".npy uploads: the parts in the body, in order (default keys)",
                      "schema": { "type": "string", "example": "keys,values" } },
                ],
                "requestBody": { "required": true, "content": {
                    "application/json": { "schema": refer("SetUpload") },
                    (NPY): binary(".npy files one after the other, named by parts="),
                    (ARROW): binary("the set as an Arrow IPC stream"),
                } },
                "responses": responses(vec![
                    (200, set_change("replaced")),
                    (201, set_change("created")),
                ], Route { admin: true, body: true, computes: true, ..READ }),
            },
            "delete": {
                "operationId": "delete_set", "tags": ["sets"], "summary": "drop a set (admin)",
                "parameters": set_param,
                "responses": responses(vec![(200, json_answer("dropped", json!({
                    "type": "object", "additionalProperties": false, "required": ["deleted"],
                    "properties": { "deleted": { "type": "string" } },
                })))], Route { admin: true, set: true, ..READ }),
            },
        }),
    );
    let open = Route {
        keyed: false,
        ..READ
    };
    let probe = |id: &str, summary: &str, ok: &str, fails: bool| {
        let mut r = responses(vec![(200, json_answer(ok, refer("Status")))], open);
        if fails {
            r["503"] = json!({ "$ref": "#/components/responses/E503" });
        }
        json!({ "get": {
            "operationId": id, "tags": ["probes"], "summary": summary, "security": [],
            "responses": r,
        } })
    };
    paths.insert(
        "/livez".into(),
        probe("livez", "the process answers", "live", false),
    );
    paths.insert(
        "/readyz".into(),
        probe(
            "readyz",
            "ready for queries (503 while loading and draining)",
            "ready",
            true,
        ),
    );
    paths.insert(
        "/metrics".into(),
        json!({ "get": {
            "operationId": "metrics", "tags": ["probes"], "summary": "Prometheus text format 0.0.4",
            "responses": responses(vec![(200, json!({
                "description": "the metrics",
                "content": { "text/plain": { "schema": { "type": "string" } } },
            }))], READ),
        } }),
    );
    paths.insert(
        "/openapi.json".into(),
        json!({ "get": {
            "operationId": "openapi", "tags": ["probes"], "summary": "this description",
            "security": [],
            "responses": responses(vec![(200, json_answer("the OpenAPI document", json!({ "type": "object" })))], open),
        } }),
    );
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "locus serve",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Kernel local means, row states, densities, classification, kNN \
                            and MeanShift over named key sets (docs/serve.md).",
        },
        "security": [{ "bearer": [] }],
        "paths": paths,
        "components": components(),
    })
}

/// The document as `locus serve --print-openapi` prints it (and
/// docs/openapi.json holds it): two-space indented JSON.
pub fn pretty() -> String {
    serde_json::to_string_pretty(&document()).unwrap_or_default()
}
