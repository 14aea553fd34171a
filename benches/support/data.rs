//! What the benches share: deterministic uniform data in [0, 1) (a
//! 64-bit LCG, the same stream on every machine) and sizes read from the
//! environment.

use ndarray::Array2;

/// `n × d` values in [0, 1) from the LCG seeded with `seed`.
pub fn data(n: usize, d: usize, seed: u64) -> Array2<f32> {
    let mut s = seed;
    Array2::from_shape_fn((n, d), |_| {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (s >> 40) as f32 / (1u64 << 24) as f32
    })
}

/// The integer in environment variable `name`, or `default`.
#[allow(dead_code)] // not every bench sizes itself from the environment
pub fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
