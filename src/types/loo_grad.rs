//! The per-row sums of the leave-one-out error's gradient with respect to
//! per-feature bandwidths (docs/numerics.md, "Per-feature bandwidths"),
//! their associative merge, and the error and gradient they give.
//!
//! For row `i` (a point, its own key left out), with `u_ja = (x_ja −
//! x_ia)/h_a`, `t_j = Σ_a u_ja²`, weights `K_j = k(t_j)` and targets
//! centred on the row's own, `δ_j = y_j − y_i`, one record holds, all
//! relative to the row's largest log-weight `m` (0 for the plain
//! profiles):
//!
//! `m | S = Σ K_j | W_c = Σ K_j δ_jc | G_a = Σ k'_j u_ja² | H_ac = Σ k'_j u_ja² δ_jc`
//!
//! (`q` columns `c`, `d` features `a`; `k'_j = k'(t_j)`). Since
//! `∂K_j/∂ln h_a = −2 k'_j u_ja²`, the error `‖W/S‖²` and its derivative
//! follow from these sums alone ([`GradStates::error_and_gradient`]).

use crate::error::Result;
use crate::matrix::try_vec;

/// The records of every row (`n × stride`, row-major; module docs).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GradStates {
    /// Features.
    pub d: usize,
    /// Value columns.
    pub q: usize,
    /// `n × stride` records.
    pub data: Vec<f64>,
}

impl GradStates {
    /// `n` empty records (`m = −inf`, every sum 0), or a typed error for
    /// `op` when they cannot be allocated.
    pub(crate) fn empty(op: &'static str, n: usize, d: usize, q: usize) -> Result<Self> {
        let stride = Self::stride_of(d, q);
        let mut data = try_vec(op, "gradient states", (n * stride) as u64, 0.0)?;
        for r in data.chunks_exact_mut(stride) {
            r[0] = f64::NEG_INFINITY;
        }
        Ok(GradStates { d, q, data })
    }

    /// A record's width: `2 + q + d + d·q`.
    pub(crate) fn stride_of(d: usize, q: usize) -> usize {
        2 + q + d + d * q
    }

    /// This set's record width.
    pub(crate) fn stride(&self) -> usize {
        Self::stride_of(self.d, self.q)
    }

    /// Number of rows.
    pub(crate) fn rows(&self) -> usize {
        self.data.len() / self.stride()
    }

    /// Row `i`'s record.
    pub(crate) fn row(&self, i: usize) -> &[f64] {
        let s = self.stride();
        &self.data[i * s..(i + 1) * s]
    }

    /// Row `i`'s record, to write.
    pub(crate) fn row_mut(&mut self, i: usize) -> &mut [f64] {
        let s = self.stride();
        &mut self.data[i * s..(i + 1) * s]
    }

    /// The leave-one-out error `mean_i ‖y_i − m_i‖²` over the rows with
    /// a prediction (`S > 0`), its gradient with respect to `ln h_a`, and
    /// the number of rows without a prediction (error NaN when none has
    /// one; gradient then 0).
    ///
    /// With `r_i = W/S = m_i − y_i`: `‖y_i − m_i‖² = ‖r_i‖²` and
    /// `∂r_ic/∂ln h_a = −2 (H_ac − r_ic G_a)/S`.
    pub(crate) fn error_and_gradient(&self) -> (f64, Vec<f64>, usize) {
        let (d, q) = (self.d, self.q);
        let mut total = 0.0;
        let mut grad = vec![0.0; d];
        let mut counted = 0usize;
        for i in 0..self.rows() {
            let rec = self.row(i);
            let s = rec[1];
            if !(s > 0.0 && s.is_finite()) {
                continue;
            }
            counted += 1;
            let (w, rest) = rec[2..].split_at(q);
            let (g, h) = rest.split_at(d);
            for c in 0..q {
                let r = w[c] / s;
                total += r * r;
                for (a, ga) in grad.iter_mut().enumerate() {
                    *ga += -4.0 * r * (h[a * q + c] - r * g[a]) / s;
                }
            }
        }
        if counted == 0 {
            return (f64::NAN, grad, self.rows());
        }
        let n = counted as f64;
        grad.iter_mut().for_each(|g| *g /= n);
        (total / n, grad, self.rows() - counted)
    }
}

/// Merges record `b` into `a` (same width): the row's largest
/// log-weight is the larger of the two, and the other's sums are scaled
/// by `e^{m_other − m}` — every sum alike, the slope sums too. A record
/// with `S = 0` (no key) leaves the other unchanged.
pub(crate) fn merge_record(a: &mut [f64], b: &[f64]) {
    if b[1] <= 0.0 {
        return;
    }
    if a[1] <= 0.0 {
        a.copy_from_slice(b);
        return;
    }
    let m = a[0].max(b[0]);
    let (sa, sb) = ((a[0] - m).exp(), (b[0] - m).exp());
    a[0] = m;
    for (x, &y) in a[1..].iter_mut().zip(&b[1..]) {
        *x = *x * sa + y * sb;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Merging two halves of a row's keys gives the record of all of
    /// them, in either order, whatever their maxima.
    #[test]
    fn records_merge_associatively() {
        let rec = |m: f64, scale: f64| {
            let mut r = vec![m, 2.0 * scale];
            r.extend((0..GradStates::stride_of(2, 1) - 2).map(|k| (k as f64 + 1.0) * scale));
            r
        };
        let a = rec(-1.0, 1.0);
        let b = rec(-3.0, 0.5);
        let mut ab = a.clone();
        merge_record(&mut ab, &b);
        let mut ba = b.clone();
        merge_record(&mut ba, &a);
        for (x, y) in ab.iter().zip(&ba) {
            assert!((x - y).abs() < 1e-15);
        }
        assert_eq!(ab[0], -1.0);
        assert!((ab[1] - (2.0 + 1.0 * (-2.0f64).exp())).abs() < 1e-15);
        let mut e = GradStates::empty("t", 1, 2, 1).unwrap();
        merge_record(e.row_mut(0), &a);
        assert_eq!(e.row(0), &a[..]);
        let (err, _, empty) = GradStates::empty("t", 3, 2, 1)
            .unwrap()
            .error_and_gradient();
        assert!(err.is_nan());
        assert_eq!(empty, 3);
    }
}
