//! `--verify` and `bench`: how far two backends' results are apart, and
//! whether that is within an op's tolerance.

use std::fmt;

use ndarray::{ArrayView, Dimension, Zip};
use serde_json::{Value, json};

/// An op's tolerance: `|a − b| ≤ rtol·max(|a|, |b|) + atol` entrywise
/// (docs/numerics.md, "Tolerances": 1e-4 relative, a small absolute slack near zero).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    /// Relative part.
    pub rtol: f64,
    /// Absolute part.
    pub atol: f64,
}

impl Tolerance {
    /// Local means: 1e-4 relative + 1e-5 absolute, the absolute part scaled
    /// by the largest value magnitude (an average of values ±s may cancel
    /// to near zero with an error proportional to s).
    pub fn local_mean(value_scale: f32) -> Tolerance {
        Tolerance {
            rtol: 1e-4,
            atol: 1e-5 * f64::from(value_scale).max(1.0),
        }
    }

    /// Kernel-matrix entries (all in [0, 1], or in [−1, 1] for `I − D⁻¹K`).
    pub const MATRIX: Tolerance = Tolerance {
        rtol: 1e-4,
        atol: 1e-6,
    };

    /// `D − K`: the diagonal holds row sums up to `n`.
    pub fn unnormalized_laplacian(n: usize) -> Tolerance {
        Tolerance {
            rtol: 1e-4,
            atol: 1e-6 * n as f64,
        }
    }
}

impl fmt::Display for Tolerance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.0e} rel + {:.0e} abs", self.rtol, self.atol)
    }
}

/// The largest differences between two results of the same shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Deviation {
    /// Largest `|a − b|` (infinite where exactly one side is NaN).
    pub max_abs: f64,
    /// Largest `|a − b| / max(|a|, |b|)` over entries above the absolute
    /// tolerance (below it, relative differences are rounding noise).
    pub max_rel: f64,
    /// Whether every entry is within the tolerance (NaN only where both
    /// are NaN: empty neighbourhoods must agree).
    pub ok: bool,
    /// The tolerance applied.
    pub tolerance: Tolerance,
}

impl Deviation {
    /// Compares `a` with `b` (same shape) under `tolerance`.
    pub fn between<D: Dimension>(
        a: ArrayView<'_, f32, D>,
        b: ArrayView<'_, f32, D>,
        tolerance: Tolerance,
    ) -> Deviation {
        let mut d = Deviation {
            max_abs: 0.0,
            max_rel: 0.0,
            ok: a.shape() == b.shape(),
            tolerance,
        };
        if !d.ok {
            d.max_abs = f64::INFINITY;
            d.max_rel = f64::INFINITY;
            return d;
        }
        Zip::from(&a).and(&b).for_each(|&x, &y| {
            let (x, y) = (f64::from(x), f64::from(y));
            if x.is_nan() && y.is_nan() {
                return;
            }
            let err = (x - y).abs();
            if err.is_nan() {
                // One side NaN (or both infinite, which inputs rule out).
                d.max_abs = f64::INFINITY;
                d.max_rel = f64::INFINITY;
                d.ok = false;
                return;
            }
            let scale = x.abs().max(y.abs());
            d.max_abs = d.max_abs.max(err);
            if scale > tolerance.atol {
                d.max_rel = d.max_rel.max(err / scale);
            }
            if err > tolerance.rtol * scale + tolerance.atol {
                d.ok = false;
            }
        });
        d
    }

    /// The deviation as a JSON object.
    pub fn to_json(self) -> Value {
        json!({
            "max_abs": finite_or_null(self.max_abs),
            "max_rel": finite_or_null(self.max_rel),
            "rtol": self.tolerance.rtol,
            "atol": self.tolerance.atol,
            "ok": self.ok,
        })
    }
}

impl fmt::Display for Deviation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "max |Δ| {:.2e}, max rel {:.2e} (tolerance {}): {}",
            self.max_abs,
            self.max_rel,
            self.tolerance,
            if self.ok { "ok" } else { "EXCEEDED" }
        )
    }
}

/// JSON has no infinity: a disagreement in NaN-ness is written as null.
fn finite_or_null(v: f64) -> Value {
    if v.is_finite() { json!(v) } else { Value::Null }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    #[test]
    fn within_and_beyond_tolerance() {
        let t = Tolerance::MATRIX;
        let a = array![[1.0f32, 0.0, f32::NAN]];
        let b = array![[1.00005f32, 5e-7, f32::NAN]];
        let d = Deviation::between(a.view(), b.view(), t);
        assert!(d.ok, "{d}");
        assert!((d.max_abs - 5e-5).abs() < 1e-6);
        // 0 vs 5e-7 lies below the absolute tolerance: not a relative error of 1.
        assert!(d.max_rel < 1e-4, "{d}");
        let c = array![[1.001f32, 0.0, f32::NAN]];
        assert!(!Deviation::between(a.view(), c.view(), t).ok);
        let e = array![[1.0f32, 0.0, 0.5]];
        let d = Deviation::between(a.view(), e.view(), t);
        assert!(!d.ok && d.max_abs.is_infinite());
        assert_eq!(d.to_json()["max_abs"], Value::Null);
    }
}
