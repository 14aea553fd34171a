//! Kernel matrices `K`, `D⁻¹K`, `D − K` and `I − D⁻¹K` on the CPU, a row
//! per task: scaled squared distances, block weights (`weights.rs`), and
//! the `f64` far-row finish for normalized rows.
//!
//! Imports: `super::{keys, simd, weights}`, `crate::backend` (the mode),
//! `crate::kernel`.

use rayon::prelude::*;

use super::keys::KeysSoa;
use super::simd::{Avx2Fma, Isa, KEY_BLOCK, Portable, scaled_sq_dists, sum_of};
use super::weights::{block_weights, initial_max};
use crate::backend::MatrixMode;
use crate::kernel::Kernel;
use crate::kernel::exact::{self, needs_exact};

/// Fills `out` (row-major, `M × n`) with the requested matrix for the
/// queries (row-major, `d` columns). Returns the number of rows with no
/// kernel mass (NaN rows of `D⁻¹K`; always 0 for the other modes).
///
/// For the Laplacian modes the queries are the keys themselves (`M = n`).
pub(crate) fn kernel_matrix(
    kernel: &Kernel,
    queries: &[f32],
    d: usize,
    keys: &KeysSoa<'_>,
    mode: MatrixMode,
    out: &mut [f32],
) -> usize {
    let n = keys.n;
    let isa = Avx2Fma::detect();
    out.par_chunks_mut(n)
        .zip(queries.par_chunks(d))
        .enumerate()
        .map(|(i, (row, query))| usize::from(!fill_row(isa, kernel, query, keys, mode, i, row)))
        .sum()
}

/// One row, on the AVX2 + FMA build when `isa` holds the token. Returns
/// whether the row has kernel mass.
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
    let n = keys.ld;
    for (b, chunk) in row.chunks_mut(KEY_BLOCK).enumerate() {
        scaled_sq_dists::<S>(keys.xt, n, b * KEY_BLOCK, query, kernel.inv_h2(), chunk);
    }
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
    if normalized && (sum <= 0.0 || needs_exact(profile, sum)) {
        // Every key beyond the f32 kernels' reach: a full-support profile
        // still weighs its nearest keys (docs/numerics.md, "Far rows").
        let ld = keys.ld;
        if profile.is_compact()
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
