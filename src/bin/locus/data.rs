//! Generated data for `demo` and `bench`: deterministic, no files needed.

use std::f32::consts::TAU;

use ndarray::Array2;

/// Number of blobs the generators draw from.
pub const BLOBS: usize = 5;

/// xorshift64: small and reproducible.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    /// Uniform in [0, 1).
    fn uniform(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// The centre of blob `k`: on a circle of radius 4.
pub fn blob_centre(k: usize) -> [f32; 2] {
    let a = k as f32 * TAU / BLOBS as f32;
    [4.0 * a.cos(), 4.0 * a.sin()]
}

/// [`try_blobs`] that aborts when the points do not fit (tests only).
#[cfg(test)]
pub fn blobs(n: usize) -> Array2<f32> {
    let mut x = Array2::zeros((n, 2));
    fill_blobs(&mut x);
    x
}

/// `n` 2-D points, point `i` drawn around [`blob_centre`]`(i % BLOBS)`
/// with a normal offset of standard deviation 0.6; `None` when they do not
/// fit in memory.
pub fn try_blobs(n: usize) -> Option<Array2<f32>> {
    let len = n.checked_mul(2)?;
    let mut v = Vec::new();
    v.try_reserve_exact(len).ok()?;
    v.resize(len, 0.0f32);
    let mut x = Array2::from_shape_vec((n, 2), v).ok()?;
    fill_blobs(&mut x);
    Some(x)
}

fn fill_blobs(x: &mut Array2<f32>) {
    let mut rng = Rng::new(0x2545_F491_4F6C_DD1D);
    for (i, mut p) in x.rows_mut().into_iter().enumerate() {
        let c = blob_centre(i % BLOBS);
        // Box–Muller for a standard normal offset.
        let (u1, u2) = (rng.uniform().max(1e-7), rng.uniform());
        let r = (-2.0 * u1.ln()).sqrt();
        let a = TAU * u2;
        p[0] = c[0] + 0.6 * r * a.cos();
        p[1] = c[1] + 0.6 * r * a.sin();
    }
}

/// `rows × cols` uniform in [0, 1), seeded; `None` when it does not fit in
/// memory.
pub fn try_uniform(rows: usize, cols: usize, seed: u64) -> Option<Array2<f32>> {
    let len = rows.checked_mul(cols)?;
    let mut v = Vec::new();
    v.try_reserve_exact(len).ok()?;
    let mut rng = Rng::new(seed);
    v.extend((0..len).map(|_| rng.uniform()));
    Array2::from_shape_vec((rows, cols), v).ok()
}

/// [`try_uniform`] that aborts when the matrix does not fit (tests only).
#[cfg(test)]
pub fn uniform(rows: usize, cols: usize, seed: u64) -> Array2<f32> {
    let mut rng = Rng::new(seed);
    Array2::from_shape_fn((rows, cols), |_| rng.uniform())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blobs_sit_around_their_centres() {
        let x = blobs(1000);
        for k in 0..BLOBS {
            let c = blob_centre(k);
            let rows: Vec<_> = (k..1000).step_by(BLOBS).collect();
            let mean = |j: usize| rows.iter().map(|&i| x[[i, j]]).sum::<f32>() / rows.len() as f32;
            assert!((mean(0) - c[0]).abs() < 0.2 && (mean(1) - c[1]).abs() < 0.2);
        }
        assert_eq!(uniform(3, 2, 7), uniform(3, 2, 7));
        assert_eq!(try_uniform(3, 2, 7), Some(uniform(3, 2, 7)));
        assert_eq!(try_uniform(usize::MAX, 2, 7), None);
        assert_eq!(try_blobs(1000), Some(x));
        assert_eq!(try_blobs(usize::MAX), None);
    }
}
