//! Attention test data and plain `f64` references (kernel softmax, its
//! weights), shared by the one-shot and prepared-set tests.

use ndarray::{Array2, Array3, Axis};

use locus::Engine;

use super::{Rng, cpu, gpu};

pub fn flat<T: Clone>(a: &Array3<T>) -> Array2<T> {
    let (b, m, c) = a.dim();
    a.to_shape((b * m, c)).unwrap().to_owned()
}

/// Plain f64 softmax weights of every batch: scores materialized, the row
/// maximum subtracted, exponentiated, normalized (masked entries 0).
pub fn ref_weights(phi: &Array3<f32>, psi: &Array3<f32>, scale: f64, causal: bool) -> Array3<f64> {
    let (nb, m, d) = phi.dim();
    let n = psi.dim().1;
    let mut w = Array3::<f64>::zeros((nb, m, n));
    for b in 0..nb {
        for i in 0..m {
            let lim = if causal { i + 1 + n - m } else { n };
            let s: Vec<f64> = (0..lim)
                .map(|j| {
                    scale
                        * (0..d)
                            .map(|k| f64::from(phi[[b, i, k]]) * f64::from(psi[[b, j, k]]))
                            .sum::<f64>()
                })
                .collect();
            let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let tot: f64 = s.iter().map(|x| (x - mx).exp()).sum();
            for (j, x) in s.iter().enumerate() {
                w[[b, i, j]] = (x - mx).exp() / tot;
            }
        }
    }
    w
}

pub fn ref_attention(
    phi: &Array3<f32>,
    psi: &Array3<f32>,
    v: &Array3<f32>,
    scale: f64,
    causal: bool,
) -> Array3<f64> {
    let w = ref_weights(phi, psi, scale, causal);
    let v = v.mapv(f64::from);
    let mut out = Array3::<f64>::zeros((phi.dim().0, phi.dim().1, v.dim().2));
    for b in 0..w.dim().0 {
        out.index_axis_mut(Axis(0), b)
            .assign(&w.index_axis(Axis(0), b).dot(&v.index_axis(Axis(0), b)));
    }
    out
}

pub struct Data {
    pub phi: Array3<f32>,
    pub psi: Array3<f32>,
    pub v: Array3<f32>,
}

pub fn data(seed: u64, (b, m, n, d, q): (usize, usize, usize, usize, usize), lo: f32) -> Data {
    let mut rng = Rng::new(seed);
    let mut t = |r, c, lo, hi| {
        let a = rng.matrix(b * r, c, lo, hi);
        a.into_shape_with_order((b, r, c)).unwrap()
    };
    Data {
        phi: t(m, d, lo, 1.0),
        psi: t(n, d, lo, 1.0),
        v: t(n, q, -2.0, 3.0),
    }
}

/// (B, M, N, d, q): multiples of no tile size, the odd shapes.
/// On a GPU with 32 KiB of workgroup memory (lavapipe) the register-tiled
/// shader runs all but d = 130, whose queries do not fit its tiles (the
/// row-per-invocation shader runs it).
pub const SHAPES: [(usize, usize, usize, usize, usize); 7] = [
    (1, 1, 1, 1, 1),
    (3, 1, 37, 3, 2),
    (3, 37, 1, 3, 5),
    (2, 67, 131, 64, 64),
    (2, 50, 50, 80, 17),
    (3, 33, 70, 3, 7),
    (2, 40, 90, 130, 9),
];

/// The CPU engine, and the GPU one when there is an adapter.
pub fn engines() -> Vec<(String, Engine)> {
    let mut v = vec![("cpu".to_string(), cpu().clone())];
    if let Some(g) = gpu() {
        v.push(("gpu".to_string(), g.clone()));
    }
    v
}
