//! MeanShift post-processing with scikit-learn's semantics: converged seeds
//! ranked by how many points lie within one bandwidth, a seed within one
//! bandwidth of a stronger one dropped, each point labelled by its nearest
//! remaining mode.

use ndarray::ArrayView2;

use super::shard::{cmp_rows, rank_modes};
use crate::backend::Backend;
use crate::engine::Engine;
use crate::error::Result;
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

/// Ranks the final seed positions and removes near duplicates.
///
/// 1. Seeds at exactly the same position are one candidate.
/// 2. Its population is the number of points at distance < `h` from where
///    it was counted: `counted_at` (row-major, one row per seed, as
///    `positions`), or its position when `None`; for seeds at one
///    position, the last seed's. A candidate with none (an empty
///    neighbourhood) is dropped.
/// 3. Candidates are sorted by population, then by coordinates, both
///    descending (scikit-learn sorts `(intensity, centre)` the same way).
/// 4. In that order, each candidate still standing removes every other
///    candidate at distance ≤ `h` (steps 2–4: [`rank_modes`], which a
///    sharded run calls with its shards' populations).
///
/// # Errors
/// [`ClusterError::NoModes`](crate::ClusterError::NoModes) when no candidate has a point within `h`.
pub(crate) fn select_modes(
    engine: &Engine,
    h: f32,
    (positions, counted_at): (&[f32], Option<&[f32]>),
    d: usize,
    points: &Matrix<'_>,
) -> Result<Modes> {
    let seeds = positions.len() / d;
    fn row(v: &[f32], i: usize, d: usize) -> &[f32] {
        &v[i * d..(i + 1) * d]
    }
    let mut order: Vec<usize> = (0..seeds).collect();
    // By position, the last seed of each position first.
    order.sort_unstable_by(|&a, &b| {
        cmp_rows(row(positions, a, d), row(positions, b, d)).then(b.cmp(&a))
    });
    order.dedup_by(|a, b| cmp_rows(row(positions, *a, d), row(positions, *b, d)).is_eq());
    let gather =
        |v: &[f32]| -> Vec<f32> { order.iter().flat_map(|&i| row(v, i, d)).copied().collect() };
    let cand = gather(positions);
    let at = counted_at.map(gather);
    let c = cand.len() / d;
    let view = ArrayView2::from_shape((c, d), &cand).expect("c·d entries"); // ok: built above
    let at_view = match &at {
        Some(at) => ArrayView2::from_shape((c, d), at).expect("c·d entries"), // ok: built above
        None => view,
    };
    // Row sums of the uniform kernel count the points at distance < h.
    let unit = Kernel::new(Profile::Uniform, h)?;
    let cm = Matrix::check("mean_shift", "modes", at_view)?;
    let counts = call::row_states(engine.backend_impl(), &unit, &cm, (points, None), false)?.sum;
    // On the engine's threads (its own pool, or the child's after a fork).
    let (modes, populations) = engine.install(|| rank_modes(view, counts.view(), h, seeds))?;
    Ok(Modes {
        modes: modes.into_iter().collect(),
        populations,
    })
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
        let nearest = crate::ops::knn_scaled(
            backend,
            &block,
            modes,
            (1, &crate::kernel::Metric::Euclidean),
        )?;
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
