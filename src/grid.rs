//! A cell list: points sorted by grid cell, so the points near a box come
//! as a few contiguous index ranges of the sorted order.
//!
//! The grid covers up to three coordinates, the ones with the largest
//! range (a point within distance `h` of a query differs from it by less
//! than `h` in every coordinate, so any subset of coordinates is a valid
//! filter). Cell keys pack the cell coordinates into a `u64`, the last
//! gridded coordinate fastest, so a row of cells along it is one range.

use rayon::prelude::*;

use crate::kernel::Kernel;

/// Bits per cell coordinate in a key (at most 2^20 + 1 cells per axis).
const BITS: u32 = 21;
/// Most cells per axis; a wider range gets wider cells.
const MAX_CELLS: f64 = (1u64 << 20) as f64;
/// Most gridded coordinates.
const MAX_AXES: usize = 3;
/// Grids of up to this many cells (or up to one per point) sort their
/// points by counting; larger ones by a sort of the cell keys.
const COUNTING_MIN_CELLS: usize = 1 << 16;

/// Grid cells per bandwidth: a box of side 2h then spans about 5 cells
/// per axis, 2.5h wide instead of 3h with cells of side h.
const CELLS_PER_H: f64 = 2.0;

/// Slack on a compact kernel's reach, so f32 rounding at the kernel's edge
/// can never drop a key the kernel would count.
const REACH_SLACK: f64 = 1e-4;

/// Per coordinate, how far a key with weight under `kernel` (Euclidean)
/// can lie from the query along it: the bandwidth of a compact profile (a
/// product's compact blocks) plus slack; infinite elsewhere.
pub(crate) fn reach(kernel: &Kernel, d: usize) -> Vec<f64> {
    let of = |compact: bool, h: f32| match compact {
        true => f64::from(h) * (1.0 + REACH_SLACK),
        false => f64::INFINITY,
    };
    match kernel.blocks() {
        None => vec![of(kernel.profile().is_compact(), kernel.bandwidth()); d],
        Some(bs) => bs
            .iter()
            .flat_map(|b| std::iter::repeat_n(of(b.profile.is_compact(), b.bandwidth), b.dims))
            .collect(),
    }
}

/// Most a gridded coordinate's reach may exceed the smallest: a box then
/// spans at most `2·CELLS_PER_H·MAX_REACH_RATIO` cells along it, so the
/// cell combinations a box visits stay bounded however unlike a product
/// kernel's bandwidths are (with cells of the smallest reach, blocks of
/// bandwidths 10⁻³ and 5 made a box of 2·10⁴ cells per axis, 4·10⁸
/// combinations a query group).
const MAX_REACH_RATIO: f64 = 4.0;

/// The cells for `reach`: their side (a fraction of the smallest reach)
/// and the coordinates that may be gridded (those of finite reach within
/// [`MAX_REACH_RATIO`] of the smallest: any subset of coordinates is a
/// valid filter); `None` when no coordinate has a finite reach.
pub(crate) fn cells_for(reach: &[f64]) -> Option<(f64, Vec<bool>)> {
    let least = reach.iter().copied().fold(f64::INFINITY, f64::min);
    let bounded: Vec<bool> = reach
        .iter()
        .map(|&r| r.is_finite() && r <= least * MAX_REACH_RATIO)
        .collect();
    let h = least / (1.0 + REACH_SLACK);
    bounded
        .contains(&true)
        .then_some((h / CELLS_PER_H, bounded))
}

/// The box every key within `reach` (per coordinate) of some row of
/// `rows` (row-major, `d` columns) lies in: `(lo, hi)`.
pub(crate) fn query_box(rows: &[f32], d: usize, reach: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let mut lo = vec![f64::INFINITY; d];
    let mut hi = vec![f64::NEG_INFINITY; d];
    for row in rows.chunks_exact(d) {
        for (k, &v) in row.iter().enumerate() {
            lo[k] = lo[k].min(f64::from(v) - reach[k]);
            hi[k] = hi[k].max(f64::from(v) + reach[k]);
        }
    }
    (lo, hi)
}

/// Points sorted by cell.
#[derive(Debug, Clone)]
pub(crate) struct Grid {
    /// Gridded coordinates, by decreasing range.
    axes: Vec<usize>,
    /// Per gridded coordinate: lowest value (f64), inverse cell side, last cell.
    origin: Vec<f64>,
    inv_side: Vec<f64>,
    last: Vec<i64>,
    /// Point indices in cell order.
    pub order: Vec<u32>,
    /// Cell key of each point in `order`.
    keys: Vec<u64>,
}

impl Grid {
    /// Grids `points` (row-major, `d` columns) with cells of side at least
    /// `side` (> 0), on the coordinates `eligible` allows (all when
    /// `None`). Coordinates whose whole range fits in one cell are left
    /// out; with none left, every point is in the one cell.
    pub(crate) fn new(points: &[f32], d: usize, side: f64, eligible: Option<&[bool]>) -> Grid {
        Grid::build(points.len() / d, d, side, eligible, |i, k| {
            points[i * d + k]
        })
    }

    /// [`new`](Self::new) for `n` points stored column-major: coordinate
    /// `k` of point `i` at `xt[k·ld + i]`.
    pub(crate) fn from_columns(
        xt: &[f32],
        (n, ld, d): (usize, usize, usize),
        side: f64,
        eligible: Option<&[bool]>,
    ) -> Grid {
        Grid::build(n, d, side, eligible, |i, k| xt[k * ld + i])
    }

    /// Bytes a grid of `n` points holds (its sorted order and cell keys),
    /// and the most it holds while it is built.
    pub(crate) fn bytes(n: usize) -> (u64, u64) {
        let n = n as u64;
        (n.saturating_mul(12), n.saturating_mul(16 + 12))
    }

    /// The grid of `n` points in `d` coordinates, coordinate `k` of point
    /// `i` given by `at(i, k)`.
    fn build(
        n: usize,
        d: usize,
        side: f64,
        eligible: Option<&[bool]>,
        at: impl Fn(usize, usize) -> f32 + Sync,
    ) -> Grid {
        let mut lo = vec![f64::INFINITY; d];
        let mut hi = vec![f64::NEG_INFINITY; d];
        for i in 0..n {
            for k in 0..d {
                let v = f64::from(at(i, k));
                lo[k] = lo[k].min(v);
                hi[k] = hi[k].max(v);
            }
        }
        let mut by_range: Vec<usize> = (0..d)
            .filter(|&k| hi[k] - lo[k] >= side && eligible.is_none_or(|e| e[k]))
            .collect();
        by_range.sort_by(|&a, &b| (hi[b] - lo[b]).total_cmp(&(hi[a] - lo[a])).then(a.cmp(&b)));
        by_range.truncate(MAX_AXES);
        let axes = by_range;
        let sides: Vec<f64> = axes
            .iter()
            .map(|&k| side.max((hi[k] - lo[k]) / MAX_CELLS))
            .collect();
        let origin: Vec<f64> = axes.iter().map(|&k| lo[k]).collect();
        let inv_side: Vec<f64> = sides.iter().map(|s| 1.0 / s).collect();
        let last: Vec<i64> = axes
            .iter()
            .zip(&inv_side)
            .map(|(&k, &inv)| ((hi[k] - lo[k]) * inv).floor() as i64)
            .collect();
        let mut grid = Grid {
            axes,
            origin,
            inv_side,
            last,
            order: Vec::new(),
            keys: Vec::new(),
        };
        let cells = grid
            .last
            .iter()
            .try_fold(1u64, |a, &l| a.checked_mul(l as u64 + 1));
        match cells.filter(|&c| c <= n.max(COUNTING_MIN_CELLS) as u64) {
            Some(cells) => grid.count_sort(n, cells as usize, at),
            None => {
                let mut keyed: Vec<(u64, u32)> = (0..n)
                    .into_par_iter()
                    .map(|i| (grid.key_by(|k| at(i, k)), i as u32))
                    .collect();
                keyed.par_sort_unstable();
                (grid.keys, grid.order) = keyed.into_iter().unzip();
            }
        }
        grid
    }

    /// Fills `order` and `keys` by a counting sort over the `cells` cells
    /// (at most a few per point): points by cell, and by index within a
    /// cell, the order a sort of `(key, index)` pairs gives, in two passes
    /// over the points instead of a sort.
    fn count_sort(&mut self, n: usize, cells: usize, at: impl Fn(usize, usize) -> f32 + Sync) {
        // The cell's rank in key order: its coordinates in mixed radix,
        // the last gridded coordinate fastest, as in the key.
        let dense: Vec<u32> = (0..n)
            .into_par_iter()
            .map(|i| {
                self.cell_by(|k| at(i, k))
                    .fold(0u64, |r, (a, c)| r * (self.last[a] as u64 + 1) + c)
                    as u32
            })
            .collect();
        let mut next = vec![0u32; cells + 1];
        for &c in &dense {
            next[c as usize + 1] += 1;
        }
        for c in 1..=cells {
            next[c] += next[c - 1];
        }
        let mut order = vec![0u32; n];
        let mut keys = vec![0u64; n];
        for c in 0..cells {
            let (a, b) = (next[c] as usize, next[c + 1] as usize);
            if a < b {
                keys[a..b].fill(self.key_of_rank(c as u64));
            }
        }
        for (i, &c) in dense.iter().enumerate() {
            let slot = &mut next[c as usize];
            order[*slot as usize] = i as u32;
            *slot += 1;
        }
        self.order = order;
        self.keys = keys;
    }

    /// The key of the cell of rank `rank` in key order (see [`count_sort`](Self::count_sort)).
    fn key_of_rank(&self, mut rank: u64) -> u64 {
        let g = self.axes.len();
        let mut coords = [0u64; MAX_AXES];
        for a in (0..g).rev() {
            let side = self.last[a] as u64 + 1;
            coords[a] = rank % side;
            rank /= side;
        }
        coords[..g].iter().fold(0u64, |key, &c| (key << BITS) | c)
    }

    /// Number of gridded coordinates (0: one cell holds everything).
    pub(crate) fn axes(&self) -> usize {
        self.axes.len()
    }

    /// Cell coordinate of value `v` along gridded axis `a` (unclamped).
    fn coord(&self, a: usize, v: f64) -> i64 {
        let c = ((v - self.origin[a]) * self.inv_side[a]).floor();
        // Far outside the grid: any value beyond the ends behaves the same.
        c.clamp(-2.0, (self.last[a] + 2) as f64) as i64
    }

    /// The key of the cell holding `row` (clamped into the grid).
    pub(crate) fn key_of(&self, row: &[f32]) -> u64 {
        self.key_by(|k| row[k])
    }

    /// The key of the cell holding the point whose coordinate `k` is
    /// `at(k)` (clamped into the grid).
    fn key_by(&self, at: impl Fn(usize) -> f32) -> u64 {
        self.cell_by(at).fold(0u64, |key, (_, c)| (key << BITS) | c)
    }

    /// The cell coordinates `(gridded axis, coordinate)` of the point whose
    /// coordinate `k` is `at(k)`, clamped into the grid.
    fn cell_by<'g>(
        &'g self,
        at: impl Fn(usize) -> f32 + 'g,
    ) -> impl Iterator<Item = (usize, u64)> + 'g {
        self.axes.iter().enumerate().map(move |(a, &k)| {
            let c = self.coord(a, f64::from(at(k))).clamp(0, self.last[a]);
            (a, c as u64)
        })
    }

    /// Appends to `out` the ranges of the sorted order holding every point
    /// whose cell meets the box `lo..=hi` (indexed by point coordinate,
    /// all `d` of them). Adjacent ranges are merged.
    pub(crate) fn ranges(&self, lo: &[f64], hi: &[f64], out: &mut Vec<(usize, usize)>) {
        let g = self.axes.len();
        if g == 0 {
            if !self.order.is_empty() {
                out.push((0, self.order.len()));
            }
            return;
        }
        let mut clo = [0i64; MAX_AXES];
        let mut chi = [0i64; MAX_AXES];
        for (a, &k) in self.axes.iter().enumerate() {
            clo[a] = self.coord(a, lo[k]).max(0);
            chi[a] = self.coord(a, hi[k]).min(self.last[a]);
            if clo[a] > chi[a] {
                return; // the box misses the grid
            }
        }
        // Walk every combination of the leading axes; the last is a range.
        let mut cur = clo;
        loop {
            let mut prefix = 0u64;
            for &c in &cur[..g - 1] {
                prefix = (prefix << BITS) | c as u64;
            }
            let k0 = (prefix << BITS) | clo[g - 1] as u64;
            let k1 = (prefix << BITS) | chi[g - 1] as u64;
            let p0 = self.keys.partition_point(|&k| k < k0);
            let p1 = p0 + self.keys[p0..].partition_point(|&k| k <= k1);
            if p0 < p1 {
                match out.last_mut() {
                    Some(last) if last.1 == p0 => last.1 = p1,
                    _ => out.push((p0, p1)),
                }
            }
            // Next combination of the leading axes (odometer).
            let mut a = g - 1;
            loop {
                if a == 0 {
                    return;
                }
                a -= 1;
                if cur[a] < chi[a] {
                    cur[a] += 1;
                    break;
                }
                cur[a] = clo[a];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, d: usize) -> Vec<f32> {
        (0..n * d)
            .map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 8) as f32 / (1 << 24) as f32 * 10.0)
            .collect()
    }

    /// Coordinates whose reach is far beyond the smallest are not gridded
    /// (a box would span tens of thousands of cells along them), those
    /// within the ratio are; cells are a fraction of the smallest reach.
    #[test]
    fn coordinates_of_much_wider_reach_stay_off_the_grid() {
        let (side, bounded) = cells_for(&[1e-3, 5.0, 5.0, f64::INFINITY]).unwrap();
        assert_eq!(bounded, [true, false, false, false]);
        assert!(side < 1e-3);
        let (_, bounded) = cells_for(&[1.0, 4.0, 4.5, f64::INFINITY]).unwrap();
        assert_eq!(bounded, [true, true, false, false]);
        assert!(cells_for(&[f64::INFINITY; 2]).is_none());
        // Such a product kernel's box covers few cells per gridded axis.
        let pts = data(5000, 3);
        let g = Grid::new(&pts, 3, side, Some(&[true, false, false]));
        let mut out = Vec::new();
        g.ranges(&[4.0, -1.0, -1.0], &[4.002, 11.0, 11.0], &mut out);
        assert!(out.len() <= 16, "{} ranges", out.len());
    }

    /// Every point within the box is inside one of the ranges.
    #[test]
    fn ranges_cover_every_point_in_the_box() {
        for d in [1usize, 2, 3, 5] {
            let pts = data(3000, d);
            let grid = Grid::new(&pts, d, 0.7, None);
            assert_eq!(grid.axes(), d.min(3));
            for q in 0..40 {
                let c: Vec<f64> = (0..d)
                    .map(|k| f64::from(pts[q * 13 * d % pts.len() + k % d]) - 0.3)
                    .collect();
                let lo: Vec<f64> = c.iter().map(|v| v - 1.1).collect();
                let hi: Vec<f64> = c.iter().map(|v| v + 0.9).collect();
                let mut r = Vec::new();
                grid.ranges(&lo, &hi, &mut r);
                let inside: std::collections::HashSet<u32> = r
                    .iter()
                    .flat_map(|&(a, b)| grid.order[a..b].iter().copied())
                    .collect();
                for (i, row) in pts.chunks_exact(d).enumerate() {
                    let inbox = row
                        .iter()
                        .enumerate()
                        .all(|(k, &v)| f64::from(v) >= lo[k] && f64::from(v) <= hi[k]);
                    if inbox {
                        assert!(inside.contains(&(i as u32)), "d={d} point {i} missed");
                    }
                }
                // Ranges are disjoint and sorted.
                for w in r.windows(2) {
                    assert!(w[0].1 < w[1].0);
                }
            }
        }
    }

    /// The counting sort orders the points as a sort of `(key, index)`
    /// pairs does: by cell key, ties by index.
    #[test]
    fn counting_sort_orders_as_the_key_sort() {
        for d in [1usize, 2, 3, 4] {
            // Duplicate points and many points per cell: ties everywhere.
            let mut pts = data(5000, d);
            pts.extend_from_within(..1000 * d);
            let n = pts.len() / d;
            for side in [0.3, 1.0, 4.0, 20.0] {
                let grid = Grid::new(&pts, d, side, None);
                let cells: u64 = grid.last.iter().map(|&l| l as u64 + 1).product();
                assert!(
                    cells <= n.max(COUNTING_MIN_CELLS) as u64,
                    "d={d} side={side}: counting path"
                );
                let mut keyed: Vec<(u64, u32)> = pts
                    .chunks_exact(d)
                    .enumerate()
                    .map(|(i, row)| (grid.key_of(row), i as u32))
                    .collect();
                keyed.sort_unstable();
                let (keys, order): (Vec<u64>, Vec<u32>) = keyed.into_iter().unzip();
                assert_eq!(grid.order, order, "d={d} side={side}");
                assert_eq!(grid.keys, keys, "d={d} side={side}");
            }
        }
    }

    #[test]
    fn constant_data_is_one_cell() {
        let pts = vec![2.5f32; 40];
        let grid = Grid::new(&pts, 2, 1.0, None);
        assert_eq!(grid.axes(), 0);
        let mut r = Vec::new();
        grid.ranges(&[0.0, 0.0], &[1.0, 1.0], &mut r);
        assert_eq!(r, vec![(0, 20)]);
    }
}
