//! The machine's fp32 FMA ceiling: every core running independent chains
//! of fused multiply-adds and nothing else, at AVX-512 (zmm) and AVX2
//! (ymm) width. The attention and local-mean kernels are mostly FMAs, so
//! this is the most GFLOP/s any of them (or any peer) can reach here;
//! `benches/compare_torch_faiss.py` reports theirs against it.
//!
//! ```text
//! cargo run --release --example fma_ceiling [-- THREADS]
//! ```
//!
//! Prints the best of five runs of each width (a 2-FLOP FMA per lane),
//! one line each, and a JSON line for scripts. Needs x86-64; a width the
//! CPU lacks is reported as missing.

use std::time::Instant;

/// Independent accumulators per thread: enough to cover the FMA latency
/// (4 cycles) on two pipes with room to spare.
const CHAINS: usize = 12;
/// FMA rounds per accumulator in one run.
const ROUNDS: usize = 20_000_000;

#[cfg(target_arch = "x86_64")]
mod chains {
    use super::{CHAINS, ROUNDS};
    use std::arch::x86_64::*;

    /// `ROUNDS` FMAs on each of `CHAINS` zmm accumulators; returns a lane
    /// sum so nothing is optimised away.
    #[target_feature(enable = "avx512f")]
    pub fn zmm(seed: f32) -> f32 {
        let a = _mm512_set1_ps(0.999_999);
        let b = _mm512_set1_ps(seed * 1e-7);
        let mut acc = [_mm512_set1_ps(seed); CHAINS];
        for _ in 0..ROUNDS {
            for c in acc.iter_mut() {
                *c = _mm512_fmadd_ps(*c, a, b);
            }
        }
        let mut s = _mm512_setzero_ps();
        for c in acc {
            s = _mm512_add_ps(s, c);
        }
        _mm512_reduce_add_ps(s)
    }

    /// The same at AVX2 width.
    #[target_feature(enable = "avx2,fma")]
    pub fn ymm(seed: f32) -> f32 {
        let a = _mm256_set1_ps(0.999_999);
        let b = _mm256_set1_ps(seed * 1e-7);
        let mut acc = [_mm256_set1_ps(seed); CHAINS];
        for _ in 0..ROUNDS {
            for c in acc.iter_mut() {
                *c = _mm256_fmadd_ps(*c, a, b);
            }
        }
        let mut s = _mm256_setzero_ps();
        for c in acc {
            s = _mm256_add_ps(s, c);
        }
        let mut lanes = [0f32; 8];
        // SAFETY: `lanes` holds the eight floats written.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), s) };
        lanes.iter().sum()
    }
}

/// GFLOP/s of `threads` threads each running `body` once.
fn gflops(threads: usize, lanes: usize, body: fn(f32) -> f32) -> f64 {
    let start = Instant::now();
    let sums: Vec<f32> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| s.spawn(move || body(1.0 + t as f32)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(0.0))
            .collect()
    });
    let secs = start.elapsed().as_secs_f64();
    std::hint::black_box(sums);
    (threads * CHAINS * ROUNDS * lanes * 2) as f64 / secs / 1e9
}

fn best_of_five(threads: usize, lanes: usize, body: fn(f32) -> f32) -> f64 {
    (0..5)
        .map(|_| gflops(threads, lanes, body))
        .fold(0.0, f64::max)
}

fn main() {
    let threads = match std::env::args().nth(1) {
        Some(t) => match t.parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => {
                eprintln!("fma_ceiling: THREADS must be a positive integer, got {t:?}");
                std::process::exit(2);
            }
        },
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    #[cfg(target_arch = "x86_64")]
    {
        let zmm = if is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F (checked just above).
            Some(best_of_five(threads, 16, |s| unsafe { chains::zmm(s) }))
        } else {
            None
        };
        let ymm = if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has AVX2 and FMA (checked just above).
            Some(best_of_five(threads, 8, |s| unsafe { chains::ymm(s) }))
        } else {
            None
        };
        let show = |v: Option<f64>| v.map_or("missing".to_string(), |g| format!("{g:.1} GFLOP/s"));
        println!("fp32 FMA ceiling, {threads} threads, best of 5");
        println!("  zmm (AVX-512): {}", show(zmm));
        println!("  ymm (AVX2):    {}", show(ymm));
        let js = |v: Option<f64>| v.map_or("null".to_string(), |g| format!("{g:.1}"));
        println!(
            "{{\"threads\": {threads}, \"zmm_gflops\": {}, \"ymm_gflops\": {}}}",
            js(zmm),
            js(ymm)
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        eprintln!("fma_ceiling: x86-64 only ({threads} threads asked)");
        std::process::exit(2);
    }
}
