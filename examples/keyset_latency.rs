//! Latency of one small `KeySet::local_mean` call (16 queries by default),
//! the Rust side of `benches/compare_python.py`: the same keys, queries and
//! kernel there give the cost the Python layer adds to a call.
//!
//! ```sh
//! cargo run --release --example keyset_latency -- [--backend cpu|gpu|auto] \
//!     [--n 100000] [--d 8] [--m 16] [--bandwidth 0.5] [--calls 2000]
//! ```
//!
//! Keys and queries are uniform in [0, 1)ᵈ from a fixed generator, the
//! kernel is gaussian, batching is off (one caller). Prints the median and
//! mean microseconds per call as `keyset_local_mean_us median=… mean=…`.

use std::time::Instant;

use locus::{Batching, Device, Engine, Kernel, KeySetOptions};
use ndarray::Array2;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut backend = "cpu".to_string();
    let (mut n, mut d, mut m, mut calls) = (100_000usize, 8usize, 16usize, 2000usize);
    let mut h = 0.5f32;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().ok_or(format!("{a} needs a value"))?;
        match a.as_str() {
            "--backend" => backend = v,
            "--n" => n = v.parse()?,
            "--d" => d = v.parse()?,
            "--m" => m = v.parse()?,
            "--bandwidth" => h = v.parse()?,
            "--calls" => calls = v.parse()?,
            _ => return Err(format!("unknown argument {a}").into()),
        }
    }
    let device = match backend.as_str() {
        "cpu" => Device::Cpu,
        "gpu" => Device::Gpu,
        _ => Device::Auto,
    };
    let engine = Engine::from_env(device)?;
    let mut s = 7u64;
    let mut uniform = move || {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (s >> 40) as f32 / (1u64 << 24) as f32
    };
    let keys = Array2::from_shape_fn((n, d), |_| uniform());
    let values = Array2::from_shape_fn((n, 1), |_| uniform());
    let queries = Array2::from_shape_fn((m, d), |_| uniform());
    let options = KeySetOptions {
        batching: Batching::off(),
        ..KeySetOptions::default()
    };
    let set = engine
        .prepare(keys.view())
        .values(values.view())
        .options(options)
        .build()?;
    let k = Kernel::gaussian(h)?;
    for _ in 0..calls.div_ceil(10) {
        set.local_mean(&k, queries.view())?;
    }
    let mut times = Vec::with_capacity(calls);
    for _ in 0..calls {
        let t = Instant::now();
        set.local_mean(&k, queries.view())?;
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let mean = times.iter().sum::<f64>() / times.len() as f64;
    times.sort_by(f64::total_cmp);
    println!(
        "keyset_local_mean_us median={:.2} mean={:.2} backend={} n={n} d={d} m={m}",
        times[times.len() / 2],
        mean,
        engine.backend()
    );
    Ok(())
}
