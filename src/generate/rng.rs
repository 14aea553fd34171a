//! The random draws of local-mean diffusion: SplitMix64 streams (Steele,
//! Lea & Flood, "Fast splittable pseudorandom number generators", 2014;
//! the generator `subsample` in `cluster/bandwidth.rs` uses too), one per
//! `(seed, stream, row)`, so every draw is the same on any number of
//! threads and on either backend; standard normals by the Box–Muller
//! transform, in `f64`.

use std::f64::consts::TAU;

/// The golden-ratio increment of SplitMix64.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function: a bijective mix of 64 bits.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One SplitMix64 stream, with the second normal of each Box–Muller pair
/// kept for the next call.
#[derive(Debug, Clone)]
pub(crate) struct Stream {
    state: u64,
    spare: Option<f64>,
}

impl Stream {
    /// The stream of row `row` of stream family `stream` under `seed`:
    /// its start state is the three mixed together, so neighbouring rows
    /// (and seeds) start far apart.
    pub(crate) fn new(seed: u64, stream: u64, row: u64) -> Self {
        let s = mix(mix(seed.wrapping_add(GOLDEN)) ^ stream.wrapping_mul(GOLDEN));
        Stream {
            state: mix(s ^ row.wrapping_mul(0xD1B5_4A32_D192_ED03)),
            spare: None,
        }
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN);
        mix(self.state)
    }

    /// Uniform in `0..n` (`n ≥ 1`), by the high half of a 128-bit product
    /// (bias below `n/2⁶⁴`).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// Uniform in `(0, 1]`: 53 random bits, never 0 (Box–Muller takes its
    /// logarithm).
    fn open_unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A standard normal draw.
    pub(crate) fn normal(&mut self) -> f64 {
        if let Some(z) = self.spare.take() {
            return z;
        }
        let (u1, u2) = (self.open_unit(), self.open_unit());
        let r = (-2.0 * u1.ln()).sqrt();
        let (s, c) = (TAU * u2).sin_cos();
        self.spare = Some(r * s);
        r * c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_reproducible_and_distinct() {
        let draw = |seed, stream, row| {
            let mut s = Stream::new(seed, stream, row);
            (0..4).map(|_| s.next_u64()).collect::<Vec<_>>()
        };
        assert_eq!(draw(1, 2, 3), draw(1, 2, 3));
        assert_ne!(draw(1, 2, 3), draw(1, 2, 4));
        assert_ne!(draw(1, 2, 3), draw(1, 3, 3));
        assert_ne!(draw(1, 2, 3), draw(2, 2, 3));
    }

    #[test]
    fn normals_have_the_moments_of_a_standard_normal() {
        let n = 200_000;
        let mut z = Vec::with_capacity(n);
        for row in 0..n as u64 / 4 {
            let mut s = Stream::new(7, 0, row);
            z.extend((0..4).map(|_| s.normal()));
        }
        let mean = z.iter().sum::<f64>() / n as f64;
        let var = z.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
        let kurt = z.iter().map(|v| (v - mean).powi(4)).sum::<f64>() / n as f64 / (var * var);
        // Standard errors: 1/√n ≈ 0.0022 for the mean, √(2/n) ≈ 0.0032 for
        // the variance, √(24/n) ≈ 0.011 for the kurtosis; bounds at ~5 of them.
        assert!(mean.abs() < 0.011, "mean {mean}");
        assert!((var - 1.0).abs() < 0.016, "variance {var}");
        assert!((kurt - 3.0).abs() < 0.055, "kurtosis {kurt}");
        let within_one = z.iter().filter(|v| v.abs() < 1.0).count() as f64 / n as f64;
        assert!(
            (within_one - 0.682_689).abs() < 0.005,
            "P(|z| < 1) = {within_one}"
        );
    }

    #[test]
    fn below_covers_its_range_evenly() {
        let mut s = Stream::new(3, 1, 0);
        let mut counts = [0usize; 7];
        for _ in 0..70_000 {
            counts[s.below(7)] += 1;
        }
        // 10 000 expected each; standard deviation ≈ 93.
        assert!(
            counts.iter().all(|&c| (9_500..10_500).contains(&c)),
            "{counts:?}"
        );
    }
}
