//! Cancellation: every op family stops with `Error::Cancelled` under a
//! cancelled token, on both backends; a long call stops soon after its
//! token is cancelled from another thread (or its deadline passes); the
//! engine and its key sets answer the same call afterwards.

mod common;

use std::time::{Duration, Instant};

use common::{Rng, engines_and_tiny_tiles};
use locus::{CancelToken, Engine, Error, Kernel, MeanShiftParams, Profile, SoftmaxParams};
use ndarray::{Array2, Array3};

fn cancelled<T: std::fmt::Debug>(what: &str, r: locus::Result<T>) {
    match r {
        Err(Error::Cancelled { .. }) => {}
        other => panic!("{what}: expected Error::Cancelled, got {other:?}"),
    }
}

/// Each op family once under a cancelled token, then without it.
fn every_op(name: &str, e: &Engine) {
    let mut rng = Rng::new(7);
    let x = rng.matrix(300, 3, -1.0, 1.0);
    let q = rng.matrix(40, 3, -1.0, 1.0);
    let y = rng.matrix(300, 2, -1.0, 1.0);
    let wide_x = rng.matrix(200, 40, -1.0, 1.0);
    let kernel = Kernel::new(Profile::Gaussian, 0.5).unwrap();
    let mut missing = x.clone();
    missing[[3, 1]] = f32::NAN;
    let phi = Array3::from_shape_fn((2, 16, 8), |(b, i, j)| ((b + i * 3 + j) % 7) as f32 * 0.1);
    let v = Array3::from_shape_fn((2, 16, 4), |(b, i, j)| ((b + i + j) % 5) as f32);
    let ms = MeanShiftParams::new().bandwidth(0.5).check().unwrap();
    let set = e.prepare(x.view()).values(y.view()).build().unwrap();

    let token = CancelToken::new();
    token.cancel();
    type Op<'a> = Box<dyn Fn() -> locus::Result<()> + 'a>;
    let ops: Vec<(&str, Op<'_>)> = vec![
        (
            "local_mean",
            Box::new(|| {
                e.local_mean(&kernel, q.view(), x.view(), y.view())
                    .map(drop)
            }),
        ),
        (
            "self_local_mean",
            Box::new(|| e.self_local_mean(&kernel, x.view()).map(drop)),
        ),
        (
            "row_states",
            Box::new(|| {
                e.row_states(&kernel, q.view(), x.view(), None, false)
                    .map(drop)
            }),
        ),
        (
            "local_polynomial",
            Box::new(|| {
                e.local_polynomial(&kernel, q.view(), x.view(), y.view(), 1)
                    .map(drop)
            }),
        ),
        (
            "local_pca",
            Box::new(|| e.local_pca(&kernel, q.view(), x.view(), 2).map(drop)),
        ),
        ("knn", Box::new(|| e.knn(q.view(), x.view(), 5).map(drop))),
        (
            "knn d=40",
            Box::new(|| e.knn(wide_x.view(), wide_x.view(), 5).map(drop)),
        ),
        (
            "kernel_matrix",
            Box::new(|| e.kernel_matrix(&kernel, q.view(), x.view()).map(drop)),
        ),
        (
            "impute",
            Box::new(|| e.impute(&kernel, missing.view(), 2).map(drop)),
        ),
        (
            "kernel_softmax",
            Box::new(|| {
                let p = SoftmaxParams::new();
                e.kernel_softmax(phi.view(), phi.view(), v.view(), &p)
                    .map(drop)
            }),
        ),
        (
            "softmax_matrix",
            Box::new(|| {
                e.softmax_matrix(phi.view(), phi.view(), &SoftmaxParams::new())
                    .map(drop)
            }),
        ),
        (
            "feature_local_mean",
            Box::new(|| {
                let pos = phi.mapv(f32::abs);
                e.feature_local_mean(pos.view(), pos.view(), v.view(), false)
                    .map(drop)
            }),
        ),
        (
            "mean_shift",
            Box::new(|| e.mean_shift(&ms, x.view()).map(drop)),
        ),
        (
            "key set local_mean",
            Box::new(|| set.local_mean(&kernel, q.view()).map(drop)),
        ),
        ("key set knn", Box::new(|| set.knn(q.view(), 3).map(drop))),
    ];
    for (op, f) in &ops {
        cancelled(&format!("{name} {op}"), token.run(f));
        // Nothing was changed: the same call runs without the token.
        f().unwrap_or_else(|err| panic!("{name} {op} after a cancelled call: {err}"));
    }
}

#[test]
fn every_op_family_stops_under_a_cancelled_token_and_the_engine_still_works() {
    for (name, e) in engines_and_tiny_tiles(13, 37) {
        every_op(name, &e);
    }
}

#[test]
fn a_long_cpu_call_stops_soon_after_its_token_is_cancelled() {
    let e = Engine::cpu();
    let mut rng = Rng::new(3);
    // About 10¹⁰ pairs: tens of seconds on two cores if it ran to the end.
    let x = rng.matrix(100_000, 3, -1.0, 1.0);
    let kernel = Kernel::new(Profile::Gaussian, 0.5).unwrap();
    let token = CancelToken::new();
    let canceller = {
        let t = token.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            t.cancel();
            Instant::now()
        })
    };
    let out = token.run(|| e.self_local_mean(&kernel, x.view()));
    let stopped = Instant::now();
    let at = canceller.join().unwrap();
    cancelled("self_local_mean", out);
    let late = stopped.saturating_duration_since(at);
    println!("self_local_mean 100000 x 3 stopped {late:?} after the cancel");
    assert!(
        late < Duration::from_secs(2),
        "stopped {late:?} after the cancel"
    );
}

#[test]
fn a_deadline_stops_a_long_mean_shift_and_the_next_call_runs() {
    let e = Engine::cpu();
    let mut rng = Rng::new(5);
    let x: Array2<f32> = rng.matrix(60_000, 3, -1.0, 1.0);
    let params = MeanShiftParams::new()
        .bandwidth(0.4)
        .profile(Profile::Gaussian)
        .check()
        .unwrap();
    let t0 = Instant::now();
    let token = CancelToken::with_timeout(Duration::from_millis(200));
    match token.run(|| e.mean_shift(&params, x.view())) {
        Err(Error::Cancelled { reason, .. }) => assert_eq!(reason, "deadline passed"),
        other => panic!("expected a passed deadline, got {other:?}"),
    }
    println!(
        "mean_shift with a 200 ms deadline returned after {:?}",
        t0.elapsed()
    );
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "took {:?}",
        t0.elapsed()
    );
    let small = rng.matrix(200, 3, -1.0, 1.0);
    e.mean_shift(&params, small.view()).unwrap();
}

#[test]
fn a_batched_request_is_not_failed_by_another_callers_cancel() {
    // Many small concurrent requests coalesce into batches; every other
    // request is cancelled. Those not cancelled all get their answer,
    // equal to the request run alone.
    let e = Engine::cpu();
    let mut rng = Rng::new(11);
    let x = rng.matrix(2000, 3, -1.0, 1.0);
    let y = rng.matrix(2000, 1, -1.0, 1.0);
    let kernel = Kernel::new(Profile::Gaussian, 0.3).unwrap();
    let set = e.prepare(x.view()).values(y.view()).build().unwrap();
    let queries: Vec<Array2<f32>> = (0..32).map(|_| rng.matrix(4, 3, -1.0, 1.0)).collect();
    std::thread::scope(|s| {
        for (i, q) in queries.iter().enumerate() {
            let (set, kernel) = (&set, &kernel);
            s.spawn(move || {
                let token = CancelToken::new();
                if i % 2 == 1 {
                    token.cancel();
                }
                let got = token.run(|| set.local_mean(kernel, q.view()));
                if i % 2 == 1 {
                    cancelled("cancelled member", got);
                } else {
                    let want = set.local_mean(kernel, q.view()).unwrap();
                    assert_eq!(got.unwrap().values, want.values);
                }
            });
        }
    });
}
