//! Local mean throughput, GPU vs CPU on the same data: gaussian kernel,
//! M = N ∈ {4096, 32768}, d ∈ {3, 16}, q = d. Throughput is reported in
//! pair evaluations (M·N) per second.
//!
//! `cargo bench --bench local_mean` runs both backends when a GPU adapter
//! exists (a software one too, marked `gpu-software` in the ids: its
//! figures say nothing about GPU speed). `LOCUS_BENCH_SIZES=4096` limits
//! the sizes; `LOCUS_BENCH_BACKENDS=cpu,naive` the backends (`naive`:
//! a plain rayon loop, the baseline the engine is measured against).

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use locus::{Device, Engine, EngineOptions, Kernel};
use ndarray::Array2;

#[path = "support/data.rs"]
mod support_data;
use support_data::data;

fn engines() -> Vec<(String, Engine)> {
    let which = std::env::var("LOCUS_BENCH_BACKENDS").unwrap_or_else(|_| "cpu,gpu,naive".into());
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

/// The baseline: a plain rayon loop, one query per task, `f32::exp` per
/// pair (no log domain, no blocking, no explicit SIMD).
fn naive_local_mean(h: f32, q: &Array2<f32>, x: &Array2<f32>) -> Vec<f32> {
    use rayon::prelude::*;
    let (n, d) = x.dim();
    let xs = x.as_slice().expect("contiguous");
    let c = -0.5 / (h * h);
    q.as_slice()
        .expect("contiguous")
        .par_chunks(d)
        .flat_map_iter(|qi| {
            let mut s = 0.0f32;
            let mut u = vec![0.0f32; d];
            for j in 0..n {
                let xj = &xs[j * d..(j + 1) * d];
                let t: f32 = xj.iter().zip(qi).map(|(a, b)| (a - b) * (a - b)).sum();
                let w = (c * t).exp();
                s += w;
                for (uk, &xk) in u.iter_mut().zip(xj) {
                    *uk += w * xk;
                }
            }
            u.into_iter().map(move |v| v / s)
        })
        .collect()
}

fn sizes() -> Vec<usize> {
    std::env::var("LOCUS_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![4096, 32768])
}

fn bench(c: &mut Criterion) {
    let engines = engines();
    // A bandwidth of 0.2 in the unit cube: every key contributes (no
    // empty lane groups to skip), as in a smoothing pass.
    let kernel = Kernel::gaussian(0.2).expect("valid bandwidth");
    for d in [3usize, 16] {
        let mut g = c.benchmark_group(format!("local_mean_gaussian_d{d}"));
        g.sample_size(10);
        for &n in &sizes() {
            let x = data(n, d, 1);
            let q = data(n, d, 2);
            g.throughput(Throughput::Elements((n * n) as u64));
            if std::env::var("LOCUS_BENCH_BACKENDS").map_or(true, |b| b.contains("naive")) {
                g.bench_with_input(
                    BenchmarkId::new("naive-cpu", format!("M=N={n},q={d}")),
                    &n,
                    |b, _| b.iter(|| black_box(naive_local_mean(0.2, &q, &x))),
                );
            }
            for (name, e) in &engines {
                g.bench_with_input(
                    BenchmarkId::new(name, format!("M=N={n},q={d}")),
                    &n,
                    |b, _| {
                        b.iter(|| {
                            black_box(
                                e.local_mean(&kernel, q.view(), x.view(), x.view())
                                    .expect("local mean"),
                            )
                        })
                    },
                );
            }
        }
        g.finish();
    }
}

criterion_group! {
    name = benches;
    // Plots need system fonts some machines lack; the numbers are printed.
    config = Criterion::default().without_plots();
    targets = bench
}
criterion_main!(benches);
