//! Missing-value imputation by local means (paper §9.5): each missing
//! coordinate becomes the kernel-weighted mean of that coordinate over the
//! keys that observe it, with distances over the coordinates both rows
//! observe, optionally iterated on the completed data.

use ndarray::{Array2, ArrayView2};

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::matrix::Matrix;

use super::local_fit::MAX_LOCAL_MAGNITUDE;

/// Most iterations [`Engine::impute`] accepts.
pub const MAX_IMPUTE_ITERATIONS: usize = 100;

/// Result of [`Engine::impute`] and [`Engine::impute_from`].
#[derive(Debug, Clone, PartialEq)]
pub struct Imputed {
    /// The rows with every missing entry filled (observed entries are
    /// returned unchanged).
    pub values: Array2<f32>,
    /// Entries that were missing (and are now filled).
    pub imputed: usize,
    /// Of those, entries no weighted key observed (a compact kernel with
    /// no observing key in reach, a row sharing no observed coordinate
    /// with any key, or weights below `f32` range): filled with the keys'
    /// mean of that coordinate instead.
    pub fallback: usize,
}

impl Engine {
    /// Fills the missing (NaN) entries of `data` (`N × d`) from its other
    /// rows: [`impute_from`](Self::impute_from) with the rows as their own
    /// keys (a row never contributes to its own missing entries, which it
    /// does not observe).
    ///
    /// # Errors
    /// As [`impute_from`](Self::impute_from).
    pub fn impute(
        &self,
        kernel: &Kernel,
        data: ArrayView2<'_, f32>,
        iterations: usize,
    ) -> Result<Imputed> {
        let x = Matrix::with_missing("impute", "data", data)?;
        self.impute_rows(kernel, &x, None, iterations)
    }

    /// Fills the missing (NaN) entries of `queries` (`M × d`) from `keys`
    /// (`N × d`, which may have missing entries too): entry `(i, c)`
    /// becomes `Σ_j K_ij x_jc / Σ_j K_ij` over the keys `j` that observe
    /// coordinate `c`, with `K_ij = k(r_ij/h)` and `r_ij² = (d/n_ij)·Σ_k
    /// (q_ik − x_jk)²` over the `n_ij` coordinates both rows observe
    /// (scikit-learn's `nan_euclidean`; no weight when they share none).
    ///
    /// With `iterations > 1`, each further round measures distances on the
    /// completed rows (the keys completed the same way) and re-imputes,
    /// still averaging only observed entries — the paper's cascade from a
    /// coarse fill to a refined one. An entry no weighted key observes gets
    /// the keys' column mean (counted in [`Imputed::fallback`]).
    ///
    /// # Errors
    /// Empty inputs, infinite entries, `queries`/`keys` dimension mismatch,
    /// [`Error::InvalidParameter`] for `iterations` outside `1..=100`, a key
    /// column with no observed entry, or magnitudes above
    /// [`MAX_LOCAL_MAGNITUDE`].
    pub fn impute_from(
        &self,
        kernel: &Kernel,
        queries: ArrayView2<'_, f32>,
        keys: ArrayView2<'_, f32>,
        iterations: usize,
    ) -> Result<Imputed> {
        const OP: &str = "impute";
        let q = Matrix::with_missing(OP, "queries", queries)?;
        let x = Matrix::with_missing(OP, "keys", keys)?;
        super::check_shapes(OP, &q, &x, None)?;
        self.impute_rows(kernel, &x, Some(&q), iterations)
    }

    /// Imputes `queries` (or, without them, the keys themselves) from
    /// `keys`.
    fn impute_rows(
        &self,
        kernel: &Kernel,
        x: &Matrix<'_>,
        queries: Option<&Matrix<'_>>,
        iterations: usize,
    ) -> Result<Imputed> {
        const OP: &str = "impute";
        if !(1..=MAX_IMPUTE_ITERATIONS).contains(&iterations) {
            return Err(Error::InvalidParameter {
                name: "iterations",
                reason: format!("needs 1 ≤ iterations ≤ {MAX_IMPUTE_ITERATIONS}, got {iterations}"),
            });
        }
        for m in [Some(x), queries].into_iter().flatten() {
            let big = m
                .as_slice()
                .iter()
                .filter(|v| !v.is_nan())
                .fold(0.0f32, |a, v| a.max(v.abs()));
            if big > MAX_LOCAL_MAGNITUDE {
                return Err(Error::InvalidParameter {
                    name: "inputs",
                    reason: format!(
                        "imputation takes entries of magnitude ≤ {MAX_LOCAL_MAGNITUDE:e}, got \
                         {big:e}; rescale the data"
                    ),
                });
            }
        }
        let (n, d) = (x.rows(), x.cols());
        let xs = x.as_slice();
        // Values: the keys with missing entries as 0, then their mask.
        let mut v = Array2::<f32>::zeros((n, 2 * d));
        let mut means = vec![0.0f64; d];
        let mut counts = vec![0usize; d];
        for j in 0..n {
            for c in 0..d {
                let e = xs[j * d + c];
                if !e.is_nan() {
                    v[[j, c]] = e;
                    v[[j, d + c]] = 1.0;
                    means[c] += f64::from(e);
                    counts[c] += 1;
                }
            }
        }
        if let Some(c) = counts.iter().position(|&k| k == 0) {
            return Err(Error::InvalidParameter {
                name: "keys",
                reason: format!(
                    "column {c} has no observed entry in the keys: nothing to impute it from"
                ),
            });
        }
        let means: Vec<f32> = means
            .iter()
            .zip(&counts)
            .map(|(s, &k)| (s / k as f64) as f32)
            .collect();
        let v = Matrix::check(OP, "values", v.view())?;
        let backend = self.backend_impl();

        // Round 1: masked distances.
        let q = queries.unwrap_or(x);
        let mut qc = q.to_array();
        let r = backend.masked_local_mean(kernel, q, x, &v)?;
        let mut fallback = fill(&mut qc, q, &r.values, &means);
        let mut xc = match queries {
            None => None,
            Some(_) if iterations > 1 => {
                let mut xc = x.to_array();
                let r = backend.masked_local_mean(kernel, x, x, &v)?;
                fill(&mut xc, x, &r.values, &means);
                Some(xc)
            }
            Some(_) => None,
        };
        // Further rounds: distances between the completed rows.
        for round in 1..iterations {
            let qm = Matrix::check(OP, "queries", qc.view())?;
            let keys = xc.as_ref().unwrap_or(&qc);
            let km = Matrix::check(OP, "keys", keys.view())?;
            let r = backend.local_mean(kernel, &qm, &km, &v)?;
            let next_keys = match &xc {
                Some(xa) if round + 1 < iterations => {
                    let r = backend.local_mean(kernel, &km, &km, &v)?;
                    let mut next = xa.clone();
                    fill(&mut next, x, &r.values, &means);
                    Some(next)
                }
                _ => None,
            };
            drop((qm, km));
            fallback = fill(&mut qc, q, &r.values, &means);
            if next_keys.is_some() {
                xc = next_keys;
            }
        }
        let imputed = q.as_slice().iter().filter(|v| v.is_nan()).count();
        Ok(Imputed {
            values: qc,
            imputed,
            fallback,
        })
    }
}

/// Writes into `out` the imputed value of every entry missing in `orig`
/// from the local means `r` (`[Σw·x·mask, Σw·mask]` per coordinate, over
/// `Σw`); the column mean where no weight observed it. Returns how many
/// took the column mean.
fn fill(out: &mut Array2<f32>, orig: &Matrix<'_>, r: &Array2<f32>, means: &[f32]) -> usize {
    let d = orig.cols();
    let src = orig.as_slice();
    let mut fallback = 0;
    for i in 0..orig.rows() {
        for c in 0..d {
            if !src[i * d + c].is_nan() {
                continue;
            }
            let (num, den) = (r[[i, c]], r[[i, d + c]]);
            out[[i, c]] = if den > 0.0 && num.is_finite() {
                num / den
            } else {
                fallback += 1;
                means[c]
            };
        }
    }
    fallback
}
