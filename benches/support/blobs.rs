//! Generated blob data for the MeanShift benchmarks and the side-by-side
//! comparison (`examples/mean_shift_compare.rs`), plus a minimal `.npy`
//! writer so other tools can read the very same points.
#![allow(dead_code)]

use std::io::Write;
use std::path::Path;

use ndarray::Array2;

/// SplitMix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in (0, 1).
    fn uniform(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    /// Standard normal (Box–Muller).
    fn normal(&mut self) -> f64 {
        let (u1, u2) = (self.uniform(), self.uniform());
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// `n` points in `d` dimensions around `centres` centres drawn uniformly in
/// [−10, 10]^d, isotropic normal with standard deviation `std`; point `i`
/// belongs to centre `i % centres`. Returns the points and the centres.
pub fn blobs(
    n: usize,
    d: usize,
    centres: usize,
    std: f64,
    seed: u64,
) -> (Array2<f32>, Array2<f32>) {
    let mut rng = Rng(seed);
    let c = Array2::from_shape_fn((centres, d), |_| (rng.uniform() * 20.0 - 10.0) as f32);
    let mut x = Array2::zeros((n, d));
    for i in 0..n {
        for k in 0..d {
            x[[i, k]] = (f64::from(c[[i % centres, k]]) + std * rng.normal()) as f32;
        }
    }
    (x, c)
}

fn write_npy(path: &Path, descr: &str, shape: &[usize], data: &[u8]) -> std::io::Result<()> {
    let shape_str = match shape {
        [n] => format!("({n},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header =
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_str}, }}");
    // Magic (6) + version (2) + length (2) + header + '\n', padded to 64.
    let total = (10 + header.len() + 1).next_multiple_of(64);
    header.push_str(&" ".repeat(total - 10 - header.len() - 1));
    header.push('\n');
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    f.write_all(b"\x93NUMPY\x01\x00")?;
    f.write_all(&(header.len() as u16).to_le_bytes())?;
    f.write_all(header.as_bytes())?;
    f.write_all(data)?;
    f.flush()
}

/// Writes a row-major `f32` matrix as `.npy`.
pub fn write_npy_f32(path: &Path, x: &Array2<f32>) -> std::io::Result<()> {
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    write_npy(path, "<f4", &[x.nrows(), x.ncols()], &bytes)
}

/// Writes an `i64` vector as `.npy`.
pub fn write_npy_i64(path: &Path, x: &[i64]) -> std::io::Result<()> {
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    write_npy(path, "<i8", &[x.len()], &bytes)
}
