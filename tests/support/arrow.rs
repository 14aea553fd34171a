//! Arrow IPC bodies for the tests of `locus serve`: query points and set
//! uploads written as streams, answers read back as `f64` arrays by
//! column name with the schema's metadata.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type, Int64Type};
use arrow_array::{
    Array, ArrayRef, FixedSizeListArray, Float32Array, Float64Array, Int64Array, RecordBatch,
};
use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{DataType, Field, Schema};
use ndarray::{Array1, Array2, ArrayD, IxDyn};

use crate::http::Reply;

pub const ARROW: &str = "application/vnd.apache.arrow.stream";

/// A matrix as a fixed-size list column (float32, or float64 when `f64`).
pub fn list_column(m: &Array2<f32>, f64: bool) -> (Field, ArrayRef) {
    let d = m.ncols() as i32;
    let flat: Vec<f32> = m.iter().copied().collect();
    let (t, values): (DataType, ArrayRef) = if f64 {
        let v: Vec<f64> = flat.iter().map(|&x| f64::from(x)).collect();
        (DataType::Float64, Arc::new(Float64Array::from(v)))
    } else {
        (DataType::Float32, Arc::new(Float32Array::from(flat)))
    };
    let item = Arc::new(Field::new("item", t, true));
    let list = FixedSizeListArray::try_new(Arc::clone(&item), d, values, None).unwrap();
    (
        Field::new("x", DataType::FixedSizeList(item, d), true),
        Arc::new(list),
    )
}

/// A stream of `batches` (each a list of named columns, one schema).
pub fn stream(batches: &[Vec<(&str, ArrayRef)>]) -> Vec<u8> {
    let fields: Vec<Field> = batches[0]
        .iter()
        .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
        .collect();
    let schema = Arc::new(Schema::new(fields));
    let mut w = StreamWriter::try_new(Vec::new(), &schema).unwrap();
    for cols in batches {
        let b = RecordBatch::try_new(
            Arc::clone(&schema),
            cols.iter().map(|(_, a)| Arc::clone(a)).collect(),
        )
        .unwrap();
        w.write(&b).unwrap();
    }
    w.finish().unwrap();
    w.into_inner().unwrap()
}

/// Query points as one fixed-size list column `name`.
pub fn arrow_body(q: &Array2<f32>, name: &str, f64: bool) -> Vec<u8> {
    stream(&[vec![(name, list_column(q, f64).1)]])
}

/// Query points as one float64 column a coordinate (`c0`, `c1`, …).
pub fn arrow_columns(q: &Array2<f32>) -> Vec<u8> {
    let cols: Vec<(String, ArrayRef)> = (0..q.ncols())
        .map(|j| {
            let v: Vec<f64> = q.column(j).iter().map(|&x| f64::from(x)).collect();
            (format!("c{j}"), Arc::new(Float64Array::from(v)) as ArrayRef)
        })
        .collect();
    let cols: Vec<(&str, ArrayRef)> = cols.iter().map(|(n, a)| (n.as_str(), a.clone())).collect();
    stream(&[cols])
}

/// A set upload: keys (and values as a list), labels, weights.
pub fn set_body(
    keys: &Array2<f32>,
    values: Option<&Array2<f32>>,
    labels: Option<&Array1<i64>>,
    weights: Option<&Array1<f32>>,
) -> Vec<u8> {
    let mut cols = vec![("keys", list_column(keys, false).1)];
    if let Some(v) = values {
        cols.push(("values", list_column(v, true).1));
    }
    if let Some(l) = labels {
        cols.push(("labels", Arc::new(Int64Array::from(l.to_vec())) as ArrayRef));
    }
    if let Some(w) = weights {
        cols.push((
            "weights",
            Arc::new(Float32Array::from(w.to_vec())) as ArrayRef,
        ));
    }
    stream(&[cols])
}

/// An answer: its columns as `f64` arrays and its schema's metadata.
pub struct ArrowAnswer {
    pub columns: BTreeMap<String, ArrayD<f64>>,
    pub meta: HashMap<String, String>,
}

fn to_f64(a: &dyn Array) -> Vec<f64> {
    match a.data_type() {
        DataType::Float32 => a
            .as_primitive::<Float32Type>()
            .values()
            .iter()
            .map(|&x| f64::from(x))
            .collect(),
        DataType::Float64 => a.as_primitive::<Float64Type>().values().to_vec(),
        DataType::Int64 => a
            .as_primitive::<Int64Type>()
            .values()
            .iter()
            .map(|&x| x as f64)
            .collect(),
        t => panic!("an answer column of {t}"),
    }
}

/// Reads an Arrow answer (its `Content-Type` checked).
pub fn arrow_answer(r: &Reply) -> ArrowAnswer {
    assert_eq!(r.header("content-type"), Some(ARROW), "{}", r.text());
    let mut reader = StreamReader::try_new(&r.body[..], None).unwrap();
    let schema = reader.schema();
    let batch = reader.next().expect("one batch").unwrap();
    assert!(reader.next().is_none(), "one batch");
    let mut columns = BTreeMap::new();
    for (f, c) in schema.fields().iter().zip(batch.columns()) {
        let a = match c.data_type() {
            DataType::FixedSizeList(_, size) => {
                let l = c.as_fixed_size_list();
                let v = to_f64(l.values().as_ref());
                let shape: Vec<usize> = match f.metadata().get("locus.shape") {
                    Some(s) => serde_json::from_str(s).unwrap(),
                    None => vec![l.len(), *size as usize],
                };
                ArrayD::from_shape_vec(IxDyn(&shape), v).unwrap()
            }
            _ => ArrayD::from_shape_vec(IxDyn(&[c.len()]), to_f64(c.as_ref())).unwrap(),
        };
        columns.insert(f.name().clone(), a);
    }
    ArrowAnswer {
        columns,
        meta: schema.metadata().clone(),
    }
}
