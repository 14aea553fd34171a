//! Variable-bandwidth MeanShift: clusters of different scales that no one
//! bandwidth separates (two tight clusters, σ = 0.05, 0.5 apart, and a
//! wide one, σ = 2), on the CPU and the GPU (lavapipe).

mod common;

use common::{Rng, engines_and_tiny_tiles};
use locus::{AdaptiveBandwidth, Engine, Error, MeanShiftParams, Profile, Seeds};
use ndarray::Array2;

/// A standard normal draw (Box–Muller).
fn normal(rng: &mut Rng) -> f32 {
    let u = f64::from(rng.uniform()).max(1e-12);
    let v = f64::from(rng.uniform());
    ((-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()) as f32
}

/// 200 points at σ = 0.05 around (0, 0), 200 around (0.5, 0), 400 at
/// σ = 2 around (12, 0) (radius clipped at 2.5σ), with their true labels.
fn three_scales() -> (Array2<f32>, Vec<usize>) {
    let mut rng = Rng::new(2001);
    let mut x = Vec::new();
    let mut truth = Vec::new();
    for (c, (cx, sigma, count)) in [(0.0f32, 0.05f32, 200), (0.5, 0.05, 200), (12.0, 2.0, 400)]
        .into_iter()
        .enumerate()
    {
        let mut made = 0;
        while made < count {
            let (a, b) = (normal(&mut rng), normal(&mut rng));
            if a * a + b * b > 2.5 * 2.5 {
                continue;
            }
            x.extend([cx + sigma * a, sigma * b]);
            truth.push(c);
            made += 1;
        }
    }
    (Array2::from_shape_vec((truth.len(), 2), x).unwrap(), truth)
}

/// Whether `labels` is `truth` up to renaming (adjusted Rand index 1).
fn same_partition(labels: &[i64], truth: &[usize]) -> bool {
    let mut map = std::collections::HashMap::new();
    let mut back = std::collections::HashMap::new();
    labels
        .iter()
        .zip(truth)
        .all(|(&l, &t)| *map.entry(l).or_insert(t) == t && *back.entry(t).or_insert(l) == l)
}

#[test]
fn adaptive_bandwidths_separate_what_no_fixed_bandwidth_can() {
    let (x, truth) = three_scales();
    let cpu = Engine::cpu();
    // Every fixed bandwidth either splits the wide cluster or merges the
    // tight ones.
    for h in [
        0.05f32, 0.1, 0.15, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0, 5.0,
    ] {
        let p = MeanShiftParams::new()
            .profile(Profile::Gaussian)
            .bandwidth(h)
            .check()
            .unwrap();
        let fit = cpu.mean_shift(&p, x.view()).unwrap();
        assert!(
            !same_partition(&fit.labels.to_vec(), &truth),
            "h = {h} recovers the partition with {} modes",
            fit.modes.nrows()
        );
    }
    // h_j = 3 × the distance to the 20th nearest other point: about 0.07
    // in the tight clusters' cores, 2 to 5 in the wide one.
    let rule = AdaptiveBandwidth::Knn { k: 20, alpha: 3.0 };
    let engines = engines_and_tiny_tiles(37, 101);
    for profile in [Profile::Gaussian, Profile::Uniform, Profile::Epanechnikov] {
        let p = MeanShiftParams::new()
            .profile(profile)
            .adaptive_bandwidth(rule.clone())
            .check()
            .unwrap();
        for (name, e) in &engines {
            let fit = e.mean_shift(&p, x.view()).unwrap();
            let what = format!("{name} {profile}");
            assert!(fit.converged, "{what}");
            assert_eq!(fit.modes.nrows(), 3, "{what}: modes {:?}", fit.modes);
            assert!(same_partition(&fit.labels.to_vec(), &truth), "{what}");
            let mut sizes = fit.cluster_sizes();
            sizes.sort_unstable();
            assert_eq!(sizes, [200, 200, 400], "{what}");
            // The modes sit at the clusters' centres.
            let mut xs: Vec<f32> = fit.modes.column(0).to_vec();
            xs.sort_by(f32::total_cmp);
            for (got, want, tol) in [(xs[0], 0.0, 0.02), (xs[1], 0.5, 0.02), (xs[2], 12.0, 1.5)] {
                assert!((got - want).abs() < tol, "{what}: {xs:?}");
            }
        }
    }
    let p = MeanShiftParams::new()
        .profile(Profile::Gaussian)
        .adaptive_bandwidth(rule)
        .check()
        .unwrap();
    // The same bandwidths given per point give the same fit.
    let h = cpu.knn_bandwidths(x.view(), 20, 3.0).unwrap();
    let given = MeanShiftParams::new()
        .profile(Profile::Gaussian)
        .adaptive_bandwidth(AdaptiveBandwidth::PerPoint(h))
        .check()
        .unwrap();
    assert_eq!(
        cpu.mean_shift(&given, x.view()).unwrap(),
        cpu.mean_shift(&p, x.view()).unwrap()
    );
}

#[test]
fn adaptive_mean_shift_errors_are_typed() {
    let x = Array2::from_shape_fn((6, 2), |(i, k)| (i * 2 + k) as f32);
    let e = Engine::cpu();
    let param = |r: locus::Result<MeanShiftParams>, name: &str| {
        let r = r.and_then(|p| p.check()).map(|_| ());
        assert!(
            matches!(r, Err(Error::InvalidParameter { name: n, .. }) if n == name),
            "{name}: {r:?}"
        );
    };
    let base = || MeanShiftParams::new().profile(Profile::Gaussian);
    param(
        Ok(base().adaptive_bandwidth(AdaptiveBandwidth::Knn { k: 0, alpha: 1.0 })),
        "k",
    );
    param(
        Ok(base().adaptive_bandwidth(AdaptiveBandwidth::Knn { k: 1, alpha: -1.0 })),
        "alpha",
    );
    param(
        Ok(base().adaptive_bandwidth(AdaptiveBandwidth::PerPoint(vec![1.0, 0.0]))),
        "bandwidths",
    );
    param(
        Ok(base()
            .blurring(true)
            .adaptive_bandwidth(AdaptiveBandwidth::Knn { k: 1, alpha: 1.0 })),
        "adaptive_bandwidth",
    );
    // Checked against the data when fitting.
    let fit = |rule| {
        let p = base().adaptive_bandwidth(rule).check().unwrap();
        e.mean_shift(&p, x.view()).map(|_| ())
    };
    assert!(matches!(
        fit(AdaptiveBandwidth::PerPoint(vec![1.0; 5])),
        Err(Error::InvalidParameter {
            name: "bandwidths",
            ..
        })
    ));
    assert!(matches!(
        fit(AdaptiveBandwidth::Knn { k: 6, alpha: 1.0 }),
        Err(Error::InvalidParameter { name: "k", .. })
    ));
    let seeds = Array2::<f32>::zeros((2, 3));
    let p = base()
        .seeds(Seeds::Given(seeds))
        .adaptive_bandwidth(AdaptiveBandwidth::Knn { k: 2, alpha: 1.0 })
        .check()
        .unwrap();
    assert!(matches!(
        e.mean_shift(&p, x.view()),
        Err(Error::Cluster(locus::ClusterError::SeedDimension { .. }))
    ));
}

/// With every point at the same bandwidth, variable-bandwidth MeanShift is
/// fixed MeanShift: bin seeding on the same grid (cells of `h` from the
/// origin, on the points as given, whatever their centre), the same
/// iterations, modes and labels. Data offset from the origin by a
/// non-whole number of cells, so a grid from the data's centre differs.
#[test]
fn one_bandwidth_for_every_point_is_fixed_mean_shift() {
    let (mut x, _) = three_scales();
    x.mapv_inplace(|v| v + 3.3);
    let h = 1.5f32;
    let e = Engine::cpu();
    let seeds = Seeds::Binned { min_bin_freq: 1 };
    for p in [Profile::Gaussian, Profile::Epanechnikov] {
        let fixed = MeanShiftParams::new()
            .profile(p)
            .bandwidth(h)
            .seeds(seeds.clone())
            .check()
            .unwrap();
        let variable = MeanShiftParams::new()
            .profile(p)
            .adaptive_bandwidth(AdaptiveBandwidth::PerPoint(vec![h; x.nrows()]))
            .seeds(seeds.clone())
            .check()
            .unwrap();
        let a = e.mean_shift(&fixed, x.view()).unwrap();
        let b = e.mean_shift(&variable, x.view()).unwrap();
        assert_eq!(a.labels, b.labels, "{p}");
        assert_eq!(a.iterations, b.iterations, "{p}");
        assert_eq!(a.modes.dim(), b.modes.dim(), "{p}");
        for (u, v) in a.modes.iter().zip(&b.modes) {
            assert!((u - v).abs() <= 1e-4, "{p}: modes {u} vs {v}");
        }
    }
}
