//! `locus serve`'s Apache Arrow IPC bodies as a client sees them: query
//! points as a list column or one column a coordinate, answers in Arrow
//! for any request format, MeanShift's other arrays by `output=`, a set
//! uploaded as Arrow equal to one uploaded as `.npy`, sets loaded at start
//! from Arrow IPC (file and stream format) and Parquet files, and a list
//! of hostile streams each answered with a typed 4xx (the service still
//! up). tests/serve.rs checks every op in JSON, `.npy` and Arrow alike.

#[path = "support/arrow.rs"]
mod arrow;
mod common;
#[path = "support/http.rs"]
mod http;
#[path = "support/serve.rs"]
mod serve;

use std::sync::Arc;

use arrow::*;
use arrow_array::{ArrayRef, FixedSizeListArray, Float32Array, Int32Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use common::*;
use http::Client;
use ndarray::{Array1, Array2};
use serve::*;

#[test]
fn arrow_queries_in_either_layout_answer_as_json_does() {
    let d = data();
    let svc = start(&d, &[]);
    let mut c = Client::connect(svc.addr).unwrap();
    let q = Rng::new(31).matrix(7, 3, 0.0, 1.0);
    let (status, b) = c
        .request(
            "POST",
            "/v1/sets/s/classify",
            &format!(r#"{{"queries": {}}}"#, rows_json(&q)),
        )
        .unwrap();
    assert_eq!(status, 200, "{b}");
    let want = json(&b);
    // One float64 column a coordinate, and several batches of a list
    // column: the same answer, in JSON when Accept does not name Arrow.
    let halves = [q.slice(ndarray::s![..3, ..]), q.slice(ndarray::s![3.., ..])];
    let batches: Vec<Vec<(&str, ArrayRef)>> = halves
        .iter()
        .map(|h| vec![("queries", list_column(&h.to_owned(), false).1)])
        .collect();
    for body in [arrow_columns(&q), stream(&batches)] {
        let r = c
            .send(
                "POST",
                "/v1/sets/s/classify",
                &[("Content-Type", ARROW)],
                &body,
            )
            .unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(json(&r.text()), want);
    }
    // A JSON request answered in Arrow; `classes` is listed, not a column.
    let r = c
        .send(
            "POST",
            "/v1/sets/s/classify",
            &[("Content-Type", "application/json"), ("Accept", ARROW)],
            format!(r#"{{"queries": {}}}"#, rows_json(&q)).as_bytes(),
        )
        .unwrap();
    let a = arrow_answer(&r);
    same("proba", &a.columns["proba"], &array(&want["proba"]), 0.0);
    assert_eq!(a.meta["locus.other_arrays"], r#"["classes"]"#);
    assert_eq!(a.meta["empty_rows"], want["empty_rows"].to_string());
    let r = c
        .send(
            "POST",
            "/v1/sets/s/classify?output=classes",
            &[("Content-Type", ARROW), ("Accept", ARROW)],
            &arrow_body(&q, "queries", false),
        )
        .unwrap();
    same(
        "classes",
        &arrow_answer(&r).columns["classes"],
        &array(&want["classes"]),
        0.0,
    );
}

#[test]
fn mean_shift_answers_its_modes_by_output() {
    let d = data();
    let svc = start(&d, &[]);
    let mut c = Client::connect(svc.addr).unwrap();
    let pts = Rng::new(32).matrix(40, 2, 0.0, 1.0);
    let (status, b) = c
        .request(
            "POST",
            "/v1/mean-shift",
            &format!(r#"{{"points": {}, "bandwidth": 0.4}}"#, rows_json(&pts)),
        )
        .unwrap();
    assert_eq!(status, 200, "{b}");
    let want = json(&b);
    let send = |c: &mut Client, url: &str| {
        let r = c
            .send(
                "POST",
                url,
                &[("Content-Type", ARROW), ("Accept", ARROW)],
                &arrow_body(&pts, "points", true),
            )
            .unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        arrow_answer(&r)
    };
    let a = send(&mut c, "/v1/mean-shift?bandwidth=0.4");
    assert_eq!(a.columns.keys().collect::<Vec<_>>(), ["labels"]);
    same("labels", &a.columns["labels"], &array(&want["labels"]), 0.0);
    assert_eq!(a.meta["locus.other_arrays"], r#"["modes","populations"]"#);
    for k in ["iterations", "converged", "bandwidth"] {
        assert_eq!(a.meta[k], want[k].to_string(), "{k}");
    }
    let a = send(&mut c, "/v1/mean-shift?bandwidth=0.4&output=modes");
    same("modes", &a.columns["modes"], &array(&want["modes"]), 0.0);
    // `queries` is not MeanShift's column (and its columns are not all floats).
    let r = c
        .send(
            "POST",
            "/v1/mean-shift",
            &[("Content-Type", ARROW)],
            &arrow_body(&pts, "queries", false),
        )
        .unwrap();
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.text().contains("no column \\\"points\\\""),
        "{}",
        r.text()
    );
}

#[test]
fn a_set_put_as_arrow_equals_the_set_put_as_npy() {
    let d = data();
    let svc = start(&d, &[]);
    let mut c = Client::connect(svc.addr).unwrap();
    let mut npy = Vec::new();
    for part in [npy_body(&d.keys), npy_body(&d.values), {
        let mut b = Vec::new();
        ndarray_npy::WriteNpyExt::write_npy(&d.labels, &mut b).unwrap();
        b
    }] {
        npy.extend(part);
    }
    let r = c
        .send(
            "PUT",
            "/v1/sets/by-npy?parts=keys,values,labels",
            &[("Content-Type", "application/x-npy")],
            &npy,
        )
        .unwrap();
    assert_eq!(r.status, 201, "{}", r.text());
    let body = set_body(&d.keys, Some(&d.values), Some(&d.labels), None);
    let r = c
        .send(
            "PUT",
            "/v1/sets/by-arrow",
            &[("Content-Type", ARROW)],
            &body,
        )
        .unwrap();
    assert_eq!(r.status, 201, "{}", r.text());
    let q = Rng::new(33).matrix(11, 3, 0.0, 1.0);
    for op in ["local-mean", "classify", "row-states"] {
        let ask = |c: &mut Client, set: &str| {
            let (status, b) = c
                .request(
                    "POST",
                    &format!("/v1/sets/{set}/{op}"),
                    &format!(r#"{{"queries": {}}}"#, rows_json(&q)),
                )
                .unwrap();
            assert_eq!(status, 200, "{b}");
            json(&b)
        };
        assert_eq!(ask(&mut c, "by-npy"), ask(&mut c, "by-arrow"), "{op}");
    }
    // Weights as Arrow: the weighted density of set `w`.
    let body = set_body(&d.keys, None, None, Some(&d.weights));
    let r = c
        .send("PUT", "/v1/sets/wa", &[("Content-Type", ARROW)], &body)
        .unwrap();
    assert_eq!(r.status, 201, "{}", r.text());
    let ask = |c: &mut Client, set: &str| {
        let (_, b) = c
            .request(
                "POST",
                &format!("/v1/sets/{set}/density"),
                &format!(r#"{{"queries": {}}}"#, rows_json(&q)),
            )
            .unwrap();
        json(&b)
    };
    assert_eq!(ask(&mut c, "w"), ask(&mut c, "wa"));
    // Bad uploads: a 400 each, nothing created.
    let neg = Array1::from_elem(300, -1.0f32);
    let bad_labels = Array1::from_elem(300, -1i64);
    // The statuses the same uploads get as .npy or JSON.
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (set_body(&d.keys, None, None, Some(&neg)), 400, "weight"),
        (
            set_body(&d.keys, None, Some(&bad_labels), None),
            422,
            "label",
        ),
        (
            stream(&[vec![("values", list_column(&d.values, false).1)]]),
            400,
            "keys",
        ),
        (
            stream(&[vec![
                ("keys", list_column(&d.keys, false).1),
                ("extra", list_column(&d.keys, false).1),
            ]]),
            400,
            "extra",
        ),
    ];
    for (body, want, needle) in cases {
        let r = c
            .send("PUT", "/v1/sets/bad", &[("Content-Type", ARROW)], &body)
            .unwrap();
        assert_eq!(r.status, want, "{needle}: {}", r.text());
        assert!(r.text().contains(needle), "{needle}: {}", r.text());
    }
    let (status, _) = c.request("GET", "/v1/sets/bad", "").unwrap();
    assert_eq!(status, 404);
}

/// Writes `batch` as an Arrow IPC file, an Arrow IPC stream and a Parquet file.
fn write_tables(dir: &std::path::Path, stem: &str, batch: &RecordBatch) -> [String; 3] {
    let file = dir.join(format!("{stem}.arrow"));
    let mut w = arrow_ipc::writer::FileWriter::try_new(
        std::fs::File::create(&file).unwrap(),
        &batch.schema(),
    )
    .unwrap();
    w.write(batch).unwrap();
    w.finish().unwrap();
    let streamed = dir.join(format!("{stem}.arrows"));
    let mut w = arrow_ipc::writer::StreamWriter::try_new(
        std::fs::File::create(&streamed).unwrap(),
        &batch.schema(),
    )
    .unwrap();
    w.write(batch).unwrap();
    w.finish().unwrap();
    let pq = dir.join(format!("{stem}.parquet"));
    let props = parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::SNAPPY)
        .build();
    let mut w = parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(&pq).unwrap(),
        batch.schema(),
        Some(props),
    )
    .unwrap();
    w.write(batch).unwrap();
    w.close().unwrap();
    [file, streamed, pq].map(|p| p.to_string_lossy().into_owned())
}

#[test]
fn sets_load_at_start_from_arrow_and_parquet_files() {
    let d = data();
    let dir = d.dir.path();
    // One file with keys (a list), values and labels; one with weights
    // only; one with the keys as a float column a coordinate.
    let labels32: Vec<i32> = d.labels.iter().map(|&l| l as i32).collect();
    let kv = RecordBatch::try_from_iter([
        ("keys", list_column(&d.keys, false).1),
        ("values", list_column(&d.values, true).1),
        ("labels", Arc::new(Int32Array::from(labels32)) as ArrayRef),
    ])
    .unwrap();
    let w = RecordBatch::try_from_iter([(
        "w",
        Arc::new(Float32Array::from(d.weights.to_vec())) as ArrayRef,
    )])
    .unwrap();
    let cols = RecordBatch::try_from_iter((0..3).map(|j| {
        let v: Vec<f32> = d.keys.column(j).to_vec();
        (format!("x{j}"), Arc::new(Float32Array::from(v)) as ArrayRef)
    }))
    .unwrap();
    let kv = write_tables(dir, "kv", &kv);
    let w = write_tables(dir, "w", &w);
    let cols = write_tables(dir, "cols", &cols);
    let q = Rng::new(34).matrix(6, 3, 0.0, 1.0);
    let reference = start(&d, &[]);
    let mut rc = Client::connect(reference.addr).unwrap();
    let ask = |c: &mut Client, path: &str| {
        let (status, b) = c
            .request(
                "POST",
                path,
                &format!(r#"{{"queries": {}}}"#, rows_json(&q)),
            )
            .unwrap();
        assert_eq!(status, 200, "{path}: {b}");
        json(&b)
    };
    for i in 0..3 {
        let args = [
            "--set",
            "s",
            "--keys",
            &kv[i],
            "--values",
            &kv[i],
            "--labels",
            &kv[i],
            "--set",
            "w",
            "--keys",
            &cols[i],
            "--weights",
            &w[i],
            "--backend",
            "cpu",
            "--bandwidth",
            "0.3",
        ];
        let svc = http::Service::start(&args, std::time::Duration::from_secs(60));
        let mut c = Client::connect(svc.addr).unwrap();
        for path in [
            "/v1/sets/s/local-mean",
            "/v1/sets/s/classify",
            "/v1/sets/w/density",
        ] {
            assert_eq!(ask(&mut c, path), ask(&mut rc, path), "{} {path}", kv[i]);
        }
    }
    // A file lacking the named column, and a truncated one: exit 2 with
    // the reason.
    let truncated = dir.join("t.arrow");
    let bytes = std::fs::read(&kv[0]).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let truncated = truncated.to_string_lossy().into_owned();
    for (args, needle) in [
        (
            vec!["--set", "s", "--keys", &kv[0], "--weights", &kv[0]],
            "weights",
        ),
        (
            vec!["--set", "s", "--keys", truncated.as_str()],
            "truncated",
        ),
    ] {
        let out = std::process::Command::new(http::locus_binary())
            .arg("serve")
            .args(&args)
            .args(["--port", "0", "--backend", "cpu"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// A stream of a fixed-size list column `queries` of `d` float32 with the
/// given items (`None`: null) and, when `row_null`, row 0 null.
fn with_nulls(items: &[Option<f32>], d: i32, row_null: bool) -> Vec<u8> {
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    let values = Arc::new(Float32Array::from(items.to_vec()));
    let n = items.len() / d as usize;
    let nulls = row_null
        .then(|| arrow_buffer::NullBuffer::from((0..n).map(|i| i != 0).collect::<Vec<bool>>()));
    let list = FixedSizeListArray::try_new(item.clone(), d, values, nulls).unwrap();
    let schema = Arc::new(Schema::new(vec![Field::new(
        "queries",
        DataType::FixedSizeList(item, d),
        true,
    )]));
    let b = RecordBatch::try_new(schema.clone(), vec![Arc::new(list)]).unwrap();
    let mut w = arrow_ipc::writer::StreamWriter::try_new(Vec::new(), &schema).unwrap();
    w.write(&b).unwrap();
    w.finish().unwrap();
    w.into_inner().unwrap()
}

/// A float64 list column whose one value overflows `f32`.
fn f64_beyond_f32() -> Vec<u8> {
    let item = Arc::new(Field::new("item", DataType::Float64, true));
    let values = Arc::new(arrow_array::Float64Array::from(vec![0.5, 1e300, 0.5]));
    let list = FixedSizeListArray::try_new(item, 3, values, None).unwrap();
    stream(&[vec![("queries", Arc::new(list) as ArrayRef)]])
}

#[test]
fn hostile_arrow_streams_are_typed_errors() {
    let d = data();
    let svc = start(&d, &["--max-rows", "20"]);
    let mut c = Client::connect(svc.addr).unwrap();
    let good = arrow_body(&Array2::from_elem((2, 3), 0.5), "queries", false);
    let mut huge_len = good.clone();
    // The schema message's metadata length, claimed near 4 GiB.
    huge_len[4..8].copy_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
    // The schema message's flatbuffer scrambled.
    let mut flipped = good.clone();
    for b in &mut flipped[8..24] {
        *b ^= 0xA5;
    }
    let mut trailing = good.clone();
    trailing.extend_from_slice(b"junk");
    let ints = stream(&[vec![(
        "queries",
        Arc::new(Int32Array::from(vec![1, 2, 3])) as ArrayRef,
    )]]);
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (Vec::new(), 400, "empty"),
        (b"\xff\xff\xff\xff".to_vec(), 400, "truncated"),
        (good[..good.len() - 20].to_vec(), 400, "truncated"),
        (good[..good.len() / 2].to_vec(), 400, "truncated"),
        (huge_len, 400, "truncated"),
        (flipped, 400, "Arrow"),
        (trailing, 400, "after the end"),
        (b"{\"queries\": [[1, 2, 3]]}".to_vec(), 400, "Arrow"),
        (ints, 400, "Int32"),
        (
            arrow_body(&Array2::from_elem((2, 4), 0.5), "queries", false),
            400,
            "the keys have 3",
        ),
        (
            arrow_body(&Array2::from_elem((21, 3), 0.5), "queries", false),
            413,
            "limit 20",
        ),
        (
            arrow_body(&Array2::from_elem((1, 3), f32::NAN), "queries", false),
            400,
            "not a finite",
        ),
        (f64_beyond_f32(), 400, "not a finite 32-bit float"),
        (
            with_nulls(&[Some(0.1), None, Some(0.3)], 3, false),
            400,
            "null",
        ),
        (
            with_nulls(&[Some(0.1), Some(0.2), Some(0.3)], 3, true),
            400,
            "null",
        ),
        (
            arrow_body(&Array2::zeros((0, 3)), "queries", false),
            400,
            "empty",
        ),
        (
            arrow_body(&Array2::zeros((2, 3)), "other", false),
            400,
            "no column",
        ),
    ];
    for (i, (body, want, needle)) in cases.into_iter().enumerate() {
        let r = c
            .send(
                "POST",
                "/v1/sets/s/density",
                &[("Content-Type", ARROW)],
                &body,
            )
            .unwrap();
        assert_eq!(r.status, want, "case {i}: {}", r.text());
        if want != 200 {
            let v = json(&r.text());
            let msg = v["error"].as_str().unwrap();
            assert!(msg.contains(needle), "case {i}: {msg:?} lacks {needle:?}");
        }
    }
    // Every prefix of a good stream, and a byte flipped at every offset:
    // a 200, a 400 or a 413 (a batch's length flipped), never a dropped
    // connection.
    let mut bodies: Vec<Vec<u8>> = (0..good.len()).map(|n| good[..n].to_vec()).collect();
    for at in 0..good.len() {
        let mut b = good.clone();
        b[at] ^= 0xFF;
        bodies.push(b);
    }
    for (i, body) in bodies.iter().enumerate() {
        let r = c
            .send(
                "POST",
                "/v1/sets/s/density",
                &[("Content-Type", ARROW)],
                body,
            )
            .unwrap_or_else(|e| panic!("body {i}: {e}"));
        assert!(
            matches!(r.status, 200 | 400 | 413),
            "body {i}: {}",
            r.text()
        );
    }
    let (status, _) = c.request("GET", "/livez", "").unwrap();
    assert_eq!(status, 200);
}
