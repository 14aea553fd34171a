//! MeanShift post-processing with scikit-learn's semantics: converged seeds
//! ranked by how many points lie within one bandwidth, a seed within one
//! bandwidth of a stronger one dropped, each point labelled by its nearest
//! remaining mode.

use std::cmp::Ordering;

use ndarray::ArrayView2;

use crate::backend::Backend;
use crate::error::ClusterError;
use crate::error::Result;
use crate::grid::Grid;
use crate::kernel::{Kernel, Profile};
use crate::matrix::Matrix;
use crate::ops::call;

/// The modes that survive, strongest first.
#[derive(Debug, Clone)]
pub(crate) struct Modes {
    /// Row-major, `d` columns.
    pub modes: Vec<f32>,
    /// Points within one bandwidth of each mode.
    pub populations: Vec<usize>,
}

/// Lexicographic order of two rows (`total_cmp` per coordinate).
fn cmp_rows(a: &[f32], b: &[f32]) -> Ordering {
    a.iter()
        .zip(b)
        .map(|(x, y)| x.total_cmp(y))
        .find(|o| o.is_ne())
        .unwrap_or(Ordering::Equal)
}

/// Ranks the final seed positions and removes near duplicates.
///
/// 1. Seeds at exactly the same position are one candidate.
/// 2. Its population is the number of points at distance < `h`; a
///    candidate with none (an empty neighbourhood) is dropped.
/// 3. Candidates are sorted by population, then by coordinates, both
///    descending (scikit-learn sorts `(intensity, centre)` the same way).
/// 4. In that order, each candidate still standing removes every other
///    candidate at distance ≤ `h`.
///
/// # Errors
/// [`ClusterError::NoModes`] when no candidate has a point within `h`.
pub(crate) fn select_modes(
    backend: &dyn Backend,
    h: f32,
    positions: &[f32],
    d: usize,
    points: &Matrix<'_>,
) -> Result<Modes> {
    let seeds = positions.len() / d;
    let mut rows: Vec<&[f32]> = positions.chunks_exact(d).collect();
    rows.sort_unstable_by(|a, b| cmp_rows(a, b));
    rows.dedup_by(|a, b| cmp_rows(a, b).is_eq());
    let cand: Vec<f32> = rows.concat();
    let c = cand.len() / d;
    let view = ArrayView2::from_shape((c, d), &cand).expect("c·d entries"); // ok: built above
    // Row sums of the uniform kernel count the points at distance < h.
    let unit = Kernel::new(Profile::Uniform, h)?;
    let cm = Matrix::check("mean_shift", "modes", view)?;
    let counts = call::row_states(backend, &unit, &cm, (points, None), false)?.sum;
    let mut ranked: Vec<(usize, &[f32])> = counts
        .iter()
        .zip(cand.chunks_exact(d))
        .map(|(&n, row)| (n.round() as usize, row))
        .filter(|(n, _)| *n > 0)
        .collect();
    if ranked.is_empty() {
        return Err(ClusterError::NoModes {
            seeds,
            bandwidth: h,
        }
        .into());
    }
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| cmp_rows(b.1, a.1)));
    let sorted: Vec<f32> = ranked.iter().flat_map(|r| r.1.iter().copied()).collect();
    let keep = suppress(&sorted, d, h);
    let mut modes = Vec::new();
    let mut populations = Vec::new();
    for (i, (n, row)) in ranked.iter().enumerate() {
        if keep[i] {
            modes.extend_from_slice(row);
            populations.push(*n);
        }
    }
    Ok(Modes { modes, populations })
}

/// Greedy suppression over `sorted` candidates (strongest first): each one
/// still kept removes every other within distance ≤ `h` (in `f64`).
/// A grid keeps it near linear when there are many candidates.
fn suppress(sorted: &[f32], d: usize, h: f32) -> Vec<bool> {
    let c = sorted.len() / d;
    let h = f64::from(h);
    let h2 = h * h;
    let grid = Grid::new(sorted, d, h, None);
    let reach = h * (1.0 + 1e-4);
    let mut keep = vec![true; c];
    let mut ranges = Vec::new();
    let (mut lo, mut hi) = (vec![0.0; d], vec![0.0; d]);
    for i in 0..c {
        if !keep[i] {
            continue;
        }
        let ci = &sorted[i * d..(i + 1) * d];
        for k in 0..d {
            lo[k] = f64::from(ci[k]) - reach;
            hi[k] = f64::from(ci[k]) + reach;
        }
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
                if dist2 <= h2 {
                    keep[j] = false;
                }
            }
        }
    }
    keep
}

/// Points labelled per backend call: the neighbour lists of a block are
/// temporary, so labelling costs the labels and one block's lists.
const LABEL_BLOCK: usize = 1 << 16;

/// Labels: the index of the nearest mode, or −1 when `cluster_all` is off
/// and that mode is farther than `h`.
pub(crate) fn label(
    backend: &dyn Backend,
    queries: &Matrix<'_>,
    modes: &Matrix<'_>,
    h: f32,
    cluster_all: bool,
) -> Result<Vec<i64>> {
    let (n, d) = (queries.rows(), queries.cols());
    let mut labels = crate::matrix::reserve::<i64>("mean_shift", "labels", n as u64)?;
    for r0 in (0..n).step_by(LABEL_BLOCK) {
        let r1 = (r0 + LABEL_BLOCK).min(n);
        let rows =
            ArrayView2::from_shape((r1 - r0, d), queries.row_range(r0, r1)).map_err(|e| {
                crate::error::Error::InvalidParameter {
                    name: "points",
                    reason: e.to_string(),
                }
            })?;
        let block = Matrix::check("mean_shift", "points", rows)?;
        let nearest = crate::ops::knn_scaled(backend, &block, modes, 1)?;
        labels.extend(
            nearest
                .indices
                .iter()
                .zip(&nearest.distances)
                .map(|(&i, &dist)| if cluster_all || dist <= h { i } else { -1 }),
        );
    }
    Ok(labels)
}
