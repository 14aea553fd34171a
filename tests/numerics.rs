//! The numerics contract of docs/numerics.md, case by case: rows whose
//! keys all lie beyond the `f32` distance range, weighted densities whose
//! nearest keys weigh nothing, exact support boundaries of the compact
//! profiles, density constants, and the merge of empty states. CPU, GPU
//! (with device-sized and with tiny tiles) and plain `f64` references
//! written out here.

mod common;

use common::*;
use locus::{
    Engine, Kernel, MeanShiftParams, Profile, Seeds, TileLimits, ln_normalizer, merge_states,
};
use ndarray::{Array1, Array2, array};

/// The CPU, the GPU with device-sized tiles, and the GPU with tiles of a
/// few keys and rows (so every state goes through the merge).
fn engines() -> Vec<(&'static str, &'static Engine)> {
    static TINY: std::sync::OnceLock<Option<Engine>> = std::sync::OnceLock::new();
    let mut v = vec![("cpu", cpu())];
    if let Some(g) = gpu() {
        v.push(("gpu", g));
    }
    let tiny = TINY.get_or_init(|| {
        gpu_engine(TileLimits {
            query_rows: Some(3),
            key_rows: Some(2),
            ..TileLimits::default()
        })
    });
    if let Some(g) = tiny.as_ref() {
        v.push(("gpu-tiny-tiles", g));
    }
    v
}

/// `ln k(r)` from `t = r²` in plain `f64` (−inf outside a compact support).
fn ref_log_k(p: Profile, t: f64) -> f64 {
    match p {
        Profile::Gaussian => -0.5 * t,
        Profile::Laplacian => -t.sqrt(),
        Profile::Cauchy => -(1.0 + t).ln(),
        Profile::Epanechnikov => (1.0 - t).max(0.0).ln(),
        Profile::Uniform => {
            if t < 1.0 {
                0.0
            } else {
                f64::NEG_INFINITY
            }
        }
        Profile::Triangular => (1.0 - t.sqrt()).max(0.0).ln(),
        Profile::Biweight => 2.0 * (1.0 - t).max(0.0).ln(),
        Profile::Cosine => {
            if t < 1.0 {
                (std::f64::consts::FRAC_PI_2 * t.sqrt()).cos().ln()
            } else {
                f64::NEG_INFINITY
            }
        }
    }
}

/// Scaled squared distance in `f64`: no overflow for any `f32` input.
fn ref_t(q: &[f32], x: &[f32], h: f32) -> f64 {
    q.iter()
        .zip(x)
        .map(|(&a, &b)| ((f64::from(a) - f64::from(b)) / f64::from(h)).powi(2))
        .sum()
}

/// `ln Σ_j w_j k(‖q − x_j‖/h)` and the local mean of `y`, by log-sum-exp
/// over `ln w_j + ln k` (no cut-off at any distance).
fn ref_row(k: &Kernel, q: &[f32], x: &Array2<f32>, y: &Array2<f32>, w: &[f64]) -> (f64, Vec<f64>) {
    let lw: Vec<f64> = x
        .rows()
        .into_iter()
        .zip(w)
        .map(|(xj, &wj)| {
            wj.ln() + ref_log_k(k.profile(), ref_t(q, xj.as_slice().unwrap(), k.bandwidth()))
        })
        .collect();
    let m = lw.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    if m == f64::NEG_INFINITY {
        return (m, vec![f64::NAN; y.ncols()]);
    }
    let (mut s, mut u) = (0.0, vec![0.0; y.ncols()]);
    for (j, &l) in lw.iter().enumerate() {
        let e = (l - m).exp();
        s += e;
        for (c, uc) in u.iter_mut().enumerate() {
            *uc += e * f64::from(y[[j, c]]);
        }
    }
    (m + s.ln(), u.into_iter().map(|v| v / s).collect())
}

fn close(a: f64, b: f64, rtol: f64, atol: f64) -> bool {
    (a - b).abs() <= rtol * b.abs() + atol
}

/// Cases where `t = ‖x − q‖²/h²` overflows `f32` for every key: the
/// issue's `h = 1e-18` with keys 0 and 1 and a query at 100, coordinates
/// near 10¹⁹ with `h = 1`, and a query between two far keys.
/// Bandwidth, keys, values, queries.
type Case = (f32, Array2<f32>, Array2<f32>, Array2<f32>);

fn far_cases() -> Vec<Case> {
    vec![
        (
            1e-18,
            array![[0.0f32], [1.0]],
            array![[1.0f32], [2.0]],
            array![[100.0f32]],
        ),
        (
            1.0,
            array![[-1e19f32, 0.0], [-5e18, 0.0], [-5e18, 0.0]],
            array![[1.0f32], [2.0], [4.0]],
            array![[1e19f32, 0.0], [1e19, 1.0]],
        ),
        (
            1e-18,
            array![[-3.0f32], [5.0], [5.0], [40.0]],
            array![[7.0f32], [1.0], [3.0], [5.0]],
            array![[1.0f32], [20.0], [-2.5]],
        ),
    ]
}

#[test]
fn rows_beyond_the_f32_distance_range_keep_their_nearest_keys() {
    for (h, x, y, q) in far_cases() {
        for p in [Profile::Gaussian, Profile::Laplacian, Profile::Cauchy] {
            let k = Kernel::new(p, h).unwrap();
            let ones = vec![1.0; x.nrows()];
            let want: Vec<(f64, Vec<f64>)> = q
                .rows()
                .into_iter()
                .map(|qi| ref_row(&k, qi.as_slice().unwrap(), &x, &y, &ones))
                .collect();
            for (name, e) in engines() {
                let what = format!("{name} {p} h={h}");
                let got = e.local_mean(&k, q.view(), x.view(), y.view()).unwrap();
                assert_eq!(got.empty_rows, 0, "{what}: rows counted empty");
                let st = e
                    .row_states(&k, q.view(), x.view(), Some(y.view()), false)
                    .unwrap();
                assert_eq!(st.empty_rows(), 0, "{what}: states empty");
                let means = st.means();
                for (i, (_, wm)) in want.iter().enumerate() {
                    for (c, &wc) in wm.iter().enumerate() {
                        let g = f64::from(got.values[[i, c]]);
                        assert!(
                            close(g, wc, 1e-5, 1e-6),
                            "{what}: mean [{i},{c}] {g} vs {wc}"
                        );
                        let g = f64::from(means.values[[i, c]]);
                        assert!(
                            close(g, wc, 1e-5, 1e-6),
                            "{what}: state mean [{i},{c}] {g} vs {wc}"
                        );
                    }
                }
                // Where the true log-sum fits in f32 it is given; below
                // the f32 range it is −inf, never a wrong finite number.
                for (i, (&ls, (wl, _))) in st.log_sum().iter().zip(&want).enumerate() {
                    if *wl >= f64::from(f32::MIN) {
                        assert!(
                            close(ls, *wl, 1e-6, 0.0),
                            "{what}: log-sum [{i}] {ls} vs {wl}"
                        );
                    } else {
                        assert_eq!(ls, f64::NEG_INFINITY, "{what}: log-sum [{i}] vs {wl}");
                    }
                }
            }
        }
        // D⁻¹K: the same rows, normalized weights (the local mean of the
        // one-hot columns).
        for p in [Profile::Gaussian, Profile::Laplacian, Profile::Cauchy] {
            let k = Kernel::new(p, h).unwrap();
            let n = x.nrows();
            let eye = Array2::from_shape_fn((n, n), |(a, b)| f32::from(u8::from(a == b)));
            let ones = vec![1.0; n];
            for (name, e) in engines() {
                let nk = e.normalized_kernel_matrix(&k, q.view(), x.view()).unwrap();
                assert_eq!(
                    nk.empty_rows, 0,
                    "{name} {p} h={h}: D⁻¹K rows counted empty"
                );
                for (i, qi) in q.rows().into_iter().enumerate() {
                    let (_, want) = ref_row(&k, qi.as_slice().unwrap(), &x, &eye, &ones);
                    for (j, &w) in want.iter().enumerate() {
                        let g = f64::from(nk.values[[i, j]]);
                        assert!(
                            close(g, w, 1e-5, 1e-7),
                            "{name} {p} h={h}: D⁻¹K [{i},{j}] {g} vs {w}"
                        );
                    }
                }
            }
        }
        // Compact profiles: nothing in reach, NaN rows, counted.
        let k = Kernel::new(Profile::Epanechnikov, h).unwrap();
        for (name, e) in engines() {
            let got = e.local_mean(&k, q.view(), x.view(), y.view()).unwrap();
            assert_eq!(got.empty_rows, q.nrows(), "{name} epanechnikov h={h}");
            assert!(got.values.iter().all(|v| v.is_nan()), "{name}");
            let nk = e.normalized_kernel_matrix(&k, q.view(), x.view()).unwrap();
            assert_eq!(nk.empty_rows, q.nrows(), "{name} epanechnikov h={h}: D⁻¹K");
        }
    }
}

#[test]
fn log_density_far_from_every_key_is_the_true_value() {
    // t = 4e38 and 2.25e38 overflow f32 (as squared distances); the log
    // density ≈ −1.125e38 fits.
    let x = array![[-1e19f32], [-5e18]];
    let q = array![[1e19f32]];
    for p in [Profile::Gaussian, Profile::Laplacian, Profile::Cauchy] {
        let k = Kernel::new(p, 1.0).unwrap();
        let c = match p {
            Profile::Gaussian => (2.0 * std::f64::consts::PI).sqrt(),
            Profile::Laplacian => 2.0,
            _ => std::f64::consts::PI,
        };
        let (ls, _) = ref_row(&k, &[1e19], &x, &Array2::zeros((2, 0)), &[1.0, 1.0]);
        let want = ls - 2f64.ln() - c.ln();
        assert!(want.is_finite() && want > f64::from(f32::MIN));
        for (name, e) in engines() {
            let got = e.log_density(&k, q.view(), x.view(), None).unwrap()[0];
            assert!(close(got, want, 1e-6, 0.0), "{name} {p}: {got} vs {want}");
            let got = e
                .log_density(&k, q.view(), x.view(), Some(array![0.0f32, 3.0].view()))
                .unwrap()[0];
            let (ls, _) = ref_row(&k, &[1e19], &x, &Array2::zeros((2, 0)), &[0.0, 3.0]);
            let want = ls - 3f64.ln() - c.ln();
            assert!(
                close(got, want, 1e-6, 0.0),
                "{name} {p} weighted: {got} vs {want}"
            );
        }
    }
}

/// `ln p̂(q)` of a weighted gaussian KDE in plain f64 (d = 1).
fn ref_weighted_log_density(h: f64, q: f64, x: &[f64], w: &[f64]) -> f64 {
    let lw: Vec<f64> = x
        .iter()
        .zip(w)
        .filter(|&(_, &wj)| wj > 0.0)
        .map(|(&xj, &wj)| wj.ln() - 0.5 * ((q - xj) / h).powi(2))
        .collect();
    let m = lw.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let s: f64 = lw.iter().map(|l| (l - m).exp()).sum();
    let total: f64 = w.iter().sum();
    m + s.ln() - total.ln() - h.ln() - 0.5 * (2.0 * std::f64::consts::PI).ln()
}

#[test]
fn weighted_density_is_right_when_the_nearest_keys_weigh_nothing() {
    let mut far: Vec<f64> = vec![20.0; 256];
    far.push(0.0);
    let mut far_w = vec![0.0; 257];
    far_w[100] = 1.0;
    let cases: Vec<(f64, Vec<f64>, Vec<f64>, f64)> = vec![
        (0.05, vec![0.0, 1.0], vec![0.0, 1.0], -197.92),
        (
            1.0,
            vec![0.0, 12.649111, 13.416408],
            vec![0.0, 1.0, 1e6],
            -90.90,
        ),
        (1.0, far, far_w, -200.92),
        // Weights over 60 orders of magnitude, the heaviest farthest.
        (
            0.5,
            vec![0.0, 1.0, 2.0, 3.0, 9.0],
            vec![1e-30, 0.0, 1.0, 1e-3, 1e30],
            f64::NAN,
        ),
    ];
    for (h, x, w, expect) in cases {
        let want = ref_weighted_log_density(h, 0.0, &x, &w);
        if expect.is_finite() {
            assert!(
                close(want, expect, 0.0, 0.01),
                "reference {want} vs {expect}"
            );
        }
        let k = Kernel::new(Profile::Gaussian, h as f32).unwrap();
        let xm = Array2::from_shape_fn((x.len(), 1), |(i, _)| x[i] as f32);
        let wv: Array1<f32> = w.iter().map(|&v| v as f32).collect();
        let q = array![[0.0f32]];
        for (name, e) in engines() {
            let got = e
                .log_density(&k, q.view(), xm.view(), Some(wv.view()))
                .unwrap()[0];
            assert!(
                close(got, want, 1e-6, 1e-6),
                "{name} h={h} w={w:?}: {got} vs {want}"
            );
        }
    }
}

#[test]
fn weighted_density_matches_reference_on_random_weights_with_zeros() {
    let mut rng = Rng::new(77);
    let (n, m) = (61, 9);
    let x = rng.matrix(n, 2, 0.0, 3.0);
    let q = rng.matrix(m, 2, -1.0, 4.0);
    // Every third weight 0, the others over 20 orders of magnitude.
    let w: Array1<f32> = (0..n)
        .map(|j| {
            if j % 3 == 0 {
                0.0
            } else {
                10f32.powf(rng.uniform() * 20.0 - 10.0)
            }
        })
        .collect();
    let wf: Vec<f64> = w.iter().map(|&v| f64::from(v)).collect();
    for p in [
        Profile::Gaussian,
        Profile::Laplacian,
        Profile::Epanechnikov,
        Profile::Biweight,
        Profile::Cosine,
    ] {
        let k = Kernel::new(p, 0.1).unwrap();
        let ln_c = ln_normalizer(p, 2).unwrap();
        let total: f64 = wf.iter().sum();
        for (name, e) in engines() {
            let got = e
                .log_density(&k, q.view(), x.view(), Some(w.view()))
                .unwrap();
            for i in 0..m {
                let (ls, _) = ref_row(
                    &k,
                    q.row(i).as_slice().unwrap(),
                    &x,
                    &Array2::zeros((n, 0)),
                    &wf,
                );
                let want = ls - total.ln() - 2.0 * 0.1f64.ln() - ln_c;
                if want == f64::NEG_INFINITY {
                    assert_eq!(got[i], want, "{name} {p} [{i}]");
                } else {
                    assert!(
                        close(got[i], want, 1e-5, 1e-5),
                        "{name} {p} [{i}]: {} vs {want}",
                        got[i]
                    );
                }
            }
        }
    }
}

const COMPACT: [Profile; 5] = [
    Profile::Epanechnikov,
    Profile::Uniform,
    Profile::Triangular,
    Profile::Biweight,
    Profile::Cosine,
];

#[test]
fn keys_exactly_one_bandwidth_away_weigh_nothing_on_every_engine() {
    for p in COMPACT {
        for h in [1.0f32, 2.0] {
            // 1-D: the key at r = h is out; 2-D: (0, h) from the origin.
            for (x, q) in [
                (array![[0.0f32], [h]], array![[0.0f32], [h]]),
                (
                    array![[0.0f32, 0.0], [0.0, h]],
                    array![[0.0f32, 0.0], [0.0, h]],
                ),
            ] {
                let y = array![[1.0f32], [3.0]];
                let k = Kernel::new(p, h).unwrap();
                for (name, e) in engines() {
                    let what = format!("{name} {p} h={h} d={}", x.ncols());
                    let lm = e.local_mean(&k, q.view(), x.view(), y.view()).unwrap();
                    assert_eq!(lm.values, array![[1.0f32], [3.0]], "{what}: local means");
                    assert_eq!(lm.empty_rows, 0, "{what}");
                    let st = e.row_states(&k, q.view(), x.view(), None, false).unwrap();
                    assert_eq!(st.log_sum(), array![0.0, 0.0], "{what}: row sums");
                    let km = e.kernel_matrix(&k, q.view(), x.view()).unwrap();
                    assert_eq!(
                        km,
                        array![[1.0f32, 0.0], [0.0, 1.0]],
                        "{what}: kernel matrix"
                    );
                    let nk = e.normalized_kernel_matrix(&k, q.view(), x.view()).unwrap();
                    assert_eq!(nk.values, array![[1.0f32, 0.0], [0.0, 1.0]], "{what}: D⁻¹K");
                    // Only the key at r = h: an empty row.
                    let lone = e
                        .local_mean(
                            &k,
                            q.view(),
                            x.slice(ndarray::s![1..2, ..]),
                            y.slice(ndarray::s![1..2, ..]),
                        )
                        .unwrap();
                    assert_eq!(lone.empty_rows, 1, "{what}: lone key at the boundary");
                    assert!(lone.values[[0, 0]].is_nan(), "{what}");
                    // MeanShift: neither point sees the other, so neither
                    // moves; the two modes, h apart, merge into one holding
                    // one point (a point at r = h is not within h).
                    let params = MeanShiftParams::new()
                        .profile(p)
                        .bandwidth(h)
                        .seeds(Seeds::All)
                        .check()
                        .unwrap();
                    let fit = e.mean_shift(&params, x.view()).unwrap();
                    assert_eq!(fit.populations, vec![1], "{what}: populations");
                    let mode = fit.modes.row(0).to_owned();
                    assert!(
                        x.rows().into_iter().any(|r| r == mode),
                        "{what}: the mode {mode} moved off the points"
                    );
                }
            }
        }
    }
}

/// `c_k = ∫_{ℝᵈ} k(‖u‖) du` written out per profile for d = 2 and 3.
fn closed_form_constant(p: Profile, d: usize) -> f64 {
    let pi = std::f64::consts::PI;
    match (p, d) {
        (Profile::Gaussian, 2) => 2.0 * pi,
        (Profile::Gaussian, 3) => (2.0 * pi).powf(1.5),
        (Profile::Uniform, 2) => pi,
        (Profile::Uniform, 3) => 4.0 * pi / 3.0,
        (Profile::Epanechnikov, 2) => pi / 2.0,
        (Profile::Epanechnikov, 3) => 8.0 * pi / 15.0,
        (Profile::Biweight, 2) => pi / 3.0,
        (Profile::Biweight, 3) => 32.0 * pi / 105.0,
        (Profile::Triangular, 2) => pi / 3.0,
        (Profile::Triangular, 3) => pi / 3.0,
        (Profile::Laplacian, 2) => 2.0 * pi,
        (Profile::Laplacian, 3) => 8.0 * pi,
        (Profile::Cosine, 2) => 4.0 - 8.0 / pi,
        (Profile::Cosine, 3) => 8.0 - 64.0 / (pi * pi),
        _ => unreachable!(),
    }
}

/// `c_k` by the midpoint rule on the radial integral `S_{d−1} ∫₀^∞ k(r) r^{d−1} dr`.
fn integrated_constant(p: Profile, d: usize) -> f64 {
    let pi = std::f64::consts::PI;
    let sphere = if d == 2 { 2.0 * pi } else { 4.0 * pi };
    // r = 1 (where compact profiles end) falls on a cell boundary.
    let (n, top) = (500_000, 50.0);
    let dr = top / n as f64;
    (0..n)
        .map(|i| {
            let r = (i as f64 + 0.5) * dr;
            ref_log_k(p, r * r).exp() * r.powi(d as i32 - 1) * dr
        })
        .sum::<f64>()
        * sphere
}

#[test]
fn density_constants_match_closed_forms_and_integrals_in_two_and_three_dimensions() {
    for d in [2usize, 3] {
        for p in Profile::ALL {
            if p == Profile::Cauchy {
                assert!(
                    ln_normalizer(p, d).is_err(),
                    "cauchy d={d} is not normalizable"
                );
                continue;
            }
            let closed = closed_form_constant(p, d);
            let integral = integrated_constant(p, d);
            assert!(
                close(integral, closed, 1e-6, 0.0),
                "{p} d={d}: ∫ {integral} vs {closed}"
            );
            let c = ln_normalizer(p, d).unwrap().exp();
            assert!(close(c, closed, 1e-12, 0.0), "{p} d={d}: {c} vs {closed}");
            // The density of one key at its own position, h = 1 and 2:
            // k(0) / (hᵈ c_k).
            let x = Array2::<f32>::zeros((1, d));
            for h in [1.0f32, 2.0] {
                let k = Kernel::new(p, h).unwrap();
                let want = 1.0 / (f64::from(h).powi(d as i32) * closed);
                for (name, e) in engines() {
                    let got = e.density(&k, x.view(), x.view(), None).unwrap()[0];
                    assert!(
                        close(got, want, 1e-6, 0.0),
                        "{name} {p} d={d} h={h}: {got} vs {want}"
                    );
                }
            }
        }
    }
}

#[test]
fn merging_empty_states_stays_empty() {
    let mut u = [7.0f64; 2];
    let (m, s) = merge_states(
        (f32::NEG_INFINITY, 0.0, &[0.0, 0.0]),
        (f32::NEG_INFINITY, 0.0, &[0.0, 0.0]),
        &mut u,
    );
    assert_eq!(m, f32::NEG_INFINITY);
    assert_eq!(s, 0.0);
    assert_eq!(u, [0.0, 0.0]);
    // Empty with non-empty: the non-empty one, unchanged.
    let (m, s) = merge_states(
        (f32::NEG_INFINITY, 0.0, &[0.0, 0.0]),
        (-3.0, 2.0, &[1.0, 4.0]),
        &mut u,
    );
    assert_eq!((m, s, u), (-3.0, 2.0, [1.0, 4.0]));
    // Two rows empty on both sides stay empty (and counted) after a merge.
    let k = Kernel::new(Profile::Uniform, 1.0).unwrap();
    let x = array![[0.0f32], [1.0]];
    let q = array![[10.0f32], [0.5], [-20.0]];
    let y = array![[1.0f32], [2.0]];
    for (name, e) in engines() {
        let mut a = e
            .row_states(
                &k,
                q.view(),
                x.slice(ndarray::s![0..1, ..]),
                Some(y.slice(ndarray::s![0..1, ..])),
                false,
            )
            .unwrap();
        let b = e
            .row_states(
                &k,
                q.view(),
                x.slice(ndarray::s![1..2, ..]),
                Some(y.slice(ndarray::s![1..2, ..])),
                false,
            )
            .unwrap();
        assert_eq!((a.empty_rows(), b.empty_rows()), (2, 2), "{name}");
        a.merge(&b).unwrap();
        assert_eq!(a.empty_rows(), 2, "{name}: empty rows after the merge");
        assert_eq!(a.max_log_weight[0], f32::NEG_INFINITY, "{name}");
        assert_eq!(a.sum[0], 0.0, "{name}");
        let means = a.means();
        assert_eq!(means.empty_rows, 2, "{name}");
        assert!(
            means.values[[0, 0]].is_nan() && means.values[[2, 0]].is_nan(),
            "{name}"
        );
        assert_eq!(means.values[[1, 0]], 1.5, "{name}");
    }
}

/// docs/numerics.md, "Near the support's edge": with every key in the
/// outermost 0.1–0.2 % of the support (`1 − t ∈ [10⁻³, 2·10⁻³]`), local
/// means stay within the documented `f32` bound (`≈ 3·10⁻⁴` per weight at
/// d = 3) of the `f64` reference on every engine.
#[test]
fn local_means_with_all_mass_at_the_support_edge_stay_within_the_documented_bound() {
    let mut rng = Rng::new(91);
    let n = 200;
    let mut x = Array2::<f32>::zeros((n, 3));
    for j in 0..n {
        let dir: Vec<f64> = (0..3).map(|_| f64::from(rng.uniform()) - 0.5).collect();
        let norm = dir.iter().map(|v| v * v).sum::<f64>().sqrt();
        let r = (1.0 - 1e-3 * (1.0 + f64::from(rng.uniform()))).sqrt();
        for k in 0..3 {
            x[[j, k]] = (dir[k] / norm * r) as f32;
        }
    }
    let y = rng.matrix(n, 1, 1.0, 2.0);
    let q = Array2::<f32>::zeros((1, 3));
    for p in [
        Profile::Epanechnikov,
        Profile::Biweight,
        Profile::Triangular,
        Profile::Cosine,
    ] {
        let k = Kernel::new(p, 1.0).unwrap();
        let (_, want) = ref_row(&k, &[0.0, 0.0, 0.0], &x, &y, &vec![1.0; n]);
        for (name, e) in engines() {
            let got = e.local_mean(&k, q.view(), x.view(), y.view()).unwrap();
            let g = f64::from(got.values[[0, 0]]);
            let err = ((g - want[0]) / want[0]).abs();
            assert!(
                err < 1e-3,
                "{name} {p}: {g} vs {} (relative error {err:e})",
                want[0]
            );
        }
    }
}

/// Key sets keep their keys on the device (GPU): far rows are finished
/// from a read-back copy, as one-shot calls finish them from the host's.
#[test]
fn key_sets_finish_far_rows_too() {
    for (h, x, y, q) in far_cases() {
        for p in [Profile::Gaussian, Profile::Laplacian, Profile::Cauchy] {
            let k = Kernel::new(p, h).unwrap();
            let ones = vec![1.0; x.nrows()];
            for (name, e) in engines() {
                let what = format!("{name} key set {p} h={h}");
                let ks = e.prepare(x.view()).values(y.view()).build().unwrap();
                let lm = ks.local_mean(&k, q.view()).unwrap();
                assert_eq!(lm.empty_rows, 0, "{what}");
                let st = ks.row_states(&k, q.view()).unwrap();
                assert_eq!(st.empty_rows(), 0, "{what}: states");
                for (i, qi) in q.rows().into_iter().enumerate() {
                    let (wl, wm) = ref_row(&k, qi.as_slice().unwrap(), &x, &y, &ones);
                    let g = f64::from(lm.values[[i, 0]]);
                    assert!(
                        close(g, wm[0], 1e-5, 1e-6),
                        "{what}: [{i}] {g} vs {}",
                        wm[0]
                    );
                    let ls = st.log_sum()[i];
                    if wl >= f64::from(f32::MIN) {
                        assert!(
                            close(ls, wl, 1e-6, 0.0),
                            "{what}: log-sum [{i}] {ls} vs {wl}"
                        );
                    } else {
                        assert_eq!(ls, f64::NEG_INFINITY, "{what}: log-sum [{i}]");
                    }
                }
            }
        }
    }
}
