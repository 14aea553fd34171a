//! Kernel matrix, D⁻¹K and Laplacian parity: GPU vs CPU vs f64 reference.

mod common;

use common::*;
use locus::{Engine, Kernel, LaplacianKind, Profile, TileLimits};
use ndarray::Axis;

const RTOL: f64 = 1e-4;
const ATOL: f64 = 1e-6;

fn engines(limits: TileLimits) -> Vec<(String, Engine)> {
    let mut v = vec![("cpu".to_string(), cpu().clone())];
    if let Some(g) = gpu_engine(limits) {
        v.push((format!("gpu {limits:?}"), g));
    }
    v
}

fn check(engine: &Engine, label: &str, shapes: &[(usize, usize, usize)]) {
    for (si, &(m, n, d)) in shapes.iter().enumerate() {
        let mut rng = Rng::new(50 + si as u64);
        let queries = rng.matrix(m, d, 0.0, 1.0);
        let keys = rng.matrix(n, d, 0.0, 1.0);
        for p in Profile::ALL {
            let k = Kernel::new(p, 0.35 * (d as f32).sqrt()).unwrap();
            let what = format!("{label} {p} M={m} N={n} d={d}");
            let got = engine
                .kernel_matrix(&k, queries.view(), keys.view())
                .unwrap();
            assert_close(
                &format!("{what} K"),
                &got,
                &ref_kernel_matrix(&k, &queries, &keys),
                RTOL,
                ATOL,
            );

            let got = engine
                .normalized_kernel_matrix(&k, queries.view(), keys.view())
                .unwrap();
            let (want, empty) = ref_normalized(&k, &queries, &keys);
            assert_close(&format!("{what} D⁻¹K"), &got.values, &want, RTOL, ATOL);
            assert_eq!(got.empty_rows, empty, "{what}: empty rows");

            for (kind, rw) in [
                (LaplacianKind::Unnormalized, false),
                (LaplacianKind::RandomWalk, true),
            ] {
                let got = engine.laplacian(&k, keys.view(), kind).unwrap();
                let want = ref_laplacian(&k, &keys, rw);
                // D − K has diagonal entries up to N: scale the absolute slack.
                let atol = if rw { ATOL } else { ATOL * n as f64 };
                assert_close(&format!("{what} {kind:?}"), &got, &want, RTOL, atol);
            }
        }
    }
}

const SHAPES: [(usize, usize, usize); 4] = [(1, 1, 1), (77, 131, 3), (19, 300, 7), (200, 17, 2)];

#[test]
fn cpu_matrices_match_reference() {
    check(cpu(), "cpu", &SHAPES);
}

#[test]
fn gpu_matrices_match_reference() {
    let Some(g) = gpu() else { return };
    check(g, "gpu", &SHAPES);
}

#[test]
fn gpu_matrices_larger_than_one_binding_are_tiled() {
    // 4 KiB bindings: a 77×131 matrix needs many blocks, rows and columns,
    // read back in many double-buffered batches (one block each).
    for limits in [
        TileLimits {
            buffer_bytes: Some(4096),
            ..TileLimits::default()
        },
        TileLimits {
            query_rows: Some(9),
            key_rows: Some(20),
            ..TileLimits::default()
        },
    ] {
        let Some(g) = gpu_engine(limits) else { return };
        check(&g, &format!("gpu {limits:?}"), &[(77, 131, 3), (5, 400, 2)]);
    }
}

#[test]
fn normalized_rows_sum_to_one_even_when_raw_weights_underflow() {
    let mut rng = Rng::new(8);
    let x = rng.matrix(60, 2, 0.0, 1.0);
    let q = rng.matrix(25, 2, 0.0, 1.0);
    for p in [Profile::Gaussian, Profile::Laplacian] {
        let k = Kernel::new(p, 1e-6).unwrap();
        for (name, e) in engines(TileLimits::default()) {
            let raw = e.kernel_matrix(&k, q.view(), x.view()).unwrap();
            assert!(
                raw.iter().all(|&v| v == 0.0),
                "{name}: raw weights underflow"
            );
            let nk = e.normalized_kernel_matrix(&k, q.view(), x.view()).unwrap();
            assert_eq!(nk.empty_rows, 0);
            for s in nk.values.sum_axis(Axis(1)) {
                assert!((s - 1.0).abs() < 1e-5, "{name} {p}: row sum {s}");
            }
        }
    }
}

/// From d = 32 the GPU's local means may take inner-product tiles, but the
/// normalized matrix's row sums must come from the same differences as its
/// entries: far rows (queries 100 away from the keys, where an expansion's
/// maximum would differ from the entries' by its rounding) still sum to 1
/// and match the CPU.
#[test]
fn normalized_rows_of_far_queries_sum_to_one_at_high_d() {
    let mut rng = Rng::new(64);
    let x = rng.matrix(50, 64, 0.0, 1.0);
    let q = rng.matrix(7, 64, 0.0, 1.0) + 100.0;
    let k = Kernel::new(Profile::Gaussian, 1.0).unwrap();
    let want = cpu()
        .normalized_kernel_matrix(&k, q.view(), x.view())
        .unwrap()
        .values;
    for (name, e) in engines(TileLimits::default()) {
        let nk = e.normalized_kernel_matrix(&k, q.view(), x.view()).unwrap();
        for s in nk.values.sum_axis(Axis(1)) {
            assert!((s - 1.0).abs() < 1e-5, "{name}: row sum {s}");
        }
        let worst = (&nk.values - &want)
            .iter()
            .fold(0.0f32, |a, v| a.max(v.abs()));
        assert!(worst < 1e-4, "{name}: {worst} from the CPU's");
    }
}

#[test]
fn laplacian_rows_sum_to_zero() {
    let mut rng = Rng::new(10);
    let x = rng.matrix(90, 3, 0.0, 1.0);
    for p in Profile::ALL {
        let k = Kernel::new(p, 0.5).unwrap();
        for (name, e) in engines(TileLimits::default()) {
            for kind in [LaplacianKind::Unnormalized, LaplacianKind::RandomWalk] {
                let l = e.laplacian(&k, x.view(), kind).unwrap();
                for s in l.sum_axis(Axis(1)) {
                    assert!(s.abs() < 1e-4, "{name} {p} {kind:?}: row sum {s}");
                }
            }
        }
    }
}
