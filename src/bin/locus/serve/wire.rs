//! Wire formats. A query op's request is a JSON body (`{"queries":
//! [[…]], "kernel": …}`) or an `.npy` body (`Content-Type:
//! application/x-npy`, parameters in the query string); its answer is a
//! JSON object, or one of its arrays as `.npy` (`Accept:
//! application/x-npy`, the array chosen by `output=`, the counts in
//! `x-locus-*` headers). A set upload is a JSON object of arrays or `.npy`
//! files sent one after the other (`parts=keys,values,…`). Arrow IPC
//! streams (`application/vnd.apache.arrow.stream`) serve all three; the
//! `arrow` module reads and writes them.
//!
//! Imports: `super::{app, arrow, field, sets}`, `crate::npy`.

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use ndarray::{Array1, Array2, Ix1, Ix2};
use serde::{Deserialize, Serialize};

use super::app::{Failure, bad, too_many_rows};
use super::arrow::{self, ARROW};
use super::sets::{Centre, SetData};
use crate::io::Points;
use crate::points::Offset;
use crate::{npy, npy_write};

pub use super::field::Field;

/// The media type of `.npy` bodies.
pub const NPY: &str = "application/x-npy";

/// A body's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `application/json` (or no `Content-Type`).
    Json,
    /// `application/x-npy`.
    Npy,
    /// `application/vnd.apache.arrow.stream`.
    Arrow,
}

/// The format of a request's body, by its `Content-Type` (415 for others).
pub fn request_format(headers: &HeaderMap) -> Result<Format, Failure> {
    let Some(ct) = headers.get(header::CONTENT_TYPE) else {
        return Ok(Format::Json);
    };
    let ct = ct.to_str().unwrap_or("").to_ascii_lowercase();
    let media = ct.split(';').next().unwrap_or("").trim();
    match media {
        "application/json" | "" => Ok(Format::Json),
        NPY => Ok(Format::Npy),
        ARROW => Ok(Format::Arrow),
        other => Err(Failure(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("Content-Type {other:?}: send application/json, {NPY} or {ARROW}"),
        )),
    }
}

/// The format an answer is asked in, by `Accept` (JSON unless it names
/// Arrow or `.npy`; Arrow when it names both).
pub fn answer_format(headers: &HeaderMap) -> Format {
    let asks = |media: &str| {
        headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.to_ascii_lowercase().contains(media))
    };
    if asks(ARROW) {
        Format::Arrow
    } else if asks(NPY) {
        Format::Npy
    } else {
        Format::Json
    }
}

/// A query op's parameters, from a JSON body or a query string.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Params {
    /// Kernel profile.
    pub kernel: Option<String>,
    /// Bandwidth.
    pub bandwidth: Option<f64>,
    /// A product kernel: `(dims, profile, bandwidth)` per block.
    pub blocks: Option<Vec<(usize, String, f64)>>,
    /// Local polynomial degree (local-mean).
    pub degree: Option<usize>,
    /// Neighbours (knn).
    pub k: Option<usize>,
    /// Most MeanShift iterations.
    pub max_iter: Option<usize>,
    /// Which array an `.npy` answer carries.
    pub output: Option<String>,
}

/// A JSON query request.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonQuery {
    #[serde(default, deserialize_with = "query_rows")]
    queries: Option<Rows>,
    #[serde(default, deserialize_with = "point_rows")]
    points: Option<Rows>,
    kernel: Option<String>,
    bandwidth: Option<f64>,
    blocks: Option<Vec<(usize, String, f64)>>,
    degree: Option<usize>,
    k: Option<usize>,
    max_iter: Option<usize>,
}

/// A parsed query request.
pub struct Request {
    /// Its parameters.
    pub params: Params,
    /// The query points (`M × d`), centred as [`Centre`] asked and
    /// rounded to `f32`.
    pub rows: Array2<f32>,
    /// What was subtracted from them in `f64` before they were rounded.
    pub offset: Option<Offset>,
}

/// Decodes `%XX` and `+` in a query-string component.
fn percent_decode(s: &str) -> Result<String, Failure> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = b
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| bad(format!("bad percent escape in the query string: {s:?}")))?;
                out.push(hex);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| bad("the query string is not UTF-8"))
}

fn number<T: std::str::FromStr>(key: &str, v: &str) -> Result<T, Failure> {
    v.trim()
        .parse()
        .map_err(|_| bad(format!("query parameter {key}={v:?} is not a number")))
}

/// Parameters from a query string: `kernel`, `bandwidth`, `blocks`
/// (`dims:profile:bandwidth,…`), `degree`, `k`, `max_iter`, `output`.
pub fn params_from_query(query: Option<&str>) -> Result<Params, Failure> {
    let mut p = Params::default();
    let mut seen = Vec::new();
    for pair in query.unwrap_or("").split('&').filter(|s| !s.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (k, v) = (percent_decode(k)?, percent_decode(v)?);
        if seen.contains(&k) {
            return Err(bad(format!("query parameter {k:?} given twice")));
        }
        match k.as_str() {
            "kernel" => p.kernel = Some(v),
            "bandwidth" => p.bandwidth = Some(number(&k, &v)?),
            "degree" => p.degree = Some(number(&k, &v)?),
            "k" => p.k = Some(number(&k, &v)?),
            "max_iter" => p.max_iter = Some(number(&k, &v)?),
            "output" => p.output = Some(v),
            "blocks" => {
                let blocks = v
                    .split(',')
                    .map(|b| match b.split(':').collect::<Vec<_>>().as_slice() {
                        [d, prof, h] => Ok((number(&k, d)?, prof.to_string(), number(&k, h)?)),
                        _ => Err(bad(format!(
                            "blocks={v:?}: write dims:profile:bandwidth per block, comma separated"
                        ))),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                p.blocks = Some(blocks);
            }
            _ => {
                return Err(bad(format!(
                    "unknown query parameter {k:?} (kernel, bandwidth, blocks, degree, k, max_iter, output)"
                )));
            }
        }
        seen.push(k);
    }
    Ok(p)
}

/// Rows of numbers parsed straight into one flat `f64` buffer, a row at a
/// time: a JSON body of `n` values costs about `8n` bytes (a list of
/// lists of `f64` cost about 18 bytes a value before any limit could be
/// checked), kept in `f64` until they are centred ([`Centre`]). Each row
/// must be as wide as the first.
pub struct Rows {
    values: Vec<f64>,
    rows: usize,
    width: usize,
}

impl Rows {
    /// The rows as an `M × d` matrix of points (`what` names them in
    /// errors: `queries`, `points`, `keys`).
    fn into_points(self, what: &str) -> Result<Points, Failure> {
        if self.rows == 0 {
            return Err(bad(format!("{what:?} is empty; send at least one point")));
        }
        let values = Array2::from_shape_vec((self.rows, self.width), self.values)
            .map_err(|e| bad(format!("{what}: {e}")))?;
        Ok(Points::Wide {
            values,
            rounded: None,
            lines: None,
        })
    }
}

/// A row's name in errors.
fn noun(what: &str) -> &'static str {
    match what {
        "queries" => "query",
        "points" => "point",
        _ => "row",
    }
}

/// Reads [`Rows`], naming a row `noun` in errors.
struct RowsVisitor(&'static str);

impl<'de> serde::de::Visitor<'de> for RowsVisitor {
    type Value = Rows;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of rows of numbers")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Rows, A::Error> {
        use serde::de::Error;
        let mut out = Rows {
            values: Vec::new(),
            rows: 0,
            width: 0,
        };
        while let Some(row) = seq.next_element::<Vec<f64>>()? {
            let i = out.rows;
            if i == 0 {
                out.width = row.len();
            } else if row.len() != out.width {
                return Err(A::Error::custom(format!(
                    "{} {i} has {} coordinates; {} 0 has {}",
                    self.0,
                    row.len(),
                    self.0,
                    out.width
                )));
            }
            if out.values.try_reserve(row.len()).is_err() {
                return Err(A::Error::custom("out of memory"));
            }
            // JSON numbers are finite (serde_json refuses others); whether
            // they fit an f32 is known once they are centred.
            out.values.extend_from_slice(&row);
            out.rows += 1;
        }
        Ok(out)
    }
}

/// `queries` of a JSON request.
fn query_rows<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Rows>, D::Error> {
    d.deserialize_seq(RowsVisitor("query")).map(Some)
}

/// `points` of a JSON request.
fn point_rows<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Rows>, D::Error> {
    d.deserialize_seq(RowsVisitor("point")).map(Some)
}

/// `keys` of a JSON set upload.
fn key_rows<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Rows, D::Error> {
    d.deserialize_seq(RowsVisitor("row"))
}

/// Rows of JSON numbers (`values`, `weights` of a set upload) as an `f32`
/// matrix: non-empty, every row of one width (`d` when given), every
/// number a finite `f32`.
fn matrix_from_rows(
    what: &str,
    rows: &[Vec<f64>],
    d: Option<usize>,
) -> Result<Array2<f32>, Failure> {
    let Some(first) = rows.first() else {
        return Err(bad(format!("{what:?} is empty; send at least one point")));
    };
    let d = d.unwrap_or(first.len());
    let mut data = Vec::new();
    data.try_reserve_exact(rows.len().saturating_mul(d))
        .map_err(|_| Failure(StatusCode::SERVICE_UNAVAILABLE, "out of memory".into()))?;
    for (i, row) in rows.iter().enumerate() {
        if row.len() != d {
            return Err(bad(format!(
                "{what} row {i} has {} columns; row 0 has {d}",
                row.len()
            )));
        }
        for (j, &v) in row.iter().enumerate() {
            let f = v as f32;
            if !f.is_finite() {
                return Err(bad(format!(
                    "{what} row {i} column {j} is {v}, not a finite 32-bit float"
                )));
            }
            data.push(f);
        }
    }
    Array2::from_shape_vec((rows.len(), d), data).map_err(|e| bad(format!("{what}: {e}")))
}

/// An `.npy` body of points, in the precision it came in (a 1-D array is
/// one column).
fn npy_points(what: &str, bytes: &[u8]) -> Result<Points, Failure> {
    Ok(
        match npy::floats_from_bytes(bytes).map_err(|e| bad(format!("{what}: {e}")))? {
            npy::Floats::F32(a) => Points::Narrow(npy_matrix_of(what, a)?),
            npy::Floats::F64(a) => Points::Wide {
                values: npy_matrix_of(what, a)?,
                rounded: None,
                lines: None,
            },
        },
    )
}

/// An `.npy` body as an `f32` matrix (a 1-D array is one column).
fn npy_matrix(what: &str, bytes: &[u8]) -> Result<Array2<f32>, Failure> {
    let a = npy::f32_from_bytes(bytes).map_err(|e| bad(format!("{what}: {e}")))?;
    npy_matrix_of(what, a)
}

/// A 1-D or 2-D array as a matrix (1-D: one column).
fn npy_matrix_of<T>(what: &str, a: ndarray::ArrayD<T>) -> Result<Array2<T>, Failure> {
    let a = match a.ndim() {
        1 | 2 => npy::column_if_1d(a),
        n => return Err(bad(format!("{what}: {n} axes; send a 1-D or 2-D array"))),
    };
    a.into_dimensionality::<Ix2>()
        .map_err(|e| bad(format!("{what}: {e}")))
}

/// Parses a query op's request. `field` names the JSON array of points
/// (`queries`, or `points` for MeanShift); `d` is the width they must have
/// (the set's keys'); `centre` says where they are moved before they are
/// rounded to `f32`.
pub fn parse_request(
    body: &[u8],
    format: Format,
    query: Option<&str>,
    field: &'static str,
    d: Option<usize>,
    max_rows: usize,
    centre: &Centre,
) -> Result<Request, Failure> {
    let (params, points) = match format {
        Format::Npy => {
            let params = params_from_query(query)?;
            let points = npy_points(field, body)?;
            if points.dim().0 > max_rows {
                return Err(too_many_rows(max_rows, points.dim().0));
            }
            (params, points)
        }
        Format::Arrow => {
            let params = params_from_query(query)?;
            let points = arrow::query_points(body, field, noun(field), max_rows)?;
            (params, points)
        }
        Format::Json => {
            let from_query = params_from_query(query)?;
            if from_query
                != (Params {
                    output: from_query.output.clone(),
                    ..Params::default()
                })
            {
                return Err(bad(
                    "with a JSON body the parameters go in the body (the query string takes only output=)",
                ));
            }
            let q: JsonQuery =
                serde_json::from_slice(body).map_err(|e| bad(format!("invalid request: {e}")))?;
            let (points, other) = match field {
                "points" => (q.points, q.queries.map(|_| "queries")),
                _ => (q.queries, q.points.map(|_| "points")),
            };
            if let Some(other) = other {
                return Err(bad(format!(
                    "invalid request: this op takes its points as {field:?}, not {other:?}"
                )));
            }
            let points =
                points.ok_or_else(|| bad(format!("invalid request: missing field `{field}`")))?;
            if points.rows > max_rows {
                return Err(too_many_rows(max_rows, points.rows));
            }
            let points = points.into_points(field)?;
            let params = Params {
                kernel: q.kernel,
                bandwidth: q.bandwidth,
                blocks: q.blocks,
                degree: q.degree,
                k: q.k,
                max_iter: q.max_iter,
                output: from_query.output,
            };
            (params, points)
        }
    };
    // One offset a key column: points of another width are refused here,
    // before they are moved (the op would refuse them too).
    if let Some(d) = d
        && points.dim().1 != d
    {
        return Err(bad(format!(
            "{} 0 has {} coordinates; the keys have {d}",
            noun(field),
            points.dim().1
        )));
    }
    let (rows, offset) = centre.apply(field, noun(field), points).map_err(bad)?;
    Ok(Request {
        params,
        rows,
        offset,
    })
}

/// An op's answer: named fields, in order (the first array is what an
/// `.npy` answer carries unless `output=` names another).
#[derive(Default)]
pub struct Answer {
    /// The fields.
    pub fields: Vec<(&'static str, Field)>,
    /// The arrays whose leading axis is not the query rows (an Arrow
    /// answer carries them only when `output=` names them).
    pub others: Vec<&'static str>,
}

impl Serialize for Answer {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.fields.iter().map(|(k, v)| (*k, v)))
    }
}

impl Answer {
    /// Adds a field.
    pub fn with(mut self, name: &'static str, f: Field) -> Self {
        self.fields.push((name, f));
        self
    }

    /// Adds an array whose leading axis is not the query rows (MeanShift's
    /// modes, the class labels).
    pub fn with_other(mut self, name: &'static str, f: Field) -> Self {
        self.others.push(name);
        self.with(name, f)
    }

    /// Writes the answer in `format`; `output` chooses the `.npy` array.
    pub fn respond(self, format: Format, output: Option<&str>) -> Result<Response, Failure> {
        let arrays: Vec<&str> = self
            .fields
            .iter()
            .filter(|(_, f)| f.is_array())
            .map(|(n, _)| *n)
            .collect();
        if let Some(o) = output
            && !arrays.contains(&o)
        {
            return Err(bad(format!(
                "output={o:?}: this answer's arrays are {arrays:?}"
            )));
        }
        match format {
            Format::Json => return Ok(axum::Json(self).into_response()),
            Format::Arrow => {
                let body = arrow::answer(&self.fields, &self.others, output)?;
                return Ok(([(header::CONTENT_TYPE, ARROW)], body).into_response());
            }
            Format::Npy => {}
        }
        let chosen = output.or(arrays.first().copied()).unwrap_or_default();
        let mut body = Vec::new();
        let mut headers = HeaderMap::new();
        for (name, f) in &self.fields {
            let written = match f {
                Field::F32(a) if *name == chosen => npy_write::write_array(&mut body, a.view()),
                Field::F64(a) if *name == chosen => npy_write::write_array(&mut body, a.view()),
                Field::I64(a) if *name == chosen => npy_write::write_array(&mut body, a.view()),
                Field::Count(_) | Field::Number(_) | Field::Flag(_) => {
                    let v = serde_json::to_string(f).unwrap_or_default();
                    let h = format!("x-locus-{}", name.replace('_', "-"));
                    if let (Ok(h), Ok(v)) = (HeaderName::try_from(h), HeaderValue::try_from(v)) {
                        headers.insert(h, v);
                    }
                    Ok(())
                }
                _ => Ok(()),
            };
            written.map_err(|e| {
                Failure(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("writing .npy: {e}"),
                )
            })?;
        }
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(NPY));
        if let Ok(v) = HeaderValue::try_from(chosen) {
            headers.insert(HeaderName::from_static("x-locus-array"), v);
        }
        Ok((headers, body).into_response())
    }
}

/// Values as rows, or one value per key.
#[derive(Deserialize)]
#[serde(untagged)]
enum Column {
    Matrix(Vec<Vec<f64>>),
    Vector(Vec<f64>),
}

/// A JSON set upload.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonSet {
    #[serde(deserialize_with = "key_rows")]
    keys: Rows,
    values: Option<Column>,
    labels: Option<Vec<i64>>,
    weights: Option<Vec<f64>>,
}

/// One value per key, as an `N × 1` matrix.
fn column(what: &str, v: &[f64]) -> Result<Array2<f32>, Failure> {
    let rows: Vec<Vec<f64>> = v.iter().map(|x| vec![*x]).collect();
    matrix_from_rows(what, &rows, Some(1))
}

/// Parses a set upload: JSON `{"keys", "values", "labels", "weights"}`, or
/// `.npy` files one after the other as `parts=` (default `keys`) lists them.
pub fn parse_set(body: &[u8], format: Format, query: Option<&str>) -> Result<SetData, Failure> {
    let mut parts_list = None;
    for pair in query.unwrap_or("").split('&').filter(|s| !s.is_empty()) {
        match pair.split_once('=') {
            Some(("parts", v)) if parts_list.is_none() => parts_list = Some(percent_decode(v)?),
            _ => {
                return Err(bad(format!(
                    "unknown query parameter {pair:?} (parts=keys,values,labels,weights)"
                )));
            }
        }
    }
    if format != Format::Npy && parts_list.is_some() {
        return Err(bad("parts= is for .npy uploads"));
    }
    if format == Format::Arrow {
        return arrow::set_data(body);
    }
    if format == Format::Json {
        let s: JsonSet =
            serde_json::from_slice(body).map_err(|e| bad(format!("invalid set: {e}")))?;
        let (keys, offset) = Centre::OwnMean
            .apply("keys", "row", s.keys.into_points("keys")?)
            .map_err(bad)?;
        let values = match &s.values {
            Some(Column::Matrix(m)) => Some(matrix_from_rows("values", m, None)?),
            Some(Column::Vector(v)) => Some(column("values", v)?),
            None => None,
        };
        let weights = match &s.weights {
            Some(w) => Some(column("weights", w)?.column(0).to_owned()),
            None => None,
        };
        return Ok(SetData {
            keys,
            offset,
            values,
            labels: s.labels.map(Array1::from),
            weights,
        });
    }
    let names = parts_list.unwrap_or_else(|| "keys".into());
    let mut data = SetData {
        keys: Array2::zeros((0, 0)),
        offset: None,
        values: None,
        labels: None,
        weights: None,
    };
    let (mut rest, mut have_keys) = (body, false);
    for name in names.split(',') {
        let n = npy::part_len(rest).map_err(|e| bad(format!("part {name:?}: {e}")))?;
        let (part, tail) = rest.split_at(n);
        rest = tail;
        let seen = match name {
            "keys" => std::mem::replace(&mut have_keys, true),
            "values" => data.values.is_some(),
            "labels" => data.labels.is_some(),
            "weights" => data.weights.is_some(),
            _ => {
                return Err(bad(format!(
                    "part {name:?}: parts are keys, values, labels, weights"
                )));
            }
        };
        if seen {
            return Err(bad(format!("part {name:?} given twice")));
        }
        match name {
            "keys" => {
                (data.keys, data.offset) = Centre::OwnMean
                    .apply("keys", "row", npy_points("keys", part)?)
                    .map_err(bad)?;
            }
            "values" => data.values = Some(npy_matrix("values", part)?),
            "labels" => {
                let l = npy::i64_from_bytes(part).map_err(|e| bad(format!("labels: {e}")))?;
                let n = l.len();
                let l = l
                    .into_shape_with_order(n)
                    .map_err(|e| bad(format!("labels: {e}")))?;
                data.labels = Some(
                    l.into_dimensionality::<Ix1>()
                        .map_err(|e| bad(e.to_string()))?,
                );
            }
            _ => {
                let w = npy_matrix("weights", part)?;
                if w.ncols() != 1 {
                    return Err(bad("weights: send one weight per key (a 1-D array)"));
                }
                data.weights = Some(w.column(0).to_owned());
            }
        }
    }
    if !rest.is_empty() {
        return Err(bad(format!(
            "{} bytes after the parts {names:?}; name every part in parts=",
            rest.len()
        )));
    }
    if !have_keys {
        return Err(bad("parts= must include keys"));
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_strings_parse_and_refuse_unknown_parameters() {
        let p = params_from_query(Some(
            "kernel=uniform&bandwidth=0.5&k=3&blocks=1:uniform:0.4%2C2:gaussian:0.2",
        ))
        .unwrap();
        assert_eq!(p.kernel.as_deref(), Some("uniform"));
        assert_eq!(p.bandwidth, Some(0.5));
        assert_eq!(p.k, Some(3));
        assert_eq!(
            p.blocks,
            Some(vec![
                (1, "uniform".into(), 0.4),
                (2, "gaussian".into(), 0.2)
            ])
        );
        for bad in ["nope=1", "k=x", "k=1&k=2", "blocks=1:uniform", "kernel=%zz"] {
            assert!(params_from_query(Some(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn npy_parts_split_where_their_headers_say() {
        let mut body = Vec::new();
        npy_write::write(&mut body, &[2, 1], [1.0f32, 2.0]).unwrap();
        let first = body.len();
        npy_write::write(&mut body, &[2], [0i64, 1]).unwrap();
        assert_eq!(npy::part_len(&body).unwrap(), first);
        let d = parse_set(&body, Format::Npy, Some("parts=keys,labels")).unwrap();
        assert_eq!(d.keys.shape(), &[2, 1]);
        assert_eq!(d.labels.unwrap().to_vec(), vec![0, 1]);
        assert!(parse_set(&body, Format::Npy, Some("parts=keys")).is_err());
        assert!(
            parse_set(
                &body[..body.len() - 1],
                Format::Npy,
                Some("parts=keys,labels")
            )
            .is_err()
        );
        assert!(parse_set(&body, Format::Npy, Some("parts=keys,keys")).is_err());
    }
}
