//! The start-up sets' Arrow and Parquet files: Arrow IPC (`.arrow`,
//! `.arrows`, `.feather` version 2; the file or the stream format) and
//! Parquet (`.parquet`; snappy, zstd or no compression). A flag's array is
//! the column it names (`keys`, `values`, `labels`, `weights`): a
//! fixed-size list of floats (or a list whose rows have one length) a
//! row, or one float a row; a file without that column gives its float
//! columns, one coordinate each, when it has no list column (`labels`: its
//! one integer column; `weights`: its one float column). Every value is
//! checked as a `.npy` file's (finite `f32`, no nulls).
//!
//! Imports: `super::arrow`, `crate::io`.

use std::fs::File;
use std::path::Path;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Schema, SchemaRef};
use ndarray::{Array1, Array2};

use super::arrow;
use crate::io::Points;

/// The magic at the start (and end) of an Arrow IPC file.
const MAGIC: &[u8] = b"ARROW1";

/// Whether `path` is read by this module (by its extension).
pub fn is_table(path: &Path) -> bool {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    matches!(
        ext.as_deref(),
        Some("arrow" | "arrows" | "feather" | "ipc" | "parquet")
    )
}

/// Every record batch of an Arrow IPC or Parquet file.
fn read_batches(path: &Path) -> Result<(SchemaRef, Vec<RecordBatch>), String> {
    let parquet = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("parquet"));
    if parquet {
        let file = File::open(path).map_err(|e| e.to_string())?;
        let run = std::panic::catch_unwind(move || {
            use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
            let b = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| e.to_string())?;
            let schema = b.schema().clone();
            let reader = b.build().map_err(|e| e.to_string())?;
            let batches = reader
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            Ok::<_, String>((schema, batches))
        });
        return match run {
            Ok(r) => r.map_err(|e| format!("not a readable Parquet file: {e}")),
            Err(_) => Err("not a readable Parquet file".into()),
        };
    }
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    if bytes.starts_with(MAGIC) {
        // The file format: the magic, zeros to an alignment of 8 bytes or
        // more (writers differ), a stream, a footer. No message starts
        // with 8 zero bytes.
        let mut at = 8;
        while bytes
            .get(at..at + 8)
            .is_some_and(|w| w.iter().all(|&b| b == 0))
        {
            at += 8;
        }
        arrow::read_stream_prefix(bytes.get(at..).unwrap_or_default())
    } else {
        arrow::read_stream_prefix(&bytes)
    }
    .map_err(|e| format!("not a readable Arrow IPC file: {e}"))
}

/// The schema and batches keeping only the columns `keep` picks.
fn project(
    schema: &Schema,
    batches: &[RecordBatch],
    keep: impl Fn(&DataType) -> bool,
) -> Result<(Schema, Vec<RecordBatch>), String> {
    let idx: Vec<usize> = (0..schema.fields().len())
        .filter(|&i| keep(schema.field(i).data_type()))
        .collect();
    let s = schema.project(&idx).map_err(|e| e.to_string())?;
    let b = batches
        .iter()
        .map(|b| b.project(&idx).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((s, b))
}

/// Whether `t` is a list type.
fn is_list(t: &DataType) -> bool {
    matches!(
        t,
        DataType::FixedSizeList(..) | DataType::List(_) | DataType::LargeList(_)
    )
}

/// The matrix `column` (`values`, `weights`) of the file at `path` as
/// `f32` (`flag` names it in errors).
pub fn read_matrix(flag: &str, path: &Path, column: &str) -> Result<Array2<f32>, String> {
    let p = read_points(flag, path, column)?;
    arrow::round_as_is(column, "row", p).map_err(|e| format!("{flag} {}: {e}", path.display()))
}

/// The matrix `column` (`keys`, …) of the file at `path` in the precision
/// it holds (`f64` where a column is float64).
pub fn read_points(flag: &str, path: &Path, column: &str) -> Result<Points, String> {
    let at = |e: String| format!("{flag} {}: {e}", path.display());
    let (schema, batches) = read_batches(path).map_err(at)?;
    let m = if schema.index_of(column).is_ok()
        || schema.fields().iter().any(|f| is_list(f.data_type()))
    {
        arrow::points(&schema, &batches, column, "row", false)
    } else {
        let (s, b) = project(&schema, &batches, arrow::is_float).map_err(at)?;
        arrow::points(&s, &b, column, "row", true)
    }
    .map_err(at)?;
    let (rows, cols) = m.dim();
    if rows * cols == 0 {
        return Err(at(format!("{column} is empty")));
    }
    Ok(m)
}

/// The labels of the file at `path`: its column `labels`, or its one
/// integer column.
pub fn read_labels(flag: &str, path: &Path) -> Result<Array1<i64>, String> {
    let at = |e: String| format!("{flag} {}: {e}", path.display());
    let (schema, batches) = read_batches(path).map_err(at)?;
    let i = match schema.index_of("labels") {
        Ok(i) => i,
        Err(_) => {
            let ints: Vec<usize> = (0..schema.fields().len())
                .filter(|&i| schema.field(i).data_type().is_integer())
                .collect();
            match ints.as_slice() {
                [i] => *i,
                _ => {
                    return Err(at(format!(
                        "no column \"labels\", and {} integer columns",
                        ints.len()
                    )));
                }
            }
        }
    };
    let l = arrow::integers(&batches, i, "labels").map_err(at)?;
    if l.is_empty() {
        return Err(at("labels is empty".into()));
    }
    Ok(l)
}
