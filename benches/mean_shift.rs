//! MeanShift clustering time on 2-D blobs (8 centres in [−10, 10]²,
//! standard deviation 0.6, bandwidth 1.0), per backend. Throughput is in
//! points clustered per second.
//!
//! Scenarios (`LOCUS_BENCH_SCENARIOS`, comma-separated; default
//! `all5k,bin100k,bin1m`): `all5k` every point a seed, flat kernel, 5000
//! points; `bin100k` / `bin1m` bin seeding, flat kernel, 10⁵ / 10⁶
//! points; `gauss20k` gaussian kernel, every point a seed, 2·10⁴ points
//! (slow on a software GPU). `LOCUS_BENCH_BACKENDS=cpu,gpu` picks the
//! backends (default both; a software adapter is marked `gpu-software`).
//!
//! For a side-by-side comparison with scikit-learn on the same points, see
//! `examples/mean_shift_compare.rs` and `benches/compare_sklearn.py`.

#[path = "support/blobs.rs"]
mod blobs;

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use locus::{Device, Engine, EngineOptions, MeanShiftParams, Profile, Seeds};

fn engines() -> Vec<(String, Engine)> {
    let which = std::env::var("LOCUS_BENCH_BACKENDS").unwrap_or_else(|_| "cpu,gpu".into());
    let mut v = Vec::new();
    if which.contains("cpu") {
        v.push(("cpu".to_string(), Engine::cpu()));
    }
    if which.contains("gpu") {
        match Engine::with_options(EngineOptions::new(Device::Gpu)) {
            Ok(e) => {
                let name = if e.backend().is_software() {
                    "gpu-software"
                } else {
                    "gpu"
                };
                eprintln!("GPU backend: {}", e.backend());
                v.push((name.to_string(), e));
            }
            Err(e) => eprintln!("no GPU benchmark: {e}"),
        }
    }
    v
}

fn bench(c: &mut Criterion) {
    let engines = engines();
    let chosen =
        std::env::var("LOCUS_BENCH_SCENARIOS").unwrap_or_else(|_| "all5k,bin100k,bin1m".into());
    let binned = Seeds::Binned { min_bin_freq: 1 };
    let scenarios = [
        ("all5k", 5000usize, Profile::Uniform, Seeds::All),
        ("bin100k", 100_000, Profile::Uniform, binned.clone()),
        ("bin1m", 1_000_000, Profile::Uniform, binned),
        ("gauss20k", 20_000, Profile::Gaussian, Seeds::All),
    ];
    let mut g = c.benchmark_group("mean_shift_blobs_2d_h1");
    g.sample_size(10);
    for (name, n, profile, seeds) in scenarios {
        if !chosen.split(',').any(|s| s.trim() == name) {
            continue;
        }
        let (x, _) = blobs::blobs(n, 2, 8, 0.6, 42);
        let params = MeanShiftParams::new()
            .bandwidth(1.0)
            .profile(profile)
            .seeds(seeds)
            .check()
            .expect("valid parameters");
        g.throughput(Throughput::Elements(n as u64));
        for (backend, e) in &engines {
            g.bench_with_input(
                BenchmarkId::new(backend, format!("{name},{profile},N={n}")),
                &n,
                |b, _| b.iter(|| black_box(e.mean_shift(&params, x.view()).expect("mean shift"))),
            );
        }
    }
    g.finish();
}

criterion_group! {
    name = benches;
    // No plots: the plotting backend needs system fonts a server may lack.
    config = Criterion::default().without_plots();
    targets = bench
}
criterion_main!(benches);
