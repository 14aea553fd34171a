//! Prepared attention sets (`Engine::prepare_attention`): every call's
//! output against the plain f64 reference and the one-shot op, on the CPU
//! and the GPU (device-sized and forced tiny tiles, batch groups that
//! start inside a stored group, key splits), the memory budget, and one
//! test per error.

mod common;

use common::attention::*;
use common::*;
use locus::{Device, Engine, EngineOptions, Error, SoftmaxParams, TileLimits};
use ndarray::{Array2, Array3, Array4, s};

const RTOL: f64 = 1e-4;
const ATOL: f64 = 1e-5;

/// CPU, GPU, and GPU engines whose tiles force every path of a prepared
/// set: key tiles shorter than a batch (stored per batch), bindings that
/// hold two of three batches (calls starting inside a stored group), and
/// key splits.
fn engines() -> Vec<(String, Engine)> {
    let mut v = common::attention::engines();
    for limits in [
        TileLimits {
            query_rows: Some(13),
            key_rows: Some(29),
            value_cols: Some(5),
            ..TileLimits::default()
        },
        TileLimits {
            buffer_bytes: Some(4000),
            ..TileLimits::default()
        },
        TileLimits {
            key_splits: Some(3),
            ..TileLimits::default()
        },
    ] {
        if let Some(g) = gpu_engine(limits) {
            v.push((format!("gpu {limits:?}"), g));
        }
    }
    v
}

/// `set.attend(phi)` against the f64 reference and against the one-shot
/// op on the same keys and values.
fn check_attend(
    e: &Engine,
    set: &locus::AttentionSet,
    x: &Data,
    phi: &Array3<f32>,
    p: &SoftmaxParams,
    what: &str,
) {
    let got = set.attend(phi.view(), p).unwrap();
    let scale = f64::from(p.scale.expect("the tests set a scale"));
    let want = ref_attention(phi, &x.psi, &x.v, scale, p.causal);
    assert_close(what, &flat(&got), &flat(&want), RTOL, ATOL);
    let once = e
        .kernel_softmax(phi.view(), x.psi.view(), x.v.view(), p)
        .unwrap();
    let once64 = flat(&once).mapv(f64::from);
    assert_close(
        &format!("{what} one-shot"),
        &flat(&got),
        &once64,
        RTOL,
        ATOL,
    );
}

/// One set, several query batches (decoding: M = 1; a prefix; M = N; more
/// queries than keys, whose query tiles make a stored group of batches run
/// one batch at a time), causal or not: each equals the reference and the
/// one-shot op.
#[test]
fn prepared_attention_matches_reference_and_one_shot() {
    for (name, e) in engines() {
        let shapes = [
            (3, 70, 3, 7),
            (2, 131, 64, 64),
            (1, 40, 130, 9),
            (3, 10, 3, 2),
        ];
        for (si, &(b, n, d, q)) in shapes.iter().enumerate() {
            let x = data(900 + si as u64, (b, 3 * n, n, d, q), -1.0);
            let set = e.prepare_attention(x.psi.view(), x.v.view()).unwrap();
            assert_eq!((set.batches(), set.keys(), set.dim()), (b, n, d));
            assert_eq!(set.value_cols(), q);
            assert!(set.bytes() >= (b * n * (d + q) * 4) as u64, "{name}");
            let scale = 3.0 / (d as f32).sqrt();
            for m in [1, 17.min(n), n, 3 * n] {
                let phi = x.phi.slice(s![.., ..m, ..]).to_owned();
                for causal in [false, true] {
                    if causal && m > n {
                        continue;
                    }
                    let what = format!("{name} B={b} M={m} N={n} d={d} q={q} causal={causal}");
                    let p = SoftmaxParams::new().with_scale(scale).with_causal(causal);
                    check_attend(&e, &set, &x, &phi, &p, &what);
                }
            }
        }
    }
}

/// Decoding steps against a prepared set: M = 1 and M = 16 new queries
/// (the register tiles' one row per invocation, keys split across
/// workgroups where forced), the first and the last of a causal sequence
/// (the new queries are the sequence's last rows), against the reference
/// and the one-shot op.
#[test]
fn decoding_steps_against_a_prepared_set() {
    for (name, e) in engines() {
        for (si, &(b, n, d, q)) in [(2, 300, 64, 64), (3, 77, 16, 8)].iter().enumerate() {
            let x = data(950 + si as u64, (b, 16, n, d, q), -1.0);
            let set = e.prepare_attention(x.psi.view(), x.v.view()).unwrap();
            let scale = 3.0 / (d as f32).sqrt();
            for m in [1, 16] {
                let phi = x.phi.slice(s![.., ..m, ..]).to_owned();
                for causal in [false, true] {
                    let what = format!("{name} B={b} M={m} N={n} d={d} q={q} causal={causal}");
                    let p = SoftmaxParams::new().with_scale(scale).with_causal(causal);
                    check_attend(&e, &set, &x, &phi, &p, &what);
                }
            }
        }
    }
}

/// A set of one batch given as matrices answers matrices, and 3-D
/// queries of one batch.
#[test]
fn a_matrix_set_answers_matrices() {
    for (name, e) in engines() {
        let x = data(31, (1, 5, 9, 4, 2), -1.0);
        let psi: Array2<f32> = x.psi.index_axis(ndarray::Axis(0), 0).to_owned();
        let v: Array2<f32> = x.v.index_axis(ndarray::Axis(0), 0).to_owned();
        let phi: Array2<f32> = x.phi.index_axis(ndarray::Axis(0), 0).to_owned();
        let set = e.prepare_attention(psi.view(), v.view()).unwrap();
        let p = SoftmaxParams::new();
        let got: Array2<f32> = set.attend(phi.view(), &p).unwrap();
        let want: Array2<f32> = e
            .kernel_softmax(phi.view(), psi.view(), v.view(), &p)
            .unwrap();
        assert_close(&name, &got, &want.mapv(f64::from), RTOL, ATOL);
        let got3: Array3<f32> = set.attend(x.phi.view(), &p).unwrap();
        assert_eq!(got3.dim(), (1, 5, 2));
    }
}

/// The set is charged to the engine's memory budget while it lives; a set
/// beyond the limit is a typed error and leaves the engine working.
#[test]
fn prepared_sets_count_against_the_memory_limit() {
    let mut devices = vec![Device::Cpu];
    if gpu().is_some() {
        devices.push(Device::Gpu);
    }
    for device in devices {
        let mut o = EngineOptions::new(device);
        o.memory_limit = Some(1 << 20);
        let e = Engine::with_options(o).unwrap();
        let before = e.memory_usage().in_use;
        let x = data(5, (2, 3, 500, 16, 8), -1.0);
        let set = e.prepare_attention(x.psi.view(), x.v.view()).unwrap();
        let held = e.memory_usage().in_use - before;
        assert!(
            held >= set.bytes() && set.bytes() >= 2 * 500 * 24 * 4,
            "{device:?} {held}"
        );
        drop(set);
        assert_eq!(e.memory_usage().in_use, before, "{device:?}: freed on drop");
        let big = data(6, (4, 1, 8000, 16, 16), -1.0);
        let err = e
            .prepare_attention(big.psi.view(), big.v.view())
            .unwrap_err();
        assert!(
            matches!(err, Error::MemoryLimit { .. }),
            "{device:?}: {err}"
        );
        let set = e.prepare_attention(x.psi.view(), x.v.view()).unwrap();
        let p = SoftmaxParams::new();
        let got = set.attend(x.phi.view(), &p).unwrap();
        let want = ref_attention(&x.phi, &x.psi, &x.v, 0.25, false);
        assert_close(
            &format!("{device:?}"),
            &flat(&got),
            &flat(&want),
            RTOL,
            ATOL,
        );
    }
}

#[test]
fn errors_are_typed() {
    for (name, e) in engines().into_iter().take(2) {
        let x = data(8, (2, 4, 6, 3, 2), -1.0);
        let set = e.prepare_attention(x.psi.view(), x.v.view()).unwrap();
        let p = SoftmaxParams::new();
        // Another batch size, another dimension, a causal M > N.
        let one = x.phi.slice(s![..1, .., ..]).to_owned();
        let err = set.attend(one.view(), &p).unwrap_err();
        assert!(matches!(err, Error::BatchMismatch { .. }), "{name}: {err}");
        let wide = Array3::<f32>::zeros((2, 4, 5));
        let err = set.attend(wide.view(), &p).unwrap_err();
        assert!(
            matches!(err, Error::DimensionMismatch { .. }),
            "{name}: {err}"
        );
        let long = Array3::<f32>::zeros((2, 7, 3));
        let err = set.attend(long.view(), &p.with_causal(true)).unwrap_err();
        assert!(matches!(err, Error::CausalShape { .. }), "{name}: {err}");
        // Empty, non-finite and 4-D queries; a non-finite scale; logits
        // that could overflow.
        let empty = Array3::<f32>::zeros((2, 0, 3));
        assert!(set.attend(empty.view(), &p).is_err(), "{name}");
        let mut nan = x.phi.clone();
        nan[[1, 2, 0]] = f32::NAN;
        let err = set.attend(nan.view(), &p).unwrap_err();
        assert!(matches!(err, Error::NonFinite { .. }), "{name}: {err}");
        let four = Array4::<f32>::zeros((1, 2, 4, 3));
        let err = set.attend(four.view().into_dyn(), &p).unwrap_err();
        assert!(matches!(err, Error::Rank { .. }), "{name}: {err}");
        let err = set
            .attend(x.phi.view(), &p.with_scale(f32::INFINITY))
            .unwrap_err();
        assert!(
            matches!(err, Error::InvalidParameter { .. }),
            "{name}: {err}"
        );
        let err = set.attend(x.phi.view(), &p.with_scale(1e38)).unwrap_err();
        assert!(matches!(err, Error::LogitOverflow { .. }), "{name}: {err}");
        // Preparing: values not one row per key, another batch size.
        let short = x.v.slice(s![.., ..5, ..]).to_owned();
        let err = e.prepare_attention(x.psi.view(), short.view()).unwrap_err();
        assert!(matches!(err, Error::RowMismatch { .. }), "{name}: {err}");
        let err = e.prepare_attention(x.psi.view(), one.view()).unwrap_err();
        assert!(matches!(err, Error::BatchMismatch { .. }), "{name}: {err}");
        // The set still answers.
        assert!(set.attend(x.phi.view(), &p).is_ok(), "{name}");
    }
}
