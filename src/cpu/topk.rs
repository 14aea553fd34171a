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

/// Lists this long or shorter live inline (no allocation: labelling by
/// the nearest of a few modes makes one list per point).
const INLINE: usize = 4;

/// The entries of a list: inline up to [`INLINE`], else on the heap.
#[derive(Debug, Clone)]
enum Entries {
    Inline([f32; INLINE], [u32; INLINE]),
    Heap(Vec<f32>, Vec<u32>),
}

/// The `k` nearest keys of one query: squared distances ascending, ties in
/// index order.
#[derive(Debug, Clone)]
pub(crate) struct TopK {
    k: usize,
    entries: Entries,
}

impl PartialEq for TopK {
    fn eq(&self, other: &Self) -> bool {
        self.d2() == other.d2() && self.idx() == other.idx()
    }
}

impl TopK {
    pub(super) fn new(k: usize) -> Self {
        let entries = if k <= INLINE {
            Entries::Inline([f32::INFINITY; INLINE], [u32::MAX; INLINE])
        } else {
            Entries::Heap(vec![f32::INFINITY; k], vec![u32::MAX; k])
        };
        TopK { k, entries }
    }

    /// The squared distances (ranks), ascending.
    #[inline]
    pub(crate) fn d2(&self) -> &[f32] {
        match &self.entries {
            Entries::Inline(d2, _) => &d2[..self.k],
            Entries::Heap(d2, _) => d2,
        }
    }

    /// The keys' indices, in the order of [`d2`](Self::d2).
    #[inline]
    pub(crate) fn idx(&self) -> &[u32] {
        match &self.entries {
            Entries::Inline(_, idx) => &idx[..self.k],
            Entries::Heap(_, idx) => idx,
        }
    }

    /// The k-th squared distance (+∞ until `k` keys were offered).
    #[inline]
    pub(crate) fn last(&self) -> f32 {
        self.d2()[self.k - 1]
    }

    #[inline]
    fn parts_mut(&mut self) -> (&mut [f32], &mut [u32]) {
        let k = self.k;
        match &mut self.entries {
            Entries::Inline(d2, idx) => (&mut d2[..k], &mut idx[..k]),
            Entries::Heap(d2, idx) => (d2, idx),
        }
    }

    /// Inserts key `j` at squared distance `t` if it beats the current
    /// k-th. Keys arrive in increasing index order, so a tie keeps the
    /// earlier key ahead.
    #[inline]
    /// Returns whether it was inserted (the k-th distance then fell).
    pub(super) fn offer(&mut self, t: f32, j: u32) -> bool {
        let k = self.k;
        let (d2, idx) = self.parts_mut();
        if t >= d2[k - 1] {
            return false;
        }
        let mut pos = k - 1;
        while pos > 0 && d2[pos - 1] > t {
            d2[pos] = d2[pos - 1];
            idx[pos] = idx[pos - 1];
            pos -= 1;
        }
        d2[pos] = t;
        idx[pos] = j;
        true
    }

    /// Merges two lists over disjoint key ranges, by (distance, index).
    pub(super) fn merge(&self, other: &TopK) -> TopK {
        let k = self.k;
        let mut out = TopK::new(k);
        let (sd, si, od, oi) = (self.d2(), self.idx(), other.d2(), other.idx());
        let (d2, idx) = out.parts_mut();
        let (mut a, mut b) = (0, 0);
        for o in 0..k {
            let take_a = b >= k || (a < k && (sd[a], si[a]) <= (od[b], oi[b]));
            if take_a {
                d2[o] = sd[a];
                idx[o] = si[a];
                a += 1;
            } else {
                d2[o] = od[b];
                idx[o] = oi[b];
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
        let mut thr = top.last();
        for (jj, &tj) in t.iter().enumerate() {
            if tj < thr {
                top.offer(tj, (j0 + jj) as u32);
                thr = top.last();
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
        assert_eq!(a.idx(), [1, 3, 0]);
        let mut b = TopK::new(3);
        for (t, j) in [(0.5, 7), (0.2, 8)] {
            b.offer(t, j);
        }
        let m = a.merge(&b);
        assert_eq!(m.idx(), [8, 1, 3]);
        assert_eq!(m.d2(), [0.2, 0.5, 0.5]);
        // Longer lists (on the heap) behave the same.
        let mut c = TopK::new(6);
        for (t, j) in [(1.0, 0), (0.5, 1), (1.0, 2), (0.5, 3)] {
            c.offer(t, j);
        }
        assert_eq!(&c.idx()[..4], [1, 3, 0, 2]);
        assert_eq!(c.last(), f32::INFINITY);
        let m = c.merge(&TopK::new(6));
        assert_eq!(m, c);
    }
}
