//! Apache Arrow IPC bodies (`application/vnd.apache.arrow.stream`): query
//! points and set uploads read from a stream's record batches, answers
//! written as one record batch (the layout is in `docs/serve.md`), and the
//! conversions of Arrow columns to matrices that the start-up files
//! (`tables`) share.
//!
//! A stream is walked message by message before it is decoded: every
//! length is checked against the bytes that are there and the rows
//! against `--max-rows`, so a hostile stream is a 400 or a 413 before any
//! buffer is allocated for it; the decoding itself runs under
//! `catch_unwind` (a malformed stream is a 400, never a dropped
//! connection).
//!
//! Imports: `super::{app, field, sets}`, `crate::io`.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type};
use arrow_array::{
    Array, ArrayRef, FixedSizeListArray, Float32Array, Float64Array, Int64Array, RecordBatch,
};
use arrow_buffer::{Buffer, ScalarBuffer};
use arrow_ipc::reader::StreamDecoder;
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{DataType, Field as ArrowField, Schema, SchemaRef};
use axum::http::StatusCode;
use ndarray::{Array1, Array2, ArrayD};

use super::app::{Failure, bad, too_many_rows};
use super::field::Field;
use super::sets::{Centre, SetData};
use crate::io::Points;

/// The media type of Arrow IPC stream bodies.
pub const ARROW: &str = "application/vnd.apache.arrow.stream";

/// The schema metadata key listing the arrays an answer leaves out.
pub const OTHER_ARRAYS: &str = "locus.other_arrays";

/// The field metadata key giving an array's shape (arrays of 3 or more axes).
pub const SHAPE: &str = "locus.shape";

/// Walks the messages of an IPC stream without decoding them: every
/// message must lie within `body`, dictionary batches are refused, and the
/// record batches' rows are summed. Returns the rows and where the stream
/// ends (its end-of-stream marker's end, or `body`'s); bytes after the
/// marker are an error unless `trailing_ok` (the footer of an IPC file).
fn walk(body: &[u8], trailing_ok: bool) -> Result<(usize, usize), String> {
    let truncated = |at: usize| format!("the Arrow stream is truncated (at byte {at})");
    let mut at = 0usize;
    let mut rows = 0usize;
    while at < body.len() {
        let word = |i: usize| -> Option<u32> {
            body.get(i..i + 4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        let mut len = word(at).ok_or_else(|| truncated(at))?;
        at += 4;
        if len == 0xFFFF_FFFF {
            len = word(at).ok_or_else(|| truncated(at))?;
            at += 4;
        }
        if len == 0 {
            // End of stream; nothing may follow.
            if at != body.len() && !trailing_ok {
                return Err(format!(
                    "{} bytes after the end of the Arrow stream",
                    body.len() - at
                ));
            }
            return Ok((rows, at));
        }
        let meta = body
            .get(at..at.saturating_add(len as usize))
            .ok_or_else(|| truncated(body.len()))?;
        at += len as usize;
        let message = arrow_ipc::root_as_message(meta)
            .map_err(|e| format!("malformed Arrow message at byte {at}: {e}"))?;
        let body_len = usize::try_from(message.bodyLength())
            .map_err(|_| format!("malformed Arrow message at byte {at}: negative body length"))?;
        if body_len > body.len() - at {
            return Err(truncated(body.len()));
        }
        match message.header_type() {
            arrow_ipc::MessageHeader::Schema | arrow_ipc::MessageHeader::NONE => {}
            arrow_ipc::MessageHeader::RecordBatch => {
                let batch = message
                    .header_as_record_batch()
                    .ok_or_else(|| format!("malformed Arrow record batch at byte {at}"))?;
                let n = usize::try_from(batch.length())
                    .map_err(|_| format!("Arrow record batch at byte {at}: negative length"))?;
                // Every column this service reads takes at least one byte
                // a row: more rows than bytes is a lie.
                if n > body.len() {
                    return Err(format!(
                        "Arrow record batch at byte {at} claims {n} rows in {} bytes",
                        body.len()
                    ));
                }
                rows = rows.saturating_add(n);
                if batch.compression().is_some() {
                    return Err(
                        "compressed Arrow batches are not taken; send them uncompressed".into(),
                    );
                }
            }
            arrow_ipc::MessageHeader::DictionaryBatch => {
                return Err("dictionary-encoded Arrow columns are not taken".into());
            }
            other => return Err(format!("unexpected Arrow message {other:?}")),
        }
        at += body_len;
    }
    Ok((rows, at))
}

/// Decodes an IPC stream (checked by [`walk`] first) into its schema and
/// record batches. `max_rows`: more rows than this is a 413.
pub fn read_stream(
    body: &[u8],
    max_rows: Option<usize>,
) -> Result<(SchemaRef, Vec<RecordBatch>), Failure> {
    let (rows, _) = walk(body, false).map_err(bad)?;
    if let Some(max) = max_rows
        && rows > max
    {
        return Err(too_many_rows(max, rows));
    }
    decode(Buffer::from(body)).map_err(bad)
}

/// Decodes the stream at the start of `bytes` (an IPC file's after its
/// magic), checked as [`read_stream`]'s; what follows its end-of-stream
/// marker (the file's footer) is not read.
pub fn read_stream_prefix(bytes: &[u8]) -> Result<(SchemaRef, Vec<RecordBatch>), String> {
    let (_, end) = walk(bytes, true)?;
    decode(Buffer::from(&bytes[..end]))
}

/// The decoding behind [`read_stream`], under `catch_unwind`.
fn decode(mut buf: Buffer) -> Result<(SchemaRef, Vec<RecordBatch>), String> {
    let run = std::panic::catch_unwind(move || {
        let mut d = StreamDecoder::new();
        let mut batches = Vec::new();
        while !buf.is_empty() {
            if let Some(b) = d.decode(&mut buf)? {
                batches.push(b);
            }
        }
        d.finish()?;
        Ok::<_, arrow_schema::ArrowError>((d.schema(), batches))
    });
    match run {
        Ok(Ok((Some(schema), batches))) => Ok((schema, batches)),
        Ok(Ok((None, _))) => Err("the Arrow stream is empty (no schema)".into()),
        Ok(Err(e)) => Err(format!("malformed Arrow stream: {e}")),
        Err(_) => Err("malformed Arrow stream".into()),
    }
}

/// The first null of `a` (a position), if any.
fn first_null(a: &dyn Array) -> Option<usize> {
    a.logical_nulls()
        .and_then(|n| (0..a.len()).find(|&i| n.is_null(i)))
}

/// Whether `t` is a float type this service reads.
pub(super) fn is_float(t: &DataType) -> bool {
    matches!(t, DataType::Float32 | DataType::Float64)
}

/// What float columns are gathered into: `f32` where every column read is
/// float32 (the common case: no copy in `f64`), `f64` where one is float64
/// (the points then go through [`Centre`](super::sets::Centre) before they
/// are rounded to `f32`); [`points`] chooses from the schema.
trait Gathered: Copy {
    fn of_f32(v: f32) -> Self;
    /// Only called where [`points`] chose `f64`.
    fn of_f64(v: f64) -> Self;
    fn finite(self) -> bool;
    fn shown(self) -> f64;
}

impl Gathered for f32 {
    fn of_f32(v: f32) -> Self {
        v
    }
    fn of_f64(v: f64) -> Self {
        v as f32
    }
    fn finite(self) -> bool {
        self.is_finite()
    }
    fn shown(self) -> f64 {
        f64::from(self)
    }
}

impl Gathered for f64 {
    fn of_f32(v: f32) -> Self {
        f64::from(v)
    }
    fn of_f64(v: f64) -> Self {
        v
    }
    fn finite(self) -> bool {
        self.is_finite()
    }
    fn shown(self) -> f64 {
        self
    }
}

/// Whether a column of type `t` holds float64 (itself or its list items).
fn float64_in(t: &DataType) -> bool {
    match t {
        DataType::FixedSizeList(f, _) | DataType::List(f) | DataType::LargeList(f) => {
            f.data_type() == &DataType::Float64
        }
        t => t == &DataType::Float64,
    }
}

/// A primitive float array's values, appended to `out`; `what`/`noun`
/// name it in errors, the rows counted from `row0` and `width` values a
/// row.
fn push_floats<T: Gathered>(
    out: &mut Vec<T>,
    a: &dyn Array,
    what: &str,
    noun: &str,
    row0: usize,
    width: usize,
) -> Result<(), String> {
    if let Some(i) = first_null(a) {
        let (r, c) = (row0 + i / width.max(1), i % width.max(1));
        return Err(format!("{what}: {noun} {r} column {c} is null"));
    }
    out.try_reserve(a.len())
        .map_err(|_| format!("{what}: out of memory"))?;
    let check = |i: usize, v: T| -> Result<T, String> {
        if v.finite() {
            Ok(v)
        } else {
            let (r, c) = (row0 + i / width.max(1), i % width.max(1));
            Err(format!(
                "{what}: {noun} {r} column {c} is {}, not a finite number",
                v.shown()
            ))
        }
    };
    match a.data_type() {
        DataType::Float32 => {
            for (i, &v) in a.as_primitive::<Float32Type>().values().iter().enumerate() {
                out.push(check(i, T::of_f32(v))?);
            }
        }
        DataType::Float64 => {
            for (i, &v) in a.as_primitive::<Float64Type>().values().iter().enumerate() {
                out.push(check(i, T::of_f64(v))?);
            }
        }
        t => return Err(format!("{what}: a column of {t}; send float32 or float64")),
    }
    Ok(())
}

/// One column of every batch as rows of floats: a fixed-size list (or a
/// list whose every row has one length) of float32/float64, or a float
/// column (one value a row). Returns the values and the width.
fn list_rows<T: Gathered>(
    out: &mut Vec<T>,
    col: &dyn Array,
    what: &str,
    noun: &str,
    row0: usize,
) -> Result<usize, String> {
    let item_type = |t: &DataType| match t {
        DataType::FixedSizeList(f, _) | DataType::List(f) | DataType::LargeList(f) => {
            Some(f.data_type().clone())
        }
        _ => None,
    };
    if let Some(t) = item_type(col.data_type())
        && !is_float(&t)
    {
        return Err(format!(
            "{what}: a list of {t}; send a fixed-size list of float32 or float64"
        ));
    }
    if let Some(i) = first_null(col) {
        return Err(format!("{what}: {noun} {} is null", row0 + i));
    }
    match col.data_type() {
        DataType::FixedSizeList(_, size) => {
            let l = col.as_fixed_size_list();
            let w = usize::try_from(*size).map_err(|_| format!("{what}: negative list size"))?;
            let start = l.value_offset(0).max(0) as usize;
            let values = l.values().slice(start, l.len() * w);
            push_floats(out, &values, what, noun, row0, w)?;
            Ok(w)
        }
        DataType::List(_) => {
            let l = col.as_list::<i32>();
            let offs: Vec<usize> = l.offsets().iter().map(|&o| o as usize).collect();
            uniform(out, &offs, l.values(), what, noun, row0)
        }
        DataType::LargeList(_) => {
            let l = col.as_list::<i64>();
            let offs: Vec<usize> = l.offsets().iter().map(|&o| o as usize).collect();
            uniform(out, &offs, l.values(), what, noun, row0)
        }
        t if is_float(t) => {
            push_floats(out, col, what, noun, row0, 1)?;
            Ok(1)
        }
        t => Err(format!(
            "{what}: a column of {t}; send a fixed-size list of float32 or float64"
        )),
    }
}

/// The rows of a variable-size list column, which must all have one length.
fn uniform<T: Gathered>(
    out: &mut Vec<T>,
    offs: &[usize],
    values: &ArrayRef,
    what: &str,
    noun: &str,
    row0: usize,
) -> Result<usize, String> {
    let (Some(&first), Some(&last)) = (offs.first(), offs.last()) else {
        return Ok(0);
    };
    let w = offs.get(1).map_or(0, |o| o - first);
    if let Some(i) = offs.windows(2).position(|p| p[1] - p[0] != w) {
        return Err(format!(
            "{what}: {noun} {} has {} coordinates; {noun} {row0} has {w}",
            row0 + i,
            offs[i + 1] - offs[i]
        ));
    }
    let values = values.slice(first, last - first);
    push_floats(out, &values, what, noun, row0, w)?;
    Ok(w)
}

/// The rows of `batches` as an `N × d` matrix of `f32` (float64 values
/// rounded as they are): see [`points`].
pub fn matrix(
    schema: &Schema,
    batches: &[RecordBatch],
    name: &str,
    noun: &str,
    columns_ok: bool,
) -> Result<Array2<f32>, String> {
    round_as_is(name, noun, points(schema, batches, name, noun, columns_ok)?)
}

/// Points rounded to `f32` as they are (values and weights: never moved).
pub fn round_as_is(name: &str, noun: &str, p: Points) -> Result<Array2<f32>, String> {
    super::sets::rounded(name, noun, p, None)
}

/// The rows of `batches` as an `N × d` matrix of points in the precision
/// they came in (`f64` where a column is float64): the column `name`, or,
/// when `columns_ok` and the schema has no such column, every column (each
/// a float column, one coordinate each, in schema order).
pub fn points(
    schema: &Schema,
    batches: &[RecordBatch],
    name: &str,
    noun: &str,
    columns_ok: bool,
) -> Result<Points, String> {
    // The stream's schema holds for every batch: float64 anywhere in what
    // is read gathers everything in f64, else in f32 as it came.
    let wide = match schema.index_of(name) {
        Ok(i) => float64_in(schema.field(i).data_type()),
        Err(_) => schema.fields().iter().any(|f| float64_in(f.data_type())),
    };
    if wide {
        let (values, rows, w) = gather::<f64>(schema, batches, name, noun, columns_ok)?;
        let values =
            Array2::from_shape_vec((rows, w), values).map_err(|e| format!("{name}: {e}"))?;
        Ok(Points::Wide {
            values,
            rounded: None,
            lines: None,
        })
    } else {
        let (values, rows, w) = gather::<f32>(schema, batches, name, noun, columns_ok)?;
        Array2::from_shape_vec((rows, w), values)
            .map(Points::Narrow)
            .map_err(|e| format!("{name}: {e}"))
    }
}

/// [`points`]' values row after row, their rows and their width.
fn gather<T: Gathered>(
    schema: &Schema,
    batches: &[RecordBatch],
    name: &str,
    noun: &str,
    columns_ok: bool,
) -> Result<(Vec<T>, usize, usize), String> {
    let mut values = Vec::new();
    let mut rows = 0;
    let mut width = None;
    if let Ok(i) = schema.index_of(name) {
        for b in batches {
            let w = list_rows(&mut values, b.column(i).as_ref(), name, noun, rows)?;
            // An empty batch says nothing of the width (a variable-size
            // list's is 0); a batch of another width than the first is an
            // error naming its first row.
            if b.num_rows() > 0 {
                match width {
                    Some(w0) if w0 != w => {
                        return Err(format!(
                            "{name}: {noun} {rows} has {w} coordinates; {noun} 0 has {w0}"
                        ));
                    }
                    _ => width = Some(w),
                }
            }
            rows += b.num_rows();
        }
        return Ok((values, rows, width.unwrap_or(0)));
    }
    let all_floats =
        !schema.fields().is_empty() && schema.fields().iter().all(|f| is_float(f.data_type()));
    if !columns_ok || !all_floats {
        let have: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        return Err(format!(
            "no column {name:?} (a fixed-size list of float32 or float64){} in the Arrow data; its columns are {have:?}",
            if columns_ok {
                ", nor only float columns (one a coordinate)"
            } else {
                ""
            }
        ));
    }
    let d = schema.fields().len();
    for b in batches {
        let mut cols = Vec::with_capacity(d);
        for (j, c) in b.columns().iter().enumerate() {
            let mut v = Vec::new();
            push_floats(&mut v, c.as_ref(), name, noun, rows, 1).map_err(|e| {
                format!("{e} (coordinate {j}, column {:?})", schema.field(j).name())
            })?;
            cols.push(v);
        }
        values
            .try_reserve(b.num_rows() * d)
            .map_err(|_| format!("{name}: out of memory"))?;
        for r in 0..b.num_rows() {
            values.extend(cols.iter().map(|c: &Vec<T>| c[r]));
        }
        rows += b.num_rows();
    }
    Ok((values, rows, d))
}

/// An integer column of every batch (`labels`) as `i64`.
pub fn integers(batches: &[RecordBatch], i: usize, what: &str) -> Result<Array1<i64>, String> {
    use arrow_array::types::*;
    let mut out: Vec<i64> = Vec::new();
    for b in batches {
        let c = b.column(i);
        let row0 = out.len();
        if let Some(j) = first_null(c.as_ref()) {
            return Err(format!("{what}: row {} is null", row0 + j));
        }
        macro_rules! take {
            ($t:ty) => {
                out.extend(c.as_primitive::<$t>().values().iter().map(|&v| v as i64))
            };
        }
        match c.data_type() {
            DataType::Int8 => take!(Int8Type),
            DataType::Int16 => take!(Int16Type),
            DataType::Int32 => take!(Int32Type),
            DataType::Int64 => take!(Int64Type),
            DataType::UInt8 => take!(UInt8Type),
            DataType::UInt16 => take!(UInt16Type),
            DataType::UInt32 => take!(UInt32Type),
            DataType::UInt64 => {
                for (j, &v) in c.as_primitive::<UInt64Type>().values().iter().enumerate() {
                    out.push(i64::try_from(v).map_err(|_| {
                        format!(
                            "{what}: row {} is {v}, beyond a 64-bit signed integer",
                            row0 + j
                        )
                    })?);
                }
            }
            t => return Err(format!("{what}: a column of {t}; send integers")),
        }
    }
    Ok(Array1::from(out))
}

/// The column `name` of every batch as one value a row (`weights`).
pub fn vector(schema: &Schema, batches: &[RecordBatch], name: &str) -> Result<Array1<f32>, String> {
    let m = matrix(schema, batches, name, "row", false)?;
    if m.ncols() != 1 {
        return Err(format!("{name}: send one value a row, not {}", m.ncols()));
    }
    Ok(m.column(0).to_owned())
}

/// The points of an Arrow query request (`field`: `queries`, or `points`
/// for MeanShift), in the precision they came in (their width is checked
/// by `wire::parse_request`, as every format's).
pub fn query_points(
    body: &[u8],
    field: &str,
    noun: &str,
    max_rows: usize,
) -> Result<Points, Failure> {
    let (schema, batches) = read_stream(body, Some(max_rows))?;
    let p = points(&schema, &batches, field, noun, true).map_err(bad)?;
    if p.dim().0 == 0 {
        return Err(bad(format!("{field:?} is empty; send at least one point")));
    }
    Ok(p)
}

/// A set upload as an Arrow stream: columns `keys` (required), `values`,
/// `labels`, `weights`, and no others.
pub fn set_data(body: &[u8]) -> Result<SetData, Failure> {
    let (schema, batches) = read_stream(body, None)?;
    for f in schema.fields() {
        if !["keys", "values", "labels", "weights"].contains(&f.name().as_str()) {
            return Err(bad(format!(
                "unknown column {:?} in the set upload (keys, values, labels, weights)",
                f.name()
            )));
        }
    }
    let keys = points(&schema, &batches, "keys", "row", false).map_err(bad)?;
    if keys.dim().0 == 0 {
        return Err(bad("\"keys\" is empty; send at least one point"));
    }
    let (keys, offset) = Centre::OwnMean.apply("keys", "row", keys).map_err(bad)?;
    let has = |n: &str| schema.index_of(n).ok();
    let values = has("values")
        .map(|_| matrix(&schema, &batches, "values", "row", false))
        .transpose()
        .map_err(bad)?;
    let labels = has("labels")
        .map(|i| integers(&batches, i, "labels"))
        .transpose()
        .map_err(bad)?;
    let weights = has("weights")
        .map(|_| vector(&schema, &batches, "weights"))
        .transpose()
        .map_err(bad)?;
    Ok(SetData {
        keys,
        offset,
        values,
        labels,
        weights,
    })
}

/// An array's values in order (row-major).
fn flat<T: Clone>(a: &ArrayD<T>) -> Vec<T> {
    match a.as_slice() {
        Some(s) => s.to_vec(),
        None => a.iter().cloned().collect(),
    }
}

/// One answer array as an Arrow column: 1-D primitive, 2-D a fixed-size
/// list of the row, more axes a fixed-size list of the flattened trailing
/// axes (the shape in the field's metadata).
fn column(name: &str, f: &Field) -> Result<(ArrowField, ArrayRef), String> {
    let (shape, values, t): (&[usize], ArrayRef, DataType) = match f {
        Field::F32(a) => (
            a.shape(),
            Arc::new(Float32Array::new(ScalarBuffer::from(flat(a)), None)),
            DataType::Float32,
        ),
        Field::F64(a) => (
            a.shape(),
            Arc::new(Float64Array::new(ScalarBuffer::from(flat(a)), None)),
            DataType::Float64,
        ),
        Field::I64(a) => (
            a.shape(),
            Arc::new(Int64Array::new(ScalarBuffer::from(flat(a)), None)),
            DataType::Int64,
        ),
        _ => return Err(format!("{name} is not an array")),
    };
    if shape.len() <= 1 {
        return Ok((ArrowField::new(name, t, false), values));
    }
    let width: usize = shape[1..].iter().product();
    let size = i32::try_from(width).map_err(|_| format!("{name}: rows of {width} values"))?;
    let item = Arc::new(ArrowField::new("item", t, false));
    let list = FixedSizeListArray::try_new(Arc::clone(&item), size, values, None)
        .map_err(|e| format!("{name}: {e}"))?;
    let mut field = ArrowField::new(name, DataType::FixedSizeList(item, size), false);
    if shape.len() > 2 {
        let s = serde_json::to_string(shape).unwrap_or_default();
        field = field.with_metadata(HashMap::from([(SHAPE.to_string(), s)]));
    }
    Ok((field, Arc::new(list)))
}

/// An answer as an Arrow IPC stream of one record batch: the per-row
/// arrays as columns (only `output` when it names one), the scalars in the
/// schema metadata (as JSON text), the other arrays' names under
/// [`OTHER_ARRAYS`].
pub fn answer(
    fields: &[(&'static str, Field)],
    others: &[&'static str],
    output: Option<&str>,
) -> Result<Vec<u8>, Failure> {
    let internal = |e: String| {
        Failure(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("writing Arrow: {e}"),
        )
    };
    let mut meta = HashMap::new();
    let mut cols = Vec::new();
    let mut left_out = Vec::new();
    for (name, f) in fields {
        let is_array = matches!(f, Field::F32(_) | Field::F64(_) | Field::I64(_));
        if !is_array {
            meta.insert(
                (*name).to_string(),
                serde_json::to_string(f).unwrap_or_default(),
            );
            continue;
        }
        let wanted = match output {
            Some(o) => o == *name,
            None => !others.contains(name),
        };
        if wanted {
            cols.push(column(name, f).map_err(internal)?);
        } else if output.is_none() {
            left_out.push(*name);
        }
    }
    if !left_out.is_empty() {
        meta.insert(
            OTHER_ARRAYS.to_string(),
            serde_json::to_string(&left_out).unwrap_or_default(),
        );
    }
    let (fields, arrays): (Vec<ArrowField>, Vec<ArrayRef>) = cols.into_iter().unzip();
    let schema = Arc::new(Schema::new_with_metadata(fields, meta));
    let batch =
        RecordBatch::try_new(Arc::clone(&schema), arrays).map_err(|e| internal(e.to_string()))?;
    let mut w = StreamWriter::try_new(Vec::new(), &schema).map_err(|e| internal(e.to_string()))?;
    w.write(&batch).map_err(|e| internal(e.to_string()))?;
    w.finish().map_err(|e| internal(e.to_string()))?;
    w.into_inner().map_err(|e| internal(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Per-coordinate columns: gathered as `f32` where all are float32, in
    /// `f64` (every value exact) as soon as one is float64.
    #[test]
    fn float64_anywhere_gathers_in_f64() {
        let batch = |second: ArrayRef| {
            let a: ArrayRef = Arc::new(Float32Array::from(vec![0.1f32, 2.5]));
            let schema = Arc::new(Schema::new(vec![
                ArrowField::new("c0", DataType::Float32, false),
                ArrowField::new("c1", second.data_type().clone(), false),
            ]));
            let b = RecordBatch::try_new(Arc::clone(&schema), vec![a, second]).unwrap();
            (schema, vec![b])
        };
        let (s, b) = batch(Arc::new(Float32Array::from(vec![1.0f32, 2.0])));
        match points(&s, &b, "queries", "query", true).unwrap() {
            Points::Narrow(a) => assert_eq!(a, ndarray::array![[0.1f32, 1.0], [2.5, 2.0]]),
            Points::Wide { .. } => panic!("float32 columns gathered in f64"),
        }
        let (s, b) = batch(Arc::new(Float64Array::from(vec![1e7 + 0.1, 2.0])));
        match points(&s, &b, "queries", "query", true).unwrap() {
            Points::Wide { values, .. } => assert_eq!(
                values,
                ndarray::array![[f64::from(0.1f32), 1e7 + 0.1], [2.5, 2.0]]
            ),
            Points::Narrow(_) => panic!("a float64 column rounded to f32"),
        }
    }
}
