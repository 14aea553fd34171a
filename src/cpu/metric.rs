//! Distances under a non-Euclidean [`Metric`] from one query to a block of
//! keys, by differences (the inner-product panels serve the Euclidean
//! metric only): each metric's rank (`kernel/metric.rs`) accumulated over
//! the coordinates in lane groups of [`LANES`] keys, the loops written so
//! LLVM vectorizes them in the portable and the AVX2 + FMA builds
//! (Minkowski's step and haversine's trigonometry call `libm` per
//! pair). kNN ranks keys by it; the local-mean kernel turns it into the
//! scaled squared distance `t = dist²/h²` ([`metric_ts`]).
//!
//! Imports: `super::simd`, `crate::kernel`.

use super::simd::{Isa, LANES, fmax};
use crate::kernel::{Metric, minkowski_step};

/// The ranks (`Σ|Δ|`, `max|Δ|`, Minkowski's distance, haversine's `a`) from `query` to
/// the keys `j0..j0 + out.len()` of transposed keys `xt` (coordinate `k`
/// of key `j` at `xt[k·n + j]`). A lane and a tail key give the same
/// value (same operations, same order). Euclidean gives the squared distance (as `simd::sq_dist` without
/// fused multiply-adds; the Euclidean paths do not come here).
#[inline(always)]
pub(crate) fn ranks<S: Isa>(
    metric: &Metric,
    xt: &[f32],
    n: usize,
    j0: usize,
    query: &[f32],
    out: &mut [f32],
) {
    match *metric {
        Metric::Euclidean => by_coords(xt, n, j0, query, out, |a, df| a + df * df),
        Metric::Manhattan => by_coords(xt, n, j0, query, out, |a, df| a + df.abs()),
        Metric::Chebyshev => by_coords(xt, n, j0, query, out, |a, df| fmax(a, df.abs())),
        Metric::Minkowski { p } => {
            let p = p as f32;
            by_coords(xt, n, j0, query, out, |a, df| {
                minkowski_step(a, df.abs(), p)
            })
        }
        Metric::Haversine => {
            for (jj, o) in out.iter_mut().enumerate() {
                *o = haversine_a(query, xt[j0 + jj], xt[n + j0 + jj]);
            }
        }
    }
}

/// Haversine's `a = sin²(Δφ/2) + cos φ_q cos φ_x sin²(Δλ/2)` for a key at
/// latitude `x0`, longitude `x1` (radians), in `[0, 1]`.
#[inline(always)]
fn haversine_a(query: &[f32], x0: f32, x1: f32) -> f32 {
    let s0 = (0.5 * (x0 - query[0])).sin();
    let s1 = (0.5 * (x1 - query[1])).sin();
    (s0 * s0 + query[0].cos() * x0.cos() * (s1 * s1)).clamp(0.0, 1.0)
}

/// `out[j] = fold over coordinates of step(acc, x_jk − q_k)`, from 0, lane
/// groups of keys at a time (the coordinates in order, so a lane and a
/// tail key agree).
#[inline(always)]
fn by_coords(
    xt: &[f32],
    n: usize,
    j0: usize,
    query: &[f32],
    out: &mut [f32],
    step: impl Fn(f32, f32) -> f32,
) {
    let len = out.len();
    let full = len / LANES * LANES;
    let mut j = 0;
    while j < full {
        let mut acc = [0.0f32; LANES];
        for (k, &qk) in query.iter().enumerate() {
            let x = &xt[k * n + j0 + j..k * n + j0 + j + LANES];
            for l in 0..LANES {
                acc[l] = step(acc[l], x[l] - qk);
            }
        }
        out[j..j + LANES].copy_from_slice(&acc);
        j += LANES;
    }
    for (jj, o) in out.iter_mut().enumerate().skip(full) {
        let mut a = 0.0f32;
        for (k, &qk) in query.iter().enumerate() {
            a = step(a, xt[k * n + j0 + jj] - qk);
        }
        *o = a;
    }
}

/// The distance from a rank, in `f32` (`+∞` stays `+∞`).
#[inline(always)]
pub(crate) fn rank_to_distance(metric: &Metric, rank: f32) -> f32 {
    match *metric {
        Metric::Euclidean => rank.sqrt(),
        Metric::Manhattan | Metric::Chebyshev => rank,
        Metric::Minkowski { .. } => rank,
        Metric::Haversine => 2.0 * rank.sqrt().asin(),
    }
}

/// Scaled squared distances `t_j = dist(q, x_j)²/h²` (`inv_h2 = 1/h²`)
/// from one query to the keys `j0..j0 + t.len()` under `metric`.
#[inline(always)]
pub(crate) fn metric_ts<S: Isa>(
    metric: &Metric,
    inv_h2: f32,
    xt: &[f32],
    n: usize,
    j0: usize,
    query: &[f32],
    t: &mut [f32],
) {
    ranks::<S>(metric, xt, n, j0, query, t);
    match *metric {
        Metric::Euclidean => t.iter_mut().for_each(|x| *x *= inv_h2),
        Metric::Manhattan | Metric::Chebyshev | Metric::Minkowski { .. } => {
            t.iter_mut().for_each(|x| *x = *x * *x * inv_h2)
        }
        Metric::Haversine => t.iter_mut().for_each(|x| {
            let ang = 2.0 * x.sqrt().asin();
            *x = ang * ang * inv_h2;
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::simd::Portable;

    #[test]
    fn lanes_and_tails_agree_with_the_f64_definition() {
        let (n, d) = (19, 3);
        let rows: Vec<[f32; 3]> = (0..n)
            .map(|j| {
                let f = j as f32;
                [(f * 0.37).sin(), (f * 0.11).cos() * 2.0, f * 0.05 - 0.4]
            })
            .collect();
        let mut xt = vec![0.0f32; d * n];
        for (j, r) in rows.iter().enumerate() {
            for k in 0..d {
                xt[k * n + j] = r[k];
            }
        }
        let q = [0.1f32, -0.3, 0.2];
        for metric in [
            Metric::Manhattan,
            Metric::Chebyshev,
            Metric::minkowski(3.5).unwrap(),
        ] {
            let mut t = vec![0.0f32; n];
            metric_ts::<Portable>(&metric, 4.0, &xt, n, 0, &q, &mut t);
            for (j, r) in rows.iter().enumerate() {
                let want = (metric.distance(&q, r) * 2.0).powi(2);
                assert!(
                    (f64::from(t[j]) - want).abs() <= 1e-5 * want.max(1.0),
                    "{metric} key {j}: {} vs {want}",
                    t[j]
                );
            }
        }
        // Haversine on the first two coordinates as (lat, lon).
        let mut xt2 = vec![0.0f32; 2 * n];
        xt2[..2 * n].copy_from_slice(&xt[..2 * n]);
        let mut t = vec![0.0f32; n];
        metric_ts::<Portable>(&Metric::Haversine, 1.0, &xt2, n, 0, &q[..2], &mut t);
        for (j, r) in rows.iter().enumerate() {
            let want = Metric::Haversine.distance(&q[..2], &r[..2]).powi(2);
            assert!(
                (f64::from(t[j]) - want).abs() <= 1e-5 * want.max(1e-3),
                "key {j}"
            );
        }
    }
}
