//! Local moments (docs/numerics.md, "Local moments"): per query, the
//! kernel-weighted averages of products of the keys' offsets `r = x − q`
//! and their values, in one pass over the keys.
//!
//! Each query streams the keys in blocks of [`KEY_BLOCK`]: the block's
//! weights come from `weights.rs` (log domain for the exponential
//! profiles), its sums are formed in `f32` and added to the row's `f64`
//! sums, rescaled when the running maximum log-weight moves — the local
//! mean's two-level summation with the moments in place of the values.

use rayon::prelude::*;

use super::simd::{KEY_BLOCK, Portable};
use super::weights::{block_weights, initial_max};
use crate::error::Result;
use crate::kernel::Kernel;
use crate::matrix::{Matrix, alloc_output};
use crate::types::{MomentLayout, RowNormalized};

/// Per-thread buffers of one row.
struct Scratch {
    t: Vec<f32>,
    f: Vec<f32>,
    block: Vec<f32>,
    sums: Vec<f64>,
}

impl Scratch {
    fn new(layout: &MomentLayout) -> Self {
        Scratch {
            t: vec![0.0; KEY_BLOCK],
            f: vec![0.0; layout.one() + 1],
            block: vec![0.0; layout.cols()],
            sums: vec![0.0; layout.cols()],
        }
    }
}

/// Local moments of every query: `M × layout.cols()` averages, NaN rows
/// (counted) without mass.
pub(crate) fn local_moments(
    kernel: &Kernel,
    queries: &Matrix<'_>,
    keys: &Matrix<'_>,
    values: Option<&Matrix<'_>>,
    layout: MomentLayout,
) -> Result<RowNormalized> {
    const OP: &str = "local_moments";
    let (m, p) = (queries.rows(), layout.cols());
    let mut out = alloc_output(OP, "moments", m, p)?;
    let empty = out
        .par_chunks_mut(p)
        .enumerate()
        .map_init(
            || Scratch::new(&layout),
            |sc, (i, row)| {
                let q = queries.row_range(i, i + 1);
                !moments_row(kernel, q, keys, values, &layout, sc, row)
            },
        )
        .filter(|&e| e)
        .count();
    Ok(RowNormalized::from_parts(m, p, out, empty))
}

/// One query's moments into `out`; `false` (and NaN) when it has no mass.
fn moments_row(
    kernel: &Kernel,
    q: &[f32],
    keys: &Matrix<'_>,
    values: Option<&Matrix<'_>>,
    layout: &MomentLayout,
    sc: &mut Scratch,
    out: &mut [f32],
) -> bool {
    let (d, qy) = (layout.d, layout.qy);
    let n = keys.rows();
    let x = keys.as_slice();
    let y = values.map(|v| v.as_slice());
    let inv_h2 = kernel.inv_h2();
    let mut mx = initial_max(kernel.profile());
    let mut s = 0.0f64;
    sc.sums.fill(0.0);
    sc.f[layout.one()] = 1.0;
    for j0 in (0..n).step_by(KEY_BLOCK) {
        let len = KEY_BLOCK.min(n - j0);
        let t = &mut sc.t[..len];
        for (jj, tj) in t.iter_mut().enumerate() {
            let xr = &x[(j0 + jj) * d..(j0 + jj + 1) * d];
            let mut acc = 0.0f32;
            for (&xk, &qk) in xr.iter().zip(q) {
                let df = xk - qk;
                acc += df * df;
            }
            *tj = acc * inv_h2;
        }
        let Some(factor) = block_weights::<Portable>(kernel.profile(), t, &mut mx) else {
            continue;
        };
        if factor != 1.0 {
            s *= factor;
            sc.sums.iter_mut().for_each(|u| *u *= factor);
        }
        let mut bs = 0.0f32;
        sc.block.fill(0.0);
        for (jj, &w) in t.iter().enumerate() {
            // A weightless key adds nothing (and its offsets may not be
            // finite products).
            if w == 0.0 {
                continue;
            }
            let j = j0 + jj;
            bs += w;
            for k in 0..d {
                sc.f[k] = x[j * d + k] - q[k];
            }
            if let Some(y) = y {
                sc.f[d..d + qy].copy_from_slice(&y[j * qy..(j + 1) * qy]);
            }
            accumulate(layout, w, &sc.f, &mut sc.block);
        }
        s += f64::from(bs);
        for (u, &b) in sc.sums.iter_mut().zip(&sc.block) {
            *u += f64::from(b);
        }
    }
    if s > 0.0 {
        for (o, &u) in out.iter_mut().zip(&sc.sums) {
            *o = (u / s) as f32;
        }
        true
    } else {
        out.fill(f32::NAN);
        false
    }
}

/// Adds `w·F[ia]·F[ib]` for every column of `layout` (in its order).
#[inline]
fn accumulate(layout: &MomentLayout, w: f32, f: &[f32], block: &mut [f32]) {
    let (d, qy) = (layout.d, layout.qy);
    for (b, &fc) in block.iter_mut().zip(&f[..d + qy]) {
        *b += w * fc;
    }
    if !layout.second {
        return;
    }
    let mut idx = d + qy;
    for a in 0..d {
        let wa = w * f[a];
        for &fb in &f[a..d] {
            block[idx] += wa * fb;
            idx += 1;
        }
    }
    for a in 0..d {
        let wa = w * f[a];
        for &fc in &f[d..d + qy] {
            block[idx] += wa * fc;
            idx += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accumulation_follows_the_layout() {
        let layout = MomentLayout {
            d: 3,
            qy: 2,
            second: true,
        };
        let f = [1.5f32, -2.0, 0.5, 3.0, -1.0, 1.0];
        let mut block = vec![0.0; layout.cols()];
        accumulate(&layout, 2.0, &f, &mut block);
        for (c, &b) in block.iter().enumerate() {
            let (ia, ib) = layout.factors(c);
            assert_eq!(b, 2.0 * f[ia] * f[ib], "column {c}");
        }
    }
}
