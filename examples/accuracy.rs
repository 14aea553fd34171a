//! Accuracy of the local mean against an f64 reference at large N, on
//! every backend available: `cargo run --release --example accuracy [N]`.
//!
//! Prints, per profile, the largest relative and absolute deviation over
//! 64 queries against N keys (default 10⁶) in d = 3 with q = 3 values.

use locus::{Device, Engine, EngineOptions, Kernel, Profile};
use ndarray::Array2;

fn data(n: usize, d: usize, seed: u64) -> Array2<f32> {
    let mut s = seed;
    Array2::from_shape_fn((n, d), |_| {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (s >> 40) as f32 / (1u64 << 24) as f32
    })
}

/// f64 log-domain local mean of one query.
fn reference(k: &Kernel, q: &[f32], x: &Array2<f32>, y: &Array2<f32>) -> Vec<f64> {
    let h2 = f64::from(k.bandwidth()).powi(2);
    let p = k.profile();
    let lw: Vec<f64> = x
        .rows()
        .into_iter()
        .map(|r| {
            let t: f64 = r
                .iter()
                .zip(q)
                .map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2))
                .sum::<f64>()
                / h2;
            p.log_eval_sq(t).unwrap_or_else(|| p.eval_sq(t).ln())
        })
        .collect();
    let m = lw.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let mut s = 0.0;
    let mut u = vec![0.0; y.ncols()];
    for (j, l) in lw.iter().enumerate() {
        let w = (l - m).exp();
        s += w;
        for (c, uc) in u.iter_mut().enumerate() {
            *uc += w * f64::from(y[[j, c]]);
        }
    }
    u.into_iter().map(|v| v / s).collect()
}

fn main() -> locus::Result<()> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let x = data(n, 3, 1);
    let y = data(n, 3, 2).mapv(|v| 2.0 * v - 1.0);
    let q = data(64, 3, 3);
    let mut engines = vec![Engine::cpu()];
    if let Ok(g) = Engine::with_options(EngineOptions::new(Device::Gpu)) {
        engines.push(g);
    }
    println!("N = {n}, M = 64, d = q = 3, h = 0.1 (values in [−1, 1])");
    for p in Profile::ALL {
        let k = Kernel::new(p, 0.1)?;
        let want: Vec<Vec<f64>> = q
            .rows()
            .into_iter()
            .map(|r| reference(&k, r.as_slice().expect("contiguous"), &x, &y))
            .collect();
        for e in &engines {
            let got = e.local_mean(&k, q.view(), x.view(), y.view())?;
            let (mut rel, mut abs) = (0.0f64, 0.0f64);
            for (i, w) in want.iter().enumerate() {
                for (c, &wv) in w.iter().enumerate() {
                    let err = (f64::from(got.values[[i, c]]) - wv).abs();
                    abs = abs.max(err);
                    rel = rel.max(err / wv.abs().max(1e-3));
                }
            }
            println!(
                "{:>12} {:<40} max rel {rel:.2e}  max abs {abs:.2e}",
                p.name(),
                e.backend().to_string()
            );
        }
    }
    Ok(())
}
