//! Squared distances of a group of queries by inner products
//! (`‖q'‖² + ‖x'‖² − 2q'·x'`, the tile of `panels.rs`) for local means,
//! row states and kernel matrices, with the accuracy test of
//! docs/numerics.md, "Inner products", that sends a row's block back to
//! the direct differences where the expansion would cancel.
//!
//! Imports: `super::{panels, simd}`, `crate::kernel`.

use std::borrow::Cow;

use super::panels::{CentredRows, KC, Panels, ROWS, TileIsa, dot_tile, serve_sq_dists};
use super::simd::{KEY_BLOCK, max_of};
use crate::kernel::{Kernel, Profile};

/// Worst-case error allowed in `t = D/h²` whatever the direct form's own
/// bound: a gaussian log-weight then moves by at most `5·10⁻⁵`.
const EPS_T: f64 = 1e-4;

/// Squared distances of a group of at most [`ROWS`] queries by inner
/// products: the centred queries, the tile, and the constants of the
/// accuracy test that decides, per row and key block, whether they serve
/// or the row's block takes the direct differences (docs/numerics.md,
/// "Inner products").
pub(crate) struct SqDists<'a> {
    panels: &'a Panels,
    rows: Cow<'a, CentredRows>,
    tile: TileIsa,
    dist: [f32; ROWS * KEY_BLOCK],
    /// Bound factor of the inner-product form: `|a − D| ≤ γ·N`.
    gamma: f64,
    /// Bound factor of the direct form: `|e − D| ≤ δ·D`.
    delta: f64,
    /// Squared distance error allowed outright (`EPS_T·h²`).
    eps: f64,
    /// √t profiles (laplacian, triangular): an absolute error `E` in `t`
    /// moves `√t` by up to `E/(2√t)`, so the allowance scales with `√t`.
    sqrt_form: bool,
    inv_h2: f64,
    /// Blocks in a row where every row took the differences; from two on,
    /// the tile is no longer computed for this group.
    refused: u32,
}

impl<'a> SqDists<'a> {
    /// The state for a group of `queries` (row-major, at most [`ROWS`] rows
    /// of `d`; `centred`: the same already centred), or `None` when the
    /// keys have no panels (small `d`, too few queries, or keys too far
    /// apart).
    pub(crate) fn new(
        kernel: &Kernel,
        queries: &[f32],
        d: usize,
        panels: Option<&'a Panels>,
        centred: Option<&'a CentredRows>,
        tile: TileIsa,
    ) -> Option<SqDists<'a>> {
        // A product kernel's distances are by blocks, not inner products.
        let panels = panels.filter(|&p| serve_sq_dists(kernel, Some(p), d))?;
        let u = f64::from(f32::EPSILON) / 2.0;
        let inv_h2 = f64::from(kernel.inv_h2());
        Some(SqDists {
            panels,
            rows: match centred {
                Some(c) => Cow::Borrowed(c),
                None => Cow::Owned(CentredRows::new(panels, queries)),
            },
            tile,
            dist: [0.0; ROWS * KEY_BLOCK],
            gamma: 2.0 * (KC + d.div_ceil(KC) + 11) as f64 * u,
            delta: (d + 2) as f64 * u,
            eps: EPS_T / inv_h2,
            sqrt_form: matches!(kernel.profile(), Profile::Laplacian | Profile::Triangular),
            inv_h2,
            refused: 0,
        })
    }

    /// Holds the distances to the direct form's own relative bound only
    /// (no absolute allowance): for distance matrices, whose entries
    /// promise relative accuracy. A row with a key at distance 0 then
    /// takes the differences.
    pub(crate) fn relative_only(mut self) -> Self {
        self.eps = 0.0;
        self
    }

    /// Squared distances of the group's first `g` rows to the keys
    /// `j0..j0+len`; `use_row[r]` says whether row `r` may take them (see
    /// [`SqDists::row`]).
    pub(crate) fn block(&mut self, j0: usize, len: usize, g: usize) -> [bool; ROWS] {
        if self.refused >= 2 {
            // Ill-conditioned for this group: stop paying for the tile.
            return [false; ROWS];
        }
        dot_tile(
            self.tile,
            &self.rows,
            g,
            self.panels.span(),
            j0,
            len,
            &mut self.dist,
        );
        let nx = self.panels.norms32(j0, len);
        let nx_max = f64::from(max_of(nx));
        let mut use_row = [false; ROWS];
        for (r, ok) in use_row.iter_mut().enumerate().take(g) {
            if self.rows.far(r) {
                continue;
            }
            let nq = self.rows.nq32[r];
            let row = &mut self.dist[r * KEY_BLOCK..r * KEY_BLOCK + len];
            let mut lo = f32::INFINITY;
            for (a, &x) in row.iter_mut().zip(nx) {
                let v = nq + x - 2.0 * *a;
                *a = if v > 0.0 { v } else { 0.0 };
                lo = if *a < lo { *a } else { lo };
            }
            let bound = self.gamma * (self.rows.nq[r] + nx_max);
            // The true nearest distance is at least `lo − bound`.
            let lo = (f64::from(lo) - bound).max(0.0);
            let slack = if self.sqrt_form {
                self.eps * 2.0 * (lo * self.inv_h2).sqrt()
            } else {
                self.eps
            };
            *ok = bound <= slack.max(self.delta * lo);
        }
        if use_row.iter().any(|&u| u) {
            self.refused = 0;
        } else {
            self.refused += 1;
        }
        use_row
    }

    /// Row `r`'s squared distances of the last [`SqDists::block`] (`len`
    /// keys).
    pub(crate) fn row(&self, r: usize, len: usize) -> &[f32] {
        &self.dist[r * KEY_BLOCK..r * KEY_BLOCK + len]
    }
}

#[cfg(test)]
mod tests {
    use super::super::panels::KnnRows;
    use super::*;

    /// Rows take the inner products on ordinary data, and fall back to
    /// the differences where the expansion cancels: a query among tight
    /// keys far from the keys' mean.
    #[test]
    fn the_accuracy_test_takes_and_refuses_what_it_should() {
        let (n, d) = (64, 32);
        let mut x = vec![0.0f32; n * d];
        for (i, v) in x.iter_mut().enumerate() {
            *v = ((i * 7919) % 1000) as f32 / 1000.0;
        }
        let check = |x: &[f32], h: f32, want: bool| {
            let panels = Panels::from_rows(x, d, KnnRows::Copied).unwrap();
            let kernel = Kernel::new(Profile::Gaussian, h).unwrap();
            let mut ip = SqDists::new(
                &kernel,
                &x[..2 * d],
                d,
                Some(&panels),
                None,
                TileIsa::best(),
            )
            .unwrap();
            let used = ip.block(0, n, 2);
            assert_eq!(&used[..2], &[want, want], "h = {h}");
            assert!(!used[2..].iter().any(|&u| u));
        };
        check(&x, 1.0, true);
        // Tight keys (spread 1e-3) in two clusters 1000 apart.
        let far: Vec<f32> = x
            .iter()
            .enumerate()
            .map(|(i, v)| v * 1e-3 + if (i / d) % 2 == 1 { 1000.0 } else { 0.0 })
            .collect();
        check(&far, 1e-2, false);
    }
}
