//! Brute-force k nearest neighbours on the CPU: blocked squared distances
//! and a per-query sorted top-k list with a rejection threshold. With
//! [`BLOCKED_MIN_M`] queries or more (and keys with panels) the lists come
//! from `knn_blocked.rs` (inner products as a filter, the same exact
//! distances).
//!
//! Imports: `super::{keys, knn_blocked, panels, simd}`, `crate::types`.

use rayon::prelude::*;

use super::keys::KeysSoa;
use super::knn_blocked;
use super::panels::MAX_D;
use super::simd::{Avx2Fma, Avx512, Isa, KEY_BLOCK, Portable, scaled_sq_dists};
use crate::types::Neighbours;

/// The `k` nearest keys of one query: squared distances ascending, ties in
/// index order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TopK {
    pub d2: Vec<f32>,
    pub idx: Vec<u32>,
}

impl TopK {
    pub(super) fn new(k: usize) -> Self {
        TopK {
            d2: vec![f32::INFINITY; k],
            idx: vec![u32::MAX; k],
        }
    }

    /// Inserts key `j` at squared distance `t` if it beats the current
    /// k-th. Keys arrive in increasing index order, so a tie keeps the
    /// earlier key ahead.
    #[inline]
    /// Returns whether it was inserted (the k-th distance then fell).
    pub(super) fn offer(&mut self, t: f32, j: u32) -> bool {
        let k = self.d2.len();
        if t >= self.d2[k - 1] {
            return false;
        }
        let mut pos = k - 1;
        while pos > 0 && self.d2[pos - 1] > t {
            self.d2[pos] = self.d2[pos - 1];
            self.idx[pos] = self.idx[pos - 1];
            pos -= 1;
        }
        self.d2[pos] = t;
        self.idx[pos] = j;
        true
    }

    /// Merges two lists over disjoint key ranges, by (distance, index).
    fn merge(&self, other: &TopK) -> TopK {
        let k = self.d2.len();
        let mut out = TopK::new(k);
        let (mut a, mut b) = (0, 0);
        for o in 0..k {
            let take_a =
                b >= k || (a < k && (self.d2[a], self.idx[a]) <= (other.d2[b], other.idx[b]));
            if take_a {
                out.d2[o] = self.d2[a];
                out.idx[o] = self.idx[a];
                a += 1;
            } else {
                out.d2[o] = other.d2[b];
                out.idx[o] = other.idx[b];
                b += 1;
            }
        }
        out
    }
}

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

/// Whether `m` queries in `d` dimensions take the inner products (the keys
/// then need their panels).
pub(crate) fn blocked(d: usize, m: usize) -> bool {
    // Without AVX-512 the tiles are half as wide, and the earlier AVX2
    // measurement broke even near d = 12–16.
    let min_d = if Avx512::detect().is_some() { 1 } else { 16 };
    (min_d..=MAX_D).contains(&d) && m >= BLOCKED_MIN_M
}

/// The `k` nearest keys of every query (row-major, `d` columns): by inner
/// products when there are enough queries and the keys have panels,
/// directly otherwise; both give the same lists.
pub(crate) fn knn(queries: &[f32], d: usize, keys: &KeysSoa<'_>, k: usize) -> Vec<TopK> {
    let isa = Avx2Fma::detect();
    if blocked(d, queries.len() / d)
        && let Some(lists) = knn_blocked::knn(isa, queries, d, keys, k)
    {
        return lists;
    }
    direct(isa, queries, d, keys, k)
}

/// The `k` nearest keys of every query, one distance loop over `d` per
/// pair; `isa`: the AVX2 + FMA token, or `None` for the portable build.
pub(super) fn direct(
    isa: Option<Avx2Fma>,
    queries: &[f32],
    d: usize,
    keys: &KeysSoa<'_>,
    k: usize,
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
            (0..n.div_ceil(per))
                .into_par_iter()
                .map(|t| range(isa, query, keys, k, t * per, ((t + 1) * per).min(n)))
                .reduce_with(|a, b| a.merge(&b))
                .unwrap_or_else(|| TopK::new(k))
        })
        .collect()
}

/// The nearest keys of one query among `k0..k1`, on the AVX2 + FMA build
/// when `isa` holds the token.
pub(super) fn range(
    isa: Option<Avx2Fma>,
    query: &[f32],
    keys: &KeysSoa<'_>,
    k: usize,
    k0: usize,
    k1: usize,
) -> TopK {
    #[cfg(target_arch = "x86_64")]
    if let Some(isa) = isa {
        // SAFETY: `isa` is an `Avx2Fma` token, made only where run-time
        // detection found AVX2 and FMA.
        return unsafe { range_avx2(isa, query, keys, k, k0, k1) };
    }
    let _ = isa;
    range_impl::<Portable>(query, keys, k, k0, k1)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn range_avx2(
    _isa: Avx2Fma,
    query: &[f32],
    keys: &KeysSoa<'_>,
    k: usize,
    k0: usize,
    k1: usize,
) -> TopK {
    range_impl::<Avx2Fma>(query, keys, k, k0, k1)
}

#[inline(always)]
fn range_impl<S: Isa>(query: &[f32], keys: &KeysSoa<'_>, k: usize, k0: usize, k1: usize) -> TopK {
    let mut top = TopK::new(k);
    let mut buf = [0.0f32; KEY_BLOCK];
    let mut j0 = k0;
    while j0 < k1 {
        let len = KEY_BLOCK.min(k1 - j0);
        let t = &mut buf[..len];
        scaled_sq_dists::<S>(keys.xt, keys.ld, j0, query, 1.0, t);
        let mut thr = top.d2[k - 1];
        for (jj, &tj) in t.iter().enumerate() {
            if tj < thr {
                top.offer(tj, (j0 + jj) as u32);
                thr = top.d2[k - 1];
            }
        }
        j0 += len;
    }
    top
}

/// The lists as [`Neighbours`]: indices and Euclidean distances, `k` per query.
pub(crate) fn neighbours(lists: &[TopK], k: usize) -> Neighbours {
    let m = lists.len();
    let mut indices = ndarray::Array2::<i64>::zeros((m, k));
    let mut distances = ndarray::Array2::<f32>::zeros((m, k));
    for (i, l) in lists.iter().enumerate() {
        for c in 0..k {
            indices[[i, c]] = i64::from(l.idx[c]);
            distances[[i, c]] = l.d2[c].sqrt();
        }
    }
    Neighbours { indices, distances }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_keep_the_lower_index_and_merge_is_ordered() {
        let mut a = TopK::new(3);
        for (t, j) in [(1.0, 0), (0.5, 1), (1.0, 2), (0.5, 3)] {
            a.offer(t, j);
        }
        assert_eq!(a.idx, vec![1, 3, 0]);
        let mut b = TopK::new(3);
        for (t, j) in [(0.5, 7), (0.2, 8)] {
            b.offer(t, j);
        }
        let m = a.merge(&b);
        assert_eq!(m.idx, vec![8, 1, 3]);
        assert_eq!(m.d2, vec![0.2, 0.5, 0.5]);
    }
}
