//! The running top-k list of one query (squared distances ascending, ties
//! in index order) and the direct scan of a key range into it: what the
//! direct kNN path (`knn.rs`) and the blocked one (`knn_blocked.rs`) both
//! keep and merge.
//!
//! Imports: `super::{keys, metric, simd}`, `crate::kernel`.

use super::keys::KeysSoa;
use super::metric::ranks;
use super::simd::{Avx2Fma, Isa, KEY_BLOCK, Portable, scaled_sq_dists};
use crate::kernel::Metric;

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
    pub(super) fn merge(&self, other: &TopK) -> TopK {
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

/// The nearest keys of one query among `k0..k1` under `metric` (the list
/// holds its ranks: squared distances for the Euclidean metric), on the
/// AVX2 + FMA build when `isa` holds the token.
pub(super) fn range(
    isa: Option<Avx2Fma>,
    metric: &Metric,
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
        return unsafe { range_avx2(isa, metric, query, keys, k, k0, k1) };
    }
    let _ = isa;
    range_impl::<Portable>(metric, query, keys, k, k0, k1)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn range_avx2(
    _isa: Avx2Fma,
    metric: &Metric,
    query: &[f32],
    keys: &KeysSoa<'_>,
    k: usize,
    k0: usize,
    k1: usize,
) -> TopK {
    range_impl::<Avx2Fma>(metric, query, keys, k, k0, k1)
}

#[inline(always)]
fn range_impl<S: Isa>(
    metric: &Metric,
    query: &[f32],
    keys: &KeysSoa<'_>,
    k: usize,
    k0: usize,
    k1: usize,
) -> TopK {
    let mut top = TopK::new(k);
    let mut buf = [0.0f32; KEY_BLOCK];
    let mut j0 = k0;
    while j0 < k1 {
        let len = KEY_BLOCK.min(k1 - j0);
        let t = &mut buf[..len];
        match metric {
            Metric::Euclidean => scaled_sq_dists::<S>(keys.xt, keys.ld, j0, query, 1.0, t),
            m => ranks::<S>(m, keys.xt, keys.ld, j0, query, t),
        }
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
