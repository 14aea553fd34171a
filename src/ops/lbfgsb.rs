//! A bounded quasi-Newton minimizer: projected L-BFGS with box bounds
//! (the variables at a bound whose gradient points outward are held
//! there; the others take the limited-memory BFGS direction), with a
//! backtracking Armijo search along the projected path. The per-feature
//! bandwidth search runs it on `ln h`.

use crate::error::{Error, Result};

/// When [`minimize`] stops.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// Most iterations (accepted steps).
    pub max_iterations: usize,
    /// Stop when a step lowers `f` by at most this fraction of `|f|`.
    pub ftol: f64,
    /// Stop when the projected gradient's largest entry is at most this.
    pub pgtol: f64,
    /// `(s, y)` pairs kept.
    pub memory: usize,
}

/// What [`minimize`] found.
#[derive(Debug, Clone)]
pub(crate) struct Minimized {
    pub x: Vec<f64>,
    pub iterations: usize,
    /// Stopped by `ftol` or `pgtol` (not by the iteration cap or a failed
    /// line search).
    pub converged: bool,
    /// `f` at the start and after each iteration.
    pub trace: Vec<f64>,
}

fn dot(a: &[f64], b: &[f64], free: &[bool]) -> f64 {
    a.iter()
        .zip(b)
        .zip(free)
        .filter(|&(_, &f)| f)
        .map(|((x, y), _)| x * y)
        .sum()
}

fn project(x: &mut [f64], lo: &[f64], hi: &[f64]) {
    for ((v, &l), &h) in x.iter_mut().zip(lo).zip(hi) {
        *v = v.clamp(l, h);
    }
}

/// The largest entry of the projected gradient `P(x − g) − x`.
fn projected_gradient(x: &[f64], g: &[f64], lo: &[f64], hi: &[f64]) -> f64 {
    x.iter()
        .zip(g)
        .zip(lo.iter().zip(hi))
        .map(|((&x, &g), (&l, &h))| ((x - g).clamp(l, h) - x).abs())
        .fold(0.0, f64::max)
}

/// Minimizes `f` over the box `lo ≤ x ≤ hi` from `x0` (projected into
/// it). `f` returns the value and gradient, or `None` where the point is
/// not acceptable (the search then steps back).
///
/// # Errors
/// [`Error::InvalidParameter`] for inconsistent sizes or bounds, or a
/// start where `f` has no value; `f`'s own errors.
pub(crate) fn minimize<F>(
    mut f: F,
    x0: &[f64],
    (lo, hi): (&[f64], &[f64]),
    s: &Settings,
) -> Result<Minimized>
where
    F: FnMut(&[f64]) -> Result<Option<(f64, Vec<f64>)>>,
{
    let n = x0.len();
    let bad = |reason: String| Error::InvalidParameter {
        name: "bounds",
        reason,
    };
    if lo.len() != n
        || hi.len() != n
        || lo
            .iter()
            .zip(hi)
            .any(|(l, h)| l.is_nan() || h.is_nan() || l > h)
    {
        return Err(bad(format!("{n} variables need {n} bounds with lo ≤ hi")));
    }
    let mut x = x0.to_vec();
    project(&mut x, lo, hi);
    let Some((mut fx, mut g)) = f(&x)? else {
        return Err(bad("the objective has no value at the start".into()));
    };
    let mut trace = vec![fx];
    let mut pairs: Vec<(Vec<f64>, Vec<f64>)> = Vec::new();
    let mut converged = false;
    let mut iterations = 0;
    while iterations < s.max_iterations {
        if projected_gradient(&x, &g, lo, hi) <= s.pgtol {
            converged = true;
            break;
        }
        // Variables held at a bound their gradient pushes against.
        let free: Vec<bool> = (0..n)
            .map(|a| !((x[a] <= lo[a] && g[a] > 0.0) || (x[a] >= hi[a] && g[a] < 0.0)))
            .collect();
        let mut d = direction(&g, &pairs, &free);
        let slope = dot(&g, &d, &free);
        if slope.is_nan() || slope >= 0.0 {
            pairs.clear();
            d = direction(&g, &pairs, &free);
        }
        // The first step (no curvature yet) moves at most 1 in any
        // variable.
        let big = d.iter().fold(0.0f64, |a, &v| a.max(v.abs()));
        let mut alpha = if pairs.is_empty() && big > 1.0 {
            1.0 / big
        } else {
            1.0
        };
        let mut accepted = None;
        for _ in 0..40 {
            let mut xn: Vec<f64> = x.iter().zip(&d).map(|(&v, &dv)| v + alpha * dv).collect();
            project(&mut xn, lo, hi);
            if xn == x {
                break;
            }
            if let Some((fnew, gnew)) = f(&xn)? {
                let decrease: f64 = g
                    .iter()
                    .zip(xn.iter().zip(&x))
                    .map(|(g, (a, b))| g * (a - b))
                    .sum();
                if fnew.is_finite() && fnew <= fx + 1e-4 * decrease {
                    accepted = Some((xn, fnew, gnew));
                    break;
                }
            }
            alpha *= 0.5;
        }
        let Some((xn, fnew, gnew)) = accepted else {
            if pairs.is_empty() {
                break;
            }
            // Retry along the gradient before giving up.
            pairs.clear();
            continue;
        };
        iterations += 1;
        let all = vec![true; n];
        let sv: Vec<f64> = xn.iter().zip(&x).map(|(a, b)| a - b).collect();
        let yv: Vec<f64> = gnew.iter().zip(&g).map(|(a, b)| a - b).collect();
        if dot(&sv, &yv, &all) > 1e-12 * dot(&yv, &yv, &all).sqrt() * dot(&sv, &sv, &all).sqrt() {
            pairs.push((sv, yv));
            if pairs.len() > s.memory {
                pairs.remove(0);
            }
        }
        let drop = fx - fnew;
        x = xn;
        g = gnew;
        fx = fnew;
        trace.push(fx);
        if drop <= s.ftol * fx.abs().max(f64::MIN_POSITIVE) {
            converged = true;
            break;
        }
    }
    Ok(Minimized {
        x,
        iterations,
        converged,
        trace,
    })
}

/// The L-BFGS direction `−H g` on the free variables (two-loop
/// recursion over the stored pairs, restricted to them), 0 on the others.
fn direction(g: &[f64], pairs: &[(Vec<f64>, Vec<f64>)], free: &[bool]) -> Vec<f64> {
    let mut q: Vec<f64> = g
        .iter()
        .zip(free)
        .map(|(&v, &f)| if f { v } else { 0.0 })
        .collect();
    let usable: Vec<(&Vec<f64>, &Vec<f64>, f64)> = pairs
        .iter()
        .filter_map(|(s, y)| {
            let sy = dot(s, y, free);
            (sy > 0.0).then_some((s, y, 1.0 / sy))
        })
        .collect();
    let mut alphas = Vec::with_capacity(usable.len());
    for &(s, y, rho) in usable.iter().rev() {
        let a = rho * dot(s, &q, free);
        for ((qv, &yv), &f) in q.iter_mut().zip(y).zip(free) {
            if f {
                *qv -= a * yv;
            }
        }
        alphas.push(a);
    }
    if let Some(&(s, y, _)) = usable.last() {
        let gamma = dot(s, y, free) / dot(y, y, free).max(f64::MIN_POSITIVE);
        q.iter_mut().for_each(|v| *v *= gamma);
    }
    for (&(s, y, rho), a) in usable.iter().zip(alphas.iter().rev()) {
        let b = rho * dot(y, &q, free);
        for ((qv, &sv), &f) in q.iter_mut().zip(s).zip(free) {
            if f {
                *qv += (a - b) * sv;
            }
        }
    }
    q.iter_mut().for_each(|v| *v = -*v);
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(max_iterations: usize) -> Settings {
        Settings {
            max_iterations,
            ftol: 1e-15,
            pgtol: 1e-9,
            memory: 8,
        }
    }

    fn rosenbrock(x: &[f64]) -> Result<Option<(f64, Vec<f64>)>> {
        let (a, b) = (x[0], x[1]);
        let f = (1.0 - a).powi(2) + 100.0 * (b - a * a).powi(2);
        let g = vec![
            -2.0 * (1.0 - a) - 400.0 * a * (b - a * a),
            200.0 * (b - a * a),
        ];
        Ok(Some((f, g)))
    }

    #[test]
    fn finds_rosenbrocks_minimum() {
        let inf = [f64::INFINITY; 2];
        let ninf = [f64::NEG_INFINITY; 2];
        let m = minimize(rosenbrock, &[-1.2, 1.0], (&ninf, &inf), &settings(200)).unwrap();
        assert!(m.converged, "{m:?}");
        assert!(
            (m.x[0] - 1.0).abs() < 1e-5 && (m.x[1] - 1.0).abs() < 1e-5,
            "{m:?}"
        );
        assert!(m.iterations < 100, "{}", m.iterations);
        assert!(m.trace.windows(2).all(|w| w[1] <= w[0]));
    }

    /// With `x ≤ 0.5` the minimum lies on the bound, at `(0.5, 0.25)`.
    #[test]
    fn stops_rosenbrock_at_an_active_bound() {
        let lo = [-2.0, -2.0];
        let hi = [0.5, 2.0];
        let m = minimize(rosenbrock, &[-1.2, 1.0], (&lo, &hi), &settings(200)).unwrap();
        assert!(m.converged, "{m:?}");
        assert_eq!(m.x[0], 0.5);
        assert!((m.x[1] - 0.25).abs() < 1e-6, "{m:?}");
    }

    /// A separable quadratic whose unconstrained minimum lies outside the
    /// box in some coordinates: those end on their bounds, the others at
    /// their minimum; a start outside the box is projected in.
    #[test]
    fn bounded_quadratic_clamps_to_the_box() {
        let c = [3.0, -2.0, 0.25, 10.0];
        let w = [1.0, 5.0, 0.1, 2.0];
        let q = |x: &[f64]| -> Result<Option<(f64, Vec<f64>)>> {
            let f = (0..4).map(|i| w[i] * (x[i] - c[i]).powi(2)).sum();
            let g = (0..4).map(|i| 2.0 * w[i] * (x[i] - c[i])).collect();
            Ok(Some((f, g)))
        };
        let lo = [-1.0, -1.0, -1.0, -1.0];
        let hi = [1.0, 1.0, 1.0, 1.0];
        let m = minimize(q, &[5.0, 0.0, 0.0, 0.0], (&lo, &hi), &settings(50)).unwrap();
        assert!(m.converged);
        let want = [1.0, -1.0, 0.25, 1.0];
        for (got, want) in m.x.iter().zip(want) {
            assert!((got - want).abs() < 1e-8, "{:?}", m.x);
        }
    }

    /// Points without a value are stepped back from; a start without one,
    /// and bounds that do not fit, are errors.
    #[test]
    fn refused_points_and_bad_bounds() {
        // Minimum at 2, but nothing above 1.5 is acceptable.
        let f = |x: &[f64]| -> Result<Option<(f64, Vec<f64>)>> {
            Ok((x[0] <= 1.5).then(|| ((x[0] - 2.0).powi(2), vec![2.0 * (x[0] - 2.0)])))
        };
        let m = minimize(f, &[0.0], (&[-10.0], &[10.0]), &settings(100)).unwrap();
        assert!(m.x[0] <= 1.5 && m.x[0] > 1.4, "{m:?}");
        assert!(minimize(f, &[3.0], (&[-10.0], &[10.0]), &settings(5)).is_err());
        assert!(minimize(f, &[0.0], (&[1.0], &[-1.0]), &settings(5)).is_err());
        assert!(minimize(f, &[0.0], (&[1.0, 2.0], &[3.0]), &settings(5)).is_err());
    }
}
