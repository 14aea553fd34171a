//! Brute-force k nearest neighbours on the CPU: blocked squared distances
//! and a per-query sorted top-k list with a rejection threshold. With
//! [`BLOCKED_MIN_M`] queries or more, [`BLOCKED_MIN_ND`] key coordinates or
//! more (and keys with panels) the lists come
//! from `knn_blocked.rs` (inner products as a filter, the same exact
//! distances).
//!
//! Imports: `super::{keys, knn_blocked, metric, panels, simd, topk}`, `crate::cancel`,
//! `crate::error`, `crate::kernel`, `crate::matrix`, `crate::types`.

use rayon::prelude::*;

use super::keys::KeysSoa;
use super::knn_blocked;
use super::metric::rank_to_distance;
use super::panels::MAX_D;
use super::simd::{Avx2Fma, Avx512, KEY_BLOCK};
use super::topk::{TopK, range};
use crate::cancel::Checkpoint;
use crate::error::Result;
use crate::kernel::Metric;
use crate::matrix::try_array;
use crate::types::Neighbours;

/// Coordinates from which a key set keeps panels for kNN (one-shot calls
/// build them at any `d` on AVX-512, from d = 16 otherwise: with the
/// AVX-512 tiles the inner products win from d = 2, measured with 2 threads, 1024 queries × 65536 keys,
/// k = 16: 1.6× at d = 2, 1.7× at 8, 1.9× at 16, 2.2× at 20). Below it a
/// key set's panels would more than double its memory for kNN alone.
pub(crate) const KEY_SET_MIN_D: usize = 24;

/// Queries from which kNN runs by inner products: the blocked path centres
/// the keys first, a pass over them that 16 or fewer queries do not repay
/// (measured: slower at 8 and at 16 queries with d = 784, twice as fast at 32).
const BLOCKED_MIN_M: usize = 32;

/// Key coordinates (`n·d`) from which kNN runs by inner products: below,
/// a query's few direct distances cost less than the blocked path's
/// tiles, filter and re-measure. Measured with k = 1 on one thread (AMD
/// EPYC Zen 5, AVX-512), direct against blocked: d = 2, 10⁶ queries:
/// n = 16 0.19 s against 0.31 s, 64 0.24 against 0.37, 256 0.37 against
/// 0.49, 1024 0.87 against 0.85; d = 32, 2·10⁵ queries: n = 64 0.08
/// against 0.12, n = 256 0.23 against 0.17.
const BLOCKED_MIN_ND: usize = 4096;

/// Whether `m` queries against `n` keys in `d` dimensions take the inner
/// products (the keys then need their panels).
pub(crate) fn blocked(d: usize, m: usize, n: usize) -> bool {
    // Without AVX-512 the tiles are half as wide, and the earlier AVX2
    // measurement broke even near d = 12–16.
    let min_d = if Avx512::detect().is_some() { 1 } else { 16 };
    (min_d..=MAX_D).contains(&d) && m >= BLOCKED_MIN_M && n.saturating_mul(d) >= BLOCKED_MIN_ND
}

/// The `k` nearest keys of every query (row-major, `d` columns): by inner
/// products when there are enough queries and the keys have panels,
/// directly otherwise; both give the same lists.
///
/// Tasks that find `cp` cancelled skip their work and the call fails with
/// [`crate::Error::Cancelled`].
pub(crate) fn knn(
    queries: &[f32],
    d: usize,
    keys: &KeysSoa<'_>,
    (k, metric): (usize, &Metric),
    cp: &Checkpoint,
) -> Result<Vec<TopK>> {
    let isa = Avx2Fma::detect();
    // The inner products measure Euclidean distances only.
    if !metric.is_euclidean() {
        let lists = direct(isa, metric, queries, d, keys, k, cp);
        cp.check()?;
        return Ok(lists);
    }
    let lists = match blocked(d, queries.len() / d, keys.n)
        .then(|| knn_blocked::knn(isa, queries, d, keys, k, cp))
        .flatten()
    {
        Some(lists) => lists,
        None => direct(isa, metric, queries, d, keys, k, cp),
    };
    cp.check()?;
    Ok(lists)
}

/// The `k` nearest keys of every query under `metric`, one distance loop
/// over `d` per pair; `isa`: the AVX2 + FMA token, or `None` for the
/// portable build.
pub(super) fn direct(
    isa: Option<Avx2Fma>,
    metric: &Metric,
    queries: &[f32],
    d: usize,
    keys: &KeysSoa<'_>,
    k: usize,
    cp: &Checkpoint,
) -> Vec<TopK> {
    let n = keys.n;
    let m = queries.len() / d;
    let want = 4 * rayon::current_num_threads();
    let splits = if m >= want {
        1
    } else {
        want.div_ceil(m).min(n / (4 * KEY_BLOCK)).max(1)
    };
    let per = n.div_ceil(splits).next_multiple_of(KEY_BLOCK);
    queries
        .par_chunks(d)
        .map(|query| {
            if splits == 1 {
                // One range: no nested fan-out per query.
                return match cp.is_cancelled() {
                    true => TopK::new(k),
                    false => range(isa, metric, query, keys, k, 0, n),
                };
            }
            (0..n.div_ceil(per))
                .into_par_iter()
                .map(|t| match cp.is_cancelled() {
                    true => TopK::new(k),
                    false => range(isa, metric, query, keys, k, t * per, ((t + 1) * per).min(n)),
                })
                .reduce_with(|a, b| a.merge(&b))
                .unwrap_or_else(|| TopK::new(k))
        })
        .collect()
}

/// The lists as [`Neighbours`]: indices and distances under `metric`
/// (from the lists' ranks), `k` per query (or
/// [`Error::TooLarge`](crate::Error::TooLarge)).
pub(crate) fn neighbours(lists: &[TopK], k: usize, metric: &Metric) -> Result<Neighbours> {
    let m = lists.len();
    let mut indices = try_array("knn", "indices", (m, k), 0i64)?;
    let mut distances = try_array("knn", "distances", (m, k), 0.0f32)?;
    for (i, l) in lists.iter().enumerate() {
        for c in 0..k {
            indices[[i, c]] = i64::from(l.idx()[c]);
            distances[[i, c]] = rank_to_distance(metric, l.d2()[c]);
        }
    }
    Ok(Neighbours { indices, distances })
}
