//! Kernel softmax (attention) throughput: B = 8 heads, T ∈ {1024, 4096},
//! d = q = 64, with and without the causal mask, on the engine's CPU and
//! GPU backends and a naive materialize-then-softmax CPU baseline, all on
//! the same data in one process.
//!
//! Throughput is effective FLOP/s: `4·B·T²·d` per call, halved with the
//! causal mask (criterion prints it as `elem/s`). After each group a table
//! gives the mean time per call, GFLOP/s and the speed-up over the naive
//! baseline.
//!
//! `cargo bench --bench softmax` runs every backend found; a software GPU
//! adapter (lavapipe, marked `gpu-software`: a CPU, so its figures say
//! nothing about GPU speed; about 10 s per call at T = 1024) only at
//! T ≤ `LOCUS_BENCH_SOFTWARE_MAX_T` (default 256, so not at the default
//! sizes). `LOCUS_BENCH_SIZES=256,1024` sets the sizes,
//! `LOCUS_BENCH_BACKENDS=cpu,naive` the backends.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use locus::{Device, Engine, EngineOptions, SoftmaxParams};
use ndarray::Array3;
use rayon::prelude::*;

const HEADS: usize = 8;
const D: usize = 64;

fn data(b: usize, n: usize, d: usize, seed: u64) -> Array3<f32> {
    let mut s = seed;
    Array3::from_shape_fn((b, n, d), |_| {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    })
}

fn selected(name: &str) -> bool {
    std::env::var("LOCUS_BENCH_BACKENDS").map_or(true, |b| b.split(',').any(|x| x.trim() == name))
}

fn engines() -> Vec<(String, Engine)> {
    let mut v = Vec::new();
    if selected("cpu") {
        v.push(("cpu".to_string(), Engine::cpu()));
    }
    if selected("gpu") {
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

/// The baseline: per head, the `T × T` scores materialized (rayon over
/// rows, plain loops), each row turned into softmax weights, then `P·V`.
/// Masked entries are neither computed nor multiplied.
fn naive_attention(
    phi: &Array3<f32>,
    psi: &Array3<f32>,
    v: &Array3<f32>,
    scale: f32,
    causal: bool,
) -> Array3<f32> {
    let (b, m, d) = phi.dim();
    let (n, q) = (psi.dim().1, v.dim().2);
    let mut out = Array3::<f32>::zeros((b, m, q));
    let (ps, ks, vs) = (
        phi.as_slice().expect("contiguous"),
        psi.as_slice().expect("contiguous"),
        v.as_slice().expect("contiguous"),
    );
    let os = out.as_slice_mut().expect("contiguous");
    let mut p = vec![0.0f32; m * n];
    for h in 0..b {
        let (ph, kh, vh) = (
            &ps[h * m * d..(h + 1) * m * d],
            &ks[h * n * d..(h + 1) * n * d],
            &vs[h * n * q..(h + 1) * n * q],
        );
        p.par_chunks_mut(n).enumerate().for_each(|(i, row)| {
            let lim = if causal { i + 1 + n - m } else { n };
            let qi = &ph[i * d..(i + 1) * d];
            for (j, x) in row[..lim].iter_mut().enumerate() {
                let kj = &kh[j * d..(j + 1) * d];
                *x = scale * qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f32>();
            }
            let mx = row[..lim].iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0.0f32;
            for x in &mut row[..lim] {
                *x = (*x - mx).exp();
                sum += *x;
            }
            for x in &mut row[..lim] {
                *x /= sum;
            }
        });
        os[h * m * q..(h + 1) * m * q]
            .par_chunks_mut(q)
            .enumerate()
            .for_each(|(i, o)| {
                let lim = if causal { i + 1 + n - m } else { n };
                for (j, &w) in p[i * n..i * n + lim].iter().enumerate() {
                    for (oc, &vc) in o.iter_mut().zip(&vh[j * q..(j + 1) * q]) {
                        *oc += w * vc;
                    }
                }
            });
    }
    out
}

fn sizes() -> Vec<usize> {
    std::env::var("LOCUS_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1024, 4096])
}

fn software_max_t() -> usize {
    std::env::var("LOCUS_BENCH_SOFTWARE_MAX_T")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256)
}

/// Seconds per call of each batch of calls criterion timed, per group and
/// backend (for the summary table: their median).
static TIMES: Mutex<BTreeMap<(String, String), Vec<f64>>> = Mutex::new(BTreeMap::new());

fn timed<F: FnMut()>(group: &str, name: &str, iters: u64, mut f: F) -> Duration {
    let t = Instant::now();
    for _ in 0..iters {
        f();
    }
    let el = t.elapsed();
    if let Ok(mut m) = TIMES.lock() {
        m.entry((group.to_string(), name.to_string()))
            .or_default()
            .push(el.as_secs_f64() / iters.max(1) as f64);
    }
    el
}

fn summary(group: &str, flops: f64) {
    let Ok(m) = TIMES.lock() else { return };
    let median = |name: &str| {
        m.get(&(group.to_string(), name.to_string())).map(|v| {
            let mut v = v.clone();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        })
    };
    let naive = median("naive-cpu");
    eprintln!("\n{group}: median time per call, effective FLOP/s, speed-up over naive");
    for ((g, name), _) in m.iter() {
        if g != group {
            continue;
        }
        let t = median(name).unwrap_or(f64::NAN);
        let ratio = naive.map_or(String::from("-"), |nv| format!("{:.1}x", nv / t));
        eprintln!(
            "  {name:<14} {:>10.1} ms {:>8.2} GFLOP/s  vs naive {ratio}",
            t * 1e3,
            flops / t / 1e9
        );
    }
}

fn bench(c: &mut Criterion) {
    let engines = engines();
    for &t in &sizes() {
        let phi = data(HEADS, t, D, 1);
        let psi = data(HEADS, t, D, 2);
        let v = data(HEADS, t, D, 3);
        for causal in [false, true] {
            let mask = if causal { "causal" } else { "full" };
            let group = format!("softmax_B{HEADS}_T{t}_d{D}_{mask}");
            let flops = 4.0 * (HEADS * t * t * D) as f64 / if causal { 2.0 } else { 1.0 };
            let params = SoftmaxParams::new().with_causal(causal);
            let scale = 1.0 / (D as f32).sqrt();
            let mut g = c.benchmark_group(&group);
            g.sample_size(10);
            g.throughput(Throughput::Elements(flops as u64));
            if selected("naive") {
                g.bench_function(BenchmarkId::new("naive-cpu", format!("T={t}")), |b| {
                    b.iter_custom(|iters| {
                        timed(&group, "naive-cpu", iters, || {
                            black_box(naive_attention(&phi, &psi, &v, scale, causal));
                        })
                    })
                });
            }
            for (name, e) in &engines {
                if name == "gpu-software" && t > software_max_t() {
                    eprintln!("{group}: {name} skipped (T > LOCUS_BENCH_SOFTWARE_MAX_T)");
                    continue;
                }
                g.bench_function(BenchmarkId::new(name, format!("T={t}")), |b| {
                    b.iter_custom(|iters| {
                        timed(&group, name, iters, || {
                            black_box(
                                e.kernel_softmax(phi.view(), psi.view(), v.view(), &params)
                                    .expect("kernel softmax"),
                            );
                        })
                    })
                });
            }
            g.finish();
            summary(&group, flops);
        }
    }
}

criterion_group! {
    name = benches;
    // Plots need system fonts some machines lack; the numbers are printed.
    config = Criterion::default().without_plots();
    targets = bench
}
criterion_main!(benches);
