//! Local-mean diffusion (paper §9.3): the recursion against a plain `f64`
//! reference fed the op's own draws, on the CPU and the GPU; determinism;
//! the energy distance to held-out data along the schedule; parameters,
//! cancellation, memory.

mod common;

use std::num::NonZeroUsize;

use common::*;
use locus::{
    CancelToken, Device, DiffusionParams, Engine, EngineOptions, Error, LevelBandwidths,
    NoiseSchedule, Profile, Spacing,
};
use ndarray::{Array2, ArrayView2};

/// Two interleaved half circles ("two moons") with Gaussian jitter `noise`,
/// `n` points from `seed`.
fn moons(n: usize, noise: f64, seed: u64) -> Array2<f32> {
    let mut rng = Rng::new(seed);
    let mut normal = || {
        let (u1, u2) = (f64::from(rng.uniform()).max(1e-9), f64::from(rng.uniform()));
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    };
    let mut x = Array2::zeros((n, 2));
    for i in 0..n {
        let a = std::f64::consts::PI * (i as f64 + 0.5) / n as f64;
        let (cx, cy) = if i % 2 == 0 {
            (a.cos(), a.sin())
        } else {
            (1.0 - a.cos(), 0.5 - a.sin())
        };
        x[[i, 0]] = (cx + noise * normal()) as f32;
        x[[i, 1]] = (cy + noise * normal()) as f32;
    }
    x
}

fn engines() -> Vec<(&'static str, &'static Engine)> {
    let mut v = vec![("cpu", cpu())];
    if let Some(g) = gpu() {
        v.push(("gpu", g));
    }
    v
}

fn to64(a: ArrayView2<'_, f32>) -> Array2<f64> {
    a.mapv(f64::from)
}

/// The gaussian local mean `Σ_i K(q, x_i) x_i / Σ_i K(q, x_i)`, written
/// plainly in `f64` (weights relative to each row's largest).
fn ref_gaussian_mean(q: &Array2<f64>, keys: &Array2<f64>, h: f64) -> Array2<f64> {
    let mut out = Array2::zeros(q.dim());
    for (i, qi) in q.rows().into_iter().enumerate() {
        let lw: Vec<f64> = keys
            .rows()
            .into_iter()
            .map(|k| -(&qi - &k).mapv(|v| v * v).sum() / (2.0 * h * h))
            .collect();
        let mx = lw.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let mut s = 0.0;
        for (j, l) in lw.iter().enumerate() {
            let w = (l - mx).exp();
            s += w;
            for c in 0..q.ncols() {
                out[[i, c]] += w * keys[[j, c]];
            }
        }
        out.row_mut(i).mapv_inplace(|v| v / s);
    }
    out
}

/// The energy distance `2E‖a − b‖ − E‖a − a'‖ − E‖b − b'‖` of two samples
/// (V-statistics), in `f64`.
fn energy_distance(a: ArrayView2<'_, f32>, b: ArrayView2<'_, f32>) -> f64 {
    let mean_dist = |x: ArrayView2<'_, f32>, y: ArrayView2<'_, f32>| {
        let mut s = 0.0;
        for r in x.rows() {
            for t in y.rows() {
                s += r
                    .iter()
                    .zip(t.iter())
                    .map(|(&u, &v)| (f64::from(u) - f64::from(v)).powi(2))
                    .sum::<f64>()
                    .sqrt();
            }
        }
        s / (x.nrows() * y.nrows()) as f64
    };
    2.0 * mean_dist(a, b) - mean_dist(a, a) - mean_dist(b, b)
}

#[test]
fn every_step_is_the_f64_local_mean_of_the_previous_samples_over_the_noised_data() {
    let x = moons(300, 0.05, 1);
    let params = DiffusionParams::new()
        .schedule(NoiseSchedule::Spaced {
            spacing: Spacing::Geometric,
            steps: 6,
            min: Some(0.02),
            max: Some(0.6),
        })
        .samples(77)
        .seed(5)
        .trajectory(true)
        .check()
        .unwrap();
    let plan = params.resolve(x.view()).unwrap();
    for (name, e) in engines() {
        let out = e.generate(&params, x.view()).unwrap();
        assert_eq!(out.trajectory.len(), 7, "{name}");
        assert_eq!(out.sigmas, plan.sigmas(), "{name}");
        assert_eq!(out.empty_rows, 0, "{name}");
        let start = plan.start(x.view()).unwrap();
        assert_close(
            &format!("{name} start"),
            &out.trajectory[0],
            &to64(start.view()),
            1e-6,
            1e-6,
        );
        assert_eq!(out.trajectory[6], out.samples, "{name}");
        for t in (1..=6).rev() {
            let before = to64(out.trajectory[6 - t].view());
            let keys = to64(plan.noised(x.view(), t - 1).unwrap().view());
            let want = ref_gaussian_mean(&before, &keys, plan.bandwidths()[t - 1]);
            assert_close(
                &format!("{name} step {t}"),
                &out.trajectory[7 - t],
                &want,
                1e-4,
                1e-5,
            );
        }
    }
}

#[test]
fn the_whole_recursion_matches_an_f64_run_from_the_same_draws() {
    let x = moons(400, 0.05, 2);
    let params = DiffusionParams::new()
        .samples(64)
        .seed(11)
        .bandwidths(LevelBandwidths::Noise { factor: 0.7 })
        .check()
        .unwrap();
    let plan = params.resolve(x.view()).unwrap();
    let mut want = to64(plan.start(x.view()).unwrap().view());
    for t in (1..=plan.steps()).rev() {
        let keys = to64(plan.noised(x.view(), t - 1).unwrap().view());
        want = ref_gaussian_mean(&want, &keys, plan.bandwidths()[t - 1]);
    }
    for (name, e) in engines() {
        let out = e.generate(&params, x.view()).unwrap();
        // 20 f32 steps, the last with h ≈ 0.008: errors of 1e-6 move the
        // weights of near ties; the bound is 1e-4 of the data's scale.
        assert_close(name, &out.samples, &want, 1e-4, 1e-4);
    }
}

#[test]
fn noised_data_have_the_schedules_spread_and_level_zero_is_the_data() {
    let x = moons(2000, 0.05, 3);
    let params = DiffusionParams::new()
        .schedule(NoiseSchedule::Given(vec![0.1, 0.2, 0.2]))
        .check()
        .unwrap();
    let plan = params.resolve(x.view()).unwrap();
    assert_eq!(plan.noised(x.view(), 0).unwrap(), x);
    assert!((plan.noise_level(3).unwrap() - 0.09f64.sqrt()).abs() < 1e-12);
    assert_eq!(plan.noise_level(4), None);
    assert_eq!(plan.kernel(0), None);
    assert_eq!(plan.kernel(3).unwrap().bandwidth(), 0.2);
    for t in 1..=3 {
        let z = (plan.noised(x.view(), t).unwrap() - &x).mapv(f64::from);
        let var = z.mapv(|v| v * v).mean().unwrap();
        let s2 = plan.noise_level(t).unwrap().powi(2);
        // 4000 draws: the variance's relative standard error is √(2/4000) ≈ 2.2 %.
        assert!(
            (var / s2 - 1.0).abs() < 0.1,
            "level {t}: variance {var} vs {s2}"
        );
    }
    // Different levels draw different noise.
    assert_ne!(
        plan.noised(x.view(), 2).unwrap(),
        plan.noised(x.view(), 3).unwrap()
    );
    assert!(matches!(
        plan.noised(x.view(), 4),
        Err(Error::InvalidParameter { name: "level", .. })
    ));
}

#[test]
fn a_seed_gives_the_same_samples_on_any_thread_count_and_another_seed_others() {
    let x = moons(500, 0.05, 4);
    let p = |seed| {
        DiffusionParams::new()
            .samples(100)
            .seed(seed)
            .check()
            .unwrap()
    };
    let one = Engine::with_options(EngineOptions {
        threads: NonZeroUsize::new(1),
        ..EngineOptions::new(Device::Cpu)
    })
    .unwrap();
    let a = cpu().generate(&p(9), x.view()).unwrap();
    assert_eq!(one.generate(&p(9), x.view()).unwrap(), a);
    assert_eq!(cpu().generate(&p(9), x.view()).unwrap(), a);
    assert_ne!(cpu().generate(&p(10), x.view()).unwrap().samples, a.samples);
    if let Some(g) = gpu() {
        let b = g.generate(&p(9), x.view()).unwrap();
        // Both runs follow the f64 reference step by step (above); end to
        // end, the last level (h ≈ 0.005) turns f32 differences at near
        // ties between data points into ~1e-4 moves.
        let want = to64(a.samples.view());
        assert_close("gpu vs cpu", &b.samples, &want, 1e-3, 1e-3);
    }
}

/// Energy distance to held-out data, after every step (`ed[0]`: the start).
fn energy_trajectory(factor: f64) -> Vec<f64> {
    let x = moons(1500, 0.05, 5);
    let held_out = moons(600, 0.05, 6);
    let params = DiffusionParams::new()
        .samples(400)
        .seed(3)
        .bandwidths(LevelBandwidths::Noise { factor })
        .trajectory(true)
        .check()
        .unwrap();
    let out = cpu().generate(&params, x.view()).unwrap();
    let fresh = moons(400, 0.05, 10);
    let baseline = energy_distance(fresh.view(), held_out.view());
    eprintln!("energy distance of 400 fresh data points to the held-out ones: {baseline:.4}");
    out.trajectory
        .iter()
        .map(|s| energy_distance(s.view(), held_out.view()))
        .collect()
}

#[test]
fn generated_points_come_closer_to_held_out_data_along_the_schedule() {
    // h_t = σ_t (the transition density): the posterior means first pull
    // the samples towards the middle (the distance dips, then rises while
    // the spread is short), and the later levels spread them back onto
    // the moons. Over the last two thirds the distance falls at every
    // step; over the whole run it falls far below the start's.
    let ed = energy_trajectory(1.0);
    eprintln!("energy distance, h = σ: {ed:.4?}");
    let (start, end) = (ed[0], ed[ed.len() - 1]);
    assert!(end < 0.25 * start, "start {start}, end {end}");
    let third = ed.len() / 3;
    for w in ed[third..].windows(2) {
        assert!(w[1] <= w[0] * 1.02 + 1e-4, "not decreasing: {ed:?}");
    }
    // h_t = σ_t/2: the distance falls at every step (to within 2 %).
    let ed = energy_trajectory(0.5);
    eprintln!("energy distance, h = σ/2: {ed:.4?}");
    for w in ed.windows(2) {
        assert!(w[1] <= w[0] * 1.02 + 1e-4, "not decreasing: {ed:?}");
    }
    assert!(ed[ed.len() - 1] < 0.25 * ed[0], "{ed:?}");
}

#[test]
fn compact_kernels_leave_a_sample_with_no_neighbour_in_place() {
    let x = moons(200, 0.05, 7);
    let params = DiffusionParams::new()
        .profile(Profile::Uniform)
        .schedule(NoiseSchedule::Given(vec![0.01, 3.0]))
        .bandwidths(LevelBandwidths::Given(vec![1e-4, 1e-4]))
        .samples(40)
        .trajectory(true)
        .check()
        .unwrap();
    for (name, e) in engines() {
        let out = e.generate(&params, x.view()).unwrap();
        assert_eq!(out.empty_rows, 80, "{name}");
        assert_eq!(out.samples, out.trajectory[0], "{name}");
        assert!(out.samples.iter().all(|v| v.is_finite()));
    }
}

#[test]
fn bad_parameters_are_typed_errors() {
    let invalid = |p: DiffusionParams, name: &str| match p.check() {
        Err(Error::InvalidParameter { name: n, .. }) => assert_eq!(n, name),
        other => panic!("{name}: expected InvalidParameter, got {other:?}"),
    };
    let spaced = |steps, min, max| NoiseSchedule::Spaced {
        spacing: Spacing::Linear,
        steps,
        min,
        max,
    };
    invalid(
        DiffusionParams::new().schedule(spaced(0, None, None)),
        "steps",
    );
    invalid(
        DiffusionParams::new().schedule(spaced(locus::MAX_STEPS + 1, None, None)),
        "steps",
    );
    invalid(
        DiffusionParams::new().schedule(spaced(3, Some(0.0), None)),
        "sigmas",
    );
    invalid(
        DiffusionParams::new().schedule(spaced(3, None, Some(f64::NAN))),
        "sigmas",
    );
    invalid(
        DiffusionParams::new().schedule(spaced(3, Some(2.0), Some(1.0))),
        "sigmas",
    );
    invalid(
        DiffusionParams::new().schedule(NoiseSchedule::Given(vec![])),
        "steps",
    );
    invalid(
        DiffusionParams::new().schedule(NoiseSchedule::Given(vec![0.1, -1.0])),
        "sigmas",
    );
    invalid(
        DiffusionParams::new().bandwidths(LevelBandwidths::Noise {
            factor: f64::INFINITY,
        }),
        "bandwidths",
    );
    invalid(
        DiffusionParams::new().bandwidths(LevelBandwidths::Given(vec![1.0; 3])),
        "bandwidths",
    );
    invalid(DiffusionParams::new().samples(0), "samples");
    let bad_h = DiffusionParams::new()
        .schedule(NoiseSchedule::Given(vec![0.1]))
        .bandwidths(LevelBandwidths::Given(vec![0.0]))
        .check();
    assert!(
        matches!(bad_h, Err(Error::InvalidBandwidth { .. })),
        "{bad_h:?}"
    );
    // Data-dependent: no spread for the default bounds; a level's
    // bandwidth out of range; bad data.
    let flat = Array2::from_elem((10, 2), 1.5f32);
    let p = DiffusionParams::new().check().unwrap();
    assert!(matches!(
        cpu().generate(&p, flat.view()),
        Err(Error::InvalidParameter { name: "sigmas", .. })
    ));
    let given = DiffusionParams::new()
        .schedule(spaced(4, Some(0.1), Some(1.0)))
        .check()
        .unwrap();
    assert_eq!(
        cpu().generate(&given, flat.view()).unwrap().samples.nrows(),
        10
    );
    let tiny = DiffusionParams::new()
        .bandwidths(LevelBandwidths::Noise { factor: 1e-30 })
        .check()
        .unwrap();
    assert!(matches!(
        cpu().generate(&tiny, moons(10, 0.1, 1).view()),
        Err(Error::InvalidBandwidth { .. })
    ));
    let mut nan = moons(10, 0.1, 1);
    nan[[3, 1]] = f32::NAN;
    assert!(matches!(
        cpu().generate(&p, nan.view()),
        Err(Error::NonFinite { .. })
    ));
    let empty = Array2::<f32>::zeros((0, 2));
    assert!(matches!(
        cpu().generate(&p, empty.view()),
        Err(Error::EmptyInput { .. })
    ));
}

#[test]
fn params_are_send_and_sync() {
    fn both<T: Send + Sync>() {}
    both::<DiffusionParams>();
    both::<locus::DiffusionValidParams>();
    both::<locus::Diffusion>();
    both::<locus::Generated>();
}

#[test]
fn a_cancelled_token_stops_between_steps_and_the_engine_still_works() {
    let x = moons(300, 0.05, 8);
    let params = DiffusionParams::new().samples(50).check().unwrap();
    for (name, e) in engines() {
        let token = CancelToken::new();
        token.cancel();
        let r = token.run(|| e.generate(&params, x.view()));
        assert!(
            matches!(r, Err(Error::Cancelled { op: "generate", .. })),
            "{name}: {r:?}"
        );
        // Cancelled after the third step: the fourth never starts.
        let token = CancelToken::new();
        let mut seen = 0;
        let r = token.run(|| {
            e.generate_with_progress(&params, x.view(), |done, steps| {
                assert_eq!(steps, 20);
                seen = done;
                if done == 3 {
                    token.cancel();
                }
            })
        });
        assert!(matches!(r, Err(Error::Cancelled { .. })), "{name}: {r:?}");
        assert_eq!(seen, 3, "{name}");
        assert!(e.generate(&params, x.view()).is_ok(), "{name}");
    }
}

#[test]
fn a_memory_limit_is_a_typed_error_and_the_engine_keeps_working() {
    let x = moons(20_000, 0.05, 9);
    for device in [Device::Cpu, Device::Gpu] {
        let mut o = EngineOptions::new(device);
        o.memory_limit = Some(64 << 10);
        let Ok(e) = Engine::with_options(o) else {
            continue;
        };
        let params = DiffusionParams::new().samples(5000).check().unwrap();
        let err = e.generate(&params, x.view()).unwrap_err();
        assert!(
            matches!(err, Error::MemoryLimit { .. } | Error::TooLarge { .. }),
            "{device:?}: {err}"
        );
        let small = DiffusionParams::new().samples(10).check().unwrap();
        let few = moons(50, 0.05, 9);
        assert!(e.generate(&small, few.view()).is_ok(), "{device:?}");
    }
}
