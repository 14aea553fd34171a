//! Missing-value imputation by local means (paper §9.5): each missing
//! coordinate becomes the kernel-weighted mean of that coordinate over the
//! keys that observe it, with distances over the coordinates both rows
//! observe, optionally iterated on the completed data.

use ndarray::{Array2, ArrayView2};
use rayon::prelude::*;

use crate::cpu::Threads;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::matrix::{Matrix, try_array};

use super::call;
use super::local_fit::check_magnitude;

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
    /// [`MAX_LOCAL_MAGNITUDE`](crate::MAX_LOCAL_MAGNITUDE).
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
        kernel.check_dim(OP, x.cols())?;
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
        kernel.check_dim(OP, x.cols())?;
        if !(1..=MAX_IMPUTE_ITERATIONS).contains(&iterations) {
            return Err(Error::InvalidParameter {
                name: "iterations",
                reason: format!("needs 1 ≤ iterations ≤ {MAX_IMPUTE_ITERATIONS}, got {iterations}"),
            });
        }
        // max_abs passes over NaN (f32::max keeps the number).
        let big = x.max_abs().max(queries.map_or(0.0, Matrix::max_abs));
        check_magnitude("imputation takes entries", big)?;
        let (n, d) = (x.rows(), x.cols());
        let xs = x.as_slice();
        // Values: the keys with missing entries as 0, then their mask.
        let mut v = try_array(OP, "values and mask", (n, 2 * d), 0.0f32)?;
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
        let (backend, threads) = (self.backend_impl(), self.threads_impl());

        // Round 1: masked distances.
        let q = queries.unwrap_or(x);
        let mut qc = q.to_array(OP, "imputed rows")?;
        let r = backend.masked_local_mean(kernel, q, x, &v)?;
        let mut fallback = fill(
            threads,
            &mut qc,
            q,
            &r.values,
            &means,
            &Round::new(kernel, xs, d, q.as_slice(), xs),
        );
        // Separate keys are completed the same way when later rounds need
        // them; self-imputation's keys are the completed rows themselves.
        let mut xc = match queries {
            Some(_) if iterations > 1 => {
                let mut xc = x.to_array(OP, "completed keys")?;
                let r = backend.masked_local_mean(kernel, x, x, &v)?;
                fill(
                    threads,
                    &mut xc,
                    x,
                    &r.values,
                    &means,
                    &Round::new(kernel, xs, d, xs, xs),
                );
                Some(xc)
            }
            _ => None,
        };
        // Further rounds: distances between the completed rows.
        for round_no in 1..iterations {
            // Snapshots of the completed rows (`fill` rewrites them); the
            // rows are their own keys in self-imputation.
            let qm = Matrix::check(OP, "queries", qc.view())?.into_owned(OP, "completed rows")?;
            let keys_now = match &xc {
                Some(xa) => {
                    Some(Matrix::check(OP, "keys", xa.view())?.into_owned(OP, "completed keys")?)
                }
                None => None,
            };
            let km = keys_now.as_ref().unwrap_or(&qm);
            let r = call::local_mean(backend, kernel, &qm, (km, &v))?;
            let ctx = Round::new(kernel, xs, d, qm.as_slice(), km.as_slice());
            if let Some(xa) = xc.as_mut()
                && round_no + 1 < iterations
            {
                let rk = call::local_mean(backend, kernel, km, (km, &v))?;
                fill(
                    threads,
                    xa,
                    x,
                    &rk.values,
                    &means,
                    &Round::new(kernel, xs, d, km.as_slice(), km.as_slice()),
                );
            }
            fallback = fill(threads, &mut qc, q, &r.values, &means, &ctx);
        }
        let imputed = q.as_slice().iter().filter(|v| v.is_nan()).count();
        Ok(Imputed {
            values: qc,
            imputed,
            fallback,
        })
    }
}

/// Below this share of a row's weight, the observers of a coordinate are
/// averaged again in `f64` ([`observers_mean`]): their `f32` weights relative
/// to the row's nearest key may have lost digits or vanished.
const EXACT_BELOW: f32 = 1e-30;

/// What one round measured distances between.
struct Round<'a> {
    kernel: &'a Kernel,
    /// The rows being imputed, as this round saw them (NaN: missing).
    rows: &'a [f32],
    /// The keys, as this round saw them (NaN: missing).
    keys: &'a [f32],
    /// The keys as given: which entries are observed, and their values.
    observed: &'a [f32],
    d: usize,
}

impl<'a> Round<'a> {
    fn new(
        kernel: &'a Kernel,
        observed: &'a [f32],
        d: usize,
        rows: &'a [f32],
        keys: &'a [f32],
    ) -> Self {
        Round {
            kernel,
            rows,
            keys,
            observed,
            d,
        }
    }
}

/// Writes into `out` the imputed value of every entry missing in `orig`
/// from the local means `r` (`[Σw·x·mask, Σw·mask]` per coordinate, over
/// `Σw`), recomputing in `f64` where the observers' share is tiny, and the
/// column mean where no weighted key observes the coordinate. Returns how
/// many took the column mean.
fn fill(
    threads: &Threads,
    out: &mut Array2<f32>,
    orig: &Matrix<'_>,
    r: &Array2<f32>,
    means: &[f32],
    round: &Round<'_>,
) -> usize {
    let d = orig.cols();
    let src = orig.as_slice();
    // Per row, its missing entries' values (None: the column mean); the
    // f64 log-weights of a row are formed at most once.
    let rows: Vec<Vec<(usize, Option<f32>)>> = threads.install(|| {
        (0..orig.rows())
            .into_par_iter()
            .map(|i| {
                let mut exact: Option<Vec<f64>> = None;
                (0..d)
                    .filter(|&c| src[i * d + c].is_nan())
                    .map(|c| {
                        let (num, den) = (r[[i, c]], r[[i, d + c]]);
                        if den > EXACT_BELOW && num.is_finite() {
                            return (c, Some(num / den));
                        }
                        let lw = exact.get_or_insert_with(|| row_log_weights(round, i));
                        (c, observers_mean(round, lw, c).map(|v| v as f32))
                    })
                    .collect()
            })
            .collect()
    });
    let mut fallback = 0;
    for (i, entries) in rows.into_iter().enumerate() {
        for (c, v) in entries {
            out[[i, c]] = v.unwrap_or_else(|| {
                fallback += 1;
                means[c]
            });
        }
    }
    fallback
}

/// `f64` log-weights of row `i` against every key (−inf: no weight, or no
/// shared observed coordinate — in some block, for a product kernel), from
/// the masked distances, rescaled within each block as `nan_euclidean`.
fn row_log_weights(round: &Round<'_>, i: usize) -> Vec<f64> {
    let d = round.d;
    let kernel = round.kernel;
    // (coordinates, profile, h) of each block; one block for a radial kernel.
    let blocks: Vec<(std::ops::Range<usize>, crate::kernel::Profile, f64)> = match kernel.blocks() {
        None => vec![(0..d, kernel.profile(), f64::from(kernel.bandwidth()))],
        Some(bs) => {
            let mut k0 = 0;
            bs.iter()
                .map(|b| {
                    k0 += b.dims;
                    (k0 - b.dims..k0, b.profile, f64::from(b.bandwidth))
                })
                .collect()
        }
    };
    let q = &round.rows[i * d..(i + 1) * d];
    round
        .keys
        .chunks_exact(d)
        .map(|key| {
            let mut lw = 0.0;
            for (range, profile, h) in &blocks {
                let (mut s, mut n) = (0.0f64, 0usize);
                for k in range.clone() {
                    let df = f64::from(q[k]) - f64::from(key[k]);
                    if !df.is_nan() {
                        s += df * df;
                        n += 1;
                    }
                }
                if n == 0 {
                    return f64::NEG_INFINITY;
                }
                let t = s * range.len() as f64 / n as f64 / (h * h);
                lw += profile
                    .log_eval_sq(t)
                    .unwrap_or_else(|| profile.eval_sq(t).ln());
            }
            lw
        })
        .collect()
}

/// The weighted mean of coordinate `c` over the keys observing it, from a
/// row's log-weights `lw` (log-sum-exp, so no observer's weight
/// underflows); `None` when none has weight.
fn observers_mean(round: &Round<'_>, lw: &[f64], c: usize) -> Option<f64> {
    let d = round.d;
    let observed = |j: usize| {
        let y = round.observed[j * d + c];
        (!y.is_nan() && lw[j] > f64::NEG_INFINITY).then_some((lw[j], f64::from(y)))
    };
    let m = (0..lw.len())
        .filter_map(observed)
        .map(|p| p.0)
        .fold(f64::NEG_INFINITY, f64::max);
    if m == f64::NEG_INFINITY {
        return None;
    }
    let (num, den) = (0..lw.len())
        .filter_map(observed)
        .fold((0.0, 0.0), |(a, b), (l, y)| {
            let w = (l - m).exp();
            (a + w * y, b + w)
        });
    Some(num / den)
}
