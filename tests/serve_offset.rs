//! `locus serve` with points far from the origin: a set whose keys come in
//! float64 (a float64 or CSV file at start, JSON numbers, `<f8` parts,
//! Arrow float64) is centred on its keys' mean before the keys are rounded
//! to `f32`, and every query is moved by the same offset in `f64`, in every
//! format; MeanShift's points are centred on their own mean and its modes
//! moved back, as float64. Rounded straight to `f32`, `10⁷ + x` keeps one
//! significant digit of `x` and these answers would be wrong.

#[path = "support/arrow.rs"]
mod arrow;
mod common;
#[path = "support/http.rs"]
mod http;
#[path = "support/serve.rs"]
mod serve;

use std::sync::Arc;
use std::time::Duration;

use arrow_array::{ArrayRef, FixedSizeListArray, Float64Array};
use arrow_schema::{DataType, Field};
use common::Rng;
use http::{Client, Service, temp_folder};
use ndarray::{Array2, ArrayD, Axis};
use ndarray_npy::{WriteNpyExt, write_npy};
use serde_json::Value;
use serve::{array, json, npy_answer};

/// Uniform `f64` in [0, 1) with every bit of a double.
fn uniform64(rng: &mut Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// `rows × 2` points: `origin + 4(u − ½)` per coordinate (their mean
/// rounded to a multiple of 4, the power of two above their range, is
/// `origin`).
fn points(rng: &mut Rng, rows: usize, origin: [f64; 2]) -> Array2<f64> {
    Array2::from_shape_fn((rows, 2), |(_, j)| origin[j] + 4.0 * (uniform64(rng) - 0.5))
}

/// The `k` nearest keys of each query by a float64 brute force.
fn knn64(keys: &Array2<f64>, q: &Array2<f64>, k: usize) -> Vec<Vec<usize>> {
    q.rows()
        .into_iter()
        .map(|qr| {
            let mut d: Vec<(f64, usize)> = keys
                .rows()
                .into_iter()
                .enumerate()
                .map(|(i, kr)| {
                    let s: f64 = kr.iter().zip(&qr).map(|(a, b)| (a - b) * (a - b)).sum();
                    (s, i)
                })
                .collect();
            d.sort_by(|a, b| a.0.total_cmp(&b.0));
            d.iter().take(k).map(|p| p.1).collect()
        })
        .collect()
}

/// The gaussian local mean of `values` at each query, in float64.
fn local_mean64(keys: &Array2<f64>, values: &Array2<f64>, q: &Array2<f64>, h: f64) -> Array2<f64> {
    let mut out = Array2::zeros((q.nrows(), values.ncols()));
    for (i, qr) in q.rows().into_iter().enumerate() {
        let mut total = 0.0;
        for (kr, vr) in keys.rows().into_iter().zip(values.rows()) {
            let s: f64 = kr.iter().zip(&qr).map(|(a, b)| (a - b) * (a - b)).sum();
            let w = (-s / (2.0 * h * h)).exp();
            total += w;
            out.row_mut(i).scaled_add(w, &vr);
        }
        out.row_mut(i).mapv_inplace(|x| x / total);
    }
    out
}

fn json_rows(a: &Array2<f64>) -> String {
    let rows: Vec<Vec<f64>> = a.rows().into_iter().map(|r| r.to_vec()).collect();
    serde_json::to_string(&rows).unwrap()
}

fn npy_of<T: ndarray_npy::WritableElement>(a: &Array2<T>) -> Vec<u8> {
    let mut b = Vec::new();
    a.write_npy(&mut b).unwrap();
    b
}

/// A float64 matrix as a fixed-size list column.
fn list64(a: &Array2<f64>) -> ArrayRef {
    let item = Arc::new(Field::new("item", DataType::Float64, true));
    let flat = Float64Array::from(a.iter().copied().collect::<Vec<_>>());
    Arc::new(FixedSizeListArray::try_new(item, a.ncols() as i32, Arc::new(flat), None).unwrap())
}

/// `locus serve` on the CPU with `args`, and a client of it.
fn serve(args: &[&str]) -> (Service, Client) {
    let mut all = vec!["--backend", "cpu"];
    all.extend_from_slice(args);
    let svc = Service::start(&all, Duration::from_secs(60));
    let c = Client::connect(svc.addr).unwrap();
    (svc, c)
}

/// Posts an `.npy` body to `path`, asking for an `.npy` answer.
fn npy_post(c: &mut Client, path: &str, body: &[u8]) -> http::Reply {
    c.send(
        "POST",
        path,
        &[
            ("Content-Type", "application/x-npy"),
            ("Accept", "application/x-npy"),
        ],
        body,
    )
    .unwrap()
}

/// Sends a JSON request that must be refused with a 400; its body.
fn refused(c: &mut Client, method: &str, path: &str, body: &str) -> String {
    let (status, b) = c.request(method, path, body).unwrap();
    assert_eq!(status, 400, "{b}");
    b
}

/// The indices of an answer as rows of `usize`.
fn index_rows(a: &ArrayD<f64>) -> Vec<Vec<usize>> {
    a.outer_iter()
        .map(|r| r.iter().map(|&x| x as usize).collect())
        .collect()
}

const H: f64 = 0.5;
const K: usize = 8;

#[test]
fn float64_sets_and_queries_far_from_the_origin_are_centred_in_every_format() {
    let dir = temp_folder("serve-offset");
    let mut rng = Rng::new(7);
    // Offsets of 10⁷ and −3·10⁷ (f32 spacing 1 and 2 there).
    let origin = [1e7, -3e7];
    let keys = points(&mut rng, 400, origin);
    let queries = points(&mut rng, 40, origin);
    let values = Array2::from_shape_fn((400, 1), |(i, _)| {
        ((keys[[i, 0]] - origin[0]) * 1.3).sin() + (keys[[i, 1]] - origin[1]) * 0.25
    })
    .mapv(|v| v as f32);
    let at = |n: &str| dir.path().join(n).to_string_lossy().into_owned();
    write_npy(at("k.npy"), &keys).unwrap();
    write_npy(at("v.npy"), &values).unwrap();
    let csv: String = keys
        .rows()
        .into_iter()
        .map(|r| format!("{:?},{:?}\n", r[0], r[1]))
        .collect();
    std::fs::write(at("k.csv"), csv).unwrap();
    // Exact in f64: the far set's keys once centred.
    let near = &keys - &ndarray::arr1(&origin);
    write_npy(at("near.npy"), &near.mapv(|v| v as f32)).unwrap();
    let (k, v, kc, kn) = (at("k.npy"), at("v.npy"), at("k.csv"), at("near.npy"));
    let (_svc, mut c) = serve(&[
        "--set",
        "npy",
        "--keys",
        &k,
        "--values",
        &v,
        "--set",
        "csv",
        "--keys",
        &kc,
        "--values",
        &v,
        "--set",
        "near",
        "--keys",
        &kn,
        "--kernel",
        "gaussian",
        "--bandwidth",
        "0.5",
    ]);

    // Uploads: JSON numbers, .npy parts (<f8 keys), Arrow float64.
    let values_json: Vec<f32> = values.iter().copied().collect();
    let body = format!(
        r#"{{"keys": {}, "values": {}}}"#,
        json_rows(&keys),
        serde_json::to_string(&values_json).unwrap()
    );
    let (status, b) = c.request("PUT", "/v1/sets/json", &body).unwrap();
    assert_eq!(status, 201, "{b}");
    let mut parts = npy_of(&keys);
    parts.extend(npy_of(&values));
    let r = c
        .send(
            "PUT",
            "/v1/sets/parts?parts=keys,values",
            &[("Content-Type", "application/x-npy")],
            &parts,
        )
        .unwrap();
    assert_eq!(r.status, 201, "{}", r.text());
    let up = arrow::stream(&[vec![
        ("keys", list64(&keys)),
        ("values", arrow::list_column(&values, false).1),
    ]]);
    let r = c
        .send(
            "PUT",
            "/v1/sets/arrow",
            &[("Content-Type", arrow::ARROW)],
            &up,
        )
        .unwrap();
    assert_eq!(r.status, 201, "{}", r.text());

    // Each set says what it subtracted: the mean on a grid of 4 (the
    // range's power of two), here the origin itself; nothing near 0.
    for set in ["npy", "csv", "json", "parts", "arrow"] {
        let (status, b) = c.request("GET", &format!("/v1/sets/{set}"), "").unwrap();
        assert_eq!(status, 200, "{b}");
        let off = array(&json(&b)["offset"]);
        assert_eq!(off.as_slice().unwrap(), &origin[..], "{set}: {b}");
    }
    let (_, b) = c.request("GET", "/v1/sets/near", "").unwrap();
    assert_eq!(json(&b)["offset"], Value::Null, "{b}");

    let want = knn64(&keys, &queries, K);
    let want_mean = local_mean64(&keys, &values.mapv(f64::from), &queries, H);
    let knn_path = |set: &str| format!("/v1/sets/{set}/knn?k={K}&output=indices");
    for set in ["npy", "csv", "json", "parts", "arrow"] {
        // JSON queries (float64 numbers).
        let (status, b) = c
            .request(
                "POST",
                &format!("/v1/sets/{set}/knn"),
                &format!(r#"{{"queries": {}, "k": {K}}}"#, json_rows(&queries)),
            )
            .unwrap();
        assert_eq!(status, 200, "{b}");
        let a = json(&b);
        assert_eq!(index_rows(&array(&a["indices"])), want, "{set}: JSON");
        // The distances are those of the float64 points, to f32 precision.
        for (i, row) in array(&a["distances"]).outer_iter().enumerate() {
            for (j, &d) in row.iter().enumerate() {
                let kr = keys.row(want[i][j]);
                let d64: f64 = kr
                    .iter()
                    .zip(queries.row(i))
                    .map(|(x, y)| (x - y) * (x - y))
                    .sum::<f64>()
                    .sqrt();
                assert!(
                    (d - d64).abs() <= 1e-5 * d64.max(1.0),
                    "{set}: {d} vs {d64}"
                );
            }
        }
        // .npy (<f8) and Arrow (a float64 list; float64 columns).
        let npy = npy_post(&mut c, &knn_path(set), &npy_of(&queries));
        assert_eq!(index_rows(&npy_answer(&npy)), want, "{set}: .npy");
        let cols: Vec<(String, ArrayRef)> = (0..2)
            .map(|j| {
                let v: Vec<f64> = queries.column(j).to_vec();
                (format!("c{j}"), Arc::new(Float64Array::from(v)) as ArrayRef)
            })
            .collect();
        for body in [
            arrow::stream(&[vec![("queries", list64(&queries))]]),
            arrow::stream(&[cols.iter().map(|(n, a)| (n.as_str(), a.clone())).collect()]),
        ] {
            let r = c
                .send(
                    "POST",
                    &knn_path(set),
                    &[
                        ("Content-Type", arrow::ARROW),
                        ("Accept", "application/x-npy"),
                    ],
                    &body,
                )
                .unwrap();
            assert_eq!(index_rows(&npy_answer(&r)), want, "{set}: Arrow");
        }
        // Local means of the values, against float64.
        let r = npy_post(
            &mut c,
            &format!("/v1/sets/{set}/local-mean?output=values"),
            &npy_of(&queries),
        );
        let got = npy_answer(&r);
        for (g, w) in got.iter().zip(&want_mean) {
            assert!((g - w).abs() < 1e-5, "{set}: local mean {g} vs {w}");
        }
    }
    // float32 queries to a centred set: their own values, moved exactly.
    let q32 = queries.mapv(|x| x as f32);
    let r = npy_post(&mut c, &knn_path("npy"), &npy_of(&q32));
    assert_eq!(
        index_rows(&npy_answer(&r)),
        knn64(&keys, &q32.mapv(f64::from), K),
        "float32 queries"
    );
    // The same set near the origin, queried near the origin: centring
    // made the far sets' inputs exactly these, so the answers are equal bit
    // for bit.
    let far = npy_post(
        &mut c,
        &format!("/v1/sets/npy/knn?k={K}&output=distances"),
        &npy_of(&queries),
    );
    let near_q = &queries - &ndarray::arr1(&origin);
    let close = npy_post(
        &mut c,
        &format!("/v1/sets/near/knn?k={K}&output=distances"),
        &npy_of(&near_q),
    );
    assert_eq!(npy_answer(&far), npy_answer(&close));
}

#[test]
fn mean_shift_modes_come_back_where_the_points_are_as_float64() {
    let (_svc, mut c) = serve(&["--kernel", "gaussian", "--bandwidth", "1.0"]);
    let mut rng = Rng::new(3);
    // Two blobs 6 apart, 10⁷ from the origin; the same points near it.
    // On a grid of 2⁻²⁰, so `x + 10⁷` is exact in f64 and `x` in f32.
    let near = Array2::from_shape_fn((120, 2), |(i, _)| {
        let blob = if i % 2 == 0 { 0.0 } else { 6.0 };
        let x = blob + 0.6 * (uniform64(&mut rng) + uniform64(&mut rng) - 1.0);
        (x * 1048576.0).round() / 1048576.0
    });
    // Offset 10⁷ exactly (the mean rounded to a multiple of 8): the far
    // run's f32 inputs are the near run's.
    let far = near.mapv(|x| x + 1e7);
    let ask = |c: &mut Client, p: &Array2<f64>| {
        let (status, b) = c
            .request(
                "POST",
                "/v1/mean-shift",
                &format!(r#"{{"points": {}}}"#, json_rows(p)),
            )
            .unwrap();
        assert_eq!(status, 200, "{b}");
        json(&b)
    };
    let (a_far, a_near) = (ask(&mut c, &far), ask(&mut c, &near));
    assert_eq!(a_far["labels"], a_near["labels"]);
    let (m_far, m_near) = (array(&a_far["modes"]), array(&a_near["modes"]));
    assert_eq!(m_far.len_of(Axis(0)), 2, "{a_far}");
    // Moved back in f64: the near modes plus 10⁷, exactly (the near ones
    // are f32, written as their shortest decimal).
    let as_f32 = |m: &ArrayD<f64>, by: f64| m.mapv(|x| (x - by) as f32);
    assert_eq!(as_f32(&m_far, 1e7), as_f32(&m_near, 0.0));
    // As .npy the modes are float64 where the points were moved, float32
    // where they were not.
    for (p, dtype) in [(&far, "<f8"), (&near, "<f4")] {
        let r = npy_post(&mut c, "/v1/mean-shift?output=modes", &npy_of(p));
        assert_eq!(r.status, 200, "{}", r.text());
        let head = String::from_utf8_lossy(&r.body[..64.min(r.body.len())]).into_owned();
        assert!(head.contains(dtype), "{dtype}: {head}");
        let m = npy_answer(&r);
        match dtype {
            "<f8" => assert_eq!(m, m_far),
            _ => assert_eq!(as_f32(&m, 0.0), as_f32(&m_near, 0.0)),
        }
    }
    // float32 points are taken as they are: modes float32, not moved.
    let r = npy_post(
        &mut c,
        "/v1/mean-shift?output=modes",
        &npy_of(&far.mapv(|x| x as f32)),
    );
    assert!(String::from_utf8_lossy(&r.body[..64]).contains("<f4"));
}

#[test]
fn values_beyond_f32_are_taken_once_centred_and_refused_otherwise() {
    let (_svc, mut c) = serve(&[]);
    // Keys at 10³⁹ (beyond f32) 10²⁴ apart: centred, they fit.
    let keys: Vec<Vec<f64>> = (0..4).map(|i| vec![1e39 + f64::from(i) * 1e24]).collect();
    let body = format!(r#"{{"keys": {}}}"#, serde_json::to_string(&keys).unwrap());
    let (status, b) = c.request("PUT", "/v1/sets/huge", &body).unwrap();
    assert_eq!(status, 201, "{b}");
    let (_, b) = c.request("GET", "/v1/sets/huge", "").unwrap();
    let off = array(&json(&b)["offset"])[[0]];
    assert!((off - 1e39).abs() < 1e25, "{b}");
    // (Distances between such keys, 10²⁴ and more, overflow f32: the
    // engine says so rather than answer.)
    let b = refused(
        &mut c,
        "POST",
        "/v1/sets/huge/knn",
        r#"{"queries": [[1e39]], "k": 1}"#,
    );
    assert!(b.contains("overflow"), "{b}");
    // Such a query to a set near the origin is refused, naming it.
    let (status, b) = c
        .request("PUT", "/v1/sets/small", r#"{"keys": [[0.0], [1.0]]}"#)
        .unwrap();
    assert_eq!(status, 201, "{b}");
    let b = refused(
        &mut c,
        "POST",
        "/v1/sets/small/knn",
        r#"{"queries": [[0.5], [1e39]], "k": 1}"#,
    );
    assert!(
        b.contains("query 1 column 0") && b.contains("32-bit"),
        "{b}"
    );
    // Keys that span more than f32 holds, even centred.
    let b = refused(
        &mut c,
        "PUT",
        "/v1/sets/wide",
        r#"{"keys": [[1e39], [1.5e39]]}"#,
    );
    assert!(b.contains("even centred"), "{b}");
    // A column that did not move is named as it is (MeanShift's points
    // centred on their own mean: the first column moved, the second not).
    let b = refused(
        &mut c,
        "POST",
        "/v1/mean-shift",
        r#"{"points": [[1e9, 0], [1000000001, 5e38]]}"#,
    );
    assert!(
        b.contains("point 1 column 1 is 5e38, not a finite 32-bit float"),
        "{b}"
    );
    assert!(!b.contains("centred"), "{b}");
    // Queries of another width are refused before they are moved.
    let b = refused(
        &mut c,
        "POST",
        "/v1/sets/huge/knn",
        r#"{"queries": [[1e39, 0.0]], "k": 1}"#,
    );
    assert!(b.contains("coordinates"), "{b}");
}

/// The text of the `offset` array in a set's description, parsed by the
/// standard library (correctly rounded), not by a JSON parser.
fn offset_text(body: &str) -> Vec<f64> {
    let at = body.find("\"offset\":[").expect("an offset array") + "\"offset\":[".len();
    let end = at + body[at..].find(']').unwrap();
    body[at..end]
        .split(',')
        .map(|x| x.parse().unwrap())
        .collect()
}

#[test]
fn json_numbers_are_read_exactly_and_data_near_the_origin_stays() {
    let (_svc, mut c) = serve(&[]);
    // A single key's offset is the key itself: every digit of the JSON
    // number, rounded once (a parser off by one unit in the last place
    // would move every query by it).
    let texts = [
        "1000000000000.5989",
        "123456789.98765432",
        "-4649776.123456789",
    ];
    for t in texts {
        let (status, b) = c
            .request("PUT", "/v1/sets/one", &format!(r#"{{"keys": [[{t}]]}}"#))
            .unwrap();
        assert!(status == 201 || status == 200, "{b}");
        let (_, b) = c.request("GET", "/v1/sets/one", "").unwrap();
        assert_eq!(offset_text(&b), [t.parse::<f64>().unwrap()], "{t}: {b}");
    }
    // Values in [0, 1) with a mean above ½ (rounded to 1 on a grid of 1)
    // are not moved: moving them gains nothing.
    let mut rng = Rng::new(5);
    let u = Array2::from_shape_fn((200, 2), |(_, j)| 0.05 * j as f64 + uniform64(&mut rng));
    let (status, b) = c
        .request(
            "PUT",
            "/v1/sets/u",
            &format!(r#"{{"keys": {}}}"#, json_rows(&u)),
        )
        .unwrap();
    assert_eq!(status, 201, "{b}");
    let (_, b) = c.request("GET", "/v1/sets/u", "").unwrap();
    assert_eq!(json(&b)["offset"], Value::Null, "{b}");
    // An Arrow list column of float64 queries in batches of 4, 2 and 0
    // rows (an empty last batch says nothing of the width).
    let list = |rows: &Array2<f64>| -> ArrayRef {
        let item = Arc::new(Field::new("item", DataType::Float64, true));
        let flat = Float64Array::from(rows.iter().copied().collect::<Vec<_>>());
        let offsets = arrow_buffer::OffsetBuffer::from_lengths(vec![2; rows.nrows()]);
        Arc::new(arrow_array::ListArray::new(
            item,
            offsets,
            Arc::new(flat),
            None,
        ))
    };
    let q = u.slice(ndarray::s![..6, ..]).to_owned();
    let body = arrow::stream(&[
        vec![("queries", list(&q.slice(ndarray::s![..4, ..]).to_owned()))],
        vec![("queries", list(&q.slice(ndarray::s![4.., ..]).to_owned()))],
        vec![("queries", list(&Array2::zeros((0, 2))))],
    ]);
    let r = c
        .send(
            "POST",
            "/v1/sets/u/knn?k=1&output=indices",
            &[
                ("Content-Type", arrow::ARROW),
                ("Accept", "application/x-npy"),
            ],
            &body,
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let idx = index_rows(&npy_answer(&r));
    assert_eq!(idx, (0..6).map(|i| vec![i]).collect::<Vec<_>>());
}

#[test]
fn a_csv_set_near_the_origin_is_read_as_the_tool_reads_it() {
    // 1 + 2⁻²⁴ + a hair: the nearest f32 is 1 + 2⁻²³, while the nearest
    // f64 (1 + 2⁻²⁴) rounds to 1 (a tie, to even). Read from the text, as
    // `locus knn` reads it.
    let dir = temp_folder("serve-csv");
    let path = dir.path().join("k.csv");
    std::fs::write(&path, "0,0\n0,0\n1.0000000596046447753906250001,0\n").unwrap();
    let p = path.to_string_lossy().into_owned();
    let (_svc, mut c) = serve(&["--set", "c", "--keys", &p]);
    let (status, b) = c
        .request("POST", "/v1/sets/c/knn", r#"{"queries": [[0, 0]], "k": 3}"#)
        .unwrap();
    assert_eq!(status, 200, "{b}");
    let third = array(&json(&b)["distances"])[[0, 2]] as f32;
    assert_eq!(third, 1.0 + f32::EPSILON, "{b}");
    // A value beyond f32 is named with its line, as the tool names it.
    std::fs::write(&path, "x,y\n0,0\n5e38,0\n").unwrap();
    let out = std::process::Command::new(http::locus_binary())
        .args([
            "serve",
            "--port",
            "0",
            "--set",
            "c",
            "--keys",
            &p,
            "--backend",
            "cpu",
        ])
        .env("NODEVICE_SELECT", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("line 3"), "{err}");
}
