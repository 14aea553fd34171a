//! The leave-one-out gradient's row sums on the CPU: one fused pass over
//! the keys per row (rayon over rows), in blocks of [`BLOCK`] keys laid
//! out coordinate by coordinate, so every inner loop runs over a block's
//! keys and LLVM vectorizes it. The CPU twin of `shaders/loo_grad.wgsl`.
//!
//! Each block's sums are formed in `f32` relative to the block's largest
//! log-weight (exponential profiles; 0 for the others) and merged into
//! the row's `f64` record by the rule every backend shares
//! ([`merge_record`]): the slope sums are shifted with the weights
//! (docs/numerics.md, "Per-feature bandwidths").

use rayon::prelude::*;

use crate::cancel::Checkpoint;
use crate::error::Result;
use crate::kernel::Profile;
use crate::kernel::form::{Form, with_form};
use crate::kernel::slope::slope;
use crate::matrix::{Matrix, padded_stride};
use crate::types::{GradStates, merge_record};

/// Keys per block: a block's coordinates, targets and weights stay in
/// the first-level cache for `d, q ≤ 16`.
const BLOCK: usize = 256;

/// The gradient states of every point of `x` (already divided by the
/// bandwidths, `n × d`) with targets `y` (`n × q`), each row leaving its
/// own key out.
pub(crate) fn loo_grad_states(
    profile: Profile,
    x: &Matrix<'_>,
    y: &Matrix<'_>,
) -> Result<GradStates> {
    const OP: &str = "loo_error_per_feature";
    let (n, d, q) = (x.rows(), x.cols(), y.cols());
    let mut states = GradStates::empty(OP, n, d, q)?;
    let xt = x.transposed(OP, "points")?;
    let yt = y.transposed(OP, "values")?;
    let stride = states.stride();
    let cp = Checkpoint::current(OP);
    let run = Row {
        profile,
        x: x.as_slice(),
        y: y.as_slice(),
        xt: &xt,
        yt: &yt,
        n,
        ld: padded_stride(n),
        d,
        q,
    };
    states
        .data
        .par_chunks_mut(stride)
        .enumerate()
        .for_each_init(
            || Scratch::new(d, q),
            |scratch, (i, rec)| {
                if !cp.is_cancelled() {
                    run.row(i, rec, scratch);
                }
            },
        );
    cp.check()?;
    Ok(states)
}

/// What every row of one call reads.
struct Row<'a> {
    profile: Profile,
    x: &'a [f32],
    y: &'a [f32],
    /// Coordinate-major copies (`d` and `q` columns of stride `ld`).
    xt: &'a [f32],
    yt: &'a [f32],
    n: usize,
    ld: usize,
    d: usize,
    q: usize,
}

/// One worker's buffers.
struct Scratch {
    t: Vec<f32>,
    w: Vec<f32>,
    c: Vec<f32>,
    e: Vec<f32>,
    block: Vec<f64>,
}

impl Scratch {
    fn new(d: usize, q: usize) -> Self {
        Scratch {
            t: vec![0.0; BLOCK],
            w: vec![0.0; BLOCK],
            c: vec![0.0; BLOCK],
            e: vec![0.0; BLOCK],
            block: vec![0.0; GradStates::stride_of(d, q)],
        }
    }
}

/// `Σ a_j` in `f32`, in eight interleaved partial sums (vectorizes).
#[inline(always)]
fn sum(a: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let mut chunks = a.chunks_exact(8);
    for ch in &mut chunks {
        for (s, &v) in acc.iter_mut().zip(ch) {
            *s += v;
        }
    }
    let tail: f32 = chunks.remainder().iter().sum();
    acc.iter().sum::<f32>() + tail
}

/// `Σ a_j (b_j − o)` in `f32`, likewise.
#[inline(always)]
fn dot_centred(a: &[f32], b: &[f32], o: f32) -> f32 {
    let mut acc = [0.0f32; 8];
    let mut ca = a.chunks_exact(8);
    let mut cb = b.chunks_exact(8);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for k in 0..8 {
            acc[k] += x[k] * (y[k] - o);
        }
    }
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(&x, &y)| x * (y - o))
        .sum();
    acc.iter().sum::<f32>() + tail
}

impl Row<'_> {
    /// Row `i`'s record over every key but its own.
    fn row(&self, i: usize, rec: &mut [f64], s: &mut Scratch) {
        let (n, ld, d, q) = (self.n, self.ld, self.d, self.q);
        let xi = &self.x[i * d..(i + 1) * d];
        let yi = &self.y[i * q..(i + 1) * q];
        let log = self.profile.is_exponential();
        for j0 in (0..n).step_by(BLOCK) {
            let len = BLOCK.min(n - j0);
            let t = &mut s.t[..len];
            t.fill(0.0);
            for (a, &xa) in xi.iter().enumerate() {
                let col = &self.xt[a * ld + j0..a * ld + j0 + len];
                for (tj, &v) in t.iter_mut().zip(col) {
                    let u = v - xa;
                    *tj += u * u;
                }
            }
            if (j0..j0 + len).contains(&i) {
                t[i - j0] = f32::INFINITY;
            }
            // Weights (log-weights first for the exponential profiles)
            // and slopes.
            let w = &mut s.w[..len];
            with_form!(self.profile, F => {
                for (wj, &tj) in w.iter_mut().zip(t.iter()) {
                    *wj = F::lane(tj);
                }
            });
            let mb = if log {
                let mb = w.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
                if mb == f32::NEG_INFINITY {
                    continue;
                }
                for wj in w.iter_mut() {
                    *wj = (*wj - mb).exp();
                }
                mb
            } else {
                0.0
            };
            let c = &mut s.c[..len];
            let p = self.profile;
            for ((cj, &tj), &wj) in c.iter_mut().zip(t.iter()).zip(w.iter()) {
                let k = slope(p, tj);
                *cj = if log { wj * k } else { k };
            }
            let b = &mut s.block;
            b[0] = f64::from(mb);
            b[1] = f64::from(sum(w));
            if b[1] <= 0.0 {
                continue;
            }
            for (cc, &yc) in yi.iter().enumerate() {
                let col = &self.yt[cc * ld + j0..cc * ld + j0 + len];
                b[2 + cc] = f64::from(dot_centred(w, col, yc));
            }
            let e = &mut s.e[..len];
            for (a, &xa) in xi.iter().enumerate() {
                let col = &self.xt[a * ld + j0..a * ld + j0 + len];
                for ((ej, &cj), &v) in e.iter_mut().zip(c.iter()).zip(col) {
                    let u = v - xa;
                    // A key without weight adds nothing, even where its
                    // offset overflows (0·∞).
                    let v2 = cj * (u * u);
                    *ej = if cj != 0.0 { v2 } else { 0.0 };
                }
                b[2 + q + a] = f64::from(sum(e));
                for (cc, &yc) in yi.iter().enumerate() {
                    let col = &self.yt[cc * ld + j0..cc * ld + j0 + len];
                    b[2 + q + d + a * q + cc] = f64::from(dot_centred(e, col, yc));
                }
            }
            merge_record(rec, b);
        }
        if rec[1] <= 0.0 {
            rec.fill(0.0);
            rec[0] = f64::NEG_INFINITY;
        }
    }
}
