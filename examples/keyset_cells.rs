//! `KeySet::local_mean` with and without the key set's cell index, on
//! the CPU or the GPU (`--backend gpu`: sorted key tiles, each workgroup
//! over its spans): the same keys, queries and kernel, once on a key set
//! that indexes its keys (by grid cell, or by a k-d split beyond 8
//! coordinates) and once on one whose engine has no memory for the index
//! (so it answers over every key).
//!
//! ```sh
//! cargo run --release --example keyset_cells -- [--n 1000000] [--m 10000] \
//!     [--bandwidth 1] [--d 2] [--repeats 3] [--backend cpu|gpu] [--kernel uniform]
//! ```
//!
//! Keys: `n` points in `d` coordinates in 10 blobs (centres on a circle of
//! radius 20 in the first two coordinates, 0 in the others; normal offsets
//! of standard deviation 1 in every coordinate), values the keys themselves;
//! queries: every `n/m`-th key moved by a small offset; kernel: uniform
//! (or `--kernel`: any compact profile, or gaussian, which the index
//! truncates where far keys weigh under 10⁻⁹ of a row).
//! Prints the index's first call (which builds it), the best of
//! `repeats` calls with it and without it, and the largest difference
//! between the two results.

use std::f32::consts::TAU;
use std::time::Instant;

use locus::{Device, Engine, EngineOptions, Kernel, KeySet, Profile};
use ndarray::Array2;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (mut n, mut m, mut repeats, mut h) = (1_000_000usize, 10_000usize, 3usize, 1.0f32);
    let mut d = 2usize;
    let mut device = Device::Cpu;
    let mut profile = Profile::Uniform;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().ok_or(format!("{a} needs a value"))?;
        match a.as_str() {
            "--n" => n = v.parse()?,
            "--m" => m = v.parse()?,
            "--bandwidth" => h = v.parse()?,
            "--repeats" => repeats = v.parse()?,
            "--d" => d = v.parse()?,
            "--kernel" => profile = v.parse()?,
            "--backend" => {
                device = match v.as_str() {
                    "cpu" => Device::Cpu,
                    "gpu" => Device::Gpu,
                    _ => return Err(format!("--backend {v}: cpu or gpu").into()),
                }
            }
            _ => return Err(format!("unknown argument {a}").into()),
        }
    }
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut uniform = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 40) as f32 / (1u64 << 24) as f32
    };
    if d < 2 {
        return Err("--d must be at least 2".into());
    }
    let mut normal = move || {
        let (u1, u2) = (uniform().max(1e-7), uniform());
        let (r, b) = ((-2.0 * u1.ln()).sqrt(), TAU * u2);
        (r * b.cos(), r * b.sin())
    };
    let mut keys = Array2::<f32>::zeros((n, d));
    for (i, mut p) in keys.rows_mut().into_iter().enumerate() {
        let a = (i % 10) as f32 * TAU / 10.0;
        let (x, y) = normal();
        p[0] = 20.0 * a.cos() + x;
        p[1] = 20.0 * a.sin() + y;
        for k in (2..d).step_by(2) {
            let (x, y) = normal();
            p[k] = x;
            if k + 1 < d {
                p[k + 1] = y;
            }
        }
    }
    let step = (n / m).max(1);
    let queries = Array2::from_shape_fn((m, d), |(i, k)| keys[[(i * step) % n, k]] + 0.1);
    let kernel = Kernel::new(profile, h)?;

    let indexed = Engine::with_options(EngineOptions::new(device))?;
    let prepare = |e: &Engine| -> Result<KeySet, locus::Error> {
        e.prepare(keys.view()).values(keys.view()).build()
    };
    // Room for the key set and a request (generously: 64 bytes a query
    // coordinate), not for the index's sorted copy of the keys beside it.
    let kept = prepare(&indexed)?.resident_bytes();
    let mut o = EngineOptions::new(device);
    o.memory_limit = Some(kept + 64 * (d as u64 + 2) * m as u64 + 8192);
    let brute = Engine::with_options(o)?;
    let (with, without) = (prepare(&indexed)?, prepare(&brute)?);

    let t = Instant::now();
    let first = with.local_mean(&kernel, queries.view())?;
    println!(
        "indexed first call (builds the index): {:.3} s, resident {} -> {} bytes",
        t.elapsed().as_secs_f64(),
        without.resident_bytes(),
        with.resident_bytes()
    );
    let best = |set: &KeySet| -> Result<(f64, Array2<f32>), locus::Error> {
        let mut best = f64::INFINITY;
        let mut out = None;
        for _ in 0..repeats {
            let t = Instant::now();
            let r = set.local_mean(&kernel, queries.view())?;
            best = best.min(t.elapsed().as_secs_f64());
            out = Some(r.values);
        }
        Ok((best, out.unwrap_or_default()))
    };
    let (t_index, a) = best(&with)?;
    let (t_brute, b) = best(&without)?;
    let diff = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    println!(
        "{device:?} {profile:?} n={n} d={d} m={m} h={h}: indexed best {t_index:.4} s, brute force best {t_brute:.4} s, \
         ratio {:.1}x; max |difference| {diff:e}; index kept: {}",
        t_brute / t_index,
        with.resident_bytes() > without.resident_bytes()
    );
    assert_eq!(first.values.dim(), a.dim());
    Ok(())
}
