//! MeanShift and MedoidShift: scikit-learn's semantics written plainly in
//! f64 as the reference, GPU vs CPU parity, convergence, bad input.

mod common;

use common::*;
use locus::{
    Bandwidth, ClusterError, Engine, Error, Kernel, MeanShiftFit, MeanShiftParams,
    MedoidShiftParams, Profile, Seeds, TileLimits, scott_bandwidth, silverman_bandwidth,
};
use ndarray::{Array2, array};

// ---------------------------------------------------------------- data

/// `n` points around `centres` (one row each), isotropic normal with
/// standard deviation `std`; point `i` belongs to centre `i % centres`.
fn blobs(rng: &mut Rng, n: usize, centres: &Array2<f32>, std: f32) -> Array2<f32> {
    let (c, d) = centres.dim();
    let mut x = Array2::zeros((n, d));
    for i in 0..n {
        for k in 0..d {
            let (u1, u2) = (rng.uniform().max(1e-7), rng.uniform());
            let z = (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos();
            x[[i, k]] = centres[[i % c, k]] + std * z;
        }
    }
    x
}

/// Eight centres in [−10, 10]², as in the benchmarks.
fn eight_centres(rng: &mut Rng) -> Array2<f32> {
    rng.matrix(8, 2, -10.0, 10.0)
}

fn engines() -> Vec<(&'static str, &'static Engine)> {
    let mut v = vec![("cpu", cpu())];
    if let Some(g) = gpu() {
        v.push(("gpu", g));
    }
    v
}

fn sq(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

fn rows64(x: &Array2<f32>) -> Vec<Vec<f64>> {
    x.rows()
        .into_iter()
        .map(|r| r.iter().map(|&v| f64::from(v)).collect())
        .collect()
}

// ------------------------------------------------ the reference semantics

/// scikit-learn's MeanShift with a flat kernel, written plainly in f64:
/// each seed moves to the mean of the points within distance h (an open
/// ball, as the uniform profile) until its shift is ≤ tol·h; a seed whose
/// ball is empty is dropped; the rest are keyed by position with the size
/// of their last ball, sorted by (size, position) descending; each one
/// still standing removes the others within ≤ h; points get the nearest
/// survivor. Returns (modes, labels).
fn reference_flat(
    x: &[Vec<f64>],
    h: f64,
    seeds: &[Vec<f64>],
    tol: f64,
) -> (Vec<Vec<f64>>, Vec<i64>) {
    let h2 = h * h;
    let mut found: Vec<(Vec<f64>, usize)> = Vec::new();
    for seed in seeds {
        let mut mean = seed.clone();
        let mut size;
        let mut it = 0;
        loop {
            let within: Vec<&Vec<f64>> = x.iter().filter(|p| sq(p, &mean) < h2).collect();
            size = within.len();
            if size == 0 {
                break;
            }
            let old = mean.clone();
            mean = (0..old.len())
                .map(|k| within.iter().map(|p| p[k]).sum::<f64>() / size as f64)
                .collect();
            if sq(&mean, &old).sqrt() <= tol * h || it == 300 {
                break;
            }
            it += 1;
        }
        if size > 0 && !found.iter().any(|(m, _)| *m == mean) {
            found.push((mean, size));
        }
    }
    found.sort_by(|a, b| {
        b.1.cmp(&a.1).then_with(|| {
            b.0.iter()
                .zip(&a.0)
                .map(|(p, q)| p.total_cmp(q))
                .find(|o| o.is_ne())
                .unwrap_or(std::cmp::Ordering::Equal)
        })
    });
    let mut keep = vec![true; found.len()];
    for i in 0..found.len() {
        if keep[i] {
            for j in 0..found.len() {
                if j != i && sq(&found[i].0, &found[j].0) <= h2 {
                    keep[j] = false;
                }
            }
        }
    }
    let modes: Vec<Vec<f64>> = found
        .into_iter()
        .zip(keep)
        .filter(|(_, k)| *k)
        .map(|(f, _)| f.0)
        .collect();
    let labels = x
        .iter()
        .map(|p| {
            (0..modes.len())
                .min_by(|&a, &b| sq(p, &modes[a]).total_cmp(&sq(p, &modes[b])))
                .unwrap() as i64
        })
        .collect();
    (modes, labels)
}

/// scikit-learn's bin seeds: bins round(x/h) (half to even) with at least
/// `min_freq` points, at their grid points.
fn reference_bins(x: &[Vec<f64>], h: f64, min_freq: usize) -> Vec<Vec<f64>> {
    let mut bins: std::collections::BTreeMap<Vec<i64>, usize> = Default::default();
    for p in x {
        let b: Vec<i64> = p.iter().map(|v| (v / h).round_ties_even() as i64).collect();
        *bins.entry(b).or_default() += 1;
    }
    bins.into_iter()
        .filter(|(_, c)| *c >= min_freq)
        .map(|(b, _)| b.iter().map(|&v| v as f64 * h).collect())
        .collect()
}

#[track_caller]
fn assert_matches_reference(
    what: &str,
    fit: &MeanShiftFit,
    modes: &[Vec<f64>],
    labels: &[i64],
    h: f64,
) {
    assert_eq!(fit.modes.nrows(), modes.len(), "{what}: number of modes");
    for (i, m) in modes.iter().enumerate() {
        for (k, &v) in m.iter().enumerate() {
            let got = f64::from(fit.modes[[i, k]]);
            assert!(
                (got - v).abs() <= 1e-4 * h,
                "{what}: mode {i}[{k}] = {got}, expected {v}"
            );
        }
    }
    let wrong = fit
        .labels
        .iter()
        .zip(labels)
        .filter(|(a, b)| a != b)
        .count();
    assert_eq!(wrong, 0, "{what}: {wrong} labels differ from the reference");
}

// ------------------------------------------------------------- tests

#[test]
fn flat_kernel_with_bin_seeding_gives_the_reference_partition() {
    let mut rng = Rng::new(41);
    let c = eight_centres(&mut rng);
    let x = blobs(&mut rng, 2000, &c, 0.6);
    let h = 1.0;
    let x64 = rows64(&x);
    for min_freq in [1, 5] {
        let seeds = reference_bins(&x64, h, min_freq);
        let (modes, labels) = reference_flat(&x64, h, &seeds, 1e-3);
        let params = MeanShiftParams::new()
            .bandwidth(h as f32)
            .seeds(Seeds::Binned {
                min_bin_freq: min_freq,
            })
            .check()
            .unwrap();
        for (name, e) in engines() {
            let fit = e.mean_shift(&params, x.view()).unwrap();
            assert!(fit.converged);
            assert_matches_reference(
                &format!("{name} binned ≥{min_freq}"),
                &fit,
                &modes,
                &labels,
                h,
            );
        }
    }
}

#[test]
fn flat_kernel_with_every_point_a_seed_gives_the_reference_partition() {
    let mut rng = Rng::new(43);
    let c = eight_centres(&mut rng);
    let x = blobs(&mut rng, 700, &c, 0.6);
    let x64 = rows64(&x);
    let (modes, labels) = reference_flat(&x64, 1.0, &x64, 1e-3);
    let params = MeanShiftParams::new().bandwidth(1.0).check().unwrap();
    let fit = cpu().mean_shift(&params, x.view()).unwrap();
    assert_matches_reference("cpu all seeds", &fit, &modes, &labels, 1.0);
    // Same populations as counted plainly.
    for (i, m) in modes.iter().enumerate() {
        let n = x64.iter().filter(|p| sq(p, m) < 1.0).count();
        assert_eq!(fit.populations[i], n);
    }
}

/// GPU and CPU: same modes (within 1e-4·h), same labels, same iteration
/// counts, for several profiles, seedings and tilings.
#[test]
fn gpu_matches_cpu_on_blobs() {
    let Some(g) = gpu() else { return };
    // Seed chunks of 37, key tiles of 53 swept in windows of 20 and split
    // across 3 workgroups, value columns two at a time; and tiles bounded
    // by a 400-byte binding instead.
    let tiny = TileLimits {
        query_rows: Some(37),
        key_rows: Some(53),
        value_cols: Some(2),
        buffer_bytes: None,
        key_splits: Some(3),
        dispatch_keys: Some(20),
    };
    let Some(g_tiny) = gpu_engine(tiny) else {
        return;
    };
    let small = TileLimits {
        buffer_bytes: Some(400),
        ..TileLimits::default()
    };
    let Some(g_small) = gpu_engine(small) else {
        return;
    };
    let mut rng = Rng::new(47);
    let c = rng.matrix(4, 2, -6.0, 6.0);
    let x = blobs(&mut rng, 301, &c, 0.7);
    let c3 = rng.matrix(3, 3, -5.0, 5.0);
    let x3 = blobs(&mut rng, 203, &c3, 0.5);
    let cases: Vec<(&str, &Array2<f32>, MeanShiftParams)> = vec![
        ("uniform all", &x, MeanShiftParams::new().bandwidth(1.2)),
        (
            "gaussian binned",
            &x,
            MeanShiftParams::new()
                .profile(Profile::Gaussian)
                .bandwidth(0.8)
                .seeds(Seeds::Binned { min_bin_freq: 1 })
                .tol(1e-4),
        ),
        (
            "epanechnikov all 3-D",
            &x3,
            MeanShiftParams::new()
                .profile(Profile::Epanechnikov)
                .bandwidth(1.5),
        ),
        (
            "biweight blurring",
            &x,
            MeanShiftParams::new()
                .profile(Profile::Biweight)
                .bandwidth(1.5)
                .blurring(true),
        ),
        (
            "cauchy all, cluster_all off",
            &x3,
            MeanShiftParams::new()
                .profile(Profile::Cauchy)
                .bandwidth(0.7)
                .cluster_all(false)
                .tol(1e-4),
        ),
    ];
    for (what, data, params) in cases {
        let params = params.check().unwrap();
        let want = cpu().mean_shift(&params, data.view()).unwrap();
        assert!(want.converged, "{what}");
        for (name, e) in [
            ("gpu", g),
            ("gpu tiny tiles", &g_tiny),
            ("gpu small bindings", &g_small),
        ] {
            let got = e.mean_shift(&params, data.view()).unwrap();
            let what = format!("{name} {what}");
            assert_eq!(got.iterations, want.iterations, "{what}: iterations");
            assert_eq!(got.converged, want.converged, "{what}");
            assert_eq!(got.modes.dim(), want.modes.dim(), "{what}: modes");
            let h = params_h(&params);
            for (a, b) in got.modes.iter().zip(&want.modes) {
                assert!((a - b).abs() <= 1e-4 * h, "{what}: mode {a} vs {b}");
            }
            assert_eq!(got.labels, want.labels, "{what}: labels");
            assert_eq!(got.populations, want.populations, "{what}: populations");
        }
    }
}

fn params_h(p: &locus::MeanShiftValidParams) -> f32 {
    match p.bandwidth() {
        Bandwidth::Fixed(h) => h,
        _ => unreachable!("tests use fixed bandwidths"),
    }
}

/// Four blobs 10 apart: classic and blurring MeanShift both find the four
/// centres and the generating partition, on every profile.
#[test]
fn classic_and_blurring_converge_on_separated_blobs() {
    let mut rng = Rng::new(53);
    let c = array![[0.0f32, 0.0], [10.0, 0.0], [0.0, 10.0], [10.0, 10.0]];
    let x = blobs(&mut rng, 400, &c, 0.4);
    for (name, e) in engines() {
        for p in Profile::ALL {
            for blurring in [false, true] {
                // Heavy tails (laplacian, cauchy) pull the blobs into one
                // when the points themselves move; blurring is also slow on
                // the software GPU, where one profile suffices.
                if blurring
                    && (matches!(p, Profile::Laplacian | Profile::Cauchy)
                        || (name == "gpu" && p != Profile::Epanechnikov))
                {
                    continue;
                }
                let params = MeanShiftParams::new()
                    .profile(p)
                    .bandwidth(2.0)
                    .blurring(blurring)
                    .seeds(if blurring {
                        Seeds::All
                    } else {
                        Seeds::Binned { min_bin_freq: 3 }
                    })
                    .check()
                    .unwrap();
                let fit = e.mean_shift(&params, x.view()).unwrap();
                let what = format!("{name} {p} blurring={blurring}");
                assert!(
                    fit.converged,
                    "{what}: not converged in {} iterations",
                    fit.iterations
                );
                assert_eq!(fit.modes.nrows(), 4, "{what}: {:?}", fit.modes);
                // Each mode near one centre, each point with its centre's mode.
                let mut of_centre = [usize::MAX; 4];
                for (m, row) in fit.modes.rows().into_iter().enumerate() {
                    let j = (0..4)
                        .min_by(|&a, &b| {
                            let da = (row[0] - c[[a, 0]]).powi(2) + (row[1] - c[[a, 1]]).powi(2);
                            let db = (row[0] - c[[b, 0]]).powi(2) + (row[1] - c[[b, 1]]).powi(2);
                            da.total_cmp(&db)
                        })
                        .unwrap();
                    let dist = ((row[0] - c[[j, 0]]).powi(2) + (row[1] - c[[j, 1]]).powi(2)).sqrt();
                    // Cauchy's heavy tails pull each mode toward the others.
                    let near = if p == Profile::Cauchy { 1.5 } else { 0.3 };
                    assert!(dist < near, "{what}: mode {m} is {dist} from centre {j}");
                    of_centre[j] = m;
                }
                for (i, &l) in fit.labels.iter().enumerate() {
                    assert_eq!(l, of_centre[i % 4] as i64, "{what}: point {i}");
                }
                assert_eq!(fit.cluster_sizes(), vec![100; 4], "{what}");
            }
        }
    }
}

#[test]
fn constant_data_converges_in_one_step() {
    let x = Array2::from_elem((50, 3), 1234.5f32);
    for (name, e) in engines() {
        for p in [Profile::Uniform, Profile::Gaussian, Profile::Triangular] {
            for blurring in [false, true] {
                let params = MeanShiftParams::new()
                    .profile(p)
                    .bandwidth(1e-3)
                    .blurring(blurring)
                    .check()
                    .unwrap();
                let fit = e.mean_shift(&params, x.view()).unwrap();
                let what = format!("{name} {p} blurring={blurring}");
                assert_eq!(fit.iterations, 1, "{what}");
                assert!(fit.converged, "{what}");
                assert_eq!(fit.modes, Array2::from_elem((1, 3), 1234.5f32), "{what}");
                assert!(fit.labels.iter().all(|&l| l == 0), "{what}");
                assert_eq!(fit.populations, vec![50], "{what}");
            }
        }
        // An estimated bandwidth of 0 is an error, not a loop.
        let params = MeanShiftParams::new().check().unwrap();
        let err = e.mean_shift(&params, x.view()).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Cluster(ClusterError::DegenerateBandwidth {
                    rule: "quantile",
                    ..
                })
            ),
            "{name}: {err}"
        );
    }
}

#[test]
fn empty_neighbourhoods_stay_put_and_are_dropped() {
    let mut rng = Rng::new(59);
    let c = array![[0.0f32, 0.0], [8.0, 8.0]];
    let x = blobs(&mut rng, 200, &c, 0.5);
    // One seed per blob and one far from everything.
    let seeds = array![[0.3f32, -0.2], [7.5, 8.1], [100.0, -100.0]];
    let params = MeanShiftParams::new()
        .profile(Profile::Epanechnikov)
        .bandwidth(1.5)
        .seeds(Seeds::Given(seeds))
        .check()
        .unwrap();
    for (name, e) in engines() {
        let fit = e.mean_shift(&params, x.view()).unwrap();
        assert!(fit.converged, "{name}");
        assert_eq!(fit.modes.nrows(), 2, "{name}");
        assert!(
            fit.modes.iter().all(|v| v.is_finite() && v.abs() < 10.0),
            "{name}"
        );
    }
    // Only far seeds: no mode at all is a clear error.
    let far = MeanShiftParams::new()
        .profile(Profile::Uniform)
        .bandwidth(1.0)
        .seeds(Seeds::Given(array![[100.0f32, 100.0]]))
        .check()
        .unwrap();
    for (name, e) in engines() {
        let err = e.mean_shift(&far, x.view()).unwrap_err();
        assert!(
            matches!(err, Error::Cluster(ClusterError::NoModes { seeds: 1, .. })),
            "{name}: {err}"
        );
    }
}

#[test]
fn cluster_all_off_labels_far_points_minus_one() {
    let mut rng = Rng::new(61);
    let c = array![[0.0f32, 0.0]];
    let mut x = blobs(&mut rng, 100, &c, 0.3);
    x.row_mut(7).assign(&array![20.0f32, 20.0]);
    // A lone point's bin has one point: with min_bin_freq 2 it seeds nothing.
    for cluster_all in [true, false] {
        let params = MeanShiftParams::new()
            .bandwidth(1.0)
            .seeds(Seeds::Binned { min_bin_freq: 2 })
            .cluster_all(cluster_all)
            .check()
            .unwrap();
        for (name, e) in engines() {
            let fit = e.mean_shift(&params, x.view()).unwrap();
            assert_eq!(fit.modes.nrows(), 1, "{name}");
            let want = if cluster_all { 0 } else { -1 };
            assert_eq!(fit.labels[7], want, "{name} cluster_all={cluster_all}");
            assert_eq!(
                fit.labels.iter().filter(|&&l| l == 0).count(),
                if cluster_all { 100 } else { 99 }
            );
        }
    }
}

#[test]
fn progress_reports_every_iteration_and_max_iter_stops() {
    let mut rng = Rng::new(67);
    let c = eight_centres(&mut rng);
    let x = blobs(&mut rng, 500, &c, 0.6);
    for (name, e) in engines() {
        let params = MeanShiftParams::new()
            .profile(Profile::Gaussian)
            .bandwidth(1.0)
            .seeds(Seeds::Binned { min_bin_freq: 1 })
            .check()
            .unwrap();
        let mut seen = Vec::new();
        let fit = e
            .mean_shift_with_progress(&params, x.view(), |p| seen.push(*p))
            .unwrap();
        assert!(fit.converged);
        assert_eq!(seen.len(), fit.iterations, "{name}");
        for (i, p) in seen.iter().enumerate() {
            assert_eq!(p.iteration, i + 1);
            assert!(p.max_shift.is_finite() && p.max_shift >= 0.0);
            if i > 0 {
                assert!(
                    p.moving <= seen[i - 1].moving,
                    "{name}: moving seeds never return"
                );
            }
        }
        assert_eq!(seen.last().unwrap().moving, 0);
        // Two shifts are not enough: not converged, but a result.
        let short = MeanShiftParams::new()
            .profile(Profile::Gaussian)
            .bandwidth(1.0)
            .seeds(Seeds::Binned { min_bin_freq: 1 })
            .max_iter(2)
            .check()
            .unwrap();
        let fit = e.mean_shift(&short, x.view()).unwrap();
        assert_eq!(fit.iterations, 2, "{name}");
        assert!(!fit.converged, "{name}");
        assert_eq!(fit.labels.len(), 500);
    }
}

// ------------------------------------------------------- bandwidth rules

/// Mean over points of the distance to the k-th nearest (self included).
fn reference_quantile(x: &Array2<f32>, quantile: f64) -> f64 {
    let p = rows64(x);
    let n = p.len();
    let k = ((n as f64 * quantile) as usize).max(1);
    p.iter()
        .map(|a| {
            let mut d: Vec<f64> = p.iter().map(|b| sq(a, b).sqrt()).collect();
            d.sort_by(f64::total_cmp);
            d[k - 1]
        })
        .sum::<f64>()
        / n as f64
}

#[test]
fn bandwidth_estimates_follow_their_definitions() {
    let mut rng = Rng::new(71);
    let x = rng.matrix(403, 3, -2.0, 5.0);
    for q in [0.0, 0.05, 0.3, 1.0] {
        let want = reference_quantile(&x, q);
        for (name, e) in engines() {
            if q == 0.0 {
                // k = 1: the point itself, distance 0.
                let err = e.estimate_bandwidth(x.view(), q, None).unwrap_err();
                assert!(matches!(
                    err,
                    Error::Cluster(ClusterError::DegenerateBandwidth { .. })
                ));
                continue;
            }
            let got = f64::from(e.estimate_bandwidth(x.view(), q, None).unwrap());
            assert!(
                (got - want).abs() <= 1e-5 * want,
                "{name} q={q}: {got} vs {want}"
            );
            // A subsample is a sample: close, deterministic.
            let s1 = e.estimate_bandwidth(x.view(), q, Some(150)).unwrap();
            let s2 = e.estimate_bandwidth(x.view(), q, Some(150)).unwrap();
            assert_eq!(s1, s2);
            assert!(
                (f64::from(s1) - want).abs() < 0.5 * want,
                "{name} q={q}: {s1} vs {want}"
            );
            let all = e.estimate_bandwidth(x.view(), q, Some(1000)).unwrap();
            assert_eq!(f64::from(all), got);
        }
    }
    // Scott and Silverman: σ = RMS of the per-coordinate standard deviations.
    let p = rows64(&x);
    let (n, d) = (p.len() as f64, 3.0);
    let mut var = 0.0;
    for k in 0..3 {
        let m = p.iter().map(|r| r[k]).sum::<f64>() / n;
        var += p.iter().map(|r| (r[k] - m).powi(2)).sum::<f64>() / (n - 1.0);
    }
    let sigma = (var / d).sqrt();
    let scott = sigma * n.powf(-1.0 / (d + 4.0));
    let silverman = sigma * (n * (d + 2.0) / 4.0).powf(-1.0 / (d + 4.0));
    assert!((f64::from(scott_bandwidth(x.view()).unwrap()) - scott).abs() < 1e-5 * scott);
    assert!(
        (f64::from(silverman_bandwidth(x.view()).unwrap()) - silverman).abs() < 1e-5 * silverman
    );
    let constant = Array2::from_elem((10, 2), 3.0f32);
    for r in [
        scott_bandwidth(constant.view()),
        silverman_bandwidth(constant.view()),
    ] {
        assert!(matches!(
            r,
            Err(Error::Cluster(ClusterError::DegenerateBandwidth { .. }))
        ));
    }
    // The rules plug into MeanShift.
    let params = MeanShiftParams::new()
        .bandwidth_rule(Bandwidth::Scott)
        .seeds(Seeds::Binned { min_bin_freq: 1 })
        .check()
        .unwrap();
    let fit = cpu().mean_shift(&params, x.view()).unwrap();
    assert_eq!(fit.bandwidth, scott_bandwidth(x.view()).unwrap());
}

// ----------------------------------------------------------- MedoidShift

/// The O(N³) definition: K̃ (rows normalized, in f64), D squared
/// Euclidean, jumps to argmin_j (K̃D)_ij, followed to a fixed point.
fn reference_medoids(kernel: &Kernel, x: &Array2<f32>) -> Vec<usize> {
    let p = rows64(x);
    let n = p.len();
    let d2: Vec<Vec<f64>> = p
        .iter()
        .map(|a| p.iter().map(|b| sq(a, b)).collect())
        .collect();
    let next = reference_jumps(
        kernel,
        &d2.iter()
            .map(|r| r.iter().map(|v| v.sqrt()).collect())
            .collect::<Vec<Vec<f64>>>(),
        &d2,
    );
    (0..n).map(|i| follow(&next, i)).collect()
}

/// argmin_j Σ_k K̃_ik D_kj, with K from the distances `dk` and D = `dd`.
fn reference_jumps(kernel: &Kernel, dk: &[Vec<f64>], dd: &[Vec<f64>]) -> Vec<usize> {
    let n = dk.len();
    (0..n)
        .map(|i| {
            let w: Vec<f64> = dk[i].iter().map(|&r| kernel.eval_sq_dist(r * r)).collect();
            let s: f64 = w.iter().sum();
            (0..n)
                .min_by(|&a, &b| {
                    let ca: f64 = (0..n).map(|k| w[k] / s * dd[k][a]).sum();
                    let cb: f64 = (0..n).map(|k| w[k] / s * dd[k][b]).sum();
                    ca.total_cmp(&cb).then(a.cmp(&b))
                })
                .unwrap()
        })
        .collect()
}

fn follow(next: &[usize], mut i: usize) -> usize {
    for _ in 0..next.len() {
        if next[i] == i {
            break;
        }
        i = next[i];
    }
    i
}

#[test]
fn medoid_shift_agrees_with_the_cubic_definition() {
    let mut rng = Rng::new(73);
    let c = array![[0.0f32, 0.0], [4.0, 1.0], [1.0, 5.0]];
    let x = blobs(&mut rng, 150, &c, 0.8);
    for p in [Profile::Gaussian, Profile::Epanechnikov, Profile::Cauchy] {
        let kernel = Kernel::new(p, 1.3).unwrap();
        let want = reference_medoids(&kernel, &x);
        let params = MedoidShiftParams::new()
            .profile(p)
            .bandwidth(1.3)
            .check()
            .unwrap();
        for (name, e) in engines() {
            let fit = e.medoid_shift(&params, x.view()).unwrap();
            let what = format!("{name} {p}");
            assert!(fit.converged, "{what}");
            for (i, &l) in fit.labels.iter().enumerate() {
                assert_eq!(fit.medoids[l as usize], want[i], "{what}: point {i}");
            }
            // Modes are sample points, most populated first.
            for (m, &j) in fit.medoids.iter().enumerate() {
                assert_eq!(fit.modes.row(m), x.row(j), "{what}");
            }
            assert!(fit.populations.windows(2).all(|w| w[0] >= w[1]), "{what}");
            assert_eq!(fit.populations.iter().sum::<usize>(), 150);
        }
    }
}

#[test]
fn medoid_shift_on_a_distance_matrix() {
    // A graph: two 6-cliques (edges of length 1) joined by a path of
    // three edges of length 2; distances are shortest paths.
    let n = 14;
    let mut d = vec![vec![f64::INFINITY; n]; n];
    let mut edge = |a: usize, b: usize, w: f64| {
        d[a][b] = w;
        d[b][a] = w;
    };
    for a in 0..6 {
        for b in a + 1..6 {
            edge(a, b, 1.0);
            edge(a + 8, b + 8, 1.0);
        }
    }
    edge(5, 6, 2.0);
    edge(6, 7, 2.0);
    edge(7, 8, 2.0);
    for (i, row) in d.iter_mut().enumerate() {
        row[i] = 0.0;
    }
    for k in 0..n {
        for i in 0..n {
            for j in 0..n {
                if d[i][k] + d[k][j] < d[i][j] {
                    d[i][j] = d[i][k] + d[k][j];
                }
            }
        }
    }
    let dm = Array2::from_shape_fn((n, n), |(i, j)| d[i][j] as f32);
    for p in [Profile::Gaussian, Profile::Uniform] {
        let kernel = Kernel::new(p, 1.5).unwrap();
        let next = reference_jumps(&kernel, &d, &d);
        let want: Vec<usize> = (0..n).map(|i| follow(&next, i)).collect();
        let params = MedoidShiftParams::new()
            .profile(p)
            .bandwidth(1.5)
            .check()
            .unwrap();
        let fit = cpu().medoid_shift_distances(&params, dm.view()).unwrap();
        for (i, &l) in fit.labels.iter().enumerate() {
            assert_eq!(fit.medoids[l as usize], want[i], "{p}: node {i}");
        }
        assert_eq!(fit.modes.dim(), (fit.medoids.len(), 0));
        // The two cliques end in different clusters.
        assert_ne!(fit.labels[0], fit.labels[13], "{p}");
    }
    // The quantile rule reads the rows; Scott needs coordinates.
    let q = MedoidShiftParams::new()
        .bandwidth_rule(Bandwidth::Quantile {
            quantile: 0.3,
            n_samples: None,
        })
        .check()
        .unwrap();
    let fit = cpu().medoid_shift_distances(&q, dm.view()).unwrap();
    assert!(fit.bandwidth > 0.0);
    let scott = MedoidShiftParams::new()
        .bandwidth_rule(Bandwidth::Scott)
        .check()
        .unwrap();
    assert!(matches!(
        cpu().medoid_shift_distances(&scott, dm.view()),
        Err(Error::Cluster(ClusterError::RuleNeedsCoordinates {
            rule: "scott"
        }))
    ));
    if let Some(g) = gpu() {
        let p = MedoidShiftParams::new().bandwidth(1.0).check().unwrap();
        assert!(matches!(
            g.medoid_shift_distances(&p, dm.view()),
            Err(Error::Unsupported { backend: "gpu", .. })
        ));
    }
}

// ------------------------------------------------------------ bad input

#[test]
fn bad_parameters_are_typed_errors() {
    let cluster = |r: locus::Result<locus::MeanShiftValidParams>| match r {
        Err(Error::Cluster(e)) => e,
        other => panic!("expected a cluster error, got {other:?}"),
    };
    assert_eq!(
        cluster(MeanShiftParams::new().max_iter(0).check()),
        ClusterError::ZeroMaxIter { op: "mean_shift" }
    );
    for tol in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        assert!(matches!(
            cluster(MeanShiftParams::new().tol(tol).check()),
            ClusterError::InvalidTolerance { .. }
        ));
    }
    assert_eq!(
        cluster(
            MeanShiftParams::new()
                .seeds(Seeds::Binned { min_bin_freq: 0 })
                .check()
        ),
        ClusterError::ZeroMinBinFreq
    );
    assert_eq!(
        cluster(
            MeanShiftParams::new()
                .blurring(true)
                .seeds(Seeds::Binned { min_bin_freq: 1 })
                .check()
        ),
        ClusterError::BlurringNeedsAllSeeds
    );
    for q in [-0.1, 1.5, f64::NAN] {
        assert!(matches!(
            cluster(
                MeanShiftParams::new()
                    .bandwidth_rule(Bandwidth::Quantile {
                        quantile: q,
                        n_samples: None
                    })
                    .check()
            ),
            ClusterError::InvalidQuantile { .. }
        ));
    }
    assert_eq!(
        cluster(
            MeanShiftParams::new()
                .bandwidth_rule(Bandwidth::Quantile {
                    quantile: 0.3,
                    n_samples: Some(0)
                })
                .check()
        ),
        ClusterError::ZeroSamples
    );
    for h in [0.0f32, -1.0, f32::NAN, f32::INFINITY] {
        assert!(matches!(
            MeanShiftParams::new().bandwidth(h).check(),
            Err(Error::InvalidBandwidth { .. })
        ));
        assert!(matches!(
            MedoidShiftParams::new().bandwidth(h).check(),
            Err(Error::InvalidBandwidth { .. })
        ));
    }
    assert!(matches!(
        MedoidShiftParams::new().max_iter(0).check(),
        Err(Error::Cluster(ClusterError::ZeroMaxIter {
            op: "medoid_shift"
        }))
    ));
    // Given seeds are checked like any input.
    let nan_seed = array![[0.0f32, f32::NAN]];
    assert!(matches!(
        MeanShiftParams::new().seeds(Seeds::Given(nan_seed)).check(),
        Err(Error::NonFinite {
            what: "seeds",
            row: 0,
            col: 1,
            ..
        })
    ));
    assert!(matches!(
        MeanShiftParams::new()
            .seeds(Seeds::Given(Array2::zeros((0, 2))))
            .check(),
        Err(Error::EmptyInput { what: "seeds", .. })
    ));
    assert!(matches!(
        cpu().estimate_bandwidth(Array2::<f32>::zeros((3, 1)).view(), 2.0, None),
        Err(Error::Cluster(ClusterError::InvalidQuantile { .. }))
    ));
}

#[test]
fn bad_data_is_a_typed_error() {
    let params = MeanShiftParams::new().bandwidth(1.0).check().unwrap();
    let medoid = MedoidShiftParams::new().bandwidth(1.0).check().unwrap();
    let mut bad = Array2::<f32>::zeros((5, 2));
    bad[[3, 1]] = f32::INFINITY;
    for (name, e) in engines() {
        for x in [Array2::<f32>::zeros((0, 2)), Array2::<f32>::zeros((4, 0))] {
            assert!(
                matches!(
                    e.mean_shift(&params, x.view()),
                    Err(Error::EmptyInput { what: "points", .. })
                ),
                "{name}"
            );
            assert!(matches!(
                e.medoid_shift(&medoid, x.view()),
                Err(Error::EmptyInput { .. })
            ));
            assert!(matches!(
                e.estimate_bandwidth(x.view(), 0.3, None),
                Err(Error::EmptyInput { .. })
            ));
        }
        assert!(matches!(
            e.mean_shift(&params, bad.view()),
            Err(Error::NonFinite {
                what: "points",
                row: 3,
                col: 1,
                ..
            })
        ));
        assert!(matches!(
            e.medoid_shift(&medoid, bad.view()),
            Err(Error::NonFinite { .. })
        ));
        let wrong_dim = MeanShiftParams::new()
            .bandwidth(1.0)
            .seeds(Seeds::Given(Array2::zeros((2, 3))))
            .check()
            .unwrap();
        assert!(matches!(
            e.mean_shift(&wrong_dim, Array2::<f32>::zeros((5, 2)).view()),
            Err(Error::Cluster(ClusterError::SeedDimension {
                seeds: 3,
                points: 2
            }))
        ));
    }
    // Distance matrices: square, finite, non-negative.
    let not_square = Array2::<f32>::zeros((3, 4));
    assert!(matches!(
        cpu().medoid_shift_distances(&medoid, not_square.view()),
        Err(Error::Cluster(ClusterError::NotSquare { rows: 3, cols: 4 }))
    ));
    let mut negative = Array2::<f32>::zeros((3, 3));
    negative[[1, 2]] = -0.5;
    assert!(matches!(
        cpu().medoid_shift_distances(&medoid, negative.view()),
        Err(Error::Cluster(ClusterError::NegativeDistance {
            row: 1,
            col: 2,
            ..
        }))
    ));
    let mut nan = Array2::<f32>::zeros((3, 3));
    nan[[0, 1]] = f32::NAN;
    assert!(matches!(
        cpu().medoid_shift_distances(&medoid, nan.view()),
        Err(Error::NonFinite {
            what: "distances",
            ..
        })
    ));
}

#[test]
fn single_point_and_one_dimension() {
    let one = array![[3.0f32, -1.0]];
    let line = Array2::from_shape_fn((9, 1), |(i, _)| {
        if i < 5 {
            i as f32 * 0.1
        } else {
            10.0 + i as f32 * 0.1
        }
    });
    for (name, e) in engines() {
        let params = MeanShiftParams::new().bandwidth(0.5).check().unwrap();
        let fit = e.mean_shift(&params, one.view()).unwrap();
        assert_eq!(fit.modes, one, "{name}");
        assert_eq!(fit.labels.to_vec(), vec![0]);
        let fit = e.mean_shift(&params, line.view()).unwrap();
        assert_eq!(fit.modes.nrows(), 2, "{name}");
        assert_eq!(
            fit.labels.to_vec(),
            vec![0, 0, 0, 0, 0, 1, 1, 1, 1],
            "{name}"
        );
        let med = MedoidShiftParams::new().bandwidth(0.5).check().unwrap();
        let fit = e.medoid_shift(&med, one.view()).unwrap();
        assert_eq!(fit.medoids, vec![0], "{name}");
    }
}
