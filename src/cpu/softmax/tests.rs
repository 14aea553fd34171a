//! Both builds of the three ops against `f64` references.

use super::super::simd::{Avx2Fma, Isa, TileIsa};
use super::CpuAttention;
use super::feature::feature_local_mean_on;
use super::matrix::softmax_matrix_on;
use crate::matrix::Matrix;
use crate::types::{Attention, Heads};
use ndarray::ArrayView2;

fn data(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) as f32
                / (1 << 24) as f32
                - 0.5
        })
        .collect()
}

fn heads(v: &[f32], batch: usize, rows: usize, cols: usize) -> Heads<'_> {
    let view = ArrayView2::from_shape((batch * rows, cols), v).unwrap();
    Heads {
        data: Matrix::check("test", "x", view).unwrap(),
        batch,
        rows,
        ndim: 3,
    }
}

/// f64 attention of one batch (`q` value columns; the other sizes from
/// the slices): materialized scores, row max, exp, normalize.
fn reference(phi: &[f32], psi: &[f32], v: &[f32], q: usize, attn: &Attention) -> Vec<f64> {
    let n = v.len() / q;
    let d = psi.len() / n;
    let m = phi.len() / d;
    let (s, causal) = (attn.scale, attn.causal);
    let mut out = vec![0.0; m * q];
    let off = n - m.min(n);
    for i in 0..m {
        let lim = if causal { i + off + 1 } else { n };
        let sc: Vec<f64> = (0..lim)
            .map(|j| {
                f64::from(s)
                    * (0..d)
                        .map(|k| f64::from(phi[i * d + k]) * f64::from(psi[j * d + k]))
                        .sum::<f64>()
            })
            .collect();
        let mx = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = sc.iter().map(|x| (x - mx).exp()).collect();
        let tot: f64 = w.iter().sum();
        for c in 0..q {
            out[i * q + c] = (0..lim)
                .map(|j| w[j] * f64::from(v[j * q + c]))
                .sum::<f64>()
                / tot;
        }
    }
    out
}

/// Every build this CPU runs (portable, which integration tests do not
/// reach on an AVX2 machine, AVX2, AVX-512) against the f64 reference and
/// against each other, on shapes that leave partial register tiles, key
/// tiles, value-column groups and key splits.
#[test]
fn every_build_matches_reference() {
    for &(nb, m, n, d, q, causal) in &[
        (1usize, 1usize, 1usize, 1usize, 1usize, false),
        (2, 53, 131, 7, 5, false),
        (2, 53, 131, 7, 5, true),
        (1, 5, 700, 3, 17, true),
        (3, 49, 49, 16, 16, true),
        (2, 101, 300, 64, 64, true),
        (1, 97, 257, 33, 40, false),
        (1, 16, 1000, 64, 64, false),
        (1, 450, 450, 8, 16, true),
        (2, 250, 520, 5, 3, true),
    ] {
        let (pv, kv, vv) = (
            data(nb * m * d, 1),
            data(nb * n * d, 2),
            data(nb * n * q, 3),
        );
        let (p, k, v) = (
            heads(&pv, nb, m, d),
            heads(&kv, nb, n, d),
            heads(&vv, nb, n, q),
        );
        let attn = Attention { scale: 2.5, causal };
        let mut first: Option<Vec<f32>> = None;
        for tile in TileIsa::all() {
            let avx2 = format!("{tile:?}");
            let isa = match tile {
                TileIsa::Portable => None,
                TileIsa::Avx2(t) => Some(t),
                TileIsa::Avx512(t) => t.avx2_fma(),
            };
            let got = CpuAttention::for_call(&Default::default(), &k, &v)
                .attend_on(&p, &attn, tile)
                .unwrap();
            // The builds agree with each other to the order of their sums.
            match &first {
                None => first = Some(got.clone()),
                Some(f) => {
                    for (i, (&a, &b)) in f.iter().zip(&got).enumerate() {
                        assert!(
                            (a - b).abs() <= 2e-6 * a.abs().max(1.0),
                            "{avx2} [{i}]: {b} vs {a}"
                        );
                    }
                }
            }
            let mat = softmax_matrix_on(&p, &k, &attn, isa).unwrap();
            for b in 0..nb {
                let want = reference(
                    p.batch_slice(b),
                    k.batch_slice(b),
                    v.batch_slice(b),
                    q,
                    &attn,
                );
                for (i, &w) in want.iter().enumerate() {
                    let g = f64::from(got[b * m * q + i]);
                    assert!(
                        (g - w).abs() <= 1e-4 * w.abs() + 1e-5,
                        "{avx2} {nb}×{m}×{n} d={d} q={q} causal={causal} [{b}][{i}]: {g} vs {w}"
                    );
                }
                // Weights times values equal the fused result.
                for i in 0..m {
                    let row = &mat[(b * m + i) * n..(b * m + i + 1) * n];
                    for c in 0..q {
                        let u: f64 = row
                            .iter()
                            .enumerate()
                            .map(|(j, &w)| f64::from(w) * f64::from(v.batch_slice(b)[j * q + c]))
                            .sum();
                        let w = want[i * q + c];
                        assert!(
                            (u - w).abs() <= 1e-4 * w.abs() + 1e-5,
                            "matrix {avx2}: {u} vs {w}"
                        );
                    }
                }
            }
        }
    }
}
/// Both builds of the feature local mean against the pairwise f64
/// definition, with chunks, prefix sums and an empty row.
#[test]
fn feature_mean_builds_match_definition() {
    for &(nb, m, n, d, q, causal) in &[
        (2usize, 300usize, 700usize, 3usize, 5usize, true),
        (1, 40, 40, 4, 1, false),
        (1, 1, 1, 1, 2, true),
    ] {
        let pos = |v: Vec<f32>| {
            v.into_iter()
                .map(|x| (x + 0.5).max(0.0))
                .collect::<Vec<_>>()
        };
        let mut pv = pos(data(nb * m * d, 4));
        pv[..d].fill(0.0); // query 0 of batch 0 has no weight
        let (kv, vv) = (pos(data(nb * n * d, 5)), data(nb * n * q, 6));
        let (p, k, v) = (
            heads(&pv, nb, m, d),
            heads(&kv, nb, n, d),
            heads(&vv, nb, n, q),
        );
        let mut builds = vec![None];
        if let Some(isa) = Avx2Fma::detect() {
            builds.push(Some(isa));
        }
        for isa in builds {
            let avx2 = isa.is_some();
            let (got, empty) = feature_local_mean_on(&p, &k, &v, causal, isa).unwrap();
            assert_eq!(empty, nb.min(1), "avx2={avx2}");
            let off = n - m.min(n);
            for b in 0..nb {
                let (pb, kb, vb) = (p.batch_slice(b), k.batch_slice(b), v.batch_slice(b));
                for i in 0..m {
                    let lim = if causal { i + off + 1 } else { n };
                    let w: Vec<f64> = (0..lim)
                        .map(|j| {
                            (0..d)
                                .map(|t| f64::from(pb[i * d + t]) * f64::from(kb[j * d + t]))
                                .sum()
                        })
                        .collect();
                    let den: f64 = w.iter().sum();
                    for c in 0..q {
                        let g = f64::from(got[(b * m + i) * q + c]);
                        if den == 0.0 {
                            assert!(g.is_nan());
                            continue;
                        }
                        let want = (0..lim)
                            .map(|j| w[j] * f64::from(vb[j * q + c]))
                            .sum::<f64>()
                            / den;
                        assert!(
                            (g - want).abs() <= 1e-5 * want.abs() + 1e-6,
                            "avx2={avx2} [{b}][{i}][{c}]: {g} vs {want}"
                        );
                    }
                }
            }
        }
    }
}

/// Scores that rise along the keys by less than the lazy margin per tile
/// (the reference stays, weights above 1), by about the margin, by far
/// more (it moves every tile), that fall, and that jump late: every build
/// against the f64 reference, with and without key splits (1 row and 200
/// rows), causal and not.
#[test]
fn the_lazy_maximum_follows_rising_and_falling_scores() {
    let n = 700;
    let q = 3;
    let vv = data(n * q, 7);
    for step in [0.01f32, 0.078, 0.3, -0.3, 0.0] {
        for m in [1usize, 200] {
            // Query i = (1, small); key j = (j·step, j-th pseudo-random), so
            // row i's scores rise (or fall) by `step` a key; key 650 jumps.
            let pv: Vec<f32> = (0..m).flat_map(|i| [1.0, 0.01 * i as f32]).collect();
            let kv: Vec<f32> = (0..n)
                .flat_map(|j| {
                    let jump = if j == 650 { 40.0 } else { 0.0 };
                    [j as f32 * step + jump, data(1, j as u32)[0]]
                })
                .collect();
            let (p, k, v) = (
                heads(&pv, 1, m, 2),
                heads(&kv, 1, n, 2),
                heads(&vv, 1, n, q),
            );
            for causal in [false, true] {
                let attn = Attention { scale: 1.0, causal };
                let want = reference(&pv, &kv, &vv, q, &attn);
                for tile in TileIsa::all() {
                    let got = CpuAttention::for_call(&Default::default(), &k, &v)
                        .attend_on(&p, &attn, tile)
                        .unwrap();
                    for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            (f64::from(g) - w).abs() <= 1e-4 * w.abs() + 1e-5,
                            "{tile:?} step={step} m={m} causal={causal} [{i}]: {g} vs {w}"
                        );
                    }
                }
            }
        }
    }
}

/// The AVX-512 exponential of the softmax equals `simd::exp2_capped` lane
/// for lane, bit for bit: across the range, at the cut-off (2⁻¹²⁶, the
/// smallest result: none is subnormal), at 0, above 0 up to the lazy
/// maximum's margin
/// (arguments `(x − m)·log₂e` of scores `x` against a reference `m = 0`),
/// and 0 for −∞ and NaN; whole tiles and partial rows alike. And its lazy
/// row maximum is the portable one.
#[cfg(target_arch = "x86_64")]
#[test]
fn avx512_exponentials_equal_the_scalar_ones_bit_for_bit() {
    use super::super::simd::{Avx512, EXP2_MIN, exp2_capped};
    let Some(t) = Avx512::detect() else {
        return;
    };
    let ln2 = std::f32::consts::LN_2;
    let mut xs: Vec<f32> = (0..4096).map(|i| 5.0 - (i as f32) * 0.0247).collect();
    xs.extend([
        0.0,
        -0.0,
        0.5,
        -0.5,
        1.5,
        -2.5,
        super::LAZY,
        EXP2_MIN * ln2,
        f32::from_bits((EXP2_MIN * ln2).to_bits() - 1),
        f32::from_bits((EXP2_MIN * ln2).to_bits() + 1),
        -125.7 * ln2,
        -1e-30,
        -1e30,
        f32::NEG_INFINITY,
        f32::NAN,
    ]);
    for len in [super::BK, 1, 7, 16, 17, 40, 63] {
        for chunk in xs.chunks(len) {
            let mut row = chunk.to_vec();
            // SAFETY: detected above.
            let sum = unsafe { super::avx512::exp2_sum(t, &mut row, 0.0) };
            let mut want_sum = 0.0f64;
            for (&x, &got) in chunk.iter().zip(&row) {
                let want = exp2_capped::<Avx2Fma>(x * std::f32::consts::LOG2_E);
                assert_eq!(got.to_bits(), want.to_bits(), "x={x:e} len={len}");
                want_sum += f64::from(want);
            }
            assert!(
                (f64::from(sum) - want_sum).abs() <= 1e-5 * want_sum,
                "len={len}"
            );
            // The lazy maximum (scores are never NaN), against references
            // below, at and above the margin, and −∞.
            if chunk.iter().any(|x| x.is_nan()) {
                continue;
            }
            let top = chunk.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
            let lazy = super::LAZY;
            for m in [
                f32::NEG_INFINITY,
                top - lazy - 0.25,
                top - lazy,
                top - 1.0,
                top + 3.0,
            ] {
                // SAFETY: detected above.
                let got = unsafe { super::avx512::raised_max(t, chunk, m) };
                let want = if top - m > lazy { top } else { m };
                assert_eq!(got.to_bits(), want.to_bits(), "m={m} top={top} len={len}");
            }
        }
    }
}
