//! MeanShift and nearest neighbours over keys split into shards (as the
//! Python package's `locus.distributed` runs them on a Dask cluster): what
//! the driver computes between the shards' answers, in the arithmetic of
//! the single-node run, so the sharded run gives its results. The shards'
//! row states merge with [`RowStates::merge`](crate::RowStates::merge).

use std::borrow::Cow;
use std::cmp::Ordering;

use ndarray::{Array2, ArrayView1, ArrayView2, ArrayViewMut2};

use crate::cpu::simd::{Avx2Fma, Portable, sq_dist_row};
use crate::error::{ClusterError, Error, Result};
use crate::grid::Grid;
use crate::types::shift_to;

/// One MeanShift step: each seed of `positions` (`M × d`) moves to its
/// local mean in `means` (`M × d`, from the merged row states), and the
/// flags say which seeds stop. A NaN row of `means` is an empty
/// neighbourhood: that seed stays where it is, and stops. Any other seed
/// stops when its squared shift, summed coordinate by coordinate in `f32`,
/// is at most `thr_sq = (tol·h)²` or at most what `f32` resolves at its
/// mean (the stop rule of both backends): the CPU backend's step.
///
/// # Errors
/// [`Error::InvalidParameter`] when the shapes differ.
pub fn shift_step(
    mut positions: ArrayViewMut2<'_, f32>,
    means: ArrayView2<'_, f32>,
    thr_sq: f32,
) -> Result<Vec<bool>> {
    same_shape("means", positions.dim(), means.dim())?;
    let mut stop = Vec::with_capacity(means.nrows());
    for (mut p, m) in positions.rows_mut().into_iter().zip(means.rows()) {
        let mean: Cow<'_, [f32]> = m.as_slice().map_or_else(|| m.to_vec().into(), Cow::from);
        match p.as_slice_mut() {
            Some(p) => stop.push(shift_to(p, &mean, thr_sq).1),
            None => {
                let mut row = p.to_vec();
                stop.push(shift_to(&mut row, &mean, thr_sq).1);
                p.iter_mut().zip(&row).for_each(|(a, &b)| *a = b);
            }
        }
    }
    Ok(stop)
}

/// The modes among MeanShift's distinct final seed positions `candidates`
/// (`C × d`), from each one's population `populations` (the points within
/// distance `h`, summed over the shards): the post-processing of the
/// single-node run once the positions are distinct. A candidate with no
/// point is dropped; the rest are ranked by population, then by
/// coordinates, both descending; in that order each one still standing
/// removes every other within distance ≤ `h` (in `f64`). Returns the modes,
/// strongest first, and their populations.
///
/// # Errors
/// [`Error::InvalidParameter`] when `populations` does not have one entry
/// per candidate; [`ClusterError::NoModes`] when no candidate has a point
/// (`seeds`, the number of seeds the candidates came from, is for its
/// message).
pub fn rank_modes(
    candidates: ArrayView2<'_, f32>,
    populations: ArrayView1<'_, f64>,
    h: f32,
    seeds: usize,
) -> Result<(Array2<f32>, Vec<usize>)> {
    let (c, d) = candidates.dim();
    same_shape("populations", (c, 1), (populations.len(), 1))?;
    let mut ranked: Vec<(usize, Vec<f32>)> = populations
        .iter()
        .zip(candidates.rows())
        .map(|(&n, row)| (n.round() as usize, row.to_vec()))
        .filter(|(n, _)| *n > 0)
        .collect();
    if ranked.is_empty() {
        return Err(ClusterError::NoModes {
            seeds,
            bandwidth: h,
        }
        .into());
    }
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| cmp_rows(&b.1, &a.1)));
    let sorted: Vec<f32> = ranked.iter().flat_map(|r| r.1.iter().copied()).collect();
    let keep = suppress(&sorted, d, h);
    let (mut modes, mut counts) = (Vec::new(), Vec::new());
    for ((n, row), kept) in ranked.into_iter().zip(keep) {
        if kept {
            modes.extend(row);
            counts.push(n);
        }
    }
    let modes = Array2::from_shape_vec((counts.len(), d), modes).expect("d a row"); // ok: built so
    Ok((modes, counts))
}

/// The squared distances from each query (`M × d`) to its neighbours,
/// `indices` (`M × k`) into `keys` (`N × d`), as the CPU backend measures
/// them to rank neighbours: one multiply-add per coordinate, in coordinate
/// order, fused where the CPU has FMA. Equal distances are then ordered
/// as the CPU orders them.
///
/// # Errors
/// [`Error::InvalidParameter`] when the shapes differ or an index is out
/// of range.
pub fn neighbour_sq_dists(
    queries: ArrayView2<'_, f32>,
    keys: ArrayView2<'_, f32>,
    indices: ArrayView2<'_, i64>,
) -> Result<Array2<f32>> {
    same_shape("keys", (1, queries.ncols()), (1, keys.ncols()))?;
    same_shape("indices", (queries.nrows(), 1), (indices.nrows(), 1))?;
    let fused = Avx2Fma::detect().is_some();
    let mut out = Array2::zeros(indices.dim());
    for ((q, idx), mut row) in queries
        .rows()
        .into_iter()
        .zip(indices.rows())
        .zip(out.rows_mut())
    {
        let q = q.to_vec();
        for (&j, d2) in idx.iter().zip(row.iter_mut()) {
            let key = usize::try_from(j)
                .ok()
                .filter(|&j| j < keys.nrows())
                .ok_or_else(|| Error::InvalidParameter {
                    name: "indices",
                    reason: format!("index {j} is not one of the {} keys", keys.nrows()),
                })?;
            let key = keys.row(key).to_vec();
            *d2 = if fused {
                sq_dist_row::<Avx2Fma>(&key, &q)
            } else {
                sq_dist_row::<Portable>(&key, &q)
            };
        }
    }
    Ok(out)
}

/// Refuses `got` where `want` was needed.
fn same_shape(name: &'static str, want: (usize, usize), got: (usize, usize)) -> Result<()> {
    if want == got {
        return Ok(());
    }
    Err(Error::InvalidParameter {
        name,
        reason: format!("shape {got:?}, where {want:?} was needed"),
    })
}

/// Lexicographic order of two rows (`total_cmp` per coordinate).
pub(crate) fn cmp_rows(a: &[f32], b: &[f32]) -> Ordering {
    a.iter()
        .zip(b)
        .map(|(x, y)| x.total_cmp(y))
        .find(|o| o.is_ne())
        .unwrap_or(Ordering::Equal)
}

/// Greedy suppression over `sorted` candidates (strongest first): each one
/// still kept removes every other within distance ≤ `h` (in `f64`); a grid
/// keeps it near linear when there are many candidates.
fn suppress(sorted: &[f32], d: usize, h: f32) -> Vec<bool> {
    let c = sorted.len() / d;
    let h = f64::from(h);
    let grid = Grid::new(sorted, d, h, None);
    let reach = h * (1.0 + 1e-4);
    let mut keep = vec![true; c];
    let mut ranges = Vec::new();
    for i in 0..c {
        if !keep[i] {
            continue;
        }
        let ci = &sorted[i * d..(i + 1) * d];
        let lo: Vec<f64> = ci.iter().map(|&v| f64::from(v) - reach).collect();
        let hi: Vec<f64> = ci.iter().map(|&v| f64::from(v) + reach).collect();
        ranges.clear();
        grid.ranges(&lo, &hi, &mut ranges);
        for &(a, b) in &ranges {
            for &j in &grid.order[a..b] {
                let j = j as usize;
                if j == i || !keep[j] {
                    continue;
                }
                let cj = &sorted[j * d..(j + 1) * d];
                let dist2: f64 = ci
                    .iter()
                    .zip(cj)
                    .map(|(&p, &q)| (f64::from(p) - f64::from(q)).powi(2))
                    .sum();
                if dist2 <= h * h {
                    keep[j] = false;
                }
            }
        }
    }
    keep
}

#[cfg(test)]
mod tests {
    use ndarray::{Array1, array};

    use super::*;
    use crate::Engine;

    #[test]
    fn a_step_moves_the_seeds_and_stops_them_by_the_rule() {
        let mut pos = array![[0.0f32, 0.0], [5.0, 5.0], [1.0, 1.0]];
        let means = array![[f32::NAN, f32::NAN], [5.001, 5.0], [3.0, 1.0]];
        let stop = shift_step(pos.view_mut(), means.view(), 0.01).expect("same shapes");
        assert_eq!(stop, [true, true, false]);
        // An empty neighbourhood leaves its seed where it was.
        assert_eq!(pos, array![[0.0f32, 0.0], [5.001, 5.0], [3.0, 1.0]]);
        // Below what f32 resolves at the mean, a seed stops even for thr_sq = 0.
        let mut far = array![[1.0e6f32]];
        let next = array![[1.0e6f32 + 0.0625]];
        assert_eq!(
            shift_step(far.view_mut(), next.view(), 0.0).expect("shapes"),
            [true]
        );
        assert!(
            shift_step(
                pos.view_mut(),
                means.row(0).insert_axis(ndarray::Axis(0)),
                0.01
            )
            .is_err()
        );
    }

    #[test]
    fn modes_are_ranked_then_suppressed() {
        let cand = array![[0.0f32, 0.0], [0.5, 0.0], [5.0, 5.0], [9.0, 9.0]];
        let pops = Array1::from(vec![3.0, 4.0, 0.0, 1.0]);
        let (modes, counts) = rank_modes(cand.view(), pops.view(), 1.0, 7).expect("modes");
        // [5, 5] has no point; [0.5, 0] (4 points) removes [0, 0] (within h).
        assert_eq!(modes, array![[0.5f32, 0.0], [9.0, 9.0]]);
        assert_eq!(counts, [4, 1]);
        // Equal populations: the larger coordinates first.
        let (modes, _) =
            rank_modes(cand.view(), Array1::from_elem(4, 2.0).view(), 0.1, 4).expect("modes");
        assert_eq!(modes.row(0), array![9.0f32, 9.0]);
        let none = rank_modes(cand.view(), Array1::zeros(4).view(), 1.0, 7);
        assert!(matches!(
            none,
            Err(Error::Cluster(ClusterError::NoModes { seeds: 7, .. }))
        ));
    }

    #[test]
    fn neighbour_distances_are_the_ones_knn_ranks_by() {
        let keys = Array2::from_shape_fn((200, 5), |(i, j)| ((i * 31 + j * 7) % 23) as f32 * 0.37);
        let queries = Array2::from_shape_fn((9, 5), |(i, j)| ((i * 5 + j * 13) % 17) as f32 * 0.41);
        let nb = Engine::cpu()
            .knn(queries.view(), keys.view(), 12)
            .expect("knn");
        let d2 = neighbour_sq_dists(queries.view(), keys.view(), nb.indices.view()).expect("d2");
        assert_eq!(d2.mapv(f32::sqrt), nb.distances);
        let bad = Array2::from_elem((9, 1), 200i64);
        assert!(neighbour_sq_dists(queries.view(), keys.view(), bad.view()).is_err());
    }
}
