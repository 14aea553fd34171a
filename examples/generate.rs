//! Local-mean diffusion on two moons: generates points like the data and
//! prints the energy distance to held-out points after every step (the
//! start first), on the best backend (or the one named: `cpu`, `gpu`).
//!
//! ```sh
//! cargo run --release --example generate [-- cpu|gpu]
//! ```

use std::f64::consts::{PI, TAU};
use std::time::Instant;

use locus::{DiffusionParams, Engine};
use ndarray::{Array2, ArrayView2};

/// Two interleaved half circles with Gaussian jitter, `n` points from
/// `seed` (a small xorshift generator with Box–Muller normals).
fn moons(n: usize, noise: f64, seed: u64) -> Array2<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut uniform = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        ((s >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    let mut x = Array2::zeros((n, 2));
    for i in 0..n {
        let a = PI * uniform();
        let (cx, cy) = if i % 2 == 0 {
            (a.cos(), a.sin())
        } else {
            (1.0 - a.cos(), 0.5 - a.sin())
        };
        let r = (-2.0 * uniform().ln()).sqrt();
        let t = TAU * uniform();
        x[[i, 0]] = (cx + noise * r * t.cos()) as f32;
        x[[i, 1]] = (cy + noise * r * t.sin()) as f32;
    }
    x
}

/// `2E‖a − b‖ − E‖a − a'‖ − E‖b − b'‖`.
fn energy_distance(a: ArrayView2<'_, f32>, b: ArrayView2<'_, f32>) -> f64 {
    let mean = |x: ArrayView2<'_, f32>, y: ArrayView2<'_, f32>| {
        let mut s = 0.0;
        for p in x.rows() {
            for q in y.rows() {
                let (dx, dy) = (f64::from(p[0] - q[0]), f64::from(p[1] - q[1]));
                s += (dx * dx + dy * dy).sqrt();
            }
        }
        s / (x.nrows() * y.nrows()) as f64
    };
    2.0 * mean(a, b) - mean(a, a) - mean(b, b)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let engine = match std::env::args().nth(1).as_deref() {
        Some("cpu") => Engine::cpu(),
        Some("gpu") => Engine::gpu()?,
        _ => Engine::new(),
    };
    let data = moons(3000, 0.05, 1);
    let held_out = moons(500, 0.05, 2);
    let params = DiffusionParams::new()
        .samples(500)
        .seed(7)
        .trajectory(true)
        .check()?;
    let t = Instant::now();
    let out = engine.generate(&params, data.view())?;
    println!(
        "{} points in {} steps on {} in {:.3} s",
        out.samples.nrows(),
        out.sigmas.len(),
        engine.backend().kind(),
        t.elapsed().as_secs_f64()
    );
    println!("step  sigma     energy distance to held-out data");
    let levels = out.sigmas.iter().rev().map(|s| format!("{s:.4}"));
    for (i, (s, level)) in out
        .trajectory
        .iter()
        .zip(std::iter::once("start".to_string()).chain(levels))
        .enumerate()
    {
        println!(
            "{i:>4}  {level:>7}  {:.4}",
            energy_distance(s.view(), held_out.view())
        );
    }
    let fresh = moons(500, 0.05, 3);
    println!(
        "data itself: {:.4}",
        energy_distance(fresh.view(), held_out.view())
    );
    Ok(())
}
