//! Kernel matrices `K`, `D⁻¹K`, `D − K` and `I − D⁻¹K` on the CPU, a row
//! per task (a group of rows when the keys have panels: their squared
//! distances then come from inner products, `panels.rs`): scaled squared
//! distances, block weights (`weights.rs`), and the `f64` far-row finish
//! for normalized rows.
//!
//! Imports: `super::{keys, panels, simd, weights}`, `crate::backend` (the
//! mode), `crate::kernel`.

use rayon::prelude::*;

use super::keys::KeysSoa;
use super::panels::{ROWS, TileIsa, serve_sq_dists};
use super::simd::{Avx2Fma, Isa, KEY_BLOCK, Portable, scaled_sq_dists, sum_of};
use super::sq_dists::SqDists;
use super::weights::{block_weights, initial_max, product_ts};
use crate::backend::MatrixMode;
use crate::cancel::Checkpoint;
use crate::error::Result;
use crate::kernel::Kernel;
use crate::kernel::exact::{self, needs_exact};

/// Fills `out` (row-major, `M × n`) with the requested matrix for the
/// queries (row-major, `d` columns), on the AVX2 + FMA build when `isa`
/// holds the token, else on the portable one. Returns the number of rows
/// with no kernel mass (NaN rows of `D⁻¹K`; always 0 for the other modes),
/// or [`crate::Error::Cancelled`] (row groups skipped once the calling
/// thread's token is cancelled).
///
/// For the Laplacian modes the queries are the keys themselves (`M = n`).
pub(crate) fn kernel_matrix(
    isa: Option<Avx2Fma>,
    kernel: &Kernel,
    queries: &[f32],
    d: usize,
    keys: &KeysSoa<'_>,
    mode: MatrixMode,
    out: &mut [f32],
) -> Result<usize> {
    // Read on the calling thread, before the rows fan out.
    let cp = Checkpoint::current("kernel_matrix");
    let n = keys.n;
    // Groups of rows by inner products only when there are enough of them
    // for every thread; else row by row, by differences.
    let groups = queries.len() / d / ROWS;
    let panels = serve_sq_dists(kernel, keys.panels, d) && groups >= rayon::current_num_threads();
    let rows_per = if panels { ROWS } else { 1 };
    let laplacian = matches!(
        mode,
        MatrixMode::Laplacian | MatrixMode::NormalizedLaplacian
    );
    let tile = TileIsa::at_most(isa);
    let empty = out
        .par_chunks_mut(rows_per * n)
        .zip(queries.par_chunks(rows_per * d))
        .enumerate()
        .map(|(gi, (rows, qs))| {
            if cp.is_cancelled() {
                return 0;
            }
            let g = qs.len() / d;
            let mut sq = panels
                .then(|| SqDists::new(kernel, qs, d, keys.panels, None, tile))
                .flatten();
            if mode == MatrixMode::SqDistance {
                // Distances themselves promise relative accuracy, not a
                // weight's.
                sq = sq.map(SqDists::relative_only);
            }
            for j0 in (0..n).step_by(KEY_BLOCK) {
                let len = KEY_BLOCK.min(n - j0);
                let take = sq.as_mut().map(|sq| sq.block(j0, len, g));
                for (r, row) in rows.chunks_mut(n).enumerate() {
                    let chunk = &mut row[j0..j0 + len];
                    match sq.as_ref().filter(|_| take.is_some_and(|t| t[r])) {
                        Some(sq) => {
                            let inv_h2 = kernel.inv_h2();
                            for (c, &v) in chunk.iter_mut().zip(sq.row(r, len)) {
                                *c = v * inv_h2;
                            }
                        }
                        None => {
                            let query = &qs[r * d..(r + 1) * d];
                            direct_dists(isa, kernel, query, keys, j0, chunk);
                        }
                    }
                }
            }
            if laplacian {
                // The queries are the keys: each row's own distance is 0
                // exactly, as by differences.
                for (r, row) in rows.chunks_mut(n).enumerate() {
                    row[gi * rows_per + r] = 0.0;
                }
            }
            rows.chunks_mut(n)
                .zip(qs.chunks(d))
                .enumerate()
                .map(|(r, (row, query))| {
                    let i = gi * rows_per + r;
                    usize::from(!fill_row(isa, kernel, query, keys, mode, i, row))
                })
                .sum::<usize>()
        })
        .sum();
    cp.check()?;
    Ok(empty)
}

/// Scaled squared distances of one query to the keys `j0..j0+t.len()`, by
/// differences (AVX2 + FMA when `isa` holds the token).
fn direct_dists(
    isa: Option<Avx2Fma>,
    kernel: &Kernel,
    query: &[f32],
    keys: &KeysSoa<'_>,
    j0: usize,
    t: &mut [f32],
) {
    if let Some(pb) = kernel.product_blocks() {
        return product_ts::<Portable>(&pb, keys.xt, keys.ld, j0, query, t);
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(isa) = isa {
        #[target_feature(enable = "avx2,fma")]
        fn avx2(_isa: Avx2Fma, xt: &[f32], ld: usize, j0: usize, q: &[f32], s: f32, t: &mut [f32]) {
            scaled_sq_dists::<Avx2Fma>(xt, ld, j0, q, s, t);
        }
        // SAFETY: `isa` is an `Avx2Fma` token, made only where run-time
        // detection found AVX2 and FMA.
        return unsafe { avx2(isa, keys.xt, keys.ld, j0, query, kernel.inv_h2(), t) };
    }
    let _ = isa;
    scaled_sq_dists::<Portable>(keys.xt, keys.ld, j0, query, kernel.inv_h2(), t);
}

/// One row from its scaled squared distances (in `row`), on the AVX2 +
/// FMA build when `isa` holds the token. Returns whether the row has
/// kernel mass.
fn fill_row(
    isa: Option<Avx2Fma>,
    kernel: &Kernel,
    query: &[f32],
    keys: &KeysSoa<'_>,
    mode: MatrixMode,
    i: usize,
    row: &mut [f32],
) -> bool {
    #[cfg(target_arch = "x86_64")]
    if let Some(isa) = isa {
        // SAFETY: `isa` is an `Avx2Fma` token, made only where run-time
        // detection found AVX2 and FMA.
        return unsafe { fill_row_avx2(isa, kernel, query, keys, mode, i, row) };
    }
    let _ = isa;
    fill_row_impl::<Portable>(kernel, query, keys, mode, i, row)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn fill_row_avx2(
    _isa: Avx2Fma,
    kernel: &Kernel,
    query: &[f32],
    keys: &KeysSoa<'_>,
    mode: MatrixMode,
    i: usize,
    row: &mut [f32],
) -> bool {
    fill_row_impl::<Avx2Fma>(kernel, query, keys, mode, i, row)
}

#[inline(always)]
fn fill_row_impl<S: Isa>(
    kernel: &Kernel,
    query: &[f32],
    keys: &KeysSoa<'_>,
    mode: MatrixMode,
    i: usize,
    row: &mut [f32],
) -> bool {
    let profile = kernel.profile();
    if mode == MatrixMode::SqDistance {
        return true;
    }
    let normalized = matches!(
        mode,
        MatrixMode::RowNormalized | MatrixMode::NormalizedLaplacian
    );
    // Raw weights: a running maximum pinned at ln k(0) = 0 (no log-weight
    // exceeds it), so the exponentials are the plain values. Normalized:
    // the row's own maximum, so a tiny bandwidth cannot underflow the row.
    let mut m = if normalized {
        initial_max(profile)
    } else {
        0.0
    };
    let massless = block_weights::<S>(profile, row, &mut m).is_none();
    let sum: f64 = if massless {
        0.0
    } else {
        row.chunks(KEY_BLOCK).map(|c| f64::from(sum_of(c))).sum()
    };
    if normalized && (sum <= 0.0 || needs_exact(kernel, sum)) {
        // Every key beyond the f32 kernels' reach: a full-support profile
        // still weighs its nearest keys (docs/numerics.md, "Far rows").
        let ld = keys.ld;
        if !kernel.has_full_support()
            || !exact::normalized_row(kernel, query, |j, k| keys.xt[k * ld + j], row)
        {
            row.fill(f32::NAN);
            return false;
        }
        if mode == MatrixMode::NormalizedLaplacian {
            exact::to_normalized_laplacian(row, i);
        }
        return true;
    }
    if massless {
        // No mass at all (every key infinitely far); raw entries are zeros.
        return false;
    }
    match mode {
        MatrixMode::Raw => {}
        MatrixMode::RowNormalized | MatrixMode::NormalizedLaplacian => {
            // sum > 0 here: a row without mass returned above.
            let inv = 1.0 / sum;
            for x in row.iter_mut() {
                *x = (f64::from(*x) * inv) as f32;
            }
            if mode == MatrixMode::NormalizedLaplacian {
                exact::to_normalized_laplacian(row, i);
            }
        }
        MatrixMode::SqDistance => {}
        MatrixMode::Laplacian => {
            let diag = sum - f64::from(row[i]);
            for x in row.iter_mut() {
                *x = -*x;
            }
            row[i] = diag as f32;
        }
    }
    sum > 0.0
}

#[cfg(test)]
mod tests {
    use super::super::keys::{KeyColumns, Pack};
    use super::super::test_data as data;
    use super::*;
    use crate::kernel::Profile;
    use crate::matrix::Matrix;

    /// Rows by inner products (keys with panels) against the `f64`
    /// definition (raw) and the rows by differences (every mode), on
    /// every compiled version; whole groups of rows and a partial one, data
    /// offset by 100.
    #[test]
    fn inner_product_rows_match_the_definition_and_the_direct_rows() {
        // Enough groups of rows for the grouped path, and a partial one.
        let (n, d, m) = (300, 40, ROWS * (rayon::current_num_threads() + 1) + 5);
        let x: Vec<f32> = data(n * d, 1).iter().map(|v| v + 100.0).collect();
        let q: Vec<f32> = x[..m * d]
            .iter()
            .zip(data(m * d, 2))
            .map(|(a, b)| a + 0.1 * b)
            .collect();
        let view = ndarray::ArrayView2::from_shape((n, d), &x[..]).unwrap();
        let keys = Matrix::check("test", "x", view).unwrap();
        let (with, without) = (
            KeyColumns::new(&keys, &[], Pack::PanelsAndRows),
            KeyColumns::new(&keys, &[], Pack::None),
        );
        assert!(with.soa(None).panels.is_some());
        let modes = [
            MatrixMode::Raw,
            MatrixMode::RowNormalized,
            MatrixMode::Laplacian,
            MatrixMode::NormalizedLaplacian,
            MatrixMode::SqDistance,
        ];
        for p in Profile::ALL {
            let k = Kernel::new(p, 0.4 * (d as f32).sqrt()).unwrap();
            for mode in modes {
                // The Laplacian modes need the keys as queries.
                let qs = if matches!(
                    mode,
                    MatrixMode::Laplacian | MatrixMode::NormalizedLaplacian
                ) {
                    &x[..]
                } else {
                    &q[..]
                };
                let rows = qs.len() / d;
                for isa in [None, Avx2Fma::detect()] {
                    let mut got = vec![0.0f32; rows * n];
                    let mut want = vec![0.0f32; rows * n];
                    kernel_matrix(isa, &k, qs, d, &with.soa(None), mode, &mut got).unwrap();
                    kernel_matrix(isa, &k, qs, d, &without.soa(None), mode, &mut want).unwrap();
                    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            (g - w).abs() <= 1e-4 * w.abs() + 1e-5 || (g.is_nan() && w.is_nan()),
                            "{p} {mode:?} avx2 {}: entry {i}: {g} vs {w}",
                            isa.is_some()
                        );
                    }
                    // The scaled squared distance of query r and key j, in f64.
                    let t = |r: usize, j: usize| {
                        (0..d)
                            .map(|c| (f64::from(qs[r * d + c]) - f64::from(x[j * d + c])).powi(2))
                            .sum::<f64>()
                            / f64::from(k.bandwidth()).powi(2)
                    };
                    if mode == MatrixMode::SqDistance {
                        // Relative accuracy entry by entry.
                        for (i, g) in got.iter().enumerate() {
                            let (r, j) = (i / n, i % n);
                            let t = t(r, j);
                            assert!(
                                (f64::from(*g) - t).abs() <= 1e-5 * t,
                                "sq distance ({r}, {j}): {g} vs {t}"
                            );
                        }
                    }
                    if mode == MatrixMode::Raw {
                        for (i, g) in got.iter().enumerate() {
                            let (r, j) = (i / n, i % n);
                            let w = p.eval_sq(t(r, j));
                            assert!(
                                (f64::from(*g) - w).abs() <= 1e-4 * w.abs() + 1e-5,
                                "{p} raw ({r}, {j}): {g} vs {w}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// High-dimensional random data: the squared-distance matrix takes the
    /// inner products (it differs from the differences in the last bits)
    /// and stays within 1e-5 relative of the definition.
    #[test]
    fn high_dimensional_distance_matrices_take_inner_products() {
        let (n, d, m) = (100, 800, ROWS * (rayon::current_num_threads() + 1));
        let x = data(n * d, 5);
        let q = data(m * d, 6);
        let view = ndarray::ArrayView2::from_shape((n, d), &x[..]).unwrap();
        let keys = Matrix::check("test", "x", view).unwrap();
        let with = KeyColumns::new(&keys, &[], Pack::Panels);
        let without = KeyColumns::new(&keys, &[], Pack::None);
        let k = Kernel::new(Profile::Gaussian, 1.0).unwrap();
        let mut got = vec![0.0f32; m * n];
        let mut want = vec![0.0f32; m * n];
        kernel_matrix(
            None,
            &k,
            &q,
            d,
            &with.soa(None),
            MatrixMode::SqDistance,
            &mut got,
        )
        .unwrap();
        kernel_matrix(
            None,
            &k,
            &q,
            d,
            &without.soa(None),
            MatrixMode::SqDistance,
            &mut want,
        )
        .unwrap();
        assert_ne!(got, want, "the inner products were not used");
        for (i, g) in got.iter().enumerate() {
            let (r, j) = (i / n, i % n);
            let t: f64 = (0..d)
                .map(|c| (f64::from(q[r * d + c]) - f64::from(x[j * d + c])).powi(2))
                .sum();
            assert!(
                (f64::from(*g) - t).abs() <= 1e-5 * t,
                "({r}, {j}): {g} vs {t}"
            );
        }
    }
}
