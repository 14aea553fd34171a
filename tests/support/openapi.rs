//! The OpenAPI description docs/openapi.json holds, and a check of an answer
//! against it: its route and method declared (or an error status a router
//! gives an undeclared one), its status declared for the operation, its
//! media type declared for the status, its required headers there, and a JSON body valid under the
//! declared schema (the subset of JSON Schema the description uses: `$ref`,
//! `type` with `nullable`, `properties`, `required`,
//! `additionalProperties: false`, `items`, `minItems`, `maxItems`, `enum`,
//! `anyOf`, `minimum`, `maximum`). support/http.rs runs it on every answer
//! its client reads in a test.
#![allow(dead_code)]

use std::sync::OnceLock;

use serde_json::Value;

/// The description's text as docs/openapi.json holds it (what `locus
/// serve --print-openapi` prints).
pub fn docs_copy() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.json");
    std::fs::read_to_string(path).expect("docs/openapi.json")
}

/// The description docs/openapi.json holds, parsed.
pub fn document() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| serde_json::from_str(&docs_copy()).expect("docs/openapi.json is JSON"))
}

/// `v` with a `$ref` followed (within the document).
fn resolve<'a>(doc: &'a Value, v: &'a Value) -> &'a Value {
    match v.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let pointer = r.strip_prefix('#').expect("a local $ref");
            resolve(doc, doc.pointer(pointer).unwrap_or(&Value::Null))
        }
        None => v,
    }
}

/// Whether `path` (no query string) matches `template` (`{x}` one segment).
fn matches(template: &str, path: &str) -> bool {
    let (t, p): (Vec<&str>, Vec<&str>) = (template.split('/').collect(), path.split('/').collect());
    t.len() == p.len()
        && t.iter()
            .zip(&p)
            .all(|(t, p)| t == p || (t.starts_with('{') && !p.is_empty()))
}

/// Checks `value` against `schema`; `at` names the place in errors.
pub fn validate(doc: &Value, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    let s = resolve(doc, schema);
    if let Some(any) = s.get("anyOf").and_then(Value::as_array)
        && !any.iter().any(|a| validate(doc, a, value, at).is_ok())
    {
        return Err(format!("{at}: {value} matches none of anyOf"));
    }
    if value.is_null() {
        let nullable = s.get("nullable").and_then(Value::as_bool) == Some(true);
        return if nullable || s.get("type").is_none() {
            Ok(())
        } else {
            Err(format!("{at}: null, and the schema is not nullable"))
        };
    }
    if let Some(options) = s.get("enum").and_then(Value::as_array)
        && !options.contains(value)
    {
        return Err(format!("{at}: {value} not in {options:?}"));
    }
    let number = |v: &Value| v.as_f64();
    if let (Some(min), Some(x)) = (s.get("minimum").and_then(number), number(value))
        && x < min
    {
        return Err(format!("{at}: {x} below the minimum {min}"));
    }
    if let (Some(max), Some(x)) = (s.get("maximum").and_then(number), number(value))
        && x > max
    {
        return Err(format!("{at}: {x} above the maximum {max}"));
    }
    let Some(ty) = s.get("type").and_then(Value::as_str) else {
        return Ok(());
    };
    let ok = match ty {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64(),
        other => return Err(format!("{at}: the checker knows no type {other:?}")),
    };
    if !ok {
        return Err(format!("{at}: {value} is not of type {ty}"));
    }
    if let Some(items) = value.as_array() {
        let len = items.len() as u64;
        if s.get("minItems")
            .and_then(Value::as_u64)
            .is_some_and(|m| len < m)
        {
            return Err(format!("{at}: fewer items than minItems"));
        }
        if s.get("maxItems")
            .and_then(Value::as_u64)
            .is_some_and(|m| len > m)
        {
            return Err(format!("{at}: more items than maxItems"));
        }
        if let Some(item) = s.get("items") {
            for (i, v) in items.iter().enumerate() {
                validate(doc, item, v, &format!("{at}[{i}]"))?;
            }
        }
    }
    if let Some(fields) = value.as_object() {
        let properties = s.get("properties").and_then(Value::as_object);
        for name in s
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = name.as_str().unwrap_or_default();
            if !fields.contains_key(name) {
                return Err(format!("{at}: the required field {name:?} is missing"));
            }
        }
        for (name, v) in fields {
            match properties.and_then(|p| p.get(name)) {
                Some(p) => validate(doc, p, v, &format!("{at}.{name}"))?,
                None if s.get("additionalProperties") == Some(&Value::Bool(false)) => {
                    return Err(format!("{at}: the field {name:?} is not declared"));
                }
                None => {}
            }
        }
    }
    Ok(())
}

/// The statuses a request to a route or method the description does not
/// declare may be answered with (the router's 404 and 405, the key and
/// body checks that run before routing, hyper's protocol errors).
const UNROUTED: [u16; 9] = [400, 401, 403, 404, 405, 408, 413, 414, 431];

/// Checks an answer (`headers` its headers, names lower-case; `body` its
/// bytes) to `method path` against the description.
pub fn check(
    method: &str,
    path: &str,
    status: u16,
    headers: &[(String, String)],
    body: &[u8],
) -> Result<(), String> {
    let content_type = headers
        .iter()
        .find(|(k, _)| k == "content-type")
        .map(|(_, v)| v.as_str());
    let doc = document();
    let path = path.split('?').next().unwrap_or_default();
    let paths = doc["paths"].as_object().expect("paths");
    // A literal segment wins over a template (none overlap today).
    let item = paths
        .iter()
        .filter(|(t, _)| matches(t, path))
        .min_by_key(|(t, _)| t.matches('{').count())
        .map(|(_, v)| v);
    let operation = item.and_then(|i| i.get(method.to_ascii_lowercase()));
    let media = content_type
        .and_then(|c| c.split(';').next())
        .map(|c| c.trim().to_ascii_lowercase());
    let Some(operation) = operation else {
        if !UNROUTED.contains(&status) {
            return Err(format!(
                "{method} {path} is not declared, and {status} is not an answer to an undeclared route"
            ));
        }
        let v: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
        return validate(doc, &doc["components"]["schemas"]["Error"], &v, "body");
    };
    let answer = operation["responses"]
        .get(status.to_string())
        .ok_or_else(|| format!("{method} {path}: status {status} is not declared"))?;
    let answer = resolve(doc, answer);
    let required = answer.get("headers").and_then(Value::as_object);
    for (name, h) in required.into_iter().flatten() {
        let name = name.to_ascii_lowercase();
        if h.get("required") == Some(&Value::Bool(true)) && !headers.iter().any(|(k, _)| *k == name)
        {
            return Err(format!(
                "{method} {path} {status}: the required header {name:?} is missing"
            ));
        }
    }
    let Some(content) = answer.get("content").and_then(Value::as_object) else {
        return if body.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{method} {path} {status}: a body, and none is declared"
            ))
        };
    };
    let media = media.ok_or_else(|| format!("{method} {path} {status}: no Content-Type"))?;
    let declared = content.get(&media).ok_or_else(|| {
        format!(
            "{method} {path} {status}: Content-Type {media:?} is not declared (declared: {:?})",
            content.keys().collect::<Vec<_>>()
        )
    })?;
    if media != "application/json" {
        return Ok(());
    }
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    validate(doc, &declared["schema"], &v, "body")
        .map_err(|e| format!("{method} {path} {status}: {e}"))
}
