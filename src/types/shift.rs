//! What a backend needs to iterate MeanShift and what it gives back.

use crate::kernel::Kernel;
use crate::matrix::Matrix;

/// One MeanShift iteration as reported to a progress observer (e.g. to
/// draw a progress bar).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// Iterations done so far (1 after the first).
    pub iteration: usize,
    /// Seeds (or, blurring, points) still moving after this iteration.
    pub moving: usize,
    /// The largest shift of this iteration.
    pub max_shift: f32,
}

/// How a backend iterates MeanShift (resolved from valid params).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ShiftRun {
    /// Most iterations.
    pub max_iter: usize,
    /// A seed stops when its squared shift is at most this: `(tol·h)²`
    /// (see [`stop_sq`]).
    pub thr_sq: f32,
    /// The points themselves move; every point is updated each iteration
    /// until all shifts are within tolerance at once.
    pub blurring: bool,
}

/// One MeanShift run as a backend takes it: the seeds (row-major) move to
/// their local means over `points` under `kernel`, as `rule` says, and
/// `progress` hears of every iteration.
pub(crate) struct Shift<'a> {
    /// The kernel.
    pub kernel: &'a Kernel,
    /// The points (`N × d`), checked.
    pub points: &'a Matrix<'a>,
    /// Where the seeds start, row-major `M × d` (blurring: the points).
    pub seeds: Vec<f32>,
    /// How to iterate.
    pub rule: ShiftRun,
    /// Called after every iteration.
    pub progress: &'a mut dyn FnMut(&Progress),
}

/// What a backend's MeanShift iterations leave.
#[derive(Debug, Clone)]
pub(crate) struct ShiftOutcome {
    /// Final seed positions, row-major.
    pub positions: Vec<f32>,
    /// Iterations run.
    pub iterations: usize,
    /// Whether every seed stopped within `max_iter`.
    pub converged: bool,
    /// Without blurring, when `max_iter` stopped the run: the positions
    /// before its last step (where scikit-learn counts a seed's
    /// population); `None` otherwise.
    pub before_last: Option<Vec<f32>>,
}

/// Shifts below `SHIFT_FLOOR · max_k |x_k|` are f32 rounding noise of the
/// local mean at `x`; a seed that small a step from its mean has converged
/// even when `tol·h` is finer than f32 can resolve there. The shaders use
/// the same constant.
pub(crate) const SHIFT_FLOOR: f32 = 1.0 / (1u32 << 21) as f32;

/// The squared shift at or below which a seed at `x` stops.
pub(crate) fn stop_sq(thr_sq: f32, x: &[f32]) -> f32 {
    let big = x.iter().fold(0.0f32, |a, &v| a.max(v.abs())) * SHIFT_FLOOR;
    thr_sq.max(big * big)
}

/// Moves seed `p` to its local mean `mean`: the squared shift, and whether
/// the seed stops (a shift within [`stop_sq`] of `thr_sq`). An empty
/// neighbourhood (a NaN mean) leaves the seed where it is, stopped, with
/// shift 0. Every MeanShift (one node, sharded, variable bandwidth) steps
/// its seeds by this.
pub(crate) fn shift_to(p: &mut [f32], mean: &[f32], thr_sq: f32) -> (f32, bool) {
    if mean.first().is_some_and(|v| v.is_nan()) {
        return (0.0, true);
    }
    let sh2: f32 = p.iter().zip(mean).map(|(&a, &b)| (b - a) * (b - a)).sum();
    p.copy_from_slice(mean);
    (sh2, sh2 <= stop_sq(thr_sq, mean))
}
