//! Local models on both backends, same data, one process:
//! KDE and leave-one-out error at N = 32768, d = 3 (pairs/s), and kNN
//! (k = 16) among N = 65536 keys in d = 16 against a brute-force CPU sort.
//!
//! A software GPU adapter (lavapipe) is benchmarked at a reduced size
//! (`gpu-software` ids; its figures say nothing about GPU speed).
//! `LOCUS_BENCH_BACKENDS` selects among `cpu,gpu,baseline`.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use locus::{Device, Engine, EngineOptions, Kernel};
use ndarray::Array2;
use rayon::prelude::*;

#[path = "support/data.rs"]
mod support_data;
use support_data::data;

fn wants(what: &str) -> bool {
    std::env::var("LOCUS_BENCH_BACKENDS").map_or(true, |b| b.contains(what))
}

/// (id, engine, size divisor): a software adapter runs at 1/4 of N.
fn engines() -> Vec<(String, Engine, usize)> {
    let mut v = Vec::new();
    if wants("cpu") {
        v.push(("cpu".to_string(), Engine::cpu(), 1));
    }
    if wants("gpu") {
        match Engine::with_options(EngineOptions::new(Device::Gpu)) {
            Ok(e) if e.backend().is_software() => v.push(("gpu-software".to_string(), e, 4)),
            Ok(e) => v.push(("gpu".to_string(), e, 1)),
            Err(e) => eprintln!("no GPU benchmark: {e}"),
        }
    }
    v
}

/// The baseline: every distance, a full sort per query, the first k.
fn brute_force_knn(q: &Array2<f32>, x: &Array2<f32>, k: usize) -> Vec<Vec<usize>> {
    let (n, d) = x.dim();
    let xs = x.as_slice().expect("contiguous");
    q.as_slice()
        .expect("contiguous")
        .par_chunks(d)
        .map(|qi| {
            let mut all: Vec<(f32, usize)> = (0..n)
                .map(|j| {
                    let t = xs[j * d..(j + 1) * d]
                        .iter()
                        .zip(qi)
                        .map(|(a, b)| (a - b) * (a - b))
                        .sum::<f32>();
                    (t, j)
                })
                .collect();
            all.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
            all[..k].iter().map(|p| p.1).collect()
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let engines = engines();
    let kernel = Kernel::gaussian(0.05).expect("valid bandwidth");
    let n = 32768;
    let mut g = c.benchmark_group("kde_loo_gaussian_d3");
    g.sample_size(10);
    for (name, e, div) in &engines {
        let m = n / div;
        let x = data(m, 3, 1);
        let y = data(m, 3, 2);
        g.throughput(Throughput::Elements((m * m) as u64));
        g.bench_with_input(
            BenchmarkId::new(format!("density/{name}"), m),
            &m,
            |b, _| b.iter(|| black_box(e.density(&kernel, y.view(), x.view(), None).expect("kde"))),
        );
        g.bench_with_input(BenchmarkId::new(format!("loo/{name}"), m), &m, |b, _| {
            b.iter(|| black_box(e.loo_error(&kernel, x.view(), None).expect("loo")))
        });
    }
    g.finish();

    // kNN: 1024 queries among 65536 keys (the baseline's full sorts make a
    // larger M take minutes; both sides scale linearly in M).
    let (m, n, d, k) = (1024usize, 65536usize, 16usize, 16usize);
    let mut g = c.benchmark_group("knn_k16_d16");
    g.sample_size(10);
    let x = data(n, d, 3);
    let q = data(m, d, 4);
    g.throughput(Throughput::Elements((m * n) as u64));
    if wants("baseline") {
        g.bench_function(
            BenchmarkId::new("brute-force-sort", format!("M={m},N={n}")),
            |b| b.iter(|| black_box(brute_force_knn(&q, &x, k))),
        );
    }
    for (name, e, div) in &engines {
        let nn = n / div;
        let xs = x.slice(ndarray::s![..nn, ..]);
        g.throughput(Throughput::Elements((m * nn) as u64));
        g.bench_function(
            BenchmarkId::new(name.as_str(), format!("M={m},N={nn}")),
            |b| b.iter(|| black_box(e.knn(q.view(), xs, k).expect("knn"))),
        );
    }
    g.finish();
}

criterion_group! {
    name = benches;
    // Plots need system fonts some machines lack; the numbers are printed.
    config = Criterion::default().without_plots();
    targets = bench
}
criterion_main!(benches);
