//! Product (joint, bilateral) kernels: every op on the CPU and the GPU
//! against plain f64 references built block by block, the identities a
//! product must keep, and the errors of a kernel that does not fit the data.
#![allow(clippy::needless_range_loop)] // index loops mirror the formulas

mod common;

use common::*;
use locus::{Engine, Error, Kernel, LaplacianKind, MeanShiftParams, MedoidShiftParams, Profile};
use ndarray::{Array1, Array2, s};

fn engines() -> Vec<(&'static str, Engine)> {
    engines_and_tiny_tiles(7, 13)
}

/// Products mixing every profile, compact and full support, one to three
/// blocks (the data has 5 columns).
fn products() -> Vec<Kernel> {
    use Profile::*;
    [
        vec![(2, Uniform, 0.9f32), (3, Gaussian, 0.6)],
        vec![(2, Epanechnikov, 1.1), (3, Laplacian, 0.8)],
        vec![(1, Triangular, 1.2), (2, Biweight, 1.3), (2, Cauchy, 0.5)],
        vec![(5, Gaussian, 0.7)],
        vec![(3, Cauchy, 0.9), (2, Gaussian, 0.05)],
    ]
    .into_iter()
    .map(|b| Kernel::product(b).unwrap())
    .collect()
}

fn data(seed: u64, n: usize) -> Array2<f32> {
    Rng::new(seed).matrix(n, 5, -1.0, 1.0)
}

#[test]
fn local_means_match_the_blockwise_reference() {
    let x = data(1, 300);
    let y = Rng::new(2).matrix(300, 3, -2.0, 2.0);
    let q = data(3, 41);
    for (name, e) in engines() {
        for k in products() {
            let got = e.local_mean(&k, q.view(), x.view(), y.view()).unwrap();
            let (want, empty) = ref_local_mean(&k, &q, &x, &y);
            assert_eq!(got.empty_rows, empty, "{name} {k}");
            assert_close(&format!("{name} {k}"), &got.values, &want, 1e-4, 1e-5);
        }
    }
}

#[test]
fn kernel_matrices_and_laplacians_match_the_reference() {
    let x = data(4, 60);
    let q = data(5, 23);
    for (name, e) in engines() {
        for k in products() {
            let what = format!("{name} {k}");
            let got = e.kernel_matrix(&k, q.view(), x.view()).unwrap();
            assert_close(&what, &got, &ref_kernel_matrix(&k, &q, &x), 1e-4, 1e-6);
            let got = e.normalized_kernel_matrix(&k, q.view(), x.view()).unwrap();
            let (want, empty) = ref_normalized(&k, &q, &x);
            assert_eq!(got.empty_rows, empty, "{what}");
            assert_close(&what, &got.values, &want, 1e-4, 1e-6);
            for (kind, rw) in [
                (LaplacianKind::Unnormalized, false),
                (LaplacianKind::RandomWalk, true),
            ] {
                let got = e.laplacian(&k, x.view(), kind).unwrap();
                assert_close(&what, &got, &ref_laplacian(&k, &x, rw), 1e-4, 1e-5);
            }
        }
    }
}

/// One block covering every coordinate is the radial kernel itself, for
/// every profile; gaussian blocks with one bandwidth are the radial
/// gaussian.
#[test]
fn one_block_is_the_radial_kernel_and_gaussian_blocks_are_the_gaussian() {
    let x = data(6, 200);
    let y = Rng::new(7).matrix(200, 2, -1.0, 1.0);
    let q = data(8, 30);
    for (name, e) in engines() {
        for p in Profile::ALL {
            let radial = Kernel::new(p, 0.9).unwrap();
            let one = Kernel::product([(5, p, 0.9)]).unwrap();
            let a = e.local_mean(&radial, q.view(), x.view(), y.view()).unwrap();
            let b = e.local_mean(&one, q.view(), x.view(), y.view()).unwrap();
            assert_eq!(a.empty_rows, b.empty_rows, "{name} {p}");
            let a64 = a.values.mapv(f64::from);
            assert_close(&format!("{name} {p}"), &b.values, &a64, 2e-5, 1e-6);
        }
        let g = Kernel::gaussian(0.4).unwrap();
        let gg = Kernel::product([
            (1, Profile::Gaussian, 0.4),
            (2, Profile::Gaussian, 0.4),
            (2, Profile::Gaussian, 0.4),
        ])
        .unwrap();
        let a = e.local_mean(&g, q.view(), x.view(), y.view()).unwrap();
        let b = e.local_mean(&gg, q.view(), x.view(), y.view()).unwrap();
        assert_close(name, &b.values, &a.values.mapv(f64::from), 2e-5, 1e-6);
    }
}

#[test]
fn densities_are_normalized_block_by_block() {
    // A product of gaussians is the gaussian with those per-coordinate
    // bandwidths: p̂(q) = mean_j Π_k φ((q_k − x_jk)/h_k)/h_k.
    let x = data(9, 150);
    let q = data(10, 17);
    let hs = [0.5f64, 0.5, 0.3, 0.3, 0.3];
    let k = Kernel::product([(2, Profile::Gaussian, 0.5), (3, Profile::Gaussian, 0.3)]).unwrap();
    let want = Array1::from_shape_fn(q.nrows(), |i| {
        let s: f64 = (0..x.nrows())
            .map(|j| {
                (0..5)
                    .map(|c| {
                        let u = (f64::from(q[[i, c]]) - f64::from(x[[j, c]])) / hs[c];
                        (-0.5 * u * u).exp() / (hs[c] * (2.0 * std::f64::consts::PI).sqrt())
                    })
                    .product::<f64>()
            })
            .sum();
        (s / x.nrows() as f64).ln()
    });
    // A uniform × epanechnikov product integrates to one over a grid.
    let u = Kernel::product([(1, Profile::Uniform, 0.7), (1, Profile::Epanechnikov, 0.4)]).unwrap();
    let one_key = Array2::from_shape_vec((1, 2), vec![0.1f32, -0.2]).unwrap();
    let step = 0.01f32;
    let grid = Array2::from_shape_fn((200 * 200, 2), |(r, c)| {
        let (a, b) = (r / 200, r % 200);
        let i = if c == 0 { a } else { b };
        -1.0 + (i as f32 + 0.5) * step
    });
    for (name, e) in engines() {
        let got = e.log_density(&k, q.view(), x.view(), None).unwrap();
        for i in 0..q.nrows() {
            assert!(
                (got[i] - want[i]).abs() < 1e-4,
                "{name} row {i}: {} vs {}",
                got[i],
                want[i]
            );
        }
        let mass: f64 = e
            .density(&u, grid.view(), one_key.view(), None)
            .unwrap()
            .sum()
            * f64::from(step * step);
        assert!((mass - 1.0).abs() < 2e-3, "{name}: mass {mass}");
    }
}

/// Weighted least squares per query in f64 with the product's weights.
fn ref_linear(k: &Kernel, q: &Array2<f32>, x: &Array2<f32>, y: &Array2<f32>) -> Array2<f64> {
    let d = x.ncols();
    Array2::from_shape_fn((q.nrows(), 1), |(i, _)| {
        let qi = q.row(i).to_vec();
        let lw: Vec<f64> = x
            .rows()
            .into_iter()
            .map(|r| product_log_weight(k, &qi, &r.to_vec()))
            .collect();
        let m = lw.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mut a = vec![vec![0.0; d + 1]; d + 1];
        let mut b = vec![0.0; d + 1];
        for j in 0..x.nrows() {
            let w = (lw[j] - m).exp();
            let mut z = vec![1.0];
            z.extend((0..d).map(|t| f64::from(x[[j, t]]) - f64::from(qi[t])));
            for r in 0..=d {
                for c in 0..=d {
                    a[r][c] += w * z[r] * z[c];
                }
                b[r] += w * z[r] * f64::from(y[[j, 0]]);
            }
        }
        // Gaussian elimination.
        for c in 0..=d {
            let p = (c..=d)
                .max_by(|&i, &j| a[i][c].abs().total_cmp(&a[j][c].abs()))
                .unwrap();
            a.swap(c, p);
            b.swap(c, p);
            for r in c + 1..=d {
                let f = a[r][c] / a[c][c];
                for t in c..=d {
                    a[r][t] -= f * a[c][t];
                }
                b[r] -= f * b[c];
            }
        }
        let mut z = vec![0.0; d + 1];
        for c in (0..=d).rev() {
            let s: f64 = (c + 1..=d).map(|t| a[c][t] * z[t]).sum();
            z[c] = (b[c] - s) / a[c][c];
        }
        z[0]
    })
}

#[test]
fn local_linear_and_local_pca_follow_the_product_weights() {
    let x = data(11, 400);
    let y = Array2::from_shape_fn((400, 1), |(j, _)| {
        let r = x.row(j);
        (r[0] + 2.0 * r[3]).sin() + r[4] * r[4]
    });
    let q = Rng::new(12).matrix(19, 5, -0.6, 0.6);
    let k = Kernel::product([(2, Profile::Biweight, 1.4), (3, Profile::Gaussian, 0.5)]).unwrap();
    let want = ref_linear(&k, &q, &x, &y);
    // The local covariance in x's units, for PCA.
    let cov = |i: usize| {
        let qi = q.row(i).to_vec();
        let w: Vec<f64> = x
            .rows()
            .into_iter()
            .map(|r| product_log_weight(&k, &qi, &r.to_vec()).exp())
            .collect();
        let s: f64 = w.iter().sum();
        let mean: Vec<f64> = (0..5)
            .map(|c| (0..400).map(|j| w[j] * f64::from(x[[j, c]])).sum::<f64>() / s)
            .collect();
        let mut c = [[0.0f64; 5]; 5];
        for a in 0..5 {
            for b in 0..5 {
                c[a][b] = (0..400)
                    .map(|j| {
                        w[j] * (f64::from(x[[j, a]]) - mean[a]) * (f64::from(x[[j, b]]) - mean[b])
                    })
                    .sum::<f64>()
                    / s;
            }
        }
        (mean, c)
    };
    for (name, e) in engines() {
        let got = e
            .local_polynomial(&k, q.view(), x.view(), y.view(), 1)
            .unwrap();
        assert_close(&format!("{name} fitted"), &got.fitted, &want, 1e-4, 1e-4);
        let pca = e.local_pca(&k, q.view(), x.view(), 5).unwrap();
        for i in 0..q.nrows() {
            let (mean, c) = cov(i);
            for a in 0..5 {
                assert!(
                    (f64::from(pca.means[[i, a]]) - mean[a]).abs() < 1e-4,
                    "{name}"
                );
            }
            // Each component v with variance λ satisfies C v = λ v.
            for comp in 0..5 {
                let v = pca.components.slice(s![i, comp, ..]);
                let lam = f64::from(pca.variances[[i, comp]]);
                for a in 0..5 {
                    let cv: f64 = (0..5).map(|b| c[a][b] * f64::from(v[b])).sum();
                    assert!(
                        (cv - lam * f64::from(v[a])).abs() < 2e-4,
                        "{name} row {i} component {comp}: {cv} vs {}",
                        lam * f64::from(v[a])
                    );
                }
            }
        }
    }
}

#[test]
fn scores_are_the_gradient_of_the_log_density() {
    let x = data(13, 300);
    let q = Rng::new(14).matrix(9, 5, -0.5, 0.5);
    // Gaussian blocks share one pass; biweight and epanechnikov blocks take
    // their shadows.
    for k in [
        Kernel::product([(2, Profile::Gaussian, 0.6), (3, Profile::Gaussian, 0.4)]).unwrap(),
        Kernel::product([(2, Profile::Biweight, 1.5), (3, Profile::Gaussian, 0.5)]).unwrap(),
        Kernel::product([(3, Profile::Epanechnikov, 1.6), (2, Profile::Biweight, 1.7)]).unwrap(),
    ] {
        let ln_f = |p: &[f64]| -> f64 {
            let pf: Vec<f32> = p.iter().map(|&v| v as f32).collect();
            let s: f64 = x
                .rows()
                .into_iter()
                .map(|r| product_log_weight(&k, &pf, &r.to_vec()).exp())
                .sum();
            s.ln()
        };
        for (name, e) in engines() {
            let got = e.score(&k, q.view(), x.view()).unwrap();
            assert_eq!(got.empty_rows, 0, "{name} {k}");
            for i in 0..q.nrows() {
                for a in 0..5 {
                    // Central differences in f64 (the f32 query grid is
                    // coarse, so step on a wide scale).
                    let eps = 1e-3;
                    let mut p: Vec<f64> = q.row(i).iter().map(|&v| f64::from(v)).collect();
                    p[a] += eps;
                    let up = ln_f(&p);
                    p[a] -= 2.0 * eps;
                    let down = ln_f(&p);
                    let want = (up - down) / (2.0 * eps);
                    let g = f64::from(got.values[[i, a]]);
                    assert!(
                        (g - want).abs() < 2e-2 * want.abs().max(1.0),
                        "{name} {k} row {i} coordinate {a}: {g} vs {want}"
                    );
                }
            }
        }
    }
}

#[test]
fn joint_mean_shift_is_the_shift_of_the_scaled_points() {
    // Gaussian blocks: the product MeanShift on x is the radial one (h = 1)
    // on x divided by each block's bandwidth, modes scaled back.
    let mut rng = Rng::new(15);
    let mut x = Array2::<f32>::zeros((240, 3));
    for (j, mut r) in x.rows_mut().into_iter().enumerate() {
        let c = (j % 3) as f32;
        r[0] = 4.0 * c + rng.uniform();
        r[1] = -3.0 * c + rng.uniform();
        r[2] = 0.1 * c + 0.02 * rng.uniform();
    }
    let hs = [1.5f32, 1.5, 0.04];
    let k =
        Kernel::product([(2, Profile::Gaussian, hs[0]), (1, Profile::Gaussian, hs[2])]).unwrap();
    let scaled = Array2::from_shape_fn(x.dim(), |(j, c)| x[[j, c]] / hs[c]);
    let joint = MeanShiftParams::new().kernel(k).check().unwrap();
    let radial = MeanShiftParams::new()
        .kernel(Kernel::gaussian(1.0).unwrap())
        .check()
        .unwrap();
    for (name, e) in engines() {
        let a = e.mean_shift(&joint, x.view()).unwrap();
        let b = e.mean_shift(&radial, scaled.view()).unwrap();
        assert_eq!(a.labels, b.labels, "{name}");
        assert_eq!(a.modes.nrows(), 3, "{name}");
        for (ma, mb) in a.modes.rows().into_iter().zip(b.modes.rows()) {
            for c in 0..3 {
                let want = f64::from(mb[c]) * f64::from(hs[c]);
                assert!(
                    (f64::from(ma[c]) - want).abs() < 1e-3 * f64::from(hs[c]),
                    "{name}"
                );
            }
        }
    }
    // A compact spatial block: the CPU cuts the keys by a grid on those
    // coordinates, the GPU visits them all; the same modes.
    let k = Kernel::product([(2, Profile::Uniform, 2.5), (1, Profile::Gaussian, 0.04)]).unwrap();
    let params = MeanShiftParams::new().kernel(k).check().unwrap();
    let all = engines();
    let want = all[0].1.mean_shift(&params, x.view()).unwrap();
    assert_eq!(want.modes.nrows(), 3);
    for (name, e) in &all[1..] {
        let got = e.mean_shift(&params, x.view()).unwrap();
        assert_eq!(got.labels, want.labels, "{name}");
        for (a, b) in got.modes.iter().zip(&want.modes) {
            assert!((a - b).abs() < 1e-4, "{name}: {a} vs {b}");
        }
    }
}

#[test]
fn joint_medoid_shift_is_the_medoid_shift_of_the_scaled_points() {
    let mut rng = Rng::new(23);
    let x = Array2::from_shape_fn((90, 3), |(j, c)| {
        let g = (j % 3) as f32;
        [3.0 * g, -2.0 * g, 0.1 * g][c] + [0.5, 0.5, 0.01][c] * rng.uniform()
    });
    let hs = [1.2f32, 1.2, 0.03];
    let k =
        Kernel::product([(2, Profile::Gaussian, hs[0]), (1, Profile::Gaussian, hs[2])]).unwrap();
    let scaled = Array2::from_shape_fn(x.dim(), |(j, c)| x[[j, c]] / hs[c]);
    let joint = MedoidShiftParams::new().kernel(k).check().unwrap();
    let radial = MedoidShiftParams::new()
        .kernel(Kernel::gaussian(1.0).unwrap())
        .check()
        .unwrap();
    for (name, e) in engines() {
        let a = e.medoid_shift(&joint, x.view()).unwrap();
        let b = e.medoid_shift(&radial, scaled.view()).unwrap();
        assert_eq!(a.labels, b.labels, "{name}");
        assert_eq!(a.medoids, b.medoids, "{name}");
        assert_eq!(a.medoids.len(), 3, "{name}");
        // The modes are the medoids' own points, in the data's units.
        for (row, &m) in a.modes.rows().into_iter().zip(&a.medoids) {
            assert_eq!(row, x.row(m), "{name}");
        }
    }
    let d = Array2::<f32>::zeros((4, 4));
    assert!(matches!(
        cpu().medoid_shift_distances(&joint, d.view()),
        Err(Error::InvalidParameter { name: "kernel", .. })
    ));
}

#[test]
fn imputation_with_blocks_agrees_across_backends() {
    let mut x = data(16, 120);
    let mut rng = Rng::new(17);
    for v in x.iter_mut() {
        if rng.uniform() < 0.15 {
            *v = f32::NAN;
        }
    }
    let k =
        Kernel::product([(2, Profile::Gaussian, 0.8), (3, Profile::Epanechnikov, 2.5)]).unwrap();
    let all = engines();
    let (_, cpu) = &all[0];
    let want = cpu.impute(&k, x.view(), 2).unwrap();
    assert!(want.values.iter().all(|v| v.is_finite()));
    for (name, e) in &all[1..] {
        let got = e.impute(&k, x.view(), 2).unwrap();
        assert_eq!(got.imputed, want.imputed, "{name}");
        assert_close(name, &got.values, &want.values.mapv(f64::from), 1e-4, 1e-5);
    }
}

#[test]
fn key_sets_batch_product_kernels_apart() {
    let x = data(18, 200);
    let y = Rng::new(19).matrix(200, 2, -1.0, 1.0);
    let q = data(20, 25);
    for (name, e) in engines() {
        let set = e.prepare(x.view()).values(y.view()).build().unwrap();
        for k in products() {
            let got = set.local_mean(&k, q.view()).unwrap();
            let (want, _) = ref_local_mean(&k, &q, &x, &y);
            assert_close(&format!("{name} {k}"), &got.values, &want, 1e-4, 1e-5);
            let dens = set.log_density(&k, q.view());
            let one = e.log_density(&k, q.view(), x.view(), None);
            match (dens, one) {
                (Ok(a), Ok(b)) => {
                    for i in 0..q.nrows() {
                        assert!((a[i] - b[i]).abs() < 1e-4 || a[i] == b[i], "{name} {k}");
                    }
                }
                (Err(a), Err(b)) => assert_eq!(a, b),
                (a, b) => panic!("{name} {k}: {a:?} vs {b:?}"),
            }
        }
    }
}

#[test]
fn a_kernel_that_does_not_cover_the_data_is_refused_by_every_op() {
    let x = data(21, 20);
    let y = Rng::new(22).matrix(20, 1, -1.0, 1.0);
    let k = Kernel::product([(2, Profile::Gaussian, 1.0), (2, Profile::Uniform, 1.0)]).unwrap();
    let is_dim = |r: Result<(), Error>, what: &str| match r {
        Err(Error::KernelDimension {
            kernel: 4, data: 5, ..
        }) => {}
        other => panic!("{what}: {other:?}"),
    };
    let e = cpu();
    is_dim(
        e.local_mean(&k, x.view(), x.view(), y.view()).map(|_| ()),
        "local_mean",
    );
    is_dim(
        e.self_local_mean(&k, x.view()).map(|_| ()),
        "self_local_mean",
    );
    is_dim(
        e.kernel_matrix(&k, x.view(), x.view()).map(|_| ()),
        "kernel_matrix",
    );
    is_dim(
        e.laplacian(&k, x.view(), LaplacianKind::RandomWalk)
            .map(|_| ()),
        "laplacian",
    );
    is_dim(
        e.log_density(&k, x.view(), x.view(), None).map(|_| ()),
        "density",
    );
    is_dim(
        e.local_polynomial(&k, x.view(), x.view(), y.view(), 1)
            .map(|_| ()),
        "local_polynomial",
    );
    is_dim(
        e.local_pca(&k, x.view(), x.view(), 1).map(|_| ()),
        "local_pca",
    );
    is_dim(e.score(&k, x.view(), x.view()).map(|_| ()), "score");
    is_dim(e.impute(&k, x.view(), 1).map(|_| ()), "impute");
    let params = MeanShiftParams::new().kernel(k).check().unwrap();
    is_dim(e.mean_shift(&params, x.view()).map(|_| ()), "mean_shift");
    let params = MedoidShiftParams::new().kernel(k).check().unwrap();
    is_dim(
        e.medoid_shift(&params, x.view()).map(|_| ()),
        "medoid_shift",
    );
    let set = e.prepare(x.view()).values(y.view()).build().unwrap();
    is_dim(
        set.local_mean(&k, x.view()).map(|_| ()),
        "key set local_mean",
    );
    is_dim(set.log_density(&k, x.view()).map(|_| ()), "key set density");
    // Blocks themselves.
    assert!(Kernel::product(Vec::<(usize, Profile, f32)>::new()).is_err());
    assert!(Kernel::product([(1, Profile::Gaussian, 0.0)]).is_err());
    assert!(Kernel::product([(0, Profile::Gaussian, 1.0)]).is_err());
    assert!(Kernel::product(vec![(1, Profile::Gaussian, 1.0); 9]).is_err());
    // A score needs a shadow in every block.
    let flat = Kernel::product([(2, Profile::Uniform, 1.0), (3, Profile::Gaussian, 1.0)]).unwrap();
    assert!(matches!(
        e.score(&flat, x.view(), x.view()),
        Err(Error::InvalidParameter { name: "kernel", .. })
    ));
}

/// A block whose bandwidth makes every `f32` weight vanish still gives the
/// nearest keys' average (the rows are finished in `f64`); a compact block
/// with no key in reach leaves the row empty, counted.
#[test]
fn far_rows_are_finished_and_empty_rows_counted() {
    let x = Array2::from_shape_vec((3, 2), vec![0.0f32, 0.0, 1.0, 0.5, 2.0, 0.2]).unwrap();
    let y = Array2::from_shape_vec((3, 1), vec![1.0f32, 2.0, 4.0]).unwrap();
    let q = Array2::from_shape_vec((2, 2), vec![100.0f32, 0.45, -50.0, 0.0]).unwrap();
    let far =
        Kernel::product([(1, Profile::Gaussian, 1e-18), (1, Profile::Gaussian, 1.0)]).unwrap();
    let compact =
        Kernel::product([(1, Profile::Uniform, 1.5), (1, Profile::Cauchy, 1e-18)]).unwrap();
    for (name, e) in engines() {
        // Key 2 is nearest in the first block by far: its value.
        let got = e.local_mean(&far, q.view(), x.view(), y.view()).unwrap();
        assert_eq!(got.empty_rows, 0, "{name}");
        assert_eq!(got.values[[0, 0]], 4.0, "{name}");
        assert_eq!(got.values[[1, 0]], 1.0, "{name}");
        let got = e
            .local_mean(&compact, q.view(), x.view(), y.view())
            .unwrap();
        assert_eq!(got.empty_rows, 2, "{name}");
        assert!(got.values.iter().all(|v| v.is_nan()), "{name}");
        let at_keys = e
            .local_mean(&compact, x.view(), x.view(), y.view())
            .unwrap();
        assert_eq!(at_keys.empty_rows, 0, "{name}");
        // Within the uniform block every key is in reach; the cauchy block
        // at 1e-18 picks each query's own key.
        for i in 0..3 {
            assert_eq!(at_keys.values[[i, 0]], y[[i, 0]], "{name} row {i}");
        }
    }
}

/// A key far in a full-support block (its `t_b` beyond `1e37`) still weighs
/// against keys far in another block: no block is cut on its own.
#[test]
fn a_far_cauchy_or_laplacian_block_is_weighed_not_cut() {
    let q = Array2::from_shape_vec((1, 2), vec![0.0f32, 0.0]).unwrap();
    let y = Array2::from_shape_vec((2, 1), vec![1.0f32, 2.0]).unwrap();
    for (p, x) in [
        (Profile::Cauchy, vec![3.2e18f32, 0.0, 0.0, 20.0]),
        (Profile::Laplacian, vec![3.2e18f32, 0.0, 0.0, 2.9e18]),
    ] {
        let x = Array2::from_shape_vec((2, 2), x).unwrap();
        let k = Kernel::product([(1, p, 1.0), (1, Profile::Gaussian, 1.0)]).unwrap();
        let (want, _) = ref_local_mean(&k, &q, &x, &y);
        let want_ld: f64 = {
            let l: Vec<f64> = (0..2)
                .map(|j| product_log_weight(&k, &[0.0, 0.0], x.row(j).as_slice().unwrap()))
                .collect();
            let m = l[0].max(l[1]);
            m + ((l[0] - m).exp() + (l[1] - m).exp()).ln()
        };
        for (name, e) in engines() {
            let got = e.local_mean(&k, q.view(), x.view(), y.view()).unwrap();
            assert_close(&format!("{name} {p}"), &got.values, &want, 1e-5, 1e-6);
            // ln Σ K, from the density: add back ln(N·c) (gaussian and the
            // block's 1-D normalizer).
            let ln_c = locus::ln_normalizer(p, 1).unwrap()
                + locus::ln_normalizer(Profile::Gaussian, 1).unwrap();
            let ld = e.log_density(&k, q.view(), x.view(), None).unwrap()[0] + 2f64.ln() + ln_c;
            assert!(
                (ld - want_ld).abs() < 1e-4 * want_ld.abs(),
                "{name} {p}: {ld} vs {want_ld}"
            );
        }
    }
}

/// Product kernels differing only in their bandwidths share one compiled
/// pipeline (the scales travel in the uniform block): each bandwidth's
/// results are its own.
#[test]
fn a_bandwidth_search_gets_each_bandwidths_results() {
    let Some(g) = gpu() else { return };
    let x = data(24, 50);
    let y = Rng::new(25).matrix(50, 1, -1.0, 1.0);
    let run = |h: f32| {
        let k =
            Kernel::product([(2, Profile::Uniform, 1.0 + h), (3, Profile::Gaussian, h)]).unwrap();
        let got = g.local_mean(&k, x.view(), x.view(), y.view()).unwrap();
        let (want, _) = ref_local_mean(&k, &x, &x, &y);
        assert_close(&format!("h={h}"), &got.values, &want, 1e-4, 1e-5);
    };
    for h in [0.5f32, 0.25, 0.75, 1.5, 3.0] {
        run(h);
    }
}

/// Block differences are scaled by `1/h_b` before they are squared: raw
/// squared distances beyond the `f32` range (coordinates near 1e19, with
/// bandwidths to match) still weigh as the `f64` reference says; a product
/// of compact blocks leaves a row with no key in reach empty.
#[test]
fn huge_coordinates_are_scaled_before_squaring() {
    let q = Array2::from_shape_vec((1, 2), vec![0.0f32, 0.0]).unwrap();
    let x = Array2::from_shape_vec((2, 2), vec![2e19f32, 0.0, 1.5e19, 1.5e19]).unwrap();
    let y = Array2::from_shape_vec((2, 1), vec![1.0f32, 2.0]).unwrap();
    for p in [Profile::Gaussian, Profile::Cauchy, Profile::Laplacian] {
        let k = Kernel::product([(1, p, 1e18), (1, p, 1e18)]).unwrap();
        let (want, _) = ref_local_mean(&k, &q, &x, &y);
        for (name, e) in engines() {
            let got = e.local_mean(&k, q.view(), x.view(), y.view()).unwrap();
            assert_close(&format!("{name} {p}"), &got.values, &want, 1e-5, 1e-6);
        }
    }
    let compact =
        Kernel::product([(1, Profile::Uniform, 1.0), (1, Profile::Biweight, 1.0)]).unwrap();
    for (name, e) in engines() {
        let got = e
            .local_mean(&compact, q.view(), x.view(), y.view())
            .unwrap();
        assert_eq!(got.empty_rows, 1, "{name}");
    }
}
