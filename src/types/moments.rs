//! The layout of a local-moment pass: which kernel-weighted averages it
//! returns for each query (docs/numerics.md, "Local moments"), and the
//! `f64` finishing of the rows it leaves without mass.

use rayon::prelude::*;

use super::RowNormalized;
use crate::kernel::{Kernel, exact};

/// Kernel-weighted averages, per query row `[q | c]` (the query `q` that
/// places the weights and a centre `c` for the offsets, both `d` wide), of
/// products of the key's scaled offset `r = (x − c)/h` and its values `y`:
///
/// ```text
/// columns  [ r_a (d) | r_a·r_b, a ≤ b (d(d+1)/2) | for each value c: y_c, r_0·y_c … r_(d−1)·y_c ]
/// ```
///
/// (without `second`: `[ r_a (d) | y_c (qy) ]`). Each value column's
/// moments sit together, so a pass of a few consecutive columns touches
/// few value columns ([`value_window`](Self::value_window)).
///
/// each as `Σ_j K(q, x_j) f_j / Σ_j K(q, x_j)`. Centring the offsets near
/// the keys' local mean (a first pass gives it) and scaling them by `1/h`
/// keeps every moment of order one: nothing cancels, and tiny or huge
/// coordinate scales neither underflow nor overflow. The second moments
/// (the `r_a·r_b` and `r_a·y_c` columns) are present only with `second`.
/// Every column is a product `F[ia]·F[ib]` of two entries of the key's
/// factor vector `F = [r (d) | y (qy) | 1]`: the backends evaluate
/// [`factors`](Self::factors), so they cannot disagree on the order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct MomentLayout {
    /// Dimension of the keys and queries.
    pub d: usize,
    /// Value columns.
    pub qy: usize,
    /// Whether the second moments are wanted.
    pub second: bool,
}

impl MomentLayout {
    /// Index of the constant factor `1` in `F`.
    pub(crate) fn one(&self) -> usize {
        self.d + self.qy
    }

    /// Number of `r_a·r_b` columns.
    pub(crate) fn pairs(&self) -> usize {
        self.d * (self.d + 1) / 2
    }

    /// Number of columns.
    pub(crate) fn cols(&self) -> usize {
        if self.second {
            self.d + self.pairs() + self.qy * (self.d + 1)
        } else {
            self.d + self.qy
        }
    }

    /// Column of `r_a·r_b` (either order; with `second`).
    pub(crate) fn pair(&self, a: usize, b: usize) -> usize {
        let (a, b) = if a <= b { (a, b) } else { (b, a) };
        // Entries of the upper triangle's rows before row a: Σ_{i<a} (d − i).
        let before = a * self.d - a * a.saturating_sub(1) / 2;
        self.d + before + (b - a)
    }

    /// Column of `y_c`.
    pub(crate) fn value(&self, c: usize) -> usize {
        if self.second {
            self.d + self.pairs() + c * (self.d + 1)
        } else {
            self.d + c
        }
    }

    /// Column of `r_a·y_c` (with `second`).
    pub(crate) fn cross(&self, a: usize, c: usize) -> usize {
        self.value(c) + 1 + a
    }

    /// The widest span of value columns that the columns of any pass of
    /// `width` consecutive columns (from column 0 on) touch: what a GPU
    /// pass stages per key.
    pub(crate) fn value_window(&self, width: usize) -> usize {
        let (d, one) = (self.d, self.one());
        let mut widest = 0;
        for c0 in (0..self.cols()).step_by(width.max(1)) {
            let (mut lo, mut hi) = (usize::MAX, 0);
            for c in c0..(c0 + width.max(1)).min(self.cols()) {
                let (a, b) = self.factors(c);
                for g in [a, b] {
                    if (d..one).contains(&g) {
                        lo = lo.min(g - d);
                        hi = hi.max(g - d + 1);
                    }
                }
            }
            if lo < hi {
                widest = widest.max(hi - lo);
            }
        }
        widest
    }

    /// The two factor indices of column `col`: the column is
    /// `F[ia]·F[ib]`.
    pub(crate) fn factors(&self, col: usize) -> (usize, usize) {
        let d = self.d;
        let one = self.one();
        if col < d {
            return (col, one);
        }
        let mut k = col - d;
        if !self.second {
            return (d + k, one);
        }
        if k < self.pairs() {
            let mut a = 0;
            while k >= d - a {
                k -= d - a;
                a += 1;
            }
            return (a, a + k);
        }
        k -= self.pairs();
        let (c, at) = (k / (d + 1), k % (d + 1));
        if at == 0 {
            (d + c, one)
        } else {
            (at - 1, d + c)
        }
    }
}

impl MomentLayout {
    /// Recomputes from `f64` log-weights the rows of `out` (this layout's
    /// columns) the `f32` pass left without mass — every key beyond the far
    /// cut of a profile with full support (docs/numerics.md, "Far rows"):
    /// their moments are those of the nearest keys. `queries` (`M × 2d`,
    /// rows `[q | c]`) is row-major; `key(j, k)` is coordinate `k` of key
    /// `j` of `n`, `value(j, c)` value `c` (the layout's `qy`), in whatever
    /// layout the backend keeps them. Compact profiles have nothing to
    /// finish.
    pub(crate) fn finish_far_rows(
        &self,
        kernel: &Kernel,
        queries: &[f32],
        (n, key, value): (
            usize,
            impl Fn(usize, usize) -> f32 + Sync,
            impl Fn(usize, usize) -> f32 + Sync,
        ),
        out: &mut RowNormalized,
    ) {
        if out.empty_rows == 0 || !kernel.has_full_support() {
            return;
        }
        let d = self.d;
        let inv_h: Vec<f64> = kernel
            .coordinate_bandwidths(d)
            .iter()
            .map(|h| 1.0 / h)
            .collect();
        let cols: Vec<(usize, usize)> = (0..self.cols()).map(|c| self.factors(c)).collect();
        let data = out.values.as_slice_mut().expect("standard layout"); // ok: results are built row-major
        let finished: usize = data
            .par_chunks_mut(cols.len())
            .enumerate()
            .filter(|(_, row)| row[0].is_nan())
            .map(|(i, row)| {
                let query = &queries[2 * i * d..(2 * i + 1) * d];
                let centre = &queries[(2 * i + 1) * d..(2 * i + 2) * d];
                let factor = |j: usize, k: usize| -> f32 {
                    if k < d {
                        ((f64::from(key(j, k)) - f64::from(centre[k])) * inv_h[k]) as f32
                    } else if k < self.one() {
                        value(j, k - d)
                    } else {
                        1.0
                    }
                };
                let mut u = vec![0.0; cols.len()];
                let (_, s) = exact::row_state(
                    kernel,
                    query,
                    &key,
                    |j, c| factor(j, cols[c].0) * factor(j, cols[c].1),
                    (0, n),
                    None,
                    &mut u,
                );
                if s > 0.0 {
                    for (o, &uc) in row.iter_mut().zip(&u) {
                        *o = (uc / s) as f32;
                    }
                    1
                } else {
                    0
                }
            })
            .sum();
        out.empty_rows -= finished;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factors_and_indices_agree() {
        for (d, qy) in [(1, 0), (1, 1), (3, 0), (3, 2), (5, 4)] {
            let l = MomentLayout {
                d,
                qy,
                second: true,
            };
            let mut seen = vec![false; l.cols()];
            for a in 0..d {
                assert_eq!(l.factors(a), (a, l.one()));
                for b in a..d {
                    let c = l.pair(a, b);
                    assert_eq!(l.pair(b, a), c);
                    assert_eq!(l.factors(c), (a, b), "d={d} pair ({a},{b})");
                    assert!(!seen[c]);
                    seen[c] = true;
                }
                for y in 0..qy {
                    let c = l.cross(a, y);
                    assert_eq!(l.factors(c), (a, d + y));
                    assert!(!seen[c]);
                    seen[c] = true;
                }
            }
            for y in 0..qy {
                let c = l.value(y);
                assert_eq!(l.factors(c), (d + y, l.one()));
                assert!(!seen[c]);
                seen[c] = true;
            }
            assert!(seen[d..].iter().all(|&s| s), "d={d} qy={qy}");
            let first = MomentLayout { second: false, ..l };
            assert_eq!(first.cols(), d + qy);
            for y in 0..qy {
                assert_eq!(first.factors(first.value(y)), (d + y, l.one()));
            }
        }
        // A pass of 8 consecutive columns touches few value columns, for
        // every value count (a pass may straddle two values' groups).
        for d in 1..=4 {
            for qy in 0..300 {
                let l = MomentLayout {
                    d,
                    qy,
                    second: true,
                };
                let w = l.value_window(8);
                assert!(w <= qy.min(8 / (d + 1) + 2), "d={d} qy={qy}: window {w}");
            }
        }
    }
}
